//! Sequence batching, the parts that know tensors and nothing of slots: the policy a
//! stateful model declares ([`Policy`], Triton's `sequence_batching`) and the control
//! tensors the node feeds it on each call of a sequence ([`Policy::push_controls`]).
//!
//! A sequence is the calls that carry one correlation id, from the call flagged
//! START to the call flagged END. The node routes them to one slot, in order, and
//! tells the model where each call stands through *control inputs*: inputs the model
//! declares (its ONNX graph takes them) but that a request never sends. They come
//! last in the model's inputs ([`Policy::first_control`]), one element per batch
//! item, so the payload a request becomes is its own inputs, then the controls,
//! as [`crate::tensors`] lays every payload out. Which slot, and for how long a
//! sequence stays live, is the node's.

use std::time::Duration;

use crate::tensors::{DataType, Tensors};

/// What a control input tells the model (Triton's `kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlKind {
    /// True on the first call of a sequence (`CONTROL_SEQUENCE_START`).
    Start,
    /// True on the last call (`CONTROL_SEQUENCE_END`).
    End,
    /// True when the batch item holds a call (`CONTROL_SEQUENCE_READY`): always, as
    /// the node runs a sequence's calls one by one.
    Ready,
    /// The correlation id (`CONTROL_SEQUENCE_CORRID`), as a number.
    CorrId,
}

impl ControlKind {
    pub const ALL: [ControlKind; 4] = [
        ControlKind::Start,
        ControlKind::End,
        ControlKind::Ready,
        ControlKind::CorrId,
    ];

    /// Triton's name of the kind.
    pub fn config_name(self) -> &'static str {
        match self {
            ControlKind::Start => "CONTROL_SEQUENCE_START",
            ControlKind::End => "CONTROL_SEQUENCE_END",
            ControlKind::Ready => "CONTROL_SEQUENCE_READY",
            ControlKind::CorrId => "CONTROL_SEQUENCE_CORRID",
        }
    }
}

/// One control input: the model's input `input` gets the value of `kind`, one
/// element of `datatype` per batch item; a flag's element is `values.0` when false,
/// `values.1` when true (Triton's `int32_false_true`, `fp32_false_true`,
/// `bool_false_true`); a CORRID's is the id.
#[derive(Clone, Debug, PartialEq)]
pub struct Control {
    pub input: String,
    pub kind: ControlKind,
    pub datatype: DataType,
    pub values: (f64, f64),
}

/// How a slot runs the calls of the sequences it holds (Triton's strategies).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// Each call runs alone (Triton's `direct`).
    #[default]
    Direct,
    /// Calls of different sequences queued at the slot join into one batch, by the
    /// model's dynamic batching policy (Triton's `oldest`): each item carries its own
    /// control inputs, so the model tells them apart.
    Oldest,
}

/// A model's sequence batching, checked (the model's config refuses the rest,
/// naming the key).
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub strategy: Strategy,
    /// A sequence with no call for this long is released: its next call without
    /// START is refused (Triton's `max_sequence_idle_microseconds`).
    pub max_idle: Duration,
    /// Most sequences of the model live at once; a START beyond it is refused.
    pub sequences_max: usize,
    /// The control inputs, in the order they close the model's inputs.
    pub controls: Vec<Control>,
}

/// Where one call stands in its sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flags {
    pub start: bool,
    pub end: bool,
    /// The correlation id as a number (0 for an id that is a string).
    pub corrid: u64,
}

impl Policy {
    /// The index of the first control input among `t.inputs`: the inputs before it
    /// are the ones a request sends.
    pub fn first_control(&self, t: &Tensors) -> usize {
        let first = t.inputs.len() - self.controls.len();
        debug_assert!(self
            .controls
            .iter()
            .zip(&t.inputs[first..])
            .all(|(c, spec)| c.input == spec.name && c.datatype == spec.datatype));
        first
    }

