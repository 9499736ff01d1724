//! Blocking clients for the overload tests: one HTTP/1.1 keep-alive connection and one
//! RAC connection, each sending calls and reading answers one by one, so that a test
//! can match every answer to the call it belongs to.

#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use rac_proto::{CallHeader, Decoded, ResultHeader, HEADER_LEN, PARAMS_LEN};

use crate::common::Resp;

/// How long a test client waits for any one answer before it calls the node silent.
pub const ANSWER_WAIT: Duration = Duration::from_secs(20);

/// One HTTP/1.1 keep-alive connection.
pub struct Http {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Http {
    pub fn connect(addr: SocketAddr) -> io::Result<Http> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(ANSWER_WAIT))?;
        Ok(Http { s, buf: Vec::new() })
    }

    /// Sends `POST path` with `body` and the extra header lines `extra`.
    pub fn send(&mut self, path: &str, body: &[u8], extra: &str) -> io::Result<()> {
        let mut req = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n{extra}\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        self.s.write_all(&req)
    }

    /// Reads the next response (Content-Length framed). `UnexpectedEof` when the
    /// node closed the connection before a whole response.
    pub fn recv(&mut self) -> io::Result<Resp> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap_or(0));
                if self.buf.len() >= end + 4 + len {
                    let rest = self.buf.split_off(end + 4 + len);
                    let whole = std::mem::replace(&mut self.buf, rest);
                    let mut parsed = crate::common::parse_responses(&whole);
                    return Ok(parsed.remove(0));
                }
            }
            let n = self.s.read(&mut chunk)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    pub fn call(&mut self, path: &str, body: &[u8]) -> io::Result<Resp> {
        self.send(path, body, "")?;
        self.recv()
    }
}

/// One RAC connection.
pub struct Rac {
    s: TcpStream,
}

impl Rac {
    pub fn connect(addr: SocketAddr) -> io::Result<Rac> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(ANSWER_WAIT))?;
        Ok(Rac { s })
    }

    /// Sends a call of accelerator `accel_id` with request id `id`.
    pub fn send(&mut self, accel_id: u16, id: u32, payload: &[u8]) -> io::Result<()> {
        let header = CallHeader::call(accel_id, id, payload.len() as u32, [0; PARAMS_LEN]);
        let mut msg = header.encode().to_vec();
        msg.extend_from_slice(payload);
        self.s.write_all(&msg)
    }

    /// Reads the next result. `UnexpectedEof` when the node closed the connection.
    pub fn recv(&mut self) -> io::Result<(ResultHeader, Vec<u8>)> {
        let mut head = [0u8; HEADER_LEN];
        self.s.read_exact(&mut head)?;
        let Ok(Decoded::Complete(h, _)) = ResultHeader::decode(&head, 1 << 30) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bad result header",
            ));
        };
        let mut payload = vec![0; h.payload_len as usize];
        self.s.read_exact(&mut payload)?;
        Ok((h, payload))
    }

    /// The underlying stream (to stop reading it, or to shut it down).
    pub fn stream(&self) -> &TcpStream {
        &self.s
    }
}

/// Polls `cond` every 10 ms until it holds; fails after 20 s saying `what`.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The front ends the overload tests drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Front {
    /// `POST /v1/fn/echo`.
    Http,
    /// RAC v1, echo (accelerator 1).
    Rac,
    /// Open Inference Protocol v2, `POST /v2/models/echo/infer` with binary tensors.
    V2,
}

/// What became of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Answered with the right output.
    Ok,
    /// Refused `BUSY` (HTTP 503 with `Retry-After`).
    Busy,
    /// Answered `UNAVAILABLE` (HTTP 503 with `Retry-After`).
    Unavailable,
    /// Any other answer: wrong output, wrong id, wrong status, a 503 without
    /// `Retry-After`. Always a failure.
    Wrong(String),
    /// The connection ended (or failed) before the answer came.
    Lost,
}

/// One call: when it was sent, what became of it, and how long that took.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub front: Front,
    pub sent: std::time::Instant,
    pub took: Duration,
    pub fate: Fate,
    /// How long the node says the call waited in its slot's queue (RAC's `queue_ns`,
    /// HTTP's `X-Netaccel-Queue-Ns`; zero when it did not say).
    pub queued: Duration,
}

/// Answers seen so far by the clients of one [`drive`], for a test to wait on.
#[derive(Default)]
pub struct Tally {
    pub ok: std::sync::atomic::AtomicUsize,
    pub busy: std::sync::atomic::AtomicUsize,
}

impl Tally {
    /// Whether at least `ok` calls were answered and `busy` refused.
    pub fn reached(&self, ok: usize, busy: usize) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.ok.load(Relaxed) >= ok && self.busy.load(Relaxed) >= busy
    }
}

