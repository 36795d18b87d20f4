//! `fork(2)` while a [`CombiningMutex`] is contended: the lock must work in
//! the child.
//!
//! At the fork, other threads of the parent have requests (their closures)
//! queued on the lock's request queue, and one of them, its node's combiner,
//! waits for the global lock. Those threads do not exist in the child. The
//! child unlocks the lock (the forking thread held it, as in the
//! `pthread_atfork` pattern: a prepare handler locks the mutex, the parent
//! and child handlers unlock it), takes it again and combines on it from
//! three threads: none of them may wait behind a request that exists only in
//! the parent, and every closure runs exactly once. A lock held by a thread
//! that does not exist in the child stays held, as glibc's mutexes do.
//!
//! Each check forks several times, and the last child forks a grandchild
//! while its own threads queue; the child runs under `alarm(10)`, so a hang
//! ends it with `SIGALRM`, and the parent checks its exit status. The
//! threads wait for each state through the lock's own diagnostics (its
//! request queues' tails, its global lock's tail word), never for a time.

#![cfg(unix)]

use numa_spin::CombiningMutex;
use numa_spin::combining::COMBINING_QUEUES;
use std::sync::atomic::{AtomicBool, Ordering};

mod common;
use common::await_state;

/// Forks per scenario.
const FORKS: usize = 4;
/// Threads that combine in the parent when it forks.
const PARENT_WAITERS: usize = 3;
/// Threads that combine in the child (the forking thread and two new ones).
const CHILD_THREADS: usize = 3;
/// Closures per child thread.
const CHILD_ROUNDS: u64 = 2_000;

/// Serializes the tests: each forks, and the atfork handlers are process-wide.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The tails of `m`'s request queues.
fn tails(m: &CombiningMutex<u64>) -> [usize; COMBINING_QUEUES] {
    m.request_tails()
}

/// The tail word of `m`'s global lock, without its two flag bits.
fn global_queue(m: &CombiningMutex<u64>) -> u32 {
    // SAFETY: only reads the global lock's tail word; never unlocks.
    unsafe { m.as_mutex().raw() }.raw_lock().tail_word() & !3
}

/// Starts a thread that combines on `m` once, and waits until its request
/// has entered a request queue (a tail changed).
fn queued_combine(m: &'static CombiningMutex<u64>) -> std::thread::JoinHandle<()> {
    let before = tails(m);
    let t = std::thread::spawn(move || m.combine(|n| *n += 1));
    await_state("a request to queue", || tails(m) != before);
    t
}

/// Starts `PARENT_WAITERS` threads that combine on `m` (held by the caller):
/// the first becomes its node's combiner and waits for the global lock, the
/// others queue their requests behind it.
fn parent_waiters(m: &'static CombiningMutex<u64>) -> Vec<std::thread::JoinHandle<()>> {
    let before = global_queue(m);
    let waiters: Vec<_> = (0..PARENT_WAITERS).map(|_| queued_combine(m)).collect();
    await_state("the combiner to wait for the global lock", || {
        global_queue(m) != before
    });
    waiters
}

/// In the child: the forking thread and `CHILD_THREADS - 1` new threads run
/// `CHILD_ROUNDS` closures each on `m`; true if every closure ran exactly
/// once (a non-atomic increment: a lost or repeated closure shows).
fn contend_in_child(m: &'static CombiningMutex<u64>) -> bool {
    let base = m.combine(|n| *n);
    let work = move || {
        for _ in 0..CHILD_ROUNDS {
            m.combine(|n| *n += 1);
        }
    };
    // Hold the lock until a new thread has queued a request, so that the
    // child certainly queues where the parent's requests were. (The request
    // tails alone may not show it: a new thread can get the stack of a
    // parent's thread that the child does not have, and its request the
    // very address of the ghost request at the tail. The first new request
    // heads the queue, so its thread, its node's combiner, then queues for
    // the global lock with a queue node no ghost has.)
    let guard = m.lock();
    let before = (tails(m), global_queue(m));
    let threads: Vec<_> = (1..CHILD_THREADS)
        .map(|_| std::thread::spawn(work))
        .collect();
    await_state("a child thread to queue", || {
        tails(m) != before.0 || global_queue(m) != before.1
    });
    drop(guard);
    work();
    for t in threads {
        if t.join().is_err() {
            return false;
        }
    }
    if m.combine(|n| *n) != base + CHILD_ROUNDS * CHILD_THREADS as u64 {
        eprintln!("a closure was lost or ran twice in the child");
        return false;
    }
    // Every user of the lock's queue set in the child has left (the parent's
    // threads that counted as users at the fork do not exist here): the idle
    // lock has given the set back.
    if let Some(set) = m.queue_set() {
        eprintln!("the idle lock kept its queue set in the child: {set:?}");
        return false;
    }
    true
}

