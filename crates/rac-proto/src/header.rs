//! The two 64-byte headers: calls (client → node) and results (node → client).
//!
//! Decoding is a pure function of the bytes received so far. It never allocates and
//! never reads past the first [`HEADER_LEN`] bytes; the payload that follows is the
//! caller's business. Encoding writes every byte of the header, so a decoded header
//! re-encodes to exactly the bytes it was decoded from.

use std::fmt;

use crate::params::ParamBlock;
use crate::status::Status;
use crate::{
    Decoded, CONTROL_ACCEL_ID, CONTROL_PAYLOAD_LEN_MAX, HEADER_LEN, MAGIC, NO_SLOT, PARAMS_LEN,
};

/// The message kind, byte 4 of every header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A call of an accelerator (client → node).
    Call = 1,
    /// The result of a call (node → client).
    Result = 2,
    /// A control message (client → node), accelerator id [`CONTROL_ACCEL_ID`].
    Control = 3,
    /// The result of a control message (node → client).
    ControlResult = 4,
}

impl Kind {
    /// The wire code.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The kind for a wire code, `None` for codes v1 does not define.
    pub const fn from_u8(code: u8) -> Option<Kind> {
        Some(match code {
            1 => Kind::Call,
            2 => Kind::Result,
            3 => Kind::Control,
            4 => Kind::ControlResult,
            _ => return None,
        })
    }

    /// True for the kinds a client sends (`Call`, `Control`).
    pub const fn is_request(self) -> bool {
        matches!(self, Kind::Call | Kind::Control)
    }
}

/// The kinds a [`CallHeader`] can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallKind {
    /// Kind 1: a call of accelerator `accel_id` (never [`CONTROL_ACCEL_ID`]).
    Call,
    /// Kind 3: a control message; `accel_id` is always [`CONTROL_ACCEL_ID`].
    Control,
}

impl CallKind {
    /// The general [`Kind`].
    pub const fn kind(self) -> Kind {
        match self {
            CallKind::Call => Kind::Call,
            CallKind::Control => Kind::Control,
        }
    }

    /// The result kind a node answers this kind with.
    pub const fn result_kind(self) -> ResultKind {
        match self {
            CallKind::Call => ResultKind::Result,
            CallKind::Control => ResultKind::ControlResult,
        }
    }
}

/// The kinds a [`ResultHeader`] can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResultKind {
    /// Kind 2: answers a call.
    Result,
    /// Kind 4: answers a control message; the payload is JSON.
    ControlResult,
}

impl ResultKind {
    /// The general [`Kind`].
    pub const fn kind(self) -> Kind {
        match self {
            ResultKind::Result => Kind::Result,
            ResultKind::ControlResult => Kind::ControlResult,
        }
    }
}

/// Why a header was refused.
///
/// Every variant maps to a status through [`HeaderError::status`], and every such status
/// closes the connection: after a refused header the peer can no longer tell where the
/// next message starts. [`HeaderError::request_id`] is the id to answer with: the one
/// the header carries once magic and kind were valid (the field then sits where v1 puts
/// it), 0 otherwise, as the protocol asks for unreadable requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Bytes 0..4 are not `RAC1`. Detected as soon as four bytes are present, so a peer
    /// speaking another protocol is refused without waiting for 64 bytes.
    BadMagic { found: [u8; 4] },
    /// Byte 4 is not a v1 kind. Detected as soon as five bytes are present.
    UnknownKind { kind: u8 },
    /// A v1 kind that travels the other way: a result sent to a node, or a call sent to
    /// a client. Detected as soon as five bytes are present.
    WrongDirection { kind: Kind },
    /// Byte 5 (flags, reserved in v1) is not zero.
    NonZeroFlags { flags: u8, request_id: u32 },
    /// A call (kind 1) for accelerator id `0xFFFF`, or a control message (kind 3) for
    /// any other id. The message contradicts itself, so its payload length is not
    /// trusted either: this is a protocol error, not an unknown accelerator.
    AcceleratorIdMismatch {
        kind: CallKind,
        accel_id: u16,
        request_id: u32,
    },
    /// The payload length is above the limit the decoder was given (for control
    /// messages, above [`CONTROL_PAYLOAD_LEN_MAX`] too). The header is otherwise valid.
    PayloadTooLarge {
        request_id: u32,
        accel_id: u16,
        payload_len: u32,
        max_payload_len: u32,
    },
    /// A result header with a status code v1 does not define.
    UnknownStatus { status: u16, request_id: u32 },
    /// A result header with a non-zero byte in a reserved field (`offset` is the
    /// first such byte).
    NonZeroReserved { offset: usize, request_id: u32 },
}

