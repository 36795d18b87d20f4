//! Per-node snodes, the lazily built list that holds them, and their reuse.
//!
//! CST (Kashyap, Min, Kim, USENIX ATC 2017, section 4) gives every lock one
//! "snode" per NUMA node that has contended on it. An snode is attached the
//! first time a thread of its node has to wait, pushed onto a lock-free singly
//! linked list whose head lives in the lock. A lock that is never contended
//! holds nothing.
//!
//! The list order (newest first) is the *global order among snodes*: the
//! unlocker moves the lock to the next snode in this cyclic order that has
//! waiters (see `Cohort::unlock_slow`).
//!
//! Layout: three cache-line groups (see [`Snode`]): the read-mostly identity,
//! the hot waiting counters, the reader counter; 384 bytes on x86-64 (128-byte
//! `CachePadded` groups), 192 bytes where lines are 64 bytes and not paired.
//!
//! # Returning snodes while a mutex is idle
//!
//! C programs free mutexes without destroying them (`pthread_mutex_destroy`
//! does nothing in glibc), so a mutex must not hold heap memory once its
//! contention is over. A mutex's snodes are therefore *detached* by the
//! thread that holds the lock after a slow acquisition when nobody else uses
//! them ([`SnodeList::detach_idle`]) and go back to a pool ([`crate::pool`])
//! from which the next contention of any lock takes them. (`RawRwLock` keeps
//! its snodes until it is dropped: its readers use snode counters outside the
//! lock.)
//!
//! Arrivals read the snode pointers without holding the lock, so a detached
//! snode may still be read by a thread that loaded the pointer before the
//! detach. The argument that this is safe has three parts:
//!
//! 1. **Type-stable memory.** Snodes are never returned to the allocator:
//!    the pool keeps them for reuse (its size is the most snodes attached at
//!    once). A stale pointer always points to an `Snode`, and every field a
//!    thread may read without a pin (`node`, `next`, `owner`, `users`) is an
//!    atomic, so stale reads are plain atomic reads of valid memory.
//! 2. **Pins.** A thread that waits with an snode *pins* it first: a CAS that
//!    adds [`PIN_ONE`] to [`Hot::users`] unless its [`DEAD`] bit is set. The
//!    detacher (the lock holder) turns each snode's `users` from exactly 0 into
//!    `DEAD` with a CAS and detaches only if that worked for all of them, so
//!    no pinned snode is ever detached, and no snode is pinned while `DEAD`
//!    (detached, pooled, or being reinitialised).
//! 3. **Owner check.** Each snode records the address of the lock that
//!    attached it (`owner`). A thread that pinned an snode checks `owner` and
//!    `node` after the pin: `owner` changes only while the snode is `DEAD`,
//!    so a pinned snode that names this lock is this lock's (attached, or
//!    about to be published by the thread that initialised it, see
//!    [`SnodeList::lookup`]) and stays so until the pin is dropped. A stale
//!    pin on another lock's snode is dropped at once (it only makes that
//!    lock's detach attempt fail meanwhile).
//!
//! Walks stop at the first snode whose `owner` is not this lock: a mutex copied
//! byte by byte (undefined in POSIX, harmless in glibc) shares the original's
//! snode pointers, and the copy must neither use nor free snodes it does not
//! own. A copy's own snodes are pushed in front of the shared ones, so its
//! list is its own snodes followed by foreign ones.

