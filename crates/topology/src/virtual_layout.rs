//! Virtual NUMA layouts and the `NUMA_TOPOLOGY` grammar.

use crate::cpulist::{format_cpu_list, parse_cpu_list};
use crate::error::{CpuListError, LayoutError, LayoutErrorReason, TopologyError};
use crate::{MAX_CPUS, MAX_NODES};
use std::fmt;
use std::str::FromStr;

/// A virtual NUMA layout: the machine's CPUs split over more (virtual) nodes
/// than it really has, so NUMA-aware code can be tested on a one-node box.
/// It tests a lock's *ordering*, not the hardware's latency.
///
/// # Grammar (`NUMA_TOPOLOGY` and [`FromStr`])
/// ```text
/// spec     = "nodes=" COUNT           ; COUNT nodes, the CPUs spread in blocks
///          | cpulist *( ";" cpulist ) ; node i gets the i-th CPU list
/// cpulist  = ""                       ; a CPU-less node
///          | item *( "," item )
/// item     = CPU | CPU "-" CPU        ; a single CPU or an inclusive range
/// COUNT    = decimal digits, 1 ..= MAX_NODES (1024)
/// CPU      = decimal digits, 0 ..= MAX_CPUS - 1 (8191)
/// ```
/// Whitespace around the whole specification is ignored, none is allowed
/// inside. A CPU may appear only once, and at least one node must have a CPU.
/// Examples: `nodes=4`, `0-3;4-7`, `0,2;1,3`, `0-1;2-3;` (third node
/// CPU-less).
///
/// `nodes=N` assigns the machine's online CPUs, sorted, in contiguous blocks:
/// the `i`-th of `n` CPUs goes to node `i * N / n` (so with more nodes than
/// CPUs some nodes have none). With explicit lists, CPUs not listed belong
/// to no node, and [`current_node`](crate::current_node) reports node 0 for
/// them.
///
/// [`Display`](fmt::Display) writes the canonical form (shortest ranges),
/// which parses back to an equal value.
///
/// # Examples
/// ```
/// use numa_topology::VirtualLayout;
/// let l: VirtualLayout = "0,1,2,3;4-7".parse()?;
/// assert_eq!(l.to_string(), "0-3;4-7");
/// assert_eq!(l.to_string().parse::<VirtualLayout>()?, l);
/// assert!("nodes=0".parse::<VirtualLayout>().is_err());
/// # Ok::<(), numa_topology::LayoutError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VirtualLayout {
    pub(crate) kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Spread(usize),
    Explicit(Vec<Vec<usize>>),
}

impl VirtualLayout {
    /// `nodes` virtual nodes with the CPUs spread over them in blocks.
    ///
    /// # Errors
    /// [`LayoutErrorReason::NodeCountOutOfRange`] unless `1 <= nodes <= MAX_NODES`.
    pub fn spread(nodes: usize) -> Result<Self, LayoutError> {
        if nodes == 0 || nodes > MAX_NODES {
            return Err(LayoutError {
                input: format!("nodes={nodes}"),
                reason: LayoutErrorReason::NodeCountOutOfRange {
                    count: nodes.to_string(),
                },
            });
        }
        Ok(VirtualLayout {
            kind: Kind::Spread(nodes),
        })
    }

    /// Node `i` gets the CPUs `cpus_per_node[i]` (an empty list: a CPU-less
    /// node).
    ///
    /// # Errors
    /// A [`LayoutError`] if there are no nodes or more than `MAX_NODES`, a
    /// CPU is `>= MAX_CPUS`, listed twice, or no node has a CPU.
    pub fn explicit(cpus_per_node: Vec<Vec<usize>>) -> Result<Self, LayoutError> {
        let input = || {
            cpus_per_node
                .iter()
                .map(|cpus| {
                    let mut c = cpus.clone();
                    c.sort_unstable();
                    c.dedup();
                    format_cpu_list(&c)
                })
                .collect::<Vec<_>>()
                .join(";")
        };
        let fail = |reason| {
            Err(LayoutError {
                input: input(),
                reason,
            })
        };
        if cpus_per_node.is_empty() {
            return fail(LayoutErrorReason::Empty);
        }
        let mut checker = Checker::default();
        for cpus in &cpus_per_node {
            if let Err(reason) = checker.add(cpus.clone()) {
                return fail(reason);
            }
        }
        checker.finish().or_else(fail)
    }

    /// Reads `NUMA_TOPOLOGY`. `Ok(None)` when it is unset or empty.
    ///
    /// # Errors
    /// [`TopologyError::MalformedEnv`] naming the value, if it does not
    /// follow the grammar.
    pub fn from_env() -> Result<Option<Self>, TopologyError> {
        match std::env::var_os(crate::ENV_VAR) {
            None => Ok(None),
            Some(v) => {
                let text = v.to_string_lossy();
                if text.trim().is_empty() {
                    Ok(None)
                } else {
                    text.parse().map(Some).map_err(TopologyError::MalformedEnv)
                }
            }
        }
    }

