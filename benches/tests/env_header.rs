//! `numa-bench run` states in its header every lock or topology environment
//! variable it ignored, with the reason and the value used instead, and
//! prints no such line when every value was taken.

use std::process::Command;

fn header(env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_numa-bench"));
    cmd.args([
        "run",
        "--lock",
        "cst",
        "--workload",
        "kv",
        "--threads",
        "2",
        "--duration",
        "50ms",
    ]);
    for var in ["NUMA_SPIN_WAIT_POLICY", "NUMA_TOPOLOGY"] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run numa-bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn bad_values_are_named_with_their_reason_and_replacement() {
    let h = header(&[
        ("NUMA_SPIN_WAIT_POLICY", "sleep"),
        ("NUMA_TOPOLOGY", "garbage"),
    ]);
    let ignored: Vec<&str> = h.lines().filter(|l| l.starts_with("# ignored: ")).collect();
    assert_eq!(ignored.len(), 2, "{h}");
    let line = |var: &str| {
        *ignored
            .iter()
            .find(|l| l.contains(var))
            .unwrap_or_else(|| panic!("{var} not named:\n{h}"))
    };
    let spin = line("NUMA_SPIN_WAIT_POLICY");
    assert!(
        spin.contains("\"sleep\"")
            && spin.contains("not `park` or `yield`")
            && spin.ends_with("using the default, park"),
        "{spin}"
    );
    let topo = line("NUMA_TOPOLOGY");
    assert!(
        topo.contains("\"garbage\"") && topo.contains("machine's topology"),
        "{topo}"
    );
}

#[test]
fn good_values_print_no_ignored_line_and_the_layout_used() {
    let h = header(&[
        ("NUMA_SPIN_WAIT_POLICY", "yield"),
        ("NUMA_TOPOLOGY", "nodes=2"),
    ]);
    assert!(!h.contains("ignored"), "{h}");
    assert!(
        h.contains("# nodes: NUMA_TOPOLOGY=\"nodes=2\": 2 virtual nodes"),
        "{h}"
    );
    assert!(h.contains("# build: commit "), "{h}");
}
