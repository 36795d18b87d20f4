//! White-box unit tests (they look at the state word and the snodes).

use crate::cohort::{DETACH_BIT, LOCKED_BIT, parked_count};
use crate::snode::{DEAD, Snode};
use crate::sync::Ordering;
use crate::{ConfigError, Mutex, RawMutex};
use std::sync::{Arc, Mutex as StdMutex};
use std::thread;
use std::time::Duration;

fn state(m: &Mutex<impl Sized>) -> usize {
    // SAFETY: only reads the state word.
    unsafe { m.raw() }.cohort.state.load(Ordering::SeqCst)
}

/// The identity and the waiting counters each on lines of their own
/// (`CachePadded`), so a counter write never invalidates the line that
/// unlockers walk.
#[test]
fn snode_groups_are_on_separate_lines() {
    use crossbeam_utils::CachePadded;
    let line = std::mem::align_of::<CachePadded<u8>>();
    assert!(line >= 64);
    assert_eq!(
        std::mem::offset_of!(Snode, hot),
        line,
        "identity shares the counters' line"
    );
    #[cfg(not(feature = "stats"))]
    assert_eq!(std::mem::size_of::<Snode>(), 2 * line);
    // The counters take a third line.
    #[cfg(feature = "stats")]
    assert_eq!(std::mem::size_of::<Snode>(), 3 * line);
}

#[test]
fn timed_out_waiters_leave_no_trace() {
    let m = Arc::new(Mutex::new(0u32));
    let g = m.lock();
    let hs: Vec<_> = (0..4)
        .map(|i| {
            let m = m.clone();
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 2));
                m.try_lock_for(Duration::from_millis(20)).is_none()
            })
        })
        .collect();
    for h in hs {
        assert!(h.join().unwrap(), "got a held lock");
    }
    // The only trace: the note for the holder's unlock to give the snodes
    // back, which that unlock clears.
    assert_eq!(
        state(&m),
        LOCKED_BIT | DETACH_BIT,
        "timed-out waiter left bits behind"
    );
    // SAFETY: only reads the snodes.
    for s in unsafe { m.raw() }.cohort.snodes.iter() {
        assert_eq!(s.hot.parked.load(Ordering::SeqCst), 0);
    }
    drop(g);
    assert_eq!(state(&m), 0);
    // SAFETY: only reads the snodes.
    let n = unsafe { m.raw() }.snode_count();
    // With feature `stats` the snodes keep their counters.
    assert_eq!(n == 0, !cfg!(feature = "stats"), "{n} snodes left");
}

/// Parks `per_node` waiters on each of nodes 0 and 1 behind a holder on node
/// 0, then releases with `unlock_fair` all round; returns the nodes in the
/// order they got the lock.
fn fair_handoff_order(per_node: usize) -> Vec<usize> {
    let m = Arc::new(Mutex::new(()));
    let order = Arc::new(StdMutex::new(Vec::new()));
    numa_topology::set_current_thread_node(Some(0));
    let g = m.lock();
    let mut hs = Vec::new();
    // Node 1 queues first: a FIFO lock would serve it first.
    for node in [1usize, 0] {
        for _ in 0..per_node {
            let (m2, order) = (m.clone(), order.clone());
            hs.push(thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(node));
                let g = m2.lock();
                order.lock().unwrap().push(node);
                crate::MutexGuard::unlock_fair(g);
            }));
            let want = hs.len();
            // SAFETY: only reads a counter.
            while unsafe { m.raw() }.parked_waiters() < want {
                thread::yield_now();
            }
        }
    }
    crate::MutexGuard::unlock_fair(g);
    for h in hs {
        h.join().unwrap();
    }
    numa_topology::set_current_thread_node(None);
    Arc::try_unwrap(order).unwrap().into_inner().unwrap()
}

// Batch-bound changes are process-wide: one test does all of them in sequence.
#[test]
fn cohort_order_and_batch_bound() {
    // Own node first while its batch lasts, then the next node.
    assert_eq!(fair_handoff_order(2), [0, 0, 1, 1]);
    // Batch bound 1: the lock moves to the other node after each handoff.
    crate::set_batch_bound(1).unwrap();
    let order = fair_handoff_order(2);
    crate::set_batch_bound(crate::DEFAULT_BATCH_BOUND).unwrap();
    assert_eq!(order, [0, 1, 1, 0]);
}

