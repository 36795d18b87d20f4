//! [`RawCondvar`]: a condition variable for [`RawMutex`].

use crate::cohort::{
    PARKED_MAX, PARKED_ONE, REQUEUE_NODE, TOKEN_HANDOFF, TOKEN_NORMAL, parked_count,
};
use crate::raw_mutex::{MutexGuardState, RawMutex};
use crate::sync::{self, AtomicPtr, AtomicUsize, Ordering, ParkResult, ParkToken, RequeueOp};
use lock_api::RawMutex as _;
use std::ptr;
use std::time::{Duration, Instant};

/// A condition variable for [`RawMutex`]: two words (16 bytes), waiters park
/// on its address through `parking_lot_core`.
///
/// Waits never return spuriously: a wait returns after a notification or a
/// timeout. [`notify_one`](lock_api::RawCondvar::notify_one) returns exactly
/// whether a waiter was woken and [`notify_all`](lock_api::RawCondvar::notify_all)
/// exactly how many. A wait re-queues on the mutex: `notify_all` wakes one
/// waiter and moves the others, still asleep, onto the mutex's requeue queue
/// (`parking_lot_core::unpark_requeue`), from which mutex unlocks wake them
/// one at a time (no thundering herd). They count as one more member of the
/// mutex's cohort order (a pseudo-snode of the mutex, allocated by the first
/// wait), so they are served in turn with the per-node queues, under the same
/// batch bound and eventual fairness. `notify_one` wakes one waiter, which
/// re-acquires through the mutex's NUMA-ordered slow path. If the mutex's
/// parked count has no room for the requeued waiters (see the crate's
/// limits), `notify_all` wakes them all instead.
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
/// use cst_mutex::lock_api::{RawCondvar as _, RawCondvarTimed as _, RawMutex as _};
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
    pub fn new() -> Self {
        RawCondvar {
            mutex: AtomicPtr::new(ptr::null_mut()),
            waiters: AtomicUsize::new(0),
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
        // The mutex's requeue pseudo-snode, where `notify_all` counts us if it
        // moves us onto the mutex. Allocated here, outside any queue lock,
        // while we hold the mutex (so `notify_all` finds it: it only runs
        // after our validate, under the condvar's queue lock).
        // Pinned until we hold the mutex again, so it stays attached while
        // `notify_all` may count us in it.
        let requeued = mutex.cohort.snodes.pin(REQUEUE_NODE);
        let validate = || {
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
        let before_sleep = || {
            // SAFETY: the caller holds `mutex` with state `guard` (copied here:
            // the state is plain data and is replaced after re-locking).
            unsafe { mutex.unlock(MutexGuardState { node }) };
        };
        let on_timeout = |key: usize, last: bool| {
            if key == self.key() {
                self.waiters.fetch_sub(1, Ordering::Relaxed);
                if last {
                    self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
                }
                timed_out = true;
            } else {
                // Requeued onto the mutex (so notified, not timed out): leave
                // its parked counts, under its requeue queue's lock, snode
                // first (as every waiter leaving does). Relaxed: both are
                // changed under this queue lock or by RMWs on the same word.
                requeued.hot.parked.fetch_sub(1, Ordering::Relaxed);
                mutex.cohort.state.fetch_sub(PARKED_ONE, Ordering::Relaxed);
            }
        };
        // SAFETY:
        // - the key is this condvar's address, and the requeue key the
        //   mutex's (where a notify moves us), both keys this crate controls;
        // - `validate` and `on_timeout` only touch atomics and locals: no
        //   unwinding, no parking-lot calls;
        // - `before_sleep` unlocks the mutex, which may call `unpark_one` (allowed)
        //   but never parks or unwinds.
        let r = unsafe {
            sync::park_requeueable(
                self.key(),
                mutex.cohort.requeue_key(),
                validate,
                before_sleep,
                on_timeout,
                ParkToken(0),
                deadline,
            )
        };
        if bad_mutex {
            requeued.unpin();
            panic!("cst_mutex::Condvar: waited on with two different mutexes at the same time");
        }
        match r {
            // A mutex unlock handed the mutex to us in the requeue queue.
            ParkResult::Unparked(TOKEN_HANDOFF) => *guard = MutexGuardState { node },
            _ => *guard = mutex.lock(),
        }
        requeued.unpin();
        // We hold the mutex: give its snodes back if nobody else uses them.
        mutex.cohort.detach_idle();
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
            if r.unparked_threads != 0 {
                self.waiters.fetch_sub(1, Ordering::Relaxed);
            }
            if !r.have_more_threads {
                self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
            }
            TOKEN_NORMAL
        };
        // SAFETY: the key is this condvar's address; the callback only touches
        // atomics (no unwinding, no parking-lot calls).
        unsafe { sync::unpark_one(self.key(), callback) }.unparked_threads != 0
    }

    fn notify_all(&self) -> usize {
        let m = self.mutex.load(Ordering::Relaxed);
        if m.is_null() {
            return 0;
        }
        // The requeue key is computed from the address only: `m` may already
        // be gone if every waiter left; it is dereferenced only in `validate`,
        // after checking under the condvar's queue lock that waiters (which
        // borrow the mutex) still use it.
        let to = m as usize + 3;
        // Set when the mutex cannot count the requeued waiters: then all are
        // woken instead, after the requeue was aborted.
        let mut wake_all = false;
        let validate = || {
            if self.mutex.load(Ordering::Relaxed) != m {
                return RequeueOp::Abort;
            }
            let n = self.waiters.load(Ordering::Relaxed);
            if n == 0 {
                return RequeueOp::Abort;
            }
            // SAFETY: `n` threads are parked in `wait` on this condvar with a
            // borrow of `*m`, so the mutex is alive while we hold the queue lock.
            let mutex = unsafe { &*m };
            debug_assert_eq!(mutex.cohort.requeue_key(), to);
            let moved = n - 1;
            if moved != 0 {
                // Each waiter allocated the pseudo-snode before it queued here.
                let Some(rq) = mutex.cohort.snodes.find(REQUEUE_NODE) else {
                    wake_all = true;
                    return RequeueOp::Abort;
                };
                // Count the threads about to be requeued as parked on the
                // mutex, in the pseudo-snode first and then in the word (an
                // unlocker that sees the word's count then finds the snode's):
                // an unlock that picks the pseudo-snode unparks from the
                // requeue queue, whose lock we hold, so it finds them. The
                // parked count must not overflow into the reader bits.
                // Relaxed: `rq.hot.parked` changes only under the requeue queue lock.
                rq.hot.parked.fetch_add(moved, Ordering::Relaxed);
                let state = &mutex.cohort.state;
                // Relaxed: a first guess for the CAS.
                let mut s = state.load(Ordering::Relaxed);
                loop {
                    if parked_count(s) + moved > PARKED_MAX {
                        rq.hot.parked.fetch_sub(moved, Ordering::Relaxed);
                        wake_all = true;
                        return RequeueOp::Abort;
                    }
                    // Relaxed, as in `park_on`'s validate: a raise
                    // of the parked count on the word every unlock RMWs
                    // (coherence orders them); the pseudo-snode count is a hint
                    // the unlocker retries on, and the requeued threads take the
                    // mutex through its own Acquire CAS or a handoff unpark.
                    match state.compare_exchange_weak(
                        s,
                        s + moved * PARKED_ONE,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => break,
                        Err(x) => s = x,
                    }
                }
            }
            // Relaxed: the condvar's fields change only under its queue lock.
            self.waiters.store(0, Ordering::Relaxed);
            self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
            RequeueOp::UnparkOneRequeueRest
        };
        let callback = |_op: RequeueOp, r: sync::UnparkResult| {
            debug_assert!(r.unparked_threads + r.requeued_threads == 0 || r.unparked_threads == 1);
            TOKEN_NORMAL
        };
        // SAFETY:
        // - both keys belong to this crate (this condvar's address, the mutex's
        //   requeue key);
        // - `validate` and `callback` only touch atomics: no unwinding, no
        //   parking-lot calls.
        let r = unsafe { sync::unpark_requeue(self.key(), to, validate, callback) };
        if wake_all {
            // The mutex's parked count is full: wake every waiter to re-lock
            // it on its own (each then yields until the count has room).
            let callback = |_n: usize| {
                // Relaxed: the condvar's fields change only under its queue lock.
                self.waiters.store(0, Ordering::Relaxed);
                self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
                TOKEN_NORMAL
            };
            // SAFETY:
            // - the key is this condvar's address, which this crate controls;
            // - the callback only stores atomics: no unwinding, no parking-lot calls.
            return unsafe { sync::unpark_all_with(self.key(), callback) };
        }
        r.unparked_threads + r.requeued_threads
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
