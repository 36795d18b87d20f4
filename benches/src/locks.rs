//! The locks compared, behind two small traits the workloads use.
//!
//! Every lock is driven through [`BenchMutex`] (or [`BenchRwLock`]), a closure-based
//! `with(|data| ...)` API that is monomorphised per lock, so the benchmark adds no
//! dynamic dispatch to the lock's fast path. A lock is chosen at run time by its
//! [`LockName`]; [`dispatch_mutex`] / [`dispatch_rwlock`] turn the name into a type.

use std::collections::BTreeMap;
use std::fmt;

/// Counters a lock reports about itself (its `stats` feature), by counter name.
///
/// Empty for locks without counters. The keys are the lock crate's own field names.
pub type LockStats = BTreeMap<String, u64>;

/// A mutual-exclusion lock protecting a `T`, as the workloads drive it.
pub trait BenchMutex<T>: Send + Sync {
    /// Creates an unlocked lock around `value`.
    fn new(value: T) -> Self;
    /// Acquires the lock, runs `f` on the protected data, releases the lock.
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R;
    /// The lock's own counters, if it keeps any (see [`LockStats`]).
    fn stats(&self) -> Option<LockStats> {
        None
    }
}

/// A reader-writer lock protecting a `T`, as the rwlock workload drives it.
pub trait BenchRwLock<T>: Send + Sync {
    /// Creates an unlocked lock around `value`.
    fn new(value: T) -> Self;
    /// Acquires the lock shared, runs `f`, releases it.
    fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R;
    /// Acquires the lock exclusive, runs `f`, releases it.
    fn write<R>(&self, f: impl FnOnce(&mut T) -> R) -> R;
    /// The lock's own counters, if it keeps any (see [`LockStats`]).
    fn stats(&self) -> Option<LockStats> {
        None
    }
}

/// A raw `lock_api` lock type that may expose counters.
///
/// Implemented for every raw lock the benchmark wraps in `lock_api::Mutex` /
/// `lock_api::RwLock`; the default says "no counters".
pub trait RawStats {
    /// The counters of this lock instance, if the lock keeps any.
    fn raw_stats(&self) -> Option<LockStats> {
        None
    }
}

impl RawStats for parking_lot::RawMutex {}
impl RawStats for parking_lot::RawRwLock {}

impl<R, T> BenchMutex<T> for lock_api::Mutex<R, T>
where
    R: lock_api::RawMutex + RawStats + Send + Sync,
    T: Send,
{
    fn new(value: T) -> Self {
        lock_api::Mutex::new(value)
    }
    #[inline]
    fn with<X>(&self, f: impl FnOnce(&mut T) -> X) -> X {
        f(&mut self.lock())
    }
    fn stats(&self) -> Option<LockStats> {
        // SAFETY: `raw` is unsafe because the caller could unlock the raw lock
        // behind the wrapper's back; we only read its counters.
        unsafe { self.raw() }.raw_stats()
    }
}

impl<R, T> BenchRwLock<T> for lock_api::RwLock<R, T>
where
    R: lock_api::RawRwLock + RawStats + Send + Sync,
    T: Send + Sync,
{
    fn new(value: T) -> Self {
        lock_api::RwLock::new(value)
    }
    #[inline]
    fn read<X>(&self, f: impl FnOnce(&T) -> X) -> X {
        f(&self.read())
    }
    #[inline]
    fn write<X>(&self, f: impl FnOnce(&mut T) -> X) -> X {
        f(&mut self.write())
    }
    fn stats(&self) -> Option<LockStats> {
        // SAFETY: `raw` is unsafe because the caller could unlock the raw lock
        // behind the wrapper's back; we only read its counters.
        unsafe { self.raw() }.raw_stats()
    }
}