impl HeaderError {
    /// The status a node answers this error with: `TOO_LARGE` for an oversized
    /// payload, `PROTOCOL_ERROR` for everything else.
    pub const fn status(&self) -> Status {
        match self {
            HeaderError::PayloadTooLarge { .. } => Status::TooLarge,
            _ => Status::ProtocolError,
        }
    }

    /// The request id to put in the answer; 0 when the header was unreadable.
    pub const fn request_id(&self) -> u32 {
        match *self {
            HeaderError::BadMagic { .. }
            | HeaderError::UnknownKind { .. }
            | HeaderError::WrongDirection { .. } => 0,
            HeaderError::NonZeroFlags { request_id, .. }
            | HeaderError::AcceleratorIdMismatch { request_id, .. }
            | HeaderError::PayloadTooLarge { request_id, .. }
            | HeaderError::UnknownStatus { request_id, .. }
            | HeaderError::NonZeroReserved { request_id, .. } => request_id,
        }
    }
}

impl HeaderError {
    /// The result header a node answers this error with: kind 2 (kind 4 for an
    /// oversized but otherwise valid control message), [`HeaderError::status`],
    /// [`HeaderError::request_id`], the accelerator id when the header was readable
    /// (0 otherwise), no slot, no timings. `payload_len` is the length of the UTF-8
    /// message the node sends after it (the `Display` text is a good one).
    pub const fn answer(&self, payload_len: u32) -> ResultHeader {
        let (kind, accel_id) = match *self {
            HeaderError::PayloadTooLarge {
                accel_id: CONTROL_ACCEL_ID,
                ..
            } => (ResultKind::ControlResult, CONTROL_ACCEL_ID),
            HeaderError::PayloadTooLarge { accel_id, .. }
            | HeaderError::AcceleratorIdMismatch { accel_id, .. } => (ResultKind::Result, accel_id),
            _ => (ResultKind::Result, 0),
        };
        ResultHeader {
            kind,
            status: self.status(),
            payload_len,
            request_id: self.request_id(),
            accel_id,
            slot_id: NO_SLOT,
            queue_ns: 0,
            exec_ns: 0,
        }
    }
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            HeaderError::BadMagic { found } => write!(
                f,
                "bad magic {:02x} {:02x} {:02x} {:02x}: not a RAC1 message",
                found[0], found[1], found[2], found[3]
            ),
            HeaderError::UnknownKind { kind } => write!(f, "unknown message kind {kind}"),
            HeaderError::WrongDirection { kind } => {
                let side = if kind.is_request() { "client" } else { "node" };
                write!(f, "message kind {} ({kind:?}) is sent by a {side}, not to one", kind.code())
            }
            HeaderError::NonZeroFlags { flags, .. } => {
                write!(f, "flags byte is {flags:#04x}; v1 requires 0")
            }
            HeaderError::AcceleratorIdMismatch { kind: CallKind::Call, .. } => write!(
                f,
                "a call (kind 1) cannot name accelerator id {CONTROL_ACCEL_ID:#06x}, which is reserved for control messages"
            ),
            HeaderError::AcceleratorIdMismatch { kind: CallKind::Control, accel_id, .. } => write!(
                f,
                "a control message (kind 3) must name accelerator id {CONTROL_ACCEL_ID:#06x}, not {accel_id}"
            ),
            HeaderError::PayloadTooLarge { payload_len, max_payload_len, .. } => write!(
                f,
                "payload of {payload_len} bytes is above the limit of {max_payload_len} bytes"
            ),
            HeaderError::UnknownStatus { status, .. } => write!(f, "unknown status code {status}"),
            HeaderError::NonZeroReserved { offset, .. } => {
                write!(f, "reserved byte at offset {offset} is not zero")
            }
        }
    }
}

impl std::error::Error for HeaderError {}

/// Checks the bytes that can be judged before the header is whole: magic (once four
/// bytes are present) and kind (once five are). Returns the kind when known.
fn check_start(buf: &[u8], want_request: bool) -> Result<Option<Kind>, HeaderError> {
    if let Some(found) = buf.first_chunk::<4>() {
        if *found != MAGIC {
            return Err(HeaderError::BadMagic { found: *found });
        }
    }
    let Some(&code) = buf.get(4) else {
        return Ok(None);
    };
    let kind = Kind::from_u8(code).ok_or(HeaderError::UnknownKind { kind: code })?;
    if kind.is_request() != want_request {
        return Err(HeaderError::WrongDirection { kind });
    }
    Ok(Some(kind))
}

