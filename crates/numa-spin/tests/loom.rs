//! loom models of the CNA lock (`RUSTFLAGS="--cfg numa_loom" LOOM_MAX_PREEMPTIONS=2
//! cargo test --release -p numa-spin --test loom`).
//!
//! Threads are put on virtual nodes with `loom_hooks::set_loom_node`. Critical
//! sections append the thread's id to a log in a loom `UnsafeCell`, so loom reports
//! any two critical sections that are not ordered by the lock (mutual exclusion),
//! and the log gives the acquisition order the scenarios check. A model that
//! livelocks or deadlocks fails (loom's branch limit / deadlock detection), which is
//! how "every waiter eventually acquires" is checked.
//!
//! The queue scenarios sequence the arrivals (each thread waits until the tail word
//! names the previous one) so a model explores the interesting interleavings of the
//! hand-offs rather than every arrival order.
#![cfg(numa_loom)]

use loom::cell::UnsafeCell;
// std's Arc: loom's Arc adds a branch per clone/drop, and the lock is what we model.
use loom::thread;
use numa_spin::{Config, RawLock, loom_hooks};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};

type Cna = RawLock<true, &'static Config>;
type Queued = RawLock<false, &'static Config>;

/// A leaked config (models need `&'static`); always scan (shuffle 1) so the NUMA
/// paths run in every execution.
fn config(flush_threshold_ns: u64, steal_bound_ns: u64) -> &'static Config {
    Box::leak(Box::new(
        Config::DEFAULT
            .flush_threshold_ns(flush_threshold_ns)
            .steal_bound_ns(steal_bound_ns)
            .shuffle_reduction(NonZeroU32::MIN)
            .spin_budget_ns(0),
    ))
}

/// Lock generic over NUMA for the shared helpers.
trait ModelLock: Send + Sync + 'static {
    fn make(cfg: &'static Config) -> Self;
    fn acquire(&self);
    /// # Safety
    /// Held by the caller.
    unsafe fn release(&self);
    /// # Safety
    /// Held by the caller.
    unsafe fn release_fair(&self);
}

impl<const NUMA: bool> ModelLock for RawLock<NUMA, &'static Config> {
    fn make(cfg: &'static Config) -> Self {
        RawLock::with_config(cfg)
    }
    fn acquire(&self) {
        RawLock::acquire(self)
    }
    unsafe fn release(&self) {
        // SAFETY: forwarded contract.
        unsafe { RawLock::release(self) }
    }
    unsafe fn release_fair(&self) {
        // SAFETY: forwarded contract.
        unsafe { RawLock::release_fair(self) }
    }
}

/// The lock and the log its critical sections append to.
struct Shared<L> {
    lock: L,
    log: UnsafeCell<Vec<usize>>,
}

impl<L: ModelLock> Shared<L> {
    fn new(cfg: &'static Config) -> Arc<Self> {
        Arc::new(Shared {
            lock: L::make(cfg),
            log: UnsafeCell::new(Vec::new()),
        })
    }

    /// Appends `id` to the log; the caller must hold the lock.
    fn record(&self, id: usize) {
        // SAFETY: called with the lock held; loom checks that holders are ordered.
        self.log.with_mut(|log| unsafe { (*log).push(id) });
    }

    /// lock, record, unlock (fairly if `fair`).
    fn critical(&self, id: usize, fair: bool) {
        self.lock.acquire();
        self.record(id);
        // SAFETY: acquired above.
        unsafe {
            if fair {
                self.lock.release_fair();
            } else {
                self.lock.release();
            }
        }
    }

    fn log(&self) -> Vec<usize> {
        // SAFETY: all threads were joined; loom checks it.
        self.log.with(|log| unsafe { (*log).clone() })
    }
}

use loom_hooks::wait_for_loom_enqueues as wait_for_enqueues;

/// Main holds the lock while `nodes.len()` threads arrive in order (thread `i` on
/// virtual node `nodes[i]` is spawned once `i` threads are queued), then releases
/// (plainly); each thread runs one critical section, releasing fairly if `fair`.
/// Returns the acquisition log.
///
/// Only main waits (yielding on a std counter), and threads are spawned one at a
/// time, which keeps the explored interleavings to those of the hand-offs.
fn queue_scenario<L: ModelLock>(
    cfg: &'static Config,
    nodes: &'static [u32],
    fair: bool,
) -> Vec<usize> {
    loom_hooks::reset_loom_enqueues();
    let shared = Shared::<L>::new(cfg);
    shared.lock.acquire();
    let mut handles = Vec::new();
    for (i, &node) in nodes.iter().enumerate() {
        let shared = shared.clone();
        handles.push(thread::spawn(move || {
            loom_hooks::set_loom_node(node);
            shared.critical(i, fair);
        }));
        wait_for_enqueues(i + 1);
    }
    // Let the queue head run a few scan rounds while we still hold the lock (the
    // reordering happens only while the lock is busy).
    for _ in 0..3 {
        thread::yield_now();
    }
    // SAFETY: acquired above by this thread.
    unsafe { shared.lock.release() };
    for h in handles {
        h.join().unwrap();
    }
    shared.log()
}

