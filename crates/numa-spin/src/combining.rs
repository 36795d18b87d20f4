//! [`CombiningMutex`]: a NUMA-aware combining lock. A thread that finds the
//! lock busy does not wait for the lock; it queues its critical section (a
//! closure) and a *combiner* on its NUMA node runs the queued closures of its
//! node, one after another, under the lock, so the protected data stays in
//! one core's cache for a whole batch.
//!
//! # Algorithm
//!
//! The shape of H-Synch (Fatourou and Kallimanis, "Revisiting the Combining
//! Synchronization Technique", PPoPP 2012, section 4): one CC-Synch request
//! queue per NUMA node, and a global lock among the nodes' combiners.
//!
//! - **Fast path.** `combine` first tries the global lock (a CNA
//!   [`RawMutex`](crate::RawMutex), the same single attempt as `try_lock`);
//!   if it gets it, it runs its closure itself and releases it. Uncontended,
//!   `combine` costs CNA's lock and unlock.
//! - **Request queue.** Otherwise the caller builds a request on its own
//!   stack (its closure, a slot for the result, a status word) and appends it
//!   to its node's queue with one swap of the queue's tail (an MCS queue,
//!   Mellor-Crummey and Scott 1991). If the queue was empty it is its node's
//!   combiner; otherwise it waits on its status word (spin, then park, the
//!   policy of the queue locks: [`Config::wait_policy`](crate::Config)).
//! - **Combining.** The combiner takes the global lock (queueing in CNA
//!   behind the other nodes' combiners and `lock()` callers), then runs the
//!   closures of its queue in arrival order, its own first: after each
//!   closure it reads the request's successor link and only then marks the
//!   request done, which lets the waiter return. After [`COMBINE_BATCH`]
//!   closures or [`COMBINE_BATCH_NS`] ns it releases the global lock and
//!   makes the next waiter of its queue the node's combiner, which takes the
//!   global lock anew: CNA then orders the nodes' combiners, so no node
//!   starves (CNA's own bounds apply between the batches). A combiner whose
//!   queue runs empty closes it with a CAS and releases the global lock.
//! - **`lock()`** takes the global lock directly: a guard and a combiner
//!   exclude each other, as two guards do.
//!
//! # Why a waiter never returns while its closure is in use
//!
//! A request lives on its waiter's stack, and the waiter returns only once
//! its status word reads `DONE` (or `COMBINER`, when it runs the closures
//! itself). The combiner's last accesses to a request are, in this order: the
//! call of its closure (which writes the result into the waiter's slot), the
//! read of its successor link, and the swap of `DONE` into its status word
//! (Release; the waiter's load is Acquire, so the result and everything the
//! closure did are visible to it). After the swap the combiner touches the
//! request only through the futex wake-up, which names its address and reads
//! nothing (a wake-up of a word that was reused is a spurious one). Nobody
//! else reaches a request: its predecessor's link points to it, but the
//! predecessor's request is done (its link was read) before this one is run.
//! A waiter made combiner is past its own request's last outside access (the
//! `COMBINER` swap) and becomes its only user.
//!
//! # Panics
//!
//! A panicking closure is caught on the combiner (`catch_unwind`) and its
//! payload is resumed on the thread that submitted it, once that thread has
//! its result back; the combiner goes on with the next closure. The data is
//! not poisoned (as with `parking_lot`): a closure that panics halfway leaves
//! the data as it was at the panic.
//!
//! # Bounds and costs
//!
//! - A waiter's closure runs after the closures queued before it on its node
//!   (at most [`COMBINE_BATCH`] per batch) and, between batches, after the
//!   other nodes' batches that CNA orders before its node's next combiner.
//! - A combiner preempted inside a batch stalls every waiter it would serve,
//!   and the global lock, until it runs again: the batch bounds the work
//!   (64 closures, 50 us), not such a stall. On machines with more runnable
//!   threads than CPUs a combiner is as exposed to preemption as any lock
//!   holder.
//! - Size: the CNA word (8 bytes) and one 128-byte line per request queue
//!   ([`COMBINING_QUEUES`] of them; nodes beyond share queues, node index
//!   modulo the count).
//!
//! # When to use it
//!
//! Short critical sections on shared data, under contention: counters,
//! queues, small maps, allocator free lists. Not for closures that block
//! (sleep, I/O, another lock held long: every waiter of the node waits behind
//! it), that allocate or work a lot (the combiner's thread pays for them),
//! or that need the caller's thread-local state (they may run on another
//! thread).

