//! `numa-bench compare --preset hq`: the HQ spinlock RFC's locktorture table
//! (seed 002: "HQ spinlock", Huawei, linux-arch, November 2025).
//!
//! The RFC compares its HQ lock with the kernel's qspinlock under locktorture at
//! growing thread counts and reports, per thread count, the gain in throughput
//! of HQ over qspinlock and each lock's fairness. This preset runs the same
//! shape here: locktorture with `hq` ([`numa_spin::RawHqMutex`]), `queued`
//! (qspinlock's queue without NUMA ordering, the RFC's baseline) and `cna` (the
//! RFC's other comparison) at 1, 2, 4, 8, 16 and 32 threads, once per node
//! count 1, 2 and 4 (virtual nodes unless the machine has that many real ones),
//! and prints per node count and thread count the throughput of each lock, the
//! gain of `hq` over `queued` and over `cna` (`+12.3%` = 1.123x), and the
//! fairness factor of each lock (share of the operations done by the busier
//! half of the threads: 0.5 = fair, 1.0 = the busier half did everything; the
//! RFC's and locktorture's measure).
//!
//! Each node count is one [`run_compare`] (repeats interleaved as there), its
//! files in `<out>/nodes-<n>/`; the preset's table goes to `<out>/hq_preset.txt`
//! and stdout. The window per run comes from a budget over all runs: 240 s in
//! all (about 4.5 minutes with start-up), `--quick` 20 s.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use crate::BenchError;
use crate::compare::{CompareOptions, CompareResult, run_compare};
use crate::harness::WorkloadSpec;
use crate::locks::LockName;
use crate::metrics::Point;
use crate::workloads::WorkloadName;

/// The locks of the preset: the lock under test, the RFC's baseline, CNA.
pub const HQ_PRESET_LOCKS: [LockName; 3] = [LockName::Hq, LockName::Queued, LockName::Cna];
/// The RFC's thread counts.
pub const HQ_PRESET_THREADS: [usize; 6] = [1, 2, 4, 8, 16, 32];
/// The node counts, one `compare` each.
pub const HQ_PRESET_NODES: [usize; 3] = [1, 2, 4];
/// Time budget of the full preset, s.
pub const HQ_PRESET_BUDGET_S: f64 = 240.0;
/// Time budget of `--quick`, s.
pub const HQ_PRESET_QUICK_BUDGET_S: f64 = 20.0;

/// Options of the preset.
#[derive(Clone, Debug)]
pub struct HqPresetOptions {
    /// Thread counts (default [`HQ_PRESET_THREADS`]).
    pub threads: Vec<usize>,
    /// Node counts (default [`HQ_PRESET_NODES`]).
    pub nodes: Vec<usize>,
    /// Window per run; `None` = from the budget.
    pub duration: Option<Duration>,
    /// The 20-second version.
    pub quick: bool,
    /// Runs per point (>= 1), interleaved within a node count.
    pub repeat: usize,
    /// Output directory (one subdirectory per node count).
    pub out: PathBuf,
    /// Cost model (0 = off), as for `compare`.
    pub remote_penalty_ns: u64,
    /// Show the progress bar on stderr.
    pub progress: bool,
}

/// What the preset produced: one `compare` per node count.
#[derive(Debug)]
pub struct HqPresetResult {
    /// `(nodes, result)` in the order run.
    pub runs: Vec<(usize, CompareResult)>,
}

/// The window per run for `runs` runs in all.
pub fn preset_duration(runs: usize, quick: bool) -> Duration {
    let (budget, lo, hi) = if quick {
        (HQ_PRESET_QUICK_BUDGET_S, 0.02, 0.5)
    } else {
        (HQ_PRESET_BUDGET_S, 0.2, 5.0)
    };
    Duration::from_secs_f64((budget / runs.max(1) as f64).clamp(lo, hi))
}

