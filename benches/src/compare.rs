//! `numa-bench compare`: the default suite, sized for the machine.
//!
//! Locks `cna`, `queued`, `combining`, `cst`, `parking_lot`, `std`; workloads `locktorture` and
//! `kv`; thread counts 1, 2, CPUs, 4x and 16x CPUs (deduplicated); on a one-node
//! machine the threads are spread over 2 virtual nodes. Every point runs
//! `--repeat` times (default 3), interleaved: the whole plan once, then again, so a
//! slow drift of a shared machine hits every lock alike; each point reports the
//! median and the min-max of the runs ([`summarise_repeats`]). The per-run window
//! is the time budget (150 s, `--quick` 14 s) divided by the number of runs
//! (points x repeats), clamped to 0.25-5 s (`--quick`: 0.05-1 s), so the whole
//! suite stays within about 3 minutes (`--quick` about 20 s) whatever the machine.
//! Writes `points.json`, `points.csv`, `table.txt` and two SVG plots per workload
//! (medians with min-max error bars) into the output directory.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::BenchError;
use crate::harness::{RunConfig, WorkloadSpec, run_point};
use crate::locks::LockName;
use crate::machine::{Machine, Placement};
use crate::metrics::{Point, summarise_repeats, to_csv};
use crate::plot::plot_metric;
use crate::report::{Conditions, table};
use crate::workloads::WorkloadName;

/// The default locks compared.
pub const DEFAULT_LOCKS: [LockName; 7] = [
    LockName::Cna,
    LockName::Queued,
    LockName::Hq,
    LockName::Combining,
    LockName::Cst,
    LockName::ParkingLot,
    LockName::Std,
];

/// The default workloads.
pub const DEFAULT_WORKLOADS: [WorkloadName; 2] = [WorkloadName::Locktorture, WorkloadName::Kv];

/// Time budget of the full suite, s (the issue asks for at most 3 minutes).
pub const FULL_BUDGET_S: f64 = 150.0;
/// Time budget of `--quick`, s.
pub const QUICK_BUDGET_S: f64 = 14.0;
/// Runs per point unless `--repeat` says otherwise.
pub const DEFAULT_REPEAT: usize = 3;

/// Options of `compare`.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// Locks (default [`DEFAULT_LOCKS`]).
    pub locks: Vec<LockName>,
    /// Workloads with their parameters (default [`DEFAULT_WORKLOADS`] with
    /// [`WorkloadSpec::default_for`]).
    pub workloads: Vec<WorkloadSpec>,
    /// Thread counts (default [`default_threads`]).
    pub threads: Vec<usize>,
    /// Window per point; `None` = from the budget.
    pub duration: Option<Duration>,
    /// The 20-second version.
    pub quick: bool,
    /// Output directory; `None` = `results/<UTC timestamp>`.
    pub out: Option<PathBuf>,
    /// Virtual nodes; `None` = 2 on a one-node machine, the real nodes otherwise.
    pub virtual_nodes: Option<usize>,
    /// Cost model (0 = off).
    pub remote_penalty_ns: u64,
    /// Time one acquisition in this many.
    pub latency_sample_every: u64,
    /// Show the progress bar on stderr.
    pub progress: bool,
    /// Runs per point (>= 1), interleaved.
    pub repeat: usize,
    /// CPU-bound threads that never take the lock, beside every run (`--hog`).
    pub hog_threads: usize,
    /// Measure idle-while-waited gaps (`--idle-gaps`).
    pub idle_gaps: bool,
}

/// Thread counts 1, 2, `cpus`, 4x and 16x `cpus`, sorted, deduplicated.
pub fn default_threads(cpus: usize) -> Vec<usize> {
    let mut t = vec![1, 2, cpus, 4 * cpus, 16 * cpus];
    t.retain(|&n| n > 0);
    t.sort_unstable();
    t.dedup();
    t
}

/// The per-run window for `points` runs (points x repeats).
pub fn point_duration(points: usize, quick: bool) -> Duration {
    let (budget, lo, hi) = if quick {
        (QUICK_BUDGET_S, 0.05, 1.0)
    } else {
        (FULL_BUDGET_S, 0.25, 5.0)
    };
    Duration::from_secs_f64((budget / points.max(1) as f64).clamp(lo, hi))
}

