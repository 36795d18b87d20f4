//! Deferred cancellation of a thread blocked in a condvar wait.
//!
//! `pthread_cond_wait`, `timedwait` and `clockwait` are cancellation points
//! (POSIX): a thread blocked in one ends when it is cancelled, after
//! re-acquiring the mutex, and its cleanup handlers run with the mutex held.
//!
//! # How glibc 2.36 cancels, and why the wait cannot just be a cancellable syscall
//!
//! With deferred cancellation `pthread_cancel` only sets `CANCELED` in the
//! target's `cancelhandling`; it sends `SIGCANCEL` only to a thread whose
//! cancel type is asynchronous. glibc's own blocking calls enable asynchronous
//! cancellation around their system call, so the signal handler unwinds the
//! thread from inside the call (glibc's condvar then re-takes the mutex in a
//! cleanup handler of its own). Our futex wait is `syscall(SYS_futex)`, which
//! is not a cancellation point. Doing what glibc does, asynchronous
//! cancellation around it, would unwind Rust frames from a signal handler at an
//! arbitrary instruction, and re-taking the mutex during that unwind would need
//! a landing pad: a forced unwind through a Rust frame with pending drops is
//! undefined behaviour (RFC 2945, "Plain Old Frames").
//!
//! # What we do
//!
//! The cancel is acted on synchronously, by glibc's `pthread_testcancel`, called
//! from the wait at a point where the mutex is held and no Rust frame on the
//! stack has anything to drop (every frame is a plain old frame, and the
//! exports that reach it are `extern "C-unwind"`):
//!
//! - on entry to the wait, before anything is registered (a cancel already
//!   pending is acted on at once, with the mutex still held, as glibc does);
//! - after the wait, once the mutex is re-taken, if a canceller woke us.
//!
//! To wake a thread blocked in the futex, `pthread_cancel` is interposed too:
//! it calls glibc's, then looks the target up in `TABLE`, where every waiter
//! registers (thread, futex word) for the time of its sleep, and if found bumps
//! that condvar's sequence word and wakes all of its sleepers (the others see a
//! spurious wake-up, which POSIX allows, so the cancelled thread consumes no
//! signal meant for them). A cancel that comes between the entry check and the
//! registration is caught by `EPOCH`, which every `pthread_cancel` bumps
//! before it scans: a waiter that sees it moved after registering does not
//! sleep and checks again (a Dekker pair: register, fence, read the epoch;
//! bump the epoch, scan).
//!
//! A waiter that finds no free slot (more than [`SLOTS`] threads in condvar
//! waits at once) waits unregistered: a cancel then takes effect at its next
//! wake-up.
//!
//! # Asynchronous cancellation
//!
//! A thread with `PTHREAD_CANCEL_ASYNCHRONOUS` is sent a signal by glibc's
//! `pthread_cancel`, whose handler unwinds it wherever it is. Two places
//! must not be unwound that way:
//!
//! - a lock's wait (a queue node on a dead stack, a parking-lot entry): the
//!   slow paths run with cancellation disabled and deferred, such a thread
//!   waits in slices of [`ASYNC_SLICE`] ([`blocking`]) and the export acts
//!   on a pending cancel between them, with only its own frame left to unwind
//!   ([`finish`]);
//! - a condvar wait (its registration, the waiter count, the mutex to
//!   re-take): the wait runs deferred ([`make_deferred`]) and sets the type
//!   back at the end, with the mutex held ([`restore_type`]), so the cancel
//!   is acted on as a deferred one.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
use libc::pthread_t;

/// Slots of `TABLE`: threads that can sleep in a condvar wait at once and
/// still be woken by a cancel.
pub const SLOTS: usize = 1024;

const FREE: u32 = 0;
const WAITING: u32 = 1;
/// A canceller owns the slot's futex word until it stores `CANCELLED`.
const CANCELLING: u32 = 2;
const CANCELLED: u32 = 3;

/// Low bit of `Slot::word`: the futex is process-shared (no private flag).
const SHARED: usize = 1;

struct Slot {
    thread: AtomicU64,
    word: AtomicUsize,
    state: AtomicU32,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    thread: AtomicU64::new(0),
    word: AtomicUsize::new(0),
    state: AtomicU32::new(FREE),
};

/// Threads sleeping in a condvar wait.
static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];

