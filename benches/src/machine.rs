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

/// The lock crates' and numa-topology's environment variables that are set
/// but were ignored: one line each, naming the variable, the value, why it
/// was ignored and what is used instead, from the crates' own typed errors
/// (`numa_spin::Config::from_env_lossy`,
/// `numa_topology::VirtualLayout::from_env`). Empty when every set value
/// was taken.
pub fn ignored_settings() -> Vec<String> {
    let mut out = Vec::new();
    for e in numa_spin::Config::from_env_lossy().1 {
        out.push(format!(
            "ignored: {e}; using the default, {}",
            e.default_value()
        ));
    }
    if let Err(e) = numa_topology::VirtualLayout::from_env() {
        out.push(format!(
            "ignored: {e}; current_node() uses the machine's topology ({} node{})",
            numa_topology::machine_topology().numa_nodes().len(),
            if numa_topology::machine_topology().numa_nodes().len() == 1 {
                ""
            } else {
                "s"
            }
        ));
    }
    out
}

/// A virtual layout from `NUMA_TOPOLOGY` that `current_node()` answers from,
/// as the header states it (`NUMA_TOPOLOGY="nodes=2": 2 virtual nodes ...`);
/// `None` when the variable is unset, empty or malformed.
pub fn env_layout() -> Option<String> {
    let layout = numa_topology::VirtualLayout::from_env().ok()??;
    let text = std::env::var(numa_topology::ENV_VAR).unwrap_or_default();
    Some(format!(
        "{}={:?}: {} virtual nodes by CPU (current_node() answers from them, so do the locks and sw/1k)",
        numa_topology::ENV_VAR,
        text.trim(),
        layout.node_count()
    ))
}

/// Where a result came from: the build and the machine, for every result
/// directory and run header.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Provenance {
    /// The commit numa-bench was built from (`git rev-parse --short HEAD` at
    /// build time, `+dirty` with uncommitted changes); `None` outside a git
    /// checkout.
    pub commit: Option<String>,
    /// `rustc --version` of the build.
    pub rustc: Option<String>,
    /// The CPU model (`/proc/cpuinfo`'s `model name`).
    pub cpu_model: Option<String>,
    /// The kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: Option<String>,
    /// The command line, as run.
    pub command: String,
}

