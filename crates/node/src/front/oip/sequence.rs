//! A request's place in a sequence (the `sequence_id`, `sequence_start` and
//! `sequence_end` request parameters Triton's clients send) and what it changes in
//! decoding a call of a stateful model: the request sends the model's own inputs, the
//! node appends the control inputs (`accel::sequence`), and the call carries its
//! [`Sequenced`] to the sequence table (`crate::core::sequence`), which routes it.
//!
//! The rules here are the same for every encoding: HTTP's JSON `parameters` are read
//! by [`from_json`], gRPC's `InferParameter`s by the gRPC front end into [`Given`];
//! [`check`] decides, [`request_tensors`] and [`push_controls`] shape the payload.

use std::borrow::Cow;

use accel::sequence::{ControlKind, Policy, Strategy};
use accel::tensors::Tensors;
use accel::Accelerator;
use serde_json::{Map, Value};

use crate::core::sequence::{CorrelationId, Sequenced, ID_TEXT_BYTES_MAX};

/// The request parameters that place a call in a sequence.
pub const KEYS: [&str; 3] = ["sequence_id", "sequence_start", "sequence_end"];

/// What a request said of its sequence, before it is checked against the model.
#[derive(Debug, Default)]
pub(crate) struct Given {
    /// `None`, 0 and "": no sequence.
    pub(crate) id: Option<CorrelationId>,
    pub(crate) start: bool,
    pub(crate) end: bool,
}

/// Takes the sequence parameters out of a JSON request's `parameters` (what is left
/// goes on as the model's own parameters).
pub(crate) fn from_json(params: &mut Option<Map<String, Value>>) -> Result<Given, String> {
    let Some(map) = params.as_mut() else {
        return Ok(Given::default());
    };
    let id = match map.remove(KEYS[0]) {
        None => None,
        Some(Value::Number(n)) => Some(CorrelationId::Number(n.as_u64().ok_or_else(|| {
            format!("sequence_id {n} is not an unsigned 64-bit integer or a string")
        })?)),
        Some(Value::String(s)) => Some(CorrelationId::Text(s)),
        Some(_) => return Err("sequence_id must be an unsigned integer or a string".into()),
    };
    let flag = |map: &mut Map<String, Value>, key: &str| match map.remove(key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(b),
        Some(_) => Err(format!("{key} must be true or false")),
    };
    let start = flag(map, KEYS[1])?;
    let end = flag(map, KEYS[2])?;
    Ok(Given { id, start, end })
}

/// The call's place in its sequence for `accel`, or why the request does not fit the
/// model: a stateful model's calls need an id, other models' calls take none.
pub(crate) fn check(accel: &dyn Accelerator, given: Given) -> Result<Option<Sequenced>, String> {
    let name = &accel.descriptor().name;
    let id = given.id.filter(|id| match id {
        CorrelationId::Number(n) => *n != 0,
        CorrelationId::Text(s) => !s.is_empty(),
    });
    let Some(policy) = accel.sequence() else {
        if id.is_some() || given.start || given.end {
            return Err(format!(
                "model '{name}' is not a sequence model (it has no sequence_batching): \
                 its requests take no sequence_id, sequence_start or sequence_end"
            ));
        }
        return Ok(None);
    };
    let Some(id) = id else {
        return Err(format!(
            "inference request to model '{name}' must specify a non-zero or non-empty \
             correlation ID"
        ));
    };
    if let CorrelationId::Text(text) = &id {
        if text.len() > ID_TEXT_BYTES_MAX {
            return Err(format!(
                "sequence_id is {} bytes, at most {ID_TEXT_BYTES_MAX}",
                text.len()
            ));
        }
        if policy
            .controls
            .iter()
            .any(|c| c.kind == ControlKind::CorrId)
        {
            return Err(format!(
                "model '{name}' takes its correlation ID as a number (its CORRID control): \
                 sequence_id must be an unsigned integer"
            ));
        }
    }
    Ok(Some(Sequenced {
        id,
        start: given.start,
        end: given.end,
    }))
}

/// The inputs a request to a model declaring `t` sends: without the control inputs
/// of a stateful model (`policy`), which the node fills.
pub(crate) fn request_tensors<'t>(t: &'t Tensors, policy: Option<&Policy>) -> Cow<'t, Tensors> {
    match policy {
        None => Cow::Borrowed(t),
        Some(policy) => {
            let mut own = t.clone();
            own.inputs.truncate(policy.first_control(t));
            own.outputs.truncate(policy.first_state_output(t));
            Cow::Owned(own)
        }
    }
}

