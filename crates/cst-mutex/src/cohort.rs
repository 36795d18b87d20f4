//! The cohort lock state machine shared by [`RawMutex`](crate::RawMutex) and
//! the writer side of [`RawRwLock`](crate::RawRwLock).
//!
//! # State word
//!
//! | bits | name | meaning |
//! | --- | --- | --- |
//! | 0 | `LOCKED_BIT` | the (writer) lock is held |
//! | 1 | `WRITER_BIT` | `RawRwLock` only: a writer holds or drains the lock; readers wait |
//! | 2 | `READERS_PARKED_BIT` | `RawRwLock` only: readers are parked on the lock |
//! | 3 | `NODE_READERS_BIT` | `RawRwLock` only: readers have used snode counters (sticky) |
//! | 4 .. `HALF` | parked count | threads parked on some snode of this lock |
//! | `HALF` .. | fast readers | `RawRwLock` only: readers counted in the word itself |
//!
//! `HALF` is half the word (32 on 64-bit targets). The parked count is exact:
//! it changes only inside the parking lot's queue lock of the snode the thread
//! parks on (validate, unpark callback, timeout callback), so an unlocker
//! that sees a count of 0 knows nobody sleeps and releases with one CAS.
//!
//! # Algorithm (CST, Kashyap, Min, Kim, USENIX ATC 2017, adapted)
//!
//! * Fast path: CAS `LOCKED_BIT` in; unlock CASes it out when nobody is parked.
//! * Slow path: the waiter gets (allocates on first use) the snode of its node.
//!   It spins (bounded, [`SPIN_ROUNDS`]) as an *active waiter* (counted in its
//!   snode) while the lock is likely to come soon, and parks on its snode's
//!   queue otherwise: after the bounded spin, or at once when the lock has at
//!   least as many parked waiters as the machine has CPUs (a thread just woken
//!   to compete still spins once through).
//! * Unlock with parked waiters: if some node has an active waiter, the lock is
//!   released to it (it is running; one RMW, no wake-up) and, if that was the
//!   last active waiter, a parked waiter of the target snode is woken ahead of
//!   need to spin for the next round. The target snode follows the cohort
//!   order: the unlocker's own node while its batch is below the batch bound,
//!   then the next snode (cyclic list order) with parked waiters. With no
//!   active waiter the lock is released
//!   (barging: any running thread may take it) and one parked waiter of the
//!   target is woken to compete. A parked waiter of a node whose fairness
//!   deadline (0.5 ms by default, parking_lot's eventual fairness) has passed,
//!   or any waiter on `unlock_fair`, gets a direct handoff instead: the lock
//!   stays locked and ownership passes to it.

use crate::config;
use crate::snode::{Snode, SnodeList};
use crate::sync::{self, AtomicUsize, Ordering, ParkResult, ParkToken, UnparkToken, fence};
use std::time::Instant;

pub(crate) const LOCKED_BIT: usize = 1;
pub(crate) const WRITER_BIT: usize = 2;
pub(crate) const READERS_PARKED_BIT: usize = 4;
pub(crate) const NODE_READERS_BIT: usize = 8;
pub(crate) const PARKED_ONE: usize = 16;
pub(crate) const HALF: u32 = usize::BITS / 2;
pub(crate) const PARKED_MASK: usize = ((1usize << HALF) - 1) & !15;
pub(crate) const READER_ONE: usize = 1usize << HALF;
pub(crate) const READER_MASK: usize = !((1usize << HALF) - 1);

/// Unpark token: the woken thread must compete for the lock (barging).
pub(crate) const TOKEN_NORMAL: UnparkToken = UnparkToken(0);
/// Unpark token: the lock was handed to the woken thread; it holds it now.
pub(crate) const TOKEN_HANDOFF: UnparkToken = UnparkToken(1);

/// Bounded spinning rounds before parking: rounds 1-3 pause 2, 4, 8 times,
/// rounds 4-10 yield the CPU (parking_lot_core's `SpinWait` schedule, which
/// is about one time-slice-free microsecond of spinning plus 7 yields).
#[cfg_attr(numa_loom, allow(dead_code))]
pub(crate) const SPIN_ROUNDS: u32 = 10;

