//! lock_api 0.4 support (feature `lock_api_04`): the same raw locks for code and
//! crates written against lock_api 0.4 (parking_lot 0.12, spin 0.9 to 0.12).
//!
//! lock_api 0.4's traits carry no guard state: `lock()` returns `()` and
//! `unlock()` takes nothing. What the 0.5 guard states carry is supplied here:
//!
//! - [`RawMutex`] and [`RawFairMutex`] keep no guard state (their 0.5 guard
//!   is a zero-sized `GuardSend`): their 0.4 impls are beside their 0.5 ones.
//!   The exclusive and upgradable sides of [`RawRwLock`] unlock with
//!   [`ExclusiveGuardState::new`], which carries nothing either. Mutex guards
//!   stay `Send` (`GuardSend`).
//! - A reader must release the counter it registered on (the state word or its
//!   node's counter), which only the [`SharedGuardState`] knows. An uncontended
//!   read counts on the state word and needs no record: its release is one
//!   `fetch_sub`, as in parking_lot. Only a read that registered on a node
//!   counter (reader contention) is recorded, in a thread-local list (allocated
//!   on the thread's first such read, a few bytes per held read lock); a
//!   release takes this thread's record for the lock if it has one, else
//!   releases a state-word read. Which of the thread's reads of one lock is
//!   released first does not matter: the lock keeps only counts, and releasing
//!   any one registration leaves a state that that reader's own release could
//!   have left. So rwlock guards are not `Send` (`GuardNoSend`, parking_lot
//!   0.12's default too): a read lock is released by the thread that took it.
//!   A contended read through lock_api 0.4 from a thread-local destructor that
//!   runs after this list's panics.
//!
//! - Recursive reads (`RawRwLockRecursive`, `read_recursive`, which lock_api
//!   0.5 does not have), parking_lot 0.12's rule: while the state word counts a
//!   reader, the read joins that count even past a waiting writer
//!   ([`RawRwLock::try_lock_shared_recursive`]); a thread that holds a read lock
//!   of the rwlock on a node counter counts the new read on that hold and
//!   registers nothing. Either way a thread that holds a read lock cannot block
//!   behind a waiting writer (which waits for that hold to leave); otherwise
//!   it takes an ordinary read lock.
//!
//! `RawCondvar` has no lock_api 0.4 counterpart (lock_api 0.4 has no condvar
//! trait).
//!
//! ```
//! use cst_mutex::lock_api_04::lock_api; // lock_api 0.4
//!
//! // Code written for lock_api 0.4 (parking_lot 0.12), generic over the raw lock:
//! fn bump<R: lock_api::RawMutex>(m: &lock_api::Mutex<R, u64>) -> u64 {
//!     let mut g = m.lock();
//!     *g += 1;
//!     *g
//! }
//! fn sum<R: lock_api::RawRwLockUpgrade>(l: &lock_api::RwLock<R, Vec<u32>>) -> u32 {
//!     let up = l.upgradable_read();
//!     let total = up.iter().sum();
//!     lock_api::RwLockUpgradableReadGuard::upgrade(up).push(total);
//!     total
//! }
//!
//! let m: lock_api::Mutex<cst_mutex::RawMutex, u64> = lock_api::Mutex::new(0);
//! assert_eq!(bump(&m), 1);
//! let l = cst_mutex::lock_api_04::RwLock::new(vec![1, 2]);
//! assert_eq!(sum(&l), 3);
//! assert_eq!(*l.read(), [1, 2, 3]);
//! ```

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

pub use lock_api04 as lock_api;

use ::lock_api as v05;

use crate::fair::RawFairMutex;
use crate::raw_rwlock::{NODE_READERS_BIT, READER_MASK};
use crate::remutex::RawThreadId;
use crate::sync;
use crate::{ExclusiveGuardState, RawMutex, RawRwLock, SharedGuardState};

/// One read lock this thread holds through lock_api 0.4 on a node counter.
struct ReadHold {
    /// The lock's address.
    addr: usize,
    /// The state of the registration the read made on the lock.
    state: SharedGuardState,
    /// Recursive reads taken on top of this registration without registering
    /// again (see `RawRwLockRecursive`); released before the registration.
    recursive: usize,
}

