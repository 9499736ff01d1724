//! How the protocol describes an ensemble (`crate::core::ensemble`): its metadata
//! and configuration are a model's, with Triton's `platform` `ensemble` and, in the
//! configuration, its `ensemble_scheduling` steps. Only these documents differ: an
//! ensemble's inferences are decoded and answered as any model's.

use accel::Accelerator;
use serde_json::{json, Value};

use crate::core::ensemble::Ensemble;
use crate::node::Node;

/// Triton's platform of an ensemble.
pub const PLATFORM: &str = "ensemble";

/// The ensemble `accel` is, if it is one.
pub(crate) fn of<'n>(node: &'n Node, accel: &dyn Accelerator) -> Option<&'n Ensemble> {
    node.dispatcher
        .ensemble(accel.descriptor().id)
        .map(|e| &**e)
}

/// `doc`, the metadata (`config` false) or configuration of `accel` as a model's,
/// described as an ensemble's when `accel` is one; otherwise as it is.
pub(crate) fn described(
    node: &Node,
    accel: &dyn Accelerator,
    doc: Vec<u8>,
    config: bool,
) -> Vec<u8> {
    let Some(ensemble) = of(node, accel) else {
        return doc;
    };
    let mut value: Value = serde_json::from_slice(&doc).expect("the node's own JSON");
    value["platform"] = json!(PLATFORM);
    if config {
        let obj = value.as_object_mut().expect("a configuration is an object");
        // Its steps' models have the engines and instances.
        obj.remove("instance_group");
        obj.insert("backend".into(), json!(""));
        obj.insert("ensemble_scheduling".into(), scheduling(ensemble));
    }
    serde_json::to_vec(&value).expect("serialising JSON cannot fail")
}

/// `ensemble_scheduling` as Triton's configuration gives it.
fn scheduling(ensemble: &Ensemble) -> Value {
    let map = |pairs: &[(String, String)]| -> Value {
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let steps: Vec<Value> = ensemble
        .scheduling()
        .iter()
        .map(|s| {
            json!({
                "model_name": s.model_name,
                "model_version": -1,
                "input_map": map(&s.input_map),
                "output_map": map(&s.output_map),
            })
        })
        .collect();
    json!({ "step": steps })
}
