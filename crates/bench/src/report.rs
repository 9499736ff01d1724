//! Reports: one [`Scenario`] per run (or sweep step), as a terminal table, JSON and
//! a markdown table in the manner of Cooke & Fahmy's Table I.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::hist::Summary;
use crate::load::{Mode, Recorded, Spec};

/// Points kept of each latency CDF in the JSON report.
const CDF_POINTS_MAX: usize = 400;

/// The results of one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Scenario {
    pub label: String,
    pub target: String,
    /// `closed`, or `open constant 20000/s`, `open poisson 20000/s`.
    pub mode: String,
    pub conns: usize,
    pub inflight: usize,
    pub threads: usize,
    pub size_bytes: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub new_conn: bool,
    /// Offered rate (open loop), calls per second.
    pub rate: Option<f64>,
    pub sent: u64,
    pub ok: u64,
    pub errors: BTreeMap<String, u64>,
    pub calls_per_s: f64,
    /// Request payload plus answer body bytes of successful calls, per second, in 10^6 bytes.
    pub payload_mb_per_s: f64,
    pub latency: Summary,
    /// Node-side split (netaccel targets): queue, execution, and total − queue − exec.
    pub server_queue: Option<Summary>,
    pub server_exec: Option<Summary>,
    pub network_protocol: Option<Summary>,
    /// Client-side split (HTTP, new connection per call).
    pub connect: Option<Summary>,
    pub first_byte: Option<Summary>,
    pub transfer: Option<Summary>,
    /// `(latency_ns, fraction of calls at or below)`.
    pub cdf: Vec<(u64, f64)>,
    /// Where it ran: CPUs, the load generator's CPU set, and any note given.
    pub machine: String,
}

