//! The C client's wire format is `rac-proto`'s (this crate adds none of its own): the
//! shared vectors decode and re-encode byte for byte through it, and every header of
//! `spec/rac-v1-refused.json` is refused for the reason it names, so a C program gets
//! `NETACCEL_PROTOCOL` for it (the conformance suite's fake node shows that end to end).

use rac_proto::{CallHeader, Decoded, HeaderError, ResultHeader, HEADER_LEN};
use serde_json::Value;

fn spec(name: &str) -> Vec<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../spec")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn every_vector_round_trips_byte_for_byte() {
    let vectors = spec("rac-v1-vectors.json");
    assert!(vectors.len() >= 19, "{} vectors", vectors.len());
    for v in vectors {
        let header = unhex(v["header_hex"].as_str().unwrap());
        let payload_len = v["payload_hex"].as_str().unwrap().len() / 2;
        let again = match header[4] {
            1 | 3 => match CallHeader::decode(&header, u32::MAX) {
                Ok(Decoded::Complete(h, HEADER_LEN)) => {
                    assert_eq!(h.payload_len as usize, payload_len, "{}", v["name"]);
                    h.encode()
                }
                other => panic!("{}: {other:?}", v["name"]),
            },
            _ => match ResultHeader::decode(&header, u32::MAX) {
                Ok(Decoded::Complete(h, HEADER_LEN)) => h.encode(),
                other => panic!("{}: {other:?}", v["name"]),
            },
        };
        assert_eq!(again[..], header[..], "{}", v["name"]);
    }
}

fn reason(e: &HeaderError) -> &'static str {
    match e {
        HeaderError::BadMagic { .. } => "bad_magic",
        HeaderError::UnknownKind { .. } => "unknown_kind",
        HeaderError::WrongDirection { .. } => "wrong_direction",
        HeaderError::NonZeroFlags { .. } => "non_zero_flags",
        HeaderError::AcceleratorIdMismatch { .. } => "accelerator_id_mismatch",
        HeaderError::PayloadTooLarge { .. } => "payload_too_large",
        HeaderError::UnknownStatus { .. } => "unknown_status",
        HeaderError::NonZeroReserved { .. } => "non_zero_reserved",
    }
}

#[test]
fn every_refused_header_is_refused_for_its_reason() {
    let refused = spec("rac-v1-refused.json");
    assert!(!refused.is_empty());
    for v in refused {
        let header = unhex(v["header_hex"].as_str().unwrap());
        match ResultHeader::decode(&header, u32::MAX) {
            Err(e) => assert_eq!(reason(&e), v["reason"], "{}", v["name"]),
            Ok(d) => panic!("{} was accepted: {d:?}", v["name"]),
        }
    }
}
