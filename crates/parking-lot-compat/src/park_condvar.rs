//! A condition variable for any lock_api 0.4 mutex, on `parking_lot_core`: the
//! `Condvar` of the spinlock backends (cst-mutex brings its own).
//!
//! parking_lot 0.12's `Condvar` without its requeue step (which needs the
//! mutex's own parked bit): waiters park on the condvar's address after
//! recording which mutex they use (under the queue lock, so two mutexes are
//! caught), the mutex is released in `before_sleep`, and a woken or timed-out
//! waiter re-locks it through the mutex's ordinary `lock`. `notify_all` wakes
//! every waiter; they then compete for the mutex.

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Instant;

use lock_api04::RawMutex;
use parking_lot_core::{
    DEFAULT_PARK_TOKEN, DEFAULT_UNPARK_TOKEN, FilterOp, ParkResult, UnparkResult,
};

/// See the module docs. One word: the mutex the current waiters use (null when
/// nobody waits), changed only under the condvar's queue lock.
pub(crate) struct ParkCondvar {
    mutex: AtomicPtr<()>,
}

impl ParkCondvar {
    pub(crate) const fn new() -> Self {
        ParkCondvar {
            mutex: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[inline]
    fn key(&self) -> usize {
        ptr::from_ref(self).addr()
    }

    #[inline]
    pub(crate) fn notify_one(&self) -> bool {
        // Relaxed: a waiter stores the pointer while holding the mutex and
        // releases the mutex afterwards; a notifier that changed the condition
        // under the mutex has acquired it since, so it sees the pointer. (A
        // notifier racing without the mutex may miss a waiter, as with any condvar.)
        if self.mutex.load(Ordering::Relaxed).is_null() {
            return false;
        }
        let callback = |r: UnparkResult| {
            if !r.have_more_threads {
                // Relaxed: changed only under the queue lock we hold.
                self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
            }
            DEFAULT_UNPARK_TOKEN
        };
        // SAFETY:
        // - the key is this condvar's address, which this crate controls;
        // - the callback only stores an atomic: no unwinding, no parking-lot calls.
        unsafe { parking_lot_core::unpark_one(self.key(), callback) }.unparked_threads != 0
    }

    #[inline]
    pub(crate) fn notify_all(&self) -> usize {
        // Relaxed: as in `notify_one`.
        if self.mutex.load(Ordering::Relaxed).is_null() {
            return 0;
        }
        let callback = |_r: UnparkResult| {
            // Relaxed: changed only under the queue lock we hold.
            self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
            DEFAULT_UNPARK_TOKEN
        };
        // SAFETY:
        // - the key is this condvar's address, which this crate controls;
        // - the filter returns a constant and the callback only stores an
        //   atomic: no unwinding, no parking-lot calls.
        unsafe { parking_lot_core::unpark_filter(self.key(), |_| FilterOp::Unpark, callback) }
            .unparked_threads
    }

    /// Unlocks `mutex`, waits for a notification or `deadline`, re-locks.
    /// Returns true on timeout. Never returns spuriously.
    ///
    /// # Safety
    ///
    /// The caller holds `mutex`.
    ///
    /// # Panics
    ///
    /// If other threads wait on this condvar with a different mutex (before
    /// `mutex` is released).
    pub(crate) unsafe fn wait<R: RawMutex>(&self, mutex: &R, deadline: Option<Instant>) -> bool {
        let mutex_ptr = ptr::from_ref(mutex).cast::<()>().cast_mut();
        let mut bad_mutex = false;
        let validate = || {
            // Relaxed: changed only under the queue lock, which `park` holds here.
            let cur = self.mutex.load(Ordering::Relaxed);
            if cur.is_null() {
                self.mutex.store(mutex_ptr, Ordering::Relaxed);
            } else if cur != mutex_ptr {
                bad_mutex = true;
                return false;
            }
            true
        };
        // SAFETY: the caller holds `mutex`; the waiter is queued (validate ran
        // under the queue lock) before the release, so a notifier that takes
        // the mutex after it finds the waiter.
        let before_sleep = || unsafe { mutex.unlock() };
        let on_timeout = |_key: usize, was_last: bool| {
            if was_last {
                // Relaxed: under the queue lock.
                self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
            }
        };
        // SAFETY:
        // - the key is this condvar's address, which this crate controls;
        // - `validate` and `on_timeout` only touch atomics and locals: no
        //   unwinding, no parking-lot calls;
        // - `before_sleep` unlocks the mutex: the spinlock backends' unlock
        //   neither parks through `parking_lot_core` nor unwinds.
        let r = unsafe {
            parking_lot_core::park(
                self.key(),
                validate,
                before_sleep,
                on_timeout,
                DEFAULT_PARK_TOKEN,
                deadline,
            )
        };
        if bad_mutex {
            panic!("attempted to use a condition variable with more than one mutex");
        }
        mutex.lock();
        r == ParkResult::TimedOut
    }
}
