//! Typed errors. Every variant names the input that was wrong.
//!
//! `Display` and `Error` are written out here (no derive macro), so the
//! crate, at the bottom of its users' dependency graphs, pulls in no
//! procedural macro.

use std::fmt;
use std::path::PathBuf;

/// Why a CPU list such as `0-3,8` (Linux `cpulist` format, also used by
/// [`VirtualLayout`](crate::VirtualLayout)) could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CpuListError {
    /// An item between commas is empty (`0,,1`, `0,` or `,`).
    EmptyItem,
    /// An item is not a decimal number or a `first-last` range.
    NotANumber {
        /// The offending item.
        item: String,
    },
    /// A range whose first CPU is after its last (`7-3`).
    ReversedRange {
        /// First CPU of the range.
        first: usize,
        /// Last CPU of the range.
        last: usize,
    },
    /// A CPU index at or above [`MAX_CPUS`](crate::MAX_CPUS).
    CpuTooLarge {
        /// The offending CPU index.
        cpu: usize,
    },
    /// The same CPU appears twice.
    Duplicate {
        /// The repeated CPU index.
        cpu: usize,
    },
}

/// Why a virtual layout (the `NUMA_TOPOLOGY` grammar, see
/// [`VirtualLayout`](crate::VirtualLayout)) is malformed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutErrorReason {
    /// The specification is empty or only whitespace.
    Empty,
    /// `nodes=` is not followed by a plain decimal number.
    BadNodeCount {
        /// The text after `nodes=`.
        value: String,
    },
    /// `nodes=0`, or more nodes than [`MAX_NODES`](crate::MAX_NODES).
    NodeCountOutOfRange {
        /// The requested node count, as typed (`nodes=99999999999` gives
        /// `99999999999`).
        count: String,
    },
    /// The CPU list of one node is malformed.
    CpuList {
        /// Position (virtual node index) of the bad list.
        node: usize,
        /// What is wrong with it.
        source: CpuListError,
    },
    /// A CPU is assigned to two nodes.
    CpuInTwoNodes {
        /// The CPU.
        cpu: usize,
        /// The first node listing it.
        first: usize,
        /// The second node listing it.
        second: usize,
    },
    /// Every node's CPU list is empty.
    NoCpus,
}

/// A malformed virtual layout, with the text that was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutError {
    /// The specification as given (for layouts built from code: its
    /// rendering in the `NUMA_TOPOLOGY` grammar, as far as it went).
    pub input: String,
    /// What is wrong with it.
    pub reason: LayoutErrorReason,
}

/// Errors from building a [`Topology`](crate::Topology), binding a thread or
/// setting a virtual layout. Never a panic: each names its input.
#[derive(Debug)]
#[non_exhaustive]
pub enum TopologyError {
    /// The `NUMA_TOPOLOGY` environment variable does not follow the grammar.
    MalformedEnv(LayoutError),
    /// A virtual layout given from code is malformed.
    Layout(LayoutError),
    /// hwloc could not read an XML export.
    Xml {
        /// `file <path>` or `string (<n> bytes)`.
        origin: String,
        /// hwloc's explanation (hwloc mostly reports only "invalid input").
        message: String,
    },
    /// hwloc refused a synthetic description.
    Synthetic {
        /// The description as given.
        description: String,
        /// hwloc's explanation.
        message: String,
    },
    /// This build cannot read hwloc XML or synthetic descriptions.
    NeedsHwloc {
        /// The requested source.
        what: &'static str,
    },
    /// hwloc failed while discovering the running machine.
    Hwloc {
        /// What was being done.
        operation: &'static str,
        /// hwloc's explanation.
        message: String,
    },
    /// A sysfs file or directory that the topology needs is missing or unreadable.
    SysfsMissing {
        /// The path that could not be read.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A sysfs file has content that does not parse.
    SysfsMalformed {
        /// The file.
        path: PathBuf,
        /// Its (trimmed) content.
        content: String,
        /// Why it does not parse.
        reason: String,
    },
    /// No NUMA node with this OS index exists in the topology.
    UnknownNode {
        /// The requested node.
        node: usize,
    },
    /// The NUMA node exists but has no CPU, so a thread cannot be bound to it.
    CpulessNode {
        /// The requested node.
        node: usize,
    },
    /// The OS refused to bind the thread.
    Bind {
        /// The requested node.
        node: usize,
        /// The OS or hwloc explanation.
        message: String,
    },
    /// The pieces of a topology contradict each other (e.g. a distance
    /// matrix whose size is not the node count).
    Inconsistent(String),
    /// The operation is not implemented on this operating system.
    Unsupported(&'static str),
}

impl fmt::Display for CpuListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuListError::EmptyItem => f.write_str("empty item in CPU list"),
            CpuListError::NotANumber { item } => {
                write!(f, "{item:?} is not a CPU number or a range first-last")
            }
            CpuListError::ReversedRange { first, last } => {
                write!(f, "range {first}-{last} is reversed")
            }
            CpuListError::CpuTooLarge { cpu } => write!(
                f,
                "CPU {cpu} is out of range (the limit is {} CPUs)",
                crate::MAX_CPUS
            ),
            CpuListError::Duplicate { cpu } => write!(f, "CPU {cpu} is listed twice"),
        }
    }
}

