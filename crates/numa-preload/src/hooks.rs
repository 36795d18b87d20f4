//! Test hooks (feature `test-hooks`, never in a shipped library): points where
//! a C test program can stop a thread, so that a window of a few instructions
//! (a preemption in the real world) becomes one the test controls: after the
//! releasing step of a condvar wake (here) and of an rwlock read unlock
//! (cst-mutex's `test_hooks`), and before a condvar waiter sleeps.
//!
//! The program defines the hook as a global function and links with
//! `-rdynamic`; the constructor resolves it once with
//! `dlsym(RTLD_DEFAULT, ..)` (outside every lock path). Without the function
//! a hook is a relaxed load.

use core::ffi::{CStr, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

/// A hook function of the program: `void name(const void *obj)`.
struct Hook {
    addr: AtomicUsize,
    name: &'static CStr,
}

impl Hook {
    fn resolve(&self) {
        // SAFETY: a NUL-terminated name that lives for the whole program.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, self.name.as_ptr()) };
        // Relaxed: the address is immutable data of the loaded program.
        self.addr.store(p as usize, Ordering::Relaxed);
    }

    #[inline]
    fn call(&self, obj: *const c_void) {
        // Relaxed: as in `resolve`.
        let a = self.addr.load(Ordering::Relaxed);
        if a != 0 {
            // SAFETY: the program defines the function with this signature
            // (the documented contract of the hook's name).
            let f: extern "C" fn(*const c_void) = unsafe { core::mem::transmute(a) };
            f(obj);
        }
    }
}

static AFTER_RELEASE: Hook = Hook {
    addr: AtomicUsize::new(0),
    name: c"numa_preload_test_after_release",
};
static BEFORE_SLEEP: Hook = Hook {
    addr: AtomicUsize::new(0),
    name: c"numa_preload_test_before_sleep",
};

/// Resolves the hooks (the constructor calls it) and hands the program's
/// `after_release` to cst-mutex for its rwlock read unlocks.
pub(crate) fn resolve() {
    AFTER_RELEASE.resolve();
    BEFORE_SLEEP.resolve();
    // Relaxed: as in `Hook::resolve`.
    if AFTER_RELEASE.addr.load(Ordering::Relaxed) != 0 {
        cst_mutex::test_hooks::set_after_release(Some(|lock| {
            if !IN_ACQUIRE.with(|c| c.get()) {
                after_release(lock.cast());
            }
        }));
    }
}

std::thread_local! {
    /// Set while a read acquisition gives back a cst read it does not need
    /// (`crate::rwlock`): that release is no read unlock, and the program's
    /// hook is for those.
    static IN_ACQUIRE: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Runs `f` (a release inside an acquisition) without the program's hook.
pub(crate) fn inside_acquire<R>(f: impl FnOnce() -> R) -> R {
    IN_ACQUIRE.with(|c| c.set(true));
    let r = f();
    IN_ACQUIRE.with(|c| c.set(false));
    r
}

/// A releasing step on `obj` (a condvar wake's, a read unlock's) is done:
/// from here on the call may not touch `obj`'s memory.
#[inline]
pub(crate) fn after_release(obj: *const c_void) {
    AFTER_RELEASE.call(obj);
}

/// A condvar waiter on `obj` has released its mutex and is about to sleep.
#[inline]
pub(crate) fn before_sleep(obj: *const c_void) {
    BEFORE_SLEEP.call(obj);
}
