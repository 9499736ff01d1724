//! The `[sequence_batching]` section of a model's `config.toml`, under Triton's names,
//! checked into an [`accel::sequence::Policy`] (what the node routes a stateful
//! model's sequences by). Every value has a bound; a value outside it is refused at
//! load with its key named.
//!
//! ```toml
//! max_batch_size = 8
//! [[input]]                                  # what a request sends
//! name = "INPUT"
//! data_type = "TYPE_INT32"
//! dims = [1]
//! # ... [[output]] ...
//! [sequence_batching]
//! max_sequence_idle_microseconds = 5000000   # an idle sequence is released after it
//! max_sequences = 1024                       # netaccel's bound on live sequences
//! [sequence_batching.direct]                 # the strategy: direct (the default), or
//!                                            # [sequence_batching.oldest] with
//!                                            # preferred_batch_size = [4, 8] and
//!                                            # max_queue_delay_microseconds = 100:
//!                                            # calls of different sequences batched
//! [[sequence_batching.control_input]]        # an input of the ONNX graph the node fills
//! name = "START"
//! [[sequence_batching.control_input.control]]
//! kind = "CONTROL_SEQUENCE_START"            # or _END, _READY, _CORRID
//! int32_false_true = [0, 1]                  # or fp32_false_true, bool_false_true;
//!                                            # a CORRID gives data_type instead
//! ```
//!
//! A control input is one element per batch item (dims `[1]`); the node appends the
//! control inputs, in the order listed, after the model's `[[input]]`s.
//!
//! Implicit state (Triton's `state`): the node keeps, per sequence, what the model's
//! state output gave and feeds it back as its state input on the next call (zeros
//! on START); the state inputs come after the controls, the state outputs after the
//! `[[output]]`s:
//!
//! ```toml
//! [[sequence_batching.state]]
//! input_name = "STATE_IN"
//! output_name = "STATE_OUT"
//! data_type = "TYPE_INT32"
//! dims = [1]
//! ```

use std::time::Duration;

use accel::sequence::{Control, ControlKind, Policy, State, Strategy, CONTROL_TYPES};
use accel::tensors::{DataType, TensorSpec};
use serde::Deserialize;

use crate::batching::DynamicBatching;

/// Longest `max_sequence_idle_microseconds`: one hour.
pub const IDLE_US_MAX: u64 = 3_600_000_000;
/// Triton's default `max_sequence_idle_microseconds`: 1 s.
pub const IDLE_US_DEFAULT: u64 = 1_000_000;
/// Largest `max_sequences`.
pub const SEQUENCES_MAX: usize = 1 << 16;
/// Default `max_sequences`.
pub const SEQUENCES_DEFAULT: usize = 1024;
/// Most state bytes one sequence holds.
pub const STATE_BYTES_MAX: usize = 64 << 10;
/// Most state bytes all live sequences of a model hold together.
pub const STATE_MEMORY_MAX: usize = 64 << 20;

/// `[sequence_batching]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SequenceBatching {
    #[serde(default)]
    max_sequence_idle_microseconds: Option<u64>,
    #[serde(default)]
    max_sequences: Option<u64>,
    #[serde(default)]
    direct: Option<Direct>,
    #[serde(default)]
    oldest: Option<Oldest>,
    #[serde(default)]
    control_input: Vec<RawControlInput>,
    #[serde(default)]
    state: Vec<RawState>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawState {
    input_name: String,
    output_name: String,
    data_type: String,
    dims: Vec<i64>,
}

/// Triton's `direct {}`: each sequence on one slot, its calls one by one.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Direct {}

