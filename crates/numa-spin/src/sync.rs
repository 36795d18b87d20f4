//! Crate-private synchronization shim: every atomic, spin, yield, clock read,
//! thread-local and node lookup of the lock goes through this module, so that
//! building with `RUSTFLAGS="--cfg numa_loom"` swaps them for [loom]'s models.
//!
//! Under loom:
//! - atomics, `UnsafeCell`, `spin_loop`, `yield_now` and `thread_local!` are loom's
//!   (loom's scheduler is not fair, so [`spin_loop`] yields);
//! - [`current_node`] returns the node the test assigned to the current loom thread
//!   with `set_loom_node` (0 by default);
//! - [`now_ns`] is a per-thread logical clock that advances by `LOOM_TICK_NS` on
//!   every read, so time-based decisions are deterministic and need no loom state.
//!
//! With `--cfg numa_shuttle` as well, the model checker is [shuttle] instead of
//! loom (randomized schedules of many threads and operations; sequentially
//! consistent, so it hunts logic bugs such as lost waiters while loom hunts
//! ordering bugs); `UnsafeCell` is then the plain one.
//!
//! [loom]: https://docs.rs/loom
//! [shuttle]: https://docs.rs/shuttle

/// The model checker behind `--cfg numa_loom`: loom, or shuttle with
/// `--cfg numa_shuttle` too (the same `sync`, `thread`, `thread_local!` and
/// `lazy_static!` API as far as this crate uses them).
#[cfg(all(numa_loom, not(numa_shuttle)))]
pub(crate) use loom as model;
#[cfg(all(numa_loom, numa_shuttle))]
pub(crate) use shuttle as model;

#[cfg(numa_loom)]
pub(crate) use model::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
#[cfg(numa_loom)]
pub(crate) use model::thread_local;
#[cfg(not(numa_loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
#[cfg(not(numa_loom))]
pub(crate) use std::thread_local;

#[cfg(all(feature = "stats", not(numa_loom)))]
pub(crate) use std::sync::atomic::AtomicU64;

#[cfg(all(feature = "stats", numa_loom))]
pub(crate) use model::sync::atomic::AtomicU64;

/// `UnsafeCell` with loom's closure API (`with`, `with_mut`), so loom can check
/// that the accesses to the queue nodes' hand-off fields never race.
#[cfg(all(numa_loom, not(numa_shuttle)))]
pub(crate) use loom::cell::UnsafeCell;

/// `UnsafeCell` with loom's closure API (`with`, `with_mut`).
#[cfg(any(not(numa_loom), numa_shuttle))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(any(not(numa_loom), numa_shuttle))]
impl<T> UnsafeCell<T> {
    /// Wraps `value`.
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Calls `f` with a shared raw pointer to the value.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Calls `f` with a mutable raw pointer to the value.
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// One step of a busy wait: the CPU's spin-loop hint (x86 `PAUSE`, about 25 ns on
/// the development machine, a few ns on others). Under loom: a yield.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(numa_loom)]
    model::thread::yield_now();
    #[cfg(not(numa_loom))]
    std::hint::spin_loop();
}

/// Gives the CPU to another runnable thread (`sched_yield`).
#[inline]
pub(crate) fn yield_now() {
    #[cfg(numa_loom)]
    model::thread::yield_now();
    #[cfg(not(numa_loom))]
    std::thread::yield_now();
}

/// Sleeps about `ns` (`nanosleep`; the kernel's timer slack, 50 us by default
/// on Linux, can lengthen it). Under the model checkers a yield.
#[inline]
pub(crate) fn sleep_ns(ns: u64) {
    #[cfg(numa_loom)]
    {
        let _ = ns;
        model::thread::yield_now();
    }
    #[cfg(not(numa_loom))]
    std::thread::sleep(std::time::Duration::from_nanos(ns));
}

pub(crate) use futex::{park, unpark_one};

