//! The queue head's wait for the lock word ([`HeadWait`]), its naps and the
//! `HEAD_ASLEEP` mark, and the pass of head-ship ([`pass_head_ship`]).

use super::handoff::signal_then;
use crate::sync::{AtomicU32, Ordering};

/// How long a queue head (CNA's, the queued lock's, HQ's global head) sleeps
/// at a time once its spin budget is spent, with
/// [`WaitPolicy::Park`](crate::WaitPolicy::Park), instead of yielding (20 us;
/// with Linux's default timer slack a sleep lasts about 70 us).
///
/// A timed sleep rather than a park: nobody has to wake the head, so the release
/// stays one store. (Paravirt qspinlock parks the head, `pv_wait_head_or_lock`,
/// and pays with a cmpxchg unlock; here a release that reads the lock word
/// before its store, as a wake-up check needs, cost 15-30% of the throughput
/// of two threads contending on two CPUs. Tried again with a read of the tail
/// word before the store and a futex wake of a head napping past its bound:
/// locktorture at 2 threads, 2 virtual nodes, 32 interleaved half-second
/// runs, medians fell from 2.80 to 2.18 ops/us for CNA and 2.74 to 2.15 for
/// HQ, parking_lot's unchanged at 3.1, while at 32 threads, with and without
/// a CPU hog, the gain was inside the spread of the same runs.) The head marks each nap
/// `HEAD_ASLEEP` and leaves `NO_STEAL` as it is: before its steal bound
/// stealing is allowed and arrivals take a free lock meanwhile
/// ([`steal_while_head_asleep`](super::steal_while_head_asleep)); past it the
/// mark stays set through the nap, so the lock's next release is the head's
/// and may wait for the nap's end, unless it stays free for
/// [`NAPPING_HEAD_PATIENCE_NS`](super::steal::NAPPING_HEAD_PATIENCE_NS) beyond the
/// bound ([`steal_past_absent_head`](super::steal_past_absent_head), by an
/// arrival or by a timed waiter past its own bound, `crate::timed`), or a wait
/// without a queue node ([`lock_unqueued`](super::lock_unqueued)) takes it. The sleep bounds
/// how long the head itself is away. Measured on
/// the 2-CPU development machine, `numa-bench run --lock cna --workload
/// locktorture --threads 2 --hog 1 --virtual-nodes 2`, 5 interleaved repeats:
/// CNA/parking_lot 0.99 (0.88-1.00) with 20 us sleeps, 0.99 (0.94-1.01) with
/// 100 us, against 0.79 (0.69-0.97) yielding; a yielding head keeps handing its
/// CPU's time to the CPU-bound thread and taking it back. Without the hog, and
/// at 32 threads with it, the three were within the spread.
pub(crate) const HEAD_NAP_NS: u64 = 20_000;

/// The queue head's wait for the lock word, shared by CNA's (and the queued
/// lock's) queue head and HQ's global head: everything but the acquisition
/// attempts themselves, which differ per lock. `tail` is the lock's tail word
/// with the flags of [`crate::raw_lock`].
///
/// - **Bounded stealing** (`NO_STEAL`): once the head has waited
///   [`Config::steal_bound_ns`](crate::Config::steal_bound_ns) while the lock
///   was held, it forbids stealing and claims the next release ahead of timed
///   waiters (`HEAD_CLAIM`), and keeps both marks until it holds the lock,
///   through its naps and yields: past its bound the next release is the
///   head's. A head preempted while it spins, or woken late from a nap, leaves
///   a free lock behind the mark; arrivals take it once they have seen it free
///   for long enough ([`steal_past_absent_head`](super::steal_past_absent_head)).
/// - **Naps** with [`WaitPolicy::Park`](crate::WaitPolicy::Park): once its
///   spin budget is spent the head sleeps [`HEAD_NAP_NS`] at a time, marking
///   the lock `HEAD_ASLEEP` for the length of each nap. Before the steal bound
///   arrivals take a free lock meanwhile rather than queue behind the head
///   ([`steal_while_head_asleep`](super::steal_while_head_asleep)); past it they leave the lock to the head,
///   which takes it when the nap ends. With `Yield` the head yields.
/// - **Lifting the mark**: at the start (the hand-off that woke the head may
///   have marked it), after each nap, and once the head holds the lock (a
///   hand-off's mark that landed after the first check: the hand-off marks
///   after its swap, which the head may see before the wake-up), together
///   with `NO_STEAL` in one read-modify-write.
///
/// So a head's wait is at most the steal bound, plus the critical sections of
/// the threads that took the lock before the mark was seen (one per running
/// thread: each has at most one steal in flight), plus the critical section in
/// progress, plus one nap (about 70 us with Linux's default timer slack) or
/// yield, plus any time the head is off its CPU; see `RawLock`'s fairness
/// docs.
///
/// Every access is Relaxed: both flags are hints; the lock word's CAS carries
/// the synchronization.
pub(crate) struct HeadWait<'a> {
    tail: &'a AtomicU32,
    /// `steal_bound_ns`, and whether it is a finite nonzero bound.
    bound: u64,
    timed: bool,
    /// When the head first saw the lock held, ns (only when `timed`): the
    /// clock is read in the first [`held`](HeadWait::held), while the lock is
    /// held, not before the head's first look at the word, which is on the
    /// path of every hand-off to a head that was just made head.
    started: Option<u64>,
    /// Whether we set NO_STEAL.
    forbade: bool,
    park: bool,
    /// The loom event counted when we mark ourselves asleep.
    nap_event: &'static str,
    spin: crate::backoff::SpinWait,
}

