//! The locks inside a user's loom model: `RUSTFLAGS="--cfg loom"` with this
//! crate's `loom` feature (and not the crate's own `--cfg numa_loom` models).
//!
//! Every raw lock of the crate then keeps its API (`const fn new`, `INIT`,
//! the `lock_api` traits, guards, timeouts), but its inherent core
//! (`acquire`, `try_acquire`, `release`, `release_fair`, `is_held`,
//! `try_acquire_for`, `try_acquire_until`) runs on a `loom::sync::Mutex<()>`
//! made for the lock on its first use in each loom execution, beside a loom
//! atomic that orders a `try_lock` against a release: loom explores the
//! user's code around one exclusion, at about the cost of loom's own `Mutex`.
//! The queue algorithms themselves (CNA, HQ) are model-checked by the crate's
//! own models (`tests/loom.rs`, `--cfg numa_loom`); run under a user's model
//! they would multiply its executions by the queue's interleavings (see the
//! crate docs, "Checking your own code with loom", for the counts).
//!
//! What a model sees:
//! - `lock`, `try_lock` and `unlock` are loom's mutex operations: acquire and
//!   release ordering, and a blocked `lock` is a loom-blocked thread;
//! - `unlock_fair` and `bump` release like `unlock` (which waiter goes next is
//!   loom's choice in every case);
//! - `try_lock_for` and `try_lock_until` try once; a failed try yields to the
//!   other loom threads and times out. A model explores both the acquisition
//!   (the release came first) and the timeout, whatever the duration (loom has
//!   no clock);
//! - `ReentrantMutex`'s owner is the loom thread, not the OS thread (all loom
//!   threads run on one);
//! - the NUMA node is not consulted: `numa_topology::set_current_thread_node`
//!   is a per-OS-thread setting, which every loom thread shares.
//!
//! A lock used in two executions (a `static`, or one kept across
//! `loom::model` calls) panics with a message saying so: its state and its
//! data would carry over from one execution into the next. Create locks inside
//! the model closure, or through `loom::lazy_static!`.

use std::any::Any;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// One lock's state in the current execution.
///
/// A guard still held when the execution ends is forgotten (see `Drop`).
struct ModelLock {
    held: std::sync::Mutex<Option<loom::sync::MutexGuard<'static, ()>>>,
    mutex: loom::sync::Mutex<()>,
    /// Releases so far, a loom atomic: `try_lock` reads it and `unlock`
    /// bumps it just before releasing, so loom sees the two as racing
    /// accesses and explores both orders (loom's own mutex release is no
    /// access its scheduler orders a `try_lock` against: over a bare
    /// `loom::sync::Mutex`, a `try_lock` racing a release only ever succeeds).
    releases: loom::sync::atomic::AtomicUsize,
}

impl Drop for ModelLock {
    /// A guard still held when the execution ends (a forgotten guard, or one
    /// whose release an unwinding thread skipped) is forgotten: loom tears
    /// the execution down outside the model, where releasing it would panic.
    fn drop(&mut self) {
        let held = self
            .held
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::forget(held.take());
    }
}

// SAFETY: loom runs the threads of an execution one at a time, switching only
// inside loom operations; the guard in `held` is a token of loom's mutex state,
// which any loom thread may release (loom's `Mutex` does not check the
// releasing thread), as the crate's `Send` guards allow.
unsafe impl Send for ModelLock {}
// SAFETY: as for `Send`; `held` is only touched between loom operations.
unsafe impl Sync for ModelLock {}

/// The model states of the current execution (this crate's locks, and
/// cst-mutex's condition variables and rwlocks), by the address of their tag.
struct Registry {
    generation: u32,
    states: std::sync::Mutex<HashMap<usize, Arc<dyn Any + Send + Sync>>>,
}

/// Executions seen by this process (the first is 1; 0 marks an unused lock).
static GENERATIONS: AtomicU32 = AtomicU32::new(0);

loom::lazy_static! {
    static ref STATES: Registry = Registry {
        // Relaxed: one counter, read back by the same OS thread.
        generation: GENERATIONS.fetch_add(1, Ordering::Relaxed).wrapping_add(1).max(1),
        states: std::sync::Mutex::new(HashMap::new()),
    };
}

/// A word of a lock object that its real algorithm does not use under a
/// user's model: it records the execution that first used the object.
pub trait Tag {
    /// The execution recorded (0: none yet).
    fn generation(&self) -> u32;
    /// Records `generation`.
    fn set_generation(&self, generation: u32);
}

impl Tag for AtomicU32 {
    fn generation(&self) -> u32 {
        // Relaxed: loom's threads run on one OS thread, one at a time.
        self.load(Ordering::Relaxed)
    }
    fn set_generation(&self, generation: u32) {
        // Relaxed: as in `generation`.
        self.store(generation, Ordering::Relaxed);
    }
}

