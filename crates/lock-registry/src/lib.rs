//! The one list of the locks the numa-locks workspace verifies and benchmarks, with
//! what each supports, and a typed dispatch over it.
//!
//! [`for_each_lock!`] is the registry: one line per lock, giving its name (spelled as
//! `numa-bench` spells it on its command line and in its JSON output, and everywhere
//! else), the crate it comes from, and its *shape*: the `lock_api` traits it
//! implements. Everything else is derived from it:
//!
//! - [`LOCKS`]: every lock's [`LockInfo`] (name, crate, [`Shape`], [`Caps`]), in
//!   registry order; [`lock`] finds one by name.
//! - [`visit`] / [`visit_lock_api`]: call the [`Visitor`] / [`LockApiVisitor`] method of
//!   a lock's shape with the lock's type, so generic code (a test, a torture target,
//!   a benchmark run) is instantiated for it with the trait bounds its shape proves.
//! - `for_each_lock!(my_macro)`: expands `my_macro! { ident: "name" in "crate",
//!   shape(Type); ... }` once with every line, for code that needs one item per lock
//!   (e.g. one `#[test]` module per lock).
//!
//! # Shapes
//!
//! | shape | type given | bounds proved | [`Caps`] |
//! | --- | --- | --- | --- |
//! | `fair_mutex` | raw mutex | [`FairMutex`] | `FAIR` |
//! | `timed_mutex` | raw mutex | [`TimedMutex`] | `FAIR \| TIMED` |
//! | `combining_mutex` | raw mutex | [`CombiningMutex`] | `FAIR \| TIMED \| COMBINING` |
//! | `condvar` | raw condvar (its mutex is `C::RawMutex`) | [`TimedCondvar`] | `FAIR \| TIMED \| CONDVAR` |
//! | `rwlock` | raw rwlock | [`FullRwLock`] | `FAIR \| TIMED \| UPGRADABLE \| DOWNGRADE` |
//! | `data_mutex` | a [`MutexFamily`] (std, spin: not `lock_api`) | [`MutexFamily`] | none |
//! | `data_rwlock` | a [`RwLockFamily`] | [`RwLockFamily`] | none |
//!
//! A `combining_mutex` is a [`TimedMutex`] (its `lock()` guards are ordinary
//! `lock_api` guards, and everything written for a timed mutex runs on it) that
//! can also run a critical section as a closure shipped to a *combiner*, a
//! thread of the caller's NUMA node that holds the lock and runs the queued
//! closures of its node in a batch ([`CombiningMutex::combine`]; the algorithm
//! is `numa_spin::CombiningMutex`'s). Through [`MutexFamily`] it is
//! [`Combining<R>`], whose [`DataMutex::with_send`] combines. A visitor that
//! does not implement [`LockApiVisitor::combining_mutex`] sees it as a timed
//! mutex.
//!
//! # Adding a lock
//!
//! One line in [`for_each_lock!`]. Where it goes is the order of [`LOCKS`] (and of
//! `numa-bench`'s lock list: mutexes first). A lock with fewer traits than any shape
//! needs a new shape (a [`LockApiVisitor`] method with a default that forwards to a
//! weaker shape, as `timed_mutex` forwards to `fair_mutex`); so does a lock with
//! more than its shape can use (as `combining_mutex` forwards to `timed_mutex`).
//!
//! ```
//! use numa_lock_registry::{LockApiVisitor, LockInfo, FairMutex, FullRwLock, LOCKS};
//!
//! /// Locks and unlocks every lock_api lock once.
//! struct Smoke;
//! impl LockApiVisitor for Smoke {
//!     type Output = &'static str;
//!     fn fair_mutex<R: FairMutex>(&mut self, lock: &'static LockInfo) -> &'static str {
//!         let m = lock_api::Mutex::<R, u32>::new(1);
//!         lock_api::MutexGuard::unlock_fair(m.lock());
//!         lock.name
//!     }
//!     fn rwlock<R: FullRwLock>(&mut self, lock: &'static LockInfo) -> &'static str {
//!         let l = lock_api::RwLock::<R, u32>::new(1);
//!         assert_eq!(*l.upgradable_read(), 1);
//!         lock.name
//!     }
//! }
//! let visited: Vec<_> = LOCKS
//!     .iter()
//!     .filter_map(|l| numa_lock_registry::visit_lock_api(l, &mut Smoke))
//!     .collect();
//! assert_eq!(
//!     visited,
//!     ["cna", "queued", "hq", "combining", "cst", "parking_lot", "cst-rw", "parking_lot-rw"]
//! );
//! ```
//!
//! Empty in model builds (`--cfg numa_loom`): the loom and shuttle tests of the
//! lock crates build their dev-dependencies too, and the locks there are the
//! models' (no `const` constructors, no `lock_api` impls).
#![cfg(not(numa_loom))]

