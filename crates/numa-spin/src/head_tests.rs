//! Tests of the queue head's waiting policy ([`crate::node::HeadWait`], the
//! `HEAD_ASLEEP` hint, bounded stealing), run on every lock that uses it: CNA
//! (`cna`, through `RawTunedMutex`) and HQ (`hq`, through
//! `RawHqLock<&'static Config>`; every test here runs it in plain mode, where
//! its first waiter is the global head). Lock-specific tests stay beside their
//! lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::Config;
use crate::node;
use crate::word::{HEAD_ASLEEP, NO_STEAL, TAIL_FLAGS};

/// A queue lock whose head waits with [`crate::node::HeadWait`], as the tests
/// see it.
pub(crate) trait TestLock: Send + Sync + 'static {
    /// A lock with its own tunables.
    fn with_test_config(cfg: &'static Config) -> Self;
    /// `lock()`.
    fn lock(&self);
    /// `unlock()`.
    ///
    /// # Safety
    ///
    /// The caller holds the lock.
    unsafe fn unlock(&self);
    /// `try_lock()`.
    fn try_lock(&self) -> bool;
    /// The tail word (flags in bits 0 and 1, see [`crate::raw_lock`]).
    fn tail(&self) -> &AtomicU32;
    /// The queue-node code of the newest waiter that tail word `t` names, 0
    /// if it names none.
    fn newest(t: u32) -> u32;
    /// The tail word (no flags) that names queue node `code` as the newest
    /// and only waiter: the inverse of [`newest`](TestLock::newest).
    fn naming(code: u32) -> u32;
    /// The lock's counters.
    #[cfg(feature = "stats")]
    fn stats(&self) -> crate::Stats;
}

/// Waits (at most 10 s) until the tail names a queue node not in `seen`,
/// that is, until a newly spawned waiter has enqueued; returns its code.
pub(crate) fn await_new_tail<L: TestLock>(lock: &L, seen: &[u32]) -> u32 {
    let start = Instant::now();
    loop {
        let code = L::newest(lock.tail().load(Ordering::SeqCst));
        if code != 0 && !seen.contains(&code) {
            return code;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "waiter never queued"
        );
        std::thread::yield_now();
    }
}

/// Spawns a waiter that takes `lock` once and returns the tail word it read
/// while holding it; returns after the waiter has enqueued (its code is
/// pushed onto `codes`).
pub(crate) fn queue_tail_reader<L: TestLock>(
    lock: &Arc<L>,
    codes: &mut Vec<u32>,
) -> std::thread::JoinHandle<u32> {
    let l = lock.clone();
    let waiter = std::thread::spawn(move || {
        l.lock();
        let tail = l.tail().load(Ordering::SeqCst);
        // SAFETY: acquired above.
        unsafe { l.unlock() };
        tail
    });
    codes.push(await_new_tail(&**lock, codes));
    waiter
}

/// Waits (at most `within`) until `bit` of `lock`'s tail word is `set`; fails
/// with `what` if it does not get there in time.
pub(crate) fn await_tail_bit<L: TestLock>(
    lock: &L,
    bit: u32,
    set: bool,
    within: Duration,
    what: &str,
) {
    let start = Instant::now();
    while (lock.tail().load(Ordering::SeqCst) & bit != 0) != set {
        assert!(start.elapsed() < within, "{what}");
        std::thread::yield_now();
    }
}

/// Checks for `period` that `bit` of `lock`'s tail word stays clear; fails
/// with `what` if it is ever set.
pub(crate) fn tail_bit_stays_clear<L: TestLock>(lock: &L, bit: u32, period: Duration, what: &str) {
    let start = Instant::now();
    while start.elapsed() < period {
        assert_eq!(lock.tail().load(Ordering::SeqCst) & bit, 0, "{what}");
        std::thread::yield_now();
    }
}

static SPIN_60S: Config = Config::DEFAULT.spin_budget_ns(60_000_000_000);
static SPIN_1S: Config = Config::DEFAULT.spin_budget_ns(1_000_000_000);
static NAP_AT_ONCE: Config = Config::DEFAULT.spin_budget_ns(0);

