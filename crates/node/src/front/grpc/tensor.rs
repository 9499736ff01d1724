//! `ModelInfer` with no I/O: from a decoded `ModelInferRequest` to a call's params and
//! payload, and from a call's output to a `ModelInferResponse`.
//!
//! The rules for tensors are the protocol's and live in `http::v2` (the one mapping
//! from a built-in to tensors, [`Signature`]; the tensors a repository model declares,
//! `http::v2::declared`; and the checks every encoding of a request goes through);
//! this file only reads them out of the protobuf messages.
//! Inputs come either all in `raw_input_contents` (one little-endian byte string per
//! input, in the request's input order) or each in its typed `contents`; every size is
//! checked against the bytes the message carries before anything is allocated, so a
//! request cannot make the node reserve more than the message it sent (which the
//! server has already bounded, see [`super::serve`]).

use accel::tensors::Tensors;
use accel::{Accelerator, Descriptor, ParamBlock};
use bytes::Bytes;

use super::pb::infer_parameter::ParameterChoice;
use super::pb::model_infer_request::InferInputTensor;
use super::pb::model_infer_response::InferOutputTensor;
use super::pb::{InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse};
use crate::core::sequence::{CorrelationId, Sequenced};
use crate::front::oip::classify;
use crate::front::oip::elements::{self, Scalar};
use crate::front::oip::infer::{
    call_params, check_input, check_output, input_size, order_inputs, output_shape, shape_params,
};
use crate::front::oip::outputs::{self, Requested, Wanted};
use crate::front::oip::sequence;
use crate::front::oip::{declared, DataType, Signature, OUTPUT, VERSION};

/// A decoded request: what the accelerator is called with, and how to answer.
#[derive(Debug)]
pub struct InferCall {
    pub params: ParamBlock,
    pub payload: Vec<u8>,
    pub reply: Reply,
}

/// What the response needs to know about the request.
#[derive(Debug)]
pub struct Reply {
    id: String,
    /// Which outputs to answer (gRPC answers every one raw).
    requested: Requested,
    shapes: Shapes,
    /// The call's place in its sequence (a stateful model's).
    sequence: Option<Sequenced>,
}

impl Reply {
    /// The call's place in its sequence, for the sequence table.
    pub fn sequence(&self) -> Option<&Sequenced> {
        self.sequence.as_ref()
    }
}

/// How the output becomes tensors.
#[derive(Debug)]
enum Shapes {
    /// A built-in: one output, shaped after the first input (`input_shape`) or its
    /// own length.
    Builtin {
        sig: Signature,
        input_shape: Vec<u64>,
    },
    /// A model that declares its tensors: every output, for the request's batch.
    Declared(declared::Shapes),
}

