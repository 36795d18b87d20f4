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
use crate::hq::RawHqLock;
use crate::raw_lock::RawLock;

/// What the timed polling needs of a raw lock: its fast path's single attempt,
/// its blocking acquisition (for a timeout too large to represent), whether it
/// is held, and its spin budget.
pub(crate) trait Poll {
    /// The fast path's single attempt (`try_lock`).
    fn try_once(&self) -> bool;
    /// The queued acquisition (`lock`).
    fn acquire_queued(&self);
    /// A snapshot of the lock word.
    fn held(&self) -> bool;
    /// [`Config::spin_budget_ns`](crate::Config::spin_budget_ns) of the lock.
    fn spin_budget_ns(&self) -> u64;
}

impl<const NUMA: bool, T: Tunables> Poll for RawLock<NUMA, T> {
    fn try_once(&self) -> bool {
        self.try_acquire()
    }
    fn acquire_queued(&self) {
        self.acquire();
    }
    fn held(&self) -> bool {
        self.is_held()
    }
    fn spin_budget_ns(&self) -> u64 {
        self.config().spin_budget_ns
    }
}

impl<T: Tunables> Poll for RawHqLock<T> {
    fn try_once(&self) -> bool {
        self.try_acquire()
    }
    fn acquire_queued(&self) {
        self.acquire();
    }
    fn held(&self) -> bool {
        self.is_held()
    }
    fn spin_budget_ns(&self) -> u64 {
        self.config().spin_budget_ns
    }
}

/// `try_acquire_until` of every raw lock: one attempt, then polling.
#[inline]
pub(crate) fn try_until(lock: &impl Poll, deadline: Instant) -> bool {
    lock.try_once() || poll_until(lock, deadline)
}

/// `try_acquire_for` of every raw lock; a timeout too large to represent as an
/// [`Instant`] waits without limit, through the queue.
#[inline]
pub(crate) fn try_for(lock: &impl Poll, timeout: Duration) -> bool {
    if lock.try_once() {
        return true;
    }
    match Instant::now().checked_add(timeout) {
        Some(deadline) => poll_until(lock, deadline),
        None => {
            lock.acquire_queued();
            true
        }
    }
}

/// Polls the fast path with back-off until it wins or `deadline` passes.
#[cold]
fn poll_until(lock: &impl Poll, deadline: Instant) -> bool {
    let mut wait = SpinWait::new(lock.spin_budget_ns());
    loop {
        if Instant::now() >= deadline {
            // One last attempt: the lock may have been released while we
            // slept past the deadline.
            return lock.try_once();
        }
        wait.snooze();
        // Test-and-test-and-set: read the word before trying the CAS, so
        // polling waiters share the line instead of bouncing it.
        if !lock.held() && lock.try_once() {
            return true;
        }
    }
}

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
        try_until(self, deadline)
    }

    /// [`try_acquire_until`](RawLock::try_acquire_until) with a timeout in place
    /// of a deadline; a timeout too large to represent as an [`Instant`] waits
    /// without limit (through the queue, as `lock()` does).
    #[inline]
    pub fn try_acquire_for(&self, timeout: Duration) -> bool {
        try_for(self, timeout)
    }
}

impl<T: Tunables> RawHqLock<T> {
    /// Tries to acquire the lock until `deadline`, without queueing, as
    /// [`RawLock::try_acquire_until`] (same fairness: see the
    /// [module docs](crate::timed)).
    #[inline]
    pub fn try_acquire_until(&self, deadline: Instant) -> bool {
        try_until(self, deadline)
    }

    /// [`try_acquire_until`](RawHqLock::try_acquire_until) with a timeout, as
    /// [`RawLock::try_acquire_for`].
    #[inline]
    pub fn try_acquire_for(&self, timeout: Duration) -> bool {
        try_for(self, timeout)
    }
}
