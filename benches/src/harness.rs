//! Runs one (lock, workload, threads) point and measures it.
//!
//! # How a point is measured
//! - `threads` workers start, place themselves ([`Placement`]), build their state
//!   and meet the main thread at a barrier. The window starts when the main thread
//!   leaves the barrier and ends when it sets the stop flag, `duration` later (wall
//!   clock). Each worker checks the flag after every operation, so every worker
//!   exits after at most one more acquisition: a thread waiting for a spinlock still
//!   ends once the holder releases. Operations that complete after the flag is set
//!   are not counted.
//! - Inside every critical section the harness reads
//!   [`numa_topology::current_node`] and records whether the holder's node differs
//!   from the previous holder's ([`NodeTracker`]). With `--remote-penalty-ns P` a
//!   critical section that follows a holder on another node first spins `P` ns: the
//!   cost model for pulling the protected data across the interconnect. It assumes
//!   that cost is a fixed latency paid once per node change, independent of the
//!   data size and of which two nodes, and that same-node handoffs cost nothing
//!   extra; the spin lengthens the critical section as a real miss would.
//! - Acquire latency (lock call to lock held) is timed on one acquisition in
//!   `latency_sample_every` (default 16) per thread: a clock read costs about 25 ns
//!   on the reference machine, and the second read happens while holding the lock,
//!   so timing every acquisition would lengthen short critical sections by a large
//!   fraction. Every sample includes one timing's own cost, reported as
//!   `latency_clock_overhead_ns`. Per-thread hdrhistograms are merged. Sampling estimates p50/p99
//!   well; `max` is the largest *sampled* value.
//! - CPU time is `getrusage(RUSAGE_SELF)` from the window start until every worker
//!   has exited, divided by the operations counted.
//! - `--hog N` (`hog_threads`) starts N more threads that pass the same start
//!   barrier and spin on a private counter until the stop flag, never touching the
//!   lock or any line the workers write: another tenant on the CPUs, or a vCPU the
//!   hypervisor preempts. They are not bound to any node. Their own CPU time
//!   (`CLOCK_THREAD_CPUTIME_ID`) is subtracted from the process CPU time, so
//!   `cpu_ns_per_op` stays the workers' cost.
//! - `--idle-gaps` (`idle_gaps`, mutex workloads) measures the longest time the
//!   lock was free while a thread waited for it (`idle_while_waited_max_ns`: a
//!   FIFO hand-off to a descheduled waiter, a parked waiter's wake-up). A sampled
//!   acquisition (one in `latency_sample_every`) counts itself in a shared
//!   waiting counter (its own cache line) from before its lock call until it holds
//!   the lock. Every holder numbers its release in the protected data; a holder
//!   that has *returned from unlock* while that counter is non-zero publishes
//!   (release number, clock) in one atomic word on another line. The next holder,
//!   whoever it is, reads the clock first thing in its critical section and, if
//!   the published number is the previous holder's, records the gap since then.
//!   Stamping after unlock keeps a releaser preempted between stamp and unlock
//!   from counting as idle time (a releaser preempted after unlock stamps late,
//!   which only shortens the gap). The gap ends when the next holder reads its
//!   clock, so it also counts the lock's own work after its acquiring atomic
//!   (the queue locks pass head-ship there, which may wake a parked successor)
//!   and a preemption in that window. Gaps seen only by unsampled waiters are
//!   missed; the resolution is 32 ns. The header gives the machine's wake-up
//!   latency beside it (`machine::WakeLatency`). Off by default:
//!   while a sampled waiter waits, every hand-off reads the clock twice more
//!   (~50 ns), which lengthens short critical sections.
//! - Mutex workloads run every critical section through
//!   [`BenchMutex::with_send`]: under the guard on the calling thread, except with
//!   `combining`, whose `combine` may ship it to the combiner of the caller's NUMA
//!   node (another thread) while the caller waits. For such a *combined* critical
//!   section the per-acquisition columns mean:
//!   - node switches and the `--remote-penalty-ns` model follow the node of the
//!     thread that *runs* the critical section (the combiner's), since that is
//!     where the protected data moves; a combiner's batch is one node, so a batch
//!     of closures from its node counts no switch after its first;
//!   - acquire latency is from the caller's `combine` call to the start of its
//!     closure on the combiner (the closure reads the clock the caller passed it);
//!   - `wait_max_ns` counts from the call to the return of `combine` (the result
//!     back on the caller), as for a guard from the call to the return of unlock
//!     (each then plus the caller's work before its next call, see [`CallGaps`]);
//!   - with `--idle-gaps`, a release is stamped when its submitter has its result
//!     back, which inside a batch is mostly after the combiner started the next
//!     closure (a gap of 0: within a batch the lock is never free); gaps show
//!     between batches, at the hand-over to the next combiner;
//!   - an operation is still one critical section, counted by its caller (the
//!     fairness factor is per submitting thread).
//! - For `rwlock`, node switches and the penalty concern write acquisitions only:
//!   readers do not write shared state (recording would add the very cross-node
//!   writes a NUMA rwlock avoids). `node_switches_per_1k` is then per 1000 writes.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::BenchError;
use crate::delay::spin_for;
use crate::locks::{
    BenchMutex, BenchRwLock, LockName, LockStats, MutexKind, MutexVisitor, RwLockKind,
    RwLockVisitor, dispatch_mutex, dispatch_rwlock,
};
use crate::machine::{Machine, Placement};
use crate::metrics::{
    CallGaps, LatencySummary, NodeTracker, Point, clock_overhead_ns, fairness_factor,
    new_latency_histogram, node_switches_per_1k, process_cpu_ns, retakes_per_1k,
};
use crate::workloads::kv::Kv;
use crate::workloads::locktorture::Locktorture;
use crate::workloads::page_alloc::PageAlloc;
use crate::workloads::rwlock::RwKv;
use crate::workloads::{Access, MutexWorkload, RwWorkload, WorkloadName};

