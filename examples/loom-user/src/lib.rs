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
