//! shuttle tests of cst-mutex: randomized (PCT) schedules of 4-8 threads and
//! hundreds of operations, with lock reuse, timeouts, condvars and rwlocks.
//!
//! Run with
//! `RUSTFLAGS="--cfg numa_loom --cfg numa_shuttle" CARGO_TARGET_DIR=target/shuttle
//! cargo test --release -p cst-mutex --test shuttle`
//! (`SHUTTLE_ITERATIONS` schedules per scheduler and test, default 2000;
//! `SHUTTLE_SEED` seeds both schedulers, default 0x5eed).
//!
//! shuttle is sequentially consistent: it hunts logic bugs (lost wake-ups, lost
//! waiters, starvation by a stuck waiter), while the loom models hunt ordering
//! bugs. A waiter left parked beside a free lock shows as shuttle's deadlock
//! report (every thread blocked) at the end of the schedule; a timed park in the
//! model may time out at any point once queued (see `src/sync.rs`).
#![cfg(numa_shuttle)]

use cst_mutex::loom_hooks as hooks;
use cst_mutex::{RawCondvar, RawMutex, RawRwLock};
use lock_api::{RawCondvar as _, RawMutex as _, RawRwLock as _};
use shuttle::sync::Arc;
use shuttle::sync::atomic::{AtomicU64, Ordering::Relaxed};
use shuttle::thread;
use std::time::Duration;

type Mutex<T> = lock_api::Mutex<RawMutex, T>;
type RwLock<T> = lock_api::RwLock<RawRwLock, T>;