#[test]
fn config_rejects_bad_values() {
    let _serial = FAIRNESS_CONFIG.lock().unwrap();
    assert_eq!(crate::set_batch_bound(0), Err(ConfigError::ZeroBatchBound));
    assert_eq!(
        crate::set_fairness_timeout(Duration::ZERO),
        Err(ConfigError::FairnessTimeoutOutOfRange(Duration::ZERO))
    );
    let huge = Duration::from_secs(u64::MAX);
    assert_eq!(
        crate::set_fairness_timeout(huge),
        Err(ConfigError::FairnessTimeoutOutOfRange(huge))
    );
    assert!(
        ConfigError::ZeroBatchBound
            .to_string()
            .contains("batch bound")
    );
    assert_eq!(crate::fairness_timeout(), crate::DEFAULT_FAIRNESS_TIMEOUT);
}

#[test]
fn documented_limits_follow_the_masks() {
    use crate::cohort::PARKED_MAX;
    use crate::raw_rwlock::{READER_MASK, READER_ONE};
    #[cfg(target_pointer_width = "64")]
    assert_eq!(PARKED_MAX, (1 << 24) - 1);
    #[cfg(target_pointer_width = "32")]
    assert_eq!(PARKED_MAX, 255);
    assert_eq!(READER_MASK / READER_ONE, (1 << 28) - 1);
}

#[test]
fn parked_count_field() {
    let m = RawMutex::new();
    assert_eq!(parked_count(m.cohort.state.load(Ordering::SeqCst)), 0);
    assert_eq!(m.parked_waiters(), 0);
    assert_eq!(m.snode_count(), 0);
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

/// Eventual fairness: once a node's fairness deadline has passed, a plain
/// `unlock` hands the lock directly to its parked waiter (the lock never
/// becomes free, so the unlocker's immediate `try_lock` must fail).
#[test]
fn overdue_waiter_gets_direct_handoff() {
    let _serial = FAIRNESS_CONFIG.lock().unwrap();
    use std::sync::atomic::{AtomicBool, Ordering as O};
    let m = Arc::new(Mutex::new(0u32));
    let checked = Arc::new(AtomicBool::new(false));
    numa_topology::set_current_thread_node(Some(0));
    let g = m.lock();
    let w = {
        let (m, checked) = (m.clone(), checked.clone());
        thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(1));
            let mut g = m.lock();
            *g += 1;
            while !checked.load(O::SeqCst) {
                thread::yield_now();
            }
        })
    };
    // SAFETY: only reads counters and sets the deadline field (an atomic).
    let raw = unsafe { m.raw() };
    while raw.parked_waiters() < 1 {
        thread::yield_now();
    }
    let snode = raw.cohort.snodes.find(1).expect("waiter's snode");
    // Period started long ago: the next wake-up of node 1 is owed a handoff.
    snode.hot.fair_since_ns.store(1, Ordering::SeqCst);
    drop(g);
    assert!(
        m.try_lock().is_none(),
        "lock was released instead of handed off"
    );
    checked.store(true, std::sync::atomic::Ordering::SeqCst);
    w.join().unwrap();
    numa_topology::set_current_thread_node(None);
    assert_eq!(*m.lock(), 1);
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
    let m = RawMutex::new();
    let node = m.cohort.lock_slow(None).expect("untimed");
    assert_eq!(
        m.snode_count(),
        0,
        "mutex slow path allocated on a free lock"
    );
    m.cohort.unlock_slow(LOCKED_BIT, node, false);
    assert_eq!(m.cohort.state.load(Ordering::SeqCst), 0);

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

/// Serialises the tests that change or depend on the process-wide fairness
/// timeout.
static FAIRNESS_CONFIG: StdMutex<()> = StdMutex::new(());

