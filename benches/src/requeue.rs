//! `numa-bench requeue`: how long condition-variable waiters that
//! `notify_all` requeues onto a busy mutex take to get it.
//!
//! `hammers` threads (16 by default) take the mutex in a loop, each holding
//! it for a critical section of `cs_ns` (200 ns of spinning by default) with
//! no gap between acquisitions. `waiters` threads (4) wait on a condition
//! variable bound to the mutex; each round a notifier takes the mutex once
//! all of them wait, stamps the time, calls `notify_all` and unlocks. Every
//! waiter then records the time from the stamp to its own re-acquisition
//! (which `wait` returns holding the mutex). Threads sit on `nodes` virtual
//! nodes (2 by default), thread `i` on node `i % nodes`: on a one-node
//! machine that times code, not an interconnect.
//!
//! The figure is the tail of those re-acquisition times (p50, p99, max, in
//! us) per lock, run one lock after the other in one process: parking_lot
//! moves its waiters onto the mutex and wakes one per unlock, where they
//! race the hammering threads for the word; a lock whose requeued waiters
//! lose that race at every unlock shows it in the p99.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use numa_lock_registry::{LockApiVisitor, LockInfo, TimedCondvar};
use serde::Serialize;

use crate::BenchError;
use crate::locks::LockName;

/// The workload's shape.
#[derive(Clone, Debug)]
pub struct RequeueOptions {
    /// Locks with a condition variable (`Caps::CONDVAR`).
    pub locks: Vec<LockName>,
    /// Threads hammering the mutex.
    pub hammers: usize,
    /// Condition-variable waiters, notified together.
    pub waiters: usize,
    /// Requeued acquisitions to time per lock (rounds of `waiters`).
    pub acquisitions: usize,
    /// The hammers' critical section, ns of spinning.
    pub cs_ns: u64,
    /// Virtual nodes the threads sit on.
    pub nodes: usize,
}

/// The default locks: cst's mutex and parking_lot's.
pub const DEFAULT_LOCKS: [&str; 2] = ["cst", "parking_lot"];

/// One lock's figures.
#[derive(Clone, Debug, Serialize)]
pub struct RequeueRow {
    /// The lock's registry name.
    pub lock: String,
    /// Re-acquisitions timed.
    pub samples: usize,
    /// Median time from `notify_all` to re-acquisition, us.
    pub p50_us: f64,
    /// 99th percentile, us.
    pub p99_us: f64,
    /// Maximum, us.
    pub max_us: f64,
    /// Acquisitions by the hammering threads per us, over the run.
    pub hammer_ops_per_us: f64,
}

/// Runs the workload for every lock, in order.
///
/// # Errors
/// [`BenchError::InvalidArg`] for a lock without a condition variable, or
/// a count of 0.
pub fn run_requeue(opts: &RequeueOptions) -> Result<Vec<RequeueRow>, BenchError> {
    for (what, n) in [
        ("--hammers", opts.hammers),
        ("--waiters", opts.waiters),
        ("--acquisitions", opts.acquisitions),
        ("--virtual-nodes", opts.nodes),
    ] {
        if n == 0 {
            return Err(BenchError::InvalidArg {
                what,
                value: "0".into(),
                reason: "needs at least 1".into(),
            });
        }
    }
    let mut rows = Vec::new();
    for &lock in &opts.locks {
        let row = numa_lock_registry::visit_lock_api(lock.info(), &mut Visit(opts)).flatten();
        rows.push(row.ok_or_else(|| BenchError::InvalidArg {
            what: "--locks",
            value: lock.to_string(),
            reason: "has no condition variable (requeue needs one)".into(),
        })?);
    }
    Ok(rows)
}

struct Visit<'a>(&'a RequeueOptions);

impl LockApiVisitor for Visit<'_> {
    type Output = Option<RequeueRow>;
    fn fair_mutex<R: numa_lock_registry::FairMutex>(
        &mut self,
        _: &'static LockInfo,
    ) -> Self::Output {
        None
    }
    fn condvar<C: TimedCondvar>(&mut self, lock: &'static LockInfo) -> Self::Output {
        Some(run_one::<C>(lock.name, self.0))
    }
    fn rwlock<R: numa_lock_registry::FullRwLock>(&mut self, _: &'static LockInfo) -> Self::Output {
        None
    }
}

