//! [`ReentrantMutex`]: a [`RawMutex`] the owning thread may lock again.

use std::num::NonZeroUsize;

use crate::RawMutex;

/// The thread identity [`ReentrantMutex`] uses (`lock_api::GetThreadId`): the
/// address of a thread-local byte, as in `parking_lot::RawThreadId`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawThreadId;

impl RawThreadId {
    /// The calling thread's id: non-zero, unique among running threads.
    #[inline]
    pub fn current() -> NonZeroUsize {
        thread_local!(static KEY: u8 = const { 0 });
        // A `const`-initialized thread-local without `Drop` lives as long as its
        // thread; the byte is not zero-sized, so each thread's has its own address.
        KEY.with(|k| {
            NonZeroUsize::new(std::ptr::from_ref(k).addr())
                .expect("a thread-local's address is not null")
        })
    }
}

// SAFETY: two running threads never share a thread-local's address, and one
// thread always gets the same address for it.
unsafe impl lock_api::GetThreadId for RawThreadId {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawThreadId;

    #[inline]
    fn nonzero_thread_id(&self) -> NonZeroUsize {
        Self::current()
    }
}

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
