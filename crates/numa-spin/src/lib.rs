//! CNA: a compact NUMA-aware queue spinlock (Dice & Kogan, "Compact NUMA-aware
//! Locks", EuroSys 2019, arXiv 1810.05600) as a [`lock_api`] 0.5 backend, a drop-in
//! for `parking_lot::RawMutex`.
//!
//! On a machine with several NUMA nodes, a contended lock handed from a thread on one
//! node to a thread on another drags the lock word and the data it protects across
//! the interconnect. CNA keeps handing the lock to waiters on the same node (moving
//! the others to a *secondary queue*) and bounds the unfairness by splicing the
//! secondary queue back after a time threshold (1 ms, as in Linux CNA v15). The
//! structure is Linux's qspinlock: an 8-byte lock word, the holder is not in the
//! queue, an uncontended lock/unlock is one compare-and-swap plus one store.
//!
//! # When to use it
//!
//! - Short critical sections under contention from threads on several NUMA nodes,
//!   with about one runnable thread per CPU: threads that rarely get preempted.
//! - As the NUMA-aware counterpart of a plain spinlock, e.g. behind a `static`.
//!
//! # When not to use it
//!
//! - Long critical sections, or threads that block while holding the lock: the
//!   queue head spins and naps for as long as the lock is held (only the
//!   waiters behind it park, see [`WaitPolicy`]), and a FIFO hand-off to a
//!   waiter that is not running waits for it to be scheduled. On oversubscribed
//!   machines (more runnable threads than CPUs) prefer `cst-mutex` (spin, then
//!   park, NUMA aware) or `parking_lot`.
//! - One-node machines gain nothing from the reordering ([`RawQueuedMutex`] is the
//!   same lock without it; `parking_lot::Mutex` is as fast uncontended and sleeps).
//!
//! # Inside a global allocator
//!
//! A numa-spin lock may be the lock inside a `#[global_allocator]`, with no setup
//! call. Queue nodes come from [`std::alloc::System`], never from the global
//! allocator. The first slow path of a process does call it: reading the
//! process-wide tunables ([`Config::global`]) reads the environment and may log
//! a warning, and the first node lookup builds the topology's node map. Both
//! happen before the thread enters its queue node, and neither waits for a
//! first-use initialization in progress (a re-entrant or concurrent first use
//! gets the defaults and node 0 for that one acquisition), so an allocation they
//! make re-enters the lock as a fresh acquisition, before the thread's queue
//! node is in use; from then on the slow path calls nothing that can allocate,
//! log or take another lock until it holds the lock. `tests/global_alloc.rs` runs a whole test binary
//! on such an allocator, `tests/global_alloc_fresh.rs` the first contended
//! acquisitions of fresh processes on each lock. (`cst-mutex` cannot do this: it
//! parks through `parking_lot_core`, whose table allocates.)
//!
//! # Signal handlers and `fork`
//!
//! Each thread has four queue nodes, one per nesting level (qspinlock keeps four
//! per CPU for the task, softirq, hardirq and NMI contexts): a signal handler may
//! take a numa-spin lock while its thread waits for another, or for the same one,
//! four levels deep and beyond (deeper levels wait without a queue node), once
//! the thread has had one contended acquisition outside a handler
//! (`tests/nested.rs`). A handler must not take a lock its thread holds. In a
//! fork's child every lock works: waiters of the parent's other threads are
//! dropped from the queues, the forking thread's locks are its to unlock, and a
//! lock held by another thread of the parent stays held, as with glibc's
//! mutexes (`tests/fork.rs`, with the `pthread_atfork` pattern). The same holds
//! for [`CombiningMutex`]: a handler may `combine` while its thread waits in a
//! `combine` on another lock or on the same one, and a fork's child forgets the
//! requests the parent's other threads had queued (see the [`combining`]
//! module's "Fork" and "Signal handlers"; `tests/combining_nested.rs`,
//! `tests/combining_fork.rs`).
//!
//! # Examples
//!
//! As a `lock_api` backend, like any `RawMutex`:
//!
//! ```
//! use std::sync::Arc;
//!
//! // numa_spin::Mutex<T> = lock_api::Mutex<numa_spin::RawMutex, T>
//! let counter = Arc::new(numa_spin::Mutex::new(0u64));
//! let threads: Vec<_> = (0..4)
//!     .map(|i| {
//!         let counter = Arc::clone(&counter);
//!         std::thread::spawn(move || {
//!             // Tests and benchmarks can place threads on virtual NUMA nodes.
//!             numa_spin::numa_topology::set_current_thread_node(Some(i % 2));
//!             for _ in 0..1000 {
//!                 *counter.lock() += 1;
//!             }
//!         })
//!     })
//!     .collect();
//! for t in threads {
//!     t.join().unwrap();
//! }
//! assert_eq!(*counter.lock(), 4000);
//! ```
//!
//! Or the raw lock directly, through the `lock_api` traits:
//!
//! ```
//! use numa_spin::lock_api::{RawMutex as _, RawMutexFair as _};
//!
//! let raw = numa_spin::RawMutex::INIT;
//! let guard = raw.lock();
//! assert!(raw.try_lock().is_none());
//! // SAFETY: `guard` is the state of the acquisition above, released once.
//! unsafe { raw.unlock_fair(guard) };
//! assert!(!raw.is_locked());
//! ```
//!
//! In a `static` (`Mutex::new` is `const`):
//!
//! ```
//! static LOG: numa_spin::Mutex<Vec<&str>> = numa_spin::Mutex::new(Vec::new());
//!
//! LOG.lock().push("hello");
//! assert_eq!(LOG.lock().len(), 1);
//! ```
//!
//! # Tunables
//!
//! See [`Config`] for the fields, units and environment variables:
//! `NUMA_SPIN_FLUSH_THRESHOLD_NS` (ns, default 1 000 000), `NUMA_SPIN_SHUFFLE_REDUCTION`
//! (scan with probability 1/N while the secondary queue is empty, default 128),
//! `NUMA_SPIN_SPIN_BUDGET_NS` (ns of busy-waiting before yielding, default 20 000),
//! `NUMA_SPIN_STEAL_BOUND_NS` (ns a queue head tolerates lock stealing, default
//! 10 000; 0 = strict FIFO). [`RawMutex`] and [`RawQueuedMutex`] read them once per
//! process (a bad value is logged once through the `log` facade and the default used);
//! [`RawTunedMutex`] takes a `&'static Config` per lock.
//!
//! # Design notes
//!
//! - [`raw_lock`]: the lock word, the fast path, lock stealing.
//! - [`cna`]: the queue, the secondary queue, the fair hand-off, memory orderings.
//! - [`node`]: why queue nodes are per-thread slots in a registry.
//! - [`backoff`]: spinning calibrated in ns.
//! - [`hq`]: the HQ lock ([`RawHqMutex`], [`HqMutex`]): per-NUMA-node queues in a
//!   list, local then remote hand-offs, metadata bound from a pool while contended
//!   (the HQ spinlock RFC, Huawei 2025). Measured on virtual nodes only so far;
//!   see its memory-orderings section for how its orderings are checked.
//!
//! # Cargo features
//!
//! - `stats`: per-lock counters (`Stats`: acquisitions, contended acquisitions,
//!   same-node and cross-node hand-offs, secondary-queue flushes; for the HQ lock
//!   local and remote hand-offs, metadata binds, pool fallbacks, mode switches),
//!   read with `RawLock::stats`, `RawHqLock::stats` or `stats_of`. Makes the lock bigger and adds a
//!   thread-local read and counter updates to every acquisition; without the
//!   feature they do not exist.
//!
//! - `lock_api_04`: also implements lock_api 0.4's raw traits, for code written
//!   against parking_lot 0.12 or spin (see the `lock_api_04` module, built
//!   with the feature).
//! - `arc_lock`, `serde`, `owning_ref`: forwarded to `lock_api` (and to lock_api 0.4
//!   with `lock_api_04`), as in parking_lot; `arc_lock` adds the `Arc*Guard` aliases.
//! - `loom`: with `RUSTFLAGS="--cfg loom"`, every lock runs on loom for a user's
//!   own models (next section); with `--cfg numa_loom`, builds the crate against
//!   loom for its own models in `tests/loom.rs`; without either cfg it does nothing.
//!
//! # Checking your own code with loom
//!
//! Build your crate's models with `RUSTFLAGS="--cfg loom"` and this crate's `loom`
//! feature, enabled only under the cfg so that loom stays out of every other build:
//!
//! ```toml
//! [target.'cfg(loom)'.dependencies]
//! numa-spin = { version = "0.1", features = ["loom"] }
//! loom = "0.7"
//! ```
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release
//! ```
//!
//! Every lock keeps its API (`Mutex::new` and `INIT` stay `const`, guards, `try_lock_for`,
//! `lock_api`'s traits): `Mutex`, `QueuedMutex`, `HqMutex`, `FairMutex`, `ReentrantMutex`,
//! `CombiningMutex` (`combine` runs the closure on the caller, under the lock) and the tuned
//! types. What loom explores is your code around one exclusion per lock: each lock runs on
//! a `loom::sync::Mutex` made on its first use in each execution, so a model costs about
//! what it costs over loom's own `Mutex` (3 threads each adding one under a `Mutex`,
//! preemption bound 2: 515 executions for each of `Mutex`, `QueuedMutex`, `HqMutex`,
//! `FairMutex`, `CombiningMutex` and `TunedMutex`, 290 over `loom::sync::Mutex`, well
//! under a second each; the difference orders a `try_lock` against a release, which loom's
//! `Mutex` alone never runs in both orders). The queue algorithms
//! themselves (CNA, HQ) are model-checked by this crate's own models (`tests/loom.rs`,
//! `--cfg numa_loom`): the same 3-thread model on the real CNA queue takes 888 executions
//! there (with the models' settings: queued waiters park at once), and its state lives
//! partly outside what a user's model can see (the queue-node registry and the per-thread
//! node slots are std atomics and thread-locals, which every loom thread of an execution
//! shares), so a user's model runs on the one exclusion. Under loom:
//! - `try_lock_for` / `try_lock_until` try once; a failed try yields to the other loom
//!   threads and times out. A model sees both the acquisition (the release came first)
//!   and the timeout, whatever the duration (loom has no clock);
//! - `unlock_fair` and `bump` release like `unlock`: loom chooses the next holder;
//! - a `ReentrantMutex` belongs to the loom thread that holds it;
//! - the NUMA node is not consulted, and `numa_topology::set_current_thread_node` is
//!   shared by every loom thread (they run on one OS thread): do not use it in a model;
//! - a lock used in two executions (a `static`) panics, saying so: create locks inside
//!   the model closure, or with `loom::lazy_static!`.
//!
//! The cfg without the feature changes nothing. `examples/loom-user` in the repository is a
//! downstream crate that does all this (CI runs it): a correct counter passes, a
//! check-then-act bug (read under one guard, write under another) is found.

