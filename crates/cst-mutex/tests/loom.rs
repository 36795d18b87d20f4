//! loom models of cst-mutex: 2-4 threads on 2-3 virtual nodes.
//!
//! Run with
//! `RUSTFLAGS="--cfg numa_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p cst-mutex --test loom`.
//! Under loom, parking maps onto a loom-visible parking lot (see `src/sync.rs`)
//! in which a timed park may time out at any point once queued. Every model
//! counts the runs that reached the path it exists for and asserts the
//! count is not 0. With `CST_LOOM_DEEP` set (`scripts/verify-deep.sh`), the
//! models kept at bound 1 for the suite's budget run at
//! `LOOM_MAX_PREEMPTIONS` instead (see `model_deep`).
#![cfg(numa_loom)]

use cst_mutex::loom_hooks as hooks;
use cst_mutex::{RawCondvar, RawMutex, RawRwLock};
use lock_api::RawCondvar as _;
use lock_api::{
    RawMutex as _, RawRwLock as _, RawRwLockDowngrade as _, RawRwLockUpgrade as _,
    RawRwLockUpgradeDowngrade as _, RawRwLockUpgradeTimed as _,
};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::Ordering::Relaxed;
use loom::thread;
use std::sync::atomic::{AtomicUsize as StdCounter, Ordering as StdOrdering};
use std::time::{Duration, Instant};

type Mutex<T> = lock_api::Mutex<RawMutex, T>;
type RwLock<T> = lock_api::RwLock<RawRwLock, T>;

fn mutex<T>(v: T) -> Mutex<T> {
    Mutex::from_raw(RawMutex::new(), v)
}

/// Adds 1 to the cell. loom checks the causality of every access to a
/// `loom::cell::UnsafeCell`: an access not ordered by the lock panics, which
/// is what the models test.
fn bump(c: &UnsafeCell<u32>) {
    // SAFETY: called only inside the lock under test; loom verifies it.
    c.with_mut(|p| unsafe { *p += 1 });
}

/// Sets the cell (see [`bump`]).
fn set(c: &UnsafeCell<u32>, v: u32) {
    // SAFETY: called only inside an exclusive section; loom verifies it.
    c.with_mut(|p| unsafe { *p = v });
}

/// Reads the cell (see [`bump`]).
fn get(c: &UnsafeCell<u32>) -> u32 {
    // SAFETY: called only inside a shared or exclusive section; loom verifies it.
    c.with(|p| unsafe { *p })
}

/// Runs `f` under loom (preemption bound 2 unless `LOOM_MAX_PREEMPTIONS`
/// says otherwise) and prints how many executions loom explored (shown with
/// `--nocapture`).
fn model(f: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    b.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    });
    eprintln!("loom: {} executions", runs.load(Ordering::Relaxed));
}

/// As [`model`] with the preemption bound fixed at `bound`.
fn model_bounded(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    model_with(bound, 1_000, f);
}

/// As [`model_with`], except that with `CST_LOOM_DEEP` set (as
/// `scripts/verify-deep.sh` does) the bound is `LOOM_MAX_PREEMPTIONS` when
/// that is higher: for models kept at a low bound only to fit the suite's
/// budget.
fn model_deep(bound: usize, max_branches: usize, f: impl Fn() + Sync + Send + 'static) {
    let env = std::env::var_os("CST_LOOM_DEEP")
        .and_then(|_| std::env::var("LOOM_MAX_PREEMPTIONS").ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    model_with(bound.max(env), max_branches, f);
}

/// As [`model_bounded`], also raising loom's limit on the scheduling branches
/// of one execution (default 1 000) to `max_branches`.
fn model_with(bound: usize, max_branches: usize, f: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(bound);
    b.max_branches = max_branches;
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    b.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    });
    eprintln!("loom: {} executions", runs.load(Ordering::Relaxed));
}

/// Two threads on two nodes: the loom cell reports any overlap.
///
/// Counted: a thread found the lock held just before its `lock()` (so it
/// waited: spinning for the word, queued or parked).
#[test]
fn mutex_exclusion() {
    static WAITED: StdCounter = StdCounter::new(0);
    model(|| {
        let m = Arc::new(mutex(UnsafeCell::new(0u32)));
        let t = {
            let m = m.clone();
            thread::spawn(move || {
                hooks::set_node(1);
                if m.is_locked() {
                    WAITED.fetch_add(1, StdOrdering::Relaxed);
                }
                bump(&m.lock());
            })
        };
        hooks::set_node(0);
        if m.is_locked() {
            WAITED.fetch_add(1, StdOrdering::Relaxed);
        }
        bump(&m.lock());
        t.join().unwrap();
        let g = m.lock();
        assert_eq!(get(&g), 2);
    });
    assert!(WAITED.load(StdOrdering::Relaxed) > 0, "nobody waited");
}

/// A waiter arrives while the holder holds and unlocks: it must get the
/// lock (loom reports a deadlock otherwise), and neither the queue nor the
/// sleepers' mark is left behind.
///
/// Counted: the waiter found the lock held just before its `lock()`.
#[test]
fn no_lost_wakeup() {
    static WAITED: StdCounter = StdCounter::new(0);
    model(|| {
        let m = Arc::new(mutex(0u32));
        hooks::set_node(0);
        let g = m.lock();
        let t = {
            let m = m.clone();
            thread::spawn(move || {
                hooks::set_node(1);
                if m.is_locked() {
                    WAITED.fetch_add(1, StdOrdering::Relaxed);
                }
                *m.lock() += 1;
            })
        };
        drop(g);
        t.join().unwrap();
        assert_eq!(*m.lock(), 1);
        // SAFETY: only reads the lock's words.
        let raw = unsafe { m.raw() };
        assert!(!raw.has_queued_waiters() && !raw.has_sleepers());
    });
    assert!(
        WAITED.load(StdOrdering::Relaxed) > 0,
        "the waiter never waited"
    );
}

