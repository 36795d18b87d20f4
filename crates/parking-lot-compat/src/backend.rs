//! The raw locks behind the public aliases, chosen at build time (`build.rs`
//! emits `cfg(plc_backend = ...)`): plain re-exports, so the choice costs
//! nothing on the lock path.

#[cfg(not(any(plc_backend = "cst", plc_backend = "cna", plc_backend = "hq")))]
compile_error!("parking_lot (NUMA drop-in): build.rs selected no backend");

/// `cst`: cst-mutex's blocking mutex on numa-spin's CNA queue (parked
/// waiters woken ahead of their turn; timed waiters asleep outside the queue).
#[cfg(plc_backend = "cst")]
pub use cst_mutex::{RawFairMutex, RawMutex, RawThreadId};

#[cfg(plc_backend = "cna")]
pub use numa_spin::{RawFairMutex, RawMutex, RawThreadId};

/// `hq`: `Mutex` is numa-spin's HQ lock; `FairMutex` is numa-spin's fair CNA
/// lock (HQ has no always-fair variant: its `unlock_fair` hands to the next
/// waiter of the current node queue).
#[cfg(plc_backend = "hq")]
pub use numa_spin::{RawFairMutex, RawHqMutex as RawMutex, RawThreadId};

pub use cst_mutex::RawRwLock;

/// The backend's name, as selected (`"cst"` or `"cna"`).
#[cfg(plc_backend = "cst")]
pub const NAME: &str = "cst";
/// The backend's name, as selected (`"cst"` or `"cna"`).
#[cfg(plc_backend = "cna")]
pub const NAME: &str = "cna";
/// The backend's name, as selected (`"hq"`).
#[cfg(plc_backend = "hq")]
pub const NAME: &str = "hq";

/// The condition variable of the `cst` backend: cst-mutex's own, which moves
/// the waiters of a `notify_all` onto the mutex instead of waking them all.
#[cfg(plc_backend = "cst")]
pub(crate) struct RawCondvar(cst_mutex::RawCondvar);

#[cfg(plc_backend = "cst")]
impl RawCondvar {
    pub(crate) const fn new() -> Self {
        RawCondvar(cst_mutex::RawCondvar::new())
    }

    #[inline]
    pub(crate) fn notify_one(&self) -> bool {
        cst_mutex::lock_api::RawCondvar::notify_one(&self.0)
    }

    #[inline]
    pub(crate) fn notify_all(&self) -> usize {
        cst_mutex::lock_api::RawCondvar::notify_all(&self.0)
    }

    /// Unlocks `mutex`, waits for a notification or `deadline`, re-locks.
    /// Returns true on timeout.
    ///
    /// # Safety
    ///
    /// The caller holds `mutex` (through a lock_api 0.4 guard).
    ///
    /// # Panics
    ///
    /// If other threads wait on this condvar with a different mutex (before
    /// `mutex` is released).
    #[inline]
    pub(crate) unsafe fn wait(
        &self,
        mutex: &RawMutex,
        deadline: Option<std::time::Instant>,
    ) -> bool {
        use cst_mutex::lock_api::{RawCondvar as _, RawCondvarTimed as _};
        // The mutex's guard is a zero-sized marker: a new one stands for the
        // caller's acquisition.
        let mut state = cst_mutex::lock_api::GuardSend::new();
        match deadline {
            // SAFETY: the caller holds `mutex`; `state` stands for its acquisition.
            None => unsafe {
                self.0.wait(mutex, &mut state);
                false
            },
            // SAFETY: as above.
            Some(d) => unsafe { self.0.wait_until(mutex, &mut state, &d) },
        }
    }
}

/// The condition variable of the spinlock backends.
#[cfg(any(plc_backend = "cna", plc_backend = "hq"))]
pub(crate) type RawCondvar = crate::park_condvar::ParkCondvar;
