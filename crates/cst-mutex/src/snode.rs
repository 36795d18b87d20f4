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
//! Layout: two cache-line groups (see [`Snode`]): the read-mostly identity and
//! the hot waiting counters; 256 bytes on x86-64 (128-byte `CachePadded`
//! groups), 128 bytes where lines are 64 bytes and not paired.
//!
//! # Returning snodes while a mutex is idle
//!
//! C programs free mutexes without destroying them (`pthread_mutex_destroy`
//! does nothing in glibc), so a mutex must not hold heap memory once its
//! contention is over. A mutex's snodes are therefore *detached* by the
//! thread that holds the lock after a slow acquisition when nobody else uses
//! them ([`crate::list::SnodeList::detach_idle`]) and go back to a pool ([`crate::pool`])
//! from which the next contention of any lock takes them. (`RawRwLock` has
//! no snodes: its writers queue on numa-spin's lock, its readers count on
//! per-node counters of a static pool.)
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
//!    [`SnodeList::lookup`](crate::list::SnodeList::lookup)) and stays so until the pin is dropped. A stale
//!    pin on another lock's snode is dropped at once (it only makes that
//!    lock's detach attempt fail meanwhile).
//!
//! Walks stop at the first snode whose `owner` is not this lock: a mutex copied
//! byte by byte (undefined in POSIX, harmless in glibc) shares the original's
//! snode pointers, and the copy must neither use nor free snodes it does not
//! own. A copy's own snodes are pushed in front of the shared ones, so its
//! list is its own snodes followed by foreign ones.

use crate::qnode::SnodeQueue;
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use crate::word::HALF;
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

/// One NUMA node's share of a contended lock.
///
/// Parked waiters of the node park on the snode's address (key
/// [`Snode::park_key`]); the counters in [`Snode::hot`] are kept under that
/// parking queue's lock (`parked`, `fair_since_ns`) or by the lock holder
/// (`batch`).
///
/// Two cache-line groups (`CachePadded`: 128 bytes on x86-64, where the
/// adjacent-line prefetcher pairs 64-byte lines): the read-mostly identity
/// (`node`, `next`, `owner`) that every unlock's walk reads, and the hot
/// waiting counters. A write to a counter then never invalidates the line
/// other unlockers walk.
///
/// Snode memory is type-stable (see the module docs): it is reused, never
/// freed, so the identity fields are atomics that stale readers may load.
#[repr(C)]
pub(crate) struct Snode {
    /// The NUMA node (OS index) of this snode. Set while `DEAD`, before the
    /// snode is published.
    pub(crate) node: AtomicUsize,
    /// Next snode in the lock's list (older), or the next pooled snode. Set
    /// before publication, then immutable while attached.
    pub(crate) next: AtomicPtr<Snode>,
    /// The address of the [`SnodeList`](crate::list::SnodeList) this snode belongs to, 0 while pooled.
    /// Changes only while `DEAD`.
    pub(crate) owner: AtomicUsize,
    /// The fork generation the snode was attached or last reset in (see
    /// `fork.rs`): an older one means its waiter state is a parent's.
    pub(crate) generation: AtomicU32,
    /// The waiting counters, on their own line.
    pub(crate) hot: CachePadded<Hot>,
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
    /// When ([`crate::spin::ticks`]) a holder last put a head that has not
    /// run yet in the queue's registration slot (`queue::pass_headship`).
    /// Written only by lock holders; read by unlocks as a hint.
    pub(crate) headship_at: AtomicU64,
    /// Who uses the snode: the waiters in the node's queue, head included, in
    /// the low half ([`QUEUED_MASK`]; a hint: with the parked count it tells
    /// whether a lock's waiters outnumber the CPUs, `queue::oversubscribed`);
    /// the pins in the upper half ([`PIN_ONE`]); [`DEAD`] in the top bit.
    /// One word, so a queued waiter leaves its queue and drops its pin with
    /// one subtraction.
    pub(crate) users: AtomicUsize,
}

