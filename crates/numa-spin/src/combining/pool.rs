//! The request queues of the combining lock live in a process-wide pool of
//! *queue sets* (one request queue per NUMA node, [`COMBINING_QUEUES`] of
//! them), not in the lock: a lock binds a set when a `combine` first finds
//! its global lock held, and gives it back when the last thread that uses it
//! leaves. This is the dynamic metadata binding of the HQ lock (`hq/pool.rs`,
//! after the Linux kernel's hierarchical queued spinlock RFC), applied to
//! H-Synch's per-node queues: a lock costs one word for its queues, and
//! only the locks that are contended at a moment hold a set.
//!
//! # The binding word
//!
//! Each lock has one 64-bit word, [`Binding`]:
//!
//! | bits   | meaning |
//! |--------|---------|
//! | 0..32  | users: threads between their join and their leave |
//! | 32..48 | index + 1 of the bound set in the pool; 0: none bound |
//! | 48..64 | the low 16 bits of the fork generation of the binding |
//!
//! The word is 0 exactly when no set is bound. Every change is a CAS of the
//! whole word, so the count and the binding change together:
//!
//! - **join** (before a thread queues a request): a bound word of the current
//!   fork generation gains a user; an unbound word gets a set claimed from the
//!   pool, with one user. A thread that joined uses the set until it leaves:
//!   the set cannot be given back meanwhile, since its count is not 0.
//! - **leave** (by a combiner, after its batch): the count drops by the
//!   requests the batch served, the combiner's own included, in one CAS; the
//!   last users' CAS clears the whole word and returns the set to the pool,
//!   all its queues empty. A submitter whose request a combiner served does
//!   not leave itself: its combiner left for it. So a request writes the
//!   word once (its join), and a batch once more, rather than every request
//!   twice: the word shares its line with the lock word, which the other
//!   nodes' combiners wait on.
//!
//! An arrival that read the word and lost its CAS to a give-back only retries
//! with the word it got back: it never touches a set it has not joined, so a
//! set given back and bound to another lock meanwhile is no concern (no ABA:
//! the CAS compares the lock's own word, and a word that names the same set
//! again names a set bound again to this very lock). Entries are never freed
//! to the allocator (the pool is a static array), so the diagnostics may read
//! a set they have not joined.
//!
//! Why every queue is empty at the give-back: each request in a queue is
//! counted, because a request's count is dropped only by the combiner that
//! served it, after its batch, and a served request is no longer the tail
//! (the combiner read its successor link, or closed the queue behind it);
//! the batch ends with the queue closed (its CAS to null) or handed to a
//! waiter whose request, not yet served, is still counted. A served
//! submitter's last access to the set (its swap into the tail) comes before
//! its link, which the combiner reads with Acquire before its Release leave:
//! so it happens-before the give-back, as the combiner's own accesses do.
//!
//! # Fork
//!
//! In a fork's child the users counted in a word are the parent's threads
//! (the forking thread is none of them: it does not fork from inside a
//! `combine`), which never leave in the child. A join that finds a word of an
//! older fork generation therefore rebinds the same set to the lock with
//! itself as its only user; the set's queues then forget their ghost requests
//! as any queue does (`combining/queue.rs`). Sets bound at the fork stay with
//! their lock until it is used in the child and idle again; free ones are
//! claimed as in the parent. (A set claimed by a parent's thread that had not
//! bound it yet stays claimed in the child: at most one per such thread.)
//!
//! # Pool exhaustion
//!
//! A join that finds no free set returns `None`, and the caller takes the
//! global lock and runs its closure itself: with [`COMBINING_POOL_SIZE`]
//! sets, at least that many locks are contended at once (each bound set has
//! a user).

use crossbeam_utils::CachePadded;

#[cfg(not(numa_loom))]
use super::COMBINING_POOL_SIZE;
use super::COMBINING_QUEUES;
use super::queue::Queue;
#[cfg(numa_loom)]
use crate::sync::model::sync::atomic::AtomicU64;
use crate::sync::{AtomicU32, Ordering};
#[cfg(not(numa_loom))]
use std::sync::atomic::AtomicU64;

