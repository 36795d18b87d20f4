//! `pthread_cond_*`: a futex sequence-number condvar in place, for every mutex.
//!
//! A wait registers in `waiters`, reads `seq`, releases the mutex (ours or a
//! glibc-forwarded kind, through the same unlock as `pthread_mutex_unlock`),
//! sleeps in `FUTEX_WAIT_BITSET` while `seq` is unchanged, and re-takes the
//! mutex. `signal` and `broadcast` first read `waiters`, and return at once
//! while it is 0 (a load, no write, as glibc's first look at `__wrefs`);
//! otherwise they bump `seq` and wake one sleeper, or all. No wake-up is lost
//! for the waiters POSIX speaks of: a waiter the signal must wake released the
//! mutex before the signaler (or a thread it synchronized with) took it, so
//! its `waiters` increment, sequenced before that release, happens before
//! the signaler's read, which therefore counts it; and its `seq` read happens
//! before the bump, so its `FUTEX_WAIT` either finds `seq` changed and returns
//! at once, or is queued before the `FUTEX_WAKE` (the kernel compares under its
//! hash-bucket lock). A waiter not ordered before the signal may miss it: the
//! signal then counts as coming before that wait, as POSIX allows.
//!
//! Memory after the wake: the bump is a signaler's last access to the condvar.
//! A waiter it wakes may return, destroy and free the condvar at once; the
//! signaler then only makes the `FUTEX_WAKE` system call on the address (a
//! private futex key is the address itself, and the kernel reads no memory
//! for it; on reused memory it is at worst a spurious wake-up, which every
//! futex user tolerates).
//!
//! Timed waits pass an absolute deadline to `FUTEX_WAIT_BITSET` on the condvar's
//! clock (`pthread_condattr_setclock`: `FUTEX_CLOCK_REALTIME` unless
//! `CLOCK_MONOTONIC`) or on `pthread_cond_clockwait`'s clock.
//!
//! Process-shared condvars are glibc's (initialized by glibc, whose shared bit
//! in `__wrefs` is our `COND_PSHARED`), so that processes without this library
//! can share them; see `wait_glibc` for a wait on one with our mutex.
//!
//! The waits are cancellation points (see [`cancel`]).
//!
//! This is the condvar of Rust's `std` on Linux, with a waiter count. Like every
//! sequence condvar, `signal` may wake a thread that started waiting after the
//! signal instead of an older one when the older one has not reached the kernel
//! yet (it then returns at once, so it is woken too: a spurious wake-up, which
//! POSIX allows). `broadcast` wakes every waiter, which then contend for the
//! mutex (no requeue onto the mutex: our mutexes are not futex words).

use crate::layout::{COND_MONOTONIC, COND_PSHARED, CondRepr};
use crate::mutex::{self, InPlace};
use crate::{cancel, real, stats, time};
use core::ffi::c_int;
use core::sync::atomic::Ordering;
use libc::{clockid_t, pthread_cond_t, pthread_condattr_t, pthread_mutex_t, timespec};

/// Our view of `c`.
///
/// # Safety
///
/// `c` points to a live `pthread_cond_t`.
#[inline(always)]
unsafe fn repr<'a>(c: *mut pthread_cond_t) -> &'a CondRepr {
    // SAFETY: `CondRepr` has the size and alignment of `pthread_cond_t`
    // (asserted in `layout`), all fields are integers.
    unsafe { &*c.cast::<CondRepr>() }
}

/// Whether `c` is glibc's (process-shared, initialized by glibc).
#[inline]
fn forwarded(r: &CondRepr) -> bool {
    r.flags.load(Ordering::Relaxed) & COND_PSHARED != 0
}

/// glibc mutexes that stand in for one of our mutexes while a thread waits on
/// a process-shared (glibc) condvar: glibc's wait releases and re-takes its
/// mutex with its internal functions, which cannot release ours. Chosen by the
/// condvar's address; `PTHREAD_MUTEX_INITIALIZER` is all zero.
struct Helpers([core::cell::UnsafeCell<pthread_mutex_t>; HELPERS]);
const HELPERS: usize = 64;
// SAFETY: the mutexes are only used through glibc's thread-safe functions.
unsafe impl Sync for Helpers {}
#[allow(clippy::declare_interior_mutable_const)]
const HELPER: core::cell::UnsafeCell<pthread_mutex_t> =
    // SAFETY: all-zero is glibc's `PTHREAD_MUTEX_INITIALIZER`.
    core::cell::UnsafeCell::new(unsafe { core::mem::zeroed() });
static HELPER_MUTEXES: Helpers = Helpers([HELPER; HELPERS]);

