//! Tunables: the secondary-queue flush threshold, the shuffle-reduction
//! probability, the spin budget and the lock-stealing bound.
//!
//! Every lock reads its tunables through a [`Tunables`] source:
//! - [`Global`] (zero-sized, used by [`RawMutex`](crate::RawMutex) and
//!   [`RawQueuedMutex`](crate::RawQueuedMutex)): [`Config::global`], read once per
//!   process from the environment variables below, falling back to
//!   [`Config::DEFAULT`] for a variable that is unset or bad (a bad value is
//!   logged once through the `log` facade, never a panic);
//! - `&'static Config` (used by [`RawTunedMutex`](crate::RawTunedMutex) and
//!   [`RawTunedQueuedMutex`](crate::RawTunedQueuedMutex)): a per-lock value; the lock
//!   is one pointer (8 bytes) bigger, which is why it is a different type.
//!
//! | variable | field | unit | default | source |
//! | --- | --- | --- | --- | --- |
//! | `NUMA_SPIN_FLUSH_THRESHOLD_NS` | [`flush_threshold_ns`](Config::flush_threshold_ns) | ns | 1 000 000 (1 ms) | CNA v15 `numa_spinlock_threshold_ns` |
//! | `NUMA_SPIN_SHUFFLE_REDUCTION` | [`shuffle_reduction`](Config::shuffle_reduction) | 1/N | 128 | CNA v15 patch 6 (`SHUFFLE_REDUCTION_PROB_ARG` = 7) |
//! | `NUMA_SPIN_SPIN_BUDGET_NS` | [`spin_budget_ns`](Config::spin_budget_ns) | ns | 20 000 (20 us) | this crate |
//! | `NUMA_SPIN_STEAL_BOUND_NS` | [`steal_bound_ns`](Config::steal_bound_ns) | ns | 10 000 (10 us) | this crate; pvqspinlock hybrid mode, ShflLock |
//! | `NUMA_SPIN_WAIT_POLICY` | [`wait_policy`](Config::wait_policy) | `park` / `yield` | `park` | paravirt qspinlock `pv_wait`/`pv_kick` (Linux `qspinlock_paravirt.h`) |
//! | `NUMA_SPIN_HQ_HANDOFF_THRESHOLD` | [`hq_handoff_threshold`](Config::hq_handoff_threshold) | hand-offs | 1000 | HQ spinlock RFC (Stepanov, Huawei, 2025), its local hand-off threshold |
//! | `NUMA_SPIN_HQ_SWITCH_THRESHOLD` | [`hq_switch_threshold`](Config::hq_switch_threshold) | hand-offs | 50 | HQ spinlock RFC, its contention detection (a hand-off counter over 50) |
//!
//! Values are decimal integers (`_` separators allowed) or `inf` (= `u64::MAX`,
//! "never") for the three durations.

use std::env;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Environment variable for [`Config::flush_threshold_ns`].
pub const ENV_FLUSH_THRESHOLD_NS: &str = "NUMA_SPIN_FLUSH_THRESHOLD_NS";
/// Environment variable for [`Config::shuffle_reduction`].
pub const ENV_SHUFFLE_REDUCTION: &str = "NUMA_SPIN_SHUFFLE_REDUCTION";
/// Environment variable for [`Config::spin_budget_ns`].
pub const ENV_SPIN_BUDGET_NS: &str = "NUMA_SPIN_SPIN_BUDGET_NS";
/// Environment variable for [`Config::wait_policy`]: `park` or `yield`.
pub const ENV_WAIT_POLICY: &str = "NUMA_SPIN_WAIT_POLICY";
/// Environment variable for [`Config::steal_bound_ns`].
pub const ENV_STEAL_BOUND_NS: &str = "NUMA_SPIN_STEAL_BOUND_NS";
/// Environment variable for [`Config::hq_handoff_threshold`].
pub const ENV_HQ_HANDOFF_THRESHOLD: &str = "NUMA_SPIN_HQ_HANDOFF_THRESHOLD";
/// Environment variable for [`Config::hq_switch_threshold`].
pub const ENV_HQ_SWITCH_THRESHOLD: &str = "NUMA_SPIN_HQ_SWITCH_THRESHOLD";

