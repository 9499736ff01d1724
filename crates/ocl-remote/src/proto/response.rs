//! Responses: what the node sends a client (replies to requests, the completion of
//! tasks, read data), and the payload of the `Hello` reply.

use super::frame::{encode_frame, encode_header};
use super::wire::{
    put_bytes, put_count, put_i32, put_u32, put_u32_list, put_u64, u32_list, Reader,
};
use super::{kind, ProtoError};

/// Completion of one event of a task: status (`CL_COMPLETE` or a negative error) and
/// the profiling counters queued, submit, start, end in device nanoseconds (0 when the
/// queue has no profiling).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventDone {
    pub event: u64,
    pub status: i32,
    pub profile: [u64; 4],
}

/// A message from the node to a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response<'a> {
    Reply {
        status: i32,
        payload: &'a [u8],
    },
    TaskDone {
        status: i32,
        events: Vec<EventDone>,
    },
    ReadData {
        token: u64,
        offset: u64,
        data: &'a [u8],
    },
}

impl<'a> Response<'a> {
    /// Appends the response as one frame with id `id`.
    pub fn encode(&self, id: u64, out: &mut Vec<u8>) {
        match self {
            Response::Reply { status, payload } => encode_frame(out, kind::REPLY, id, |out| {
                put_i32(out, *status);
                out.extend_from_slice(payload);
            }),
            Response::TaskDone { status, events } => {
                encode_frame(out, kind::TASK_DONE, id, |out| {
                    put_i32(out, *status);
                    put_count(out, events.len());
                    for e in events {
                        put_u64(out, e.event);
                        put_i32(out, e.status);
                        for p in e.profile {
                            put_u64(out, p);
                        }
                    }
                })
            }
            Response::ReadData {
                token,
                offset,
                data,
            } => {
                encode_read_data_header(out, id, *token, *offset, data.len());
                out.extend_from_slice(data);
            }
        }
    }

    /// Decodes the body of a response frame of kind `kind`.
    pub fn decode(kind: u16, body: &'a [u8]) -> Result<Response<'a>, ProtoError> {
        let mut r = Reader::new(body);
        let resp = match kind {
            kind::REPLY => {
                let status = r.i32()?;
                return Ok(Response::Reply {
                    status,
                    payload: &body[4..],
                });
            }
            kind::TASK_DONE => {
                let status = r.i32()?;
                let events = r.list(44, |r| {
                    let event = r.u64()?;
                    let status = r.i32()?;
                    let mut profile = [0u64; 4];
                    for p in profile.iter_mut() {
                        *p = r.u64()?;
                    }
                    Ok(EventDone {
                        event,
                        status,
                        profile,
                    })
                })?;
                Response::TaskDone { status, events }
            }
            kind::READ_DATA => Response::ReadData {
                token: r.u64()?,
                offset: r.u64()?,
                data: r.bytes()?,
            },
            other => return Err(ProtoError::UnknownKind(other)),
        };
        r.finish()?;
        Ok(resp)
    }
}

/// Appends the header part of a `ReadData` frame carrying `len` data bytes, so that a
/// sender can write the data itself straight from device memory without a copy.
pub fn encode_read_data_header(out: &mut Vec<u8>, id: u64, token: u64, offset: u64, len: usize) {
    encode_header(out, kind::READ_DATA, id, 8 + 8 + 4 + len);
    put_u64(out, token);
    put_u64(out, offset);
    put_u32(out, u32::try_from(len).expect("read chunk fits u32"));
}

/// The payload of the `Hello` reply: the node's host id (for the shared-memory path),
/// its platforms, each with the node-wide indices of its devices, and, for a client on
/// the node's host, the abstract Unix socket it may reconnect to (empty otherwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelloInfo<'a> {
    pub host_id: &'a [u8],
    pub platforms: Vec<Vec<u32>>,
    pub local_socket: &'a [u8],
}

impl<'a> HelloInfo<'a> {
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_bytes(out, self.host_id);
        put_count(out, self.platforms.len());
        for devices in &self.platforms {
            put_u32_list(out, devices);
        }
        put_bytes(out, self.local_socket);
    }

    pub fn decode(payload: &'a [u8]) -> Result<HelloInfo<'a>, ProtoError> {
        let mut r = Reader::new(payload);
        let host_id = r.bytes()?;
        let platforms = r.list(4, u32_list)?;
        let local_socket = r.bytes()?;
        r.finish()?;
        Ok(HelloInfo {
            host_id,
            platforms,
            local_socket,
        })
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