use std::any::Any;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use lock_api::{
    RawCondvarTimed, RawMutex, RawMutexFair, RawMutexTimed, RawRwLock, RawRwLockTimed,
    RawRwLockUpgradeDowngrade, RawRwLockUpgradeFair, RawRwLockUpgradeTimed,
};

#[doc(hidden)]
pub use {cst_mutex, lock_api, numa_spin, parking_lot, spin};

/// The registry: calls `$callback!` with one line per lock,
/// `ident: "name" in "crate", shape(Type);`.
///
/// `ident` is `name` with `-` spelled `_` (checked by a test), for item names.
/// The shapes are listed in the [crate docs](crate#shapes).
#[macro_export]
macro_rules! for_each_lock {
    ($callback:ident) => {
        $callback! {
            cna:            "cna"            in "numa-spin",   timed_mutex($crate::numa_spin::RawMutex);
            queued:         "queued"         in "numa-spin",   timed_mutex($crate::numa_spin::RawQueuedMutex);
            hq:             "hq"             in "numa-spin",   timed_mutex($crate::numa_spin::RawHqMutex);
            combining:      "combining"      in "numa-spin",   combining_mutex($crate::numa_spin::RawCombiningMutex);
            cst:            "cst"            in "cst-mutex",   condvar($crate::cst_mutex::RawCondvar);
            parking_lot:    "parking_lot"    in "parking_lot", condvar($crate::parking_lot::RawCondvar);
            std:            "std"            in "std",         data_mutex($crate::StdMutex);
            spin:           "spin"           in "spin",        data_mutex($crate::SpinMutex);
            ticket:         "ticket"         in "spin",        data_mutex($crate::TicketMutex);
            cst_rw:         "cst-rw"         in "cst-mutex",   rwlock($crate::cst_mutex::RawRwLock);
            parking_lot_rw: "parking_lot-rw" in "parking_lot", rwlock($crate::parking_lot::RawRwLock);
            std_rw:         "std-rw"         in "std",         data_rwlock($crate::StdRwLock);
        }
    };
}

/// What a lock supports beyond plain locking, as bit flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Caps(u8);

impl Caps {
    /// Nothing beyond lock / try_lock / unlock.
    pub const NONE: Caps = Caps(0);
    /// `unlock_fair` and `bump` (`RawMutexFair` / `RawRwLockFair`).
    pub const FAIR: Caps = Caps(1);
    /// `try_lock_for` / `try_lock_until` with `std::time` (`RawMutexTimed` / `RawRwLockTimed`).
    pub const TIMED: Caps = Caps(2);
    /// A condition variable bound to the mutex (`RawCondvarTimed`).
    pub const CONDVAR: Caps = Caps(4);
    /// Upgradable reads, with fair and timed variants (`RawRwLockUpgrade*`).
    pub const UPGRADABLE: Caps = Caps(8);
    /// `downgrade` and `downgrade_to_upgradable` (`RawRwLockUpgradeDowngrade`).
    pub const DOWNGRADE: Caps = Caps(16);
    /// Critical sections as `Send` closures that a combiner may run on another
    /// thread ([`CombiningMutex::combine`], [`DataMutex::with_send`]).
    pub const COMBINING: Caps = Caps(32);

    /// Both sets.
    pub const fn with(self, other: Caps) -> Caps {
        Caps(self.0 | other.0)
    }

    /// Whether every flag of `other` is set.
    pub const fn has(self, other: Caps) -> bool {
        self.0 & other.0 == other.0
    }
}

