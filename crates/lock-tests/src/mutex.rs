//! The generic mutex suite: functions over any `lock_api::RawMutex`, and
//! [`mutex_suite!`](crate::mutex_suite) which instantiates them as `#[test]`s.
//!
//! Every function panics (fails the test) on a violation; none measures time.

use lock_api::{Mutex, RawMutex, RawMutexFair};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

/// The state a test's critical sections update without atomics: a torn or lost
/// update, or two threads inside at once, means the lock failed.
#[derive(Debug, Default)]
pub struct Shared {
    /// Incremented with a separate read and write (plus work in between) per entry.
    pub count: u64,
    /// Per-thread entry counts, indexed by thread number.
    pub per_thread: Vec<u64>,
}

/// Runs a critical section that detects overlap: `inside` flips to true on entry
/// and must have been false; the counter is read, some work is done, then written.
pub(crate) fn critical_section(shared: &mut Shared, inside: &AtomicBool, me: usize, work: u32) {
    assert!(
        !inside.swap(true, Ordering::Relaxed),
        "two threads inside the critical section at once"
    );
    let before = shared.count;
    for i in 0..work {
        black_box(i);
    }
    shared.count = black_box(before) + 1;
    shared.per_thread[me] += 1;
    assert!(
        inside.swap(false, Ordering::Relaxed),
        "critical-section flag cleared by another thread"
    );
}

/// Mutual exclusion: `threads` threads, thread `i` on virtual node `i % nodes`, each
/// entering the critical section `iters` times; a non-atomic counter must end at
/// `threads * iters`. Returns the per-thread counts (for fairness checks).
pub fn exclusion<R>(threads: usize, nodes: usize, iters: u64) -> Vec<u64>
where
    R: RawMutex + Send + Sync + 'static,
{
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
                for i in 0..iters {
                    let mut guard = lock.lock();
                    critical_section(&mut guard, &inside, me, (i % 8) as u32 * 16);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a worker thread panicked");
    }
    let shared = lock.lock();
    assert_eq!(shared.count, threads as u64 * iters, "lost updates");
    assert!(shared.per_thread.iter().all(|&n| n == iters));
    shared.per_thread.clone()
}

/// Mutual exclusion with a mix of `lock`/`try_lock` and `unlock`/`unlock_fair`:
/// `threads` threads on `nodes` virtual nodes; every fourth release is fair.
pub fn exclusion_mixed<R>(threads: usize, nodes: usize, iters: u64)
where
    R: RawMutexFair + Send + Sync + 'static,
{
    let lock = Arc::new(Mutex::<R, Shared>::new(Shared {
        count: 0,
        per_thread: vec![0; threads],
    }));
    let inside = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..threads)
        .map(|me| {
            let (lock, inside) = (lock.clone(), inside.clone());
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(me % nodes.max(1)));
                let mut done = 0;
                let mut i = 0u64;
                while done < iters {
                    i += 1;
                    let guard = if i.is_multiple_of(3) {
                        match lock.try_lock() {
                            Some(g) => g,
                            None => continue,
                        }
                    } else {
                        lock.lock()
                    };
                    let mut guard = guard;
                    critical_section(&mut guard, &inside, me, 8);
                    done += 1;
                    if i.is_multiple_of(4) {
                        lock_api::MutexGuard::unlock_fair(guard);
                    } else if i.is_multiple_of(7) {
                        lock_api::MutexGuard::bump(&mut guard);
                        drop(guard);
                    } else {
                        drop(guard);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a worker thread panicked");
    }
    assert_eq!(lock.lock().count, threads as u64 * iters, "lost updates");
}

/// A panic inside the critical section releases the lock (lock_api's guard drop
/// on unwind), with another thread waiting; the update made before the panic stays.
pub fn panic_in_critical_section<R>()
where
    R: RawMutex + Send + Sync + 'static,
{
    let lock = Arc::new(Mutex::<R, u64>::new(0));
    let holding = Arc::new(Barrier::new(2));
    let waiter = {
        let (lock, holding) = (lock.clone(), holding.clone());
        thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(1));
            holding.wait();
            *lock.lock() += 10;
        })
    };
    let panicker = {
        let (lock, holding) = (lock.clone(), holding.clone());
        thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(0));
            let mut guard = lock.lock();
            *guard += 1;
            holding.wait();
            // Give the waiter time to queue up behind us (not a timing assertion).
            thread::sleep(std::time::Duration::from_millis(5));
            panic!("deliberate panic in the critical section");
        })
    };
    assert!(
        panicker.join().is_err(),
        "the critical section should have panicked"
    );
    waiter
        .join()
        .expect("waiter failed to acquire after the panic");
    assert!(!lock.is_locked());
    assert_eq!(*lock.lock(), 11);
}

