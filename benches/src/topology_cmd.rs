//! `numa-bench topology`: the machine's layout as a table, or as one JSON
//! object (`--json`) with these keys (the format of the repository's hwloc
//! test-data `expected.json`):
//!
//! | key | value |
//! | --- | --- |
//! | `packages`, `cores`, `pus` | counts of packages, cores and PUs (logical CPUs) |
//! | `numa_nodes`, `cpuless_numa_nodes`, `numa_nodes_with_empty_cpuset` | NUMA node counts |
//! | `numa_node_os_indexes` | the nodes' OS indexes, ascending |
//! | `node_pus` | node OS index -> the PUs mapped to it (each PU's most local node) |
//! | `node_subtypes` | node OS index -> hwloc subtype (e.g. `"MCDRAM"`), only for nodes that have one |
//! | `pu_to_node` | PU OS index -> node OS index |
//! | `distances` | the node distance matrix (ACPI SLIT units, 10 = local; rows and columns by node OS index) |
//! | `source` | where the topology came from |

use numa_topology::{Topology, TopologySource, VirtualLayout};
use serde_json::{Map, Value, json};
use std::error::Error;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Arguments of `numa-bench topology`. Without a source option it shows the
/// running machine (hwloc with the `hwloc` feature, else Linux sysfs).
#[derive(clap::Args, Debug)]
pub struct TopologyArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Read an hwloc XML export instead of the running machine.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["synthetic", "virtual_layout"])]
    pub xml: Option<PathBuf>,
    /// With --xml: keep objects outside the exporter's allowed cpuset
    /// (hwloc's INCLUDE_DISALLOWED flag): the whole machine.
    #[arg(long, requires = "xml")]
    pub include_disallowed: bool,
    /// Use an hwloc synthetic description, e.g. "pack:2 numa:2 core:4 pu:2".
    #[arg(long, value_name = "STR", conflicts_with = "virtual_layout")]
    pub synthetic: Option<String>,
    /// Show a virtual layout over this machine's CPUs (NUMA_TOPOLOGY grammar:
    /// "nodes=4", "0-3;4-7", ...).
    #[arg(long = "virtual", value_name = "SPEC")]
    pub virtual_layout: Option<VirtualLayout>,
}

/// Loads the selected topology and prints it.
///
/// # Errors
/// The [`numa_topology::TopologyError`] of the source: bad XML, unknown
/// synthetic description, unreadable sysfs.
pub fn run(args: &TopologyArgs) -> Result<(), Box<dyn Error>> {
    let topology = load(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&to_json(&topology))?);
    } else {
        print!("{}", table(&topology, is_running_machine(args)));
    }
    Ok(())
}

fn is_running_machine(args: &TopologyArgs) -> bool {
    args.xml.is_none() && args.synthetic.is_none() && args.virtual_layout.is_none()
}

fn load(args: &TopologyArgs) -> Result<Topology, Box<dyn Error>> {
    #[cfg(not(feature = "hwloc"))]
    if args.xml.is_some() || args.synthetic.is_some() {
        return Err(
            "--xml and --synthetic read the topology through hwloc: this numa-bench \
            was built without its `hwloc` feature. Rebuild with `cargo run --release -p \
            numa-bench --features hwloc -- topology ...` (needs libhwloc-dev, libudev-dev \
            and pkg-config)"
                .into(),
        );
    }
    if let Some(path) = &args.xml {
        #[cfg(feature = "hwloc")]
        if args.include_disallowed {
            return Ok(Topology::from_xml_file_including_disallowed(path)?);
        }
        // Without hwloc `from_xml_file` fails with "needs the hwloc feature".
        return Ok(Topology::from_xml_file(path)?);
    }
    if let Some(description) = &args.synthetic {
        return Ok(Topology::from_synthetic(description)?);
    }
    if let Some(layout) = &args.virtual_layout {
        let machine = numa_topology::machine_topology();
        return Ok(Topology::from_virtual(layout, machine.pus())?);
    }
    Ok(Topology::system()?)
}

