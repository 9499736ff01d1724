//! Bodies of the fuzz targets (`fuzz/fuzz_targets/`), shared with the test that replays
//! the checked-in corpus on stable Rust (`tests/fuzz_corpus.rs`).
//!
//! Each body must not panic on any input; besides the absence of panics it asserts the
//! properties the decoders promise: prefixes of a header are `Partial` or already the
//! same error, complete headers use the 64 header bytes and re-encode to exactly
//! them, and every refused
//! header earns a status that closes the connection.

use crate::{CallHeader, CallKind, ControlRequest, Decoded, HeaderError, ResultHeader, Status};
use crate::{CONTROL_ACCEL_ID, CONTROL_PAYLOAD_LEN_MAX, HEADER_LEN};

/// Payload limits every input is decoded with: none, and a small one so that
/// `PayloadTooLarge` is reached often.
const LIMITS: [u32; 2] = [u32::MAX, 1024];

type Outcome<T> = Result<Decoded<T>, HeaderError>;

/// Checks what every decoder promises about `decode(data)`, given the full result.
fn check_common<T: PartialEq + std::fmt::Debug>(
    data: &[u8],
    decode: impl Fn(&[u8]) -> Outcome<T>,
) -> Outcome<T> {
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
            Ok(Decoded::Partial) => {}
            Err(e) => assert_eq!(Err(e), full, "prefix of {n} bytes"),
            Ok(Decoded::Complete(h, _)) => panic!("a {n}-byte prefix decoded as {h:?}"),
        }
    }
    match &full {
        Ok(Decoded::Partial) => assert!(data.len() < HEADER_LEN),
        Ok(Decoded::Complete(_, used)) => {
            assert!(data.len() >= HEADER_LEN);
            assert_eq!(*used, HEADER_LEN);
        }
        Err(e) => check_error(e),
    }
    full
}

fn check_error(e: &HeaderError) {
    assert!(e.status().closes_connection(), "{e:?} earns {}", e.status());
    assert!(!e.to_string().is_empty());
    let answer = e.answer(0);
    assert_eq!(
        ResultHeader::decode(&answer.encode(), 0),
        Ok(Decoded::Complete(answer, HEADER_LEN))
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
            Ok(Decoded::Complete(h, _)) => {
                assert_eq!(h.encode()[..], data[..HEADER_LEN]);
                assert!(h.payload_len <= max_payload_len);
                assert_eq!(h.kind == CallKind::Control, h.accel_id == CONTROL_ACCEL_ID);
                if h.kind == CallKind::Control {
                    assert!(h.payload_len <= CONTROL_PAYLOAD_LEN_MAX);
                }
            }
            Err(HeaderError::PayloadTooLarge {
                payload_len,
                max_payload_len: max,
                ..
            }) => {
                assert!(payload_len > max && max <= max_payload_len);
                // Nothing else is wrong with the header: a large enough limit accepts
                // it, unless it is a control message over the fixed control bound.
                match CallHeader::decode(data, payload_len) {
                    Ok(Decoded::Complete(..)) => {}
                    Err(HeaderError::PayloadTooLarge {
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
            Ok(Decoded::Complete(h, _)) => {
                assert_eq!(h.encode()[..], data[..HEADER_LEN]);
                assert!(h.payload_len <= max_payload_len);
                assert_eq!(Status::from_u16(h.status.code()), Some(h.status));
            }
            Err(HeaderError::PayloadTooLarge { payload_len, .. }) => {
                assert!(matches!(
                    ResultHeader::decode(data, payload_len),
                    Ok(Decoded::Complete(..))
                ));
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
