//! The generic reader-writer lock suite: functions over `lock_api::RawRwLock`
//! and its upgrade/downgrade/timed traits, and
//! [`rwlock_suite!`](crate::rwlock_suite) which instantiates them as `#[test]`s.
//!
//! Every function panics (fails the test) on a violation. Waits that would hang
//! on a broken lock use a generous timeout (10 s) and fail instead; nothing
//! asserts on speed.

use lock_api::{
    RawRwLock, RawRwLockDowngrade, RawRwLockTimed, RawRwLockUpgrade, RawRwLockUpgradeDowngrade,
    RwLock, RwLockReadGuard, RwLockUpgradableReadGuard, RwLockWriteGuard,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

/// How long a test waits for something that must happen before it calls the
/// lock broken (a guard against hangs, not a speed check).
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Two readers hold the lock at the same time: the second reader's timed read
/// must succeed while the first still holds its guard.
pub fn two_readers_at_once<R>()
where
    R: RawRwLockTimed<Duration = Duration> + Send + Sync + 'static,
{
    let lock = Arc::new(RwLock::<R, u64>::new(7));
    let first = lock.read();
    let other = {
        let lock = lock.clone();
        thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(1));
            let g = lock
                .try_read_for(PATIENCE)
                .expect("second reader shut out by a reader");
            *g
        })
    };
    assert_eq!(other.join().unwrap(), 7);
    assert_eq!(*first, 7);
    drop(first);
    assert!(!lock.is_locked());
}

/// A writer is alone: readers and writers on `nodes` virtual nodes check, inside
/// their critical sections, that no writer overlaps anybody. The written
/// counter must end at the number of write sections.
pub fn writer_alone<R>(threads: usize, nodes: usize, iters: u64)
where
    R: RawRwLock + Send + Sync + 'static,
{
    let lock = Arc::new(RwLock::<R, u64>::new(0));
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|me| {
            let (lock, readers, writers, start) = (
                lock.clone(),
                readers.clone(),
                writers.clone(),
                start.clone(),
            );
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(me % nodes.max(1)));
                start.wait();
                let mut wrote = 0u64;
                for i in 0..iters {
                    if (i + me as u64).is_multiple_of(4) {
                        let mut g = lock.write();
                        assert_eq!(
                            writers.fetch_add(1, Ordering::SeqCst),
                            0,
                            "two writers inside"
                        );
                        assert_eq!(readers.load(Ordering::SeqCst), 0, "writer beside a reader");
                        let v = *g;
                        std::hint::black_box(&v);
                        *g = v + 1;
                        wrote += 1;
                        writers.fetch_sub(1, Ordering::SeqCst);
                        drop(g);
                    } else {
                        let g = lock.read();
                        readers.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(writers.load(Ordering::SeqCst), 0, "reader beside a writer");
                        std::hint::black_box(*g);
                        readers.fetch_sub(1, Ordering::SeqCst);
                        drop(g);
                    }
                }
                wrote
            })
        })
        .collect();
    let wrote: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(*lock.read(), wrote, "lost or torn writes");
    assert!(!lock.is_locked());
}

/// An upgradable reader sits beside plain readers, excludes writers and other
/// upgradable readers, and upgrades once the plain readers are gone.
pub fn upgradable_beside_readers<R>()
where
    R: RawRwLockUpgradeDowngrade + RawRwLockTimed<Duration = Duration> + Send + Sync + 'static,
{
    let lock = Arc::new(RwLock::<R, Vec<u32>>::new(vec![1]));
    let up = lock.upgradable_read();
    let reader = {
        let lock = lock.clone();
        thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(1));
            let g = lock
                .try_read_for(PATIENCE)
                .expect("reader shut out by an upgradable reader");
            assert!(
                lock.try_upgradable_read().is_none(),
                "two upgradable readers"
            );
            assert!(
                lock.try_write().is_none(),
                "writer beside an upgradable reader"
            );
            g.len()
        })
    };
    assert_eq!(reader.join().unwrap(), 1);
    let mut w = RwLockUpgradableReadGuard::upgrade(up);
    w.push(2);
    assert!(
        lock.try_read().is_none(),
        "reader beside an upgraded writer"
    );
    let up = RwLockWriteGuard::downgrade_to_upgradable(w);
    assert_eq!(
        lock.try_read().map(|g| g.len()),
        Some(2),
        "reader shut out after downgrade"
    );
    let r = RwLockUpgradableReadGuard::downgrade(up);
    assert!(
        lock.try_upgradable_read().is_some(),
        "upgradable shut out by a plain reader"
    );
    drop(r);
    assert!(!lock.is_locked());
}

/// `try_upgrade` fails while another reader is inside and leaves the
/// upgradable guard usable; it succeeds once the reader is gone.
pub fn try_upgrade_with_reader<R>()
where
    R: RawRwLockUpgrade + Send + Sync + 'static,
{
    let lock = RwLock::<R, u32>::new(0);
    let up = lock.upgradable_read();
    let r = lock.read();
    let up = match RwLockUpgradableReadGuard::try_upgrade(up) {
        Ok(_) => panic!("upgraded beside a reader"),
        Err(up) => up,
    };
    drop(r);
    let mut w = RwLockUpgradableReadGuard::try_upgrade(up)
        .unwrap_or_else(|_| panic!("upgrade failed alone"));
    *w = 5;
    drop(w);
    assert_eq!(*lock.read(), 5);
}

