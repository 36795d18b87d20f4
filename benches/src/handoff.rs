//! `numa-bench handoff`: the time of one lock hand-off, path by path, between
//! two threads that really run at once.
//!
//! Two threads are pinned to the first two CPUs this process may use: the
//! *holder* A (virtual node 0) and the *waiter* B (virtual node 0, or 1 for
//! `remote`). For each sample A takes the lock, lets B start waiting, checks
//! that B is in the path's state, holds the lock `cs_ns` more, reads its
//! time-stamp counter (t0) and releases. The critical section records who
//! entered first; A reads the counter again (t1) when it sees the new
//! holder's in-section flag, or when its own `lock()` returns. Both
//! readings come from A's own counter, so no offset between CPUs enters;
//! when the new holder is B, half a flag round trip (the time for B's flag
//! write to reach A) is subtracted.
//!
//! The paths:
//!
//! | path | B's state at t0 | the next holder |
//! | --- | --- | --- |
//! | `retake` | waiting in `lock()`, running (the queue locks: its spinning queue head) | A, whose `lock()` right after its release returns before B enters |
//! | `word` | spinning outside the queue: `try_lock` after `is_locked` reads false (a stealer; parking_lot's spinner does the same) | B, through the freed word |
//! | `local` | the queue head on A's node, running | B: CNA, queued, HQ and cst (on CNA's queue) by the head's compare-and-swap on the freed word |
//! | `remote` | as `local`, on another virtual node | B, as for `local` |
//! | `wake` | asleep in `lock()` (`S` in `/proc`): parked, or a queue head's nap | B, after the OS woke it |
//!
//! B's state is checked through its thread state in
//! `/proc/self/task/TID/stat` (`R` running, `S` asleep) on every 16th sample
//! and every `wake` sample (a checked sample is not timed: the check takes
//! microseconds), and through the lock's own diagnostics on every sample:
//! the queue's `tail_word()` (B queued, or for `word` not queued), for
//! numa-spin's locks and cst's, which is CNA's queue lock underneath.
//!
//! A nonzero critical section is drawn per sample, uniformly from `cs_ns` ±
//! half of `min(cs_ns, 1 us)` ([`CS_SPREAD_NS`]): a waiter polls the word in
//! batches of spin hints (up to 16, a few hundred ns), and a section of fixed
//! length released it at one phase of that batch every time, which moved a
//! median by up to a batch from one build or run to the next (150 to 490 ns
//! for the same lock at 5 us on the development guest); a release at a random
//! phase is also what a program's lock sees. A 0 ns section stays 0.
//!
//! With `rounds` above 1 each (path, cs) batch runs once per lock per round,
//! the locks' batches back to back, so that the locks of one round are timed
//! at nearly the same round trip (below).
//!
//! A path a lock never takes reports `null`: parking_lot has no queue head
//! (`local`, `remote` are not run). A path taken in under 1% of a batch's attempts is
//! `null` too (`samples` 0, `attempts` and `misses` say what happened): a
//! waiter that the OS descheduled now and then does not make it one.
//!
//! The unit is the flag round trip between the same two CPUs (what
//! [`crate::machine::line_round_trip_ns`] measures): 64 round trips every 128
//! samples, and each sample is divided by the last of them. 2,000 are taken
//! before and after each (lock, path, cs) batch; a batch whose two differ by
//! more than 25% is run again (up to three times), since a virtual machine's
//! vCPUs move between host cores (115-890 ns on the development guest,
//! minutes apart). `wake` is also given in ns, beside the machine's wake-up
//! latency ([`crate::machine::wake_latency`]): it is the OS's wake-up, not
//! cache lines. x86-64 only (the time-stamp counter); elsewhere, and with
//! fewer than two CPUs, every cell is `null`.

use std::any::Any;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use numa_lock_registry::{FairMutex, FullRwLock, LockApiVisitor, LockInfo};
use serde::{Deserialize, Serialize};

use crate::BenchError;
use crate::locks::LockName;

/// A hand-off path (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Path {
    /// The releaser takes the lock again while a waiter waits.
    Retake,
    /// A waiter outside the queue takes the freed word.
    Word,
    /// The queue head of the holder's node takes over.
    Local,
    /// The queue head of another (virtual) node takes over.
    Remote,
    /// A sleeping waiter takes over after its wake-up.
    Wake,
}

impl Path {
    /// Every path, in table order.
    pub const ALL: [Path; 5] = [
        Path::Retake,
        Path::Word,
        Path::Local,
        Path::Remote,
        Path::Wake,
    ];

