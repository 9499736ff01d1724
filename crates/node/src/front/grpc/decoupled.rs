//! Decoupled models on a `ModelStreamInfer` stream: one request, several responses,
//! then the final flag (Triton's `model_transaction_policy { decoupled: true }`).
//!
//! A decoupled model here is an ONNX model whose outputs all have the same first dim,
//! `R` (`accel::Accelerator::responses`): its one run gives every response at once,
//! and the stream sends `R` responses, the r-th holding slice r of each output (shape
//! `[1, …]`), each with the parameter `triton_final_response` — true on the last, or,
//! when the request asked for it with `triton_enable_empty_final_response`, false on
//! all and true on an empty response after them, as Triton sends. `ModelInfer` and
//! HTTP refuse such a model in Triton's words: one answer cannot carry its responses.
//!
//! Bounds: `R` is at most the config's `RESPONSES_MAX`; the responses go through the
//! stream's bounded answer queue one by one, so a client that does not read holds the
//! node back, not its memory.

use std::collections::HashMap;

use bytes::Bytes;

use super::pb::infer_parameter::ParameterChoice;
use super::pb::{InferParameter, ModelInferRequest, ModelInferResponse};

/// The request parameter asking for an empty final response.
pub const ENABLE_EMPTY_FINAL: &str = "triton_enable_empty_final_response";
/// The response parameter that flags the last response of a request.
pub const FINAL: &str = "triton_final_response";

/// Triton's refusal of a decoupled model over `ModelInfer`.
pub const UNARY_REFUSAL: &str =
    "ModelInfer RPC doesn't support models with decoupled transaction policy";

/// Whether `req` asks for an empty final response.
pub fn wants_empty_final(req: &ModelInferRequest) -> bool {
    matches!(
        req.parameters
            .get(ENABLE_EMPTY_FINAL)
            .and_then(|p| p.parameter_choice.as_ref()),
        Some(ParameterChoice::BoolParam(true))
    )
}

/// The `responses` responses of one run of a decoupled model (`whole`, every
/// output with its first dim the responses), each flagged, and the empty final one
/// when `empty_final`.
pub fn split(
    whole: ModelInferResponse,
    responses: usize,
    empty_final: bool,
) -> Vec<ModelInferResponse> {
    debug_assert!(responses >= 1);
    debug_assert_eq!(whole.outputs.len(), whole.raw_output_contents.len());
    let mut out = Vec::with_capacity(responses + usize::from(empty_final));
    for r in 0..responses {
        let outputs = whole
            .outputs
            .iter()
            .map(|t| {
                let mut t = t.clone();
                if let Some(first) = t.shape.first_mut() {
                    *first = 1;
                }
                t
            })
            .collect();
        let raw = whole
            .raw_output_contents
            .iter()
            .map(|bytes| {
                let each = bytes.len() / responses;
                bytes.slice(r * each..(r + 1) * each)
            })
            .collect();
        let last = r + 1 == responses && !empty_final;
        out.push(response(&whole, outputs, raw, last));
    }
    if empty_final {
        out.push(response(&whole, Vec::new(), Vec::new(), true));
    }
    out
}

fn response(
    whole: &ModelInferResponse,
    outputs: Vec<super::pb::model_infer_response::InferOutputTensor>,
    raw: Vec<Bytes>,
    last: bool,
) -> ModelInferResponse {
    let flag = InferParameter {
        parameter_choice: Some(ParameterChoice::BoolParam(last)),
    };
    ModelInferResponse {
        model_name: whole.model_name.clone(),
        model_version: whole.model_version.clone(),
        id: whole.id.clone(),
        parameters: HashMap::from([(FINAL.to_string(), flag)]),
        outputs,
        raw_output_contents: raw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::grpc::pb::model_infer_response::InferOutputTensor;

    fn flag(r: &ModelInferResponse) -> bool {
        matches!(
            r.parameters
                .get(FINAL)
                .and_then(|p| p.parameter_choice.as_ref()),
            Some(ParameterChoice::BoolParam(true))
        )
    }

    #[test]
    fn each_response_takes_its_slice_and_the_last_is_flagged() {
        let whole = ModelInferResponse {
            model_name: "repeat".into(),
            id: "r1".into(),
            outputs: vec![InferOutputTensor {
                name: "OUT".into(),
                datatype: "INT32".into(),
                shape: vec![3],
                ..Default::default()
            }],
            raw_output_contents: vec![Bytes::from_static(&[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0])],
            ..Default::default()
        };
        let parts = split(whole.clone(), 3, false);
        assert_eq!(parts.len(), 3);
        assert_eq!(&parts[1].raw_output_contents[0][..], &[2, 0, 0, 0]);
        assert_eq!(parts[1].outputs[0].shape, [1]);
        assert!(parts.iter().all(|p| p.id == "r1"));
        assert_eq!(
            parts.iter().map(flag).collect::<Vec<_>>(),
            [false, false, true]
        );
        let parts = split(whole, 3, true);
        assert_eq!(
            parts.iter().map(flag).collect::<Vec<_>>(),
            [false, false, false, true]
        );
        assert!(parts[3].outputs.is_empty());
    }
}
