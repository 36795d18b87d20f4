//! The [`Topology`] value and the PU-to-node rule.

use crate::error::TopologyError;
use crate::virtual_layout::{Kind, VirtualLayout};

/// Where a [`Topology`] came from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TopologySource {
    /// The running machine, discovered by hwloc.
    Hwloc,
    /// The running machine, read from Linux sysfs (`/sys/devices/system`).
    Sysfs,
    /// An hwloc XML export (file path, or `None` for a string).
    Xml(Option<std::path::PathBuf>),
    /// An hwloc synthetic description.
    Synthetic(String),
    /// A virtual layout over the given CPUs.
    Virtual(VirtualLayout),
    /// The one-node fallback used when the machine's topology is unknown.
    SingleNodeFallback,
}

/// One NUMA node: a memory domain, possibly without CPUs (GPU memory, HBM,
/// CXL memory, or a node whose CPUs are offline or outside our cpuset).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaNode {
    pub(crate) os_index: usize,
    pub(crate) cpus: Vec<usize>,
    pub(crate) subtype: Option<String>,
    pub(crate) memory_bytes: Option<u64>,
}

impl NumaNode {
    /// Builds a node description (used by custom topology sources and tests).
    ///
    /// `cpus` is the node's locality: the OS indexes of the PUs it is close
    /// to (hwloc's cpuset of the node). It is sorted and deduplicated here.
    pub fn new(os_index: usize, mut cpus: Vec<usize>, subtype: Option<String>) -> Self {
        cpus.sort_unstable();
        cpus.dedup();
        NumaNode {
            os_index,
            cpus,
            subtype,
            memory_bytes: None,
        }
    }

    /// The OS index (Linux: the `N` of `/sys/devices/system/node/nodeN`).
    pub fn os_index(&self) -> usize {
        self.os_index
    }

    /// OS indexes of the PUs in this node's locality (hwloc cpuset
    /// intersected with the topology's PUs), ascending. Empty for a node
    /// with an empty cpuset. Note a GPU-memory node attached to a package
    /// has that package's PUs here, yet no PU *maps* to it
    /// (see [`Topology::pu_to_node`]).
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// The node's subtype (hwloc: `GPUMemory`, `MCDRAM`, `HBM`, ...), `None`
    /// for plain DRAM.
    pub fn subtype(&self) -> Option<&str> {
        self.subtype.as_deref()
    }

    /// Memory local to the node in bytes, when the source reports it.
    pub fn memory_bytes(&self) -> Option<u64> {
        self.memory_bytes
    }
}

/// A machine's layout: packages, NUMA nodes, cores, PUs (logical CPUs), the
/// node of each PU and the NUMA distance matrix.
///
/// Build it from the running machine ([`Topology::system`]), an hwloc XML
/// export ([`Topology::from_xml_file`], [`Topology::from_xml_str`]), an
/// hwloc synthetic description ([`Topology::from_synthetic`]), Linux sysfs
/// ([`Topology::from_sysfs`]) or a virtual layout
/// ([`Topology::from_virtual`]).
///
/// # PU-to-node rule
/// A PU belongs to the *most local* NUMA node whose cpuset contains it: the
/// candidate with the fewest PUs. Ties go to a node without a subtype (plain
/// DRAM rather than GPU memory or HBM), then to the lowest OS index. A PU
/// that no node contains belongs to no node (`None`): this happens when a
/// cpuset restriction or offline node removed its local memory. A node that
/// no PU maps to is *CPU-less*, even when its cpuset is not empty. The rule
/// matches `hwloc-calc --local-memory-flags 1 --best-memattr locality`
/// (hwloc 2.9).
///
/// # Examples
/// ```
/// use numa_topology::{Topology, VirtualLayout};
///
/// let layout: VirtualLayout = "0-3;4-7;".parse()?;
/// let topo = Topology::from_virtual(&layout, &(0..8).collect::<Vec<_>>())?;
/// assert_eq!(topo.numa_node_os_indexes(), vec![0, 1, 2]);
/// assert_eq!(topo.pu_to_node(5), Some(1));
/// assert_eq!(topo.cpuless_numa_nodes(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    source: TopologySource,
    packages: usize,
    cores: usize,
    /// PU OS indexes, ascending.
    pus: Vec<usize>,
    /// Node of each PU, parallel to `pus`.
    pu_nodes: Vec<Option<usize>>,
    /// Nodes in ascending OS index order.
    nodes: Vec<NumaNode>,
    /// Row-major, `nodes.len()` squared, ascending OS index order.
    distances: Option<Vec<Vec<u64>>>,
}

