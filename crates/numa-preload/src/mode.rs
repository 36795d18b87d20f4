//! The process-wide lock choice (`NUMA_LOCK`), decided atomically at first use.
//!
//! A lock call can come before this library's constructor has run (another
//! library's constructor, or `malloc` from the dynamic loader), so every entry
//! point reads [`current`]: one relaxed load once decided, otherwise the
//! environment is read with libc's `getenv` (which does not allocate) and the
//! first decision is published with a compare-and-swap.
//!
//! # What the locks underneath allocate
//!
//! This crate allocates nothing on a lock path. The locks it hosts:
//!
//! - `cna`, `queued`, `hq` (numa-spin), and `cst` (cst-mutex's blocking mutex
//!   on numa-spin's CNA queue): a thread's first *contended* acquisition
//!   takes a queue-node slot from numa-spin's registry (segments from
//!   `std::alloc::System`, i.e. glibc `malloc`, only when the registry grows) and
//!   keeps it in a `std` thread-local whose destructor returns the slot at thread
//!   exit. Registering that destructor is `std` thread machinery: glibc's
//!   `__cxa_thread_atexit_impl`, which `calloc`s one list entry. With glibc's
//!   malloc (which uses its internal locks, not `pthread_mutex_lock`) nothing
//!   re-enters us; an allocator that takes pthread mutexes (jemalloc, tcmalloc)
//!   would re-enter on a *different* lock from inside the slow path before the
//!   node is enqueued, which numa-spin tolerates (see its `node` module docs).
//!   The slots are recycled, so the number of threads over the process's life is
//!   not limited.
//! - `cst`, and every rwlock (cst-mutex's): a waiter that sleeps outside the
//!   queue (a timed `pthread_mutex_timedlock`, a writer or reader of an
//!   rwlock) goes through `parking_lot_core`, whose hash table is allocated
//!   (through the global allocator, here glibc `malloc`) on the first park in
//!   the process and grown as threads park. A contended rwlock binds a set of
//!   per-node reader counters from a static pool (no heap memory), given back
//!   at `pthread_rwlock_destroy`. Under an allocator that itself takes pthread
//!   mutexes, its first park would recurse into `cst`: use a numa-spin lock
//!   there.

use core::sync::atomic::{AtomicU8, Ordering};

/// Which lock the process uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Everything forwarded to glibc (the baseline through the same library).
    Pthread = 1,
    /// `numa_spin::RawMutex`: CNA.
    Cna = 2,
    /// `numa_spin::RawQueuedMutex`: the same queue lock without NUMA reordering.
    Queued = 3,
    /// `numa_spin::RawHqMutex`: the HQ lock.
    Hq = 4,
    /// `cst_mutex::RawMutex` (cst-mutex's blocking mutex on numa-spin's
    /// CNA queue) and `cst_mutex::RawRwLock`.
    Cst = 5,
}

/// The environment variable naming the lock.
pub const ENV: &str = "NUMA_LOCK";

/// The accepted values of [`ENV`], in the order the error message lists them.
pub const NAMES: [(&str, Mode); 5] = [
    ("cna", Mode::Cna),
    ("hq", Mode::Hq),
    ("queued", Mode::Queued),
    ("cst", Mode::Cst),
    ("pthread", Mode::Pthread),
];

/// The lock used when `NUMA_LOCK` is unset or empty.
pub const DEFAULT: Mode = Mode::Cst;

static MODE: AtomicU8 = AtomicU8::new(0);

impl Mode {
    /// The `NUMA_LOCK` value that selects this mode.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Pthread => "pthread",
            Mode::Cna => "cna",
            Mode::Queued => "queued",
            Mode::Hq => "hq",
            Mode::Cst => "cst",
        }
    }

    fn from_u8(v: u8) -> Option<Mode> {
        match v {
            1 => Some(Mode::Pthread),
            2 => Some(Mode::Cna),
            3 => Some(Mode::Queued),
            4 => Some(Mode::Hq),
            5 => Some(Mode::Cst),
            _ => None,
        }
    }
}

