//! [`RawCombiningMutex`]: the global lock, the per-node request queues and
//! the combiner's batch (see the [module docs](super) for the algorithm).

use core::marker::PhantomData;
use core::ptr;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use super::pool::{Binding, Joined};
use super::queue::{Queue, Queued, Request, enqueue};
use super::{
    COMBINE_BATCH, COMBINE_BATCH_NS, COMBINE_LINK_SPIN_NS, COMBINING_QUEUES, nesting, reentry, solo,
};
use crate::config::{Global, Tunables};
use crate::raw_lock::RawLock;
use crate::sync::{self, AtomicU32, Ordering, UnsafeCell};

/// The count bound in effect: 2 in loom models, so that a model of three
/// threads sees a combiner run another's closure and then hand over.
const BATCH: u32 = if cfg!(numa_loom) { 2 } else { COMBINE_BATCH };

/// `Request::status`: the closure ran; its result is in the slot.
const DONE: u32 = crate::node::HEAD;
/// `Request::status`: you are your node's combiner; your closure has not run.
const COMBINER: u32 = crate::node::HEAD_OWNER;

/// The closure and, once it ran, its result (or panic), on the submitter's
/// stack.
pub(super) struct Slot<T: ?Sized, F, R> {
    f: Option<F>,
    out: Option<std::thread::Result<R>>,
    _data: PhantomData<fn(&mut T)>,
}

impl<T: ?Sized, F, R> Slot<T, F, R> {
    /// Takes the result (or panic) out; `None` if the closure has not run.
    pub(super) fn take_out(&mut self) -> Option<std::thread::Result<R>> {
        self.out.take()
    }

    /// A slot holding `f`, not run yet.
    pub(super) fn new(f: F) -> UnsafeCell<Self> {
        UnsafeCell::new(Slot {
            f: Some(f),
            out: None,
            _data: PhantomData,
        })
    }
}

/// Runs the closure of a `Slot<T, F, R>` (in a [`UnsafeCell`]) on `data`,
/// catching a panic into the slot.
///
/// # Safety
///
/// - `slot` points to a live `UnsafeCell<Slot<T, F, R>>` whose closure has
///   not run, accessed by nobody else meanwhile;
/// - `data` is the `*mut T` of the same request (the submitter's), and the
///   caller holds the lock that the submitter's contract puts it under.
pub(super) unsafe fn run_slot<T, F: FnOnce(&mut T) -> R, R>(slot: *const (), data: *mut ()) {
    let cell = slot.cast::<UnsafeCell<Slot<T, F, R>>>();
    // SAFETY: per the contract, the cell is live and ours until we mark its
    // request done; the submitter wrote it before publishing the request
    // (Release link / swap, read by our Acquire link load) and reads it only
    // after our DONE swap (Release, its Acquire load).
    unsafe {
        (*cell).with_mut(|s| {
            let f = (*s).f.take().expect("a request runs once");
            // SAFETY: `data` is the submitter's `*mut T`, valid until its
            // `combine` returns, and we hold the lock it is accessed under
            // (contract).
            let data = &mut *data.cast::<T>();
            (*s).out = Some(catch_unwind(AssertUnwindSafe(|| f(data))));
        });
    }
}

/// The raw part of [`CombiningMutex`](super::CombiningMutex): the global lock
/// (a CNA lock with the process-wide tunables) and the binding of its
/// per-node request queues, a set that the lock takes from a process-wide
/// pool while it is contended and gives back when it is idle.
///
/// Implements `lock_api` 0.5's `RawMutex`, `RawMutexFair` and `RawMutexTimed`
/// (all three are CNA's: `lock()` guards never combine). [`combine`]
/// (`RawCombiningMutex::combine`) is the combining acquisition, on data the
/// caller passes with each call.
///
/// [`combine`]: RawCombiningMutex::combine
///
/// Generic over where its tunables live, as [`RawLock`]: the process-wide
/// ones ([`Global`], [`new`](RawCombiningMutex::new)) or a lock's own
/// ([`with_config`](RawCombiningMutex::with_config)).
///
/// 16 bytes, aligned to 8 (see the [module docs](super#bounds-and-costs)).
pub struct RawCombiningMutex<Tn: Tunables = Global> {
    lock: RawLock<true, Tn>,
    queue_set: Binding,
}

