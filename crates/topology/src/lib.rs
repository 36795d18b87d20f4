//! The machine's NUMA layout, and a fast "which node am I on".
//!
//! NUMA-aware locks (`numa-spin`, `cst-mutex`) call [`current_node`] on
//! every slow path to keep a contended lock on one node for a while. This
//! crate answers that in under 5 ns (3.6 ns median measured with RDPID),
//! and describes the machine as a [`Topology`]: packages, NUMA nodes
//! (CPU-less memory nodes such as GPU memory or HBM included), cores, PUs
//! (logical CPUs), the node of each PU and the NUMA distance matrix.
//!
//! Use it to size per-node data and to learn where a thread runs. Do not use
//! it for correctness: a thread can migrate right after [`current_node`]
//! returns, so the answer is a hint.
//!
//! # Sources
//! - the running machine: [`Topology::system`] (hwloc with the `hwloc`
//!   feature, else Linux sysfs: [`Topology::from_sysfs`]);
//! - an hwloc XML export: [`Topology::from_xml_file`], [`Topology::from_xml_str`];
//! - an hwloc synthetic description: [`Topology::from_synthetic`]
//!   (`"pack:2 numa:2 core:4 pu:2"`);
//! - a virtual layout for machines with fewer nodes than a test needs:
//!   [`VirtualLayout`] and [`Topology::from_virtual`], activated for
//!   [`current_node`] by [`set_virtual_layout`] or the environment variable
//!   `NUMA_TOPOLOGY` (grammar on [`VirtualLayout`]: `nodes=4`, `0-3;4-7`, ...).
//!
//! # Which node a PU belongs to
//! The most local node whose cpuset contains it (fewest PUs), ties to a node
//! without subtype, then to the lowest OS index; a PU in no node's cpuset
//! belongs to no node. Details on [`Topology`].
//!
//! # Current node
//! [`current_node`] returns, in order: the node assigned to the thread with
//! [`set_current_thread_node`] (tests, benchmarks); the virtual node of the
//! current CPU if a virtual layout is active; the real node. On x86-64 Linux
//! the real node is `TSC_AUX >> 12` read with `RDPID` (the kernel stores
//! `(node << 12) | cpu` there), checked once against `sched_getcpu` and the
//! machine's topology; otherwise the current CPU ([`CpuSource`]: `RDPID`,
//! `sched_getcpu`, `RDTSCP`) indexes a CPU-to-node table.
//!
//! **If the topology cannot be read** (no sysfs, no hwloc), [`current_node`]
//! works as if the machine had one node (node 0), logs one warning once per
//! process through the [`log`](https://docs.rs/log) facade (target
//! `numa_topology`; nothing is printed unless the program installs a logger),
//! and [`fallback_reason`] returns that message. A
//! malformed `NUMA_TOPOLOGY` is reported the same way and ignored.
//!
//! # Examples
//! ```
//! use numa_topology::{current_node, set_current_thread_node, Topology, VirtualLayout};
//!
//! // Tests pretend the thread runs on node 2.
//! set_current_thread_node(Some(2));
//! assert_eq!(current_node(), 2);
//! set_current_thread_node(None);
//!
//! // A virtual 2-node layout over 4 CPUs.
//! let layout: VirtualLayout = "0-1;2-3".parse()?;
//! let topo = Topology::from_virtual(&layout, &[0, 1, 2, 3])?;
//! assert_eq!(topo.pu_to_node(3), Some(1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The machine, whatever it is:
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # #[cfg(target_os = "linux")] {
//! let topo = numa_topology::Topology::system()?;
//! println!("{} nodes, {} PUs", topo.numa_node_count(), topo.pu_count());
//! // current_node() answers from the active topology: this machine, or the
//! // virtual layout in NUMA_TOPOLOGY.
//! let active = numa_topology::active_topology();
//! assert!(active.node(numa_topology::current_node()).is_some());
//! # }
//! # Ok(()) }
//! ```
//!
//! # Cargo features
//! - `hwloc` (off by default): read topologies through hwloc (the
//!   `hwlocality` crate, linking the system libhwloc >= 2.8; on Debian
//!   `apt-get install libhwloc-dev libudev-dev pkg-config`). Needed for XML
//!   and synthetic sources; binds threads with hwloc. Without it the crate
//!   links no C library beyond libc and reads Linux sysfs.

#![cfg_attr(docsrs, feature(doc_cfg))]
// Also set for the workspace ([workspace.lints]); stated here so the crate says it alone.
#![warn(missing_docs)]

mod bind;
mod clock;
mod cpu_source;
mod cpulist;
mod current;
mod error;
#[cfg(feature = "hwloc")]
mod hwloc;
mod sysfs;
mod system;
mod topology;
mod virtual_layout;

pub use bind::bind_current_thread_to_node;
pub use clock::monotonic_ns;
pub use cpu_source::CpuSource;
pub use cpulist::{format_cpu_list, parse_cpu_list};
pub use current::{
    active_topology, current_cpu, current_node, current_node_method, current_thread_node,
    fallback_reason, machine_topology, set_current_thread_node, set_virtual_layout,
};
pub use error::{CpuListError, LayoutError, LayoutErrorReason, TopologyError};
pub use topology::{NumaNode, Topology, TopologySource};
pub use virtual_layout::VirtualLayout;

/// The environment variable holding a [`VirtualLayout`] (read once, at the
/// first [`current_node`] call).
pub const ENV_VAR: &str = "NUMA_TOPOLOGY";

/// CPU indexes are below this (Linux's largest `NR_CPUS`, 8192).
pub const MAX_CPUS: usize = 8192;

/// Virtual node counts are at most this (Linux's `MAX_NUMNODES` with
/// `NODES_SHIFT` = 10).
pub const MAX_NODES: usize = 1024;
