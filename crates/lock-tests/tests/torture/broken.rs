//! Deliberately broken locks, to show that the torture test fails when a lock
//! loses exclusion, leaks its per-node state, or never releases.
//!
//! They are used only to protect [`Shared`](lock_tests::model::Shared), whose
//! fields are atomics reached through `&` only, so their bugs are detectable
//! races and leaks, never undefined behaviour.

use std::sync::atomic::{AtomicPtr, Ordering};

use lock_api::{GuardSend, RawMutex};

/// A "mutex" that never excludes anyone.
pub struct NoExclusion;

// SAFETY: this implementation deliberately breaks mutual exclusion. It is only
// instantiated as `lock_api::Mutex<NoExclusion, Shared>`, whose data is all
// atomics accessed through shared references, so concurrent "holders" race on
// atomics (defined behaviour) and nothing else relies on exclusion.
unsafe impl RawMutex for NoExclusion {
    const INIT: Self = NoExclusion;
    type Guard = GuardSend;

    fn lock(&self) -> GuardSend {
        GuardSend::default()
    }

    fn try_lock(&self) -> Option<GuardSend> {
        Some(GuardSend::default())
    }

    unsafe fn unlock(&self, _guard: GuardSend) {}

    fn is_locked(&self) -> bool {
        false
    }
}

/// A correct mutex (parking_lot's) that allocates a "snode" on its first
/// `lock` and forgets to free it when dropped.
pub struct LeakySnode {
    inner: parking_lot::RawMutex,
    snode: AtomicPtr<u64>,
}

// SAFETY: exclusion, acquire/release and the guard contract are those of the
// wrapped `parking_lot::RawMutex`; the extra allocation is never read.
unsafe impl RawMutex for LeakySnode {
    const INIT: Self = LeakySnode {
        inner: <parking_lot::RawMutex as RawMutex>::INIT,
        snode: AtomicPtr::new(std::ptr::null_mut()),
    };
    type Guard = <parking_lot::RawMutex as RawMutex>::Guard;

    fn lock(&self) -> Self::Guard {
        if self.snode.load(Ordering::Relaxed).is_null() {
            let fresh = Box::into_raw(Box::new(0u64));
            if self
                .snode
                .compare_exchange(
                    std::ptr::null_mut(),
                    fresh,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                // SAFETY: `fresh` came from `Box::into_raw` and was not shared.
                drop(unsafe { Box::from_raw(fresh) });
            }
        }
        self.inner.lock()
    }

    fn try_lock(&self) -> Option<Self::Guard> {
        self.inner.try_lock()
    }

    unsafe fn unlock(&self, guard: Self::Guard) {
        // SAFETY: the caller holds this acquisition of the wrapped mutex.
        unsafe { self.inner.unlock(guard) }
    }

    fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }
}

/// A mutex whose unlock never releases: every later `lock` waits forever
/// (parked, so the stuck workers burn no CPU).
pub struct NeverReleases {
    inner: parking_lot::RawMutex,
}

// SAFETY: exclusion is that of the wrapped mutex (it is never released, so it
// is trivially exclusive); acquisitions never end, which breaks liveness only.
unsafe impl RawMutex for NeverReleases {
    const INIT: Self = NeverReleases {
        inner: <parking_lot::RawMutex as RawMutex>::INIT,
    };
    type Guard = <parking_lot::RawMutex as RawMutex>::Guard;

    fn lock(&self) -> Self::Guard {
        self.inner.lock()
    }

    fn try_lock(&self) -> Option<Self::Guard> {
        self.inner.try_lock()
    }

    unsafe fn unlock(&self, _guard: Self::Guard) {
        // Deliberately keeps the wrapped mutex locked.
    }

    fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }
}