fn iterations() -> usize {
    std::env::var("SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

fn seed() -> u64 {
    std::env::var("SHUTTLE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed)
}

/// Runs `f` under PCT (depth 3) for `iterations()` schedules, then under the
/// random scheduler for as many, both seeded from `seed()`, so a run is
/// reproducible and CI explores the same schedules every time.
fn check(f: impl Fn() + Send + Sync + 'static) {
    use shuttle::scheduler::{PctScheduler, RandomScheduler};
    let f = std::sync::Arc::new(f);
    let g = f.clone();
    let pct = PctScheduler::new_from_seed(seed(), 3, iterations());
    shuttle::Runner::new(pct, Default::default()).run(move || g());
    let random = RandomScheduler::new_from_seed(seed(), iterations());
    shuttle::Runner::new(random, Default::default()).run(move || f());
}

/// A timeout that the model may or may not let expire: the real clock never
/// reaches it during a schedule, but a timed park can time out at any point.
const LONG: Duration = Duration::from_secs(3600);

/// 6 threads on 3 nodes, 20 operations each: plain `lock()`, `try_lock`,
/// timed attempts (`try_acquire_for_model`: the model may expire them while
/// they sleep outside the queue), `unlock_fair` and `bump`. Every
/// successful acquisition increments the counter; at the end the counter equals
/// the successes. A lost wake-up leaves a `lock()` parked beside a free lock:
/// shuttle reports the deadlock.
#[test]
fn mutex_timed_and_plain_waiters() {
    check(|| {
        let m = Arc::new(Mutex::from_raw(RawMutex::new(), 0u64));
        let threads: Vec<_> = (0..6usize)
            .map(|i| {
                let m = m.clone();
                thread::spawn(move || {
                    hooks::set_node(i % 3);
                    hooks::set_spin_rounds((i % 2) as u32);
                    let mut mine = 0u64;
                    for op in 0..20usize {
                        let got = match (i + op) % 5 {
                            // The model's timed acquisition: one attempt,
                            // then a sleep outside the queue that may time
                            // out at any point.
                            0 | 1 if i % 3 != 2 => {
                                // SAFETY: only the raw lock's timed attempt.
                                let raw = unsafe { m.raw() };
                                // SAFETY: held once the attempt succeeded.
                                raw.try_acquire_for_model().then(|| unsafe {
                                    m.make_guard_unchecked(lock_api::GuardSend::new())
                                })
                            }
                            2 => m.try_lock(),
                            _ => Some(m.lock()),
                        };
                        if let Some(mut g) = got {
                            *g += 1;
                            mine += 1;
                            match op % 4 {
                                0 => lock_api::MutexGuard::unlock_fair(g),
                                1 => lock_api::MutexGuard::bump(&mut g),
                                _ => drop(g),
                            }
                        }
                    }
                    mine
                })
            })
            .collect();
        let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(*m.lock(), total);
        // SAFETY: only reads the lock's words.
        let raw = unsafe { m.raw() };
        assert!(!raw.has_queued_waiters() && !raw.has_sleepers());
    });
}

/// The lost wake-up scenario, repeated on one lock: main (node 0) holds; Q
/// (node 1) waits with `lock()`; S (node 0, spinning one round first) waits
/// with a timed attempt and may time out while main unlocks. Q must always
/// get the lock: if the unlock's only wake-up goes to S just as S leaves, Q
/// stays parked beside a free lock and shuttle reports the deadlock.
#[test]
fn timed_waiter_leaving_beside_parked_waiter() {
    check(|| {
        let m = Arc::new(Mutex::from_raw(RawMutex::new(), 0u64));
        hooks::set_node(0);
        for _ in 0..3 {
            let g = m.lock();
            let q = {
                let m = m.clone();
                thread::spawn(move || {
                    hooks::set_node(1);
                    *m.lock() += 1;
                })
            };
            let s = {
                let m = m.clone();
                thread::spawn(move || {
                    hooks::set_node(0);
                    hooks::set_spin_rounds(1);
                    // SAFETY: only the raw lock's timed attempt.
                    if unsafe { m.raw() }.try_acquire_for_model() {
                        // SAFETY: acquired just above.
                        *unsafe { m.make_guard_unchecked(lock_api::GuardSend::new()) } += 1;
                    }
                })
            };
            for _ in 0..3 {
                thread::yield_now();
            }
            drop(g);
            s.join().unwrap();
            q.join().unwrap();
        }
        // SAFETY: only reads the lock's words.
        let raw = unsafe { m.raw() };
        assert!(!raw.has_queued_waiters() && !raw.has_sleepers());
    });
}

/// Condvar waiters (untimed and timed) on two nodes, a notifier alternating
/// `notify_one` and `notify_all`, and two threads hammering the mutex: every
/// notified generation reaches every untimed waiter (a lost wake-up, including
/// one of a waiter `notify_all` requeued onto the mutex, deadlocks). Raw API:
/// lock_api's `Condvar::new` needs the const `INIT`, which model builds lack.
#[test]
fn condvar_notify_against_hammered_mutex() {
    check(|| {
        // (mutex, condvar, generation: written under the mutex only).
        let pair = Arc::new((RawMutex::new(), RawCondvar::new(), AtomicU64::new(0)));
        const ROUNDS: u64 = 4;
        let mut threads = Vec::new();
        for i in 0..3usize {
            let pair = pair.clone();
            threads.push(thread::spawn(move || {
                hooks::set_node(i % 2);
                let (m, cv, generation) = (&pair.0, &pair.1, &pair.2);
                let mut g = m.lock();
                let mut timed_waits = 0;
                while generation.load(Relaxed) < ROUNDS {
                    // The model may time a timed wait out at once, every time: a
                    // few timed waits, then untimed ones, keep the schedule finite.
                    if i == 2 && timed_waits < 3 {
                        timed_waits += 1;
                        // Timed: may time out (in the model) and re-check.
                        // SAFETY: we hold `m`.
                        unsafe { cv.wait_for_model(m) };
                    } else {
                        // SAFETY: as above.
                        unsafe { cv.wait(m, &mut g) };
                    }
                }
                // SAFETY: we hold `m` with state `g`.
                unsafe { m.unlock(g) };
            }));
        }
        for i in 0..2usize {
            let pair = pair.clone();
            threads.push(thread::spawn(move || {
                hooks::set_node(i);
                for _ in 0..10 {
                    let g = pair.0.lock();
                    // SAFETY: acquired just above.
                    unsafe { pair.0.unlock(g) };
                }
            }));
        }
        hooks::set_node(1);
        for round in 1..=ROUNDS {
            let g = pair.0.lock();
            pair.2.store(round, Relaxed);
            // SAFETY: acquired just above.
            unsafe { pair.0.unlock(g) };
            if round % 2 == 0 {
                pair.1.notify_all();
            } else {
                pair.1.notify_one();
                pair.1.notify_all();
            }
        }
        for t in threads {
            t.join().unwrap();
        }
        assert!(!pair.0.has_queued_waiters() && !pair.0.has_sleepers());
    });
}

/// Readers, writers, an upgradable reader that upgrades, downgrades and times
/// out, on 3 nodes, 8 threads; the protected pair must always read equal.
#[test]
fn rwlock_mixed_with_timeouts() {
    check(|| {
        let l = Arc::new(RwLock::from_raw(RawRwLock::new(), (0u64, 0u64)));
        let threads: Vec<_> = (0..8usize)
            .map(|i| {
                let l = l.clone();
                thread::spawn(move || {
                    hooks::set_node(i % 3);
                    hooks::set_spin_rounds((i % 2) as u32);
                    for op in 0..8usize {
                        match (i + op) % 6 {
                            0 => {
                                let mut g = l.write();
                                g.0 += 1;
                                g.1 += 1;
                            }
                            1 => {
                                if let Some(mut g) = l.try_write_for(LONG) {
                                    g.0 += 1;
                                    g.1 += 1;
                                }
                            }
                            2 => {
                                let g = l.upgradable_read();
                                assert_eq!(g.0, g.1);
                                let mut w = lock_api::RwLockUpgradableReadGuard::upgrade(g);
                                w.0 += 1;
                                w.1 += 1;
                                let r = lock_api::RwLockWriteGuard::downgrade(w);
                                assert_eq!(r.0, r.1);
                            }
                            3 => {
                                if let Some(g) = l.try_read_for(LONG) {
                                    assert_eq!(g.0, g.1);
                                }
                            }
                            4 => {
                                if let Some(g) = l.try_upgradable_read_for(LONG) {
                                    match lock_api::RwLockUpgradableReadGuard::try_upgrade_for(
                                        g, LONG,
                                    ) {
                                        Ok(mut w) => {
                                            w.0 += 1;
                                            w.1 += 1;
                                        }
                                        Err(g) => assert_eq!(g.0, g.1),
                                    }
                                }
                            }
                            _ => {
                                let g = l.read();
                                assert_eq!(g.0, g.1);
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let g = l.read();
        assert_eq!(g.0, g.1);
        drop(g);
        // SAFETY: only reads state.
        let raw = unsafe { l.raw() };
        assert!(!raw.is_locked());
        let w = raw.try_lock_exclusive().expect("free at the end");
        // SAFETY: `w` is the acquisition just above.
        unsafe { raw.unlock_exclusive(w) };
    });
}
