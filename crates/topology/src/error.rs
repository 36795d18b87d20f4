//! Typed errors. Every variant names the input that was wrong.

use std::path::PathBuf;

/// Why a CPU list such as `0-3,8` (Linux `cpulist` format, also used by
/// [`VirtualLayout`](crate::VirtualLayout)) could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CpuListError {
    /// An item between commas is empty (`0,,1`, `0,` or `,`).
    #[error("empty item in CPU list")]
    EmptyItem,
    /// An item is not a decimal number or a `first-last` range.
    #[error("{item:?} is not a CPU number or a range first-last")]
    NotANumber {
        /// The offending item.
        item: String,
    },
    /// A range whose first CPU is after its last (`7-3`).
    #[error("range {first}-{last} is reversed")]
    ReversedRange {
        /// First CPU of the range.
        first: usize,
        /// Last CPU of the range.
        last: usize,
    },
    /// A CPU index at or above [`MAX_CPUS`](crate::MAX_CPUS).
    #[error("CPU {cpu} is out of range (the limit is {} CPUs)", crate::MAX_CPUS)]
    CpuTooLarge {
        /// The offending CPU index.
        cpu: usize,
    },
    /// The same CPU appears twice.
    #[error("CPU {cpu} is listed twice")]
    Duplicate {
        /// The repeated CPU index.
        cpu: usize,
    },
}

/// Why a virtual layout (the `NUMA_TOPOLOGY` grammar, see
/// [`VirtualLayout`](crate::VirtualLayout)) is malformed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutErrorReason {
    /// The specification is empty or only whitespace.
    #[error("the specification is empty")]
    Empty,
    /// `nodes=` is not followed by a plain decimal number.
    #[error("{value:?} after `nodes=` is not a decimal number")]
    BadNodeCount {
        /// The text after `nodes=`.
        value: String,
    },
    /// `nodes=0`, or more nodes than [`MAX_NODES`](crate::MAX_NODES).
    #[error("{nodes} nodes is out of range (1..={})", crate::MAX_NODES)]
    NodeCountOutOfRange {
        /// The requested node count.
        nodes: usize,
    },
    /// The CPU list of one node is malformed.
    #[error("node {node}: {source}")]
    CpuList {
        /// Position (virtual node index) of the bad list.
        node: usize,
        /// What is wrong with it.
        source: CpuListError,
    },
    /// A CPU is assigned to two nodes.
    #[error("CPU {cpu} is in node {first} and in node {second}")]
    CpuInTwoNodes {
        /// The CPU.
        cpu: usize,
        /// The first node listing it.
        first: usize,
        /// The second node listing it.
        second: usize,
    },
    /// Every node's CPU list is empty.
    #[error("no node has any CPU")]
    NoCpus,
}

/// A malformed virtual layout, with the text that was given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed virtual NUMA layout {input:?}: {reason}")]
pub struct LayoutError {
    /// The specification as given (for layouts built from code: its
    /// rendering in the `NUMA_TOPOLOGY` grammar, as far as it went).
    pub input: String,
    /// What is wrong with it.
    pub reason: LayoutErrorReason,
}

/// Errors from building a [`Topology`](crate::Topology), binding a thread or
/// setting a virtual layout. Never a panic: each names its input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// The `NUMA_TOPOLOGY` environment variable does not follow the grammar.
    #[error("environment variable NUMA_TOPOLOGY: {0}")]
    MalformedEnv(#[source] LayoutError),
    /// A virtual layout given from code is malformed.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// hwloc could not read an XML export.
    #[error("bad hwloc XML {origin}: {message}")]
    Xml {
        /// `file <path>` or `string (<n> bytes)`.
        origin: String,
        /// hwloc's explanation (hwloc mostly reports only "invalid input").
        message: String,
    },
    /// hwloc refused a synthetic description.
    #[error("unknown or invalid hwloc synthetic description {description:?}: {message}")]
    Synthetic {
        /// The description as given.
        description: String,
        /// hwloc's explanation.
        message: String,
    },
    /// This build cannot read hwloc XML or synthetic descriptions.
    #[error("{what} needs the `hwloc` cargo feature of numa-topology")]
    NeedsHwloc {
        /// The requested source.
        what: &'static str,
    },
    /// hwloc failed while discovering the running machine.
    #[error("hwloc failed to {operation}: {message}")]
    Hwloc {
        /// What was being done.
        operation: &'static str,
        /// hwloc's explanation.
        message: String,
    },
    /// A sysfs file or directory that the topology needs is missing or unreadable.
    #[error("cannot read sysfs {}: {source}", path.display())]
    SysfsMissing {
        /// The path that could not be read.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A sysfs file has content that does not parse.
    #[error("unexpected content {content:?} in sysfs {}: {reason}", path.display())]
    SysfsMalformed {
        /// The file.
        path: PathBuf,
        /// Its (trimmed) content.
        content: String,
        /// Why it does not parse.
        reason: String,
    },
    /// No NUMA node with this OS index exists in the topology.
    #[error("no NUMA node with OS index {node}")]
    UnknownNode {
        /// The requested node.
        node: usize,
    },
    /// The NUMA node exists but has no CPU, so a thread cannot be bound to it.
    #[error("NUMA node {node} has no CPU to bind to")]
    CpulessNode {
        /// The requested node.
        node: usize,
    },
    /// The OS refused to bind the thread.
    #[error("binding the current thread to NUMA node {node} failed: {message}")]
    Bind {
        /// The requested node.
        node: usize,
        /// The OS or hwloc explanation.
        message: String,
    },
    /// The pieces of a topology contradict each other (e.g. a distance
    /// matrix whose size is not the node count).
    #[error("inconsistent topology: {0}")]
    Inconsistent(String),
    /// The operation is not implemented on this operating system.
    #[error("{0} is not supported on this operating system")]
    Unsupported(&'static str),
}