thread_local! {
    /// The read locks this thread holds through lock_api 0.4 on node
    /// counters, most recent last.
    static NODE_READS: RefCell<Vec<ReadHold>> = const { RefCell::new(Vec::new()) };
    /// The length of `NODE_READS`: a release of a state-word read reads this
    /// (no destructor, so no registration or state check) and skips the list.
    static NODE_READS_HELD: Cell<usize> = const { Cell::new(0) };
}

impl RawRwLock {
    fn addr(&self) -> usize {
        std::ptr::from_ref(self).addr()
    }

    /// Keeps the state of a read lock this thread just took, if it registered
    /// on a node counter (a state-word read needs no record).
    #[inline]
    fn push_read(&self, state: SharedGuardState) {
        if !state.is_fast() {
            self.push_node_read(state);
        }
    }

    #[cold]
    fn push_node_read(&self, state: SharedGuardState) {
        let addr = self.addr();
        let mut state = Some(state);
        let kept = NODE_READS.try_with(|reads| {
            let mut reads = reads.borrow_mut();
            reads.push(ReadHold {
                addr,
                state: state.take().unwrap(),
                recursive: 0,
            });
            NODE_READS_HELD.set(reads.len());
        });
        if kept.is_err() {
            // SAFETY: `state` is the read acquisition we just made and could not keep.
            unsafe { v05::RawRwLock::unlock_shared(self, state.take().unwrap()) };
            panic!(
                "cst_mutex: a contended lock_api 0.4 read lock was taken in a thread-local \
                 destructor that runs after cst-mutex's own; use the lock_api 0.5 API there"
            );
        }
    }

    /// A recursive read that never blocks behind a waiting writer, if one is
    /// possible: joining the state word's reader count, or counted on a hold
    /// this thread has on a node counter of `self`. False when neither
    /// applies (then an ordinary read lock is due).
    fn reenter_read(&self) -> bool {
        if let Some(state) = self.try_lock_shared_recursive() {
            self.push_read(state);
            return true;
        }
        if NODE_READS_HELD.get() == 0 {
            return false;
        }
        let addr = self.addr();
        NODE_READS
            .try_with(|reads| {
                let mut reads = reads.borrow_mut();
                match reads.iter_mut().rev().find(|h| h.addr == addr) {
                    Some(hold) => {
                        hold.recursive += 1;
                        true
                    }
                    None => false,
                }
            })
            .unwrap_or(false)
    }

    /// Takes back one node-counter read this thread holds on `self`:
    /// `Some(None)` for a recursive read counted on the latest hold (nothing
    /// to release on the lock), `Some(Some(state))` for that hold's
    /// registration, `None` when this thread holds none of `self` (its read is
    /// a state-word read). A hold leaves only after its recursive reads, so
    /// while this thread holds any read guard of `self` on it, one
    /// registration remains.
    fn pop_node_read(&self) -> Option<Option<SharedGuardState>> {
        if NODE_READS_HELD.get() == 0 {
            return None;
        }
        let addr = self.addr();
        NODE_READS
            .try_with(|reads| {
                let mut reads = reads.borrow_mut();
                let i = reads.iter().rposition(|h| h.addr == addr)?;
                if reads[i].recursive > 0 {
                    reads[i].recursive -= 1;
                    return Some(None);
                }
                let state = reads.remove(i).state;
                NODE_READS_HELD.set(reads.len());
                Some(Some(state))
            })
            .ok()
            .flatten()
    }

    /// [`lock_api04::RawRwLock::lock_shared`] past a failed fast try: the
    /// lock_api 0.5 slow path, then the per-thread record of a node read.
    #[cold]
    #[inline(never)]
    fn lock_shared_slow_04(&self) {
        self.push_read(self.lock_shared_untimed_slow());
    }

    /// [`lock_api04::RawRwLock::unlock_shared`] when the state word `s` shows
    /// node readers (or no reader): [`RawRwLock::pop_read_slow`], then the
    /// release of what it returns.
    ///
    /// # Safety
    ///
    /// The calling thread holds a read lock of `self`.
    #[cold]
    #[inline(never)]
    unsafe fn unlock_shared_slow_04(&self, s: u32) {
        if let Some(state) = self.pop_read_slow(s) {
            // SAFETY: `state` is the state of a read lock this thread holds.
            unsafe { v05::RawRwLock::unlock_shared(self, state) }
        }
    }

