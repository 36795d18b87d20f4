//! `Condvar` with the selected backend's `Mutex`: notification, timeouts,
//! `wait_while`, counts, and the two-mutex panic.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Spawns `n` threads that each wait on `cv` once, and returns after all of
/// them are parked: each bumps the counter under the mutex and releases the
/// mutex only inside the wait, after it is queued on the condvar.
fn parked_waiters(
    pair: &Arc<(Mutex<(usize, bool)>, Condvar)>,
    n: usize,
) -> Vec<thread::JoinHandle<bool>> {
    let hs = (0..n)
        .map(|_| {
            let pair = Arc::clone(pair);
            thread::spawn(move || {
                let (m, cv) = &*pair;
                let mut g = m.lock();
                g.0 += 1;
                let r = cv.wait_while_for(&mut g, |s| !s.1, Duration::from_secs(30));
                !r.timed_out()
            })
        })
        .collect();
    while pair.0.lock().0 < n {
        thread::sleep(Duration::from_millis(1));
    }
    hs
}

#[test]
fn notify_one_wakes_one_waiter() {
    let pair = Arc::new((Mutex::new((0, false)), Condvar::new()));
    let hs = parked_waiters(&pair, 1);
    pair.0.lock().1 = true;
    assert!(pair.1.notify_one());
    for h in hs {
        assert!(h.join().unwrap(), "woken, not timed out");
    }
    assert!(!pair.1.notify_one(), "nobody left");
}

#[test]
fn notify_all_counts_every_waiter() {
    let pair = Arc::new((Mutex::new((0, false)), Condvar::new()));
    let hs = parked_waiters(&pair, 4);
    let n = {
        let mut g = pair.0.lock();
        g.1 = true;
        // Notified under the mutex: with `cst`, all but one move onto it.
        pair.1.notify_all()
    };
    assert_eq!(n, 4);
    for h in hs {
        assert!(h.join().unwrap());
    }
    assert_eq!(pair.1.notify_all(), 0);
}

#[test]
fn timeouts() {
    let m = Mutex::new(());
    let cv = Condvar::new();
    let mut g = m.lock();
    let start = Instant::now();
    assert!(cv.wait_for(&mut g, Duration::from_millis(20)).timed_out());
    assert!(start.elapsed() >= Duration::from_millis(20));
    assert!(
        cv.wait_until(&mut g, Instant::now() - Duration::from_millis(1))
            .timed_out()
    );
    // The mutex is held again after every wait.
    assert!(m.is_locked() && m.try_lock().is_none());
    drop(g);
    assert!(!m.is_locked());
}

#[test]
fn wait_for_overflowing_duration_waits_until_notified() {
    let pair = Arc::new((Mutex::new(false), Condvar::new()));
    let h = {
        let pair = Arc::clone(&pair);
        thread::spawn(move || {
            let (m, cv) = &*pair;
            let mut g = m.lock();
            let r = cv.wait_while_for(&mut g, |ready| !*ready, Duration::MAX);
            assert!(!r.timed_out());
        })
    };
    thread::sleep(Duration::from_millis(10));
    *pair.0.lock() = true;
    pair.1.notify_all();
    h.join().unwrap();
}

#[test]
fn producer_consumer() {
    const ITEMS: usize = 2_000;
    let pair = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let pair = Arc::clone(&pair);
            thread::spawn(move || {
                let (m, cv) = &*pair;
                let mut got = 0;
                loop {
                    let mut q = m.lock();
                    cv.wait_while(&mut q, |q| q.is_empty());
                    match q.pop() {
                        Some(None) => return got,
                        Some(Some(_)) => got += 1,
                        None => unreachable!(),
                    }
                }
            })
        })
        .collect();
    for i in 0..ITEMS {
        pair.0.lock().push(Some(i));
        pair.1.notify_one();
    }
    // One end marker per consumer, behind the items (the queue is a stack).
    loop {
        let mut q = pair.0.lock();
        if q.is_empty() {
            q.push(None);
            q.push(None);
            break;
        }
        drop(q);
        thread::yield_now();
    }
    pair.1.notify_all();
    let total: usize = consumers.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, ITEMS);
}

#[test]
fn two_mutexes_panic() {
    let pair = Arc::new((Mutex::new(false), Condvar::new()));
    let waiter = {
        let pair = Arc::clone(&pair);
        thread::spawn(move || {
            let (m, cv) = &*pair;
            let mut g = m.lock();
            *g = true;
            cv.wait_for(&mut g, Duration::from_secs(30));
        })
    };
    // Once the mutex is free with the flag set, the waiter is queued with it.
    while !*pair.0.lock() {
        thread::sleep(Duration::from_millis(1));
    }
    let other = Mutex::new(());
    let mut g = other.lock();
    let r = catch_unwind(AssertUnwindSafe(|| {
        pair.1.wait_for(&mut g, Duration::from_secs(1));
    }));
    assert!(r.is_err(), "a condvar used with two mutexes must panic");
    // The panic came before the release: the guard still holds `other`.
    assert!(other.is_locked());
    drop(g);
    assert!(!other.is_locked());
    assert!(pair.1.notify_one());
    waiter.join().unwrap();
    // With no waiter left the condvar takes any mutex again.
    let mut g = other.lock();
    assert!(
        pair.1
            .wait_for(&mut g, Duration::from_millis(1))
            .timed_out()
    );
}
