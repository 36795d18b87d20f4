//! Absolute `timespec` deadlines on a POSIX clock, turned into `Instant`s.

use core::ffi::c_int;
use libc::{clockid_t, timespec};
use std::time::{Duration, Instant};

/// Whether `clock` is one the timed functions accept (`EINVAL` otherwise), as
/// glibc: `CLOCK_REALTIME` and `CLOCK_MONOTONIC`.
#[inline]
pub(crate) fn clock_ok(clock: clockid_t) -> bool {
    clock == libc::CLOCK_REALTIME || clock == libc::CLOCK_MONOTONIC
}

/// Whether `ts` is a valid absolute time (`0 <= tv_nsec < 1e9`).
///
/// # Safety
///
/// `ts` is null or points to a readable `timespec`.
#[inline]
pub(crate) unsafe fn valid(ts: *const timespec) -> bool {
    // SAFETY: non-null `ts` is readable (caller's contract).
    !ts.is_null() && unsafe { (*ts).tv_nsec >= 0 && (*ts).tv_nsec < 1_000_000_000 }
}

/// The `Instant` at which `clock` reads `*ts`; `None` if that time has passed.
/// A deadline too far to represent is the far future (about 100 years).
///
/// # Safety
///
/// `ts` points to a valid `timespec` ([`valid`]).
pub(crate) unsafe fn deadline(clock: clockid_t, ts: *const timespec) -> Result<Instant, c_int> {
    let mut now = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a writable `timespec`.
    unsafe { libc::clock_gettime(clock, &mut now) };
    let base = Instant::now();
    // SAFETY: `ts` is valid (caller's contract).
    let ts = unsafe { *ts };
    let ns = |t: &timespec| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
    let left = ns(&ts) - ns(&now);
    if left <= 0 {
        return Err(libc::ETIMEDOUT);
    }
    let left = Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX));
    Ok(base
        .checked_add(left)
        .or_else(|| base.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(base))
}
