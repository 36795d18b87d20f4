//! The metrics of one benchmark point, and how each is computed.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::locks::LockStats;

/// Fairness factor (CNA paper, Dice & Kogan 2019, section 6; the HQ spinlock RFC):
/// sort the threads by operations done and return the share of all operations done
/// by the busier half.
///
/// 0.5 is perfectly fair, 1.0 means the other half did nothing. With an odd number of
/// threads the middle thread counts half to each half, so equal counts give exactly
/// 0.5 for any thread count (and a single thread gives 0.5). Returns 0.5 when no
/// operation was done (nobody was favoured).
pub fn fairness_factor(ops_per_thread: &[u64]) -> f64 {
    let total: u64 = ops_per_thread.iter().sum();
    if total == 0 {
        return 0.5;
    }
    let mut sorted = ops_per_thread.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let n = sorted.len();
    let mut busier: f64 = sorted[..n / 2].iter().map(|&x| x as f64).sum();
    if n % 2 == 1 {
        busier += sorted[n / 2] as f64 / 2.0;
    }
    busier / total as f64
}

/// Node switches per 1000 acquisitions: `1000 * switches / acquisitions` (0 when none).
///
/// A switch is an acquisition whose holder is on another NUMA node than the previous
/// holder, observed inside the critical section (see [`NodeTracker`]).
pub fn node_switches_per_1k(switches: u64, acquisitions: u64) -> f64 {
    if acquisitions == 0 {
        0.0
    } else {
        1000.0 * switches as f64 / acquisitions as f64
    }
}

/// Retakes per 1000 acquisitions: `1000 * retakes / acquisitions` (0 when none).
///
/// A retake is an acquisition by the thread that held the lock last (the
/// releaser took it again), observed inside the critical section (see
/// [`NodeTracker`]).
pub fn retakes_per_1k(retakes: u64, acquisitions: u64) -> f64 {
    node_switches_per_1k(retakes, acquisitions)
}

/// Records holder nodes and holder threads from inside the critical section;
/// lives in the protected data.
#[derive(Clone, Debug, Default)]
pub struct NodeTracker {
    /// The previous holder's node, `None` before the first acquisition.
    pub last_node: Option<usize>,
    /// The previous holder's thread index, `None` before the first acquisition.
    pub last_thread: Option<usize>,
    /// Acquisitions recorded.
    pub acquisitions: u64,
    /// Acquisitions whose node differed from the previous holder's. The first
    /// acquisition is not a switch.
    pub switches: u64,
    /// Acquisitions by the same thread as the previous one. The first
    /// acquisition is not a retake.
    pub retakes: u64,
}

impl NodeTracker {
    /// Records one acquisition by thread `thread` on `node`; returns whether the
    /// lock (and the data it protects) moved from another node.
    #[inline]
    pub fn record(&mut self, node: usize, thread: usize) -> bool {
        self.acquisitions += 1;
        let moved = matches!(self.last_node, Some(prev) if prev != node);
        self.switches += u64::from(moved);
        self.retakes += u64::from(self.last_thread == Some(thread));
        self.last_node = Some(node);
        self.last_thread = Some(thread);
        moved
    }
}

/// `{p50, p99, max}` of the acquire latency, in ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Median, ns.
    pub p50: u64,
    /// 99th percentile, ns.
    pub p99: u64,
    /// Largest sample, ns.
    pub max: u64,
}

impl LatencySummary {
    /// Summarises a histogram of ns samples (all zero when it is empty).
    ///
    /// hdrhistogram reports the highest value equivalent to the quantile at the
    /// histogram's precision (3 significant digits here).
    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            p50: h.value_at_quantile(0.50),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
        }
    }
}

/// A lock's event counters per 1000 acquisitions (`acquisitions` of the same
/// run), as `name=value` pairs with one decimal: how many acquisitions parked,
/// how many wake-ups an unlock issued, how many hand-offs went to a running
/// waiter. Counters that are not per-acquisition events (`acquisitions`,
/// `snodes`) are left out. `None` without acquisitions or events.
pub fn stats_per_1k(stats: &crate::locks::LockStats, acquisitions: u64) -> Option<String> {
    if acquisitions == 0 {
        return None;
    }
    let parts: Vec<String> = stats
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "acquisitions" | "snodes"))
        .map(|(k, &v)| format!("{k}={:.1}", v as f64 * 1000.0 / acquisitions as f64))
        .collect();
    (!parts.is_empty()).then(|| parts.join(" "))
}

