//! An acquisition made while the same thread waits for another lock: a
//! signal handler that takes a lock while its thread is queued for another.
//!
//! A waiter `W` queues for lock 0 with a waiter behind it; a signal makes it
//! take lock 1 inside the handler while it is still queued for lock 0, with a
//! waiter queued behind it there too; the handler is interrupted in turn,
//! down to lock 4: four levels of queue nodes (qspinlock's `MAX_NODES`) and
//! one beyond them, which waits without a queue node. A second check has the
//! handler take the very lock its thread is queued for. The main thread holds
//! every lock until all of that is in place, then releases them, and every
//! waiter must get its lock. Real signals (`pthread_kill`, a handler
//! installed with `SA_NODEFER` so that it nests); the main thread waits for
//! each state through the locks' tail words and flags the handler sets, never
//! for a time. A watchdog fails the test if it hangs.

#![cfg(unix)]

use numa_spin::{Config, RawHqLock, RawHqMutex, RawMutex, RawQueuedMutex};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Locks per chain: levels 0-3 use queue nodes, level 4 is beyond them.
const LEVELS: usize = 5;
/// Rounds per lock type.
const ROUNDS: usize = 10;

/// A lock under test, with the raw tail word as its diagnostic.
trait Probe: Sync + 'static {
    fn tail_word(&self) -> u32;
    fn acquire(&self);
    /// # Safety
    /// The caller holds the lock.
    unsafe fn release(&self);
}
impl<const NUMA: bool, T: numa_spin::Tunables + Sync + 'static> Probe
    for numa_spin::RawLock<NUMA, T>
{
    fn tail_word(&self) -> u32 {
        numa_spin::RawLock::tail_word(self)
    }
    fn acquire(&self) {
        numa_spin::RawLock::acquire(self);
    }
    unsafe fn release(&self) {
        // SAFETY: the caller holds the lock.
        unsafe { numa_spin::RawLock::release(self) };
    }
}
impl<T: numa_spin::Tunables + Sync + 'static> Probe for RawHqLock<T> {
    fn tail_word(&self) -> u32 {
        RawHqLock::tail_word(self)
    }
    fn acquire(&self) {
        RawHqLock::acquire(self);
    }
    unsafe fn release(&self) {
        // SAFETY: the caller holds the lock.
        unsafe { RawHqLock::release(self) };
    }
}

/// HQ in NUMA mode from the first waiter.
static HQ_NUMA: Config = Config::DEFAULT.hq_switch_threshold(0);

static CNA: [RawMutex; LEVELS] = [const { RawMutex::new() }; LEVELS];
static QUEUED: [RawQueuedMutex; LEVELS] = [const { RawQueuedMutex::new() }; LEVELS];
static HQ: [RawHqMutex; LEVELS] = [const { RawHqMutex::new() }; LEVELS];
static HQ_NUMA_LOCKS: [RawHqLock<&Config>; LEVELS] =
    [const { RawHqLock::with_config(&HQ_NUMA) }; LEVELS];

/// Serializes the tests: the handler and its state are process-wide.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The chain under test: 1 CNA, 2 queued, 3 HQ, 4 HQ in NUMA mode.
static FAMILY: AtomicUsize = AtomicUsize::new(0);
/// The level the next signal's handler takes.
static NEXT_LEVEL: AtomicUsize = AtomicUsize::new(1);
/// The lock the handler of each level takes.
static TARGET: [AtomicUsize; LEVELS] = [const { AtomicUsize::new(0) }; LEVELS];
/// Per level: the handler is about to take its lock; it has taken and
/// released it.
static ENTERED: [AtomicBool; LEVELS] = [const { AtomicBool::new(false) }; LEVELS];
static DONE: [AtomicBool; LEVELS] = [const { AtomicBool::new(false) }; LEVELS];
/// Acquisitions of each level's lock in this round (a non-atomic increment
/// inside the critical section: lost updates show broken exclusion).
static COUNT: [AtomicU64; LEVELS] = [const { AtomicU64::new(0) }; LEVELS];

fn lock(level: usize) -> &'static dyn Probe {
    match FAMILY.load(Ordering::SeqCst) {
        1 => &CNA[level],
        2 => &QUEUED[level],
        3 => &HQ[level],
        _ => &HQ_NUMA_LOCKS[level],
    }
}

/// Takes and releases the lock of `level`, counting the acquisition.
fn take(level: usize) {
    let l = lock(level);
    l.acquire();
    let n = COUNT[level].load(Ordering::Relaxed);
    COUNT[level].store(n + 1, Ordering::Relaxed);
    // SAFETY: acquired above.
    unsafe { l.release() };
}

/// The signal handler: takes the next level's lock (only atomics and the
/// lock under test: async-signal-safe as far as the locks are).
extern "C" fn on_signal(_: libc::c_int) {
    let level = NEXT_LEVEL.fetch_add(1, Ordering::SeqCst);
    ENTERED[level].store(true, Ordering::SeqCst);
    take(TARGET[level].load(Ordering::SeqCst));
    DONE[level].store(true, Ordering::SeqCst);
}

/// The tail word without the two flag bits (`NO_STEAL`, `HEAD_ASLEEP`).
fn queue_of(level: usize) -> u32 {
    lock(level).tail_word() & !3
}

/// Waits until `cond` holds; after 20 s the process exits with a failure (the
/// waiter threads may hang for ever: unwinding would not end them).
fn await_state(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > Duration::from_secs(20) {
            eprintln!("nested acquisition hung: timed out waiting for {what}");
            std::process::exit(1);
        }
        std::thread::yield_now();
    }
}

