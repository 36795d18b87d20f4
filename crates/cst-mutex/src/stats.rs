//! Per-lock counters of the contended paths (feature `stats`).
//!
//! The counters live in the snodes, so they cost nothing until a lock is
//! contended and nothing at all without the feature; [`RawMutex::stats`] and
//! [`RawRwLock::stats`] sum them over the lock's snodes. Each counter is a
//! relaxed `fetch_add` by the thread that saw the event: a snapshot may be a
//! few events old and is not a consistent cut.
//!
//! [`RawMutex::stats`]: crate::RawMutex::stats
//! [`RawRwLock::stats`]: crate::RawRwLock::stats

use crate::sync::{AtomicU64, Ordering};

/// A snapshot of a lock's contended-path counters (the mutex, or the writer
/// side of an rwlock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Stats {
    /// Untimed acquisitions that waited in an snode queue (CST's per-node
    /// queue of waiters).
    pub queued: u64,
    /// Hand-offs to a running queue head: the unlock swapped the lock into the
    /// head's queue node (no futex call, the lock word stays held).
    pub grants: u64,
    /// Times a waiter went to sleep: queued waiters out of spin budget, heads
    /// out of budget waiting in the snode's parking queue, timed waiters.
    pub parks: u64,
    /// Wake-ups issued: to a parked waiter of the parking queue by an unlock,
    /// and to a parked queued waiter by its predecessor (head-ship or
    /// wake-ahead).
    pub wakeups: u64,
    /// Of the unlocks' wake-ups, those that handed the still-held lock to the
    /// woken waiter (eventual fairness, `unlock_fair`, the batch's end).
    pub parked_handoffs: u64,
}

/// The counters of one snode.
pub(crate) struct SnodeStats {
    pub(crate) queued: AtomicU64,
    pub(crate) grants: AtomicU64,
    pub(crate) parks: AtomicU64,
    pub(crate) wakeups: AtomicU64,
    pub(crate) parked_handoffs: AtomicU64,
}

impl SnodeStats {
    pub(crate) fn new() -> Self {
        SnodeStats {
            queued: AtomicU64::new(0),
            grants: AtomicU64::new(0),
            parks: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            parked_handoffs: AtomicU64::new(0),
        }
    }

    /// Back to zero, for an snode reused from the pool (which the caller
    /// owns exclusively).
    pub(crate) fn reset(&self) {
        for c in [
            &self.queued,
            &self.grants,
            &self.parks,
            &self.wakeups,
            &self.parked_handoffs,
        ] {
            // Relaxed: published with the snode's initialisation.
            c.store(0, Ordering::Relaxed);
        }
    }

    pub(crate) fn add_to(&self, s: &mut Stats) {
        s.queued += self.queued.load(Ordering::Relaxed);
        s.grants += self.grants.load(Ordering::Relaxed);
        s.parks += self.parks.load(Ordering::Relaxed);
        s.wakeups += self.wakeups.load(Ordering::Relaxed);
        s.parked_handoffs += self.parked_handoffs.load(Ordering::Relaxed);
    }
}

/// Counts one event.
#[inline]
pub(crate) fn count(c: &AtomicU64) {
    // Relaxed: a statistic, ordered with nothing.
    c.fetch_add(1, Ordering::Relaxed);
}

/// The calling thread's counts of what its lock operations cost (feature
/// `stats`): how often this thread wrote a lock's global word and how often
/// it wrote an snode of another NUMA node than its own, per acquisition.
///
/// These are the costs that decide how a NUMA lock scales and that a 2-CPU
/// machine cannot show as time: every write to the global word moves its
/// cache line to the writer's node, which on a multi-socket machine is
/// cross-socket traffic on every hand-off. CST (Kashyap, Min, Kim, USENIX
/// ATC 2017, section 3) keeps the global lock with one node for a whole
/// batch, so a hand-off inside a node writes only that node's lines (the
/// next waiter's queue node and the node's snode); the global word is
/// written when the lock moves to another node or becomes free.
///
/// Counted per thread, in thread-locals (no shared line is written to count),
/// for every lock of this crate the thread used; [`thread_counts`] reads
/// them and [`reset_thread_counts`] zeroes them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ThreadCounts {
    /// Acquisitions (every successful `lock`, `try_lock`, timed lock; for an
    /// rwlock, exclusive and upgradable ones).
    pub acquisitions: u64,
    /// Successful writes (stores and read-modify-writes) to a lock's global
    /// word: the fast path's CAS and release, registering a queue head,
    /// parking, waking and releasing in the slow unlock.
    pub word_writes: u64,
    /// Writes to the waiting line of an snode (queue, batch and parking
    /// counters) of a NUMA node other than the writing thread's.
    pub remote_snode_writes: u64,
    /// Hand-offs within one node: grants to a queue head of the granting
    /// thread's own node.
    pub local_handoffs: u64,
    /// Global-word writes made by those same-node hand-offs (from the
    /// unlock's first look to the grant). CST's design: 0.
    pub local_handoff_word_writes: u64,
    /// Hand-offs to a waiter that was asleep (parked) when it was handed
    /// the lock: a futex wake on the critical path.
    pub parked_handoffs: u64,
    /// Grants to a queue head that had not run since it was given
    /// head-ship (it may have been asleep then; on a lock with no more
    /// waiters than CPUs it is granted anyway, see `set_cpus`).
    pub not_running_grants: u64,
}

