//! `fork(2)` while numa-spin locks are contended: every lock must work in the
//! child.
//!
//! The POSIX `pthread_atfork` pattern (a library's prepare handler locks its
//! mutex, the parent and child handlers unlock it) forks while other threads
//! wait for that mutex. Their queue nodes stay in the lock's queue in the
//! child, where those threads do not exist. The child then unlocks the lock,
//! takes it again and contends for it with two new threads: none of them may
//! wait behind a waiter that exists only in the parent. A lock held by a
//! thread that does not exist in the child stays held, as glibc's mutexes do.
//!
//! Each check forks several times per lock (CNA, the queued lock, HQ in plain
//! and in NUMA mode); the child runs under `alarm(10)`, so a hang ends it with
//! `SIGALRM`, and the parent checks its exit status.

#![cfg(unix)]

use lock_api::RawMutex as _;
use numa_spin::{Config, RawHqLock, RawHqMutex, RawMutex, RawQueuedMutex};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

mod common;
use common::await_state;

/// Forks per lock and scenario.
const FORKS: usize = 4;
/// Threads that wait in the parent when it forks.
const PARENT_WAITERS: usize = 3;
/// Threads that contend in the child (the forking thread and two new ones).
const CHILD_THREADS: usize = 3;
/// Acquisitions per child thread.
const CHILD_ROUNDS: u64 = 2_000;

/// A lock under test, with the raw tail word as its diagnostic.
trait Probe: Sync + 'static {
    fn tail_word(&self) -> u32;
    fn acquire(&self);
    fn try_acquire(&self) -> bool;
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
    fn try_acquire(&self) -> bool {
        numa_spin::RawLock::try_acquire(self)
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
    fn try_acquire(&self) -> bool {
        RawHqLock::try_acquire(self)
    }
    unsafe fn release(&self) {
        // SAFETY: the caller holds the lock.
        unsafe { RawHqLock::release(self) };
    }
}

/// HQ in NUMA mode from the first waiter, so the child inherits a lock bound
/// to pool metadata.
static HQ_NUMA: Config = Config::DEFAULT.hq_switch_threshold(0);

/// Serializes the tests: each forks, and the atfork handlers are process-wide.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The tail word without the two flag bits (`NO_STEAL`, `HEAD_ASLEEP`).
fn queue_of(lock: &dyn Probe) -> u32 {
    lock.tail_word() & !3
}

/// Starts a thread that takes `lock` once, and waits until it has entered the
/// lock's queue (the tail word changed).
fn queued_waiter(lock: &'static dyn Probe) -> std::thread::JoinHandle<()> {
    let before = queue_of(lock);
    let t = std::thread::spawn(move || {
        lock.acquire();
        // SAFETY: acquired above.
        unsafe { lock.release() };
    });
    await_state("a waiter to enter the queue", || queue_of(lock) != before);
    t
}

/// In the child: the forking thread and `CHILD_THREADS - 1` new threads
/// take `lock` `CHILD_ROUNDS` times each; true if every acquisition was
/// exclusive.
fn contend_in_child_dyn(lock: &'static dyn Probe) -> bool {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    COUNT.store(0, Ordering::Relaxed);
    let work = move || {
        for _ in 0..CHILD_ROUNDS {
            lock.acquire();
            // A non-atomic increment: lost updates show broken exclusion.
            let n = COUNT.load(Ordering::Relaxed);
            std::hint::spin_loop();
            COUNT.store(n + 1, Ordering::Relaxed);
            // SAFETY: acquired above.
            unsafe { lock.release() };
        }
    };
    // Hold the lock until a new thread has queued for it, so that the child
    // certainly queues where the parent's waiters were.
    lock.acquire();
    let before = queue_of(lock);
    let threads: Vec<_> = (1..CHILD_THREADS)
        .map(|_| std::thread::spawn(work))
        .collect();
    await_state("a child thread to queue", || queue_of(lock) != before);
    // SAFETY: acquired above.
    unsafe { lock.release() };
    work();
    for t in threads {
        if t.join().is_err() {
            return false;
        }
    }
    COUNT.load(Ordering::Relaxed) == CHILD_ROUNDS * CHILD_THREADS as u64
}

/// Waits for the child `pid` and asserts that it exited with status 0.
fn expect_child_ok(pid: libc::pid_t, what: &str) {
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "waitpid failed");
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        panic!(
            "{what}: the child was killed by signal {sig}{}",
            if sig == libc::SIGALRM {
                " (SIGALRM: it hung)"
            } else {
                ""
            }
        );
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{what}: the child exited with status {status:#x}"
    );
}

