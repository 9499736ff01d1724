//! A model's `config.toml`: the tensors it declares and how many items one call may
//! batch. A pure parser over the file's text, with every size bounded.
//!
//! The fields are a subset of Triton's `config.pbtxt`, under Triton's names, written
//! in TOML: the node's own configuration is TOML (one parser, unknown keys refused the
//! same way), and the translation from a Triton configuration is line by line.
//!
//! ```toml
//! backend = "tract"            # or "onnxruntime" (see the crate's docs), or "image"
//!                              # (no ONNX file: see `crate::image`); default tract
//! # execution_provider = "cuda" # onnxruntime only: "cpu" (default), "cuda", "tensorrt"
//! max_batch_size = 64          # 0: no batch axis
//! [[input]]
//! name = "image"
//! data_type = "TYPE_FP32"      # any of Triton's: TYPE_BOOL, TYPE_UINT8..64, TYPE_INT8..64,
//!                              # TYPE_FP16, TYPE_BF16, TYPE_FP32, TYPE_FP64, TYPE_STRING
//!                              # (or the protocol's names: FP32, BYTES, …)
//! dims = [1, 8, 8]             # one item, without the batch axis; -1: a dim each
//!                              # call gives (accel::tensors, given dims)
//! [[output]]
//! name = "logits"
//! data_type = "TYPE_FP32"
//! dims = [10]
//! [dynamic_batching]           # optional: see the `batching` module
//! max_queue_delay_microseconds = 500
//! # or [sequence_batching]: a stateful model's sequences, see the `sequencing` module
//! ```
//!
//! A config with `platform = "ensemble"` and `[[ensemble_scheduling.step]]` is an
//! ensemble's: steps running other models, no engine of its own (see [`crate::ensemble`]).

use accel::batch::Policy;
use accel::tensors::{DataType, TensorSpec, Tensors, ANY_DIM, INPUT_FORMATS};
use serde::Deserialize;

use crate::batching::{instances, DynamicBatching, InstanceGroup};
use crate::ensemble::{Ensemble, Scheduling};
use crate::image::{self, Preprocess};
use crate::sequencing::{control_spec, SequenceBatching};

/// Largest `max_batch_size`.
pub const BATCH_MAX: u32 = 4096;
/// Most inputs, and most outputs, a model may declare.
pub const TENSORS_MAX: usize = 16;
/// Most dims one tensor may have.
pub const RANK_MAX: usize = 8;
/// Largest number of bytes one call's inputs (a whole batch) or outputs may take.
pub const CALL_BYTES_MAX: u64 = 64 << 20;
/// Largest config file.
pub const CONFIG_BYTES_MAX: usize = 64 << 10;

/// The engine that runs a model (Triton's `backend`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// tract, built into the node: nothing to install.
    #[default]
    Tract,
    /// ONNX Runtime, from a `libonnxruntime.so` the node loads at start.
    OnnxRuntime,
    /// The node's image decoder ([`crate::image`]): no ONNX file.
    Image,
}

impl Backend {
    pub const ALL: [Backend; 3] = [Backend::Tract, Backend::OnnxRuntime, Backend::Image];

    /// The name `config.toml` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Tract => "tract",
            Backend::OnnxRuntime => "onnxruntime",
            Backend::Image => "image",
        }
    }
}

/// Where ONNX Runtime runs a model (`execution_provider`): on the CPU (the default),
/// or on a GPU through CUDA or TensorRT when the loaded `libonnxruntime.so` has them
/// (the GPU build, e.g. the `onnxruntime-gpu` wheel's). Triton says the same with an
/// instance group of `KIND_GPU` and `gpu_execution_accelerator`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Provider {
    #[default]
    Cpu,
    Cuda,
    TensorRt,
}

impl Provider {
    pub const ALL: [Provider; 3] = [Provider::Cpu, Provider::Cuda, Provider::TensorRt];

    /// The name `config.toml` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Cpu => "cpu",
            Provider::Cuda => "cuda",
            Provider::TensorRt => "tensorrt",
        }
    }
}

