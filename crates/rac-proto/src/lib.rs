//! RAC v1, the remote accelerator call wire format, as pure functions over bytes.
//!
//! A RAC connection carries messages both ways; each is a fixed 64-byte header followed
//! by `payload_len` bytes of payload (`docs/protocol.md`). This crate turns headers into
//! typed values and back, and knows what the protocol says about them: which status a
//! refused header earns, which statuses close the connection, which accelerator id
//! control messages use, how the built-in accelerators lay out their 44 bytes of
//! parameters, and what a control request looks like.
//!
//! It does no I/O and keeps no state. Decoders take the bytes received so far and
//! return `Ok(`[`Decoded::Partial`]`)` (read more, call again),
//! `Ok(`[`Decoded::Complete`]`(header, used))` or `Err(`[`HeaderError`]`)`, in the
//! manner of `httparse`, so the node's event loop and any client (blocking, async,
//! another language's port) drive them the same way. Header decoding does not
//! allocate; control requests ([`ControlRequest`]) are JSON and do.
//!
//! ```
//! use rac_proto::{params, CallHeader, Decoded, Status, ResultHeader, HEADER_LEN};
//!
//! // Client: a topk call with k = 3 over six i32 values.
//! let call = CallHeader::call(3, 1, 24, params::topk(3));
//! let bytes = call.encode();
//!
//! // Node: the first 10 bytes are not enough; the whole header is.
//! assert_eq!(CallHeader::decode(&bytes[..10], 1 << 20), Ok(Decoded::Partial));
//! let Ok(Decoded::Complete(received, used)) = CallHeader::decode(&bytes, 1 << 20) else {
//!     panic!()
//! };
//! assert_eq!((received, used), (call, HEADER_LEN));
//!
//! // Node: the answer, decoded by the client.
//! let answer = ResultHeader::answer(&received, Status::Busy, 0);
//! let Ok(Decoded::Complete(decoded, _)) = ResultHeader::decode(&answer.encode(), 1 << 20)
//! else {
//!     panic!()
//! };
//! assert_eq!(decoded.status.name(), "BUSY");
//! assert_eq!(decoded.slot(), None);
//! ```
//!
//! Not here: sockets, buffering, request-id bookkeeping, the node's limits (callers pass
//! `max_payload_len`), and the JSON bodies of control results, which the node builds.

mod control;
mod header;
pub mod params;
mod status;

#[doc(hidden)]
pub mod fuzzing;

pub use control::{ControlError, ControlRequest};
pub use header::{CallHeader, CallKind, HeaderError, Kind, ResultHeader, ResultKind};
pub use params::ParamBlock;
pub use status::Status;

/// What a decoder makes of the bytes received so far, when it does not refuse them
/// (a refusal is the `Err` of the `Result` around it).
///
/// The one result shape of netaccel's incremental parsers: RAC headers here, the
/// node's HTTP/1.1 head and chunk parsers, and the remote-OpenCL frame decoders
/// (`ocl_remote::proto::Decoded`, the same shape). As with `httparse`, the caller
/// keeps the input, advances past `used` bytes when complete, and on `Partial` calls
/// again with more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded<T> {
    /// The input ends before the item does: a valid start so far. Read more and call
    /// again with all of it.
    Partial,
    /// The item, and the number of input bytes it used (for a RAC header, always
    /// [`HEADER_LEN`]: its payload follows).
    Complete(T, usize),
}

/// Bytes 0..4 of every header: `RAC1`.
pub const MAGIC: [u8; 4] = *b"RAC1";

/// Size of every header in bytes.
pub const HEADER_LEN: usize = 64;

/// Size of the params field of a call header in bytes.
pub const PARAMS_LEN: usize = 44;

/// The accelerator id of control messages (kind 3) and their results.
pub const CONTROL_ACCEL_ID: u16 = 0xFFFF;

/// The slot id of a result that no slot ran.
pub const NO_SLOT: u16 = 0xFFFF;

/// Upper bound on a control message's payload in bytes, whatever the node's payload
/// limit. Control requests are a few short fields; a longer one is refused `TOO_LARGE`
/// by [`CallHeader::decode`] before any of it is read.
pub const CONTROL_PAYLOAD_LEN_MAX: u32 = 4096;

/// The TCP port a node listens on for RAC by default.
pub const DEFAULT_PORT: u16 = 9400;

/// Ids of the built-in accelerators (`docs/protocol.md`). Ids from 256 on are
/// assigned by a node's catalog.
pub mod builtin {
    pub const ECHO: u16 = 1;
    pub const TO_UPPERCASE: u16 = 2;
    pub const TOPK: u16 = 3;
    pub const LOGIT: u16 = 4;
    pub const MINMAX: u16 = 5;
    pub const SOBEL: u16 = 6;
    pub const MATMUL: u16 = 7;

    /// Every built-in as `(id, name)`, in id order.
    pub const ALL: [(u16, &str); 7] = [
        (ECHO, "echo"),
        (TO_UPPERCASE, "to_uppercase"),
        (TOPK, "topk"),
        (LOGIT, "logit"),
        (MINMAX, "minmax"),
        (SOBEL, "sobel"),
        (MATMUL, "matmul"),
    ];

    /// The id of the built-in with that name.
    pub fn id(name: &str) -> Option<u16> {
        ALL.iter().find(|(_, n)| *n == name).map(|&(id, _)| id)
    }

    /// The name of the built-in with that id.
    pub fn name(id: u16) -> Option<&'static str> {
        ALL.iter().find(|(i, _)| *i == id).map(|&(_, name)| name)
    }
}

#[cfg(test)]
mod tests {
    use super::builtin;

    #[test]
    fn builtin_ids_and_names_follow_the_protocol() {
        for (id, name) in builtin::ALL {
            assert_eq!(builtin::id(name), Some(id));
            assert_eq!(builtin::name(id), Some(name));
        }
        assert_eq!(builtin::ALL.map(|(id, _)| id), [1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(builtin::id("sobel"), Some(builtin::SOBEL));
        assert_eq!((builtin::id("nope"), builtin::name(0)), (None, None));
    }
}
