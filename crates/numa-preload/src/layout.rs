//! The in-place encodings: our state inside glibc's x86-64 lock objects.
//!
//! # `pthread_mutex_t` (40 bytes, 8-aligned)
//!
//! glibc's fields (`bits/struct_mutex.h`): `__lock` @0, `__count` @4, `__owner`
//! @8, `__nusers` @12, `__kind` @16, `__spins` @20, `__elision` @22, `__list`
//! @24..40. The static initializers write only `__kind` (0 normal,
//! `PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP` 1, `..ERRORCHECK..` 2,
//! `..ADAPTIVE..` 3), so `__kind` stays where glibc puts it and selects the path:
//!
//! | bytes | field | meaning |
//! | --- | --- | --- |
//! | 0..16 | `lock` | the lock: numa-spin's 8-byte word (`cna`, `queued`, `hq`) or cst's 16-byte cohort (`cst`) |
//! | 16..20 | `kind` | glibc's `__kind`: 0..=3 ours; any other value (robust 16, PI 32, PP 64, pshared 128 flags set by glibc's `pthread_mutex_init`, or -1 after destroy) goes to glibc |
//! | 20..24 | `count` | recursive mutexes: acquisitions beyond the first |
//! | 24..32 | `owner` | recursive and errorcheck mutexes: `pthread_self()` of the holder, 0 = none |
//! | 32..36 | `last_node` | with `NUMA_LOCK_STATS=1`: NUMA node + 1 of the last holder |
//! | 36..40 | unused | |
//!
//! All-zero is an unlocked normal mutex for every lock (numa-spin: `locked` and
//! `tail` 0, which is cst's mutex too).
//!
//! # `pthread_rwlock_t` (56 bytes, 8-aligned)
//!
//! glibc keeps `__shared` @28 (non-zero for process-shared) and `__flags` @48
//! (the writer-preference kind of the static initializers).
//!
//! | bytes | field | meaning |
//! | --- | --- | --- |
//! | 0..16 | `lock` | `cst_mutex::RawRwLock` |
//! | 16..20 | `readers` | read locks held, by every thread together (glibc's count; see `crate::rwlock`) |
//! | 20..28 | unused | |
//! | 28..32 | `shared` | glibc's `__shared`: non-zero = glibc's process-shared rwlock |
//! | 40..48 | `writer` | `pthread_self()` of the write holder, 0 = none |
//! | 48..52 | `flags` | glibc's `__flags`: `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP` (2) lets a waiting writer stop new readers; any other value prefers readers, as glibc |
//!
//! # `pthread_cond_t` (48 bytes, 8-aligned)
//!
//! | bytes | field | meaning |
//! | --- | --- | --- |
//! | 0..4 | `seq` | the futex word: bumped by every signal and broadcast |
//! | 4..8 | `waiters` | threads between the start of a wait and their wake-up |
//! | 36..40 | `flags` | where glibc keeps them in `__wrefs`: bit 1 `CLOCK_MONOTONIC`; bit 0 (process-shared) is only ever set by glibc, and marks glibc's condvar |

use core::mem::{align_of, offset_of, size_of};
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64};

/// Our view of a `pthread_mutex_t`.
#[repr(C)]
pub struct MutexRepr {
    /// The lock (a numa-spin or cst lock, viewed through a cast).
    pub lock: [u64; 2],
    /// glibc's `__kind`.
    pub kind: AtomicI32,
    /// Recursive acquisitions beyond the first.
    pub count: AtomicU32,
    /// Holder's `pthread_self()` (recursive and errorcheck), 0 = none.
    pub owner: AtomicU64,
    /// With stats: NUMA node + 1 of the last holder.
    pub last_node: AtomicU32,
    /// Unused.
    pub spare: u32,
}

/// Our view of a `pthread_rwlock_t`.
#[repr(C)]
pub struct RwLockRepr {
    /// The `cst_mutex::RawRwLock`.
    pub lock: [u64; 2],
    /// Read locks held, counted as glibc counts them: any thread's unlock
    /// releases one (glibc's `__pad3`).
    pub readers: AtomicU32,
    /// Unused (glibc's `__pad4`, `__cur_writer`).
    pub spare0: [u32; 2],
    /// glibc's `__shared`.
    pub shared: i32,
    /// Unused (glibc's `__rwelision`, `__pad1`).
    pub spare1: u64,
    /// Write holder's `pthread_self()`, 0 = none.
    pub writer: AtomicU64,
    /// glibc's `__flags`.
    pub flags: u32,
    /// Unused.
    pub spare2: u32,
}

