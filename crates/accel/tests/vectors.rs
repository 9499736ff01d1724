//! The shared RAC v1 test vectors: every call vector that states an expected output is
//! run through the built-in accelerator its header names, and must give exactly that
//! output.
//!
//! Only as much of the 64-byte header is decoded as the call needs: the accelerator id
//! (u16 at offset 6) and the 44-byte params block (offsets 20..64). The protocol itself
//! is tested in `rac-proto`.

use std::path::Path;

use accel::{Catalog, ParamBlock, PARAMS_LEN};
use serde_json::Value;

const HEADER_LEN: usize = 64;
const ACCEL_ID_AT: usize = 6;
const PARAMS_AT: usize = 20;

fn hex(text: &str) -> Vec<u8> {
    assert!(text.len() % 2 == 0, "odd-length hex {text:?}");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn field<'a>(vector: &'a Value, name: &str) -> Option<&'a str> {
    vector.get(name).map(|v| {
        v.as_str()
            .unwrap_or_else(|| panic!("`{name}` is not a string"))
    })
}

#[test]
fn builtin_accelerators_reproduce_every_expected_output() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/rac-v1-vectors.json");
    let text = std::fs::read_to_string(&path).expect("the shared vectors are readable");
    let vectors: Vec<Value> = serde_json::from_str(&text).expect("the vectors are JSON");
    let catalog = Catalog::builtin();
    let mut checked = 0;
    for vector in &vectors {
        let name = field(vector, "name").expect("every vector has a name");
        let Some(expect) = field(vector, "expect_output_hex") else {
            continue;
        };
        let header = hex(field(vector, "header_hex").expect("header_hex"));
        assert_eq!(header.len(), HEADER_LEN, "{name}: header length");
        let payload = hex(field(vector, "payload_hex").expect("payload_hex"));
        let id = u16::from_le_bytes([header[ACCEL_ID_AT], header[ACCEL_ID_AT + 1]]);
        let params: ParamBlock = header[PARAMS_AT..PARAMS_AT + PARAMS_LEN]
            .try_into()
            .expect("44 bytes");
        let accel = catalog
            .by_id(id)
            .unwrap_or_else(|| panic!("{name}: no accelerator {id}"));
        let mut out = Vec::new();
        accel
            .check(&params, Some(payload.len()))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        accel
            .run(&params, &payload, &mut out)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(out, hex(expect), "{name}");
        checked += 1;
    }
    assert!(
        checked > 0,
        "no vector with an expected output in {}",
        path.display()
    );
}