/// A workload with its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WorkloadSpec {
    /// See [`Locktorture`].
    Locktorture(Locktorture),
    /// See [`Kv`].
    Kv(Kv),
    /// See [`PageAlloc`].
    PageAlloc(PageAlloc),
    /// See [`RwKv`].
    RwLock(RwKv),
}

impl WorkloadSpec {
    /// The workload with default parameters.
    pub fn default_for(name: WorkloadName) -> Self {
        match name {
            WorkloadName::Locktorture => WorkloadSpec::Locktorture(Locktorture::default()),
            WorkloadName::Kv => WorkloadSpec::Kv(Kv::default()),
            WorkloadName::PageAlloc => WorkloadSpec::PageAlloc(PageAlloc::default()),
            WorkloadName::RwLock => WorkloadSpec::RwLock(RwKv::default()),
        }
    }

    /// The workload's parameters, human readable (the `workload_params` of a point).
    pub fn params(&self) -> String {
        match self {
            WorkloadSpec::Locktorture(w) => w.params(),
            WorkloadSpec::Kv(w) => w.params(),
            WorkloadSpec::PageAlloc(w) => w.params(),
            WorkloadSpec::RwLock(w) => w.params(),
        }
    }

    /// The workload's name.
    pub fn name(&self) -> WorkloadName {
        match self {
            WorkloadSpec::Locktorture(_) => WorkloadName::Locktorture,
            WorkloadSpec::Kv(_) => WorkloadName::Kv,
            WorkloadSpec::PageAlloc(_) => WorkloadName::PageAlloc,
            WorkloadSpec::RwLock(_) => WorkloadName::RwLock,
        }
    }
}

/// Everything one point needs.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The lock.
    pub lock: LockName,
    /// The workload.
    pub workload: WorkloadSpec,
    /// Worker threads (>= 1).
    pub threads: usize,
    /// Measured window (wall clock).
    pub duration: Duration,
    /// Where threads go.
    pub placement: Placement,
    /// Cost model: ns spun in a critical section after a node change (0 = off).
    pub remote_penalty_ns: u64,
    /// Time one acquisition in this many (>= 1).
    pub latency_sample_every: u64,
    /// The machine (for the report).
    pub machine: Machine,
    /// CPU-bound threads that never take the lock, run beside the workers for the
    /// whole window (`--hog N`; 0 = none).
    pub hog_threads: usize,
    /// Measure `idle_while_waited_max_ns` (mutex workloads; see the module docs).
    pub idle_gaps: bool,
}

/// What the workers measured, before it becomes a [`Point`].
struct Raw {
    ops: Vec<u64>,
    hist: Histogram<u64>,
    bound: bool,
    elapsed: Duration,
    cpu_ns: u64,
    tracker: NodeTracker,
    stats: Option<LockStats>,
    idle_max_ns: Option<u64>,
    wait_max_ns: u64,
}

