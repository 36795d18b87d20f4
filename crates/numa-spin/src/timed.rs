//! Timed acquisition: `try_lock_for` / `try_lock_until` (`lock_api::RawMutexTimed`).
//!
//! # Why timed waiters do not queue
//!
//! A queued CNA waiter cannot leave the queue: its predecessor writes into its
//! queue node at hand-off, and the secondary queue splices nodes by code (see
//! [`crate::cna`]). Aborting a queued waiter (as MCS-try / CLH-try locks do) would
//! need a second hand-off protocol on the hot path of every waiter. A timed
//! acquisition therefore never enqueues: it polls the fast path
//! ([`RawLock::try_acquire`], the same single attempt as `try_lock`) with
//! back-off ([`Config::spin_budget_ns`] of spinning, then yielding) until it
//! wins or the deadline passes. It uses no queue node, so it never delays the
//! queued waiters, and a timed-out attempt leaves nothing behind.
//!
//! # Fairness
//!
//! Timed waiters honour `NO_STEAL`: once the queue head has waited
//! `steal_bound_ns` (10 us by default), they, like every newcomer, cannot take the
//! lock until the head has, while the head is running (it lifts the flag while it
//! yields its CPU). So a timed waiter can starve while the lock is
//! continuously contended by queued waiters: each release goes to the queue first
//! once the steal bound is reached, and the timed waiter only wins a lock it finds
//! free with stealing allowed. Under strict FIFO (`steal_bound_ns = 0`) it succeeds
//! only at a moment when nobody is queued. It does not get the `lock()` guarantee
//! of eventually acquiring; it gets "acquired, or the deadline passed". Use
//! `lock()` where waiting order matters; `cst-mutex` (whose timed waiters park
//! in the queue) where timed waits under heavy contention are the norm.
//!
//! [`Config::spin_budget_ns`]: crate::Config::spin_budget_ns

use std::time::{Duration, Instant};

use crate::backoff::SpinWait;
use crate::config::Tunables;
use crate::raw_lock::RawLock;

impl<const NUMA: bool, T: Tunables> RawLock<NUMA, T> {
    /// Tries to acquire the lock until `deadline`, without queueing: polls the
    /// fast path with back-off (spinning for the spin budget, then yielding). At
    /// least one attempt is made even if the deadline has passed.
    ///
    /// Returns `true` if the lock was acquired (release it with
    /// [`release`](RawLock::release)). See the [module docs](crate::timed) for why it
    /// does not queue and what that means for fairness.
    #[inline]
    pub fn try_acquire_until(&self, deadline: Instant) -> bool {
        self.try_acquire() || self.try_acquire_until_slow(deadline)
    }

    /// [`try_acquire_until`](RawLock::try_acquire_until) with a timeout in place
    /// of a deadline; a timeout too large to represent as an [`Instant`] waits
    /// without limit (through the queue, as `lock()` does).
    #[inline]
    pub fn try_acquire_for(&self, timeout: Duration) -> bool {
        if self.try_acquire() {
            return true;
        }
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.try_acquire_until_slow(deadline),
            None => {
                self.acquire();
                true
            }
        }
    }

    #[cold]
    fn try_acquire_until_slow(&self, deadline: Instant) -> bool {
        let mut wait = SpinWait::new(self.config().spin_budget_ns);
        loop {
            if Instant::now() >= deadline {
                // One last attempt: the lock may have been released while we
                // slept past the deadline.
                return self.try_acquire();
            }
            wait.snooze();
            // Test-and-test-and-set: read the word before trying the CAS, so
            // polling waiters share the line instead of bouncing it.
            if !self.is_held() && self.try_acquire() {
                return true;
            }
        }
    }
}

// SAFETY: both methods acquire only through `try_acquire` (the Acquire CAS of
// the fast path) or `acquire`, exactly like `lock`/`try_lock`; a `None` result
// leaves no trace in the lock (the timed path never enqueues).
unsafe impl<const NUMA: bool, T: Tunables> lock_api::RawMutexTimed for RawLock<NUMA, T> {
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_for(&self, timeout: Duration) -> Option<Self::Guard> {
        self.try_acquire_for(timeout).then(lock_api::GuardSend::new)
    }

    #[inline]
    fn try_lock_until(&self, deadline: Instant) -> Option<Self::Guard> {
        self.try_acquire_until(deadline)
            .then(lock_api::GuardSend::new)
    }
}