// SAFETY: the bound set's queue tails point to requests that their
// submitters keep alive until served (see the module docs); the binding word
// is an atomic, the set it names a static one; the lock is the CNA lock's.
unsafe impl<Tn: Tunables> Send for RawCombiningMutex<Tn> {}
// SAFETY: as for `Send`: every shared access goes through atomics.
unsafe impl<Tn: Tunables> Sync for RawCombiningMutex<Tn> {}

/// Releases the global lock when dropped (also when a closure unwinds).
struct Release<'a, Tn: Tunables>(&'a RawLock<true, Tn>);

impl<Tn: Tunables> Drop for Release<'_, Tn> {
    fn drop(&mut self) {
        // SAFETY: built only right after an acquisition of this thread; this
        // ends that acquisition.
        unsafe { self.0.release() };
    }
}

impl<Tn: Tunables> RawCombiningMutex<Tn> {
    #[cfg(not(numa_loom))]
    const fn from_tunables(tunables: Tn) -> Self {
        RawCombiningMutex {
            lock: RawLock::from_tunables(tunables),
            queue_set: Binding::new(),
        }
    }

    /// Under loom atomics are not `const`.
    #[cfg(numa_loom)]
    fn from_tunables(tunables: Tn) -> Self {
        RawCombiningMutex {
            lock: RawLock::from_tunables(tunables),
            queue_set: Binding::new(),
        }
    }

    /// The global lock.
    pub fn raw_lock(&self) -> &RawLock<true, Tn> {
        &self.lock
    }

    /// The address of the last request queued on each request queue of the
    /// bound queue set (0: the queue is empty; all 0 while no set is bound),
    /// a momentary snapshot for tests that wait for a request to enqueue: a
    /// queue's entry changes whenever one does. Not a stable API.
    #[doc(hidden)]
    pub fn request_tails(&self) -> [usize; COMBINING_QUEUES] {
        self.queue_set.tails()
    }

    /// The pool index of the bound queue set and how many threads use it
    /// (joined it and have not left); `None` while no set is bound. A
    /// momentary snapshot, for tests. Not a stable API.
    #[doc(hidden)]
    pub fn queue_set(&self) -> Option<(usize, u32)> {
        self.queue_set.snapshot()
    }

    /// How many queue sets of the process-wide pool are bound to a lock now
    /// (a momentary snapshot, for tests). Not a stable API.
    #[doc(hidden)]
    pub fn bound_queue_sets() -> usize {
        super::pool::pool().claimed_count()
    }

    /// This lock's identity for the debug-build re-entry check.
    fn addr(&self) -> *const () {
        ptr::from_ref(self).cast()
    }

