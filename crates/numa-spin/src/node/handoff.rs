//! The hand-off words: a waiter's wait for a signal ([`wait_signal`]), the signal
//! ([`signal`]) and the wait for a queue link ([`wait_link`]).

use super::registry::{PARKED, WAIT};
use crate::sync::{AtomicU32, Ordering};

/// Waits until `word` (a queue node's `locked`, or an HQ node queue's `gwait`)
/// holds neither [`WAIT`] nor [`PARKED`], and returns the value read (with
/// Acquire). The waiter's side of every hand-off of this crate (CNA's head-ship,
/// HQ's local and remote hand-offs); [`signal`] is the other side.
///
/// Spins for the spin budget, then, with [`WaitPolicy::Park`], parks on the word
/// (paravirt qspinlock's `pv_wait_node`): the waiter announces it by turning
/// `WAIT` into `PARKED`, and [`signal`] swaps the word and wakes it if it saw
/// `PARKED` (`pv_kick`). A waiter far from the head then leaves its CPU to the
/// threads that can make progress instead of yielding it back and forth (seed
/// 001: on an oversubscribed or virtualized machine a spinning waiter burns the
/// time slice its predecessor needs). With [`WaitPolicy::Yield`] it yields.
///
/// [`WaitPolicy::Park`]: crate::WaitPolicy::Park
/// [`WaitPolicy::Yield`]: crate::WaitPolicy::Yield
#[cfg_attr(numa_loom, track_caller)]
pub(crate) fn wait_signal(word: &AtomicU32, cfg: &crate::Config) -> u32 {
    let park = cfg.wait_policy == crate::WaitPolicy::Park;
    // Woken ahead of our turn (`Tunables::wake_ahead`): stay awake until
    // this time (`sync::now_ns`), then park again.
    let mut awake_until = 0;
    let mut spin = crate::backoff::SpinWait::new(cfg.spin_budget_ns);
    loop {
        // Acquire: pairs with the Release swap in `signal`, making everything the
        // signalling thread did before it (hand-off cells, queue links it
        // rewrote, for a hand-over of the lock its critical section) visible.
        let v = word.load(Ordering::Acquire);
        if v != WAIT && v != PARKED {
            return v;
        }
        if park && spin.is_yielding() && (awake_until == 0 || crate::sync::now_ns() >= awake_until)
        {
            // Relaxed: the CAS only announces that we sleep; the signaller's swap
            // then sees PARKED (or we see its value and do not sleep). What we
            // wait for is read by the Acquire load above.
            if v == PARKED
                || word
                    .compare_exchange(WAIT, PARKED, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                // Returns at once if the word is no longer PARKED (the swap came
                // first), on a wake-up, or spuriously; the loop re-checks.
                crate::sync::park(word, PARKED);
                // Woken ahead of our turn (`wake_ahead`: the word is WAIT
                // again): the hand-off is near; stay awake (yielding) for
                // EARLY_WAKE_YIELD_NS before parking again.
                // Relaxed: only picks how to wait; the loop's load acquires.
                if word.load(Ordering::Relaxed) == WAIT {
                    awake_until = crate::sync::now_ns().saturating_add(EARLY_WAKE_YIELD_NS);
                }
            }
            continue;
        }
        spin.snooze();
    }
}

/// How long a queue waiter woken ahead of its turn
/// ([`Tunables::wake_ahead`](crate::Tunables::wake_ahead)) stays awake,
/// yielding its CPU between looks, before it parks again (30 ms). With more
/// threads than CPUs a waiter among the first 16 of a busy queue waits for
/// several heads that each run only when the scheduler gives them a slice,
/// milliseconds; one that parks again first leaves a CPU idle at its
/// hand-off. Measured on the 2-CPU guest, 32 threads of `run --lock
/// cst-next` (cst-mutex's mutex, now registered as `cst`) `--workload
/// locktorture --duration 3s --virtual-nodes 2`, CPU
/// idle time from `/proc/stat`: parking again after its spin budget
/// (20 us) 19-20%, after 1 ms 25%, 10 ms 2.9%, 100 ms 0.7-0.8%, never
/// 0.5-0.8%. Measured again later (`run --lock cst`, same arguments, two to
/// five runs each): 10 ms 3.0-4.7% (locktorture) and 1.5-2.0% (kv), 30 ms
/// 0.5-1.2% and 0.2%, 100 ms 0.5-1.1% and 0.2%. Scheduler traces (`perf
/// sched`) of the 10 ms runs: the waiters one walk woke timed out together
/// while the queue head waited, runnable, behind a thread retaking the lock
/// for a whole tick on the other CPU; their CPU then idled in runs of 3.4
/// ms on average (the scheduler's periodic balance pulls the cache-hot
/// runnable waiters only then). The queue head stops waking waiters once it
/// has itself waited this long, so a lock held longer than 30 ms costs each
/// of them at most 30 ms of yielding, then they sleep.
pub const EARLY_WAKE_YIELD_NS: u64 = 30_000_000;

/// Wakes the waiter parked on `word` (a queue node's `locked` it waits on in
/// [`wait_signal`]) ahead of its hand-off: turns `PARKED` back into `WAIT`
/// and wakes it, so that it spins again. Does nothing if the waiter is not
/// parked. Returns whether it woke it.
///
/// Relaxed: the word's value is no hand-off (`WAIT` publishes nothing); the
/// later [`signal`] swap still carries the hand-off. A waiter that reads
/// `WAIT` after its park spins, then parks again (CAS `WAIT -> PARKED`), and
/// the hand-off's swap sees which it is.
pub(crate) fn wake_early(word: &AtomicU32) -> bool {
    let woke = word
        .compare_exchange(PARKED, WAIT, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok();
    if woke {
        crate::sync::unpark_one(word);
    }
    woke
}

/// Stores `value` (not [`WAIT`] nor [`PARKED`]) into a word a thread waits on in
/// [`wait_signal`], waking it if it parked.
///
/// A swap with Release: publishes everything the caller did before (the Acquire
/// load in `wait_signal` pairs with it). After the swap the word's owner may
/// reuse it at once; the wake-up only names its address, which stays valid
/// (queue nodes and HQ metadata are never freed), and a stray wake-up of a later
/// wait on the same word is a spurious one, which `wait_signal` tolerates.
pub(crate) fn signal(word: &AtomicU32, value: u32) {
    signal_then(word, value, || {});
}

/// [`signal`], running `before_wake` between the swap and the wake-up when the
/// waiter had parked (CNA marks the new queue head asleep there, before it can
/// run).
pub(crate) fn signal_then(word: &AtomicU32, value: u32, before_wake: impl FnOnce()) {
    debug_assert!(value != WAIT && value != PARKED);
    if word.swap(value, Ordering::Release) == PARKED {
        before_wake();
        crate::sync::unpark_one(word);
    }
}

/// Waits until the link `word` (a queue node's `next`, an HQ node queue's
/// `gnext`) is set by a thread that already swapped itself into the matching
/// tail, and returns it (read with Acquire: pairs with the Release store of the
/// link, so the linked node's initialization is visible).
#[cfg_attr(numa_loom, track_caller)]
pub(crate) fn wait_link(word: &AtomicU32, cfg: &crate::Config) -> u32 {
    let mut spin = crate::backoff::SpinWait::new(cfg.spin_budget_ns);
    loop {
        // Acquire: see above.
        let n = word.load(Ordering::Acquire);
        if n != 0 {
            return n;
        }
        spin.snooze();
    }
}
