//! Inference requests for models that declare their own tensors (ONNX models of the
//! model repository): inputs and outputs by the model's names, each with its own
//! datatype and dims, and a batch axis in front when the model has one. A dim declared
//! `-1` beyond the batch axis is given by each request: its value leads the payload,
//! and the output's lead the output (`accel::tensors`, given dims).
//!
//! The payload a request becomes is the one `/v1/fn` and RAC carry (see
//! `accel::tensors`): each input whole, in declared order, whatever order the request
//! lists them in. The response lists every output, sliced from the call's output in
//! declared order, with the batch the request sent.
//!
//! This is the one home of those rules for every encoding: [`plan`], [`check_output`],
//! [`params`] and [`Shapes::outputs`] know nothing of JSON, and the gRPC front end
//! (`crate::front::grpc::tensor`) reads its protobuf messages through them, as the
//! HTTP binding's JSON does (`infer.rs`: `decode_declared`, `encode_declared`).

use accel::tensors::{push_given_dims, DataType, TensorSpec, Tensors, GIVEN_DIM_MAX};
use accel::{params_from_pairs, Descriptor, ParamBlock};

/// A declared model's tensors and the batch of one request.
#[derive(Debug)]
pub struct Shapes {
    pub(super) tensors: Tensors,
    batch: usize,
    /// The last outputs, which the node keeps (a stateful model's state outputs).
    hidden: usize,
}

/// One input of a request matched to the model's declaration: the request's input
/// (whatever its encoding), the declared element type, and the elements and bytes its
/// shape says.
pub(crate) struct Planned<'a, I> {
    pub(crate) input: &'a I,
    pub(crate) datatype: DataType,
    pub(crate) count: usize,
    pub(crate) bytes: usize,
}

/// What every encoding of a request (v2 JSON/binary, gRPC) reads of an input.
pub(crate) struct Head<'a> {
    pub(crate) name: &'a str,
    pub(crate) datatype: &'a str,
    pub(crate) shape: &'a [i64],
}

/// A request's inputs as planned: each in declared order, the batch, and the payload's
/// start — the given dims of the inputs, empty for a model without (see the module
/// docs). The inputs' bytes follow it.
pub(crate) struct Plan<'a, I> {
    pub(crate) parts: Vec<Planned<'a, I>>,
    pub(crate) batch: usize,
    pub(crate) given: Vec<u8>,
}

