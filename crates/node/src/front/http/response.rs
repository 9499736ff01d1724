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

thread_local! {
    static DATE: RefCell<(u64, [u8; 29])> = const { RefCell::new((0, [0; 29])) };
}

/// The `Date` header value, formatted at most once per second per thread.
fn with_date(f: impl FnOnce(&[u8])) {
    let now = SystemTime::now();
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != secs {
            let text = httpdate::fmt_http_date(now);
            cached.1.copy_from_slice(&text.as_bytes()[..29]);
            cached.0 = secs;
        }
        f(&cached.1);
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
        buf.extend_from_slice(b"HTTP/1.1 ");
        push_num(buf, u64::from(code));
        buf.push(b' ');
        buf.extend_from_slice(reason(code).as_bytes());
        buf.extend_from_slice(b"\r\nServer: netaccel\r\nDate: ");
        with_date(|d| buf.extend_from_slice(d));
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
