//! The HQ lock: a hierarchical queued NUMA-aware spinlock (the "HQ spinlock" RFC,
//! Huawei, linux-arch mailing list, November 2025), as a
//! `lock_api` 0.5 raw mutex beside CNA.
//!
//! # Algorithm
//!
//! The lock word is qspinlock's, as in [`RawLock`](crate::RawLock): a `locked`
//! word (the fast path is one CAS on it) and a `tail` word. Only one waiter, the
//! *global head*, spins on `locked`; the others wait on their own queue node
//! (spinning, then parking, with the waiting policy shared with CNA,
//! [`Config::wait_policy`]).
//!
//! A contention episode (from the first waiter until the lock is completely
//! released, the tail word empty again) starts in plain queued mode and switches
//! to NUMA mode when contention is detected (the RFC's scheme): when the plain
//! queue has made [`Config::hq_switch_threshold`] hand-offs (50) and a waiter is
//! queued behind the head. The head then binds metadata and swings the tail word
//! to it; the plain queue is frozen where it is (its last node is marked
//! `END_OF_CHAIN`) and drains as before, holding one reference in the waiter
//! count, while new waiters enter the metadata. The NUMA side's global head
//! waits at the metadata's *gate* until the frozen queue's last waiter has
//! taken the lock and opens it, so one waiter at a time spins on `locked`.
//!
//! - **NUMA mode.** The switching head (or, with a switch threshold of 0, the
//!   episode's first waiter) *binds* the lock to metadata taken from a
//!   process-wide pool ([`POOL_SIZE`] entries): per-NUMA-node FIFO queues (MCS
//!   queues of the crate's queue nodes, [`crate::node`]) and the *list* of node
//!   queues, itself a FIFO (MCS) queue of node-queue slots (`gtail`, `gnext`).
//!   The tail word then holds the metadata's index and the number of waiters
//!   between their arrival and their last access to the metadata; the last one
//!   out (count 1 -> 0) *unbinds* the lock and returns the metadata to the pool.
//!   So the metadata in use is bounded by the number of waiting threads, not by
//!   the number of locks (the RFC's "dynamic metadata binding").
//! - **Plain queued mode**, before contention is detected or when the pool is
//!   exhausted: qspinlock's single MCS queue with its tail in the tail word, as
//!   [`RawQueuedMutex`](crate::RawQueuedMutex).
//!
//! In NUMA mode a waiter on node `n`:
//!
//! 1. enqueues on node queue `n` (swap of the queue's tail, link behind its
//!    predecessor) and waits on its node, unless the queue was empty;
//! 2. as the *local head* of queue `n` (it found the queue empty, or its
//!    predecessor released the queue to it), enqueues queue `n` at the tail of
//!    the list and waits on the queue's `gwait` slot, unless the list was empty;
//! 3. as holder of the list's head position (or directly from a local hand-off),
//!    is the global head: spins on `locked` until it takes the lock;
//! 4. holding the lock, passes the global head-ship on. **Local hand-off:** to
//!    its successor in queue `n` if there is one and the queue has made fewer than
//!    [`Config::hq_handoff_threshold`] consecutive local hand-offs (1000, the
//!    RFC's threshold) within [`Config::flush_threshold_ns`] (1 ms, CNA's time
//!    bound; not in the RFC, see `turn_left`); queue `n` keeps its place at the
//!    list's head. **Remote
//!    hand-off** otherwise: the list's head position goes to the next node queue
//!    of the list, and the queue's next waiter, if any, becomes its local head
//!    and re-enqueues queue `n` at the list's tail. An empty node queue leaves the
//!    list.
//!
//! This is Dice et al.'s lock cohorting (PPoPP 2012) with MCS locks at both
//! levels and qspinlock's "only the head spins on the lock word", which is how
//! the RFC describes HQ ("a combination of cohort-locking ... and the Linux
//! kernel queued spinlock"). The list is released before the node queue, so a
//! node queue is in the list at most once; the list and the node queues never
//! need to be updated together atomically.
//!
//! **Deviation from the RFC's list.** The RFC keeps node queues in the list in
//! order of first arrival and moves a *pointer* along it, wrapping at the end. Here
//! a queue that passes the lock remotely while it still has waiters re-enters the
//! list at the tail: the rotation visits the queues in the same cyclic order, and
//! a node queue that arrives meanwhile is served after (rather than before) the
//! queue that just had its turn, by at most one turn of `hq_handoff_threshold`
//! hand-offs. Either way every waiting node queue gets the lock within one round.
//!
//! Lock stealing, its bound (`NO_STEAL` after [`Config::steal_bound_ns`]) and
//! `unlock_fair` (the `HANDED` token, taken by the global head) are those of
//! [`RawLock`](crate::RawLock), and so is the global head's wait: with
//! [`WaitPolicy::Park`](crate::WaitPolicy::Park) it naps once its spin budget
//! is spent, and while it is not running (it naps, or a hand-off is still
//! waking it) the lock is marked `HEAD_ASLEEP` and arrivals spin for the lock
//! word instead of entering the queues (`RawLock`'s "Not queueing behind a
//! sleeping head"; without it 16 threads on 2 CPUs ran at 0.54x parking_lot).
//!
//! # Compared with CNA
//!
//! The lock word is the same 8 bytes. CNA needs nothing else per lock; HQ binds
//! about 1.1 KB of pool metadata (one cache-line pair per node queue, 8 node
//! queues) for the duration of a contention episode in NUMA mode. Per thread both
//! use the one queue node of [`crate::node`]. A CNA queue head scans and reorders
//! the single queue while it waits; an HQ waiter enqueues on its node's own queue
//! (arrivals on different nodes write different lines, except for one count
//! update of the tail word each), and a hand-off follows a link, at the price of
//! two list operations per remote hand-off and the count updates.
//!
//! # Memory orderings
//!
//! Every ordering carries its argument at the site. The loom models of
//! `tests/loom.rs` (`hq_*`) check mutual exclusion, the local-then-remote
//! hand-off, arrivals racing the release and the unbind, pool exhaustion, the
//! mode switch, `unlock_fair`, and (`hq_spin_*`, waiters that spin instead of
//! parking, so that no futex-model lock orders the hand-offs) the plain queue,
//! a shared node queue, two node queues and a node queue's re-entry with only
//! the lock's own orderings between the waiters. `scripts/ordering-mutants.py`
//! weakens every Acquire, Release and AcqRel of this file one step at a time:
//! each weakening makes a model fail, except at the sites listed with their
//! argument in `scripts/ordering-mutants.allow` (the queue links, whose only
//! effect is a modification order loom does not produce, and the join after a
//! mode switch on a reused metadata entry, beyond the models' budget). The
//! orderings no model needed and no argument required were weakened to Relaxed
//! with the argument at the site (`leave`, the binding CAS, the gate check,
//! `END_OF_CHAIN`). Measured so far on 2 CPUs with virtual nodes only: HQ's
//! NUMA gains on real multi-node machines are the RFC's, not yet ours.

use crossbeam_utils::CachePadded;

use crate::config::{Config, Global, Tunables};
use crate::node::{self, Me, registry};
use crate::raw_lock::{HANDED, LOCKED, NO_STEAL, TAIL_FLAGS, UNLOCKED};
use crate::sync::{self, AtomicU32, Ordering};

/// `tail` bit 2: NUMA mode (the word names a [`Meta`]); clear: plain mode.
/// (Bits 0 and 1 are the flags `NO_STEAL` and `HEAD_ASLEEP` of
/// [`crate::raw_lock`], with the same meaning.)
const NUMA_MODE: u32 = 4;
/// Plain mode: the MCS tail's code is `tail >> CODE_SHIFT` (0 = no queue).
const CODE_SHIFT: u32 = 3;
/// Largest queue-node code plain mode can store (29 bits).
const MAX_PLAIN_CODE: u32 = u32::MAX >> CODE_SHIFT;
/// NUMA mode: the metadata index is `(tail >> META_SHIFT) & META_MASK`.
const META_SHIFT: u32 = 3;
/// 10 bits of metadata index.
const META_MASK: u32 = (1 << 10) - 1;
/// NUMA mode: the waiter count is `tail >> COUNT_SHIFT`.
const COUNT_SHIFT: u32 = 13;
/// One waiter in the count field.
const COUNT_ONE: u32 = 1 << COUNT_SHIFT;
/// Most waiters the count field holds (2^19 - 1); more wait without a queue.
const COUNT_MAX: u32 = u32::MAX >> COUNT_SHIFT;

/// Queue node `locked` value: you are the local head of your node queue without
/// the list's head position; enqueue the node queue in the list.
const LOCAL_HEAD: u32 = 4;
/// Queue node `locked` value: you are the global head (in plain mode: the queue
/// head); `value - GLOBAL_HEAD` is the number of consecutive local hand-offs of
/// your node queue so far (in plain mode: of the plain queue). The HQ hand-off
/// carries its state in the word it signals, no hand-off cell.
const GLOBAL_HEAD: u32 = 8;
/// Queue node `next` value: the plain queue ended here when the lock switched to
/// NUMA mode (no waiter will link behind this node); codes fit in 30 bits.
const END_OF_CHAIN: u32 = u32::MAX;
/// A plain queue head past the switch threshold that finds the pool exhausted
/// tries again only every this many hand-offs (a claim scans the pool).
const SWITCH_RETRY: u32 = 64;
/// `gwait` value: your node queue holds the list's head position.
const GO: u32 = 1;

