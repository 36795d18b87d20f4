//! [`CombiningMutex`]: a NUMA-aware combining lock. A thread that finds the
//! lock busy does not wait for the lock; it queues its critical section (a
//! closure) and a *combiner* on its NUMA node runs the queued closures of its
//! node, one after another, under the lock, so the protected data stays in
//! one core's cache for a whole batch.
//!
//! # Algorithm
//!
//! The shape of H-Synch (Fatourou and Kallimanis, "Revisiting the Combining
//! Synchronization Technique", PPoPP 2012, section 4): one request queue per
//! NUMA node, and a global lock among the nodes' combiners. Unlike H-Synch,
//! whose per-node queues are CC-Synch's (each request swaps a fresh node into
//! the tail and writes its request into the node it got back, so the combiner
//! always owns the node after the last request), the queues here are MCS queues
//! (Mellor-Crummey and Scott 1991) of requests on the waiters' stacks, which
//! need no node recycling between threads.
//!
//! - **Fast path.** `combine` first tries the global lock (a CNA
//!   [`RawMutex`](crate::RawMutex), the same single attempt as `try_lock`);
//!   if it gets it, it runs its closure itself and releases it. Uncontended,
//!   `combine` costs CNA's lock and unlock.
//! - **Queue sets.** The per-node request queues are not in the lock: a
//!   lock that finds itself contended binds a *queue set* (one queue per
//!   node) from a process-wide pool, and gives it back when its last request
//!   has been served, as the HQ lock binds its NUMA metadata (the
//!   Linux kernel's hierarchical queued spinlock RFC, "dynamic metadata
//!   binding"). The lock's binding word counts the set's queued requests
//!   beside its index, so a join and the give-back are one CAS each and
//!   exclude each other; a combiner drops the count of its whole batch
//!   with one CAS (see `combining/pool.rs`). An uncontended lock never
//!   binds one.
//! - **Request queue.** Otherwise the caller joins the bound set (binding
//!   one if none is), builds a request on its own
//!   stack (its closure, its data pointer, a slot for the result, a status
//!   word; the request and its slot side by side from a 128-byte boundary,
//!   so a small closure and its result share the request's cache line with
//!   its link and status word) and appends it to its node's queue with one swap of the queue's
//!   tail, then links it behind its predecessor. If the queue was empty it is
//!   its node's combiner; otherwise it waits on its status word (spin, then
//!   park, the policy of the queue locks: [`Config::wait_policy`](crate::Config)).
//! - **Combining.** The combiner takes the global lock (queueing in CNA
//!   behind the other nodes' combiners and `lock()` callers), then runs the
//!   closures of its queue in arrival order, its own first, each on the data
//!   pointer of its own request: after each closure it reads the request's
//!   successor link and only then marks the request done, which lets the
//!   waiter return. After [`COMBINE_BATCH`] closures or [`COMBINE_BATCH_NS`]
//!   ns it releases the global lock and makes the next waiter of its queue the
//!   node's combiner, which takes the global lock anew: CNA then orders the
//!   nodes' combiners, so no node starves (CNA's own bounds apply between the
//!   batches). A combiner whose queue runs empty closes it with a CAS and
//!   releases the global lock.
//! - **An unlinked successor.** In an MCS queue a newcomer swaps the tail
//!   first and links itself second; preempted in between, it leaves a request
//!   whose successor is unknown. A combiner that finds this (its CAS closing
//!   the queue fails while the link is still null) looks again for the link
//!   for at most [`COMBINE_LINK_SPIN_NS`] (the link normally comes within a
//!   cache-line transfer) and, if it came, goes on with its batch. Otherwise
//!   it releases the global lock *before* it waits for the link, then hands
//!   combining to the newcomer: such a stall holds up the other nodes'
//!   combiners and `lock()` callers for at most [`COMBINE_LINK_SPIN_NS`],
//!   and only the newcomer's own node queue for longer.
//! - **Wake-ups.** A waiter that parked needs a futex wake-up (microseconds)
//!   after its status changes. The status swaps themselves (done, or
//!   combiner) happen inline, as each closure finishes, so a spinning waiter
//!   never waits behind a futex call; the wake-ups of parked ones are made
//!   after the global lock is released, the next combiner's first, so the
//!   next batch does not wait behind the done waiters' wake-ups.
//! - **Solo batches.** A batch of one (a combiner whose queue holds only its
//!   own request) costs the global lock plus the request queue and the
//!   binding word's join and leave, for nothing combined. A thread whose
//!   last [`COMBINE_SOLO_STREAK`] contended calls on a lock were such
//!   batches waits for the global lock directly on its next contended calls
//!   there, as `lock()` does, and queues a request again once every
//!   [`COMBINE_SOLO_PROBE`] of them (a probe): a probe that another thread's
//!   batch serves, or whose batch serves others, makes it combine again.
//!   The record is the thread's own (a thread-local naming one lock), so
//!   this writes no shared line. Batches of one are the rule where each
//!   node has one thread that wants the lock at a time, and where threads
//!   outnumber CPUs (most of a node's waiters are not running): on the
//!   2-CPU development machine, with threads on 2 virtual nodes, 98% of the
//!   queued requests at 32 threads were batches of one.
//! - **`lock()`** takes the global lock directly: a guard and a combiner
//!   exclude each other, as two guards do. [`try_combine`],
//!   [`combine_for`] and [`combine_until`] never queue a request (a request
//!   cannot leave an MCS queue early): they run the closure on the calling
//!   thread if they get the global lock (at once, or within the timeout with
//!   CNA's timed acquisition, see [`crate::timed`]).
//!
//! [`try_combine`]: CombiningMutex::try_combine
//! [`combine_for`]: CombiningMutex::combine_for
//! [`combine_until`]: CombiningMutex::combine_until
//!
//! # Why a waiter never returns while its request is in use
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
//! # What a closure sees
//!
//! A queued closure runs on the *combiner's* thread, not on its caller's:
//!
//! - that thread's thread-locals, [`std::thread::current`] (its name and id)
//!   and its NUMA node;
//! - that thread's stack, and what is left of it below the combiner's own
//!   frames: a closure that needs 512 KiB of stack overflows (and aborts the
//!   process) when the combiner is a thread spawned with 128 KiB, however
//!   large its caller's stack is;
//! - that thread's locks: a reentrant lock (a [`ReentrantMutex`]) held by
//!   the combiner lets the closure in, and a non-reentrant one it holds
//!   deadlocks it;
//! - a panic of the closure is reported (by the panic hook) as a panic of the
//!   combiner's thread, then caught there and resumed on the caller (see
//!   [Panics](#panics)).
//!
//! The caller waits, blocked, until its closure has run. A closure that
//! calls `combine` or `lock()` on the lock it runs under waits for itself:
//! debug builds (`debug_assertions`) detect this and panic with a message
//! that says so, instead of hanging; release builds hang, as a second
//! `lock()` on any non-reentrant mutex would.
//!
//! [`ReentrantMutex`]: crate::ReentrantMutex
//!
//! # Panics
//!
//! A panicking closure is caught on the combiner (`catch_unwind`) and its
//! payload is resumed on the thread that submitted it, once that thread has
//! its result back; the combiner goes on with the next closure. The data is
//! not poisoned (as with `parking_lot`): a closure that panics halfway leaves
//! the data as it was at the panic.
//!
//! # Fork
//!
//! In a fork's child the lock works: the requests that the parent's other
//! threads had queued, and the combiner among them, are forgotten, never
//! waited for nor read (they live on stacks the child does not have). Each
//! request queue records, beside its tail, the fork generation its requests
//! belong to (the generation the CNA lock's queues use, advanced by a
//! `pthread_atfork` child handler, see `node/fork.rs`); the first request of
//! the child to reach a queue of an older generation empties it before it
//! queues (see `combining/queue.rs`). The parent's threads also count as
//! users of the queue set bound to the lock at the fork, and they never leave
//! in the child: the binding word records the fork generation it was made
//! in, and the child's first arrival rebinds the same set with itself as its
//! only user, so the set goes back to the pool once the child's own users
//! have left (see `combining/pool.rs`). The global lock drops its own ghost
//! waiters as every CNA lock does. So a lock that the forking thread held is
//! its to unlock, in the parent and in the child (the `pthread_atfork`
//! pattern: a prepare handler locks the mutex, the parent and child handlers
//! unlock it), and then takes combiners and guards as before, across any
//! number of forks; a lock that was free stays free; a lock held by another
//! thread of the parent (a guard, or a combiner inside its batch) stays held,
//! as glibc's mutexes do. A closure that forks runs on the combiner's thread,
//! which the child then has inside a batch of requests it cannot serve:
//! do not fork from a closure.
//!
//! # Signal handlers
//!
//! A signal handler may `combine` while its thread waits in a `combine` on
//! another lock: the nested call builds its request on the handler's stack
//! and, if it becomes its node's combiner, takes the global lock with the
//! next of the thread's four queue nodes, as any CNA acquisition nested in a
//! handler does (see the crate docs, "Signal handlers and `fork`"), four
//! levels deep and beyond. A `combine` nested in the thread's own wait on the
//! *same* lock must not queue a request: behind its interrupted request,
//! which is (or may become) its node's combiner and cannot run until the
//! handler returns, it would wait for ever. So each thread keeps, in a
//! thread-local chain on its stack, the locks on which it has a request
//! queued (`combining/nesting.rs`), and such a nested call takes the global
//! lock directly (CNA's nested acquisition of a lock its thread waits for)
//! and runs its closure itself. As with any lock, a handler must not combine
//! on a lock its thread holds: a guard, or a batch the handler interrupted.
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
//! - A combiner waiting for the global lock waits as any CNA waiter does:
//!   it naps as queue head and parks behind one. Its node's request waiters
//!   never take a free lock themselves, so while the combiners sleep the
//!   threads queued behind them cannot use a lock that has come free. On the
//!   2-CPU development machine (32 threads on 2 virtual nodes, `numa-bench
//!   compare --locks combining,cna --workloads locktorture,kv --threads 32
//!   --idle-gaps`), the longest time the lock sat free while a sampled
//!   waiter waited was 430-610 us for combining against 215-500 us for CNA
//!   (medians over 16-20 interleaved rounds of 4 repeats). In every gap over
//!   300 us, both nodes' combiners were waiting for the global lock and
//!   19-25 of the 32 threads were request waiters behind them. A combiner
//!   that never sleeps there does not close the gap on that machine:
//!   waiting with [`WaitPolicy::Yield`](crate::WaitPolicy::Yield), or
//!   napping in the queue instead of parking, left the longest gaps at
//!   510-690 us against CNA's 280-530 us in the same runs (6-8 interleaved
//!   rounds of 4-5 repeats). With a CPU hog (`--hog 1`, kv, 4 and 32
//!   threads) the yielding combiner's throughput fell from 0.93-1.00x
//!   CNA's to 0.85-0.93x: there the CPUs are the scarce resource, and a
//!   waiter that keeps one keeps it from threads that could use the lock.
//!   Waking the napping queue head instead (its nap a futex wait on the
//!   tail word, and every release of the global lock by this lock a futex
//!   wake when the tail shows `HEAD_ASLEEP`) shortened the longest gaps
//!   from 611 to 442 us (locktorture) and 427 to 321 us (kv), still above
//!   CNA's 326 and 258 us, and cost half the throughput at 32 threads
//!   (0.50x and 0.64x) and 17% at 2 (6 interleaved rounds of 4 repeats).
//! - Size: [`RawCombiningMutex`] is 16 bytes, aligned to 8: the CNA lock (its
//!   two 4-byte words; 16 bytes with its own tunables, `with_config`, and
//!   more with the `stats` feature's counters) and the 8-byte binding word
//!   of its queue set. A `CombiningMutex<T>` adds `T`, rounded up to 8
//!   bytes (`CombiningMutex<u64>`: 24 bytes), so one per hash bucket is
//!   cheap.
//! - The request queues live in a queue set of the process-wide pool
//!   ([`COMBINING_POOL_SIZE`] sets, 256 KiB of zeroed static memory): one
//!   128-byte line per queue, its tail and its fork generation
//!   ([`COMBINING_QUEUES`] of them; nodes beyond share queues, node index
//!   modulo the count). A lock holds a set only while a thread that found
//!   it contended is queued on it; a contended `combine` pays one CAS on the
//!   binding word to join, and each batch one more to leave for all its
//!   requests (counted, with the `stats` feature, as `binding_writes` beside
//!   `combine_requests`: the word shares its line with the lock word, which
//!   the other nodes' combiners wait on), and the first of a contention
//!   episode also claims a set (one CAS on the pool's claim flags), which
//!   the last gives back. With every set bound to other locks, a contended
//!   `combine` takes the global lock and runs its closure itself.
//!
//! # When to use it
//!
//! Short critical sections on shared data, under contention: counters,
//! queues, small maps, allocator free lists. Not for closures that block
//! (sleep, I/O, another lock held long: every waiter of the node waits behind
//! it), that allocate or work a lot (the combiner's thread pays for them),
//! or that need the caller's thread-local state (see
//! [What a closure sees](#what-a-closure-sees)).

