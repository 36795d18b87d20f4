//! `numa-bench diff OLD NEW`: two result sets compared point by point.
//!
//! OLD and NEW are each a result directory of `numa-bench compare` (its
//! `points.json` is read), a `points.json` itself, a JSON array of points, the
//! output of `numa-bench run --json` (one point, or one per line), or a
//! directory of `compare` result directories: rounds of one build, pooled
//! ([`pool_rounds`]; `scripts/ab.sh` writes them, interleaving the rounds of
//! two or more builds). Points match when their [`Key`] is equal: workload,
//! lock, threads, workload parameters and hog threads. Points with the same
//! key within one input (several `run --json` lines) are summarised like
//! repeats ([`summarise_repeats`]).
//!
//! For each matched point the report gives NEW/OLD for throughput, fairness factor
//! and p99 acquire latency (and idle-while-waited when both measured it), and marks
//! the throughput change `~` when the two min-max ranges overlap (within the
//! noise of the repeats) or `*` when they do not (only when both sides had more
//! than one run). A last table gives each lock's geometric mean of the throughput
//! ratios.
//!
//! Where both inputs hold `parking_lot` ([`BASELINE`], or the lock named by
//! `--baseline`: [`diff_against`]) at a point's workload,
//! thread count, parameters and hog threads, the report also gives each side's
//! `vs_pl` (the lock's throughput over parking_lot's, the median of the
//! per-repeat ratios, as `compare`'s table computes it: [`ratio_to`]) and
//! their ratio NEW/OLD, with its own per-lock geometric mean. That is the
//! ratio to read when OLD and NEW are two builds run one after the other:
//! what the machine does between the two runs (a virtual machine's vCPUs
//! moving between host cores, other tenants) and where each build placed the
//! shared benchmark code move both locks of a repeat alike, and cancel in the
//! ratio. On the 2-vCPU development guest, cst's throughput at kv with 2
//! threads ranged 3.8-8.7 ops/us over ten 2 s runs of one binary, as the host
//! moved the vCPUs; over 40 short repeats of one build its per-repeat ratio
//! to parking_lot had quartiles of 0.86 and 0.93.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::BenchError;
use crate::metrics::{Point, summarise_repeats};
use crate::report::{BASELINE, Conditions, lock_point_for, ratio_to};

/// What makes two points comparable.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    /// Workload name.
    pub workload: String,
    /// Lock name.
    pub lock: String,
    /// Worker threads.
    pub threads: usize,
    /// The workload's parameters (`workload_params`).
    pub params: String,
    /// Hog threads (`--hog`).
    pub hog_threads: usize,
}

impl Key {
    /// The key of a point.
    pub fn of(p: &Point) -> Self {
        Key {
            workload: p.workload.clone(),
            lock: p.lock.clone(),
            threads: p.threads,
            params: p.workload_params.clone(),
            hog_threads: p.hog_threads,
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} threads={} ({}) hog={}",
            self.workload, self.lock, self.threads, self.params, self.hog_threads
        )
    }
}

/// One input of `diff`: its points (one per key) and, for a `compare` result,
/// its conditions.
#[derive(Clone, Debug)]
pub struct ResultSet {
    /// The file read.
    pub path: PathBuf,
    /// `compare`'s conditions (`None` for `run --json` output).
    pub conditions: Option<Conditions>,
    /// Points, one per key, in file order.
    pub points: Vec<Point>,
    /// How many result directories were pooled into it (1 for a single
    /// file or directory).
    pub rounds: usize,
}

#[derive(Deserialize)]
struct CompareFile {
    #[serde(default)]
    conditions: Option<Conditions>,
    points: Vec<Point>,
}

