//! A malformed `NUMA_TOPOLOGY` is reported once and ignored: `current_node`
//! answers from the machine. One test: the environment is read once.

use numa_topology::{
    TopologyError, VirtualLayout, active_topology, current_node, fallback_reason, machine_topology,
};

#[test]
fn malformed_env_is_ignored_with_a_reason() {
    // SAFETY: the only test of this binary; no other thread touches the
    // environment.
    unsafe { std::env::set_var("NUMA_TOPOLOGY", "nodes=two") };
    let err = VirtualLayout::from_env().unwrap_err();
    assert!(
        matches!(&err, TopologyError::MalformedEnv(e) if e.input == "nodes=two"),
        "{err}"
    );
    assert!(err.to_string().contains("NUMA_TOPOLOGY"), "{err}");

    let node = current_node();
    assert!(machine_topology().node(node).is_some());
    assert_eq!(active_topology(), machine_topology());
    let reason = fallback_reason().expect("a reason is recorded");
    assert!(
        reason.contains("nodes=two") && reason.contains("ignoring"),
        "{reason}"
    );
}
