//! The write side of [`RawRwLock`]: the writer mutex (numa-spin's queue lock)
//! that writers and upgradable readers serialise on, `WRITER_BIT` and the
//! wait for the readers inside to drain, and leaving or downgrading (admitting
//! the readers that waited).

use super::{
    DRAIN_BIT, ExclusiveGuardState, FAST, NODE_READERS_BIT, READER_MASK, READER_ONE,
    READERS_PARKED_BIT, RawRwLock, SharedGuardState, TOKEN_HANDOFF, TOKEN_NORMAL, WRITER_BIT,
    spin_round, spin_rounds, untimed_lock_failed,
};
use crate::sync::{self, Ordering, ParkToken, fence};
use std::time::Instant;

impl RawRwLock {
    /// Marks every per-node counter with `DRAIN_BIT` before the writer parks
    /// (the readers counted there wake it), or clears the marks again.
    pub(super) fn mark_drain(&self, on: bool) {
        let Some(set) = self.counter_set() else {
            return;
        };
        for line in &set.lines {
            if on {
                // SeqCst: ordered with the readers' decrements of this counter
                // (an RMW each): a decrement before this sees no mark, and then
                // the `validate` below, after this, sees that decrement.
                line.fetch_or(DRAIN_BIT, Ordering::SeqCst);
            } else if line.load(Ordering::Relaxed) & DRAIN_BIT != 0 {
                // Relaxed: a stale mark costs a reader one spurious wake-up.
                line.fetch_and(!DRAIN_BIT, Ordering::Relaxed);
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
        if self.state.load(Ordering::Relaxed) & NODE_READERS_BIT != 0 {
            // Relaxed: the drain that proved the counters 0 already acquired
            // from the readers' releases; clearing the bit publishes nothing.
            self.state.fetch_and(!NODE_READERS_BIT, Ordering::Relaxed);
        }
    }

    /// Takes the writer mutex (writers and upgradable readers); false if
    /// `deadline` passed first.
    pub(super) fn lock_writer_mutex(&self, deadline: Option<Instant>) -> bool {
        match deadline {
            None => {
                self.mutex.acquire();
                true
            }
            #[cfg(not(numa_loom))]
            Some(d) => self.mutex.try_acquire_until(d),
            // Loom: an attempt whose sleep may time out at any point (the
            // models explore both outcomes).
            #[cfg(numa_loom)]
            Some(_) => self.mutex.try_acquire_for_model(),
        }
    }

    /// Releases the writer mutex (we hold it, `WRITER_BIT` clear).
    pub(super) fn unlock_writer_mutex(&self, fair: bool) {
        // SAFETY: the caller holds the writer mutex (an exclusive or
        // upgradable acquisition of this lock), and this ends that hold.
        unsafe {
            if fair {
                self.mutex.release_fair();
            } else {
                self.mutex.release();
            }
        }
    }

    /// Waits until no reader is inside (we hold the writer mutex and
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

    /// Sets `WRITER_BIT` (we hold the writer mutex). The previous writer
    /// releases the mutex before it clears its own bit (that clear is its
    /// releasing step for readers, after which it touches nothing of the
    /// lock: see `unlock_exclusive_inner`), so the bit may still be set: we
    /// wait for that clear (`wait`, a few instructions unless the previous
    /// writer was preempted there) or give up (a try). Returns whether the
    /// bit is ours.
    pub(super) fn set_writer_bit(&self, wait: bool) -> bool {
        let mut round = 0u32;
        // Relaxed: a first guess for the CAS.
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & WRITER_BIT != 0 {
                if !wait {
                    return false;
                }
                round = round.saturating_add(1);
                spin_round(round);
                // Relaxed: as above.
                s = self.state.load(Ordering::Relaxed);
                continue;
            }
            // Relaxed: the previous writer's section was acquired with the
            // mutex; what the bit must be ordered with is ordered by the
            // caller's SeqCst fence (see `become_writer`).
            match self.state.compare_exchange_weak(
                s,
                s | WRITER_BIT,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(x) => s = x,
            }
        }
    }

    /// Sets `WRITER_BIT` and drains readers; on timeout clears it again.
    pub(super) fn become_writer(&self, deadline: Option<Instant>) -> bool {
        // Relaxed: setting the bit publishes nothing (a reader that sees it
        // backs off without touching the data, and we have written nothing
        // yet), and what we must acquire (the releases of the readers that
        // left) is acquired by the SeqCst fence below, an acquire fence after
        // this read, and by the Acquire loads of `readers_total`.
        self.set_writer_bit(true);
        // Dekker with `try_shared_node` (see there).
        fence(Ordering::SeqCst);
        if self.wait_for_readers(deadline) {
            return true;
        }
        self.clear_writer_bit();
        false
    }

    /// Clears `WRITER_BIT` and admits every parked reader in one step (they
    /// are counted on the state word before the writer mutex is released, so
    /// the next writer waits for them). We hold the writer mutex.
    pub(super) fn clear_writer_bit(&self) {
        let old = self.state.fetch_and(!WRITER_BIT, Ordering::SeqCst);
        if old & READERS_PARKED_BIT == 0 {
            return;
        }
        let state = &self.state;
        let callback = |n: usize| {
            // No reader parks while this runs: readers validate their park
            // under the same bucket lock. A writer may have set `WRITER_BIT`
            // again since (after the writer mutex's release); it then waits
            // for the readers admitted here like any others.
            let mut s = state.load(Ordering::Relaxed);
            loop {
                // Admit them on the state word if its counter has room;
                // otherwise they wake to register on their own (node counters).
                let room = ((READER_MASK - (s & READER_MASK)) / READER_ONE) as usize;
                let (new, token) = if n <= room {
                    // `n <= room < 2^28`: the cast is exact.
                    (
                        (s & !READERS_PARKED_BIT) + n as u32 * READER_ONE,
                        TOKEN_HANDOFF,
                    )
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

    /// Counts one more reader for a downgrade, while we hold the writer mutex
    /// and no writer drains (only the mutex holder sets `WRITER_BIT`): on
    /// the state word, or, when its counter is full, on our node's counter
    /// (never carrying into the bits below).
    pub(super) fn add_downgraded_reader(&self) -> SharedGuardState {
        // Relaxed: a first guess for the CAS.
        let mut s = self.state.load(Ordering::Relaxed);
        // With the pool exhausted the word's counter must take us; it has
        // room for 2^28 - 1 readers, more threads than a process runs.
        while s & READER_MASK != READER_MASK || self.counter_set_or_bind().is_none() {
            // Release, no Acquire: we hold the writer mutex (and `WRITER_BIT`)
            // across the downgrade, so there is nothing to acquire; but from
            // this CAS on the word counts a reader, and a reader joining that
            // count through `try_lock_shared_recursive` (before we clear
            // `WRITER_BIT`) acquires from this CAS, so it must publish our
            // write section.
            match self.state.compare_exchange_weak(
                s,
                s.wrapping_add(READER_ONE),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return SharedGuardState { counter: FAST },
                Err(x) => s = x,
            }
        }
        let Some(set) = self.counter_set() else {
            unreachable!("the loop above leaves with counters bound")
        };
        let line = set.line(sync::current_node());
        // Relaxed: we hold the writer mutex, so no writer is draining and
        // none can set `WRITER_BIT` before we release it, which publishes both.
        self.state.fetch_or(NODE_READERS_BIT, Ordering::Relaxed);
        line.fetch_add(1, Ordering::Relaxed);
        SharedGuardState::for_line(line)
    }

    /// The write unlock: the writer mutex first, then `WRITER_BIT`, the
    /// releasing step that lets readers in, after which nothing of the lock
    /// is touched but the parked readers' admission (a reader that enters
    /// then may unlock, destroy and free the lock, as POSIX allows). The next
    /// writer, which may hold the mutex by then, waits for the bit to clear
    /// (`set_writer_bit`).
    #[inline]
    pub(super) fn unlock_exclusive_inner(&self, _g: ExclusiveGuardState, fair: bool) {
        self.unlock_writer_mutex(fair);
        // Nothing else set: no reader parked or inside.
        if self
            .state
            .compare_exchange(WRITER_BIT, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.clear_writer_bit();
        }
    }

    /// The writer's fast path once it holds the writer mutex: `WRITER_BIT`
    /// in one CAS from a word with no reader of any kind.
    #[inline]
    pub(super) fn try_writer_bit(&self) -> bool {
        // Acquire: pairs with the Release of the previous writer's or last
        // reader's release of the word.
        self.state
            .compare_exchange(0, WRITER_BIT, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[inline]
    pub(super) fn lock_exclusive_inner(
        &self,
        deadline: Option<Instant>,
    ) -> Option<ExclusiveGuardState> {
        if self.mutex.try_acquire() {
            if self.try_writer_bit() || self.become_writer(deadline) {
                return Some(ExclusiveGuardState::new());
            }
            self.unlock_writer_mutex(false);
            return None;
        }
        self.lock_exclusive_slow(deadline)
    }

    /// Slow exclusive acquisition: the writer mutex, then `WRITER_BIT` and
    /// the readers' drain.
    #[cold]
    pub(super) fn lock_exclusive_slow(
        &self,
        deadline: Option<Instant>,
    ) -> Option<ExclusiveGuardState> {
        if !self.lock_writer_mutex(deadline) {
            return None;
        }
        if self.become_writer(deadline) {
            return Some(ExclusiveGuardState::new());
        }
        self.unlock_writer_mutex(false);
        None
    }

    /// [`RawRwLock::become_writer`] without a deadline, out of line: the
    /// writer holds the mutex but readers are inside.
    #[cold]
    #[inline(never)]
    pub(super) fn become_writer_untimed(&self) {
        if !self.become_writer(None) {
            untimed_lock_failed();
        }
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
