//! A [`CombiningMutex`] combine made while the same thread waits in a combine
//! on another lock: a signal handler that combines while its thread's own
//! request is queued.
//!
//! A thread `W` combines on lock 0 with a request queued behind its own; a
//! signal makes it combine on lock 1 inside the handler while its request on
//! lock 0 is still queued, with another request queued behind it there too;
//! the handler is interrupted in turn, down to lock 4: four levels of queue
//! nodes of the global locks (qspinlock's `MAX_NODES`) and one beyond them.
//! `W` waits in two roles: as its node's combiner, waiting for the global
//! lock (its request heads its queue), and as a plain waiter, its request
//! queued behind another thread's combiner. A second check has the handler
//! combine on the very lock its thread waits on. The main thread holds every
//! lock until all of that is in place, then releases them, and every closure
//! must run exactly once. Real signals (`pthread_kill`, a handler installed
//! with `SA_NODEFER` so that it nests); the main thread waits for each state
//! through the locks' own diagnostics (their request queues' tails, their
//! global locks' tail words) and flags the handler sets, never for a time.
//! A watchdog fails the test if it hangs.

#![cfg(unix)]

use numa_spin::combining::COMBINING_QUEUES;
use numa_spin::{CombiningMutex, CombiningMutexGuard};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Locks per chain: levels 0-3 use the global locks' queue nodes, level 4
/// is beyond them.
const LEVELS: usize = 5;
/// Rounds per role.
const ROUNDS: usize = 10;

static LOCKS: [CombiningMutex<u64>; LEVELS] = [const { CombiningMutex::new(0) }; LEVELS];

/// Serializes the tests: the handler and its state are process-wide.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The level the next signal's handler combines at.
static NEXT_LEVEL: AtomicUsize = AtomicUsize::new(1);
/// The lock the handler of each level combines on.
static TARGET: [AtomicUsize; LEVELS] = [const { AtomicUsize::new(0) }; LEVELS];
/// Per level: the handler is about to combine; its combine returned.
static ENTERED: [AtomicBool; LEVELS] = [const { AtomicBool::new(false) }; LEVELS];
static DONE: [AtomicBool; LEVELS] = [const { AtomicBool::new(false) }; LEVELS];

/// How `W` waits at each level.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Role {
    /// Its request heads its queue: it is its node's combiner, waiting for
    /// the global lock.
    Combiner,
    /// Its request is queued behind another thread's, the combiner's: it
    /// waits for its closure to have run.
    Waiter,
}

/// One closure on the lock of `level`: a non-atomic increment (the closures
/// of a lock are mutually exclusive), counting the combine.
fn combine(level: usize) {
    LOCKS[level].combine(|n| *n += 1);
}

/// The signal handler: combines on the next level's lock (only atomics and
/// the lock under test).
extern "C" fn on_signal(_: libc::c_int) {
    let level = NEXT_LEVEL.fetch_add(1, Ordering::SeqCst);
    ENTERED[level].store(true, Ordering::SeqCst);
    combine(TARGET[level].load(Ordering::SeqCst));
    DONE[level].store(true, Ordering::SeqCst);
}

/// Waits until `cond` holds; after 20 s the process exits with a failure (the
/// waiting threads may hang for ever: unwinding would not end them).
fn await_state(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > Duration::from_secs(20) {
            eprintln!("nested combine hung: timed out waiting for {what}");
            std::process::exit(1);
        }
        std::thread::yield_now();
    }
}

/// The tails of the request queues of the lock of `level`.
fn tails(level: usize) -> [usize; COMBINING_QUEUES] {
    LOCKS[level].request_tails()
}

/// The tail word of the global lock of `level`, without its two flag bits.
fn global_queue(level: usize) -> u32 {
    // SAFETY: only reads the global lock's tail word; never unlocks.
    unsafe { LOCKS[level].as_mutex().raw() }
        .raw_lock()
        .tail_word()
        & !3
}

/// Starts a thread that combines on the lock of `level` once, and waits until
/// its request has entered a request queue; with `combiner`, also until it
/// (its node's combiner) has entered the global lock's queue.
fn queued_combine(level: usize, combiner: bool) -> std::thread::JoinHandle<()> {
    let before = (tails(level), global_queue(level));
    let t = std::thread::spawn(move || {
        // Every thread on one node, so that all requests share a queue.
        numa_topology::set_current_thread_node(Some(0));
        combine(level);
    });
    await_state(&format!("a request to queue at level {level}"), || {
        tails(level) != before.0
    });
    if combiner {
        await_state(&format!("a combiner to queue at level {level}"), || {
            global_queue(level) != before.1
        });
    }
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

/// Starts a round: every level's flags cleared, handler level `k`
/// (`1..LEVELS`) combining on lock `targets[k - 1]`; returns the guards of
/// every lock, its data set to 0.
fn start_round(targets: [usize; LEVELS - 1]) -> Vec<CombiningMutexGuard<'static, u64>> {
    NEXT_LEVEL.store(1, Ordering::SeqCst);
    for (level, target) in targets.into_iter().enumerate() {
        TARGET[level + 1].store(target, Ordering::SeqCst);
    }
    LOCKS
        .iter()
        .enumerate()
        .map(|(level, l)| {
            ENTERED[level].store(false, Ordering::SeqCst);
            DONE[level].store(false, Ordering::SeqCst);
            let mut g = l.lock();
            *g = 0;
            g
        })
        .collect()
}