/// Sets in the pool of a loom execution.
#[cfg(numa_loom)]
const LOOM_POOL_SIZE: usize = 2;

/// The binding word's user count (bits 0..32).
const USERS: u64 = 0xffff_ffff;
/// The binding word's set index + 1 (bits 32..48).
const INDEX_SHIFT: u32 = 32;
/// The binding word's fork generation tag (bits 48..64).
const GEN_SHIFT: u32 = 48;

/// The index + 1 of the set that `word` names (0: none).
fn index_of(word: u64) -> u64 {
    (word >> INDEX_SHIFT) & 0xffff
}

/// The binding word's tag of the current fork generation.
fn generation_tag() -> u64 {
    u64::from(crate::node::fork_generation() & 0xffff)
}

/// One request queue per NUMA node, each on its own cache lines: what a lock
/// binds while it is contended.
pub(super) struct QueueSet {
    pub(super) queues: [CachePadded<Queue>; COMBINING_QUEUES],
    /// Under loom: the binding word of the lock the set is bound to (null
    /// while free), written by the binder before its binding CAS and by the
    /// last user before the give-back, checked by every joiner: a join
    /// whose CAS does not order it after the binder's claim (and so after
    /// the set's earlier bindings) may read an older value, and fails the
    /// model.
    #[cfg(numa_loom)]
    owner: crate::sync::AtomicPtr<Binding>,
}

impl QueueSet {
    #[cfg(not(numa_loom))]
    const fn new() -> Self {
        QueueSet {
            queues: [const { CachePadded::new(Queue::new()) }; COMBINING_QUEUES],
        }
    }