    /// Number of virtual nodes.
    pub fn node_count(&self) -> usize {
        match &self.kind {
            Kind::Spread(n) => *n,
            Kind::Explicit(nodes) => nodes.len(),
        }
    }

    /// The CPU lists of each virtual node when the machine's CPUs are
    /// `online_cpus` (OS indexes). Explicit lists are returned as given,
    /// even CPUs that are not online.
    pub fn cpus_per_node(&self, online_cpus: &[usize]) -> Vec<Vec<usize>> {
        match &self.kind {
            Kind::Explicit(nodes) => nodes.clone(),
            Kind::Spread(n) => {
                let mut cpus = online_cpus.to_vec();
                cpus.sort_unstable();
                cpus.dedup();
                let total = cpus.len();
                let mut out = vec![Vec::new(); *n];
                for (i, cpu) in cpus.into_iter().enumerate() {
                    out[i * *n / total].push(cpu);
                }
                out
            }
        }
    }
}

/// Validates node CPU lists one at a time, so a long malformed
/// specification fails at the first conflict without building every list.
#[derive(Default)]
struct Checker {
    /// Node owning each CPU so far.
    owner: Vec<Option<usize>>,
    nodes: Vec<Vec<usize>>,
}

impl Checker {
    fn add(&mut self, mut cpus: Vec<usize>) -> Result<(), LayoutErrorReason> {
        let node = self.nodes.len();
        if node >= MAX_NODES {
            return Err(LayoutErrorReason::NodeCountOutOfRange {
                count: (node + 1).to_string(),
            });
        }
        cpus.sort_unstable();
        for (i, &cpu) in cpus.iter().enumerate() {
            if cpu >= MAX_CPUS {
                return Err(LayoutErrorReason::CpuList {
                    node,
                    source: CpuListError::CpuTooLarge { cpu },
                });
            }
            if i > 0 && cpus[i - 1] == cpu {
                return Err(LayoutErrorReason::CpuList {
                    node,
                    source: CpuListError::Duplicate { cpu },
                });
            }
            if self.owner.len() <= cpu {
                self.owner.resize(cpu + 1, None);
            }
            if let Some(first) = self.owner[cpu] {
                return Err(LayoutErrorReason::CpuInTwoNodes {
                    cpu,
                    first,
                    second: node,
                });
            }
            self.owner[cpu] = Some(node);
        }
        self.nodes.push(cpus);
        Ok(())
    }

    fn finish(self) -> Result<VirtualLayout, LayoutErrorReason> {
        if self.nodes.is_empty() {
            return Err(LayoutErrorReason::Empty);
        }
        if self.nodes.iter().all(Vec::is_empty) {
            return Err(LayoutErrorReason::NoCpus);
        }
        Ok(VirtualLayout {
            kind: Kind::Explicit(self.nodes),
        })
    }
}

impl FromStr for VirtualLayout {
    type Err = LayoutError;

    fn from_str(s: &str) -> Result<Self, LayoutError> {
        let spec = s.trim();
        let fail = |reason| {
            Err(LayoutError {
                input: s.to_owned(),
                reason,
            })
        };
        if spec.is_empty() {
            return fail(LayoutErrorReason::Empty);
        }
        if let Some(value) = spec.strip_prefix("nodes=") {
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return fail(LayoutErrorReason::BadNodeCount {
                    value: value.to_owned(),
                });
            }
            let nodes = if value.trim_start_matches('0').len() > 9 {
                usize::MAX
            } else {
                value.parse().unwrap_or(usize::MAX)
            };
            return VirtualLayout::spread(nodes).or_else(|e| {
                fail(match e.reason {
                    // Echo the count as typed, not as it saturated.
                    LayoutErrorReason::NodeCountOutOfRange { .. } => {
                        LayoutErrorReason::NodeCountOutOfRange {
                            count: value.to_owned(),
                        }
                    }
                    other => other,
                })
            });
        }
        let mut checker = Checker::default();
        for (node, text) in spec.split(';').enumerate() {
            let cpus = if text.is_empty() {
                Vec::new()
            } else {
                match parse_cpu_list(text) {
                    Ok(cpus) => cpus,
                    Err(source) => return fail(LayoutErrorReason::CpuList { node, source }),
                }
            };
            if let Err(reason) = checker.add(cpus) {
                return fail(reason);
            }
        }
        checker.finish().or_else(fail)
    }
}

