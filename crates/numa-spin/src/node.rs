//! Queue nodes: one per thread, in a global registry, named by a 30-bit code.
//!
//! # Why per-thread nodes in a registry
//!
//! The lock word must stay at 8 bytes, so its tail cannot hold a 64-bit pointer.
//! Like the kernel's qspinlock, which encodes `(cpu, nesting index)` in the tail
//! and keeps 4 MCS nodes per CPU, this crate gives every thread that ever has to
//! wait a *slot* in a process-wide registry of queue nodes and stores `slot + 1`
//! (the node's *code*, 0 = none) in the tail and in the nodes' `next` links.
//!
//! One node per thread suffices: a thread uses its node only while it is inside the
//! slow path of `lock()` on one lock, and the slow path runs no user code, so a
//! thread never waits on two locks at once. (The holder is not in the queue: a
//! thread holding lock A and waiting for lock B has its node in B's queue only.)
//!
//! **Not async-signal-safe.** A signal handler that takes *any* numa-spin lock while
//! the interrupted thread waits in a `lock()` reuses the thread's node while it is
//! still linked into the first lock's queue, which corrupts that queue (and can
//! hang or break the exclusion of both locks, not only of the lock waited for).
//! Do not take these locks in signal handlers, as with `std` and `parking_lot`
//! locks.
//!
//! Nodes are never freed: the registry only grows (in segments of 32, 64, 128, ...
//! slots of 128 bytes each, a `CachePadded` node), so a code always names valid
//! memory. A thread takes a slot on its first contended `lock()` and keeps it
//! until it exits; its thread-local destructor returns the slot to a free list,
//! and the next thread that needs one recycles it. So the registry's size is the
//! peak number of live threads that have ever contended (on any numa-spin lock),
//! not the peak number of simultaneous waiters. A thread whose thread-locals are already destroyed
//! (a `lock()` from a thread-local destructor) borrows a node from the free list
//! for that one acquisition and returns it once it holds the lock (its node is in no
//! queue by then), so it waits in the queue like everyone else. Only if 2^30 - 1
//! codes are taken, or the system allocator fails, does `current()` return `None`;
//! the lock then falls back to waiting without a queue node (see
//! `lock_unqueued`).
//!
//! The registry is lock-free and never calls the `#[global_allocator]` (segments
//! come from [`std::alloc::System`]), so a numa-spin lock can be the lock *inside*
//! a global allocator: registering a thread on its first contended `lock()` cannot
//! re-enter the allocator. It uses `std` atomics even under loom: it is
//! registration, not the modelled algorithm. Under loom the registry is a
//! per-execution `loom::lazy_static!` so nodes (holding loom atomics) never outlive
//! the execution that made them.

use crate::sync::{AtomicU32, Ordering, UnsafeCell, thread_local};
use crossbeam_utils::CachePadded;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU32 as AtomicU32Std, AtomicU64, Ordering as StdOrdering};

/// The hand-off state a queue head carries and passes to the next head: the NUMA
/// preference and the secondary queue (CNA's "encoded secondary tail" in the
/// successor's `locked` field, here in plain cells of the successor's node).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeadState {
    /// The preferred NUMA node (meaningful while the secondary queue is non-empty;
    /// otherwise each head prefers its own node).
    pub(crate) pref: u32,
    /// Code of the first node of the secondary queue, 0 = empty.
    pub(crate) sec_head: u32,
    /// Code of the last node of the secondary queue (its `next` is always 0).
    pub(crate) sec_tail: u32,
    /// When the secondary queue became non-empty (ns, [`crate::sync::now_ns`]).
    pub(crate) sec_start: u64,
}

impl HeadState {
    /// No secondary queue; the receiver prefers its own node.
    pub(crate) const EMPTY: HeadState = HeadState {
        pref: 0,
        sec_head: 0,
        sec_tail: 0,
        sec_start: 0,
    };
}

/// `QNode::locked`: still waiting for head-ship.
pub(crate) const WAIT: u32 = 0;
/// `QNode::locked`: you are the queue head; read your `handoff` cell.
pub(crate) const HEAD: u32 = 1;
/// `QNode::locked`: you are the queue head *and* own the lock (an `unlock_fair`
/// handed it to you, the longest waiter, through the previous head).
pub(crate) const HEAD_OWNER: u32 = 2;
/// `QNode::locked`: still waiting, and parked (or about to park) on this word:
/// the head that hands head-ship over must wake the owner. Set only by the owner
/// (CAS from [`WAIT`]); replaced by [`HEAD`] or [`HEAD_OWNER`] with a swap, which
/// tells the head to wake (see `RawLock::hand_off`).
pub(crate) const PARKED: u32 = 3;

/// An MCS/CNA queue node.
#[derive(Debug)]
pub(crate) struct QNode {
    /// Code of the successor in whichever queue (main or secondary) the node is
    /// in; 0 = none yet.
    pub(crate) next: AtomicU32,
    /// [`WAIT`], [`HEAD`] or [`HEAD_OWNER`]; the owner spins on it.
    pub(crate) locked: AtomicU32,
    /// The owner's NUMA node, written by the owner before it publishes the node
    /// (enqueue) and read by queue heads while the node is queued.
    pub(crate) numa: UnsafeCell<u32>,
    /// Written by the previous head before its `Release` store to `locked`, read
    /// by the owner after its `Acquire` load of `locked`.
    pub(crate) handoff: UnsafeCell<HeadState>,
    /// The next free code while the node's code is on the registry's free list
    /// (registration, not the lock algorithm: a `std` atomic even under loom).
    free_next: AtomicU32Std,
}

// SAFETY: `QNode` is shared between threads through the registry. Its atomics are
// `Sync`; its two `UnsafeCell`s are accessed under the protocol documented on each
// field (`numa`: written only by the owner while the node is in no queue, read only
// by the queue head while it is queued, the two ordered by the enqueue's Release and
// the head-ship chain's Acquire/Release; `handoff`: written by the single queue head
// while the owner waits, read by the owner after the Release/Acquire pair on
// `locked`). The loom models check both protocols (loom's `UnsafeCell` reports
// unsynchronized accesses).
unsafe impl Sync for QNode {}
// SAFETY: all fields are plain data (atomics and cells of integers).
unsafe impl Send for QNode {}

impl QNode {
    /// A fresh node. Every field is an integer 0 (`WAIT`, `HeadState::EMPTY`),
    /// so zeroed memory is the same value (see `Registry::new_segment`).
    #[cfg_attr(not(numa_loom), allow(dead_code))]
    fn new() -> Self {
        QNode {
            next: AtomicU32::new(0),
            locked: AtomicU32::new(WAIT),
            numa: UnsafeCell::new(0),
            handoff: UnsafeCell::new(HeadState::EMPTY),
            free_next: AtomicU32Std::new(0),
        }
    }
}