/// Starts a thread that takes the lock of `level` once, and waits until it
/// has entered that lock's queue.
fn queued_waiter(level: usize) -> std::thread::JoinHandle<()> {
    let before = queue_of(level);
    let t = std::thread::spawn(move || take(level));
    await_state(&format!("a waiter to queue at level {level}"), || {
        queue_of(level) != before
    });
    t
}

/// Installs [`on_signal`] for `SIGUSR1`, nesting (`SA_NODEFER`).
fn install_handler() {
    // SAFETY: installs a handler that only uses atomics and the locks; the
    // `sigaction` struct is zeroed (empty mask) and then filled in.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_NODEFER | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
}

/// Starts a round: every level's flags and counts cleared, handler level `k`
/// (`1..LEVELS`) taking lock `targets[k - 1]`, the main thread holding every
/// lock.
fn start_round(targets: [usize; LEVELS - 1]) {
    NEXT_LEVEL.store(1, Ordering::SeqCst);
    for (level, target) in targets.into_iter().enumerate() {
        TARGET[level + 1].store(target, Ordering::SeqCst);
    }
    for level in 0..LEVELS {
        ENTERED[level].store(false, Ordering::SeqCst);
        DONE[level].store(false, Ordering::SeqCst);
        COUNT[level].store(0, Ordering::SeqCst);
        lock(level).acquire();
    }
}

/// Sends `SIGUSR1` to `w` and waits until its handler (level `level`) is
/// about to take its lock.
fn interrupt(w: &std::thread::JoinHandle<()>, level: usize, what: &str) {
    use std::os::unix::thread::JoinHandleExt as _;
    // SAFETY: `w` is running (it waits in a `lock()` or in a handler), and
    // SIGUSR1 has the handler `install_handler` installed.
    let r = unsafe { libc::pthread_kill(w.as_pthread_t(), libc::SIGUSR1) };
    assert_eq!(r, 0, "pthread_kill");
    await_state(&format!("{what}: the handler of level {level}"), || {
        ENTERED[level].load(Ordering::SeqCst)
    });
}

/// Releases every lock, waits for `w` and `others`, and checks that each
/// handler level ran and each lock was taken `expected[level]` times.
fn finish_round(
    w: std::thread::JoinHandle<()>,
    others: Vec<std::thread::JoinHandle<()>>,
    handlers: usize,
    expected: [u64; LEVELS],
    what: &str,
) {
    for level in (0..LEVELS).rev() {
        // SAFETY: `start_round` acquired every lock.
        unsafe { lock(level).release() };
    }
    await_state(&format!("{what}: the interrupted thread to finish"), || {
        w.is_finished()
    });
    w.join().unwrap();
    for o in others {
        await_state(&format!("{what}: the other waiters to finish"), || {
            o.is_finished()
        });
        o.join().unwrap();
    }
    for (level, done) in DONE.iter().enumerate().take(handlers + 1).skip(1) {
        assert!(done.load(Ordering::SeqCst), "{what}: handler level {level}");
    }
    for (level, count) in COUNT.iter().enumerate() {
        assert_eq!(
            count.load(Ordering::SeqCst),
            expected[level],
            "{what}: acquisitions of lock {level}"
        );
    }
}

/// Thread `W` queues for lock 0 with a waiter behind it; a signal makes it
/// take lock 1 in the handler, with a waiter behind it there too; and so on
/// down to lock 4, the level beyond the thread's four queue nodes.
fn nested_acquisitions(family: usize, name: &str) {
    FAMILY.store(family, Ordering::SeqCst);
    install_handler();
    for round in 0..ROUNDS {
        let what = format!("{name}, round {round}");
        start_round([1, 2, 3, 4]);
        let w = queued_waiter(0);
        let mut others = vec![queued_waiter(0)];
        for level in 1..LEVELS {
            let before = queue_of(level);
            interrupt(&w, level, &what);
            if level < 4 {
                // Inside the handler W queues for this level's lock while still
                // queued for the levels below.
                await_state(&format!("{what}: W to queue at level {level}"), || {
                    queue_of(level) != before
                });
            }
            others.push(queued_waiter(level));
        }
        finish_round(w, others, LEVELS - 1, [2; LEVELS], &what);
    }
}

/// Thread `W` queues for lock 0 with a waiter behind it; a signal makes it
/// take lock 0 itself in the handler (it waits without a queue node, since
/// its node is queued ahead of it); a second signal then takes lock 1.
fn nested_acquisition_of_the_same_lock(family: usize, name: &str) {
    FAMILY.store(family, Ordering::SeqCst);
    install_handler();
    for round in 0..ROUNDS {
        let what = format!("{name} (same lock), round {round}");
        start_round([0, 1, 2, 3]);
        let w = queued_waiter(0);
        let others = vec![queued_waiter(0)];
        interrupt(&w, 1, &what);
        let before = queue_of(1);
        interrupt(&w, 2, &what);
        await_state(&format!("{what}: W to queue at level 2"), || {
            queue_of(1) != before
        });
        finish_round(w, others, 2, [3, 1, 0, 0, 0], &what);
    }
}

#[test]
fn every_lock_takes_nested_acquisitions_four_levels_deep_and_beyond() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (family, name) in [(1, "CNA"), (2, "queued"), (3, "HQ"), (4, "HQ (NUMA mode)")] {
        nested_acquisitions(family, name);
    }
}

#[test]
fn every_lock_takes_a_nested_acquisition_of_the_lock_its_thread_waits_for() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (family, name) in [(1, "CNA"), (2, "queued"), (3, "HQ"), (4, "HQ (NUMA mode)")] {
        nested_acquisition_of_the_same_lock(family, name);
    }
}
