//! The fork generation: what makes a lock usable in the child of a `fork`.
//!
//! After `fork` only the forking thread exists in the child, but the locks'
//! memory is a copy of the parent's: a queue may still name the queue nodes
//! of parent threads, a snode may count parked parent threads, and the
//! parking lot's queues may still hold them. Such a waiter never runs in the
//! child, so a hand-off to it would leave the lock held by nobody.
//!
//! A `pthread_atfork` child handler advances a process-wide generation
//! ([`generation`]); every snode records the generation it was attached or
//! last reset in. A lock whose snodes are of an older generation is *stale*:
//! its waiter state is the parent's. The first thread of the child that
//! holds it (the forking thread unlocking a lock it held across the fork, or
//! a child thread that takes it) forgets that state before it hands the lock
//! on or waits for it (`Cohort::forget_parent_waiters`). As with glibc, a
//! lock held by a parent thread that does not exist in the child stays held.
//!
//! The handler is registered the first time any lock of this crate takes a
//! slow path: a lock that never did has no waiter state to forget. Until a
//! process has forked, [`generation`] is 0 and every check is one relaxed
//! load of a read-mostly word on a slow path.

use std::sync::atomic::{AtomicU32, Ordering};

/// The number of forks this process descends from (since the handler was
/// registered). std atomics: never modelled by loom, whose threads cannot
/// fork.
static GENERATION: AtomicU32 = AtomicU32::new(0);

/// The current fork generation (0 until the process, or an ancestor after
/// the handler was registered, forked).
#[inline]
pub(crate) fn generation() -> u32 {
    // Relaxed: the child handler ran before any thread of the child existed
    // but the forking one (fork's own ordering), and nothing else writes it.
    GENERATION.load(Ordering::Relaxed)
}

/// Registers the child handler once (on unix; elsewhere there is no fork).
#[inline]
pub(crate) fn watch() {
    #[cfg(all(unix, not(numa_loom)))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: `child` is an `extern "C"` function that neither
            // unwinds nor calls anything that is not async-signal-safe (one
            // atomic add); the other handlers are absent. A failed
            // registration (ENOMEM) leaves the locks as they were before
            // fork support: nothing else depends on it.
            unsafe {
                libc::pthread_atfork(None, None, Some(child));
            }
        });
    }
}

#[cfg(all(unix, not(numa_loom)))]
extern "C" fn child() {
    // Relaxed: the child has one thread now.
    GENERATION.fetch_add(1, Ordering::Relaxed);
}
