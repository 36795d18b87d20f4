//! The stealing rules: taking the lock word outside the queue, ahead of it
//! ([`try_steal`], [`try_steal_free`]), past a head that is not running
//! ([`steal_while_head_asleep`], [`steal_past_absent_head`]) and without a
//! queue node ([`lock_unqueued`]). Shared by CNA, the queued lock and HQ, whose
//! lock words have the same layout (see [`crate::raw_lock`]).

use super::head_wait::HEAD_NAP_NS;
use crate::sync::{AtomicU32, Ordering};

/// One attempt at the lock word `locked` ahead of the queue (the fast path's
/// and `try_lock`'s): takes it if it is free and the queue head has not
/// forbidden stealing (`NO_STEAL` in `tail`). A compare-and-swap whether or
/// not the word is free: one access to an uncontended line, not a read and
/// then a write. `on_attempt` runs just before the compare-and-swap (the
/// `stats` feature's `steal_attempts` counter). With a non-empty queue, and
/// some lock of the process marked woken (one load of a static), the attempt
/// yields the CPU first while a thread woken for this lock has not run yet
/// ([`steal_ahead_of_queue`], `crate::blocking`).
#[inline]
pub(crate) fn try_steal(locked: &AtomicU32, tail: &AtomicU32, on_attempt: impl FnOnce()) -> bool {
    use crate::word::{NO_STEAL, TAIL_SHIFT};
    // Relaxed: NO_STEAL is a hint for fairness, not for memory safety; a stale
    // read allows one in-flight steal (see `crate::raw_lock`). The data the
    // lock protects is synchronized by the compare-and-swap. The tail code
    // only picks the path.
    let flags = tail.load(Ordering::Relaxed);
    if flags & NO_STEAL != 0 {
        return false;
    }
    if flags >> TAIL_SHIFT != 0 && super::woken::any_woken() {
        steal_ahead_of_queue(locked);
    }
    on_attempt();
    take_free_word(locked)
}

/// Before an attempt ahead of a non-empty queue: yields the CPU while a
/// thread woken for the lock (a blocking lock's sleeper, see
/// `crate::blocking`) has not run yet, so that it gets a CPU. The yield
/// comes before the attempt, outside any critical section.
#[cold]
#[inline(never)]
fn steal_ahead_of_queue(locked: &AtomicU32) {
    #[cfg(not(numa_loom))]
    if super::woken::pending(locked) {
        #[cfg(test)]
        tests::note_woken_yield();
        std::thread::yield_now();
    }
    #[cfg(numa_loom)]
    let _ = locked;
}

/// A slow-path attempt: as [`try_steal`], but only if a read finds the word
/// free (test-and-test-and-set), so a thread that keeps finding the lock held
/// reads the word's line instead of taking it from the holder, whose release
/// store would have to take it back.
#[inline]
pub(crate) fn try_steal_free(
    locked: &AtomicU32,
    tail: &AtomicU32,
    on_attempt: impl FnOnce(),
) -> bool {
    use crate::word::UNLOCKED;
    // Relaxed: only picks the moment to try; `try_steal`'s compare-and-swap
    // acquires.
    locked.load(Ordering::Relaxed) == UNLOCKED && try_steal(locked, tail, on_attempt)
}

