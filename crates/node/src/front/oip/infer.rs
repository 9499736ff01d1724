//! `POST /v2/models/{m}/infer`: from request bytes to a call, and from a call's output
//! to response bytes, with no I/O.
//!
//! A request is a JSON document, optionally followed by binary tensor data (the binary
//! tensor data extension): then `Inference-Header-Content-Length` gives the length of
//! the JSON part, and each input sent in binary says its byte count in its
//! `binary_data_size` parameter, in input order. Every declared size is checked against
//! the bytes actually present before anything is allocated, so a request cannot make
//! the node reserve more than its body, which the connection has already bounded.

use accel::{params_from_pairs, Accelerator, Descriptor, ParamBlock};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::outputs::{self, RawOutput, Requested};
use super::{classify, declared, elements, sequence};
use super::{DataType, Layout, Signature, OUTPUT};
use crate::core::sequence::Sequenced;

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
    pub(super) id: Option<String>,
    /// Which outputs to answer, and how.
    pub(super) requested: Requested,
    sig: Signature,
    /// The first input's shape (the output's, for images and matrices).
    input_shape: Vec<u64>,
    /// A model that declares its tensors: their shapes for this call's batch.
    pub(super) declared: Option<declared::Shapes>,
    /// The call's place in its sequence (a stateful model's).
    sequence: Option<Sequenced>,
}

impl Reply {
    /// The call's place in its sequence, for the sequence table.
    pub fn sequence(&self) -> Option<&Sequenced> {
        self.sequence.as_ref()
    }
}

#[derive(Deserialize)]
pub(super) struct RawRequest {
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) parameters: Option<Map<String, Value>>,
    pub(super) inputs: Vec<RawInput>,
    #[serde(default)]
    pub(super) outputs: Option<Vec<RawOutput>>,
}

#[derive(Deserialize)]
pub(super) struct RawInput {
    pub(super) name: String,
    pub(super) shape: Vec<i64>,
    pub(super) datatype: String,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    #[serde(default)]
    data: Option<Value>,
}

/// Decodes an inference request for `accel`. `json_len` is the value of
/// `Inference-Header-Content-Length` (`None`: the whole body is JSON). The error is
/// the sentence for the protocol's `{"error": …}` (HTTP 400).
pub fn decode(
    accel: &dyn Accelerator,
    body: &[u8],
    json_len: Option<usize>,
) -> Result<InferCall, String> {
    let json_len = json_len.unwrap_or(body.len());
    if json_len > body.len() {
        return Err(format!(
            "Inference-Header-Content-Length is {json_len} but the body has {} bytes",
            body.len()
        ));
    }
    let (json, binary) = body.split_at(json_len);
    let mut req: RawRequest =
        serde_json::from_slice(json).map_err(|e| format!("malformed inference request: {e}"))?;
    let d = accel.descriptor();
    if accel.responses().is_some() {
        // Triton's words: a decoupled model's responses need a gRPC stream.
        return Err(
            "HTTP end point doesn't support models with decoupled transaction policy".into(),
        );
    }
    let seq = sequence::check(accel, sequence::from_json(&mut req.parameters)?)?;
    if let Some(tensors) = accel.tensors() {
        let mut call = decode_declared(accel, tensors, req, binary, body.len(), seq)?;
        classify::prepare(&mut call.reply.requested, accel)?;
        return Ok(call);
    }
    let sig = Signature::of(d);
    let ordered = order_inputs(d, sig, &req.inputs, |i| &i.name)?;
    let mut shapes: Vec<Vec<u64>> = Vec::with_capacity(ordered.len());
    for input in &ordered {
        shapes.push(check_input(
            d,
            sig,
            &input.name,
            &input.datatype,
            &input.shape,
        )?);
    }
    let shape_pairs = shape_params(sig.layout, &shapes)?;

    // The payload: every input's bytes, in order, each checked against its shape.
    let mut sizes = Vec::with_capacity(ordered.len());
    for (input, shape) in ordered.iter().zip(&shapes) {
        sizes.push(input_size(&input.name, shape, sig, body.len())?);
    }
    let parts: Vec<Part<'_>> = ordered
        .iter()
        .zip(&sizes)
        .map(|(input, &(count, bytes))| Part {
            input,
            datatype: sig.datatype,
            count,
            bytes,
        })
        .collect();
    let payload = gather(Vec::new(), &parts, binary)?;

    let (mut requested, others) =
        outputs::from_json(req.parameters.as_ref(), req.outputs.as_deref(), |name| {
            check_output(d, name)
        })?;
    classify::prepare(&mut requested, accel)?;
    let mut pairs: Vec<(String, String)> = Vec::with_capacity(others.len());
    for (key, value) in others {
        let text = match value {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.clone(),
            _ => {
                return Err(format!(
                    "request parameter `{key}` must be a number or a string"
                ))
            }
        };
        pairs.push((key.to_string(), text));
    }
    let params = call_params(d, shape_pairs, pairs)?;
    Ok(InferCall {
        params,
        payload,
        reply: Reply {
            id: req.id,
            requested,
            sig,
            input_shape: shapes.swap_remove(0),
            declared: None,
            sequence: None,
        },
    })
}