/// [`SPIN_ROUNDS`], or under loom the per-thread value the model chose (0 by
/// default: loom runs the holder as soon as a waiter yields, so a spinning
/// waiter would never reach the parking paths).
#[inline]
pub(crate) fn spin_rounds() -> u32 {
    #[cfg(not(numa_loom))]
    {
        SPIN_ROUNDS
    }
    #[cfg(numa_loom)]
    {
        sync::loom_spin_rounds()
    }
}

/// One round of bounded spinning: rounds 1-3 pause 2, 4 and 8 times, later
/// rounds yield the CPU.
#[inline]
pub(crate) fn spin_round(round: u32) {
    if cfg!(not(numa_loom)) && round <= 3 {
        for _ in 0..(1u32 << round) {
            sync::spin_loop();
        }
    } else {
        sync::yield_now();
    }
}

/// The node of the acquiring thread, or [`UNKNOWN_NODE`] when taken on the
/// fast path (looked up lazily in the slow unlock).
pub(crate) const UNKNOWN_NODE: usize = usize::MAX;

#[inline]
pub(crate) fn parked_count(s: usize) -> usize {
    (s & PARKED_MASK) / PARKED_ONE
}

/// The lock word plus the lazily built snode list: 2 words.
pub(crate) struct Cohort {
    pub(crate) state: AtomicUsize,
    pub(crate) snodes: SnodeList,
}

impl Cohort {
    #[cfg(not(numa_loom))]
    pub(crate) const fn new() -> Self {
        Cohort {
            state: AtomicUsize::new(0),
            snodes: SnodeList::new(),
        }
    }

    #[cfg(numa_loom)]
    pub(crate) fn new() -> Self {
        Cohort {
            state: AtomicUsize::new(0),
            snodes: SnodeList::new(),
        }
    }

