//! The pool of unused snodes: type-stable memory for [`crate::snode`].
//!
//! Snodes are never returned to the allocator: a thread that loaded an snode
//! pointer before the snode was detached may still read it (see the
//! `snode` module docs). Detached snodes come here and the next contention of
//! any lock takes them, so the memory held is the most snodes ever attached
//! at once (one per node per contended lock), not one set per lock ever
//! contended.
//!
//! Two levels, neither of which ever blocks:
//!
//! * a per-thread cache of up to [`CACHE_MAX`] snodes (no atomics), so a lock
//!   that two threads take in turns, attaching and detaching an snode per
//!   contention, does not touch shared memory for it;
//! * a global Treiber stack for the rest, pushed one snode at a time with a
//!   CAS and emptied all at once with a swap. Taking the whole stack has no
//!   ABA problem (a pop of one snode would need the next pointer of a head
//!   that another thread may have popped and pushed back meanwhile), and
//!   nothing waits, so a `fork` in the middle of an operation leaves nothing
//!   locked in the child.
//!
//! A thread's cache goes to the global stack when the thread exits. Every
//! pooled snode is `DEAD` (no pin can succeed on it).

use crate::snode::Snode;
#[cfg(not(numa_loom))]
use std::ptr;

/// Snodes allocated so far (never freed): a diagnostic, see [`memory`].
#[cfg(not(numa_loom))]
static ALLOCATED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The heap memory of every snode allocated so far, attached or pooled:
/// `(bytes, allocations)`. Snodes are never freed, so this is the peak number
/// attached at once, times the snode's size.
#[cfg(not(numa_loom))]
pub fn memory() -> (usize, usize) {
    // Relaxed: a counter read for a report.
    let n = ALLOCATED.load(std::sync::atomic::Ordering::Relaxed);
    (n * core::mem::size_of::<Snode>(), n)
}

/// The most snodes a thread keeps for itself.
#[cfg(not(numa_loom))]
const CACHE_MAX: usize = 8;

/// An snode for a fresh attachment: `DEAD`, exclusively the caller's, to be
/// initialised (`Snode::init`). From the calling thread's cache, else from the
/// global stack, else newly allocated.
pub(crate) fn take() -> &'static Snode {
    let p = take_pooled();
    let p = if p.is_null() {
        let p = Box::into_raw(Box::new(Snode::new_dead()));
        #[cfg(not(numa_loom))]
        ALLOCATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        #[cfg(numa_loom)]
        global::record(p);
        p
    } else {
        p
    };
    // SAFETY: snodes are allocated only here and never freed (outside loom's
    // per-execution teardown), and a pooled snode is no one else's.
    unsafe { &*p }
}

/// Gives back a detached snode: `DEAD`, unlinked, owner cleared. Stale
/// readers may still load its atomics; nobody else writes it but a taker.
pub(crate) fn give(s: &Snode) {
    let p = s as *const Snode as *mut Snode;
    #[cfg(not(numa_loom))]
    {
        let cached = CACHE.try_with(|c| {
            if c.len.get() >= CACHE_MAX {
                return false;
            }
            s.set_next(c.head.get());
            c.head.set(p);
            c.len.set(c.len.get() + 1);
            true
        });
        if cached == Ok(true) {
            return;
        }
    }
    global::push(p);
}

fn take_pooled() -> *mut Snode {
    #[cfg(not(numa_loom))]
    {
        let from_cache = CACHE.try_with(|c| {
            let mut p = c.head.get();
            if p.is_null() {
                // The whole global stack becomes this thread's cache.
                p = global::take_all();
                if p.is_null() {
                    return p;
                }
                let mut n = 0;
                let mut q = p;
                while !q.is_null() {
                    n += 1;
                    // SAFETY: pooled snodes are valid and ours now (we took the stack).
                    q = unsafe { &*q }.next_ptr();
                }
                c.len.set(n);
            }
            // SAFETY: as above.
            c.head.set(unsafe { &*p }.next_ptr());
            c.len.set(c.len.get() - 1);
            p
        });
        if let Ok(p) = from_cache {
            return p;
        }
    }
    // No cache (loom, or a thread whose thread-locals are gone): take the
    // stack, keep its first snode, push the rest back.
    let p = global::take_all();
    if !p.is_null() {
        // SAFETY: the stack is ours now.
        let mut q = unsafe { &*p }.next_ptr();
        while !q.is_null() {
            // SAFETY: as above.
            let next = unsafe { &*q }.next_ptr();
            global::push(q);
            q = next;
        }
    }
    p
}

