//! `locktorture`: a critical section that writes K shared cache lines, then a
//! non-critical delay (after the kernel's locktorture module, whose spinlock writer
//! takes the lock, runs a short busy delay and releases; seed 000 and 002).

use super::MutexWorkload;
use crate::delay::Delay;

/// One 64-byte cache line of shared data.
#[repr(align(64))]
#[derive(Clone, Copy, Debug, Default)]
pub struct Line(pub [u64; 8]);

/// The locktorture workload's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Locktorture {
    /// Shared cache lines written in every critical section (default 2).
    pub lines: usize,
    /// Extra busy work inside the critical section (default none).
    pub cs: Delay,
    /// Busy work after the critical section (default 50 iterations, about 55 ns
    /// on the reference machine).
    pub delay: Delay,
}

impl Default for Locktorture {
    fn default() -> Self {
        Locktorture {
            lines: 2,
            cs: Delay::None,
            delay: Delay::Iters(50),
        }
    }
}

impl MutexWorkload for Locktorture {
    type Shared = Vec<Line>;
    type Local = u64;
    type Req = ();

    fn shared(&self, _threads: usize) -> Vec<Line> {
        vec![Line::default(); self.lines]
    }
    fn local(&self, _thread: usize) -> u64 {
        0
    }
    #[inline]
    fn prepare(&self, _local: &mut u64) {}
    #[inline]
    fn critical(&self, shared: &mut Vec<Line>, local: &mut u64, _req: ()) {
        for line in shared.iter_mut() {
            line.0[0] = line.0[0].wrapping_add(1);
        }
        *local ^= self.cs.run();
    }
    #[inline]
    fn after(&self, local: &mut u64) {
        *local ^= self.delay.run();
    }
    fn params(&self) -> String {
        format!("lines={}, cs={}, delay={}", self.lines, self.cs, self.delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_critical_section_writes_every_line() {
        let w = Locktorture {
            lines: 3,
            ..Locktorture::default()
        };
        let mut s = w.shared(1);
        let mut l = w.local(0);
        for _ in 0..5 {
            w.prepare(&mut l);
            w.critical(&mut s, &mut l, ());
            w.after(&mut l);
        }
        assert!(s.iter().all(|line| line.0[0] == 5));
        assert_eq!(std::mem::align_of::<Line>(), 64);
    }
}