impl Scenario {
    pub fn new(label: &str, url: &str, spec: &Spec, rec: &Recorded, machine: &str) -> Scenario {
        let secs = if rec.measured.is_zero() {
            spec.duration.as_secs_f64()
        } else {
            rec.measured.as_secs_f64()
        };
        let split = |h: &crate::hist::Latency| (h.count() > 0).then(|| h.summary());
        let (mode, rate) = match spec.mode {
            Mode::Closed => ("closed".to_owned(), None),
            Mode::Open { rate, arrivals } => (
                format!("open {} {rate}/s", format!("{arrivals:?}").to_lowercase()),
                Some(rate),
            ),
        };
        Scenario {
            label: label.to_owned(),
            target: url.to_owned(),
            mode,
            conns: spec.conns,
            inflight: spec.inflight,
            threads: spec.threads,
            size_bytes: if spec.method == crate::wire::Method::Get
                && matches!(spec.target, crate::target::Target::Http { .. })
            {
                0
            } else {
                spec.size
            },
            duration_s: secs,
            warmup_s: spec.warmup.as_secs_f64(),
            new_conn: spec.new_conn,
            rate,
            sent: rec.sent,
            ok: rec.ok,
            errors: rec.errors.clone(),
            calls_per_s: rec.ok as f64 / secs,
            payload_mb_per_s: (rec.request_payload_bytes + rec.response_body_bytes) as f64
                / secs
                / 1e6,
            latency: rec.total.summary(),
            server_queue: split(&rec.queue),
            server_exec: split(&rec.exec),
            network_protocol: split(&rec.network),
            connect: split(&rec.connect),
            first_byte: split(&rec.first_byte),
            transfer: split(&rec.transfer),
            cdf: rec.total.cdf(CDF_POINTS_MAX),
            machine: machine.to_owned(),
        }
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// The JSON document the tool writes and `report` reads.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Document {
    pub scenarios: Vec<Scenario>,
}

/// Microseconds: two decimals below 10 µs (in-process calls take tens of
/// nanoseconds), one above.
pub fn us(ns: u64) -> String {
    if ns < 10_000 {
        format!("{:.2}", ns as f64 / 1000.0)
    } else {
        format!("{:.1}", ns as f64 / 1000.0)
    }
}

pub fn size_text(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn errors_text(s: &Scenario) -> String {
    if s.errors.is_empty() {
        return "0".to_owned();
    }
    s.errors
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The terminal table: one row per scenario, then the splits where there are any.
pub fn terminal_table(scenarios: &[Scenario]) -> String {
    let mut out = String::new();
    let label_w = scenarios
        .iter()
        .map(|s| s.label.len())
        .max()
        .unwrap_or(8)
        .max(8);
    let _ = writeln!(
        out,
        "{:<label_w$} {:>8} {:>5} {:>3} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  errors",
        "scenario",
        "size",
        "conns",
        "P",
        "calls/s",
        "MB/s",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p99.9 µs",
        "max µs"
    );
    for s in scenarios {
        let l = &s.latency;
        let _ = writeln!(
            out,
            "{:<label_w$} {:>8} {:>5} {:>3} {:>11.0} {:>9.2} {:>9} {:>9} {:>9} {:>9} {:>9}  {}",
            s.label,
            size_text(s.size_bytes),
            s.conns,
            s.inflight,
            s.calls_per_s,
            s.payload_mb_per_s,
            us(l.p50_ns),
            us(l.p90_ns),
            us(l.p99_ns),
            us(l.p999_ns),
            us(l.max_ns),
            errors_text(s)
        );
    }
    let with_server: Vec<_> = scenarios
        .iter()
        .filter(|s| s.server_exec.is_some())
        .collect();
    if !with_server.is_empty() {
        let _ = writeln!(
            out,
            "\nwhere the time goes, per call (node-side split; means add up, medians need not):"
        );
        let _ = writeln!(
            out,
            "{:<label_w$} {:>14} {:>14} {:>14} {:>14}",
            "scenario", "network+proto", "queue", "exec", "total"
        );
        for s in with_server {
            let pair = |x: &Option<Summary>| {
                x.map_or("-".into(), |x| {
                    format!("{:.1} / {}", x.mean_ns / 1e3, us(x.p50_ns))
                })
            };
            let _ = writeln!(
                out,
                "{:<label_w$} {:>14} {:>14} {:>14} {:>14}   (mean / p50, µs)",
                s.label,
                pair(&s.network_protocol),
                pair(&s.server_queue),
                pair(&s.server_exec),
                pair(&Some(s.latency))
            );
        }
    }
    let with_client: Vec<_> = scenarios.iter().filter(|s| s.connect.is_some()).collect();
    if !with_client.is_empty() {
        let _ = writeln!(
            out,
            "\nnew connection per call, client-side split (mean / p50, µs):"
        );
        let _ = writeln!(
            out,
            "{:<label_w$} {:>14} {:>14} {:>14}",
            "scenario", "connect", "first byte", "transfer"
        );
        for s in with_client {
            let pair = |x: &Option<Summary>| {
                x.map_or("-".into(), |x| {
                    format!("{:.1} / {}", x.mean_ns / 1e3, us(x.p50_ns))
                })
            };
            let _ = writeln!(
                out,
                "{:<label_w$} {:>14} {:>14} {:>14}",
                s.label,
                pair(&s.connect),
                pair(&s.first_byte),
                pair(&s.transfer)
            );
        }
    }
    out
}

/// A markdown table like Cooke & Fahmy's Table I, plus throughput and the node-side split.
pub fn markdown_table(scenarios: &[Scenario]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| scenario | payload | conns × in flight | median µs | p90 µs | p99 µs | p99.9 µs | calls/s | MB/s | node queue / exec µs (p50) | errors |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    for s in scenarios {
        let l = &s.latency;
        let split = match (&s.server_queue, &s.server_exec) {
            (Some(q), Some(e)) => format!("{} / {}", us(q.p50_ns), us(e.p50_ns)),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} × {} | {} | {} | {} | {} | {:.0} | {:.2} | {} | {} |",
            s.label,
            size_text(s.size_bytes),
            s.conns,
            s.inflight,
            us(l.p50_ns),
            us(l.p90_ns),
            us(l.p99_ns),
            us(l.p999_ns),
            s.calls_per_s,
            s.payload_mb_per_s,
            split,
            errors_text(s)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_people_write_them() {
        assert_eq!(size_text(64), "64 B");
        assert_eq!(size_text(4096), "4 KiB");
        assert_eq!(size_text(4 << 20), "4 MiB");
        assert_eq!(size_text(1500), "1500 B");
    }
}
