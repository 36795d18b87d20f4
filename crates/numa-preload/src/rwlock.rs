//! `pthread_rwlock_*` on `cst_mutex::RawRwLock`, in place, under every
//! `NUMA_LOCK` except `pthread` (the mutex-only locks `cna`, `queued` and `hq`
//! have no reader-writer form, so their rwlocks are cst's).
//!
//! # Per-thread read table
//!
//! A cst read acquisition returns a guard naming the reader counter it used
//! (the state word or its node's snode), and `pthread_rwlock_unlock` has no
//! argument to carry it. Each thread keeps a table of the read locks it holds
//! ([`MAX_READ_LOCKS`] entries: rwlock address, guard, depth) in a `const`
//! thread-local without destructor (a plain TLS slot: no registration, no
//! allocation). The table also gives POSIX's recursive read locks: a thread that
//! already holds a read lock on the rwlock only bumps the depth, so it cannot
//! deadlock behind a waiting writer (cst alone would: its readers do not
//! recurse).
//!
//! A thread holding read locks on more than [`MAX_READ_LOCKS`] different
//! rwlocks at once (glibc has no such limit, and programs do not check
//! `rdlock`'s result) takes the others without a slot: the read is moved onto
//! cst's state-word counter (`RawRwLock::into_state_word`) and counted in the
//! rwlock's `overflow` field; an unlock by a thread that finds no slot and
//! sees `overflow` non-zero releases one such read. A recursive read of such
//! a lock is an ordinary read (it may wait behind a waiting writer).
//!
//! # Released by another thread
//!
//! glibc's readers are a count, so a read lock released by a thread that did
//! not take it is released (POSIX leaves it undefined; programs do it). Here
//! that thread finds no slot: it releases one read from whichever cst counter
//! counts one (`RawRwLock::unlock_shared_any`), adds one to the rwlock's
//! `debt`, and marks the rwlock `by_count`: from then on every read release
//! of it goes by count too (a guard's counter may have been emptied by it),
//! and a thread whose slot says it already holds the lock takes one unit of
//! debt, if any, as the sign that its read was the one released: it drops the
//! slot and acquires anew. The marking races with a holder's release that is
//! running at that moment (which may still decrement its guard's counter):
//! one release by a non-holder while another holder releases its own read
//! concurrently is the one case this cannot count as glibc does.
//!
//! # Return codes
//!
//! `EDEADLK` for `wrlock` or `rdlock` by the write holder, `EBUSY` from the
//! `try` forms, `ETIMEDOUT`, `EINVAL` for a bad clock or `timespec`, `EPERM`
//! for an unlock of an rwlock that no thread holds for reading, by a thread
//! that is not its writer. `destroy` of a locked rwlock returns 0 and leaves
//! it as it is (glibc does not check).
//!
//! Process-shared rwlocks are initialized by glibc (which sets `__shared`) and
//! forwarded to glibc.

use crate::layout::RwLockRepr;
use crate::{cancel, real, stats, time};
use core::cell::UnsafeCell;
use core::ffi::c_int;
use core::sync::atomic::AtomicU32;
use core::sync::atomic::Ordering;
use cst_mutex::{ExclusiveGuardState, RawRwLock, SharedGuardState};
use libc::{clockid_t, pthread_rwlock_t, pthread_rwlockattr_t, timespec};
use lock_api::{RawRwLock as _, RawRwLockTimed as _};

/// Read locks on distinct rwlocks one thread can hold at once.
pub const MAX_READ_LOCKS: usize = 32;

struct ReadSlot {
    lock: usize,
    depth: u32,
    guard: Option<SharedGuardState>,
}

const EMPTY: ReadSlot = ReadSlot {
    lock: 0,
    depth: 0,
    guard: None,
};

/// This thread's read locks: `slots[..len]` holds every occupied slot (empty
/// ones may sit below `len`), so a thread holding no read lock scans nothing.
struct ReadTable {
    len: usize,
    slots: [ReadSlot; MAX_READ_LOCKS],
}

impl ReadTable {
    /// The slot holding `addr`.
    fn find(&mut self, addr: usize) -> Option<&mut ReadSlot> {
        self.slots
            .get_mut(..self.len)?
            .iter_mut()
            .find(|s| s.lock == addr)
    }

    /// Whether [`free_slot`](Self::free_slot) would find a slot.
    fn has_free(&self) -> bool {
        self.len < MAX_READ_LOCKS
            || self
                .slots
                .get(..self.len)
                .is_some_and(|s| s.iter().any(|s| s.lock == 0))
    }

