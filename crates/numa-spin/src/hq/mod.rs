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
//! use the queue nodes of [`crate::node`]. A CNA queue head scans and reorders
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
//! weakens every Acquire, Release and AcqRel of this module one step at a time:
//! each weakening makes a model fail, except at the sites listed with their
//! argument in `scripts/ordering-mutants.allow` (the queue links, whose only
//! effect is a modification order loom does not produce, and the join after a
//! mode switch on a reused metadata entry, beyond the models' budget). The
//! orderings no model needed and no argument required were weakened to Relaxed
//! with the argument at the site (`leave`, the binding CAS, the gate check,
//! `END_OF_CHAIN`). Measured so far on 2 CPUs with virtual nodes only: HQ's
//! NUMA gains on real multi-node machines are the RFC's, not yet ours.
//!
//! # Source files
//!
//! - `hq/mod.rs`: the lock type, its word layout, the fast path, the slow
//!   path's outline (`lock_slow`) and the global head's wait for the lock word;
//! - `hq/switch.rs`: how a waiter enters the tail word (plain enqueue, joining
//!   the bound metadata, binding metadata), the mode switch and the unbinding;
//! - `hq/plain.rs`: plain queued mode;
//! - `hq/numa.rs`: NUMA mode (node queues, the list, local and remote
//!   hand-offs);
//! - `hq/pool.rs`: the process-wide metadata pool.

mod numa;
mod plain;
mod pool;
mod switch;

use crate::config::{Config, Global, Tunables};
use crate::node;
#[cfg(feature = "stats")]
use crate::sync;
use crate::sync::{AtomicU32, Ordering};
use crate::word::{HANDED, LOCKED, TAIL_FLAGS, UNLOCKED};
use switch::Entry;

/// `tail` bit 3: NUMA mode (the word names a [`Meta`](pool::Meta)); clear: plain mode.
/// (Bits 0 to 2 are the flags `NO_STEAL`, `HEAD_ASLEEP` and `HEAD_CLAIM` of
/// [`crate::raw_lock`], with the same meaning.)
const NUMA_MODE: u32 = 8;
/// Plain mode: the MCS tail's code is `tail >> CODE_SHIFT` (0 = no queue).
const CODE_SHIFT: u32 = 4;
/// Largest queue-node code plain mode can store (28 bits).
const MAX_PLAIN_CODE: u32 = u32::MAX >> CODE_SHIFT;
/// NUMA mode: the metadata index is `(tail >> META_SHIFT) & META_MASK`.
const META_SHIFT: u32 = 4;
/// 10 bits of metadata index.
const META_MASK: u32 = (1 << 10) - 1;
/// NUMA mode: the waiter count is `tail >> COUNT_SHIFT`.
const COUNT_SHIFT: u32 = 14;
/// One waiter in the count field.
const COUNT_ONE: u32 = 1 << COUNT_SHIFT;
/// Most waiters the count field holds (2^18 - 1); more wait without a queue.
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
/// NUMA mode (no waiter will link behind this node); codes fit in 29 bits.
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

