//! Busy-wait delays, given in nanoseconds or in loop iterations.
//!
//! locktorture's critical and non-critical sections are busy work; here they are
//! either a wall-clock spin (`250ns`, `2us`: reads the clock, about 25 ns a read on
//! the reference machine, so short ns delays overshoot) or a fixed number of
//! iterations of a dependent integer loop (`100it`: no clock reads, same work on
//! every machine but a machine-dependent duration: about 1.1 ns an iteration on
//! the reference machine, 2-CPU Xeon VM, so `50it` is about 55 ns).

use std::fmt;
use std::hint::black_box;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// A busy-wait delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Delay {
    /// No delay.
    #[default]
    None,
    /// Spin until this many nanoseconds have passed (wall clock).
    Nanos(u64),
    /// Run this many iterations of a dependent integer loop.
    Iters(u64),
}

impl Delay {
    /// Performs the delay. Returns a value derived from the work so it is not optimised out.
    #[inline]
    pub fn run(self) -> u64 {
        match self {
            Delay::None => 0,
            Delay::Nanos(ns) => spin_for(Duration::from_nanos(ns)),
            Delay::Iters(n) => spin_iters(n),
        }
    }
}

/// Spins (with `spin_loop` hints) until `d` has passed; returns the number of clock reads.
#[inline]
pub fn spin_for(d: Duration) -> u64 {
    if d.is_zero() {
        return 0;
    }
    let start = Instant::now();
    let mut reads = 1;
    while start.elapsed() < d {
        std::hint::spin_loop();
        reads += 1;
    }
    reads
}

/// `n` iterations of a dependent multiply-add chain (an LCG step, 2 cycles or so each).
#[inline]
pub fn spin_iters(n: u64) -> u64 {
    let mut x = black_box(n);
    for _ in 0..n {
        x = black_box(
            x.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407),
        );
    }
    x
}

/// Why a delay string was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayParseError(pub String);

impl fmt::Display for DelayParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid delay {:?}: expected 0, <n>ns, <n>us or <n>it (iterations), e.g. 200ns or 64it",
            self.0
        )
    }
}

impl std::error::Error for DelayParseError {}

impl FromStr for Delay {
    type Err = DelayParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let err = || DelayParseError(s.to_owned());
        if t == "0" {
            return Ok(Delay::None);
        }
        let (num, mul, iters) = if let Some(n) = t.strip_suffix("ns") {
            (n, 1, false)
        } else if let Some(n) = t.strip_suffix("us") {
            (n, 1_000, false)
        } else if let Some(n) = t.strip_suffix("it") {
            (n, 1, true)
        } else {
            return Err(err());
        };
        let n: u64 = num.trim().parse().map_err(|_| err())?;
        let n = n.checked_mul(mul).ok_or_else(err)?;
        Ok(match (n, iters) {
            (0, _) => Delay::None,
            (n, true) => Delay::Iters(n),
            (n, false) => Delay::Nanos(n),
        })
    }
}

impl fmt::Display for Delay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Delay::None => f.write_str("0"),
            Delay::Nanos(n) => write!(f, "{n}ns"),
            Delay::Iters(n) => write!(f, "{n}it"),
        }
    }
}

/// Parses a duration: `2s`, `1.5s`, `500ms`, `250us` (a plain number is seconds).
///
/// # Errors
/// A message naming the bad value and the accepted forms.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v * scale <= 86_400.0 => {
            Ok(Duration::from_secs_f64(v * scale))
        }
        _ => Err(format!(
            "invalid duration {s:?}: expected a positive number with s, ms or us (at most 1 day), e.g. 2s or 500ms"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        for bad in ["", "0s", "-1s", "abc", "1h", "nan", "100000000s"] {
            assert!(parse_duration(bad).unwrap_err().contains(bad), "{bad}");
        }
    }

    #[test]
    fn parses_units() {
        assert_eq!("0".parse(), Ok(Delay::None));
        assert_eq!("0ns".parse(), Ok(Delay::None));
        assert_eq!("250ns".parse(), Ok(Delay::Nanos(250)));
        assert_eq!("2us".parse(), Ok(Delay::Nanos(2000)));
        assert_eq!("64it".parse(), Ok(Delay::Iters(64)));
        for bad in [
            "",
            "12",
            "ns",
            "-5ns",
            "1.5us",
            "3ms",
            "99999999999999999999it",
        ] {
            assert_eq!(
                bad.parse::<Delay>(),
                Err(DelayParseError(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn display_round_trips() {
        for d in [Delay::None, Delay::Nanos(7), Delay::Iters(9)] {
            assert_eq!(d.to_string().parse(), Ok(d));
        }
    }

    #[test]
    fn ns_delay_waits_at_least_that_long() {
        // A lower bound only: the wait may overshoot by any amount on a busy machine.
        let t = Instant::now();
        Delay::Nanos(200_000).run();
        assert!(t.elapsed() >= Duration::from_nanos(200_000));
    }
}
