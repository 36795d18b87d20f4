//! `RwLock`: upgradable reads, downgrades, recursive reads past a waiting
//! writer, timed acquisitions, and mutual exclusion under threads.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use parking_lot::{RwLock, RwLockUpgradableReadGuard, RwLockWriteGuard, const_rwlock};

#[test]
fn upgradable_read_excludes_writers_and_upgradables_not_readers() {
    let l = RwLock::new(1);
    let up = l.upgradable_read();
    assert!(l.try_read().is_some());
    assert!(l.try_write().is_none());
    assert!(l.try_upgradable_read().is_none());
    assert!(l.try_write_for(Duration::from_millis(5)).is_none());
    let r = l.read();
    let up = RwLockUpgradableReadGuard::try_upgrade_for(up, Duration::from_millis(5))
        .expect_err("a reader is inside");
    drop(r);
    let mut w = RwLockUpgradableReadGuard::upgrade(up);
    *w += 1;
    let up = RwLockWriteGuard::downgrade_to_upgradable(w);
    assert_eq!(*up, 2);
    let r = RwLockUpgradableReadGuard::downgrade(up);
    assert!(l.try_upgradable_read().is_some());
    drop(r);
    assert!(!l.is_locked());
}

#[test]
fn upgrade_waits_for_readers() {
    let l = Arc::new(RwLock::new(0));
    let r = l.read();
    let h = {
        let l = Arc::clone(&l);
        thread::spawn(move || {
            let up = l.upgradable_read();
            let mut w = RwLockUpgradableReadGuard::upgrade(up);
            *w += 1;
        })
    };
    thread::sleep(Duration::from_millis(20));
    assert_eq!(*r, 0);
    drop(r);
    h.join().unwrap();
    assert_eq!(*l.read(), 1);
}

#[test]
fn recursive_read_passes_a_waiting_writer() {
    let l = Arc::new(RwLock::new(0));
    let outer = l.read();
    let writer = {
        let l = Arc::clone(&l);
        thread::spawn(move || *l.write() += 1)
    };
    while l.try_read().is_some() {
        thread::sleep(Duration::from_millis(1));
    }
    let inner = l.read_recursive();
    drop(outer);
    assert_eq!(*inner, 0);
    drop(inner);
    writer.join().unwrap();
    assert_eq!(*l.read(), 1);
}

#[test]
fn writers_exclude_under_threads() {
    static L: RwLock<(u64, u64)> = const_rwlock((0, 0));
    let hs: Vec<_> = (0..4)
        .map(|i| {
            thread::spawn(move || {
                for _ in 0..2_000 {
                    if i % 2 == 0 {
                        let mut w = L.write();
                        w.0 += 1;
                        w.1 += 1;
                    } else {
                        let r = L.read();
                        assert_eq!(r.0, r.1);
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(*L.read(), (4_000, 4_000));
}
