//! The `lock_api` trait glue shared by every raw lock of the crate.
//!
//! Each raw lock ([`RawLock`](crate::RawLock), [`RawHqLock`](crate::RawHqLock),
//! `RawFairMutex`) has the same inherent core: `acquire`, `try_acquire`,
//! `release`, `release_fair`, `is_held`, `try_acquire_for` and
//! `try_acquire_until`, with the contracts documented on `RawLock`'s. The trait
//! implementations only adapt that core to `lock_api`'s signatures (a zero-sized
//! `GuardSend` in 0.5, no guard in 0.4), so they are written once here:
//! [`raw_mutex_glue!`] implements lock_api 0.5's `RawMutex`, `RawMutexFair` and
//! `RawMutexTimed`, and with feature `lock_api_04` lock_api 0.4's three traits.

/// Implements `lock_api::{RawMutex, RawMutexFair, RawMutexTimed}` (0.5) and,
/// with feature `lock_api_04`, the same three traits of lock_api 0.4, for a raw
/// lock type outside loom builds (`INIT` must be `const`; loom atomics are not).
///
/// `core = |this| expr` names the object whose inherent core the traits call
/// (`this` is `&Self`): `this` itself, or an inner lock. `unlock = release` or
/// `unlock = release_fair` picks the core method behind `RawMutex::unlock`.
///
/// The `unsafe impl`s are sound exactly when the core is (the `# Safety`
/// contract every caller of this macro states above its invocation):
/// - `acquire` returns, and `try_acquire`, `try_acquire_for` and
///   `try_acquire_until` return `true`, only holding the lock, acquired with
///   Acquire ordering against the Release of the previous holder's release;
/// - `release` and `release_fair`, called by the holder, end the acquisition
///   with Release ordering and let at most one thread acquire next;
/// - no method runs user code or leaves state tied to the caller (the guards
///   are zero-sized, so a forgotten guard only leaves the lock held);
/// - the lock refers to nothing by address, so it can be moved when unborrowed.
macro_rules! raw_mutex_glue {
    (
        impl[$($gen:tt)*] for $ty:ty;
        init = $init:expr;
        core = |$this:ident| $core:expr;
        unlock = $unlock:ident;
    ) => {
        // SAFETY: the core's contract, stated at the invocation (see the macro).
        #[cfg(not(numa_loom))]
        unsafe impl<$($gen)*> ::lock_api::RawMutex for $ty {
            #[allow(clippy::declare_interior_mutable_const)]
            const INIT: Self = $init;

            type Guard = ::lock_api::GuardSend;

            #[inline]
            fn lock(&self) -> Self::Guard {
                let $this = self;
                $core.acquire();
                ::lock_api::GuardSend::new()
            }

            #[inline]
            fn try_lock(&self) -> Option<Self::Guard> {
                let $this = self;
                $core.try_acquire().then(::lock_api::GuardSend::new)
            }

            #[inline]
            unsafe fn unlock(&self, _guard: Self::Guard) {
                let $this = self;
                // SAFETY: the caller passes the guard of a held acquisition
                // (trait contract), which this call ends.
                unsafe { $core.$unlock() }
            }

            #[inline]
            fn is_locked(&self) -> bool {
                let $this = self;
                $core.is_held()
            }
        }

        // SAFETY: `unlock_fair` is the core's `release_fair`, which releases
        // with Release as `release` does and only chooses who gets the lock
        // next; `bump` is lock_api's default (unlock_fair, then lock).
        #[cfg(not(numa_loom))]
        unsafe impl<$($gen)*> ::lock_api::RawMutexFair for $ty {
            #[inline]
            unsafe fn unlock_fair(&self, _guard: Self::Guard) {
                let $this = self;
                // SAFETY: the caller passes the guard of a held acquisition
                // (trait contract), which this call ends.
                unsafe { $core.release_fair() }
            }
        }

        // SAFETY: both methods acquire only through the core's timed
        // acquisitions, which never queue (see `crate::timed`): a `None`
        // leaves no trace in the lock.
        #[cfg(not(numa_loom))]
        unsafe impl<$($gen)*> ::lock_api::RawMutexTimed for $ty {
            type Duration = ::std::time::Duration;
            type Instant = ::std::time::Instant;

            #[inline]
            fn try_lock_for(&self, timeout: Self::Duration) -> Option<Self::Guard> {
                let $this = self;
                $core
                    .try_acquire_for(timeout)
                    .then(::lock_api::GuardSend::new)
            }

            #[inline]
            fn try_lock_until(&self, deadline: Self::Instant) -> Option<Self::Guard> {
                let $this = self;
                $core
                    .try_acquire_until(deadline)
                    .then(::lock_api::GuardSend::new)
            }
        }

        // SAFETY: as for lock_api 0.5 above: 0.4's guard-less methods are the
        // 0.5 ones with their zero-sized guard.
        #[cfg(all(feature = "lock_api_04", not(numa_loom)))]
        unsafe impl<$($gen)*> ::lock_api04::RawMutex for $ty {
            #[allow(clippy::declare_interior_mutable_const)]
            const INIT: Self = $init;

            type GuardMarker = ::lock_api04::GuardSend;

            #[inline]
            fn lock(&self) {
                let $this = self;
                $core.acquire();
            }

            #[inline]
            fn try_lock(&self) -> bool {
                let $this = self;
                $core.try_acquire()
            }

            #[inline]
            unsafe fn unlock(&self) {
                let $this = self;
                // SAFETY: the caller holds the lock (trait contract); this call
                // ends that acquisition.
                unsafe { $core.$unlock() }
            }

            #[inline]
            fn is_locked(&self) -> bool {
                let $this = self;
                $core.is_held()
            }
        }

        // SAFETY: as for lock_api 0.5's `RawMutexFair` above.
        #[cfg(all(feature = "lock_api_04", not(numa_loom)))]
        unsafe impl<$($gen)*> ::lock_api04::RawMutexFair for $ty {
            #[inline]
            unsafe fn unlock_fair(&self) {
                let $this = self;
                // SAFETY: the caller holds the lock (trait contract); this call
                // ends that acquisition.
                unsafe { $core.release_fair() }
            }
        }

        // SAFETY: as for lock_api 0.5's `RawMutexTimed` above.
        #[cfg(all(feature = "lock_api_04", not(numa_loom)))]
        unsafe impl<$($gen)*> ::lock_api04::RawMutexTimed for $ty {
            type Duration = ::std::time::Duration;
            type Instant = ::std::time::Instant;

            #[inline]
            fn try_lock_for(&self, timeout: Self::Duration) -> bool {
                let $this = self;
                $core.try_acquire_for(timeout)
            }

            #[inline]
            fn try_lock_until(&self, deadline: Self::Instant) -> bool {
                let $this = self;
                $core.try_acquire_until(deadline)
            }
        }
    };
}

pub(crate) use raw_mutex_glue;

/// Routes an inherent core method of a raw lock to this module under a
/// user's loom model: `model_route!(expr)` returns `expr` there and expands
/// to nothing in every other build.
macro_rules! model_route {
    ($e:expr) => {
        #[cfg(all(loom, feature = "loom", not(numa_loom)))]
        {
            return $e;
        }
    };
}
pub(crate) use model_route;