/// The cost of one latency timing (`Instant::now()` then `elapsed()` with nothing
/// between), ns: the median of 1001 back-to-back timings. Every acquire-latency
/// sample includes it, so a p50 close to it means "acquired at once".
pub fn clock_overhead_ns() -> u64 {
    let mut v: Vec<u64> = (0..1001)
        .map(|_| {
            let t = std::time::Instant::now();
            t.elapsed().as_nanos() as u64
        })
        .collect();
    v.sort_unstable();
    v[v.len() / 2]
}

/// The longest interval between two consecutive lock calls of one worker
/// (`wait_max_ns`): one acquisition's lock call to the return of its unlock,
/// plus the worker's work outside the lock before its next call. Read from the
/// CPU's time-stamp counter through [`quanta::Clock::raw`], one read per
/// operation (about 12 ns for two reads on the 2-CPU development guest,
/// against about 70 ns for two `Instant::now()`, which lengthened every
/// locktorture operation by more than its non-critical delay); where the
/// counter is not usable, `quanta` reads the OS clock instead.
pub struct CallGaps<'a> {
    clock: &'a quanta::Clock,
    last: u64,
    max: u64,
}

impl<'a> CallGaps<'a> {
    /// Starts timing at the worker's first call.
    pub fn new(clock: &'a quanta::Clock) -> Self {
        CallGaps {
            clock,
            last: clock.raw(),
            max: 0,
        }
    }

    /// A lock call starts (or, once after the last one, the worker stops).
    #[inline]
    pub fn call(&mut self) {
        let now = self.clock.raw();
        // A counter that reads lower after a move to another CPU (counters
        // not synchronised across sockets) gives no interval.
        if now > self.last {
            self.max = self.max.max(now - self.last);
        }
        self.last = now;
    }

    /// The longest interval so far, ns.
    pub fn max_ns(&self) -> u64 {
        self.clock.delta_as_nanos(0, self.max)
    }
}

/// A new latency histogram: 1 ns to 100 s, 3 significant digits, saturating above.
pub fn new_latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("constant bounds are valid")
}

/// Process CPU time (user + system, all threads) so far, in ns, from
/// `getrusage(RUSAGE_SELF)` (man 2 getrusage). Resolution is the kernel's accounting
/// granularity (about 1-4 ms on Linux). 0 on targets without `getrusage`
/// (non-Unix: Windows), where `cpu_ns/op` then reads 0.
#[cfg(not(unix))]
pub fn process_cpu_ns() -> u64 {
    0
}

/// Process CPU time (user + system, all threads) so far, in ns, from
/// `getrusage(RUSAGE_SELF)` (man 2 getrusage). Resolution is the kernel's accounting
/// granularity (about 1-4 ms on Linux). 0 on targets without `getrusage`
/// (non-Unix: Windows), where `cpu_ns/op` then reads 0.
#[cfg(unix)]
pub fn process_cpu_ns() -> u64 {
    // SAFETY: `rusage` is plain old data; all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`; RUSAGE_SELF is a valid `who`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return 0;
    }
    // `as`: the fields' types differ between Unix systems (i64/i32/c_long).
    #[allow(clippy::unnecessary_cast)]
    let tv_ns = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1_000;
    tv_ns(ru.ru_utime) + tv_ns(ru.ru_stime)
}

