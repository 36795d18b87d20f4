//! What a blocking lock built on [`RawLock`] needs from the queue lock: a
//! mark on the lock word for threads asleep outside the queue, and the
//! release that reads it.
//!
//! # Sleepers outside the queue
//!
//! A blocking mutex in the manner of ShflLock (Kashyap et al., SOSP 2019,
//! section 4.2: its blocking lock is its spinlock's queue with waiters that
//! park) has waiters the queue cannot hold: timed waiters, which must be able
//! to leave (see [`crate::timed`]: a queued waiter cannot), and condition
//! variable waiters requeued onto the mutex by `notify_all`, which sleep on
//! the lock's address in a parking lot (`parking_lot_core`). Their lock
//! marks itself `SLEEPERS` (a bit of the lock word) so that the one release that matters, the one
//! after which nobody would otherwise wake them, wakes one; every other
//! release stays one atomic instruction (a swap instead of numa-spin's store:
//! the store cannot tell what it overwrote).
//!
//! The protocol, on the `locked` word only:
//!
//! - A sleeper marks the word before it parks ([`RawLock::mark_sleepers`]):
//!   a compare-and-swap from `LOCKED` to `LOCKED | SLEEPERS`, so the mark
//!   exists only on a held word and no acquisition (each compares the word
//!   with `UNLOCKED` or `HANDED`) ever sees it. A free or `HANDED` word is
//!   not marked: the sleeper tries to acquire instead.
//! - It parks only if the mark is still there when the parking lot checks,
//!   under its bucket lock ([`RawLock::sleepers_marked`]).
//! - The release swaps the word to `UNLOCKED` (or `HANDED`) and reports
//!   whether the mark was set ([`RawLock::release_sleepers`]); if so the
//!   releaser wakes one sleeper.
//! - The mark is gone after that release, while others may still sleep. The
//!   waker learns from the parking lot whether any are left and tells the
//!   thread it wakes; that thread marks the word again once it holds the lock
//!   or before it parks again, and before it gives up a timed wait. So
//!   whenever a thread sleeps on the lock, the word is marked or a running
//!   thread will mark it.
//!
//! No wake-up is lost: the mark and the release are read-modify-writes of one
//! word, so one comes first in its modification order. A mark before the
//! swap is seen by it; a mark after it fails on `UNLOCKED`, or lands on the
//! next holder's `LOCKED`, whose own release sees it. A sleeper parks only
//! if it reads the mark under the bucket lock, and the releaser wakes under
//! that lock after its swap: a check after the wake-up reads the swapped
//! word (the bucket lock orders them) and does not park; a check before it
//! has queued the sleeper, which the wake-up finds. Every access can be
//! `Relaxed` for that argument (it uses only the order of the word's own
//! modifications and the bucket lock); the release's swap is `Release` for
//! the critical section, as numa-spin's release store is.
//!
//! # Woken sleepers get a CPU
//!
//! A sleeper woken by a release (or a condition variable's waiter woken by a
//! notify) must be scheduled before it can take the lock. On a machine with
//! more runnable threads than CPUs it often lands on the run queue of a CPU
//! whose thread keeps taking and releasing the lock ahead of the queue; that
//! thread makes no system call, so the kernel switches only when its time
//! slice ends at a scheduler tick (4 ms at `HZ=250`), often inside its
//! critical section. So the waker marks the lock *woken*
//! ([`RawLock::note_woken`]) until the woken thread runs and lifts the mark
//! ([`RawLock::woken_ran`]), and while it is set every attempt to take the
//! lock ahead of a non-empty queue first yields the CPU (`sched_yield`,
//! outside any critical section), which lets the woken thread run once the
//! scheduler finds it eligible. The mark is a hint: a table of
//! 64 time stamps indexed by a hash of the lock's address (a
//! lock that shares a slot may yield needlessly), each lifted by the woken
//! thread, by a later wake-up's overwrite, or after 10 ms
//! (a woken thread that never runs, the parent's mark in a fork's child).
//! All accesses are Relaxed: the mark orders nothing, and none of the
//! protocol above depends on it. Not under the crate's loom models (no
//! memory effect, and loom has no scheduler to yield to).
//!
//! Measured on the 2-CPU development guest, 2 virtual nodes, `numa-bench
//! requeue` (16 threads take cst-mutex's mutex in a loop with 200 ns
//! critical sections, 4 condition-variable waiters requeued onto it by
//! `notify_all`; p99 of their re-acquisition): 3.4-5.7 ms without the mark
//! (scheduler traces: the woken waiters' wake-up-to-run delay was 3.7-3.9
//! ms, behind a thread that ran 3.8 ms without a system call), 91-123 us
//! with it, the hammering threads' throughput unchanged (3.5-3.6 ops/us);
//! parking_lot 1.6-2.0 ms in the same runs. Yielding on every such attempt
//! for a fixed 300 us slice instead, whoever was woken, did as well on the
//! p99 (1.2-1.3 ms) but cost 13-17% of the throughput of 32 threads on 2
//! CPUs, where one thread's long run keeps the lock's lines in one cache.

