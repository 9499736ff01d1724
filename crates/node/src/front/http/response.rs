//! Writing HTTP/1.1 responses into a connection's output buffer.

use std::cell::RefCell;
use std::time::{Duration, SystemTime};

use rac_proto::Status;

use crate::net::bufpool;

pub fn reason(code: u16) -> &'static str {
    match code {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        417 => "Expectation Failed",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        507 => "Insufficient Storage",
        _ => "Unknown",
    }
}

/// The `code` field of a JSON error body for an HTTP-level error.
pub fn code_name(code: u16) -> &'static str {
    match code {
        400 => "BAD_REQUEST",
        401 => "UNAUTHORIZED",
        404 => "NOT_FOUND",
        405 => "METHOD_NOT_ALLOWED",
        408 => "REQUEST_TIMEOUT",
        411 => "LENGTH_REQUIRED",
        413 => "TOO_LARGE",
        414 => "URI_TOO_LONG",
        417 => "EXPECTATION_FAILED",
        429 => "TOO_MANY_REQUESTS",
        431 => "HEADERS_TOO_LARGE",
        500 => "INTERNAL",
        501 => "NOT_IMPLEMENTED",
        503 => "BUSY",
        504 => "DEADLINE_EXCEEDED",
        505 => "HTTP_VERSION_NOT_SUPPORTED",
        507 => "INSUFFICIENT_STORAGE",
        _ => "ERROR",
    }
}

/// HTTP status for a call status.
pub fn http_code(status: Status) -> u16 {
    match status {
        Status::Ok => 200,
        Status::BadRequest | Status::ProtocolError => 400,
        Status::UnknownAccelerator => 404,
        Status::Busy | Status::Unavailable => 503,
        Status::TooLarge => 413,
        Status::DeadlineExceeded => 504,
        Status::Unauthorized => 401,
        Status::Internal => 500,
    }
}

/// What a network thread keeps of the current second: the `Date` header's value and
/// the keep-alive answer to a health check that carries it.
struct Second {
    secs: u64,
    date: [u8; 29],
    /// The whole `200` answer to `GET /health` on a keep-alive HTTP/1.1 connection, its
    /// body last; empty until the second's first health check builds it.
    health: Vec<u8>,
}

thread_local! {
    static SECOND: RefCell<Second> = const {
        RefCell::new(Second { secs: 0, date: [0; 29], health: Vec::new() })
    };
}

/// `f` on this thread's [`Second`], brought up to date (the `Date` text formatted at
/// most once per second per thread).
fn with_second<R>(f: impl FnOnce(&mut Second) -> R) -> R {
    let secs = unix_seconds();
    SECOND.with(|cell| {
        let mut second = cell.borrow_mut();
        if second.secs != secs {
            let now = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
            let text = httpdate::fmt_http_date(now);
            second.date.copy_from_slice(&text.as_bytes()[..29]);
            second.secs = secs;
            second.health.clear();
        }
        f(&mut second)
    })
}

/// The current second since the epoch, from the kernel's coarse wall clock: the time
/// of its last tick (1–4 ms old), read without the time-stamp counter, which is all a
/// `Date` header needs (nginx reads the clock once per event-loop turn for the same
/// reason). About 60 of the node's instructions per response fewer than
/// `SystemTime::now()` and its subtraction from the epoch (issue 28).
fn unix_seconds() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_REALTIME_COARSE exists on every
    // Linux the node runs on (2.6.32 and later).
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    if rc == 0 {
        u64::try_from(ts.tv_sec).unwrap_or(0)
    } else {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }
}

/// The body of a health check's answer.
pub const HEALTH_BODY: &[u8] = br#"{"status":"ok"}"#;

/// Writes the answer to a health check (`200`, [`HEALTH_BODY`]; for `HEAD` its head
/// only). On a keep-alive HTTP/1.1 connection, the common case (load balancers' probes,
/// bench/http), it is one copy of the answer the thread built for the current second,
/// instead of a head written field by field per request (issue 28).
pub fn health(buf: &mut Vec<u8>, head_only: bool, keep_alive: bool, minor_version: u8) {
    let body = if head_only { &b""[..] } else { HEALTH_BODY };
    if !keep_alive || minor_version != 1 {
        Head::start(buf, 200)
            .header("Content-Type", b"application/json")
            .num("Content-Length", HEALTH_BODY.len() as u64)
            .finish(keep_alive, minor_version);
        buf.extend_from_slice(body);
        return;
    }
    if buf.capacity() == 0 {
        *buf = bufpool::take(HEAD_ROOM);
    }
    with_second(|second| {
        if second.health.is_empty() {
            let mut answer = Vec::with_capacity(HEAD_ROOM);
            Head::dated(&mut answer, 200, &second.date)
                .header("Content-Type", b"application/json")
                .num("Content-Length", HEALTH_BODY.len() as u64)
                .finish(true, 1);
            answer.extend_from_slice(HEALTH_BODY);
            second.health = answer;
        }
        let answer = &second.health;
        debug_assert!(answer.ends_with(HEALTH_BODY));
        buf.extend_from_slice(&answer[..answer.len() - HEALTH_BODY.len() + body.len()]);
    });
}

