//! Condvar waiters that `notify_all` requeued onto the mutex must get it in
//! bounded time while other threads keep the mutex busy (and keep waiters
//! parked on its per-node queues the whole time). A waiter that never gets
//! the mutex is the failure; the 60 s watchdog only turns that hang into a
//! test failure, it measures nothing.
#![cfg(not(numa_loom))]

use cst_mutex::{Condvar, Mutex};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Hammering threads: with one holding the mutex (asleep inside it) and at
/// least as many parked as there are CPUs on a small machine, newcomers park
/// at once, so several of them are parked at every unlock.
const HAMMERS: usize = 8;
/// Condvar waiters: `notify_all` wakes one and requeues the others.
const WAITERS: usize = 4;
const WATCHDOG: Duration = Duration::from_secs(60);

struct State {
    ready: usize,
    go: bool,
}

#[test]
fn requeued_waiters_get_the_mutex_while_it_is_hammered() {
    let m = Arc::new(Mutex::new(State {
        ready: 0,
        go: false,
    }));
    let cv = Arc::new(Condvar::new());
    let stop = Arc::new(AtomicBool::new(false));
    let (done_tx, done_rx) = mpsc::channel();

    let waiters: Vec<_> = (0..WAITERS)
        .map(|i| {
            let (m, cv, done_tx) = (m.clone(), cv.clone(), done_tx.clone());
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 2));
                let mut g = m.lock();
                g.ready += 1;
                cv.wait_while(&mut g, |s| !s.go);
                drop(g);
                done_tx.send(i).unwrap();
            })
        })
        .collect();
    // Every waiter is queued on the condvar once it counted itself: it
    // released the mutex only after queueing.
    while m.lock().ready < WAITERS {
        thread::yield_now();
    }

    let hammers: Vec<_> = (0..HAMMERS)
        .map(|i| {
            let (m, stop) = (m.clone(), stop.clone());
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 2));
                while !stop.load(Ordering::Relaxed) {
                    let g = m.lock();
                    thread::sleep(Duration::from_micros(200));
                    drop(g);
                }
            })
        })
        .collect();
    // SAFETY: only reads the queue's tail.
    while !unsafe { m.raw() }.has_queued_waiters() {
        thread::yield_now();
    }

    let notified = {
        let mut g = m.lock();
        g.go = true;
        cv.notify_all()
    };
    assert_eq!(notified, WAITERS, "notify_all miscounted");

    let start = Instant::now();
    let mut served = 0;
    while served < WAITERS {
        let left = WATCHDOG.saturating_sub(start.elapsed());
        match done_rx.recv_timeout(left) {
            Ok(_) => served += 1,
            Err(_) => break,
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in hammers {
        h.join().unwrap();
    }
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(
        served, WAITERS,
        "requeued condvar waiters did not get the mutex within {WATCHDOG:?} while it was hammered"
    );
}
