//! Unit tests of the combining lock (the generic suites run it too, from
//! `lock-tests`).

use super::queue::{Request, enqueue};
use super::raw::{Slot, Wakes, run_slot};
use super::*;
use crate::sync::{AtomicU32, UnsafeCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering as StdOrdering};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

// The tests' own atomics (queue tails polled, flags) are all `Relaxed`: they
// only tell the test thread *that* something happened; what the closures did
// reaches it through the lock, a `join` or the request's status word.
// (scripts/ordering-mutants.py takes this file for crate code, as it takes
// every file of a directory module by its declaration's cfg.)

/// The pool of queue sets is process-wide: the test that empties it holds
/// this exclusively, and the tests that need a binding, or that contend and
/// would give a set back to the emptied pool, hold it shared.
pub(super) static POOL_TESTS: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// A share of [`POOL_TESTS`]: the pool is not emptied meanwhile.
pub(super) fn pool_shared() -> std::sync::RwLockReadGuard<'static, ()> {
    POOL_TESTS.read().unwrap_or_else(|e| e.into_inner())
}

/// The tail of the request queue of node 0 in the bound queue set (null
/// while none is bound; the tests' threads are on node 0 unless they say
/// otherwise).
fn tail0<T>(m: &CombiningMutex<T>) -> *mut Request {
    raw(m).request_tails()[0] as *mut Request
}

/// The raw lock of `m`.
fn raw<T>(m: &CombiningMutex<T>) -> &RawCombiningMutex {
    // SAFETY: only used to queue and serve requests and read queue tails,
    // never to unlock behind the wrapper's back.
    unsafe { m.inner.raw() }
}

/// Spawns `f` and waits until its request is queued on node 0 (the tail
/// names a new request).
fn spawn_queued<T: Send + 'static, X: Send + 'static>(
    m: &Arc<CombiningMutex<T>>,
    f: impl FnOnce(&CombiningMutex<T>) -> X + Send + 'static,
) -> thread::JoinHandle<X> {
    let before = tail0(m);
    let m2 = Arc::clone(m);
    let h = thread::spawn(move || f(&m2));
    let start = Instant::now();
    while tail0(m) == before {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the request never queued"
        );
        thread::yield_now();
    }
    h
}

/// Where each closure ran and the log it saw.
type Ran = (ThreadId, Vec<usize>);

fn push(m: &CombiningMutex<Vec<usize>>, i: usize) -> Ran {
    m.combine(move |v| {
        v.push(i);
        (thread::current().id(), v.clone())
    })
}

