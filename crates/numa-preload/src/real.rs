//! glibc's own lock functions, for `NUMA_LOCK=pthread` and for the mutex kinds
//! forwarded to glibc (robust, PI, PP, process-shared).
//!
//! Each is found with `dlsym(RTLD_NEXT, name)` (the condvar functions with
//! `dlvsym(.., "GLIBC_2.3.2")`, the current condvar ABI) and cached in an atomic.
//! The constructor resolves all of them, so that `dlsym`'s own allocations happen
//! outside any lock path; a call that comes before the constructor resolves its
//! function lazily.

use core::ffi::{CStr, c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};
use libc::{clockid_t, pthread_cond_t, pthread_mutex_t, pthread_rwlock_t, timespec};

/// A lazily resolved glibc function.
struct Sym {
    addr: AtomicUsize,
    name: &'static CStr,
    version: Option<&'static CStr>,
}

impl Sym {
    const fn new(name: &'static CStr, version: Option<&'static CStr>) -> Sym {
        Sym {
            addr: AtomicUsize::new(0),
            name,
            version,
        }
    }

    #[inline]
    fn get(&self) -> usize {
        // Relaxed: the address is immutable data of a loaded library; racing
        // resolvers store the same value.
        match self.addr.load(Ordering::Relaxed) {
            0 => self.resolve(),
            a => a,
        }
    }

    #[cold]
    fn resolve(&self) -> usize {
        // SAFETY: `dlsym`/`dlvsym` take NUL-terminated names that live for the
        // whole program; `RTLD_NEXT` searches the objects loaded after this one.
        let p: *mut c_void = unsafe {
            match self.version {
                Some(v) => libc::dlvsym(libc::RTLD_NEXT, self.name.as_ptr(), v.as_ptr()),
                None => libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()),
            }
        };
        if p.is_null() {
            let mut b = crate::buf::Buf::new();
            b.push(b"numa-preload: glibc has no ");
            b.push(self.name.to_bytes());
            b.push(b"\n");
            b.write_stderr();
            // SAFETY: `abort` takes no arguments and never returns.
            unsafe { libc::abort() }
        }
        self.addr.store(p as usize, Ordering::Relaxed);
        p as usize
    }
}

macro_rules! real_fns {
    ($( $rust:ident = $sym:literal $(@ $ver:literal)? : extern $abi:literal fn($($arg:ident : $ty:ty),*); )*) => {
        mod syms {
            use super::Sym;
            $(
                #[allow(non_upper_case_globals)]
                pub(super) static $rust: Sym = Sym::new($sym, real_fns!(@ver $($ver)?));
            )*
        }

        /// Resolves every function now (the constructor calls this).
        #[cfg_attr(test, allow(dead_code))]
        pub(crate) fn resolve_all() {
            $( syms::$rust.get(); )*
        }

        $(
            #[doc = concat!("glibc's `", stringify!($rust), "`.")]
            ///
            /// # Safety
            ///
            /// As for the glibc function of that name.
            #[inline]
            pub unsafe fn $rust($($arg: $ty),*) -> c_int {
                let addr = syms::$rust.get();
                // "C-unwind" for glibc's condvar waits, `pthread_cancel` and
                // the blocking lock functions, which may unwind (a cancel's
                // forced unwind; the locks under asynchronous cancellation)
                // through their caller; "C" for the others.
                type F = unsafe extern $abi fn($($ty),*) -> c_int;
                // SAFETY: `addr` is glibc's definition of this symbol (dlsym
                // found it by name, and the version for the condvar ABI), whose C
                // prototype is `F`.
                let f = unsafe { core::mem::transmute::<usize, F>(addr) };
                // SAFETY: forwarded from our caller, whose contract is glibc's.
                unsafe { f($($arg),*) }
            }
        )*
    };
    (@ver) => { None };
    (@ver $v:literal) => { Some($v) };
}

