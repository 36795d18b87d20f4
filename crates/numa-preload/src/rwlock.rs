//! `pthread_rwlock_*` on `cst_mutex::RawRwLock`, in place, under every
//! `NUMA_LOCK` except `pthread` (the mutex-only locks `cna`, `queued` and `hq`
//! have no reader-writer form, so their rwlocks are cst's).
//!
//! # Read locks are a count, as glibc's
//!
//! glibc's readers are one counter: any thread's `pthread_rwlock_unlock`
//! releases one read (POSIX leaves a release by a non-holder undefined;
//! programs do it), and a thread may take as many reads as it likes. The
//! rwlock's `readers` field is that count here, exactly: every read
//! acquisition adds one, every read release takes one (`EPERM` at zero), by
//! whichever thread. No per-thread state: cst's reads are released by count
//! (`RawRwLock::unlock_shared_any`, which takes one read off whichever of
//! cst's reader counters counts one), so no guard has to travel from the
//! acquisition to the release.
//!
//! # Policy: as glibc's attribute says
//!
//! glibc's default rwlock (`PTHREAD_RWLOCK_PREFER_READER_NP`, and
//! `PTHREAD_RWLOCK_PREFER_WRITER_NP`, which glibc treats the same) prefers
//! readers: a reader enters whenever no writer holds the lock, waiting
//! writers or not, so a thread may take a read lock recursively, and two
//! threads whose reads depend on each other do not deadlock once a writer
//! waits. Only `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP` lets a waiting
//! writer stop new readers. cst's own rwlock is phase-fair (a waiting writer
//! stops new readers); the preference is made here:
//!
//! - Prefer readers (every kind but the one below): while `readers` is not
//!   zero, a reader joins the readers inside by incrementing it (one CAS);
//!   they hold cst's read lock for it. Otherwise it takes a cst read (which
//!   waits for a writer that holds or is draining the lock) and counts itself
//!   in: if it raised the count from zero, its cst read is now the readers'
//!   ("the group read"), else the count was raised by another reader in the
//!   meantime and it gives its cst read back. The reader whose release takes
//!   the count to zero releases one group read (after its decrement, so it
//!   touches nothing of the lock after its releasing step). At most one group
//!   read stays taken per rise of the count from zero, and a rise's read is
//!   released by the matching fall, so cst counts a read whenever `readers`
//!   is not zero, and none once it is zero and its last fall has released:
//!   writers wait exactly for the readers.
//! - `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP`: every read takes a cst
//!   read of its own (so a waiting writer stops it: a thread that reads
//!   recursively may deadlock, as with glibc) and counts itself in; every
//!   release takes one off the count and releases one cst read.
//!
//! Writers are cst's (NUMA batches, spin then park) under both.
//!
//! # Return codes
//!
//! `EDEADLK` for `wrlock` or `rdlock` by the write holder, `EBUSY` from the
//! `try` forms, `ETIMEDOUT`, `EINVAL` for a bad clock or `timespec`, `EAGAIN`
//! when the read count would pass 2^30 - 1, `EPERM` for an unlock by a thread
//! that is not the writer while no read is held. `destroy` of a locked
//! rwlock returns 0 and leaves it as it is (glibc does not check).
//!
//! Process-shared rwlocks are initialized by glibc (which sets `__shared`) and
//! forwarded to glibc.

use crate::layout::RwLockRepr;
use crate::{cancel, real, stats, time};
use core::ffi::c_int;
use core::sync::atomic::Ordering;
use cst_mutex::{ExclusiveGuardState, RawRwLock, SharedGuardState};
use libc::{clockid_t, pthread_rwlock_t, pthread_rwlockattr_t, timespec};
use lock_api::{RawRwLock as _, RawRwLockTimed as _};
use std::time::Instant;

/// The most read locks held at once (then `EAGAIN`, as glibc's counter).
pub const MAX_READERS: u32 = (1 << 30) - 1;

/// glibc's `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP` in `__flags`.
pub const PREFER_WRITER_NONRECURSIVE: u32 = 2;

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

