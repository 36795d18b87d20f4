//! lock_api 0.4 support (feature `lock_api_04`): the same raw locks for code and
//! crates written against lock_api 0.4 (parking_lot 0.12, spin 0.9 to 0.12).
//!
//! lock_api 0.4's traits have no guard state (`lock()` returns `()`), which these
//! locks do not need: [`RawLock`], [`RawFairMutex`] and [`RawThreadId`] implement
//! lock_api 0.4's `RawMutex`, `RawMutexFair`, `RawMutexTimed` and `GetThreadId`
//! beside the 0.5 ones. Generic code over `R: lock_api::RawMutex` (0.4) takes
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
use std::time::{Duration, Instant};

pub use lock_api04 as lock_api;

use crate::config::Tunables;
use crate::fair::RawFairMutex;
use crate::raw_lock::RawLock;
use crate::remutex::RawThreadId;

// SAFETY: as for the lock_api 0.5 implementation (see `raw_lock.rs`): `lock` and
// `try_lock` return only after winning the lock word (Acquire), `unlock` releases
// it with Release, and no state besides the lock word is involved, so 0.4's
// guard-less `unlock` is the 0.5 `unlock` with its zero-sized guard.
unsafe impl<const NUMA: bool, T: Tunables> lock_api04::RawMutex for RawLock<NUMA, T> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::from_tunables(T::DEFAULT);

    type GuardMarker = lock_api04::GuardSend;

    #[inline]
    fn lock(&self) {
        self.acquire();
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.try_acquire()
    }

    #[inline]
    unsafe fn unlock(&self) {
        // SAFETY: the caller holds the lock (trait contract).
        unsafe { self.release() }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.is_held()
    }
}

// SAFETY: `release_fair` releases like `release` and gives the lock to exactly one
// waiter; `bump` is lock_api's default (unlock_fair then lock).
unsafe impl<const NUMA: bool, T: Tunables> lock_api04::RawMutexFair for RawLock<NUMA, T> {
    #[inline]
    unsafe fn unlock_fair(&self) {
        // SAFETY: the caller holds the lock (trait contract).
        unsafe { self.release_fair() }
    }
}

// SAFETY: acquires only through `try_acquire`/`acquire`; a `false` result leaves no
// trace in the lock (see `crate::timed`).
unsafe impl<const NUMA: bool, T: Tunables> lock_api04::RawMutexTimed for RawLock<NUMA, T> {
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_for(&self, timeout: Duration) -> bool {
        self.try_acquire_for(timeout)
    }

    #[inline]
    fn try_lock_until(&self, deadline: Instant) -> bool {
        self.try_acquire_until(deadline)
    }
}

// SAFETY: forwards to `RawLock`; `unlock` is the fair release, which releases the
// lock as `unlock` does and only chooses who gets it next.
unsafe impl lock_api04::RawMutex for RawFairMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawFairMutex::new();

    type GuardMarker = lock_api04::GuardSend;

    #[inline]
    fn lock(&self) {
        self.inner().acquire();
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.inner().try_acquire()
    }

    #[inline]
    unsafe fn unlock(&self) {
        // SAFETY: the caller holds the lock (trait contract).
        unsafe { self.inner().release_fair() }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.inner().is_held()
    }
}

// SAFETY: as for `RawLock`.
unsafe impl lock_api04::RawMutexFair for RawFairMutex {
    #[inline]
    unsafe fn unlock_fair(&self) {
        // SAFETY: the caller holds the lock (trait contract).
        unsafe { self.inner().release_fair() }
    }
}

// SAFETY: as for `RawLock`.
unsafe impl lock_api04::RawMutexTimed for RawFairMutex {
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_for(&self, timeout: Duration) -> bool {
        self.inner().try_acquire_for(timeout)
    }

    #[inline]
    fn try_lock_until(&self, deadline: Instant) -> bool {
        self.inner().try_acquire_until(deadline)
    }
}

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
