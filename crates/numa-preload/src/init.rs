//! The library's constructor ([`constructor`], run from `.init_array`): the lock
//! choice, the locks' one-time set-up, glibc's functions and the counters'
//! switch, before the program's first lock call where the loader allows.

use crate::mode::{Mode, current};

/// Decides the mode (exiting on a bad `NUMA_LOCK`) and resolves glibc's
/// functions: the library's constructor.
#[cfg_attr(test, allow(dead_code))]
pub(crate) extern "C" fn constructor() {
    let mode = current();
    // Do the locks' one-time set-up here rather than in a first contended
    // acquisition: numa-spin's tunables (read from the environment, which
    // allocates) and the NUMA node map (sysfs reads) behind `current_node`.
    if mode != Mode::Pthread {
        let _ = numa_spin::Config::global();
        let _ = numa_topology::current_node();
        crate::cancel::forget_at_fork();
    }
    crate::real::resolve_all();
    crate::stats::init();
    #[cfg(feature = "test-hooks")]
    crate::hooks::resolve();
}
