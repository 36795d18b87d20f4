//! The thread registry: queue nodes, their codes and the calling thread's node
//! (see the [module docs](super) for why).

use crate::sync::{AtomicU32, UnsafeCell, thread_local};
use crossbeam_utils::CachePadded;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{
    AtomicPtr, AtomicU32 as AtomicU32Std, AtomicU64, AtomicUsize, Ordering as StdOrdering,
    compiler_fence,
};

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
    /// The fork generation ([`super::fork`]) in which the owner last
    /// initialized the node for a `lock()`: a node of an older generation
    /// belongs to a thread that does not exist in this process. Written by the
    /// owner before it publishes the node, only in a child of a fork (0 until
    /// then); a `std` atomic even under loom (no fork there).
    fork_gen: AtomicU32Std,
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
            fork_gen: AtomicU32Std::new(0),
        }
    }

    /// Records the current fork generation in the node; called by its owner
    /// while it initializes the node, before the Release that publishes it.
    /// Nothing to do before the first fork (the generation is 0, and so is
    /// every node's).
    #[inline]
    pub(crate) fn set_generation(&self) {
        let now = super::fork::generation();
        if now != 0 {
            // Relaxed: published with the node's initialization (see `fork_gen`).
            self.fork_gen.store(now, StdOrdering::Relaxed);
        }
    }

    /// The fork generation recorded by [`QNode::set_generation`].
    #[inline]
    pub(crate) fn generation(&self) -> u32 {
        // Relaxed: see `fork_gen`.
        self.fork_gen.load(StdOrdering::Relaxed)
    }
}

/// Nodes in segment 0; segment `k` holds `SEGMENT0 << k` nodes.
const SEGMENT0: u32 = 32;
/// Enough segments for every 29-bit code.
const SEGMENTS: usize = 27;
/// Largest valid code (the tail word keeps three bits for the flags
/// `NO_STEAL`, `HEAD_ASLEEP` and `HEAD_CLAIM`, see [`crate::raw_lock`]).
pub(crate) const MAX_CODE: u32 = (1 << 29) - 1;

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
    // Cannot fail: at most 2^29 nodes of 128 bytes.
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

    /// A fresh or recycled code, or `None` when all 2^29 - 1 codes are taken (or
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

/// Queue nodes per thread: a thread can wait for this many locks at once, each
/// acquisition made while it waits for the others (a signal handler that takes
/// a lock while its thread is queued for another, nested). Linux's qspinlock
/// keeps `MAX_NODES` = 4 nodes per CPU for the task, softirq, hardirq and NMI
/// contexts, indexed by a per-CPU nesting count (`qnodes[MAX_NODES]`, `idx`);
/// here the nesting count is per thread. An acquisition nested deeper waits
/// without a queue node (`lock_unqueued`), as qspinlock's does
/// (`idx >= MAX_NODES`: spin on the lock word with trylock).
pub(crate) const MAX_NODES: usize = 4;

/// The calling thread's queue nodes, its nesting depth and its xorshift state.
struct ThreadSlot {
    /// The thread's node codes, one per nesting level; 0 = not yet allocated.
    /// All are allocated together by the thread's first contended `lock()`
    /// (not nested), so a nested acquisition never allocates.
    codes: [Cell<u32>; MAX_NODES],
    /// Nodes in use: the nesting level of the next `lock()` slow path. Each
    /// level returns its node before the level below it runs again (a signal
    /// handler returns before the interrupted code goes on), so the nodes in
    /// use are always `codes[..depth]`. An atomic (Relaxed: one thread and its
    /// signal handlers only, ordered by compiler fences) because a signal
    /// handler of the thread reads and writes it.
    depth: AtomicUsize,
    /// The address of the lock each level in use waits for.
    waits_for: [AtomicUsize; MAX_NODES],
    /// xorshift32 state (never 0).
    rng: Cell<u32>,
}