    /// The state to release one of this thread's read locks of `self` with
    /// (`None`: a recursive read that registered nothing).
    ///
    /// # Panics
    ///
    /// When this thread holds no node-counter read of `self` and the state
    /// word counts no reader: no read lock of `self` is held at all.
    ///
    /// Without `NODE_READERS_BIT` in the state word, no read of `self` is
    /// counted on a node counter, so the list is not looked at: a node
    /// reader enters only after seeing the bit set (setting it if need be),
    /// and only a writer that has drained every counter clears it, which
    /// cannot happen while this thread's registration counts. This thread saw
    /// the bit set before it entered, so (coherence on the one word) it still
    /// sees it now.
    #[inline]
    fn pop_read(&self) -> Option<SharedGuardState> {
        let s = self.state.load(sync::Ordering::Relaxed);
        if word_read(s) {
            return Some(SharedGuardState::FAST);
        }
        self.pop_read_slow(s)
    }

    /// [`RawRwLock::pop_read`] when node readers may exist (or nothing is
    /// read-locked: a contract violation).
    #[cold]
    fn pop_read_slow(&self, s: u32) -> Option<SharedGuardState> {
        if s & NODE_READERS_BIT != 0
            && let Some(node_read) = self.pop_node_read()
        {
            return node_read;
        }
        assert!(
            s & READER_MASK != 0,
            "cst_mutex: unlock_shared (lock_api 0.4) on a thread that holds no read lock of this RwLock"
        );
        Some(SharedGuardState::FAST)
    }
}

/// Whether a state word `s`, read by a thread that holds a read lock, shows
/// that lock counted in the word itself: no node readers, some word readers
/// (see [`RawRwLock::pop_read`]).
#[inline]
fn word_read(s: u32) -> bool {
    s & NODE_READERS_BIT == 0 && s & READER_MASK != 0
}

// SAFETY: forwards to the lock_api 0.5 implementation. Exclusive releases pass a
// fresh `ExclusiveGuardState::new()` (the node is a hint); shared releases pass the
// very state the acquisition returned, kept per thread (hence `GuardNoSend`: the
// release runs on the acquiring thread).
unsafe impl lock_api04::RawRwLock for RawRwLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawRwLock::new();

    type GuardMarker = lock_api04::GuardNoSend;

    #[inline]
    fn lock_shared(&self) {
        // The lock_api 0.5 `lock_shared` with its slow part and the per-thread
        // record out of line, so callers inline no more than `parking_lot`'s
        // read path: a reader counted in the state word records nothing.
        if self.try_shared_fast() != Some(true) {
            self.lock_shared_slow_04();
        }
    }

    #[inline]
    fn try_lock_shared(&self) -> bool {
        v05::RawRwLock::try_lock_shared(self)
            .map(|s| self.push_read(s))
            .is_some()
    }

    #[inline]
    unsafe fn unlock_shared(&self) {
        // `pop_read`'s fast case inline (see there), the rest out of line.
        let s = self.state.load(sync::Ordering::Relaxed);
        if word_read(s) {
            self.unlock_shared_word();
        } else {
            // SAFETY: the caller holds a read lock of `self` (trait contract).
            unsafe { self.unlock_shared_slow_04(s) }
        }
    }

    #[inline]
    fn lock_exclusive(&self) {
        v05::RawRwLock::lock_exclusive(self);
    }

    #[inline]
    fn try_lock_exclusive(&self) -> bool {
        v05::RawRwLock::try_lock_exclusive(self).is_some()
    }

    #[inline]
    unsafe fn unlock_exclusive(&self) {
        // SAFETY: the caller holds the write lock (trait contract).
        unsafe { v05::RawRwLock::unlock_exclusive(self, ExclusiveGuardState::new()) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        v05::RawRwLock::is_locked(self)
    }

    #[inline]
    fn is_locked_exclusive(&self) -> bool {
        v05::RawRwLock::is_locked_exclusive(self)
    }
}

// SAFETY: as for `RawRwLock`.
unsafe impl lock_api04::RawRwLockFair for RawRwLock {
    #[inline]
    unsafe fn unlock_shared_fair(&self) {
        if let Some(state) = self.pop_read() {
            // SAFETY: `state` is the state of a read lock this thread holds.
            unsafe { v05::RawRwLockFair::unlock_shared_fair(self, state) }
        }
    }