/// Condvar: a notify racing the wait is never lost.
///
/// Counted: the waiter waited and the notify woke it.
#[test]
fn condvar_notify_racing_wait() {
    static WOKEN: StdCounter = StdCounter::new(0);
    model(|| {
        // (lock_api's `Condvar::new` needs the const `INIT`: use the raw condvar.)
        let pair = Arc::new((
            RawMutex::new(),
            RawCondvar::new(),
            loom::sync::atomic::AtomicBool::new(false),
        ));
        let t = {
            let pair = pair.clone();
            thread::spawn(move || {
                hooks::set_node(1);
                let g = pair.0.lock();
                pair.2.store(true, Relaxed);
                // SAFETY: we hold the mutex with state `g`.
                unsafe { pair.0.unlock(g) };
                pair.1.notify_one()
            })
        };
        hooks::set_node(0);
        let mut g = pair.0.lock();
        let mut waited = false;
        while !pair.2.load(Relaxed) {
            waited = true;
            // SAFETY: we hold `pair.0` with state `g`.
            unsafe { pair.1.wait(&pair.0, &mut g) };
        }
        // SAFETY: we hold the mutex with state `g`.
        unsafe { pair.0.unlock(g) };
        if t.join().unwrap() && waited {
            WOKEN.fetch_add(1, StdOrdering::Relaxed);
        }
    });
    assert!(
        WOKEN.load(StdOrdering::Relaxed) > 0,
        "no waiter woken by the notify"
    );
}

/// RwLock: a reader and a writer on two nodes never overlap.
///
/// Counted: runs in which the writer asked while the reader was inside, and
/// runs in which the reader asked while the writer was in and then saw its
/// write.
#[test]
fn rwlock_reader_writer_exclusion() {
    static WRITER_WAITED: StdCounter = StdCounter::new(0);
    static READER_WAITED: StdCounter = StdCounter::new(0);
    static INSIDE: StdCounter = StdCounter::new(0);
    model(|| {
        INSIDE.store(0, StdOrdering::Relaxed);
        let l = Arc::new(RwLock::from_raw(RawRwLock::new(), UnsafeCell::new(0u32)));
        let t = {
            let l = l.clone();
            thread::spawn(move || {
                hooks::set_node(1);
                let writer_in = l.is_locked_exclusive();
                let g = l.read();
                INSIDE.store(1, StdOrdering::Relaxed);
                let v = get(&g);
                // A scheduling point inside the read section.
                thread::yield_now();
                INSIDE.store(0, StdOrdering::Relaxed);
                (writer_in, v)
            })
        };
        hooks::set_node(0);
        // Lets the reader in first at no preemption.
        thread::yield_now();
        let reader_in = INSIDE.load(StdOrdering::Relaxed) != 0;
        {
            let g = l.write();
            set(&g, 1);
        }
        let (writer_in, seen) = t.join().unwrap();
        assert!(seen == 0 || seen == 1);
        assert!(!l.is_locked());
        if reader_in && seen == 0 {
            WRITER_WAITED.fetch_add(1, StdOrdering::Relaxed);
        }
        if writer_in && seen == 1 {
            READER_WAITED.fetch_add(1, StdOrdering::Relaxed);
        }
    });
    assert!(
        WRITER_WAITED.load(StdOrdering::Relaxed) > 0,
        "writer never waited"
    );
    assert!(
        READER_WAITED.load(StdOrdering::Relaxed) > 0,
        "reader never waited"
    );
}

/// Two readers race for the state-word counter, so one of them registers on
/// its node's snode counter, which the state word does not show; a writer
/// must still wait for it.
///
/// Counted: a reader registered on a node counter. At preemption bound 2 the
/// contention that sends a reader there always comes from the writer, so
/// the node reader enters after the write (a node reader that enters first
/// needs a third preemption, see [`rwlock_node_reader_then_writer`], which
/// reaches it by having the writer wait for a reader first).
#[test]
fn rwlock_node_reader_vs_writer() {
    static NODE_READER: StdCounter = StdCounter::new(0);
    model(|| {
        let l = Arc::new(RawRwLock::new());
        let cell = Arc::new(UnsafeCell::new(0u32));
        let readers: Vec<_> = (0..2)
            .map(|node| {
                let (l, cell) = (l.clone(), cell.clone());
                thread::spawn(move || {
                    hooks::set_node(node);
                    let g = l.lock_shared();
                    let on_node = on_node_counter(&g);
                    let v = get(&cell);
                    // A scheduling point inside the read section, so the
                    // other reader's CAS can meet a changed word.
                    thread::yield_now();
                    // SAFETY: our shared acquisition.
                    unsafe { l.unlock_shared(g) };
                    (on_node, v)
                })
            })
            .collect();
        hooks::set_node(0);
        let w = l.lock_exclusive();
        set(&cell, 1);
        // SAFETY: our exclusive acquisition.
        unsafe { l.unlock_exclusive(w) };
        for r in readers {
            let (on_node, seen) = r.join().unwrap();
            assert!(seen == 0 || seen == 1);
            if on_node {
                NODE_READER.fetch_add(1, StdOrdering::Relaxed);
            }
        }
        assert!(!l.is_locked());
    });
    assert!(
        NODE_READER.load(StdOrdering::Relaxed) > 0,
        "no reader registered on a node counter"
    );
}

