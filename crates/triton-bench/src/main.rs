//! `v2-load`: a closed-loop client of the Open Inference Protocol v2, for comparing
//! servers that speak it (netaccel and NVIDIA Triton, `bench/triton/run.sh`) with the
//! same client over both transports:
//!
//! - `http`: v2 over HTTP/1.1 with the binary tensor data extension (a JSON head and
//!   the raw input bytes; binary output), keep-alive, one request in flight per
//!   connection, written by hand over a socket so the client costs little;
//! - `grpc`: `GRPCInferenceService/ModelInfer` with `raw_input_contents`, one HTTP/2
//!   connection per closed loop (hyper's; or `--loops-per-connection` loops sharing
//!   one, each call a stream), the messages those of the node's vendored .proto files
//!   (see [`grpc_loop`]).
//!
//! Each of `--connections` loops sends a call, waits for its answer, checks it (status
//! and the uppercased bytes) and sends the next. Calls that end inside the measuring
//! window (after `--warmup`, for `--duration`) count; their latencies give p50/p99. The
//! result is one JSON line on stdout. All loops run on one thread (pin it with taskset),
//! so the client's own cost is one core's and shows up as the same floor for every
//! server. Not a general benchmark tool: it calls a to_uppercase-like model, `INPUT0`
//! of UINT8 `[size]` in, `OUTPUT0` out, or with `--tensors digits` (gRPC only) the
//! digits CNN of `models/`: one 8x8 FP32 image `image` `[1, 1, 8, 8]` in, ten FP32
//! `logits` out, checked for their size and for being finite (`bench/batching/run.sh`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use http_body_util::{BodyExt, Full};
use netaccel_node::front::grpc::pb;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::codegen::http;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Transport {
    Http,
    Grpc,
}

/// The model's tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Tensors {
    /// `INPUT0` UINT8 `[size]` → `OUTPUT0`, the bytes uppercased.
    Upper,
    /// `image` FP32 `[1, 1, 8, 8]` → `logits` FP32 `[1, 10]` (the digits CNN).
    Digits,
}

/// Closed-loop v2 inference client (HTTP binary tensors or gRPC).
#[derive(Parser, Debug)]
struct Args {
    #[arg(long, value_enum)]
    transport: Transport,
    /// Server address (HTTP or gRPC port, by --transport).
    #[arg(long)]
    addr: SocketAddr,
    #[arg(long, default_value = "to_uppercase")]
    model: String,
    /// The model's tensors.
    #[arg(long, value_enum, default_value = "upper")]
    tensors: Tensors,
    /// Input bytes per call.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Closed loops, each on a connection of its own (see --loops-per-connection).
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// gRPC only: closed loops sharing one HTTP/2 connection, each call a stream of
    /// it (--connections / this many connections).
    #[arg(long, default_value_t = 1)]
    loops_per_connection: usize,
    /// Seconds measured.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds run before measuring.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
}

/// Latencies kept per loop at most (a 5 s run at 100k calls/s is 500k): a bound on the
/// client's memory whatever the server's speed.
const SAMPLES_MAX: usize = 4_000_000;

/// What one loop measured.
#[derive(Default)]
struct Loop {
    latencies_ns: Vec<u32>,
    calls: u64,
}

#[derive(Clone, Copy)]
struct Window {
    from: Instant,
    until: Instant,
}

impl Loop {
    fn record(&mut self, window: Window, start: Instant, end: Instant) {
        if start >= window.from && end <= window.until {
            self.calls += 1;
            if self.latencies_ns.len() < SAMPLES_MAX {
                let ns = end.duration_since(start).as_nanos();
                self.latencies_ns
                    .push(u32::try_from(ns).unwrap_or(u32::MAX));
            }
        }
    }
}

fn input(size: usize) -> Vec<u8> {
    b"netaccel-vs-triton:"
        .iter()
        .copied()
        .cycle()
        .take(size)
        .collect()
}

fn upper(data: &[u8]) -> Vec<u8> {
    data.to_ascii_uppercase()
}

/// The request bytes of one v2 HTTP binary-tensor call.
fn http_request(args: &Args, data: &[u8]) -> Vec<u8> {
    let json = format!(
        r#"{{"inputs":[{{"name":"INPUT0","shape":[{n}],"datatype":"UINT8","parameters":{{"binary_data_size":{n}}}}}],"outputs":[{{"name":"OUTPUT0","parameters":{{"binary_data":true}}}}]}}"#,
        n = data.len()
    );
    let mut req = format!(
        "POST /v2/models/{}/infer HTTP/1.1\r\nHost: {}\r\nContent-Type: application/octet-stream\r\nInference-Header-Content-Length: {}\r\nContent-Length: {}\r\n\r\n",
        args.model,
        args.addr,
        json.len(),
        json.len() + data.len()
    )
    .into_bytes();
    req.extend_from_slice(json.as_bytes());
    req.extend_from_slice(data);
    req
}