impl std::error::Error for CpuListError {}

impl fmt::Display for LayoutErrorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutErrorReason::Empty => f.write_str("the specification is empty"),
            LayoutErrorReason::BadNodeCount { value } => {
                write!(f, "{value:?} after `nodes=` is not a decimal number")
            }
            LayoutErrorReason::NodeCountOutOfRange { count } => write!(
                f,
                "{count} nodes is out of range (1..={})",
                crate::MAX_NODES
            ),
            LayoutErrorReason::CpuList { node, source } => write!(f, "node {node}: {source}"),
            LayoutErrorReason::CpuInTwoNodes { cpu, first, second } => {
                write!(f, "CPU {cpu} is in node {first} and in node {second}")
            }
            LayoutErrorReason::NoCpus => f.write_str("no node has any CPU"),
        }
    }
}

impl std::error::Error for LayoutErrorReason {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LayoutErrorReason::CpuList { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "malformed virtual NUMA layout {:?}: {}",
            self.input, self.reason
        )
    }
}

impl std::error::Error for LayoutError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.reason.source()
    }
}

impl From<LayoutError> for TopologyError {
    fn from(e: LayoutError) -> Self {
        TopologyError::Layout(e)
    }
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyError::MalformedEnv(e) => write!(f, "environment variable NUMA_TOPOLOGY: {e}"),
            TopologyError::Layout(e) => fmt::Display::fmt(e, f),
            TopologyError::Xml { origin, message } => {
                write!(f, "bad hwloc XML {origin}: {message}")
            }
            TopologyError::Synthetic {
                description,
                message,
            } => write!(
                f,
                "unknown or invalid hwloc synthetic description {description:?}: {message}"
            ),
            TopologyError::NeedsHwloc { what } => {
                write!(f, "{what} needs the `hwloc` cargo feature of numa-topology")
            }
            TopologyError::Hwloc { operation, message } => {
                write!(f, "hwloc failed to {operation}: {message}")
            }
            TopologyError::SysfsMissing { path, source } => {
                write!(f, "cannot read sysfs {}: {source}", path.display())
            }
            TopologyError::SysfsMalformed {
                path,
                content,
                reason,
            } => write!(
                f,
                "unexpected content {content:?} in sysfs {}: {reason}",
                path.display()
            ),
            TopologyError::UnknownNode { node } => write!(f, "no NUMA node with OS index {node}"),
            TopologyError::CpulessNode { node } => {
                write!(f, "NUMA node {node} has no CPU to bind to")
            }
            TopologyError::Bind { node, message } => write!(
                f,
                "binding the current thread to NUMA node {node} failed: {message}"
            ),
            TopologyError::Inconsistent(what) => write!(f, "inconsistent topology: {what}"),
            TopologyError::Unsupported(what) => {
                write!(f, "{what} is not supported on this operating system")
            }
        }
    }
}

impl std::error::Error for TopologyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TopologyError::MalformedEnv(e) => Some(e),
            // `transparent`: the wrapped error's own source.
            TopologyError::Layout(e) => e.source(),
            TopologyError::SysfsMissing { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn messages_name_the_input_and_chain_their_sources() {
        let list = CpuListError::NotANumber { item: "x".into() };
        assert_eq!(
            list.to_string(),
            "\"x\" is not a CPU number or a range first-last"
        );
        let layout = LayoutError {
            input: "0-1;x".into(),
            reason: LayoutErrorReason::CpuList {
                node: 1,
                source: list.clone(),
            },
        };
        assert_eq!(
            layout.to_string(),
            "malformed virtual NUMA layout \"0-1;x\": node 1: \"x\" is not a CPU number or a range first-last"
        );
        assert_eq!(layout.source().unwrap().to_string(), list.to_string());
        let env = TopologyError::MalformedEnv(layout.clone());
        assert!(
            env.to_string()
                .starts_with("environment variable NUMA_TOPOLOGY: malformed")
        );
        assert_eq!(env.source().unwrap().to_string(), layout.to_string());
        let code: TopologyError = layout.clone().into();
        assert_eq!(code.to_string(), layout.to_string());
        let missing = TopologyError::SysfsMissing {
            path: "/sys/x".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert!(
            missing
                .to_string()
                .starts_with("cannot read sysfs /sys/x: ")
        );
        assert!(missing.source().is_some());
        assert_eq!(
            LayoutErrorReason::NodeCountOutOfRange {
                count: "99999999999".into()
            }
            .to_string(),
            format!(
                "99999999999 nodes is out of range (1..={})",
                crate::MAX_NODES
            )
        );
    }
}
