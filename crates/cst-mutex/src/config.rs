//! Process-wide tunables: the batch bound, the fairness timeout and the CPU
//! count the locks' path decisions assume.

use std::fmt;
use std::sync::atomic::{
    AtomicBool, AtomicU32 as StdAtomicU32, AtomicU64 as StdAtomicU64, AtomicUsize,
    Ordering as StdOrdering,
};
use std::time::Duration;

/// Default batch bound: how many consecutive times the lock may be passed to
/// a waiter of the unlocker's own node before it moves to the next node with
/// waiters. CST (Kashyap et al., USENIX ATC 2017, section 4) bounds the
/// intra-socket batch the same way; the HQ spinlock RFC uses 1000 handoffs.
/// 128 keeps the worst cross-node wait at 128 critical sections.
pub const DEFAULT_BATCH_BOUND: u32 = 128;

/// Default eventual-fairness timeout: 500 000 ns (0.5 ms), the `FairTimeout`
/// period of parking_lot up to 0.12 (parking_lot 0.13 removed eventual fairness,
/// `UnparkResult::be_fair`; this crate keeps its own). A parked waiter of a node is owed a direct handoff
/// once per this period.
pub const DEFAULT_FAIRNESS_TIMEOUT: Duration = Duration::from_micros(500);

static BATCH_BOUND: StdAtomicU32 = StdAtomicU32::new(DEFAULT_BATCH_BOUND);
static FAIRNESS_NS: StdAtomicU64 = StdAtomicU64::new(500_000);

