//! Frames: the fixed 16-byte header (body length, kind, flags, id) and the body it
//! announces. Every message of either direction is one frame.

use std::fmt;

/// Bytes of the fixed frame header.
pub const HEADER_LEN: usize = 16;

/// The fixed 16-byte header in front of every frame body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub body_len: u32,
    pub kind: u16,
    pub flags: u16,
    pub id: u64,
}

/// Result of a decoder that may need more bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<T> {
    /// The input ends before the item does; read more and call again.
    Partial,
    /// The item and the number of input bytes it used.
    Complete(T, usize),
}

/// Why bytes are not a valid message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtoError {
    BodyTooLong { len: u32, max: u32 },
    UnknownKind(u16),
    Truncated,
    TrailingBytes(usize),
    BadTag(u8),
    BadWorkDim(u8),
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::BodyTooLong { len, max } => {
                write!(f, "frame body of {len} bytes exceeds the limit of {max}")
            }
            ProtoError::UnknownKind(k) => write!(f, "unknown message kind {k}"),
            ProtoError::Truncated => write!(f, "message body ends early"),
            ProtoError::TrailingBytes(n) => write!(f, "{n} unexpected bytes after message"),
            ProtoError::BadTag(t) => write!(f, "unknown tag {t}"),
            ProtoError::BadWorkDim(d) => write!(f, "work_dim {d} out of range 1..=3"),
        }
    }
}

impl std::error::Error for ProtoError {}

/// Decodes a frame header. `body_max` bounds the body length a peer may announce.
pub fn decode_header(buf: &[u8], body_max: u32) -> Result<Decoded<Header>, ProtoError> {
    if buf.len() < HEADER_LEN {
        return Ok(Decoded::Partial);
    }
    let header = Header {
        body_len: u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")),
        kind: u16::from_le_bytes(buf[4..6].try_into().expect("2 bytes")),
        flags: u16::from_le_bytes(buf[6..8].try_into().expect("2 bytes")),
        id: u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes")),
    };
    if header.body_len > body_max {
        return Err(ProtoError::BodyTooLong {
            len: header.body_len,
            max: body_max,
        });
    }
    Ok(Decoded::Complete(header, HEADER_LEN))
}

/// Decodes a whole frame: header and a borrowed body.
pub fn decode_frame(buf: &[u8], body_max: u32) -> Result<Decoded<(Header, &[u8])>, ProtoError> {
    let header = match decode_header(buf, body_max)? {
        Decoded::Partial => return Ok(Decoded::Partial),
        Decoded::Complete(h, _) => h,
    };
    let end = HEADER_LEN + header.body_len as usize;
    if buf.len() < end {
        return Ok(Decoded::Partial);
    }
    Ok(Decoded::Complete((header, &buf[HEADER_LEN..end]), end))
}

/// Appends a frame header; `body_len` must be the exact number of body bytes that follow.
pub fn encode_header(out: &mut Vec<u8>, kind: u16, id: u64, body_len: usize) {
    let body_len = u32::try_from(body_len).expect("frame body fits u32");
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
}

/// Appends a whole frame whose body is built by `body`.
pub fn encode_frame(out: &mut Vec<u8>, kind: u16, id: u64, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    encode_header(out, kind, id, 0);
    body(out);
    let body_len = u32::try_from(out.len() - start - HEADER_LEN).expect("frame body fits u32");
    out[start..start + 4].copy_from_slice(&body_len.to_le_bytes());
}
