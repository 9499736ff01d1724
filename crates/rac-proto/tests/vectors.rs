//! Every vector of `spec/rac-v1-vectors.json`, the byte-exact contract shared with
//! clients in other languages: each header decodes, re-encodes to the same bytes, and
//! agrees with its payload; the vectors this crate knows by name also decode to the
//! fields their name describes and are rebuilt from the params helpers.

use rac_proto::{
    builtin, params, CallHeader, CallKind, Decoded, HeaderError, Kind, ResultHeader, ResultKind,
    Status, HEADER_LEN, NO_SLOT,
};
use serde_json::Value;

const VECTORS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../spec/rac-v1-vectors.json"
));

struct Vector {
    name: String,
    header: Vec<u8>,
    payload: Vec<u8>,
}

fn unhex(s: &str) -> Vec<u8> {
    let pairs = s.as_bytes().chunks_exact(2);
    assert!(pairs.remainder().is_empty(), "odd-length hex {s:?}");
    pairs
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

fn vectors() -> Vec<Vector> {
    let all: Vec<Value> = serde_json::from_str(VECTORS).unwrap();
    assert!(!all.is_empty());
    all.iter()
        .map(|v| Vector {
            name: v["name"].as_str().unwrap().to_owned(),
            header: unhex(v["header_hex"].as_str().unwrap()),
            payload: unhex(v["payload_hex"].as_str().unwrap()),
        })
        .collect()
}

fn limit(v: &Vector) -> u32 {
    v.payload.len() as u32
}

/// The header of a decode that must be complete.
fn complete<T: std::fmt::Debug>(decoded: Result<Decoded<T>, HeaderError>, name: &str) -> T {
    match decoded {
        Ok(Decoded::Complete(h, used)) => {
            assert_eq!(used, HEADER_LEN, "{name}");
            h
        }
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn every_vector_decodes_and_re_encodes_byte_exact() {
    let (mut calls, mut results) = (0, 0);
    for v in vectors() {
        assert_eq!(v.header.len(), HEADER_LEN, "{}", v.name);
        let mut message = v.header.clone();
        message.extend_from_slice(&v.payload);
        match Kind::from_u8(v.header[4]) {
            Some(Kind::Call | Kind::Control) => {
                calls += 1;
                let h = complete(CallHeader::decode(&v.header, limit(&v)), &v.name);
                assert_eq!(h.payload_len as usize, v.payload.len(), "{}", v.name);
                assert_eq!(h.encode()[..], v.header[..], "{}", v.name);
                assert_eq!(
                    CallHeader::decode(&message, limit(&v)),
                    Ok(Decoded::Complete(h, HEADER_LEN))
                );
                for n in 0..HEADER_LEN {
                    assert_eq!(CallHeader::decode(&v.header[..n], 0), Ok(Decoded::Partial));
                }
                if !v.payload.is_empty() {
                    let e = CallHeader::decode(&v.header, limit(&v) - 1).unwrap_err();
                    assert_eq!(
                        (e.status(), e.request_id()),
                        (Status::TooLarge, h.request_id)
                    );
                }
                assert!(ResultHeader::decode(&v.header, u32::MAX).is_err());
            }
            Some(Kind::Result | Kind::ControlResult) => {
                results += 1;
                let h = complete(ResultHeader::decode(&v.header, limit(&v)), &v.name);
                assert_eq!(h.payload_len as usize, v.payload.len(), "{}", v.name);
                assert_eq!(h.encode()[..], v.header[..], "{}", v.name);
                assert_eq!(
                    ResultHeader::decode(&message, limit(&v)),
                    Ok(Decoded::Complete(h, HEADER_LEN))
                );
                assert!(CallHeader::decode(&v.header, u32::MAX).is_err());
            }
            None => panic!("{}: unknown kind {}", v.name, v.header[4]),
        }
        rac_proto::fuzzing::call_header(&message);
        rac_proto::fuzzing::result_header(&message);
    }
    assert!(
        calls > 0 && results > 0,
        "{calls} call and {results} result vectors"
    );
}

/// The header each named vector must decode to.
enum Expect {
    Call(CallHeader),
    Result(ResultHeader),
}

fn expected(name: &str) -> Option<Expect> {
    use Expect::*;
    Some(match name {
        "to_uppercase call, 5-byte payload, request id 7" => {
            Call(CallHeader::call(builtin::TO_UPPERCASE, 7, 5, params::NONE))
        }
        "topk k=3 over [5,-3,9,9,0,2]" => {
            Call(CallHeader::call(builtin::TOPK, 1, 24, params::topk(3)))
        }
        "sobel 4x4" => Call(CallHeader::call(builtin::SOBEL, 2, 16, params::sobel(4, 4))),
        "echo, empty payload, request id 0xFFFFFFFE, deadline 1000 us" => Call(CallHeader {
            deadline_us: 1000,
            ..CallHeader::call(builtin::ECHO, 0xFFFF_FFFE, 0, params::NONE)
        }),
        "result OK for request 7 (to_uppercase, slot 0, queue 1500 ns, exec 800 ns)" => {
            Result(ResultHeader {
                kind: ResultKind::Result,
                status: Status::Ok,
                payload_len: 5,
                request_id: 7,
                accel_id: builtin::TO_UPPERCASE,
                slot_id: 0,
                queue_ns: 1500,
                exec_ns: 800,
            })
        }
        "result BUSY for request 9 (topk), no slot" => Result(ResultHeader::answer(
            &CallHeader::call(builtin::TOPK, 9, 0, params::NONE),
            Status::Busy,
            0,
        )),
        _ => return None,
    })
}

#[test]
fn named_vectors_decode_to_the_fields_their_names_describe() {
    let mut known = 0;
    for v in vectors() {
        let Some(expect) = expected(&v.name) else {
            continue;
        };
        known += 1;
        match expect {
            Expect::Call(h) => {
                assert_eq!(h.kind, CallKind::Call);
                assert_eq!(h.encode()[..], v.header[..], "{}", v.name);
            }
            Expect::Result(h) => assert_eq!(h.encode()[..], v.header[..], "{}", v.name),
        }
    }
    assert_eq!(known, 6, "a named vector was renamed or removed");
}

#[test]
fn busy_vector_has_no_slot() {
    let busy = vectors()
        .into_iter()
        .find(|v| v.name.contains("BUSY"))
        .unwrap();
    let h = complete(ResultHeader::decode(&busy.header, 0), &busy.name);
    assert_eq!((h.slot_id, h.slot()), (NO_SLOT, None));
    assert_eq!(h.status.name(), "BUSY");
}