/// How many woken marks ([`RawLock::note_woken`]) this process has made, and
/// how many of them the woken threads lifted ([`RawLock::woken_ran`]; a mark
/// overwritten before its thread ran, or lifted as stale, is not counted
/// there). A diagnostic for tests; every lock of the process counts here.
#[doc(hidden)]
pub fn woken_counts() -> (u64, u64) {
    crate::node::woken::counts()
}

use crate::config::Tunables;
use crate::raw_lock::RawLock;
use crate::sync::Ordering;
use crate::word::{HANDED, LOCKED, SLEEPERS, TAIL_SHIFT, UNLOCKED};

impl<const NUMA: bool, T: Tunables> RawLock<NUMA, T> {
    /// Releases the lock as [`release`](RawLock::release) does, and returns
    /// whether a sleeper had marked it ([`mark_sleepers`](RawLock::mark_sleepers)):
    /// the caller must then wake one. One swap.
    ///
    /// # Safety
    ///
    /// As for [`release`](RawLock::release).
    #[inline]
    pub unsafe fn release_sleepers(&self) -> bool {
        crate::glue::model_route!({
            crate::model::release(&self.tail);
            false
        });
        // Release: as `release`'s store (our critical section happens-before
        // the next acquisition). The swap reads the latest value of the word,
        // so a sleeper's mark is either seen here or made after the lock was
        // released (see the module docs).
        self.locked.swap(UNLOCKED, Ordering::Release) & SLEEPERS != 0
    }

    /// Releases the lock as [`release_fair`](RawLock::release_fair) does, and
    /// returns whether a sleeper had marked it: the caller must then wake one.
    ///
    /// # Safety
    ///
    /// As for [`release`](RawLock::release).
    pub unsafe fn release_fair_sleepers(&self) -> bool {
        crate::glue::model_route!({
            crate::model::release(&self.tail);
            false
        });
        // Relaxed: see `release_fair`.
        let queued = self.tail.load(Ordering::Relaxed) >> TAIL_SHIFT != 0;
        // Release: as in `release_sleepers`.
        self.locked
            .swap(if queued { HANDED } else { UNLOCKED }, Ordering::Release)
            & SLEEPERS
            != 0
    }

    /// Marks the held lock: a thread is about to sleep outside the queue, so
    /// its next release must report it. Returns whether the word is held and
    /// marked now; `false` when the lock is free (or `HANDED`, being taken by
    /// the queue head): the caller tries to acquire instead of sleeping.
    pub fn mark_sleepers(&self) -> bool {
        crate::glue::model_route!(false);
        // Relaxed throughout: the mark publishes nothing; that no wake-up is
        // lost follows from the word's modification order alone (module docs).
        let mut cur = self.locked.load(Ordering::Relaxed);
        loop {
            if cur == LOCKED | SLEEPERS {
                return true;
            }
            if cur != LOCKED {
                return false;
            }
            match self.locked.compare_exchange_weak(
                LOCKED,
                LOCKED | SLEEPERS,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => cur = seen,
            }
        }
    }

