//! [`RawCondvar`]: a condition variable for [`RawMutex`].

use crate::cohort::TOKEN_NORMAL;
use crate::raw_mutex::{MutexGuardState, RawMutex};
use crate::sync::{self, AtomicPtr, Ordering, ParkResult, ParkToken};
use lock_api::RawMutex as _;
use std::ptr;
use std::time::{Duration, Instant};

/// A condition variable for [`RawMutex`]: one pointer (8 bytes), waiters park
/// on its address through `parking_lot_core`.
///
/// Waits never return spuriously: a wait returns after a notification or a
/// timeout. [`notify_one`](lock_api::RawCondvar::notify_one) returns exactly
/// whether a waiter was woken and [`notify_all`](lock_api::RawCondvar::notify_all)
/// exactly how many. A woken waiter re-queues on the mutex: it re-acquires
/// through the mutex's NUMA-ordered slow path (snode queue of its node), so a
/// `notify_all` does not bypass the cohort order.
///
/// # Panics
///
/// Waiting with two different mutexes at the same time on one condvar panics
/// (before the mutex is released).
///
/// # Examples
///
/// Usually through [`Condvar`](crate::Condvar); raw use:
///
/// ```
/// use cst_mutex::{RawCondvar, RawMutex};
/// use lock_api::{RawCondvar as _, RawCondvarTimed as _, RawMutex as _};
/// use std::time::Duration;
///
/// let (m, cv) = (RawMutex::new(), RawCondvar::new());
/// let mut g = m.lock();
/// // SAFETY: we hold `m` with state `g`; nobody notifies, so it times out.
/// let timed_out = unsafe { cv.wait_for(&m, &mut g, &Duration::from_millis(1)) };
/// assert!(timed_out && m.is_locked());
/// // SAFETY: `g` is the state of our (re-)acquisition.
/// unsafe { m.unlock(g) };
/// ```
pub struct RawCondvar {
    /// The mutex the current waiters use; null when nobody waits.
    mutex: AtomicPtr<RawMutex>,
}

impl RawCondvar {
    /// A new condvar (allocates nothing).
    #[cfg(not(numa_loom))]
    pub const fn new() -> Self {
        RawCondvar {
            mutex: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// A new condvar (loom build: loom atomics are not `const`).
    #[cfg(numa_loom)]
    pub fn new() -> Self {
        RawCondvar {
            mutex: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[inline]
    fn key(&self) -> usize {
        self as *const Self as usize
    }

    /// Unlocks `mutex`, waits, re-locks. Returns true on timeout.
    ///
    /// # Safety
    ///
    /// The caller holds `mutex` with the acquisition state `guard`.
    unsafe fn wait_inner(
        &self,
        mutex: &RawMutex,
        guard: &mut MutexGuardState,
        deadline: Option<Instant>,
    ) -> bool {
        let mutex_ptr = mutex as *const RawMutex as *mut RawMutex;
        let mut bad_mutex = false;
        let mut timed_out = false;
        let node = guard.node;
        let validate = || {
            let cur = self.mutex.load(Ordering::Relaxed);
            if cur.is_null() {
                self.mutex.store(mutex_ptr, Ordering::Relaxed);
            } else if cur != mutex_ptr {
                bad_mutex = true;
                return false;
            }
            true
        };
        let before_sleep = || {
            // SAFETY: the caller holds `mutex` with state `guard` (copied here:
            // the state is plain data and is replaced after re-locking).
            unsafe { mutex.unlock(MutexGuardState { node }) };
        };
        let on_timeout = |_key: usize, last: bool| {
            if last {
                self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
            }
            timed_out = true;
        };
        // SAFETY:
        // - the key is this condvar's address, which this crate controls;
        // - `validate` and `on_timeout` only touch atomics and locals: no
        //   unwinding, no parking-lot calls;
        // - `before_sleep` unlocks the mutex, which may call `unpark_one` (allowed)
        //   but never parks or unwinds.
        let r = unsafe {
            sync::park(
                self.key(),
                validate,
                before_sleep,
                on_timeout,
                ParkToken(0),
                deadline,
            )
        };
        if bad_mutex {
            panic!("cst_mutex::Condvar: waited on with two different mutexes at the same time");
        }
        debug_assert!(matches!(r, ParkResult::Unparked(_) | ParkResult::TimedOut));
        *guard = mutex.lock();
        timed_out
    }
}

impl Default for RawCondvar {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for RawCondvar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawCondvar").finish_non_exhaustive()
    }
}

// SAFETY: the waiter is queued on the condvar (under its queue lock, in
// `validate`) before `before_sleep` releases the mutex, so a notification
// after the release finds it; the mutex is re-locked before `wait` returns.
// Nothing in between can panic except the two-mutex check, which panics
// before the mutex is released.
unsafe impl lock_api::RawCondvar for RawCondvar {
    #[cfg(not(numa_loom))]
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawCondvar::new();
    #[cfg(numa_loom)]
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = panic!("RawCondvar::INIT is unavailable under loom; use RawCondvar::new");

    type RawMutex = RawMutex;

    unsafe fn wait(&self, mutex: &RawMutex, guard: &mut MutexGuardState) {
        // SAFETY: forwarded precondition: the caller holds `mutex` with `guard`.
        unsafe { self.wait_inner(mutex, guard, None) };
    }

    fn notify_one(&self) -> bool {
        if self.mutex.load(Ordering::Relaxed).is_null() {
            return false;
        }
        let callback = |r: sync::UnparkResult| {
            if !r.have_more_threads {
                self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
            }
            TOKEN_NORMAL
        };
        // SAFETY: the key is this condvar's address; the callback only stores
        // an atomic (no unwinding, no parking-lot calls).
        unsafe { sync::unpark_one(self.key(), callback) }.unparked_threads != 0
    }

    fn notify_all(&self) -> usize {
        if self.mutex.load(Ordering::Relaxed).is_null() {
            return 0;
        }
        let callback = |_n: usize| {
            self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
            TOKEN_NORMAL
        };
        // SAFETY: the key is this condvar's address; the callback only stores
        // an atomic (no unwinding, no parking-lot calls).
        unsafe { sync::unpark_all_with(self.key(), callback) }
    }
}

// SAFETY: as for `RawCondvar`; a timeout is reported only when the parking
// lot timed the waiter out (it was not notified).
unsafe impl lock_api::RawCondvarTimed for RawCondvar {
    fn checked_duration_to_instant(timeout: &Duration) -> Option<Instant> {
        Instant::now().checked_add(*timeout)
    }

    unsafe fn wait_until(
        &self,
        mutex: &RawMutex,
        guard: &mut MutexGuardState,
        timeout: &Instant,
    ) -> bool {
        // SAFETY: forwarded precondition: the caller holds `mutex` with `guard`.
        unsafe { self.wait_inner(mutex, guard, Some(*timeout)) }
    }
}