/// Nodes in segment 0; segment `k` holds `SEGMENT0 << k` nodes.
const SEGMENT0: u32 = 32;
/// Enough segments for every 30-bit code.
const SEGMENTS: usize = 27;
/// Largest valid code (the tail word keeps two bits for the flags `NO_STEAL`
/// and `HEAD_ASLEEP`, see [`crate::raw_lock`]).
pub(crate) const MAX_CODE: u32 = (1 << 30) - 1;

/// The process-wide (under loom: per-execution) node registry.
///
/// Lock-free and allocation-free except for segments, which come straight from
/// [`std::alloc::System`], never from the `#[global_allocator]`: a lock used
/// *inside* the global allocator must be able to register a thread without
/// re-entering the allocator (and so itself).
pub(crate) struct Registry {
    segments: [AtomicPtr<Slot>; SEGMENTS],
    /// Codes handed out so far (the next new code is `issued + 1`).
    issued: AtomicU32Std,
    /// Free codes, a Treiber stack linked through `QNode::free_next`:
    /// `(tag << 32) | code`, 0 = empty. The tag, bumped by every pop and push,
    /// makes a stale head fail its CAS (ABA).
    free: AtomicU64,
}

/// (segment, index in segment) of `code`.
#[inline]
fn locate(code: u32) -> (usize, usize) {
    debug_assert!(code != 0 && code <= MAX_CODE);
    // slot = code - 1; shifting by SEGMENT0 makes segment boundaries powers of two.
    let x = u64::from(code - 1) + u64::from(SEGMENT0);
    let log = 63 - x.leading_zeros();
    let k = log - SEGMENT0.trailing_zeros();
    let index = x - (1u64 << log);
    (k as usize, index as usize)
}

/// A queue node on cache lines of its own: the owner spins on `locked` while
/// its neighbours' owners spin on theirs (`CachePadded`: 128 bytes on x86-64,
/// where the adjacent-line prefetcher pairs lines).
type Slot = CachePadded<QNode>;

/// The memory layout of segment `k`.
fn segment_layout(k: usize) -> Layout {
    // Cannot fail: at most 2^30 nodes of 128 bytes.
    Layout::array::<Slot>((SEGMENT0 as usize) << k).expect("segment size fits isize")
}

impl Registry {
    #[cfg(not(numa_loom))]
    const fn new() -> Self {
        Registry {
            segments: [const { AtomicPtr::new(std::ptr::null_mut()) }; SEGMENTS],
            issued: AtomicU32Std::new(0),
            free: AtomicU64::new(0),
        }
    }

    #[cfg(numa_loom)]
    fn new() -> Self {
        Registry {
            segments: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            issued: AtomicU32Std::new(0),
            free: AtomicU64::new(0),
        }
    }

    /// The node named by `code`.
    ///
    /// `code` must have been returned by [`Registry::alloc`] (callers get codes from
    /// the lock's tail or the nodes' links, which only ever hold allocated codes).
    #[inline]
    pub(crate) fn node(&self, code: u32) -> &QNode {
        let (k, index) = locate(code);
        // Acquire pairs with the Release (success) CAS in `segment`, so the
        // segment's initialization is visible (it also happens-before through the
        // chain that handed us the code; this makes it independent of that argument).
        let base = self.segments[k].load(StdOrdering::Acquire);
        assert!(
            !base.is_null(),
            "numa-spin: queue node code {code} was never allocated"
        );
        // SAFETY:
        // - `base` points to `SEGMENT0 << k` initialized slots allocated with `System`,
        //   published by `segment` before any code in segment `k` was returned by
        //   `alloc`, and never freed while `self` lives (only `Drop for Registry`
        //   frees it);
        // - `index < SEGMENT0 << k` by construction of `locate`.
        unsafe { &*base.add(index) }
    }

    /// A fresh, initialized segment `k` from the system allocator, or `None`.
    ///
    /// Outside loom the memory is zeroed (`alloc_zeroed`), which is a valid
    /// [`QNode::new`] (every field is an integer 0), so the nodes are not
    /// written here: large segments come straight from the OS as untouched
    /// pages, and each node's page is first touched by the first thread that
    /// uses one of its nodes, on that thread's NUMA node (first-touch placement).
    /// Nodes of threads on different nodes can still share a page.
    fn new_segment(layout: Layout, k: usize) -> Option<*mut Slot> {
        #[cfg(not(numa_loom))]
        {
            let _ = k;
            // SAFETY: the layout has a non-zero size (at least 32 nodes).
            let base = unsafe { System.alloc_zeroed(layout) }.cast::<Slot>();
            (!base.is_null()).then_some(base)
        }
        #[cfg(numa_loom)]
        {
            // Loom's atomics are objects of the model: build them.
            // SAFETY: the layout has a non-zero size (at least 32 nodes).
            let base = unsafe { System.alloc(layout) }.cast::<Slot>();
            if base.is_null() {
                return None;
            }
            for i in 0..(SEGMENT0 as usize) << k {
                // SAFETY: `base` is a fresh allocation of `SEGMENT0 << k` slots; `i`
                // is in bounds and the slot is uninitialized, so `write` is right.
                unsafe { base.add(i).write(CachePadded::new(QNode::new())) };
            }
            Some(base)
        }
    }

    /// Segment `k`, allocating and publishing it if no thread did yet. `None` if
    /// the system allocator is out of memory.
    fn segment(&self, k: usize) -> Option<*mut Slot> {
        let cur = self.segments[k].load(StdOrdering::Acquire);
        if !cur.is_null() {
            return Some(cur);
        }
        let layout = segment_layout(k);
        let base = Self::new_segment(layout, k)?;
        // Release on success: publishes the nodes' initialization to `node`'s
        // Acquire load. Not AcqRel: a successful CAS read null, and the only null
        // ever stored is the initial value (a segment is never unpublished while
        // the registry is shared), which no release wrote, so an Acquire there
        // would synchronize with nothing. Acquire on failure: we then use the
        // winner's segment, whose initialization must be visible.
        match self.segments[k].compare_exchange(
            std::ptr::null_mut(),
            base,
            StdOrdering::Release,
            StdOrdering::Acquire,
        ) {
            Ok(_) => Some(base),
            Err(winner) => {
                // SAFETY: our segment was never published: we own it, its nodes are
                // initialized, and it came from `System.alloc(layout)`.
                unsafe {
                    std::ptr::slice_from_raw_parts_mut(base, (SEGMENT0 as usize) << k)
                        .drop_in_place();
                    System.dealloc(base.cast(), layout);
                }
                Some(winner)
            }
        }
    }

