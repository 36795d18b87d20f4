//! This workspace's locks as benchmark lock families.
//!
//! TEMPORARY: the lock crates are being written; until their raw types land these
//! families are not available.

use crate::locks::{MutexKind, RwLockKind};

/// `cna`: `numa_spin::RawMutex`.
pub struct Cna;
impl MutexKind for Cna {
    type Mutex<T: Send> = lock_api::Mutex<parking_lot::RawMutex, T>;
}
/// `queued`: `numa_spin::RawQueuedMutex`.
pub struct Queued;
impl MutexKind for Queued {
    type Mutex<T: Send> = lock_api::Mutex<parking_lot::RawMutex, T>;
}
/// `cst`: `cst_mutex::RawMutex`.
pub struct Cst;
impl MutexKind for Cst {
    type Mutex<T: Send> = lock_api::Mutex<parking_lot::RawMutex, T>;
}
/// `cst-rw`: `cst_mutex::RawRwLock`.
pub struct CstRw;
impl RwLockKind for CstRw {
    type RwLock<T: Send + Sync> = lock_api::RwLock<parking_lot::RawRwLock, T>;
}
