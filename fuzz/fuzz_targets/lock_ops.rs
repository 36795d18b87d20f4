//! Fuzz target `lock_ops`: the input is a program of lock operations run by
//! 2 to 4 threads against one fresh lock, checked against a model of what the
//! lock must allow.
//!
//! # Input format
//! * byte 0: the lock, `byte % n` among the `n` `lock_api` locks of the
//!   registry (`numa_lock_registry::for_each_lock!`) in registry order:
//!   numa-spin's `cna`, `queued`, `hq` and `combining`, cst-mutex's `cst`
//!   (`Mutex` + `Condvar`) and `cst-rw`, and parking_lot's `parking_lot` and
//!   `parking_lot-rw` as baselines for the harness itself. The operations follow
//!   the lock's shape (timed or not, condvar or not, combining or not,
//!   reader-writer). With `LOCK_OPS_LOCK=<name>` in the
//!   environment (`hq`, `cna`, ...) byte 0 is ignored and every input runs
//!   against that lock;
//! * byte 1: thread count, `2 + byte % 3`;
//! * every further byte is one operation; byte `i` goes to thread `i % n`
//!   (at most [`MAX_OPS_PER_THREAD`] per thread). Its low 5 bits pick the
//!   operation among those valid in the thread's current state (holding
//!   nothing, exclusive, shared or upgradable), its high 3 bits are the
//!   operation's parameter `p` (timeouts `p x 20 us`, sleeps `p x 10 us`,
//!   `p` yields). Holding nothing, operation 5 is a pause, except on a
//!   combining lock: there it is an exclusive section run through `combine`
//!   (on the combiner of the thread's node, maybe another thread), with the
//!   pause inside it.
//!
//! # The model
//! The protected structure and its checks are `lock_tests::model`, shared with
//! the suites and the torture test: no two exclusive holders, no reader or
//! upgradable holder beside a writer, at most one upgradable holder, the words
//! never torn, and at the end every thread's updates present and the lock free.
//! A failed timed acquisition must not return before its timeout.
//!
//! # Termination
//! A thread only blocks when it holds nothing, or inside operations that
//! release first (`bump`, condvar waits, which have timeouts) or that wait for
//! readers to leave (`upgrade`): readers never block while holding. Programs
//! are finite and each thread releases what it holds at its end, so every run
//! ends; a lock that deadlocks shows up as a libFuzzer timeout.
#![no_main]

use std::marker::PhantomData;
use std::thread;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use lock_api::{
    Condvar, Mutex, MutexGuard, RawRwLockUpgradeDowngrade, RwLock, RwLockReadGuard,
    RwLockUpgradableReadGuard, RwLockWriteGuard,
};
use lock_tests::model::{Checker, Shared, Worker};
use lock_tests::registry::{
    self, CombiningMutex, FairMutex, FullRwLock, LockApiVisitor, LockInfo, TimedCondvar,
    TimedMutex,
};

/// Upper bound on one thread's program.
const MAX_OPS_PER_THREAD: usize = 64;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let threads = 2 + usize::from(data[1] % 3);
    let mut programs = vec![Vec::new(); threads];
    for (i, &b) in data[2..].iter().enumerate() {
        let p = &mut programs[i % threads];
        if p.len() < MAX_OPS_PER_THREAD {
            p.push(b);
        }
    }
    let lock = match pinned_lock() {
        Some(lock) => lock,
        None => {
            let count = registry::lock_api_locks().count();
            registry::lock_api_locks()
                .nth(usize::from(data[0]) % count)
                .expect("index below the count")
        }
    };
    registry::visit_lock_api(lock, &mut Run(&programs));
});

/// The lock named by `LOCK_OPS_LOCK` (e.g. `hq`), if set: every input runs
/// against it, byte 0 is ignored (a fuzz run focused on one lock).
///
/// # Panics
/// If the variable names no lock_api lock of the registry.
fn pinned_lock() -> Option<&'static LockInfo> {
    static PINNED: std::sync::OnceLock<Option<&'static LockInfo>> = std::sync::OnceLock::new();
    *PINNED.get_or_init(|| {
        let name = std::env::var("LOCK_OPS_LOCK").ok()?;
        Some(
            registry::lock_api_locks()
                .find(|l| l.name == name)
                .unwrap_or_else(|| panic!("LOCK_OPS_LOCK={name}: no lock_api lock of that name")),
        )
    })
}