#[test]
fn counts_under_oversubscription_on_two_nodes() {
    let _pool = pool_shared();
    let m = Arc::new(CombiningMutex::new(0u64));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 2));
                for _ in 0..2_000 {
                    m.combine(|n| *n += 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(*m.lock(), 16_000);
}

/// Guards and combined closures exclude each other: each critical section
/// breaks an invariant and restores it, and checks it on entry.
#[test]
fn guards_and_closures_exclude_each_other() {
    let _pool = pool_shared();
    let m = Arc::new(CombiningMutex::new((0u64, 0u64)));
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                for _ in 0..1_000 {
                    let step = |p: &mut (u64, u64)| {
                        assert_eq!(p.0, p.1, "two critical sections overlapped");
                        p.0 += 1;
                        std::hint::black_box(&mut *p);
                        p.1 += 1;
                    };
                    if i % 3 == 0 {
                        step(&mut m.lock());
                    } else {
                        m.combine(step);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(*m.lock(), (6_000, 6_000));
}

/// Checks how queued closures were served: in arrival order (each saw the
/// log up to itself), in batches of at most `COMBINE_BATCH`, each batch
/// on the thread that submitted its first closure (the combiner); returns
/// how many closures ran on another thread than their own.
fn check_batches(out: &[(ThreadId, Ran)]) -> usize {
    let mut combined = 0;
    let mut batch = (out[0].0, 0);
    for (i, (me, (ran_on, log))) in out.iter().enumerate() {
        assert_eq!(log.len(), i + 1, "closure {} ran out of order", i + 1);
        if *ran_on != batch.0 || batch.1 == COMBINE_BATCH {
            assert_eq!(
                ran_on,
                me,
                "closure {} started a batch on another thread",
                i + 1
            );
            batch = (*me, 0);
        }
        batch.1 += 1;
        if ran_on != me {
            combined += 1;
        }
    }
    combined
}

/// Closures queued behind a held lock run in arrival order, in batches
/// on combiners, and each result goes back to its own caller.
#[test]
fn queued_closures_run_on_the_combiner_in_order() {
    let _pool = pool_shared();
    let m = Arc::new(CombiningMutex::new(Vec::new()));
    let out = serve_behind_a_guard(&m, 6, || ());
    assert!(check_batches(&out) > 0, "no closure ran on a combiner");
}

/// Queues closures 1..=`n` (each pushing its number) behind a `lock()`
/// guard, each from its own thread, calls `queued` once all wait, releases
/// the guard and returns where each ran and the log it saw.
fn serve_behind_a_guard(
    m: &Arc<CombiningMutex<Vec<usize>>>,
    n: usize,
    queued: impl FnOnce(),
) -> Vec<(ThreadId, Ran)> {
    let guard = m.lock();
    let hs: Vec<_> = (1..=n)
        .map(|i| {
            spawn_queued(m, move |m: &CombiningMutex<Vec<usize>>| {
                (thread::current().id(), push(m, i))
            })
        })
        .collect();
    queued();
    drop(guard);
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// A closure that panics on the combiner panics its own caller, with its
/// payload; the closures queued before and after it run, and the lock
/// works afterwards.
#[test]
fn panic_reaches_its_caller_only() {
    let _pool = pool_shared();
    // The expected panic (payload 42u32) prints nothing.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<u32>() != Some(&42) {
            report(info);
        }
    }));
    let m = Arc::new(CombiningMutex::new(Vec::new()));
    let guard = m.lock();
    let first = spawn_queued(&m, |m: &CombiningMutex<Vec<usize>>| push(m, 1));
    let panicking = spawn_queued(&m, |m: &CombiningMutex<Vec<usize>>| {
        m.combine(|v| {
            v.push(2);
            std::panic::panic_any(42u32);
        })
    });
    let last = spawn_queued(&m, |m: &CombiningMutex<Vec<usize>>| push(m, 3));
    drop(guard);
    assert_eq!(first.join().expect("the combiner panicked").1, [1]);
    let payload = panicking.join().expect_err("the panic was lost");
    assert_eq!(payload.downcast_ref::<u32>(), Some(&42));
    let (_, log) = last.join().expect("a later closure was lost");
    assert_eq!(log, [1, 2, 3]);
    assert_eq!(push(&m, 4).1, [1, 2, 3, 4]);
    assert_eq!(*m.lock(), [1, 2, 3, 4]);
}

/// A combiner runs at most `COMBINE_BATCH` closures, then the next waiter
/// of its queue combines the rest.
#[test]
fn combiner_hands_over_after_a_batch() {
    let _pool = pool_shared();
    let n = COMBINE_BATCH as usize + 2;
    let m = Arc::new(CombiningMutex::new(Vec::new()));
    let out = serve_behind_a_guard(&m, n, || ());
    check_batches(&out);
    let last = &out[n - 1];
    assert_ne!(
        last.1.0, out[0].0,
        "the first combiner ran more than a batch"
    );
}

