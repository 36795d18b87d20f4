//! [`RawLock`]: the lock word, the fast path and the `lock_api` implementation.
//! The slow path (the queue) is in [`crate::cna`].
//!
//! # Layout
//!
//! Two 32-bit atomics, 8-byte aligned so they share a cache line:
//!
//! | word | bits | meaning |
//! | --- | --- | --- |
//! | `locked` | all | `UNLOCKED` (0), `LOCKED` (1) or `HANDED` (2: held, passed by `unlock_fair` to the queue head) |
//! | `tail` | 0 | `NO_STEAL`: the queue head forbids lock stealing (the role pvqspinlock's hybrid mode gives the pending bit) |
//! | `tail` | 1 | `HEAD_ASLEEP`: the queue head is not running (it is being woken, or it naps); a hint for arrivals |
//! | `tail` | 2 | `HEAD_CLAIM`: the queue head has waited its steal bound and claims the next release (set with `NO_STEAL`; `NO_STEAL` alone may be a timed waiter's) |
//! | `tail` | 3..32 | code of the last queue node (see [`crate::node`]), 0 = empty queue |
//!
//! Linux's qspinlock keeps locked byte, pending bit and tail in one 32-bit word and
//! unlocks with a byte store to the locked byte. Rust (and loom) forbid mixed-size
//! atomic accesses to the same memory, so the locked "byte" is a word of its own:
//! `unlock` is still one release store, and every other transition is a CAS or RMW
//! on one word. The price is that the fast path cannot see "queue non-empty" and
//! "locked" in one read; it reads the tail word once (relaxed, same cache line)
//! before its CAS to honour `NO_STEAL`.
//!
//! # Lock stealing
//!
//! A thread that finds the lock free takes it, even if threads are queued (barging,
//! as in pvqspinlock's hybrid unfair trylock and ShflLock, Kashyap et al.,
//! SOSP 2019): the releasing thread often re-takes its still-warm lock, and a queued
//! waiter that is not running does not stall everyone. Once the queue head has waited
//! `steal_bound_ns`, it sets `NO_STEAL`; the fast path, `try_lock` and the slow
//! path's steal attempt then fail until the head has acquired and cleared the flag.
//! A thread that read the tail word just before the flag was set may still complete
//! its CAS: at most one such in-flight steal per thread, so the bound holds up to one
//! steal per running thread. The head keeps the flag until it holds the lock,
//! also while it naps or yields, so past its bound the next release is the
//! head's. A head preempted while it spins (or woken late from a nap) leaves
//! the lock free behind the flag, so an arrival that finds it so watches the
//! word for `steal_bound_ns` (plus five naps while the head marks itself
//! napping) and, if it stayed free throughout, takes it past the flag
//! (`node::steal_past_absent_head`). The head's flag comes with `HEAD_CLAIM`.
//! A timed waiter (`crate::timed`) past its own bound sets `NO_STEAL` alone
//! and takes the free word past it, but not past a head's claim.
//! With `steal_bound_ns == 0` the flag is set by the
//! enqueue itself and kept until the queue is empty, which makes the lock FIFO up to
//! those in-flight races.
//!
//! # Not queueing behind a sleeping head
//!
//! A queued waiter cannot take the lock, even when it is free, until it is head;
//! and a parked one runs again only when it is made head. When more threads are
//! runnable than there are CPUs, threads that arrive while the lock is held
//! would queue behind heads that are not running, park in turn, and leave the
//! CPUs idle while each head is woken (a lock convoy). So the head marks itself
//! `HEAD_ASLEEP` for each nap, the hand-off that wakes a parked head marks it
//! too, and the head lifts the mark as soon as it runs (at the start of its
//! wait, after each nap, and at the latest when it holds the lock, for a
//! hand-off's mark that lands late); an arrival that sees the mark spins for
//! the lock word (taking it when it is free and stealing is allowed) for up to
//! the spin budget before it queues. See `crate::cna`.
//!
//! # Writes to the lock's line
//!
//! Only the fast path and `try_lock` try the word blind: one compare-and-swap,
//! one access to a line nobody else holds. Every wait reads the word and tries
//! it only when it reads `UNLOCKED` (test-and-test-and-set): the slow path's
//! first look, the spin behind a sleeping head, the queue head, the timed
//! waiters' polling. A failed compare-and-swap takes the line from the holder
//! as a successful one does, and the holder's release must take it back; so a
//! thread that finds the lock held makes one compare-and-swap on it before it
//! queues, however long it spins (`Stats::steal_attempts` counts them with
//! feature `stats`).

