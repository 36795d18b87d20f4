//! Topologies through hwloc (`hwlocality`, feature `hwloc`): the running
//! machine, XML exports and synthetic descriptions.

use crate::error::TopologyError;
use crate::topology::{NumaNode, Topology, TopologySource};
use hwlocality::Topology as HwTopology;
use hwlocality::object::types::ObjectType;
use hwlocality::topology::builder::BuildFlags;
use std::path::Path;

/// Name of the NUMA latency matrix in hwloc (`hwloc_distances_get_by_name`).
const NUMA_LATENCY: &str = "NUMALatency";

impl Topology {
    /// The running machine through hwloc.
    ///
    /// # Errors
    /// [`TopologyError::Hwloc`] if hwloc cannot discover the machine.
    pub fn from_hwloc() -> Result<Self, TopologyError> {
        let hw = HwTopology::new().map_err(|e| TopologyError::Hwloc {
            operation: "discover the running machine",
            message: e.to_string(),
        })?;
        convert(&hw, TopologySource::Hwloc)
    }

    /// Loads an hwloc XML export from a file (hwloc 2.x format; default
    /// flags, so disallowed objects are removed; no I/O objects).
    ///
    /// # Errors
    /// [`TopologyError::Xml`] naming the file if hwloc rejects it (missing
    /// file, not XML, hwloc 3 format, ...).
    pub fn from_xml_file(path: impl AsRef<Path>) -> Result<Self, TopologyError> {
        xml_file(path.as_ref(), false)
    }

    /// Like [`Topology::from_xml_file`], but keeps the objects outside the
    /// exported process's allowed cpuset/nodeset
    /// (`HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED`): the whole machine rather
    /// than what the process that wrote the XML could use.
    ///
    /// # Errors
    /// [`TopologyError::Xml`] naming the file if hwloc rejects it.
    pub fn from_xml_file_including_disallowed(
        path: impl AsRef<Path>,
    ) -> Result<Self, TopologyError> {
        xml_file(path.as_ref(), true)
    }

    /// Loads an hwloc XML export from a string. See [`Topology::from_xml_file`].
    ///
    /// # Errors
    /// [`TopologyError::Xml`] if hwloc rejects the text.
    pub fn from_xml_str(xml: &str) -> Result<Self, TopologyError> {
        let origin = format!("string ({} bytes)", xml.len());
        let fail = |message: String| TopologyError::Xml {
            origin: origin.clone(),
            message,
        };
        precheck_xml(xml).map_err(fail)?;
        let hw = guarded(|| {
            HwTopology::builder()
                .from_xml(xml)
                .map_err(|e| e.to_string())?
                .build()
                .map_err(|e| e.to_string())
        })
        .map_err(fail)?;
        convert(&hw, TopologySource::Xml(None))
    }

    /// An hwloc synthetic topology, e.g. `pack:2 numa:2 core:4 pu:2` (see
    /// hwloc's "Synthetic topologies" documentation).
    ///
    /// # Errors
    /// [`TopologyError::Synthetic`] naming the description if hwloc
    /// rejects it.
    pub fn from_synthetic(description: &str) -> Result<Self, TopologyError> {
        let fail = |message: String| TopologyError::Synthetic {
            description: description.to_owned(),
            message,
        };
        let hw = HwTopology::builder()
            .from_synthetic(description)
            .map_err(|e| fail(e.to_string()))?
            .build()
            .map_err(|e| fail(e.to_string()))?;
        convert(&hw, TopologySource::Synthetic(description.to_owned()))
    }
}

fn xml_file(path: &Path, include_disallowed: bool) -> Result<Topology, TopologyError> {
    let origin = format!("file {}", path.display());
    let fail = |message: String| TopologyError::Xml {
        origin: origin.clone(),
        message,
    };
    let bytes = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    precheck_xml(&String::from_utf8_lossy(&bytes)).map_err(fail)?;
    let hw = guarded(|| {
        let mut builder = HwTopology::builder()
            .from_xml_file(path)
            .map_err(|e| e.to_string())?;
        if include_disallowed {
            builder = builder
                .with_flags(BuildFlags::INCLUDE_DISALLOWED)
                .map_err(|e| e.to_string())?;
        }
        builder.build().map_err(|e| e.to_string())
    })
    .map_err(fail)?;
    convert(&hw, TopologySource::Xml(Some(path.to_owned())))
}

