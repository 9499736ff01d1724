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
    /// The control inputs, in the order they follow the request's inputs.
    pub controls: Vec<Control>,
    /// The implicit state (Triton's `sequence_batching.state`): inputs that close the
    /// model's inputs, after the controls, each fed what its output gave on the
    /// sequence's previous call (zeros on START); the outputs close the model's
    /// outputs. The node keeps them between calls; a request neither sends nor gets
    /// them.
    pub states: Vec<State>,
}

/// One state tensor: the model reads it as input `input` and gives its next value as
/// output `output`, one item of `bytes` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub input: String,
    pub output: String,
    pub bytes: usize,
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
    /// Bytes of state one sequence holds.
    pub fn state_bytes(&self) -> usize {
        self.states.iter().map(|s| s.bytes).sum()
    }

    /// The index of the first state output among `t.outputs`: the outputs before it
    /// are the ones a request gets.
    pub fn first_state_output(&self, t: &Tensors) -> usize {
        let first = t.outputs.len() - self.states.len();
        debug_assert!(self
            .states
            .iter()
            .zip(&t.outputs[first..])
            .all(|(s, spec)| s.output == spec.name));
        first
    }

    /// The index of the first control input among `t.inputs`: the inputs before it
    /// are the ones a request sends (controls, then states, follow).
    pub fn first_control(&self, t: &Tensors) -> usize {
        let first = t.inputs.len() - self.states.len() - self.controls.len();
        debug_assert!(self
            .controls
            .iter()
            .zip(&t.inputs[first..])
            .all(|(c, spec)| c.input == spec.name && c.datatype == spec.datatype));
        first
    }

    /// Appends the control inputs of a call standing at `flags`, for `batch` items,
    /// to `payload` (the request's own inputs), then zeros where the state goes.
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
        // Room for the state, which the node writes in when the call's turn comes.
        payload.resize(payload.len() + self.state_bytes() * batch, 0);
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
            states: Vec::new(),
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
        let mut stateful = p.clone();
        stateful.states.push(State {
            input: "STATE_IN".into(),
            output: "STATE_OUT".into(),
            bytes: 4,
        });
        let mut with_room = Vec::new();
        stateful.push_controls(flags, 1, &mut with_room);
        assert_eq!(
            with_room.len(),
            4 + 4 + 8 + 4,
            "controls, then the state's room"
        );
        assert_eq!(&with_room[16..], &[0; 4]);
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