/// A response head under construction; `finish` writes the blank line.
pub struct Head<'a> {
    buf: &'a mut Vec<u8>,
}

/// Room a response head is given when its buffer has none (a connection's output
/// buffer goes back to the pool while the connection is idle): about twice the longest
/// head the node writes, so that the head and a small body need no growing (issue 28).
pub const HEAD_ROOM: usize = 512;

impl<'a> Head<'a> {
    pub fn start(buf: &'a mut Vec<u8>, code: u16) -> Head<'a> {
        if buf.capacity() == 0 {
            *buf = bufpool::take(HEAD_ROOM);
        }
        with_second(|second| Head::dated(buf, code, &second.date))
    }

    /// A head whose `Date` is `date`.
    fn dated(buf: &'a mut Vec<u8>, code: u16, date: &[u8; 29]) -> Head<'a> {
        buf.extend_from_slice(b"HTTP/1.1 ");
        push_num(buf, u64::from(code));
        buf.push(b' ');
        buf.extend_from_slice(reason(code).as_bytes());
        buf.extend_from_slice(b"\r\nServer: netaccel\r\nDate: ");
        buf.extend_from_slice(date);
        buf.extend_from_slice(b"\r\n");
        Head { buf }
    }

    pub fn header(self, name: &str, value: &[u8]) -> Self {
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.extend_from_slice(b": ");
        self.buf.extend_from_slice(value);
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    pub fn num(self, name: &str, value: u64) -> Self {
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.extend_from_slice(b": ");
        push_num(self.buf, value);
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    /// Ends the head. `keep_alive` decides the `Connection` header: `close` when the
    /// connection ends, `keep-alive` for HTTP/1.0 clients that asked for it.
    pub fn finish(self, keep_alive: bool, minor_version: u8) {
        if !keep_alive {
            self.buf.extend_from_slice(b"Connection: close\r\n");
        } else if minor_version == 0 {
            self.buf.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        self.buf.extend_from_slice(b"\r\n");
    }
}

pub fn push_num(buf: &mut Vec<u8>, n: u64) {
    let mut tmp = itoa::Buffer::new();
    buf.extend_from_slice(tmp.format(n).as_bytes());
}

/// `{"error":"…","code":"…"}`.
pub fn error_body(message: &str, code: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "error": message, "code": code }))
        .expect("serialising a JSON object cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_is_well_formed() {
        let mut buf = Vec::new();
        Head::start(&mut buf, 200)
            .num("Content-Length", 15)
            .finish(false, 1);
        let text = String::from_utf8(buf).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\nServer: netaccel\r\nDate: "));
        assert!(text.ends_with(" GMT\r\nContent-Length: 15\r\nConnection: close\r\n\r\n"));
    }

    #[test]
    fn a_health_answer_is_the_head_and_body_written_field_by_field() {
        for (head_only, keep_alive, minor) in [
            (false, true, 1),
            (true, true, 1),
            (false, false, 1),
            (false, true, 0),
            (true, false, 0),
        ] {
            // Twice: the second comes from the thread's copy of the second's answer.
            for _ in 0..2 {
                let mut got = Vec::new();
                health(&mut got, head_only, keep_alive, minor);
                let mut want = Vec::new();
                Head::start(&mut want, 200)
                    .header("Content-Type", b"application/json")
                    .num("Content-Length", 15)
                    .finish(keep_alive, minor);
                if !head_only {
                    want.extend_from_slice(br#"{"status":"ok"}"#);
                }
                // The same but for the date, should the second turn in between.
                assert_eq!(got.len(), want.len(), "{head_only} {keep_alive} {minor}");
                let date = got.windows(6).position(|w| w == b"Date: ").unwrap();
                assert_eq!(got[..date], want[..date]);
                assert_eq!(got[date + 35..], want[date + 35..]);
            }
        }
    }

    #[test]
    fn every_status_maps_to_an_error_code() {
        for s in Status::ALL {
            let code = http_code(s);
            assert_ne!(reason(code), "Unknown", "{s:?}");
        }
        let body = error_body("a \"quoted\" word", "BUSY");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"], "a \"quoted\" word");
        assert_eq!(v["code"], "BUSY");
    }
}
