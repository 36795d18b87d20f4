//! Binding the calling thread to a NUMA node's CPUs.

use crate::error::TopologyError;

/// Binds the calling thread to the CPUs of NUMA node `node` (an OS index in
/// [`active_topology`](crate::active_topology): the virtual node when a
/// virtual layout is active). Uses hwloc's `hwloc_set_cpubind(THREAD)` with
/// the `hwloc` feature, `sched_setaffinity(2)` without. For benchmarks on
/// real NUMA machines; on a one-node machine it changes nothing visible.
///
/// # Errors
/// [`TopologyError::UnknownNode`] if there is no such node,
/// [`TopologyError::CpulessNode`] if it has no CPU,
/// [`TopologyError::Bind`] if the OS refuses (e.g. the CPUs are outside the
/// process's cpuset), [`TopologyError::Unsupported`] where neither hwloc nor
/// `sched_setaffinity` is available.
pub fn bind_current_thread_to_node(node: usize) -> Result<(), TopologyError> {
    let topology = crate::active_topology();
    let cpus = topology
        .node_pus(node)
        .ok_or(TopologyError::UnknownNode { node })?;
    if cpus.is_empty() {
        return Err(TopologyError::CpulessNode { node });
    }
    bind_to_cpus(node, cpus)
}

#[cfg(feature = "hwloc")]
fn bind_to_cpus(node: usize, cpus: &[usize]) -> Result<(), TopologyError> {
    use hwlocality::bitmap::BitmapIndex;
    use hwlocality::cpu::binding::CpuBindingFlags;
    use hwlocality::cpu::cpuset::CpuSet;
    use std::sync::OnceLock;

    static HW: OnceLock<Option<hwlocality::Topology>> = OnceLock::new();
    let Some(hw) = HW.get_or_init(|| hwlocality::Topology::new().ok()) else {
        return Err(TopologyError::Bind {
            node,
            message: "hwloc could not load the machine's topology".into(),
        });
    };
    let mut set = CpuSet::new();
    for &cpu in cpus {
        let idx = BitmapIndex::try_from(cpu).map_err(|_| TopologyError::Bind {
            node,
            message: format!("CPU {cpu} is beyond hwloc's bitmap range"),
        })?;
        set.set(idx);
    }
    hw.bind_cpu(&set, CpuBindingFlags::THREAD)
        .map_err(|e| TopologyError::Bind {
            node,
            message: e.to_string(),
        })
}

#[cfg(all(
    not(feature = "hwloc"),
    any(target_os = "linux", target_os = "android")
))]
fn bind_to_cpus(node: usize, cpus: &[usize]) -> Result<(), TopologyError> {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let capacity = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for &cpu in cpus {
        if cpu >= capacity {
            return Err(TopologyError::Bind {
                node,
                message: format!("CPU {cpu} does not fit in cpu_set_t ({capacity} CPUs)"),
            });
        }
        // SAFETY: `cpu` < the bit capacity of `set`, checked just above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY:
    // - pid 0 means the calling thread;
    // - `set` is a valid, initialised cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(TopologyError::Bind {
            node,
            message: std::io::Error::last_os_error().to_string(),
        })
    }
}

#[cfg(all(
    not(feature = "hwloc"),
    not(any(target_os = "linux", target_os = "android"))
))]
fn bind_to_cpus(_node: usize, _cpus: &[usize]) -> Result<(), TopologyError> {
    Err(TopologyError::Unsupported("binding a thread without hwloc"))
}