impl Topology {
    /// Assembles a topology from its parts and applies the PU-to-node rule.
    ///
    /// `pus` are PU OS indexes; node cpusets are intersected with them.
    /// `distances`, when given, is a square matrix whose rows and columns
    /// follow `nodes` sorted by ascending OS index.
    ///
    /// # Errors
    /// [`TopologyError::Inconsistent`] if two nodes share an OS index, a PU
    /// is listed twice, or the distance matrix is not `nodes × nodes`.
    pub fn from_parts(
        source: TopologySource,
        packages: usize,
        cores: usize,
        mut pus: Vec<usize>,
        mut nodes: Vec<NumaNode>,
        distances: Option<Vec<Vec<u64>>>,
    ) -> Result<Self, TopologyError> {
        pus.sort_unstable();
        if let Some(w) = pus.windows(2).find(|w| w[0] == w[1]) {
            return Err(TopologyError::Inconsistent(format!(
                "PU {} listed twice",
                w[0]
            )));
        }
        nodes.sort_by_key(|n| n.os_index);
        if let Some(w) = nodes.windows(2).find(|w| w[0].os_index == w[1].os_index) {
            return Err(TopologyError::Inconsistent(format!(
                "two NUMA nodes with OS index {}",
                w[0].os_index
            )));
        }
        for node in &mut nodes {
            node.cpus.retain(|c| pus.binary_search(c).is_ok());
        }
        if let Some(d) = &distances
            && (d.len() != nodes.len() || d.iter().any(|row| row.len() != nodes.len()))
        {
            return Err(TopologyError::Inconsistent(format!(
                "distance matrix is not {n}x{n} for {n} NUMA nodes",
                n = nodes.len()
            )));
        }
        let pu_nodes = pus.iter().map(|&pu| most_local_node(&nodes, pu)).collect();
        Ok(Topology {
            source,
            packages,
            cores,
            pus,
            pu_nodes,
            nodes,
            distances,
        })
    }

    /// Where this topology came from.
    pub fn source(&self) -> &TopologySource {
        &self.source
    }

    /// Number of packages (sockets).
    pub fn packages(&self) -> usize {
        self.packages
    }

    /// Number of cores.
    pub fn cores(&self) -> usize {
        self.cores
    }

    /// Number of PUs (logical CPUs, hardware threads).
    pub fn pu_count(&self) -> usize {
        self.pus.len()
    }

    /// PU OS indexes, ascending.
    pub fn pus(&self) -> &[usize] {
        &self.pus
    }

    /// Number of NUMA nodes, CPU-less ones included.
    pub fn numa_node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The NUMA nodes in ascending OS index order.
    pub fn numa_nodes(&self) -> &[NumaNode] {
        &self.nodes
    }

    /// OS indexes of all NUMA nodes, ascending.
    pub fn numa_node_os_indexes(&self) -> Vec<usize> {
        self.nodes.iter().map(|n| n.os_index).collect()
    }

    /// The node with this OS index.
    pub fn node(&self, os_index: usize) -> Option<&NumaNode> {
        self.nodes
            .binary_search_by_key(&os_index, |n| n.os_index)
            .ok()
            .map(|i| &self.nodes[i])
    }

    /// The PUs in a node's locality (its cpuset), or `None` if there is no
    /// such node. See [`NumaNode::cpus`].
    pub fn node_pus(&self, os_index: usize) -> Option<&[usize]> {
        self.node(os_index).map(NumaNode::cpus)
    }