    #[cfg(numa_loom)]
    fn new() -> Self {
        QueueSet {
            queues: core::array::from_fn(|_| CachePadded::new(Queue::new())),
            owner: crate::sync::AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// Under loom: records the lock the set is bound to (null: none).
    #[cfg(numa_loom)]
    fn set_owner(&self, owner: *const Binding) {
        // Relaxed: published by the binding CAS or the pool's free (see
        // `owner`); a check, not part of the algorithm.
        self.owner.store(owner.cast_mut(), Ordering::Relaxed);
    }

    /// Under loom: checks that a joiner sees the set bound to its lock.
    #[cfg(numa_loom)]
    fn assert_owner(&self, index: u32, owner: *const Binding) {
        // Relaxed: see `owner`; a check, not part of the algorithm.
        let seen = self.owner.load(Ordering::Relaxed);
        assert!(
            core::ptr::eq(seen, owner),
            "numa-spin: a join of combining queue set {index} does not see its binding"
        );
    }

    /// Under loom: checks that every queue of the set is empty, when the set
    /// is claimed and when it goes back. The claimer's and the last user's
    /// views hold every earlier user's last access (the Acquire of the claim
    /// and of the give-back), so these loads read the final values; a set
    /// given back with a request in it, or whose emptying does not reach its
    /// next binder, fails the model here.
    #[cfg(numa_loom)]
    fn assert_empty(&self, index: u32, when: &str) {
        for (n, q) in self.queues.iter().enumerate() {
            // Relaxed: see above; a check, not part of the algorithm.
            let tail = q.tail.load(Ordering::Relaxed);
            assert!(
                tail.is_null(),
                "numa-spin: combining queue set {index} {when} with queue {n} non-empty"
            );
        }
    }
}

/// The process-wide pool: a claim flag per set (scanned from a per-lock
/// starting point) and the sets. A free set has every queue empty.
pub(super) struct Pool {
    #[cfg(not(numa_loom))]
    claimed: [AtomicU32; COMBINING_POOL_SIZE],
    #[cfg(not(numa_loom))]
    sets: [QueueSet; COMBINING_POOL_SIZE],
    #[cfg(numa_loom)]
    claimed: Vec<AtomicU32>,
    #[cfg(numa_loom)]
    sets: Vec<QueueSet>,
}

impl Pool {
    #[cfg(not(numa_loom))]
    const fn new() -> Self {
        Pool {
            claimed: [const { AtomicU32::new(0) }; COMBINING_POOL_SIZE],
            sets: [const { QueueSet::new() }; COMBINING_POOL_SIZE],
        }
    }

    #[cfg(numa_loom)]
    fn new() -> Self {
        Pool {
            claimed: (0..LOOM_POOL_SIZE).map(|_| AtomicU32::new(0)).collect(),
            sets: (0..LOOM_POOL_SIZE).map(|_| QueueSet::new()).collect(),
        }
    }

    /// Claims a free set, scanning from `hint`; `None` if all are taken.
    pub(super) fn claim(&self, hint: usize) -> Option<u32> {
        // Under loom the scan starts at set 0: the hint is an address, which
        // differs between executions, and loom replays an execution's prefix
        // only if the code makes the same choices each time.
        let hint = if cfg!(numa_loom) { 0 } else { hint };
        let len = self.claimed.len();
        let found = (0..len).map(|i| (hint + i) % len).find_map(|i| {
            // Relaxed load: only skips taken sets cheaply. Acquire CAS on
            // success: pairs with the Release store of `free`, so the
            // previous binding's accesses to the set happen-before ours (its
            // queues read empty). Relaxed on failure: nothing claimed.
            (self.claimed[i].load(Ordering::Relaxed) == 0
                && self.claimed[i]
                    .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok())
            .then_some(i as u32)
        });
        #[cfg(numa_loom)]
        if let Some(i) = found {
            self.set(i).assert_empty(i, "claimed");
        }
        found
    }

    /// Returns set `index` (every queue empty) to the pool.
    pub(super) fn free(&self, index: u32) {
        #[cfg(numa_loom)]
        self.set(index).assert_empty(index, "given back");
        // Release: our accesses to the set, and every earlier user's (which
        // happen-before ours through the binding word: see `Binding::leave`),
        // happen-before the next claim's Acquire.
        self.claimed[index as usize].store(0, Ordering::Release);
    }

    fn set(&self, index: u32) -> &QueueSet {
        &self.sets[index as usize]
    }

    /// How many sets are claimed now (a momentary snapshot, for tests).
    pub(super) fn claimed_count(&self) -> usize {
        // Relaxed: a snapshot; nothing is read through it.
        self.claimed
            .iter()
            .filter(|c| c.load(Ordering::Relaxed) != 0)
            .count()
    }
}

#[cfg(not(numa_loom))]
static POOL: Pool = Pool::new();

/// The process-wide pool.
#[cfg(not(numa_loom))]
pub(super) fn pool() -> &'static Pool {
    &POOL
}

#[cfg(numa_loom)]
crate::sync::model::lazy_static! {
    static ref POOL: Pool = Pool::new();
}

/// The pool of the current loom execution.
#[cfg(numa_loom)]
pub(super) fn pool() -> &'static Pool {
    &POOL
}

/// A lock's binding word (see the [module docs](self#the-binding-word)).
pub(super) struct Binding {
    word: AtomicU64,
}

impl Binding {
    /// No set bound.
    #[cfg(not(numa_loom))]
    pub(super) const fn new() -> Self {
        Binding {
            word: AtomicU64::new(0),
        }
    }

    /// No set bound (loom build: its atomics are not `const`).
    #[cfg(numa_loom)]
    pub(super) fn new() -> Self {
        Binding {
            word: AtomicU64::new(0),
        }
    }

