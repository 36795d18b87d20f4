//! The per-node reader counters of [`RawRwLock`](super::RawRwLock): what is
//! left of CST's snode once the writer side runs on numa-spin's queue.
//!
//! A lock whose readers contend on the state word's counter binds one
//! [`CounterSet`] from a process-wide pool: [`LINES`] counters, each on its own
//! cache line, so readers of different nodes write different lines (the
//! reader indicator of the cohort reader-writer locks, Calciu et al., "NUMA-Aware
//! Reader-Writer Locks", PPoPP 2013, section 3). The lock keeps the set until
//! it is dropped; the pool is static memory (no heap allocation, so a `fork`
//! or a signal handler finds nothing half-allocated), claimed and freed with
//! one atomic each. When every set is bound, readers of further locks count on
//! the state word alone, as parking_lot's do: slower under reader contention,
//! never wrong.

use crate::sync::{AtomicU32, AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

/// Counters per set: a reader of node `n` counts on line `n % LINES`.
pub(crate) const LINES: usize = 8;

/// Sets in the pool: 1,024 sets of 8 lines, 1 MiB on x86-64 (128-byte
/// lines), zero-initialised static memory that the OS backs with pages only
/// where a set was used.
#[cfg(not(numa_loom))]
pub(crate) const POOL_SIZE: usize = 1024;

/// One lock's reader counters.
pub(crate) struct CounterSet {
    pub(crate) lines: [CachePadded<AtomicUsize>; LINES],
}

impl CounterSet {
    #[cfg(not(numa_loom))]
    const fn new() -> Self {
        CounterSet {
            lines: [const { CachePadded::new(AtomicUsize::new(0)) }; LINES],
        }
    }

    #[cfg(numa_loom)]
    fn new() -> Self {
        CounterSet {
            lines: std::array::from_fn(|_| CachePadded::new(AtomicUsize::new(0))),
        }
    }

    /// The counter of `node`'s readers.
    #[inline]
    pub(crate) fn line(&self, node: usize) -> &AtomicUsize {
        &self.lines[node % LINES]
    }
}

/// The pool: a claim flag per set and the sets. A free set's counters are all
/// 0 (its last lock was dropped with no reader inside).
pub(crate) struct Pool {
    #[cfg(not(numa_loom))]
    claimed: [AtomicU32; POOL_SIZE],
    #[cfg(not(numa_loom))]
    sets: [CounterSet; POOL_SIZE],
    #[cfg(numa_loom)]
    claimed: Vec<AtomicU32>,
    #[cfg(numa_loom)]
    sets: Vec<CounterSet>,
}

impl Pool {
    #[cfg(not(numa_loom))]
    const fn new() -> Self {
        Pool {
            claimed: [const { AtomicU32::new(0) }; POOL_SIZE],
            sets: [const { CounterSet::new() }; POOL_SIZE],
        }
    }

    /// Under loom: two sets, so that a model can also exhaust the pool.
    #[cfg(numa_loom)]
    fn new() -> Self {
        Pool {
            claimed: (0..2).map(|_| AtomicU32::new(0)).collect(),
            sets: (0..2).map(|_| CounterSet::new()).collect(),
        }
    }

    /// Claims a free set, scanning from `hint`; its index + 1, or `None` when
    /// every set is bound.
    pub(crate) fn claim(&self, hint: usize) -> Option<u32> {
        // Under loom the scan starts at set 0: the hint is an address, which
        // differs between executions, and loom replays an execution's prefix
        // only if the code makes the same choices each time.
        let hint = if cfg!(numa_loom) { 0 } else { hint };
        let len = self.claimed.len();
        (0..len).map(|i| (hint + i) % len).find_map(|i| {
            // Relaxed load: only skips bound sets cheaply. Acquire CAS: pairs
            // with `free`'s Release store, so the previous lock's last accesses
            // to the set happen-before ours. Relaxed on failure: nothing claimed.
            (self.claimed[i].load(Ordering::Relaxed) == 0
                && self.claimed[i]
                    .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok())
            .then_some(i as u32 + 1)
        })
    }

    /// Returns set `id` (an index + 1 from [`claim`](Pool::claim)), all of
    /// whose counters are 0, to the pool.
    pub(crate) fn free(&self, id: u32) {
        // Release: our accesses to the set (and, through the lock's drop,
        // every reader's) happen-before the next claim's Acquire.
        self.claimed[id as usize - 1].store(0, Ordering::Release);
    }

    /// Set `id` (an index + 1 from [`claim`](Pool::claim)).
    #[inline]
    pub(crate) fn set(&self, id: u32) -> &CounterSet {
        &self.sets[id as usize - 1]
    }
}

#[cfg(not(numa_loom))]
static POOL: Pool = Pool::new();

/// The process-wide pool.
#[cfg(not(numa_loom))]
#[inline]
pub(crate) fn pool() -> &'static Pool {
    &POOL
}

#[cfg(numa_loom)]
crate::sync::lazy_static! {
    static ref POOL: Pool = Pool::new();
}

/// The pool of the current loom execution.
#[cfg(numa_loom)]
pub(crate) fn pool() -> &'static Pool {
    &POOL
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use super::*;

    /// From any hint the pool hands out every set once, then reports
    /// exhaustion; a freed set can be claimed again.
    #[test]
    fn the_pool_claims_every_set_once_from_any_hint() {
        // SAFETY: a pool is atomics and arrays of atomics, for which all
        // zeros is a valid value (every set free, every counter 0); built on
        // the heap, as 1 MiB would not fit a test thread's stack twice.
        let pool: Box<Pool> = unsafe { Box::new_zeroed().assume_init() };
        for hint in [0, 1, POOL_SIZE - 1, POOL_SIZE, 0x7f12_3456_789a >> 4] {
            let mut ids: Vec<u32> = (0..POOL_SIZE)
                .map(|_| pool.claim(hint).expect("pool exhausted early"))
                .collect();
            assert_eq!(pool.claim(hint), None, "more claims than sets");
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), POOL_SIZE, "a set was claimed twice");
            assert!(ids.iter().all(|&id| id >= 1), "0 means no set");
            pool.free(ids[7]);
            assert_eq!(pool.claim(hint), Some(ids[7]));
            for id in ids {
                pool.free(id);
            }
        }
    }
}
