//! A `fork(2)` whose prepare handlers run while another thread takes the
//! process's first slow path.
//!
//! glibc runs the prepare handlers without its atfork lock held, so a
//! `pthread_atfork` call from another thread meanwhile succeeds, but the
//! fork under way runs none of the new handlers (glibc 2.36,
//! `__run_prefork_handlers`: handlers registered after its count are
//! skipped). Had numa-spin registered its child handler on the first slow
//! path, the waiter that queues then would stay in the child's queue as a
//! live waiter, and the child's threads would queue behind it for ever.
//! numa-spin registers the handler when the program is loaded, so the child
//! treats that waiter as gone.
//!
//! Its own test binary: the scenario needs the first slow path of the
//! process. The child runs under `alarm`: a hang ends it with `SIGALRM`, and
//! the parent checks its exit status.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

use lock_api::RawMutex as _;
use numa_spin::RawMutex;
use std::sync::atomic::{AtomicBool, Ordering};

mod common;
use common::await_state;

/// The lock the forking thread holds across the fork.
static LOCK: RawMutex = RawMutex::INIT;
/// Set by the prepare handler while the fork is under way.
static IN_PREPARE: AtomicBool = AtomicBool::new(false);
/// Set by the test once a waiter has queued: the prepare handler returns.
static QUEUED: AtomicBool = AtomicBool::new(false);

/// The queue's last node (the tail word without its flag bits).
fn queue() -> u32 {
    LOCK.tail_word() & !7
}

/// The test's prepare handler: holds the fork until a waiter has queued.
extern "C" fn prepare() {
    IN_PREPARE.store(true, Ordering::SeqCst);
    while !QUEUED.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
}

/// The child: releases `LOCK` (the forking thread held it), takes it again
/// while a new thread queues (behind the parent's waiter, which does not
/// exist here), and lets it through. Exits 0 if the new thread got the lock.
fn child() -> ! {
    // SAFETY: the forking thread held `LOCK` at the fork.
    unsafe { LOCK.release() };
    LOCK.acquire();
    let before = queue();
    let t = std::thread::spawn(|| {
        LOCK.acquire();
        // SAFETY: acquired above.
        unsafe { LOCK.release() };
    });
    await_state("the child's thread to queue", || queue() != before);
    // SAFETY: acquired above.
    unsafe { LOCK.release() };
    let ok = t.join().is_ok();
    // SAFETY: ends the child at once.
    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
}

#[test]
fn a_first_slow_path_during_a_forks_prepare_handlers_leaves_a_usable_child() {
    // SAFETY: `prepare` is an `extern "C" fn()` that lives for ever.
    let r = unsafe { libc::pthread_atfork(Some(prepare), None, None) };
    assert_eq!(r, 0, "pthread_atfork failed");
    let forker = std::thread::spawn(|| {
        LOCK.acquire();
        // SAFETY: the other threads are the test's, waiting on atomics, and
        // the waiter, queued on `LOCK` (the prepare handler returns only
        // then); neither is inside an allocation.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: plain libc call.
            unsafe { libc::alarm(10) };
            child();
        }
        // SAFETY: acquired above.
        unsafe { LOCK.release() };
        pid
    });
    await_state("the fork's prepare handlers", || {
        IN_PREPARE.load(Ordering::SeqCst)
    });
    // The process's first slow path: a thread that finds `LOCK` held.
    let before = queue();
    let waiter = std::thread::spawn(|| {
        LOCK.acquire();
        // SAFETY: acquired above.
        unsafe { LOCK.release() };
    });
    await_state("the waiter to queue", || queue() != before);
    QUEUED.store(true, Ordering::SeqCst);
    let pid = forker.join().unwrap();
    assert!(pid > 0, "fork failed");
    waiter.join().unwrap();
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    if libc::WIFSIGNALED(status) {
        panic!(
            "the child was killed by signal {}{}",
            libc::WTERMSIG(status),
            if libc::WTERMSIG(status) == libc::SIGALRM {
                " (SIGALRM: its thread hung behind the parent's waiter)"
            } else {
                ""
            }
        );
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child exited with status {status:#x}"
    );
}
