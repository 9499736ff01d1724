//! A manifest as a catalog entry: the [`accel::Accelerator`] whose checks front ends
//! run on every call (parameter bounds, payload layout, output size) before the call
//! reaches a slot. It has no CPU implementation: a device backend that can host the
//! manifest (OpenCL, RTL) loads it into a slot and runs it there.

use std::sync::Arc;

use accel::{bad, Accelerator, CallError, Descriptor, ParamBlock, PARAMS_LEN};

use crate::expr::{Env, EvalError, Expr};
use crate::Manifest;

pub struct ManifestAccelerator {
    descriptor: Descriptor,
    manifest: Arc<Manifest>,
}

impl ManifestAccelerator {
    /// The catalog entry of `manifest` under accelerator id `id` (its fixed id, or one
    /// the node assigned).
    pub fn new(manifest: Arc<Manifest>, id: u16) -> ManifestAccelerator {
        ManifestAccelerator {
            descriptor: Descriptor {
                id,
                name: manifest.name.clone(),
                hash: manifest.hash.clone(),
                params: manifest.params.clone(),
            },
            manifest,
        }
    }

    pub fn manifest(&self) -> &Arc<Manifest> {
        &self.manifest
    }

    /// The integer parameter values of `params`, by index, for expressions (a `u64`
    /// beyond `i64` has none: an expression using it fails as an overflow).
    pub fn param_values(&self, params: &ParamBlock) -> [Option<i64>; PARAMS_LEN] {
        let mut values = [None; PARAMS_LEN];
        for (slot, spec) in values.iter_mut().zip(&self.manifest.params) {
            *slot = spec
                .read(params)
                .as_i128()
                .and_then(|v| i64::try_from(v).ok());
        }
        values
    }

    /// Evaluates a size expression of this manifest for one call, as a byte or item
    /// count: negative or overflowing is `BadRequest` naming `what`.
    pub fn size(
        &self,
        what: &str,
        expr: &Expr,
        params: &ParamBlock,
        payload_len: usize,
        output_len: Option<usize>,
    ) -> Result<usize, CallError> {
        let values = self.param_values(params);
        let env = Env {
            payload_len: payload_len as i64,
            output_len: output_len.map(|n| n as i64),
            params: &values,
        };
        match expr.eval(&env) {
            Ok(v) if v >= 0 => usize::try_from(v).or_else(|_| bad(format!("{what} is too large"))),
            Ok(v) => bad(format!(
                "{what} is {v}, negative, for these params and payload"
            )),
            Err(EvalError::Unbound(_)) => bad(format!(
                "{what}: a parameter's value is too large for size arithmetic"
            )),
            Err(e) => bad(format!(
                "{what} cannot be computed for these params and payload: {e}"
            )),
        }
    }

    /// The output size of a call: `[output] bytes` evaluated.
    pub fn output_len(&self, params: &ParamBlock, payload_len: usize) -> Result<usize, CallError> {
        self.size(
            "the output size",
            &self.manifest.output_bytes,
            params,
            payload_len,
            None,
        )
    }
}

impl Accelerator for ManifestAccelerator {
    fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    fn check(&self, params: &ParamBlock, payload_len: Option<usize>) -> Result<(), CallError> {
        for spec in &self.manifest.params {
            spec.check(params)?;
        }
        let Some(len) = payload_len else {
            return Ok(());
        };
        let rule = self.manifest.payload;
        if len as u64 > rule.max_bytes {
            return bad(format!(
                "payload is {len} bytes; {} takes at most {}",
                self.descriptor.name, rule.max_bytes
            ));
        }
        if len as u64 % rule.multiple_of != 0 {
            return bad(format!(
                "payload is {len} bytes, not a multiple of {}",
                rule.multiple_of
            ));
        }
        self.output_len(params, len).map(drop)
    }

    fn work_estimate(&self, _: &ParamBlock, payload_len: usize) -> u64 {
        payload_len as u64
    }

    fn run(&self, _: &ParamBlock, _: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        out.clear();
        Err(CallError::Internal(format!(
            "{} runs only in a slot of a device that can host it ({})",
            self.descriptor.name,
            self.manifest.backends().join(", ")
        )))
    }
}
