//! [`RawRwLock`]: the CST reader-writer lock on top of the cohort mutex.
//!
//! # Policy (neither readers nor writers starve)
//!
//! * Writers (and upgradable readers) serialise on the cohort mutex
//!   (`LOCKED_BIT`), with the same NUMA batching, spin-then-park and eventual
//!   fairness as [`RawMutex`](crate::RawMutex).
//! * A writer then sets `WRITER_BIT`, which stops new readers, and waits for the
//!   readers inside to drain (spin, then park on the lock's address + 1). Readers
//!   cannot enter once `WRITER_BIT` is set, so a writer never starves.
//! * Readers that arrive while `WRITER_BIT` is set park on the lock's address.
//!   When the writer unlocks (or downgrades) it admits *all* of them in one step
//!   before it releases the cohort mutex, so the next writer must wait for them:
//!   readers never starve either (a phase-fair alternation under contention).
//! * An upgradable reader holds the cohort mutex without `WRITER_BIT`: plain
//!   readers still enter, writers and other upgradable readers wait; `upgrade`
//!   sets `WRITER_BIT` and drains.
//!
//! # Reader counters
//!
//! An uncontended reader counts itself in the upper half of the state word
//! (one CAS, no allocation). A reader that loses that CAS to a concurrent
//! update (contention) registers on the reader counter of its node's snode,
//! which sits on its own cache line, so readers of different nodes never write
//! the same line. The shared guard remembers which counter it used. While
//! node readers may be inside, `NODE_READERS_BIT` keeps writers off their
//! fast path; the next writer that has drained every counter clears it, so
//! a burst of reader contention does not slow later uncontended writers. A
//! spurious `compare_exchange_weak` failure is retried on the fast counter,
//! so an uncontended reader never allocates an snode.

mod exclusive;
mod shared;

use crate::cohort::{Cohort, LOCKED_BIT, READER_MASK, READER_ONE, UNKNOWN_NODE, WRITER_BIT};
use crate::snode::Snode;
use crate::sync::{Ordering, fence};
use std::time::{Duration, Instant};

/// A CST-style NUMA-aware blocking reader-writer lock (16 bytes on 64-bit
/// targets). Use it through [`RwLock`](crate::RwLock); see the
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
    pub(crate) cohort: Cohort,
}

/// Shared guard state: which reader counter this reader registered on (the
/// state word, or the per-node counter of an snode).
///
/// It has no public constructor: the release must decrement the counter the
/// reader registered on. To release a read lock without a guard (FFI, or a
/// guard passed through `mem::forget`), acquire through the raw lock and keep
/// the state: `let st = unsafe { lock.raw() }.lock_shared();` (with
/// `lock_api::RawRwLock` in scope), later `unsafe { lock.force_unlock_read(st) }`.
/// A forgotten `RwLockReadGuard` cannot be released.
#[derive(Debug)]
pub struct SharedGuardState {
    /// 0 for the state word, else the address of the snode whose counter holds us.
    counter: usize,
}

/// Exclusive or upgradable guard state: the node the cohort mutex was taken
/// on (or unknown when taken on the fast path).
///
/// The node is only a hint for the unlock's NUMA choice, so a state made by
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
    node: usize,
}

impl ExclusiveGuardState {
    /// A guard state for an exclusive or upgradable acquisition whose own
    /// state was lost (forgotten guard, FFI): the node is unknown and looked
    /// up by the unlock if it needs one.
    pub const fn new() -> Self {
        ExclusiveGuardState { node: UNKNOWN_NODE }
    }
}

impl Default for ExclusiveGuardState {
    fn default() -> Self {
        Self::new()
    }
}

const FAST: usize = 0;

/// Top bit of an snode's reader counter: a writer parked (or about to park)
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

    /// A read counted on `snode`'s reader counter.
    pub(crate) fn for_snode(snode: &Snode) -> SharedGuardState {
        SharedGuardState {
            counter: snode as *const Snode as usize,
        }
    }

    /// Whether this read is counted in the state word, not on an snode counter.
    #[cfg(feature = "lock_api_04")]
    #[inline]
    pub(crate) fn is_fast(&self) -> bool {
        self.counter == FAST
    }
}

impl RawRwLock {
    /// A new unlocked lock (allocates nothing).
    #[cfg(not(numa_loom))]
    pub const fn new() -> Self {
        RawRwLock {
            cohort: Cohort::new(),
        }
    }

    /// A new unlocked lock (loom build: loom atomics are not `const`).
    #[cfg(numa_loom)]
    pub fn new() -> Self {
        RawRwLock {
            cohort: Cohort::new(),
        }
    }