/// One measured (lock, workload, threads) point: what `run --json` prints and what
/// `compare` writes for every point. The field names are the JSON keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Lock name (`cna`, `parking_lot`, ...).
    pub lock: String,
    /// Workload name (`locktorture`, `kv`, `page-alloc`, `rwlock`).
    pub workload: String,
    /// Worker threads.
    pub threads: usize,
    /// NUMA nodes the threads were spread over (real or virtual, see `virtual`).
    pub nodes: usize,
    /// Whether `nodes` are virtual nodes (a one-node machine; the benchmark assigned
    /// threads to nodes, which tests the lock's ordering, not hardware latency).
    #[serde(rename = "virtual")]
    pub is_virtual: bool,
    /// Whether threads were bound to their node's CPUs.
    pub bound: bool,
    /// Measured window, s (from the start barrier to the stop flag).
    pub duration_s: f64,
    /// Lock acquisitions per µs, all threads together.
    pub throughput_ops_per_us: f64,
    /// Share of all operations done by the busier half of the threads (0.5 = fair).
    pub fairness_factor: f64,
    /// Holder-node changes per 1000 acquisitions (for `rwlock`: write acquisitions
    /// only; for `combining`: changes of the node of the thread that ran the
    /// critical section, the combiner's).
    pub node_switches_per_1k: f64,
    /// Acquisitions per 1000 made by the thread that held the lock last (for
    /// `rwlock`: write acquisitions only; for `combining`: by the thread whose
    /// critical section ran). Absent (0) in results written before it existed.
    #[serde(default)]
    pub retake_per_1k: f64,
    /// Acquire latency (lock call to lock held), ns, over the sampled acquisitions
    /// (for `combining`: `combine` call to the start of the closure, wherever it ran).
    pub acquire_latency_ns: LatencySummary,
    /// Process CPU time (getrusage) per operation, ns: shows what waiting burns.
    pub cpu_ns_per_op: f64,
    /// Operations completed inside the window, per thread, in thread order.
    pub ops_per_thread: Vec<u64>,
    /// The lock's own counters (`null` when the lock keeps none).
    pub lock_stats: Option<LockStats>,
    /// Every how many acquisitions one is timed for `acquire_latency_ns`.
    pub latency_sample_every: u64,
    /// What one timing costs by itself, ns ([`clock_overhead_ns`]); included in
    /// every `acquire_latency_ns` sample.
    pub latency_clock_overhead_ns: u64,
    /// Cost model: extra ns spun in a critical section that runs on another node than
    /// the previous one (0 = off).
    pub remote_penalty_ns: u64,
    /// Online CPUs of the machine.
    pub machine_cpus: usize,
    /// Real NUMA nodes of the machine.
    pub machine_nodes: usize,
    /// The 1-minute load average when the point started (`null` if unknown): above
    /// `machine_cpus`, other work competed for the CPUs and the numbers are noisy.
    pub machine_loadavg_1m: Option<f64>,
    /// The workload's parameters, human readable.
    pub workload_params: String,
    /// CPU-bound threads that ran beside the workers for the whole window and never
    /// took the lock (`--hog N`: another tenant, a preempted vCPU). Their CPU time
    /// is left out of `cpu_ns_per_op`. 0 in files written before the option existed.
    #[serde(default)]
    pub hog_threads: usize,
    /// Longest time, ns, the lock was free while a thread waited for it (`null`
    /// when not measured: only mutex workloads run with `--idle-gaps`). A lower
    /// bound: a gap is seen only while a *sampled* waiter (one acquisition in
    /// `latency_sample_every`) waits; see [`crate::harness`].
    #[serde(default)]
    pub idle_while_waited_max_ns: Option<u64>,
    /// Longest time, ns, between two consecutive lock calls of one thread,
    /// over every acquisition of every thread (not only the sampled ones):
    /// the longest wait plus its critical section, plus the thread's work
    /// outside the lock before its next call (for locktorture about 55 ns).
    /// Read from the time-stamp counter once per operation, outside the
    /// critical section ([`CallGaps`]). 0 in files written before it existed.
    /// For `combining`, a `combine` call counts from the call to its return
    /// (the closure's result back on its caller; see [`crate::harness`]).
    #[serde(default)]
    pub wait_max_ns: u64,
    /// Mean round trip, ns, of a cache line between the first two CPUs of the
    /// process, measured just before the run
    /// ([`line_round_trip_ns`](crate::machine::line_round_trip_ns); `null`
    /// where it could not be measured, and in files written before it
    /// existed). For repeats, the median. Runs whose round trips differ by
    /// more than about 2x ran with their (v)CPUs placed differently: their
    /// ratios do not compare.
    #[serde(default)]
    pub line_round_trip_ns: Option<u64>,
    /// How many runs (`--repeat`) this point summarises; 1 for a single run. With
    /// more than one, every metric above is the median over the runs (see
    /// [`summarise_repeats`]).
    #[serde(default = "one")]
    pub repeats: usize,
    /// Min and max over the runs of each summarised metric (`null` for one run).
    #[serde(default)]
    pub spread: Option<Spread>,
    /// The runs themselves, in run order (empty for one run; each has `repeats` 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub raw_repeats: Vec<Point>,
}