fn bad(path: &Path, reason: impl ToString) -> BenchError {
    BenchError::BadResults {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Parses the text of a result file (see the module docs for the shapes).
///
/// # Errors
/// [`BenchError::BadResults`] when it is none of the accepted shapes or holds no point.
pub fn parse_results(path: &Path, text: &str) -> Result<ResultSet, BenchError> {
    let (conditions, points) = match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) if v.get("points").is_some() => {
            let f: CompareFile = serde_json::from_value(v).map_err(|e| bad(path, e))?;
            (f.conditions, f.points)
        }
        Ok(v @ Value::Array(_)) => (None, serde_json::from_value(v).map_err(|e| bad(path, e))?),
        Ok(v @ Value::Object(_)) => (
            None,
            vec![serde_json::from_value(v).map_err(|e| bad(path, e))?],
        ),
        Ok(_) => return Err(bad(path, "expected a JSON object or array of points")),
        Err(whole) => {
            // `run --json` lines appended to one file.
            let lines: Result<Vec<Point>, _> = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(serde_json::from_str::<Point>)
                .collect();
            (None, lines.map_err(|_| bad(path, whole))?)
        }
    };
    if points.is_empty() {
        return Err(bad(path, "holds no point"));
    }
    let mut groups: BTreeMap<Key, Vec<Point>> = BTreeMap::new();
    let mut order = Vec::new();
    for p in points {
        let k = Key::of(&p);
        let g = groups.entry(k.clone()).or_default();
        if g.is_empty() {
            order.push(k);
        }
        g.push(p);
    }
    let points = order
        .into_iter()
        .map(|k| {
            let g = groups.remove(&k).expect("every key has a group");
            if g.len() > 1 && g.iter().all(|p| p.repeats == 1) {
                summarise_repeats(g)
            } else {
                g.into_iter().next().expect("groups are not empty")
            }
        })
        .collect();
    Ok(ResultSet {
        path: path.to_owned(),
        conditions,
        points,
        rounds: 1,
    })
}

/// Pools rounds of one build (each a `compare` result, all at `path`) into
/// one result set: a point's runs are the raw repeats of its key in every
/// round, the rounds in the order given, summarised as repeats
/// ([`summarise_repeats`]). So the `vs_pl` of a pooled point is the median
/// of the per-repeat ratios over all rounds: repeat `i` of a lock is paired
/// with repeat `i` of parking_lot, as long as every round holds both (a round
/// that lacks one of them shifts the pairs, and `vs_pl` then falls back to
/// the ratio of the medians, see [`ratio_to`]). The conditions are the first
/// round's that has any.
///
/// # Panics
/// If `sets` is empty.
pub fn pool_rounds(path: &Path, sets: Vec<ResultSet>) -> ResultSet {
    assert!(!sets.is_empty(), "pool_rounds needs at least one round");
    let rounds = sets.len();
    let conditions = sets.iter().find_map(|s| s.conditions.clone());
    let mut groups: BTreeMap<Key, Vec<Point>> = BTreeMap::new();
    let mut order = Vec::new();
    for set in sets {
        for mut p in set.points {
            let k = Key::of(&p);
            let g = groups.entry(k.clone()).or_default();
            if g.is_empty() {
                order.push(k);
            }
            if p.raw_repeats.is_empty() {
                g.push(p);
            } else {
                g.append(&mut p.raw_repeats);
            }
        }
    }
    let points = order
        .into_iter()
        .map(|k| summarise_repeats(groups.remove(&k).expect("every key has a group")))
        .collect();
    ResultSet {
        path: path.to_owned(),
        conditions,
        points,
        rounds,
    }
}

/// The result directories (those with a `points.json`) directly inside
/// `dir`, sorted by name.
fn round_dirs(dir: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let entries = std::fs::read_dir(dir).map_err(|source| BenchError::MissingResults {
        path: dir.display().to_string(),
        source,
    })?;
    let mut rounds = Vec::new();
    for e in entries {
        let e = e.map_err(|source| BenchError::MissingResults {
            path: dir.display().to_string(),
            source,
        })?;
        let p = e.path();
        if p.join("points.json").is_file() {
            rounds.push(p);
        }
    }
    rounds.sort();
    Ok(rounds)
}

