//! Bodies of the fuzz targets (`fuzz/fuzz_targets/`), shared with the test that replays
//! the checked-in corpus on stable Rust (`tests/fuzz_corpus.rs`).
//!
//! Each body must not panic on any input; besides the absence of panics it asserts the
//! properties the decoders promise: prefixes of a header are `Partial` or already the
//! same error, complete headers re-encode to the exact input bytes, and every refused
//! header earns a status that closes the connection.

use crate::{CallHeader, CallKind, ControlRequest, Decode, HeaderError, ResultHeader, Status};
use crate::{CONTROL_ACCEL_ID, CONTROL_PAYLOAD_LEN_MAX, HEADER_LEN};

/// Payload limits every input is decoded with: none, and a small one so that
/// `PayloadTooLarge` is reached often.
const LIMITS: [u32; 2] = [u32::MAX, 1024];

/// Checks what every decoder promises about `decode(data)`, given the full result.
fn check_common<T: PartialEq + std::fmt::Debug>(
    data: &[u8],
    decode: impl Fn(&[u8]) -> Decode<T>,
) -> Decode<T> {
    let full = decode(data);
    let head_len = data.len().min(HEADER_LEN);
    if data.len() > HEADER_LEN {
        assert_eq!(
            decode(&data[..HEADER_LEN]),
            full,
            "bytes past the header changed the result"
        );
    }
    for n in 0..head_len {
        match decode(&data[..n]) {
            Decode::Partial { needed } => assert_eq!(needed, HEADER_LEN - n),
            Decode::Error(e) => assert_eq!(Decode::Error(e), full, "prefix of {n} bytes"),
            Decode::Complete(h) => panic!("a {n}-byte prefix decoded as {h:?}"),
        }
    }
    match &full {
        Decode::Partial { needed } => {
            assert!(data.len() < HEADER_LEN);
            assert_eq!(*needed, HEADER_LEN - data.len());
        }
        Decode::Complete(_) => assert!(data.len() >= HEADER_LEN),
        Decode::Error(e) => check_error(e),
    }
    full
}

fn check_error(e: &HeaderError) {
    assert!(e.status().closes_connection(), "{e:?} earns {}", e.status());
    assert!(!e.to_string().is_empty());
    let answer = e.answer(0);
    assert_eq!(
        ResultHeader::decode(&answer.encode(), 0),
        Decode::Complete(answer)
    );
    if matches!(
        e,
        HeaderError::BadMagic { .. } | HeaderError::UnknownKind { .. }
    ) {
        assert_eq!(e.request_id(), 0);
    }
}

/// Target `call_header`: the node's decoder.
pub fn call_header(data: &[u8]) {
    for max_payload_len in LIMITS {
        match check_common(data, |b| CallHeader::decode(b, max_payload_len)) {
            Decode::Complete(h) => {
                assert_eq!(h.encode()[..], data[..HEADER_LEN]);
                assert!(h.payload_len <= max_payload_len);
                assert_eq!(h.kind == CallKind::Control, h.accel_id == CONTROL_ACCEL_ID);
                if h.kind == CallKind::Control {
                    assert!(h.payload_len <= CONTROL_PAYLOAD_LEN_MAX);
                }
            }
            Decode::Error(HeaderError::PayloadTooLarge {
                payload_len,
                max_payload_len: max,
                ..
            }) => {
                assert!(payload_len > max && max <= max_payload_len);
                // Nothing else is wrong with the header: a large enough limit accepts
                // it, unless it is a control message over the fixed control bound.
                match CallHeader::decode(data, payload_len) {
                    Decode::Complete(_) => {}
                    Decode::Error(HeaderError::PayloadTooLarge {
                        max_payload_len: CONTROL_PAYLOAD_LEN_MAX,
                        ..
                    }) => {}
                    other => panic!("with limit {payload_len}: {other:?}"),
                }
            }
            _ => {}
        }
    }
}

/// Target `result_header`: the clients' decoder.
pub fn result_header(data: &[u8]) {
    for max_payload_len in LIMITS {
        match check_common(data, |b| ResultHeader::decode(b, max_payload_len)) {
            Decode::Complete(h) => {
                assert_eq!(h.encode()[..], data[..HEADER_LEN]);
                assert!(h.payload_len <= max_payload_len);
                assert_eq!(Status::from_u16(h.status.code()), Some(h.status));
            }
            Decode::Error(HeaderError::PayloadTooLarge { payload_len, .. }) => {
                assert!(ResultHeader::decode(data, payload_len).complete().is_some());
            }
            _ => {}
        }
    }
}

/// Target `control_json`: the node's control request parser.
pub fn control_json(data: &[u8]) {
    match ControlRequest::parse(data) {
        Ok(request) => {
            let payload = request.to_payload();
            assert_eq!(ControlRequest::parse(&payload), Ok(request));
        }
        Err(e) => {
            assert_eq!(e.status(), Status::BadRequest);
            assert!(!e.to_string().is_empty());
        }
    }
}
