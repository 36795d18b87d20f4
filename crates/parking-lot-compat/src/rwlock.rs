//! [`RwLock`] and its guards.

use crate::backend::RawRwLock;

/// A reader-writer lock: lock_api 0.4's `RwLock` on cst-mutex's
/// [`RawRwLock`] (with every backend).
///
/// Implements parking_lot's raw traits: fair, timed, downgrade, upgradable
/// (with fair, timed and downgrade) and recursive reads.
///
/// # Fairness
///
/// Writers do not starve (a waiting writer stops new readers), readers do not
/// starve (readers that arrived during a writer's turn go before the next
/// writer). `read_recursive` on a thread that already holds a read lock never
/// waits; `read` there may deadlock behind a waiting writer, as in parking_lot.
///
/// # Differences from parking_lot
///
/// - 16 bytes instead of 8.
/// - Read guards are released on the thread that took them (each thread keeps
///   the states of its read locks), so with the `send_guard` feature the
///   RwLock guards are still not `Send`.
///
/// # Examples
///
/// ```
/// use parking_lot::{RwLock, RwLockUpgradableReadGuard};
///
/// let lock = RwLock::new(vec![1]);
/// assert_eq!(lock.read().len(), 1);
/// let up = lock.upgradable_read();
/// let mut w = RwLockUpgradableReadGuard::upgrade(up);
/// w.push(2);
/// assert_eq!(*w, [1, 2]);
/// ```
pub type RwLock<T> = lock_api04::RwLock<RawRwLock, T>;

/// Creates a new instance of an `RwLock<T>` which is unlocked.
pub const fn const_rwlock<T>(val: T) -> RwLock<T> {
    RwLock::const_new(<RawRwLock as lock_api04::RawRwLock>::INIT, val)
}

/// RAII structure used to release the shared read access of a lock when dropped.
pub type RwLockReadGuard<'a, T> = lock_api04::RwLockReadGuard<'a, RawRwLock, T>;

/// RAII structure used to release the exclusive write access of a lock when dropped.
pub type RwLockWriteGuard<'a, T> = lock_api04::RwLockWriteGuard<'a, RawRwLock, T>;

/// An RAII read lock guard returned by `RwLockReadGuard::map`, which can point
/// to a subfield of the protected data.
pub type MappedRwLockReadGuard<'a, T> = lock_api04::MappedRwLockReadGuard<'a, RawRwLock, T>;

/// An RAII write lock guard returned by `RwLockWriteGuard::map`, which can
/// point to a subfield of the protected data.
pub type MappedRwLockWriteGuard<'a, T> = lock_api04::MappedRwLockWriteGuard<'a, RawRwLock, T>;

/// RAII structure used to release the upgradable read access of a lock when dropped.
pub type RwLockUpgradableReadGuard<'a, T> = lock_api04::RwLockUpgradableReadGuard<'a, RawRwLock, T>;
