//! The text table and the header that states the machine and the conditions.

use std::fmt::Write as _;

use crate::metrics::{Point, Range, median};

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
    /// Runs per point (`--repeat`), interleaved; 1 in files written before the option.
    #[serde(default = "one")]
    pub repeat: usize,
    /// CPU-bound threads beside the workers that never take the lock (`--hog`).
    #[serde(default)]
    pub hog_threads: usize,
    /// Whether idle-while-waited gaps were measured (`--idle-gaps`).
    #[serde(default)]
    pub idle_gaps: bool,
    /// Each workload's parameters (`name: params`), in run order.
    #[serde(default)]
    pub workloads: Vec<String>,
    /// The machine's wake-up latency, measured before the points with
    /// `--idle-gaps`.
    #[serde(default)]
    pub wake_latency: Option<crate::machine::WakeLatency>,
    /// Smallest and largest cache-line round trip, ns, measured before the runs
    /// (each run's [`Point::line_round_trip_ns`](crate::metrics::Point::line_round_trip_ns));
    /// `None` where none was measured.
    #[serde(default)]
    pub line_round_trip_ns: Option<(u64, u64)>,
    /// Environment variables of the locks and of numa-topology that were set
    /// but ignored, each with its reason and the value used instead
    /// ([`crate::machine::ignored_settings`]).
    #[serde(default)]
    pub ignored_settings: Vec<String>,
    /// The `NUMA_TOPOLOGY` virtual layout the locks' `current_node()`
    /// answered from, if one was set ([`crate::machine::env_layout`]).
    #[serde(default)]
    pub env_layout: Option<String>,
    /// The build, the machine and the command.
    #[serde(default)]
    pub provenance: crate::machine::Provenance,
}

/// The range of the cache-line round trips of `points` and of their repeats.
pub fn round_trip_range(points: &[crate::metrics::Point]) -> Option<(u64, u64)> {
    points
        .iter()
        .flat_map(|p| {
            if p.raw_repeats.is_empty() {
                core::slice::from_ref(p)
            } else {
                p.raw_repeats.as_slice()
            }
        })
        .filter_map(|p| p.line_round_trip_ns)
        .fold(None, |r, t| match r {
            None => Some((t, t)),
            Some((lo, hi)) => Some((lo.min(t), hi.max(t))),
        })
}

fn one() -> usize {
    1
}

