//! [`RwLock`] and its guards: `lock_api` wrappers over [`RawRwLock`].

use crate::RawRwLock;

/// A CST-style NUMA-aware blocking reader-writer lock protecting a `T`.
///
/// Works like `parking_lot::RwLock` (read, write and upgradable guards,
/// downgrades, timeouts, `const fn new`). 16 bytes on 64-bit targets; readers
/// of different nodes count on different cache lines once they contend.
///
/// # Fairness
///
/// Neither side starves: a writer blocks new readers and waits for the readers
/// inside; readers that waited are all admitted when that writer leaves, before
/// the next writer (see the [crate docs](crate#rwlock-policy)).
///
/// # No `RecursiveRwLock`
///
/// `parking_lot` 0.13 has a `RecursiveRwLock` whose readers may read again while
/// a writer waits. Here a waiting writer sets a bit that stops *every* new reader
/// (that is what keeps writers from starving), and the lock does not record which
/// threads hold read locks, so it cannot let a thread's second read past that bit:
/// a thread that calls `read()` twice while a writer waits deadlocks. Allowing it
/// would take a per-thread reader record in the reader protocol, so there is no
/// recursive variant: take one read guard per thread and pass it down.
///
/// # Examples
///
/// ```
/// use cst_mutex::{RwLock, RwLockUpgradableReadGuard};
///
/// let lock = RwLock::new(vec![1, 2, 3]);
/// {
///     let a = lock.read();
///     let b = lock.read(); // two readers at once
///     assert_eq!(a.len() + b.len(), 6);
/// }
/// lock.write().push(4);
/// let up = lock.upgradable_read();
/// let reader = lock.read(); // plain readers beside the upgradable one
/// assert_eq!(reader.len(), 4);
/// drop(reader);
/// let mut w = RwLockUpgradableReadGuard::upgrade(up);
/// w.push(5);
/// assert_eq!(*w, [1, 2, 3, 4, 5]);
/// ```
pub type RwLock<T> = lock_api::RwLock<RawRwLock, T>;

/// Shared (read) guard of an [`RwLock`].
pub type RwLockReadGuard<'a, T> = lock_api::RwLockReadGuard<'a, RawRwLock, T>;

/// Exclusive (write) guard of an [`RwLock`].
pub type RwLockWriteGuard<'a, T> = lock_api::RwLockWriteGuard<'a, RawRwLock, T>;

/// Upgradable read guard of an [`RwLock`]: shares with readers, excludes
/// writers and other upgradable readers, and can become a write guard.
pub type RwLockUpgradableReadGuard<'a, T> = lock_api::RwLockUpgradableReadGuard<'a, RawRwLock, T>;

/// A read guard narrowed to a part of the data.
pub type MappedRwLockReadGuard<'a, T> = lock_api::MappedRwLockReadGuard<'a, RawRwLock, T>;

/// A write guard narrowed to a part of the data.
pub type MappedRwLockWriteGuard<'a, T> = lock_api::MappedRwLockWriteGuard<'a, RawRwLock, T>;

/// An owned read guard of an `Arc<RwLock<T>>` (`RwLock::read_arc`; feature `arc_lock`).
#[cfg(feature = "arc_lock")]
#[cfg_attr(docsrs, doc(cfg(feature = "arc_lock")))]
pub type ArcRwLockReadGuard<T> = lock_api::ArcRwLockReadGuard<RawRwLock, T>;

/// An owned write guard of an `Arc<RwLock<T>>` (`RwLock::write_arc`; feature `arc_lock`).
#[cfg(feature = "arc_lock")]
#[cfg_attr(docsrs, doc(cfg(feature = "arc_lock")))]
pub type ArcRwLockWriteGuard<T> = lock_api::ArcRwLockWriteGuard<RawRwLock, T>;

/// An owned upgradable read guard of an `Arc<RwLock<T>>` (feature `arc_lock`).
#[cfg(feature = "arc_lock")]
#[cfg_attr(docsrs, doc(cfg(feature = "arc_lock")))]
pub type ArcRwLockUpgradableReadGuard<T> = lock_api::ArcRwLockUpgradableReadGuard<RawRwLock, T>;
