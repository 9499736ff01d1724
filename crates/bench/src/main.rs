//! `netaccel-bench`: the command line over the `netaccel_bench` library.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use netaccel_bench::load::{self, Arrivals, Mode, Spec};
use netaccel_bench::plot;
use netaccel_bench::report::{self, Document, Scenario};
use netaccel_bench::target::Target;
use netaccel_bench::wire::Method;

/// Latency and throughput of netaccel nodes, HTTP servers and TCP echo servers.
#[derive(Parser)]
#[command(name = "netaccel-bench", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure one target (or one sweep over it).
    Run(RunArgs),
    /// Merge JSON reports into one markdown table and one CDF figure.
    Report(ReportArgs),
    /// Two targets interleaved call by call (A B B A …, one in flight each): the
    /// latency gap A − B as the median of per-block gaps, printed as key=value lines.
    Pair(PairArgs),
}

#[derive(Args)]
struct PairArgs {
    /// The target measured (URL as for `run`; not inproc://).
    a: String,
    /// The target it is compared with, e.g. the floor: tcp-echo://HOST:PORT.
    b: String,
    /// Payload bytes per call, the same for both.
    #[arg(short, long, default_value = "64", value_parser = parse_size)]
    size: usize,
    /// Measured calls per target.
    #[arg(short = 'n', long, default_value_t = 100_000)]
    calls: u64,
    /// Calls per target before measuring.
    #[arg(long, default_value_t = 5_000)]
    warmup_calls: u64,
    /// Blocks the measured calls are cut into (1..=1000): the gap is the median of
    /// the blocks' gaps.
    #[arg(long, default_value_t = 20)]
    blocks: usize,
    /// Seconds to wait for an answer.
    #[arg(long, default_value = "5")]
    timeout: f64,
}

#[derive(Args)]
struct RunArgs {
    /// http://HOST:PORT/v1/fn/NAME, http://HOST:PORT/PATH, rac://HOST:PORT/NAME,
    /// tcp-echo://HOST:PORT or inproc://NAME.
    target: String,
    /// Payload bytes per call (16, 4k, 4KiB, 4M …).
    #[arg(short, long, default_value = "64", value_parser = parse_size)]
    size: usize,
    /// Connections.
    #[arg(short, long, default_value_t = 1)]
    conns: usize,
    /// Calls in flight per connection (pipelining; HTTP/1.1 answers in order).
    #[arg(short = 'P', long, default_value_t = 1)]
    inflight: usize,
    /// Load-generator threads, each with its own runtime; connections are spread over them.
    #[arg(short, long, default_value_t = 1)]
    threads: usize,
    /// Measured seconds per run (or per sweep step); with --calls, an upper bound
    /// (default 600).
    #[arg(short, long)]
    duration: Option<f64>,
    /// Stop after this many calls sent after the warm-up (all connections together);
    /// calls/s is then counted over the time the calls took.
    #[arg(short = 'n', long)]
    calls: Option<u64>,
    /// RAC: bind every connection to this tenant (`hello`), given as NAME:TOKEN.
    #[arg(long, value_parser = parse_tenant)]
    tenant: Option<load::Tenant>,
    /// Seconds of load before measuring.
    #[arg(short, long, default_value = "1")]
    warmup: f64,
    /// Open loop: calls per second over all connections, latency from intended send time.
    #[arg(short, long)]
    rate: Option<f64>,
    /// Open-loop arrivals.
    #[arg(long, value_enum, default_value = "constant")]
    arrivals: Arrivals,
    /// HTTP method; default POST for /v1/fn/NAME, GET otherwise.
    #[arg(long, value_enum)]
    method: Option<Method>,
    /// HTTP: a new connection per call, with the connect / first byte / transfer split.
    #[arg(long)]
    new_conn: bool,
    /// Sweep one quantity, one run per step: size=16,64,4k  conns=1,4,16  rate=1000,5000
    #[arg(long)]
    sweep: Option<String>,
    /// Seconds to wait for an answer before giving up the connection.
    #[arg(long, default_value = "5")]
    timeout: f64,
    /// Seed of Poisson arrivals.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Name of the scenario in reports (default: the target).
    #[arg(short, long)]
    label: Option<String>,
    /// Where the server runs, e.g. "server on CPU 0" (goes into the report).
    #[arg(long, default_value = "")]
    note: String,
    /// Write the JSON report here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write figures here: cdf.svg, and sweep.svg for a sweep.
    #[arg(long)]
    plot_dir: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args)]
