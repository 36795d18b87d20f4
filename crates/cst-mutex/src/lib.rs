//! NUMA-aware blocking locks: [`Mutex`], [`RwLock`] and [`Condvar`] for
//! `lock_api` 0.5, on numa-spin's queue.
//!
//! # What it is
//!
//! The blocking locks of CST (Kashyap, Min, Kim, "Scalable NUMA-aware
//! Blocking Synchronization Primitives", USENIX ATC 2017) built the way the
//! same authors' ShflLock (Kashyap et al., "Scalable and Practical Locking
//! with Shuffling", SOSP 2019, section 4.2) builds its blocking mutex: on the
//! queue of a spinlock, here numa-spin's CNA lock ([`numa_spin::RawLock`],
//! Dice & Kogan, EuroSys 2019).
//!
//! * **One lock word, bounded stealing**: [`RawMutex`] is numa-spin's queue
//!   lock (8 bytes). A thread that finds the word free takes it, the
//!   releasing thread included, until the queue head has waited the steal
//!   bound ([`numa_spin::Config::steal_bound_ns`], 10 us by default); then the
//!   next release is the head's. An uncontended lock and unlock are one
//!   atomic instruction each.
//! * **An MCS queue with NUMA order**: waiters queue on nodes that live only
//!   inside `lock()` (a per-thread slot of numa-spin's registry), the head
//!   spins on the word, and CNA keeps the waiters of the holder's node first
//!   (the secondary queue holds the others, flushed back within
//!   [`numa_spin::Config::flush_threshold_ns`], 1 ms by default), so the
//!   lock and its data stay on one node for a while and no node starves.
//! * **Spin, then park, woken ahead of the turn**: a queued waiter spins for
//!   its spin budget (20 us by default), then parks on its queue node; the
//!   queue head wakes the waiters behind it before their turn
//!   ([`numa_spin::Tunables::wake_ahead`], ShflLock's shuffler waking its
//!   successor), so the next head is running when the lock comes to it and
//!   the OS's wake-up is off the hand-off's path.
//! * **Sleepers outside the queue**: timed waiters (`try_lock_for`) cannot
//!   queue (a queued waiter cannot leave) and condition-variable waiters moved
//!   onto the mutex by `notify_all` are asleep already: they park on the
//!   mutex's address in `parking_lot_core`'s table after marking the held
//!   lock word ([`numa_spin::blocking`]); the release reads the mark with the
//!   lock in its one swap and wakes one sleeper only when it was set.
//! * **Condvar requeue**: `notify_all` wakes one waiter and moves the rest,
//!   still asleep, onto the mutex's sleepers; each release wakes the next,
//!   which queues for the lock (no thundering herd).
//! * **RwLock**: writers queue on a [`RawMutex`]; readers count on per-node
//!   counters bound lazily from a static pool (see below).
//!
//! # When to use it
//!
//! * Pick `cst-mutex` over `numa-spin` when threads may outnumber CPUs or be
//!   preempted (VMs, thread pools, async runtimes' blocking pools), or when
//!   critical sections are long: a spinlock wastes whole time slices there,
//!   these locks park.
//! * Pick `numa-spin` for short critical sections with at most one thread per
//!   CPU (no preemption): its queue head never parks.
//! * Pick `cst-mutex` over `parking_lot` on multi-node machines with contended
//!   locks: the queue's node order cuts the cross-node traffic of the lock
//!   word and the protected data. On a single-node machine `parking_lot` is as
//!   good or better (and its `Mutex` is 1 byte instead of 8).
//!
//! # Fairness and starvation
//!
//! Mutex (and the writer side of the rwlock): as [`numa_spin::RawLock`]'s.
//! Queued waiters are served in CNA's order: FIFO among the waiters of the
//! holder's node, the other nodes' waiters within the flush threshold. A
//! thread that finds the word free may take it ahead of the queue until the
//! head has waited the steal bound; after that the head gets the next
//! release. Timed waiters forbid stealing once they have waited the steal
//! bound while they poll, and are woken by each release while they sleep.
//! `unlock_fair` (and [`FairMutex`]'s every unlock) hands the lock to the
//! queue head if there is one.
//!
//! # RwLock policy
//!
//! Writers serialise on numa-spin's CNA queue lock ([`RawMutex`]: queue
//! nodes on the waiters' stacks, bounded stealing, parking and wake-ahead),
//! then set a writer bit that stops new readers and wait for the readers
//! inside to drain: writers do not starve. Readers that arrive during a
//! writer's turn park and are all admitted when it leaves, before the next
//! writer: readers do not starve. An upgradable reader holds the queue lock
//! without the writer bit. An uncontended reader counts itself in the lock's
//! state word; readers that contend there count on per-node counters, one
//! cache line per node, which the lock binds on first use from a static pool
//! of 1,024 sets (Calciu et al., "NUMA-Aware Reader-Writer Locks", PPoPP 2013:
//! the per-node reader indicator) and keeps until it is dropped; with every
//! set bound, further locks' readers count in the state word alone. A thread holding a read
//! lock that calls `read()` again deadlocks once a writer waits (the writer
//! waits for the first read lock, the second read for the writer): there are
//! no recursive reads.
//!
//! # Memory cost
//!
//! * `size_of::<Mutex<()>>()` = 8 bytes, `size_of::<RwLock<()>>()` = 16
//!   bytes, `size_of::<Condvar>()` = 16 bytes (64-bit targets; numa-spin's
//!   feature `stats` adds its per-lock counters to each).
//! * A **mutex** holds no heap memory, contended or not: a queued waiter's
//!   queue node is a slot of numa-spin's per-thread registry (allocated on
//!   the thread's first contended `lock()` and given back at thread exit),
//!   and sleepers use `parking_lot_core`'s global table (per thread, not per
//!   lock). A mutex freed without being dropped (C code freeing a
//!   `pthread_mutex_t` without `pthread_mutex_destroy`, or `mem::forget`)
//!   leaks nothing.
//! * An **rwlock** holds no heap memory either: its writers queue as a
//!   mutex's do, and its per-node reader counters (8 lines of 128 bytes on
//!   x86-64) come from a static pool of 1,024 sets (1 MiB of
//!   zero-initialised memory that the OS backs with pages only where a set
//!   was used), bound on the first reader contention and given back when the
//!   lock is dropped ([`RawRwLock::release_snodes`] gives them back earlier).
//!   A byte-wise copy of an rwlock (C's `memcpy`) shares the original's
//!   counters: give them back from one of the two only.
//!
//! # Fork and signal handlers
//!
//! * **fork**: after `fork` every lock works in the child. A lock the
//!   forking thread held (the `pthread_atfork` pattern: the prepare handler
//!   locks a library's mutex, the parent and child handlers unlock it) can
//!   be unlocked, taken again and contended on in the child, whatever
//!   waited for it in the parent: numa-spin's queue forgets the parent's
//!   queued waiters by its fork generation, and the parent threads that
//!   slept in the parking lot are taken out of the child's copy of it by a
//!   child handler, before the child has a second thread (their records
//!   live on their stacks, which the child's new threads reuse). The
//!   handlers are registered when the program is loaded, before `main`: a
//!   registration on a thread's first slow path could complete while
//!   another thread's fork runs its prepare handlers, and glibc's fork then
//!   skips the new handlers (`tests/fork_prepare.rs`). As with glibc, a lock
//!   held by a parent thread that does not exist in the child stays held,
//!   and read holds are kept.
//! * **signal handlers**: an acquisition made while the same thread waits
//!   for another lock (a handler that interrupts the wait) works: numa-spin
//!   gives each thread queue nodes for 4 nesting levels (and deeper ones
//!   wait on the word without a node, as qspinlock's do), and a wait nested
//!   in a sleeping one spins (with yields) instead of sleeping, since the
//!   thread's parking-lot record is in use. Not async-signal-safe in
//!   general: a handler that interrupts the parking lot's own short critical
//!   sections (its bucket locks) and then wakes a waiter of the same bucket
//!   deadlocks, and a thread's first contended `lock()` allocates its queue
//!   node slot.
//!
//! # Memory after unlock
//!
//! A lock may be destroyed and its memory freed by the thread that takes it
//! next, as soon as an unlock's releasing step has let it in (POSIX's
//! reference-count pattern: the last user unlocks, destroys and frees). So
//! after its releasing atomic an unlock touches nothing of the lock: only
//! its own memory, and parking keys derived from the lock's address (a
//! wake-up names an address and reads nothing there).
//!
//! * **Mutex**: the unlock is one swap of the word, the releasing step; the
//!   swap returns whether sleepers marked it, and the wake-up after it is by
//!   key.
//! * **Rwlock write unlock**: the writers' queue lock is released first
//!   (numa-spin's one swap, then a wake-up by key), with the writer bit still
//!   set, so no reader can enter yet; clearing the writer bit is the
//!   releasing step, after which only the readers parked behind the writer
//!   are admitted (a next writer waits for that clear before it sets the bit).
//! * **Rwlock read unlock**: the decrement of the reader's counter is the
//!   releasing step; whether a writer waits for the readers to drain is read
//!   from what that decrement returned (the state word's writer bit, or the
//!   drain bit the writer sets on each node counter before it parks), and
//!   the writer is woken by its key.
//! * A **condvar**'s notify works through `parking_lot_core` by key (unpark,
//!   or requeue onto the mutex's sleepers); the condvar itself holds no lock
//!   to release.
//!
//! # Examples
//!
//! ```
//! use cst_mutex::{Condvar, Mutex, RwLock};
//!
//! static TOTAL: Mutex<u64> = Mutex::new(0);
//! *TOTAL.lock() += 1;
//! assert_eq!(*TOTAL.lock(), 1);
//!
//! let table = RwLock::new(vec![0u8; 4]);
//! assert_eq!(table.read().len(), 4);
//! table.write()[0] = 7;
//!
//! let cv = Condvar::new();
//! assert_eq!(cv.notify_all(), 0); // nobody waits
//! ```
//!
//! # Performance
//!
//! Measured on the 2-CPU development machine (a KVM guest, one real NUMA
//! node, threads on 2 virtual nodes; docs/measurements.md has the tables and
//! commands). `numa-bench handoff`: a hand-off to the spinning queue head of
//! the holder's node takes as long as CNA's (medians 1.00 of CNA's round
//! trips at 0, 1 and 5 us critical sections), and the releasing thread
//! re-takes a free lock in 10 ns. `numa-bench requeue` (16 threads
//! hammering a mutex, 4 waiters requeued by `notify_all`): the requeued
//! waiters re-take it at p99 98-129 us, 0.06-0.07x parking_lot's (a woken
//! waiter's lock is marked, and threads taking it ahead of its queue yield
//! the CPU until the waiter runs: `numa_spin::blocking`). With 32 threads on
//! the 2 CPUs it runs at 0.84-1.04x parking_lot (locktorture and kv, with
//! and without a CPU hog). Contention between threads that really run at once
//! is not seen on 2 CPUs. Benchmarks, not unit tests, check speed.
//!
//! # Checking your own code with loom
//!
//! Build your crate's models with `RUSTFLAGS="--cfg loom"` and this crate's `loom`
//! feature, enabled only under the cfg so that loom stays out of every other build:
//!
//! ```toml
//! [target.'cfg(loom)'.dependencies]
//! cst-mutex = { version = "0.1", features = ["loom"] }
//! loom = "0.7"
//! ```
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release
//! ```
//!
//! `Mutex`, `FairMutex`, `ReentrantMutex`, `RwLock` and `Condvar` keep their API (`new` and
//! `INIT` stay `const`, guards, timeouts, `lock_api`'s traits). What loom explores is your
//! code around each lock's semantics, not the lock's algorithm (this crate's own models in
//! `tests/loom.rs` check that, under `--cfg numa_loom`):
//! - the mutexes run on numa-spin's model exclusion, one `loom::sync::Mutex` per lock made
//!   on its first use in each execution (numa-spin's README, "Checking your own code with
//!   loom"): 3 threads each adding one under a `Mutex` or a `FairMutex`, preemption bound
//!   2, take 515 executions, against 290 over `loom::sync::Mutex`; the real CNA queue under
//!   the same model takes 888 in numa-spin's own models;
//! - the `RwLock` runs on a loom mutex and condvar over its counts: readers share, a
//!   writer excludes, one upgradable reader at a time, and a writer (or an upgrade)
//!   waiting for readers blocks new readers, as the real lock's writer bit does, so a
//!   recursive read across a waiting writer deadlocks in a model too. Two writers and a
//!   reader, bound 2: 248 executions, 30 over `loom::sync::RwLock` (whose readers never
//!   wait for a queued writer);
//! - the `Condvar` keeps its waiters in arrival order: `notify_one` wakes the longest
//!   waiting, `notify_all` every one, each re-locks the mutex before it returns, and no
//!   wait returns spuriously. A one-slot mailbox (`put` and a `take` that waits) takes 10
//!   executions;
//! - `try_lock_for`, `try_read_for`, `try_write_for`, `try_upgrade_for` (and their
//!   `_until` forms) try once; a failed try yields to the other loom threads and times
//!   out. `wait_for` / `wait_until` release the mutex, yield, and time out unless a
//!   notification came meanwhile. A model sees both outcomes whatever the duration (loom
//!   has no clock);
//! - a `ReentrantMutex` belongs to the loom thread that holds it;
//! - a lock or condvar used in two executions (a `static`) panics, saying so: create it
//!   inside the model closure, or with `loom::lazy_static!`;
//! - lock_api 0.4's rwlock traits (feature `lock_api_04`) are not switched: under a model
//!   they run the real algorithm, which loom cannot follow. Model code written against
//!   lock_api 0.5's (lock_api 0.4's mutex traits are switched).
//!
//! The data inside a lock is lock_api's `UnsafeCell`, which loom does not track: a model
//! finds a broken exclusion only where your code has a loom operation (an atomic, a lock,
//! `thread::yield_now`) inside the critical section. The cfg without the feature changes
//! nothing. `examples/loom-user` in the repository is a downstream crate that does all
//! this (CI runs it): its correct counter, rwlock, upgrade, mailbox and `notify_all`
//! models pass; a check-then-act bug over the `Mutex` and over the `RwLock`, and a lost
//! wake-up (a condition checked under one guard, waited on under another), are found.
//!
//! # Cargo features
//!
//! * `stats`: numa-spin's per-lock counters (`numa_spin::Stats`), read with
//!   `RawMutex::stats` / `RawRwLock::stats`;
//! * `lock_api_04`, `arc_lock`, `serde`, `owning_ref`: see `Cargo.toml`;
//! * `loom`: with `RUSTFLAGS="--cfg loom"`, the locks run on loom for your own
//!   models (previous section).
//!
//! The crate builds with `--cfg numa_loom` for the loom models
//! (`tests/loom.rs`); then the `INIT`/`const fn new` constructors are replaced
//! by non-`const` ones (`RawMutex::INIT` and friends fail to compile; use
//! `RawMutex::new()` with `lock_api::Mutex::from_raw`).
//!
//! # Inside a global allocator
//!
//! Not supported. A thread's first contended `lock()` takes a queue-node slot
//! from numa-spin's registry (which grows through `std::alloc::System` and
//! keeps the slot in a thread-local with a destructor), the slow paths ask
//! `numa_topology` for the current node (its lazy initialization may
//! allocate), and sleepers park through `parking_lot_core`, which allocates
//! its hash table through the global allocator on the first park and again,
//! while holding every bucket lock of the old table, when the number of
//! threads grows. A lock used by the global allocator itself can re-enter the
//! allocator on those paths and deadlock. `parking_lot`'s own locks share the
//! last hazard. Use `numa_spin::Mutex` there.
//!
//! # Limits
//!
//! The rwlock's state word counts up to 2^28 - 1 readers itself; more
//! readers count on their node's counter (2^32 - 1 each). numa-spin's limits
//! hold for the mutex (its queue-node codes, see its docs). Threads are not
//! pinned: a thread that migrates between nodes is served as a member of the
//! node it queued on (a stale node costs performance, never correctness).

