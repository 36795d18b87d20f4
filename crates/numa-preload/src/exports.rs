//! The exported `pthread_*` symbols: one match on the mode, then the generic
//! implementation for that lock, or glibc for `NUMA_LOCK=pthread`.
//!
//! The symbols are unversioned: the dynamic linker binds an unversioned
//! definition in a preloaded object to versioned references too
//! (`pthread_cond_wait@GLIBC_2.3.2`, `pthread_mutex_clocklock@GLIBC_2.34`, ...).
//! They are left out of unit-test builds, where they would replace the test
//! binary's own locks.

#![cfg(not(test))]

use crate::mode::{self, Mode};
use crate::mutex::with_mutex;
use crate::rwlock::Wait;
use crate::{cancel, cond, mutex, real, rwlock, stats};
use core::ffi::c_int;
use libc::{
    clockid_t, pthread_cond_t, pthread_condattr_t, pthread_mutex_t, pthread_mutexattr_t,
    pthread_rwlock_t, pthread_rwlockattr_t, timespec,
};

/// The caller's `errno`, put back when dropped: glibc's pthread functions
/// never change `errno`, while our paths make system calls (futex waits that
/// fail with `EAGAIN`, `ETIMEDOUT` or `EINTR`, `sched_yield`) that may.
/// Every export saves it on entry and restores it on return.
struct SavedErrno(c_int);

impl SavedErrno {
    #[inline]
    fn save() -> Self {
        // SAFETY: `__errno_location` returns this thread's errno cell.
        SavedErrno(unsafe { *libc::__errno_location() })
    }
}

impl Drop for SavedErrno {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as in `save`.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

#[used]
#[unsafe(link_section = ".init_array")]
static CONSTRUCTOR: extern "C" fn() = crate::init::constructor;

#[used]
#[unsafe(link_section = ".fini_array")]
static DESTRUCTOR: extern "C" fn() = stats::report;

/// Defines each `extern "C" fn NAME(ARGS) -> c_int` that has one
/// implementation for all of our locks: glibc's `NAME` for
/// `NUMA_LOCK=pthread` (counted as forwarded), else `OURS`.
macro_rules! export {
    ($(fn $name:ident($($arg:ident: $ty:ty),*) => $ours:expr;)*) => {$(
        #[doc = concat!("`", stringify!($name), "(3)`: see the [crate docs](crate).")]
        ///
        /// # Safety
        ///
        #[doc = concat!("The contract of `", stringify!($name), "(3)`.")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            let _errno = SavedErrno::save();
            // SAFETY: our caller's contract is the C function's, which is what
            // each implementation (and glibc) requires.
            unsafe {
                if mode::current() == Mode::Pthread {
                    stats::forwarded();
                    return real::$name($($arg),*);
                }
                $ours
            }
        }
    )*};
}

export! {
    fn pthread_mutex_init(m: *mut pthread_mutex_t, a: *const pthread_mutexattr_t) => mutex::init(m, a);
    fn pthread_cond_init(c: *mut pthread_cond_t, a: *const pthread_condattr_t) => cond::init(c, a);
    fn pthread_cond_destroy(c: *mut pthread_cond_t) => cond::destroy(c);
    fn pthread_cond_signal(c: *mut pthread_cond_t) => cond::wake(c, false);
    fn pthread_cond_broadcast(c: *mut pthread_cond_t) => cond::wake(c, true);
    fn pthread_rwlock_init(l: *mut pthread_rwlock_t, a: *const pthread_rwlockattr_t) => rwlock::init(l, a);
    fn pthread_rwlock_destroy(l: *mut pthread_rwlock_t) => rwlock::destroy(l);
    fn pthread_rwlock_tryrdlock(l: *mut pthread_rwlock_t) => rwlock::rdlock(l, Wait::Try);
    fn pthread_rwlock_trywrlock(l: *mut pthread_rwlock_t) => rwlock::wrlock(l, Wait::Try);
    fn pthread_rwlock_unlock(l: *mut pthread_rwlock_t) => rwlock::unlock(l);
}