    /// A free slot, growing `len` if need be; `None` when all are taken.
    fn free_slot(&mut self) -> Option<&mut ReadSlot> {
        let len = self.len;
        let i = match self.slots.get(..len)?.iter().position(|s| s.lock == 0) {
            Some(i) => i,
            None if len < MAX_READ_LOCKS => {
                self.len = len + 1;
                len
            }
            None => return None,
        };
        self.slots.get_mut(i)
    }

    /// Drops empty slots from the end.
    fn shrink(&mut self) {
        while self.len > 0 && self.slots.get(self.len - 1).is_some_and(|s| s.lock == 0) {
            self.len -= 1;
        }
    }
}

thread_local! {
    static READS: UnsafeCell<ReadTable> = const {
        UnsafeCell::new(ReadTable {
            len: 0,
            slots: [EMPTY; MAX_READ_LOCKS],
        })
    };
}

/// Runs `f` on this thread's read table.
fn with_reads<R>(f: impl FnOnce(&mut ReadTable) -> R) -> R {
    // SAFETY: the table is this thread's; lock functions do not re-enter each
    // other while holding the reference (no user code runs inside `f`).
    READS.with(|t| f(unsafe { &mut *t.get() }))
}

#[inline(always)]
unsafe fn repr<'a>(l: *mut pthread_rwlock_t) -> &'a RwLockRepr {
    // SAFETY: `RwLockRepr` has the size and alignment of `pthread_rwlock_t`
    // (asserted in `layout`); every field is an integer or atomic.
    unsafe { &*l.cast::<RwLockRepr>() }
}

#[inline(always)]
unsafe fn raw<'a>(l: *mut pthread_rwlock_t) -> &'a RawRwLock {
    // SAFETY: `RawRwLock` fits at offset 0 (asserted in `layout`), all-zero is
    // its unlocked state, and in our modes only this code touches those bytes.
    unsafe { &*l.cast::<RawRwLock>() }
}

fn me() -> u64 {
    // SAFETY: no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

#[inline]
fn forwarded(r: &RwLockRepr) -> bool {
    r.shared != 0
}

/// Takes one from `c` if it is not 0.
fn take_one(c: &AtomicU32) -> bool {
    // Relaxed: a count of holds; the locks' own atomics order the sections.
    c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1))
        .is_ok()
}

/// How a read or write acquisition waits.
#[derive(Clone, Copy)]
pub enum Wait {
    /// Untimed.
    Block,
    /// The `try` form.
    Try,
    /// Until `abstime` on `clock`.
    Until(clockid_t, *const timespec),
}

/// `pthread_rwlock_init`.
///
/// # Safety
///
/// `l` is writable; `attr` is null or initialized.
pub unsafe fn init(l: *mut pthread_rwlock_t, attr: *const pthread_rwlockattr_t) -> c_int {
    let mut kind = 0;
    if !attr.is_null() {
        let mut pshared = libc::PTHREAD_PROCESS_PRIVATE;
        // SAFETY: `attr` is initialized (caller's contract); locals as outputs.
        unsafe {
            real::pthread_rwlockattr_getpshared(attr, &mut pshared);
            libc::pthread_rwlockattr_getkind_np(attr, &mut kind);
        }
        if pshared != libc::PTHREAD_PROCESS_PRIVATE {
            // SAFETY: caller's contract; glibc owns this rwlock from now on.
            return unsafe { real::pthread_rwlock_init(l, attr) };
        }
    }
    // SAFETY: `l` is writable for 56 bytes (caller's contract).
    unsafe {
        core::ptr::write_bytes(l.cast::<u8>(), 0, core::mem::size_of::<pthread_rwlock_t>());
        (*l.cast::<RwLockRepr>()).flags = u32::try_from(kind).unwrap_or(0);
    }
    0
}