    /// Appends the control inputs of a call standing at `flags`, for `batch` items,
    /// to `payload` (the request's own inputs).
    pub fn push_controls(&self, flags: Flags, batch: usize, payload: &mut Vec<u8>) {
        for control in &self.controls {
            let flag = |on: bool| {
                Element::Flag(if on {
                    control.values.1
                } else {
                    control.values.0
                })
            };
            let element = match control.kind {
                ControlKind::Start => flag(flags.start),
                ControlKind::End => flag(flags.end),
                ControlKind::Ready => flag(true),
                ControlKind::CorrId => Element::Id(flags.corrid),
            };
            for _ in 0..batch {
                element.push(control.datatype, payload);
            }
        }
    }
}

/// The value of one control element: a flag's configured value, or an id (which an
/// `f64` cannot hold whole).
#[derive(Clone, Copy)]
enum Element {
    Flag(f64),
    Id(u64),
}

impl Element {
    /// Appends the element as `datatype`, little-endian.
    fn push(self, datatype: DataType, out: &mut Vec<u8>) {
        let (float, int) = match self {
            Element::Flag(v) => (v, v as i64 as u64),
            Element::Id(id) => (id as f64, id),
        };
        match datatype {
            DataType::Bool => out.push(u8::from(int != 0)),
            DataType::Int32 => out.extend_from_slice(&(int as i32).to_le_bytes()),
            DataType::Uint32 => out.extend_from_slice(&(int as u32).to_le_bytes()),
            DataType::Int64 => out.extend_from_slice(&(int as i64).to_le_bytes()),
            DataType::Uint64 => out.extend_from_slice(&int.to_le_bytes()),
            DataType::Fp32 => out.extend_from_slice(&(float as f32).to_le_bytes()),
            other => unreachable!("the config refuses control inputs of type {other:?}"),
        }
    }
}

/// The types a control input may have: what the flags' and ids' values fit.
pub const CONTROL_TYPES: [DataType; 6] = [
    DataType::Bool,
    DataType::Int32,
    DataType::Uint32,
    DataType::Int64,
    DataType::Uint64,
    DataType::Fp32,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensors::TensorSpec;

    fn policy() -> Policy {
        let control = |input: &str, kind, datatype| Control {
            input: input.to_string(),
            kind,
            datatype,
            values: (0.0, 1.0),
        };
        Policy {
            strategy: Strategy::Direct,
            max_idle: Duration::from_secs(1),
            sequences_max: 4,
            controls: vec![
                control("START", ControlKind::Start, DataType::Int32),
                control("READY", ControlKind::Ready, DataType::Fp32),
                control("CORRID", ControlKind::CorrId, DataType::Uint64),
            ],
        }
    }

    #[test]
    fn controls_follow_the_inputs_one_element_per_item() {
        let p = policy();
        let spec = |name: &str, datatype| TensorSpec {
            name: name.to_string(),
            datatype,
            dims: vec![1],
        };
        let t = Tensors {
            inputs: vec![
                spec("INPUT", DataType::Int32),
                spec("START", DataType::Int32),
                spec("READY", DataType::Fp32),
                spec("CORRID", DataType::Uint64),
            ],
            outputs: vec![spec("OUTPUT", DataType::Int32)],
            max_batch_size: 8,
        };
        assert_eq!(p.first_control(&t), 1);
        let mut payload = vec![9];
        let id = u64::MAX - 1;
        let flags = Flags {
            start: true,
            end: false,
            corrid: id,
        };
        p.push_controls(flags, 2, &mut payload);
        let mut want = vec![9];
        for _ in 0..2 {
            want.extend_from_slice(&1i32.to_le_bytes());
        }
        for _ in 0..2 {
            want.extend_from_slice(&1f32.to_le_bytes());
        }
        for _ in 0..2 {
            want.extend_from_slice(&id.to_le_bytes());
        }
        assert_eq!(payload, want);
        let mut later = Vec::new();
        p.push_controls(
            Flags {
                start: false,
                ..flags
            },
            1,
            &mut later,
        );
        assert_eq!(&later[..4], &0i32.to_le_bytes());
    }
}
