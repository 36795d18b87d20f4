//! Per-lock counters (feature `stats`).
//!
//! Every counter is written only by the lock holder (or the thread acquiring the
//! lock, before anyone else can), so a relaxed load + store suffices: holders are
//! ordered by the lock's own Acquire/Release. Readers ([`Stats`]) may see a snapshot
//! that is a few events old.
//!
//! With the feature on, every acquisition, including the fast path, also reads the
//! current node (a thread-local read, before the acquiring CAS) to attribute
//! hand-offs; without it the counters do not exist and cost nothing. Recording
//! runs no code that can panic or allocate while the lock is held.

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// A snapshot of a lock's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Stats {
    /// Successful `lock` and `try_lock` calls.
    pub acquisitions: u64,
    /// Acquisitions that did not succeed on the first compare-and-swap of the fast
    /// path (the thread went to the slow path: it stole the lock there, waited in
    /// the queue, or waited without a queue node).
    pub contended: u64,
    /// Contended acquisitions by a thread on the same NUMA node as the previous
    /// holder: the lock (and the data it protects) stayed on the node.
    pub same_node_handoffs: u64,
    /// Contended acquisitions by a thread on another node than the previous holder.
    pub cross_node_handoffs: u64,
    /// Splices of the secondary queue back into the main queue: after the flush
    /// threshold, when the main queue ran empty, or for an `unlock_fair`.
    pub flushes: u64,
    /// HQ lock: hand-offs of the global head-ship to the next waiter of the same
    /// node queue (always 0 for CNA).
    pub local_handoffs: u64,
    /// HQ lock: hand-offs of the list's head position to the next node queue.
    pub remote_handoffs: u64,
    /// HQ lock: contention episodes that bound pool metadata (NUMA mode).
    pub binds: u64,
    /// HQ lock: contention episodes (or racing arrivals) that found the metadata
    /// pool exhausted and ran in plain queued mode.
    pub pool_fallbacks: u64,
    /// HQ lock: switches from plain queued to NUMA mode during a contention
    /// episode (contention detected, [`Config::hq_switch_threshold`]).
    ///
    /// [`Config::hq_switch_threshold`]: crate::Config::hq_switch_threshold
    pub mode_switches: u64,
    /// Combining lock: requests queued by `combine` calls that found the lock
    /// held (each runs on its node's combiner, or makes its caller one).
    pub combine_requests: u64,
    /// Combining lock: writes to the lock's binding word (the line the lock
    /// word shares): each queued request's join, and each combiner's leave,
    /// made once for its whole batch. Successful compare-and-swaps only: a
    /// failed one moves the line too and is not counted.
    pub binding_writes: u64,
    /// Combining lock: contended `combine` calls that took the global lock
    /// directly, without a request, because their thread's last batches on
    /// the lock served only itself
    /// ([`COMBINE_SOLO_STREAK`](crate::combining::COMBINE_SOLO_STREAK)).
    pub combine_solo: u64,
    /// Compare-and-swaps on the lock word by threads taking it ahead of the
    /// queue while stealing is allowed: the fast path's and `try_lock`'s one
    /// attempt, and the slow path's steals (on arrival, and while the queue
    /// head sleeps). Failed ones included: each takes the word's cache line
    /// from the thread that holds it. The slow path reads the word first and
    /// tries only a free one, so a thread that finds the lock held and waits
    /// makes one (its fast path's). Steals past an absent head's mark, waits
    /// without a queue node and the queue head's own acquisition are not
    /// counted.
    pub steal_attempts: u64,
    /// Parked queue waiters woken ahead of their turn by the queue head
    /// before them (with [`Tunables::wake_ahead`](crate::Tunables::wake_ahead)).
    pub early_wakes: u64,
}

/// An HQ event counted by [`Counters::hq_event`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum HqEvent {
    /// A local hand-off (by the holder).
    LocalHandoff,
    /// A remote hand-off (by the holder).
    RemoteHandoff,
    /// A binding (by an arriving waiter, not the holder).
    Bind,
    /// A pool-exhausted fallback (by an arriving waiter, or by a plain queue
    /// head that wanted to switch to NUMA mode).
    PoolFallback,
    /// A switch from plain to NUMA mode (by the holder).
    ModeSwitch,
}

impl Stats {
    /// `same_node_handoffs / (same + cross)`, or `None` before the first hand-off.
    pub fn same_node_ratio(&self) -> Option<f64> {
        let total = self.same_node_handoffs + self.cross_node_handoffs;
        (total != 0).then(|| self.same_node_handoffs as f64 / total as f64)
    }
}

/// The live counters inside a lock.
#[derive(Debug)]
pub(crate) struct Counters {
    acquisitions: AtomicU64,
    contended: AtomicU64,
    same_node: AtomicU64,
    cross_node: AtomicU64,
    flushes: AtomicU64,
    local_handoffs: AtomicU64,
    remote_handoffs: AtomicU64,
    binds: AtomicU64,
    pool_fallbacks: AtomicU64,
    mode_switches: AtomicU64,
    combine_requests: AtomicU64,
    binding_writes: AtomicU64,
    combine_solo: AtomicU64,
    steal_attempts: AtomicU64,
    early_wakes: AtomicU64,
    /// Node of the last holder, `u32::MAX` before the first acquisition.
    last_node: AtomicU32,
}

