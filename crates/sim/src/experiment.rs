//! An experiment: one scenario run at several values of a parameter (the x axis), for
//! each of several variants (the series), with one chart of a summary metric and,
//! where queueing theory has an answer, the theory's curve beside it.
//!
//! ```toml
//! title = "one slot, constant service: mean wait against M/D/1"
//! scenario = "md1.toml"               # relative to this file
//! x_label = "utilisation"
//! y_label = "mean wait (µs)"
//! metrics = ["queue_us.mean"]         # paths into the run's summary
//! metric_names = ["mean wait"]        # optional: their names in the legend
//! x = [0.1, 0.5, 0.9]
//! [[set]]                             # each x sets: offset + scale × x
//! path = "clients.0.rate_per_s"
//! scale = 200000.0
//! [[series]]                          # optional: variants, each a set of values
//! name = "join-shortest-queue"
//! values = { "node.policy" = "join_shortest_queue" }
//! [[theory]]                          # optional: a formula of x (see `Formula`)
//! name = "Pollaczek–Khinchine"
//! formula = "md1_wait"
//! service_us = 5.0
//! ```
//!
//! Not for: anything a single run decides (`engine`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::record::Summary;
use crate::scenario::Scenario;
use crate::svg::{Chart, Series};

/// The most runs one experiment may ask for.
const RUNS_MAX: usize = 1000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub title: String,
    pub scenario: String,
    pub x_label: String,
    pub y_label: String,
    pub metrics: Vec<String>,
    /// The metrics' names in the legend; the paths when absent.
    #[serde(default)]
    pub metric_names: Vec<String>,
    pub x: Vec<f64>,
    #[serde(default)]
    pub set: Vec<SetX>,
    #[serde(default)]
    pub series: Vec<Variant>,
    #[serde(default)]
    pub theory: Vec<Theory>,
    #[serde(default)]
    pub log_y: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetX {
    pub path: String,
    #[serde(default = "one")]
    pub scale: f64,
    #[serde(default)]
    pub offset: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    #[serde(default)]
    pub values: BTreeMap<String, toml::Value>,
}

/// A queueing formula of x = utilisation ρ, for a service time `service_us`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Theory {
    pub name: String,
    pub formula: Formula,
    pub service_us: f64,
}

#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Formula {
    /// M/D/1 mean wait, Pollaczek–Khinchine: ρS / 2(1 − ρ).
    Md1Wait,
    /// M/M/1 mean wait: ρS / (1 − ρ).
    Mm1Wait,
    /// Kingman's G/G/1 approximation with Erlang-2 arrivals (c²ₐ = ½) and constant
    /// service (c²ₛ = 0): ρ/(1 − ρ) · (c²ₐ + c²ₛ)/2 · S.
    KingmanErlang2Deterministic,
}

impl Formula {
    pub fn wait_us(self, rho: f64, service_us: f64) -> f64 {
        assert!((0.0..1.0).contains(&rho), "a stable queue has ρ < 1");
        match self {
            Formula::Md1Wait => rho * service_us / (2.0 * (1.0 - rho)),
            Formula::Mm1Wait => rho * service_us / (1.0 - rho),
            Formula::KingmanErlang2Deterministic => rho / (1.0 - rho) * 0.25 * service_us,
        }
    }
}

fn one() -> f64 {
    1.0
}

/// One run of an experiment.
#[derive(Serialize)]
pub struct Point {
    pub series: String,
    pub x: f64,
    pub summary: Summary,
}

