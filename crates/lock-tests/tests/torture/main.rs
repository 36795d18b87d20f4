//! Torture test for every lock of the workspace, in the spirit of the Linux
//! kernel's locktorture (issue 6).
//!
//! For each lock, more threads than CPUs, spread over 4 virtual NUMA nodes,
//! pick random operations until a deadline: exclusive updates of a two-cache-
//! line structure whose words must stay equal (a torn or lost update breaks
//! that), shared reads, `try_lock`, fair unlocks and bumps, `try_lock_for`
//! with tiny timeouts, upgrades and downgrades, condvar waits with timeouts,
//! holders that sleep inside the critical section (a preempted holder),
//! holders that panic inside it, holders that migrate to another node, and
//! locks created, contended on several nodes, and dropped (sometimes while
//! locked, after `mem::forget` of a guard). Every critical section also checks
//! directly that no other writer, reader or upgradable holder is inside.
//!
//! At the end of each lock's run: zero invariant violations, updates counted
//! by the workers all present in the structure, the lock free, every worker
//! finished (a watchdog fails the test with the stuck operations instead of
//! hanging), and a counting global allocator showing that nothing allocated
//! during the run (snodes, reader counters) is left once the locks are dropped.
//!
//! Two targeted scenarios run as episodes (`torture/episodes.rs`): timed
//! waiters leaving around a release while a plain waiter is parked (a lost
//! wake-up strands it, with nobody else to rescue it), and `notify_all` storms
//! against a hammered mutex, reporting the notify-to-owner latency beside
//! parking_lot's in the same run (a round that never completes is the failure).
//! Every allocation of this binary goes through a numa-spin lock (`alloc.rs`).
//!
//! The locks are those of the registry (`numa_lock_registry::for_each_lock!`):
//! every `lock_api` lock gets a test `torture::<lock>` whose operations follow its
//! shape (fair, timed, combining, condvar, reader-writer with upgrades; a
//! combining lock's critical sections run through guards and through `combine`,
//! closures that sleep, panic on the combiner, or come from a migrated thread,
//! and fresh combining locks churned by helpers), and the exclusion
//! model is `lock_tests::model`, shared with the suites and the fuzz target.
//!
//! The tests are `#[ignore]`d: run them with
//!
//! ```text
//! TORTURE_SECS=60 cargo test --release -p lock-tests --test torture -- --ignored --nocapture
//! ```
//!
//! `TORTURE_SECS` (default 6) is the total budget in seconds, split evenly
//! over the locks; `TORTURE_THREADS` overrides the worker count (default
//! 4 x CPUs, between 8 and 32); `TORTURE_SEED` fixes the PRNG seed. The tests
//! run one at a time (they share the allocation counter).

mod alloc;
mod broken;
mod engine;
mod episodes;
mod mutex_ops;
mod rwlock_ops;

use std::sync::{Barrier, LazyLock, Mutex as StdMutex, Once, PoisonError};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloc::{CountingAlloc, count_this_thread, live};
use engine::{Op, Target};
use lock_tests::model::{Shared, TorturePanic};
use lock_tests::registry::{
    self, CombiningMutex, FairMutex, FullRwLock, LockApiVisitor, LockInfo, TimedCondvar, TimedMutex,
};
use mutex_ops::{HasMutex, WithCondvar};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Serializes the tests: they share the allocation counter and the CPUs.
static SERIAL: StdMutex<()> = StdMutex::new(());

/// Default total budget when `TORTURE_SECS` is unset (seconds).
const DEFAULT_SECS: f64 = 6.0;

/// Warm-up run before the measured one (fills lazily allocated globals).
const WARM_UP: Duration = Duration::from_millis(100);

fn env_number(name: &str) -> Option<f64> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Some(x),
        _ => panic!("{name}={v:?}: expected a non-negative number"),
    }
}

/// The measured run time of one lock: the total budget over the lock count.
fn duration_per_lock() -> Duration {
    let total = env_number("TORTURE_SECS").unwrap_or(DEFAULT_SECS);
    Duration::from_secs_f64(total / registry::lock_api_locks().count() as f64)
}

fn threads() -> usize {
    match env_number("TORTURE_THREADS") {
        Some(n) => (n as usize).max(2),
        None => {
            let cpus = thread::available_parallelism().map_or(2, |n| n.get());
            (4 * cpus).clamp(8, 32)
        }
    }
}