/// Holder-only increment (see the module docs).
#[inline]
fn bump(counter: &AtomicU64) {
    // Wrapping: a counter must never panic, the lock is held.
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

impl Counters {
    #[cfg(not(numa_loom))]
    pub(crate) const fn new() -> Self {
        Counters {
            acquisitions: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            same_node: AtomicU64::new(0),
            cross_node: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            local_handoffs: AtomicU64::new(0),
            remote_handoffs: AtomicU64::new(0),
            binds: AtomicU64::new(0),
            pool_fallbacks: AtomicU64::new(0),
            mode_switches: AtomicU64::new(0),
            combine_requests: AtomicU64::new(0),
            binding_writes: AtomicU64::new(0),
            combine_solo: AtomicU64::new(0),
            steal_attempts: AtomicU64::new(0),
            early_wakes: AtomicU64::new(0),
            last_node: AtomicU32::new(u32::MAX),
        }
    }

    #[cfg(numa_loom)]
    pub(crate) fn new() -> Self {
        Counters {
            acquisitions: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            same_node: AtomicU64::new(0),
            cross_node: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            local_handoffs: AtomicU64::new(0),
            remote_handoffs: AtomicU64::new(0),
            binds: AtomicU64::new(0),
            pool_fallbacks: AtomicU64::new(0),
            mode_switches: AtomicU64::new(0),
            combine_requests: AtomicU64::new(0),
            binding_writes: AtomicU64::new(0),
            combine_solo: AtomicU64::new(0),
            steal_attempts: AtomicU64::new(0),
            early_wakes: AtomicU64::new(0),
            last_node: AtomicU32::new(u32::MAX),
        }
    }

    /// Records an acquisition by the calling thread (which now holds the lock) on
    /// `node`, looked up *before* acquiring: the first lookup builds the topology's
    /// node map, which allocates, and must not run while the lock is held (the
    /// lock may be the one inside the global allocator). Runs no code that can
    /// panic or allocate.
    #[inline]
    pub(crate) fn acquired(&self, node: u32, contended: bool) {
        bump(&self.acquisitions);
        if contended {
            bump(&self.contended);
            let last = self.last_node.load(Ordering::Relaxed);
            if last == node {
                bump(&self.same_node);
            } else {
                bump(&self.cross_node);
            }
        }
        self.last_node.store(node, Ordering::Relaxed);
    }

    /// Records a splice of the secondary queue (called by a thread holding the lock).
    #[inline]
    pub(crate) fn flushed(&self) {
        bump(&self.flushes);
    }

    /// Records an HQ event. Hand-offs are counted by the holder (holder-only
    /// increment); binds and fallbacks by arriving waiters, which do not hold the
    /// lock, so those use an atomic add (Relaxed: a counter, nothing to publish).
    #[inline]
    pub(crate) fn hq_event(&self, event: HqEvent) {
        match event {
            HqEvent::LocalHandoff => bump(&self.local_handoffs),
            HqEvent::RemoteHandoff => bump(&self.remote_handoffs),
            HqEvent::Bind => {
                self.binds.fetch_add(1, Ordering::Relaxed);
            }
            HqEvent::PoolFallback => {
                self.pool_fallbacks.fetch_add(1, Ordering::Relaxed);
            }
            HqEvent::ModeSwitch => bump(&self.mode_switches),
        }
    }

    /// Records a combining lock's queued request (by its submitter, which does
    /// not hold the lock: an atomic add, Relaxed: a counter, nothing to
    /// publish).
    #[inline]
    pub(crate) fn combine_request(&self) {
        self.combine_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a write to a combining lock's binding word (by a thread that
    /// need not hold the lock: an atomic add, Relaxed, as above).
    #[inline]
    pub(crate) fn binding_write(&self) {
        self.binding_writes.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a contended `combine` that skipped the request queue (by its
    /// caller, before it holds the lock: an atomic add, Relaxed, as above).
    #[inline]
    pub(crate) fn combine_solo(&self) {
        self.combine_solo.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a compare-and-swap on the lock word ahead of the queue (by a
    /// thread that does not hold the lock yet: an atomic add, Relaxed, as
    /// above).
    #[inline]
    pub(crate) fn woke_ahead(&self) {
        self.early_wakes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn steal_attempt(&self) {
        self.steal_attempts.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot.
    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            acquisitions: self.acquisitions.load(Ordering::Relaxed),
            contended: self.contended.load(Ordering::Relaxed),
            same_node_handoffs: self.same_node.load(Ordering::Relaxed),
            cross_node_handoffs: self.cross_node.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            local_handoffs: self.local_handoffs.load(Ordering::Relaxed),
            remote_handoffs: self.remote_handoffs.load(Ordering::Relaxed),
            binds: self.binds.load(Ordering::Relaxed),
            pool_fallbacks: self.pool_fallbacks.load(Ordering::Relaxed),
            mode_switches: self.mode_switches.load(Ordering::Relaxed),
            combine_requests: self.combine_requests.load(Ordering::Relaxed),
            binding_writes: self.binding_writes.load(Ordering::Relaxed),
            combine_solo: self.combine_solo.load(Ordering::Relaxed),
            steal_attempts: self.steal_attempts.load(Ordering::Relaxed),
            early_wakes: self.early_wakes.load(Ordering::Relaxed),
        }
    }
}
