//! `current_node()` / `current_cpu()` on the running machine. This binary
//! never sets a virtual layout; if `NUMA_TOPOLOGY` is set in the
//! environment the checks run against that virtual layout instead.

use numa_topology::{
    TopologyError, active_topology, bind_current_thread_to_node, current_cpu, current_node,
    machine_topology, set_current_thread_node,
};

fn no_env_layout() -> bool {
    std::env::var_os("NUMA_TOPOLOGY").is_none_or(|v| v.is_empty())
}

/// Reads (cpu, node, cpu) until the two CPU reads agree (no migration in
/// between), so the node belongs to that CPU.
fn stable_cpu_node() -> (usize, usize) {
    loop {
        let before = current_cpu();
        let node = current_node();
        if current_cpu() == before {
            return (before, node);
        }
    }
}

#[test]
fn current_node_agrees_with_the_machine_topology() {
    let topo = active_topology();
    if no_env_layout() {
        assert_eq!(topo, machine_topology());
    }
    let lowest = topo.numa_node_os_indexes()[0];
    for _ in 0..1000 {
        let (cpu, node) = stable_cpu_node();
        assert!(topo.pus().contains(&cpu), "CPU {cpu} not a PU of {topo:?}");
        assert_eq!(
            node,
            topo.pu_to_node(cpu).unwrap_or(lowest),
            "CPU {cpu}: current_node disagrees with the topology"
        );
        #[cfg(target_os = "linux")]
        assert!(
            !no_env_layout()
                || std::path::Path::new(&format!("/sys/devices/system/cpu/cpu{cpu}/node{node}"))
                    .exists(),
            "sysfs does not put CPU {cpu} in node {node}"
        );
    }
}

#[cfg(target_os = "linux")]
#[test]
fn bound_threads_report_their_node() {
    let topo = active_topology();
    for node in topo.numa_nodes() {
        let id = node.os_index();
        let cpus = node.cpus().to_vec();
        let result = std::thread::spawn(move || {
            let r = bind_current_thread_to_node(id);
            (r, current_cpu(), current_node())
        })
        .join()
        .unwrap();
        match result {
            (Ok(()), cpu, got) => {
                assert!(cpus.contains(&cpu), "bound to node {id} but on CPU {cpu}");
                assert_eq!(got, id);
            }
            (Err(TopologyError::CpulessNode { node }), _, _) => assert!(cpus.is_empty(), "{node}"),
            (Err(e), _, _) => panic!("binding to node {id}: {e}"),
        }
    }
    let err = bind_current_thread_to_node(topo.node_index_bound() + 5).unwrap_err();
    assert!(matches!(err, TopologyError::UnknownNode { .. }), "{err}");
}

#[test]
fn thread_assignment_wins_over_the_hardware() {
    std::thread::spawn(|| {
        set_current_thread_node(Some(41));
        assert_eq!(current_node(), 41);
        set_current_thread_node(None);
        let (cpu, node) = stable_cpu_node();
        let topo = active_topology();
        assert_eq!(
            node,
            topo.pu_to_node(cpu)
                .unwrap_or(topo.numa_node_os_indexes()[0])
        );
    })
    .join()
    .unwrap();
}
