//! Stress tests bounded in wall time (not timed assertions: the duration only
//! bounds the run), and the size guarantee.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[cfg(not(feature = "stats"))]
#[test]
fn mutex_is_at_most_8_bytes() {
    assert!(std::mem::size_of::<numa_spin::Mutex<()>>() <= 8);
    assert!(std::mem::size_of::<numa_spin::RawMutex>() <= 8);
    assert!(std::mem::size_of::<numa_spin::RawQueuedMutex>() <= 8);
}

/// The tests of this file run one at a time: each already oversubscribes the
/// machine, and the hand-off mix depends on how many threads compete for the CPUs.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How long [`hammer`] waits at most for every thread to have acquired the lock
/// once before it starts the measured window anyway (a thread that never acquires
/// then fails the run's "a thread never acquired" check).
const RAMP_UP_LIMIT: Duration = Duration::from_secs(10);

/// What [`hammer`] measured.
#[cfg_attr(
    not(feature = "stats"),
    expect(dead_code, reason = "read only by the tests that need feature `stats`")
)]
struct Run<R: lock_api::RawMutex, S> {
    /// The lock, to read its final stats.
    lock: Arc<lock_api::Mutex<R, u64>>,
    /// Acquisitions per thread.
    counts: Vec<u64>,
    /// `probe` of the lock at the start of the measured window (every thread has
    /// acquired the lock at least once) and at its end (before the stop signal).
    window: (S, S),
}

/// Runs `threads` threads on `nodes` virtual nodes hammering one lock; every
/// critical section checks exclusion with a non-atomic counter.
///
/// The measured window lasts about `duration` and starts only once every thread
/// has acquired the lock once. Before that the lock sees the ramp-up, not the
/// load under test: on this 2-core machine the first two spawned threads (nodes 0
/// and 1) busy-wait within their spin budget and never yield, so the other
/// threads (and the spawning thread) wait for the scheduler to preempt them, for
/// 0 to 10 ms (measured); meanwhile those two hand the lock back and forth, about
/// 1 500 times per ms, 25 times the hand-off rate of 16 threads on 2 CPUs. Counted
/// from the lock's creation, those cross-node hand-offs (0 to 18 000 per run,
/// measured, against about 20 000 hand-offs in the 300 ms that follow) swamp the
/// steady state's same-node ratio.
fn hammer<R, S>(
    threads: usize,
    nodes: usize,
    duration: Duration,
    probe: impl Fn(&lock_api::Mutex<R, u64>) -> S,
) -> Run<R, S>
where
    R: lock_api::RawMutex + Send + Sync + 'static,
{
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lock = Arc::new(lock_api::Mutex::<R, u64>::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (lock, stop, started) = (lock.clone(), stop.clone(), started.clone());
            std::thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % nodes));
                let mut mine = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut g = lock.lock();
                    let v = *g;
                    // A critical section of ~0.1-0.5 us: the queue head reorders
                    // the queue while the lock is busy, so an empty critical
                    // section gives it no time to.
                    for k in 0..100u32 {
                        std::hint::black_box(k);
                    }
                    *g = v + 1;
                    drop(g);
                    if mine == 0 {
                        started.fetch_add(1, Ordering::Relaxed);
                    }
                    mine += 1;
                }
                mine
            })
        })
        .collect();
    let ramp_up = Instant::now();
    while started.load(Ordering::Relaxed) < threads && ramp_up.elapsed() < RAMP_UP_LIMIT {
        std::thread::sleep(Duration::from_millis(1));
    }
    let first = probe(&lock);
    let start = Instant::now();
    while start.elapsed() < duration {
        std::thread::sleep(Duration::from_millis(10));
    }
    let last = probe(&lock);
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(*lock.lock(), counts.iter().sum::<u64>(), "lost updates");
    assert!(
        counts.iter().all(|&c| c > 0),
        "a thread never acquired: {counts:?}"
    );
    Run {
        lock,
        counts,
        window: (first, last),
    }
}

/// Same-node and cross-node hand-offs between two snapshots of one lock's stats.
#[cfg(feature = "stats")]
fn handoffs_between(first: &numa_spin::Stats, last: &numa_spin::Stats) -> (u64, u64) {
    // Each counter only grows, and the snapshots were taken in this order by one
    // thread (read-read coherence), so the differences do not underflow.
    (
        last.same_node_handoffs - first.same_node_handoffs,
        last.cross_node_handoffs - first.cross_node_handoffs,
    )
}

