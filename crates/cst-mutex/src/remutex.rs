//! [`ReentrantMutex`]: a [`RawMutex`] the owning thread may lock again.

use crate::RawMutex;

/// The thread identity [`ReentrantMutex`] uses (`lock_api::GetThreadId`):
/// numa-spin's, the address of a thread-local byte, as in
/// `parking_lot::RawThreadId` (under a user's loom model, the loom thread).
pub use numa_spin::RawThreadId;

/// A mutex the thread holding it can lock again (each `lock` needs its own
/// release), backed by [`RawMutex`]: `parking_lot::ReentrantMutex` with
/// NUMA-aware hand-offs. Guards give `&T` only.
///
/// ```
/// let m = cst_mutex::ReentrantMutex::new(std::cell::Cell::new(1));
/// let outer = m.lock();
/// let inner = m.lock(); // the same thread: no deadlock
/// inner.set(2);
/// drop(inner);
/// assert_eq!(outer.get(), 2);
/// ```
pub type ReentrantMutex<T> = lock_api::ReentrantMutex<RawMutex, RawThreadId, T>;

/// The guard of a [`ReentrantMutex`].
pub type ReentrantMutexGuard<'a, T> = lock_api::ReentrantMutexGuard<'a, RawMutex, RawThreadId, T>;

/// A [`ReentrantMutexGuard`] narrowed to a part of the data.
pub type MappedReentrantMutexGuard<'a, T> =
    lock_api::MappedReentrantMutexGuard<'a, RawMutex, RawThreadId, T>;