    /// The path named `name` ([`Path::name`]), for `--paths`.
    ///
    /// # Errors
    /// The list of path names, when `name` is none of them.
    pub fn parse(name: &str) -> Result<Path, String> {
        Path::ALL
            .into_iter()
            .find(|p| p.name() == name.trim())
            .ok_or_else(|| format!("{name:?} is not a path (retake, word, local, remote or wake)"))
    }

    /// The path's name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Path::Retake => "retake",
            Path::Word => "word",
            Path::Local => "local",
            Path::Remote => "remote",
            Path::Wake => "wake",
        }
    }
}

/// What `handoff` measures.
#[derive(Clone, Debug)]
pub struct HandoffOptions {
    /// The locks (`lock_api` mutexes of the registry).
    pub locks: Vec<LockName>,
    /// Timed samples per (lock, path, cs) batch.
    pub samples: usize,
    /// The holder's critical sections after the waiter is in its state, ns.
    pub cs_ns: Vec<u64>,
    /// The paths to time, in [`Path::ALL`] order whatever the order given.
    pub paths: Vec<Path>,
    /// Rounds: each (path, cs) batch runs once per lock per round, the
    /// locks' batches back to back, so that locks are compared at the same
    /// round trip (it moves with the host, minutes apart).
    pub rounds: usize,
}

/// The width of the spread of a nonzero critical section, ns: each sample's
/// section is drawn uniformly from `cs_ns` ± half of `min(cs_ns, 1 us)`
/// (module docs).
pub const CS_SPREAD_NS: u64 = 1_000;

/// The default critical sections: 0, 1 and 5 us.
pub const DEFAULT_CS_NS: [u64; 3] = [0, 1_000, 5_000];
/// Samples per batch by default.
pub const DEFAULT_SAMPLES: usize = 10_000;
/// Samples per batch with `--quick`.
pub const QUICK_SAMPLES: usize = 1_000;
/// The default locks.
pub const DEFAULT_LOCKS: [&str; 5] = ["cst", "cna", "hq", "queued", "parking_lot"];

/// One (lock, path, cs) batch: `--json` prints one a line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// The lock's registry name.
    pub lock: String,
    /// The round, from 1 ([`HandoffOptions::rounds`]).
    #[serde(default = "first_round")]
    pub round: usize,
    /// The path's name ([`Path::name`]).
    pub path: String,
    /// The holder's critical section after the waiter reached its state, ns.
    pub cs_ns: u64,
    /// Median hand-off, in flag round trips; `null` when the path was not taken.
    pub median_rtt: Option<f64>,
    /// 90th percentile hand-off, in flag round trips; `null` as above.
    pub p90_rtt: Option<f64>,
    /// Timed samples of this path.
    pub samples: usize,
    /// Hand-offs tried (timed samples, `/proc` check samples, misses).
    #[serde(default)]
    pub attempts: usize,
    /// Median hand-off, ns (from the time-stamp counter's calibrated rate).
    pub median_ns: Option<f64>,
    /// 90th percentile hand-off, ns.
    pub p90_ns: Option<f64>,
    /// The flag round trip before and after the batch, ns.
    pub rtt_ns: Option<[f64; 2]>,
    /// Whether the two round trips agreed within 25% (else the batch was
    /// run three times and this is the last run).
    pub rtt_stable: bool,
    /// Samples whose waiter was not in the path's state at the `/proc`
    /// check, or whose first entrant was not the path's (left out).
    pub misses: usize,
    /// The lock's counters at the end of the batch (a fresh lock per
    /// batch), in a `lock-stats` build: which path the hand-offs took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_stats: Option<crate::ours::LockStats>,
}

fn first_round() -> usize {
    1
}

/// A finished `handoff` run.
#[derive(Clone, Debug)]
pub struct HandoffResult {
    /// Every cell, in lock, round, path, cs order.
    pub cells: Vec<Cell>,
    /// The machine's wake-up latency (20 us sleeps, 0.2 s), the yardstick
    /// of `wake`.
    pub wake: crate::machine::WakeLatency,
    /// Why nothing was measured, if so (not x86-64, fewer than two CPUs).
    pub unmeasured: Option<String>,
}

