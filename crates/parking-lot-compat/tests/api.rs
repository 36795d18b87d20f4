//! Every public item of parking_lot 0.12.5, used the way parking_lot's users
//! use it: if this file compiles against the real parking_lot 0.12 it must
//! compile here (and it does run here).

use std::cell::RefCell;
use std::time::{Duration, Instant};

use parking_lot::lock_api::{
    GetThreadId, RawMutex as _, RawMutexFair, RawMutexTimed, RawRwLockDowngrade, RawRwLockFair,
    RawRwLockRecursive, RawRwLockRecursiveTimed, RawRwLockTimed, RawRwLockUpgrade,
    RawRwLockUpgradeDowngrade, RawRwLockUpgradeFair, RawRwLockUpgradeTimed,
};
use parking_lot::{
    Condvar, FairMutex, FairMutexGuard, MappedFairMutexGuard, MappedMutexGuard,
    MappedReentrantMutexGuard, MappedRwLockReadGuard, MappedRwLockWriteGuard, Mutex, MutexGuard,
    Once, OnceState, RawFairMutex, RawMutex, RawRwLock, RawThreadId, ReentrantMutex,
    ReentrantMutexGuard, RwLock, RwLockReadGuard, RwLockUpgradableReadGuard, RwLockWriteGuard,
    WaitTimeoutResult, const_fair_mutex, const_mutex, const_reentrant_mutex, const_rwlock,
};

/// The raw types implement the lock_api 0.4 traits parking_lot's implement.
#[test]
fn raw_traits() {
    fn mutex<R: RawMutexFair + RawMutexTimed<Duration = Duration, Instant = Instant>>() {}
    fn rwlock<
        R: RawRwLockFair
            + RawRwLockDowngrade
            + RawRwLockTimed<Duration = Duration, Instant = Instant>
            + RawRwLockRecursive
            + RawRwLockRecursiveTimed
            + RawRwLockUpgrade
            + RawRwLockUpgradeFair
            + RawRwLockUpgradeDowngrade
            + RawRwLockUpgradeTimed,
    >() {
    }
    fn thread_id<G: GetThreadId>() {}
    fn send_sync<T: Send + Sync>() {}
    mutex::<RawMutex>();
    mutex::<RawFairMutex>();
    rwlock::<RawRwLock>();
    thread_id::<RawThreadId>();
    send_sync::<Mutex<u8>>();
    send_sync::<FairMutex<u8>>();
    send_sync::<RwLock<u8>>();
    send_sync::<ReentrantMutex<u8>>();
    send_sync::<Condvar>();
    send_sync::<Once>();

    let raw = <RawMutex as parking_lot::lock_api::RawMutex>::INIT;
    raw.lock();
    assert!(raw.is_locked());
    // SAFETY: locked just above.
    unsafe { raw.unlock_fair() };
    assert!(raw.try_lock_for(Duration::from_millis(1)));
    // SAFETY: locked just above.
    unsafe { raw.unlock() };
}

/// Mutex guards are `Send` with every backend (parking_lot: with `send_guard`).
/// RwLock guards are not, even with `send_guard` (see the crate docs).
#[test]
fn mutex_guards_are_send() {
    fn assert_send<T: Send>() {}
    assert_send::<MutexGuard<'static, ()>>();
    assert_send::<MappedMutexGuard<'static, ()>>();
    assert_send::<FairMutexGuard<'static, ()>>();
    assert_send::<MappedFairMutexGuard<'static, ()>>();
}

