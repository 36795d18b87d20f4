//! The locks compared, behind two small traits the workloads use.
//!
//! Every lock is driven through [`BenchMutex`] (or [`BenchRwLock`]), a closure-based
//! `with(|data| ...)` API that is monomorphised per lock, so the benchmark adds no
//! dynamic dispatch to the lock's fast path. A lock is chosen at run time by its
//! [`LockName`]; [`dispatch_mutex`] / [`dispatch_rwlock`] turn the name into a type.
//! The workloads run their critical sections through [`BenchMutex::with_send`]:
//! the combining lock (`combining`, the registry's `combining_mutex` shape, family
//! [`registry::Combining`]) ships them to its combiners, every other lock runs them
//! on the caller under its guard.
//!
//! The locks, their names and their types come from the workspace's lock registry
//! ([`numa_lock_registry::for_each_lock!`]), which the test suites, the torture
//! test and the fuzz target share: a lock added there is a `--lock` here.

use std::fmt;

use numa_lock_registry::{
    self as registry, Combining, CombiningMutex, DataMutex, DataRwLock, FairMutex, FullRwLock,
    LockApi, LockApiVisitor, LockInfo, MutexFamily, RwLockFamily, Visitor,
};

pub use crate::ours::LockStats;

/// A mutual-exclusion lock protecting a `T`, as the workloads drive it: the
/// registry's [`DataMutex`] plus the lock's own counters.
pub trait BenchMutex<T>: DataMutex<T> {
    /// Creates an unlocked lock around `value` ([`DataMutex::new`]).
    fn new(value: T) -> Self
    where
        Self: Sized,
    {
        <Self as DataMutex<T>>::new(value)
    }
    /// Acquires the lock, runs `f` on the protected data, releases the lock.
    #[inline]
    fn with<X>(&self, f: impl FnOnce(&mut T) -> X) -> X {
        <Self as DataMutex<T>>::with(self, f)
    }
    /// Runs `f` on the protected data under the lock: on this thread, or, for a
    /// combining lock, maybe on the combiner of this thread's NUMA node
    /// ([`DataMutex::with_send`]).
    #[inline]
    fn with_send<X: Send>(&self, f: impl FnOnce(&mut T) -> X + Send) -> X {
        <Self as DataMutex<T>>::with_send(self, f)
    }
    /// The lock's own counters, if it keeps any (see [`LockStats`]).
    fn stats(&self) -> Option<LockStats> {
        self.raw_any().and_then(crate::ours::raw_stats)
    }
}

impl<T, M: DataMutex<T>> BenchMutex<T> for M {}

/// A reader-writer lock protecting a `T`, as the rwlock workload drives it.
pub trait BenchRwLock<T>: DataRwLock<T> {
    /// Creates an unlocked lock around `value` ([`DataRwLock::new`]).
    fn new(value: T) -> Self
    where
        Self: Sized,
    {
        <Self as DataRwLock<T>>::new(value)
    }
    /// Acquires the lock shared, runs `f`, releases it.
    #[inline]
    fn read<X>(&self, f: impl FnOnce(&T) -> X) -> X {
        <Self as DataRwLock<T>>::read(self, f)
    }
    /// Acquires the lock exclusive, runs `f`, releases it.
    #[inline]
    fn write<X>(&self, f: impl FnOnce(&mut T) -> X) -> X {
        <Self as DataRwLock<T>>::write(self, f)
    }
    /// The lock's own counters, if it keeps any (see [`LockStats`]).
    fn stats(&self) -> Option<LockStats> {
        self.raw_any().and_then(crate::ours::raw_stats)
    }
}

impl<T, L: DataRwLock<T>> BenchRwLock<T> for L {}

/// A family of mutexes: one lock algorithm, for any protected type.
pub use numa_lock_registry::MutexFamily as MutexKind;
/// A family of reader-writer locks: one algorithm, for any protected type.
pub use numa_lock_registry::RwLockFamily as RwLockKind;

/// `parking_lot` 0.13 `RawMutex` (word lock, spin then park; unfair: barging, fair
/// hand-off only through `unlock_fair`. 0.13 removed the eventual fairness every
/// 0.5 ms that 0.12 had, parking_lot's CHANGELOG, #533).
pub type ParkingLot = LockApi<parking_lot::RawMutex>;

/// `std::sync::Mutex` (futex-based on Linux).
pub type Std = registry::StdMutex;

/// `spin::Mutex` 0.12 (test-and-set spinlock, no queue, no parking).
pub type Spin = registry::SpinMutex;

/// `spin::TicketMutex` 0.12 (FIFO ticket spinlock, no parking).
pub type Ticket = registry::TicketMutex;

/// `parking_lot` 0.13 `RawRwLock`.
pub type ParkingLotRw = LockApi<parking_lot::RawRwLock>;