/// In a fork's child: holds `lock` while `PARENT_WAITERS` new threads queue
/// for it, forks again, and checks that the grandchild can take `lock` and
/// contend for it (its queue names waiters of two generations back and of
/// the child). True if the grandchild exited with status 0.
fn fork_again_in_child(lock: &'static dyn Probe) -> bool {
    lock.acquire();
    let waiters: Vec<_> = (0..PARENT_WAITERS).map(|_| queued_waiter(lock)).collect();
    // SAFETY: as for the first fork.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: plain libc calls in the grandchild.
        unsafe { libc::alarm(10) };
        // SAFETY: the forking thread held `lock` at the fork.
        unsafe { lock.release() };
        let ok = contend_in_child_dyn(lock);
        // SAFETY: ends the grandchild at once.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    // SAFETY: acquired above.
    unsafe { lock.release() };
    for w in waiters {
        if w.join().is_err() {
            return false;
        }
    }
    let mut status = 0;
    // SAFETY: `pid` is our child (or -1, which `waitpid` rejects); `status` is
    // a valid out-pointer.
    pid > 0
        && unsafe { libc::waitpid(pid, &mut status, 0) } == pid
        && libc::WIFEXITED(status)
        && libc::WEXITSTATUS(status) == 0
}

/// Holds `lock` while `PARENT_WAITERS` threads queue for it, and `other`
/// held by a thread that then waits; forks; the parent and the child each
/// unlock `lock`. The child takes `lock` again and contends for it with two
/// new threads, and finds `other` still held (its holder does not exist in
/// the child); after the last fork it forks a grandchild the same way.
fn fork_with_waiters(lock: &'static dyn Probe, other: &'static dyn Probe, name: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for round in 0..FORKS {
        lock.acquire();
        let waiters: Vec<_> = (0..PARENT_WAITERS).map(|_| queued_waiter(lock)).collect();
        // A thread that holds `other` across the fork.
        static HELD: AtomicBool = AtomicBool::new(false);
        static RELEASE: AtomicBool = AtomicBool::new(false);
        HELD.store(false, Ordering::SeqCst);
        RELEASE.store(false, Ordering::SeqCst);
        let holder = std::thread::spawn(move || {
            other.acquire();
            HELD.store(true, Ordering::SeqCst);
            while !RELEASE.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            // SAFETY: acquired above.
            unsafe { other.release() };
        });
        await_state("the holder of the other lock", || {
            HELD.load(Ordering::SeqCst)
        });

        // SAFETY: fork in a multi-threaded process; the child calls `alarm`,
        // the locks under test, `std::thread` and `_exit` (glibc's allocator
        // is fork-safe).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: plain libc calls in the child.
            unsafe { libc::alarm(10) };
            // SAFETY: the forking thread held `lock` at the fork.
            unsafe { lock.release() };
            // The forking thread takes it again, then contends; `other` stays
            // held by a thread the child does not have.
            lock.acquire();
            // SAFETY: acquired just above.
            unsafe { lock.release() };
            let mut ok = contend_in_child_dyn(lock) && !other.try_acquire();
            if round == FORKS - 1 {
                // A second generation: the child forks while its own threads
                // wait, and the grandchild must find them gone too.
                ok = ok && fork_again_in_child(lock);
            }
            // SAFETY: ends the child without running the test harness's exit.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        // SAFETY: acquired above.
        unsafe { lock.release() };
        RELEASE.store(true, Ordering::SeqCst);
        for w in waiters {
            w.join().unwrap();
        }
        holder.join().unwrap();
        expect_child_ok(pid, &format!("{name}, fork {round}"));
    }
}

/// The lock the process-wide atfork handlers take: `atfork_lock(i)` while
/// `ATFORK` is `i` (0: none).
static ATFORK: AtomicUsize = AtomicUsize::new(0);
static ATFORK_CNA: RawMutex = RawMutex::INIT;
static ATFORK_QUEUED: RawQueuedMutex = RawQueuedMutex::INIT;
static ATFORK_HQ: RawHqMutex = RawHqMutex::INIT;
static ATFORK_HQ_NUMA: RawHqLock<&Config> = RawHqLock::with_config(&HQ_NUMA);

