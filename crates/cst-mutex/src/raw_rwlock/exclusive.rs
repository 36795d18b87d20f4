//! The write side of [`RawRwLock`]: the cohort mutex that writers and
//! upgradable readers serialise on, `WRITER_BIT` and the wait for the readers
//! inside to drain, and leaving or downgrading (admitting the readers that
//! waited).

use super::{
    DRAIN_BIT, ExclusiveGuardState, FAST, RawRwLock, SharedGuardState, untimed_lock_failed,
};
use crate::cohort::{
    LOCKED_BIT, NODE_READERS_BIT, READER_MASK, READER_ONE, READERS_PARKED_BIT, TOKEN_HANDOFF,
    TOKEN_NORMAL, UNKNOWN_NODE, WRITER_BIT,
};
use crate::spin::{spin_round, spin_rounds};
use crate::sync::{self, Ordering, ParkToken, fence};
use std::time::Instant;

impl RawRwLock {
    /// Marks every snode counter with `DRAIN_BIT` before the writer parks
    /// (the readers counted there wake it), or clears the marks again.
    pub(super) fn mark_drain(&self, on: bool) {
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

    /// Called by a writer holding `WRITER_BIT` that found no reader inside:
    /// no reader can enter until it clears `WRITER_BIT`, so `NODE_READERS_BIT`
    /// can be cleared (node readers that come later set it again before they
    /// enter). Keeps an uncontended writer on the fast path after a burst of
    /// reader contention.
    #[inline]
    pub(super) fn readers_drained(&self) {
        // Relaxed: a hint; the bit is only cleared by the `WRITER_BIT` holder.
        if self.cohort.state.load(Ordering::Relaxed) & NODE_READERS_BIT != 0 {
            // Relaxed: the drain that proved the counters 0 already acquired
            // from the readers' releases; clearing the bit publishes nothing.
            self.cohort
                .state
                .fetch_and(!NODE_READERS_BIT, Ordering::Relaxed);
        }
    }

    /// Takes the cohort mutex (writers and upgradable readers).
    pub(super) fn lock_cohort(&self, deadline: Option<Instant>) -> Option<ExclusiveGuardState> {
        if self.cohort.try_lock() {
            return Some(ExclusiveGuardState { node: UNKNOWN_NODE });
        }
        self.cohort
            .lock_slow(deadline)
            .map(|node| ExclusiveGuardState { node })
    }

    /// Releases the cohort mutex (we hold it, `WRITER_BIT` clear).
    pub(super) fn unlock_cohort(&self, g: ExclusiveGuardState, fair: bool) {
        if let Err(s) = self.cohort.try_unlock_fast() {
            self.cohort.unlock_slow(s, g.node, fair);
        }
    }

    /// Waits until no reader is inside (we hold the cohort mutex and
    /// `WRITER_BIT`). Returns false if `deadline` passed first.
    pub(super) fn wait_for_readers(&self, deadline: Option<Instant>) -> bool {
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
    pub(super) fn become_writer(&self, deadline: Option<Instant>) -> bool {
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
    pub(super) fn clear_writer_bit(&self) {
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
    pub(super) fn add_downgraded_reader(&self) -> SharedGuardState {
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
    pub(super) fn unlock_exclusive_inner(&self, g: ExclusiveGuardState, fair: bool) {
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
    pub(super) fn unlock_exclusive_slow(&self, g: ExclusiveGuardState, fair: bool) {
        self.clear_writer_bit();
        self.unlock_cohort(g, fair);
    }

    /// The writer's fast path: the cohort mutex and `WRITER_BIT` in one CAS
    /// from a free word with no reader of any kind.
    #[inline]
    pub(super) fn try_writer_fast(&self) -> bool {
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
    pub(super) fn lock_exclusive_inner(
        &self,
        deadline: Option<Instant>,
    ) -> Option<ExclusiveGuardState> {
        if self.try_writer_fast() {
            return Some(ExclusiveGuardState { node: UNKNOWN_NODE });
        }
        self.lock_exclusive_slow(deadline)
    }

    /// Slow exclusive acquisition: the cohort mutex, then `WRITER_BIT` and the
    /// readers' drain.
    #[cold]
    pub(super) fn lock_exclusive_slow(
        &self,
        deadline: Option<Instant>,
    ) -> Option<ExclusiveGuardState> {
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
    pub(super) fn lock_exclusive_untimed_slow(&self) -> ExclusiveGuardState {
        match self.lock_exclusive_slow(None) {
            Some(g) => g,
            None => untimed_lock_failed(),
        }
    }
}
