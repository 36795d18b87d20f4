//! [`RawMutex`]: a blocking mutex on numa-spin's queue, the way ShflLock
//! builds its blocking lock on its spinlock's queue (Kashyap et al., SOSP
//! 2019, section 4.2).
//!
//! # Algorithm
//!
//! The lock is numa-spin's CNA lock ([`numa_spin::RawLock`], Dice & Kogan,
//! EuroSys 2019) with three blocking additions:
//!
//! - **Bounded stealing**: a thread that finds the lock free takes it ahead of
//!   the queue, the releasing thread included, until the queue head has
//!   waited [`Config::steal_bound_ns`](numa_spin::Config::steal_bound_ns)
//!   (10 us by default); then the next release is the head's (see
//!   [`numa_spin::RawLock`]'s fairness docs, which hold here unchanged).
//! - **Parked waiters, woken ahead of their turn**: a queued waiter spins for
//!   its spin budget (20 us by default), then parks on its queue node; the
//!   waiter before it, once it is the queue head and finds the lock held,
//!   wakes it ([`numa_spin::Tunables::wake_ahead`]), so that head-ship passes
//!   to a running thread and the OS's wake-up is off the hand-off's path.
//! - **Sleepers outside the queue**: timed waiters (`try_lock_for`) cannot
//!   queue (a queued waiter cannot leave, see [`numa_spin::timed`]); past a
//!   spin budget of polling they park on the mutex's address in
//!   `parking_lot_core`'s parking lot, after marking the held lock word
//!   ([`numa_spin::blocking`]). The release is one swap that reads the mark
//!   with the lock, and wakes one sleeper only when it was set: an
//!   uncontended unlock stays one atomic instruction.
//!
//! The queue nodes exist only inside `lock()`, as MCS's do, and the guard is
//! zero-sized: `lock_api`'s forget rule, `Send` guards and C's guard-less
//! unlock all hold.
//!
//! # Tunables
//!
//! numa-spin's process-wide ones ([`numa_spin::Config::global`], read from
//! the `NUMA_SPIN_*` environment variables), with the wake-ahead on.

use crate::sync::{self, ParkResult, ParkToken, UnparkResult, UnparkToken};
#[cfg(not(numa_loom))]
use std::time::Duration;
use std::time::Instant;

/// The tunables of [`RawMutex`]: numa-spin's process-wide ones, with the
/// wake-ahead of parked successors on. Zero-sized.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tunables;

impl numa_spin::Tunables for Tunables {
    const DEFAULT: Self = Tunables;

    #[inline]
    fn config(&self) -> &numa_spin::Config {
        numa_spin::Config::global()
    }

    fn wake_ahead(&self) -> bool {
        true
    }
}

/// The queue lock under [`RawMutex`].
type Core = numa_spin::RawLock<true, Tunables>;

/// The unpark token of a sleeper woken while others still sleep: it must mark
/// the lock again (see [`numa_spin::blocking`]).
pub(crate) const MORE_SLEEPERS: UnparkToken = UnparkToken(1);
/// The unpark token of the last sleeper.
pub(crate) const LAST_SLEEPER: UnparkToken = UnparkToken(0);

/// A NUMA-aware blocking mutex on numa-spin's CNA queue (see the
/// [crate docs](crate#what-it-is)): 8 bytes (the queue lock's; more with
/// numa-spin's feature `stats`), `const fn new`, no heap memory.
///
/// # Fairness
///
/// As [`numa_spin::RawLock`]'s: stealing until the queue head has waited its
/// steal bound, then the head's turn; same-node hand-offs first, remote
/// waiters served within `flush_threshold_ns` (1 ms by default). Timed
/// waiters take the lock as numa-spin's timed waiters do (they forbid
/// stealing once they have waited the steal bound) while they poll, and are
/// woken by each release while they sleep.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// let m = cst_mutex::Mutex::new(1u32);
/// let g = m.lock();
/// std::thread::scope(|s| {
///     s.spawn(|| assert!(m.try_lock_for(Duration::from_millis(1)).is_none()));
/// });
/// drop(g);
/// assert_eq!(*m.lock(), 1);
/// ```
#[repr(transparent)]
pub struct RawMutex {
    core: Core,
}

impl RawMutex {
    /// A new unlocked mutex.
    #[cfg(not(numa_loom))]
    pub const fn new() -> Self {
        RawMutex {
            core: numa_spin::RawLock::with_tunables(Tunables),
        }
    }

