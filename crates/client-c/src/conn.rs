//! One RAC connection for a C caller, blocking: a call writes its frame and reads
//! results until its own arrives; `submit` writes a frame and returns; `poll` reads
//! the next result, waiting at most as long as the caller says.
//!
//! It runs entirely on the caller's thread, with no runtime and no thread of its own:
//! a synchronous call costs one write and (for a small result) one read, as a C
//! program's own socket code would. The frames are `rac-proto`'s; TLS is rustls over
//! the same socket. Results are read into a buffer of the connection's and decoded
//! from it, so a poll that stops waiting part-way through a result loses nothing.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use rac_proto::{CallHeader, ControlRequest, Decoded, ResultHeader, Status, HEADER_LEN};

use crate::{kind, Call, Failure, Options, IN_FLIGHT_MAX_DEFAULT};

/// Largest result payload the connection accepts (the Rust client's bound).
const RESULT_PAYLOAD_MAX: u32 = 1 << 30;

/// A call's frame is copied into one buffer and written with one write when its
/// payload is at most this; a larger payload is written after its header.
const COALESCE_MAX: usize = 64 * 1024;

/// The least a read asks the socket for (more when a result needs more).
const READ_CHUNK: usize = 16 * 1024;

/// The socket, plain or under TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn socket(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A result as it came: its ticket (the call's request id) and the output or failure.
type Outcome = (u64, Result<Vec<u8>, Failure>);

/// One connection to a node's RAC listener, with its pipelined calls.
pub struct Connection {
    stream: Stream,
    /// Bytes read and not yet decoded (at most one result's worth beyond a header).
    inbox: Vec<u8>,
    /// Results that arrived while a synchronous call waited for its own.
    ready: VecDeque<Outcome>,
    /// Set when the stream failed or the node refused it: every later call fails so.
    broken: Option<Failure>,
    /// Request ids of the submitted calls not yet polled (at most `in_flight_max`).
    pending: Vec<u32>,
    next_id: u32,
    in_flight: u32,
    in_flight_max: u32,
}

