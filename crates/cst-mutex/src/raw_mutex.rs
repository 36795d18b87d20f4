//! [`RawMutex`]: the `lock_api` implementation of the CST cohort mutex.

use crate::cohort::{Cohort, LOCKED_BIT, UNKNOWN_NODE};
use crate::sync::Ordering;
use std::time::{Duration, Instant};

/// A CST-style NUMA-aware blocking mutex: one word of state plus a pointer to
/// lazily allocated per-node snodes (16 bytes on 64-bit targets).
///
/// Use it through [`Mutex`](crate::Mutex); the raw type is for building other
/// primitives. The algorithm, fairness policy and memory cost are described in
/// the [crate docs](crate).
///
/// # Fairness
///
/// Queued waiters of a node are served in FIFO order, within the node's
/// batch; a running thread may take a free lock ahead of them (barging, like
/// `parking_lot`). Eventual fairness: a parked waiter is handed the lock
/// directly once its node's fairness timeout
/// ([`fairness_timeout`](crate::fairness_timeout), 0.5 ms by default) has
/// passed. [`unlock_fair`](lock_api::RawMutexFair::unlock_fair) always hands
/// the lock over when anyone waits: to a registered queue head (its own
/// node's while the batch lasts, else another node's), else to a parked
/// waiter.
///
/// # Examples
///
/// ```
/// use cst_mutex::RawMutex;
/// use cst_mutex::lock_api::{RawMutex as _, RawMutexTimed as _};
/// use std::time::Duration;
///
/// let raw = RawMutex::new();
/// let g = raw.lock();
/// assert!(raw.try_lock_for(Duration::from_millis(1)).is_none());
/// // SAFETY: `g` is the state of our acquisition.
/// unsafe { raw.unlock(g) };
/// // At most this thread's node's snode: allocated only if the timed waiter got
/// // to park before its 1 ms ran out (it spins first).
/// assert!(raw.snode_count() <= 1);
/// ```
// `repr(transparent)`: the mutex's address is its cohort's, which
// `RawCondvar::notify_all` relies on to name the requeue queue without
// dereferencing a mutex pointer.
#[repr(transparent)]
pub struct RawMutex {
    pub(crate) cohort: Cohort,
}

/// Per-acquisition guard state of [`RawMutex`]: the node the lock was taken
/// on (or unknown when it was taken on the uncontended fast path).
///
/// Plain data, so guards are `Send`: the lock may be released by another
/// thread than the one that took it.
///
/// # Unlocking after `mem::forget`
///
/// The node is only a hint for the unlock's NUMA choice, so a state made by
/// [`MutexGuardState::new`] releases any acquisition: after
/// `std::mem::forget(guard)`, call `unsafe { mutex.force_unlock(MutexGuardState::new()) }`
/// (or `force_unlock_fair`) as with `parking_lot`.
///
/// ```
/// use cst_mutex::{Mutex, MutexGuardState};
///
/// let m = Mutex::new(1);
/// std::mem::forget(m.lock());
/// assert!(m.is_locked());
/// // SAFETY: this context holds the lock (its guard was forgotten) and no
/// // reference into the data outlives the release.
/// unsafe { m.force_unlock(MutexGuardState::new()) };
/// assert_eq!(*m.lock(), 1);
/// ```
#[derive(Debug)]
pub struct MutexGuardState {
    pub(crate) node: usize,
}

impl MutexGuardState {
    /// A guard state for an acquisition whose own state was lost (the guard
    /// was forgotten, or the lock was taken through FFI): the node is
    /// unknown and looked up by the unlock if it needs one.
    pub const fn new() -> Self {
        MutexGuardState { node: UNKNOWN_NODE }
    }
}

impl Default for MutexGuardState {
    fn default() -> Self {
        Self::new()
    }
}

impl RawMutex {
    /// A new unlocked mutex (allocates nothing).
    #[cfg(not(numa_loom))]
    pub const fn new() -> Self {
        RawMutex {
            cohort: Cohort::new(),
        }
    }