/// The tunables of one lock (or of all locks using [`Global`]).
///
/// All fields are valid whatever their value: `u64::MAX` means "never" and the
/// shuffle-reduction denominator is non-zero by type.
///
/// # Examples
///
/// ```
/// use numa_spin::Config;
/// use std::num::NonZeroU32;
///
/// static CFG: Config = Config::DEFAULT
///     .flush_threshold_ns(10_000_000) // 10 ms, the pre-v15 default
///     .shuffle_reduction(NonZeroU32::MIN) // always scan the queue
///     .steal_bound_ns(0); // strict FIFO: no lock stealing past a queued waiter
/// static M: numa_spin::TunedMutex<u32> =
///     numa_spin::TunedMutex::from_raw(numa_spin::RawTunedMutex::with_config(&CFG), 0);
/// *M.lock() += 1;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// How long, in ns, the secondary queue may hold waiters before the queue head
    /// splices it back in front of the main queue, moving the NUMA preference to the
    /// longest-waiting remote waiter's node. Measured from the moment the secondary
    /// queue became non-empty; checked when a waiter becomes queue head.
    /// 0 = flush at every hand-off (close to FIFO), `u64::MAX` = only when the main
    /// queue runs empty (best throughput, remote waiters can starve under sustained
    /// local load). Default 1 ms (CNA v15). The HQ lock uses the same bound for a
    /// node queue's turn of local hand-offs (with [`hq_handoff_threshold`]).
    ///
    /// [`hq_handoff_threshold`]: Config::hq_handoff_threshold
    pub flush_threshold_ns: u64,
    /// Shuffle reduction: while the secondary queue is empty, the queue head scans
    /// the main queue for same-node waiters only with probability
    /// `1 / shuffle_reduction` (a per-thread xorshift draw), so a lock with little
    /// cross-node traffic pays almost nothing for being NUMA-aware. 1 = always scan.
    /// Default 128 (CNA v15).
    pub shuffle_reduction: NonZeroU32,
    /// How long, in ns, a waiter busy-waits (with exponential back-off) before it
    /// starts yielding its CPU (`sched_yield`) between checks. Calibrated in time,
    /// not iterations: the cost of one `spin_loop` hint is measured once per
    /// process. Default 20 us.
    pub spin_budget_ns: u64,
    /// Lock stealing bound, in ns: a thread arriving while the lock is free may take
    /// it ahead of the queue until the queue head (or a timed waiter) has waited
    /// this long; then the head forbids stealing until it acquires, through its
    /// naps and yields, unless an arrival has seen the lock free behind the flag
    /// for this long again (plus five head naps, 100 us, while the head naps):
    /// the head was preempted and cannot take it. See
    /// [`RawLock`](crate::RawLock)'s fairness docs for the wait this bounds. 0 = strict FIFO (no stealing past a
    /// queued waiter, except the bounded in-flight races documented on
    /// [`RawLock`](crate::RawLock)), `u64::MAX` = always allow stealing, with
    /// no bound: a queued waiter can then starve while running threads keep
    /// re-taking the lock. Default 10 us.
    pub steal_bound_ns: u64,
    /// What a waiter does once its spin budget is spent: with
    /// [`WaitPolicy::Park`] a queued waiter sleeps on its queue node until the
    /// head hands over (paravirt qspinlock's `pv_wait`/`pv_kick`), and the queue
    /// head of a CNA or queued lock sleeps 20 us at a time (a timed sleep: the
    /// release wakes nobody, so it stays one store); with [`WaitPolicy::Yield`]
    /// both yield their CPU. Before its steal bound the head lets arrivals take
    /// the lock while it is off the CPU; past it the next release is the head's.
    /// Default [`WaitPolicy::Park`] (see there for the measurement).
    pub wait_policy: WaitPolicy,
    /// HQ lock only ([`RawHqMutex`](crate::RawHqMutex)): how many consecutive
    /// *local* hand-offs (to the next waiter of the same NUMA node queue) a node
    /// queue may make before the lock goes to the next node queue in the list
    /// (a *remote* hand-off). 0 = always hand off remotely when another node
    /// queue waits (round robin between nodes). Default 1000, the threshold of
    /// the HQ spinlock RFC (Stepanov et al., Huawei, 2025).
    pub hq_handoff_threshold: u32,
    /// HQ lock only: contention detection. A contention episode (from the first
    /// waiter until the lock is completely released) starts in plain queued mode;
    /// once its plain queue has made this many hand-offs, the queue head switches
    /// the lock to NUMA mode (if the metadata pool has an entry) until the episode
    /// ends. 0 = NUMA mode from the first waiter. Default 50, the RFC's
    /// contention threshold ("a hand-off counter over 50").
    pub hq_switch_threshold: u32,
}