    /// A new unlocked mutex (loom build: not `const`).
    #[cfg(numa_loom)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        RawMutex {
            core: numa_spin::RawLock::with_tunables(Tunables),
        }
    }

    /// Acquires the lock (`lock_api::RawMutex::lock` without the guard).
    #[inline]
    pub fn acquire(&self) {
        self.core.acquire();
    }

    /// Acquires the lock if it is free and no queued waiter has forbidden
    /// stealing (`lock_api::RawMutex::try_lock`); see
    /// [`numa_spin::RawLock::try_acquire`].
    #[inline]
    pub fn try_acquire(&self) -> bool {
        self.core.try_acquire()
    }

    /// Releases the lock: one swap, and the wake-up of one sleeper if one
    /// marked the lock.
    ///
    /// # Safety
    ///
    /// The lock must be held, and this call ends that acquisition (as for
    /// [`numa_spin::RawLock::release`]).
    #[inline]
    pub unsafe fn release(&self) {
        // SAFETY: forwarded contract.
        if unsafe { self.core.release_sleepers() } {
            self.wake_sleeper();
        }
    }

    /// Releases the lock to the longest-waiting queued thread, if any
    /// (`lock_api::RawMutexFair::unlock_fair`; see
    /// [`numa_spin::RawLock::release_fair`]), waking one sleeper if one
    /// marked the lock.
    ///
    /// # Safety
    ///
    /// As for [`release`](RawMutex::release).
    pub unsafe fn release_fair(&self) {
        // SAFETY: forwarded contract.
        if unsafe { self.core.release_fair_sleepers() } {
            self.wake_sleeper();
        }
    }

    /// The counters of numa-spin's queue lock underneath (feature `stats`).
    #[cfg(feature = "stats")]
    #[cfg_attr(docsrs, doc(cfg(feature = "stats")))]
    pub fn stats(&self) -> numa_spin::Stats {
        self.core.stats()
    }

    /// Whether the lock is held (a snapshot).
    #[inline]
    pub fn is_held(&self) -> bool {
        self.core.is_held()
    }

    /// The queue lock's tail word (a snapshot that changes whenever a waiter
    /// queues), for tests and `numa-bench handoff`. Not a stable API.
    #[doc(hidden)]
    pub fn tail_word(&self) -> u32 {
        self.core.tail_word()
    }

    /// The queue-node code of the last queued waiter (0: nobody queued; a
    /// snapshot that changes whenever a waiter queues), for tests that wait
    /// for waiters to queue one at a time. Not a stable API.
    #[doc(hidden)]
    pub fn tail_code(&self) -> u32 {
        self.core.tail_code()
    }

    /// Whether threads wait in the lock's queue (a snapshot: its tail is
    /// set), for tests and diagnostics.
    pub fn has_queued_waiters(&self) -> bool {
        self.core.has_queued_waiters()
    }

    /// Whether the lock is held and marked by a thread asleep outside the
    /// queue (a snapshot, for tests and diagnostics).
    pub fn has_sleepers(&self) -> bool {
        self.core.sleepers_marked()
    }

    /// Marks the lock woken: a condition variable has woken a thread that
    /// will take it ([`numa_spin::RawLock::note_woken`]).
    pub(crate) fn note_woken(&self) {
        self.core.note_woken();
    }

    /// Lifts the lock's woken mark: the calling thread, woken for it, runs
    /// ([`numa_spin::RawLock::woken_ran`]).
    pub(crate) fn woken_ran(&self) {
        self.core.woken_ran();
    }

    /// The parking-lot key of the sleepers: the mutex's address.
    pub(crate) fn key(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Wakes one thread asleep outside the queue, telling it whether others
    /// still sleep (it then marks the lock again), and marks the lock woken
    /// until it runs ([`numa_spin::RawLock::note_woken`]: attempts ahead of
    /// the queue yield the CPU meanwhile).
    #[cold]
    fn wake_sleeper(&self) {
        // SAFETY: the key is this mutex's address; the callback neither
        // unwinds nor calls into the parking lot.
        unsafe {
            sync::unpark_one(self.key(), |r: UnparkResult| {
                if r.unparked_threads != 0 {
                    self.core.note_woken();
                }
                if r.have_more_threads {
                    MORE_SLEEPERS
                } else {
                    LAST_SLEEPER
                }
            });
        }
    }

    /// Sleeps outside the queue until a release wakes us, or `deadline`
    /// passes. `must_mark`: we were woken while others slept, so the lock
    /// needs our mark (cleared once we have marked it). Returns whether we
    /// slept and were woken; `false` when the lock was free or released
    /// before we slept (so: look again), or on a timeout.
    fn sleep(&self, must_mark: &mut bool, deadline: Option<ParkDeadline>) -> bool {
        if !self.core.mark_sleepers() {
            return false;
        }
        // Our mark stands for every sleeper (see `numa_spin::blocking`).
        *must_mark = false;
        // SAFETY: the key is this mutex's address; `validate` and
        // `timed_out` neither unwind nor call into the parking lot, and
        // `before_sleep` does nothing.
        let r = unsafe {
            sync::park(
                self.key(),
                || self.core.sleepers_marked(),
                || {},
                |_, _| {},
                ParkToken(0),
                deadline,
            )
        };
        match r {
            ParkResult::Unparked(token) => {
                // We run: attempts ahead of the queue need not yield for us.
                self.core.woken_ran();
                // Owed marks are made at once where the lock is held: the
                // next release then wakes the next sleeper while we poll.
                *must_mark = token == MORE_SLEEPERS && !self.core.mark_sleepers();
                true
            }
            ParkResult::Invalid | ParkResult::TimedOut => false,
        }
    }

    /// Ends a sleeper's wait without the lock: if it was woken while others
    /// slept, it hands that duty on to the next sleeper.
    fn leave(&self, must_mark: bool) {
        if must_mark && !self.core.mark_sleepers() {
            // The lock is free (or being taken): wake the next sleeper
            // ourselves; it marks the lock or takes it.
            self.wake_sleeper();
        }
    }

    /// Takes the lock through the queue after a wake-up outside it (a
    /// condition variable's waiter, notified or moved onto the mutex and
    /// woken by a release); `must_mark`: others still sleep, so the lock
    /// needs our mark, made at once if it is held, else once we hold it.
    pub(crate) fn acquire_woken(&self, must_mark: bool) {
        let must_mark = must_mark && !self.core.mark_sleepers();
        #[cfg(not(numa_loom))]
        {
            let acquired = self.acquire_outside(must_mark, None);
            debug_assert!(acquired);
        }
        #[cfg(numa_loom)]
        {
            self.core.acquire();
            self.acquired(must_mark);
        }
    }

    /// Acquires the lock after an acquisition while sleeping outside the
    /// queue: keeps the sleepers' mark if we owe it.
    fn acquired(&self, must_mark: bool) {
        if must_mark {
            // We hold the lock, so the word is marked now.
            let marked = self.core.mark_sleepers();
            debug_assert!(marked);
        }
    }

    /// Acquires the lock, waiting at most until `deadline`
    /// (`lock_api::RawMutexTimed::try_lock_until`): polls as numa-spin's
    /// timed waiters do (forbidding stealing once it has waited the steal
    /// bound) for one spin budget at a time, and sleeps outside the queue in
    /// between until a release wakes it.
    #[cfg(not(numa_loom))]
    pub fn try_acquire_until(&self, deadline: Instant) -> bool {
        // Under a user's loom model: numa-spin's one timed try.
        crate::model_route!(self.core.try_acquire_woken_until(deadline));
        self.core.try_acquire() || self.acquire_outside(false, Some(deadline))
    }

    /// The wait of a thread outside the queue (a timed waiter, a woken
    /// condition-variable waiter): polls as numa-spin's timed waiters do
    /// for a spin budget at a time, sleeping in between until a release
    /// wakes it, until it holds the lock or `deadline` passes. `must_mark`:
    /// the lock owes its mark to sleepers left (see [`Self::sleep`]).
    #[cfg(not(numa_loom))]
    fn acquire_outside(&self, mut must_mark: bool, deadline: Option<Instant>) -> bool {
        let budget = Duration::from_nanos(numa_spin::Tunables::config(&Tunables).spin_budget_ns);
        loop {
            let poll_end = Instant::now()
                .checked_add(budget)
                .map_or(deadline, |t| Some(deadline.map_or(t, |d| t.min(d))));
            let got = match poll_end {
                Some(end) => self.core.try_acquire_woken_until(end),
                None => {
                    self.core.acquire();
                    true
                }
            };
            if got {
                self.acquired(must_mark);
                return true;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                self.leave(must_mark);
                return false;
            }
            self.sleep(&mut must_mark, deadline);
        }
    }

    /// [`try_acquire_until`](RawMutex::try_acquire_until) with a timeout; a
    /// timeout too large for an `Instant` waits as `lock()` does.
    #[cfg(not(numa_loom))]
    pub fn try_acquire_for(&self, timeout: Duration) -> bool {
        // Under a user's loom model: numa-spin's one timed try.
        crate::model_route!(self.core.try_acquire_woken_until(Instant::now()));
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.try_acquire_until(deadline),
            None => {
                self.acquire();
                true
            }
        }
    }

    /// The models' sleeping acquisition: what a thread asleep outside the
    /// queue does (a requeued condition-variable waiter): tries the lock,
    /// else marks it and sleeps until a release wakes it, without a
    /// deadline, so a lost wake-up is a deadlock loom reports.
    #[cfg(numa_loom)]
    #[doc(hidden)]
    pub fn acquire_sleeping_model(&self) {
        let mut must_mark = false;
        loop {
            if self.core.try_acquire() {
                self.acquired(must_mark);
                return;
            }
            if !self.sleep(&mut must_mark, None) {
                crate::sync::spin_loop();
            }
        }
    }

    /// The model's timed acquisition: one attempt, then sleeps outside the
    /// queue; loom's park may time out at any point after it is queued, so
    /// the models explore a timeout racing the release that would wake it.
    #[cfg(numa_loom)]
    #[doc(hidden)]
    pub fn try_acquire_for_model(&self) -> bool {
        let mut must_mark = false;
        loop {
            if self.core.try_acquire() {
                self.acquired(must_mark);
                return true;
            }
            if !self.sleep(&mut must_mark, Some(Instant::now())) {
                // Timed out, or the lock was released before we slept: one
                // more attempt, then give up.
                if self.core.try_acquire() {
                    self.acquired(must_mark);
                    return true;
                }
                self.leave(must_mark);
                return false;
            }
        }
    }
}

