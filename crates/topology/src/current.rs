//! `current_node()` / `current_cpu()`: the fast "where am I" lookups, and the
//! process-wide node map behind them.
//!
//! The map is built on first use: from `NUMA_TOPOLOGY` (a virtual layout)
//! if set, else from the running machine ([`Topology::system`]). It is
//! replaced by [`set_virtual_layout`]. Maps are leaked on replacement so the
//! fast path can read them without reference counting; each is a few KB and
//! replacements are rare (tests, benchmark set-up).
//!
//! Nothing here waits for another thread (no `OnceLock`): a thread that
//! finds a value not yet built builds it itself, and the first one published
//! wins ([`publish_once`]). A `OnceLock` being initialized by another thread
//! when the process forks stays "being initialized" for ever in the child,
//! whose first lookup (a lock's slow path) would then hang.

use crate::cpu_source::CpuSource;
use crate::error::TopologyError;
use crate::topology::Topology;
use crate::virtual_layout::VirtualLayout;
use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU32, Ordering};

thread_local! {
    static THREAD_NODE: Cell<Option<usize>> = const { Cell::new(None) };
}

/// What the fast path needs, immutable once published.
struct NodeMap {
    topology: Topology,
    cpu_source: CpuSource,
    /// `TSC_AUX >> 12` is the node (checked against the topology at build).
    node_from_tsc_aux: bool,
    /// Node of each CPU (OS index), for CPUs the topology knows.
    table: Box<[u32]>,
    /// Node for CPUs outside the table or in no node.
    default_node: u32,
}

static MAP: AtomicPtr<NodeMap> = AtomicPtr::new(ptr::null_mut());

/// The machine's topology and, when it could not be read, why (null until
/// read; see [`publish_once`]).
static MACHINE: AtomicPtr<(Topology, Option<String>)> = AtomicPtr::new(ptr::null_mut());