mod nesting;
mod pool;
mod queue;
mod raw;
mod reentry;
mod solo;
#[cfg(all(test, not(numa_loom)))]
mod tests;

pub use self::raw::RawCombiningMutex;

/// How many closures a combiner runs before it hands combining on (the
/// count bound of a batch; CC-Synch's `h`).
pub const COMBINE_BATCH: u32 = 64;

/// How many batches of one in a row (a thread combining only its own
/// closure) send a thread's next contended calls on that lock to the global
/// lock directly, without a request (see the [module docs](self)).
pub const COMBINE_SOLO_STREAK: u32 = solo::SOLO_STREAK;

/// Of a solo thread's contended calls, every this many plus one queues a
/// request again (a probe): if another thread's batch serves it, or its batch
/// serves others, the thread combines again.
pub const COMBINE_SOLO_PROBE: u32 = solo::SOLO_PROBE;

/// How long, in ns, a combiner runs closures before it hands combining on
/// (the time bound of a batch, checked after each closure that has a
/// successor, from the end of the combiner's first closure on: a combiner
/// that serves only itself reads no clock).
pub const COMBINE_BATCH_NS: u64 = 50_000;

/// How long, in ns, a combiner holding the global lock looks for the link
/// of a successor that swapped the queue's tail but has not linked yet,
/// before it releases the global lock and waits for the link without it
/// (see the [module docs](self)): the longest a successor preempted between
/// its swap and its link holds up the other nodes. The link normally follows
/// the swap within one cache-line transfer (~100-200 ns across sockets).
pub const COMBINE_LINK_SPIN_NS: u64 = 1_000;

