//! [`Condvar`] and [`WaitTimeoutResult`], with parking_lot 0.12's API.

use std::fmt;
use std::ops::DerefMut;
use std::time::{Duration, Instant};

use crate::backend;
use crate::mutex::MutexGuard;

/// A type indicating whether a timed wait on a condition variable returned
/// due to a time out or not.
#[derive(Debug, PartialEq, Eq, Copy, Clone)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// Returns whether the wait was known to have timed out.
    #[inline]
    pub fn timed_out(self) -> bool {
        self.0
    }
}

/// A condition variable, used with [`Mutex`](crate::Mutex) (whichever backend
/// was selected).
///
/// As parking_lot's: waits never return spuriously, [`notify_one`](Self::notify_one)
/// returns whether it woke a thread and [`notify_all`](Self::notify_all) how
/// many, and a condvar may be used with several mutexes over time but only
/// one at a time.
///
/// # Differences from parking_lot
///
/// - `cst` backend: cst-mutex's condvar; `notify_all` wakes one waiter and
///   moves the others onto the mutex, as parking_lot does, and the mutex
///   serves them in its NUMA order. The count it returns includes the moved
///   waiters, as parking_lot's does.
/// - `cna` backend (a spinlock, which has no parked bit to requeue onto):
///   `notify_all` wakes every waiter and they compete for the mutex.
/// - 16 bytes (`cst`) or 8 bytes (`cna`) instead of 8.
///
/// # Panics
///
/// The wait functions panic if another thread is waiting on the condvar with
/// a different mutex at the same time (parking_lot's contract). The panic
/// happens before the mutex is released; the guard stays valid.
///
/// # Examples
///
/// ```
/// use parking_lot::{Condvar, Mutex};
/// use std::sync::Arc;
/// use std::thread;
///
/// let pair = Arc::new((Mutex::new(false), Condvar::new()));
/// let pair2 = Arc::clone(&pair);
/// thread::spawn(move || {
///     let (lock, cvar) = &*pair2;
///     *lock.lock() = true;
///     cvar.notify_one();
/// });
/// let (lock, cvar) = &*pair;
/// let mut started = lock.lock();
/// cvar.wait_while(&mut started, |started| !*started);
/// assert!(*started);
/// ```
pub struct Condvar {
    raw: backend::RawCondvar,
}

impl Condvar {
    /// Creates a new condition variable which is ready to be waited on and
    /// notified.
    #[inline]
    pub const fn new() -> Condvar {
        Condvar {
            raw: backend::RawCondvar::new(),
        }
    }

    /// Wakes up one blocked thread on this condvar. Returns whether a thread
    /// was woken up.
    #[inline]
    pub fn notify_one(&self) -> bool {
        self.raw.notify_one()
    }

    /// Wakes up all blocked threads on this condvar. Returns the number of
    /// threads woken up (or moved onto the mutex, to be woken by its unlocks).
    #[inline]
    pub fn notify_all(&self) -> usize {
        self.raw.notify_all()
    }

    /// Blocks the current thread until this condition variable receives a
    /// notification. The mutex is released while waiting and re-acquired
    /// before returning.
    ///
    /// # Panics
    ///
    /// If another thread is waiting on this condvar with a different mutex.
    #[inline]
    pub fn wait<T: ?Sized>(&self, mutex_guard: &mut MutexGuard<'_, T>) {
        self.wait_internal(mutex_guard, None);
    }

    /// Waits on this condition variable for a notification, timing out after
    /// the specified time instant.
    ///
    /// # Panics
    ///
    /// If another thread is waiting on this condvar with a different mutex.
    #[inline]
    pub fn wait_until<T: ?Sized>(
        &self,
        mutex_guard: &mut MutexGuard<'_, T>,
        timeout: Instant,
    ) -> WaitTimeoutResult {
        self.wait_internal(mutex_guard, Some(timeout))
    }

    /// Waits on this condition variable for a notification, timing out after
    /// the specified duration (a duration too long to represent waits forever).
    ///
    /// # Panics
    ///
    /// If another thread is waiting on this condvar with a different mutex.
    #[inline]
    pub fn wait_for<T: ?Sized>(
        &self,
        mutex_guard: &mut MutexGuard<'_, T>,
        timeout: Duration,
    ) -> WaitTimeoutResult {
        self.wait_internal(mutex_guard, Instant::now().checked_add(timeout))
    }

    /// Blocks the current thread while `condition` returns true (checked
    /// before the first wait and after each notification).
    ///
    /// # Panics
    ///
    /// If another thread is waiting on this condvar with a different mutex.
    #[inline]
    pub fn wait_while<T, F>(&self, mutex_guard: &mut MutexGuard<'_, T>, condition: F)
    where
        T: ?Sized,
        F: FnMut(&mut T) -> bool,
    {
        self.wait_while_internal(mutex_guard, condition, None);
    }

    /// [`wait_while`](Self::wait_while) with a deadline. Returns whether it
    /// timed out (the condition is then checked no more).
    ///
    /// # Panics
    ///
    /// If another thread is waiting on this condvar with a different mutex.
    #[inline]
    pub fn wait_while_until<T, F>(
        &self,
        mutex_guard: &mut MutexGuard<'_, T>,
        condition: F,
        timeout: Instant,
    ) -> WaitTimeoutResult
    where
        T: ?Sized,
        F: FnMut(&mut T) -> bool,
    {
        self.wait_while_internal(mutex_guard, condition, Some(timeout))
    }

    /// [`wait_while`](Self::wait_while) with a timeout.
    ///
    /// # Panics
    ///
    /// If another thread is waiting on this condvar with a different mutex.
    #[inline]
    pub fn wait_while_for<T, F>(
        &self,
        mutex_guard: &mut MutexGuard<'_, T>,
        condition: F,
        timeout: Duration,
    ) -> WaitTimeoutResult
    where
        T: ?Sized,
        F: FnMut(&mut T) -> bool,
    {
        self.wait_while_internal(mutex_guard, condition, Instant::now().checked_add(timeout))
    }

    fn wait_while_internal<T, F>(
        &self,
        mutex_guard: &mut MutexGuard<'_, T>,
        mut condition: F,
        timeout: Option<Instant>,
    ) -> WaitTimeoutResult
    where
        T: ?Sized,
        F: FnMut(&mut T) -> bool,
    {
        let mut result = WaitTimeoutResult(false);
        while !result.timed_out() && condition(mutex_guard.deref_mut()) {
            result = self.wait_internal(mutex_guard, timeout);
        }
        result
    }

    fn wait_internal<T: ?Sized>(
        &self,
        mutex_guard: &mut MutexGuard<'_, T>,
        timeout: Option<Instant>,
    ) -> WaitTimeoutResult {
        // SAFETY: the guard proves this thread holds the mutex; the raw mutex is
        // only unlocked and re-locked inside the wait, and the exclusive borrow
        // of the guard keeps the data untouched meanwhile.
        let timed_out = unsafe {
            let raw = lock_api04::MutexGuard::mutex(mutex_guard).raw();
            self.raw.wait(raw, timeout)
        };
        WaitTimeoutResult(timed_out)
    }
}

impl Default for Condvar {
    #[inline]
    fn default() -> Condvar {
        Condvar::new()
    }
}

impl fmt::Debug for Condvar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Condvar { .. }")
    }
}
