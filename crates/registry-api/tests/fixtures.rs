//! The golden fixtures of `spec/registry/`: every file parses as the type its name
//! says, serialises back to the same JSON, and (for request bodies) validates. A
//! fixture whose name maps to no type fails, and so does a type without a fixture, so
//! the directory and this table cannot drift apart. The Python client round-trips the
//! same files (clients/python/tests/test_registry_fixtures.py).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use registry_api::{
    Binding, ErrorBody, FunctionSpec, FunctionView, Health, InstanceSpec, LeaseGrant,
    NodeRegistration, NodeView, ReconfigurationRequest, UnreachableReport, Verdict,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/registry")
}

/// Parses `doc` as `T`, serialises it back and compares; `check` validates it.
fn round_trip<T: DeserializeOwned + Serialize>(
    doc: &Value,
    check: fn(&T) -> Result<(), String>,
) -> Result<(), String> {
    let typed: T = serde_json::from_value(doc.clone()).map_err(|e| format!("parse: {e}"))?;
    check(&typed).map_err(|e| format!("validate: {e}"))?;
    let back = serde_json::to_value(&typed).map_err(|e| format!("serialise: {e}"))?;
    if back != *doc {
        return Err(format!("serialises differently:\n{back:#}"));
    }
    Ok(())
}

fn none<T>(_: &T) -> Result<(), String> {
    Ok(())
}

/// The body a fixture's kind (its file name up to the first `.`) holds.
fn check(kind: &str, doc: &Value) -> Option<Result<(), String>> {
    Some(match kind {
        "node-registration" => round_trip::<NodeRegistration>(doc, NodeRegistration::validate),
        "lease-grant" => round_trip::<LeaseGrant>(doc, none),
        "nodes" => round_trip::<Vec<NodeView>>(doc, none),
        "function-spec" => round_trip::<FunctionSpec>(doc, FunctionSpec::validate),
        "function" => round_trip::<FunctionView>(doc, none),
        "functions" => round_trip::<Vec<FunctionView>>(doc, none),
        "instance-spec" => round_trip::<InstanceSpec>(doc, InstanceSpec::validate),
        "binding" => round_trip::<Binding>(doc, none),
        "reconfiguration-request" => {
            round_trip::<ReconfigurationRequest>(doc, ReconfigurationRequest::validate)
        }
        "verdict" => round_trip::<Verdict>(doc, none),
        "unreachable-report" => round_trip::<UnreachableReport>(doc, none),
        "error" => round_trip::<ErrorBody>(doc, none),
        "health" => round_trip::<Health>(doc, none),
        _ => return None,
    })
}

const KINDS: [&str; 13] = [
    "node-registration",
    "lease-grant",
    "nodes",
    "function-spec",
    "function",
    "functions",
    "instance-spec",
    "binding",
    "reconfiguration-request",
    "verdict",
    "unreachable-report",
    "error",
    "health",
];

#[test]
fn every_fixture_round_trips_and_every_body_has_one() {
    let mut seen = BTreeSet::new();
    let mut failures = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("spec/registry exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let kind = name.split('.').next().unwrap().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let doc: Value = match serde_json::from_str(&text) {
            Ok(doc) => doc,
            Err(e) => {
                failures.push(format!("{name}: not JSON: {e}"));
                continue;
            }
        };
        match check(&kind, &doc) {
            None => failures.push(format!("{name}: no type for kind {kind:?}")),
            Some(Err(e)) => failures.push(format!("{name}: {e}")),
            Some(Ok(())) => {
                seen.insert(kind);
            }
        }
    }
    for kind in KINDS {
        if !seen.contains(kind) {
            failures.push(format!("no fixture for {kind}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_fixture_that_disagrees_with_its_type_fails() {
    // The oracle itself: a field the type lacks, a slot id past the node's width and
    // a missing field are each caught.
    let mut doc: Value = serde_json::from_str(
        &std::fs::read_to_string(dir().join("node-registration.json")).unwrap(),
    )
    .unwrap();
    doc["devices"][0]["slots"][0]["temperature"] = 40.into();
    assert!(check("node-registration", &doc).unwrap().is_err());
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("binding.json")).unwrap())
            .unwrap();
    doc["slot"] = 70_000.into();
    assert!(check("binding", &doc).unwrap().is_err());
    doc.as_object_mut().unwrap().remove("generation");
    doc["slot"] = 1.into();
    assert!(check("binding", &doc).unwrap().is_err());
    assert!(check("no-such-body", &doc).is_none());
}