fn seed() -> u64 {
    match env_number("TORTURE_SEED") {
        Some(s) => s as u64,
        None => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    }
}

/// Silences the default panic message for the intended panics.
fn quiet_intended_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<TorturePanic>() {
                previous(info);
            }
        }));
    });
}

/// Process-wide structures that grow with the peak number of threads and are
/// never shrunk, by design, are grown before measuring so that their growth is
/// not counted as memory left by dropped locks: parking_lot_core's hashtable
/// (it keeps old tables) and numa-spin's queue-node registry and its free list.
/// `n` threads park and queue on a spinlock at the same time.
fn pregrow_globals(n: usize) {
    let barrier = Barrier::new(n);
    let spin = numa_spin::Mutex::new(());
    thread::scope(|s| {
        for _ in 0..n {
            s.spawn(|| {
                let (m, cv) = (parking_lot::Mutex::new(()), parking_lot::Condvar::new());
                barrier.wait();
                let mut g = m.lock();
                cv.wait_for(&mut g, Duration::from_millis(1));
                drop(g);
                let g = spin.lock();
                thread::sleep(Duration::from_micros(100));
                drop(g);
                barrier.wait();
            });
        }
    });
}

/// What a measured run found.
struct Outcome {
    /// The report, or the violations' count and first message.
    result: Result<engine::Report, (u64, String)>,
    /// (bytes, blocks) allocated during the run and still allocated after it.
    leaked: (i64, i64),
}

/// Warm-up, then one run of `target` with allocation counting around it.
fn measure<L: Send + Sync + 'static>(
    target: &'static Target<L>,
    duration: Duration,
    grace: Duration,
) -> Outcome {
    quiet_intended_panics();
    let (threads, seed) = (threads(), seed());
    println!("torture {}: seed {seed} (TORTURE_SEED)", target.name);
    pregrow_globals(threads * (1 + mutex_ops::CHURN_MAX_HELPERS) + 4);
    if let Err((n, first)) = engine::run(target, threads, WARM_UP, grace, seed ^ 0x5eed) {
        return Outcome {
            result: Err((n, format!("(warm-up) {first}"))),
            leaked: (0, 0),
        };
    }
    count_this_thread(true);
    let before = live();
    let result = engine::run(target, threads, duration, grace, seed);
    let after = live();
    count_this_thread(false);
    Outcome {
        result,
        leaked: (after.0 - before.0, after.1 - before.1),
    }
}

fn torture<L: Send + Sync + 'static>(target: &'static Target<L>) {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let outcome = measure(target, duration_per_lock(), engine::GRACE);
    let report = match outcome.result {
        Ok(r) => r,
        Err((n, first)) => panic!("{}: {n} invariant violations; first: {first}", target.name),
    };
    engine::print_report(target, &report);
    assert_eq!(
        outcome.leaked,
        (0, 0),
        "{}: (bytes, blocks) still allocated after the run's locks were dropped",
        target.name
    );
}

fn mutex_target<L: HasMutex>(
    name: &'static str,
    new: fn() -> L,
    extra: Vec<Vec<Op<L>>>,
) -> Target<L> {
    let mut ops = mutex_ops::basic_ops::<L>();
    ops.extend(extra.into_iter().flatten());
    Target {
        name,
        new,
        ops,
        finish: mutex_ops::finish::<L>,
    }
}

fn with_condvar<C: lock_api::RawCondvar>() -> WithCondvar<C> {
    WithCondvar {
        mutex: lock_api::Mutex::new(Shared::new()),
        condvar: lock_api::Condvar::new(),
    }
}

fn plain<R: lock_api::RawMutex>() -> lock_api::Mutex<R, Shared> {
    lock_api::Mutex::new(Shared::new())
}

fn plain_target<R: lock_api::RawMutex + Send + Sync + 'static>(
    name: &'static str,
) -> Target<lock_api::Mutex<R, Shared>> {
    mutex_target(name, plain::<R>, vec![])
}

fn rw<R: lock_api::RawRwLock>() -> rwlock_ops::Rw<R> {
    lock_api::RwLock::new(Shared::new())
}

/// Builds the torture target of a registry lock (its operations follow its
/// shape) and tortures it.
struct Torture;

