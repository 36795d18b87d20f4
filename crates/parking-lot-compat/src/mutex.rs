//! [`Mutex`] and its guards.

use crate::backend::RawMutex;

/// A mutual exclusion primitive useful for protecting shared data: lock_api
/// 0.4's `Mutex` on the selected backend's [`RawMutex`] (cst-mutex's blocking
/// lock on numa-spin's CNA queue by default, numa-spin's CNA queue spinlock
/// with the `cna` backend).
///
/// # Fairness
///
/// Both backends queue as CNA does: FIFO within a node, bounded batches per
/// node, and stealing by threads that find the lock free until the queue
/// head has waited the steal bound (10 us by default; parking_lot's
/// eventual fairness hands over after 0.5 ms). `cst` parks queued waiters
/// after their spin budget. `unlock_fair` hands the lock over with both.
///
/// # Differences from parking_lot
///
/// The CNA lock's 8 bytes instead of 1, and guards
/// are `Send` even without the `send_guard` feature.
///
/// # Examples
///
/// ```
/// use parking_lot::Mutex;
/// use std::sync::Arc;
/// use std::thread;
///
/// let data = Arc::new(Mutex::new(0));
/// let hs: Vec<_> = (0..4)
///     .map(|_| {
///         let data = Arc::clone(&data);
///         thread::spawn(move || *data.lock() += 1)
///     })
///     .collect();
/// for h in hs {
///     h.join().unwrap();
/// }
/// assert_eq!(*data.lock(), 4);
/// ```
pub type Mutex<T> = lock_api04::Mutex<RawMutex, T>;

/// Creates a new mutex in an unlocked state ready for use (usable in `const`
/// and `static` items).
pub const fn const_mutex<T>(val: T) -> Mutex<T> {
    Mutex::const_new(<RawMutex as lock_api04::RawMutex>::INIT, val)
}

/// An RAII implementation of a "scoped lock" of a mutex. When this structure
/// is dropped (falls out of scope), the lock will be unlocked.
pub type MutexGuard<'a, T> = lock_api04::MutexGuard<'a, RawMutex, T>;

/// An RAII mutex guard returned by `MutexGuard::map`, which can point to a
/// subfield of the protected data.
pub type MappedMutexGuard<'a, T> = lock_api04::MappedMutexGuard<'a, RawMutex, T>;
