//! A counting global allocator: live bytes and blocks allocated by *opted-in*
//! threads, so the torture test can show that dropped locks leave nothing
//! allocated (snodes, per-node reader counters, queue nodes).
//!
//! Each block carries a small header recording whether it was counted when it
//! was allocated; a block is subtracted on free only if it was counted, so
//! frees of blocks from uncounted threads (the test harness, hashtables grown
//! before the measurement) cannot make the balance drift. A block allocated by
//! a counted thread and freed by any other thread is still balanced.
//!
//! Every call into [`System`] is serialized by a `numa_spin::RawMutex`: the
//! torture test also runs numa-spin as the lock *inside* a global allocator,
//! under the load of every other lock's torture (cst-mutex and parking_lot
//! allocate their tables and snodes through it, from threads that may already
//! wait in a numa-spin lock).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering};

/// The header in front of each block: at least 16 bytes and at least the
/// block's alignment, so the user pointer keeps the requested alignment.
const MIN_HEADER: usize = 16;
/// Marker stored in the header word of a counted block.
const COUNTED_TAG: u64 = 0x636f_756e_7465_6421;
/// Marker stored in the header word of an uncounted block.
const UNCOUNTED_TAG: u64 = 0x6e6f_7420_636f_756e;

static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);
static LIVE_BLOCKS: AtomicI64 = AtomicI64::new(0);

thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

/// The global allocator of the torture test: [`System`] plus a header, under
/// a numa-spin lock.
pub struct CountingAlloc;

/// Serializes the calls into [`System`].
static SYSTEM_LOCK: numa_spin::RawMutex = <numa_spin::RawMutex as lock_api::RawMutex>::INIT;

/// Runs `f` (a call into [`System`]) under [`SYSTEM_LOCK`].
fn locked<T>(f: impl FnOnce() -> T) -> T {
    use lock_api::RawMutex as _;
    let guard = SYSTEM_LOCK.lock();
    let r = f();
    // SAFETY: `guard` is the acquisition just above, released once.
    unsafe { SYSTEM_LOCK.unlock(guard) };
    r
}

/// Turns counting on or off for the calling thread's future allocations.
pub fn count_this_thread(on: bool) {
    COUNTED.with(|c| c.set(on));
}

/// Bytes and blocks allocated by counted threads and not yet freed.
pub fn live() -> (i64, i64) {
    (
        LIVE_BYTES.load(Ordering::SeqCst),
        LIVE_BLOCKS.load(Ordering::SeqCst),
    )
}

fn header(layout: Layout) -> usize {
    layout.align().max(MIN_HEADER)
}

/// The layout of the whole block (header + user part), or `None` on overflow.
fn outer(layout: Layout, size: usize) -> Option<Layout> {
    let size = size.checked_add(header(layout))?;
    Layout::from_size_align(size, layout.align().max(MIN_HEADER)).ok()
}

/// Writes the header of a fresh block and returns the user pointer.
///
/// # Safety
/// `base` is a non-null block of `outer(layout, ..)` bytes.
unsafe fn finish(base: *mut u8, layout: Layout) -> *mut u8 {
    // `try_with`: during thread teardown the flag may be gone; count nothing then.
    let counted = COUNTED.try_with(Cell::get).unwrap_or(false);
    // SAFETY: the header is `header(layout) >= 16` bytes inside the block, so
    // `user` and `user - 8` are in bounds; `user - 8` is 8-aligned because the
    // block is at least 16-aligned and the header is a multiple of 16.
    let user = unsafe { base.add(header(layout)) };
    // SAFETY: see above.
    unsafe {
        user.sub(8)
            .cast::<u64>()
            .write(if counted { COUNTED_TAG } else { UNCOUNTED_TAG })
    };
    if counted {
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::SeqCst);
        LIVE_BLOCKS.fetch_add(1, Ordering::SeqCst);
    }
    user
}

/// Whether the block at `user` was counted.
///
/// # Safety
/// `user` was returned by this allocator and not yet freed.
unsafe fn was_counted(user: *mut u8) -> bool {
    // SAFETY: `finish` wrote the tag at `user - 8`, inside the block.
    let tag = unsafe { user.sub(8).cast::<u64>().read() };
    debug_assert!(
        tag == COUNTED_TAG || tag == UNCOUNTED_TAG,
        "heap corruption"
    );
    tag == COUNTED_TAG
}

// SAFETY: every method forwards to `System` with a layout that is the caller's
// layout grown by a header (same or larger alignment), and hands out the
// pointer just past the header, which keeps the caller's size and alignment;
// `dealloc`/`realloc` undo the offset with the same layout arithmetic.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(full) = outer(layout, layout.size()) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `full` has a non-zero size (it includes the header).
        let base = locked(|| unsafe { System.alloc(full) });
        if base.is_null() {
            return base;
        }
        // SAFETY: `base` is a fresh block of `full` bytes.
        unsafe { finish(base, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let Some(full) = outer(layout, layout.size()) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `full` has a non-zero size.
        let base = locked(|| unsafe { System.alloc_zeroed(full) });
        if base.is_null() {
            return base;
        }
        // SAFETY: `base` is a fresh block of `full` bytes.
        unsafe { finish(base, layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller passes a live block of this allocator.
        if unsafe { was_counted(ptr) } {
            LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::SeqCst);
            LIVE_BLOCKS.fetch_sub(1, Ordering::SeqCst);
        }
        let full = outer(layout, layout.size()).expect("layout was valid at allocation");
        // SAFETY: `ptr - header` is the block `alloc` got from `System` with `full`.
        locked(|| unsafe { System.dealloc(ptr.sub(header(layout)), full) });
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (Some(full), Some(new_full)) = (outer(layout, layout.size()), outer(layout, new_size))
        else {
            return std::ptr::null_mut();
        };
        // SAFETY: the caller passes a live block of this allocator.
        let counted = unsafe { was_counted(ptr) };
        // SAFETY: `ptr - header` is the block allocated with `full`; the new
        // size is non-zero and keeps the alignment; `System.realloc` copies the
        // header along with the data.
        let base =
            locked(|| unsafe { System.realloc(ptr.sub(header(layout)), full, new_full.size()) });
        if base.is_null() {
            return base;
        }
        if counted {
            LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::SeqCst);
        }
        // SAFETY: the header is inside the new block (see `finish`).
        unsafe { base.add(header(layout)) }
    }
}
