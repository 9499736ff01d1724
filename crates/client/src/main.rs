//! `netaccel`: call accelerators and manage a node from the command line.
//!
//! Exit codes: 0 success, 1 the node answered with an error, 2 bad usage or a local
//! file problem, 3 the node could not be reached.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use netaccel_client::rac::{RacClient, RacError};
use netaccel_client::{CallOutput, ClientError, NodeClient};

#[derive(Parser, Debug)]
#[command(
    name = "netaccel",
    version,
    about = "Call accelerators on a netaccel node"
)]
struct Cli {
    /// Node base URL.
    #[arg(
        long,
        global = true,
        env = "NETACCEL_NODE",
        default_value = "http://127.0.0.1:8080"
    )]
    node: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Call an accelerator: payload from -i (default stdin), output to -o (default stdout).
    Call {
        /// Accelerator name (see `netaccel accelerators`).
        name: String,
        /// Parameter, repeatable: -p k=10 -p width=640.
        #[arg(short = 'p', long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
        /// Payload file, or - for stdin.
        #[arg(short = 'i', long = "input", default_value = "-")]
        input: String,
        /// Output file, or - for stdout.
        #[arg(short = 'o', long = "output", default_value = "-")]
        output: String,
        /// The call must start executing within this many microseconds.
        #[arg(long)]
        deadline_us: Option<u32>,
        /// Print queue and execution time and the slot to stderr.
        #[arg(short, long)]
        verbose: bool,
        /// Call over RAC v1 at this address (HOST:PORT) instead of HTTP.
        #[arg(long, value_name = "HOST:PORT")]
        rac: Option<String>,
    },
    /// List the node's accelerators.
    Accelerators {
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the node's slots.
    Slots {
        #[arg(long)]
        json: bool,
    },
    /// Load an accelerator into a slot (runtime reconfiguration).
    Load {
        slot: u16,
        name: String,
        /// Admin token, if the node has one.
        #[arg(long, env = "NETACCEL_TOKEN")]
        token: Option<String>,
    },
}

enum Failure {
    Usage(String),
    Client(ClientError),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        Failure::Client(e)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let client = NodeClient::new(&cli.node);
    match run(&client, cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(m)) => {
            eprintln!("netaccel: {m}");
            ExitCode::from(2)
        }
        Err(Failure::Client(e @ ClientError::Node { .. })) => {
            eprintln!("netaccel: {e}");
            ExitCode::from(1)
        }
        Err(Failure::Client(e)) => {
            eprintln!("netaccel: {e} (is a node running at {}?)", cli.node);
            ExitCode::from(3)
        }
    }
}

