//! Runs the built `numa-bench diff` on small hand-written result directories:
//! ratios per matched point, rounds pooled from a directory of result
//! directories, typed errors for a missing file and for no common points. No
//! benchmark runs.

use std::path::{Path, PathBuf};
use std::process::Command;

fn numa_bench(args: &[&Path]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_numa-bench"))
        .arg("diff")
        .args(args)
        .output()
        .expect("running numa-bench")
}

/// The standard output of a run that must have succeeded.
fn stdout_of(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The columns of the kv row of `lock` in a diff report.
fn row<'a>(stdout: &'a str, lock: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .find(|l| l.starts_with("kv") && l.contains(&format!(" {lock} ")))
        .unwrap_or_else(|| panic!("no {lock} row: {stdout}"))
        .split_whitespace()
        .collect()
}

/// A point as `compare` wrote it before `--repeat` existed (no repeats, spread,
/// hog or idle keys): diff must read old result directories.
fn point(lock: &str, threads: usize, tp: f64, fairness: f64, p99: u64, params: &str) -> String {
    format!(
        r#"{{"lock": "{lock}", "workload": "kv", "threads": {threads}, "nodes": 2, "virtual": true,
  "bound": false, "duration_s": 0.5, "throughput_ops_per_us": {tp}, "fairness_factor": {fairness},
  "node_switches_per_1k": 1.0, "acquire_latency_ns": {{"p50": 40, "p99": {p99}, "max": 9000}},
  "cpu_ns_per_op": 100.0, "ops_per_thread": [10, 10], "lock_stats": null,
  "latency_sample_every": 16, "latency_clock_overhead_ns": 25, "remote_penalty_ns": 0,
  "machine_cpus": 2, "machine_nodes": 1, "machine_loadavg_1m": 0.5, "workload_params": "{params}"}}"#
    )
}

fn result_dir(name: &str, points: &[String]) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("numa-bench-diff-cli-{}-{name}", std::process::id()));
    write_result(&dir, points);
    dir
}

fn write_result(dir: &Path, points: &[String]) {
    std::fs::create_dir_all(dir).unwrap();
    let body = format!(
        r#"{{"conditions": {{"machine": "2 CPUs, 1 NUMA node", "cpus": 2, "real_nodes": 1, "nodes": 2,
  "virtual": true, "remote_penalty_ns": 0, "duration_s": 0.5, "max_loadavg_1m": 0.5,
  "latency_sample_every": 16, "latency_clock_overhead_ns": 25}},
  "points": [{}]}}"#,
        points.join(",\n")
    );
    std::fs::write(dir.join("points.json"), body).unwrap();
}

/// Rounds of one build, as `scripts/ab.sh` writes them: `<dir>/r1`, `r2`, ...
/// each a `compare` result of one repeat per point.
fn rounds_dir(name: &str, cna: &[f64]) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("numa-bench-diff-cli-{}-{name}", std::process::id()));
    for (i, &tp) in cna.iter().enumerate() {
        write_result(
            &dir.join(format!("r{}", i + 1)),
            &[
                point("cna", 2, tp, 0.5, 1000, "keys=10"),
                point("parking_lot", 2, 4.0, 0.5, 400, "keys=10"),
            ],
        );
    }
    dir
}