/// The JSON object (keys and meanings in the [module docs](self)).
pub fn to_json(t: &Topology) -> Value {
    let mut node_pus = Map::new();
    let mut subtypes = Map::new();
    for node in t.numa_nodes() {
        node_pus.insert(node.os_index().to_string(), json!(node.cpus()));
        if let Some(s) = node.subtype() {
            subtypes.insert(node.os_index().to_string(), json!(s));
        }
    }
    let mut pu_to_node = Map::new();
    for (pu, node) in t.pu_node_pairs() {
        pu_to_node.insert(pu.to_string(), json!(node));
    }
    json!({
        "source": source_name(t.source()),
        "packages": t.packages(),
        "numa_nodes": t.numa_node_count(),
        "cpuless_numa_nodes": t.cpuless_numa_nodes(),
        "numa_nodes_with_empty_cpuset": t.numa_nodes_with_empty_cpuset(),
        "cores": t.cores(),
        "pus": t.pu_count(),
        "numa_node_os_indexes": t.numa_node_os_indexes(),
        "node_pus": node_pus,
        "node_subtypes": subtypes,
        "pu_to_node": pu_to_node,
        "distances": t.distances(),
    })
}

fn source_name(source: &TopologySource) -> String {
    match source {
        TopologySource::Hwloc => "running machine (hwloc)".into(),
        TopologySource::Sysfs => "running machine (Linux sysfs)".into(),
        TopologySource::Xml(Some(p)) => format!("hwloc XML {}", p.display()),
        TopologySource::Xml(None) => "hwloc XML string".into(),
        TopologySource::Synthetic(s) => format!("hwloc synthetic {s:?}"),
        TopologySource::Virtual(l) => format!("virtual layout {l}"),
        TopologySource::SingleNodeFallback => "one-node fallback".into(),
        _ => format!("{source:?}"),
    }
}

fn gib(bytes: Option<u64>) -> String {
    bytes.map_or_else(
        || "-".into(),
        |b| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
    )
}

/// The readable table.
fn table(t: &Topology, running: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Topology: {}", source_name(t.source()));
    let _ = writeln!(
        out,
        "  {} packages, {} cores, {} PUs, {} NUMA nodes ({} CPU-less)",
        t.packages(),
        t.cores(),
        t.pu_count(),
        t.numa_node_count(),
        t.cpuless_numa_nodes()
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  {:>5}  {:<10}  {:>10}  {:<24}  cpuset (locality)",
        "node", "subtype", "memory", "PUs mapped to it"
    );
    for node in t.numa_nodes() {
        let mapped = numa_topology::format_cpu_list(&t.pus_mapped_to(node.os_index()));
        let _ = writeln!(
            out,
            "  {:>5}  {:<10}  {:>10}  {:<24}  {}",
            node.os_index(),
            node.subtype().unwrap_or("-"),
            gib(node.memory_bytes()),
            if mapped.is_empty() {
                "(none)".into()
            } else {
                mapped
            },
            if node.cpus().is_empty() {
                "(empty)".into()
            } else {
                numa_topology::format_cpu_list(node.cpus())
            }
        );
    }
    let orphans: Vec<usize> = t
        .pu_node_pairs()
        .filter(|(_, n)| n.is_none())
        .map(|(pu, _)| pu)
        .collect();
    if !orphans.is_empty() {
        let _ = writeln!(
            out,
            "  PUs in no NUMA node: {}",
            numa_topology::format_cpu_list(&orphans)
        );
    }
    let _ = writeln!(out);
    match t.distances() {
        None => {
            let _ = writeln!(out, "  distances: none in this source");
        }
        Some(rows) => {
            let _ = writeln!(
                out,
                "  distances (NUMALatency, ACPI SLIT units, 10 = local; rows/columns by node OS index):"
            );
            let ids = t.numa_node_os_indexes();
            let _ = write!(out, "  {:>5}", "");
            for id in &ids {
                let _ = write!(out, " {id:>4}");
            }
            let _ = writeln!(out);
            for (id, row) in ids.iter().zip(rows) {
                let _ = write!(out, "  {id:>5}");
                for d in row {
                    let _ = write!(out, " {d:>4}");
                }
                let _ = writeln!(out);
            }
        }
    }
    if running {
        let (source, from_tsc_aux) = numa_topology::current_node_method();
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "  this thread: CPU {}, node {} (node from {})",
            numa_topology::current_cpu(),
            numa_topology::current_node(),
            if from_tsc_aux {
                "TSC_AUX via RDPID".to_owned()
            } else {
                format!("{source:?} + CPU-to-node table")
            }
        );
        if let Some(reason) = numa_topology::fallback_reason() {
            let _ = writeln!(out, "  note: {reason}");
        }
        if let Ok(Some(layout)) = VirtualLayout::from_env() {
            let _ = writeln!(
                out,
                "  NUMA_TOPOLOGY={layout}: current_node() reports virtual nodes"
            );
        }
    }
    out
}