/// Runs the programs against a fresh lock of the visited registry lock.
struct Run<'a>(&'a [Vec<u8>]);

impl LockApiVisitor for Run<'_> {
    type Output = ();

    fn fair_mutex<R: FairMutex>(&mut self, lock: &'static LockInfo) {
        run_mutex(lock, &MutexUnderTest::<Untimed<R>>::new(), self.0);
    }

    fn timed_mutex<R: TimedMutex>(&mut self, lock: &'static LockInfo) {
        run_mutex(lock, &MutexUnderTest::<Timed<R>>::new(), self.0);
    }

    fn combining_mutex<R: CombiningMutex>(&mut self, lock: &'static LockInfo) {
        run_mutex(lock, &MutexUnderTest::<Combines<R>>::new(), self.0);
    }

    fn condvar<C: TimedCondvar>(&mut self, lock: &'static LockInfo) {
        run_mutex(lock, &MutexUnderTest::<WithCondvar<C>>::new(), self.0);
    }

    fn rwlock<R: FullRwLock>(&mut self, lock: &'static LockInfo) {
        run_rwlock::<R>(lock, self.0);
    }
}

/// The parameter of an operation byte as a duration of `p x unit_us` us.
fn micros(p: u8, unit_us: u64) -> Duration {
    Duration::from_micros(u64::from(p) * unit_us)
}

/// `p` yields, or a sleep of `p x 10` us when `p` is odd.
fn pause(p: u8) {
    if p % 2 == 1 {
        thread::sleep(micros(p, 10));
    } else {
        for _ in 0..p {
            thread::yield_now();
        }
    }
}

/// Panics (a libFuzzer crash) with the model's violations, if any.
fn report(name: &str, checker: &Checker) {
    if checker.count() > 0 {
        panic!(
            "{name}: {} model violations: {}",
            checker.count(),
            checker.first().unwrap_or_default()
        );
    }
}

/// Runs one program per thread, each as a [`Worker`] with id `1..=n`.
fn run_threads(
    checker: &Checker,
    programs: &[Vec<u8>],
    body: impl Fn(&mut Worker<'_>, &[u8]) + Sync,
) -> u64 {
    thread::scope(|s| {
        let handles: Vec<_> = programs
            .iter()
            .enumerate()
            .map(|(i, prog)| {
                let body = &body;
                s.spawn(move || {
                    let mut w = Worker::new(i + 1, 0x1234_5678 + i as u64, checker);
                    body(&mut w, prog);
                    numa_topology::set_current_thread_node(None);
                    w.stats.increments
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .sum()
    })
}

// ---------------------------------------------------------------- mutexes

/// What a mutex under test offers beyond `RawMutex + RawMutexFair`.
trait MutexKind: Sync + Sized {
    /// The raw mutex.
    type R: FairMutex;
    fn new() -> Self;
    /// `try_lock_for` if the lock is timed, else `try_lock`.
    fn try_lock_for<'a>(
        m: &'a Mutex<Self::R, Shared>,
        w: &mut Worker<'_>,
        timeout: Duration,
    ) -> Option<MutexGuard<'a, Self::R, Shared>>;
    /// A condvar wait with a timeout if there is a condvar, else the guard is
    /// unlocked for the timeout (`MutexGuard::unlocked`).
    fn wait_for(&self, g: &mut MutexGuard<'_, Self::R, Shared>, timeout: Duration) {
        MutexGuard::unlocked(g, || thread::sleep(timeout));
    }
    /// `notify_one` / `notify_all` if there is a condvar.
    fn notify(&self, _all: bool) {}
    /// Holding nothing, operation 5: an exclusive section through `combine`
    /// with `pause(p)` inside it if the lock combines, else `pause(p)`.
    fn combine_or_pause(_m: &Mutex<Self::R, Shared>, _w: &mut Worker<'_>, p: u8) {
        pause(p);
    }
}

/// `try_lock_for` on a timed mutex; a failure must not come early.
fn timed_try_lock_for<'a, R: TimedMutex>(
    m: &'a Mutex<R, Shared>,
    w: &mut Worker<'_>,
    timeout: Duration,
) -> Option<MutexGuard<'a, R, Shared>> {
    let start = Instant::now();
    let g = m.try_lock_for(timeout);
    if g.is_none() {
        w.check_timeout("try_lock_for", start, timeout);
    }
    g
}

/// A mutex without timed locking or condvar (shape `fair_mutex`).
struct Untimed<R>(PhantomData<fn() -> R>);

impl<R: FairMutex> MutexKind for Untimed<R> {
    type R = R;
    fn new() -> Self {
        Untimed(PhantomData)
    }
    fn try_lock_for<'a>(
        m: &'a Mutex<R, Shared>,
        _: &mut Worker<'_>,
        _: Duration,
    ) -> Option<MutexGuard<'a, R, Shared>> {
        m.try_lock()
    }
}

