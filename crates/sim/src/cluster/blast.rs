//! BlastFunction's sharing experiment in the simulator: the registry's allocator
//! places the functions on the devices (or, dedicated, each listed function gets a
//! device of its own and the others none), and the node's real dispatch core (the
//! single-node [`crate::engine`], one slot per device) serves their calls, open-loop
//! Poisson at each load level. The same set-up as `bench/cluster/run.sh`, whose
//! measured figures docs/benchmarks.md keeps.
//!
//! Not for: deciding placement (the registry's `alloc` does) or dispatch (the node's
//! dispatcher does).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use netaccel_registry::alloc::{Decision, Inventory, Policy, Request, SlotSpec};
use serde::{Deserialize, Serialize};

use crate::record::Outcome;
use crate::scenario::Scenario;
use crate::svg::{Chart, Series};

/// What the devices hold before any function is placed (the bench's nodes start
/// with echo).
const BLANK: &str = "echo";

/// A sharing experiment, as read from TOML.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SharingScenario {
    #[serde(default)]
    pub name: String,
    #[serde(default = "one")]
    pub seed: u64,
    pub sharing: SharingSpec,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SharingSpec {
    /// Measured time of each run (simulated seconds).
    pub duration_s: f64,
    /// Devices, one slot each.
    pub devices: usize,
    /// A call's time on a device, µs (every accelerator).
    pub device_us: f64,
    /// A slot's capacity the rates are shares of (calls/s; the bench measures it).
    pub capacity_per_s: f64,
    /// Connections per function, each a client of its own (the node's wait bound
    /// counts other clients' calls ahead), splitting the function's rate.
    #[serde(default = "one_usize")]
    pub connections: usize,
    pub functions: Vec<SharingFunction>,
    /// The functions that get a device each in the dedicated deployment, in order.
    pub dedicated: Vec<String>,
    pub levels: Vec<Level>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SharingFunction {
    pub name: String,
    pub accelerator: String,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Level {
    pub name: String,
    /// Each function offers this share of a slot's capacity.
    pub share: f64,
}

fn one() -> u64 {
    1
}
fn one_usize() -> usize {
    1
}

/// One deployment at one load level.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub level: String,
    pub deployment: &'static str,
    pub offered_per_s: f64,
    pub sent: u64,
    pub processed: u64,
    pub dropped_pct: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Mean over the devices of busy time (calls × device time) over the run.
    pub utilisation: f64,
    /// What each device holds, in order ("-": nothing placed).
    pub devices: Vec<String>,
}

impl SharingScenario {
    pub fn parse(text: &str) -> Result<SharingScenario, String> {
        let sc: SharingScenario = toml::from_str(text).map_err(|e| e.to_string())?;
        let s = &sc.sharing;
        if s.devices == 0
            || s.devices > 64
            || s.functions.is_empty()
            || s.levels.is_empty()
            || s.connections == 0
            || s.connections > 1024
        {
            return Err(
                "sharing: 1 to 64 devices, 1 to 1024 connections, a function and a level".into(),
            );
        }
        let positive = s.duration_s > 0.0
            && s.device_us > 0.0
            && s.capacity_per_s > 0.0
            && s.levels.iter().all(|l| l.share > 0.0);
        if !positive {
            return Err("sharing: durations, rates and shares are positive".into());
        }
        if let Some(d) = s
            .dedicated
            .iter()
            .find(|d| !s.functions.iter().any(|f| &f.name == *d))
        {
            return Err(format!(
                "sharing: dedicated function `{d}` is not in functions"
            ));
        }
        if s.dedicated.len() > s.devices {
            return Err("sharing: more dedicated functions than devices".into());
        }
        Ok(sc)
    }
}

/// Where the registry puts each function: `Some(device)` or `None` (no device).
/// Shared: every function allocated in order with no hint; dedicated: the listed
/// functions pinned to a device each by the request's node, the others none.
pub fn place(spec: &SharingSpec, dedicated: bool) -> Result<Vec<Option<usize>>, String> {
    let mut inv = Inventory::new();
    let nodes: Vec<Arc<str>> = (1..=spec.devices)
        .map(|i| Arc::from(format!("node-{i}").as_str()))
        .collect();
    for node in &nodes {
        inv.insert(SlotSpec {
            node: node.clone(),
            device: Arc::from("dev0"),
            slot: 0,
            backend: Arc::from("sim"),
            vendor: Arc::from("sim"),
            catalog: None,
            accelerator: Arc::from(BLANK),
            hash: Arc::from(""),
        });
    }
    let policy = Policy::default();
    let mut placed = Vec::new();
    for f in &spec.functions {
        let mut req = Request::new(&f.accelerator);
        if dedicated {
            match spec.dedicated.iter().position(|d| *d == f.name) {
                Some(k) => req.node = Some(&nodes[k]),
                None => {
                    placed.push(None);
                    continue;
                }
            }
        }
        let idx = match inv.allocate(&req, &policy) {
            Decision::Bind(idx) => idx,
            Decision::Reconfigure(idx) => {
                if inv.get(idx).expect("live").instances > 0 {
                    return Err("a placement displaced an instance: not a sharing set-up".into());
                }
                inv.set_accelerator(idx, &f.accelerator, "");
                idx
            }
            Decision::NoDevice => {
                placed.push(None);
                continue;
            }
        };
        inv.bind(idx);
        placed.push(Some(idx as usize));
    }
    Ok(placed)
}

/// The single-node scenario that serves one deployment: one node, a slot per
/// device, `connections` Poisson clients per placed function (each its own
/// client, as the bench's connections are).
fn scenario(
    sc: &SharingScenario,
    placed: &[Option<usize>],
    share: f64,
    calls: Option<u64>,
) -> Result<Scenario, String> {
    let s = &sc.sharing;
    let mut holds = vec![BLANK.to_string(); s.devices];
    for (f, p) in s.functions.iter().zip(placed) {
        if let Some(d) = p {
            holds[*d] = f.accelerator.clone();
        }
    }
    let mut names: Vec<&str> = holds.iter().map(String::as_str).collect();
    names.extend(s.functions.iter().map(|f| f.accelerator.as_str()));
    names.sort_unstable();
    names.dedup();
    let mut text = format!(
        "name = \"{}\"\nseed = {}\nduration_s = {}\n",
        sc.name, sc.seed, s.duration_s
    );
    if let Some(n) = calls {
        let _ = writeln!(text, "calls = {n}");
    }
    text.push_str("[node]\nslots = [");
    for h in &holds {
        let _ = write!(text, "{{ accelerator = \"{h}\" }}, ");
    }
    text.push_str("]\n");
    for n in &names {
        let _ = writeln!(
            text,
            "[[accelerators]]\nname = \"{n}\"\nservice = {{ kind = \"constant\", us = {} }}",
            s.device_us
        );
    }
    for (f, p) in s.functions.iter().zip(placed) {
        if p.is_some() {
            let _ = writeln!(
                text,
                "[[clients]]\n# {}\nkind = \"poisson\"\ncount = {}\nrate_per_s = {}\nmix = [{{ accelerator = \"{}\" }}]",
                f.name,
                s.connections,
                share * s.capacity_per_s / s.connections as f64,
                f.accelerator
            );
        }
    }
    Scenario::parse(&text)
}

/// Runs one deployment at one level.
pub fn run_one(
    sc: &SharingScenario,
    level: &Level,
    dedicated: bool,
    calls: Option<u64>,
) -> Result<Row, String> {
    let s = &sc.sharing;
    let placed = place(s, dedicated)?;
    let scen = scenario(sc, &placed, level.share, calls)?;
    let (run, _) = crate::simulate(&scen, Path::new("."))?;
    let rate = level.share * s.capacity_per_s;
    let mut sent = run.records.len() as u64;
    let mut latencies: Vec<u64> = run
        .records
        .iter()
        .filter(|r| r.outcome == Outcome::Ok)
        .map(|r| r.reply_ns - r.issued_ns)
        .collect();
    let processed = latencies.len() as u64;
    // A function with no device: every call it sends is dropped (the bench counts
    // them sent, as calls to a function that cannot be deployed).
    let simulated_s = run.end_ns as f64 / 1e9;
    let unplaced = placed.iter().filter(|p| p.is_none()).count() as f64;
    sent += (unplaced * rate * simulated_s.min(s.duration_s)).round() as u64;
    latencies.sort_unstable();
    let q = |p: f64| {
        if latencies.is_empty() {
            0.0
        } else {
            let i = ((p * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len()) - 1;
            (latencies[i] as f64 / 1e4).round() / 100.0
        }
    };
    // Busy time as calls processed × their device time: every call holds its slot
    // exactly `device_us`.
    let busy = processed as f64 * s.device_us * 1e3;
    // Over the clients' sending time, as the bench's window (the run goes on past
    // it while the last calls drain).
    let window_s = simulated_s.min(s.duration_s).max(1e-9);
    let mut devices = vec!["-".to_string(); s.devices];
    for (f, p) in s.functions.iter().zip(&placed) {
        if let Some(d) = p {
            devices[*d] = if devices[*d] == "-" {
                f.name.clone()
            } else {
                format!("{}+{}", devices[*d], f.name)
            };
        }
    }
    Ok(Row {
        level: level.name.clone(),
        deployment: if dedicated { "dedicated" } else { "shared" },
        offered_per_s: (rate * s.functions.len() as f64 * 10.0).round() / 10.0,
        sent,
        processed,
        dropped_pct: (10000.0 * (sent - processed) as f64 / sent.max(1) as f64).round() / 100.0,
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        utilisation: (100.0 * busy / (s.devices as f64 * window_s * 1e9)).round() / 100.0,
        devices,
    })
}

/// Runs every level, both deployments; writes NAME.json, NAME.md and NAME.svg.
pub fn run(
    sc: &SharingScenario,
    out: &Path,
    calls: Option<u64>,
) -> Result<(Vec<Row>, Vec<PathBuf>), String> {
    let mut rows = Vec::new();
    for level in &sc.sharing.levels {
        rows.push(run_one(sc, level, true, calls)?);
        rows.push(run_one(sc, level, false, calls)?);
    }
    let mut md = String::from("| load | per function | deployment | devices | offered calls/s | sent | processed | dropped | p50 ms | p99 ms | slot utilisation (mean) | processed, shared ÷ dedicated |\n|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut shared = Series {
        name: "shared".into(),
        points: Vec::new(),
        dashed: false,
    };
    let mut dedicated = Series {
        name: "dedicated".into(),
        points: Vec::new(),
        dashed: true,
    };
    for (pair, level) in rows.chunks(2).zip(&sc.sharing.levels) {
        let ratio = pair[1].processed as f64 / pair[0].processed.max(1) as f64;
        for r in pair {
            let ratio = if r.deployment == "shared" {
                format!("{ratio:.2}")
            } else {
                String::new()
            };
            let _ = writeln!(
                md,
                "| {} | {} × capacity | {} | {} | {} | {} | {} | {:.2} % | {:.2} | {:.2} | {:.2} | {} |",
                r.level, level.share, r.deployment, r.devices.join(", "), r.offered_per_s, r.sent, r.processed, r.dropped_pct, r.p50_ms, r.p99_ms, r.utilisation, ratio
            );
        }
        dedicated
            .points
            .push((level.share, pair[0].processed as f64));
        shared.points.push((level.share, pair[1].processed as f64));
    }
    let svg = Chart {
        title: "calls processed, five functions on three devices",
        x_label: "load per function (share of a slot's capacity)",
        y_label: "calls processed",
        log_y: false,
    }
    .render(&[shared, dedicated]);
    let json = serde_json::to_string_pretty(
        &serde_json::json!({ "name": sc.name, "seed": sc.seed, "rows": rows }),
    )
    .map_err(|e| e.to_string())?
        + "\n";
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut written = Vec::new();
    for (ext, text) in [("json", json), ("md", md), ("svg", svg)] {
        let path = out.join(format!("{}.{ext}", sc.name));
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    Ok((rows, written))
}