/// Whether glibc owns this rwlock: a process-shared one, or every one in a
/// build whose cst rwlock does not fit (`layout::CST_RWLOCK_FITS`).
#[inline]
fn forwarded(r: &RwLockRepr) -> bool {
    !crate::layout::CST_RWLOCK_FITS || r.shared != 0
}

/// Whether a waiting writer stops new readers (see the module docs).
#[inline]
fn prefers_writers(r: &RwLockRepr) -> bool {
    r.flags == PREFER_WRITER_NONRECURSIVE
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
    if !crate::layout::CST_RWLOCK_FITS {
        // SAFETY: caller's contract; glibc owns every rwlock in this build.
        return unsafe { real::pthread_rwlock_init(l, attr) };
    }
    // SAFETY: `l` is writable for 56 bytes (caller's contract).
    unsafe {
        core::ptr::write_bytes(l.cast::<u8>(), 0, core::mem::size_of::<pthread_rwlock_t>());
        (*l.cast::<RwLockRepr>()).flags = u32::try_from(kind).unwrap_or(0);
    }
    0
}

/// `pthread_rwlock_destroy`: gives cst's reader counters back to their pool;
/// a locked rwlock is left as it is and 0 returned, as glibc does (POSIX makes
/// destroying a locked rwlock undefined; giving the counters back under its
/// readers would let another lock's readers count on them).
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
    if unsafe { raw(l) }.is_locked() || r.readers.load(Ordering::Relaxed) != 0 {
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

/// The deadline of a timed wait (`None` for an untimed one), or the error.
///
/// # Safety
///
/// A timed `abstime` is null or readable.
unsafe fn deadline_of(wait: Wait) -> Result<Option<Instant>, c_int> {
    match wait {
        Wait::Block => Ok(None),
        Wait::Try => Err(libc::EBUSY),
        Wait::Until(c, ts) => {
            // SAFETY: caller's contract.
            if !time::clock_ok(c) || !unsafe { time::valid(ts) } {
                return Err(libc::EINVAL);
            }
            // SAFETY: validated just above.
            unsafe { time::deadline(c, ts) }.map(Some)
        }
    }
}

/// The checks every acquisition makes first: glibc's rwlock (forwarded, its
/// result), a bad clock or `timespec` (`EINVAL`), the write holder asking
/// again (`EDEADLK`, or `EBUSY` from a `try`).
///
/// # Safety
///
/// `l` is live; a timed `abstime` is null or readable.
unsafe fn refuse(l: *mut pthread_rwlock_t, wait: Wait, read: bool) -> Option<c_int> {
    // SAFETY: caller's contract.
    let r = unsafe { repr(l) };
    if forwarded(r) {
        stats::forwarded();
        // SAFETY: glibc's rwlock, forwarded unchanged.
        return Some(unsafe {
            match (read, wait) {
                (true, Wait::Block) => real::pthread_rwlock_rdlock(l),
                (true, Wait::Try) => real::pthread_rwlock_tryrdlock(l),
                (true, Wait::Until(c, t)) => real::pthread_rwlock_clockrdlock(l, c, t),
                (false, Wait::Block) => real::pthread_rwlock_wrlock(l),
                (false, Wait::Try) => real::pthread_rwlock_trywrlock(l),
                (false, Wait::Until(c, t)) => real::pthread_rwlock_clockwrlock(l, c, t),
            }
        });
    }
    // As glibc: a bad clock or `timespec` is EINVAL before anything else.
    if let Wait::Until(c, ts) = wait {
        // SAFETY: `ts` is null or readable (caller's contract).
        if !time::clock_ok(c) || !unsafe { time::valid(ts) } {
            return Some(libc::EINVAL);
        }
    }
    if r.writer.load(Ordering::Relaxed) == me() {
        return Some(if matches!(wait, Wait::Try) {
            libc::EBUSY
        } else {
            libc::EDEADLK
        });
    }
    None
}

/// `pthread_rwlock_{rd,tryrd,timedrd,clockrd}lock`. The result may carry
/// [`cancel::ASYNC`] or be `RETRY | ASYNC` (see [`cancel::blocking`]): the
/// export passes it to [`cancel::finish`].
///
/// # Safety
///
/// `l` is live; a timed `abstime` is null or readable.
pub unsafe fn rdlock(l: *mut pthread_rwlock_t, wait: Wait) -> c_int {
    // SAFETY: caller's contract.
    if let Some(e) = unsafe { refuse(l, wait, true) } {
        return e;
    }
    // SAFETY: caller's contract.
    let (r, rw) = unsafe { (repr(l), raw(l)) };
    let group = !prefers_writers(r);
    if group {
        // Join the readers inside, waiting writers or not.
        // Relaxed: a first guess for the CAS.
        let mut n = r.readers.load(Ordering::Relaxed);
        while n != 0 {
            if n >= MAX_READERS {
                return libc::EAGAIN;
            }
            // Acquire: the count is a release sequence of RMWs started by the
            // reader that raised it from zero after its cst read acquired
            // the last writer's section.
            match r
                .readers
                .compare_exchange_weak(n, n + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => {
                    if stats::enabled() {
                        stats::READ.acquired(false, None);
                    }
                    return 0;
                }
                Err(x) => n = x,
            }
        }
    }
    // A cst read of our own.
    let mut contended = false;
    let mut code = 0;
    let guard = match rw.try_lock_shared() {
        Some(g) => g,
        None => {
            contended = true;
            // SAFETY: caller's contract (`abstime` null or readable).
            let until = match unsafe { deadline_of(wait) } {
                Ok(u) => u,
                Err(e) => return e,
            };
            let mut got: Option<SharedGuardState> = None;
            code = cancel::blocking(until, |at| {
                got = match at {
                    None => Some(rw.lock_shared()),
                    Some(at) => rw.try_lock_shared_until(at),
                };
                got.is_some()
            });
            match got {
                Some(g) if code & !cancel::ASYNC == 0 => g,
                _ => return code,
            }
        }
    };
    // Count it in.
    // Relaxed: a first guess for the CAS.
    let mut n = r.readers.load(Ordering::Relaxed);
    loop {
        if n >= MAX_READERS {
            // SAFETY: `guard` is our read of `rw`.
            unsafe { give_back(rw, guard) };
            return libc::EAGAIN | (code & cancel::ASYNC);
        }
        // AcqRel: continues the count's release sequence (see above) and
        // joins it.
        match r
            .readers
            .compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Relaxed)
        {
            Ok(_) => break,
            Err(x) => n = x,
        }
    }
    if group && n != 0 {
        // Readers came in meanwhile: their group read holds the lock for us.
        // SAFETY: `guard` is our read of `rw`.
        unsafe { give_back(rw, guard) };
    }
    if stats::enabled() {
        stats::READ.acquired(contended, None);
    }
    code
}

