//! A waiter's queue node and the queue fields of an snode: the types of the
//! per-node MCS queues (the protocol is in `queue.rs`).

use crate::sync::{AtomicPtr, AtomicU32};
use std::ptr;

/// Waiting for head-ship, running.
pub(crate) const WAITING: u32 = 0;
/// Waiting for head-ship, parked (or about to park) on [`QNode::park_key`].
pub(crate) const PARKED: u32 = 1;
/// Head of its snode queue (spinning, or, after losing its withdrawal to a
/// holder's claim, about to sleep as `PARKED` until the grant).
pub(crate) const HEAD: u32 = 2;
/// Head, and a holder handed it the lock.
pub(crate) const GRANTED: u32 = 3;

/// The tag of a registration slot whose head was given head-ship (and the
/// node's registration) by its predecessor and has not run since: it may
/// have been asleep, and may still wait for a CPU. The head clears it when
/// it starts its wait as head. Queue nodes are 128-aligned, so bit 0 of
/// their address is free.
pub(crate) const NOT_RUNNING: usize = 1;

/// A waiter's node in an snode queue. Lives on the waiter's stack for the
/// duration of one slow acquisition.
#[repr(align(128))]
pub(crate) struct QNode {
    pub(crate) status: AtomicU32,
    /// 1 when the predecessor passed head-ship with its node's registration
    /// (the word's `HEAD_ONE`, and the snode's slot naming this node):
    /// written by the predecessor before its Release swap of `status`.
    pub(crate) token: AtomicU32,
    pub(crate) next: AtomicPtr<QNode>,
}

impl QNode {
    pub(crate) fn new() -> Self {
        QNode {
            status: AtomicU32::new(WAITING),
            token: AtomicU32::new(0),
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The parking key of this node: its address + 2. Lock keys are a lock's
    /// address + 0, 1 or 3 (8-aligned locks) and snode keys are 8-aligned heap
    /// addresses, so no key of this crate equals a queue node's, even when a
    /// lock later lives at the stack address a queue node had.
    #[inline]
    pub(crate) fn park_key(&self) -> usize {
        self as *const QNode as usize + 2
    }
}

/// The queue fields of an snode (in its hot line).
pub(crate) struct SnodeQueue {
    /// The last queued waiter of the node, null when nobody queues.
    pub(crate) tail: AtomicPtr<QNode>,
    /// The registered head (spinning for the word or a grant), null when none
    /// is claimable.
    pub(crate) head: AtomicPtr<QNode>,
}

impl SnodeQueue {
    #[cfg(not(numa_loom))]
    pub(crate) const fn new() -> Self {
        SnodeQueue {
            tail: AtomicPtr::new(ptr::null_mut()),
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[cfg(numa_loom)]
    pub(crate) fn new() -> Self {
        SnodeQueue {
            tail: AtomicPtr::new(ptr::null_mut()),
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }
}

/// `p` with the slot's "not yet running" tag.
#[inline]
pub(crate) fn tagged(p: &QNode) -> *mut QNode {
    (p as *const QNode as *mut QNode).map_addr(|a| a | NOT_RUNNING)
}
