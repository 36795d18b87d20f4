//! A `fork(2)` whose prepare handlers run while another thread takes the
//! process's first slow path.
//!
//! glibc runs the prepare handlers without its atfork lock held, so a
//! `pthread_atfork` call from another thread meanwhile succeeds, but the
//! fork under way runs none of the new handlers (glibc 2.36,
//! `__run_prefork_handlers`: handlers registered after its count are
//! skipped). Had the crate registered its handlers on the first slow path,
//! the waiter that parks then would be a live waiter of the child's lock,
//! and the child's own waiter would wait behind it for ever. The crate
//! registers them when the program is loaded, so the child forgets it.
//!
//! Its own test binary: the scenario needs the first slow path of the
//! process. The child checks the fork generation (feature `test-hooks`),
//! then contends for the lock under `alarm`: a hang ends it with `SIGALRM`,
//! and the parent checks its exit status.
#![cfg(all(
    target_os = "linux",
    target_env = "gnu",
    feature = "test-hooks",
    not(numa_loom)
))]

use cst_mutex::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// The lock the forking thread holds across the fork.
static LOCK: Mutex<u64> = Mutex::new(0);
/// Acquisitions per thread of the child.
const ROUNDS: u64 = 10_000;
/// Set by the prepare handler while the fork is under way.
static IN_PREPARE: AtomicBool = AtomicBool::new(false);
/// Set by the test once a waiter has queued: the prepare handler returns.
static WAITING: AtomicBool = AtomicBool::new(false);

/// Waits until `cond` holds, for at most 10 s (the limit only turns a hang
/// into a failure).
fn await_state(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out: {what}"
        );
        thread::yield_now();
    }
}

/// The test's prepare handler: holds the fork until a waiter has queued.
extern "C" fn prepare() {
    IN_PREPARE.store(true, Ordering::SeqCst);
    while !WAITING.load(Ordering::SeqCst) {
        thread::yield_now();
    }
}

#[test]
fn a_first_slow_path_during_a_forks_prepare_handlers_leaves_a_usable_child() {
    // SAFETY: `prepare` is an `extern "C" fn()` that lives for ever.
    let r = unsafe { libc::pthread_atfork(Some(prepare), None, None) };
    assert_eq!(r, 0, "pthread_atfork failed");
    let forker = thread::spawn(|| {
        let held = LOCK.lock();
        // SAFETY: the other threads are the test's, waiting on atomics, and
        // the waiter, waiting for `LOCK` (the prepare handler returns only
        // then); neither is inside an allocation.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: plain libc call.
            unsafe { libc::alarm(10) };
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // The child handler ran: the parent's waiter, queued in the
                // lock's state, is taken for gone.
                assert_eq!(cst_mutex::fork_generation(), 1);
                // The unlock finds it there; then a thread of the child
                // contends with the forking thread.
                drop(held);
                let work = || {
                    for _ in 0..ROUNDS {
                        *LOCK.lock() += 1;
                    }
                };
                let t = thread::spawn(work);
                work();
                t.join().unwrap();
                assert_eq!(*LOCK.lock(), 2 * ROUNDS);
            }))
            .is_ok();
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        drop(held);
        pid
    });
    await_state("the fork's prepare handlers", || {
        IN_PREPARE.load(Ordering::SeqCst)
    });
    // The process's first slow path: a thread that finds `LOCK` held.
    let waiter = thread::spawn(|| *LOCK.lock() += 1);
    await_state("the waiter to queue", || {
        // SAFETY: only reads the lock's queue tail.
        unsafe { LOCK.raw() }.has_queued_waiters()
    });
    WAITING.store(true, Ordering::SeqCst);
    let pid = forker.join().unwrap();
    assert!(pid > 0, "fork failed");
    waiter.join().unwrap();
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed (wait status {status:#x}: exit status 1 if its fork \
         generation was not advanced or a thread failed; signal 14 is SIGALRM: \
         its threads hung behind the parent's waiter)"
    );
}