impl Experiment {
    pub fn load(path: &Path) -> Result<Experiment, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let e: Experiment =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if e.x.is_empty() || e.metrics.is_empty() {
            return Err("an experiment has x values and metrics".into());
        }
        if !e.metric_names.is_empty() && e.metric_names.len() != e.metrics.len() {
            return Err("metric_names names every metric, in order".into());
        }
        if e.x.len() * e.series.len().max(1) > RUNS_MAX {
            return Err(format!("at most {RUNS_MAX} runs per experiment"));
        }
        Ok(e)
    }

    /// Runs every (series, x) point, each of at most `calls` calls when given;
    /// `base` is the experiment file's folder.
    pub fn run(
        &self,
        base: &Path,
        calls: Option<u64>,
        mut progress: impl FnMut(&Point),
    ) -> Result<Vec<Point>, String> {
        let path = base.join(&self.scenario);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let scenario: toml::Value =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let scenario_base = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let default = [Variant {
            name: String::new(),
            values: BTreeMap::new(),
        }];
        let variants = if self.series.is_empty() {
            &default[..]
        } else {
            &self.series
        };
        let mut points = Vec::new();
        for v in variants {
            for &x in &self.x {
                let mut value = scenario.clone();
                for (p, val) in &v.values {
                    set(&mut value, p, val.clone())?;
                }
                for s in &self.set {
                    set(
                        &mut value,
                        &s.path,
                        toml::Value::Float(s.offset + s.scale * x),
                    )?;
                }
                let mut sc = Scenario::from_value(value)?;
                if calls.is_some() {
                    sc.calls = calls;
                }
                sc.name = format!(
                    "{}{}x={x}",
                    v.name,
                    if v.name.is_empty() { "" } else { " " }
                );
                let (_, summary) = crate::simulate(&sc, &scenario_base)?;
                let point = Point {
                    series: v.name.clone(),
                    x,
                    summary,
                };
                progress(&point);
                points.push(point);
            }
        }
        Ok(points)
    }

    /// The chart: one line per series and metric, one dashed line per theory.
    pub fn chart(&self, points: &[Point]) -> Result<String, String> {
        let mut lines: Vec<Series> = Vec::new();
        let mut names: Vec<&str> = Vec::new();
        for p in points {
            if !names.contains(&p.series.as_str()) {
                names.push(&p.series);
            }
        }
        for name in names {
            for (k, m) in self.metrics.iter().enumerate() {
                let m_name = self.metric_names.get(k).unwrap_or(m);
                let mut pts = Vec::new();
                for p in points.iter().filter(|p| p.series == name) {
                    pts.push((p.x, metric(&p.summary, m)?));
                }
                let label = match (name.is_empty(), self.metrics.len() > 1) {
                    (true, _) => m_name.clone(),
                    (false, false) => name.to_string(),
                    (false, true) => format!("{name}: {m_name}"),
                };
                lines.push(Series {
                    name: label,
                    points: pts,
                    dashed: false,
                });
            }
        }
        for t in &self.theory {
            lines.push(Series {
                name: t.name.clone(),
                points: self
                    .x
                    .iter()
                    .map(|&x| (x, t.formula.wait_us(x, t.service_us)))
                    .collect(),
                dashed: true,
            });
        }
        Ok(Chart {
            title: &self.title,
            x_label: &self.x_label,
            y_label: &self.y_label,
            log_y: self.log_y,
        }
        .render(&lines))
    }

    /// A table of the points: series, x, each metric, and each theory's value.
    pub fn table(&self, points: &[Point]) -> Result<String, String> {
        let mut s = format!("series,x,{}", self.metrics.join(","));
        for t in &self.theory {
            s.push(',');
            s.push_str(&t.name);
        }
        s.push('\n');
        for p in points {
            s.push_str(&format!("{},{}", p.series, p.x));
            for m in &self.metrics {
                s.push_str(&format!(",{:.4}", metric(&p.summary, m)?));
            }
            for t in &self.theory {
                s.push_str(&format!(",{:.4}", t.formula.wait_us(p.x, t.service_us)));
            }
            s.push('\n');
        }
        Ok(s)
    }

    /// Runs the experiment in `file` and writes NAME.csv, NAME.json and NAME.svg to
    /// `out` (NAME: the file's stem); returns the paths.
    pub fn run_file(file: &Path, out: &Path, calls: Option<u64>) -> Result<Vec<PathBuf>, String> {
        let e = Experiment::load(file)?;
        let base = file.parent().unwrap_or(Path::new("."));
        let points = e.run(base, calls, |p| {
            eprintln!(
                "{:>24} x={:<10} calls {:>8} ok {:>8} p50 {:>10.2} µs p99 {:>10.2} µs",
                p.series,
                p.x,
                p.summary.calls,
                p.summary.ok,
                p.summary.latency_us.p50,
                p.summary.latency_us.p99
            )
        })?;
        let stem = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("experiment");
        std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
        let write = |ext: &str, text: String| -> Result<PathBuf, String> {
            let path = out.join(format!("{stem}.{ext}"));
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(path)
        };
        let json = serde_json::to_string_pretty(&points).expect("points serialise") + "\n";
        Ok(vec![
            write("csv", e.table(&points)?)?,
            write("json", json)?,
            write("svg", e.chart(&points)?)?,
        ])
    }
}

/// Sets the value at a dotted `path` (numbers index arrays) in a TOML tree.
fn set(root: &mut toml::Value, path: &str, value: toml::Value) -> Result<(), String> {
    let mut at = root;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        at = match (at, part.parse::<usize>()) {
            (toml::Value::Array(a), Ok(k)) if k < a.len() => &mut a[k],
            (toml::Value::Table(t), _) => {
                if last {
                    t.insert(part.to_string(), value);
                    return Ok(());
                }
                t.entry(part.to_string())
                    .or_insert_with(|| toml::Value::Table(Default::default()))
            }
            _ => return Err(format!("`{path}`: no `{part}` there")),
        };
        if last {
            *at = value;
            return Ok(());
        }
    }
    Err(format!("`{path}` is empty"))
}

/// The number at a dotted `path` in a summary (numbers index arrays).
pub fn metric(summary: &Summary, path: &str) -> Result<f64, String> {
    let v = serde_json::to_value(summary).expect("a summary serialises");
    let mut at = &v;
    for part in path.split('.') {
        at = match part.parse::<usize>() {
            Ok(k) => at.get(k),
            Err(_) => at.get(part),
        }
        .ok_or_else(|| format!("the summary has no `{path}`"))?;
    }
    at.as_f64()
        .ok_or_else(|| format!("`{path}` is not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_reaches_tables_and_arrays() {
        let mut v: toml::Value = toml::from_str("a = [{ b = 1 }]\n[c]\nd = 2").unwrap();
        set(&mut v, "a.0.b", toml::Value::Float(3.0)).unwrap();
        set(&mut v, "c.d", toml::Value::Integer(4)).unwrap();
        set(&mut v, "e.f", toml::Value::Integer(5)).unwrap();
        assert_eq!(v["a"][0]["b"].as_float(), Some(3.0));
        assert_eq!(v["c"]["d"].as_integer(), Some(4));
        assert_eq!(v["e"]["f"].as_integer(), Some(5));
        assert!(set(&mut v, "a.7.b", toml::Value::Integer(1)).is_err());
    }

    #[test]
    fn formulas_are_the_textbook_ones() {
        assert_eq!(Formula::Md1Wait.wait_us(0.5, 10.0), 5.0);
        assert_eq!(Formula::Mm1Wait.wait_us(0.5, 10.0), 10.0);
        assert_eq!(Formula::KingmanErlang2Deterministic.wait_us(0.5, 10.0), 2.5);
    }
}