/// `YYYYMMDDTHHMMSSZ` (UTC) for a time since the Unix epoch.
pub fn utc_timestamp(since_epoch: Duration) -> String {
    let secs = since_epoch.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (H. Hinnant, "chrono-Compatible Low-Level Date Algorithms").
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// What `compare` produced.
#[derive(Debug, Serialize)]
pub struct CompareResult {
    /// The conditions (machine, nodes, cost model).
    pub conditions: Conditions,
    /// Every point, in plan order (workload, threads, lock), each the summary of
    /// its repeats.
    pub points: Vec<Point>,
    /// Where the files went.
    #[serde(skip)]
    pub out_dir: PathBuf,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
    move |source| BenchError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Runs the suite and writes its files.
///
/// # Errors
/// [`BenchError::InvalidArg`] for an empty lock, workload or thread list or 0
/// repeats; [`BenchError::WrongLockKind`] for a lock that cannot run a workload; [`BenchError::Io`] / [`BenchError::Plot`] when
/// the output cannot be written; errors of [`run_point`].
pub fn run_compare(opts: &CompareOptions) -> Result<CompareResult, BenchError> {
    for (what, empty) in [
        ("--locks", opts.locks.is_empty()),
        ("--workloads", opts.workloads.is_empty()),
        ("--threads", opts.threads.is_empty()),
        ("--repeat", opts.repeat == 0),
    ] {
        if empty {
            return Err(BenchError::InvalidArg {
                what,
                value: if what == "--repeat" {
                    "0".into()
                } else {
                    String::new()
                },
                reason: if what == "--repeat" {
                    "needs at least 1 run per point".into()
                } else {
                    "the list is empty".into()
                },
            });
        }
    }
    let machine = Machine::detect();
    let virtual_nodes = match opts.virtual_nodes {
        None if machine.nodes.len() == 1 => Some(2),
        v => v,
    };
    let placement = Placement::new(&machine, virtual_nodes)?;
    // Run order: workload, then thread count, then lock, so the locks of one
    // (workload, threads) point run back to back and a burst of outside load
    // hits them alike rather than one lock's whole series.
    let mut plan = Vec::new();
    for &w in &opts.workloads {
        for &t in &opts.threads {
            for &l in &opts.locks {
                if l.is_rwlock() != (w.name() == WorkloadName::RwLock) {
                    return Err(BenchError::WrongLockKind {
                        lock: l,
                        workload: w.name(),
                    });
                }
                plan.push((w, t, l));
            }
        }
    }
    let n_runs = plan.len() * opts.repeat;
    let duration = opts
        .duration
        .unwrap_or_else(|| point_duration(n_runs, opts.quick));
    let out_dir = match &opts.out {
        Some(d) => d.clone(),
        None => Path::new("results").join(utc_timestamp(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
        )),
    };
    std::fs::create_dir_all(&out_dir).map_err(io_err(&out_dir))?;

    let conditions = Conditions {
        machine: machine.describe(),
        cpus: machine.cpus,
        real_nodes: machine.nodes.len(),
        nodes: placement.nodes,
        is_virtual: placement.is_virtual,
        remote_penalty_ns: opts.remote_penalty_ns,
        duration_s: duration.as_secs_f64(),
        max_loadavg_1m: None,
        latency_sample_every: opts.latency_sample_every,
        latency_clock_overhead_ns: 0,
        repeat: opts.repeat,
        hog_threads: opts.hog_threads,
        idle_gaps: opts.idle_gaps,
        workloads: workload_lines(&opts.workloads),
        wake_latency: opts.idle_gaps.then(crate::machine::measure_wake_latency),
        line_round_trip_ns: None,
        ignored_settings: crate::machine::ignored_settings(),
        env_layout: crate::machine::env_layout(),
        provenance: crate::machine::Provenance::collect(),
    };
    let bar = if opts.progress {
        ProgressBar::new(n_runs as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} eta {eta} {msg}")
            .expect("constant template")
            .progress_chars("=> "),
    );
    // Interleaved repeats: round r runs every point of the plan once.
    let mut runs: Vec<Vec<Point>> = vec![Vec::with_capacity(opts.repeat); plan.len()];
    for (round, i) in run_order(plan.len(), opts.repeat) {
        let (w, t, l) = plan[i];
        {
            bar.set_message(format!(
                "{} {l} {t} threads, run {}/{}",
                w.name(),
                round + 1,
                opts.repeat
            ));
            let cfg = RunConfig {
                lock: l,
                workload: w,
                threads: t,
                duration,
                placement: placement.clone(),
                remote_penalty_ns: opts.remote_penalty_ns,
                latency_sample_every: opts.latency_sample_every,
                machine: machine.clone(),
                hog_threads: opts.hog_threads,
                idle_gaps: opts.idle_gaps,
            };
            runs[i].push(run_point(&cfg)?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let points: Vec<Point> = runs.into_iter().map(summarise_repeats).collect();
    let mut conditions = conditions;
    conditions.max_loadavg_1m = points
        .iter()
        .filter_map(|p| p.machine_loadavg_1m)
        .reduce(f64::max);
    conditions.line_round_trip_ns = crate::report::round_trip_range(&points);
    conditions.latency_clock_overhead_ns =
        points.first().map_or(0, |p| p.latency_clock_overhead_ns);

    let result = CompareResult {
        conditions,
        points,
        out_dir,
    };
    let names: Vec<WorkloadName> = opts.workloads.iter().map(WorkloadSpec::name).collect();
    write_outputs(&result, &names)?;
    Ok(result)
}

/// The order runs happen in, as `(round, point index)`: every point once (round
/// 0), then every point again, and so on, so that slow drifts of a shared machine
/// hit every lock alike and repeat `r` of neighbouring points ran close in time.
pub fn run_order(points: usize, repeat: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..repeat).flat_map(move |r| (0..points).map(move |i| (r, i)))
}

/// `name: params` for each workload, for the header.
fn workload_lines(specs: &[WorkloadSpec]) -> Vec<String> {
    specs
        .iter()
        .map(|w| format!("{}: {}", w.name(), w.params()))
        .collect()
}

/// The table as printed: the conditions header, the rows, then the legend.
pub fn render(result: &CompareResult) -> String {
    format!(
        "{}{}{}",
        result.conditions.header(),
        table(&result.points),
        crate::report::LEGEND
    )
}

fn write_outputs(r: &CompareResult, workloads: &[WorkloadName]) -> Result<(), BenchError> {
    let write = |name: &str, body: String| {
        let p = r.out_dir.join(name);
        std::fs::write(&p, body).map_err(io_err(&p))
    };
    write("points.json", serde_json::to_string_pretty(r)?)?;
    write("points.csv", to_csv(&r.points))?;
    write("table.txt", render(r))?;
    let label = if r.conditions.is_virtual {
        format!(", {} virtual nodes", r.conditions.nodes)
    } else {
        format!(", {} nodes", r.conditions.nodes)
    };
    let mut extra = String::new();
    if r.conditions.hog_threads > 0 {
        extra += &format!(", {} hog", r.conditions.hog_threads);
    }
    if r.conditions.repeat > 1 {
        extra += &format!(", median of {}, min-max bars", r.conditions.repeat);
    }
    for w in workloads {
        plot_metric(
            &r.out_dir.join(format!("{w}_throughput.svg")),
            &r.points,
            w.as_str(),
            &format!("{w}: throughput ({}{label}{extra})", r.conditions.machine),
            "ops/us (all threads)",
            |p| {
                let r = p.spread_or_single().throughput_ops_per_us;
                (p.throughput_ops_per_us, r.min, r.max)
            },
        )?;
        plot_metric(
            &r.out_dir.join(format!("{w}_fairness.svg")),
            &r.points,
            w.as_str(),
            &format!(
                "{w}: fairness factor, 0.5 = fair ({}{label}{extra})",
                r.conditions.machine
            ),
            "share of ops by busier half",
            |p| {
                let r = p.spread_or_single().fairness_factor;
                (p.fairness_factor, r.min, r.max)
            },
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_are_deduplicated() {
        assert_eq!(default_threads(2), [1, 2, 8, 32]);
        assert_eq!(default_threads(1), [1, 2, 4, 16]);
        assert_eq!(default_threads(8), [1, 2, 8, 32, 128]);
    }

    #[test]
    fn durations_fit_the_budget() {
        // 7 locks x 2 workloads x 4 thread counts on 2 CPUs.
        let points = DEFAULT_LOCKS.len() * DEFAULT_WORKLOADS.len() * 4;
        assert_eq!(points, 56);
        // (The windows are whole ns: at most 1 ns per point over the budget.)
        let d = point_duration(points, false);
        assert!(d.as_secs_f64() * points as f64 <= FULL_BUDGET_S + 1e-6);
        // The default repeats still get windows above the floor (the budget holds).
        assert!(point_duration(points * DEFAULT_REPEAT, false) > Duration::from_millis(250));
        let q = point_duration(points, true);
        assert!(q.as_secs_f64() * points as f64 <= QUICK_BUDGET_S + 1e-6);
        assert_eq!(point_duration(1, true), Duration::from_secs(1));
        assert_eq!(point_duration(100_000, false), Duration::from_millis(250));
    }

    #[test]
    fn repeats_are_interleaved() {
        let order: Vec<_> = run_order(3, 2).collect();
        assert_eq!(order, [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]);
        assert_eq!(run_order(0, 3).count(), 0);
    }

    #[test]
    fn timestamps_are_utc_civil_dates() {
        assert_eq!(utc_timestamp(Duration::ZERO), "19700101T000000Z");
        // 2026-11-22 07:54:05 UTC
        assert_eq!(
            utc_timestamp(Duration::from_secs(1_795_334_045)),
            "20261122T075405Z"
        );
        // 2000-02-29 (leap day) 23:59:59
        assert_eq!(
            utc_timestamp(Duration::from_secs(951_868_799)),
            "20000229T235959Z"
        );
    }

    #[test]
    fn compare_writes_every_file() {
        let _g = crate::harness::one_point_at_a_time();
        let dir = std::env::temp_dir().join(format!("numa-bench-cmp-{}", std::process::id()));
        let opts = CompareOptions {
            locks: vec![LockName::ParkingLot, LockName::Std],
            workloads: vec![WorkloadSpec::default_for(WorkloadName::Locktorture)],
            threads: vec![1, 2],
            duration: Some(Duration::from_millis(30)),
            quick: true,
            out: Some(dir.clone()),
            virtual_nodes: Some(2),
            remote_penalty_ns: 0,
            latency_sample_every: 16,
            progress: false,
            repeat: 2,
            hog_threads: 1,
            idle_gaps: false,
        };
        let r = run_compare(&opts).unwrap();
        assert_eq!(r.points.len(), 4);
        for f in [
            "points.json",
            "points.csv",
            "table.txt",
            "locktorture_throughput.svg",
            "locktorture_fairness.svg",
        ] {
            let len = std::fs::metadata(dir.join(f)).unwrap().len();
            assert!(len > 0, "{f}");
        }
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("points.json")).unwrap())
                .unwrap();
        assert_eq!(json["points"].as_array().unwrap().len(), 4);
        assert_eq!(json["conditions"]["virtual"], true);
        assert_eq!(json["conditions"]["repeat"], 2);
        assert_eq!(json["conditions"]["hog_threads"], 1);
        for p in json["points"].as_array().unwrap() {
            assert_eq!(p["repeats"], 2);
            assert_eq!(p["hog_threads"], 1);
            assert_eq!(p["raw_repeats"].as_array().unwrap().len(), 2);
            let (lo, hi) = (
                p["spread"]["throughput_ops_per_us"]["min"]
                    .as_f64()
                    .unwrap(),
                p["spread"]["throughput_ops_per_us"]["max"]
                    .as_f64()
                    .unwrap(),
            );
            let med = p["throughput_ops_per_us"].as_f64().unwrap();
            assert!(lo <= med && med <= hi, "{lo} {med} {hi}");
        }
        assert!(r.points.iter().all(|p| p.raw_repeats.len() == 2));
        let csv = std::fs::read_to_string(dir.join("points.csv")).unwrap();
        assert_eq!(csv.lines().count(), 5);
        assert!(render(&r).contains("VIRTUAL"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn compare_rejects_mismatched_and_empty_lists() {
        let mut opts = CompareOptions {
            locks: vec![LockName::Std],
            workloads: vec![WorkloadSpec::default_for(WorkloadName::RwLock)],
            threads: vec![1],
            duration: Some(Duration::from_millis(1)),
            quick: true,
            out: Some(std::env::temp_dir().join("numa-bench-never-written")),
            virtual_nodes: None,
            remote_penalty_ns: 0,
            latency_sample_every: 16,
            progress: false,
            repeat: 2,
            hog_threads: 1,
            idle_gaps: false,
        };
        assert!(matches!(
            run_compare(&opts),
            Err(BenchError::WrongLockKind { .. })
        ));
        opts.repeat = 0;
        opts.workloads = vec![WorkloadSpec::default_for(WorkloadName::Kv)];
        assert!(matches!(
            run_compare(&opts),
            Err(BenchError::InvalidArg {
                what: "--repeat",
                ..
            })
        ));
        opts.repeat = 1;
        opts.threads.clear();
        assert!(matches!(
            run_compare(&opts),
            Err(BenchError::InvalidArg {
                what: "--threads",
                ..
            })
        ));
    }
}