/// A target for the `'static` worker threads (one per lock per test process).
fn leak<L>(target: Target<L>) -> &'static Target<L> {
    Box::leak(Box::new(target))
}

impl LockApiVisitor for Torture {
    type Output = ();

    fn fair_mutex<R: FairMutex>(&mut self, lock: &'static LockInfo) {
        type L<R> = lock_api::Mutex<R, Shared>;
        torture(leak(mutex_target(
            lock.name,
            plain::<R>,
            vec![mutex_ops::fair_ops::<L<R>>()],
        )));
    }

    fn timed_mutex<R: TimedMutex>(&mut self, lock: &'static LockInfo) {
        type L<R> = lock_api::Mutex<R, Shared>;
        torture(leak(mutex_target(
            lock.name,
            plain::<R>,
            vec![
                mutex_ops::fair_ops::<L<R>>(),
                mutex_ops::timed_ops::<L<R>>(),
            ],
        )));
    }

    fn combining_mutex<R: CombiningMutex>(&mut self, lock: &'static LockInfo) {
        type L<R> = lock_api::Mutex<R, Shared>;
        torture(leak(mutex_target(
            lock.name,
            plain::<R>,
            vec![
                mutex_ops::fair_ops::<L<R>>(),
                mutex_ops::timed_ops::<L<R>>(),
                mutex_ops::combining_ops::<L<R>>(),
            ],
        )));
    }

    fn condvar<C: TimedCondvar>(&mut self, lock: &'static LockInfo) {
        torture(leak(mutex_target(
            lock.name,
            with_condvar::<C>,
            vec![
                mutex_ops::fair_ops(),
                mutex_ops::timed_ops(),
                mutex_ops::condvar_ops::<C>(),
            ],
        )));
    }

    fn rwlock<R: FullRwLock>(&mut self, lock: &'static LockInfo) {
        torture(leak(Target {
            name: lock.name,
            new: rw::<R>,
            ops: rwlock_ops::all_ops::<R>(),
            finish: rwlock_ops::finish::<R>,
        }));
    }
}

/// Tortures the registry lock `name`.
fn torture_lock(name: &str) {
    let lock = registry::lock(name).expect("a registry lock");
    registry::visit_lock_api(lock, &mut Torture).expect("a lock_api lock");
}

/// One `#[ignore]`d test per `lock_api` lock of the registry, `torture::<lock>`.
macro_rules! torture_tests {
    ($($id:ident: $name:literal in $krate:literal, $shape:ident($t:ty);)*) => {
        $(torture_test!($id, $name, $shape);)*
    };
}

macro_rules! torture_test {
    ($id:ident, $name:literal, data_mutex) => {};
    ($id:ident, $name:literal, data_rwlock) => {};
    ($id:ident, $name:literal, $shape:ident) => {
        #[test]
        #[ignore = "torture: run with --ignored (TORTURE_SECS sets the total budget)"]
        fn $id() {
            super::torture_lock($name);
        }
    };
}

mod torture {
    registry::for_each_lock!(torture_tests);
    use lock_tests::registry;
}

// Self-tests (not ignored, ~1 s): the torture engine catches broken locks.

/// A short measured run of a broken lock.
fn measure_broken<L: Send + Sync + 'static>(target: &'static Target<L>) -> Outcome {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    measure(target, Duration::from_millis(200), engine::GRACE)
}

#[test]
fn catches_missing_exclusion() {
    static T: LazyLock<Target<lock_api::Mutex<broken::NoExclusion, Shared>>> =
        LazyLock::new(|| plain_target("broken: no exclusion"));
    let outcome = measure_broken(&T);
    let Err((n, first)) = outcome.result else {
        panic!("a lock without exclusion passed the torture test");
    };
    assert!(n > 0);
    println!("no exclusion: {n} violations, first: {first}");
}

#[test]
fn catches_leaked_snode() {
    static T: LazyLock<Target<lock_api::Mutex<broken::LeakySnode, Shared>>> =
        LazyLock::new(|| plain_target("broken: leaky snode"));
    let outcome = measure_broken(&T);
    assert!(
        outcome.result.is_ok(),
        "the leaky lock is otherwise correct"
    );
    // The run's lock and every churned lock leak one 8-byte snode each.
    assert!(
        outcome.leaked.0 >= 8 && outcome.leaked.1 >= 1,
        "leak not seen: {:?}",
        outcome.leaked
    );
}

