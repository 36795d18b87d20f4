//! The lock_api 0.4 implementations (feature `lock_api_04`), through lock_api 0.4's
//! own wrappers and generic code written against lock_api 0.4.
#![cfg(all(feature = "lock_api_04", not(numa_loom)))]

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use cst_mutex::lock_api_04::lock_api;
use lock_api::{RawRwLock as _, RawRwLockUpgrade as _};

/// Generic lock_api 0.4 code: `threads` threads add 1 `iters` times each.
fn hammer_mutex<R: lock_api::RawMutex + Send + Sync + 'static>(threads: usize, iters: usize) {
    let m = Arc::new(lock_api::Mutex::<R, usize>::new(0));
    let hs: Vec<_> = (0..threads)
        .map(|i| {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 2));
                for _ in 0..iters {
                    *m.lock() += 1;
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(*m.lock(), threads * iters);
}

/// Generic lock_api 0.4 code: writers add to both halves, readers check they match.
fn hammer_rwlock<R: lock_api::RawRwLockUpgradeDowngrade + Send + Sync + 'static>() {
    let l = Arc::new(lock_api::RwLock::<R, (u64, u64)>::new((0, 0)));
    let hs: Vec<_> = (0..4)
        .map(|i| {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 2));
                for n in 0..1_000 {
                    match (i + n) % 4 {
                        0 => {
                            let mut w = l.write();
                            w.0 += 1;
                            w.1 += 1;
                        }
                        1 => {
                            let up = l.upgradable_read();
                            assert_eq!(up.0, up.1);
                            let mut w = lock_api::RwLockUpgradableReadGuard::upgrade(up);
                            w.0 += 1;
                            w.1 += 1;
                            let r = lock_api::RwLockWriteGuard::downgrade(w);
                            assert_eq!(r.0, r.1);
                        }
                        _ => {
                            let a = l.read();
                            let b = l.try_read(); // may fail while a writer waits
                            assert_eq!(a.0, a.1);
                            drop(a); // released out of order on purpose
                            if let Some(b) = b {
                                assert_eq!(b.0, b.1);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let r = l.read();
    assert_eq!(r.0, r.1);
    assert_eq!(r.0, 2_000);
}

#[test]
fn mutex_through_lock_api_04() {
    hammer_mutex::<cst_mutex::RawMutex>(4, 2_000);
    hammer_mutex::<cst_mutex::RawFairMutex>(4, 500);
}

#[test]
fn rwlock_through_lock_api_04() {
    hammer_rwlock::<cst_mutex::RawRwLock>();
    let raw = <cst_mutex::RawRwLock as lock_api::RawRwLock>::INIT;
    assert!(!raw.is_locked());
}

#[test]
fn timed_and_fair_through_lock_api_04() {
    let m = cst_mutex::lock_api_04::Mutex::new(1);
    let g = m.lock();
    assert!(m.try_lock_for(Duration::from_millis(5)).is_none());
    lock_api::MutexGuard::unlock_fair(g);
    assert!(m.try_lock_for(Duration::from_millis(5)).is_some());

    let l = cst_mutex::lock_api_04::RwLock::new(1);
    let w = l.write();
    assert!(l.try_read_for(Duration::from_millis(5)).is_none());
    assert!(
        l.try_upgradable_read_for(Duration::from_millis(5))
            .is_none()
    );
    lock_api::RwLockWriteGuard::unlock_fair(w);
    let r = l.try_read_for(Duration::from_millis(5)).expect("free");
    let up = l
        .try_upgradable_read()
        .expect("readers allow one upgradable");
    let up = lock_api::RwLockUpgradableReadGuard::try_upgrade_for(up, Duration::from_millis(5))
        .expect_err("a reader is inside");
    drop(r);
    let w = lock_api::RwLockUpgradableReadGuard::try_upgrade(up).expect("no reader left");
    drop(w);
    assert!(!l.is_locked());
}

#[test]
fn forgotten_read_guard_then_force_unlock_read() {
    let l = cst_mutex::lock_api_04::RwLock::new(5);
    std::mem::forget(l.read());
    assert!(l.try_write().is_none());
    // SAFETY: this thread logically holds the read lock whose guard was forgotten.
    unsafe { l.force_unlock_read() };
    assert!(l.try_write().is_some());
    // SAFETY: as above for the raw lock.
    let raw = unsafe { l.raw() };
    raw.lock_shared();
    raw.lock_shared();
    // SAFETY: two read locks taken just above on this thread.
    unsafe {
        raw.unlock_shared();
        raw.unlock_shared();
    }
    assert!(!raw.is_locked());
    raw.lock_upgradable();
    // SAFETY: the upgradable lock taken just above.
    unsafe { raw.unlock_upgradable() };
}

#[test]
fn reentrant_mutex_through_lock_api_04() {
    let m = cst_mutex::lock_api_04::ReentrantMutex::new(3);
    let a = m.lock();
    let b = m.lock();
    assert_eq!(*a + *b, 6);
}

#[test]
#[should_panic(expected = "holds no read lock")]
fn unlock_shared_without_a_read_lock_panics() {
    let raw = <cst_mutex::RawRwLock as lock_api::RawRwLock>::INIT;
    // SAFETY: a contract violation on purpose: this thread holds no read lock.
    // The implementation detects it before touching the lock.
    unsafe { raw.unlock_shared() };
}

#[test]
fn recursive_read_passes_a_waiting_writer() {
    let l = Arc::new(cst_mutex::lock_api_04::RwLock::new(0u32));
    let outer = l.read();
    let writer = {
        let l = Arc::clone(&l);
        thread::spawn(move || *l.write() += 1)
    };
    // Wait until the writer has announced itself: new plain readers are refused.
    while l.try_read().is_some() {
        thread::sleep(Duration::from_millis(1));
    }
    assert!(l.try_read_recursive().is_some());
    let inner = l.read_recursive();
    let timed = l
        .try_read_recursive_for(Duration::from_millis(1))
        .expect("this thread holds a read lock");
    // Released out of order: the lock stays read-locked until the last one.
    drop(outer);
    assert!(!writer.is_finished());
    drop(timed);
    assert_eq!(*inner, 0);
    drop(inner);
    writer.join().unwrap();
    assert_eq!(*l.read_recursive(), 1);
    assert!(!l.is_locked());
}

/// parking_lot 0.12's rule: `read_recursive` succeeds without blocking while
/// another thread holds a read lock, even past a waiting writer (which still
/// gets in once every reader has left).
#[test]
fn recursive_read_joins_another_threads_read_past_a_waiting_writer() {
    let l = Arc::new(cst_mutex::lock_api_04::RwLock::new(0u32));
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let reader = {
        let l = Arc::clone(&l);
        thread::spawn(move || {
            let g = l.read();
            held_tx.send(()).unwrap();
            release_rx.recv().unwrap();
            drop(g);
        })
    };
    held_rx.recv().unwrap();
    let writer = {
        let l = Arc::clone(&l);
        thread::spawn(move || *l.write() += 1)
    };
    while l.try_read().is_some() {
        thread::sleep(Duration::from_millis(1));
    }
    // This thread holds nothing; the other thread's read lets it in.
    let joined = l
        .try_read_recursive()
        .expect("another thread holds a read lock");
    assert_eq!(*joined, 0);
    release_tx.send(()).unwrap();
    reader.join().unwrap();
    assert!(
        !writer.is_finished(),
        "the writer waits for the joined reader"
    );
    drop(joined);
    writer.join().unwrap();
    assert_eq!(*l.read(), 1);
    // With no reader inside, a recursive read is an ordinary one.
    let w = l.write();
    assert!(l.try_read_recursive().is_none());
    drop(w);
}
