//! `force_unlock` after `mem::forget(guard)`, with the public guard-state
//! constructors, including with a waiter queued on the lock (the release
//! must let it in).
#![cfg(not(numa_loom))]

use cst_mutex::lock_api::GuardSend;
use cst_mutex::{ExclusiveGuardState, Mutex, RwLock};
use std::sync::Arc;
use std::thread;

#[test]
fn mutex_force_unlock_after_forget() {
    let m = Arc::new(Mutex::new(0u32));
    std::mem::forget(m.lock());
    let t = {
        let m = m.clone();
        thread::spawn(move || *m.lock() += 1)
    };
    // SAFETY: only reads the queue's tail.
    while !unsafe { m.raw() }.has_queued_waiters() {
        thread::yield_now();
    }
    // SAFETY: this thread holds the lock (guard forgotten); no data reference lives.
    unsafe { m.force_unlock(GuardSend::new()) };
    t.join().unwrap();
    std::mem::forget(m.lock());
    // SAFETY: as above.
    unsafe { m.force_unlock_fair(GuardSend::new()) };
    assert_eq!(*m.lock(), 1);
}

#[test]
fn rwlock_force_unlock_write_after_forget() {
    let l = Arc::new(RwLock::new(0u32));
    std::mem::forget(l.write());
    let t = {
        let l = l.clone();
        thread::spawn(move || *l.write() += 1)
    };
    // SAFETY: only reads the writer mutex's queue.
    while !unsafe { l.raw() }.has_waiting_writers() {
        thread::yield_now();
    }
    // SAFETY: this thread holds the write lock (guard forgotten).
    unsafe { l.force_unlock_write(ExclusiveGuardState::new()) };
    t.join().unwrap();
    assert_eq!(*l.read(), 1);
    assert!(!l.is_locked());
}
