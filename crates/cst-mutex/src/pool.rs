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
//! * a per-thread cache of up to [`CACHE_MAX`] snodes (no atomics), filled
//!   only by the thread's own gives, so a lock that two threads take in turns,
//!   attaching and detaching an snode per contention, does not touch shared
//!   memory for it;
//! * a global pool for the rest: [`SLOTS`] one-snode slots, taken with a swap
//!   and filled with a CAS from null (no ABA: a slot holds one pointer, and a
//!   swap takes it whole), then an overflow Treiber stack, pushed one snode or
//!   one chain at a time with a CAS and emptied all at once with a swap (no
//!   ABA either). A taker of the overflow keeps one snode and puts the rest
//!   back with one CAS from null (no walk of the pool), so no thread hoards
//!   it; while it holds them (a few instructions, unless it is preempted
//!   there) another taker that finds the slots and the stack empty allocates
//!   a fresh snode. Nothing waits, so a
//!   `fork` in the middle of an operation leaves nothing locked in the child.
//!
//! The memory held is therefore the most snodes attached at once, plus up to
//! [`CACHE_MAX`] per live thread, plus one per taker that races an overflow
//! take (only with more than [`SLOTS`] snodes pooled). A thread's cache goes to
//! the global pool when the thread exits. Every pooled snode is `DEAD` (no pin
//! can succeed on it).

use crate::snode::Snode;
#[cfg(not(numa_loom))]
use std::ptr;

/// Snodes allocated so far (never freed): a diagnostic, see [`memory`].
#[cfg(not(numa_loom))]
static ALLOCATED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The heap memory of every snode allocated so far, attached or pooled:
/// `(bytes, allocations)`. Snodes are never freed, so this is the peak number
/// attached at once plus what the pool's levels hold (module docs), times the
/// snode's size.
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
/// global pool, else newly allocated.
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
            if c.len.get() >= CACHE_MAX || c.busy.replace(true) {
                return false;
            }
            s.set_next(c.head.get());
            c.head.set(p);
            c.len.set(c.len.get() + 1);
            c.busy.set(false);
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
            let p = c.head.get();
            if p.is_null() || c.busy.replace(true) {
                return global::take();
            }
            // SAFETY: cached snodes are valid and this thread's alone.
            c.head.set(unsafe { &*p }.next_ptr());
            c.len.set(c.len.get() - 1);
            c.busy.set(false);
            p
        });
        if let Ok(p) = from_cache {
            return p;
        }
    }
    // No cache (loom, or a thread whose thread-locals are gone).
    global::take()
}

/// A thread's cached snodes (a list linked through `next`).
///
/// `busy` while this thread changes the list: a signal handler that
/// interrupts the change and takes a lock of this crate (a nested
/// acquisition) finds it set and uses the global pool instead.
#[cfg(not(numa_loom))]
struct Cache {
    head: std::cell::Cell<*mut Snode>,
    len: std::cell::Cell<usize>,
    busy: std::cell::Cell<bool>,
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
            busy: std::cell::Cell::new(false),
        }
    };
}

/// The number of one-snode slots of the global pool (8 cache lines of
/// pointers on 64-bit targets): the snodes of 32 locks contended at once on 2
/// nodes; more go to the overflow stack. Scanned only when a contention
/// starts or ends.
#[cfg(not(numa_loom))]
pub(crate) const SLOTS: usize = 64;

#[cfg(not(numa_loom))]
mod global {
    use super::{SLOTS, Snode};
    use std::ptr;
    #[cfg(test)]
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::{AtomicPtr, Ordering};

    #[allow(clippy::declare_interior_mutable_const)]
    const EMPTY: AtomicPtr<Snode> = AtomicPtr::new(ptr::null_mut());
    static SLOT: [AtomicPtr<Snode>; SLOTS] = [EMPTY; SLOTS];
    static STACK: AtomicPtr<Snode> = AtomicPtr::new(ptr::null_mut());

