//! White-box unit tests (they look at the locks' words and reader counters).

use crate::Mutex;
use crate::sync::Ordering;
use std::sync::{Arc, Mutex as StdMutex};
use std::thread;
use std::time::Duration;

// Batch-bound changes are process-wide: one test does all of them in sequence.
#[test]
fn documented_limits_follow_the_masks() {
    use crate::raw_rwlock::{READER_MASK, READER_ONE};
    assert_eq!(READER_MASK / READER_ONE, (1 << 28) - 1);
}

/// Regression (found by the fuzz target): a reader registered on an snode
/// counter is invisible in the state word; a writer's fast path (CAS from 0)
/// must not let the writer in beside it.
#[test]
fn writer_fast_path_sees_node_readers() {
    use lock_api::RawRwLock as _;
    let l = crate::RawRwLock::new();
    let line = l.counter_set_or_bind().expect("a free counter set").line(1);
    assert!(l.try_shared_node(line));
    assert!(
        l.try_lock_exclusive().is_none(),
        "writer beside a node reader"
    );
    assert!(l.is_locked());
    line.fetch_sub(1, Ordering::SeqCst);
    let g = l
        .try_lock_exclusive()
        .expect("writer shut out with no reader");
    // SAFETY: `g` is our exclusive acquisition.
    unsafe { l.unlock_exclusive(g) };
    assert!(!l.is_locked());
}

/// After readers used snode counters (a reader-reader collision on the state
/// word), the next writer that drains them clears `NODE_READERS_BIT`, so the
/// following uncontended writers take the fast path (CAS from 0) again.
#[test]
fn node_readers_bit_clears_after_a_writer() {
    use crate::raw_rwlock::NODE_READERS_BIT;
    use lock_api::RawRwLock as _;
    let l = crate::RawRwLock::new();
    let line = l.counter_set_or_bind().expect("a free counter set").line(1);
    assert!(l.try_shared_node(line));
    assert_ne!(l.state.load(Ordering::SeqCst) & NODE_READERS_BIT, 0);
    line.fetch_sub(1, Ordering::SeqCst);
    let g = l.lock_exclusive();
    // SAFETY: `g` is our exclusive acquisition.
    unsafe { l.unlock_exclusive(g) };
    assert_eq!(
        l.state.load(Ordering::SeqCst),
        0,
        "NODE_READERS_BIT stayed set with no node reader"
    );
    // The writer fast path works again: it CASes from exactly 0.
    let g = l.try_lock_exclusive().expect("free lock");
    assert_eq!(l.state.load(Ordering::SeqCst) & NODE_READERS_BIT, 0);
    // SAFETY: `g` is our exclusive acquisition.
    unsafe { l.unlock_exclusive(g) };
}

/// The slow paths, entered on a free lock (as after a spurious
/// `compare_exchange_weak` failure of the fast path on LL/SC targets), take
/// it without allocating an snode.
#[test]
fn slow_paths_on_a_free_lock_do_not_allocate() {
    use lock_api::RawRwLock as _;
    let l = crate::RawRwLock::new();
    let g = l.lock_shared_slow(None).expect("untimed");
    assert_eq!(
        l.snode_count(),
        0,
        "reader slow path allocated on a free lock"
    );
    // SAFETY: `g` is our shared acquisition.
    unsafe { l.unlock_shared(g) };
    assert!(!l.is_locked());
}

/// Downgrading an upgradable read with the state word's reader counter full
/// (2^28 - 1 readers) counts the
/// downgraded reader elsewhere instead of carrying out of the word.
#[test]
fn downgrade_with_a_full_reader_counter() {
    use crate::raw_rwlock::READER_MASK;
    use lock_api::{RawRwLock as _, RawRwLockUpgrade as _, RawRwLockUpgradeDowngrade as _};
    let l = crate::RawRwLock::new();
    let up = l.lock_upgradable();
    // Stand-ins for a full counter of fast readers.
    l.state.fetch_add(READER_MASK, Ordering::SeqCst);
    // SAFETY: `up` is our upgradable acquisition.
    let r = unsafe { l.downgrade_upgradable(up) };
    let s = l.state.load(Ordering::SeqCst);
    assert_eq!(s & READER_MASK, READER_MASK, "reader counter overflowed");
    assert!(!l.mutex.is_held(), "writer mutex still held");
    l.state.fetch_sub(READER_MASK, Ordering::SeqCst);
    assert!(l.is_locked(), "downgraded reader not counted");
    assert!(l.try_lock_exclusive().is_none());
    // SAFETY: `r` is our shared acquisition.
    unsafe { l.unlock_shared(r) };
    assert!(!l.is_locked());
}

