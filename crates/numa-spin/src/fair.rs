//! [`RawFairMutex`] and [`FairMutex`]: the CNA lock whose every unlock is fair.

use crate::mutex::RawMutex;
use std::time::{Duration, Instant};

/// [`RawMutex`] whose `unlock` is `unlock_fair`: every release hands the lock
/// to the longest waiter (the head of the secondary queue if it has waiters,
/// else the head of the main queue), so no thread can barge in ahead of the
/// queue and no waiter is passed over for NUMA locality. The counterpart of
/// `parking_lot::RawFairMutex`.
///
/// # Fairness
///
/// FIFO over the waiters of both queues at every release, at the price of the
/// NUMA-local hand-offs that make [`RawMutex`] fast: use it where latency
/// bounds matter more than throughput. A thread that finds the lock free and
/// nobody queued still takes it at once, and `try_lock`/`try_lock_for` never
/// queue (see [`crate::timed`]).
#[derive(Debug, Default)]
pub struct RawFairMutex(RawMutex);

impl RawFairMutex {
    /// A new unlocked lock.
    pub const fn new() -> Self {
        RawFairMutex(RawMutex::new())
    }

    /// The inner [`RawMutex`] (for its inherent methods, e.g. `stats`).
    pub fn inner(&self) -> &RawMutex {
        &self.0
    }
}

// SAFETY: every method forwards to `RawMutex`, whose implementation upholds the
// contract; `unlock` is `RawMutex::unlock_fair`, which releases the lock as
// `unlock` does (it only chooses who gets it next).
unsafe impl lock_api::RawMutex for RawFairMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawFairMutex::new();

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        lock_api::RawMutex::lock(&self.0)
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        lock_api::RawMutex::try_lock(&self.0)
    }

    #[inline]
    unsafe fn unlock(&self, guard: Self::Guard) {
        // SAFETY: forwarded precondition: `guard` is the state of a held acquisition.
        unsafe { lock_api::RawMutexFair::unlock_fair(&self.0, guard) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        lock_api::RawMutex::is_locked(&self.0)
    }
}

// SAFETY: forwards to `RawMutex`'s `unlock_fair`.
unsafe impl lock_api::RawMutexFair for RawFairMutex {
    #[inline]
    unsafe fn unlock_fair(&self, guard: Self::Guard) {
        // SAFETY: forwarded precondition.
        unsafe { lock_api::RawMutexFair::unlock_fair(&self.0, guard) }
    }
}

// SAFETY: forwards to `RawMutex`'s timed methods.
unsafe impl lock_api::RawMutexTimed for RawFairMutex {
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_for(&self, timeout: Duration) -> Option<Self::Guard> {
        lock_api::RawMutexTimed::try_lock_for(&self.0, timeout)
    }

    #[inline]
    fn try_lock_until(&self, deadline: Instant) -> Option<Self::Guard> {
        lock_api::RawMutexTimed::try_lock_until(&self.0, deadline)
    }
}

/// A mutex whose every unlock hands the lock to the longest waiter
/// ([`RawFairMutex`]), like `parking_lot::FairMutex`.
///
/// ```
/// let m = numa_spin::FairMutex::new(0);
/// *m.lock() += 1;
/// assert_eq!(*m.lock(), 1);
/// ```
pub type FairMutex<T> = lock_api::Mutex<RawFairMutex, T>;

/// The guard of a [`FairMutex`].
pub type FairMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawFairMutex, T>;

/// A [`FairMutexGuard`] narrowed to a part of the data.
pub type MappedFairMutexGuard<'a, T> = lock_api::MappedMutexGuard<'a, RawFairMutex, T>;
