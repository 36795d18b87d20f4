//! The lock_api 0.4 implementations (feature `lock_api_04`), through lock_api 0.4's
//! own wrappers and generic code written against lock_api 0.4.
#![cfg(all(feature = "lock_api_04", not(numa_loom)))]

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use numa_spin::lock_api_04::lock_api;

/// Generic lock_api 0.4 code: `threads` threads add 1 `iters` times each, some
/// through the timed and fair paths.
fn hammer<R>(threads: usize, iters: usize)
where
    R: lock_api::RawMutexTimed<Duration = Duration>
        + lock_api::RawMutexFair
        + Send
        + Sync
        + 'static,
{
    let m = Arc::new(lock_api::Mutex::<R, usize>::new(0));
    let hs: Vec<_> = (0..threads)
        .map(|i| {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 2));
                for n in 0..iters {
                    let mut g = match n % 3 {
                        0 => m.lock(),
                        1 => m.try_lock_for(Duration::from_secs(60)).expect("60 s"),
                        _ => m.lock(),
                    };
                    *g += 1;
                    if n % 3 == 2 {
                        lock_api::MutexGuard::unlock_fair(g);
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(*m.lock(), threads * iters);
}

#[test]
fn raw_mutexes_through_lock_api_04() {
    hammer::<numa_spin::RawMutex>(4, 2_000);
    hammer::<numa_spin::RawQueuedMutex>(4, 1_000);
    hammer::<numa_spin::RawFairMutex>(4, 500);
    hammer::<numa_spin::RawHqMutex>(4, 2_000);
}

/// The HQ lock through lock_api 0.4 under contention from 4 virtual nodes, with
/// a switch threshold of 1 so that episodes switch to NUMA mode and hand off
/// locally and remotely; the lock is unbound at the end.
#[test]
fn hq_through_lock_api_04_binds_and_unbinds() {
    static CFG: numa_spin::Config = numa_spin::Config::DEFAULT.hq_switch_threshold(1);
    let m = Arc::new(lock_api::Mutex::from_raw(
        numa_spin::RawHqLock::with_config(&CFG),
        0usize,
    ));
    let hs: Vec<_> = (0..8)
        .map(|i| {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 4));
                for n in 0..1_000 {
                    let mut g = m.lock();
                    *g += 1;
                    if n % 4 == 0 {
                        lock_api::MutexGuard::unlock_fair(g);
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(*m.lock(), 8_000);
    // SAFETY: only read.
    assert!(!unsafe { m.raw() }.is_numa_bound());
}

#[test]
fn timed_out_and_reentrant() {
    let m = numa_spin::lock_api_04::Mutex::new(1);
    let g = m.lock();
    assert!(m.try_lock_for(Duration::from_millis(5)).is_none());
    assert!(m.is_locked());
    drop(g);
    assert!(m.try_lock().is_some());

    let h = numa_spin::lock_api_04::HqMutex::new(1);
    let g = h.lock();
    assert!(h.try_lock_for(Duration::from_millis(5)).is_none());
    assert!(h.try_lock().is_none());
    drop(g);
    assert_eq!(*h.try_lock_for(Duration::from_millis(5)).expect("free"), 1);

    let r = numa_spin::lock_api_04::ReentrantMutex::new(2);
    let a = r.lock();
    let b = r.lock();
    assert_eq!(*a + *b, 4);
}