    /// Runs `f` on `*data` under the lock, on this thread or on a combiner of
    /// this thread's NUMA node, and returns its result; a panic of `f` is
    /// resumed here.
    ///
    /// Each call passes its own `data`: the closure runs on the pointer of
    /// its own call, whichever thread runs it, so callers may pass different
    /// objects, even of different types. The lock only orders the closures
    /// (and guards): it is what every access to one object must go through.
    ///
    /// # Safety
    ///
    /// - `data` is valid for reads and writes of a `T` until this call
    ///   returns;
    /// - while this call runs, every other access to `*data` is made under
    ///   this lock: by a holder of this lock (a guard), or by a closure of a
    ///   `combine` on this lock with the same pointer.
    ///
    /// # Panics
    ///
    /// Resumes a panic of `f`. In debug builds, panics if called from inside
    /// a closure running on this lock (which would wait for itself). A
    /// thread that holds this lock (a guard) deadlocks, as with a second
    /// `lock()`.
    #[inline]
    pub unsafe fn combine<T, R, F>(&self, data: *mut T, f: F) -> R
    where
        T: Send,
        F: FnOnce(&mut T) -> R + Send,
        R: Send,
    {
        // A user's loom model: the closure runs on the caller, under the
        // lock (see `crate::model`).
        #[cfg(all(loom, feature = "loom", not(numa_loom)))]
        {
            self.lock.acquire();
            // SAFETY: acquired just above; the caller's contract.
            return unsafe { self.run_held(data, f) };
        }
        reentry::check(self.addr(), "combine");
        if self.lock.try_acquire() {
            // SAFETY: acquired just above; the caller's contract.
            return unsafe { self.run_held(data, f) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.combine_contended(data, f) }
    }

    /// [`combine`](RawCombiningMutex::combine) once its one attempt at the
    /// global lock failed. Out of line, so the uncontended `combine` (one
    /// CAS, the closure, one store) inlines into its caller as `lock()`
    /// does: a call and a closure moved through memory cost one thread's
    /// locktorture and kv 2-4% against CNA's guard.
    ///
    /// # Safety
    ///
    /// As for [`combine`](RawCombiningMutex::combine).
    #[inline(never)]
    unsafe fn combine_contended<T, R, F>(&self, data: *mut T, f: F) -> R
    where
        T: Send,
        F: FnOnce(&mut T) -> R + Send,
        R: Send,
    {
        // This thread's last batches here served only itself: wait for the
        // global lock as `lock()` does (see `combining/solo.rs`).
        if solo::skip_queue(self.addr() as usize) {
            #[cfg(feature = "stats")]
            self.lock.counters.combine_solo();
            // `combine` just tried the word.
            self.lock.acquire_contended();
            // SAFETY: acquired just above; the caller's contract.
            return unsafe { self.run_held(data, f) };
        }
        // SAFETY: forwarded contract; the slot holds an `F` on `T`, which is
        // what `data` points to.
        let slot =
            unsafe { self.combine_slow(data.cast(), Slot::<T, F, R>::new(f), run_slot::<T, F, R>) };
        // SAFETY: our request is done (or we ran it ourselves): nobody else
        // accesses the slot any more, and the combiner's writes happen-before
        // (DONE's Release swap, our Acquire load).
        let out = unsafe { slot.with_mut(|s| (*s).take_out()) };
        match out.expect("a served request has a result") {
            Ok(r) => r,
            Err(panic) => resume_unwind(panic),
        }
    }

    /// Runs `f` on `*data` on this thread if the global lock is free at once
    /// (one attempt, as `try_lock`), and returns its result; `None`, without
    /// queueing anything, if the lock is held or contended. `f` never runs on
    /// another thread, so neither it, its result nor `T` need be `Send`.
    ///
    /// # Safety
    ///
    /// As for [`combine`](RawCombiningMutex::combine).
    ///
    /// # Panics
    ///
    /// Resumes a panic of `f`, after releasing the lock.
    pub unsafe fn try_combine<T: ?Sized, R>(
        &self,
        data: *mut T,
        f: impl FnOnce(&mut T) -> R,
    ) -> Option<R> {
        if !self.lock.try_acquire() {
            return None;
        }
        // SAFETY: acquired just above; the caller's contract.
        Some(unsafe { self.run_held(data, f) })
    }

    /// Runs `f` on `*data` on this thread if the global lock can be acquired
    /// within `timeout` (CNA's timed acquisition, which does not queue: see
    /// [`crate::timed`]); `None` once the timeout passed. Never queues a
    /// request (a request cannot leave the MCS queue before it is served).
    ///
    /// # Safety
    ///
    /// As for [`combine`](RawCombiningMutex::combine).
    ///
    /// # Panics
    ///
    /// Resumes a panic of `f`, after releasing the lock. In debug builds,
    /// panics if called from inside a closure running on this lock.
    #[cfg(not(numa_loom))]
    pub unsafe fn combine_for<T: ?Sized, R>(
        &self,
        data: *mut T,
        timeout: std::time::Duration,
        f: impl FnOnce(&mut T) -> R,
    ) -> Option<R> {
        reentry::check(self.addr(), "combine_for");
        if !self.lock.try_acquire_for(timeout) {
            return None;
        }
        // SAFETY: acquired just above; the caller's contract.
        Some(unsafe { self.run_held(data, f) })
    }

    /// As [`combine_for`](RawCombiningMutex::combine_for), with a deadline.
    ///
    /// # Safety
    ///
    /// As for [`combine`](RawCombiningMutex::combine).
    ///
    /// # Panics
    ///
    /// As [`combine_for`](RawCombiningMutex::combine_for).
    #[cfg(not(numa_loom))]
    pub unsafe fn combine_until<T: ?Sized, R>(
        &self,
        data: *mut T,
        deadline: std::time::Instant,
        f: impl FnOnce(&mut T) -> R,
    ) -> Option<R> {
        reentry::check(self.addr(), "combine_until");
        if !self.lock.try_acquire_until(deadline) {
            return None;
        }
        // SAFETY: acquired just above; the caller's contract.
        Some(unsafe { self.run_held(data, f) })
    }

    /// Runs `f` on `*data` on this thread and releases the global lock (also
    /// when `f` unwinds).
    ///
    /// # Safety
    ///
    /// This thread holds the global lock (this call ends the acquisition);
    /// `data` satisfies [`combine`](RawCombiningMutex::combine)'s contract.
    unsafe fn run_held<T: ?Sized, R>(&self, data: *mut T, f: impl FnOnce(&mut T) -> R) -> R {
        let _release = Release(&self.lock);
        // SAFETY: we hold the lock that every other access to `*data` goes
        // through, and `data` is valid (contract).
        reentry::running(self.addr(), || f(unsafe { &mut *data }))
    }

    /// Joins this lock's bound queue set, binding one from the pool if
    /// none is (`None`: the pool has none free); the set stays bound until
    /// the handle is dropped.
    pub(super) fn join_queues(&self) -> Option<Joined<'_>> {
        // The pool scan starts at a point that spreads neighbouring locks
        // (16 bytes apart) over neighbouring sets.
        self.queue_set.join(self.addr() as usize >> 4)
    }