/// Where an input's bytes are in the message.
enum Source<'a> {
    Raw(&'a Bytes),
    Typed(&'a InferTensorContents),
}

/// Decodes a `ModelInfer` request for `accel`. The error is the sentence of the
/// `INVALID_ARGUMENT` status.
pub fn decode(accel: &dyn Accelerator, req: &ModelInferRequest) -> Result<InferCall, String> {
    let d = accel.descriptor();
    let sourced = sources(req)?;
    let seq = sequence::check(accel, given_sequence(req)?)?;
    if let Some(t) = accel.tensors() {
        let mut call = decode_declared(accel, t, req, &sourced, seq)?;
        classify::prepare(&mut call.reply.requested, accel)?;
        return Ok(call);
    }
    let sig = Signature::of(d);
    let ordered = order_inputs(d, sig, &sourced, |(i, _)| &i.name)?;
    let mut call = decode_builtin(d, sig, req, ordered)?;
    classify::prepare(&mut call.reply.requested, accel)?;
    Ok(call)
}

/// Decodes a request for a model that declares its tensors, by the rules the v2 HTTP
/// path applies (`http::v2::declared`): inputs by name and declared datatype, the
/// batch axis, no parameters, outputs by name.
fn decode_declared(
    accel: &dyn Accelerator,
    t: &Tensors,
    req: &ModelInferRequest,
    sourced: &[(&InferInputTensor, Source<'_>)],
    seq: Option<Sequenced>,
) -> Result<InferCall, String> {
    let d = accel.descriptor();
    let sent = sequence::request_tensors(t, accel.sequence());
    // The most bytes the message's contents can stand for: no input may claim more
    // before its contents are checked.
    let carried: usize = sourced.iter().map(|(_, source)| most_bytes(source)).sum();
    let declared::Plan {
        parts: planned,
        batch,
        given,
    } = declared::plan(
        d,
        &sent,
        sourced,
        |(i, _)| declared::Head {
            name: &i.name,
            datatype: &i.datatype,
            shape: &i.shape,
        },
        carried,
    )?;
    let mut payload = given;
    payload.reserve(planned.iter().map(|p| p.bytes).sum());
    for p in &planned {
        let (input, source) = p.input;
        push_input(input, source, p.datatype, p.count, p.bytes, &mut payload)?;
    }
    sequence::push_controls(accel, seq.as_ref(), batch, &mut payload)?;
    let mut pairs = Vec::with_capacity(req.parameters.len());
    for (key, value) in model_parameters(req) {
        pairs.push((key.as_str(), param_text(key, value)?));
    }
    let params = declared::params(d, pairs.iter().map(|(k, v)| (*k, v.as_str())))?;
    let requested = requested(req, |name| declared::check_output(d, &sent, name))?;
    Ok(InferCall {
        params,
        payload,
        reply: Reply {
            id: req.id.clone(),
            requested,
            shapes: Shapes::Declared(
                declared::Shapes::new(t, batch).hiding(sequence::hidden_outputs(accel)),
            ),
            sequence: seq,
        },
    })
}

/// Each input of `req` paired with where its bytes are: all in `raw_input_contents`
/// (in the request's input order) or each in its typed `contents`.
fn sources(req: &ModelInferRequest) -> Result<Vec<(&InferInputTensor, Source<'_>)>, String> {
    let raw = &req.raw_input_contents;
    if !raw.is_empty() && raw.len() != req.inputs.len() {
        return Err(format!(
            "raw_input_contents has {} entries for {} input(s): give one for every input, or none",
            raw.len(),
            req.inputs.len()
        ));
    }
    let mut sourced = Vec::with_capacity(req.inputs.len());
    for (k, input) in req.inputs.iter().enumerate() {
        let source = match (raw.get(k), &input.contents) {
            // Triton's words first: its clients match on them.
            (Some(_), Some(_)) => {
                return Err(format!(
                    "contents field must not be specified when using raw_input_contents for '{name}' for model '{model}' \
                     (input {name} has typed contents although the request uses raw_input_contents)",
                    name = input.name,
                    model = req.model_name
                ))
            }
            (Some(bytes), None) => Source::Raw(bytes),
            (None, Some(contents)) => Source::Typed(contents),
            (None, None) => {
                return Err(format!(
                    "input {} has neither contents nor raw_input_contents",
                    input.name
                ))
            }
        };
        sourced.push((input, source));
    }
    Ok(sourced)
}

/// The body of [`decode`] for a built-in (see [`Signature`]).
fn decode_builtin(
    d: &Descriptor,
    sig: Signature,
    req: &ModelInferRequest,
    ordered: Vec<&(&InferInputTensor, Source<'_>)>,
) -> Result<InferCall, String> {
    let mut shapes = Vec::with_capacity(ordered.len());
    for (input, _) in &ordered {
        shapes.push(check_input(
            d,
            sig,
            &input.name,
            &input.datatype,
            &input.shape,
        )?);
    }
    let shape_pairs = shape_params(sig.layout, &shapes)?;

    let carried: usize = ordered
        .iter()
        .map(|(_, source)| carried_bytes(source, sig.datatype))
        .sum();
    let mut sizes = Vec::with_capacity(ordered.len());
    for ((input, _), shape) in ordered.iter().zip(&shapes) {
        sizes.push(input_size(&input.name, shape, sig, carried)?);
    }
    let mut payload = Vec::with_capacity(sizes.iter().map(|s| s.1).sum());
    for (&(input, ref source), &(count, bytes)) in ordered.iter().zip(&sizes) {
        push_input(input, source, sig.datatype, count, bytes, &mut payload)?;
    }

    let mut pairs = Vec::with_capacity(req.parameters.len());
    for (key, value) in model_parameters(req) {
        pairs.push((key.clone(), param_text(key, value)?));
    }
    let params = call_params(d, shape_pairs, pairs)?;
    let requested = requested(req, |name| check_output(d, name))?;
    Ok(InferCall {
        params,
        payload,
        reply: Reply {
            id: req.id.clone(),
            requested,
            shapes: Shapes::Builtin {
                sig,
                input_shape: shapes.swap_remove(0),
            },
            sequence: None,
        },
    })
}

/// The bytes an input's contents hold, as elements of `datatype` (values of the
/// wrong kind count as none; [`push_input`] refuses them).
fn carried_bytes(source: &Source<'_>, datatype: DataType) -> usize {
    match source {
        Source::Raw(bytes) => bytes.len(),
        Source::Typed(c) => typed_field(c, datatype)
            .map_or(0, |(_, n)| n)
            .saturating_mul(datatype.size()),
    }
}

/// The most payload bytes an input's contents can stand for, whatever its datatype:
/// a typed value takes at most 8 bytes, a string its length and 4.
fn most_bytes(source: &Source<'_>) -> usize {
    match source {
        Source::Raw(bytes) => bytes.len(),
        Source::Typed(c) => {
            let strings: usize = c.bytes_contents.iter().map(Vec::len).sum();
            typed_len(c).saturating_mul(8).saturating_add(strings)
        }
    }
}

/// The typed field that holds values of `datatype` (as Triton maps them) and how
/// many it has; `None` for FP16 and BF16, which have no typed field.
fn typed_field(c: &InferTensorContents, datatype: DataType) -> Option<(&'static str, usize)> {
    use DataType as D;
    Some(match datatype {
        D::Bool => ("bool_contents", c.bool_contents.len()),
        D::Uint8 | D::Uint16 | D::Uint32 => ("uint_contents", c.uint_contents.len()),
        D::Uint64 => ("uint64_contents", c.uint64_contents.len()),
        D::Int8 | D::Int16 | D::Int32 => ("int_contents", c.int_contents.len()),
        D::Int64 => ("int64_contents", c.int64_contents.len()),
        D::Fp32 => ("fp32_contents", c.fp32_contents.len()),
        D::Fp64 => ("fp64_contents", c.fp64_contents.len()),
        D::Bytes => ("bytes_contents", c.bytes_contents.len()),
        D::Fp16 | D::Bf16 => return None,
    })
}

/// Appends one input's `bytes` (of `count` elements) to the payload, little-endian.
fn push_input(
    input: &InferInputTensor,
    source: &Source<'_>,
    datatype: DataType,
    count: usize,
    bytes: usize,
    payload: &mut Vec<u8>,
) -> Result<(), String> {
    let name = &input.name;
    match source {
        Source::Raw(raw) => {
            if datatype.fixed_size().is_some() && raw.len() != bytes {
                return Err(format!(
                    "input {name} of shape {:?} and datatype {} is {bytes} bytes, its raw_input_contents has {}",
                    input.shape,
                    input.datatype,
                    raw.len()
                ));
            }
            elements::check_binary(datatype, count, raw)
                .map_err(|e| format!("input {name} (raw_input_contents): {e}"))?;
            payload.extend_from_slice(raw);
        }
        Source::Typed(c) => push_typed(input, c, datatype, count, payload)?,
    }
    Ok(())
}

/// Appends an input's typed `contents`: every value in its datatype's field, as many
/// as its shape says, each in range.
fn push_typed(
    input: &InferInputTensor,
    c: &InferTensorContents,
    datatype: DataType,
    count: usize,
    payload: &mut Vec<u8>,
) -> Result<(), String> {
    let name = &input.name;
    let Some((field, given)) = typed_field(c, datatype) else {
        return Err(format!(
            "input {name} is {}: it has no typed contents field, send it in raw_input_contents",
            datatype.name()
        ));
    };
    let elsewhere = typed_len(c) - given;
    if elsewhere > 0 {
        return Err(format!(
            "input {name} is {}: its values go in {field}, {elsewhere} value(s) are in other fields",
            datatype.name()
        ));
    }
    if given != count {
        return Err(format!(
            "input {name} has shape {:?} ({count} elements) but {given} values in {field}",
            input.shape
        ));
    }
    use DataType as D;
    let values: Box<dyn Iterator<Item = Scalar<'_>>> = match datatype {
        D::Bool => Box::new(c.bool_contents.iter().map(|&v| Scalar::Bool(v))),
        D::Uint8 | D::Uint16 | D::Uint32 => {
            Box::new(c.uint_contents.iter().map(|&v| Scalar::Unsigned(v.into())))
        }
        D::Uint64 => Box::new(c.uint64_contents.iter().map(|&v| Scalar::Unsigned(v))),
        D::Int8 | D::Int16 | D::Int32 => {
            Box::new(c.int_contents.iter().map(|&v| Scalar::Signed(v.into())))
        }
        D::Int64 => Box::new(c.int64_contents.iter().map(|&v| Scalar::Signed(v))),
        D::Fp32 => Box::new(c.fp32_contents.iter().map(|&v| Scalar::Float(v.into()))),
        D::Fp64 => Box::new(c.fp64_contents.iter().map(|&v| Scalar::Float(v))),
        D::Bytes => Box::new(c.bytes_contents.iter().map(|v| Scalar::Bytes(v))),
        D::Fp16 | D::Bf16 => unreachable!("no typed field, refused above"),
    };
    for value in values {
        elements::push_element(datatype, value, payload)
            .ok_or_else(|| format!("input {name}: {value:?} is not a {} value", datatype.name()))?;
    }
    Ok(())
}

/// Values in all the typed fields together.
fn typed_len(c: &InferTensorContents) -> usize {
    c.bool_contents.len()
        + c.int_contents.len()
        + c.int64_contents.len()
        + c.uint_contents.len()
        + c.uint64_contents.len()
        + c.fp32_contents.len()
        + c.fp64_contents.len()
        + c.bytes_contents.len()
}

/// The request's parameters for the model: all but those that place it in a
/// sequence and the stream's ask for an empty final response.
fn model_parameters(
    req: &ModelInferRequest,
) -> impl Iterator<Item = (&String, &InferParameter)> + '_ {
    req.parameters.iter().filter(|(key, _)| {
        !sequence::KEYS.contains(&key.as_str()) && *key != super::decoupled::ENABLE_EMPTY_FINAL
    })
}

/// The sequence parameters of a request, as Triton's clients send them: the id an
/// `int64_param` (or `uint64_param`) or a `string_param`, the flags `bool_param`s.
fn given_sequence(req: &ModelInferRequest) -> Result<sequence::Given, String> {
    let choice = |key: &str| {
        req.parameters
            .get(key)
            .and_then(|p| p.parameter_choice.as_ref())
    };
    let id = match choice(sequence::KEYS[0]) {
        None => None,
        Some(ParameterChoice::Int64Param(n)) => Some(CorrelationId::Number(
            u64::try_from(*n).map_err(|_| format!("sequence_id {n} is negative"))?,
        )),
        Some(ParameterChoice::Uint64Param(n)) => Some(CorrelationId::Number(*n)),
        Some(ParameterChoice::StringParam(s)) => Some(CorrelationId::Text(s.clone())),
        Some(_) => return Err("sequence_id must be an integer or a string".into()),
    };
    let flag = |key: &str| match choice(key) {
        None => Ok(false),
        Some(ParameterChoice::BoolParam(b)) => Ok(*b),
        Some(_) => Err(format!("{key} must be a bool_param")),
    };
    Ok(sequence::Given {
        id,
        start: flag(sequence::KEYS[1])?,
        end: flag(sequence::KEYS[2])?,
    })
}

/// A request parameter as the text the accelerator's parameter parser reads (as over
/// HTTP, where parameters are JSON numbers or strings).
fn param_text(key: &str, value: &InferParameter) -> Result<String, String> {
    match &value.parameter_choice {
        Some(ParameterChoice::Int64Param(v)) => Ok(v.to_string()),
        Some(ParameterChoice::Uint64Param(v)) => Ok(v.to_string()),
        Some(ParameterChoice::DoubleParam(v)) => Ok(v.to_string()),
        Some(ParameterChoice::StringParam(v)) => Ok(v.clone()),
        Some(ParameterChoice::BoolParam(_)) | None => Err(format!(
            "request parameter `{key}` must be a number or a string"
        )),
    }
}

/// The outputs a request asks for (all, without a list), each name checked by
/// `check`, with the classification extension's class count where one asks for it.
fn requested(
    req: &ModelInferRequest,
    check: impl Fn(&str) -> Result<(), String>,
) -> Result<Requested, String> {
    if req.outputs.is_empty() {
        return Ok(Requested::default());
    }
    let mut list: Vec<Wanted> = Vec::with_capacity(req.outputs.len());
    for output in &req.outputs {
        check(&output.name)?;
        if list.iter().any(|w| w.name == output.name) {
            return Err(format!(
                "output {} is requested more than once",
                output.name
            ));
        }
        let classes = match output
            .parameters
            .get("classification")
            .and_then(|p| p.parameter_choice.as_ref())
        {
            None => None,
            Some(ParameterChoice::Int64Param(n)) if *n > 0 => Some(*n as u64),
            Some(ParameterChoice::Uint64Param(n)) => Some(*n),
            Some(_) => {
                return Err(format!(
                    "output {}: classification must be a positive integer",
                    output.name
                ))
            }
        };
        list.push(Wanted {
            name: output.name.clone(),
            binary: true,
            class_count: outputs::class_count(classes, &output.name)?,
            labels: None,
        });
    }
    Ok(Requested {
        default_binary: true,
        list: Some(list),
        batched: false,
    })
}

/// The response for a call's `output`: the requested output tensors, their bytes in
/// `raw_output_contents` (as Triton answers, and as clients read fastest).
pub fn encode(model: &str, reply: &Reply, output: Vec<u8>) -> ModelInferResponse {
    let given = match &reply.shapes {
        Shapes::Builtin { sig, input_shape } => {
            // One output, moved into the answer without a copy (a built-in's one
            // output is always the one asked for, and is never classified).
            let shape = output_shape(*sig, input_shape, output.len());
            debug_assert!(reply
                .requested
                .list
                .iter()
                .flatten()
                .all(|w| w.class_count.is_none()));
            return response(
                model,
                reply,
                vec![tensor(OUTPUT, sig.datatype, &shape)],
                vec![Bytes::from(output)],
            );
        }
        Shapes::Declared(shapes) => shapes
            .outputs(&output)
            .map(|(spec, shape, bytes)| (spec.name.as_str(), spec.datatype, shape, bytes))
            .collect(),
    };
    // One copy per tensor: raw_output_contents holds one byte string per output.
    let (outputs, raw) = outputs::answer(&reply.requested, given, classify::top)
        .into_iter()
        .map(|t| {
            let bytes = Bytes::copy_from_slice(&t.bytes);
            (tensor(&t.wanted.name, t.datatype, &t.shape), bytes)
        })
        .unzip();
    response(model, reply, outputs, raw)
}

fn tensor(name: &str, datatype: DataType, shape: &[u64]) -> InferOutputTensor {
    InferOutputTensor {
        name: name.to_string(),
        datatype: datatype.name().to_string(),
        shape: shape.iter().map(|&s| s as i64).collect(),
        parameters: Default::default(),
        contents: None,
    }
}

fn response(
    model: &str,
    reply: &Reply,
    outputs: Vec<InferOutputTensor>,
    raw: Vec<Bytes>,
) -> ModelInferResponse {
    ModelInferResponse {
        model_name: model.to_string(),
        model_version: VERSION.to_string(),
        id: reply.id.clone(),
        parameters: Default::default(),
        outputs,
        raw_output_contents: raw,
    }
}

/// Entry point for the fuzz target and the corpus replay test: decodes `data` as a
/// `ModelInferRequest` for each built-in and encodes an answer. Must never panic.
pub mod fuzzing {
    use accel::Catalog;
    use prost::Message;

    pub fn grpc_infer(data: &[u8]) {
        let Ok(req) = super::ModelInferRequest::decode(data) else {
            return;
        };
        let example: std::sync::Arc<dyn accel::Accelerator> =
            std::sync::Arc::new(crate::front::oip::declared::example::Example::default());
        for accel in Catalog::builtin().iter().chain([&example]) {
            if let Ok(call) = super::decode(&**accel, &req) {
                let _ = super::encode("m", &call.reply, call.payload);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel::{param_u32, Catalog};
    use std::collections::HashMap;

    fn input(
        name: &str,
        dt: &str,
        shape: &[i64],
        contents: Option<InferTensorContents>,
    ) -> InferInputTensor {
        InferInputTensor {
            name: name.into(),
            datatype: dt.into(),
            shape: shape.to_vec(),
            parameters: HashMap::new(),
            contents,
        }
    }

    fn request(inputs: Vec<InferInputTensor>, raw: Vec<Vec<u8>>) -> ModelInferRequest {
        ModelInferRequest {
            model_name: "m".into(),
            inputs,
            raw_input_contents: raw.into_iter().map(Bytes::from).collect(),
            ..Default::default()
        }
    }

    fn int(v: i64) -> InferParameter {
        InferParameter {
            parameter_choice: Some(ParameterChoice::Int64Param(v)),
        }
    }

    fn decode_for(model: &str, req: &ModelInferRequest) -> Result<InferCall, String> {
        let c = Catalog::builtin();
        decode(&**c.by_name(model).unwrap(), req)
    }

    fn le_i32(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn typed_contents_become_little_endian_payloads_with_params() {
        let contents = InferTensorContents {
            int_contents: vec![5, -1, 9],
            ..Default::default()
        };
        let mut req = request(vec![input("INPUT0", "INT32", &[3], Some(contents))], vec![]);
        req.id = "7".into();
        req.parameters.insert("k".into(), int(2));
        let call = decode_for("topk", &req).unwrap();
        assert_eq!(param_u32(&call.params, 0), 2);
        assert_eq!(call.payload, le_i32(&[5, -1, 9]));
        let resp = encode("topk", &call.reply, le_i32(&[9, 5]));
        assert_eq!(resp.id, "7");
        assert_eq!(resp.model_version, "1");
        assert_eq!(resp.outputs[0].name, "OUTPUT0");
        assert_eq!(resp.outputs[0].datatype, "INT32");
        assert_eq!(resp.outputs[0].shape, [2]);
        assert_eq!(&resp.raw_output_contents[0][..], &le_i32(&[9, 5])[..]);
    }

    #[test]
    fn raw_inputs_follow_the_request_order_and_shapes_give_params() {
        let a: Vec<u8> = [1f32, 2., 3., 4.]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let b: Vec<u8> = [5f32, 6., 7., 8.]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        // INPUT1 listed first: raw_input_contents follow the request's order.
        let req = request(
            vec![
                input("INPUT1", "FP32", &[2, 2], None),
                input("INPUT0", "FP32", &[2, 2], None),
            ],
            vec![b.clone(), a.clone()],
        );
        let call = decode_for("matmul", &req).unwrap();
        assert_eq!(call.payload, [a, b].concat());
        assert_eq!(param_u32(&call.params, 0), 2);
        let resp = encode("matmul", &call.reply, vec![0; 16]);
        assert_eq!(resp.outputs[0].shape, [2, 2]);

        let req = request(
            vec![input("INPUT0", "UINT8", &[2, 3], None)],
            vec![vec![7; 6]],
        );
        let call = decode_for("sobel", &req).unwrap();
        assert_eq!(param_u32(&call.params, 0), 3, "width");
        assert_eq!(param_u32(&call.params, 4), 2, "height");
    }

    #[test]
    fn malformed_requests_are_refused_with_a_reason() {
        let raw1 = |dt: &str, shape: &[i64], bytes: Vec<u8>| {
            request(vec![input("INPUT0", dt, shape, None)], vec![bytes])
        };
        let err = |model: &str, req: ModelInferRequest| decode_for(model, &req).unwrap_err();
        assert!(err("topk", raw1("FP32", &[1], vec![0; 4])).contains("datatype FP32"));
        assert!(err("echo", raw1("UINT8", &[3], vec![0; 2])).contains("more bytes"));
        assert!(err("echo", raw1("UINT8", &[1], vec![0; 2])).contains("raw_input_contents has 2"));
        assert!(err("echo", raw1("UINT8", &[2, 1], vec![0; 2])).contains("shape"));
        assert!(err("echo", raw1("UINT8", &[-2], vec![])).contains("shape"));
        assert!(err("topk", raw1("INT32", &[1], vec![0; 4])).contains("missing required"));
        assert!(err("echo", request(vec![], vec![])).contains("takes 1 input"));
        assert!(err("echo", raw1("UINT8", &[i64::MAX], vec![])).contains("more bytes"));
        let e = err("sobel", raw1("UINT8", &[1 << 40, 1 << 40], vec![0; 4]));
        assert!(e.contains("too many elements"), "{e}");
        let mut huge = request(
            vec![
                input("INPUT0", "FP32", &[1 << 40, 1 << 40], None),
                input("INPUT1", "FP32", &[1 << 40, 1 << 40], None),
            ],
            vec![vec![0; 4], vec![0; 4]],
        );
        let e = err("matmul", huge.clone());
        assert!(
            e.contains("too many elements") || e.contains("more bytes"),
            "{e}"
        );
        huge.raw_input_contents.pop();
        assert!(err("matmul", huge).contains("one for every input"));
        let named = request(vec![input("X", "UINT8", &[1], None)], vec![vec![1]]);
        assert!(err("echo", named).contains("INPUT0"));
        let neither = request(vec![input("INPUT0", "UINT8", &[1], None)], vec![]);
        assert!(err("echo", neither).contains("neither"));
        // Typed contents: the field of the datatype, as many values as the shape.
        let typed = |c: InferTensorContents, shape: &[i64]| {
            request(vec![input("INPUT0", "UINT8", shape, Some(c))], vec![])
        };
        let u = |v: Vec<u32>| InferTensorContents {
            uint_contents: v,
            ..Default::default()
        };
        assert!(err("echo", typed(u(vec![1, 2]), &[3])).contains("more bytes"));
        assert!(err("echo", typed(u(vec![1, 2]), &[1])).contains("but 2 values"));
        assert!(err("echo", typed(u(vec![256]), &[1])).contains("not a UINT8"));
        let wrong_field = InferTensorContents {
            int_contents: vec![1],
            uint_contents: vec![1],
            ..Default::default()
        };
        assert!(err("echo", typed(wrong_field, &[1])).contains("other fields"));
        let mut both = raw1("UINT8", &[1], vec![1]);
        both.inputs[0].contents = Some(u(vec![1]));
        let e = err("echo", both);
        assert!(e.contains("typed contents"), "{e}");
        assert!(
            e.starts_with("contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'm'"),
            "{e}"
        );
        // Parameters: numbers or strings, agreeing with the shape.
        let mut sobel = raw1("UINT8", &[1, 2], vec![0; 2]);
        sobel.parameters.insert("width".into(), int(3));
        assert!(err("sobel", sobel).contains("shape gives 2"));
        let mut flag = raw1("UINT8", &[1], vec![0]);
        flag.parameters.insert(
            "x".into(),
            InferParameter {
                parameter_choice: Some(ParameterChoice::BoolParam(true)),
            },
        );
        assert!(err("echo", flag).contains("number or a string"));
        let mut out = raw1("UINT8", &[1], vec![0]);
        out.outputs.push(
            super::super::pb::model_infer_request::InferRequestedOutputTensor {
                name: "OUT".into(),
                parameters: HashMap::new(),
            },
        );
        assert!(err("echo", out).contains("no output OUT"));
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn declared_models_take_their_tensors_by_name_with_a_batch_axis() {
        let m = crate::front::oip::declared::example::Example::default();
        // floats first and raw, bytes typed would mix: all raw, in the request's order.
        let mut req = request(
            vec![
                input("floats", "FP32", &[2, 2], None),
                input("bytes", "UINT8", &[2, 3], None),
            ],
            vec![f32s(&[0.5, 1.5, 2.5, 3.5]), vec![1, 2, 3, 4, 5, 6]],
        );
        req.id = "r".into();
        let call = decode(&m, &req).unwrap();
        let mut want = vec![1, 2, 3, 4, 5, 6];
        want.extend_from_slice(&f32s(&[0.5, 1.5, 2.5, 3.5]));
        assert_eq!(call.payload, want, "declared order, whatever the request's");
        // Typed contents, each in its declared type's field.
        let typed = request(
            vec![
                input(
                    "bytes",
                    "UINT8",
                    &[1, 3],
                    Some(InferTensorContents {
                        uint_contents: vec![7, 8, 9],
                        ..Default::default()
                    }),
                ),
                input(
                    "floats",
                    "FP32",
                    &[1, 2],
                    Some(InferTensorContents {
                        fp32_contents: vec![1.0, 2.0],
                        ..Default::default()
                    }),
                ),
            ],
            vec![],
        );
        let typed_call = decode(&m, &typed).unwrap();
        assert_eq!(
            typed_call.payload,
            [vec![7, 8, 9], f32s(&[1.0, 2.0])].concat()
        );
        // Every output, sliced from the call's output for the batch of 2.
        let mut out: Vec<u8> = [7i32, 9].iter().flat_map(|v| v.to_le_bytes()).collect();
        out.extend_from_slice(&f32s(&[0.25, 0.75, 1.0, 0.0]));
        let resp = encode("example", &call.reply, out);
        assert_eq!(resp.id, "r");
        assert_eq!(resp.outputs.len(), 2);
        assert_eq!(resp.outputs[0].name, "class");
        assert_eq!(resp.outputs[0].datatype, "INT32");
        assert_eq!(resp.outputs[0].shape, [2, 1]);
        assert_eq!(resp.outputs[1].name, "scores");
        assert_eq!(resp.outputs[1].shape, [2, 2]);
        assert_eq!(&resp.raw_output_contents[0][..], &le_i32(&[7, 9])[..]);
        assert_eq!(
            &resp.raw_output_contents[1][..],
            &f32s(&[0.25, 0.75, 1.0, 0.0])[..]
        );
    }

    #[test]
    fn requests_that_do_not_fit_a_declared_model_name_the_tensor() {
        let m = crate::front::oip::declared::example::Example::default();
        let two = |bshape: &[i64], fshape: &[i64], fdt: &str, nb: usize, nf: usize| {
            request(
                vec![
                    input("bytes", "UINT8", bshape, None),
                    input("floats", fdt, fshape, None),
                ],
                vec![vec![1; nb], vec![0; nf * 4]],
            )
        };
        let err = |req: ModelInferRequest| decode(&m, &req).unwrap_err();
        let e = err(two(&[1, 3], &[1, 2], "FP64", 3, 2));
        assert!(
            e.contains("input floats") && e.contains("expected FP32"),
            "{e}"
        );
        let e = err(two(&[1, 4], &[1, 2], "FP32", 4, 2));
        assert!(e.contains("input bytes has shape [1, 4]"), "{e}");
        assert!(err(two(&[5, 3], &[5, 2], "FP32", 15, 10)).contains("1 to 4"));
        assert!(err(two(&[1, 3], &[2, 2], "FP32", 3, 4)).contains("disagree on the batch"));
        let e = err(two(&[2, 3], &[2, 2], "FP32", 5, 4));
        assert!(
            e.contains("input bytes") && e.contains("raw_input_contents has 5"),
            "{e}"
        );
        let one = request(
            vec![input("bytes", "UINT8", &[1, 3], None)],
            vec![vec![1; 3]],
        );
        assert!(err(one).contains("takes 2 input(s) (bytes, floats)"));
        let mut param = two(&[1, 3], &[1, 2], "FP32", 3, 2);
        param.parameters.insert("k".into(), int(3));
        assert!(err(param).contains("takes none"));
        let mut out = two(&[1, 3], &[1, 2], "FP32", 3, 2);
        out.outputs.push(
            super::super::pb::model_infer_request::InferRequestedOutputTensor {
                name: "OUTPUT0".into(),
                parameters: HashMap::new(),
            },
        );
        assert!(err(out).contains("its outputs are class, scores"));
        // Typed values in another type's field.
        let wrong = request(
            vec![
                input(
                    "bytes",
                    "UINT8",
                    &[1, 3],
                    Some(InferTensorContents {
                        uint_contents: vec![1, 2, 3],
                        ..Default::default()
                    }),
                ),
                input(
                    "floats",
                    "FP32",
                    &[1, 2],
                    Some(InferTensorContents {
                        int_contents: vec![1, 2],
                        ..Default::default()
                    }),
                ),
            ],
            vec![],
        );
        let e = err(wrong);
        assert!(
            e.contains("input floats") && e.contains("other fields"),
            "{e}"
        );
    }

    #[test]
    fn fuzzing_entry_point_survives_hostile_input() {
        use prost::Message;
        let good = request(vec![input("INPUT0", "UINT8", &[2], None)], vec![vec![1, 2]]);
        let bytes = good.encode_to_vec();
        for data in [&b""[..], b"\xff\xff\xff", &bytes, &bytes[..bytes.len() - 1]] {
            fuzzing::grpc_infer(data);
        }
    }
}