/// Per-worker result.
struct WorkerOut {
    ops: u64,
    hist: Histogram<u64>,
    bound: bool,
    idle_max_ns: u64,
    /// Longest interval between two of its consecutive lock calls, ns
    /// ([`CallGaps`]).
    wait_max_ns: u64,
}

/// Runs one point.
///
/// # Errors
/// [`BenchError::WrongLockKind`] when a mutex is paired with the `rwlock` workload
/// or an rwlock with a mutex workload; [`BenchError::InvalidArg`] for 0 threads or
/// a 0 sampling interval.
pub fn run_point(cfg: &RunConfig) -> Result<Point, BenchError> {
    if cfg.threads == 0 {
        return Err(BenchError::InvalidArg {
            what: "--threads",
            value: "0".into(),
            reason: "needs at least 1 thread".into(),
        });
    }
    if cfg.latency_sample_every == 0 {
        return Err(BenchError::InvalidArg {
            what: "--latency-sample-every",
            value: "0".into(),
            reason: "needs at least 1".into(),
        });
    }
    let wrong = || BenchError::WrongLockKind {
        lock: cfg.lock,
        workload: cfg.workload.name(),
    };
    let load = crate::machine::load_average();
    let trip = crate::machine::line_round_trip_ns();
    let raw = match cfg.workload {
        WorkloadSpec::Locktorture(w) => dispatch_mutex(cfg.lock, MutexRun { cfg, w: &w }),
        WorkloadSpec::Kv(w) => dispatch_mutex(cfg.lock, MutexRun { cfg, w: &w }),
        WorkloadSpec::PageAlloc(w) => dispatch_mutex(cfg.lock, MutexRun { cfg, w: &w }),
        WorkloadSpec::RwLock(w) => dispatch_rwlock(cfg.lock, RwRun { cfg, w: &w }),
    }
    .ok_or_else(wrong)?;
    let mut point = to_point(cfg, raw, cfg.workload.params(), load);
    point.line_round_trip_ns = trip;
    Ok(point)
}

fn to_point(cfg: &RunConfig, raw: Raw, workload_params: String, load: Option<f64>) -> Point {
    let total: u64 = raw.ops.iter().sum();
    let us = raw.elapsed.as_secs_f64() * 1e6;
    Point {
        lock: cfg.lock.to_string(),
        workload: cfg.workload.name().to_string(),
        threads: cfg.threads,
        nodes: cfg.placement.nodes,
        is_virtual: cfg.placement.is_virtual,
        bound: raw.bound,
        duration_s: raw.elapsed.as_secs_f64(),
        throughput_ops_per_us: if us > 0.0 { total as f64 / us } else { 0.0 },
        fairness_factor: fairness_factor(&raw.ops),
        node_switches_per_1k: node_switches_per_1k(raw.tracker.switches, raw.tracker.acquisitions),
        retake_per_1k: retakes_per_1k(raw.tracker.retakes, raw.tracker.acquisitions),
        acquire_latency_ns: LatencySummary::from_histogram(&raw.hist),
        cpu_ns_per_op: if total > 0 {
            raw.cpu_ns as f64 / total as f64
        } else {
            0.0
        },
        ops_per_thread: raw.ops,
        lock_stats: raw.stats,
        latency_sample_every: cfg.latency_sample_every,
        latency_clock_overhead_ns: clock_overhead_ns(),
        remote_penalty_ns: cfg.remote_penalty_ns,
        machine_cpus: cfg.machine.cpus,
        machine_nodes: cfg.machine.nodes.len(),
        machine_loadavg_1m: load,
        workload_params,
        hog_threads: cfg.hog_threads,
        idle_while_waited_max_ns: raw.idle_max_ns,
        wait_max_ns: raw.wait_max_ns,
        line_round_trip_ns: None,
        repeats: 1,
        spread: None,
        raw_repeats: Vec::new(),
    }
}

/// The state behind the lock: the workload's plus the node tracker.
///
/// Aligned to 128 bytes (a cache line pair, as `crossbeam_utils::CachePadded`),
/// so in `Mutex<R, Guarded<S>>` the data starts at offset 128 whatever the
/// lock's size: every lock's word sits alone in its line and every lock sees the
/// same data layout. With the data packed right after the lock word, the layout
/// depended on the lock's size, and at 1 thread `parking_lot` (a 1-byte lock) ran
/// 1.06x every other lock, `std`'s included, from layout alone.
#[repr(align(128))]
struct Guarded<S> {
    tracker: NodeTracker,
    state: S,
    /// With `idle_gaps`: the number of the last release (0 = none yet).
    release_seq: u32,
}

