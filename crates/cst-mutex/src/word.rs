//! The lock word's encoding: the bottom layer of the crate (no imports).
//!
//! # State word
//!
//! | bits | name | meaning |
//! | --- | --- | --- |
//! | 0 | `LOCKED_BIT` | the lock is held |
//! | 1 .. 3 | | unused (0) |
//! | 4 .. 7 | head count | snode queues holding a registration (see `queue.rs`) |
//! | 7 | `DETACH_BIT` | `RawMutex` only: a timed waiter left while the lock was held; the releasing unlock gives idle snodes back |
//! | 8 .. `HALF` | parked count | threads parked on some snode of this lock |
//! | `HALF` .. | | unused (0) |
//!
//! `HALF` is half the word (32 on 64-bit targets). The parked count is exact:
//! it changes only inside the parking lot's queue lock of the snode the thread
//! parks on (validate, unpark callback, timeout callback), so an unlocker
//! that sees a count of 0 knows nobody sleeps: its release (one subtract)
//! is all it owes.
//!

pub(crate) const LOCKED_BIT: usize = 1;
/// One registered snode-queue head (see [`crate::queue`]).
pub(crate) const HEAD_ONE: usize = 16;
/// The registered-head count: at most 7 heads register at once (one per
/// snode); the heads of further nodes spin on the word unregistered.
pub(crate) const HEAD_MASK: usize = 0x70;
/// `RawMutex` only: a timed waiter gave up while the lock was held, so the
/// unlock that releases the word checks whether the snodes can go back to
/// the pool (an idle mutex holds no heap memory).
pub(crate) const DETACH_BIT: usize = 0x80;
pub(crate) const PARKED_ONE: usize = 256;
pub(crate) const HALF: u32 = usize::BITS / 2;
pub(crate) const PARKED_MASK: usize = ((1usize << HALF) - 1) & !0xFF;
/// The most threads the parked count holds: 2^24 - 1 on 64-bit targets,
/// 2^8 - 1 = 255 on 32-bit ones.
pub(crate) const PARKED_MAX: usize = PARKED_MASK / PARKED_ONE;

#[inline]
pub(crate) fn parked_count(s: usize) -> usize {
    (s & PARKED_MASK) / PARKED_ONE
}