/// The binding word shares its line with the lock word, which the other
/// nodes' combiners wait on: a queued request writes it once (its join) and
/// a batch once more (its combiner leaves for every request it served), so
/// six requests served in one or two batches write it seven or eight times,
/// not twelve.
#[cfg(feature = "stats")]
#[test]
fn a_batch_leaves_the_queue_set_with_one_write() {
    let _pool = pool_shared();
    let m = Arc::new(CombiningMutex::new(Vec::new()));
    let out = serve_behind_a_guard(&m, 6, || {
        assert_eq!(m.queue_set().map(|(_, users)| users), Some(6));
    });
    // Each batch runs its combiner's own closure on its own thread.
    let batches = out.len() - check_batches(&out);
    assert_eq!(m.queue_set(), None, "the idle lock kept its queue set");
    let stats = raw(&m).raw_lock().stats();
    assert_eq!(stats.combine_requests, 6);
    assert_eq!(
        stats.binding_writes,
        6 + batches as u64,
        "binding-word writes for 6 requests in {batches} batches"
    );
}

/// A thread whose contended calls were batches of one (it combined only
/// its own closure) queues no request after `COMBINE_SOLO_STREAK` of them:
/// it waits for the global lock as `lock()` does, and binds no queue set;
/// with counters, it makes one compare-and-swap on the held lock word (its
/// `combine`'s) before it queues there.
#[test]
fn solo_batches_send_the_next_contended_call_to_the_global_lock() {
    let _pool = pool_shared();
    let m = Arc::new(CombiningMutex::new(0u64));
    let (go, rx) = std::sync::mpsc::channel::<()>();
    let m2 = Arc::clone(&m);
    let w = thread::spawn(move || {
        let me = thread::current().id();
        rx.into_iter()
            .all(|()| m2.combine(|n| (*n += 1, thread::current().id() == me).1))
    });
    let global = || raw(&m).raw_lock().tail_word() & !3;
    #[cfg(feature = "stats")]
    let steals = || raw(&m).raw_lock().stats().steal_attempts;
    for round in 0..=COMBINE_SOLO_STREAK {
        let guard = m.lock();
        let before = global();
        #[cfg(feature = "stats")]
        let steals_before = steals();
        go.send(()).unwrap();
        if round < COMBINE_SOLO_STREAK {
            await_state("the request", || !tail0(&m).is_null());
            assert!(m.queue_set().is_some(), "round {round}: no queue set");
        } else {
            await_state("the wait for the global lock", || global() != before);
            assert_eq!(m.queue_set(), None, "a solo thread bound a queue set");
            assert!(tail0(&m).is_null(), "a solo thread queued a request");
            // `combine`'s own attempt; the wait reads the held word.
            #[cfg(feature = "stats")]
            assert_eq!(
                steals() - steals_before,
                1,
                "compare-and-swaps on the held word before the solo call queued"
            );
        }
        drop(guard);
        await_state("the closure", || *m.lock() == u64::from(round) + 1);
    }
    drop(go);
    assert!(w.join().unwrap(), "a closure ran on another thread");
}

/// Spawns `f` and waits until its request is queued on node 0 of `lock`.
fn spawn_queued_raw<X: Send + 'static>(
    lock: &Arc<RawCombiningMutex>,
    f: impl FnOnce(&RawCombiningMutex) -> X + Send + 'static,
) -> thread::JoinHandle<X> {
    let before = lock.request_tails()[0];
    let l2 = Arc::clone(lock);
    let h = thread::spawn(move || f(&l2));
    let start = Instant::now();
    while lock.request_tails()[0] == before {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the request never queued"
        );
        thread::yield_now();
    }
    h
}

/// Two callers of the raw lock, each with its own object of its own type
/// (`[u64; 4]` and `u64`): the second's closure runs on the first's
/// thread (its combiner), and still on the second's object.
#[test]
fn each_closure_runs_on_its_own_callers_data() {
    let _pool = pool_shared();
    let lock = Arc::new(RawCombiningMutex::new());
    lock.raw_lock().acquire();
    let a = spawn_queued_raw(&lock, |l| {
        let mut words = [10u64, 20, 30, 40];
        // SAFETY: `words` is this call's own object, reached only by it.
        let r = unsafe {
            l.combine(&raw mut words, |w: &mut [u64; 4]| {
                w[0] += 1;
                w[0]
            })
        };
        (r, words)
    });
    let b = spawn_queued_raw(&lock, |l| {
        let me = thread::current().id();
        let mut x = 7u64;
        // SAFETY: `x` is this call's own object, reached only by it.
        let (r, ran_on) = unsafe {
            l.combine(&raw mut x, |x: &mut u64| {
                *x += 100;
                (*x, thread::current().id())
            })
        };
        (r, x, ran_on != me)
    });
    // SAFETY: acquired above by this thread.
    unsafe { lock.raw_lock().release() };
    let (ra, words) = a.join().unwrap();
    let (rb, x, combined) = b.join().unwrap();
    assert!(combined, "the second closure did not run on the combiner");
    assert_eq!(
        (ra, words),
        (11, [11, 20, 30, 40]),
        "the first caller's object"
    );
    assert_eq!((rb, x), (107, 107), "the second caller's object");
}

