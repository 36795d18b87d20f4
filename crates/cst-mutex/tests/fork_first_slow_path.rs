//! A fork while another thread makes the process's first park (a timed
//! waiter asleep outside the mutex's queue), and so registers the crate's
//! `pthread_atfork` handlers (when the registration at load failed): the
//! child gets the memory as it was mid-registration. Its own threads' first
//! parks must not wait for a registration that no thread of the child will
//! finish.
//!
//! Its own test binary: the test needs the first park of the process.
//! The binary defines `pthread_atfork` (an executable's definition comes
//! before libc's, which lives in `libc_nonshared.a` and calls
//! `__register_atfork`) and fails the calls made before `main` with
//! `ENOMEM`, so the registration at load fails. A test hook (feature
//! `test-hooks`) stops the registering thread, standing in for a preemption
//! there. The child runs under `alarm`, so a hang kills it with `SIGALRM`
//! and the parent's check fails instead of the test hanging.
#![cfg(all(
    target_os = "linux",
    target_env = "gnu",
    feature = "test-hooks",
    not(numa_loom)
))]

use cst_mutex::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::thread;
use std::time::Duration;

/// Set when the test starts: `pthread_atfork` fails before.
static MAIN_STARTED: AtomicBool = AtomicBool::new(false);

type Handler = Option<unsafe extern "C" fn()>;

unsafe extern "C" {
    /// glibc's registration, which its `pthread_atfork` calls with the
    /// caller's DSO handle.
    fn __register_atfork(
        prepare: Handler,
        parent: Handler,
        child: Handler,
        dso_handle: *mut std::ffi::c_void,
    ) -> libc::c_int;
    /// This executable's DSO handle (from `crtbegin.o`).
    static __dso_handle: u8;
}

/// glibc's `pthread_atfork`, out of memory before `main` (the registrations
/// at load).
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

/// The thread id of the thread that takes the first slow path.
static HELPER_TID: AtomicI32 = AtomicI32::new(0);
/// Set by the hook: the helper is inside the registration.
static STOPPED: AtomicBool = AtomicBool::new(false);
/// Set by the parent after the fork: the helper may go on.
static RESUME: AtomicBool = AtomicBool::new(false);
/// Set by the hook when a thread other than the helper registers (the
/// child's waiter).
static OTHER_REGISTERS: AtomicBool = AtomicBool::new(false);

/// The registration hook: stops the helper (only the helper; a thread of the
/// child that registers passes) until the parent has forked.
fn stop_the_helper() {
    // SAFETY: `gettid` has no preconditions.
    if unsafe { libc::gettid() } != HELPER_TID.load(Ordering::SeqCst) {
        OTHER_REGISTERS.store(true, Ordering::SeqCst);
        return;
    }
    STOPPED.store(true, Ordering::SeqCst);
    while !RESUME.load(Ordering::SeqCst) {
        thread::yield_now();
    }
}

#[test]
fn fork_during_the_first_slow_path_leaves_a_usable_child() {
    MAIN_STARTED.store(true, Ordering::SeqCst);
    cst_mutex::test_hooks::set_in_fork_registration(Some(stop_the_helper));
    let m = Arc::new(Mutex::new(0u64));
    let held = m.lock();
    let helper = {
        let m = m.clone();
        thread::spawn(move || {
            // SAFETY: `gettid` has no preconditions.
            HELPER_TID.store(unsafe { libc::gettid() }, Ordering::SeqCst);
            // The lock is held: the timed waiter polls, then sleeps outside
            // the queue, and its first park registers the fork handlers.
            *m.try_lock_for(Duration::from_secs(60)).expect("timed out") += 1;
        })
    };
    while !STOPPED.load(Ordering::SeqCst) {
        thread::yield_now();
    }
    // SAFETY: the child only spawns a thread that locks, unlocks, joins it
    // and `_exit`s; it never returns into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: plain libc call in the child.
        unsafe { libc::alarm(30) };
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // A thread of the child waits for the lock we still hold: its
            // first park starts with the registration.
            let waiter = {
                let m = m.clone();
                thread::spawn(move || {
                    *m.try_lock_for(Duration::from_secs(60)).expect("timed out") += 1;
                })
            };
            while !OTHER_REGISTERS.load(Ordering::SeqCst) {
                thread::yield_now();
            }
            drop(held);
            waiter.join().unwrap();
            assert_eq!(*m.lock(), 1);
        }))
        .is_ok();
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 3 }) };
    }
    RESUME.store(true, Ordering::SeqCst);
    drop(held);
    helper.join().unwrap();
    assert_eq!(*m.lock(), 1);
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's waiter did not finish (wait status {status:#x}; signal 14 is \
         SIGALRM: they hung)"
    );
}
