//! The running machine from Linux sysfs (`/sys/devices/system/cpu` and
//! `/sys/devices/system/node`), without hwloc.
//!
//! Files read (see the kernel's `Documentation/ABI/stable/sysfs-devices-node`
//! and `Documentation/ABI/stable/sysfs-devices-system-cpu`):
//! - `cpu/online`: the PUs (offline CPUs are not PUs, as in hwloc);
//! - `cpu/cpuN/topology/physical_package_id` and `core_cpus_list` (older
//!   kernels: `thread_siblings_list`): packages and cores;
//! - `node/nodeN/cpulist`, `node/nodeN/distance`, `node/nodeN/meminfo`.

use crate::cpulist::parse_cpu_list;
use crate::error::TopologyError;
use crate::topology::{NumaNode, Topology, TopologySource};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

impl Topology {
    /// The running machine from Linux sysfs under `/sys`.
    ///
    /// # Errors
    /// [`TopologyError::SysfsMissing`] naming the path when a required file
    /// or directory is absent (e.g. a kernel without `CONFIG_NUMA` has no
    /// `/sys/devices/system/node`), [`TopologyError::SysfsMalformed`] naming
    /// the file when its content does not parse.
    pub fn from_sysfs() -> Result<Self, TopologyError> {
        Topology::from_sysfs_root(Path::new("/sys"))
    }

    /// Like [`Topology::from_sysfs`] with another sysfs mount point: `root`
    /// holds `devices/system/cpu` and `devices/system/node` (for tests on
    /// saved copies of other machines' sysfs).
    ///
    /// # Errors
    /// As [`Topology::from_sysfs`].
    pub fn from_sysfs_root(root: &Path) -> Result<Self, TopologyError> {
        let cpu_dir = root.join("devices/system/cpu");
        let node_dir = root.join("devices/system/node");
        let pus = read_cpu_list(&cpu_dir.join("online"))?;

        let mut packages = BTreeSet::new();
        let mut cores = BTreeSet::new();
        for &cpu in &pus {
            let topo = cpu_dir.join(format!("cpu{cpu}/topology"));
            let package =
                read_optional(&topo.join("physical_package_id"))?.unwrap_or_else(|| "0".to_owned());
            let core = match read_optional(&topo.join("core_cpus_list"))? {
                Some(list) => list,
                None => read_optional(&topo.join("thread_siblings_list"))?
                    .unwrap_or_else(|| cpu.to_string()),
            };
            cores.insert((package.clone(), core));
            packages.insert(package);
        }

        let entries = fs::read_dir(&node_dir).map_err(|source| TopologyError::SysfsMissing {
            path: node_dir.clone(),
            source,
        })?;
        let mut node_ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| TopologyError::SysfsMissing {
                path: node_dir.clone(),
                source,
            })?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if let Some(id) = name.strip_prefix("node")
                && !id.is_empty()
                && id.bytes().all(|b| b.is_ascii_digit())
                && let Ok(id) = id.parse::<usize>()
            {
                node_ids.push(id);
            }
        }
        node_ids.sort_unstable();
        if node_ids.is_empty() {
            return Err(TopologyError::SysfsMissing {
                path: node_dir.join("node0"),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no nodeN directory"),
            });
        }

        let mut nodes = Vec::with_capacity(node_ids.len());
        let mut rows = Vec::with_capacity(node_ids.len());
        for &id in &node_ids {
            let dir = node_dir.join(format!("node{id}"));
            let cpus = read_cpu_list(&dir.join("cpulist"))?;
            let mut node = NumaNode::new(id, cpus, None);
            node.memory_bytes = read_mem_total(&dir.join("meminfo"))?;
            nodes.push(node);
            rows.push(read_distance_row(&dir.join("distance"))?);
        }
        // Each row lists distances to the online nodes in ascending order.
        let distances = if rows
            .iter()
            .all(|r| r.as_ref().is_some_and(|r| r.len() == node_ids.len()))
        {
            Some(rows.into_iter().flatten().collect())
        } else {
            None
        };
        Topology::from_parts(
            TopologySource::Sysfs,
            packages.len(),
            cores.len(),
            pus,
            nodes,
            distances,
        )
    }
}

fn read_required(path: &Path) -> Result<String, TopologyError> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|source| TopologyError::SysfsMissing {
            path: path.to_owned(),
            source,
        })
}

fn read_optional(path: &Path) -> Result<Option<String>, TopologyError> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s.trim().to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(TopologyError::SysfsMissing {
            path: path.to_owned(),
            source,
        }),
    }
}

fn malformed(path: &Path, content: &str, reason: String) -> TopologyError {
    TopologyError::SysfsMalformed {
        path: path.to_owned(),
        content: content.chars().take(200).collect(),
        reason,
    }
}