use core::marker::PhantomData;
use core::ptr;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use crossbeam_utils::CachePadded;

use crate::config::{Global, Tunables};
use crate::raw_lock::RawLock;
use crate::sync::{self, AtomicPtr, AtomicU32, Ordering, UnsafeCell};

/// How many closures a combiner runs before it hands combining on (the
/// count bound of a batch; CC-Synch's `h`).
pub const COMBINE_BATCH: u32 = 64;

/// How long, in ns, a combiner runs closures before it hands combining on
/// (the time bound of a batch, checked after each closure that has a
/// successor, from the end of the combiner's first closure on: a combiner
/// that serves only itself reads no clock).
pub const COMBINE_BATCH_NS: u64 = 50_000;

/// Request queues per lock; a thread on NUMA node `n` uses queue
/// `n % COMBINING_QUEUES`.
pub const COMBINING_QUEUES: usize = 8;

/// The count bound in effect: 2 in loom models, so that a model of three
/// threads sees a combiner run another's closure and then hand over.
const BATCH: u32 = if cfg!(numa_loom) { 2 } else { COMBINE_BATCH };

/// `Request::status`: queued, not served yet (the value `node::wait_signal`
/// waits on).
const WAIT: u32 = crate::node::WAIT;
/// `Request::status`: the closure ran; its result is in the slot.
const DONE: u32 = crate::node::HEAD;
/// `Request::status`: you are your node's combiner; your closure has not run.
const COMBINER: u32 = crate::node::HEAD_OWNER;

/// One queued closure, on its submitter's stack.
#[repr(align(128))]
struct Request {
    /// The next request of the same queue; null until the successor links.
    next: AtomicPtr<Request>,
    /// [`WAIT`], `PARKED` (see [`crate::node::wait_signal`]), [`DONE`] or
    /// [`COMBINER`].
    status: AtomicU32,
    /// Runs the closure in `slot` on the data (a `run_slot` instance).
    run: unsafe fn(*const (), *mut ()),
    /// The submitter's [`Slot`], type-erased.
    slot: *const (),
}

/// The closure and, once it ran, its result (or panic), on the submitter's
/// stack.
struct Slot<T, F, R> {
    f: Option<F>,
    out: Option<std::thread::Result<R>>,
    _data: PhantomData<fn(&mut T)>,
}

/// Runs the closure of a `Slot<T, F, R>` (in a [`UnsafeCell`]) on `data`,
/// catching a panic into the slot.
///
/// # Safety
///
/// `slot` points to a live `UnsafeCell<Slot<T, F, R>>` whose closure has not
/// run, accessed by nobody else meanwhile; `data` points to the `T` the
/// caller holds the lock of.
unsafe fn run_slot<T, F: FnOnce(&mut T) -> R, R>(slot: *const (), data: *mut ()) {
    let cell = slot.cast::<UnsafeCell<Slot<T, F, R>>>();
    // SAFETY: per the contract, the cell is live and ours until we mark its
    // request done; the submitter wrote it before publishing the request
    // (Release link / swap, read by our Acquire link load) and reads it only
    // after our DONE swap (Release, its Acquire load).
    unsafe {
        (*cell).with_mut(|s| {
            let f = (*s).f.take().expect("a request runs once");
            // SAFETY: we hold the lock that protects `data` (contract).
            let data = &mut *data.cast::<T>();
            (*s).out = Some(catch_unwind(AssertUnwindSafe(|| f(data))));
        });
    }
}