impl Drop for ThreadSlot {
    fn drop(&mut self) {
        // The thread is exiting, so it is inside no `lock()`: its nodes are in no
        // queue and no other thread holds their codes (see the module docs), so the
        // codes can be recycled. Under loom the registry dies with the execution
        // instead.
        #[cfg(not(numa_loom))]
        for code in &self.codes {
            if code.get() != 0 {
                registry().free_code(code.get());
            }
        }
    }
}

thread_local! {
    // Not `const { .. }`: loom's `thread_local!` (same macro name under loom) does
    // not take that form, and this is read on slow paths only.
    #[allow(clippy::missing_const_for_thread_local)]
    static THREAD_SLOT: ThreadSlot = ThreadSlot {
        codes: [const { Cell::new(0) }; MAX_NODES],
        depth: AtomicUsize::new(0),
        waits_for: [const { AtomicUsize::new(0) }; MAX_NODES],
        rng: Cell::new(0),
    };
}

/// A queue node the calling thread may use for one `lock()`; hand it back
/// with [`Me::done`].
#[derive(Clone, Copy)]
pub(crate) struct Me {
    /// The node's code.
    pub(crate) code: u32,
    /// The node.
    pub(crate) node: &'static QNode,
    /// Borrowed for this `lock()` only (the thread's slot is gone): returned
    /// to the registry by [`Me::done`].
    pub(crate) borrowed: bool,
}

impl Me {
    /// The `lock()` that got this node from [`current`] holds the lock, so the
    /// node is in no queue and no other thread holds its code: a borrowed node
    /// goes back to the registry, the thread's own one to its nesting level.
    pub(crate) fn done(self) {
        if self.borrowed {
            registry().free_code(self.code);
            return;
        }
        let _ = THREAD_SLOT.try_with(|slot| {
            // Our last access to the node happens before the level is handed
            // back, also for a signal handler that interrupts us here and takes
            // the level (a compiler fence orders it for the same thread).
            compiler_fence(StdOrdering::SeqCst);
            let depth = slot.depth.load(StdOrdering::Relaxed);
            debug_assert!(depth > 0);
            slot.depth
                .store(depth.saturating_sub(1), StdOrdering::Relaxed);
        });
    }
}

