//! What makes the locks' sleepers usable in the child of a `fork`.
//!
//! After `fork` only the forking thread exists in the child, but the
//! memory is a copy of the parent's. numa-spin's queue forgets the parent's
//! queued waiters by its own fork generation (see `numa_spin`'s `node`
//! module); this module does the same for the threads that slept in
//! `parking_lot_core`'s table through this crate (timed waiters, condition
//! variable waiters, rwlock readers and writers).
//!
//! The handlers are registered when the program (or the shared object that
//! links this crate) is loaded, before `main` ([`register_at_load`]). A
//! registration made later, on a thread's first slow path, would race with
//! the forks of other threads: glibc runs the prepare handlers of a fork
//! without its atfork lock, so a registration made meanwhile succeeds, but
//! that fork skips the new handlers (glibc 2.36, `__run_prefork_handlers`),
//! and the sleepers recorded then would stay in the child's parking lot
//! (`tests/fork_prepare.rs`). Only if the load-time registration failed
//! (`ENOMEM`) does a park register ([`watch`]), with that window open; that
//! registration is fork-safe itself: a fork while another thread registers
//! leaves the child able to register (see [`HANDLERS`]).
//!
//! # The parking lot across fork
//!
//! Waiters sleep in `parking_lot_core`'s process-wide table, whose buckets
//! have locks of their own. A thread that is inside one (parking, waking
//! another) when another thread forks would leave it locked in the child
//! for ever, and the child's first wait or wake-up on that bucket (the
//! unlock that forgets the parent's waiters, for one) would hang. So every
//! call of this crate into the parking lot goes through a *gate*
//! ([`enter_lot`], [`leave_lot`]: a count of the threads inside): the
//! `pthread_atfork` prepare handler closes the gate and waits until no
//! thread is inside, and the parent and child handlers open it again. A
//! parking thread leaves the gate before it sleeps (the bucket is unlocked
//! by then). One window stays open: a timed waiter whose deadline passed
//! locks its bucket again to leave the queue, outside the gate (the parking
//! lot gives no hook before it). Other users of `parking_lot_core` in the
//! process (the `parking_lot` crate) are not gated.
//!
//! # The parent's sleepers in the child
//!
//! The child's copy of the parking lot still queues the records of the
//! parent threads that slept in it. Each record lives in its thread's
//! thread-local storage, at the top of its stack, and glibc hands those
//! stacks to the child's new threads: a new thread's record then *is* a
//! queued ghost's, and its first park links it into a bucket a second time
//! (a cycle, or a lost sleeper), while an unpark of a ghost's key picks the
//! ghost instead of the child's thread that sleeps on the same address (a
//! queue node on the reused stack). So every thread records the keys it
//! sleeps on in a process-wide table ([`Parked`]), and the child handler,
//! before the child has a second thread, unparks every recorded key: the
//! parking lot takes the ghosts' records out of its queues. The table holds
//! one record per sleeper, however many sleep on one key; it starts with
//! room for 4,096 and grows by mapped segments of as many (never by the
//! allocator, which may be the caller).

#[cfg(all(unix, not(numa_loom)))]
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicU32, Ordering};

/// The number of forks this process descends from (since the handler was
/// registered), for the fork tests (`fork_generation`). std atomics: never
/// modelled by loom, whose threads cannot fork.
#[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
static GENERATION: AtomicU32 = AtomicU32::new(0);

/// The current fork generation (0 until the process, or an ancestor after
/// the handler was registered, forked).
#[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
#[inline]
pub(crate) fn generation() -> u32 {
    // Relaxed: the child handler ran before any thread of the child existed
    // but the forking one (fork's own ordering), and nothing else writes it.
    GENERATION.load(Ordering::Relaxed)
}

/// The threads inside the parking lot through this crate (low bits), and
/// [`FORKING`]. std atomics: loom threads cannot fork.
#[cfg(all(unix, not(numa_loom)))]
static LOT_USERS: AtomicUsize = AtomicUsize::new(0);
/// [`LOT_USERS`]: a fork is under way; nobody may enter.
#[cfg(all(unix, not(numa_loom)))]
const FORKING: usize = 1 << (usize::BITS - 1);