/// The value in `slot`, built with `build` and published if there is none
/// yet. Never waits: racing callers each build one, the first published is
/// kept, the others are dropped. Published values are never freed.
fn publish_once<T>(slot: &'static AtomicPtr<T>, build: impl FnOnce() -> T) -> &'static T {
    // Acquire: pairs with the publishing CAS's Release (in its AcqRel), so
    // the value's contents are visible.
    let seen = slot.load(Ordering::Acquire);
    if !seen.is_null() {
        // SAFETY: non-null pointers in `slot` come from `Box::into_raw`
        // below and are never freed.
        return unsafe { &*seen };
    }
    let new = Box::into_raw(Box::new(build()));
    // AcqRel: Release publishes our value; Acquire (also on failure) sees
    // the contents of a value published first.
    match slot.compare_exchange(ptr::null_mut(), new, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: `new` came from `Box::into_raw` and is now published; it
        // is never freed.
        Ok(_) => unsafe { &*new },
        Err(existing) => {
            // SAFETY: `new` came from `Box::into_raw` above and was never
            // published, so this is its only owner.
            drop(unsafe { Box::from_raw(new) });
            // SAFETY: as for `seen` above.
            unsafe { &*existing }
        }
    }
}

impl NodeMap {
    fn new(topology: Topology, machine: bool) -> Self {
        let default_node = topology
            .numa_nodes()
            .first()
            .map_or(0, |n| n.os_index() as u32);
        let len = topology.pus().last().map_or(0, |&c| c + 1);
        let mut table = vec![default_node; len].into_boxed_slice();
        for (pu, node) in topology.pu_node_pairs() {
            if let Some(node) = node {
                table[pu] = node as u32;
            }
        }
        let cpu_source = pick_cpu_source(&topology);
        let node_from_tsc_aux =
            machine && cpu_source == CpuSource::Rdpid && tsc_aux_node_matches(&table);
        NodeMap {
            topology,
            cpu_source,
            node_from_tsc_aux,
            table,
            default_node,
        }
    }

    #[inline]
    fn cpu(&self) -> usize {
        // SAFETY: `cpu_source` came from `pick_cpu_source`, which only
        // returns available sources.
        unsafe { self.cpu_source.read_cpu_unchecked() }.unwrap_or(0)
    }

    #[inline]
    fn node(&self) -> usize {
        if self.node_from_tsc_aux {
            // SAFETY: `node_from_tsc_aux` is only set after
            // `CpuSource::Rdpid.is_available()` returned true.
            return (unsafe { crate::cpu_source::rdpid() } >> 12) as usize;
        }
        let cpu = self.cpu();
        self.table.get(cpu).copied().unwrap_or(self.default_node) as usize
    }
}

/// The CPU source for a topology. Order chosen by measurement (see
/// [`CpuSource`]): RDPID, then `sched_getcpu`, then RDTSCP. The two
/// `TSC_AUX` readers are used only when `TSC_AUX` holds Linux's
/// `(node << 12) | cpu` (see [`tsc_aux_sample`]) and every PU fits in its 12
/// CPU bits.
fn pick_cpu_source(topology: &Topology) -> CpuSource {
    let aux_ok = topology.pus().last().is_none_or(|&c| c < 4096) && tsc_aux_is_linux();
    if aux_ok && CpuSource::Rdpid.is_available() {
        CpuSource::Rdpid
    } else if CpuSource::SchedGetcpu.is_available() {
        CpuSource::SchedGetcpu
    } else if aux_ok && CpuSource::Rdtscp.is_available() {
        CpuSource::Rdtscp
    } else {
        CpuSource::Unsupported
    }
}

/// One `(cpu, TSC_AUX)` pair read without a migration in between: the CPU
/// from `sched_getcpu`, `TSC_AUX` with RDPID (or RDTSCP). `None` if either
/// is unavailable or the thread kept migrating (100 tries).
fn tsc_aux_sample() -> Option<(usize, u32)> {
    let reader = [CpuSource::Rdpid, CpuSource::Rdtscp]
        .into_iter()
        .find(|s| s.is_available())?;
    for _ in 0..100 {
        let before = CpuSource::SchedGetcpu.read_cpu()?;
        let aux = reader.read_tsc_aux()?;
        if CpuSource::SchedGetcpu.read_cpu()? == before {
            return Some((before, aux));
        }
    }
    None
}

/// Whether the low 12 bits of `TSC_AUX` are the CPU number, as Linux sets
/// them (`setup_getcpu()`). A hypervisor or OS that puts something else
/// there fails this, and `sched_getcpu` is used instead. Checked once.
fn tsc_aux_is_linux() -> bool {
    /// 0: not checked yet, 1: no, 2: yes. Racing first callers each check.
    static CHECK: AtomicU8 = AtomicU8::new(0);
    // Relaxed: the value is the whole message.
    match CHECK.load(Ordering::Relaxed) {
        0 => {
            let linux = tsc_aux_sample().is_some_and(|(cpu, aux)| (aux & 0xfff) as usize == cpu);
            CHECK.store(1 + u8::from(linux), Ordering::Relaxed);
            linux
        }
        v => v == 2,
    }
}

/// Whether `TSC_AUX >> 12` is the node of the current CPU in `table` (the
/// real topology), so RDPID alone gives the node.
fn tsc_aux_node_matches(table: &[u32]) -> bool {
    CpuSource::Rdpid.is_available()
        && tsc_aux_is_linux()
        && tsc_aux_sample().is_some_and(|(cpu, aux)| table.get(cpu) == Some(&(aux >> 12)))
}

fn machine() -> &'static (Topology, Option<String>) {
    publish_once(&MACHINE, || match Topology::system() {
        Ok(t) => (t, None),
        Err(e) => {
            let cpus = crate::sysfs::online_cpus_or_count();
            (
                Topology::single_node(cpus),
                Some(format!("cannot read the NUMA topology ({e})")),
            )
        }
    })
}

fn warn_once(message: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    // Relaxed: only elects the one caller that logs.
    if !WARNED.swap(true, Ordering::Relaxed) {
        log::warn!(target: "numa_topology", "{message}");
    }
}

/// Why the map is a fallback (see [`fallback_reason`]); null if it is not.
static FALLBACK: AtomicPtr<String> = AtomicPtr::new(ptr::null_mut());

/// Records `msg` as the fallback reason, unless one is recorded.
fn set_fallback(msg: String) {
    let _ = publish_once(&FALLBACK, || msg);
}

#[cold]
#[inline(never)]
fn init_map() -> &'static NodeMap {
    let (machine_topology, machine_problem) = machine();
    let map = match VirtualLayout::from_env() {
        Ok(Some(layout)) => virtual_map(&layout, machine_topology),
        Ok(None) => None,
        Err(e) => {
            let msg = format!("{e}; ignoring it");
            warn_once(&msg);
            set_fallback(msg);
            None
        }
    };
    let map = map.unwrap_or_else(|| {
        if let Some(problem) = machine_problem {
            let msg = format!("{problem}; working as if the machine had one NUMA node");
            warn_once(&msg);
            set_fallback(msg);
        }
        NodeMap::new(machine_topology.clone(), machine_problem.is_none())
    });
    publish_once(&MAP, || map)
}