/// Runs the preset and writes `hq_preset.txt` beside the per-node-count
/// directories.
///
/// # Errors
/// [`BenchError::InvalidArg`] for an empty thread or node list, a node count or
/// thread count of 0, or 0 repeats; the errors of [`run_compare`]; [`BenchError::Io`]
/// when the table cannot be written.
pub fn run_hq_preset(opts: &HqPresetOptions) -> Result<HqPresetResult, BenchError> {
    for (what, list) in [
        ("--threads", &opts.threads),
        ("--virtual-nodes", &opts.nodes),
    ] {
        if list.is_empty() || list.contains(&0) {
            return Err(BenchError::InvalidArg {
                what,
                value: format!("{list:?}"),
                reason: "needs a non-empty list of counts of at least 1".into(),
            });
        }
    }
    let runs = opts.nodes.len() * opts.threads.len() * HQ_PRESET_LOCKS.len() * opts.repeat.max(1);
    let duration = opts
        .duration
        .unwrap_or_else(|| preset_duration(runs, opts.quick));
    let mut out = Vec::new();
    for &nodes in &opts.nodes {
        let compare = CompareOptions {
            locks: HQ_PRESET_LOCKS.to_vec(),
            workloads: vec![WorkloadSpec::default_for(WorkloadName::Locktorture)],
            threads: opts.threads.clone(),
            duration: Some(duration),
            quick: opts.quick,
            out: Some(opts.out.join(format!("nodes-{nodes}"))),
            virtual_nodes: Some(nodes),
            remote_penalty_ns: opts.remote_penalty_ns,
            latency_sample_every: 16,
            progress: opts.progress,
            repeat: opts.repeat,
            hog_threads: 0,
            idle_gaps: false,
        };
        out.push((nodes, run_compare(&compare)?));
    }
    let result = HqPresetResult { runs: out };
    let path = opts.out.join("hq_preset.txt");
    std::fs::write(&path, render_hq_preset(&result)).map_err(|source| BenchError::Io {
        path: path.display().to_string(),
        source,
    })?;
    Ok(result)
}

/// `+12.3%` for a ratio of 1.123; `-` when the baseline is 0.
fn gain(new: f64, base: f64) -> String {
    if base > 0.0 {
        format!("{:+.1}%", (new / base - 1.0) * 100.0)
    } else {
        "-".into()
    }
}

/// The point of `lock` at `threads` threads.
fn point(points: &[Point], lock: LockName, threads: usize) -> Option<&Point> {
    points
        .iter()
        .find(|p| p.lock == lock.as_str() && p.threads == threads)
}