impl<T: Send> BenchMutex<T> for std::sync::Mutex<T> {
    fn new(value: T) -> Self {
        std::sync::Mutex::new(value)
    }
    #[inline]
    fn with<X>(&self, f: impl FnOnce(&mut T) -> X) -> X {
        // A panic in a benchmark thread aborts the run anyway; ignore poisoning.
        f(&mut self
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

impl<T: Send + Sync> BenchRwLock<T> for std::sync::RwLock<T> {
    fn new(value: T) -> Self {
        std::sync::RwLock::new(value)
    }
    #[inline]
    fn read<X>(&self, f: impl FnOnce(&T) -> X) -> X {
        f(&self
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
    #[inline]
    fn write<X>(&self, f: impl FnOnce(&mut T) -> X) -> X {
        f(&mut self
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

impl<T: Send> BenchMutex<T> for spin::Mutex<T> {
    fn new(value: T) -> Self {
        spin::Mutex::new(value)
    }
    #[inline]
    fn with<X>(&self, f: impl FnOnce(&mut T) -> X) -> X {
        f(&mut self.lock())
    }
}

impl<T: Send> BenchMutex<T> for spin::mutex::TicketMutex<T> {
    fn new(value: T) -> Self {
        spin::mutex::TicketMutex::new(value)
    }
    #[inline]
    fn with<X>(&self, f: impl FnOnce(&mut T) -> X) -> X {
        f(&mut self.lock())
    }
}

/// A family of mutexes: one lock algorithm, for any protected type.
pub trait MutexKind {
    /// The lock protecting a `T`.
    type Mutex<T: Send>: BenchMutex<T>;
}

/// A family of reader-writer locks: one algorithm, for any protected type.
pub trait RwLockKind {
    /// The lock protecting a `T`.
    type RwLock<T: Send + Sync>: BenchRwLock<T>;
}

/// `parking_lot` 0.13 `RawMutex` (word lock, spin then park; unfair: barging, fair
/// hand-off only through `unlock_fair`. 0.13 removed the eventual fairness every
/// 0.5 ms that 0.12 had, parking_lot's CHANGELOG, #533).
pub struct ParkingLot;
impl MutexKind for ParkingLot {
    type Mutex<T: Send> = lock_api::Mutex<parking_lot::RawMutex, T>;
}

/// `std::sync::Mutex` (futex-based on Linux).
pub struct Std;
impl MutexKind for Std {
    type Mutex<T: Send> = std::sync::Mutex<T>;
}

/// `spin::Mutex` 0.12 (test-and-set spinlock, no queue, no parking).
pub struct Spin;
impl MutexKind for Spin {
    type Mutex<T: Send> = spin::Mutex<T>;
}

/// `spin::TicketMutex` 0.12 (FIFO ticket spinlock, no parking).
pub struct Ticket;
impl MutexKind for Ticket {
    type Mutex<T: Send> = spin::mutex::TicketMutex<T>;
}

/// `parking_lot` 0.13 `RawRwLock`.
pub struct ParkingLotRw;
impl RwLockKind for ParkingLotRw {
    type RwLock<T: Send + Sync> = lock_api::RwLock<parking_lot::RawRwLock, T>;
}

/// `std::sync::RwLock`.
pub struct StdRw;
impl RwLockKind for StdRw {
    type RwLock<T: Send + Sync> = std::sync::RwLock<T>;
}

/// Every lock the benchmark knows, by its command-line name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockName {
    /// `cna`: `numa_spin::RawMutex`, the CNA queue spinlock.
    Cna,
    /// `queued`: `numa_spin::RawQueuedMutex`, the same queue spinlock without NUMA ordering.
    Queued,
    /// `cst`: `cst_mutex::RawMutex`, the CST blocking mutex.
    Cst,
    /// `parking_lot`: `parking_lot::RawMutex`.
    ParkingLot,
    /// `std`: `std::sync::Mutex`.
    Std,
    /// `spin`: `spin::Mutex`.
    Spin,
    /// `ticket`: `spin::TicketMutex`.
    Ticket,
    /// `cst-rw`: `cst_mutex::RawRwLock`.
    CstRw,
    /// `parking_lot-rw`: `parking_lot::RawRwLock`.
    ParkingLotRw,
    /// `std-rw`: `std::sync::RwLock`.
    StdRw,
}

impl LockName {
    /// All names, mutexes first.
    pub const ALL: [LockName; 10] = [
        LockName::Cna,
        LockName::Queued,
        LockName::Cst,
        LockName::ParkingLot,
        LockName::Std,
        LockName::Spin,
        LockName::Ticket,
        LockName::CstRw,
        LockName::ParkingLotRw,
        LockName::StdRw,
    ];

    /// The command-line name (`parking_lot`, `cst-rw`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            LockName::Cna => "cna",
            LockName::Queued => "queued",
            LockName::Cst => "cst",
            LockName::ParkingLot => "parking_lot",
            LockName::Std => "std",
            LockName::Spin => "spin",
            LockName::Ticket => "ticket",
            LockName::CstRw => "cst-rw",
            LockName::ParkingLotRw => "parking_lot-rw",
            LockName::StdRw => "std-rw",
        }
    }

    /// Whether this is a reader-writer lock (usable only by the `rwlock` workload).
    pub const fn is_rwlock(self) -> bool {
        matches!(
            self,
            LockName::CstRw | LockName::ParkingLotRw | LockName::StdRw
        )
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for LockName {
    type Err = crate::BenchError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LockName::ALL
            .into_iter()
            .find(|l| l.as_str() == s)
            .ok_or_else(|| crate::BenchError::UnknownLock(s.to_owned()))
    }
}

/// Code generic over a mutex family, called by [`dispatch_mutex`].
pub trait MutexVisitor {
    /// What the visit returns.
    type Output;
    /// Runs with `K` the family named by the caller.
    fn visit<K: MutexKind>(self, lock: LockName) -> Self::Output;
}

/// Code generic over a reader-writer lock family, called by [`dispatch_rwlock`].
pub trait RwLockVisitor {
    /// What the visit returns.
    type Output;
    /// Runs with `K` the family named by the caller.
    fn visit<K: RwLockKind>(self, lock: LockName) -> Self::Output;
}

/// Calls `v.visit::<K>()` with the mutex family `lock` names; `None` for an rwlock name.
pub fn dispatch_mutex<V: MutexVisitor>(lock: LockName, v: V) -> Option<V::Output> {
    Some(match lock {
        LockName::Cna => v.visit::<crate::ours::Cna>(lock),
        LockName::Queued => v.visit::<crate::ours::Queued>(lock),
        LockName::Cst => v.visit::<crate::ours::Cst>(lock),
        LockName::ParkingLot => v.visit::<ParkingLot>(lock),
        LockName::Std => v.visit::<Std>(lock),
        LockName::Spin => v.visit::<Spin>(lock),
        LockName::Ticket => v.visit::<Ticket>(lock),
        LockName::CstRw | LockName::ParkingLotRw | LockName::StdRw => return None,
    })
}

/// Calls `v.visit::<K>()` with the rwlock family `lock` names; `None` for a mutex name.
pub fn dispatch_rwlock<V: RwLockVisitor>(lock: LockName, v: V) -> Option<V::Output> {
    Some(match lock {
        LockName::CstRw => v.visit::<crate::ours::CstRw>(lock),
        LockName::ParkingLotRw => v.visit::<ParkingLotRw>(lock),
        LockName::StdRw => v.visit::<StdRw>(lock),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for l in LockName::ALL {
            assert_eq!(l.as_str().parse::<LockName>().unwrap(), l);
        }
        assert!(matches!(
            "mcs".parse::<LockName>(),
            Err(crate::BenchError::UnknownLock(s)) if s == "mcs"
        ));
    }

    struct Count;
    impl MutexVisitor for Count {
        type Output = u64;
        fn visit<K: MutexKind>(self, _: LockName) -> u64 {
            let m = <K::Mutex<u64> as BenchMutex<u64>>::new(0);
            for _ in 0..10 {
                m.with(|x| *x += 1);
            }
            m.with(|x| *x)
        }
    }

    #[test]
    fn every_mutex_protects_its_data() {
        for l in LockName::ALL {
            assert_eq!(
                dispatch_mutex(l, Count),
                (!l.is_rwlock()).then_some(10),
                "{l}"
            );
        }
    }
}
