//! shuttle tests of the CNA lock: randomized (PCT and random-walk) schedules of
//! 4-8 threads on 2-3 virtual nodes, hundreds of acquisitions with queue-node
//! reuse, `unlock_fair`, `try_lock`, and every tunable regime (flush threshold
//! 0 and infinite, strict FIFO, bounded and unbounded stealing).
//!
//! Run with
//! `RUSTFLAGS="--cfg numa_loom --cfg numa_shuttle" CARGO_TARGET_DIR=target/shuttle
//! cargo test --release -p numa-spin --features loom,shuttle --test shuttle`
//! (`SHUTTLE_ITERATIONS` schedules per scheduler and test, default 300;
//! `SHUTTLE_SEED` seeds both schedulers, default 0x5eed).
//!
//! shuttle is sequentially consistent: these tests hunt logic bugs (a waiter
//! lost from the queues spins forever and shuttle reports the livelock; two
//! owners trip the owner check), while the loom models hunt ordering bugs.
#![cfg(numa_shuttle)]

use numa_spin::{Config, RawHqLock, RawLock, loom_hooks};
use shuttle::sync::Arc;
use shuttle::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use shuttle::thread;
use std::num::NonZeroU32;

fn iterations() -> usize {
    std::env::var("SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

fn seed() -> u64 {
    std::env::var("SHUTTLE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed)
}

/// Runs `f` under PCT (depth 3), then under the random scheduler, both seeded.
fn check(f: impl Fn() + Send + Sync + 'static) {
    use shuttle::scheduler::{PctScheduler, RandomScheduler};
    let f = std::sync::Arc::new(f);
    let g = f.clone();
    let pct = PctScheduler::new_from_seed(seed(), 3, iterations());
    shuttle::Runner::new(pct, Default::default()).run(move || g());
    let random = RandomScheduler::new_from_seed(seed(), iterations());
    shuttle::Runner::new(random, Default::default()).run(move || f());
}

/// A leaked config: always scan (shuffle 1) so the NUMA paths run.
fn config(flush_threshold_ns: u64, steal_bound_ns: u64) -> &'static Config {
    Box::leak(Box::new(
        Config::DEFAULT
            .flush_threshold_ns(flush_threshold_ns)
            .steal_bound_ns(steal_bound_ns)
            .shuffle_reduction(NonZeroU32::MIN)
            .spin_budget_ns(0),
    ))
}

/// The lock, an owner word that catches two holders, and the count of
/// critical sections.
struct Shared<const NUMA: bool> {
    lock: RawLock<NUMA, &'static Config>,
    owner: AtomicUsize,
    count: AtomicUsize,
}

impl<const NUMA: bool> Shared<NUMA> {
    fn critical(&self, id: usize) {
        let prev = self.owner.swap(id, SeqCst);
        assert_eq!(prev, 0, "thread {id} entered while {prev} held the lock");
        // A scheduling point inside the critical section.
        thread::yield_now();
        self.count.fetch_add(1, SeqCst);
        assert_eq!(self.owner.swap(0, SeqCst), id);
    }
}

/// `threads` threads on `nodes` virtual nodes, `ops` operations each: `lock`
/// released plainly or with `unlock_fair` (every third), and `try_lock`
/// (every fifth). At the end: the count matches the successes, the lock is free.
fn workload<const NUMA: bool>(cfg: &'static Config, threads: usize, nodes: u32, ops: usize) {
    check(move || {
        let shared = Arc::new(Shared::<NUMA> {
            lock: RawLock::with_config(cfg),
            owner: AtomicUsize::new(0),
            count: AtomicUsize::new(0),
        });
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let shared = shared.clone();
                thread::spawn(move || {
                    loom_hooks::set_loom_node(i as u32 % nodes);
                    let mut done = 0;
                    for op in 0..ops {
                        let got = if (i + op) % 5 == 4 {
                            shared.lock.try_acquire()
                        } else {
                            shared.lock.acquire();
                            true
                        };
                        if !got {
                            continue;
                        }
                        shared.critical(i + 1);
                        done += 1;
                        // SAFETY: acquired above.
                        unsafe {
                            if (i + op) % 3 == 0 {
                                shared.lock.release_fair();
                            } else {
                                shared.lock.release();
                            }
                        }
                    }
                    done
                })
            })
            .collect();
        let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(shared.count.load(SeqCst), total);
        assert!(!shared.lock.is_held(), "lock left held");
        assert!(shared.lock.try_acquire(), "lock not free at the end");
    });
}