/// The request's `inputs` (read through `head`) in the model's declared order, each
/// checked against its declaration (datatype, dims, the batch axis agreed by all), and
/// the batch. `carried` bounds what the inputs may claim: an input needing more bytes
/// than that is refused before anything is allocated.
pub(crate) fn plan<'a, I>(
    d: &Descriptor,
    t: &Tensors,
    inputs: &'a [I],
    head: impl Fn(&'a I) -> Head<'a>,
    carried: usize,
) -> Result<Plan<'a, I>, String> {
    let names: Vec<&str> = t.inputs.iter().map(|s| s.name.as_str()).collect();
    if inputs.len() != names.len() {
        return Err(format!(
            "model {} takes {} input(s) ({}), the request has {}",
            d.name,
            names.len(),
            names.join(", "),
            inputs.len()
        ));
    }
    let mut batch: Option<u64> = None;
    let mut parts = Vec::with_capacity(names.len());
    let lead = usize::from(t.max_batch_size > 0);
    let mut items: Vec<Vec<u64>> = Vec::with_capacity(names.len());
    for spec in &t.inputs {
        let mut found = inputs.iter().filter(|i| head(i).name == spec.name);
        let input = match (found.next(), found.next()) {
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
        let Head {
            name,
            datatype,
            shape,
        } = head(input);
        if datatype != spec.datatype.name() {
            return Err(super::elements::wrong_datatype(
                &d.name,
                name,
                datatype,
                spec.datatype,
            ));
        }
        let want = t.declared_shape(spec);
        let max = i64::from(t.max_batch_size);
        let fits = shape.len() == want.len()
            && shape
                .iter()
                .zip(&want)
                .enumerate()
                .all(|(axis, (&s, &w))| match w {
                    -1 if axis < lead => (1..=max).contains(&s),
                    -1 => (1..=GIVEN_DIM_MAX as i64).contains(&s),
                    w => s == w,
                });
        if !fits {
            let batch_note = match (t.max_batch_size > 0, spec.given_dims() > 0) {
                (true, false) => format!(" (-1: the batch, 1 to {})", t.max_batch_size),
                (true, true) => {
                    format!(" (-1: the batch, 1 to {}, then any size)", t.max_batch_size)
                }
                (false, true) => " (-1: any size)".to_string(),
                (false, false) => String::new(),
            };
            return Err(format!(
                "input {name} has shape {shape:?}; model {} takes shape {want:?}{batch_note}",
                d.name
            ));
        }
        let b = if t.max_batch_size > 0 {
            shape[0] as u64
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
        // The shape fits: every dim is positive and at most GIVEN_DIM_MAX.
        let item: Vec<u64> = shape[lead..].iter().map(|&s| s as u64).collect();
        let count = item
            .iter()
            .try_fold(b as usize, |n, &s| n.checked_mul(s as usize))
            .unwrap_or(usize::MAX);
        items.push(item);
        let bytes = count.saturating_mul(spec.datatype.size());
        if bytes > carried {
            return Err(format!(
                "input {name} of shape {shape:?} needs more bytes than the request carries"
            ));
        }
        parts.push(Planned {
            input,
            datatype: spec.datatype,
            count,
            bytes,
        });
    }
    let mut given = Vec::new();
    push_given_dims(&t.inputs, items.iter().map(Vec::as_slice), &mut given)?;
    debug_assert_eq!(
        given.is_empty(),
        t.inputs.iter().all(|s| s.given_dims() == 0)
    );
    Ok(Plan {
        parts,
        batch: batch.unwrap_or(1) as usize,
        given,
    })
}

/// Refuses a requested output the model does not declare.
pub(crate) fn check_output(d: &Descriptor, t: &Tensors, name: &str) -> Result<(), String> {
    if t.outputs.iter().any(|s| s.name == name) {
        return Ok(());
    }
    let names: Vec<&str> = t.outputs.iter().map(|s| s.name.as_str()).collect();
    Err(format!(
        "model {} has no output {name}; its outputs are {}",
        d.name,
        names.join(", ")
    ))
}

/// The call's parameter block: a model takes no parameters, so any request parameter
/// is refused with the usual sentence.
pub(crate) fn params<'a>(
    d: &Descriptor,
    pairs: impl Iterator<Item = (&'a str, &'a str)>,
) -> Result<ParamBlock, String> {
    params_from_pairs(&d.params, pairs).map_err(|e| e.to_string())
}

impl Shapes {
    pub(crate) fn new(t: &Tensors, batch: usize) -> Shapes {
        Shapes {
            tensors: t.clone(),
            batch,
            hidden: 0,
        }
    }

    /// The shapes, answering all but the last `hidden` outputs.
    pub(crate) fn hiding(mut self, hidden: usize) -> Shapes {
        debug_assert!(hidden < self.tensors.outputs.len());
        self.hidden = hidden;
        self
    }

    /// Every output of a call's `output`, in declared order: its declaration, its
    /// shape for this batch, and its bytes. The session checked every output's size;
    /// an output that is not what the model declares (only a broken engine gives one)
    /// gives empty tensors rather than a panic.
    pub(crate) fn outputs<'o>(
        &'o self,
        output: &'o [u8],
    ) -> impl Iterator<Item = (&'o TensorSpec, Vec<u64>, &'o [u8])> + 'o {
        let t = &self.tensors;
        let n = t.outputs.len();
        // With given dims the output says them first: the shapes are this call's.
        let given = t.gives_dims().then(|| t.given_outputs(output));
        let (shapes, parts) = match given {
            None => {
                let shapes = t.outputs.iter().map(|s| t.shape(s, self.batch)).collect();
                (shapes, t.split_outputs(self.batch, output))
            }
            Some(Ok((given, rest))) => {
                let shapes = given.outputs.iter().map(|s| given.shape(s, self.batch));
                (shapes.collect(), given.split_outputs(self.batch, rest))
            }
            Some(Err(e)) => (vec![Vec::new(); n], Err(e.to_string())),
        };
        let parts = parts.unwrap_or_else(|_| vec![&[][..]; n]);
        debug_assert_eq!(parts.len(), n);
        let shown = n - self.hidden;
        t.outputs[..shown]
            .iter()
            .zip(shapes)
            .zip(parts)
            .map(|((spec, shape), bytes)| (spec, shape, bytes))
    }
}