/// Strict FIFO (no stealing) and always scan: every contended acquisition goes
/// through the queue, which is what the reordering acts on. (With stealing, on this
/// 2-core machine almost every acquisition is an uncontended re-acquisition by the
/// running thread and the queue rarely forms. With the default shuffle reduction,
/// 1/128, a new secondary queue forms only ~128 hand-offs after each 1 ms flush,
/// and at the ~100 hand-offs/ms this oversubscribed machine manages that is most of
/// the time: same-node ratio 0.3-0.5 measured, against 0.98 with scanning always.)
#[cfg(feature = "stats")]
#[derive(Clone, Copy, Debug)]
struct StrictFifo;
#[cfg(feature = "stats")]
static STRICT_FIFO: numa_spin::Config = numa_spin::Config::DEFAULT
    .steal_bound_ns(0)
    .shuffle_reduction(std::num::NonZeroU32::MIN);
#[cfg(feature = "stats")]
impl numa_spin::Tunables for StrictFifo {
    const DEFAULT: Self = StrictFifo;
    fn config(&self) -> &numa_spin::Config {
        &STRICT_FIFO
    }
}

/// 16 threads on 4 virtual nodes: CNA keeps hand-offs on the node, so same-node
/// hand-offs dominate; the node-oblivious queue lock, same config, gives about 1 in
/// 4 or fewer (printed for comparison, not asserted: that is the benchmark's job).
///
/// Dominance is judged on the hand-offs of the measured window of [`hammer`],
/// after the ramp-up. Counted from the lock's creation, the ratio varied from run
/// to run (0.54-0.99 over 30 runs, lower at times, which a best-of-3 retry used to
/// hide) because of the two-thread ramp-up described there; the window showed
/// 0.981-0.992 in 60 runs of 60, with one cross-node hand-off per secondary-queue
/// flush. With the reordering disabled (`order_queue` never moving a waiter) it
/// showed 0.0 and the test failed: arrival order here mostly cycles through the 4
/// nodes (the node-oblivious lock: 0-0.27 measured).
#[cfg(feature = "stats")]
#[test]
fn same_node_handoffs_dominate_16_threads_4_nodes() {
    let cna = hammer::<numa_spin::RawLock<true, StrictFifo>, _>(
        16,
        4,
        Duration::from_millis(300),
        numa_spin::stats_of,
    );
    let stats = numa_spin::stats_of(&cna.lock);
    let (same, cross) = handoffs_between(&cna.window.0, &cna.window.1);
    eprintln!(
        "cna: {stats:?}; measured window: same-node {same}, cross-node {cross}, ratio {:.3}",
        same as f64 / (same + cross).max(1) as f64
    );
    assert_eq!(stats.acquisitions, cna.counts.iter().sum::<u64>() + 1);
    assert_eq!(
        stats.same_node_handoffs + stats.cross_node_handoffs,
        stats.contended
    );
    assert!(
        same + cross > 100,
        "too little contention to judge: {same} same-node, {cross} cross-node hand-offs"
    );

    let queued = hammer::<numa_spin::RawLock<false, StrictFifo>, _>(
        16,
        4,
        Duration::from_millis(300),
        numa_spin::stats_of,
    );
    let (q_same, q_cross) = handoffs_between(&queued.window.0, &queued.window.1);
    eprintln!(
        "queued: {:?}; measured window: same-node {q_same}, cross-node {q_cross}",
        numa_spin::stats_of(&queued.lock)
    );

    assert!(
        same > cross,
        "same-node hand-offs do not dominate: {same} same-node, {cross} cross-node \
         in the measured window; whole run: {stats:?}"
    );
}

/// The same load on the node-oblivious lock, for comparison, and to check that
/// its counters are consistent.
#[cfg(feature = "stats")]
#[test]
fn queued_lock_stats_are_consistent() {
    let run = hammer::<numa_spin::RawQueuedMutex, _>(
        8,
        4,
        Duration::from_millis(200),
        numa_spin::stats_of,
    );
    let stats = numa_spin::stats_of(&run.lock);
    eprintln!("queued: {stats:?}");
    assert_eq!(stats.acquisitions, run.counts.iter().sum::<u64>() + 1);
    assert_eq!(stats.flushes, 0, "the queued lock has no secondary queue");
}

/// Exclusion under oversubscription without the stats feature too.
#[test]
fn exclusion_16_threads_4_nodes_bounded_in_time() {
    hammer::<numa_spin::RawMutex, _>(16, 4, Duration::from_millis(200), |_| ());
}
