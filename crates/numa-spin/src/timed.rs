//! Timed acquisition: `try_lock_for` / `try_lock_until` (`lock_api::RawMutexTimed`).
//!
//! # Why timed waiters do not queue
//!
//! A queued CNA waiter cannot leave the queue: its predecessor writes into its
//! queue node at hand-off, and the secondary queue splices nodes by code (see
//! [`crate::cna`]). Aborting a queued waiter (as MCS-try / CLH-try locks do) would
//! need a second hand-off protocol on the hot path of every waiter. A timed
//! acquisition therefore never enqueues: it polls the lock word with back-off
//! ([`Config::spin_budget_ns`] of spinning, then yielding) until it wins or the
//! deadline passes. It uses no queue node, and a timed-out attempt leaves
//! nothing behind.
//!
//! # Fairness
//!
//! Until it has waited `steal_bound_ns` (10 us by default) a timed waiter is a
//! newcomer: it takes the lock only when it finds it free with stealing allowed
//! (the fast path's attempt, as `try_lock`), so it barges past queued waiters
//! as every newcomer does, and cannot pass a head that has forbidden stealing.
//! Past the bound it forbids stealing itself (`NO_STEAL`, set again whenever
//! it finds it lifted) and takes the word whenever it sees it free, whatever
//! `NO_STEAL` says, unless a queue head has claimed the release. Newcomers'
//! steals (the fast path, `try_lock`) then fail, up to one in flight per
//! running thread.
//!
//! A queue head that has waited its own steal bound claims the next release
//! (`HEAD_CLAIM`, set with `NO_STEAL`, see [`crate::raw_lock`]), and the queue
//! comes first: a timed waiter that sees the claim leaves the free word to
//! the head, and takes it only as any arrival may, once it has stayed free
//! for the steal bound (plus five naps while the head naps) and so shows the
//! head is off its CPU (`node::steal_past_absent_head`). So timed waiters are
//! inside the queue head's bound (`RawLock`'s fairness docs): each takes at
//! most one release after the claim, the one its attempt was in flight for,
//! plus the releases a head off its CPU leaves.
//!
//! What a timed waiter gets in turn: the releases that come while no queue
//! head claims one (the queue is empty, or its head has waited less than the
//! steal bound), which it shares with the threads the mark lets through (the
//! queue head, other timed waiters past their bound, arrivals past an absent
//! head, waits without a queue node). Beside `lock()` callers that keep the
//! queue non-empty with critical sections longer than the steal bound, every
//! release is claimed before it comes, and a timed waiter waits until the
//! queue drains or its deadline passes: `lock()` callers are served first. A
//! timed waiter descheduled while it forbids stealing is treated like an
//! absent queue head: arrivals take a lock they have seen free for the steal
//! bound. It lifts the mark when it leaves (acquired or timed out) if nobody
//! is queued; a queue head lifts it when it acquires. Strict FIFO
//! (`steal_bound_ns = 0`) keeps timed waiters newcomers: they succeed only at
//! a moment when nobody is queued, since strict FIFO admits no barging. With
//! `steal_bound_ns = u64::MAX` nobody forbids stealing and a timed waiter can
//! starve.
//!
//! [`Config::spin_budget_ns`]: crate::Config::spin_budget_ns

use std::time::Duration;
#[cfg(not(numa_loom))]
use std::time::Instant;

use crate::backoff::SpinWait;
use crate::config::{Config, Tunables};
use crate::hq::RawHqLock;
use crate::raw_lock::RawLock;
use crate::sync::{AtomicU32, Ordering};
use crate::word::{HEAD_CLAIM, NO_STEAL, UNLOCKED};

