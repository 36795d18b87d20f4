//! Every hwloc XML export in `tests/data/topologies/` against `expected.json`
//! (what hwloc 2.9's own tools say). Needs the `hwloc` feature.
//!
//! The data directory is `$NUMA_TOPOLOGY_TESTDATA` if set, else this crate's
//! `tests/data/topologies` (in the repository and in the packaged crate). If
//! neither exists the test fails.
#![cfg(feature = "hwloc")]

use numa_topology::{Topology, TopologyError};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn testdata_dir() -> PathBuf {
    let candidates: Vec<PathBuf> = std::env::var_os("NUMA_TOPOLOGY_TESTDATA")
        .map(PathBuf::from)
        .into_iter()
        .chain(std::iter::once(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/topologies"),
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

fn expected() -> Vec<Value> {
    let dir = testdata_dir();
    let text = std::fs::read_to_string(dir.join("expected.json")).expect("read expected.json");
    let v: Value = serde_json::from_str(&text).expect("expected.json is JSON");
    v.as_array().expect("expected.json is an array").clone()
}

fn usize_of(v: &Value) -> usize {
    v.as_u64().expect("a count") as usize
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(usize_of)
        .collect()
}

fn check(file: &str, want: &Value, t: &Topology) {
    let ctx = |key: &str| format!("{file}: {key}");
    assert_eq!(
        t.packages(),
        usize_of(&want["packages"]),
        "{}",
        ctx("packages")
    );
    assert_eq!(
        t.numa_node_count(),
        usize_of(&want["numa_nodes"]),
        "{}",
        ctx("numa_nodes")
    );
    assert_eq!(
        t.cpuless_numa_nodes(),
        usize_of(&want["cpuless_numa_nodes"]),
        "{}",
        ctx("cpuless_numa_nodes")
    );
    assert_eq!(
        t.numa_nodes_with_empty_cpuset(),
        usize_of(&want["numa_nodes_with_empty_cpuset"]),
        "{}",
        ctx("numa_nodes_with_empty_cpuset")
    );
    assert_eq!(t.cores(), usize_of(&want["cores"]), "{}", ctx("cores"));
    assert_eq!(t.pu_count(), usize_of(&want["pus"]), "{}", ctx("pus"));
    assert_eq!(
        t.numa_node_os_indexes(),
        usizes(&want["numa_node_os_indexes"]),
        "{}",
        ctx("numa_node_os_indexes")
    );

    let want_node_pus: BTreeMap<usize, Vec<usize>> = want["node_pus"]
        .as_object()
        .expect("node_pus object")
        .iter()
        .map(|(k, v)| (k.parse().expect("node key"), usizes(v)))
        .collect();
    let got_node_pus: BTreeMap<usize, Vec<usize>> = t
        .numa_nodes()
        .iter()
        .map(|n| (n.os_index(), n.cpus().to_vec()))
        .collect();
    assert_eq!(got_node_pus, want_node_pus, "{}", ctx("node_pus"));

    let want_subtypes: BTreeMap<usize, String> = want["node_subtypes"]
        .as_object()
        .expect("node_subtypes object")
        .iter()
        .map(|(k, v)| {
            (
                k.parse().expect("node key"),
                v.as_str().expect("subtype").to_owned(),
            )
        })
        .collect();
    let got_subtypes: BTreeMap<usize, String> = t
        .numa_nodes()
        .iter()
        .filter_map(|n| n.subtype().map(|s| (n.os_index(), s.to_owned())))
        .collect();
    assert_eq!(got_subtypes, want_subtypes, "{}", ctx("node_subtypes"));

    let want_pu_to_node: BTreeMap<usize, Option<usize>> = want["pu_to_node"]
        .as_object()
        .expect("pu_to_node object")
        .iter()
        .map(|(k, v)| (k.parse().expect("PU key"), v.as_u64().map(|n| n as usize)))
        .collect();
    let got_pu_to_node: BTreeMap<usize, Option<usize>> = t.pu_node_pairs().collect();
    assert_eq!(got_pu_to_node, want_pu_to_node, "{}", ctx("pu_to_node"));
    for (&pu, &node) in &want_pu_to_node {
        assert_eq!(t.pu_to_node(pu), node, "{}", ctx("pu_to_node()"));
    }

    let want_distances: Option<Vec<Vec<u64>>> = want["distances"].as_array().map(|rows| {
        rows.iter()
            .map(|r| {
                r.as_array()
                    .expect("row")
                    .iter()
                    .map(|d| d.as_u64().expect("distance"))
                    .collect()
            })
            .collect()
    });
    assert_eq!(
        t.distances().map(<[_]>::to_vec),
        want_distances,
        "{}",
        ctx("distances")
    );
}

#[test]
fn every_shared_xml_matches_expected_json() {
    let dir = testdata_dir();
    let all = expected();
    let mut xml_files: Vec<String> = std::fs::read_dir(&dir)
        .expect("list test data")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".xml"))
        .collect();
    xml_files.sort();
    let mut listed: Vec<String> = all
        .iter()
        .map(|e| e["file"].as_str().expect("file name").to_owned())
        .collect();
    listed.sort();
    assert_eq!(
        xml_files, listed,
        "every XML has an expected.json entry and vice versa"
    );
    assert!(listed.len() >= 9, "expected at least the 9 shared machines");

    for want in &all {
        let file = want["file"].as_str().expect("file name");
        let path = dir.join(file);
        let t = Topology::from_xml_file(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        check(file, want, &t);
        // The string entry point reads the same machine.
        let text = std::fs::read_to_string(&path).expect("read XML");
        let from_str = Topology::from_xml_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        check(file, want, &from_str);
    }
}

#[test]
fn include_disallowed_counts_match_where_expected_json_has_them() {
    let dir = testdata_dir();
    let mut checked = 0;
    for want in expected() {
        let Some(counts) = want.get("with_include_disallowed") else {
            continue;
        };
        let file = want["file"].as_str().expect("file name");
        let t = Topology::from_xml_file_including_disallowed(dir.join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(t.packages(), usize_of(&counts["packages"]), "{file}");
        assert_eq!(
            t.numa_node_count(),
            usize_of(&counts["numa_nodes"]),
            "{file}"
        );
        assert_eq!(t.cores(), usize_of(&counts["cores"]), "{file}");
        assert_eq!(t.pu_count(), usize_of(&counts["pus"]), "{file}");
        checked += 1;
    }
    assert!(
        checked >= 1,
        "expected.json has with_include_disallowed entries"
    );
}

#[test]
fn truncated_xml_is_a_typed_error() {
    let dir = testdata_dir();
    let text = std::fs::read_to_string(dir.join("24em64t-2n6c2t-pci.xml")).expect("read XML");
    let err = Topology::from_xml_str(&text[..text.len() / 2]).unwrap_err();
    assert!(matches!(err, TopologyError::Xml { .. }), "{err:?}");
}