/// Park and unpark on a queue node's word, where the OS has a futex-style wait
/// (`atomic-wait`: futex on Linux, Android and FreeBSD, `__ulock` on Apple
/// systems, `WaitOnAddress` on Windows): no allocation, no lock, no table.
#[cfg(all(
    not(numa_loom),
    any(
        target_os = "linux",
        target_os = "android",
        target_os = "freebsd",
        target_os = "macos",
        target_os = "ios",
        target_os = "watchos",
        windows
    )
))]
mod futex {
    use super::AtomicU32;

    /// Sleeps while `word` holds `value`; may return spuriously (callers
    /// re-check).
    #[inline]
    pub(crate) fn park(word: &AtomicU32, value: u32) {
        atomic_wait::wait(word, value);
    }

    /// Wakes one thread parked on `word`. Harmless if nobody sleeps there, or
    /// if the word has been reused or freed: a raw pointer, because the word
    /// may be gone by now (the waiter returns as soon as it sees the value
    /// swapped in before the wake-up); only its address is used.
    #[inline]
    pub(crate) fn unpark_one(word: *const AtomicU32) {
        atomic_wait::wake_one(word);
    }
}

/// Elsewhere "parking" is a yield.
#[cfg(all(
    not(numa_loom),
    not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "freebsd",
        target_os = "macos",
        target_os = "ios",
        target_os = "watchos",
        windows
    ))
))]
mod futex {
    use super::AtomicU32;

    /// A yield (there is no futex-style wait here).
    #[inline]
    pub(crate) fn park(_word: &AtomicU32, _value: u32) {
        super::yield_now();
    }

    /// Nothing to wake.
    #[inline]
    pub(crate) fn unpark_one(_word: *const AtomicU32) {}
}

/// Under loom and shuttle: a futex model, so the models see a parked waiter
/// that nobody wakes as a deadlock. Like the kernel's futex, `park` checks the
/// word and queues itself under one lock (the "hash bucket"), and `unpark_one`
/// dequeues under it, so a wake that comes after the check finds the waiter.
#[cfg(numa_loom)]
mod futex {
    use super::AtomicU32;
    use super::model;

    model::lazy_static! {
        static ref BUCKET: model::sync::Mutex<Vec<(usize, model::thread::Thread)>> =
            model::sync::Mutex::new(Vec::new());
    }

    /// Locks the bucket by `try_lock` and yield: a thread blocked inside the
    /// model's `Mutex::lock` must not be the target of `Thread::unpark`.
    fn bucket() -> model::sync::MutexGuard<'static, Vec<(usize, model::thread::Thread)>> {
        loop {
            if let Ok(g) = BUCKET.try_lock() {
                return g;
            }
            model::thread::yield_now();
        }
    }

    /// Sleeps while `word` holds `value` (checked under the bucket lock).
    pub(crate) fn park(word: &AtomicU32, value: u32) {
        let key = word as *const AtomicU32 as usize;
        {
            let mut b = bucket();
            // Relaxed: the bucket lock orders this check after a waker's swap
            // that came first, as the kernel's bucket lock does for futexes.
            if word.load(super::Ordering::Relaxed) != value {
                return;
            }
            b.push((key, model::thread::current()));
        }
        model::thread::park();
        let mut b = bucket();
        if let Some(i) = b
            .iter()
            .position(|(k, t)| *k == key && t.id() == model::thread::current().id())
        {
            b.remove(i);
        }
    }

    /// Wakes one thread parked on `word` (only its address is used).
    pub(crate) fn unpark_one(word: *const AtomicU32) {
        let key = word as usize;
        let mut b = bucket();
        if let Some(i) = b.iter().position(|(k, _)| *k == key) {
            b.remove(i).1.unpark();
        }
    }
}

