//! `pthread_mutex_*` on our locks, in place (see [`crate::layout`]).
//!
//! Normal and adaptive mutexes are the bare lock: `lock` is the lock's fast
//! path after one load of `__kind`. Recursive and errorcheck mutexes add the
//! owner (`pthread_self()`) and, for recursive ones, the count, with glibc's
//! return codes: `EDEADLK` for an errorcheck relock, `EPERM` for an unlock by a
//! non-owner, `EAGAIN` when the recursion count would overflow, `EBUSY` from
//! `trylock` (and from `destroy` of a locked mutex), `ETIMEDOUT`, and `EINVAL`
//! for a bad clock or `timespec` (checked only when the lock is not free, as
//! glibc does).
//!
//! Robust, priority-inheritance, priority-protect and process-shared mutexes are
//! initialized by glibc, which sets flag bits in `__kind`; every later call sees
//! those bits and forwards to glibc.

use crate::layout::{self, KIND_ERRORCHECK, KIND_RECURSIVE, MutexRepr};
use crate::{cancel, real, stats, time};
use core::ffi::c_int;
use core::sync::atomic::Ordering;
use libc::{clockid_t, pthread_mutex_t, pthread_mutexattr_t, timespec};
use std::time::Instant;

/// A lock that can live in the first 16 bytes of a `pthread_mutex_t`: the
/// `lock_api` raw mutexes with a guard forged at unlock (their guards carry no
/// state that the unlock needs).
pub trait InPlace: Sync {
    /// Acquires the lock.
    fn acquire(&self);
    /// Acquires the lock if it is free.
    fn try_acquire(&self) -> bool;
    /// Acquires the lock unless `deadline` passes first.
    fn acquire_until(&self, deadline: Instant) -> bool;
    /// Releases the lock.
    ///
    /// # Safety
    ///
    /// The lock is held by this context's acquisition.
    unsafe fn release(&self);
    /// Whether the lock is held (a snapshot).
    fn held(&self) -> bool;
}

macro_rules! in_place_numa_spin {
    ($t:ty) => {
        impl InPlace for $t {
            #[inline]
            fn acquire(&self) {
                lock_api::RawMutex::lock(self);
            }
            #[inline]
            fn try_acquire(&self) -> bool {
                lock_api::RawMutex::try_lock(self).is_some()
            }
            fn acquire_until(&self, deadline: Instant) -> bool {
                lock_api::RawMutexTimed::try_lock_until(self, deadline).is_some()
            }
            #[inline]
            unsafe fn release(&self) {
                // SAFETY: the lock is held (caller's contract); numa-spin guards
                // are zero-sized markers, so a new one stands for the acquisition.
                unsafe { lock_api::RawMutex::unlock(self, lock_api::GuardSend::new()) }
            }
            #[inline]
            fn held(&self) -> bool {
                lock_api::RawMutex::is_locked(self)
            }
        }
    };
}

in_place_numa_spin!(numa_spin::RawMutex);
in_place_numa_spin!(numa_spin::RawQueuedMutex);
in_place_numa_spin!(numa_spin::RawHqMutex);
in_place_numa_spin!(cst_mutex::RawMutex);

/// Our view of `m`.
///
/// # Safety
///
/// `m` points to a live `pthread_mutex_t`.
#[inline(always)]
unsafe fn repr<'a>(m: *mut pthread_mutex_t) -> &'a MutexRepr {
    // SAFETY: `MutexRepr` has the size and alignment of `pthread_mutex_t`
    // (asserted in `layout`), and every field is an atomic or plain integer, so
    // any bytes are a valid value; shared access goes through atomics.
    unsafe { &*m.cast::<MutexRepr>() }
}

/// The lock `L` in `m`'s first 16 bytes.
///
/// # Safety
///
/// `m` points to a live `pthread_mutex_t` whose first bytes hold an `L` (or are
/// zero), and the process uses `L` for every mutex (the mode is fixed).
#[inline(always)]
unsafe fn lock_of<'a, L: InPlace>(m: *mut pthread_mutex_t) -> &'a L {
    // SAFETY: `L` fits at offset 0 (asserted in `layout`); the bytes are an `L`
    // (caller's contract).
    unsafe { &*m.cast::<L>() }
}