/// Our view of a `pthread_cond_t`.
#[repr(C)]
pub struct CondRepr {
    /// The futex word.
    pub seq: AtomicU32,
    /// Waiting threads.
    pub waiters: AtomicU32,
    /// Unused (glibc's `__g1_start` .. `__g1_orig_size`).
    pub spare0: [u32; 7],
    /// Bit 0 process-shared, bit 1 monotonic clock (glibc's `__wrefs` bits).
    pub flags: AtomicU32,
    /// Unused (glibc's `__g_signals`).
    pub spare1: [u32; 2],
}

/// `CondRepr::flags`: process-shared.
pub const COND_PSHARED: u32 = 1;
/// `CondRepr::flags`: timed waits use `CLOCK_MONOTONIC`.
pub const COND_MONOTONIC: u32 = 2;

/// glibc's mutex kinds that are ours (`__kind` 0..=3).
pub const KIND_NORMAL: i32 = 0;
/// `PTHREAD_MUTEX_RECURSIVE`.
pub const KIND_RECURSIVE: i32 = 1;
/// `PTHREAD_MUTEX_ERRORCHECK`.
pub const KIND_ERRORCHECK: i32 = 2;
/// `PTHREAD_MUTEX_ADAPTIVE_NP`.
pub const KIND_ADAPTIVE: i32 = 3;
/// What `pthread_mutex_destroy` leaves in `__kind`, as glibc does: later calls
/// go to glibc, which answers `EINVAL`.
pub const KIND_DESTROYED: i32 = -1;

/// Whether a `__kind` value is one of ours (otherwise glibc's).
#[inline]
pub const fn kind_is_ours(kind: i32) -> bool {
    kind >= 0 && kind <= KIND_ADAPTIVE
}

/// Compile-time proof that lock type `L` fits in `n` bytes at offset 0 of an
/// object aligned to `align`.
pub const fn fits<L>(n: usize, align: usize) -> bool {
    size_of::<L>() <= n && align_of::<L>() <= align
}

/// Whether numa-spin's locks, and cst's mutex on numa-spin's queue, fit in
/// the 16 bytes before `__kind`: 8 bytes each, unless numa-spin's `stats` feature is on (Cargo turns it on for every
/// workspace member in an `--all-features` build), which adds about 90 bytes of
/// per-lock counters: those cannot live in a 40-byte `pthread_mutex_t`, so
/// such a build refuses `NUMA_LOCK=cna|queued|hq|cst` (and the default) at startup (see
/// [`crate::mode`]). `cargo build --release -p numa-preload` never has it.
pub const NUMA_SPIN_FITS: bool = fits::<numa_spin::RawMutex>(16, 8)
    && fits::<numa_spin::RawQueuedMutex>(16, 8)
    && fits::<numa_spin::RawHqMutex>(16, 8)
    && fits::<cst_mutex::RawMutex>(16, 8);

/// Whether cst's rwlock fits in the 16 bytes before `__readers`: it holds
/// numa-spin's queue lock for its writers, so it does exactly when
/// [`NUMA_SPIN_FITS`]. A build where it does not (numa-spin's `stats`) leaves
/// every rwlock to glibc ([`crate::rwlock`]).
pub const CST_RWLOCK_FITS: bool = fits::<cst_mutex::RawRwLock>(16, 8);

const _: () = {
    assert!(size_of::<MutexRepr>() == size_of::<libc::pthread_mutex_t>());
    assert!(size_of::<MutexRepr>() == 40);
    assert!(align_of::<MutexRepr>() <= align_of::<libc::pthread_mutex_t>());
    assert!(offset_of!(MutexRepr, kind) == 16);
    assert!(offset_of!(MutexRepr, count) == 20);
    assert!(offset_of!(MutexRepr, owner) == 24);
    assert!(offset_of!(MutexRepr, last_node) == 32);

    assert!(size_of::<RwLockRepr>() == size_of::<libc::pthread_rwlock_t>());
    assert!(size_of::<RwLockRepr>() == 56);
    assert!(align_of::<RwLockRepr>() <= align_of::<libc::pthread_rwlock_t>());
    assert!(offset_of!(RwLockRepr, readers) == 16);
    assert!(offset_of!(RwLockRepr, shared) == 28);
    assert!(offset_of!(RwLockRepr, writer) == 40);
    assert!(offset_of!(RwLockRepr, flags) == 48);

    assert!(size_of::<CondRepr>() == size_of::<libc::pthread_cond_t>());
    assert!(size_of::<CondRepr>() == 48);
    assert!(align_of::<CondRepr>() <= align_of::<libc::pthread_cond_t>());
    assert!(offset_of!(CondRepr, flags) == 36);

    // cst's locks hold numa-spin's queue lock: they fit in the 16 bytes
    // before `__kind` (and before `__pad3`) wherever numa-spin's do.
    assert!(CST_RWLOCK_FITS || !NUMA_SPIN_FITS);
};

