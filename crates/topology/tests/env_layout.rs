//! `NUMA_TOPOLOGY` and `set_virtual_layout`: the process-wide virtual layout.
//! One test in this binary, because the layout is global. Linux only (it
//! pins threads with `sched_setaffinity`).
#![cfg(target_os = "linux")]

use numa_topology::{
    TopologySource, VirtualLayout, active_topology, bind_current_thread_to_node, current_cpu,
    current_node, fallback_reason, machine_topology, set_virtual_layout,
};

/// (cpu, node) read without a migration in between.
fn stable_cpu_node() -> (usize, usize) {
    loop {
        let before = current_cpu();
        let node = current_node();
        if current_cpu() == before {
            return (before, node);
        }
    }
}

fn check_current_node_follows(topology: &numa_topology::Topology) {
    let lowest = topology.numa_node_os_indexes()[0];
    for _ in 0..200 {
        let (cpu, node) = stable_cpu_node();
        assert_eq!(
            node,
            topology.pu_to_node(cpu).unwrap_or(lowest),
            "CPU {cpu}"
        );
    }
    // Bound to each virtual node that has CPUs, the thread reports it.
    for n in topology
        .numa_nodes()
        .iter()
        .filter(|n| !n.cpus().is_empty())
    {
        let id = n.os_index();
        let got = std::thread::spawn(move || {
            bind_current_thread_to_node(id).expect("bind");
            stable_cpu_node().1
        })
        .join()
        .unwrap();
        assert_eq!(got, id, "bound to virtual node {id}");
    }
}

#[test]
fn env_layout_then_code_layouts_then_machine() {
    // SAFETY: this is the only test of this binary and no other thread
    // exists yet that reads or writes the environment.
    unsafe { std::env::set_var("NUMA_TOPOLOGY", "nodes=2") };

    // The environment is read at the first call.
    let topo = active_topology();
    assert_eq!(
        topo.source(),
        &TopologySource::Virtual(VirtualLayout::spread(2).unwrap())
    );
    assert_eq!(topo.numa_node_count(), 2);
    assert_eq!(topo.pus(), machine_topology().pus());
    assert_eq!(fallback_reason(), None);
    check_current_node_follows(topo);

    // An explicit layout from code, with a CPU-less third node.
    let pus = machine_topology().pus().to_vec();
    let last = *pus.last().unwrap();
    let layout = VirtualLayout::explicit(vec![vec![], vec![last], vec![]]).unwrap();
    set_virtual_layout(Some(&layout)).unwrap();
    let topo = active_topology();
    assert_eq!(topo.numa_node_os_indexes(), vec![0, 1, 2]);
    assert_eq!(topo.pu_to_node(last), Some(1));
    let got = std::thread::spawn(move || {
        bind_current_thread_to_node(1).expect("bind");
        stable_cpu_node()
    })
    .join()
    .unwrap();
    assert_eq!(got, (last, 1));
    // CPUs outside an explicit layout report the lowest node, 0.
    if pus.len() > 1 {
        let first = pus[0];
        let got = std::thread::spawn(move || {
            // Virtual node 0 has no CPUs to bind to: pin to the CPU directly.
            pin(first);
            stable_cpu_node()
        })
        .join()
        .unwrap();
        assert_eq!(got, (first, 0));
    }
    assert!(matches!(
        bind_current_thread_to_node(0),
        Err(numa_topology::TopologyError::CpulessNode { node: 0 })
    ));

    // Back to the machine.
    set_virtual_layout(None).unwrap();
    assert_eq!(active_topology(), machine_topology());
    check_current_node_follows(machine_topology());
}

fn pin(cpu: usize) {
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    assert!(
        cpu < 8 * std::mem::size_of::<libc::cpu_set_t>(),
        "CPU {cpu} too large"
    );
    // SAFETY: `cpu` is below the bit capacity of `set` (asserted above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; `set` is valid and initialised.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    assert_eq!(rc, 0, "sched_setaffinity to CPU {cpu}");
}
