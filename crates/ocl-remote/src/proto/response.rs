//! Responses: what the node sends a client (replies to requests, the completion of
//! tasks, read data), and the payload of the `Hello` reply, each declared once.

use super::frame::{encode_frame, HEADER_LEN};
use super::wire::{messages, wire_struct, Reader, Rest, Wire};
use super::ProtoError;

wire_struct! {
    /// Completion of one event of a task: status (`CL_COMPLETE` or a negative error) and
    /// the profiling counters queued, submit, start, end in device nanoseconds (0 when the
    /// queue has no profiling).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct EventDone {
        pub event: u64,
        pub status: i32,
        pub profile: [u64; 4],
    }
}

messages! {
    /// A message from the node to a client.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Response<'a>: u16, numbers in kind {
        /// The answer to a request: its status, then a payload that takes the rest of
        /// the frame.
        Reply = REPLY(100) { status: i32, payload: &'a [u8] as Rest },
        TaskDone = TASK_DONE(101) { status: i32, events: Vec<EventDone> },
        ReadData = READ_DATA(102) { token: u64, offset: u64, data: &'a [u8] },
    }
}

impl<'a> Response<'a> {
    /// Appends the response as one frame with id `id`.
    pub fn encode(&self, id: u64, out: &mut Vec<u8>) {
        encode_frame(out, self.kind(), id, |out| self.put_fields(out));
    }

    /// Decodes the body of a response frame of kind `kind`.
    pub fn decode(kind: u16, body: &'a [u8]) -> Result<Response<'a>, ProtoError> {
        let mut r = Reader::new(body);
        let response = Self::read_fields(kind, &mut r)?.ok_or(ProtoError::UnknownKind(kind))?;
        r.finish()?;
        Ok(response)
    }
}

/// Appends the header part of a `ReadData` frame carrying `len` data bytes, so that a
/// sender can write the data itself straight from device memory without a copy.
pub fn encode_read_data_header(out: &mut Vec<u8>, id: u64, token: u64, offset: u64, len: usize) {
    let start = out.len();
    Response::ReadData {
        token,
        offset,
        data: &[],
    }
    .encode(id, out);
    // The data is the last field: its length prefix ends the frame, and the frame's
    // body grows by the bytes the sender appends.
    let len = u32::try_from(len).expect("read chunk fits u32");
    let at = out.len() - 4;
    out[at..].copy_from_slice(&len.to_le_bytes());
    let body_len = u32::try_from(out.len() - start - HEADER_LEN).expect("frame body fits u32");
    let body_len = body_len.checked_add(len).expect("frame body fits u32");
    out[start..start + 4].copy_from_slice(&body_len.to_le_bytes());
}

wire_struct! {
    /// The payload of the `Hello` reply: the node's host id (for the shared-memory path),
    /// its platforms, each with the node-wide indices of its devices, and, for a client
    /// on the node's host, the abstract Unix socket it may reconnect to (empty otherwise).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct HelloInfo<'a> {
        pub host_id: &'a [u8],
        pub platforms: Vec<Vec<u32>>,
        pub local_socket: &'a [u8],
    }
}

impl<'a> HelloInfo<'a> {
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.put(out);
    }

    pub fn decode(payload: &'a [u8]) -> Result<HelloInfo<'a>, ProtoError> {
        let mut r = Reader::new(payload);
        let info = HelloInfo::read(&mut r)?;
        r.finish()?;
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{decode_frame, Decoded};

    #[test]
    fn responses_roundtrip() {
        let cases = [
            Response::Reply {
                status: -5,
                payload: b"xyz",
            },
            Response::TaskDone {
                status: 0,
                events: vec![EventDone {
                    event: 3,
                    status: 0,
                    profile: [1, 2, 3, 4],
                }],
            },
            Response::ReadData {
                token: 5,
                offset: 1 << 20,
                data: b"data",
            },
        ];
        for resp in cases {
            let mut out = Vec::new();
            resp.encode(8, &mut out);
            let Decoded::Complete((h, body), _) = decode_frame(&out, u32::MAX).unwrap() else {
                panic!("partial")
            };
            assert_eq!(Response::decode(h.kind, body).unwrap(), resp);
        }
    }

    #[test]
    fn hello_info_roundtrip() {
        let info = HelloInfo {
            host_id: b"host",
            platforms: vec![vec![0, 1], vec![2]],
            local_socket: b"netaccel-ocl-1-9500",
        };
        let mut out = Vec::new();
        info.encode(&mut out);
        assert_eq!(HelloInfo::decode(&out).unwrap(), info);
    }
}