/// The (possibly virtual) NUMA node of the calling thread
/// ([`numa_topology::current_node`]); a stale answer costs performance only.
#[cfg(not(numa_loom))]
#[inline]
pub(crate) fn current_node() -> u32 {
    crate::lazy::lazy_read();
    // Node indices are OS indices (< 2^16 on Linux); saturate rather than wrap.
    u32::try_from(numa_topology::current_node()).unwrap_or(u32::MAX)
}

/// Monotonic time in ns ([`numa_topology::monotonic_ns`]: fork-safe, no
/// epoch to initialize).
#[cfg(not(numa_loom))]
#[inline]
pub(crate) fn now_ns() -> u64 {
    numa_topology::monotonic_ns()
}

/// How far the loom logical clock advances per read, in (logical) ns.
#[cfg(numa_loom)]
pub const LOOM_TICK_NS: u64 = 1_000;

#[cfg(numa_loom)]
model::thread_local! {
    static LOOM_NODE: std::cell::Cell<u32> = std::cell::Cell::new(0);
    static LOOM_CLOCK: std::cell::Cell<u64> = std::cell::Cell::new(0);
}

/// Under loom: the node assigned with [`set_loom_node`] to the current loom thread.
#[cfg(numa_loom)]
pub(crate) fn current_node() -> u32 {
    LOOM_NODE.with(std::cell::Cell::get)
}

/// Under loom: assigns the current loom thread to virtual node `node`.
#[cfg(numa_loom)]
pub fn set_loom_node(node: u32) {
    LOOM_NODE.with(|n| n.set(node));
}

/// Under loom: a per-thread logical clock advancing [`LOOM_TICK_NS`] per read.
#[cfg(numa_loom)]
pub(crate) fn now_ns() -> u64 {
    LOOM_CLOCK.with(|c| {
        let t = c.get() + LOOM_TICK_NS;
        c.set(t);
        t
    })
}

#[cfg(numa_loom)]
std::thread_local! {
    // std thread-locals, not loom's: loom runs all threads of a model on the
    // calling OS thread, so these are per model (and per test).
    static LOOM_ENQUEUES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    static LOOM_ENQUEUE_WAITER: std::cell::RefCell<Option<(usize, model::thread::Thread)>> =
        const { std::cell::RefCell::new(None) };
}

/// Under loom: counts a successful enqueue and unparks a thread waiting in
/// [`wait_for_loom_enqueues`] for this count (test orchestration only).
#[cfg(numa_loom)]
pub(crate) fn note_enqueued() {
    let n = LOOM_ENQUEUES.with(|n| {
        n.set(n.get() + 1);
        n.get()
    });
    LOOM_ENQUEUE_WAITER.with(|w| {
        if let Some((target, thread)) = &*w.borrow() {
            if n >= *target {
                thread.unpark();
            }
        }
    });
}

/// Under loom: parks the calling thread until `n` enqueues happened in this
/// execution. Parking (instead of spinning) keeps the model small: a spinning
/// orchestrator makes loom explore every interleaving of the waiters' spins. The
/// unpark adds a happens-before edge from the `n`-th enqueuer (just after its tail
/// CAS) to the caller, which is the only synchronization the scenario adds.
#[cfg(numa_loom)]
pub fn wait_for_loom_enqueues(n: usize) {
    LOOM_ENQUEUE_WAITER.with(|w| *w.borrow_mut() = Some((n, model::thread::current())));
    while LOOM_ENQUEUES.with(std::cell::Cell::get) < n {
        model::thread::park();
    }
    LOOM_ENQUEUE_WAITER.with(|w| *w.borrow_mut() = None);
}

#[cfg(numa_loom)]
std::thread_local! {
    // std thread-local: loom runs a model on the calling OS thread, so this is
    // per test; read when an execution first uses the HQ metadata pool.
    static LOOM_POOL_SIZE: std::cell::Cell<usize> = const { std::cell::Cell::new(2) };
}

