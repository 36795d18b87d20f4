//! Debug builds: catches a `combine` or `lock()` on a combining lock from
//! inside a closure running on that same lock, which would wait for itself
//! (on the combiner's thread it queues behind its own batch, or waits for
//! the global lock it holds), and panics with a message that says so.
//!
//! Each thread keeps, in a thread-local, a chain of the locks whose closures
//! it is running (a closure may combine on another lock, whose closure may
//! ...): [`running`] pushes a frame around the closures, [`check`] walks the
//! chain. Release builds and loom builds (the crate's models and a user's,
//! whose loom threads share one OS thread's thread-locals) compile both to
//! nothing.

#[cfg(all(debug_assertions, not(numa_loom), not(all(loom, feature = "loom"))))]
mod imp {
    use core::cell::Cell;
    use core::ptr;

    /// One lock whose closures this thread is running, on this thread's
    /// stack, linked to the frame of the lock whose closure called it.
    struct Frame {
        lock: *const (),
        outer: *const Frame,
    }

    thread_local! {
        /// The innermost [`Frame`] of this thread; null outside closures.
        /// `const`-initialised and without `Drop`: usable without allocating,
        /// also inside a `#[global_allocator]`.
        static RUNNING: Cell<*const Frame> = const { Cell::new(ptr::null()) };
    }

    /// Restores the outer frame, also when the closures unwind.
    struct Pop(*const Frame);

    impl Drop for Pop {
        fn drop(&mut self) {
            let _ = RUNNING.try_with(|r| r.set(self.0));
        }
    }

    /// Runs `f` (closures of the lock at `lock`) with `lock` on this thread's
    /// chain.
    pub(crate) fn running<R>(lock: *const (), f: impl FnOnce() -> R) -> R {
        let Ok(outer) = RUNNING.try_with(Cell::get) else {
            // Thread-locals gone (a thread-local destructor): no checks.
            return f();
        };
        let frame = Frame { lock, outer };
        let _ = RUNNING.try_with(|r| r.set(&raw const frame));
        let _pop = Pop(outer);
        f()
    }

    /// Panics if this thread is running a closure of the lock at `lock`;
    /// `what` names the call (`"combine"`, `"lock()"`).
    #[track_caller]
    pub(crate) fn check(lock: *const (), what: &str) {
        let mut frame = RUNNING.try_with(Cell::get).unwrap_or(ptr::null());
        while !frame.is_null() {
            // SAFETY: every frame of the chain lives on this thread's stack
            // in a `running` call that has not returned (each pops itself,
            // also when unwinding), so it is alive and only this thread
            // reads it.
            let f = unsafe { &*frame };
            if f.lock == lock {
                panic!(
                    "{what} on a CombiningMutex from inside a closure running on \
                     the same lock: the closure runs under that lock, so this \
                     call would wait for itself forever"
                );
            }
            frame = f.outer;
        }
    }
}

#[cfg(not(all(debug_assertions, not(numa_loom), not(all(loom, feature = "loom")))))]
mod imp {
    /// Runs `f` (checks are debug-build only).
    #[inline(always)]
    pub(crate) fn running<R>(_lock: *const (), f: impl FnOnce() -> R) -> R {
        f()
    }

    /// Nothing (checks are debug-build only).
    #[inline(always)]
    pub(crate) fn check(_lock: *const (), _what: &str) {}
}

pub(crate) use imp::{check, running};