    /// The node a PU belongs to, by the PU-to-node rule (see the type docs).
    /// `None` if the PU does not exist or no node contains it.
    pub fn pu_to_node(&self, pu: usize) -> Option<usize> {
        self.pus
            .binary_search(&pu)
            .ok()
            .and_then(|i| self.pu_nodes[i])
    }

    /// `(pu, node)` for every PU, ascending by PU.
    pub fn pu_node_pairs(&self) -> impl Iterator<Item = (usize, Option<usize>)> + '_ {
        self.pus.iter().copied().zip(self.pu_nodes.iter().copied())
    }

    /// The PUs that map to a node (a subset of [`Topology::node_pus`]).
    pub fn pus_mapped_to(&self, os_index: usize) -> Vec<usize> {
        self.pu_node_pairs()
            .filter(|&(_, n)| n == Some(os_index))
            .map(|(pu, _)| pu)
            .collect()
    }

    /// Number of NUMA nodes that no PU maps to.
    pub fn cpuless_numa_nodes(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| !self.pu_nodes.contains(&Some(n.os_index)))
            .count()
    }

    /// Number of NUMA nodes whose cpuset has no PU (stricter than
    /// [`Topology::cpuless_numa_nodes`]).
    pub fn numa_nodes_with_empty_cpuset(&self) -> usize {
        self.nodes.iter().filter(|n| n.cpus.is_empty()).count()
    }

    /// The NUMA latency matrix (ACPI SLIT units: 10 = local), rows and
    /// columns in ascending node OS index order, when the source has one.
    pub fn distances(&self) -> Option<&[Vec<u64>]> {
        self.distances.as_deref()
    }

    /// The largest node OS index plus one (0 if there is no node): the size
    /// of a per-node array indexed by OS index.
    pub fn node_index_bound(&self) -> usize {
        self.nodes.last().map_or(0, |n| n.os_index + 1)
    }

    /// The one-node topology used when the machine cannot be read: one
    /// package, one core per PU, one node 0 holding `pus` (PU 0 if empty).
    pub fn single_node(mut pus: Vec<usize>) -> Self {
        pus.sort_unstable();
        pus.dedup();
        if pus.is_empty() {
            pus.push(0);
        }
        Topology {
            source: TopologySource::SingleNodeFallback,
            packages: 1,
            cores: pus.len(),
            pu_nodes: vec![Some(0); pus.len()],
            nodes: vec![NumaNode::new(0, pus.clone(), None)],
            pus,
            distances: None,
        }
    }
}

/// The PU-to-node rule (see [`Topology`]).
fn most_local_node(nodes: &[NumaNode], pu: usize) -> Option<usize> {
    nodes
        .iter()
        .filter(|n| n.cpus.binary_search(&pu).is_ok())
        .min_by_key(|n| (n.cpus.len(), n.subtype.is_some(), n.os_index))
        .map(|n| n.os_index)
}