/// `std::sync::RwLock`.
pub type StdRw = registry::StdRwLock;

/// A lock the benchmark knows, by its command-line name: a lock of the registry.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(usize);

#[allow(non_upper_case_globals)]
impl LockName {
    /// `cna`: `numa_spin::RawMutex`, the CNA queue spinlock.
    pub const Cna: LockName = LockName::named("cna");
    /// `queued`: `numa_spin::RawQueuedMutex`, the same queue spinlock without NUMA ordering.
    pub const Queued: LockName = LockName::named("queued");
    /// `hq`: `numa_spin::RawHqMutex`, the HQ hierarchical queued NUMA-aware spinlock.
    pub const Hq: LockName = LockName::named("hq");
    /// `combining`: `numa_spin::RawCombiningMutex`, the NUMA-aware combining lock
    /// (critical sections run by a combiner of the caller's node).
    pub const Combining: LockName = LockName::named("combining");
    /// `cst`: `cst_mutex::RawMutex`, the CST blocking mutex.
    pub const Cst: LockName = LockName::named("cst");
    /// `parking_lot`: `parking_lot::RawMutex`.
    pub const ParkingLot: LockName = LockName::named("parking_lot");
    /// `std`: `std::sync::Mutex`.
    pub const Std: LockName = LockName::named("std");
    /// `spin`: `spin::Mutex`.
    pub const Spin: LockName = LockName::named("spin");
    /// `ticket`: `spin::TicketMutex`.
    pub const Ticket: LockName = LockName::named("ticket");
    /// `cst-rw`: `cst_mutex::RawRwLock`.
    pub const CstRw: LockName = LockName::named("cst-rw");
    /// `parking_lot-rw`: `parking_lot::RawRwLock`.
    pub const ParkingLotRw: LockName = LockName::named("parking_lot-rw");
    /// `std-rw`: `std::sync::RwLock`.
    pub const StdRw: LockName = LockName::named("std-rw");

    /// All names, in registry order (mutexes first).
    pub const ALL: [LockName; registry::LOCKS.len()] = {
        let mut all = [LockName(0); registry::LOCKS.len()];
        let mut i = 0;
        while i < all.len() {
            all[i] = LockName(i);
            i += 1;
        }
        all
    };

    /// The registry lock called `name`; a compile-time error in a `const` if none.
    const fn named(name: &str) -> LockName {
        let mut i = 0;
        while i < registry::LOCKS.len() {
            let (a, b) = (registry::LOCKS[i].name.as_bytes(), name.as_bytes());
            if a.len() == b.len() {
                let mut k = 0;
                while k < a.len() && a[k] == b[k] {
                    k += 1;
                }
                if k == a.len() {
                    return LockName(i);
                }
            }
            i += 1;
        }
        panic!("no such lock in the registry")
    }

