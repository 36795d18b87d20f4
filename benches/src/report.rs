//! The text table and the header that states the machine and the conditions.

use std::fmt::Write as _;

use crate::metrics::Point;

/// The conditions a set of points was measured under, for report headers.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Conditions {
    /// e.g. `2 CPUs, 1 NUMA node`.
    pub machine: String,
    /// Online CPUs.
    pub cpus: usize,
    /// Real NUMA nodes.
    pub real_nodes: usize,
    /// Nodes the threads were spread over.
    pub nodes: usize,
    /// Whether those nodes are virtual.
    #[serde(rename = "virtual")]
    pub is_virtual: bool,
    /// Remote-penalty cost model, ns (0 = off).
    pub remote_penalty_ns: u64,
    /// Window per point, s.
    pub duration_s: f64,
    /// Highest 1-minute load average seen at the start of a point (`None` if unknown).
    pub max_loadavg_1m: Option<f64>,
    /// One acquisition in this many is timed for the latency columns.
    pub latency_sample_every: u64,
    /// Cost of one timing, ns, included in every latency sample.
    pub latency_clock_overhead_ns: u64,
}

impl Conditions {
    /// The header lines (each starts with `# `).
    pub fn header(&self) -> String {
        let mut s = format!("# machine: {}\n", self.machine);
        if self.is_virtual {
            let _ = writeln!(
                s,
                "# nodes: {} VIRTUAL (threads assigned round-robin by the benchmark on a {}-node machine: \
                 this tests each lock's ordering, not interconnect latency; real NUMA gains need a multi-node box)",
                self.nodes, self.real_nodes
            );
        } else if self.nodes > 1 {
            let _ = writeln!(
                s,
                "# nodes: {} real (threads round-robin, bound to their node's CPUs)",
                self.nodes
            );
        } else {
            let _ = writeln!(
                s,
                "# nodes: 1 (no NUMA effects can show; use --virtual-nodes to exercise NUMA ordering)"
            );
        }
        if self.remote_penalty_ns > 0 {
            let _ = writeln!(
                s,
                "# cost model: ON, a critical section after a node change spins {} ns extra (stands for moving the data across the interconnect)",
                self.remote_penalty_ns
            );
        } else {
            s.push_str("# cost model: off (no remote penalty)\n");
        }
        let _ = writeln!(s, "# window per point: {:.2} s", self.duration_s);
        let _ = writeln!(
            s,
            "# acquire latency: 1 in {} acquisitions timed; each sample includes ~{} ns of clock overhead",
            self.latency_sample_every, self.latency_clock_overhead_ns
        );
        if let Some(l) = self.max_loadavg_1m {
            let busy = if l > self.cpus as f64 {
                ": ABOVE the CPU count, other work competed for the CPUs, expect noise"
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "# load average (1 min) before the points: up to {l:.2}{busy}"
            );
        }
        s
    }
}

/// The baseline lock for the `vs` column, if it is among the points.
pub const BASELINE: &str = "parking_lot";

/// Formats points as an aligned text table, one row per point, in the given order,
/// with a blank line wherever the (workload, threads) pair changes.
///
/// Columns: workload, threads, lock, throughput (ops/us), `vs` (throughput over
/// [`BASELINE`]'s at the same workload and thread count), fairness factor, node
/// switches per 1000 acquisitions, acquire latency p50/p99/max (ns), CPU ns per op.
pub fn table(points: &[Point]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<12} {:>7} {:<15} {:>9} {:>6} {:>8} {:>7} {:>8} {:>9} {:>10} {:>9}",
        "workload",
        "threads",
        "lock",
        "ops/us",
        "vs_pl",
        "fairness",
        "sw/1k",
        "p50_ns",
        "p99_ns",
        "max_ns",
        "cpu_ns/op"
    );
    for (i, p) in points.iter().enumerate() {
        if i > 0 && (points[i - 1].workload != p.workload || points[i - 1].threads != p.threads) {
            s.push('\n');
        }
        let base = points
            .iter()
            .find(|b| b.lock == BASELINE && b.workload == p.workload && b.threads == p.threads)
            .map(|b| b.throughput_ops_per_us);
        let vs = match base {
            Some(b) if b > 0.0 => format!("{:.2}", p.throughput_ops_per_us / b),
            _ => "-".into(),
        };
        let _ = writeln!(
            s,
            "{:<12} {:>7} {:<15} {:>9.3} {:>6} {:>8.3} {:>7.1} {:>8} {:>9} {:>10} {:>9.0}",
            p.workload,
            p.threads,
            p.lock,
            p.throughput_ops_per_us,
            vs,
            p.fairness_factor,
            p.node_switches_per_1k,
            p.acquire_latency_ns.p50,
            p.acquire_latency_ns.p99,
            p.acquire_latency_ns.max,
            p.cpu_ns_per_op
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::tests::sample_point;

    #[test]
    fn table_has_a_row_per_point_and_the_baseline_ratio() {
        let mut a = sample_point();
        a.lock = "parking_lot".into();
        a.throughput_ops_per_us = 2.0;
        let mut b = sample_point();
        b.throughput_ops_per_us = 3.0;
        let t = table(&[a, b]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].contains("ops/us") && lines[0].contains("fairness"));
        assert!(lines[1].contains("parking_lot") && lines[1].contains("1.00"));
        assert!(lines[2].contains("cna") && lines[2].contains("1.50"), "{t}");
    }

    #[test]
    fn table_separates_thread_counts() {
        let a = sample_point();
        let mut b = sample_point();
        b.threads = 8;
        let t = table(&[a.clone(), a, b]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 5, "{t}");
        assert!(lines[3].is_empty() && lines[4].contains(" 8 "), "{t}");
    }

    #[test]
    fn header_labels_virtual_nodes_and_the_cost_model() {
        let mut c = Conditions {
            machine: "2 CPUs, 1 NUMA node".into(),
            cpus: 2,
            real_nodes: 1,
            nodes: 2,
            is_virtual: true,
            remote_penalty_ns: 0,
            duration_s: 1.0,
            max_loadavg_1m: Some(5.0),
            latency_sample_every: 16,
            latency_clock_overhead_ns: 25,
        };
        let h = c.header();
        assert!(
            h.contains("VIRTUAL") && h.contains("cost model: off"),
            "{h}"
        );
        assert!(h.contains("ABOVE the CPU count"), "{h}");
        c.remote_penalty_ns = 300;
        c.is_virtual = false;
        c.nodes = 1;
        let h = c.header();
        assert!(!h.contains("VIRTUAL") && h.contains("spins 300 ns"), "{h}");
    }
}