struct ReportArgs {
    /// JSON reports written by `run --json`.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Write the markdown table here (default: standard output).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Write a CDF of all scenarios here (SVG).
    #[arg(long)]
    cdf: Option<PathBuf>,
    /// Write one line per scenario here: label, p50 ns, p99 ns, calls/s, errors (tab-separated).
    #[arg(long)]
    tsv: Option<PathBuf>,
    /// Only scenarios whose label contains this in the CDF (repeatable).
    #[arg(long)]
    cdf_only: Vec<String>,
    #[arg(long, default_value = "latency CDF")]
    title: String,
    /// Merge reports whose labels differ only by a trailing round marker (`… r1`,
    /// `… r2`) into one row per scenario: the median over rounds of every figure.
    #[arg(long)]
    rounds: bool,
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Run(args) => run(args),
        Command::Report(args) => merge(args),
        Command::Pair(args) => pair(args),
    }
}

fn pair(a: PairArgs) -> Result<()> {
    let spec = netaccel_bench::pair::PairSpec {
        a: Target::parse(&a.a)?,
        b: Target::parse(&a.b)?,
        size: a.size,
        calls: a.calls,
        warmup_calls: a.warmup_calls,
        blocks: a.blocks,
        timeout: secs(a.timeout, "--timeout")?,
    };
    let measured = netaccel_bench::pair::run(&spec)?;
    print!("{}", measured.lines());
    Ok(())
}

fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num.parse().map_err(|_| format!("{text:?} is not a size"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "kb" => 1 << 10,
        "m" | "mib" | "mb" => 1 << 20,
        _ => return Err(format!("{text:?}: unknown unit (B, KiB, MiB)")),
    };
    let bytes = n * mult;
    if bytes > 64 << 20 {
        return Err(format!("{text:?}: payloads are limited to 64 MiB"));
    }
    Ok(bytes)
}

fn parse_tenant(text: &str) -> Result<load::Tenant, String> {
    let (name, token) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?}: expected NAME:TOKEN"))?;
    if name.is_empty() {
        return Err(format!("{text:?}: empty tenant name"));
    }
    Ok(load::Tenant {
        name: name.to_owned(),
        token: token.to_owned(),
    })
}

fn secs(s: f64, what: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(s)
        .with_context(|| format!("{what}: {s} is not a duration in seconds"))
}

/// CPUs, the load generator's CPU set, and the note.
fn machine(note: &str) -> String {
    let cpus = std::fs::read_to_string("/proc/cpuinfo")
        .map(|s| s.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(0);
    let allowed = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Cpus_allowed_list:")
                    .map(|v| v.trim().to_owned())
            })
        })
        .unwrap_or_else(|| "?".into());
    let mut m = format!("{cpus} CPUs; load generator on CPU {allowed}");
    if !note.is_empty() {
        m.push_str("; ");
        m.push_str(note);
    }
    m
}