/// Under loom: the number of HQ metadata entries in the pool of the executions
/// that start after this call on this (test) thread; default 2.
#[cfg(numa_loom)]
pub fn set_loom_pool_size(size: usize) {
    LOOM_POOL_SIZE.with(|s| s.set(size));
}

/// Under loom: the HQ metadata pool size set with [`set_loom_pool_size`].
#[cfg(numa_loom)]
pub(crate) fn loom_pool_size() -> usize {
    LOOM_POOL_SIZE.with(std::cell::Cell::get)
}

#[cfg(numa_loom)]
std::thread_local! {
    // std thread-local: per test (see LOOM_POOL_SIZE).
    static LOOM_HEAD_ASLEEP_HINTS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Under loom: whether CNA's queue heads keep the `HEAD_ASLEEP` hint in the
/// executions that start after this call on this (test) thread; default off.
/// The hint is performance only (every access Relaxed), and its extra RMWs on
/// the tail word multiply the schedules of every model, so only the models
/// written for it turn it on.
#[cfg(numa_loom)]
pub fn set_loom_head_asleep_hints(on: bool) {
    LOOM_HEAD_ASLEEP_HINTS.with(|h| h.set(on));
}

/// Whether CNA keeps the `HEAD_ASLEEP` hint: always, except in loom models
/// that did not ask for it (`set_loom_head_asleep_hints`).
#[inline(always)]
pub(crate) fn head_asleep_hints() -> bool {
    #[cfg(numa_loom)]
    return LOOM_HEAD_ASLEEP_HINTS.with(std::cell::Cell::get);
    #[cfg(not(numa_loom))]
    true
}

#[cfg(numa_loom)]
std::thread_local! {
    static LOOM_EVENTS: std::cell::RefCell<Vec<(&'static str, usize)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Counts an event of the modelled algorithm (`hq-bind`, `hq-remote`, ...) on
/// the test thread, across executions, so a model can assert that a path was
/// reached. Outside loom: nothing.
#[inline(always)]
pub(crate) fn event(_name: &'static str) {
    #[cfg(numa_loom)]
    LOOM_EVENTS.with(|e| {
        let mut e = e.borrow_mut();
        match e.iter_mut().find(|(n, _)| *n == _name) {
            Some((_, c)) => *c += 1,
            None => e.push((_name, 1)),
        }
    });
}

/// Under loom: how many times event `name` happened on this test thread, over
/// all executions so far.
#[cfg(numa_loom)]
pub fn loom_event_count(name: &str) -> usize {
    LOOM_EVENTS.with(|e| {
        e.borrow()
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, c)| *c)
    })
}

/// Under loom: resets the enqueue count; call at the start of each execution.
#[cfg(numa_loom)]
pub fn reset_loom_enqueues() {
    clear_trace();
    LOOM_ENQUEUES.with(|n| n.set(0));
    LOOM_ENQUEUE_WAITER.with(|w| *w.borrow_mut() = None);
}

#[cfg(numa_loom)]
std::thread_local! {
    static LOOM_TRACE: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Under loom: appends an event to the execution's trace, printed when a model
/// livelocks. Outside loom: nothing (the closure is never called).
#[inline(always)]
pub(crate) fn trace(_event: impl FnOnce() -> String) {
    #[cfg(numa_loom)]
    LOOM_TRACE.with(|t| {
        let who = format!("{:?}", model::thread::current().id());
        t.borrow_mut().push(format!("{who}: {}", _event()));
    });
}

/// Under loom: the execution's trace so far.
#[cfg(numa_loom)]
#[cfg_attr(numa_shuttle, allow(dead_code))]
pub(crate) fn take_trace() -> String {
    LOOM_TRACE.with(|t| t.borrow().join("\n"))
}

/// Under loom: clears the trace (with [`reset_loom_enqueues`]).
#[cfg(numa_loom)]
fn clear_trace() {
    LOOM_TRACE.with(|t| t.borrow_mut().clear());
}
