//! The conformance driver of the Rust client: runs one case of
//! `clients/conformance/cases.json` with this crate's public API ([`RacClient`],
//! [`Bound`]) and prints one JSON line of what it observed; the line's format and the
//! error kinds are in `clients/conformance/README.md`. Not a test by itself: the
//! harness (`clients/conformance/test_conformance.py`) compares the line with the case.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use netaccel_client::rac::{self, ErrorKind, RacClient, RacError, RacOutput};
use netaccel_client::registry::{BoundError, BoundOptions, RegistryClient, Via};
use netaccel_client::ClientError;
use rac_proto::{ControlRequest, Status};
use serde_json::{json, Value};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    cases: PathBuf,
    #[arg(long)]
    case: String,
    #[arg(long)]
    node: Option<String>,
    #[arg(long)]
    registry: Option<String>,
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    #[arg(long)]
    cert: Option<PathBuf>,
    #[arg(long)]
    key: Option<PathBuf>,
    #[arg(long)]
    tenant: Option<String>,
    #[arg(long)]
    token: Option<String>,
}

/// What the driver observed: outputs by call, errors by call, completion order.
struct Report {
    outputs: Vec<Value>,
    errors: Vec<Option<Value>>,
    order: Vec<usize>,
}

impl Report {
    fn new(calls: usize) -> Report {
        Report {
            outputs: vec![Value::Null; calls],
            errors: vec![None; calls],
            order: Vec::new(),
        }
    }

    fn take(&mut self, i: usize, result: Result<Vec<u8>, Value>) {
        self.order.push(i);
        match result {
            Ok(out) => self.outputs[i] = Value::String(hex(&out)),
            Err(e) => self.errors[i] = Some(e),
        }
    }

    fn line(self) -> Value {
        let mut line = json!({"ok": true, "outputs": self.outputs, "order": self.order});
        if let Some((i, e)) = self
            .errors
            .iter()
            .enumerate()
            .find_map(|(i, e)| e.as_ref().map(|e| (i, e)))
        {
            let mut e = e.clone();
            e["call"] = json!(i);
            line["ok"] = json!(false);
            line["error"] = e;
        }
        line
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex in cases.json"))
        .collect()
}

fn payload_of(call: &Value) -> Vec<u8> {
    match call.get("payload_fill") {
        Some(fill) => {
            let byte = unhex(fill["byte"].as_str().expect("fill byte"))[0];
            vec![byte; fill["len"].as_u64().expect("fill len") as usize]
        }
        None => unhex(call["payload_hex"].as_str().unwrap_or_default()),
    }
}

/// A node's answer as the driver's line reports it.
fn status_error(status: Status, message: &str) -> Value {
    let kind = ErrorKind::of_status(status).expect("an error status");
    json!({"kind": kind.name(), "status": status.name(),
           "retryable": kind.retry_after().is_some(), "message": message})
}

/// The client's typed error as the driver's line reports it: the kind is the error's
/// own ([`RacError::kind`]), the status the node's when it answered one.
fn rac_error(e: &RacError) -> Value {
    match e {
        RacError::Status {
            status, message, ..
        }
        | RacError::Refused { status, message } => status_error(*status, message),
        _ => json!({"kind": e.kind().name(), "message": e.to_string()}),
    }
}

/// The accelerator id and parameter block of a call by name (the catalog's specs) or
/// by id (no parameters).
fn resolve(call: &Value, payload_len: usize) -> Result<(u16, rac_proto::ParamBlock), Value> {
    if let Some(id) = call.get("accelerator_id").and_then(Value::as_u64) {
        return Ok((id as u16, [0; 44]));
    }
    let name = call["accelerator"].as_str().unwrap_or_default();
    if rac_proto::builtin::id(name).is_none() {
        let message = format!("{name} is not a built-in accelerator");
        return Err(json!({"kind": "unknown_accelerator", "message": message}));
    }
    let params: Vec<(String, String)> = call
        .get("params")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.to_string())).collect())
        .unwrap_or_default();
    rac::builtin_call(name, &params, payload_len)
        .map_err(|m| json!({"kind": "bad_request", "message": m}))
}

