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

use crate::cohort::{
    Cohort, LOCKED_BIT, NODE_READERS_BIT, READER_MASK, READER_ONE, READERS_PARKED_BIT,
    TOKEN_HANDOFF, TOKEN_NORMAL, UNKNOWN_NODE, WRITER_BIT,
};
use crate::snode::Snode;
use crate::spin::{spin_round, spin_rounds};
use crate::sync::{self, Ordering, ParkResult, ParkToken, fence};
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
/// use lock_api::{RawRwLock as _, RawRwLockDowngrade as _};
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

    /// Marks every snode counter with `DRAIN_BIT` before the writer parks
    /// (the readers counted there wake it), or clears the marks again.
    fn mark_drain(&self, on: bool) {
        for s in self.cohort.snodes.iter() {
            if on {
                // SeqCst: ordered with the readers' decrements of this counter
                // (an RMW each): a decrement before this sees no mark, and then
                // the `validate` below, after this, sees that decrement.
                s.readers.count.fetch_or(DRAIN_BIT, Ordering::SeqCst);
            } else if s.readers.count.load(Ordering::Relaxed) & DRAIN_BIT != 0 {
                // Relaxed: a stale mark costs a reader one spurious wake-up.
                s.readers.count.fetch_and(!DRAIN_BIT, Ordering::Relaxed);
            }
        }
    }

    /// Wakes a writer parked waiting for readers to drain. Reads nothing of
    /// the lock: the key is only its address + 1.
    #[cold]
    fn wake_drainer(key: usize) {
        // SAFETY:
        // - the key is a lock's address + 1 (a writer key of this crate);
        //   the lock itself is not read, so it may be gone already;
        // - the callback neither unwinds nor calls into the parking lot.
        unsafe { sync::unpark_one(key, |_| TOKEN_NORMAL) };
    }

    /// Moves a read we hold onto the state word's counter: one more reader is
    /// counted there first, then `g`'s counter gives ours up. Never waits.
    /// `g` comes back unchanged while a writer drains (`WRITER_BIT`: it may
    /// have read the state word already and would miss the move) or the
    /// word's counter is full.
    ///
    /// # Safety
    ///
    /// `g` is a read acquisition of this lock held by the caller.
    pub unsafe fn into_state_word(&self, g: SharedGuardState) -> SharedGuardState {
        if g.counter == FAST {
            return g;
        }
        // Relaxed: a first guess for the CAS.
        let mut s = self.cohort.state.load(Ordering::Relaxed);
        while s & READER_MASK != READER_MASK && s & WRITER_BIT == 0 {
            // Relaxed: our read section was acquired by `g`'s acquisition;
            // this count is published by `g`'s release just below. A writer
            // that sets `WRITER_BIT` after this CAS (later in the word's
            // order) reads the word after its RMW and counts us.
            match self.cohort.state.compare_exchange_weak(
                s,
                s + READER_ONE,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.unlock_shared_inner(g);
                    return SharedGuardState { counter: FAST };
                }
                Err(x) => s = x,
            }
        }
        g
    }

    /// Releases one read counted on any counter (`prefer` first, then the
    /// state word, then the snodes' counters) without taking a counter below
    /// zero; false if no counter counts a reader.
    ///
    /// For FFI callers that track reads by count rather than by guard (a read
    /// lock released by a thread that did not take it, as glibc's rwlock
    /// allows): the total number of readers is what writers wait for, so any
    /// counter may give one up, as long as every release goes through here
    /// once one has (a plain [`unlock_shared`](lock_api::RawRwLock::unlock_shared)
    /// of a guard whose counter another release emptied would take it below
    /// zero).
    ///
    /// # Safety
    ///
    /// The caller releases a read lock that some context holds on this lock.
    pub unsafe fn unlock_shared_any(&self, prefer: Option<SharedGuardState>) -> bool {
        let key = self.writer_key();
        let snode_first = prefer.filter(|g| g.counter != FAST).map(|g| g.counter);
        if let Some(addr) = snode_first {
            // SAFETY: an snode of this lock (set in `lock_shared_slow`), alive
            // while the lock is.
            let sn = unsafe { &*(addr as *const Snode) };
            if Self::take_node_reader(sn, key) {
                return true;
            }
        }
        // Relaxed: a first guess for the CAS.
        let mut s = self.cohort.state.load(Ordering::Relaxed);
        while s & READER_MASK != 0 {
            // Release: as `unlock_shared_word`.
            match self.cohort.state.compare_exchange_weak(
                s,
                s - READER_ONE,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    if s & WRITER_BIT != 0 {
                        Self::wake_drainer(key);
                    }
                    #[cfg(feature = "test-hooks")]
                    crate::test_hooks::after_release(key - 1);
                    return true;
                }
                Err(x) => s = x,
            }
        }
        self.cohort
            .snodes
            .iter()
            .any(|sn| Self::take_node_reader(sn, key))
    }

    /// Takes one reader off `sn`'s counter if it counts one.
    fn take_node_reader(sn: &Snode, key: usize) -> bool {
        // Relaxed: a first guess for the CAS.
        let mut c = sn.readers.count.load(Ordering::Relaxed);
        while c & !DRAIN_BIT != 0 {
            // Release: as `unlock_shared_inner`.
            match sn.readers.count.compare_exchange_weak(
                c,
                c - 1,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    if c & DRAIN_BIT != 0 {
                        Self::wake_drainer(key);
                    }
                    #[cfg(feature = "test-hooks")]
                    crate::test_hooks::after_release(key - 1);
                    return true;
                }
                Err(x) => c = x,
            }
        }
        false
    }

    /// One try on the fast (state-word) reader counter: `Some(true)` when
    /// counted, `Some(false)` when a writer is in, `None` on contention (the
    /// word changed under us) or a full counter. A strong CAS: it fails only
    /// when the word changed (LL/SC targets retry a spurious failure inside
    /// it), so an uncontended reader never reaches the node counters.
    #[inline]
    pub(crate) fn try_shared_fast(&self) -> Option<bool> {
        // Relaxed: a first guess for the CAS, which acquires.
        let s = self.cohort.state.load(Ordering::Relaxed);
        if s & WRITER_BIT != 0 {
            return Some(false);
        }
        if s & READER_MASK == READER_MASK {
            return None;
        }
        // Acquire: pairs with the Release of the last writer's unlock.
        self.cohort
            .state
            .compare_exchange(s, s + READER_ONE, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| true)
    }

    /// A read lock taken only while the state word already counts a reader:
    /// never waits, and never refused because a writer is waiting.
    ///
    /// A waiting writer has set `WRITER_BIT` and waits for every counter to
    /// reach 0, and no reader may start counting on the state word while
    /// `WRITER_BIT` is set. Joining a count that is not 0 keeps that rule's
    /// point: while the word counts a reader, the writer that set `WRITER_BIT`
    /// is not inside (it enters only after seeing the count 0, and during one
    /// `WRITER_BIT` period the count never rises from 0), so adding one more
    /// reader to that count delays the writer, exactly as if the reader had
    /// been inside already. This is the rule of parking_lot's
    /// `read_recursive`: it succeeds without blocking while another read lock
    /// is held (here: one counted in the state word). `None` when the word
    /// counts no reader (or its counter is full); then take an ordinary read
    /// lock.
    ///
    /// With this, a thread that holds a read lock on the state word can read
    /// again past a waiting writer without deadlocking. Release the state with
    /// `unlock_shared` like any other.
    ///
    /// ```
    /// use cst_mutex::RawRwLock;
    /// use lock_api::RawRwLock as _;
    ///
    /// let raw = RawRwLock::new();
    /// assert!(raw.try_lock_shared_recursive().is_none(), "no reader inside");
    /// let outer = raw.lock_shared();
    /// let inner = raw.try_lock_shared_recursive().expect("a reader is inside");
    /// // SAFETY: both states are this context's read acquisitions.
    /// unsafe {
    ///     raw.unlock_shared(inner);
    ///     raw.unlock_shared(outer);
    /// }
    /// assert!(!raw.is_locked());
    /// ```
    #[inline]
    pub fn try_lock_shared_recursive(&self) -> Option<SharedGuardState> {
        // Relaxed: a first guess for the CAS, which acquires.
        let mut s = self.cohort.state.load(Ordering::Relaxed);
        loop {
            let readers = s & READER_MASK;
            if readers == 0 || readers == READER_MASK {
                return None;
            }
            // Acquire: this CAS reads from a reader's RMW (the one that made
            // the count non-zero, or a later one), which continues the release
            // sequence of the last writer's release of the word; acquiring it
            // orders that writer's critical section before our read section.
            match self.cohort.state.compare_exchange_weak(
                s,
                s + READER_ONE,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(SharedGuardState::FAST),
                Err(x) => s = x,
            }
        }
    }

    /// Registers on `snode`'s counter if no writer is in; on failure leaves
    /// again (waking a draining writer if we were the last reader).
    ///
    /// Once readers count outside the state word, a state of 0 no longer
    /// means "no reader", so a registered node reader keeps
    /// `NODE_READERS_BIT` set: that sends writers (whose fast path CASes from
    /// exactly 0) to the draining slow path. A writer that has drained every
    /// counter clears the bit again ([`RawRwLock::readers_drained`]); a reader
    /// therefore enters only after seeing the bit set with `WRITER_BIT` clear,
    /// setting it itself if need be.
    pub(crate) fn try_shared_node(&self, snode: &Snode) -> bool {
        // Relaxed: the count is published by the SeqCst fence below.
        snode.readers.count.fetch_add(1, Ordering::Relaxed);
        // Dekker with `become_writer`: counter store, fence, state load here;
        // `WRITER_BIT` store, fence, counter loads there. Either the writer
        // counts us (and neither enters nor clears `NODE_READERS_BIT` before
        // we leave) or we see its `WRITER_BIT`.
        fence(Ordering::SeqCst);
        // Acquire: pairs with the Release of the last writer's unlock.
        let mut s = self.cohort.state.load(Ordering::Acquire);
        if s & (WRITER_BIT | NODE_READERS_BIT) == 0 {
            // SeqCst RMW: ordered with a fast-path writer's CAS from 0 on the
            // same word: if it came first we see `WRITER_BIT` in `s`.
            s = self
                .cohort
                .state
                .fetch_or(NODE_READERS_BIT, Ordering::SeqCst);
        }
        if s & WRITER_BIT == 0 {
            return true;
        }
        // Relaxed: we leave without having entered, so this decrement has
        // nothing to publish (we read only the state word since registering).
        // Whatever a draining writer must see of this thread's earlier read
        // sections was released by their own unlocks: a Release RMW on the
        // counter (or the state word) each used. Every write of a counter is
        // an RMW, so each later value of that counter, this decrement's
        // included, continues the release sequence of that unlock, and the
        // writer's Acquire load of the counter synchronizes with it whichever
        // value it reads from that decrement on; a value between that
        // section's increment and its decrement still counts the section, so
        // the writer waits, and one before the increment is ruled out by the
        // fence handshake through which the section entered.
        snode.readers.count.fetch_sub(1, Ordering::Relaxed);
        self.after_reader_left();
        false
    }

    /// Called by a writer holding `WRITER_BIT` that found no reader inside:
    /// no reader can enter until it clears `WRITER_BIT`, so `NODE_READERS_BIT`
    /// can be cleared (node readers that come later set it again before they
    /// enter). Keeps an uncontended writer on the fast path after a burst of
    /// reader contention.
    #[inline]
    fn readers_drained(&self) {
        // Relaxed: a hint; the bit is only cleared by the `WRITER_BIT` holder.
        if self.cohort.state.load(Ordering::Relaxed) & NODE_READERS_BIT != 0 {
            // Relaxed: the drain that proved the counters 0 already acquired
            // from the readers' releases; clearing the bit publishes nothing.
            self.cohort
                .state
                .fetch_and(!NODE_READERS_BIT, Ordering::Relaxed);
        }
    }

    /// Called after a reader left while a writer may be draining: wakes it when
    /// no reader remains (Dekker: we decremented before reading `WRITER_BIT`,
    /// the writer set it before counting). Out of line: readers release
    /// through here only while a writer waits.
    #[cold]
    fn after_reader_left(&self) {
        fence(Ordering::SeqCst);
        if self.cohort.state.load(Ordering::Relaxed) & WRITER_BIT != 0 && self.readers_total() == 0
        {
            // SAFETY:
            // - the key is this lock's address + 1, which this crate controls;
            // - the callback neither unwinds nor calls into the parking lot.
            unsafe { sync::unpark_one(self.writer_key(), |_| TOKEN_NORMAL) };
        }
    }

    /// Slow shared acquisition: the fast counter again (a spurious CAS
    /// failure or a writer brought us here), the node's snode counter on
    /// contention (allocating the snode on first use), spin, then park while
    /// a writer is in.
    #[cold]
    pub(crate) fn lock_shared_slow(&self, deadline: Option<Instant>) -> Option<SharedGuardState> {
        let mut snode: Option<&Snode> = None;
        let mut round = 0u32;
        loop {
            match self.try_shared_fast() {
                Some(true) => return Some(SharedGuardState { counter: FAST }),
                Some(false) => {}
                None => {
                    let sn = *snode.get_or_insert_with(|| {
                        self.cohort.snodes.get_or_insert(sync::current_node())
                    });
                    if self.try_shared_node(sn) {
                        return Some(SharedGuardState::for_snode(sn));
                    }
                }
            }
            if round < spin_rounds() {
                round += 1;
                spin_round(round);
                continue;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
            let state = &self.cohort.state;
            let validate = || {
                let mut s = state.load(Ordering::Relaxed);
                loop {
                    if s & WRITER_BIT == 0 {
                        return false;
                    }
                    match state.compare_exchange_weak(
                        s,
                        s | READERS_PARKED_BIT,
                        Ordering::SeqCst,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return true,
                        Err(x) => s = x,
                    }
                }
            };
            let timed_out = |_key: usize, last: bool| {
                if last {
                    state.fetch_and(!READERS_PARKED_BIT, Ordering::Relaxed);
                }
            };
            // SAFETY:
            // - the key is this lock's address, which this crate controls;
            // - `validate`/`timed_out` only touch atomics: no unwinding, no
            //   parking-lot calls; `before_sleep` is empty.
            let r = unsafe {
                sync::park(
                    self.reader_key(),
                    validate,
                    || {},
                    timed_out,
                    ParkToken(0),
                    deadline,
                )
            };
            match r {
                ParkResult::Unparked(TOKEN_HANDOFF) => {
                    return Some(SharedGuardState { counter: FAST });
                }
                ParkResult::Unparked(_) | ParkResult::Invalid => round = 0,
                ParkResult::TimedOut => return None,
            }
        }
    }

    #[inline]
    fn lock_shared_inner(&self, deadline: Option<Instant>) -> Option<SharedGuardState> {
        if self.try_shared_fast() == Some(true) {
            return Some(SharedGuardState { counter: FAST });
        }
        self.lock_shared_slow(deadline)
    }

    /// Takes the cohort mutex (writers and upgradable readers).
    fn lock_cohort(&self, deadline: Option<Instant>) -> Option<ExclusiveGuardState> {
        if self.cohort.try_lock() {
            return Some(ExclusiveGuardState { node: UNKNOWN_NODE });
        }
        self.cohort
            .lock_slow(deadline)
            .map(|node| ExclusiveGuardState { node })
    }

    /// Releases the cohort mutex (we hold it, `WRITER_BIT` clear).
    fn unlock_cohort(&self, g: ExclusiveGuardState, fair: bool) {
        if let Err(s) = self.cohort.try_unlock_fast() {
            self.cohort.unlock_slow(s, g.node, fair);
        }
    }

    /// Waits until no reader is inside (we hold the cohort mutex and
    /// `WRITER_BIT`). Returns false if `deadline` passed first.
    fn wait_for_readers(&self, deadline: Option<Instant>) -> bool {
        let mut round = 0u32;
        let mut marked = false;
        loop {
            if self.readers_total() == 0 {
                if marked {
                    self.mark_drain(false);
                }
                self.readers_drained();
                return true;
            }
            if round < spin_rounds() {
                round += 1;
                spin_round(round);
                continue;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                if marked {
                    self.mark_drain(false);
                }
                return false;
            }
            // Node readers that leave while we sleep must wake us (see
            // `DRAIN_BIT`); readers of the state word see `WRITER_BIT`.
            self.mark_drain(true);
            marked = true;
            // SAFETY:
            // - the key is this lock's address + 1, which this crate controls;
            // - `validate` only reads atomics; `before_sleep`/`timed_out` are empty.
            unsafe {
                sync::park(
                    self.writer_key(),
                    || self.readers_total() != 0,
                    || {},
                    |_, _| {},
                    ParkToken(0),
                    deadline,
                )
            };
        }
    }

    /// Sets `WRITER_BIT` and drains readers; on timeout clears it again.
    fn become_writer(&self, deadline: Option<Instant>) -> bool {
        // Relaxed: setting the bit publishes nothing (a reader that sees it
        // backs off without touching the data, and we have written nothing
        // yet), and what we must acquire (the releases of the readers that
        // left) is acquired by the SeqCst fence below, an acquire fence after
        // this read, and by the Acquire loads of `readers_total`.
        self.cohort.state.fetch_or(WRITER_BIT, Ordering::Relaxed);
        // Dekker with `try_shared_node` (see there).
        fence(Ordering::SeqCst);
        if self.wait_for_readers(deadline) {
            return true;
        }
        self.clear_writer_bit();
        false
    }

    /// Clears `WRITER_BIT` and admits every parked reader in one step (they
    /// are counted on the state word before the cohort mutex is released, so
    /// the next writer waits for them). We hold the cohort mutex.
    fn clear_writer_bit(&self) {
        let old = self.cohort.state.fetch_and(!WRITER_BIT, Ordering::SeqCst);
        if old & READERS_PARKED_BIT == 0 {
            return;
        }
        let state = &self.cohort.state;
        let callback = |n: usize| {
            // No reader can park now: `WRITER_BIT` is clear and only the cohort
            // holder (us) can set it again.
            let mut s = state.load(Ordering::Relaxed);
            loop {
                // Admit them on the state word if its counter has room;
                // otherwise they wake to register on their own (node counters).
                let room = (READER_MASK - (s & READER_MASK)) / READER_ONE;
                let (new, token) = if n <= room {
                    ((s & !READERS_PARKED_BIT) + n * READER_ONE, TOKEN_HANDOFF)
                } else {
                    (s & !READERS_PARKED_BIT, TOKEN_NORMAL)
                };
                // Relaxed: our critical section was released by the `fetch_and`
                // that cleared `WRITER_BIT` above, and this CAS continues its
                // release sequence (every write to the word is an RMW), so a
                // reader that acquires the word's new value synchronizes with
                // that release; readers handed the lock (`TOKEN_HANDOFF`) also
                // synchronize through the parking lot's unpark.
                match state.compare_exchange_weak(s, new, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => return token,
                    Err(x) => s = x,
                }
            }
        };
        // SAFETY:
        // - the key is this lock's address, which this crate controls;
        // - the callback only updates the state word: no unwinding, no
        //   parking-lot calls.
        unsafe { sync::unpark_all_with(self.reader_key(), callback) };
    }

    /// Counts one more reader for a downgrade, while we hold the cohort mutex
    /// and no writer drains (only the cohort holder sets `WRITER_BIT`): on
    /// the state word, or, when its counter is full, on our node's counter
    /// (never carrying into the bits below).
    fn add_downgraded_reader(&self) -> SharedGuardState {
        // Relaxed: a first guess for the CAS.
        let mut s = self.cohort.state.load(Ordering::Relaxed);
        while s & READER_MASK != READER_MASK {
            // Release, no Acquire: we hold the cohort mutex (and `WRITER_BIT`)
            // across the downgrade, so there is nothing to acquire; but from
            // this CAS on the word counts a reader, and a reader joining that
            // count through `try_lock_shared_recursive` (before we clear
            // `WRITER_BIT`) acquires from this CAS, so it must publish our
            // write section.
            match self.cohort.state.compare_exchange_weak(
                s,
                s + READER_ONE,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return SharedGuardState { counter: FAST },
                Err(x) => s = x,
            }
        }
        let snode = self.cohort.snodes.get_or_insert(sync::current_node());
        // Relaxed: we hold the cohort mutex, so no writer is draining and
        // none can set `WRITER_BIT` before we release it, which publishes both.
        self.cohort
            .state
            .fetch_or(NODE_READERS_BIT, Ordering::Relaxed);
        snode.readers.count.fetch_add(1, Ordering::Relaxed);
        SharedGuardState::for_snode(snode)
    }

    #[inline]
    fn unlock_exclusive_inner(&self, g: ExclusiveGuardState, fair: bool) {
        // Nothing else set: no reader parked or inside, no writer parked.
        if self
            .cohort
            .state
            .compare_exchange(
                LOCKED_BIT | WRITER_BIT,
                0,
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            return;
        }
        self.unlock_exclusive_slow(g, fair);
    }

    /// The exclusive release when the word holds more than our own bits
    /// (parked readers or writers, node readers): one out-of-line call, so
    /// callers inline no more than the CAS.
    #[cold]
    #[inline(never)]
    fn unlock_exclusive_slow(&self, g: ExclusiveGuardState, fair: bool) {
        self.clear_writer_bit();
        self.unlock_cohort(g, fair);
    }

    /// Releases a read counted in the state word (guard state
    /// [`SharedGuardState::FAST`]).
    #[inline]
    pub(crate) fn unlock_shared_word(&self) {
        // Release: a writer that reads the count without us (an Acquire load or
        // RMW of the word) starts after our read section, whose reads then
        // cannot see its writes.
        let key = self.writer_key();
        let old = self.cohort.state.fetch_sub(READER_ONE, Ordering::Release);
        // Nothing of the lock after the decrement (the lock may be gone once
        // the writer saw it): a writer draining readers is woken by key, and
        // re-checks the counters itself.
        if old & WRITER_BIT != 0 {
            Self::wake_drainer(key);
        }
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::after_release(key - 1);
    }

    #[inline]
    pub(crate) fn unlock_shared_inner(&self, g: SharedGuardState) {
        if g.counter == FAST {
            self.unlock_shared_word();
        } else {
            // SAFETY: `counter` is the address of an snode of this lock (set in
            // `lock_shared_slow`); an rwlock's snodes stay attached until it is
            // dropped (only a mutex detaches them), which cannot happen while
            // this shared acquisition exists.
            let snode = unsafe { &*(g.counter as *const Snode) };
            let key = self.writer_key();
            // As in `unlock_shared_word`: the decrement tells whether a writer
            // sleeps on this counter; nothing of the lock is read after it.
            let old = snode.readers.count.fetch_sub(1, Ordering::Release);
            if old & DRAIN_BIT != 0 {
                Self::wake_drainer(key);
            }
            #[cfg(feature = "test-hooks")]
            crate::test_hooks::after_release(key - 1);
        }
    }

    /// The writer's fast path: the cohort mutex and `WRITER_BIT` in one CAS
    /// from a free word with no reader of any kind.
    #[inline]
    fn try_writer_fast(&self) -> bool {
        // Acquire: pairs with the Release of the previous writer's or last
        // reader's release of the word.
        self.cohort
            .state
            .compare_exchange(
                0,
                LOCKED_BIT | WRITER_BIT,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    #[inline]
    fn lock_exclusive_inner(&self, deadline: Option<Instant>) -> Option<ExclusiveGuardState> {
        if self.try_writer_fast() {
            return Some(ExclusiveGuardState { node: UNKNOWN_NODE });
        }
        self.lock_exclusive_slow(deadline)
    }

    /// Slow exclusive acquisition: the cohort mutex, then `WRITER_BIT` and the
    /// readers' drain.
    #[cold]
    fn lock_exclusive_slow(&self, deadline: Option<Instant>) -> Option<ExclusiveGuardState> {
        let g = self.lock_cohort(deadline)?;
        if self.become_writer(deadline) {
            return Some(g);
        }
        self.unlock_cohort(g, false);
        None
    }

    /// [`lock_api::RawRwLock::lock_exclusive`]'s slow path: no deadline, so it
    /// always returns the lock.
    #[cold]
    fn lock_exclusive_untimed_slow(&self) -> ExclusiveGuardState {
        match self.lock_exclusive_slow(None) {
            Some(g) => g,
            None => untimed_lock_failed(),
        }
    }

    /// [`lock_api::RawRwLock::lock_shared`]'s slow path: no deadline, so it
    /// always returns the lock.
    #[cold]
    pub(crate) fn lock_shared_untimed_slow(&self) -> SharedGuardState {
        match self.lock_shared_slow(None) {
            Some(g) => g,
            None => untimed_lock_failed(),
        }
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