/// The `lock_api` traits a lock implements; see the [crate docs](crate#shapes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// A [`FairMutex`].
    FairMutex,
    /// A [`TimedMutex`].
    TimedMutex,
    /// A [`CombiningMutex`]: a timed mutex that also combines closures.
    CombiningMutex,
    /// A [`TimedCondvar`] and its mutex.
    Condvar,
    /// A [`FullRwLock`].
    RwLock,
    /// A mutex outside `lock_api` ([`MutexFamily`]).
    DataMutex,
    /// A reader-writer lock outside `lock_api` ([`RwLockFamily`]).
    DataRwLock,
}

impl Shape {
    /// What the shape supports.
    pub const fn caps(self) -> Caps {
        match self {
            Shape::FairMutex => Caps::FAIR,
            Shape::TimedMutex => Caps::FAIR.with(Caps::TIMED),
            Shape::CombiningMutex => Caps::FAIR.with(Caps::TIMED).with(Caps::COMBINING),
            Shape::Condvar => Caps::FAIR.with(Caps::TIMED).with(Caps::CONDVAR),
            Shape::RwLock => Caps::FAIR
                .with(Caps::TIMED)
                .with(Caps::UPGRADABLE)
                .with(Caps::DOWNGRADE),
            Shape::DataMutex | Shape::DataRwLock => Caps::NONE,
        }
    }

    /// Whether the lock is a reader-writer lock.
    pub const fn is_rwlock(self) -> bool {
        matches!(self, Shape::RwLock | Shape::DataRwLock)
    }

    /// Whether the lock implements the `lock_api` raw traits.
    pub const fn is_lock_api(self) -> bool {
        !matches!(self, Shape::DataMutex | Shape::DataRwLock)
    }
}

/// One lock of the registry.
#[derive(Clone, Copy, Debug)]
pub struct LockInfo {
    /// The lock's one name (`cna`, `parking_lot-rw`, ...).
    pub name: &'static str,
    /// The crate it comes from (`numa-spin`, `parking_lot`, `std`, ...).
    pub krate: &'static str,
    /// The `lock_api` traits it implements.
    pub shape: Shape,
    /// Position in [`LOCKS`].
    pub index: usize,
    type_name: fn() -> &'static str,
}

impl LockInfo {
    /// What the lock supports.
    pub const fn caps(&self) -> Caps {
        self.shape.caps()
    }

    /// The Rust type the registry names for it (the raw lock, the raw condvar of a
    /// `condvar` shape, or the family of a `data_*` shape).
    pub fn type_name(&self) -> &'static str {
        (self.type_name)()
    }
}

/// A `lock_api` raw mutex with `unlock_fair` and `bump`.
pub trait FairMutex: RawMutex + RawMutexFair + Send + Sync + 'static {}
impl<R: RawMutex + RawMutexFair + Send + Sync + 'static> FairMutex for R {}

/// A [`FairMutex`] with `try_lock_for` / `try_lock_until` over `std::time`.
pub trait TimedMutex: FairMutex + RawMutexTimed<Duration = Duration, Instant = Instant> {}
impl<R: FairMutex + RawMutexTimed<Duration = Duration, Instant = Instant>> TimedMutex for R {}

/// A [`TimedMutex`] that can also run a critical section as a closure shipped to
/// the lock holder: a *combiner* of the caller's NUMA node runs the queued
/// closures of its node one after another under the lock (flat combining per
/// node, H-Synch's shape; see `numa_spin::CombiningMutex`). `lock()` guards and
/// combined closures exclude each other.
pub trait CombiningMutex: TimedMutex {
    /// Runs `f` on `*data` under the lock, on this thread or on a combiner
    /// thread of this thread's NUMA node, and returns its result; a panic of
    /// `f` is resumed on this thread. `f` may run on another thread, so it,
    /// its result and the data are `Send`, and it must not rely on this
    /// thread's thread-local state (its NUMA node, its thread id). The closure
    /// always runs on the `data` of its own call: callers may pass their own
    /// objects, of their own types.
    ///
    /// # Safety
    ///
    /// (`numa_spin::RawCombiningMutex::combine`'s contract.)
    /// - `data` is valid for reads and writes of a `T` until this call
    ///   returns;
    /// - while this call runs, every other access to `*data` is made under
    ///   this lock: by a holder of this lock, or by a closure of a `combine`
    ///   on this lock with the same pointer.
    ///
    /// A caller that holds the lock waits forever, as a second `lock()` would
    /// (debug builds of numa-spin panic when a closure re-enters its lock).
    unsafe fn combine<T, X, F>(&self, data: *mut T, f: F) -> X
    where
        T: Send,
        F: FnOnce(&mut T) -> X + Send,
        X: Send;
}