/// Upgrade and downgrade beside a reader: the upgraded writer excludes the
/// reader, the downgraded guard shares with it.
///
/// Counted: runs in which the reader was inside when the upgrade began (the
/// upgrade drained it), and runs in which the reader was inside beside the
/// downgraded read.
#[test]
fn rwlock_upgrade_downgrade() {
    static DRAINED: StdCounter = StdCounter::new(0);
    static SHARED: StdCounter = StdCounter::new(0);
    model(|| {
        // A loom atomic: loom orders its accesses against the lock's, so
        // the schedules in which the reader is inside are explored.
        let inside = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let l = Arc::new(RawRwLock::new());
        let cell = Arc::new(UnsafeCell::new(0u32));
        let t = {
            let (l, cell, inside) = (l.clone(), cell.clone(), inside.clone());
            thread::spawn(move || {
                hooks::set_node(1);
                let g = l.lock_shared();
                inside.store(1, Relaxed);
                let v = get(&cell);
                // A scheduling point inside the read section.
                thread::yield_now();
                inside.store(0, Relaxed);
                // SAFETY: we hold a shared acquisition with state `g`.
                unsafe { l.unlock_shared(g) };
                v
            })
        };
        hooks::set_node(0);
        let up = l.lock_upgradable();
        let drained = inside.load(Relaxed) != 0;
        // SAFETY: `up` is our upgradable acquisition.
        let w = unsafe { l.upgrade(up) };
        set(&cell, 1);
        // SAFETY: `w` is our exclusive acquisition.
        let r = unsafe { l.downgrade(w) };
        assert_eq!(get(&cell), 1);
        let shared = inside.load(Relaxed) != 0;
        // SAFETY: `r` is our shared acquisition.
        unsafe { l.unlock_shared(r) };
        let seen = t.join().unwrap();
        assert!(seen == 0 || seen == 1);
        assert!(!l.is_locked());
        if drained {
            DRAINED.fetch_add(1, StdOrdering::Relaxed);
        }
        if shared {
            SHARED.fetch_add(1, StdOrdering::Relaxed);
        }
    });
    assert!(
        DRAINED.load(StdOrdering::Relaxed) > 0,
        "upgrade never drained a reader"
    );
    assert!(
        SHARED.load(StdOrdering::Relaxed) > 0,
        "reader never beside the downgraded read"
    );
}

/// A recursive read (`try_lock_shared_recursive`, which joins a reader count
/// past `WRITER_BIT`) racing a writer's downgrade: once the downgrade has
/// counted itself on the state word, the recursive reader may join before
/// `WRITER_BIT` is cleared, and must see the write section. A second model
/// thread joins through a reader that acquired normally, so the join's own
/// Acquire is necessary too. Counts the runs in which a join happened while
/// `WRITER_BIT` was still set (a plain reader would have been refused).
#[test]
fn rwlock_recursive_read_joins_a_downgrading_writer() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static JOINED_PAST_WRITER: AtomicUsize = AtomicUsize::new(0);
    static JOINED: AtomicUsize = AtomicUsize::new(0);
    JOINED_PAST_WRITER.store(0, Ordering::Relaxed);
    JOINED.store(0, Ordering::Relaxed);
    model(|| {
        let l = Arc::new(RawRwLock::new());
        let cell = Arc::new(UnsafeCell::new(0u32));
        let t = {
            let (l, cell) = (l.clone(), cell.clone());
            thread::spawn(move || {
                hooks::set_node(1);
                loop {
                    if let Some(g) = l.try_lock_shared_recursive() {
                        let writer_waits = l.try_lock_shared().map(|g2| {
                            // SAFETY: `g2` is our shared acquisition.
                            unsafe { l.unlock_shared(g2) }
                        });
                        if writer_waits.is_none() {
                            JOINED_PAST_WRITER.fetch_add(1, Ordering::Relaxed);
                        }
                        JOINED.fetch_add(1, Ordering::Relaxed);
                        let v = get(&cell);
                        // SAFETY: we hold a shared acquisition with state `g`.
                        unsafe { l.unlock_shared(g) };
                        return v;
                    }
                    // Free: before the writer, or after the downgraded read left.
                    if !l.is_locked() {
                        return u32::MAX;
                    }
                    thread::yield_now();
                }
            })
        };
        hooks::set_node(0);
        let w = l.lock_exclusive();
        set(&cell, 1);
        // SAFETY: `w` is our exclusive acquisition.
        let r = unsafe { l.downgrade(w) };
        assert_eq!(get(&cell), 1);
        // SAFETY: `r` is our shared acquisition.
        unsafe { l.unlock_shared(r) };
        let seen = t.join().unwrap();
        assert!(seen == 1 || seen == u32::MAX, "joined reader saw {seen}");
        assert!(!l.is_locked());
    });
    assert!(
        JOINED.load(Ordering::Relaxed) > 0,
        "no recursive read joined"
    );
    assert!(
        JOINED_PAST_WRITER.load(Ordering::Relaxed) > 0,
        "no recursive read joined while WRITER_BIT was set"
    );
}

