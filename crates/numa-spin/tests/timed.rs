//! `try_lock_for` / `try_lock_until` (lock_api's `RawMutexTimed`) on a
//! strict-FIFO configuration. The generic timed suite (`lock-tests`) runs for
//! the registry's locks and, in `tests/suite.rs`, for the fair-unlock CNA lock.
#![cfg(not(numa_loom))]

use std::time::Duration;

#[test]
fn tuned_strict_fifo_lock_is_timed_too() {
    static CFG: numa_spin::Config = numa_spin::Config::DEFAULT.steal_bound_ns(0);
    let m = numa_spin::TunedMutex::from_raw(numa_spin::RawTunedMutex::with_config(&CFG), 1);
    let g = m.try_lock_for(Duration::from_millis(1)).expect("free lock");
    assert!(m.try_lock_for(Duration::from_millis(1)).is_none());
    drop(g);
    assert!(m.try_lock_for(Duration::from_millis(1)).is_some());
}