    /// The request queue of the calling thread's NUMA node in `set`.
    pub(super) fn my_queue<'s>(&self, set: &'s Joined<'_>) -> &'s Queue {
        // Before the request is published: the first node lookup allocates
        // (see `node::before_enqueue`).
        let numa = crate::node::before_enqueue();
        &set.set().queues[numa as usize % COMBINING_QUEUES]
    }

    /// Takes the global lock and runs the closure in `slot` on `data` on this
    /// thread, without queueing a request.
    ///
    /// # Safety
    ///
    /// As for [`combine`](RawCombiningMutex::combine); `run` runs `slot` on
    /// `data`, and the slot's closure has not run.
    unsafe fn run_unqueued<S>(
        &self,
        data: *mut (),
        slot: &UnsafeCell<S>,
        run: unsafe fn(*const (), *mut ()),
    ) {
        self.lock.acquire();
        let _release = Release(&self.lock);
        // SAFETY: we hold the global lock, which every access to `data` goes
        // through (forwarded contract); the slot is ours, its closure has not
        // run, and it holds an `F` on `data`'s type.
        reentry::running(self.addr(), || unsafe {
            run(ptr::from_ref(slot).cast(), data)
        });
    }

    /// Queues a request for `slot` on our node's queue and waits until it
    /// ran, combining when we are our node's combiner. Nested inside this
    /// thread's own queued request on this lock (a signal handler that
    /// interrupted its wait), takes the global lock instead and runs the
    /// closure itself (see the [module docs](super#signal-handlers)).
    ///
    /// # Safety
    ///
    /// As for [`combine`](RawCombiningMutex::combine); `run` runs `slot` on
    /// `data`. Returns the slot, its closure run.
    #[cold]
    unsafe fn combine_slow<S>(
        &self,
        data: *mut (),
        slot: UnsafeCell<S>,
        run: unsafe fn(*const (), *mut ()),
    ) -> UnsafeCell<S> {
        if nesting::is_queued(self.addr()) {
            // A request queued behind our own interrupted one could wait for
            // ever: when that one is (or becomes) its node's combiner, the
            // batch waits until this call returns. The global lock handles
            // an acquisition nested in its own wait (`node::current`).
            // SAFETY: forwarded contract; the slot's closure has not run.
            unsafe { self.run_unqueued(data, &slot, run) };
            return slot;
        }
        nesting::queued(self.addr(), move || {
            let Some(set) = self.join_queues() else {
                // The pool has no free queue set (at least
                // `COMBINING_POOL_SIZE` locks are contended): wait for the
                // global lock as `lock()` does.
                // SAFETY: forwarded contract; the slot's closure has not run.
                unsafe { self.run_unqueued(data, &slot, run) };
                return slot;
            };
            #[cfg(feature = "stats")]
            {
                self.lock.counters.binding_write();
                self.lock.counters.combine_request();
            }
            let queue = self.my_queue(&set);
            let (served, slot) = Queued::with(slot, data, run, |request| {
                let pred = enqueue(queue, request);
                // SAFETY: forwarded; `request` was just enqueued on `queue`
                // and lives (beside its slot) until `with` returns, after
                // `serve`.
                unsafe { self.serve(queue, request, pred) }
            });
            solo::queued(self.addr() as usize, matches!(served, Served::Combined(1)));
            // Our last access to the set was in `serve` (our request is done,
            // or our batch closed the queue or handed it on).
            self.end_use(set, served);
            slot
        })
    }

