//! The `numa-bench` command: what each lock does to throughput, fairness and
//! cross-node traffic on this machine.
//!
//! - `numa-bench compare [--quick] [--out DIR] [--repeat N] [--hog N]`: the default
//!   suite; prints a table and writes JSON, CSV and SVG plots into
//!   `results/<timestamp>/`.
//! - `numa-bench compare --preset hq [--quick] [--repeat N]`: the HQ spinlock
//!   RFC's table (locktorture, `hq` vs `queued` and `cna`, 1-32 threads, 1, 2
//!   and 4 nodes; gains and fairness factors), see [`numa_bench::preset`].
//! - `numa-bench run --lock L --workload W --threads N [--json]`: one point.
//! - `numa-bench diff OLD NEW`: two result directories compared point by point.
//! - `numa-bench handoff [--locks L,..] [--paths P,..] [--rounds N] [--quick]
//!   [--json]`: the time of one hand-off per path (retake, word, local,
//!   remote, wake) between two threads pinned to two CPUs, see
//!   [`numa_bench::handoff`].
//! - `numa-bench topology`: the machine's layout.

mod topology_cmd;

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use numa_bench::BenchError;
use numa_bench::compare::{
    CompareOptions, DEFAULT_LOCKS, DEFAULT_REPEAT, DEFAULT_WORKLOADS, default_threads, render,
    run_compare,
};
use numa_bench::delay::{Delay, parse_duration};
use numa_bench::harness::{RunConfig, WorkloadSpec, run_point};
use numa_bench::locks::LockName;
use numa_bench::machine::{Machine, Placement};
use numa_bench::metrics::summarise_repeats;
use numa_bench::report::{Conditions, table};
use numa_bench::workloads::WorkloadName;
use numa_bench::workloads::kv::Kv;
use numa_bench::workloads::locktorture::Locktorture;
use numa_bench::workloads::page_alloc::PageAlloc;
use numa_bench::workloads::rwlock::RwKv;

/// NUMA-aware lock benchmarks: locktorture, kv, page-alloc and rwlock workloads.
#[derive(Parser, Debug)]
#[command(name = "numa-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show the machine's NUMA topology.
    Topology(topology_cmd::TopologyArgs),
    /// Run one (lock, workload, threads) point.
    Run(RunArgs),
    /// Run the default comparison suite; write table, JSON, CSV and SVG plots.
    Compare(CompareArgs),
    /// Compare two result sets point by point: NEW/OLD ratios of throughput,
    /// fairness and p99 latency.
    Diff(DiffArgs),
    /// Time one hand-off per path (retake, word, local, remote, wake) between
    /// two threads pinned to two CPUs, in flag round trips between them.
    Handoff(HandoffArgs),
    /// Time how long condition-variable waiters requeued by `notify_all`
    /// onto a hammered mutex take to get it (p50, p99, max per lock).
    Requeue(RequeueArgs),
    /// Plot a `scripts/apps.sh` results.json (real programs through
    /// numa-preload): one SVG per program beside it, each lock's throughput
    /// ratio to pthread against threads.
    PlotApps(PlotAppsArgs),
}

#[derive(Args, Debug)]
struct HandoffArgs {
    /// Locks, comma-separated (lock_api mutexes; default cst,cna,hq,queued,parking_lot).
    #[arg(long, value_delimiter = ',')]
    locks: Option<Vec<LockName>>,
    /// Timed samples per (lock, path, critical section) batch (default 10,000).
    #[arg(long, value_name = "N")]
    samples: Option<usize>,
    /// 1,000 samples per batch (the CI smoke run).
    #[arg(long)]
    quick: bool,
    /// The holder's critical sections once the waiter is in its state:
    /// 0, <n>ns or <n>us, comma-separated (default 0,1us,5us).
    #[arg(long, value_delimiter = ',', value_parser = numa_bench::handoff::parse_cs_ns)]
    cs: Option<Vec<u64>>,
    /// Paths, comma-separated: retake, word, local, remote, wake (default all).
    #[arg(long, value_delimiter = ',', value_parser = numa_bench::handoff::Path::parse)]
    paths: Option<Vec<numa_bench::handoff::Path>>,
    /// Rounds: each (path, critical section) batch runs once per lock per
    /// round, the locks' batches back to back (compare locks within a round).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Print one JSON object a line (lock, round, path, cs_ns, median_rtt, p90_rtt,
    /// samples, ...) instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct RequeueArgs {
    /// Locks with a condition variable, comma-separated (default cst,parking_lot).
    #[arg(long, value_delimiter = ',')]
    locks: Option<Vec<LockName>>,
    /// Threads that take the mutex in a loop.
    #[arg(long, default_value_t = 16)]
    hammers: usize,
    /// Condition-variable waiters, notified together by `notify_all`.
    #[arg(long, default_value_t = 4)]
    waiters: usize,
    /// Re-acquisitions to time per lock.
    #[arg(long, default_value_t = 2000)]
    acquisitions: usize,
    /// The hammering threads' critical section: 0, <n>ns or <n>us.
    #[arg(long, default_value = "200ns", value_parser = numa_bench::handoff::parse_cs_ns)]
    cs: u64,
    /// Virtual nodes the threads sit on (thread i on node i % N).
    #[arg(long, default_value_t = 2)]
    virtual_nodes: usize,
    /// Print one JSON object a line instead of the table.
    #[arg(long)]
    json: bool,
}