/// What a queued waiter does after its spin budget ([`Config::wait_policy`]).
///
/// Park is the default, by measurement: on the 2-CPU development machine (one
/// real NUMA node, threads on 2 virtual ones), `numa-bench compare --repeat 5
/// --hog 1 --threads 2,32` (one CPU-bound thread beside the workers: another
/// tenant, a preempted vCPU) gave CNA/parking_lot throughput ratios of 0.90
/// (kv, 2 threads), 1.01 (kv, 32) and 1.03 (locktorture, 32) with `Park`
/// against 0.84, 0.89 and 0.99 with `Yield`: a yielding waiter keeps taking
/// time slices from the holder and the head. Without the hog the two were
/// within the run-to-run spread (locktorture, 8 and 32 threads: 1.22 against
/// 1.27). With at most one runnable thread per CPU the two behave the same:
/// nobody spends its budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitPolicy {
    /// Sleep (futex-style wait on the queue node) until made queue head; the
    /// handing-over head wakes it. Where the OS has no such wait, yields. The
    /// queue head of a CNA or queued lock, and the HQ lock's global head, then
    /// sleep 20 us at a time between their checks of the lock word.
    Park,
    /// Yield the CPU (`sched_yield`) between checks, never sleep.
    Yield,
}

impl Config {
    /// The defaults (see the [module docs](self) table).
    pub const DEFAULT: Config = Config {
        flush_threshold_ns: 1_000_000,
        shuffle_reduction: NonZeroU32::new(128).unwrap(),
        spin_budget_ns: 20_000,
        steal_bound_ns: 10_000,
        wait_policy: WaitPolicy::Park,
        hq_handoff_threshold: 1000,
        hq_switch_threshold: 50,
    };

    /// Returns `self` with [`flush_threshold_ns`](Config::flush_threshold_ns) set.
    #[must_use]
    pub const fn flush_threshold_ns(mut self, ns: u64) -> Self {
        self.flush_threshold_ns = ns;
        self
    }

    /// Returns `self` with [`shuffle_reduction`](Config::shuffle_reduction) set.
    #[must_use]
    pub const fn shuffle_reduction(mut self, one_in: NonZeroU32) -> Self {
        self.shuffle_reduction = one_in;
        self
    }

    /// Returns `self` with [`spin_budget_ns`](Config::spin_budget_ns) set.
    #[must_use]
    pub const fn spin_budget_ns(mut self, ns: u64) -> Self {
        self.spin_budget_ns = ns;
        self
    }

    /// Returns `self` with [`wait_policy`](Config::wait_policy) set.
    #[must_use]
    pub const fn wait_policy(mut self, policy: WaitPolicy) -> Self {
        self.wait_policy = policy;
        self
    }

    /// Returns `self` with [`hq_handoff_threshold`](Config::hq_handoff_threshold) set.
    #[must_use]
    pub const fn hq_handoff_threshold(mut self, handoffs: u32) -> Self {
        self.hq_handoff_threshold = handoffs;
        self
    }

    /// Returns `self` with [`hq_switch_threshold`](Config::hq_switch_threshold) set.
    #[must_use]
    pub const fn hq_switch_threshold(mut self, handoffs: u32) -> Self {
        self.hq_switch_threshold = handoffs;
        self
    }