    /// A fresh or recycled code, or `None` when all 2^30 - 1 codes are taken (or
    /// the system allocator failed). Lock-free; never calls the global allocator.
    pub(crate) fn alloc(&self) -> Option<u32> {
        if let Some(code) = self.pop_free() {
            return Some(code);
        }
        let mut issued = self.issued.load(StdOrdering::Relaxed);
        let code = loop {
            if issued >= MAX_CODE {
                return None;
            }
            // Relaxed: the counter only hands out distinct numbers; the node
            // memory is published by `segment`.
            match self.issued.compare_exchange_weak(
                issued,
                issued + 1,
                StdOrdering::Relaxed,
                StdOrdering::Relaxed,
            ) {
                Ok(_) => break issued + 1,
                Err(seen) => issued = seen,
            }
        };
        // Out of memory: the code's node does not exist; never hand it out (it
        // stays issued, the registry simply has a hole).
        self.segment(locate(code).0).map(|_| code)
    }

    /// Pops a recycled code.
    fn pop_free(&self) -> Option<u32> {
        // Acquire: pairs with the Release CAS of `free_code`, so the popped node's
        // `free_next` (written before the push) is the one we read.
        let mut head = self.free.load(StdOrdering::Acquire);
        loop {
            let code = head as u32;
            if code == 0 {
                return None;
            }
            // May be stale if another thread popped `code` meanwhile; then the tag
            // has changed and the CAS below fails.
            let next = self.node(code).free_next.load(StdOrdering::Relaxed);
            let new = (((head >> 32) + 1) << 32) | u64::from(next);
            // Acquire on both outcomes: see the load above.
            match self.free.compare_exchange_weak(
                head,
                new,
                StdOrdering::Acquire,
                StdOrdering::Acquire,
            ) {
                Ok(_) => return Some(code),
                Err(seen) => head = seen,
            }
        }
    }

    /// Returns `code` for reuse. The caller must be done with the node: it is in
    /// no queue and no other thread holds its code.
    pub(crate) fn free_code(&self, code: u32) {
        let node = self.node(code);
        let mut head = self.free.load(StdOrdering::Relaxed);
        loop {
            node.free_next.store(head as u32, StdOrdering::Relaxed);
            let new = (((head >> 32) + 1) << 32) | u64::from(code);
            // Release: publishes `free_next` (and our last use of the node) to the
            // popper's Acquire.
            match self.free.compare_exchange_weak(
                head,
                new,
                StdOrdering::Release,
                StdOrdering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) => head = seen,
            }
        }
    }

    /// Codes on the free list (tests).
    #[cfg(all(test, not(numa_loom)))]
    fn free_codes(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut code = self.free.load(StdOrdering::Acquire) as u32;
        while code != 0 {
            out.push(code);
            code = self.node(code).free_next.load(StdOrdering::Relaxed);
        }
        out
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        // Runs under loom and for the unit tests' private registries (the
        // static's destructor never runs).
        for (k, segment) in self.segments.iter_mut().enumerate() {
            let base = *segment.get_mut();
            if !base.is_null() {
                // SAFETY: `base` holds `SEGMENT0 << k` initialized nodes allocated by
                // `segment` with `System` and `segment_layout(k)`, and we have
                // exclusive access (`&mut self`).
                unsafe {
                    std::ptr::slice_from_raw_parts_mut(base, (SEGMENT0 as usize) << k)
                        .drop_in_place();
                    System.dealloc(base.cast(), segment_layout(k));
                }
            }
        }
    }
}

#[cfg(not(numa_loom))]
static REGISTRY: Registry = Registry::new();

/// The registry.
#[cfg(not(numa_loom))]
#[inline]
pub(crate) fn registry() -> &'static Registry {
    &REGISTRY
}

#[cfg(numa_loom)]
crate::sync::model::lazy_static! {
    static ref REGISTRY: Registry = Registry::new();
}

/// The registry of the current loom execution.
#[cfg(numa_loom)]
pub(crate) fn registry() -> &'static Registry {
    &REGISTRY
}

/// The calling thread's slot and its xorshift state.
struct ThreadSlot {
    /// The thread's node code, 0 = not yet allocated.
    code: Cell<u32>,
    /// xorshift32 state (never 0).
    rng: Cell<u32>,
}

impl Drop for ThreadSlot {
    fn drop(&mut self) {
        // The thread is exiting, so it is inside no `lock()`: its node is in no queue
        // and no other thread holds its code (see the module docs), so the code can
        // be recycled. Under loom the registry dies with the execution instead.
        #[cfg(not(numa_loom))]
        if self.code.get() != 0 {
            registry().free_code(self.code.get());
        }
    }
}

thread_local! {
    // Not `const { .. }`: loom's `thread_local!` (same macro name under loom) does
    // not take that form, and this is read on slow paths only.
    #[allow(clippy::missing_const_for_thread_local)]
    static THREAD_SLOT: ThreadSlot = ThreadSlot {
        code: Cell::new(0),
        rng: Cell::new(0),
    };
}

/// A queue node the calling thread may use for one `lock()`.
#[derive(Clone, Copy)]
pub(crate) struct Me {
    /// The node's code.
    pub(crate) code: u32,
    /// The node.
    pub(crate) node: &'static QNode,
    /// Borrowed for this `lock()` only (the thread's slot is gone): return it
    /// with [`Registry::free_code`] once the lock is acquired.
    pub(crate) borrowed: bool,
}

/// A queue node for the calling thread: its own slot (allocated on first use), or,
/// when its thread-locals are already destroyed (a `lock()` from a thread-local
/// destructor), a node borrowed from the registry for this one acquisition.
/// `None` only if all 2^30 - 1 codes are taken or the system allocator failed.
pub(crate) fn current() -> Option<Me> {
    let own = THREAD_SLOT.try_with(|slot| {
        if slot.code.get() == 0 {
            slot.code.set(registry().alloc()?);
        }
        Some(slot.code.get())
    });
    let (code, borrowed) = match own {
        Ok(code) => (code?, false),
        Err(_) => (registry().alloc()?, true),
    };
    Some(Me {
        code,
        node: registry().node(code),
        borrowed,
    })
}