async fn connect(args: &Args) -> Result<RacClient, RacError> {
    let addr = args.node.as_deref().expect("--node or --registry");
    let client = match &args.tls_ca {
        None => RacClient::connect(addr).await?,
        Some(ca) => {
            let pair = args.cert.as_deref().zip(args.key.as_deref());
            let config = rac::tls_config(ca, pair).map_err(|reason| RacError::Connect {
                addr: addr.to_string(),
                reason,
            })?;
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            RacClient::connect_tls(addr, host, config).await?
        }
    };
    if let Some(tenant) = &args.tenant {
        let hello = ControlRequest::Hello {
            tenant: tenant.clone(),
            token: args.token.clone(),
        };
        client.control(&hello).await?;
    }
    Ok(client)
}

async fn run_calls(client: Arc<RacClient>, case: &Value, report: &mut Report) {
    let calls = case["calls"].as_array().expect("calls");
    let pipelined = case["mode"] == "pipelined";
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut in_flight = 0;
    for (i, call) in calls.iter().enumerate() {
        let payload = payload_of(call);
        let (id, block) = match resolve(call, payload.len()) {
            Ok(r) => r,
            Err(e) => {
                report.errors[i] = Some(e);
                continue;
            }
        };
        let deadline = call.get("deadline_us").and_then(Value::as_u64).unwrap_or(0) as u32;
        let client = Arc::clone(&client);
        let call = async move { client.call(id, block, payload, deadline).await };
        if pipelined {
            let done = done_tx.clone();
            tokio::spawn(async move {
                let _ = done.send((i, call.await));
            });
            in_flight += 1;
        } else {
            report.take(i, outcome(call.await));
        }
    }
    for _ in 0..in_flight {
        let (i, result) = done_rx.recv().await.expect("every call answers");
        report.take(i, outcome(result));
    }
}

fn outcome(result: Result<RacOutput, RacError>) -> Result<Vec<u8>, Value> {
    result.map(|out| out.payload).map_err(|e| rac_error(&e))
}

fn bound_error(e: &BoundError) -> Value {
    match e {
        BoundError::Call {
            error: ClientError::Node { code, message, .. },
            ..
        } => match Status::from_name(code) {
            Some(status) => status_error(status, message),
            None => json!({"kind": "internal", "message": e.to_string()}),
        },
        BoundError::Call { .. } => json!({"kind": "closed", "message": e.to_string()}),
        BoundError::NoBinding { .. } => json!({"kind": "unavailable", "message": e.to_string()}),
        BoundError::Registry(_) => json!({"kind": "registry", "message": e.to_string()}),
    }
}

fn run_registry(args: &Args, urls: &str, case: &Value, report: &mut Report) {
    let registry = RegistryClient::new(urls, args.token.as_deref());
    let options = BoundOptions {
        via: Via::Rac,
        rebind_wait: Duration::from_secs(10),
        ..BoundOptions::default()
    };
    let function = case["function"].as_str().expect("function");
    let mut bound = match netaccel_client::registry::Bound::bind(registry, function, options) {
        Ok(b) => b,
        Err(e) => {
            report.errors[0] = Some(bound_error(&e));
            return;
        }
    };
    for (i, call) in case["calls"].as_array().expect("calls").iter().enumerate() {
        let out = bound.call(&[], &payload_of(call), None);
        report.take(i, out.map(|o| o.output).map_err(|e| bound_error(&e)));
    }
}

fn main() {
    let args = Args::parse();
    let text = std::fs::read_to_string(&args.cases).expect("cases file");
    let cases: Value = serde_json::from_str(&text).expect("cases JSON");
    let case = cases["cases"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["name"] == args.case.as_str()))
        .unwrap_or_else(|| panic!("no case named {}", args.case))
        .clone();
    let mut report = Report::new(case["calls"].as_array().map_or(0, Vec::len));
    if let Some(urls) = &args.registry {
        run_registry(&args, urls, &case, &mut report);
    } else {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        runtime.block_on(async {
            match connect(&args).await {
                Ok(client) => run_calls(Arc::new(client), &case, &mut report).await,
                Err(e) => report.errors[0] = Some(rac_error(&e)),
            }
        });
    }
    println!("{}", report.line());
}
