//! Who may open a session: the credential in a client's `Hello`, checked by the
//! program that embeds the service.
//!
//! The service knows no tenants, tokens or policies: the node does (its one identity
//! model), and gives the service a [`Gate`] that answers each `Hello`'s tenant and
//! token with an [`Admission`] (the tenant's name and the counter of its memory over
//! all its sessions, see [`super::account`]) or a refusal's sentence. Without a gate every client is
//! admitted, as before tenants had credentials.
//!
//! Where the check runs: in the service's process the session asks the gate when its
//! `Hello` arrives. With runtime processes ([`super::isolate`]) the node asks it before
//! it hands a connection over ([`admit_first`]: it peeks at the `Hello`, which stays in
//! the socket for the runtime process to read), so that a runtime process never serves
//! a client the node did not admit, and hands the admission over with the connection.
//! A refused client gets one `Reply` to its `Hello` with [`REFUSED`] and the sentence as
//! payload, then the connection is closed.
//!
//! Not here: the decision itself (the node's `core::tenant`), its audit line (the node
//! writes one per refusal), TLS.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use crate::cl::{self, ClInt};
use crate::proto::{self, Decoded, Request, Response};
use crate::stream::Stream;

/// The status a refused `Hello` is answered with: the ICD then offers no platform of
/// that node, so `clGetPlatformIDs` of a program with no other node returns
/// `CL_PLATFORM_NOT_FOUND_KHR`.
pub const REFUSED: ClInt = cl::CL_INVALID_PLATFORM;

/// A tenant's name sent with a handed-over connection is cut to this many bytes (it is
/// for log lines only).
pub const TENANT_BYTES_MAX: usize = 64;

/// How long a client may take to send its `Hello` before the node closes it.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// A `Hello` is a header, a host id, a tenant's name and a token: far less than this.
const HELLO_BYTES_MAX: usize = 8192;

/// An admitted session: who it is and what it may hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Admission {
    /// The tenant's name for log lines (`anonymous` for a caller without one).
    pub tenant: String,
    /// The tenant's memory over all its sessions, when the tenant has a bound; every
    /// session is bounded by the service's `buffer_bytes_max` as well.
    pub memory: Option<std::sync::Arc<super::account::TenantMemory>>,
}

/// Where a connection comes from, as far as the service or the program that handed it
/// in knows (see [`crate::service::ServiceHandle::serve_connection`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    /// The client's address; `None` on the node's local Unix socket.
    pub peer: Option<SocketAddr>,
    /// The tenant a client certificate proved (a connection the node accepted over
    /// TLS and relays), which wins over what its `Hello` says.
    pub certificate: Option<String>,
}

impl Caller {
    /// A connection the service accepted itself: its peer's address, no certificate.
    pub fn of(stream: &Stream) -> Caller {
        let peer = match stream {
            Stream::Tcp(s) => s.peer_addr().ok(),
            Stream::Unix(_) => None,
        };
        Caller {
            peer,
            certificate: None,
        }
    }
}

/// Decides who may open a session (see the module docs).
pub trait Gate: Send + Sync + std::fmt::Debug {
    /// Admits or refuses `caller`, whose `Hello` named `tenant` with `token` (each
    /// empty when not given). The refusal is a sentence for the client, naming no
    /// token.
    fn admit(&self, caller: &Caller, tenant: &str, token: &str) -> Result<Admission, String>;
}

/// The `Reply` that refuses request `id` with `reason`.
pub(crate) fn refusal(id: u64, reason: &str) -> Vec<u8> {
    let mut out = Vec::new();
    Response::Reply {
        status: REFUSED,
        payload: reason.as_bytes(),
    }
    .encode(id, &mut out);
    out
}

/// What became of a connection at the node's gate.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// Its `Hello` was admitted; the `Hello` is still in the socket.
    Admitted(Admission),
    /// Refused (and told so), broken, silent or gone: the caller drops it.
    Closed,
}

/// Peeks at the first frame of `stream` (which must be a `Hello`), asks `gate` about
/// `caller`, and answers a refusal itself (see the module docs).
pub(crate) fn admit_first(stream: &Stream, caller: &Caller, gate: &dyn Gate) -> Checked {
    if stream.set_read_timeout(Some(HELLO_TIMEOUT)).is_err() {
        return Checked::Closed;
    }
    let checked = match peek_hello(stream) {
        Some(hello) => match gate.admit(caller, &hello.tenant, &hello.token) {
            Ok(admission) => Checked::Admitted(admission),
            Err(reason) => {
                // Taken from the socket first: closing one with unread bytes resets
                // it, and the client would lose the answer. Best effort: the client
                // may be gone already.
                let mut frame = vec![0u8; hello.len];
                let _ = (&*stream).read_exact(&mut frame);
                let _ = (&*stream).write_all(&refusal(hello.id, &reason));
                stream.shutdown();
                Checked::Closed
            }
        },
        None => Checked::Closed,
    };
    // The socket option holds for the runtime process's copy too.
    if stream.set_read_timeout(None).is_err() {
        return Checked::Closed;
    }
    checked
}

