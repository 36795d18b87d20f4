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
        let hw = HwTopology::builder()
            .from_xml(xml)
            .map_err(|e| TopologyError::Xml {
                origin: origin.clone(),
                message: e.to_string(),
            })?
            .build()
            .map_err(|e| TopologyError::Xml {
                origin,
                message: e.to_string(),
            })?;
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
    if let Err(e) = std::fs::metadata(path) {
        return Err(fail(e.to_string()));
    }
    let mut builder = HwTopology::builder()
        .from_xml_file(path)
        .map_err(|e| fail(e.to_string()))?;
    if include_disallowed {
        builder = builder
            .with_flags(BuildFlags::INCLUDE_DISALLOWED)
            .map_err(|e| fail(e.to_string()))?;
    }
    let hw = builder.build().map_err(|e| fail(e.to_string()))?;
    convert(&hw, TopologySource::Xml(Some(path.to_owned())))
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