/// A value on its own cache line, so the `idle_gaps` bookkeeping does not share
/// lines with the workload or with each other.
#[repr(align(128))]
#[derive(Default)]
struct Padded<T>(T);

/// Time unit of release stamps, ns (32 bits of it wrap after 137 s; gaps are
/// computed with wrapping arithmetic, so only a gap that long would be misread).
const STAMP_UNIT_NS: u64 = 32;

/// `now` since `epoch` in [`STAMP_UNIT_NS`] units, truncated to 32 bits.
#[inline]
fn stamp(epoch: Instant, now: Instant) -> u32 {
    (now.saturating_duration_since(epoch).as_nanos() as u64 / STAMP_UNIT_NS) as u32
}

/// The gap, ns, between a published `(seq << 32) | stamp` word and `now_stamp`
/// if the word belongs to release `prev_seq` (0 = none); `None` otherwise. A
/// stamp later than `now_stamp` (the releaser read its clock after this holder
/// did) gives 0.
#[inline]
fn idle_gap_ns(published: u64, prev_seq: u32, now_stamp: u32) -> Option<u64> {
    if prev_seq == 0 || (published >> 32) as u32 != prev_seq {
        return None;
    }
    let d = now_stamp.wrapping_sub(published as u32) as i32;
    Some(u64::from(d.max(0).unsigned_abs()) * STAMP_UNIT_NS)
}

/// Called inside every (exclusive) critical section of worker `thread`.
#[inline]
fn on_acquire(tracker: &mut NodeTracker, thread: usize, penalty: Duration) {
    let node = numa_topology::current_node();
    if tracker.record(node, thread) && !penalty.is_zero() {
        spin_for(penalty);
    }
}

/// This thread's CPU time so far, ns (`CLOCK_THREAD_CPUTIME_ID`; 0 off Unix).
#[cfg(unix)]
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a POSIX constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    // `as`: the fields' types differ between Unix systems.
    #[allow(clippy::unnecessary_cast)]
    let ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    ns
}

/// This thread's CPU time so far, ns (`CLOCK_THREAD_CPUTIME_ID`; 0 off Unix).
#[cfg(not(unix))]
fn thread_cpu_ns() -> u64 {
    0
}

/// A hog thread's loop: spins on a private counter until `stop`, reading the flag
/// once per 4096 increments. Returns the CPU time it burnt, ns.
fn hog(stop: &AtomicBool) -> u64 {
    let cpu0 = thread_cpu_ns();
    let mut count = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..4096 {
            count = std::hint::black_box(count.wrapping_add(1));
        }
    }
    std::hint::black_box(count);
    thread_cpu_ns().saturating_sub(cpu0)
}

/// Spawns the workers (and the hog threads), runs the window, joins. `body(i, stop)`
/// is worker `i`. Returns the workers' results, the window and the workers' CPU
/// time, ns.
fn drive<F>(cfg: &RunConfig, body: F) -> (Vec<WorkerOut>, Duration, u64)
where
    F: Fn(usize, &AtomicBool) -> WorkerOut + Sync,
{
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(cfg.threads + cfg.hog_threads + 1);
    std::thread::scope(|s| {
        let hogs: Vec<_> = (0..cfg.hog_threads)
            .map(|i| {
                let (stop, barrier) = (&stop, &barrier);
                std::thread::Builder::new()
                    .name(format!("hog-{i}"))
                    .spawn_scoped(s, move || {
                        barrier.wait();
                        hog(stop)
                    })
                    .expect("spawning a hog thread")
            })
            .collect();
        let handles: Vec<_> = (0..cfg.threads)
            .map(|i| {
                let (stop, barrier, body) = (&stop, &barrier, &body);
                std::thread::Builder::new()
                    .name(format!("bench-{i}"))
                    .spawn_scoped(s, move || {
                        barrier.wait();
                        body(i, stop)
                    })
                    .expect("spawning a benchmark thread")
            })
            .collect();
        barrier.wait();
        let cpu0 = process_cpu_ns();
        let t0 = Instant::now();
        std::thread::sleep(cfg.duration);
        stop.store(true, Ordering::Relaxed);
        let elapsed = t0.elapsed();
        let watchdog = Watchdog::start(cfg, TEARDOWN_LIMIT);
        let outs: Vec<WorkerOut> = handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread panicked"))
            .collect();
        watchdog.disarm();
        let cpu = process_cpu_ns().saturating_sub(cpu0);
        let hog_cpu: u64 = hogs
            .into_iter()
            .map(|h| h.join().expect("hog thread panicked"))
            .sum();
        (outs, elapsed, cpu.saturating_sub(hog_cpu))
    })
}

