//! SVG figures: latency CDFs (log-scale x) and sweep curves, drawn with `plotters`'
//! SVG backend, which writes text as SVG `<text>` and needs no font files.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::report::Scenario;

const SIZE: (u32, u32) = (900, 560);

/// Reads one latency (ns) out of a scenario.
type Pick = fn(&Scenario) -> u64;

fn palette(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    COLORS[i % COLORS.len()]
}

/// One line per scenario: the fraction of calls (y) completed within a latency (x, µs,
/// log scale).
pub fn cdf(scenarios: &[Scenario], title: &str, path: &Path) -> Result<()> {
    let drawn: Vec<&Scenario> = scenarios.iter().filter(|s| !s.cdf.is_empty()).collect();
    anyhow::ensure!(!drawn.is_empty(), "no latencies to plot");
    let lo = drawn.iter().map(|s| s.cdf[0].0).min().unwrap_or(1).max(1) as f64 / 1e3;
    let hi = drawn
        .iter()
        .map(|s| s.cdf[s.cdf.len() - 1].0)
        .max()
        .unwrap_or(1) as f64
        / 1e3;
    let (x_lo, x_hi) = (decade_below(lo), decade_above(hi.max(lo * 10.0)));
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((x_lo..x_hi).log_scale(), 0.0..1.0)
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("latency (µs, log scale)")
        .y_desc("fraction of calls")
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for (i, s) in drawn.iter().enumerate() {
        let color = palette(i);
        chart
            .draw_series(LineSeries::new(
                s.cdf.iter().map(|&(ns, q)| (ns.max(1) as f64 / 1e3, q)),
                color.stroke_width(2),
            ))
            .map_err(|e| anyhow!("{e}"))?
            .label(match s.size_bytes {
                0 => s.label.clone(),
                size => format!("{}, {}", s.label, crate::report::size_text(size)),
            })
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// Median and p99 latency (µs, log scale) and calls/s against the swept quantity
/// (`x` per scenario, log scale).
pub fn sweep(
    scenarios: &[Scenario],
    x: &[f64],
    x_desc: &str,
    title: &str,
    path: &Path,
) -> Result<()> {
    anyhow::ensure!(
        scenarios.len() == x.len() && !x.is_empty(),
        "one x per scenario"
    );
    let x_lo = decade_below(x.iter().copied().fold(f64::INFINITY, f64::min).max(1e-9));
    let x_hi = decade_above(x.iter().copied().fold(0.0, f64::max).max(x_lo * 10.0));
    let ys: Vec<f64> = scenarios
        .iter()
        .flat_map(|s| [s.latency.p50_ns, s.latency.p99_ns])
        .map(|ns| ns.max(1) as f64 / 1e3)
        .collect();
    let y_lo = decade_below(ys.iter().copied().fold(f64::INFINITY, f64::min));
    let y_hi = decade_above(ys.iter().copied().fold(0.0, f64::max).max(y_lo * 10.0));
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("latency (µs, log scale)")
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    let lines: [(&str, Pick); 2] = [("p50", |s| s.latency.p50_ns), ("p99", |s| s.latency.p99_ns)];
    for (i, (name, pick)) in lines.into_iter().enumerate() {
        let color = palette(i);
        let points: Vec<(f64, f64)> = x
            .iter()
            .zip(scenarios)
            .map(|(&x, s)| (x, pick(s).max(1) as f64 / 1e3))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| anyhow!("{e}"))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )
            .map_err(|e| anyhow!("{e}"))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

fn decade_below(v: f64) -> f64 {
    10f64.powf(v.max(1e-3).log10().floor())
}

fn decade_above(v: f64) -> f64 {
    10f64.powf(v.max(1e-3).log10().ceil())
}
