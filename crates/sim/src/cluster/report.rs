//! What a cluster run gives: per policy, the totals (utilisation, latency
//! percentiles, drops by cause, reconfigurations per hour, migrations) and a series
//! over the day, written as JSON, CSV and two SVG charts. Only simulated figures:
//! the same scenario and seed give the same bytes (wall time goes to stderr).
//!
//! Not for: running anything (`engine`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::svg::{Chart, Series};

/// Latency buckets 1 % wide from 1 µs (2,400 of them reach past 5 hours): percentiles
/// of hundreds of millions of calls in bounded memory, within 1 %.
const BUCKETS: usize = 2_400;
const GROWTH: f64 = 1.01;

/// A latency histogram in ns.
#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum_ns: u128,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            sum_ns: 0,
        }
    }
}

impl Histogram {
    pub fn add(&mut self, ns: u64) {
        let us = (ns as f64 / 1000.0).max(1.0);
        let b = ((us.ln() / GROWTH.ln()) as usize).min(BUCKETS - 1);
        self.counts[b] += 1;
        self.total += 1;
        self.sum_ns += u128::from(ns);
    }

    /// The upper edge of the bucket holding quantile `q`, ms; 0 when empty.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        debug_assert!((0.0..=1.0).contains(&q));
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return round3(GROWTH.powi(b as i32 + 1) / 1000.0);
            }
        }
        unreachable!("the counts sum to the total")
    }

    pub fn quantiles_ms(&self) -> Quantiles {
        Quantiles {
            mean: if self.total == 0 {
                0.0
            } else {
                round3(self.sum_ns as f64 / self.total as f64 / 1e6)
            },
            p50: self.quantile_ms(0.5),
            p99: self.quantile_ms(0.99),
            p999: self.quantile_ms(0.999),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Quantiles {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
}

/// One stretch of the day.
#[derive(Clone, Default)]
pub struct Bin {
    pub calls: u64,
    pub ok: u64,
    pub dropped: u64,
    pub reconfigurations: u64,
    pub migrations: u64,
    pub utilisation_sum: f64,
    pub reports: u64,
    pub hist: Histogram,
}

/// One policy's run.
#[derive(Clone, Default, Serialize)]
pub struct PolicyResult {
    pub policy: String,
    pub simulated_s: f64,
    pub calls: u64,
    pub ok: u64,
    /// Refused: the slot's queue was full.
    pub busy: u64,
    /// The function had no instance on a slot taking calls.
    pub no_instance: u64,
    /// Waiting or running at a node when it failed.
    pub lost: u64,
    pub dropped_pct: f64,
    pub latency_ms: Quantiles,
    /// Busy time over slot time, every slot.
    pub utilisation_mean: f64,
    pub reconfigurations: u64,
    pub reconfigurations_per_hour: f64,
    /// Placing every function before the day starts (not counted above).
    pub initial_reconfigurations: u64,
    /// Instances moved off a reconfigured slot or a lost node.
    pub migrations: u64,
    /// Of those, instances moved off a lost node.
    pub failure_migrations: u64,
    /// Allocations that found no slot (the instance stays unbound, retried).
    pub no_device: u64,
    pub unplaced_at_end: u64,
    pub instances_peak: u64,
    pub node_failures: u64,
    /// Times the registry had no leader, and for how long in all.
    pub leader_losses: u64,
    pub leaderless_s: f64,
    /// Instance-seconds on a lost node's slot beyond its lease because no leader
    /// was there to expire it.
    pub leader_unbound_s: f64,
    /// Calls dropped (any cause) while the registry had no leader.
    pub leaderless_dropped: u64,
    #[serde(skip)]
    pub busy_ns: u128,
    #[serde(skip)]
    pub bins: Vec<Bin>,
}

impl PolicyResult {
    pub fn new(policy: &str) -> PolicyResult {
        PolicyResult {
            policy: policy.to_string(),
            ..PolicyResult::default()
        }
    }

    /// Every call is counted once; fills the derived figures.
    pub fn check(&mut self) {
        let dropped = self.busy + self.no_instance + self.lost;
        assert_eq!(
            self.ok + dropped,
            self.calls,
            "every call answered or dropped once"
        );
        let binned: u64 = self.bins.iter().map(|b| b.calls).sum();
        assert_eq!(binned, self.calls);
        self.dropped_pct = round3(100.0 * dropped as f64 / self.calls.max(1) as f64);
        self.utilisation_mean = round3(self.utilisation_mean);
        self.reconfigurations_per_hour = round3(self.reconfigurations_per_hour);
        self.simulated_s = round3(self.simulated_s);
        self.leaderless_s = round3(self.leaderless_s);
        self.leader_unbound_s = round3(self.leader_unbound_s);
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Writes NAME.json (every policy's totals), NAME.csv (the series) and NAME.svg,
/// NAME-utilisation.svg (p99 and utilisation over the day, one line per policy).
pub fn write(
    out: &Path,
    name: &str,
    seed: u64,
    results: &[PolicyResult],
) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let doc = serde_json::json!({ "name": name, "seed": seed, "policies": results });
    let json = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())? + "\n";
    let mut csv = String::from(
        "policy,bin,start_h,calls,ok,dropped,p99_ms,utilisation,reconfigurations,migrations\n",
    );
    let mut p99 = Vec::new();
    let mut util = Vec::new();
    for r in results {
        let width_h = r.simulated_s / 3600.0 / r.bins.len().max(1) as f64;
        let series = || Series {
            name: r.policy.clone(),
            points: Vec::new(),
            dashed: false,
        };
        let (mut p, mut u) = (series(), series());
        for (i, b) in r.bins.iter().enumerate() {
            let start_h = round3(i as f64 * width_h);
            let u_mean = round3(b.utilisation_sum / b.reports.max(1) as f64);
            let p99_ms = b.hist.quantile_ms(0.99);
            let _ = writeln!(
                csv,
                "{},{i},{start_h},{},{},{},{p99_ms},{u_mean},{},{}",
                r.policy, b.calls, b.ok, b.dropped, b.reconfigurations, b.migrations
            );
            if b.ok > 0 {
                p.points.push((start_h, p99_ms));
            }
            if b.reports > 0 {
                u.points.push((start_h, u_mean));
            }
        }
        p99.push(p);
        util.push(u);
    }
    let charts = [
        (
            format!("{name}.svg"),
            Chart {
                title: "p99 latency over the day",
                x_label: "simulated hour",
                y_label: "p99 ms",
                log_y: true,
            }
            .render(&p99),
        ),
        (
            format!("{name}-utilisation.svg"),
            Chart {
                title: "slot utilisation over the day",
                x_label: "simulated hour",
                y_label: "mean busy share",
                log_y: false,
            }
            .render(&util),
        ),
    ];
    let mut written = Vec::new();
    for (file, text) in [(format!("{name}.json"), json), (format!("{name}.csv"), csv)]
        .into_iter()
        .chain(charts)
    {
        let path = out.join(file);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// One line per policy, for the terminal (the leader's figures only where it was
/// lost).
pub fn line(r: &PolicyResult) -> String {
    let mut text = totals(r);
    if r.leader_losses > 0 {
        let _ = write!(
            text,
            "; leader losses {} ({} s without a leader, {} instance-s unbound for it, {} calls dropped meanwhile)",
            r.leader_losses, r.leaderless_s, r.leader_unbound_s, r.leaderless_dropped
        );
    }
    text
}

fn totals(r: &PolicyResult) -> String {
    format!(
        "{}: {} calls, ok {}, dropped {:.3} % (busy {}, no instance {}, lost {}); p50 {} ms p99 {} ms p99.9 {} ms; utilisation {:.3}; reconfigurations {} ({:.1}/h, {} before the day); migrations {} ({} off lost nodes); no device {}; instances peak {}",
        r.policy,
        r.calls,
        r.ok,
        r.dropped_pct,
        r.busy,
        r.no_instance,
        r.lost,
        r.latency_ms.p50,
        r.latency_ms.p99,
        r.latency_ms.p999,
        r.utilisation_mean,
        r.reconfigurations,
        r.reconfigurations_per_hour,
        r.initial_reconfigurations,
        r.migrations,
        r.failure_migrations,
        r.no_device,
        r.instances_peak
    )
}