/// `notify_one` reports whether it woke a waiter, and the woken waiter leaves
/// the condvar's count (which `notify_all` uses to size its requeue), so the
/// condvar forgets the mutex once nobody waits.
#[test]
fn notify_one_reports_and_uncounts_the_woken_waiter() {
    use crate::Condvar;
    let pair = Arc::new((Mutex::new(false), Condvar::new()));
    assert!(!pair.1.notify_one(), "reported a wake with nobody waiting");
    let p = pair.clone();
    let waiter = thread::spawn(move || {
        let mut g = p.0.lock();
        while !*g {
            p.1.wait(&mut g);
        }
    });
    // The count is raised in `validate`, under the condvar's queue lock, which
    // the waiter holds until it is queued: a notify from here on finds it.
    while pair.1.raw().waiters.load(Ordering::SeqCst) == 0 {
        thread::yield_now();
    }
    *pair.0.lock() = true;
    assert!(pair.1.notify_one(), "woke the waiter but reported nobody");
    waiter.join().unwrap();
    assert_eq!(
        pair.1.raw().waiters.load(Ordering::SeqCst),
        0,
        "woken waiter still counted"
    );
    assert!(
        pair.1.raw().mutex.load(Ordering::SeqCst).is_null(),
        "condvar kept the mutex"
    );
}

#[test]
fn condvar_debug_names_the_type() {
    assert_eq!(
        format!("{:?}", crate::RawCondvar::new()),
        "RawCondvar { .. }"
    );
}

/// Every queue of the parking lot a lock sleeps on has a key of its own: an
/// rwlock's reader and writer queues differ from each other, from its writer
/// mutex's sleepers' queue and from every other lock's, so a wake-up meant for one queue
/// never lands in another (where it would be lost).
#[test]
fn rwlock_park_keys_are_its_own() {
    use crate::RawRwLock;
    let locks = [RawRwLock::new(), RawRwLock::new()];
    let keys: Vec<usize> = locks
        .iter()
        .flat_map(|l| {
            [
                l.reader_key(),
                l.writer_key(),
                std::ptr::from_ref(l) as usize,
            ]
        })
        .collect();
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i + 1..] {
            assert_ne!(a, b, "two queues share a park key: {keys:?}");
        }
    }
}

/// A recursive read joins only readers already inside: with a writer in (and
/// no reader counted) it is refused, whatever other bits the word holds.
#[test]
fn recursive_read_refused_while_a_writer_holds() {
    use lock_api::RawRwLock as _;
    let l = crate::RawRwLock::new();
    let g = l.lock_exclusive();
    assert!(
        l.try_lock_shared_recursive().is_none(),
        "recursive read beside a writer"
    );
    // SAFETY: `g` is our exclusive acquisition.
    unsafe { l.unlock_exclusive(g) };
    assert!(!l.is_locked());
}

/// A reader that parks behind a writer and times out leaves the word as it
/// found it: the writer still holds the lock (no reader or writer gets in
/// beside it), and after the writer's unlock the word is free again.
#[test]
fn timed_out_reader_leaves_the_writer_holding() {
    use crate::raw_rwlock::{READERS_PARKED_BIT, WRITER_BIT};
    use lock_api::{RawRwLock as _, RawRwLockTimed as _};
    let l = crate::RawRwLock::new();
    let g = l.lock_exclusive();
    let before = l.state.load(Ordering::SeqCst);
    // Long enough to finish the spin rounds and park, so the time-out runs
    // the parking lot's last-waiter callback.
    assert!(l.try_lock_shared_for(Duration::from_millis(30)).is_none());
    let after = l.state.load(Ordering::SeqCst);
    assert_eq!(
        after & !READERS_PARKED_BIT,
        before,
        "the time-out changed the word"
    );
    assert_ne!(after & WRITER_BIT, 0);
    assert!(l.try_lock_shared().is_none(), "reader beside the writer");
    assert!(l.try_lock_exclusive().is_none(), "two writers");
    // SAFETY: `g` is our exclusive acquisition.
    unsafe { l.unlock_exclusive(g) };
    assert_eq!(l.state.load(Ordering::SeqCst), 0);
}

