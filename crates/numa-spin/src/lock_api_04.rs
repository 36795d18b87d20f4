//! lock_api 0.4 support (feature `lock_api_04`): the same raw locks for code and
//! crates written against lock_api 0.4 (parking_lot 0.12, spin 0.9 to 0.12).
//!
//! lock_api 0.4's traits have no guard state (`lock()` returns `()`), which these
//! locks do not need: [`RawLock`](crate::RawLock), [`RawHqLock`](crate::RawHqLock)
//! and [`RawFairMutex`] implement lock_api 0.4's `RawMutex`, `RawMutexFair` and
//! `RawMutexTimed`, and [`RawThreadId`] its `GetThreadId`, beside the 0.5 ones.
//! Generic code over `R: lock_api::RawMutex` (0.4) takes
//! [`numa_spin::RawMutex`](crate::RawMutex); the aliases below are lock_api 0.4's
//! wrappers over the same raw types. `lock_api` here is lock_api 0.4, re-exported.
//!
//! Guards are `Send` (`GuardSend`), as with the 0.5 traits. Timed acquisitions
//! do not queue (see [`crate::timed`]).
//!
//! ```
//! use numa_spin::lock_api_04::lock_api; // lock_api 0.4
//!
//! // Code written for lock_api 0.4, e.g. generic over parking_lot 0.12's RawMutex:
//! fn bump<R: lock_api::RawMutex>(m: &lock_api::Mutex<R, u64>) -> u64 {
//!     let mut g = m.lock();
//!     *g += 1;
//!     *g
//! }
//!
//! let m: lock_api::Mutex<numa_spin::RawMutex, u64> = lock_api::Mutex::new(0);
//! assert_eq!(bump(&m), 1);
//! let m = numa_spin::lock_api_04::Mutex::new(41);
//! assert_eq!(bump(&m), 42);
//! ```

use std::num::NonZeroUsize;

pub use lock_api04 as lock_api;

use crate::fair::RawFairMutex;
use crate::remutex::RawThreadId;

// The lock_api 0.4 `RawMutex`, `RawMutexFair` and `RawMutexTimed` of `RawLock`,
// `RawFairMutex` and `RawHqLock` are implemented beside their 0.5 ones, by
// `crate::glue::raw_mutex_glue!`.

// SAFETY: as for the lock_api 0.5 implementation: distinct running threads get
// distinct non-zero ids, one thread always the same.
unsafe impl lock_api04::GetThreadId for RawThreadId {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawThreadId;

    #[inline]
    fn nonzero_thread_id(&self) -> NonZeroUsize {
        RawThreadId::current()
    }
}

/// [`crate::Mutex`] as a lock_api 0.4 `Mutex`.
pub type Mutex<T> = lock_api04::Mutex<crate::RawMutex, T>;
/// The guard of a lock_api 0.4 [`Mutex`].
pub type MutexGuard<'a, T> = lock_api04::MutexGuard<'a, crate::RawMutex, T>;
/// A lock_api 0.4 [`MutexGuard`] narrowed to a part of the data.
pub type MappedMutexGuard<'a, T> = lock_api04::MappedMutexGuard<'a, crate::RawMutex, T>;
/// [`crate::QueuedMutex`] (no NUMA reordering) as a lock_api 0.4 `Mutex`.
pub type QueuedMutex<T> = lock_api04::Mutex<crate::RawQueuedMutex, T>;
/// [`crate::FairMutex`] as a lock_api 0.4 `Mutex`.
pub type FairMutex<T> = lock_api04::Mutex<RawFairMutex, T>;
/// [`crate::ReentrantMutex`] as a lock_api 0.4 `ReentrantMutex`.
pub type ReentrantMutex<T> = lock_api04::ReentrantMutex<crate::RawMutex, RawThreadId, T>;
/// The guard of a lock_api 0.4 [`ReentrantMutex`].
pub type ReentrantMutexGuard<'a, T> =
    lock_api04::ReentrantMutexGuard<'a, crate::RawMutex, RawThreadId, T>;
/// [`crate::HqMutex`] (the HQ lock) as a lock_api 0.4 `Mutex`.
pub type HqMutex<T> = lock_api04::Mutex<crate::RawHqMutex, T>;
/// The guard of a lock_api 0.4 [`HqMutex`].
pub type HqMutexGuard<'a, T> = lock_api04::MutexGuard<'a, crate::RawHqMutex, T>;