/// Releases a cst read that an acquisition took and does not need, by count
/// as every read of the rwlock.
///
/// # Safety
///
/// `guard` is the caller's read acquisition of `rw`.
unsafe fn give_back(rw: &RawRwLock, guard: SharedGuardState) {
    // SAFETY: caller's contract.
    let release = || unsafe { rw.unlock_shared_any(Some(guard)) };
    #[cfg(feature = "test-hooks")]
    crate::hooks::inside_acquire(release);
    #[cfg(not(feature = "test-hooks"))]
    release();
}

/// `pthread_rwlock_{wr,trywr,timedwr,clockwr}lock`; the result as for
/// [`rdlock`].
///
/// # Safety
///
/// As for [`rdlock`].
pub unsafe fn wrlock(l: *mut pthread_rwlock_t, wait: Wait) -> c_int {
    // SAFETY: caller's contract.
    if let Some(e) = unsafe { refuse(l, wait, false) } {
        return e;
    }
    // SAFETY: caller's contract.
    let (r, rw) = unsafe { (repr(l), raw(l)) };
    let mut contended = false;
    let mut code = 0;
    if rw.try_lock_exclusive().is_none() {
        contended = true;
        // SAFETY: caller's contract (`abstime` null or readable).
        let until = match unsafe { deadline_of(wait) } {
            Ok(u) => u,
            Err(e) => return e,
        };
        code = cancel::blocking(until, |at| match at {
            None => {
                rw.lock_exclusive();
                true
            }
            Some(at) => rw.try_lock_exclusive_until(at).is_some(),
        });
        if code & !cancel::ASYNC != 0 {
            return code;
        }
    }
    r.writer.store(me(), Ordering::Relaxed);
    if stats::enabled() {
        stats::WRITE.acquired(contended, None);
    }
    code
}