/// While the queue head is not running (the lock's `HEAD_ASLEEP` bit in
/// `tail`, see [`crate::raw_lock`]: the head naps, or it was parked when
/// head-ship reached it and has not run since), spins for the lock word with
/// `try_steal` instead of queueing, for at most the spin budget; returns
/// whether it took the lock. Shared by CNA, the queued lock and HQ, which
/// pass their `try_steal_free` (a read of the word, and a compare-and-swap
/// only of a free one), so the spin takes no line from the holder while the
/// lock stays held.
///
/// A waiter queued behind a head that is not running cannot take the lock
/// even when it is free, and, once parked itself, is woken only when it
/// becomes head: on an oversubscribed machine running threads that arrive
/// while the lock is held would otherwise queue up behind sleeping heads
/// until every CPU idles but the holder's (a lock convoy; measured on the
/// 2-CPU development machine, `numa-bench run --workload locktorture
/// --threads 16 --cs 100ns --delay 2us`: CNA at 0.52x parking_lot and HQ at
/// 0.55x, LevelDB readrandom through numa-preload at 0.65-0.8x glibc).
/// Spinning arrivals keep the lock busy instead, as barging waiters do in
/// glibc's and parking_lot's mutexes, while the queue holds the threads that
/// have spent their budget (Dice, "Malthusian Locks", EuroSys 2017: a small
/// active set circulates, the rest stay parked). The head's steal bound
/// (`NO_STEAL`) still applies once it runs. While the head runs, arrivals
/// queue at once, so a machine with a CPU per thread keeps local spinning.
///
/// Only while stealing is allowed: the spin does not start, and ends, once
/// `NO_STEAL` is set, since every `try_steal` would then fail and the spin
/// would only burn the budget before the arrival queues anyway. The flag is
/// set by a head past its steal bound, which keeps it through its naps (so
/// past the bound arrivals leave the lock to the napping head, or take it past
/// the mark with [`steal_past_absent_head`]), by a timed waiter past its own
/// bound (`crate::timed`), and in strict FIFO (`steal_bound_ns == 0`) from the
/// first enqueue until the queue is empty, so there arrivals never spin here.
/// A head that was parked when head-ship reached it has not set it yet.
pub(crate) fn steal_while_head_asleep(
    tail: &AtomicU32,
    cfg: &crate::Config,
    mut try_steal: impl FnMut() -> bool,
) -> bool {
    use crate::word::{HEAD_ASLEEP, NO_STEAL};
    let mut spin = crate::backoff::SpinWait::new(cfg.spin_budget_ns);
    // Relaxed: hints; `try_steal`'s CAS acquires.
    while tail.load(Ordering::Relaxed) & (HEAD_ASLEEP | NO_STEAL) == HEAD_ASLEEP
        && !spin.is_yielding()
    {
        #[cfg(all(test, not(numa_loom)))]
        super::tests::note_asleep_spin(tail);
        spin.snooze();
        if try_steal() {
            return true;
        }
    }
    false
}

/// How much longer than the steal bound an arrival waits for a head that
/// forbade stealing and naps (`NO_STEAL` and `HEAD_ASLEEP` both set) before it
/// takes the free lock past the mark, ns: five naps of [`HEAD_NAP_NS`], which
/// covers one nap with Linux's default timer slack (50 us) and a wake-up delay.
pub(crate) const NAPPING_HEAD_PATIENCE_NS: u64 = 5 * HEAD_NAP_NS;

