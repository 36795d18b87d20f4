//! The machine the benchmark runs on, and where its threads go.
//!
//! Threads are spread round-robin over NUMA nodes: thread `i` goes to node
//! `i % nodes`. On a machine with several real nodes each thread is bound to its
//! node's CPUs (through `numa-topology`: hwloc or `sched_setaffinity`). On a machine with one
//! node, `--virtual-nodes N` assigns thread `i` to virtual node `i % N` through
//! [`numa_topology::set_current_thread_node`]; nothing is bound then, and every
//! report says the nodes are virtual.

use std::time::{Duration, Instant};

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
    /// Reads the running machine through [`numa_topology::machine_topology`]
    /// (hwloc with the `hwloc` feature, else Linux sysfs; one node holding every
    /// CPU when neither works). CPU-less nodes (memory-only) are left out: no
    /// thread can run there.
    pub fn detect() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let topo = numa_topology::machine_topology();
        let mut nodes: Vec<(usize, Vec<usize>)> = topo
            .numa_nodes()
            .iter()
            .filter(|n| !n.cpus().is_empty())
            .map(|n| (n.os_index(), n.cpus().to_vec()))
            .collect();
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

/// The 1-minute load average (`/proc/loadavg`), `None` where unavailable.
///
/// Reports carry it because a machine shared with other work gives noisy numbers:
/// a load above the CPU count means runnable threads were waiting for a CPU.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// How late this machine wakes a sleeping thread, measured by
/// [`wake_latency`]: how long sleeps of `sleep_ns` really took.
///
/// Every lock that puts waiters to sleep (parking, a queue head's naps) hands
/// the lock over no faster than the machine wakes a thread: an idle-while-waited
/// gap (`--idle-gaps`) as long as `max_ns` can be the OS's or hypervisor's
/// wake-up rather than the lock's. On a virtual machine an idle vCPU is woken
/// by its host, which may be running something else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WakeLatency {
    /// The requested sleep, ns.
    pub sleep_ns: u64,
    /// Sleeps measured.
    pub sleeps: u64,
    /// Mean time a sleep took, ns (the requested time included).
    pub mean_ns: u64,
    /// Longest time a sleep took, ns.
    pub max_ns: u64,
    /// Sleeps that took longer than 1 ms.
    pub over_1ms: u64,
}

/// Sleeps `sleep` (`std::thread::sleep`) again and again for `window` on the
/// calling thread, timing each sleep with `Instant`; at least one sleep.
pub fn wake_latency(sleep: Duration, window: Duration) -> WakeLatency {
    let start = Instant::now();
    let (mut sleeps, mut total, mut max, mut over) = (0u64, 0u64, 0u64, 0u64);
    while sleeps == 0 || start.elapsed() < window {
        let t = Instant::now();
        std::thread::sleep(sleep);
        let took = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        sleeps += 1;
        total = total.saturating_add(took);
        max = max.max(took);
        over += u64::from(took > 1_000_000);
    }
    WakeLatency {
        sleep_ns: u64::try_from(sleep.as_nanos()).unwrap_or(u64::MAX),
        sleeps,
        mean_ns: total / sleeps,
        max_ns: max,
        over_1ms: over,
    }
}

/// [`wake_latency`] as the reports state it: 20 us sleeps (a numa-spin
/// queue head's nap) for 1 s.
pub fn measure_wake_latency() -> WakeLatency {
    wake_latency(Duration::from_micros(20), Duration::from_secs(1))
}

/// Where the threads of one run go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Nodes the threads are spread over.
    pub nodes: usize,
    /// Whether the nodes are virtual.
    pub is_virtual: bool,
    /// Per placement node, the OS index of the real node its threads are bound
    /// to; `None` = no binding.
    pub bind: Option<Vec<usize>>,
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
                bind: Some(machine.nodes.iter().map(|(os, _)| *os).collect()),
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

    /// Applies the placement to the calling thread, the `i`-th worker: assigns
    /// its virtual node, or binds it to its real node's CPUs
    /// ([`numa_topology::bind_current_thread_to_node`]). Binding is best effort:
    /// returns whether the thread is bound to CPUs (`false` when nothing was to
    /// be bound or the OS refused).
    pub fn apply(&self, thread: usize) -> bool {
        let node = self.node_of(thread);
        if self.is_virtual {
            numa_topology::set_current_thread_node(Some(node));
            return false;
        }
        match &self.bind {
            Some(os) => numa_topology::bind_current_thread_to_node(os[node]).is_ok(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_is_round_robin_and_labels_virtual() {
        let one = Machine {
            cpus: 2,
            nodes: vec![(0, vec![0, 1])],
        };
        let p = Placement::new(&one, Some(2)).unwrap();
        assert!(p.is_virtual && p.bind.is_none());
        assert_eq!(
            (0..5).map(|i| p.node_of(i)).collect::<Vec<_>>(),
            [0, 1, 0, 1, 0]
        );
        let p = Placement::new(&one, None).unwrap();
        assert_eq!((p.nodes, p.is_virtual), (1, false));
        assert!(Placement::new(&one, Some(0)).is_err());

        let two = Machine {
            cpus: 4,
            nodes: vec![(0, vec![0, 1]), (1, vec![2, 3])],
        };
        let p = Placement::new(&two, None).unwrap();
        assert_eq!(p.bind, Some(vec![0, 1]));
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
            assert!(!p.apply(5), "virtual placement binds nothing");
            assert_eq!(numa_topology::current_node(), 2);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn wake_latency_times_every_sleep() {
        let w = wake_latency(Duration::from_micros(200), Duration::from_millis(20));
        assert_eq!(w.sleep_ns, 200_000);
        // A 200 us sleep never returns early, so 20 ms hold at most 100.
        assert!((1..=100).contains(&w.sleeps), "{w:?}");
        assert!(w.mean_ns >= w.sleep_ns && w.max_ns >= w.mean_ns, "{w:?}");
        assert!(w.over_1ms <= w.sleeps, "{w:?}");
        // One sleep at least, however short the window.
        let once = wake_latency(Duration::from_millis(2), Duration::ZERO);
        assert_eq!(once.sleeps, 1);
        assert!(once.max_ns >= 2_000_000 && once.over_1ms == 1, "{once:?}");
    }

    #[test]
    fn load_average_is_non_negative_when_known() {
        if let Some(l) = load_average() {
            assert!(l >= 0.0 && l.is_finite());
        }
    }

    #[test]
    fn detect_finds_at_least_one_node() {
        let m = Machine::detect();
        assert!(m.cpus >= 1 && !m.nodes.is_empty());
        assert!(m.nodes.iter().all(|(_, c)| !c.is_empty()));
    }
}