/// A rejected tunable value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The batch bound must be at least 1 (0 would never serve the own node).
    ZeroBatchBound,
    /// The fairness timeout must be between 1 ns and `u64::MAX` ns (given: the value).
    FairnessTimeoutOutOfRange(Duration),
    /// The CPU count must be at least 1.
    ZeroCpus,
    /// `CST_MUTEX_CPUS` is set but is not a whole number of CPUs of at least
    /// 1 (given: the value).
    BadCpusEnv(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroBatchBound => write!(f, "batch bound must be at least 1, got 0"),
            ConfigError::FairnessTimeoutOutOfRange(d) => {
                write!(
                    f,
                    "fairness timeout must be 1 ns ..= u64::MAX ns, got {d:?}"
                )
            }
            ConfigError::ZeroCpus => write!(f, "CPU count must be at least 1, got 0"),
            ConfigError::BadCpusEnv(v) => write!(
                f,
                "CST_MUTEX_CPUS must be a whole number of CPUs of at least 1, got {v:?}; \
                 using the machine's count"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Sets the batch bound for every lock of this crate (see
/// [`DEFAULT_BATCH_BOUND`]).
///
/// # Errors
///
/// [`ConfigError::ZeroBatchBound`] if `bound` is 0.
pub fn set_batch_bound(bound: u32) -> Result<(), ConfigError> {
    if bound == 0 {
        return Err(ConfigError::ZeroBatchBound);
    }
    BATCH_BOUND.store(bound, StdOrdering::Relaxed);
    Ok(())
}

/// The current batch bound (handoffs within one node before moving on).
pub fn batch_bound() -> u32 {
    BATCH_BOUND.load(StdOrdering::Relaxed)
}

/// The batch bound an unlock applies: [`batch_bound`], or under loom the
/// bound the calling loom thread set with `loom_hooks::set_batch_bound` (the
/// process-wide value is a std static that models running in parallel in one
/// test process would share).
#[inline]
pub(crate) fn unlock_batch_bound() -> u32 {
    #[cfg(numa_loom)]
    {
        let b = crate::sync::loom_batch_bound();
        if b != 0 {
            return b;
        }
    }
    batch_bound()
}

/// Sets the eventual-fairness timeout for every lock of this crate (see
/// [`DEFAULT_FAIRNESS_TIMEOUT`]).
///
/// # Errors
///
/// [`ConfigError::FairnessTimeoutOutOfRange`] if `timeout` is zero or does not
/// fit in `u64` nanoseconds.
pub fn set_fairness_timeout(timeout: Duration) -> Result<(), ConfigError> {
    let ns = u64::try_from(timeout.as_nanos())
        .ok()
        .filter(|&n| n > 0)
        .ok_or(ConfigError::FairnessTimeoutOutOfRange(timeout))?;
    FAIRNESS_NS.store(ns, StdOrdering::Relaxed);
    Ok(())
}

/// The current eventual-fairness timeout.
pub fn fairness_timeout() -> Duration {
    Duration::from_nanos(FAIRNESS_NS.load(StdOrdering::Relaxed))
}

/// The current fairness period in ns (see [`fairness_timeout`]).
#[inline]
pub(crate) fn fairness_period_ns() -> u64 {
    FAIRNESS_NS.load(StdOrdering::Relaxed)
}

/// The fairness clock: monotonic ns (`numa_topology::monotonic_ns`), + 1 (0 means "no period
/// started"). Read by the unlocker *before* it takes a parking-lot queue lock,
/// so no clock read runs under a queue lock. Under loom: a per-thread logical
/// clock advancing 1 ms per read, so the models reach the fairness handoff.
pub(crate) fn fairness_now() -> u64 {
    #[cfg(numa_loom)]
    {
        crate::sync::logical_now_ns(1_000_000)
    }
    // Fork-safe: no epoch to initialize (see `numa_topology::monotonic_ns`).
    #[cfg(not(numa_loom))]
    {
        numa_topology::monotonic_ns().min(u64::MAX - 1) + 1
    }
}

/// The CPU count set by [`set_cpus`] (0: none set).
static CPUS_OVERRIDE: AtomicUsize = AtomicUsize::new(0);
/// The machine's count or `CST_MUTEX_CPUS`, read once (0: not read yet).
static CPUS_DEFAULT: AtomicUsize = AtomicUsize::new(0);
/// Whether `CST_MUTEX_CPUS` was set but malformed.
static CPUS_ENV_BAD: AtomicBool = AtomicBool::new(false);
/// Whether the count was forced ([`set_cpus`], or a valid `CST_MUTEX_CPUS`).
static CPUS_FORCED: AtomicBool = AtomicBool::new(false);

/// Makes every lock of this crate decide its paths as on a machine with
/// `n` CPUs, whatever this machine has.
///
/// The locks compare the waiters of a lock with the number of CPUs (are
/// there more threads waiting than can run at once?): a queue head then
/// spins for a count of yields rather than for a time (on a machine where
/// each waiter has its own CPU a yield returns at once), and an unlock
/// hands the lock to a queue head that has not run since it was woken.
/// Setting `n` to 16 on a 2-CPU machine makes the locks take the paths a
/// 16-core machine takes, so their counts ([`thread_counts`] with feature
/// `stats`) can be checked there; the threads only run slower. Also set by
/// the environment variable `CST_MUTEX_CPUS` (read once, at the first
/// decision, if this function was not called first).
///
/// # Errors
///
/// [`ConfigError::ZeroCpus`] if `n` is 0.
///
/// [`thread_counts`]: crate#cargo-features
pub fn set_cpus(n: usize) -> Result<(), ConfigError> {
    if n == 0 {
        return Err(ConfigError::ZeroCpus);
    }
    CPUS_OVERRIDE.store(n, StdOrdering::Relaxed);
    CPUS_FORCED.store(true, StdOrdering::Relaxed);
    Ok(())
}

/// Whether the CPU count was forced ([`set_cpus`] or `CST_MUTEX_CPUS`): the
/// locks then also ignore what they see of other threads taking their CPUs
/// (`spin::cpus_contended`), so their decisions are those of a machine
/// with that many CPUs to themselves.
#[inline]
#[cfg_attr(numa_loom, allow(dead_code))]
pub(crate) fn cpus_forced() -> bool {
    let _ = cpus();
    CPUS_FORCED.load(StdOrdering::Relaxed)
}

/// The CPU count the locks' path decisions assume: [`set_cpus`]'s value,
/// else `CST_MUTEX_CPUS`, else [`std::thread::available_parallelism`] (1 if
/// unknown). Read once and cached, except for [`set_cpus`].
#[inline]
pub fn cpus() -> usize {
    let o = CPUS_OVERRIDE.load(StdOrdering::Relaxed);
    if o != 0 {
        return o;
    }
    let n = CPUS_DEFAULT.load(StdOrdering::Relaxed);
    if n != 0 {
        return n;
    }
    let machine = || std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = match std::env::var_os("CST_MUTEX_CPUS") {
        None => machine(),
        Some(v) => match v.to_str().and_then(|v| v.trim().parse::<usize>().ok()) {
            Some(n) if n > 0 => {
                CPUS_FORCED.store(true, StdOrdering::Relaxed);
                n
            }
            _ => {
                CPUS_ENV_BAD.store(true, StdOrdering::Relaxed);
                machine()
            }
        },
    };
    CPUS_DEFAULT.store(n, StdOrdering::Relaxed);
    // Logged once, after the count is cached: a logger that takes one of
    // these locks finds `cpus` answered and does not come back here.
    if CPUS_ENV_BAD.load(StdOrdering::Relaxed)
        && !CPUS_ENV_LOGGED.swap(true, StdOrdering::Relaxed)
        && let Some(e) = cpus_env_error()
    {
        log::warn!(target: "cst_mutex", "ignoring {e} ({n})");
    }
    n
}

/// Whether the bad `CST_MUTEX_CPUS` was logged (once per process).
static CPUS_ENV_LOGGED: AtomicBool = AtomicBool::new(false);

/// Why `CST_MUTEX_CPUS` was ignored, if it was set but malformed (it is read
/// at the first path decision or the first [`cpus`] call; `None` before that).
pub fn cpus_env_error() -> Option<ConfigError> {
    if !CPUS_ENV_BAD.load(StdOrdering::Relaxed) {
        return None;
    }
    let v = std::env::var_os("CST_MUTEX_CPUS")
        .map(|v| v.to_string_lossy().into_owned())
        .unwrap_or_default();
    Some(ConfigError::BadCpusEnv(v))
}
