//! The machine's NUMA layout and a fast current-node lookup.
//!
//! (Skeleton: the full crate is being written; the functions below are the
//! stable surface the lock crates use.)

use std::cell::Cell;

thread_local! {
    static THREAD_NODE: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The OS index of the NUMA node the calling thread runs on (or its assigned
/// virtual node, see [`set_current_thread_node`]).
#[inline]
pub fn current_node() -> usize {
    THREAD_NODE.with(Cell::get).unwrap_or(0)
}

/// Assigns the calling thread to a (virtual) NUMA node, or clears the assignment.
pub fn set_current_thread_node(node: Option<usize>) {
    THREAD_NODE.with(|n| n.set(node));
}
