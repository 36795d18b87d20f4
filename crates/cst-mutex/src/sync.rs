//! Crate-private synchronisation shim: atomics, spinning, the current node and
//! park/unpark.
//!
//! Every atomic, spin, yield and park of the crate goes through this module so
//! that `--cfg numa_loom` can swap them for `loom`'s model-checked versions.
//! `parking_lot_core` is invisible to loom, so under loom parking maps onto a
//! small address-keyed parking lot built from loom's `Mutex` and
//! `thread::park`/`unpark` (see [`park`]); a timed park under loom may time out
//! at any point after it is queued, which lets the models explore a timeout
//! racing a handoff.

#[cfg(not(numa_loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering, fence};

/// The model checker behind `--cfg numa_loom`: loom, or with `--cfg numa_shuttle`
/// too, shuttle (randomized schedules over many threads and operations;
/// sequentially consistent, so it hunts logic bugs such as lost wake-ups while
/// loom hunts ordering bugs). Both have the same `sync`, `thread`,
/// `thread_local!` and `lazy_static!` API as far as this shim uses them.
#[cfg(all(numa_loom, not(numa_shuttle)))]
use loom as model;
#[cfg(all(numa_loom, numa_shuttle))]
use shuttle as model;

/// Statics that live for one model execution (the rwlock's counter pool).
#[cfg(numa_loom)]
pub(crate) use model::lazy_static;

#[cfg(numa_loom)]
pub(crate) use model::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering, fence};

pub(crate) use parking_lot_core::{ParkResult, ParkToken, RequeueOp, UnparkResult, UnparkToken};
use std::time::Instant;

/// One step of a busy-wait: a CPU pause hint (a loom yield under loom, whose
/// scheduler is not fair to spinning threads).
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(not(numa_loom))]
    std::hint::spin_loop();
    #[cfg(numa_loom)]
    model::thread::yield_now();
}

/// Gives the CPU to another runnable thread.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(not(numa_loom))]
    std::thread::yield_now();
    #[cfg(numa_loom)]
    model::thread::yield_now();
}

/// The NUMA node of the calling thread ([`numa_topology::current_node`]; under
/// loom a loom thread-local set by `loom_hooks::set_node`, because loom
/// runs its threads on one OS thread and std thread-locals would be shared).
#[inline]
pub(crate) fn current_node() -> usize {
    #[cfg(not(numa_loom))]
    {
        numa_topology::current_node()
    }
    #[cfg(numa_loom)]
    {
        loom_impl::NODE.with(|n| n.get())
    }
}

/// Parks the calling thread on `key`: `parking_lot_core::park`, same contract.
///
/// # Safety
///
/// As for `parking_lot_core::park`: `key` must be an address this crate
/// controls (an snode or lock address); `validate` and `timed_out` run under
/// the queue lock and must not unwind or call into the parking lot;
/// `before_sleep` must not park or unwind.
///
/// A call nested in another call of the same thread (from a signal handler)
/// does not sleep: it runs `before_sleep` and returns
/// [`ParkResult::Invalid`] at once (see the body); callers must treat
/// `Invalid` as "look again" (they all do: it also means that `validate`
/// refused).
#[inline]
pub(crate) unsafe fn park(
    key: usize,
    validate: impl FnOnce() -> bool,
    before_sleep: impl FnOnce(),
    timed_out: impl FnOnce(usize, bool),
    token: ParkToken,
    timeout: Option<Instant>,
) -> ParkResult {
    // SAFETY: forwarded contract.
    unsafe { park_requeueable(key, 0, validate, before_sleep, timed_out, token, timeout) }
}

/// [`park`] for a waiter that [`unpark_requeue`] may move to `requeue_to`
/// (a condvar's waiter, moved onto its mutex's requeue key; 0: none). Both
/// keys go into the thread's record of where it sleeps, which the child of
/// a fork uses to take the records of the parent's sleeping threads out of
/// the parking lot (see `fork::Parked`).
///
/// # Safety
///
/// As for [`park`]; `requeue_to` is 0 or a key this crate controls.
#[inline]
pub(crate) unsafe fn park_requeueable(
    key: usize,
    requeue_to: usize,
    validate: impl FnOnce() -> bool,
    before_sleep: impl FnOnce(),
    timed_out: impl FnOnce(usize, bool),
    token: ParkToken,
    timeout: Option<Instant>,
) -> ParkResult {
    #[cfg(not(numa_loom))]
    {
        // A park nested in another park of this thread (a signal handler
        // that takes a lock while its thread sleeps in one): the thread's
        // parking-lot record is queued already, so this wait does not
        // sleep. Without validating (it queues nothing), it runs
        // `before_sleep` (a condvar's unlock of its mutex: the wait becomes
        // a spurious wake-up), yields and reports `Invalid`; every caller
        // re-checks its state after a park and then spins on it instead.
        // `try_with`: a lock used from a thread-local destructor after this
        // one was destroyed parks normally.
        if PARKING.try_with(|p| p.replace(true)).unwrap_or(false) {
            let _ = (validate, timed_out, token);
            before_sleep();
            std::thread::yield_now();
            return ParkResult::Invalid;
        }
        // The fork handlers, if the load-time registration failed.
        crate::fork::watch();
        // Recorded before the parking lot can queue us, until after it no
        // longer does (see `fork::Parked`).
        let _parked = crate::fork::Parked::record(key, requeue_to);
        // Inside the fork gate until the parking lot has unlocked our
        // bucket: `before_sleep` runs after that (see `fork.rs`).
        crate::fork::enter_lot();
        let inside = std::cell::Cell::new(true);
        let before_sleep = || {
            inside.set(false);
            crate::fork::leave_lot();
            before_sleep();
        };
        // SAFETY: the caller upholds `parking_lot_core::park`'s contract (see above).
        let r = unsafe {
            parking_lot_core::park(key, validate, before_sleep, timed_out, token, timeout)
        };
        if inside.get() {
            crate::fork::leave_lot();
        }
        let _ = PARKING.try_with(|p| p.set(false));
        r
    }
    #[cfg(numa_loom)]
    {
        let _ = (token, requeue_to);
        loom_impl::park(key, validate, before_sleep, timed_out, timeout.is_some())
    }
}

