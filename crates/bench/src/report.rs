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
    scenario_rows(&mut out, scenarios, label_w);
    server_split(&mut out, scenarios, label_w);
    client_split(&mut out, scenarios, label_w);
    out
}

/// One row per scenario: size, connections, calls/s, latency percentiles, errors.
fn scenario_rows(out: &mut String, scenarios: &[Scenario], label_w: usize) {
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
}

/// The node-side split (network + protocol, queue, exec) of the scenarios that have
/// one; nothing when none has.
fn server_split(out: &mut String, scenarios: &[Scenario], label_w: usize) {
    let with_server: Vec<_> = scenarios
        .iter()
        .filter(|s| s.server_exec.is_some())
        .collect();
    if with_server.is_empty() {
        return;
    }
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
        let _ = writeln!(
            out,
            "{:<label_w$} {:>14} {:>14} {:>14} {:>14}   (mean / p50, µs)",
            s.label,
            mean_p50(&s.network_protocol),
            mean_p50(&s.server_queue),
            mean_p50(&s.server_exec),
            mean_p50(&Some(s.latency))
        );
    }
}

/// The client-side split (connect, first byte, transfer) of the new-connection-per-call
/// scenarios; nothing when there are none.
fn client_split(out: &mut String, scenarios: &[Scenario], label_w: usize) {
    let with_client: Vec<_> = scenarios.iter().filter(|s| s.connect.is_some()).collect();
    if with_client.is_empty() {
        return;
    }
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
        let _ = writeln!(
            out,
            "{:<label_w$} {:>14} {:>14} {:>14}",
            s.label,
            mean_p50(&s.connect),
            mean_p50(&s.first_byte),
            mean_p50(&s.transfer)
        );
    }
}

/// The label without a trailing round marker (`"nginx, c1 r2"` → `"nginx, c1"`), or
/// `None` when it has none.
pub fn round_base(label: &str) -> Option<&str> {
    let (base, last) = label.rsplit_once(' ')?;
    let digits = last.strip_prefix('r')?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(base)
}

/// Merges the rounds of each scenario — reports of the same target and payload size
/// whose labels differ only by a trailing `rN` — into one per scenario, in order of
/// first appearance: every figure (latency
/// percentiles, calls/s, MB/s, the node-side split) is the median over the rounds of
/// that figure, so one noisy round moves nothing; errors are summed. The CDF is that of
/// the round whose p50 is the median. Scenarios without a round marker pass unchanged.
pub fn median_over_rounds(scenarios: Vec<Scenario>) -> Vec<Scenario> {
    let mut groups: Vec<(String, Vec<Scenario>)> = Vec::new();
    for s in scenarios {
        let base = round_base(&s.label).unwrap_or(&s.label).to_owned();
        let same = |(b, members): &&mut (String, Vec<Scenario>)| {
            *b == base && members[0].target == s.target && members[0].size_bytes == s.size_bytes
        };
        match groups.iter_mut().find(same) {
            Some((_, members)) => members.push(s),
            None => groups.push((base, vec![s])),
        }
    }
    groups
        .into_iter()
        .map(|(base, mut members)| {
            if members.len() == 1 && round_base(&members[0].label).is_none() {
                return members.pop().expect("one member");
            }
            merge_rounds(base, members)
        })
        .collect()
}

fn merge_rounds(label: String, mut rounds: Vec<Scenario>) -> Scenario {
    fn median_u64(mut v: Vec<u64>) -> u64 {
        v.sort_unstable();
        v[(v.len() - 1) / 2]
    }
    fn median_f64(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v[(v.len() - 1) / 2]
    }
    fn summary(all: &[&Summary]) -> Summary {
        let pick = |f: fn(&Summary) -> u64| median_u64(all.iter().map(|s| f(s)).collect());
        Summary {
            count: all.iter().map(|s| s.count).sum(),
            min_ns: all.iter().map(|s| s.min_ns).min().unwrap_or(0),
            mean_ns: median_f64(all.iter().map(|s| s.mean_ns).collect()),
            p50_ns: pick(|s| s.p50_ns),
            p90_ns: pick(|s| s.p90_ns),
            p99_ns: pick(|s| s.p99_ns),
            p999_ns: pick(|s| s.p999_ns),
            max_ns: all.iter().map(|s| s.max_ns).max().unwrap_or(0),
        }
    }
    fn optional(rounds: &[Scenario], f: fn(&Scenario) -> &Option<Summary>) -> Option<Summary> {
        let all: Vec<&Summary> = rounds.iter().filter_map(|s| f(s).as_ref()).collect();
        (all.len() == rounds.len()).then(|| summary(&all))
    }
    let latency = summary(&rounds.iter().map(|s| &s.latency).collect::<Vec<_>>());
    let calls_per_s = median_f64(rounds.iter().map(|s| s.calls_per_s).collect());
    let payload_mb_per_s = median_f64(rounds.iter().map(|s| s.payload_mb_per_s).collect());
    let server_queue = optional(&rounds, |s| &s.server_queue);
    let server_exec = optional(&rounds, |s| &s.server_exec);
    let network_protocol = optional(&rounds, |s| &s.network_protocol);
    let connect = optional(&rounds, |s| &s.connect);
    let first_byte = optional(&rounds, |s| &s.first_byte);
    let transfer = optional(&rounds, |s| &s.transfer);
    let mut errors = BTreeMap::new();
    for r in &rounds {
        for (k, v) in &r.errors {
            *errors.entry(k.clone()).or_insert(0) += v;
        }
    }
    let sent = rounds.iter().map(|s| s.sent).sum();
    let ok = rounds.iter().map(|s| s.ok).sum();
    let n = rounds.len();
    rounds.sort_by_key(|s| s.latency.p50_ns);
    let mut merged = rounds.swap_remove((n - 1) / 2);
    merged.machine = format!("{} (median of {n} rounds)", merged.machine);
    Scenario {
        label,
        sent,
        ok,
        errors,
        calls_per_s,
        payload_mb_per_s,
        latency,
        server_queue,
        server_exec,
        network_protocol,
        connect,
        first_byte,
        transfer,
        ..merged
    }
}