/// The raw part of [`CombiningMutex`]: the global lock (a CNA lock with the
/// process-wide tunables) and the per-node request queues.
///
/// Implements `lock_api` 0.5's `RawMutex`, `RawMutexFair` and `RawMutexTimed`
/// (all three are CNA's: `lock()` guards never combine). [`combine`]
/// (`RawCombiningMutex::combine`) is the combining acquisition, on data the
/// caller passes.
///
/// [`combine`]: RawCombiningMutex::combine
///
/// Generic over where its tunables live, as [`RawLock`]: the process-wide
/// ones ([`Global`], [`new`](RawCombiningMutex::new)) or a lock's own
/// ([`with_config`](RawCombiningMutex::with_config)).
pub struct RawCombiningMutex<Tn: Tunables = Global> {
    lock: RawLock<true, Tn>,
    queues: [CachePadded<AtomicPtr<Request>>; COMBINING_QUEUES],
}

// SAFETY: the queue tails point to requests that their submitters keep alive
// until served (see the module docs); the lock is the CNA lock's.
unsafe impl<Tn: Tunables> Send for RawCombiningMutex<Tn> {}
// SAFETY: as for `Send`: every shared access goes through atomics.
unsafe impl<Tn: Tunables> Sync for RawCombiningMutex<Tn> {}

impl<Tn: Tunables> RawCombiningMutex<Tn> {
    #[cfg(not(numa_loom))]
    const fn from_tunables(tunables: Tn) -> Self {
        RawCombiningMutex {
            lock: RawLock::from_tunables(tunables),
            queues: [const { CachePadded::new(AtomicPtr::new(ptr::null_mut())) }; COMBINING_QUEUES],
        }
    }

    /// Under loom atomics are not `const`.
    #[cfg(numa_loom)]
    fn from_tunables(tunables: Tn) -> Self {
        RawCombiningMutex {
            lock: RawLock::from_tunables(tunables),
            queues: core::array::from_fn(|_| CachePadded::new(AtomicPtr::new(ptr::null_mut()))),
        }
    }

    /// The global lock.
    pub fn raw_lock(&self) -> &RawLock<true, Tn> {
        &self.lock
    }