fn helper(c: *mut pthread_cond_t) -> *mut pthread_mutex_t {
    let i = (c as usize >> 6) % HELPERS;
    HELPER_MUTEXES
        .0
        .get(i)
        .or(HELPER_MUTEXES.0.first())
        .map_or(core::ptr::null_mut(), |m| m.get())
}

/// A wait on glibc's process-shared condvar `c`.
///
/// With a glibc mutex (process-shared, robust, ...) glibc's wait does it all.
/// With one of ours the waiter takes `c`'s helper (a glibc mutex), releases
/// ours, and waits on `c` with the helper, which glibc releases atomically with
/// the waiter's registration; our `signal` and `broadcast` of such a condvar
/// take the helper around glibc's, so a signaller of this process that
/// changed the predicate under our mutex cannot slip between our release and
/// that registration (no lost wake-up). That wait is not a cancellation point
/// while it sleeps: glibc's cancel would unwind with the helper held and our
/// mutex free; a pending cancel is acted on when the wait returns.
///
/// # Safety
///
/// As for [`wait`].
unsafe fn wait_glibc<L: InPlace>(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    clock: Option<clockid_t>,
    abstime: *const timespec,
    timed: bool,
) -> c_int {
    stats::forwarded();
    // SAFETY: caller's contract (`m` is live).
    let ours = unsafe { mutex::is_ours(m) };
    if !ours {
        // SAFETY: glibc's condvar and mutex; glibc's wait may unwind through
        // this plain old frame (caller's contract).
        return unsafe {
            match (timed, clock) {
                (false, _) => real::pthread_cond_wait(c, m),
                (true, None) => real::pthread_cond_timedwait(c, m, abstime),
                (true, Some(k)) => real::pthread_cond_clockwait(c, m, k, abstime),
            }
        };
    }
    // SAFETY: the mutex is held; nothing to drop (caller's contract).
    unsafe { cancel::testcancel() };
    let h = helper(c);
    // SAFETY: `h` is one of our static glibc mutexes; `m` is live and held.
    unsafe {
        real::pthread_mutex_lock(h);
        let saved = match mutex::unlock_for_wait::<L>(m) {
            Ok(s) => s,
            Err(e) => {
                real::pthread_mutex_unlock(h);
                return e;
            }
        };
        let old = cancel::disable();
        let r = match (timed, clock) {
            (false, _) => real::pthread_cond_wait(c, h),
            (true, None) => real::pthread_cond_timedwait(c, h, abstime),
            (true, Some(k)) => real::pthread_cond_clockwait(c, h, k, abstime),
        };
        real::pthread_mutex_unlock(h);
        let e = mutex::relock_after_wait::<L>(m, saved);
        cancel::restore_state(old);
        // The mutex is held again: a cancel that came during the wait.
        cancel::testcancel();
        if e != 0 { e } else { r }
    }
}

/// `signal`/`broadcast` of glibc's process-shared condvar `c` (see
/// [`wait_glibc`] for the helper).
///
/// # Safety
///
/// `c` is a live glibc condvar.
unsafe fn wake_glibc(c: *mut pthread_cond_t, all: bool) -> c_int {
    stats::forwarded();
    let h = helper(c);
    // SAFETY: `h` is one of our static glibc mutexes; `c` is glibc's.
    unsafe {
        real::pthread_mutex_lock(h);
        let r = if all {
            real::pthread_cond_broadcast(c)
        } else {
            real::pthread_cond_signal(c)
        };
        real::pthread_mutex_unlock(h);
        r
    }
}

fn private_flag(flags: u32) -> c_int {
    if flags & COND_PSHARED != 0 {
        0
    } else {
        libc::FUTEX_PRIVATE_FLAG
    }
}

/// `pthread_cond_init`: clock and process-shared flag from `attr`.
///
/// # Safety
///
/// `c` is writable; `attr` is null or an initialized attribute object.
pub unsafe fn init(c: *mut pthread_cond_t, attr: *const pthread_condattr_t) -> c_int {
    let mut flags = 0;
    if !attr.is_null() {
        let mut clock: clockid_t = libc::CLOCK_REALTIME;
        let mut pshared = libc::PTHREAD_PROCESS_PRIVATE;
        // SAFETY: `attr` is initialized (caller's contract); locals as outputs.
        unsafe {
            real::pthread_condattr_getclock(attr, &mut clock);
            real::pthread_condattr_getpshared(attr, &mut pshared);
        }
        if clock == libc::CLOCK_MONOTONIC {
            flags |= COND_MONOTONIC;
        }
        if pshared != libc::PTHREAD_PROCESS_PRIVATE {
            // glibc's own condvar, which sets `COND_PSHARED` (its
            // `__PTHREAD_COND_SHARED_MASK`) in `__wrefs`: every later call
            // sees it and goes to glibc, so a process without this library
            // can share it.
            // SAFETY: caller's contract.
            return unsafe { real::pthread_cond_init(c, attr) };
        }
    }
    // SAFETY: `c` is writable for 48 bytes (caller's contract).
    unsafe { core::ptr::write_bytes(c.cast::<u8>(), 0, core::mem::size_of::<pthread_cond_t>()) };
    // SAFETY: as above.
    unsafe { repr(c) }.flags.store(flags, Ordering::Relaxed);
    0
}