/// While the queue head forbids stealing (`NO_STEAL`) but the lock word
/// `locked` is free, watches the word for the steal bound (plus
/// [`NAPPING_HEAD_PATIENCE_NS`] while the head naps); if it is free at every
/// look, takes the lock past the mark (CAS `UNLOCKED` -> `LOCKED`) and
/// returns true. A free word without the mark (stealing is allowed) is tried
/// at once. Returns false when the word is held (or `HANDED`), at the first
/// look or any later one, and when the CAS loses; the caller then queues.
/// Shared by CNA, the queued lock and HQ.
///
/// The head sets `NO_STEAL` once it has waited the steal bound and keeps it
/// until it holds the lock ([`HeadWait`](super::HeadWait)), but a head preempted while it spins
/// cannot take the lock: it then stays free behind a mark no running thread
/// may pass, and every arrival queues and parks behind the absent head until
/// the scheduler runs it again, a whole time slice (what paravirt qspinlock's
/// hybrid mode, Linux `qspinlock_paravirt.h`, avoids by letting waiters steal
/// whenever the head is not running). A running head looks at the word at
/// least every batch of spin hints (~400 ns, see `crate::backoff`) and takes a
/// free lock at once, so a word seen free throughout the bound (10 us by
/// default, 25 times the poll interval) means the head is away. A napping head
/// (it marks each nap `HEAD_ASLEEP`) looks again when its nap ends, so it gets
/// the patience of a nap on top. A wrong guess costs the head the critical
/// section taken past its mark. The mark stays set, so arrivals that see the
/// word held meanwhile queue, and one that finds it free after the release
/// must watch it for the patience again, which a running head does not leave
/// it for; the head shares that release only with waits without a queue node
/// ([`lock_unqueued`]). Timed waiters past their own bound (`crate::timed`)
/// take a release the head has claimed (`HEAD_CLAIM`) only through this
/// function, as arrivals do. A head that keeps
/// missing the patience (preempted again, or woken later than five naps)
/// loses a critical section each time.
///
/// Only with a finite nonzero bound: strict FIFO (`steal_bound_ns == 0`)
/// keeps the mark set for the whole queue by request, and with no bound
/// (`u64::MAX`) the mark is never set.
pub(crate) fn steal_past_absent_head(
    tail: &AtomicU32,
    locked: &AtomicU32,
    cfg: &crate::Config,
) -> bool {
    use crate::word::{HEAD_ASLEEP, NO_STEAL, UNLOCKED};
    let bound = cfg.steal_bound_ns;
    if bound == 0 || bound == u64::MAX {
        return false;
    }
    let mut spin = crate::backoff::SpinWait::new(bound);
    let mut started = None;
    loop {
        // Relaxed: both are hints that only pick the moment to try; the CAS
        // acquires.
        if locked.load(Ordering::Relaxed) != UNLOCKED {
            return false;
        }
        let flags = tail.load(Ordering::Relaxed);
        let forbidden = flags & NO_STEAL != 0;
        let patience = if flags & HEAD_ASLEEP != 0 {
            bound.saturating_add(NAPPING_HEAD_PATIENCE_NS)
        } else {
            bound
        };
        let now = crate::sync::now_ns();
        let since = *started.get_or_insert(now);
        if !forbidden || now.saturating_sub(since) >= patience {
            if forbidden {
                crate::sync::event("steal-past-absent-head");
            }
            return take_free_word(locked);
        }
        spin.snooze();
    }
}

