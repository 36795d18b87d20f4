//! [`RawFairMutex`] and [`FairMutex`]: the CNA lock whose every unlock is fair.

use crate::mutex::RawMutex;

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
///
/// # Examples
///
/// ```
/// use numa_spin::lock_api::RawMutex as _;
///
/// let raw = numa_spin::RawFairMutex::INIT;
/// let guard = raw.lock();
/// assert!(raw.is_locked());
/// // SAFETY: `guard` is the state of the acquisition above.
/// unsafe { raw.unlock(guard) };
/// assert!(!raw.is_locked());
/// ```
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

// The lock_api 0.5 (and, with feature `lock_api_04`, 0.4) traits, forwarded to
// the inner `RawMutex`, whose core upholds the contract (see `raw_lock.rs`);
// `unlock` is its `release_fair`, which releases the lock as `release` does (it
// only chooses who gets it next).
crate::glue::raw_mutex_glue! {
    impl[] for RawFairMutex;
    init = RawFairMutex::new();
    core = |this| this.inner();
    unlock = release_fair;
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