// The checks below are the protocol's rules for tensors whatever their encoding: the
// JSON/binary decoder above and the gRPC front end (`crate::front::grpc`) both apply them.

/// The request's inputs in the model's declared order, whatever order the request
/// lists them in; `name` reads an input's name.
pub(crate) fn order_inputs<'a, T>(
    d: &Descriptor,
    sig: Signature,
    inputs: &'a [T],
    name: impl Fn(&T) -> &str,
) -> Result<Vec<&'a T>, String> {
    let names = sig.inputs();
    if inputs.len() != names.len() {
        return Err(format!(
            "model {} takes {} input(s) ({}), the request has {}",
            d.name,
            names.len(),
            names.join(", "),
            inputs.len()
        ));
    }
    let mut ordered: Vec<&T> = Vec::with_capacity(names.len());
    for want in names {
        let mut found = inputs.iter().filter(|i| name(i) == *want);
        match (found.next(), found.next()) {
            (Some(input), None) => ordered.push(input),
            (None, _) => return Err(format!("input {want} of model {} is missing", d.name)),
            (Some(_), Some(_)) => return Err(format!("input {want} is given more than once")),
        }
    }
    Ok(ordered)
}

/// Checks one input's datatype and shape against the model; returns the shape.
pub(crate) fn check_input(
    d: &Descriptor,
    sig: Signature,
    name: &str,
    datatype: &str,
    shape: &[i64],
) -> Result<Vec<u64>, String> {
    if datatype != sig.datatype.name() {
        return Err(elements::wrong_datatype(
            &d.name,
            name,
            datatype,
            sig.datatype,
        ));
    }
    if shape.len() != sig.shape().len() || shape.iter().any(|&s| s < 0) {
        return Err(format!(
            "input {name} has shape {shape:?}; model {} takes shape {:?} (-1: any size)",
            d.name,
            sig.shape()
        ));
    }
    Ok(shape.iter().map(|&s| s as u64).collect())
}

/// An input's element count and byte size, refused when it is more bytes than the
/// request carries (`carried`): nothing is allocated for a size the request claims.
pub(crate) fn input_size(
    name: &str,
    shape: &[u64],
    sig: Signature,
    carried: usize,
) -> Result<(usize, usize), String> {
    let count = shape
        .iter()
        .try_fold(1u64, |acc, &s| acc.checked_mul(s))
        .ok_or_else(|| format!("input {name} has too many elements"))?;
    let bytes = count
        .checked_mul(sig.datatype.size() as u64)
        .filter(|&b| b <= carried as u64)
        .ok_or_else(|| {
            format!("input {name} of shape {shape:?} needs more bytes than the request carries")
        })?;
    Ok((count as usize, bytes as usize))
}

