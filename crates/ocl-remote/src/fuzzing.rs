//! Fuzzing the live service: what one hostile client can send a node.
//!
//! The `session` fuzz target (`fuzz/`, through [`Harness`]) and the corpus replay
//! test (`tests/fuzz_corpus.rs`, through [`drive_session`]) share these bodies. An
//! input is a client's whole conversation: after a `Hello` (same-host or not, by the
//! input's first byte) come records `[kind: u8][len: u16 LE][body: len bytes]`, each
//! sent as one frame, so mutations land in message bodies (ids, sizes, flags, names,
//! sources) rather than in framing the service refuses at once.
//!
//! What the fuzzer may not do is what no node can defend against while the runtime
//! runs in its process: an OpenCL C kernel is code, and on a CPU device it runs with the
//! node's memory. So the driver keeps launches small (at most [`LAUNCH_ITEMS_MAX`] work
//! items) and the seed kernels touch no memory; every other request goes through as the
//! fuzzer wrote it.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::proto::{self, Command, Request};
use crate::service::gate::Caller;
use crate::service::{spawn, ServiceConfig, ServiceHandle};
use crate::stream::Stream;

/// Work items one launch of the fuzzer may ask for (see the module docs).
pub const LAUNCH_ITEMS_MAX: u64 = 1 << 16;

/// The bytes a client sends for fuzz input `data`: `Hello` (with `host_id` when the
/// first byte is odd, so the same-host shared-memory path is fuzzed too), then one
/// frame per record. Records that would launch more than [`LAUNCH_ITEMS_MAX`] work
/// items are left out.
pub fn session_stream(data: &[u8], host_id: &[u8]) -> Vec<u8> {
    let same_host = data.first().is_some_and(|b| b & 1 == 1);
    let mut out = Vec::new();
    Request::Hello {
        version: proto::PROTOCOL_VERSION,
        host_id: if same_host { host_id } else { b"" },
        tenant: b"",
        token: b"",
    }
    .encode(0, &mut out);
    let mut rest = data.get(1..).unwrap_or_default();
    let mut id = 1;
    while rest.len() >= 3 {
        let kind = u16::from(rest[0]);
        let len = usize::from(u16::from_le_bytes([rest[1], rest[2]])).min(rest.len() - 3);
        let body = &rest[3..3 + len];
        rest = &rest[3 + len..];
        if launches_too_much(kind, body) {
            continue;
        }
        proto::encode_header(&mut out, kind, id, body.len());
        out.extend_from_slice(body);
        id += 1;
    }
    out
}

fn launches_too_much(kind: u16, body: &[u8]) -> bool {
    let Ok(Request::Enqueue { commands }) = Request::decode(kind, body) else {
        return false;
    };
    commands.iter().any(|c| match &c.command {
        Command::NdRange(nd) => {
            let dims = usize::from(nd.work_dim).clamp(1, proto::WORK_DIM_MAX);
            nd.global[..dims]
                .iter()
                .try_fold(1u64, |n, g| n.checked_mul((*g).max(1)))
                .is_none_or(|n| n > LAUNCH_ITEMS_MAX)
        }
        _ => false,
    })
}

/// Plays fuzz input `data` to the service at `addr` over one TCP connection (see
/// [`play`]). Returns the bytes received.
pub fn drive_session(addr: SocketAddr, data: &[u8], patience: Duration) -> io::Result<usize> {
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    play(Stream::Tcp(stream), data, patience)
}

/// A conversation this long or shorter is written before its answers are read, on the
/// calling thread, when it goes over a Unix socket: the kernel takes it whole into the
/// socket (whose send buffer is larger), so the write cannot wait for a service that
/// waits for us to read. Longer ones, and any over TCP, are written from a thread.
const INLINE_WRITE_MAX: usize = 64 << 10;

