//! What the node and an isolated runtime process say on their control socket (a Unix
//! stream pair, fd 3 of the process). Pure encoders and decoders, plus the two socket
//! calls that carry a client's connection across (`SCM_RIGHTS`).
//!
//! 1. node → process: the service configuration, one length-prefixed frame of
//!    `key=value` lines (see [`encode_config`]);
//! 2. process → node: ready, one frame of lines: the platforms' device indices (see
//!    `greet::encode_platforms`), then the shared devices' names, one per line (the
//!    process exits instead when it cannot open OpenCL);
//! 3. node → process, per client: a fixed record ([`CLIENT_RECORD_LEN`] bytes: `kind`,
//!    `refuse`, `greeted`, and the admission the node's gate gave, if any, its device
//!    mask included; see [`encode_client`]) carrying the client's socket. The node keeps no copy, so the client's connection ends with
//!    the process.
//! 4. The node closes its end: the process drains (finishes its tasks, ends its
//!    sessions) and exits.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::service::account::TenantMemory;
use crate::service::gate::{Admission, DeviceMask, TENANT_BYTES_MAX};
use crate::service::ServiceConfig;
use crate::stream::Stream;

/// Largest control frame either side accepts (a configuration, a list of names).
const FRAME_MAX: usize = 1 << 20;

/// Writes one length-prefixed frame.
pub(crate) fn write_frame(mut w: impl Write, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len()).map_err(|_| io::ErrorKind::InvalidInput)?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(body)
}

/// Reads one length-prefixed frame of at most [`FRAME_MAX`] bytes.
pub(crate) fn read_frame(mut r: impl Read) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > FRAME_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "control frame too long",
        ));
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok(body)
}

/// The configuration a runtime process serves with, and the name of the node's local
/// socket (which the process names to same-host clients in its `Hello` reply).
pub(crate) fn encode_config(c: &ServiceConfig, local_socket: &[u8]) -> Vec<u8> {
    let mut lines = vec![
        format!("library={}", c.library),
        format!("clients_max={}", c.clients_max),
        format!("frame_body_max={}", c.frame_body_max),
        format!("buffer_bytes_max={}", c.buffer_bytes_max),
        format!("objects_max={}", c.objects_max),
        format!("pending_bytes_max={}", c.pending_bytes_max),
        format!("device_queue_depth_max={}", c.device_queue_depth_max),
        format!("shared_memory={}", c.shared_memory),
        format!("program_cache_entries_max={}", c.program_cache_entries_max),
        format!("program_cache_bytes_max={}", c.program_cache_bytes_max),
        format!("poll_before_sleep_ns={}", c.poll_before_sleep.as_nanos()),
        format!("send_stall_max_ns={}", c.send_stall_max.as_nanos()),
        format!("kernel_name_bytes_max={}", c.kernel_name_bytes_max),
        format!("body_spare_bytes_max={}", c.body_spare_bytes_max),
        format!("local_socket={}", String::from_utf8_lossy(local_socket)),
    ];
    lines.extend(c.platforms.iter().map(|p| format!("platform={p}")));
    lines.join("\n").into_bytes()
}

/// The inverse of [`encode_config`]. Unknown keys are refused: node and process are the
/// same build, so one means a mismatch, not an older peer.
pub(crate) fn decode_config(bytes: &[u8]) -> Result<(ServiceConfig, Vec<u8>), String> {
    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    let mut c = ServiceConfig::default();
    let mut local_socket = Vec::new();
    for line in text.lines() {
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| format!("no '=' in {line:?}"))?;
        fn num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, String> {
            v.parse().map_err(|_| format!("{key}: not a number: {v:?}"))
        }
        let ns = |v: &str| num::<u64>(key, v).map(Duration::from_nanos);
        match key {
            "library" => c.library = value.to_string(),
            "platform" => c.platforms.push(value.to_string()),
            "clients_max" => c.clients_max = num(key, value)?,
            "frame_body_max" => c.frame_body_max = num(key, value)?,
            "buffer_bytes_max" => c.buffer_bytes_max = num(key, value)?,
            "objects_max" => c.objects_max = num(key, value)?,
            "pending_bytes_max" => c.pending_bytes_max = num(key, value)?,
            "device_queue_depth_max" => c.device_queue_depth_max = num(key, value)?,
            "shared_memory" => c.shared_memory = value == "true",
            "program_cache_entries_max" => c.program_cache_entries_max = num(key, value)?,
            "program_cache_bytes_max" => c.program_cache_bytes_max = num(key, value)?,
            "poll_before_sleep_ns" => c.poll_before_sleep = ns(value)?,
            "send_stall_max_ns" => c.send_stall_max = ns(value)?,
            "kernel_name_bytes_max" => c.kernel_name_bytes_max = num(key, value)?,
            "body_spare_bytes_max" => c.body_spare_bytes_max = num(key, value)?,
            "local_socket" => local_socket = value.as_bytes().to_vec(),
            _ => return Err(format!("unknown key {key:?}")),
        }
    }
    Ok((c, local_socket))
}

