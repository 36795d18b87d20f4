//! The public lock types: raw locks for `lock_api` and the `Mutex` aliases.

use crate::config::{Config, Global};
use crate::raw_lock::RawLock;

/// The CNA lock: a compact NUMA-aware queue spinlock, `lock_api::RawMutex` +
/// `RawMutexFair`. 8 bytes (without feature `stats`), tunables from
/// [`Config::global`].
///
/// # Examples
///
/// ```
/// use numa_spin::lock_api::RawMutex as _;
///
/// let raw = numa_spin::RawMutex::INIT;
/// let guard = raw.lock();
/// assert!(raw.is_locked());
/// // SAFETY: `guard` is the state of the acquisition above.
/// unsafe { raw.unlock(guard) };
/// ```
pub type RawMutex = RawLock<true, Global>;

/// The same queue spinlock with NUMA reordering off (no secondary queue), the
/// node-oblivious baseline (like stock qspinlock against CNA): same queue, same
/// stealing policy, same tunables, so comparisons isolate what the reordering buys.
///
/// # Examples
///
/// ```
/// use numa_spin::lock_api::RawMutex as _;
///
/// let raw = numa_spin::RawQueuedMutex::INIT;
/// let guard = raw.lock();
/// assert!(raw.is_locked());
/// // SAFETY: `guard` is the state of the acquisition above.
/// unsafe { raw.unlock(guard) };
/// assert!(!raw.is_locked());
/// ```
pub type RawQueuedMutex = RawLock<false, Global>;

/// [`RawMutex`] with per-lock tunables (`RawTunedMutex::with_config(&CONFIG)`,
/// `const`); 16 bytes.
///
/// # Examples
///
/// ```
/// use numa_spin::lock_api::RawMutex as _;
///
/// // Per-lock tunables: this lock's secondary queue is flushed after 0.5 ms.
/// static CONFIG: numa_spin::Config = numa_spin::Config::DEFAULT.flush_threshold_ns(500_000);
/// let raw = numa_spin::RawTunedMutex::with_config(&CONFIG);
/// let guard = raw.lock();
/// assert!(raw.is_locked());
/// // SAFETY: `guard` is the state of the acquisition above.
/// unsafe { raw.unlock(guard) };
/// assert!(!raw.is_locked());
/// ```
pub type RawTunedMutex = RawLock<true, &'static Config>;

/// [`RawQueuedMutex`] with per-lock tunables; 16 bytes.
///
/// # Examples
///
/// ```
/// use numa_spin::lock_api::RawMutex as _;
///
/// static CONFIG: numa_spin::Config = numa_spin::Config::DEFAULT;
/// let raw = numa_spin::RawTunedQueuedMutex::with_config(&CONFIG);
/// let guard = raw.lock();
/// assert!(raw.is_locked());
/// // SAFETY: `guard` is the state of the acquisition above.
/// unsafe { raw.unlock(guard) };
/// assert!(!raw.is_locked());
/// ```
pub type RawTunedQueuedMutex = RawLock<false, &'static Config>;

/// A mutual-exclusion lock protecting a `T`, backed by the CNA spinlock.
///
/// `Mutex::new` is `const`, so it can be a `static`:
///
/// ```
/// static COUNTER: numa_spin::Mutex<u64> = numa_spin::Mutex::new(0);
/// *COUNTER.lock() += 1;
/// assert_eq!(*COUNTER.lock(), 1);
/// ```
///
/// # Fairness
///
/// See [`RawLock`]: bounded stealing, NUMA-local hand-offs bounded by the flush
/// threshold, and `MutexGuard::unlock_fair` to hand the lock to the longest waiter.
pub type Mutex<T> = lock_api::Mutex<RawMutex, T>;

/// The guard of a [`Mutex`]; `Send` (the lock is not tied to a thread).
pub type MutexGuard<'a, T> = lock_api::MutexGuard<'a, RawMutex, T>;

/// A [`MutexGuard`] narrowed to a part of the data (`MutexGuard::map`).
pub type MappedMutexGuard<'a, T> = lock_api::MappedMutexGuard<'a, RawMutex, T>;

/// An owned guard of an `Arc<Mutex<T>>` (`Mutex::lock_arc`; feature `arc_lock`).
#[cfg(feature = "arc_lock")]
#[cfg_attr(docsrs, doc(cfg(feature = "arc_lock")))]
pub type ArcMutexGuard<T> = lock_api::ArcMutexGuard<RawMutex, T>;

/// A mutex backed by [`RawQueuedMutex`] (no NUMA reordering).
///
/// # Examples
///
/// ```
/// let m = numa_spin::QueuedMutex::new(Vec::new());
/// m.lock().push(1u32);
/// assert_eq!(*m.lock(), [1]);
/// ```
pub type QueuedMutex<T> = lock_api::Mutex<RawQueuedMutex, T>;

/// The guard of a [`QueuedMutex`].
pub type QueuedMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawQueuedMutex, T>;

/// A mutex backed by [`RawTunedMutex`]: build it with
/// `TunedMutex::from_raw(RawTunedMutex::with_config(&CONFIG), value)` (`const`).
///
/// # Examples
///
/// ```
/// use numa_spin::{Config, RawTunedMutex, TunedMutex};
///
/// // Strict FIFO for this lock only: nobody steals it past a queued waiter.
/// static STRICT: Config = Config::DEFAULT.steal_bound_ns(0);
/// static COUNTER: TunedMutex<u64> = TunedMutex::from_raw(RawTunedMutex::with_config(&STRICT), 0);
/// *COUNTER.lock() += 1;
/// assert_eq!(*COUNTER.lock(), 1);
/// ```
pub type TunedMutex<T> = lock_api::Mutex<RawTunedMutex, T>;

/// The guard of a [`TunedMutex`].
pub type TunedMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawTunedMutex, T>;

/// The counters of `mutex`'s lock (feature `stats`).
///
/// ```
/// # #[cfg(feature = "stats")] {
/// let m = numa_spin::Mutex::new(0);
/// *m.lock() += 1;
/// assert_eq!(numa_spin::stats_of(&m).acquisitions, 1);
/// # }
/// ```
#[cfg(feature = "stats")]
#[cfg_attr(docsrs, doc(cfg(feature = "stats")))]
pub fn stats_of<const NUMA: bool, C: crate::Tunables, T: ?Sized>(
    mutex: &lock_api::Mutex<RawLock<NUMA, C>, T>,
) -> crate::Stats {
    // SAFETY: we only read the lock's counters through the reference; we neither
    // lock nor unlock it, so no guard is invalidated.
    unsafe { mutex.raw() }.stats()
}
