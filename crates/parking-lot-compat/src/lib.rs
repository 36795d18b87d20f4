//! parking_lot 0.12's API on this workspace's NUMA-aware locks: a package named
//! `parking_lot`, version 0.12.5, to put in place of the real one with
//! `[patch.crates-io]`, so a whole program (and every dependency on
//! `parking_lot = "0.12"`) runs on cst-mutex or numa-spin without a code change.
//!
//! # What it is
//!
//! The same items as parking_lot 0.12.5, built on lock_api 0.4 like parking_lot:
//! [`Mutex`], [`FairMutex`], [`RwLock`], [`ReentrantMutex`], [`Condvar`],
//! [`Once`], their guards and mapped guards, the raw types ([`RawMutex`],
//! [`RawFairMutex`], [`RawRwLock`], [`RawThreadId`]) with the same lock_api
//! traits (fair, timed, upgradable, downgrade, recursive reads), the `const_*`
//! constructors and `pub use lock_api`.
//!
//! # When to use it
//!
//! To find out whether NUMA-aware locks help a program on a multi-node machine,
//! without editing its code or its dependencies. On a single-node machine it is
//! meant to cost nothing against parking_lot, not to win. Not for publishing:
//! it is a `[patch]` for your own builds (`publish = false`). See README.md,
//! "Try it on your program".
//!
//! # Backends
//!
//! Chosen at build time, so the lock path has no dispatch (the raw types are
//! re-exports of the chosen crate's):
//!
//! | backend | `Mutex`, `FairMutex`, `ReentrantMutex` | `RwLock` | `Condvar` |
//! | --- | --- | --- | --- |
//! | `cst` (default) | cst-mutex: blocking lock on numa-spin's CNA queue (spin, then park; woken ahead of the turn) | cst-mutex | cst-mutex's, requeues onto the mutex |
//! | `cna` | numa-spin: CNA queue spinlock | cst-mutex | parking_lot_core-based, wakes all on `notify_all` |
//! | `hq` | numa-spin: HQ hierarchical queue spinlock (`FairMutex`: the fair CNA lock) | cst-mutex | as `cna` |
//!
//! Select with either (the two must agree if both are set):
//!
//! - `RUSTFLAGS='--cfg parking_lot_compat="cna"'`, or
//! - `PARKING_LOT_COMPAT_BACKEND=cna` in the environment of `cargo build`.
//!
//! Any other value fails the build with the list of accepted ones. Use `cna`
//! or `hq` only when the program has at most one running thread per CPU: the
//! spinlock's queue head spins for as long as the lock is held.
//!
//! # Differences from parking_lot 0.12
//!
//! The API is the same; these observable details are not:
//!
//! - Sizes: `Mutex<()>` is 8 bytes with `cst` and `cna` (1 in parking_lot),
//!   `RwLock<()>` 16 (8), `Condvar` 16 with `cst` (8).
//! - `MutexGuard` (and the fair and reentrant guards) are `Send` with every
//!   backend. RwLock guards are never `Send`, even with `send_guard`: a read
//!   lock is released by the thread that took it (see [`RwLock`]).
//! - The two-mutex `Condvar` panic says so in cst-mutex's words with the `cst`
//!   backend (parking_lot: "attempted to use a condition variable with more
//!   than one mutex", which the `cna` backend uses).
//! - [`Once`] is parking_lot's own code and also has 0.13's additions.
//!
//! # Examples
//!
//! ```
//! use parking_lot::{const_mutex, Condvar, Mutex, Once, RwLock};
//!
//! static COUNT: Mutex<u32> = const_mutex(0);
//! static INIT: Once = Once::new();
//!
//! INIT.call_once(|| *COUNT.lock() += 1);
//! INIT.call_once(|| *COUNT.lock() += 1);
//! assert_eq!(*COUNT.lock(), 1);
//!
//! let table = RwLock::new(vec![1, 2]);
//! assert_eq!(table.read().len(), 2);
//! let cv = Condvar::new();
//! assert!(!cv.notify_one());
//! ```
//!
//! # Cargo features
//!
//! parking_lot's, so that a dependent that enables them builds:
//!
//! - `arc_lock`, `serde`, `owning_ref`: as in parking_lot (lock_api's).
//! - `send_guard`: accepted; mutex guards are `Send` anyway, RwLock guards
//!   are not (see above).
//! - `nightly`, `hardware-lock-elision`: accepted and ignored (optimisations
//!   of parking_lot's own lock word).
//! - `deadlock_detection`: fails the build. parking_lot's detector needs every
//!   lock to report its acquisitions and releases to parking_lot_core and its
//!   waits to park in parking_lot_core; numa-spin does not park there, and
//!   neither backend reports. Build without the `[patch]` to use the detector.
//!   So `--all-features` does not build: use the explicit list
//!   `--features arc_lock,serde,owning_ref,send_guard,nightly,hardware-lock-elision`.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "deadlock_detection")]
compile_error!(
    "parking_lot (NUMA drop-in): the `deadlock_detection` feature is not supported: parking_lot's \
     detector needs every lock to report acquisitions and releases to parking_lot_core and to \
     park there, which cst-mutex and numa-spin do not do. Build without the [patch.crates-io] \
     entry for parking_lot to use deadlock detection."
);

mod backend;
mod condvar;
mod fair_mutex;
mod mutex;
mod once;
#[cfg(any(plc_backend = "cna", plc_backend = "hq"))]
mod park_condvar;
mod remutex;
mod rwlock;

pub use lock_api04 as lock_api;

pub use backend::{RawFairMutex, RawMutex, RawRwLock, RawThreadId};
pub use condvar::{Condvar, WaitTimeoutResult};
pub use fair_mutex::{FairMutex, FairMutexGuard, MappedFairMutexGuard, const_fair_mutex};
pub use mutex::{MappedMutexGuard, Mutex, MutexGuard, const_mutex};
pub use once::{Once, OnceState};
pub use remutex::{
    MappedReentrantMutexGuard, ReentrantMutex, ReentrantMutexGuard, const_reentrant_mutex,
};
pub use rwlock::{
    MappedRwLockReadGuard, MappedRwLockWriteGuard, RwLock, RwLockReadGuard,
    RwLockUpgradableReadGuard, RwLockWriteGuard, const_rwlock,
};

#[cfg(feature = "arc_lock")]
pub use lock_api04::{
    ArcMutexGuard, ArcReentrantMutexGuard, ArcRwLockReadGuard, ArcRwLockUpgradableReadGuard,
    ArcRwLockWriteGuard,
};

/// The backend this build selected (`"cst"`, `"cna"` or `"hq"`): lets a patched program
/// or a test check which locks it runs on. Not part of parking_lot's API.
#[doc(hidden)]
pub const NUMA_BACKEND: &str = backend::NAME;