    /// A pooled snode, exclusively the caller's, or null if none is pooled
    /// (or the only ones are held for a moment by a racing overflow taker).
    pub(super) fn take() -> *mut Snode {
        for slot in &SLOT {
            // Relaxed first look: no swap (a write) on an empty slot.
            if !slot.load(Ordering::Relaxed).is_null() {
                // Acquire: pairs with the filling CAS's Release in `push`.
                let p = slot.swap(ptr::null_mut(), Ordering::Acquire);
                if !p.is_null() {
                    return p;
                }
            }
        }
        // Relaxed first look: no swap on an empty stack.
        if STACK.load(Ordering::Relaxed).is_null() {
            return ptr::null_mut();
        }
        // Acquire: pairs with the Release of the stack pushes.
        let p = STACK.swap(ptr::null_mut(), Ordering::Acquire);
        if p.is_null() {
            return p;
        }
        // SAFETY: the whole stack is ours now; its snodes are valid.
        let mut rest = unsafe { &*p }.next_ptr();
        // Put the rest back with one CAS while the stack is still empty (the
        // usual case: no walk, however many snodes are pooled). If snodes
        // were pushed meanwhile, take those too, append the rest behind them
        // (a walk of only what was pushed during our take) and try again.
        while !rest.is_null() {
            // Release: publishes the links we wrote (and, through our Acquire
            // swaps, the pushers' links and snode state) to the next taker.
            match STACK.compare_exchange(
                ptr::null_mut(),
                rest,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(_) => {
                    // Acquire: as the first swap.
                    let newer = STACK.swap(ptr::null_mut(), Ordering::Acquire);
                    if newer.is_null() {
                        continue;
                    }
                    let mut last = newer;
                    loop {
                        // SAFETY: taken from the stack: ours, valid.
                        let next = unsafe { &*last }.next_ptr();
                        if next.is_null() {
                            break;
                        }
                        #[cfg(test)]
                        WALKED.fetch_add(1, Ordering::Relaxed);
                        last = next;
                    }
                    // SAFETY: as above.
                    unsafe { &*last }.set_next(rest);
                    rest = newer;
                }
            }
        }
        p
    }

    /// Links stepped over by overflow takes (for the test that a take does
    /// not walk the pool).
    #[cfg(test)]
    pub(super) static WALKED: AtomicUsize = AtomicUsize::new(0);

    /// Gives back one snode: `DEAD`, unlinked, exclusively the caller's.
    pub(super) fn push(p: *mut Snode) {
        for slot in &SLOT {
            // Relaxed first look: no CAS on a full slot.
            // Release on success: the taker's Acquire swap sees the snode's
            // detached state and every earlier write of the giver.
            if slot.load(Ordering::Relaxed).is_null()
                && slot
                    .compare_exchange(ptr::null_mut(), p, Ordering::Release, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
        }
        push_chain(p, p);
    }

    /// Pushes the chain `first ..= last` (linked through `next`, exclusively
    /// the caller's) onto the overflow stack.
    fn push_chain(first: *mut Snode, last: *mut Snode) {
        // Relaxed: a first guess for the CAS.
        let mut head = STACK.load(Ordering::Relaxed);
        loop {
            // SAFETY: `last` is a pooled snode, exclusively the caller's.
            unsafe { &*last }.set_next(head);
            // Release: the taker sees our links and every write of the
            // detacher (ordered before by its Acquire kill).
            match STACK.compare_exchange_weak(head, first, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }
}

/// Under loom (and shuttle) the global pool is one Treiber stack, a
/// per-execution static, so no snode
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

    /// Takes the stack, keeps its first snode and pushes the rest back.
    pub(super) fn take() -> *mut Snode {
        let p = STACK.swap(ptr::null_mut(), Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: the stack is ours now.
            let mut q = unsafe { &*p }.next_ptr();
            while !q.is_null() {
                // SAFETY: as above.
                let next = unsafe { &*q }.next_ptr();
                push(q);
                q = next;
            }
        }
        p
    }
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use super::*;

    /// A thread whose cache is empty takes one snode from the global pool and
    /// leaves the others there for other threads: it does not hoard them.
    #[test]
    fn a_take_leaves_the_rest_of_the_pool_to_other_threads() {
        std::thread::spawn(|| {
            let snodes: Vec<*mut Snode> = (0..4)
                .map(|_| take() as *const Snode as *mut Snode)
                .collect();
            for &p in &snodes {
                // Straight to the global pool (`give` would cache them).
                global::push(p);
            }
            let s = take();
            let cached = CACHE.with(|c| c.len.get());
            give(s);
            assert_eq!(cached, 0, "the take moved pooled snodes into its cache");
        })
        .join()
        .unwrap();
    }

    /// Taking from a long overflow stack does not walk it: the rest goes back
    /// with one CAS (only snodes pushed during a take are stepped over, and
    /// the other tests of this binary push few).
    #[test]
    fn an_overflow_take_does_not_walk_the_pool() {
        use std::sync::atomic::Ordering;
        const MANY: usize = SLOTS + 1000;
        let snodes: Vec<*mut Snode> = (0..MANY)
            .map(|_| take() as *const Snode as *mut Snode)
            .collect();
        for &p in &snodes {
            global::push(p);
        }
        let before = global::WALKED.load(Ordering::Relaxed);
        let taken: Vec<*mut Snode> = (0..SLOTS + 10).map(|_| global::take()).collect();
        let walked = global::WALKED.load(Ordering::Relaxed) - before;
        for p in taken.into_iter().filter(|p| !p.is_null()) {
            global::push(p);
        }
        assert!(
            walked < 200,
            "10 overflow takes stepped over {walked} links"
        );
    }
}