#[test]
fn watchdog_reports_stuck_workers() {
    static T: LazyLock<Target<lock_api::Mutex<broken::NeverReleases, Shared>>> =
        LazyLock::new(|| plain_target("broken: never releases"));
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    quiet_intended_panics();
    // The workers stay parked forever (in this test process only).
    let r = std::panic::catch_unwind(|| {
        engine::run(
            &T,
            4,
            Duration::from_millis(50),
            Duration::from_millis(300),
            7,
        )
    });
    let payload = r.expect_err("the watchdog must fail a run whose workers never finish");
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        msg.contains("still running"),
        "unexpected watchdog message: {msg}"
    );
}

/// Runs the timed-waiter episodes on every timed mutex of the registry.
struct TimedEpisodes {
    episodes: u32,
    seed: u64,
}

impl LockApiVisitor for TimedEpisodes {
    type Output = ();

    fn fair_mutex<R: FairMutex>(&mut self, _: &'static LockInfo) {}

    fn timed_mutex<R: TimedMutex>(&mut self, lock: &'static LockInfo) {
        if let Err(e) = episodes::timed_waiter_episodes::<R>(self.episodes, self.seed) {
            panic!("{}: {e}", lock.name);
        }
        println!(
            "timed waiters {}: {} episodes, no waiter stranded",
            lock.name, self.episodes
        );
    }

    fn rwlock<R: FullRwLock>(&mut self, _: &'static LockInfo) {}
}

/// Timed waiters leaving around the release while a plain waiter is parked,
/// on 2 virtual nodes, for every lock with `try_lock_for`.
#[test]
#[ignore = "torture: run with --ignored"]
fn torture_timed_waiters_beside_plain_lockers() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let seed = seed();
    println!("timed waiters: seed {seed} (TORTURE_SEED)");
    let mut v = TimedEpisodes {
        episodes: 1000,
        seed,
    };
    for lock in registry::lock_api_locks() {
        registry::visit_lock_api(lock, &mut v);
    }
}

/// A `notify_all` storm on every condvar of the registry.
struct Storm {
    waiters: usize,
    hammers: usize,
    rounds: u32,
}

impl LockApiVisitor for Storm {
    /// The lock's p99 notify-to-owner latency, for condvars.
    type Output = Option<Duration>;

    fn fair_mutex<R: FairMutex>(&mut self, _: &'static LockInfo) -> Option<Duration> {
        None
    }

    fn condvar<C: TimedCondvar>(&mut self, lock: &'static LockInfo) -> Option<Duration> {
        let report = episodes::notify_all_storm::<C>(self.waiters, self.hammers, self.rounds)
            .unwrap_or_else(|e| panic!("{}: {e}", lock.name));
        println!(
            "  {:14} p50 {:>9.3?}  p99 {:>9.3?}  max {:>9.3?}  ({} hammer ops)",
            lock.name,
            report.quantile(0.5),
            report.quantile(0.99),
            report.quantile(1.0),
            report.hammer_ops
        );
        Some(report.quantile(0.99))
    }

    fn rwlock<R: FullRwLock>(&mut self, _: &'static LockInfo) -> Option<Duration> {
        None
    }
}

/// `notify_all` storms against a hammered mutex: notify-to-owner latency of
/// every condvar of the registry (cst's beside parking_lot's), in the same run.
#[test]
#[ignore = "torture: run with --ignored"]
fn torture_notify_all_storm() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let mut v = Storm {
        waiters: 8,
        hammers: threads().max(16),
        rounds: 40,
    };
    println!(
        "notify_all storm: {} waiters x {} rounds, {} hammering threads; \
         notify-to-owner latency",
        v.waiters, v.rounds, v.hammers
    );
    let p99: Vec<(&str, Duration)> = registry::lock_api_locks()
        .filter_map(|l| Some((l.name, registry::visit_lock_api(l, &mut v)??)))
        .collect();
    let baseline = p99.iter().find(|(n, _)| *n == "parking_lot").map(|p| p.1);
    for (name, p) in &p99 {
        if let Some(b) = baseline.filter(|_| *name != "parking_lot") {
            println!(
                "  p99 ratio {name} / parking_lot: {:.2}",
                p.as_secs_f64() / b.as_secs_f64().max(1e-9)
            );
        }
    }
}
