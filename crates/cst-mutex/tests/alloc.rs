//! A counting global allocator checks that the locks allocate nothing of
//! their own, uncontended or contended. (Its own test binary: it sets
//! `#[global_allocator]`.)
#![cfg(not(numa_loom))]

use cst_mutex::{Mutex, RwLock};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::thread;

/// Counts each thread's allocations while it counts ([`allocations_in`]).
struct Counting;

thread_local! {
    /// Allocations of any size made by this thread while it counts (const
    /// initialised, no destructor: reading it never allocates).
    static THREAD_ALLOCS: std::cell::Cell<(bool, usize)> = const { std::cell::Cell::new((false, 0)) };
}

/// Runs `f` and returns how many allocations this thread made meanwhile.
fn allocations_in(f: impl FnOnce()) -> usize {
    THREAD_ALLOCS.with(|c| c.set((true, 0)));
    f();
    THREAD_ALLOCS.with(|c| {
        let (_, n) = c.get();
        c.set((false, 0));
        n
    })
}

// SAFETY: forwards to `System`, only counting on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // `try_with`: a thread being torn down has no slot any more.
        let _ = THREAD_ALLOCS.try_with(|c| {
            let (on, n) = c.get();
            if on {
                c.set((true, n + 1));
            }
        });
        // SAFETY: forwarded contract of `GlobalAlloc::alloc`.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded contract of `GlobalAlloc::dealloc`.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Contends on a lock from `threads` threads over 2 virtual nodes until each
/// node's threads had to wait at least once.
fn contend<F: Fn() + Send + Sync + 'static>(threads: usize, f: F) {
    let f = Arc::new(f);
    let start = Arc::new(Barrier::new(threads));
    let hs: Vec<_> = (0..threads)
        .map(|i| {
            let (f, start) = (f.clone(), start.clone());
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 2));
                start.wait();
                f();
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

/// Every uncontended operation of every type, including the timed, fair,
/// upgradable and downgrading ones and a condvar nobody waits on, allocates
/// nothing at all (counted per thread, so other tests do not interfere).
#[test]
fn uncontended_operations_never_allocate() {
    use cst_mutex::{Condvar, MutexGuard, RwLockUpgradableReadGuard, RwLockWriteGuard};
    use std::time::Duration;
    let m = Mutex::new(0u64);
    let l = RwLock::new(0u64);
    let cv = Condvar::new();
    let t = Duration::from_millis(1);
    // The first operation of the process may allocate once: numa-spin's
    // queue lock under the RwLock reads its configuration from the
    // environment on first use. That happens before the count.
    *l.write() += 1;
    let n = allocations_in(|| {
        for _ in 0..1000 {
            *m.lock() += 1;
            *m.try_lock().unwrap() += 1;
            *m.try_lock_for(t).unwrap() += 1;
            MutexGuard::unlock_fair(m.lock());
            *l.write() += 1;
            *l.try_write_for(t).unwrap() += 1;
            let (a, b) = (l.read(), l.try_read_for(t).unwrap());
            std::hint::black_box((*a, *b));
            drop((a, b));
            let up = l.upgradable_read();
            let w = RwLockUpgradableReadGuard::upgrade(up);
            let r = RwLockWriteGuard::downgrade(w);
            drop(r);
            assert!(!cv.notify_one());
            assert_eq!(cv.notify_all(), 0);
        }
    });
    assert_eq!(n, 0, "uncontended operations allocated {n} times");
}

/// Uncontended reads through lock_api 0.4 (no guard state) allocate nothing
/// either, on a fresh thread: a state-word read keeps no per-thread record.
#[cfg(feature = "lock_api_04")]
#[test]
fn uncontended_lock_api_04_reads_never_allocate() {
    use cst_mutex::lock_api_04::{RwLock, lock_api::RwLockUpgradableReadGuard};
    let l = Arc::new(RwLock::new(0u64));
    // The process's first lock operation may read numa-spin's configuration
    // from the environment (a process-wide, once-only allocation): done here,
    // before the count, as `uncontended_operations_never_allocate` does.
    *l.write() += 1;
    let l2 = Arc::clone(&l);
    let n = thread::spawn(move || {
        allocations_in(|| {
            for _ in 0..1000 {
                let (a, b) = (l2.read(), l2.read_recursive());
                std::hint::black_box((*a, *b));
                drop((a, b));
                let r = RwLockUpgradableReadGuard::downgrade(l2.upgradable_read());
                drop(r);
                *l2.write() += 1;
            }
        })
    })
    .join()
    .unwrap();
    assert_eq!(n, 0, "uncontended lock_api 0.4 reads allocated {n} times");
    assert_eq!(*l.read(), 1001);
}

/// Contended locks hold no heap memory: once each thread has made its first
/// contended acquisition and first park (numa-spin's queue-node slot, the
/// parking lot's per-thread data and table), contended mutexes (queued,
/// timed and condition-variable waiters), rwlocks and fair mutexes make no
/// allocation at all, so there is nothing a lock freed without a drop (as C
/// frees a `pthread_mutex_t` without `pthread_mutex_destroy`) could leak.
/// Counted per thread, on every thread of the contention, after the same
/// threads warmed up on a set of their own.
#[test]
fn contended_locks_allocate_nothing_after_warm_up() {
    use cst_mutex::{Condvar, FairMutex};
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;
    const THREADS: usize = 6;
    const ROUNDS: usize = 4;
    struct Set {
        m: Mutex<u64>,
        f: FairMutex<u64>,
        l: RwLock<u64>,
        cv: Condvar,
    }
    let sets: Arc<Vec<Set>> = Arc::new(
        (0..ROUNDS)
            .map(|_| Set {
                m: Mutex::new(0),
                f: FairMutex::new(0),
                l: RwLock::new(0),
                cv: Condvar::new(),
            })
            .collect(),
    );
    let allocs: Arc<Vec<AtomicUsize>> =
        Arc::new((0..ROUNDS).map(|_| AtomicUsize::new(0)).collect());
    let round_start = Arc::new(Barrier::new(THREADS));
    let (sets2, allocs2) = (sets.clone(), allocs.clone());
    contend(THREADS, move || {
        for (r, set) in sets2.iter().enumerate() {
            round_start.wait();
            let work = || {
                for i in 0..300u64 {
                    *set.m.lock() += 1;
                    *set.f.lock() += 1;
                    if let Some(mut g) = set.m.try_lock_for(Duration::from_micros(50)) {
                        *g += 1;
                    }
                    if i % 4 == 0 {
                        *set.l.write() += 1;
                    } else {
                        std::hint::black_box(*set.l.read());
                    }
                    if i % 50 == 0 {
                        let mut g = set.m.lock();
                        let _ = set.cv.wait_for(&mut g, Duration::from_micros(100));
                        set.cv.notify_all();
                    }
                }
            };
            // Round 0 warms the threads up; the others count.
            let n = if r == 0 {
                work();
                0
            } else {
                allocations_in(work)
            };
            allocs2[r].fetch_add(n, Ordering::SeqCst);
        }
    });
    for (r, set) in sets.iter().enumerate() {
        assert_eq!(
            *set.f.lock(),
            300 * THREADS as u64,
            "round {r}: lost updates"
        );
        let n = allocs[r].load(Ordering::SeqCst);
        assert_eq!(n, 0, "round {r}: contended locks allocated {n} times");
    }
}