/// The deadline type of [`sync::park`].
type ParkDeadline = std::time::Instant;

#[cfg(not(numa_loom))]
impl Default for RawMutex {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for RawMutex {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RawMutex")
            .field("locked", &self.is_held())
            .field("sleepers", &self.has_sleepers())
            .finish()
    }
}

// SAFETY: `lock`/`try_lock` return holding the lock only after numa-spin's
// acquisition did (an Acquire CAS on its word), and every unlock is a
// Release swap of that word by the holder (see `numa_spin::RawLock`'s
// contract, which `release_sleepers` keeps: it is `release` with a swap);
// the guard is zero-sized and `Send`, so a forgotten guard only leaves the
// lock held; the lock refers to nothing by address while unborrowed (the
// parking-lot key is used only while a thread sleeps in a borrow of it).
unsafe impl lock_api::RawMutex for RawMutex {
    #[cfg(not(numa_loom))]
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    #[cfg(numa_loom)]
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = panic!("RawMutex::INIT is unavailable under loom; use RawMutex::new");

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        self.acquire();
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        self.try_acquire().then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        // SAFETY: the caller passes the guard of a held acquisition.
        unsafe { self.release() }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.is_held()
    }
}

// SAFETY: `unlock_fair` releases as `unlock` does, choosing only who gets the
// lock next.
unsafe impl lock_api::RawMutexFair for RawMutex {
    unsafe fn unlock_fair(&self, _guard: Self::Guard) {
        // SAFETY: the caller passes the guard of a held acquisition.
        unsafe { self.release_fair() }
    }
}