/// A whole header whose magic, kind and flags are valid.
struct Opened<'a> {
    kind: Kind,
    bytes: &'a [u8; HEADER_LEN],
    request_id: u32,
}

/// What both decoders check first: magic and kind (as soon as their bytes are
/// present), then, once the whole header is in, flags = 0. `None` when the header is
/// not whole yet.
fn open_header(buf: &[u8], want_request: bool) -> Result<Option<Opened<'_>>, HeaderError> {
    let kind = check_start(buf, want_request)?;
    let Some(h) = buf.first_chunk::<HEADER_LEN>() else {
        return Ok(None);
    };
    let kind = kind.expect("a whole header has a kind byte");
    let request_id = u32_at(h, 12);
    if h[5] != 0 {
        return Err(HeaderError::NonZeroFlags {
            flags: h[5],
            request_id,
        });
    }
    Ok(Some(Opened {
        kind,
        bytes: h,
        request_id,
    }))
}

fn u16_at(h: &[u8; HEADER_LEN], offset: usize) -> u16 {
    u16::from_le_bytes([h[offset], h[offset + 1]])
}

fn u32_at(h: &[u8; HEADER_LEN], offset: usize) -> u32 {
    u32::from_le_bytes([h[offset], h[offset + 1], h[offset + 2], h[offset + 3]])
}

fn u64_at(h: &[u8; HEADER_LEN], offset: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&h[offset..offset + 8]);
    u64::from_le_bytes(bytes)
}

fn common_prefix(kind: Kind) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&MAGIC);
    h[4] = kind.code();
    // h[5], the flags byte, stays 0.
    h
}

/// The header of a call or control message (client → node).
///
/// Layout: magic (0..4), kind (4), flags = 0 (5), accelerator id (6..8), payload length
/// (8..12), request id (12..16), deadline in µs (16..20), params (20..64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallHeader {
    pub kind: CallKind,
    /// Accelerator to run; [`CONTROL_ACCEL_ID`] exactly when `kind` is `Control`.
    pub accel_id: u16,
    /// Bytes of payload following the header.
    pub payload_len: u32,
    /// Chosen by the client, echoed in the result; unique among calls in flight.
    pub request_id: u32,
    /// 0 = none; otherwise execution must start within this many µs of the call
    /// having arrived whole at the node.
    pub deadline_us: u32,
    /// Accelerator-specific parameters, see [`crate::params`]. Carried as they are on
    /// control messages too, where v1 gives them no meaning ([`CallHeader::control`]
    /// zeroes them).
    pub params: ParamBlock,
}

impl CallHeader {
    /// A call of accelerator `accel_id` without deadline.
    pub const fn call(
        accel_id: u16,
        request_id: u32,
        payload_len: u32,
        params: ParamBlock,
    ) -> Self {
        CallHeader {
            kind: CallKind::Call,
            accel_id,
            payload_len,
            request_id,
            deadline_us: 0,
            params,
        }
    }

    /// A control message whose JSON payload is `payload_len` bytes long.
    pub const fn control(request_id: u32, payload_len: u32) -> Self {
        CallHeader {
            kind: CallKind::Control,
            accel_id: CONTROL_ACCEL_ID,
            payload_len,
            request_id,
            deadline_us: 0,
            params: [0; PARAMS_LEN],
        }
    }

