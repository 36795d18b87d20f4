//! Torture operations for mutexes (`lock_api::RawMutex` and its optional
//! traits) and for a mutex paired with a condition variable.
//!
//! Each operation is written once, generic over the lock_api traits it needs;
//! a target lists the operations its lock supports.

use std::mem;
use std::thread;
use std::time::{Duration, Instant};

use lock_api::{
    Condvar, Mutex, MutexGuard, RawCondvar, RawCondvarTimed, RawMutex, RawMutexFair, RawMutexTimed,
};

use crate::alloc::count_this_thread;
use crate::engine::{Op, check_total, expect_torture_panic};
use lock_tests::model::{Shared, TorturePanic, Worker};
use lock_tests::registry::{CombiningMutex, combine};

/// A torture lock that contains a mutex: the mutex itself, or a mutex with a
/// condition variable.
pub trait HasMutex: Send + Sync + 'static {
    /// The raw mutex under test.
    type R: RawMutex + Send + Sync + 'static;
    /// The mutex protecting the torture structure.
    fn mutex(&self) -> &Mutex<Self::R, Shared>;
}

impl<R: RawMutex + Send + Sync + 'static> HasMutex for Mutex<R, Shared> {
    type R = R;
    fn mutex(&self) -> &Mutex<R, Shared> {
        self
    }
}

/// A mutex and a condition variable bound to it.
pub struct WithCondvar<C: RawCondvar> {
    /// The mutex (of the condvar's mutex type).
    pub mutex: Mutex<C::RawMutex, Shared>,
    /// The condition variable under test.
    pub condvar: Condvar<C>,
}

impl<C> HasMutex for WithCondvar<C>
where
    C: RawCondvar + Send + Sync + 'static,
    C::RawMutex: Send + Sync + 'static,
{
    type R = C::RawMutex;
    fn mutex(&self) -> &Mutex<C::RawMutex, Shared> {
        &self.mutex
    }
}

/// Plain `lock` + exclusive section + `unlock` (guard drop).
pub fn lock<L: HasMutex>(l: &L, w: &mut Worker<'_>) {
    let g = l.mutex().lock();
    g.exclusive_section(w, "lock");
}

/// `try_lock` retried (with yields) up to 64 times.
pub fn try_lock<L: HasMutex>(l: &L, w: &mut Worker<'_>) {
    for _ in 0..64 {
        if let Some(g) = l.mutex().try_lock() {
            g.exclusive_section(w, "try_lock");
            return;
        }
        thread::yield_now();
    }
}

/// The holder sleeps up to 2 ms inside the critical section: a holder
/// preempted by the OS or the hypervisor while others wait.
pub fn sleep_in_cs<L: HasMutex>(l: &L, w: &mut Worker<'_>) {
    let g = l.mutex().lock();
    g.enter_exclusive(w, "sleep_in_cs");
    thread::sleep(w.micros(2000));
    g.update(w, "sleep_in_cs");
    g.exit_exclusive(w, "sleep_in_cs");
}

/// Locks on one virtual node, unlocks on another (a migrated thread).
pub fn migrate_in_cs<L: HasMutex>(l: &L, w: &mut Worker<'_>) {
    let g = l.mutex().lock();
    let home = w.migrate();
    g.exclusive_section(w, "migrate_in_cs");
    drop(g);
    w.return_to(home);
}

/// Panics inside the critical section; the guard must unlock on unwind.
pub fn panic_in_cs<L: HasMutex>(l: &L, w: &mut Worker<'_>) {
    expect_torture_panic(w, "panic_in_cs", |w| {
        let g = l.mutex().lock();
        g.exclusive_section(w, "panic_in_cs");
        std::panic::panic_any(TorturePanic);
    });
}

