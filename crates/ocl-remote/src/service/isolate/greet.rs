//! The node answers a same-host client's `Hello` on TCP itself.
//!
//! A client on the node's host says `Hello` over TCP, learns the node's Unix socket from
//! the reply, connects there and leaves the TCP connection. Handed to a runtime process,
//! that first connection would take a started, initialised process for one reply and
//! end it; the replacement's start-up then competes with the session on the CPU. So the
//! node reads the first frame itself (peeking first, so that anything else reaches the
//! runtime process untouched), answers a same-host `Hello` from what the first runtime
//! process reported (the same reply a runtime process gives), and hands the connection
//! over only if the client goes on using it (its Unix socket failed), marked as greeted.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::cl;
use crate::proto::{self, Decoded, HelloInfo, Request, Response};
use crate::service::gate::DeviceMask;

/// How long a client may take to send its `Hello`, and then to either leave or use the
/// connection, before the node hands it over as it is.
const GREET_TIMEOUT: Duration = Duration::from_secs(10);
/// A `Hello` is a header and a host id: far less than this.
const HELLO_BYTES_MAX: usize = 4096;

/// What the node says to a same-host client.
pub(crate) struct HelloAnswer {
    pub host_id: Vec<u8>,
    pub local_socket: Vec<u8>,
    pub platforms: Vec<Vec<u32>>,
}

/// What became of a connection.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Greeting {
    /// Not a same-host `Hello` (or nothing came in time): hand it over as it is.
    Untouched,
    /// Greeted, and the client goes on using it: hand it over as greeted.
    Greeted,
    /// The client left (it moved to the Unix socket) or the connection failed.
    Gone,
}

/// Reads and answers a same-host client's `Hello` on `stream` (see the module docs),
/// listing only the devices of `devices` (the client's admission).
pub(crate) fn greet(stream: &TcpStream, answer: &HelloAnswer, devices: DeviceMask) -> Greeting {
    if stream.set_read_timeout(Some(GREET_TIMEOUT)).is_err() {
        return Greeting::Untouched;
    }
    let greeting = greet_timed(stream, answer, devices);
    // The socket option holds for the runtime process's copy too.
    if stream.set_read_timeout(None).is_err() {
        return Greeting::Gone;
    }
    greeting
}

fn greet_timed(mut stream: &TcpStream, answer: &HelloAnswer, devices: DeviceMask) -> Greeting {
    let deadline = Instant::now() + GREET_TIMEOUT;
    let mut buf = [0u8; HELLO_BYTES_MAX];
    let (id, len) = loop {
        let n = match stream.peek(&mut buf) {
            Ok(0) => return Greeting::Gone,
            Ok(n) => n,
            Err(_) => return Greeting::Untouched,
        };
        let body_max = (HELLO_BYTES_MAX - proto::HEADER_LEN) as u32;
        match proto::decode_header(&buf[..n], body_max) {
            Ok(Decoded::Complete(h, at)) if n >= at + h.body_len as usize => {
                let end = at + h.body_len as usize;
                match Request::decode(h.kind, &buf[at..end]) {
                    Ok(Request::Hello {
                        version, host_id, ..
                    }) if version == proto::PROTOCOL_VERSION
                        && !host_id.is_empty()
                        && host_id == answer.host_id.as_slice() =>
                    {
                        break (h.id, end)
                    }
                    _ => return Greeting::Untouched,
                }
            }
            // The rest of a small frame is on its way: wait for it, briefly.
            Ok(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            _ => return Greeting::Untouched,
        }
    };
    if stream.read_exact(&mut buf[..len]).is_err() {
        return Greeting::Gone;
    }
    let mut payload = Vec::new();
    HelloInfo {
        host_id: &answer.host_id,
        platforms: devices.filter_platforms(&answer.platforms),
        local_socket: &answer.local_socket,
    }
    .encode(&mut payload);
    let mut reply = Vec::new();
    Response::Reply {
        status: cl::CL_SUCCESS,
        payload: &payload,
    }
    .encode(id, &mut reply);
    if stream.write_all(&reply).is_err() {
        return Greeting::Gone;
    }
    match stream.peek(&mut buf[..1]) {
        Ok(0) => Greeting::Gone,
        Err(e)
            if !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Greeting::Gone
        }
        // More requests, or a client that stays quiet: the runtime process serves it.
        _ => Greeting::Greeted,
    }
}