/// `threads` threads (thread `i` on node `i % 2`, main on node 0) each run `rounds`
/// critical sections, concurrently with main's one; checks the count.
fn free_for_all<L: ModelLock>(cfg: &'static Config, threads: usize, rounds: usize) {
    let shared = Shared::<L>::new(cfg);
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let shared = shared.clone();
            thread::spawn(move || {
                loom_hooks::set_loom_node((i % 2) as u32);
                for _ in 0..rounds {
                    shared.critical(i, false);
                }
            })
        })
        .collect();
    shared.critical(threads, false);
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(shared.log().len(), threads * rounds + 1);
}

/// Runs a model with the preemption bound from `LOOM_MAX_PREEMPTIONS` (2 if unset).
fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(None, f)
}

/// Runs a model; `preemptions` overrides `LOOM_MAX_PREEMPTIONS`.
///
/// The four-thread queue scenarios (a holder and three waiters, the fewest that
/// can build a secondary queue) use `Some(0)`: loom then explores every value each
/// load may read under the C11 model and every schedule reachable through yields,
/// blocking and thread exits, but no preemptions. With preemptions, loom's DPOR
/// explores schedules in which a waiter spins unboundedly while the thread it waits
/// for stays preempted, and never finishes (measured: > 10 min at bound 1).
fn model_bounded(preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if let Some(bound) = preemptions {
        builder.preemption_bound = Some(bound);
    } else if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.max_branches = 20_000;
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    builder.check(move || {
        let n = counted.fetch_add(1, StdOrdering::Relaxed);
        if std::env::var_os("MODEL_PROGRESS").is_some() && n % 20_000 == 0 {
            eprintln!("execution {n}");
        }
        f()
    });
    if std::env::var_os("MODEL_PROGRESS").is_some() {
        eprintln!("{} executions", runs.load(StdOrdering::Relaxed));
    }
}

// ---- mutual exclusion -------------------------------------------------------

#[test]
fn mutual_exclusion_cna() {
    let cfg = config(u64::MAX, u64::MAX);
    model(move || free_for_all::<Cna>(cfg, 2, 1));
}

#[test]
fn mutual_exclusion_queued() {
    let cfg = config(u64::MAX, u64::MAX);
    model(move || free_for_all::<Queued>(cfg, 2, 1));
}

// ---- every waiter eventually acquires ---------------------------------------

/// Two queued waiters on two nodes behind a holder, flush threshold 0.
#[test]
fn every_waiter_acquires_threshold_0() {
    let cfg = config(0, u64::MAX);
    model(move || {
        let log = queue_scenario::<Cna>(cfg, &[1, 0], false);
        assert_eq!(log, [0, 1]);
    });
}

/// Same with the flush threshold at infinity (flush only when the main queue is
/// empty) and strict FIFO.
#[test]
fn every_waiter_acquires_threshold_inf() {
    let cfg = config(u64::MAX, 0);
    model(move || {
        let log = queue_scenario::<Cna>(cfg, &[1, 0], false);
        assert_eq!(log, [0, 1]);
    });
}

// ---- try_lock racing lock ---------------------------------------------------

fn try_lock_races_lock(cfg: &'static Config) {
    model(move || {
        let shared = Shared::<Cna>::new(cfg);
        let locker = {
            let shared = shared.clone();
            thread::spawn(move || {
                loom_hooks::set_loom_node(1);
                shared.critical(1, false);
            })
        };
        let tried = shared.lock.try_acquire();
        if tried {
            shared.record(0);
            // SAFETY: acquired by the try_acquire above.
            unsafe { shared.lock.release() };
        }
        locker.join().unwrap();
        assert_eq!(shared.log().len(), 1 + usize::from(tried));
    });
}

#[test]
fn try_lock_races_lock_stealing() {
    try_lock_races_lock(config(u64::MAX, u64::MAX));
}

#[test]
fn try_lock_races_lock_strict_fifo() {
    try_lock_races_lock(config(u64::MAX, 0));
}

// ---- secondary queue --------------------------------------------------------

static SECONDARY_HANDOFFS: AtomicUsize = AtomicUsize::new(0);

/// Head A (node 0), then B (node 1), then C (node 0): A may move B to the secondary
/// queue and hand head-ship to C with it; C, last in the main queue, then swings the
/// tail to B (the secondary queue becomes the main queue). Threshold infinity.
#[test]
fn handoff_through_secondary_queue() {
    let cfg = config(u64::MAX, u64::MAX);
    model_bounded(Some(0), move || {
        let log = queue_scenario::<Cna>(cfg, &[0, 1, 0], false);
        match log.as_slice() {
            [0, 1, 2] => {}
            [0, 2, 1] => {
                SECONDARY_HANDOFFS.fetch_add(1, StdOrdering::Relaxed);
            }
            other => panic!("unexpected acquisition order {other:?}"),
        }
    });
    assert!(
        SECONDARY_HANDOFFS.load(StdOrdering::Relaxed) > 0,
        "no execution handed the lock through the secondary queue"
    );
}