/// Reads a result directory (its `points.json`), a result file, or a
/// directory of result directories (pooled with [`pool_rounds`], in the
/// order of their names).
///
/// # Errors
/// [`BenchError::MissingResults`] when the file cannot be read (a directory
/// with neither `points.json` nor result directories, a wrong path);
/// [`BenchError::BadResults`] when it is not a result file, or one of the
/// pooled rounds is not.
pub fn load_results(path: &Path) -> Result<ResultSet, BenchError> {
    if path.is_dir() && !path.join("points.json").exists() {
        let rounds = round_dirs(path)?;
        if !rounds.is_empty() {
            let sets = rounds
                .iter()
                .map(|r| load_results(r))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(pool_rounds(path, sets));
        }
    }
    let file = if path.is_dir() {
        path.join("points.json")
    } else {
        path.to_owned()
    };
    let text = std::fs::read_to_string(&file).map_err(|source| BenchError::MissingResults {
        path: file.display().to_string(),
        source,
    })?;
    parse_results(&file, &text)
}

/// One matched point.
#[derive(Clone, Debug)]
pub struct Row {
    /// The key both points share.
    pub key: Key,
    /// OLD's point.
    pub old: Point,
    /// NEW's point.
    pub new: Point,
    /// OLD's throughput over the baseline lock's at the same point of OLD
    /// (see [`vs_lock`]).
    pub old_vs: Option<f64>,
    /// NEW's, likewise.
    pub new_vs: Option<f64>,
}

/// `p`'s throughput over that of [`BASELINE`] at the same workload, thread
/// count, parameters and hog threads in `points` (the median of the
/// per-repeat ratios, [`ratio_to`]); `None` for the baseline itself or when
/// `points` has no such point.
pub fn vs_baseline(points: &[Point], p: &Point) -> Option<f64> {
    vs_lock(points, p, BASELINE)
}

/// [`vs_baseline`] against the point of `lock` instead of parking_lot's.
pub fn vs_lock(points: &[Point], p: &Point, lock: &str) -> Option<f64> {
    if p.lock == lock {
        return None;
    }
    let base = lock_point_for(points, p, lock)?;
    ratio_to(p, base, |x| x.throughput_ops_per_us).map(|(median, _)| median)
}

/// `new / old`, `None` when `old` is not positive.
pub fn ratio(new: f64, old: f64) -> Option<f64> {
    (old > 0.0).then(|| new / old)
}

impl Row {
    /// NEW/OLD throughput.
    pub fn throughput_ratio(&self) -> Option<f64> {
        ratio(
            self.new.throughput_ops_per_us,
            self.old.throughput_ops_per_us,
        )
    }

    /// NEW/OLD of the throughput ratios to the baseline lock (`vs_pl`), when
    /// both sides have one.
    pub fn vs_baseline_ratio(&self) -> Option<f64> {
        ratio(self.new_vs?, self.old_vs?)
    }

    /// NEW/OLD fairness factor.
    pub fn fairness_ratio(&self) -> Option<f64> {
        ratio(self.new.fairness_factor, self.old.fairness_factor)
    }

    /// NEW/OLD p99 acquire latency.
    pub fn p99_ratio(&self) -> Option<f64> {
        ratio(
            self.new.acquire_latency_ns.p99 as f64,
            self.old.acquire_latency_ns.p99 as f64,
        )
    }

    /// `~` when the throughput ranges overlap, `*` when they do not, ` ` when
    /// either side ran once (no spread to judge by).
    pub fn throughput_mark(&self) -> char {
        if self.old.repeats < 2 || self.new.repeats < 2 {
            return ' ';
        }
        let (o, n) = (
            self.old.spread_or_single().throughput_ops_per_us,
            self.new.spread_or_single().throughput_ops_per_us,
        );
        if o.overlaps(&n) { '~' } else { '*' }
    }
}

