//! A release that wakes a timed waiter asleep outside the queue marks the
//! mutex woken, and the waiter lifts the mark once it runs
//! (`numa_spin::RawLock::note_woken`, `woken_ran`). Its own test binary: the
//! marks' counts are the process's, so no other test may wake threads
//! meanwhile.
#![cfg(all(not(numa_loom), target_os = "linux"))]

use std::time::{Duration, Instant};

/// Whether thread `tid` of this process sleeps (`S` in its `/proc` stat).
fn asleep(tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next())
        })
        == Some('S')
}

#[test]
fn a_woken_sleeper_is_marked_until_it_runs() {
    let lock = cst_mutex::RawMutex::new();
    for round in 0..5 {
        lock.acquire();
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let lock = &lock;
            let waiter = s.spawn(move || {
                // SAFETY: gettid has no preconditions.
                tx.send(unsafe { libc::gettid() }).unwrap();
                let ok = lock.try_acquire_for(Duration::from_secs(20));
                if ok {
                    // SAFETY: acquired just above.
                    unsafe { lock.release() };
                }
                ok
            });
            let tid = rx.recv().unwrap();
            // The state we need: the waiter asleep outside the queue, the
            // lock marked for it.
            let start = Instant::now();
            while !(lock.has_sleepers() && asleep(tid)) {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "the waiter never slept"
                );
                std::thread::yield_now();
            }
            let (made, lifted) = numa_spin::blocking::woken_counts();
            // SAFETY: acquired above.
            unsafe { lock.release() };
            assert!(
                waiter.join().unwrap(),
                "round {round}: the waiter timed out"
            );
            let (made2, lifted2) = numa_spin::blocking::woken_counts();
            assert_eq!(
                made2 - made,
                1,
                "round {round}: the release that woke the waiter marked the lock"
            );
            assert_eq!(
                lifted2 - lifted,
                1,
                "round {round}: the woken waiter lifted the mark"
            );
        });
    }
}