/// Takes the lock word if it is free (CAS `UNLOCKED` -> `LOCKED`), whatever
/// `NO_STEAL` says: for the threads the mark lets through (an arrival that
/// found the head absent, a timed waiter past its own bound while no queue
/// head claims the release, see `crate::timed`), and for [`try_steal`] once it
/// has read that stealing is allowed.
#[inline]
pub(crate) fn take_free_word(locked: &AtomicU32) -> bool {
    use crate::word::{LOCKED, UNLOCKED};
    // Acquire on success: pairs with the Release store of the unlock that
    // made the word UNLOCKED. Relaxed on failure: nothing acquired.
    locked
        .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

/// The last-resort wait of a thread that cannot get a queue node (all 2^29 - 1
/// codes taken, or the system allocator out of memory), shared by CNA and HQ:
/// test-and-test-and-set on the lock word `locked` (`UNLOCKED` -> `LOCKED`,
/// see [`crate::raw_lock`]) with back-off. It ignores `NO_STEAL` (which would
/// otherwise shut it out for as long as the queue stays non-empty, forever
/// under sustained load in strict mode), so it competes with the queue head
/// for every release; correctness does not depend on the queue.
pub(crate) fn lock_unqueued(locked: &AtomicU32, cfg: &crate::Config) {
    use crate::word::UNLOCKED;
    let mut spin = crate::backoff::SpinWait::new(cfg.spin_budget_ns);
    loop {
        // Relaxed: only picks the moment to try; `take_free_word`'s CAS
        // acquires.
        if locked.load(Ordering::Relaxed) == UNLOCKED && take_free_word(locked) {
            return;
        }
        spin.snooze();
    }
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering as StdOrdering;

    std::thread_local! {
        static WOKEN_YIELDS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }

    /// The woken-sleeper marks are one table for the process (a lock's slot
    /// is a hash of its address): the tests that set and lift marks run one
    /// at a time.
    static WOKEN_TABLE: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Counts a yield of [`steal_ahead_of_queue`] on this thread.
    pub(super) fn note_woken_yield() {
        WOKEN_YIELDS.with(|n| n.set(n.get() + 1));
    }

    /// While a lock is marked woken, an attempt ahead of its non-empty queue
    /// yields first; once the woken thread has run, or with an empty queue,
    /// none does.
    #[test]
    fn attempts_ahead_of_a_queue_yield_while_a_woken_thread_has_not_run() {
        use crate::word::TAIL_SHIFT;
        let _one = WOKEN_TABLE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let yields = || WOKEN_YIELDS.with(std::cell::Cell::get);
        let lock = crate::RawMutex::new();
        let cycle = |n: u32| {
            for _ in 0..n {
                assert!(try_steal(&lock.locked, &lock.tail, || {}));
                // SAFETY: acquired just above.
                unsafe { lock.release() };
            }
        };
        // A queued waiter's code, no flags: stealing is allowed.
        lock.tail.store(5 << TAIL_SHIFT, StdOrdering::Relaxed);
        let before = yields();
        cycle(10);
        assert_eq!(yields(), before, "no mark, no yield");
        // One yield per attempt while marked. A mark lasts WOKEN_PATIENCE_US
        // at most: an attempt without a yield must come that late (this test
        // thread was preempted that long).
        let patience =
            std::time::Duration::from_micros(crate::node::woken::WOKEN_PATIENCE_US.into());
        lock.note_woken();
        let mut marked = std::time::Instant::now();
        for _ in 0..10 {
            let y = yields();
            cycle(1);
            if yields() != y + 1 {
                assert!(marked.elapsed() >= patience, "no yield while marked");
                lock.note_woken();
                marked = std::time::Instant::now();
            }
        }
        lock.woken_ran();
        let y = yields();
        cycle(10);
        assert_eq!(yields(), y, "the woken thread ran");
        lock.note_woken();
        lock.tail.store(0, StdOrdering::Relaxed);
        cycle(10);
        assert_eq!(yields(), y, "an empty queue: nobody to yield to");
        lock.woken_ran();
    }

    /// A mark older than the patience is lifted by the next look.
    #[test]
    fn a_stale_woken_mark_is_lifted() {
        let _one = WOKEN_TABLE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let lock = crate::RawMutex::new();
        let slot = crate::node::woken::tests_slot(&lock.locked);
        // Marked, then aged past the patience.
        lock.note_woken();
        slot.store(
            ((numa_topology::monotonic_ns() / 1_000) as u32 | 1)
                .wrapping_sub(2 * crate::node::woken::WOKEN_PATIENCE_US),
            StdOrdering::Relaxed,
        );
        assert!(!crate::node::woken::pending(&lock.locked));
        assert_eq!(slot.load(StdOrdering::Relaxed), 0);
        assert!(!crate::node::woken::any_woken(), "the lift is counted");
        lock.note_woken();
        assert!(crate::node::woken::any_woken());
        assert!(crate::node::woken::pending(&lock.locked));
        lock.woken_ran();
        assert!(!crate::node::woken::pending(&lock.locked));
        assert!(
            !crate::node::woken::any_woken(),
            "the woken thread's lift is counted"
        );
    }

    /// The last-resort wait takes a free lock word at once and a held one
    /// after its release, leaving it `LOCKED` both times.
    #[test]
    fn unqueued_wait_takes_the_word() {
        use crate::word::{LOCKED, UNLOCKED};
        static WORD: AtomicU32 = AtomicU32::new(UNLOCKED);
        let cfg = crate::Config::DEFAULT;
        for held in [false, true] {
            WORD.store(if held { LOCKED } else { UNLOCKED }, StdOrdering::SeqCst);
            let (done_tx, done) = std::sync::mpsc::channel();
            let waiter = std::thread::spawn(move || {
                lock_unqueued(&WORD, &cfg);
                done_tx.send(()).unwrap();
            });
            if held {
                std::thread::sleep(std::time::Duration::from_millis(20));
                assert!(done.try_recv().is_err(), "took a held word");
                assert_eq!(WORD.load(StdOrdering::SeqCst), LOCKED);
                WORD.store(UNLOCKED, StdOrdering::SeqCst);
            }
            let took = done.recv_timeout(std::time::Duration::from_secs(10));
            assert!(
                took.is_ok(),
                "never took the free word (held before: {held})"
            );
            waiter.join().unwrap();
            assert_eq!(
                WORD.load(StdOrdering::SeqCst),
                LOCKED,
                "returned without the word"
            );
        }
    }
}