/// Two readers parked behind one writer both get in when it leaves: the
/// second to park must not undo the first's `READERS_PARKED_BIT`, or the
/// writer's unlock would wake nobody.
#[test]
fn two_parked_readers_both_wake() {
    use lock_api::RawRwLock as _;
    use std::sync::mpsc;
    let l = Arc::new(crate::RawRwLock::new());
    let g = l.lock_exclusive();
    let (tx, rx) = mpsc::channel();
    for _ in 0..2 {
        let (l, tx) = (l.clone(), tx.clone());
        thread::spawn(move || {
            let r = l.lock_shared();
            // SAFETY: `r` is this thread's shared acquisition.
            unsafe { l.unlock_shared(r) };
            tx.send(()).unwrap();
        });
    }
    // Both readers finish their spin rounds (microseconds) and park.
    thread::sleep(Duration::from_millis(100));
    // SAFETY: `g` is our exclusive acquisition.
    unsafe { l.unlock_exclusive(g) };
    for i in 0..2 {
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("parked reader {i} never woke after the writer left"));
    }
    // Both were counted exactly once and left: the word is free again (a
    // reader that arrived late may have registered on its snode counter,
    // which leaves `NODE_READERS_BIT` for the next writer to clear).
    let s = l.state.load(Ordering::SeqCst);
    assert_eq!(
        s & !crate::raw_rwlock::NODE_READERS_BIT,
        0,
        "reader count off: {s:#x}"
    );
    let w = l.try_lock_exclusive().expect("free lock");
    // SAFETY: `w` is our exclusive acquisition.
    unsafe { l.unlock_exclusive(w) };
}

/// A writer parked while draining readers is woken by the last reader to
/// leave, whether that reader was counted in the state word or on an snode.
#[test]
fn draining_writer_wakes_when_the_last_reader_leaves() {
    use lock_api::RawRwLock as _;
    use std::sync::mpsc;
    for on_snode in [false, true] {
        let l = Arc::new(crate::RawRwLock::new());
        let line = l.counter_set_or_bind().expect("a free counter set").line(1);
        let r = if on_snode {
            assert!(l.try_shared_node(line));
            None
        } else {
            Some(l.lock_shared())
        };
        let (tx, rx) = mpsc::channel();
        let w = {
            let l = l.clone();
            thread::spawn(move || {
                let g = l.lock_exclusive();
                // SAFETY: `g` is this thread's exclusive acquisition.
                unsafe { l.unlock_exclusive(g) };
                tx.send(()).unwrap();
            })
        };
        // The writer sets `WRITER_BIT`, spins (microseconds), then parks.
        thread::sleep(Duration::from_millis(100));
        assert!(rx.try_recv().is_err(), "writer beside a reader");
        match r {
            // SAFETY: `r` is our shared acquisition.
            Some(r) => unsafe { l.unlock_shared(r) },
            None => {
                let g = crate::SharedGuardState::for_line(line);
                // SAFETY: `g` names the snode read registered above.
                unsafe { l.unlock_shared(g) };
            }
        }
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("draining writer never woke (reader on snode: {on_snode})"));
        w.join().unwrap();
        assert!(!l.is_locked());
    }
}

/// A reader turned away by a writer leaves `NODE_READERS_BIT` alone: once the
/// writer leaves the word is 0 again and the next writer takes the fast path.
#[test]
fn reader_turned_away_by_a_writer_leaves_the_word_clean() {
    use lock_api::RawRwLock as _;
    let l = crate::RawRwLock::new();
    let line = l.counter_set_or_bind().expect("a free counter set").line(1);
    let g = l.lock_exclusive();
    assert!(!l.try_shared_node(line), "node reader beside a writer");
    assert_eq!(line.load(Ordering::SeqCst), 0);
    // SAFETY: `g` is our exclusive acquisition.
    unsafe { l.unlock_exclusive(g) };
    assert_eq!(
        l.state.load(Ordering::SeqCst),
        0,
        "a turned-away reader left a bit set"
    );
}