/// In a child forked while every thread that combined on a lock had joined
/// its queue set (none between a claim from the pool and its binding): once
/// the child's own threads have left, no set of the pool is bound, the one
/// bound at the fork included. (The child has no other combining lock in use.)
fn pool_free_in_child() -> bool {
    let bound = <numa_spin::RawCombiningMutex>::bound_queue_sets();
    if bound != 0 {
        eprintln!("{bound} queue sets of the pool stayed bound in the child");
    }
    bound == 0
}

/// Waits for the child `pid`; true if it exited with status 0, otherwise
/// says why on stderr.
fn child_ok(pid: libc::pid_t, what: &str) -> bool {
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r != pid {
        eprintln!("{what}: waitpid failed");
        return false;
    }
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        let hung = if sig == libc::SIGALRM {
            " (SIGALRM: it hung)"
        } else {
            ""
        };
        eprintln!("{what}: the child was killed by signal {sig}{hung}");
        return false;
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        eprintln!("{what}: the child exited with status {status:#x}");
        return false;
    }
    true
}

/// In a fork's child: holds `m` while `PARENT_WAITERS` new threads combine
/// on it, forks again, and checks that the grandchild can combine on `m`
/// (its queue names requests of two generations back and of the child).
fn fork_again_in_child(m: &'static CombiningMutex<u64>) -> bool {
    let guard = m.lock();
    let waiters = parent_waiters(m);
    // SAFETY: fork in a multi-threaded process; the grandchild calls `alarm`,
    // the lock under test, `std::thread` and `_exit` (glibc's allocator is
    // fork-safe).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: a plain libc call.
        unsafe { libc::alarm(10) };
        drop(guard);
        let ok = contend_in_child(m) && pool_free_in_child();
        // SAFETY: ends the grandchild at once.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    drop(guard);
    let joined = waiters.into_iter().all(|w| w.join().is_ok());
    pid > 0 && child_ok(pid, "the grandchild") && joined
}

/// Holds `m` while `PARENT_WAITERS` threads combine on it, and `other` held
/// by a thread that then waits; forks; the parent and the child each unlock
/// `m`. The child combines on `m` from three threads and finds `other` still
/// held (its holder does not exist in the child); after the last fork it
/// forks a grandchild the same way.
fn fork_with_waiters(m: &'static CombiningMutex<u64>, other: &'static CombiningMutex<u64>) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for round in 0..FORKS {
        let guard = m.lock();
        let waiters = parent_waiters(m);
        // A thread that holds `other` across the fork.
        static HELD: AtomicBool = AtomicBool::new(false);
        static RELEASE: AtomicBool = AtomicBool::new(false);
        HELD.store(false, Ordering::SeqCst);
        RELEASE.store(false, Ordering::SeqCst);
        let holder = std::thread::spawn(move || {
            let g = other.lock();
            HELD.store(true, Ordering::SeqCst);
            while !RELEASE.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            drop(g);
        });
        await_state("the holder of the other lock", || {
            HELD.load(Ordering::SeqCst)
        });

        // SAFETY: fork in a multi-threaded process; the child calls `alarm`,
        // the locks under test, `std::thread` and `_exit` (glibc's allocator
        // is fork-safe).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: a plain libc call.
            unsafe { libc::alarm(10) };
            // The forking thread held `m` at the fork.
            drop(guard);
            let mut ok =
                contend_in_child(m) && pool_free_in_child() && other.try_combine(|_| ()).is_none();
            if round == FORKS - 1 {
                // A second generation: the child forks while its own threads
                // combine, and the grandchild must find them gone too.
                ok = ok && fork_again_in_child(m);
            }
            // SAFETY: ends the child without running the test harness's exit.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        drop(guard);
        RELEASE.store(true, Ordering::SeqCst);
        for w in waiters {
            w.join().unwrap();
        }
        holder.join().unwrap();
        assert!(
            child_ok(pid, &format!("fork {round}")),
            "fork {round}: the child failed (see above)"
        );
    }
}