/// Plays fuzz input `data` over `stream` (connected to a service), then closes its
/// write half, and reads what comes back until the service ends the session and
/// closes the connection. So every request of the input is served, and the session
/// is over (its objects released) when this returns. Returns the bytes received;
/// `TimedOut` when the service sent nothing for `patience` without closing: a hang.
/// Other errors are the connection's, which a hostile conversation may well
/// provoke; they are not failures.
pub fn play(stream: Stream, data: &[u8], patience: Duration) -> io::Result<usize> {
    stream.set_read_timeout(Some(patience))?;
    stream.set_write_timeout(Some(patience))?;
    let bytes = session_stream(data, &crate::shm::host_id());
    let inline = bytes.len() <= INLINE_WRITE_MAX && matches!(stream, Stream::Unix(_));
    let sender = if inline {
        // Errors are the service's closing early; what it sent is still read below.
        let _ = (&stream)
            .write_all(&bytes)
            .and_then(|()| shutdown_write(&stream));
        None
    } else {
        // The service answers while it reads: a client that wrote everything before
        // reading could fill both socket buffers.
        let writer = stream.try_clone()?;
        Some(std::thread::spawn(move || {
            (&writer)
                .write_all(&bytes)
                .and_then(|()| shutdown_write(&writer))
        }))
    };
    let received = read_to_close(&stream);
    stream.shutdown();
    if let Some(sender) = sender {
        let _ = sender.join();
    }
    received
}

/// Tells the service the client has nothing more to send: its session ends once it
/// has served every request before.
fn shutdown_write(stream: &Stream) -> io::Result<()> {
    match stream {
        Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
        Stream::Unix(s) => s.shutdown(std::net::Shutdown::Write),
    }
}

/// Reads `stream` until its peer closes it; the bytes received.
fn read_to_close(mut stream: &Stream) -> io::Result<usize> {
    let mut received = 0;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(received),
            Ok(n) => received += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::ErrorKind::TimedOut.into())
            }
            // The service may close with unread bytes of ours (after a frame it
            // refused): a reset, which ends the conversation too.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(received),
            Err(e) => return Err(e),
        }
    }
}

/// The `session` fuzz target's service and its checks, kept for a whole campaign: one
/// service with its OpenCL runtime, in this process, serving every input as a new
/// client over a Unix socket pair. What each input still goes through is what a
/// client's connection goes through on a node (its own session thread, frames read
/// from a socket, the device queue and worker, the program cache, the runtime); what
/// it skips is the listener's `accept`.
///
/// After every input the service must have ended the session (within [`PATIENCE`]
/// of the client's end: else it hangs) and released everything the session held:
/// clients, objects and buffer bytes are back where they were before the input, so
/// a leak shows at the input that caused it. A bystander client stays connected the
/// whole time, so that a session's end is never the last client's (which returns
/// idle memory to the system, a cost that is the same for every input).
pub struct Harness {
    service: ServiceHandle,
    _registry: prometheus_client::registry::Registry,
    _bystander: Stream,
    idle: Held,
}

/// How long the service may take to end a session after its client's end (compiles
/// under a loaded machine have taken seconds).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// What the service's clients hold, which must be the same after every input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    clients: usize,
    objects: i64,
    buffer_bytes: i64,
}

impl Harness {
    /// Starts the service with its default configuration (every bound as a node has
    /// it) and connects the bystander.
    pub fn start() -> io::Result<Harness> {
        let mut registry = prometheus_client::registry::Registry::default();
        let service = spawn(
            "127.0.0.1:0".parse().expect("an address"),
            ServiceConfig::default(),
            &mut registry,
        )?;
        if service.device_names().is_empty() {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no OpenCL device"));
        }
        let (ours, theirs) = UnixStream::pair()?;
        service.serve_connection(Stream::Unix(theirs), Caller::default());
        let mut bystander = Stream::Unix(ours);
        greet(&mut bystander)?;
        let harness = Harness {
            idle: held(&service),
            service,
            _registry: registry,
            _bystander: bystander,
        };
        assert_eq!(harness.idle.clients, 1, "the bystander is the only client");
        Ok(harness)
    }