/// Uncontended, `combine` runs the closure on the caller.
#[test]
fn uncontended_combine_runs_on_the_caller() {
    let m = CombiningMutex::new(Vec::new());
    assert_eq!(push(&m, 7), (thread::current().id(), vec![7]));
}

/// A request of this thread for the closure in `slot`, on `data`.
fn request_for<T, F: FnOnce(&mut T) -> R, R>(
    slot: &UnsafeCell<Slot<T, F, R>>,
    data: *mut T,
) -> Request {
    Request::new(slot, data.cast(), run_slot::<T, F, R>)
}

/// Spins (yielding) until `flag` is set; fails after 10 s.
fn wait_for(flag: &AtomicBool, what: &str) {
    let start = Instant::now();
    while !flag.load(StdOrdering::Relaxed) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what} never happened"
        );
        thread::yield_now();
    }
}

/// A combiner whose successor swapped the queue's tail but has not linked
/// yet (this test thread plays that newcomer, stopped between its swap and
/// its link) does not wait for the link holding the global lock: a `lock()`
/// caller gets the lock meanwhile, and once the newcomer links, combining is
/// handed to it and its closure runs on its own thread.
#[test]
fn combiner_waits_for_an_unlinked_successor_without_the_global_lock() {
    let _pool = pool_shared();
    let m = Arc::new(CombiningMutex::new(Vec::new()));
    let ran = Arc::new(AtomicBool::new(false));
    let guard = m.lock();
    let a = {
        let ran = Arc::clone(&ran);
        spawn_queued(&m, move |m: &CombiningMutex<Vec<usize>>| {
            m.combine(move |v| {
                v.push(1);
                ran.store(true, StdOrdering::Relaxed);
                thread::current().id()
            })
        })
    };
    // The newcomer: swaps itself in behind A's request, does not link.
    let slot = Slot::new(|v: &mut Vec<usize>| {
        v.push(2);
        thread::current().id()
    });
    let request = request_for(&slot, m.inner.data_ptr());
    let set = raw(&m)
        .join_queues()
        .expect("the pool has no free queue set");
    let queue = raw(&m).my_queue(&set);
    let pred = enqueue(queue, &request);
    assert!(!pred.is_null(), "A's request is not in the queue");
    drop(guard);
    // A holds the global lock and ran its closure; its request's link is
    // null while the tail is ours, so its CAS closing the queue fails.
    wait_for(&ran, "A's closure");
    let got_lock = m.try_lock_for(Duration::from_secs(2)).is_some();
    // SAFETY: `request` was enqueued on `queue` just above and stays on this
    // frame; its slot runs on the mutex's data, reached only under the lock.
    let served = unsafe { raw(&m).serve(queue, &request, pred) };
    raw(&m).end_use(set, served);
    // SAFETY: our request was served: nobody else accesses the slot.
    let ran_on = unsafe { slot.with_mut(|s| (*s).take_out()) };
    let a_ran_on = a.join().unwrap();
    assert!(
        got_lock,
        "the combiner held the global lock while it waited for an unlinked successor"
    );
    assert_eq!(
        ran_on.expect("no result").unwrap(),
        thread::current().id(),
        "combining was not handed to the late-linking successor"
    );
    assert_ne!(a_ran_on, thread::current().id());
    assert_eq!(*m.lock(), [1, 2]);
}