/// `notify_all` moves a timed condvar waiter onto the mutex's sleepers, where
/// it may time out at any point (which then counts as a notification: its
/// mark stands for the sleepers left) while the notifier's unlock wakes it;
/// the other waiter (woken by `notify_all`, then queued or holding the
/// mutex) must still get the mutex, and no mark is left behind.
///
/// Counted: `notify_all` woke one waiter and requeued the other.
#[test]
fn requeued_timed_waiter_leaving() {
    static REQUEUED: StdCounter = StdCounter::new(0);
    model(|| {
        let pair = Arc::new((
            RawMutex::new(),
            RawCondvar::new(),
            loom::sync::atomic::AtomicBool::new(false),
        ));
        let waiters: Vec<_> = (0..2)
            .map(|node| {
                let pair = pair.clone();
                thread::spawn(move || {
                    hooks::set_node(node);
                    let mut g = pair.0.lock();
                    if !pair.2.load(Relaxed) {
                        // SAFETY: we hold `pair.0` with state `g`.
                        unsafe {
                            if node == 0 {
                                pair.1.wait_for_model(&pair.0);
                            } else {
                                pair.1.wait(&pair.0, &mut g);
                            }
                        }
                    }
                    // SAFETY: we hold the mutex with state `g`.
                    unsafe { pair.0.unlock(g) };
                })
            })
            .collect();
        hooks::set_node(1);
        let g = pair.0.lock();
        pair.2.store(true, Relaxed);
        let n = pair.1.notify_all();
        // SAFETY: we hold the mutex with state `g`.
        unsafe { pair.0.unlock(g) };
        for w in waiters {
            w.join().unwrap();
        }
        assert!(!pair.0.has_sleepers() && !pair.0.has_queued_waiters());
        if n == 2 {
            REQUEUED.fetch_add(1, StdOrdering::Relaxed);
        }
    });
    assert!(
        REQUEUED.load(StdOrdering::Relaxed) > 0,
        "notify_all never requeued"
    );
}

/// Two readers race for the state-word counter (so one may register on its
/// node's counter and set `NODE_READERS_BIT`) while a writer writes twice:
/// the first write, having drained the readers, clears the bit, and the
/// second may then take the writer fast path (a CAS from 0). A node reader
/// that registers meanwhile must either set the bit first or see the writer.
///
/// Counted: a read registered on a node counter saw the first write (it
/// came after a writer that drained, so it entered while the bit could have
/// been cleared).
#[test]
fn rwlock_node_readers_bit_cleared_by_writer() {
    static NODE_READ_BETWEEN: StdCounter = StdCounter::new(0);
    model_deep(1, 1_000, || {
        let l = Arc::new(RawRwLock::new());
        let cell = Arc::new(UnsafeCell::new(0u32));
        let readers: Vec<_> = (0..2)
            .map(|node| {
                let (l, cell) = (l.clone(), cell.clone());
                thread::spawn(move || {
                    hooks::set_node(node);
                    // Node 0 reads twice: its second read may find the bit set
                    // by an earlier node reader while a writer clears it.
                    let mut seen = 0;
                    let mut node_after_write = false;
                    for _ in 0..=(1 - node) {
                        let g = l.lock_shared();
                        let v = get(&cell);
                        node_after_write |= on_node_counter(&g) && v >= 1;
                        seen = seen.max(v);
                        // SAFETY: our shared acquisition.
                        unsafe { l.unlock_shared(g) };
                    }
                    (seen, node_after_write)
                })
            })
            .collect();
        hooks::set_node(0);
        for v in 1..=2 {
            let w = l.lock_exclusive();
            set(&cell, v);
            assert_eq!(get(&cell), v);
            // SAFETY: our exclusive acquisition.
            unsafe { l.unlock_exclusive(w) };
        }
        for r in readers {
            let (seen, node_after_write) = r.join().unwrap();
            assert!(seen <= 2);
            if node_after_write {
                NODE_READ_BETWEEN.fetch_add(1, StdOrdering::Relaxed);
            }
        }
        assert!(!l.is_locked());
    });
    assert!(
        NODE_READ_BETWEEN.load(StdOrdering::Relaxed) > 0,
        "no node read after a drained write"
    );
}

// ---- models for the ordering mutants (scripts/ordering-mutants.py) ------------
//
// Each model below is the smallest scenario found that makes one ordering of the
// lock necessary: weakening that ordering one step makes loom report a data race
// on the cell. Each counts the executions that took the path of interest (std
// counters: loom runs every execution on one OS thread) and asserts the count is
// not 0, so a model cannot silently stop exercising its path.

static TRY_LOCK_AFTER_UNLOCK: StdCounter = StdCounter::new(0);

/// `try_lock` succeeding after another thread's critical section must see it:
/// the Acquire of numa-spin's `try_acquire` CAS.
#[test]
fn mutex_try_lock_after_unlock() {
    model(|| {
        let m = Arc::new(mutex(UnsafeCell::new(0u32)));
        let t = {
            let m = m.clone();
            thread::spawn(move || {
                hooks::set_node(1);
                bump(&m.lock());
            })
        };
        hooks::set_node(0);
        if let Some(g) = m.try_lock() {
            bump(&g);
            if get(&g) == 2 {
                TRY_LOCK_AFTER_UNLOCK.fetch_add(1, StdOrdering::Relaxed);
            }
        }
        t.join().unwrap();
    });
    assert!(TRY_LOCK_AFTER_UNLOCK.load(StdOrdering::Relaxed) > 0);
}