/// The HQ lock, generic over where its tunables live. Use it through
/// [`RawHqMutex`] (process-wide tunables) or `RawHqLock<&'static Config>`
/// (per-lock tunables, [`RawHqLock::with_config`]).
///
/// # Examples
///
/// ```
/// use numa_spin::{Config, RawHqLock};
///
/// // This lock stays with a node queue for at most 100 consecutive local hand-offs.
/// static CONFIG: Config = Config::DEFAULT.hq_handoff_threshold(100);
/// static M: numa_spin::lock_api::Mutex<RawHqLock<&'static Config>, u64> =
///     numa_spin::lock_api::Mutex::from_raw(RawHqLock::with_config(&CONFIG), 0);
/// *M.lock() += 1;
/// assert_eq!(*M.lock(), 1);
/// ```
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
/// | `tail` | 2 | `HEAD_CLAIM`: the global head has waited its steal bound and claims the next release |
/// | `tail` | 3 | mode: 0 = plain queued, 1 = NUMA |
/// | `tail` | 4..32 | plain mode: code of the MCS tail node, 0 = no waiter |
/// | `tail` | 4..14 | NUMA mode: index of the bound metadata in the pool |
/// | `tail` | 14..32 | NUMA mode: waiters between arrival and their last metadata access |
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
/// use numa_spin::lock_api::RawMutex as _;
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

    /// The fast path's single attempt ([`node::try_steal`], as
    /// `RawLock::try_steal`).
    #[inline]
    fn try_steal(&self) -> bool {
        node::try_steal(&self.locked, &self.tail, || {
            #[cfg(feature = "stats")]
            self.counters.steal_attempt();
        })
    }

    /// A slow-path attempt ([`node::try_steal_free`], as
    /// `RawLock::try_steal_free`).
    #[inline]
    fn try_steal_free(&self) -> bool {
        node::try_steal_free(&self.locked, &self.tail, || {
            #[cfg(feature = "stats")]
            self.counters.steal_attempt();
        })
    }

    /// Acquires the lock (`lock_api::RawMutex::lock` without a guard).
    #[inline]
    pub fn acquire(&self) {
        crate::glue::model_route!(crate::model::acquire(&self.tail));
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
        crate::glue::model_route!(crate::model::try_acquire(&self.tail));
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
        crate::glue::model_route!(crate::model::release(&self.tail));
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
        crate::glue::model_route!(crate::model::release(&self.tail));
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
        crate::glue::model_route!(crate::model::is_held(&self.tail));
        self.locked.load(Ordering::Relaxed) != UNLOCKED
    }

    /// Whether the lock is bound to NUMA metadata right now (a snapshot; tests).
    pub fn is_numa_bound(&self) -> bool {
        self.tail.load(Ordering::Relaxed) & NUMA_MODE != 0
    }

    /// The raw tail word (a momentary snapshot), for tests that wait for a
    /// waiter to enter the queues: it changes whenever one does (plain mode:
    /// the tail code; NUMA mode: the waiter count). Not a stable API.
    #[doc(hidden)]
    pub fn tail_word(&self) -> u32 {
        self.tail.load(Ordering::Relaxed)
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
        if self.try_steal_free()
            || node::steal_while_head_asleep(&self.tail, &cfg, || self.try_steal_free())
            || node::steal_past_absent_head(&self.tail, &self.locked, &cfg)
        {
            return;
        }
        // Our node (for NUMA mode), and the rest of the lazily initialized
        // state the queued wait reads, before `enter` initializes our queue
        // node and counts us in the tail word: the first lookup allocates,
        // which may re-enter this lock (see `node::before_enqueue`).
        let numa = node::before_enqueue();
        let Some(me) = node::current((self as *const Self).cast()) else {
            node::lock_unqueued(&self.locked, &cfg);
            return;
        };
        let _enqueued = crate::lazy::Enqueued::begin();
        match self.enter(me, &cfg) {
            Some(Entry::Plain(pred)) => self.lock_plain(me, pred, &cfg),
            Some(Entry::Numa(m)) => self.lock_numa(me, m, numa, &cfg),
            None => node::lock_unqueued(&self.locked, &cfg),
        }
        // We hold the lock, so our node is in no queue (see `crate::node`).
        me.done();
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
    use crate::head_tests::TestLock;
    use crate::word::HEAD_ASLEEP;
    use std::sync::atomic::AtomicU64;
    use std::sync::{RwLock, RwLockReadGuard};
    use std::time::{Duration, Instant};

    /// The metadata pool is process-wide: a test that exhausts it holds this
    /// exclusively, and the tests that need a binding (or a mode switch) hold
    /// it shared, so that they never meet an exhausted pool.
    pub(super) static POOL_TESTS: RwLock<()> = RwLock::new(());

    pub(super) fn pool_shared() -> RwLockReadGuard<'static, ()> {
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
        #[cfg(feature = "stats")]
        fn stats(&self) -> crate::Stats {
            self.stats()
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

    /// Waits (at most 10 s) until `lock`'s tail word satisfies `ok`; returns it.
    pub(super) fn await_tail(
        lock: &RawHqLock<&'static Config>,
        ok: impl Fn(u32) -> bool,
        what: &str,
    ) -> u32 {
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
