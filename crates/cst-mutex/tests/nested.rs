//! An acquisition nested in another of the same thread: a signal handler
//! that takes a lock while its thread waits for another one (crash and
//! logging handlers commonly do), four levels deep, with other waiters
//! queued behind the interrupted thread at every level. glibc's futex
//! mutexes keep no per-waiter state; these locks keep a queue node per
//! wait (on the waiter's stack) and a parking-lot record per thread, which
//! a nested wait must not reuse.
#![cfg(all(target_os = "linux", not(numa_loom)))]

use cst_mutex::RawMutex;
use lock_api::RawMutex as _;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

const LEVELS: usize = 4;
#[allow(clippy::declare_interior_mutable_const)]
const INIT: RawMutex = RawMutex::new();
static LOCKS: [RawMutex; LEVELS] = [INIT; LEVELS];
/// Handlers that started to wait for their level's lock.
static ENTERED: [AtomicUsize; LEVELS] = [const { AtomicUsize::new(0) }; LEVELS];
/// Handlers that got their level's lock and returned.
static DONE: [AtomicUsize; LEVELS] = [const { AtomicUsize::new(0) }; LEVELS];

fn signal_of(level: usize) -> libc::c_int {
    // Level 0 is the thread's own wait (no signal).
    [0, libc::SIGUSR1, libc::SIGUSR2, libc::SIGRTMIN()][level]
}

fn level_of(sig: libc::c_int) -> usize {
    (1..LEVELS).find(|&l| signal_of(l) == sig).unwrap()
}

extern "C" fn handler(sig: libc::c_int) {
    let l = level_of(sig);
    ENTERED[l].fetch_add(1, Ordering::SeqCst);
    let g = LOCKS[l].lock();
    // SAFETY: our acquisition.
    unsafe { LOCKS[l].unlock(g) };
    DONE[l].fetch_add(1, Ordering::SeqCst);
}

/// Whether threads wait in lock `l`'s queue.
fn waiting(l: usize) -> bool {
    LOCKS[l].has_queued_waiters()
}

fn wait_until(mut f: impl FnMut() -> bool) {
    while !f() {
        thread::yield_now();
    }
}

#[test]
fn nested_acquisitions_from_signal_handlers_four_levels_deep() {
    for l in 1..LEVELS {
        // SAFETY: installs a handler that only locks and unlocks a static
        // lock and bumps an atomic; no SA_RESTART needed (nothing is
        // interrupted but our own waits).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(signal_of(l), &sa, std::ptr::null_mut()), 0);
        }
    }
    // A hang fails the test (with a message) instead of hanging the suite.
    thread::spawn(|| {
        thread::sleep(std::time::Duration::from_secs(120));
        eprintln!("nested acquisitions hung for 120 s");
        std::process::abort();
    });
    for round in 0..10 {
        let guards: Vec<_> = LOCKS.iter().map(|m| m.lock()).collect();
        let base: Vec<usize> = DONE.iter().map(|d| d.load(Ordering::SeqCst)).collect();
        let entered: Vec<usize> = ENTERED.iter().map(|d| d.load(Ordering::SeqCst)).collect();
        // The thread that is interrupted at every level.
        let t = thread::spawn(|| {
            numa_topology::set_current_thread_node(Some(0));
            let g = LOCKS[0].lock();
            // SAFETY: our acquisition.
            unsafe { LOCKS[0].unlock(g) };
        });
        let tid = t.as_pthread_t();
        let mut others = Vec::new();
        for l in 0..LEVELS {
            // The thread waits at level `l`: its own wait (seen in the
            // lock's waiter counts), or a handler's (which we hold the lock
            // against; a nested wait spins and may show in no count).
            if l > 0 {
                // SAFETY: `tid` names a live thread of ours (it waits).
                assert_eq!(unsafe { libc::pthread_kill(tid, signal_of(l)) }, 0);
                wait_until(|| ENTERED[l].load(Ordering::SeqCst) == entered[l] + 1);
            } else {
                wait_until(|| waiting(l));
            }
            // Two more waiters of the same node queue behind it, one at a
            // time: each is spawned once the queue's tail has changed after
            // the one before (the nested wait of a handler queues too, so
            // a change may be the handler's).
            for _ in 0..2 {
                let before = LOCKS[l].tail_code();
                others.push(thread::spawn(move || {
                    numa_topology::set_current_thread_node(Some(0));
                    let g = LOCKS[l].lock();
                    // SAFETY: our acquisition.
                    unsafe { LOCKS[l].unlock(g) };
                }));
                wait_until(|| waiting(l) && LOCKS[l].tail_code() != before);
            }
        }
        // Release from the innermost level out: each handler returns to the
        // wait it interrupted.
        for (l, g) in guards.into_iter().enumerate().rev() {
            // SAFETY: taken above by this thread.
            unsafe { LOCKS[l].unlock(g) };
            if l > 0 {
                wait_until(|| DONE[l].load(Ordering::SeqCst) == base[l] + 1);
            }
        }
        t.join().unwrap();
        for o in others {
            o.join().unwrap();
        }
        for (l, m) in LOCKS.iter().enumerate() {
            assert!(!m.is_locked(), "round {round}: level {l} left locked");
            assert!(!waiting(l), "round {round}: level {l} has waiters left");
        }
    }
}