#[cfg(test)]
mod tests {
    use super::*;
    use lock_api::{RawMutex as _, RawRwLock as _};

    /// The all-zero bytes of a static initializer are an unlocked lock, for
    /// every lock we place there.
    #[test]
    fn zeroed_objects_are_unlocked_locks() {
        // SAFETY: all-zero is a valid `pthread_mutex_t`/`pthread_rwlock_t`.
        let mut m: libc::pthread_mutex_t = unsafe { core::mem::zeroed() };
        let p = (&raw mut m).cast::<u8>();
        // SAFETY: each lock fits at offset 0 (asserted above, or checked by
        // `NUMA_SPIN_FITS`) and all-zero is each lock's unlocked state, which
        // the assertions check.
        unsafe {
            if NUMA_SPIN_FITS {
                zeroed_numa_spin_lock_is_free(p);
            }
        }
        // SAFETY: a `pthread_mutex_t` is 40 plain bytes.
        let bytes: [u8; 40] = unsafe { core::mem::transmute(m) };
        assert_eq!(bytes, [0; 40], "unlock restores the all-zero state");

        // cst's rwlock holds numa-spin's queue lock: in a build where that
        // carries its counters it does not fit, and every rwlock is glibc's.
        if !CST_RWLOCK_FITS {
            return;
        }
        // SAFETY: as above, for the rwlock.
        let mut r: libc::pthread_rwlock_t = unsafe { core::mem::zeroed() };
        // SAFETY: `RawRwLock` fits at offset 0 (`CST_RWLOCK_FITS`) and
        // all-zero is its unlocked state.
        unsafe {
            let l = &*(&raw mut r).cast::<cst_mutex::RawRwLock>();
            let a = l.try_lock_shared().expect("zeroed rwlock is free");
            let b = l.try_lock_shared().expect("readers share");
            assert!(l.try_lock_exclusive().is_none());
            l.unlock_shared(a);
            l.unlock_shared(b);
            let w = l.try_lock_exclusive().expect("free again");
            l.unlock_exclusive(w);
        }
    }

    /// # Safety
    ///
    /// `p` points to 16 zeroed, 8-aligned bytes and `NUMA_SPIN_FITS`.
    unsafe fn zeroed_numa_spin_lock_is_free(p: *mut u8) {
        // SAFETY: caller's contract.
        unsafe {
            let l = &*p.cast::<numa_spin::RawMutex>();
            assert!(!l.is_locked());
            let g = l.try_lock().expect("zeroed cna is free");
            assert!(l.is_locked());
            l.unlock(g);
            let l = &*p.cast::<numa_spin::RawQueuedMutex>();
            let g = l.try_lock().expect("zeroed queued is free");
            l.unlock(g);
            let l = &*p.cast::<numa_spin::RawHqMutex>();
            let g = l.try_lock().expect("zeroed hq is free");
            l.unlock(g);
            let l = &*p.cast::<cst_mutex::RawMutex>();
            let g = l.try_lock().expect("zeroed cst is free");
            l.unlock(g);
        }
    }

    /// glibc's static initializers put the kind where `MutexRepr::kind` reads it.
    #[test]
    fn static_initializer_kinds_land_in_kind() {
        let mut m: libc::pthread_mutex_t = libc::PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
        // SAFETY: `MutexRepr` has the size and alignment of `pthread_mutex_t`.
        let r = unsafe { &*(&raw mut m).cast::<MutexRepr>() };
        assert_eq!(
            r.kind.load(core::sync::atomic::Ordering::Relaxed),
            KIND_RECURSIVE
        );
        let mut m: libc::pthread_mutex_t = libc::PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
        // SAFETY: as above.
        let r = unsafe { &*(&raw mut m).cast::<MutexRepr>() };
        assert_eq!(
            r.kind.load(core::sync::atomic::Ordering::Relaxed),
            KIND_ERRORCHECK
        );
        let mut m: libc::pthread_mutex_t = libc::PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
        // SAFETY: as above.
        let r = unsafe { &*(&raw mut m).cast::<MutexRepr>() };
        assert_eq!(
            r.kind.load(core::sync::atomic::Ordering::Relaxed),
            KIND_ADAPTIVE
        );
        assert!(kind_is_ours(KIND_ADAPTIVE) && kind_is_ours(KIND_NORMAL));
        for glibc_only in [16, 32, 64, 128, 16 | 1, 128 | 2, KIND_DESTROYED] {
            assert!(!kind_is_ours(glibc_only), "{glibc_only}");
        }
    }
}