/// An arrival that finds the lock held while the queue head sleeps
/// (`HEAD_ASLEEP`) spins for the lock word instead of queueing behind it, and
/// queues once the head runs again.
pub(crate) fn arrival_spins_instead_of_queueing_behind_a_sleeping_head<L: TestLock>() {
    let lock = Arc::new(L::with_test_config(&SPIN_60S));
    lock.lock();
    // The flag a napping head sets (set by hand: the arrival reads only it).
    lock.tail().fetch_or(HEAD_ASLEEP, Ordering::SeqCst);
    let started = Arc::new(AtomicBool::new(false));
    let (l, st) = (lock.clone(), started.clone());
    let arrival = std::thread::spawn(move || {
        st.store(true, Ordering::SeqCst);
        l.lock();
        // SAFETY: acquired above.
        unsafe { l.unlock() };
    });
    while !started.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        assert_eq!(
            lock.tail().load(Ordering::SeqCst) & !TAIL_FLAGS,
            0,
            "the arrival queued behind a sleeping head"
        );
        std::thread::yield_now();
    }
    // The head runs again: the arrival, still waiting, queues now.
    lock.tail().fetch_and(!HEAD_ASLEEP, Ordering::SeqCst);
    await_new_tail(&*lock, &[]);
    // SAFETY: acquired above.
    unsafe { lock.unlock() };
    arrival.join().unwrap();
    assert_eq!(lock.tail().load(Ordering::SeqCst), 0);
}

/// An arrival spinning behind a sleeping queue head while the lock is held
/// reads the lock word and tries it only once it is free: none of its spins
/// takes the word's line from the holder, so it makes one compare-and-swap on
/// the word (its fast path's) before it queues (`Stats::steal_attempts`).
#[cfg(feature = "stats")]
pub(crate) fn arrival_behind_a_sleeping_head_reads_a_held_word<L: TestLock>() {
    static ONE_WATCHER: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _watching = ONE_WATCHER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let lock = Arc::new(L::with_test_config(&SPIN_60S));
    lock.lock();
    // The flag a napping head sets (set by hand: the arrival reads only it).
    lock.tail().fetch_or(HEAD_ASLEEP, Ordering::SeqCst);
    node::tests::watch_asleep_spins(Some(lock.tail()));
    let before = lock.stats().steal_attempts;
    let l = lock.clone();
    let arrival = std::thread::spawn(move || {
        l.lock();
        // SAFETY: acquired above.
        unsafe { l.unlock() };
    });
    let start = Instant::now();
    while node::tests::watched_spins() < 100 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the arrival never spun behind the sleeping head"
        );
        std::thread::yield_now();
    }
    // The head runs again: the arrival queues.
    lock.tail().fetch_and(!HEAD_ASLEEP, Ordering::SeqCst);
    await_new_tail(&*lock, &[]);
    let spins = node::tests::watched_spins();
    let attempts = lock.stats().steal_attempts - before;
    node::tests::watch_asleep_spins(None);
    // SAFETY: acquired above.
    unsafe { lock.unlock() };
    arrival.join().unwrap();
    assert_eq!(
        attempts, 1,
        "compare-and-swaps on the held word by one arrival in {spins} spins"
    );
}