/// Bumped by every interposed `pthread_cancel` before it scans `TABLE`.
static EPOCH: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" {
    /// glibc's `pthread_setcancelstate(3)` (not a cancellation point).
    fn pthread_setcancelstate(
        state: core::ffi::c_int,
        old: *mut core::ffi::c_int,
    ) -> core::ffi::c_int;
    /// glibc's `pthread_setcanceltype(3)` (not a cancellation point).
    fn pthread_setcanceltype(ty: core::ffi::c_int, old: *mut core::ffi::c_int) -> core::ffi::c_int;
}

/// glibc's `PTHREAD_CANCEL_ENABLE`.
const CANCEL_ENABLE: core::ffi::c_int = 0;
/// glibc's `PTHREAD_CANCEL_DISABLE`.
const CANCEL_DISABLE: core::ffi::c_int = 1;
/// glibc's `PTHREAD_CANCEL_DEFERRED`.
const CANCEL_DEFERRED: core::ffi::c_int = 0;
/// glibc's `PTHREAD_CANCEL_ASYNCHRONOUS`.
const CANCEL_ASYNCHRONOUS: core::ffi::c_int = 1;

/// Disables cancellation; returns the state to give to [`restore_state`].
pub fn disable() -> core::ffi::c_int {
    let mut old = 0;
    // SAFETY: a valid state and a local out-pointer.
    unsafe { pthread_setcancelstate(CANCEL_DISABLE, &mut old) };
    old
}

/// Puts back the cancellation state returned by [`disable`]. With
/// asynchronous cancellation and a pending cancel glibc acts on it here (it
/// unwinds): call it only where that may happen.
pub fn restore_state(old: core::ffi::c_int) {
    let mut prev = 0;
    // SAFETY: `old` came from glibc; a local out-pointer.
    unsafe { pthread_setcancelstate(old, &mut prev) };
}

/// Switches this thread to deferred cancellation; returns whether it was
/// asynchronous (give that to [`restore_type`]). Never acts on a cancel.
pub fn make_deferred() -> bool {
    let mut old = CANCEL_DEFERRED;
    // SAFETY: a valid type and a local out-pointer.
    unsafe { pthread_setcanceltype(CANCEL_DEFERRED, &mut old) };
    old == CANCEL_ASYNCHRONOUS
}

/// Puts back asynchronous cancellation if [`make_deferred`] said it was on.
/// With cancellation enabled and a cancel pending, glibc acts on it here (it
/// unwinds through the caller).
///
/// # Safety
///
/// As for [`testcancel`] when `was_async` is true.
pub unsafe fn restore_type(was_async: bool) {
    if was_async {
        let mut prev = 0;
        // SAFETY: a valid type and a local out-pointer; the unwind it may
        // start is the caller's contract.
        unsafe { pthread_setcanceltype(CANCEL_ASYNCHRONOUS, &mut prev) };
    }
}

/// Runs `f` with cancellation disabled. Our lock functions are not
/// cancellation points, but what their slow paths call may be (cst's first
/// `available_parallelism` opens `/proc` files; numa-spin's back-off sleeps in
/// `nanosleep`): a pending cancel acted on there would unwind through the
/// lock's Rust frames half-way through an acquisition.
#[inline]
pub fn shielded<R>(f: impl FnOnce() -> R) -> R {
    let old = disable();
    let r = f();
    restore_state(old);
    r
}

/// Added to a lock function's result: the thread had asynchronous
/// cancellation enabled, which the slow path switched off; the export puts
/// it back with [`finish`] (acting on a pending cancel there).
pub const ASYNC: core::ffi::c_int = 1 << 30;
/// A lock function's result: not acquired yet, the thread has asynchronous
/// cancellation (switched off as for [`ASYNC`]): the export lets a pending
/// cancel act ([`finish`]) and calls the function again.
pub const RETRY: core::ffi::c_int = 1 << 29;

/// How long an asynchronously cancellable thread waits for a lock between
/// two looks at a pending cancel (glibc's futex wait is interrupted by the
/// cancel signal at once; ours cannot be: see [`blocking`]).
pub const ASYNC_SLICE: std::time::Duration = std::time::Duration::from_millis(10);