/// A timed mutex without condvar (shape `timed_mutex`).
struct Timed<R>(PhantomData<fn() -> R>);

impl<R: TimedMutex> MutexKind for Timed<R> {
    type R = R;
    fn new() -> Self {
        Timed(PhantomData)
    }
    fn try_lock_for<'a>(
        m: &'a Mutex<R, Shared>,
        w: &mut Worker<'_>,
        timeout: Duration,
    ) -> Option<MutexGuard<'a, R, Shared>> {
        timed_try_lock_for(m, w, timeout)
    }
}

/// A timed mutex that also combines (shape `combining_mutex`).
struct Combines<R>(PhantomData<fn() -> R>);

impl<R: CombiningMutex> MutexKind for Combines<R> {
    type R = R;
    fn new() -> Self {
        Combines(PhantomData)
    }
    fn try_lock_for<'a>(
        m: &'a Mutex<R, Shared>,
        w: &mut Worker<'_>,
        timeout: Duration,
    ) -> Option<MutexGuard<'a, R, Shared>> {
        timed_try_lock_for(m, w, timeout)
    }
    fn combine_or_pause(m: &Mutex<R, Shared>, w: &mut Worker<'_>, p: u8) {
        registry::combine(m, |s| {
            s.enter_exclusive(w, "combine");
            pause(p);
            s.update(w, "combine");
            s.exit_exclusive(w, "combine");
        });
    }
}

/// A timed mutex with a condvar bound to it (shape `condvar`).
struct WithCondvar<C: TimedCondvar>(Condvar<C>);

impl<C: TimedCondvar> MutexKind for WithCondvar<C> {
    type R = C::RawMutex;
    fn new() -> Self {
        WithCondvar(Condvar::new())
    }
    fn try_lock_for<'a>(
        m: &'a Mutex<C::RawMutex, Shared>,
        w: &mut Worker<'_>,
        timeout: Duration,
    ) -> Option<MutexGuard<'a, C::RawMutex, Shared>> {
        timed_try_lock_for(m, w, timeout)
    }
    fn wait_for(&self, g: &mut MutexGuard<'_, C::RawMutex, Shared>, timeout: Duration) {
        self.0.wait_for(g, timeout);
    }
    fn notify(&self, all: bool) {
        if all {
            self.0.notify_all();
        } else {
            self.0.notify_one();
        }
    }
}

struct MutexUnderTest<K: MutexKind> {
    mutex: Mutex<K::R, Shared>,
    kind: K,
}

impl<K: MutexKind> MutexUnderTest<K> {
    fn new() -> Self {
        MutexUnderTest {
            mutex: Mutex::new(Shared::new()),
            kind: K::new(),
        }
    }
}

/// Runs the mutex programs, then checks the lock is free and no update was lost.
fn run_mutex<K: MutexKind>(lock: &LockInfo, l: &MutexUnderTest<K>, programs: &[Vec<u8>]) {
    let checker = Checker::new();
    let total = run_threads(&checker, programs, |w, prog| mutex_program(l, w, prog));
    let final_worker = Worker::new(programs.len() + 1, 0, &checker);
    match l.mutex.try_lock() {
        Some(g) => {
            let v = g.check_consistent(&final_worker, "final");
            if v != total {
                final_worker.violation(format_args!("lost updates: {v} of {total}"));
            }
        }
        None => final_worker.violation(format_args!("lock held after every thread finished")),
    }
    numa_topology::set_current_thread_node(None);
    report(lock.name, &checker);
}

