//! loom models of this crate's code over numa-spin's mutexes and cst-mutex's
//! `Mutex`, `RwLock`, `Condvar`, `FairMutex` and `ReentrantMutex`
//! (`RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release`).
//!
//! Each model counts its executions (a std atomic, outside the model) and prints
//! the count beside `loom::sync::Mutex`'s for the same model.
#![cfg(loom)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_user::{Mailbox, increment, increment_racy};
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

/// The mutexes' counts against loom's own Mutex: within 10x.
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
        ("cst_mutex::Mutex", counter::<cst_mutex::RawMutex>()),
        ("cst_mutex::FairMutex", counter::<cst_mutex::RawFairMutex>()),
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
fn check_then_act<R: RawMutex + Send + Sync + 'static>() {
    executions(|| {
        let m = Arc::new(Mutex::<R, u64>::new(0));
        let other = {
            let m = m.clone();
            thread::spawn(move || increment_racy(&m))
        };
        increment_racy(&m);
        other.join().unwrap();
        assert_eq!(*m.lock(), 2, "lost update");
    });
}

#[test]
#[should_panic(expected = "lost update")]
fn a_check_then_act_bug_is_found() {
    check_then_act::<numa_spin::RawMutex>();
}

#[test]
#[should_panic(expected = "lost update")]
fn a_check_then_act_bug_over_cst_mutex_is_found() {
    check_then_act::<cst_mutex::RawMutex>();
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
fn reentrant_excludes<R: RawMutex + Send + Sync + 'static>() {
    executions(|| {
        let m = Arc::new(numa_spin::lock_api::ReentrantMutex::<
            R,
            numa_spin::RawThreadId,
            std::cell::Cell<u64>,
        >::new(std::cell::Cell::new(0)));
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

/// numa-spin's and cst-mutex's `ReentrantMutex` (both are
/// `lock_api::ReentrantMutex<_, numa_spin::RawThreadId, _>`).
#[test]
fn a_reentrant_mutex_excludes_other_loom_threads() {
    reentrant_excludes::<numa_spin::RawMutex>();
    reentrant_excludes::<cst_mutex::RawMutex>();
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

/// Two writers each add one, a reader sees 0, 1 or 2 and never a torn
/// value; the model asserts 2. Its execution count beside the same model over
/// `loom::sync::RwLock`.
#[test]
fn rwlock_readers_and_writers_pass_within_ten_times_loom_rwlock_executions() {
    let ours = executions(|| {
        let l = Arc::new(cst_mutex::RwLock::new((0u64, 0u64)));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let l = l.clone();
                thread::spawn(move || {
                    let mut g = l.write();
                    g.0 += 1;
                    // A point where loom may switch threads: lock_api's data
                    // cell is no loom cell, so a reader let in during the
                    // write shows only as a torn pair.
                    thread::yield_now();
                    g.1 += 1;
                })
            })
            .collect();
        {
            let g = l.read();
            assert_eq!(g.0, g.1, "torn read");
            assert!(g.0 <= 2);
        }
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(*l.read(), (2, 2));
    });
    let yardstick = executions(|| {
        let l = Arc::new(loom::sync::RwLock::new((0u64, 0u64)));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let l = l.clone();
                thread::spawn(move || {
                    let mut g = l.write().unwrap();
                    g.0 += 1;
                    thread::yield_now();
                    g.1 += 1;
                })
            })
            .collect();
        {
            let g = l.read().unwrap();
            assert_eq!(g.0, g.1, "torn read");
        }
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(*l.read().unwrap(), (2, 2));
    });
    println!("cst_mutex::RwLock: {ours} executions (loom::sync::RwLock: {yardstick})");
    assert!(ours > 0 && ours <= 10 * yardstick, "{ours} vs {yardstick}");
}

/// An upgradable reader that upgrades while a plain reader reads: the
/// upgrade waits for the reader, and no writer slips in between.
#[test]
fn an_upgrade_is_atomic_against_other_writers() {
    executions(|| {
        let l = Arc::new(cst_mutex::RwLock::new(0u64));
        let writer = {
            let l = l.clone();
            thread::spawn(move || *l.write() += 10)
        };
        let reader = {
            let l = l.clone();
            thread::spawn(move || assert!(*l.read() <= 11))
        };
        let u = l.upgradable_read();
        let seen = *u;
        let mut w = cst_mutex::RwLockUpgradableReadGuard::upgrade(u);
        assert_eq!(*w, seen, "a writer slipped in during the upgrade");
        *w += 1;
        drop(w);
        writer.join().unwrap();
        reader.join().unwrap();
        assert_eq!(*l.read(), 11);
    });
}

