//! criterion benches of every lock: uncontended lock+unlock, contended short
//! critical sections (2 threads and 4x CPUs threads), and rwlocks read-only and
//! 95% read with 1 and 2 threads. Critical sections run through
//! `BenchMutex::with_send`, so `combining` runs them through `combine`.
//!
//! Contended benches spread their threads over 2 virtual nodes
//! (`numa_topology::set_current_thread_node`), so the NUMA-aware locks take their
//! NUMA paths on a one-node machine too; the reported time is wall time per
//! operation of all threads together (thread start-up excluded, join included;
//! a sample is capped at 200 ms of wall time and extrapolated, see
//! `timed_threads`).
//! Measurement times are short (0.3 s warm-up, 1 s measurement, 10 samples) so the
//! whole `cargo bench` stays within a few minutes on 2 cores.

use std::hint::black_box;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, criterion_group, criterion_main};

use numa_bench::locks::{
    BenchMutex, BenchRwLock, MutexKind, ParkingLot, ParkingLotRw, RwLockKind, Spin, Std, StdRw,
    Ticket,
};
use numa_bench::ours::{Cna, Combining, Cst, CstRw, Hq, Queued};

/// The protected data: two cache lines, like `locktorture`'s default.
#[repr(align(64))]
#[derive(Default)]
struct Data([u64; 16]);

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn short_cs(d: &mut Data) {
    d.0[0] = d.0[0].wrapping_add(1);
    d.0[8] = d.0[8].wrapping_add(1);
}

/// Wall-time cap of one contended sample: with more threads than CPUs a FIFO
/// spinlock hands the lock to descheduled waiters and may crawl (one scheduler
/// tick per handoff), so a sample stops at this deadline and is extrapolated.
const SAMPLE_CAP: Duration = Duration::from_millis(200);

/// Runs `threads` threads doing `iters / threads` operations each (rounded up),
/// or fewer if [`SAMPLE_CAP`] passes first (checked every 64 operations). Returns
/// the wall time from the start barrier to the last join, scaled to `iters`
/// operations when the cap cut the sample short (time per operation is what
/// criterion reports, so the scaling keeps it; the sample then measured the
/// first 200 ms only).
fn timed_threads(threads: usize, iters: u64, op: impl Fn(usize, u64) + Sync) -> Duration {
    let per = iters.div_ceil(threads as u64);
    let barrier = Barrier::new(threads + 1);
    let done = AtomicU64::new(0);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, op, done) = (&barrier, &op, &done);
                s.spawn(move || {
                    numa_topology::set_current_thread_node(Some(t % 2));
                    barrier.wait();
                    let deadline = Instant::now() + SAMPLE_CAP;
                    let mut i = 0;
                    while i < per {
                        op(t, i);
                        i += 1;
                        if i % 64 == 0 && Instant::now() >= deadline {
                            break;
                        }
                    }
                    done.fetch_add(i, Ordering::Relaxed);
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        for h in hs {
            h.join().expect("bench thread panicked");
        }
        let elapsed = t0.elapsed();
        let done = done.load(Ordering::Relaxed).max(1);
        if done >= iters {
            elapsed
        } else {
            elapsed.mul_f64(iters as f64 / done as f64)
        }
    })
}

fn mutex_benches<K: MutexKind>(c: &mut Criterion, name: &str) {
    let mut g = c.benchmark_group("uncontended");
    g.bench_function(name, |b| {
        let m = <K::Mutex<Data>>::new(Data::default());
        b.iter(|| m.with_send(short_cs));
    });
    g.finish();

    let mut g = c.benchmark_group("contended");
    // Flat sampling: equal iteration counts per sample, mean time per operation.
    // The default linear regression is meaningless when oversubscribed spinlocks
    // make the time per operation jump by orders of magnitude between samples.
    g.sampling_mode(SamplingMode::Flat);
    for threads in [2, 4 * cpus()] {
        g.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &threads| {
            b.iter_custom(|iters| {
                let m = <K::Mutex<Data>>::new(Data::default());
                timed_threads(threads, iters, |_, _| m.with_send(short_cs))
            });
        });
    }
    g.finish();
}

fn rwlock_benches<K: RwLockKind>(c: &mut Criterion, name: &str) {
    let mut g = c.benchmark_group("rwlock");
    g.sampling_mode(SamplingMode::Flat);
    for (mix, write_every) in [("read-only", u64::MAX), ("read95", 20)] {
        for threads in [1, 2] {
            let id = BenchmarkId::new(format!("{name}/{mix}"), threads);
            g.bench_with_input(id, &threads, |b, &threads| {
                b.iter_custom(|iters| {
                    let l = <K::RwLock<Data>>::new(Data::default());
                    timed_threads(threads, iters, |_, i| {
                        if i % write_every == write_every - 1 {
                            l.write(short_cs);
                        } else {
                            black_box(l.read(|d| d.0[0] ^ d.0[8]));
                        }
                    })
                });
            });
        }
    }
    g.finish();
}

fn all(c: &mut Criterion) {
    mutex_benches::<Cna>(c, "cna");
    mutex_benches::<Queued>(c, "queued");
    mutex_benches::<Hq>(c, "hq");
    mutex_benches::<Combining>(c, "combining");
    mutex_benches::<Cst>(c, "cst");
    mutex_benches::<ParkingLot>(c, "parking_lot");
    mutex_benches::<Std>(c, "std");
    mutex_benches::<Spin>(c, "spin");
    mutex_benches::<Ticket>(c, "ticket");
    rwlock_benches::<CstRw>(c, "cst-rw");
    rwlock_benches::<ParkingLotRw>(c, "parking_lot-rw");
    rwlock_benches::<StdRw>(c, "std-rw");
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(10);
    targets = all
}
criterion_main!(benches);
