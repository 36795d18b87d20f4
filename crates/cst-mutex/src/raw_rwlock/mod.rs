//! [`RawRwLock`]: the CST reader-writer lock on numa-spin's queue.
//!
//! # Policy (neither readers nor writers starve)
//!
//! * Writers (and upgradable readers) serialise on a [`RawMutex`]
//!   (numa-spin's CNA queue lock with bounded stealing, parking and the
//!   wake-ahead), with its NUMA ordering, spin-then-park and fairness.
//! * A writer then sets `WRITER_BIT` in the state word, which stops new
//!   readers, and waits for the readers inside to drain (spin, then park on the
//!   lock's address + 1). Readers cannot enter once `WRITER_BIT` is set, so a
//!   writer never starves.
//! * Readers that arrive while `WRITER_BIT` is set park on the lock's address
//!   plus 2. When the writer unlocks (or downgrades) it admits *all* of them
//!   in one step as it clears the bit, and the next writer, which sets the bit
//!   only after that clear, must wait for them: readers never starve either
//!   (a phase-fair alternation under contention).
//! * An upgradable reader holds the mutex without `WRITER_BIT`: plain readers
//!   still enter, writers and other upgradable readers wait; `upgrade` sets
//!   `WRITER_BIT` and drains.
//!
//! # Reader counters
//!
//! An uncontended reader counts itself in the state word (one CAS, no
//! memory). A reader that loses that CAS to a concurrent update (contention)
//! counts on its node's line of the lock's per-node reader counters
//! (`counters.rs`), bound from a static pool on first use, so readers of
//! different nodes never write the same line. The shared guard remembers
//! which counter it used. While node readers may be inside,
//! `NODE_READERS_BIT` keeps writers off their fast path; the next writer that
//! has drained every counter clears it, so a burst of reader contention does
//! not slow later uncontended writers. A spurious `compare_exchange_weak`
//! failure is retried on the state word, so an uncontended reader never binds
//! counters.
//!
//! # State word
//!
//! | bits | name | meaning |
//! | --- | --- | --- |
//! | 1 | `WRITER_BIT` | a writer holds or drains the lock; readers wait |
//! | 2 | `READERS_PARKED_BIT` | readers are parked on the lock |
//! | 3 | `NODE_READERS_BIT` | readers may be counted on the per-node counters (set by such a reader before it enters, cleared by a writer that drained them) |
//! | 4 .. 32 | readers | readers counted in the word itself (at most 2^28 - 1) |
//!
//! [`RawMutex`]: crate::RawMutex

pub(crate) mod counters;
mod exclusive;
mod shared;

use crate::RawMutex as WriterMutex;
use crate::sync::{self, AtomicU32, AtomicUsize, Ordering, UnparkToken, fence};
use counters::{CounterSet, pool};
use std::time::{Duration, Instant};

/// The unpark token of a plain wake-up: the woken thread tries again.
pub(crate) const TOKEN_NORMAL: UnparkToken = UnparkToken(0);
/// The unpark token of a hand-off: the woken readers hold the lock.
pub(crate) const TOKEN_HANDOFF: UnparkToken = UnparkToken(1);

/// Bounded spinning rounds before a reader or a writer draining readers
/// parks: rounds 1 to [`PAUSE_ROUNDS`] pause 1, 2 and 4 times, the rest
/// yield the CPU (7 yields): parking_lot_core 0.10's `SpinWait` schedule.
#[cfg_attr(numa_loom, allow(dead_code))]
const SPIN_ROUNDS: u32 = 10;

/// The spinning rounds that pause instead of yielding.
#[cfg_attr(numa_loom, allow(dead_code))]
const PAUSE_ROUNDS: u32 = 3;

/// [`SPIN_ROUNDS`], or under loom the per-thread value the model chose (0 by
/// default: loom runs the holder as soon as a waiter yields, so a spinning
/// waiter would never reach the parking paths).
#[inline]
pub(crate) fn spin_rounds() -> u32 {
    #[cfg(not(numa_loom))]
    {
        SPIN_ROUNDS
    }
    #[cfg(numa_loom)]
    {
        sync::loom_spin_rounds()
    }
}