use crate::config::{Global, Tunables};
use crate::sync::{AtomicU32, Ordering};
use crate::word::{HANDED, TAIL_SHIFT, UNLOCKED};

/// The queue spinlock, generic over NUMA reordering and where its tunables live.
///
/// Use it through the aliases: [`RawMutex`](crate::RawMutex) (CNA),
/// [`RawQueuedMutex`](crate::RawQueuedMutex) (the same lock without NUMA
/// reordering), and their per-lock-tuned variants
/// [`RawTunedMutex`](crate::RawTunedMutex) and
/// [`RawTunedQueuedMutex`](crate::RawTunedQueuedMutex). The algorithm is written
/// once: `NUMA = false` compiles out the secondary queue.
///
/// # Fairness
///
/// With finite tunables (the defaults), unfairness is bounded. Threads that find
/// the lock free may steal it until the queue head has waited `steal_bound_ns`;
/// then the head forbids stealing and keeps the lock's next release for itself,
/// whatever its wait policy. So the queue head waits at most
///
/// `steal_bound_ns` + the critical sections of the steals in flight when it
/// forbade (at most one per running thread) + the critical section in progress
/// + one nap ([`WaitPolicy::Park`](crate::WaitPolicy): 20 us asked, about
///   70 us with Linux's default 50 us timer slack) or one yield
///
/// plus any time it spends off its CPU (a head descheduled for longer than
/// `steal_bound_ns` plus five naps lets arrivals take a free lock once, and
/// then takes the next release). A queued waiter waits for the heads ahead of
/// it, each bounded so, plus their critical sections and hand-offs: its queue
/// position times (critical section + hand-off) plus the bound. With `NUMA`,
/// waiters on other nodes than the preferred one wait in the secondary queue
/// for at most about `flush_threshold_ns` plus one queue drain. Measured on
/// the 2-CPU development machine (`tests/fairness_bound.rs`: a thread that
/// re-takes the lock with no gap, critical sections of 5-200 us, a second
/// thread acquiring 20 times): median waits of 13-210 us, maxima of a few ms
/// when the machine was busy, with a timed waiter (`try_lock_for`) as the
/// second thread as well. Timed waiters (`try_lock_for`) are inside the bound:
/// once the head has claimed the next release, each timed waiter takes at
/// most one (an attempt already in flight), so they count among the steals in
/// flight; `lock()` callers come first (see [`crate::timed`]). Measured the
/// same way with two timed loopers beside two `lock()` callers and 200 us
/// critical sections: at most 1-3 timed critical sections during one `lock()`
/// wait and `lock()` waits under 0.7 ms, against up to 259 and 52 ms when
/// timed waiters raced the head for every release.
///
/// The bounds go with the tunables: `spin_budget_ns` only decides when the
/// head starts to nap; with `steal_bound_ns = u64::MAX` running threads may keep
/// re-taking the lock ahead of the queue for as long as they keep arriving (a
/// queued waiter can starve), with `steal_bound_ns = 0` nobody steals past a
/// queued waiter (up to the in-flight races), and with `flush_threshold_ns =
/// u64::MAX` remote waiters wait until the main queue runs empty. `unlock_fair`
/// hands the lock to the longest waiter. See the [module docs](self) and
/// [`Config`](crate::Config).
///
/// # Signal handlers and `fork`
///
/// A signal handler may take the lock while its thread waits for this or another
/// numa-spin lock: each thread has four queue nodes, one per nesting level, as
/// qspinlock has per CPU, and waits without a node beyond that (see
/// [`crate::node`]). A handler must not take a lock its thread holds (a
/// deadlock, as with any non-recursive mutex). In a fork's child the lock works
/// whatever waited for it in the parent: the parent's waiters are dropped from
/// its queue; a lock the forking thread held is unlocked by it in the child as
/// usual, and a lock held by another thread of the parent stays held, as
/// glibc's `pthread_mutex_t` does.
///
/// # Differences from `parking_lot::RawMutex`
///
/// Queued waiters spin, then park on their queue node (with the default
/// [`WaitPolicy::Park`](crate::WaitPolicy)); the queue head never parks, it spins,
/// then sleeps 20 us at a time until it gets the lock. While the queue head is
/// not running (it sleeps, or is being woken) and has not reached its steal
/// bound, arrivals spin for the lock word for up to the spin budget instead of
/// queueing behind it, so running threads keep the lock busy. 8 bytes instead
/// of 1.
///
/// # Examples
///
/// ```
/// use numa_spin::lock_api::RawMutex as _;
///
/// // `RawLock<true>` is `RawMutex` (CNA), `RawLock<false>` is `RawQueuedMutex`.
/// let raw: numa_spin::RawLock<true> = numa_spin::RawLock::new();
/// let guard = raw.lock();
/// assert!(raw.is_locked());
/// // SAFETY: `guard` is the state of the acquisition above.
/// unsafe { raw.unlock(guard) };
/// ```
#[repr(C, align(8))]
pub struct RawLock<const NUMA: bool, T: Tunables = Global> {
    /// `UNLOCKED`, `LOCKED` or `HANDED`.
    pub(crate) locked: AtomicU32,
    /// The flags `NO_STEAL` (bit 0), `HEAD_ASLEEP` (bit 1) and `HEAD_CLAIM`
    /// (bit 2), and the code of the last queue node (bits 3..32); see the
    /// layout in the module docs.
    pub(crate) tail: AtomicU32,
    /// Where the tunables come from.
    pub(crate) tunables: T,
    #[cfg(feature = "stats")]
    pub(crate) counters: crate::stats::Counters,
}