// SAFETY: both return holding the lock only through numa-spin's
// acquisitions; a timed-out attempt leaves at most its sleepers' mark, which
// the next release clears (a spurious wake-up for nobody).
#[cfg(not(numa_loom))]
unsafe impl lock_api::RawMutexTimed for RawMutex {
    type Duration = Duration;
    type Instant = Instant;

    fn try_lock_for(&self, timeout: Duration) -> Option<Self::Guard> {
        self.try_acquire_for(timeout).then(lock_api::GuardSend::new)
    }

    fn try_lock_until(&self, deadline: Instant) -> Option<Self::Guard> {
        self.try_acquire_until(deadline)
            .then(lock_api::GuardSend::new)
    }
}

// SAFETY: as for lock_api 0.5 above, without a guard value.
#[cfg(all(feature = "lock_api_04", not(numa_loom)))]
unsafe impl lock_api04::RawMutex for RawMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type GuardMarker = lock_api04::GuardSend;

    fn lock(&self) {
        self.acquire();
    }

    fn try_lock(&self) -> bool {
        self.try_acquire()
    }

    unsafe fn unlock(&self) {
        // SAFETY: the caller holds the lock.
        unsafe { self.release() }
    }

    fn is_locked(&self) -> bool {
        self.is_held()
    }
}

// SAFETY: as for lock_api 0.5 above.
#[cfg(all(feature = "lock_api_04", not(numa_loom)))]
unsafe impl lock_api04::RawMutexFair for RawMutex {
    unsafe fn unlock_fair(&self) {
        // SAFETY: the caller holds the lock.
        unsafe { self.release_fair() }
    }
}

