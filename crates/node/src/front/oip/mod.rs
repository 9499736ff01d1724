//! The Open Inference Protocol v2 (KServe v2, the protocol of Triton) on the node's
//! HTTP port, so that clients people already run (`tritonclient`, KServe's SDK) can
//! call netaccel accelerators as models.
//!
//! Every accelerator in the catalog is a model of the same name, version `1`. This
//! module owns the one mapping from an accelerator to tensors: a built-in's
//! ([`Signature`]: the datatypes and shapes it declares, and which of its parameters a
//! tensor's shape gives), or the tensors a model declares itself (an ONNX model of the
//! model repository: [`accel::tensors::Tensors`], with a batch axis when it has one;
//! [`declared`]). The parameters themselves (names, types, defaults) stay where they
//! live, in the accelerator's descriptor; v2 requests carry them as request
//! `parameters`.
//!
//! Everything here is pure: [`infer`] turns request bytes into a parameter block and a
//! payload, and an output into response bytes. The connection (`conn`) reads the body
//! and sends the call down the same admission, deadline, tenant and metrics path as
//! `/v1/fn`.

pub(crate) mod classify;
pub mod declared;
pub(crate) mod elements;
pub(crate) mod ensemble;
pub mod infer;
pub mod outputs;
pub mod repository;
pub mod sequence;
pub mod shm;
pub mod stats;

use accel::tensors::{dim_i64, Tensors};
use accel::{Accelerator, Descriptor, ParamValue};
use serde_json::{json, Value};

use crate::node::Node;

/// The only model version: an accelerator has one image per name.
pub const VERSION: &str = "1";

/// The error for a model the node does not have, in Triton's words (its clients match
/// on "Request for unknown model").
pub fn unknown_model(name: &str) -> String {
    format!("Request for unknown model: '{name}' is not found")
}

/// The error for a version of a model the node does not have, in Triton's words, with
/// the version there is.
pub fn unknown_version(name: &str, version: &str) -> String {
    format!(
        "Request for unknown model: '{name}' version {version} is not found (its only version \
         is {VERSION})"
    )
}

/// A tensor element type of the protocol that some model uses (one home: `accel`,
/// where models declare their tensors).
pub use accel::tensors::DataType;

/// How a model's tensors are shaped, and which parameters the shape gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One input of shape `[-1]`; the output is `[-1]` too.
    Flat,
    /// One row-major image `[height, width]`; the shape gives the `height` and `width`
    /// parameters, and the output has the input's shape.
    Image,
    /// Two square matrices `[n, n]`, sent as one payload (the first, then the second);
    /// the shape gives `n`, and the output is `[n, n]`.
    SquarePair,
}

/// The tensors of one model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signature {
    pub datatype: DataType,
    pub layout: Layout,
}

/// Input tensor names, in payload order.
pub const INPUTS_ONE: &[&str] = &["INPUT0"];
pub const INPUTS_TWO: &[&str] = &["INPUT0", "INPUT1"];
/// The one output tensor of every model.
pub const OUTPUT: &str = "OUTPUT0";

impl Signature {
    /// The signature of a catalog accelerator. The built-ins get the types of their
    /// payloads (`docs/accelerators.md`); any other accelerator is bytes in, bytes out.
    pub fn of(descriptor: &Descriptor) -> Signature {
        let (datatype, layout) = match descriptor.name.as_str() {
            "topk" => (DataType::Int32, Layout::Flat),
            "logit" | "minmax" => (DataType::Fp32, Layout::Flat),
            "sobel" => (DataType::Uint8, Layout::Image),
            "matmul" => (DataType::Fp32, Layout::SquarePair),
            _ => (DataType::Uint8, Layout::Flat),
        };
        Signature { datatype, layout }
    }

    pub fn inputs(self) -> &'static [&'static str] {
        match self.layout {
            Layout::SquarePair => INPUTS_TWO,
            Layout::Flat | Layout::Image => INPUTS_ONE,
        }
    }

    /// The declared shape of each input and of the output (`-1`: any size).
    pub fn shape(self) -> &'static [i64] {
        match self.layout {
            Layout::Flat => &[-1],
            Layout::Image | Layout::SquarePair => &[-1, -1],
        }
    }

    /// Names of the parameters the input shape gives; a request need not send them.
    pub fn shape_params(self) -> &'static [&'static str] {
        match self.layout {
            Layout::Flat => &[],
            Layout::Image => &["height", "width"],
            Layout::SquarePair => &["n"],
        }
    }
}

