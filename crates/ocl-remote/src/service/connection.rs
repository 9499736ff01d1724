//! The bytes of a client connection: reading frames (large bodies straight into their
//! buffer) and writing replies and results, with the bound on how long a client may
//! stall the writer. What the frames mean is the session's business ([`super::session`]).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

use super::Shared;
use crate::cl::ClInt;
use crate::poll::AdaptiveSpin;
use crate::proto::{self, Decoded, Response};
use crate::service::lock;
use crate::stream::Stream;

/// The write half of a client connection, shared by its session and the device workers.
pub(crate) type ClientWriter = Arc<Mutex<Stream>>;

/// Reads one frame; the body comes back in a fresh buffer (not zero-filled first), so
/// that commands can keep slices of it instead of copying their data.
pub(crate) fn read_frame(
    shared: &Shared,
    reader: &mut BufReader<Stream>,
    spin: &AdaptiveSpin,
) -> io::Result<(proto::Header, Vec<u8>)> {
    if reader.buffer().is_empty() {
        spin.wait(reader.get_ref().as_raw_fd());
    }
    let mut head = [0u8; proto::HEADER_LEN];
    reader.read_exact(&mut head)?;
    let header = match proto::decode_header(&head, shared.config.frame_body_max) {
        Ok(Decoded::Complete(h, _)) => h,
        Ok(Decoded::Partial) => unreachable!("a whole header was read"),
        Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
    };
    let len = header.body_len as usize;
    if len - reader.buffer().len().min(len) < LARGE_BODY {
        let mut body = Vec::with_capacity(len);
        reader.by_ref().take(len as u64).read_to_end(&mut body)?;
        if body.len() != len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok((header, body))
    } else {
        let mut body = shared.bodies.take(len);
        read_large_body(reader, &mut body, len)?;
        Ok((header, body))
    }
}

/// Bodies with at least this much still to read go straight from the socket into
/// their buffer ([`read_large_body`]).
pub(crate) const LARGE_BODY: usize = 64 << 10;

/// Reads `len` bytes into `body`'s spare capacity: what the reader has buffered, then
/// straight from the socket. `read_to_end` zero-fills the spare capacity before every
/// read (our stream cannot say that its reads only write), which with 256 MiB writes
/// over TCP cost a memset and its page faults, a fifth of the service's time.
fn read_large_body(
    reader: &mut BufReader<Stream>,
    body: &mut Vec<u8>,
    len: usize,
) -> io::Result<()> {
    let buffered = reader.buffer();
    let take = buffered.len().min(len);
    body.extend_from_slice(&buffered[..take]);
    reader.consume(take);
    let fd = reader.get_ref().as_raw_fd();
    while body.len() < len {
        let want = len - body.len();
        let spare = &mut body.spare_capacity_mut()[..want];
        // SAFETY: reads at most `spare.len()` bytes into memory `body` owns.
        let n = unsafe { libc::read(fd, spare.as_mut_ptr().cast(), spare.len()) };
        match n {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n if n > 0 => {
                // SAFETY: the read initialised the next `n` bytes.
                unsafe { body.set_len(body.len() + n as usize) };
            }
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Sends a `Reply` frame with `status` and `payload` to the client.
pub(crate) fn send_reply(writer: &ClientWriter, id: u64, (status, payload): (ClInt, Vec<u8>)) {
    let mut out = Vec::with_capacity(proto::HEADER_LEN + 4 + payload.len());
    Response::Reply {
        status,
        payload: &payload,
    }
    .encode(id, &mut out);
    let _ = send_all(&mut lock(writer), &out);
}

/// Writes `bytes` to a client. If the client takes nothing for `send_stall_max` (the
/// socket's write timeout), or the write fails otherwise, the connection is shut down:
/// its session ends, and no frame follows the partial one.
pub(crate) fn send_all(w: &mut Stream, bytes: &[u8]) -> io::Result<()> {
    let result = w.write_all(bytes);
    if result.is_err() {
        w.shutdown();
    }
    result
}