    /// Ends our use of the queue set after `serve`: a combiner leaves for
    /// its whole batch (which gives the set back if no other request is
    /// counted); a request that another thread's batch served was left for
    /// by that combiner (see `combining/pool.rs`).
    pub(super) fn end_use(&self, set: Joined<'_>, served: Served) {
        match served {
            Served::Done => set.served(),
            Served::Combined(n) => {
                #[cfg(feature = "stats")]
                self.lock.counters.binding_write();
                set.leave_for(n);
            }
        }
    }

    /// The rest of a queued request's life: links `request` behind `pred`
    /// (if any), waits until its closure ran, or runs a batch if it is its
    /// node's combiner.
    ///
    /// # Safety
    ///
    /// `request` was enqueued on `queue` by [`enqueue`], which returned
    /// `pred`, and is not moved or freed before this returns; its slot and
    /// data are as [`combine`](RawCombiningMutex::combine) requires.
    pub(super) unsafe fn serve(
        &self,
        queue: &Queue,
        request: &Request,
        pred: *mut Request,
    ) -> Served {
        let me = ptr::from_ref(request).cast_mut();
        if !pred.is_null() {
            // Release: publishes our request (and, before it, our swap into
            // the tail) to the combiner that follows this link (Acquire),
            // runs our closure and leaves the queue set for us.
            // SAFETY: `pred` is not done before its combiner has read this
            // link (see the module docs), so it is alive.
            unsafe { (*pred).next.store(me, Ordering::Release) };
            // Acquire inside: pairs with the Release swap of DONE or COMBINER.
            if crate::node::wait_signal(&request.status, self.lock.config()) == DONE {
                return Served::Done;
            }
        }
        // We are our node's combiner.
        self.lock.acquire();
        // SAFETY: we hold the global lock; `me` heads `queue` (we swapped into
        // an empty queue, or the previous combiner made us the head).
        // (`request` lives until `serve` returns, after the batch.)
        Served::Combined(reentry::running(self.addr(), || unsafe {
            self.run_batch(queue, me)
        }))
    }