/// The next combiner's wake-up comes before the wake-ups of a batch's served
/// waiters (a full batch of them).
#[test]
fn the_next_combiner_is_woken_first() {
    let words: Vec<AtomicU32> = (0..=COMBINE_BATCH).map(|_| AtomicU32::new(0)).collect();
    let (served, next) = words.split_at(COMBINE_BATCH as usize - 1);
    let mut wakes = Wakes::new();
    for w in served {
        wakes.done(Some(std::ptr::from_ref(w)));
    }
    wakes.hand_over(Some(std::ptr::from_ref(&next[0])));
    let mut order = Vec::new();
    wakes.wake_with(|w| order.push(w));
    assert_eq!(order.len(), COMBINE_BATCH as usize);
    assert_eq!(
        order[0],
        std::ptr::from_ref(&next[0]),
        "the next combiner was not woken first"
    );
    let rest: Vec<_> = served.iter().map(std::ptr::from_ref).collect();
    assert_eq!(
        order[1..],
        rest[..],
        "the served waiters were not woken in order"
    );
}

/// `try_combine` runs the closure on this thread when the lock is free, and
/// returns `None` without queueing (nor running the closure) when it is held.
#[test]
fn try_combine_never_queues() {
    let m = Arc::new(CombiningMutex::new(0u32));
    assert_eq!(m.try_combine(|n| std::mem::replace(n, 5)), Some(0));
    let guard = m.lock();
    let ran = Arc::new(AtomicBool::new(false));
    let m2 = Arc::clone(&m);
    let r2 = Arc::clone(&ran);
    let other = thread::spawn(move || {
        m2.try_combine(|n| {
            r2.store(true, StdOrdering::Relaxed);
            *n
        })
    });
    assert_eq!(other.join().unwrap(), None);
    assert!(
        !ran.load(StdOrdering::Relaxed),
        "the closure ran while the lock was held"
    );
    assert!(tail0(&m).is_null(), "try_combine queued a request");
    // Not `Send`: it runs on this thread only.
    let here = std::rc::Rc::new(1);
    assert_eq!(m.try_combine(|n| *n + *here), None);
    drop(guard);
    assert_eq!(m.try_combine(|n| *n + *here), Some(6));
}

/// `combine_for` / `combine_until` give up after their timeout while the lock
/// is held (without queueing), and run the closure once it is free.
#[test]
fn timed_combines() {
    let m = Arc::new(CombiningMutex::new(0u32));
    let guard = m.lock();
    let m2 = Arc::clone(&m);
    let timed_out = thread::spawn(move || {
        let a = m2.combine_for(Duration::from_millis(5), |n| *n += 1);
        let b = m2.combine_until(Instant::now() + Duration::from_millis(5), |n| *n += 1);
        (a, b)
    })
    .join()
    .unwrap();
    assert_eq!(timed_out, (None, None));
    assert!(tail0(&m).is_null(), "a timed combine queued a request");
    let m2 = Arc::clone(&m);
    let waits = thread::spawn(move || m2.combine_for(Duration::from_secs(60), |n| *n + 1));
    drop(guard);
    assert_eq!(waits.join().unwrap(), Some(1));
    let deadline = Instant::now() + Duration::from_secs(60);
    assert_eq!(m.combine_until(deadline, |n| *n + 2), Some(2));
    assert_eq!(*m.lock(), 0, "a timed-out closure ran");
}

/// A closure may combine on *another* combining lock (and that one's
/// closure on a third): the debug-build re-entry check names only the lock
/// a closure runs on.
#[test]
fn nested_combine_on_other_locks() {
    let a = CombiningMutex::new(1u32);
    let b = CombiningMutex::new(2u32);
    let c = CombiningMutex::new(3u32);
    let sum = a.combine(|x| *x + b.combine(|y| *y + c.combine(|z| *z)) + *b.lock());
    assert_eq!(sum, 8);
    assert_eq!(a.try_combine(|x| *x), Some(1));
}