impl<const NUMA: bool, T: Tunables> RawLock<NUMA, T> {
    #[cfg(not(numa_loom))]
    pub(crate) const fn from_tunables(tunables: T) -> Self {
        RawLock {
            locked: AtomicU32::new(UNLOCKED),
            tail: AtomicU32::new(0),
            tunables,
            #[cfg(feature = "stats")]
            counters: crate::stats::Counters::new(),
        }
    }

    /// Under loom atomics are not `const`; the models build locks with this.
    #[cfg(numa_loom)]
    pub(crate) fn from_tunables(tunables: T) -> Self {
        RawLock {
            locked: AtomicU32::new(UNLOCKED),
            tail: AtomicU32::new(0),
            tunables,
            #[cfg(feature = "stats")]
            counters: crate::stats::Counters::new(),
        }
    }

    /// The fast path's single attempt: take the lock if it is free and stealing is
    /// allowed ([`node::try_steal`](crate::node::try_steal), counted as a steal
    /// attempt).
    #[inline]
    pub(crate) fn try_steal(&self) -> bool {
        crate::node::try_steal(&self.locked, &self.tail, || {
            #[cfg(feature = "stats")]
            self.counters.steal_attempt();
        })
    }

    /// A slow-path attempt: a compare-and-swap only of a word read free
    /// ([`node::try_steal_free`](crate::node::try_steal_free)).
    #[inline]
    pub(crate) fn try_steal_free(&self) -> bool {
        crate::node::try_steal_free(&self.locked, &self.tail, || {
            #[cfg(feature = "stats")]
            self.counters.steal_attempt();
        })
    }

    /// Acquires the lock, spinning (then yielding) while it is held: what
    /// `lock_api::RawMutex::lock` does, without a guard value (the loom models use
    /// these inherent methods, since `INIT` does not exist under loom).
    ///
    /// The fast path is one relaxed load and one CAS on the lock's cache line; no
    /// topology lookup, thread-local access or clock read (unless feature `stats`).
    /// With a non-empty queue it also reads the lock's woken-sleeper mark (one
    /// line of a static table, see [`crate::blocking`]) and yields the CPU first
    /// while the mark is set.
    #[inline]
    pub fn acquire(&self) {
        crate::glue::model_route!(crate::model::acquire(&self.tail));
        // Looked up before acquiring (see `Counters::acquired`).
        #[cfg(feature = "stats")]
        let node = crate::sync::current_node();
        if self.try_steal() {
            #[cfg(feature = "stats")]
            self.counters.acquired(node, false);
            return;
        }
        self.lock_slow();
        #[cfg(feature = "stats")]
        self.counters.acquired(node, true);
    }

    /// [`acquire`](RawLock::acquire) for a caller whose own attempt (a
    /// [`try_acquire`](RawLock::try_acquire)) just failed: goes straight to the
    /// slow path, which reads the word before it tries it again. `acquire`'s
    /// fast path would try the held word once more, and a failed
    /// compare-and-swap takes the word's line from the holder as a successful
    /// one does.
    pub(crate) fn acquire_contended(&self) {
        crate::glue::model_route!(crate::model::acquire(&self.tail));
        #[cfg(feature = "stats")]
        let node = crate::sync::current_node();
        self.lock_slow();
        #[cfg(feature = "stats")]
        self.counters.acquired(node, true);
    }