/// `pthread_rwlock_destroy`: frees cst's snodes; a locked rwlock is left as
/// it is and 0 returned, as glibc does (POSIX makes destroying a locked rwlock
/// undefined; freeing the snodes under its holders would be a use after free).
///
/// # Safety
///
/// `l` is live and no thread uses it concurrently.
pub unsafe fn destroy(l: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: caller's contract.
    let r = unsafe { repr(l) };
    if forwarded(r) {
        // SAFETY: glibc's rwlock.
        return unsafe { real::pthread_rwlock_destroy(l) };
    }
    // SAFETY: caller's contract.
    if unsafe { raw(l) }.is_locked() {
        return 0;
    }
    let flags = r.flags;
    // SAFETY: unused by anyone (caller's contract): drop in place, then reset
    // the bytes to an unlocked rwlock with the same flags.
    unsafe {
        core::ptr::drop_in_place(l.cast::<RawRwLock>());
        core::ptr::write_bytes(l.cast::<u8>(), 0, core::mem::size_of::<pthread_rwlock_t>());
        (*l.cast::<RwLockRepr>()).flags = flags;
    }
    0
}

/// Converts a validated timed wait into a deadline, or `ETIMEDOUT`.
///
/// # Safety
///
/// `abstime` is a valid `timespec` (checked on entry with `time::valid`).
unsafe fn deadline(
    clock: clockid_t,
    abstime: *const timespec,
) -> Result<std::time::Instant, c_int> {
    // SAFETY: caller's contract.
    unsafe { time::deadline(clock, abstime) }
}

/// `pthread_rwlock_{rd,tryrd,timedrd,clockrd}lock`.
///
/// # Safety
///
/// `l` is live; a timed `abstime` is null or readable.
pub unsafe fn rdlock(l: *mut pthread_rwlock_t, wait: Wait) -> c_int {
    // SAFETY: caller's contract.
    let r = unsafe { repr(l) };
    if forwarded(r) {
        stats::forwarded();
        // SAFETY: glibc's rwlock, forwarded unchanged.
        return unsafe {
            match wait {
                Wait::Block => real::pthread_rwlock_rdlock(l),
                Wait::Try => real::pthread_rwlock_tryrdlock(l),
                Wait::Until(c, t) => real::pthread_rwlock_clockrdlock(l, c, t),
            }
        };
    }
    // As glibc: a bad clock or `timespec` is EINVAL before anything else.
    if let Wait::Until(c, ts) = wait {
        // SAFETY: `ts` is null or readable (caller's contract).
        let ok = time::clock_ok(c) && unsafe { time::valid(ts) };
        if !ok {
            return libc::EINVAL;
        }
    }
    if r.writer.load(Ordering::Relaxed) == me() {
        return if matches!(wait, Wait::Try) {
            libc::EBUSY
        } else {
            libc::EDEADLK
        };
    }
    let addr = l as usize;
    // SAFETY: caller's contract.
    let rw = unsafe { raw(l) };
    with_reads(|t| {
        if let Some(s) = t.find(addr) {
            // Relaxed: see `take_one`.
            let released = r.by_count.load(Ordering::Relaxed) != 0 && take_one(&r.debt);
            if !released {
                return match s.depth.checked_add(1) {
                    Some(d) => {
                        s.depth = d;
                        if stats::enabled() {
                            stats::READ.acquired(false, None);
                        }
                        0
                    }
                    None => libc::EAGAIN,
                };
            }
            // Another thread released a read of this rwlock that it did not
            // hold: take it to have been ours, and acquire anew.
            s.lock = 0;
            s.depth = 0;
            s.guard = None;
            t.shrink();
        }
        let mut contended = false;
        let acquire = |contended: &mut bool| -> Result<SharedGuardState, c_int> {
            if let Some(g) = rw.try_lock_shared() {
                return Ok(g);
            }
            *contended = true;
            match wait {
                Wait::Try => Err(libc::EBUSY),
                Wait::Block => Ok(cancel::shielded(|| rw.lock_shared())),
                Wait::Until(c, ts) => {
                    // SAFETY: `abstime` was validated on entry.
                    let at = unsafe { deadline(c, ts) }?;
                    cancel::shielded(|| rw.try_lock_shared_until(at)).ok_or(libc::ETIMEDOUT)
                }
            }
        };
        let guard = match acquire(&mut contended) {
            Ok(g) => g,
            Err(e) => return e,
        };
        let guard = if t.has_free() {
            guard
        } else {
            // No slot: hold it on the state word, counted in `overflow`.
            let mut g = guard;
            loop {
                // SAFETY: `g` is our read acquisition of `rw`.
                g = unsafe { rw.into_state_word(g) };
                if g.in_state_word() {
                    break;
                }
                // A writer is draining (or the word's counter is full): let
                // it in and read again.
                // SAFETY: as above.
                unsafe { rw.unlock_shared(g) };
                g = match acquire(&mut contended) {
                    Ok(g) => g,
                    Err(e) => return e,
                };
            }
            r.overflow.fetch_add(1, Ordering::Relaxed);
            if stats::enabled() {
                stats::READ.acquired(contended, None);
            }
            return 0;
        };
        match t.free_slot() {
            Some(slot) => {
                *slot = ReadSlot {
                    lock: addr,
                    depth: 1,
                    guard: Some(guard),
                }
            }
            // Unreachable (`has_free` above, and only this thread uses the
            // table); release rather than keep an untracked read lock.
            None => {
                // SAFETY: `guard` is our read acquisition of `rw`, just made.
                unsafe { rw.unlock_shared(guard) };
                return libc::EAGAIN;
            }
        }
        if stats::enabled() {
            stats::READ.acquired(contended, None);
        }
        0
    })
}