impl<Tn: numa_spin::Tunables> CombiningMutex for numa_spin::RawCombiningMutex<Tn>
where
    Self: TimedMutex,
{
    #[inline]
    unsafe fn combine<T, X, F>(&self, data: *mut T, f: F) -> X
    where
        T: Send,
        F: FnOnce(&mut T) -> X + Send,
        X: Send,
    {
        // SAFETY: the caller's contract is this method's.
        unsafe { numa_spin::RawCombiningMutex::combine(self, data, f) }
    }
}

/// Runs `f` on the data of `mutex` under its lock through
/// [`CombiningMutex::combine`]: on this thread, or on a combiner thread of this
/// thread's NUMA node; a panic of `f` is resumed here. Like a second `lock()`,
/// it waits forever if this thread holds the lock (a guard, or inside a
/// closure of this lock).
#[inline]
pub fn combine<R, T, X>(mutex: &lock_api::Mutex<R, T>, f: impl FnOnce(&mut T) -> X + Send) -> X
where
    R: CombiningMutex,
    T: Send,
    X: Send,
{
    // SAFETY:
    // - the data is a `T` that lives as long as `mutex`, which outlives this
    //   call;
    // - every other access to it is made under the raw lock: through guards
    //   of `mutex` and by closures combined on the same raw lock with the
    //   same pointer (only `unsafe` code can unlock the raw lock behind
    //   `mutex`'s back, and it must not);
    // - a caller that holds the lock waits forever, as a second `lock()`
    //   would: a closure runs only while the raw lock is acquired for it, so
    //   it never overlaps the caller's own access (numa-spin's safe
    //   `CombiningMutex::combine` relies on the same).
    unsafe { mutex.raw().combine(mutex.data_ptr(), f) }
}

/// A `lock_api` raw condvar with timed waits, bound to a [`TimedMutex`].
pub trait TimedCondvar: RawCondvarTimed<RawMutex: TimedMutex> + Send + Sync + 'static {}
impl<C: RawCondvarTimed<RawMutex: TimedMutex> + Send + Sync + 'static> TimedCondvar for C {}

/// A `lock_api` raw reader-writer lock with every optional trait: fair, timed
/// (`std::time`), upgradable (fair and timed too), downgrade.
pub trait FullRwLock:
    RawRwLockUpgradeFair
    + RawRwLockUpgradeDowngrade
    + RawRwLockUpgradeTimed
    + RawRwLockTimed<Duration = Duration, Instant = Instant>
    + Send
    + Sync
    + 'static
{
}
impl<R> FullRwLock for R where
    R: RawRwLockUpgradeFair
        + RawRwLockUpgradeDowngrade
        + RawRwLockUpgradeTimed
        + RawRwLockTimed<Duration = Duration, Instant = Instant>
        + Send
        + Sync
        + 'static
{
}

/// Code generic over the `lock_api` locks of the registry, one method per shape.
///
/// The `timed_mutex` and `condvar` methods forward to the weaker shape by default,
/// so a visitor that only needs a [`FairMutex`] implements `fair_mutex` and
/// `rwlock`, and still sees every mutex.
pub trait LockApiVisitor {
    /// What a visit returns.
    type Output;