/// The call's parameter block from the request's parameters (`pairs`, as text) and
/// those the input shapes give (`shape_pairs`); a request parameter that disagrees
/// with its shape is refused.
pub(crate) fn call_params(
    d: &Descriptor,
    shape_pairs: Vec<(&'static str, String)>,
    mut pairs: Vec<(String, String)>,
) -> Result<ParamBlock, String> {
    for (key, text) in &pairs {
        if let Some((_, given)) = shape_pairs.iter().find(|(k, _)| k == key) {
            if given != text {
                return Err(format!(
                    "request parameter `{key}` is {text} but the input shape gives {given}"
                ));
            }
        }
    }
    pairs.retain(|(key, _)| !shape_pairs.iter().any(|(k, _)| k == key));
    pairs.extend(shape_pairs.into_iter().map(|(k, v)| (k.to_string(), v)));
    params_from_pairs(
        &d.params,
        pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    )
    .map_err(|e| e.to_string())
}

/// Refuses a requested output the model does not have.
pub(crate) fn check_output(d: &Descriptor, name: &str) -> Result<(), String> {
    if name == OUTPUT {
        Ok(())
    } else {
        Err(format!(
            "model {} has no output {name}; its output is {OUTPUT}",
            d.name
        ))
    }
}

/// The output tensor's shape: as long as the output for flat models, the first
/// input's shape for images and matrices.
pub(crate) fn output_shape(sig: Signature, input_shape: &[u64], output_len: usize) -> Vec<u64> {
    match sig.layout {
        Layout::Flat => vec![(output_len / sig.datatype.size()) as u64],
        Layout::Image | Layout::SquarePair => input_shape.to_vec(),
    }
}

/// The reply of a request to a model that declares its tensors.
pub(super) fn declared_reply(
    id: Option<String>,
    requested: Requested,
    shapes: declared::Shapes,
    sequence: Option<Sequenced>,
) -> Reply {
    Reply {
        id,
        requested,
        // Unused: the declared shapes answer for the model.
        sig: Signature {
            datatype: DataType::Uint8,
            layout: Layout::Flat,
        },
        input_shape: Vec::new(),
        declared: Some(shapes),
        sequence,
    }
}

/// One input of a request as it goes into the payload: its elements' type, how many
/// its shape says, and the bytes they take.
pub(super) struct Part<'a> {
    pub(super) input: &'a RawInput,
    pub(super) datatype: DataType,
    pub(super) count: usize,
    pub(super) bytes: usize,
}

/// The payload: after its `start` (a declared model's given dims, else empty), every
/// input's bytes, in `parts` order, from its JSON `data` or from the binary section
/// after the JSON (`binary`, consumed in order), each checked against its shape and
/// every binary byte accounted for.
pub(super) fn gather(
    start: Vec<u8>,
    parts: &[Part<'_>],
    mut binary: &[u8],
) -> Result<Vec<u8>, String> {
    let total: usize = parts.iter().map(|p| p.bytes).sum();
    let mut payload = start;
    payload.reserve(total);
    for part in parts {
        match binary_size(part.input)? {
            Some(declared) => {
                let this = binary_part(part, declared, binary)?;
                payload.extend_from_slice(this);
                binary = &binary[this.len()..];
            }
            None => json_part(part, &mut payload)?,
        }
    }
    if !binary.is_empty() {
        return Err(format!(
            "{} bytes follow the JSON that no input's binary_data_size accounts for",
            binary.len()
        ));
    }
    Ok(payload)
}

/// An input's bytes in the binary section (`binary`, what is left of it), its
/// `binary_data_size` (`declared`) checked against its shape and datatype.
fn binary_part<'b>(part: &Part<'_>, declared: u64, binary: &'b [u8]) -> Result<&'b [u8], String> {
    let Part {
        input,
        datatype,
        count,
        bytes,
    } = *part;
    if input.data.is_some() {
        return Err(format!(
            "input {} has both `data` and `binary_data_size`",
            input.name
        ));
    }
    // BYTES elements differ in size: `bytes` is the least they take.
    let fixed = datatype.fixed_size().is_some();
    if (fixed && declared != bytes as u64) || declared < bytes as u64 {
        return Err(format!(
            "input {} of shape {:?} and datatype {} is {bytes} bytes, binary_data_size says {declared}",
            input.name, input.shape, input.datatype
        ));
    }
    if (binary.len() as u64) < declared {
        return Err(format!(
            "input {} declares {declared} binary bytes, only {} follow the JSON",
            input.name,
            binary.len()
        ));
    }
    let this = &binary[..declared as usize];
    elements::check_binary(datatype, count, this)
        .map_err(|e| format!("input {} (binary data): {e}", input.name))?;
    Ok(this)
}

/// Appends an input's JSON `data`, exactly as many elements as its shape says.
fn json_part(part: &Part<'_>, payload: &mut Vec<u8>) -> Result<(), String> {
    let input = part.input;
    let data = input
        .data
        .as_ref()
        .ok_or_else(|| format!("input {} has neither `data` nor binary data", input.name))?;
    let given = elements::push_json(data, part.datatype, part.count, &input.name, payload)?;
    if given != part.count {
        return Err(format!(
            "input {} has shape {:?} ({} elements) but {given} data elements",
            input.name, input.shape, part.count
        ));
    }
    Ok(())
}

/// The parameters the input shapes give (`height`/`width`, `n`).
pub(crate) fn shape_params(
    layout: Layout,
    shapes: &[Vec<u64>],
) -> Result<Vec<(&'static str, String)>, String> {
    Ok(match layout {
        Layout::Flat => Vec::new(),
        Layout::Image => vec![
            ("height", shapes[0][0].to_string()),
            ("width", shapes[0][1].to_string()),
        ],
        Layout::SquarePair => {
            let n = shapes[0][0];
            if shapes.iter().any(|s| s[0] != n || s[1] != n) {
                return Err(format!(
                    "inputs must both be square and of the same size, got {:?} and {:?}",
                    shapes[0], shapes[1]
                ));
            }
            vec![("n", n.to_string())]
        }
    })
}

fn binary_size(input: &RawInput) -> Result<Option<u64>, String> {
    match input
        .parameters
        .as_ref()
        .and_then(|p| p.get("binary_data_size"))
    {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            format!(
                "binary_data_size of input {} must be a non-negative integer",
                input.name
            )
        }),
    }
}