fn one() -> usize {
    1
}

/// The smallest and largest value of one metric over the repeats of a point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Range {
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Range {
    /// The range of `values` (`0..0` when empty).
    pub fn of(values: &[f64]) -> Self {
        if values.is_empty() {
            return Range::default();
        }
        Range {
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }

    /// Whether two ranges share a value (the difference may be noise).
    pub fn overlaps(&self, other: &Range) -> bool {
        self.min <= other.max && other.min <= self.max
    }
}

/// Min-max spread of each summarised metric over a point's repeats, in the
/// metric's unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// ops/us.
    pub throughput_ops_per_us: Range,
    /// Fairness factor.
    pub fairness_factor: Range,
    /// Node switches per 1000 acquisitions.
    pub node_switches_per_1k: Range,
    /// p50 acquire latency, ns.
    pub latency_p50_ns: Range,
    /// p99 acquire latency, ns.
    pub latency_p99_ns: Range,
    /// Largest sampled acquire latency, ns.
    pub latency_max_ns: Range,
    /// CPU ns per operation.
    pub cpu_ns_per_op: Range,
    /// Longest idle-while-waited gap, ns (`null` when not measured).
    pub idle_while_waited_max_ns: Option<Range>,
}

/// The median of `values` (mean of the two middle values for an even count; 0
/// for none). NaNs sort last.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Summarises the repeats of one point (same lock, workload, threads and
/// parameters, in run order) into one [`Point`]:
///
/// - every metric (throughput, fairness, node switches, latency p50/p99/max, CPU
///   ns per op, idle-while-waited) is the median of that metric over the runs,
///   taken independently (for an even count, the mean of the two middle values;
///   latencies are rounded to whole ns);
/// - `spread` holds each metric's min and max;
/// - `ops_per_thread`, `lock_stats`, `bound`, `duration_s` and the load average
///   come from the run with the median throughput (the lower middle one for an
///   even count), so they stay one consistent measurement;
/// - `raw_repeats` keeps the runs. One run is returned unchanged.
///
/// # Panics
/// If `runs` is empty.
pub fn summarise_repeats(runs: Vec<Point>) -> Point {
    assert!(!runs.is_empty(), "summarise_repeats needs at least one run");
    if runs.len() == 1 {
        return runs.into_iter().next().expect("one run");
    }
    let col = |f: &dyn Fn(&Point) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
    let tp = col(&|p| p.throughput_ops_per_us);
    let ff = col(&|p| p.fairness_factor);
    let sw = col(&|p| p.node_switches_per_1k);
    let retake = col(&|p| p.retake_per_1k);
    let p50 = col(&|p| p.acquire_latency_ns.p50 as f64);
    let p99 = col(&|p| p.acquire_latency_ns.p99 as f64);
    let max = col(&|p| p.acquire_latency_ns.max as f64);
    let cpu = col(&|p| p.cpu_ns_per_op);
    let wait = col(&|p| p.wait_max_ns as f64);
    let idle: Option<Vec<f64>> = runs
        .iter()
        .map(|p| p.idle_while_waited_max_ns.map(|v| v as f64))
        .collect();
    // The run with the median throughput (lower middle for an even count).
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| tp[a].total_cmp(&tp[b]));
    let mid = order[(runs.len() - 1) / 2];
    let mut out = runs[mid].clone();
    out.throughput_ops_per_us = median(&tp);
    out.fairness_factor = median(&ff);
    out.node_switches_per_1k = median(&sw);
    out.retake_per_1k = median(&retake);
    out.acquire_latency_ns = LatencySummary {
        p50: median(&p50).round() as u64,
        p99: median(&p99).round() as u64,
        max: median(&max).round() as u64,
    };
    out.cpu_ns_per_op = median(&cpu);
    out.wait_max_ns = median(&wait).round() as u64;
    out.idle_while_waited_max_ns = idle.as_deref().map(|v| median(v).round() as u64);
    out.spread = Some(Spread {
        throughput_ops_per_us: Range::of(&tp),
        fairness_factor: Range::of(&ff),
        node_switches_per_1k: Range::of(&sw),
        latency_p50_ns: Range::of(&p50),
        latency_p99_ns: Range::of(&p99),
        latency_max_ns: Range::of(&max),
        cpu_ns_per_op: Range::of(&cpu),
        idle_while_waited_max_ns: idle.as_deref().map(Range::of),
    });
    let trips: Vec<f64> = runs
        .iter()
        .filter_map(|p| p.line_round_trip_ns)
        .map(|t| t as f64)
        .collect();
    out.line_round_trip_ns = (!trips.is_empty()).then(|| median(&trips).round() as u64);
    out.repeats = runs.len();
    out.machine_loadavg_1m = runs
        .iter()
        .filter_map(|p| p.machine_loadavg_1m)
        .reduce(f64::max);
    out.raw_repeats = runs;
    out
}