/// Rejects, before they reach hwloc, XML inputs that crash hwloc 2.9 or
/// `hwlocality` 1.0.0-alpha.13 instead of failing cleanly (found by the
/// `topology_xml` fuzz target, reproducers in `fuzz/regressions/topology_xml/`):
///
/// * an XML declaration with an encoding other than UTF-8 (e.g. `UTF-7`):
///   libxml2 fails with `EILSEQ`, which `hwlocality`'s
///   `TopologyBuilder::from_xml` turns into an `unreachable!` panic;
/// * an `<object>` with a `cpuset` or `nodeset` but no `complete_cpuset` /
///   `complete_nodeset`: hwloc 2.9 dereferences NULL while loading it
///   (fixed upstream after 2.9, open-mpi/hwloc#783). Every hwloc 2.x export
///   writes both, so no real export is refused.
///
/// The error message names what was wrong.
fn precheck_xml(xml: &str) -> Result<(), String> {
    for (i, _) in xml.match_indices("encoding=") {
        let value = xml[i + "encoding=".len()..].trim_start_matches(['"', '\'']);
        let value = &value[..value.find(['"', '\'']).unwrap_or(value.len())];
        if !value.eq_ignore_ascii_case("UTF-8") {
            return Err(format!(
                "unsupported XML encoding {value:?}: hwloc XML exports are UTF-8"
            ));
        }
    }
    let mut rest = xml;
    while let Some(start) = rest.find("<object") {
        let tag = &rest[start..];
        let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
        let has = |attr: &str| {
            tag.match_indices(attr)
                .any(|(i, _)| i > 0 && tag.as_bytes()[i - 1].is_ascii_whitespace())
        };
        for (set, complete) in [
            ("cpuset=", "complete_cpuset="),
            ("nodeset=", "complete_nodeset="),
        ] {
            if has(set) && !has(complete) {
                let shown: String = tag.chars().take(80).collect();
                return Err(format!(
                    "object without {} (not an hwloc 2.x export): {shown}",
                    complete.trim_end_matches('=')
                ));
            }
        }
        rest = &rest[start + 1..];
    }
    Ok(())
}

/// Runs an hwloc load, turning a panic inside `hwlocality` (an alpha
/// release; it panics on some libxml2 error codes it does not expect) into
/// an error message instead of unwinding through the caller.
fn guarded(load: impl FnOnce() -> Result<HwTopology, String>) -> Result<HwTopology, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(load)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        Err(format!("hwloc load failed inside hwlocality: {what}"))
    })
}

fn convert(hw: &HwTopology, source: TopologySource) -> Result<Topology, TopologyError> {
    let packages = hw.objects_with_type(ObjectType::Package).count();
    let cores = hw.objects_with_type(ObjectType::Core).count();
    let pus: Vec<usize> = hw
        .objects_with_type(ObjectType::PU)
        .filter_map(|pu| pu.os_index())
        .collect();
    let mut nodes = Vec::new();
    for obj in hw.objects_with_type(ObjectType::NUMANode) {
        let Some(os_index) = obj.os_index() else {
            continue;
        };
        let cpus = obj
            .cpuset()
            .map(|set| set.iter_set().map(usize::from).collect())
            .unwrap_or_default();
        let subtype = obj.subtype().map(|s| s.to_string_lossy().into_owned());
        let mut node = NumaNode::new(os_index, cpus, subtype);
        node.memory_bytes = Some(obj.total_memory()).filter(|&m| m > 0);
        nodes.push(node);
    }
    let distances = numa_latency(hw, &nodes);
    Topology::from_parts(source, packages, cores, pus, nodes, distances)
}