/// One round of bounded spinning (`round` counts from 1): rounds up to
/// [`PAUSE_ROUNDS`] pause `2^(round - 1)` times, later rounds yield the CPU.
#[inline]
pub(crate) fn spin_round(round: u32) {
    if cfg!(not(numa_loom)) && round <= PAUSE_ROUNDS {
        for _ in 0..(1u32 << (round - 1)) {
            sync::spin_loop();
        }
    } else {
        sync::yield_now();
    }
}

/// A writer holds or drains the lock; new readers wait.
pub(crate) const WRITER_BIT: u32 = 2;
/// Readers are parked on the lock's reader key.
pub(crate) const READERS_PARKED_BIT: u32 = 4;
/// Readers may be counted on the per-node counters.
pub(crate) const NODE_READERS_BIT: u32 = 8;
/// One reader counted in the state word.
pub(crate) const READER_ONE: u32 = 16;
/// The state word's reader count.
pub(crate) const READER_MASK: u32 = !(READER_ONE - 1);

/// A CST-style NUMA-aware blocking reader-writer lock (16 bytes: numa-spin's
/// 8-byte queue lock for the writers, a 4-byte state word and a 4-byte handle
/// of the per-node reader counters). Use it through [`RwLock`](crate::RwLock); see the
/// [module policy](crate#rwlock-policy) and the [crate docs](crate).
///
/// # Fairness
///
/// Writers are ordered like [`RawMutex`](crate::RawMutex) waiters (NUMA
/// batches, barging, eventual fairness); readers that waited for a writer are
/// all admitted when it leaves, before the next writer.
///
/// # Recursive reads deadlock
///
/// A waiting writer stops new readers, so a thread that holds a read lock
/// and asks for another one (`read()` again) deadlocks once a writer waits:
/// the writer waits for the first read lock, the second read waits for the
/// writer. This is the writer-preferring policy `lock_api` allows; the lock
/// does not implement `RawRwLockRecursive`. Take one read lock per thread
/// and pass the guard down. ([`RawRwLock::try_lock_shared_recursive`] reads
/// past a waiting writer while the state word counts a reader, which the
/// lock_api 0.4 `read_recursive` builds on.)
///
/// # Examples
///
/// ```
/// use cst_mutex::RawRwLock;
/// use cst_mutex::lock_api::{RawRwLock as _, RawRwLockDowngrade as _};
///
/// let raw = RawRwLock::new();
/// let w = raw.lock_exclusive();
/// assert!(raw.try_lock_shared().is_none());
/// // SAFETY: `w` is our exclusive acquisition.
/// let r = unsafe { raw.downgrade(w) };
/// let r2 = raw.try_lock_shared().expect("readers share");
/// // SAFETY: `r` and `r2` are our shared acquisitions.
/// unsafe {
///     raw.unlock_shared(r);
///     raw.unlock_shared(r2);
/// }
/// assert!(!raw.is_locked());
/// ```
pub struct RawRwLock {
    /// Writers and upgradable readers hold it (module docs).
    pub(crate) mutex: WriterMutex,
    /// `WRITER_BIT`, `READERS_PARKED_BIT`, `NODE_READERS_BIT` and the readers
    /// counted in the word (module docs' table).
    pub(crate) state: AtomicU32,
    /// The bound set of per-node reader counters: 0 for none, else its pool
    /// id. Set once, by the first reader that contends; cleared only with
    /// exclusive access (drop, [`release_snodes`](RawRwLock::release_snodes)).
    counters: AtomicU32,
}

/// Shared guard state: which reader counter this reader registered on (the
/// state word, or its node's line of the lock's per-node counters).
///
/// It has no public constructor: the release must decrement the counter the
/// reader registered on. To release a read lock without a guard (FFI, or a
/// guard passed through `mem::forget`), acquire through the raw lock and keep
/// the state: `let st = unsafe { lock.raw() }.lock_shared();` (with
/// `lock_api::RawRwLock` in scope), later `unsafe { lock.force_unlock_read(st) }`.
/// A forgotten `RwLockReadGuard` cannot be released.
#[derive(Debug)]
pub struct SharedGuardState {
    /// 0 for the state word, else the address of the per-node counter that
    /// holds us (static memory: the pool's).
    counter: usize,
}