/// Triton's `oldest {}`: calls of different sequences batched on their slot, as the
/// model's dynamic batching would (`crate::batching`, with these two keys).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Oldest {
    #[serde(default)]
    preferred_batch_size: Vec<i64>,
    #[serde(default)]
    max_queue_delay_microseconds: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawControlInput {
    name: String,
    control: Vec<RawControl>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawControl {
    kind: String,
    #[serde(default)]
    int32_false_true: Option<Vec<i32>>,
    #[serde(default)]
    fp32_false_true: Option<Vec<f32>>,
    #[serde(default)]
    bool_false_true: Option<Vec<bool>>,
    #[serde(default)]
    data_type: Option<String>,
}

/// A checked `[sequence_batching]`: the policy, the batching of the oldest strategy,
/// and the tensors of the state (inputs to close the model's inputs after the
/// controls, outputs to close its outputs).
pub(crate) struct Checked {
    pub(crate) policy: Policy,
    pub(crate) batching: Option<accel::batch::Policy>,
    pub(crate) state_inputs: Vec<TensorSpec>,
    pub(crate) state_outputs: Vec<TensorSpec>,
}

impl SequenceBatching {
    /// Checks the section; `inputs` are the model's declared `[[input]]`s, which the
    /// control inputs must not name. With the `oldest` strategy, the batching of the
    /// model's calls (checked against its `max_batch_size`) comes too. The error
    /// names the key.
    pub(crate) fn check(
        self,
        inputs: &[TensorSpec],
        outputs: &[TensorSpec],
        max_batch_size: u32,
    ) -> Result<Checked, String> {
        let key = |k: &str| format!("sequence_batching.{k}");
        let (strategy, batching) = match (self.direct, self.oldest) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{}: one strategy, direct or oldest, not both",
                    key("oldest")
                ))
            }
            (_, None) => (Strategy::Direct, None),
            (None, Some(oldest)) => {
                let batching = DynamicBatching::of_oldest(
                    oldest.preferred_batch_size,
                    oldest.max_queue_delay_microseconds,
                )
                .check(max_batch_size)
                .map_err(|e| format!("{}: {e}", key("oldest")))?;
                (Strategy::Oldest, Some(batching))
            }
        };
        let idle_us = self
            .max_sequence_idle_microseconds
            .unwrap_or(IDLE_US_DEFAULT);
        if idle_us == 0 || idle_us > IDLE_US_MAX {
            return Err(format!(
                "{}: {idle_us} is not within 1..={IDLE_US_MAX}",
                key("max_sequence_idle_microseconds")
            ));
        }
        let sequences_max = self.max_sequences.unwrap_or(SEQUENCES_DEFAULT as u64);
        if sequences_max == 0 || sequences_max > SEQUENCES_MAX as u64 {
            return Err(format!(
                "{}: {sequences_max} is not within 1..={SEQUENCES_MAX}",
                key("max_sequences")
            ));
        }
        let mut controls: Vec<Control> = Vec::with_capacity(self.control_input.len());
        for raw in self.control_input {
            let control = raw.check()?;
            let taken = inputs.iter().any(|i| i.name == control.input)
                || controls.iter().any(|c| c.input == control.input);
            if taken {
                return Err(format!(
                    "{}: input `{}` is named twice",
                    key("control_input"),
                    control.input
                ));
            }
            if controls.iter().any(|c| c.kind == control.kind) {
                return Err(format!(
                    "{}: {} is given twice",
                    key("control_input"),
                    control.kind.config_name()
                ));
            }
            controls.push(control);
        }
        debug_assert!(controls.len() <= ControlKind::ALL.len());
        debug_assert_eq!(batching.is_some(), strategy == Strategy::Oldest);
        let taken: Vec<&str> = inputs
            .iter()
            .chain(outputs)
            .map(|s| s.name.as_str())
            .chain(controls.iter().map(|c| c.input.as_str()))
            .collect();
        let (states, specs) = states(self.state, &taken)?;
        let state_bytes: usize = states.iter().map(|s| s.bytes).sum();
        if state_bytes.saturating_mul(sequences_max as usize) > STATE_MEMORY_MAX {
            return Err(format!(
                "{}: {state_bytes} bytes a sequence, {sequences_max} sequences: more than \
                 {STATE_MEMORY_MAX} bytes",
                key("state")
            ));
        }
        let policy = Policy {
            strategy,
            max_idle: Duration::from_micros(idle_us),
            sequences_max: sequences_max as usize,
            controls,
            states,
        };
        debug_assert_eq!(specs.len(), policy.states.len() * 2);
        let (state_inputs, state_outputs) = specs
            .chunks(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .unzip();
        Ok(Checked {
            policy,
            batching,
            state_inputs,
            state_outputs,
        })
    }
}