impl ThreadCounts {
    /// `word_writes / acquisitions` (0 when nothing was acquired).
    pub fn word_writes_per_acquisition(&self) -> f64 {
        ratio(self.word_writes, self.acquisitions)
    }

    /// `remote_snode_writes / acquisitions` (0 when nothing was acquired).
    pub fn remote_snode_writes_per_acquisition(&self) -> f64 {
        ratio(self.remote_snode_writes, self.acquisitions)
    }
}

/// The sum of two threads' counts.
impl std::ops::Add for ThreadCounts {
    type Output = ThreadCounts;

    fn add(self, o: ThreadCounts) -> ThreadCounts {
        ThreadCounts {
            acquisitions: self.acquisitions + o.acquisitions,
            word_writes: self.word_writes + o.word_writes,
            remote_snode_writes: self.remote_snode_writes + o.remote_snode_writes,
            local_handoffs: self.local_handoffs + o.local_handoffs,
            local_handoff_word_writes: self.local_handoff_word_writes + o.local_handoff_word_writes,
            parked_handoffs: self.parked_handoffs + o.parked_handoffs,
            not_running_grants: self.not_running_grants + o.not_running_grants,
        }
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

std::thread_local! {
    static COUNTS: std::cell::Cell<ThreadCounts> = const {
        std::cell::Cell::new(ThreadCounts {
            acquisitions: 0,
            word_writes: 0,
            remote_snode_writes: 0,
            local_handoffs: 0,
            local_handoff_word_writes: 0,
            parked_handoffs: 0,
            not_running_grants: 0,
        })
    };
}

/// The calling thread's counts since it started or since
/// [`reset_thread_counts`].
pub fn thread_counts() -> ThreadCounts {
    COUNTS.with(|c| c.get())
}

/// Zeroes the calling thread's counts.
pub fn reset_thread_counts() {
    COUNTS.with(|c| c.set(ThreadCounts::default()));
}

#[inline]
fn bump(f: impl FnOnce(&mut ThreadCounts)) {
    // `try_with`: a lock used from a thread-local destructor after this one
    // was destroyed counts nothing.
    let _ = COUNTS.try_with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    });
}

/// Counts one acquisition.
#[inline]
pub(crate) fn acquired() {
    bump(|c| c.acquisitions += 1);
}

/// Counts one write to a lock's global word.
#[inline]
pub(crate) fn word_write() {
    bump(|c| c.word_writes += 1);
}

/// Counts a write to the waiting line of an snode of `node` if that is
/// another node than the caller's.
#[inline]
pub(crate) fn snode_write(node: usize) {
    if node != crate::sync::current_node() {
        bump(|c| c.remote_snode_writes += 1);
    }
}

/// The calling thread's global-word writes so far (to measure one unlock).
#[inline]
pub(crate) fn word_writes_now() -> u64 {
    COUNTS.try_with(|c| c.get().word_writes).unwrap_or(0)
}

/// Counts a hand-off to a queue head of the unlocker's own node that cost
/// `word_writes` writes of the global word.
#[inline]
pub(crate) fn local_handoff(word_writes: u64) {
    bump(|c| {
        c.local_handoffs += 1;
        c.local_handoff_word_writes += word_writes;
    });
}

/// Counts a hand-off to a waiter that was parked.
#[inline]
pub(crate) fn parked_handoff() {
    bump(|c| c.parked_handoffs += 1);
}

/// Counts a grant to a queue head that had not run since head-ship.
#[inline]
pub(crate) fn not_running_grant() {
    bump(|c| c.not_running_grants += 1);
}
