//! [`monotonic_ns`]: the clock the lock crates time their waits with.

/// Monotonic time in ns: `CLOCK_MONOTONIC` (the clock of
/// `std::time::Instant`) on unix, counted from an unspecified start (boot on
/// Linux), saturating; elsewhere ns since the first call in the process.
///
/// Needs no epoch on unix, so it is safe in the child of a `fork`: an epoch
/// kept in a `OnceLock` that another thread was setting when the process
/// forked stays "being set" for ever in the child, and every reading there
/// waits for it.
#[inline]
pub fn monotonic_ns() -> u64 {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC is
        // always supported on Linux and the BSDs (a failure leaves 0).
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
        // u64 ns covers 584 years of uptime; saturate beyond.
        u64::try_from(ts.tv_sec)
            .unwrap_or(0)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
    }
    #[cfg(not(unix))]
    {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let epoch = *EPOCH.get_or_init(std::time::Instant::now);
        u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::monotonic_ns;

    #[test]
    fn advances_with_instant() {
        let (a, i) = (monotonic_ns(), std::time::Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(2));
        let (b, e) = (monotonic_ns(), i.elapsed());
        let e = u64::try_from(e.as_nanos()).unwrap();
        assert!(b > a);
        // Both read CLOCK_MONOTONIC: the two intervals differ only by the
        // reads' own time.
        assert!(
            (b - a).abs_diff(e) < 1_000_000,
            "{} ns against {e} ns",
            b - a
        );
    }
}
