//! [`FairMutex`] and its guards.

use crate::backend::RawFairMutex;

/// A mutual exclusion primitive that is always fair: every unlock hands the
/// lock to the next waiter (`unlock_fair`), on the selected backend
/// (cst-mutex's or numa-spin's `RawFairMutex`).
///
/// # Examples
///
/// ```
/// use parking_lot::FairMutex;
///
/// let m = FairMutex::new(1);
/// *m.lock() += 1;
/// assert_eq!(*m.lock(), 2);
/// ```
pub type FairMutex<T> = lock_api04::Mutex<RawFairMutex, T>;

/// Creates a new fair mutex in an unlocked state ready for use.
pub const fn const_fair_mutex<T>(val: T) -> FairMutex<T> {
    FairMutex::const_new(<RawFairMutex as lock_api04::RawMutex>::INIT, val)
}

/// An RAII implementation of a "scoped lock" of a fair mutex.
pub type FairMutexGuard<'a, T> = lock_api04::MutexGuard<'a, RawFairMutex, T>;

/// An RAII mutex guard returned by `FairMutexGuard::map`, which can point to a
/// subfield of the protected data.
pub type MappedFairMutexGuard<'a, T> = lock_api04::MappedMutexGuard<'a, RawFairMutex, T>;
