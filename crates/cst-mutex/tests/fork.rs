//! The locks in the child of a `fork`: the `pthread_atfork` pattern that
//! POSIX recommends for libraries (the prepare handler locks the library's
//! mutex, the parent and child handlers unlock it) while other threads wait
//! for that mutex. The child must be able to take the lock again and contend
//! on it with threads of its own, whatever waited in the parent.
//!
//! Each child runs under `alarm`, so a hang kills it with `SIGALRM` and the
//! parent's check fails instead of the test hanging.
#![cfg(all(unix, not(numa_loom)))]

use cst_mutex::Mutex;
use std::sync::Arc;
use std::thread;

/// The tests of this file run one at a time: Rust's standard library has
/// process-wide locks of its own (the new-thread set-up takes one), which
/// are not fork-safe, so a test that spawns threads while the other forks
/// could hang the child inside `std`, not in the lock under test.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Forks; the child runs `f`, then exits 0 (or is killed); returns the raw
/// wait status.
fn in_child(f: impl FnOnce()) -> i32 {
    // SAFETY: the child runs `f` and `_exit`s; it never returns into the
    // test harness. The child is single-threaded until `f` spawns threads;
    // glibc's fork resets its own allocator locks for that.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: plain libc calls in the child.
        unsafe { libc::alarm(30) };
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_ok();
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 3 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    status
}

/// In the child: takes the lock again and contends on it with two threads
/// of the child, 2,000 acquisitions each plus the main thread's.
fn contend_in_child(m: &Arc<Mutex<u64>>) {
    let before = *m.lock();
    let hs: Vec<_> = (0..2)
        .map(|i| {
            let m = m.clone();
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 2));
                for _ in 0..2_000 {
                    *m.lock() += 1;
                }
            })
        })
        .collect();
    for _ in 0..2_000 {
        *m.lock() += 1;
    }
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(*m.lock(), before + 6_000);
}