/// The lock the atfork handlers lock and unlock while `ATFORK_ON` is set.
static ATFORK_LOCK: CombiningMutex<u64> = CombiningMutex::new(0);
static ATFORK_ON: AtomicBool = AtomicBool::new(false);

/// The raw lock of [`ATFORK_LOCK`], whose global lock is what `lock()` and
/// `unlock()` take and release.
fn atfork_raw() -> &'static numa_spin::RawCombiningMutex {
    // SAFETY: the handlers lock and unlock it in pairs, as a guard would.
    unsafe { ATFORK_LOCK.as_mutex().raw() }
}

/// The prepare handler: locks the library's mutex.
extern "C" fn atfork_prepare() {
    if ATFORK_ON.load(Ordering::SeqCst) {
        atfork_raw().raw_lock().acquire();
    }
}

/// The parent and child handlers: unlock it.
extern "C" fn atfork_unlock() {
    if ATFORK_ON.load(Ordering::SeqCst) {
        // SAFETY: `atfork_prepare` locked it before the fork, in this thread.
        unsafe { atfork_raw().raw_lock().release() };
    }
}

#[test]
fn combining_lock_works_in_the_child_after_a_fork_with_waiters() {
    static M: CombiningMutex<u64> = CombiningMutex::new(0);
    static OTHER: CombiningMutex<u64> = CombiningMutex::new(0);
    fork_with_waiters(&M, &OTHER);
    // The parent's own closures all ran: FORKS rounds of PARENT_WAITERS.
    assert_eq!(M.combine(|n| *n), (FORKS * PARENT_WAITERS) as u64);
}

/// The `pthread_atfork` pattern: a prepare handler that locks the lock,
/// parent and child handlers that unlock it, and forks while
/// `PARENT_WAITERS` threads keep combining on it; the child combines on it
/// from three threads.
#[test]
fn combining_lock_works_in_the_child_of_a_fork_in_atfork_handlers() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the handlers are `extern "C" fn()`s that live forever.
    let r = unsafe {
        libc::pthread_atfork(
            Some(atfork_prepare),
            Some(atfork_unlock),
            Some(atfork_unlock),
        )
    };
    assert_eq!(r, 0, "pthread_atfork failed");
    let m = &ATFORK_LOCK;
    for round in 0..FORKS {
        static STOP: AtomicBool = AtomicBool::new(false);
        STOP.store(false, Ordering::SeqCst);
        // Hold the lock while the hammering threads start, so that they
        // certainly queue requests.
        let guard = m.lock();
        let before = (tails(m), global_queue(m));
        let hammers: Vec<_> = (0..PARENT_WAITERS)
            .map(|_| {
                std::thread::spawn(move || {
                    while !STOP.load(Ordering::SeqCst) {
                        m.combine(|n| {
                            *n += 1;
                            std::thread::yield_now();
                        });
                    }
                })
            })
            .collect();
        await_state("requests and a combiner to queue", || {
            tails(m) != before.0 && global_queue(m) != before.1
        });
        drop(guard);
        // Fork while they keep combining (on 2 CPUs, each closure yields).
        ATFORK_ON.store(true, Ordering::SeqCst);
        // SAFETY: fork in a multi-threaded process; the child calls `alarm`,
        // the lock under test, `std::thread` and `_exit` (glibc's allocator
        // is fork-safe).
        let pid = unsafe { libc::fork() };
        ATFORK_ON.store(false, Ordering::SeqCst);
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: a plain libc call.
            unsafe { libc::alarm(10) };
            let ok = contend_in_child(m);
            // SAFETY: ends the child without running the test harness's exit.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        STOP.store(true, Ordering::SeqCst);
        for h in hammers {
            h.join().unwrap();
        }
        assert!(
            child_ok(pid, &format!("atfork handlers, fork {round}")),
            "atfork handlers, fork {round}: the child failed (see above)"
        );
    }
}
