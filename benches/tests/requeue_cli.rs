//! `numa-bench requeue --json`: one row per lock with the re-acquisition
//! times of every notified waiter, and a clear error for a lock without a
//! condition variable.

use std::process::Command;

fn requeue(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_numa-bench"))
        .arg("requeue")
        .args(args)
        .output()
        .expect("run numa-bench requeue")
}

/// Every notified waiter's re-acquisition is timed, in order p50 <= p99 <=
/// max, for cst and parking_lot.
#[test]
fn every_requeued_acquisition_is_timed() {
    let out = requeue(&[
        "--locks",
        "cst,parking_lot",
        "--hammers",
        "4",
        "--acquisitions",
        "40",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .collect();
    let locks: Vec<_> = rows.iter().map(|r| r["lock"].as_str().unwrap()).collect();
    assert_eq!(locks, ["cst", "parking_lot"]);
    for r in &rows {
        // 40 acquisitions in rounds of 4 waiters.
        assert_eq!(r["samples"], 40, "{r}");
        let (p50, p99, max) = (
            r["p50_us"].as_f64().unwrap(),
            r["p99_us"].as_f64().unwrap(),
            r["max_us"].as_f64().unwrap(),
        );
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{r}");
        assert!(r["hammer_ops_per_us"].as_f64().unwrap() > 0.0, "{r}");
    }
}

/// A lock without a condition variable is refused, by name.
#[test]
fn a_lock_without_a_condvar_is_refused() {
    let out = requeue(&["--locks", "cna", "--acquisitions", "4"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cna") && err.contains("condition variable"),
        "{err}"
    );
}