#[test]
fn diff_pools_the_rounds_of_each_side() {
    let old = rounds_dir("rounds-old", &[2.0, 4.0, 6.0]);
    let new = rounds_dir("rounds-new", &[3.0, 6.0, 9.0]);
    let out = numa_bench(&[&old, &new]);
    let stdout = stdout_of(&out);
    assert_eq!(stdout.matches("3 rounds pooled").count(), 2, "{stdout}");
    let cols = row(&stdout, "cna");
    // Throughput: the medians of the pooled runs, 4 and 6.
    // (`~`: the two sides' ranges, 2-6 and 3-9, overlap.)
    assert_eq!(cols[3..6], ["4.000", "6.000", "1.500~"], "{stdout}");
    // vs_pl: medians of the per-round ratios 0.5, 1, 1.5 and 0.75, 1.5, 2.25.
    assert_eq!(cols[12..15], ["1.000", "1.500", "1.500"], "{stdout}");
    for d in [old, new] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn diff_prints_ratios_of_matched_points() {
    let old = result_dir(
        "old",
        &[
            point("cna", 2, 2.0, 0.5, 1000, "keys=10"),
            point("parking_lot", 2, 4.0, 0.5, 400, "keys=10"),
            point("cna", 8, 1.0, 0.6, 5000, "keys=10"),
        ],
    );
    let new = result_dir(
        "new",
        &[
            point("cna", 2, 3.0, 0.55, 500, "keys=10"),
            point("parking_lot", 2, 4.0, 0.5, 400, "keys=10"),
            point("cna", 32, 1.0, 0.6, 5000, "keys=10"),
        ],
    );
    let out = numa_bench(&[&old, &new]);
    let stdout = stdout_of(&out);
    let cols = row(&stdout, "cna");
    // workload threads lock old new ratio old_fair new_fair ratio old_p99 new_p99 ratio
    // old_vs_pl new_vs_pl ratio
    assert_eq!(
        cols,
        [
            "kv", "2", "cna", "2.000", "3.000", "1.500", "0.500", "0.550", "1.100", "1000", "500",
            "0.500", "0.500", "0.750", "1.500"
        ],
        "{stdout}"
    );
    assert!(stdout.contains("only in OLD") && stdout.contains("kv cna threads=8"));
    assert!(stdout.contains("only in NEW") && stdout.contains("kv cna threads=32"));
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("parking_lot") && l.contains("1.000 over 1 point")),
        "{stdout}"
    );
    // points.json given directly works as well as its directory.
    let out = numa_bench(&[&old.join("points.json"), &new]);
    assert!(out.status.success());
    for d in [old, new] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn diff_fails_clearly() {
    let a = result_dir("a", &[point("cna", 2, 2.0, 0.5, 1000, "keys=10")]);
    let b = result_dir("b", &[point("cna", 2, 2.0, 0.5, 1000, "keys=99")]);
    let empty =
        std::env::temp_dir().join(format!("numa-bench-diff-cli-{}-empty", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();

    let out = numa_bench(&[&a, &b]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("no common points") && err.contains("keys=99"),
        "{err}"
    );

    let out = numa_bench(&[&a, &empty]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("cannot read") && err.contains("points.json"),
        "{err}"
    );

    std::fs::write(empty.join("points.json"), "{\"points\": 3}").unwrap();
    let out = numa_bench(&[&a, &empty]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("is not a numa-bench result file"), "{err}");
    for d in [a, b, empty] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn diff_against_another_baseline_lock() {
    let old = result_dir(
        "baseline-old",
        &[
            point("combining", 2, 2.0, 0.5, 1000, "keys=10"),
            point("cna", 2, 4.0, 0.5, 400, "keys=10"),
            point("parking_lot", 2, 8.0, 0.5, 400, "keys=10"),
        ],
    );
    let new = result_dir(
        "baseline-new",
        &[
            point("combining", 2, 3.0, 0.5, 1000, "keys=10"),
            point("cna", 2, 4.0, 0.5, 400, "keys=10"),
            point("parking_lot", 2, 8.0, 0.5, 400, "keys=10"),
        ],
    );
    let run = |baseline: &str| {
        Command::new(env!("CARGO_BIN_EXE_numa-bench"))
            .args(["diff", "--baseline", baseline])
            .args([&old, &new])
            .output()
            .expect("running numa-bench")
    };
    let out = run("cna");
    let stdout = stdout_of(&out);
    assert!(
        stdout.contains("old_vs_cna") && !stdout.contains("vs_pl"),
        "{stdout}"
    );
    let cols = row(&stdout, "combining");
    // combining over cna: 0.5 in OLD, 0.75 in NEW.
    assert_eq!(cols[12..15], ["0.500", "0.750", "1.500"], "{stdout}");
    let cols = row(&stdout, "parking_lot");
    // parking_lot is a lock like any other here: twice cna's rate.
    assert_eq!(cols[12..15], ["2.000", "2.000", "1.000"], "{stdout}");

    let out = run("hq");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("baseline lock \"hq\"") && err.contains("cna, combining, parking_lot"),
        "{err}"
    );
    for d in [old, new] {
        std::fs::remove_dir_all(d).unwrap();
    }
}