#![cfg_attr(docsrs, feature(doc_cfg))]
// The model builds' cfgs are internal: no "non-numa_loom" badges on the API.
#![cfg_attr(docsrs, doc(auto_cfg(hide(numa_loom, numa_shuttle))))]
// Under a user's loom model (`model`) the lock methods return early, before
// the code that uses their arguments.
#![cfg_attr(
    all(loom, feature = "loom", not(numa_loom)),
    allow(unreachable_code, unused_variables)
)]

#[cfg(all(numa_loom, not(feature = "loom")))]
compile_error!("`--cfg numa_loom` needs the `loom` feature: add `--features cst-mutex/loom`");

/// Routes a lock method to the `model` module under a user's loom model:
/// `model_route!(expr)` returns `expr` there and expands to nothing in every
/// other build.
macro_rules! model_route {
    ($e:expr) => {
        #[cfg(all(loom, feature = "loom", not(numa_loom)))]
        {
            return $e;
        }
    };
}
pub(crate) use model_route;

mod condvar;
mod fair;
mod fork;
#[cfg(all(feature = "lock_api_04", not(numa_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api_04")))]
pub mod lock_api_04;
#[cfg(all(loom, feature = "loom", not(numa_loom)))]
mod model;
mod mutex;
mod raw_condvar;
mod raw_mutex;
mod raw_rwlock;
mod remutex;
mod rwlock;
mod sync;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod test_hooks;