/// The comparison of two result sets.
#[derive(Clone, Debug)]
pub struct Diff {
    /// OLD.
    pub old: ResultSet,
    /// NEW.
    pub new: ResultSet,
    /// Matched points, in OLD's order.
    pub rows: Vec<Row>,
    /// Keys only OLD has.
    pub only_old: Vec<Key>,
    /// Keys only NEW has.
    pub only_new: Vec<Key>,
    /// The lock of the `vs_` columns ([`BASELINE`] unless asked otherwise).
    pub baseline: String,
}

/// Matches the points of two result sets, with parking_lot ([`BASELINE`])
/// as the baseline lock.
///
/// # Errors
/// [`BenchError::NoCommonPoints`] when no key is in both.
pub fn diff(old: ResultSet, new: ResultSet) -> Result<Diff, BenchError> {
    diff_against(old, new, BASELINE)
}

/// Matches the points of two result sets; each side's `vs_` ratio is to
/// `baseline`'s point of the same input (`numa-bench diff --baseline cna`:
/// the combining lock's throughput over CNA's, per side).
///
/// # Errors
/// [`BenchError::NoBaseline`] when neither input measured `baseline`
/// (unless it is [`BASELINE`], whose columns are then left out);
/// [`BenchError::NoCommonPoints`] when no key is in both.
pub fn diff_against(old: ResultSet, new: ResultSet, baseline: &str) -> Result<Diff, BenchError> {
    let has = |set: &ResultSet| set.points.iter().any(|p| p.lock == baseline);
    if baseline != BASELINE && !has(&old) && !has(&new) {
        let locks: std::collections::BTreeSet<&str> = old
            .points
            .iter()
            .chain(&new.points)
            .map(|p| p.lock.as_str())
            .collect();
        return Err(BenchError::NoBaseline {
            lock: baseline.to_owned(),
            locks: locks.into_iter().collect::<Vec<_>>().join(", "),
        });
    }
    let new_by_key: BTreeMap<Key, &Point> = new.points.iter().map(|p| (Key::of(p), p)).collect();
    let old_keys: BTreeMap<Key, ()> = old.points.iter().map(|p| (Key::of(p), ())).collect();
    let mut rows = Vec::new();
    let mut only_old = Vec::new();
    for p in &old.points {
        let key = Key::of(p);
        match new_by_key.get(&key) {
            Some(n) => rows.push(Row {
                key,
                old: p.clone(),
                new: (*n).clone(),
                old_vs: vs_lock(&old.points, p, baseline),
                new_vs: vs_lock(&new.points, n, baseline),
            }),
            None => only_old.push(key),
        }
    }
    let only_new: Vec<Key> = new
        .points
        .iter()
        .map(Key::of)
        .filter(|k| !old_keys.contains_key(k))
        .collect();
    if rows.is_empty() {
        return Err(BenchError::NoCommonPoints {
            old: old.path.display().to_string(),
            new: new.path.display().to_string(),
            old_example: only_old
                .first()
                .map(ToString::to_string)
                .unwrap_or_default(),
            new_example: only_new
                .first()
                .map(ToString::to_string)
                .unwrap_or_default(),
        });
    }
    Ok(Diff {
        old,
        new,
        rows,
        only_old,
        only_new,
        baseline: baseline.to_owned(),
    })
}