/// What the timed polling needs of a raw lock: its fast path's single attempt,
/// its blocking acquisition (for a timeout too large to represent), its lock
/// and tail words, and its tunables.
pub(crate) trait Poll {
    /// The fast path's single attempt (`try_lock`).
    fn try_once(&self) -> bool;
    /// The queued acquisition (`lock`).
    fn acquire_queued(&self);
    /// The lock word (`UNLOCKED`, `LOCKED`, `HANDED`, see [`crate::raw_lock`]).
    fn locked(&self) -> &AtomicU32;
    /// The tail word, whose bit 0 is `NO_STEAL` and bit 1 `HEAD_ASLEEP`.
    fn tail(&self) -> &AtomicU32;
    /// The lock's tunables.
    fn tunables(&self) -> &Config;
}

impl<const NUMA: bool, T: Tunables> Poll for RawLock<NUMA, T> {
    fn try_once(&self) -> bool {
        self.try_acquire()
    }
    fn acquire_queued(&self) {
        self.acquire();
    }
    fn locked(&self) -> &AtomicU32 {
        &self.locked
    }
    fn tail(&self) -> &AtomicU32 {
        &self.tail
    }
    fn tunables(&self) -> &Config {
        self.config()
    }
}

impl<T: Tunables> Poll for RawHqLock<T> {
    fn try_once(&self) -> bool {
        self.try_acquire()
    }
    fn acquire_queued(&self) {
        self.acquire();
    }
    fn locked(&self) -> &AtomicU32 {
        &self.locked
    }
    fn tail(&self) -> &AtomicU32 {
        &self.tail
    }
    fn tunables(&self) -> &Config {
        self.config()
    }
}

/// `try_acquire_until` of every raw lock: one attempt, then polling.
#[cfg(not(numa_loom))]
#[inline]
pub(crate) fn try_until(lock: &impl Poll, deadline: Instant) -> bool {
    lock.try_once() || poll_until(lock, || Instant::now() >= deadline, false)
}

/// `try_acquire_for` of every raw lock; a timeout too large to represent as an
/// [`Instant`] waits without limit, through the queue.
///
/// Under loom the timeout runs on the per-thread logical clock of
/// `sync::now_ns` (each read advances it), so whether and when a model's timed
/// waiter gives up is a deterministic function of its schedule.
#[inline]
pub(crate) fn try_for(lock: &impl Poll, timeout: Duration) -> bool {
    if lock.try_once() {
        return true;
    }
    #[cfg(not(numa_loom))]
    let expired = Instant::now()
        .checked_add(timeout)
        .map(|deadline| move || Instant::now() >= deadline);
    #[cfg(numa_loom)]
    let expired = u64::try_from(timeout.as_nanos())
        .ok()
        .and_then(|ns| crate::sync::now_ns().checked_add(ns))
        .map(|deadline| move || crate::sync::now_ns() >= deadline);
    match expired {
        Some(expired) => poll_until(lock, expired, false),
        None => {
            lock.acquire_queued();
            true
        }
    }
}

/// Polls the lock with back-off until it wins or `expired()` (the deadline has
/// passed); past the steal bound forbids stealing and takes any free word (see
/// the [module docs](self)).
#[cold]
pub(crate) fn poll_until(lock: &impl Poll, expired: impl Fn() -> bool, first: bool) -> bool {
    let cfg = lock.tunables();
    let bound = cfg.steal_bound_ns;
    let claims = bound != 0 && bound != u64::MAX;
    let start = crate::sync::now_ns();
    let mut claim = Claim {
        tail: lock.tail(),
        held: false,
        first,
    };
    let mut wait = SpinWait::new(cfg.spin_budget_ns);
    loop {
        if expired() {
            // One last attempt: the lock may have been released while we
            // slept past the deadline.
            return claim.attempt(lock) || lock.try_once();
        }
        wait.snooze();
        if claims && crate::sync::now_ns().saturating_sub(start) >= bound {
            claim.assert();
        }
        // Test-and-test-and-set: read the word before trying the CAS, so
        // polling waiters share the line instead of bouncing it.
        if lock.locked().load(Ordering::Relaxed) == UNLOCKED
            && (claim.attempt(lock) || lock.try_once())
        {
            return true;
        }
    }
}

