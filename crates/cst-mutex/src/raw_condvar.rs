//! [`RawCondvar`]: the condition variable of [`RawMutex`],
//! which requeues its waiters onto the mutex, as ShflLock's blocking lock
//! does (Kashyap et al., SOSP 2019, section 4.2).

use crate::RawMutex;
use crate::raw_mutex::{LAST_SLEEPER, MORE_SLEEPERS};
use crate::sync::{self, AtomicPtr, AtomicUsize, Ordering, ParkResult, ParkToken, RequeueOp};
use std::ptr;
#[cfg(not(numa_loom))]
use std::time::Duration;
use std::time::Instant;

/// A condition variable for [`RawMutex`]: two words
/// (16 bytes); waiters park on its address through `parking_lot_core`.
///
/// `notify_all` wakes one waiter and moves the others, still asleep, onto
/// the mutex's address, where they are the mutex's sleepers outside the
/// queue (see [`numa_spin::blocking`]): the woken waiter marks the mutex for
/// them, so each release of the mutex wakes the next one, and each woken
/// waiter enters the mutex's queue (no thundering herd, and no barging race
/// a woken waiter can keep losing). `notify_one` wakes one waiter, which
/// then takes the mutex through its queue.
///
/// Waits return after a notification or a timeout, and spuriously only
/// when the wait runs in a signal handler that interrupted a wait of the
/// same thread (it cannot sleep there, so it reports a wake-up).
/// `notify_one` returns whether a waiter was woken and `notify_all` how many
/// were woken or moved.
///
/// # Panics
///
/// Waiting with two different mutexes at the same time on one condvar panics
/// (before the mutex is released).
pub struct RawCondvar {
    /// The mutex the current waiters use; null when nobody waits.
    pub(crate) mutex: AtomicPtr<RawMutex>,
    /// Threads parked on the condvar. Changed only under its queue lock.
    pub(crate) waiters: AtomicUsize,
}

impl RawCondvar {
    /// A new condvar (allocates nothing).
    #[cfg(not(numa_loom))]
    pub const fn new() -> Self {
        RawCondvar {
            mutex: AtomicPtr::new(ptr::null_mut()),
            waiters: AtomicUsize::new(0),
        }
    }