/// `pthread_cond_destroy`: nothing to free, but it waits until every woken
/// waiter has left the condvar (its last access is the `waiters` decrement), so
/// that the POSIX pattern "broadcast, then destroy and free" is safe, as with
/// glibc (which waits on `__wrefs` the same way). As with glibc, destroying a
/// condvar on which threads are still blocked is undefined (here: it waits).
///
/// # Safety
///
/// `c` points to a live `pthread_cond_t`.
pub unsafe fn destroy(c: *mut pthread_cond_t) -> c_int {
    // SAFETY: caller's contract.
    let r = unsafe { repr(c) };
    if forwarded(r) {
        stats::forwarded();
        // SAFETY: glibc's condvar.
        return unsafe { real::pthread_cond_destroy(c) };
    }
    // Acquire: pairs with the waiters' Release decrement, their last access.
    while r.waiters.load(Ordering::Acquire) != 0 {
        // SAFETY: no preconditions.
        unsafe { libc::sched_yield() };
    }
    0
}

/// `pthread_cond_wait` (`abstime` null) or a timed wait on `clock` (`None`: the
/// condvar's own clock) with mutex lock `L`.
///
/// A cancellation point (see [`cancel`]): a pending cancel is acted on at entry,
/// and one that woke the wait after the mutex is re-taken, by a forced unwind
/// through this frame, which holds nothing to drop. A thread with
/// asynchronous cancellation waits with deferred cancellation and gets its
/// type back at the end, with the mutex held (glibc's signal would otherwise
/// unwind it out of the futex wait, with the mutex free, its registration
/// and the condvar's waiter count left behind): its cancel then takes effect
/// as a deferred one does, with the cleanup handlers running on the mutex.
///
/// # Safety
///
/// `c` and `m` are live; `m` is held by the caller; `abstime` is null or
/// readable; every Rust frame from here to the C caller is a plain old frame of
/// a function with an unwinding ABI (see [`cancel::testcancel`]).
pub unsafe fn wait<L: InPlace>(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    clock: Option<clockid_t>,
    abstime: *const timespec,
    timed: bool,
) -> c_int {
    let was_async = cancel::make_deferred();
    // SAFETY: caller's contract.
    let r = unsafe { wait_deferred::<L>(c, m, clock, abstime, timed) };
    // SAFETY: the mutex is held again (or was never released), and the
    // frames up to the C caller are plain old frames (caller's contract).
    unsafe { cancel::restore_type(was_async) };
    r
}

