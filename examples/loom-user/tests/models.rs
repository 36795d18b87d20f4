//! loom models of this crate's code over numa-spin's `Mutex`, `QueuedMutex` and
//! `HqMutex` (`RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release`).
//!
//! Each model counts its executions (a std atomic, outside the model) and prints
//! the count beside `loom::sync::Mutex`'s for the same model.
#![cfg(loom)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_user::{increment, increment_racy};
use numa_spin::lock_api::{Mutex, RawMutex};

/// Runs `f` under loom (the preemption bound from `LOOM_MAX_PREEMPTIONS`, 2
/// if unset) and returns how many executions it explored.
fn executions(f: impl Fn() + Sync + Send + 'static) -> usize {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    builder.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f()
    });
    runs.load(Ordering::Relaxed)
}

/// Three threads each add one under the lock; the model asserts 3.
fn counter<R: RawMutex + Send + Sync + 'static>() -> usize {
    counter_on(|| Mutex::<R, u64>::new(0))
}

/// [`counter`] over the lock `make` builds.
fn counter_on<R: RawMutex + Send + Sync + 'static>(
    make: impl Fn() -> Mutex<R, u64> + Send + Sync + 'static,
) -> usize {
    executions(move || {
        let m = Arc::new(make());
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let m = m.clone();
                thread::spawn(move || increment(&m))
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*m.lock(), 3);
    })
}

/// The same model over `loom::sync::Mutex`: the yardstick.
fn loom_counter() -> usize {
    executions(|| {
        let m = Arc::new(loom::sync::Mutex::new(0u64));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let m = m.clone();
                thread::spawn(move || *m.lock().unwrap() += 1)
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*m.lock().unwrap(), 3);
    })
}

/// The three locks' counts against loom's own Mutex: within 10x.
#[test]
fn a_correct_counter_passes_within_ten_times_loom_mutex_executions() {
    let yardstick = loom_counter();
    for (name, n) in [
        ("numa_spin::Mutex", counter::<numa_spin::RawMutex>()),
        (
            "numa_spin::QueuedMutex",
            counter::<numa_spin::RawQueuedMutex>(),
        ),
        ("numa_spin::HqMutex", counter::<numa_spin::RawHqMutex>()),
        ("numa_spin::FairMutex", counter::<numa_spin::RawFairMutex>()),
    ] {
        println!("{name}: {n} executions (loom::sync::Mutex: {yardstick})");
        assert!(n > 0 && n <= 10 * yardstick, "{name}: {n} vs {yardstick}");
    }
}

/// The combining lock's `combine` (the closure runs on the caller under the
/// lock in a model) and a tuned CNA lock (`TunedMutex::from_raw`, `const`):
/// the same counter, the same cost.
#[test]
fn combining_and_tuned_locks_count_like_the_others() {
    static CONFIG: numa_spin::Config = numa_spin::Config::DEFAULT.steal_bound_ns(0);
    let yardstick = loom_counter();
    let combining = executions(|| {
        let m = Arc::new(numa_spin::CombiningMutex::new(0u64));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let m = m.clone();
                thread::spawn(move || m.combine(|v| *v += 1))
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(m.combine(|v| *v), 3);
    });
    let tuned = counter_on(|| {
        numa_spin::TunedMutex::from_raw(numa_spin::RawTunedMutex::with_config(&CONFIG), 0u64)
    });
    println!(
        "numa_spin::CombiningMutex: {combining} executions, TunedMutex: {tuned} (loom::sync::Mutex: {yardstick})"
    );
    assert!(combining > 0 && combining <= 10 * yardstick);
    assert!(tuned > 0 && tuned <= 10 * yardstick);
}

/// Two threads read under one guard and write under another: some
/// interleaving loses an update, and the model finds it.
#[test]
#[should_panic(expected = "lost update")]
fn a_check_then_act_bug_is_found() {
    executions(|| {
        let m = Arc::new(numa_spin::Mutex::new(0u64));
        let other = {
            let m = m.clone();
            thread::spawn(move || increment_racy(&m))
        };
        increment_racy(&m);
        other.join().unwrap();
        assert_eq!(*m.lock(), 2, "lost update");
    });
}

/// `try_lock_for` on a lock another thread holds, then releases: the model
/// explores both the acquisition and the timeout, and terminates.
#[test]
fn try_lock_for_explores_both_outcomes() {
    static ACQUIRED: AtomicBool = AtomicBool::new(false);
    static TIMED_OUT: AtomicBool = AtomicBool::new(false);
    executions(|| {
        let m = Arc::new(numa_spin::Mutex::new(0u64));
        let held = m.lock();
        let waiter = {
            let m = m.clone();
            thread::spawn(move || match m.try_lock_for(Duration::from_millis(1)) {
                Some(mut g) => {
                    *g += 1;
                    ACQUIRED.store(true, Ordering::Relaxed);
                }
                None => TIMED_OUT.store(true, Ordering::Relaxed),
            })
        };
        drop(held);
        waiter.join().unwrap();
    });
    assert!(ACQUIRED.load(Ordering::Relaxed), "no execution acquired");
    assert!(TIMED_OUT.load(Ordering::Relaxed), "no execution timed out");
}

/// A `ReentrantMutex` belongs to the loom thread that holds it, not to the one
/// OS thread every loom thread runs on: another loom thread waits.
#[test]
fn a_reentrant_mutex_excludes_other_loom_threads() {
    executions(|| {
        let m = Arc::new(numa_spin::ReentrantMutex::new(std::cell::Cell::new(0u64)));
        let other = {
            let m = m.clone();
            thread::spawn(move || {
                let g = m.lock();
                let v = g.get();
                thread::yield_now();
                g.set(v + 1);
            })
        };
        {
            let outer = m.lock();
            let inner = m.lock();
            let v = inner.get();
            thread::yield_now();
            outer.set(v + 1);
        }
        other.join().unwrap();
        assert_eq!(m.lock().get(), 2);
    });
}

/// A lock that outlives an execution (a `static`) is refused with a message
/// that says what to do.
#[test]
#[should_panic(expected = "earlier loom execution")]
fn a_static_lock_is_refused_in_a_second_execution() {
    static M: numa_spin::Mutex<u64> = numa_spin::Mutex::new(0);
    executions(|| {
        let other = thread::spawn(|| *M.lock() += 1);
        *M.lock() += 1;
        other.join().unwrap();
    });
}
