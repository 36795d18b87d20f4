//! `numa-bench topology --json --xml F` for every hwloc XML of the repository's
//! test data, against `expected.json`. Needs the `hwloc` feature.
//!
//! The data directory is `$NUMA_TOPOLOGY_TESTDATA` if set, else
//! `<workspace>/crates/topology/tests/data/topologies`; the test fails if neither exists.
#![cfg(feature = "hwloc")]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The keys the command must reproduce (`crates/topology/tests/data/topologies/README.md`).
const KEYS: [&str; 11] = [
    "packages",
    "numa_nodes",
    "cpuless_numa_nodes",
    "cores",
    "pus",
    "numa_node_os_indexes",
    "node_pus",
    "pu_to_node",
    "distances",
    "node_subtypes",
    "numa_nodes_with_empty_cpuset",
];

fn testdata_dir() -> PathBuf {
    let candidates: Vec<PathBuf> = std::env::var_os("NUMA_TOPOLOGY_TESTDATA")
        .map(PathBuf::from)
        .into_iter()
        .chain(std::iter::once(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/topology/tests/data/topologies"),
        ))
        .collect();
    for dir in &candidates {
        if dir.join("expected.json").is_file() {
            return dir.clone();
        }
    }
    panic!(
        "hwloc test data not found: tried {candidates:?}. Set NUMA_TOPOLOGY_TESTDATA to a \
         directory like crates/topology/tests/data/topologies (it holds expected.json)."
    );
}

fn run_json(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_numa-bench"))
        .arg("topology")
        .arg("--json")
        .args(args)
        .output()
        .expect("run numa-bench");
    assert!(
        out.status.success(),
        "numa-bench topology --json {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
}

#[test]
fn json_matches_expected_for_every_shared_xml() {
    let dir = testdata_dir();
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap())
            .expect("expected.json is JSON");
    let entries = expected.as_array().expect("an array");
    assert!(
        entries.len() >= 9,
        "expected at least the 9 shared machines"
    );
    for want in entries {
        let file = want["file"].as_str().expect("file name");
        let path = dir.join(file);
        let got = run_json(&["--xml", path.to_str().expect("UTF-8 path")]);
        for key in KEYS {
            assert_eq!(got[key], want[key], "{file}: key {key}");
        }
    }
}

#[test]
fn include_disallowed_shows_the_whole_machine() {
    let dir = testdata_dir();
    let path = dir.join("64intel64-3g2n+2n-irregulargroups+pci.xml");
    let path = path.to_str().expect("UTF-8 path");
    let restricted = run_json(&["--xml", path]);
    let whole = run_json(&["--xml", path, "--include-disallowed"]);
    assert_eq!(restricted["pus"], 16);
    assert_eq!(whole["pus"], 64);
    assert_eq!(whole["numa_nodes"], 8);
}

#[test]
fn synthetic_and_virtual_sources() {
    let got = run_json(&["--synthetic", "pack:2 numa:2 core:4 pu:2"]);
    assert_eq!(got["packages"], 2);
    assert_eq!(got["numa_nodes"], 4);
    assert_eq!(got["pus"], 32);
    assert_eq!(got["pu_to_node"]["17"], 2);
    let got = run_json(&["--virtual", "0;;1"]);
    assert_eq!(got["numa_nodes"], 3);
    assert_eq!(got["cpuless_numa_nodes"], 1);
    assert_eq!(got["pu_to_node"]["1"], 2);
}

#[test]
fn bad_sources_fail_with_a_message_naming_them() {
    for (args, needle) in [
        (vec!["--synthetic", "pack:2 banana:3"], "banana"),
        (
            vec!["--xml", "/nonexistent/machine.xml"],
            "/nonexistent/machine.xml",
        ),
        (vec!["--virtual", "0-3;3"], "CPU 3"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_numa-bench"))
            .arg("topology")
            .args(&args)
            .output()
            .expect("run numa-bench");
        assert!(!out.status.success(), "{args:?} should fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(needle),
            "{args:?}: stderr {stderr:?} lacks {needle:?}"
        );
    }
}