    /// Runs `f` on `*data` under the lock, on this thread or on a combiner of
    /// this thread's NUMA node, and returns its result; a panic of `f` is
    /// resumed here.
    ///
    /// # Safety
    ///
    /// `data` points to a `T` that is accessed only under this lock (by
    /// `combine` on this lock with the same `data`, or by a holder of this
    /// lock), and stays valid while any `combine` on this lock runs. The
    /// caller does not hold the lock.
    pub unsafe fn combine<T, R, F>(&self, data: *mut T, f: F) -> R
    where
        F: FnOnce(&mut T) -> R + Send,
        R: Send,
    {
        if self.lock.try_acquire() {
            struct Release<'a, Tn: Tunables>(&'a RawLock<true, Tn>);
            impl<Tn: Tunables> Drop for Release<'_, Tn> {
                fn drop(&mut self) {
                    // SAFETY: acquired just above; this ends that acquisition
                    // (also when `f` unwinds).
                    unsafe { self.0.release() };
                }
            }
            let _release = Release(&self.lock);
            // SAFETY: we hold the lock that protects `*data` (contract).
            return f(unsafe { &mut *data });
        }
        let slot = UnsafeCell::new(Slot::<T, F, R> {
            f: Some(f),
            out: None,
            _data: PhantomData,
        });
        // SAFETY: forwarded contract; the slot holds an `F` on `T`.
        unsafe { self.combine_slow(data.cast(), &slot, run_slot::<T, F, R>) };
        // SAFETY: our request is done (or we ran it ourselves): nobody else
        // accesses the slot any more, and the combiner's writes happen-before
        // (DONE's Release swap, our Acquire load).
        let out = unsafe { slot.with_mut(|s| (*s).out.take()) };
        match out.expect("a served request has a result") {
            Ok(r) => r,
            Err(panic) => resume_unwind(panic),
        }
    }

    /// Queues the request for `slot` on our node's queue and waits until it
    /// ran, combining when we are our node's combiner.
    ///
    /// # Safety
    ///
    /// As for [`combine`](RawCombiningMutex::combine); `run` runs `slot`.
    #[cold]
    unsafe fn combine_slow<S>(
        &self,
        data: *mut (),
        slot: &UnsafeCell<S>,
        run: unsafe fn(*const (), *mut ()),
    ) {
        // Before the request is published: the first node lookup allocates
        // (see `node::before_enqueue`).
        let numa = crate::node::before_enqueue();
        let queue = &*self.queues[numa as usize % COMBINING_QUEUES];
        let cfg = self.lock.config();
        let request = Request {
            next: AtomicPtr::new(ptr::null_mut()),
            status: AtomicU32::new(WAIT),
            run,
            slot: ptr::from_ref(slot).cast(),
        };
        let me = ptr::from_ref(&request).cast_mut();
        // AcqRel (MCS's enqueue). Release: our `next = null` must
        // happen-before the link our successor writes into it, or the
        // initialization could overwrite the link. Acquire: the same for our
        // predecessor's `next = null` before our link store below. (The
        // combiner reaches our request through that link, which publishes
        // it.)
        let pred = queue.swap(me, Ordering::AcqRel);
        #[cfg(numa_loom)]
        sync::note_enqueued();
        if !pred.is_null() {
            // Release: publishes our request to the combiner that follows this
            // link (Acquire) and runs our closure.
            // SAFETY: `pred` is not done before its combiner has read this
            // link (see the module docs), so it is alive.
            unsafe { (*pred).next.store(me, Ordering::Release) };
            // Acquire inside: pairs with the Release swap of DONE or COMBINER.
            if crate::node::wait_signal(&request.status, cfg) == DONE {
                return;
            }
        }
        // We are our node's combiner.
        self.lock.acquire();
        // SAFETY: we hold the global lock; `me` heads `queue` (we swapped into
        // an empty queue, or the previous combiner made us the head).
        // (`request` lives on this frame until the batch is over.)
        unsafe { self.run_batch(queue, me, data) };
    }

    /// Runs the closures of `queue` from `first` (our own request) on, at
    /// most a batch, then releases the global lock and makes the next waiter
    /// combiner, or closes the queue.
    ///
    /// # Safety
    ///
    /// We hold the global lock; `first` is our request and heads `queue`;
    /// `data` is what the requests' closures run on.
    unsafe fn run_batch(&self, queue: &AtomicPtr<Request>, first: *mut Request, data: *mut ()) {
        let cfg = self.lock.config();
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
            // not run (it is run once, here); we hold the lock on `data`.
            unsafe { ((*cur).run)((*cur).slot, data) };
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
                    .compare_exchange(cur, ptr::null_mut(), Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    if cur != first {
                        // SAFETY: `cur` is alive and served; this is our last
                        // access to it.
                        wake.push(unsafe { finish(cur, DONE) });
                    }
                    // SAFETY: we hold the global lock (contract).
                    unsafe { self.lock.release() };
                    wake.wake_all();
                    return;
                }
                // A request swapped itself in behind `cur` and is linking.
                next = wait_next(cur, cfg);
            }
            if cur != first {
                // SAFETY: as above; we have read its link.
                wake.push(unsafe { finish(cur, DONE) });
            }
            // (Under loom the clock is logical: only the count bound.)
            let now = if cfg!(numa_loom) { 0 } else { sync::now_ns() };
            let since = *start.get_or_insert(now);
            if served >= BATCH || now.saturating_sub(since) >= COMBINE_BATCH_NS {
                // SAFETY: we hold the global lock (contract).
                unsafe { self.lock.release() };
                sync::event("combine-hand-over");
                // SAFETY: `next` waits (not run); this is our last access.
                wake.push(unsafe { finish(next, COMBINER) });
                wake.wake_all();
                return;
            }
            cur = next;
        }
    }
}

/// The status words of served requests whose submitters parked, to wake
/// after the batch (at most one per closure of a batch, plus the next
/// combiner).
///
/// The array is left uninitialised (only `..len` is written): zeroing its
/// 520 bytes on every batch would cost a combiner that serves only itself
/// more than its queue operations.
struct Wakes {
    words: [core::mem::MaybeUninit<*const AtomicU32>; BATCH as usize + 1],
    len: usize,
}

