//! The remote OpenCL wire format: frames, requests, replies and enqueued commands.
//!
//! Pure functions over byte slices, no I/O. Decoders borrow from the input (data of
//! writes, sources, binaries are slices of the frame body), check every length against
//! the bytes that remain before allocating, and reject missing or trailing bytes.
//! `docs/opencl.md` describes the format table by table.
//!
//! One module per layer: `frame` (the header and the body it announces), `wire`
//! (integers, byte strings and lists inside a body, and the macros that declare each
//! message once from its field list), `request` and `response` (the messages of each
//! direction) and `command` (the commands inside an `Enqueue`). Their public items are
//! all re-exported here.

mod command;
mod frame;
mod request;
mod response;
mod wire;

pub use command::*;
pub use frame::*;
pub use request::*;
pub use response::*;
pub use wire::{put_bytes, put_i32, put_u32, put_u64, put_u8, Reader, Wire};

/// Protocol version sent in `Hello`; the node refuses other versions. Version 2: each
/// enqueued command carries its wait list ([`Queued`]). Version 3: a user event set to
/// an error fails what waits for it ([`Command::UserEvent`]). Version 4: the node
/// presents its devices as OpenCL 3.0 and compiles programs as the client asks (a client
/// of version 3 expected OpenCL 1.2 devices and programs compiled for them). Version 5:
/// `Hello` carries the client's tenant and token.
pub const PROTOCOL_VERSION: u32 = 5;

/// Message kinds (the `kind` header field): requests, then responses.
pub mod kind {
    pub use super::request::kind::*;
    pub use super::response::kind::*;
}

/// Fuzz entry point (see `fuzz/`): the first two bytes pick a message kind, the rest is
/// a body. Every decoder must return without panicking, and whatever decodes must encode
/// back to the same message.
pub fn fuzz_one(data: &[u8]) {
    let _ = decode_frame(data, 1 << 20);
    let _ = HelloInfo::decode(data);
    if data.len() < 2 {
        return;
    }
    let kind = u16::from_le_bytes([data[0], data[1]]) % 128;
    let body = &data[2..];
    if let Ok(req) = Request::decode(kind, body) {
        let mut out = Vec::new();
        req.encode(1, &mut out);
        let Ok(Decoded::Complete((h, again), _)) = decode_frame(&out, u32::MAX) else {
            panic!("re-encoded request does not frame")
        };
        assert_eq!(Request::decode(h.kind, again).as_ref(), Ok(&req));
    }
    if let Ok(resp) = Response::decode(kind, body) {
        let mut out = Vec::new();
        resp.encode(1, &mut out);
        let Ok(Decoded::Complete((h, again), _)) = decode_frame(&out, u32::MAX) else {
            panic!("re-encoded response does not frame")
        };
        assert_eq!(Response::decode(h.kind, again).as_ref(), Ok(&resp));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::command::tag;

    /// A cheap stand-in for the fuzzer in every test run: random and mutated messages.
    #[test]
    fn random_and_mutated_input_never_panics() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut valid = Vec::new();
        Request::enqueue(vec![
            Command::Write {
                queue: 1,
                event: 2,
                buffer: 3,
                offset: 0,
                data: b"abc",
            },
            Command::NdRange(NdRange {
                queue: 1,
                event: 0,
                kernel: 5,
                work_dim: 1,
                offset: [0; 3],
                global: [8, 0, 0],
                local: Some([4, 0, 0]),
                args: vec![KernelArg::Bytes(b"xy"), KernelArg::Local(16)],
            }),
        ])
        .encode(0, &mut valid);
        let body = valid[HEADER_LEN..].to_vec();
        for i in 0..20_000 {
            let mut data = vec![(kind::ENQUEUE & 0xff) as u8, 0];
            data.extend_from_slice(&body);
            // Flip, truncate or replace a few bytes of a valid message.
            for _ in 0..(next() % 4) {
                let at = (next() as usize) % data.len();
                data[at] = next() as u8;
            }
            if i % 3 == 0 {
                data.truncate((next() as usize) % (data.len() + 1));
            }
            fuzz_one(&data);
            let random: Vec<u8> = (0..(next() % 64)).map(|_| next() as u8).collect();
            fuzz_one(&random);
        }
    }

    #[test]
    fn hostile_input_is_rejected() {
        let mut out = Vec::new();
        encode_header(&mut out, kind::FLUSH, 1, 1000);
        assert_eq!(
            decode_frame(&out, 100),
            Err(ProtoError::BodyTooLong {
                len: 1000,
                max: 100
            })
        );
        // A count of 2^32-1 commands in a tiny body fails before allocating.
        let body = u32::MAX.to_le_bytes();
        assert_eq!(
            Request::decode(kind::ENQUEUE, &body),
            Err(ProtoError::Truncated)
        );
        assert_eq!(Request::decode(999, &[]), Err(ProtoError::UnknownKind(999)));
        assert_eq!(
            Request::decode(kind::RELEASE, &[0; 9]),
            Err(ProtoError::TrailingBytes(1))
        );
        let mut nd = vec![];
        put_u32(&mut nd, 1); // one command
        put_u32(&mut nd, 0); // waiting for nothing
        put_u8(&mut nd, tag::ND_RANGE);
        nd.extend_from_slice(&[0; 24]);
        put_u8(&mut nd, 4);
        assert_eq!(
            Request::decode(kind::ENQUEUE, &nd),
            Err(ProtoError::BadWorkDim(4))
        );
    }
}