/// A cpulist file; an empty file is an empty list (CPU-less node).
fn read_cpu_list(path: &Path) -> Result<Vec<usize>, TopologyError> {
    let text = read_required(path)?;
    if text.is_empty() {
        return Ok(Vec::new());
    }
    parse_cpu_list(&text).map_err(|e| malformed(path, &text, e.to_string()))
}

fn read_distance_row(path: &Path) -> Result<Option<Vec<u64>>, TopologyError> {
    let Some(text) = read_optional(path)? else {
        return Ok(None);
    };
    text.split_ascii_whitespace()
        .map(|w| {
            w.parse::<u64>()
                .map_err(|_| malformed(path, &text, format!("{w:?} is not a distance")))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// `Node N MemTotal:  16384 kB` from a node's meminfo, in bytes.
fn read_mem_total(path: &Path) -> Result<Option<u64>, TopologyError> {
    let Some(text) = read_optional(path)? else {
        return Ok(None);
    };
    for line in text.lines() {
        if let Some((_, rest)) = line.split_once("MemTotal:") {
            let kb = rest
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .map_err(|_| malformed(path, line, "MemTotal is not a number of kB".into()))?;
            return Ok(Some(kb.saturating_mul(1024)));
        }
    }
    Ok(None)
}

/// The online CPUs from `/sys/devices/system/cpu/online`, else
/// `0..available_parallelism`, else `[0]`.
pub(crate) fn online_cpus_or_count() -> Vec<usize> {
    let path = PathBuf::from("/sys/devices/system/cpu/online");
    match read_cpu_list(&path) {
        Ok(cpus) if !cpus.is_empty() => cpus,
        _ => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name)
    }

    #[test]
    fn two_sockets_with_cpuless_node() {
        let t = Topology::from_sysfs_root(&fixture("sysfs-2s-cpuless")).unwrap();
        assert_eq!(t.source(), &TopologySource::Sysfs);
        assert_eq!(t.packages(), 2);
        assert_eq!(t.cores(), 4);
        assert_eq!(t.pus(), &[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(t.numa_node_os_indexes(), vec![0, 1, 2]);
        assert_eq!(t.node_pus(0), Some(&[0, 1, 4, 5][..]));
        assert_eq!(t.node_pus(2), Some(&[][..]));
        assert_eq!(t.pu_to_node(4), Some(0));
        assert_eq!(t.pu_to_node(6), Some(1));
        assert_eq!(t.cpuless_numa_nodes(), 1);
        assert_eq!(
            t.node(2).unwrap().memory_bytes(),
            Some(8 * 1024 * 1024 * 1024)
        );
        assert_eq!(
            t.distances(),
            Some(&[vec![10, 21, 17], vec![21, 10, 28], vec![17, 28, 10]][..])
        );
    }

    #[test]
    fn offline_cpus_are_not_pus_and_node_cpusets_are_trimmed() {
        // cpu/online is 1-3 and node1 lists the offline CPU 0.
        let t = Topology::from_sysfs_root(&fixture("sysfs-offline-cpu0")).unwrap();
        assert_eq!(t.pus(), &[1, 2, 3]);
        assert_eq!(t.numa_node_os_indexes(), vec![1]);
        assert_eq!(t.node_pus(1), Some(&[1, 2, 3][..]));
        assert_eq!(t.cores(), 3, "no core_cpus_list: one core per PU");
        assert_eq!(t.distances(), None, "no distance files");
    }

    #[test]
    fn missing_node_directory_is_a_typed_error() {
        let err = Topology::from_sysfs_root(&fixture("sysfs-no-numa")).unwrap_err();
        match err {
            TopologyError::SysfsMissing { path, .. } => {
                assert!(path.ends_with("devices/system/node"), "{path:?}")
            }
            other => panic!("expected SysfsMissing, got {other:?}"),
        }
        let err = Topology::from_sysfs_root(&fixture("does-not-exist")).unwrap_err();
        assert!(
            matches!(&err, TopologyError::SysfsMissing { path, .. } if path.ends_with("cpu/online")),
            "{err}"
        );
    }

    #[test]
    fn malformed_cpulist_names_file_and_content() {
        let err = Topology::from_sysfs_root(&fixture("sysfs-malformed")).unwrap_err();
        match err {
            TopologyError::SysfsMalformed { path, content, .. } => {
                assert!(path.ends_with("node0/cpulist"), "{path:?}");
                assert_eq!(content, "0-x");
            }
            other => panic!("expected SysfsMalformed, got {other:?}"),
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_machine_parses() {
        let t = Topology::from_sysfs().unwrap();
        assert!(t.numa_node_count() >= 1);
        assert_eq!(t.pus(), online_cpus_or_count().as_slice());
        for pu in t.pus() {
            let linked = t.numa_nodes().iter().any(|n| {
                Path::new(&format!(
                    "/sys/devices/system/cpu/cpu{pu}/node{}",
                    n.os_index()
                ))
                .exists()
            });
            assert!(linked, "PU {pu} is in no sysfs node");
        }
    }
}