fn run(client: &NodeClient, command: Command) -> Result<(), Failure> {
    match command {
        Command::Call {
            name,
            params,
            input,
            output,
            deadline_us,
            verbose,
            rac,
        } => {
            let params = params
                .iter()
                .map(|p| match p.split_once('=') {
                    Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
                    _ => Err(Failure::Usage(format!(
                        "parameter `{p}` must look like name=value"
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let payload = read_input(&input)?;
            let out = match rac {
                Some(addr) => call_rac(&addr, &name, &params, payload, deadline_us)?,
                None => client.call(&name, &params, &payload, deadline_us)?,
            };
            if verbose {
                let slot = out.slot.map_or("none".to_string(), |s| s.to_string());
                eprintln!(
                    "slot {slot}, queue {} ns, exec {} ns, {} bytes",
                    out.queue_ns,
                    out.exec_ns,
                    out.output.len()
                );
            }
            write_output(&output, &out.output)
        }
        Command::Accelerators { json } => {
            let doc = client.accelerators()?;
            if json {
                println!("{doc}");
                return Ok(());
            }
            println!("{:>4}  {:<14} {:<24} slots", "id", "name", "params");
            for a in doc.as_array().into_iter().flatten() {
                let params: Vec<String> = a["params"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        format!(
                            "{}:{}",
                            p["name"].as_str().unwrap_or("?"),
                            p["type"].as_str().unwrap_or("?")
                        )
                    })
                    .collect();
                let slots: Vec<String> = a["slots"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|s| s.to_string())
                    .collect();
                println!(
                    "{:>4}  {:<14} {:<24} {}",
                    a["id"],
                    a["name"].as_str().unwrap_or("?"),
                    params.join(","),
                    if slots.is_empty() {
                        "-".to_string()
                    } else {
                        slots.join(",")
                    }
                );
            }
            Ok(())
        }
        Command::Slots { json } => {
            let doc = client.slots()?;
            if json {
                println!("{doc}");
                return Ok(());
            }
            println!(
                "{:>4}  {:<6} {:<14} {:<14} {:>5}  busy",
                "slot", "device", "accelerator", "state", "queue"
            );
            for s in doc.as_array().into_iter().flatten() {
                println!(
                    "{:>4}  {:<6} {:<14} {:<14} {:>5}  {:.1}%",
                    s["id"],
                    s["device"].as_str().unwrap_or("?"),
                    s["accelerator"].as_str().unwrap_or("?"),
                    s["state"].as_str().unwrap_or("?"),
                    s["queue_depth"],
                    s["busy_ratio"].as_f64().unwrap_or(0.0) * 100.0
                );
            }
            Ok(())
        }
        Command::Load { slot, name, token } => {
            let report = client.load(slot, &name, token.as_deref())?;
            println!(
                "slot {} now holds {} (reconfiguration took {:.3} ms)",
                report["slot"],
                report["accelerator"].as_str().unwrap_or("?"),
                report["reconfig_ms"].as_f64().unwrap_or(0.0)
            );
            Ok(())
        }
    }
}

/// One call over RAC: parameters by name are laid out with the built-in catalog's specs.
fn call_rac(
    addr: &str,
    name: &str,
    params: &[(String, String)],
    payload: Vec<u8>,
    deadline_us: Option<u32>,
) -> Result<CallOutput, Failure> {
    let catalog = accel::Catalog::builtin();
    let accel = catalog.by_name(name).ok_or_else(|| {
        Failure::Usage(format!(
            "{name} is not a built-in accelerator; RAC calls need its id"
        ))
    })?;
    let d = accel.descriptor();
    let block = accel::params_from_pairs(
        &d.params,
        params.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    )
    .map_err(|e| Failure::Usage(e.to_string()))?;
    accel
        .check(&block, Some(payload.len()))
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = RacClient::connect(addr).await.map_err(rac_failure)?;
        let out = client
            .call(d.id, block, payload, deadline_us.unwrap_or(0))
            .await
            .map_err(rac_failure)?;
        Ok(CallOutput {
            output: out.payload,
            queue_ns: out.header.queue_ns,
            exec_ns: out.header.exec_ns,
            slot: out.header.slot(),
        })
    })
}

fn rac_failure(e: RacError) -> Failure {
    match e {
        RacError::Transport(m) => Failure::Client(ClientError::Transport(m)),
        RacError::Status {
            status, message, ..
        } => Failure::Client(ClientError::Node {
            http_status: 0,
            code: status.name().to_string(),
            message,
        }),
    }
}

fn read_input(input: &str) -> Result<Vec<u8>, Failure> {
    let mut data = Vec::new();
    let result = if input == "-" {
        std::io::stdin().read_to_end(&mut data).map(|_| ())
    } else {
        std::fs::File::open(PathBuf::from(input))
            .and_then(|mut f| f.read_to_end(&mut data))
            .map(|_| ())
    };
    result.map_err(|e| Failure::Usage(format!("cannot read {input}: {e}")))?;
    Ok(data)
}

fn write_output(output: &str, data: &[u8]) -> Result<(), Failure> {
    let result = if output == "-" {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(data).and_then(|_| stdout.flush())
    } else {
        std::fs::write(output, data)
    };
    result.map_err(|e| Failure::Usage(format!("cannot write {output}: {e}")))
}