    /// The counters of this lock's contended paths, summed over its snodes
    /// (feature `stats`; all zero until the lock was contended). For the
    /// rwlock: its writer side (writers and upgradable readers).
    #[cfg(feature = "stats")]
    #[cfg_attr(docsrs, doc(cfg(feature = "stats")))]
    pub fn stats(&self) -> crate::Stats {
        self.cohort.stats()
    }

    /// The number of snodes this lock holds (nodes that contended); each is
    /// 384 bytes on x86-64 (see the crate docs' memory cost) and is held until
    /// the lock is dropped (readers count themselves on them outside the lock).
    pub fn snode_count(&self) -> usize {
        self.cohort.snodes.len()
    }

    /// Gives back the snodes this lock attached at its current address and
    /// forgets any others, leaving an idle lock that holds no heap memory: as
    /// [`RawMutex::release_snodes`](crate::RawMutex::release_snodes), for
    /// locks in memory that C code may copy byte by byte, and with the same
    /// caveat for a lock moved since its snodes were attached. (Dropping the
    /// lock gives back every snode it points to.)
    pub fn release_snodes(&mut self) {
        self.cohort.snodes.release_own();
    }

    #[inline]
    pub(crate) fn reader_key(&self) -> usize {
        self as *const Self as usize
    }

    #[inline]
    pub(crate) fn writer_key(&self) -> usize {
        self as *const Self as usize + 1
    }

    /// Readers inside (or transiently registered): the fast counter plus every
    /// per-node counter.
    fn readers_total(&self) -> usize {
        let fast = (self.cohort.state.load(Ordering::Acquire) & READER_MASK) / READER_ONE;
        fast + self
            .cohort
            .snodes
            .iter()
            .map(|s| s.readers.count.load(Ordering::Acquire) & !DRAIN_BIT)
            .sum::<usize>()
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
            .field("state", &self.cohort.state.load(Ordering::Relaxed))
            .field("snodes", &self.snode_count())
            .finish()
    }
}

// SAFETY: exclusive acquisitions hold the cohort mutex and `WRITER_BIT` and
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
        if self.try_shared_fast() == Some(true) {
            return SharedGuardState::FAST;
        }
        self.lock_shared_untimed_slow()
    }

    #[inline]
    fn try_lock_shared(&self) -> Option<SharedGuardState> {
        loop {
            match self.try_shared_fast() {
                Some(true) => return Some(SharedGuardState { counter: FAST }),
                Some(false) => return None,
                None => {
                    if self.cohort.state.load(Ordering::Relaxed) & READER_MASK == READER_MASK {
                        return None;
                    }
                }
            }
        }
    }

    #[inline]
    unsafe fn unlock_shared(&self, guard: SharedGuardState) {
        self.unlock_shared_inner(guard);
    }

    #[inline]
    fn lock_exclusive(&self) -> ExclusiveGuardState {
        // The fast CAS inline, the rest (which cannot fail without a deadline)
        // in one out-of-line call.
        if self.try_writer_fast() {
            return ExclusiveGuardState { node: UNKNOWN_NODE };
        }
        self.lock_exclusive_untimed_slow()
    }

    #[inline]
    fn try_lock_exclusive(&self) -> Option<ExclusiveGuardState> {
        self.try_writer_fast()
            .then_some(ExclusiveGuardState { node: UNKNOWN_NODE })
            .or_else(|| {
                if !self.cohort.try_lock() {
                    return None;
                }
                // Relaxed, then the Dekker fence: as in `become_writer`.
                self.cohort.state.fetch_or(WRITER_BIT, Ordering::Relaxed);
                fence(Ordering::SeqCst);
                if self.readers_total() == 0 {
                    self.readers_drained();
                    return Some(ExclusiveGuardState { node: UNKNOWN_NODE });
                }
                self.clear_writer_bit();
                self.unlock_cohort(ExclusiveGuardState { node: UNKNOWN_NODE }, false);
                None
            })
    }

    #[inline]
    unsafe fn unlock_exclusive(&self, guard: ExclusiveGuardState) {
        self.unlock_exclusive_inner(guard, false);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.cohort.state.load(Ordering::Relaxed) & (LOCKED_BIT | WRITER_BIT) != 0
            || self.readers_total() != 0
    }

    #[inline]
    fn is_locked_exclusive(&self) -> bool {
        self.cohort.state.load(Ordering::Relaxed) & WRITER_BIT != 0
    }
}

// SAFETY: the fair variants release exactly like the plain ones, except that
// the cohort mutex is handed directly to a parked writer if there is one.
unsafe impl lock_api::RawRwLockFair for RawRwLock {
    #[inline]
    unsafe fn unlock_shared_fair(&self, guard: SharedGuardState) {
        self.unlock_shared_inner(guard);
    }

