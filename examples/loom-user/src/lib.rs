//! A user's code over numa-spin's locks, which `tests/models.rs` model-checks
//! with loom: the locks switch to loom through numa-spin's `loom` feature under
//! `--cfg loom`, with the same types and constructors.

use numa_spin::lock_api::{Mutex, RawMutex};

/// Adds one under one guard (correct).
pub fn increment<R: RawMutex>(m: &Mutex<R, u64>) {
    *m.lock() += 1;
}

/// Adds one by reading under one guard and writing under another: the
/// check-then-act bug a model must find (two callers can both read 0).
pub fn increment_racy<R: RawMutex>(m: &Mutex<R, u64>) {
    let seen = *m.lock();
    *m.lock() = seen + 1;
}

/// A one-slot mailbox over cst-mutex's `Mutex` and `Condvar`: `put` fills
/// the slot and notifies, `take` waits until it is full.
#[derive(Default)]
pub struct Mailbox {
    slot: cst_mutex::Mutex<Option<u64>>,
    full: cst_mutex::Condvar,
}

impl Mailbox {
    /// Puts `v` into the slot and wakes a taker.
    pub fn put(&self, v: u64) {
        *self.slot.lock() = Some(v);
        self.full.notify_one();
    }

    /// Waits until the slot is full and empties it (correct: the condition
    /// is checked under the mutex, in a loop).
    pub fn take(&self) -> u64 {
        let mut g = self.slot.lock();
        loop {
            if let Some(v) = g.take() {
                return v;
            }
            self.full.wait(&mut g);
        }
    }

    /// As `take`, but checks the slot once before waiting, without a loop,
    /// and waits without the mutex's guard held across the check: a `put`
    /// between the check and the wait is a lost wake-up, which a model finds
    /// as a deadlock.
    pub fn take_racy(&self) -> u64 {
        let empty = self.slot.lock().is_none();
        let mut g = self.slot.lock();
        if empty {
            self.full.wait(&mut g);
        }
        g.take().unwrap_or(0)
    }
}