/// How long the workers may take to exit after the stop flag before the process
/// gives up: a lock that keeps its waiters stuck this long is broken (deadlock or
/// lost wake-up), not slow. Every worker needs at most one more acquisition.
pub const TEARDOWN_LIMIT: Duration = Duration::from_secs(60);

/// Exits the process with a message naming the point if the workers do not all
/// exit within the limit (a hung lock must not hang `compare` forever).
struct Watchdog(std::sync::mpsc::Sender<()>);

impl Watchdog {
    fn start(cfg: &RunConfig, limit: Duration) -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let what = format!(
            "{} / {} / {} threads",
            cfg.lock,
            cfg.workload.name(),
            cfg.threads
        );
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                eprintln!(
                    "numa-bench: error: {what}: worker threads still running {} s after the stop flag; \
                     the lock never released its waiters (deadlock or lost wake-up)",
                    limit.as_secs()
                );
                std::process::exit(3);
            }
        });
        Watchdog(tx)
    }

    fn disarm(self) {
        // The receiver may be gone already; nothing to do then.
        let _ = self.0.send(());
    }
}

fn merge(outs: Vec<WorkerOut>) -> (Vec<u64>, Histogram<u64>, bool, u64, u64) {
    let mut hist = new_latency_histogram();
    let mut ops = Vec::with_capacity(outs.len());
    let mut bound = true;
    let mut idle = 0;
    let mut wait = 0;
    for o in outs {
        ops.push(o.ops);
        bound &= o.bound;
        idle = idle.max(o.idle_max_ns);
        wait = wait.max(o.wait_max_ns);
        hist.add(&o.hist).expect("histograms share bounds");
    }
    (ops, hist, bound, idle, wait)
}

struct MutexRun<'a, W> {
    cfg: &'a RunConfig,
    w: &'a W,
}

impl<W: MutexWorkload> MutexVisitor for MutexRun<'_, W> {
    type Output = Raw;

    fn visit<K: MutexKind>(self, _lock: LockName) -> Raw {
        let MutexRun { cfg, w } = self;
        let lock = <K::Mutex<Guarded<W::Shared>>>::new(Guarded {
            tracker: NodeTracker::default(),
            state: w.shared(cfg.threads),
            release_seq: 0,
        });
        let penalty = Duration::from_nanos(cfg.remote_penalty_ns);
        let every = cfg.latency_sample_every;
        let clock = quanta::Clock::new();
        let idle = cfg.idle_gaps;
        let waiting = Padded(AtomicUsize::new(0));
        let published = Padded(AtomicU64::new(0));
        let epoch = Instant::now();
        let (outs, elapsed, cpu_ns) = drive(cfg, |i, stop| {
            let bound = cfg.placement.apply(i);
            let mut local = w.local(i);
            let mut hist = new_latency_histogram();
            let mut ops = 0u64;
            let mut idle_max_ns = 0u64;
            let mut gaps = CallGaps::new(&clock);
            let mut n = i as u64;
            while !stop.load(Ordering::Relaxed) {
                let req = w.prepare(&mut local);
                n += 1;
                gaps.call();
                let t0 = n.is_multiple_of(every).then(Instant::now);
                let lat = if idle {
                    if t0.is_some() {
                        waiting.0.fetch_add(1, Ordering::Relaxed);
                    }
                    let (lat, gap, seq) = lock.with_send(|g| {
                        let word = published.0.load(Ordering::Relaxed);
                        let prev = g.release_seq;
                        let matches = prev != 0 && (word >> 32) as u32 == prev;
                        let now = (t0.is_some() || matches).then(Instant::now);
                        let lat = t0.zip(now).map(|(t, now)| now - t);
                        let gap = now.and_then(|now| idle_gap_ns(word, prev, stamp(epoch, now)));
                        if t0.is_some() {
                            waiting.0.fetch_sub(1, Ordering::Relaxed);
                        }
                        on_acquire(&mut g.tracker, i, penalty);
                        w.critical(&mut g.state, &mut local, req);
                        // 0 means "none": skip it when the counter wraps.
                        g.release_seq = prev.wrapping_add(1).max(1);
                        (lat, gap, g.release_seq)
                    });
                    // Released: publish the time if a sampled waiter is waiting.
                    if waiting.0.load(Ordering::Relaxed) > 0 {
                        let t = stamp(epoch, Instant::now());
                        published
                            .0
                            .store((u64::from(seq) << 32) | u64::from(t), Ordering::Relaxed);
                    }
                    if let Some(gap) = gap {
                        idle_max_ns = idle_max_ns.max(gap);
                    }
                    lat
                } else {
                    lock.with_send(|g| {
                        let lat = t0.map(|t| t.elapsed());
                        on_acquire(&mut g.tracker, i, penalty);
                        w.critical(&mut g.state, &mut local, req);
                        lat
                    })
                };
                if let Some(l) = lat {
                    hist.saturating_record(l.as_nanos() as u64);
                }
                w.after(&mut local);
                if !stop.load(Ordering::Relaxed) {
                    ops += 1;
                }
            }
            // The last call's interval ends here.
            gaps.call();
            WorkerOut {
                ops,
                hist,
                bound,
                idle_max_ns,
                wait_max_ns: gaps.max_ns(),
            }
        });
        let tracker = lock.with(|g| g.tracker.clone());
        let (ops, hist, bound, idle_max_ns, wait_max_ns) = merge(outs);
        let stats = lock.stats();
        Raw {
            ops,
            hist,
            bound,
            elapsed,
            cpu_ns,
            tracker,
            stats,
            idle_max_ns: idle.then_some(idle_max_ns),
            wait_max_ns,
        }
    }
}