/// Offered load: `clients` connections of `front`, each sending one call at a time,
/// one every `interval` (sooner after a late answer, never more than one in flight;
/// after a refusal not before the next `interval`, as a client honouring
/// `Retry-After` would: retrying a BUSY at once made a storm in which one front end's
/// clients, refused in a loop, were hardly ever accepted),
/// each with a payload unique in the run (front, client, sequence number), until
/// `stop` is set or the node refuses a new connection.
pub fn drive(
    front: Front,
    addr: SocketAddr,
    clients: usize,
    interval: Duration,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (
    Vec<std::thread::JoinHandle<Vec<Outcome>>>,
    std::sync::Arc<Tally>,
) {
    let tally = std::sync::Arc::new(Tally::default());
    let handles = (0..clients)
        .map(|client| {
            let stop = std::sync::Arc::clone(&stop);
            let tally = std::sync::Arc::clone(&tally);
            std::thread::spawn(move || client_loop(front, addr, client, interval, &stop, &tally))
        })
        .collect();
    (handles, tally)
}

enum Conn {
    Http(Http),
    Rac(Rac),
}

fn client_loop(
    front: Front,
    addr: SocketAddr,
    client: usize,
    interval: Duration,
    stop: &std::sync::atomic::AtomicBool,
    tally: &Tally,
) -> Vec<Outcome> {
    use std::sync::atomic::Ordering;
    let mut out = Vec::new();
    let mut conn: Option<Conn> = None;
    let mut due = std::time::Instant::now();
    let mut seq: u32 = 0;
    while !stop.load(Ordering::Relaxed) {
        if let Some(wait) = due.checked_duration_since(std::time::Instant::now()) {
            std::thread::sleep(wait);
        }
        seq += 1;
        if conn.is_none() {
            let made = match front {
                Front::Rac => Rac::connect(addr).map(Conn::Rac),
                Front::Http | Front::V2 => Http::connect(addr).map(Conn::Http),
            };
            match made {
                Ok(c) => conn = Some(c),
                // Refused: the node stopped listening (drain).
                Err(_) => break,
            }
        }
        let payload = format!("{front:?}-{client}-{seq}").into_bytes();
        let sent = std::time::Instant::now();
        let fate = match conn.as_mut().expect("connected") {
            Conn::Rac(c) => rac_call(c, seq, &payload),
            Conn::Http(c) => http_call(c, front, &payload),
        };
        let (fate, keep, queued) = fate;
        if !keep {
            conn = None;
        }
        due = if fate == Fate::Busy {
            (due + interval).max(std::time::Instant::now() + interval)
        } else {
            due + interval
        };
        match fate {
            Fate::Ok => tally.ok.fetch_add(1, Ordering::Relaxed),
            Fate::Busy => tally.busy.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        out.push(Outcome {
            front,
            sent,
            took: sent.elapsed(),
            fate,
            queued,
        });
    }
    out
}

/// One RAC echo call; whether the connection may be used again, and the queue time
/// the node reported.
fn rac_call(c: &mut Rac, id: u32, payload: &[u8]) -> (Fate, bool, Duration) {
    if c.send(1, id, payload).is_err() {
        return (Fate::Lost, false, Duration::ZERO);
    }
    match c.recv() {
        Err(_) => (Fate::Lost, false, Duration::ZERO),
        Ok((h, _)) if h.request_id != id => (
            Fate::Wrong(format!("result for id {} to call {id}", h.request_id)),
            false,
            Duration::ZERO,
        ),
        Ok((h, out)) => {
            let fate = match h.status {
                rac_proto::Status::Ok if out == payload => Fate::Ok,
                rac_proto::Status::Busy => Fate::Busy,
                rac_proto::Status::Unavailable => Fate::Unavailable,
                s => Fate::Wrong(format!("status {s:?}, {} bytes", out.len())),
            };
            (fate, true, Duration::from_nanos(h.queue_ns))
        }
    }
}

/// One HTTP or v2 echo call; whether the connection may be used again, and the queue
/// time the node reported.
fn http_call(c: &mut Http, front: Front, payload: &[u8]) -> (Fate, bool, Duration) {
    let sent = match front {
        Front::V2 => {
            let json = format!(
                r#"{{"inputs":[{{"name":"INPUT0","shape":[{n}],"datatype":"UINT8","parameters":{{"binary_data_size":{n}}}}}],"outputs":[{{"name":"OUTPUT0","parameters":{{"binary_data":true}}}}]}}"#,
                n = payload.len()
            );
            let mut body = json.clone().into_bytes();
            body.extend_from_slice(payload);
            let extra = format!("Inference-Header-Content-Length: {}\r\n", json.len());
            c.send("/v2/models/echo/infer", &body, &extra)
        }
        _ => c.send("/v1/fn/echo", payload, ""),
    };
    if sent.is_err() {
        return (Fate::Lost, false, Duration::ZERO);
    }
    let r = match c.recv() {
        Ok(r) => r,
        Err(_) => return (Fate::Lost, false, Duration::ZERO),
    };
    let queued = r
        .header("x-netaccel-queue-ns")
        .and_then(|v| v.parse().ok())
        .map_or(Duration::ZERO, Duration::from_nanos);
    let keep = r.header("connection") != Some("close");
    let fate = match r.status {
        200 if front == Front::V2 && r.body.ends_with(payload) => Fate::Ok,
        200 if r.body == payload => Fate::Ok,
        503 if r.header("retry-after").is_none() => Fate::Wrong("503 without Retry-After".into()),
        503 => {
            let doc: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
            match doc["code"].as_str() {
                Some("BUSY") => Fate::Busy,
                Some("UNAVAILABLE") => Fate::Unavailable,
                _ => Fate::Wrong(format!("503 {}", String::from_utf8_lossy(&r.body))),
            }
        }
        code => Fate::Wrong(format!("{code} {}", String::from_utf8_lossy(&r.body))),
    };
    (fate, keep, queued)
}

/// The `q` quantile (0..=1) of `values`, in order of magnitude.
pub fn quantile(values: &mut [Duration], q: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.sort();
    let i = ((values.len() - 1) as f64 * q).round() as usize;
    values[i]
}