    /// Plays input `data` as a new client; panics when the service hangs or the
    /// session leaves anything behind.
    pub fn run(&self, data: &[u8]) {
        let (ours, theirs) = UnixStream::pair().expect("a socket pair");
        self.service
            .serve_connection(Stream::Unix(theirs), Caller::default());
        if let Err(e) = play(Stream::Unix(ours), data, PATIENCE) {
            assert_ne!(
                e.kind(),
                io::ErrorKind::TimedOut,
                "the service did not end the session within {PATIENCE:?} of its client's end"
            );
        }
        // The connection closes after the session's last step, and its gauges are
        // updated before; a task the session flushed may still let go of buffers.
        let deadline = std::time::Instant::now() + PATIENCE;
        while held(&self.service) != self.idle {
            assert!(
                std::time::Instant::now() < deadline,
                "the session left {:?} behind (before it: {:?})",
                held(&self.service),
                self.idle
            );
            std::thread::yield_now();
        }
    }
}

fn held(service: &ServiceHandle) -> Held {
    Held {
        clients: service.clients_connected(),
        objects: service.client_objects(),
        buffer_bytes: service.client_buffer_bytes(),
    }
}

/// Opens a session on `stream`: `Hello`, and its reply.
fn greet(stream: &mut Stream) -> io::Result<()> {
    let mut hello = Vec::new();
    Request::Hello {
        version: proto::PROTOCOL_VERSION,
        host_id: b"",
        tenant: b"",
        token: b"",
    }
    .encode(0, &mut hello);
    stream.write_all(&hello)?;
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Ok(proto::Decoded::Complete(..)) = proto::decode_frame(&received, u32::MAX) {
            return Ok(());
        }
        match stream.read(&mut buf)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// Records for [`session_stream`]: each request of `requests`, encoded, as a record.
/// The seed corpus is written with it.
pub fn records(same_host: bool, requests: &[Request<'_>]) -> Vec<u8> {
    let mut out = vec![u8::from(same_host)];
    for request in requests {
        let mut frame = Vec::new();
        request.encode(0, &mut frame);
        let body = &frame[proto::HEADER_LEN..];
        let kind = u16::from_le_bytes([frame[4], frame[5]]);
        let len = u16::try_from(body.len()).expect("seed bodies are small");
        out.push(u8::try_from(kind).expect("message kinds fit a byte"));
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Decoded, KernelArg, NdRange};

    fn frames(stream: &[u8]) -> Vec<(u16, Vec<u8>)> {
        let mut rest = stream;
        let mut out = Vec::new();
        while let Ok(Decoded::Complete((h, body), used)) = proto::decode_frame(rest, u32::MAX) {
            out.push((h.kind, body.to_vec()));
            rest = &rest[used..];
        }
        assert!(rest.is_empty());
        out
    }

    fn launch(global: u64) -> Request<'static> {
        Request::enqueue(vec![Command::NdRange(NdRange {
            queue: 2,
            event: 0,
            kernel: 5,
            work_dim: 1,
            offset: [0; 3],
            global: [global, 0, 0],
            local: None,
            args: vec![KernelArg::Mem(3)],
        })])
    }

    #[test]
    fn records_become_frames_after_a_hello_and_big_launches_are_left_out() {
        let input = records(
            true,
            &[
                Request::Release { id: 9 },
                launch(LAUNCH_ITEMS_MAX + 1),
                launch(LAUNCH_ITEMS_MAX),
                Request::Flush,
            ],
        );
        let sent = frames(&session_stream(&input, b"host"));
        let decoded: Vec<Request<'_>> = sent
            .iter()
            .map(|(kind, body)| Request::decode(*kind, body).unwrap())
            .collect();
        assert_eq!(
            decoded,
            [
                Request::Hello {
                    version: proto::PROTOCOL_VERSION,
                    host_id: b"host",
                    tenant: b"",
                    token: b"",
                },
                Request::Release { id: 9 },
                launch(LAUNCH_ITEMS_MAX),
                Request::Flush
            ]
        );
    }

    #[test]
    fn any_input_gives_whole_frames() {
        for input in [
            &b""[..],
            b"\x00",
            b"\x01\x05\xff\xff",
            b"\x00\x01\x02\x00ab\x07",
        ] {
            let sent = frames(&session_stream(input, b"h"));
            assert!(matches!(
                Request::decode(sent[0].0, &sent[0].1),
                Ok(Request::Hello { .. })
            ));
        }
    }
}