    /// A mutex with `unlock_fair` / `bump`.
    fn fair_mutex<R: FairMutex>(&mut self, lock: &'static LockInfo) -> Self::Output;

    /// A mutex with `unlock_fair` / `bump` and timeouts.
    fn timed_mutex<R: TimedMutex>(&mut self, lock: &'static LockInfo) -> Self::Output {
        self.fair_mutex::<R>(lock)
    }

    /// A timed mutex that also runs closures on a combiner
    /// ([`CombiningMutex::combine`]).
    fn combining_mutex<R: CombiningMutex>(&mut self, lock: &'static LockInfo) -> Self::Output {
        self.timed_mutex::<R>(lock)
    }

    /// A timed condvar `C` and its mutex `C::RawMutex`.
    fn condvar<C: TimedCondvar>(&mut self, lock: &'static LockInfo) -> Self::Output {
        self.timed_mutex::<C::RawMutex>(lock)
    }

    /// A reader-writer lock with every optional trait.
    fn rwlock<R: FullRwLock>(&mut self, lock: &'static LockInfo) -> Self::Output;
}

/// A [`LockApiVisitor`] that also handles the locks outside `lock_api` (std, spin).
///
/// A generic [`MutexFamily`] visit of every mutex implements `fair_mutex` with
/// [`LockApi<R>`], `combining_mutex` with [`Combining<R>`] (or leaves it to
/// `fair_mutex`, and loses the combining) and `data_mutex` with `F`.
pub trait Visitor: LockApiVisitor {
    /// A mutex family outside `lock_api`.
    fn data_mutex<F: MutexFamily>(&mut self, lock: &'static LockInfo) -> Self::Output;
    /// A reader-writer lock family outside `lock_api`.
    fn data_rwlock<F: RwLockFamily>(&mut self, lock: &'static LockInfo) -> Self::Output;
}

/// A mutex protecting a `T`, driven through a closure (the common API of `lock_api`,
/// std and spin mutexes).
pub trait DataMutex<T>: Send + Sync {
    /// An unlocked lock around `value`.
    fn new(value: T) -> Self;
    /// Locks, runs `f` on the data, unlocks.
    fn with<X>(&self, f: impl FnOnce(&mut T) -> X) -> X;
    /// Runs `f` on the data under the lock, as [`with`](DataMutex::with) does,
    /// or on another thread where the lock combines ([`Combining`]: `f` is
    /// shipped to the combiner of this thread's NUMA node). Code that can
    /// make its critical section `Send` calls this, so that every lock runs
    /// it its own way; `f` must then not rely on this thread's thread-local
    /// state. The default calls `with`.
    #[inline]
    fn with_send<X: Send>(&self, f: impl FnOnce(&mut T) -> X + Send) -> X {
        self.with(f)
    }
    /// The raw `lock_api` lock inside, if any (to read a lock's own counters).
    fn raw_any(&self) -> Option<&dyn Any> {
        None
    }
}

/// A reader-writer lock protecting a `T`, driven through closures.
pub trait DataRwLock<T>: Send + Sync {
    /// An unlocked lock around `value`.
    fn new(value: T) -> Self;
    /// Locks shared, runs `f`, unlocks.
    fn read<X>(&self, f: impl FnOnce(&T) -> X) -> X;
    /// Locks exclusive, runs `f`, unlocks.
    fn write<X>(&self, f: impl FnOnce(&mut T) -> X) -> X;
    /// The raw `lock_api` lock inside, if any.
    fn raw_any(&self) -> Option<&dyn Any> {
        None
    }
}

/// One mutex algorithm, for any protected type.
pub trait MutexFamily: 'static {
    /// The lock protecting a `T`.
    type Mutex<T: Send>: DataMutex<T>;
}

/// One reader-writer lock algorithm, for any protected type.
pub trait RwLockFamily: 'static {
    /// The lock protecting a `T`.
    type RwLock<T: Send + Sync>: DataRwLock<T>;
}

/// The family of `lock_api::Mutex<R, _>` / `lock_api::RwLock<R, _>`.
pub struct LockApi<R>(PhantomData<fn() -> R>);

impl<R: RawMutex + Send + Sync + 'static> MutexFamily for LockApi<R> {
    type Mutex<T: Send> = lock_api::Mutex<R, T>;
}

impl<R: RawRwLock + Send + Sync + 'static> RwLockFamily for LockApi<R> {
    type RwLock<T: Send + Sync> = lock_api::RwLock<R, T>;
}