/// Exclusive or upgradable guard state: nothing (the writers' queue lock keeps
/// no per-acquisition state), so a state made by
/// [`ExclusiveGuardState::new`] releases any exclusive or upgradable
/// acquisition: after `std::mem::forget` of a write guard, call
/// `unsafe { lock.force_unlock_write(ExclusiveGuardState::new()) }`.
///
/// ```
/// use cst_mutex::{ExclusiveGuardState, RwLock};
///
/// let l = RwLock::new(1);
/// std::mem::forget(l.write());
/// // SAFETY: this context holds the write lock (its guard was forgotten) and
/// // no reference into the data outlives the release.
/// unsafe { l.force_unlock_write(ExclusiveGuardState::new()) };
/// assert_eq!(*l.read(), 1);
/// ```
#[derive(Debug)]
pub struct ExclusiveGuardState {
    _private: (),
}

impl ExclusiveGuardState {
    /// A guard state for an exclusive or upgradable acquisition (all are
    /// alike): for one whose own state was lost (forgotten guard, FFI).
    pub const fn new() -> Self {
        ExclusiveGuardState { _private: () }
    }
}

impl Default for ExclusiveGuardState {
    fn default() -> Self {
        Self::new()
    }
}

const FAST: usize = 0;

/// Top bit of a per-node reader counter: a writer parked (or about to park)
/// waiting for the counter to drain. The unlock of a reader counted there
/// learns from its own decrement whether to wake the writer, so it touches
/// nothing of the lock after that releasing step (the last reader's unlock
/// may be followed at once by the writer's entry, unlock and the lock's
/// destruction: POSIX's "last user frees it").
const DRAIN_BIT: usize = 1 << (usize::BITS - 1);

impl SharedGuardState {
    /// A read counted in the state word (no snode counter).
    pub(crate) const FAST: SharedGuardState = SharedGuardState { counter: FAST };

    /// The state of a read counted in the state word (what
    /// [`RawRwLock::into_state_word`] returns), for FFI callers that keep a
    /// count of such reads instead of their guards: releasing it with
    /// `unlock_shared` is sound only while the state word counts a read that
    /// the caller holds.
    pub const fn state_word() -> Self {
        SharedGuardState { counter: FAST }
    }

    /// Whether this read is counted in the state word (see
    /// [`state_word`](Self::state_word)).
    pub fn in_state_word(&self) -> bool {
        self.counter == FAST
    }

    /// A read counted on `line`, a per-node counter of the pool.
    pub(crate) fn for_line(line: &AtomicUsize) -> SharedGuardState {
        SharedGuardState {
            counter: std::ptr::from_ref(line) as usize,
        }
    }

    /// Whether this read is counted in the state word, not on a node counter.
    #[cfg(feature = "lock_api_04")]
    #[inline]
    pub(crate) fn is_fast(&self) -> bool {
        self.counter == FAST
    }
}

impl RawRwLock {
    /// A new unlocked lock (allocates nothing; all zeros).
    #[cfg(not(numa_loom))]
    pub const fn new() -> Self {
        RawRwLock {
            mutex: WriterMutex::new(),
            state: AtomicU32::new(0),
            counters: AtomicU32::new(0),
        }
    }

    /// A new unlocked lock (loom build: loom atomics are not `const`).
    #[cfg(numa_loom)]
    pub fn new() -> Self {
        RawRwLock {
            mutex: WriterMutex::new(),
            state: AtomicU32::new(0),
            counters: AtomicU32::new(0),
        }
    }

    /// The counters of the writer side's queue lock (writers and upgradable
    /// readers; feature `stats`, numa-spin's [`numa_spin::Stats`]).
    #[cfg(feature = "stats")]
    #[cfg_attr(docsrs, doc(cfg(feature = "stats")))]
    pub fn stats(&self) -> numa_spin::Stats {
        self.mutex.stats()
    }

    /// The number of per-node reader counter sets this lock has bound: 0, or
    /// 1 once its readers contended (8 counters of one cache line each, from
    /// a static pool, kept until the lock is dropped; see the crate docs'
    /// memory cost).
    pub fn snode_count(&self) -> usize {
        // Relaxed: a snapshot.
        usize::from(self.counters.load(Ordering::Relaxed) != 0)
    }

