//! Test hooks (feature `test-hooks`, for numa-preload's C tests and this
//! crate's fork tests; never in a shipped build).
//!
//! [`set_after_release`]: a function called at the end of every read unlock of a
//! [`RawRwLock`](crate::RawRwLock), with the lock's address: right after the
//! releasing step, or, when that step found a writer draining the readers,
//! after the wake-up by key that follows (which reads nothing of the lock; a
//! stop before it would stall a parked writer). A test stops the thread
//! there, standing in for a preemption: another thread may then take the
//! lock, destroy and free it, and the unlock must not touch it any more (see
//! `RawRwLock::unlock_shared_word`).
//!
//! [`set_in_fork_registration`]: a function called inside the fork handlers'
//! `pthread_atfork` registration (`tests/fork_first_slow_path.rs`).

use std::sync::atomic::{AtomicUsize, Ordering};

static AFTER_RELEASE: AtomicUsize = AtomicUsize::new(0);

/// Sets (or with `None` clears) the function called at the end of each read
/// unlock (module docs). It gets the lock's address, which it must
/// not dereference (the lock may be freed by then).
pub fn set_after_release(f: Option<fn(*const ())>) {
    // Relaxed: the function pointer is the whole message.
    AFTER_RELEASE.store(f.map_or(0, |f| f as usize), Ordering::Relaxed);
}

/// Calls the hook, if one is set.
#[inline]
pub(crate) fn after_release(lock: usize) {
    // Relaxed: as in `set_after_release`.
    let a = AFTER_RELEASE.load(Ordering::Relaxed);
    if a != 0 {
        // SAFETY: `a` was stored from a `fn(*const ())` by `set_after_release`.
        let f: fn(*const ()) = unsafe { core::mem::transmute::<usize, fn(*const ())>(a) };
        f(lock as *const ());
    }
}

static IN_FORK_REGISTRATION: AtomicUsize = AtomicUsize::new(0);

/// Sets (or with `None` clears) the function called while a thread
/// registers the crate's `pthread_atfork` handlers (on a slow path, when
/// the registration at load failed), after it claimed the registration and
/// before it
/// calls `pthread_atfork`. A test stops the thread there, standing in for
/// a preemption, and forks.
pub fn set_in_fork_registration(f: Option<fn()>) {
    // Relaxed: the function pointer is the whole message.
    IN_FORK_REGISTRATION.store(f.map_or(0, |f| f as usize), Ordering::Relaxed);
}

/// Calls the registration hook, if one is set.
#[cfg(unix)]
pub(crate) fn in_fork_registration() {
    // Relaxed: as in `set_in_fork_registration`.
    let a = IN_FORK_REGISTRATION.load(Ordering::Relaxed);
    if a != 0 {
        // SAFETY: `a` was stored from a `fn()` by `set_in_fork_registration`.
        let f: fn() = unsafe { core::mem::transmute::<usize, fn()>(a) };
        f();
    }
}