/// Without NUMA reordering the same arrivals are served in FIFO order.
#[test]
fn queued_lock_is_fifo() {
    let cfg = config(u64::MAX, 0);
    model_bounded(Some(0), move || {
        let log = queue_scenario::<Queued>(cfg, &[0, 1, 0], false);
        assert_eq!(log, [0, 1, 2]);
    });
}

static FLUSHES: AtomicUsize = AtomicUsize::new(0);

/// A (0), B (1), C (0), D (0), flush threshold 0: if A moves B to the secondary
/// queue, C becomes head with it, finds the threshold passed, and after acquiring
/// splices B back in front of D: order A, C, B, D (without the flush it would be
/// A, C, D, B).
#[test]
fn flush_back_to_main_queue() {
    let cfg = config(0, u64::MAX);
    model_bounded(Some(0), move || {
        let log = queue_scenario::<Cna>(cfg, &[0, 1, 0, 0], false);
        match log.as_slice() {
            [0, 1, 2, 3] => {}
            [0, 2, 1, 3] => {
                FLUSHES.fetch_add(1, StdOrdering::Relaxed);
            }
            other => panic!("unexpected acquisition order {other:?}"),
        }
    });
    assert!(
        FLUSHES.load(StdOrdering::Relaxed) > 0,
        "no execution flushed the secondary queue"
    );
}

// ---- unlock_fair --------------------------------------------------------------

/// The arrivals of `handoff_through_secondary_queue`, but every waiter releases
/// with `unlock_fair`: the lock goes to the longest waiter each time, so the order
/// is FIFO even when A moved B to the secondary queue.
#[test]
fn unlock_fair_hands_to_longest_waiter() {
    let cfg = config(u64::MAX, u64::MAX);
    model_bounded(Some(0), move || {
        let log = queue_scenario::<Cna>(cfg, &[0, 1, 0], true);
        assert_eq!(log, [0, 1, 2]);
    });
}

// ---- stealing -----------------------------------------------------------------

static STEALS: AtomicUsize = AtomicUsize::new(0);

/// Main holds the lock; A queues (head); main releases and immediately tries to
/// steal it back. Returns whether the steal succeeded.
fn steal_races_head(cfg: &'static Config) -> bool {
    loom_hooks::reset_loom_enqueues();
    let shared = Shared::<Cna>::new(cfg);
    shared.lock.acquire();
    let head = {
        let shared = shared.clone();
        thread::spawn(move || {
            loom_hooks::set_loom_node(1);
            shared.critical(1, false);
        })
    };
    wait_for_enqueues(1);
    // SAFETY: acquired above.
    unsafe { shared.lock.release() };
    let stolen = shared.lock.try_acquire();
    if stolen {
        shared.record(0);
        // SAFETY: acquired by the try_acquire above.
        unsafe { shared.lock.release() };
    }
    head.join().unwrap();
    assert_eq!(shared.log().len(), 1 + usize::from(stolen));
    stolen
}

/// Steal bound 0: the queued head forbids stealing from the moment it enqueued.
#[test]
fn steal_races_head_bound_0() {
    let cfg = config(u64::MAX, 0);
    model(move || {
        assert!(
            !steal_races_head(cfg),
            "stole past a queued waiter in strict FIFO mode"
        )
    });
}

/// Steal bound of one logical clock tick: stealing succeeds in some executions
/// (before the head's bound expired) and the head still acquires in all.
#[test]
fn steal_races_head_bound_positive() {
    let cfg = config(u64::MAX, loom_hooks::LOOM_TICK_NS);
    model(move || {
        if steal_races_head(cfg) {
            STEALS.fetch_add(1, StdOrdering::Relaxed);
        }
    });
    assert!(
        STEALS.load(StdOrdering::Relaxed) > 0,
        "no execution stole the lock"
    );
}

// ---- unlock_fair to the only waiter, then a new arrival --------------------------

/// Main holds the lock with E queued as head; W arrives while main releases with
/// `unlock_fair`. E takes the `HANDED` word, empties the queue and holds the lock;
/// W may then enqueue into the empty queue and become head with no hand-off. W must
/// not take the `HANDED` value E already consumed (on weak memory its load of the
/// lock word can still return it): the log cell reports two owners.
#[test]
fn unlock_fair_then_new_arrival() {
    let cfg = config(u64::MAX, u64::MAX);
    model(move || {
        loom_hooks::reset_loom_enqueues();
        let shared = Shared::<Cna>::new(cfg);
        shared.lock.acquire();
        let e = {
            let shared = shared.clone();
            thread::spawn(move || shared.critical(1, false))
        };
        wait_for_enqueues(1);
        let w = {
            let shared = shared.clone();
            thread::spawn(move || {
                loom_hooks::set_loom_node(1);
                shared.critical(2, false);
            })
        };
        shared.record(0);
        // SAFETY: acquired above by this thread.
        unsafe { shared.lock.release_fair() };
        e.join().unwrap();
        w.join().unwrap();
        assert_eq!(shared.log().len(), 3);
    });
}