/// The CSV columns, in order (`ops_per_thread` is `;`-separated in one column,
/// `lock_stats` is `name=value` pairs `;`-separated). The metric columns hold the
/// median over the repeats; the columns from `repeats` on (added after the first
/// release, so older readers that index columns keep working) hold the number of
/// repeats, the min and max of throughput, fairness and p99 latency (the median
/// itself when there was one run), the hog threads and the idle-while-waited
/// maximum (empty when not measured), and the longest lock-to-unlock time of
/// any acquisition.
pub const CSV_HEADER: [&str; 35] = [
    "lock",
    "workload",
    "threads",
    "nodes",
    "virtual",
    "bound",
    "duration_s",
    "throughput_ops_per_us",
    "fairness_factor",
    "node_switches_per_1k",
    "latency_p50_ns",
    "latency_p99_ns",
    "latency_max_ns",
    "cpu_ns_per_op",
    "total_ops",
    "ops_per_thread",
    "lock_stats",
    "latency_sample_every",
    "latency_clock_overhead_ns",
    "remote_penalty_ns",
    "machine_cpus",
    "machine_nodes",
    "machine_loadavg_1m",
    "workload_params",
    "repeats",
    "throughput_min",
    "throughput_max",
    "fairness_min",
    "fairness_max",
    "latency_p99_min_ns",
    "latency_p99_max_ns",
    "hog_threads",
    "idle_while_waited_max_ns",
    "wait_max_ns",
    "line_round_trip_ns",
];

impl Point {
    /// Total operations of all threads.
    pub fn total_ops(&self) -> u64 {
        self.ops_per_thread.iter().sum()
    }

    /// The spread, or a zero-width one at the point's own values for a single run.
    pub fn spread_or_single(&self) -> Spread {
        self.spread.unwrap_or_else(|| {
            let at = |v: f64| Range { min: v, max: v };
            let l = self.acquire_latency_ns;
            Spread {
                throughput_ops_per_us: at(self.throughput_ops_per_us),
                fairness_factor: at(self.fairness_factor),
                node_switches_per_1k: at(self.node_switches_per_1k),
                latency_p50_ns: at(l.p50 as f64),
                latency_p99_ns: at(l.p99 as f64),
                latency_max_ns: at(l.max as f64),
                cpu_ns_per_op: at(self.cpu_ns_per_op),
                idle_while_waited_max_ns: self.idle_while_waited_max_ns.map(|v| at(v as f64)),
            }
        })
    }