/// What travels with a handed-over connection (see [`send_client`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClientRecord {
    /// The socket is a Unix one (else TCP).
    pub unix: bool,
    pub refuse: bool,
    pub greeted: bool,
    pub admission: Option<Admission>,
}

/// Bytes of one [`ClientRecord`] on the control socket.
pub(crate) const CLIENT_RECORD_LEN: usize = 4 + 8 + 8 + 1 + TENANT_BYTES_MAX;

/// `kind`, `refuse`, `greeted`, `admitted` (one byte each), the bound of the
/// admission's tenant memory (`u64`, all ones for none: then no second descriptor
/// comes with the connection's), the admission's device mask (`u64`), the tenant's
/// name (a length byte and [`TENANT_BYTES_MAX`] bytes, cut there and padded with
/// zeros).
pub(crate) fn encode_client(r: &ClientRecord) -> [u8; CLIENT_RECORD_LEN] {
    let mut out = [0u8; CLIENT_RECORD_LEN];
    let a = r.admission.clone().unwrap_or_default();
    out[..4].copy_from_slice(&[
        u8::from(r.unix),
        u8::from(r.refuse),
        u8::from(r.greeted),
        u8::from(r.admission.is_some()),
    ]);
    let max = a.memory.as_ref().map_or(u64::MAX, |m| m.max());
    out[4..12].copy_from_slice(&max.to_le_bytes());
    out[12..20].copy_from_slice(&a.devices.bits().to_le_bytes());
    let mut cut = a.tenant.len().min(TENANT_BYTES_MAX);
    while !a.tenant.is_char_boundary(cut) {
        cut -= 1;
    }
    out[20] = cut as u8;
    out[21..21 + cut].copy_from_slice(&a.tenant.as_bytes()[..cut]);
    out
}

/// The inverse of [`encode_client`], but for the tenant memory, which comes as a
/// descriptor: its bound (`None` when there is none).
pub(crate) fn decode_client(b: &[u8; CLIENT_RECORD_LEN]) -> (ClientRecord, Option<u64>) {
    let max = u64::from_le_bytes(b[4..12].try_into().expect("8 bytes"));
    let devices = u64::from_le_bytes(b[12..20].try_into().expect("8 bytes"));
    let len = usize::from(b[20]).min(TENANT_BYTES_MAX);
    let record = ClientRecord {
        unix: b[0] == 1,
        refuse: b[1] == 1,
        greeted: b[2] == 1,
        admission: (b[3] == 1).then(|| Admission {
            tenant: String::from_utf8_lossy(&b[21..21 + len]).into_owned(),
            devices: DeviceMask::from_bits(devices),
            memory: None,
        }),
    };
    let memory = (record.admission.is_some() && max != u64::MAX).then_some(max);
    (record, memory)
}

/// Hands a client's connection to the process with `record`: `refuse`: answer its
/// first request with `CL_OUT_OF_RESOURCES` (the node is at `clients_max`); `greeted`:
/// the node answered the client's same-host `Hello` already (see `greet`);
/// `admission`: what the node's gate admitted it as (see `crate::service::gate`).
pub(crate) fn send_client(
    control: &UnixStream,
    client: &Stream,
    record: &ClientRecord,
) -> io::Result<()> {
    debug_assert_eq!(record.unix, matches!(client, Stream::Unix(_)));
    let fd = match client {
        Stream::Tcp(s) => s.as_fd(),
        Stream::Unix(s) => s.as_fd(),
    };
    let memory = record.admission.as_ref().and_then(|a| a.memory.as_ref());
    let fds: Vec<_> = std::iter::once(fd)
        .chain(memory.map(|m| m.fd().as_fd()))
        .collect();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control_buf = SendAncillaryBuffer::new(&mut space);
    control_buf.push(SendAncillaryMessage::ScmRights(&fds));
    let body = encode_client(record);
    let sent = sendmsg(
        control,
        &[IoSlice::new(&body)],
        &mut control_buf,
        SendFlags::NOSIGNAL,
    )?;
    if sent != body.len() {
        // A small record on a local stream socket goes whole or not at all in practice; a
        // short send would desynchronise the stream, so it ends the process's use.
        return Err(io::ErrorKind::WriteZero.into());
    }
    Ok(())
}

