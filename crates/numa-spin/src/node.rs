//! Queue nodes: one per thread, in a global registry, named by a 31-bit code.
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
//! Signal handlers that take a lock the interrupted thread is waiting for are out of
//! scope, as they are for any non-async-signal-safe lock.
//!
//! Nodes are never freed: the registry only grows (in segments of 32, 64, 128, ...
//! nodes, 48 bytes each), so a code always names valid memory. A thread's slot is
//! returned to a free list by its thread-local destructor and recycled by the next
//! thread that needs one; the registry's size is the peak number of threads that
//! contended at the same time. If a thread has no slot (its thread-locals are being
//! destroyed, or 2^31 - 1 slots are taken) `current()` returns `None` and the lock
//! falls back to waiting without a queue node (see `RawLock::lock_unqueued`).
//!
//! Slot allocation (once per thread) uses a `std::sync::Mutex` and `std` atomics
//! even under loom: it is registration, not the modelled algorithm. Under loom the
//! registry is a per-execution `loom::lazy_static!` so nodes (holding loom atomics)
//! never outlive the execution that made them.

use crate::sync::{AtomicU32, UnsafeCell, thread_local};
use std::cell::Cell;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicPtr, Ordering as StdOrdering};

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
    fn new() -> Self {
        QNode {
            next: AtomicU32::new(0),
            locked: AtomicU32::new(WAIT),
            numa: UnsafeCell::new(0),
            handoff: UnsafeCell::new(HeadState::EMPTY),
        }
    }
}

/// Nodes in segment 0; segment `k` holds `SEGMENT0 << k` nodes.
const SEGMENT0: u32 = 32;
/// Enough segments for every 31-bit code.
const SEGMENTS: usize = 27;
/// Largest valid code (the tail word keeps one bit for the no-steal flag).
pub(crate) const MAX_CODE: u32 = (1 << 31) - 1;

/// The process-wide (under loom: per-execution) node registry.
pub(crate) struct Registry {
    segments: [AtomicPtr<QNode>; SEGMENTS],
    slots: StdMutex<Slots>,
}

struct Slots {
    /// Codes returned by exited threads.
    free: Vec<u32>,
    /// Codes handed out so far (the next new code is `issued + 1`).
    issued: u32,
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

impl Registry {
    #[cfg(not(numa_loom))]
    const fn new() -> Self {
        Registry {
            segments: [const { AtomicPtr::new(std::ptr::null_mut()) }; SEGMENTS],
            slots: StdMutex::new(Slots {
                free: Vec::new(),
                issued: 0,
            }),
        }
    }

    #[cfg(numa_loom)]
    fn new() -> Self {
        Registry {
            segments: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            slots: StdMutex::new(Slots {
                free: Vec::new(),
                issued: 0,
            }),
        }
    }

    /// The node named by `code`.
    ///
    /// `code` must have been returned by [`Registry::alloc`] (callers get codes from
    /// the lock's tail or the nodes' links, which only ever hold allocated codes).
    #[inline]
    pub(crate) fn node(&self, code: u32) -> &QNode {
        let (k, index) = locate(code);
        // Acquire pairs with the Release store in `alloc`, so the segment's
        // initialization is visible (it also happens-before through the chain that
        // handed us the code; this makes it independent of that argument).
        let base = self.segments[k].load(StdOrdering::Acquire);
        assert!(
            !base.is_null(),
            "numa-spin: queue node code {code} was never allocated"
        );
        // SAFETY:
        // - `base` points to a leaked `Box<[QNode]>` of `SEGMENT0 << k` nodes, published
        //   by `alloc` before any code in segment `k` was issued, and never freed while
        //   `self` lives (only `Drop for Registry` frees it);
        // - `index < SEGMENT0 << k` by construction of `locate`.
        unsafe { &*base.add(index) }
    }

    /// A fresh or recycled code, or `None` when all 2^31 - 1 codes are taken.
    fn alloc(&self) -> Option<u32> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(code) = slots.free.pop() {
            return Some(code);
        }
        if slots.issued >= MAX_CODE {
            return None;
        }
        let code = slots.issued + 1;
        let (k, index) = locate(code);
        if index == 0 {
            let len = (SEGMENT0 as usize) << k;
            let segment: Box<[QNode]> = (0..len).map(|_| QNode::new()).collect();
            let base = Box::into_raw(segment).cast::<QNode>();
            // Release: publishes the nodes' initialization to `node`'s Acquire load.
            self.segments[k].store(base, StdOrdering::Release);
        }
        slots.issued = code;
        Some(code)
    }

    /// Returns `code` for reuse by another thread.
    #[cfg(not(numa_loom))]
    fn free(&self, code: u32) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.free.push(code);
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        // Only runs under loom (a static's destructor never runs otherwise).
        for (k, segment) in self.segments.iter_mut().enumerate() {
            let base = *segment.get_mut();
            if !base.is_null() {
                let len = (SEGMENT0 as usize) << k;
                let slice = std::ptr::slice_from_raw_parts_mut(base, len);
                // SAFETY: `base` came from `Box::into_raw` of a boxed slice of `len`
                // nodes in `alloc`, and we have exclusive access (`&mut self`).
                drop(unsafe { Box::from_raw(slice) });
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
loom::lazy_static! {
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
            registry().free(self.code.get());
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

/// The calling thread's queue node.
#[derive(Clone, Copy)]
pub(crate) struct Me {
    /// The node's code.
    pub(crate) code: u32,
    /// The node.
    pub(crate) node: &'static QNode,
}

/// The calling thread's queue node, allocating a slot on first use; `None` if the
/// thread-locals are being destroyed or no slot is left.
pub(crate) fn current() -> Option<Me> {
    let code = THREAD_SLOT
        .try_with(|slot| {
            if slot.code.get() == 0 {
                slot.code.set(registry().alloc()?);
            }
            Some(slot.code.get())
        })
        .ok()??;
    Some(Me {
        code,
        node: registry().node(code),
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
mod tests {
    use super::*;

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
        let mine = current().expect("slot").code;
        let other = std::thread::spawn(|| current().expect("slot").code)
            .join()
            .unwrap();
        assert_ne!(mine, other);
        // `join` returns after the thread's thread-local destructors ran, so its
        // code is back on the free list (no other test of this binary frees codes).
        let free = registry().slots.lock().unwrap().free.clone();
        assert!(free.contains(&other), "{other} not in {free:?}");
        assert!(!free.contains(&mine));
        assert_eq!(
            registry().node(mine).locked.load(StdOrdering::Relaxed),
            WAIT
        );
    }

    #[test]
    fn one_in_one_is_always_true_and_one_in_128_is_rare() {
        assert!((0..100).all(|_| one_in(1)));
        let hits = (0..128_000).filter(|_| one_in(128)).count();
        // Expected 1000; a correct xorshift lands well within [500, 1500].
        assert!((500..1500).contains(&hits), "{hits}");
    }
}