    /// Acquires the lock, waiting at most until `deadline`, for a thread that
    /// slept outside the queue and was woken by a release: it polls as a
    /// timed waiter does ([`crate::timed`]), and past the steal bound it
    /// takes the freed word even before a queue head that claimed it. So a
    /// sleeper, once woken, is not left to lose every release to the queue;
    /// each queue head's wait grows by at most one critical section per such
    /// sleeper, which takes the lock once and leaves.
    #[cfg(not(numa_loom))]
    pub fn try_acquire_woken_until(&self, deadline: std::time::Instant) -> bool {
        crate::glue::model_route!(crate::model::try_acquire_timed(&self.tail));
        self.try_acquire()
            || crate::timed::poll_until(self, || std::time::Instant::now() >= deadline, true)
    }

    /// Marks the lock *woken*: the caller has just woken a thread that will
    /// take it (a sleeper outside the queue, a condition variable's waiter),
    /// and attempts ahead of the queue yield the CPU until that thread runs
    /// ([`woken_ran`](RawLock::woken_ran)) or 10 ms pass
    /// (see the module docs). Allowed under a parking lot's bucket lock and
    /// in a signal handler (a clock read and one store).
    pub fn note_woken(&self) {
        #[cfg(not(numa_loom))]
        crate::node::woken::mark(&self.locked);
    }

    /// Lifts the lock's *woken* mark: the calling thread, woken for the lock,
    /// runs now ([`note_woken`](RawLock::note_woken)). A thread of another
    /// lock that shares the mark's slot may lift it early: the mark is a hint.
    pub fn woken_ran(&self) {
        #[cfg(not(numa_loom))]
        crate::node::woken::lift(&self.locked);
    }

    /// Whether the lock is marked woken ([`note_woken`](RawLock::note_woken);
    /// a mark older than 10 ms is lifted and reads false). A diagnostic for
    /// tests: another lock that shares the mark's slot reads the same.
    #[doc(hidden)]
    pub fn woken_marked(&self) -> bool {
        #[cfg(not(numa_loom))]
        return crate::node::woken::pending(&self.locked);
        #[cfg(numa_loom)]
        false
    }

    /// Whether the lock is held and marked: a sleeper's check, under its
    /// parking lot's bucket lock, that it may sleep (the release that will
    /// wake it has not come yet).
    #[inline]
    pub fn sleepers_marked(&self) -> bool {
        crate::glue::model_route!(false);
        // Relaxed: ordered after a releaser's swap by the bucket lock both
        // hold (module docs).
        self.locked.load(Ordering::Relaxed) == LOCKED | SLEEPERS
    }
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use crate::RawMutex;

    /// The mark exists only on a held word, a release reports it once, and
    /// acquisitions are not disturbed by it.
    #[test]
    fn the_mark_lives_on_a_held_word_and_the_release_reports_it_once() {
        let lock = RawMutex::new();
        assert!(!lock.mark_sleepers(), "a free word cannot be marked");
        assert!(!lock.sleepers_marked());
        lock.acquire();
        assert!(!lock.sleepers_marked());
        assert!(lock.mark_sleepers());
        assert!(lock.mark_sleepers(), "marking twice keeps the mark");
        assert!(lock.sleepers_marked());
        assert!(lock.is_held());
        assert!(!lock.try_acquire(), "a marked word is held");
        // SAFETY: acquired above.
        assert!(unsafe { lock.release_sleepers() });
        assert!(!lock.is_held());
        assert!(!lock.sleepers_marked());
        assert!(lock.try_acquire(), "the release freed the word");
        // SAFETY: acquired just above.
        assert!(!unsafe { lock.release_sleepers() }, "reported once");
        lock.acquire();
        assert!(lock.mark_sleepers());
        // SAFETY: acquired above.
        assert!(unsafe { lock.release_fair_sleepers() });
        assert!(lock.try_acquire());
        // SAFETY: acquired just above.
        unsafe { lock.release() };
    }
}
