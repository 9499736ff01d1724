//! `netaccel`: call accelerators and manage a node from the command line.
//!
//! Exit codes: 0 success, 1 the node answered with an error, 2 bad usage or a local
//! file problem, 3 the node could not be reached.

mod table;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use netaccel_client::rac::{RacClient, RacError};
use netaccel_client::{base_url, CallOutput, ClientError, NodeClient};
use table::Align;

const EXIT_CODES: &str = "\
Exit status: 0 success, 1 the node answered with an error, 2 bad usage or a local file
problem, 3 the node could not be reached.

Examples:
  netaccel slots
  printf abc | netaccel call to_uppercase
  netaccel --node 10.0.0.7:8080 call topk -p k=3 -i values.bin -o top.bin
  netaccel call to_uppercase --rac 10.0.0.7:9400 < in.txt";

#[derive(Parser, Debug)]
#[command(
    name = "netaccel",
    version,
    about = "Call accelerators on a netaccel node",
    after_help = EXIT_CODES
)]
struct Cli {
    /// The node's HTTP API: HOST:PORT or http://HOST:PORT.
    #[arg(
        long,
        global = true,
        env = "NETACCEL_NODE",
        default_value = "http://127.0.0.1:8080",
        value_name = "ADDR",
        value_parser = base_url
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
    /// List the node's accelerators: id, name, parameters and the slots hosting each.
    Accelerators {
        /// Print the node's JSON document (GET /v1/accelerators) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List the node's slots: what each holds, its state, queue depth and utilisation.
    Slots {
        /// Print the node's JSON document (GET /v1/slots) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Load an accelerator into a slot (runtime reconfiguration).
    Load {
        /// The slot's id (see `netaccel slots`).
        slot: u16,
        /// The accelerator to load (see `netaccel accelerators`).
        name: String,
        /// Admin token, when the node has one (`admin_token` in its configuration).
        #[arg(long, env = "NETACCEL_TOKEN")]
        token: Option<String>,
    },
}

enum Failure {
    Usage(String),
    /// The node answered with an error.
    Client(ClientError),
    /// The node could not be reached, or the exchange broke off: what failed, where.
    Unreachable(String),
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
        Err(Failure::Client(ClientError::Transport(m))) => {
            eprintln!(
                "netaccel: cannot reach the node's HTTP API at {}: {m} (is a node listening there? \
                 --node or NETACCEL_NODE chooses another)",
                cli.node
            );
            ExitCode::from(3)
        }
        Err(Failure::Unreachable(m)) => {
            eprintln!("netaccel: {m}");
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
            let mut rows = Vec::new();
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
                rows.push(vec![
                    a["id"].to_string(),
                    a["name"].as_str().unwrap_or("?").to_string(),
                    dash_if_empty(params.join(",")),
                    dash_if_empty(slots.join(",")),
                ]);
            }
            let headers = [
                ("id", Align::Right),
                ("name", Align::Left),
                ("params", Align::Left),
                ("slots", Align::Left),
            ];
            print!("{}", table::render(&headers, &rows));
            Ok(())
        }
        Command::Slots { json } => {
            let doc = client.slots()?;
            if json {
                println!("{doc}");
                return Ok(());
            }
            let rows: Vec<Vec<String>> = doc
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| {
                    vec![
                        s["id"].to_string(),
                        s["device"].as_str().unwrap_or("?").to_string(),
                        s["accelerator"].as_str().unwrap_or("?").to_string(),
                        s["state"].as_str().unwrap_or("?").to_string(),
                        s["queue_depth"].to_string(),
                        format!("{:.1}%", s["busy_ratio"].as_f64().unwrap_or(0.0) * 100.0),
                    ]
                })
                .collect();
            let headers = [
                ("slot", Align::Right),
                ("device", Align::Left),
                ("accelerator", Align::Left),
                ("state", Align::Left),
                ("queue", Align::Right),
                ("busy", Align::Right),
            ];
            print!("{}", table::render(&headers, &rows));
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

fn dash_if_empty(s: String) -> String {
    if s.is_empty() {
        "-".to_string()
    } else {
        s
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
    let (id, block) =
        netaccel_client::rac::builtin_call(name, params, payload.len()).map_err(Failure::Usage)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = RacClient::connect(addr)
            .await
            .map_err(|e| rac_failure(addr, e))?;
        let out = client
            .call(id, block, payload, deadline_us.unwrap_or(0))
            .await
            .map_err(|e| rac_failure(addr, e))?;
        Ok(CallOutput {
            output: out.payload,
            queue_ns: out.header.queue_ns,
            exec_ns: out.header.exec_ns,
            slot: out.header.slot(),
        })
    })
}

/// A RAC failure says what failed on which address; it never points at the HTTP API,
/// which a `--rac` call does not use.
fn rac_failure(addr: &str, e: RacError) -> Failure {
    match e {
        e @ RacError::Connect { .. } => Failure::Unreachable(e.to_string()),
        RacError::Transport(m) => {
            Failure::Unreachable(format!("RAC call to {addr} broke off: {m}"))
        }
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