/// Writes the response for a call's `output` into `dst`. Returns the length of the
/// JSON part when binary output follows it (for `Inference-Header-Content-Length`),
/// `None` for a JSON-only response.
pub fn encode(model: &str, reply: &Reply, output: &[u8], dst: &mut Vec<u8>) -> Option<usize> {
    let given = match &reply.declared {
        Some(shapes) => shapes
            .outputs(output)
            .map(|(spec, shape, bytes)| (spec.name.as_str(), spec.datatype, shape, bytes))
            .collect(),
        None => {
            let shape = output_shape(reply.sig, &reply.input_shape, output.len());
            vec![(OUTPUT, reply.sig.datatype, shape, output)]
        }
    };
    let tensors = outputs::answer(&reply.requested, given, classify::top);
    outputs::write_json(model, reply.id.as_deref(), &tensors, dst)
}

/// Decodes `req` (its JSON part parsed; `binary` the bytes after it; `body_len` the
/// whole body's) for a model declaring `t`. The error is the protocol's sentence.
fn decode_declared(
    accel: &dyn Accelerator,
    t: &accel::tensors::Tensors,
    req: RawRequest,
    binary: &[u8],
    body_len: usize,
    seq: Option<Sequenced>,
) -> Result<InferCall, String> {
    let d = accel.descriptor();
    // Every element takes at least two bytes of JSON ("0,") or its own size in
    // binary: a request cannot make the node reserve more than twice its body.
    let sent = sequence::request_tensors(t, accel.sequence());
    let declared::Plan {
        parts: planned,
        batch,
        given,
    } = declared::plan(
        d,
        &sent,
        &req.inputs,
        |i: &RawInput| declared::Head {
            name: &i.name,
            datatype: &i.datatype,
            shape: &i.shape,
        },
        body_len.saturating_mul(2),
    )?;
    let parts: Vec<Part<'_>> = planned
        .iter()
        .map(|p| Part {
            input: p.input,
            datatype: p.datatype,
            count: p.count,
            bytes: p.bytes,
        })
        .collect();
    let mut payload = gather(given, &parts, binary)?;
    sequence::push_controls(accel, seq.as_ref(), batch, &mut payload)?;

    let (requested, others) =
        outputs::from_json(req.parameters.as_ref(), req.outputs.as_deref(), |name| {
            declared::check_output(d, &sent, name)
        })?;
    let others: Vec<(&str, String)> = others
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect();
    let params = declared::params(d, others.iter().map(|(k, v)| (*k, v.as_str())))?;
    let shapes = declared::Shapes::new(t, batch).hiding(sequence::hidden_outputs(accel));
    Ok(InferCall {
        params,
        payload,
        reply: declared_reply(req.id, requested, shapes, seq),
    })
}