#[test]
fn cna_flush_always_stealing() {
    workload::<true>(config(0, u64::MAX), 6, 3, 30);
}

#[test]
fn cna_never_flush_strict_fifo() {
    workload::<true>(config(u64::MAX, 0), 6, 2, 30);
}

#[test]
fn cna_bounded_stealing_and_flush() {
    let tick = loom_hooks::LOOM_TICK_NS;
    workload::<true>(config(3 * tick, tick), 8, 3, 20);
}

#[test]
fn queued_strict_fifo() {
    workload::<false>(config(u64::MAX, 0), 4, 2, 40);
}

/// The HQ lock under the same workload: `threads` threads on `nodes` virtual
/// nodes, `ops` operations each (lock, with every third release fair, and
/// `try_lock` every fifth).
fn hq_workload(cfg: &'static Config, threads: usize, nodes: u32, ops: usize) {
    check(move || {
        let lock = Arc::new(RawHqLock::with_config(cfg));
        let owner = Arc::new(AtomicUsize::new(0));
        let count = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (lock, owner, count) = (lock.clone(), owner.clone(), count.clone());
                thread::spawn(move || {
                    loom_hooks::set_loom_node(i as u32 % nodes);
                    let mut done = 0;
                    for op in 0..ops {
                        if (i + op) % 5 == 4 {
                            if !lock.try_acquire() {
                                continue;
                            }
                        } else {
                            lock.acquire();
                        }
                        let prev = owner.swap(i + 1, SeqCst);
                        assert_eq!(prev, 0, "thread {i} entered while {prev} held the lock");
                        thread::yield_now();
                        count.fetch_add(1, SeqCst);
                        assert_eq!(owner.swap(0, SeqCst), i + 1);
                        done += 1;
                        // SAFETY: acquired above.
                        unsafe {
                            if (i + op) % 3 == 0 {
                                lock.release_fair();
                            } else {
                                lock.release();
                            }
                        }
                    }
                    done
                })
            })
            .collect();
        let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(count.load(SeqCst), total);
        assert!(!lock.is_held(), "lock left held");
        assert!(!lock.is_numa_bound(), "metadata left bound");
        assert!(lock.try_acquire(), "lock not free at the end");
        // SAFETY: acquired just above.
        unsafe { lock.release() };
    });
}

#[test]
fn hq_threshold_1_stealing() {
    let cfg = Box::leak(Box::new(config(u64::MAX, u64::MAX).hq_handoff_threshold(1)));
    hq_workload(cfg, 6, 3, 30);
}

#[test]
fn hq_default_threshold_strict_fifo() {
    hq_workload(config(u64::MAX, 0), 6, 2, 30);
}

#[test]
fn hq_small_pool_bounded_stealing() {
    loom_hooks::set_loom_pool_size(1);
    let tick = loom_hooks::LOOM_TICK_NS;
    let cfg = Box::leak(Box::new(config(u64::MAX, tick).hq_handoff_threshold(2)));
    hq_workload(cfg, 8, 3, 20);
}

#[test]
fn hq_mode_switch_after_one_handoff_strict_fifo() {
    let cfg = Box::leak(Box::new(config(u64::MAX, 0).hq_switch_threshold(1)));
    hq_workload(cfg, 6, 3, 30);
}

#[test]
fn hq_mode_switch_after_one_handoff_stealing() {
    let cfg = Box::leak(Box::new(
        config(u64::MAX, u64::MAX)
            .hq_switch_threshold(1)
            .hq_handoff_threshold(1),
    ));
    hq_workload(cfg, 6, 3, 30);
}
