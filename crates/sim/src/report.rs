//! A run's files: `NAME.calls.csv` (one line per call), `NAME.summary.json` and
//! `NAME.svg` (the latency distribution). Every number is written the same way on
//! every platform, so the same run gives the same bytes.
//!
//! Not for: computing anything (`record`).

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::engine::Run;
use crate::record::{Outcome, Summary};
use crate::svg::{Chart, Series};

/// The header of the per-call CSV.
pub const CSV_HEADER: &str =
    "call,client,tenant,node,accelerator,bytes,fragments,issued_ns,submit_ns,start_ns,end_ns,reply_ns,slot,outcome";

/// Writes the per-call CSV of `run` to `out`.
pub fn write_calls(run: &Run, accelerators: &[String], out: &mut dyn Write) -> std::io::Result<()> {
    let mut line = String::with_capacity(160);
    writeln!(out, "{CSV_HEADER}")?;
    for r in &run.records {
        line.clear();
        let node = if r.node == u32::MAX {
            String::new()
        } else {
            r.node.to_string()
        };
        let slot = r.slot.map(|s| s.to_string()).unwrap_or_default();
        let _ = writeln!(
            line,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.call,
            r.client,
            r.tenant,
            node,
            accelerators[r.accel as usize],
            r.bytes,
            r.fragments,
            r.issued_ns,
            r.submit_ns,
            r.start_ns,
            r.end_ns,
            r.reply_ns,
            slot,
            r.outcome.name()
        );
        out.write_all(line.as_bytes())?;
    }
    Ok(())
}

/// The latency distribution of the calls answered OK, as a chart: client latency,
/// and its parts at the node (queue, service), at 100 quantiles.
pub fn latency_chart(run: &Run, title: &str) -> String {
    let ok: Vec<_> = run
        .records
        .iter()
        .filter(|r| r.outcome == Outcome::Ok)
        .collect();
    let quantiles = |mut v: Vec<u64>| -> Vec<(f64, f64)> {
        v.sort_unstable();
        if v.is_empty() {
            return Vec::new();
        }
        (1..=100)
            .map(|i| {
                let q = f64::from(i) / 100.0;
                let idx = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
                (q * 100.0, v[idx] as f64 / 1000.0)
            })
            .collect()
    };
    let series = vec![
        Series {
            name: "latency".into(),
            points: quantiles(ok.iter().map(|r| r.reply_ns - r.issued_ns).collect()),
            dashed: false,
        },
        Series {
            name: "queue".into(),
            points: quantiles(ok.iter().map(|r| r.start_ns - r.submit_ns).collect()),
            dashed: true,
        },
        Series {
            name: "service".into(),
            points: quantiles(ok.iter().map(|r| r.end_ns - r.start_ns).collect()),
            dashed: true,
        },
    ];
    Chart {
        title,
        x_label: "percentile of calls answered OK",
        y_label: "µs",
        log_y: false,
    }
    .render(&series)
}

/// Writes the three files of a run into `dir`; returns their paths.
pub fn write_run(
    dir: &Path,
    summary: &Summary,
    run: &Run,
    accelerators: &[String],
    calls_csv: bool,
) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let name = &summary.name;
    let mut written = Vec::new();
    if calls_csv {
        let path = dir.join(format!("{name}.calls.csv"));
        let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        write_calls(run, accelerators, &mut out)
            .and_then(|()| out.flush())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    let path = dir.join(format!("{name}.summary.json"));
    let json = serde_json::to_string_pretty(summary).expect("a summary serialises") + "\n";
    std::fs::write(&path, json).map_err(|e| format!("{}: {e}", path.display()))?;
    written.push(path);
    let path = dir.join(format!("{name}.svg"));
    std::fs::write(&path, latency_chart(run, name))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    written.push(path);
    Ok(written)
}