#[test]
fn mutex_and_guards() {
    let m = Mutex::new((1, 2));
    {
        let g: MutexGuard<'_, (i32, i32)> = m.lock();
        let mut mapped: MappedMutexGuard<'_, i32> = MutexGuard::map(g, |p| &mut p.0);
        *mapped += 10;
    }
    assert_eq!(m.lock().0, 11);
    assert!(m.try_lock().is_some());
    assert!(m.try_lock_for(Duration::from_millis(1)).is_some());
    assert!(m.try_lock_until(Instant::now()).is_some());
    let g = m.lock();
    assert!(m.is_locked() && m.try_lock().is_none());
    MutexGuard::unlock_fair(g);
    let mut g = m.lock();
    MutexGuard::bump(&mut g);
    MutexGuard::unlocked(&mut g, || assert!(!m.is_locked()));
    drop(g);
    let mut m = m;
    m.get_mut().1 = 3;
    assert_eq!(m.into_inner(), (11, 3));
    let d: Mutex<Vec<u8>> = Mutex::default();
    assert!(format!("{d:?}").contains("Mutex"));
    let f: Mutex<u8> = 5.into();
    assert_eq!(*f.lock(), 5);
}

#[test]
fn fair_mutex_and_guards() {
    let m = FairMutex::new([1, 2]);
    let g: FairMutexGuard<'_, [i32; 2]> = m.lock();
    let mut mapped: MappedFairMutexGuard<'_, i32> = FairMutexGuard::map(g, |a| &mut a[1]);
    *mapped = 5;
    drop(mapped);
    assert_eq!(*m.lock(), [1, 5]);
    assert!(m.try_lock_for(Duration::from_millis(1)).is_some());
}

#[test]
fn reentrant_mutex_and_guards() {
    let m = ReentrantMutex::new(RefCell::new(vec![1]));
    let a: ReentrantMutexGuard<'_, RefCell<Vec<i32>>> = m.lock();
    let b = m.lock();
    b.borrow_mut().push(2);
    let mapped: MappedReentrantMutexGuard<'_, RefCell<Vec<i32>>> =
        ReentrantMutexGuard::map(b, |c| c);
    assert_eq!(a.borrow().len(), 2);
    drop(mapped);
    assert!(m.is_owned_by_current_thread());
    drop(a);
    assert!(!m.is_locked());
    assert!(m.try_lock_for(Duration::from_millis(1)).is_some());
}

#[test]
fn rwlock_and_guards() {
    let l = RwLock::new((1, 2));
    {
        let r: RwLockReadGuard<'_, (i32, i32)> = l.read();
        let r2 = l.read_recursive();
        let mapped: MappedRwLockReadGuard<'_, i32> = RwLockReadGuard::map(r, |p| &p.1);
        assert_eq!(*mapped + r2.0, 3);
    }
    {
        let w: RwLockWriteGuard<'_, (i32, i32)> = l.write();
        let mut mapped: MappedRwLockWriteGuard<'_, i32> = RwLockWriteGuard::map(w, |p| &mut p.0);
        *mapped = 4;
    }
    let w = l.write();
    let r = RwLockWriteGuard::downgrade(w);
    assert_eq!(r.0, 4);
    drop(r);
    let w = l.write();
    let up: RwLockUpgradableReadGuard<'_, (i32, i32)> =
        RwLockWriteGuard::downgrade_to_upgradable(w);
    let r = l
        .try_read()
        .expect("readers share with an upgradable reader");
    drop(r);
    let up = RwLockUpgradableReadGuard::try_upgrade(up)
        .map(RwLockWriteGuard::downgrade_to_upgradable)
        .unwrap();
    let r = RwLockUpgradableReadGuard::downgrade(up);
    drop(r);
    assert!(l.try_read_for(Duration::from_millis(1)).is_some());
    assert!(l.try_write_until(Instant::now()).is_some());
    assert!(
        l.try_upgradable_read_for(Duration::from_millis(1))
            .is_some()
    );
    assert!(l.try_read_recursive_for(Duration::from_millis(1)).is_some());
    let w = l.write();
    RwLockWriteGuard::unlock_fair(w);
    assert!(!l.is_locked());
    let d: RwLock<String> = RwLock::default();
    assert!(format!("{d:?}").contains("RwLock"));
    assert_eq!(l.into_inner(), (4, 2));
}