/// A `Hello`'s credential and its request id.
struct PeekedHello {
    id: u64,
    /// Bytes of the whole frame.
    len: usize,
    tenant: String,
    token: String,
}

/// The `Hello` at the head of `stream`, left in the socket; `None` when the first frame
/// is not a well-formed `Hello` of this protocol within [`HELLO_TIMEOUT`].
fn peek_hello(stream: &Stream) -> Option<PeekedHello> {
    let deadline = Instant::now() + HELLO_TIMEOUT;
    let mut buf = vec![0u8; HELLO_BYTES_MAX];
    let body_max = (HELLO_BYTES_MAX - proto::HEADER_LEN) as u32;
    loop {
        let n = peek(stream, &mut buf).ok().filter(|&n| n > 0)?;
        match proto::decode_header(&buf[..n], body_max).ok()? {
            Decoded::Complete(h, at) if n >= at + h.body_len as usize => {
                let body = &buf[at..at + h.body_len as usize];
                return match Request::decode(h.kind, body) {
                    Ok(Request::Hello {
                        version,
                        tenant,
                        token,
                        ..
                    }) if version == proto::PROTOCOL_VERSION => Some(PeekedHello {
                        id: h.id,
                        len: at + h.body_len as usize,
                        tenant: String::from_utf8_lossy(tenant).into_owned(),
                        token: String::from_utf8_lossy(token).into_owned(),
                    }),
                    _ => None,
                };
            }
            // The rest of a small frame is on its way: wait for it, briefly.
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            _ => return None,
        }
    }
}

/// Reads what has arrived without taking it from the socket (waits for the first
/// bytes up to the socket's read timeout).
fn peek(stream: &Stream, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the descriptor is `stream`'s, open for as long as it is borrowed here.
    let fd = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) };
    Ok(rustix::net::recv(fd, buf, rustix::net::RecvFlags::PEEK)?.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[derive(Debug)]
    struct OnlyTeamA;

    impl Gate for OnlyTeamA {
        fn admit(&self, caller: &Caller, tenant: &str, token: &str) -> Result<Admission, String> {
            assert_eq!(caller, &Caller::default(), "a Unix socket has no address");
            if tenant == "team-a" && token == "right" {
                Ok(Admission {
                    tenant: tenant.to_string(),
                    memory: None,
                })
            } else {
                Err(format!(
                    "tenant `{tenant}` is unknown or its token does not match"
                ))
            }
        }
    }

    fn hello(tenant: &[u8], token: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        Request::Hello {
            version: proto::PROTOCOL_VERSION,
            host_id: b"",
            tenant,
            token,
        }
        .encode(9, &mut out);
        out
    }

    #[test]
    fn an_admitted_hello_stays_in_the_socket() {
        let (mut client, served) = UnixStream::pair().unwrap();
        let sent = hello(b"team-a", b"right");
        client.write_all(&sent).unwrap();
        let served = Stream::Unix(served);
        let checked = admit_first(&served, &Caller::of(&served), &OnlyTeamA);
        assert_eq!(
            checked,
            Checked::Admitted(Admission {
                tenant: "team-a".to_string(),
                memory: None
            })
        );
        let mut again = vec![0u8; sent.len()];
        (&served).read_exact(&mut again).unwrap();
        assert_eq!(again, sent, "the runtime process reads the Hello itself");
    }

    #[test]
    fn a_refused_hello_is_answered_with_the_reason_and_closed() {
        let (mut client, served) = UnixStream::pair().unwrap();
        client.write_all(&hello(b"team-a", b"wrong")).unwrap();
        assert_eq!(
            admit_first(&Stream::Unix(served), &Caller::default(), &OnlyTeamA),
            Checked::Closed
        );
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).unwrap();
        let Ok(Decoded::Complete((h, body), _)) = proto::decode_frame(&answer, u32::MAX) else {
            panic!("one whole frame")
        };
        let Ok(Response::Reply { status, payload }) = Response::decode(h.kind, body) else {
            panic!("a reply")
        };
        assert_eq!((h.id, status), (9, REFUSED));
        assert_eq!(
            payload,
            b"tenant `team-a` is unknown or its token does not match"
        );
    }

    #[test]
    fn anything_but_a_hello_is_closed_unanswered() {
        let (mut client, served) = UnixStream::pair().unwrap();
        let mut flush = Vec::new();
        Request::Flush.encode(1, &mut flush);
        client.write_all(&flush).unwrap();
        assert_eq!(
            admit_first(&Stream::Unix(served), &Caller::default(), &OnlyTeamA),
            Checked::Closed
        );
        // Nothing, or a reset (the Flush was not read).
        let mut answer = Vec::new();
        let _ = client.read_to_end(&mut answer);
        assert!(answer.is_empty());
    }
}