    /// The 64 wire bytes. Fields are written as they are: a header whose `accel_id`
    /// contradicts its `kind` encodes, and [`CallHeader::decode`] then refuses it.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = common_prefix(self.kind.kind());
        h[6..8].copy_from_slice(&self.accel_id.to_le_bytes());
        h[8..12].copy_from_slice(&self.payload_len.to_le_bytes());
        h[12..16].copy_from_slice(&self.request_id.to_le_bytes());
        h[16..20].copy_from_slice(&self.deadline_us.to_le_bytes());
        h[20..64].copy_from_slice(&self.params);
        h
    }

    /// Decodes a call header from the start of `buf` (bytes beyond the first 64 are
    /// ignored). Used by the node.
    ///
    /// Checks, in order: magic, kind (1 or 3), flags = 0, accelerator id consistent
    /// with the kind, payload length ≤ `max_payload_len` (and ≤
    /// [`CONTROL_PAYLOAD_LEN_MAX`] for control messages). Magic and kind are checked
    /// as soon as their bytes are present, so a prefix is either `Partial` or already
    /// the error the whole header would give. A complete header used
    /// [`HEADER_LEN`] bytes; its payload follows.
    pub fn decode(buf: &[u8], max_payload_len: u32) -> Result<Decoded<CallHeader>, HeaderError> {
        let Some(Opened {
            kind,
            bytes: h,
            request_id,
        }) = open_header(buf, true)?
        else {
            return Ok(Decoded::Partial);
        };
        let kind = match kind {
            Kind::Call => CallKind::Call,
            Kind::Control => CallKind::Control,
            _ => unreachable!("open_header accepted a request header with a non-request kind"),
        };
        let accel_id = u16_at(h, 6);
        if (accel_id == CONTROL_ACCEL_ID) != (kind == CallKind::Control) {
            return Err(HeaderError::AcceleratorIdMismatch {
                kind,
                accel_id,
                request_id,
            });
        }
        let payload_len = u32_at(h, 8);
        let max_payload_len = match kind {
            CallKind::Call => max_payload_len,
            CallKind::Control => max_payload_len.min(CONTROL_PAYLOAD_LEN_MAX),
        };
        if payload_len > max_payload_len {
            return Err(HeaderError::PayloadTooLarge {
                request_id,
                accel_id,
                payload_len,
                max_payload_len,
            });
        }
        let mut params = [0u8; PARAMS_LEN];
        params.copy_from_slice(&h[20..64]);
        let header = CallHeader {
            kind,
            accel_id,
            payload_len,
            request_id,
            deadline_us: u32_at(h, 16),
            params,
        };
        Ok(Decoded::Complete(header, HEADER_LEN))
    }
}

/// The header of a result or control result (node → client).
///
/// Layout: magic (0..4), kind (4), flags = 0 (5), status (6..8), payload length (8..12),
/// request id (12..16), accelerator id (16..18), slot id (18..20), reserved = 0
/// (20..24), queue_ns (24..32), exec_ns (32..40), reserved = 0 (40..64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResultHeader {
    pub kind: ResultKind,
    pub status: Status,
    /// Output bytes on `OK`; a UTF-8 error message (possibly empty) otherwise.
    pub payload_len: u32,
    /// The request id of the call this answers (0 for an unreadable call).
    pub request_id: u32,
    /// The accelerator id of the call this answers.
    pub accel_id: u16,
    /// The slot that ran the call, [`NO_SLOT`] if none did.
    pub slot_id: u16,
    /// From the call being whole at the node to the start of its execution.
    pub queue_ns: u64,
    /// Execution time in the slot.
    pub exec_ns: u64,
}

/// Byte ranges of a result header that v1 reserves (must be zero).
const RESULT_RESERVED: [std::ops::Range<usize>; 2] = [20..24, 40..64];

impl ResultHeader {
    /// A result for `call` with the given status and no timings: what a node sends when
    /// it answers without running anything (BUSY, UNKNOWN_ACCELERATOR, …).
    pub const fn answer(call: &CallHeader, status: Status, payload_len: u32) -> Self {
        ResultHeader {
            kind: call.kind.result_kind(),
            status,
            payload_len,
            request_id: call.request_id,
            accel_id: call.accel_id,
            slot_id: NO_SLOT,
            queue_ns: 0,
            exec_ns: 0,
        }
    }

    /// The slot that ran the call, if any.
    pub const fn slot(&self) -> Option<u16> {
        if self.slot_id == NO_SLOT {
            None
        } else {
            Some(self.slot_id)
        }
    }