fn virtual_map(layout: &VirtualLayout, machine: &Topology) -> Option<NodeMap> {
    Topology::from_virtual(layout, machine.pus())
        .ok()
        .map(|t| NodeMap::new(t, false))
}

/// While one thread builds the first map (see [`try_map`]): the PID of its
/// process, else 0. A PID, not a flag: a fork during the build leaves the
/// claim in the child, where the building thread does not exist, and the
/// child's first caller sees another process's claim and builds the map
/// itself (a flag left set would make every `map()` caller of the child
/// wait for ever).
static BUILDING: AtomicU32 = AtomicU32::new(0);

/// The map, building it if no thread is doing so; `None` while another
/// thread, or this one further up its stack, builds it.
///
/// Building reads files and allocates. Locks call [`current_node`] on their
/// slow paths, and a lock may be the one inside the process's
/// `#[global_allocator]`: the allocation made while building then re-enters
/// the lock, and through it [`current_node`], on the same thread. So callers
/// never wait for the build, they take the fallback answer instead.
#[inline]
fn try_map() -> Option<&'static NodeMap> {
    let p = MAP.load(Ordering::Acquire);
    if p.is_null() {
        return build_map_once();
    }
    // SAFETY: non-null pointers in MAP come from Box::into_raw (published
    // with Release, read with Acquire) and are never freed.
    Some(unsafe { &*p })
}

#[cold]
#[inline(never)]
fn build_map_once() -> Option<&'static NodeMap> {
    let me = process_id();
    let seen = BUILDING.load(Ordering::Relaxed);
    // Acquire: if the builder finished meanwhile, its MAP store is visible
    // to the re-check in `init_map`'s CAS (which is AcqRel anyway).
    if seen == me
        || BUILDING
            .compare_exchange(seen, me, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return None;
    }
    let map = init_map();
    BUILDING.store(0, Ordering::Release);
    Some(map)
}

/// The calling process's PID (`getpid`; 1 where there is no fork, so that
/// a claim is never 0).
fn process_id() -> u32 {
    #[cfg(unix)]
    {
        // SAFETY: `getpid` has no preconditions and cannot fail.
        unsafe { libc::getpid() }.cast_unsigned()
    }
    #[cfg(not(unix))]
    {
        1
    }
}

/// The map, waiting (yielding) while another thread builds it.
fn map() -> &'static NodeMap {
    loop {
        if let Some(m) = try_map() {
            return m;
        }
        std::thread::yield_now();
    }
}

/// The OS index of the NUMA node the calling thread runs on.
///
/// In order: the node assigned with [`set_current_thread_node`]; with a
/// virtual layout active (`NUMA_TOPOLOGY` or [`set_virtual_layout`]), the
/// virtual node of the current CPU; else the real node of the current CPU
/// (x86-64 Linux: `TSC_AUX >> 12` read with RDPID; elsewhere `sched_getcpu`
/// and a CPU-to-node table). A CPU the topology does not map gives the
/// lowest node OS index. If the topology cannot be read, the answer is 0
/// and a warning is logged once through the `log` facade (see [`fallback_reason`]).
///
/// The thread may migrate right after the call, so the answer can be
/// stale: locks use it as a hint, never for correctness. Cost on the 2-core
/// KVM development machine (`cargo bench -p numa-bench --bench
/// current_node`, median under load average 8.9): 3.6 ns (RDPID), 4.3 ns
/// with a virtual layout (CPU + table), 0.55 ns with a thread-assigned node.
/// Never panics, never blocks: while the node map is being built on first
/// use (by another thread, or re-entrantly by this one, e.g. from a lock
/// inside a `#[global_allocator]`), the answer is 0.
#[inline]
pub fn current_node() -> usize {
    if let Some(node) = THREAD_NODE.with(Cell::get) {
        return node;
    }
    try_map().map_or(0, NodeMap::node)
}

/// The OS index of the CPU (PU) the calling thread runs on, or 0 when the
/// platform cannot tell. Same sources and caveats as [`current_node`].
#[inline]
pub fn current_cpu() -> usize {
    try_map().map_or(0, NodeMap::cpu)
}

/// Assigns the calling thread to a (virtual) node: [`current_node`] returns
/// `node` on this thread until cleared with `None`. Meant for tests and
/// benchmarks; it does not move the thread (see
/// [`bind_current_thread_to_node`](crate::bind_current_thread_to_node)).
pub fn set_current_thread_node(node: Option<usize>) {
    THREAD_NODE.with(|n| n.set(node));
}

/// The node assigned to the calling thread with [`set_current_thread_node`].
pub fn current_thread_node() -> Option<usize> {
    THREAD_NODE.with(Cell::get)
}

