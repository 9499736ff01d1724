//! Fuzz target bodies over the registry's JSON bodies (`fuzz/fuzz_targets/`), also
//! replayed over the checked-in corpus by `tests/fuzz_corpus.rs` on stable Rust.
//!
//! The registry decodes every request body with these types and then validates it; the
//! node agent, the clients and the OpenCL ICD decode the registry's answers with them.
//! So both sides are fuzzed: whatever the bytes, decoding and validation return, never
//! panic; a body that validates survives a round trip (serialise, decode again: equal,
//! and valid again), so what the registry stores and answers is what it accepted.
//!
//! Not here: HTTP framing (axum's), or the registry's reaction to a valid body.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{
    check_name, check_text, Binding, FunctionSpec, FunctionView, InstanceSpec, NodeRegistration,
    NodeView, ReconfigurationRequest, UnreachableReport, Verdict,
};

/// Decodes `bytes` as `T`; when `validate` accepts it, checks the round trip.
fn round_trip<T>(bytes: &[u8], validate: fn(&T) -> Result<(), String>)
where
    T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug,
{
    let Ok(value) = serde_json::from_slice::<T>(bytes) else {
        return;
    };
    let valid = validate(&value);
    let text = serde_json::to_vec(&value).expect("a decoded body serialises");
    let again: T = serde_json::from_slice(&text)
        .unwrap_or_else(|e| panic!("{value:?} serialised as {text:?} does not decode: {e}"));
    assert_eq!(again, value, "the round trip changed the body");
    assert_eq!(
        validate(&again),
        valid,
        "the round trip changed the verdict"
    );
}

fn no_check<T>(_: &T) -> Result<(), String> {
    Ok(())
}

/// The first byte picks the body (request bodies the registry decodes, answers the
/// clients decode, names); the rest is the body.
pub fn bodies(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    match pick % 10 {
        0 => round_trip::<NodeRegistration>(rest, NodeRegistration::validate),
        1 => round_trip::<FunctionSpec>(rest, FunctionSpec::validate),
        2 => round_trip::<InstanceSpec>(rest, InstanceSpec::validate),
        3 => round_trip::<ReconfigurationRequest>(rest, ReconfigurationRequest::validate),
        4 => round_trip::<FunctionView>(rest, no_check),
        5 => round_trip::<Vec<NodeView>>(rest, no_check),
        6 => round_trip::<Verdict>(rest, no_check),
        7 => {
            if let Ok(doc) = serde_json::from_slice::<serde_json::Value>(rest) {
                if let Ok(binding) = Binding::from_json(&doc) {
                    let _ = binding.is_bound();
                }
            }
        }
        8 => round_trip::<UnreachableReport>(rest, no_check),
        _ => {
            let text = String::from_utf8_lossy(rest);
            if check_name("name", &text).is_ok() {
                assert!(!text.is_empty() && text.len() <= crate::NAME_BYTES_MAX);
                assert!(text
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
            }
            if check_text("text", &text).is_ok() {
                assert!(text.len() <= crate::TEXT_BYTES_MAX);
            }
        }
    }
}