static UPGRADABLE_THEN_WRITER: StdCounter = StdCounter::new(0);

/// An upgradable reader U reads the cell and unlocks while a plain reader R is
/// counted in the state word, so U's unlock is the slow path's release CAS (the
/// word is not just `LOCKED_BIT`); a writer W that takes the cohort mutex after
/// it must see U's read: the Release of that CAS (R's own release orders only
/// R's read).
#[test]
fn rwlock_upgradable_unlock_beside_reader_then_writer() {
    static READING: StdCounter = StdCounter::new(0);
    static U_LEFT_BESIDE_READER: StdCounter = StdCounter::new(0);
    model(|| {
        READING.store(0, StdOrdering::Relaxed);
        U_LEFT_BESIDE_READER.store(0, StdOrdering::Relaxed);
        let l = Arc::new(RawRwLock::new());
        let cell = Arc::new(UnsafeCell::new(0u32));
        let r = {
            let (l, cell) = (l.clone(), cell.clone());
            thread::spawn(move || {
                hooks::set_node(1);
                let g = l.lock_shared();
                READING.store(1, StdOrdering::Relaxed);
                let v = get(&cell);
                // A scheduling point inside the read section, so U can see it.
                thread::yield_now();
                READING.store(0, StdOrdering::Relaxed);
                // SAFETY: our shared acquisition.
                unsafe { l.unlock_shared(g) };
                v
            })
        };
        let w = {
            let (l, cell) = (l.clone(), cell.clone());
            thread::spawn(move || {
                hooks::set_node(0);
                let after = U_LEFT_BESIDE_READER.load(StdOrdering::Relaxed) != 0;
                let g = l.lock_exclusive();
                set(&cell, 2);
                // SAFETY: our exclusive acquisition.
                unsafe { l.unlock_exclusive(g) };
                if after {
                    UPGRADABLE_THEN_WRITER.fetch_add(1, StdOrdering::Relaxed);
                }
            })
        };
        hooks::set_node(1);
        let u = l.lock_upgradable();
        let v = get(&cell);
        let beside = READING.load(StdOrdering::Relaxed) != 0;
        // SAFETY: our upgradable acquisition.
        unsafe { l.unlock_upgradable(u) };
        if beside {
            U_LEFT_BESIDE_READER.store(1, StdOrdering::Relaxed);
        }
        assert!(v == 0 || v == 2);
        let seen = r.join().unwrap();
        assert!(seen == 0 || seen == 2);
        w.join().unwrap();
        assert!(!l.is_locked());
    });
    assert!(UPGRADABLE_THEN_WRITER.load(StdOrdering::Relaxed) > 0);
}

/// Whether a shared guard state names a node counter (not the state word's
/// fast counter): its `Debug` shows the counter's address, 0 for the word.
fn on_node_counter(g: &cst_mutex::SharedGuardState) -> bool {
    !format!("{g:?}").ends_with("counter: 0 }")
}

static NODE_READER_THEN_WRITER: StdCounter = StdCounter::new(0);

/// A node reader's read must happen before a writer that drains it: the
/// Release of the node counter's decrement (`unlock_shared`) and the Acquire
/// of the writer's load of it (`readers_total`). Two readers race for the
/// state word's counter (each yields inside its read section), so one of
/// them registers on its node's counter; W, which first waits for reader 0,
/// then writes. The killing schedule: W drains right after the node reader's
/// decrement, before its `after_reader_left` fence (a SeqCst fence, which
/// loom makes synchronize with W's later one).
///
/// Counted: a reader's guard names a node counter and both had read before W
/// asked for the write lock. The node reader set `NODE_READERS_BIT` when it
/// entered and only a writer that drained the counters clears it, so W's
/// write drained that node counter down to the reader's decrement.
#[test]
fn rwlock_node_reader_then_writer() {
    static READ: StdCounter = StdCounter::new(0);
    model(|| {
        READ.store(0, StdOrdering::Relaxed);
        let l = Arc::new(RawRwLock::new());
        let cell = Arc::new(UnsafeCell::new(0u32));
        let mut readers: Vec<_> = (0..2)
            .map(|node| {
                let (l, cell) = (l.clone(), cell.clone());
                thread::spawn(move || {
                    hooks::set_node(node);
                    let g = l.lock_shared();
                    let on_node = on_node_counter(&g);
                    let v = get(&cell);
                    READ.fetch_add(1, StdOrdering::Relaxed);
                    thread::yield_now();
                    // SAFETY: our shared acquisition.
                    unsafe { l.unlock_shared(g) };
                    assert!(v <= 1);
                    on_node
                })
            })
            .collect();
        hooks::set_node(2);
        let first = readers.remove(0).join().unwrap();
        let both_read = READ.load(StdOrdering::Relaxed) == 2;
        let g = l.lock_exclusive();
        set(&cell, 1);
        // SAFETY: our exclusive acquisition.
        unsafe { l.unlock_exclusive(g) };
        let second = readers.remove(0).join().unwrap();
        if both_read && (first || second) {
            NODE_READER_THEN_WRITER.fetch_add(1, StdOrdering::Relaxed);
        }
        assert!(!l.is_locked());
    });
    assert!(NODE_READER_THEN_WRITER.load(StdOrdering::Relaxed) > 0);
}