    /// Runs the closures of `queue` from `first` (our own request) on, at
    /// most a batch, then releases the global lock and makes the next waiter
    /// combiner, or closes the queue. Returns how many closures it ran, ours
    /// included.
    ///
    /// # Safety
    ///
    /// We hold the global lock; `first` is our request and heads `queue`.
    unsafe fn run_batch(&self, queue: &Queue, first: *mut Request) -> u32 {
        // The batch's clock starts when a second closure is found: a
        // combiner that serves only itself (no waiter of its node) reads no
        // clock, as a plain lock and unlock would not.
        let mut start = None;
        // Served waiters that parked, woken once the lock is released: a
        // futex wake-up costs microseconds, which the lock's hold time should
        // not pay for.
        let mut wake = Wakes::new();
        let mut cur = first;
        let mut served = 0;
        loop {
            // SAFETY: `cur` is alive (ours, or not yet done); its closure has
            // not run (it is run once, here); `data` is its own submitter's,
            // whose contract puts it under the lock we hold.
            unsafe { ((*cur).run)((*cur).slot, (*cur).data) };
            served += 1;
            // Acquire: pairs with the Release link store of the waiter behind
            // `cur`, so its request's fields and closure are visible.
            // SAFETY: `cur` is alive until we mark it done, below.
            let mut next = unsafe { (*cur).next.load(Ordering::Acquire) };
            if next.is_null() {
                // Relaxed (both): an empty tail publishes nothing; the next
                // request to swap it in finds no predecessor and touches
                // nothing of ours (it gets the data through the global lock).
                if queue
                    .tail
                    .compare_exchange(cur, ptr::null_mut(), Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    if cur != first {
                        // SAFETY: `cur` is alive and served; this is our last
                        // access to it.
                        wake.done(unsafe { finish(cur, DONE) });
                    }
                    // SAFETY: we hold the global lock (contract).
                    unsafe { self.lock.release() };
                    wake.wake_all();
                    return served;
                }
                // A request swapped itself in behind `cur` and has not linked
                // yet. Its link is usually a few instructions (and one line
                // transfer) away: look again for at most
                // `COMBINE_LINK_SPIN_NS`, and go on with the batch if it
                // came.
                match spin_for_next(cur) {
                    Some(linked) => {
                        sync::event("combine-late-link");
                        next = linked;
                    }
                    None => {
                        // Its thread may be preempted between its swap and
                        // its link. Waiting for the link while holding the
                        // global lock would stall every node's combiner and
                        // every guard with it; release the lock first, and
                        // hand combining to that request once it links (it
                        // takes the global lock anew).
                        // SAFETY: we hold the global lock (contract).
                        unsafe { self.release_and_hand_over(cur, first, wake) };
                        return served;
                    }
                }
            }
            if cur != first {
                // SAFETY: as above; we have read its link.
                wake.done(unsafe { finish(cur, DONE) });
            }
            // (Under loom the clock is logical: only the count bound.)
            let now = if cfg!(numa_loom) { 0 } else { sync::now_ns() };
            let since = *start.get_or_insert(now);
            if served >= BATCH || now.saturating_sub(since) >= COMBINE_BATCH_NS {
                // SAFETY: we hold the global lock (contract).
                unsafe { self.lock.release() };
                sync::event("combine-hand-over");
                // SAFETY: `next` waits (not run); this is our last access.
                wake.hand_over(unsafe { finish(next, COMBINER) });
                wake.wake_all();
                return served;
            }
            cur = next;
        }
    }
}

impl<Tn: Tunables> RawCombiningMutex<Tn> {
    /// Ends a batch whose last closure so far (`cur`'s) has a successor that
    /// swapped the queue's tail but has not linked: releases the global lock,
    /// wakes the waiters served so far, waits for the link and makes the
    /// successor its node's combiner.
    ///
    /// # Safety
    ///
    /// We hold the global lock; `cur` ran, is not done, and is `first` (our
    /// own request) or a request of the batch `first` began; `wake` holds the
    /// batch's served waiters before `cur`.
    unsafe fn release_and_hand_over(&self, cur: *mut Request, first: *mut Request, wake: Wakes) {
        // SAFETY: we hold the global lock (contract).
        unsafe { self.lock.release() };
        sync::event("combine-unlinked-successor");
        // The waiters served so far are done: their wake-ups do not wait for
        // the link either.
        wake.wake_all();
        let next = wait_next(cur, self.lock.config());
        let mut last = Wakes::new();
        if cur != first {
            // SAFETY: `cur` is alive and served; we have read its link.
            last.done(unsafe { finish(cur, DONE) });
        }
        // SAFETY: `next` waits (not run); this is our last access.
        last.hand_over(unsafe { finish(next, COMBINER) });
        last.wake_all();
    }
}