fn assert_exited_ok(status: i32, what: &str) {
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{what}: the child did not finish (wait status {status:#x}; SIGALRM = {} means it hung)",
        libc::SIGALRM
    );
}

/// Held across the fork with three waiters queued or parked behind it;
/// unlocked in the parent and in the child; then the child takes it again
/// and contends on it. Several forks, each with fresh waiters.
#[test]
fn held_across_fork_with_waiters_works_in_the_child() {
    let _one = one_at_a_time();
    for round in 0..10 {
        let m = Arc::new(Mutex::new(0u64));
        let g = m.lock();
        let ws: Vec<_> = (0..3)
            .map(|i| {
                let m = m.clone();
                thread::spawn(move || {
                    numa_topology::set_current_thread_node(Some(i % 2));
                    *m.lock() += 1;
                })
            })
            .collect();
        // SAFETY: only reads the waiter counts.
        let raw = unsafe { m.raw() };
        while raw.queued_waiters() + raw.parked_waiters() < 3 {
            thread::yield_now();
        }
        std::mem::forget(g);
        let status = in_child(|| {
            // SAFETY: the lock is held by this thread (the forking thread's
            // guard was forgotten before the fork).
            unsafe { m.force_unlock(cst_mutex::MutexGuardState::new()) };
            contend_in_child(&m);
        });
        // SAFETY: as in the child.
        unsafe { m.force_unlock(cst_mutex::MutexGuardState::new()) };
        for w in ws {
            w.join().unwrap();
        }
        assert_eq!(*m.lock(), 3);
        assert_exited_ok(status, &format!("round {round}"));
    }
}

/// A plain fork while other threads contend (the lock free or held by a
/// parent thread at the moment of the fork): in the child, a lock that was
/// free works; one held by a thread that does not exist stays held, as with
/// glibc (checked with `try_lock`, which must not hang either).
#[test]
fn fork_while_others_contend() {
    let _one = one_at_a_time();
    for round in 0..10 {
        let m = Arc::new(Mutex::new(0u64));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ws: Vec<_> = (0..4)
            .map(|i| {
                let (m, stop) = (m.clone(), stop.clone());
                thread::spawn(move || {
                    numa_topology::set_current_thread_node(Some(i % 2));
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        *m.lock() += 1;
                    }
                })
            })
            .collect();
        // SAFETY: only reads the waiter counts.
        let raw = unsafe { m.raw() };
        while raw.queued_waiters() + raw.parked_waiters() < 1 {
            thread::yield_now();
        }
        let status = in_child(|| {
            // Held by a parent thread at the fork: stays held, like glibc's.
            if let Some(g) = m.try_lock() {
                drop(g);
                contend_in_child(&m);
            }
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in ws {
            w.join().unwrap();
        }
        assert_exited_ok(status, &format!("round {round}"));
    }
}

/// The fork of `held_across_fork_with_waiters_works_in_the_child` while
/// fresh threads of the parent park for the first time on another lock (on
/// 2 CPUs with 4 threads they sleep in the parking lot all the time, and a
/// thread's first park may grow the lot's table, locking every bucket). The
/// table is shared by every lock: a fork while another thread was inside
/// one of its buckets left that bucket locked in the child, and the child's
/// unlock, which takes the parent's waiters out of the lot's queues, hung
/// when their key hashed there. The child spawns no thread (the standard
/// library's own thread set-up is not fork-safe while the parent spawns).
#[test]
fn fork_while_others_park_in_the_parking_lot() {
    let _one = one_at_a_time();
    let a = Arc::new(Mutex::new(0u64));
    for round in 0..100 {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churn: Vec<_> = (0..4)
            .map(|i| {
                let (a, stop) = (a.clone(), stop.clone());
                thread::spawn(move || {
                    numa_topology::set_current_thread_node(Some(i % 2));
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        *a.lock() += 1;
                    }
                })
            })
            .collect();
        let m = Arc::new(Mutex::new(0u64));
        let g = m.lock();
        let ws: Vec<_> = (0..3)
            .map(|i| {
                let m = m.clone();
                thread::spawn(move || {
                    numa_topology::set_current_thread_node(Some(i % 2));
                    *m.lock() += 1;
                })
            })
            .collect();
        // SAFETY: only reads the waiter counts.
        let raw = unsafe { m.raw() };
        while raw.queued_waiters() + raw.parked_waiters() < 3 {
            thread::yield_now();
        }
        std::mem::forget(g);
        let status = in_child(|| {
            // SAFETY: the lock is held by this thread (its guard was
            // forgotten before the fork).
            unsafe { m.force_unlock(cst_mutex::MutexGuardState::new()) };
            for _ in 0..1_000 {
                *m.lock() += 1;
            }
            assert_eq!(*m.lock(), 1_000);
        });
        // SAFETY: as in the child.
        unsafe { m.force_unlock(cst_mutex::MutexGuardState::new()) };
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in ws.into_iter().chain(churn) {
            w.join().unwrap();
        }
        assert_exited_ok(status, &format!("round {round}"));
    }
}

/// A parent thread asleep in the parking lot at the fork (a condvar waiter)
/// leaves no record in the child's copy of the lot. Such a record lives in
/// the sleeping thread's thread-local storage, on its stack, which glibc
/// hands to the child's next thread: left queued, it is the new thread's own
/// record, linked in a bucket that the new thread does not know of, and an
/// unpark of its key may pick it instead of a child's thread sleeping on the
/// same address. The child counts what the lot still holds for the
/// condvar's key (its address) before it starts a thread.
#[test]
fn parent_sleepers_leave_no_record_in_the_child() {
    let _one = one_at_a_time();
    // The condvar's parking-lot key is its raw condvar's address, which is
    // the condvar's (`lock_api::Condvar` holds only the raw one).
    assert_eq!(
        std::mem::size_of::<cst_mutex::Condvar>(),
        std::mem::size_of::<cst_mutex::RawCondvar>()
    );
    let pair = Arc::new((Mutex::new((false, false)), cst_mutex::Condvar::new()));
    let waiter = {
        let pair = pair.clone();
        thread::spawn(move || {
            let (m, cv) = &*pair;
            let mut g = m.lock();
            g.0 = true; // waiting
            while !g.1 {
                cv.wait(&mut g);
            }
        })
    };
    // The waiter released the mutex only from inside the wait, after the
    // parking lot queued it: once we hold the mutex and see it waiting, it
    // sleeps in the lot (or was woken spuriously and sleeps again; its
    // record is in the lot whenever it does not hold the mutex).
    let g = loop {
        let g = pair.0.lock();
        if g.0 {
            break g;
        }
        drop(g);
        thread::yield_now();
    };
    let key = &pair.1 as *const cst_mutex::Condvar as usize;
    let status = in_child(|| {
        // SAFETY: a key of cst-mutex's, which only unparks (nothing of the
        // child sleeps on it); the lot's buckets are unlocked in the child.
        let left =
            unsafe { parking_lot_core::unpark_all(key, parking_lot_core::DEFAULT_UNPARK_TOKEN) };
        assert_eq!(
            left, 0,
            "the parent's condvar waiter is still queued in the child's parking lot"
        );
    });
    let mut g = g;
    g.1 = true;
    drop(g);
    pair.1.notify_all();
    waiter.join().unwrap();
    assert_exited_ok(status, "the child's parking lot");
}