/// NUMA node queues per lock's metadata; node `k` uses queue `k % MAX_NODES` (nodes that
/// share a queue only lose locality, never correctness). 8 covers a 2-socket
/// AMD EPYC in NPS4 and a 4-node Kunpeng 920, the RFC's machines.
#[cfg(not(numa_loom))]
pub const MAX_NODES: usize = 8;
/// NUMA node queues per lock's metadata (loom: the models use nodes 0 and 1).
#[cfg(numa_loom)]
pub const MAX_NODES: usize = 2;

/// Metadata entries in the process-wide pool: at most this many locks are in
/// NUMA mode at once; a lock that finds the pool empty runs its contention
/// episode in plain queued mode. A bound metadata has at least one waiting
/// thread, so the pool is exhausted only with at least this many threads waiting
/// on distinct locks at once. (The RFC sizes its pool by NR_CPUS x contexts / 2.)
/// About 1.1 KB each, 288 KB in all, in zeroed static memory: a page is touched
/// only when a lock first binds an entry on it.
#[cfg(not(numa_loom))]
pub const POOL_SIZE: usize = 256;

/// One NUMA node's queue inside a [`Meta`], on its own cache lines.
#[derive(Debug)]
struct NodeQueue {
    /// Code of the last queue node of this node queue, 0 = empty.
    tail: AtomicU32,
    /// The node queue behind this one in the list (node index + 1), 0 = none yet.
    /// Written by the next queue's local head, reset by ours before enqueueing.
    gnext: AtomicU32,
    /// Where this queue's local head waits for the list's head position
    /// (`WAIT`, `PARKED`, [`GO`]).
    gwait: AtomicU32,
    /// When this queue's current turn at the list's head began: the low 32 bits
    /// of [`sync::now_ns`], written by the turn's first holder and read by the
    /// turn's later holders (all ordered by the hand-off chain).
    turn_start: AtomicU32,
}

/// The per-lock NUMA metadata bound to a contended lock.
#[derive(Debug)]
pub(crate) struct Meta {
    /// The list's tail: node index + 1 of the last node queue, 0 = empty list.
    gtail: CachePadded<AtomicU32>,
    /// The NUMA side's gate: [`GO`] once no plain queue is left ahead of it
    /// (set by the binder, or by the last waiter of the plain queue frozen by a
    /// mode switch); `WAIT` (0, the pool's state) while that queue drains, so
    /// that its heads and the NUMA side's global head never compete for
    /// `locked` (a global head that kept re-taking the lock starved the frozen
    /// queue). A global head waits here before it waits on `locked`.
    gate: CachePadded<AtomicU32>,
    queues: [CachePadded<NodeQueue>; MAX_NODES],
}

impl Meta {
    #[cfg(not(numa_loom))]
    const fn new() -> Self {
        Meta {
            gtail: CachePadded::new(AtomicU32::new(0)),
            gate: CachePadded::new(AtomicU32::new(0)),
            queues: [const {
                CachePadded::new(NodeQueue {
                    tail: AtomicU32::new(0),
                    gnext: AtomicU32::new(0),
                    gwait: AtomicU32::new(0),
                    turn_start: AtomicU32::new(0),
                })
            }; MAX_NODES],
        }
    }

    #[cfg(numa_loom)]
    fn new() -> Self {
        Meta {
            gtail: CachePadded::new(AtomicU32::new(0)),
            gate: CachePadded::new(AtomicU32::new(0)),
            queues: std::array::from_fn(|_| {
                CachePadded::new(NodeQueue {
                    tail: AtomicU32::new(0),
                    gnext: AtomicU32::new(0),
                    gwait: AtomicU32::new(0),
                    turn_start: AtomicU32::new(0),
                })
            }),
        }
    }
}

/// The process-wide metadata pool: a claim flag per entry (scanned from a
/// per-lock starting point) and the entries. Every entry is all zeros (empty
/// queues, empty list) while it is free: the last waiter of a lock leaves it so.
pub(crate) struct Pool {
    #[cfg(not(numa_loom))]
    claimed: [AtomicU32; POOL_SIZE],
    #[cfg(not(numa_loom))]
    metas: [Meta; POOL_SIZE],
    #[cfg(numa_loom)]
    claimed: Vec<AtomicU32>,
    #[cfg(numa_loom)]
    metas: Vec<Meta>,
}

impl Pool {
    #[cfg(not(numa_loom))]
    const fn new() -> Self {
        Pool {
            claimed: [const { AtomicU32::new(0) }; POOL_SIZE],
            metas: [const { Meta::new() }; POOL_SIZE],
        }
    }

    #[cfg(numa_loom)]
    fn new() -> Self {
        let size = sync::loom_pool_size();
        Pool {
            claimed: (0..size).map(|_| AtomicU32::new(0)).collect(),
            metas: (0..size).map(|_| Meta::new()).collect(),
        }
    }

    /// Claims a free entry, scanning from `hint`; `None` if all are taken.
    fn claim(&self, hint: usize) -> Option<u32> {
        let len = self.claimed.len();
        (0..len).map(|i| (hint + i) % len).find_map(|i| {
            // Relaxed load: only skips taken entries cheaply. Acquire CAS on
            // success: pairs with the Release store of `free`, so the previous
            // binding's accesses to the entry happen-before ours (the entry reads
            // as all zeros). Relaxed on failure: nothing claimed.
            (self.claimed[i].load(Ordering::Relaxed) == 0
                && self.claimed[i]
                    .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok())
            .then_some(i as u32)
        })
    }

    /// Returns entry `m` (all its queues empty) to the pool.
    fn free(&self, m: u32) {
        #[cfg(numa_loom)]
        self.assert_empty(m);
        // Release: our accesses to the entry, and every earlier waiter's (which
        // happen-before ours through the lock word: see `leave`), happen-before
        // the next claim's Acquire.
        self.claimed[m as usize].store(0, Ordering::Release);
    }

    fn meta(&self, m: u32) -> &Meta {
        &self.metas[m as usize]
    }

    /// Under loom: checks that entry `m` is free to reuse (the list and every
    /// node queue empty) when its last user returns it. The freeing thread's
    /// view holds every earlier user's last access (see `RawHqLock::leave`), so
    /// these loads read the final values; a stale list tail (a list that a lost
    /// or stale link left non-empty) fails the model here rather than in a
    /// later binding of the entry.
    #[cfg(numa_loom)]
    fn assert_empty(&self, m: u32) {
        let meta = self.meta(m);
        // Relaxed: see above; a check, not part of the algorithm.
        let gtail = meta.gtail.load(Ordering::Relaxed);
        assert_eq!(
            gtail, 0,
            "numa-spin: HQ metadata {m} freed with a non-empty list"
        );
        for (n, q) in meta.queues.iter().enumerate() {
            let tail = q.tail.load(Ordering::Relaxed);
            assert_eq!(
                tail, 0,
                "numa-spin: HQ metadata {m} freed with node queue {n} non-empty"
            );
        }
    }
}

#[cfg(not(numa_loom))]
static POOL: Pool = Pool::new();

#[cfg(not(numa_loom))]
fn pool() -> &'static Pool {
    &POOL
}

#[cfg(numa_loom)]
crate::sync::model::lazy_static! {
    static ref POOL: Pool = Pool::new();
}

/// The pool of the current loom execution.
#[cfg(numa_loom)]
fn pool() -> &'static Pool {
    &POOL
}

/// The HQ lock, generic over where its tunables live. Use it through
/// [`RawHqMutex`] (process-wide tunables) or `RawHqLock<&'static Config>`
/// (per-lock tunables, [`RawHqLock::with_config`]).
///
/// # Layout
///
/// 8 bytes (without feature `stats`), two 32-bit words:
///
/// | word | bits | meaning |
/// | --- | --- | --- |
/// | `locked` | all | `UNLOCKED` (0), `LOCKED` (1), `HANDED` (2), as in [`RawLock`](crate::RawLock) |
/// | `tail` | 0 | `NO_STEAL`: the global head forbids lock stealing |
/// | `tail` | 1 | `HEAD_ASLEEP`: the global head is not running (a hint for arrivals) |
/// | `tail` | 2 | mode: 0 = plain queued, 1 = NUMA |
/// | `tail` | 3..32 | plain mode: code of the MCS tail node, 0 = no waiter |
/// | `tail` | 3..13 | NUMA mode: index of the bound metadata in the pool |
/// | `tail` | 13..32 | NUMA mode: waiters between arrival and their last metadata access |
///
/// # Fairness
///
/// A node queue holds the lock for at most [`Config::hq_handoff_threshold`]
/// consecutive local hand-offs while another node queue waits; node queues take
/// turns in list order. Lock stealing is bounded as in [`RawLock`](crate::RawLock)
/// (`steal_bound_ns`); `unlock_fair` hands the lock to the global head, the next
/// waiter in HQ order, with no stealing in between.
#[repr(C, align(8))]
pub struct RawHqLock<T: Tunables = Global> {
    pub(crate) locked: AtomicU32,
    pub(crate) tail: AtomicU32,
    tunables: T,
    #[cfg(feature = "stats")]
    counters: crate::stats::Counters,
}

