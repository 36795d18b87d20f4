//! Queue nodes: four per thread, in a global registry, named by a 29-bit code.
//!
//! # Why per-thread nodes in a registry
//!
//! The lock word must stay at 8 bytes, so its tail cannot hold a 64-bit pointer.
//! Like the kernel's qspinlock, which encodes `(cpu, nesting index)` in the tail
//! and keeps 4 MCS nodes per CPU, this crate gives every thread that ever has to
//! wait a *slot* in a process-wide registry of queue nodes and stores `slot + 1`
//! (the node's *code*, 0 = none) in the tail and in the nodes' `next` links.
//!
//! Four nodes per thread (`MAX_NODES`, qspinlock's `qnodes[MAX_NODES]`): a
//! thread uses a node only while it is inside the slow path of `lock()`, and the
//! slow path runs no user code, so in straight-line code a thread waits for one
//! lock at a time. (The holder is not in the queue: a thread holding lock A and
//! waiting for lock B has a node in B's queue only.) But a signal handler can
//! interrupt a thread that waits for lock A and take lock B, as an interrupt
//! handler can interrupt a kernel task spinning on a qspinlock: the acquisition
//! of B must not touch the node still queued for A. So, as qspinlock indexes
//! its per-CPU nodes by a nesting count (task, softirq, hardirq, NMI), each
//! thread keeps a nesting depth and uses node `depth` for its next slow path
//! (`current`, handed back by `Me::done` once the lock is held). A handler
//! always returns before the code it interrupted goes on, so the nodes in use
//! are the first `depth`, whatever the interleaving.
//!
//! Beyond four levels, and for an acquisition of the very lock an interrupted
//! level of the same thread is queued for (queued behind its own interrupted
//! wait, it would never become head), the slow path waits without a queue node
//! (`lock_unqueued`: it competes for the lock word at every release, also past
//! `NO_STEAL`), as qspinlock's fifth level spins on the lock word with trylock.
//! Such a wait never deadlocks on the queue; it is only less fair.
//!
//! **Signal handlers.** A handler may take a numa-spin lock while its thread
//! waits for any lock (the nested slow path takes the thread's next node from a
//! thread-local with no allocation and no lock), provided the thread has had a
//! contended `lock()` before outside a handler (the first one allocates the
//! thread's nodes and, once per process, initializes the tunables and the node
//! map, see `before_enqueue`). A handler that takes a lock
//! its thread *holds* deadlocks, as with any non-recursive mutex. One more
//! self-deadlock: an `unlock_fair` hands the lock to the queue head alone (the
//! `HANDED` word, which the unqueued wait does not take); if that head is an
//! interrupted level of a thread whose handler waits for the same lock, neither
//! can go on. Locks taken in signal handlers should be released with plain
//! `unlock`.
//!
//! **fork.** Waiters queued in the parent do not exist in a fork's child; their
//! nodes would stall every queue that names them. See `node/fork.rs`: a child treats
//! them as gone.
//!
//! Nodes are never freed: the registry only grows (in segments of 32, 64, 128, ...
//! slots of 128 bytes each, a `CachePadded` node), so a code always names valid
//! memory. A thread takes its four slots on its first contended `lock()` and keeps
//! them until it exits; its thread-local destructor returns them to a free list,
//! and the next thread that needs slots recycles them. So the registry's size is
//! four times the peak number of live threads that have ever contended (on any
//! numa-spin lock), not the peak number of simultaneous waiters. A thread whose thread-locals are already destroyed
//! (a `lock()` from a thread-local destructor) borrows a node from the free list
//! for that one acquisition and returns it once it holds the lock (its node is in no
//! queue by then), so it waits in the queue like everyone else. Only if 2^29 - 1
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

mod fork;
mod handoff;
mod head_wait;
mod registry;
mod steal;
pub(crate) mod woken;

pub(crate) use fork::{generation as fork_generation, live_pred};
pub use handoff::EARLY_WAKE_YIELD_NS;
pub(crate) use handoff::{signal, wait_link, wait_signal, wake_early};
pub(crate) use head_wait::{HeadWait, pass_head_ship};
pub(crate) use registry::{
    HEAD, HEAD_OWNER, HeadState, Me, PARKED, QNode, WAIT, current, one_in, registry,
};
pub(crate) use steal::{
    lock_unqueued, steal_past_absent_head, steal_while_head_asleep, take_free_word, try_steal,
    try_steal_free,
};

/// Reads, before the caller initializes its queue node, everything the queued
/// wait needs from lazily initialized process state, and returns the caller's
/// NUMA node ([`crate::sync::current_node`]). Shared by CNA, the queued lock
/// and HQ, called on their slow paths after the steal attempts and before
/// [`Enqueued::begin`](crate::lazy::Enqueued::begin).
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
/// The `pthread_atfork` registration ([`fork::register`], which does
/// something only when the registration at load failed) allocates too.
///
/// The spin calibration ([`crate::backoff::ns_per_spin`]) is lazily
/// initialized too, though it neither allocates nor logs; it is initialized
/// here as well, so that the queued wait only reads it.
#[inline]
pub(crate) fn before_enqueue() -> u32 {
    fork::register();
    crate::backoff::ns_per_spin();
    crate::sync::current_node()
}

#[cfg(all(test, not(numa_loom)))]
pub(crate) mod tests {
    use crate::lazy::tests::{enqueues, lazy_reads_while_enqueued};
    use crate::sync::AtomicU32;
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    std::thread_local! {
        /// Waits of the thread in [`steal_while_head_asleep`]'s spin.
        static ASLEEP_SPINS: Cell<u64> = const { Cell::new(0) };
    }

    /// The tail word (its address) of the lock whose spins
    /// [`watched_spins`] counts, 0 for none.
    static WATCHED: AtomicUsize = AtomicUsize::new(0);
    /// Waits in [`steal_while_head_asleep`]'s spin on the watched lock, by
    /// any thread.
    static WATCHED_SPINS: AtomicU64 = AtomicU64::new(0);

    /// Counts a wait in [`steal_while_head_asleep`]'s spin on the lock whose
    /// tail word is `tail`.
    pub(crate) fn note_asleep_spin(tail: &AtomicU32) {
        let _ = ASLEEP_SPINS.try_with(|n| n.set(n.get() + 1));
        // Relaxed: test counters; a test reads them after it has seen the
        // spinning thread queue (its enqueue's Release), or only polls them.
        if WATCHED.load(Ordering::Relaxed) == std::ptr::from_ref(tail) as usize {
            WATCHED_SPINS.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// From now on [`watched_spins`] counts the spins behind a sleeping head
    /// on the lock whose tail word is `tail`, by any thread; `None` stops
    /// counting. One lock at a time: its callers take turns.
    pub(crate) fn watch_asleep_spins(tail: Option<&AtomicU32>) {
        // Relaxed: as in `note_asleep_spin`.
        WATCHED_SPINS.store(0, Ordering::Relaxed);
        WATCHED.store(
            tail.map_or(0, |t| std::ptr::from_ref(t) as usize),
            Ordering::Relaxed,
        );
    }

    /// The spins counted on the watched lock (see [`watch_asleep_spins`]).
    pub(crate) fn watched_spins() -> u64 {
        // Relaxed: as in `note_asleep_spin`.
        WATCHED_SPINS.load(Ordering::Relaxed)
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

    /// Serializes the unit tests that start or end threads using queue nodes, so
    /// the free list holds what one test expects.
    pub(crate) static REGISTRY_USERS: std::sync::Mutex<()> = std::sync::Mutex::new(());
}