/// Reads, before the caller initializes its queue node, everything the queued
/// wait needs from lazily initialized process state, and returns the caller's
/// NUMA node ([`crate::sync::current_node`]). Shared by CNA, the queued lock
/// and HQ, called on their slow paths after the steal attempts and before
/// [`Enqueued::begin`].
///
/// Why before: a numa-spin lock may be the lock inside the
/// `#[global_allocator]`. The first node lookup of a process builds the
/// topology's node map, which allocates and may log; the first read of the
/// process-wide tunables ([`crate::Config::global`], read by the caller
/// before this) reads the environment and may log. An allocation there
/// re-enters the same lock on the same thread. Before the queue node is
/// initialized that is harmless: the inner acquisition uses the node from
/// start to finish and the outer one then initializes it afresh. After, the
/// inner acquisition would re-initialize, enqueue and leave the node that the
/// outer one has already initialized or enqueued, and the outer one would go
/// on with a node the inner one left dirty (a head-ship value in `locked`, a
/// stale `next`): two heads, lost waiters, a hang. So from the initialization
/// of its queue node until it leaves the slow path, a slow path calls nothing
/// that can allocate, log, take another lock or initialize something lazily.
///
/// The clock's epoch ([`crate::sync::now_ns`]) and the spin calibration
/// ([`crate::backoff::ns_per_spin`]) are lazily initialized too, though
/// neither allocates nor logs; they are initialized here as well, so that
/// the queued wait only reads them.
#[inline]
pub(crate) fn before_enqueue() -> u32 {
    crate::backoff::ns_per_spin();
    crate::sync::start_clock();
    crate::sync::current_node()
}

/// The stretch of a slow path from the initialization of the calling thread's
/// queue node to the end of the slow path (from [`Enqueued::begin`] until the
/// value is dropped), in which nothing may read lazily initialized process
/// state (see [`before_enqueue`]). In this crate's unit tests the reads that
/// can allocate or log ([`lazy_read`]) count the calls made inside it on the
/// calling thread (`tests::lazy_reads_while_enqueued`); elsewhere it is
/// nothing.
pub(crate) struct Enqueued(());

impl Enqueued {
    /// The calling thread is about to initialize its queue node.
    #[inline(always)]
    pub(crate) fn begin() -> Self {
        #[cfg(all(test, not(numa_loom)))]
        tests::enqueued_by(1);
        Enqueued(())
    }
}

impl Drop for Enqueued {
    #[inline(always)]
    fn drop(&mut self) {
        #[cfg(all(test, not(numa_loom)))]
        tests::enqueued_by(-1);
    }
}

/// Called by the reads of lazily initialized process state that can allocate,
/// log or wait (the node lookup, the process-wide tunables); in this crate's
/// unit tests, counts a call made inside an [`Enqueued`] stretch.
#[inline(always)]
pub(crate) fn lazy_read() {
    #[cfg(all(test, not(numa_loom)))]
    tests::note_lazy_read();
}

/// Waits until `word` (a queue node's `locked`, or an HQ node queue's `gwait`)
/// holds neither [`WAIT`] nor [`PARKED`], and returns the value read (with
/// Acquire). The waiter's side of every hand-off of this crate (CNA's head-ship,
/// HQ's local and remote hand-offs); [`signal`] is the other side.
///
/// Spins for the spin budget, then, with [`WaitPolicy::Park`], parks on the word
/// (paravirt qspinlock's `pv_wait_node`): the waiter announces it by turning
/// `WAIT` into `PARKED`, and [`signal`] swaps the word and wakes it if it saw
/// `PARKED` (`pv_kick`). A waiter far from the head then leaves its CPU to the
/// threads that can make progress instead of yielding it back and forth (seed
/// 001: on an oversubscribed or virtualized machine a spinning waiter burns the
/// time slice its predecessor needs). With [`WaitPolicy::Yield`] it yields.
///
/// [`WaitPolicy::Park`]: crate::WaitPolicy::Park
/// [`WaitPolicy::Yield`]: crate::WaitPolicy::Yield
#[cfg_attr(numa_loom, track_caller)]
pub(crate) fn wait_signal(word: &AtomicU32, cfg: &crate::Config) -> u32 {
    let park = cfg.wait_policy == crate::WaitPolicy::Park;
    let mut spin = crate::backoff::SpinWait::new(cfg.spin_budget_ns);
    loop {
        // Acquire: pairs with the Release swap in `signal`, making everything the
        // signalling thread did before it (hand-off cells, queue links it
        // rewrote, for a hand-over of the lock its critical section) visible.
        let v = word.load(Ordering::Acquire);
        if v != WAIT && v != PARKED {
            return v;
        }
        if park && spin.is_yielding() {
            // Relaxed: the CAS only announces that we sleep; the signaller's swap
            // then sees PARKED (or we see its value and do not sleep). What we
            // wait for is read by the Acquire load above.
            if v == PARKED
                || word
                    .compare_exchange(WAIT, PARKED, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                // Returns at once if the word is no longer PARKED (the swap came
                // first), on a wake-up, or spuriously; the loop re-checks.
                crate::sync::park(word, PARKED);
            }
            continue;
        }
        spin.snooze();
    }
}

/// Stores `value` (not [`WAIT`] nor [`PARKED`]) into a word a thread waits on in
/// [`wait_signal`], waking it if it parked.
///
/// A swap with Release: publishes everything the caller did before (the Acquire
/// load in `wait_signal` pairs with it). After the swap the word's owner may
/// reuse it at once; the wake-up only names its address, which stays valid
/// (queue nodes and HQ metadata are never freed), and a stray wake-up of a later
/// wait on the same word is a spurious one, which `wait_signal` tolerates.
pub(crate) fn signal(word: &AtomicU32, value: u32) {
    signal_then(word, value, || {});
}

/// [`signal`], running `before_wake` between the swap and the wake-up when the
/// waiter had parked (CNA marks the new queue head asleep there, before it can
/// run).
pub(crate) fn signal_then(word: &AtomicU32, value: u32, before_wake: impl FnOnce()) {
    debug_assert!(value != WAIT && value != PARKED);
    if word.swap(value, Ordering::Release) == PARKED {
        before_wake();
        crate::sync::unpark_one(word);
    }
}

/// How long a queue head (CNA's, the queued lock's, HQ's global head) sleeps at a time once its spin budget is spent, with
/// [`WaitPolicy::Park`], instead of yielding (20 us; with Linux's default timer
/// slack a sleep lasts about 70 us).
///
/// A timed sleep rather than a park: nobody has to wake the head, so the release
/// stays one store. (Paravirt qspinlock parks the head, `pv_wait_head_or_lock`,
/// and pays with a cmpxchg unlock; here a release that reads the lock word
/// before its store, as a wake-up check needs, cost 15-30% of the throughput
/// of two threads contending on two CPUs.) While the head sleeps,
/// lock stealing is allowed (`NO_STEAL` is cleared before), so a free lock waits
/// for nobody; the sleep bounds how long the head itself is away. Measured on
/// the 2-CPU development machine, `numa-bench run --lock cna --workload
/// locktorture --threads 2 --hog 1 --virtual-nodes 2`, 5 interleaved repeats:
/// CNA/parking_lot 0.99 (0.88-1.00) with 20 us sleeps, 0.99 (0.94-1.01) with
/// 100 us, against 0.79 (0.69-0.97) yielding; a yielding head keeps handing its
/// CPU's time to the CPU-bound thread and taking it back. Without the hog, and
/// at 32 threads with it, the three were within the spread.
pub(crate) const HEAD_NAP_NS: u64 = 20_000;

