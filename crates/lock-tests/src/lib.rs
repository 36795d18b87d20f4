//! The workspace's verification, in one place (not published): the generic test
//! suites, the exclusion model, the torture test (`tests/torture/`) and the suites'
//! instantiation for every lock (`tests/suite.rs`), all built from the lock
//! registry ([`registry`], the `numa-lock-registry` crate, which `numa-bench`
//! shares). The fuzz target `fuzz/fuzz_targets/lock_ops.rs` depends on this crate
//! for the registry and the model.
//!
//! Tests are written once as generic functions over the `lock_api` raw traits and
//! instantiated per lock with a macro, as in `mcslock`'s `src/test.rs`:
//!
//! ```ignore
//! // in crates/lock-tests/tests/suite.rs: every lock of the registry
//! lock_tests::registry::for_each_lock!(lock_tests::suites_for);
//! // in crates/numa-spin/tests/suite.rs: extra configurations of one lock
//! lock_tests::mutex_suite!(queued_strict_fifo, RawLock<false, StrictFifo>, guard: Send);
//! ```
//!
//! Threads are placed on virtual NUMA nodes with
//! [`numa_topology::set_current_thread_node`], so NUMA-aware locks take their NUMA
//! paths on a one-node machine. No test asserts on speed: the timed suites check
//! only the contract's bounds (a timed-out wait lasts at least its timeout).
//!
//! Empty in model builds (`--cfg numa_loom`): the loom and shuttle tests of the
//! lock crates build their dev-dependencies too, and the locks there are the
//! models' (no `const` constructors, no `lock_api` impls).
#![cfg(not(numa_loom))]

pub mod combining;
pub mod condvar;
pub mod model;
pub mod mutex;
pub mod rwlock;
pub mod timed;

pub use numa_lock_registry as registry;

#[doc(hidden)]
pub use lock_api;
#[doc(hidden)]
pub use numa_topology;
#[doc(hidden)]
pub use static_assertions;

/// The registry callback that instantiates the generic suites for every `lock_api`
/// lock: `registry::for_each_lock!(lock_tests::suites_for)` makes a module per
/// lock (named by its registry ident) with submodules `mutex`, `timed`,
/// `combining`, `condvar` and `rwlock` as its shape allows, so a test is named
/// e.g. `cst::condvar::wait_while` or `combining::combining::exclusion_8_threads_4_nodes`.
#[macro_export]
macro_rules! suites_for {
    ($($id:ident: $name:literal in $krate:literal, $shape:ident($t:ty);)*) => {
        $($crate::__suites_for_lock!($id, $shape, $t);)*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __suites_for_lock {
    ($id:ident, fair_mutex, $t:ty) => {
        #[allow(missing_docs)]
        mod $id {
            $crate::mutex_suite!(mutex, $t);
        }
    };
    ($id:ident, timed_mutex, $t:ty) => {
        #[allow(missing_docs)]
        mod $id {
            $crate::mutex_suite!(mutex, $t);
            $crate::timed_mutex_suite!(timed, $t);
        }
    };
    ($id:ident, combining_mutex, $t:ty) => {
        #[allow(missing_docs)]
        mod $id {
            $crate::mutex_suite!(mutex, $t);
            $crate::timed_mutex_suite!(timed, $t);
            $crate::combining_suite!(combining, $t);
        }
    };
    ($id:ident, condvar, $t:ty) => {
        #[allow(missing_docs)]
        mod $id {
            $crate::mutex_suite!(mutex, <$t as $crate::lock_api::RawCondvar>::RawMutex);
            $crate::timed_mutex_suite!(timed, <$t as $crate::lock_api::RawCondvar>::RawMutex);
            $crate::condvar_suite!(condvar, $t, exact: true);
        }
    };
    ($id:ident, rwlock, $t:ty) => {
        #[allow(missing_docs)]
        mod $id {
            $crate::rwlock_suite!(rwlock, $t);
        }
    };
    ($id:ident, data_mutex, $t:ty) => {};
    ($id:ident, data_rwlock, $t:ty) => {};
}
