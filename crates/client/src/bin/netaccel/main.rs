//! `netaccel`: call accelerators and manage a node, or a cluster through its registry,
//! from the command line.
//!
//! Exit codes: 0 success, 1 the node or registry answered with an error, 2 bad usage or
//! a local file problem, 3 the node or registry could not be reached.

mod rtl;
mod table;
mod usage;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use netaccel_client::rac::{RacClient, RacError};
use netaccel_client::registry::{
    host_of, Bound, BoundError, BoundOptions, RegistryClient, RegistryError, Via,
};
use netaccel_client::{base_url, tls_advice, CallOutput, ClientError, NodeClient};
use registry_api::{FunctionSpec, FunctionView, NodeView, Query};
use table::Align;

const EXIT_CODES: &str = "\
Each command has options of its own, listed by `netaccel COMMAND --help` (`netaccel call
--help`, `netaccel functions create --help`, ...). The options above may be given before
or after the command; each command's page lists those it uses.

Exit status: 0 success, 1 the node or registry answered with an error (or the registry
had no binding for the instance in time), 2 bad usage or a local file problem, 3 the node
or registry could not be reached.

Examples:
  netaccel slots
  printf abc | netaccel call to_uppercase
  netaccel --node 10.0.0.7:8080 call topk -p k=3 -i values.bin -o top.bin
  netaccel call to_uppercase --rac 10.0.0.7:9400 < in.txt
  netaccel --node https://node-3:8443 --cacert ca.pem call to_uppercase < in.txt
  netaccel --cacert ca.pem --cert me.pem --key me.key call to_uppercase --rac rac+tls://node-3:9443
  netaccel --registry 10.0.0.2:7400 functions create shout --accelerator to_uppercase
  printf abc | netaccel --registry 10.0.0.2:7400 call --function shout --via rac
  netaccel nodes";

const CALL_THROUGH_REGISTRY: &str = "\
With --function F instead of a name, the call goes through the registry's binding: an
instance of F is bound, the node it is bound to is called directly, and if that node is
lost or no longer serves the accelerator, the call waits for the registry to rebind the
instance and is retried once. With --tls it calls the node's HTTPS (or, --via rac, its
RAC-over-TLS) address, which the node registered, trusting --cacert.";

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
    /// The registry's HTTP API, for `nodes`, `functions` and `call --function`; several
    /// replicas comma-separated (writes go to the one that leads).
    #[arg(
        long,
        global = true,
        env = "NETACCEL_REGISTRY",
        default_value = "http://127.0.0.1:7400",
        value_name = "URL",
        value_parser = registry_url
    )]
    registry: String,
    /// The registry's admin token, sent with its writes (creating functions, instances).
    #[arg(
        long,
        global = true,
        env = "NETACCEL_REGISTRY_TOKEN",
        value_name = "TOKEN"
    )]
    registry_token: Option<String>,
    /// TLS: the CA certificates (PEM) to trust for https:// nodes, rac+tls:// and
    /// --tls. Without it, an https:// node must have a publicly trusted certificate.
    #[arg(long, global = true, env = "NETACCEL_CACERT", value_name = "FILE")]
    cacert: Option<PathBuf>,
    /// TLS: a client certificate chain (PEM) to present, for nodes that ask for one
    /// (mutual TLS); with --key.
    #[arg(
        long,
        global = true,
        env = "NETACCEL_CERT",
        value_name = "FILE",
        requires = "key"
    )]
    cert: Option<PathBuf>,
    /// TLS: the client certificate's private key (PEM); with --cert.
    #[arg(
        long,
        global = true,
        env = "NETACCEL_KEY",
        value_name = "FILE",
        requires = "cert"
    )]
    key: Option<PathBuf>,
    /// Call as this tenant (docs/security.md): over RAC a `hello` names it before the
    /// call; over HTTP the token alone says who calls.
    #[arg(long, global = true, env = "NETACCEL_TENANT", value_name = "NAME")]
    tenant: Option<String>,
    /// The tenant's token: `Authorization: Bearer TOKEN` on every request to the node,
    /// and in the RAC `hello` (with --tenant).
    #[arg(
        long,
        global = true,
        env = "NETACCEL_TENANT_TOKEN",
        value_name = "TOKEN"
    )]
    tenant_token: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// Who calls: [`Cli::tenant`] and [`Cli::tenant_token`].
struct Caller {
    tenant: Option<String>,
    token: Option<String>,
}

impl Caller {
    /// The tenant a RAC connection says `hello` as, or a usage error when only a token
    /// was given (the RAC `hello` names the tenant; HTTP needs only the token).
    fn rac_tenant(&self) -> Result<Option<&str>, Failure> {
        match (&self.tenant, &self.token) {
            (None, Some(_)) => Err(Failure::Usage(
                "over RAC, --tenant-token needs --tenant NAME (the RAC hello names the tenant)"
                    .into(),
            )),
            (tenant, _) => Ok(tenant.as_deref()),
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Call an accelerator: payload from -i (default stdin), output to -o (default stdout).
    #[command(
        after_help = CALL_THROUGH_REGISTRY,
        override_usage = "netaccel [--node ADDR] call [OPTIONS] <NAME>\n       \
                          netaccel [--registry URL] call [OPTIONS] --function <F>"
    )]
    Call {
        /// Accelerator name (see `netaccel accelerators`).
        #[arg(required_unless_present = "function", conflicts_with = "function")]
        name: Option<String>,
        /// Call through an instance of this registry function (see `netaccel functions`).
        #[arg(long, value_name = "F", conflicts_with = "rac")]
        function: Option<String>,
        /// With --function: call the bound node over HTTP or RAC.
        #[arg(long, value_enum, default_value = "http", requires = "function")]
        via: ViaArg,
        /// With --function: call the bound node's TLS address (HTTPS, or RAC over TLS
        /// with --via rac), trusting --cacert.
        #[arg(long, requires = "function")]
        tls: bool,
        /// With --function: use this instance (created if the registry does not know it)
        /// and keep it afterwards; without it a new instance is bound and released.
        #[arg(
            long,
            env = "NETACCEL_INSTANCE",
            value_name = "ID",
            requires = "function"
        )]
        instance: Option<String>,
        /// With --function: how long to wait for the registry to rebind a lost instance.
        #[arg(
            long,
            default_value = "10000",
            value_name = "MS",
            requires = "function"
        )]
        rebind_wait_ms: u64,
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
        /// Call over RAC v1 at this address instead of HTTP: HOST:PORT or
        /// rac://HOST:PORT, or rac+tls://HOST:PORT for RAC over TLS (with --cacert).
        #[arg(long, value_name = "ADDR")]
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
    #[command(override_usage = "netaccel [--node ADDR] load [--token TOKEN] <SLOT> <NAME>")]
    Load {
        /// The slot's id (see `netaccel slots`).
        slot: u16,
        /// The accelerator to load (see `netaccel accelerators`).
        name: String,
        /// Admin token, when the node has one (`admin_token` in its configuration).
        #[arg(long, env = "NETACCEL_TOKEN")]
        token: Option<String>,
    },
    /// List the registry's nodes: one row per slot, with what it holds, its
    /// utilisation and the instances bound to it.
    Nodes {
        /// Print the registry's JSON document (GET /v1/nodes) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Create, show, delete or scale the registry's functions.
    #[command(subcommand)]
    Functions(FunctionsCommand),
    /// Build or estimate an RTL accelerator's design on this machine (docs/rtl.md).
    #[command(subcommand)]
    Rtl(rtl::RtlCommand),
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum ViaArg {
    Http,
    Rac,
}

#[derive(Subcommand, Debug)]
enum FunctionsCommand {
    /// Create (or update) a function; the registry allocates its instances.
    #[command(
        override_usage = "netaccel [--registry URL] functions create [OPTIONS] --accelerator <ACCELERATOR> <NAME>"
    )]
    Create {
        /// The function's name (letters, digits, '.', '_' and '-').
        name: String,
        /// The accelerator its instances need.
        #[arg(long)]
        accelerator: String,
        /// The accelerator's bitstream hash, when it matters.
        #[arg(long)]
        hash: Option<String>,
        /// Only slots of this backend (cpu, opencl, rtl).
        #[arg(long)]
        backend: Option<String>,
        /// Only slots of this vendor.
        #[arg(long)]
        vendor: Option<String>,
        /// Only slots of this node.
        #[arg(long = "on-node", value_name = "NODE")]
        on_node: Option<String>,
        /// Instances to allocate now.
        #[arg(long, default_value = "0")]
        instances: u32,
        /// Refuse (exit status 1) instead of warning when no registered node offers
        /// the accelerator.
        #[arg(long)]
        strict: bool,
    },
    /// Show a function and where each of its instances is bound.
    #[command(override_usage = "netaccel [--registry URL] functions get [--json] <NAME>")]
    Get {
        /// The function's name.
        name: String,
        /// Print the registry's JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Delete a function and release its instances.
    #[command(override_usage = "netaccel [--registry URL] functions delete <NAME>")]
    Delete {
        /// The function's name.
        name: String,
    },
    /// Set a function's number of instances.
    #[command(override_usage = "netaccel [--registry URL] functions scale <NAME> <INSTANCES>")]
    Scale {
        /// The function's name.
        name: String,
        /// The number of instances the registry allocates or releases to reach.
        instances: u32,
    },
}

enum Failure {
    Usage(String),
    /// The node answered with an error.
    Client(ClientError),
    /// The node could not be reached, or the exchange broke off: what failed, where.
    Unreachable(String),
    Registry(RegistryError),
    Bound(BoundError),
    /// The CLI itself refused what the registry would have done (`--strict`).
    Refused(String),
}

impl From<RegistryError> for Failure {
    fn from(e: RegistryError) -> Self {
        Failure::Registry(e)
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        Failure::Client(e)
    }
}

fn main() -> ExitCode {
    let matches = usage::scope_shared_options(Cli::command()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let tls = match &cli.cacert {
        Some(ca) => {
            let client = cli.cert.as_deref().zip(cli.key.as_deref());
            match netaccel_client::rac::tls_config(ca, client) {
                Ok(config) => Some(config),
                Err(e) => {
                    eprintln!("netaccel: TLS: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        None if cli.cert.is_some() => {
            eprintln!(
                "netaccel: --cert needs --cacert (the CA that signed the node's certificate)"
            );
            return ExitCode::from(2);
        }
        None => None,
    };
    let client = match &tls {
        Some(tls) if cli.node.starts_with("https://") => {
            NodeClient::with_tls(&cli.node, Arc::clone(tls))
        }
        _ => NodeClient::new(&cli.node),
    };
    let client = match &cli.tenant_token {
        Some(token) => client.with_token(token.clone()),
        None => client,
    };
    let registry = RegistryClient::new(&cli.registry, cli.registry_token.as_deref());
    let caller = Caller {
        tenant: cli.tenant,
        token: cli.tenant_token,
    };
    match run(&client, &registry, tls, &caller, cli.command) {
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
            match tls_advice(&m) {
                Some(advice) => eprintln!(
                    "netaccel: TLS with the node's HTTP API at {} failed: {m} ({advice})",
                    cli.node
                ),
                None => eprintln!(
                    "netaccel: cannot reach the node's HTTP API at {}: {m} (is a node listening \
                     there? --node or NETACCEL_NODE chooses another)",
                    cli.node
                ),
            }
            ExitCode::from(3)
        }
        Err(Failure::Unreachable(m)) => {
            match tls_advice(&m) {
                Some(advice) => eprintln!("netaccel: {m} ({advice})"),
                None => eprintln!("netaccel: {m}"),
            }
            ExitCode::from(3)
        }
        Err(Failure::Registry(RegistryError::Transport(m)))
        | Err(Failure::Bound(BoundError::Registry(RegistryError::Transport(m)))) => {
            eprintln!(
                "netaccel: cannot reach the registry at {}: {m} (--registry or NETACCEL_REGISTRY \
                 chooses another)",
                cli.registry
            );
            ExitCode::from(3)
        }
        Err(Failure::Registry(e)) => {
            eprintln!("netaccel: {e}");
            ExitCode::from(1)
        }
        Err(Failure::Refused(m)) => {
            eprintln!("netaccel: {m}");
            ExitCode::from(1)
        }
        Err(Failure::Bound(e)) => {
            eprintln!("netaccel: {e}");
            match e {
                BoundError::Call {
                    error: ClientError::Transport(_),
                    ..
                } => ExitCode::from(3),
                _ => ExitCode::from(1),
            }
        }
    }
}

fn run(
    client: &NodeClient,
    registry: &RegistryClient,
    tls: Option<Arc<rustls::ClientConfig>>,
    caller: &Caller,
    command: Command,
) -> Result<(), Failure> {
    match command {
        Command::Call {
            name,
            function,
            via,
            tls: over_tls,
            instance,
            rebind_wait_ms,
            params,
            input,
            output,
            deadline_us,
            verbose,
            rac,
        } => {
            let params = parse_params(&params)?;
            let payload = read_input(&input)?;
            let out = match (function, name, rac) {
                (Some(function), _, _) => {
                    let mut options = bound_options(via, over_tls, tls, instance, rebind_wait_ms)?;
                    if matches!(via, ViaArg::Rac) {
                        caller.rac_tenant()?;
                    }
                    options.tenant = caller.tenant.clone();
                    options.token = caller.token.clone();
                    call_bound(registry, &function, options, &params, &payload, deadline_us)?
                }
                (None, Some(name), Some(addr)) => {
                    let rac = RacAddr::parse(&addr).map_err(Failure::Usage)?;
                    let tenant = caller.rac_tenant()?;
                    let hello = tenant.map(|t| (t, caller.token.as_deref()));
                    call_rac(&rac, tls, hello, &name, &params, payload, deadline_us)?
                }
                (None, Some(name), None) => client.call(&name, &params, &payload, deadline_us)?,
                (None, None, _) => unreachable!("clap requires a name or --function"),
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
            print!("{}", accelerators_table(&doc));
            Ok(())
        }
        Command::Slots { json } => {
            let doc = client.slots()?;
            if json {
                println!("{doc}");
                return Ok(());
            }
            print!("{}", slots_table(&doc));
            Ok(())
        }
        Command::Load { slot, name, token } => {
            let report = load_with_progress(client, slot, &name, token.as_deref())?;
            println!(
                "slot {} now holds {} (reconfiguration took {:.3} ms)",
                report["slot"],
                report["accelerator"].as_str().unwrap_or("?"),
                report["reconfig_ms"].as_f64().unwrap_or(0.0)
            );
            Ok(())
        }
        Command::Nodes { json } => {
            let doc = registry.nodes()?;
            if json {
                println!("{}", as_json(&doc));
                return Ok(());
            }
            print!("{}", nodes_table(&doc));
            Ok(())
        }
        Command::Functions(command) => functions(registry, command),
        // A design that does not build is a local file problem (exit status 2).
        Command::Rtl(command) => rtl::run(command).map_err(Failure::Usage),
    }
}

/// `name=value` pairs of `--param`.
/// How long `netaccel load` waits for the node's answer before it says on stderr that
/// the load is still going, and then between two such lines: loading an RTL design that
/// is not yet built takes tens of seconds (Verilator), and a silent command that long
/// reads as a hang.
const LOAD_PROGRESS_FIRST: Duration = Duration::from_secs(1);
const LOAD_PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// `NodeClient::load`, saying on stderr how the load goes while the node has not
/// answered (stdout keeps only the result line).
fn load_with_progress(
    client: &NodeClient,
    slot: u16,
    name: &str,
    token: Option<&str>,
) -> Result<serde_json::Value, ClientError> {
    let started = Instant::now();
    std::thread::scope(|scope| {
        let (done, answer) = mpsc::channel();
        scope.spawn(move || {
            let _ = done.send(client.load(slot, name, token));
        });
        let mut wait = LOAD_PROGRESS_FIRST;
        loop {
            match answer.recv_timeout(wait) {
                Ok(result) => return result,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    eprintln!("{}", load_progress(client, slot, name, started.elapsed()));
                    wait = LOAD_PROGRESS_EVERY;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(ClientError::Transport(
                        "the load request ended without an answer".to_string(),
                    ))
                }
            }
        }
    })
}

/// One progress line of `netaccel load`, from the slot's document.
fn load_progress(client: &NodeClient, slot: u16, name: &str, elapsed: Duration) -> String {
    let so_far = format!(
        "loading {name} into slot {slot}: {} s so far",
        elapsed.as_secs()
    );
    match client.slot(slot) {
        Ok(doc) if doc["backend"] == "rtl" => format!(
            "{so_far}; the slot is {}: an RTL design is built with Verilator on its first \
             load (tens of seconds), later loads come from the build cache",
            doc["state"].as_str().unwrap_or("?")
        ),
        Ok(doc) => format!(
            "{so_far}; the slot is {}",
            doc["state"].as_str().unwrap_or("?")
        ),
        Err(e) => format!("{so_far}; the slot's state is not known ({e})"),
    }
}

fn parse_params(params: &[String]) -> Result<Vec<(String, String)>, Failure> {
    params
        .iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(Failure::Usage(format!(
                "parameter `{p}` must look like name=value"
            ))),
        })
        .collect()
}

/// How `call --function` binds: the way to call (`--via`, `--tls`) and the instance.
fn bound_options(
    via: ViaArg,
    over_tls: bool,
    tls: Option<Arc<rustls::ClientConfig>>,
    instance: Option<String>,
    rebind_wait_ms: u64,
) -> Result<BoundOptions, Failure> {
    if over_tls && tls.is_none() {
        return Err(Failure::Usage(
            "--tls needs --cacert FILE (the CA that signed the nodes' certificates)".into(),
        ));
    }
    Ok(BoundOptions {
        via: match (via, over_tls) {
            (ViaArg::Http, false) => Via::Http,
            (ViaArg::Rac, false) => Via::Rac,
            (ViaArg::Http, true) => Via::Https,
            (ViaArg::Rac, true) => Via::RacTls,
        },
        tls,
        instance,
        rebind_wait: std::time::Duration::from_millis(rebind_wait_ms),
        // One call: a failed call asks the registry itself.
        watch: false,
        ..BoundOptions::default()
    })
}

/// The node's accelerators (`GET /v1/accelerators`), one row each.
fn accelerators_table(doc: &serde_json::Value) -> String {
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
    table::render(&headers, &rows)
}

/// The node's slots (`GET /v1/slots`), one row each.
fn slots_table(doc: &serde_json::Value) -> String {
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
    table::render(&headers, &rows)
}

/// One call through a binding; an instance the CLI bound itself is released after.
fn call_bound(
    registry: &RegistryClient,
    function: &str,
    options: BoundOptions,
    params: &[(String, String)],
    payload: &[u8],
    deadline_us: Option<u32>,
) -> Result<CallOutput, Failure> {
    let keep = options.instance.is_some();
    let mut bound = Bound::bind(registry.clone(), function, options).map_err(Failure::Bound)?;
    let result = bound.call(params, payload, deadline_us);
    if !keep {
        if let Err(e) = bound.release() {
            eprintln!("netaccel: could not release the instance: {e}");
        }
    }
    result.map_err(Failure::Bound)
}

/// A registry document as JSON, keys sorted (as the registry sends them).
fn as_json<T: serde::Serialize>(doc: &T) -> serde_json::Value {
    serde_json::to_value(doc).expect("registry documents serialise")
}

fn nodes_table(nodes: &[NodeView]) -> String {
    let mut rows = Vec::new();
    for n in nodes {
        for d in &n.devices {
            for s in &d.slots {
                rows.push(vec![
                    n.name.clone(),
                    as_json(&n.state).as_str().unwrap_or("?").to_string(),
                    n.http.to_string(),
                    d.id.clone(),
                    s.id.to_string(),
                    s.accelerator.clone(),
                    format!("{:.1}%", s.utilization * 100.0),
                    dash_if_empty(s.instances.join(",")),
                ]);
            }
        }
    }
    let headers = [
        ("node", Align::Left),
        ("state", Align::Left),
        ("http", Align::Left),
        ("device", Align::Left),
        ("slot", Align::Right),
        ("accelerator", Align::Left),
        ("util", Align::Right),
        ("instances", Align::Left),
    ];
    table::render(&headers, &rows)
}

fn functions(registry: &RegistryClient, command: FunctionsCommand) -> Result<(), Failure> {
    let doc = match command {
        FunctionsCommand::Create {
            name,
            accelerator,
            hash,
            backend,
            vendor,
            on_node,
            instances,
            strict,
        } => {
            check_offered(registry, &accelerator, strict)?;
            let spec = FunctionSpec {
                accelerator,
                hash,
                query: Query {
                    backend,
                    vendor,
                    node: on_node,
                },
                instances,
            };
            registry.put_function(&name, &spec)?
        }
        FunctionsCommand::Get { name, json } => {
            let doc = registry.function(&name)?;
            if json {
                println!("{}", as_json(&doc));
                return Ok(());
            }
            doc
        }
        FunctionsCommand::Delete { name } => {
            registry.delete_function(&name)?;
            println!("function {name} deleted");
            return Ok(());
        }
        FunctionsCommand::Scale { name, instances } => registry.scale_function(&name, instances)?,
    };
    print!("{}", function_table(&doc));
    Ok(())
}

/// Before creating a function: warn (with `strict`, refuse) when no registered node
/// offers `accelerator`, since its instances would then stay unbound. A device that
/// sends no catalog may load anything, so it counts as offering every accelerator.
fn check_offered(
    registry: &RegistryClient,
    accelerator: &str,
    strict: bool,
) -> Result<(), Failure> {
    let nodes = registry.nodes()?;
    let devices = || nodes.iter().flat_map(|n| &n.devices);
    let offers = |d: &registry_api::DeviceView| match &d.accelerators {
        None => true,
        Some(catalog) => catalog.iter().any(|a| a == accelerator),
    };
    if devices().any(|d| offers(d) || d.slots.iter().any(|s| s.accelerator == accelerator)) {
        return Ok(());
    }
    let mut offered: Vec<&str> = devices()
        .flat_map(|d| d.accelerators.iter().flatten())
        .map(String::as_str)
        .collect();
    offered.sort_unstable();
    offered.dedup();
    let offered = if nodes.is_empty() {
        "no node is registered".to_string()
    } else {
        format!("the nodes offer: {}", dash_if_empty(offered.join(", ")))
    };
    let message = format!("no node offers accelerator `{accelerator}` ({offered})");
    if strict {
        return Err(Failure::Refused(format!(
            "{message}; the function is not created (--strict)"
        )));
    }
    eprintln!(
        "netaccel: warning: {message}; the function is created, and its instances stay \
         unbound until a node offers it (--strict refuses instead)"
    );
    Ok(())
}

/// A function: a line saying what it needs, then one row per instance.
fn function_table(doc: &FunctionView) -> String {
    let text = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
    let mut out = format!(
        "function {} needs {} ({} instances)\n",
        doc.name,
        doc.accelerator,
        doc.instances.len()
    );
    let rows: Vec<Vec<String>> = doc
        .instances
        .iter()
        .map(|i| {
            vec![
                i.id.clone(),
                text(i.node.clone()),
                text(i.device.clone()),
                text(i.slot.map(|s| s.to_string())),
                text(i.http.map(|a| a.to_string())),
                text(i.rac.map(|a| a.to_string())),
                i.generation.to_string(),
            ]
        })
        .collect();
    let headers = [
        ("instance", Align::Left),
        ("node", Align::Left),
        ("device", Align::Left),
        ("slot", Align::Right),
        ("http", Align::Left),
        ("rac", Align::Left),
        ("generation", Align::Right),
    ];
    out.push_str(&table::render(&headers, &rows));
    out
}

/// The registry's base URL: written like a node's (`HOST:PORT` or `http://HOST:PORT`),
/// with a message that names the registry when it is neither.
/// One registry URL, or several replicas' comma-separated.
fn registry_url(addrs: &str) -> Result<String, String> {
    let urls = addrs
        .split(',')
        .map(|addr| {
            base_url(addr.trim()).map_err(|_| {
                format!("`{addr}` is not a registry address; give HOST:PORT or http://HOST:PORT (several: comma-separated)")
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(urls.join(","))
}

fn dash_if_empty(s: String) -> String {
    if s.is_empty() {
        "-".to_string()
    } else {
        s
    }
}

/// Where `--rac` points: `HOST:PORT` (or `rac://HOST:PORT`), or `rac+tls://HOST:PORT`.
#[derive(Debug, PartialEq, Eq)]
struct RacAddr {
    addr: String,
    tls: bool,
}

impl RacAddr {
    fn parse(text: &str) -> Result<RacAddr, String> {
        let text = text.trim();
        let (tls, addr) = match text.split_once("://") {
            None => (false, text),
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("rac") => (false, rest),
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("rac+tls") => (true, rest),
            Some((scheme, _)) => {
                return Err(format!(
                    "--rac `{text}`: give HOST:PORT, rac://HOST:PORT or rac+tls://HOST:PORT, not {scheme}://"
                ))
            }
        };
        let addr = addr.trim_end_matches('/');
        match addr.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(RacAddr {
                addr: addr.to_string(),
                tls,
            }),
            _ => Err(format!("--rac `{text}` is not HOST:PORT")),
        }
    }
}

/// One call over RAC (over TLS for `rac+tls://`, trusting `tls`): parameters by name
/// are laid out with the built-in catalog's specs.
/// A call over RAC at `rac`, after a `hello` as `hello`'s tenant (with its token) when
/// given.
fn call_rac(
    rac: &RacAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    hello: Option<(&str, Option<&str>)>,
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
    let addr = rac.addr.as_str();
    let tls = match (rac.tls, tls) {
        (true, None) => {
            return Err(Failure::Usage(format!(
                "rac+tls://{addr} needs --cacert FILE (the CA that signed the node's certificate)"
            )))
        }
        (true, tls) => tls,
        (false, _) => None,
    };
    rt.block_on(async {
        let connected = match tls {
            // The node's certificate must be valid for the host named here.
            Some(tls) => RacClient::connect_tls(addr, &host_of(addr), tls).await,
            None => RacClient::connect(addr).await,
        };
        let client = connected.map_err(|e| rac_failure(addr, e))?;
        if let Some((tenant, token)) = hello {
            client
                .hello(tenant, token)
                .await
                .map_err(|e| rac_failure(addr, e))?;
        }
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
        e @ RacError::NotBuiltin(_) => Failure::Usage(e.to_string()),
        e @ (RacError::Protocol(_) | RacError::Closed(_)) => {
            Failure::Unreachable(format!("RAC call to {addr} broke off: {e}"))
        }
        RacError::Status {
            status, message, ..
        }
        | RacError::Refused { status, message } => Failure::Client(ClientError::Node {
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

#[cfg(test)]
mod tests {
    use super::RacAddr;

    #[test]
    fn rac_addresses_say_whether_they_are_tls() {
        let plain = RacAddr {
            addr: "10.0.0.7:9400".into(),
            tls: false,
        };
        assert_eq!(RacAddr::parse("10.0.0.7:9400"), Ok(plain));
        assert!(!RacAddr::parse("RAC://10.0.0.7:9400").unwrap().tls);
        let tls = RacAddr::parse("rac+tls://node-3:9443/").unwrap();
        assert_eq!((tls.addr.as_str(), tls.tls), ("node-3:9443", true));
        assert!(RacAddr::parse("rac+tls://[::1]:9443").unwrap().tls);
        assert!(RacAddr::parse("https://node-3:9443")
            .unwrap_err()
            .contains("rac+tls://"));
        assert!(RacAddr::parse("node-3").is_err());
        assert!(RacAddr::parse(":9400").is_err());
    }
}
