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

/// Spawns `n` threads (on nodes 0, 1, 0, ...) that each add one under `m`,
/// which the caller holds, one at a time: each is spawned once the one
/// before it is queued (the queue's tail names a new waiter).
fn queue_waiters(m: &Arc<Mutex<u64>>, n: usize) -> Vec<thread::JoinHandle<()>> {
    // SAFETY: only reads the queue's tail.
    let raw = unsafe { m.raw() };
    (0..n)
        .map(|i| {
            let before = raw.tail_code();
            let w = {
                let m = m.clone();
                thread::spawn(move || {
                    numa_topology::set_current_thread_node(Some(i % 2));
                    *m.lock() += 1;
                })
            };
            while matches!(raw.tail_code(), 0) || raw.tail_code() == before {
                thread::yield_now();
            }
            w
        })
        .collect()
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
        let ws = queue_waiters(&m, 3);
        std::mem::forget(g);
        let status = in_child(|| {
            // SAFETY: the lock is held by this thread (the forking thread's
            // guard was forgotten before the fork).
            unsafe { m.force_unlock(cst_mutex::lock_api::GuardSend::new()) };
            contend_in_child(&m);
        });
        // SAFETY: as in the child.
        unsafe { m.force_unlock(cst_mutex::lock_api::GuardSend::new()) };
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
        // SAFETY: only reads the queue's tail.
        let raw = unsafe { m.raw() };
        while !raw.has_queued_waiters() {
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
/// fresh threads of the parent park for the first time on another lock
/// (timed waiters: on 2 CPUs with 4 threads they sleep in the parking lot
/// all the time, and a
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
                    // Timed: their waits sleep outside the queue, in the
                    // parking lot.
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        if let Some(mut g) = a.try_lock_for(std::time::Duration::from_millis(50)) {
                            *g += 1;
                        }
                    }
                })
            })
            .collect();
        let m = Arc::new(Mutex::new(0u64));
        let g = m.lock();
        let ws = queue_waiters(&m, 3);
        std::mem::forget(g);
        let status = in_child(|| {
            // SAFETY: the lock is held by this thread (its guard was
            // forgotten before the fork).
            unsafe { m.force_unlock(cst_mutex::lock_api::GuardSend::new()) };
            for _ in 0..1_000 {
                *m.lock() += 1;
            }
            assert_eq!(*m.lock(), 1_000);
        });
        // SAFETY: as in the child.
        unsafe { m.force_unlock(cst_mutex::lock_api::GuardSend::new()) };
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
    sleepers_leave_no_record(1, 0);
}

/// As above, with 100 threads asleep on one condvar and one on another that
/// lies 64 KiB further: two keys that the table of sleepers once hashed to
/// the same 64 slots it tried, so the second key's sleeper found them taken
/// and slept unrecorded, and its record stayed in the child's lot.
#[test]
fn a_crowded_key_leaves_no_record_of_another_in_the_child() {
    sleepers_leave_no_record(100, 1);
}

/// A mutex and a condvar; `.0` of the data counts the threads waiting, and
/// `.1` releases them.
type Pair = (Mutex<(usize, bool)>, cst_mutex::Condvar);

/// Two pairs whose condvars lie 64 KiB apart.
#[repr(C)]
struct FarApart {
    a: Pair,
    pad: [u8; 65_536 - std::mem::size_of::<Pair>()],
    b: Pair,
}

/// `on_a` threads wait on one condvar and `on_b` on another while the test
/// forks; the child counts what the lot still holds for the condvars' keys
/// (their addresses) before it starts a thread.
fn sleepers_leave_no_record(on_a: usize, on_b: usize) {
    let _one = one_at_a_time();
    // A condvar's parking-lot key is its raw condvar's address, which is
    // the condvar's (`lock_api::Condvar` holds only the raw one).
    assert_eq!(
        std::mem::size_of::<cst_mutex::Condvar>(),
        std::mem::size_of::<cst_mutex::RawCondvar>()
    );
    let new_pair = || (Mutex::new((0, false)), cst_mutex::Condvar::new());
    let far = Arc::new(FarApart {
        a: new_pair(),
        pad: [0; 65_536 - std::mem::size_of::<Pair>()],
        b: new_pair(),
    });
    let key = |p: &Pair| &p.1 as *const cst_mutex::Condvar as usize;
    let keys = [key(&far.a), key(&far.b)];
    assert_eq!(keys[1] - keys[0], 65_536);
    let waiters: Vec<_> = (0..on_a + on_b)
        .map(|i| {
            let far = far.clone();
            let on_b = i >= on_a;
            thread::spawn(move || {
                let (m, cv) = if on_b { &far.b } else { &far.a };
                let mut g = m.lock();
                g.0 += 1;
                while !g.1 {
                    cv.wait(&mut g);
                }
            })
        })
        .collect();
    // A waiter released its mutex only from inside the wait, after the
    // parking lot queued it: once we hold both mutexes and see all of them
    // waiting, they sleep in the lot (or one was woken spuriously and
    // waits for its mutex, which only lowers what the child can find).
    let guards = loop {
        let (ga, gb) = (far.a.0.lock(), far.b.0.lock());
        if ga.0 == on_a && gb.0 == on_b {
            break (ga, gb);
        }
        drop((ga, gb));
        thread::yield_now();
    };
    let status = in_child(|| {
        for key in keys {
            // SAFETY: a key of cst-mutex's, which only unparks (nothing of
            // the child sleeps on it); the lot's buckets are unlocked in the
            // child.
            let left = unsafe {
                parking_lot_core::unpark_all(key, parking_lot_core::DEFAULT_UNPARK_TOKEN)
            };
            assert_eq!(
                left, 0,
                "parent's condvar waiters still queued in the child's parking lot"
            );
        }
    });
    let (mut ga, mut gb) = guards;
    ga.1 = true;
    gb.1 = true;
    drop((ga, gb));
    far.a.1.notify_all();
    far.b.1.notify_all();
    for w in waiters {
        w.join().unwrap();
    }
    assert_exited_ok(status, "the child's parking lot");
}