struct RwRun<'a, W> {
    cfg: &'a RunConfig,
    w: &'a W,
}

impl<W: RwWorkload> RwLockVisitor for RwRun<'_, W> {
    type Output = Raw;

    fn visit<K: RwLockKind>(self, _lock: LockName) -> Raw {
        let RwRun { cfg, w } = self;
        let lock = <K::RwLock<Guarded<W::Shared>>>::new(Guarded {
            tracker: NodeTracker::default(),
            state: w.shared(cfg.threads),
            release_seq: 0,
        });
        let penalty = Duration::from_nanos(cfg.remote_penalty_ns);
        let every = cfg.latency_sample_every;
        let clock = quanta::Clock::new();
        let (outs, elapsed, cpu_ns) = drive(cfg, |i, stop| {
            let bound = cfg.placement.apply(i);
            let mut local = w.local(i);
            let mut hist = new_latency_histogram();
            let mut ops = 0u64;
            let mut gaps = CallGaps::new(&clock);
            let mut n = i as u64;
            while !stop.load(Ordering::Relaxed) {
                let (access, req) = w.prepare(&mut local);
                n += 1;
                gaps.call();
                let t0 = n.is_multiple_of(every).then(Instant::now);
                let lat = match access {
                    Access::Read => lock.read(|g| {
                        let lat = t0.map(|t| t.elapsed());
                        w.read(&g.state, &mut local, req);
                        lat
                    }),
                    Access::Write => lock.write(|g| {
                        let lat = t0.map(|t| t.elapsed());
                        on_acquire(&mut g.tracker, i, penalty);
                        w.write(&mut g.state, &mut local, req);
                        lat
                    }),
                };
                if let Some(l) = lat {
                    hist.saturating_record(l.as_nanos() as u64);
                }
                if !stop.load(Ordering::Relaxed) {
                    ops += 1;
                }
            }
            // The last call's interval ends here.
            gaps.call();
            WorkerOut {
                ops,
                hist,
                bound,
                idle_max_ns: 0,
                wait_max_ns: gaps.max_ns(),
            }
        });
        let tracker = lock.read(|g| g.tracker.clone());
        let (ops, hist, bound, _, wait_max_ns) = merge(outs);
        let stats = lock.stats();
        Raw {
            ops,
            hist,
            bound,
            elapsed,
            cpu_ns,
            tracker,
            stats,
            idle_max_ns: None,
            wait_max_ns,
        }
    }
}

/// Serialises whole-process measurements: two points must never overlap (CPU
/// time is per process). `compare` runs points one after another anyway; this
/// guards library users and parallel tests.
pub static POINT_LOCK: Mutex<()> = Mutex::new(());