/// `pthread_rwlock_{wr,trywr,timedwr,clockwr}lock`.
///
/// # Safety
///
/// As for [`rdlock`].
pub unsafe fn wrlock(l: *mut pthread_rwlock_t, wait: Wait) -> c_int {
    // SAFETY: caller's contract.
    let r = unsafe { repr(l) };
    if forwarded(r) {
        stats::forwarded();
        // SAFETY: glibc's rwlock, forwarded unchanged.
        return unsafe {
            match wait {
                Wait::Block => real::pthread_rwlock_wrlock(l),
                Wait::Try => real::pthread_rwlock_trywrlock(l),
                Wait::Until(c, t) => real::pthread_rwlock_clockwrlock(l, c, t),
            }
        };
    }
    // As glibc: a bad clock or `timespec` is EINVAL before anything else.
    if let Wait::Until(c, ts) = wait {
        // SAFETY: `ts` is null or readable (caller's contract).
        let ok = time::clock_ok(c) && unsafe { time::valid(ts) };
        if !ok {
            return libc::EINVAL;
        }
    }
    let me = me();
    if r.writer.load(Ordering::Relaxed) == me {
        return if matches!(wait, Wait::Try) {
            libc::EBUSY
        } else {
            libc::EDEADLK
        };
    }
    // SAFETY: caller's contract.
    let rw = unsafe { raw(l) };
    let mut contended = false;
    if rw.try_lock_exclusive().is_none() {
        contended = true;
        match wait {
            Wait::Try => return libc::EBUSY,
            Wait::Block => {
                cancel::shielded(|| rw.lock_exclusive());
            }
            // SAFETY: `abstime` was validated on entry.
            Wait::Until(c, ts) => match unsafe { deadline(c, ts) } {
                Err(e) => return e,
                Ok(at) => {
                    if cancel::shielded(|| rw.try_lock_exclusive_until(at)).is_none() {
                        return libc::ETIMEDOUT;
                    }
                }
            },
        }
    }
    r.writer.store(me, Ordering::Relaxed);
    if stats::enabled() {
        stats::WRITE.acquired(contended, None);
    }
    0
}