#[cfg(not(numa_loom))]
std::thread_local! {
    /// Whether this thread is inside [`park`] (const, no destructor: safe to
    /// read from a signal handler).
    static PARKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Unparks one thread parked on `key`: `parking_lot_core::unpark_one`.
///
/// # Safety
///
/// `key` must be an address this crate controls; `callback` runs under the
/// queue lock and must not unwind or call into the parking lot.
#[inline]
pub(crate) unsafe fn unpark_one(
    key: usize,
    callback: impl FnOnce(UnparkResult) -> UnparkToken,
) -> UnparkResult {
    #[cfg(not(numa_loom))]
    {
        crate::fork::enter_lot();
        // SAFETY: the caller upholds `parking_lot_core::unpark_one`'s contract.
        let r = unsafe { parking_lot_core::unpark_one(key, callback) };
        crate::fork::leave_lot();
        r
    }
    #[cfg(numa_loom)]
    {
        loom_impl::unpark(key, Some(1), |n, more| callback(loom_impl::result(n, more))).0
    }
}

/// Unparks every thread parked on `key`, all with the token `callback` returns;
/// `callback` gets the number of threads unparked and runs under the queue
/// lock before any of them resumes. Returns that number.
///
/// # Safety
///
/// `key` must be an address this crate controls; `callback` runs under the
/// queue lock and must not unwind or call into the parking lot.
#[inline]
pub(crate) unsafe fn unpark_all_with(
    key: usize,
    callback: impl FnOnce(usize) -> UnparkToken,
) -> usize {
    #[cfg(not(numa_loom))]
    {
        let mut token = parking_lot_core::DEFAULT_UNPARK_TOKEN;
        let mut cb = Some(callback);
        crate::fork::enter_lot();
        // SAFETY: the caller upholds the contract; the filter and callback
        // neither unwind nor call into the parking lot.
        let r = unsafe {
            parking_lot_core::unpark_filter(
                key,
                |_| parking_lot_core::FilterOp::Unpark,
                |r| {
                    if let Some(cb) = cb.take() {
                        token = cb(r.unparked_threads);
                    }
                    token
                },
            )
        };
        crate::fork::leave_lot();
        r.unparked_threads
    }
    #[cfg(numa_loom)]
    {
        loom_impl::unpark(key, None, |n, _| callback(n)).1
    }
}

/// Unparks one thread parked on `from` and moves the rest to `to`:
/// `parking_lot_core::unpark_requeue`, used with
/// [`RequeueOp::UnparkOneRequeueRest`] or [`RequeueOp::Abort`] only. `validate`
/// decides with both queues locked; `callback` gets the op and the counts and
/// returns the token for the unparked thread.
///
/// # Safety
///
/// Both keys must be addresses this crate controls; `validate` and `callback`
/// run under the queue locks and must not unwind or call into the parking lot.
#[inline]
pub(crate) unsafe fn unpark_requeue(
    from: usize,
    to: usize,
    validate: impl FnOnce() -> RequeueOp,
    callback: impl FnOnce(RequeueOp, UnparkResult) -> UnparkToken,
) -> UnparkResult {
    #[cfg(not(numa_loom))]
    {
        crate::fork::enter_lot();
        // SAFETY: the caller upholds `parking_lot_core::unpark_requeue`'s contract.
        let r = unsafe { parking_lot_core::unpark_requeue(from, to, validate, callback) };
        crate::fork::leave_lot();
        r
    }
    #[cfg(numa_loom)]
    {
        loom_impl::requeue(from, to, validate, callback)
    }
}

/// Test hook for loom models: sets the NUMA node of the calling loom thread.
#[cfg(numa_loom)]
pub(crate) fn set_loom_node(node: usize) {
    loom_impl::NODE.with(|n| n.set(node));
}

/// Under loom: the spin rounds of the calling loom thread.
#[cfg(numa_loom)]
pub(crate) fn loom_spin_rounds() -> u32 {
    loom_impl::SPIN.with(|n| n.get())
}

/// Test hook for loom models: sets the spin rounds of the calling loom thread.
#[cfg(numa_loom)]
pub(crate) fn set_loom_spin_rounds(rounds: u32) {
    loom_impl::SPIN.with(|n| n.set(rounds));
}

#[cfg(numa_loom)]
mod loom_impl {
    use super::model;
    use super::{ParkResult, UnparkResult, UnparkToken};
    use model::sync::atomic::{AtomicUsize, Ordering};
    use model::sync::{Arc, Mutex};
    use std::cell::Cell;

    model::thread_local! {
        pub(super) static NODE: Cell<usize> = Cell::new(0);
        pub(super) static SPIN: Cell<u32> = Cell::new(0);
    }

    struct Waiter {
        key: usize,
        /// 0 while parked, `token + 1` once unparked.
        slot: Arc<AtomicUsize>,
        thread: model::thread::Thread,
    }

    model::lazy_static! {
        static ref LOT: Mutex<Vec<Waiter>> = Mutex::new(Vec::new());
    }

    /// Locks the lot by `try_lock` and yield: a thread blocked inside loom's
    /// `Mutex::lock` must not be the target of `Thread::unpark` (loom would
    /// make it runnable while the mutex is still held).
    fn lot() -> model::sync::MutexGuard<'static, Vec<Waiter>> {
        loop {
            if let Ok(g) = LOT.try_lock() {
                return g;
            }
            model::thread::yield_now();
        }
    }

    pub(super) fn result(unparked: usize, more: bool) -> UnparkResult {
        let mut r = UnparkResult::default();
        r.unparked_threads = unparked;
        r.have_more_threads = more;
        r
    }

    pub(super) fn park(
        key: usize,
        validate: impl FnOnce() -> bool,
        before_sleep: impl FnOnce(),
        timed_out: impl FnOnce(usize, bool),
        timed: bool,
    ) -> ParkResult {
        let slot = Arc::new(AtomicUsize::new(0));
        {
            let mut lot = lot();
            if !validate() {
                return ParkResult::Invalid;
            }
            lot.push(Waiter {
                key,
                slot: slot.clone(),
                thread: model::thread::current(),
            });
        }
        before_sleep();
        loop {
            let v = slot.load(Ordering::Acquire);
            if v != 0 {
                return ParkResult::Unparked(UnparkToken(v - 1));
            }
            if timed {
                // A timed park may time out at any point once queued. Under
                // shuttle, time passes first: a yield lets the other threads run
                // (without it, a waiter that re-parks after each time-out, such as
                // a writer draining readers, would keep the CPU in the model).
                #[cfg(numa_shuttle)]
                model::thread::yield_now();
                let mut lot = lot();
                if let Some(i) = lot.iter().position(|w| Arc::ptr_eq(&w.slot, &slot)) {
                    let key = lot.remove(i).key;
                    let last = !lot.iter().any(|w| w.key == key);
                    timed_out(key, last);
                    return ParkResult::TimedOut;
                }
                continue;
            }
            model::thread::park();
        }
    }

    /// Unparks up to `max` threads on `key` (all if `None`); `callback(n, more)`
    /// picks the token. Returns the callback's result and `n`.
    pub(super) fn unpark(
        key: usize,
        max: Option<usize>,
        callback: impl FnOnce(usize, bool) -> UnparkToken,
    ) -> (UnparkResult, usize) {
        let mut lot = lot();
        let mut taken = Vec::new();
        let mut i = 0;
        while i < lot.len() {
            if lot[i].key == key && max.is_none_or(|m| taken.len() < m) {
                taken.push(lot.remove(i));
            } else {
                i += 1;
            }
        }
        let more = lot.iter().any(|w| w.key == key);
        let token = callback(taken.len(), more);
        for w in &taken {
            w.slot.store(token.0 + 1, Ordering::Release);
            w.thread.unpark();
        }
        (result(taken.len(), more), taken.len())
    }
    pub(super) fn requeue(
        from: usize,
        to: usize,
        validate: impl FnOnce() -> super::RequeueOp,
        callback: impl FnOnce(super::RequeueOp, UnparkResult) -> UnparkToken,
    ) -> UnparkResult {
        use super::RequeueOp;
        let mut lot = lot();
        let op = validate();
        if op == RequeueOp::Abort {
            return UnparkResult::default();
        }
        assert_eq!(
            op,
            RequeueOp::UnparkOneRequeueRest,
            "loom shim: op not modelled"
        );
        let mut woken = None;
        let mut requeued = 0;
        let mut i = 0;
        while i < lot.len() {
            if lot[i].key == from && woken.is_none() {
                woken = Some(lot.remove(i));
                continue;
            }
            if lot[i].key == from {
                lot[i].key = to;
                requeued += 1;
            }
            i += 1;
        }
        let mut r = result(usize::from(woken.is_some()), false);
        r.requeued_threads = requeued;
        let token = callback(op, r);
        if let Some(w) = woken {
            w.slot.store(token.0 + 1, Ordering::Release);
            w.thread.unpark();
        }
        r
    }
}
