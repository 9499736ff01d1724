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