    /// A new condvar (loom build: loom atomics are not `const`).
    #[cfg(numa_loom)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        RawCondvar {
            mutex: AtomicPtr::new(ptr::null_mut()),
            waiters: AtomicUsize::new(0),
        }
    }

    fn key(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Unlocks `mutex`, waits, re-locks. Returns true on a timeout.
    ///
    /// # Safety
    ///
    /// The caller holds `mutex`.
    unsafe fn wait_inner(&self, mutex: &RawMutex, deadline: Option<Instant>) -> bool {
        let mutex_ptr = std::ptr::from_ref(mutex).cast_mut();
        let mut bad_mutex = false;
        let mut timed_out = false;
        let validate = || {
            // Relaxed: the condvar's fields change only under its queue lock.
            let cur = self.mutex.load(Ordering::Relaxed);
            if cur.is_null() {
                self.mutex.store(mutex_ptr, Ordering::Relaxed);
            } else if cur != mutex_ptr {
                bad_mutex = true;
                return false;
            }
            self.waiters.fetch_add(1, Ordering::Relaxed);
            true
        };
        // SAFETY: the caller holds `mutex`; we re-lock it before returning.
        let before_sleep = || unsafe { mutex.release() };
        let on_timeout = |key: usize, last: bool| {
            if key == self.key() {
                // Relaxed: under the condvar's queue lock.
                self.waiters.fetch_sub(1, Ordering::Relaxed);
                if last {
                    self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
                }
                timed_out = true;
            }
            // Else `notify_all` had moved us onto the mutex (so we were
            // notified): the mutex's mark stands for the sleepers left.
        };
        // SAFETY: the keys are this condvar's address and, where a
        // `notify_all` moves us, the mutex's: both this crate's; `validate`
        // and `on_timeout` touch only atomics and locals (no unwinding, no
        // parking-lot calls); `before_sleep` releases the mutex, which may
        // call `unpark_one` (allowed) but never parks or unwinds.
        let r = unsafe {
            sync::park_requeueable(
                self.key(),
                mutex.key(),
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
        if matches!(r, ParkResult::Unparked(_)) {
            // A notify woke us (and marked the mutex woken): we run.
            mutex.woken_ran();
        }
        let must_mark = matches!(r, ParkResult::Unparked(t) if t == MORE_SLEEPERS);
        mutex.acquire_woken(must_mark);
        timed_out
    }
}

impl RawCondvar {
    /// The models' timed wait: as `wait_for`, with a timeout that loom's or
    /// shuttle's park may let expire at any point once the waiter is queued
    /// (there is no clock in a model). Returns true on a timeout.
    ///
    /// # Safety
    ///
    /// The caller holds `mutex`.
    #[cfg(numa_loom)]
    #[doc(hidden)]
    pub unsafe fn wait_for_model(&self, mutex: &RawMutex) -> bool {
        // SAFETY: forwarded precondition.
        unsafe { self.wait_inner(mutex, Some(Instant::now())) }
    }
}

#[cfg(not(numa_loom))]
impl Default for RawCondvar {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for RawCondvar {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
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

    unsafe fn wait(&self, mutex: &RawMutex, _guard: &mut lock_api::GuardSend) {
        crate::model_route!({
            // SAFETY: forwarded precondition: the caller holds `mutex`,
            // which the wait re-locks before it returns.
            let unlock = || unsafe { mutex.release() };
            crate::model::condvar(&self.waiters).wait(unlock, || mutex.acquire(), false);
        });
        // SAFETY: forwarded precondition: the caller holds `mutex`.
        unsafe { self.wait_inner(mutex, None) };
    }

    fn notify_one(&self) -> bool {
        crate::model_route!(crate::model::condvar(&self.waiters).notify(1) != 0);
        // Relaxed: a first look; the queue lock orders the real check.
        if self.mutex.load(Ordering::Relaxed).is_null() {
            return false;
        }
        let callback = |r: sync::UnparkResult| {
            if r.unparked_threads != 0 {
                self.waiters.fetch_sub(1, Ordering::Relaxed);
                // The woken waiter will take the mutex: mark it woken until
                // the waiter runs.
                // SAFETY: a waiter was parked on this condvar with this mutex
                // (the field is set while any waits, under the queue lock we
                // hold), and it borrows the mutex until it has re-locked it,
                // so the mutex is alive.
                if let Some(m) = unsafe { self.mutex.load(Ordering::Relaxed).as_ref() } {
                    m.note_woken();
                }
            }
            if !r.have_more_threads {
                self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
            }
            LAST_SLEEPER
        };
        // SAFETY: the key is this condvar's address; the callback only touches
        // atomics (no unwinding, no parking-lot calls).
        unsafe { sync::unpark_one(self.key(), callback) }.unparked_threads != 0
    }

    fn notify_all(&self) -> usize {
        crate::model_route!(crate::model::condvar(&self.waiters).notify(usize::MAX));
        // Relaxed: a first look; `validate` checks again under the queue lock.
        let m = self.mutex.load(Ordering::Relaxed);
        if m.is_null() {
            return 0;
        }
        // The mutex's key is its address: `m` may already be gone if every
        // waiter left, and it is never dereferenced here (validate checks
        // under the condvar's queue lock that waiters still use it).
        let to = m as usize;
        let validate = || {
            if self.mutex.load(Ordering::Relaxed) != m || self.waiters.load(Ordering::Relaxed) == 0
            {
                return RequeueOp::Abort;
            }
            self.waiters.store(0, Ordering::Relaxed);
            self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
            RequeueOp::UnparkOneRequeueRest
        };
        // The waiter woken first owes the others the mutex's mark: it marks
        // the mutex (held, most likely by us) before it queues for it.
        let callback = |_op: RequeueOp, r: sync::UnparkResult| {
            if r.unparked_threads != 0 {
                // The woken waiter will take the mutex: mark it woken until
                // it runs.
                // SAFETY: `validate` found waiters parked with `m` under the
                // queue locks we hold; the woken one borrows the mutex until
                // it has re-locked it, so `m` is alive.
                unsafe { &*m }.note_woken();
            }
            if r.requeued_threads != 0 {
                MORE_SLEEPERS
            } else {
                LAST_SLEEPER
            }
        };
        // SAFETY: both keys belong to this crate (this condvar's address, the
        // mutex's); `validate` and `callback` touch only atomics (no
        // unwinding, no parking-lot calls).
        let r = unsafe { sync::unpark_requeue(self.key(), to, validate, callback) };
        r.unparked_threads + r.requeued_threads
    }
}

// SAFETY: as for `RawCondvar`; a timeout is reported only when the parking
// lot timed the waiter out on the condvar (it was not notified).
#[cfg(not(numa_loom))]
unsafe impl lock_api::RawCondvarTimed for RawCondvar {
    fn checked_duration_to_instant(timeout: &Duration) -> Option<Instant> {
        Instant::now().checked_add(*timeout)
    }

    unsafe fn wait_until(
        &self,
        mutex: &RawMutex,
        _guard: &mut lock_api::GuardSend,
        timeout: &Instant,
    ) -> bool {
        crate::model_route!({
            // SAFETY: forwarded precondition: the caller holds `mutex`,
            // which the wait re-locks before it returns.
            let unlock = || unsafe { mutex.release() };
            crate::model::condvar(&self.waiters).wait(unlock, || mutex.acquire(), true)
        });
        // SAFETY: forwarded precondition: the caller holds `mutex`.
        unsafe { self.wait_inner(mutex, Some(*timeout)) }
    }
}