/// A parsed and checked configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub tensors: Tensors,
    /// The engine that runs it.
    pub backend: Backend,
    /// Where ONNX Runtime runs it (the CPU for tract).
    pub execution_provider: Provider,
    /// A fixed accelerator id (RAC); `None`: the node assigns one.
    pub id: Option<u16>,
    /// Outputs with a label file (Triton's `label_filename`): (output, file name in
    /// the model's folder).
    pub label_files: Vec<(String, String)>,
    /// Inputs with a `format` (Triton's: FORMAT_NONE, FORMAT_NHWC, FORMAT_NCHW).
    pub formats: Vec<(String, String)>,
    /// How calls queued at a slot join into one run (`[dynamic_batching]`, see
    /// [`crate::batching`]); `None`: each call runs alone.
    pub dynamic_batching: Option<Policy>,
    /// How its calls come in sequences (`[sequence_batching]`, see
    /// [`crate::sequencing`]): its control inputs close `tensors.inputs`.
    pub sequence_batching: Option<accel::sequence::Policy>,
    /// Slots of the default CPU device that host the model (`[[instance_group]]
    /// count`, summed; 1 without).
    pub instances: usize,
    /// A decoupled model's responses to one request (`[model_transaction_policy]
    /// decoupled = true`): the first dim every output shares. `None`: one response.
    pub responses: Option<usize>,
    /// An ensemble's steps (`platform = "ensemble"`, see [`crate::ensemble`]): the
    /// model has no ONNX file of its own. `None`: an ONNX model.
    pub ensemble: Option<Ensemble>,
    /// What the `image` engine makes of each image (`backend = "image"` and its
    /// `[image]`, see [`crate::image`]); `None` for the other engines.
    pub image: Option<Preprocess>,
}

/// Most responses one request to a decoupled model gets.
pub const RESPONSES_MAX: u64 = 1024;

/// `[model_transaction_policy]`, Triton's name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TransactionPolicy {
    #[serde(default)]
    decoupled: bool,
}

