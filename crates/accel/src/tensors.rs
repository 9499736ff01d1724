//! Tensors a model declares: what an accelerator that is a *model* (an ONNX file from
//! the model repository) takes and gives, beyond bytes.
//!
//! The built-in kernels need none of this (their payloads are documented byte layouts
//! and the v2 protocol maps them with a fixed table). A model's payload is its inputs'
//! elements, little-endian, tensor after tensor in declared order, each tensor whole
//! (`[batch, dims…]` row-major); its output is its outputs the same way. With a
//! batch axis (`max_batch_size > 0`) the batch size is not sent: it is the payload's
//! length over the bytes one item takes, so `/v1/fn`, RAC and v2 carry the same bytes.
//!
//! Every dimension but the batch is fixed, so a payload's size is known before it is
//! read and a call cannot ask a model for more than `max_batch_size` items.

use crate::{bad, CallError};

/// A tensor element type, by the names of the Open Inference Protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataType {
    Uint8,
    Int32,
    Fp32,
}

impl DataType {
    /// Every type, in the order error messages list them.
    pub const ALL: [DataType; 3] = [DataType::Uint8, DataType::Int32, DataType::Fp32];

    /// The protocol's name (`datatype` field).
    pub fn name(self) -> &'static str {
        match self {
            DataType::Uint8 => "UINT8",
            DataType::Int32 => "INT32",
            DataType::Fp32 => "FP32",
        }
    }

    /// The model configuration's name (`data_type` field, Triton's extension).
    pub fn config_name(self) -> &'static str {
        match self {
            DataType::Uint8 => "TYPE_UINT8",
            DataType::Int32 => "TYPE_INT32",
            DataType::Fp32 => "TYPE_FP32",
        }
    }

    /// The type a model configuration names (`TYPE_FP32`, or the protocol's `FP32`).
    pub fn from_config_name(name: &str) -> Option<DataType> {
        DataType::ALL
            .into_iter()
            .find(|t| t.config_name() == name || t.name() == name)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::Uint8 => 1,
            DataType::Int32 | DataType::Fp32 => 4,
        }
    }
}

/// One declared tensor: its name, element type, and the dims of one item (the batch
/// axis, when the model has one, is not among them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub datatype: DataType,
    pub dims: Vec<u64>,
}

impl TensorSpec {
    /// Elements in one item.
    pub fn item_elements(&self) -> usize {
        self.dims.iter().product::<u64>() as usize
    }

    /// Bytes one item takes.
    pub fn item_bytes(&self) -> usize {
        self.item_elements() * self.datatype.size()
    }
}

/// The inputs and outputs of a model, in the order its payloads carry them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensors {
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// Items one call may carry; 0: no batch axis, every tensor is exactly its dims.
    pub max_batch_size: u32,
}

impl Tensors {
    /// Bytes one item's inputs take, all inputs together.
    pub fn input_item_bytes(&self) -> usize {
        self.inputs.iter().map(TensorSpec::item_bytes).sum()
    }

    /// Bytes one item's outputs take, all outputs together.
    pub fn output_item_bytes(&self) -> usize {
        self.outputs.iter().map(TensorSpec::item_bytes).sum()
    }

    /// How many items a payload of `len` bytes carries (1 without a batch axis), or why
    /// it cannot be this model's input.
    pub fn batch_of(&self, len: usize) -> Result<usize, CallError> {
        let item = self.input_item_bytes();
        if self.max_batch_size == 0 {
            return if len == item {
                Ok(1)
            } else {
                bad(format!(
                    "the model takes {item} bytes of input (no batch axis), got {len}"
                ))
            };
        }
        let max = self.max_batch_size as usize;
        if item == 0 || len == 0 || len % item != 0 || len / item > max {
            return bad(format!(
                "the model takes 1 to {max} items of {item} bytes each, got {len} bytes"
            ));
        }
        Ok(len / item)
    }

    /// The shape of `spec` (one of this model's tensors) for `batch` items: with the
    /// batch axis first when the model has one.
    pub fn shape(&self, spec: &TensorSpec, batch: usize) -> Vec<u64> {
        let lead = (self.max_batch_size > 0).then_some(batch as u64);
        lead.into_iter().chain(spec.dims.iter().copied()).collect()
    }

    /// The declared shape of `spec`, `-1` standing for the batch axis.
    pub fn declared_shape(&self, spec: &TensorSpec) -> Vec<i64> {
        let lead = (self.max_batch_size > 0).then_some(-1);
        lead.into_iter()
            .chain(spec.dims.iter().map(|&d| d as i64))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digits() -> Tensors {
        let t = |name: &str, dims: &[u64]| TensorSpec {
            name: name.into(),
            datatype: DataType::Fp32,
            dims: dims.to_vec(),
        };
        Tensors {
            inputs: vec![t("image", &[1, 8, 8])],
            outputs: vec![t("logits", &[10])],
            max_batch_size: 64,
        }
    }

    #[test]
    fn the_batch_is_the_payload_over_one_items_bytes() {
        let m = digits();
        assert_eq!(m.input_item_bytes(), 256);
        assert_eq!(m.output_item_bytes(), 40);
        assert_eq!(m.batch_of(256).unwrap(), 1);
        assert_eq!(m.batch_of(256 * 64).unwrap(), 64);
        for len in [0, 255, 257, 256 * 65] {
            assert!(m.batch_of(len).is_err(), "{len}");
        }
        assert_eq!(m.shape(&m.inputs[0], 3), [3, 1, 8, 8]);
        assert_eq!(m.declared_shape(&m.outputs[0]), [-1, 10]);
    }

    #[test]
    fn without_a_batch_axis_the_payload_is_exactly_one_item() {
        let m = Tensors {
            max_batch_size: 0,
            ..digits()
        };
        assert_eq!(m.batch_of(256).unwrap(), 1);
        assert!(m.batch_of(512).is_err());
        assert_eq!(m.shape(&m.inputs[0], 1), [1, 8, 8]);
        assert_eq!(m.declared_shape(&m.inputs[0]), [1, 8, 8]);
    }

    #[test]
    fn config_names_and_protocol_names_both_parse() {
        for t in DataType::ALL {
            assert_eq!(DataType::from_config_name(t.config_name()), Some(t));
            assert_eq!(DataType::from_config_name(t.name()), Some(t));
        }
        assert_eq!(DataType::from_config_name("TYPE_FP64"), None);
    }
}