impl Wakes {
    fn new() -> Self {
        Wakes {
            words: [const { core::mem::MaybeUninit::uninit() }; BATCH as usize + 1],
            len: 0,
        }
    }

    /// Remembers `word` (if any) for [`wake_all`](Wakes::wake_all).
    fn push(&mut self, word: Option<*const AtomicU32>) {
        if let Some(w) = word {
            self.words[self.len].write(w);
            self.len += 1;
        }
    }

    /// Wakes every remembered waiter. Each may have returned already (a
    /// spurious wake-up saw the status): the wake-up names the address only.
    fn wake_all(self) {
        for w in &self.words[..self.len] {
            // SAFETY: `push` wrote every entry below `len`.
            sync::unpark_one(unsafe { w.assume_init() });
        }
    }
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
            .finish_non_exhaustive()
    }
}

crate::glue::raw_mutex_glue! {
    impl[Tn: Tunables] for RawCombiningMutex<Tn>;
    init = Self::from_tunables(Tn::DEFAULT);
    core = |this| &this.lock;
    unlock = release;
}

/// A mutex whose critical sections can be shipped to the lock holder:
/// [`combine`](CombiningMutex::combine) runs a closure on the data, on this
/// thread or on a combiner of this thread's NUMA node (see the
/// [module docs](self)); [`lock`](CombiningMutex::lock) returns a `lock_api`
/// guard, as [`Mutex`](crate::Mutex) does, for the critical sections that
/// cannot be closures. `lock_api::Mutex` cannot gain a method, so this is a
/// wrapper that owns one ([`as_mutex`](CombiningMutex::as_mutex) lends it).
///
/// ```
/// use numa_spin::CombiningMutex;
/// use std::sync::Arc;
///
/// let counter = Arc::new(CombiningMutex::new(0u64));
/// let threads: Vec<_> = (0..4)
///     .map(|_| {
///         let c = Arc::clone(&counter);
///         std::thread::spawn(move || {
///             for _ in 0..1000 {
///                 c.combine(|n| *n += 1);
///             }
///         })
///     })
///     .collect();
/// for t in threads {
///     t.join().unwrap();
/// }
/// assert_eq!(*counter.lock(), 4000);
/// assert_eq!(counter.combine(|n| *n), 4000);
/// ```
#[cfg(not(numa_loom))]
pub struct CombiningMutex<T: ?Sized> {
    inner: lock_api::Mutex<RawCombiningMutex, T>,
}

/// The guard of [`CombiningMutex::lock`].
#[cfg(not(numa_loom))]
pub type CombiningMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawCombiningMutex, T>;

#[cfg(not(numa_loom))]
impl<T> CombiningMutex<T> {
    /// A new unlocked mutex holding `value`.
    pub const fn new(value: T) -> Self {
        CombiningMutex {
            inner: lock_api::Mutex::new(value),
        }
    }

    /// Consumes the mutex, returning the data.
    pub fn into_inner(self) -> T {
        self.inner.into_inner()
    }
}

#[cfg(not(numa_loom))]
impl<T: ?Sized> CombiningMutex<T> {
    /// Runs `f` on the data under the lock and returns its result: on this
    /// thread if the lock is free, otherwise on the combiner of this thread's
    /// NUMA node (which may be this thread). A panic of `f` is resumed here.
    /// Deadlocks if this thread holds the lock (a guard, or inside a closure
    /// of this lock), as `lock` would.
    pub fn combine<R, F>(&self, f: F) -> R
    where
        T: Sized + Send,
        F: FnOnce(&mut T) -> R + Send,
        R: Send,
    {
        // SAFETY: `raw` only lends the raw lock (we never unlock behind the
        // wrapper's back). The data is reached only under that lock (guards
        // and closures), lives as long as `self`, and `self` outlives the call.
        unsafe { self.inner.raw().combine(self.inner.data_ptr(), f) }
    }