/// The geometric mean of positive values (`None` when there is none).
pub fn geometric_mean(values: &[f64]) -> Option<f64> {
    let v: Vec<f64> = values.iter().copied().filter(|&x| x > 0.0).collect();
    (!v.is_empty()).then(|| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{r:.3}"))
}

fn describe(set: &ResultSet) -> String {
    let mut s = describe_conditions(&set.conditions);
    if set.rounds > 1 {
        let _ = write!(s, "; {} rounds pooled", set.rounds);
    }
    s
}

fn describe_conditions(c: &Option<Conditions>) -> String {
    match c {
        Some(c) => {
            let nodes = if c.is_virtual {
                format!("{} virtual nodes", c.nodes)
            } else {
                format!("{} nodes", c.nodes)
            };
            let mut s = format!(
                "{}, {nodes}, {:.2} s per run, {} repeat(s)",
                c.machine, c.duration_s, c.repeat
            );
            if c.hog_threads > 0 {
                let _ = write!(s, ", {} hog threads", c.hog_threads);
            }
            if c.remote_penalty_ns > 0 {
                let _ = write!(s, ", remote penalty {} ns", c.remote_penalty_ns);
            }
            s
        }
        None => "no conditions recorded (run --json output)".into(),
    }
}

/// Appends, per lock, the geometric mean of `metric` over the rows that have
/// it (nothing when no row has it).
fn geometric_means(s: &mut String, what: &str, d: &Diff, metric: fn(&Row) -> Option<f64>) {
    let mut by_lock: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in &d.rows {
        if let Some(x) = metric(r) {
            by_lock.entry(r.key.lock.as_str()).or_default().push(x);
        }
    }
    if by_lock.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n# {what} NEW/OLD per lock (geometric mean over its matched points)"
    );
    for (lock, v) in by_lock {
        let _ = writeln!(
            s,
            "{lock:<15} {:>7} over {} point(s)",
            fmt_ratio(geometric_mean(&v)),
            v.len()
        );
    }
}

/// The name of the `vs_` columns: `vs_pl` for parking_lot, `vs_<lock>` for
/// another baseline.
fn vs_tag(baseline: &str) -> String {
    if baseline == BASELINE {
        "vs_pl".into()
    } else {
        format!("vs_{baseline}")
    }
}

