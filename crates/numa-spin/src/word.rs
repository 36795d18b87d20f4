//! The encodings of the lock words, shared by every queue lock of the crate:
//! the values of `locked` and the flag bits and tail shift of `tail` (the
//! layout table is in [`crate::raw_lock`]). A bottom module: it uses nothing
//! else of the crate.

/// `locked`: free.
pub(crate) const UNLOCKED: u32 = 0;
/// `locked`: held.
pub(crate) const LOCKED: u32 = 1;
/// `locked`: held, released by `unlock_fair` to the queue head, which takes it
/// with a CAS `HANDED -> LOCKED` (the token is consumed exactly once, even by a head
/// whose view of the word is stale).
pub(crate) const HANDED: u32 = 2;

/// `locked` bit 2, only ever set beside [`LOCKED`]: threads may sleep outside
/// the queue (a blocking lock's timed waiters and requeued condition-variable
/// waiters, parked on the lock's address), so the release must wake one. Set
/// and read only by the blocking layer's methods (`crate::blocking`); every
/// acquisition still compares the word with `UNLOCKED` or `HANDED`, which a
/// marked word never equals, and the blocking layer's release swaps the mark
/// out with the lock.
pub(crate) const SLEEPERS: u32 = 4;

/// `tail` bit 0: lock stealing forbidden.
pub(crate) const NO_STEAL: u32 = 1;
/// `tail` bit 1: the queue head is not running: it was parked when head-ship
/// reached it and has not run since, or it naps (see `crate::cna`). A hint
/// (every access is Relaxed): arrivals that see it spin for the free lock
/// instead of queueing behind a head that cannot take it.
pub(crate) const HEAD_ASLEEP: u32 = 2;
/// `tail` bit 2: the queue head has waited its steal bound and claims the
/// next release; set together with `NO_STEAL` and lifted with it when the
/// head acquires. `NO_STEAL` alone may also be a timed waiter's mark
/// (`crate::timed`); this bit tells a timed waiter that a queue head's claim
/// comes first. A hint (every access is Relaxed).
pub(crate) const HEAD_CLAIM: u32 = 4;
/// The three flag bits of `tail`.
pub(crate) const TAIL_FLAGS: u32 = NO_STEAL | HEAD_ASLEEP | HEAD_CLAIM;
/// `tail`: the queue tail's code is `tail >> TAIL_SHIFT`.
pub(crate) const TAIL_SHIFT: u32 = 3;
