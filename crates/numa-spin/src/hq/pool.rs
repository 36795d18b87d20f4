//! The process-wide metadata pool of the HQ lock: the per-lock NUMA metadata
//! ([`Meta`]: the node queues, the list, the gate) that a contended lock binds
//! for the duration of a contention episode in NUMA mode, and the claim and
//! free of its entries.

use crossbeam_utils::CachePadded;

use super::MAX_NODES;
#[cfg(not(numa_loom))]
use super::POOL_SIZE;
#[cfg(numa_loom)]
use crate::sync;
use crate::sync::{AtomicU32, Ordering};

/// One NUMA node's queue inside a [`Meta`], on its own cache lines.
#[derive(Debug)]
pub(super) struct NodeQueue {
    /// Code of the last queue node of this node queue, 0 = empty.
    pub(super) tail: AtomicU32,
    /// The node queue behind this one in the list (node index + 1), 0 = none yet.
    /// Written by the next queue's local head, reset by ours before enqueueing.
    pub(super) gnext: AtomicU32,
    /// Where this queue's local head waits for the list's head position
    /// (`WAIT`, `PARKED`, [`GO`](super::GO)).
    pub(super) gwait: AtomicU32,
    /// When this queue's current turn at the list's head began: the low 32 bits
    /// of [`sync::now_ns`](crate::sync::now_ns), written by the turn's first holder and read by the
    /// turn's later holders (all ordered by the hand-off chain).
    pub(super) turn_start: AtomicU32,
}

/// The per-lock NUMA metadata bound to a contended lock.
#[derive(Debug)]
pub(crate) struct Meta {
    /// The list's tail: node index + 1 of the last node queue, 0 = empty list.
    pub(super) gtail: CachePadded<AtomicU32>,
    /// The NUMA side's gate: [`GO`](super::GO) once no plain queue is left ahead of it
    /// (set by the binder, or by the last waiter of the plain queue frozen by a
    /// mode switch); `WAIT` (0, the pool's state) while that queue drains, so
    /// that its heads and the NUMA side's global head never compete for
    /// `locked` (a global head that kept re-taking the lock starved the frozen
    /// queue). A global head waits here before it waits on `locked`.
    pub(super) gate: CachePadded<AtomicU32>,
    pub(super) queues: [CachePadded<NodeQueue>; MAX_NODES],
    /// The fork generation (`crate::node::fork_generation`) in which the entry
    /// was last bound to a lock; 0 until the process is a fork's child. Written
    /// by the binder (or the mode switch) before the Release CAS that puts the
    /// entry in the tail word; read by joiners after their Acquire CAS on that
    /// word. A `std` atomic even under loom (no fork there).
    fork_gen: std::sync::atomic::AtomicU32,
}

impl Meta {
    #[cfg(not(numa_loom))]
    const fn new() -> Self {
        Meta {
            gtail: CachePadded::new(AtomicU32::new(0)),
            gate: CachePadded::new(AtomicU32::new(0)),
            queues: [const {
                CachePadded::new(NodeQueue {
                    tail: AtomicU32::new(0),
                    gnext: AtomicU32::new(0),
                    gwait: AtomicU32::new(0),
                    turn_start: AtomicU32::new(0),
                })
            }; MAX_NODES],
            fork_gen: std::sync::atomic::AtomicU32::new(0),
        }
    }