static TRY_WRITE_AFTER_READ: StdCounter = StdCounter::new(0);

/// `try_write` succeeding on its fast path (a CAS from 0) after a reader left
/// must see the reader's read: the CAS's Acquire.
#[test]
fn rwlock_try_write_after_reader() {
    model(|| {
        let l = Arc::new(RwLock::from_raw(RawRwLock::new(), UnsafeCell::new(0u32)));
        let r = {
            let l = l.clone();
            thread::spawn(move || {
                hooks::set_node(1);
                get(&l.read())
            })
        };
        hooks::set_node(0);
        let read_first = if let Some(g) = l.try_write() {
            set(&g, 1);
            false
        } else {
            true
        };
        let seen = r.join().unwrap();
        if !read_first && seen == 0 {
            // The writer came second unless the reader saw its write.
            TRY_WRITE_AFTER_READ.fetch_add(1, StdOrdering::Relaxed);
        }
        assert!(!l.is_locked());
    });
    assert!(TRY_WRITE_AFTER_READ.load(StdOrdering::Relaxed) > 0);
}

/// Flags of one [`node_reader_skipping_the_bit`] model (one set per test:
/// the test harness runs models in parallel).
struct SkipFlags {
    counted: StdCounter,
}

impl SkipFlags {
    const fn new() -> Self {
        SkipFlags {
            counted: StdCounter::new(0),
        }
    }
}

/// The Dekker handshake of a node reader that enters without touching the
/// state word (it saw `NODE_READERS_BIT` already set) with a writer that
/// sets `WRITER_BIT` through `try_upgrade` (`upgrade`) or `try_write`: the
/// SeqCst fence of `try_shared_node` and that of the writer's entry point.
/// Without either, the writer's drain may read the node counter as the
/// reader's previous read section left it (0) while the reader reads.
///
/// U takes and releases a read lock twice (yielding while it holds it and
/// after it released it), whose counts change the state word under R's
/// fast CASes: R's first read registers on its node's counter and sets the
/// bit, its second registers there too and finds the bit set. U then takes
/// the upgradable lock and tries to upgrade (or tries to write); R yields inside its second read section (not in
/// its first: loom does not let a thread read, after a yield, a value it
/// saw before it when a newer one exists, and R's second read owes its
/// first CAS failure to such a stale read).
///
/// Preemption bound 4: a reader reaches a node counter only when the word
/// changes between its load and its CAS (a preemption of R each time), U
/// must read between R's first read and its second (a third), and R's
/// second read must meet U's last attempt (a fourth; at bound 3 the model
/// no longer fails with the fence of `try_shared_node` weakened).
///
/// Counted: both of R's reads entered on a node counter and R's second read
/// had entered before U's last attempt. R's first read set the bit and only
/// a writer that drained the counters clears it (U's last attempt is the
/// only writer), so the second read entered through the load that saw the
/// bit, and U's drain ran while that read was counted.
fn node_reader_skipping_the_bit(upgrade: bool, f: &'static SkipFlags) {
    model_bounded(4, move || {
        // A loom atomic, so that loom orders it against the lock's accesses.
        let second_in = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let l = Arc::new(RawRwLock::new());
        let cell = Arc::new(UnsafeCell::new(0u32));
        let r = {
            let (l, cell, second_in) = (l.clone(), cell.clone(), second_in.clone());
            thread::spawn(move || {
                hooks::set_node(0);
                let mut on_node = [false; 2];
                for (i, n) in on_node.iter_mut().enumerate() {
                    let g = l.lock_shared();
                    *n = on_node_counter(&g);
                    if i == 1 {
                        second_in.store(1, Relaxed);
                    }
                    assert!(get(&cell) <= 1);
                    if i == 1 {
                        thread::yield_now();
                    }
                    // SAFETY: our shared acquisition.
                    unsafe { l.unlock_shared(g) };
                }
                on_node
            })
        };
        hooks::set_node(1);
        for _ in 0..2 {
            let g = l.lock_shared();
            thread::yield_now();
            // SAFETY: our shared acquisition.
            unsafe { l.unlock_shared(g) };
            thread::yield_now();
        }
        let second_in = second_in.load(Relaxed) != 0;
        if upgrade {
            let u = l.lock_upgradable();
            // SAFETY: `u` is our upgradable acquisition.
            match unsafe { l.try_upgrade(u) } {
                Ok(w) => {
                    set(&cell, 1);
                    // SAFETY: our exclusive acquisition.
                    unsafe { l.unlock_exclusive(w) };
                }
                // SAFETY: our upgradable acquisition.
                Err(u) => unsafe { l.unlock_upgradable(u) },
            }
        } else if let Some(w) = l.try_lock_exclusive() {
            set(&cell, 1);
            // SAFETY: our exclusive acquisition.
            unsafe { l.unlock_exclusive(w) };
        }
        let on_node = r.join().unwrap();
        if on_node == [true, true] && second_in {
            f.counted.fetch_add(1, StdOrdering::Relaxed);
        }
        assert!(!l.is_locked());
    });
    assert!(f.counted.load(StdOrdering::Relaxed) > 0);
}