/// The report: a header naming both inputs, one row per matched point, the
/// unmatched keys, and per-lock geometric means of the throughput ratios.
pub fn render_diff(d: &Diff) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# OLD: {} ({})", d.old.path.display(), describe(&d.old));
    let _ = writeln!(s, "# NEW: {} ({})", d.new.path.display(), describe(&d.new));
    if let (Some(o), Some(n)) = (&d.old.conditions, &d.new.conditions)
        && (o.machine != n.machine || o.nodes != n.nodes || o.is_virtual != n.is_virtual)
    {
        s.push_str("# WARNING: the two runs were measured on different machines or node layouts\n");
    }
    s.push_str(
        "# ratios are NEW/OLD of the medians; throughput > 1 is faster, p99 < 1 is faster; \
         ~ = min-max ranges overlap (noise), * = they do not\n",
    );
    let idle = d.rows.iter().any(|r| {
        r.old.idle_while_waited_max_ns.is_some() && r.new.idle_while_waited_max_ns.is_some()
    });
    let vs = d.rows.iter().any(|r| r.vs_baseline_ratio().is_some());
    let tag = vs_tag(&d.baseline);
    let vs_width = (tag.len() + 4).max(9);
    if vs {
        let _ = writeln!(
            s,
            "# {tag}: throughput over {}'s in the same input (median of per-repeat ratios); \
             its NEW/OLD is the ratio to judge two builds by",
            d.baseline
        );
    }
    let _ = write!(
        s,
        "{:<12} {:>7} {:<15} {:>10} {:>10} {:>7}  {:>8} {:>8} {:>7} {:>9} {:>9} {:>7}",
        "workload",
        "threads",
        "lock",
        "old_ops/us",
        "new_ops/us",
        "ratio",
        "old_fair",
        "new_fair",
        "ratio",
        "old_p99",
        "new_p99",
        "ratio"
    );
    if vs {
        let _ = write!(
            s,
            " {:>w$} {:>w$} {:>7}",
            format!("old_{tag}"),
            format!("new_{tag}"),
            "ratio",
            w = vs_width
        );
    }
    if idle {
        let _ = write!(s, " {:>9} {:>9}", "old_idle", "new_idle");
    }
    s.push('\n');
    for (i, r) in d.rows.iter().enumerate() {
        if i > 0 {
            let prev = &d.rows[i - 1].key;
            if prev.workload != r.key.workload || prev.threads != r.key.threads {
                s.push('\n');
            }
        }
        let _ = write!(
            s,
            "{:<12} {:>7} {:<15} {:>10.3} {:>10.3} {:>7}{} {:>8.3} {:>8.3} {:>7} {:>9} {:>9} {:>7}",
            r.key.workload,
            r.key.threads,
            r.key.lock,
            r.old.throughput_ops_per_us,
            r.new.throughput_ops_per_us,
            fmt_ratio(r.throughput_ratio()),
            r.throughput_mark(),
            r.old.fairness_factor,
            r.new.fairness_factor,
            fmt_ratio(r.fairness_ratio()),
            r.old.acquire_latency_ns.p99,
            r.new.acquire_latency_ns.p99,
            fmt_ratio(r.p99_ratio()),
        );
        if vs {
            let v = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{x:.3}"));
            let _ = write!(
                s,
                " {:>w$} {:>w$} {:>7}",
                v(r.old_vs),
                v(r.new_vs),
                fmt_ratio(r.vs_baseline_ratio()),
                w = vs_width
            );
        }
        if idle {
            let us = |v: Option<u64>| {
                v.map_or_else(|| "-".into(), |v| format!("{:.1}us", v as f64 / 1e3))
            };
            let _ = write!(
                s,
                " {:>9} {:>9}",
                us(r.old.idle_while_waited_max_ns),
                us(r.new.idle_while_waited_max_ns)
            );
        }
        s.push('\n');
    }
    for (what, keys) in [("OLD", &d.only_old), ("NEW", &d.only_new)] {
        if !keys.is_empty() {
            let _ = writeln!(s, "\n# {} point(s) only in {what}:", keys.len());
            for k in keys.iter().take(10) {
                let _ = writeln!(s, "#   {k}");
            }
            if keys.len() > 10 {
                let _ = writeln!(s, "#   ...");
            }
        }
    }
    geometric_means(&mut s, "throughput", d, Row::throughput_ratio);
    geometric_means(&mut s, &tag, d, Row::vs_baseline_ratio);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::tests::sample_point;

    fn pt(lock: &str, threads: usize, tp: f64) -> Point {
        let mut p = sample_point();
        p.lock = lock.into();
        p.threads = threads;
        p.throughput_ops_per_us = tp;
        p
    }

    fn set(points: Vec<Point>) -> ResultSet {
        ResultSet {
            path: "x".into(),
            conditions: None,
            points,
            rounds: 1,
        }
    }

    /// Pooled rounds keep repeat `i` of a lock beside repeat `i` of
    /// parking_lot: `vs_pl` is the median of the per-repeat ratios over all
    /// rounds, not the ratio of the pooled medians.
    #[test]
    fn pooled_rounds_keep_the_repeat_pairs() {
        let runs =
            |lock: &str, v: &[f64]| summarise_repeats(v.iter().map(|&t| pt(lock, 2, t)).collect());
        let rounds = vec![
            set(vec![runs("cst", &[2.0, 4.0]), runs(BASELINE, &[1.0, 2.0])]),
            // A round of one repeat: its point is its own run.
            set(vec![pt(BASELINE, 2, 3.0), pt("cst", 2, 3.0)]),
            set(vec![runs("cst", &[1.0, 1.0]), runs(BASELINE, &[4.0, 4.0])]),
        ];
        let pooled = pool_rounds(Path::new("rounds"), rounds);
        assert_eq!(pooled.rounds, 3);
        assert_eq!(pooled.points.len(), 2);
        let cst = pooled.points.iter().find(|p| p.lock == "cst").unwrap();
        assert_eq!(cst.repeats, 5);
        let tps: Vec<f64> = cst
            .raw_repeats
            .iter()
            .map(|p| p.throughput_ops_per_us)
            .collect();
        assert_eq!(tps, [2.0, 4.0, 3.0, 1.0, 1.0]);
        // Per-repeat ratios 2, 2, 1, 0.25, 0.25: median 1. The pooled
        // medians (2 and 3) would give 0.667.
        assert_eq!(vs_baseline(&pooled.points, cst), Some(1.0));
        let d = diff(pooled.clone(), pooled).unwrap();
        assert!(render_diff(&d).contains("3 rounds pooled"));
    }

    #[test]
    fn matches_by_key_and_computes_ratios() {
        let old = set(vec![
            pt("cna", 2, 2.0),
            pt("std", 2, 1.0),
            pt("cna", 8, 1.0),
        ]);
        let mut new_cna = pt("cna", 2, 3.0);
        new_cna.acquire_latency_ns.p99 = 450;
        new_cna.fairness_factor = 0.6;
        let new = set(vec![pt("std", 2, 0.5), new_cna, pt("cna", 32, 1.0)]);
        let d = diff(old, new).unwrap();
        assert_eq!(d.rows.len(), 2);
        assert_eq!(d.rows[0].key.lock, "cna");
        assert_eq!(d.rows[0].throughput_ratio(), Some(1.5));
        assert_eq!(d.rows[0].p99_ratio(), Some(0.5));
        assert!((d.rows[0].fairness_ratio().unwrap() - 1.2).abs() < 1e-12);
        assert_eq!(d.rows[1].throughput_ratio(), Some(0.5));
        assert_eq!(d.only_old.len(), 1);
        assert_eq!(d.only_old[0].threads, 8);
        assert_eq!(d.only_new[0].threads, 32);
        let out = render_diff(&d);
        assert!(out.contains("1.500") && out.contains("0.500"), "{out}");
        assert!(
            out.contains("only in OLD") && out.contains("only in NEW"),
            "{out}"
        );
    }

    /// Each side's ratio to parking_lot comes from its own parking_lot point
    /// (same workload, threads, parameters, hogs), per repeat pair.
    #[test]
    fn ratios_to_parking_lot_per_side() {
        let runs =
            |lock: &str, v: &[f64]| summarise_repeats(v.iter().map(|&t| pt(lock, 2, t)).collect());
        let mut other_hog = pt(BASELINE, 2, 100.0);
        other_hog.hog_threads = 1;
        // cst ran at twice parking_lot's rate in every repeat of both runs,
        // but NEW's machine was twice as slow for both locks: the throughput
        // ratio halves, the ratio to parking_lot stays.
        let old = set(vec![
            runs("cst", &[2.0, 4.0]),
            runs(BASELINE, &[1.0, 2.0]),
            other_hog.clone(),
        ]);
        let new = set(vec![
            runs("cst", &[1.0, 3.0]),
            runs(BASELINE, &[0.5, 1.5]),
            pt("cna", 2, 1.0),
        ]);
        let d = diff(old, new).unwrap();
        let cst = d.rows.iter().find(|r| r.key.lock == "cst").unwrap();
        assert_eq!(cst.throughput_ratio(), Some(2.0 / 3.0));
        assert_eq!((cst.old_vs, cst.new_vs), (Some(2.0), Some(2.0)));
        assert_eq!(cst.vs_baseline_ratio(), Some(1.0));
        let pl = d.rows.iter().find(|r| r.key.lock == BASELINE).unwrap();
        assert_eq!(pl.vs_baseline_ratio(), None, "parking_lot against itself");
        let out = render_diff(&d);
        assert!(out.contains("old_vs_pl") && out.contains("1.000"), "{out}");
        assert!(out.contains("vs_pl NEW/OLD per lock"), "{out}");
        // Only a parking_lot point with the same hog count counts.
        let mut hog = pt("cst", 2, 1.0);
        hog.hog_threads = 1;
        assert_eq!(
            vs_baseline(&[hog.clone(), pt(BASELINE, 2, 1.0)], &hog),
            None
        );
        assert_eq!(vs_baseline(&[hog.clone(), other_hog], &hog), Some(0.01));
    }

    #[test]
    fn params_and_hogs_are_part_of_the_key() {
        let mut other = pt("cna", 2, 1.0);
        other.workload_params = "keys=5".into();
        let mut hog = pt("cna", 2, 1.0);
        hog.hog_threads = 1;
        let e = diff(set(vec![pt("cna", 2, 1.0)]), set(vec![other, hog])).unwrap_err();
        match e {
            BenchError::NoCommonPoints {
                old_example,
                new_example,
                ..
            } => {
                assert!(old_example.contains("cna"), "{old_example}");
                assert!(new_example.contains("keys=5"), "{new_example}");
            }
            e => panic!("{e}"),
        }
    }

    #[test]
    fn overlap_marks_need_repeats() {
        let runs = |v: &[f64]| summarise_repeats(v.iter().map(|&t| pt("cna", 2, t)).collect());
        let row = |o: Point, n: Point| Row {
            key: Key::of(&o),
            old: o,
            new: n,
            old_vs: None,
            new_vs: None,
        };
        assert_eq!(
            row(runs(&[1.0, 1.2]), runs(&[1.1, 1.3])).throughput_mark(),
            '~'
        );
        assert_eq!(
            row(runs(&[1.0, 1.2]), runs(&[1.3, 1.4])).throughput_mark(),
            '*'
        );
        assert_eq!(
            row(pt("cna", 2, 1.0), runs(&[1.3, 1.4])).throughput_mark(),
            ' '
        );
    }

    #[test]
    fn parses_every_result_shape() {
        let p = serde_json::to_string(&sample_point()).unwrap();
        let path = Path::new("f.json");
        let compare = format!("{{\"conditions\": null, \"points\": [{p}]}}");
        assert_eq!(parse_results(path, &compare).unwrap().points.len(), 1);
        assert_eq!(
            parse_results(path, &format!("[{p}]")).unwrap().points.len(),
            1
        );
        assert_eq!(parse_results(path, &p).unwrap().points.len(), 1);
        // Three `run --json` lines of one key become one point of 3 repeats.
        let lines = parse_results(path, &format!("{p}\n{p}\n\n{p}\n")).unwrap();
        assert_eq!(lines.points.len(), 1);
        assert_eq!(lines.points[0].repeats, 3);
        for badtext in ["", "42", "{\"points\": []}", "[{\"lock\": 1}]", "not json"] {
            assert!(
                matches!(
                    parse_results(path, badtext),
                    Err(BenchError::BadResults { .. })
                ),
                "{badtext:?}"
            );
        }
    }

    #[test]
    fn points_written_before_repeats_still_load() {
        // A point as numa-bench wrote it before --repeat/--hog: no new keys.
        let mut v = serde_json::to_value(sample_point()).unwrap();
        let o = v.as_object_mut().unwrap();
        for k in [
            "hog_threads",
            "idle_while_waited_max_ns",
            "repeats",
            "spread",
            "raw_repeats",
        ] {
            o.remove(k);
        }
        let r = parse_results(Path::new("old.json"), &v.to_string()).unwrap();
        assert_eq!(r.points[0].repeats, 1);
        assert_eq!(r.points[0].hog_threads, 0);
        assert!(r.points[0].spread.is_none());
    }

    #[test]
    fn missing_inputs_are_typed_errors() {
        let dir = std::env::temp_dir().join(format!("numa-bench-diff-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = load_results(&dir).unwrap_err();
        assert!(
            matches!(&e, BenchError::MissingResults { path, .. } if path.ends_with("points.json")),
            "{e}"
        );
        let e = load_results(&dir.join("nope.json")).unwrap_err();
        assert!(matches!(e, BenchError::MissingResults { .. }), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn geometric_mean_of_ratios() {
        assert_eq!(geometric_mean(&[]), None);
        assert!((geometric_mean(&[2.0, 0.5]).unwrap() - 1.0).abs() < 1e-12);
        assert!((geometric_mean(&[4.0, 1.0]).unwrap() - 2.0).abs() < 1e-12);
    }
}
