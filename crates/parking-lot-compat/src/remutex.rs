//! [`ReentrantMutex`] and its guards.

use crate::backend::{RawMutex, RawThreadId};

/// A mutex which can be recursively locked by a single thread: lock_api 0.4's
/// `ReentrantMutex` on the selected backend's [`RawMutex`] and
/// [`RawThreadId`].
///
/// # Examples
///
/// ```
/// use parking_lot::ReentrantMutex;
/// use std::cell::Cell;
///
/// let m = ReentrantMutex::new(Cell::new(0));
/// let a = m.lock();
/// let b = m.lock(); // same thread: no deadlock
/// b.set(a.get() + 1);
/// assert_eq!(a.get(), 1);
/// ```
pub type ReentrantMutex<T> = lock_api04::ReentrantMutex<RawMutex, RawThreadId, T>;

/// Creates a new reentrant mutex in an unlocked state ready for use.
pub const fn const_reentrant_mutex<T>(val: T) -> ReentrantMutex<T> {
    ReentrantMutex::const_new(
        <RawMutex as lock_api04::RawMutex>::INIT,
        <RawThreadId as lock_api04::GetThreadId>::INIT,
        val,
    )
}

/// An RAII implementation of a "scoped lock" of a reentrant mutex.
pub type ReentrantMutexGuard<'a, T> = lock_api04::ReentrantMutexGuard<'a, RawMutex, RawThreadId, T>;

/// An RAII mutex guard returned by `ReentrantMutexGuard::map`, which can point
/// to a subfield of the protected data.
pub type MappedReentrantMutexGuard<'a, T> =
    lock_api04::MappedReentrantMutexGuard<'a, RawMutex, RawThreadId, T>;
