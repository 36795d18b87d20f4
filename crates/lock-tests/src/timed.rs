//! The generic timed-mutex suite: functions over any `lock_api::RawMutexTimed`
//! (`try_lock_for` / `try_lock_until`), and
//! [`timed_mutex_suite!`](crate::timed_mutex_suite) which instantiates them as
//! `#[test]`s.
//!
//! The only time checks are the contract's bounds: a timed-out attempt must
//! not give up before its timeout, and one that succeeds must not wait for its
//! whole timeout when the lock is released long before.

use lock_api::{Mutex, RawMutexTimed};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// A thread holding `lock` until `release` is set; returns after it holds it.
fn hold<R>(lock: &Arc<Mutex<R, u64>>, release: &Arc<AtomicBool>) -> thread::JoinHandle<()>
where
    R: RawMutexTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    let held = Arc::new(AtomicBool::new(false));
    let (l, h, r) = (lock.clone(), held.clone(), release.clone());
    let holder = thread::spawn(move || {
        let mut g = l.lock();
        h.store(true, Ordering::Release);
        while !r.load(Ordering::Acquire) {
            thread::sleep(Duration::from_millis(1));
        }
        *g += 1;
    });
    while !held.load(Ordering::Acquire) {
        thread::yield_now();
    }
    holder
}

/// While another thread holds the lock, `try_lock_for` (0, 1 and 20 ms) and
/// `try_lock_until` (10 ms ahead, and in the past) fail, none before its
/// timeout; once it is free, a zero timeout and a past deadline succeed.
pub fn times_out_while_held<R>()
where
    R: RawMutexTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    let lock = Arc::new(Mutex::<R, u64>::new(0));
    let release = Arc::new(AtomicBool::new(false));
    let holder = hold(&lock, &release);
    for timeout in [0, 1, 20].map(Duration::from_millis) {
        let start = Instant::now();
        assert!(lock.try_lock_for(timeout).is_none(), "acquired a held lock");
        let waited = start.elapsed();
        assert!(waited >= timeout, "gave up after {waited:?} < {timeout:?}");
    }
    let deadline = Instant::now() + Duration::from_millis(10);
    assert!(
        lock.try_lock_until(deadline).is_none(),
        "acquired a held lock"
    );
    assert!(Instant::now() >= deadline, "gave up before the deadline");
    // A deadline in the past still makes one attempt, which fails here.
    let past = Instant::now() - Duration::from_millis(1);
    assert!(lock.try_lock_until(past).is_none(), "acquired a held lock");
    release.store(true, Ordering::Release);
    holder.join().unwrap();
    assert!(
        lock.try_lock_for(Duration::ZERO).is_some(),
        "free lock refused"
    );
    let past = Instant::now() - Duration::from_millis(1);
    assert!(lock.try_lock_until(past).is_some(), "free lock refused");
    assert_eq!(*lock.lock(), 1);
}

/// A waiter with a 30 s timeout gets the lock soon after its holder releases
/// it (30 ms in), not at its deadline, and not before: it sees the holder's
/// update, and the lock is held while it holds the guard; so does a waiter
/// with a timeout too large to represent as an `Instant` (which waits
/// without limit).
pub fn succeeds_when_released_before_the_deadline<R>()
where
    R: RawMutexTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    for timeout in [Duration::from_secs(30), Duration::MAX] {
        let lock = Arc::new(Mutex::<R, u64>::new(0));
        let release = Arc::new(AtomicBool::new(false));
        let holder = hold(&lock, &release);
        let l = lock.clone();
        let waiter = thread::spawn(move || {
            let start = Instant::now();
            let mut g = l.try_lock_for(timeout).expect("timed out");
            let waited = start.elapsed();
            // Held, and after the holder's critical section.
            assert!(l.is_locked(), "acquired without taking the lock");
            assert_eq!(*g, 1, "acquired while the holder held the lock");
            *g += 1;
            waited
        });
        thread::sleep(Duration::from_millis(30));
        release.store(true, Ordering::Release);
        holder.join().unwrap();
        let waited = waiter.join().unwrap();
        assert!(
            waited < Duration::from_secs(20),
            "waited {waited:?} for a free lock"
        );
        assert_eq!(*lock.lock(), 2);
    }
}

/// Timed lockers (timeouts of 0-49 us) beside `lock()` callers, 4 threads on
/// 2 virtual nodes: every critical section is exclusive and every successful
/// acquisition counted (with the lock held); the `lock()` callers all get
/// through.
pub fn timed_and_blocking_lockers_exclude_each_other<R>()
where
    R: RawMutexTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    const THREADS: usize = 4;
    const ITERS: usize = 2_000;
    let lock = Arc::new(Mutex::<R, u64>::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let (lock, inside) = (lock.clone(), inside.clone());
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 2));
                let mut mine = 0;
                for n in 0..ITERS {
                    let g = if i % 2 == 0 {
                        Some(lock.lock())
                    } else {
                        lock.try_lock_for(Duration::from_micros((n % 50) as u64))
                    };
                    if let Some(mut g) = g {
                        assert!(!inside.swap(true, Ordering::Relaxed), "two holders");
                        assert!(lock.is_locked(), "acquired without taking the lock");
                        *g += 1;
                        mine += 1;
                        if n % 64 == 0 {
                            thread::yield_now();
                        }
                        inside.store(false, Ordering::Relaxed);
                    }
                }
                mine
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(*lock.lock(), total);
    assert!(total >= (THREADS / 2 * ITERS) as u64, "lock() callers lost");
}

/// Instantiates the timed-mutex suite as a module `$name` of `#[test]`s for the
/// `lock_api::RawMutexTimed` type `$raw`.
///
/// ```ignore
/// lock_tests::timed_mutex_suite!(timed, numa_spin::RawHqMutex);
/// ```
#[macro_export]
macro_rules! timed_mutex_suite {
    ($name:ident, $raw:ty) => {
        #[allow(missing_docs)]
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            use $crate::timed as suite;

            #[test]
            fn times_out_while_held() {
                suite::times_out_while_held::<$raw>();
            }

            #[test]
            fn succeeds_when_released_before_the_deadline() {
                suite::succeeds_when_released_before_the_deadline::<$raw>();
            }

            #[test]
            fn timed_and_blocking_lockers_exclude_each_other() {
                suite::timed_and_blocking_lockers_exclude_each_other::<$raw>();
            }
        }
    };
}