/// An arrival that finds the queue head asleep spins for the lock word only
/// while stealing is allowed: in strict FIFO (`steal_bound_ns == 0`, so
/// `NO_STEAL` is set from the first enqueue until the queue is empty) the
/// steal it would wait for is forbidden, and it queues without spinning. The
/// head spends its 50 ms budget and naps, marked `HEAD_ASLEEP`, while this
/// thread holds the lock; then an arrival comes, and is seen to queue; the
/// arrival reports how often it waited in the spin
/// ([`node::tests::asleep_spins`]).
pub(crate) fn arrival_spins_behind_a_sleeping_head_only_while_it_may_steal<L: TestLock>() {
    static STRICT: Config = Config::DEFAULT.spin_budget_ns(50_000_000).steal_bound_ns(0);
    static STEALING: Config = STRICT.steal_bound_ns(u64::MAX);
    for (cfg, spins) in [(&STRICT, false), (&STEALING, true)] {
        let lock = Arc::new(L::with_test_config(cfg));
        lock.lock();
        let mut codes = Vec::new();
        let head = queue_tail_reader(&lock, &mut codes);
        let what = "the head never napped";
        await_tail_bit(&*lock, HEAD_ASLEEP, true, Duration::from_secs(10), what);
        assert_eq!(
            lock.tail().load(Ordering::SeqCst) & NO_STEAL != 0,
            !spins,
            "NO_STEAL with steal bound {}",
            cfg.steal_bound_ns
        );
        let l = lock.clone();
        let arrival = std::thread::spawn(move || {
            l.lock();
            // SAFETY: acquired above.
            unsafe { l.unlock() };
            node::tests::asleep_spins()
        });
        codes.push(await_new_tail(&*lock, &codes));
        // SAFETY: acquired above.
        unsafe { lock.unlock() };
        head.join().unwrap();
        let waits = arrival.join().unwrap();
        assert_eq!(
            waits > 0,
            spins,
            "steal bound {}: the arrival waited {waits} times in the spin",
            cfg.steal_bound_ns
        );
        assert_eq!(lock.tail().load(Ordering::SeqCst), 0);
    }
}

/// A queue head that has spent its spin budget naps and marks itself asleep
/// (`HEAD_ASLEEP`) while the lock stays held; one that still spins (its budget
/// is not spent) is running and does not, so arrivals queue behind it.
pub(crate) fn napping_head_marks_itself_asleep<L: TestLock>() {
    for (cfg, naps) in [(&NAP_AT_ONCE, true), (&SPIN_60S, false)] {
        let lock = Arc::new(L::with_test_config(cfg));
        lock.lock();
        let head = queue_tail_reader(&lock, &mut Vec::new());
        if naps {
            let what = "the napping head never set HEAD_ASLEEP";
            await_tail_bit(&*lock, HEAD_ASLEEP, true, Duration::from_secs(10), what);
        } else {
            let what = "a spinning head marked itself asleep";
            tail_bit_stays_clear(&*lock, HEAD_ASLEEP, Duration::from_millis(100), what);
        }
        // SAFETY: acquired above.
        unsafe { lock.unlock() };
        assert_eq!(head.join().unwrap() & HEAD_ASLEEP, 0);
        assert_eq!(lock.tail().load(Ordering::SeqCst), 0);
    }
}

/// A queue head that napped lifts `HEAD_ASLEEP` once it holds the lock, so
/// arrivals queue behind its (running) successor again. The head naps after
/// its 1 s spin budget; its successor arrives after that (so it spins its own
/// 1 s budget for the lock word before it queues) and has only just queued
/// when the head takes the lock: it still spins (had it parked, the hand-off
/// would mark it, rightly). The successor lifts a stale mark itself as soon as
/// it is made head, so this catches a missing lift only when the head reads
/// the word first.
pub(crate) fn head_that_napped_lifts_the_mark_once_it_holds_the_lock<L: TestLock>() {
    let lock = Arc::new(L::with_test_config(&SPIN_1S));
    lock.lock();
    let mut codes = Vec::new();
    let head = queue_tail_reader(&lock, &mut codes);
    let what = "the head never napped";
    await_tail_bit(&*lock, HEAD_ASLEEP, true, Duration::from_secs(10), what);
    let successor = queue_tail_reader(&lock, &mut codes);
    // SAFETY: acquired above.
    unsafe { lock.unlock() };
    assert_eq!(
        head.join().unwrap() & HEAD_ASLEEP,
        0,
        "HEAD_ASLEEP set while the head held the lock"
    );
    successor.join().unwrap();
    assert_eq!(lock.tail().load(Ordering::SeqCst), 0);
}

