//! CST-style NUMA-aware blocking locks: [`Mutex`], [`RwLock`] and [`Condvar`]
//! for `lock_api` 0.5.
//!
//! # What it is
//!
//! A port of the ideas of CST (Kashyap, Min, Kim, "Scalable NUMA-aware
//! Blocking Synchronization Primitives", USENIX ATC 2017) to user-space Rust:
//!
//! * a **cohort of per-node snodes**: each NUMA node that contends on a lock gets
//!   an snode holding that node's **queue of waiters** (MCS-style, each waiter
//!   spinning on its own queue node) and its parking queue (a `parking_lot_core`
//!   queue keyed by the snode's address); the snodes of a lock form a list
//!   whose cyclic order is the global order (the [`RwLock`] has no snodes:
//!   see its policy below);
//! * **a node keeps the lock for its batch** (CST, section 3): only the first
//!   waiter of a node's queue, the *head*, waits for the lock. Once it has
//!   waited a moment (about 15 pauses) with others queued behind it, it
//!   *registers* its node: one `HEAD_ONE` in the lock word, which sends
//!   every unlock to the slow path, and its queue node in the snode. An
//!   unlock by a thread of its node hands it the lock with one atomic swap
//!   into its queue node (a *grant*: no futex call, the word stays held).
//!   The registration then passes from head to head with head-ship, so while
//!   the node's queue has waiters a hand-off inside the node writes only
//!   node-local lines (the snode and the next queue node) and never the
//!   lock word; the word is written when the lock moves to another node or
//!   becomes free. With feature `stats`, `thread_counts()` counts those
//!   writes per acquisition;
//! * **hand-off to a running waiter** (CST, section 3.2): a new head wakes
//!   its successor if it slept (*wake-ahead*), so the next head is running
//!   when its turn comes. A head that has not run since it was given
//!   head-ship is passed over by the unlock while the lock is
//!   *oversubscribed* (its waiters and holder outnumber the CPUs,
//!   [`cpus`], or other threads take the CPUs), or once it has not run for
//!   about 10-20 us (40,000 time-stamp ticks): the word is released for
//!   running threads, and the head takes it, or the grant of the next
//!   unlock of its node, once it runs;
//! * **NUMA batching**: the unlocker grants its own node's head while the
//!   node's batch lasts ([`batch_bound`], 128 by default), then the head of
//!   the next node that has one, so the lock (and the data it protects) stays
//!   on one node for a while but no node starves;
//! * **lazy allocation**: an snode is attached the first time a thread of
//!   that node contends; a mutex gives its snodes back to a process-wide pool
//!   when its contention ends, so an idle mutex is two words and holds no
//!   heap memory;
//! * **spin, then park**: an untimed waiter that finds the lock held waits
//!   as parking_lot's waiters do (3 pause rounds, 7 yields, taking the word
//!   whenever it is free). On a CPU of its own (its last yield returned at
//!   once) that wait ends as soon as a queue has formed (a registered head
//!   or a parked waiter), and the waiter joins the queue. On a shared CPU
//!   (a yield that ran another thread: more threads than CPUs, a CPU-bound
//!   neighbour, a preempted vCPU) it runs the whole schedule before it
//!   queues; a queued waiter on a shared CPU would sleep until its turn
//!   while running threads take the lock. The pauses come first because a
//!   yield that runs another thread gives the CPU away for 3-100 us, while
//!   the holder releases within a few pauses. Then, on a CPU of its own,
//!   the first waiter of a lock that nobody else waits for spins on the
//!   word for up to 63 pauses more (qspinlock's pending waiter), and every
//!   other one queues. Queued
//!   waiters and a head with waiters behind it spin 127 pauses; then, on an
//!   oversubscribed lock (more waiters than [`cpus`], or CPUs seen taken by
//!   other threads: a yield that lasted a time slice), they yield for up to
//!   50 us and park on their queue node; otherwise they keep spinning (4
//!   pauses per look, a yield every 64) for as long as the lock makes
//!   progress, at least 64 yields or four times the batch bound since the
//!   last hand-off (a count, so that a machine with fewer CPUs than
//!   [`cpus`] says makes the same decision). A head with nobody behind it
//!   spins like parking_lot's waiters (3 pause rounds, 7 yields). A head out
//!   of budget gives its node's registration back and leaves the queue for
//!   the node's parking queue;
//! * **parked waiters are woken one at a time** (`parking_lot`'s shape): an
//!   unlock that finds no head to grant and a parked waiter picks the snode to
//!   serve by the cohort order, wakes one of its waiters and releases the lock
//!   in the same step, under that snode's queue lock. A woken thread that
//!   loses the race to a running one re-parks at once while others are parked;
//! * **timed waiters** (`try_lock_for`, `try_lock_until`) spin and then park
//!   in the parking queue, which they can leave at their deadline;
//! * **barging**: an unlock with no head to grant releases the word, and a
//!   woken waiter (without an owed handoff) competes with running threads
//!   for it; so does a head passed over while it was not running;
//! * **condvar requeue**: `notify_all` wakes one waiter and moves the rest,
//!   still asleep, onto the mutex, whose unlocks wake them one at a time; they
//!   form one more member of the cohort order (a pseudo-snode of the mutex),
//!   so the batch bound and eventual fairness apply to them too;
//! * **eventual fairness** (the scheme of `parking_lot` up to 0.12; 0.13
//!   removed it from `parking_lot`, whose locks are now fair only through
//!   `unlock_fair`): a parked waiter whose node has waited past
//!   [`fairness_timeout`] (0.5 ms by default) is handed the lock directly.
//!
//! # When to use it
//!
//! * Pick `cst-mutex` over `numa-spin` when threads may outnumber CPUs or be
//!   preempted (VMs, thread pools, async runtimes' blocking pools), or when
//!   critical sections are long: a spinlock wastes whole time slices there,
//!   these locks park.
//! * Pick `numa-spin` for short critical sections with at most one thread per
//!   CPU (no preemption): a queue spinlock hands over faster than a parking lock.
//! * Pick `cst-mutex` over `parking_lot` on multi-node machines with contended
//!   locks: batching by node cuts the cross-node traffic of the lock word and the
//!   protected data. On a single-node machine `parking_lot` is as good or better
//!   (and its `Mutex` is 1 byte instead of 16).
//!
//! # Fairness and starvation
//!
//! Mutex (and the writer side of the rwlock): within a node, queued waiters
//! are served in FIFO order (a head not yet running may be passed over on an
//! oversubscribed lock until it runs); a running thread can take a free lock
//! ahead of them (barging). Across nodes the lock moves to the next node
//! with a registered head, or with parked waiters, after at most
//! [`batch_bound`] consecutive grants or wake-ups on one node, so no node
//! starves; a waiter of another node may first wait for the current batch
//! to end (up to [`batch_bound`] critical sections). Once per
//! [`fairness_timeout`] per node a parked waiter gets a direct handoff, which
//! bounds how long a barging stream can starve it (served at the next
//! unlock that finds no registered head of its own node to grant). With
//! `unlock_fair` the unlock always hands the lock over if anyone waits: to
//! the registered head of its own node while the batch lasts, else to
//! another node's registered head, else to a parked waiter.
//!
//! # RwLock policy
//!
//! Writers serialise on numa-spin's CNA queue lock ([`next::RawMutex`]: queue
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
//! * `size_of::<Mutex<()>>()` = `size_of::<RwLock<()>>()` = 16 bytes,
//!   `size_of::<Condvar>()` = 16 bytes (64-bit targets).
//! * Each node whose threads wait for a mutex adds one snode of 256 bytes on
//!   x86-64 (two 128-byte `CachePadded` groups: the identity, the waiting
//!   state and queue; 128 bytes where lines are 64 bytes and not paired; one
//!   more group with feature `stats`; a mutex that a [`Condvar`] waits with
//!   has one more while the condvar's waiters wait). A contended mutex on an
//!   N-node machine holds 16 + 256 N bytes on x86-64 (N = 2: 528 bytes,
//!   N = 8: 2064 bytes), plus, rarely, a second snode for a node whose first
//!   one a thread that loaded a stale snode pointer kept pinned while the
//!   node attached a fresh one (see `snode.rs`; each such duplicate is 256
//!   bytes more, at most one per thread attaching at that moment).
//! * An **rwlock** holds no heap memory: its writers' queue nodes live on
//!   their stacks, and its per-node reader counters (8 lines of 128 bytes on
//!   x86-64) come from a static pool of 1,024 sets (1 MiB of zero-initialised
//!   memory that the OS backs with pages only where a set was used), bound
//!   on the first reader contention and given back when the lock is dropped
//!   ([`RawRwLock::release_snodes`] gives them back earlier). A byte-wise copy
//!   of an rwlock (C's `memcpy`) shares the original's counters: give them
//!   back from one of the two only.
//! * When snodes are held: a **mutex** holds its snodes only while threads
//!   wait for it. The waiter that takes the lock when no other waiter uses
//!   them (none parked, queued or about to wait) detaches them and gives them
//!   back to a process-wide pool (a per-thread cache of up to 8 snodes, then
//!   64 global lock-free slots, then a lock-free stack), and the next
//!   contention of any lock takes
//!   them from there. An idle mutex holds no heap memory, so one that is freed
//!   without being dropped (C code freeing a `pthread_mutex_t` without
//!   `pthread_mutex_destroy`, or `mem::forget`) leaks nothing. With feature
//!   `stats`, whose counters live in the snodes, a mutex keeps them until it
//!   is dropped.
//! * The pool never returns snodes to the allocator (a thread that read an
//!   snode pointer just before the detach may still load it: the memory must
//!   stay an snode), so the process keeps as many snodes as were ever
//!   attached *at once*, about 256 bytes per node per lock contended at the
//!   same time, plus the per-thread caches (at most 3 KiB per thread,
//!   returned to the global pool when the thread exits), plus, rarely, one
//!   per thread that finds the pool empty while another thread is taking
//!   from its overflow stack (only with more than 64 snodes pooled). Dropping a lock
//!   gives its snodes to the pool as well.
//! * A queued waiter's queue node (128 bytes) lives on its own stack for the
//!   wait. Parked threads use `parking_lot_core`'s global table (per thread,
//!   not per lock).
//! * A lock copied byte by byte (C's `memcpy` of a `pthread_mutex_t`: not
//!   possible in safe Rust) shares the original's snode pointers; every snode
//!   records the lock that attached it, so the copy neither uses nor gives
//!   back the original's, and [`RawMutex::release_snodes`] gives back only a
//!   lock's own.
//!
//! # Fork and signal handlers
//!
//! * **fork**: after `fork` every lock works in the child. A lock the
//!   forking thread held (the `pthread_atfork` pattern: the prepare handler
//!   locks a library's mutex, the parent and child handlers unlock it) can
//!   be unlocked, taken again and contended on in the child, whatever
//!   waited for it in the parent: a `pthread_atfork` child handler advances
//!   a fork generation, and the first thread of the child that holds a lock
//!   whose snodes are of an older generation forgets the parent's waiters
//!   (their queue entries, registrations and parked counts) before it hands
//!   the lock on; until then the child's waiters wait on the word alone.
//!   The parent threads that slept in the parking lot are taken out of the
//!   child's copy of it by the child handler, before the child has a second
//!   thread (their records live on their stacks, which the child's new
//!   threads reuse). The handlers are registered when the program is
//!   loaded, before `main`: a registration on a thread's first slow path
//!   could complete while another thread's fork runs its prepare handlers,
//!   and glibc's fork then skips the new handlers (`tests/fork_prepare.rs`).
//!   As with glibc, a lock held by a parent
//!   thread that does not exist in the child stays held, and read holds are
//!   kept.
//! * **signal handlers**: an acquisition made while the same thread waits
//!   for another lock (a handler that interrupts the wait) works, nested
//!   any number of levels: a queued wait keeps its queue node on the stack,
//!   and a wait nested in a sleeping one spins (with yields) instead of
//!   sleeping, since the thread's parking-lot record is in use. Not
//!   async-signal-safe in general: a handler that interrupts the
//!   parking lot's own short critical sections (its bucket locks) and then
//!   wakes a waiter of the same bucket deadlocks, and the first contention
//!   of a node allocates its snode (see the memory cost below).
//!
//! # Memory after unlock
//!
//! A lock may be destroyed and its memory freed by the thread that takes it
//! next, as soon as an unlock's releasing step has let it in (POSIX's
//! reference-count pattern: the last user unlocks, destroys and frees). So
//! after its releasing atomic an unlock touches nothing of the lock: only
//! its own memory, and parking keys derived from the lock's or a queue node's
//! address (a wake-up names an address and reads nothing there).
//!
//! * **Mutex**: the fast unlock is one CAS, the releasing step. The slow
//!   unlock does its work holding the lock (grants a queue head, wakes a
//!   parked waiter) and ends with one releasing CAS or with the grant
//!   itself, a swap into the next holder's queue node, after which it only
//!   wakes that node's key.
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
//!   or requeue onto the mutex's requeue queue); the condvar itself holds
//!   no lock to release.
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
//! On the 2-CPU development machine (a KVM guest, one real NUMA node, 2
//! virtual nodes; `numa-bench compare --locks cst,cna,parking_lot
//! --workloads locktorture,kv --threads 1,2,32 --repeat 3 --duration 1s
//! --virtual-nodes 2`, with and without `--hog 1`, ratios to `parking_lot`
//! in the same run, two interleaved rounds while other builds ran) cst ran
//! at 0.79-1.14x `parking_lot`, and 5b7f122's cst (whose waiters skipped
//! the queue on an oversubscribed lock) at 0.76-1.22x in the same runs: on
//! that machine the difference is within the noise. Its node switches at 32
//! threads fell to 0.1-12 per 1000 acquisitions (3-38 before). What the
//! queue changes is counted, not timed, here: with feature `stats` and
//! [`set_cpus`]`(16)`, 16 threads on 2 virtual nodes make 0.0003-0.07
//! global-word writes per acquisition, and none in a hand-off within a node
//! (`tests/handoff_counts.rs`), against 2.0 when every grant took the node's
//! registration back. The nodes are virtual: the node-switch column shows
//! the ordering, not an interconnect saving, and contention between threads
//! that really run at once is not seen
//! on 2 CPUs. Benchmarks, not unit tests, check speed.
//!
//! # Cargo features
//!
//! * `stats`: counters of the contended paths (`Stats`: acquisitions that
//!   queued, grants, parks, wake-ups, hand-offs to a parked waiter), kept in
//!   the snodes (one more cache-line group each), read with
//!   `RawMutex::stats` / `RawRwLock::stats`;
//! * `lock_api_04`, `arc_lock`, `serde`, `owning_ref`: see `Cargo.toml`.
//!
//! The crate builds with `--cfg numa_loom` for the loom models
//! (`tests/loom.rs`); then the `INIT`/`const fn new` constructors are replaced
//! by non-`const` ones (`RawMutex::INIT` and friends fail to compile; use
//! `RawMutex::new()` with `lock_api::Mutex::from_raw`).
//!
//! # Inside a global allocator
//!
//! Not supported. The locks allocate through the global allocator when a
//! node first contends (its snode, and the condvar's requeue
//! pseudo-snode on the first wait), the slow paths ask `numa_topology` for
//! the current node (its lazy initialization may allocate), and parking
//! goes through `parking_lot_core`, which allocates its hash table through
//! the global allocator on the first park and again, while holding every
//! bucket lock of the old table, when the number of threads grows. A lock
//! used by the global allocator itself can re-enter the allocator on those
//! paths and deadlock. `parking_lot`'s own locks share the last hazard. Use
//! `numa_spin::Mutex` there.
//!
//! # Limits
//!
//! The state word packs counters (bit table in the `cohort` module): on
//! 64-bit targets up to 2^24 - 1 threads parked per lock and 2^32 - 1
//! fast-path readers, on 32-bit targets 2^8 - 1 = 255 and 2^16 - 1 = 65535,
//! and up to 7 registered queue heads (the heads of further nodes wait for
//! the word unregistered). More waiters than that yield instead of parking; more readers register on
//! their node's counter; a `notify_all` whose requeued waiters would not fit
//! wakes them all instead. Threads are not pinned: a thread that migrates between
//! nodes is served as a member of the node it queued on (a stale node costs
//! performance, never correctness).

