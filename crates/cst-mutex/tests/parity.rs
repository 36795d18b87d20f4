//! What a parking_lot 0.13 user expects besides `Mutex`/`RwLock`/`Condvar`:
//! `lock_api` re-exported, `FairMutex`, `ReentrantMutex`, (feature `arc_lock`)
//! Arc guards.
#![cfg(not(numa_loom))]

use std::cell::Cell;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use cst_mutex::lock_api::{GetThreadId, RawMutex as _};
use cst_mutex::{FairMutex, FairMutexGuard, Mutex, RawThreadId, ReentrantMutex};

#[test]
fn lock_api_is_re_exported() {
    fn generic<R: cst_mutex::lock_api::RawMutex>(m: &cst_mutex::lock_api::Mutex<R, u8>) -> u8 {
        *m.lock()
    }
    assert_eq!(generic(&Mutex::new(3)), 3);
    assert_eq!(generic(&FairMutex::new(4)), 4);
}

#[test]
fn fair_mutex_excludes_and_times_out() {
    let m = Arc::new(FairMutex::new(0u64));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 2));
                for _ in 0..1_000 {
                    *m.lock() += 1;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut g: FairMutexGuard<'_, u64> = m.lock();
    assert_eq!(*g, 4_000);
    assert!(m.try_lock_for(Duration::from_millis(2)).is_none());
    FairMutexGuard::bump(&mut g);
    drop(g);
    // SAFETY: only reading the state.
    assert!(!unsafe { m.raw() }.is_locked());
}

#[test]
fn reentrant_mutex_relocks_on_its_thread_only() {
    let m = Arc::new(ReentrantMutex::new(Cell::new(0)));
    let a = m.lock();
    let b = m.lock();
    b.set(1);
    let other = {
        let m = Arc::clone(&m);
        thread::spawn(move || m.try_lock().is_none())
    };
    assert!(
        other.join().unwrap(),
        "another thread got a held reentrant mutex"
    );
    drop(a);
    drop(b);
    let other = {
        let m = Arc::clone(&m);
        thread::spawn(move || m.try_lock().map(|g| g.get()))
    };
    assert_eq!(other.join().unwrap(), Some(1));
    let there = thread::spawn(|| RawThreadId.nonzero_thread_id())
        .join()
        .unwrap();
    assert_ne!(RawThreadId.nonzero_thread_id(), there);
}

#[cfg(feature = "arc_lock")]
#[test]
fn arc_guards() {
    let m = Arc::new(Mutex::new(5));
    let g: cst_mutex::ArcMutexGuard<i32> = m.lock_arc();
    assert_eq!(thread::spawn(move || *g + 1).join().unwrap(), 6);
    let l = Arc::new(cst_mutex::RwLock::new(1));
    let r: cst_mutex::ArcRwLockReadGuard<i32> = l.read_arc();
    assert_eq!(*r, 1);
    drop(r);
    let mut w: cst_mutex::ArcRwLockWriteGuard<i32> = l.write_arc();
    *w = 2;
    drop(w);
    let u: cst_mutex::ArcRwLockUpgradableReadGuard<i32> = l.upgradable_read_arc();
    assert_eq!(*u, 2);
    let r = Arc::new(ReentrantMutex::new(7));
    let g: cst_mutex::ArcReentrantMutexGuard<i32> = r.lock_arc();
    assert_eq!(*g, 7);
}
