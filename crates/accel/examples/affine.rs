//! A worked example of an accelerator of your own: `affine`, `y = a·x + b` over
//! little-endian `f32` values, with `a` and `b` as parameters. `docs/extending.md`
//! walks through it and shows how to register it in the node.
//!
//! Run it (it calls the accelerator the way a node does, without a network):
//!
//!     cargo run -q -p accel --example affine
//!
//! and run its tests:
//!
//!     cargo test -q -p accel --example affine

use std::sync::Arc;

use accel::{
    bad, param_f32, params_from_pairs, Accelerator, CallError, Catalog, Descriptor, ParamBlock,
    ParamSpec, ParamType, ParamValue,
};
use sha2::{Digest, Sha256};

/// Numeric id (the RAC accelerator id). Built-ins use 1..=7; ids from 256 up are left
/// for accelerators of your own.
const AFFINE_ID: u16 = 256;

/// Bump when the kernel's behaviour changes: it is part of the hash, and a registry
/// tells kernel images apart by hash.
const AFFINE_VERSION: &str = "example-kernels/1/affine";

/// `y = a·x + b` for every `f32` of the payload.
pub struct Affine {
    descriptor: Descriptor,
}

impl Affine {
    pub fn new() -> Affine {
        let digest = Sha256::digest(AFFINE_VERSION);
        Affine {
            descriptor: Descriptor {
                id: AFFINE_ID,
                name: "affine".to_string(),
                hash: digest.iter().take(16).map(|b| format!("{b:02x}")).collect(),
                params: vec![
                    // `a` at bytes 0..4 of the parameter block, 1.0 when not given.
                    ParamSpec::new("a", ParamType::F32, 0, Some(ParamValue::F32(1.0))),
                    // `b` at bytes 4..8, 0.0 when not given.
                    ParamSpec::new("b", ParamType::F32, 4, Some(ParamValue::F32(0.0))),
                ],
            },
        }
    }
}

impl Default for Affine {
    fn default() -> Affine {
        Affine::new()
    }
}

impl Accelerator for Affine {
    fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    // Called before the payload is read (and with `None` when its length is not known
    // yet), so a bad call is refused without reserving memory for it.
    fn check(&self, params: &ParamBlock, payload_len: Option<usize>) -> Result<(), CallError> {
        let (a, b) = (param_f32(params, 0), param_f32(params, 4));
        if !a.is_finite() || !b.is_finite() {
            return bad(format!(
                "parameters `a` and `b` must be finite, got a={a} b={b}"
            ));
        }
        match payload_len {
            Some(len) if len % 4 != 0 => bad(format!(
                "payload is {len} bytes, not a whole number of 4-byte f32 values"
            )),
            _ => Ok(()),
        }
    }

    // About one multiply-add per value: small calls run on the network thread when
    // their slot is idle (the node's `inline_work_max`), large ones on the slot's own.
    fn work_estimate(&self, _: &ParamBlock, payload_len: usize) -> u64 {
        payload_len as u64 / 4 * 2
    }

    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        // `check` may not have seen the payload: repeat what needs it.
        self.check(params, Some(input.len()))?;
        let (a, b) = (param_f32(params, 0), param_f32(params, 4));
        // `out` is lent by the caller and reused across calls: clear it, reserve once,
        // and allocate nothing per value.
        out.clear();
        out.reserve(input.len());
        for x in input.chunks_exact(4) {
            let x = f32::from_le_bytes(x.try_into().expect("chunks of 4 bytes"));
            out.extend_from_slice(&a.mul_add(x, b).to_le_bytes());
        }
        Ok(())
    }
}

/// What a node does with an HTTP call `POST /v1/fn/{name}?{query}`: find the
/// accelerator in the catalog, build the parameter block from the query, check, run.
fn call(catalog: &Catalog, name: &str, query: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
    let accel = catalog
        .by_name(name)
        .ok_or_else(|| format!("no accelerator named {name}"))?;
    let pairs = query.split('&').filter(|p| !p.is_empty()).map(|p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        (k, v)
    });
    let params = params_from_pairs(&accel.descriptor().params, pairs).map_err(|e| e.to_string())?;
    accel
        .check(&params, Some(payload.len()))
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    accel
        .run(&params, payload, &mut out)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn from_f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect()
}

fn main() {
    // The node's catalog is the built-ins; a catalog with yours added is the same list
    // plus one entry. Names and ids must be unique (Catalog::new panics otherwise).
    let mut accelerators = accel::builtins();
    accelerators.push(Arc::new(Affine::new()));
    let catalog = Catalog::new(accelerators);
    let affine = catalog.by_name("affine").expect("registered");
    let d = affine.descriptor();
    println!(
        "catalog: {} accelerators; affine has id {}",
        catalog.len(),
        d.id
    );

    let x = f32s(&[0.0, 1.0, 2.5, -4.0]);
    let calls: [(&str, &[u8]); 5] = [
        ("a=2&b=1", &x),
        ("", &x),
        ("a=-0.5", &x),
        ("a=2", b"abc"),
        ("c=1", &x),
    ];
    for (query, payload) in calls {
        match call(&catalog, "affine", query, payload) {
            Ok(out) => println!("affine?{query}: {:?}", from_f32s(&out)),
            Err(e) => println!("affine?{query}: refused: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(a: f32, b: f32) -> ParamBlock {
        let mut p = [0u8; accel::PARAMS_LEN];
        p[0..4].copy_from_slice(&a.to_le_bytes());
        p[4..8].copy_from_slice(&b.to_le_bytes());
        p
    }

    #[test]
    fn computes_a_x_plus_b_for_every_value() {
        let xs = [0.0, 1.0, -3.5, 1e6, f32::MIN_POSITIVE];
        let mut out = Vec::new();
        Affine::new()
            .run(&block(-2.0, 0.25), &f32s(&xs), &mut out)
            .unwrap();
        let want: Vec<f32> = xs.iter().map(|x| (-2.0f32).mul_add(*x, 0.25)).collect();
        assert_eq!(from_f32s(&out), want);
    }

    #[test]
    fn an_empty_payload_gives_an_empty_output() {
        let mut out = vec![1, 2, 3];
        Affine::new().run(&block(2.0, 1.0), &[], &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn refuses_a_payload_that_is_not_whole_f32_values_before_reading_it() {
        let a = Affine::new();
        assert!(matches!(
            a.check(&block(1.0, 0.0), Some(6)),
            Err(CallError::BadRequest(m)) if m.contains("6 bytes")
        ));
        // Length unknown yet: only the parameters are checked.
        assert!(a.check(&block(1.0, 0.0), None).is_ok());
    }

    #[test]
    fn refuses_parameters_that_are_not_finite() {
        let mut out = Vec::new();
        let err = Affine::new().run(&block(f32::NAN, 0.0), &f32s(&[1.0]), &mut out);
        assert!(matches!(err, Err(CallError::BadRequest(m)) if m.contains("finite")));
    }

    #[test]
    fn defaults_make_it_the_identity() {
        let catalog = Catalog::new(vec![Arc::new(Affine::new())]);
        let x = f32s(&[3.0, -1.0]);
        assert_eq!(call(&catalog, "affine", "", &x).unwrap(), x);
    }

    #[test]
    fn fits_in_the_node_catalog_next_to_the_built_ins() {
        let mut all = accel::builtins();
        all.push(Arc::new(Affine::new()));
        let catalog = Catalog::new(all);
        assert_eq!(
            catalog.by_id(AFFINE_ID).unwrap().descriptor().name,
            "affine"
        );
        assert_eq!(catalog.by_name("topk").unwrap().descriptor().id, 3);
    }
}
