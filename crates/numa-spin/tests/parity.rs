//! What a parking_lot 0.13 user expects besides `Mutex`: `lock_api` re-exported,
//! `FairMutex`, `ReentrantMutex`, mapped and (feature `arc_lock`) Arc guards.
#![cfg(not(numa_loom))]

use std::cell::Cell;
use std::sync::Arc;
use std::thread;

use numa_spin::lock_api::{GetThreadId, RawMutex as _};
use numa_spin::{
    FairMutex, FairMutexGuard, MappedMutexGuard, Mutex, MutexGuard, RawThreadId, ReentrantMutex,
};

#[test]
fn lock_api_is_re_exported() {
    fn generic<R: numa_spin::lock_api::RawMutex>(m: &numa_spin::lock_api::Mutex<R, u8>) -> u8 {
        *m.lock()
    }
    assert_eq!(generic(&Mutex::new(3)), 3);
    assert_eq!(generic(&FairMutex::new(4)), 4);
}

#[test]
fn fair_mutex_unlocks_fairly_and_excludes() {
    let m = Arc::new(FairMutex::new(0u64));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 2));
                for _ in 0..2_000 {
                    *m.lock() += 1;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut g: FairMutexGuard<'_, u64> = m.lock();
    assert_eq!(*g, 8_000);
    FairMutexGuard::bump(&mut g);
    drop(g);
    // SAFETY: not held.
    assert!(!unsafe { m.raw() }.is_locked());
}

#[test]
fn reentrant_mutex_relocks_on_its_thread_only() {
    let m = Arc::new(ReentrantMutex::new(Cell::new(0)));
    let a = m.lock();
    let b = m.lock();
    b.set(1);
    assert!(m.try_lock().is_some(), "the owner relocks");
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
    assert!(!m.is_locked());
    let other = {
        let m = Arc::clone(&m);
        thread::spawn(move || m.try_lock().map(|g| g.get()))
    };
    assert_eq!(other.join().unwrap(), Some(1));
}

#[test]
fn thread_ids_differ_between_threads() {
    let here = RawThreadId.nonzero_thread_id();
    assert_eq!(here, RawThreadId.nonzero_thread_id());
    let there = thread::spawn(|| RawThreadId.nonzero_thread_id())
        .join()
        .unwrap();
    assert_ne!(here, there);
}

#[test]
fn mapped_guards() {
    let m = Mutex::new((1, 2));
    let mut second: MappedMutexGuard<'_, i32> = MutexGuard::map(m.lock(), |p| &mut p.1);
    *second += 1;
    drop(second);
    assert_eq!(*m.lock(), (1, 3));
}

#[cfg(feature = "arc_lock")]
#[test]
fn arc_guards() {
    let m = Arc::new(Mutex::new(5));
    let g: numa_spin::ArcMutexGuard<i32> = m.lock_arc();
    let t = thread::spawn(move || *g + 1);
    assert_eq!(t.join().unwrap(), 6);
    assert!(!m.is_locked());
    let r = Arc::new(ReentrantMutex::new(7));
    let g: numa_spin::ArcReentrantMutexGuard<i32> = r.lock_arc();
    assert_eq!(*g, 7);
}
