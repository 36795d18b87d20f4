//! Per-lock counters of the contended paths (feature `stats`).
//!
//! The counters live in the snodes, so they cost nothing until a lock is
//! contended and nothing at all without the feature; [`RawMutex::stats`] and
//! [`RawRwLock::stats`] sum them over the lock's snodes. Each counter is a
//! relaxed `fetch_add` by the thread that saw the event: a snapshot may be a
//! few events old and is not a consistent cut.
//!
//! [`RawMutex::stats`]: crate::RawMutex::stats
//! [`RawRwLock::stats`]: crate::RawRwLock::stats

use crate::sync::{AtomicU64, Ordering};

/// A snapshot of a lock's contended-path counters (the mutex, or the writer
/// side of an rwlock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Stats {
    /// Untimed acquisitions that waited in an snode queue (CST's per-node
    /// queue of waiters).
    pub queued: u64,
    /// Hand-offs to a running queue head: the unlock swapped the lock into the
    /// head's queue node (no futex call, the lock word stays held).
    pub grants: u64,
    /// Times a waiter went to sleep: queued waiters out of spin budget, heads
    /// out of budget waiting in the snode's parking queue, timed waiters.
    pub parks: u64,
    /// Wake-ups issued: to a parked waiter of the parking queue by an unlock,
    /// and to a parked queued waiter by its predecessor (head-ship or
    /// wake-ahead).
    pub wakeups: u64,
    /// Of the unlocks' wake-ups, those that handed the still-held lock to the
    /// woken waiter (eventual fairness, `unlock_fair`, the batch's end).
    pub parked_handoffs: u64,
}

/// The counters of one snode.
pub(crate) struct SnodeStats {
    pub(crate) queued: AtomicU64,
    pub(crate) grants: AtomicU64,
    pub(crate) parks: AtomicU64,
    pub(crate) wakeups: AtomicU64,
    pub(crate) parked_handoffs: AtomicU64,
}

impl SnodeStats {
    pub(crate) fn new() -> Self {
        SnodeStats {
            queued: AtomicU64::new(0),
            grants: AtomicU64::new(0),
            parks: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            parked_handoffs: AtomicU64::new(0),
        }
    }

    /// Back to zero, for an snode reused from the pool (which the caller
    /// owns exclusively).
    pub(crate) fn reset(&self) {
        for c in [
            &self.queued,
            &self.grants,
            &self.parks,
            &self.wakeups,
            &self.parked_handoffs,
        ] {
            // Relaxed: published with the snode's initialisation.
            c.store(0, Ordering::Relaxed);
        }
    }

    pub(crate) fn add_to(&self, s: &mut Stats) {
        s.queued += self.queued.load(Ordering::Relaxed);
        s.grants += self.grants.load(Ordering::Relaxed);
        s.parks += self.parks.load(Ordering::Relaxed);
        s.wakeups += self.wakeups.load(Ordering::Relaxed);
        s.parked_handoffs += self.parked_handoffs.load(Ordering::Relaxed);
    }
}

/// Counts one event.
#[inline]
pub(crate) fn count(c: &AtomicU64) {
    // Relaxed: a statistic, ordered with nothing.
    c.fetch_add(1, Ordering::Relaxed);
}
