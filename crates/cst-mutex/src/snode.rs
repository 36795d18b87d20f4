//! Per-node snodes and the lazily built list that holds them.
//!
//! CST (Kashyap, Min, Kim, USENIX ATC 2017, section 4) gives every lock one
//! "snode" per NUMA node that has contended on it. An snode is allocated the
//! first time a thread of its node has to wait, is pushed onto a lock-free
//! singly linked list whose head lives in the lock, and stays there until the
//! lock is dropped. A lock that is never contended allocates nothing.
//!
//! The list order (newest first) is the *global order among snodes*: the
//! unlocker moves the lock to the next snode in this cyclic order that has
//! waiters (see `RawMutex::unlock_slow`).
//!
//! Layout: three cache-line groups (see [`Snode`]): the read-mostly identity,
//! the hot waiting counters, the reader counter; 384 bytes on x86-64 (128-byte
//! `CachePadded` groups), 192 bytes where lines are 64 bytes and not paired.

use crate::queue::SnodeQueue;
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;
use std::ptr;

/// One NUMA node's share of a contended lock.
///
/// Parked waiters of the node park on the snode's address (key
/// [`Snode::park_key`]); the counters in [`Snode::hot`] are kept under that
/// parking queue's lock (`parked`, `fair_since_ns`) or by the lock holder
/// (`batch`).
///
/// Three cache-line groups (`CachePadded`: 128 bytes on x86-64, where the
/// adjacent-line prefetcher pairs 64-byte lines): the read-mostly identity
/// (`node`, `next`) that every unlock's walk reads, the hot waiting counters,
/// and the reader counter of a `RawRwLock`. A write to a counter then never
/// invalidates the line other unlockers walk, nor the readers' line.
#[repr(C)]
pub(crate) struct Snode {
    /// The NUMA node (OS index) of this snode. Immutable.
    pub(crate) node: usize,
    /// Next snode in the lock's list (older). Immutable once published.
    pub(crate) next: *mut Snode,
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
    /// Waiters in the node's queue, head included (a hint: new waiters stop
    /// queueing while the queue and the parked waiters are as many as the
    /// machine's CPUs).
    pub(crate) queued: AtomicUsize,
}

/// The per-node reader counter (on its own line, see [`Snode::readers`]).
pub(crate) struct ReaderLine {
    /// Readers of this node inside the lock (registered on this counter).
    pub(crate) count: AtomicUsize,
}

impl Snode {
    fn new(node: usize, next: *mut Snode) -> Self {
        Snode {
            node,
            next,
            hot: CachePadded::new(Hot {
                parked: AtomicUsize::new(0),
                batch: AtomicU32::new(0),
                fair_since_ns: AtomicU64::new(0),
                queue: SnodeQueue::new(),
                queued: AtomicUsize::new(0),
            }),
            readers: CachePadded::new(ReaderLine {
                count: AtomicUsize::new(0),
            }),
            #[cfg(feature = "stats")]
            stats: CachePadded::new(crate::stats::SnodeStats::new()),
        }
    }

    /// The parking-lot key of this node's waiting queue.
    #[inline]
    pub(crate) fn park_key(&self) -> usize {
        self as *const Snode as usize
    }
}

/// The head of a lock's snode list (one pointer, null until the first
/// contention).
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

    /// The first snode (newest), or `None` if the lock never contended.
    #[inline]
    pub(crate) fn first(&self) -> Option<&Snode> {
        // SAFETY: published snodes are fully initialised (Release/Acquire on
        // `head`) and live until `self` is dropped, which cannot happen while
        // `&self` is borrowed.
        unsafe { self.head.load(Ordering::Acquire).as_ref() }
    }

    /// Iterates over the snodes, newest first.
    #[inline]
    pub(crate) fn iter(&self) -> Iter<'_> {
        Iter { cur: self.first() }
    }

    /// The snode of `node`, if one exists.
    #[inline]
    pub(crate) fn find(&self, node: usize) -> Option<&Snode> {
        self.iter().find(|s| s.node == node)
    }

    /// The snode of `node`, allocating and publishing it if none exists.
    ///
    /// Two threads of one node may race here: both allocate, one CAS wins,
    /// the loser finds the winner's snode on its retry and frees its own.
    pub(crate) fn get_or_insert(&self, node: usize) -> &Snode {
        let mut head = self.head.load(Ordering::Acquire);
        let mut fresh: *mut Snode = ptr::null_mut();
        loop {
            // SAFETY: `head` was loaded with Acquire from the list; snodes are
            // immutable in `node`/`next` once published and live as long as `self`.
            let mut cur = unsafe { head.as_ref() };
            while let Some(s) = cur {
                if s.node == node {
                    if !fresh.is_null() {
                        // SAFETY: `fresh` came from `Box::into_raw` below and
                        // was never published (every CAS with it failed).
                        drop(unsafe { Box::from_raw(fresh) });
                    }
                    return s;
                }
                // SAFETY: as above, `next` of a published snode is published.
                cur = unsafe { s.next.as_ref() };
            }
            if fresh.is_null() {
                fresh = Box::into_raw(Box::new(Snode::new(node, head)));
            } else {
                // SAFETY: `fresh` is ours and unpublished.
                unsafe { (*fresh).next = head };
            }
            // Release on success: publishes the fresh snode (and, through the
            // release sequence of earlier publications, the older ones). Not
            // AcqRel: success means the head still is `head`, which we read
            // with Acquire (above or from a failed CAS) from the same
            // publication, since snodes are never unlinked or freed while the
            // list is shared and so a head value never comes back. Acquire on
            // failure: we walk the list from the new head and return its
            // snodes.
            match self
                .head
                .compare_exchange(head, fresh, Ordering::Release, Ordering::Acquire)
            {
                // SAFETY: `fresh` is now published and lives as long as `self`.
                Ok(_) => return unsafe { &*fresh },
                Err(h) => head = h,
            }
        }
    }

    /// The snode after `s` in the cyclic global order.
    #[inline]
    pub(crate) fn next_cyclic<'a>(&'a self, s: &'a Snode) -> Option<&'a Snode> {
        // SAFETY: `next` of a published snode is published and lives as long as `self`.
        unsafe { s.next.as_ref() }.or_else(|| self.first())
    }

    /// Number of snodes (for tests and the memory-cost accounting).
    pub(crate) fn len(&self) -> usize {
        self.iter().count()
    }
}

impl Drop for SnodeList {
    fn drop(&mut self) {
        #[cfg(any(not(numa_loom), numa_shuttle))]
        let mut cur = *self.head.get_mut();
        // loom's atomics have no `get_mut`.
        #[cfg(all(numa_loom, not(numa_shuttle)))]
        let mut cur = self.head.with_mut(|p| *p);
        while !cur.is_null() {
            // SAFETY: `&mut self` means no thread uses the lock any more; every
            // snode came from `Box::into_raw` and is freed exactly once here.
            let b = unsafe { Box::from_raw(cur) };
            cur = b.next;
        }
    }
}

/// Iterator over an snode list.
pub(crate) struct Iter<'a> {
    cur: Option<&'a Snode>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Snode;
    #[inline]
    fn next(&mut self) -> Option<&'a Snode> {
        let s = self.cur?;
        // SAFETY: `next` of a published snode is published and outlives `'a`.
        self.cur = unsafe { s.next.as_ref() };
        Some(s)
    }
}

// SAFETY: the raw `next` pointers are immutable after publication and the
// snodes are only freed with `&mut SnodeList`; all shared state is atomic.
unsafe impl Send for SnodeList {}
// SAFETY: as above.
unsafe impl Sync for SnodeList {}