/// A timed waiter's `NO_STEAL` mark: set once it has waited the steal bound,
/// lifted when it leaves if nobody is queued.
struct Claim<'a> {
    tail: &'a AtomicU32,
    held: bool,
    /// A sleeper woken outside the queue (`crate::blocking`): past its bound
    /// it comes before a queue head's claim too.
    first: bool,
}

impl Claim<'_> {
    /// Forbids stealing, again if the mark was lifted meanwhile (by a queue
    /// head's acquisition, or by a queue that emptied).
    fn assert(&mut self) {
        // Relaxed: a fairness hint, as everywhere (see `node::try_steal`).
        if self.tail.load(Ordering::Relaxed) & NO_STEAL == 0 {
            self.tail.fetch_or(NO_STEAL, Ordering::Relaxed);
        }
        self.held = true;
    }

    /// With the mark set, takes a free word whatever `NO_STEAL` says, unless
    /// a queue head past its own bound has claimed the release
    /// (`HEAD_CLAIM`): then the head comes first, and we take the word only
    /// as an arrival would, once it has stayed free long enough to show the
    /// head is not running ([`steal_past_absent_head`]).
    ///
    /// [`steal_past_absent_head`]: crate::node::steal_past_absent_head
    fn attempt(&self, lock: &impl Poll) -> bool {
        if !self.held {
            return false;
        }
        // Relaxed: a fairness hint; the word's CAS acquires. A claim set just
        // after this load lets this one attempt through: one in flight per
        // timed waiter, as for any thread that read the flags before the mark.
        if !self.first && lock.tail().load(Ordering::Relaxed) & HEAD_CLAIM != 0 {
            return crate::node::steal_past_absent_head(
                lock.tail(),
                lock.locked(),
                lock.tunables(),
            );
        }
        crate::node::take_free_word(lock.locked())
    }
}

impl Drop for Claim<'_> {
    /// Lifts the mark if the tail holds nothing else (nobody is queued, so no
    /// queue head relies on it). Otherwise the queue head lifts it when it
    /// acquires (or the queue's last waiter clears it with the queue).
    fn drop(&mut self) {
        if self.held {
            // Relaxed: a hint.
            let _ = self
                .tail
                .compare_exchange(NO_STEAL, 0, Ordering::Relaxed, Ordering::Relaxed);
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
    #[cfg(not(numa_loom))]
    #[inline]
    pub fn try_acquire_until(&self, deadline: Instant) -> bool {
        crate::glue::model_route!(crate::model::try_acquire_timed(&self.tail));
        try_until(self, deadline)
    }

    /// [`try_acquire_until`](RawLock::try_acquire_until) with a timeout in place
    /// of a deadline; a timeout too large to represent as an [`Instant`] waits
    /// without limit (through the queue, as `lock()` does).
    #[inline]
    pub fn try_acquire_for(&self, timeout: Duration) -> bool {
        crate::glue::model_route!(crate::model::try_acquire_timed(&self.tail));
        try_for(self, timeout)
    }
}

impl<T: Tunables> RawHqLock<T> {
    /// Tries to acquire the lock until `deadline`, without queueing, as
    /// [`RawLock::try_acquire_until`] (same fairness: see the
    /// [module docs](crate::timed)).
    #[cfg(not(numa_loom))]
    #[inline]
    pub fn try_acquire_until(&self, deadline: Instant) -> bool {
        crate::glue::model_route!(crate::model::try_acquire_timed(&self.tail));
        try_until(self, deadline)
    }

    /// [`try_acquire_until`](RawHqLock::try_acquire_until) with a timeout, as
    /// [`RawLock::try_acquire_for`].
    #[inline]
    pub fn try_acquire_for(&self, timeout: Duration) -> bool {
        crate::glue::model_route!(crate::model::try_acquire_timed(&self.tail));
        try_for(self, timeout)
    }
}