/// Appends the control inputs of a call of a stateful model to its `payload` (the
/// request's inputs, for `batch` items); nothing for another model. A model with
/// implicit state takes one item a call (its state is one item's): more is refused.
pub(crate) fn push_controls(
    accel: &dyn Accelerator,
    seq: Option<&Sequenced>,
    batch: usize,
    payload: &mut Vec<u8>,
) -> Result<(), String> {
    if let (Some(policy), Some(seq)) = (accel.sequence(), seq) {
        if !policy.states.is_empty() && batch != 1 {
            return Err(format!(
                "model '{}' keeps a state per sequence: a request carries one item, not {batch}",
                accel.descriptor().name
            ));
        }
        policy.push_controls(seq.flags(), batch, payload);
    }
    Ok(())
}

/// How many of a model's outputs the node keeps to itself: its state outputs.
pub(crate) fn hidden_outputs(accel: &dyn Accelerator) -> usize {
    accel.sequence().map_or(0, |p| p.states.len())
}

/// A model's `sequence_batching` as Triton's `/config` document gives it.
pub(crate) fn config_json(policy: &Policy) -> Value {
    let controls: Vec<Value> = policy
        .controls
        .iter()
        .map(|c| {
            let mut control = serde_json::json!({ "kind": c.kind.config_name() });
            let values = [c.values.0, c.values.1];
            match (c.kind, c.datatype) {
                (ControlKind::CorrId, t) => control["data_type"] = t.config_name().into(),
                (_, accel::tensors::DataType::Int32) => {
                    control["int32_false_true"] = values.map(|v| v as i32).to_vec().into()
                }
                (_, accel::tensors::DataType::Bool) => {
                    control["bool_false_true"] = values.map(|v| v != 0.0).to_vec().into()
                }
                _ => control["fp32_false_true"] = values.to_vec().into(),
            }
            serde_json::json!({ "name": c.input, "control": [control] })
        })
        .collect();
    let mut config = serde_json::json!({
        "max_sequence_idle_microseconds": policy.max_idle.as_micros() as u64,
        "control_input": controls,
    });
    // The oldest strategy's keys are the model's dynamic batching (`/config` shows
    // them there too).
    match policy.strategy {
        Strategy::Direct => config["direct"] = serde_json::json!({}),
        Strategy::Oldest => config["oldest"] = serde_json::json!({}),
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_parameters_give_the_sequence_and_leave_the_rest() {
        let mut params = json!({"sequence_id": 1000, "sequence_start": true, "k": 2})
            .as_object()
            .cloned();
        let given = from_json(&mut params).unwrap();
        assert_eq!(given.id, Some(CorrelationId::Number(1000)));
        assert!(given.start && !given.end);
        assert_eq!(params.unwrap().keys().collect::<Vec<_>>(), ["k"]);
        let mut text = json!({"sequence_id": "a-b", "sequence_end": true})
            .as_object()
            .cloned();
        let given = from_json(&mut text).unwrap();
        assert_eq!(given.id, Some(CorrelationId::Text("a-b".into())));
        assert!(given.end);
        for bad in [
            json!({"sequence_id": -1}),
            json!({"sequence_id": [1]}),
            json!({"sequence_start": 1}),
        ] {
            assert!(from_json(&mut bad.as_object().cloned()).is_err(), "{bad}");
        }
        assert!(from_json(&mut None).unwrap().id.is_none());
    }

    #[test]
    fn a_model_without_sequences_refuses_an_id() {
        let c = accel::Catalog::builtin();
        let echo = &**c.by_name("echo").unwrap();
        assert_eq!(check(echo, Given::default()), Ok(None));
        let zero = Given {
            id: Some(CorrelationId::Number(0)),
            ..Given::default()
        };
        assert_eq!(check(echo, zero), Ok(None));
        let given = Given {
            id: Some(CorrelationId::Number(7)),
            start: true,
            end: false,
        };
        assert!(check(echo, given)
            .unwrap_err()
            .contains("not a sequence model"));
    }

    /// A model of batch up to 4 taking INPUT, with START and CORRID controls.
    struct Stateful(accel::Descriptor, Tensors, Policy);

    fn stateful() -> Stateful {
        use accel::sequence::Control;
        use accel::tensors::{DataType, TensorSpec};
        let spec = |name: &str, datatype| TensorSpec {
            name: name.into(),
            datatype,
            dims: vec![1],
        };
        let control = |input: &str, kind, datatype| Control {
            input: input.into(),
            kind,
            datatype,
            values: (0.0, 1.0),
        };
        Stateful(
            accel::Descriptor {
                id: 901,
                name: "stateful".into(),
                hash: String::new(),
                params: Vec::new(),
            },
            Tensors {
                inputs: vec![
                    spec("INPUT", DataType::Int32),
                    spec("START", DataType::Int32),
                    spec("CORRID", DataType::Uint64),
                ],
                outputs: vec![spec("OUTPUT", DataType::Int32)],
                max_batch_size: 4,
            },
            Policy {
                strategy: accel::sequence::Strategy::Direct,
                states: Vec::new(),
                max_idle: std::time::Duration::from_secs(1),
                sequences_max: 8,
                controls: vec![
                    control("START", ControlKind::Start, DataType::Int32),
                    control("CORRID", ControlKind::CorrId, DataType::Uint64),
                ],
            },
        )
    }

    impl Accelerator for Stateful {
        fn descriptor(&self) -> &accel::Descriptor {
            &self.0
        }
        fn check(&self, _: &accel::ParamBlock, _: Option<usize>) -> Result<(), accel::CallError> {
            Ok(())
        }
        fn work_estimate(&self, _: &accel::ParamBlock, len: usize) -> u64 {
            len as u64
        }
        fn run(
            &self,
            _: &accel::ParamBlock,
            _: &[u8],
            out: &mut Vec<u8>,
        ) -> Result<(), accel::CallError> {
            out.clear();
            Ok(())
        }
        fn tensors(&self) -> Option<&Tensors> {
            Some(&self.1)
        }
        fn sequence(&self) -> Option<&Policy> {
            Some(&self.2)
        }
    }

    /// INPUT's two items, then START (1, 1) and CORRID (7, 7).
    fn two_items_starting_sequence_7() -> Vec<u8> {
        let mut want: Vec<u8> = [5i32, 6, 1, 1]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        want.extend([7u64, 7].iter().flat_map(|v| v.to_le_bytes()));
        want
    }

    #[test]
    fn http_and_grpc_requests_get_the_controls_appended() {
        use crate::front::grpc::pb::infer_parameter::ParameterChoice;
        use crate::front::grpc::pb::model_infer_request::InferInputTensor;
        use crate::front::grpc::pb::{InferParameter, ModelInferRequest};
        let m = stateful();
        let body = serde_json::to_vec(&json!({
            "parameters": {"sequence_id": 7, "sequence_start": true},
            "inputs": [{"name": "INPUT", "shape": [2, 1], "datatype": "INT32", "data": [5, 6]}]
        }))
        .unwrap();
        let call = crate::front::oip::infer::decode(&m, &body, None).unwrap();
        assert_eq!(call.payload, two_items_starting_sequence_7());
        let seq = call.reply.sequence().unwrap();
        assert_eq!(
            (&seq.id, seq.start, seq.end),
            (&CorrelationId::Number(7), true, false)
        );

        let param = |choice| InferParameter {
            parameter_choice: Some(choice),
        };
        let raw: Vec<u8> = [5i32, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
        let req = ModelInferRequest {
            model_name: "stateful".into(),
            inputs: vec![InferInputTensor {
                name: "INPUT".into(),
                datatype: "INT32".into(),
                shape: vec![2, 1],
                ..Default::default()
            }],
            raw_input_contents: vec![raw.into()],
            parameters: [
                ("sequence_id", param(ParameterChoice::Int64Param(7))),
                ("sequence_start", param(ParameterChoice::BoolParam(true))),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
            ..Default::default()
        };
        let call = crate::front::grpc::tensor::decode(&m, &req).unwrap();
        assert_eq!(call.payload, two_items_starting_sequence_7());
        assert!(call.reply.sequence().is_some_and(|s| s.start && !s.end));

        // A request that sends a control input, or no id, or a string id for a
        // model taking a numeric one, is refused.
        let refused = |v: Value, words: &str| {
            let body = serde_json::to_vec(&v).unwrap();
            let e = crate::front::oip::infer::decode(&m, &body, None).unwrap_err();
            assert!(e.contains(words), "{e}");
        };
        let input = json!({"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [5]});
        let start = json!({"name": "START", "shape": [1, 1], "datatype": "INT32", "data": [1]});
        refused(
            json!({"inputs": [input]}),
            "non-zero or non-empty correlation ID",
        );
        refused(
            json!({"parameters": {"sequence_id": "x"}, "inputs": [input]}),
            "as a number",
        );
        refused(
            json!({"parameters": {"sequence_id": 7}, "inputs": [input, start]}),
            "takes 1 input",
        );
    }
}