/// How a queued request's [`serve`](RawCombiningMutex::serve) ended.
pub(super) enum Served {
    /// Another thread's batch ran it (its combiner leaves the queue set for
    /// it).
    Done,
    /// We were our node's combiner and ran this many closures, ours included.
    Combined(u32),
}

/// The status words of served requests whose submitters parked, to wake
/// after the batch (at most one per closure of a batch), and that of the
/// next combiner, woken first.
///
/// The array is left uninitialised (only `..len` is written): zeroing its
/// 512 bytes on every batch would cost a combiner that serves only itself
/// more than its queue operations.
pub(super) struct Wakes {
    next_combiner: Option<*const AtomicU32>,
    words: [core::mem::MaybeUninit<*const AtomicU32>; BATCH as usize],
    len: usize,
}

impl Wakes {
    pub(super) fn new() -> Self {
        Wakes {
            next_combiner: None,
            words: [const { core::mem::MaybeUninit::uninit() }; BATCH as usize],
            len: 0,
        }
    }

    /// Remembers the word of a served request (if its submitter parked).
    pub(super) fn done(&mut self, word: Option<*const AtomicU32>) {
        if let Some(w) = word {
            self.words[self.len].write(w);
            self.len += 1;
        }
    }

    /// Remembers the word of the next combiner (if it parked).
    pub(super) fn hand_over(&mut self, word: Option<*const AtomicU32>) {
        self.next_combiner = word;
    }

    /// Wakes every remembered waiter, the next combiner first: the next
    /// batch (and the global lock's next turn for this node) waits for it,
    /// while a served waiter only has to return. Each may have returned
    /// already (a spurious wake-up saw the status): the wake-up names the
    /// address only.
    fn wake_all(self) {
        self.wake_with(sync::unpark_one);
    }

    /// [`wake_all`](Wakes::wake_all) through `unpark`.
    pub(super) fn wake_with(self, mut unpark: impl FnMut(*const AtomicU32)) {
        if let Some(w) = self.next_combiner {
            unpark(w);
        }
        for w in &self.words[..self.len] {
            // SAFETY: `done` wrote every entry below `len`.
            unpark(unsafe { w.assume_init() });
        }
    }
}

/// Looks for `cur`'s successor's link (it swapped the tail already) for at
/// most [`COMBINE_LINK_SPIN_NS`] (under loom: once); `None` if it has not
/// linked by then. Acquire: pairs with its Release link store.
fn spin_for_next(cur: *mut Request) -> Option<*mut Request> {
    let spins = if cfg!(numa_loom) {
        1
    } else {
        COMBINE_LINK_SPIN_NS.div_ceil(crate::backoff::ns_per_spin())
    };
    for _ in 0..spins {
        if !cfg!(numa_loom) {
            sync::spin_loop();
        }
        // SAFETY: `cur` is alive (not yet done).
        let next = unsafe { (*cur).next.load(Ordering::Acquire) };
        if !next.is_null() {
            return Some(next);
        }
    }
    None
}

/// Waits until `cur`'s successor has linked itself (it swapped the tail
/// already) and returns it (Acquire: pairs with its Release link store).
fn wait_next(cur: *mut Request, cfg: &crate::Config) -> *mut Request {
    let mut spin = crate::backoff::SpinWait::new(cfg.spin_budget_ns);
    loop {
        // SAFETY: `cur` is alive (not yet done).
        let next = unsafe { (*cur).next.load(Ordering::Acquire) };
        if !next.is_null() {
            return next;
        }
        spin.snooze();
    }
}

