//! 64 threads on this machine's CPUs (2 in CI) finish a fixed amount of work
//! with each primitive: no lost wake-up, no starvation that stalls the run.
//! Nothing is timed; a hang fails through the test harness.
#![cfg(not(numa_loom))]

use cst_mutex::{Condvar, Mutex, RwLock};
use std::sync::Arc;
use std::thread;

const THREADS: usize = 64;

fn spawn_all<F: Fn(usize) + Send + Sync + 'static>(f: F) {
    let f = Arc::new(f);
    let hs: Vec<_> = (0..THREADS)
        .map(|i| {
            let f = f.clone();
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 4));
                f(i)
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

#[test]
fn mutex_64_threads() {
    let m = Arc::new(Mutex::new(0u64));
    let m2 = m.clone();
    spawn_all(move |_| {
        for _ in 0..2_000 {
            *m2.lock() += 1;
        }
    });
    assert_eq!(*m.lock(), (THREADS * 2_000) as u64);
}

#[test]
fn mutex_64_threads_with_timeouts_and_fair_unlocks() {
    let m = Arc::new(Mutex::new(0u64));
    let m2 = m.clone();
    spawn_all(move |i| {
        let mut done = 0;
        while done < 500 {
            if i % 3 == 0 {
                if let Some(mut g) = m2.try_lock_for(std::time::Duration::from_micros(50)) {
                    *g += 1;
                    done += 1;
                }
            } else {
                let mut g = m2.lock();
                *g += 1;
                done += 1;
                if i % 3 == 1 {
                    cst_mutex::MutexGuard::unlock_fair(g);
                }
            }
        }
    });
    assert_eq!(*m.lock(), (THREADS * 500) as u64);
    // SAFETY: only reads the lock's words.
    let raw = unsafe { m.raw() };
    assert!(
        !raw.has_queued_waiters() && !raw.has_sleepers(),
        "waiters left in the queue or marked"
    );
}

#[test]
fn rwlock_64_threads() {
    let l = Arc::new(RwLock::new(0u64));
    let l2 = l.clone();
    spawn_all(move |i| {
        for k in 0..1_000 {
            if (i + k) % 8 == 0 {
                *l2.write() += 1;
            } else if (i + k) % 8 == 1 {
                let up = l2.upgradable_read();
                let mut w = cst_mutex::RwLockUpgradableReadGuard::upgrade(up);
                *w += 1;
            } else {
                std::hint::black_box(*l2.read());
            }
        }
    });
    assert_eq!(*l.read(), (THREADS * 1_000 / 4) as u64);
}

#[test]
fn condvar_64_threads_ping() {
    // A token passes 64 * 20 times round a ring of 64 threads.
    let pair = Arc::new((Mutex::new(0usize), Condvar::new()));
    let p2 = pair.clone();
    spawn_all(move |i| {
        let (m, cv) = &*p2;
        for round in 0..20 {
            let mut g = m.lock();
            cv.wait_while(&mut g, |t| *t != round * THREADS + i);
            *g += 1;
            cv.notify_all();
        }
    });
    assert_eq!(*pair.0.lock(), THREADS * 20);
}