/// The responses of a decoupled model declaring `t`: every output's first dim, the
/// same for all, on a model without a batch axis and of fixed-size outputs.
fn responses(t: &Tensors) -> Result<usize, String> {
    let at = "model_transaction_policy.decoupled";
    if t.max_batch_size != 0 {
        return Err(format!(
            "{at}: a decoupled model has no batch axis (max_batch_size = 0): its outputs' \
             first dim is its responses"
        ));
    }
    let firsts: Vec<Option<u64>> = t.outputs.iter().map(|s| s.dims.first().copied()).collect();
    let first = firsts[0];
    let fixed = t.outputs.iter().all(|s| s.datatype.fixed_size().is_some());
    match first {
        Some(n) if fixed && n <= RESPONSES_MAX && firsts.iter().all(|f| *f == first) => {
            Ok(n as usize)
        }
        _ => Err(format!(
            "{at}: every output's first dim is the responses, the same for all (1 to \
             {RESPONSES_MAX}), and of a fixed-size type"
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    id: Option<u16>,
    #[serde(default)]
    backend: Option<String>,
    #[serde(default)]
    execution_provider: Option<String>,
    max_batch_size: u32,
    input: Vec<RawTensor>,
    output: Vec<RawTensor>,
    #[serde(default)]
    dynamic_batching: Option<DynamicBatching>,
    #[serde(default)]
    sequence_batching: Option<SequenceBatching>,
    #[serde(default)]
    model_transaction_policy: Option<TransactionPolicy>,
    #[serde(default)]
    instance_group: Vec<InstanceGroup>,
    #[serde(default)]
    platform: Option<String>,
    #[serde(default)]
    ensemble_scheduling: Option<Scheduling>,
    #[serde(default)]
    image: Option<image::Section>,
}

/// The platform of an ensemble, Triton's word; a model's engine is its `backend`.
pub const ENSEMBLE_PLATFORM: &str = "ensemble";

/// An ensemble's steps, checked against its tensors; `None` for a model that is not
/// one. An ensemble has none of an engine's settings: its steps' models have them.
fn ensemble(
    folder: &str,
    platform: Option<&str>,
    scheduling: Option<Scheduling>,
    engine_settings: bool,
    t: &Tensors,
) -> Result<Option<Ensemble>, String> {
    match (platform, scheduling) {
        (None, None) => Ok(None),
        (Some(ENSEMBLE_PLATFORM), Some(s)) => {
            if engine_settings {
                return Err(format!(
                    "platform = \"{ENSEMBLE_PLATFORM}\": an ensemble takes no backend, \
                     dynamic_batching, sequence_batching, model_transaction_policy or \
                     instance_group (its steps' models have their own)"
                ));
            }
            s.check(folder, &t.inputs, &t.outputs).map(Some)
        }
        (Some(ENSEMBLE_PLATFORM), None) => Err(format!(
            "platform = \"{ENSEMBLE_PLATFORM}\" needs its [ensemble_scheduling] steps"
        )),
        (None, Some(_)) => Err(format!(
            "ensemble_scheduling: only for platform = \"{ENSEMBLE_PLATFORM}\""
        )),
        (Some(other), _) => Err(format!(
            "platform: `{other}` is not `{ENSEMBLE_PLATFORM}` (an ONNX model's engine is its `backend`)"
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTensor {
    name: String,
    data_type: String,
    dims: Vec<i64>,
    #[serde(default)]
    label_filename: Option<String>,
    #[serde(default)]
    format: Option<String>,
}

/// `execution_provider`: a known one, and other than the CPU only for ONNX Runtime.
fn provider(name: Option<&str>, backend: Backend) -> Result<Provider, String> {
    let Some(name) = name else {
        return Ok(Provider::Cpu);
    };
    let provider = Provider::ALL
        .into_iter()
        .find(|p| p.name() == name)
        .ok_or_else(|| {
            let known: Vec<_> = Provider::ALL.iter().map(|p| p.name()).collect();
            format!(
                "execution_provider: `{name}` is not one of {}",
                known.join(", ")
            )
        })?;
    if provider != Provider::Cpu && backend != Backend::OnnxRuntime {
        return Err(format!(
            "execution_provider: `{name}` needs backend = \"onnxruntime\" (tract runs on the CPU)"
        ));
    }
    Ok(provider)
}

/// What a load's configuration override (the model repository extension's
/// `parameters.config`) changes of a model's `config.toml`: the fields a model rebuilt
/// from its files can take. `None`: as the file says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Override {
    pub max_batch_size: Option<u32>,
}

/// Parses the config of the model in folder `folder`. The error names the field.
pub fn parse(folder: &str, text: &str) -> Result<ModelConfig, String> {
    parse_overridden(folder, text, Override::default())
}

/// Parses the config of the model in folder `folder` with `o` in place of what the
/// text says, every check made on the result. The error names the field.
pub fn parse_overridden(folder: &str, text: &str, o: Override) -> Result<ModelConfig, String> {
    if text.len() > CONFIG_BYTES_MAX {
        return Err(format!(
            "is {} bytes, more than {CONFIG_BYTES_MAX}",
            text.len()
        ));
    }
    let mut raw: Raw = toml::from_str(text).map_err(|e| toml_error(&e))?;
    if let Some(n) = o.max_batch_size {
        raw.max_batch_size = n;
    }
    if let Some(name) = &raw.name {
        if name != folder {
            return Err(format!(
                "name: `{name}` is not the model's folder name `{folder}`"
            ));
        }
    }
    let backend = match raw.backend.as_deref() {
        None => Backend::default(),
        Some(name) => Backend::ALL
            .into_iter()
            .find(|b| b.name() == name)
            .ok_or_else(|| {
                let known: Vec<_> = Backend::ALL.iter().map(|b| b.name()).collect();
                format!("backend: `{name}` is not one of {}", known.join(", "))
            })?,
    };
    let execution_provider = provider(raw.execution_provider.as_deref(), backend)?;
    if raw.max_batch_size > BATCH_MAX {
        return Err(format!(
            "max_batch_size: {} is more than {BATCH_MAX}",
            raw.max_batch_size
        ));
    }
    if let Some(r) = raw.input.iter().find(|r| r.label_filename.is_some()) {
        return Err(format!(
            "input `{}`: label_filename is for outputs (the labels of their classes)",
            r.name
        ));
    }
    if let Some(r) = raw.output.iter().find(|r| r.format.is_some()) {
        return Err(format!("output `{}`: format is for inputs", r.name));
    }
    let mut formats = Vec::new();
    for r in &raw.input {
        let Some(format) = &r.format else { continue };
        if !INPUT_FORMATS.contains(&format.as_str()) {
            return Err(format!(
                "input `{}`: format `{format}` is not one of {}",
                r.name,
                INPUT_FORMATS.join(", ")
            ));
        }
        if format != "FORMAT_NONE" && r.dims.len() != 3 {
            return Err(format!(
                "input `{}`: format {format} is an image's: 3 dims (without the batch axis), not {}",
                r.name,
                r.dims.len()
            ));
        }
        formats.push((r.name.clone(), format.clone()));
    }
    let mut label_files = Vec::new();
    for r in &raw.output {
        if let Some(file) = &r.label_filename {
            let plain = !file.is_empty() && !file.starts_with('.') && !file.contains(['/', '\\']);
            if !plain {
                return Err(format!(
                    "output `{}`: label_filename `{file}` must be a file name in the model's folder",
                    r.name
                ));
            }
            label_files.push((r.name.clone(), file.clone()));
        }
    }
    let engine_settings = raw.backend.is_some()
        || raw.dynamic_batching.is_some()
        || raw.sequence_batching.is_some()
        || raw.model_transaction_policy.is_some()
        || !raw.instance_group.is_empty();
    let (platform, scheduling) = (raw.platform, raw.ensemble_scheduling);
    let mut inputs = tensors("input", raw.input)?;
    let mut outputs = tensors("output", raw.output)?;
    let given = inputs.iter().chain(&outputs).any(|t| t.given_dims() > 0);
    if given
        && (raw.dynamic_batching.is_some()
            || raw.sequence_batching.is_some()
            || raw
                .model_transaction_policy
                .as_ref()
                .is_some_and(|p| p.decoupled))
    {
        // Calls joined along the batch axis, a sequence's state and a decoupled
        // model's responses all need every other dim fixed.
        return Err(
            "dims: -1 (a dim each call gives) is for models without dynamic_batching, \
             sequence_batching or a decoupled transaction policy"
                .to_string(),
        );
    }
    if raw.dynamic_batching.is_some() && raw.sequence_batching.is_some() {
        return Err(
            "dynamic_batching and sequence_batching: a model has one scheduler, not both"
                .to_string(),
        );
    }
    let (sequence_batching, oldest) = match raw.sequence_batching {
        Some(section) => {
            let checked = section.check(&inputs, &outputs, raw.max_batch_size)?;
            // Controls, then states, close the inputs; states close the outputs.
            inputs.extend(checked.policy.controls.iter().map(control_spec));
            inputs.extend(checked.state_inputs);
            outputs.extend(checked.state_outputs);
            if inputs.len() > TENSORS_MAX || outputs.len() > TENSORS_MAX {
                return Err(format!(
                    "sequence_batching: with its controls and states, the model has more than \
                     {TENSORS_MAX} inputs or outputs"
                ));
            }
            (Some(checked.policy), checked.batching)
        }
        None => (None, None),
    };
    let t = Tensors {
        inputs,
        outputs,
        max_batch_size: raw.max_batch_size,
    };
    let ensemble = ensemble(folder, platform.as_deref(), scheduling, engine_settings, &t)?;
    let items = u64::from(t.max_batch_size.max(1));
    for (what, bytes) in [
        ("input", t.input_item_bytes()),
        ("output", t.output_item_bytes()),
    ] {
        if (bytes as u64).saturating_mul(items) > CALL_BYTES_MAX {
            return Err(format!(
                "{what}: {bytes} bytes an item, {items} items a call: more than {CALL_BYTES_MAX} bytes"
            ));
        }
    }
    let decoupled = raw.model_transaction_policy.is_some_and(|p| p.decoupled);
    if decoupled && (raw.dynamic_batching.is_some() || sequence_batching.is_some()) {
        return Err(
            "model_transaction_policy.decoupled: a decoupled model takes no dynamic or \
             sequence batching"
                .to_string(),
        );
    }
    let responses = if decoupled {
        Some(responses(&t)?)
    } else {
        None
    };
    // A sequence model of the oldest strategy batches by its own section's keys.
    let dynamic_batching = match raw.dynamic_batching {
        Some(section) => Some(section.check(t.max_batch_size)?),
        None => oldest,
    };
    let image = match (backend, raw.image) {
        (Backend::Image, section) => Some(Preprocess::new(section.unwrap_or_default(), &t)?),
        (_, None) => None,
        (_, Some(_)) => return Err("image: only for backend = \"image\"".to_string()),
    };
    Ok(ModelConfig {
        tensors: t,
        backend,
        execution_provider,
        id: raw.id,
        label_files,
        formats,
        dynamic_batching,
        sequence_batching,
        instances: instances(&raw.instance_group)?,
        responses,
        ensemble,
        image,
    })
}

/// A TOML error in one line: the parser's message, or where it gives none (a control
/// character in a comment, found by the fuzzer) the first line of its text, which says
/// where ("TOML parse error at line 1, column 38"); never the offending line itself,
/// which may hold control characters.
pub(crate) fn toml_error(e: &toml::de::Error) -> String {
    let message = e.message().trim();
    if !message.is_empty() {
        return message.to_string();
    }
    let text = e.to_string();
    let first = text.lines().map(str::trim).find(|l| !l.is_empty());
    first.unwrap_or("not valid TOML").to_string()
}

fn tensors(what: &str, raw: Vec<RawTensor>) -> Result<Vec<TensorSpec>, String> {
    if raw.is_empty() || raw.len() > TENSORS_MAX {
        return Err(format!(
            "{what}: a model declares 1 to {TENSORS_MAX}, this one {}",
            raw.len()
        ));
    }
    let mut out: Vec<TensorSpec> = Vec::with_capacity(raw.len());
    for r in raw {
        let at = format!("{what} `{}`", r.name);
        if r.name.is_empty() || out.iter().any(|t| t.name == r.name) {
            return Err(format!("{what}: names must be non-empty and distinct"));
        }
        let datatype = DataType::from_config_name(&r.data_type).ok_or_else(|| {
            let known: Vec<_> = DataType::ALL.iter().map(|t| t.config_name()).collect();
            format!(
                "{at}: data_type `{}` is not one of {}",
                r.data_type,
                known.join(", ")
            )
        })?;
        if r.dims.len() > RANK_MAX {
            return Err(format!("{at}: dims: more than {RANK_MAX}"));
        }
        let mut dims = Vec::with_capacity(r.dims.len());
        let mut elements = 1u64;
        for d in r.dims {
            // -1: a dim each call gives (`accel::tensors`, given dims; the batch axis
            // is not listed); every other is fixed, which bounds a payload's size.
            if d == -1 {
                dims.push(ANY_DIM);
                continue;
            }
            let d = u64::try_from(d).ok().filter(|&d| d > 0).ok_or_else(|| {
                format!("{at}: dims: {d}: every dim is positive, or -1 for one each call gives (the batch axis is not listed)")
            })?;
            elements = elements
                .checked_mul(d)
                .filter(|&e| e <= CALL_BYTES_MAX)
                .ok_or_else(|| format!("{at}: dims: more than {CALL_BYTES_MAX} elements"))?;
            dims.push(d);
        }
        out.push(TensorSpec {
            name: r.name,
            datatype,
            dims,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGITS: &str = r#"
max_batch_size = 64
[[input]]
name = "image"
data_type = "TYPE_FP32"
dims = [1, 8, 8]
[[output]]
name = "logits"
data_type = "FP32"
dims = [10]
"#;

    #[test]
    fn a_triton_style_config_parses() {
        let c = parse("digits", DIGITS).unwrap();
        assert_eq!(c.tensors.max_batch_size, 64);
        assert_eq!(c.tensors.inputs[0].dims, [1, 8, 8]);
        assert_eq!(c.tensors.outputs[0].datatype, DataType::Fp32);
        assert_eq!(c.id, None);
        assert_eq!(c.backend, Backend::Tract);
        let ort = format!("backend = \"onnxruntime\"\n{DIGITS}");
        assert_eq!(parse("digits", &ort).unwrap().backend, Backend::OnnxRuntime);
        let named = format!("name = \"digits\"\nid = 300\n{DIGITS}");
        assert_eq!(parse("digits", &named).unwrap().id, Some(300));
        assert_eq!(parse("digits", DIGITS).unwrap().dynamic_batching, None);
        let batched = format!("{DIGITS}[dynamic_batching]\nmax_queue_delay_microseconds = 300\n");
        let policy = parse("digits", &batched).unwrap().dynamic_batching.unwrap();
        assert_eq!(policy.max_batch_size, 64);
        assert_eq!(policy.max_queue_delay.as_micros(), 300);
        let bad = format!("{DIGITS}[dynamic_batching]\npreferred_batch_size = [65]\n");
        assert!(parse("digits", &bad)
            .unwrap_err()
            .contains("dynamic_batching.preferred_batch_size"));
        assert_eq!(parse("digits", DIGITS).unwrap().instances, 1);
        let two = format!(
            "{DIGITS}[[instance_group]]\ncount = 2\nkind = \"KIND_CPU\"\n[[instance_group]]\n"
        );
        assert_eq!(parse("digits", &two).unwrap().instances, 3);
        let many = format!("{DIGITS}[[instance_group]]\ncount = 65\n");
        assert!(parse("digits", &many)
            .unwrap_err()
            .contains("instance_group.count: 65"));
        let gpu = format!("{DIGITS}[[instance_group]]\nkind = \"KIND_GPU\"\n");
        assert!(parse("digits", &gpu)
            .unwrap_err()
            .contains("instance_group.kind"));
    }

    #[test]
    fn every_datatype_of_the_protocol_is_accepted() {
        for t in DataType::ALL {
            for name in [t.config_name(), t.name()] {
                let text = DIGITS.replacen("TYPE_FP32", name, 1);
                assert_eq!(
                    parse("digits", &text).unwrap().tensors.inputs[0].datatype,
                    t
                );
            }
        }
    }

    #[test]
    fn a_dim_of_minus_one_is_given_by_each_call() {
        let identity =
            "max_batch_size = 8\n[[input]]\nname = \"INPUT0\"\ndata_type = \"TYPE_STRING\"\n\
                        dims = [-1]\n[[output]]\nname = \"OUTPUT0\"\ndata_type = \"TYPE_STRING\"\n\
                        dims = [-1]\n";
        let c = parse("simple_identity", identity).unwrap();
        assert_eq!(c.tensors.inputs[0].dims, [ANY_DIM]);
        assert_eq!(c.tensors.declared_shape(&c.tensors.outputs[0]), [-1, -1]);
        let mixed = DIGITS.replacen("[1, 8, 8]", "[1, -1, 8]", 1);
        assert_eq!(
            parse("digits", &mixed).unwrap().tensors.inputs[0].dims,
            [1, ANY_DIM, 8]
        );
        // Joining calls, a sequence's state and decoupled responses need fixed dims.
        for section in [
            "[dynamic_batching]\n",
            "[model_transaction_policy]\ndecoupled = true\n",
        ] {
            let e = parse("simple_identity", &format!("{identity}{section}")).unwrap_err();
            assert!(e.contains("a dim each call gives"), "{e}");
        }
    }

    #[test]
    fn bad_configs_are_refused_naming_the_field() {
        let err = |text: &str| parse("digits", text).unwrap_err();
        let with = |from: &str, to: &str| DIGITS.replacen(from, to, 1);
        assert!(err(&format!("name = \"other\"\n{DIGITS}")).contains("folder name"));
        assert!(err(&format!("colour = 1\n{DIGITS}")).contains("unknown field `colour`"));
        let cuda = format!("backend = \"onnxruntime\"\nexecution_provider = \"cuda\"\n{DIGITS}");
        assert_eq!(
            parse("digits", &cuda).unwrap().execution_provider,
            Provider::Cuda
        );
        assert_eq!(
            parse("digits", DIGITS).unwrap().execution_provider,
            Provider::Cpu
        );
        let on_tract = err(&format!("execution_provider = \"tensorrt\"\n{DIGITS}"));
        assert!(
            on_tract.contains("needs backend = \"onnxruntime\""),
            "{on_tract}"
        );
        let unknown = err(&format!(
            "backend = \"onnxruntime\"\nexecution_provider = \"rocm\"\n{DIGITS}"
        ));
        assert!(
            unknown.contains("`rocm` is not one of cpu, cuda, tensorrt"),
            "{unknown}"
        );
        let engine = err(&format!("backend = \"pytorch\"\n{DIGITS}"));
        assert!(
            engine.contains("backend: `pytorch` is not one of tract, onnxruntime"),
            "{engine}"
        );
        assert!(err(&with("TYPE_FP32", "TYPE_COMPLEX64")).contains("data_type `TYPE_COMPLEX64`"));
        assert!(err(&with("[1, 8, 8]", "[-2, 8, 8]")).contains("positive, or -1"));
        assert!(err(&with("[1, 8, 8]", "[0, 8, 8]")).contains("positive, or -1"));
        assert!(err(&with("= 64", "= 5000")).contains("max_batch_size"));
        let huge = with("[1, 8, 8]", "[4096, 4096, 4096, 4096]");
        assert!(err(&huge).contains("more than"), "{}", err(&huge));
        let big_batch = with("[1, 8, 8]", "[1024, 1024]");
        assert!(err(&big_batch).contains("items a call"));
        let twice =
            format!("{DIGITS}[[input]]\nname = \"image\"\ndata_type = \"FP32\"\ndims = [1]\n");
        assert!(err(&twice).contains("distinct"));
        assert!(err("max_batch_size = 1\ninput = []\noutput = []").contains("1 to 16"));
        assert!(err("max_batch_size = 1").contains("missing field `input`"));
        assert!(err(&"#".repeat(CONFIG_BYTES_MAX + 1)).contains("bytes"));
        let on_input = with(
            "dims = [1, 8, 8]",
            "dims = [1, 8, 8]\nlabel_filename = \"l.txt\"",
        );
        assert!(err(&on_input).contains("label_filename is for outputs"));
        let outside = with("dims = [10]", "dims = [10]\nlabel_filename = \"../x\"");
        assert!(err(&outside).contains("a file name in the model's folder"));
        let labelled = with(
            "dims = [10]",
            "dims = [10]\nlabel_filename = \"labels.txt\"",
        );
        assert_eq!(
            parse("digits", &labelled).unwrap().label_files,
            [("logits".to_string(), "labels.txt".to_string())]
        );
    }
    #[test]
    fn a_decoupled_model_answers_its_outputs_first_dim_in_responses() {
        let repeat = |outputs: &str, batch: u32| {
            parse(
                "repeat",
                &format!(
                    "max_batch_size = {batch}\n[[input]]\nname = \"IN\"\ndata_type = \"TYPE_INT32\"\n\
                     dims = [10]\n{outputs}[model_transaction_policy]\ndecoupled = true\n"
                ),
            )
        };
        let out = |name: &str, dims: &str| {
            format!("[[output]]\nname = \"{name}\"\ndata_type = \"TYPE_INT32\"\ndims = {dims}\n")
        };
        let two = format!("{}{}", out("OUT", "[10]"), out("IDX", "[10, 2]"));
        assert_eq!(repeat(&two, 0).unwrap().responses, Some(10));
        let e = repeat(&two, 4).unwrap_err();
        assert!(e.contains("no batch axis"), "{e}");
        let disagree = format!("{}{}", out("OUT", "[10]"), out("IDX", "[9]"));
        let e = repeat(&disagree, 0).unwrap_err();
        assert!(e.contains("the same for all"), "{e}");
        assert_eq!(parse("digits", DIGITS).unwrap().responses, None);
    }
}

/// The fuzz target's body (`fuzz/fuzz_targets/model_config.rs`), also replayed over
/// the checked-in corpus by `tests/fuzz_corpus.rs` on stable Rust: any text either is
/// refused with a message or gives a configuration within every bound this module
/// promises.
#[doc(hidden)]
pub mod fuzzing {
    use super::{parse, BATCH_MAX, CALL_BYTES_MAX, RANK_MAX, TENSORS_MAX};
    use accel::tensors::TensorSpec;

    fn check_tensors(specs: &[TensorSpec]) {
        assert!((1..=TENSORS_MAX).contains(&specs.len()));
        for (i, t) in specs.iter().enumerate() {
            assert!(!t.name.is_empty());
            assert!(
                specs[..i].iter().all(|u| u.name != t.name),
                "names distinct"
            );
            // Fixed dims within the elements' bound; 0 is a given dim (-1).
            assert!(t.dims.len() <= RANK_MAX && t.dims.iter().all(|&d| d <= CALL_BYTES_MAX));
        }
    }

    /// An ensemble's steps are in run order: each reads only the ensemble's inputs
    /// and what earlier steps wrote, each tensor is written once, every output is.
    fn check_ensemble(e: &crate::ensemble::Ensemble, t: &accel::tensors::Tensors) {
        assert!((1..=crate::ensemble::STEPS_MAX).contains(&e.steps.len()));
        let mut known: Vec<&str> = t.inputs.iter().map(|i| i.name.as_str()).collect();
        let inputs = known.len();
        for step in &e.steps {
            assert!(!step.input_map.is_empty() && !step.output_map.is_empty());
            assert!(step
                .input_map
                .iter()
                .all(|(_, v)| known.contains(&v.as_str())));
            for (_, written) in &step.output_map {
                assert!(!known.contains(&written.as_str()), "written once");
                known.push(written);
            }
        }
        assert!(known.len() > inputs);
        assert!(t.outputs.iter().all(|o| known.contains(&o.name.as_str())));
    }

    pub fn model_config(data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let config = match parse("model", text) {
            Ok(config) => config,
            Err(message) => {
                assert!(!message.is_empty());
                return;
            }
        };
        let t = &config.tensors;
        check_tensors(&t.inputs);
        check_tensors(&t.outputs);
        assert!(t.max_batch_size <= BATCH_MAX);
        let items = u64::from(t.max_batch_size.max(1));
        assert!(t.input_item_bytes() as u64 * items <= CALL_BYTES_MAX);
        assert!(t.output_item_bytes() as u64 * items <= CALL_BYTES_MAX);
        assert!(config.instances >= 1);
        if t.gives_dims() {
            assert!(config.dynamic_batching.is_none() && config.sequence_batching.is_none());
            assert!(config.responses.is_none());
        }
        for (name, _) in &config.formats {
            assert!(t.inputs.iter().any(|i| &i.name == name));
        }
        for (name, file) in &config.label_files {
            assert!(t.outputs.iter().any(|o| &o.name == name));
            assert!(!file.is_empty() && !file.contains('/'));
        }
        if let Some(e) = &config.ensemble {
            check_ensemble(e, t);
        }
        if let Some(responses) = config.responses {
            assert!((1..=super::RESPONSES_MAX as usize).contains(&responses));
            assert!(t.outputs.iter().all(|o| o.dims[0] as usize == responses));
        }
    }
}