/// A writer downgrades to a reader without letting another writer in; a
/// reader that waited for the writer gets in after the downgrade.
pub fn downgrade_admits_readers<R>()
where
    R: RawRwLockDowngrade + RawRwLockTimed<Duration = Duration> + Send + Sync + 'static,
{
    let lock = Arc::new(RwLock::<R, u32>::new(0));
    let mut w = lock.write();
    *w = 1;
    let started = Arc::new(AtomicBool::new(false));
    let reader = {
        let (lock, started) = (lock.clone(), started.clone());
        thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(1));
            started.store(true, Ordering::SeqCst);
            *lock
                .try_read_for(PATIENCE)
                .expect("reader not admitted after downgrade")
        })
    };
    while !started.load(Ordering::SeqCst) {
        thread::yield_now();
    }
    thread::sleep(Duration::from_millis(5));
    let r = RwLockWriteGuard::downgrade(w);
    assert!(
        lock.try_write().is_none(),
        "writer beside a downgraded reader"
    );
    assert_eq!(reader.join().unwrap(), 1);
    drop(r);
    assert!(lock.try_write().is_some());
}

/// Timed attempts that time out leave the lock clean: a writer times out
/// behind a reader, a reader times out behind a writer, and afterwards both
/// kinds of access still work (nothing stays registered or parked).
pub fn timeouts_leave_lock_clean<R>()
where
    R: RawRwLockTimed<Duration = Duration> + Send + Sync + 'static,
{
    let lock = Arc::new(RwLock::<R, u32>::new(0));
    let r = lock.read();
    assert!(
        lock.try_write_for(Duration::from_millis(5)).is_none(),
        "writer beside a reader"
    );
    assert!(
        lock.try_read().is_some(),
        "timed-out writer kept readers out"
    );
    drop(r);
    let w = lock.write();
    let other = {
        let lock = lock.clone();
        thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(1));
            lock.try_read_for(Duration::from_millis(5)).is_none()
        })
    };
    assert!(other.join().unwrap(), "reader beside a writer");
    drop(w);
    let g = lock
        .try_write_for(PATIENCE)
        .expect("lock stuck after timeouts");
    drop(g);
    let g: RwLockReadGuard<'_, R, u32> = lock
        .try_read_for(PATIENCE)
        .expect("lock stuck after timeouts");
    drop(g);
    assert!(!lock.is_locked());
}

/// Neither side starves: `readers` threads read in a loop while one writer must
/// get in `writes` times, and then the readers must each still get in.
pub fn no_starvation<R>(readers: usize, writes: u32)
where
    R: RawRwLockTimed<Duration = Duration> + Send + Sync + 'static,
{
    let lock = Arc::new(RwLock::<R, u32>::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..readers)
        .map(|me| {
            let (lock, stop) = (lock.clone(), stop.clone());
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(me % 2));
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let g = lock.try_read_for(PATIENCE).expect("reader starved");
                    std::hint::black_box(*g);
                    n += 1;
                }
                n
            })
        })
        .collect();
    for _ in 0..writes {
        *lock
            .try_write_for(PATIENCE)
            .expect("writer starved by readers") += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(*lock.read(), writes);
}

/// Instantiates the generic rwlock suite as `#[test]`s in a module `$name` for
/// `$raw`, which must implement `RawRwLockTimed` (with `std::time`),
/// `RawRwLockUpgradeDowngrade` (so also the upgrade and downgrade traits).
///
/// ```ignore
/// lock_tests::rwlock_suite!(cst, cst_mutex::RawRwLock);
/// ```
#[macro_export]
macro_rules! rwlock_suite {
    ($name:ident, $raw:ty) => {
        #[allow(missing_docs)]
        mod $name {
            use $crate::rwlock as suite;

            $crate::static_assertions::assert_impl_all!(
                $crate::lock_api::RwLock<$raw, u64>: Send, Sync
            );

            #[test]
            fn two_readers_at_once() {
                suite::two_readers_at_once::<$raw>();
            }

            #[test]
            fn writer_alone_4_threads_2_nodes() {
                suite::writer_alone::<$raw>(4, 2, 5_000);
            }

            #[test]
            fn writer_alone_16_threads_4_nodes() {
                suite::writer_alone::<$raw>(16, 4, 1_000);
            }

            #[test]
            fn upgradable_beside_readers() {
                suite::upgradable_beside_readers::<$raw>();
            }

            #[test]
            fn try_upgrade_with_reader() {
                suite::try_upgrade_with_reader::<$raw>();
            }

            #[test]
            fn downgrade_admits_readers() {
                suite::downgrade_admits_readers::<$raw>();
            }

            #[test]
            fn timeouts_leave_lock_clean() {
                suite::timeouts_leave_lock_clean::<$raw>();
            }

            #[test]
            fn no_starvation() {
                suite::no_starvation::<$raw>(8, 200);
            }

            #[test]
            fn static_rwlock() {
                static L: $crate::lock_api::RwLock<$raw, u64> = $crate::lock_api::RwLock::new(0);
                *L.write() += 1;
                assert_eq!(*L.read(), 1);
            }
        }
    };
}