/// While the queue head is not running (the lock's `HEAD_ASLEEP` bit in
/// `tail`, see [`crate::raw_lock`]: the head naps, or it was parked when
/// head-ship reached it and has not run since), spins for the lock word with
/// `try_steal` instead of queueing, for at most the spin budget; returns
/// whether it took the lock. Shared by CNA, the queued lock and HQ.
///
/// A waiter queued behind a head that is not running cannot take the lock
/// even when it is free, and, once parked itself, is woken only when it
/// becomes head: on an oversubscribed machine running threads that arrive
/// while the lock is held would otherwise queue up behind sleeping heads
/// until every CPU idles but the holder's (a lock convoy; measured on the
/// 2-CPU development machine, `numa-bench run --workload locktorture
/// --threads 16 --cs 100ns --delay 2us`: CNA at 0.52x parking_lot and HQ at
/// 0.55x, LevelDB readrandom through numa-preload at 0.65-0.8x glibc).
/// Spinning arrivals keep the lock busy instead, as barging waiters do in
/// glibc's and parking_lot's mutexes, while the queue holds the threads that
/// have spent their budget (Dice, "Malthusian Locks", EuroSys 2017: a small
/// active set circulates, the rest stay parked). The head's steal bound
/// (`NO_STEAL`) still applies once it runs. While the head runs, arrivals
/// queue at once, so a machine with a CPU per thread keeps local spinning.
///
/// Only while stealing is allowed: with `NO_STEAL` set every `try_steal`
/// fails, so the spin would only burn the budget before the arrival queues
/// anyway. In strict FIFO (`steal_bound_ns == 0`) the flag is set from the
/// first enqueue until the queue is empty, so arrivals never spin here.
/// Otherwise the flag does not stop the spin: a head lifts it before it naps,
/// and a head that was parked when head-ship reached it has not set it yet.
pub(crate) fn steal_while_head_asleep(
    tail: &AtomicU32,
    cfg: &crate::Config,
    mut try_steal: impl FnMut() -> bool,
) -> bool {
    use crate::raw_lock::{HEAD_ASLEEP, NO_STEAL};
    let mut spin = crate::backoff::SpinWait::new(cfg.spin_budget_ns);
    // Relaxed: hints; `try_steal`'s CAS acquires.
    while tail.load(Ordering::Relaxed) & (HEAD_ASLEEP | NO_STEAL) == HEAD_ASLEEP
        && !spin.is_yielding()
    {
        #[cfg(all(test, not(numa_loom)))]
        tests::note_asleep_spin();
        spin.snooze();
        if try_steal() {
            return true;
        }
    }
    false
}

/// How much longer than the steal bound an arrival waits for a head that
/// forbade stealing and naps (`NO_STEAL` and `HEAD_ASLEEP` both set) before it
/// takes the free lock past the mark, ns: five naps of [`HEAD_NAP_NS`], which
/// covers one nap with Linux's default timer slack (50 us) and a wake-up delay.
pub(crate) const NAPPING_HEAD_PATIENCE_NS: u64 = 5 * HEAD_NAP_NS;

/// While the queue head forbids stealing (`NO_STEAL`) but the lock word
/// `locked` is free, watches the word for the steal bound (plus
/// [`NAPPING_HEAD_PATIENCE_NS`] while the head naps); if it is free at every
/// look, takes the lock past the mark (CAS `UNLOCKED` -> `LOCKED`) and
/// returns true. A free word without the mark (stealing is allowed) is tried
/// at once. Returns false when the word is held (or `HANDED`), at the first
/// look or any later one, and when the CAS loses; the caller then queues.
/// Shared by CNA, the queued lock and HQ.
///
/// The head sets `NO_STEAL` once it has waited the steal bound and keeps it
/// until it holds the lock ([`HeadWait`]), but a head preempted while it spins
/// cannot take the lock: it then stays free behind a mark no running thread
/// may pass, and every arrival queues and parks behind the absent head until
/// the scheduler runs it again, a whole time slice (what paravirt qspinlock's
/// hybrid mode, Linux `qspinlock_paravirt.h`, avoids by letting waiters steal
/// whenever the head is not running). A running head looks at the word at
/// least every batch of spin hints (~400 ns, see `crate::backoff`) and takes a
/// free lock at once, so a word seen free throughout the bound (10 us by
/// default, 25 times the poll interval) means the head is away. A napping head
/// (it marks each nap `HEAD_ASLEEP`) looks again when its nap ends, so it gets
/// the patience of a nap on top. A wrong guess costs the head one critical
/// section: it takes the next release, which nobody else may take.
///
/// Only with a finite nonzero bound: strict FIFO (`steal_bound_ns == 0`)
/// keeps the mark set for the whole queue by request, and with no bound
/// (`u64::MAX`) the mark is never set.
pub(crate) fn steal_past_absent_head(
    tail: &AtomicU32,
    locked: &AtomicU32,
    cfg: &crate::Config,
) -> bool {
    use crate::raw_lock::{HEAD_ASLEEP, NO_STEAL, UNLOCKED};
    let bound = cfg.steal_bound_ns;
    if bound == 0 || bound == u64::MAX {
        return false;
    }
    let mut spin = crate::backoff::SpinWait::new(bound);
    let mut started = None;
    loop {
        // Relaxed: both are hints that only pick the moment to try; the CAS
        // acquires.
        if locked.load(Ordering::Relaxed) != UNLOCKED {
            return false;
        }
        let flags = tail.load(Ordering::Relaxed);
        let forbidden = flags & NO_STEAL != 0;
        let patience = if flags & HEAD_ASLEEP != 0 {
            bound.saturating_add(NAPPING_HEAD_PATIENCE_NS)
        } else {
            bound
        };
        let now = crate::sync::now_ns();
        let since = *started.get_or_insert(now);
        if !forbidden || now.saturating_sub(since) >= patience {
            if forbidden {
                crate::sync::event("steal-past-absent-head");
            }
            return take_free_word(locked);
        }
        spin.snooze();
    }
}