// SAFETY: as for lock_api 0.5 above.
#[cfg(all(feature = "lock_api_04", not(numa_loom)))]
unsafe impl lock_api04::RawMutexTimed for RawMutex {
    type Duration = Duration;
    type Instant = Instant;

    fn try_lock_for(&self, timeout: Duration) -> bool {
        self.try_acquire_for(timeout)
    }

    fn try_lock_until(&self, deadline: Instant) -> bool {
        self.try_acquire_until(deadline)
    }
}

#[cfg(all(test, not(numa_loom), target_os = "linux"))]
mod tests {
    use super::RawMutex;
    use std::time::{Duration, Instant};

    /// The calling thread's kernel id.
    fn tid() -> i32 {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() }
    }

    /// Whether thread `tid` of this process sleeps (state `S` in
    /// `/proc/self/task/TID/stat`).
    fn asleep(tid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(") ")
                    .and_then(|(_, rest)| rest.chars().next())
            })
            == Some('S')
    }

    /// Spawns `n` timed waiters (`try_acquire_for(20 s)`) on the held `lock`
    /// and waits until all of them sleep outside the queue: the lock is
    /// marked and each thread is asleep. Each returns how long it waited
    /// once it has acquired (and released) the lock.
    fn sleeping_timed_waiters<'s>(
        s: &'s std::thread::Scope<'s, '_>,
        lock: &'s RawMutex,
        n: usize,
    ) -> Vec<std::thread::ScopedJoinHandle<'s, Option<Duration>>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let waiters: Vec<_> = (0..n)
            .map(|_| {
                let tx = tx.clone();
                s.spawn(move || {
                    tx.send(tid()).unwrap();
                    let start = Instant::now();
                    let ok = lock.try_acquire_for(Duration::from_secs(20));
                    let waited = start.elapsed();
                    if ok {
                        // SAFETY: acquired just above.
                        unsafe { lock.release() };
                    }
                    ok.then_some(waited)
                })
            })
            .collect();
        let tids: Vec<i32> = (0..n).map(|_| rx.recv().unwrap()).collect();
        let start = Instant::now();
        while !(lock.has_sleepers() && tids.iter().all(|&t| asleep(t))) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the timed waiters never slept"
            );
            std::thread::yield_now();
        }
        waiters
    }

    /// A timed waiter past its polling sleeps outside the queue with the
    /// lock marked; the release wakes it, long before its deadline.
    #[test]
    fn the_release_wakes_a_timed_waiter_asleep_outside_the_queue() {
        let lock = RawMutex::new();
        lock.acquire();
        std::thread::scope(|s| {
            let waiters = sleeping_timed_waiters(s, &lock, 1);
            // SAFETY: acquired above.
            unsafe { lock.release() };
            let waited = waiters.into_iter().next().unwrap().join().unwrap();
            assert!(
                waited.is_some_and(|w| w < Duration::from_secs(15)),
                "{waited:?}"
            );
        });
        assert!(!lock.has_sleepers() && !lock.is_held());
    }

    /// Two sleepers, one release: the one woken learns that another still
    /// sleeps and marks the lock again once it holds it, so its own release
    /// wakes the second (without that the second sleeps to its deadline).
    #[test]
    fn a_woken_sleeper_marks_the_lock_for_the_sleepers_left() {
        let lock = RawMutex::new();
        lock.acquire();
        std::thread::scope(|s| {
            let waiters = sleeping_timed_waiters(s, &lock, 2);
            // SAFETY: acquired above.
            unsafe { lock.release() };
            for w in waiters {
                let waited = w.join().unwrap();
                assert!(
                    waited.is_some_and(|w| w < Duration::from_secs(15)),
                    "{waited:?}"
                );
            }
        });
        assert!(!lock.has_sleepers() && !lock.is_held());
    }

    /// A timed waiter that gives up while the lock is held leaves it marked
    /// (a spurious wake-up for nobody at the next release), never held.
    #[test]
    fn a_timed_out_sleeper_leaves_the_lock_usable() {
        let lock = RawMutex::new();
        lock.acquire();
        std::thread::scope(|s| {
            s.spawn(|| assert!(!lock.try_acquire_for(Duration::from_millis(5))));
        });
        // SAFETY: acquired above.
        unsafe { lock.release() };
        assert!(!lock.is_held() && !lock.has_sleepers());
        assert!(lock.try_acquire());
        // SAFETY: acquired just above.
        unsafe { lock.release() };
    }
}
