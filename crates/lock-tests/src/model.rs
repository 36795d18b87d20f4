//! The exclusion model: the protected structure, the checks around it, and the
//! per-thread context of a checking thread. One model for the suites' exclusion
//! tests, the torture test and the fuzz target.
//!
//! A lock under test protects a [`Shared`]; each thread is a [`Worker`] that
//! calls [`Shared::enter_exclusive`] / [`Shared::exit_exclusive`] (and the shared
//! and upgradable variants) right inside its critical sections. Violations are
//! recorded in a [`Checker`] (never panics inside a critical section, so a broken
//! lock is reported with every violation's count and the first messages).
//!
//! Every check uses `Relaxed` atomics: they make a broken lock's races defined
//! behaviour (so the test can report them) without adding fences that would
//! hide a missing acquire/release in the lock under test.

use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Words in the protected structure: 16 x 8 bytes = two cache lines, so a torn
/// update (a writer seen half-way) and a lost update (two writers starting from
/// the same value) both leave the words unequal or the total short.
pub const WORDS: usize = 16;

/// Virtual NUMA nodes the workers are spread over.
pub const NODES: usize = 4;

/// The data every torture lock protects.
///
/// Invariant while no writer is inside: all `words` are equal, and equal to the
/// number of completed exclusive updates.
pub struct Shared {
    words: [AtomicU64; WORDS],
    /// Worker id (1-based) of the exclusive holder, 0 when none.
    owner: AtomicUsize,
    /// Readers inside (shared holders, plus the upgradable holder's reads).
    readers: AtomicUsize,
    /// Worker id of the upgradable holder, 0 when none.
    upgrader: AtomicUsize,
}

impl Default for Shared {
    fn default() -> Self {
        Self::new()
    }
}

impl Shared {
    /// A consistent structure with every word 0.
    pub const fn new() -> Self {
        Shared {
            words: [const { AtomicU64::new(0) }; WORDS],
            owner: AtomicUsize::new(0),
            readers: AtomicUsize::new(0),
            upgrader: AtomicUsize::new(0),
        }
    }

    /// The value of every word; a violation if they differ.
    pub fn check_consistent(&self, w: &Worker<'_>, what: &str) -> u64 {
        let v0 = self.words[0].load(Relaxed);
        for (i, word) in self.words.iter().enumerate().skip(1) {
            let v = word.load(Relaxed);
            if v != v0 {
                w.violation(format_args!(
                    "{what}: torn structure: word 0 = {v0}, word {i} = {v}"
                ));
                return v0;
            }
        }
        v0
    }

    /// Called right after an exclusive acquisition.
    pub fn enter_exclusive(&self, w: &Worker<'_>, what: &str) {
        let owner = self.owner.load(Relaxed);
        if owner != 0 {
            w.violation(format_args!(
                "{what}: exclusive holder {owner} still inside"
            ));
        }
        let readers = self.readers.load(Relaxed);
        if readers != 0 {
            w.violation(format_args!("{what}: {readers} readers beside a writer"));
        }
        let up = self.upgrader.load(Relaxed);
        if up != 0 {
            w.violation(format_args!(
                "{what}: upgradable holder {up} beside a writer"
            ));
        }
        self.owner.store(w.id, Relaxed);
    }

    /// Called right before an exclusive release.
    pub fn exit_exclusive(&self, w: &Worker<'_>, what: &str) {
        let owner = self.owner.load(Relaxed);
        if owner != w.id {
            w.violation(format_args!(
                "{what}: owner is {owner} at release by {}",
                w.id
            ));
        }
        self.owner.store(0, Relaxed);
    }

    /// Called right after a shared acquisition.
    pub fn enter_shared(&self, w: &Worker<'_>, what: &str) {
        self.readers.fetch_add(1, Relaxed);
        let owner = self.owner.load(Relaxed);
        if owner != 0 {
            w.violation(format_args!(
                "{what}: reader beside exclusive holder {owner}"
            ));
        }
    }

    /// Called right before a shared release.
    pub fn exit_shared(&self, w: &Worker<'_>, what: &str) {
        let owner = self.owner.load(Relaxed);
        if owner != 0 {
            w.violation(format_args!(
                "{what}: exclusive holder {owner} entered beside a reader"
            ));
        }
        self.readers.fetch_sub(1, Relaxed);
    }

    /// Called right after an upgradable acquisition.
    pub fn enter_upgradable(&self, w: &Worker<'_>, what: &str) {
        let up = self.upgrader.load(Relaxed);
        if up != 0 {
            w.violation(format_args!(
                "{what}: two upgradable holders ({up} and {})",
                w.id
            ));
        }
        let owner = self.owner.load(Relaxed);
        if owner != 0 {
            w.violation(format_args!(
                "{what}: upgradable beside exclusive holder {owner}"
            ));
        }
        self.upgrader.store(w.id, Relaxed);
    }

    /// Called right before an upgradable release (or right after it was
    /// upgraded to exclusive, before `enter_exclusive`).
    pub fn exit_upgradable(&self, w: &Worker<'_>, what: &str) {
        let up = self.upgrader.load(Relaxed);
        if up != w.id {
            w.violation(format_args!(
                "{what}: upgradable holder is {up}, not {}",
                w.id
            ));
        }
        self.upgrader.store(0, Relaxed);
    }

    /// The exclusive update: checks the words, then adds one to each of them
    /// one at a time (sometimes yielding half-way, to widen the window in which
    /// a second holder would see a torn structure).
    pub fn update(&self, w: &mut Worker<'_>, what: &str) {
        let v = self.check_consistent(w, what);
        let half = if w.chance(64) { WORDS / 2 } else { WORDS };
        for (i, word) in self.words.iter().enumerate() {
            if i == half {
                std::thread::yield_now();
            }
            word.store(v + 1, Relaxed);
        }
        w.stats.increments += 1;
    }