impl Tag for AtomicUsize {
    fn generation(&self) -> u32 {
        // Relaxed: as for `AtomicU32`. Only values this module stored are read.
        u32::try_from(self.load(Ordering::Relaxed)).unwrap_or(u32::MAX)
    }
    fn set_generation(&self, generation: u32) {
        // Relaxed: as for `AtomicU32`.
        self.store(generation as usize, Ordering::Relaxed);
    }
}

/// The model state of the lock object whose tag is `tag`, made by `make` on
/// the object's first use in this execution (a fresh object, even at the
/// address of one dropped earlier in the execution, gets a fresh state).
/// Used by this crate's locks and by cst-mutex's; not a stable API.
///
/// # Panics
///
/// If the object was used in an earlier execution (a `static`, or an object
/// kept across `loom::model` calls), with a message naming `owner` (the
/// crate) and the fix.
#[doc(hidden)]
pub fn state<S: Any + Send + Sync, G: Tag>(
    tag: &G,
    owner: &str,
    make: impl FnOnce() -> S,
) -> Arc<S> {
    let reg = &*STATES;
    let key = std::ptr::from_ref(tag).addr();
    let mut states = reg
        .states
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match tag.generation() {
        0 => {
            tag.set_generation(reg.generation);
            let s = Arc::new(make());
            states.insert(key, s.clone());
            return s;
        }
        g if g == reg.generation => {}
        _ => {
            drop(states);
            panic!(
                "{owner}: a lock used in an earlier loom execution (a `static`, or a lock \
                 kept across `loom::model` calls) was used again; create it inside the \
                 model closure or with `loom::lazy_static!`"
            )
        }
    }
    match states.get(&key).cloned().map(Arc::downcast::<S>) {
        Some(Ok(s)) => s,
        // Unreachable: the tag was set with this key's state, which is only
        // replaced by an object that set its own tag at the same address.
        _ => {
            drop(states);
            panic!("{owner}: a lock's loom model state is missing")
        }
    }
}

/// The state of the lock whose tag is `tag` (a word of the lock that the
/// queue algorithm does not use under a user's model).
fn model_lock(tag: &AtomicU32) -> Arc<ModelLock> {
    state(tag, "numa_spin", || ModelLock {
        held: std::sync::Mutex::new(None),
        mutex: loom::sync::Mutex::new(()),
        releases: loom::sync::atomic::AtomicUsize::new(0),
    })
}

/// Records the guard of an acquisition of `l`.
fn hold(l: &Arc<ModelLock>, g: loom::sync::MutexGuard<'_, ()>) {
    // SAFETY: the guard borrows `l.mutex`, which lives as long as the
    // registry's `Arc` (to the end of the execution), and `held`, dropped
    // first, is where the guard is kept; it is taken out by `release`.
    let g: loom::sync::MutexGuard<'static, ()> = unsafe { std::mem::transmute(g) };
    *l.held
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(g);
}

/// `acquire`: waits for the lock.
pub(crate) fn acquire(tag: &AtomicU32) {
    let l = model_lock(tag);
    let g = l
        .mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    hold(&l, g);
}

/// `try_acquire`: takes the lock if it is free.
pub(crate) fn try_acquire(tag: &AtomicU32) -> bool {
    let l = model_lock(tag);
    // Relaxed: an access for loom to order against releases; the mutex
    // carries the synchronisation.
    let _ = l.releases.load(Ordering::Relaxed);
    match l.mutex.try_lock() {
        Ok(g) => {
            hold(&l, g);
            true
        }
        Err(_) => false,
    }
}

/// `try_acquire_for` / `try_acquire_until`: one try; a failed one yields to
/// the other loom threads (so a retry loop makes progress) and times out.
/// The release coming within the timeout and the deadline passing first are
/// the two orders of that try and the holder's release, and loom explores both.
pub(crate) fn try_acquire_timed(tag: &AtomicU32) -> bool {
    if try_acquire(tag) {
        return true;
    }
    loom::thread::yield_now();
    false
}

/// `release` / `release_fair`: ends the acquisition. Skipped while the
/// thread unwinds: a guard dropped by a panic (loom's deadlock report, a
/// failed assertion) would touch an execution that is being torn down, and
/// panic again.
pub(crate) fn release(tag: &AtomicU32) {
    if std::thread::panicking() {
        return;
    }
    let l = model_lock(tag);
    let g = l
        .held
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    assert!(g.is_some(), "numa_spin: release of a lock that is not held");
    // Relaxed: as in `try_acquire`. Before the mutex's release, so that a
    // `try_lock` loom runs ahead of this access still finds the lock held.
    l.releases.fetch_add(1, Ordering::Relaxed);
    drop(g);
}

/// `is_held`: whether an acquisition is recorded.
pub(crate) fn is_held(tag: &AtomicU32) -> bool {
    model_lock(tag)
        .held
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .is_some()
}

/// `RawThreadId::current` under a model: the loom thread's id, unique in the
/// execution.
pub(crate) fn thread_id() -> NonZeroUsize {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    loom::thread_local! {
        // Relaxed: one counter, read back by the same OS thread.
        static ID: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ID.with(|id| NonZeroUsize::new(*id).unwrap_or(NonZeroUsize::MIN))
}
