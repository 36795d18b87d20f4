//! Runs the built `numa-bench` binary: `run --json` must print one JSON object
//! with every key of issue 5, for every lock; bad input must fail with a message
//! naming what was wrong. (Short windows; no speed is asserted.)

use std::process::Command;

use serde_json::Value;

fn numa_bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_numa-bench"))
        .args(args)
        .output()
        .expect("running numa-bench")
}

fn run_json(lock: &str, workload: &str, threads: &str) -> Value {
    let out = numa_bench(&[
        "run",
        "--lock",
        lock,
        "--workload",
        workload,
        "--threads",
        threads,
        "--duration",
        "150ms",
        "--virtual-nodes",
        "2",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{lock} {workload}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
    serde_json::from_str(&stdout).expect("valid JSON")
}

#[test]
fn run_json_has_every_key() {
    let v = run_json("cna", "locktorture", "3");
    for key in [
        "throughput_ops_per_us",
        "fairness_factor",
        "node_switches_per_1k",
        "cpu_ns_per_op",
        "duration_s",
    ] {
        assert!(v[key].is_number(), "{key} in {v}");
    }
    for q in ["p50", "p99", "max"] {
        assert!(
            v["acquire_latency_ns"][q].is_u64(),
            "acquire_latency_ns.{q} in {v}"
        );
    }
    let ops = v["ops_per_thread"]
        .as_array()
        .expect("ops_per_thread array");
    assert_eq!(ops.len(), 3);
    assert!(ops.iter().all(Value::is_u64));
    assert_eq!(v["lock"], "cna");
    assert_eq!(v["workload"], "locktorture");
    assert_eq!(v["threads"], 3);
    assert_eq!(v["nodes"], 2);
    assert_eq!(v["virtual"], true);
    let total: u64 = ops.iter().filter_map(Value::as_u64).sum();
    // With `lock-stats` (numa-spin's `stats`), cna's counters are there and count
    // acquisitions; without it the lock keeps none.
    if cfg!(feature = "lock-stats") {
        let acq = v["lock_stats"]["acquisitions"]
            .as_u64()
            .expect("cna lock stats");
        assert!(acq >= total, "{acq} acquisitions < {total} counted ops");
    } else {
        assert!(v["lock_stats"].is_null(), "{}", v["lock_stats"]);
    }
    let f = v["fairness_factor"].as_f64().unwrap();
    assert!((0.5..=1.0).contains(&f), "{f}");
}

#[test]
fn every_lock_runs_its_workloads() {
    for lock in ["queued", "cst", "parking_lot", "std", "spin", "ticket"] {
        for w in ["kv", "page-alloc"] {
            let v = run_json(lock, w, "2");
            assert_eq!(v["lock"], lock);
            assert!(v["ops_per_thread"].as_array().unwrap().len() == 2);
        }
    }
    for lock in ["cst-rw", "parking_lot-rw", "std-rw"] {
        let v = run_json(lock, "rwlock", "2");
        assert_eq!(v["workload"], "rwlock");
        assert!(v["ops_per_thread"][0].as_u64().unwrap() > 0);
    }
}

#[test]
fn bad_input_is_a_named_error() {
    for (args, needle) in [
        (&["run", "--lock", "mcs", "--workload", "kv"][..], "mcs"),
        (
            &["run", "--lock", "std", "--workload", "rwlock"][..],
            "rwlock",
        ),
        (
            &["run", "--lock", "std", "--workload", "kv", "--threads", "0"][..],
            "--threads",
        ),
        (
            &[
                "run",
                "--lock",
                "std",
                "--workload",
                "kv",
                "--duration",
                "0s",
            ][..],
            "0s",
        ),
        (
            &[
                "run",
                "--lock",
                "std",
                "--workload",
                "kv",
                "--get-pct",
                "101",
            ][..],
            "--get-pct",
        ),
        (
            &[
                "run",
                "--lock",
                "std",
                "--workload",
                "locktorture",
                "--delay",
                "5ms",
            ][..],
            "5ms",
        ),
        (
            &[
                "run",
                "--lock",
                "std",
                "--workload",
                "kv",
                "--virtual-nodes",
                "0",
            ][..],
            "--virtual-nodes",
        ),
    ] {
        let out = numa_bench(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