/// `unlock_fair`.
pub fn unlock_fair<L: HasMutex>(l: &L, w: &mut Worker<'_>)
where
    L::R: RawMutexFair,
{
    let g = l.mutex().lock();
    g.exclusive_section(w, "unlock_fair");
    MutexGuard::unlock_fair(g);
}

/// `bump` between two exclusive sections.
pub fn bump<L: HasMutex>(l: &L, w: &mut Worker<'_>)
where
    L::R: RawMutexFair,
{
    let mut g = l.mutex().lock();
    g.exclusive_section(w, "bump (before)");
    MutexGuard::bump(&mut g);
    g.exclusive_section(w, "bump (after)");
}

/// `try_lock_for` with a timeout of 0-300 us; a failure must not come early.
pub fn try_lock_for<L: HasMutex>(l: &L, w: &mut Worker<'_>)
where
    L::R: RawMutexTimed<Duration = Duration>,
{
    let timeout = w.micros(300);
    let start = Instant::now();
    match l.mutex().try_lock_for(timeout) {
        Some(g) => g.exclusive_section(w, "try_lock_for"),
        None => w.check_timeout("try_lock_for", start, timeout),
    }
}

/// Rounds each churn helper thread does on its fresh lock.
const CHURN_ROUNDS: u64 = 40;
/// Most helper threads one churn operation starts.
pub const CHURN_MAX_HELPERS: usize = 4;

/// Creates a fresh mutex, contends it from 2-4 helper threads on different
/// virtual nodes (so a NUMA lock allocates its per-node state), checks it,
/// sometimes locks it and forgets the guard, then drops it.
pub fn churn<L: HasMutex>(_: &L, w: &mut Worker<'_>) {
    let m = Mutex::<L::R, Shared>::new(Shared::new());
    let helpers = 2 + (w.next_u64() as usize % (CHURN_MAX_HELPERS - 1));
    let checker = w.checker();
    thread::scope(|s| {
        for k in 0..helpers {
            let (m, seed, id) = (&m, w.next_u64(), w.id * 1000 + k + 1);
            s.spawn(move || {
                count_this_thread(true);
                let mut hw = Worker::new(id, seed, checker);
                for _ in 0..CHURN_ROUNDS {
                    m.lock().exclusive_section(&mut hw, "churn");
                }
                numa_topology::set_current_thread_node(None);
            });
        }
    });
    match m.try_lock() {
        Some(g) => {
            check_total(&g, w, "churn", CHURN_ROUNDS * helpers as u64);
            if w.chance(2) {
                // Dropping a locked mutex after forgetting its guard is allowed
                // (lock_api: forgetting guard state must be safe).
                mem::forget(g);
            }
        }
        None => w.violation(format_args!("churn: lock held after its helpers finished")),
    }
    drop(m);
    w.stats.churned += 1;
}

/// An exclusive section run through `combine`: on this thread, or on the
/// combiner of this thread's node while this thread waits.
pub fn combine_cs<L: HasMutex>(l: &L, w: &mut Worker<'_>)
where
    L::R: CombiningMutex,
{
    combine(l.mutex(), |s| s.exclusive_section(w, "combine"));
}

/// A combined closure that sleeps up to 2 ms: a combiner stalled (preempted)
/// inside its batch, with the closures of its node waiting behind it.
pub fn combine_sleep<L: HasMutex>(l: &L, w: &mut Worker<'_>)
where
    L::R: CombiningMutex,
{
    let nap = w.micros(2000);
    combine(l.mutex(), |s| {
        s.enter_exclusive(w, "combine_sleep");
        thread::sleep(nap);
        s.update(w, "combine_sleep");
        s.exit_exclusive(w, "combine_sleep");
    });
}

/// A combined closure that panics after its update: the panic must come back
/// to this thread (with its payload), the combiner must go on, and the update
/// stays.
pub fn combine_panic<L: HasMutex>(l: &L, w: &mut Worker<'_>)
where
    L::R: CombiningMutex,
{
    expect_torture_panic(w, "combine_panic", |w| {
        combine(l.mutex(), |s| {
            s.exclusive_section(w, "combine_panic");
            std::panic::panic_any(TorturePanic);
        })
    });
}

/// Combines from another virtual node than the worker's own (another request
/// queue of the lock), then returns home.
pub fn combine_migrated<L: HasMutex>(l: &L, w: &mut Worker<'_>)
where
    L::R: CombiningMutex,
{
    let home = w.migrate();
    combine(l.mutex(), |s| s.exclusive_section(w, "combine_migrated"));
    w.return_to(home);
}

/// [`churn`] through `combine`: a fresh mutex contended by 2-4 helpers on
/// different virtual nodes, each combining its critical sections, then
/// checked and dropped (its request queues must be empty by then).
pub fn combine_churn<L: HasMutex>(_: &L, w: &mut Worker<'_>)
where
    L::R: CombiningMutex,
{
    let m = Mutex::<L::R, Shared>::new(Shared::new());
    let helpers = 2 + (w.next_u64() as usize % (CHURN_MAX_HELPERS - 1));
    let checker = w.checker();
    thread::scope(|s| {
        for k in 0..helpers {
            let (m, seed, id) = (&m, w.next_u64(), w.id * 1000 + k + 1);
            s.spawn(move || {
                count_this_thread(true);
                let mut hw = Worker::new(id, seed, checker);
                for _ in 0..CHURN_ROUNDS {
                    combine(m, |s| s.exclusive_section(&mut hw, "combine_churn"));
                }
                numa_topology::set_current_thread_node(None);
            });
        }
    });
    match m.try_lock() {
        Some(g) => check_total(&g, w, "combine_churn", CHURN_ROUNDS * helpers as u64),
        None => w.violation(format_args!(
            "combine_churn: lock held after its helpers finished"
        )),
    }
    drop(m);
    w.stats.churned += 1;
}

/// Waits on the condvar with a 1-500 us timeout inside an exclusive section;
/// the wait must return with the mutex held, and a timeout must not come early.
pub fn condvar_wait<C>(l: &WithCondvar<C>, w: &mut Worker<'_>)
where
    C: RawCondvarTimed + Send + Sync + 'static,
    C::RawMutex: RawMutexTimed<Duration = Duration> + Send + Sync + 'static,
{
    let mut g = l.mutex.lock();
    g.exclusive_section(w, "condvar_wait (before)");
    let timeout = w.micros(500) + Duration::from_micros(1);
    let start = Instant::now();
    let r = l.condvar.wait_for(&mut g, timeout);
    if r.timed_out() {
        w.check_timeout("condvar_wait", start, timeout);
    }
    g.exclusive_section(w, "condvar_wait (after)");
}

/// `notify_one` or `notify_all`, with or without the mutex held.
pub fn condvar_notify<C>(l: &WithCondvar<C>, w: &mut Worker<'_>)
where
    C: RawCondvar + Send + Sync + 'static,
    C::RawMutex: Send + Sync + 'static,
{
    let all = w.chance(4);
    let notify = |cv: &Condvar<C>| {
        if all {
            cv.notify_all();
        } else {
            cv.notify_one();
        }
    };
    if w.chance(2) {
        let g = l.mutex.lock();
        g.exclusive_section(w, "condvar_notify");
        notify(&l.condvar);
    } else {
        notify(&l.condvar);
    }
}

/// The operations every mutex supports, with their weights.
pub fn basic_ops<L: HasMutex>() -> Vec<Op<L>> {
    vec![
        Op {
            name: "lock",
            weight: 40,
            run: lock::<L>,
        },
        Op {
            name: "try_lock",
            weight: 10,
            run: try_lock::<L>,
        },
        Op {
            name: "sleep_in_cs",
            weight: 1,
            run: sleep_in_cs::<L>,
        },
        Op {
            name: "migrate_in_cs",
            weight: 5,
            run: migrate_in_cs::<L>,
        },
        Op {
            name: "panic_in_cs",
            weight: 2,
            run: panic_in_cs::<L>,
        },
        Op {
            name: "churn",
            weight: 1,
            run: churn::<L>,
        },
    ]
}

/// `unlock_fair` and `bump` (`RawMutexFair`).
pub fn fair_ops<L: HasMutex>() -> Vec<Op<L>>
where
    L::R: RawMutexFair,
{
    vec![
        Op {
            name: "unlock_fair",
            weight: 10,
            run: unlock_fair::<L>,
        },
        Op {
            name: "bump",
            weight: 5,
            run: bump::<L>,
        },
    ]
}

/// `try_lock_for` (`RawMutexTimed`).
pub fn timed_ops<L: HasMutex>() -> Vec<Op<L>>
where
    L::R: RawMutexTimed<Duration = Duration>,
{
    vec![Op {
        name: "try_lock_for",
        weight: 10,
        run: try_lock_for::<L>,
    }]
}

/// Critical sections shipped to combiners (`CombiningMutex::combine`).
pub fn combining_ops<L: HasMutex>() -> Vec<Op<L>>
where
    L::R: CombiningMutex,
{
    vec![
        Op {
            name: "combine",
            weight: 40,
            run: combine_cs::<L>,
        },
        Op {
            name: "combine_sleep",
            weight: 1,
            run: combine_sleep::<L>,
        },
        Op {
            name: "combine_panic",
            weight: 2,
            run: combine_panic::<L>,
        },
        Op {
            name: "combine_migrated",
            weight: 5,
            run: combine_migrated::<L>,
        },
        Op {
            name: "combine_churn",
            weight: 1,
            run: combine_churn::<L>,
        },
    ]
}

/// Condvar waits and notifications (`RawCondvarTimed`).
pub fn condvar_ops<C>() -> Vec<Op<WithCondvar<C>>>
where
    C: RawCondvarTimed + Send + Sync + 'static,
    C::RawMutex: RawMutexTimed<Duration = Duration> + Send + Sync + 'static,
{
    vec![
        Op {
            name: "condvar_wait",
            weight: 5,
            run: condvar_wait::<C>,
        },
        Op {
            name: "condvar_notify",
            weight: 10,
            run: condvar_notify::<C>,
        },
    ]
}

/// The final check of a mutex target: free, consistent; returns the value.
pub fn finish<L: HasMutex>(l: &L, w: &Worker<'_>) -> Option<u64> {
    let g = l.mutex().try_lock()?;
    Some(g.check_consistent(w, "finish"))
}