    /// One attempt to take `LOCKED_BIT` (keeping every other bit).
    #[inline]
    pub(crate) fn try_lock(&self) -> bool {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & LOCKED_BIT != 0 {
                return false;
            }
            match self.state.compare_exchange_weak(
                s,
                s | LOCKED_BIT,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(x) => s = x,
            }
        }
    }

    /// Fast path: one CAS setting `LOCKED_BIT` in the observed state (other
    /// bits, such as the parked count, may be set: a free lock with parked
    /// waiters is taken here too, that is barging).
    #[inline]
    pub(crate) fn try_lock_fast(&self) -> bool {
        match self
            .state
            .compare_exchange_weak(0, LOCKED_BIT, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => true,
            Err(s) => {
                s & LOCKED_BIT == 0
                    && self
                        .state
                        .compare_exchange_weak(
                            s,
                            s | LOCKED_BIT,
                            Ordering::Acquire,
                            Ordering::Relaxed,
                        )
                        .is_ok()
            }
        }
    }

    /// Slow acquisition. Returns the caller's node on success, `None` when
    /// `deadline` passed first (the caller is then in no queue and counted
    /// nowhere).
    #[cold]
    pub(crate) fn lock_slow(&self, deadline: Option<Instant>) -> Option<usize> {
        let node = sync::current_node();
        let snode = self.snodes.get_or_insert(node);
        let mut round = 0u32;
        let mut spinner = false;
        // A thread woken to compete may spin even if its node has an active waiter.
        let mut woken = false;
        loop {
            let s = self.state.load(Ordering::Relaxed);
            if s & LOCKED_BIT == 0 {
                if self
                    .state
                    .compare_exchange_weak(s, s | LOCKED_BIT, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    if spinner {
                        snode.spinning.fetch_sub(1, Ordering::Relaxed);
                    }
                    return Some(node);
                }
                continue;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                if spinner {
                    snode.spinning.fetch_sub(1, Ordering::Relaxed);
                }
                // Dekker with `unlock_slow`: we drop out of `spinning`, fence,
                // then look at the lock; it releases, fences, then counts active
                // waiters. Either it sees us gone (and wakes a parked waiter) or
                // we see the lock free here and take it.
                fence(Ordering::SeqCst);
                return self.try_lock().then_some(node);
            }
            // Spin while the lock is likely to come soon: a bounded number of
            // rounds, and not at all when at least as many waiters are parked as
            // there are CPUs (then the holder or the next one is likely not
            // running), unless we were just woken to compete.
            let may_spin = round < spin_rounds() && (woken || parked_count(s) < sync::num_cpus());
            if may_spin {
                if !spinner {
                    snode.spinning.fetch_add(1, Ordering::Relaxed);
                    spinner = true;
                }
                round += 1;
                spin_round(round);
                continue;
            }
            if spinner {
                // No Dekker needed here: `park_on` validates under the queue
                // lock that the lock is still held.
                snode.spinning.fetch_sub(1, Ordering::Relaxed);
                spinner = false;
            }
            match self.park_on(snode, deadline) {
                ParkResult::Unparked(TOKEN_HANDOFF) => return Some(node),
                ParkResult::Unparked(_) => {
                    woken = true;
                    round = 0;
                }
                ParkResult::Invalid => round = 0,
                ParkResult::TimedOut => return None,
            }
        }
    }

    /// Parks the calling thread on `snode` while the lock is held.
    fn park_on(&self, snode: &Snode, deadline: Option<Instant>) -> ParkResult {
        let validate = || {
            let mut s = self.state.load(Ordering::Relaxed);
            loop {
                // Not parking on a free lock is what prevents lost wake-ups; a
                // full parked counter (2^29 - 1 threads on 64-bit) makes us
                // spin and yield instead.
                if s & LOCKED_BIT == 0 || s & PARKED_MASK == PARKED_MASK {
                    return false;
                }
                // Count ourselves in the snode first: an unlocker that reads the
                // new state (Acquire) also sees the snode count.
                snode.parked.fetch_add(1, Ordering::Relaxed);
                match self.state.compare_exchange_weak(
                    s,
                    s + PARKED_ONE,
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return true,
                    Err(x) => {
                        snode.parked.fetch_sub(1, Ordering::Relaxed);
                        s = x;
                    }
                }
            }
        };
        let timed_out = |_key: usize, _last: bool| {
            snode.parked.fetch_sub(1, Ordering::Relaxed);
            self.state.fetch_sub(PARKED_ONE, Ordering::Relaxed);
        };
        // SAFETY:
        // - the key is the address of an snode of this lock, which this crate controls;
        // - `validate` and `timed_out` only touch atomics: they neither unwind nor
        //   call into the parking lot;
        // - `before_sleep` is empty.
        unsafe {
            sync::park(
                snode.park_key(),
                validate,
                || {},
                timed_out,
                ParkToken(0),
                deadline,
            )
        }
    }

    /// Fast unlock: `LOCKED_BIT -> 0` when nothing else is set. On failure
    /// returns the observed state for [`Cohort::unlock_slow`].
    #[inline]
    pub(crate) fn try_unlock_fast(&self) -> Result<(), usize> {
        self.state
            .compare_exchange(LOCKED_BIT, 0, Ordering::Release, Ordering::Relaxed)
            .map(drop)
    }

    /// Slow unlock: some thread is parked (or the rwlock has other bits set).
    /// `s` is the last observed state; `node` is the unlocker's node
    /// ([`UNKNOWN_NODE`] to look it up); `fair` forces a direct handoff to a
    /// parked waiter if there is one.
    #[cold]
    pub(crate) fn unlock_slow(&self, mut s: usize, node: usize, fair: bool) {
        let mut node = node;
        loop {
            if parked_count(s) == 0 {
                match self.state.compare_exchange(
                    s,
                    s & !LOCKED_BIT,
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return,
                    Err(x) => {
                        s = x;
                        continue;
                    }
                }
            }
            if node == UNKNOWN_NODE {
                node = sync::current_node();
            }
            // Eventual fairness also while active waiters keep the lock busy:
            // every few releases, check whether the next node's parked waiter is
            // owed a direct handoff (its fairness deadline passed).
            if !fair
                && config::fairness_tick()
                && let Some(target) = self.pick_target(node)
                && config::fairness_due(target)
            {
                if self.wake_one(Some(target), true, true) {
                    return;
                }
                s = self.state.load(Ordering::Acquire);
                continue;
            }
            if !fair && self.active_waiters().is_some() {
                // Hand to a running waiter: just release (one RMW, no wake-up).
                self.state.fetch_and(!LOCKED_BIT, Ordering::Release);
                fence(Ordering::SeqCst);
                // Dekker with a spinner that gives up (timeout): it leaves
                // `spinning` before its last try, we released before re-reading.
                match self.active_waiters() {
                    // The active waiters left meanwhile: wake one to compete.
                    None => {
                        let target = self.pick_target(node);
                        self.wake_one(target, false, false);
                    }
                    // Wake ahead of need: the last active waiter is about to
                    // become the holder, so wake a parked waiter of the node to
                    // serve next to spin for the following round.
                    Some(1) => match self.pick_target(node) {
                        Some(t) if t.spinning.load(Ordering::Relaxed) == 0 => {
                            self.wake_one(Some(t), false, false);
                        }
                        Some(_) => {}
                        None => {
                            self.wake_one(None, false, false);
                        }
                    },
                    Some(_) => {}
                }
                return;
            }
            // No snode with parked waiters: the parked count is then made of
            // condvar waiters requeued onto this lock (or snode counts lag the
            // state word for a moment; then nobody is woken and we retry).
            let target = self.pick_target(node);
            if self.wake_one(target, true, fair) {
                return;
            }
            if target.is_none() {
                sync::spin_loop();
            }
            s = self.state.load(Ordering::Acquire);
        }
    }

    /// Wakes one thread parked on `target`, or, with `None`, on the requeue
    /// queue (condvar waiters moved onto this lock, see [`Cohort::requeue_key`]).
    /// If `we_hold` (the caller still owns the lock), a handoff (forced by
    /// `fair` or owed by eventual fairness) passes the lock to the woken thread,
    /// and otherwise the lock is released in the same atomic step and the thread
    /// competes. If the caller already released the lock (wake ahead of need),
    /// the thread just competes. Returns whether a thread was woken.
    fn wake_one(&self, target: Option<&Snode>, we_hold: bool, fair: bool) -> bool {
        let callback = |r: sync::UnparkResult| {
            if r.unparked_threads == 0 {
                return TOKEN_NORMAL;
            }
            if let Some(t) = target {
                t.parked.fetch_sub(1, Ordering::Relaxed);
            }
            if !we_hold {
                self.state.fetch_sub(PARKED_ONE, Ordering::Relaxed);
                TOKEN_NORMAL
            } else if fair || target.is_some_and(config::fairness_due) {
                // The lock stays locked: ownership moves to the woken thread.
                self.state.fetch_sub(PARKED_ONE, Ordering::Release);
                TOKEN_HANDOFF
            } else {
                self.state
                    .fetch_sub(PARKED_ONE | LOCKED_BIT, Ordering::SeqCst);
                TOKEN_NORMAL
            }
        };
        let key = target.map_or_else(|| self.requeue_key(), Snode::park_key);
        // SAFETY:
        // - the key is the address of an snode of this lock or this lock's
        //   requeue key, which this crate controls;
        // - the callback only touches atomics and reads the clock: it neither
        //   unwinds nor calls into the parking lot.
        let r = unsafe { sync::unpark_one(key, callback) };
        r.unparked_threads != 0
    }

    /// The parking key of the requeue queue: condvar waiters that
    /// `notify_all` moved onto this lock wait here (counted in the parked
    /// count, in no snode). The lock's address + 3: `RawRwLock` uses + 0 and
    /// + 1 for its reader and writer-drain queues, snodes are other allocations.
    #[inline]
    pub(crate) fn requeue_key(&self) -> usize {
        self as *const Cohort as usize + 3
    }

    /// The number of active (spinning) waiters over all nodes, if any.
    #[inline]
    fn active_waiters(&self) -> Option<usize> {
        let n: usize = self
            .snodes
            .iter()
            .map(|s| s.spinning.load(Ordering::Relaxed))
            .sum();
        (n != 0).then_some(n)
    }

    /// The snode to serve next: the unlocker's own node while its batch lasts,
    /// then the next node with parked waiters in the cyclic snode order.
    fn pick_target(&self, node: usize) -> Option<&Snode> {
        let own = self.snodes.find(node);
        let bound = config::batch_bound();
        if let Some(o) = own
            && o.parked.load(Ordering::Relaxed) != 0
            && o.batch.load(Ordering::Relaxed) < bound
        {
            o.batch.fetch_add(1, Ordering::Relaxed);
            return Some(o);
        }
        let start = match own {
            Some(o) => self.snodes.next_cyclic(o)?,
            None => self.snodes.first()?,
        };
        let mut cur = start;
        loop {
            if cur.parked.load(Ordering::Relaxed) != 0 {
                if let Some(o) = own {
                    o.batch.store(0, Ordering::Relaxed);
                }
                cur.batch.store(0, Ordering::Relaxed);
                return Some(cur);
            }
            cur = self.snodes.next_cyclic(cur)?;
            if std::ptr::eq(cur, start) {
                return None;
            }
        }
    }
}
