//! Who may open a session: the credential in a client's `Hello`, checked by the
//! program that embeds the service.
//!
//! The service knows no tenants, tokens or policies: the node does (its one identity
//! model), and gives the service a [`Gate`] that answers each `Hello`'s tenant and
//! token with an [`Admission`] (the tenant's name, the devices it may see and use as a
//! [`DeviceMask`], and the counter of its memory over all its sessions, see
//! [`super::account`]) or a refusal's sentence. Without a gate every client is
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

/// The devices a session may see and use: bit `i` is the device of node-wide index
/// `i`, the index clients and `/metrics` know it by. A fixed size (one `u64`), so that
/// the record a connection is handed over with stays fixed-size; the service shares
/// at most [`DeviceMask::DEVICES_MAX`] devices (checked when it opens its runtime).
///
/// Indices are not renumbered per session: a session sees its devices under the
/// indices every session sees them under, with gaps where a device is not its own, so
/// a forged index names the same device in every session and the check is one bit.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DeviceMask(u64);

impl DeviceMask {
    /// Devices a mask can name: the most the service shares.
    pub const DEVICES_MAX: usize = 64;
    /// Every device (a gate that grants all, or no gate at all).
    pub const ALL: DeviceMask = DeviceMask(u64::MAX);
    /// No device.
    pub const NONE: DeviceMask = DeviceMask(0);

    /// The mask of the devices `0..count` for which `granted(index)` holds.
    pub fn from_fn(count: usize, mut granted: impl FnMut(usize) -> bool) -> DeviceMask {
        assert!(
            count <= Self::DEVICES_MAX,
            "{count} devices: a mask names at most {}",
            Self::DEVICES_MAX
        );
        let bits = (0..count)
            .filter(|&i| granted(i))
            .fold(0u64, |bits, i| bits | 1 << i);
        DeviceMask(bits)
    }

    /// Whether device `index` is in the mask (an index past the bound never is).
    pub fn contains(self, index: u32) -> bool {
        index < Self::DEVICES_MAX as u32 && self.0 & (1 << index) != 0
    }

    /// Whether no device at all is in the mask.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The platforms of a `Hello` answer (each its devices' node-wide indices) with
    /// only the devices of this mask: every platform stays, at its index, so that
    /// platform indices do not shift either; one without a device of the mask is
    /// listed empty (the ICD does not offer it).
    pub(crate) fn filter_platforms(self, platforms: &[Vec<u32>]) -> Vec<Vec<u32>> {
        platforms
            .iter()
            .map(|devices| {
                devices
                    .iter()
                    .copied()
                    .filter(|&d| self.contains(d))
                    .collect()
            })
            .collect()
    }

    /// The mask as it travels (see `isolate::wire`).
    pub(crate) fn bits(self) -> u64 {
        self.0
    }

    pub(crate) fn from_bits(bits: u64) -> DeviceMask {
        DeviceMask(bits)
    }
}

impl Default for DeviceMask {
    /// Every device: what a session admitted without a device policy sees.
    fn default() -> DeviceMask {
        DeviceMask::ALL
    }
}

impl std::fmt::Debug for DeviceMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == DeviceMask::ALL {
            return f.write_str("DeviceMask(all)");
        }
        let indices: Vec<u32> = (0..Self::DEVICES_MAX as u32)
            .filter(|&i| self.contains(i))
            .collect();
        write!(f, "DeviceMask({indices:?})")
    }
}

/// An admitted session: who it is and what it may hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Admission {
    /// The tenant's name for log lines (`anonymous` for a caller without one).
    pub tenant: String,
    /// The devices it may see and use: its `Hello` answer lists only these, and a
    /// request naming another is refused with `CL_INVALID_DEVICE`.
    pub devices: DeviceMask,
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
    /// empty when not given), to a session on the shared devices named `devices` (in
    /// node-wide index order: what the admission's [`DeviceMask`] is over). The
    /// refusal is a sentence for the client, naming no token.
    fn admit(
        &self,
        caller: &Caller,
        tenant: &str,
        token: &str,
        devices: &[String],
    ) -> Result<Admission, String>;

    /// A session admitted as `tenant` named device `device`, which its admission does
    /// not hold, and was refused `CL_INVALID_DEVICE`: for the gate's owner to audit.
    /// Called for the first such request per device and session, from the session's
    /// thread in the service's process, or from the thread that reads a runtime
    /// process's log (see [`device_refusal`]; `caller` is then the default). Nothing
    /// by default.
    fn refused_device(&self, caller: &Caller, tenant: &str, device: u32) {
        let _ = (caller, tenant, device);
    }
}

/// What a session logs when it refuses `tenant` a device (see [`Gate::refused_device`]):
/// a line of the service, which a runtime process writes on its standard error and
/// the node reads back with [`parse_device_refusal`].
pub(crate) fn device_refusal(tenant: &str, device: u32) -> String {
    format!(
        "tenant `{tenant}`: request for OpenCL device {device} refused (CL_INVALID_DEVICE): \
         the tenant's opencl_devices do not grant it"
    )
}

