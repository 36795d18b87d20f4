//! Solo batches: a thread whose last contended `combine` calls on a lock were
//! all batches of one (it was its node's combiner and served only itself)
//! takes the global lock directly for its next ones, as `lock()` does.
//!
//! A batch of one costs what the global lock costs, plus the request's queue
//! and the binding word's join and leave: two more writes to the lock's line
//! and two to the node queue's, for nothing to combine. That is the common
//! case where a node has one thread that wants the lock at a time (two
//! threads on two nodes; more threads than CPUs, where most waiters are not
//! running). After [`SOLO_STREAK`] such batches in a row the thread skips
//! the queue for its contended calls on that lock; every [`SOLO_PROBE`]th
//! of them queues a request again, and a probe that another thread's batch
//! served, or whose batch served others, ends the skipping.
//!
//! The record is per thread and names one lock (the last one that had a solo
//! batch): no shared line is written, and a thread that alternates locks just
//! combines. A thread-local `Cell` with a `const` initialiser and no
//! destructor, so a `#[global_allocator]` built on the lock can use it; where
//! thread-locals are gone (thread exit) it combines. Under loom the models
//! always queue.

#[cfg(not(numa_loom))]
use core::cell::Cell;

/// Batches of one in a row after which a thread skips the queue.
pub(super) const SOLO_STREAK: u32 = 4;

/// Skipped calls between two probes (calls that queue again).
pub(super) const SOLO_PROBE: u32 = 32;

#[cfg(not(numa_loom))]
std::thread_local! {
    /// The lock (its address) of this thread's last solo batch, and the
    /// batches of one (up to [`SOLO_STREAK`]) then skipped calls since.
    static SOLO: Cell<(usize, u32)> = const { Cell::new((0, 0)) };
}

/// Whether this contended call on the lock at `lock` should take the global
/// lock directly rather than queue a request (see the module docs).
#[inline]
pub(super) fn skip_queue(lock: usize) -> bool {
    #[cfg(numa_loom)]
    {
        let _ = lock;
        false
    }
    #[cfg(not(numa_loom))]
    {
        SOLO.try_with(|s| {
            let (at, n) = s.get();
            if at != lock || n < SOLO_STREAK {
                return false;
            }
            if n - SOLO_STREAK >= SOLO_PROBE {
                // Probe: queue this one; a solo batch again restores
                // the streak (see `queued`).
                s.set((lock, SOLO_STREAK - 1));
                return false;
            }
            s.set((lock, n + 1));
            true
        })
        .unwrap_or(false)
    }
}

/// Records how a queued request on the lock at `lock` was served: `solo`
/// when its thread combined a batch of only its own closure.
#[inline]
pub(super) fn queued(lock: usize, solo: bool) {
    #[cfg(numa_loom)]
    {
        let _ = (lock, solo);
    }
    #[cfg(not(numa_loom))]
    {
        let _ = SOLO.try_with(|s| {
            let (at, n) = s.get();
            s.set(match (solo, at == lock) {
                (true, true) => (lock, (n + 1).min(SOLO_STREAK)),
                (true, false) => (lock, 1),
                (false, true) => (0, 0),
                (false, false) => (at, n),
            });
        });
    }
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use super::*;

    /// The streak, the skipped calls, the probe, and the resets.
    #[test]
    fn solo_batches_skip_the_queue_until_a_probe_combines() {
        let (a, b) = (0x1000, 0x2000);
        for _ in 0..SOLO_STREAK {
            assert!(!skip_queue(a), "skipped before a streak of solo batches");
            queued(a, true);
        }
        for i in 0..SOLO_PROBE {
            assert!(skip_queue(a), "call {i} after the streak queued");
        }
        assert!(!skip_queue(a), "no probe after {SOLO_PROBE} skipped calls");
        queued(a, true);
        assert!(skip_queue(a), "a solo probe did not restore the streak");
        // Another lock's record replaces this one; a non-solo batch of that
        // other lock leaves it alone, one of this lock ends the skipping.
        assert!(!skip_queue(b));
        queued(b, false);
        assert!(skip_queue(a), "another lock's batch ended the skipping");
        queued(a, false);
        assert!(!skip_queue(a), "a batch that served others kept skipping");
        queued(b, true);
        assert!(!skip_queue(a) && !skip_queue(b));
    }
}