/// Sends `SIGUSR1` to `w` and waits until its handler (level `level`) is
/// about to combine.
fn interrupt(w: &std::thread::JoinHandle<()>, level: usize, what: &str) {
    use std::os::unix::thread::JoinHandleExt as _;
    // SAFETY: `w` is running (it waits in a `combine` or in a handler), and
    // SIGUSR1 has the handler `install_handler` installed.
    let r = unsafe { libc::pthread_kill(w.as_pthread_t(), libc::SIGUSR1) };
    assert_eq!(r, 0, "pthread_kill");
    await_state(&format!("{what}: the handler of level {level}"), || {
        ENTERED[level].load(Ordering::SeqCst)
    });
}

/// Releases every lock, waits for `w` and `others`, and checks that each
/// handler level ran and each lock's closures ran `expected[level]` times.
fn finish_round(
    mut guards: Vec<CombiningMutexGuard<'static, u64>>,
    w: std::thread::JoinHandle<()>,
    others: Vec<std::thread::JoinHandle<()>>,
    handlers: usize,
    expected: [u64; LEVELS],
    what: &str,
) {
    while let Some(g) = guards.pop() {
        drop(g);
    }
    await_state(&format!("{what}: the interrupted thread to finish"), || {
        w.is_finished()
    });
    w.join().unwrap();
    for o in others {
        await_state(&format!("{what}: the other threads to finish"), || {
            o.is_finished()
        });
        o.join().unwrap();
    }
    for (level, done) in DONE.iter().enumerate().take(handlers + 1).skip(1) {
        assert!(done.load(Ordering::SeqCst), "{what}: handler level {level}");
    }
    for (level, l) in LOCKS.iter().enumerate() {
        assert_eq!(
            l.combine(|n| *n),
            expected[level],
            "{what}: closures run on lock {level}"
        );
    }
}

/// Makes `W` wait on the lock of `level` in `role`, with a request queued
/// behind its own; `w` is `None` at level 0 (W is started), otherwise `W`
/// is interrupted and its handler combines. Returns `W` and pushes the other
/// threads onto `others`.
fn wait_at(
    level: usize,
    role: Role,
    w: Option<std::thread::JoinHandle<()>>,
    others: &mut Vec<std::thread::JoinHandle<()>>,
    what: &str,
) -> std::thread::JoinHandle<()> {
    if role == Role::Waiter {
        // Another thread's request heads the queue: its node's combiner.
        others.push(queued_combine(level, true));
    }
    // W is its node's combiner (Combiner) and enters the global lock's queue
    // with a queue node of its nesting level, up to level 3; level 4 is
    // beyond its four nodes and waits without one (no tail change).
    let combiner = role == Role::Combiner && level < 4;
    let w = match w {
        None => queued_combine(level, combiner),
        Some(w) => {
            let before = (tails(level), global_queue(level));
            interrupt(&w, level, what);
            await_state(&format!("{what}: W to queue at level {level}"), || {
                tails(level) != before.0
            });
            if combiner {
                await_state(&format!("{what}: W to wait for lock {level}"), || {
                    global_queue(level) != before.1
                });
            }
            w
        }
    };
    // A request queued behind W's.
    others.push(queued_combine(level, false));
    w
}

/// `W` waits on lock 0 in `role` with a request behind its own; a signal
/// makes it combine on lock 1 in the handler, in the same role, with a
/// request behind it there too; and so on down to lock 4.
fn nested_combines(role: Role) {
    install_handler();
    for round in 0..ROUNDS {
        let what = format!("{role:?}, round {round}");
        let guards = start_round([1, 2, 3, 4]);
        let mut others = Vec::new();
        let mut w = None;
        for level in 0..LEVELS {
            w = Some(wait_at(level, role, w, &mut others, &what));
        }
        let per_lock = if role == Role::Waiter { 3 } else { 2 };
        finish_round(
            guards,
            w.expect("W"),
            others,
            LEVELS - 1,
            [per_lock; LEVELS],
            &what,
        );
    }
}

/// `W` waits on lock 0 in `role` with a request behind its own; a signal
/// makes it combine on lock 0 itself in the handler; a second signal then
/// combines on lock 1.
fn nested_combine_on_the_same_lock(role: Role) {
    install_handler();
    for round in 0..ROUNDS {
        let what = format!("{role:?} (same lock), round {round}");
        let guards = start_round([0, 1, 2, 3]);
        let mut others = Vec::new();
        let w = wait_at(0, role, None, &mut others, &what);
        interrupt(&w, 1, &what);
        let before = tails(1);
        interrupt(&w, 2, &what);
        await_state(&format!("{what}: W to queue at level 2"), || {
            tails(1) != before
        });
        let on_lock_0 = if role == Role::Waiter { 4 } else { 3 };
        finish_round(guards, w, others, 2, [on_lock_0, 1, 0, 0, 0], &what);
    }
}

#[test]
fn combines_nested_four_levels_deep_and_beyond() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    nested_combines(Role::Combiner);
    nested_combines(Role::Waiter);
}

#[test]
fn a_nested_combine_on_the_lock_its_thread_waits_on() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    nested_combine_on_the_same_lock(Role::Combiner);
    nested_combine_on_the_same_lock(Role::Waiter);
}
