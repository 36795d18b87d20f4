//! A counting global allocator checks that snodes are allocated only on
//! contention, given back when the contention ends, and reused. (Its own test binary: it
//! sets `#[global_allocator]`.)
#![cfg(not(numa_loom))]

use cst_mutex::{Mutex, RwLock};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

/// Counts live allocations with the snode layout (two `CachePadded` line
/// groups, three with feature `stats`: 256 or 384 bytes aligned to 128 on
/// x86-64), which nothing else in these tests allocates.
struct Counting;

static SNODES_LIVE: AtomicIsize = AtomicIsize::new(0);

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

fn is_snode(l: Layout) -> bool {
    let line = std::mem::align_of::<crossbeam_utils::CachePadded<u8>>();
    let groups = if cfg!(feature = "stats") { 3 } else { 2 };
    l.size() == groups * line && l.align() == line
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
        if is_snode(l) {
            SNODES_LIVE.fetch_add(1, Ordering::SeqCst);
        }
        // SAFETY: forwarded contract of `GlobalAlloc::alloc`.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if is_snode(l) {
            SNODES_LIVE.fetch_sub(1, Ordering::SeqCst);
        }
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

// One test function: the counter is process-wide, parallel tests would mix.
// No other test in this binary attaches an snode (they would also fill the
// pool this one expects to start empty); `idle_memory.rs` holds those.
#[test]
fn snodes_are_lazy_and_reused() {
    // With feature `stats` an snode is 4 lines, as is the test harness's
    // result channel (allocated before any test runs): count from here.
    let base = SNODES_LIVE.load(Ordering::SeqCst);
    let live = || SNODES_LIVE.load(Ordering::SeqCst) - base;
    // Uncontended: no snode.
    let m = Mutex::new(0u64);
    for _ in 0..1000 {
        *m.lock() += 1;
    }
    assert!(m.try_lock().is_some());
    assert_eq!(live(), 0, "uncontended mutex allocated");
    let l = RwLock::new(0u64);
    for _ in 0..1000 {
        *l.write() += 1;
        let _a = l.read();
        let _b = l.read();
    }
    assert_eq!(live(), 0, "uncontended rwlock allocated");

    // Contended mutex: snodes appear while a waiter waits.
    let m = Arc::new(Mutex::new(0u64));
    let holder = m.lock();
    let waiting = Arc::new(AtomicBool::new(false));
    {
        let (m2, w2) = (m.clone(), waiting.clone());
        let t = thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(1));
            w2.store(true, Ordering::SeqCst);
            *m2.lock() += 1;
        });
        while !waiting.load(Ordering::SeqCst) {
            thread::yield_now();
        }
        // The waiter must allocate its node's snode before it can wait.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while live() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "no snode-shaped allocation seen in 60 s while a waiter waits"
            );
            thread::yield_now();
        }
        drop(holder);
        t.join().unwrap();
    }
    let m2 = m.clone();
    contend(8, move || {
        for _ in 0..2000 {
            *m2.lock() += 1;
        }
    });
    // The last waiter gave the snodes back to the pool: the idle mutex holds
    // none, and freeing its memory without dropping it would leak nothing.
    // (With feature `stats` the counters live in the snodes, which then stay.)
    // SAFETY: only reads the snode count.
    let n = unsafe { m.raw() }.snode_count();
    if !cfg!(feature = "stats") {
        assert_eq!(n, 0, "idle mutex kept snodes");
    }
    let pooled = live();
    assert!(pooled >= 1, "no snode was ever allocated");
    drop(m);
    assert_eq!(live(), pooled, "snodes are kept for reuse, never freed");

    // Many contended mutexes, each forgotten without a drop (as C frees a
    // mutex without `pthread_mutex_destroy`): they reuse the pooled snodes
    // (not with feature `stats`, whose counters keep the snodes attached).
    if !cfg!(feature = "stats") {
        for _ in 0..100 {
            let m = Arc::new(Mutex::new(0u64));
            let m2 = m.clone();
            contend(4, move || {
                for _ in 0..200 {
                    *m2.lock() += 1;
                }
            });
            // SAFETY: only reads the snode count.
            let n = unsafe { m.raw() }.snode_count();
            assert_eq!(n, 0, "idle mutex kept snodes");
            std::mem::forget(m);
        }
        assert!(
            live() <= pooled + 16,
            "{} snodes for 100 mutexes contended one after the other",
            live()
        );
    }
    let pooled = live();

    // Contended rwlock, same.
    let l = Arc::new(RwLock::new(0u64));
    let l2 = l.clone();
    contend(8, move || {
        for i in 0..2000u64 {
            if i % 8 == 0 {
                *l2.write() += 1;
            } else {
                std::hint::black_box(*l2.read());
            }
        }
    });
    // An rwlock keeps its snodes (readers count on them outside the lock)
    // until it is dropped; they come from the pool and go back to it. Threads
    // of one node that race to attach its snode each take one (`list.rs`,
    // `SnodeList::lookup`) and the losers give theirs back, so while the pool
    // runs short each of the 8 threads may allocate one: the most snodes that
    // exist at once are those attached plus one per racing thread.
    // SAFETY: only reads the snode count.
    let n = unsafe { l.raw() }.snode_count();
    assert!(n <= 2, "{n} snodes for 2 nodes");
    assert!(
        live() <= pooled + 8,
        "{} snodes allocated for an rwlock contended by 8 threads, {pooled} pooled before",
        live()
    );
    let before = live();
    drop(l);
    assert_eq!(live(), before, "snodes are kept for reuse, never freed");
}