    /// Whether writers (or upgradable readers) wait for the writer mutex:
    /// queued in numa-spin's queue, or asleep outside it (timed waiters). A
    /// snapshot, for tests and diagnostics.
    pub fn has_waiting_writers(&self) -> bool {
        self.mutex.has_queued_waiters() || self.mutex.has_sleepers()
    }

    /// Gives this lock's reader counters back to the pool (dropping the lock
    /// does too). For locks in memory that C code may copy byte by byte: a
    /// copy shares the original's counters, so give them back from one of
    /// the two only, or from neither.
    pub fn release_snodes(&mut self) {
        let id = self.counters.swap(0, Ordering::Relaxed);
        if id != 0 {
            let set = pool().set(id);
            // Relaxed: we have exclusive access, and `free` publishes. A count
            // left by a forgotten read guard of this lock goes with it.
            for line in &set.lines {
                line.store(0, Ordering::Relaxed);
            }
            pool().free(id);
        }
    }

    /// The parking key of readers that wait for a writer: the lock's address
    /// plus 2 (the address itself is the writer mutex's, whose timed waiters
    /// sleep there).
    #[inline]
    pub(crate) fn reader_key(&self) -> usize {
        self as *const Self as usize + 2
    }

    /// The parking key of a writer that waits for readers to drain.
    #[inline]
    pub(crate) fn writer_key(&self) -> usize {
        self as *const Self as usize + 1
    }

    /// The bound per-node reader counters, if any.
    #[inline]
    fn counter_set(&self) -> Option<&'static CounterSet> {
        // Acquire: pairs with the binding CAS's Release (the set's zeros).
        let id = self.counters.load(Ordering::Acquire);
        (id != 0).then(|| pool().set(id))
    }

    /// The per-node reader counters, bound on first use; `None` while every
    /// set of the pool is bound to other locks.
    pub(crate) fn counter_set_or_bind(&self) -> Option<&'static CounterSet> {
        if let Some(set) = self.counter_set() {
            return Some(set);
        }
        let id = pool().claim(self as *const Self as usize >> 4)?;
        // Release on success: publishes the claimed set's zeros (which our
        // claim acquired from the previous lock's `free`) to the readers
        // that load the id. The 0 it replaces is the lock's initial value
        // or one stored under `&mut self` (`release_snodes`), so there is
        // nothing to acquire. Acquire on failure: the winner's id, whose
        // set's zeros its Release published.
        match self
            .counters
            .compare_exchange(0, id, Ordering::Release, Ordering::Acquire)
        {
            Ok(_) => Some(pool().set(id)),
            Err(won) => {
                pool().free(id);
                Some(pool().set(won))
            }
        }
    }

    /// Readers inside (or transiently registered): the fast counter plus every
    /// per-node counter.
    fn readers_total(&self) -> usize {
        let fast = ((self.state.load(Ordering::Acquire) & READER_MASK) / READER_ONE) as usize;
        fast + self.counter_set().map_or(0, |set| {
            set.lines
                .iter()
                .map(|l| l.load(Ordering::Acquire) & !DRAIN_BIT)
                .sum::<usize>()
        })
    }
}

impl Drop for RawRwLock {
    fn drop(&mut self) {
        self.release_snodes();
    }
}

/// An acquisition without a deadline returned without the lock: impossible
/// (the slow paths return `None` only once a deadline has passed).
#[cold]
#[inline(never)]
fn untimed_lock_failed() -> ! {
    unreachable!("untimed lock returned without the lock")
}

impl Default for RawRwLock {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for RawRwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawRwLock")
            .field("state", &self.state.load(Ordering::Relaxed))
            .field("writer", &self.mutex)
            .field("snodes", &self.snode_count())
            .finish()
    }
}

// SAFETY: exclusive acquisitions hold the writer mutex and `WRITER_BIT` and
// have waited until every reader counter is 0; a reader enters only by
// registering on a counter and then seeing `WRITER_BIT` clear (SeqCst on both
// sides), or by being admitted by a writer that is leaving. Acquire/Release on
// the state word and the counters order the critical sections. Guard state is
// plain data; forgetting it leaves the lock held (safe); moving or dropping
// the lock with exclusive access is safe (snodes are owned heap memory).
unsafe impl lock_api::RawRwLock for RawRwLock {
    #[cfg(not(numa_loom))]
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawRwLock::new();
    #[cfg(numa_loom)]
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = panic!("RawRwLock::INIT is unavailable under loom; use RawRwLock::new");