/// Runs every (lock, path, cs) batch.
///
/// # Errors
/// [`BenchError::InvalidArg`] for a lock outside `lock_api` (std, spin,
/// ticket) or a reader-writer lock, or no samples.
pub fn run_handoff(opts: &HandoffOptions) -> Result<HandoffResult, BenchError> {
    if opts.samples == 0 {
        return Err(BenchError::InvalidArg {
            what: "--samples",
            value: "0".into(),
            reason: "needs at least 1 sample".into(),
        });
    }
    if opts.rounds == 0 {
        return Err(BenchError::InvalidArg {
            what: "--rounds",
            value: "0".into(),
            reason: "needs at least 1 round".into(),
        });
    }
    if opts.paths.is_empty() {
        return Err(BenchError::InvalidArg {
            what: "--paths",
            value: String::new(),
            reason: "needs at least one path".into(),
        });
    }
    for &lock in &opts.locks {
        if lock.is_rwlock() || !lock.info().shape.is_lock_api() {
            return Err(BenchError::InvalidArg {
                what: "--locks",
                value: lock.to_string(),
                reason:
                    "handoff times lock_api mutexes (cna, queued, hq, combining, cst, parking_lot)"
                        .into(),
            });
        }
    }
    let wake = crate::machine::wake_latency(
        std::time::Duration::from_micros(20),
        std::time::Duration::from_millis(200),
    );
    let unmeasured = imp::unmeasured();
    let paths: Vec<Path> = Path::ALL
        .into_iter()
        .filter(|p| opts.paths.contains(p))
        .collect();
    let mut cells = Vec::new();
    // (lock index, round, path, cs index): the order cells are reported in.
    let mut keys = Vec::new();
    for (pi, &path) in paths.iter().enumerate() {
        for (ci, &cs) in opts.cs_ns.iter().enumerate() {
            for round in 1..=opts.rounds {
                for (li, &lock) in opts.locks.iter().enumerate() {
                    keys.push((li, round, pi, ci));
                    let cell = match &unmeasured {
                        Some(_) => None,
                        None => numa_lock_registry::visit_lock_api(
                            lock.info(),
                            &mut Batch {
                                path,
                                cs_ns: cs,
                                samples: opts.samples,
                            },
                        )
                        .flatten(),
                    };
                    let mut cell = cell.unwrap_or_else(|| Cell {
                        lock: lock.to_string(),
                        round,
                        path: path.name().into(),
                        cs_ns: cs,
                        median_rtt: None,
                        p90_rtt: None,
                        samples: 0,
                        attempts: 0,
                        median_ns: None,
                        p90_ns: None,
                        rtt_ns: None,
                        rtt_stable: true,
                        misses: 0,
                        lock_stats: None,
                    });
                    cell.round = round;
                    cells.push(cell);
                }
            }
        }
    }
    // Run path-major (the locks' batches of one cell back to back),
    // reported lock-major.
    let mut order: Vec<usize> = (0..cells.len()).collect();
    order.sort_by_key(|&i| keys[i]);
    let mut slots: Vec<Option<Cell>> = cells.into_iter().map(Some).collect();
    let cells = order.into_iter().filter_map(|i| slots[i].take()).collect();
    Ok(HandoffResult {
        cells,
        wake,
        unmeasured,
    })
}

/// One batch as a registry visit: the lock's type comes from the registry.
struct Batch {
    path: Path,
    cs_ns: u64,
    samples: usize,
}

impl LockApiVisitor for Batch {
    type Output = Option<Cell>;
    fn fair_mutex<R: FairMutex>(&mut self, lock: &'static LockInfo) -> Option<Cell> {
        imp::batch::<R>(lock, self.path, self.cs_ns, self.samples)
    }
    fn rwlock<R: FullRwLock>(&mut self, _: &'static LockInfo) -> Option<Cell> {
        None
    }
}

/// What the lock's own diagnostics say about its waiters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Waiters {
    /// A waiter is queued (the queue's tail word is set).
    pub queued: bool,
}

/// The diagnostics of the locks that have them; `None` for the others.
pub(crate) fn waiters(raw: &dyn Any) -> Option<Waiters> {
    let tail = if let Some(l) = raw.downcast_ref::<numa_spin::RawMutex>() {
        l.tail_word()
    } else if let Some(l) = raw.downcast_ref::<numa_spin::RawQueuedMutex>() {
        l.tail_word()
    } else if let Some(l) = raw.downcast_ref::<numa_spin::RawHqMutex>() {
        l.tail_word()
    } else if let Some(l) = raw.downcast_ref::<cst_mutex::RawMutex>() {
        l.tail_word()
    } else {
        return None;
    };
    Some(Waiters { queued: tail != 0 })
}

/// Whether the lock has a queue head that takes over (`local`, `remote`):
/// every lock with diagnostics (numa-spin's and cst's queues).
fn has_queue_head(raw: &dyn Any) -> bool {
    waiters(raw).is_some()
}

/// The median and 90th percentile of `v` (sorted in place); `None` if empty.
pub fn median_p90(v: &mut [f64]) -> Option<(f64, f64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    Some((at(0.5), at(0.9)))
}

