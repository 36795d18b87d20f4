//! `try_lock_for` / `try_lock_until` (lock_api's `RawMutexTimed`): they time out
//! while the lock is held, succeed once it is released, and exclude like `lock`.
#![cfg(not(numa_loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use lock_api::{RawMutex as _, RawMutexTimed as _};
use numa_spin::{FairMutex, Mutex, QueuedMutex, RawMutex};

#[test]
fn times_out_while_held_and_waits_at_least_the_timeout() {
    let m = Arc::new(Mutex::new(0u32));
    let held = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let holder = {
        let (m, held, release) = (Arc::clone(&m), Arc::clone(&held), Arc::clone(&release));
        thread::spawn(move || {
            let _g = m.lock();
            held.store(true, Ordering::Release);
            while !release.load(Ordering::Acquire) {
                thread::sleep(Duration::from_millis(1));
            }
        })
    };
    while !held.load(Ordering::Acquire) {
        thread::yield_now();
    }
    for timeout in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(20),
    ] {
        let start = Instant::now();
        assert!(m.try_lock_for(timeout).is_none(), "acquired a held lock");
        assert!(
            start.elapsed() >= timeout,
            "gave up after {:?} < {timeout:?}",
            start.elapsed()
        );
    }
    let deadline = Instant::now() + Duration::from_millis(10);
    assert!(m.try_lock_until(deadline).is_none());
    assert!(Instant::now() >= deadline);
    // A deadline in the past still makes one attempt, which fails here.
    assert!(
        m.try_lock_until(Instant::now() - Duration::from_millis(1))
            .is_none()
    );
    release.store(true, Ordering::Release);
    holder.join().unwrap();
    // Free now: a zero timeout and a past deadline both succeed.
    assert!(m.try_lock_for(Duration::ZERO).is_some());
    assert!(
        m.try_lock_until(Instant::now() - Duration::from_millis(1))
            .is_some()
    );
}

#[test]
fn succeeds_when_released_before_the_deadline() {
    let m = Arc::new(QueuedMutex::new(0u32));
    let g = m.lock();
    let waiter = {
        let m = Arc::clone(&m);
        thread::spawn(move || {
            let start = Instant::now();
            let mut g = m.try_lock_for(Duration::from_secs(30)).expect("timed out");
            *g += 1;
            start.elapsed()
        })
    };
    thread::sleep(Duration::from_millis(30));
    drop(g);
    let waited = waiter.join().unwrap();
    assert!(waited < Duration::from_secs(30));
    assert_eq!(*m.lock(), 1);
}

#[test]
fn a_huge_timeout_waits_without_limit() {
    let raw = RawMutex::INIT;
    let g = raw.try_lock_for(Duration::MAX).expect("free lock");
    // SAFETY: `g` is the state of the acquisition above.
    unsafe { lock_api::RawMutex::unlock(&raw, g) };
    assert!(!raw.is_locked());
}

/// Timed lockers (polling the fast path) beside queued `lock()` callers: every
/// critical section is exclusive and every successful acquisition counted.
#[test]
fn timed_and_queued_lockers_exclude_each_other() {
    const THREADS: usize = 4;
    const ITERS: usize = 2_000;
    let m = Arc::new(FairMutex::new((0usize, 0usize)));
    let inside = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let (m, inside) = (Arc::clone(&m), Arc::clone(&inside));
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 2));
                let mut mine = 0;
                for n in 0..ITERS {
                    let g = if i % 2 == 0 {
                        Some(m.lock())
                    } else {
                        m.try_lock_for(Duration::from_micros((n % 50) as u64))
                    };
                    if let Some(mut g) = g {
                        assert!(!inside.swap(true, Ordering::Relaxed), "two holders");
                        g.0 += 1;
                        mine += 1;
                        if n % 64 == 0 {
                            thread::yield_now();
                        }
                        inside.store(false, Ordering::Relaxed);
                    }
                }
                mine
            })
        })
        .collect();
    let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(m.lock().0, total);
    assert!(total >= THREADS / 2 * ITERS);
}

#[test]
fn tuned_strict_fifo_lock_is_timed_too() {
    static CFG: numa_spin::Config = numa_spin::Config::DEFAULT.steal_bound_ns(0);
    let m = numa_spin::TunedMutex::from_raw(numa_spin::RawTunedMutex::with_config(&CFG), 1);
    let g = m.try_lock_for(Duration::from_millis(1)).expect("free lock");
    assert!(m.try_lock_for(Duration::from_millis(1)).is_none());
    drop(g);
    assert!(m.try_lock_for(Duration::from_millis(1)).is_some());
}