    type SharedGuard = SharedGuardState;
    type ExclusiveGuard = ExclusiveGuardState;

    #[inline]
    fn lock_shared(&self) -> SharedGuardState {
        crate::model_route!({
            crate::model::rwlock(&self.state).lock_shared();
            SharedGuardState::FAST
        });
        if self.try_shared_fast() == Some(true) {
            return SharedGuardState::FAST;
        }
        self.lock_shared_untimed_slow()
    }

    #[inline]
    fn try_lock_shared(&self) -> Option<SharedGuardState> {
        crate::model_route!(
            crate::model::rwlock(&self.state)
                .try_lock_shared()
                .then_some(SharedGuardState::FAST)
        );
        loop {
            match self.try_shared_fast() {
                Some(true) => return Some(SharedGuardState { counter: FAST }),
                Some(false) => return None,
                None => {
                    if self.state.load(Ordering::Relaxed) & READER_MASK == READER_MASK {
                        return None;
                    }
                }
            }
        }
    }

    #[inline]
    unsafe fn unlock_shared(&self, guard: SharedGuardState) {
        crate::model_route!(crate::model::unlock(
            &self.state,
            crate::model::ModelRwLock::unlock_shared
        ));
        self.unlock_shared_inner(guard);
    }

    #[inline]
    fn lock_exclusive(&self) -> ExclusiveGuardState {
        crate::model_route!({
            crate::model::rwlock(&self.state).lock_exclusive();
            ExclusiveGuardState::new()
        });
        // The two fast CASes inline, the rest (which cannot fail without a
        // deadline) in one out-of-line call.
        if self.mutex.try_acquire() {
            if !self.try_writer_bit() {
                self.become_writer_untimed();
            }
            return ExclusiveGuardState::new();
        }
        self.lock_exclusive_untimed_slow()
    }

    #[inline]
    fn try_lock_exclusive(&self) -> Option<ExclusiveGuardState> {
        crate::model_route!(
            crate::model::rwlock(&self.state)
                .try_lock_exclusive()
                .then(ExclusiveGuardState::new)
        );
        if !self.mutex.try_acquire() {
            return None;
        }
        if self.try_writer_bit() {
            return Some(ExclusiveGuardState::new());
        }
        // Relaxed, then the Dekker fence: as in `become_writer`.
        if !self.set_writer_bit(false) {
            self.unlock_writer_mutex(false);
            return None;
        }
        fence(Ordering::SeqCst);
        if self.readers_total() == 0 {
            self.readers_drained();
            return Some(ExclusiveGuardState::new());
        }
        self.clear_writer_bit();
        self.unlock_writer_mutex(false);
        None
    }

    #[inline]
    unsafe fn unlock_exclusive(&self, guard: ExclusiveGuardState) {
        crate::model_route!(crate::model::unlock(
            &self.state,
            crate::model::ModelRwLock::unlock_exclusive
        ));
        self.unlock_exclusive_inner(guard, false);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        crate::model_route!(crate::model::rwlock(&self.state).is_locked());
        self.mutex.is_held()
            || self.state.load(Ordering::Relaxed) & WRITER_BIT != 0
            || self.readers_total() != 0
    }

    #[inline]
    fn is_locked_exclusive(&self) -> bool {
        crate::model_route!(crate::model::rwlock(&self.state).is_locked_exclusive());
        self.state.load(Ordering::Relaxed) & WRITER_BIT != 0
    }
}

// SAFETY: the fair variants release exactly like the plain ones, except that
// the writer mutex goes to its longest-waiting queued writer, if any.
unsafe impl lock_api::RawRwLockFair for RawRwLock {
    #[inline]
    unsafe fn unlock_shared_fair(&self, guard: SharedGuardState) {
        crate::model_route!(crate::model::unlock(
            &self.state,
            crate::model::ModelRwLock::unlock_shared
        ));
        self.unlock_shared_inner(guard);
    }