/// Activates a virtual layout for the whole process (`Some`), or goes back
/// to the running machine's topology (`None`). Overrides `NUMA_TOPOLOGY`.
/// Threads see the change at their next [`current_node`] call.
///
/// # Errors
/// [`TopologyError::Inconsistent`] if the layout cannot be applied to the
/// machine's CPUs (not expected for layouts that parsed).
pub fn set_virtual_layout(layout: Option<&VirtualLayout>) -> Result<(), TopologyError> {
    let (machine_topology, machine_problem) = machine();
    let map = match layout {
        Some(l) => NodeMap::new(Topology::from_virtual(l, machine_topology.pus())?, false),
        None => NodeMap::new(machine_topology.clone(), machine_problem.is_none()),
    };
    // The old map is leaked on purpose: other threads may still read it.
    MAP.store(Box::into_raw(Box::new(map)), Ordering::Release);
    Ok(())
}

/// The topology [`current_node`] answers from: the virtual one when a
/// layout is active, else the machine's (or the one-node fallback).
pub fn active_topology() -> &'static Topology {
    &map().topology
}

/// The running machine's topology as [`current_node`] sees it, read once
/// and cached (the one-node fallback if it could not be read).
pub fn machine_topology() -> &'static Topology {
    &machine().0
}

/// Why `current_node` works from a one-node fallback, or ignores a
/// malformed `NUMA_TOPOLOGY`: the message that was logged once (`log::warn!`, target
/// `numa_topology`).
/// `None` when the topology was read normally.
pub fn fallback_reason() -> Option<&'static str> {
    let _ = map();
    // Acquire: pairs with `publish_once`'s Release.
    let p = FALLBACK.load(Ordering::Acquire);
    // SAFETY: non-null pointers in FALLBACK come from `publish_once`, which
    // never frees them.
    (!p.is_null()).then(|| unsafe { &*p }.as_str())
}

/// The CPU source [`current_cpu`] uses, and whether [`current_node`] reads
/// the node straight from `TSC_AUX` (otherwise: CPU then table).
pub fn current_node_method() -> (CpuSource, bool) {
    let m = map();
    (m.cpu_source, m.node_from_tsc_aux)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_node_overrides_and_clears() {
        std::thread::spawn(|| {
            set_current_thread_node(Some(7));
            assert_eq!(current_node(), 7);
            assert_eq!(current_thread_node(), Some(7));
            set_current_thread_node(None);
            assert_eq!(current_thread_node(), None);
            let n = current_node();
            assert!(
                active_topology().node(n).is_some(),
                "node {n} not in the active topology"
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn single_node_map_answers_node_zero() {
        let map = NodeMap::new(Topology::single_node(vec![0, 1]), false);
        assert!(!map.node_from_tsc_aux);
        for _ in 0..100 {
            assert_eq!(map.node(), 0);
        }
    }

    #[test]
    fn table_maps_cpus_and_defaults_to_lowest_node() {
        let layout: VirtualLayout = ";;0".parse().unwrap();
        // Virtual node 2 holds CPU 0; nodes 0 and 1 are CPU-less.
        let t = Topology::from_virtual(&layout, &[0]).unwrap();
        let map = NodeMap::new(t, false);
        assert_eq!(&*map.table, &[2]);
        assert_eq!(map.default_node, 0);
        if tsc_aux_is_linux() || CpuSource::SchedGetcpu.is_available() {
            // CPU 0 maps to 2, any other CPU falls back to 0.
            for _ in 0..100 {
                let cpu = map.cpu();
                let node = map.node();
                if map.cpu() == cpu {
                    assert_eq!(node, if cpu == 0 { 2 } else { 0 }, "CPU {cpu}");
                }
            }
        }
    }

    #[test]
    fn tsc_aux_cpu_bits_agree_with_sched_getcpu_when_used() {
        let map = NodeMap::new(machine_topology().clone(), true);
        if map.cpu_source == CpuSource::Rdpid {
            let (cpu, aux) = tsc_aux_sample().expect("a sample");
            assert_eq!((aux & 0xfff) as usize, cpu);
        }
        if map.node_from_tsc_aux {
            assert_eq!(map.cpu_source, CpuSource::Rdpid);
        }
    }

    #[test]
    fn thread_node_is_per_thread() {
        set_current_thread_node(Some(3));
        let other = std::thread::spawn(current_thread_node).join().unwrap();
        assert_eq!(other, None);
        assert_eq!(current_node(), 3);
        set_current_thread_node(None);
    }
}