/// `try_lock` succeeds on a free lock, fails while another thread holds it, and
/// succeeds again after the release.
pub fn try_lock<R>()
where
    R: RawMutex + Send + Sync + 'static,
{
    let lock = Arc::new(Mutex::<R, u32>::new(5));
    {
        let guard = lock.try_lock().expect("try_lock on a free lock");
        assert_eq!(*guard, 5);
        assert!(lock.is_locked());
        let lock2 = lock.clone();
        let other = thread::spawn(move || lock2.try_lock().is_none());
        assert!(other.join().unwrap(), "try_lock succeeded on a held lock");
    }
    assert!(!lock.is_locked());
    *lock.try_lock().expect("try_lock after release") += 1;
    assert_eq!(*lock.lock(), 6);
}

/// `try_lock` racing with `lock` from several threads: exclusion holds and every
/// successful `try_lock` is counted.
pub fn try_lock_races_lock<R>(threads: usize, iters: u64)
where
    R: RawMutex + Send + Sync + 'static,
{
    let lock = Arc::new(Mutex::<R, u64>::new(0));
    let tried = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|me| {
            let (lock, tried) = (lock.clone(), tried.clone());
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(me % 2));
                for _ in 0..iters {
                    if me % 2 == 0 {
                        *lock.lock() += 1;
                    } else if let Some(mut g) = lock.try_lock() {
                        *g += 1;
                        tried.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let lockers = threads.div_ceil(2) as u64;
    assert_eq!(
        *lock.lock(),
        lockers * iters + tried.load(Ordering::Relaxed) as u64
    );
}

/// A forgotten guard leaves the lock held (and nothing worse): `is_locked` stays
/// true, `try_lock` fails, and the mutex can still be dropped.
pub fn forget_guard<R>()
where
    R: RawMutex + Send + Sync + 'static,
{
    let lock = Mutex::<R, Vec<u8>>::new(vec![1, 2, 3]);
    std::mem::forget(lock.lock());
    assert!(lock.is_locked());
    assert!(lock.try_lock().is_none());
    drop(lock);
}

/// `unlock_fair` hands the lock to a queued waiter: right after a fair release the
/// releasing thread's `try_lock` must fail, because the waiter already owns the lock.
///
/// Each round waits until the waiter is asleep inside `lock()` (parked, or napping as
/// a numa-spin queue head), as the OS shows it (`/proc/<pid>/task/<tid>/stat`, state
/// `S`): then it is queued whatever the machine's load, and `try_lock` must fail in
/// every round. Where `/proc` does not show it, each round waits until the waiter is
/// about to call `lock()` and 20 ms more, and the test fails only if `try_lock` got in
/// in all 3 rounds (a broken `unlock_fair` fails every round).
pub fn unlock_fair_hands_over<R>()
where
    R: RawMutexFair + Send + Sync + 'static,
{
    let mut stolen_rounds = 0;
    let mut observed_rounds = 0;
    for _ in 0..3 {
        let lock = Arc::new(Mutex::<R, u64>::new(0));
        let waiter_dir = Arc::new(std::sync::Mutex::new(None));
        let entering = Arc::new(AtomicBool::new(false));
        let guard = lock.lock();
        let waiter = {
            let (lock, entering, dir) = (lock.clone(), entering.clone(), waiter_dir.clone());
            thread::spawn(move || {
                *dir.lock().unwrap() = own_proc_dir();
                entering.store(true, Ordering::SeqCst);
                *lock.lock() += 1;
            })
        };
        while !entering.load(Ordering::SeqCst) {
            thread::yield_now();
        }
        let dir = waiter_dir.lock().unwrap().clone();
        let observed = match dir {
            Some(dir) => {
                // The waiter has nothing else to sleep on: it sleeps in `lock()`.
                while !is_asleep(&dir).unwrap_or(true) {
                    thread::yield_now();
                }
                is_asleep(&dir).is_some()
            }
            None => false,
        };
        if !observed {
            thread::sleep(std::time::Duration::from_millis(20));
        }
        lock_api::MutexGuard::unlock_fair(guard);
        if let Some(mut g) = lock.try_lock() {
            if *g == 0 {
                stolen_rounds += 1;
                assert!(
                    !observed,
                    "try_lock got the lock right after unlock_fair with the waiter asleep in lock()"
                );
            }
            *g += 100;
        }
        observed_rounds += usize::from(observed);
        waiter.join().unwrap();
        let v = *lock.lock();
        assert!(v == 1 || v == 101, "unexpected value {v}");
    }
    if observed_rounds == 0 {
        assert!(
            stolen_rounds < 3,
            "try_lock got the lock right after unlock_fair in every round"
        );
    }
}

/// The calling thread's directory under `/proc` (Linux: `/proc/<pid>/task/<tid>`),
/// where the OS shows whether it sleeps; `None` where there is none.
fn own_proc_dir() -> Option<std::path::PathBuf> {
    let rel = std::fs::read_link("/proc/thread-self").ok()?;
    Some(std::path::Path::new("/proc").join(rel))
}

/// Whether the thread of `dir` (see [`own_proc_dir`]) is asleep in the kernel
/// (state `S` or `D`); `None` if its state cannot be read.
fn is_asleep(dir: &std::path::Path) -> Option<bool> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    // `pid (comm) state ...`: the command may contain spaces and parentheses.
    let (_, rest) = stat.rsplit_once(')')?;
    let state = rest.trim_start().chars().next()?;
    Some(matches!(state, 'S' | 'D'))
}

/// Instantiates the generic mutex suite as `#[test]` functions in a module `$name`
/// for the raw mutex type `$raw` (which must also implement `RawMutexFair`), plus
/// compile-time `Send`/`Sync` assertions for `Mutex` and its guard.
///
/// `guard: Send` asserts that `MutexGuard<$raw, u64>` is `Send`; `guard: !Send`
/// asserts it is not.
///
/// ```ignore
/// lock_tests::mutex_suite!(cna, numa_spin::RawMutex, guard: Send);
/// ```
///
/// Without `guard:` no assertion on the guard is made (the registry's suites).
#[macro_export]
macro_rules! mutex_suite {
    ($name:ident, $raw:ty) => {
        $crate::mutex_suite!(@tests $name, $raw);
    };
    ($name:ident, $raw:ty, guard: Send) => {
        $crate::mutex_suite!(@tests $name, $raw);
        $crate::static_assertions::assert_impl_all!(
            $crate::lock_api::MutexGuard<'static, $raw, u64>: Send, Sync
        );
    };
    ($name:ident, $raw:ty, guard: !Send) => {
        $crate::mutex_suite!(@tests $name, $raw);
        $crate::static_assertions::assert_impl_all!(
            $crate::lock_api::MutexGuard<'static, $raw, u64>: Sync
        );
        $crate::static_assertions::assert_not_impl_any!(
            $crate::lock_api::MutexGuard<'static, $raw, u64>: Send
        );
    };
    (@tests $name:ident, $raw:ty) => {
        #[allow(missing_docs)]
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            use $crate::mutex as suite;

            $crate::static_assertions::assert_impl_all!(
                $crate::lock_api::Mutex<$raw, u64>: Send, Sync
            );
            $crate::static_assertions::assert_not_impl_any!(
                $crate::lock_api::Mutex<$raw, std::rc::Rc<u64>>: Send, Sync
            );

            #[test]
            fn exclusion_2_threads_2_nodes() {
                suite::exclusion::<$raw>(2, 2, 20_000);
            }

            #[test]
            fn exclusion_4_threads_2_nodes() {
                suite::exclusion::<$raw>(4, 2, 5_000);
            }

            #[test]
            fn exclusion_8_threads_4_nodes() {
                suite::exclusion::<$raw>(8, 4, 2_000);
            }

            #[test]
            fn exclusion_16_threads_4_nodes() {
                suite::exclusion::<$raw>(16, 4, 1_000);
            }

            #[test]
            fn exclusion_with_try_lock_and_fair_unlock() {
                suite::exclusion_mixed::<$raw>(6, 3, 1_000);
            }

            #[test]
            fn panic_in_critical_section() {
                suite::panic_in_critical_section::<$raw>();
            }

            #[test]
            fn try_lock() {
                suite::try_lock::<$raw>();
            }

            #[test]
            fn try_lock_races_lock() {
                suite::try_lock_races_lock::<$raw>(4, 5_000);
            }

            #[test]
            fn forget_guard() {
                suite::forget_guard::<$raw>();
            }

            #[test]
            fn unlock_fair_hands_over() {
                suite::unlock_fair_hands_over::<$raw>();
            }

            #[test]
            fn static_mutex() {
                static M: $crate::lock_api::Mutex<$raw, u64> = $crate::lock_api::Mutex::new(0);
                let threads: Vec<_> = (0..4)
                    .map(|i| {
                        std::thread::spawn(move || {
                            $crate::numa_topology::set_current_thread_node(Some(i % 2));
                            for _ in 0..1_000 {
                                *M.lock() += 1;
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