/// The `NUMALatency` matrix reordered to ascending node OS index, if hwloc
/// has one covering every node.
fn numa_latency(hw: &HwTopology, nodes: &[NumaNode]) -> Option<Vec<Vec<u64>>> {
    let all = hw.distances_with_name(NUMA_LATENCY).ok()?;
    let dist = all.first()?;
    let n = dist.num_objects();
    // Matrix position of each object, by OS index.
    let mut order: Vec<(usize, usize)> = Vec::with_capacity(n);
    for (pos, obj) in dist.objects().enumerate() {
        let obj = obj?;
        if obj.object_type() != ObjectType::NUMANode {
            return None;
        }
        order.push((obj.os_index()?, pos));
    }
    order.sort_unstable();
    let ids: Vec<usize> = order.iter().map(|&(os, _)| os).collect();
    let mut wanted: Vec<usize> = nodes.iter().map(NumaNode::os_index).collect();
    wanted.sort_unstable();
    if ids != wanted {
        return None;
    }
    let values = dist.distances();
    Some(
        order
            .iter()
            .map(|&(_, row)| {
                order
                    .iter()
                    .map(|&(_, col)| values[row * n + col])
                    .collect()
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_description_builds() {
        let t = Topology::from_synthetic("pack:2 numa:2 core:4 pu:2").unwrap();
        assert_eq!(t.packages(), 2);
        assert_eq!(t.numa_node_count(), 4);
        assert_eq!(t.cores(), 16);
        assert_eq!(t.pu_count(), 32);
        assert_eq!(t.node_pus(1), Some(&[8, 9, 10, 11, 12, 13, 14, 15][..]));
        assert_eq!(t.pu_to_node(17), Some(2));
        assert_eq!(t.cpuless_numa_nodes(), 0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn hwloc_and_sysfs_agree_on_this_machine() {
        let hw = Topology::from_hwloc().unwrap();
        let fs = Topology::from_sysfs().unwrap();
        assert_eq!(hw.pus(), fs.pus());
        assert_eq!(hw.numa_node_os_indexes(), fs.numa_node_os_indexes());
        assert_eq!(hw.packages(), fs.packages());
        assert_eq!(hw.cores(), fs.cores());
        for node in hw.numa_nodes() {
            assert_eq!(Some(node.cpus()), fs.node_pus(node.os_index()));
        }
        assert!(hw.pu_node_pairs().eq(fs.pu_node_pairs()));
    }

    #[test]
    fn unknown_synthetic_is_a_typed_error() {
        let err = Topology::from_synthetic("pack:2 banana:3").unwrap_err();
        assert!(
            matches!(&err, TopologyError::Synthetic { description, .. } if description == "pack:2 banana:3"),
            "{err:?}"
        );
    }

    #[test]
    fn xml_that_crashes_hwloc_is_refused_with_a_typed_error() {
        let utf7 =
            "<?xml version=\"1.0\" encoding=\"UTF-7\"?><topology version=\"2.0\"></topology>";
        let err = Topology::from_xml_str(utf7).unwrap_err();
        assert!(
            matches!(&err, TopologyError::Xml { message, .. } if message.contains("UTF-7")),
            "{err:?}"
        );
        let partial = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><topology version=\"2.0\">\
            <object type=\"Machine\" os_index=\"0\" cpuset=\"0x1\" nodeset=\"0x1\"/></topology>";
        let err = Topology::from_xml_str(partial).unwrap_err();
        assert!(
            matches!(&err, TopologyError::Xml { message, .. } if message.contains("complete_cpuset")),
            "{err:?}"
        );
    }

    #[test]
    fn bad_xml_is_a_typed_error() {
        let err = Topology::from_xml_str("<topology><oops").unwrap_err();
        assert!(
            matches!(&err, TopologyError::Xml { origin, .. } if origin.starts_with("string")),
            "{err:?}"
        );
        let err = Topology::from_xml_file("/nonexistent/topo.xml").unwrap_err();
        assert!(
            matches!(&err, TopologyError::Xml { origin, .. } if origin.contains("/nonexistent/topo.xml")),
            "{err:?}"
        );
    }
}