    #[inline]
    unsafe fn unlock_exclusive_fair(&self, guard: ExclusiveGuardState) {
        crate::model_route!(crate::model::unlock(
            &self.state,
            crate::model::ModelRwLock::unlock_exclusive
        ));
        self.unlock_exclusive_inner(guard, true);
    }
}

// SAFETY: the writer counts itself as a reader (on the state word, or on its
// node's counter when the word's is full) before it clears `WRITER_BIT` and
// releases the writer mutex, so no writer can enter between.
unsafe impl lock_api::RawRwLockDowngrade for RawRwLock {
    unsafe fn downgrade(&self, _guard: ExclusiveGuardState) -> SharedGuardState {
        crate::model_route!({
            crate::model::rwlock(&self.state).downgrade();
            SharedGuardState::FAST
        });
        let shared = self.add_downgraded_reader();
        self.clear_writer_bit();
        self.unlock_writer_mutex(false);
        shared
    }
}

// SAFETY: timed-out attempts undo every step they took (writer mutex,
// `WRITER_BIT`, reader registration) before returning `None` after the deadline.
unsafe impl lock_api::RawRwLockTimed for RawRwLock {
    type Duration = Duration;
    type Instant = Instant;

    fn try_lock_shared_for(&self, timeout: Duration) -> Option<SharedGuardState> {
        crate::model_route!(
            crate::model::rwlock(&self.state)
                .try_lock_shared_timed()
                .then_some(SharedGuardState::FAST)
        );
        self.lock_shared_inner(Instant::now().checked_add(timeout))
    }

    fn try_lock_shared_until(&self, deadline: Instant) -> Option<SharedGuardState> {
        crate::model_route!(
            crate::model::rwlock(&self.state)
                .try_lock_shared_timed()
                .then_some(SharedGuardState::FAST)
        );
        self.lock_shared_inner(Some(deadline))
    }

    fn try_lock_exclusive_for(&self, timeout: Duration) -> Option<ExclusiveGuardState> {
        crate::model_route!(
            crate::model::rwlock(&self.state)
                .try_lock_exclusive_timed()
                .then(ExclusiveGuardState::new)
        );
        self.lock_exclusive_inner(Instant::now().checked_add(timeout))
    }

    fn try_lock_exclusive_until(&self, deadline: Instant) -> Option<ExclusiveGuardState> {
        crate::model_route!(
            crate::model::rwlock(&self.state)
                .try_lock_exclusive_timed()
                .then(ExclusiveGuardState::new)
        );
        self.lock_exclusive_inner(Some(deadline))
    }
}

// SAFETY: one upgradable holder at a time (it holds the writer mutex);
// `upgrade` sets `WRITER_BIT` and waits for all readers to drain, acquiring
// from their releases (SeqCst counters).
unsafe impl lock_api::RawRwLockUpgrade for RawRwLock {
    type UpgradableGuard = ExclusiveGuardState;

    fn lock_upgradable(&self) -> ExclusiveGuardState {
        crate::model_route!({
            crate::model::rwlock(&self.state).lock_upgradable();
            ExclusiveGuardState::new()
        });
        self.mutex.acquire();
        ExclusiveGuardState::new()
    }

    fn try_lock_upgradable(&self) -> Option<ExclusiveGuardState> {
        crate::model_route!(
            crate::model::rwlock(&self.state)
                .try_lock_upgradable()
                .then(ExclusiveGuardState::new)
        );
        self.mutex
            .try_acquire()
            .then_some(ExclusiveGuardState::new())
    }

    unsafe fn unlock_upgradable(&self, _guard: ExclusiveGuardState) {
        crate::model_route!(crate::model::unlock(
            &self.state,
            crate::model::ModelRwLock::unlock_upgradable
        ));
        self.unlock_writer_mutex(false);
    }

    unsafe fn upgrade(&self, guard: ExclusiveGuardState) -> ExclusiveGuardState {
        crate::model_route!({
            crate::model::rwlock(&self.state).upgrade();
            guard
        });
        self.become_writer(None);
        guard
    }