    #[inline]
    unsafe fn unlock_exclusive_fair(&self) {
        // SAFETY: the caller holds the write lock (trait contract).
        unsafe { v05::RawRwLockFair::unlock_exclusive_fair(self, ExclusiveGuardState::new()) }
    }
}

// SAFETY: as for `RawRwLock`; the read lock the downgrade makes is kept like any other.
unsafe impl lock_api04::RawRwLockDowngrade for RawRwLock {
    #[inline]
    unsafe fn downgrade(&self) {
        // SAFETY: the caller holds the write lock (trait contract).
        let state = unsafe { v05::RawRwLockDowngrade::downgrade(self, ExclusiveGuardState::new()) };
        self.push_read(state);
    }
}

// SAFETY: as for `RawRwLock`; timed-out attempts leave no trace (0.5 contract).
unsafe impl lock_api04::RawRwLockTimed for RawRwLock {
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_shared_for(&self, timeout: Duration) -> bool {
        v05::RawRwLockTimed::try_lock_shared_for(self, timeout)
            .map(|s| self.push_read(s))
            .is_some()
    }

    #[inline]
    fn try_lock_shared_until(&self, deadline: Instant) -> bool {
        v05::RawRwLockTimed::try_lock_shared_until(self, deadline)
            .map(|s| self.push_read(s))
            .is_some()
    }

    #[inline]
    fn try_lock_exclusive_for(&self, timeout: Duration) -> bool {
        v05::RawRwLockTimed::try_lock_exclusive_for(self, timeout).is_some()
    }

    #[inline]
    fn try_lock_exclusive_until(&self, deadline: Instant) -> bool {
        v05::RawRwLockTimed::try_lock_exclusive_until(self, deadline).is_some()
    }
}

// SAFETY: as for `RawRwLock`. A recursive read on a thread that already holds a
// read lock of this lock registers nothing: that hold keeps the lock read-locked
// (no writer inside) until the recursive read is released, which `pop_read`
// does first. Otherwise it is an ordinary read.
unsafe impl lock_api04::RawRwLockRecursive for RawRwLock {
    #[inline]
    fn lock_shared_recursive(&self) {
        if !self.reenter_read() {
            lock_api04::RawRwLock::lock_shared(self);
        }
    }

    #[inline]
    fn try_lock_shared_recursive(&self) -> bool {
        self.reenter_read() || lock_api04::RawRwLock::try_lock_shared(self)
    }
}

// SAFETY: as for `RawRwLockRecursive`.
unsafe impl lock_api04::RawRwLockRecursiveTimed for RawRwLock {
    #[inline]
    fn try_lock_shared_recursive_for(&self, timeout: Duration) -> bool {
        self.reenter_read() || lock_api04::RawRwLockTimed::try_lock_shared_for(self, timeout)
    }

    #[inline]
    fn try_lock_shared_recursive_until(&self, deadline: Instant) -> bool {
        self.reenter_read() || lock_api04::RawRwLockTimed::try_lock_shared_until(self, deadline)
    }
}

// SAFETY: as for `RawRwLock`; upgradable states are exclusive states.
unsafe impl lock_api04::RawRwLockUpgrade for RawRwLock {
    #[inline]
    fn lock_upgradable(&self) {
        v05::RawRwLockUpgrade::lock_upgradable(self);
    }

    #[inline]
    fn try_lock_upgradable(&self) -> bool {
        v05::RawRwLockUpgrade::try_lock_upgradable(self).is_some()
    }

    #[inline]
    unsafe fn unlock_upgradable(&self) {
        // SAFETY: the caller holds the upgradable lock (trait contract).
        unsafe { v05::RawRwLockUpgrade::unlock_upgradable(self, ExclusiveGuardState::new()) }
    }

    #[inline]
    unsafe fn upgrade(&self) {
        // SAFETY: the caller holds the upgradable lock (trait contract).
        unsafe { v05::RawRwLockUpgrade::upgrade(self, ExclusiveGuardState::new()) };
    }

