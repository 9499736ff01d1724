//! Tensors in system shared memory over gRPC, as `front::oip::shm` does it over HTTP:
//! a `ModelInfer` request whose inputs name a region (parameters
//! `shared_memory_region`, `shared_memory_byte_size`, `shared_memory_offset`) gets
//! those bytes as its `raw_input_contents` before it is decoded; outputs it asks to be
//! written to a region are written once the response is encoded, and their raw
//! contents are left empty (`raw_output_contents` keeps one entry per output: clients
//! index it by the output's position), with the region named in the output's
//! parameters. So the decoder and encoder know nothing of shared memory.
//!
//! The regions, their owners and every bounds check are `core::shm`'s; reading the
//! parameters is `front::oip::shm::place`'s.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::pb::infer_parameter::ParameterChoice;
use super::pb::{InferParameter, ModelInferRequest, ModelInferResponse};
use crate::core::shm::Regions;
use crate::core::tenant::TenantId;
use crate::front::oip::shm::{place, OutputTarget, KEYS};

/// The shared-memory keys of `params` as the JSON `place` reads, or `None` when the
/// tensor names no region.
fn as_json(params: &HashMap<String, InferParameter>) -> Option<Map<String, Value>> {
    params.get(KEYS[0])?;
    let mut map = Map::new();
    for key in KEYS {
        let value = match params.get(key).and_then(|p| p.parameter_choice.as_ref()) {
            None => continue,
            Some(ParameterChoice::StringParam(s)) => Value::from(s.as_str()),
            Some(ParameterChoice::Int64Param(n)) => Value::from(*n),
            Some(ParameterChoice::Uint64Param(n)) => Value::from(*n),
            Some(ParameterChoice::BoolParam(b)) => Value::from(*b),
            Some(ParameterChoice::DoubleParam(d)) => Value::from(*d),
        };
        map.insert(key.to_string(), value);
    }
    Some(map)
}

/// Reads `req`'s shared-memory inputs into its `raw_input_contents` and takes the
/// shared-memory parameters off its inputs and outputs; returns the outputs to write
/// to regions. A request naming no region is left as it is.
pub fn rewrite_request(
    regions: &Regions,
    tenant: TenantId,
    req: &mut ModelInferRequest,
) -> Result<Vec<OutputTarget>, String> {
    let names_region = |p: &HashMap<String, InferParameter>| p.contains_key(KEYS[0]);
    let inputs_in_shm = req.inputs.iter().any(|i| names_region(&i.parameters));
    if !inputs_in_shm && !req.outputs.iter().any(|o| names_region(&o.parameters)) {
        return Ok(Vec::new());
    }
    if inputs_in_shm {
        // Clients send raw contents only for the inputs not in shared memory, in order.
        let mut sent = std::mem::take(&mut req.raw_input_contents).into_iter();
        let mut raw = Vec::with_capacity(req.inputs.len());
        for input in &mut req.inputs {
            if let Some(params) = as_json(&input.parameters) {
                let (region, offset, size) =
                    place(regions, tenant, &params)?.expect("the region is named");
                let mut bytes = Vec::new();
                region.read(offset, size, &mut bytes)?;
                raw.push(Bytes::from(bytes));
                for key in KEYS {
                    input.parameters.remove(key);
                }
            } else if input.contents.is_some() {
                return Err(format!(
                    "input {} has typed contents beside inputs in shared memory: send it as raw_input_contents",
                    input.name
                ));
            } else {
                let bytes = sent.next().ok_or_else(|| {
                    format!("input {} has neither contents, raw_input_contents nor a shared memory region", input.name)
                })?;
                raw.push(bytes);
            }
        }
        if sent.next().is_some() {
            return Err(
                "raw_input_contents has more entries than the inputs not in shared memory".into(),
            );
        }
        req.raw_input_contents = raw;
    }
    let mut targets = Vec::new();
    for output in &mut req.outputs {
        let Some(params) = as_json(&output.parameters) else {
            continue;
        };
        let (region, offset, size) = place(regions, tenant, &params)?.expect("the region is named");
        targets.push(OutputTarget::new(output.name.clone(), region, offset, size));
        for key in KEYS {
            output.parameters.remove(key);
        }
    }
    Ok(targets)
}

/// Writes the outputs of `targets` from `resp` to their regions, leaving their raw
/// contents empty and naming the region in their parameters.
pub fn place_outputs(
    targets: &[OutputTarget],
    resp: &mut ModelInferResponse,
) -> Result<(), String> {
    assert_eq!(
        resp.outputs.len(),
        resp.raw_output_contents.len(),
        "the encoder answers raw contents, one per output"
    );
    for (output, raw) in resp.outputs.iter_mut().zip(&mut resp.raw_output_contents) {
        let Some(target) = targets.iter().find(|t| t.name() == output.name) else {
            continue;
        };
        target.write(raw)?;
        for (key, value) in target.placed(raw.len() as u64) {
            let choice = match value {
                Value::String(s) => ParameterChoice::StringParam(s),
                v => ParameterChoice::Int64Param(
                    v.as_i64().expect("sizes and offsets are whole numbers"),
                ),
            };
            output.parameters.insert(
                key.to_string(),
                InferParameter {
                    parameter_choice: Some(choice),
                },
            );
        }
        *raw = Bytes::new();
    }
    Ok(())
}