/// Parses a critical section of `--cs`: `0`, `<n>ns` or `<n>us`, in ns.
///
/// # Errors
/// A message naming the value, for any other form or more than 1 s.
pub fn parse_cs_ns(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ns") {
        (n, 1)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1_000)
    } else if t == "0" {
        ("0", 1)
    } else {
        return Err(format!(
            "invalid critical section {s:?}: expected 0, <n>ns or <n>us"
        ));
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .filter(|&ns| ns <= 1_000_000_000)
        .ok_or_else(|| {
            format!("invalid critical section {s:?}: expected 0, <n>ns or <n>us, at most 1 s")
        })
}

/// Whether two round trips agree within 25% of the smaller.
pub fn rtts_agree(a: f64, b: f64) -> bool {
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    lo > 0.0 && (hi - lo) / lo <= 0.25
}

/// The table: one row per (lock, path), one column per critical section,
/// each the median in flag round trips and in ns; `-` for a path not taken.
pub fn render(result: &HandoffResult, cs_ns: &[u64]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# handoff: median hand-off in flag round trips between the two CPUs (and in ns); - = path not taken"
    );
    let _ = writeln!(
        s,
        "# the round trip (rtt_ns) moves as the host moves the vCPUs: compare locks at similar rtt_ns; p90 in --json"
    );
    let _ = writeln!(
        s,
        "# wake-up latency of this machine: 20 us sleeps took {:.1} us on average, {:.1} us at most",
        result.wake.mean_ns as f64 / 1e3,
        result.wake.max_ns as f64 / 1e3
    );
    if let Some(why) = &result.unmeasured {
        let _ = writeln!(s, "# not measured: {why}");
    }
    let _ = write!(s, "{:<12} {:<7}", "lock", "path");
    for cs in cs_ns {
        let _ = write!(s, " {:>18}", format!("cs {} ns", cs));
    }
    let _ = writeln!(s, " {:>9} {:>8}", "rtt_ns", "wake_us");
    let rounds = result.cells.iter().map(|c| c.round).max().unwrap_or(1);
    let mut i = 0;
    while i < result.cells.len() {
        let row = &result.cells[i..(i + cs_ns.len()).min(result.cells.len())];
        let label = if rounds > 1 {
            format!("{} r{}", row[0].lock, row[0].round)
        } else {
            row[0].lock.clone()
        };
        let _ = write!(s, "{:<12} {:<7}", label, row[0].path);
        for c in row {
            let v = match (c.median_rtt, c.median_ns) {
                (Some(m), Some(ns)) => format!("{m:.2} ({ns:.0} ns)"),
                _ => "-".into(),
            };
            let _ = write!(s, " {v:>18}");
        }
        let rtt = row
            .iter()
            .filter_map(|c| c.rtt_ns)
            .map(|[a, b]| (a + b) / 2.0)
            .next()
            .map_or_else(|| "-".into(), |r| format!("{r:.0}"));
        let wake = if row[0].path == "wake" {
            row.iter()
                .filter_map(|c| c.median_ns)
                .map(|n| format!("{:.1}", n / 1e3))
                .next()
                .unwrap_or_else(|| "-".into())
        } else {
            String::new()
        };
        let _ = writeln!(s, " {rtt:>9} {wake:>8}");
        i += row.len();
    }
    s
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use super::*;
    use crate::machine::linux::{pin, two_cpus};
    use std::io::Read as _;
    use std::time::{Duration, Instant};

    /// Why this machine cannot measure, if so.
    pub(super) fn unmeasured() -> Option<String> {
        match two_cpus() {
            Some(_) => None,
            None => Some("fewer than two CPUs to pin to".into()),
        }
    }

    #[inline]
    fn tsc() -> u64 {
        // SAFETY: `rdtsc` exists on every x86-64 CPU and touches no memory.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// Time-stamp counter ticks per ns, from 20 ms of `Instant`.
    fn ticks_per_ns() -> f64 {
        let (t, i) = (tsc(), Instant::now());
        while i.elapsed() < Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        let ns = i.elapsed().as_nanos() as f64;
        (tsc().wrapping_sub(t)) as f64 / ns
    }

    /// A xorshift64 draw for the critical section's spread (no statistical
    /// quality needed: it only has to cover the waiter's polling phases).
    struct Draw(u64);

    impl Draw {
        fn seeded(seed: u64) -> Self {
            Draw(seed | 1)
        }

        /// A number in `0..n` (`n > 0`).
        fn below(&mut self, n: u64) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x % n
        }
    }

    /// Busy-waits `ticks` time-stamp counter ticks from `from`.
    #[inline]
    fn spin_until(from: u64, ticks: u64) {
        while tsc().wrapping_sub(from) < ticks {
            std::hint::spin_loop();
        }
    }

    /// The waiter's orders, in `Shared::order` (the low byte; a sequence
    /// number above it makes every order new).
    const IDLE: u32 = 0;
    const LOCK: u32 = 1;
    const TRY_SPIN: u32 = 2;
    const ECHO: u32 = 3;
    const QUIT: u32 = 4;

    /// The in-section flag's values: who entered first.
    const NOBODY: u32 = 0;
    const HOLDER: u32 = 1;
    const WAITER: u32 = 2;

    /// Attempts per requested sample before a batch stops short of its
    /// count: a path taken in 5% of the attempts still gets every sample.
    const MAX_ATTEMPTS_PER_SAMPLE: usize = 20;

    /// Round trips of the measurement before and after a batch.
    const RTT_TRIPS: u32 = 2_000;
    /// Round trips of the measurement every [`RTT_EVERY`] samples, which
    /// the samples after it are divided by (the vCPUs may move meanwhile).
    const RTT_MINI_TRIPS: u32 = 64;
    /// Samples between two short round-trip measurements.
    const RTT_EVERY: usize = 128;

    /// The lines the two threads share, each on its own cache line.
    struct Shared {
        order: CachePadded<AtomicU32>,
        /// The waiter bumps it when it finished an order.
        done: CachePadded<AtomicU32>,
        /// Set by the waiter just before it calls into the lock.
        started: CachePadded<AtomicU32>,
        /// The waiter's spins in `word`'s loop.
        spins: CachePadded<AtomicU64>,
        /// Who entered the critical section first since A's release.
        entered: CachePadded<AtomicU32>,
        /// The round-trip flag.
        flag: CachePadded<AtomicU32>,
        /// Round trips of the next `ECHO`.
        trips: CachePadded<AtomicU32>,
        /// The waiter's thread id.
        tid: CachePadded<AtomicU32>,
        /// The waiter's virtual node.
        node: CachePadded<AtomicU32>,
    }

    /// The thread state letter of `/proc/self/task/TID/stat`, read with
    /// `pread` from an open file.
    struct ProcState {
        file: std::fs::File,
        buf: Vec<u8>,
    }

    impl ProcState {
        fn open(tid: u32) -> Option<Self> {
            let file = std::fs::File::open(format!("/proc/self/task/{tid}/stat")).ok()?;
            Some(ProcState {
                file,
                buf: Vec::with_capacity(512),
            })
        }

        fn state(&mut self) -> Option<u8> {
            use std::io::Seek as _;
            self.buf.clear();
            self.file.seek(std::io::SeekFrom::Start(0)).ok()?;
            self.file.read_to_end(&mut self.buf).ok()?;
            // `pid (comm) S ...`: the state follows the last ')'.
            let close = self.buf.iter().rposition(|&b| b == b')')?;
            self.buf.get(close + 2).copied()
        }
    }

    /// The waiter thread: follows orders until `QUIT`.
    fn waiter<R: FairMutex>(m: &lock_api::Mutex<R, ()>, sh: &Shared, cpu: usize) {
        if !pin(cpu) {
            sh.tid.store(u32::MAX, Ordering::SeqCst);
            return;
        }
        // SAFETY: `gettid` has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        sh.tid.store(tid, Ordering::SeqCst);
        let mut seen = 0u32;
        loop {
            // Acquire: the holder's writes before the order (the node, the
            // reset flags) are visible.
            let o = sh.order.load(Ordering::Acquire);
            if o == seen {
                std::hint::spin_loop();
                continue;
            }
            seen = o;
            // The acquisition of a `LOCK` or `TRY_SPIN` order, whose critical
            // section records who entered first.
            let guard = match o & 0xFF {
                LOCK => {
                    let node = sh.node.load(Ordering::Relaxed) as usize;
                    numa_topology::set_current_thread_node(Some(node));
                    sh.started.store(1, Ordering::SeqCst);
                    Some(m.lock())
                }
                TRY_SPIN => {
                    sh.started.store(1, Ordering::SeqCst);
                    let mut n = 0u64;
                    Some(loop {
                        if !m.is_locked()
                            && let Some(g) = m.try_lock()
                        {
                            break g;
                        }
                        n += 1;
                        if n < 4 {
                            sh.spins.store(n, Ordering::Relaxed);
                        }
                        std::hint::spin_loop();
                    })
                }
                ECHO => {
                    for _ in 0..sh.trips.load(Ordering::Relaxed) {
                        while sh.flag.load(Ordering::Acquire) != 1 {
                            std::hint::spin_loop();
                        }
                        sh.flag.store(0, Ordering::Release);
                    }
                    None
                }
                QUIT => return,
                _ => None,
            };
            if let Some(g) = guard {
                let _ =
                    sh.entered
                        .compare_exchange(NOBODY, WAITER, Ordering::SeqCst, Ordering::SeqCst);
                drop(g);
            }
            sh.done.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The holder's side of the pair.
    struct Holder<'a> {
        sh: &'a Shared,
        seq: u32,
        done: u32,
    }

    impl Holder<'_> {
        fn order(&mut self, what: u32) {
            self.seq = self.seq.wrapping_add(0x100);
            // Release: pairs with the waiter's Acquire load of the order.
            self.sh.order.store(self.seq | what, Ordering::Release);
        }

        /// Waits for the waiter to finish its last order; false after 5 s.
        fn await_done(&mut self) -> bool {
            self.done = self.done.wrapping_add(1);
            let start = Instant::now();
            while self.sh.done.load(Ordering::SeqCst) != self.done {
                std::hint::spin_loop();
                if start.elapsed() > Duration::from_secs(5) {
                    return false;
                }
            }
            true
        }

        /// The median of `trips` flag round trips, in ticks.
        fn rtt_ticks(&mut self, trips: u32) -> Option<f64> {
            self.sh.trips.store(trips, Ordering::Relaxed);
            self.order(ECHO);
            let mut v = Vec::with_capacity(trips as usize);
            for _ in 0..trips {
                let t = tsc();
                self.sh.flag.store(1, Ordering::Release);
                let start = Instant::now();
                while self.sh.flag.load(Ordering::Acquire) != 0 {
                    std::hint::spin_loop();
                    if start.elapsed() > Duration::from_secs(1) {
                        return None;
                    }
                }
                v.push(tsc().wrapping_sub(t) as f64);
            }
            if !self.await_done() {
                return None;
            }
            median_p90(&mut v).map(|(m, _)| m)
        }
    }

    /// What one batch run gave.
    struct Run {
        /// Each sample in ticks, and in the round trips measured nearest it.
        ticks: Vec<f64>,
        rtts: Vec<f64>,
        attempts: usize,
        misses: usize,
        rtt: [f64; 2],
    }

    pub(super) fn batch<R: FairMutex>(
        info: &'static LockInfo,
        path: Path,
        cs_ns: u64,
        samples: usize,
    ) -> Option<Cell> {
        let [a, b] = two_cpus()?;
        let m = lock_api::Mutex::<R, ()>::new(());
        // SAFETY: the raw lock is only read through its diagnostics.
        let raw: &dyn Any = unsafe { m.raw() };
        if matches!(path, Path::Local | Path::Remote) && !has_queue_head(raw) {
            return None;
        }
        let per_ns = ticks_per_ns();
        let sh = Shared {
            order: CachePadded::new(AtomicU32::new(IDLE)),
            done: CachePadded::new(AtomicU32::new(0)),
            started: CachePadded::new(AtomicU32::new(0)),
            spins: CachePadded::new(AtomicU64::new(0)),
            entered: CachePadded::new(AtomicU32::new(NOBODY)),
            flag: CachePadded::new(AtomicU32::new(0)),
            trips: CachePadded::new(AtomicU32::new(0)),
            tid: CachePadded::new(AtomicU32::new(0)),
            node: CachePadded::new(AtomicU32::new(u32::from(path == Path::Remote))),
        };
        let mut last = None;
        let mut stable = false;
        std::thread::scope(|s| {
            let (m, sh) = (&m, &sh);
            s.spawn(move || waiter(m, sh, b));
            let holder = s.spawn(move || {
                if !pin(a) {
                    return None;
                }
                numa_topology::set_current_thread_node(Some(0));
                while sh.tid.load(Ordering::SeqCst) == 0 {
                    std::hint::spin_loop();
                }
                let tid = sh.tid.load(Ordering::SeqCst);
                let mut h = Holder {
                    sh,
                    seq: 0,
                    done: 0,
                };
                let mut out = None;
                if tid != u32::MAX
                    && let Some(mut proc) = ProcState::open(tid)
                {
                    for _ in 0..3 {
                        let Some(run) = run(&mut h, m, &mut proc, path, cs_ns, samples, per_ns)
                        else {
                            break;
                        };
                        let ok = rtts_agree(run.rtt[0], run.rtt[1]);
                        out = Some((run, ok));
                        if ok {
                            break;
                        }
                    }
                }
                h.order(QUIT);
                out
            });
            if let Ok(Some((run, ok))) = holder.join() {
                last = Some(run);
                stable = ok;
            }
        });
        let run = last?;
        let (mut ticks, mut rtts) = (run.ticks, run.rtts);
        if ticks.len() * 100 < run.attempts {
            // Taken in under 1% of the attempts: the lock does not take
            // this path (a waiter descheduled now and then does not make it one).
            ticks.clear();
            rtts.clear();
        }
        let stats = median_p90(&mut ticks);
        let in_rtt = median_p90(&mut rtts);
        #[cfg(feature = "lock-stats")]
        let lock_stats = crate::ours::raw_stats(raw);
        #[cfg(not(feature = "lock-stats"))]
        let lock_stats = None;
        Some(Cell {
            lock: info.name.into(),
            round: 1,
            path: path.name().into(),
            cs_ns,
            median_rtt: in_rtt.map(|(m, _)| m),
            p90_rtt: in_rtt.map(|(_, p)| p),
            samples: ticks.len(),
            attempts: run.attempts,
            median_ns: stats.map(|(m, _)| m / per_ns),
            p90_ns: stats.map(|(_, p)| p / per_ns),
            rtt_ns: Some([run.rtt[0] / per_ns, run.rtt[1] / per_ns]),
            rtt_stable: stable,
            misses: run.misses,
            lock_stats,
        })
    }

    /// One run of a batch: the round trip, the samples, the round trip.
    fn run<R: FairMutex>(
        h: &mut Holder<'_>,
        m: &lock_api::Mutex<R, ()>,
        proc: &mut ProcState,
        path: Path,
        cs_ns: u64,
        samples: usize,
        per_ns: f64,
    ) -> Option<Run> {
        // SAFETY: the raw lock is only read through its diagnostics.
        let raw: &dyn Any = unsafe { m.raw() };
        let diag = waiters(raw);
        let before = h.rtt_ticks(RTT_TRIPS)?;
        let mut rtt = before;
        let cs_ticks = (cs_ns as f64 * per_ns) as u64;
        // The spread of a nonzero critical section around `cs_ns` (module
        // docs): min(cs_ns, 1 us), centred on it.
        let spread_ticks = (cs_ns.min(CS_SPREAD_NS) as f64 * per_ns) as u64;
        let mut draw = Draw::seeded(tsc());
        let mut ticks = Vec::with_capacity(samples);
        let mut rtts = Vec::with_capacity(samples);
        let mut misses = 0;
        // A path taken in under 1% of the attempts gives up after as many
        // attempts as samples (it will be reported as not taken). One that
        // is a race the waiter often wins (`retake` at a 0 ns critical
        // section: 12-20% of the attempts on the 2-CPU guest) gets up to
        // `MAX_ATTEMPTS_PER_SAMPLE` attempts per sample to reach its count.
        let mut attempts = 0usize;
        let mut i = 0usize;
        while ticks.len() < samples
            && attempts < samples * MAX_ATTEMPTS_PER_SAMPLE
            && (attempts < samples || ticks.len() * 100 >= attempts)
        {
            attempts += 1;
            i += 1;
            if i.is_multiple_of(RTT_EVERY) {
                rtt = h.rtt_ticks(RTT_MINI_TRIPS)?;
            }
            let check = path == Path::Wake || i.is_multiple_of(16);
            let g = m.lock();
            h.sh.entered.store(NOBODY, Ordering::SeqCst);
            h.sh.started.store(0, Ordering::SeqCst);
            h.sh.spins.store(0, Ordering::SeqCst);
            h.order(if path == Path::Word { TRY_SPIN } else { LOCK });
            // The waiter's state, as the lock's diagnostics show it.
            let start = Instant::now();
            let mut ready = false;
            while start.elapsed() < Duration::from_secs(2) {
                if h.sh.started.load(Ordering::SeqCst) == 0 {
                    continue;
                }
                let w = diag.map(|_| waiters(raw).unwrap_or_default());
                ready = match path {
                    Path::Word => {
                        h.sh.spins.load(Ordering::Relaxed) >= 2 && w.is_none_or(|w| !w.queued)
                    }
                    Path::Local | Path::Remote | Path::Retake => match w {
                        Some(w) => w.queued,
                        // parking_lot: in lock(), spinning or parked.
                        None => true,
                    },
                    Path::Wake => proc.state() == Some(b'S'),
                };
                if ready {
                    break;
                }
                if path == Path::Wake {
                    std::thread::sleep(Duration::from_micros(5));
                }
            }
            if !ready {
                misses += 1;
                drop(g);
                if !h.await_done() {
                    return None;
                }
                continue;
            }
            let reached = tsc();
            if check && path != Path::Wake && proc.state() != Some(b'R') {
                misses += 1;
                drop(g);
                if !h.await_done() {
                    return None;
                }
                continue;
            }
            let cs = if spread_ticks == 0 {
                cs_ticks
            } else {
                cs_ticks - spread_ticks / 2 + draw.below(spread_ticks)
            };
            spin_until(reached, cs);
            let t0 = tsc();
            drop(g);
            let (t1, who) = if path == Path::Retake {
                let g2 = m.lock();
                let t1 = tsc();
                let who = match h.sh.entered.compare_exchange(
                    NOBODY,
                    HOLDER,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                ) {
                    Ok(_) => HOLDER,
                    Err(w) => w,
                };
                drop(g2);
                (t1, who)
            } else {
                loop {
                    let w = h.sh.entered.load(Ordering::SeqCst);
                    if w != NOBODY {
                        break (tsc(), w);
                    }
                    std::hint::spin_loop();
                }
            };
            if !h.await_done() {
                return None;
            }
            let want = if path == Path::Retake { HOLDER } else { WAITER };
            if who != want {
                misses += 1;
                continue;
            }
            if check && path != Path::Wake {
                // The check's sample is not timed.
                continue;
            }
            let mut d = t1.wrapping_sub(t0) as f64;
            if who == WAITER {
                d = (d - rtt / 2.0).max(0.0);
            }
            ticks.push(d);
            rtts.push(d / rtt);
        }
        let after = h.rtt_ticks(RTT_TRIPS)?;
        Some(Run {
            ticks,
            rtts,
            attempts,
            misses,
            rtt: [before, after],
        })
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    use super::*;

    pub(super) fn unmeasured() -> Option<String> {
        Some("handoff needs x86-64 Linux (the time-stamp counter, /proc thread states)".into())
    }

    pub(super) fn batch<R: FairMutex>(
        _: &'static LockInfo,
        _: Path,
        _: u64,
        _: usize,
    ) -> Option<Cell> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_p90_of_samples() {
        let mut v: Vec<f64> = (1..=10).map(f64::from).rev().collect();
        assert_eq!(median_p90(&mut v), Some((6.0, 9.0)));
        assert_eq!(median_p90(&mut []), None);
    }

    #[test]
    fn critical_sections_parse_in_ns() {
        assert_eq!(parse_cs_ns("0"), Ok(0));
        assert_eq!(parse_cs_ns("250ns"), Ok(250));
        assert_eq!(parse_cs_ns("5us"), Ok(5_000));
        for bad in ["", "5", "5ms", "-1us", "2000000us", "xus"] {
            let e = parse_cs_ns(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn round_trips_agree_within_a_quarter() {
        assert!(rtts_agree(100.0, 125.0));
        assert!(rtts_agree(125.0, 100.0));
        assert!(!rtts_agree(100.0, 126.0));
        assert!(!rtts_agree(0.0, 0.0));
    }

    #[test]
    fn paths_parse_by_name_and_bad_names_are_named() {
        for p in Path::ALL {
            assert_eq!(Path::parse(p.name()), Ok(p));
        }
        let err = Path::parse("handed").unwrap_err();
        assert!(
            err.contains("\"handed\"") && err.contains("retake"),
            "{err}"
        );
    }

    /// Rounds are reported lock-major, each lock's cells in round, path,
    /// cs order, only the paths asked for, and zero rounds or no path is
    /// refused.
    #[test]
    fn rounds_and_paths_shape_the_cells() {
        let opts = HandoffOptions {
            locks: vec!["cna".parse().unwrap(), "parking_lot".parse().unwrap()],
            samples: 1,
            cs_ns: vec![0, 1_000],
            paths: vec![Path::Wake, Path::Local],
            rounds: 2,
        };
        // Without two CPUs (or off x86-64) every cell is null, but the
        // shape is the same.
        let r = run_handoff(&opts).unwrap();
        let got: Vec<(String, usize, String, u64)> = r
            .cells
            .iter()
            .map(|c| (c.lock.clone(), c.round, c.path.clone(), c.cs_ns))
            .collect();
        let mut want = Vec::new();
        for lock in ["cna", "parking_lot"] {
            for round in 1..=2 {
                for path in ["local", "wake"] {
                    for cs in [0, 1_000] {
                        want.push((lock.to_string(), round, path.to_string(), cs));
                    }
                }
            }
        }
        assert_eq!(got, want);
        let table = render(&r, &opts.cs_ns);
        assert!(table.contains("cna r2"), "{table}");
        for bad in [
            HandoffOptions {
                rounds: 0,
                ..opts.clone()
            },
            HandoffOptions {
                paths: vec![],
                ..opts.clone()
            },
        ] {
            assert!(matches!(
                run_handoff(&bad),
                Err(BenchError::InvalidArg { .. })
            ));
        }
    }

    #[test]
    fn rwlocks_and_data_mutexes_are_refused() {
        for lock in ["std", "cst-rw"] {
            let opts = HandoffOptions {
                locks: vec![lock.parse().unwrap()],
                samples: 10,
                cs_ns: vec![0],
                paths: Path::ALL.to_vec(),
                rounds: 1,
            };
            assert!(
                matches!(run_handoff(&opts), Err(BenchError::InvalidArg { .. })),
                "{lock}"
            );
        }
    }
}