/// A model declaring two inputs and two outputs of different types with a batch axis
/// of up to 4: what the fuzz target and the tests decode requests for (it echoes
/// nothing; only its declaration matters here).
pub mod example {
    use accel::tensors::{DataType, TensorSpec, Tensors};
    use accel::{Accelerator, CallError, Descriptor, ParamBlock};

    pub struct Example {
        descriptor: Descriptor,
        tensors: Tensors,
    }

    impl Default for Example {
        fn default() -> Example {
            let t = |name: &str, datatype, dims: &[u64]| TensorSpec {
                name: name.into(),
                datatype,
                dims: dims.to_vec(),
            };
            Example {
                descriptor: Descriptor {
                    id: 900,
                    name: "example".into(),
                    hash: String::new(),
                    params: Vec::new(),
                },
                tensors: Tensors {
                    inputs: vec![
                        t("bytes", DataType::Uint8, &[3]),
                        t("floats", DataType::Fp32, &[2]),
                    ],
                    outputs: vec![
                        t("class", DataType::Int32, &[1]),
                        t("scores", DataType::Fp32, &[2]),
                    ],
                    max_batch_size: 4,
                },
            }
        }
    }

    impl Example {
        /// A model whose calls give dims: `text` BYTES `[-1]` and `grid` INT32
        /// `[-1, 2]` in, `echo` BYTES `[-1]` out, a batch axis of up to 4.
        pub fn given() -> Example {
            let t = |name: &str, datatype, dims: &[u64]| TensorSpec {
                name: name.into(),
                datatype,
                dims: dims.to_vec(),
            };
            let any = accel::tensors::ANY_DIM;
            let mut e = Example::default();
            e.descriptor.name = "given".into();
            e.tensors = Tensors {
                inputs: vec![
                    t("text", DataType::Bytes, &[any]),
                    t("grid", DataType::Int32, &[any, 2]),
                ],
                outputs: vec![t("echo", DataType::Bytes, &[any])],
                max_batch_size: 4,
            };
            e
        }
    }

