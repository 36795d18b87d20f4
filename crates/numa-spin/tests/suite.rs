//! The shared generic mutex suite (`lock-tests`) run against numa-spin's lock with
//! extreme per-type configurations. The registered locks (`cna`, `queued`) run
//! the suites from `crates/lock-tests/tests/suite.rs`, built from the registry.

use numa_spin::{Config, RawLock, Tunables};
use std::num::NonZeroU32;

lock_tests::mutex_suite!(cna_strict_fifo_flush_always, RawLock<true, StrictFifo>, guard: Send);
lock_tests::mutex_suite!(queued_strict_fifo, RawLock<false, StrictFifo>, guard: Send);
lock_tests::mutex_suite!(cna_always_scan_never_flush, RawLock<true, NeverFlush>, guard: Send);
lock_tests::mutex_suite!(cna_tuned_defaults, numa_spin::RawTunedMutex, guard: Send);
// The CNA lock whose every unlock is fair, under the generic timed suite.
lock_tests::timed_mutex_suite!(fair_unlock_timed, numa_spin::RawFairMutex);

/// Strict FIFO (steal bound 0), scan at every head, flush at every hand-off.
#[derive(Clone, Copy, Debug)]
struct StrictFifo;
static STRICT_FIFO: Config = Config::DEFAULT
    .steal_bound_ns(0)
    .shuffle_reduction(NonZeroU32::MIN)
    .flush_threshold_ns(0);
impl Tunables for StrictFifo {
    const DEFAULT: Self = StrictFifo;
    fn config(&self) -> &Config {
        &STRICT_FIFO
    }
}

/// Always scan, never flush on time (only when the main queue runs empty), steal
/// freely: the most NUMA-biased setting.
#[derive(Clone, Copy, Debug)]
struct NeverFlush;
static NEVER_FLUSH: Config = Config::DEFAULT
    .steal_bound_ns(u64::MAX)
    .shuffle_reduction(NonZeroU32::MIN)
    .flush_threshold_ns(u64::MAX);
impl Tunables for NeverFlush {
    const DEFAULT: Self = NeverFlush;
    fn config(&self) -> &Config {
        &NEVER_FLUSH
    }
}

lock_tests::mutex_suite!(hq_threshold_1_strict_fifo, numa_spin::RawHqLock<HqStrict>, guard: Send);
lock_tests::mutex_suite!(hq_round_robin_stealing, numa_spin::RawHqLock<HqRoundRobin>, guard: Send);

/// HQ, strict FIFO, one local hand-off per node queue before a remote one,
/// switch to NUMA mode after one plain hand-off.
#[derive(Clone, Copy, Debug)]
struct HqStrict;
static HQ_STRICT: Config = Config::DEFAULT
    .steal_bound_ns(0)
    .hq_handoff_threshold(1)
    .hq_switch_threshold(1);
impl Tunables for HqStrict {
    const DEFAULT: Self = HqStrict;
    fn config(&self) -> &Config {
        &HQ_STRICT
    }
}

/// HQ, threshold 0 (node queues take turns at every hand-off), NUMA mode from
/// the first waiter, free stealing.
#[derive(Clone, Copy, Debug)]
struct HqRoundRobin;
static HQ_ROUND_ROBIN: Config = Config::DEFAULT
    .steal_bound_ns(u64::MAX)
    .hq_handoff_threshold(0)
    .hq_switch_threshold(0);
impl Tunables for HqRoundRobin {
    const DEFAULT: Self = HqRoundRobin;
    fn config(&self) -> &Config {
        &HQ_ROUND_ROBIN
    }
}