impl Conditions {
    /// The header lines (each starts with `# `).
    pub fn header(&self) -> String {
        let mut s = format!("# machine: {}\n", self.machine);
        s.push_str(&self.provenance.header_line());
        for line in &self.ignored_settings {
            let _ = writeln!(s, "# {line}");
        }
        if let (false, Some(layout)) = (self.is_virtual, &self.env_layout) {
            let _ = writeln!(s, "# nodes: {layout}");
        } else if self.is_virtual {
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
        if self.repeat > 1 {
            let _ = writeln!(
                s,
                "# window per run: {:.2} s ({} runs per point)",
                self.duration_s, self.repeat
            );
        } else {
            let _ = writeln!(s, "# window per point: {:.2} s", self.duration_s);
        }
        let _ = writeln!(
            s,
            "# acquire latency: 1 in {} acquisitions timed; each sample includes ~{} ns of clock overhead",
            self.latency_sample_every, self.latency_clock_overhead_ns
        );
        if self.repeat > 1 {
            let _ = writeln!(
                s,
                "# repeats: {} per point, interleaved (every point once, then again); values are medians, \
                 ranges min-max; vs_pl and p99/pl are medians of the per-repeat ratios to parking_lot",
                self.repeat
            );
        }
        if self.hog_threads > 0 {
            let _ = writeln!(
                s,
                "# {} hog threads: CPU-bound, never take the lock, run the whole window (another tenant, a preempted vCPU)",
                self.hog_threads
            );
        }
        if self.idle_gaps {
            s.push_str(
                "# idle_us: longest time the lock was free while a sampled waiter waited, us (a lower bound)\n",
            );
        }
        if let Some(w) = &self.wake_latency {
            let _ = writeln!(
                s,
                "# wake-up latency: a {} us sleep took {:.0} us on average, {:.2} ms at most, {} of {} over 1 ms \
                 (measured before the points): idle gaps this long can be the machine waking a thread, not the lock",
                w.sleep_ns / 1000,
                w.mean_ns as f64 / 1e3,
                w.max_ns as f64 / 1e6,
                w.over_1ms,
                w.sleeps
            );
        }
        for w in &self.workloads {
            let _ = writeln!(s, "# workload {w}");
        }
        if let Some((lo, hi)) = self.line_round_trip_ns {
            let moved = if hi > lo.saturating_mul(2) {
                ": it varied over 2x, the (v)CPUs ran on differently placed host cores in \
                 different runs; compare ratios only between runs whose round trips agree \
                 (line_round_trip_ns in points.json)"
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "# cache-line round trip between two CPUs, before each run: {lo}-{hi} ns{moved}"
            );
        }
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

/// The [`BASELINE`] point among `points` at `p`'s workload, thread count,
/// workload parameters and hog threads.
pub fn baseline_for<'a>(points: &'a [Point], p: &Point) -> Option<&'a Point> {
    lock_point_for(points, p, BASELINE)
}

/// The point of `lock` among `points` at `p`'s workload, thread count,
/// workload parameters and hog threads.
pub fn lock_point_for<'a>(points: &'a [Point], p: &Point, lock: &str) -> Option<&'a Point> {
    points.iter().find(|b| {
        b.lock == lock
            && b.workload == p.workload
            && b.threads == p.threads
            && b.workload_params == p.workload_params
            && b.hog_threads == p.hog_threads
    })
}

/// The median and the min-max of `metric(p) / metric(base)` over paired repeats
/// (repeat `i` of each, which ran close together in time); the ratio of the two
/// medians when either point has no raw repeats or their counts differ. `None`
/// when a baseline value is 0.
pub fn ratio_to(p: &Point, base: &Point, metric: impl Fn(&Point) -> f64) -> Option<(f64, Range)> {
    let pairs: Vec<(&Point, &Point)> =
        if !p.raw_repeats.is_empty() && p.raw_repeats.len() == base.raw_repeats.len() {
            p.raw_repeats.iter().zip(&base.raw_repeats).collect()
        } else {
            vec![(p, base)]
        };
    let ratios = pairs
        .into_iter()
        .map(|(a, b)| {
            let d = metric(b);
            (d > 0.0).then(|| metric(a) / d)
        })
        .collect::<Option<Vec<f64>>>()?;
    Some((median(&ratios), Range::of(&ratios)))
}

/// A ratio with two decimals, or two significant digits below 0.1 (a p99
/// ratio of 0.0012 reads `0.0012`, not `0.00`).
pub fn fmt_ratio(v: f64) -> String {
    if !v.is_finite() || v == 0.0 || v >= 0.1 {
        return format!("{v:.2}");
    }
    let digits = ((-v.log10()).ceil() as usize + 1).min(12);
    format!("{v:.digits$}")
}

/// The table's columns, one line each, printed under it by `run` and
/// `compare` (the full description: benches/README.md).
pub const LEGEND: &str = "\
# ops/us: acquisitions per microsecond, all threads; range: min-max over the repeats
# vs_pl: throughput / parking_lot's at the same point (median of per-repeat ratios); vs_range: their min-max
# fairness: share of the operations done by the busier half of the threads (0.5 = fair, 1.0 = one half did all)
# sw/1k: holder node changes per 1000 acquisitions (data moved between nodes)
# p50_ns, p99_ns, max_ns: acquire latency of the sampled acquisitions; p99/pl: p99 / parking_lot's
# wait_max_us: longest time between two lock calls of one thread; idle_us: longest time the lock was free while a sampled waiter waited
# cpu_ns/op: process CPU time per operation (what waiting burns)
# more: benches/README.md
";