    #[inline]
    unsafe fn try_upgrade(&self) -> bool {
        // SAFETY: the caller holds the upgradable lock (trait contract).
        unsafe { v05::RawRwLockUpgrade::try_upgrade(self, ExclusiveGuardState::new()) }.is_ok()
    }
}

// SAFETY: as for `RawRwLock`.
unsafe impl lock_api04::RawRwLockUpgradeFair for RawRwLock {
    #[inline]
    unsafe fn unlock_upgradable_fair(&self) {
        // SAFETY: the caller holds the upgradable lock (trait contract).
        unsafe {
            v05::RawRwLockUpgradeFair::unlock_upgradable_fair(self, ExclusiveGuardState::new())
        }
    }
}

// SAFETY: as for `RawRwLock`; a shared downgrade keeps its read lock's state.
unsafe impl lock_api04::RawRwLockUpgradeDowngrade for RawRwLock {
    #[inline]
    unsafe fn downgrade_upgradable(&self) {
        // SAFETY: the caller holds the upgradable lock (trait contract).
        let state = unsafe {
            v05::RawRwLockUpgradeDowngrade::downgrade_upgradable(self, ExclusiveGuardState::new())
        };
        self.push_read(state);
    }

    #[inline]
    unsafe fn downgrade_to_upgradable(&self) {
        // SAFETY: the caller holds the write lock (trait contract).
        unsafe {
            v05::RawRwLockUpgradeDowngrade::downgrade_to_upgradable(
                self,
                ExclusiveGuardState::new(),
            )
        };
    }
}

// SAFETY: as for `RawRwLock`.
unsafe impl lock_api04::RawRwLockUpgradeTimed for RawRwLock {
    #[inline]
    fn try_lock_upgradable_for(&self, timeout: Duration) -> bool {
        v05::RawRwLockUpgradeTimed::try_lock_upgradable_for(self, timeout).is_some()
    }

    #[inline]
    fn try_lock_upgradable_until(&self, deadline: Instant) -> bool {
        v05::RawRwLockUpgradeTimed::try_lock_upgradable_until(self, deadline).is_some()
    }

    #[inline]
    unsafe fn try_upgrade_for(&self, timeout: Duration) -> bool {
        // SAFETY: the caller holds the upgradable lock (trait contract).
        unsafe {
            v05::RawRwLockUpgradeTimed::try_upgrade_for(self, ExclusiveGuardState::new(), timeout)
        }
        .is_ok()
    }

    #[inline]
    unsafe fn try_upgrade_until(&self, deadline: Instant) -> bool {
        // SAFETY: the caller holds the upgradable lock (trait contract).
        unsafe {
            v05::RawRwLockUpgradeTimed::try_upgrade_until(
                self,
                ExclusiveGuardState::new(),
                deadline,
            )
        }
        .is_ok()
    }
}

/// [`crate::Mutex`] as a lock_api 0.4 `Mutex`.
pub type Mutex<T> = lock_api04::Mutex<RawMutex, T>;
/// The guard of a lock_api 0.4 [`Mutex`].
pub type MutexGuard<'a, T> = lock_api04::MutexGuard<'a, RawMutex, T>;
/// [`crate::FairMutex`] as a lock_api 0.4 `Mutex`.
pub type FairMutex<T> = lock_api04::Mutex<RawFairMutex, T>;
/// [`crate::ReentrantMutex`] as a lock_api 0.4 `ReentrantMutex`.
pub type ReentrantMutex<T> = lock_api04::ReentrantMutex<RawMutex, RawThreadId, T>;
/// [`crate::RwLock`] as a lock_api 0.4 `RwLock`.
pub type RwLock<T> = lock_api04::RwLock<RawRwLock, T>;
/// Read guard of a lock_api 0.4 [`RwLock`] (not `Send`).
pub type RwLockReadGuard<'a, T> = lock_api04::RwLockReadGuard<'a, RawRwLock, T>;
/// Write guard of a lock_api 0.4 [`RwLock`].
pub type RwLockWriteGuard<'a, T> = lock_api04::RwLockWriteGuard<'a, RawRwLock, T>;
/// Upgradable read guard of a lock_api 0.4 [`RwLock`].
pub type RwLockUpgradableReadGuard<'a, T> = lock_api04::RwLockUpgradableReadGuard<'a, RawRwLock, T>;