/// The platforms line of a runtime process's ready frame: device indices, `,` between
/// devices, `;` between platforms.
pub(crate) fn encode_platforms(platforms: &[Vec<u32>]) -> String {
    platforms
        .iter()
        .map(|p| p.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
        .collect::<Vec<_>>()
        .join(";")
}

/// The inverse of [`encode_platforms`]; `None` if a number is not one.
pub(crate) fn decode_platforms(line: &str) -> Option<Vec<Vec<u32>>> {
    if line.is_empty() {
        return Some(Vec::new());
    }
    line.split(';')
        .map(|p| {
            p.split(',')
                .filter(|d| !d.is_empty())
                .map(|d| d.parse().ok())
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (c, l.accept().unwrap().0)
    }

    fn answer() -> HelloAnswer {
        HelloAnswer {
            host_id: b"this-host".to_vec(),
            local_socket: b"netaccel-ocl-1-2".to_vec(),
            platforms: vec![vec![0, 1], vec![2]],
        }
    }

    fn hello(host_id: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        Request::Hello {
            version: proto::PROTOCOL_VERSION,
            host_id,
            tenant: b"",
            token: b"",
        }
        .encode(7, &mut out);
        out
    }

    #[test]
    fn a_same_host_hello_is_answered_and_a_client_that_moves_on_is_gone() {
        let (mut client, served) = pair();
        client.write_all(&hello(b"this-host")).unwrap();
        let reader = std::thread::spawn(move || {
            let mut head = [0u8; proto::HEADER_LEN];
            client.read_exact(&mut head).unwrap();
            let Decoded::Complete(h, _) = proto::decode_header(&head, u32::MAX).unwrap() else {
                panic!()
            };
            let mut body = vec![0; h.body_len as usize];
            client.read_exact(&mut body).unwrap();
            let Response::Reply { status, payload } = Response::decode(h.kind, &body).unwrap()
            else {
                panic!()
            };
            assert_eq!((h.id, status), (7, cl::CL_SUCCESS));
            let info = HelloInfo::decode(payload).unwrap();
            assert_eq!(info.local_socket, b"netaccel-ocl-1-2");
            // Only the devices of its admission, under their node-wide indices.
            assert_eq!(info.platforms, vec![vec![1], vec![2]]);
            // Moves to the Unix socket: leaves this connection.
        });
        let devices = DeviceMask::from_fn(3, |i| i != 0);
        assert_eq!(greet(&served, &answer(), devices), Greeting::Gone);
        reader.join().unwrap();
    }

    #[test]
    fn a_client_that_stays_is_greeted_and_others_are_untouched() {
        let (mut client, served) = pair();
        client.write_all(&hello(b"this-host")).unwrap();
        client.write_all(b"next request").unwrap();
        assert_eq!(
            greet(&served, &answer(), DeviceMask::ALL),
            Greeting::Greeted
        );

        // Another host's Hello stays in the socket for the runtime process to read.
        let (mut client, mut served) = pair();
        let other = hello(b"other-host");
        client.write_all(&other).unwrap();
        assert_eq!(
            greet(&served, &answer(), DeviceMask::ALL),
            Greeting::Untouched
        );
        let mut got = vec![0; other.len()];
        served.read_exact(&mut got).unwrap();
        assert_eq!(got, other);
    }

    #[test]
    fn platforms_survive_the_ready_line() {
        for p in [vec![], vec![vec![0]], vec![vec![0, 1], vec![2, 3, 4]]] {
            assert_eq!(decode_platforms(&encode_platforms(&p)), Some(p));
        }
        assert_eq!(decode_platforms("0,x"), None);
    }
}