fn run(a: RunArgs) -> Result<()> {
    let base = spec_of(&a)?;
    let (steps, sweep_desc) = sweep_steps(&base, a.sweep.as_deref())?;
    let machine = machine(&a.note);
    eprintln!("{} → {}; {machine}", a.target, describe(&base));
    let label = a.label.clone().unwrap_or_else(|| a.target.clone());
    let mut scenarios = Vec::new();
    for (x, spec) in &steps {
        let step_label = match (&sweep_desc, x) {
            (Some((key, _)), x) => format!("{label} {key}={x}"),
            _ => label.clone(),
        };
        let recorded = run_with_progress(spec, &step_label, a.quiet)?;
        let scenario = Scenario::new(&step_label, &a.target, spec, &recorded, &machine);
        if steps.len() > 1 {
            eprint!(
                "{}",
                report::terminal_table(std::slice::from_ref(&scenario))
            );
        }
        scenarios.push(scenario);
    }
    print!("{}", report::terminal_table(&scenarios));
    if let Some(path) = &a.json {
        let doc = Document {
            scenarios: scenarios.clone(),
        };
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(dir) = &a.plot_dir {
        figures(dir, &scenarios, &steps, &sweep_desc, &label)?;
    }
    let failed = scenarios.iter().all(|s| s.ok == 0);
    if failed {
        bail!("no call succeeded");
    }
    Ok(())
}

/// The run's [`Spec`] from the command line (before any sweep).
fn spec_of(a: &RunArgs) -> Result<Spec> {
    let target = Target::parse(&a.target)?;
    let method = a.method.unwrap_or(match &target {
        Target::Http { function: None, .. } => Method::Get,
        _ => Method::Post,
    });
    let spec = Spec {
        target: target.clone(),
        method,
        size: a.size,
        conns: a.conns,
        inflight: a.inflight,
        threads: a.threads,
        duration: secs(
            a.duration
                .unwrap_or(if a.calls.is_some() { 600.0 } else { 5.0 }),
            "--duration",
        )?,
        warmup: secs(a.warmup, "--warmup")?,
        mode: match a.rate {
            Some(rate) => Mode::Open {
                rate,
                arrivals: a.arrivals,
            },
            None => Mode::Closed,
        },
        new_conn: a.new_conn,
        timeout: secs(a.timeout, "--timeout")?,
        seed: a.seed,
        calls: a.calls,
        tenant: a.tenant.clone(),
    };
    if matches!(target, Target::InProcess { .. }) && spec.mode != Mode::Closed {
        bail!("inproc targets run closed loop only");
    }
    Ok(spec)
}

/// The latency CDF of every scenario in `dir`, and for a sweep the latency against
/// the swept value.
fn figures(
    dir: &std::path::Path,
    scenarios: &[Scenario],
    steps: &[(f64, Spec)],
    sweep_desc: &Option<(String, String)>,
    label: &str,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    plot::cdf(
        scenarios,
        &format!("latency CDF: {label}"),
        &dir.join("cdf.svg"),
    )?;
    if let Some((_, x_desc)) = sweep_desc {
        let xs: Vec<f64> = steps.iter().map(|(x, _)| *x).collect();
        plot::sweep(
            scenarios,
            &xs,
            x_desc,
            &format!("{label}: latency against {x_desc}"),
            &dir.join("sweep.svg"),
        )?;
    }
    eprintln!("figures in {}", dir.display());
    Ok(())
}

fn describe(spec: &Spec) -> String {
    let mode = match spec.mode {
        Mode::Closed => "closed loop".to_owned(),
        Mode::Open { rate, arrivals } => format!("open loop {rate}/s {arrivals:?}"),
    };
    let length = match spec.calls {
        Some(n) => format!("{n} calls (at most {:?})", spec.duration),
        None => format!("{:?}", spec.duration),
    };
    let tenant = match &spec.tenant {
        Some(t) => format!(", tenant {}", t.name),
        None => String::new(),
    };
    format!(
        "{mode}, {} conn × {} in flight, {} thread(s), {} B, {length} + {:?} warm-up{tenant}",
        spec.conns, spec.inflight, spec.threads, spec.size, spec.warmup
    )
}

type Steps = (Vec<(f64, Spec)>, Option<(String, String)>);

fn sweep_steps(base: &Spec, sweep: Option<&str>) -> Result<Steps> {
    let Some(sweep) = sweep else {
        return Ok((vec![(0.0, base.clone())], None));
    };
    let (key, values) = sweep.split_once('=').context("--sweep KEY=V1,V2,…")?;
    let mut steps = Vec::new();
    for v in values.split(',').filter(|v| !v.is_empty()) {
        let mut spec = base.clone();
        let x = match key {
            "size" => {
                spec.size = parse_size(v).map_err(anyhow::Error::msg)?;
                spec.size as f64
            }
            "conns" => {
                spec.conns = v.parse().with_context(|| format!("conns {v:?}"))?;
                spec.conns as f64
            }
            "inflight" => {
                spec.inflight = v.parse().with_context(|| format!("inflight {v:?}"))?;
                spec.inflight as f64
            }
            "rate" => {
                let rate: f64 = v.parse().with_context(|| format!("rate {v:?}"))?;
                let arrivals = match base.mode {
                    Mode::Open { arrivals, .. } => arrivals,
                    Mode::Closed => Arrivals::Constant,
                };
                spec.mode = Mode::Open { rate, arrivals };
                rate
            }
            _ => bail!("--sweep: {key:?} is not size, conns, inflight or rate"),
        };
        steps.push((x, spec));
    }
    if steps.is_empty() {
        bail!("--sweep {key}= has no values");
    }
    let desc = match key {
        "size" => "payload bytes",
        "conns" => "connections",
        "inflight" => "calls in flight per connection",
        _ => "offered rate (calls/s)",
    };
    Ok((steps, Some((key.to_owned(), desc.to_owned()))))
}

/// Runs one spec; a progress bar on standard error for runs longer than 3 s.
fn run_with_progress(spec: &Spec, label: &str, quiet: bool) -> Result<load::Recorded> {
    let total = spec.warmup + spec.duration;
    let progress = Arc::new(AtomicU64::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let bar = (!quiet && total > Duration::from_secs(3)).then(|| {
        let bar = ProgressBar::new(total.as_millis() as u64);
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {elapsed}/{duration} {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(label.to_owned());
        bar
    });
    let ticker = bar.clone().map(|bar| {
        let progress = progress.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                bar.set_position(t0.elapsed().as_millis() as u64);
                bar.set_message(format!("{} calls", progress.load(Ordering::Relaxed)));
            }
            bar.finish_and_clear();
        })
    });
    let recorded = load::run(spec, progress);
    done.store(true, Ordering::Relaxed);
    if let Some(t) = ticker {
        let _ = t.join();
    }
    recorded
}

fn merge(a: ReportArgs) -> Result<()> {
    let mut scenarios = Vec::new();
    for f in &a.files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let doc: Document =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", f.display()))?;
        scenarios.extend(doc.scenarios);
    }
    if a.rounds {
        scenarios = report::median_over_rounds(scenarios);
    }
    let table = report::markdown_table(&scenarios);
    match &a.markdown {
        Some(path) => std::fs::write(path, &table)?,
        None => print!("{table}"),
    }
    if let Some(path) = &a.tsv {
        let lines: String = scenarios
            .iter()
            .map(|s| {
                format!(
                    "{}\t{}\t{}\t{:.0}\t{}\n",
                    s.label,
                    s.latency.p50_ns,
                    s.latency.p99_ns,
                    s.calls_per_s,
                    s.error_count()
                )
            })
            .collect();
        std::fs::write(path, lines)?;
    }
    if let Some(path) = &a.cdf {
        let chosen: Vec<Scenario> = scenarios
            .into_iter()
            .filter(|s| {
                a.cdf_only.is_empty() || a.cdf_only.iter().any(|k| s.label.contains(k.as_str()))
            })
            .collect();
        plot::cdf(&chosen, &a.title, Path::new(path))?;
    }
    Ok(())
}