    /// A shared read: the words must be consistent.
    pub fn read(&self, w: &mut Worker<'_>, what: &str) {
        self.check_consistent(w, what);
        w.stats.reads += 1;
    }

    /// The whole exclusive critical section: enter, update, exit.
    pub fn exclusive_section(&self, w: &mut Worker<'_>, what: &str) {
        self.enter_exclusive(w, what);
        self.update(w, what);
        self.exit_exclusive(w, what);
    }

    /// The whole shared critical section: enter, read, exit.
    pub fn shared_section(&self, w: &mut Worker<'_>, what: &str) {
        self.enter_shared(w, what);
        self.read(w, what);
        self.exit_shared(w, what);
    }
}

/// Violation messages kept for the failure report.
const KEPT_MESSAGES: u64 = 5;

/// Collects invariant violations from all threads of one run.
pub struct Checker {
    count: AtomicU64,
    first: StdMutex<Option<String>>,
}

impl Default for Checker {
    fn default() -> Self {
        Self::new()
    }
}

impl Checker {
    /// No violations yet.
    pub const fn new() -> Self {
        Checker {
            count: AtomicU64::new(0),
            first: StdMutex::new(None),
        }
    }

    /// Records one violation (the first few messages are kept).
    pub fn record(&self, msg: std::fmt::Arguments<'_>) {
        if self.count.fetch_add(1, Relaxed) < KEPT_MESSAGES {
            let mut first = self.first.lock().unwrap_or_else(|e| e.into_inner());
            let text = first.get_or_insert_with(String::new);
            if !text.is_empty() {
                text.push_str("; ");
            }
            text.push_str(&msg.to_string());
        }
    }

    /// Violations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    /// The first violations' messages, if any.
    pub fn first(&self) -> Option<String> {
        self.first.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What one worker did (fixed size: the report is built inside the window in
/// which allocations are counted).
#[derive(Clone, Copy, Default, Debug)]
pub struct Stats {
    /// Exclusive updates of the torture lock's structure.
    pub increments: u64,
    /// Shared reads.
    pub reads: u64,
    /// `try_*_for` / `wait_for` calls that timed out.
    pub timeouts: u64,
    /// Panics thrown inside a critical section and caught.
    pub panics: u64,
    /// Locks created, contended and dropped by the churn operations.
    pub churned: u64,
    /// Calls per operation (index into the target's operation list).
    pub ops: [u64; MAX_OPS],
}

/// Upper bound on the operations of one target.
pub const MAX_OPS: usize = 32;

/// The context a torture operation runs in.
pub struct Worker<'a> {
    /// 1-based worker id (0 means "nobody" in the checks).
    pub id: usize,
    /// The virtual node this worker is assigned to.
    pub node: usize,
    rng: u64,
    checker: &'a Checker,
    /// What this worker did.
    pub stats: Stats,
}

impl<'a> Worker<'a> {
    /// A worker with id `id` on virtual node `id % NODES`; assigns the calling
    /// thread to that node.
    pub fn new(id: usize, seed: u64, checker: &'a Checker) -> Self {
        Self::on_node(id, id % NODES, seed, checker)
    }

    /// A worker with id `id` on virtual node `node`; assigns the calling thread
    /// to that node.
    pub fn on_node(id: usize, node: usize, seed: u64, checker: &'a Checker) -> Self {
        numa_topology::set_current_thread_node(Some(node));
        Worker {
            id,
            node,
            rng: (seed ^ (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1,
            checker,
            stats: Stats::default(),
        }
    }

    /// Records an invariant violation.
    pub fn violation(&self, msg: std::fmt::Arguments<'_>) {
        self.checker
            .record(format_args!("worker {}: {msg}", self.id));
    }

    /// Checks that a failed timed acquisition did not give up before its
    /// timeout (the `RawMutexTimed` / `RawCondvarTimed` contract); counts it.
    pub fn check_timeout(&mut self, what: &str, start: Instant, timeout: Duration) {
        self.stats.timeouts += 1;
        let waited = start.elapsed();
        if waited < timeout {
            self.violation(format_args!(
                "{what}: gave up after {waited:?}, before its timeout {timeout:?}"
            ));
        }
    }

    /// The checker this worker reports to.
    pub fn checker(&self) -> &'a Checker {
        self.checker
    }

    /// xorshift64: a cheap per-thread PRNG (Marsaglia 2003).
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// True with probability 1/n.
    pub fn chance(&mut self, n: u64) -> bool {
        self.next_u64().is_multiple_of(n)
    }

    /// A duration uniform in [0, max_us) microseconds.
    pub fn micros(&mut self, max_us: u64) -> Duration {
        Duration::from_micros(self.next_u64() % max_us)
    }

    /// Moves the calling thread to another virtual node (a migration, which
    /// makes any node the lock remembered stale) and returns the old node.
    pub fn migrate(&mut self) -> usize {
        let old = self.node;
        self.node = (self.node + 1 + (self.next_u64() as usize % (NODES - 1))) % NODES;
        numa_topology::set_current_thread_node(Some(self.node));
        old
    }

    /// Moves back to `node`.
    pub fn return_to(&mut self, node: usize) {
        self.node = node;
        numa_topology::set_current_thread_node(Some(node));
    }
}

/// The payload of the panics the torture operations throw on purpose.
pub struct TorturePanic;
