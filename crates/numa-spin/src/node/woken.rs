//! The woken-sleeper marks (see `crate::blocking`, "Woken sleepers get a
//! CPU"): per lock, hashed by the address of its `locked` word, the time a
//! thread woken for it was woken, until it runs. Set and lifted by the
//! blocking layer's [`mark`] and [`lift`], read by the attempts ahead of a
//! non-empty queue ([`any_woken`], then [`pending`]). A bottom module: it
//! uses only `crate::sync` and the clock. Every access is Relaxed: the marks
//! are hints and order nothing.

#[cfg(not(numa_loom))]
use crate::sync::AtomicU32;

#[cfg(not(numa_loom))]
/// Slots of the woken-sleeper marks (module docs): 64, one cache line each.
pub(crate) const WOKEN_SLOTS: usize = 64;

#[cfg(not(numa_loom))]
/// How long a woken-sleeper mark lasts at most, us (10 ms: two scheduler
/// ticks at `HZ=250`; a woken thread normally runs within one).
pub(crate) const WOKEN_PATIENCE_US: u32 = 10_000;

#[cfg(not(numa_loom))]
/// One woken-sleeper mark: 0, or the time of the wake-up in us (odd, so never
/// 0; the clock's low 32 bits, compared with wrapping arithmetic).
#[repr(align(64))]
struct WokenSlot(std::sync::atomic::AtomicU32);

#[cfg(not(numa_loom))]
#[allow(clippy::declare_interior_mutable_const)]
const NO_MARK: WokenSlot = WokenSlot(std::sync::atomic::AtomicU32::new(0));
#[cfg(not(numa_loom))]
static WOKEN: [WokenSlot; WOKEN_SLOTS] = [NO_MARK; WOKEN_SLOTS];

/// How many slots hold a mark: every change of a slot from 0 and to 0 is a
/// read-modify-write whose result says which it was, so this equals the
/// number of set slots once the changes in flight land. Read first by every
/// attempt ahead of a non-empty queue ([`any_woken`]): one line that changes
/// only when a slot does.
#[cfg(not(numa_loom))]
static WOKEN_SET: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Whether any lock is marked woken (a first look, before [`pending`]).
#[inline]
pub(crate) fn any_woken() -> bool {
    #[cfg(not(numa_loom))]
    // Relaxed: a hint (module docs).
    return WOKEN_SET.load(std::sync::atomic::Ordering::Relaxed) != 0;
    #[cfg(numa_loom)]
    false
}

#[cfg(not(numa_loom))]
/// The mark slot of the lock whose `locked` word this is (a Fibonacci hash of
/// its address).
#[inline]
fn woken_slot(locked: &AtomicU32) -> &'static std::sync::atomic::AtomicU32 {
    let addr = std::ptr::from_ref(locked) as usize as u64;
    let i =
        (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - WOKEN_SLOTS.trailing_zeros())) as usize;
    &WOKEN[i].0
}

/// Test hook: the mark slot of a lock word.
#[cfg(all(test, not(numa_loom)))]
pub(crate) fn tests_slot(locked: &AtomicU32) -> &'static std::sync::atomic::AtomicU32 {
    woken_slot(locked)
}

#[cfg(not(numa_loom))]
/// The monotonic clock in us, low 32 bits, odd.
fn now_us_mark() -> u32 {
    ((numa_topology::monotonic_ns() / 1_000) as u32) | 1
}

#[cfg(not(numa_loom))]
/// Whether a thread woken for the lock whose word is `locked` has not run
/// yet (module docs); lifts a mark older than [`WOKEN_PATIENCE_US`]. Read by
/// attempts ahead of a non-empty queue, which then yield first.
#[inline]
pub(crate) fn pending(locked: &AtomicU32) -> bool {
    let slot = woken_slot(locked);
    // Relaxed: a hint (module docs).
    let mark = slot.load(std::sync::atomic::Ordering::Relaxed);
    mark != 0 && fresh_or_lift(slot, mark)
}

#[cfg(not(numa_loom))]
/// A set mark: whether it is younger than the patience; lifts it if not.
#[cold]
#[inline(never)]
fn fresh_or_lift(slot: &std::sync::atomic::AtomicU32, mark: u32) -> bool {
    if now_us_mark().wrapping_sub(mark) < WOKEN_PATIENCE_US {
        return true;
    }
    // Relaxed: a hint; a newer mark that lands first is kept.
    if slot
        .compare_exchange(
            mark,
            0,
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
        )
        .is_ok()
    {
        WOKEN_SET.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
    false
}

/// Marks made and marks lifted by the thread that was woken, since the
/// process started (a diagnostic: [`counts`]).
#[cfg(not(numa_loom))]
static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
#[cfg(not(numa_loom))]
static LIFTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many marks were made, and how many the woken threads lifted, in this
/// process (`numa_spin::blocking::woken_counts`).
pub(crate) fn counts() -> (u64, u64) {
    #[cfg(not(numa_loom))]
    return (
        MADE.load(std::sync::atomic::Ordering::Relaxed),
        LIFTED.load(std::sync::atomic::Ordering::Relaxed),
    );
    #[cfg(numa_loom)]
    (0, 0)
}

/// Marks the lock whose word is `locked` woken, now.
#[cfg(not(numa_loom))]
pub(crate) fn mark(locked: &AtomicU32) {
    MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // Relaxed: a hint. The swap tells whether the slot was free, for the
    // count of set marks.
    if woken_slot(locked).swap(now_us_mark(), std::sync::atomic::Ordering::Relaxed) == 0 {
        WOKEN_SET.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Lifts the mark of the lock whose word is `locked`, if set.
#[cfg(not(numa_loom))]
pub(crate) fn lift(locked: &AtomicU32) {
    let slot = woken_slot(locked);
    // Relaxed: a hint. The load keeps a mark-free slot's line shared; the
    // swap tells whether we lifted a mark, for the count.
    if slot.load(std::sync::atomic::Ordering::Relaxed) != 0
        && slot.swap(0, std::sync::atomic::Ordering::Relaxed) != 0
    {
        WOKEN_SET.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        LIFTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}