use crate::cohort::HALF;
use crate::queue::SnodeQueue;
use crate::sync::{self, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;
use std::ptr;

/// [`Hot::users`]: one waiter in the node's queue (low half of the word).
pub(crate) const QUEUED_ONE: usize = 1;
/// [`Hot::users`]: the queued count.
#[cfg_attr(numa_loom, allow(dead_code))]
pub(crate) const QUEUED_MASK: usize = (1usize << HALF) - 1;
/// [`Hot::users`]: one pin (upper half, below [`DEAD`]).
pub(crate) const PIN_ONE: usize = 1usize << HALF;
/// [`Hot::users`]: the snode is detached, pooled or being reinitialised;
/// nobody may pin it.
pub(crate) const DEAD: usize = 1usize << (usize::BITS - 1);

/// The longest walk of a list. A list has one snode per node, plus the
/// requeue one; only a stale walk goes further: a thread that loaded a
/// pointer before a detach may follow links of reused snodes, including the
/// link of another thread's unpublished snode, which may point back into
/// the stale chain for a moment. Such a walk ends here, finds nothing, and
/// its thread looks again from the head.
#[cfg(not(numa_loom))]
const MAX_WALK: usize = 4096;
/// Under loom: the models have at most four snodes per lock.
#[cfg(numa_loom)]
const MAX_WALK: usize = 8;

/// One NUMA node's share of a contended lock.
///
/// Parked waiters of the node park on the snode's address (key
/// [`Snode::park_key`]); the counters in [`Snode::hot`] are kept under that
/// parking queue's lock (`parked`, `fair_since_ns`) or by the lock holder
/// (`batch`).
///
/// Three cache-line groups (`CachePadded`: 128 bytes on x86-64, where the
/// adjacent-line prefetcher pairs 64-byte lines): the read-mostly identity
/// (`node`, `next`, `owner`) that every unlock's walk reads, the hot waiting
/// counters, and the reader counter of a `RawRwLock`. A write to a counter
/// then never invalidates the line other unlockers walk, nor the readers' line.
///
/// Snode memory is type-stable (see the module docs): it is reused, never
/// freed, so the identity fields are atomics that stale readers may load.
#[repr(C)]
pub(crate) struct Snode {
    /// The NUMA node (OS index) of this snode. Set while `DEAD`, before the
    /// snode is published.
    node: AtomicUsize,
    /// Next snode in the lock's list (older), or the next pooled snode. Set
    /// before publication, then immutable while attached.
    next: AtomicPtr<Snode>,
    /// The address of the [`SnodeList`] this snode belongs to, 0 while pooled.
    /// Changes only while `DEAD`.
    owner: AtomicUsize,
    /// The waiting counters, on their own line.
    pub(crate) hot: CachePadded<Hot>,
    /// The per-node reader counter of `RawRwLock`, on its own line.
    pub(crate) readers: CachePadded<ReaderLine>,
    /// Contended-path counters (feature `stats`), on their own line.
    #[cfg(feature = "stats")]
    pub(crate) stats: CachePadded<crate::stats::SnodeStats>,
}

/// The waiting counters of an snode.
pub(crate) struct Hot {
    /// Threads of this node parked on [`Snode::park_key`]. Changed only under
    /// that key's parking-lot queue lock; read racily as a hint.
    pub(crate) parked: AtomicUsize,
    /// Consecutive acquisitions by this node since the lock last came to it
    /// (the CST batch count). Written only by the lock holder.
    pub(crate) batch: AtomicU32,
    /// Eventual fairness: when (ns since the process epoch, + 1; 0 = never)
    /// the node's current fairness period started; a parked waiter is owed a
    /// direct handoff once a period has passed. `u64` on every target.
    /// Accessed only under the queue lock its waiters sleep on.
    pub(crate) fair_since_ns: AtomicU64,
    /// The node's queue of untimed waiters (see [`crate::queue`]).
    pub(crate) queue: SnodeQueue,
    /// Who uses the snode: the waiters in the node's queue, head included, in
    /// the low half ([`QUEUED_MASK`]; a hint: new waiters stop queueing while
    /// the queue and the parked waiters are as many as the machine's CPUs);
    /// the pins in the upper half ([`PIN_ONE`]); [`DEAD`] in the top bit.
    /// One word, so a queued waiter leaves its queue and drops its pin with
    /// one subtraction.
    pub(crate) users: AtomicUsize,
}

/// The per-node reader counter (on its own line, see [`Snode::readers`]).
pub(crate) struct ReaderLine {
    /// Readers of this node inside the lock (registered on this counter).
    pub(crate) count: AtomicUsize,
}

impl Snode {
    /// A new, `DEAD` snode (not yet initialised for a lock).
    pub(crate) fn new_dead() -> Self {
        Snode {
            node: AtomicUsize::new(0),
            next: AtomicPtr::new(ptr::null_mut()),
            owner: AtomicUsize::new(0),
            hot: CachePadded::new(Hot {
                parked: AtomicUsize::new(0),
                batch: AtomicU32::new(0),
                fair_since_ns: AtomicU64::new(0),
                queue: SnodeQueue::new(),
                users: AtomicUsize::new(DEAD),
            }),
            readers: CachePadded::new(ReaderLine {
                count: AtomicUsize::new(0),
            }),
            #[cfg(feature = "stats")]
            stats: CachePadded::new(crate::stats::SnodeStats::new()),
        }
    }

    /// The NUMA node of this snode.
    #[inline]
    pub(crate) fn node(&self) -> usize {
        // Relaxed: set before the Release that published the snode (the head
        // CAS, or the `users` store for a stale pinner), which the reader acquired.
        self.node.load(Ordering::Relaxed)
    }

    /// The next snode pointer (list or pool link).
    ///
    /// Acquire, as every load of an snode pointer (the list head, the pool):
    /// pairs with the Release store of that pointer, so the pointed-to
    /// snode's allocation happens before our reads of it, even when we reach
    /// it through a stale snode (an snode's memory is reused, its first
    /// initialisation is not repeated).
    #[inline]
    pub(crate) fn next_ptr(&self) -> *mut Snode {
        self.next.load(Ordering::Acquire)
    }

    /// Sets the link (the snode is unpublished or `DEAD`, and exclusively the
    /// caller's).
    #[inline]
    pub(crate) fn set_next(&self, next: *mut Snode) {
        // Release: see `next_ptr`.
        self.next.store(next, Ordering::Release);
    }

    /// The parking-lot key of this node's waiting queue.
    #[inline]
    pub(crate) fn park_key(&self) -> usize {
        self as *const Snode as usize
    }

    /// Prepares a `DEAD` snode that the caller owns exclusively for `owner`'s
    /// list: every field back to its initial value, then `users` to `pins`
    /// (the caller's own pin, or none), which ends `DEAD`.
    fn init(&self, owner: usize, node: usize, pins: usize) {
        // Relaxed throughout: published by the Release store of `users` below
        // (to a thread that pins the snode: its pin is an Acquire CAS reading
        // that store) and by the Release CAS of the list head (to walkers).
        self.node.store(node, Ordering::Relaxed);
        self.owner.store(owner, Ordering::Relaxed);
        let h = &self.hot;
        h.parked.store(0, Ordering::Relaxed);
        h.batch.store(0, Ordering::Relaxed);
        h.fair_since_ns.store(0, Ordering::Relaxed);
        h.queue.tail.store(ptr::null_mut(), Ordering::Relaxed);
        h.queue.head.store(ptr::null_mut(), Ordering::Relaxed);
        self.readers.count.store(0, Ordering::Relaxed);
        #[cfg(feature = "stats")]
        self.stats.reset();
        self.hot.users.store(pins, Ordering::Release);
    }

    /// Pins the snode unless it is `DEAD`.
    #[inline]
    fn try_pin(&self) -> bool {
        let users = &self.hot.users;
        // Relaxed: a first guess for the CAS.
        let mut u = users.load(Ordering::Relaxed);
        loop {
            if u & DEAD != 0 {
                return false;
            }
            // Acquire: pairs with the Release store of `init` (the owner and
            // node we check next are this era's) and with the Release of
            // the last unpin, which does not matter here.
            match users.compare_exchange_weak(u, u + PIN_ONE, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(x) => u = x,
            }
        }
    }

    /// Drops a pin taken by [`SnodeList::pin`].
    #[inline]
    pub(crate) fn unpin(&self) {
        // Release: our uses of the snode happen before a detacher's Acquire
        // CAS to `DEAD` and so before its reuse.
        self.hot.users.fetch_sub(PIN_ONE, Ordering::Release);
    }

    /// Turns an unused snode `DEAD`: `users` from exactly `expected` (0, or
    /// the caller's own pin on an unpublished snode) to `DEAD`.
    #[inline]
    fn try_kill(&self, expected: usize) -> bool {
        // Acquire: pairs with the Release of every earlier unpin (and queue
        // exit), so every use of the snode happens before its reuse.
        self.hot
            .users
            .compare_exchange(expected, DEAD, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }
}

/// The head of a lock's snode list (one pointer, null while the lock holds
/// no snode).
pub(crate) struct SnodeList {
    head: AtomicPtr<Snode>,
}

impl SnodeList {
    /// An empty list.
    #[cfg(not(numa_loom))]
    pub(crate) const fn new() -> Self {
        SnodeList {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// An empty list (loom atomics are not `const`).
    #[cfg(numa_loom)]
    pub(crate) fn new() -> Self {
        SnodeList {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// This list's identity, recorded in its snodes' `owner`.
    #[inline]
    fn addr(&self) -> usize {
        self as *const SnodeList as usize
    }

    /// `p` as an snode of this list, or `None` (null, or another lock's).
    #[inline]
    fn own(&self, p: *mut Snode) -> Option<&Snode> {
        // SAFETY: snode memory is type-stable (never deallocated while the
        // process runs, see the module docs), so any snode pointer read from a
        // list or a pool points to a valid `Snode` whose shared fields are
        // atomics.
        let s = unsafe { p.as_ref() }?;
        // Relaxed: `owner` is set before the snode is published (see `init`).
        (s.owner.load(Ordering::Relaxed) == self.addr()).then_some(s)
    }

    /// The first snode (newest), or `None` if the lock holds none.
    #[inline]
    pub(crate) fn first(&self) -> Option<&Snode> {
        // Acquire: pairs with the Release CAS that published the head (and,
        // through its release sequence, the older snodes).
        self.own(self.head.load(Ordering::Acquire))
    }

    /// Iterates over this lock's snodes, newest first. The snodes are stable
    /// for the lock holder (only it detaches) and for a thread that holds a
    /// pin on one of them (no snode of a list with a pinned one is detached).
    #[inline]
    pub(crate) fn iter(&self) -> Iter<'_> {
        Iter {
            list: self,
            cur: self.first(),
            steps: 0,
        }
    }

    /// The snode of `node`, if one exists.
    #[inline]
    pub(crate) fn find(&self, node: usize) -> Option<&Snode> {
        self.iter().find(|s| s.node() == node)
    }

    /// The snode of `node`, attaching one if none exists, without a pin: for
    /// `RawRwLock`, whose snodes are never detached while it lives.
    pub(crate) fn get_or_insert(&self, node: usize) -> &Snode {
        self.lookup(node, false)
    }

    /// The snode of `node`, attaching one if none exists, pinned: it stays
    /// this lock's until [`Snode::unpin`] (or a queued waiter's exit, which
    /// drops its pin with the queue count).
    pub(crate) fn pin(&self, node: usize) -> &Snode {
        self.lookup(node, true)
    }

    /// The lookup behind [`SnodeList::pin`] and [`SnodeList::get_or_insert`].
    ///
    /// A fresh snode is taken from the pool, initialised with this lock as
    /// owner and published with a CAS of the head. Two threads of one node may
    /// race here: both prepare one, one CAS wins, the loser finds the winner's
    /// snode on its retry and gives its own back, unless a stale pinner holds
    /// it (it saw the owner and node set): then the loser publishes it anyway
    /// (a second snode for the node is harmless: unlocks walk every snode),
    /// so that an owner check that passed always names a published snode.
    fn lookup(&self, node: usize, pin: bool) -> &Snode {
        let pins = if pin { PIN_ONE } else { 0 };
        let mut fresh: Option<&Snode> = None;
        loop {
            // Acquire: pairs with the Release CAS that published the head.
            let head = self.head.load(Ordering::Acquire);
            let found = Iter {
                list: self,
                cur: self.own(head),
                steps: 0,
            }
            .find(|s| s.node() == node);
            if let Some(s) = found {
                let usable = if pin {
                    // The owner and node are checked again under the pin: a
                    // stale walk (through snodes detached meanwhile) may have
                    // found an snode that is now another lock's.
                    if s.try_pin() {
                        // Relaxed: ordered by the pin's Acquire (see `try_pin`).
                        let ok = s.owner.load(Ordering::Relaxed) == self.addr() && s.node() == node;
                        if !ok {
                            s.unpin();
                        }
                        ok
                    } else {
                        false
                    }
                } else {
                    true
                };
                if usable {
                    match fresh {
                        None => return s,
                        Some(f) if f.try_kill(pins) => {
                            // Relaxed: `DEAD` now; the pool publishes it.
                            f.owner.store(0, Ordering::Relaxed);
                            crate::pool::give(f);
                            return s;
                        }
                        // A stale pinner holds our unpublished snode: publish
                        // it below, and keep the one we found unpinned.
                        Some(_) => {
                            if pin {
                                s.unpin();
                            }
                        }
                    }
                } else if fresh.is_none() {
                    // `DEAD` (a detach in progress or done) or no longer ours:
                    // look again once the detacher is through.
                    sync::spin_loop();
                    continue;
                }
            }
            let f = *fresh.get_or_insert_with(|| {
                let f = crate::pool::take();
                f.init(self.addr(), node, pins);
                f
            });
            f.set_next(head);
            // Release on success: publishes the fresh snode's initialisation.
            // Relaxed on failure: we loop and load the head with Acquire.
            if self
                .head
                .compare_exchange(
                    head,
                    f as *const Snode as *mut Snode,
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return f;
            }
        }
    }

    /// The snode after `s` in the cyclic global order.
    #[inline]
    pub(crate) fn next_cyclic<'a>(&'a self, s: &'a Snode) -> Option<&'a Snode> {
        self.own(s.next_ptr()).or_else(|| self.first())
    }

    /// Number of snodes (for tests and the memory-cost accounting; a snapshot).
    pub(crate) fn len(&self) -> usize {
        self.iter().count()
    }

    /// Detaches every snode of the lock and gives them back to the pool, if
    /// nobody uses any of them. The caller holds the lock (so no other thread
    /// detaches, and no unlocker walks the list) and uses none of them
    /// itself. Returns whether the lock now holds no snode of its own.
    ///
    /// Every snode's `users` goes from exactly 0 to `DEAD` (Acquire: after
    /// every earlier user's Release exit) or the attempt is undone: a waiter
    /// that pinned or queued is still inside the lock's slow path and will
    /// try again when it holds the lock. Then the head CAS unlinks them; it
    /// fails, and the attempt is undone, if an arrival pushed a fresh snode
    /// meanwhile. Arrivals that loaded the old pointers find them `DEAD` or
    /// owned by another lock, and look again.
    pub(crate) fn detach_idle(&self) -> bool {
        // Acquire: as in `first`.
        let head = self.head.load(Ordering::Acquire);
        let Some(first) = self.own(head) else {
            return true;
        };
        let mut marked = 0usize;
        let mut rest = ptr::null_mut();
        let mut ok = true;
        let mut cur = Some(first);
        while let Some(s) = cur {
            if marked >= MAX_WALK || !s.try_kill(0) {
                ok = false;
                break;
            }
            marked += 1;
            rest = s.next_ptr();
            cur = self.own(rest);
        }
        // Release: the pointer we leave (a copied lock's foreign snodes, or
        // null) is published as every snode pointer is (see `next_ptr`).
        if ok
            && self
                .head
                .compare_exchange(head, rest, Ordering::Release, Ordering::Relaxed)
                .is_ok()
        {
            let mut p = head;
            for _ in 0..marked {
                // SAFETY: `p` is one of the snodes we just made `DEAD` and
                // unlinked: type-stable memory, ours alone now.
                let s = unsafe { &*p };
                p = s.next_ptr();
                // Relaxed: `DEAD`; the pool publishes it to its next user.
                s.owner.store(0, Ordering::Relaxed);
                crate::pool::give(s);
            }
            return true;
        }
        let mut p = head;
        for _ in 0..marked {
            // SAFETY: as above; the snode stays attached.
            let s = unsafe { &*p };
            p = s.next_ptr();
            // Relaxed: nothing changed in the snode while it was `DEAD`.
            s.hot.users.store(0, Ordering::Relaxed);
        }
        false
    }

    /// Gives this lock's own snodes back to the pool and forgets the rest (a
    /// byte-wise copy's view of another lock's snodes): `pthread_mutex_destroy`
    /// of a mutex that C code may have copied. Nobody uses the lock.
    pub(crate) fn release_own(&mut self) {
        let mut p = self.take_head();
        while let Some(s) = self.own(p) {
            p = s.next_ptr();
            if Self::kill_unused(s) {
                crate::pool::give(s);
            }
        }
    }

    fn take_head(&mut self) -> *mut Snode {
        #[cfg(any(not(numa_loom), numa_shuttle))]
        let head = std::mem::replace(self.head.get_mut(), ptr::null_mut());
        // loom's atomics have no `get_mut`.
        #[cfg(all(numa_loom, not(numa_shuttle)))]
        let head = self
            .head
            .with_mut(|p| std::mem::replace(p, ptr::null_mut()));
        head
    }

    /// Makes an snode that no waiter uses any more `DEAD`, waiting out stale
    /// pins (each is taken, checked and dropped without blocking). `false` if
    /// it is `DEAD` already: then it is not this lock's to give back.
    fn kill_unused(s: &Snode) -> bool {
        loop {
            // Relaxed: a first look; the CAS acquires.
            if s.hot.users.load(Ordering::Relaxed) & DEAD != 0 {
                return false;
            }
            if s.try_kill(0) {
                // Relaxed: `DEAD`; the pool publishes it.
                s.owner.store(0, Ordering::Relaxed);
                return true;
            }
            sync::spin_loop();
        }
    }
}

impl Drop for SnodeList {
    /// Gives every snode reachable from the head back to the pool: in Rust a
    /// lock is moved, never copied, so snodes that name an older address of
    /// this lock are this lock's too (C code that copies locks byte by byte
    /// uses [`SnodeList::release_own`]). A `DEAD` snode ends the walk: it was
    /// given back already, so it and the rest are not ours.
    fn drop(&mut self) {
        let mut p = self.take_head();
        let mut steps = 0;
        while !p.is_null() && steps < MAX_WALK {
            steps += 1;
            // SAFETY: type-stable memory (module docs); `&mut self` means no
            // thread uses the lock, and in Rust every snode reachable from it
            // is its own.
            let s = unsafe { &*p };
            p = s.next_ptr();
            if !Self::kill_unused(s) {
                return;
            }
            crate::pool::give(s);
        }
    }
}

/// Iterator over a lock's own snodes.
pub(crate) struct Iter<'a> {
    list: &'a SnodeList,
    cur: Option<&'a Snode>,
    steps: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Snode;
    #[inline]
    fn next(&mut self) -> Option<&'a Snode> {
        let s = self.cur?;
        self.steps += 1;

        self.cur = if self.steps < MAX_WALK {
            self.list.own(s.next_ptr())
        } else {
            None
        };
        Some(s)
    }
}

// SAFETY: all shared state is atomic; snode memory is type-stable (see the
// module docs) and every use of a shared snode is ordered by pins or by
// holding the lock.
unsafe impl Send for SnodeList {}
// SAFETY: as above.
unsafe impl Sync for SnodeList {}