/// A parked waiter made head is marked `HEAD_ASLEEP` by the hand-off that
/// wakes it, and lifts the mark as soon as it runs, while it still spins for
/// the lock (its spin budget is 1 s, so it only naps, and marks itself again,
/// after that).
pub(crate) fn woken_head_lifts_the_hand_off_mark<L: TestLock>() {
    let lock = Arc::new(L::with_test_config(&SPIN_1S));
    let (acquired, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    lock.lock();
    let mut codes = Vec::new();
    // The first waiter holds the lock until told to release it.
    let (l, got, go) = (lock.clone(), acquired.clone(), release.clone());
    let first = std::thread::spawn(move || {
        l.lock();
        // Head-ship has been handed to the second waiter by now.
        got.store(true, Ordering::SeqCst);
        while !go.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // SAFETY: acquired above.
        unsafe { l.unlock() };
    });
    codes.push(await_new_tail(&*lock, &codes));
    let second = queue_tail_reader(&lock, &mut codes);
    let start = Instant::now();
    while node::registry()
        .node(codes[1])
        .locked
        .load(Ordering::SeqCst)
        != node::PARKED
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the second waiter never parked"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: acquired above.
    unsafe { lock.unlock() };
    while !acquired.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    let what = "the woken head left the hand-off mark set while it spun";
    await_tail_bit(&*lock, HEAD_ASLEEP, false, Duration::from_millis(900), what);
    release.store(true, Ordering::SeqCst);
    first.join().unwrap();
    second.join().unwrap();
    assert_eq!(lock.tail().load(Ordering::SeqCst), 0);
}

/// A queue head that spins forbids stealing (`NO_STEAL`) once it has waited
/// the steal bound, and not before.
pub(crate) fn head_forbids_stealing_after_the_steal_bound_only<L: TestLock>() {
    static BOUND_1MS: Config = Config::DEFAULT
        .spin_budget_ns(60_000_000_000)
        .steal_bound_ns(1_000_000);
    static BOUND_60S: Config = Config::DEFAULT
        .spin_budget_ns(60_000_000_000)
        .steal_bound_ns(60_000_000_000);
    for (cfg, forbids) in [(&BOUND_1MS, true), (&BOUND_60S, false)] {
        let lock = Arc::new(L::with_test_config(cfg));
        lock.lock();
        let head = queue_tail_reader(&lock, &mut Vec::new());
        if forbids {
            let what = "the head never forbade stealing";
            await_tail_bit(&*lock, NO_STEAL, true, Duration::from_secs(10), what);
        } else {
            let what = "the head forbade stealing before its bound";
            tail_bit_stays_clear(&*lock, NO_STEAL, Duration::from_millis(100), what);
        }
        // SAFETY: acquired above.
        unsafe { lock.unlock() };
        head.join().unwrap();
    }
}

/// An arrival that finds the lock free while the queue head forbids stealing
/// (`NO_STEAL`) watches the lock word for the steal bound and then takes the
/// lock past the mark, without queueing: a running head would have taken a
/// free lock long before, so this one is not running (preempted while it
/// spun, before it could lift the mark). The head here is this thread's own
/// queue node, put in the tail by hand with the mark, which nobody will ever
/// make run: an arrival that queued behind it would wait forever.
pub(crate) fn arrival_takes_a_free_lock_past_an_absent_heads_mark<L: TestLock>() {
    static BOUND_1MS: Config = Config::DEFAULT.steal_bound_ns(1_000_000);
    let me = node::current(std::ptr::null()).expect("a queue node for the test thread");
    me.node.next.store(0, Ordering::SeqCst);
    let lock = Arc::new(L::with_test_config(&BOUND_1MS));
    let absent = L::naming(me.code) | NO_STEAL;
    lock.tail().store(absent, Ordering::SeqCst);
    let l = lock.clone();
    let arrival = std::thread::spawn(move || {
        let start = Instant::now();
        l.lock();
        let waited = start.elapsed();
        // SAFETY: acquired above.
        unsafe { l.unlock() };
        waited
    });
    let start = Instant::now();
    while !arrival.is_finished() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the arrival waited behind a head that does not run"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let waited = arrival.join().unwrap();
    assert!(
        waited >= Duration::from_millis(1),
        "took the lock past the mark after {waited:?}, before the 1 ms steal bound"
    );
    assert_eq!(
        lock.tail().load(Ordering::SeqCst),
        absent,
        "the arrival queued"
    );
    assert_eq!(
        me.node.next.load(Ordering::SeqCst),
        0,
        "the arrival linked behind the head"
    );
    lock.tail().store(0, Ordering::SeqCst);
}

/// A queue head past its steal bound keeps the lock's next release through
/// its naps: it forbids stealing (`NO_STEAL`) while it naps (`HEAD_ASLEEP`),
/// so after the holder's release `try_lock` fails until the head has taken
/// and released the lock.
pub(crate) fn napping_head_past_its_bound_keeps_the_next_release<L: TestLock>() {
    static NAP_BOUND_1US: Config = NAP_AT_ONCE.steal_bound_ns(1_000);
    let lock = Arc::new(L::with_test_config(&NAP_BOUND_1US));
    lock.lock();
    let served = Arc::new(AtomicBool::new(false));
    let (l, s) = (lock.clone(), served.clone());
    let head = std::thread::spawn(move || {
        l.lock();
        s.store(true, Ordering::SeqCst);
        // SAFETY: acquired above.
        unsafe { l.unlock() };
    });
    await_new_tail(&*lock, &[]);
    let start = Instant::now();
    while lock.tail().load(Ordering::SeqCst) & (NO_STEAL | HEAD_ASLEEP) != NO_STEAL | HEAD_ASLEEP {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the head never napped with stealing forbidden"
        );
        std::thread::yield_now();
    }
    // SAFETY: acquired above.
    unsafe { lock.unlock() };
    // The lock is free now, and the head naps: only the head may take it.
    // `served` is read after a successful try_lock: the head stores it before
    // its release, which our try_lock acquires, so false means the head has
    // not held the lock yet. (Read before the try_lock, it could be stale:
    // the head may take the lock, store it and release in between.)
    loop {
        if lock.try_lock() {
            assert!(
                served.load(Ordering::SeqCst),
                "try_lock took the release kept for the napping head"
            );
            // SAFETY: acquired just now.
            unsafe { lock.unlock() };
            break;
        }
        std::thread::yield_now();
    }
    head.join().unwrap();
    assert_eq!(lock.tail().load(Ordering::SeqCst), 0);
}