/// The locks given with `--locks`, else a command's default list (registry names).
fn locks_or(
    given: &Option<Vec<LockName>>,
    default: &[&str],
) -> Result<Vec<LockName>, Box<dyn Error>> {
    match given {
        Some(l) => Ok(l.clone()),
        None => Ok(default
            .iter()
            .map(|l| l.parse())
            .collect::<Result<Vec<LockName>, _>>()?),
    }
}

fn requeue(args: &RequeueArgs) -> Result<(), Box<dyn Error>> {
    use numa_bench::requeue::{DEFAULT_LOCKS, RequeueOptions, render, run_requeue};
    let locks = locks_or(&args.locks, &DEFAULT_LOCKS)?;
    let rows = run_requeue(&RequeueOptions {
        locks,
        hammers: args.hammers,
        waiters: args.waiters,
        acquisitions: args.acquisitions,
        cs_ns: args.cs,
        nodes: args.virtual_nodes,
    })?;
    if args.json {
        for r in &rows {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        print!("{}", render(&rows));
    }
    Ok(())
}

#[derive(Args, Debug)]
struct PlotAppsArgs {
    /// The results.json written by `scripts/apps.sh` (default out dir `target/apps/`).
    results: PathBuf,
}

#[derive(Args, Debug)]
struct DiffArgs {
    /// The "before" result: a `compare` output directory, its points.json,
    /// `run --json` output (one point per line), or a directory of `compare`
    /// output directories (rounds of one build, pooled: `scripts/ab.sh`).
    old: PathBuf,
    /// The "after" result, same forms.
    new: PathBuf,
    /// The lock of the `vs_` columns: each side's throughput over this lock's,
    /// median of the per-repeat ratios (e.g. `cna` to judge the combining lock
    /// against the CNA lock it runs on).
    #[arg(long, default_value = "parking_lot")]
    baseline: String,
}

/// Options shared by `run` and `compare`.
#[derive(Args, Debug)]
struct Common {
    /// Spread threads over N virtual NUMA nodes (numa_topology::set_current_thread_node).
    /// Reports say the nodes are virtual.
    #[arg(long, value_name = "N")]
    virtual_nodes: Option<usize>,
    /// Cost model: a critical section run on another node than the previous one
    /// spins P extra ns (stands for moving the data across the interconnect). 0 = off.
    #[arg(long, value_name = "P", default_value_t = 0)]
    remote_penalty_ns: u64,
    /// Time one acquisition in this many for acquire_latency_ns (1 = all; each
    /// timing costs two clock reads, ~25 ns each, one inside the critical section).
    #[arg(long, value_name = "N", default_value_t = 16)]
    latency_sample_every: u64,
    /// Run N CPU-bound threads beside the workers for the whole window; they never
    /// take the lock (another tenant, a preempted vCPU). Their CPU time is left out
    /// of cpu_ns/op.
    #[arg(long, value_name = "N", default_value_t = 0)]
    hog: usize,
    /// Measure the longest time the lock was free while a sampled waiter waited
    /// (idle_while_waited_max_ns, mutex workloads; a lower bound). Costs two clock
    /// reads per critical section while a sampled waiter waits. The header then
    /// also gives the machine's wake-up latency (1 s of 20 us sleeps, measured
    /// before the points): gaps that long can be the machine's, not the lock's.
    #[arg(long)]
    idle_gaps: bool,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Lock: cna, queued, hq, combining, cst, parking_lot, std, spin, ticket (mutexes);
    /// cst-rw, parking_lot-rw, std-rw (rwlock workload).
    #[arg(long)]
    lock: LockName,
    /// Workload: locktorture, kv, page-alloc, rwlock.
    #[arg(long)]
    workload: WorkloadName,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Measured window (e.g. 2s, 500ms).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    duration: Duration,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Run the point N times and report the median with the min-max spread.
    #[arg(long, value_name = "N", default_value_t = 1)]
    repeat: usize,
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    params: WorkloadParams,
}

/// Workload parameters (each applies to the workloads named in its help).
#[derive(Args, Debug)]
struct WorkloadParams {
    /// locktorture: shared cache lines written per critical section.
    #[arg(long, default_value_t = 2)]
    lines: usize,
    /// locktorture: busy work inside the critical section: 0, <n>ns, <n>us or <n>it.
    #[arg(long, default_value = "0")]
    cs: Delay,
    /// locktorture: busy work after the critical section: 0, <n>ns, <n>us or <n>it.
    #[arg(long, default_value = "50it")]
    delay: Delay,
    /// kv, rwlock: keys in the map.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// kv, rwlock: Zipf exponent of the key distribution (0 = uniform).
    #[arg(long, default_value_t = 0.99)]
    zipf_s: f64,
    /// kv: percentage of gets.
    #[arg(long, default_value_t = 90)]
    get_pct: u8,
    /// rwlock: percentage of reads.
    #[arg(long, default_value_t = 95)]
    read_pct: u8,
    /// page-alloc: pages moved per zone-lock acquisition (pcp->batch).
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// page-alloc: per-thread cache size that triggers a drain (pcp->high).
    #[arg(long, default_value_t = 48)]
    pcp_high: usize,
    /// page-alloc: pages allocated before all are freed.
    #[arg(long, default_value_t = 64)]
    burst: usize,
}

/// A named comparison (`compare --preset`).
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Preset {
    /// The HQ spinlock RFC's table: locktorture with hq, queued and cna at 1, 2,
    /// 4, 8, 16, 32 threads (or --threads) on 1, 2 and 4 nodes (or
    /// --virtual-nodes N); gain of hq over queued and cna, fairness factors.
    Hq,
}

#[derive(Args, Debug)]
struct CompareArgs {
    /// A named comparison instead of the default suite (`hq`: the HQ spinlock
    /// RFC's table; ~4.5 min, --quick ~25 s).
    #[arg(long, value_enum, conflicts_with_all = ["locks", "workloads"])]
    preset: Option<Preset>,
    /// The ~20 s version (the CI smoke test).
    #[arg(long)]
    quick: bool,
    /// Output directory (default results/<UTC timestamp>).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Locks, comma-separated (default cna,queued,hq,combining,cst,parking_lot,std;
    /// spin, ticket and the others of `run --help` on request).
    #[arg(long, value_delimiter = ',')]
    locks: Option<Vec<LockName>>,
    /// Workloads, comma-separated (default locktorture,kv).
    #[arg(long, value_delimiter = ',')]
    workloads: Option<Vec<WorkloadName>>,
    /// Thread counts, comma-separated (default 1,2,CPUs,4xCPUs,16xCPUs).
    #[arg(long, value_delimiter = ',')]
    threads: Option<Vec<usize>>,
    /// Window per run (default: the budget, 150 s or 14 s with --quick, over points x repeats).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Runs per point, interleaved (every point once, then again); the table,
    /// JSON, CSV and plots give the median and the min-max spread.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_REPEAT)]
    repeat: usize,
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    params: WorkloadParams,
}

fn invalid(what: &'static str, value: impl ToString, reason: &str) -> BenchError {
    BenchError::InvalidArg {
        what,
        value: value.to_string(),
        reason: reason.into(),
    }
}

impl WorkloadParams {
    fn spec(&self, name: WorkloadName) -> Result<WorkloadSpec, BenchError> {
        if self.lines == 0 {
            return Err(invalid("--lines", 0, "needs at least 1 cache line"));
        }
        if self.keys == 0 {
            return Err(invalid("--keys", 0, "needs at least 1 key"));
        }
        if !(self.zipf_s.is_finite() && self.zipf_s >= 0.0) {
            return Err(invalid("--zipf-s", self.zipf_s, "must be finite and >= 0"));
        }
        for (what, v) in [("--get-pct", self.get_pct), ("--read-pct", self.read_pct)] {
            if v > 100 {
                return Err(invalid(what, v, "is a percentage, 0-100"));
            }
        }
        for (what, v) in [
            ("--batch", self.batch),
            ("--pcp-high", self.pcp_high),
            ("--burst", self.burst),
        ] {
            if v == 0 {
                return Err(invalid(what, 0, "needs at least 1 page"));
            }
        }
        let kv = Kv {
            keys: self.keys,
            zipf_s: self.zipf_s,
            get_pct: self.get_pct,
        };
        Ok(match name {
            WorkloadName::Locktorture => WorkloadSpec::Locktorture(Locktorture {
                lines: self.lines,
                cs: self.cs,
                delay: self.delay,
            }),
            WorkloadName::Kv => WorkloadSpec::Kv(kv),
            WorkloadName::PageAlloc => WorkloadSpec::PageAlloc(PageAlloc {
                batch: self.batch,
                high: self.pcp_high,
                burst: self.burst,
            }),
            WorkloadName::RwLock => WorkloadSpec::RwLock(RwKv {
                kv,
                read_pct: self.read_pct,
            }),
        })
    }
}

fn handoff(args: &HandoffArgs) -> Result<(), Box<dyn Error>> {
    use numa_bench::handoff::{
        DEFAULT_CS_NS, DEFAULT_LOCKS, DEFAULT_SAMPLES, HandoffOptions, QUICK_SAMPLES, render,
        run_handoff,
    };
    let locks = locks_or(&args.locks, &DEFAULT_LOCKS)?;
    let cs_ns = args.cs.clone().unwrap_or_else(|| DEFAULT_CS_NS.to_vec());
    let samples = args.samples.unwrap_or(if args.quick {
        QUICK_SAMPLES
    } else {
        DEFAULT_SAMPLES
    });
    let opts = HandoffOptions {
        locks,
        samples,
        cs_ns,
        paths: args
            .paths
            .clone()
            .unwrap_or_else(|| numa_bench::handoff::Path::ALL.to_vec()),
        rounds: args.rounds,
    };
    let result = run_handoff(&opts)?;
    if args.json {
        for c in &result.cells {
            println!("{}", serde_json::to_string(c)?);
        }
    } else {
        print!("{}", render(&result, &opts.cs_ns));
    }
    Ok(())
}

fn run(args: &RunArgs) -> Result<(), Box<dyn Error>> {
    if args.repeat == 0 {
        return Err(invalid("--repeat", 0, "needs at least 1 run").into());
    }
    let machine = Machine::detect();
    let placement = Placement::new(&machine, args.common.virtual_nodes)?;
    let workload = args.params.spec(args.workload)?;
    let cfg = RunConfig {
        lock: args.lock,
        workload,
        threads: args.threads,
        duration: args.duration,
        placement,
        remote_penalty_ns: args.common.remote_penalty_ns,
        latency_sample_every: args.common.latency_sample_every,
        machine: machine.clone(),
        hog_threads: args.common.hog,
        idle_gaps: args.common.idle_gaps,
    };
    let idle_gaps = args.common.idle_gaps && args.workload != WorkloadName::RwLock;
    let wake_latency = idle_gaps.then(numa_bench::machine::measure_wake_latency);
    let runs = (0..args.repeat)
        .map(|_| run_point(&cfg))
        .collect::<Result<Vec<_>, _>>()?;
    let p = summarise_repeats(runs);
    if args.json {
        println!("{}", serde_json::to_string(&p)?);
        return Ok(());
    }
    let cond = Conditions {
        machine: machine.describe(),
        cpus: machine.cpus,
        real_nodes: machine.nodes.len(),
        nodes: p.nodes,
        is_virtual: p.is_virtual,
        remote_penalty_ns: p.remote_penalty_ns,
        duration_s: p.duration_s,
        max_loadavg_1m: p.machine_loadavg_1m,
        latency_sample_every: p.latency_sample_every,
        latency_clock_overhead_ns: p.latency_clock_overhead_ns,
        repeat: args.repeat,
        hog_threads: args.common.hog,
        idle_gaps,
        workloads: vec![format!("{}: {}", p.workload, p.workload_params)],
        wake_latency,
        line_round_trip_ns: numa_bench::report::round_trip_range(core::slice::from_ref(&p)),
        ignored_settings: numa_bench::machine::ignored_settings(),
        env_layout: numa_bench::machine::env_layout(),
        provenance: numa_bench::machine::Provenance::collect(),
    };
    print!("{}", cond.header());
    if args.workload == WorkloadName::RwLock {
        println!("# sw/1k counts write acquisitions only (readers write no shared state)");
    }
    print!("{}", table(std::slice::from_ref(&p)));
    print!("{}", numa_bench::report::LEGEND);
    println!("ops_per_thread: {:?}", p.ops_per_thread);
    println!(
        "retake_per_1k: {:.1} (acquisitions by the thread that held the lock last)",
        p.retake_per_1k
    );
    match &p.lock_stats {
        Some(s) => {
            println!("lock_stats: {s:?}");
            let acq: u64 = p.ops_per_thread.iter().sum();
            if let Some(per_1k) = numa_bench::metrics::stats_per_1k(s, acq) {
                println!("lock_stats per 1k acquisitions: {per_1k}");
            }
        }
        None => println!("lock_stats: none (this lock keeps no counters)"),
    }
    Ok(())
}

fn compare_hq_preset(args: &CompareArgs) -> Result<(), Box<dyn Error>> {
    use numa_bench::preset::{
        HQ_PRESET_NODES, HQ_PRESET_THREADS, HqPresetOptions, render_hq_preset, run_hq_preset,
    };
    let out = args.out.clone().unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        PathBuf::from("results").join(format!("{}-hq", numa_bench::compare::utc_timestamp(now)))
    });
    let opts = HqPresetOptions {
        threads: args
            .threads
            .clone()
            .unwrap_or_else(|| HQ_PRESET_THREADS.to_vec()),
        nodes: args
            .common
            .virtual_nodes
            .map_or_else(|| HQ_PRESET_NODES.to_vec(), |n| vec![n]),
        duration: args.duration,
        quick: args.quick,
        repeat: args.repeat,
        out,
        remote_penalty_ns: args.common.remote_penalty_ns,
        progress: true,
    };
    let result = run_hq_preset(&opts)?;
    print!("{}", render_hq_preset(&result));
    eprintln!(
        "wrote hq_preset.txt and one compare directory per node count to {}",
        opts.out.display()
    );
    Ok(())
}

