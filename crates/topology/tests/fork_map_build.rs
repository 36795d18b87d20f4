//! A `fork(2)` while another thread builds the node map (on the first
//! `current_node`, or the first lock slow path of the process).
//!
//! The build is stopped where it logs a malformed `NUMA_TOPOLOGY` (through
//! the `log` facade, whose logger this test installs), standing in for a
//! preemption there; another thread forks meanwhile. The child has no
//! thread inside the build, and its first call that needs the map must
//! build it rather than wait for a builder that does not exist there. The
//! child runs under `alarm(10)`: a hang ends it with `SIGALRM`, and the
//! parent checks its exit status.
#![cfg(target_os = "linux")]

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Set when the build has reached the logger and waits there.
static IN_BUILD: AtomicBool = AtomicBool::new(false);
/// The child's PID, once the forking thread has forked.
static CHILD: AtomicI32 = AtomicI32::new(0);

/// A logger that stops the first thread that logs until another thread has
/// forked.
struct StopOnce;

impl log::Log for StopOnce {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, _: &log::Record<'_>) {
        if !IN_BUILD.swap(true, Ordering::SeqCst) {
            while CHILD.load(Ordering::SeqCst) == 0 {
                std::thread::yield_now();
            }
        }
    }
    fn flush(&self) {}
}

static LOGGER: StopOnce = StopOnce;

#[test]
fn a_fork_during_the_map_build_leaves_a_child_that_builds_it() {
    // SAFETY: the only test of this binary; no other thread touches the
    // environment.
    unsafe { std::env::set_var("NUMA_TOPOLOGY", "nodes=two") };
    log::set_logger(&LOGGER).unwrap();
    log::set_max_level(log::LevelFilter::Warn);
    let builder = std::thread::spawn(numa_topology::fallback_reason);
    while !IN_BUILD.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    // SAFETY: the other threads are the builder, stopped in the logger
    // outside any allocation, and the test harness's, waiting.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: plain libc calls in the child.
        unsafe { libc::alarm(10) };
        let ok = numa_topology::fallback_reason().is_some_and(|r| r.contains("nodes=two"))
            && numa_topology::machine_topology()
                .node(numa_topology::current_node())
                .is_some();
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    assert!(pid > 0, "fork failed");
    CHILD.store(pid, Ordering::SeqCst);
    assert!(builder.join().unwrap().is_some());
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        !(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGALRM),
        "the child hung waiting for the map's builder (SIGALRM)"
    );
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed: status {status:#x}"
    );
}