impl<R: RawMutex + Send + Sync + 'static, T: Send> DataMutex<T> for lock_api::Mutex<R, T> {
    fn new(value: T) -> Self {
        lock_api::Mutex::new(value)
    }
    #[inline]
    fn with<X>(&self, f: impl FnOnce(&mut T) -> X) -> X {
        f(&mut self.lock())
    }
    fn raw_any(&self) -> Option<&dyn Any> {
        // SAFETY: `raw` is unsafe because the caller could unlock the raw lock
        // behind the wrapper's back; the reference is only read (counters).
        Some(unsafe { self.raw() })
    }
}

impl<R: RawRwLock + Send + Sync + 'static, T: Send + Sync> DataRwLock<T>
    for lock_api::RwLock<R, T>
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
    fn raw_any(&self) -> Option<&dyn Any> {
        // SAFETY: as for the mutex: the reference is only read.
        Some(unsafe { self.raw() })
    }
}

/// The family of [`CombiningLock<R, _>`]: a [`CombiningMutex`] whose
/// [`DataMutex::with_send`] combines.
pub struct Combining<R>(PhantomData<fn() -> R>);

impl<R: CombiningMutex> MutexFamily for Combining<R> {
    type Mutex<T: Send> = CombiningLock<R, T>;
}

/// A `lock_api::Mutex<R, T>` over a [`CombiningMutex`] `R`, driven as a
/// [`DataMutex`]: [`with_send`](DataMutex::with_send) runs the closure through
/// [`combine`], [`with`](DataMutex::with) (closures that are
/// not `Send`) through a `lock()` guard.
pub struct CombiningLock<R: RawMutex, T> {
    inner: lock_api::Mutex<R, T>,
}

impl<R: RawMutex, T> CombiningLock<R, T> {
    /// The `lock_api` mutex inside (guards, `try_lock_for`, ...).
    pub fn as_mutex(&self) -> &lock_api::Mutex<R, T> {
        &self.inner
    }
}

impl<R: CombiningMutex, T: Send> DataMutex<T> for CombiningLock<R, T> {
    fn new(value: T) -> Self {
        CombiningLock {
            inner: lock_api::Mutex::new(value),
        }
    }
    #[inline]
    fn with<X>(&self, f: impl FnOnce(&mut T) -> X) -> X {
        f(&mut self.inner.lock())
    }
    #[inline]
    fn with_send<X: Send>(&self, f: impl FnOnce(&mut T) -> X + Send) -> X {
        combine(&self.inner, f)
    }
    fn raw_any(&self) -> Option<&dyn Any> {
        // SAFETY: as for `lock_api::Mutex`: the reference is only read.
        Some(unsafe { self.inner.raw() })
    }
}