    impl Accelerator for Example {
        fn descriptor(&self) -> &Descriptor {
            &self.descriptor
        }
        fn check(&self, _: &ParamBlock, len: Option<usize>) -> Result<(), CallError> {
            len.map_or(Ok(()), |l| self.tensors.batch_of(l).map(|_| ()))
        }
        fn work_estimate(&self, _: &ParamBlock, len: usize) -> u64 {
            len as u64
        }
        fn run(&self, _: &ParamBlock, _: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
            out.clear();
            Ok(())
        }
        fn tensors(&self) -> Option<&Tensors> {
            Some(&self.tensors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::example::Example;
    use crate::front::oip::infer::{decode, encode};
    use serde_json::{json, Value};

    fn req(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn inputs_become_the_payload_in_declared_order_and_outputs_are_sliced() {
        let m = Example::default();
        // floats first in the request, in binary; bytes as JSON: a batch of 2.
        let head = req(json!({
            "id": "x",
            "inputs": [
                {"name": "floats", "shape": [2, 2], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
                {"name": "bytes", "shape": [2, 3], "datatype": "UINT8", "data": [[1, 2, 3], [4, 5, 6]]}
            ]
        }));
        let mut body = head.clone();
        body.extend_from_slice(&f32s(&[0.5, 1.5, 2.5, 3.5]));
        let call = decode(&m, &body, Some(head.len())).unwrap();
        let mut want = vec![1, 2, 3, 4, 5, 6];
        want.extend_from_slice(&f32s(&[0.5, 1.5, 2.5, 3.5]));
        assert_eq!(call.payload, want);
        // Output: class (INT32 [2, 1]) then scores (FP32 [2, 2]).
        let mut out: Vec<u8> = [7i32, 9].iter().flat_map(|v| v.to_le_bytes()).collect();
        out.extend_from_slice(&f32s(&[0.25, 0.75, 1.0, 0.0]));
        let mut dst = Vec::new();
        assert_eq!(encode("example", &call.reply, &out, &mut dst), None);
        let v: Value = serde_json::from_slice(&dst).unwrap();
        assert_eq!(v["id"], "x");
        assert_eq!(v["outputs"][0]["name"], "class");
        assert_eq!(v["outputs"][0]["shape"], json!([2, 1]));
        assert_eq!(v["outputs"][0]["data"], json!([7, 9]));
        assert_eq!(v["outputs"][1]["shape"], json!([2, 2]));
        assert_eq!(v["outputs"][1]["data"], json!([0.25, 0.75, 1.0, 0.0]));
    }

    #[test]
    fn binary_output_follows_the_json_in_declared_order() {
        let m = Example::default();
        // Every output (none named), binary by the request's default.
        let body = req(json!({
            "inputs": [
                {"name": "bytes", "shape": [1, 3], "datatype": "UINT8", "data": [1, 2, 3]},
                {"name": "floats", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}
            ],
            "parameters": {"binary_data_output": true}
        }));
        let call = decode(&m, &body, None).unwrap();
        let out: Vec<u8> = (0..12).collect();
        let mut dst = Vec::new();
        let n = encode("example", &call.reply, &out, &mut dst).unwrap();
        let v: Value = serde_json::from_slice(&dst[..n]).unwrap();
        assert_eq!(v["outputs"][0]["parameters"]["binary_data_size"], 4);
        assert_eq!(v["outputs"][1]["parameters"]["binary_data_size"], 8);
        assert_eq!(&dst[n..], &out[..]);
    }

    #[test]
    fn each_output_has_its_own_binary_data_and_only_requested_outputs_are_answered() {
        let m = Example::default();
        let inputs = json!([
            {"name": "bytes", "shape": [1, 3], "datatype": "UINT8", "data": [1, 2, 3]},
            {"name": "floats", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}
        ]);
        let mut out: Vec<u8> = 7i32.to_le_bytes().to_vec();
        out.extend_from_slice(&f32s(&[0.5, 1.5]));
        // The last output binary, the first JSON: before, the last one's flag ruled all.
        let body = req(json!({"inputs": inputs, "outputs": [
            {"name": "scores", "parameters": {"binary_data": true}},
            {"name": "class", "parameters": {"binary_data": false}}
        ]}));
        let call = decode(&m, &body, None).unwrap();
        let mut dst = Vec::new();
        let n = encode("example", &call.reply, &out, &mut dst).unwrap();
        let v: Value = serde_json::from_slice(&dst[..n]).unwrap();
        assert_eq!(v["outputs"][0]["name"], "scores");
        assert_eq!(v["outputs"][0]["parameters"]["binary_data_size"], 8);
        assert_eq!(v["outputs"][1]["data"], json!([7]));
        assert_eq!(&dst[n..], &f32s(&[0.5, 1.5])[..]);
        // One output asked for: only it, in the default encoding binary_data_output gives.
        let body = req(
            json!({"inputs": inputs, "parameters": {"binary_data_output": true},
            "outputs": [{"name": "class"}]}),
        );
        let call = decode(&m, &body, None).unwrap();
        let mut dst = Vec::new();
        let n = encode("example", &call.reply, &out, &mut dst).unwrap();
        let v: Value = serde_json::from_slice(&dst[..n]).unwrap();
        assert_eq!(v["outputs"].as_array().unwrap().len(), 1);
        assert_eq!(v["outputs"][0]["parameters"]["binary_data_size"], 4);
        assert_eq!(&dst[n..], &7i32.to_le_bytes()[..]);
    }

    #[test]
    fn dims_a_request_gives_lead_its_payload_and_the_outputs_shape_is_the_runs() {
        let m = Example::given();
        let body = req(json!({"inputs": [
            {"name": "grid", "shape": [2, 3, 2], "datatype": "INT32", "data": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]},
            {"name": "text", "shape": [2, 1], "datatype": "BYTES", "data": ["a", "bc"]}
        ]}));
        let call = decode(&m, &body, None).unwrap();
        // text's given dim (1), grid's (3), then the elements in declared order.
        let mut want: Vec<u8> = [1u32, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        for s in [&b"a"[..], b"bc"] {
            accel::tensors::push_bytes_element(s, &mut want);
        }
        want.extend((0..12i32).flat_map(|v| v.to_le_bytes()));
        assert_eq!(call.payload, want);
        // The run's output gives its own width: 2 strings an item.
        let mut out = 2u32.to_le_bytes().to_vec();
        for s in [&b"w"[..], b"x", b"y", b"z"] {
            accel::tensors::push_bytes_element(s, &mut out);
        }
        let mut dst = Vec::new();
        assert_eq!(encode("given", &call.reply, &out, &mut dst), None);
        let v: Value = serde_json::from_slice(&dst).unwrap();
        assert_eq!(v["outputs"][0]["shape"], json!([2, 2]));
        assert_eq!(v["outputs"][0]["data"], json!(["w", "x", "y", "z"]));
        // A fixed dim is still checked, and a given one is positive.
        let bad = |grid_shape: Value, n: usize| {
            let body = req(json!({"inputs": [
                {"name": "grid", "shape": grid_shape, "datatype": "INT32", "data": vec![1; n]},
                {"name": "text", "shape": [1, 1], "datatype": "BYTES", "data": ["a"]}
            ]}));
            decode(&m, &body, None).unwrap_err()
        };
        let e = bad(json!([1, 3, 3]), 9);
        assert!(
            e.contains("takes shape [-1, -1, 2]") && e.contains("then any size"),
            "{e}"
        );
        assert!(bad(json!([1, 0, 2]), 0).contains("takes shape"));
    }

    #[test]
    fn requests_that_do_not_fit_the_declaration_are_refused() {
        let m = Example::default();
        let two = |bytes_shape: Value, floats_shape: Value, n_bytes: usize, n_floats: usize| {
            req(json!({"inputs": [
                {"name": "bytes", "shape": bytes_shape, "datatype": "UINT8", "data": vec![1; n_bytes]},
                {"name": "floats", "shape": floats_shape, "datatype": "FP32", "data": vec![1; n_floats]}
            ]}))
        };
        let err = |body: Vec<u8>| decode(&m, &body, None).unwrap_err();
        assert!(err(two(json!([1, 3]), json!([2, 2]), 3, 4)).contains("disagree on the batch"));
        assert!(err(two(json!([5, 3]), json!([5, 2]), 15, 10)).contains("1 to 4"));
        assert!(err(two(json!([0, 3]), json!([0, 2]), 0, 0)).contains("takes shape"));
        assert!(err(two(json!([3]), json!([2]), 3, 2)).contains("takes shape [-1, 3]"));
        assert!(err(two(json!([1, 4]), json!([1, 2]), 4, 2)).contains("takes shape"));
        assert!(err(two(json!([1, 3]), json!([1, 2]), 2, 2)).contains("2 data elements"));
        let one = req(
            json!({"inputs": [{"name": "bytes", "shape": [1, 3], "datatype": "UINT8", "data": [1, 2, 3]}]}),
        );
        assert!(err(one).contains("takes 2 input(s) (bytes, floats)"));
        let mut with_param: Value =
            serde_json::from_slice(&two(json!([1, 3]), json!([1, 2]), 3, 2)).unwrap();
        with_param["parameters"] = json!({"k": 3});
        assert!(err(req(with_param)).contains("takes none"));
        let mut bad_output: Value =
            serde_json::from_slice(&two(json!([1, 3]), json!([1, 2]), 3, 2)).unwrap();
        bad_output["outputs"] = json!([{"name": "OUTPUT0"}]);
        assert!(err(req(bad_output)).contains("its outputs are class, scores"));
        // A binary size that claims far more than the body: refused before allocating.
        let huge = req(json!({"inputs": [
            {"name": "bytes", "shape": [4, 3], "datatype": "UINT8", "parameters": {"binary_data_size": 12}},
            {"name": "floats", "shape": [4, 2], "datatype": "FP32", "parameters": {"binary_data_size": 32}}
        ]}));
        let n = huge.len();
        let e = decode(&m, &huge, Some(n)).unwrap_err();
        assert!(
            e.contains("binary bytes") || e.contains("more bytes"),
            "{e}"
        );
    }
}