    /// Returns `self` with [`steal_bound_ns`](Config::steal_bound_ns) set.
    #[must_use]
    pub const fn steal_bound_ns(mut self, ns: u64) -> Self {
        self.steal_bound_ns = ns;
        self
    }

    /// Reads the tunables from the environment (see the [module docs](self)),
    /// using the default for every unset variable.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the first variable whose value is not valid unicode,
    /// not a number, out of range, or zero for `NUMA_SPIN_SHUFFLE_REDUCTION`.
    pub fn from_env() -> Result<Config, ConfigError> {
        let (config, errors) = Self::from_env_lossy();
        match errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(config),
        }
    }

    /// Like [`from_env`](Config::from_env) but keeps the default for each bad
    /// variable and returns all the errors.
    pub fn from_env_lossy() -> (Config, Vec<ConfigError>) {
        Self::from_lookup(env::var_os)
    }

    /// Parses the tunables from `lookup(variable name)`; the testable core of
    /// [`from_env_lossy`](Config::from_env_lossy).
    fn from_lookup(
        lookup: impl Fn(&'static str) -> Option<std::ffi::OsString>,
    ) -> (Config, Vec<ConfigError>) {
        let mut config = Config::DEFAULT;
        let mut errors = Vec::new();
        let mut duration = |var: &'static str, field: &mut u64| {
            if let Some(raw) = lookup(var) {
                match parse_u64(var, raw) {
                    Ok(v) => *field = v,
                    Err(e) => errors.push(e),
                }
            }
        };
        duration(ENV_FLUSH_THRESHOLD_NS, &mut config.flush_threshold_ns);
        duration(ENV_SPIN_BUDGET_NS, &mut config.spin_budget_ns);
        duration(ENV_STEAL_BOUND_NS, &mut config.steal_bound_ns);
        if let Some(raw) = lookup(ENV_SHUFFLE_REDUCTION) {
            match parse_u64(ENV_SHUFFLE_REDUCTION, raw.clone()).and_then(|v| {
                // `inf`: the largest denominator (a shuffle almost never).
                let v = if v == u64::MAX {
                    u64::from(u32::MAX)
                } else {
                    v
                };
                u32::try_from(v)
                    .ok()
                    .and_then(NonZeroU32::new)
                    .ok_or_else(|| ConfigError {
                        var: ENV_SHUFFLE_REDUCTION,
                        value: raw.to_string_lossy().into_owned(),
                        kind: ConfigErrorKind::OutOfRange,
                    })
            }) {
                Ok(v) => config.shuffle_reduction = v,
                Err(e) => errors.push(e),
            }
        }
        let mut count = |var: &'static str, field: &mut u32| {
            if let Some(raw) = lookup(var) {
                // `inf` is accepted as by every other tunable: no bound.
                match parse_u64(var, raw.clone()).and_then(|v| {
                    if v == u64::MAX {
                        return Ok(u32::MAX);
                    }
                    u32::try_from(v).map_err(|_| ConfigError {
                        var,
                        value: raw.to_string_lossy().into_owned(),
                        kind: ConfigErrorKind::OutOfRange,
                    })
                }) {
                    Ok(v) => *field = v,
                    Err(e) => errors.push(e),
                }
            }
        };
        count(ENV_HQ_HANDOFF_THRESHOLD, &mut config.hq_handoff_threshold);
        count(ENV_HQ_SWITCH_THRESHOLD, &mut config.hq_switch_threshold);
        if let Some(raw) = lookup(ENV_WAIT_POLICY) {
            match raw.to_str().map(str::trim) {
                Some(v) if v.eq_ignore_ascii_case("park") => config.wait_policy = WaitPolicy::Park,
                Some(v) if v.eq_ignore_ascii_case("yield") => {
                    config.wait_policy = WaitPolicy::Yield
                }
                Some(v) => errors.push(ConfigError {
                    var: ENV_WAIT_POLICY,
                    value: v.to_owned(),
                    kind: ConfigErrorKind::NotAPolicy,
                }),
                None => errors.push(ConfigError {
                    var: ENV_WAIT_POLICY,
                    value: raw.to_string_lossy().into_owned(),
                    kind: ConfigErrorKind::NotUnicode,
                }),
            }
        }
        (config, errors)
    }

    /// The process-wide tunables used by [`Global`]: [`Config::from_env_lossy`]
    /// read on first use. Each bad variable is logged once (`log::warn!`, target
    /// `numa_spin`: `ignoring ...`) and its default is used instead; nothing is
    /// printed unless the program installed a logger. [`Config::from_env`] returns
    /// the errors to callers who want to check.
    ///
    /// Never blocks: while the first call reads the environment (which allocates),
    /// other callers, including a re-entrant call on the same thread from a lock
    /// inside the `#[global_allocator]`, get [`Config::DEFAULT`].
    pub fn global() -> &'static Config {
        crate::lazy::lazy_read();
        static GLOBAL: OnceLock<Config> = OnceLock::new();
        static READING: AtomicBool = AtomicBool::new(false);
        if let Some(config) = GLOBAL.get() {
            return config;
        }
        // Only the thread that wins this flag calls `get_or_init`, so it never
        // waits for another thread nor re-enters its own initialization.
        // Relaxed: the flag only elects the reader; `OnceLock` publishes the value.
        if READING.swap(true, Ordering::Relaxed) {
            return &Config::DEFAULT;
        }
        GLOBAL.get_or_init(|| {
            let (config, errors) = Self::from_env_lossy();
            for e in errors {
                log::warn!(target: "numa_spin", "ignoring {e}; using the default");
            }
            config
        })
    }
}