/// One `#[test]` per shared test above, for lock type `$lock`.
macro_rules! head_tests {
    ($name:ident, $lock:ty) => {
        mod $name {
            #[test]
            fn arrival_spins_instead_of_queueing_behind_a_sleeping_head() {
                super::arrival_spins_instead_of_queueing_behind_a_sleeping_head::<$lock>();
            }
            #[cfg(feature = "stats")]
            #[test]
            fn arrival_behind_a_sleeping_head_reads_a_held_word() {
                super::arrival_behind_a_sleeping_head_reads_a_held_word::<$lock>();
            }
            #[test]
            fn arrival_spins_behind_a_sleeping_head_only_while_it_may_steal() {
                super::arrival_spins_behind_a_sleeping_head_only_while_it_may_steal::<$lock>();
            }
            #[test]
            fn napping_head_marks_itself_asleep() {
                super::napping_head_marks_itself_asleep::<$lock>();
            }
            #[test]
            fn head_that_napped_lifts_the_mark_once_it_holds_the_lock() {
                super::head_that_napped_lifts_the_mark_once_it_holds_the_lock::<$lock>();
            }
            #[test]
            fn woken_head_lifts_the_hand_off_mark() {
                super::woken_head_lifts_the_hand_off_mark::<$lock>();
            }
            #[test]
            fn head_forbids_stealing_after_the_steal_bound_only() {
                super::head_forbids_stealing_after_the_steal_bound_only::<$lock>();
            }
            #[test]
            fn napping_head_past_its_bound_keeps_the_next_release() {
                super::napping_head_past_its_bound_keeps_the_next_release::<$lock>();
            }
            #[test]
            fn arrival_takes_a_free_lock_past_an_absent_heads_mark() {
                super::arrival_takes_a_free_lock_past_an_absent_heads_mark::<$lock>();
            }
        }
    };
}

head_tests!(cna, crate::RawTunedMutex);
head_tests!(hq, crate::RawHqLock<&'static crate::Config>);
