//! The torture engine: threads running random operations against one lock
//! until a deadline, a watchdog that fails instead of hanging, and the final
//! checks (no violation, no lost update, lock left free).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::alloc::count_this_thread;
use lock_tests::model::{Checker, MAX_OPS, Shared, Stats, TorturePanic, Worker};

/// One operation: a name, a weight (relative frequency) and the code.
pub struct Op<L> {
    /// Shown in reports and watchdog messages.
    pub name: &'static str,
    /// Relative frequency among the target's operations.
    pub weight: u32,
    /// Runs the operation once against the torture lock.
    pub run: fn(&L, &mut Worker<'_>),
}

/// A lock under torture: how to make one, what to do with it, how to check it.
pub struct Target<L> {
    /// The lock's name in reports.
    pub name: &'static str,
    /// A fresh lock protecting a fresh [`Shared`].
    pub new: fn() -> L,
    /// The operations the workers pick from.
    pub ops: Vec<Op<L>>,
    /// After all workers are done: takes the lock exclusively without blocking
    /// (`None` if it is still held: a leaked acquisition) and returns the value
    /// of the consistent words.
    pub finish: fn(&L, &Worker<'_>) -> Option<u64>,
}

/// What one run did.
#[derive(Clone, Copy, Debug)]
pub struct Report {
    /// Worker threads.
    pub threads: usize,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// All workers' counters summed.
    pub total: Stats,
}

/// Time the workers get, after the deadline, to finish their current
/// operation before the watchdog declares them stuck.
pub const GRACE: Duration = Duration::from_secs(30);

struct RunState<L> {
    lock: L,
    checker: Checker,
    deadline: Instant,
    /// Index + 1 of the operation each worker is running, 0 between operations,
    /// `usize::MAX` when the worker is done.
    current: Vec<AtomicUsize>,
}

fn pick(weights: &[u32], total_weight: u32, w: &mut Worker<'_>) -> usize {
    let mut x = (w.next_u64() % u64::from(total_weight)) as u32;
    for (i, &weight) in weights.iter().enumerate() {
        if x < weight {
            return i;
        }
        x -= weight;
    }
    weights.len() - 1
}

/// The operations' weights, with those not named in `TORTURE_OPS` (a comma-
/// separated list of operation names, to isolate a failure) set to 0.
fn weights<L>(ops: &[Op<L>]) -> Vec<u32> {
    let only = std::env::var("TORTURE_OPS").ok();
    ops.iter()
        .map(|op| match &only {
            Some(list) if !list.split(',').any(|n| n.trim() == op.name) => 0,
            _ => op.weight,
        })
        .collect()
}

fn worker_loop<L>(state: &RunState<L>, ops: &[Op<L>], id: usize, seed: u64) -> Stats {
    count_this_thread(true);
    let mut w = Worker::new(id, seed, &state.checker);
    let weights = weights(ops);
    let total_weight: u32 = weights.iter().sum();
    assert!(
        total_weight > 0,
        "TORTURE_OPS selects no operation of this lock"
    );
    let mut i = 0usize;
    // Every worker runs every operation once first (in a rotated order), so
    // each operation runs even in a very short run; then picks by weight.
    while i < ops.len() || Instant::now() < state.deadline {
        let op = if i < ops.len() {
            (id + i) % ops.len()
        } else {
            pick(&weights, total_weight, &mut w)
        };
        i += 1;
        if weights[op] == 0 {
            continue;
        }
        state.current[id - 1].store(op + 1, Ordering::Relaxed);
        let result = catch_unwind(AssertUnwindSafe(|| (ops[op].run)(&state.lock, &mut w)));
        state.current[id - 1].store(0, Ordering::Relaxed);
        w.stats.ops[op] += 1;
        if let Err(payload) = result {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| {
                    if payload.is::<TorturePanic>() {
                        "an intended panic escaped its operation".to_string()
                    } else {
                        "non-string payload".to_string()
                    }
                });
            w.violation(format_args!("unexpected panic in {}: {msg}", ops[op].name));
            // The lock may be in any state now: stop this worker.
            break;
        }
    }
    numa_topology::set_current_thread_node(None);
    w.stats
}

/// Runs `threads` workers against one fresh lock of `target` for `duration`,
/// then checks the lock. Returns the report, or the violations' count and
/// first message.
pub fn run<L: Send + Sync + 'static>(
    target: &'static Target<L>,
    threads: usize,
    duration: Duration,
    grace: Duration,
    seed: u64,
) -> Result<Report, (u64, String)> {
    assert!(target.ops.len() <= MAX_OPS, "raise MAX_OPS");
    let start = Instant::now();
    let state = Arc::new(RunState {
        lock: (target.new)(),
        checker: Checker::new(),
        deadline: start + duration,
        current: (0..threads).map(|_| AtomicUsize::new(0)).collect(),
    });
    let handles: Vec<_> = (1..=threads)
        .map(|id| {
            let state = Arc::clone(&state);
            thread::spawn(move || {
                let stats = worker_loop(&state, &target.ops, id, seed);
                state.current[id - 1].store(usize::MAX, Ordering::Release);
                stats
            })
        })
        .collect();

    // Watchdog: a thread left waiting is a failure with a message, not a hang.
    let limit = state.deadline + grace;
    loop {
        let stuck: Vec<String> = state
            .current
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match c.load(Ordering::Acquire) {
                usize::MAX => None,
                0 => Some(format!("worker {} between operations", i + 1)),
                op => Some(format!("worker {} in {}", i + 1, target.ops[op - 1].name)),
            })
            .collect();
        if stuck.is_empty() {
            break;
        }
        if Instant::now() > limit {
            panic!(
                "{}: {} workers still running {grace:?} after the deadline \
                 (deadlock or lost wake-up): {}",
                target.name,
                stuck.len(),
                stuck.join(", ")
            );
        }
        drop(stuck);
        thread::sleep(Duration::from_millis(5));
    }

    let mut total = Stats::default();
    for h in handles {
        let s = h
            .join()
            .expect("worker panics are caught inside the worker");
        total.increments += s.increments;
        total.reads += s.reads;
        total.timeouts += s.timeouts;
        total.panics += s.panics;
        total.churned += s.churned;
        for (t, o) in total.ops.iter_mut().zip(s.ops) {
            *t += o;
        }
    }
    let elapsed = start.elapsed();
    let state = Arc::into_inner(state).expect("all workers joined");

    // Final checks, as worker 0 ("nobody") on node 0.
    let w = Worker::new(threads + 1, seed, &state.checker);
    match (target.finish)(&state.lock, &w) {
        None => w.violation(format_args!("lock still held after every worker finished")),
        Some(v) if v != total.increments => w.violation(format_args!(
            "lost updates: structure says {v}, workers did {}",
            total.increments
        )),
        Some(_) => {}
    }
    numa_topology::set_current_thread_node(None);
    for ((op, &n), weight) in target.ops.iter().zip(&total.ops).zip(weights(&target.ops)) {
        if n == 0 && weight > 0 {
            w.violation(format_args!("operation {} never ran", op.name));
        }
    }
    let RunState { lock, checker, .. } = state;
    drop(lock);
    match checker.count() {
        0 => Ok(Report {
            threads,
            elapsed,
            total,
        }),
        n => Err((n, checker.first().unwrap_or_default())),
    }
}