#![cfg_attr(docsrs, feature(doc_cfg))]
// Under a user's loom model (`crate::model`) the core methods return early,
// before the code that uses their arguments.
#![cfg_attr(
    all(loom, feature = "loom", not(numa_loom)),
    allow(unreachable_code, unused_variables)
)]
// The model builds' cfgs are internal: no "non-numa_loom" badges on the API.
#![cfg_attr(docsrs, doc(auto_cfg(hide(numa_loom, numa_shuttle))))]
// Also set for the workspace ([workspace.lints]); stated here so the crate says it alone.
#![warn(missing_docs)]

#[cfg(all(numa_loom, not(feature = "loom")))]
compile_error!("`--cfg numa_loom` needs the `loom` feature: add `--features numa-spin/loom`");

pub mod backoff;
pub mod blocking;
pub mod cna;
pub mod combining;
pub mod config;
#[cfg(not(numa_loom))]
mod fair;
mod glue;
#[cfg(all(test, not(numa_loom)))]
mod head_tests;
pub mod hq;
mod lazy;
#[cfg(all(feature = "lock_api_04", not(numa_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api_04")))]
pub mod lock_api_04;
#[cfg(all(loom, feature = "loom", not(numa_loom)))]
#[doc(hidden)]
pub mod model;
mod mutex;
pub mod node;
pub mod raw_lock;
mod remutex;
#[cfg(feature = "stats")]
mod stats;
mod sync;
pub mod timed;
mod word;

