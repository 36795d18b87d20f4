//! This workspace's locks as benchmark lock families, with their counters.
//!
//! With this package's `lock-stats` feature (which turns on `numa_spin`'s
//! `stats`), `cna` and `queued` report their counters: acquisitions, contended acquisitions, same- and cross-node
//! handoffs, secondary-queue flushes. `cst` and `cst-rw` report the number of
//! snodes the lock allocated (nodes that contended on it).

use crate::locks::{LockStats, MutexKind, RawStats, RwLockKind};

#[cfg(feature = "lock-stats")]
fn spin_stats(s: numa_spin::Stats) -> LockStats {
    [
        ("acquisitions", s.acquisitions),
        ("contended", s.contended),
        ("same_node_handoffs", s.same_node_handoffs),
        ("cross_node_handoffs", s.cross_node_handoffs),
        ("flushes", s.flushes),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

#[cfg(feature = "lock-stats")]
impl RawStats for numa_spin::RawMutex {
    fn raw_stats(&self) -> Option<LockStats> {
        Some(spin_stats(self.stats()))
    }
}

#[cfg(feature = "lock-stats")]
impl RawStats for numa_spin::RawQueuedMutex {
    fn raw_stats(&self) -> Option<LockStats> {
        Some(spin_stats(self.stats()))
    }
}

/// Without `lock-stats` the lock is measured as users get it: no counters.
#[cfg(not(feature = "lock-stats"))]
impl RawStats for numa_spin::RawMutex {}

/// Without `lock-stats` the lock is measured as users get it: no counters.
#[cfg(not(feature = "lock-stats"))]
impl RawStats for numa_spin::RawQueuedMutex {}

impl RawStats for cst_mutex::RawMutex {
    fn raw_stats(&self) -> Option<LockStats> {
        Some(
            [("snodes".to_owned(), self.snode_count() as u64)]
                .into_iter()
                .collect(),
        )
    }
}

impl RawStats for cst_mutex::RawRwLock {
    fn raw_stats(&self) -> Option<LockStats> {
        Some(
            [("snodes".to_owned(), self.snode_count() as u64)]
                .into_iter()
                .collect(),
        )
    }
}

/// `cna`: `numa_spin::RawMutex`, the CNA queue spinlock.
pub struct Cna;
impl MutexKind for Cna {
    type Mutex<T: Send> = lock_api::Mutex<numa_spin::RawMutex, T>;
}

/// `queued`: `numa_spin::RawQueuedMutex`, the same queue spinlock without the
/// secondary queue (the NUMA-oblivious baseline, like the stock qspinlock).
pub struct Queued;
impl MutexKind for Queued {
    type Mutex<T: Send> = lock_api::Mutex<numa_spin::RawQueuedMutex, T>;
}

/// `cst`: `cst_mutex::RawMutex`, the CST cohort blocking mutex.
pub struct Cst;
impl MutexKind for Cst {
    type Mutex<T: Send> = lock_api::Mutex<cst_mutex::RawMutex, T>;
}

/// `cst-rw`: `cst_mutex::RawRwLock`, the CST reader-writer lock.
pub struct CstRw;
impl RwLockKind for CstRw {
    type RwLock<T: Send + Sync> = lock_api::RwLock<cst_mutex::RawRwLock, T>;
}