    /// The lock's registry entry.
    pub fn info(self) -> &'static LockInfo {
        &registry::LOCKS[self.0]
    }

    /// The command-line name (`parking_lot`, `cst-rw`, ...).
    pub fn as_str(self) -> &'static str {
        self.info().name
    }

    /// Whether this is a reader-writer lock (usable only by the `rwlock` workload).
    pub fn is_rwlock(self) -> bool {
        self.info().shape.is_rwlock()
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every lock name, comma-separated, in registry order (for error messages).
pub fn known_names() -> String {
    LockName::ALL
        .iter()
        .map(|l| l.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl std::str::FromStr for LockName {
    type Err = crate::BenchError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        registry::lock(s)
            .map(|l| LockName(l.index))
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

/// Adapts a [`MutexVisitor`] to the registry's visitor (rwlocks give `None`).
struct Mutexes<V>(Option<V>);

impl<V: MutexVisitor> Mutexes<V> {
    fn go<K: MutexKind>(&mut self, lock: &'static LockInfo) -> Option<V::Output> {
        let v = self.0.take().expect("one visit per dispatch");
        Some(v.visit::<K>(LockName(lock.index)))
    }
}

impl<V: MutexVisitor> LockApiVisitor for Mutexes<V> {
    type Output = Option<V::Output>;
    fn fair_mutex<R: FairMutex>(&mut self, lock: &'static LockInfo) -> Self::Output {
        self.go::<LockApi<R>>(lock)
    }
    fn combining_mutex<R: CombiningMutex>(&mut self, lock: &'static LockInfo) -> Self::Output {
        self.go::<Combining<R>>(lock)
    }
    fn rwlock<R: FullRwLock>(&mut self, _: &'static LockInfo) -> Self::Output {
        None
    }
}

impl<V: MutexVisitor> Visitor for Mutexes<V> {
    fn data_mutex<F: MutexFamily>(&mut self, lock: &'static LockInfo) -> Self::Output {
        self.go::<F>(lock)
    }
    fn data_rwlock<F: RwLockFamily>(&mut self, _: &'static LockInfo) -> Self::Output {
        None
    }
}

/// Adapts a [`RwLockVisitor`] to the registry's visitor (mutexes give `None`).
struct RwLocks<V>(Option<V>);

impl<V: RwLockVisitor> RwLocks<V> {
    fn go<K: RwLockKind>(&mut self, lock: &'static LockInfo) -> Option<V::Output> {
        let v = self.0.take().expect("one visit per dispatch");
        Some(v.visit::<K>(LockName(lock.index)))
    }
}

impl<V: RwLockVisitor> LockApiVisitor for RwLocks<V> {
    type Output = Option<V::Output>;
    fn fair_mutex<R: FairMutex>(&mut self, _: &'static LockInfo) -> Self::Output {
        None
    }
    fn rwlock<R: FullRwLock>(&mut self, lock: &'static LockInfo) -> Self::Output {
        self.go::<LockApi<R>>(lock)
    }
}

impl<V: RwLockVisitor> Visitor for RwLocks<V> {
    fn data_mutex<F: MutexFamily>(&mut self, _: &'static LockInfo) -> Self::Output {
        None
    }
    fn data_rwlock<F: RwLockFamily>(&mut self, lock: &'static LockInfo) -> Self::Output {
        self.go::<F>(lock)
    }
}

/// Calls `v.visit::<K>()` with the mutex family `lock` names; `None` for an rwlock name.
pub fn dispatch_mutex<V: MutexVisitor>(lock: LockName, v: V) -> Option<V::Output> {
    registry::visit(lock.info(), &mut Mutexes(Some(v)))
}

/// Calls `v.visit::<K>()` with the rwlock family `lock` names; `None` for a mutex name.
pub fn dispatch_rwlock<V: RwLockVisitor>(lock: LockName, v: V) -> Option<V::Output> {
    registry::visit(lock.info(), &mut RwLocks(Some(v)))
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
            let m = <K::Mutex<u64> as DataMutex<u64>>::new(0);
            for i in 0..10 {
                if i % 2 == 0 {
                    BenchMutex::with(&m, |x| *x += 1);
                } else {
                    BenchMutex::with_send(&m, |x| *x += 1);
                }
            }
            BenchMutex::with_send(&m, |x| *x)
        }
    }

    #[test]
    fn names_and_order_unchanged() {
        let names: Vec<_> = LockName::ALL.iter().map(|l| l.as_str()).collect();
        assert_eq!(
            names,
            [
                "cna",
                "queued",
                "hq",
                "combining",
                "cst",
                "parking_lot",
                "std",
                "spin",
                "ticket",
                "cst-rw",
                "parking_lot-rw",
                "std-rw"
            ]
        );
        assert_eq!(LockName::ParkingLotRw.as_str(), "parking_lot-rw");
        assert!(LockName::StdRw.is_rwlock() && !LockName::Ticket.is_rwlock());
    }

    /// Whether `with_send` of the dispatched family ran a closure on another
    /// thread than its caller: a holder keeps the lock (through `with`) while
    /// two threads submit a closure each; one of them is its node's combiner
    /// and runs the other's. Retried, since a thread slow to start may find
    /// the lock free.
    struct ShipsClosures;
    impl MutexVisitor for ShipsClosures {
        type Output = bool;
        fn visit<K: MutexKind>(self, _: LockName) -> bool {
            use std::sync::atomic::{AtomicBool, Ordering};
            use std::thread;
            use std::time::Duration;
            for _ in 0..10 {
                let m = <K::Mutex<u64> as DataMutex<u64>>::new(0);
                let held = AtomicBool::new(false);
                let shipped = thread::scope(|s| {
                    s.spawn(|| {
                        BenchMutex::with(&m, |_| {
                            held.store(true, Ordering::SeqCst);
                            thread::sleep(Duration::from_millis(60));
                        })
                    });
                    while !held.load(Ordering::SeqCst) {
                        thread::yield_now();
                    }
                    let submitters: Vec<_> = (0..2)
                        .map(|_| {
                            let h = s.spawn(|| {
                                let me = thread::current().id();
                                me != BenchMutex::with_send(&m, |x| {
                                    *x += 1;
                                    thread::current().id()
                                })
                            });
                            thread::sleep(Duration::from_millis(10));
                            h
                        })
                        .collect();
                    submitters.into_iter().any(|h| h.join().unwrap())
                });
                assert_eq!(BenchMutex::with(&m, |x| *x), 2);
                if shipped {
                    return true;
                }
            }
            false
        }
    }

    #[test]
    fn only_the_combining_lock_ships_closures() {
        assert_eq!(
            dispatch_mutex(LockName::Combining, ShipsClosures),
            Some(true)
        );
        assert_eq!(dispatch_mutex(LockName::Cna, ShipsClosures), Some(false));
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