/// [`wait`] with deferred (or disabled) cancellation.
///
/// # Safety
///
/// As for [`wait`].
unsafe fn wait_deferred<L: InPlace>(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    clock: Option<clockid_t>,
    abstime: *const timespec,
    timed: bool,
) -> c_int {
    // SAFETY: caller's contract.
    let r = unsafe { repr(c) };
    if forwarded(r) {
        // SAFETY: caller's contract.
        return unsafe { wait_glibc::<L>(c, m, clock, abstime, timed) };
    }
    let flags = r.flags.load(Ordering::Relaxed);
    let clock = clock.unwrap_or(if flags & COND_MONOTONIC != 0 {
        libc::CLOCK_MONOTONIC
    } else {
        libc::CLOCK_REALTIME
    });
    // SAFETY: `abstime` is null or readable (caller's contract).
    if timed && (!time::clock_ok(clock) || !unsafe { time::valid(abstime) }) {
        return libc::EINVAL;
    }
    // A deadline before the clock's epoch has passed (the kernel would reject
    // it with EINVAL): time out at once with the mutex still held, as glibc.
    // SAFETY: `abstime` is valid (checked above).
    if timed && unsafe { (*abstime).tv_sec } < 0 {
        if stats::enabled() {
            stats::COND_TIMEOUTS.fetch_add(1, Ordering::Relaxed);
        }
        return libc::ETIMEDOUT;
    }
    let epoch = cancel::epoch();
    // SAFETY: the mutex is held, nothing is registered yet, and no frame up to
    // the C caller has anything to drop (caller's contract).
    unsafe { cancel::testcancel() };
    let Ok(reg) = cancel::register(&r.seq, flags & COND_PSHARED != 0, epoch) else {
        // A cancel came since the check: act on it (the mutex is still held),
        // or, if it was another thread's or is disabled, return as a spurious
        // wake-up.
        // SAFETY: as above.
        unsafe { cancel::testcancel() };
        return 0;
    };
    r.waiters.fetch_add(1, Ordering::SeqCst);
    let seq = r.seq.load(Ordering::SeqCst);
    // SAFETY: caller's contract.
    let saved = match unsafe { mutex::unlock_for_wait::<L>(m) } {
        Ok(s) => s,
        Err(e) => {
            reg.leave();
            // Release: the last access to the condvar (see `destroy`).
            r.waiters.fetch_sub(1, Ordering::Release);
            return e;
        }
    };
    let mut op = libc::FUTEX_WAIT_BITSET | private_flag(flags);
    if timed && clock == libc::CLOCK_REALTIME {
        op |= libc::FUTEX_CLOCK_REALTIME;
    }
    let ts = if timed { abstime } else { core::ptr::null() };
    #[cfg(feature = "test-hooks")]
    crate::hooks::before_sleep(c.cast());
    // No sleep if a canceller already claimed us (it may have bumped `seq`
    // before we read it).
    let ret = if reg.cancelled() {
        0
    } else {
        // SAFETY: `seq` is a live, 4-byte aligned futex word; `ts` is null or a
        // valid absolute timespec; the other arguments are unused by
        // FUTEX_WAIT_BITSET except the bitset (all bits).
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                r.seq.as_ptr(),
                op,
                seq,
                ts,
                core::ptr::null::<u32>(),
                u32::MAX,
            )
        }
    };
    // SAFETY: `__errno_location` returns this thread's errno cell.
    let timed_out = ret == -1 && unsafe { *libc::__errno_location() } == libc::ETIMEDOUT;
    let cancelled = reg.leave();
    // Release: our last access to the condvar, which `destroy` may free next.
    r.waiters.fetch_sub(1, Ordering::Release);
    // SAFETY: caller's contract: `m` is live and was held before the wait.
    let e = unsafe { mutex::relock_after_wait::<L>(m, saved) };
    if stats::enabled() {
        stats::COND_WAITS.fetch_add(1, Ordering::Relaxed);
        if timed_out {
            stats::COND_TIMEOUTS.fetch_add(1, Ordering::Relaxed);
        }
    }
    if cancelled && e == 0 {
        // SAFETY: the mutex is held again and nothing here needs dropping
        // (caller's contract for the frames above).
        unsafe { cancel::testcancel() };
    }
    if e != 0 {
        e
    } else if timed_out {
        libc::ETIMEDOUT
    } else {
        0
    }
}

/// `pthread_cond_signal` (`all == false`) or `pthread_cond_broadcast`.
///
/// # Safety
///
/// `c` points to a live `pthread_cond_t`.
pub unsafe fn wake(c: *mut pthread_cond_t, all: bool) -> c_int {
    // SAFETY: caller's contract.
    let r = unsafe { repr(c) };
    if forwarded(r) {
        // SAFETY: glibc's condvar.
        return unsafe { wake_glibc(c, all) };
    }
    if stats::enabled() {
        stats::COND_WAKES.fetch_add(1, Ordering::Relaxed);
    }
    // Relaxed: a waiter this call must wake counted itself before releasing
    // the mutex, which happens before this call (module docs), so coherence
    // alone makes its increment visible here; no other data is read on it.
    if r.waiters.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let op = libc::FUTEX_WAKE | private_flag(r.flags.load(Ordering::Relaxed));
    let n: c_int = if all { c_int::MAX } else { 1 };
    let word = r.seq.as_ptr();
    // SeqCst: the futex protocol's store before the wake (a waiter that reads
    // it in the kernel's compare does not sleep). Our last access to the
    // condvar: a waiter this wakes may free it (module docs).
    r.seq.fetch_add(1, Ordering::SeqCst);
    #[cfg(feature = "test-hooks")]
    crate::hooks::after_release(c.cast());
    // SAFETY: FUTEX_WAKE on a private futex uses `word` as a key only and
    // reads no memory, so it is sound even if the condvar is freed by now.
    unsafe { libc::syscall(libc::SYS_futex, word, op, n) };
    0
}