#![cfg_attr(docsrs, feature(doc_cfg))]
// The model builds' cfgs are internal: no "non-numa_loom" badges on the API.
#![cfg_attr(docsrs, doc(auto_cfg(hide(numa_loom, numa_shuttle))))]

#[cfg(all(numa_loom, not(feature = "loom")))]
compile_error!("`--cfg numa_loom` needs the `loom` feature: add `--features cst-mutex/loom`");

/// Counts an event of `crate::stats` with feature `stats`; nothing without it.
macro_rules! count {
    ($($call:tt)*) => {
        #[cfg(feature = "stats")]
        {
            crate::stats::$($call)*;
        }
    };
}

mod cohort;
mod condvar;
mod config;
#[cfg(not(numa_loom))]
mod fair;
mod fork;
mod list;
#[cfg(all(feature = "lock_api_04", not(numa_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api_04")))]
pub mod lock_api_04;
mod mutex;
pub mod next;
mod pool;
mod qnode;
mod queue;
mod raw_condvar;
mod raw_mutex;
mod raw_rwlock;
mod remutex;
mod rwlock;
mod snode;
mod spin;
#[cfg(feature = "stats")]
#[cfg_attr(docsrs, doc(cfg(feature = "stats")))]
mod stats;
mod sync;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod test_hooks;