/// The lock of `ATFORK`, as a probe.
fn atfork_lock(i: usize) -> Option<&'static dyn Probe> {
    match i {
        1 => Some(&ATFORK_CNA),
        2 => Some(&ATFORK_QUEUED),
        3 => Some(&ATFORK_HQ),
        4 => Some(&ATFORK_HQ_NUMA),
        _ => None,
    }
}

/// The prepare handler: locks the library's mutex.
extern "C" fn atfork_prepare() {
    if let Some(l) = atfork_lock(ATFORK.load(Ordering::SeqCst)) {
        l.acquire();
    }
}

/// The parent and child handlers: unlock it.
extern "C" fn atfork_unlock() {
    if let Some(l) = atfork_lock(ATFORK.load(Ordering::SeqCst)) {
        // SAFETY: `atfork_prepare` locked it before the fork, in this thread.
        unsafe { l.release() };
    }
}

/// The `pthread_atfork` pattern: a prepare handler that locks the `i`th
/// atfork lock, parent and child handlers that unlock it, and forks while
/// `PARENT_WAITERS` threads keep taking it; the child takes it again and
/// contends for it with two new threads.
fn fork_in_atfork_handlers(i: usize, name: &str) {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    REGISTER.call_once(|| {
        // SAFETY: the handlers are `extern "C" fn()`s that live forever.
        let r = unsafe {
            libc::pthread_atfork(
                Some(atfork_prepare),
                Some(atfork_unlock),
                Some(atfork_unlock),
            )
        };
        assert_eq!(r, 0, "pthread_atfork failed");
    });
    let lock = atfork_lock(i).expect("an atfork lock");
    for round in 0..FORKS {
        static STOP: AtomicBool = AtomicBool::new(false);
        STOP.store(false, Ordering::SeqCst);
        let before = lock.tail_word();
        let hammers: Vec<_> = (0..PARENT_WAITERS)
            .map(|_| {
                std::thread::spawn(move || {
                    let lock = atfork_lock(i).expect("an atfork lock");
                    while !STOP.load(Ordering::SeqCst) {
                        lock.acquire();
                        std::thread::yield_now();
                        // SAFETY: acquired above.
                        unsafe { lock.release() };
                    }
                })
            })
            .collect();
        // The hammering threads queue up (on 2 CPUs, each holder yields).
        await_state("contention", || lock.tail_word() & !3 != before & !3);
        ATFORK.store(i, Ordering::SeqCst);
        // SAFETY: fork in a multi-threaded process; the child calls `alarm`,
        // the locks under test, `std::thread` and `_exit` (glibc's allocator
        // is fork-safe).
        let pid = unsafe { libc::fork() };
        ATFORK.store(0, Ordering::SeqCst);
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: plain libc calls in the child.
            unsafe { libc::alarm(10) };
            let ok = contend_in_child_dyn(lock);
            // SAFETY: ends the child without running the test harness's exit.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        STOP.store(true, Ordering::SeqCst);
        for h in hammers {
            h.join().unwrap();
        }
        expect_child_ok(pid, &format!("{name} (atfork handlers), fork {round}"));
    }
}

#[test]
fn cna_works_in_the_child_after_a_fork_with_waiters() {
    static L: RawMutex = RawMutex::INIT;
    static OTHER: RawMutex = RawMutex::INIT;
    fork_with_waiters(&L, &OTHER, "CNA");
}

#[test]
fn queued_lock_works_in_the_child_after_a_fork_with_waiters() {
    static L: RawQueuedMutex = RawQueuedMutex::INIT;
    static OTHER: RawQueuedMutex = RawQueuedMutex::INIT;
    fork_with_waiters(&L, &OTHER, "queued");
}

#[test]
fn hq_works_in_the_child_after_a_fork_with_waiters() {
    static L: RawHqMutex = RawHqMutex::INIT;
    static OTHER: RawHqMutex = RawHqMutex::INIT;
    fork_with_waiters(&L, &OTHER, "HQ");
}

#[test]
fn hq_in_numa_mode_works_in_the_child_after_a_fork_with_waiters() {
    static L: RawHqLock<&Config> = RawHqLock::with_config(&HQ_NUMA);
    static OTHER: RawHqLock<&Config> = RawHqLock::with_config(&HQ_NUMA);
    fork_with_waiters(&L, &OTHER, "HQ (NUMA mode)");
}

#[test]
fn every_lock_works_in_the_child_of_a_fork_in_atfork_handlers() {
    for (i, name) in [(1, "CNA"), (2, "queued"), (3, "HQ"), (4, "HQ (NUMA mode)")] {
        fork_in_atfork_handlers(i, name);
    }
}
