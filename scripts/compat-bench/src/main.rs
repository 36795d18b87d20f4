//! Hot paths of two published crates under contention, for
//! `scripts/compat-bench.sh`, which builds this program once on crates.io's
//! parking_lot 0.12 and once on the NUMA drop-in and runs both interleaved.
//!
//! `compat-bench WORKLOAD THREADS MILLIS` prints one line:
//! `WORKLOAD THREADS OPS_PER_US`.
//!
//! - `quick_cache`: `quick_cache::sync::Cache<u64, u64>` (capacity 10 000, its
//!   shards are parking_lot `RwLock`s), each thread doing 90% `get` and 10%
//!   `insert` on keys drawn uniformly from 0..20 000; ops/us counts both.
//! - `tokio`: a multi-thread runtime with THREADS workers (its scheduler and
//!   `tokio::sync::Mutex` take parking_lot locks); each round spawns 64 tasks
//!   that each lock one shared `tokio::sync::Mutex` 16 times, and joins them;
//!   ops/us counts spawned-and-joined tasks.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn quick_cache(threads: usize, window: Duration) -> f64 {
    let cache = Arc::new(quick_cache::sync::Cache::<u64, u64>::new(10_000));
    for k in 0..10_000 {
        cache.insert(k, k);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (cache, stop, ops) = (cache.clone(), stop.clone(), ops.clone());
            std::thread::spawn(move || {
                let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..64 {
                        let r = xorshift(&mut seed);
                        let k = r % 20_000;
                        if r % 10 == 0 {
                            cache.insert(k, r);
                        } else {
                            std::hint::black_box(cache.get(&k));
                        }
                    }
                    n += 64;
                }
                ops.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    std::thread::sleep(window);
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    ops.load(Ordering::Relaxed) as f64 / start.elapsed().as_micros() as f64
}

fn tokio(threads: usize, window: Duration) -> f64 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .build()
        .unwrap();
    rt.block_on(async move {
        let shared = Arc::new(tokio::sync::Mutex::new(0u64));
        let start = Instant::now();
        let mut tasks = 0u64;
        while start.elapsed() < window {
            let hs: Vec<_> = (0..64)
                .map(|_| {
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        for _ in 0..16 {
                            *shared.lock().await += 1;
                        }
                    })
                })
                .collect();
            for h in hs {
                h.await.unwrap();
            }
            tasks += 64;
        }
        assert_eq!(*shared.lock().await, tasks * 16, "lost updates");
        tasks as f64 / start.elapsed().as_micros() as f64
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: compat-bench quick_cache|tokio THREADS MILLIS";
    let [_, workload, threads, millis] = &args[..] else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let (Ok(threads), Ok(millis)) = (threads.parse::<usize>(), millis.parse::<u64>()) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let window = Duration::from_millis(millis);
    let ops = match workload.as_str() {
        "quick_cache" => quick_cache(threads, window),
        "tokio" => tokio(threads, window),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    println!("{workload} {threads} {ops:.4}");
}
