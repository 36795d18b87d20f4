//! The shared generic test suite run against every lock of the workspace (not
//! published).
//!
//! Tests are written once as generic functions over the `lock_api` raw traits and
//! instantiated per lock with a macro, as in `mcslock`'s `src/test.rs`:
//!
//! ```ignore
//! // in crates/numa-spin/tests/suite.rs
//! lock_tests::mutex_suite!(cna, numa_spin::RawMutex, guard: Send);
//! lock_tests::mutex_suite!(queued, numa_spin::RawQueuedMutex, guard: Send);
//! ```
//!
//! Threads are placed on virtual NUMA nodes with
//! [`numa_topology::set_current_thread_node`], so NUMA-aware locks take their NUMA
//! paths on a one-node machine. No test asserts on time.

pub mod condvar;
pub mod mutex;
pub mod rwlock;

#[doc(hidden)]
pub use lock_api;
#[doc(hidden)]
pub use numa_topology;
#[doc(hidden)]
pub use static_assertions;