    unsafe fn try_upgrade(
        &self,
        guard: ExclusiveGuardState,
    ) -> Result<ExclusiveGuardState, ExclusiveGuardState> {
        crate::model_route!(if crate::model::rwlock(&self.state).try_upgrade() {
            Ok(guard)
        } else {
            Err(guard)
        });
        // Relaxed, then the Dekker fence: as in `become_writer`.
        if !self.set_writer_bit(false) {
            return Err(guard);
        }
        fence(Ordering::SeqCst);
        if self.readers_total() == 0 {
            self.readers_drained();
            return Ok(guard);
        }
        self.clear_writer_bit();
        Err(guard)
    }
}

// SAFETY: as for `RawRwLockFair`.
unsafe impl lock_api::RawRwLockUpgradeFair for RawRwLock {
    unsafe fn unlock_upgradable_fair(&self, _guard: ExclusiveGuardState) {
        crate::model_route!(crate::model::unlock(
            &self.state,
            crate::model::ModelRwLock::unlock_upgradable
        ));
        self.unlock_writer_mutex(true);
    }
}

// SAFETY: downgrades keep the lock held throughout: a shared downgrade
// registers a reader before releasing the writer mutex; the exclusive-to-
// upgradable downgrade only clears `WRITER_BIT` (admitting waiting readers).
unsafe impl lock_api::RawRwLockUpgradeDowngrade for RawRwLock {
    unsafe fn downgrade_upgradable(&self, _guard: ExclusiveGuardState) -> SharedGuardState {
        crate::model_route!({
            crate::model::rwlock(&self.state).downgrade_upgradable();
            SharedGuardState::FAST
        });
        let shared = self.add_downgraded_reader();
        self.unlock_writer_mutex(false);
        shared
    }

    unsafe fn downgrade_to_upgradable(&self, guard: ExclusiveGuardState) -> ExclusiveGuardState {
        crate::model_route!({
            crate::model::rwlock(&self.state).downgrade_to_upgradable();
            guard
        });
        self.clear_writer_bit();
        guard
    }
}

// SAFETY: as for `RawRwLockTimed`; a timed-out upgrade clears `WRITER_BIT`
// again and keeps the upgradable acquisition.
unsafe impl lock_api::RawRwLockUpgradeTimed for RawRwLock {
    fn try_lock_upgradable_for(&self, timeout: Duration) -> Option<ExclusiveGuardState> {
        crate::model_route!(
            crate::model::rwlock(&self.state)
                .try_lock_upgradable_timed()
                .then(ExclusiveGuardState::new)
        );
        self.lock_writer_mutex(Instant::now().checked_add(timeout))
            .then_some(ExclusiveGuardState::new())
    }

    fn try_lock_upgradable_until(&self, deadline: Instant) -> Option<ExclusiveGuardState> {
        crate::model_route!(
            crate::model::rwlock(&self.state)
                .try_lock_upgradable_timed()
                .then(ExclusiveGuardState::new)
        );
        self.lock_writer_mutex(Some(deadline))
            .then_some(ExclusiveGuardState::new())
    }

    unsafe fn try_upgrade_for(
        &self,
        guard: ExclusiveGuardState,
        timeout: Duration,
    ) -> Result<ExclusiveGuardState, ExclusiveGuardState> {
        // SAFETY: forwarded precondition: `guard` is an upgradable acquisition.
        unsafe { self.try_upgrade_until_opt(guard, Instant::now().checked_add(timeout)) }
    }

    unsafe fn try_upgrade_until(
        &self,
        guard: ExclusiveGuardState,
        deadline: Instant,
    ) -> Result<ExclusiveGuardState, ExclusiveGuardState> {
        // SAFETY: forwarded precondition: `guard` is an upgradable acquisition.
        unsafe { self.try_upgrade_until_opt(guard, Some(deadline)) }
    }
}

impl RawRwLock {
    /// # Safety
    ///
    /// `guard` must be the state of an upgradable acquisition of this lock.
    unsafe fn try_upgrade_until_opt(
        &self,
        guard: ExclusiveGuardState,
        deadline: Option<Instant>,
    ) -> Result<ExclusiveGuardState, ExclusiveGuardState> {
        crate::model_route!(if crate::model::rwlock(&self.state).try_upgrade_timed() {
            Ok(guard)
        } else {
            Err(guard)
        });
        if self.become_writer(deadline) {
            Ok(guard)
        } else {
            Err(guard)
        }
    }
}
