//! `NUMA_LOCK_STATS=1`: process-wide counters per lock kind, printed at exit.
//!
//! Counters are global atomics updated only when the variable is set (one
//! relaxed load of a flag otherwise). "Contended" means the first attempt
//! failed; "same-node handoff" means a contended acquisition whose previous
//! holder of that lock ran on the caller's NUMA node (`numa_topology::current_node`,
//! looked up only with stats on).

use crate::buf::Buf;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);

/// One lock kind's counters.
pub struct Counters {
    /// Successful acquisitions (including recursive re-entries).
    pub acquisitions: AtomicU64,
    /// Acquisitions whose first attempt failed.
    pub contended: AtomicU64,
    /// Contended acquisitions that followed a holder on the same NUMA node.
    pub same_node: AtomicU64,
}

impl Counters {
    const fn new() -> Counters {
        Counters {
            acquisitions: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            same_node: AtomicU64::new(0),
        }
    }

    /// Counts one acquisition; `last_node` is the lock's "last holder's node + 1"
    /// cell, if it has one.
    #[cold]
    pub(crate) fn acquired(
        &self,
        contended: bool,
        last_node: Option<&core::sync::atomic::AtomicU32>,
    ) {
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        if contended {
            self.contended.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(cell) = last_node {
            let me = u32::try_from(numa_topology::current_node())
                .unwrap_or(u32::MAX - 1)
                .saturating_add(1);
            if cell.swap(me, Ordering::Relaxed) == me && contended {
                self.same_node.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Mutex acquisitions (ours; glibc-forwarded kinds are not counted).
pub static MUTEX: Counters = Counters::new();
/// Rwlock read acquisitions.
pub static READ: Counters = Counters::new();
/// Rwlock write acquisitions.
pub static WRITE: Counters = Counters::new();
/// Condvar waits (ours).
pub static COND_WAITS: AtomicU64 = AtomicU64::new(0);
/// Condvar waits that ended with `ETIMEDOUT`.
pub static COND_TIMEOUTS: AtomicU64 = AtomicU64::new(0);
/// `pthread_cond_signal` and `pthread_cond_broadcast` calls (ours).
pub static COND_WAKES: AtomicU64 = AtomicU64::new(0);
/// Calls forwarded to glibc (mode `pthread` or a glibc-only mutex kind).
pub static FORWARDED: AtomicU64 = AtomicU64::new(0);

/// Counts one call forwarded to glibc, when counting is on (an unconditional
/// shared counter would make every forwarded call a contended RMW).
#[inline(always)]
pub fn forwarded() {
    if enabled() {
        FORWARDED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether counting is on.
#[inline(always)]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Reads `NUMA_LOCK_STATS` (the constructor calls this).
#[cfg_attr(test, allow(dead_code))]
pub(crate) fn init() {
    // SAFETY: as in `mode::decide`: libc `getenv`, read-only.
    let on = unsafe {
        let p = libc::getenv(c"NUMA_LOCK_STATS".as_ptr());
        !p.is_null() && core::ffi::CStr::from_ptr(p).to_bytes() == b"1"
    };
    ENABLED.store(on, Ordering::Relaxed);
}

/// Prints the counters (the library's destructor calls this).
#[cfg_attr(test, allow(dead_code))]
pub(crate) extern "C" fn report() {
    if !enabled() {
        return;
    }
    let mode = crate::mode::current().name();
    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
    for (kind, c) in [
        ("mutex", &MUTEX),
        ("rwlock-read", &READ),
        ("rwlock-write", &WRITE),
    ] {
        let mut b = Buf::new();
        b.push(b"numa-preload: lock=");
        b.push(mode.as_bytes());
        b.push(b" kind=");
        b.push(kind.as_bytes());
        b.push(b" acquisitions=");
        b.num(ld(&c.acquisitions));
        b.push(b" contended=");
        b.num(ld(&c.contended));
        b.push(b" same_node_handoffs=");
        b.num(ld(&c.same_node));
        b.push(b"\n");
        b.write_stderr();
    }
    let mut b = Buf::new();
    b.push(b"numa-preload: lock=");
    b.push(mode.as_bytes());
    b.push(b" kind=condvar waits=");
    b.num(ld(&COND_WAITS));
    b.push(b" timeouts=");
    b.num(ld(&COND_TIMEOUTS));
    b.push(b" wakes=");
    b.num(ld(&COND_WAKES));
    b.push(b" forwarded_to_glibc=");
    b.num(ld(&FORWARDED));
    b.push(b"\n");
    b.write_stderr();
}