/// Debug builds: `combine` on the lock a closure runs on panics (instead of
/// waiting for itself).
#[cfg(debug_assertions)]
#[test]
#[should_panic(
    expected = "combine on a CombiningMutex from inside a closure running on the same lock"
)]
fn combine_inside_own_closure_panics() {
    let m = CombiningMutex::new(0u32);
    m.combine(|_| m.combine(|n| *n));
}

/// Debug builds: `lock()` on the lock a closure runs on panics.
#[cfg(debug_assertions)]
#[test]
#[should_panic(
    expected = "lock() on a CombiningMutex from inside a closure running on the same lock"
)]
fn lock_inside_own_closure_panics() {
    let m = CombiningMutex::new(0u32);
    m.combine(|n| *n + *m.lock());
}

/// Debug builds: a closure that runs on a combiner and calls `lock()` on its
/// lock panics (on the combiner, resumed on its caller); the combiner and the
/// lock go on.
#[cfg(debug_assertions)]
#[test]
fn lock_inside_a_combined_closure_panics_on_its_caller() {
    let _pool = pool_shared();
    let m = Arc::new(CombiningMutex::new(Vec::new()));
    let guard = m.lock();
    let first = spawn_queued(&m, |m: &CombiningMutex<Vec<usize>>| push(m, 1));
    let reentering = spawn_queued(&m, |m: &CombiningMutex<Vec<usize>>| {
        m.combine(|v| {
            v.push(2);
            v.len() + m.lock().len()
        })
    });
    drop(guard);
    let (combiner, log) = first.join().expect("the combiner panicked");
    assert_eq!(log, [1]);
    let payload = reentering
        .join()
        .expect_err("the re-entering closure returned");
    let msg = payload
        .downcast_ref::<String>()
        .expect("a formatted panic message");
    assert!(msg.starts_with("lock() on a CombiningMutex"), "{msg}");
    assert_eq!(push(&m, 3).1, [1, 2, 3]);
    let _ = combiner;
}

/// The sizes the module docs state: the CNA lock and one 8-byte word (the
/// exact sizes without the `stats` feature, whose counters the CNA lock adds).
#[test]
fn sizes() {
    use crate::raw_lock::RawLock;
    use core::mem::{align_of, size_of};
    type Own = &'static crate::Config;
    let word = |lock: usize| (lock + 8).next_multiple_of(8);
    assert_eq!(
        size_of::<RawCombiningMutex>(),
        word(size_of::<RawLock<true>>())
    );
    assert_eq!(
        size_of::<RawCombiningMutex<Own>>(),
        word(size_of::<RawLock<true, Own>>())
    );
    assert_eq!(align_of::<RawCombiningMutex>(), 8);
    if cfg!(not(feature = "stats")) {
        assert_eq!(size_of::<RawCombiningMutex>(), 16);
        assert_eq!(size_of::<RawCombiningMutex<Own>>(), 24);
        assert_eq!(size_of::<CombiningMutex<u64>>(), 24);
        assert_eq!(size_of::<CombiningMutex<u8>>(), 24);
        assert_eq!(align_of::<CombiningMutex<u64>>(), 8);
    }
}

/// Waits (yielding) until `cond` holds; fails after 10 s.
fn await_state(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what} never happened"
        );
        thread::yield_now();
    }
}