/// The process's fork generation (feature `test-hooks`, for the fork tests;
/// not part of the API): how many forks whose child handler ran lie between
/// this process and its first ancestor that loaded the crate (0 there).
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn fork_generation() -> u32 {
    fork::generation()
}

/// The `lock_api` (0.5) this crate implements, re-exported as parking_lot does, so
/// code can name the traits (`cst_mutex::lock_api::RawMutex`) without its own
/// dependency.
pub use lock_api;

pub use condvar::Condvar;
pub use fair::{FairMutex, FairMutexGuard, MappedFairMutexGuard, RawFairMutex};
#[cfg(feature = "arc_lock")]
pub use mutex::{ArcMutexGuard, ArcReentrantMutexGuard};
pub use mutex::{MappedMutexGuard, Mutex, MutexGuard};
pub use raw_condvar::RawCondvar;
pub use raw_mutex::{RawMutex, Tunables};
pub use raw_rwlock::{ExclusiveGuardState, RawRwLock, SharedGuardState};
pub use remutex::{MappedReentrantMutexGuard, RawThreadId, ReentrantMutex, ReentrantMutexGuard};
#[cfg(feature = "arc_lock")]
pub use rwlock::{ArcRwLockReadGuard, ArcRwLockUpgradableReadGuard, ArcRwLockWriteGuard};
pub use rwlock::{
    MappedRwLockReadGuard, MappedRwLockWriteGuard, RwLock, RwLockReadGuard,
    RwLockUpgradableReadGuard, RwLockWriteGuard,
};

/// Hooks for this crate's loom and shuttle models (`tests/loom.rs`,
/// `tests/shuttle.rs`). They exist only in a build with `--cfg numa_loom`,
/// which builds the crate against loom; they are not part of the API.
#[cfg(numa_loom)]
#[doc(hidden)]
pub mod loom_hooks {
    use crate::sync;

    /// Sets the NUMA node the calling loom thread
    /// reports (loom threads share one OS thread, so `numa_topology`'s
    /// thread-local cannot tell them apart).
    pub fn set_node(node: usize) {
        sync::set_loom_node(node);
    }

    /// Sets how many spin rounds the calling loom thread makes before an
    /// rwlock reader or a draining writer parks (default 0).
    pub fn set_spin_rounds(rounds: u32) {
        sync::set_loom_spin_rounds(rounds);
    }
}

#[cfg(all(test, not(numa_loom)))]
mod tests;
