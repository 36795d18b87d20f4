//! SVG plots: a metric against thread count, one line per lock (plotters), with
//! min-max error bars where a point summarises several runs.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use crate::BenchError;
use crate::metrics::Point;

/// Draws `metric(point)` = `(median, min, max)` against threads for every lock among
/// `points` of `workload` into the SVG file `path`: a line through the medians and,
/// where min < max, a vertical min-max error bar. The x axis is logarithmic (thread
/// counts double).
///
/// # Errors
/// [`BenchError::Plot`] when plotters fails (typically the file cannot be written).
pub fn plot_metric(
    path: &Path,
    points: &[Point],
    workload: &str,
    title: &str,
    y_desc: &str,
    metric: impl Fn(&Point) -> (f64, f64, f64),
) -> Result<(), BenchError> {
    let mut lines = Lines::new();
    for p in points.iter().filter(|p| p.workload == workload) {
        let (med, lo, hi) = metric(p);
        lines
            .entry(p.lock.as_str())
            .or_default()
            .push((p.threads as f64, med, lo, hi));
    }
    plot_lines(path, &lines, title, y_desc)
}

/// Lines to plot: per lock (the legend label), its points `(threads, median,
/// min, max)`.
pub type Lines<'a> = BTreeMap<&'a str, Vec<(f64, f64, f64, f64)>>;

/// Draws one line per key of `lines` (a lock, in the legend) through its
/// points `(threads, median, min, max)`, with a vertical min-max error bar
/// where min < max, into the SVG file `path`; the x axis is logarithmic.
///
/// # Errors
/// [`BenchError::Plot`] when plotters fails (typically the file cannot be written).
pub fn plot_lines(
    path: &Path,
    lines: &Lines<'_>,
    title: &str,
    y_desc: &str,
) -> Result<(), BenchError> {
    let err = |e: String| BenchError::Plot {
        path: path.display().to_string(),
        reason: e,
    };
    let mut series: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    let mut bars: BTreeMap<&str, Vec<(f64, f64, f64, f64)>> = BTreeMap::new();
    for (&lock, pts) in lines {
        for &(x, med, lo, hi) in pts {
            series.entry(lock).or_default().push((x, med));
            if lo < hi {
                bars.entry(lock).or_default().push((x, lo, med, hi));
            }
        }
    }
    for s in series.values_mut() {
        s.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let xmax = series
        .values()
        .flatten()
        .map(|p| p.0)
        .fold(2.0_f64, f64::max);
    let ymax = series
        .values()
        .flatten()
        .map(|p| p.1)
        .chain(bars.values().flatten().map(|b| b.3))
        .fold(0.0_f64, f64::max);
    let ymax = if ymax > 0.0 { ymax * 1.15 } else { 1.0 };

    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        // The x axis runs to 3x the most threads, so the legend (upper right,
        // about a fifth of the width) sits right of the last points.
        .build_cartesian_2d((1.0_f64..xmax * 3.0).log_scale(), 0.0..ymax)
        .map_err(|e| err(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("threads (log scale)")
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| err(e.to_string()))?;
    for (i, (lock, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| err(e.to_string()))?
            .label(*lock)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| err(e.to_string()))?;
        chart
            .draw_series(
                bars.get(lock)
                    .into_iter()
                    .flatten()
                    .flat_map(|&(x, lo, _, hi)| error_bar(x, lo, hi))
                    .map(|path| PathElement::new(path, color.stroke_width(1))),
            )
            .map_err(|e| err(e.to_string()))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// A vertical min-max bar at `x` with a cap at each end (caps 4% of `x` wide each
/// side, which is constant on the log x axis), as three paths.
fn error_bar(x: f64, lo: f64, hi: f64) -> [Vec<(f64, f64)>; 3] {
    let (l, r) = (x / 1.04, x * 1.04);
    [
        vec![(x, lo), (x, hi)],
        vec![(l, lo), (r, lo)],
        vec![(l, hi), (r, hi)],
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::tests::sample_point;

    #[test]
    fn writes_an_svg_with_one_line_per_lock() {
        let dir = std::env::temp_dir().join(format!("numa-bench-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.svg");
        let mut pts = Vec::new();
        for (lock, t, v) in [
            ("cna", 1, 1.0),
            ("cna", 4, 2.0),
            ("std", 1, 0.5),
            ("std", 4, 0.7),
        ] {
            let mut p = sample_point();
            p.lock = lock.into();
            p.threads = t;
            p.throughput_ops_per_us = v;
            pts.push(p);
        }
        // One point with a spread: one error bar.
        let (lo, hi) = (0.4, 0.9);
        plot_metric(&path, &pts, "kv", "kv throughput", "ops/us", |p| {
            let v = p.throughput_ops_per_us;
            if p.lock == "std" && p.threads == 4 {
                (v, lo, hi)
            } else {
                (v, v, v)
            }
        })
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..50.min(svg.len())]);
        assert!(svg.contains(">\ncna\n<") && svg.contains(">\nstd\n<"));
        // 2 series lines + 2 legend marks are drawn 2 px wide (axes and ticks 1 px).
        let wide = svg
            .lines()
            .filter(|l| l.starts_with("<polyline") && l.contains("stroke-width=\"2\""))
            .count();
        assert_eq!(wide, 4);
        assert_eq!(svg.matches("<circle").count(), 4);
        // The error bar: a 1-px vertical line plus two caps.
        let thin = svg
            .lines()
            .filter(|l| l.starts_with("<polyline") && l.contains("stroke-width=\"1\""))
            .count();
        let mut no_bars = pts.clone();
        no_bars.iter_mut().for_each(|p| p.lock = "cna".into());
        let path2 = dir.join("t2.svg");
        plot_metric(&path2, &pts, "kv", "kv throughput", "ops/us", |p| {
            let v = p.throughput_ops_per_us;
            (v, v, v)
        })
        .unwrap();
        let svg2 = std::fs::read_to_string(&path2).unwrap();
        let thin2 = svg2
            .lines()
            .filter(|l| l.starts_with("<polyline") && l.contains("stroke-width=\"1\""))
            .count();
        assert!(
            thin > thin2,
            "an error bar adds thin lines: {thin} vs {thin2}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