impl Connection {
    /// Connects to `addr` (HOST:PORT), over TLS when `options.tls_ca` is given, and
    /// says `hello` as `options.tenant` when given.
    pub fn connect(addr: &str, options: &Options) -> Result<Connection, Failure> {
        let refused = |reason: String| {
            Failure::new(
                kind::CONNECT,
                format!("cannot connect to the RAC listener at {addr}: {reason}"),
            )
        };
        let socket = connect_any(addr).map_err(|e| refused(e.to_string()))?;
        socket.set_nodelay(true).ok();
        let stream = match &options.tls_ca {
            None => Stream::Plain(socket),
            Some(ca) => {
                let config = tls_config(ca, options)?;
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| refused(format!("bad server name {host}: {e}")))?;
                let mut tls = rustls::ClientConnection::new(config, name)
                    .map_err(|e| refused(format!("TLS: {e}")))?;
                let mut socket = socket;
                while tls.is_handshaking() {
                    tls.complete_io(&mut socket)
                        .map_err(|e| refused(format!("TLS handshake: {e}")))?;
                }
                Stream::Tls(Box::new(rustls::StreamOwned::new(tls, socket)))
            }
        };
        let mut conn = Connection {
            stream,
            inbox: Vec::with_capacity(HEADER_LEN),
            ready: VecDeque::new(),
            broken: None,
            pending: Vec::new(),
            next_id: 1,
            in_flight: 0,
            in_flight_max: match options.in_flight_max {
                0 => IN_FLIGHT_MAX_DEFAULT,
                n => n,
            },
        };
        if let Some(tenant) = &options.tenant {
            let hello = ControlRequest::Hello {
                tenant: tenant.clone(),
                token: options.token.clone(),
            };
            let payload = hello.to_payload();
            let id = conn.send(|id| CallHeader::control(id, payload.len() as u32), &payload)?;
            conn.wait_for(id)?;
        }
        Ok(conn)
    }

    /// Calls and waits for the result.
    pub fn call(&mut self, call: Call) -> Result<Vec<u8>, Failure> {
        let id = self.send_call(&call)?;
        self.wait_for(id)
    }

    /// Sends a call without waiting; its result comes from [`Connection::poll`] under
    /// the returned ticket. Refused with [`kind::FULL`] at the bound on calls in flight.
    pub fn submit(&mut self, call: Call) -> Result<u64, Failure> {
        if self.in_flight >= self.in_flight_max {
            let m = format!(
                "{} calls in flight (the bound): poll for a result first",
                self.in_flight
            );
            return Err(Failure::new(kind::FULL, m));
        }
        let id = self.send_call(&call)?;
        self.pending.push(id);
        self.in_flight += 1;
        Ok(u64::from(id))
    }

    /// The next result of a submitted call, in completion order: waits at most
    /// `wait_ms` (negative: until one arrives). `None` when nothing is in flight or
    /// nothing arrived within the wait.
    pub fn poll(&mut self, wait_ms: i64) -> Option<Outcome> {
        let wait = u64::try_from(wait_ms).ok().map(Duration::from_millis);
        loop {
            if self.in_flight == 0 {
                return None;
            }
            let next = match self.ready.pop_front() {
                Some(r) => r,
                None => match self.next_result(wait)? {
                    Ok(r) => r,
                    // Each call in flight gets the failure once, under its ticket.
                    Err(broken) => (u64::from(self.pending[0]), Err(broken)),
                },
            };
            // A result for no call of ours (a misbehaving node) is dropped.
            let Some(at) = self.pending.iter().position(|&id| u64::from(id) == next.0) else {
                continue;
            };
            self.pending.swap_remove(at);
            assert!(self.in_flight > 0, "a result for a call not in flight");
            self.in_flight -= 1;
            debug_assert_eq!(self.in_flight as usize, self.pending.len());
            return Some(next);
        }
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    fn send_call(&mut self, call: &Call) -> Result<u32, Failure> {
        let len = u32::try_from(call.payload.len())
            .map_err(|_| Failure::new(kind::TOO_LARGE, "a payload of 4 GiB or more"))?;
        self.send(
            |id| {
                let mut h = CallHeader::call(call.accel_id, id, len, call.params);
                h.deadline_us = call.deadline_us;
                h
            },
            &call.payload,
        )
    }

    /// Writes one frame under a fresh request id; returns the id.
    fn send(&mut self, header: impl Fn(u32) -> CallHeader, payload: &[u8]) -> Result<u32, Failure> {
        if let Some(f) = &self.broken {
            return Err(f.clone());
        }
        let id = self.next_id;
        // 0 is the node's id for an answer to an unreadable frame.
        self.next_id = self.next_id.checked_add(1).unwrap_or(1);
        let head = header(id).encode();
        let written = if payload.len() <= COALESCE_MAX {
            let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
            frame.extend_from_slice(&head);
            frame.extend_from_slice(payload);
            self.stream.write_all(&frame)
        } else {
            self.stream
                .write_all(&head)
                .and_then(|()| self.stream.write_all(payload))
        };
        match written.and_then(|()| self.stream.flush()) {
            Ok(()) => Ok(id),
            Err(e) => Err(self.break_with(kind::CLOSED, format!("RAC connection: {e}"))),
        }
    }

    /// Reads results until the one of request `id` comes; the others wait in `ready`.
    fn wait_for(&mut self, id: u32) -> Result<Vec<u8>, Failure> {
        loop {
            match self.next_result(None) {
                Some(Ok((ticket, result))) if ticket == u64::from(id) => return result,
                Some(Ok(other)) => {
                    // Kept for `poll` if a submitted call's; at most `in_flight_max`.
                    if self.pending.iter().any(|&p| u64::from(p) == other.0) {
                        self.ready.push_back(other);
                    }
                }
                Some(Err(broken)) => return Err(broken),
                None => unreachable!("a read without a time limit returns"),
            }
        }
    }

    /// The next result off the stream, waiting at most `wait` (`None`: as long as it
    /// takes): `Err` when the connection broke (then every call in flight fails so),
    /// `None` when the wait ended first.
    fn next_result(&mut self, wait: Option<Duration>) -> Option<Result<Outcome, Failure>> {
        loop {
            if let Some(f) = &self.broken {
                return Some(Err(f.clone()));
            }
            let needed = match self.decode() {
                Ok(Ok(outcome)) => return Some(Ok(outcome)),
                Ok(Err(needed)) => needed,
                Err(f) => return Some(Err(f)),
            };
            // A zero timeout means "block" to the socket: wait at least 1 ms.
            let timeout = wait.map(|w| w.max(Duration::from_millis(1)));
            if let Err(e) = self.stream.socket().set_read_timeout(timeout) {
                return Some(Err(self.break_with(kind::CLOSED, e.to_string())));
            }
            // Straight into the inbox: a large result is read in place, not copied.
            let old = self.inbox.len();
            self.inbox.resize(old + needed.max(READ_CHUNK), 0);
            let read = self.stream.read(&mut self.inbox[old..]);
            self.inbox.truncate(old + *read.as_ref().unwrap_or(&0));
            match read {
                Ok(0) => {
                    let m = "RAC connection: closed by the node";
                    return Some(Err(self.break_with(kind::CLOSED, m)));
                }
                Ok(_) => {}
                Err(e) if wait.is_some() && timed_out(&e) => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let m = format!("RAC connection: {e}");
                    return Some(Err(self.break_with(kind::CLOSED, m)));
                }
            }
        }
    }

    /// One whole result from the front of `inbox`, or how many more bytes it needs
    /// at least; `Err` when the stream cannot be read on.
    fn decode(&mut self) -> Result<Result<Outcome, usize>, Failure> {
        let header = match ResultHeader::decode(&self.inbox, RESULT_PAYLOAD_MAX) {
            Ok(Decoded::Complete(h, _)) => h,
            Ok(Decoded::Partial) => return Ok(Err(HEADER_LEN - self.inbox.len())),
            Err(e) => {
                let m = format!("RAC connection: bad result header: {e}");
                return Err(self.break_with(kind::PROTOCOL, m));
            }
        };
        let end = HEADER_LEN + header.payload_len as usize;
        if self.inbox.len() < end {
            return Ok(Err(end - self.inbox.len()));
        }
        let payload = self.inbox[HEADER_LEN..end].to_vec();
        self.inbox.drain(..end);
        let ticket = u64::from(header.request_id);
        if header.status == Status::Ok {
            return Ok(Ok((ticket, Ok(payload))));
        }
        let message = String::from_utf8_lossy(&payload);
        if header.request_id == 0 {
            // An answer to the connection (BUSY at the node's connection bound,
            // PROTOCOL_ERROR for a frame it could not read); the node closes after it,
            // so it is every call's answer, with its status, as the Rust client's
            // `RacError::Refused`.
            let m = format!("the node refused the connection: {message}");
            let refused = self
                .broken
                .get_or_insert_with(|| Failure::from_status(header.status, &m));
            return Err(refused.clone());
        }
        Ok(Ok((
            ticket,
            Err(Failure::from_status(header.status, &message)),
        )))
    }

    /// Marks the connection broken with this failure, and returns it.
    fn break_with(&mut self, kind: i32, message: impl Into<String>) -> Failure {
        let f = self
            .broken
            .get_or_insert_with(|| Failure::new(kind, message));
        f.clone()
    }
}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// The first address of `addr` that accepts a connection.
fn connect_any(addr: &str) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "the name has no address");
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect(a) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn tls_config(ca: &str, options: &Options) -> Result<Arc<rustls::ClientConfig>, Failure> {
    let pair = match (&options.cert, &options.key) {
        (Some(c), Some(k)) => Some((std::path::Path::new(c), std::path::Path::new(k))),
        (None, None) => None,
        _ => {
            return Err(Failure::new(
                kind::INVALID,
                "give both cert and key, or neither",
            ))
        }
    };
    netaccel_client::rac::tls_config(ca.as_ref(), pair).map_err(|m| Failure::new(kind::CONNECT, m))
}