/// A thread's cached snodes (a list linked through `next`).
#[cfg(not(numa_loom))]
struct Cache {
    head: std::cell::Cell<*mut Snode>,
    len: std::cell::Cell<usize>,
}

#[cfg(not(numa_loom))]
impl Drop for Cache {
    fn drop(&mut self) {
        let mut p = self.head.replace(ptr::null_mut());
        while !p.is_null() {
            // SAFETY: cached snodes are valid and this thread's alone.
            let next = unsafe { &*p }.next_ptr();
            global::push(p);
            p = next;
        }
    }
}

#[cfg(not(numa_loom))]
std::thread_local! {
    static CACHE: Cache = const {
        Cache {
            head: std::cell::Cell::new(ptr::null_mut()),
            len: std::cell::Cell::new(0),
        }
    };
}

#[cfg(not(numa_loom))]
mod global {
    use super::Snode;
    use std::ptr;
    use std::sync::atomic::{AtomicPtr, Ordering};

    static STACK: AtomicPtr<Snode> = AtomicPtr::new(ptr::null_mut());

    pub(super) fn push(p: *mut Snode) {
        // Relaxed: a first guess for the CAS.
        let mut head = STACK.load(Ordering::Relaxed);
        loop {
            // SAFETY: `p` is a pooled snode, exclusively the caller's.
            unsafe { &*p }.set_next(head);
            // Release: the taker sees our link and every write of the
            // detacher (ordered before by its Acquire kill).
            match STACK.compare_exchange_weak(head, p, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    pub(super) fn take_all() -> *mut Snode {
        // Relaxed first look: no swap (a write) on an empty stack.
        if STACK.load(Ordering::Relaxed).is_null() {
            return ptr::null_mut();
        }
        // Acquire: pairs with the pushes' Release.
        STACK.swap(ptr::null_mut(), Ordering::Acquire)
    }
}

/// Under loom (and shuttle) the stack is a per-execution static, so no snode
/// (whose atomics belong to one execution) outlives its execution. The snodes
/// allocated in an execution are recorded apart and freed when it ends
/// (without touching their atomics: the execution is being torn down).
#[cfg(numa_loom)]
mod global {
    use super::Snode;
    use crate::sync::{AtomicPtr, Ordering};
    use std::ptr;

    pub(super) struct Allocated(std::sync::Mutex<Vec<usize>>);

    impl Drop for Allocated {
        fn drop(&mut self) {
            let v = std::mem::take(self.0.get_mut().unwrap_or_else(|e| e.into_inner()));
            for p in v {
                // SAFETY: each address came from `Box::into_raw` in `take` and
                // is recorded once; the execution is over, nobody uses it.
                drop(unsafe { Box::from_raw(p as *mut Snode) });
            }
        }
    }

    #[cfg(not(numa_shuttle))]
    loom::lazy_static! {
        static ref STACK: AtomicPtr<Snode> = AtomicPtr::new(ptr::null_mut());
        static ref ALLOCATED: Allocated = Allocated(std::sync::Mutex::new(Vec::new()));
    }
    #[cfg(numa_shuttle)]
    shuttle::lazy_static! {
        static ref STACK: AtomicPtr<Snode> = AtomicPtr::new(ptr::null_mut());
        static ref ALLOCATED: Allocated = Allocated(std::sync::Mutex::new(Vec::new()));
    }

    /// Records a fresh snode for the end of the execution.
    pub(super) fn record(p: *mut Snode) {
        ALLOCATED
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(p as usize);
    }

    pub(super) fn push(p: *mut Snode) {
        let mut head = STACK.load(Ordering::Relaxed);
        loop {
            // SAFETY: `p` is a pooled snode, exclusively the caller's.
            unsafe { &*p }.set_next(head);
            // Release/Acquire as in the non-loom stack.
            match STACK.compare_exchange_weak(head, p, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    pub(super) fn take_all() -> *mut Snode {
        STACK.swap(ptr::null_mut(), Ordering::Acquire)
    }
}