/// The `lock_api` (0.5) this crate implements, re-exported as parking_lot does, so
/// code can name the traits (`numa_spin::lock_api::RawMutex`) without its own
/// dependency.
pub use lock_api;
/// The topology crate the locks ask for the caller's node
/// (`numa_topology::current_node`), re-exported: its
/// `set_current_thread_node` places a thread on a virtual node (tests,
/// benchmarks), without a dependency of the caller's own.
pub use numa_topology;

pub use combining::RawCombiningMutex;
#[cfg(not(numa_loom))]
pub use combining::{CombiningMutex, CombiningMutexGuard};
pub use config::{
    Config, ConfigError, ConfigErrorKind, ENV_FLUSH_THRESHOLD_NS, ENV_HQ_HANDOFF_THRESHOLD,
    ENV_HQ_SWITCH_THRESHOLD, ENV_SHUFFLE_REDUCTION, ENV_SPIN_BUDGET_NS, ENV_STEAL_BOUND_NS,
    ENV_WAIT_POLICY, Global, Tunables, WaitPolicy,
};
#[cfg(not(numa_loom))]
pub use fair::{FairMutex, FairMutexGuard, MappedFairMutexGuard, RawFairMutex};
pub use hq::{HqMutex, HqMutexGuard, RawHqLock, RawHqMutex};
#[cfg(feature = "arc_lock")]
pub use mutex::ArcMutexGuard;
#[cfg(feature = "stats")]
pub use mutex::stats_of;
pub use mutex::{
    MappedMutexGuard, Mutex, MutexGuard, QueuedMutex, QueuedMutexGuard, RawMutex, RawQueuedMutex,
    RawTunedMutex, RawTunedQueuedMutex, TunedMutex, TunedMutexGuard,
};
pub use raw_lock::RawLock;
#[cfg(feature = "arc_lock")]
pub use remutex::ArcReentrantMutexGuard;
pub use remutex::{MappedReentrantMutexGuard, RawThreadId, ReentrantMutex, ReentrantMutexGuard};
#[cfg(feature = "stats")]
pub use stats::Stats;

/// Test hooks for the loom models (`--cfg numa_loom` only).
#[cfg(numa_loom)]
#[doc(hidden)]
pub mod loom_hooks {
    pub use crate::sync::{
        LOOM_TICK_NS, loom_event_count, reset_loom_enqueues, set_loom_head_asleep_hints,
        set_loom_node, set_loom_pool_size, wait_for_loom_enqueues,
    };

    /// The calling loom thread's queue-node code (allocating its slot).
    pub fn current_code() -> u32 {
        crate::node::current(std::ptr::null()).map_or(0, |me| {
            me.done();
            me.code
        })
    }
}
