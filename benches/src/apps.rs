//! Plots of `scripts/apps.sh` results (real programs through `numa-preload`):
//! per program, each lock's throughput as a ratio to glibc's (`pthread`) against
//! the thread count, the shape of the CNA paper's user-space figures (Dice and
//! Kogan, EuroSys 2019, section 7).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::BenchError;
use crate::plot::{Lines, plot_lines};

/// Reads `results.json` written by `scripts/apps.py` and draws
/// `<program>_ratio.svg` beside it for every program in it: one line per lock
/// through the median ratio to `pthread`, with the min-max of the per-repeat
/// ratios as error bars. Returns the files written.
///
/// # Errors
/// [`BenchError::MissingResults`] if the file cannot be read,
/// [`BenchError::BadResults`] if it is not an apps result file (no `results`
/// array of objects with `program`, `lock`, `threads`, `ratio_to_pthread`,
/// `ratio_min`, `ratio_max`), [`BenchError::Plot`] if a plot cannot be drawn.
pub fn plot_apps(results_json: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let path = results_json.display().to_string();
    let text =
        std::fs::read_to_string(results_json).map_err(|source| BenchError::MissingResults {
            path: path.clone(),
            source,
        })?;
    let bad = |reason: String| BenchError::BadResults {
        path: path.clone(),
        reason,
    };
    let doc: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let rows = doc["results"]
        .as_array()
        .ok_or_else(|| bad("no `results` array".into()))?;
    // program -> lock -> points (threads, median, min, max)
    let mut programs: BTreeMap<&str, Lines<'_>> = BTreeMap::new();
    for (i, r) in rows.iter().enumerate() {
        let field = |k: &str| {
            r.get(k)
                .ok_or_else(|| bad(format!("result {i} has no `{k}`")))
        };
        let text = |k: &str| {
            field(k)?
                .as_str()
                .ok_or_else(|| bad(format!("result {i}: `{k}` is not a string")))
        };
        let num = |k: &str| {
            field(k)?
                .as_f64()
                .ok_or_else(|| bad(format!("result {i}: `{k}` is not a number")))
        };
        // A point whose runs all failed has no ratio (null): leave it out.
        if field("ratio_to_pthread")?.is_null() {
            continue;
        }
        programs
            .entry(text("program")?)
            .or_default()
            .entry(text("lock")?)
            .or_default()
            .push((
                num("threads")?,
                num("ratio_to_pthread")?,
                num("ratio_min")?,
                num("ratio_max")?,
            ));
    }
    let machine = &doc["machine"];
    let nodes = machine["numa_nodes"].as_u64().map_or(String::new(), |n| {
        format!(", {n} NUMA node{}", if n == 1 { "" } else { "s" })
    });
    let cpus = machine["cpus"]
        .as_u64()
        .map_or(String::new(), |n| format!(", {n} CPUs"));
    let dir = results_json.parent().unwrap_or(Path::new("."));
    let mut written = Vec::new();
    for (program, lines) in &programs {
        let file = dir.join(format!("{program}_ratio.svg"));
        let title = format!("{program}: throughput / glibc (pthread){cpus}{nodes}");
        plot_lines(&file, lines, &title, "ratio to pthread (median, min-max)")?;
        written.push(file);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("numa-bench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn draws_one_svg_per_program_with_a_line_per_lock() {
        let dir = temp_dir("apps-plot");
        let json = dir.join("results.json");
        let row = |prog: &str, lock: &str, t: u32, r: Option<f64>| {
            serde_json::json!({"program": prog, "lock": lock, "threads": t,
                "ratio_to_pthread": r, "ratio_min": r.map(|r| r * 0.9),
                "ratio_max": r.map(|r| r * 1.1)})
        };
        let doc = serde_json::json!({
            "machine": {"cpus": 2, "numa_nodes": 1},
            "results": [
                row("sysbench", "pthread", 1, Some(1.0)),
                row("sysbench", "cna", 1, Some(1.5)),
                row("sysbench", "cna", 2, Some(1.7)),
                row("leveldb", "cst", 1, Some(0.9)),
                row("leveldb", "hq", 1, None),
            ]
        });
        std::fs::write(&json, doc.to_string()).unwrap();
        let files = plot_apps(&json).unwrap();
        assert_eq!(
            files,
            [
                dir.join("leveldb_ratio.svg"),
                dir.join("sysbench_ratio.svg")
            ]
        );
        // plotters writes each legend label as a text element's only line.
        let labels = |file: &str| -> Vec<String> {
            let svg = std::fs::read_to_string(dir.join(file)).unwrap();
            svg.lines().map(|l| l.trim().to_string()).collect()
        };
        let sysbench = labels("sysbench_ratio.svg");
        for want in [
            "cna",
            "pthread",
            "sysbench: throughput / glibc (pthread), 2 CPUs, 1 NUMA node",
        ] {
            assert!(
                sysbench.iter().any(|l| l == want),
                "no {want:?} in the plot"
            );
        }
        let leveldb = labels("leveldb_ratio.svg");
        assert!(leveldb.iter().any(|l| l == "cst"));
        assert!(
            !leveldb.iter().any(|l| l == "hq"),
            "a point without a ratio was drawn"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_the_file_and_field_of_a_malformed_result() {
        let dir = temp_dir("apps-plot-bad");
        let json = dir.join("results.json");
        std::fs::write(&json, r#"{"results": [{"program": "x", "lock": "cna"}]}"#).unwrap();
        let e = plot_apps(&json).unwrap_err().to_string();
        assert!(
            e.contains("results.json") && e.contains("ratio_to_pthread"),
            "{e}"
        );
        std::fs::write(&json, "not json").unwrap();
        assert!(matches!(
            plot_apps(&json),
            Err(BenchError::BadResults { .. })
        ));
        let missing = dir.join("none.json");
        assert!(matches!(
            plot_apps(&missing),
            Err(BenchError::MissingResults { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