/// The HQ lock with the process-wide tunables ([`Config::global`]): 8 bytes
/// (without feature `stats`), `const fn new`, `lock_api::RawMutex` +
/// `RawMutexFair` + `RawMutexTimed`.
///
/// ```
/// use lock_api::RawMutex as _;
///
/// let raw = numa_spin::RawHqMutex::new();
/// let guard = raw.lock();
/// assert!(raw.is_locked());
/// // SAFETY: `guard` is the state of the acquisition above.
/// unsafe { raw.unlock(guard) };
/// ```
pub type RawHqMutex = RawHqLock<Global>;

/// A mutual-exclusion lock protecting a `T`, backed by the HQ lock
/// ([`RawHqMutex`]).
///
/// ```
/// static COUNTER: numa_spin::HqMutex<u64> = numa_spin::HqMutex::new(0);
/// *COUNTER.lock() += 1;
/// assert_eq!(*COUNTER.lock(), 1);
/// ```
pub type HqMutex<T> = lock_api::Mutex<RawHqMutex, T>;

/// The guard of an [`HqMutex`]; `Send`.
pub type HqMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawHqMutex, T>;

/// How a waiter entered the queues.
enum Entry {
    /// Plain mode, behind the waiter with this code (0 = first).
    Plain(u32),
    /// NUMA mode, in metadata `m`.
    Numa(u32),
}

impl<T: Tunables> RawHqLock<T> {
    #[cfg(not(numa_loom))]
    const fn from_tunables(tunables: T) -> Self {
        RawHqLock {
            locked: AtomicU32::new(UNLOCKED),
            tail: AtomicU32::new(0),
            tunables,
            #[cfg(feature = "stats")]
            counters: crate::stats::Counters::new(),
        }
    }

    #[cfg(numa_loom)]
    fn from_tunables(tunables: T) -> Self {
        RawHqLock {
            locked: AtomicU32::new(UNLOCKED),
            tail: AtomicU32::new(0),
            tunables,
            #[cfg(feature = "stats")]
            counters: crate::stats::Counters::new(),
        }
    }

    /// The fast path's single attempt (as `RawLock::try_steal`).
    #[inline]
    fn try_steal(&self) -> bool {
        // Relaxed: NO_STEAL is a fairness hint, not for memory safety; the CAS
        // below synchronizes the protected data.
        self.tail.load(Ordering::Relaxed) & NO_STEAL == 0
            // Acquire on success: pairs with the Release store of the unlock that
            // made the word UNLOCKED. Relaxed on failure: nothing acquired.
            && self
                .locked
                .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Acquires the lock (`lock_api::RawMutex::lock` without a guard).
    #[inline]
    pub fn acquire(&self) {
        #[cfg(feature = "stats")]
        let node = sync::current_node();
        if self.try_steal() {
            #[cfg(feature = "stats")]
            self.counters.acquired(node, false);
            return;
        }
        self.lock_slow();
        #[cfg(feature = "stats")]
        self.counters.acquired(node, true);
    }

    /// Acquires the lock if it is free and stealing is allowed
    /// (`lock_api::RawMutex::try_lock`); never waits. Same contract as
    /// [`RawLock::try_acquire`](crate::RawLock::try_acquire).
    #[inline]
    pub fn try_acquire(&self) -> bool {
        #[cfg(feature = "stats")]
        let node = sync::current_node();
        let ok = self.try_steal();
        #[cfg(feature = "stats")]
        if ok {
            self.counters.acquired(node, false);
        }
        ok
    }

    /// Releases the lock: one release store.
    ///
    /// # Safety
    ///
    /// The lock must be held and this call must end that acquisition (as for
    /// [`RawLock::release`](crate::RawLock::release)).
    #[inline]
    pub unsafe fn release(&self) {
        // Release: our critical section happens-before the next acquisition.
        self.locked.store(UNLOCKED, Ordering::Release);
    }

    /// Releases the lock and hands it to the global head, if anyone waits
    /// (`lock_api::RawMutexFair::unlock_fair`): nobody can steal it in between.
    ///
    /// # Safety
    ///
    /// As for [`release`](RawHqLock::release).
    pub unsafe fn release_fair(&self) {
        // Relaxed suffices (the argument of `RawLock::release_fair`): the tail
        // word becomes empty, or a waiter leaves the count, only in `lock()` by a
        // thread that then holds the lock; every such thread held it before us,
        // so its update happens-before our acquisition and we cannot read a stale
        // "waiters" word. A word with waiters means one of them will become global
        // head and take HANDED.
        let queued = self.tail.load(Ordering::Relaxed) & !TAIL_FLAGS != 0;
        // Release: as in `release`. The head takes HANDED with an Acquire CAS.
        self.locked
            .store(if queued { HANDED } else { UNLOCKED }, Ordering::Release);
    }

    /// Whether the lock is held (a momentary snapshot).
    #[inline]
    pub fn is_held(&self) -> bool {
        self.locked.load(Ordering::Relaxed) != UNLOCKED
    }

    /// Whether the lock is bound to NUMA metadata right now (a snapshot; tests).
    pub fn is_numa_bound(&self) -> bool {
        self.tail.load(Ordering::Relaxed) & NUMA_MODE != 0
    }

    /// A snapshot of the lock's counters (feature `stats`).
    #[cfg(feature = "stats")]
    #[cfg_attr(docsrs, doc(cfg(feature = "stats")))]
    pub fn stats(&self) -> crate::Stats {
        self.counters.snapshot()
    }

    /// The tunables this lock uses.
    pub fn config(&self) -> &Config {
        self.tunables.config()
    }

    /// The slow path: enter plain or NUMA mode, wait, pass the head-ship on.
    #[cold]
    #[inline(never)]
    fn lock_slow(&self) {
        let cfg = *self.tunables.config();
        // The lock may have been released since the fast path looked; while
        // the global head is not running (asleep, or absent behind its
        // NO_STEAL mark), spin for the lock rather than queue behind it.
        if self.try_steal()
            || node::steal_while_head_asleep(&self.tail, &cfg, || self.try_steal())
            || node::steal_past_absent_head(&self.tail, &self.locked, &cfg)
        {
            return;
        }
        // Our node (for NUMA mode), and the rest of the lazily initialized
        // state the queued wait reads, before `enter` initializes our queue
        // node and counts us in the tail word: the first lookup allocates,
        // which may re-enter this lock (see `node::before_enqueue`).
        let numa = node::before_enqueue();
        let Some(me) = node::current() else {
            node::lock_unqueued(&self.locked, &cfg);
            return;
        };
        let _enqueued = node::Enqueued::begin();
        match self.enter(me, &cfg) {
            Some(Entry::Plain(pred)) => self.lock_plain(me, pred, &cfg),
            Some(Entry::Numa(m)) => self.lock_numa(me, m, numa, &cfg),
            None => node::lock_unqueued(&self.locked, &cfg),
        }
        if me.borrowed {
            // We hold the lock, so our node is in no queue (see `crate::node`).
            registry().free_code(me.code);
        }
    }

    /// Registers the caller in the tail word: joins the bound metadata (count +
    /// 1), or the plain queue, or, if the word is empty, binds metadata from the
    /// pool (plain mode if the pool is exhausted). `None`: no room in the word
    /// (code above 29 bits, or 2^19 - 1 waiters); wait without a queue.
    fn enter(&self, me: Me, cfg: &Config) -> Option<Entry> {
        // Initialize our node. Relaxed: published by the Release of the enqueue
        // (the plain tail CAS below, or the node-queue tail swap in NUMA mode)
        // and of the link store, which every reader of the node passes through.
        me.node.next.store(0, Ordering::Relaxed);
        me.node.locked.store(node::WAIT, Ordering::Relaxed);
        let strict = if cfg.steal_bound_ns == 0 { NO_STEAL } else { 0 };
        let hint = (self as *const Self as usize) >> 4;
        let mut claimed: Option<u32> = None;
        let mut t = self.tail.load(Ordering::Relaxed);
        let entry = loop {
            if t & NUMA_MODE != 0 {
                if t >> COUNT_SHIFT == COUNT_MAX {
                    break None;
                }
                // Acquire on success: pairs with the Release of the mode switch's
                // CAS (the count increments and decrements between continue its
                // release sequence), so the switcher's claim of the metadata, and
                // through it the previous binding's close of the gate, happen-
                // before our read of the gate: after a switch the gate must read
                // closed until the frozen plain queue has drained. It pairs as well
                // with the binding CAS's Release, publishing the binder's GO
                // (see the bind below). Relaxed on failure: we retry.
                match self.tail.compare_exchange_weak(
                    t,
                    (t + COUNT_ONE) | strict,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        sync::event("hq-join");
                        break Some(Entry::Numa((t >> META_SHIFT) & META_MASK));
                    }
                    Err(seen) => t = seen,
                }
            } else if t & !TAIL_FLAGS != 0
                || cfg.hq_switch_threshold != 0
                || claimed.is_none() && !self.try_claim(&mut claimed, hint)
            {
                // Plain mode: a plain queue exists, or the episode starts plain
                // (contention detection), or the pool is exhausted.
                if me.code > MAX_PLAIN_CODE {
                    break None;
                }
                let new = (me.code << CODE_SHIFT) | (t & TAIL_FLAGS) | strict;
                // AcqRel on success, as CNA's enqueue: Release publishes our
                // node's initialization to the waiter that links behind us;
                // Acquire makes our predecessor's initialization (its `next = 0`)
                // happen-before our write of its `next`. Relaxed on failure.
                match self
                    .tail
                    .compare_exchange_weak(t, new, Ordering::AcqRel, Ordering::Relaxed)
                {
                    Ok(_) => {
                        sync::event("hq-plain");
                        #[cfg(numa_loom)]
                        sync::note_enqueued();
                        break Some(Entry::Plain(t >> CODE_SHIFT));
                    }
                    Err(seen) => t = seen,
                }
            } else {
                let m = claimed.expect("claimed above");
                // No plain queue ahead: open the gate. Relaxed: published to
                // joiners by the binding CAS's Release below.
                pool().meta(m).gate.store(GO, Ordering::Relaxed);
                let new = (m << META_SHIFT) | COUNT_ONE | NUMA_MODE | (t & TAIL_FLAGS) | strict;
                // Release on success: publishes our GO to every joiner. A
                // joiner's Acquire CAS on the tail reads this value or a later
                // one of its release sequence (joins and leaves are all
                // read-modify-writes), so our GO happens-before the joiner's
                // reads of the gate, which by coherence then read GO or a later
                // value, never the previous binding's close (the next close is
                // written only by the last one out, after this joiner left).
                // Without it a joiner could, in the C11/Rust model, read the
                // stale close, and even its CAS announcing the park could be
                // ordered before our GO in the gate's modification order
                // (read-modify-writes read the value just before them in that
                // order, not the newest), leaving it parked on a gate that only
                // END_OF_CHAIN wakes. loom cannot show it (its read-modify-
                // writes read the newest store), so the site is argued in
                // `scripts/ordering-mutants.allow`. Every other field a joiner
                // reads is either only read-modify-written (node queue tails,
                // the list tail) or reset by the node queue's local head, which
                // is ordered after the previous binding's accesses to that
                // queue by the queue tail's Release clearing CAS / AcqRel swap
                // (`pass_numa`, `lock_numa`). The joiners of a mode switch need
                // the claim as well: see `try_switch`. Relaxed on failure: we
                // retry.
                match self
                    .tail
                    .compare_exchange_weak(t, new, Ordering::Release, Ordering::Relaxed)
                {
                    Ok(_) => {
                        claimed = None;
                        sync::event("hq-bind");
                        #[cfg(feature = "stats")]
                        self.counters.hq_event(crate::stats::HqEvent::Bind);
                        break Some(Entry::Numa(m));
                    }
                    Err(seen) => t = seen,
                }
            }
        };
        if let Some(m) = claimed {
            // Claimed for a binding that another waiter made first: close the
            // gate we may have opened (Relaxed: published by `free`'s Release).
            pool().meta(m).gate.store(node::WAIT, Ordering::Relaxed);
            pool().free(m);
        }
        sync::trace(|| format!("entered code {} tail {t:#x}", me.code));
        entry
    }