impl RawControlInput {
    fn check(self) -> Result<Control, String> {
        let at = format!("sequence_batching.control_input `{}`", self.name);
        if self.name.is_empty() {
            return Err("sequence_batching.control_input: a name is needed".to_string());
        }
        let [raw] = <[RawControl; 1]>::try_from(self.control)
            .map_err(|c| format!("{at}: control: one control an input, not {}", c.len()))?;
        let kind = ControlKind::ALL
            .into_iter()
            .find(|k| k.config_name() == raw.kind)
            .ok_or_else(|| {
                let known: Vec<_> = ControlKind::ALL.iter().map(|k| k.config_name()).collect();
                format!(
                    "{at}: kind `{}` is not one of {}",
                    raw.kind,
                    known.join(", ")
                )
            })?;
        let (datatype, values) = raw.typed(kind).map_err(|e| format!("{at}: {e}"))?;
        Ok(Control {
            input: self.name,
            kind,
            datatype,
            values,
        })
    }
}

impl RawControl {
    /// The control's element type and its false/true values (a CORRID: its
    /// `data_type`, and no values).
    fn typed(self, kind: ControlKind) -> Result<(DataType, (f64, f64)), String> {
        let pair = |v: Vec<f64>, what: &str| match v[..] {
            [f, t] => Ok((f, t)),
            _ => Err(format!("{what}: two values (false, true), not {}", v.len())),
        };
        let given = [
            self.int32_false_true.is_some(),
            self.fp32_false_true.is_some(),
            self.bool_false_true.is_some(),
        ];
        let flags = given.iter().filter(|g| **g).count();
        if kind == ControlKind::CorrId {
            let name = self.data_type.ok_or("a CORRID control needs data_type")?;
            let datatype = DataType::from_config_name(&name)
                .filter(|t| CONTROL_TYPES.contains(t) && *t != DataType::Bool)
                .ok_or_else(|| format!("data_type `{name}`: a CORRID is an integer or FP32"))?;
            if flags > 0 {
                return Err("a CORRID control takes data_type, not false/true values".into());
            }
            return Ok((datatype, (0.0, 0.0)));
        }
        if flags != 1 || self.data_type.is_some() {
            return Err(
                "a flag takes one of int32_false_true, fp32_false_true, bool_false_true"
                    .to_string(),
            );
        }
        if let Some(v) = self.int32_false_true {
            let v = v.into_iter().map(f64::from).collect();
            return Ok((DataType::Int32, pair(v, "int32_false_true")?));
        }
        if let Some(v) = self.fp32_false_true {
            let v = v.into_iter().map(f64::from).collect();
            return Ok((DataType::Fp32, pair(v, "fp32_false_true")?));
        }
        let v = self.bool_false_true.expect("one of the three is given");
        let v = v.into_iter().map(|b| f64::from(u8::from(b))).collect();
        Ok((DataType::Bool, pair(v, "bool_false_true")?))
    }
}

