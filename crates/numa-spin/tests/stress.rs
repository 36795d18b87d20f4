//! Stress tests bounded in wall time (not timed assertions: the duration only
//! bounds the run), and the size guarantee.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Runs `threads` threads on `nodes` virtual nodes hammering one lock for about
/// `duration`; every critical section checks exclusion with a non-atomic counter.
/// Returns the lock's stats (if the feature is on) and the per-thread counts.
fn hammer<R>(
    threads: usize,
    nodes: usize,
    duration: Duration,
) -> (Arc<lock_api::Mutex<R, u64>>, Vec<u64>)
where
    R: lock_api::RawMutex + Send + Sync + 'static,
{
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lock = Arc::new(lock_api::Mutex::<R, u64>::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (lock, stop) = (lock.clone(), stop.clone());
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
                    mine += 1;
                }
                mine
            })
        })
        .collect();
    let start = Instant::now();
    while start.elapsed() < duration {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(*lock.lock(), counts.iter().sum::<u64>(), "lost updates");
    assert!(
        counts.iter().all(|&c| c > 0),
        "a thread never acquired: {counts:?}"
    );
    (lock, counts)
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
/// 4 (printed for comparison, not asserted: that is the benchmark's job).
///
/// On this 2-core machine (8 threads per CPU) runs are bimodal: about 1 in 7 stays
/// at the FIFO level (ratio ~0.3) for its whole 300 ms, apparently while queue
/// heads keep finding their successor not yet linked (the linking thread was
/// preempted right after its tail swap); the others reach ~0.98. So up to 3 runs
/// are made and one must show dominance; with the reordering broken every run
/// stays at ~0.25 and the test fails.
#[cfg(feature = "stats")]
#[test]
fn same_node_handoffs_dominate_16_threads_4_nodes() {
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (lock, counts) =
            hammer::<numa_spin::RawLock<true, StrictFifo>>(16, 4, Duration::from_millis(300));
        let stats = numa_spin::stats_of(&lock);
        eprintln!(
            "cna: {stats:?} same-node ratio {:?}",
            stats.same_node_ratio()
        );
        assert_eq!(stats.acquisitions, counts.iter().sum::<u64>() + 1);
        assert_eq!(
            stats.same_node_handoffs + stats.cross_node_handoffs,
            stats.contended
        );
        assert!(
            stats.contended > 100,
            "too little contention to judge: {stats:?}"
        );
        if stats.same_node_handoffs > stats.cross_node_handoffs {
            let (queued, _) =
                hammer::<numa_spin::RawLock<false, StrictFifo>>(16, 4, Duration::from_millis(300));
            let queued = numa_spin::stats_of(&queued);
            eprintln!(
                "queued: {queued:?} same-node ratio {:?}",
                queued.same_node_ratio()
            );
            return;
        }
        seen.push(stats);
    }
    panic!("same-node hand-offs do not dominate in any of 3 runs: {seen:?}");
}

/// The same load on the node-oblivious lock, for comparison, and to check that
/// its counters are consistent.
#[cfg(feature = "stats")]
#[test]
fn queued_lock_stats_are_consistent() {
    let (lock, counts) = hammer::<numa_spin::RawQueuedMutex>(8, 4, Duration::from_millis(200));
    let stats = numa_spin::stats_of(&lock);
    eprintln!("queued: {stats:?}");
    assert_eq!(stats.acquisitions, counts.iter().sum::<u64>() + 1);
    assert_eq!(stats.flushes, 0, "the queued lock has no secondary queue");
}

/// Exclusion under oversubscription without the stats feature too.
#[test]
fn exclusion_16_threads_4_nodes_bounded_in_time() {
    hammer::<numa_spin::RawMutex>(16, 4, Duration::from_millis(200));
}
