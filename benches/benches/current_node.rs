//! How long `numa_topology::current_node()` / `current_cpu()` take, and each
//! way of reading the current CPU, to pick the fast path by measurement.
//!
//! Run: `cargo bench -p numa-bench --bench current_node` (about 15 s).
//! Target (issue 2): `current_node()` at most 10 ns median.

use criterion::{Criterion, criterion_group, criterion_main};
use numa_topology::{CpuSource, VirtualLayout};
use std::hint::black_box;
use std::time::Duration;

fn bench(c: &mut Criterion) {
    let (source, from_tsc_aux) = numa_topology::current_node_method();
    eprintln!("current_node method: {source:?}, node from TSC_AUX: {from_tsc_aux}");

    let mut g = c.benchmark_group("current_node");
    g.bench_function("machine", |b| {
        b.iter(|| black_box(numa_topology::current_node()))
    });
    g.bench_function("thread_assigned", |b| {
        numa_topology::set_current_thread_node(Some(1));
        b.iter(|| black_box(numa_topology::current_node()));
        numa_topology::set_current_thread_node(None);
    });
    g.bench_function("virtual_layout_table", |b| {
        let layout = VirtualLayout::spread(4).expect("4 nodes is valid");
        numa_topology::set_virtual_layout(Some(&layout)).expect("layout applies");
        b.iter(|| black_box(numa_topology::current_node()));
        numa_topology::set_virtual_layout(None).expect("back to the machine");
    });
    g.finish();

    let mut g = c.benchmark_group("current_cpu");
    g.bench_function("current_cpu", |b| {
        b.iter(|| black_box(numa_topology::current_cpu()))
    });
    for source in CpuSource::available() {
        g.bench_function(format!("{source:?}"), |b| {
            b.iter(|| black_box(source.read_cpu()))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(50);
    targets = bench
}
criterion_main!(benches);