    /// A new unlocked mutex (loom build: loom atomics are not `const`).
    #[cfg(numa_loom)]
    pub fn new() -> Self {
        RawMutex {
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

    /// The number of snodes this lock holds now (a snapshot): one per node
    /// whose threads are waiting for it, plus one while a
    /// [`RawCondvar`](crate::RawCondvar) waits with it (the queue of condvar
    /// waiters `notify_all` moves onto the mutex). Each is 384 bytes on
    /// x86-64 (see the crate docs' memory cost); they go back to a pool for
    /// the next contention once the lock's waiters are gone (with feature
    /// `stats`, whose counters live in them: when the lock is dropped). A
    /// test and diagnostic aid.
    pub fn snode_count(&self) -> usize {
        self.cohort.snodes.len()
    }

    /// Test hook for the loom models: the nodes of this lock's snodes in list
    /// order (newest first; the cyclic order the unlocker serves them in).
    /// Not part of the API.
    #[cfg(numa_loom)]
    #[doc(hidden)]
    pub fn __snode_nodes(&self) -> Vec<usize> {
        self.cohort.snodes.iter().map(|s| s.node()).collect()
    }

    /// The threads waiting in the mutex's snode queues (a snapshot, for
    /// diagnostics and tests: a thread waiting for a lock shows here or in
    /// [`RawMutex::parked_waiters`] once it has queued).
    pub fn queued_waiters(&self) -> usize {
        self.cohort
            .snodes
            .iter()
            // Relaxed: a snapshot.
            .map(|s| s.hot.users.load(Ordering::Relaxed) & crate::snode::QUEUED_MASK)
            .sum()
    }

    /// The queue heads registered for a grant right now (a snapshot, for
    /// diagnostics and tests): a registered head is handed the lock by the
    /// unlock (a grant) instead of taking the freed word.
    pub fn registered_heads(&self) -> usize {
        // Relaxed: a snapshot.
        (self.cohort.state.load(Ordering::Relaxed) & crate::word::HEAD_MASK) / crate::word::HEAD_ONE
    }

    /// The number of threads parked on this lock right now (a snapshot,
    /// including condvar waiters moved onto it). A test and diagnostic aid.
    pub fn parked_waiters(&self) -> usize {
        crate::cohort::parked_count(self.cohort.state.load(Ordering::Relaxed))
    }

    #[inline]
    fn lock_inner(&self, deadline: Option<Instant>) -> Option<MutexGuardState> {
        if self.cohort.try_lock_fast() {
            return Some(MutexGuardState { node: UNKNOWN_NODE });
        }
        self.lock_slow(deadline)
    }

    /// The slow acquisition, then the end of a contention: the holder gives
    /// the snodes back if no other waiter uses them (a timed waiter that gave
    /// up does so if it can take the lock for a moment), so that an idle mutex
    /// holds no heap memory, even one that is then freed without being
    /// dropped (C's `free` without `pthread_mutex_destroy`).
    #[cold]
    fn lock_slow(&self, deadline: Option<Instant>) -> Option<MutexGuardState> {
        match self.cohort.lock_slow(deadline) {
            Some(node) => {
                self.cohort.detach_idle();
                Some(MutexGuardState { node })
            }
            None => {
                // The snodes we may have attached go back to the pool: now
                // if the lock is free, else when its holder unlocks.
                loop {
                    if self.cohort.try_lock() {
                        self.cohort.detach_idle();
                        if let Err(s) = self.cohort.try_unlock_fast() {
                            self.cohort.unlock_slow(s, UNKNOWN_NODE, false);
                        }
                        break;
                    }
                    if self.cohort.note_idle_snodes() {
                        break;
                    }
                }
                None
            }
        }
    }

    /// Gives back the snodes this mutex attached at its current address and
    /// forgets any others, leaving an idle mutex that holds no heap memory.
    ///
    /// For mutexes in memory that C code may copy byte by byte (a
    /// `pthread_mutex_t` under an interposer, before `pthread_mutex_destroy`
    /// zeroes it): a copy shares the original's snode pointers, and only the
    /// lock that attached an snode gives it back. Dropping the mutex gives
    /// back every snode it points to instead (a Rust value is moved, never
    /// copied, so all are its own). An idle mutex normally holds no snode
    /// anyway: the last waiter of a contention gives them back.
    ///
    /// Snodes attached before the mutex was last moved count as another
    /// lock's: this forgets them, and their memory is neither freed nor
    /// reused. A Rust value that may have moved should be dropped instead.
    pub fn release_snodes(&mut self) {
        self.cohort.snodes.release_own();
    }
}

impl Default for RawMutex {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for RawMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawMutex")
            .field("locked", &lock_api::RawMutex::is_locked(self))
            .field("snodes", &self.snode_count())
            .finish()
    }
}

// SAFETY: `LOCKED_BIT` is taken by CAS with Acquire and released with Release
// (or handed to exactly one woken thread while still set), so at most one
// acquisition holds it at a time. Guard state is plain data, forgetting it
// leaves the lock locked (safe), and moving/dropping the mutex while locked is
// safe: the snodes are heap allocations owned by the mutex and nobody can be
// parked on them when the caller has `&mut`/ownership. No method unwinds after
// changing the state.
unsafe impl lock_api::RawMutex for RawMutex {
    #[cfg(not(numa_loom))]
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawMutex::new();
    #[cfg(numa_loom)]
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = panic!("RawMutex::INIT is unavailable under loom; use RawMutex::new");