    /// Claims pool metadata into `claimed`; false if the pool is exhausted.
    fn try_claim(&self, claimed: &mut Option<u32>, hint: usize) -> bool {
        *claimed = pool().claim(hint);
        if claimed.is_none() {
            sync::event("hq-pool-exhausted");
        }
        #[cfg(feature = "stats")]
        if claimed.is_none() {
            self.counters.hq_event(crate::stats::HqEvent::PoolFallback);
        }
        claimed.is_some()
    }

    /// Plain queued mode: qspinlock's MCS queue (as `RawQueuedMutex`).
    fn lock_plain(&self, me: Me, pred: u32, cfg: &Config) {
        let mut k = 0;
        if pred != 0 {
            // Release: our node's initialization happens-before the head that
            // follows this link (Acquire) writes our `locked`.
            registry().node(pred).next.store(me.code, Ordering::Release);
            k = node::wait_signal(&me.node.locked, cfg) - GLOBAL_HEAD;
        }
        self.wait_for_lock(cfg);
        self.pass_plain(me, k, cfg);
    }

    /// We hold the lock as the plain queue's head after `k` hand-offs of the
    /// queue: switch to NUMA mode if contention is detected, then make the next
    /// waiter head or empty the queue.
    fn pass_plain(&self, me: Me, k: u32, cfg: &Config) {
        let sw = cfg.hq_switch_threshold;
        if sw != 0 && k >= sw && (k - sw).is_multiple_of(SWITCH_RETRY) {
            self.try_switch(me);
        }
        let mut next = me.node.next.load(Ordering::Acquire);
        if next == 0 {
            let cur = self.tail.load(Ordering::Relaxed);
            // Relaxed CAS (CNA's argument): an empty tail publishes no node; the
            // next thread to enqueue finds no predecessor and touches nothing of
            // ours. Clears the flags with the queue.
            if cur & !TAIL_FLAGS == me.code << CODE_SHIFT
                && self
                    .tail
                    .compare_exchange(cur, 0, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            // A waiter swapped the tail and will link to us, or the lock switched
            // to NUMA mode with us last (END_OF_CHAIN). Acquire inside.
            next = node::wait_link(&me.node.next, cfg);
        }
        if next == END_OF_CHAIN {
            // The plain queue ends with us; drop its reference to the metadata.
            // Relaxed: the switch CAS happens-before our head-ship (see
            // `try_switch`), so the NUMA word is visible; the word stays bound to
            // the same metadata while the reference we drop is counted.
            let t = self.tail.load(Ordering::Relaxed);
            sync::trace(|| format!("end of the plain queue, tail {t:#x}"));
            let m = (t >> META_SHIFT) & META_MASK;
            // Open the NUMA side's gate (Release inside; we hold the lock, so
            // its global head gets `locked` only after our release anyway).
            self.pass_head_ship(&pool().meta(m).gate, GO);
            self.leave(m);
            return;
        }
        // Release inside: the lock's history to the new head.
        let k = (k + 1).min(u32::MAX - GLOBAL_HEAD);
        self.pass_head_ship(&registry().node(next).locked, GLOBAL_HEAD + k);
    }

    /// Contention detected: switch the lock from plain to NUMA mode. The plain
    /// queue is frozen where it is (new waiters enter the metadata from now on)
    /// and keeps one reference in the count until its last waiter has passed.
    fn try_switch(&self, me: Me) {
        let cur = self.tail.load(Ordering::Relaxed);
        if cur & NUMA_MODE != 0 || cur >> CODE_SHIFT == me.code {
            // Switched already (we are in a frozen plain queue), or nobody is
            // queued behind us: nothing to detect.
            return;
        }
        let hint = (self as *const Self as usize) >> 4;
        let mut claimed = None;
        if !self.try_claim(&mut claimed, hint) {
            return;
        }
        let m = claimed.expect("claimed above");
        let new = (m << META_SHIFT) | COUNT_ONE | NUMA_MODE | (cur & TAIL_FLAGS);
        // AcqRel on success. Acquire: the last plain waiter's initialization of
        // its node (`next = 0`, before its Release enqueue CAS, which we read)
        // happens-before our END_OF_CHAIN store into it. Release: publishes our
        // claim of `m`, and through it the previous binding's close of the
        // gate, to the waiters that join with an Acquire increment: they must
        // find the gate closed (not that binding's stale GO) until the frozen
        // plain queue's last waiter opens it.
        // Relaxed on failure: a waiter enqueued meanwhile; the next head retries.
        match self
            .tail
            .compare_exchange(cur, new, Ordering::AcqRel, Ordering::Relaxed)
        {
            Ok(_) => {
                sync::event("hq-switch");
                #[cfg(feature = "stats")]
                self.counters.hq_event(crate::stats::HqEvent::ModeSwitch);
                sync::trace(|| format!("switched to meta {m}, plain tail {}", cur >> CODE_SHIFT));
                // Relaxed: the last plain waiter reads END_OF_CHAIN only as the
                // plain queue's head, which it became through the chain of
                // head-ship signals (Release swap, Acquire wait) that starts with
                // ours, after this store and the switch CAS: both happen-before
                // its read, so it sees END_OF_CHAIN and then the NUMA word. (That
                // the store lands after the waiter's `next = 0` is the switch
                // CAS's Acquire.)
                registry()
                    .node(cur >> CODE_SHIFT)
                    .next
                    .store(END_OF_CHAIN, Ordering::Relaxed);
            }
            Err(_) => pool().free(m),
        }
    }

    /// NUMA mode in metadata `m`, for a waiter on NUMA node `numa`: node
    /// queue, list, lock, hand-off, leave. Reads no lazily initialized state
    /// (see `node::before_enqueue`).
    fn lock_numa(&self, me: Me, m: u32, numa: u32, cfg: &Config) {
        let meta = pool().meta(m);
        let n = numa as usize % MAX_NODES;
        let q = &meta.queues[n];
        // AcqRel: Release publishes our node's initialization to the waiter that
        // links behind us; Acquire orders our predecessor's initialization (and,
        // when the queue was empty, the previous local head's accesses to this
        // node queue, released by its clearing CAS) before our writes.
        let pred = q.tail.swap(me.code, Ordering::AcqRel);
        let mut batch = None;
        if pred != 0 {
            // Release: our node's initialization happens-before the local head
            // that reads this link (Acquire) and signals our `locked`.
            registry().node(pred).next.store(me.code, Ordering::Release);
            // Acquire inside: pairs with the Release swap of `signal`.
            #[cfg(numa_loom)]
            sync::note_enqueued();
            let v = node::wait_signal(&me.node.locked, cfg);
            sync::trace(|| format!("node queue {n}: signalled {v}"));
            if v >= GLOBAL_HEAD {
                batch = Some(v - GLOBAL_HEAD);
            } else {
                debug_assert_eq!(v, LOCAL_HEAD);
            }
        }
        let batch = match batch {
            Some(b) => b,
            None => {
                // The first time (we found the node queue empty) counts as our
                // enqueue for the loom models' sequencing.
                Self::join_list(meta, n, pred == 0, cfg);
                0
            }
        };
        // Relaxed: the gate only picks the moment to wait for `locked`. What
        // the global head needs of the frozen plain queue (its critical
        // sections) reaches it through `locked`: the queue's last waiter opens
        // the gate while it holds the lock, and our Acquire CAS in
        // `wait_for_lock` reads its (or a later) release. A stale "closed" read
        // only sends us to `wait_signal`, which reads the gate again.
        if meta.gate.load(Ordering::Relaxed) != GO {
            sync::event("hq-gate-wait");
            node::wait_signal(&meta.gate, cfg);
        }
        self.wait_for_lock(cfg);
        sync::trace(|| format!("node queue {n}: acquired, batch {batch}"));
        self.pass_numa(me, meta, n, batch, cfg);
        self.leave(m);
    }

    /// As the local head of node queue `n`, enqueues the queue in the list and
    /// waits until it holds the list's head position.
    fn join_list(meta: &Meta, n: usize, first: bool, cfg: &Config) {
        let q = &meta.queues[n];
        // Relaxed: published by the Release of the list-tail swap below (to the
        // queue behind us, which writes our `gnext`) and of our link store (to the
        // queue in front, which signals our `gwait`).
        q.gnext.store(0, Ordering::Relaxed);
        q.gwait.store(node::WAIT, Ordering::Relaxed);
        // AcqRel: Release as above; Acquire makes the previous tail queue's reset
        // of its `gnext` happen-before our link write into it.
        let prev = meta.gtail.swap(n as u32 + 1, Ordering::AcqRel);
        #[cfg(numa_loom)]
        if first {
            sync::note_enqueued();
        }
        #[cfg(not(numa_loom))]
        let _ = first;
        if prev != 0 {
            // Release: our resets happen-before the head that follows the link.
            meta.queues[prev as usize - 1]
                .gnext
                .store(n as u32 + 1, Ordering::Release);
            // Acquire inside: pairs with the Release swap of the remote hand-off.
            let v = node::wait_signal(&q.gwait, cfg);
            debug_assert_eq!(v, GO);
        }
        sync::trace(|| format!("node queue {n}: list head (prev {prev})"));
    }

    /// We hold the lock as the global head from node queue `n`, after `batch`
    /// consecutive local hand-offs of that queue: pass the global head-ship on.
    fn pass_numa(&self, me: Me, meta: &Meta, n: usize, batch: u32, cfg: &Config) {
        let q = &meta.queues[n];
        let reg = registry();
        // Our local successor, if one has swapped itself into the node queue's
        // tail. Acquire: pairs with its Release link store (we signal its node).
        let mut s = me.node.next.load(Ordering::Acquire);
        // Relaxed: our code is replaced in the queue's tail only by a later swap
        // (a successor that will link) or by our own clearing CAS below, so any
        // other value means a successor; the link carries the synchronization.
        if s == 0 && q.tail.load(Ordering::Relaxed) != me.code {
            s = node::wait_link(&me.node.next, cfg);
        }
        if s != 0 && batch < cfg.hq_handoff_threshold && Self::turn_left(q, batch, cfg) {
            // Local hand-off: the node queue keeps the list's head position.
            #[cfg(feature = "stats")]
            self.counters.hq_event(crate::stats::HqEvent::LocalHandoff);
            sync::event("hq-local");
            sync::trace(|| format!("local hand-off to {s}"));
            // Release inside: our view (queue links, list state) to the new head.
            // (Saturating: a threshold near u32::MAX means "never hand off
            // remotely"; the count then stops short of overflowing the word.)
            let batch = (batch + 1).min(u32::MAX - GLOBAL_HEAD);
            self.pass_head_ship(&reg.node(s).locked, GLOBAL_HEAD + batch);
            return;
        }
        // Remote hand-off. First the list (so that this node queue's next local
        // head, released below, cannot enqueue it while it is still in the list).
        // Acquire: pairs with the Release link of the queue behind us.
        let mut gs = q.gnext.load(Ordering::Acquire);
        if gs == 0 {
            // Relaxed: an empty list publishes nothing; the next local head to
            // enqueue finds no predecessor and waits for nothing of ours.
            if meta
                .gtail
                .compare_exchange(n as u32 + 1, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                // A queue swapped itself in behind us and will link.
                gs = node::wait_link(&q.gnext, cfg);
            }
        }
        if gs != 0 {
            #[cfg(feature = "stats")]
            self.counters.hq_event(crate::stats::HqEvent::RemoteHandoff);
            sync::event("hq-remote");
            sync::trace(|| format!("remote hand-off to node queue {}", gs - 1));
            // Release inside: pairs with that queue's local head's Acquire.
            self.pass_head_ship(&meta.queues[gs as usize - 1].gwait, GO);
        }
        // Then the node queue: its next waiter re-enqueues it in the list.
        if s == 0 {
            // Release: the next local head of this queue (which swaps the tail
            // with Acquire after reading our 0) resets `gnext` and `gwait` and
            // re-enters the list; our reads of `gnext` (a link by another queue's
            // head) must happen-before its reset, or the reset could be ordered
            // before that link and the stale link survive.
            if q.tail
                .compare_exchange(me.code, 0, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            s = node::wait_link(&me.node.next, cfg);
        }
        // Release inside: as above, for the next local head.
        node::signal(&reg.node(s).locked, LOCAL_HEAD);
    }

    /// Whether node queue `q`'s turn at the list's head, `batch` local hand-offs
    /// in, is within [`Config::flush_threshold_ns`] (1 ms): the RFC bounds a turn
    /// by a count of hand-offs only, which in user space, where most
    /// acquisitions are steals and a hand-off waits for a wake-up, let a turn
    /// last seconds (measured: a node's waiters starved for a whole 2 s run
    /// with 32 threads on 2 CPUs). CNA bounds its secondary queue by the same
    /// time. `u64::MAX` = no time bound (no clock read).
    fn turn_left(q: &NodeQueue, batch: u32, cfg: &Config) -> bool {
        let bound = cfg.flush_threshold_ns;
        if bound == u64::MAX {
            return true;
        }
        // Wrapping 32-bit ns: durations up to 4.29 s compare correctly; larger
        // bounds saturate there.
        let now = sync::now_ns() as u32;
        if batch == 0 {
            // Relaxed (both): the field is written and read only by the holders
            // of this queue's turn, one after another, ordered by the Release/
            // Acquire of the hand-offs between them.
            q.turn_start.store(now, Ordering::Relaxed);
            return bound > 0;
        }
        let elapsed = now.wrapping_sub(q.turn_start.load(Ordering::Relaxed));
        u64::from(elapsed) < bound.min(u64::from(u32::MAX))
    }

    /// Our last access to metadata `m` is done: leave the count; the last one out
    /// unbinds the lock and returns `m` to the pool.
    fn leave(&self, m: u32) {
        let mut t = self.tail.load(Ordering::Relaxed);
        loop {
            debug_assert!(t & NUMA_MODE != 0 && (t >> META_SHIFT) & META_MASK == m);
            debug_assert!(t >> COUNT_SHIFT != 0);
            // The last one out clears the word (and the flags with it).
            let new = if t >> COUNT_SHIFT == 1 {
                0
            } else {
                t - COUNT_ONE
            };
            // Relaxed (both): every waiter leaves while it holds the lock, after
            // its last access to `m`, so the leavers are ordered by the lock
            // word's Release/Acquire: every earlier leaver's accesses
            // happen-before the last one out, which frees `m` with Release. The
            // count itself is a chain of read-modify-writes, exact without
            // ordering, and continues the release sequence of a mode switch's
            // CAS, which joiners acquire, whatever the decrements' orderings.
            match self
                .tail
                .compare_exchange_weak(t, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    if new == 0 {
                        // Close the gate for the entry's next binding. Relaxed:
                        // nobody waits on it (no waiter is counted), and the
                        // Release of `free` publishes it to the next claimer.
                        pool().meta(m).gate.store(node::WAIT, Ordering::Relaxed);
                        sync::event("hq-unbind");
                        sync::trace(|| format!("unbound meta {m}"));
                        pool().free(m);
                    }
                    return;
                }
                Err(seen) => t = seen,
            }
        }
    }

    /// Makes the waiter on `word` (a queue node's `locked`, a node queue's
    /// `gwait`, the gate) the global head: [`node::pass_head_ship`] on this
    /// lock's tail word. Called only by the lock holder.
    fn pass_head_ship(&self, word: &AtomicU32, value: u32) {
        node::pass_head_ship(&self.tail, word, value, "hq-asleep-hand-off");
    }

    /// The global head's wait for the lock word, as CNA's queue head waits
    /// ([`node::HeadWait`]): bounded stealing, and with
    /// [`WaitPolicy::Park`](crate::WaitPolicy::Park) naps announced by `HEAD_ASLEEP`, so that arrivals take a free lock
    /// meanwhile instead of queueing behind a head that cannot.
    fn wait_for_lock(&self, cfg: &Config) {
        let mut wait = node::HeadWait::start(&self.tail, cfg, "hq-asleep-nap");
        loop {
            // Relaxed: this load only picks the CAS to try; each CAS acquires.
            let cur = self.locked.load(Ordering::Relaxed);
            if cur == UNLOCKED || cur == HANDED {
                // Acquire on success: pairs with the Release store of `release`
                // or `release_fair`. HANDED is taken with a CAS (consumed once,
                // see `crate::cna`). Relaxed on failure: nothing acquired.
                if self
                    .locked
                    .compare_exchange(cur, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    break;
                }
            } else {
                wait.held();
            }
            wait.pause();
        }
        wait.acquired();
    }
}

#[cfg(not(numa_loom))]
impl RawHqLock<Global> {
    /// A new unlocked lock using the process-wide tunables.
    pub const fn new() -> Self {
        Self::from_tunables(Global)
    }
}

#[cfg(not(numa_loom))]
impl Default for RawHqLock<Global> {
    fn default() -> Self {
        Self::new()
    }
}

impl RawHqLock<&'static Config> {
    /// A new unlocked lock with its own tunables (`const`).
    #[cfg(not(numa_loom))]
    pub const fn with_config(config: &'static Config) -> Self {
        Self::from_tunables(config)
    }