    /// The 64 wire bytes; reserved bytes are zero.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = common_prefix(self.kind.kind());
        h[6..8].copy_from_slice(&self.status.code().to_le_bytes());
        h[8..12].copy_from_slice(&self.payload_len.to_le_bytes());
        h[12..16].copy_from_slice(&self.request_id.to_le_bytes());
        h[16..18].copy_from_slice(&self.accel_id.to_le_bytes());
        h[18..20].copy_from_slice(&self.slot_id.to_le_bytes());
        h[24..32].copy_from_slice(&self.queue_ns.to_le_bytes());
        h[32..40].copy_from_slice(&self.exec_ns.to_le_bytes());
        h
    }

    /// Decodes a result header from the start of `buf` (bytes beyond the first 64 are
    /// ignored). Used by clients.
    ///
    /// Checks, in order: magic, kind (2 or 4), flags = 0, a v1 status code, reserved
    /// bytes zero, payload length ≤ `max_payload_len`. The accelerator id is not
    /// checked against the kind: an error result echoes whatever the refused call
    /// carried. A complete header used [`HEADER_LEN`] bytes; its payload follows.
    pub fn decode(buf: &[u8], max_payload_len: u32) -> Result<Decoded<ResultHeader>, HeaderError> {
        let Some(Opened {
            kind,
            bytes: h,
            request_id,
        }) = open_header(buf, false)?
        else {
            return Ok(Decoded::Partial);
        };
        let kind = match kind {
            Kind::Result => ResultKind::Result,
            Kind::ControlResult => ResultKind::ControlResult,
            _ => unreachable!("open_header accepted a result header with a non-result kind"),
        };
        let code = u16_at(h, 6);
        let Some(status) = Status::from_u16(code) else {
            return Err(HeaderError::UnknownStatus {
                status: code,
                request_id,
            });
        };
        for range in RESULT_RESERVED {
            if let Some(i) = h[range.clone()].iter().position(|&b| b != 0) {
                let offset = range.start + i;
                return Err(HeaderError::NonZeroReserved { offset, request_id });
            }
        }
        let accel_id = u16_at(h, 16);
        let payload_len = u32_at(h, 8);
        if payload_len > max_payload_len {
            return Err(HeaderError::PayloadTooLarge {
                request_id,
                accel_id,
                payload_len,
                max_payload_len,
            });
        }
        let header = ResultHeader {
            kind,
            status,
            payload_len,
            request_id,
            accel_id,
            slot_id: u16_at(h, 18),
            queue_ns: u64_at(h, 24),
            exec_ns: u64_at(h, 32),
        };
        Ok(Decoded::Complete(header, HEADER_LEN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params;
    use proptest::prelude::*;

    const LIMIT: u32 = 1 << 20;

    fn sample_call() -> CallHeader {
        CallHeader {
            deadline_us: 1000,
            ..CallHeader::call(6, 0x0102_0304, 16, params::sobel(4, 4))
        }
    }

    fn sample_result() -> ResultHeader {
        ResultHeader {
            kind: ResultKind::Result,
            status: Status::Ok,
            payload_len: 5,
            request_id: 7,
            accel_id: 2,
            slot_id: 0,
            queue_ns: 1500,
            exec_ns: 800,
        }
    }

    #[test]
    fn every_truncation_is_partial() {
        let call = sample_call().encode();
        let control = CallHeader::control(9, 16).encode();
        let result = sample_result().encode();
        for n in 0..HEADER_LEN {
            assert_eq!(CallHeader::decode(&call[..n], LIMIT), Ok(Decoded::Partial));
            assert_eq!(
                CallHeader::decode(&control[..n], LIMIT),
                Ok(Decoded::Partial)
            );
            assert_eq!(
                ResultHeader::decode(&result[..n], LIMIT),
                Ok(Decoded::Partial)
            );
        }
        assert_eq!(
            CallHeader::decode(&call, LIMIT),
            Ok(Decoded::Complete(sample_call(), HEADER_LEN))
        );
        assert_eq!(
            ResultHeader::decode(&result, LIMIT),
            Ok(Decoded::Complete(sample_result(), HEADER_LEN))
        );
    }

    #[test]
    fn trailing_bytes_are_left_alone() {
        let mut buf = sample_call().encode().to_vec();
        buf.extend_from_slice(b"payload that follows");
        assert_eq!(
            CallHeader::decode(&buf, LIMIT),
            Ok(Decoded::Complete(sample_call(), HEADER_LEN))
        );
    }

    #[test]
    fn another_protocol_is_refused_before_64_bytes() {
        let http = b"GET / HTTP/1.1\r\n\r\n";
        assert_eq!(
            CallHeader::decode(http, LIMIT),
            Err(HeaderError::BadMagic { found: *b"GET " })
        );
        assert_eq!(CallHeader::decode(b"GET", LIMIT), Ok(Decoded::Partial));
        assert_eq!(
            CallHeader::decode(b"RAC1\x07", LIMIT),
            Err(HeaderError::UnknownKind { kind: 7 })
        );
        assert_eq!(
            CallHeader::decode(b"RAC1\x02", LIMIT),
            Err(HeaderError::WrongDirection { kind: Kind::Result })
        );
        assert_eq!(
            ResultHeader::decode(b"RAC1\x03", LIMIT),
            Err(HeaderError::WrongDirection {
                kind: Kind::Control
            })
        );
    }

    /// What the protocol says decoding `bytes` (a call header with one byte changed at
    /// `offset`) must give.
    fn expected_call(
        bytes: &[u8; HEADER_LEN],
        offset: usize,
    ) -> Result<Decoded<CallHeader>, HeaderError> {
        let request_id = u32_at(bytes, 12);
        let accel_id = u16_at(bytes, 6);
        let payload_len = u32_at(bytes, 8);
        let kind = match offset {
            0..=3 => {
                let found = *bytes.first_chunk::<4>().unwrap();
                return Err(HeaderError::BadMagic { found });
            }
            4 => match bytes[4] {
                1 => CallKind::Call,
                3 => CallKind::Control,
                2 => return Err(HeaderError::WrongDirection { kind: Kind::Result }),
                4 => {
                    let kind = Kind::ControlResult;
                    return Err(HeaderError::WrongDirection { kind });
                }
                kind => return Err(HeaderError::UnknownKind { kind }),
            },
            5 => {
                let flags = bytes[5];
                return Err(HeaderError::NonZeroFlags { flags, request_id });
            }
            _ => CallKind::Call,
        };
        if (kind == CallKind::Control) != (accel_id == CONTROL_ACCEL_ID) {
            return Err(HeaderError::AcceleratorIdMismatch {
                kind,
                accel_id,
                request_id,
            });
        }
        if payload_len > LIMIT {
            let max_payload_len = LIMIT;
            let e = HeaderError::PayloadTooLarge {
                request_id,
                accel_id,
                payload_len,
                max_payload_len,
            };
            return Err(e);
        }
        Ok(Decoded::Complete(
            CallHeader {
                kind,
                accel_id,
                payload_len,
                request_id,
                deadline_us: u32_at(bytes, 16),
                params: bytes[20..].try_into().unwrap(),
            },
            HEADER_LEN,
        ))
    }

    #[test]
    fn every_single_byte_corruption_of_a_call_header() {
        let good = sample_call().encode();
        for offset in 0..HEADER_LEN {
            for value in 0..=255u8 {
                if value == good[offset] {
                    continue;
                }
                let mut bytes = good;
                bytes[offset] = value;
                let got = CallHeader::decode(&bytes, LIMIT);
                assert_eq!(
                    got,
                    expected_call(&bytes, offset),
                    "offset {offset} value {value}"
                );
                if let Ok(Decoded::Complete(h, HEADER_LEN)) = got {
                    assert_eq!(h.encode(), bytes);
                }
            }
        }
    }

    fn expected_result(
        bytes: &[u8; HEADER_LEN],
        offset: usize,
    ) -> Result<Decoded<ResultHeader>, HeaderError> {
        let request_id = u32_at(bytes, 12);
        let mut kind = ResultKind::Result;
        match offset {
            0..=3 => {
                let found = *bytes.first_chunk::<4>().unwrap();
                return Err(HeaderError::BadMagic { found });
            }
            4 => match bytes[4] {
                1 => return Err(HeaderError::WrongDirection { kind: Kind::Call }),
                3 => {
                    return Err(HeaderError::WrongDirection {
                        kind: Kind::Control,
                    })
                }
                4 => kind = ResultKind::ControlResult,
                kind => return Err(HeaderError::UnknownKind { kind }),
            },
            5 => {
                let flags = bytes[5];
                return Err(HeaderError::NonZeroFlags { flags, request_id });
            }
            6 | 7 if u16_at(bytes, 6) > 9 => {
                let status = u16_at(bytes, 6);
                return Err(HeaderError::UnknownStatus { status, request_id });
            }
            20..=23 | 40..=63 => {
                return Err(HeaderError::NonZeroReserved { offset, request_id });
            }
            _ => {}
        }
        let payload_len = u32_at(bytes, 8);
        let accel_id = u16_at(bytes, 16);
        if payload_len > LIMIT {
            let max_payload_len = LIMIT;
            let e = HeaderError::PayloadTooLarge {
                request_id,
                accel_id,
                payload_len,
                max_payload_len,
            };
            return Err(e);
        }
        Ok(Decoded::Complete(
            ResultHeader {
                kind,
                status: Status::from_u16(u16_at(bytes, 6)).unwrap(),
                payload_len,
                request_id,
                accel_id,
                slot_id: u16_at(bytes, 18),
                queue_ns: u64_at(bytes, 24),
                exec_ns: u64_at(bytes, 32),
            },
            HEADER_LEN,
        ))
    }

    #[test]
    fn every_single_byte_corruption_of_a_result_header() {
        let good = sample_result().encode();
        for offset in 0..HEADER_LEN {
            for value in 0..=255u8 {
                if value == good[offset] {
                    continue;
                }
                let mut bytes = good;
                bytes[offset] = value;
                let got = ResultHeader::decode(&bytes, LIMIT);
                assert_eq!(
                    got,
                    expected_result(&bytes, offset),
                    "offset {offset} value {value}"
                );
                if let Ok(Decoded::Complete(h, HEADER_LEN)) = got {
                    assert_eq!(h.encode(), bytes);
                }
            }
        }
    }

    #[test]
    fn control_messages_and_the_control_id_go_together() {
        let control = CallHeader::control(5, 20);
        assert_eq!(
            CallHeader::decode(&control.encode(), LIMIT),
            Ok(Decoded::Complete(control, HEADER_LEN))
        );

        let call_to_control_id = CallHeader::call(CONTROL_ACCEL_ID, 6, 0, params::NONE);
        let e = CallHeader::decode(&call_to_control_id.encode(), LIMIT).unwrap_err();
        assert_eq!(
            e,
            HeaderError::AcceleratorIdMismatch {
                kind: CallKind::Call,
                accel_id: CONTROL_ACCEL_ID,
                request_id: 6
            }
        );
        assert_eq!((e.status(), e.request_id()), (Status::ProtocolError, 6));

        let control_to_echo = CallHeader {
            accel_id: 1,
            ..control
        };
        let e = CallHeader::decode(&control_to_echo.encode(), LIMIT).unwrap_err();
        assert!(
            e.to_string()
                .contains("must name accelerator id 0xffff, not 1"),
            "{e}"
        );
    }

    #[test]
    fn payload_limits_report_the_request_id() {
        let call = CallHeader::call(1, 42, LIMIT + 1, params::NONE);
        let e = CallHeader::decode(&call.encode(), LIMIT).unwrap_err();
        assert_eq!(
            e,
            HeaderError::PayloadTooLarge {
                request_id: 42,
                accel_id: 1,
                payload_len: LIMIT + 1,
                max_payload_len: LIMIT
            }
        );
        assert_eq!((e.status(), e.request_id()), (Status::TooLarge, 42));
        assert!(matches!(
            CallHeader::decode(&call.encode(), LIMIT + 1),
            Ok(Decoded::Complete(..))
        ));

        // Control messages have their own, smaller bound.
        let control = CallHeader::control(43, CONTROL_PAYLOAD_LEN_MAX + 1);
        let e = CallHeader::decode(&control.encode(), u32::MAX).unwrap_err();
        assert_eq!(e.status(), Status::TooLarge);
        assert!(matches!(
            e,
            HeaderError::PayloadTooLarge {
                max_payload_len: CONTROL_PAYLOAD_LEN_MAX,
                ..
            }
        ));
        let small = CallHeader::control(44, 10);
        assert!(CallHeader::decode(&small.encode(), 9).is_err());
    }

    #[test]
    fn answers_mirror_the_call() {
        let r = ResultHeader::answer(&CallHeader::control(3, 16), Status::Unauthorized, 12);
        assert_eq!(r.kind, ResultKind::ControlResult);
        assert_eq!(
            (r.request_id, r.accel_id, r.slot()),
            (3, CONTROL_ACCEL_ID, None)
        );
        let r = ResultHeader::answer(&sample_call(), Status::Busy, 0);
        assert_eq!(
            (r.kind, r.accel_id, r.slot_id),
            (ResultKind::Result, 6, NO_SLOT)
        );
        assert_eq!(sample_result().slot(), Some(0));
    }

    #[test]
    fn header_errors_build_their_answer() {
        let bad_magic = CallHeader::decode(b"GET / HTTP/1.1\r\n", LIMIT).unwrap_err();
        let answer = bad_magic.answer(7);
        assert_eq!(
            answer,
            ResultHeader {
                kind: ResultKind::Result,
                status: Status::ProtocolError,
                payload_len: 7,
                request_id: 0,
                accel_id: 0,
                slot_id: NO_SLOT,
                queue_ns: 0,
                exec_ns: 0
            }
        );
        let big = CallHeader::call(3, 8, LIMIT + 1, params::topk(1));
        let answer = CallHeader::decode(&big.encode(), LIMIT)
            .unwrap_err()
            .answer(0);
        assert_eq!(
            (
                answer.kind,
                answer.status,
                answer.request_id,
                answer.accel_id
            ),
            (ResultKind::Result, Status::TooLarge, 8, 3)
        );
        let big_control = CallHeader::control(9, CONTROL_PAYLOAD_LEN_MAX + 1);
        let answer = CallHeader::decode(&big_control.encode(), LIMIT)
            .unwrap_err()
            .answer(0);
        assert_eq!(
            (answer.kind, answer.request_id),
            (ResultKind::ControlResult, 9)
        );
        assert_eq!(
            ResultHeader::decode(&answer.encode(), 0),
            Ok(Decoded::Complete(answer, HEADER_LEN))
        );
    }

    #[test]
    fn every_header_error_closes_the_connection_and_explains() {
        let errors = [
            HeaderError::BadMagic { found: *b"GET " },
            HeaderError::UnknownKind { kind: 0 },
            HeaderError::WrongDirection { kind: Kind::Result },
            HeaderError::WrongDirection { kind: Kind::Call },
            HeaderError::NonZeroFlags {
                flags: 1,
                request_id: 1,
            },
            HeaderError::AcceleratorIdMismatch {
                kind: CallKind::Call,
                accel_id: 0xFFFF,
                request_id: 1,
            },
            HeaderError::PayloadTooLarge {
                request_id: 1,
                accel_id: 1,
                payload_len: 2,
                max_payload_len: 1,
            },
            HeaderError::UnknownStatus {
                status: 10,
                request_id: 1,
            },
            HeaderError::NonZeroReserved {
                offset: 20,
                request_id: 1,
            },
        ];
        for e in errors {
            assert!(e.status().closes_connection());
            assert!(!e.to_string().is_empty());
        }
        assert_eq!(
            errors[0].to_string(),
            "bad magic 47 45 54 20: not a RAC1 message"
        );
        assert_eq!(
            errors[2].to_string(),
            "message kind 2 (Result) is sent by a node, not to one"
        );
    }

    fn call_header() -> impl Strategy<Value = CallHeader> {
        (
            any::<bool>(),
            0..CONTROL_ACCEL_ID,
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            prop::collection::vec(any::<u8>(), PARAMS_LEN),
        )
            .prop_map(
                |(control, accel_id, payload_len, request_id, deadline_us, params)| {
                    let params: ParamBlock = params.try_into().unwrap();
                    if control {
                        let payload_len = payload_len % (CONTROL_PAYLOAD_LEN_MAX + 1);
                        CallHeader {
                            deadline_us,
                            params,
                            ..CallHeader::control(request_id, payload_len)
                        }
                    } else {
                        CallHeader {
                            deadline_us,
                            ..CallHeader::call(accel_id, request_id, payload_len, params)
                        }
                    }
                },
            )
    }

    fn result_header() -> impl Strategy<Value = ResultHeader> {
        (
            any::<bool>(),
            0..Status::ALL.len(),
            any::<u32>(),
            any::<u32>(),
            any::<u16>(),
            any::<u16>(),
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(
                |(
                    control,
                    status,
                    payload_len,
                    request_id,
                    accel_id,
                    slot_id,
                    queue_ns,
                    exec_ns,
                )| {
                    ResultHeader {
                        kind: if control {
                            ResultKind::ControlResult
                        } else {
                            ResultKind::Result
                        },
                        status: Status::ALL[status],
                        payload_len,
                        request_id,
                        accel_id,
                        slot_id,
                        queue_ns,
                        exec_ns,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn call_headers_round_trip(h in call_header()) {
            let bytes = h.encode();
            prop_assert_eq!(CallHeader::decode(&bytes, u32::MAX), Ok(Decoded::Complete(h, HEADER_LEN)));
            crate::fuzzing::call_header(&bytes);
        }

        #[test]
        fn result_headers_round_trip(h in result_header()) {
            let bytes = h.encode();
            prop_assert_eq!(ResultHeader::decode(&bytes, u32::MAX), Ok(Decoded::Complete(h, HEADER_LEN)));
            crate::fuzzing::result_header(&bytes);
        }

        #[test]
        fn arbitrary_bytes_keep_the_decoders_promises(
            bytes in prop::collection::vec(any::<u8>(), 0..80),
        ) {
            crate::fuzzing::call_header(&bytes);
            crate::fuzzing::result_header(&bytes);
        }

        #[test]
        fn valid_starts_with_arbitrary_tails_keep_the_decoders_promises(
            kind in 0u8..6,
            tail in prop::collection::vec(any::<u8>(), 0..70),
        ) {
            let mut bytes = MAGIC.to_vec();
            bytes.push(kind);
            bytes.extend_from_slice(&tail);
            crate::fuzzing::call_header(&bytes);
            crate::fuzzing::result_header(&bytes);
        }
    }
}