fn fmt_range(r: Option<Range>, repeats: usize, digits: usize) -> String {
    match r {
        Some(r) if repeats > 1 => format!("{:.digits$}-{:.digits$}", r.min, r.max),
        _ => "-".into(),
    }
}

/// Formats points as an aligned text table, one row per point, in the given order,
/// with a blank line wherever the (workload, threads) pair changes.
///
/// Columns: workload, threads, lock, throughput (ops/us, the median over the
/// repeats) and its min-max `range`, `vs_pl` (throughput over [`BASELINE`]'s at the
/// same workload and thread count, see [`ratio_to`]) and its `vs_range`, fairness
/// factor, node switches per 1000 acquisitions, acquire latency p50/p99 (ns),
/// `p99/pl` (p99 over the baseline's), max (ns, of the sampled acquisitions),
/// `wait_max_us` (the longest interval between two consecutive lock calls of a
/// thread: one acquisition's wait and critical section plus the work before the
/// next call, see [`crate::metrics::CallGaps`]),
/// `idle_us` (only when some point measured idle-while-waited gaps), CPU ns per
/// op. Ranges read `-` for one run.
pub fn table(points: &[Point]) -> String {
    let idle = points.iter().any(|p| p.idle_while_waited_max_ns.is_some());
    let mut s = String::new();
    let _ = write!(
        s,
        "{:<12} {:>7} {:<15} {:>9} {:>13} {:>6} {:>11} {:>8} {:>7} {:>8} {:>9} {:>6} {:>10} {:>11}",
        "workload",
        "threads",
        "lock",
        "ops/us",
        "range",
        "vs_pl",
        "vs_range",
        "fairness",
        "sw/1k",
        "p50_ns",
        "p99_ns",
        "p99/pl",
        "max_ns",
        "wait_max_us",
    );
    if idle {
        let _ = write!(s, " {:>9}", "idle_us");
    }
    let _ = writeln!(s, " {:>9}", "cpu_ns/op");
    for (i, p) in points.iter().enumerate() {
        if i > 0 && (points[i - 1].workload != p.workload || points[i - 1].threads != p.threads) {
            s.push('\n');
        }
        let base = baseline_for(points, p);
        let vs = base.and_then(|b| ratio_to(p, b, |x| x.throughput_ops_per_us));
        let p99 = base.and_then(|b| ratio_to(p, b, |x| x.acquire_latency_ns.p99 as f64));
        let repeats = p.repeats.min(base.map_or(1, |b| b.repeats));
        let _ = write!(
            s,
            "{:<12} {:>7} {:<15} {:>9.3} {:>13} {:>6} {:>11} {:>8.3} {:>7.1} {:>8} {:>9} {:>6} {:>10} {:>11.1}",
            p.workload,
            p.threads,
            p.lock,
            p.throughput_ops_per_us,
            fmt_range(p.spread.map(|r| r.throughput_ops_per_us), p.repeats, 3),
            vs.map_or_else(|| "-".into(), |v| fmt_ratio(v.0)),
            fmt_range(vs.map(|v| v.1), repeats, 2),
            p.fairness_factor,
            p.node_switches_per_1k,
            p.acquire_latency_ns.p50,
            p.acquire_latency_ns.p99,
            p99.map_or_else(|| "-".into(), |v| fmt_ratio(v.0)),
            p.acquire_latency_ns.max,
            p.wait_max_ns as f64 / 1e3,
        );
        if idle {
            let v = p
                .idle_while_waited_max_ns
                .map_or_else(|| "-".into(), |v| format!("{:.1}", v as f64 / 1e3));
            let _ = write!(s, " {v:>9}");
        }
        let _ = writeln!(s, " {:>9.0}", p.cpu_ns_per_op);
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
    fn ratios_pair_the_repeats() {
        let runs = |lock: &str, tps: &[f64], p99s: &[u64]| {
            crate::metrics::summarise_repeats(
                tps.iter()
                    .zip(p99s)
                    .map(|(&t, &l)| {
                        let mut p = sample_point();
                        p.lock = lock.into();
                        p.throughput_ops_per_us = t;
                        p.acquire_latency_ns.p99 = l;
                        p
                    })
                    .collect(),
            )
        };
        // Repeat 2 ran under load for both: paired ratios are 2, 2, 2.
        let pl = runs("parking_lot", &[2.0, 1.0, 2.0], &[100, 400, 100]);
        let cna = runs("cna", &[4.0, 2.0, 4.0], &[50, 200, 50]);
        let (vs, r) = ratio_to(&cna, &pl, |p| p.throughput_ops_per_us).unwrap();
        assert_eq!((vs, r), (2.0, Range { min: 2.0, max: 2.0 }));
        let t = table(&[pl, cna]);
        let row = t.lines().nth(2).unwrap();
        assert!(
            row.contains("2.000-4.000") && row.contains(" 2.00-2.00"),
            "{t}"
        );
        assert!(row.contains(" 0.50 "), "p99/pl: {t}");
        assert_eq!(fmt_ratio(0.001), "0.0010");
        assert_eq!(fmt_ratio(0.0012345), "0.0012");
        assert_eq!(fmt_ratio(0.05), "0.050");
        assert_eq!(fmt_ratio(0.5), "0.50");
        assert_eq!(fmt_ratio(12.345), "12.35");
        // A zero baseline gives no ratio.
        let mut zero = sample_point();
        zero.throughput_ops_per_us = 0.0;
        assert!(ratio_to(&sample_point(), &zero, |p| p.throughput_ops_per_us).is_none());
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
            repeat: 3,
            hog_threads: 1,
            idle_gaps: false,
            workloads: vec!["kv: keys=10".into()],
            wake_latency: None,
            line_round_trip_ns: None,
            ignored_settings: vec![],
            env_layout: None,
            provenance: Default::default(),
        };
        let h = c.header();
        assert!(
            h.contains("VIRTUAL") && h.contains("cost model: off"),
            "{h}"
        );
        assert!(h.contains("ABOVE the CPU count"), "{h}");
        assert!(h.contains("repeats: 3 per point, interleaved"), "{h}");
        assert!(
            h.contains("window per run: 1.00 s (3 runs per point)"),
            "{h}"
        );
        assert!(h.contains("# 1 hog threads"), "{h}");
        assert!(h.contains("# workload kv: keys=10"), "{h}");
        c.remote_penalty_ns = 300;
        c.is_virtual = false;
        c.nodes = 1;
        let h = c.header();
        assert!(!h.contains("VIRTUAL") && h.contains("spins 300 ns"), "{h}");
        assert!(!h.contains("wake-up latency"), "{h}");
        c.wake_latency = Some(crate::machine::WakeLatency {
            sleep_ns: 20_000,
            sleeps: 25_000,
            mean_ns: 117_400,
            max_ns: 7_007_423,
            over_1ms: 16,
        });
        let h = c.header();
        assert!(
            h.contains(
                "# wake-up latency: a 20 us sleep took 117 us on average, 7.01 ms at most, 16 of 25000 over 1 ms"
            ),
            "{h}"
        );
        assert!(!h.contains("round trip"), "{h}");
        c.line_round_trip_ns = Some((110, 130));
        let h = c.header();
        assert!(
            h.contains("# cache-line round trip between two CPUs, before each run: 110-130 ns\n"),
            "{h}"
        );
        c.line_round_trip_ns = Some((110, 480));
        let h = c.header();
        assert!(h.contains("110-480 ns: it varied over 2x"), "{h}");
    }

    #[test]
    fn round_trip_range_covers_every_repeat() {
        let run = |t: Option<u64>| {
            let mut p = sample_point();
            p.line_round_trip_ns = t;
            p
        };
        assert_eq!(round_trip_range(&[run(None)]), None);
        let mut repeated = run(Some(300));
        repeated.raw_repeats = vec![run(Some(120)), run(None), run(Some(480))];
        assert_eq!(
            round_trip_range(&[run(Some(200)), repeated]),
            Some((120, 480))
        );
    }
}