/// Takes the lock word if it is free (CAS `UNLOCKED` -> `LOCKED`), whatever
/// `NO_STEAL` says: for the threads the mark lets through (an arrival that
/// found the head absent, a timed waiter past its own bound, see
/// `crate::timed`).
pub(crate) fn take_free_word(locked: &AtomicU32) -> bool {
    use crate::raw_lock::{LOCKED, UNLOCKED};
    // Acquire on success: pairs with the Release store of the unlock that
    // made the word UNLOCKED. Relaxed on failure: nothing acquired.
    locked
        .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

/// The queue head's wait for the lock word, shared by CNA's (and the queued
/// lock's) queue head and HQ's global head: everything but the acquisition
/// attempts themselves, which differ per lock. `tail` is the lock's tail word
/// with the flags of [`crate::raw_lock`].
///
/// - **Bounded stealing** (`NO_STEAL`): once the head has waited
///   [`Config::steal_bound_ns`](crate::Config::steal_bound_ns) while the lock
///   was held, it forbids stealing, and keeps the mark until it holds the lock,
///   through its naps and yields: past its bound the next release is the
///   head's. A head preempted while it spins, or woken late from a nap, leaves
///   a free lock behind the mark; arrivals take it once they have seen it free
///   for long enough ([`steal_past_absent_head`]).
/// - **Naps** with [`WaitPolicy::Park`](crate::WaitPolicy::Park): once its
///   spin budget is spent the head sleeps [`HEAD_NAP_NS`] at a time, marking
///   the lock `HEAD_ASLEEP` for the length of each nap. Before the steal bound
///   arrivals take a free lock meanwhile rather than queue behind the head
///   ([`steal_while_head_asleep`]); past it they leave the lock to the head,
///   which takes it when the nap ends. With `Yield` the head yields.
/// - **Lifting the mark**: at the start (the hand-off that woke the head may
///   have marked it), after each nap, and once the head holds the lock (a
///   hand-off's mark that landed after the first check: the hand-off marks
///   after its swap, which the head may see before the wake-up), together
///   with `NO_STEAL` in one read-modify-write.
///
/// So a head's wait is at most the steal bound, plus the critical sections of
/// the threads that took the lock before the mark was seen (one per running
/// thread: each has at most one steal in flight), plus the critical section in
/// progress, plus one nap (about 70 us with Linux's default timer slack) or
/// yield, plus any time the head is off its CPU; see `RawLock`'s fairness
/// docs.
///
/// Every access is Relaxed: both flags are hints; the lock word's CAS carries
/// the synchronization.
pub(crate) struct HeadWait<'a> {
    tail: &'a AtomicU32,
    /// `steal_bound_ns`, and whether it is a finite nonzero bound.
    bound: u64,
    timed: bool,
    /// When the wait started, ns (only when `timed`).
    started: u64,
    /// Whether we set NO_STEAL.
    forbade: bool,
    park: bool,
    /// The loom event counted when we mark ourselves asleep.
    nap_event: &'static str,
    spin: crate::backoff::SpinWait,
}

impl<'a> HeadWait<'a> {
    /// Starts the head's wait; we run now, so lifts the mark of the hand-off
    /// that woke us.
    pub(crate) fn start(tail: &'a AtomicU32, cfg: &crate::Config, nap_event: &'static str) -> Self {
        let bound = cfg.steal_bound_ns;
        let timed = bound != 0 && bound != u64::MAX;
        lift_head_asleep(tail);
        HeadWait {
            tail,
            bound,
            timed,
            started: if timed { crate::sync::now_ns() } else { 0 },
            forbade: false,
            park: cfg.wait_policy == crate::WaitPolicy::Park,
            nap_event,
            spin: crate::backoff::SpinWait::new(cfg.spin_budget_ns),
        }
    }

    /// The lock was seen held: forbid stealing once the steal bound has passed.
    pub(crate) fn held(&mut self) {
        use crate::raw_lock::NO_STEAL;
        if self.timed
            && !self.forbade
            && crate::sync::now_ns().saturating_sub(self.started) >= self.bound
        {
            // Relaxed: a fairness hint (see `RawLock::try_steal`).
            self.tail.fetch_or(NO_STEAL, Ordering::Relaxed);
            self.forbade = true;
        }
    }

    /// Waits before the next look at the lock word: spins, then naps (marking
    /// the lock `HEAD_ASLEEP` for the nap) or yields. `NO_STEAL` stays as it
    /// is: past the bound the next release is ours even while we sleep.
    pub(crate) fn pause(&mut self) {
        use crate::raw_lock::HEAD_ASLEEP;
        if self.park && self.spin.is_yielding() {
            let hints = crate::sync::head_asleep_hints();
            if hints {
                // About to sleep: before the bound arrivals should take a free
                // lock rather than queue behind us; past it they should know we
                // come back within a nap. Relaxed: a hint.
                self.tail.fetch_or(HEAD_ASLEEP, Ordering::Relaxed);
                crate::sync::event(self.nap_event);
            }
            self.spin.nap(HEAD_NAP_NS);
            if hints {
                // We run again. Relaxed: a hint.
                self.tail.fetch_and(!HEAD_ASLEEP, Ordering::Relaxed);
            }
        } else {
            self.spin.snooze();
        }
    }

    /// We hold the lock: lets stealers in again (until the next head's
    /// bound) and lifts `HEAD_ASLEEP`, in one read-modify-write. With a finite
    /// nonzero bound `NO_STEAL` is lifted whoever set it (we, or a timed
    /// waiter that left it behind while we were queued: `crate::timed`); a
    /// timed waiter still waiting sets it again. Strict FIFO keeps it. The
    /// load reads the line of the lock word the caller has just written.
    pub(crate) fn acquired(self) {
        use crate::raw_lock::{HEAD_ASLEEP, NO_STEAL};
        let flags = self.tail.load(Ordering::Relaxed);
        let mut lift = if self.forbade || (self.timed && flags & NO_STEAL != 0) {
            NO_STEAL
        } else {
            0
        };
        if crate::sync::head_asleep_hints() && flags & HEAD_ASLEEP != 0 {
            lift |= HEAD_ASLEEP;
        }
        if lift != 0 {
            self.tail.fetch_and(!lift, Ordering::Relaxed);
        }
    }
}

/// Lifts `HEAD_ASLEEP` in `tail` if it is set (Relaxed: a hint).
pub(crate) fn lift_head_asleep(tail: &AtomicU32) {
    use crate::raw_lock::HEAD_ASLEEP;
    if crate::sync::head_asleep_hints() && tail.load(Ordering::Relaxed) & HEAD_ASLEEP != 0 {
        tail.fetch_and(!HEAD_ASLEEP, Ordering::Relaxed);
    }
}