/// Request queues per queue set (the queues a contended lock binds); a
/// thread on NUMA node `n` uses queue `n % COMBINING_QUEUES`.
pub const COMBINING_QUEUES: usize = 8;

/// Queue sets in the process-wide pool: at most this many locks hold one at
/// once (each bound set has a thread waiting on its lock). A `combine` that
/// finds its lock contended and the pool empty waits for the global lock and
/// runs its closure itself, as a `lock()` caller would. About 1 KiB each
/// ([`COMBINING_QUEUES`] cache-line pairs), 256 KiB in all, in zeroed static
/// memory: a page is touched only when a lock first binds a set on it.
pub const COMBINING_POOL_SIZE: usize = 256;

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
/// assert_eq!(counter.try_combine(|n| *n + 1), Some(4001));
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
    /// NUMA node (which may be this thread; see
    /// [What a closure sees](self#what-a-closure-sees)). A panic of `f` is
    /// resumed here.
    ///
    /// # Panics
    ///
    /// Resumes a panic of `f`. In debug builds, panics if called from inside
    /// a closure running on this lock (which would wait for itself); a thread
    /// that holds a guard of this lock deadlocks, as with a second `lock()`.
    pub fn combine<R, F>(&self, f: F) -> R
    where
        T: Sized + Send,
        F: FnOnce(&mut T) -> R + Send,
        R: Send,
    {
        // SAFETY: the data is reached only under the raw lock (guards and
        // closures; `raw` only lends the raw lock, we never unlock behind the
        // wrapper's back), it is a `T` that lives as long as `self`, and
        // `self` outlives the call.
        unsafe { self.inner.raw().combine(self.inner.data_ptr(), f) }
    }

    /// Runs `f` on the data on this thread if the lock is free at once, and
    /// returns its result; returns `None` without queueing anything if the
    /// lock is held (by a guard or a combiner) or contended. `f` never runs
    /// on another thread, so it need not be `Send`.
    ///
    /// # Panics
    ///
    /// Resumes a panic of `f` (after releasing the lock).
    pub fn try_combine<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        // SAFETY: as in `combine`; `T: ?Sized` is fine, `f` runs on this thread.
        unsafe { self.inner.raw().try_combine(self.inner.data_ptr(), f) }
    }

    /// Runs `f` on the data on this thread if the lock can be acquired within
    /// `timeout` (CNA's timed acquisition, which does not queue: see
    /// [`crate::timed`]), and returns its result; `None` once the timeout
    /// passed. Never queues a closure for a combiner.
    ///
    /// # Panics
    ///
    /// Resumes a panic of `f` (after releasing the lock). In debug builds,
    /// panics if called from inside a closure running on this lock.
    pub fn combine_for<R>(
        &self,
        timeout: std::time::Duration,
        f: impl FnOnce(&mut T) -> R,
    ) -> Option<R> {
        // SAFETY: as in `try_combine`.
        unsafe {
            self.inner
                .raw()
                .combine_for(self.inner.data_ptr(), timeout, f)
        }
    }

    /// As [`combine_for`](CombiningMutex::combine_for), with a deadline.
    ///
    /// # Panics
    ///
    /// As [`combine_for`](CombiningMutex::combine_for).
    pub fn combine_until<R>(
        &self,
        deadline: std::time::Instant,
        f: impl FnOnce(&mut T) -> R,
    ) -> Option<R> {
        // SAFETY: as in `try_combine`.
        unsafe {
            self.inner
                .raw()
                .combine_until(self.inner.data_ptr(), deadline, f)
        }
    }

    /// Acquires the lock and returns a guard (CNA's acquisition: guards never
    /// combine, and exclude combiners as they exclude each other).
    ///
    /// # Panics
    ///
    /// In debug builds, if called from inside a closure running on this lock
    /// (which would wait for itself).
    pub fn lock(&self) -> CombiningMutexGuard<'_, T> {
        self.inner.lock()
    }

    /// Acquires the lock if it is free (see [`RawLock::try_acquire`](crate::RawLock::try_acquire)).
    pub fn try_lock(&self) -> Option<CombiningMutexGuard<'_, T>> {
        self.inner.try_lock()
    }

    /// Tries to acquire the lock until `timeout` has passed (CNA's timed
    /// acquisition, see [`crate::timed`]).
    pub fn try_lock_for(&self, timeout: std::time::Duration) -> Option<CombiningMutexGuard<'_, T>> {
        self.inner.try_lock_for(timeout)
    }

    /// See [`RawCombiningMutex::request_tails`]. Not a stable API.
    #[doc(hidden)]
    pub fn request_tails(&self) -> [usize; COMBINING_QUEUES] {
        // SAFETY: only reads the queue tails; never unlocks.
        unsafe { self.inner.raw() }.request_tails()
    }

    /// See [`RawCombiningMutex::queue_set`]. Not a stable API.
    #[doc(hidden)]
    pub fn queue_set(&self) -> Option<(usize, u32)> {
        // SAFETY: only reads the binding word; never unlocks.
        unsafe { self.inner.raw() }.queue_set()
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