/// The state tensors, checked, and their specs (each state's input, then its
/// output); `taken` are the names the model's other tensors have.
fn states(raw: Vec<RawState>, taken: &[&str]) -> Result<(Vec<State>, Vec<TensorSpec>), String> {
    let mut states = Vec::with_capacity(raw.len());
    let mut specs: Vec<TensorSpec> = Vec::with_capacity(raw.len() * 2);
    for r in raw {
        let at = format!("sequence_batching.state `{}`", r.input_name);
        let datatype = DataType::from_config_name(&r.data_type)
            .filter(|t| t.fixed_size().is_some())
            .ok_or_else(|| format!("{at}: data_type `{}` is not a fixed-size type", r.data_type))?;
        let dims: Vec<u64> = r
            .dims
            .iter()
            .map(|&d| u64::try_from(d).ok().filter(|&d| d > 0))
            .collect::<Option<_>>()
            .filter(|d: &Vec<u64>| !d.is_empty() && d.len() <= crate::config::RANK_MAX)
            .ok_or_else(|| {
                format!(
                    "{at}: dims are fixed, positive, 1 to {}",
                    crate::config::RANK_MAX
                )
            })?;
        let bytes = dims
            .iter()
            .try_fold(datatype.size() as u64, |acc, &d| acc.checked_mul(d))
            .filter(|&b| b <= STATE_BYTES_MAX as u64)
            .ok_or_else(|| format!("{at}: more than {STATE_BYTES_MAX} bytes"))?;
        for name in [&r.input_name, &r.output_name] {
            let clash = name.is_empty()
                || taken.contains(&name.as_str())
                || specs.iter().any(|s| &s.name == name)
                || r.input_name == r.output_name;
            if clash {
                return Err(format!("{at}: `{name}` is empty or names another tensor"));
            }
        }
        for name in [&r.input_name, &r.output_name] {
            specs.push(TensorSpec {
                name: name.clone(),
                datatype,
                dims: dims.clone(),
            });
        }
        states.push(State {
            input: r.input_name,
            output: r.output_name,
            bytes: bytes as usize,
        });
    }
    Ok((states, specs))
}

/// The tensor a control input is in the model's inputs: one element per item.
pub(crate) fn control_spec(control: &Control) -> TensorSpec {
    TensorSpec {
        name: control.input.clone(),
        datatype: control.datatype,
        dims: vec![1],
    }
}

#[cfg(test)]
mod tests {
    use crate::config::parse;
    use accel::sequence::ControlKind;
    use accel::tensors::DataType;

    const HEAD: &str = r#"
max_batch_size = 8
[[input]]
name = "INPUT"
data_type = "TYPE_INT32"
dims = [1]
[[output]]
name = "OUTPUT"
data_type = "TYPE_INT32"
dims = [1]
"#;

    const START: &str = r#"
[[sequence_batching.control_input]]
name = "START"
[[sequence_batching.control_input.control]]
kind = "CONTROL_SEQUENCE_START"
int32_false_true = [0, 1]
"#;

    fn config(section: &str) -> Result<crate::ModelConfig, String> {
        parse("m", &format!("{HEAD}{section}"))
    }

    #[test]
    fn controls_close_the_inputs() {
        let section = format!(
            "[sequence_batching]\nmax_sequence_idle_microseconds = 2000\nmax_sequences = 3\n\
             [sequence_batching.direct]\n{START}\
             [[sequence_batching.control_input]]\nname = \"CORRID\"\n\
             [[sequence_batching.control_input.control]]\nkind = \"CONTROL_SEQUENCE_CORRID\"\n\
             data_type = \"TYPE_UINT64\"\n"
        );
        let c = config(&section).unwrap();
        let policy = c.sequence_batching.unwrap();
        assert_eq!(policy.max_idle.as_micros(), 2000);
        assert_eq!(policy.sequences_max, 3);
        let names: Vec<_> = c.tensors.inputs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["INPUT", "START", "CORRID"]);
        assert_eq!(c.tensors.inputs[2].datatype, DataType::Uint64);
        assert_eq!(policy.controls[0].kind, ControlKind::Start);
        assert_eq!(policy.controls[0].values, (0.0, 1.0));
        assert_eq!(policy.first_control(&c.tensors), 1);
        // Triton's defaults: 1 s idle, direct.
        let c = config("[sequence_batching]\n").unwrap();
        assert_eq!(c.sequence_batching.unwrap().max_idle.as_secs(), 1);
        assert!(config("").unwrap().sequence_batching.is_none());
        assert!(config("[sequence_batching]\n")
            .unwrap()
            .dynamic_batching
            .is_none());
    }

    const STATE: &str = r#"
