//! The HQ lock's plain queued mode: qspinlock's single MCS queue with its tail
//! in the tail word, as [`RawQueuedMutex`](crate::RawQueuedMutex), until
//! contention is detected or while the pool is exhausted.

use super::pool::pool;
use super::{
    CODE_SHIFT, END_OF_CHAIN, GLOBAL_HEAD, GO, META_MASK, META_SHIFT, RawHqLock, SWITCH_RETRY,
};
use crate::config::{Config, Tunables};
use crate::node::{self, Me, registry};
use crate::sync::{self, Ordering};
use crate::word::TAIL_FLAGS;

impl<T: Tunables> RawHqLock<T> {
    /// Plain queued mode: qspinlock's MCS queue (as `RawQueuedMutex`).
    pub(super) fn lock_plain(&self, me: Me, pred: u32, cfg: &Config) {
        let mut k = 0;
        if pred != 0 {
            // Release: our node's initialization happens-before the head that
            // follows this link (Acquire) writes our `locked`.
            registry().node(pred).next.store(me.code, Ordering::Release);
            k = node::wait_signal(&me.node.locked, cfg) - GLOBAL_HEAD;
        }
        self.wait_for_lock(cfg);
        self.pass_plain(me, k, cfg);
    }

    /// We hold the lock as the plain queue's head after `k` hand-offs of the
    /// queue: switch to NUMA mode if contention is detected, then make the next
    /// waiter head or empty the queue.
    fn pass_plain(&self, me: Me, k: u32, cfg: &Config) {
        let sw = cfg.hq_switch_threshold;
        if sw != 0 && k >= sw && (k - sw).is_multiple_of(SWITCH_RETRY) {
            self.try_switch(me);
        }
        let mut next = me.node.next.load(Ordering::Acquire);
        if next == 0 {
            let mut cur = self.tail.load(Ordering::Relaxed);
            // Relaxed CAS (CNA's argument): an empty tail publishes no node; the
            // next thread to enqueue finds no predecessor and touches nothing of
            // ours. Clears the flags with the queue. A failure on the flags
            // alone is retried (a timed waiter sets `NO_STEAL` at any moment,
            // see `crate::timed`).
            while cur & !TAIL_FLAGS == me.code << CODE_SHIFT {
                match self
                    .tail
                    .compare_exchange(cur, 0, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => return,
                    Err(seen) => {
                        if seen & !TAIL_FLAGS == me.code << CODE_SHIFT {
                            sync::event("empty-cas-retry");
                        }
                        cur = seen;
                    }
                }
            }
            // A waiter swapped the tail and will link to us, or the lock switched
            // to NUMA mode with us last (END_OF_CHAIN). Acquire inside.
            next = node::wait_link(&me.node.next, cfg);
        }
        if next == END_OF_CHAIN {
            // The plain queue ends with us; drop its reference to the metadata.
            // Relaxed: the switch CAS happens-before our head-ship (see
            // `try_switch`), so the NUMA word is visible; the word stays bound to
            // the same metadata while the reference we drop is counted.
            let t = self.tail.load(Ordering::Relaxed);
            sync::trace(|| format!("end of the plain queue, tail {t:#x}"));
            let m = (t >> META_SHIFT) & META_MASK;
            // Open the NUMA side's gate (Release inside; we hold the lock, so
            // its global head gets `locked` only after our release anyway).
            self.pass_head_ship(&pool().meta(m).gate, GO);
            self.leave(m);
            return;
        }
        // Release inside: the lock's history to the new head.
        let k = (k + 1).min(u32::MAX - GLOBAL_HEAD);
        self.pass_head_ship(&registry().node(next).locked, GLOBAL_HEAD + k);
    }
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use super::*;
    use crate::head_tests::queue_tail_reader;
    use crate::word::NO_STEAL;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// With a steal bound of 0 (strict FIFO) the first waiter's enqueue forbids
    /// stealing at once and the next enqueue keeps it forbidden; with a bound
    /// it has not reached, the global head does not forbid it.
    #[test]
    fn strict_fifo_forbids_stealing_from_the_first_enqueue_only() {
        static STRICT: Config = Config::DEFAULT
            .steal_bound_ns(0)
            .spin_budget_ns(60_000_000_000);
        static BOUND_60S: Config = Config::DEFAULT
            .steal_bound_ns(60_000_000_000)
            .spin_budget_ns(60_000_000_000);
        for (cfg, strict) in [(&STRICT, true), (&BOUND_60S, false)] {
            let lock = Arc::new(RawHqLock::with_config(cfg));
            lock.acquire();
            let mut codes = Vec::new();
            // The first enqueue sets NO_STEAL in strict mode, and a second
            // one must keep it.
            let waiters = [
                queue_tail_reader(&lock, &mut codes),
                queue_tail_reader(&lock, &mut codes),
            ];
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(100) {
                assert_eq!(
                    lock.tail.load(Ordering::SeqCst) & NO_STEAL != 0,
                    strict,
                    "NO_STEAL with steal bound {}",
                    cfg.steal_bound_ns
                );
                std::thread::yield_now();
            }
            // SAFETY: acquired above.
            unsafe { lock.release() };
            for w in waiters {
                w.join().unwrap();
            }
        }
    }
}