fn compare(args: &CompareArgs) -> Result<(), Box<dyn Error>> {
    if let Some(Preset::Hq) = args.preset {
        return compare_hq_preset(args);
    }
    let cpus = Machine::detect().cpus;
    let workloads = args
        .workloads
        .clone()
        .unwrap_or_else(|| DEFAULT_WORKLOADS.to_vec())
        .into_iter()
        .map(|w| args.params.spec(w))
        .collect::<Result<Vec<_>, _>>()?;
    let opts = CompareOptions {
        locks: args.locks.clone().unwrap_or_else(|| DEFAULT_LOCKS.to_vec()),
        workloads,
        threads: args
            .threads
            .clone()
            .unwrap_or_else(|| default_threads(cpus)),
        duration: args.duration,
        quick: args.quick,
        out: args.out.clone(),
        virtual_nodes: args.common.virtual_nodes,
        remote_penalty_ns: args.common.remote_penalty_ns,
        latency_sample_every: args.common.latency_sample_every,
        progress: true,
        repeat: args.repeat,
        hog_threads: args.common.hog,
        idle_gaps: args.common.idle_gaps,
    };
    if let Some(t) = opts.threads.iter().find(|&&t| t == 0) {
        return Err(invalid("--threads", t, "every thread count must be at least 1").into());
    }
    let result = run_compare(&opts)?;
    print!("{}", render(&result));
    eprintln!(
        "wrote points.json, points.csv, table.txt and *_throughput.svg / *_fairness.svg to {}",
        result.out_dir.display()
    );
    Ok(())
}

fn diff(args: &DiffArgs) -> Result<(), Box<dyn Error>> {
    let old = numa_bench::diff::load_results(&args.old)?;
    let new = numa_bench::diff::load_results(&args.new)?;
    let d = numa_bench::diff::diff_against(old, new, &args.baseline)?;
    print!("{}", numa_bench::diff::render_diff(&d));
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match &cli.command {
        Command::Topology(a) => topology_cmd::run(a),
        Command::Run(a) => run(a),
        Command::Compare(a) => compare(a),
        Command::Diff(a) => diff(a),
        Command::Handoff(a) => handoff(a),
        Command::Requeue(a) => requeue(a),
        Command::PlotApps(a) => numa_bench::apps::plot_apps(&a.results)
            .map(|files| {
                for f in files {
                    println!("{}", f.display());
                }
            })
            .map_err(Into::into),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("numa-bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}
