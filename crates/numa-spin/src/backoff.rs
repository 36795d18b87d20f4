//! Time-calibrated spinning: exponential back-off up to a spin budget in ns, then
//! yielding.
//!
//! One `spin_loop` hint (x86 `PAUSE`) costs about 25 ns on Skylake-and-later Intel
//! CPUs such as the development machine and a few ns on older Intel and most AMD
//! CPUs, so a budget counted in iterations would differ 5-10x between machines. The
//! cost is measured once per process (`ns_per_spin`) and each waiter converts its
//! budget (`Config::spin_budget_ns`) into hint counts with it, so the wait loop reads
//! no clock.

use crate::sync;

/// Largest batch of `spin_loop` hints between two checks of the awaited condition
/// (16 x ~25 ns = ~400 ns here): long enough to stop hammering a shared line, short
/// enough not to add much hand-off latency.
const MAX_BATCH: u32 = 16;

/// Cost of one `spin_loop` hint in ns, rounded up (>= 1), measured on first use.
#[cfg(not(numa_loom))]
pub(crate) fn ns_per_spin() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;
    static NS_PER_SPIN: AtomicU64 = AtomicU64::new(0);
    let cached = NS_PER_SPIN.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // The minimum over 8 samples of 250 hints (~6 us each at 25 ns): a preemption
    // or interrupt during a sample only makes it longer, so one sample can be off
    // by orders of magnitude (a descheduled thread measured 92x too long) while
    // the minimum is off only if all 8 were disturbed. The hint's cost still
    // depends on the CPU's frequency at the moment of the first slow path. Racing
    // first callers each measure; the first to store wins and every caller
    // returns the stored value, so the process sees one cost throughout.
    const N: u32 = 250;
    let mut best = u64::MAX;
    for _ in 0..8 {
        let start = Instant::now();
        for _ in 0..N {
            std::hint::spin_loop();
        }
        best = best.min(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    let per = best.div_ceil(u64::from(N)).max(1);
    // Relaxed: the value is the whole message (no other data is published).
    match NS_PER_SPIN.compare_exchange(0, per, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => per,
        Err(first) => first,
    }
}

/// Under loom a spin is a yield; its "cost" is irrelevant.
#[cfg(numa_loom)]
pub(crate) fn ns_per_spin() -> u64 {
    1
}

/// A waiter's back-off state (parking_lot and crossbeam call it `SpinWait` /
/// `Backoff`): [`snooze`](SpinWait::snooze) spins in growing batches until the
/// budget is spent, then yields the CPU on every call.
#[derive(Debug)]
pub(crate) struct SpinWait {
    /// Hints left in the budget.
    left: u64,
    /// Hints in the next batch.
    batch: u32,
    /// Under loom: where the wait is and how many times it snoozed, so a model
    /// that livelocks names the loop instead of only exceeding loom's branch limit.
    #[cfg(numa_loom)]
    #[cfg_attr(numa_shuttle, allow(dead_code))]
    site: (&'static std::panic::Location<'static>, u32),
}

impl SpinWait {
    /// A waiter allowed to busy-wait for about `budget_ns` ns.
    #[cfg_attr(numa_loom, track_caller)]
    pub(crate) fn new(budget_ns: u64) -> Self {
        SpinWait {
            left: budget_ns / ns_per_spin(),
            batch: 1,
            #[cfg(numa_loom)]
            site: (std::panic::Location::caller(), 0),
        }
    }

    /// Waits a little: a batch of spin hints while the budget lasts, else a yield.
    #[inline]
    pub(crate) fn snooze(&mut self) {
        self.wait(0);
    }

    /// As [`snooze`](SpinWait::snooze), but once the budget is spent sleeps
    /// `sleep_ns` (a timed sleep: nobody has to wake the caller) instead of
    /// yielding. Under loom a yield, as `snooze`.
    #[inline]
    pub(crate) fn nap(&mut self, sleep_ns: u64) {
        self.wait(sleep_ns);
    }

    #[inline]
    fn wait(&mut self, sleep_ns: u64) {
        // (Not under shuttle: its random schedules let a waiter spin long
        // legitimately; shuttle's own step bound reports a livelock.)
        #[cfg(all(numa_loom, not(numa_shuttle)))]
        {
            self.site.1 += 1;
            assert!(
                self.site.1 < 2_000,
                "numa-spin: loom model spins forever at {}; trace:\n{}",
                self.site.0,
                sync::take_trace()
            );
        }
        if self.left == 0 || cfg!(numa_loom) {
            if sleep_ns == 0 {
                sync::yield_now();
            } else {
                sync::sleep_ns(sleep_ns);
            }
            return;
        }
        let n = u64::from(self.batch).min(self.left);
        for _ in 0..n {
            sync::spin_loop();
        }
        self.left -= n;
        self.batch = (self.batch * 2).min(MAX_BATCH);
    }

    /// Whether the spin budget is spent (the next [`snooze`](SpinWait::snooze)
    /// yields the CPU).
    #[inline]
    pub(crate) fn is_yielding(&self) -> bool {
        self.left == 0
    }
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use super::*;

    #[test]
    fn calibration_is_positive_and_cached() {
        let a = ns_per_spin();
        assert!(a >= 1);
        assert_eq!(ns_per_spin(), a);
    }

    /// First callers that race all get the one stored cost.
    #[test]
    fn racing_first_calibrations_agree() {
        let costs: Vec<u64> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8).map(|_| s.spawn(ns_per_spin)).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(costs.iter().all(|&c| c == ns_per_spin()), "{costs:?}");
    }

    #[test]
    fn nap_sleeps_once_the_budget_is_spent() {
        use std::time::{Duration, Instant};
        let mut w = SpinWait::new(0);
        let start = Instant::now();
        w.nap(2_000_000);
        assert!(start.elapsed() >= Duration::from_millis(2), "no sleep");
    }

    #[test]
    fn budget_runs_out_then_yields() {
        let per = ns_per_spin();
        let mut w = SpinWait::new(per * 100);
        let mut calls = 0;
        while !w.is_yielding() {
            w.snooze();
            calls += 1;
            assert!(
                calls <= 100,
                "budget of 100 hints not spent after {calls} calls"
            );
        }
        // Batches 1, 2, 4, 8, 16, 16, ...: 100 hints take 10 calls.
        assert_eq!(calls, 10);
        w.snooze(); // a yield, must return
        assert!(w.is_yielding());
        assert!(SpinWait::new(0).is_yielding());
    }
}