/// Passes head-ship: [`signal`]s `value` into `word`, on which the next queue
/// head waits (CNA's queue node, HQ's queue node, node-queue `gwait` or gate),
/// and, if that waiter had parked, marks the lock `HEAD_ASLEEP` in `tail`
/// between the swap and the wake-up: the new head runs only once the wake-up
/// completes, so arrivals should take the lock meanwhile rather than queue
/// behind it ([`steal_while_head_asleep`]). `event` is the loom event counted
/// for the mark.
///
/// Called only by the lock holder. Relaxed: a hint. The holder's RMW
/// happens-before the new head's acquisition, and so before any CAS of that
/// head that empties the queue (which therefore cannot fail on this flag; it
/// can fail on a timed waiter's `NO_STEAL`, and is retried then);
/// after its acquisition the head looks for the mark and lifts it
/// ([`HeadWait::acquired`]). A new head that saw the swap before it slept can
/// run its check at start before this RMW; that second look catches it.
pub(crate) fn pass_head_ship(tail: &AtomicU32, word: &AtomicU32, value: u32, event: &'static str) {
    signal_then(word, value, || {
        if crate::sync::head_asleep_hints() {
            tail.fetch_or(crate::raw_lock::HEAD_ASLEEP, Ordering::Relaxed);
            crate::sync::event(event);
        }
    });
}

/// Waits until the link `word` (a queue node's `next`, an HQ node queue's
/// `gnext`) is set by a thread that already swapped itself into the matching
/// tail, and returns it (read with Acquire: pairs with the Release store of the
/// link, so the linked node's initialization is visible).
#[cfg_attr(numa_loom, track_caller)]
pub(crate) fn wait_link(word: &AtomicU32, cfg: &crate::Config) -> u32 {
    let mut spin = crate::backoff::SpinWait::new(cfg.spin_budget_ns);
    loop {
        // Acquire: see above.
        let n = word.load(Ordering::Acquire);
        if n != 0 {
            return n;
        }
        spin.snooze();
    }
}

/// The last-resort wait of a thread that cannot get a queue node (all 2^30 - 1
/// codes taken, or the system allocator out of memory), shared by CNA and HQ:
/// test-and-test-and-set on the lock word `locked` (`UNLOCKED` -> `LOCKED`,
/// see [`crate::raw_lock`]) with back-off. It ignores `NO_STEAL` (which would
/// otherwise shut it out for as long as the queue stays non-empty, forever
/// under sustained load in strict mode), so it competes with the queue head
/// for every release; correctness does not depend on the queue.
pub(crate) fn lock_unqueued(locked: &AtomicU32, cfg: &crate::Config) {
    use crate::raw_lock::{LOCKED, UNLOCKED};
    let mut spin = crate::backoff::SpinWait::new(cfg.spin_budget_ns);
    loop {
        // Relaxed: only picks the moment to try; the CAS acquires.
        if locked.load(Ordering::Relaxed) == UNLOCKED
            // Acquire on success: pairs with the Release store of the unlock
            // (`release`, `release_fair`) that made the word UNLOCKED.
            && locked
                .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return;
        }
        spin.snooze();
    }
}

/// A per-thread xorshift32 draw: true with probability `1 / one_in`.
/// (Marsaglia, "Xorshift RNGs", 2003: shifts 13, 17, 5.)
pub(crate) fn one_in(one_in: u32) -> bool {
    if one_in <= 1 {
        return true;
    }
    THREAD_SLOT
        .try_with(|slot| {
            let mut x = slot.rng.get();
            if x == 0 {
                // Seed from the slot code and the stack address: distinct per thread.
                let local = 0u8;
                x = (slot.code.get() ^ (&raw const local as usize as u32))
                    .wrapping_mul(0x9E37_79B9)
                    | 1;
            }
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            slot.rng.set(x);
            x % one_in == 0
        })
        .unwrap_or(false)
}

#[cfg(all(test, not(numa_loom)))]
pub(crate) mod tests {
    use super::*;

    std::thread_local! {
        /// [`Enqueued`] stretches the thread is in (more than 1 only if a
        /// slow path re-entered a lock inside one).
        static ENQUEUED: Cell<i32> = const { Cell::new(0) };
        /// [`Enqueued`] stretches the thread began.
        static ENQUEUES: Cell<u64> = const { Cell::new(0) };
        /// [`lazy_read`] calls the thread made inside an [`Enqueued`] stretch.
        static LAZY_READS_WHILE_ENQUEUED: Cell<u64> = const { Cell::new(0) };
        /// Waits of the thread in [`steal_while_head_asleep`]'s spin.
        static ASLEEP_SPINS: Cell<u64> = const { Cell::new(0) };
    }

    /// Enters (`1`) or leaves (`-1`) an [`Enqueued`] stretch.
    pub(crate) fn enqueued_by(delta: i32) {
        // `try_with`: a thread-local destructor may take a lock.
        let _ = ENQUEUED.try_with(|e| e.set(e.get() + delta));
        if delta > 0 {
            let _ = ENQUEUES.try_with(|n| n.set(n.get() + 1));
        }
    }

    /// See [`lazy_read`].
    pub(crate) fn note_lazy_read() {
        if ENQUEUED.try_with(Cell::get).unwrap_or(0) > 0 {
            let _ = LAZY_READS_WHILE_ENQUEUED.try_with(|n| n.set(n.get() + 1));
        }
    }

    /// Counts a wait in [`steal_while_head_asleep`]'s spin.
    pub(crate) fn note_asleep_spin() {
        let _ = ASLEEP_SPINS.try_with(|n| n.set(n.get() + 1));
    }

    /// How many [`Enqueued`] stretches (queued waits) the calling thread began.
    pub(crate) fn enqueues() -> u64 {
        ENQUEUES.with(Cell::get)
    }

    /// How many reads of lazily initialized process state the calling thread
    /// made inside an [`Enqueued`] stretch (0 in a correct slow path).
    pub(crate) fn lazy_reads_while_enqueued() -> u64 {
        LAZY_READS_WHILE_ENQUEUED.with(Cell::get)
    }

    /// How many times the calling thread waited in
    /// [`steal_while_head_asleep`]'s spin.
    pub(crate) fn asleep_spins() -> u64 {
        ASLEEP_SPINS.with(Cell::get)
    }

