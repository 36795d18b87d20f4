//! A queue head alone in the queue empties it while a timed waiter forbids
//! stealing: the head's tail CAS (`code | flags` -> 0) fails on the flags alone
//! when the timed waiter's `NO_STEAL` lands between the head's load of the tail
//! and its CAS, and must then be retried. A head that took that failure for a
//! successor's swap would wait for a link that never comes, holding the lock:
//! every later acquisition hangs.
//!
//! One thread loops `lock()` / `unlock()`, another loops `try_lock_for`: the
//! `lock()` caller finds the lock held by the timed waiter, queues alone and
//! becomes head; once it holds the lock it lifts `NO_STEAL` (a timed waiter's
//! mark, `HeadWait::acquired`) and empties the queue, while the timed waiter,
//! past a 1 ns steal bound and polling, sets `NO_STEAL` again whenever it finds
//! it lifted. The window is a few nanoseconds, so the test loops until the
//! head has emptied the queue many times. A watchdog fails the test when the
//! `lock()` loop stops making progress (instead of hanging the test run).
//!
//! With the retry removed (`cna.rs` `pass_headship`, `hq/plain.rs`
//! `pass_plain`: one CAS, then the wait for a link), 12 of 12 runs of this
//! file failed on the 2-CPU development machine (debug build, other builds
//! running beside it): CNA hung in 12 runs, HQ in 10, the queued lock in 7,
//! after 128 to 15 million `lock()` acquisitions; with the retry, 12 of 12
//! passed. The loom models `lone_head_empties_the_queue_beside_a_timed_waiter_*`
//! (`tests/loom.rs`) check the same interleaving exhaustively.
#![cfg(not(numa_loom))]

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use numa_spin::{Config, RawHqLock, RawLock};

/// A finite nonzero steal bound as short as it gets: the timed waiter claims
/// at its first poll, the head forbids stealing at its first look. The spin
/// budget keeps both on their CPUs (no naps, no yields) so they race.
static CFG: Config = Config::DEFAULT
    .steal_bound_ns(1)
    .spin_budget_ns(1_000_000)
    // HQ stays in plain queued mode (the mode with the queue-emptying CAS).
    .hq_switch_threshold(u32::MAX);

/// How long the `lock()` loop runs.
const RUN: Duration = Duration::from_secs(3);
/// No acquisition by the `lock()` loop for this long is a hang.
const STALL: Duration = Duration::from_secs(5);

/// The tests of this file race two threads on the machine's CPUs: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

trait Lock: Sync {
    fn lock(&self);
    fn try_lock_for(&self, timeout: Duration) -> bool;
    /// # Safety
    /// Held by the caller.
    unsafe fn unlock(&self);
}

impl<const NUMA: bool> Lock for RawLock<NUMA, &'static Config> {
    fn lock(&self) {
        self.acquire();
    }
    fn try_lock_for(&self, timeout: Duration) -> bool {
        self.try_acquire_for(timeout)
    }
    unsafe fn unlock(&self) {
        // SAFETY: forwarded contract.
        unsafe { self.release() }
    }
}

impl Lock for RawHqLock<&'static Config> {
    fn lock(&self) {
        self.acquire();
    }
    fn try_lock_for(&self, timeout: Duration) -> bool {
        self.try_acquire_for(timeout)
    }
    unsafe fn unlock(&self) {
        // SAFETY: forwarded contract.
        unsafe { self.release() }
    }
}

/// The addresses of what the tests leak on purpose (their locks and flags
/// outlive a loop that may hang), kept in a static so that LeakSanitizer
/// sees them reachable.
static KEPT: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// `Box::leak`, kept reachable (see [`KEPT`]).
fn leak<T>(v: T) -> &'static T {
    let r: &'static T = Box::leak(Box::new(v));
    KEPT.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(r as *const T as usize);
    r
}

/// Runs the `lock()` loop and the `try_lock_for` loop on a leaked `lock`
/// (a hung head keeps holding it) for `RUN`; panics if the `lock()` loop
/// stalls for `STALL`.
fn lone_head_beside_timed_waiter(name: &str, lock: &'static dyn Lock) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Leaked, as the lock: threads of a hung run stay behind.
    let done: &'static AtomicBool = leak(AtomicBool::new(false));
    let rounds: &'static AtomicU64 = leak(AtomicU64::new(0));
    let timed_wins: &'static AtomicU64 = leak(AtomicU64::new(0));
    let started = Instant::now();
    let looper = std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) && started.elapsed() < RUN {
            for _ in 0..64 {
                lock.lock();
                // SAFETY: acquired above.
                unsafe { lock.unlock() };
            }
            rounds.fetch_add(64, Ordering::Relaxed);
        }
        done.store(true, Ordering::Relaxed);
    });
    let timed = std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            if lock.try_lock_for(Duration::from_millis(1)) {
                timed_wins.fetch_add(1, Ordering::Relaxed);
                // Hold the lock briefly, so the `lock()` caller queues.
                for _ in 0..20 {
                    std::hint::spin_loop();
                }
                // SAFETY: acquired above.
                unsafe { lock.unlock() };
            }
        }
    });
    let mut last = (0, Instant::now());
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        let now = rounds.load(Ordering::Relaxed);
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() >= STALL {
            // Let the timed loop end (it times out every millisecond); the
            // `lock()` loop stays behind, blocked on the lock.
            done.store(true, Ordering::Relaxed);
            let _ = timed.join();
            panic!(
                "{name}: the lock() loop made no progress for {STALL:?} after {now} \
                 acquisitions beside a timed waiter ({} timed wins): a queue head \
                 waits for a link that never comes, holding the lock",
                timed_wins.load(Ordering::Relaxed)
            );
        }
    }
    looper.join().unwrap();
    timed.join().unwrap();
    eprintln!(
        "{name}: {} lock() acquisitions, {} timed wins, {:?}",
        rounds.load(Ordering::Relaxed),
        timed_wins.load(Ordering::Relaxed),
        started.elapsed()
    );
    assert!(
        timed_wins.load(Ordering::Relaxed) > 0,
        "{name}: the timed waiter never won, so the lock() caller may never have queued"
    );
}

#[test]
fn cna_lone_head_empties_the_queue_beside_a_timed_waiter() {
    let lock: &'static RawLock<true, &'static Config> = leak(RawLock::with_config(&CFG));
    lone_head_beside_timed_waiter("cna", lock);
}

#[test]
fn queued_lone_head_empties_the_queue_beside_a_timed_waiter() {
    let lock: &'static RawLock<false, &'static Config> = leak(RawLock::with_config(&CFG));
    lone_head_beside_timed_waiter("queued", lock);
}

#[test]
fn hq_lone_head_empties_the_queue_beside_a_timed_waiter() {
    let lock: &'static RawHqLock<&'static Config> = leak(RawHqLock::with_config(&CFG));
    lone_head_beside_timed_waiter("hq", lock);
}