    /// Acquires the lock and returns a guard (CNA's acquisition: guards never
    /// combine, and exclude combiners as they exclude each other).
    pub fn lock(&self) -> CombiningMutexGuard<'_, T> {
        self.inner.lock()
    }

    /// Acquires the lock if it is free (see [`RawLock::try_acquire`]).
    pub fn try_lock(&self) -> Option<CombiningMutexGuard<'_, T>> {
        self.inner.try_lock()
    }

    /// Tries to acquire the lock until `timeout` has passed (CNA's timed
    /// acquisition, see [`crate::timed`]).
    pub fn try_lock_for(&self, timeout: std::time::Duration) -> Option<CombiningMutexGuard<'_, T>> {
        self.inner.try_lock_for(timeout)
    }

    /// A mutable reference to the data (no locking: `&mut self` is exclusive).
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut()
    }

    /// The `lock_api::Mutex` inside, for the rest of its API (`lock_arc`,
    /// `try_lock_until`, `is_locked`, ...).
    pub fn as_mutex(&self) -> &lock_api::Mutex<RawCombiningMutex, T> {
        &self.inner
    }
}

#[cfg(not(numa_loom))]
impl<T: Default> Default for CombiningMutex<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

#[cfg(not(numa_loom))]
impl<T> From<T> for CombiningMutex<T> {
    fn from(value: T) -> Self {
        Self::new(value)
    }
}