impl Topology {
    /// A virtual topology: `layout` applied to the PUs `online_cpus`. One
    /// package, one core per PU, virtual nodes `0..layout.node_count()`, no
    /// distance matrix. For explicit layouts the PUs are the CPUs listed.
    ///
    /// # Errors
    /// [`TopologyError::Inconsistent`] if `online_cpus` lists a CPU twice.
    pub fn from_virtual(
        layout: &VirtualLayout,
        online_cpus: &[usize],
    ) -> Result<Self, TopologyError> {
        let per_node = layout.cpus_per_node(online_cpus);
        let pus: Vec<usize> = match layout.kind {
            Kind::Spread(_) => online_cpus.to_vec(),
            Kind::Explicit(_) => {
                let mut all: Vec<usize> = per_node.iter().flatten().copied().collect();
                all.sort_unstable();
                all
            }
        };
        let nodes = per_node
            .into_iter()
            .enumerate()
            .map(|(i, cpus)| NumaNode::new(i, cpus, None))
            .collect();
        Topology::from_parts(
            TopologySource::Virtual(layout.clone()),
            1,
            pus.len(),
            pus,
            nodes,
            None,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(os: usize, cpus: &[usize], subtype: Option<&str>) -> NumaNode {
        NumaNode::new(os, cpus.to_vec(), subtype.map(str::to_owned))
    }

    #[test]
    fn most_local_node_wins_then_no_subtype_then_lowest_index() {
        let topo = Topology::from_parts(
            TopologySource::SingleNodeFallback,
            1,
            8,
            (0..8).collect(),
            vec![
                node(3, &[0, 1, 2, 3], Some("GPUMemory")),
                node(2, &[0, 1, 2, 3], None),
                node(1, &[0, 1, 2, 3, 4, 5, 6, 7], None),
                node(5, &[6, 7], Some("HBM")),
                node(4, &[6, 7], Some("HBM")),
            ],
            None,
        )
        .unwrap();
        assert_eq!(topo.pu_to_node(0), Some(2), "tie broken by no subtype");
        assert_eq!(topo.pu_to_node(4), Some(1), "only node containing it");
        assert_eq!(topo.pu_to_node(6), Some(4), "smallest cpuset, lowest os");
        assert_eq!(topo.pu_to_node(9), None, "no such PU");
        assert_eq!(topo.cpuless_numa_nodes(), 2, "nodes 3 and 5");
        assert_eq!(topo.numa_nodes_with_empty_cpuset(), 0);
    }

    #[test]
    fn pu_in_no_node_maps_to_none_and_cpusets_are_intersected() {
        let topo = Topology::from_parts(
            TopologySource::SingleNodeFallback,
            2,
            4,
            vec![0, 1, 2, 3],
            vec![node(1, &[2, 3, 9], None), node(4, &[], None)],
            Some(vec![vec![10, 20], vec![20, 10]]),
        )
        .unwrap();
        assert_eq!(topo.pu_to_node(0), None);
        assert_eq!(topo.pu_to_node(3), Some(1));
        assert_eq!(topo.node_pus(1), Some(&[2, 3][..]));
        assert_eq!(topo.numa_nodes_with_empty_cpuset(), 1);
        assert_eq!(topo.node_index_bound(), 5);
    }

    #[test]
    fn single_node_fallback_maps_everything_to_node_zero() {
        let t = Topology::single_node(vec![3, 1, 3]);
        assert_eq!(t.pus(), &[1, 3]);
        assert_eq!(t.pu_to_node(3), Some(0));
        assert_eq!(t.numa_node_os_indexes(), vec![0]);
        assert_eq!(t.cpuless_numa_nodes(), 0);
        assert_eq!(Topology::single_node(vec![]).pus(), &[0]);
    }

    #[test]
    fn inconsistent_parts_are_errors() {
        let dup = Topology::from_parts(
            TopologySource::SingleNodeFallback,
            1,
            1,
            vec![0],
            vec![node(0, &[0], None), node(0, &[], None)],
            None,
        );
        assert!(matches!(dup, Err(TopologyError::Inconsistent(m)) if m.contains("OS index 0")));
        let bad_matrix = Topology::from_parts(
            TopologySource::SingleNodeFallback,
            1,
            1,
            vec![0],
            vec![node(0, &[0], None)],
            Some(vec![vec![10, 20]]),
        );
        assert!(matches!(bad_matrix, Err(TopologyError::Inconsistent(_))));
    }

    #[test]
    fn virtual_topology_maps_pus() {
        let l: VirtualLayout = "0,2;1,3;".parse().unwrap();
        let t = Topology::from_virtual(&l, &[0, 1, 2, 3]).unwrap();
        assert_eq!(t.numa_node_os_indexes(), vec![0, 1, 2]);
        assert_eq!(t.pu_to_node(2), Some(0));
        assert_eq!(t.pu_to_node(3), Some(1));
        assert_eq!(t.cpuless_numa_nodes(), 1);
        assert_eq!(t.pu_count(), 4);
        assert_eq!(t.distances(), None);
        let s = Topology::from_virtual(&VirtualLayout::spread(2).unwrap(), &[0, 1, 2, 3]).unwrap();
        assert_eq!(s.node_pus(1), Some(&[2, 3][..]));
        assert_eq!(s.pu_to_node(1), Some(0));
    }
}