    #[inline]
    unsafe fn unlock_exclusive_fair(&self, guard: ExclusiveGuardState) {
        self.unlock_exclusive_inner(guard, true);
    }
}

// SAFETY: the writer counts itself as a reader (on the state word, or on its
// node's counter when the word's is full) before it clears `WRITER_BIT` and
// releases the cohort mutex, so no writer can enter between.
unsafe impl lock_api::RawRwLockDowngrade for RawRwLock {
    unsafe fn downgrade(&self, guard: ExclusiveGuardState) -> SharedGuardState {
        let shared = self.add_downgraded_reader();
        self.clear_writer_bit();
        self.unlock_cohort(guard, false);
        shared
    }
}

// SAFETY: timed-out attempts undo every step they took (cohort mutex,
// `WRITER_BIT`, reader registration) before returning `None` after the deadline.
unsafe impl lock_api::RawRwLockTimed for RawRwLock {
    type Duration = Duration;
    type Instant = Instant;

    fn try_lock_shared_for(&self, timeout: Duration) -> Option<SharedGuardState> {
        self.lock_shared_inner(Instant::now().checked_add(timeout))
    }

    fn try_lock_shared_until(&self, deadline: Instant) -> Option<SharedGuardState> {
        self.lock_shared_inner(Some(deadline))
    }

    fn try_lock_exclusive_for(&self, timeout: Duration) -> Option<ExclusiveGuardState> {
        self.lock_exclusive_inner(Instant::now().checked_add(timeout))
    }

    fn try_lock_exclusive_until(&self, deadline: Instant) -> Option<ExclusiveGuardState> {
        self.lock_exclusive_inner(Some(deadline))
    }
}

// SAFETY: one upgradable holder at a time (it holds the cohort mutex);
// `upgrade` sets `WRITER_BIT` and waits for all readers to drain, acquiring
// from their releases (SeqCst counters).
unsafe impl lock_api::RawRwLockUpgrade for RawRwLock {
    type UpgradableGuard = ExclusiveGuardState;

    fn lock_upgradable(&self) -> ExclusiveGuardState {
        match self.lock_cohort(None) {
            Some(g) => g,
            None => unreachable!("untimed upgradable lock returned without the lock"),
        }
    }

    fn try_lock_upgradable(&self) -> Option<ExclusiveGuardState> {
        self.cohort
            .try_lock()
            .then_some(ExclusiveGuardState { node: UNKNOWN_NODE })
    }

    unsafe fn unlock_upgradable(&self, guard: ExclusiveGuardState) {
        self.unlock_cohort(guard, false);
    }

    unsafe fn upgrade(&self, guard: ExclusiveGuardState) -> ExclusiveGuardState {
        self.become_writer(None);
        guard
    }

    unsafe fn try_upgrade(
        &self,
        guard: ExclusiveGuardState,
    ) -> Result<ExclusiveGuardState, ExclusiveGuardState> {
        // Relaxed, then the Dekker fence: as in `become_writer`.
        self.cohort.state.fetch_or(WRITER_BIT, Ordering::Relaxed);
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
    unsafe fn unlock_upgradable_fair(&self, guard: ExclusiveGuardState) {
        self.unlock_cohort(guard, true);
    }
}

// SAFETY: downgrades keep the lock held throughout: a shared downgrade
// registers a reader before releasing the cohort mutex; the exclusive-to-
// upgradable downgrade only clears `WRITER_BIT` (admitting waiting readers).
unsafe impl lock_api::RawRwLockUpgradeDowngrade for RawRwLock {
    unsafe fn downgrade_upgradable(&self, guard: ExclusiveGuardState) -> SharedGuardState {
        let shared = self.add_downgraded_reader();
        self.unlock_cohort(guard, false);
        shared
    }

    unsafe fn downgrade_to_upgradable(&self, guard: ExclusiveGuardState) -> ExclusiveGuardState {
        self.clear_writer_bit();
        guard
    }
}

// SAFETY: as for `RawRwLockTimed`; a timed-out upgrade clears `WRITER_BIT`
// again and keeps the upgradable acquisition.
unsafe impl lock_api::RawRwLockUpgradeTimed for RawRwLock {
    fn try_lock_upgradable_for(&self, timeout: Duration) -> Option<ExclusiveGuardState> {
        self.lock_cohort(Instant::now().checked_add(timeout))
    }

    fn try_lock_upgradable_until(&self, deadline: Instant) -> Option<ExclusiveGuardState> {
        self.lock_cohort(Some(deadline))
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
        if self.become_writer(deadline) {
            Ok(guard)
        } else {
            Err(guard)
        }
    }
}