impl Default for Config {
    fn default() -> Self {
        Self::DEFAULT
    }
}

fn parse_u64(var: &'static str, raw: std::ffi::OsString) -> Result<u64, ConfigError> {
    let Some(text) = raw.to_str() else {
        return Err(ConfigError {
            var,
            value: raw.to_string_lossy().into_owned(),
            kind: ConfigErrorKind::NotUnicode,
        });
    };
    let err = |kind| ConfigError {
        var,
        value: text.to_owned(),
        kind,
    };
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("inf") {
        return Ok(u64::MAX);
    }
    let digits: String = trimmed.chars().filter(|&c| c != '_').collect();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(ConfigErrorKind::NotANumber));
    }
    digits
        .parse::<u64>()
        .map_err(|_| err(ConfigErrorKind::OutOfRange))
}

/// What was wrong with a tunable's environment variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The value is not valid unicode.
    NotUnicode,
    /// The value is not a decimal integer (nor `inf`).
    NotANumber,
    /// The value does not fit the field (> `u64::MAX`, or 0 / > `u32::MAX` for the
    /// shuffle-reduction denominator).
    OutOfRange,
    /// The value is not a wait policy (`park` or `yield`).
    NotAPolicy,
}

/// A tunable's environment variable holds a bad value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConfigError {
    /// The variable's name, e.g. `NUMA_SPIN_FLUSH_THRESHOLD_NS`.
    pub var: &'static str,
    /// The value found (lossily converted to UTF-8).
    pub value: String,
    /// What is wrong with it.
    pub kind: ConfigErrorKind,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            ConfigErrorKind::NotUnicode => "is not valid unicode",
            ConfigErrorKind::NotANumber => "is not a decimal integer or `inf`",
            ConfigErrorKind::OutOfRange => "is out of range",
            ConfigErrorKind::NotAPolicy => "is not `park` or `yield`",
        };
        write!(f, "{}={:?}: the value {what}", self.var, self.value)
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// The value the tunable keeps instead, [`Config::DEFAULT`]'s, as its
    /// variable would spell it (e.g. `1000000` for
    /// `NUMA_SPIN_FLUSH_THRESHOLD_NS`, `park` for `NUMA_SPIN_WAIT_POLICY`).
    pub fn default_value(&self) -> String {
        let d = &Config::DEFAULT;
        match self.var {
            ENV_FLUSH_THRESHOLD_NS => d.flush_threshold_ns.to_string(),
            ENV_SHUFFLE_REDUCTION => d.shuffle_reduction.to_string(),
            ENV_SPIN_BUDGET_NS => d.spin_budget_ns.to_string(),
            ENV_STEAL_BOUND_NS => d.steal_bound_ns.to_string(),
            ENV_HQ_HANDOFF_THRESHOLD => d.hq_handoff_threshold.to_string(),
            ENV_HQ_SWITCH_THRESHOLD => d.hq_switch_threshold.to_string(),
            ENV_WAIT_POLICY => match d.wait_policy {
                WaitPolicy::Park => "park".into(),
                WaitPolicy::Yield => "yield".into(),
            },
            _ => String::new(),
        }
    }
}