/// The preset's table: the conditions of the first run (machine, virtual or
/// real nodes, cost model, repeats), then per node count one row per thread
/// count with the throughput of each lock (ops/us, all threads, median of the
/// repeats), the gains of `hq`, and the fairness factors.
pub fn render_hq_preset(result: &HqPresetResult) -> String {
    let mut s = String::new();
    if let Some((_, first)) = result.runs.first() {
        s.push_str(&first.conditions.header());
    }
    s.push_str(
        "# HQ spinlock RFC table: locktorture, gain = hq throughput / other - 1, \
         fairness factor = share of ops by the busier half of the threads (0.5 = fair)\n",
    );
    for (nodes, r) in &result.runs {
        let kind = if r.conditions.is_virtual {
            "virtual"
        } else {
            "real"
        };
        let _ = writeln!(s, "\n## {nodes} node(s) ({kind})");
        let _ = writeln!(
            s,
            "{:>7} {:>9} {:>9} {:>9} {:>13} {:>10} {:>8} {:>8} {:>8}",
            "threads",
            "hq",
            "queued",
            "cna",
            "hq vs queued",
            "hq vs cna",
            "fair hq",
            "fair qd",
            "fair cna"
        );
        let mut threads: Vec<usize> = r.points.iter().map(|p| p.threads).collect();
        threads.dedup();
        for t in threads {
            let [hq, qd, cna] = HQ_PRESET_LOCKS.map(|l| point(&r.points, l, t));
            let tp = |p: Option<&Point>| p.map_or(0.0, |p| p.throughput_ops_per_us);
            let ff = |p: Option<&Point>| p.map_or(f64::NAN, |p| p.fairness_factor);
            let _ = writeln!(
                s,
                "{:>7} {:>9.2} {:>9.2} {:>9.2} {:>13} {:>10} {:>8.3} {:>8.3} {:>8.3}",
                t,
                tp(hq),
                tp(qd),
                tp(cna),
                gain(tp(hq), tp(qd)),
                gain(tp(hq), tp(cna)),
                ff(hq),
                ff(qd),
                ff(cna)
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gains_are_signed_percentages() {
        assert_eq!(gain(1.5, 1.0), "+50.0%");
        assert_eq!(gain(0.75, 1.0), "-25.0%");
        assert_eq!(gain(1.0, 0.0), "-");
    }

    #[test]
    fn durations_fit_the_budget() {
        // 3 node counts x 6 thread counts x 3 locks x 3 repeats.
        let d = preset_duration(162, false);
        assert!(d.as_secs_f64() * 162.0 <= HQ_PRESET_BUDGET_S + 1e-9);
        let q = preset_duration(54, true);
        assert!(q.as_secs_f64() * 54.0 <= HQ_PRESET_QUICK_BUDGET_S + 1e-9);
    }

    /// The preset in a tiny quick mode: one table per node count, one row per
    /// thread count, every column filled.
    #[test]
    fn preset_prints_one_row_per_thread_count_per_node_count() {
        let _g = crate::harness::one_point_at_a_time();
        let dir = std::env::temp_dir().join(format!("numa-bench-hq-preset-{}", std::process::id()));
        let opts = HqPresetOptions {
            threads: vec![1, 2, 4],
            nodes: vec![1, 2],
            duration: Some(Duration::from_millis(20)),
            quick: true,
            repeat: 1,
            out: dir.clone(),
            remote_penalty_ns: 0,
            progress: false,
        };
        let r = run_hq_preset(&opts).unwrap();
        assert_eq!(r.runs.len(), 2);
        let text = std::fs::read_to_string(dir.join("hq_preset.txt")).unwrap();
        assert_eq!(text, render_hq_preset(&r));
        let sections: Vec<&str> = text.split("\n## ").skip(1).collect();
        assert_eq!(sections.len(), 2, "{text}");
        for (section, nodes) in sections.iter().zip([1, 2]) {
            assert!(
                section.starts_with(&format!("{nodes} node(s) (virtual)")),
                "{section}"
            );
            let rows: Vec<Vec<&str>> = section
                .lines()
                .skip(2)
                .map(|l| l.split_whitespace().collect())
                .collect();
            assert_eq!(rows.len(), 3, "{section}");
            for (row, threads) in rows.iter().zip([1, 2, 4]) {
                assert_eq!(row.len(), 9, "{row:?}");
                assert_eq!(row[0], threads.to_string());
                for tp in &row[1..4] {
                    assert!(tp.parse::<f64>().unwrap() > 0.0, "{row:?}");
                }
                for g in &row[4..6] {
                    assert!(
                        g.ends_with('%') && g[..g.len() - 1].parse::<f64>().is_ok(),
                        "{row:?}"
                    );
                }
                for f in &row[6..9] {
                    let f: f64 = f.parse().unwrap();
                    assert!((0.5..=1.0).contains(&f), "{row:?}");
                }
            }
        }
        for nodes in [1, 2] {
            assert!(dir.join(format!("nodes-{nodes}/points.json")).exists());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn preset_rejects_empty_and_zero_counts() {
        let opts = HqPresetOptions {
            threads: vec![1],
            nodes: vec![0],
            duration: Some(Duration::from_millis(1)),
            quick: true,
            repeat: 1,
            out: std::env::temp_dir().join("numa-bench-never-written"),
            remote_penalty_ns: 0,
            progress: false,
        };
        assert!(matches!(
            run_hq_preset(&opts),
            Err(BenchError::InvalidArg { .. })
        ));
    }
}