    /// Acquires the lock if it is free and no queued waiter has forbidden stealing
    /// (`lock_api::RawMutex::try_lock`). Never waits.
    ///
    /// The contract: `try_lock` succeeds only where a newly arriving `lock()` would
    /// have taken the lock without queueing. It fails while the lock is held, and
    /// also while the queue head has forbidden stealing (`NO_STEAL`), even at a
    /// moment when the word is free, because the lock then belongs to that head.
    /// The head forbids stealing once it has waited `steal_bound_ns`; in strict
    /// mode (`steal_bound_ns == 0`) from its enqueue until the queue is empty, so
    /// then `try_lock` fails whenever anyone is queued: strict FIFO admits no
    /// barging, not even by `try_lock`. A failed `try_lock` is no evidence that the
    /// lock is held; use [`is_held`](RawLock::is_held) for a (racy) snapshot.
    #[inline]
    pub fn try_acquire(&self) -> bool {
        crate::glue::model_route!(crate::model::try_acquire(&self.tail));
        // Looked up before acquiring (see `Counters::acquired`).
        #[cfg(feature = "stats")]
        let node = crate::sync::current_node();
        let ok = self.try_steal();
        #[cfg(feature = "stats")]
        if ok {
            self.counters.acquired(node, false);
        }
        ok
    }

    /// Releases the lock: one release store (`lock_api::RawMutex::unlock`).
    ///
    /// # Safety
    ///
    /// The lock must be held, and this call must end that acquisition: the caller
    /// acquired it (with [`acquire`](RawLock::acquire) or
    /// [`try_acquire`](RawLock::try_acquire)) and has not released it since, or owns
    /// the `lock_api` guard of that acquisition. The lock is not tied to a thread.
    #[inline]
    pub unsafe fn release(&self) {
        crate::glue::model_route!(crate::model::release(&self.tail));
        // Release: our critical section happens-before the next acquisition (which
        // reads this value with Acquire, in a CAS or in the head's load).
        self.locked.store(UNLOCKED, Ordering::Release);
    }

    /// Releases the lock and hands it to the longest-waiting thread, if any
    /// (`lock_api::RawMutexFair::unlock_fair`),
    /// whatever its node: the head of the secondary queue when that queue is
    /// non-empty (its waiters were queued before everyone in the main queue),
    /// otherwise the head of the main queue. Nobody can steal it in between.
    ///
    /// # Safety
    ///
    /// As for [`release`](RawLock::release).
    pub unsafe fn release_fair(&self) {
        crate::glue::model_route!(crate::model::release(&self.tail));
        // Relaxed suffices: the queue becomes empty (tail code 0) only when a queue
        // head acquires the lock and then clears the tail; any such head acquired
        // before our own acquisition, and its tail CAS happens-before our Acquire of
        // the lock, so we cannot read a stale non-zero code from before it. And while
        // we hold the lock nobody else can empty the queue. So a non-zero code means
        // a head exists (or is being told it is head, by a store it will see) and it
        // will see HANDED.
        let queued = self.tail.load(Ordering::Relaxed) >> TAIL_SHIFT != 0;
        // Release: as in `unlock`. The head takes HANDED with an Acquire CAS.
        self.locked
            .store(if queued { HANDED } else { UNLOCKED }, Ordering::Release);
    }

    /// Whether the lock is held (a momentary snapshot).
    #[inline]
    pub fn is_held(&self) -> bool {
        crate::glue::model_route!(crate::model::is_held(&self.tail));
        self.locked.load(Ordering::Relaxed) != UNLOCKED
    }

    /// Whether threads wait in the lock's queue (a momentary snapshot: the
    /// tail names a queue node), for tests that wait for a waiter to queue
    /// and for diagnostics. Under a user's loom model: always false.
    #[inline]
    pub fn has_queued_waiters(&self) -> bool {
        crate::glue::model_route!(false);
        self.tail.load(Ordering::Relaxed) >> TAIL_SHIFT != 0
    }

    /// The raw tail word (a momentary snapshot), for tests that wait for a
    /// waiter to enqueue: it changes whenever one does. Not a stable API
    /// (under a user's loom model it holds the lock's execution tag).
    #[doc(hidden)]
    pub fn tail_word(&self) -> u32 {
        self.tail.load(Ordering::Relaxed)
    }