/// Prints a run's report (after the counted window).
pub fn print_report<L>(target: &Target<L>, r: &Report) {
    let t = &r.total;
    let ops: u64 = t.ops.iter().sum();
    println!(
        "torture {}: {} threads, {:.2} s, {ops} ops ({:.3} ops/us), {} updates, {} reads, \
         {} timeouts, {} panics caught, {} locks churned",
        target.name,
        r.threads,
        r.elapsed.as_secs_f64(),
        ops as f64 / r.elapsed.as_secs_f64() / 1e6,
        t.increments,
        t.reads,
        t.timeouts,
        t.panics,
        t.churned
    );
    let per_op: Vec<String> = target
        .ops
        .iter()
        .zip(&t.ops)
        .map(|(op, n)| format!("{}={n}", op.name))
        .collect();
    println!("  per op: {}", per_op.join(" "));
}

/// Runs `f` inside `catch_unwind` and checks it panicked with [`TorturePanic`].
pub fn expect_torture_panic(w: &mut Worker<'_>, what: &str, f: impl FnOnce(&mut Worker<'_>)) {
    let r = catch_unwind(AssertUnwindSafe(|| f(w)));
    match r {
        Err(p) if p.is::<TorturePanic>() => w.stats.panics += 1,
        Err(_) => w.violation(format_args!("{what}: a panic other than the intended one")),
        Ok(()) => w.violation(format_args!("{what}: the intended panic did not happen")),
    }
}

/// A helper lock's structure after contention: consistent and equal to `expected`.
pub fn check_total(shared: &Shared, w: &Worker<'_>, what: &str, expected: u64) {
    let v = shared.check_consistent(w, what);
    if v != expected {
        w.violation(format_args!("{what}: lost updates: {v} of {expected}"));
    }
}
