//! The workloads: what each thread does outside and inside the critical section.
//!
//! A workload splits one operation into `prepare` (outside the lock: pick a key,
//! work on per-thread state), `critical` (inside the lock, on the shared state) and
//! `after` (outside the lock: the non-critical delay). One operation is one lock
//! acquisition. The harness ([`crate::harness`]) adds the node-switch tracking and
//! the remote-penalty cost model around `critical`. With the `combining` lock,
//! `critical` may run on another thread (the combiner of the caller's NUMA node),
//! with the caller's per-thread state and request lent to it: it must read
//! nothing thread-local (hence `Local: Send` and `Req: Send`).

pub mod kv;
pub mod locktorture;
pub mod page_alloc;
pub mod rwlock;

use std::fmt;
use std::str::FromStr;

/// A workload run under a mutex.
pub trait MutexWorkload: Sync {
    /// The state behind the lock.
    type Shared: Send;
    /// Per-thread state. `Send`: `critical` may run on another thread (the
    /// combiner of a combining lock) with the caller's `local`.
    type Local: Send;
    /// What `prepare` hands to `critical` (`Send` for the same reason).
    type Req: Send;
    /// Builds the shared state for `threads` threads.
    fn shared(&self, threads: usize) -> Self::Shared;
    /// Builds thread `thread`'s state.
    fn local(&self, thread: usize) -> Self::Local;
    /// Work before taking the lock.
    fn prepare(&self, local: &mut Self::Local) -> Self::Req;
    /// The critical section.
    fn critical(&self, shared: &mut Self::Shared, local: &mut Self::Local, req: Self::Req);
    /// Work after releasing the lock (the non-critical delay).
    fn after(&self, _local: &mut Self::Local) {}
    /// The parameters, human readable, for reports.
    fn params(&self) -> String;
}

/// Whether one rwlock operation reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Shared acquisition.
    Read,
    /// Exclusive acquisition.
    Write,
}

/// A workload run under a reader-writer lock.
pub trait RwWorkload: Sync {
    /// The state behind the lock.
    type Shared: Send + Sync;
    /// Per-thread state.
    type Local;
    /// What `prepare` hands to the critical section.
    type Req;
    /// Builds the shared state.
    fn shared(&self, threads: usize) -> Self::Shared;
    /// Builds thread `thread`'s state.
    fn local(&self, thread: usize) -> Self::Local;
    /// Work before taking the lock; says how to take it.
    fn prepare(&self, local: &mut Self::Local) -> (Access, Self::Req);
    /// Critical section under the shared lock.
    fn read(&self, shared: &Self::Shared, local: &mut Self::Local, req: Self::Req);
    /// Critical section under the exclusive lock.
    fn write(&self, shared: &mut Self::Shared, local: &mut Self::Local, req: Self::Req);
    /// The parameters, human readable.
    fn params(&self) -> String;
}

/// The workloads by command-line name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadName {
    /// `locktorture`: K shared cache lines updated in the CS, then a delay.
    Locktorture,
    /// `kv`: a HashMap, 90/10 get/put over Zipf keys.
    Kv,
    /// `page-alloc`: a zone free list fed and drained by per-thread caches.
    PageAlloc,
    /// `rwlock`: the kv map under an rwlock.
    RwLock,
}

impl WorkloadName {
    /// All workloads.
    pub const ALL: [WorkloadName; 4] = [
        WorkloadName::Locktorture,
        WorkloadName::Kv,
        WorkloadName::PageAlloc,
        WorkloadName::RwLock,
    ];
    /// The command-line name.
    pub const fn as_str(self) -> &'static str {
        match self {
            WorkloadName::Locktorture => "locktorture",
            WorkloadName::Kv => "kv",
            WorkloadName::PageAlloc => "page-alloc",
            WorkloadName::RwLock => "rwlock",
        }
    }
}

impl fmt::Display for WorkloadName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WorkloadName {
    type Err = crate::BenchError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        WorkloadName::ALL
            .into_iter()
            .find(|w| w.as_str() == s)
            .ok_or_else(|| crate::BenchError::UnknownWorkload(s.to_owned()))
    }
}