/// `std::sync::Mutex` (futex-based on Linux); poisoning is ignored.
pub struct StdMutex;
impl MutexFamily for StdMutex {
    type Mutex<T: Send> = std::sync::Mutex<T>;
}
impl<T: Send> DataMutex<T> for std::sync::Mutex<T> {
    fn new(value: T) -> Self {
        std::sync::Mutex::new(value)
    }
    #[inline]
    fn with<X>(&self, f: impl FnOnce(&mut T) -> X) -> X {
        f(&mut self
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// `spin::Mutex` 0.12 (test-and-set spinlock, no queue, no parking).
pub struct SpinMutex;
impl MutexFamily for SpinMutex {
    type Mutex<T: Send> = spin::Mutex<T>;
}
impl<T: Send> DataMutex<T> for spin::Mutex<T> {
    fn new(value: T) -> Self {
        spin::Mutex::new(value)
    }
    #[inline]
    fn with<X>(&self, f: impl FnOnce(&mut T) -> X) -> X {
        f(&mut self.lock())
    }
}

/// `spin::TicketMutex` 0.12 (FIFO ticket spinlock, no parking).
pub struct TicketMutex;
impl MutexFamily for TicketMutex {
    type Mutex<T: Send> = spin::mutex::TicketMutex<T>;
}
impl<T: Send> DataMutex<T> for spin::mutex::TicketMutex<T> {
    fn new(value: T) -> Self {
        spin::mutex::TicketMutex::new(value)
    }
    #[inline]
    fn with<X>(&self, f: impl FnOnce(&mut T) -> X) -> X {
        f(&mut self.lock())
    }
}

/// `std::sync::RwLock`; poisoning is ignored.
pub struct StdRwLock;
impl RwLockFamily for StdRwLock {
    type RwLock<T: Send + Sync> = std::sync::RwLock<T>;
}
impl<T: Send + Sync> DataRwLock<T> for std::sync::RwLock<T> {
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

#[doc(hidden)]
#[macro_export]
macro_rules! __shape {
    (fair_mutex) => {
        $crate::Shape::FairMutex
    };
    (timed_mutex) => {
        $crate::Shape::TimedMutex
    };
    (combining_mutex) => {
        $crate::Shape::CombiningMutex
    };
    (condvar) => {
        $crate::Shape::Condvar
    };
    (rwlock) => {
        $crate::Shape::RwLock
    };
    (data_mutex) => {
        $crate::Shape::DataMutex
    };
    (data_rwlock) => {
        $crate::Shape::DataRwLock
    };
}

/// `Some(visitor.shape::<T>(lock))` for a `lock_api` shape, `None` for a `data_*` one.
macro_rules! lock_api_call {
    (data_mutex, $t:ty, $v:ident, $l:expr) => {
        None
    };
    (data_rwlock, $t:ty, $v:ident, $l:expr) => {
        None
    };
    ($shape:ident, $t:ty, $v:ident, $l:expr) => {
        Some($v.$shape::<$t>($l))
    };
}

macro_rules! build_registry {
    ($($id:ident: $name:literal in $krate:literal, $shape:ident($t:ty);)*) => {
        /// Every lock of the registry, in registry order.
        pub const LOCKS: &[LockInfo] = {
            let mut index = 0;
            &[$({
                index += 1;
                LockInfo {
                    name: $name,
                    krate: $krate,
                    shape: __shape!($shape),
                    index: index - 1,
                    type_name: std::any::type_name::<$t>,
                }
            }),*]
        };

        /// Calls the `lock_api` shape method of `v` for `lock` with its type;
        /// `None` for a lock outside `lock_api`.
        pub fn visit_lock_api<V: LockApiVisitor + ?Sized>(
            lock: &'static LockInfo,
            v: &mut V,
        ) -> Option<V::Output> {
            let info = &LOCKS[lock.index];
            match info.name {
                $($name => lock_api_call!($shape, $t, v, info),)*
                _ => unreachable!("LockInfo outside the registry"),
            }
        }

        /// Calls the shape method of `v` for `lock` with its type.
        pub fn visit<V: Visitor + ?Sized>(lock: &'static LockInfo, v: &mut V) -> V::Output {
            let info = &LOCKS[lock.index];
            match info.name {
                $($name => v.$shape::<$t>(info),)*
                _ => unreachable!("LockInfo outside the registry"),
            }
        }
    };
}

for_each_lock!(build_registry);

/// The lock called `name`, if the registry has one.
pub fn lock(name: &str) -> Option<&'static LockInfo> {
    LOCKS.iter().find(|l| l.name == name)
}

/// The `lock_api` locks of the registry (what the suites, torture and fuzz target run).
pub fn lock_api_locks() -> impl Iterator<Item = &'static LockInfo> {
    LOCKS.iter().filter(|l| l.shape.is_lock_api())
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! idents {
        ($($id:ident: $name:literal in $krate:literal, $shape:ident($t:ty);)*) => {
            [$((stringify!($id), $name)),*]
        };
    }

    #[test]
    fn names_are_unique_and_idents_match() {
        let pairs = for_each_lock!(idents);
        assert_eq!(pairs.len(), LOCKS.len());
        for (i, (id, name)) in pairs.iter().enumerate() {
            assert_eq!(*id, name.replace('-', "_"), "ident of {name}");
            assert_eq!(LOCKS[i].name, *name);
            assert_eq!(LOCKS[i].index, i);
            assert_eq!(lock(name).map(|l| l.index), Some(i));
        }
    }

    #[test]
    fn mutexes_first() {
        let first_rw = LOCKS.iter().position(|l| l.shape.is_rwlock()).unwrap();
        assert!(LOCKS[first_rw..].iter().all(|l| l.shape.is_rwlock()));
    }

    #[test]
    fn type_names() {
        assert!(lock("cna").unwrap().type_name().starts_with("numa_spin::"));
        assert!(
            lock("cst")
                .unwrap()
                .caps()
                .has(Caps::CONDVAR.with(Caps::TIMED))
        );
        assert!(!lock("std").unwrap().shape.is_lock_api());
        let combining = lock("combining").unwrap();
        assert_eq!(combining.shape, Shape::CombiningMutex);
        assert!(combining.type_name().contains("RawCombiningMutex"));
        assert!(
            combining
                .caps()
                .has(Caps::FAIR.with(Caps::TIMED).with(Caps::COMBINING))
        );
        assert!(!lock("cna").unwrap().caps().has(Caps::COMBINING));
        assert_eq!(combining.index, lock("hq").unwrap().index + 1);
    }

    /// Which registry method a visit reached, per lock.
    struct ShapeOf;
    impl LockApiVisitor for ShapeOf {
        type Output = &'static str;
        fn fair_mutex<R: FairMutex>(&mut self, _: &'static LockInfo) -> &'static str {
            "fair"
        }
        fn timed_mutex<R: TimedMutex>(&mut self, _: &'static LockInfo) -> &'static str {
            "timed"
        }
        fn rwlock<R: FullRwLock>(&mut self, _: &'static LockInfo) -> &'static str {
            "rwlock"
        }
    }

    #[test]
    fn combining_visits_fall_back_to_timed_mutex() {
        let l = lock("combining").unwrap();
        assert_eq!(visit_lock_api(l, &mut ShapeOf), Some("timed"));
        struct Combines;
        impl LockApiVisitor for Combines {
            type Output = bool;
            fn fair_mutex<R: FairMutex>(&mut self, _: &'static LockInfo) -> bool {
                false
            }
            fn combining_mutex<R: CombiningMutex>(&mut self, _: &'static LockInfo) -> bool {
                true
            }
            fn rwlock<R: FullRwLock>(&mut self, _: &'static LockInfo) -> bool {
                false
            }
        }
        let combining: Vec<_> = lock_api_locks()
            .filter(|l| visit_lock_api(l, &mut Combines) == Some(true))
            .map(|l| l.name)
            .collect();
        assert_eq!(combining, ["combining"]);
    }

    type CombiningLog = CombiningLock<numa_spin::RawCombiningMutex, Vec<std::thread::ThreadId>>;

    /// `with_send` on the combining family ships closures: with the lock held
    /// by a guard, two threads queue a closure each; once released, one of
    /// them runs the other's (it is its node's combiner). Retried, since a
    /// thread that is slow to start may find the lock free.
    #[test]
    fn with_send_combines_and_with_does_not() {
        use std::sync::Arc;
        use std::thread;
        let mut combined = false;
        for _ in 0..20 {
            let m = Arc::new(<CombiningLog as DataMutex<_>>::new(Vec::new()));
            let guard = m.as_mutex().lock();
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    let m = Arc::clone(&m);
                    let h = thread::spawn(move || {
                        let me = thread::current().id();
                        (
                            me,
                            m.with_send(|v| {
                                v.push(me);
                                thread::current().id()
                            }),
                        )
                    });
                    thread::sleep(Duration::from_millis(20));
                    h
                })
                .collect();
            drop(guard);
            for h in hs {
                let (me, ran_on) = h.join().unwrap();
                combined |= me != ran_on;
            }
            assert_eq!(m.with(|v| v.len()), 2);
            if combined {
                break;
            }
        }
        assert!(combined, "no closure of with_send ran on a combiner");
        // `with` runs on the caller, through a guard.
        let m = <CombiningLog as DataMutex<_>>::new(Vec::new());
        let me = std::thread::current().id();
        assert_eq!(m.with(|_| std::thread::current().id()), me);
        assert_eq!(m.with_send(|_| std::thread::current().id()), me);
    }

    /// The default `with_send` is `with`.
    #[test]
    fn default_with_send_locks() {
        let m = <lock_api::Mutex<numa_spin::RawMutex, u64> as DataMutex<u64>>::new(1);
        assert_eq!(m.with_send(|x| std::mem::replace(x, 5)), 1);
        assert_eq!(*m.lock(), 5);
    }
}