async fn http_loop(
    addr: SocketAddr,
    req: Vec<u8>,
    want: Vec<u8>,
    window: Window,
) -> Result<Loop, String> {
    let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut out = Loop::default();
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    while Instant::now() < window.until {
        let start = Instant::now();
        s.write_all(&req).await.map_err(|e| e.to_string())?;
        buf.clear();
        // Head, then the body of Content-Length bytes.
        let (head_len, body_len) = loop {
            if buf.capacity() - buf.len() < 4096 {
                buf.reserve(8192);
            }
            if s.read_buf(&mut buf).await.map_err(|e| e.to_string())? == 0 {
                return Err("the server closed the connection".into());
            }
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&buf).map_err(|e| e.to_string())? {
                httparse::Status::Partial => continue,
                httparse::Status::Complete(n) => {
                    if resp.code != Some(200) {
                        return Err(format!(
                            "HTTP {:?}: {}",
                            resp.code,
                            String::from_utf8_lossy(&buf[n..])
                        ));
                    }
                    let len: usize = resp
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                        .ok_or("no Content-Length in the answer")?;
                    break (n, len);
                }
            }
        };
        while buf.len() < head_len + body_len {
            buf.reserve(head_len + body_len - buf.len());
            if s.read_buf(&mut buf).await.map_err(|e| e.to_string())? == 0 {
                return Err("the server closed the connection mid-answer".into());
            }
        }
        let end = Instant::now();
        // Binary output: the raw bytes end the body.
        if !buf[..head_len + body_len].ends_with(&want) {
            return Err("the answer does not end with the uppercased input".into());
        }
        out.record(window, start, end);
    }
    Ok(out)
}

/// `ModelInfer`'s path.
const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";

/// A gRPC call's message as it travels: the 5-byte prefix (not compressed, the
/// length) and the encoded message.
fn grpc_frame(req: &pb::ModelInferRequest) -> Bytes {
    let len = u32::try_from(req.encoded_len()).expect("a request under 4 GiB");
    let mut framed = Vec::with_capacity(5 + len as usize);
    framed.push(0);
    framed.extend_from_slice(&len.to_be_bytes());
    req.encode(&mut framed).expect("a Vec grows");
    Bytes::from(framed)
}

/// The answer of one gRPC call: `grpc-status` 0 (in the trailers, or in the
/// headers of a trailers-only answer) and one message, decoded.
fn grpc_answer(
    head: &http::HeaderMap,
    trailers: Option<&http::HeaderMap>,
    body: &[u8],
) -> Result<pb::ModelInferResponse, String> {
    let status = trailers
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| head.get("grpc-status"));
    if status.is_none_or(|s| s != "0") {
        let message = trailers
            .and_then(|t| t.get("grpc-message"))
            .or_else(|| head.get("grpc-message"));
        return Err(format!("gRPC status {status:?}: {message:?}"));
    }
    let (prefix, message) = body
        .split_at_checked(5)
        .ok_or("the answer holds no message")?;
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if prefix[0] != 0 || message.len() != len {
        return Err(format!(
            "not one uncompressed message: flag {}, {len} bytes declared, {} sent",
            prefix[0],
            message.len()
        ));
    }
    pb::ModelInferResponse::decode(message).map_err(|e| e.to_string())
}

/// Sends the requests of one HTTP/2 connection.
type Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

/// A new HTTP/2 connection to `addr` (hyper's), its frames handled by a task.
async fn grpc_connect(addr: SocketAddr) -> Result<Sender, String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (send, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(send)
}

/// One closed loop over an HTTP/2 connection (`send`, maybe shared with others). Every call of a run
/// is the same message, encoded once, sent as tonic's client sends it; its answer
/// is decoded by prost. Without tonic's client (its `Channel`'s buffer task, an
/// encode and a stream decoder a call) this one-thread client costs a few µs less a
/// call, about as much as the node it measures (docs/benchmarks.md, "Dynamic
/// batching"): at 64 connections the client's core, not only the node's, bounds
/// the calls a second.
async fn grpc_loop(
    mut send: Sender,
    addr: SocketAddr,
    req: pb::ModelInferRequest,
    want: Vec<u8>,
    window: Window,
) -> Result<Loop, String> {
    let uri: http::Uri = format!("http://{addr}{MODEL_INFER}")
        .parse()
        .map_err(|e| format!("{e}"))?;
    let framed = grpc_frame(&req);
    let mut out = Loop::default();
    while Instant::now() < window.until {
        let start = Instant::now();
        let call = http::Request::post(uri.clone())
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(framed.clone()))
            .map_err(|e| e.to_string())?;
        let (head, body) = send
            .send_request(call)
            .await
            .map_err(|e| e.to_string())?
            .into_parts();
        let whole = body.collect().await.map_err(|e| e.to_string())?;
        let trailers = whole.trailers().cloned();
        let resp = grpc_answer(&head.headers, trailers.as_ref(), &whole.to_bytes())?;
        let end = Instant::now();
        check_grpc(&resp, &want)?;
        out.record(window, start, end);
    }
    Ok(out)
}

