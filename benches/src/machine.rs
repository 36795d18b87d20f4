//! The machine the benchmark runs on, and where its threads go.
//!
//! Threads are spread round-robin over NUMA nodes: thread `i` goes to node
//! `i % nodes`. On a machine with several real nodes each thread is bound to its
//! node's CPUs (`sched_setaffinity`, man 2 sched_setaffinity). On a machine with one
//! node, `--virtual-nodes N` assigns thread `i` to virtual node `i % N` through
//! [`numa_topology::set_current_thread_node`]; nothing is bound then, and every
//! report says the nodes are virtual.

use std::fs;

use crate::BenchError;

/// What the benchmark knows about the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// Online CPUs usable by this process (`available_parallelism`).
    pub cpus: usize,
    /// Real NUMA nodes: for each, its OS index and its CPUs. One node holding all
    /// CPUs when the machine has no NUMA information.
    pub nodes: Vec<(usize, Vec<usize>)>,
}

impl Machine {
    /// Reads the running machine (Linux sysfs `/sys/devices/system/node`).
    pub fn detect() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut nodes = Vec::new();
        if let Ok(dir) = fs::read_dir("/sys/devices/system/node") {
            for entry in dir.flatten() {
                let name = entry.file_name();
                let Some(idx) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("node"))
                    .and_then(|n| n.parse::<usize>().ok())
                else {
                    continue;
                };
                let cpulist = fs::read_to_string(entry.path().join("cpulist")).unwrap_or_default();
                if let Ok(list) = parse_cpulist(cpulist.trim())
                    && !list.is_empty()
                {
                    nodes.push((idx, list));
                }
            }
        }
        nodes.sort();
        if nodes.is_empty() {
            nodes.push((0, (0..cpus).collect()));
        }
        Machine { cpus, nodes }
    }

    /// One line for report headers, e.g. `2 CPUs, 1 NUMA node`.
    pub fn describe(&self) -> String {
        let n = self.nodes.len();
        format!(
            "{} CPUs, {} NUMA node{}",
            self.cpus,
            n,
            if n == 1 { "" } else { "s" }
        )
    }
}

/// Parses a Linux cpulist (`0-3,8,10-11`, man 7 cpuset) into CPU numbers.
///
/// # Errors
/// [`BenchError::InvalidArg`] naming the bad part.
pub fn parse_cpulist(s: &str) -> Result<Vec<usize>, BenchError> {
    let mut out = Vec::new();
    if s.is_empty() {
        return Ok(out);
    }
    let bad = |part: &str| BenchError::InvalidArg {
        what: "cpulist",
        value: part.to_owned(),
        reason: "expected N or N-M with N <= M".into(),
    };
    for part in s.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let a: usize = a.trim().parse().map_err(|_| bad(part))?;
        let b: usize = b.trim().parse().map_err(|_| bad(part))?;
        if a > b {
            return Err(bad(part));
        }
        out.extend(a..=b);
    }
    Ok(out)
}

/// Where the threads of one run go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Nodes the threads are spread over.
    pub nodes: usize,
    /// Whether the nodes are virtual.
    pub is_virtual: bool,
    /// Per node, the CPUs its threads are bound to; `None` = no binding.
    pub bind: Option<Vec<Vec<usize>>>,
}

impl Placement {
    /// Chooses the placement for `machine` given `--virtual-nodes`.
    ///
    /// # Errors
    /// [`BenchError::InvalidArg`] for `--virtual-nodes 0`.
    pub fn new(machine: &Machine, virtual_nodes: Option<usize>) -> Result<Self, BenchError> {
        match virtual_nodes {
            Some(0) => Err(BenchError::InvalidArg {
                what: "--virtual-nodes",
                value: "0".into(),
                reason: "needs at least 1 node".into(),
            }),
            Some(v) => Ok(Placement {
                nodes: v,
                is_virtual: true,
                bind: None,
            }),
            None if machine.nodes.len() > 1 => Ok(Placement {
                nodes: machine.nodes.len(),
                is_virtual: false,
                bind: Some(machine.nodes.iter().map(|(_, c)| c.clone()).collect()),
            }),
            None => Ok(Placement {
                nodes: 1,
                is_virtual: false,
                bind: None,
            }),
        }
    }

    /// The node thread `i` goes to (round-robin).
    pub fn node_of(&self, thread: usize) -> usize {
        thread % self.nodes
    }

    /// Applies the placement to the calling thread, the `i`-th worker. Binding is
    /// best effort: a failure leaves the thread unbound (returns `false`).
    pub fn apply(&self, thread: usize) -> bool {
        let node = self.node_of(thread);
        if self.is_virtual {
            numa_topology::set_current_thread_node(Some(node));
            return true;
        }
        match &self.bind {
            Some(cpus) => bind_to_cpus(&cpus[node]),
            None => true,
        }
    }
}

/// Binds the calling thread to `cpus`. Returns whether the kernel accepted it.
pub fn bind_to_cpus(cpus: &[usize]) -> bool {
    // SAFETY: `cpu_set_t` is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for &c in cpus.iter().filter(|&&c| c < max) {
        // SAFETY: `c` is below the set's capacity (checked above); `set` is valid.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: pid 0 = the calling thread; `set` is a valid, initialised cpu_set_t
    // and the size passed is its size.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_parse() {
        assert_eq!(parse_cpulist("0-3,8,10-11").unwrap(), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpulist("").unwrap(), Vec::<usize>::new());
        assert!(matches!(
            parse_cpulist("3-1"),
            Err(BenchError::InvalidArg { value, .. }) if value == "3-1"
        ));
        assert!(parse_cpulist("a").is_err());
    }

    #[test]
    fn placement_is_round_robin_and_labels_virtual() {
        let one = Machine {
            cpus: 2,
            nodes: vec![(0, vec![0, 1])],
        };
        let p = Placement::new(&one, Some(2)).unwrap();
        assert!(p.is_virtual && p.bind.is_none());
        assert_eq!((0..5).map(|i| p.node_of(i)).collect::<Vec<_>>(), [0, 1, 0, 1, 0]);
        let p = Placement::new(&one, None).unwrap();
        assert_eq!((p.nodes, p.is_virtual), (1, false));
        assert!(Placement::new(&one, Some(0)).is_err());

        let two = Machine {
            cpus: 4,
            nodes: vec![(0, vec![0, 1]), (1, vec![2, 3])],
        };
        let p = Placement::new(&two, None).unwrap();
        assert_eq!(p.bind, Some(vec![vec![0, 1], vec![2, 3]]));
        assert!(!p.is_virtual);
    }

    #[test]
    fn virtual_placement_sets_the_thread_node() {
        let one = Machine {
            cpus: 1,
            nodes: vec![(0, vec![0])],
        };
        let p = Placement::new(&one, Some(3)).unwrap();
        std::thread::spawn(move || {
            assert!(p.apply(5));
            assert_eq!(numa_topology::current_node(), 2);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn detect_finds_at_least_one_node() {
        let m = Machine::detect();
        assert!(m.cpus >= 1 && !m.nodes.is_empty());
        assert!(m.nodes.iter().all(|(_, c)| !c.is_empty()));
    }
}
