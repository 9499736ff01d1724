//! Fuzzing the live service: what one hostile client can send a node.
//!
//! The `session` fuzz target (`fuzz/`) and the corpus replay test
//! (`tests/fuzz_corpus.rs`) share these bodies. An input is a client's whole
//! conversation: after a `Hello` (same-host or not, by the input's first byte) come
//! records `[kind: u8][len: u16 LE][body: len bytes]`, each sent as one frame, so
//! mutations land in message bodies (ids, sizes, flags, names, sources) rather than in
//! framing the service refuses at once.
//!
//! What the fuzzer may not do is what no node can defend against while the runtime
//! runs in its process: an OpenCL C kernel is code, and on a CPU device it runs with the
//! node's memory. So the driver keeps launches small (at most [`LAUNCH_ITEMS_MAX`] work
//! items) and the seed kernels touch no memory; every other request goes through as the
//! fuzzer wrote it.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::proto::{self, Command, Request};

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

/// Plays fuzz input `data` to the service at `addr` over one TCP connection and reads
/// what comes back until the service closes the connection or sends nothing for
/// `quiet`; then closes it. Returns the bytes received. Errors are the connection's,
/// which a hostile conversation may well provoke; they are not failures.
pub fn drive_session(addr: SocketAddr, data: &[u8], quiet: Duration) -> io::Result<usize> {
    let stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(quiet))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let bytes = session_stream(data, &crate::shm::host_id());
    // Written from its own thread: the service answers while it reads, and a client
    // that wrote everything before reading could fill both socket buffers.
    let mut writer = stream.try_clone()?;
    let sender = std::thread::spawn(move || writer.write_all(&bytes));
    let mut reader = &stream;
    let mut received = 0;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => received += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            Err(_) => break,
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let _ = sender.join();
    Ok(received)
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