    /// Joins the bound set, or binds one claimed from the pool (scanning
    /// from `hint`); `None` if none is bound and the pool has none free. The
    /// set stays bound until the returned handle is dropped.
    pub(super) fn join(&self, hint: usize) -> Option<Joined<'_>> {
        let tag = generation_tag();
        // A set we claimed and have not bound yet (our CAS lost to another
        // arrival's binding): used for the next try, or freed.
        let mut spare: Option<u32> = None;
        // Relaxed: a first guess for the CAS, which reads the word anew.
        let mut seen = self.word.load(Ordering::Relaxed);
        let mut saw_bound = false;
        loop {
            let (new, index) = if index_of(seen) != 0 {
                saw_bound = true;
                let index = index_of(seen) - 1;
                if seen >> GEN_SHIFT == tag {
                    debug_assert!(seen & USERS != USERS, "2^32 - 1 users");
                    (seen + 1, index)
                } else {
                    // Bound before a fork of which we are the child: its
                    // users are the parent's threads (see the module docs).
                    ((tag << GEN_SHIFT) | (index + 1) << INDEX_SHIFT | 1, index)
                }
            } else {
                let index = match spare {
                    Some(i) => u64::from(i),
                    None => {
                        let i = pool().claim(hint)?;
                        #[cfg(numa_loom)]
                        pool().set(i).set_owner(self);
                        spare = Some(i);
                        u64::from(i)
                    }
                };
                ((tag << GEN_SHIFT) | (index + 1) << INDEX_SHIFT | 1, index)
            };
            // Success AcqRel. Acquire (a join): pairs with the Release of the
            // binder's CAS (or reads a later value of its release sequence:
            // every change of the word is a read-modify-write), so the
            // binder's claim, and through its Acquire every access of the
            // set's earlier bindings, happen-before our use of the set.
            // Release (a binding): passes the same to the later joiners.
            // Relaxed on failure: we only retry with the value read.
            match self
                .word
                .compare_exchange(seen, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    let index = index as u32;
                    if let Some(s) = spare.filter(|&s| s != index) {
                        #[cfg(numa_loom)]
                        pool().set(s).set_owner(core::ptr::null());
                        pool().free(s);
                    }
                    #[cfg(numa_loom)]
                    if spare != Some(index) {
                        pool().set(index).assert_owner(index, self);
                    }
                    if spare == Some(index) {
                        crate::sync::event(if saw_bound {
                            "combine-rebind-after-give-back"
                        } else {
                            "combine-bind"
                        });
                    }
                    return Some(Joined {
                        binding: self,
                        index,
                    });
                }
                Err(now) => seen = now,
            }
        }
    }

    /// Drops `n` users of set `index`; the last ones give the set back.
    fn leave(&self, index: u32, n: u64) {
        // Relaxed: a first guess for the CAS, which reads the word anew.
        let mut seen = self.word.load(Ordering::Relaxed);
        loop {
            debug_assert_eq!(
                index_of(seen),
                u64::from(index) + 1,
                "left a set not joined"
            );
            debug_assert!(seen & USERS >= n, "left more users than joined");
            let last = seen & USERS == n;
            let new = if last { 0 } else { seen - n };
            // Success AcqRel. Release: our accesses to the set (our request's
            // swap into a tail, a combiner's closing CAS), and those of the
            // submitters our batch served (each happens-before our Acquire
            // read of its link), happen-before the last user's Acquire, and
            // so before the set's next claim. Acquire
            // (the last user): collects every earlier user's Release (their
            // decrements are read-modify-writes, one release sequence), so
            // the set is given back after every access of its users.
            // Relaxed on failure: we only retry with the value read.
            match self
                .word
                .compare_exchange(seen, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    if last {
                        crate::sync::event("combine-give-back");
                        #[cfg(numa_loom)]
                        pool().set(index).set_owner(core::ptr::null());
                        pool().free(index);
                    }
                    return;
                }
                Err(now) => seen = now,
            }
        }
    }

    /// The bound set's pool index and its user count; `None` if none is
    /// bound. A momentary snapshot, for tests.
    pub(super) fn snapshot(&self) -> Option<(usize, u32)> {
        // Relaxed: a snapshot; nothing is read through it.
        let word = self.word.load(Ordering::Relaxed);
        (index_of(word) != 0).then(|| ((index_of(word) - 1) as usize, (word & USERS) as u32))
    }

    /// The address of the last request of each queue of the bound set (all
    /// 0 if none is bound): a momentary snapshot, for tests. Reads a set it
    /// has not joined, which its lock may have given back meanwhile: the
    /// pool's sets are never freed to the allocator.
    pub(super) fn tails(&self) -> [usize; COMBINING_QUEUES] {
        match self.snapshot() {
            None => [0; COMBINING_QUEUES],
            Some((index, _)) => {
                let set = pool().set(index as u32);
                // Relaxed: a snapshot; nothing is read through the addresses.
                core::array::from_fn(|i| set.queues[i].tail.load(Ordering::Relaxed) as usize)
            }
        }
    }
}