#[cfg(not(numa_loom))]
impl<T: ?Sized + core::fmt::Debug> core::fmt::Debug for CombiningMutex<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.inner.fmt(f)
    }
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::Ordering as StdOrdering;
    use std::thread::{self, ThreadId};
    use std::time::{Duration, Instant};

    /// The tail of the request queue of node 0 (the tests' threads are on
    /// node 0 unless they say otherwise).
    fn tail0<T>(m: &CombiningMutex<T>) -> *mut Request {
        // SAFETY: only read (the queue tail), never unlocked through it.
        unsafe { m.inner.raw() }.queues[0].load(StdOrdering::SeqCst)
    }

    /// Spawns `f` and waits until its request is queued on node 0 (the tail
    /// names a new request).
    fn spawn_queued<T: Send + 'static, X: Send + 'static>(
        m: &Arc<CombiningMutex<T>>,
        f: impl FnOnce(&CombiningMutex<T>) -> X + Send + 'static,
    ) -> thread::JoinHandle<X> {
        let before = tail0(m);
        let m2 = Arc::clone(m);
        let h = thread::spawn(move || f(&m2));
        let start = Instant::now();
        while tail0(m) == before {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the request never queued"
            );
            thread::yield_now();
        }
        h
    }

    /// Where each closure ran and the log it saw.
    type Ran = (ThreadId, Vec<usize>);

    fn push(m: &CombiningMutex<Vec<usize>>, i: usize) -> Ran {
        m.combine(move |v| {
            v.push(i);
            (thread::current().id(), v.clone())
        })
    }

    #[test]
    fn counts_under_oversubscription_on_two_nodes() {
        let m = Arc::new(CombiningMutex::new(0u64));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let m = Arc::clone(&m);
                thread::spawn(move || {
                    numa_topology::set_current_thread_node(Some(i % 2));
                    for _ in 0..2_000 {
                        m.combine(|n| *n += 1);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*m.lock(), 16_000);
    }

    /// Guards and combined closures exclude each other: each critical section
    /// breaks an invariant and restores it, and checks it on entry.
    #[test]
    fn guards_and_closures_exclude_each_other() {
        let m = Arc::new(CombiningMutex::new((0u64, 0u64)));
        let threads: Vec<_> = (0..6)
            .map(|i| {
                let m = Arc::clone(&m);
                thread::spawn(move || {
                    for _ in 0..1_000 {
                        let step = |p: &mut (u64, u64)| {
                            assert_eq!(p.0, p.1, "two critical sections overlapped");
                            p.0 += 1;
                            std::hint::black_box(&mut *p);
                            p.1 += 1;
                        };
                        if i % 3 == 0 {
                            step(&mut m.lock());
                        } else {
                            m.combine(step);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*m.lock(), (6_000, 6_000));
    }

    /// Checks how queued closures were served: in arrival order (each saw the
    /// log up to itself), in batches of at most `COMBINE_BATCH`, each batch
    /// on the thread that submitted its first closure (the combiner); returns
    /// how many closures ran on another thread than their own.
    fn check_batches(out: &[(ThreadId, Ran)]) -> usize {
        let mut combined = 0;
        let mut batch = (out[0].0, 0);
        for (i, (me, (ran_on, log))) in out.iter().enumerate() {
            assert_eq!(log.len(), i + 1, "closure {} ran out of order", i + 1);
            if *ran_on != batch.0 || batch.1 == COMBINE_BATCH {
                assert_eq!(
                    ran_on,
                    me,
                    "closure {} started a batch on another thread",
                    i + 1
                );
                batch = (*me, 0);
            }
            batch.1 += 1;
            if ran_on != me {
                combined += 1;
            }
        }
        combined
    }

    /// Closures queued behind a held lock run in arrival order, in batches
    /// on combiners, and each result goes back to its own caller.
    #[test]
    fn queued_closures_run_on_the_combiner_in_order() {
        let m = Arc::new(CombiningMutex::new(Vec::new()));
        let guard = m.lock();
        let hs: Vec<_> = (1..=6)
            .map(|i| {
                spawn_queued(&m, move |m: &CombiningMutex<Vec<usize>>| {
                    (thread::current().id(), push(m, i))
                })
            })
            .collect();
        drop(guard);
        let out: Vec<(ThreadId, Ran)> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(check_batches(&out) > 0, "no closure ran on a combiner");
    }

    /// A closure that panics on the combiner panics its own caller, with its
    /// payload; the closures queued before and after it run, and the lock
    /// works afterwards.
    #[test]
    fn panic_reaches_its_caller_only() {
        // The expected panic (payload 42u32) prints nothing.
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<u32>() != Some(&42) {
                report(info);
            }
        }));
        let m = Arc::new(CombiningMutex::new(Vec::new()));
        let guard = m.lock();
        let first = spawn_queued(&m, |m: &CombiningMutex<Vec<usize>>| push(m, 1));
        let panicking = spawn_queued(&m, |m: &CombiningMutex<Vec<usize>>| {
            m.combine(|v| {
                v.push(2);
                std::panic::panic_any(42u32);
            })
        });
        let last = spawn_queued(&m, |m: &CombiningMutex<Vec<usize>>| push(m, 3));
        drop(guard);
        assert_eq!(first.join().expect("the combiner panicked").1, [1]);
        let payload = panicking.join().expect_err("the panic was lost");
        assert_eq!(payload.downcast_ref::<u32>(), Some(&42));
        let (_, log) = last.join().expect("a later closure was lost");
        assert_eq!(log, [1, 2, 3]);
        assert_eq!(push(&m, 4).1, [1, 2, 3, 4]);
        assert_eq!(*m.lock(), [1, 2, 3, 4]);
    }

    /// A combiner runs at most `COMBINE_BATCH` closures, then the next waiter
    /// of its queue combines the rest.
    #[test]
    fn combiner_hands_over_after_a_batch() {
        let n = COMBINE_BATCH as usize + 2;
        let m = Arc::new(CombiningMutex::new(Vec::new()));
        let guard = m.lock();
        let hs: Vec<_> = (1..=n)
            .map(|i| {
                spawn_queued(&m, move |m: &CombiningMutex<Vec<usize>>| {
                    (thread::current().id(), push(m, i))
                })
            })
            .collect();
        drop(guard);
        let out: Vec<(ThreadId, Ran)> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        check_batches(&out);
        let last = &out[n - 1];
        assert_ne!(
            last.1.0, out[0].0,
            "the first combiner ran more than a batch"
        );
    }

    /// Uncontended, `combine` runs the closure on the caller.
    #[test]
    fn uncontended_combine_runs_on_the_caller() {
        let m = CombiningMutex::new(Vec::new());
        assert_eq!(push(&m, 7), (thread::current().id(), vec![7]));
    }
}
