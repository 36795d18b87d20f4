//! The requests (one queued closure each, on its submitter's stack) and a
//! request queue: the MCS tail of one NUMA node's requests, and the fork
//! generation those requests belong to (see the [module docs](super#fork)).
//!
//! # Fork
//!
//! A fork's child has only the forking thread. Requests that other threads
//! of the parent had queued (and the combiner among them) are *ghosts* in the
//! child: nobody will run their closures or hand combining on, so a request
//! linked behind one waits for ever. Nor may the child read them: they live
//! on the stacks of threads that do not exist in the child, memory that
//! glibc's child hands to the next threads it creates (`__reclaim_stacks`).
//! So a ghost cannot be told from its own memory, as a queue node of the CNA
//! lock can (`node/fork.rs`); the queue records instead, beside its tail, the
//! fork generation ([`crate::node::fork_generation`]) its requests belong to.
//! The first request of a newer generation to reach the queue empties it (the
//! tail becomes null: every request in it is a ghost) and records the new
//! generation before it swaps itself in, and every later arrival of that
//! generation finds the generation current and queues as usual. Ghosts are
//! forgotten, never read; the global lock's own queue treats its ghosts the
//! same way (`node::live_pred`).
//!
//! Until the process is the child of a fork both words read 0: one relaxed
//! load of the process's generation and one load of a word in the cache line
//! of the tail about to be swapped, on the slow path only.

use core::ptr;

use crate::sync::{AtomicPtr, AtomicU32, Ordering, UnsafeCell};

/// `Request::status`: queued, not served yet (the value `node::wait_signal`
/// waits on).
const WAIT: u32 = crate::node::WAIT;

/// One queued closure, on its submitter's stack (in a [`Queued`], beside its
/// slot).
pub(super) struct Request {
    /// The next request of the same queue; null until the successor links.
    pub(super) next: AtomicPtr<Request>,
    /// [`WAIT`], `PARKED` (see [`crate::node::wait_signal`]), `DONE` or
    /// `COMBINER` (the served values, in `combining/raw.rs`).
    pub(super) status: AtomicU32,
    /// Runs the closure in `slot` on `data` (a `run_slot` instance).
    pub(super) run: unsafe fn(*const (), *mut ()),
    /// The submitter's `Slot`, type-erased.
    pub(super) slot: *const (),
    /// The submitter's data (the `*mut T` its closure runs on), type-erased:
    /// each request carries its own, so callers with their own objects (and
    /// their own `T`) never see each other's.
    pub(super) data: *mut (),
}

/// A request and its submitter's slot (the closure, then its result) side by
/// side, from a 128-byte boundary: a slot of up to 88 bytes (a closure that
/// captures a few references, a result of a few words) shares the request's
/// cache line, so the combiner reads the closure and writes the result in the
/// line it already has for the request's link and status word, and the
/// waiter that reads its status reads its result with it.
#[repr(C, align(128))]
pub(super) struct Queued<S> {
    pub(super) request: Request,
    pub(super) slot: UnsafeCell<S>,
}

impl<S> Queued<S> {
    /// Runs `f` with a request for the closure in `slot`, to run on `data`
    /// with `run`, placed beside the slot on this frame; returns the slot
    /// (once `f` has returned, the request is no longer in use).
    pub(super) fn with<R>(
        slot: UnsafeCell<S>,
        data: *mut (),
        run: unsafe fn(*const (), *mut ()),
        f: impl FnOnce(&Request) -> R,
    ) -> (R, UnsafeCell<S>) {
        let mut queued = Queued {
            request: Request {
                next: AtomicPtr::new(ptr::null_mut()),
                status: AtomicU32::new(WAIT),
                run,
                slot: ptr::null(),
                data,
            },
            slot,
        };
        // The request names the slot where it now lies, which does not move
        // until `f` returns.
        queued.request.slot = ptr::from_ref(&queued.slot).cast();
        let r = f(&queued.request);
        (r, queued.slot)
    }
}

impl Request {
    /// A request for the closure in `slot`, to run on `data` with `run`.
    #[cfg(test)]
    pub(super) fn new<S>(
        slot: &UnsafeCell<S>,
        data: *mut (),
        run: unsafe fn(*const (), *mut ()),
    ) -> Self {
        Request {
            next: AtomicPtr::new(ptr::null_mut()),
            status: AtomicU32::new(WAIT),
            run,
            slot: ptr::from_ref(slot).cast(),
            data,
        }
    }
}

/// The generation word while one thread empties the queue of its ghosts
/// (never a generation: that would take 2^32 - 1 forks).
#[cfg(all(unix, not(numa_loom)))]
const FORGETTING: u32 = u32::MAX;

