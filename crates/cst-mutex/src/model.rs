//! The rwlock and condition variable inside a user's loom model:
//! `RUSTFLAGS="--cfg loom"` with this crate's `loom` feature (and not the
//! crate's own `--cfg numa_loom` models).
//!
//! The mutex needs nothing here: `RawMutex`'s core is numa-spin's CNA lock,
//! which runs on one `loom::sync::Mutex` per lock under such a model
//! (`numa_spin::model`), and its timed waits are numa-spin's. `RawRwLock`
//! and `RawCondvar` keep their API, and every operation runs on the model
//! state below, made on the object's first use in each execution (through
//! numa-spin's registry, which also refuses an object kept from an earlier
//! execution): a `loom::sync::Mutex` over the rwlock's counts or the
//! condvar's waiters, and a `loom::sync::Condvar` that blocked threads wait
//! on. So loom explores the user's code around the lock's semantics:
//!
//! - rwlock: any number of readers, or one writer; one upgradable reader at a
//!   time beside readers; a writer (or an upgrading reader) waiting for
//!   readers to leave blocks new readers, as the real lock's writer bit does,
//!   so a recursive read across a waiting writer deadlocks in the model too;
//! - condvar: `notify_one` wakes the longest-waiting waiter, `notify_all`
//!   every waiter; a waiter re-locks the mutex before it returns; no spurious
//!   wake-ups;
//! - timed operations (`try_lock_*_for`, `try_upgrade_for`, `wait_for`) follow
//!   numa-spin's timed lock: one try (a timed wait: a yield to the other loom
//!   threads while waiting), then the timeout; the model explores both
//!   outcomes whatever the duration (loom has no clock).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicUsize};
use std::sync::{Arc, PoisonError};

/// The crate named in numa-spin's registry messages.
const OWNER: &str = "cst_mutex";

/// One rwlock's state in the current execution.
pub(crate) struct ModelRwLock {
    state: loom::sync::Mutex<RwState>,
    changed: loom::sync::Condvar,
}

/// Who holds a [`ModelRwLock`].
#[derive(Default)]
struct RwState {
    /// Read acquisitions.
    readers: usize,
    /// A writer or an upgradable reader holds the writer side (the real
    /// lock's writer mutex).
    writer_side: bool,
    /// The writer bit: set by a writer (or an upgrading reader) from the
    /// moment it waits for readers to leave; new readers wait while it is set.
    writer_bit: bool,
    /// Threads blocked on `changed` (a release notifies only when some are).
    blocked: usize,
}

/// The model state of the rwlock whose tag (its state word, unused by the
/// real algorithm under a model) is `tag`.
pub(crate) fn rwlock(tag: &AtomicU32) -> Arc<ModelRwLock> {
    numa_spin::model::state(tag, OWNER, || ModelRwLock {
        state: loom::sync::Mutex::new(RwState::default()),
        changed: loom::sync::Condvar::new(),
    })
}

/// An unlock (`how`) of the rwlock tagged `tag`, skipped while the thread
/// unwinds: a guard dropped by a panic (loom's deadlock report, a failed
/// assertion) would touch an execution that is being torn down, and panic
/// again.
pub(crate) fn unlock(tag: &AtomicU32, how: fn(&ModelRwLock)) {
    if !std::thread::panicking() {
        how(&rwlock(tag));
    }
}

impl ModelRwLock {
    fn lock(&self) -> loom::sync::MutexGuard<'_, RwState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits on the condvar until `ready` holds, then applies `take`.
    fn wait_then(&self, ready: impl Fn(&RwState) -> bool, take: impl FnOnce(&mut RwState)) {
        let mut s = self.lock();
        while !ready(&s) {
            s.blocked += 1;
            s = self.changed.wait(s).unwrap_or_else(PoisonError::into_inner);
            s.blocked -= 1;
        }
        take(&mut s);
    }

    /// Applies `take` if `ready` holds now; returns whether it did.
    fn try_then(&self, ready: impl Fn(&RwState) -> bool, take: impl FnOnce(&mut RwState)) -> bool {
        let mut s = self.lock();
        let ok = ready(&s);
        if ok {
            take(&mut s);
        }
        ok
    }

    /// Applies `release` and wakes the blocked threads, which look again.
    fn release(&self, release: impl FnOnce(&mut RwState)) {
        let mut s = self.lock();
        release(&mut s);
        let blocked = s.blocked != 0;
        drop(s);
        if blocked {
            self.changed.notify_all();
        }
    }

    /// A timed try: one try, else a yield to the other loom threads and the
    /// timeout.
    fn timed(ok: bool) -> bool {
        if !ok {
            loom::thread::yield_now();
        }
        ok
    }

    pub(crate) fn lock_shared(&self) {
        self.wait_then(|s| !s.writer_bit, |s| s.readers += 1);
    }

    pub(crate) fn try_lock_shared(&self) -> bool {
        self.try_then(|s| !s.writer_bit, |s| s.readers += 1)
    }

    pub(crate) fn try_lock_shared_timed(&self) -> bool {
        Self::timed(self.try_lock_shared())
    }

    pub(crate) fn unlock_shared(&self) {
        self.release(|s| {
            assert!(
                s.readers > 0,
                "cst_mutex: unlock_shared of an RwLock not read-locked"
            );
            s.readers -= 1;
        });
    }