/// Where a lock reads its [`Config`] from: [`Global`], a `&'static Config`, or a
/// type of yours (a zero-sized type returning a `static` keeps the lock at 8 bytes).
///
/// `config` should return the same value every time; if it does not, only
/// fairness and speed are affected (each slow path reads it once), never mutual
/// exclusion.
///
/// # Examples
///
/// ```
/// use numa_spin::{Config, RawLock, Tunables};
///
/// /// Strict FIFO CNA for every lock of this type.
/// #[derive(Clone, Copy)]
/// struct StrictFifo;
/// static STRICT: Config = Config::DEFAULT.steal_bound_ns(0);
/// impl Tunables for StrictFifo {
///     const DEFAULT: Self = StrictFifo;
///     fn config(&self) -> &Config {
///         &STRICT
///     }
/// }
/// type StrictMutex<T> = numa_spin::lock_api::Mutex<RawLock<true, StrictFifo>, T>;
///
/// static M: StrictMutex<u8> = StrictMutex::new(0);
/// *M.lock() += 1;
/// ```
pub trait Tunables: Copy + Send + Sync + 'static {
    /// The value `lock_api::RawMutex::INIT` uses: [`Global`], or
    /// `&Config::DEFAULT`.
    const DEFAULT: Self;

    /// The tunables; called on slow paths only.
    fn config(&self) -> &Config;

    /// Whether a new queue head wakes its parked successor ahead of its turn
    /// (ShflLock's blocking lock, Kashyap et al., SOSP 2019, section 4.2: the
    /// waiter before a sleeper wakes it while the lock is still held, so
    /// that the hand-off finds it spinning instead of waiting for the OS's
    /// wake-up, about 50-100 us). The successor then spins for its spin
    /// budget again before it parks once more. Called on slow paths only.
    /// `false` (the default): a parked waiter is woken by the hand-off that
    /// makes it head, as paravirt qspinlock's `pv_kick` does.
    fn wake_ahead(&self) -> bool {
        false
    }
}

/// The process-wide tunables, [`Config::global`]: zero-sized, so the lock stays
/// 8 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Global;

impl Tunables for Global {
    const DEFAULT: Self = Global;

    #[inline]
    fn config(&self) -> &Config {
        Config::global()
    }
}