    type Guard = MutexGuardState;

    #[inline]
    fn lock(&self) -> MutexGuardState {
        match self.lock_inner(None) {
            Some(g) => g,
            // `lock_slow(None)` never times out.
            None => unreachable!("untimed lock returned without the lock"),
        }
    }

    #[inline]
    fn try_lock(&self) -> Option<MutexGuardState> {
        self.cohort
            .try_lock()
            .then_some(MutexGuardState { node: UNKNOWN_NODE })
    }

    #[inline]
    unsafe fn unlock(&self, guard: MutexGuardState) {
        // One CAS when nobody waits. Otherwise the slow unlock grants,
        // wakes or hands off while still holding the lock, and its last step
        // releases it: nothing touches the mutex after that, so the thread
        // that takes it next may free it at once.
        if let Err(s) = self.cohort.try_unlock_fast() {
            self.cohort.unlock_slow(s, guard.node, false);
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.cohort.state.load(Ordering::Relaxed) & LOCKED_BIT != 0
    }
}

// SAFETY: `unlock_fair` releases exactly like `unlock` or hands the still-set
// `LOCKED_BIT` to one woken waiter; the default `bump` is used.
unsafe impl lock_api::RawMutexFair for RawMutex {
    #[inline]
    unsafe fn unlock_fair(&self, guard: MutexGuardState) {
        if let Err(s) = self.cohort.try_unlock_fast() {
            self.cohort.unlock_slow(s, guard.node, true);
        }
    }
}

// SAFETY: a timed-out attempt returns `None` only after the deadline and leaves
// no trace in the lock: the parked count is decremented under the queue lock
// in the timeout callback, and a spinning waiter is counted nowhere.
unsafe impl lock_api::RawMutexTimed for RawMutex {
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_for(&self, timeout: Duration) -> Option<MutexGuardState> {
        if self.cohort.try_lock_fast() {
            return Some(MutexGuardState { node: UNKNOWN_NODE });
        }
        // An unrepresentable deadline means "wait forever".
        self.lock_slow(Instant::now().checked_add(timeout))
    }

    #[inline]
    fn try_lock_until(&self, deadline: Instant) -> Option<MutexGuardState> {
        self.lock_inner(Some(deadline))
    }
}