/// A queue node for the calling thread's `lock()` of the lock at address
/// `lock`: the node of its current nesting level (its nodes are allocated on
/// first use), or, when its thread-locals are already destroyed (a `lock()`
/// from a thread-local destructor), a node borrowed from the registry for this
/// one acquisition. `None`, and the caller waits without a queue node
/// (`lock_unqueued`), when
///
/// - the thread already waits for [`MAX_NODES`] locks (a signal handler
///   interrupted each wait and took another lock);
/// - the thread is already queued for `lock` itself (a signal handler takes the
///   lock its thread waits for): queued behind its own interrupted wait, which
///   cannot go on until the handler returns, it would never become head;
///   without a node it takes the lock word when it is released, as a
///   `pthread_mutex` would let it;
/// - all 2^29 - 1 codes are taken, or the system allocator failed.
///
/// Async-signal-safe when the thread is already in a `lock()` (the case it is
/// made for: a handler that interrupted a wait): it then reads and writes only
/// the thread's slot, which exists and holds every node; no allocation, no lock.
pub(crate) fn current(lock: *const ()) -> Option<Me> {
    let lock = lock as usize;
    let own = THREAD_SLOT.try_with(|slot| {
        // Relaxed (here and below): only this thread and its signal handlers
        // access the slot; a handler that interrupts us reads what we stored
        // before the interruption (compiler fences keep the stores in place).
        let depth = slot.depth.load(StdOrdering::Relaxed);
        if depth >= MAX_NODES
            || slot.waits_for[..depth]
                .iter()
                .any(|l| l.load(StdOrdering::Relaxed) == lock)
        {
            return None;
        }
        if depth == 0 {
            // Not nested: allocate the nodes of every level now.
            for code in &slot.codes {
                if code.get() == 0 {
                    code.set(registry().alloc()?);
                }
            }
        }
        let code = slot.codes[depth].get();
        if code == 0 {
            // Nested, and the outer level could not allocate this one.
            return None;
        }
        // Taken before we touch the node: a signal handler that interrupts us
        // from here on uses the next level (a compiler fence orders it for the
        // same thread). A handler that runs before this store takes this level
        // and hands it back before we go on.
        // The lock first, so a handler that sees the new depth sees it.
        slot.waits_for[depth].store(lock, StdOrdering::Relaxed);
        compiler_fence(StdOrdering::SeqCst);
        slot.depth.store(depth + 1, StdOrdering::Relaxed);
        compiler_fence(StdOrdering::SeqCst);
        Some(code)
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
                // Seed from the slot code and the stack address: distinct per
                // thread. Under loom from the code alone: stack addresses
                // differ between executions, and loom replays an execution's
                // prefix only if every draw comes out the same each time.
                let local = 0u8;
                let stack = if cfg!(numa_loom) {
                    0
                } else {
                    &raw const local as usize as u32
                };
                x = (slot.codes[0].get() ^ stack).wrapping_mul(0x9E37_79B9) | 1;
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
mod tests {
    use super::*;
    use crate::node::tests::REGISTRY_USERS;

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

    #[test]
    fn threads_get_distinct_codes_and_exited_ones_are_recycled() {
        let _serial = REGISTRY_USERS.lock().unwrap_or_else(|e| e.into_inner());
        let mine = current(std::ptr::null()).expect("slot").code;
        // Other tests' threads start (taking codes off the free list) in
        // parallel with this one, so a freed code may be taken again before we
        // look: a recycling registry shows it free in one of a few tries.
        let recycled = (0..5).any(|_| {
            let other = std::thread::spawn(|| current(std::ptr::null()).expect("slot").code)
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
        assert_eq!(zeroed.fork_gen.load(StdOrdering::Relaxed), 0);
        assert_eq!(std::mem::align_of::<Slot>() % 64, 0);
        // SAFETY: allocated above with `layout`.
        unsafe { System.dealloc(p.cast(), layout) };
    }

    /// Nested slow paths of one thread get the thread's four nodes in turn,
    /// a fifth level and a level that waits for a lock an outer level waits
    /// for get none (they wait unqueued), and each level handed back is the
    /// next one taken.
    #[test]
    fn nested_levels_get_distinct_nodes_up_to_max_nodes() {
        let _serial = REGISTRY_USERS.lock().unwrap_or_else(|e| e.into_inner());
        std::thread::spawn(|| {
            let locks: Vec<*const ()> = (1..=MAX_NODES + 1).map(|i| i as *const ()).collect();
            let levels: Vec<Me> = locks[..MAX_NODES]
                .iter()
                .map(|&l| current(l).expect("a node per level"))
                .collect();
            let mut codes: Vec<u32> = levels.iter().map(|me| me.code).collect();
            assert!(levels.iter().all(|me| !me.borrowed));
            assert!(
                current(locks[MAX_NODES]).is_none(),
                "a fifth level got a node"
            );
            codes.sort_unstable();
            codes.dedup();
            assert_eq!(codes.len(), MAX_NODES, "levels share a node");
            // Back to two levels: the third level's node is taken again, and
            // not for a lock the first two levels wait for.
            levels[3].done();
            levels[2].done();
            assert!(current(locks[0]).is_none(), "re-entered lock got a node");
            assert!(current(locks[1]).is_none(), "re-entered lock got a node");
            let again = current(locks[4]).expect("a node at level 2");
            assert_eq!(again.code, levels[2].code);
            for me in [again, levels[1], levels[0]] {
                me.done();
            }
            assert_eq!(current(locks[0]).expect("level 0").code, levels[0].code);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn one_in_one_is_always_true_and_one_in_128_is_rare() {
        assert!((0..100).all(|_| one_in(1)));
        let hits = (0..128_000).filter(|_| one_in(128)).count();
        // Expected 1000; a correct xorshift lands well within [500, 1500].
        assert!((500..1500).contains(&hits), "{hits}");
    }
}