/// Entry points for the fuzz targets and the corpus replay test.
pub mod fuzzing {
    use accel::Catalog;

    /// Decodes `data` as a request for each built-in and for a model that declares its
    /// tensors, with the first byte choosing a JSON length; answers are encoded back
    /// (the payload standing in for the output). Must never panic.
    pub fn v2_infer(data: &[u8]) {
        let Some((&first, body)) = data.split_first() else {
            return;
        };
        let json_len = (first != 0).then(|| usize::from(first) % (body.len() + 2));
        let example: std::sync::Arc<dyn accel::Accelerator> =
            std::sync::Arc::new(super::declared::example::Example::default());
        for accel in Catalog::builtin().iter().chain([&example]) {
            if let Ok(call) = super::decode(&**accel, body, json_len) {
                let mut out = Vec::new();
                super::encode("m", &call.reply, &call.payload, &mut out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel::{param_u32, Catalog};
    use serde_json::json;

    fn decode_for(model: &str, body: &[u8], json_len: Option<usize>) -> Result<InferCall, String> {
        let c = Catalog::builtin();
        decode(&**c.by_name(model).unwrap(), body, json_len)
    }

    fn json_req(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn json_tensors_become_little_endian_payloads() {
        let body = json_req(json!({
            "id": "7",
            "parameters": {"k": 2},
            "inputs": [{"name": "INPUT0", "shape": [3], "datatype": "INT32", "data": [5, -1, 9]}]
        }));
        let call = decode_for("topk", &body, None).unwrap();
        assert_eq!(param_u32(&call.params, 0), 2);
        let want: Vec<u8> = [5i32, -1, 9].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(call.payload, want);
        let out: Vec<u8> = [9i32, 5].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut dst = Vec::new();
        assert_eq!(encode("topk", &call.reply, &out, &mut dst), None);
        let v: Value = serde_json::from_slice(&dst).unwrap();
        assert_eq!(v["id"], "7");
        assert_eq!(v["outputs"][0]["shape"], json!([2]));
        assert_eq!(v["outputs"][0]["data"], json!([9, 5]));
    }

    #[test]
    fn nested_json_data_is_row_major_and_shape_gives_params() {
        let body = json_req(json!({
            "inputs": [{"name": "INPUT0", "shape": [2, 3], "datatype": "UINT8",
                        "data": [[1, 2, 3], [4, 5, 6]]}]
        }));
        let call = decode_for("sobel", &body, None).unwrap();
        assert_eq!(call.payload, [1, 2, 3, 4, 5, 6]);
        assert_eq!(param_u32(&call.params, 0), 3, "width");
        assert_eq!(param_u32(&call.params, 4), 2, "height");
        let mut dst = Vec::new();
        encode("sobel", &call.reply, &[0; 6], &mut dst);
        let v: Value = serde_json::from_slice(&dst).unwrap();
        assert_eq!(v["outputs"][0]["shape"], json!([2, 3]));
    }

    #[test]
    fn binary_inputs_follow_the_json_in_order() {
        let a: Vec<u8> = [1f32, 2., 3., 4.]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let b: Vec<u8> = [5f32, 6., 7., 8.]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        // INPUT1 listed first: binary sections follow the request's order.
        let head = json_req(json!({
            "inputs": [
                {"name": "INPUT1", "shape": [2, 2], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
                {"name": "INPUT0", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]}
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": true}}]
        }));
        let mut body = head.clone();
        body.extend_from_slice(&b);
        let call = decode_for("matmul", &body, Some(head.len())).unwrap();
        assert_eq!(call.payload, [a, b].concat());
        assert_eq!(param_u32(&call.params, 0), 2);
        let mut dst = Vec::new();
        let json_len = encode("matmul", &call.reply, &[9; 16], &mut dst).unwrap();
        let v: Value = serde_json::from_slice(&dst[..json_len]).unwrap();
        assert_eq!(v["outputs"][0]["parameters"]["binary_data_size"], 16);
        assert_eq!(&dst[json_len..], &[9; 16]);
    }

    #[test]
    fn malformed_requests_are_refused_with_a_reason() {
        let err = |model: &str, v: Value| decode_for(model, &json_req(v), None).unwrap_err();
        let one = |dt: &str, shape: Value, data: Value| json!({"inputs": [{"name": "INPUT0", "shape": shape, "datatype": dt, "data": data}]});
        assert!(err("topk", one("FP32", json!([1]), json!([1]))).contains("datatype FP32"));
        assert!(err("echo", one("UINT8", json!([3]), json!([1, 2]))).contains("3 elements"));
        assert!(err("echo", one("UINT8", json!([1]), json!([1, 2]))).contains("more data"));
        assert!(err("echo", one("UINT8", json!([2, 1]), json!([1, 2]))).contains("shape"));
        assert!(err("echo", one("UINT8", json!([-2]), json!([]))).contains("shape"));
        assert!(err("echo", one("UINT8", json!([1]), json!([256]))).contains("UINT8"));
        assert!(err("topk", one("INT32", json!([1]), json!([1]))).contains("missing required"));
        assert!(err("echo", json!({"inputs": []})).contains("takes 1 input"));
        let wrong_name =
            json!({"inputs": [{"name": "X", "shape": [0], "datatype": "UINT8", "data": []}]});
        assert!(err("echo", wrong_name).contains("INPUT0"));
        let mm = json!({"inputs": [
            {"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [1]},
            {"name": "INPUT1", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]}]});
        assert!(err("matmul", mm).contains("square"));
        let mut sobel = one("UINT8", json!([1, 2]), json!([1, 2]));
        sobel["parameters"] = json!({"width": 3});
        assert!(err("sobel", sobel).contains("shape gives 2"));
        assert!(decode_for("echo", b"{nope", None)
            .unwrap_err()
            .contains("malformed"));
        assert!(decode_for("echo", b"{}", Some(9))
            .unwrap_err()
            .contains("body has 2"));
    }

    #[test]
    fn bad_and_huge_binary_sizes_are_refused_before_allocating() {
        let req = |size: Value, shape: Value| {
            json_req(
                json!({"inputs": [{"name": "INPUT0", "shape": shape, "datatype": "FP32",
                                         "parameters": {"binary_data_size": size}}]}),
            )
        };
        let with_tail = |head: Vec<u8>, tail: &[u8]| {
            let n = head.len();
            let mut b = head;
            b.extend_from_slice(tail);
            decode_for("minmax", &b, Some(n))
        };
        let e = with_tail(req(json!(8), json!([1])), &[0; 8]).unwrap_err();
        assert!(e.contains("binary_data_size says 8"), "{e}");
        let e = with_tail(req(json!(8), json!([2])), &[0; 4]).unwrap_err();
        assert!(e.contains("only 4 follow"), "{e}");
        let e = with_tail(req(json!(4), json!([1])), &[0; 8]).unwrap_err();
        assert!(e.contains("no input's binary_data_size"), "{e}");
        let e = with_tail(req(json!(-1), json!([1])), &[0; 4]).unwrap_err();
        assert!(e.contains("non-negative"), "{e}");
        let huge = json!([i64::MAX]);
        let e = with_tail(req(json!(u64::MAX), huge), &[]).unwrap_err();
        assert!(
            e.contains("more bytes than the request carries") || e.contains("too many"),
            "{e}"
        );
        // Square matrices whose element count overflows u64, and ones that merely
        // claim far more bytes than arrived.
        for side in [1i64 << 40, 1i64 << 20] {
            let head = json_req(json!({"inputs": [
                {"name": "INPUT0", "shape": [side, side], "datatype": "FP32", "parameters": {"binary_data_size": 4}},
                {"name": "INPUT1", "shape": [side, side], "datatype": "FP32", "parameters": {"binary_data_size": 4}}]}));
            let n = head.len();
            let body = [head, vec![0; 8]].concat();
            let e = decode_for("matmul", &body, Some(n)).unwrap_err();
            assert!(
                e.contains("too many elements") || e.contains("more bytes"),
                "{e}"
            );
        }
    }

    #[test]
    fn fuzzing_entry_point_survives_hostile_input() {
        for data in [
            &b""[..],
            b"\x05{}",
            b"\x00{\"inputs\":[{}]}",
            b"\xff\xff\xff",
        ] {
            fuzzing::v2_infer(data);
        }
    }
}