/// `"mean / p50"` in µs, or `-` when the split was not measured.
fn mean_p50(x: &Option<Summary>) -> String {
    x.map_or("-".into(), |x| {
        format!("{:.1} / {}", x.mean_ns / 1e3, us(x.p50_ns))
    })
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

    fn scenario(label: &str, p50: u64, calls_per_s: f64) -> Scenario {
        let latency = Summary {
            count: 10,
            min_ns: p50 / 2,
            mean_ns: p50 as f64,
            p50_ns: p50,
            p90_ns: p50 * 2,
            p99_ns: p50 * 3,
            p999_ns: p50 * 4,
            max_ns: p50 * 5,
        };
        Scenario {
            label: label.to_owned(),
            target: "tcp-echo://x".to_owned(),
            mode: "closed".to_owned(),
            conns: 1,
            inflight: 1,
            threads: 1,
            size_bytes: 64,
            duration_s: 1.0,
            warmup_s: 0.0,
            new_conn: false,
            rate: None,
            sent: 10,
            ok: 10,
            errors: BTreeMap::from([("BUSY".to_owned(), 1)]),
            calls_per_s,
            payload_mb_per_s: 1.0,
            latency,
            server_queue: None,
            server_exec: None,
            network_protocol: None,
            connect: None,
            first_byte: None,
            transfer: None,
            cdf: vec![(p50, 0.5)],
            machine: "m".to_owned(),
        }
    }

    #[test]
    fn round_markers_are_a_trailing_r_and_digits() {
        assert_eq!(round_base("nginx, c1 r2"), Some("nginx, c1"));
        assert_eq!(round_base("x r10"), Some("x"));
        assert_eq!(round_base("x r"), None);
        assert_eq!(round_base("x rx"), None);
        assert_eq!(round_base("r1"), None);
        assert_eq!(round_base("TCP echo (C), c16"), None);
    }

    #[test]
    fn rounds_merge_into_medians_and_others_pass_through() {
        let mut bigger = scenario("a r1", 5, 1.0);
        bigger.size_bytes = 4096;
        let merged = median_over_rounds(vec![
            scenario("a r1", 100, 10.0),
            scenario("b", 7, 1.0),
            scenario("a r2", 900, 30.0),
            bigger,
            scenario("a r3", 200, 20.0),
        ]);
        assert_eq!(merged.len(), 3, "another size is another scenario");
        assert_eq!(merged[2].size_bytes, 4096);
        let a = &merged[0];
        assert_eq!(a.label, "a");
        assert_eq!(
            a.latency.p50_ns, 200,
            "one slow round does not move the median"
        );
        assert_eq!(a.latency.p99_ns, 600);
        assert_eq!(a.latency.max_ns, 4500, "max is the max over rounds");
        assert_eq!(a.calls_per_s, 20.0);
        assert_eq!(a.sent, 30);
        assert_eq!(a.errors["BUSY"], 3);
        assert_eq!(a.cdf, vec![(200, 0.5)], "CDF of the median round");
        assert!(a.machine.contains("median of 3 rounds"));
        assert_eq!(merged[1].label, "b");
        assert_eq!(merged[1].latency.p50_ns, 7);
    }

    #[test]
    fn sizes_read_like_people_write_them() {
        assert_eq!(size_text(64), "64 B");
        assert_eq!(size_text(4096), "4 KiB");
        assert_eq!(size_text(4 << 20), "4 MiB");
        assert_eq!(size_text(1500), "1500 B");
    }
}