    #[cfg(numa_loom)]
    fn new() -> Self {
        Meta {
            gtail: CachePadded::new(AtomicU32::new(0)),
            gate: CachePadded::new(AtomicU32::new(0)),
            queues: std::array::from_fn(|_| {
                CachePadded::new(NodeQueue {
                    tail: AtomicU32::new(0),
                    gnext: AtomicU32::new(0),
                    gwait: AtomicU32::new(0),
                    turn_start: AtomicU32::new(0),
                })
            }),
            fork_gen: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// Records the current fork generation; by the thread that binds the entry,
    /// before the Release CAS of the binding (or of the mode switch).
    pub(super) fn set_generation(&self) {
        let now = crate::node::fork_generation();
        if now != 0 {
            // Relaxed: published by the binding CAS's Release (see `fork_gen`).
            self.fork_gen
                .store(now, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether the entry was bound before a fork of which this process is the
    /// child: its waiters are in the parent. For a thread that has joined the
    /// binding (an Acquire CAS on the tail word that names it), so that the
    /// binder's [`Meta::set_generation`] happens-before this read.
    pub(super) fn bound_before_fork(&self) -> bool {
        let now = crate::node::fork_generation();
        // Relaxed: see above.
        now != 0 && self.fork_gen.load(std::sync::atomic::Ordering::Relaxed) < now
    }
}

/// The process-wide metadata pool: a claim flag per entry (scanned from a
/// per-lock starting point) and the entries. Every entry is all zeros (empty
/// queues, empty list) while it is free: the last waiter of a lock leaves it so.
pub(crate) struct Pool {
    #[cfg(not(numa_loom))]
    pub(super) claimed: [AtomicU32; POOL_SIZE],
    #[cfg(not(numa_loom))]
    metas: [Meta; POOL_SIZE],
    #[cfg(numa_loom)]
    pub(super) claimed: Vec<AtomicU32>,
    #[cfg(numa_loom)]
    metas: Vec<Meta>,
}

impl Pool {
    #[cfg(not(numa_loom))]
    const fn new() -> Self {
        Pool {
            claimed: [const { AtomicU32::new(0) }; POOL_SIZE],
            metas: [const { Meta::new() }; POOL_SIZE],
        }
    }

    #[cfg(numa_loom)]
    fn new() -> Self {
        let size = sync::loom_pool_size();
        Pool {
            claimed: (0..size).map(|_| AtomicU32::new(0)).collect(),
            metas: (0..size).map(|_| Meta::new()).collect(),
        }
    }

    /// Claims a free entry, scanning from `hint`; `None` if all are taken.
    pub(super) fn claim(&self, hint: usize) -> Option<u32> {
        // Under loom the scan starts at entry 0: the hint is an address, which
        // differs between executions, and loom replays an execution's prefix
        // only if the code makes the same choices each time.
        let hint = if cfg!(numa_loom) { 0 } else { hint };
        let len = self.claimed.len();
        (0..len).map(|i| (hint + i) % len).find_map(|i| {
            // Relaxed load: only skips taken entries cheaply. Acquire CAS on
            // success: pairs with the Release store of `free`, so the previous
            // binding's accesses to the entry happen-before ours (the entry reads
            // as all zeros). Relaxed on failure: nothing claimed.
            (self.claimed[i].load(Ordering::Relaxed) == 0
                && self.claimed[i]
                    .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok())
            .then_some(i as u32)
        })
    }

    /// Returns entry `m` (all its queues empty) to the pool.
    pub(super) fn free(&self, m: u32) {
        #[cfg(numa_loom)]
        self.assert_empty(m);
        // Release: our accesses to the entry, and every earlier waiter's (which
        // happen-before ours through the lock word: see `leave`), happen-before
        // the next claim's Acquire.
        self.claimed[m as usize].store(0, Ordering::Release);
    }

    pub(super) fn meta(&self, m: u32) -> &Meta {
        &self.metas[m as usize]
    }

    /// Under loom: checks that entry `m` is free to reuse (the list and every
    /// node queue empty) when its last user returns it. The freeing thread's
    /// view holds every earlier user's last access (see `RawHqLock::leave`), so
    /// these loads read the final values; a stale list tail (a list that a lost
    /// or stale link left non-empty) fails the model here rather than in a
    /// later binding of the entry.
    #[cfg(numa_loom)]
    fn assert_empty(&self, m: u32) {
        let meta = self.meta(m);
        // Relaxed: see above; a check, not part of the algorithm.
        let gtail = meta.gtail.load(Ordering::Relaxed);
        assert_eq!(
            gtail, 0,
            "numa-spin: HQ metadata {m} freed with a non-empty list"
        );
        for (n, q) in meta.queues.iter().enumerate() {
            let tail = q.tail.load(Ordering::Relaxed);
            assert_eq!(
                tail, 0,
                "numa-spin: HQ metadata {m} freed with node queue {n} non-empty"
            );
        }
    }
}

#[cfg(not(numa_loom))]
static POOL: Pool = Pool::new();

#[cfg(not(numa_loom))]
pub(super) fn pool() -> &'static Pool {
    &POOL
}

#[cfg(numa_loom)]
crate::sync::model::lazy_static! {
    static ref POOL: Pool = Pool::new();
}

/// The pool of the current loom execution.
#[cfg(numa_loom)]
pub(super) fn pool() -> &'static Pool {
    &POOL
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use super::*;

    /// From any starting hint, the pool hands out every entry once before it
    /// reports exhaustion, and a freed entry can be claimed again.
    #[test]
    fn pool_claims_every_entry_from_any_hint() {
        let pool = Box::new(Pool::new());
        for hint in [0, 1, 2, POOL_SIZE - 1, POOL_SIZE, 0x7f12_3456_789a >> 4] {
            let mut seen: Vec<u32> = (0..POOL_SIZE)
                .map(|_| pool.claim(hint).expect("pool exhausted early"))
                .collect();
            assert_eq!(pool.claim(hint), None, "more claims than entries");
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), POOL_SIZE, "an entry was claimed twice");
            pool.free(seen[7]);
            assert_eq!(pool.claim(hint), Some(seen[7]));
            for m in seen {
                pool.free(m);
            }
        }
    }
}