fn tensors(sig: Signature, names: &[&str], key: &str, datatype: &str) -> Vec<Value> {
    names
        .iter()
        .map(|name| json!({ "name": name, key: datatype, "shape": sig.shape() }))
        .collect()
}

/// The protocol's extensions the node serves, as `GET /v2` and gRPC `ServerMetadata`
/// list them.
pub const EXTENSIONS: &[&str] = &[
    "binary_tensor_data",
    "model_configuration",
    "model_repository",
    "statistics",
    "system_shared_memory",
];

/// `GET /v2`: server metadata.
pub fn server_metadata() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "name": "netaccel",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": EXTENSIONS,
    }))
    .expect("serialising JSON cannot fail")
}

/// The parameters a request may send (from the descriptor: the one home of params).
fn params_json(accel: &dyn Accelerator) -> Vec<Value> {
    accel
        .descriptor()
        .params
        .iter()
        .map(|p| {
            let default = match p.default {
                Some(ParamValue::U8(v)) => json!(v),
                Some(ParamValue::U16(v)) => json!(v),
                Some(ParamValue::U32(v)) => json!(v),
                Some(ParamValue::I32(v)) => json!(v),
                Some(ParamValue::U64(v)) => json!(v),
                Some(ParamValue::F32(v)) => json!(v),
                None => Value::Null,
            };
            json!({ "name": p.name, "type": p.ty.as_str(), "default": default })
        })
        .collect()
}

/// `GET /v2/models/{m}`: model metadata.
pub fn model_metadata(accel: &dyn Accelerator) -> Vec<u8> {
    let d = accel.descriptor();
    if let Some(t) = accel.tensors() {
        // A stateful model's control inputs are the node's to fill, not inputs.
        let sent = sequence::request_tensors(t, accel.sequence());
        let t = &*sent;
        return serde_json::to_vec(&json!({
            "name": d.name,
            "versions": [VERSION],
            "platform": "onnx",
            "inputs": declared_tensors(t, &t.inputs, "datatype", false),
            "outputs": declared_tensors(t, &t.outputs, "datatype", false),
            "netaccel": { "params": [], "shape_params": [], "max_batch_size": t.max_batch_size },
        }))
        .expect("serialising JSON cannot fail");
    }
    let sig = Signature::of(d);
    let dt = sig.datatype.name();
    serde_json::to_vec(&json!({
        "name": d.name,
        "versions": [VERSION],
        "platform": "netaccel",
        "inputs": tensors(sig, sig.inputs(), "datatype", dt),
        "outputs": tensors(sig, &[OUTPUT], "datatype", dt),
        // The protocol's `parameters` hold scalars only; netaccel's list goes apart.
        "netaccel": { "params": params_json(accel), "shape_params": sig.shape_params() },
    }))
    .expect("serialising JSON cannot fail")
}

/// `GET /v2/models/{m}/config`: Triton's model configuration, the fields clients and
/// `perf_analyzer` read. `max_batch_size` 0: shapes are given whole, no batch axis.
pub fn model_config(accel: &dyn Accelerator) -> Vec<u8> {
    let d = accel.descriptor();
    if let Some(t) = accel.tensors() {
        let sent = sequence::request_tensors(t, accel.sequence());
        let t = &*sent;
        // Triton's dims leave out the batch axis when max_batch_size is above 0.
        let mut config = json!({
            "name": d.name,
            "platform": "onnx",
            "backend": accel.engine().unwrap_or("netaccel"),
            "version_policy": { "latest": { "num_versions": 1 } },
            "max_batch_size": t.max_batch_size,
            "input": configured(accel, declared_tensors(t, &t.inputs, "data_type", true)),
            "output": configured(accel, declared_tensors(t, &t.outputs, "data_type", true)),
            "instance_group": [{ "kind": "KIND_CPU", "count": 1 }],
        });
        if let Some(policy) = accel.sequence() {
            config["sequence_batching"] = sequence::config_json(policy);
        }
        return serde_json::to_vec(&config).expect("serialising JSON cannot fail");
    }
    let sig = Signature::of(d);
    let dt = sig.datatype.config_name();
    serde_json::to_vec(&json!({
        "name": d.name,
        "platform": "netaccel",
        "backend": "netaccel",
        "version_policy": { "latest": { "num_versions": 1 } },
        "max_batch_size": 0,
        "input": tensors(sig, sig.inputs(), "data_type", dt)
            .into_iter()
            .map(rename_shape_to_dims)
            .collect::<Vec<_>>(),
        "output": tensors(sig, &[OUTPUT], "data_type", dt)
            .into_iter()
            .map(rename_shape_to_dims)
            .collect::<Vec<_>>(),
        "instance_group": [{ "kind": "KIND_CPU", "count": 1 }],
    }))
    .expect("serialising JSON cannot fail")
}

