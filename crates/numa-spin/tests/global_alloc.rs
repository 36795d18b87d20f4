//! `numa_spin` locks as the lock *inside* the process's `#[global_allocator]`, with
//! no setup call, under contention from the first allocation on.
//!
//! Every allocation of this test binary (the test harness's included) goes through
//! a numa-spin lock. The first contended `lock()` of the process registers the
//! thread's queue node, reads the tunables from the environment and builds the
//! topology's node map: each of these must work without re-entering the allocator
//! while the lock is held or while the same thread waits for it, or the process
//! hangs. A watchdog aborts the process (failing the test) if it does not finish.
//!
//! Two allocators share the binary: the default one (CNA) and, chosen per thread, a
//! strict-FIFO queued lock, so both the stealing and the strict paths allocate.

use lock_api::RawMutex as _;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Strict FIFO: no stealing past a queued waiter.
#[derive(Clone, Copy)]
struct Strict;
static STRICT: numa_spin::Config = numa_spin::Config::DEFAULT.steal_bound_ns(0);
impl numa_spin::Tunables for Strict {
    const DEFAULT: Self = Strict;
    fn config(&self) -> &numa_spin::Config {
        &STRICT
    }
}

/// The system allocator, serialized by numa-spin locks.
struct LockedSystem {
    cna: numa_spin::RawMutex,
    strict: numa_spin::RawLock<false, Strict>,
}

thread_local! {
    /// Whether this thread's allocations go through the strict lock.
    static USE_STRICT: Cell<bool> = const { Cell::new(false) };
}

impl LockedSystem {
    fn with<R>(&self, f: impl FnOnce() -> R) -> R {
        // `try_with`: allocations from thread-local destructors must work too.
        if USE_STRICT.try_with(Cell::get).unwrap_or(false) {
            let guard = self.strict.lock();
            let r = f();
            // SAFETY: `guard` is the acquisition above, released once.
            unsafe { self.strict.unlock(guard) };
            r
        } else {
            let guard = self.cna.lock();
            let r = f();
            // SAFETY: as above.
            unsafe { self.cna.unlock(guard) };
            r
        }
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments; the locks
// only serialize the calls.
unsafe impl GlobalAlloc for LockedSystem {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        self.with(|| unsafe { System.alloc(layout) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        self.with(|| unsafe { System.dealloc(ptr, layout) })
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded contract.
        self.with(|| unsafe { System.realloc(ptr, layout, new_size) })
    }
}

#[global_allocator]
static ALLOC: LockedSystem = LockedSystem {
    cna: numa_spin::RawMutex::INIT,
    strict: numa_spin::RawLock::<false, Strict>::INIT,
};

/// Aborts the process (the test fails with SIGABRT) unless `done` is set within
/// `secs` seconds.
fn watchdog(done: &'static AtomicBool, secs: u64) {
    std::thread::spawn(move || {
        for _ in 0..secs * 10 {
            if done.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // Straight to fd 2: `eprintln!` goes through the test harness's output
        // capture, which allocates (and so would wait for the deadlocked lock).
        let _ = std::io::stderr().write_all(b"global_alloc: allocator deadlocked (watchdog)\n");
        std::process::abort();
    });
}

/// 8 threads on 2 virtual nodes (more threads than this machine's CPUs), half on
/// each lock, allocate and free concurrently from the start; each also allocates
/// from a thread-local destructor, after its queue-node slot is gone.
#[test]
fn allocator_lock_under_contention_needs_no_setup() {
    static DONE: AtomicBool = AtomicBool::new(false);
    watchdog(&DONE, 60);

    struct AllocOnExit;
    impl Drop for AllocOnExit {
        fn drop(&mut self) {
            let v: Vec<u64> = (0..64).collect();
            assert_eq!(v.len(), 64);
        }
    }
    thread_local! {
        static ALLOC_ON_EXIT: AllocOnExit = const { AllocOnExit };
    }

    let start = std::sync::Barrier::new(8);
    std::thread::scope(|s| {
        for i in 0..8usize {
            let start = &start;
            s.spawn(move || {
                // Registered before the lock's own thread-local, so destroyed after it.
                ALLOC_ON_EXIT.with(|_| {});
                USE_STRICT.with(|c| c.set(i % 2 == 1));
                numa_topology::set_current_thread_node(Some(i % 2));
                start.wait();
                let mut keep = Vec::new();
                for round in 0..20_000usize {
                    let b = Box::new([round; 4]);
                    if round % 64 == 0 {
                        keep.push(b);
                    }
                }
                assert_eq!(keep.len(), 20_000 / 64 + 1);
            });
        }
    });
    DONE.store(true, Ordering::Relaxed);
}
