//! The latency distribution of a run as an SVG chart: latency by percentile, on a "nines"
//! scale. It draws what it is given and measures nothing.

use std::path::Path;

use hdrhistogram::Histogram;

/// Draws latency against percentile (on a "nines" scale, so that the tail is visible) as
/// an SVG file.
pub(super) fn plot(path: &Path, mode: &str, h: &Histogram<u64>) -> anyhow::Result<()> {
    use plotters::prelude::*;
    // x = -log10(1 - q): 0 at p0, 1 at p90, 2 at p99, 3 at p99.9, ...
    let mut points = Vec::new();
    let mut x = 0.0f64;
    while x <= 5.0 {
        let q = 1.0 - 10f64.powf(-x);
        points.push((x, h.value_at_quantile(q) as f64 / 1000.0));
        x += 0.02;
    }
    let top = (h.max() as f64 / 1000.0).max(0.001) * 1.1;
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("weir bench {mode}: latency by percentile"),
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..5f64, 0f64..top)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (ms)")
        .x_labels(6)
        .x_label_formatter(&|x| match x.round() as i32 {
            0 => "0".into(),
            1 => "90".into(),
            2 => "99".into(),
            3 => "99.9".into(),
            4 => "99.99".into(),
            _ => "99.999".into(),
        })
        .draw()?;
    chart.draw_series(LineSeries::new(points, BLUE.stroke_width(2)))?;
    root.present()?;
    Ok(())
}