/// The process's fork generation (feature `test-hooks`, for the fork tests;
/// not part of the API): how many forks whose child handler ran lie between
/// this process and its first ancestor that loaded the crate (0 there). A
/// fork whose child handler did not run leaves the child at its parent's
/// generation, with the parent's waiters in its locks' state taken for live
/// ones.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn fork_generation() -> u32 {
    fork::generation()
}
mod word;

/// The `lock_api` (0.5) this crate implements, re-exported as parking_lot does, so
/// code can name the traits (`cst_mutex::lock_api::RawMutex`) without its own
/// dependency.
pub use lock_api;

/// The heap memory of every snode allocated so far, attached to a lock or in
/// the pool: `(bytes, allocations)`. Snodes are never freed (a reader that
/// loaded an snode pointer may still use it, see the crate docs on memory), so
/// this is the peak number attached at once times the snode's size; leak
/// checks subtract its growth.
#[cfg(not(numa_loom))]
pub fn snode_memory() -> (usize, usize) {
    pool::memory()
}

pub use condvar::Condvar;
pub use config::{
    ConfigError, DEFAULT_BATCH_BOUND, DEFAULT_FAIRNESS_TIMEOUT, batch_bound, cpus, cpus_env_error,
    fairness_timeout, set_batch_bound, set_cpus, set_fairness_timeout,
};
#[cfg(not(numa_loom))]
pub use fair::{FairMutex, FairMutexGuard, MappedFairMutexGuard, RawFairMutex};
#[cfg(feature = "arc_lock")]
pub use mutex::{ArcMutexGuard, ArcReentrantMutexGuard};
pub use mutex::{MappedMutexGuard, Mutex, MutexGuard};
pub use raw_condvar::RawCondvar;
pub use raw_mutex::{MutexGuardState, RawMutex};
pub use raw_rwlock::{ExclusiveGuardState, RawRwLock, SharedGuardState};
pub use remutex::{MappedReentrantMutexGuard, RawThreadId, ReentrantMutex, ReentrantMutexGuard};
#[cfg(feature = "arc_lock")]
pub use rwlock::{ArcRwLockReadGuard, ArcRwLockUpgradableReadGuard, ArcRwLockWriteGuard};
pub use rwlock::{
    MappedRwLockReadGuard, MappedRwLockWriteGuard, RwLock, RwLockReadGuard,
    RwLockUpgradableReadGuard, RwLockWriteGuard,
};
#[cfg(feature = "stats")]
pub use stats::{Stats, ThreadCounts, reset_thread_counts, thread_counts};

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

    /// Sets how many spin rounds the calling loom
    /// thread makes before parking (default 0).
    pub fn set_spin_rounds(rounds: u32) {
        sync::set_loom_spin_rounds(rounds);
    }

    /// Sets the batch bound the calling loom
    /// thread applies when it unlocks (at least 1; 0 means the process-wide
    /// [`batch_bound`](crate::batch_bound)).
    pub fn set_batch_bound(bound: u32) {
        sync::set_loom_batch_bound(bound);
    }

    /// Makes the calling loom thread's unlocks treat
    /// the lock as having more waiters than CPUs (they pass over a queue head
    /// that has not run since head-ship).
    pub fn set_oversubscribed(on: bool) {
        sync::set_loom_oversubscribed(on);
    }

    /// Makes every fairness check of the calling
    /// loom thread's unlocks due (so its wake-ups hand the lock off), or stops
    /// that.
    pub fn set_fairness_due(due: bool) {
        sync::set_loom_fairness_due(due);
    }

    /// Whether the calling loom thread's last
    /// slow acquisition was a grant to a queue head that inherited its node's
    /// registration from its predecessor.
    pub fn inherited() -> bool {
        sync::loom_inherited()
    }

    /// Whether an unlock by the calling loom
    /// thread passed over a queue head that had not run since head-ship.
    pub fn passed_sleeper() -> bool {
        sync::loom_passed()
    }

    /// Whether the calling loom thread's last
    /// slow mutex acquisition was a handoff.
    pub fn handed() -> bool {
        sync::loom_handed()
    }

    /// Whether the calling loom thread's last
    /// slow mutex acquisition parked on its snode-queue node.
    pub fn queue_parked() -> bool {
        sync::loom_queue_parked()
    }

    /// Whether the calling loom thread's last
    /// slow mutex acquisition went to park on its snode's parking queue.
    pub fn lot_parked() -> bool {
        sync::loom_lot_parked()
    }
}

#[cfg(all(test, not(numa_loom)))]
mod tests;