/// The slow path of a lock acquisition, cancellation-safe: 0 when acquired,
/// `ETIMEDOUT` when `until` passed first, either with [`ASYNC`] added, or
/// `RETRY | ASYNC` (not acquired: return it to the export).
///
/// `wait(None)` blocks until acquired; `wait(Some(deadline))` gives up at
/// `deadline` (false). The wait runs with cancellation disabled (see
/// [`shielded`]). A thread with *asynchronous* cancellation enabled would be
/// cancelled by glibc's signal inside a blocked `pthread_mutex_lock`, but an
/// unwind from a signal handler out of a lock's wait would leave the lock's
/// queue or parking lot pointing into a dead stack, and a cancel acted on
/// when the shield is lifted here would unwind through this crate's frames.
/// So such a thread waits in slices of [`ASYNC_SLICE`] (until `until`, if
/// given) with cancellation disabled and deferred, and the result carries
/// [`ASYNC`]: the export puts asynchronous cancellation back itself
/// ([`finish`]), where glibc may act on a pending cancel with no Rust frame
/// but the export's own left to unwind, and calls again after a [`RETRY`].
#[inline]
pub fn blocking(
    until: Option<std::time::Instant>,
    mut wait: impl FnMut(Option<std::time::Instant>) -> bool,
) -> core::ffi::c_int {
    let state = disable();
    let was_async = make_deferred();
    if !(was_async && state == CANCEL_ENABLE) {
        let got = wait(until);
        if was_async {
            let mut prev = 0;
            // SAFETY: a valid type, a local out-pointer; cancellation is
            // disabled, so glibc acts on nothing here.
            unsafe { pthread_setcanceltype(CANCEL_ASYNCHRONOUS, &mut prev) };
        }
        // Disabled, or enabled and deferred: putting it back never acts.
        restore_state(state);
        return if got { 0 } else { libc::ETIMEDOUT };
    }
    let slice = std::time::Instant::now() + ASYNC_SLICE;
    let at = until.map_or(slice, |u| u.min(slice));
    if wait(Some(at)) {
        ASYNC
    } else if until.is_some_and(|u| u <= at) {
        ASYNC | libc::ETIMEDOUT
    } else {
        RETRY | ASYNC
    }
}

/// In an export, after a lock function returned `r`: puts back asynchronous
/// cancellation that [`blocking`] switched off, which acts on a pending cancel
/// (glibc unwinds from here); `None` when the function must be called again.
///
/// # Safety
///
/// Called by an export's own frame (`extern "C-unwind"`, nothing to drop),
/// directly: that frame is the only Rust frame the unwind crosses.
#[inline(always)]
pub unsafe fn finish(r: core::ffi::c_int) -> Option<core::ffi::c_int> {
    if r & ASYNC == 0 {
        return Some(r);
    }
    let mut prev = 0;
    // SAFETY: valid values and local out-pointers. Enabled while deferred:
    // nothing acts; then `pthread_testcancel` acts on a pending cancel (and
    // sets the thread's result to `PTHREAD_CANCELED`, which glibc 2.36's
    // `pthread_setcancelstate` does not when it acts); then asynchronous
    // again. An unwind from here crosses the caller's plain old frame only
    // (the caller's contract).
    unsafe {
        pthread_setcancelstate(CANCEL_ENABLE, &mut prev);
        glibc_testcancel();
        pthread_setcanceltype(CANCEL_ASYNCHRONOUS, &mut prev);
    }
    if r & RETRY != 0 {
        None
    } else {
        Some(r & !ASYNC)
    }
}

unsafe extern "C-unwind" {
    /// glibc's `pthread_testcancel(3)`: unwinds (a forced unwind) when a cancel
    /// is pending and enabled.
    #[link_name = "pthread_testcancel"]
    fn glibc_testcancel();
}

/// Acts on a pending cancel (unwinds through the caller's frames).
///
/// # Safety
///
/// Every Rust frame between here and the C caller is a plain old frame
/// (nothing to drop) of a function with an unwinding ABI, and whatever the
/// cleanup handlers expect (the mutex held) holds.
#[inline]
pub unsafe fn testcancel() {
    // SAFETY: caller's contract.
    unsafe { glibc_testcancel() }
}

/// A waiter's registration: no `Drop` (the frames holding it must stay plain
/// old frames); released with [`Registration::leave`].
pub struct Registration {
    slot: Option<&'static Slot>,
}