impl fmt::Display for VirtualLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Spread(n) => write!(f, "nodes={n}"),
            Kind::Explicit(nodes) => {
                for (i, cpus) in nodes.iter().enumerate() {
                    if i > 0 {
                        f.write_str(";")?;
                    }
                    f.write_str(&format_cpu_list(cpus))?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(s: &str) -> LayoutErrorReason {
        let e = s.parse::<VirtualLayout>().unwrap_err();
        assert_eq!(e.input, s, "the error names the input");
        e.reason
    }

    #[test]
    fn parses_both_forms_and_round_trips() {
        for (text, canonical, nodes) in [
            ("nodes=4", "nodes=4", 4),
            ("  nodes=1\n", "nodes=1", 1),
            ("nodes=0004", "nodes=4", 4),
            ("0-3;4-7", "0-3;4-7", 2),
            ("0,1,2,3;4,5,6,7", "0-3;4-7", 2),
            ("0,2;1,3", "0,2;1,3", 2),
            ("0-1;2-3;", "0-1;2-3;", 3),
            (";5", ";5", 2),
            ("7", "7", 1),
        ] {
            let l: VirtualLayout = text.parse().unwrap();
            assert_eq!(l.node_count(), nodes, "{text}");
            assert_eq!(l.to_string(), canonical, "{text}");
            assert_eq!(canonical.parse::<VirtualLayout>().unwrap(), l);
        }
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        assert_eq!(reason(""), LayoutErrorReason::Empty);
        assert_eq!(reason("   "), LayoutErrorReason::Empty);
        assert_eq!(
            reason("nodes="),
            LayoutErrorReason::BadNodeCount { value: "".into() }
        );
        assert_eq!(
            reason("nodes=-1"),
            LayoutErrorReason::BadNodeCount { value: "-1".into() }
        );
        assert_eq!(
            reason("nodes=+2"),
            LayoutErrorReason::BadNodeCount { value: "+2".into() }
        );
        assert_eq!(
            reason("nodes=0"),
            LayoutErrorReason::NodeCountOutOfRange { count: "0".into() }
        );
        assert_eq!(
            reason("nodes=1025"),
            LayoutErrorReason::NodeCountOutOfRange {
                count: "1025".into()
            }
        );
        assert_eq!(
            reason("nodes=99999999999999999999999999"),
            LayoutErrorReason::NodeCountOutOfRange {
                count: "99999999999999999999999999".into()
            }
        );
        assert_eq!(
            reason("nodes = 4"),
            LayoutErrorReason::CpuList {
                node: 0,
                source: CpuListError::NotANumber {
                    item: "nodes = 4".into()
                }
            }
        );
        assert_eq!(
            reason("0-3;3-5"),
            LayoutErrorReason::CpuInTwoNodes {
                cpu: 3,
                first: 0,
                second: 1
            }
        );
        assert_eq!(
            reason("0;1,,2"),
            LayoutErrorReason::CpuList {
                node: 1,
                source: CpuListError::EmptyItem
            }
        );
        assert_eq!(
            reason("0; 1"),
            LayoutErrorReason::CpuList {
                node: 1,
                source: CpuListError::NotANumber { item: " 1".into() }
            }
        );
        assert_eq!(reason(";"), LayoutErrorReason::NoCpus);
        assert_eq!(
            reason("5-2"),
            LayoutErrorReason::CpuList {
                node: 0,
                source: CpuListError::ReversedRange { first: 5, last: 2 }
            }
        );
        assert!(matches!(
            reason(&";".repeat(MAX_NODES)),
            LayoutErrorReason::NodeCountOutOfRange { count } if count == (MAX_NODES + 1).to_string()
        ));
        // A conflict fails at once, before the following lists are parsed.
        let long = format!("0-8191;0-8191{}", ";0-8191".repeat(500));
        assert_eq!(
            reason(&long),
            LayoutErrorReason::CpuInTwoNodes {
                cpu: 0,
                first: 0,
                second: 1
            }
        );
        // The largest layout: MAX_NODES nodes.
        let max = format!("0{}", ";".repeat(MAX_NODES - 1));
        assert_eq!(
            max.parse::<VirtualLayout>().unwrap().node_count(),
            MAX_NODES
        );
    }

    #[test]
    fn constructors_check_their_input() {
        assert!(VirtualLayout::spread(0).is_err());
        assert!(VirtualLayout::spread(3).is_ok());
        assert!(VirtualLayout::explicit(vec![]).is_err());
        assert_eq!(
            VirtualLayout::explicit(vec![vec![1, 1]])
                .unwrap_err()
                .reason,
            LayoutErrorReason::CpuList {
                node: 0,
                source: CpuListError::Duplicate { cpu: 1 }
            }
        );
        assert_eq!(
            VirtualLayout::explicit(vec![vec![0], vec![MAX_CPUS]])
                .unwrap_err()
                .reason,
            LayoutErrorReason::CpuList {
                node: 1,
                source: CpuListError::CpuTooLarge { cpu: MAX_CPUS }
            }
        );
        let l = VirtualLayout::explicit(vec![vec![3, 1], vec![]]).unwrap();
        assert_eq!(l.to_string(), "1,3;");
    }

    #[test]
    fn spread_assigns_contiguous_blocks() {
        let l = VirtualLayout::spread(4).unwrap();
        let cpus: Vec<usize> = (0..8).collect();
        assert_eq!(
            l.cpus_per_node(&cpus),
            vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]
        );
        // More nodes than CPUs: some nodes get none.
        assert_eq!(
            l.cpus_per_node(&[0, 1]),
            vec![vec![0], vec![], vec![1], vec![]]
        );
        // Uneven split, non-contiguous OS indexes.
        let l3 = VirtualLayout::spread(3).unwrap();
        assert_eq!(
            l3.cpus_per_node(&[10, 2, 4, 6, 8]),
            vec![vec![2, 4], vec![6, 8], vec![10]]
        );
    }
}