/// Parses a `NUMA_LOCK` value: `None` (unset) and `""` give [`DEFAULT`]; an
/// unknown value gives `None`.
pub fn parse(value: Option<&[u8]>) -> Option<Mode> {
    match value {
        None | Some(b"") => Some(DEFAULT),
        Some(v) => NAMES
            .iter()
            .find(|(n, _)| n.as_bytes() == v)
            .map(|&(_, m)| m),
    }
}

/// The process's lock, deciding it on first use.
#[inline]
pub fn current() -> Mode {
    match Mode::from_u8(MODE.load(Ordering::Relaxed)) {
        Some(m) => m,
        None => decide(),
    }
}

#[cold]
fn decide() -> Mode {
    // SAFETY: `getenv` reads the environment array set up before any code of
    // the process runs; the returned pointer, if non-null, is a NUL-terminated
    // string we only read here (no concurrent `setenv` is assumed, as in libc).
    let value = unsafe {
        let p = libc::getenv(c"NUMA_LOCK".as_ptr());
        if p.is_null() {
            None
        } else {
            Some(core::ffi::CStr::from_ptr(p).to_bytes())
        }
    };
    let mode = match parse(value) {
        Some(m) => m,
        None => die_bad_value(value.unwrap_or(b"")),
    };
    if matches!(mode, Mode::Cna | Mode::Queued | Mode::Hq | Mode::Cst)
        && !crate::layout::NUMA_SPIN_FITS
    {
        die_unfit(mode);
    }
    // Relaxed: the value carries no other data; racing deciders compute the same
    // value from the same environment, and the first one wins.
    match MODE.compare_exchange(0, mode as u8, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => mode,
        Err(v) => Mode::from_u8(v).unwrap_or(mode),
    }
}

/// Writes the one-line error for a bad `NUMA_LOCK` and ends the process with
/// status 2 (`_exit`: no atexit handler runs, none can take a lock).
#[cold]
fn die_bad_value(value: &[u8]) -> ! {
    let mut buf = crate::buf::Buf::new();
    buf.push(b"numa-preload: NUMA_LOCK=\"");
    buf.push(value);
    buf.push(b"\" is not a lock; accepted values: cna, hq, queued, cst, pthread (unset: cst)\n");
    buf.write_stderr();
    // SAFETY: `_exit` takes no pointer and never returns.
    unsafe { libc::_exit(2) }
}

/// This build's numa-spin locks, and cst's on numa-spin's queue, carry
/// per-lock counters (numa-spin's `stats` feature) and do not fit in a
/// `pthread_mutex_t`: stop rather than run something else.
#[cold]
fn die_unfit(mode: Mode) -> ! {
    let mut buf = crate::buf::Buf::new();
    buf.push(b"numa-preload: NUMA_LOCK=");
    buf.push(mode.name().as_bytes());
    buf.push(b" needs numa-spin without its `stats` feature (the lock must fit in pthread_mutex_t); build with `cargo build --release -p numa-preload`\n");
    buf.write_stderr();
    // SAFETY: `_exit` takes no pointer and never returns.
    unsafe { libc::_exit(2) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_the_documented_names_and_default() {
        assert_eq!(parse(None), Some(Mode::Cst));
        assert_eq!(parse(Some(b"")), Some(Mode::Cst));
        for (n, m) in NAMES {
            assert_eq!(parse(Some(n.as_bytes())), Some(m));
            assert_eq!(m.name(), n);
            assert_eq!(Mode::from_u8(m as u8), Some(m));
        }
        assert_eq!(parse(Some(b"CNA")), None);
        // Every lock name is the workspace registry's name for that lock.
        for (n, _) in NAMES.iter().filter(|(n, _)| *n != "pthread") {
            assert!(
                numa_lock_registry::lock(n).is_some(),
                "{n} not in the registry"
            );
        }
        assert_eq!(parse(Some(b"mcs")), None);
    }
}