#[test]
fn condvar_and_result() {
    let m = Mutex::new(0);
    let cv = Condvar::default();
    let mut g = m.lock();
    let r: WaitTimeoutResult = cv.wait_for(&mut g, Duration::from_millis(1));
    assert!(r.timed_out());
    assert!(cv.wait_until(&mut g, Instant::now()).timed_out());
    assert!(
        cv.wait_while_for(&mut g, |v| *v == 0, Duration::from_millis(1))
            .timed_out()
    );
    assert!(
        cv.wait_while_until(&mut g, |v| *v == 0, Instant::now())
            .timed_out()
    );
    cv.wait_while(&mut g, |v| *v != 0);
    assert!(!cv.notify_one());
    assert_eq!(cv.notify_all(), 0);
    assert_eq!(format!("{cv:?}"), "Condvar { .. }");
    let copy = r;
    assert_eq!(r, copy);
}

#[test]
fn once_and_state() {
    let o = Once::new();
    assert_eq!(o.state(), OnceState::New);
    o.call_once_force(|s| assert!(!s.poisoned() && !s.done()));
    assert_eq!(o.state(), OnceState::Done);
    assert!(o.state().done());
    let _ = OnceState::InProgress;
    let _ = OnceState::Poisoned;
    assert!(format!("{o:?}").contains("Done"));
}

#[test]
fn const_constructors() {
    static M: Mutex<u8> = const_mutex(1);
    static F: FairMutex<u8> = const_fair_mutex(2);
    static R: RwLock<u8> = const_rwlock(3);
    static RE: ReentrantMutex<u8> = const_reentrant_mutex(4);
    static M2: Mutex<Vec<u8>> = Mutex::new(Vec::new());
    static R2: RwLock<u8> = RwLock::new(5);
    static CV: Condvar = Condvar::new();
    static O: Once = Once::new();
    let sum = *M.lock() + *F.lock() + *R.read() + *RE.lock() + *R2.write();
    assert_eq!(sum, 15);
    M2.lock().push(1);
    assert!(!CV.notify_one());
    O.call_once(|| {});
    assert!(O.state().done());
}

#[cfg(feature = "arc_lock")]
#[test]
fn arc_guards() {
    use parking_lot::{
        ArcMutexGuard, ArcReentrantMutexGuard, ArcRwLockReadGuard, ArcRwLockUpgradableReadGuard,
        ArcRwLockWriteGuard,
    };
    use std::sync::Arc;
    let m = Arc::new(Mutex::new(1));
    let g: ArcMutexGuard<RawMutex, i32> = m.lock_arc();
    drop(g);
    let r = Arc::new(ReentrantMutex::new(1));
    let g: ArcReentrantMutexGuard<RawMutex, RawThreadId, i32> = r.lock_arc();
    drop(g);
    let l = Arc::new(RwLock::new(1));
    let g: ArcRwLockReadGuard<RawRwLock, i32> = l.read_arc();
    drop(g);
    let g: ArcRwLockUpgradableReadGuard<RawRwLock, i32> = l.upgradable_read_arc();
    let g: ArcRwLockWriteGuard<RawRwLock, i32> = ArcRwLockUpgradableReadGuard::upgrade(g);
    drop(g);
}

#[cfg(feature = "serde")]
#[test]
fn serde_impls() {
    fn ser<T: serde::Serialize>() {}
    fn de<T: for<'de> serde::Deserialize<'de>>() {}
    ser::<Mutex<u8>>();
    de::<Mutex<u8>>();
    ser::<RwLock<u8>>();
    de::<RwLock<u8>>();
}

/// The backend the build selected, as `--cfg parking_lot_compat` or the
/// environment variable (seen when this test was compiled) asked.
#[test]
fn selected_backend() {
    let expected = if cfg!(parking_lot_compat = "cna") {
        "cna"
    } else if cfg!(parking_lot_compat = "cst") {
        "cst"
    } else if cfg!(parking_lot_compat = "hq") {
        "hq"
    } else {
        option_env!("PARKING_LOT_COMPAT_BACKEND").unwrap_or("cst")
    };
    assert_eq!(parking_lot::NUMA_BACKEND, expected);
}