/// A client connection handed over, and what came with it.
pub(crate) type HandedOver = (Stream, ClientRecord);

/// Receives the next client connection; `None` when the node closed the control socket
/// (drain).
pub(crate) fn recv_client(control: &UnixStream) -> io::Result<Option<HandedOver>> {
    let mut body = [0u8; CLIENT_RECORD_LEN];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control_buf = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        control,
        &mut [IoSliceMut::new(&mut body)],
        &mut control_buf,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    // The connection's descriptor, then the tenant memory's when there is one.
    let mut received: Vec<OwnedFd> = Vec::with_capacity(2);
    for msg in control_buf.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = msg {
            received.extend(fds.take(2 - received.len().min(2)));
        }
    }
    let mut received = received.into_iter();
    let fd = received.next();
    match got.bytes {
        0 => return Ok(None),
        n if n < body.len() => (&*control).read_exact(&mut body[n..])?,
        _ => {}
    }
    let fd = fd.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no fd handed over"))?;
    let (mut record, memory) = decode_client(&body);
    if let (Some(max), Some(admission)) = (memory, record.admission.as_mut()) {
        let page = received.next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "no tenant memory handed over")
        })?;
        admission.memory = Some(std::sync::Arc::new(TenantMemory::from_fd(page, max)?));
    }
    let stream = if record.unix {
        Stream::Unix(UnixStream::from(fd))
    } else {
        Stream::Tcp(std::net::TcpStream::from(fd))
    };
    Ok(Some((stream, record)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_survives_the_trip() {
        let c = ServiceConfig {
            platforms: vec!["Portable".into(), "x=y".into()],
            clients_max: 7,
            send_stall_max: Duration::from_millis(1234),
            shared_memory: false,
            ..ServiceConfig::default()
        };
        let (back, local) = decode_config(&encode_config(&c, b"netaccel-ocl-1-2")).unwrap();
        assert_eq!(format!("{c:?}"), format!("{back:?}"));
        assert_eq!(local, b"netaccel-ocl-1-2");
        assert!(decode_config(b"bogus=1").is_err());
        assert!(decode_config(b"clients_max=many").is_err());
    }

    #[test]
    fn a_connection_crosses_the_control_socket_and_still_carries_bytes() {
        let (node, process) = UnixStream::pair().unwrap();
        let (client, served) = UnixStream::pair().unwrap();
        let sent = ClientRecord {
            unix: true,
            refuse: true,
            greeted: false,
            admission: Some(Admission {
                tenant: "team-a".to_string(),
                devices: DeviceMask::from_fn(3, |i| i == 2),
                memory: Some(TenantMemory::create(1 << 20).unwrap()),
            }),
        };
        send_client(&node, &Stream::Unix(served), &sent).unwrap();
        let (mut stream, record) = recv_client(&process).unwrap().unwrap();
        assert_eq!(record, sent);
        (&client).write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        stream.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        drop(node);
        assert!(recv_client(&process).unwrap().is_none());
    }

    #[test]
    fn a_client_record_keeps_its_fields_and_cuts_long_names_on_a_character() {
        for admission in [
            None,
            Some(Admission::default()),
            Some(Admission {
                tenant: "é".repeat(40),
                devices: DeviceMask::from_fn(DeviceMask::DEVICES_MAX, |i| i == 63),
                memory: None,
            }),
        ] {
            let r = ClientRecord {
                unix: false,
                refuse: false,
                greeted: true,
                admission,
            };
            let (back, memory) = decode_client(&encode_client(&r));
            assert_eq!(memory, None);
            let cut = r.admission.as_ref().map(|a| {
                let t = &a.tenant;
                t.chars().take(TENANT_BYTES_MAX / 2).collect::<String>()
            });
            assert_eq!(back.admission.as_ref().map(|a| a.tenant.clone()), cut);
            assert_eq!(
                back.admission.as_ref().map(|a| a.devices),
                r.admission.as_ref().map(|a| a.devices)
            );
            assert_eq!((back.unix, back.refuse, back.greeted), (false, false, true));
        }
    }
}
