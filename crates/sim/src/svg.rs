//! Line charts as SVG text, written by hand (no plotting library): axes with ticks,
//! one polyline and legend entry per series, optionally a log-scale y axis. The text
//! is a pure function of its input, so the charts are as deterministic as the runs.
//!
//! Not for: anything but the simulator's own charts.

use std::fmt::Write;

/// One line of a chart.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (a model's prediction beside a measurement).
    pub dashed: bool,
}

pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub log_y: bool,
}

const W: f64 = 720.0;
const H: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

impl Chart<'_> {
    /// The chart of `series` as an SVG document.
    pub fn render(&self, series: &[Series]) -> String {
        let finite = |v: f64| v.is_finite() && (!self.log_y || v > 0.0);
        let pts = || {
            series
                .iter()
                .flat_map(|s| s.points.iter())
                .filter(|p| finite(p.1))
        };
        let (mut x0, mut x1) = bounds(pts().map(|p| p.0));
        let (mut y0, mut y1) = bounds(pts().map(|p| self.y(p.1)));
        if x0 == x1 {
            (x0, x1) = (x0 - 1.0, x1 + 1.0);
        }
        if !self.log_y {
            y0 = y0.min(0.0);
        }
        if y0 == y1 {
            (y0, y1) = (y0 - 1.0, y1 + 1.0);
        }
        let pw = W - LEFT - RIGHT;
        let ph = H - TOP - BOTTOM;
        let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
        let sy = |y: f64| TOP + ph - (y - y0) / (y1 - y0) * ph;
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
            LEFT + pw / 2.0,
            escape(self.title)
        );
        let _ = writeln!(
            s,
            "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"black\"/>"
        );
        for i in 0..=5 {
            let f = f64::from(i) / 5.0;
            let (x, y) = (x0 + f * (x1 - x0), y0 + f * (y1 - y0));
            let label = if self.log_y { 10f64.powf(y) } else { y };
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>",
                sx(x),
                TOP + ph + 18.0,
                num(x),
                LEFT - 6.0,
                sy(y) + 4.0,
                num(label),
                LEFT + pw,
                sy(y),
                sy(y)
            );
        }
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n<text transform=\"translate(18,{:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            LEFT + pw / 2.0,
            H - 16.0,
            escape(self.x_label),
            TOP + ph / 2.0,
            escape(self.y_label)
        );
        for (i, series) in series.iter().enumerate() {
            self.line(&mut s, i, series, &sx, &sy);
        }
        s.push_str("</svg>\n");
        s
    }

    /// One series: its polyline, its points, its legend entry (the `i`th).
    fn line(
        &self,
        s: &mut String,
        i: usize,
        series: &Series,
        sx: &dyn Fn(f64) -> f64,
        sy: &dyn Fn(f64) -> f64,
    ) {
        let finite = |v: f64| v.is_finite() && (!self.log_y || v > 0.0);
        let colour = COLOURS[i % COLOURS.len()];
        let dash = if series.dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        let path: Vec<String> = series
            .points
            .iter()
            .filter(|p| finite(p.1))
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(self.y(y))))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{dash} points=\"{}\"/>",
            path.join(" ")
        );
        for p in &path {
            let (x, y) = p.split_once(',').expect("x,y");
            let _ = writeln!(
                s,
                "<circle cx=\"{x}\" cy=\"{y}\" r=\"2.5\" fill=\"{colour}\"/>"
            );
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let _ = writeln!(
            s,
            "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{ly:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" stroke-width=\"2\"{dash}/>\n<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            W - RIGHT + 12.0,
            W - RIGHT + 36.0,
            W - RIGHT + 42.0,
            ly + 4.0,
            escape(&series.name)
        );
    }

    fn y(&self, v: f64) -> f64 {
        if self.log_y {
            v.log10()
        } else {
            v
        }
    }
}

fn bounds(it: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = it.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if lo.is_finite() {
        (lo, hi)
    } else {
        (0.0, 1.0)
    }
}

/// A tick label: short, and the same on every platform.
fn num(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(0.01..100_000.0).contains(&a) {
        format!("{v:.1e}")
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_has_a_line_per_series_and_escapes_text() {
        let chart = Chart {
            title: "a < b",
            x_label: "x",
            y_label: "y",
            log_y: true,
        };
        let svg = chart.render(&[
            Series {
                name: "one".into(),
                points: vec![(0.0, 1.0), (1.0, 10.0), (2.0, 0.0)],
                dashed: false,
            },
            Series {
                name: "two".into(),
                points: vec![(0.0, 2.0)],
                dashed: true,
            },
        ]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a &lt; b"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }
}
