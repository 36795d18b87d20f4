//! [`RawFairMutex`] and [`FairMutex`]: the CST mutex whose every unlock is fair.

use std::time::{Duration, Instant};

use crate::{MutexGuardState, RawMutex};

/// [`RawMutex`] whose `unlock` is `unlock_fair`: every release with a parked
/// waiter hands the lock directly to one (by the cohort order: the unlocker's
/// node while its batch lasts, then the next node), so running threads cannot
/// barge ahead of parked ones. The counterpart of `parking_lot::RawFairMutex`.
///
/// # Fairness
///
/// No barging past parked waiters, at the cost of a wake-up and a context
/// switch per contended hand-off (parking_lot's `FairMutex` makes the same
/// trade). Spinning (not yet parked) waiters still compete for a lock released
/// with nobody parked.
#[derive(Debug, Default)]
pub struct RawFairMutex(RawMutex);

impl RawFairMutex {
    /// A new unlocked lock (allocates nothing).
    pub const fn new() -> Self {
        RawFairMutex(RawMutex::new())
    }

    /// The inner [`RawMutex`] (for `snode_count`, `parked_waiters`).
    pub fn inner(&self) -> &RawMutex {
        &self.0
    }
}

// SAFETY: every method forwards to `RawMutex`; `unlock` is its `unlock_fair`,
// which releases as `unlock` does or hands the lock to exactly one waiter.
unsafe impl lock_api::RawMutex for RawFairMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawFairMutex::new();

    type Guard = MutexGuardState;

    #[inline]
    fn lock(&self) -> MutexGuardState {
        lock_api::RawMutex::lock(&self.0)
    }

    #[inline]
    fn try_lock(&self) -> Option<MutexGuardState> {
        lock_api::RawMutex::try_lock(&self.0)
    }

    #[inline]
    unsafe fn unlock(&self, guard: MutexGuardState) {
        // SAFETY: forwarded precondition: `guard` is the state of a held acquisition.
        unsafe { lock_api::RawMutexFair::unlock_fair(&self.0, guard) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        lock_api::RawMutex::is_locked(&self.0)
    }
}

// SAFETY: forwards to `RawMutex`.
unsafe impl lock_api::RawMutexFair for RawFairMutex {
    #[inline]
    unsafe fn unlock_fair(&self, guard: MutexGuardState) {
        // SAFETY: forwarded precondition.
        unsafe { lock_api::RawMutexFair::unlock_fair(&self.0, guard) }
    }
}

// SAFETY: forwards to `RawMutex`.
unsafe impl lock_api::RawMutexTimed for RawFairMutex {
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_for(&self, timeout: Duration) -> Option<MutexGuardState> {
        lock_api::RawMutexTimed::try_lock_for(&self.0, timeout)
    }

    #[inline]
    fn try_lock_until(&self, deadline: Instant) -> Option<MutexGuardState> {
        lock_api::RawMutexTimed::try_lock_until(&self.0, deadline)
    }
}

/// A mutex whose every unlock hands the lock to a parked waiter if there is one
/// ([`RawFairMutex`]), like `parking_lot::FairMutex`.
///
/// ```
/// let m = cst_mutex::FairMutex::new(0);
/// *m.lock() += 1;
/// assert_eq!(*m.lock(), 1);
/// ```
pub type FairMutex<T> = lock_api::Mutex<RawFairMutex, T>;

/// The guard of a [`FairMutex`].
pub type FairMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawFairMutex, T>;

/// A [`FairMutexGuard`] narrowed to a part of the data.
pub type MappedFairMutexGuard<'a, T> = lock_api::MappedMutexGuard<'a, RawFairMutex, T>;