[[sequence_batching.state]]
input_name = "STATE_IN"
output_name = "STATE_OUT"
data_type = "TYPE_INT32"
dims = [2]
"#;

    #[test]
    fn states_close_the_inputs_after_the_controls_and_the_outputs() {
        let c = config(&format!("{START}{STATE}")).unwrap();
        let names = |specs: &[accel::tensors::TensorSpec]| -> Vec<String> {
            specs.iter().map(|s| s.name.clone()).collect()
        };
        assert_eq!(names(&c.tensors.inputs), ["INPUT", "START", "STATE_IN"]);
        assert_eq!(names(&c.tensors.outputs), ["OUTPUT", "STATE_OUT"]);
        let policy = c.sequence_batching.unwrap();
        assert_eq!(policy.state_bytes(), 8);
        assert_eq!(policy.first_control(&c.tensors), 1);
        assert_eq!(policy.first_state_output(&c.tensors), 1);
        let refused = |section: String, words: &str| {
            let e = config(&section).unwrap_err();
            assert!(e.contains(words), "{section}: {e}");
        };
        refused(STATE.replace("STATE_OUT", "OUTPUT"), "names another tensor");
        refused(
            format!("{START}{}", STATE.replace("STATE_IN", "START")),
            "names another tensor",
        );
        refused(STATE.replace("TYPE_INT32", "TYPE_STRING"), "fixed-size");
        refused(STATE.replace("[2]", "[0]"), "dims");
        refused(STATE.replace("[2]", "[100000]"), "more than");
        refused(
            format!("[sequence_batching]\nmax_sequences = 60000\n{STATE}").replace("[2]", "[1024]"),
            "more than",
        );
    }

    #[test]
    fn the_oldest_strategy_batches_by_its_own_keys() {
        let c = config(
            "[sequence_batching.oldest]\npreferred_batch_size = [4]\n\
             max_queue_delay_microseconds = 300\n",
        )
        .unwrap();
        let sequence = c.sequence_batching.unwrap();
        assert_eq!(sequence.strategy, accel::sequence::Strategy::Oldest);
        let batching = c.dynamic_batching.unwrap();
        assert_eq!(batching.preferred_batch_sizes, [4]);
        assert_eq!(batching.max_queue_delay.as_micros(), 300);
        assert_eq!(batching.max_batch_size, 8);
    }

    #[test]
    fn what_does_not_fit_is_refused_naming_the_key() {
        let refused = |section: &str, words: &str| {
            let e = config(section).unwrap_err();
            assert!(e.contains(words), "{section}: {e}");
        };
        refused(
            "[sequence_batching.direct]\n[sequence_batching.oldest]\n",
            "not both",
        );
        refused(
            "[sequence_batching.oldest]\npreferred_batch_size = [9]\n",
            "sequence_batching.oldest: dynamic_batching.preferred_batch_size",
        );
        refused("[dynamic_batching]\n[sequence_batching]\n", "one scheduler");
        refused(
            "[sequence_batching]\nmax_sequence_idle_microseconds = 0\n",
            "max_sequence_idle_microseconds",
        );
        refused("[sequence_batching]\nmax_sequences = 0\n", "max_sequences");
        refused(
            "[sequence_batching]\nmax_sequences = 100000000\n",
            "max_sequences",
        );
        refused(&START.replace("START\"\n[", "INPUT\"\n["), "named twice");
        refused(
            &format!("{START}{}", START.replace("\"START\"\n[", "\"S2\"\n[")),
            "twice",
        );
        refused(&START.replace("_START", "_BEGIN"), "is not one of");
        refused(&START.replace("[0, 1]", "[0, 1, 2]"), "two values");
        refused(
            &START.replace("int32_false_true = [0, 1]", ""),
            "one of int32_false_true",
        );
        refused(
            &START.replace("CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_CORRID"),
            "data_type",
        );
        refused(
            &START
                .replace("CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_CORRID")
                .replace("int32_false_true = [0, 1]", "data_type = \"TYPE_STRING\""),
            "integer or FP32",
        );
        refused("[sequence_batching]\nsurprise = 1\n", "surprise");
    }
}