/// `pthread_rwlock_unlock`: the write lock for its holder, else one read
/// (whichever thread took it), else `EPERM`.
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
    // The write holder: only this thread stores its own id in `writer`, and
    // no read is held while it writes.
    if r.writer.load(Ordering::Relaxed) == me() {
        r.writer.store(0, Ordering::Relaxed);
        // SAFETY: we hold the write lock; a new guard state releases any
        // exclusive acquisition (its node is only a hint).
        unsafe { rw.unlock_exclusive(ExclusiveGuardState::new()) };
        return 0;
    }
    // Relaxed: a first guess for the CAS.
    let mut n = r.readers.load(Ordering::Relaxed);
    loop {
        if n == 0 {
            return libc::EPERM;
        }
        // AcqRel: our read section comes before the decrement, and the
        // reader that takes the count to zero acquires every decrement
        // before it releases the group read (module docs).
        match r
            .readers
            .compare_exchange_weak(n, n - 1, Ordering::AcqRel, Ordering::Relaxed)
        {
            Ok(_) => break,
            Err(x) => n = x,
        }
    }
    if n == 1 || prefers_writers(r) {
        // SAFETY: a cst read is held for the count we just took one from
        // (the group read at the fall to zero; the caller's own, or one it
        // releases for another thread as glibc would, under writer
        // preference); every read of `rw` is released by count.
        unsafe { rw.unlock_shared_any(None) };
    } else {
        // The decrement was this unlock's releasing step.
        #[cfg(feature = "test-hooks")]
        crate::hooks::after_release(l.cast_const().cast());
    }
    0
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
        if !crate::layout::CST_RWLOCK_FITS {
            // glibc's rwlock in this build; CI runs these tests in a build
            // without numa-spin's `stats` too (scripts/ci.sh).
            eprintln!("skipped: every rwlock is glibc's in a build with numa-spin's stats");
            return;
        }
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
            // Read again, released by its holder this time.
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

    /// Reads are a count across threads, and a reader passes a waiting
    /// writer unless the rwlock prefers writers non-recursively (a held
    /// writer stands for a waiting one here: the `try` forms see the same).
    #[test]
    fn reads_are_counted_and_preferred() {
        if !crate::layout::CST_RWLOCK_FITS {
            // glibc's rwlock in this build; CI runs these tests in a build
            // without numa-spin's `stats` too (scripts/ci.sh).
            eprintln!("skipped: every rwlock is glibc's in a build with numa-spin's stats");
            return;
        }
        // SAFETY: all-zero is an unlocked rwlock in our modes.
        let mut rw: pthread_rwlock_t = unsafe { core::mem::zeroed() };
        let l = &raw mut rw;
        // SAFETY: `l` is live for the whole test.
        unsafe {
            assert_eq!(rdlock(l, Wait::Block), 0);
            assert_eq!(rdlock(l, Wait::Try), 0, "recursive read");
            assert_eq!(repr(l).readers.load(Ordering::Relaxed), 2);
            assert_eq!(in_thread(l, unlock), 0);
            assert_eq!(in_thread(l, |l| wrlock(l, Wait::Try)), libc::EBUSY);
            assert_eq!(in_thread(l, unlock), 0);
            assert_eq!(in_thread(l, write_and_release), 0);
            // Writer preference: a second read waits like any other (a
            // `try` fails while a writer holds; the count still works).
            (*l.cast::<RwLockRepr>()).flags = PREFER_WRITER_NONRECURSIVE;
            assert_eq!(rdlock(l, Wait::Block), 0);
            assert_eq!(rdlock(l, Wait::Block), 0);
            assert_eq!(in_thread(l, unlock), 0);
            assert_eq!(in_thread(l, |l| wrlock(l, Wait::Try)), libc::EBUSY);
            assert_eq!(unlock(l), 0);
            assert_eq!(in_thread(l, write_and_release), 0);
            assert_eq!(destroy(l), 0);
        }
    }
}