impl Tunables for &'static Config {
    const DEFAULT: Self = &Config::DEFAULT;

    #[inline]
    fn config(&self) -> &Config {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn lookup<'a>(
        pairs: &'a [(&'static str, &'a str)],
    ) -> impl Fn(&'static str) -> Option<OsString> + 'a {
        move |var| {
            pairs
                .iter()
                .find(|(k, _)| *k == var)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn unset_variables_give_the_defaults() {
        let (config, errors) = Config::from_lookup(lookup(&[]));
        assert_eq!(config, Config::DEFAULT);
        assert!(errors.is_empty());
    }

    #[test]
    fn every_variable_is_read() {
        let (config, errors) = Config::from_lookup(lookup(&[
            (ENV_FLUSH_THRESHOLD_NS, "10_000_000"),
            (ENV_SHUFFLE_REDUCTION, "1"),
            (ENV_SPIN_BUDGET_NS, " 500 "),
            (ENV_STEAL_BOUND_NS, "inf"),
            (ENV_HQ_HANDOFF_THRESHOLD, "7"),
            (ENV_HQ_SWITCH_THRESHOLD, "0"),
        ]));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(config.hq_handoff_threshold, 7);
        assert_eq!(config.hq_switch_threshold, 0);
        assert_eq!(config.flush_threshold_ns, 10_000_000);
        assert_eq!(config.shuffle_reduction.get(), 1);
        assert_eq!(config.spin_budget_ns, 500);
        assert_eq!(config.steal_bound_ns, u64::MAX);
    }

    #[test]
    fn bad_values_are_typed_errors_and_keep_the_default() {
        let (config, errors) = Config::from_lookup(lookup(&[
            (ENV_FLUSH_THRESHOLD_NS, "1ms"),
            (ENV_SHUFFLE_REDUCTION, "0"),
            (ENV_SPIN_BUDGET_NS, "99999999999999999999999"),
            (ENV_STEAL_BOUND_NS, "-5"),
        ]));
        assert_eq!(config, Config::DEFAULT);
        let kinds: Vec<_> = errors.iter().map(|e| (e.var, e.kind)).collect();
        assert_eq!(
            kinds,
            [
                (ENV_FLUSH_THRESHOLD_NS, ConfigErrorKind::NotANumber),
                (ENV_SPIN_BUDGET_NS, ConfigErrorKind::OutOfRange),
                (ENV_STEAL_BOUND_NS, ConfigErrorKind::NotANumber),
                (ENV_SHUFFLE_REDUCTION, ConfigErrorKind::OutOfRange),
            ]
        );
        let shown = errors[0].to_string();
        assert!(
            shown.contains(ENV_FLUSH_THRESHOLD_NS) && shown.contains("1ms"),
            "{shown}"
        );
    }

    #[test]
    fn wait_policy_is_read_and_bad_values_are_typed_errors() {
        let (config, errors) = Config::from_lookup(lookup(&[(ENV_WAIT_POLICY, " Yield ")]));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(config.wait_policy, WaitPolicy::Yield);
        let (config, errors) = Config::from_lookup(lookup(&[(ENV_WAIT_POLICY, "sleep")]));
        assert_eq!(config.wait_policy, Config::DEFAULT.wait_policy);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].kind, ConfigErrorKind::NotAPolicy);
        assert!(errors[0].to_string().contains(ENV_WAIT_POLICY));
    }

    /// `inf` means no bound for every tunable, the counts included (it read
    /// "out of range" for the HQ thresholds, while their `-1` read "not a
    /// decimal integer or `inf`").
    #[test]
    fn inf_is_accepted_by_every_numeric_tunable() {
        let (config, errors) = Config::from_lookup(lookup(&[
            (ENV_HQ_HANDOFF_THRESHOLD, "inf"),
            (ENV_HQ_SWITCH_THRESHOLD, "INF"),
            (ENV_SHUFFLE_REDUCTION, "inf"),
        ]));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(config.hq_handoff_threshold, u32::MAX);
        assert_eq!(config.hq_switch_threshold, u32::MAX);
        assert_eq!(config.shuffle_reduction.get(), u32::MAX);
        let (_, errors) = Config::from_lookup(lookup(&[(ENV_HQ_SWITCH_THRESHOLD, "4294967296")]));
        assert_eq!(errors[0].kind, ConfigErrorKind::OutOfRange);
    }

    #[test]
    fn an_error_names_the_default_kept_instead() {
        let (_, errors) = Config::from_lookup(lookup(&[
            (ENV_WAIT_POLICY, "sleep"),
            (ENV_SPIN_BUDGET_NS, "x"),
            (ENV_HQ_SWITCH_THRESHOLD, "-1"),
        ]));
        let kept: Vec<_> = errors.iter().map(|e| (e.var, e.default_value())).collect();
        assert_eq!(
            kept,
            [
                (
                    ENV_SPIN_BUDGET_NS,
                    Config::DEFAULT.spin_budget_ns.to_string()
                ),
                (ENV_HQ_SWITCH_THRESHOLD, "50".to_string()),
                (ENV_WAIT_POLICY, "park".to_string()),
            ]
        );
    }

    #[test]
    fn shuffle_reduction_above_u32_is_out_of_range() {
        let (_, errors) = Config::from_lookup(lookup(&[(ENV_SHUFFLE_REDUCTION, "4294967296")]));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].kind, ConfigErrorKind::OutOfRange);
    }
}