    /// The CSV fields, matching [`CSV_HEADER`] (quoted where needed).
    pub fn csv_row(&self) -> Vec<String> {
        let sp = self.spread_or_single();
        let join = |v: Vec<String>| v.join(";");
        vec![
            self.lock.clone(),
            self.workload.clone(),
            self.threads.to_string(),
            self.nodes.to_string(),
            self.is_virtual.to_string(),
            self.bound.to_string(),
            format!("{:.3}", self.duration_s),
            format!("{:.4}", self.throughput_ops_per_us),
            format!("{:.4}", self.fairness_factor),
            format!("{:.2}", self.node_switches_per_1k),
            self.acquire_latency_ns.p50.to_string(),
            self.acquire_latency_ns.p99.to_string(),
            self.acquire_latency_ns.max.to_string(),
            format!("{:.1}", self.cpu_ns_per_op),
            self.total_ops().to_string(),
            join(self.ops_per_thread.iter().map(u64::to_string).collect()),
            join(
                self.lock_stats
                    .iter()
                    .flatten()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect(),
            ),
            self.latency_sample_every.to_string(),
            self.latency_clock_overhead_ns.to_string(),
            self.remote_penalty_ns.to_string(),
            self.machine_cpus.to_string(),
            self.machine_nodes.to_string(),
            self.machine_loadavg_1m
                .map_or_else(String::new, |l| format!("{l:.2}")),
            self.workload_params.clone(),
            self.repeats.to_string(),
            format!("{:.4}", sp.throughput_ops_per_us.min),
            format!("{:.4}", sp.throughput_ops_per_us.max),
            format!("{:.4}", sp.fairness_factor.min),
            format!("{:.4}", sp.fairness_factor.max),
            format!("{:.0}", sp.latency_p99_ns.min),
            format!("{:.0}", sp.latency_p99_ns.max),
            self.hog_threads.to_string(),
            self.idle_while_waited_max_ns
                .map_or_else(String::new, |v| v.to_string()),
            self.wait_max_ns.to_string(),
            self.line_round_trip_ns
                .map_or_else(String::new, |v| v.to_string()),
        ]
        .into_iter()
        .map(|f| csv_quote(&f))
        .collect()
    }
}

/// Quotes a CSV field (RFC 4180) when it holds a comma, quote or line break.
pub fn csv_quote(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_owned()
    }
}