/// `pthread_rwlock_rdlock(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_rwlock_rdlock(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pthread_rwlock_rdlock(l: *mut pthread_rwlock_t) -> c_int {
    // A thread with asynchronous cancellation may be cancelled here (see
    // `cancel::finish`): this frame holds nothing to drop, errno is put back
    // by hand.
    // SAFETY: `__errno_location` returns this thread's errno cell.
    let errno = unsafe { *libc::__errno_location() };
    loop {
        // SAFETY: our caller's contract is the C function's, which is what
        // each implementation (and glibc) requires; `finish` is called by
        // this frame, which has nothing to drop.
        let r = unsafe {
            if mode::current() == Mode::Pthread {
                stats::forwarded();
                real::pthread_rwlock_rdlock(l)
            } else {
                rwlock::rdlock(l, Wait::Block)
            }
        };
        // SAFETY: as above.
        if let Some(r) = unsafe { cancel::finish(r) } {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
            return r;
        }
    }
}

/// `pthread_rwlock_timedrdlock(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_rwlock_timedrdlock(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pthread_rwlock_timedrdlock(
    l: *mut pthread_rwlock_t,
    t: *const timespec,
) -> c_int {
    // A thread with asynchronous cancellation may be cancelled here (see
    // `cancel::finish`): this frame holds nothing to drop, errno is put back
    // by hand.
    // SAFETY: `__errno_location` returns this thread's errno cell.
    let errno = unsafe { *libc::__errno_location() };
    loop {
        // SAFETY: our caller's contract is the C function's, which is what
        // each implementation (and glibc) requires; `finish` is called by
        // this frame, which has nothing to drop.
        let r = unsafe {
            if mode::current() == Mode::Pthread {
                stats::forwarded();
                real::pthread_rwlock_timedrdlock(l, t)
            } else {
                rwlock::rdlock(l, Wait::Until(libc::CLOCK_REALTIME, t))
            }
        };
        // SAFETY: as above.
        if let Some(r) = unsafe { cancel::finish(r) } {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
            return r;
        }
    }
}

/// `pthread_rwlock_clockrdlock(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_rwlock_clockrdlock(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pthread_rwlock_clockrdlock(
    l: *mut pthread_rwlock_t,
    k: clockid_t,
    t: *const timespec,
) -> c_int {
    // A thread with asynchronous cancellation may be cancelled here (see
    // `cancel::finish`): this frame holds nothing to drop, errno is put back
    // by hand.
    // SAFETY: `__errno_location` returns this thread's errno cell.
    let errno = unsafe { *libc::__errno_location() };
    loop {
        // SAFETY: our caller's contract is the C function's, which is what
        // each implementation (and glibc) requires; `finish` is called by
        // this frame, which has nothing to drop.
        let r = unsafe {
            if mode::current() == Mode::Pthread {
                stats::forwarded();
                real::pthread_rwlock_clockrdlock(l, k, t)
            } else {
                rwlock::rdlock(l, Wait::Until(k, t))
            }
        };
        // SAFETY: as above.
        if let Some(r) = unsafe { cancel::finish(r) } {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
            return r;
        }
    }
}

/// `pthread_rwlock_wrlock(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_rwlock_wrlock(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pthread_rwlock_wrlock(l: *mut pthread_rwlock_t) -> c_int {
    // A thread with asynchronous cancellation may be cancelled here (see
    // `cancel::finish`): this frame holds nothing to drop, errno is put back
    // by hand.
    // SAFETY: `__errno_location` returns this thread's errno cell.
    let errno = unsafe { *libc::__errno_location() };
    loop {
        // SAFETY: our caller's contract is the C function's, which is what
        // each implementation (and glibc) requires; `finish` is called by
        // this frame, which has nothing to drop.
        let r = unsafe {
            if mode::current() == Mode::Pthread {
                stats::forwarded();
                real::pthread_rwlock_wrlock(l)
            } else {
                rwlock::wrlock(l, Wait::Block)
            }
        };
        // SAFETY: as above.
        if let Some(r) = unsafe { cancel::finish(r) } {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
            return r;
        }
    }
}

/// `pthread_rwlock_timedwrlock(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_rwlock_timedwrlock(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pthread_rwlock_timedwrlock(
    l: *mut pthread_rwlock_t,
    t: *const timespec,
) -> c_int {
    // A thread with asynchronous cancellation may be cancelled here (see
    // `cancel::finish`): this frame holds nothing to drop, errno is put back
    // by hand.
    // SAFETY: `__errno_location` returns this thread's errno cell.
    let errno = unsafe { *libc::__errno_location() };
    loop {
        // SAFETY: our caller's contract is the C function's, which is what
        // each implementation (and glibc) requires; `finish` is called by
        // this frame, which has nothing to drop.
        let r = unsafe {
            if mode::current() == Mode::Pthread {
                stats::forwarded();
                real::pthread_rwlock_timedwrlock(l, t)
            } else {
                rwlock::wrlock(l, Wait::Until(libc::CLOCK_REALTIME, t))
            }
        };
        // SAFETY: as above.
        if let Some(r) = unsafe { cancel::finish(r) } {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
            return r;
        }
    }
}