    /// A new unlocked lock with its own tunables (loom build: not const).
    #[cfg(numa_loom)]
    pub fn with_config(config: &'static Config) -> Self {
        Self::from_tunables(config)
    }
}

impl<T: Tunables> core::fmt::Debug for RawHqLock<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RawHqLock")
            .field("locked", &self.is_held())
            .field("numa_bound", &self.is_numa_bound())
            .finish()
    }
}

// The lock_api 0.5 (and, with feature `lock_api_04`, 0.4) traits. Sound because
// every acquisition is a CAS on `locked` from UNLOCKED (fast path, stealing,
// unqueued wait, the timed polling of `crate::timed`) or from UNLOCKED/HANDED (the
// global head) to LOCKED, with Acquire, and every release stores UNLOCKED or
// HANDED with Release, so each release is consumed by at most one acquisition;
// `release_fair` leaves the lock to the global head. Guards carry no state; a
// forgotten guard leaves the lock held (a deadlock, never unsoundness). `lock`
// runs no user code. Queue nodes and metadata are named by index, never point to
// the lock, so the lock can be moved or dropped whenever it is not borrowed.
crate::glue::raw_mutex_glue! {
    impl[T: Tunables] for RawHqLock<T>;
    init = Self::from_tunables(T::DEFAULT);
    core = |this| this;
    unlock = release;
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use super::*;
    use crate::head_tests::{TestLock, queue_tail_reader};
    use crate::raw_lock::HEAD_ASLEEP;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::{Arc, RwLock, RwLockReadGuard};
    use std::time::{Duration, Instant};

    /// The metadata pool is process-wide: a test that exhausts it holds this
    /// exclusively, and the tests that need a binding (or a mode switch) hold
    /// it shared, so that they never meet an exhausted pool.
    static POOL_TESTS: RwLock<()> = RwLock::new(());

    fn pool_shared() -> RwLockReadGuard<'static, ()> {
        POOL_TESTS.read().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(not(feature = "stats"))]
    #[test]
    fn lock_word_is_8_bytes() {
        assert_eq!(std::mem::size_of::<RawHqMutex>(), 8);
        assert_eq!(std::mem::size_of::<RawHqLock<&'static Config>>(), 16);
    }

    /// 8 threads on 4 virtual nodes: exclusion holds, the lock binds metadata
    /// under contention and unbinds it when completely released.
    #[test]
    fn contended_lock_binds_and_unbinds() {
        let _pool = pool_shared();
        static M: HqMutex<u64> = HqMutex::new(0);
        static INSIDE: AtomicU64 = AtomicU64::new(0);
        std::thread::scope(|s| {
            for i in 0..8 {
                s.spawn(move || {
                    numa_topology::set_current_thread_node(Some(i % 4));
                    for _ in 0..2000 {
                        let mut g = M.lock();
                        assert_eq!(INSIDE.fetch_add(1, Ordering::Relaxed), 0);
                        *g += 1;
                        INSIDE.fetch_sub(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(*M.lock(), 16_000);
        // SAFETY: only read.
        let raw = unsafe { M.raw() };
        assert!(
            !raw.is_numa_bound(),
            "metadata still bound after the last release"
        );
        assert_eq!(raw.tail.load(Ordering::Relaxed), 0);
    }

    impl TestLock for RawHqLock<&'static Config> {
        fn with_test_config(cfg: &'static Config) -> Self {
            RawHqLock::with_config(cfg)
        }
        fn lock(&self) {
            self.acquire();
        }
        fn try_lock(&self) -> bool {
            self.try_acquire()
        }
        unsafe fn unlock(&self) {
            // SAFETY: the caller holds the lock.
            unsafe { self.release() };
        }
        fn tail(&self) -> &AtomicU32 {
            &self.tail
        }
        fn newest(t: u32) -> u32 {
            // Plain mode only: a NUMA-mode word names metadata, not a node.
            if t & NUMA_MODE == 0 {
                t >> CODE_SHIFT
            } else {
                0
            }
        }
        fn naming(code: u32) -> u32 {
            // Plain mode.
            code << CODE_SHIFT
        }
    }

    static SPIN_1S: Config = Config::DEFAULT.spin_budget_ns(1_000_000_000);

    /// The holder's hand-off marks the lock `HEAD_ASLEEP` when the new global
    /// head had parked on the word it signals, and only then.
    #[test]
    fn hand_off_to_a_parked_waiter_marks_the_global_head_asleep() {
        for (state, marks) in [(node::PARKED, true), (node::WAIT, false)] {
            let lock = RawHqLock::with_config(&SPIN_1S);
            lock.acquire();
            let word = AtomicU32::new(state);
            lock.pass_head_ship(&word, GO);
            assert_eq!(word.load(Ordering::SeqCst), GO);
            assert_eq!(lock.tail.load(Ordering::SeqCst) & HEAD_ASLEEP != 0, marks);
            // SAFETY: acquired above.
            unsafe { lock.release() };
        }
    }

    /// `Debug` shows whether the lock is held and bound to metadata.
    #[test]
    fn debug_shows_the_lock_state() {
        let lock = RawHqMutex::new();
        assert_eq!(
            format!("{lock:?}"),
            "RawHqLock { locked: false, numa_bound: false }"
        );
        lock.acquire();
        assert_eq!(
            format!("{lock:?}"),
            "RawHqLock { locked: true, numa_bound: false }"
        );
        // SAFETY: acquired above.
        unsafe { lock.release() };
    }

    /// From any starting hint, the pool hands out every entry once before it
    /// reports exhaustion, and a freed entry can be claimed again.
    #[test]
    fn pool_claims_every_entry_from_any_hint() {
        let pool = Box::new(Pool::new());
        for hint in [0, 1, 2, POOL_SIZE - 1, POOL_SIZE, 0x7f12_3456_789a >> 4] {
            let mut seen: Vec<u32> = (0..POOL_SIZE)
                .map(|_| pool.claim(hint).expect("pool exhausted early"))
                .collect();
            assert_eq!(pool.claim(hint), None, "more claims than entries");
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), POOL_SIZE, "an entry was claimed twice");
            pool.free(seen[7]);
            assert_eq!(pool.claim(hint), Some(seen[7]));
            for m in seen {
                pool.free(m);
            }
        }
    }

    /// From the initialization of its queue node to the end of its slow path
    /// a waiter reads no lazily initialized process state (the node lookup,
    /// the process-wide tunables: they may allocate, and the lock may be the
    /// one inside the global allocator; see `node::before_enqueue`): in plain
    /// mode, in NUMA mode from the first waiter, stealing or strict FIFO, and
    /// across a mode switch.
    #[test]
    fn queued_waiters_read_no_lazily_initialized_state() {
        use crate::node::tests::queued_waits_and_lazy_reads;
        static NUMA_AT_ONCE: Config = Config::DEFAULT.hq_switch_threshold(0);
        static NUMA_STRICT: Config = NUMA_AT_ONCE.steal_bound_ns(0);
        static SWITCH_AT_2: Config = Config::DEFAULT.hq_switch_threshold(2).steal_bound_ns(0);
        let _pool = pool_shared();
        let numa = RawHqLock::with_config(&NUMA_AT_ONCE);
        let results = [
            (
                "process-wide",
                queued_waits_and_lazy_reads(&RawHqMutex::new()),
            ),
            ("NUMA mode", queued_waits_and_lazy_reads(&numa)),
            (
                "strict NUMA mode",
                queued_waits_and_lazy_reads(&RawHqLock::with_config(&NUMA_STRICT)),
            ),
            (
                "mode switch",
                queued_waits_and_lazy_reads(&RawHqLock::with_config(&SWITCH_AT_2)),
            ),
        ];
        for (lock, (waits, reads)) in results {
            assert!(waits > 0, "{lock}: nobody queued");
            assert_eq!(reads, 0, "{lock}: lazy reads in {waits} queued waits");
        }
        #[cfg(feature = "stats")]
        assert!(numa.stats().binds > 0, "never in NUMA mode");
    }

    /// A lock made with its own tunables reports them.
    #[test]
    fn config_reports_the_locks_own_tunables() {
        static OWN: Config = Config::DEFAULT
            .steal_bound_ns(12_345)
            .hq_handoff_threshold(7);
        assert_eq!(*RawHqLock::with_config(&OWN).config(), OWN);
        assert_eq!(*RawHqMutex::new().config(), *Config::global());
    }

    /// With a steal bound of 0 (strict FIFO) the first waiter's enqueue forbids
    /// stealing at once and the next enqueue keeps it forbidden; with a bound
    /// it has not reached, the global head does not forbid it.
    #[test]
    fn strict_fifo_forbids_stealing_from_the_first_enqueue_only() {
        static STRICT: Config = Config::DEFAULT
            .steal_bound_ns(0)
            .spin_budget_ns(60_000_000_000);
        static BOUND_60S: Config = Config::DEFAULT
            .steal_bound_ns(60_000_000_000)
            .spin_budget_ns(60_000_000_000);
        for (cfg, strict) in [(&STRICT, true), (&BOUND_60S, false)] {
            let lock = Arc::new(RawHqLock::with_config(cfg));
            lock.acquire();
            let mut codes = Vec::new();
            // The first enqueue sets NO_STEAL in strict mode, and a second
            // one must keep it.
            let waiters = [
                queue_tail_reader(&lock, &mut codes),
                queue_tail_reader(&lock, &mut codes),
            ];
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(100) {
                assert_eq!(
                    lock.tail.load(Ordering::SeqCst) & NO_STEAL != 0,
                    strict,
                    "NO_STEAL with steal bound {}",
                    cfg.steal_bound_ns
                );
                std::thread::yield_now();
            }
            // SAFETY: acquired above.
            unsafe { lock.release() };
            for w in waiters {
                w.join().unwrap();
            }
        }
    }

    /// Waits (at most 10 s) until `lock`'s tail word satisfies `ok`; returns it.
    fn await_tail(lock: &RawHqLock<&'static Config>, ok: impl Fn(u32) -> bool, what: &str) -> u32 {
        let start = Instant::now();
        loop {
            let t = lock.tail.load(Ordering::SeqCst);
            if ok(t) {
                return t;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{what}: tail {t:#x}"
            );
            std::thread::yield_now();
        }
    }

    /// NUMA mode from the first waiter: the first waiter binds metadata (count
    /// 1), the second joins it (count 2, same metadata, `NO_STEAL` kept in
    /// strict FIFO mode), and the word is empty once both have passed.
    #[test]
    fn second_waiter_joins_the_bound_metadata() {
        let _pool = pool_shared();
        static NUMA_AT_ONCE: Config = Config::DEFAULT
            .hq_switch_threshold(0)
            .steal_bound_ns(60_000_000_000)
            .spin_budget_ns(60_000_000_000);
        static STRICT: Config = NUMA_AT_ONCE.steal_bound_ns(0);
        for (cfg, strict) in [(&NUMA_AT_ONCE, false), (&STRICT, true)] {
            let lock = Arc::new(RawHqLock::with_config(cfg));
            lock.acquire();
            let spawn = |node: usize| {
                let l = lock.clone();
                std::thread::spawn(move || {
                    numa_topology::set_current_thread_node(Some(node));
                    l.acquire();
                    // SAFETY: acquired above.
                    unsafe { l.release() };
                })
            };
            let a = spawn(0);
            let count = |t: u32| t >> COUNT_SHIFT;
            let bound = await_tail(&lock, |t| t & NUMA_MODE != 0 && count(t) == 1, "no binding");
            assert!(lock.is_numa_bound());
            assert_eq!(bound & NO_STEAL != 0, strict, "NO_STEAL after the binding");
            let b = spawn(1);
            let joined = await_tail(&lock, |t| count(t) == 2, "the second waiter did not join");
            assert_ne!(joined & NUMA_MODE, 0);
            assert_eq!(
                (joined >> META_SHIFT) & META_MASK,
                (bound >> META_SHIFT) & META_MASK,
                "joined other metadata"
            );
            // Strict FIFO: every entry keeps stealing forbidden; otherwise
            // nothing forbids it (the steal bound is far).
            assert_eq!(joined & NO_STEAL != 0, strict, "NO_STEAL after the join");
            // Each waiter queues on its own node's queue.
            let meta = pool().meta((bound >> META_SHIFT) & META_MASK);
            for node in [0, 1] {
                await_tail(
                    &lock,
                    |_| meta.queues[node].tail.load(Ordering::SeqCst) != 0,
                    "node queue empty",
                );
            }
            // SAFETY: acquired above.
            unsafe { lock.release() };
            a.join().unwrap();
            b.join().unwrap();
            assert_eq!(lock.tail.load(Ordering::SeqCst), 0);
        }
    }

    /// Contention detection counts the plain queue's hand-offs. With a switch
    /// threshold of 2, the first two heads keep plain mode; the third switches
    /// the lock to NUMA mode before its critical section if waiters are queued
    /// behind it (a queue of five) and not if it is the last (a queue of
    /// three). The switch's word holds the frozen queue's one reference and
    /// no flag, and its metadata is back in the pool once all have passed.
    #[test]
    fn third_plain_head_switches_to_numa_mode_only_with_waiters_behind() {
        static SWITCH_AT_2: Config = Config::DEFAULT
            .hq_switch_threshold(2)
            .steal_bound_ns(60_000_000_000)
            .spin_budget_ns(60_000_000_000);
        // Alone with the pool: every entry must be free at the end.
        let _pool = POOL_TESTS.write().unwrap_or_else(|e| e.into_inner());
        for (queued, switches) in [(5, true), (3, false)] {
            let lock = Arc::new(RawHqLock::with_config(&SWITCH_AT_2));
            lock.acquire();
            let mut codes = Vec::new();
            let waiters: Vec<_> = (0..queued)
                .map(|_| queue_tail_reader(&lock, &mut codes))
                .collect();
            // SAFETY: acquired above.
            unsafe { lock.release() };
            let seen: Vec<u32> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
            let numa: Vec<bool> = seen.iter().map(|t| t & NUMA_MODE != 0).collect();
            assert_eq!(
                numa[..3],
                [false, false, switches],
                "{queued} queued: {seen:x?}"
            );
            if switches {
                assert_eq!(seen[2] >> COUNT_SHIFT, 1, "the frozen queue's reference");
                assert_eq!(seen[2] & TAIL_FLAGS, 0, "flags after the switch");
            }
            // A head that switched alone would unbind before its critical
            // section: only the counters see it.
            #[cfg(feature = "stats")]
            assert_eq!(
                lock.stats().mode_switches,
                u64::from(switches),
                "{queued} queued"
            );
            assert_eq!(lock.tail.load(Ordering::SeqCst), 0);
            let claimed: Vec<usize> = (0..POOL_SIZE)
                .filter(|&m| pool().claimed[m].load(Ordering::SeqCst) != 0)
                .collect();
            assert!(claimed.is_empty(), "metadata left claimed: {claimed:?}");
        }
    }

    /// A node queue keeps the list's head for `hq_handoff_threshold` local
    /// hand-offs, and for at most `flush_threshold_ns` of turn, then hands off
    /// remotely. Node-0 waiters A, B, D, E, F and node-1 waiter C, queued in
    /// that order, take the lock as A, B, D, E, C, F with threshold 3 and no
    /// time bound; as A, C, B, D, E, F with a time bound of 0 (no local
    /// hand-off); as A, B, D, E, F, C with a 2 s bound and threshold 1000 (the
    /// turn's clock starts at its first holder: a start left from an earlier
    /// turn, 3 s ago, does not count).
    #[test]
    fn node_queue_hands_off_remotely_after_the_threshold() {
        static THREE_LOCAL: Config = Config::DEFAULT
            .hq_switch_threshold(0)
            .hq_handoff_threshold(3)
            .flush_threshold_ns(u64::MAX)
            .steal_bound_ns(60_000_000_000)
            .spin_budget_ns(60_000_000_000);
        static NO_TURN: Config = THREE_LOCAL.hq_handoff_threshold(1000).flush_threshold_ns(0);
        static LONG_TURN: Config = NO_TURN.flush_threshold_ns(2_000_000_000);
        let _pool = pool_shared();
        for (cfg, expected) in [
            (&THREE_LOCAL, "ABDECF"),
            (&NO_TURN, "ACBDEF"),
            (&LONG_TURN, "ABDEFC"),
        ] {
            let lock = Arc::new(RawHqLock::with_config(cfg));
            let order = Arc::new(std::sync::Mutex::new(Vec::new()));
            lock.acquire();
            let mut waiters = Vec::new();
            let mut meta = None;
            let mut last = [0; 2];
            for (i, (name, node)) in [('A', 0), ('B', 0), ('C', 1), ('D', 0), ('E', 0), ('F', 0)]
                .into_iter()
                .enumerate()
            {
                let (l, o) = (lock.clone(), order.clone());
                waiters.push(std::thread::spawn(move || {
                    numa_topology::set_current_thread_node(Some(node));
                    l.acquire();
                    o.lock().unwrap().push(name);
                    // SAFETY: acquired above.
                    unsafe { l.release() };
                }));
                let t = await_tail(&lock, |t| t >> COUNT_SHIFT == i as u32 + 1, "no entry");
                let meta: &Meta =
                    meta.get_or_insert_with(|| pool().meta((t >> META_SHIFT) & META_MASK));
                // Queued in its node queue (the swap changes the queue's tail); a
                // node queue's first waiter also enters the list.
                let q = &meta.queues[node];
                let before = last[node];
                await_tail(
                    &lock,
                    |_| q.tail.load(Ordering::SeqCst) != before,
                    "not queued",
                );
                last[node] = q.tail.load(Ordering::SeqCst);
                if before == 0 {
                    let list = node as u32 + 1;
                    await_tail(
                        &lock,
                        |_| meta.gtail.load(Ordering::SeqCst) == list,
                        "not listed",
                    );
                }
            }
            let stale = (sync::now_ns() as u32).wrapping_sub(3_000_000_000);
            let meta = meta.expect("bound");
            meta.queues[0].turn_start.store(stale, Ordering::SeqCst);
            // SAFETY: acquired above.
            unsafe { lock.release() };
            for w in waiters {
                w.join().unwrap();
            }
            let order: String = order.lock().unwrap().iter().collect();
            assert_eq!(
                order, expected,
                "hand-off threshold {}, turn bound {} ns",
                cfg.hq_handoff_threshold, cfg.flush_threshold_ns
            );
            assert_eq!(lock.tail.load(Ordering::SeqCst), 0);
        }
    }

    /// After a mode switch the NUMA side's global head waits at the gate
    /// until the frozen plain queue has drained, instead of competing with
    /// that queue's heads for the lock word: with a spin budget of 0 it parks
    /// on the gate while the switching head is still in its critical section,
    /// and takes the lock after the frozen queue's last waiter.
    #[test]
    fn numa_global_head_waits_at_the_gate_while_the_frozen_queue_drains() {
        static SWITCH_AT_2_PARK: Config = Config::DEFAULT
            .hq_switch_threshold(2)
            .steal_bound_ns(60_000_000_000)
            .spin_budget_ns(0);
        let _pool = pool_shared();
        let lock = Arc::new(RawHqLock::with_config(&SWITCH_AT_2_PARK));
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (switched, go) = (
            Arc::new(AtomicU32::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let spawn = |name: char| {
            let (l, o, sw, go) = (lock.clone(), order.clone(), switched.clone(), go.clone());
            std::thread::spawn(move || {
                l.acquire();
                o.lock().unwrap().push(name);
                let t = l.tail.load(Ordering::SeqCst);
                // The first holder to see NUMA mode (the switching head)
                // reports the word and holds the lock until told.
                if t & NUMA_MODE != 0
                    && sw
                        .compare_exchange(0, t, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                {
                    while !go.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                }
                // SAFETY: acquired above.
                unsafe { l.release() };
            })
        };
        lock.acquire();
        let mut codes = Vec::new();
        let mut waiters = Vec::new();
        for name in ['1', '2', '3', '4', '5'] {
            waiters.push(spawn(name));
            codes.push(crate::head_tests::await_new_tail(&*lock, &codes));
        }
        // SAFETY: acquired above.
        unsafe { lock.release() };
        await_tail(&lock, |_| switched.load(Ordering::SeqCst) != 0, "no switch");
        let t = switched.load(Ordering::SeqCst);
        let gate = &pool().meta((t >> META_SHIFT) & META_MASK).gate;
        waiters.push(spawn('X'));
        let start = Instant::now();
        while gate.load(Ordering::SeqCst) != node::PARKED
            && start.elapsed() < Duration::from_secs(10)
        {
            std::thread::yield_now();
        }
        let parked = gate.load(Ordering::SeqCst) == node::PARKED;
        go.store(true, Ordering::SeqCst);
        for w in waiters {
            w.join().unwrap();
        }
        assert!(parked, "the NUMA side's head did not wait at the gate");
        assert_eq!(*order.lock().unwrap(), ['1', '2', '3', '4', '5', 'X']);
        assert_eq!(lock.tail.load(Ordering::SeqCst), 0);
    }

    /// Every free pool entry, claimed until dropped.
    struct Exhausted(Vec<u32>);

    impl Drop for Exhausted {
        fn drop(&mut self) {
            for &m in &self.0 {
                pool().free(m);
            }
        }
    }

    /// NUMA mode from the first waiter, but the pool is exhausted: the first
    /// waiter queues plain, and an arrival after an entry is freed joins that
    /// plain queue instead of binding metadata over it (which would leave the
    /// plain queue's last waiter waiting for a link that never comes).
    #[test]
    fn arrival_joins_the_plain_queue_an_exhausted_pool_left() {
        static NUMA_AT_ONCE: Config = Config::DEFAULT
            .hq_switch_threshold(0)
            .steal_bound_ns(60_000_000_000)
            .spin_budget_ns(60_000_000_000);
        let _pool = POOL_TESTS.write().unwrap_or_else(|e| e.into_inner());
        let mut held = Exhausted(std::iter::from_fn(|| pool().claim(0)).collect());
        assert_eq!(
            held.0.len(),
            POOL_SIZE,
            "pool entries leaked by other tests"
        );
        let lock = Arc::new(RawHqLock::with_config(&NUMA_AT_ONCE));
        lock.acquire();
        let mut codes = Vec::new();
        let first = queue_tail_reader(&lock, &mut codes);
        assert_eq!(lock.tail.load(Ordering::SeqCst) & NUMA_MODE, 0);
        pool().free(held.0.pop().expect("claimed above"));
        // Fails (times out) if the arrival binds: a NUMA word names no node.
        let second = queue_tail_reader(&lock, &mut codes);
        // SAFETY: acquired above.
        unsafe { lock.release() };
        for w in [first, second] {
            let seen = w.join().unwrap();
            assert_eq!(seen & NUMA_MODE, 0, "bound while the plain queue lived");
        }
        assert_eq!(lock.tail.load(Ordering::SeqCst), 0);
    }

    /// NUMA mode from the first waiter, 8 threads on 4 virtual nodes, the
    /// holder yielding inside so that node queues and the list form on 2 CPUs:
    /// exclusion holds, every acquisition happens, and the word is empty at
    /// the end (debug builds also check the word's invariants in `leave`).
    #[test]
    fn numa_mode_from_the_first_waiter_keeps_exclusion() {
        let _pool = pool_shared();
        static NUMA_AT_ONCE: Config = Config::DEFAULT.hq_switch_threshold(0);
        static M: lock_api::Mutex<RawHqLock<&'static Config>, u64> =
            lock_api::Mutex::from_raw(RawHqLock::with_config(&NUMA_AT_ONCE), 0);
        static INSIDE: AtomicU64 = AtomicU64::new(0);
        std::thread::scope(|s| {
            for i in 0..8 {
                s.spawn(move || {
                    numa_topology::set_current_thread_node(Some(i % 4));
                    for _ in 0..1000 {
                        let mut g = M.lock();
                        assert_eq!(INSIDE.fetch_add(1, Ordering::Relaxed), 0);
                        *g += 1;
                        std::thread::yield_now();
                        INSIDE.fetch_sub(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(*M.lock(), 8000);
        // SAFETY: only read.
        assert_eq!(unsafe { M.raw() }.tail.load(Ordering::Relaxed), 0);
    }

    /// With counters: sustained contention from 8 threads on 4 virtual nodes
    /// (strict FIFO, so arrivals queue; the holder yields its CPU so that
    /// queues form on 2 CPUs) switches episodes to NUMA mode and hands off
    /// locally and remotely.
    #[cfg(feature = "stats")]
    #[test]
    fn sustained_contention_switches_and_hands_off_locally() {
        let _pool = pool_shared();
        static STRICT: Config = Config::DEFAULT.steal_bound_ns(0).hq_switch_threshold(50);
        static M: lock_api::Mutex<RawHqLock<&'static Config>, u64> =
            lock_api::Mutex::from_raw(RawHqLock::with_config(&STRICT), 0);
        std::thread::scope(|s| {
            for i in 0..8 {
                s.spawn(move || {
                    numa_topology::set_current_thread_node(Some(i % 4));
                    for _ in 0..2000 {
                        let mut g = M.lock();
                        *g += 1;
                        std::thread::yield_now();
                    }
                });
            }
        });
        assert_eq!(*M.lock(), 16_000);
        // SAFETY: only read.
        let stats = unsafe { M.raw() }.stats();
        assert!(stats.mode_switches > 0, "{stats:?}");
        assert!(stats.binds == 0, "episodes start plain: {stats:?}");
        assert!(stats.local_handoffs > 0, "{stats:?}");
        assert!(stats.remote_handoffs > 0, "{stats:?}");
    }
}
