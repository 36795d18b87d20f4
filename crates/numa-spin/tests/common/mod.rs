//! Helpers shared by the fork tests.

use std::time::{Duration, Instant};

/// Waits until `cond` holds, for at most 10 s (a state of another thread,
/// seen through a lock's diagnostics; the limit only turns a hang into a
/// failure).
pub fn await_state(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out: {what}"
        );
        std::thread::yield_now();
    }
}