#[cfg(all(unix, not(numa_loom)))]
std::thread_local! {
    /// How many times this thread is inside the gate (a signal handler may
    /// nest a second entry; const, no destructor: safe in a handler).
    static INSIDE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Enters the parking-lot gate (see the module docs); waits while a fork
/// is under way. Every [`enter_lot`] is followed by one [`leave_lot`] once
/// the thread holds no lock of the parking lot.
#[inline]
#[cfg_attr(numa_loom, allow(dead_code))]
pub(crate) fn enter_lot() {
    #[cfg(all(unix, not(numa_loom)))]
    {
        loop {
            // Acquire: pairs with the parent or child handler's Release
            // that opened the gate. One location decides: either this
            // increment comes before the prepare handler's `FORKING` in the
            // word's order (then the handler waits for our leave) or after
            // it (then we see the bit and back off).
            let u = LOT_USERS.fetch_add(1, Ordering::Acquire);
            if u & FORKING == 0 {
                let _ = INSIDE.try_with(|c| c.set(c.get() + 1));
                return;
            }
            // Relaxed: we were never inside.
            LOT_USERS.fetch_sub(1, Ordering::Relaxed);
            // Relaxed: a wait for the handlers; the Acquire above decides.
            while LOT_USERS.load(Ordering::Relaxed) & FORKING != 0 {
                std::thread::yield_now();
            }
        }
    }
}

/// Leaves the parking-lot gate (see [`enter_lot`]).
#[inline]
#[cfg_attr(numa_loom, allow(dead_code))]
pub(crate) fn leave_lot() {
    #[cfg(all(unix, not(numa_loom)))]
    {
        let _ = INSIDE.try_with(|c| c.set(c.get().saturating_sub(1)));
        // Release: the parking lot's bucket unlock happens before the
        // prepare handler's Acquire load that sees us gone, so the forked
        // memory has the bucket unlocked.
        LOT_USERS.fetch_sub(1, Ordering::Release);
    }
}

/// Whether this process has the fork handlers: 0 (no), [`REGISTERED`], or
/// the process ID of the process one of whose threads is registering them.
/// Not a `std::sync::Once`: a fork while another thread is inside
/// `call_once` leaves the copy of the `Once` running for ever in the child,
/// and the child's first slow path would wait on it for ever. A process ID
/// that is not ours is a parent's: its registering thread does not exist
/// here, so we register (again: glibc's handler list is copied, so the
/// handlers may then run twice per fork, which they allow). std atomics:
/// loom threads cannot fork.
#[cfg(all(unix, not(numa_loom)))]
static HANDLERS: AtomicU32 = AtomicU32::new(0);
/// [`HANDLERS`]: the handlers are registered.
#[cfg(all(unix, not(numa_loom)))]
const REGISTERED: u32 = u32::MAX;

#[cfg(all(unix, not(numa_loom)))]
std::thread_local! {
    /// Whether this thread is registering the handlers (a signal handler
    /// that interrupted the registration must not wait for it).
    static REGISTERING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(all(unix, not(numa_loom)))]
ctor::declarative::ctor! {
    /// Registers the fork handlers when the program is loaded: before
    /// `main`, so before any thread of the program can fork or wait (module
    /// docs). Uses only libc, atomics and a const thread-local, as code
    /// before `main` must.
    #[ctor(unsafe)]
    fn register_at_load() {
        register();
    }
}

/// Registers the fork handlers once (on unix; elsewhere there is no fork),
/// unless [`register_at_load`] did.
/// Returns once a fork by any thread runs them, after a failed attempt
/// (`ENOMEM`; the next call tries again), or at once inside a signal
/// handler that interrupted this thread's own registration.
#[cfg_attr(numa_loom, allow(dead_code))]
#[inline]
pub(crate) fn watch() {
    #[cfg(all(unix, not(numa_loom)))]
    {
        // Acquire: pairs with the Release store of `REGISTERED` (see
        // `register`).
        if HANDLERS.load(Ordering::Acquire) != REGISTERED {
            register();
        }
    }
}

#[cfg(all(unix, not(numa_loom)))]
#[cold]
fn register() {
    loop {
        // Acquire: as in `watch`.
        let seen = HANDLERS.load(Ordering::Acquire);
        if seen == REGISTERED {
            return;
        }
        // SAFETY: `getpid` has no preconditions and cannot fail.
        let me = unsafe { libc::getpid() }.cast_unsigned();
        if seen == me {
            // Another thread of this process registers; `pthread_atfork`
            // waits at most for a fork under way. In a child, `getpid`
            // differs and the loop takes over instead of waiting.
            if REGISTERING.try_with(std::cell::Cell::get).unwrap_or(false) {
                return;
            }
            // SAFETY: `sched_yield` has no preconditions.
            unsafe { libc::sched_yield() };
            continue;
        }
        // Relaxed: the claim publishes nothing; one location decides who
        // registers in this process.
        if HANDLERS
            .compare_exchange(seen, me, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        let _ = REGISTERING.try_with(|r| r.set(true));
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::in_fork_registration();
        // SAFETY: the handlers are `extern "C"` functions that neither
        // unwind nor call anything but atomics, a thread-local `Cell`,
        // `sched_yield` and (the child's) `parking_lot_core::unpark_all`,
        // and may run twice per fork (see `HANDLERS`).
        let r = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        let _ = REGISTERING.try_with(|r| r.set(false));
        // Release: the registration (glibc's list, under glibc's own lock)
        // happens-before every `watch` that returns on seeing this, so a
        // lock state created after that `watch` is in the memory of a fork
        // that runs the handlers. A failed registration (`ENOMEM`) is
        // tried again by the next slow path; until then a fork's child
        // finds the locks as they were before fork support.
        HANDLERS.store(if r == 0 { REGISTERED } else { 0 }, Ordering::Release);
        return;
    }
}

/// This thread's entries in the gate (a fork from a signal handler that
/// interrupted a call into the parking lot).
#[cfg(all(unix, not(numa_loom)))]
fn own_entries() -> usize {
    INSIDE.try_with(std::cell::Cell::get).unwrap_or(0)
}

#[cfg(all(unix, not(numa_loom)))]
extern "C" fn prepare() {
    let own = own_entries();
    // Acquire (also on the loads below): pairs with the Release of every
    // `leave_lot`, so what those threads did inside the parking lot (its
    // bucket unlocks) is in the memory the child gets.
    LOT_USERS.fetch_or(FORKING, Ordering::Acquire);
    while LOT_USERS.load(Ordering::Acquire) & !FORKING > own {
        // SAFETY: `sched_yield` has no preconditions.
        unsafe { libc::sched_yield() };
    }
}

#[cfg(all(unix, not(numa_loom)))]
extern "C" fn parent() {
    // Release: opens the gate (see `enter_lot`).
    LOT_USERS.fetch_and(!FORKING, Ordering::Release);
}

/// The records of [`Parked`]: the keys of the threads that sleep in the
/// parking lot through this crate (`key` 0: a free slot).
#[cfg(all(unix, not(numa_loom)))]
struct ParkedSlot {
    key: AtomicUsize,
    requeue_to: AtomicUsize,
}

/// Slots per [`Segment`] (a power of two).
#[cfg(all(unix, not(numa_loom)))]
const SEGMENT_SLOTS: usize = 4096;
/// Slots a thread tries in a segment, from the one its stack hashes to,
/// before it moves on to the next segment.
#[cfg(all(unix, not(numa_loom)))]
const PROBES: usize = 64;

/// A part of the table of [`Parked`] records: [`FIRST`], then segments
/// mapped from the kernel as the sleepers outgrow it, never unmapped. All
/// zeros is an empty segment (free slots, no next segment), which is what
/// an anonymous mapping holds.
#[cfg(all(unix, not(numa_loom)))]
#[repr(C)]
struct Segment {
    slots: [ParkedSlot; SEGMENT_SLOTS],
    /// The next segment, null until the sleepers outgrow this one; set
    /// once.
    next: std::sync::atomic::AtomicPtr<Segment>,
}

/// The first segment of the table: room for more sleepers at once than a
/// process usually has threads, so that the table only grows with a
/// process of thousands of sleeping threads.
#[cfg(all(unix, not(numa_loom)))]
static FIRST: Segment = Segment {
    slots: [const {
        ParkedSlot {
            key: AtomicUsize::new(0),
            requeue_to: AtomicUsize::new(0),
        }
    }; SEGMENT_SLOTS],
    next: std::sync::atomic::AtomicPtr::new(core::ptr::null_mut()),
};

#[cfg(all(unix, not(numa_loom)))]
impl Segment {
    /// The segment after this one, if one was published.
    fn next(&self) -> Option<&'static Segment> {
        // Acquire: pairs with the Release CAS of `next_or_grow`, so the
        // mapping's (zeroed) memory is seen as the mapping thread left it.
        let next = self.next.load(Ordering::Acquire);
        // SAFETY: a published segment is never unmapped.
        (!next.is_null()).then(|| unsafe { &*next })
    }

    /// The segment after this one, mapping it if there is none yet; `None`
    /// if the kernel has no memory for it.
    fn next_or_grow(&self) -> Option<&'static Segment> {
        use core::ptr;
        if let Some(next) = self.next() {
            return Some(next);
        }
        let size = core::mem::size_of::<Segment>();
        // SAFETY: an anonymous private mapping of `size` bytes, no fixed
        // address; nothing else is affected. Not the allocator: a park may
        // run inside the `#[global_allocator]`'s own lock (numa-preload).
        let mapped = unsafe {
            libc::mmap(
                ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if mapped == libc::MAP_FAILED {
            return None;
        }
        let mine = mapped.cast::<Segment>();
        // Success Release: publishes the mapping to the Acquire load of
        // `next` of every later grower, recorder and walker. Failure
        // Acquire: we use the winner's segment, which must be seen as it was
        // published.
        match self.next.compare_exchange(
            ptr::null_mut(),
            mine,
            Ordering::Release,
            Ordering::Acquire,
        ) {
            // SAFETY: just published; never unmapped.
            Ok(_) => Some(unsafe { &*mine }),
            Err(winner) => {
                // SAFETY: our mapping of `size` bytes, never published.
                unsafe { libc::munmap(mapped, size) };
                // SAFETY: a published segment is never unmapped.
                Some(unsafe { &*winner })
            }
        }
    }
}

/// Every slot of the table, segment after segment (the child handler's
/// walk).
#[cfg(all(unix, not(numa_loom)))]
fn slots() -> impl Iterator<Item = &'static ParkedSlot> {
    core::iter::successors(Some(&FIRST), |seg| seg.next()).flat_map(|seg| seg.slots.iter())
}

/// A thread's record of the keys it sleeps on (module docs, "The parent's
/// sleepers in the child"), from before the parking lot can queue it until
/// after it no longer does; dropping it frees the slot. (The loom build's
/// parking shim does not record: its models do not fork.)
#[cfg_attr(numa_loom, allow(dead_code))]
pub(crate) struct Parked {
    /// The slot; null: unrecorded (the kernel had no memory for a new
    /// segment).
    #[cfg(all(unix, not(numa_loom)))]
    slot: *const ParkedSlot,
}

#[cfg_attr(numa_loom, allow(dead_code))]
impl Parked {
    /// Records that this thread is about to park on `key`, and may be moved
    /// to `requeue_to` (0: never) while it sleeps.
    ///
    /// Every sleeper gets a slot: many threads often sleep on one key (the
    /// readers of an `RwLock`, a pool of workers on a `Condvar`), so the
    /// slot a thread tries first follows its stack, not the key; a segment
    /// whose slots near there are taken passes the thread on to the next
    /// one, mapped as needed. Only if the kernel has no memory for a new
    /// segment does the thread sleep unrecorded (module docs: its record
    /// may then be a ghost in the child of a fork).
    #[inline]
    pub(crate) fn record(key: usize, requeue_to: usize) -> Parked {
        #[cfg(all(unix, not(numa_loom)))]
        {
            // Threads' stacks lie apart (a page and more): hash the page
            // of a local, Fibonacci hashing onto the segment's slots.
            let here = 0u8;
            let page = (&raw const here as usize as u64) >> 12;
            let start = (page.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                >> (64 - SEGMENT_SLOTS.trailing_zeros())) as usize;
            Self::record_from(start, key, requeue_to)
        }
        #[cfg(not(all(unix, not(numa_loom))))]
        {
            let _ = (key, requeue_to);
            Parked {}
        }
    }

    /// [`record`](Parked::record) from the slot `start` (below
    /// [`SEGMENT_SLOTS`]) of each segment.
    #[cfg(all(unix, not(numa_loom)))]
    fn record_from(start: usize, key: usize, requeue_to: usize) -> Parked {
        let mut seg = &FIRST;
        loop {
            for i in 0..PROBES {
                let s = &seg.slots[(start + i) % SEGMENT_SLOTS];
                // Relaxed: the slot is claimed by this one location;
                // the records are read only by the child handler,
                // after the prepare handler's Acquire of our
                // `leave_lot` Release, which follows these stores (or
                // by no one).
                if s.key.load(Ordering::Relaxed) == 0
                    && s.key
                        .compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                {
                    // Relaxed: as above.
                    s.requeue_to.store(requeue_to, Ordering::Relaxed);
                    return Parked { slot: s };
                }
            }
            match seg.next_or_grow() {
                Some(next) => seg = next,
                None => {
                    return Parked {
                        slot: core::ptr::null(),
                    };
                }
            }
        }
    }
}

impl Drop for Parked {
    #[inline]
    fn drop(&mut self) {
        #[cfg(all(unix, not(numa_loom)))]
        if !self.slot.is_null() {
            // SAFETY: a slot of the table, which is never unmapped.
            let s = unsafe { &*self.slot };
            // Relaxed: a child that still sees the record only unparks a
            // key nobody of the child sleeps on yet.
            s.requeue_to.store(0, Ordering::Relaxed);
            s.key.store(0, Ordering::Relaxed);
        }
    }
}

/// In the child, before it has a second thread: takes the records of the
/// parent's sleepers out of the parking lot (module docs).
#[cfg(all(unix, not(numa_loom)))]
fn forget_parent_sleepers() {
    for s in slots() {
        // Relaxed: the child has one thread.
        let key = s.key.load(Ordering::Relaxed);
        if key == 0 {
            continue;
        }
        let requeue_to = s.requeue_to.load(Ordering::Relaxed);
        s.key.store(0, Ordering::Relaxed);
        s.requeue_to.store(0, Ordering::Relaxed);
        for k in [key, requeue_to] {
            if k != 0 {
                // SAFETY: recorded keys are keys of this crate; the parking
                // lot's buckets are unlocked (the prepare handler waited for
                // every thread inside them, module docs), and unparking a
                // thread that does not exist only wakes a futex nobody
                // waits on after taking its record out of the queue.
                unsafe { parking_lot_core::unpark_all(k, parking_lot_core::DEFAULT_UNPARK_TOKEN) };
            }
        }
    }
}

#[cfg(all(unix, not(numa_loom)))]
extern "C" fn child() {
    // Relaxed: the child has one thread now.
    GENERATION.fetch_add(1, Ordering::Relaxed);
    forget_parent_sleepers();
    // Release: opens the gate; only this thread's own entries remain.
    LOT_USERS.store(own_entries(), Ordering::Release);
}

#[cfg(all(test, unix, not(numa_loom)))]
mod tests {
    use super::{FIRST, PROBES, Parked, slots};
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Barrier};

    /// A key no other test sleeps on: the address of a local of the test.
    fn records_of(key: usize) -> usize {
        slots()
            .filter(|s| s.key.load(Ordering::Relaxed) == key)
            .count()
    }

    #[test]
    fn every_sleeper_on_one_key_is_recorded() {
        // The readers of an RwLock, or a pool's workers on a Condvar, sleep
        // on one key. Each gets its own record (freed when it wakes), and
        // the crowd must not take every slot another key's sleeper tries
        // (`tests/fork.rs`: a crowded key leaves no record of another).
        const THREADS: usize = 150;
        let anchor = 0u64;
        let key = &raw const anchor as usize;
        let recorded = Arc::new(Barrier::new(THREADS + 1));
        let counted = Arc::new(Barrier::new(THREADS + 1));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (recorded, counted) = (recorded.clone(), counted.clone());
                std::thread::spawn(move || {
                    let parked = Parked::record(key, key + 8);
                    recorded.wait();
                    counted.wait();
                    drop(parked);
                })
            })
            .collect();
        recorded.wait();
        let n = records_of(key);
        counted.wait();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(n, THREADS, "sleepers on one key without a record");
        assert_eq!(records_of(key), 0, "records left after the sleepers woke");
    }

    #[test]
    fn the_table_grows_past_its_first_segment() {
        // Records that all try the same slots first: past the 64 probes
        // they take the next segments, as a crowd of sleepers whose first
        // slots lie together, or more than 4,096 sleepers, make them do.
        // (`record` itself starts at its stack's slot, which under
        // AddressSanitizer's fake stacks moves from call to call.)
        let anchor = 0u64;
        let key = &raw const anchor as usize;
        let n = 3 * PROBES + 10;
        let records: Vec<Parked> = (0..n).map(|_| Parked::record_from(7, key, 0)).collect();
        assert!(records.iter().all(|p| !p.slot.is_null()));
        assert!(!FIRST.next.load(Ordering::Relaxed).is_null());
        assert_eq!(records_of(key), n);
        drop(records);
        assert_eq!(records_of(key), 0);
    }
}
