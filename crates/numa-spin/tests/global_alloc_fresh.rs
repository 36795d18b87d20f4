//! numa-spin locks as the lock inside the `#[global_allocator]`, each run in
//! fresh processes, so that the first contended acquisitions of a process are
//! the ones that build the topology's node map and read the tunables.
//!
//! Building the node map allocates (and may log). If a slow path looked the
//! node up after it had initialized its queue node, the allocation would
//! re-enter the same lock on the same thread, which would re-initialize,
//! enqueue and finish with that same queue node; the outer acquisition would
//! then enqueue a node the inner one left dirty, and the process would hang.
//! The first slow acquisitions of a process are the only ones exposed, and only
//! when they meet enough contention, so each lock is run in several fresh
//! child processes (this test binary again, running only [`child`]), each
//! failed if it does not finish before a deadline.
//!
//! The locks: HQ with the process-wide tunables (episodes start plain, NUMA
//! mode after 50 hand-offs), HQ in NUMA mode from the first waiter (per-lock
//! tunables), the same in strict FIFO, CNA and the queued lock. Half of the
//! children run under a virtual layout of 2 nodes (`NUMA_TOPOLOGY`), which the
//! node map's build parses, the other half on the machine's topology.
//!
//! With feature `stats` every acquisition, the uncontended ones included, looks
//! its node up before its first attempt, so the map is built by the first
//! allocation of the process, outside any slow path: the test still runs, but
//! only a build without `stats` puts the map's build inside a slow path.
//!
//! `NUMA_SPIN_FRESH_RUNS` sets the children per lock (default 8).

use lock_api::RawMutex as _;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Read as _;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// NUMA mode from the first waiter.
static HQ_NUMA: numa_spin::Config = numa_spin::Config::DEFAULT.hq_switch_threshold(0);
/// NUMA mode from the first waiter, strict FIFO: a re-entrant acquisition can
/// never steal the lock, it always queues.
static HQ_NUMA_STRICT: numa_spin::Config = HQ_NUMA.steal_bound_ns(0);

/// The locks of the allocator, one of which serializes every call into
/// [`System`] (chosen once per process, before its threads start).
struct Locks {
    hq: numa_spin::RawHqMutex,
    hq_numa: numa_spin::RawHqLock<&'static numa_spin::Config>,
    hq_numa_strict: numa_spin::RawHqLock<&'static numa_spin::Config>,
    cna: numa_spin::RawMutex,
    queued: numa_spin::RawQueuedMutex,
}

/// The locks' names, in [`CHOICE`] order.
const LOCKS: [&str; 5] = ["hq", "hq-numa", "hq-numa-strict", "cna", "queued"];

/// Index into [`LOCKS`] of the lock in use.
static CHOICE: AtomicU8 = AtomicU8::new(0);

