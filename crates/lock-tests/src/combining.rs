//! The generic combining suite: functions over any registry
//! [`CombiningMutex`] (a timed `lock_api` mutex whose critical sections can also
//! be shipped, as closures, to a combiner of the caller's NUMA node), and
//! [`combining_suite!`](crate::combining_suite) which instantiates them as
//! `#[test]`s.
//!
//! Every function panics (fails the test) on a violation; none measures time.
//! The combining locks also run the mutex and timed suites (their `lock()`
//! guards are ordinary `lock_api` guards); these tests add `combine`, alone and
//! beside guards and timed acquisitions.

use std::any::Any;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Barrier};
use std::thread::{self, ThreadId};
use std::time::Duration;

use lock_api::Mutex;
use numa_lock_registry::{CombiningMutex, combine};

use crate::mutex::{Shared, critical_section};

/// Mutual exclusion between combined closures, `lock()` guards and
/// `try_lock_for` guards: `threads` threads, thread `i` on virtual node
/// `i % nodes`, each entering `iters` critical sections, four in five through
/// `combine`, the others through a guard (`lock()`, or `try_lock_for` with a
/// timeout of 0-49 us, retried until it succeeds). A non-atomic counter must end
/// at `threads * iters`, every critical section must get its own value of it
/// (the tickets 1..=total, each once), and every closure's result must reach the
/// thread that submitted it.
pub fn exclusion<R: CombiningMutex>(threads: usize, nodes: usize, iters: u64) {
    let lock = Arc::new(Mutex::<R, Shared>::new(Shared {
        count: 0,
        per_thread: vec![0; threads],
    }));
    let inside = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|me| {
            let (lock, inside, start) = (lock.clone(), inside.clone(), start.clone());
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(me % nodes.max(1)));
                start.wait();
                let mut tickets = Vec::with_capacity(iters as usize);
                for i in 0..iters {
                    let work = (i % 8) as u32 * 16;
                    let ticket = match i % 10 {
                        4 => {
                            let mut g = lock.lock();
                            critical_section(&mut g, &inside, me, work);
                            g.count
                        }
                        9 => loop {
                            let timeout = Duration::from_micros(i % 50);
                            if let Some(mut g) = lock.try_lock_for(timeout) {
                                critical_section(&mut g, &inside, me, work);
                                break g.count;
                            }
                        },
                        _ => {
                            let inside = &*inside;
                            let (ticket, submitter) = combine(&lock, move |s| {
                                critical_section(s, inside, me, work);
                                (s.count, me)
                            });
                            assert_eq!(submitter, me, "thread {me} got another's result");
                            ticket
                        }
                    };
                    tickets.push(ticket);
                }
                tickets
            })
        })
        .collect();
    let mut tickets: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("a worker thread panicked"))
        .collect();
    let total = threads as u64 * iters;
    let shared = lock.lock();
    assert_eq!(shared.count, total, "lost updates");
    assert!(shared.per_thread.iter().all(|&n| n == iters));
    tickets.sort_unstable();
    assert!(
        tickets.iter().copied().eq(1..=total),
        "two critical sections saw the same counter value, or one a value never written"
    );
}

/// The thread each closure ran on, and what it saw.
type Ran = (ThreadId, Vec<usize>);

/// Closures queued behind a guard run on combiners: while a guard is held,
/// `n` threads of node 0 each submit a closure; once the guard is dropped,
/// every closure runs, once, and at least one on another thread than its own
/// (that of its node's combiner). Retried a few times, because a thread
/// that is slow to start may find the lock free and run its closure itself.
pub fn queued_closures_run_on_combiners<R: CombiningMutex>(n: usize) {
    let mut combined = 0;
    for _ in 0..20 {
        let lock = Arc::new(Mutex::<R, Vec<usize>>::new(Vec::new()));
        let guard = lock.lock();
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let lock = lock.clone();
                let h = thread::spawn(move || {
                    numa_topology::set_current_thread_node(Some(0));
                    let ran: Ran = combine(&lock, move |v| {
                        v.push(i);
                        (thread::current().id(), v.clone())
                    });
                    (i, thread::current().id(), ran)
                });
                // Let it queue (not a timing assertion: the round only
                // counts if some closure ran elsewhere).
                thread::sleep(Duration::from_millis(5));
                h
            })
            .collect();
        drop(guard);
        for h in hs {
            let (i, me, (ran_on, seen)) = h.join().expect("a submitter panicked");
            assert_eq!(
                seen.last(),
                Some(&i),
                "thread {i} got another closure's result"
            );
            combined += usize::from(me != ran_on);
        }
        let mut all = lock.lock().clone();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..n).collect::<Vec<_>>(),
            "a closure ran twice or never"
        );
        if combined > 0 {
            return;
        }
    }
    panic!("no closure ran on a combiner in 20 rounds of {n} queued closures");
}