/// [`node_reader_skipping_the_bit`] with `try_upgrade`.
#[test]
fn rwlock_node_reader_skipping_the_bit_vs_try_upgrade() {
    static FLAGS: SkipFlags = SkipFlags::new();
    node_reader_skipping_the_bit(true, &FLAGS);
}

/// [`node_reader_skipping_the_bit`] with `try_write`.
#[test]
fn rwlock_node_reader_skipping_the_bit_vs_try_write() {
    static FLAGS: SkipFlags = SkipFlags::new();
    node_reader_skipping_the_bit(false, &FLAGS);
}

// ---- timed upgrade, downgrade to upgradable ---------------------------------------

/// Whether readers are parked on the rwlock (`READERS_PARKED_BIT`, read from
/// its `Debug` state; a Relaxed load, so only a coverage observation).
fn readers_parked(l: &RawRwLock) -> bool {
    let d = format!("{l:?}");
    let state: usize = d
        .split("state: ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .expect("RawRwLock Debug shows the state word");
    state & 4 != 0
}

/// Flags of one [`timed_upgrade_beside_readers`] model.
struct TimedUpgradeFlags {
    parked_seen: StdCounter,
    timed_out_past_parked: StdCounter,
    downgrade_admitted: StdCounter,
}

impl TimedUpgradeFlags {
    const fn new() -> Self {
        TimedUpgradeFlags {
            parked_seen: StdCounter::new(0),
            timed_out_past_parked: StdCounter::new(0),
            downgrade_admitted: StdCounter::new(0),
        }
    }
}

/// A timed upgrade (`try_upgrade_for` with a zero timeout, or
/// `try_upgrade_until` with a deadline already passed: deterministic under
/// loom, the deadline check runs on the real clock) beside two readers. R1
/// reads and yields inside its read section; R2 comes later and parks if
/// `WRITER_BIT` is set.
///
/// * Timed out (a reader inside): the upgrade must clear `WRITER_BIT` again
///   and keep the upgradable lock (no other upgradable or writer gets in, a
///   reader does), and a reader parked behind the bit must be admitted
///   (otherwise loom reports a deadlock at the join).
/// * Upgraded: the write section; then `downgrade_to_upgradable` must admit
///   the readers parked behind it, and they see the write.
///
/// Counted: runs in which R1 saw readers parked (R2, behind the upgrade's
/// `WRITER_BIT`) while inside and the upgrade then timed out; runs in which
/// the upgraded writer saw readers parked before it downgraded.
///
/// Preemption bound 1 (U yields after taking the upgradable lock and inside
/// the write section, which lets the readers in at no preemption): about
/// 8 600 executions; bound 2 takes about 197 000 (`CST_LOOM_DEEP`).
fn timed_upgrade_beside_readers(until: bool, f: &'static TimedUpgradeFlags) {
    model_deep(1, 1_000, move || {
        f.parked_seen.store(0, StdOrdering::Relaxed);
        let l = Arc::new(RawRwLock::new());
        let cell = Arc::new(UnsafeCell::new(0u32));
        let r1 = {
            let (l, cell) = (l.clone(), cell.clone());
            thread::spawn(move || {
                hooks::set_node(1);
                let g = l.lock_shared();
                assert!(get(&cell) <= 1);
                thread::yield_now();
                if readers_parked(&l) {
                    f.parked_seen.store(1, StdOrdering::Relaxed);
                }
                // SAFETY: our shared acquisition.
                unsafe { l.unlock_shared(g) };
            })
        };
        let r2 = {
            let (l, cell) = (l.clone(), cell.clone());
            thread::spawn(move || {
                hooks::set_node(0);
                let g = l.lock_shared();
                let v = get(&cell);
                // SAFETY: our shared acquisition.
                unsafe { l.unlock_shared(g) };
                v
            })
        };
        hooks::set_node(0);
        let u = l.lock_upgradable();
        // Lets a reader in first at no preemption.
        thread::yield_now();
        // SAFETY: `u` is our upgradable acquisition.
        let res = unsafe {
            if until {
                l.try_upgrade_until(u, Instant::now())
            } else {
                l.try_upgrade_for(u, Duration::ZERO)
            }
        };
        let timed_out = match res {
            Ok(w) => {
                set(&cell, 1);
                // Readers arriving now park behind `WRITER_BIT`.
                thread::yield_now();
                let parked = readers_parked(&l);
                // SAFETY: `w` is our exclusive acquisition.
                let u = unsafe { l.downgrade_to_upgradable(w) };
                assert!(!l.is_locked_exclusive(), "downgrade left WRITER_BIT");
                if parked {
                    f.downgrade_admitted.fetch_add(1, StdOrdering::Relaxed);
                }
                assert_eq!(get(&cell), 1);
                // SAFETY: `u` is our upgradable acquisition.
                unsafe { l.unlock_upgradable(u) };
                false
            }
            Err(u) => {
                assert!(
                    !l.is_locked_exclusive(),
                    "timed-out upgrade left WRITER_BIT"
                );
                assert!(l.try_lock_upgradable().is_none(), "upgradable lock lost");
                assert!(l.try_lock_exclusive().is_none(), "upgradable lock lost");
                let g = l
                    .try_lock_shared()
                    .expect("timed-out upgrade keeps readers out");
                // SAFETY: our shared acquisition.
                unsafe { l.unlock_shared(g) };
                // SAFETY: `u` is our upgradable acquisition.
                unsafe { l.unlock_upgradable(u) };
                true
            }
        };
        r1.join().unwrap();
        let seen = r2.join().unwrap();
        assert!(seen <= 1);
        assert!(!l.is_locked());
        if timed_out && f.parked_seen.load(StdOrdering::Relaxed) != 0 {
            f.timed_out_past_parked.fetch_add(1, StdOrdering::Relaxed);
        }
    });
    assert!(
        f.timed_out_past_parked.load(StdOrdering::Relaxed) > 0,
        "no upgrade timed out with a reader parked behind it"
    );
    assert!(
        f.downgrade_admitted.load(StdOrdering::Relaxed) > 0,
        "no downgrade to upgradable admitted a parked reader"
    );
}

/// [`timed_upgrade_beside_readers`] with `try_upgrade_for`.
#[test]
fn rwlock_try_upgrade_for_beside_readers() {
    static FLAGS: TimedUpgradeFlags = TimedUpgradeFlags::new();
    timed_upgrade_beside_readers(false, &FLAGS);
}

/// [`timed_upgrade_beside_readers`] with `try_upgrade_until`.
#[test]
fn rwlock_try_upgrade_until_beside_readers() {
    static FLAGS: TimedUpgradeFlags = TimedUpgradeFlags::new();
    timed_upgrade_beside_readers(true, &FLAGS);
}

// ---- sleepers outside numa-spin's queue -----------------------------------------

/// Two threads sleep outside the queue of a held `RawMutex` (they mark
/// the word, then park on the mutex's address) while it is released and
/// re-taken: the release that finds the mark wakes one, which marks the lock
/// again for the other (it learnt from the parking lot that one is left).
/// A lost wake-up is a deadlock; loom checks exclusion on the cell. Both
/// sleepers park before the release only with two preemptions: at bound 1
/// a woken sleeper that forgot to mark the lock again passes.
#[test]
fn sleepers_are_never_lost() {
    let slept = std::sync::Arc::new(StdCounter::new(0));
    let counted = slept.clone();
    model(move || {
        let lock = Arc::new(cst_mutex::RawMutex::new());
        let cell = Arc::new(UnsafeCell::new(0u32));
        lock.acquire();
        let sleepers: Vec<_> = (0..2)
            .map(|_| {
                let (l, c) = (lock.clone(), cell.clone());
                thread::spawn(move || {
                    l.acquire_sleeping_model();
                    bump(&c);
                    // SAFETY: acquired above.
                    unsafe { l.release() };
                })
            })
            .collect();
        if lock.has_sleepers() {
            counted.fetch_add(1, StdOrdering::Relaxed);
        }
        bump(&cell);
        // SAFETY: acquired above by this thread.
        unsafe { lock.release() };
        for s in sleepers {
            s.join().unwrap();
        }
        assert_eq!(get(&cell), 3);
        assert!(!lock.is_held() && !lock.has_sleepers());
    });
    assert_ne!(
        slept.load(StdOrdering::Relaxed),
        0,
        "nobody slept on the held lock"
    );
}

/// A timed waiter sleeping outside the queue times out (at any point once
/// parked, in loom's parking lot) while the holder releases: it either gets
/// the lock or leaves it free and usable, with no mark left on a free word.
#[test]
fn timeout_racing_the_release() {
    model(|| {
        let lock = Arc::new(cst_mutex::RawMutex::new());
        let cell = Arc::new(UnsafeCell::new(0u32));
        lock.acquire();
        let (l, c) = (lock.clone(), cell.clone());
        let timed = thread::spawn(move || {
            let ok = l.try_acquire_for_model();
            if ok {
                bump(&c);
                // SAFETY: acquired above.
                unsafe { l.release() };
            }
            ok
        });
        bump(&cell);
        // SAFETY: acquired above by this thread.
        unsafe { lock.release() };
        let ok = timed.join().unwrap();
        assert_eq!(get(&cell), 1 + u32::from(ok));
        assert!(lock.try_acquire(), "a timed-out sleeper left the lock held");
        // SAFETY: acquired just above.
        unsafe { lock.release() };
        assert!(!lock.has_sleepers());
    });
}

/// `notify_all` on `next::Condvar` with two waiters: one is woken, the other
/// moved onto the mutex as its sleeper, and the woken one marks the mutex
/// for it (the notifier holds it), so the releases that follow wake it. A
/// waiter never woken is a deadlock; the flag is read under the mutex.
#[test]
fn condvar_notify_all_requeues_onto_the_mutex() {
    use lock_api::RawCondvar as _;
    model(|| {
        let m = Arc::new(RawMutex::new());
        let cv = Arc::new(RawCondvar::new());
        let flag = Arc::new(UnsafeCell::new(0u32));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (m, cv, flag) = (m.clone(), cv.clone(), flag.clone());
                thread::spawn(move || {
                    m.acquire();
                    while get(&flag) == 0 {
                        // SAFETY: we hold `m`.
                        unsafe { cv.wait(&m, &mut lock_api::GuardSend::new()) };
                    }
                    // SAFETY: acquired above (wait returns holding it).
                    unsafe { m.release() };
                })
            })
            .collect();
        m.acquire();
        set(&flag, 1);
        cv.notify_all();
        // SAFETY: acquired above.
        unsafe { m.release() };
        for w in waiters {
            w.join().unwrap();
        }
        assert!(!m.is_held() && !m.has_sleepers());
    });
}
