//! The engine of the `numa-bench` command: locktorture-style lock comparisons.
//!
//! `numa-bench` shows, on the user's own machine, what each lock does to
//! throughput, fairness and cross-node traffic. This library holds the parts the
//! command and the criterion benches share: the locks behind one small trait
//! ([`locks`]), the workloads ([`workloads`]), the measurement harness
//! ([`harness`]), the metrics ([`metrics`]), the `compare` suite with its
//! table, JSON, CSV and SVG output ([`compare`], [`report`], [`plot`]) and the
//! point-by-point comparison of two result sets ([`diff`]).
//!
//! Use it through the command (`cargo run --release -p numa-bench -- compare`);
//! the library API is for the benches and tests of this workspace and is not
//! published.
//!
//! ```
//! use std::time::Duration;
//! use numa_bench::harness::{run_point, RunConfig, WorkloadSpec};
//! use numa_bench::locks::LockName;
//! use numa_bench::machine::{Machine, Placement};
//! use numa_bench::workloads::WorkloadName;
//!
//! let machine = Machine::detect();
//! let cfg = RunConfig {
//!     lock: LockName::ParkingLot,
//!     workload: WorkloadSpec::default_for(WorkloadName::Kv),
//!     threads: 2,
//!     duration: Duration::from_millis(20),
//!     placement: Placement::new(&machine, Some(2))?,
//!     remote_penalty_ns: 0,
//!     latency_sample_every: 16,
//!     machine,
//!     hog_threads: 0,
//!     idle_gaps: false,
//! };
//! let point = run_point(&cfg)?;
//! assert_eq!(point.ops_per_thread.len(), 2);
//! assert!(point.is_virtual);
//! # Ok::<(), numa_bench::BenchError>(())
//! ```
//!
//! # Cargo features
//! - `hwloc` (off by default): passed on to `numa-topology`: read the machine through
//!   hwloc and accept `numa-bench topology --xml FILE` / `--synthetic DESC`. Needs the
//!   system libhwloc >= 2.8 with its development files (Debian: `apt-get install
//!   libhwloc-dev libudev-dev pkg-config`). Without it the command reads the machine
//!   from Linux sysfs (one node holding every CPU on other systems) and links no C
//!   library beyond libc.
//! - `lock-stats`: numa-spin's per-lock counters in the reports (see the README).

pub mod apps;
pub mod compare;
pub mod delay;
pub mod diff;
pub mod handoff;
pub mod harness;
pub mod locks;
pub mod machine;
pub mod metrics;
pub mod ours;
pub mod plot;
pub mod preset;
pub mod report;
pub mod requeue;
pub mod workloads;

use locks::LockName;
use workloads::WorkloadName;

/// Everything that can go wrong in a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// `--lock` named no known lock.
    #[error("unknown lock {0:?}: expected one of {known}", known = locks::known_names())]
    UnknownLock(String),
    /// `--workload` named no known workload.
    #[error("unknown workload {0:?}: expected one of locktorture, kv, page-alloc, rwlock")]
    UnknownWorkload(String),
    /// A mutex with the rwlock workload, or an rwlock with a mutex workload.
    #[error(
        "lock {lock} cannot run workload {workload}: the rwlock workload needs cst-rw, parking_lot-rw or std-rw, the others need a mutex"
    )]
    WrongLockKind {
        /// The lock asked for.
        lock: LockName,
        /// The workload asked for.
        workload: WorkloadName,
    },
    /// A bad argument value.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidArg {
        /// The option or input.
        what: &'static str,
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Writing an output file failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Drawing a plot failed.
    #[error("cannot draw plot {path}: {reason}")]
    Plot {
        /// The SVG file.
        path: String,
        /// plotters' error.
        reason: String,
    },
    /// A result file of `diff` cannot be read.
    #[error(
        "cannot read {path}: {source} (expected a result directory of `numa-bench compare`, its points.json, `run --json` output, or a directory of result directories)"
    )]
    MissingResults {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A result file of `diff` is not one numa-bench wrote.
    #[error("{path} is not a numa-bench result file: {reason}")]
    BadResults {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `diff` found no point measured in both result sets.
    #[error(
        "no common points between {old} and {new}: points match by workload, lock, threads, workload parameters and hog threads (e.g. OLD has {old_example:?}, NEW has {new_example:?})"
    )]
    NoCommonPoints {
        /// OLD's file.
        old: String,
        /// NEW's file.
        new: String,
        /// One of OLD's keys.
        old_example: String,
        /// One of NEW's keys.
        new_example: String,
    },
    /// `diff --baseline LOCK` names a lock that neither result set measured.
    #[error("no point of the baseline lock {lock:?} in either input (their locks: {locks})")]
    NoBaseline {
        /// The lock asked for.
        lock: String,
        /// The locks the two inputs hold, comma-separated.
        locks: String,
    },
    /// Serialising JSON failed.
    #[error("cannot serialise JSON: {0}")]
    Json(#[from] serde_json::Error),
}