/// The caller's thread identity (`pthread_self`: a read of the thread pointer,
/// valid in threads not created by `pthread_create` too).
#[inline]
fn me() -> u64 {
    // SAFETY: `pthread_self` has no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

/// Acquires with counting when stats are on: 0, or [`cancel::ASYNC`] (the
/// export puts asynchronous cancellation back), or `RETRY | ASYNC` (not
/// acquired, see [`cancel::blocking`]). The slow path runs with
/// cancellation disabled.
#[inline(always)]
fn acquire_counted<L: InPlace>(l: &L, r: &MutexRepr) -> c_int {
    let contended = !l.try_acquire();
    let mut code = 0;
    if contended {
        code = acquire_slow(l, None);
        if code & cancel::RETRY != 0 {
            return code;
        }
    }
    if stats::enabled() {
        stats::MUTEX.acquired(contended, Some(&r.last_node));
    }
    code
}

/// The blocking part of an acquisition (see [`cancel::blocking`]).
#[cold]
fn acquire_slow<L: InPlace>(l: &L, until: Option<Instant>) -> c_int {
    cancel::blocking(until, |at| match at {
        None => {
            l.acquire();
            true
        }
        Some(at) => l.acquire_until(at),
    })
}

/// `pthread_mutex_lock` on lock `L`. The result may carry
/// [`cancel::ASYNC`] or be `RETRY | ASYNC`: the export passes it to
/// [`cancel::finish`].
///
/// # Safety
///
/// `m` points to a live `pthread_mutex_t` used only with lock `L`.
#[inline]
pub unsafe fn lock<L: InPlace>(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: caller's contract.
    let r = unsafe { repr(m) };
    let kind = r.kind.load(Ordering::Relaxed);
    // SAFETY: caller's contract.
    let l = unsafe { lock_of::<L>(m) };
    if kind == layout::KIND_NORMAL || kind == layout::KIND_ADAPTIVE {
        return acquire_counted(l, r);
    }
    // SAFETY: caller's contract.
    unsafe { lock_kind(l, r, m, kind, None) }
}

/// The lock paths of recursive, errorcheck and glibc-only mutexes, untimed
/// (`deadline == None`) or timed (`Some((clock, abstime))`).
///
/// # Safety
///
/// As for [`lock`]; a timed call's `abstime` is a readable pointer or null.
#[cold]
unsafe fn lock_kind<L: InPlace>(
    l: &L,
    r: &MutexRepr,
    m: *mut pthread_mutex_t,
    kind: i32,
    deadline: Option<(clockid_t, *const timespec)>,
) -> c_int {
    if !layout::kind_is_ours(kind) {
        stats::forwarded();
        // SAFETY: a glibc-initialized mutex, handed to glibc unchanged.
        return unsafe {
            match deadline {
                None => real::pthread_mutex_lock(m),
                Some((c, t)) => real::pthread_mutex_clocklock(m, c, t),
            }
        };
    }
    let me = me();
    if kind == KIND_RECURSIVE || kind == KIND_ERRORCHECK {
        // Relaxed: only this thread can have stored `me` here.
        if r.owner.load(Ordering::Relaxed) == me {
            if kind == KIND_ERRORCHECK {
                return libc::EDEADLK;
            }
            let c = r.count.load(Ordering::Relaxed);
            if c == u32::MAX {
                return libc::EAGAIN;
            }
            r.count.store(c + 1, Ordering::Relaxed);
            if stats::enabled() {
                stats::MUTEX.acquired(false, None);
            }
            return 0;
        }
    }
    let mut async_cancel = 0;
    match deadline {
        None => {
            let c = acquire_counted(l, r);
            if c & cancel::RETRY != 0 {
                return c;
            }
            async_cancel = c & cancel::ASYNC;
        }
        Some((clock, abstime)) => {
            if !l.try_acquire() {
                // SAFETY: `abstime` is null or readable (caller's contract).
                if !time::clock_ok(clock) || !unsafe { time::valid(abstime) } {
                    return libc::EINVAL;
                }
                // SAFETY: validated just above.
                let Ok(at) = (unsafe { time::deadline(clock, abstime) }) else {
                    return libc::ETIMEDOUT;
                };
                let c = acquire_slow(l, Some(at));
                if c & !cancel::ASYNC != 0 {
                    return c;
                }
                async_cancel = c & cancel::ASYNC;
                if stats::enabled() {
                    stats::MUTEX.acquired(true, Some(&r.last_node));
                }
            } else if stats::enabled() {
                stats::MUTEX.acquired(false, Some(&r.last_node));
            }
        }
    }
    if kind == KIND_RECURSIVE || kind == KIND_ERRORCHECK {
        r.count.store(0, Ordering::Relaxed);
        r.owner.store(me, Ordering::Relaxed);
    }
    async_cancel
}

/// `pthread_mutex_timedlock` / `pthread_mutex_clocklock` on lock `L`; the
/// result as for [`lock`].
///
/// # Safety
///
/// As for [`lock`]; `abstime` is null or readable.
pub unsafe fn timedlock<L: InPlace>(
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    abstime: *const timespec,
) -> c_int {
    // SAFETY: caller's contract.
    let r = unsafe { repr(m) };
    let kind = r.kind.load(Ordering::Relaxed);
    if layout::kind_is_ours(kind) && !time::clock_ok(clock) {
        return libc::EINVAL;
    }
    // SAFETY: caller's contract.
    unsafe { lock_kind(lock_of::<L>(m), r, m, kind, Some((clock, abstime))) }
}

/// `pthread_mutex_trylock` on lock `L`.
///
/// # Safety
///
/// As for [`lock`].
pub unsafe fn trylock<L: InPlace>(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: caller's contract.
    let r = unsafe { repr(m) };
    let kind = r.kind.load(Ordering::Relaxed);
    if !layout::kind_is_ours(kind) {
        stats::forwarded();
        // SAFETY: glibc's mutex, handed over unchanged.
        return unsafe { real::pthread_mutex_trylock(m) };
    }
    // SAFETY: caller's contract.
    let l = unsafe { lock_of::<L>(m) };
    let me = me();
    if kind == KIND_RECURSIVE && r.owner.load(Ordering::Relaxed) == me {
        let c = r.count.load(Ordering::Relaxed);
        if c == u32::MAX {
            return libc::EAGAIN;
        }
        r.count.store(c + 1, Ordering::Relaxed);
        return 0;
    }
    if !l.try_acquire() {
        return libc::EBUSY;
    }
    if stats::enabled() {
        stats::MUTEX.acquired(false, Some(&r.last_node));
    }
    if kind == KIND_RECURSIVE || kind == KIND_ERRORCHECK {
        r.count.store(0, Ordering::Relaxed);
        r.owner.store(me, Ordering::Relaxed);
    }
    0
}

/// `pthread_mutex_unlock` on lock `L`.
///
/// # Safety
///
/// As for [`lock`]. A normal mutex must be held by the caller (as with glibc,
/// unlocking a free normal mutex is undefined).
#[inline]
pub unsafe fn unlock<L: InPlace>(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: caller's contract.
    let r = unsafe { repr(m) };
    let kind = r.kind.load(Ordering::Relaxed);
    if kind == layout::KIND_NORMAL || kind == layout::KIND_ADAPTIVE {
        // SAFETY: the caller holds the lock (contract of a normal mutex).
        unsafe { lock_of::<L>(m).release() };
        return 0;
    }
    // SAFETY: caller's contract.
    unsafe { unlock_kind::<L>(r, m, kind) }
}

#[cold]
unsafe fn unlock_kind<L: InPlace>(r: &MutexRepr, m: *mut pthread_mutex_t, kind: i32) -> c_int {
    if !layout::kind_is_ours(kind) {
        stats::forwarded();
        // SAFETY: glibc's mutex, handed over unchanged.
        return unsafe { real::pthread_mutex_unlock(m) };
    }
    if r.owner.load(Ordering::Relaxed) != me() {
        return libc::EPERM;
    }
    let c = r.count.load(Ordering::Relaxed);
    if c > 0 {
        r.count.store(c - 1, Ordering::Relaxed);
        return 0;
    }
    r.owner.store(0, Ordering::Relaxed);
    // SAFETY: we are the owner, so the lock is held by our acquisition.
    unsafe { lock_of::<L>(m).release() };
    0
}

/// Whether `m` is one of our mutexes (not a glibc-initialized kind).
///
/// # Safety
///
/// `m` points to a live `pthread_mutex_t`.
pub(crate) unsafe fn is_ours(m: *mut pthread_mutex_t) -> bool {
    // SAFETY: caller's contract.
    layout::kind_is_ours(unsafe { repr(m) }.kind.load(Ordering::Relaxed))
}

/// What a condvar wait must restore: the recursion count of a recursive mutex.
pub(crate) struct Saved {
    count: u32,
}

/// Releases `m` completely for a condvar wait (a recursive mutex whatever its
/// count). `EPERM` if a recursive or errorcheck mutex is not the caller's.
///
/// # Safety
///
/// As for [`unlock`].
pub(crate) unsafe fn unlock_for_wait<L: InPlace>(m: *mut pthread_mutex_t) -> Result<Saved, c_int> {
    // SAFETY: caller's contract.
    let r = unsafe { repr(m) };
    let kind = r.kind.load(Ordering::Relaxed);
    let mut saved = Saved { count: 0 };
    if kind == KIND_RECURSIVE || kind == KIND_ERRORCHECK {
        if r.owner.load(Ordering::Relaxed) != me() {
            return Err(libc::EPERM);
        }
        saved.count = r.count.load(Ordering::Relaxed);
        r.count.store(0, Ordering::Relaxed);
    }
    // SAFETY: caller's contract; for a recursive mutex the count is now 0, so
    // this is the final release.
    match unsafe { unlock::<L>(m) } {
        0 => Ok(saved),
        e => Err(e),
    }
}

/// Re-takes `m` after a condvar wait and restores what [`unlock_for_wait`] saved.
///
/// # Safety
///
/// As for [`lock`].
pub(crate) unsafe fn relock_after_wait<L: InPlace>(m: *mut pthread_mutex_t, saved: Saved) -> c_int {
    // SAFETY: caller's contract.
    let e = unsafe { lock::<L>(m) };
    // The condvar waits run deferred (or disabled): no `cancel::ASYNC` here.
    debug_assert!(e & cancel::ASYNC == 0);
    if e == 0 && saved.count > 0 {
        // SAFETY: caller's contract.
        unsafe { repr(m) }
            .count
            .store(saved.count, Ordering::Relaxed);
    }
    e
}

/// `pthread_mutex_init` in one of our modes.
///
/// # Safety
///
/// `m` is writable; `attr` is null or an initialized attribute object.
pub unsafe fn init(m: *mut pthread_mutex_t, attr: *const pthread_mutexattr_t) -> c_int {
    let mut kind: c_int = 0;
    if !attr.is_null() {
        let (mut robust, mut protocol, mut pshared) = (0, 0, 0);
        // SAFETY: `attr` is an initialized attribute object (caller's contract);
        // the out-pointers are locals.
        unsafe {
            real::pthread_mutexattr_gettype(attr, &mut kind);
            real::pthread_mutexattr_getrobust(attr, &mut robust);
            real::pthread_mutexattr_getprotocol(attr, &mut protocol);
            real::pthread_mutexattr_getpshared(attr, &mut pshared);
        }
        if robust != libc::PTHREAD_MUTEX_STALLED
            || protocol != libc::PTHREAD_PRIO_NONE
            || pshared != libc::PTHREAD_PROCESS_PRIVATE
        {
            // SAFETY: caller's contract; glibc owns this mutex from now on.
            return unsafe { real::pthread_mutex_init(m, attr) };
        }
        if !layout::kind_is_ours(kind) {
            return libc::EINVAL;
        }
    }
    // SAFETY: `m` is writable for 40 bytes (caller's contract).
    unsafe { core::ptr::write_bytes(m.cast::<u8>(), 0, core::mem::size_of::<pthread_mutex_t>()) };
    // SAFETY: as above.
    unsafe { repr(m) }.kind.store(kind, Ordering::Relaxed);
    0
}

/// `pthread_mutex_destroy` on lock `L`: `EBUSY` if locked; else resets the
/// bytes (no lock allocates anything) and marks the mutex destroyed as glibc
/// does.
///
/// # Safety
///
/// As for [`lock`]; no thread uses `m` concurrently.
pub unsafe fn destroy<L: InPlace>(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: caller's contract.
    let r = unsafe { repr(m) };
    let kind = r.kind.load(Ordering::Relaxed);
    if !layout::kind_is_ours(kind) {
        // SAFETY: glibc's mutex.
        return unsafe { real::pthread_mutex_destroy(m) };
    }
    // SAFETY: caller's contract.
    if unsafe { lock_of::<L>(m) }.held() {
        return libc::EBUSY;
    }
    // SAFETY: nobody uses the lock (caller's contract), so we may write its
    // bytes: zero is a valid (free) lock.
    unsafe {
        core::ptr::write_bytes(m.cast::<u8>(), 0, core::mem::size_of::<pthread_mutex_t>());
    }
    r.kind.store(layout::KIND_DESTROYED, Ordering::Relaxed);
    0
}

/// Runs `$body` with `$L` bound to the mode's mutex type; `pthread` runs `$glibc`.
#[cfg_attr(test, allow(unused_macros))]
macro_rules! with_mutex {
    ($mode:expr, $L:ident => $body:expr, pthread => $glibc:expr) => {
        match $mode {
            $crate::mode::Mode::Pthread => $glibc,
            $crate::mode::Mode::Cna => {
                type $L = numa_spin::RawMutex;
                $body
            }
            $crate::mode::Mode::Queued => {
                type $L = numa_spin::RawQueuedMutex;
                $body
            }
            $crate::mode::Mode::Hq => {
                type $L = numa_spin::RawHqMutex;
                $body
            }
            $crate::mode::Mode::Cst => {
                type $L = cst_mutex::RawMutex;
                $body
            }
        }
    };
}
#[cfg_attr(test, allow(unused_imports))]
pub(crate) use with_mutex;