thread_local! {
    /// Whether this thread yields its CPU inside the allocator's critical
    /// section, so that waiters queue up behind it on 2 CPUs.
    static YIELD_INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` under `lock`.
fn under<R: lock_api::RawMutex, T>(lock: &R, f: impl FnOnce() -> T) -> T {
    let guard = lock.lock();
    let r = f();
    // `try_with`: allocations from thread-local destructors must work too.
    if YIELD_INSIDE.try_with(Cell::get).unwrap_or(false) {
        std::thread::yield_now();
    }
    // SAFETY: `guard` is the acquisition just above, released once.
    unsafe { lock.unlock(guard) };
    r
}

impl Locks {
    /// Whether the lock at `index` of [`LOCKS`] is bound to NUMA metadata
    /// now; `None` if it is not an HQ lock.
    fn hq_numa_at(&self, index: usize) -> Option<bool> {
        match index {
            0 => Some(self.hq.is_numa_bound()),
            1 => Some(self.hq_numa.is_numa_bound()),
            2 => Some(self.hq_numa_strict.is_numa_bound()),
            _ => None,
        }
    }

    fn with<T>(&self, f: impl FnOnce() -> T) -> T {
        match CHOICE.load(Ordering::Relaxed) {
            0 => under(&self.hq, f),
            1 => under(&self.hq_numa, f),
            2 => under(&self.hq_numa_strict, f),
            3 => under(&self.cna, f),
            _ => under(&self.queued, f),
        }
    }
}

/// [`System`], serialized by one of [`Locks`].
struct LockedSystem(Locks);

// SAFETY: every method forwards to `System` with the caller's arguments; the
// locks only serialize the calls.
unsafe impl GlobalAlloc for LockedSystem {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        self.0.with(|| unsafe { System.alloc(layout) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        self.0.with(|| unsafe { System.dealloc(ptr, layout) })
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded contract.
        self.0
            .with(|| unsafe { System.realloc(ptr, layout, new_size) })
    }
}

#[global_allocator]
static ALLOC: LockedSystem = LockedSystem(Locks {
    hq: numa_spin::RawHqMutex::INIT,
    hq_numa: numa_spin::RawHqLock::with_config(&HQ_NUMA),
    hq_numa_strict: numa_spin::RawHqLock::with_config(&HQ_NUMA_STRICT),
    cna: numa_spin::RawMutex::INIT,
    queued: numa_spin::RawQueuedMutex::INIT,
});

/// The environment variable that makes [`child`] run the workload on the lock
/// it names.
const CHILD_ENV: &str = "NUMA_SPIN_FRESH_CHILD";

/// How long a child may take; its workload takes well under a second even on
/// a loaded 2-CPU machine, so a child still running then has deadlocked.
const DEADLINE: Duration = Duration::from_secs(60);

/// The workload of a child process (a no-op in the parent): 7 threads (more
/// than the CPUs here), each assigned a virtual node so that it never builds
/// the node map, allocate and free in a loop, yielding the CPU inside the
/// lock so that queues form; once they have made 1000 allocations (and an HQ
/// lock is in NUMA mode), a thread assigned no node makes 200 allocations:
/// its first slow acquisition meets the queue the others keep busy, and its
/// node lookup there builds the node map.
#[test]
fn child() {
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    let Ok(name) = std::env::var(CHILD_ENV) else {
        return;
    };
    let index = LOCKS
        .iter()
        .position(|&l| l == name)
        .unwrap_or_else(|| panic!("{CHILD_ENV}={name:?}: not a lock of {LOCKS:?}"));
    // This thread allocates while the others run (spawning them).
    numa_topology::set_current_thread_node(Some(0));
    CHOICE.store(index as u8, Ordering::Relaxed);
    let made = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for i in 0..7 {
            let (made, done) = (&made, &done);
            s.spawn(move || {
                numa_topology::set_current_thread_node(Some(i % 2));
                YIELD_INSIDE.with(|y| y.set(true));
                while !done.load(Ordering::Relaxed) {
                    let b = std::hint::black_box(Box::new([i; 4]));
                    drop(b);
                    made.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        s.spawn(|| {
            // An HQ lock: until it is in NUMA mode, whose slow path looks
            // the node up (or, should it not get there, a while longer).
            while made.load(Ordering::Relaxed) < 1000
                || (ALLOC.0.hq_numa_at(index) == Some(false)
                    && made.load(Ordering::Relaxed) < 1_000_000)
            {
                std::thread::yield_now();
            }
            // Shown if the child fails (formatting an integer allocates nothing).
            eprintln!(
                "the thread assigned no node allocates after {} allocations",
                made.load(Ordering::Relaxed)
            );
            let mut keep = Vec::new();
            for round in 0..200usize {
                let b = Box::new([round; 4]);
                if round % 16 == 0 {
                    keep.push(b);
                }
            }
            assert_eq!(keep.len(), 200 / 16 + 1);
            done.store(true, Ordering::Relaxed);
        });
    });
}

/// Runs [`child`] in a fresh process on `lock`; `Err` with what went wrong if
/// it failed or was still running at the deadline (it is killed then).
fn run_child(lock: &str, virtual_nodes: bool) -> Result<(), String> {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "child", "--test-threads=1", "--nocapture"])
        .env(CHILD_ENV, lock)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if virtual_nodes {
        cmd.env("NUMA_TOPOLOGY", "nodes=2");
    } else {
        cmd.env_remove("NUMA_TOPOLOGY");
    }
    let mut child = cmd.spawn().expect("spawn the child process");
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child's status") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    match status {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(format!("exited with {s}; stderr:\n{stderr}")),
        None => Err(format!(
            "still running after {DEADLINE:?} (deadlocked); stderr:\n{stderr}"
        )),
    }
}

/// Every lock, in `NUMA_SPIN_FRESH_RUNS` (default 8) fresh processes each,
/// alternately on a virtual layout of 2 nodes and on the machine's topology:
/// every process finishes.
#[test]
fn first_slow_acquisitions_of_a_process_in_the_global_allocator() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let runs: usize = std::env::var("NUMA_SPIN_FRESH_RUNS")
        .ok()
        .map(|v| v.parse().expect("NUMA_SPIN_FRESH_RUNS: a number"))
        .unwrap_or(8);
    for lock in LOCKS {
        for run in 0..runs {
            let virtual_nodes = run % 2 == 0;
            if let Err(e) = run_child(lock, virtual_nodes) {
                panic!(
                    "{lock}, fresh process {} of {runs} (virtual nodes: {virtual_nodes}): {e}",
                    run + 1
                );
            }
        }
    }
}