impl<'a> HeadWait<'a> {
    /// Starts the head's wait; we run now, so lifts the mark of the hand-off
    /// that woke us.
    pub(crate) fn start(tail: &'a AtomicU32, cfg: &crate::Config, nap_event: &'static str) -> Self {
        let bound = cfg.steal_bound_ns;
        let timed = bound != 0 && bound != u64::MAX;
        lift_head_asleep(tail);
        HeadWait {
            tail,
            bound,
            timed,
            started: None,
            forbade: false,
            park: cfg.wait_policy == crate::WaitPolicy::Park,
            nap_event,
            spin: crate::backoff::SpinWait::new(cfg.spin_budget_ns),
        }
    }

    /// The lock was seen held: forbid stealing once the steal bound has passed
    /// since the head first saw it held, and claim the next release ahead of
    /// timed waiters (`HEAD_CLAIM`, see `crate::timed`).
    pub(crate) fn held(&mut self) {
        use crate::word::{HEAD_CLAIM, NO_STEAL};
        if !self.timed || self.forbade {
            return;
        }
        let now = crate::sync::now_ns();
        let started = *self.started.get_or_insert(now);
        if now.saturating_sub(started) >= self.bound {
            // Relaxed: a fairness hint (see `node::try_steal`).
            self.tail.fetch_or(NO_STEAL | HEAD_CLAIM, Ordering::Relaxed);
            self.forbade = true;
        }
    }

    /// Whether the head has spent its spin budget (it naps or yields now).
    pub(crate) fn spun_out(&self) -> bool {
        self.spin.is_yielding()
    }

    /// Waits before the next look at the lock word: spins, then naps (marking
    /// the lock `HEAD_ASLEEP` for the nap) or yields. `NO_STEAL` stays as it
    /// is: past the bound the next release is ours even while we sleep.
    pub(crate) fn pause(&mut self) {
        use crate::word::HEAD_ASLEEP;
        if self.park && self.spin.is_yielding() {
            let hints = crate::sync::head_asleep_hints();
            if hints {
                // About to sleep: before the bound arrivals should take a free
                // lock rather than queue behind us; past it they should know we
                // come back within a nap. Relaxed: a hint.
                self.tail.fetch_or(HEAD_ASLEEP, Ordering::Relaxed);
                crate::sync::event(self.nap_event);
            }
            self.spin.nap(HEAD_NAP_NS);
            if hints {
                // We run again. Relaxed: a hint.
                self.tail.fetch_and(!HEAD_ASLEEP, Ordering::Relaxed);
            }
        } else {
            self.spin.snooze();
        }
    }

    /// We hold the lock: lets stealers in again (until the next head's
    /// bound), gives up our claim (`HEAD_CLAIM`) and lifts `HEAD_ASLEEP`, in
    /// one read-modify-write. With a finite
    /// nonzero bound `NO_STEAL` is lifted whoever set it (we, or a timed
    /// waiter that left it behind while we were queued: `crate::timed`); a
    /// timed waiter still waiting sets it again. Strict FIFO keeps it. The
    /// load reads the line of the lock word the caller has just written.
    pub(crate) fn acquired(self) {
        use crate::word::{HEAD_ASLEEP, HEAD_CLAIM, NO_STEAL};
        let flags = self.tail.load(Ordering::Relaxed);
        let mut lift = if self.forbade || (self.timed && flags & NO_STEAL != 0) {
            NO_STEAL | HEAD_CLAIM
        } else {
            0
        };
        if crate::sync::head_asleep_hints() && flags & HEAD_ASLEEP != 0 {
            lift |= HEAD_ASLEEP;
        }
        if lift != 0 {
            self.tail.fetch_and(!lift, Ordering::Relaxed);
        }
    }
}

/// Lifts `HEAD_ASLEEP` in `tail` if it is set (Relaxed: a hint).
pub(crate) fn lift_head_asleep(tail: &AtomicU32) {
    use crate::word::HEAD_ASLEEP;
    if crate::sync::head_asleep_hints() && tail.load(Ordering::Relaxed) & HEAD_ASLEEP != 0 {
        tail.fetch_and(!HEAD_ASLEEP, Ordering::Relaxed);
    }
}

/// Passes head-ship: [`signal`](super::signal)s `value` into `word`, on which the next queue
/// head waits (CNA's queue node, HQ's queue node, node-queue `gwait` or gate),
/// and, if that waiter had parked, marks the lock `HEAD_ASLEEP` in `tail`
/// between the swap and the wake-up: the new head runs only once the wake-up
/// completes, so arrivals should take the lock meanwhile rather than queue
/// behind it ([`steal_while_head_asleep`](super::steal_while_head_asleep)). `event` is the loom event counted
/// for the mark.
///
/// Called only by the lock holder. Relaxed: a hint. The holder's RMW
/// happens-before the new head's acquisition, and so before any CAS of that
/// head that empties the queue (which therefore cannot fail on this flag; it
/// can fail on a timed waiter's `NO_STEAL`, and is retried then);
/// after its acquisition the head looks for the mark and lifts it
/// ([`HeadWait::acquired`]). A new head that saw the swap before it slept can
/// run its check at start before this RMW; that second look catches it.
pub(crate) fn pass_head_ship(tail: &AtomicU32, word: &AtomicU32, value: u32, event: &'static str) {
    signal_then(word, value, || {
        if crate::sync::head_asleep_hints() {
            tail.fetch_or(crate::word::HEAD_ASLEEP, Ordering::Relaxed);
            crate::sync::event(event);
        }
    });
}