real_fns! {
    pthread_mutex_init = c"pthread_mutex_init": extern "C" fn(m: *mut pthread_mutex_t, a: *const libc::pthread_mutexattr_t);
    pthread_mutex_destroy = c"pthread_mutex_destroy": extern "C" fn(m: *mut pthread_mutex_t);
    pthread_mutex_lock = c"pthread_mutex_lock": extern "C-unwind" fn(m: *mut pthread_mutex_t);
    pthread_mutex_trylock = c"pthread_mutex_trylock": extern "C" fn(m: *mut pthread_mutex_t);
    pthread_mutex_timedlock = c"pthread_mutex_timedlock": extern "C-unwind" fn(m: *mut pthread_mutex_t, t: *const timespec);
    pthread_mutex_clocklock = c"pthread_mutex_clocklock": extern "C-unwind" fn(m: *mut pthread_mutex_t, c: clockid_t, t: *const timespec);
    pthread_mutex_unlock = c"pthread_mutex_unlock": extern "C" fn(m: *mut pthread_mutex_t);
    pthread_cond_init = c"pthread_cond_init" @ c"GLIBC_2.3.2": extern "C" fn(c: *mut pthread_cond_t, a: *const libc::pthread_condattr_t);
    pthread_cond_destroy = c"pthread_cond_destroy" @ c"GLIBC_2.3.2": extern "C" fn(c: *mut pthread_cond_t);
    pthread_cond_wait = c"pthread_cond_wait" @ c"GLIBC_2.3.2": extern "C-unwind" fn(c: *mut pthread_cond_t, m: *mut pthread_mutex_t);
    pthread_cond_timedwait = c"pthread_cond_timedwait" @ c"GLIBC_2.3.2": extern "C-unwind" fn(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, t: *const timespec);
    pthread_cond_clockwait = c"pthread_cond_clockwait": extern "C-unwind" fn(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, k: clockid_t, t: *const timespec);
    pthread_cond_signal = c"pthread_cond_signal" @ c"GLIBC_2.3.2": extern "C" fn(c: *mut pthread_cond_t);
    pthread_cond_broadcast = c"pthread_cond_broadcast" @ c"GLIBC_2.3.2": extern "C" fn(c: *mut pthread_cond_t);
    pthread_rwlock_init = c"pthread_rwlock_init": extern "C" fn(l: *mut pthread_rwlock_t, a: *const libc::pthread_rwlockattr_t);
    pthread_rwlock_destroy = c"pthread_rwlock_destroy": extern "C" fn(l: *mut pthread_rwlock_t);
    pthread_rwlock_rdlock = c"pthread_rwlock_rdlock": extern "C-unwind" fn(l: *mut pthread_rwlock_t);
    pthread_rwlock_tryrdlock = c"pthread_rwlock_tryrdlock": extern "C" fn(l: *mut pthread_rwlock_t);
    pthread_rwlock_timedrdlock = c"pthread_rwlock_timedrdlock": extern "C-unwind" fn(l: *mut pthread_rwlock_t, t: *const timespec);
    pthread_rwlock_clockrdlock = c"pthread_rwlock_clockrdlock": extern "C-unwind" fn(l: *mut pthread_rwlock_t, c: clockid_t, t: *const timespec);
    pthread_rwlock_wrlock = c"pthread_rwlock_wrlock": extern "C-unwind" fn(l: *mut pthread_rwlock_t);
    pthread_rwlock_trywrlock = c"pthread_rwlock_trywrlock": extern "C" fn(l: *mut pthread_rwlock_t);
    pthread_rwlock_timedwrlock = c"pthread_rwlock_timedwrlock": extern "C-unwind" fn(l: *mut pthread_rwlock_t, t: *const timespec);
    pthread_rwlock_clockwrlock = c"pthread_rwlock_clockwrlock": extern "C-unwind" fn(l: *mut pthread_rwlock_t, c: clockid_t, t: *const timespec);
    pthread_rwlock_unlock = c"pthread_rwlock_unlock": extern "C" fn(l: *mut pthread_rwlock_t);
    pthread_cancel = c"pthread_cancel": extern "C-unwind" fn(t: libc::pthread_t);
}

// The attribute getters are not interposed: these are glibc's, linked normally.
unsafe extern "C" {
    /// `pthread_mutexattr_gettype(3)`.
    pub fn pthread_mutexattr_gettype(a: *const libc::pthread_mutexattr_t, t: *mut c_int) -> c_int;
    /// `pthread_mutexattr_getrobust(3)`.
    pub fn pthread_mutexattr_getrobust(a: *const libc::pthread_mutexattr_t, r: *mut c_int)
    -> c_int;
    /// `pthread_mutexattr_getprotocol(3)`.
    pub fn pthread_mutexattr_getprotocol(
        a: *const libc::pthread_mutexattr_t,
        p: *mut c_int,
    ) -> c_int;
    /// `pthread_mutexattr_getpshared(3)`.
    pub fn pthread_mutexattr_getpshared(
        a: *const libc::pthread_mutexattr_t,
        p: *mut c_int,
    ) -> c_int;
    /// `pthread_condattr_getclock(3)`.
    pub fn pthread_condattr_getclock(
        a: *const libc::pthread_condattr_t,
        c: *mut clockid_t,
    ) -> c_int;
    /// `pthread_condattr_getpshared(3)`.
    pub fn pthread_condattr_getpshared(a: *const libc::pthread_condattr_t, p: *mut c_int) -> c_int;
    /// `pthread_rwlockattr_getpshared(3)`.
    pub fn pthread_rwlockattr_getpshared(
        a: *const libc::pthread_rwlockattr_t,
        p: *mut c_int,
    ) -> c_int;
}