/// A declared model's tensors: for metadata (`datatype`, the whole `shape` with `-1`
/// for the batch axis) or for its configuration (`data_type`, Triton's `dims`).
fn declared_tensors(
    t: &Tensors,
    specs: &[accel::tensors::TensorSpec],
    key: &str,
    config: bool,
) -> Vec<Value> {
    specs
        .iter()
        .map(|s| {
            if config {
                let dims: Vec<i64> = s.dims.iter().map(|&d| dim_i64(d)).collect();
                json!({ "name": s.name, key: s.datatype.config_name(), "dims": dims })
            } else {
                json!({ "name": s.name, key: s.datatype.name(), "shape": t.declared_shape(s) })
            }
        })
        .collect()
}

/// A model's configured tensors with what its config says beyond type and dims:
/// an input's `format`, an output's `label_filename` (as Triton's `/config` lists them).
fn configured(accel: &dyn Accelerator, mut tensors: Vec<Value>) -> Vec<Value> {
    for tensor in &mut tensors {
        let name = tensor["name"].as_str().unwrap_or_default().to_string();
        let config = accel.tensor_config(&name);
        let obj = tensor.as_object_mut().expect("a tensor is an object");
        if let Some(format) = config.format {
            obj.insert("format".into(), Value::from(format));
        }
        if let Some(file) = config.label_filename {
            obj.insert("label_filename".into(), Value::from(file));
        }
    }
    tensors
}

fn rename_shape_to_dims(mut tensor: Value) -> Value {
    if let Some(obj) = tensor.as_object_mut() {
        if let Some(shape) = obj.remove("shape") {
            obj.insert("dims".to_string(), shape);
        }
    }
    tensor
}

/// `{"live": true}` / `{"ready": …}` bodies of the health routes.
pub fn flag(name: &str, value: bool) -> Vec<u8> {
    serde_json::to_vec(&json!({ name: value })).expect("serialising JSON cannot fail")
}

/// Whether the node can run a call now: some slot hosts an accelerator.
pub(crate) fn node_ready(node: &Node) -> bool {
    node.dispatcher
        .catalog()
        .iter()
        .any(|a| !node.dispatcher.slots_hosting(a.descriptor().id).is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel::Catalog;

    #[test]
    fn builtins_declare_the_types_of_their_payloads() {
        let c = Catalog::builtin();
        let sig = |n: &str| Signature::of(c.by_name(n).unwrap().descriptor());
        assert_eq!(sig("topk").datatype, DataType::Int32);
        assert_eq!(sig("sobel").layout, Layout::Image);
        assert_eq!(sig("matmul").inputs(), INPUTS_TWO);
        assert_eq!(sig("echo").datatype, DataType::Uint8);
        // Every shape-given parameter is a parameter of the accelerator.
        for a in c.iter() {
            let d = a.descriptor();
            for p in Signature::of(d).shape_params() {
                assert!(d.params.iter().any(|s| s.name == *p), "{} {p}", d.name);
            }
        }
    }

    #[test]
    fn metadata_and_config_list_tensors() {
        let c = Catalog::builtin();
        let m: Value =
            serde_json::from_slice(&model_metadata(&**c.by_name("matmul").unwrap())).unwrap();
        assert_eq!(m["inputs"].as_array().unwrap().len(), 2);
        assert_eq!(m["outputs"][0]["datatype"], "FP32");
        assert_eq!(m["outputs"][0]["shape"], json!([-1, -1]));
        let cfg: Value =
            serde_json::from_slice(&model_config(&**c.by_name("topk").unwrap())).unwrap();
        assert_eq!(cfg["input"][0]["data_type"], "TYPE_INT32");
        assert_eq!(cfg["input"][0]["dims"], json!([-1]));
        assert_eq!(cfg["max_batch_size"], 0);
    }
}
