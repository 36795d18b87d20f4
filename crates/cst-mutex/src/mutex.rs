//! [`Mutex`] and [`MutexGuard`]: `lock_api` wrappers over [`RawMutex`].

use crate::RawMutex;

/// A NUMA-aware blocking mutex protecting a `T`, on numa-spin's CNA queue
/// ([`RawMutex`]).
///
/// Works like `parking_lot::Mutex`: `const fn new`, no poisoning, guards that
/// deref to `T`, `try_lock_for`/`try_lock_until`, `MutexGuard::unlock_fair`
/// and `bump`. `size_of::<Mutex<()>>()` is 8 bytes on 64-bit targets, and the
/// lock holds no heap memory (see the [crate docs](crate#memory-cost)).
///
/// # Fairness
///
/// CNA's queue order with bounded stealing (see the
/// [crate docs](crate#fairness-and-starvation)).
///
/// # Examples
///
/// ```
/// use cst_mutex::Mutex;
/// use std::sync::Arc;
///
/// let counter = Arc::new(Mutex::new(0u64));
/// let handles: Vec<_> = (0..4)
///     .map(|_| {
///         let c = Arc::clone(&counter);
///         std::thread::spawn(move || {
///             for _ in 0..1000 {
///                 *c.lock() += 1;
///             }
///         })
///     })
///     .collect();
/// for h in handles {
///     h.join().unwrap();
/// }
/// assert_eq!(*counter.lock(), 4000);
/// ```
pub type Mutex<T> = lock_api::Mutex<RawMutex, T>;

/// The RAII guard of a [`Mutex`]: the lock is released when it is dropped.
pub type MutexGuard<'a, T> = lock_api::MutexGuard<'a, RawMutex, T>;

/// A [`MutexGuard`] narrowed to a part of the data (`MutexGuard::map`).
pub type MappedMutexGuard<'a, T> = lock_api::MappedMutexGuard<'a, RawMutex, T>;

/// An owned guard of an `Arc<Mutex<T>>` (`Mutex::lock_arc`; feature `arc_lock`).
#[cfg(feature = "arc_lock")]
#[cfg_attr(docsrs, doc(cfg(feature = "arc_lock")))]
pub type ArcMutexGuard<T> = lock_api::ArcMutexGuard<RawMutex, T>;

/// An owned guard of an `Arc<ReentrantMutex<T>>` (feature `arc_lock`).
#[cfg(feature = "arc_lock")]
#[cfg_attr(docsrs, doc(cfg(feature = "arc_lock")))]
pub type ArcReentrantMutexGuard<T> =
    lock_api::ArcReentrantMutexGuard<RawMutex, crate::RawThreadId, T>;
