//! A `fork(2)` while another thread registers numa-spin's `pthread_atfork`
//! child handler (the first slow path of the process does, once, when the
//! registration at load failed).
//!
//! The child of that fork has no thread inside the registration, and the
//! handler may not be registered there (the registering thread had not
//! reached `pthread_atfork` when its process forked). The child's own slow
//! paths must then register it, or a fork of the child leaves its waiters
//! in the grandchild's queues unrecognized, and the grandchild's threads
//! wait behind them for ever.
//!
//! The test binary defines `pthread_atfork` (an executable's definition
//! comes before libc's, which lives in `libc_nonshared.a` and calls
//! `__register_atfork`). It fails the calls made before `main` with
//! `ENOMEM`, so the registration at load fails and the slow path
//! registers; the registering thread stops there until another
//! thread has forked, standing in for a preemption at that point, then
//! registers through `__register_atfork`. The child holds a lock while a new
//! thread queues for it, and forks; in the grandchild a thread queues behind
//! the child's waiter, which does not exist there. Every process runs under
//! an alarm: a hang ends it with `SIGALRM`, and its parent checks its exit
//! status (the child's alarm is longer, so that it reports the grandchild).
#![cfg(all(target_os = "linux", target_env = "gnu"))]

use lock_api::RawMutex as _;
use numa_spin::RawMutex;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

mod common;
use common::await_state;

/// The lock the child and the grandchild contend for (untouched in the
/// parent).
static LOCK: RawMutex = RawMutex::INIT;
/// The lock whose contention in the parent makes the first slow path.
static TRIGGER: RawMutex = RawMutex::INIT;

/// Set when the test starts: `pthread_atfork` fails before.
static MAIN_STARTED: AtomicBool = AtomicBool::new(false);
/// Set by the test: the next `pthread_atfork` call waits for a fork.
static ARMED: AtomicBool = AtomicBool::new(false);
/// Set by `pthread_atfork` when it has been called and waits.
static FORK_NOW: AtomicBool = AtomicBool::new(false);
/// The child's PID, once the forking thread has forked.
static CHILD: AtomicI32 = AtomicI32::new(0);

type Handler = Option<unsafe extern "C" fn()>;

unsafe extern "C" {
    /// glibc's registration, which its `pthread_atfork` calls with the
    /// caller's DSO handle.
    fn __register_atfork(
        prepare: Handler,
        parent: Handler,
        child: Handler,
        dso_handle: *mut c_void,
    ) -> libc::c_int;
    /// This executable's DSO handle (from `crtbegin.o`).
    static __dso_handle: u8;
}

/// glibc's `pthread_atfork`, out of memory before `main` (the registration
/// at load), and stopped once (when [`ARMED`]) until another thread has
/// forked.
///
/// # Safety
/// As `pthread_atfork(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_atfork(
    prepare: Handler,
    parent: Handler,
    child: Handler,
) -> libc::c_int {
    if !MAIN_STARTED.load(Ordering::SeqCst) {
        return libc::ENOMEM;
    }
    if ARMED.swap(false, Ordering::SeqCst) {
        FORK_NOW.store(true, Ordering::SeqCst);
        while CHILD.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
    }
    // SAFETY: glibc's own `pthread_atfork` is this call; `__dso_handle` is
    // this executable's handle, whose code the handlers are.
    unsafe {
        __register_atfork(
            prepare,
            parent,
            child,
            (&raw const __dso_handle).cast_mut().cast(),
        )
    }
}

/// The tail word without its flag bits: the queue's last node.
fn queue() -> u32 {
    LOCK.tail_word() & !7
}

/// Starts a thread that takes [`LOCK`] once (the caller holds it), and waits
/// until it has entered the queue.
fn queued_waiter() -> std::thread::JoinHandle<()> {
    let before = queue();
    let t = std::thread::spawn(|| {
        LOCK.acquire();
        // SAFETY: acquired above.
        unsafe { LOCK.release() };
    });
    await_state("a waiter to enter the queue", || queue() != before);
    t
}

/// Waits for the child `pid`: `Ok` if it exited with status 0, else what
/// ended it.
fn child_status(pid: libc::pid_t) -> Result<(), String> {
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r != pid {
        Err("waitpid failed".into())
    } else if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        Err(format!(
            "killed by signal {sig}{}",
            if sig == libc::SIGALRM {
                " (SIGALRM: it hung)"
            } else {
                ""
            }
        ))
    } else if libc::WEXITSTATUS(status) != 0 {
        Err(format!("exit status {}", libc::WEXITSTATUS(status)))
    } else {
        Ok(())
    }
}

/// The grandchild: releases [`LOCK`] (the forking thread held it), takes it
/// again and lets a new thread queue behind the child's waiter, a ghost here.
fn grandchild() -> ! {
    // SAFETY: the forking thread held `LOCK` at the fork.
    unsafe { LOCK.release() };
    LOCK.acquire();
    let t = queued_waiter();
    // SAFETY: acquired above.
    unsafe { LOCK.release() };
    let ok = t.join().is_ok();
    // SAFETY: ends the grandchild at once.
    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
}

/// The child: the thread that registered in the parent does not exist here.
/// Holds [`LOCK`] while a new thread queues for it (its slow path registers
/// the handler), forks, and checks the grandchild.
fn child() -> ! {
    LOCK.acquire();
    let waiter = queued_waiter();
    // SAFETY: no other thread of this process is inside an allocation or a
    // lock the grandchild needs: the waiter is queued on `LOCK`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: plain libc call.
        unsafe { libc::alarm(10) };
        grandchild();
    }
    // SAFETY: acquired above.
    unsafe { LOCK.release() };
    // The exit status: 0, or 1 if the child's waiter failed, or 2 plus the
    // signal that ended the grandchild, or 3 if the grandchild failed.
    let code = if pid <= 0 || waiter.join().is_err() {
        1
    } else {
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid && libc::WIFSIGNALED(status) {
            2 + libc::WTERMSIG(status)
        } else if r == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            0
        } else {
            3
        }
    };
    // SAFETY: ends the child at once.
    unsafe { libc::_exit(code) }
}

#[test]
fn a_fork_during_the_handler_registration_leaves_a_child_that_registers() {
    MAIN_STARTED.store(true, Ordering::SeqCst);
    ARMED.store(true, Ordering::SeqCst);
    let forker = std::thread::spawn(|| {
        while !FORK_NOW.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // SAFETY: the other threads are the registering one, stopped in
        // `pthread_atfork` outside any allocation, and the test's main
        // thread, waiting on a lock of this crate.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: plain libc call. Longer than the grandchild's, so a
            // hang there is reported by the child's exit status.
            unsafe { libc::alarm(20) };
            child();
        }
        assert!(pid > 0, "fork failed");
        CHILD.store(pid, Ordering::SeqCst);
        pid
    });
    // The process's first slow path: a thread that finds `TRIGGER` held.
    TRIGGER.acquire();
    let before = TRIGGER.tail_word() & !7;
    let registering = std::thread::spawn(|| {
        TRIGGER.acquire();
        // SAFETY: acquired above.
        unsafe { TRIGGER.release() };
    });
    let pid = forker.join().unwrap();
    await_state("the registering thread to queue", || {
        TRIGGER.tail_word() & !7 != before
    });
    // SAFETY: acquired above.
    unsafe { TRIGGER.release() };
    registering.join().unwrap();
    if let Err(e) = child_status(pid) {
        panic!(
            "the child failed: {e} (exit status {} is SIGALRM in the grandchild: it hung behind a waiter of the child)",
            2 + libc::SIGALRM
        );
    }
}
