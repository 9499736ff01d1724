//! Inference requests for models that declare their own tensors (ONNX models of the
//! model repository): inputs and outputs by the model's names, each with its own
//! datatype and fixed dims, and a batch axis in front when the model has one.
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

use accel::tensors::{DataType, TensorSpec, Tensors};
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
) -> Result<(Vec<Planned<'a, I>>, usize), String> {
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
            && shape.iter().zip(&want).all(|(&s, &w)| {
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
        let count = b as usize * spec.item_elements();
        let bytes = count * spec.datatype.size();
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
    Ok((parts, batch.unwrap_or(1) as usize))
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
        let parts = self
            .tensors
            .split_outputs(self.batch, output)
            .unwrap_or_else(|_| vec![&[][..]; self.tensors.outputs.len()]);
        debug_assert_eq!(parts.len(), self.tensors.outputs.len());
        let shown = self.tensors.outputs.len() - self.hidden;
        self.tensors.outputs[..shown]
            .iter()
            .zip(parts)
            .map(move |(spec, bytes)| (spec, self.tensors.shape(spec, self.batch), bytes))
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
