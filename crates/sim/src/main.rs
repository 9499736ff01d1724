//! `netaccel-sim`: runs a scenario or an experiment (see the crate's documentation
//! and docs/simulation.md).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use netaccel_sim::experiment::Experiment;
use netaccel_sim::scenario::Scenario;

#[derive(Parser)]
#[command(
    name = "netaccel-sim",
    about = "the node's dispatch core under a virtual clock"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs one scenario: NAME.calls.csv, NAME.summary.json and NAME.svg in --out.
    Run {
        scenario: PathBuf,
        #[arg(long, default_value = "sim-out")]
        out: PathBuf,
        /// Overrides the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Leaves out the per-call CSV (large runs).
        #[arg(long)]
        no_calls: bool,
        /// Stops clients after this many calls (overrides the scenario's `calls`).
        #[arg(long)]
        calls: Option<u64>,
    },
    /// Runs an experiment: NAME.csv, NAME.json and NAME.svg in --out.
    Experiment {
        file: PathBuf,
        #[arg(long, default_value = "sim-out")]
        out: PathBuf,
        /// Stops clients after this many calls in each run.
        #[arg(long)]
        calls: Option<u64>,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Run {
            scenario,
            out,
            seed,
            no_calls,
            calls,
        } => run(&scenario, &out, seed, calls, !no_calls),
        Command::Experiment { file, out, calls } => {
            Experiment::run_file(&file, &out, calls).map(|paths| {
                for p in paths {
                    println!("wrote {}", p.display());
                }
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("netaccel-sim: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(
    path: &Path,
    out: &Path,
    seed: Option<u64>,
    calls_max: Option<u64>,
    calls: bool,
) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if netaccel_sim::cluster::kind_of(&text).is_some() {
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("run");
        let written = netaccel_sim::cluster::run_file(&text, stem, out, seed, calls_max)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        for p in written {
            println!("wrote {}", p.display());
        }
        return Ok(());
    }
    let mut sc = Scenario::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if sc.name.is_empty() {
        sc.name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("run")
            .to_string();
    }
    if let Some(seed) = seed {
        sc.seed = seed;
    }
    if calls_max.is_some() {
        sc.calls = calls_max;
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let wall = Instant::now();
    let (run, summary) = netaccel_sim::simulate(&sc, base)?;
    let wall_s = wall.elapsed().as_secs_f64();
    let names: Vec<String> = sc.accelerators.iter().map(|a| a.name.clone()).collect();
    let written = netaccel_sim::report::write_run(out, &summary, &run, &names, calls)?;
    let s = &summary;
    println!(
        "{}: {} calls in {:.3} s simulated: ok {} busy {} pool_full {} unavailable {} deadline {} lost {}",
        s.name, s.calls, s.simulated_s, s.ok, s.busy, s.pool_full, s.unavailable, s.deadline_exceeded, s.lost
    );
    println!(
        "latency µs: p50 {:.2} p90 {:.2} p99 {:.2} p99.9 {:.2}; queue mean {:.2}, service mean {:.2}; utilisation {:.3}",
        s.latency_us.p50, s.latency_us.p90, s.latency_us.p99, s.latency_us.p999, s.queue_us.mean, s.service_us.mean, s.utilisation_mean
    );
    // Wall-clock figures go to stderr: the files and stdout stay a function of the seed.
    eprintln!(
        "wall {:.3} s: {:.0} calls/s, {:.1} simulated s per wall s",
        wall_s,
        s.calls as f64 / wall_s,
        s.simulated_s / wall_s
    );
    for p in written {
        println!("wrote {}", p.display());
    }
    Ok(())
}
