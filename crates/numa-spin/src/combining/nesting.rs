//! The locks on whose request queues the calling thread has a request: a
//! `combine` nested inside the thread's own wait on the same lock (a signal
//! handler that interrupted it) must not queue a request (see the
//! [module docs](super#signal-handlers)).
//!
//! Each thread keeps, in a thread-local, a chain of frames on its stack, one
//! per queued request ([`queued`] pushes one around the request's life,
//! [`is_queued`] walks the chain). A signal handler returns before the code
//! it interrupted goes on, so the chain is always the thread's requests in
//! nesting order. The frame is pushed before the request is swapped into a
//! queue and popped after its last use (compiler fences keep those stores in
//! place for a handler of the same thread): a handler that sees no frame has
//! no request of its thread queued on that lock, and one that sees a frame
//! of a request already served only takes the global lock directly, which is
//! always correct. Loom builds compile both to nothing (a model has no
//! signals).

#[cfg(not(numa_loom))]
mod imp {
    use core::cell::Cell;
    use core::ptr;
    use core::sync::atomic::{Ordering, compiler_fence};

    /// One queued request of this thread, on this thread's stack, linked to
    /// the frame of the request it interrupted.
    struct Frame {
        lock: *const (),
        outer: *const Frame,
    }

    thread_local! {
        /// The innermost [`Frame`] of this thread; null when none of its
        /// requests is queued. `const`-initialised and without `Drop`: a plain
        /// thread-local access, without allocating, also in a signal handler
        /// and inside a `#[global_allocator]`.
        static QUEUED: Cell<*const Frame> = const { Cell::new(ptr::null()) };
    }

    /// Restores the outer frame, also when unwinding.
    struct Pop(*const Frame);

    impl Drop for Pop {
        fn drop(&mut self) {
            // The request's last use happens before the frame goes (a
            // handler that interrupts us here and still sees it only skips
            // the queue). SeqCst: the strongest compiler fence; it emits no
            // instruction.
            compiler_fence(Ordering::SeqCst);
            let _ = QUEUED.try_with(|q| q.set(self.0));
        }
    }

    /// Runs `f` (which queues a request on the lock at `lock` and waits
    /// until it ran) with `lock` on this thread's chain.
    pub(crate) fn queued<R>(lock: *const (), f: impl FnOnce() -> R) -> R {
        let Ok(outer) = QUEUED.try_with(Cell::get) else {
            // Thread-locals gone (a thread-local destructor): no chain.
            return f();
        };
        let frame = Frame { lock, outer };
        let _ = QUEUED.try_with(|q| q.set(&raw const frame));
        let _pop = Pop(outer);
        // The frame is on the chain before the request is queued: a handler
        // that interrupts us from here on sees it. SeqCst: as in `Pop`.
        compiler_fence(Ordering::SeqCst);
        f()
    }

    /// Whether this thread has a request queued on the lock at `lock` (an
    /// outer `combine` of the thread, interrupted by this one).
    pub(crate) fn is_queued(lock: *const ()) -> bool {
        let mut frame = QUEUED.try_with(Cell::get).unwrap_or(ptr::null());
        while !frame.is_null() {
            // SAFETY: every frame of the chain lives on this thread's stack
            // in a `queued` call that has not returned (each pops itself,
            // also when unwinding), so it is alive, and only this thread
            // (and its signal handlers, which return before it goes on)
            // reads it.
            let f = unsafe { &*frame };
            if f.lock == lock {
                return true;
            }
            frame = f.outer;
        }
        false
    }
}

#[cfg(numa_loom)]
mod imp {
    /// Runs `f` (a loom model has no signal handlers).
    #[inline(always)]
    pub(crate) fn queued<R>(_lock: *const (), f: impl FnOnce() -> R) -> R {
        f()
    }

    /// Never (a loom model has no signal handlers).
    #[inline(always)]
    pub(crate) fn is_queued(_lock: *const ()) -> bool {
        false
    }
}

pub(crate) use imp::{is_queued, queued};
