//! `numa-bench handoff --json`: every path a lock takes is timed, the paths it
//! never takes are `null`, and (in a `lock-stats` build) the lock's own
//! counters confirm which path the hand-offs took.

use std::process::Command;

fn handoff(locks: &str, samples: &str) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_numa-bench"))
        .args([
            "handoff",
            "--locks",
            locks,
            "--samples",
            samples,
            "--cs",
            "0,1us",
            "--json",
        ])
        .output()
        .expect("run numa-bench handoff");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "handoff: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .collect()
}

fn two_cpus() -> bool {
    std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2
        && cfg!(all(target_arch = "x86_64", target_os = "linux"))
}

/// One test: two runs at once would share the two CPUs.
#[test]
fn paths_not_taken_are_null_and_the_others_are_timed() {
    let cells = handoff("cst,cna,parking_lot", "200");
    #[cfg(feature = "lock-stats")]
    the_locks_own_counters_confirm_each_path(&cells);
    // 3 locks x 5 paths x 2 critical sections. cst, on numa-spin's queue,
    // takes every path CNA takes: its releaser re-takes the lock.
    assert_eq!(cells.len(), 30);
    for c in &cells {
        for key in ["lock", "path", "cs_ns", "median_rtt", "p90_rtt", "samples"] {
            assert!(c.get(key).is_some(), "{key} missing in {c}");
        }
        let (lock, path) = (c["lock"].as_str().unwrap(), c["path"].as_str().unwrap());
        let never = matches!((lock, path), ("parking_lot", "local" | "remote"));
        if never || !two_cpus() {
            assert!(c["median_rtt"].is_null(), "{lock} {path} timed: {c}");
            assert_eq!(c["samples"], 0, "{c}");
            continue;
        }
        let (m, p) = (c["median_rtt"].as_f64(), c["p90_rtt"].as_f64());
        assert!(m.is_some() && p.is_some(), "{lock} {path} not timed: {c}");
        assert!(m <= p, "{c}");
        assert_eq!(c["samples"], 200, "{c}");
    }
}

/// The counters of a `lock-stats` build say which path the samples took:
/// a `word` waiter (a stealer) never queues, a `local` or `remote` waiter
/// always does, for CNA and for cst on CNA's queue.
#[cfg(feature = "lock-stats")]
fn the_locks_own_counters_confirm_each_path(cells: &[serde_json::Value]) {
    if !two_cpus() {
        return;
    }
    let stat = |lock: &str, path: &str, key: &str| -> u64 {
        let c = cells
            .iter()
            .find(|c| c["lock"] == lock && c["path"] == path && c["cs_ns"] == 1000)
            .expect("cell");
        c["lock_stats"][key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} in {c}"))
    };
    // Every attempt is one acquisition by the waiter (200 timed samples,
    // the /proc check samples and misses besides); the holder's own
    // acquisitions are uncontended.
    for lock in ["cst", "cna"] {
        assert_eq!(stat(lock, "word", "contended"), 0, "{lock}");
        assert!(stat(lock, "local", "contended") >= 200, "{lock}");
        assert!(stat(lock, "remote", "contended") >= 200, "{lock}");
    }
}