/// The mutex's data.
struct State {
    /// Waiters inside `wait` (counted before they wait, under the mutex).
    waiting: usize,
    /// The round; waiters wait until it changes.
    round: u64,
    /// When the round's `notify_all` was called.
    notified: Instant,
    /// Re-acquisition times of the round's waiters, ns.
    times: Vec<u64>,
    /// Acquisitions by the hammers.
    hammered: u64,
}

fn spin_ns(ns: u64) {
    if ns == 0 {
        return;
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_nanos(ns) {
        std::hint::spin_loop();
    }
}

fn run_one<C: TimedCondvar>(name: &str, opts: &RequeueOptions) -> RequeueRow {
    let m = Arc::new(lock_api::Mutex::<C::RawMutex, State>::new(State {
        waiting: 0,
        round: 0,
        notified: Instant::now(),
        times: Vec::with_capacity(opts.acquisitions + opts.waiters),
        hammered: 0,
    }));
    let cv = Arc::new(lock_api::Condvar::<C>::new());
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = opts.acquisitions.div_ceil(opts.waiters);
    let nodes = opts.nodes;
    std::thread::scope(|s| {
        for i in 0..opts.waiters {
            let (m, cv) = (m.clone(), cv.clone());
            s.spawn(move || {
                numa_topology::set_current_thread_node(Some(i % nodes));
                let mut g = m.lock();
                for _ in 0..rounds {
                    let round = g.round;
                    g.waiting += 1;
                    while g.round == round {
                        cv.wait(&mut g);
                    }
                    let t = g.notified.elapsed().as_nanos() as u64;
                    g.times.push(t);
                }
            });
        }
        let start = Instant::now();
        for i in 0..opts.hammers {
            let (m, stop) = (m.clone(), stop.clone());
            let cs = opts.cs_ns;
            s.spawn(move || {
                numa_topology::set_current_thread_node(Some((opts.waiters + i) % nodes));
                while !stop.load(Ordering::Relaxed) {
                    let mut g = m.lock();
                    g.hammered += 1;
                    spin_ns(cs);
                    drop(g);
                }
            });
        }
        for _ in 0..rounds {
            loop {
                let mut g = m.lock();
                if g.waiting == opts.waiters {
                    g.waiting = 0;
                    g.round += 1;
                    g.notified = Instant::now();
                    cv.notify_all();
                    break;
                }
                drop(g);
                std::thread::yield_now();
            }
        }
        // The last round's waiters have re-acquired once each recorded.
        while m.lock().times.len() < rounds * opts.waiters {
            std::thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
        let elapsed = start.elapsed();
        let g = m.lock();
        let mut times = g.times.clone();
        times.sort_unstable();
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
        RequeueRow {
            lock: name.to_string(),
            samples: times.len(),
            p50_us: at(0.5),
            p99_us: at(0.99),
            max_us: at(1.0),
            hammer_ops_per_us: g.hammered as f64 / elapsed.as_nanos() as f64 * 1e3,
        }
    })
}

/// The table: one line per lock, with the p99 over parking_lot's when it ran.
pub fn render(rows: &[RequeueRow]) -> String {
    use std::fmt::Write as _;
    let pl = rows
        .iter()
        .find(|r| r.lock == "parking_lot")
        .map(|r| r.p99_us);
    let mut out = String::from(
        "# requeue: time from notify_all to re-acquisition of the requeued waiters, us\n\
         lock         samples    p50_us    p99_us    max_us  p99/pl  hammer_ops/us\n",
    );
    for r in rows {
        let ratio = pl.map_or("-".into(), |p| format!("{:.2}", r.p99_us / p));
        let _ = writeln!(
            out,
            "{:<12} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>7} {:>14.3}",
            r.lock, r.samples, r.p50_us, r.p99_us, r.max_us, ratio, r.hammer_ops_per_us
        );
    }
    out
}