/// `pthread_rwlock_clockwrlock(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_rwlock_clockwrlock(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pthread_rwlock_clockwrlock(
    l: *mut pthread_rwlock_t,
    k: clockid_t,
    t: *const timespec,
) -> c_int {
    // A thread with asynchronous cancellation may be cancelled here (see
    // `cancel::finish`): this frame holds nothing to drop, errno is put back
    // by hand.
    // SAFETY: `__errno_location` returns this thread's errno cell.
    let errno = unsafe { *libc::__errno_location() };
    loop {
        // SAFETY: our caller's contract is the C function's, which is what
        // each implementation (and glibc) requires; `finish` is called by
        // this frame, which has nothing to drop.
        let r = unsafe {
            if mode::current() == Mode::Pthread {
                stats::forwarded();
                real::pthread_rwlock_clockwrlock(l, k, t)
            } else {
                rwlock::wrlock(l, Wait::Until(k, t))
            }
        };
        // SAFETY: as above.
        if let Some(r) = unsafe { cancel::finish(r) } {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
            return r;
        }
    }
}

/// `pthread_mutex_destroy(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_mutex_destroy(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_destroy(m: *mut pthread_mutex_t) -> c_int {
    let _errno = SavedErrno::save();
    // SAFETY: our caller's contract is the C function's, which is what each
    // implementation (and glibc) requires.
    unsafe {
        with_mutex!(mode::current(), L => mutex::destroy::<L>(m), pthread => {
            stats::forwarded();
            real::pthread_mutex_destroy(m)
        })
    }
}

/// `pthread_mutex_lock(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_mutex_lock(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int {
    // A thread with asynchronous cancellation may be cancelled here (see
    // `cancel::finish`): this frame holds nothing to drop, errno is put back
    // by hand.
    // SAFETY: `__errno_location` returns this thread's errno cell.
    let errno = unsafe { *libc::__errno_location() };
    loop {
        // SAFETY: our caller's contract is the C function's, which is what
        // each implementation (and glibc) requires; `finish` is called by
        // this frame, which has nothing to drop.
        let r = unsafe {
            with_mutex!(mode::current(), L => mutex::lock::<L>(m), pthread => {
                stats::forwarded();
                real::pthread_mutex_lock(m)
            })
        };
        // SAFETY: as above.
        if let Some(r) = unsafe { cancel::finish(r) } {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
            return r;
        }
    }
}

/// `pthread_mutex_trylock(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_mutex_trylock(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int {
    let _errno = SavedErrno::save();
    // SAFETY: our caller's contract is the C function's, which is what each
    // implementation (and glibc) requires.
    unsafe {
        with_mutex!(mode::current(), L => mutex::trylock::<L>(m), pthread => {
            stats::forwarded();
            real::pthread_mutex_trylock(m)
        })
    }
}

/// `pthread_mutex_timedlock(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_mutex_timedlock(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pthread_mutex_timedlock(
    m: *mut pthread_mutex_t,
    t: *const timespec,
) -> c_int {
    // A thread with asynchronous cancellation may be cancelled here (see
    // `cancel::finish`): this frame holds nothing to drop, errno is put back
    // by hand.
    // SAFETY: `__errno_location` returns this thread's errno cell.
    let errno = unsafe { *libc::__errno_location() };
    loop {
        // SAFETY: our caller's contract is the C function's, which is what
        // each implementation (and glibc) requires; `finish` is called by
        // this frame, which has nothing to drop.
        let r = unsafe {
            with_mutex!(mode::current(), L => mutex::timedlock::<L>(m, libc::CLOCK_REALTIME, t), pthread => {
                stats::forwarded();
                real::pthread_mutex_timedlock(m, t)
            })
        };
        // SAFETY: as above.
        if let Some(r) = unsafe { cancel::finish(r) } {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
            return r;
        }
    }
}