/// `pthread_rwlock_unlock`: a read unlock if this thread's table holds `l`,
/// else a write unlock by the write holder, else `EPERM`.
///
/// # Safety
///
/// `l` is live.
pub unsafe fn unlock(l: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: caller's contract.
    let r = unsafe { repr(l) };
    if forwarded(r) {
        stats::forwarded();
        // SAFETY: glibc's rwlock.
        return unsafe { real::pthread_rwlock_unlock(l) };
    }
    // SAFETY: caller's contract.
    let rw = unsafe { raw(l) };
    // The write holder first: it holds no read lock on `l` (a read request of
    // the write holder fails with `EDEADLK`, and a reader's write request
    // waits for itself), so the read table need not be searched, and only
    // this thread stores its own id in `writer`.
    if r.writer.load(Ordering::Relaxed) == me() {
        r.writer.store(0, Ordering::Relaxed);
        // SAFETY: we hold the write lock; a new guard state releases any
        // exclusive acquisition (its node is only a hint).
        unsafe { rw.unlock_exclusive(ExclusiveGuardState::new()) };
        return 0;
    }
    let addr = l as usize;
    let read = with_reads(|t| {
        let s = t.find(addr)?;
        s.depth = s.depth.saturating_sub(1);
        if s.depth > 0 {
            return Some(None);
        }
        s.lock = 0;
        let g = s.guard.take();
        t.shrink();
        Some(g)
    });
    // Relaxed: see `take_one`; a release by a non-holder stores it before it
    // takes a count (the race this leaves is in the module docs).
    let by_count = r.by_count.load(Ordering::Relaxed) != 0;
    match read {
        Some(None) => 0,
        Some(Some(g)) if !by_count => {
            // SAFETY: `g` is the guard of this thread's read acquisition of `l`.
            unsafe { rw.unlock_shared(g) };
            0
        }
        Some(Some(g)) => {
            // SAFETY: this thread held a read of `l` (its slot says so).
            if !unsafe { rw.unlock_shared_any(Some(g)) } {
                // Already released for us by another thread.
                take_one(&r.debt);
            }
            0
        }
        // A read held past this thread's table.
        None if take_one(&r.overflow) => {
            // SAFETY: `overflow` counts reads on the state word, one of them
            // this thread's (or, if another thread's, released for it as glibc
            // would, the counts being the same).
            unsafe {
                if by_count {
                    rw.unlock_shared_any(Some(SharedGuardState::state_word()));
                } else {
                    rw.unlock_shared(SharedGuardState::state_word());
                }
            }
            0
        }
        // A read lock taken by another thread: released, as glibc does.
        None => {
            r.by_count.store(1, Ordering::SeqCst);
            // SAFETY: the program releases a read that some thread holds (if
            // none does, nothing is released and the answer is EPERM).
            if unsafe { rw.unlock_shared_any(None) } {
                r.debt.fetch_add(1, Ordering::Relaxed);
                0
            } else {
                libc::EPERM
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on `l` in a new thread and returns its result.
    fn in_thread(l: *mut pthread_rwlock_t, f: unsafe fn(*mut pthread_rwlock_t) -> c_int) -> c_int {
        let addr = l as usize;
        // SAFETY: `l` outlives the joined thread (the caller's contract).
        std::thread::spawn(move || unsafe { f(addr as *mut pthread_rwlock_t) })
            .join()
            .unwrap()
    }

    /// A `trywrlock` that releases what it took; its result.
    ///
    /// # Safety
    ///
    /// `l` is live.
    unsafe fn write_and_release(l: *mut pthread_rwlock_t) -> c_int {
        // SAFETY: caller's contract.
        unsafe {
            let r = wrlock(l, Wait::Try);
            if r == 0 {
                assert_eq!(unlock(l), 0);
            }
            r
        }
    }

    /// `unlock` releases the write lock for its holder and the read lock for a
    /// reader, releases a read lock taken by another thread (as glibc), and
    /// refuses (`EPERM`) a thread that is not the writer when nobody reads.
    #[test]
    fn unlock_releases_the_callers_mode_and_refuses_others() {
        // SAFETY: all-zero is an unlocked rwlock in our modes.
        let mut rw: pthread_rwlock_t = unsafe { core::mem::zeroed() };
        let l = &raw mut rw;
        // SAFETY: `l` is live for the whole test; `abstime` is unused.
        unsafe {
            assert_eq!(unlock(l), libc::EPERM, "unlock of a free rwlock");
            assert_eq!(wrlock(l, Wait::Block), 0);
            assert_eq!(in_thread(l, unlock), libc::EPERM, "unlock by a non-writer");
            assert_eq!(in_thread(l, |l| rdlock(l, Wait::Try)), libc::EBUSY);
            assert_eq!(unlock(l), 0);
            assert_eq!(unlock(l), libc::EPERM, "second unlock of the write lock");
            assert_eq!(rdlock(l, Wait::Block), 0);
            assert_eq!(in_thread(l, |l| wrlock(l, Wait::Try)), libc::EBUSY);
            // Released by another thread, as glibc does.
            assert_eq!(in_thread(l, unlock), 0, "unlock by a non-reader");
            assert_eq!(in_thread(l, write_and_release), 0, "not released");
            assert_eq!(in_thread(l, unlock), libc::EPERM, "nothing left to release");
            // The first reader reads again: its slot takes the debt (its read
            // was the one released) and it acquires anew.
            assert_eq!(rdlock(l, Wait::Block), 0);
            assert_eq!(in_thread(l, |l| wrlock(l, Wait::Try)), libc::EBUSY);
            assert_eq!(unlock(l), 0);
            assert_eq!(
                in_thread(l, |l| wrlock(l, Wait::Try)),
                0,
                "read lock not released"
            );
            assert_eq!(unlock(l), libc::EPERM, "the writer is another thread");
        }
    }
}
