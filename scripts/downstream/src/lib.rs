//! Code as a crate on lock_api 0.4 writes it: generic over the raw lock, knowing
//! nothing of numa-spin or cst-mutex.

use std::sync::Arc;
use std::thread;

/// `threads` threads add 1 to a counter `iters` times each through any lock_api 0.4
/// mutex; returns the final count.
pub fn count_with_mutex<R>(threads: usize, iters: usize) -> usize
where
    R: lock_api::RawMutex + Send + Sync + 'static,
{
    let m = Arc::new(lock_api::Mutex::<R, usize>::new(0));
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                for _ in 0..iters {
                    *m.lock() += 1;
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let n = *m.lock();
    n
}

/// Writers keep the two halves equal through any lock_api 0.4 rwlock, readers
/// check it; returns the number of writes.
pub fn pairs_with_rwlock<R>(threads: usize, iters: usize) -> u64
where
    R: lock_api::RawRwLockUpgrade + Send + Sync + 'static,
{
    let l = Arc::new(lock_api::RwLock::<R, (u64, u64)>::new((0, 0)));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                for i in 0..iters {
                    if (t + i) % 3 == 0 {
                        let up = l.upgradable_read();
                        let mut w = lock_api::RwLockUpgradableReadGuard::upgrade(up);
                        w.0 += 1;
                        w.1 += 1;
                    } else {
                        let r = l.read();
                        assert_eq!(r.0, r.1, "a reader saw a half-done write");
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
    r.0
}