/// `is_locked` and `is_locked_exclusive` in each mode, and a second writer (by
/// `try_lock_exclusive`) refused beside the first.
#[test]
fn rwlock_lock_state_in_each_mode() {
    use lock_api::RawRwLock as _;
    let l = crate::RawRwLock::new();
    assert!(!l.is_locked() && !l.is_locked_exclusive());
    let w = l.try_lock_exclusive().expect("free lock");
    assert!(l.is_locked() && l.is_locked_exclusive());
    assert!(l.try_lock_exclusive().is_none(), "two writers");
    assert!(l.try_lock_shared().is_none(), "reader beside a writer");
    // SAFETY: `w` is our exclusive acquisition.
    unsafe { l.unlock_exclusive(w) };
    let r = l.try_lock_shared().expect("free lock");
    assert!(l.is_locked() && !l.is_locked_exclusive());
    // SAFETY: `r` is our shared acquisition.
    unsafe { l.unlock_shared(r) };
    assert!(!l.is_locked());
    assert_eq!(l.state.load(Ordering::SeqCst), 0);
    assert!(format!("{l:?}").starts_with("RawRwLock {"));
}

/// The deadline forms on a free lock take it at once.
#[test]
fn rwlock_until_forms_take_a_free_lock() {
    use lock_api::{RawRwLock as _, RawRwLockTimed as _};
    use std::time::Instant;
    let l = crate::RawRwLock::new();
    let later = Instant::now() + Duration::from_secs(5);
    let r = l.try_lock_shared_until(later).expect("free lock");
    assert!(l.is_locked() && !l.is_locked_exclusive());
    // SAFETY: `r` is our shared acquisition.
    unsafe { l.unlock_shared(r) };
    let w = l.try_lock_exclusive_until(later).expect("free lock");
    assert!(l.is_locked_exclusive(), "returned without the lock");
    // SAFETY: `w` is our exclusive acquisition.
    unsafe { l.unlock_exclusive(w) };
    assert_eq!(l.state.load(Ordering::SeqCst), 0);
}

/// `try_lock_shared` on a word whose reader counter is full fails at once (it
/// never waits for room), whatever other bits the word holds.
#[test]
fn try_read_with_a_full_counter_fails_at_once() {
    use crate::raw_rwlock::{NODE_READERS_BIT, READER_MASK};
    use lock_api::RawRwLock as _;
    let l = crate::RawRwLock::new();
    for extra in [0, NODE_READERS_BIT] {
        l.state.store(READER_MASK | extra, Ordering::SeqCst);
        assert!(l.try_lock_shared().is_none());
        assert_eq!(l.state.load(Ordering::SeqCst), READER_MASK | extra);
    }
    l.state.store(0, Ordering::SeqCst);
}

/// A writer that times out while readers are parked behind it admits them on
/// the state word only if its counter has room for all of them; otherwise
/// they wake to register on their own (an snode counter once the word is
/// full). Here the word has room for one of two: neither may be counted in a
/// counter that overflows into the bits below it.
#[test]
fn parked_readers_past_a_nearly_full_counter() {
    use crate::raw_rwlock::{NODE_READERS_BIT, READER_MASK, READER_ONE};
    use lock_api::{RawRwLock as _, RawRwLockTimed as _};
    use std::sync::mpsc;
    let l = Arc::new(crate::RawRwLock::new());
    // Readers that never leave, one short of a full counter.
    let held = READER_MASK - READER_ONE;
    l.state.store(held, Ordering::SeqCst);
    let writer = {
        let l = l.clone();
        thread::spawn(move || {
            // Sets WRITER_BIT, waits for the readers, times out.
            assert!(
                l.try_lock_exclusive_for(Duration::from_millis(300))
                    .is_none()
            );
        })
    };
    // The writer sets WRITER_BIT at once; these readers then park behind it.
    thread::sleep(Duration::from_millis(50));
    let (tx, rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = Arc::new(StdMutex::new(go_rx));
    for _ in 0..2 {
        let (l, tx, go_rx) = (l.clone(), tx.clone(), go_rx.clone());
        thread::spawn(move || {
            let r = l.lock_shared();
            tx.send(()).unwrap();
            go_rx.lock().unwrap().recv().unwrap();
            // SAFETY: `r` is this thread's shared acquisition.
            unsafe { l.unlock_shared(r) };
            tx.send(()).unwrap();
        });
    }
    writer.join().unwrap();
    for i in 0..2 {
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("reader {i} never got in after the writer gave up"));
    }
    // Both are inside, counted where they registered: no writer gets in (a
    // counter that overflowed would read as no reader at all).
    assert!(
        l.try_lock_exclusive().is_none(),
        "writer beside two readers: {:#x}",
        l.state.load(Ordering::SeqCst)
    );
    for _ in 0..2 {
        go_tx.send(()).unwrap();
        rx.recv_timeout(Duration::from_secs(10))
            .expect("reader left");
    }
    let s = l.state.load(Ordering::SeqCst);
    assert_eq!(
        s & !NODE_READERS_BIT,
        held,
        "the word's readers or bits changed: {s:#x}"
    );
    l.state.store(0, Ordering::SeqCst);
}

