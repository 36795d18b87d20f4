//! The read side of [`RawRwLock`]: entering (the state word's counter, a
//! per-node counter, waiting for a writer), leaving, and waking a writer that
//! waits for the readers to drain.

use super::{
    DRAIN_BIT, FAST, NODE_READERS_BIT, READER_MASK, READER_ONE, READERS_PARKED_BIT, RawRwLock,
    SharedGuardState, TOKEN_HANDOFF, TOKEN_NORMAL, WRITER_BIT, spin_round, spin_rounds,
    untimed_lock_failed,
};
use crate::sync::{self, AtomicUsize, Ordering, ParkResult, ParkToken, fence};
use std::time::Instant;

impl RawRwLock {
    /// Wakes a writer parked waiting for readers to drain. Reads nothing of
    /// the lock: the key is only its address + 1.
    #[cold]
    pub(super) fn wake_drainer(key: usize) {
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
        let mut s = self.state.load(Ordering::Relaxed);
        while s & READER_MASK != READER_MASK && s & WRITER_BIT == 0 {
            // Relaxed: our read section was acquired by `g`'s acquisition;
            // this count is published by `g`'s release just below. A writer
            // that sets `WRITER_BIT` after this CAS (later in the word's
            // order) reads the word after its RMW and counts us.
            match self.state.compare_exchange_weak(
                s,
                s.wrapping_add(READER_ONE),
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
    /// state word, then the per-node counters) without taking a counter below
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
            // SAFETY: a per-node counter of this lock (set in
            // `lock_shared_slow`): static memory of the pool.
            let line = unsafe { &*(addr as *const AtomicUsize) };
            if Self::take_node_reader(line, key) {
                return true;
            }
        }
        // Relaxed: a first guess for the CAS.
        let mut s = self.state.load(Ordering::Relaxed);
        while s & READER_MASK != 0 {
            // Release: as `unlock_shared_word`.
            match self.state.compare_exchange_weak(
                s,
                s.wrapping_sub(READER_ONE),
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
        self.counter_set()
            .is_some_and(|set| set.lines.iter().any(|l| Self::take_node_reader(l, key)))
    }

    /// Takes one reader off the per-node counter `line` if it counts one.
    pub(super) fn take_node_reader(line: &AtomicUsize, key: usize) -> bool {
        // Relaxed: a first guess for the CAS.
        let mut c = line.load(Ordering::Relaxed);
        while c & !DRAIN_BIT != 0 {
            // Release: as `unlock_shared_inner`.
            match line.compare_exchange_weak(c, c - 1, Ordering::Release, Ordering::Relaxed) {
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
        let s = self.state.load(Ordering::Relaxed);
        if s & WRITER_BIT != 0 {
            return Some(false);
        }
        if s & READER_MASK == READER_MASK {
            return None;
        }
        // Acquire: pairs with the Release of the last writer's unlock.
        self.state
            .compare_exchange(
                s,
                s.wrapping_add(READER_ONE),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
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
    /// use cst_mutex::lock_api::RawRwLock as _;
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
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            let readers = s & READER_MASK;
            if readers == 0 || readers == READER_MASK {
                return None;
            }
            // Acquire: this CAS reads from a reader's RMW (the one that made
            // the count non-zero, or a later one), which continues the release
            // sequence of the last writer's release of the word; acquiring it
            // orders that writer's critical section before our read section.
            match self.state.compare_exchange_weak(
                s,
                s.wrapping_add(READER_ONE),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(SharedGuardState::FAST),
                Err(x) => s = x,
            }
        }
    }

    /// Registers on the per-node counter `line` if no writer is in; on failure leaves
    /// again (waking a draining writer if we were the last reader).
    ///
    /// Once readers count outside the state word, a state of 0 no longer
    /// means "no reader", so a registered node reader keeps
    /// `NODE_READERS_BIT` set: that sends writers (whose fast path CASes from
    /// exactly 0) to the draining slow path. A writer that has drained every
    /// counter clears the bit again ([`RawRwLock::readers_drained`]); a reader
    /// therefore enters only after seeing the bit set with `WRITER_BIT` clear,
    /// setting it itself if need be.
    pub(crate) fn try_shared_node(&self, line: &AtomicUsize) -> bool {
        // Relaxed: the count is published by the SeqCst fence below.
        line.fetch_add(1, Ordering::Relaxed);
        // Dekker with `become_writer`: counter store, fence, state load here;
        // `WRITER_BIT` store, fence, counter loads there. Either the writer
        // counts us (and neither enters nor clears `NODE_READERS_BIT` before
        // we leave) or we see its `WRITER_BIT`.
        fence(Ordering::SeqCst);
        // Acquire: pairs with the Release of the last writer's unlock.
        let mut s = self.state.load(Ordering::Acquire);
        if s & (WRITER_BIT | NODE_READERS_BIT) == 0 {
            // SeqCst RMW: ordered with a fast-path writer's CAS from 0 on the
            // same word: if it came first we see `WRITER_BIT` in `s`.
            s = self.state.fetch_or(NODE_READERS_BIT, Ordering::SeqCst);
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
        line.fetch_sub(1, Ordering::Relaxed);
        self.after_reader_left();
        false
    }

    /// Called after a reader left while a writer may be draining: wakes it when
    /// no reader remains (Dekker: we decremented before reading `WRITER_BIT`,
    /// the writer set it before counting). Out of line: readers release
    /// through here only while a writer waits.
    #[cold]
    pub(super) fn after_reader_left(&self) {
        fence(Ordering::SeqCst);
        if self.state.load(Ordering::Relaxed) & WRITER_BIT != 0 && self.readers_total() == 0 {
            // SAFETY:
            // - the key is this lock's address + 1, which this crate controls;
            // - the callback neither unwinds nor calls into the parking lot.
            unsafe { sync::unpark_one(self.writer_key(), |_| TOKEN_NORMAL) };
        }
    }

    /// Slow shared acquisition: the fast counter again (a spurious CAS
    /// failure or a writer brought us here), the node's counter on
    /// contention (binding the lock's counters on first use), spin, then park
    /// while a writer is in.
    #[cold]
    pub(crate) fn lock_shared_slow(&self, deadline: Option<Instant>) -> Option<SharedGuardState> {
        let mut line: Option<&AtomicUsize> = None;
        let mut round = 0u32;
        loop {
            match self.try_shared_fast() {
                Some(true) => return Some(SharedGuardState { counter: FAST }),
                Some(false) => {}
                None => {
                    if line.is_none() {
                        line = self
                            .counter_set_or_bind()
                            .map(|set| set.line(sync::current_node()));
                    }
                    // Without counters (the pool is exhausted) the state
                    // word's CAS is retried, as parking_lot's readers do.
                    match line {
                        Some(l) if self.try_shared_node(l) => {
                            return Some(SharedGuardState::for_line(l));
                        }
                        Some(_) => {}
                        None => {
                            sync::spin_loop();
                            continue;
                        }
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
            let state = &self.state;
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
    pub(super) fn lock_shared_inner(&self, deadline: Option<Instant>) -> Option<SharedGuardState> {
        if self.try_shared_fast() == Some(true) {
            return Some(SharedGuardState { counter: FAST });
        }
        self.lock_shared_slow(deadline)
    }

    /// Releases a read counted in the state word (guard state
    /// [`SharedGuardState::FAST`]).
    #[inline]
    pub(crate) fn unlock_shared_word(&self) {
        // Release: a writer that reads the count without us (an Acquire load or
        // RMW of the word) starts after our read section, whose reads then
        // cannot see its writes.
        let key = self.writer_key();
        let old = self.state.fetch_sub(READER_ONE, Ordering::Release);
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
            // SAFETY: `counter` is the address of a per-node counter of this
            // lock (set in `lock_shared_slow`): static memory of the pool.
            let line = unsafe { &*(g.counter as *const AtomicUsize) };
            let key = self.writer_key();
            // As in `unlock_shared_word`: the decrement tells whether a writer
            // sleeps on this counter; nothing of the lock is read after it.
            let old = line.fetch_sub(1, Ordering::Release);
            if old & DRAIN_BIT != 0 {
                Self::wake_drainer(key);
            }
            #[cfg(feature = "test-hooks")]
            crate::test_hooks::after_release(key - 1);
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