/// A thread's use of its lock's bound set, from its join to its leave (on
/// drop).
pub(super) struct Joined<'a> {
    binding: &'a Binding,
    index: u32,
}

impl Joined<'_> {
    /// The set joined.
    pub(super) fn set(&self) -> &'static QueueSet {
        pool().set(self.index)
    }

    /// Our request was served by another thread's batch, whose combiner
    /// leaves for it: ends our use of the set without writing the word.
    pub(super) fn served(self) {
        core::mem::forget(self);
    }

    /// Leaves for the `served` requests of our batch, our own included
    /// (`served >= 1`): one write of the word.
    pub(super) fn leave_for(self, served: u32) {
        let this = core::mem::ManuallyDrop::new(self);
        this.binding.leave(this.index, u64::from(served));
    }
}

impl Drop for Joined<'_> {
    /// Leaves for ourselves alone (a request that ran without queueing).
    fn drop(&mut self) {
        self.binding.leave(self.index, 1);
    }
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use super::*;

    /// From any starting hint, the pool hands out every set once before it
    /// reports exhaustion, and a set given back can be claimed again.
    #[test]
    fn pool_claims_every_set_from_any_hint() {
        let pool = Box::new(Pool::new());
        let n = COMBINING_POOL_SIZE;
        for hint in [0, 1, 2, n - 1, n, 0x7f12_3456_789a >> 4] {
            let mut seen: Vec<u32> = (0..n)
                .map(|_| pool.claim(hint).expect("pool exhausted early"))
                .collect();
            assert_eq!(pool.claim(hint), None, "more claims than sets");
            assert_eq!(pool.claimed_count(), n);
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), n, "a set was claimed twice");
            pool.free(seen[7]);
            assert_eq!(pool.claim(hint), Some(seen[7]));
            for i in seen {
                pool.free(i);
            }
            assert_eq!(pool.claimed_count(), 0);
        }
    }

    /// Joins count users; the last leave gives the set back; a word of an
    /// older fork generation is rebound with one user.
    #[test]
    fn joins_count_users_and_the_last_leave_gives_back() {
        let _pool = super::super::tests::pool_shared();
        let b = Binding::new();
        assert_eq!(b.snapshot(), None);
        let first = b.join(3).expect("pool exhausted");
        let (index, users) = b.snapshot().expect("no set bound");
        assert_eq!((index, users), (first.index as usize, 1));
        let second = b.join(3).expect("pool exhausted");
        assert_eq!(second.index, first.index, "a second set bound");
        assert_eq!(b.snapshot(), Some((index, 2)));
        drop(first);
        assert_eq!(b.snapshot(), Some((index, 1)));
        drop(second);
        assert_eq!(b.snapshot(), None, "the last leave kept the set");
        // A binding made in another fork generation (tag 1), with 5 users
        // that the process does not have, of a set claimed then.
        let ghost = pool().claim(3).expect("pool exhausted");
        b.word.store(
            (1 << GEN_SHIFT) | ((u64::from(ghost) + 1) << INDEX_SHIFT) | 5,
            std::sync::atomic::Ordering::Relaxed,
        );
        let j = b.join(3).expect("pool exhausted");
        assert_eq!(j.index, ghost, "a ghost binding's set was not reused");
        assert_eq!(
            b.snapshot(),
            Some((ghost as usize, 1)),
            "ghost users were counted"
        );
        drop(j);
        assert_eq!(b.snapshot(), None);
    }
}