/// A fairness timeout of `u64::MAX` ns (allowed) must not switch eventual
/// fairness off for good: once the timeout is set back, a node's waiter is
/// owed a handoff again one period later.
#[test]
fn huge_fairness_timeout_does_not_pin_the_deadline() {
    let _serial = FAIRNESS_CONFIG.lock().unwrap();
    let l = crate::RawMutex::new();
    let snode = l.cohort.snodes.pin(1);
    crate::set_fairness_timeout(Duration::from_nanos(u64::MAX)).unwrap();
    crate::snode::fairness_due(snode, crate::config::fairness_now()); // starts a period
    crate::snode::fairness_due(snode, crate::config::fairness_now());
    crate::set_fairness_timeout(Duration::from_micros(1)).unwrap();
    thread::sleep(Duration::from_millis(2));
    let due = crate::snode::fairness_due(snode, crate::config::fairness_now()) || {
        thread::sleep(Duration::from_millis(2));
        crate::snode::fairness_due(snode, crate::config::fairness_now())
    };
    crate::set_fairness_timeout(crate::DEFAULT_FAIRNESS_TIMEOUT).unwrap();
    snode.unpin();
    assert!(due, "eventual fairness stayed off after a huge timeout");
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

/// `notify_all` on `waiters` condvar waiters while the mutex's parked count
/// holds `fake` stand-ins for parked threads (in units of one thread). Returns
/// the mutex's state word and its requeue pseudo-snode's parked count right
/// after the notify.
fn notify_all_with_parked(waiters: usize, fake: usize) -> (usize, usize) {
    use crate::RawCondvar;
    use crate::cohort::{PARKED_ONE, REQUEUE_NODE};
    use lock_api::{RawCondvar as _, RawMutex as _};
    use std::sync::atomic::AtomicUsize;
    let shared = Arc::new((RawMutex::new(), RawCondvar::new(), AtomicUsize::new(0)));
    let hs: Vec<_> = (0..waiters)
        .map(|_| {
            let shared = shared.clone();
            thread::spawn(move || {
                let (m, cv, ready) = &*shared;
                let mut g = m.lock();
                ready.fetch_add(1, Ordering::SeqCst);
                // SAFETY: we hold `m` with state `g`.
                unsafe { cv.wait(m, &mut g) };
                // SAFETY: we hold `m` with state `g`.
                unsafe { m.unlock(g) };
            })
        })
        .collect();
    let (m, cv, ready) = &*shared;
    // Each waiter counted itself under the mutex and is queued on the condvar
    // before it released it.
    let g = loop {
        let g = m.lock();
        if ready.load(Ordering::SeqCst) == waiters {
            break g;
        }
        // SAFETY: we hold `m` with state `g`.
        unsafe { m.unlock(g) };
        thread::yield_now();
    };
    m.cohort
        .state
        .fetch_add(fake * PARKED_ONE, Ordering::SeqCst);
    assert_eq!(cv.notify_all(), waiters);
    let s = m.cohort.state.load(Ordering::SeqCst);
    // Only `notify_all` counts threads on the pseudo-snode (woken threads
    // park on their own node's), so this count is exactly what it requeued.
    let requeued = m
        .cohort
        .snodes
        .find(REQUEUE_NODE)
        .map_or(0, |rq| rq.hot.parked.load(Ordering::SeqCst));
    m.cohort
        .state
        .fetch_sub(fake * PARKED_ONE, Ordering::SeqCst);
    // SAFETY: we hold `m` with state `g`.
    unsafe { m.unlock(g) };
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(m.parked_waiters(), 0);
    (s, requeued)
}

/// `notify_all` with the mutex's parked count (nearly) full: requeued
/// waiters that do not fit in the count are not requeued, all are woken
/// instead; the count never carries into the bits above it.
#[test]
fn notify_all_with_a_full_parked_count() {
    use crate::cohort::{HEAD_MASK, PARKED_MASK, PARKED_MAX};
    // The woken threads may register as snode-queue heads: that count is
    // another field.
    const PARKED_MASK_: usize = PARKED_MASK | HEAD_MASK;
    // Two to requeue, room for one: all woken.
    let (s, requeued) = notify_all_with_parked(3, PARKED_MAX - 1);
    assert_eq!(
        s & !PARKED_MASK_,
        LOCKED_BIT,
        "parked count carried into other bits"
    );
    assert_eq!(requeued, 0, "requeued past a full count");
    // One to requeue, no room: all woken.
    let (s, requeued) = notify_all_with_parked(2, PARKED_MAX);
    assert_eq!(
        s & !PARKED_MASK_,
        LOCKED_BIT,
        "parked count carried into other bits"
    );
    assert_eq!(requeued, 0, "requeued past a full count");
    // One to requeue, room for exactly one: requeued, the count is full.
    let (s, requeued) = notify_all_with_parked(2, PARKED_MAX - 1);
    assert_eq!(requeued, 1, "not requeued though it fit");
    assert_eq!(parked_count(s), PARKED_MAX);
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

/// A node's queue head with a waiter behind it registers, and an unlock by a
/// holder of its node hands it the lock (a grant: the word stays held). On a
/// busy 2-CPU machine the head may spend its spin budget before the holder
/// runs again (it then parks and is woken instead), so the pattern is retried
/// until a grant is seen.
#[cfg(feature = "stats")]
#[test]
fn holder_grants_its_nodes_queue_head() {
    use crate::cohort::{HEAD_MASK, HEAD_ONE};
    use lock_api::RawMutex as _;
    numa_topology::set_current_thread_node(Some(0));
    for _ in 0..200 {
        let m = Arc::new(RawMutex::new());
        let g = m.lock();
        let ws: Vec<_> = (0..2)
            .map(|_| {
                let m = m.clone();
                thread::spawn(move || {
                    numa_topology::set_current_thread_node(Some(0));
                    let g = m.lock();
                    // SAFETY: our acquisition.
                    unsafe { m.unlock(g) };
                })
            })
            .collect();
        // Wait for the head's registration, or for both waiters to have
        // parked on the lock (this attempt then has no running head to
        // grant; a waiter asleep on its queue node has a head in front that
        // registers, or leaves the queue to park on the lock and wakes it).
        loop {
            let s = m.cohort.state.load(Ordering::SeqCst);
            if s & HEAD_MASK == HEAD_ONE || parked_count(s) >= 2 {
                break;
            }
            thread::yield_now();
        }
        // SAFETY: our acquisition.
        unsafe { m.unlock(g) };
        for w in ws {
            w.join().unwrap();
        }
        assert_eq!(m.cohort.state.load(Ordering::SeqCst), 0, "lock left dirty");
        if m.stats().grants > 0 {
            assert!(m.stats().queued >= 1);
            return;
        }
    }
    panic!("no grant to a registered queue head in 200 attempts");
}

/// A byte-wise copy of a mutex that holds an snode (what C code does with
/// `memcpy`) shares the original's snode pointer: the copy neither uses nor
/// gives back the original's snode, and attaches its own in front of it.
#[test]
fn byte_copy_never_uses_or_frees_the_originals_snodes() {
    use std::mem::ManuallyDrop;
    // Never moved: an snode names its lock by address, and a moved lock's
    // `release_snodes` forgets (leaks) the snodes attached before the move.
    let mut a = RawMutex::new();
    let sa = a.cohort.snodes.pin(1) as *const Snode;
    // SAFETY: `sa` is `a`'s snode, pinned by us above.
    unsafe { &*sa }.unpin();
    assert_eq!(a.snode_count(), 1);
    // SAFETY: a byte-wise copy, as `memcpy` makes; it is never dropped.
    let mut b = ManuallyDrop::new(unsafe { std::ptr::read(&a) });
    assert_eq!(b.snode_count(), 0, "the copy counts the original's snode");
    let sb = b.cohort.snodes.pin(1) as *const Snode;
    assert_ne!(sb, sa, "the copy uses the original's snode");
    // SAFETY: `sb` is `b`'s snode, pinned by us above.
    unsafe { &*sb }.unpin();
    assert_eq!(b.snode_count(), 1);
    // Detaching the copy's snodes leaves the original's pointer behind.
    assert!(b.cohort.snodes.detach_idle());
    assert_eq!(b.snode_count(), 0);
    b.release_snodes();
    assert_eq!(
        a.snode_count(),
        1,
        "the copy gave back the original's snode"
    );
    // SAFETY: `sa` is type-stable snode memory.
    let users = unsafe { &*sa }.hot.users.load(Ordering::SeqCst);
    assert_eq!(users, 0, "the original's snode was touched");
    // The original still works and still owns it.
    assert_eq!(a.cohort.snodes.find(1).map(|s| s as *const Snode), Some(sa));
    a.release_snodes();
    assert_eq!(a.snode_count(), 0);
    // SAFETY: type-stable snode memory, as above.
    let users = unsafe { &*sa }.hot.users.load(Ordering::SeqCst);
    assert_ne!(users & DEAD, 0, "the original did not give its snode back");
}

/// Contended mutexes that are forgotten (never dropped) hold no snode once
/// their contention is over: they all share the pooled snodes. (Not with
/// feature `stats`, whose counters live in the snodes, which then stay;
/// `scripts/ci.sh` runs this crate's tests without it too.)
#[cfg(not(feature = "stats"))]
#[test]
fn forgotten_contended_mutexes_hold_no_snodes() {
    for _ in 0..50 {
        let m = Arc::new(Mutex::new(0u32));
        let g = m.lock();
        let t = {
            let m = m.clone();
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(1));
                *m.lock() += 1;
            })
        };
        // SAFETY: only reads a counter.
        while unsafe { m.raw() }.snode_count() == 0 {
            thread::yield_now();
        }
        drop(g);
        t.join().unwrap();
        // SAFETY: only reads a counter.
        let n = unsafe { m.raw() }.snode_count();
        assert_eq!(n, 0, "idle mutex kept snodes");
        std::mem::forget(m);
    }
}