    /// Takes `lock` 500 times on each of 4 threads on 2 virtual nodes, each
    /// holder yielding its CPU inside so that waiters queue up on 2 CPUs;
    /// returns the queued waits ([`Enqueued`] stretches) and the reads of
    /// lazily initialized process state inside them ([`lazy_read`]), summed
    /// over the threads.
    pub(crate) fn queued_waits_and_lazy_reads<R>(lock: &R) -> (u64, u64)
    where
        R: lock_api::RawMutex + Sync,
    {
        std::thread::scope(|s| {
            let threads: Vec<_> = (0..4)
                .map(|i| {
                    s.spawn(move || {
                        numa_topology::set_current_thread_node(Some(i % 2));
                        for _ in 0..500 {
                            let guard = lock.lock();
                            std::thread::yield_now();
                            // SAFETY: `guard` is the acquisition just above.
                            unsafe { lock.unlock(guard) };
                        }
                        (enqueues(), lazy_reads_while_enqueued())
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().unwrap())
                .fold((0, 0), |(q, r), (tq, tr)| (q + tq, r + tr))
        })
    }

    #[test]
    fn locate_covers_codes_without_gaps() {
        let mut expected = (0usize, 0usize);
        for code in 1..=10_000u32 {
            assert_eq!(locate(code), expected, "code {code}");
            expected.1 += 1;
            if expected.1 == (SEGMENT0 as usize) << expected.0 {
                expected = (expected.0 + 1, 0);
            }
        }
        let (k, index) = locate(MAX_CODE);
        assert!(k < SEGMENTS);
        assert!(index < (SEGMENT0 as usize) << k);
    }

    /// Serializes the unit tests that start or end threads using queue nodes, so
    /// the free list holds what one test expects.
    pub(crate) static REGISTRY_USERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn threads_get_distinct_codes_and_exited_ones_are_recycled() {
        let _serial = REGISTRY_USERS.lock().unwrap_or_else(|e| e.into_inner());
        let mine = current().expect("slot").code;
        // Other tests' threads start (taking codes off the free list) in
        // parallel with this one, so a freed code may be taken again before we
        // look: a recycling registry shows it free in one of a few tries.
        let recycled = (0..5).any(|_| {
            let other = std::thread::spawn(|| current().expect("slot").code)
                .join()
                .unwrap();
            assert_ne!(mine, other);
            // `join` returns after the thread's thread-local destructors ran,
            // so its code is back on the free list.
            let free = registry().free_codes();
            assert!(!free.contains(&mine));
            free.contains(&other)
        });
        assert!(
            recycled,
            "an exited thread's code was never on the free list"
        );
    }

    /// A private registry: codes count up from 1, a freed code is handed out
    /// again before a new one (last freed, first reused), and every push and
    /// pop of the free list bumps its ABA tag by one.
    #[test]
    fn freed_codes_are_reused_first_and_every_free_list_change_bumps_the_tag() {
        let reg = Registry::new();
        let tag = |reg: &Registry| reg.free.load(StdOrdering::SeqCst) >> 32;
        assert_eq!([reg.alloc(), reg.alloc()], [Some(1), Some(2)]);
        reg.free_code(1);
        assert_eq!(reg.alloc(), Some(1), "a freed code was not reused");
        assert_eq!(reg.alloc(), Some(3));
        reg.free_code(2);
        reg.free_code(1);
        assert_eq!(reg.free_codes(), [1, 2]);
        assert_eq!(
            [reg.alloc(), reg.alloc(), reg.alloc()],
            [Some(1), Some(2), Some(4)]
        );
        // Three pushes and three pops.
        assert_eq!(tag(&reg), 6);
    }

    /// Segment `k` holds `SEGMENT0 << k` nodes, and a private registry's
    /// first three segments hold codes 1-224, each its own node.
    #[test]
    fn segments_double_and_hold_every_code() {
        for k in 0..4 {
            let slots = (SEGMENT0 as usize) << k;
            assert_eq!(
                segment_layout(k).size(),
                slots * std::mem::size_of::<Slot>()
            );
        }
        let reg = Registry::new();
        let codes: Vec<u32> = (0..224).map(|_| reg.alloc().expect("code")).collect();
        assert_eq!(codes, (1..=224).collect::<Vec<u32>>());
        for &c in &codes {
            reg.node(c).next.store(c, StdOrdering::Relaxed);
        }
        for &c in &codes {
            assert_eq!(
                reg.node(c).next.load(StdOrdering::Relaxed),
                c,
                "nodes overlap"
            );
        }
    }

    /// `Registry::new_segment` relies on zeroed memory being `QNode::new()`.
    #[test]
    fn zeroed_slot_is_a_fresh_node() {
        let layout = Layout::new::<Slot>();
        // SAFETY: non-zero size.
        let p = unsafe { System.alloc_zeroed(layout) }.cast::<Slot>();
        assert!(!p.is_null());
        // SAFETY: zeroed memory is a valid bit pattern for every field (integers
        // and atomics of integers); we only read it.
        let zeroed: &QNode = unsafe { &*p };
        let fresh = QNode::new();
        assert_eq!(
            zeroed.next.load(StdOrdering::Relaxed),
            fresh.next.load(StdOrdering::Relaxed)
        );
        assert_eq!(zeroed.locked.load(StdOrdering::Relaxed), WAIT);
        // SAFETY: no other thread has the node.
        assert_eq!(zeroed.numa.with(|n| unsafe { *n }), 0);
        // SAFETY: as above.
        assert_eq!(zeroed.handoff.with(|h| unsafe { *h }), HeadState::EMPTY);
        assert_eq!(zeroed.free_next.load(StdOrdering::Relaxed), 0);
        assert_eq!(std::mem::align_of::<Slot>() % 64, 0);
        // SAFETY: allocated above with `layout`.
        unsafe { System.dealloc(p.cast(), layout) };
    }

    /// The last-resort wait takes a free lock word at once and a held one
    /// after its release, leaving it `LOCKED` both times.
    #[test]
    fn unqueued_wait_takes_the_word() {
        use crate::raw_lock::{LOCKED, UNLOCKED};
        static WORD: AtomicU32 = AtomicU32::new(UNLOCKED);
        let cfg = crate::Config::DEFAULT;
        for held in [false, true] {
            WORD.store(if held { LOCKED } else { UNLOCKED }, StdOrdering::SeqCst);
            let (done_tx, done) = std::sync::mpsc::channel();
            let waiter = std::thread::spawn(move || {
                lock_unqueued(&WORD, &cfg);
                done_tx.send(()).unwrap();
            });
            if held {
                std::thread::sleep(std::time::Duration::from_millis(20));
                assert!(done.try_recv().is_err(), "took a held word");
                assert_eq!(WORD.load(StdOrdering::SeqCst), LOCKED);
                WORD.store(UNLOCKED, StdOrdering::SeqCst);
            }
            let took = done.recv_timeout(std::time::Duration::from_secs(10));
            assert!(
                took.is_ok(),
                "never took the free word (held before: {held})"
            );
            waiter.join().unwrap();
            assert_eq!(
                WORD.load(StdOrdering::SeqCst),
                LOCKED,
                "returned without the word"
            );
        }
    }

    #[test]
    fn one_in_one_is_always_true_and_one_in_128_is_rare() {
        assert!((0..100).all(|_| one_in(1)));
        let hits = (0..128_000).filter(|_| one_in(128)).count();
        // Expected 1000; a correct xorshift lands well within [500, 1500].
        assert!((500..1500).contains(&hits), "{hits}");
    }
}