/// Bytes of the digits CNN's answer: ten FP32 logits.
const LOGITS_BYTES: usize = 40;

/// Checks a gRPC answer: the uppercased input (`want`), or, when `want` is empty,
/// the digits CNN's ten finite logits.
fn check_grpc(resp: &pb::ModelInferResponse, want: &[u8]) -> Result<(), String> {
    let got = resp.raw_output_contents.first().map(|b| &b[..]);
    if !want.is_empty() {
        return match got == Some(want) {
            true => Ok(()),
            false => Err("the answer is not the uppercased input".into()),
        };
    }
    match got {
        Some(logits)
            if logits.len() == LOGITS_BYTES
                && logits
                    .chunks_exact(4)
                    .all(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite()) =>
        {
            Ok(())
        }
        other => Err(format!(
            "the answer is not ten finite FP32 logits: {:?} bytes",
            other.map(<[u8]>::len)
        )),
    }
}

/// One 8x8 image of the digits data set's range (0..16) as FP32 bytes.
fn digits_image() -> Vec<u8> {
    (0..64u32)
        .flat_map(|p| (((p * 5 + p / 7) % 17) as f32).to_le_bytes())
        .collect()
}

/// The gRPC request of one call with the model's tensors.
fn grpc_request(args: &Args, data: &[u8]) -> pb::ModelInferRequest {
    let (name, datatype, shape) = match args.tensors {
        Tensors::Upper => ("INPUT0", "UINT8", vec![data.len() as i64]),
        Tensors::Digits => ("image", "FP32", vec![1, 1, 8, 8]),
    };
    pb::ModelInferRequest {
        model_name: args.model.clone(),
        inputs: vec![pb::model_infer_request::InferInputTensor {
            name: name.into(),
            datatype: datatype.into(),
            shape,
            ..Default::default()
        }],
        raw_input_contents: vec![Bytes::from(data.to_vec())],
        ..Default::default()
    }
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    f64::from(sorted[k]) / 1000.0
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    let (data, want) = match args.tensors {
        Tensors::Upper => {
            let data = input(args.size);
            let want = upper(&data);
            (data, want)
        }
        Tensors::Digits if args.transport == Transport::Grpc => (digits_image(), Vec::new()),
        Tensors::Digits => return Err("--tensors digits is for --transport grpc".into()),
    };
    if args.loops_per_connection == 0
        || (args.loops_per_connection > 1 && args.transport != Transport::Grpc)
    {
        return Err("--loops-per-connection is at least 1, and above 1 for gRPC only".into());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let begin = Instant::now();
    let window = Window {
        from: begin + Duration::from_secs_f64(args.warmup),
        until: begin + Duration::from_secs_f64(args.warmup + args.duration),
    };
    let loops: Vec<Loop> = rt.block_on(async {
        let mut tasks = Vec::with_capacity(args.connections);
        let mut sender = None;
        for i in 0..args.connections {
            if args.transport == Transport::Grpc && i % args.loops_per_connection == 0 {
                sender = Some(grpc_connect(args.addr).await?);
            }
            let want = want.clone();
            tasks.push(match args.transport {
                Transport::Http => tokio::spawn(http_loop(
                    args.addr,
                    http_request(&args, &data),
                    want,
                    window,
                )),
                Transport::Grpc => tokio::spawn(grpc_loop(
                    sender.clone().expect("connected above"),
                    args.addr,
                    grpc_request(&args, &data),
                    want,
                    window,
                )),
            });
        }
        let mut loops = Vec::with_capacity(tasks.len());
        for t in tasks {
            loops.push(t.await.map_err(|e| e.to_string())??);
        }
        Ok::<_, String>(loops)
    })?;
    let calls: u64 = loops.iter().map(|l| l.calls).sum();
    let mut all: Vec<u32> = loops.into_iter().flat_map(|l| l.latencies_ns).collect();
    all.sort_unstable();
    let line = serde_json::json!({
        "transport": format!("{:?}", args.transport).to_lowercase(),
        "connections": args.connections,
        "loops_per_connection": args.loops_per_connection,
        "size": data.len(),
        "calls": calls,
        "calls_per_s": calls as f64 / args.duration,
        "p50_us": percentile(&all, 0.50),
        "p99_us": percentile(&all, 0.99),
    });
    println!("{line}");
    Ok(())
}
