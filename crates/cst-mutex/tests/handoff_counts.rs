//! What a hand-off costs in writes to shared cache lines, counted on this
//! machine with the paths a 16-core machine takes ([`cst_mutex::set_cpus`]).
//!
//! CST (Kashyap, Min, Kim, USENIX ATC 2017, section 3): a node keeps the
//! global lock for its batch, so a hand-off to a waiter of the holder's own
//! node writes only that node's lines, never the global word. Under
//! saturation the word is then written only when the lock moves to another
//! node or becomes free: a small fraction of the acquisitions.
//!
//! 16 threads on 2 virtual nodes (threads assigned to nodes; the machine may
//! have one), each taking the lock in a loop. The threads are slow on a
//! 2-CPU machine; the counts are what this test checks, not the time.
#![cfg(feature = "stats")]

use cst_mutex::{Mutex, ThreadCounts, reset_thread_counts, set_cpus, thread_counts};
use std::sync::{Arc, Barrier};
use std::thread;

const THREADS: usize = 16;
const NODES: usize = 2;
const ROUNDS: usize = 2_000;

fn run(threads: usize) -> ThreadCounts {
    let m = Arc::new(Mutex::new(0u64));
    let start = Arc::new(Barrier::new(threads));
    let hs: Vec<_> = (0..threads)
        .map(|i| {
            let (m, start) = (m.clone(), start.clone());
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(i % NODES));
                reset_thread_counts();
                start.wait();
                for _ in 0..ROUNDS {
                    let mut g = m.lock();
                    // A critical section that touches the data, and gives
                    // the CPU away while it holds the lock, so that the
                    // other threads run and queue as they would on 16
                    // CPUs (on 2 CPUs a holder that keeps its CPU takes the
                    // free lock again on the fast path before any waiter
                    // runs).
                    *g = g.wrapping_mul(31).wrapping_add(i as u64);
                    std::hint::black_box(&mut *g);
                    thread::yield_now();
                }
                thread_counts()
            })
        })
        .collect();
    hs.into_iter()
        .map(|h| h.join().unwrap())
        .fold(ThreadCounts::default(), |a, b| a + b)
}

#[test]
fn local_handoffs_write_no_global_word_at_16_forced_cpus() {
    set_cpus(THREADS).unwrap();
    let c = run(THREADS);
    eprintln!("{c:?}");
    eprintln!(
        "word writes per acquisition {:.4}, remote snode writes per acquisition {:.4}",
        c.word_writes_per_acquisition(),
        c.remote_snode_writes_per_acquisition()
    );
    assert_eq!(c.acquisitions, (THREADS * ROUNDS) as u64);
    assert!(
        c.local_handoffs > c.acquisitions / 4,
        "too few same-node hand-offs to judge: {c:?}"
    );
    assert_eq!(
        c.local_handoff_word_writes, 0,
        "a same-node hand-off wrote the global word: {c:?}"
    );
    assert!(
        c.word_writes_per_acquisition() <= 0.1,
        "global-word writes per acquisition {:.3} > 0.1: {c:?}",
        c.word_writes_per_acquisition()
    );
}