    pub(crate) fn lock_exclusive(&self) {
        if !self.try_lock_exclusive() {
            self.lock_upgradable();
            self.upgrade();
        }
    }

    pub(crate) fn try_lock_exclusive(&self) -> bool {
        self.try_then(
            |s| !s.writer_side && s.readers == 0,
            |s| {
                s.writer_side = true;
                s.writer_bit = true;
            },
        )
    }

    pub(crate) fn try_lock_exclusive_timed(&self) -> bool {
        Self::timed(self.try_lock_exclusive())
    }

    pub(crate) fn unlock_exclusive(&self) {
        self.release(|s| {
            s.writer_bit = false;
            s.writer_side = false;
        });
    }

    pub(crate) fn lock_upgradable(&self) {
        self.wait_then(|s| !s.writer_side, |s| s.writer_side = true);
    }

    pub(crate) fn try_lock_upgradable(&self) -> bool {
        self.try_then(|s| !s.writer_side, |s| s.writer_side = true)
    }

    pub(crate) fn try_lock_upgradable_timed(&self) -> bool {
        Self::timed(self.try_lock_upgradable())
    }

    pub(crate) fn unlock_upgradable(&self) {
        self.release(|s| s.writer_side = false);
    }

    /// The upgradable holder sets the writer bit (new readers wait) and
    /// waits for the readers to leave.
    pub(crate) fn upgrade(&self) {
        self.lock().writer_bit = true;
        self.wait_then(|s| s.readers == 0, |_| {});
    }

    pub(crate) fn try_upgrade(&self) -> bool {
        self.try_then(|s| s.readers == 0, |s| s.writer_bit = true)
    }

    pub(crate) fn try_upgrade_timed(&self) -> bool {
        Self::timed(self.try_upgrade())
    }

    pub(crate) fn downgrade(&self) {
        self.release(|s| {
            s.readers += 1;
            s.writer_bit = false;
            s.writer_side = false;
        });
    }

    pub(crate) fn downgrade_upgradable(&self) {
        self.release(|s| {
            s.readers += 1;
            s.writer_side = false;
        });
    }

    pub(crate) fn downgrade_to_upgradable(&self) {
        self.release(|s| s.writer_bit = false);
    }

    pub(crate) fn is_locked(&self) -> bool {
        let s = self.lock();
        s.readers != 0 || s.writer_side || s.writer_bit
    }

    pub(crate) fn is_locked_exclusive(&self) -> bool {
        self.lock().writer_bit
    }
}

/// One condition variable's state in the current execution.
pub(crate) struct ModelCondvar {
    waiters: loom::sync::Mutex<Waiters>,
    notified: loom::sync::Condvar,
}

/// The waiters of a [`ModelCondvar`], by ticket.
#[derive(Default)]
struct Waiters {
    next: u64,
    /// In arrival order.
    waiting: VecDeque<u64>,
    /// Notified, not yet returned.
    woken: Vec<u64>,
}

impl Waiters {
    /// Whether `me` was notified (forgetting the notification).
    fn take(&mut self, me: u64) -> bool {
        match self.woken.iter().position(|&t| t == me) {
            Some(i) => {
                self.woken.swap_remove(i);
                true
            }
            None => false,
        }
    }
}

/// The model state of the condvar whose tag (its waiter count, unused by
/// the real algorithm under a model) is `tag`.
pub(crate) fn condvar(tag: &AtomicUsize) -> Arc<ModelCondvar> {
    numa_spin::model::state(tag, OWNER, || ModelCondvar {
        waiters: loom::sync::Mutex::new(Waiters::default()),
        notified: loom::sync::Condvar::new(),
    })
}

impl ModelCondvar {
    fn lock(&self) -> loom::sync::MutexGuard<'_, Waiters> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Unlocks the mutex (`unlock`), waits for a notification (`timed`: or
    /// a timeout), re-locks it (`relock`). Returns true on a timeout.
    pub(crate) fn wait(&self, unlock: impl FnOnce(), relock: impl FnOnce(), timed: bool) -> bool {
        let mut w = self.lock();
        let me = w.next;
        w.next += 1;
        w.waiting.push_back(me);
        // A notifier needs `waiters`, which we hold, so none is lost between
        // the unlock and the wait.
        unlock();
        let timed_out = if timed {
            drop(w);
            loom::thread::yield_now();
            let mut w = self.lock();
            let notified = w.take(me);
            if !notified {
                w.waiting.retain(|&t| t != me);
            }
            !notified
        } else {
            while !w.take(me) {
                w = self
                    .notified
                    .wait(w)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            drop(w);
            false
        };
        // Without `waiters` held: a notifier may hold the mutex.
        relock();
        timed_out
    }

    /// Notifies up to `n` waiters, longest-waiting first; returns how many.
    pub(crate) fn notify(&self, n: usize) -> usize {
        let mut w = self.lock();
        let k = n.min(w.waiting.len());
        for _ in 0..k {
            if let Some(t) = w.waiting.pop_front() {
                w.woken.push(t);
            }
        }
        drop(w);
        if k != 0 {
            self.notified.notify_all();
        }
        k
    }
}