    /// The queue-node code of the last queued waiter (0: nobody queued), a
    /// momentary snapshot for tests that wait for waiters to queue one at a
    /// time: each new waiter's code differs from its predecessor's. Not a
    /// stable API (under a user's loom model: always 0).
    #[doc(hidden)]
    pub fn tail_code(&self) -> u32 {
        crate::glue::model_route!(0);
        self.tail.load(Ordering::Relaxed) >> TAIL_SHIFT
    }

    /// A snapshot of the lock's counters (feature `stats`).
    #[cfg(feature = "stats")]
    #[cfg_attr(docsrs, doc(cfg(feature = "stats")))]
    pub fn stats(&self) -> crate::Stats {
        self.counters.snapshot()
    }

    /// The tunables this lock uses.
    pub fn config(&self) -> &crate::Config {
        self.tunables.config()
    }
}

#[cfg(not(numa_loom))]
impl<const NUMA: bool> RawLock<NUMA, Global> {
    /// A new unlocked lock using the process-wide tunables ([`Config::global`]).
    ///
    /// [`Config::global`]: crate::Config::global
    pub const fn new() -> Self {
        Self::from_tunables(Global)
    }
}

#[cfg(not(numa_loom))]
impl<const NUMA: bool> Default for RawLock<NUMA, Global> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(numa_loom)]
impl<const NUMA: bool> RawLock<NUMA, Global> {
    /// A new unlocked lock using the process-wide tunables (loom build: not const).
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self::from_tunables(Global)
    }
}

impl<const NUMA: bool, T: Tunables> RawLock<NUMA, T> {
    /// A new unlocked lock whose tunables come from `tunables`: for a lock
    /// built on this one with tunables of its own (a [`Tunables`] type of the
    /// caller's, for instance one that turns on
    /// [`wake_ahead`](Tunables::wake_ahead)). `const`.
    #[cfg(not(numa_loom))]
    pub const fn with_tunables(tunables: T) -> Self {
        Self::from_tunables(tunables)
    }

    /// A new unlocked lock whose tunables come from `tunables` (loom build:
    /// not const).
    #[cfg(numa_loom)]
    pub fn with_tunables(tunables: T) -> Self {
        Self::from_tunables(tunables)
    }
}

impl<const NUMA: bool> RawLock<NUMA, &'static crate::Config> {
    /// A new unlocked lock with its own tunables. `const`, so it can initialize a
    /// `static` (through `lock_api::Mutex::from_raw`).
    #[cfg(not(numa_loom))]
    pub const fn with_config(config: &'static crate::Config) -> Self {
        Self::from_tunables(config)
    }

    /// A new unlocked lock with its own tunables (loom build: not const).
    #[cfg(numa_loom)]
    pub fn with_config(config: &'static crate::Config) -> Self {
        Self::from_tunables(config)
    }
}

impl<const NUMA: bool, T: Tunables> core::fmt::Debug for RawLock<NUMA, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RawLock")
            .field("numa", &NUMA)
            .field("locked", &self.is_held())
            .field(
                "queued",
                &(self.tail.load(Ordering::Relaxed) >> TAIL_SHIFT != 0),
            )
            .finish()
    }
}

// The lock_api 0.5 (and, with feature `lock_api_04`, 0.4) traits. Sound because
// `acquire`/`try_acquire` (and the timed ones, `crate::timed`) return holding the
// lock only after the CAS from UNLOCKED to LOCKED succeeded (Acquire) or after the
// queue head's CAS from HANDED to LOCKED succeeded (Acquire), and every release
// stores UNLOCKED or HANDED with Release; no two threads can both succeed: every
// acquisition is a CAS on the one word, so each UNLOCKED or HANDED value written by
// a release is consumed by at most one of them. `release_fair` gives the lock to
// exactly one waiter (see `RawLock::release_fair` and `crate::cna`). Guards carry
// no state, so forgetting one leaves the lock held (a deadlock, never
// unsoundness); `lock` runs no user code and cannot unwind except on allocation
// failure of a queue-node segment (which aborts). Moving or dropping the lock
// while held under exclusive ownership is fine: nothing else refers to it (queue
// nodes refer to each other by code, never to the lock).
crate::glue::raw_mutex_glue! {
    impl[const NUMA: bool, T: Tunables] for RawLock<NUMA, T>;
    init = Self::from_tunables(T::DEFAULT);
    core = |this| this;
    unlock = release;
}