/// [`POINT_LOCK`] for a test; a test that failed while holding it does not
/// fail the others (poisoning is ignored: the lock guards no data).
#[cfg(test)]
pub(crate) fn one_point_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    POINT_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(lock: LockName, workload: WorkloadSpec, threads: usize) -> RunConfig {
        let machine = Machine {
            cpus: 2,
            nodes: vec![(0, vec![0, 1])],
        };
        RunConfig {
            lock,
            workload,
            threads,
            duration: Duration::from_millis(60),
            placement: Placement::new(&machine, Some(2)).unwrap(),
            remote_penalty_ns: 0,
            latency_sample_every: 1,
            machine,
            hog_threads: 0,
            idle_gaps: false,
        }
    }

    #[test]
    fn a_point_counts_ops_and_switches() {
        let _g = one_point_at_a_time();
        let c = cfg(
            LockName::ParkingLot,
            WorkloadSpec::default_for(WorkloadName::Locktorture),
            3,
        );
        // Long enough for every thread to get a CPU even on a loaded 2-CPU box.
        let c = RunConfig {
            duration: Duration::from_millis(300),
            ..c
        };
        let p = run_point(&c).unwrap();
        assert_eq!(p.ops_per_thread.len(), 3);
        assert!(
            p.ops_per_thread.iter().all(|&o| o > 0),
            "{:?}",
            p.ops_per_thread
        );
        assert!(p.throughput_ops_per_us > 0.0);
        assert!((0.5..=1.0).contains(&p.fairness_factor));
        // 3 threads over 2 virtual nodes: the holder's node must change sometimes.
        assert!(p.node_switches_per_1k > 0.0 && p.node_switches_per_1k <= 1000.0);
        // Three threads take turns: some acquisitions change the holder, and
        // a node switch always does.
        assert!(p.retake_per_1k < 1000.0 - p.node_switches_per_1k + 1e-9);
        assert!(p.acquire_latency_ns.p50 <= p.acquire_latency_ns.p99);
        assert!(p.acquire_latency_ns.p99 <= p.acquire_latency_ns.max);
        assert!(p.is_virtual && p.nodes == 2);
        assert!(p.duration_s >= 0.3);
    }

    #[test]
    fn idle_gaps_match_the_previous_release_only() {
        let word = |seq: u32, t: u32| (u64::from(seq) << 32) | u64::from(t);
        assert_eq!(idle_gap_ns(word(7, 100), 7, 110), Some(10 * STAMP_UNIT_NS));
        // Another release's stamp, no release yet, or the initial word.
        assert_eq!(idle_gap_ns(word(6, 100), 7, 110), None);
        assert_eq!(idle_gap_ns(word(0, 0), 0, 110), None);
        // The releaser read its clock after the acquirer did.
        assert_eq!(idle_gap_ns(word(7, 120), 7, 110), Some(0));
        // The 32-bit stamp wrapped between release and acquisition.
        assert_eq!(
            idle_gap_ns(word(7, u32::MAX - 1), 7, 3),
            Some(5 * STAMP_UNIT_NS)
        );
    }

    #[test]
    fn hogs_and_idle_gaps_are_reported() {
        let _g = one_point_at_a_time();
        let mut c = cfg(
            LockName::ParkingLot,
            WorkloadSpec::default_for(WorkloadName::Locktorture),
            3,
        );
        c.hog_threads = 2;
        c.idle_gaps = true;
        c.duration = Duration::from_millis(200);
        let p = run_point(&c).unwrap();
        assert_eq!(p.hog_threads, 2);
        // Hogs are not workers: no ops of theirs are counted.
        assert_eq!(p.ops_per_thread.len(), 3);
        assert!(p.total_ops() > 0);
        // Every acquisition sampled, 3 threads: some hand-off went to a waiter.
        let idle = p.idle_while_waited_max_ns.expect("measured");
        assert!(idle > 0 && idle < 60_000_000_000, "{idle}");
        // rwlock workloads do not measure it; without the flag nobody does.
        let mut r = cfg(
            LockName::StdRw,
            WorkloadSpec::default_for(WorkloadName::RwLock),
            2,
        );
        r.idle_gaps = true;
        assert_eq!(run_point(&r).unwrap().idle_while_waited_max_ns, None);
        c.idle_gaps = false;
        c.hog_threads = 0;
        c.duration = Duration::from_millis(30);
        assert_eq!(run_point(&c).unwrap().idle_while_waited_max_ns, None);
    }

    #[test]
    fn one_thread_never_switches_nodes() {
        let _g = one_point_at_a_time();
        let p = run_point(&cfg(
            LockName::Std,
            WorkloadSpec::default_for(WorkloadName::Kv),
            1,
        ))
        .unwrap();
        assert_eq!(p.node_switches_per_1k, 0.0);
        // Every acquisition after the first is the one thread's again.
        assert!(
            p.retake_per_1k > 990.0 && p.retake_per_1k < 1000.0,
            "{} retakes per 1k",
            p.retake_per_1k
        );
        assert_eq!(p.fairness_factor, 0.5);
    }

    #[test]
    fn every_workload_runs_on_a_matching_lock() {
        let _g = one_point_at_a_time();
        for (lock, w) in [
            (LockName::Spin, WorkloadName::PageAlloc),
            (LockName::Ticket, WorkloadName::Locktorture),
            (LockName::Combining, WorkloadName::Locktorture),
            (LockName::Combining, WorkloadName::Kv),
            (LockName::Combining, WorkloadName::PageAlloc),
            (LockName::ParkingLotRw, WorkloadName::RwLock),
            (LockName::StdRw, WorkloadName::RwLock),
        ] {
            let p = run_point(&cfg(lock, WorkloadSpec::default_for(w), 2)).unwrap();
            assert!(p.total_ops() > 0, "{lock} {w}");
            assert_eq!(p.workload, w.as_str());
        }
    }

    #[test]
    fn mismatched_lock_kind_is_a_typed_error() {
        let e = run_point(&cfg(
            LockName::Std,
            WorkloadSpec::default_for(WorkloadName::RwLock),
            1,
        ))
        .unwrap_err();
        assert!(matches!(
            e,
            BenchError::WrongLockKind {
                lock: LockName::Std,
                workload: WorkloadName::RwLock
            }
        ));
        let e = run_point(&cfg(
            LockName::StdRw,
            WorkloadSpec::default_for(WorkloadName::Kv),
            1,
        ))
        .unwrap_err();
        assert!(matches!(e, BenchError::WrongLockKind { .. }));
        let e = run_point(&cfg(
            LockName::Std,
            WorkloadSpec::default_for(WorkloadName::Kv),
            0,
        ))
        .unwrap_err();
        assert!(matches!(
            e,
            BenchError::InvalidArg {
                what: "--threads",
                ..
            }
        ));
    }

    #[test]
    fn wait_max_covers_a_whole_critical_section() {
        // Every interval between two lock calls holds a 2 ms critical section,
        // so the longest one is at least that, also for a run of one
        // operation (the interval of the last call ends when the worker stops).
        // The section spins on `Instant`; the intervals are read from quanta's
        // cycle counter, whose calibration against that clock may be off by
        // a fraction of a percent (1,998,523 ns was seen): allow 1%. A run
        // that missed the last interval reads a few microseconds.
        let _g = one_point_at_a_time();
        let w = Locktorture {
            cs: crate::delay::Delay::Nanos(2_000_000),
            ..Locktorture::default()
        };
        for duration in [Duration::from_millis(1), Duration::from_millis(20)] {
            let mut c = cfg(LockName::Cna, WorkloadSpec::Locktorture(w), 1);
            c.duration = duration;
            let p = run_point(&c).unwrap();
            assert!(
                p.wait_max_ns >= 1_980_000,
                "{duration:?}: wait_max_ns {}",
                p.wait_max_ns
            );
        }
    }

    #[test]
    fn remote_penalty_is_paid_inside_the_critical_section() {
        // With a 20 us penalty and 2 threads on 2 virtual nodes, every node switch
        // holds the lock 20 us: the switches can take at most the window.
        let _g = one_point_at_a_time();
        let mut c = cfg(
            LockName::ParkingLot,
            WorkloadSpec::default_for(WorkloadName::Locktorture),
            2,
        );
        c.remote_penalty_ns = 20_000;
        let p = run_point(&c).unwrap();
        let switches = p.node_switches_per_1k * p.total_ops() as f64 / 1000.0;
        assert!(
            switches * 20e-6 <= p.duration_s + 0.05,
            "{switches} switches"
        );
        assert_eq!(p.remote_penalty_ns, 20_000);
    }
}