/// Swaps `value` into the status word of `request`; returns the word's
/// address if its submitter parked (the caller wakes it with
/// [`sync::unpark_one`]).
///
/// # Safety
///
/// `request` is alive. After the swap its submitter may return and free it:
/// the returned address may only be used to wake it.
#[must_use]
unsafe fn finish(request: *mut Request, value: u32) -> Option<*const AtomicU32> {
    // SAFETY: alive until the swap (contract); `addr_of!` makes no reference
    // that would outlive it.
    let status = unsafe { ptr::addr_of!((*request).status) };
    // Release: the closure's effects and the result in the slot (DONE), or
    // our batch (COMBINER), happen-before the submitter's Acquire load.
    // SAFETY: `status` is alive until this swap completes.
    let parked = unsafe { (*status).swap(value, Ordering::Release) } == crate::node::PARKED;
    parked.then_some(status)
}

impl RawCombiningMutex<Global> {
    /// A new unlocked lock using the process-wide tunables
    /// ([`Config::global`](crate::Config::global)); `const` outside loom builds.
    #[cfg(not(numa_loom))]
    pub const fn new() -> Self {
        Self::from_tunables(Global)
    }

    /// A new unlocked lock (loom build: not `const`).
    #[cfg(numa_loom)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self::from_tunables(Global)
    }
}

impl RawCombiningMutex<&'static crate::Config> {
    /// A new unlocked lock with its own tunables (`const` outside loom builds).
    #[cfg(not(numa_loom))]
    pub const fn with_config(config: &'static crate::Config) -> Self {
        Self::from_tunables(config)
    }

    /// A new unlocked lock with its own tunables (loom build: not `const`).
    #[cfg(numa_loom)]
    pub fn with_config(config: &'static crate::Config) -> Self {
        Self::from_tunables(config)
    }
}

#[cfg(not(numa_loom))]
impl Default for RawCombiningMutex<Global> {
    fn default() -> Self {
        Self::new()
    }
}

impl<Tn: Tunables> core::fmt::Debug for RawCombiningMutex<Tn> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RawCombiningMutex")
            .field("locked", &self.lock.is_held())
            .field("queue_set", &self.queue_set.snapshot())
            .finish_non_exhaustive()
    }
}

/// The global lock as the `lock_api` traits see it: CNA's core, except that
/// `acquire` first checks (debug builds) that this thread is not running a
/// closure of this lock, which would wait for itself.
#[cfg(not(numa_loom))]
struct Core<'a, Tn: Tunables>(&'a RawCombiningMutex<Tn>);

#[cfg(not(numa_loom))]
impl<Tn: Tunables> Core<'_, Tn> {
    #[inline]
    #[track_caller]
    fn acquire(&self) {
        reentry::check(self.0.addr(), "lock()");
        self.0.lock.acquire();
    }

    #[inline]
    fn try_acquire(&self) -> bool {
        self.0.lock.try_acquire()
    }

    /// # Safety
    ///
    /// As for [`RawLock::release`].
    #[inline]
    unsafe fn release(&self) {
        // SAFETY: forwarded contract.
        unsafe { self.0.lock.release() }
    }

    /// # Safety
    ///
    /// As for [`RawLock::release_fair`].
    #[inline]
    unsafe fn release_fair(&self) {
        // SAFETY: forwarded contract.
        unsafe { self.0.lock.release_fair() }
    }

    #[inline]
    fn is_held(&self) -> bool {
        self.0.lock.is_held()
    }

    #[inline]
    fn try_acquire_for(&self, timeout: std::time::Duration) -> bool {
        self.0.lock.try_acquire_for(timeout)
    }

    #[inline]
    fn try_acquire_until(&self, deadline: std::time::Instant) -> bool {
        self.0.lock.try_acquire_until(deadline)
    }
}

// The core is CNA's lock (`Core` only adds a debug check before `acquire`),
// whose `acquire`/`try_acquire*`/`release*` meet the glue's contract.
crate::glue::raw_mutex_glue! {
    impl[Tn: Tunables] for RawCombiningMutex<Tn>;
    init = Self::from_tunables(Tn::DEFAULT);
    core = |this| Core(this);
    unlock = release;
}