/// Writes points as CSV: header then one line per point.
pub fn to_csv(points: &[Point]) -> String {
    let mut out = CSV_HEADER.join(",");
    out.push('\n');
    for p in points {
        out.push_str(&p.csv_row().join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn stats_per_1k_scales_events_and_skips_totals() {
        let stats: crate::locks::LockStats = [
            ("acquisitions".to_owned(), 4000),
            ("snodes".to_owned(), 2),
            ("parks".to_owned(), 30),
            ("grants".to_owned(), 2000),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            stats_per_1k(&stats, 4000).as_deref(),
            Some("grants=500.0 parks=7.5")
        );
        assert_eq!(stats_per_1k(&stats, 0), None);
        let totals_only: crate::locks::LockStats = [("snodes".to_owned(), 1)].into_iter().collect();
        assert_eq!(stats_per_1k(&totals_only, 10), None);
    }

    #[test]
    fn fairness_of_equal_counts_is_half() {
        assert_eq!(fairness_factor(&[5, 5, 5, 5]), 0.5);
        assert_eq!(fairness_factor(&[7, 7, 7]), 0.5);
        assert_eq!(fairness_factor(&[9]), 0.5);
        assert_eq!(fairness_factor(&[0, 0]), 0.5);
        assert_eq!(fairness_factor(&[]), 0.5);
    }

    #[test]
    fn fairness_of_starved_half_is_one() {
        assert_eq!(fairness_factor(&[0, 10, 0, 10]), 1.0);
    }

    #[test]
    fn fairness_sorts_and_weights_the_middle_thread() {
        // sorted 6,3,1: busier half = 6 + 3/2 = 7.5 of 10.
        assert_eq!(fairness_factor(&[1, 6, 3]), 0.75);
        // sorted 30,20,10,0: 50 of 60.
        assert!((fairness_factor(&[10, 0, 30, 20]) - 50.0 / 60.0).abs() < 1e-12);
    }

    #[test]
    fn node_tracker_counts_changes_only() {
        let mut t = NodeTracker::default();
        let moved: Vec<bool> = [(0, 0), (0, 0), (1, 1), (1, 3), (0, 0), (2, 2)]
            .into_iter()
            .map(|(n, thread)| t.record(n, thread))
            .collect();
        assert_eq!(moved, [false, false, true, false, true, true]);
        assert_eq!((t.acquisitions, t.switches), (6, 3));
        // Only the second acquisition was its thread's again.
        assert_eq!(t.retakes, 1);
        assert_eq!(retakes_per_1k(t.retakes, t.acquisitions), 1000.0 / 6.0);
        assert_eq!(node_switches_per_1k(t.switches, t.acquisitions), 500.0);
        assert_eq!(node_switches_per_1k(0, 0), 0.0);
    }

    #[test]
    fn latency_summary_reads_quantiles() {
        let mut h = new_latency_histogram();
        assert_eq!(
            LatencySummary::from_histogram(&h),
            LatencySummary::default()
        );
        for v in 1..=1000 {
            h.record(v).unwrap();
        }
        h.record(5_000_000).unwrap();
        let s = LatencySummary::from_histogram(&h);
        assert_eq!(s.p50, 501); // 501 of 1001 samples are <= 501
        assert!((990..=1000).contains(&s.p99), "{s:?}");
        assert!(h.equivalent(s.max, 5_000_000), "{s:?}");
    }

    #[test]
    fn merged_histograms_summarise_all_threads() {
        let mut a = new_latency_histogram();
        let mut b = new_latency_histogram();
        a.record(10).unwrap();
        b.record(1_000).unwrap();
        b.record(1_000).unwrap();
        a.add(&b).unwrap();
        assert_eq!(LatencySummary::from_histogram(&a).p50, 1_000);
        assert_eq!(a.len(), 3);
    }

    #[test]
    fn clock_overhead_is_below_a_millisecond() {
        // A sanity bound, not a speed check: a timing pair costs ns, not ms.
        assert!(clock_overhead_ns() < 1_000_000);
    }

    #[test]
    fn cpu_time_advances_with_work() {
        let before = process_cpu_ns();
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(30) {
            std::hint::spin_loop();
        }
        assert!(process_cpu_ns() > before);
    }

    pub(crate) fn sample_point() -> Point {
        Point {
            lock: "cna".into(),
            workload: "kv".into(),
            threads: 2,
            nodes: 2,
            is_virtual: true,
            bound: false,
            duration_s: 0.5,
            throughput_ops_per_us: 1.25,
            fairness_factor: 0.5,
            node_switches_per_1k: 12.0,
            retake_per_1k: 300.0,
            acquire_latency_ns: LatencySummary {
                p50: 40,
                p99: 900,
                max: 12_000,
            },
            cpu_ns_per_op: 800.0,
            ops_per_thread: vec![3, 4],
            lock_stats: Some([("acquisitions".to_owned(), 7)].into_iter().collect()),
            latency_sample_every: 16,
            latency_clock_overhead_ns: 25,
            remote_penalty_ns: 0,
            machine_cpus: 2,
            machine_nodes: 1,
            machine_loadavg_1m: Some(0.5),
            workload_params: "keys=1000, zipf_s=0.99, get=90%".into(),
            hog_threads: 0,
            idle_while_waited_max_ns: None,
            wait_max_ns: 0,
            line_round_trip_ns: Some(150),
            repeats: 1,
            spread: None,
            raw_repeats: Vec::new(),
        }
    }

    #[test]
    fn json_has_the_issue_keys() {
        let v = serde_json::to_value(sample_point()).unwrap();
        for key in [
            "lock",
            "workload",
            "threads",
            "nodes",
            "virtual",
            "duration_s",
            "throughput_ops_per_us",
            "fairness_factor",
            "node_switches_per_1k",
            "acquire_latency_ns",
            "cpu_ns_per_op",
            "ops_per_thread",
            "lock_stats",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        for q in ["p50", "p99", "max"] {
            assert!(v["acquire_latency_ns"][q].is_u64(), "{q}");
        }
        assert_eq!(v["virtual"], true);
        let back: Point = serde_json::from_value(v).unwrap();
        assert_eq!(back, sample_point());
    }

    #[test]
    fn csv_rows_match_the_header() {
        let csv = to_csv(&[sample_point()]);
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(header, CSV_HEADER);
        let row = sample_point().csv_row();
        assert_eq!(row.len(), CSV_HEADER.len());
        let col = |name: &str| &row[CSV_HEADER.iter().position(|h| *h == name).unwrap()];
        assert_eq!(col("lock"), "cna");
        assert_eq!(col("total_ops"), "7");
        assert_eq!(col("ops_per_thread"), "3;4");
        assert_eq!(col("lock_stats"), "acquisitions=7");
        assert_eq!(
            col("workload_params"),
            "\"keys=1000, zipf_s=0.99, get=90%\""
        );
        assert_eq!(col("latency_p99_ns"), "900");
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn repeats_summarise_to_medians_and_spread() {
        let run = |tp: f64, ff: f64, p99: u64, ops: u64| {
            let mut p = sample_point();
            p.throughput_ops_per_us = tp;
            p.fairness_factor = ff;
            p.acquire_latency_ns.p99 = p99;
            p.ops_per_thread = vec![ops, ops];
            p
        };
        let s = summarise_repeats(vec![
            run(3.0, 0.6, 1000, 30),
            run(1.0, 0.5, 3000, 10),
            run(2.0, 0.9, 2000, 20),
        ]);
        assert_eq!(s.repeats, 3);
        assert_eq!(s.throughput_ops_per_us, 2.0);
        assert_eq!(s.fairness_factor, 0.6);
        assert_eq!(s.acquire_latency_ns.p99, 2000);
        // ops_per_thread from the run with the median throughput.
        assert_eq!(s.ops_per_thread, [20, 20]);
        let sp = s.spread.unwrap();
        assert_eq!(sp.throughput_ops_per_us, Range { min: 1.0, max: 3.0 });
        assert_eq!(sp.fairness_factor, Range { min: 0.5, max: 0.9 });
        assert_eq!(
            sp.latency_p99_ns,
            Range {
                min: 1000.0,
                max: 3000.0
            }
        );
        assert_eq!(sp.idle_while_waited_max_ns, None);
        assert_eq!(s.raw_repeats.len(), 3);
        assert_eq!(s.raw_repeats[0].throughput_ops_per_us, 3.0);
        // Even count: mean of the middle two; the lower middle run's counts.
        let s = summarise_repeats(vec![run(1.0, 0.5, 100, 1), run(2.0, 0.7, 301, 2)]);
        assert_eq!(s.throughput_ops_per_us, 1.5);
        assert_eq!(s.acquire_latency_ns.p99, 201);
        assert_eq!(s.ops_per_thread, [1, 1]);
        // One run: unchanged, no spread.
        assert_eq!(summarise_repeats(vec![sample_point()]), sample_point());
    }

    #[test]
    fn csv_has_the_spread_columns() {
        let mut a = sample_point();
        a.throughput_ops_per_us = 1.0;
        let mut b = sample_point();
        b.throughput_ops_per_us = 2.0;
        b.idle_while_waited_max_ns = Some(5);
        a.idle_while_waited_max_ns = Some(9);
        let row = summarise_repeats(vec![a, b]).csv_row();
        let col = |name: &str| row[CSV_HEADER.iter().position(|h| *h == name).unwrap()].clone();
        assert_eq!(col("repeats"), "2");
        assert_eq!(col("throughput_ops_per_us"), "1.5000");
        assert_eq!(col("throughput_min"), "1.0000");
        assert_eq!(col("throughput_max"), "2.0000");
        assert_eq!(col("idle_while_waited_max_ns"), "7");
        let single = sample_point().csv_row();
        assert_eq!(
            single[CSV_HEADER
                .iter()
                .position(|h| *h == "throughput_max")
                .unwrap()],
            "1.2500"
        );
        // The columns of the first release keep their positions.
        assert_eq!(CSV_HEADER[23], "workload_params");
    }

    #[test]
    fn csv_quote_escapes() {
        assert_eq!(csv_quote("plain"), "plain");
        assert_eq!(csv_quote("a,b"), "\"a,b\"");
        assert_eq!(csv_quote("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
