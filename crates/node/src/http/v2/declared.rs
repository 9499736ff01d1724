//! Inference requests for models that declare their own tensors (ONNX models of the
//! model repository): inputs and outputs by the model's names, each with its own
//! datatype and fixed dims, and a batch axis in front when the model has one.
//!
//! The payload a request becomes is the one `/v1/fn` and RAC carry (see
//! `accel::tensors`): each input whole, in declared order, whatever order the request
//! lists them in. The response lists every output, sliced from the call's output in
//! declared order, with the batch the request sent.

use accel::tensors::Tensors;
use accel::{params_from_pairs, Descriptor};
use serde_json::{Map, Value};

use super::infer::{self, gather, json_data, InferCall, Part, RawInput, RawRequest, Reply};
use super::VERSION;

/// A declared model's tensors and the batch of one request.
#[derive(Debug)]
pub struct Shapes {
    tensors: Tensors,
    batch: usize,
}

/// Decodes `req` (its JSON part parsed; `binary` the bytes after it; `body_len` the
/// whole body's) for a model declaring `t`. The error is the protocol's sentence.
pub(super) fn decode(
    d: &Descriptor,
    t: &Tensors,
    req: RawRequest,
    binary: &[u8],
    body_len: usize,
) -> Result<InferCall, String> {
    let names: Vec<&str> = t.inputs.iter().map(|s| s.name.as_str()).collect();
    if req.inputs.len() != names.len() {
        return Err(format!(
            "model {} takes {} input(s) ({}), the request has {}",
            d.name,
            names.len(),
            names.join(", "),
            req.inputs.len()
        ));
    }
    let mut batch: Option<u64> = None;
    let mut parts = Vec::with_capacity(names.len());
    for spec in &t.inputs {
        let mut found = req.inputs.iter().filter(|i| i.name == spec.name);
        let input: &RawInput = match (found.next(), found.next()) {
            (Some(input), None) => input,
            (None, _) => {
                return Err(format!(
                    "input {} of model {} is missing",
                    spec.name, d.name
                ))
            }
            (Some(_), Some(_)) => {
                return Err(format!("input {} is given more than once", spec.name))
            }
        };
        if input.datatype != spec.datatype.name() {
            return Err(format!(
                "input {} of model {} has datatype {}, expected {}",
                input.name,
                d.name,
                input.datatype,
                spec.datatype.name()
            ));
        }
        let want = t.declared_shape(spec);
        let max = i64::from(t.max_batch_size);
        let fits = input.shape.len() == want.len()
            && input.shape.iter().zip(&want).all(|(&s, &w)| {
                if w == -1 {
                    (1..=max).contains(&s)
                } else {
                    s == w
                }
            });
        if !fits {
            let batch_note = if t.max_batch_size > 0 {
                format!(" (-1: the batch, 1 to {})", t.max_batch_size)
            } else {
                String::new()
            };
            return Err(format!(
                "input {} has shape {:?}; model {} takes shape {want:?}{batch_note}",
                input.name, input.shape, d.name
            ));
        }
        let b = if t.max_batch_size > 0 {
            input.shape[0] as u64
        } else {
            1
        };
        if batch.is_some_and(|x| x != b) {
            return Err(format!(
                "the inputs of model {} disagree on the batch size",
                d.name
            ));
        }
        batch = Some(b);
        let count = b as usize * spec.item_elements();
        let bytes = count * spec.datatype.size();
        // Every element takes at least two bytes of JSON ("0,") or its own size in
        // binary: a request cannot make the node reserve more than twice its body.
        if bytes > body_len.saturating_mul(2) {
            return Err(format!(
                "input {} of shape {:?} needs more bytes than the request carries",
                input.name, input.shape
            ));
        }
        parts.push(Part {
            input,
            datatype: spec.datatype,
            count,
            bytes,
        });
    }
    let payload = gather(&parts, binary)?;

    let mut binary_out = false;
    let mut others: Vec<(&str, String)> = Vec::new();
    for (key, value) in req.parameters.iter().flatten() {
        if key == "binary_data_output" {
            binary_out = value
                .as_bool()
                .ok_or("request parameter binary_data_output must be a boolean")?;
        } else {
            others.push((key, value.to_string()));
        }
    }
    // A model takes no parameters: any other is refused with the usual sentence.
    let params = params_from_pairs(&d.params, others.iter().map(|(k, v)| (*k, v.as_str())))
        .map_err(|e| e.to_string())?;
    for output in req.outputs.iter().flatten() {
        if !t.outputs.iter().any(|s| s.name == output.name) {
            let names: Vec<&str> = t.outputs.iter().map(|s| s.name.as_str()).collect();
            return Err(format!(
                "model {} has no output {}; its outputs are {}",
                d.name,
                output.name,
                names.join(", ")
            ));
        }
        if let Some(flag) = output
            .parameters
            .as_ref()
            .and_then(|p| p.get("binary_data"))
        {
            binary_out = flag
                .as_bool()
                .ok_or("output parameter binary_data must be a boolean")?;
        }
    }
    let shapes = Shapes {
        tensors: t.clone(),
        batch: batch.unwrap_or(1) as usize,
    };
    Ok(InferCall {
        params,
        payload,
        reply: infer::declared_reply(req.id, binary_out, shapes),
    })
}

/// Writes the response for a call's `output` (every output, in declared order) into
/// `dst`; the JSON part's length when binary data follows it.
pub(super) fn encode(
    model: &str,
    reply: &Reply,
    shapes: &Shapes,
    output: &[u8],
    dst: &mut Vec<u8>,
) -> Option<usize> {
    let t = &shapes.tensors;
    let mut head = Map::new();
    if let Some(id) = &reply.id {
        head.insert("id".into(), Value::from(id.as_str()));
    }
    head.insert("model_name".into(), Value::from(model));
    head.insert("model_version".into(), Value::from(VERSION));
    let mut tensors = Vec::with_capacity(t.outputs.len());
    let mut slices = Vec::with_capacity(t.outputs.len());
    let mut offset = 0;
    for spec in &t.outputs {
        let len = spec.item_bytes() * shapes.batch;
        // The session checked every output's size; a short output gives short tensors.
        let bytes = output
            .get(offset..offset + len)
            .unwrap_or(output.get(offset.min(output.len())..).unwrap_or(&[]));
        offset += len;
        let mut tensor = Map::new();
        tensor.insert("name".into(), Value::from(spec.name.as_str()));
        tensor.insert("datatype".into(), Value::from(spec.datatype.name()));
        tensor.insert("shape".into(), Value::from(t.shape(spec, shapes.batch)));
        if reply.binary {
            let mut p = Map::new();
            p.insert("binary_data_size".into(), Value::from(bytes.len()));
            tensor.insert("parameters".into(), Value::Object(p));
        } else {
            tensor.insert("data".into(), json_data(spec.datatype, bytes));
        }
        tensors.push(Value::Object(tensor));
        slices.push(bytes);
    }
    head.insert("outputs".into(), Value::Array(tensors));
    let start = dst.len();
    serde_json::to_writer(&mut *dst, &head).expect("serialising JSON into a Vec cannot fail");
    if reply.binary {
        let json_len = dst.len() - start;
        for s in slices {
            dst.extend_from_slice(s);
        }
        Some(json_len)
    } else {
        None
    }
}