/// Closures run on a thread of their submitter's NUMA node (the submitter, or
/// the combiner of its node): `threads` threads on `nodes` virtual nodes
/// combine closures that record the node of the thread running them.
pub fn closures_stay_on_their_node<R: CombiningMutex>(threads: usize, nodes: usize, iters: u64) {
    let lock = Arc::new(Mutex::<R, u64>::new(0));
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|me| {
            let (lock, start) = (lock.clone(), start.clone());
            thread::spawn(move || {
                let node = me % nodes.max(1);
                numa_topology::set_current_thread_node(Some(node));
                start.wait();
                for _ in 0..iters {
                    let ran_on = combine(&lock, |n| {
                        *n += 1;
                        numa_topology::current_node()
                    });
                    assert_eq!(
                        ran_on, node,
                        "a closure of node {node} ran on node {ran_on}"
                    );
                }
                numa_topology::set_current_thread_node(None);
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a worker thread panicked");
    }
    assert_eq!(*lock.lock(), threads as u64 * iters);
}

/// A closure that panics on a combiner panics its own submitter, with its
/// payload, and nobody else: three closures queue behind a guard, the middle
/// one panics; the other two return their results, the data keeps all three
/// updates (no poisoning), and the lock works afterwards through both paths.
pub fn panic_reaches_its_submitter_only<R: CombiningMutex>() {
    let lock = Arc::new(Mutex::<R, Vec<usize>>::new(Vec::new()));
    let guard = lock.lock();
    let spawn = |i: usize| {
        let lock = lock.clone();
        let h = thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(0));
            combine(&lock, move |v| {
                v.push(i);
                if i == 2 {
                    std::panic::panic_any(42u32);
                }
                i * 10
            })
        });
        thread::sleep(Duration::from_millis(5));
        h
    };
    let (first, panicking, last) = (spawn(1), spawn(2), spawn(3));
    drop(guard);
    assert_eq!(first.join().expect("a panic reached another submitter"), 10);
    let payload: Box<dyn Any + Send> = panicking.join().expect_err("the panic was lost");
    assert_eq!(payload.downcast_ref::<u32>(), Some(&42));
    assert_eq!(last.join().expect("a panic reached another submitter"), 30);
    assert!(
        !lock.is_locked(),
        "the lock stayed held after a panicking closure"
    );
    let mut seen = lock.lock().clone();
    seen.sort_unstable();
    assert_eq!(seen, [1, 2, 3]);
    combine(&lock, |v| v.push(4));
    assert_eq!(lock.try_lock().expect("free").len(), 4);
}

/// Instantiates the combining suite as a module `$name` of `#[test]`s for the
/// registry `CombiningMutex` type `$raw`.
///
/// ```ignore
/// lock_tests::combining_suite!(combining, numa_spin::RawCombiningMutex);
/// ```
#[macro_export]
macro_rules! combining_suite {
    ($name:ident, $raw:ty) => {
        #[allow(missing_docs)]
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            use $crate::combining as suite;

            #[test]
            fn exclusion_2_threads_2_nodes() {
                suite::exclusion::<$raw>(2, 2, 20_000);
            }

            #[test]
            fn exclusion_8_threads_4_nodes() {
                suite::exclusion::<$raw>(8, 4, 2_000);
            }

            #[test]
            fn exclusion_16_threads_2_nodes() {
                suite::exclusion::<$raw>(16, 2, 1_000);
            }

            #[test]
            fn queued_closures_run_on_combiners() {
                suite::queued_closures_run_on_combiners::<$raw>(4);
            }

            #[test]
            fn closures_stay_on_their_node() {
                suite::closures_stay_on_their_node::<$raw>(8, 4, 2_000);
            }

            #[test]
            fn panic_reaches_its_submitter_only() {
                suite::panic_reaches_its_submitter_only::<$raw>();
            }

            #[test]
            fn static_mutex() {
                static M: $crate::lock_api::Mutex<$raw, u64> = $crate::lock_api::Mutex::new(0);
                let threads: Vec<_> = (0..4)
                    .map(|i| {
                        std::thread::spawn(move || {
                            $crate::numa_topology::set_current_thread_node(Some(i % 2));
                            for _ in 0..1_000 {
                                $crate::registry::combine(&M, |n| *n += 1);
                            }
                        })
                    })
                    .collect();
                for t in threads {
                    t.join().unwrap();
                }
                assert_eq!(*M.lock(), 4_000);
            }
        }
    };
}
