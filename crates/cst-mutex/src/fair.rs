//! [`RawFairMutex`] and [`FairMutex`]: [`RawMutex`] with every unlock fair.

use crate::RawMutex;
#[cfg(not(numa_loom))]
use std::time::{Duration, Instant};

/// [`RawMutex`] whose `unlock` is `unlock_fair`: each
/// release with a queued waiter hands the lock to the longest-waiting one
/// ([`numa_spin::RawLock::release_fair`]), so running threads cannot steal
/// it past the queue. The counterpart of `parking_lot::RawFairMutex`.
///
/// # Fairness
///
/// No stealing past queued waiters, at the cost of a hand-off to the queue
/// head (a wake-up where it parked) on every contended release, the trade
/// parking_lot's `FairMutex` makes. Threads asleep outside the queue (timed
/// waiters) are woken by each release as with `unlock`, and queue or poll.
#[derive(Debug)]
#[repr(transparent)]
pub struct RawFairMutex(RawMutex);

/// A mutex whose every unlock is fair ([`RawFairMutex`]), like
/// `parking_lot::FairMutex`.
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

impl RawFairMutex {
    /// A new unlocked lock (allocates nothing).
    #[cfg(not(numa_loom))]
    pub const fn new() -> Self {
        RawFairMutex(RawMutex::new())
    }

    /// The [`RawMutex`] underneath, for its diagnostics.
    pub fn inner(&self) -> &RawMutex {
        &self.0
    }
}

#[cfg(not(numa_loom))]
impl Default for RawFairMutex {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every method forwards to `RawMutex`; `unlock` is its fair release,
// which ends the acquisition as `release` does and only chooses who holds
// the lock next.
#[cfg(not(numa_loom))]
unsafe impl lock_api::RawMutex for RawFairMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawFairMutex::new();

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        self.0.acquire();
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        self.0.try_acquire().then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        // SAFETY: the caller passes the guard of a held acquisition.
        unsafe { self.0.release_fair() }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.0.is_held()
    }
}

// SAFETY: as for `lock_api::RawMutex` above.
#[cfg(not(numa_loom))]
unsafe impl lock_api::RawMutexFair for RawFairMutex {
    #[inline]
    unsafe fn unlock_fair(&self, _guard: Self::Guard) {
        // SAFETY: the caller passes the guard of a held acquisition.
        unsafe { self.0.release_fair() }
    }
}

// SAFETY: forwards to `RawMutex`'s timed acquisitions.
#[cfg(not(numa_loom))]
unsafe impl lock_api::RawMutexTimed for RawFairMutex {
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_for(&self, timeout: Duration) -> Option<Self::Guard> {
        self.0
            .try_acquire_for(timeout)
            .then(lock_api::GuardSend::new)
    }

    #[inline]
    fn try_lock_until(&self, deadline: Instant) -> Option<Self::Guard> {
        self.0
            .try_acquire_until(deadline)
            .then(lock_api::GuardSend::new)
    }
}

// SAFETY: as for lock_api 0.5 above, without a guard value.
#[cfg(all(feature = "lock_api_04", not(numa_loom)))]
unsafe impl lock_api04::RawMutex for RawFairMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawFairMutex::new();
    type GuardMarker = lock_api04::GuardSend;

    #[inline]
    fn lock(&self) {
        self.0.acquire();
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.0.try_acquire()
    }

    #[inline]
    unsafe fn unlock(&self) {
        // SAFETY: the caller holds the lock (trait contract).
        unsafe { self.0.release_fair() }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.0.is_held()
    }
}

// SAFETY: as for lock_api 0.5 above.
#[cfg(all(feature = "lock_api_04", not(numa_loom)))]
unsafe impl lock_api04::RawMutexFair for RawFairMutex {
    #[inline]
    unsafe fn unlock_fair(&self) {
        // SAFETY: the caller holds the lock (trait contract).
        unsafe { self.0.release_fair() }
    }
}

// SAFETY: as for lock_api 0.5 above.
#[cfg(all(feature = "lock_api_04", not(numa_loom)))]
unsafe impl lock_api04::RawMutexTimed for RawFairMutex {
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_for(&self, timeout: Duration) -> bool {
        self.0.try_acquire_for(timeout)
    }

    #[inline]
    fn try_lock_until(&self, deadline: Instant) -> bool {
        self.0.try_acquire_until(deadline)
    }
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use super::*;
    use lock_api::RawMutex as _;

    /// Every unlock is fair: a queued waiter gets the lock at the release,
    /// so the releasing thread cannot take it back before the waiter's
    /// critical section (as it mostly does after a plain unlock, by
    /// stealing), in each of 50 rounds.
    #[test]
    fn unlock_hands_the_lock_to_the_queued_waiter() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let lock = RawFairMutex::new();
        for _ in 0..50 {
            let done = AtomicBool::new(false);
            let g = lock.lock();
            std::thread::scope(|s| {
                s.spawn(|| {
                    let g = lock.lock();
                    done.store(true, Ordering::SeqCst);
                    // SAFETY: acquired just above.
                    unsafe { lock.unlock(g) };
                });
                while !lock.inner().has_queued_waiters() {
                    std::thread::yield_now();
                }
                // SAFETY: acquired above by this thread.
                unsafe { lock.unlock(g) };
                if let Some(g) = lock.try_lock() {
                    let waiter_went_first = done.load(Ordering::SeqCst);
                    // SAFETY: acquired just above. (Released before the
                    // assertion: the waiter must be able to finish.)
                    unsafe { lock.unlock(g) };
                    assert!(
                        waiter_went_first,
                        "the releaser took the lock back before the queued waiter"
                    );
                }
            });
        }
        assert!(!lock.is_locked());
    }
}
