//! `fork(2)`: queue nodes of threads that do not exist in the child.
//!
//! A fork copies the locks with their queues, but only the forking thread
//! goes on in the child. A waiter that was queued in the parent (a *ghost*
//! in the child) never takes its turn: a lock whose queue names it would hand
//! head-ship to nobody, and every child thread that queued behind it would
//! wait for ever. The forking thread itself is in no queue (it is inside no
//! `lock()` while it calls `fork`).
//!
//! So the process keeps a *fork generation*, advanced by a `pthread_atfork`
//! child handler registered when the program (or the shared object that
//! links this crate) is loaded, before `main` ([`register_at_load`]). A
//! registration made later, on a thread's first slow path, would race with
//! the forks of other threads: glibc runs the prepare handlers of a fork
//! without its atfork lock, so a registration made meanwhile succeeds, but
//! that fork skips the new handler (glibc 2.36, `__run_prefork_handlers`),
//! and the waiter that then queues would be a live waiter in the child's
//! queue (`tests/fork_prepare.rs`). Only if the load-time registration
//! failed (`ENOMEM`) does a slow path try again ([`register`], from
//! [`before_enqueue`](super::before_enqueue)), with that window open. A waiter
//! records the generation in its queue node when it initializes it, and a
//! lock's queue treats a node of an older generation as gone: an arrival whose
//! predecessor in the queue is a ghost ([`live_pred`]) becomes the queue head
//! instead of linking behind it. Every waiter queued before the fork is a
//! ghost and every waiter queued after it is not, so the ghosts are always
//! the front of a queue, and a predecessor that is a ghost means that the
//! whole queue ahead is: nobody waits there. The lock word itself is kept: a
//! lock the forking thread held is released by it in the child and taken by
//! the new head, a lock that was free stays free, and a lock held by a thread
//! that does not exist in the child stays held (as glibc's mutexes do). The
//! HQ lock's metadata bound before the fork is dropped the same way (see
//! `RawHqLock::enter`).
//!
//! The ghosts' queue nodes stay allocated in the child: their codes may still
//! be named by a lock's tail word, which nothing enumerates, so they are never
//! recycled (their threads' slots never return them). That leaks
//! [`MAX_NODES`](super::registry::MAX_NODES) nodes of 128 bytes per thread
//! alive at the fork, once per fork; glibc's child keeps its dead threads'
//! mutex state too, and a child usually execs or exits soon.
//!
//! Cost: until the process is the child of a fork the generation is 0 and
//! every check is one relaxed load of a read-mostly word, on slow paths only;
//! the fast paths do not look at it.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU32, Ordering};

/// The fork generation: how many forks lie between the process's first
/// ancestor that used these locks and this process (0 in that ancestor and in
/// every process that never forked from one). Advanced by [`after_fork_in_child`]
/// while the child has only the forking thread, so every later access of the
/// child happens after it (Relaxed everywhere).
static GENERATION: CachePadded<AtomicU32> = CachePadded::new(AtomicU32::new(0));

/// The current fork generation (0: this process is no child of a fork that
/// could have left ghosts in a queue). One relaxed load.
#[inline]
pub(crate) fn generation() -> u32 {
    // Relaxed: changed only by the child handler, before any other thread of
    // the child exists (see `GENERATION`).
    GENERATION.load(Ordering::Relaxed)
}

/// The child handler: every waiter queued before now is a ghost.
/// Async-signal-safe (one atomic add), as a child handler must be.
#[cfg(all(unix, not(numa_loom)))]
extern "C" fn after_fork_in_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

#[cfg(all(unix, not(numa_loom)))]
ctor::declarative::ctor! {
    /// Registers the child handler when the program is loaded: before `main`,
    /// so before any thread of the program can fork or queue (module docs).
    /// Uses only libc and atomics, as code before `main` must.
    #[ctor(unsafe)]
    fn register_at_load() {
        register();
    }
}

/// Registers the child handler with `pthread_atfork`, once per process (a
/// child inherits the registration), unless [`register_at_load`] did.
/// Called on slow paths before the queue
/// node is initialized: `pthread_atfork` allocates, so it must not run while
/// the thread's node is enqueued (see `before_enqueue`). A re-entrant call
/// from inside the registration (an allocator that takes a numa-spin lock),
/// and a call while another thread registers, return at once. Under loom,
/// and where there is no `fork`, it does nothing.
///
/// The registering thread claims the registration with its process's PID,
/// not with a flag: a fork while another thread of the parent registers
/// leaves the claim in the child, where that thread does not exist and may
/// not have reached `pthread_atfork` before the fork. The child's first
/// slow path sees a claim by another process and registers again. (If the
/// parent's registration did complete before the fork, the child then has
/// the handler twice, and each later fork advances the generation by two:
/// a node is a ghost when its generation is older, by any amount.)
#[inline]
pub(crate) fn register() {
    #[cfg(all(unix, not(numa_loom)))]
    {
        // Relaxed: only decides whether to try; the registration itself is
        // synchronized inside libc.
        if CLAIM.load(Ordering::Relaxed) != REGISTERED {
            register_slow();
        }
    }
}

/// The registration's state: 0 before it, [`REGISTERED`] after it (also in
/// every child), else the PID of the process one of whose threads is
/// registering.
#[cfg(all(unix, not(numa_loom)))]
static CLAIM: AtomicU32 = AtomicU32::new(0);

/// [`CLAIM`] once the handler is registered (no PID is `u32::MAX`).
#[cfg(all(unix, not(numa_loom)))]
const REGISTERED: u32 = u32::MAX;

#[cfg(all(unix, not(numa_loom)))]
#[cold]
fn register_slow() {
    let seen = CLAIM.load(Ordering::Relaxed);
    // SAFETY: `getpid` has no preconditions and cannot fail.
    let me = unsafe { libc::getpid() }.cast_unsigned();
    // Relaxed: one location decides who registers in this process; the
    // claim publishes nothing.
    if seen == REGISTERED
        || seen == me
        || CLAIM
            .compare_exchange(seen, me, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    // SAFETY: the handler is an `extern "C" fn()` that lives as long as
    // the process and only does an atomic add; no prepare or parent
    // handler.
    let r = unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    // Out of memory: a later slow path tries again. Until then a fork's
    // child may find ghosts in its queues.
    CLAIM.store(if r == 0 { REGISTERED } else { 0 }, Ordering::Relaxed);
}

/// `pred` (a queue node's code, 0 = none), or 0 if that node is a ghost:
/// initialized in an older fork generation than `generation()`, by a thread
/// that does not exist in this process. For an arrival that has just swapped
/// itself into a queue's tail behind `pred`: with 0 it is the queue head.
///
/// The node's generation is read Relaxed: the arrival read `pred` from the
/// tail word with Acquire, which the node's owner wrote with Release after
/// recording its generation; a ghost's generation was written before the fork.
#[inline]
pub(crate) fn live_pred(pred: u32) -> u32 {
    let now = generation();
    if now != 0 && pred != 0 && super::registry().node(pred).generation() < now {
        crate::sync::event("fork-ghost");
        0
    } else {
        pred
    }
}