impl Provenance {
    /// This build's and this machine's.
    pub fn collect() -> Self {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        });
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|k| k.trim().to_owned());
        Provenance {
            commit: option_env!("NUMA_BENCH_COMMIT")
                .filter(|c| !c.is_empty())
                .map(str::to_owned),
            rustc: option_env!("NUMA_BENCH_RUSTC")
                .filter(|c| !c.is_empty())
                .map(str::to_owned),
            cpu_model,
            kernel,
            command: std::env::args().collect::<Vec<_>>().join(" "),
        }
    }

    /// One header line, e.g. `# build: commit 1a2b3c4, rustc 1.95.0; cpu: ...`.
    pub fn header_line(&self) -> String {
        let or = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
        format!(
            "# build: commit {}, {}; cpu: {}; kernel {}; command: {}\n",
            or(&self.commit),
            or(&self.rustc),
            or(&self.cpu_model),
            or(&self.kernel),
            self.command
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

/// Round trips of a cache line between two CPUs timed by
/// [`line_round_trip_ns`].
const ROUND_TRIPS: u32 = 20_000;

/// The mean time, ns, of a cache line's round trip between the first two CPUs
/// this process may run on: two threads, one pinned to each, hand a flag back
/// and forth 20,000 times (about 2-20 ms). `None` with fewer than two
/// allowed CPUs, where pinning fails, off Linux, or when a round trip took over
/// 10 ms (the other thread was not running: the number would say nothing).
///
/// Reports carry it because every lock hand-off moves lines between CPUs, and
/// a virtual machine's vCPUs can move between host cores that share a cache
/// and cores that do not. On the 2-vCPU development guest it read 115-185 ns
/// in some runs and 460-890 ns in others, minutes apart, and a lock that
/// writes more shared lines per acquisition lost more in the slow runs:
/// compare lock ratios only between runs whose round trips agree.
pub fn line_round_trip_ns() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        linux::line_round_trip_ns()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(target_os = "linux")]
pub(crate) mod linux {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, Instant};

    use crossbeam_utils::CachePadded;

    use super::ROUND_TRIPS;

    /// The first two CPUs of this thread's affinity mask.
    pub(crate) fn two_cpus() -> Option<[usize; 2]> {
        // SAFETY: a zeroed `cpu_set_t` is a valid empty set, and
        // `sched_getaffinity` writes at most `size_of::<cpu_set_t>()` bytes
        // into it.
        let set = unsafe {
            let mut set: libc::cpu_set_t = core::mem::zeroed();
            if libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return None;
            }
            set
        };
        let mut cpus = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `cpu` is below `CPU_SETSIZE`, the set's size in CPUs.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) });
        Some([cpus.next()?, cpus.next()?])
    }

    /// Pins the calling thread to `cpu`; whether it worked.
    pub(crate) fn pin(cpu: usize) -> bool {
        // SAFETY: a zeroed `cpu_set_t` is a valid empty set; `cpu` is below
        // `CPU_SETSIZE` (it came from an affinity mask); the call reads the
        // set we pass.
        unsafe {
            let mut set: libc::cpu_set_t = core::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }

    /// Waits until `flag` holds `want`; false if that took over 10 ms.
    fn await_flag(flag: &AtomicU32, want: u32) -> bool {
        let start = Instant::now();
        let mut spins = 0u32;
        // Relaxed: the flag carries no data, only its own value.
        while flag.load(Ordering::Relaxed) != want {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && start.elapsed() > Duration::from_millis(10) {
                return false;
            }
        }
        true
    }

    /// 0: the timing thread's turn; 1: the echo thread's; 2: give up.
    const GIVE_UP: u32 = 2;

    /// Two scoped threads, so the caller's affinity (which the benchmark's
    /// workers would inherit) is left alone.
    pub(super) fn line_round_trip_ns() -> Option<u64> {
        let [a, b] = two_cpus()?;
        let flag = CachePadded::new(AtomicU32::new(0));
        let flag = &*flag;
        std::thread::scope(|s| {
            s.spawn(move || {
                if !pin(b) {
                    flag.store(GIVE_UP, Ordering::Relaxed);
                    return;
                }
                for _ in 0..ROUND_TRIPS {
                    if !await_flag(flag, 1) {
                        flag.store(GIVE_UP, Ordering::Relaxed);
                        return;
                    }
                    flag.store(0, Ordering::Relaxed);
                }
            });
            s.spawn(move || {
                if !pin(a) {
                    flag.store(GIVE_UP, Ordering::Relaxed);
                    return None;
                }
                let start = Instant::now();
                for _ in 0..ROUND_TRIPS {
                    if flag.load(Ordering::Relaxed) == GIVE_UP {
                        return None;
                    }
                    flag.store(1, Ordering::Relaxed);
                    if !await_flag(flag, 0) {
                        flag.store(GIVE_UP, Ordering::Relaxed);
                        return None;
                    }
                }
                let ns = start.elapsed().as_nanos() / u128::from(ROUND_TRIPS);
                u64::try_from(ns).ok()
            })
            .join()
            .ok()
            .flatten()
        })
    }
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

    /// With two CPUs to pin to (the development machine and CI have two),
    /// the probe measures; a round trip takes at least a few ns and, with
    /// both threads running, well under the 10 ms give-up. The caller's
    /// affinity is left alone.
    #[cfg(target_os = "linux")]
    #[test]
    fn line_round_trip_is_measured_without_pinning_the_caller() {
        let before = std::thread::available_parallelism().map_or(1, |n| n.get());
        // A probe gives up when a thread was off its CPU for 10 ms (the tests
        // beside this one compete for the CPUs): try until one gets through.
        let trip = (0..100).find_map(|_| line_round_trip_ns());
        if before >= 2 {
            let ns = trip.expect("two CPUs, yet 100 probes measured no round trip");
            assert!((1..10_000_000).contains(&ns), "{ns} ns");
        } else {
            assert_eq!(trip, None);
        }
        let after = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(before, after, "the probe pinned its caller");
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