impl Snode {
    /// A new, `DEAD` snode (not yet initialised for a lock).
    pub(crate) fn new_dead() -> Self {
        Snode {
            node: AtomicUsize::new(0),
            next: AtomicPtr::new(ptr::null_mut()),
            owner: AtomicUsize::new(0),
            generation: AtomicU32::new(0),
            hot: CachePadded::new(Hot {
                parked: AtomicUsize::new(0),
                batch: AtomicU32::new(0),
                fair_since_ns: AtomicU64::new(0),
                queue: SnodeQueue::new(),
                headship_at: AtomicU64::new(0),
                users: AtomicUsize::new(DEAD),
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
    pub(crate) fn init(&self, owner: usize, node: usize, pins: usize) {
        // Relaxed throughout: published by the Release store of `users` below
        // (to a thread that pins the snode: its pin is an Acquire CAS reading
        // that store) and by the Release CAS of the list head (to walkers).
        self.node.store(node, Ordering::Relaxed);
        self.owner.store(owner, Ordering::Relaxed);
        self.generation
            .store(crate::fork::generation(), Ordering::Relaxed);
        let h = &self.hot;
        h.parked.store(0, Ordering::Relaxed);
        h.batch.store(0, Ordering::Relaxed);
        h.fair_since_ns.store(0, Ordering::Relaxed);
        h.queue.tail.store(ptr::null_mut(), Ordering::Relaxed);
        h.queue.head.store(ptr::null_mut(), Ordering::Relaxed);
        h.headship_at.store(0, Ordering::Relaxed);
        #[cfg(feature = "stats")]
        self.stats.reset();
        self.hot.users.store(pins, Ordering::Release);
    }

    /// Pins the snode unless it is `DEAD`.
    #[inline]
    pub(crate) fn try_pin(&self) -> bool {
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

    /// Drops a pin taken by [`SnodeList::pin`](crate::list::SnodeList::pin).
    #[inline]
    pub(crate) fn unpin(&self) {
        // Release: our uses of the snode happen before a detacher's Acquire
        // CAS to `DEAD` and so before its reuse.
        self.hot.users.fetch_sub(PIN_ONE, Ordering::Release);
    }

    /// Turns an unused snode `DEAD`: `users` from exactly `expected` (0, or
    /// the caller's own pin on an unpublished snode) to `DEAD`.
    #[inline]
    pub(crate) fn try_kill(&self, expected: usize) -> bool {
        // Acquire: pairs with the Release of every earlier unpin (and queue
        // exit), so every use of the snode happens before its reuse.
        self.hot
            .users
            .compare_exchange(expected, DEAD, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }
}

/// Whether a waiter of `snode` is owed a direct handoff at `now`
/// ([`crate::config::fairness_now`]): a whole fairness period (the current
/// [`crate::fairness_timeout`]) has passed since the node's period started; if so,
/// or if no period was started yet, starts the next one. Called under the
/// queue lock `snode`'s waiters sleep on (with a clock read taken before it).
///
/// Times are `u64` nanoseconds since a process epoch on every target (no
/// wrap for 584 years), and the period start is stored rather than a
/// deadline, so a huge timeout never pins a deadline: setting the timeout
/// back takes effect at the next check.
pub(crate) fn fairness_due(snode: &Snode, now: u64) -> bool {
    #[cfg(numa_loom)]
    if crate::sync::loom_fairness_due() {
        return true;
    }
    // Relaxed: the field is only accessed under the same queue lock.
    let since = snode.hot.fair_since_ns.load(Ordering::Relaxed);
    let period = crate::config::fairness_period_ns();
    // `now >= since` up to the clock reads racing outside the queue lock; a
    // period that seems negative is simply not over.
    let due = since != 0 && now.saturating_sub(since) >= period;
    if since == 0 || due {
        // Relaxed: as above.
        snode.hot.fair_since_ns.store(now, Ordering::Relaxed);
    }
    due
}

/// Whether `snode`'s parked waiters may be owed their fairness hand-off at
/// `now`: no period started yet, or the current one is over. A racy read
/// outside the queue lock, for the unlock's choice between running heads and
/// parked waiters; [`fairness_due`] decides under the lock.
pub(crate) fn fairness_hint(snode: &Snode, now: u64) -> bool {
    #[cfg(numa_loom)]
    if crate::sync::loom_fairness_due() {
        return true;
    }
    // Relaxed: a hint.
    let since = snode.hot.fair_since_ns.load(Ordering::Relaxed);
    since == 0 || now.saturating_sub(since) >= crate::config::fairness_period_ns()
}