/// The tenant and device of a [`device_refusal`] line, as a runtime process writes
/// it (`ocl-remote: ` first); `None` for any other line.
pub(crate) fn parse_device_refusal(line: &str) -> Option<(&str, u32)> {
    let rest = line
        .strip_prefix("ocl-remote: ")?
        .strip_prefix("tenant `")?;
    let (tenant, rest) = rest.split_once("`: request for OpenCL device ")?;
    let (device, rest) = rest.split_once(' ')?;
    let device = device.parse().ok()?;
    (format!("tenant `{tenant}`: request for OpenCL device {device} {rest}")
        == device_refusal(tenant, device))
    .then_some((tenant, device))
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
/// `caller` on the shared devices named `devices`, and answers a refusal itself (see
/// the module docs).
pub(crate) fn admit_first(
    stream: &Stream,
    caller: &Caller,
    gate: &dyn Gate,
    devices: &[String],
) -> Checked {
    if stream.set_read_timeout(Some(HELLO_TIMEOUT)).is_err() {
        return Checked::Closed;
    }
    let checked = match peek_hello(stream) {
        Some(hello) => match gate.admit(caller, &hello.tenant, &hello.token, devices) {
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
        fn admit(
            &self,
            caller: &Caller,
            tenant: &str,
            token: &str,
            devices: &[String],
        ) -> Result<Admission, String> {
            assert_eq!(caller, &Caller::default(), "a Unix socket has no address");
            if tenant == "team-a" && token == "right" {
                Ok(Admission {
                    tenant: tenant.to_string(),
                    // The second device is not team A's.
                    devices: DeviceMask::from_fn(devices.len(), |i| i != 1),
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
        let devices = ["cpu".to_string(), "gpu".to_string(), "fpga".to_string()];
        let checked = admit_first(&served, &Caller::of(&served), &OnlyTeamA, &devices);
        assert_eq!(
            checked,
            Checked::Admitted(Admission {
                tenant: "team-a".to_string(),
                devices: DeviceMask::from_fn(3, |i| i == 0 || i == 2),
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
            admit_first(&Stream::Unix(served), &Caller::default(), &OnlyTeamA, &[]),
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
            admit_first(&Stream::Unix(served), &Caller::default(), &OnlyTeamA, &[]),
            Checked::Closed
        );
        // Nothing, or a reset (the Flush was not read).
        let mut answer = Vec::new();
        let _ = client.read_to_end(&mut answer);
        assert!(answer.is_empty());
    }

    #[test]
    fn a_device_mask_holds_the_granted_indices_and_nothing_past_its_bound() {
        let mask = DeviceMask::from_fn(5, |i| i % 2 == 0);
        let held: Vec<u32> = (0..70).filter(|&i| mask.contains(i)).collect();
        assert_eq!(held, vec![0, 2, 4]);
        assert!(!mask.is_empty());
        assert_eq!(format!("{mask:?}"), "DeviceMask([0, 2, 4])");
        assert!(DeviceMask::from_fn(5, |_| false).is_empty());
        assert_eq!(DeviceMask::from_fn(0, |_| true), DeviceMask::NONE);
        // All 64 devices, and no index past them, even for the mask of all.
        let full = DeviceMask::from_fn(DeviceMask::DEVICES_MAX, |_| true);
        assert_eq!(full, DeviceMask::ALL);
        assert!(full.contains(63) && !full.contains(64) && !full.contains(u32::MAX));
        assert_eq!(DeviceMask::default(), DeviceMask::ALL);
        assert_eq!(DeviceMask::from_bits(mask.bits()), mask);
        let platforms = [vec![0, 1], vec![2, 3], vec![4]];
        assert_eq!(
            mask.filter_platforms(&platforms),
            vec![vec![0], vec![2], vec![4]]
        );
        assert_eq!(
            DeviceMask::from_fn(5, |i| i == 1).filter_platforms(&platforms),
            vec![vec![1], vec![], vec![]]
        );
    }

    #[test]
    #[should_panic(expected = "65 devices: a mask names at most 64")]
    fn a_mask_past_its_bound_is_a_bug() {
        DeviceMask::from_fn(DeviceMask::DEVICES_MAX + 1, |_| true);
    }

    #[test]
    fn a_device_refusal_line_reads_back_and_nothing_else_does() {
        let line = format!("ocl-remote: {}", device_refusal("team-a", 3));
        assert_eq!(parse_device_refusal(&line), Some(("team-a", 3)));
        for other in [
            device_refusal("team-a", 3),
            format!("ocl-remote: {}", device_refusal("team-a", 3)).replace("refused", "denied"),
            "ocl-remote: tenant `team-a`: request for OpenCL device x refused".to_string(),
            "ocl-remote: client connection closed: reset".to_string(),
            format!("ocl-remote: {} and more", device_refusal("team-a", 3)),
        ] {
            assert_eq!(parse_device_refusal(&other), None, "{other}");
        }
    }
}