fn mutex_program<K: MutexKind>(l: &MutexUnderTest<K>, w: &mut Worker<'_>, prog: &[u8]) {
    let m = &l.mutex;
    let mut held: Option<MutexGuard<'_, K::R, Shared>> = None;
    for &b in prog {
        let (op, p) = (b & 31, b >> 5);
        held = match held {
            None => match op % 6 {
                0 => Some(m.lock()),
                1 => m.try_lock(),
                2 => K::try_lock_for(m, w, micros(p, 20)),
                3 => {
                    l.kind.notify(p % 2 == 1);
                    None
                }
                4 => {
                    pause(p);
                    None
                }
                _ => {
                    K::combine_or_pause(m, w, p);
                    None
                }
            }
            .inspect(|g| g.enter_exclusive(w, "acquire")),
            Some(mut g) => match op % 8 {
                0 | 7 => {
                    g.update(w, "update");
                    Some(g)
                }
                1 => {
                    g.exit_exclusive(w, "unlock");
                    None
                }
                2 => {
                    g.exit_exclusive(w, "unlock_fair");
                    MutexGuard::unlock_fair(g);
                    None
                }
                3 => {
                    g.exit_exclusive(w, "bump");
                    MutexGuard::bump(&mut g);
                    g.enter_exclusive(w, "bump");
                    Some(g)
                }
                4 => {
                    g.exit_exclusive(w, "wait");
                    l.kind
                        .wait_for(&mut g, micros(p, 20) + Duration::from_micros(1));
                    g.enter_exclusive(w, "wait");
                    Some(g)
                }
                5 => {
                    w.migrate();
                    Some(g)
                }
                _ => {
                    pause(p);
                    g.check_consistent(w, "hold");
                    Some(g)
                }
            },
        };
    }
    if let Some(g) = held {
        g.exit_exclusive(w, "final unlock");
    }
}

// ---------------------------------------------------------------- rwlocks