/// A lock binds a queue set only when a `combine` finds it contended, the
/// set's user count follows the threads queued on it, and once the last of
/// them has returned the idle lock has given the set back. Again and again
/// on the same lock, and on many locks in turn (more than the pool holds).
#[test]
fn an_idle_lock_gives_its_queue_set_back() {
    let _pool = pool_shared();
    let m = Arc::new(CombiningMutex::new(0u64));
    assert_eq!(m.combine(|n| *n + 1), 1);
    assert_eq!(
        m.queue_set(),
        None,
        "an uncontended combine bound a queue set"
    );
    for round in 0..4 {
        let guard = m.lock();
        let waiters: Vec<_> = (0..3)
            .map(|_| spawn_queued(&m, |m: &CombiningMutex<u64>| m.combine(|n| *n += 1)))
            .collect();
        let (_, users) = m
            .queue_set()
            .expect("a contended combine bound no queue set");
        assert_eq!(
            users, 3,
            "round {round}: the set's users are not its waiters"
        );
        drop(guard);
        for w in waiters {
            w.join().unwrap();
        }
        // Every waiter left before its `combine` returned (and the join
        // orders that before this read).
        assert_eq!(
            m.queue_set(),
            None,
            "round {round}: the idle lock kept its queue set"
        );
    }
    assert_eq!(*m.lock(), 12);
    // More locks, each contended once and then idle (kept alive), than the
    // pool has sets: each gives its set back.
    let locks: Vec<_> = (0..COMBINING_POOL_SIZE + 8)
        .map(|_| Arc::new(CombiningMutex::new(0u64)))
        .collect();
    for (i, l) in locks.iter().enumerate() {
        let guard = l.lock();
        let w = spawn_queued(l, |l: &CombiningMutex<u64>| l.combine(|n| *n += 1));
        await_state("the waiter's queue set", || l.queue_set().is_some());
        drop(guard);
        w.join().unwrap();
        assert_eq!(l.queue_set(), None, "lock {i} kept its queue set");
        assert_eq!(*l.lock(), 1);
    }
}

/// With every queue set of the pool bound elsewhere, a `combine` that finds
/// its lock held waits for the global lock and runs its closure itself (no
/// combiner runs it, no set is bound), and once sets are free again the lock
/// binds one as before.
#[test]
fn a_contended_combine_runs_its_own_closure_when_the_pool_is_empty() {
    let _pool = POOL_TESTS.write().unwrap_or_else(|e| e.into_inner());
    let pool = super::pool::pool();
    let taken: Vec<u32> = std::iter::from_fn(|| pool.claim(0)).collect();
    assert_eq!(
        <RawCombiningMutex>::bound_queue_sets(),
        COMBINING_POOL_SIZE,
        "the pool was not emptied"
    );
    let m = Arc::new(CombiningMutex::new(0u64));
    let guard = m.lock();
    let global = || raw(&m).raw_lock().tail_word() & !3;
    let before = global();
    let m2 = Arc::clone(&m);
    let h = thread::spawn(move || {
        let me = thread::current().id();
        m2.combine(move |n| {
            *n += 1;
            thread::current().id() == me
        })
    });
    await_state("the combine to wait for the global lock", || {
        global() != before
    });
    assert_eq!(m.queue_set(), None, "a set was bound from an empty pool");
    assert!(tail0(&m).is_null(), "a request was queued");
    drop(guard);
    assert!(h.join().unwrap(), "the closure did not run on its caller");
    for i in taken {
        pool.free(i);
    }
    // Sets are free again: contention binds one.
    let guard = m.lock();
    let w = spawn_queued(&m, |m: &CombiningMutex<u64>| m.combine(|n| *n += 1));
    assert!(
        m.queue_set().is_some(),
        "no set bound once the pool had sets"
    );
    drop(guard);
    w.join().unwrap();
    assert_eq!(m.queue_set(), None);
    assert_eq!(*m.lock(), 2);
}

/// A small closure (two captured references) and its result (a `u64`, or
/// a panic) share the cache line of their request.
#[test]
fn a_small_closure_and_its_result_share_the_request_line() {
    use super::queue::Queued;
    use core::mem::{align_of, offset_of, size_of_val};
    let (a, b) = (1u64, 2u64);
    let (ra, rb) = (&a, &b);
    let slot: UnsafeCell<Slot<u64, _, u64>> = Slot::new(move |n: &mut u64| *n + *ra + *rb);
    assert!(
        offset_of!(Queued<u8>, slot) + size_of_val(&slot) <= 128,
        "a request and a small slot span {} + {} bytes",
        offset_of!(Queued<u8>, slot),
        size_of_val(&slot)
    );
    assert_eq!(align_of::<Queued<u8>>(), 128);
}