/// The timed upgradable forms: taken on a free lock, refused beside another
/// upgradable holder, and a timed upgrade that succeeds with no reader inside
/// and times out (keeping the upgradable lock) with one.
#[test]
fn rwlock_timed_upgradable_forms() {
    use lock_api::{
        RawRwLock as _, RawRwLockUpgrade as _, RawRwLockUpgradeDowngrade as _,
        RawRwLockUpgradeTimed as _,
    };
    use std::time::Instant;
    let l = crate::RawRwLock::new();
    let soon = || Instant::now() + Duration::from_millis(20);
    let u = l
        .try_lock_upgradable_for(Duration::from_secs(5))
        .expect("free lock");
    assert!(
        l.try_lock_upgradable_for(Duration::from_millis(20))
            .is_none()
    );
    assert!(l.try_lock_upgradable_until(soon()).is_none());
    // SAFETY: the guard state passed is the one its acquisition returned,
    // used once.
    let w = unsafe { l.try_upgrade_for(u, Duration::from_secs(5)) }.expect("no reader inside");
    assert!(l.is_locked_exclusive());
    // SAFETY: the guard state passed is the one its acquisition returned,
    // used once.
    let u = unsafe { l.downgrade_to_upgradable(w) };
    assert!(!l.is_locked_exclusive());
    let r = l
        .try_lock_shared()
        .expect("readers beside an upgradable holder");
    // SAFETY: the guard state passed is the one its acquisition returned,
    // used once.
    let u = unsafe { l.try_upgrade_until(u, soon()) }.expect_err("upgraded beside a reader");
    assert!(!l.is_locked_exclusive(), "a failed upgrade left WRITER_BIT");
    let r2 = l
        .try_lock_shared()
        .expect("a failed upgrade shut readers out");
    // SAFETY: the guard state passed is the one its acquisition returned,
    // used once.
    unsafe {
        l.unlock_shared(r2);
        l.unlock_shared(r);
    }
    // SAFETY: the guard state passed is the one its acquisition returned,
    // used once.
    let w = unsafe { l.try_upgrade_until(u, soon()) }.expect("no reader inside");
    // SAFETY: the guard state passed is the one its acquisition returned,
    // used once.
    unsafe { l.unlock_exclusive(w) };
    assert_eq!(l.state.load(Ordering::SeqCst), 0);
    let u = l.try_lock_upgradable_until(soon()).expect("free lock");
    // SAFETY: the guard state passed is the one its acquisition returned,
    // used once.
    unsafe { l.unlock_upgradable(u) };
    assert_eq!(l.state.load(Ordering::SeqCst), 0);
}

/// A timed writer waits for a reader inside until its deadline: it gets the
/// lock when the reader leaves in time, and gives up (leaving the reader in)
/// when it does not.
#[test]
fn timed_writer_waits_for_the_reader_until_its_deadline() {
    use lock_api::{RawRwLock as _, RawRwLockTimed as _};
    let l = Arc::new(crate::RawRwLock::new());
    let r = l.lock_shared();
    let writer = {
        let l = l.clone();
        thread::spawn(move || {
            let w = l.try_lock_exclusive_for(Duration::from_secs(10));
            // SAFETY: `w` is this thread's exclusive acquisition.
            w.map(|w| unsafe { l.unlock_exclusive(w) }).is_some()
        })
    };
    thread::sleep(Duration::from_millis(50));
    // SAFETY: `r` is our shared acquisition.
    unsafe { l.unlock_shared(r) };
    assert!(
        writer.join().unwrap(),
        "timed writer gave up before its deadline"
    );
    let r = l.lock_shared();
    assert!(
        l.try_lock_exclusive_for(Duration::from_millis(20))
            .is_none()
    );
    assert!(l.try_lock_shared().is_some_and(|r2| {
        // SAFETY: `r2` is our shared acquisition.
        unsafe { l.unlock_shared(r2) };
        true
    }));
    // SAFETY: `r` is our shared acquisition.
    unsafe { l.unlock_shared(r) };
    assert_eq!(l.state.load(Ordering::SeqCst), 0);
}