enum Held<'a, R: RawRwLockUpgradeDowngrade> {
    No,
    Sh(RwLockReadGuard<'a, R, Shared>),
    Ex(RwLockWriteGuard<'a, R, Shared>),
    Up(RwLockUpgradableReadGuard<'a, R, Shared>),
}

/// Runs the reader-writer programs, then checks the lock is free and no
/// update was lost.
fn run_rwlock<R: FullRwLock>(lock: &LockInfo, programs: &[Vec<u8>]) {
    let l = RwLock::<R, Shared>::new(Shared::new());
    let checker = Checker::new();
    let total = run_threads(&checker, programs, |w, prog| rwlock_program(&l, w, prog));
    let final_worker = Worker::new(programs.len() + 1, 0, &checker);
    match l.try_write() {
        Some(g) => {
            let v = g.check_consistent(&final_worker, "final");
            if v != total {
                final_worker.violation(format_args!("lost updates: {v} of {total}"));
            }
        }
        None => final_worker.violation(format_args!("lock held after every thread finished")),
    }
    numa_topology::set_current_thread_node(None);
    report(lock.name, &checker);
}

fn rwlock_program<R: FullRwLock>(l: &RwLock<R, Shared>, w: &mut Worker<'_>, prog: &[u8]) {
    let mut held = Held::No;
    for &b in prog {
        let (op, p) = (b & 31, b >> 5);
        let timeout = micros(p, 20);
        held = match held {
            Held::No => {
                let start = Instant::now();
                match op % 10 {
                    0 => Some(Held::Ex(l.write())),
                    1 => Some(Held::Sh(l.read())),
                    2 => Some(Held::Up(l.upgradable_read())),
                    3 => l.try_write().map(Held::Ex),
                    4 => l.try_read().map(Held::Sh),
                    5 => l.try_upgradable_read().map(Held::Up),
                    6 => l.try_write_for(timeout).map(Held::Ex).or_else(|| {
                        w.check_timeout("try_write_for", start, timeout);
                        None
                    }),
                    7 => l.try_read_for(timeout).map(Held::Sh).or_else(|| {
                        w.check_timeout("try_read_for", start, timeout);
                        None
                    }),
                    8 => l
                        .try_upgradable_read_for(timeout)
                        .map(Held::Up)
                        .or_else(|| {
                            w.check_timeout("try_upgradable_read_for", start, timeout);
                            None
                        }),
                    _ => {
                        pause(p);
                        None
                    }
                }
                .map_or(Held::No, |h| {
                    match &h {
                        Held::Ex(g) => g.enter_exclusive(w, "acquire"),
                        Held::Sh(g) => g.enter_shared(w, "acquire"),
                        Held::Up(g) => g.enter_upgradable(w, "acquire"),
                        Held::No => {}
                    }
                    h
                })
            }
            Held::Ex(mut g) => match op % 8 {
                0 | 7 => {
                    g.update(w, "update");
                    Held::Ex(g)
                }
                1 => {
                    g.exit_exclusive(w, "unlock");
                    Held::No
                }
                2 => {
                    g.exit_exclusive(w, "unlock_fair");
                    RwLockWriteGuard::unlock_fair(g);
                    Held::No
                }
                3 => {
                    g.exit_exclusive(w, "bump");
                    RwLockWriteGuard::bump(&mut g);
                    g.enter_exclusive(w, "bump");
                    Held::Ex(g)
                }
                4 => {
                    g.exit_exclusive(w, "downgrade");
                    let r = RwLockWriteGuard::downgrade(g);
                    r.enter_shared(w, "downgrade");
                    Held::Sh(r)
                }
                5 => {
                    g.exit_exclusive(w, "downgrade_to_upgradable");
                    let u = RwLockWriteGuard::downgrade_to_upgradable(g);
                    u.enter_upgradable(w, "downgrade_to_upgradable");
                    Held::Up(u)
                }
                _ => {
                    w.migrate();
                    pause(p);
                    Held::Ex(g)
                }
            },
            Held::Sh(mut g) => match op % 6 {
                0 => {
                    g.check_consistent(w, "read");
                    Held::Sh(g)
                }
                1 => {
                    g.exit_shared(w, "unlock_shared");
                    Held::No
                }
                2 => {
                    g.exit_shared(w, "unlock_shared_fair");
                    RwLockReadGuard::unlock_fair(g);
                    Held::No
                }
                3 => {
                    g.exit_shared(w, "bump_shared");
                    RwLockReadGuard::bump(&mut g);
                    g.enter_shared(w, "bump_shared");
                    Held::Sh(g)
                }
                4 => {
                    w.migrate();
                    Held::Sh(g)
                }
                _ => {
                    pause(p);
                    g.check_consistent(w, "read");
                    Held::Sh(g)
                }
            },
            Held::Up(mut u) => match op % 9 {
                0 => {
                    u.check_consistent(w, "upgradable read");
                    Held::Up(u)
                }
                1 => {
                    u.exit_upgradable(w, "unlock_upgradable");
                    Held::No
                }
                2 => {
                    u.exit_upgradable(w, "unlock_upgradable_fair");
                    RwLockUpgradableReadGuard::unlock_fair(u);
                    Held::No
                }
                3 => {
                    u.exit_upgradable(w, "bump_upgradable");
                    RwLockUpgradableReadGuard::bump(&mut u);
                    u.enter_upgradable(w, "bump_upgradable");
                    Held::Up(u)
                }
                4 => {
                    let g = RwLockUpgradableReadGuard::upgrade(u);
                    g.exit_upgradable(w, "upgrade");
                    g.enter_exclusive(w, "upgrade");
                    Held::Ex(g)
                }
                5 => match RwLockUpgradableReadGuard::try_upgrade(u) {
                    Ok(g) => {
                        g.exit_upgradable(w, "try_upgrade");
                        g.enter_exclusive(w, "try_upgrade");
                        Held::Ex(g)
                    }
                    Err(u) => Held::Up(u),
                },
                6 => {
                    let start = Instant::now();
                    match RwLockUpgradableReadGuard::try_upgrade_for(u, timeout) {
                        Ok(g) => {
                            g.exit_upgradable(w, "try_upgrade_for");
                            g.enter_exclusive(w, "try_upgrade_for");
                            Held::Ex(g)
                        }
                        Err(u) => {
                            w.check_timeout("try_upgrade_for", start, timeout);
                            Held::Up(u)
                        }
                    }
                }
                7 => {
                    u.exit_upgradable(w, "downgrade_upgradable");
                    let r = RwLockUpgradableReadGuard::downgrade(u);
                    r.enter_shared(w, "downgrade_upgradable");
                    Held::Sh(r)
                }
                _ => {
                    w.migrate();
                    pause(p);
                    Held::Up(u)
                }
            },
        };
    }
    match held {
        Held::No => {}
        Held::Sh(g) => g.exit_shared(w, "final unlock"),
        Held::Ex(g) => g.exit_exclusive(w, "final unlock"),
        Held::Up(u) => u.exit_upgradable(w, "final unlock"),
    }
}