/// A write under a read guard released and re-taken (check-then-act on an
/// RwLock) loses an update, and the model finds it.
#[test]
#[should_panic(expected = "lost update")]
fn an_rwlock_check_then_act_bug_is_found() {
    executions(|| {
        let l = Arc::new(cst_mutex::RwLock::new(0u64));
        let bump = |l: &cst_mutex::RwLock<u64>| {
            let seen = *l.read();
            *l.write() = seen + 1;
        };
        let other = {
            let l = l.clone();
            thread::spawn(move || bump(&l))
        };
        bump(&l);
        other.join().unwrap();
        assert_eq!(*l.read(), 2, "lost update");
    });
}

/// A correct hand-over through `Mutex` and `Condvar` passes.
#[test]
fn a_condvar_mailbox_passes() {
    let n = executions(|| {
        let mb = Arc::new(Mailbox::default());
        let putter = {
            let mb = mb.clone();
            thread::spawn(move || mb.put(7))
        };
        assert_eq!(mb.take(), 7);
        putter.join().unwrap();
    });
    println!("cst_mutex::Condvar mailbox: {n} executions");
}

/// A condition checked before the wait, not under the guard the wait
/// releases: a `put` in between is a lost wake-up, and loom reports the
/// deadlock.
#[test]
#[should_panic(expected = "deadlock")]
fn a_lost_wake_up_is_found() {
    executions(|| {
        // A std `Arc`: loom's own `Arc` panics again when the deadlock
        // report unwinds through its drop, which aborts the test.
        let mb = std::sync::Arc::new(Mailbox::default());
        let putter = {
            let mb = mb.clone();
            thread::spawn(move || mb.put(7))
        };
        mb.take_racy();
        putter.join().unwrap();
    });
}

/// `notify_all` wakes every waiter; each re-locks the mutex before it
/// returns.
#[test]
fn notify_all_wakes_every_waiter() {
    executions(|| {
        let pair = Arc::new((cst_mutex::Mutex::new(0u32), cst_mutex::Condvar::new()));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let pair = pair.clone();
                thread::spawn(move || {
                    let (m, cv) = &*pair;
                    let mut g = m.lock();
                    while *g == 0 {
                        cv.wait(&mut g);
                    }
                    *g += 1;
                })
            })
            .collect();
        {
            let (m, cv) = &*pair;
            *m.lock() = 1;
            cv.notify_all();
        }
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(*pair.0.lock(), 3);
    });
}

/// `try_lock_for` on a held `cst_mutex::Mutex`, `try_write_for` on a
/// read-locked `RwLock` and `wait_for` on a `Condvar` that another thread
/// notifies: each model explores both the success and the timeout, and
/// terminates.
#[test]
fn timed_operations_explore_both_outcomes() {
    static GOT: [AtomicBool; 3] = [const { AtomicBool::new(false) }; 3];
    static TIMED_OUT: [AtomicBool; 3] = [const { AtomicBool::new(false) }; 3];
    let record = |i: usize, ok: bool| {
        if ok {
            GOT[i].store(true, Ordering::Relaxed);
        } else {
            TIMED_OUT[i].store(true, Ordering::Relaxed);
        }
    };
    executions(move || {
        let m = Arc::new(cst_mutex::Mutex::new(0u64));
        let held = m.lock();
        let waiter = {
            let m = m.clone();
            thread::spawn(move || record(0, m.try_lock_for(Duration::from_millis(1)).is_some()))
        };
        drop(held);
        waiter.join().unwrap();
    });
    executions(move || {
        let l = Arc::new(cst_mutex::RwLock::new(0u64));
        let read = l.read();
        let writer = {
            let l = l.clone();
            thread::spawn(move || record(1, l.try_write_for(Duration::from_millis(1)).is_some()))
        };
        drop(read);
        writer.join().unwrap();
    });
    executions(move || {
        let pair = Arc::new((cst_mutex::Mutex::new(false), cst_mutex::Condvar::new()));
        let notifier = {
            let pair = pair.clone();
            thread::spawn(move || {
                *pair.0.lock() = true;
                pair.1.notify_one();
            })
        };
        let (m, cv) = &*pair;
        let mut g = m.lock();
        if !*g {
            let r = cv.wait_for(&mut g, Duration::from_millis(1));
            // A notified wait sees the flag; a timed-out one may or may not.
            assert!(r.timed_out() || *g);
            record(2, !r.timed_out());
        }
        drop(g);
        notifier.join().unwrap();
    });
    for (i, what) in ["try_lock_for", "try_write_for", "wait_for"]
        .iter()
        .enumerate()
    {
        assert!(
            GOT[i].load(Ordering::Relaxed),
            "{what}: no execution succeeded"
        );
        assert!(
            TIMED_OUT[i].load(Ordering::Relaxed),
            "{what}: no execution timed out"
        );
    }
}

/// A cst-mutex lock kept across executions is refused, saying so.
#[test]
#[should_panic(expected = "earlier loom execution")]
fn a_static_rwlock_is_refused_in_a_second_execution() {
    static L: cst_mutex::RwLock<u64> = cst_mutex::RwLock::new(0);
    executions(|| {
        let other = thread::spawn(|| *L.write() += 1);
        *L.write() += 1;
        other.join().unwrap();
    });
}