/// One request queue of a [`RawCombiningMutex`](super::RawCombiningMutex).
pub(super) struct Queue {
    /// The last request queued (MCS's tail); null when the queue is empty.
    pub(super) tail: AtomicPtr<Request>,
    /// The fork generation of the requests in the queue, or `FORGETTING`.
    /// A `std` atomic even under loom: a loom model never forks, so the word
    /// stays 0 there and is never read.
    #[cfg_attr(any(not(unix), numa_loom), allow(dead_code))]
    generation: std::sync::atomic::AtomicU32,
}

impl Queue {
    /// An empty queue of generation 0.
    #[cfg(not(numa_loom))]
    pub(super) const fn new() -> Self {
        Queue {
            tail: AtomicPtr::new(ptr::null_mut()),
            generation: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// An empty queue (loom build: its atomics are not `const`).
    #[cfg(numa_loom)]
    pub(super) fn new() -> Self {
        Queue {
            tail: AtomicPtr::new(ptr::null_mut()),
            generation: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// Empties the queue of the requests of older fork generations (ghosts),
    /// if it holds any: see the [module docs](self#fork). Called before the
    /// caller's request is swapped into the tail.
    #[inline]
    fn forget_ghosts(&self) {
        #[cfg(all(unix, not(numa_loom)))]
        {
            let now = crate::node::fork_generation();
            // Acquire: pairs with the Release store of `now` in
            // `forget_ghosts_slow` by the thread that emptied the queue, so
            // its null store happens-before our swap of the tail, which then
            // reads null or a request of our generation, never a ghost.
            if self.generation.load(std::sync::atomic::Ordering::Acquire) != now {
                self.forget_ghosts_slow(now);
            }
        }
    }

    /// [`forget_ghosts`](Queue::forget_ghosts) when the queue's generation
    /// is not `now`: one arrival empties the queue, the others wait until it
    /// has (once per queue and fork).
    #[cfg(all(unix, not(numa_loom)))]
    #[cold]
    fn forget_ghosts_slow(&self, now: u32) {
        use std::sync::atomic::Ordering as StdOrdering;
        loop {
            // Acquire: as in `forget_ghosts`.
            let seen = self.generation.load(StdOrdering::Acquire);
            if seen == now {
                return;
            }
            if seen == FORGETTING {
                // Another arrival is emptying the queue (a few instructions,
                // with its signals blocked: no handler of its thread can
                // wait here for it).
                crate::sync::yield_now();
                continue;
            }
            // A signal handler of this thread that combined on this lock
            // between our claim and our store of `now` would wait above for
            // ever: block signals for those three stores.
            let _blocked = BlockSignals::new();
            // Relaxed: the claim only makes us the one arrival that empties
            // the queue; what the others need is published by the Release
            // store of `now` below.
            if self
                .generation
                .compare_exchange(seen, FORGETTING, StdOrdering::Relaxed, StdOrdering::Relaxed)
                .is_ok()
            {
                // Relaxed: published by the Release store of `now`; no
                // arrival swaps the tail before it has read `now` (with
                // Acquire). Every request in the queue is a ghost: no thread
                // of this generation has queued yet.
                self.tail.store(ptr::null_mut(), Ordering::Relaxed);
                // Release: publishes the null tail (see `forget_ghosts`).
                self.generation.store(now, StdOrdering::Release);
                crate::sync::event("combine-fork-ghosts");
                return;
            }
        }
    }
}

/// Blocks every signal of the calling thread until dropped (then restores
/// its mask). `pthread_sigmask` is async-signal-safe and allocates nothing.
#[cfg(all(unix, not(numa_loom)))]
struct BlockSignals(libc::sigset_t);

#[cfg(all(unix, not(numa_loom)))]
impl BlockSignals {
    fn new() -> Self {
        // SAFETY: `sigfillset` and `pthread_sigmask` get valid pointers to
        // `sigset_t`s on this frame; a zeroed `sigset_t` is a valid value
        // for both to overwrite.
        unsafe {
            let mut all: libc::sigset_t = core::mem::zeroed();
            let mut old: libc::sigset_t = core::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
            BlockSignals(old)
        }
    }
}

#[cfg(all(unix, not(numa_loom)))]
impl Drop for BlockSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask `new` saved; a valid `sigset_t`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, ptr::null_mut()) };
    }
}

/// Appends `request` to `queue` (MCS's enqueue) and returns its
/// predecessor (null: the queue was empty, `request` heads it). In a fork's
/// child, requests queued before the fork are forgotten first.
pub(super) fn enqueue(queue: &Queue, request: &Request) -> *mut Request {
    queue.forget_ghosts();
    let me = ptr::from_ref(request).cast_mut();
    // AcqRel (MCS's enqueue). Release: our `next = null` must happen-before
    // the link our successor writes into it, or the initialization could
    // overwrite the link. Acquire: the same for our predecessor's
    // `next = null` before our link store. (The combiner reaches our request
    // through that link, which publishes it.)
    let pred = queue.tail.swap(me, Ordering::AcqRel);
    #[cfg(numa_loom)]
    crate::sync::note_enqueued();
    pred
}