fn me() -> u64 {
    // SAFETY: no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

/// The epoch to pass to [`register`], read before the entry check.
#[inline]
pub fn epoch() -> u64 {
    EPOCH.load(Ordering::SeqCst)
}

/// A cancel came between [`epoch`] and [`register`]: check for it instead of
/// sleeping.
#[derive(Debug)]
pub struct CancelRaced;

/// Registers this thread as about to sleep on `word`. `Err` when a cancel came
/// since `epoch` was read: do not sleep, check for it instead.
pub fn register(word: &AtomicU32, shared: bool, epoch: u64) -> Result<Registration, CancelRaced> {
    let me = me();
    let start = (me as usize >> 6).wrapping_mul(0x9E37_79B9) % SLOTS;
    let mut slot = None;
    for i in 0..SLOTS {
        let Some(s) = TABLE.get((start + i) % SLOTS) else {
            break;
        };
        // Acquire: the slot's previous user released it with a Release store.
        if s.thread.load(Ordering::Relaxed) == 0
            && s.thread
                .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            s.word.store(
                word.as_ptr() as usize | if shared { SHARED } else { 0 },
                Ordering::Relaxed,
            );
            // SeqCst: the registration half of the Dekker pair with a
            // canceller's epoch bump and scan.
            s.state.store(WAITING, Ordering::SeqCst);
            slot = Some(s);
            break;
        }
    }
    fence(Ordering::SeqCst);
    let reg = Registration { slot };
    if EPOCH.load(Ordering::SeqCst) != epoch {
        reg.leave();
        return Err(CancelRaced);
    }
    Ok(reg)
}

impl Registration {
    /// Whether a canceller has claimed this waiter (then it does not sleep).
    pub fn cancelled(&self) -> bool {
        self.slot
            .is_some_and(|s| s.state.load(Ordering::SeqCst) != WAITING)
    }

    /// Leaves the table; true if a canceller woke us. Waits for a canceller
    /// that is touching our futex word to finish, so the condvar outlives it.
    pub fn leave(self) -> bool {
        let Some(s) = self.slot else {
            return false;
        };
        let woken =
            match s
                .state
                .compare_exchange(WAITING, FREE, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => false,
                Err(_) => {
                    // Acquire: the canceller's last access to our word comes first.
                    while s.state.load(Ordering::Acquire) != CANCELLED {
                        // SAFETY: no preconditions.
                        unsafe { libc::sched_yield() };
                    }
                    s.state.store(FREE, Ordering::Relaxed);
                    true
                }
            };
        // Release: the slot's next user acquires it after our last use.
        s.thread.store(0, Ordering::Release);
        woken
    }
}

/// After glibc's `pthread_cancel(thread)` succeeded: wakes `thread` if it
/// sleeps in one of our condvar waits.
pub fn wake_cancelled(thread: pthread_t) {
    let target: u64 = thread;
    // SeqCst: the canceller's half of the Dekker pair (see the module docs).
    EPOCH.fetch_add(1, Ordering::SeqCst);
    for s in &TABLE {
        if s.state.load(Ordering::SeqCst) != WAITING || s.thread.load(Ordering::SeqCst) != target {
            continue;
        }
        if s.state
            .compare_exchange(WAITING, CANCELLING, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        let w = s.word.load(Ordering::Relaxed);
        let word = (w & !SHARED) as *const AtomicU32;
        // SAFETY: the waiter registered `word` (a live condvar's sequence word)
        // and waits for `CANCELLED` before it leaves the condvar, so the word
        // lives until the store below.
        unsafe { (*word).fetch_add(1, Ordering::SeqCst) };
        let op = libc::FUTEX_WAKE
            | if w & SHARED != 0 {
                0
            } else {
                libc::FUTEX_PRIVATE_FLAG
            };
        // SAFETY: as above; FUTEX_WAKE reads no other pointer.
        unsafe { libc::syscall(libc::SYS_futex, word, op, libc::c_int::MAX) };
        // Release: our last access to the word comes before the waiter leaves.
        s.state.store(CANCELLED, Ordering::Release);
    }
}

/// In a `fork` child only the forking thread exists: the other threads'
/// registrations would stay, and a new thread that gets one of their
/// `pthread_t`s (glibc reuses their stacks) could be matched by a cancel and
/// have a stale futex word bumped. The child empties the table.
extern "C" fn child_after_fork() {
    for s in &TABLE {
        s.state.store(FREE, Ordering::Relaxed);
        s.thread.store(0, Ordering::Relaxed);
    }
}

/// Registers [`child_after_fork`] with `pthread_atfork` (the constructor does).
#[cfg_attr(test, allow(dead_code))]
pub(crate) fn forget_at_fork() {
    // SAFETY: a handler with no preconditions, for the child only.
    unsafe { libc::pthread_atfork(None, None, Some(child_after_fork)) };
}