/// `pthread_mutex_clocklock(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_mutex_clocklock(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pthread_mutex_clocklock(
    m: *mut pthread_mutex_t,
    k: clockid_t,
    t: *const timespec,
) -> c_int {
    // A thread with asynchronous cancellation may be cancelled here (see
    // `cancel::finish`): this frame holds nothing to drop, errno is put back
    // by hand.
    // SAFETY: `__errno_location` returns this thread's errno cell.
    let errno = unsafe { *libc::__errno_location() };
    loop {
        // SAFETY: our caller's contract is the C function's, which is what
        // each implementation (and glibc) requires; `finish` is called by
        // this frame, which has nothing to drop.
        let r = unsafe {
            with_mutex!(mode::current(), L => mutex::timedlock::<L>(m, k, t), pthread => {
                stats::forwarded();
                real::pthread_mutex_clocklock(m, k, t)
            })
        };
        // SAFETY: as above.
        if let Some(r) = unsafe { cancel::finish(r) } {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
            return r;
        }
    }
}

/// `pthread_mutex_unlock(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_mutex_unlock(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_unlock(m: *mut pthread_mutex_t) -> c_int {
    let _errno = SavedErrno::save();
    // SAFETY: our caller's contract is the C function's, which is what each
    // implementation (and glibc) requires.
    unsafe {
        with_mutex!(mode::current(), L => mutex::unlock::<L>(m), pthread => {
            stats::forwarded();
            real::pthread_mutex_unlock(m)
        })
    }
}

/// `pthread_cond_wait(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_cond_wait(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pthread_cond_wait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
) -> c_int {
    // A cancellation point: glibc's wait and ours may unwind through this
    // frame (see `cancel`), so it holds nothing to drop: errno is saved and
    // restored by hand (after a cancel it no longer matters).
    // SAFETY: `__errno_location` returns this thread's errno cell.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: our caller's contract is the C function's, which is what each
    // implementation (and glibc) requires; this frame and the implementation's
    // are plain old frames of unwinding functions (`cond::wait`'s contract).
    let r = unsafe {
        with_mutex!(mode::current(), L => cond::wait::<L>(c, m, None, core::ptr::null(), false), pthread => {
            stats::forwarded();
            return real::pthread_cond_wait(c, m);
        })
    };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    r
}

/// `pthread_cond_timedwait(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_cond_timedwait(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pthread_cond_timedwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    t: *const timespec,
) -> c_int {
    // A cancellation point: glibc's wait and ours may unwind through this
    // frame (see `cancel`), so it holds nothing to drop: errno is saved and
    // restored by hand (after a cancel it no longer matters).
    // SAFETY: `__errno_location` returns this thread's errno cell.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: our caller's contract is the C function's, which is what each
    // implementation (and glibc) requires; this frame and the implementation's
    // are plain old frames of unwinding functions (`cond::wait`'s contract).
    let r = unsafe {
        with_mutex!(mode::current(), L => cond::wait::<L>(c, m, None, t, true), pthread => {
            stats::forwarded();
            return real::pthread_cond_timedwait(c, m, t);
        })
    };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    r
}

/// `pthread_cond_clockwait(3)`: see the [crate docs](crate).
///
/// # Safety
///
/// The contract of `pthread_cond_clockwait(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pthread_cond_clockwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    k: clockid_t,
    t: *const timespec,
) -> c_int {
    // A cancellation point: glibc's wait and ours may unwind through this
    // frame (see `cancel`), so it holds nothing to drop: errno is saved and
    // restored by hand (after a cancel it no longer matters).
    // SAFETY: `__errno_location` returns this thread's errno cell.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: our caller's contract is the C function's, which is what each
    // implementation (and glibc) requires; this frame and the implementation's
    // are plain old frames of unwinding functions (`cond::wait`'s contract).
    let r = unsafe {
        with_mutex!(mode::current(), L => cond::wait::<L>(c, m, Some(k), t, true), pthread => {
            stats::forwarded();
            return real::pthread_cond_clockwait(c, m, k, t);
        })
    };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    r
}

/// `pthread_cancel(3)`: glibc's, then, if the target sleeps in one of our
/// condvar waits, a wake-up so that it acts on the cancel (see [`cancel`]).
///
/// # Safety
///
/// The contract of `pthread_cancel(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pthread_cancel(t: libc::pthread_t) -> c_int {
    // errno saved and put back by hand, as by every export (the futex wake
    // below may set it): a thread cancelling itself with asynchronous
    // cancellation unwinds from glibc's call, so this frame holds nothing
    // to drop.
    // SAFETY: `__errno_location` returns this thread's errno cell.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: our caller's contract is glibc's (see above for the unwind).
    let r = unsafe { real::pthread_cancel(t) };
    if r == 0 && mode::current() != Mode::Pthread {
        cancel::wake_cancelled(t);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    r
}
