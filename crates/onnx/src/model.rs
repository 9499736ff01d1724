//! One ONNX model: read, checked against its config, planned once by its engine
//! (tract, or ONNX Runtime when its config says `backend = "onnxruntime"`), then run
//! call after call; or, with `backend = "image"`, the node's image decoder
//! ([`crate::image`]) under the same interface.
//!
//! The [`Model`] is the catalog entry (an [`Accelerator`]); each slot that loads it
//! gets a [`Session`]. With tract the sessions share the model's plans: tract's run
//! state holds values that may not cross threads (and a slot's calls may run on a
//! network thread or on its worker), so each call builds its own, a vector of the
//! plan's nodes and the constants shared by reference count, small beside the
//! model's arithmetic (see bench/cnn). With ONNX Runtime each slot has a session of
//! its own (see [`crate::onnxruntime`]).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;

use std::borrow::Cow;

use accel::tensors::{push_given_dims, DataType, TensorConfig, TensorSpec, Tensors, ANY_DIM};
use accel::{Accelerator, CallError, Descriptor, ParamBlock};
use sha2::{Digest, Sha256};
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::infer::Factoid;

use crate::config::{self, Backend, ModelConfig, Override};
use crate::element::{self, Le};
use crate::image::Preprocess;
use crate::onnxruntime;

type Plan = TypedRunnableModel<TypedModel>;

/// Largest `model.onnx` the repository reads.
pub const MODEL_BYTES_MAX: usize = 256 << 20;

/// What the engines need from the node: set once, for every model.
#[derive(Clone, Debug, Default)]
pub struct Engines {
    /// The ONNX Runtime library (`libonnxruntime.so`) for models whose backend is
    /// onnxruntime; `None`: the `ORT_DYLIB_PATH` variable, else such models are refused.
    pub onnxruntime_library: Option<PathBuf>,
}

/// A model ready to run: the catalog entry.
pub struct Model {
    descriptor: Descriptor,
    tensors: Tensors,
    version: u64,
    engine: Engine,
    /// Multiply-accumulates of one item, for the node's work estimate.
    macs_per_item: u64,
    /// Labelled outputs and their class labels (`label_filename`).
    labels: Vec<(String, Arc<[String]>)>,
    /// What config.toml says of each tensor beyond type and dims.
    tensor_configs: Vec<(String, TensorConfig)>,
    /// Its `[dynamic_batching]`, if any.
    batching: Option<accel::batch::Policy>,
    /// Its `[sequence_batching]`, if any.
    sequence: Option<accel::sequence::Policy>,
    /// A decoupled model's responses to one request.
    responses: Option<usize>,
    /// Slots of the default CPU device that host it (`[[instance_group]]`).
    instances: usize,
    /// What it was built from, to build it again with a configuration override.
    source: Source,
}

/// A model's files as read at start, the engines' settings, and the override it was
/// built with (none at start).
struct Source {
    onnx: Arc<[u8]>,
    config_text: Arc<[u8]>,
    engines: Engines,
    built_with: Override,
}

/// The engine that runs a model, with what it made at load.
enum Engine {
    Tract(Arc<Plans>),
    /// The file (each slot builds its own session from it), the library, and the
    /// catalog entry's own session.
    OnnxRuntime {
        onnx: Arc<[u8]>,
        library: Option<PathBuf>,
        provider: crate::config::Provider,
        own: onnxruntime::Runner,
    },
    /// The image decoder (`backend = "image"`): what it makes of each image.
    Image(Arc<Preprocess>),
}

/// tract's plans of one model. tract optimises a graph far better when every dim is a
/// number: with the batch axis symbolic it resolves shapes op by op on each call and
/// picks generic kernels (bench/cnn: the digits CNN's p50 went from 22 to 12 µs for
/// one image, 270 to 244 µs for 64). So the two sizes that matter most, one item and
/// a full batch, get a plan of their own, made at load; any other batch size runs on
/// the symbolic plan. At most three plans a model: memory stays bounded whatever the
/// callers send.
struct Plans {
    /// Batch size → its own plan (1 and `max_batch_size`).
    fixed: Vec<(usize, Plan)>,
    /// Every other batch size; `None` when the model has no batch axis (its one plan
    /// is in `fixed`).
    general: Option<Plan>,
}

impl Plans {
    fn for_batch(&self, batch: usize) -> &Plan {
        match self.fixed.iter().find(|(b, _)| *b == batch) {
            Some((_, plan)) => plan,
            None => self.general.as_ref().unwrap_or(&self.fixed[0].1),
        }
    }
}

impl Model {
    /// Builds the model `name` (version `version`) from its ONNX bytes and config, with
    /// accelerator id `id`, on the engine its config names. The error says what does
    /// not fit; tract's panics on a hostile file are caught and reported the same way.
    pub fn new(
        name: &str,
        version: u64,
        id: u16,
        onnx: &[u8],
        config_text: &[u8],
        config: ModelConfig,
        engines: &Engines,
    ) -> Result<Model, String> {
        if onnx.len() > MODEL_BYTES_MAX {
            return Err(format!(
                "model.onnx is {} bytes, more than {MODEL_BYTES_MAX}",
                onnx.len()
            ));
        }
        let tensor_configs = tensor_configs(&config);
        let source = Source {
            onnx: Arc::from(onnx),
            config_text: Arc::from(config_text),
            engines: engines.clone(),
            built_with: Override::default(),
        };
        let tensors = config.tensors;
        let batching = config.dynamic_batching;
        let sequence = config.sequence_batching;
        let responses = config.responses;
        let instances = config.instances;
        let typed = || {
            catch_unwind(AssertUnwindSafe(|| typed(onnx, &tensors)))
                .map_err(|_| "tract failed on this model (a panic while reading it)".to_string())
                .and_then(|r| r)
        };
        let (engine, macs_per_item) = match config.backend {
            Backend::Image => {
                let p = config
                    .image
                    .ok_or("backend = \"image\" without its [image]")?;
                // A decode and a resize: some tens of operations a value.
                let macs = 32 * p.item_bytes() as u64;
                (Engine::Image(Arc::new(p)), macs)
            }
            Backend::Tract => {
                let (model, macs) = typed()?;
                let plans = catch_unwind(AssertUnwindSafe(|| plans(model, &tensors)))
                    .map_err(|_| "tract failed on this model (a panic while planning it)")??;
                (Engine::Tract(Arc::new(plans)), macs)
            }
            Backend::OnnxRuntime => {
                let library = engines.onnxruntime_library.clone();
                let provider = config.execution_provider;
                let own = onnxruntime::Runner::new(onnx, &tensors, library.as_deref(), provider)?;
                // ONNX Runtime checked the tensors; tract, when it reads the model too,
                // counts its work. Else a dense model's estimate: each weight (4 bytes)
                // one multiply-add per item.
                let macs = typed().map_or((onnx.len() / 4) as u64, |(_, macs)| macs);
                let onnx = Arc::clone(&source.onnx);
                let engine = Engine::OnnxRuntime {
                    onnx,
                    library,
                    provider,
                    own,
                };
                (engine, macs)
            }
        };
        let mut hash = Sha256::new();
        hash.update(onnx);
        hash.update(config_text);
        let hash = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        Ok(Model {
            descriptor: Descriptor {
                id,
                name: name.to_string(),
                hash,
                params: Vec::new(),
            },
            tensors,
            version,
            engine,
            macs_per_item,
            labels: Vec::new(),
            tensor_configs,
            batching,
            sequence,
            responses,
            instances,
            source,
        })
    }

    /// The same model built again from its files with `o` applied to its
    /// `config.toml` (a load's configuration override): parsed, checked against the
    /// ONNX graph and planned by its engine as at start, under the same name, version
    /// and id, with the same labels. The error names what does not fit; `self` is
    /// untouched either way.
    pub fn overridden(&self, o: Override) -> Result<Model, String> {
        let o = self.normalized(o)?;
        let text = std::str::from_utf8(&self.source.config_text)
            .map_err(|_| "config.toml: not UTF-8".to_string())?;
        let d = &self.descriptor;
        let config = config::parse_overridden(&d.name, text, o)?;
        // The hash tells the two apart: the override counts with the file.
        let mut hashed = self.source.config_text.to_vec();
        if o != Override::default() {
            hashed.extend_from_slice(format!("\n# override: {o:?}\n").as_bytes());
        }
        let mut m = Model::new(
            &d.name,
            self.version,
            d.id,
            &self.source.onnx,
            &hashed,
            config,
            &self.source.engines,
        )?;
        m.source.config_text = Arc::clone(&self.source.config_text);
        m.source.built_with = o;
        m.labels = self.labels.clone();
        Ok(m)
    }

    /// The override it was built with: `Override::default()` when as its files say.
    pub fn built_with(&self) -> Override {
        self.source.built_with
    }

    /// `o` without what its `config.toml` says already: a model built with either is
    /// the same model.
    pub fn normalized(&self, o: Override) -> Result<Override, String> {
        let text = std::str::from_utf8(&self.source.config_text)
            .map_err(|_| "config.toml: not UTF-8".to_string())?;
        let file = config::parse(&self.descriptor.name, text)?;
        let max_batch_size = o
            .max_batch_size
            .filter(|&n| n != file.tensors.max_batch_size);
        Ok(Override { max_batch_size })
    }

    /// The model with the class labels of its labelled outputs.
    pub fn with_labels(mut self, labels: Vec<(String, Vec<String>)>) -> Model {
        self.labels = labels
            .into_iter()
            .map(|(output, l)| (output, Arc::from(l)))
            .collect();
        self
    }

    /// Slots of the default CPU device that host it (`[[instance_group]] count`).
    pub fn instances(&self) -> usize {
        self.instances
    }

    /// The version folder the model came from.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The engine that runs it.
    pub fn backend(&self) -> Backend {
        match self.engine {
            Engine::Tract(_) => Backend::Tract,
            Engine::OnnxRuntime { .. } => Backend::OnnxRuntime,
            Engine::Image(_) => Backend::Image,
        }
    }

    /// A run state of its own, for one slot.
    pub fn session(&self) -> Result<Session, String> {
        let run = match &self.engine {
            Engine::Tract(plans) => Run::Tract(Arc::clone(plans)),
            Engine::Image(p) => Run::Image(Arc::clone(p)),
            Engine::OnnxRuntime {
                onnx,
                library,
                provider,
                ..
            } => Run::OnnxRuntime(onnxruntime::Runner::new(
                onnx,
                &self.tensors,
                library.as_deref(),
                *provider,
            )?),
        };
        Ok(Session {
            tensors: self.tensors.clone(),
            run,
        })
    }
}

/// Each tensor's `format` and `label_filename`, as config.toml gives them.
fn tensor_configs(config: &ModelConfig) -> Vec<(String, TensorConfig)> {
    let mut out: Vec<(String, TensorConfig)> = Vec::new();
    for (name, format) in &config.formats {
        let c = TensorConfig {
            format: Some(format.clone()),
            label_filename: None,
        };
        out.push((name.clone(), c));
    }
    for (name, file) in &config.label_files {
        let c = TensorConfig {
            format: None,
            label_filename: Some(file.clone()),
        };
        out.push((name.clone(), c));
    }
    out
}

/// Reads the model with tract, checks it against the config and declutters it; also
/// counts its work per item.
fn typed(onnx: &[u8], tensors: &Tensors) -> Result<(TypedModel, u64), String> {
    // A type tract lacks is named from the config, before tract stumbles on the file.
    for spec in tensors.inputs.iter().chain(&tensors.outputs) {
        tract_datum(spec)?;
    }
    let mut model = tract_onnx::onnx()
        .model_for_read(&mut &onnx[..])
        .map_err(|e| format!("model.onnx is not a model tract can read: {e:#}"))?;
    let batched = tensors.max_batch_size > 0;
    let batch = model.symbols.sym("batch");
    let names = |model: &InferenceModel, outlets: &[OutletId]| -> Vec<String> {
        outlets
            .iter()
            .map(|o| {
                model
                    .outlet_label(*o)
                    .unwrap_or(&model.node(o.node).name)
                    .to_string()
            })
            .collect()
    };
    let inputs = names(&model, model.input_outlets().map_err(|e| e.to_string())?);
    let outputs = names(&model, model.output_outlets().map_err(|e| e.to_string())?);
    same_names("input", &inputs, &tensors.inputs)?;
    same_names("output", &outputs, &tensors.outputs)?;
    for (ix, spec) in tensors.inputs.iter().enumerate() {
        // A dim each call gives is a symbol of its own, resolved from the call's input.
        let mut shape: TVec<TDim> = spec
            .dims
            .iter()
            .enumerate()
            .map(|(axis, &d)| match d {
                ANY_DIM => model.symbols.sym(&format!("given_{ix}_{axis}")).into(),
                d => (d as i64).into(),
            })
            .collect();
        if batched {
            shape.insert(0, batch.clone().into());
        }
        let declared = model.input_fact(ix).map_err(|e| e.to_string())?;
        fits_declared(spec, &shape, declared)?;
        let fact = InferenceFact::dt_shape(tract_datum(spec)?, shape);
        model
            .set_input_fact(ix, fact)
            .map_err(|e| format!("input `{}`: {e:#}", spec.name))?;
    }
    let model = model
        .into_typed()
        .and_then(|m| m.into_decluttered())
        .map_err(|e| format!("the model does not fit its config.toml's inputs: {e:#}"))?;
    let macs_per_item = macs(&model, batched.then_some(&batch));
    for (ix, spec) in tensors.outputs.iter().enumerate() {
        let fact = model.output_fact(ix).map_err(|e| e.to_string())?;
        let mut want: TVec<Option<TDim>> = spec
            .dims
            .iter()
            .map(|&d| (d != ANY_DIM).then(|| (d as i64).into()))
            .collect();
        if batched {
            want.insert(0, Some(batch.clone().into()));
        }
        // A given dim (None) is whatever the run computes.
        let shape_fits = fact.shape.len() == want.len()
            && fact
                .shape
                .iter()
                .zip(&want)
                .all(|(d, w)| w.as_ref().is_none_or(|w| w == d));
        if fact.datum_type != tract_datum(spec)? || !shape_fits {
            return Err(format!(
                "output `{}`: the model computes {:?} of shape {:?}, config.toml declares {} {:?}{}",
                spec.name,
                fact.datum_type,
                fact.shape,
                spec.datatype.config_name(),
                spec.dims,
                if batched { " after the batch axis" } else { "" }
            ));
        }
    }
    Ok((model, macs_per_item))
}

/// Optimises and plans the checked model: a plan per fixed batch size (see [`Plans`]).
fn plans(model: TypedModel, tensors: &Tensors) -> Result<Plans, String> {
    let optimise = |m: TypedModel| {
        m.into_optimized()
            .and_then(|m| m.into_runnable())
            .map_err(|e| format!("tract could not optimise the model: {e:#}"))
    };
    let Some(batch) = model
        .symbols
        .get("batch")
        .filter(|_| tensors.max_batch_size > 0)
    else {
        return Ok(Plans {
            fixed: vec![(1, optimise(model)?)],
            general: None,
        });
    };
    let mut fixed = Vec::with_capacity(2);
    let max = tensors.max_batch_size as usize;
    for size in [1, max] {
        if fixed.iter().any(|(b, _)| *b == size) {
            continue;
        }
        let values = SymbolValues::default().with(&batch, size as i64);
        let concrete = model
            .concretize_dims(&values)
            .map_err(|e| format!("tract could not fix the batch at {size}: {e:#}"))?;
        fixed.push((size, optimise(concrete)?));
    }
    Ok(Plans {
        fixed,
        general: Some(optimise(model)?),
    })
}

/// Whether the config's input `spec` (full `shape`, batch axis first when batched)
/// agrees with what the ONNX file declares for it: its element type, its rank, and every
/// dim the file fixes (the file's symbolic dims, like a batch `N`, take any value).
fn fits_declared(
    spec: &TensorSpec,
    shape: &[TDim],
    declared: &InferenceFact,
) -> Result<(), String> {
    let mismatch = |what: String| {
        Err(format!(
            "input `{}`: config.toml declares {} {:?}, the model file {what}",
            spec.name,
            spec.datatype.config_name(),
            spec.dims
        ))
    };
    if let Some(dt) = declared.datum_type.concretize() {
        if Some(dt) != datum(spec.datatype) {
            return mismatch(format!("takes {dt:?}"));
        }
    }
    if let Some(dims) = declared.shape.concretize() {
        let fixed = |d: &TDim| d.to_i64().ok();
        let agree = dims.len() == shape.len()
            && dims
                .iter()
                .zip(shape)
                .all(|(d, s)| fixed(d).is_none() || fixed(d) == fixed(s));
        if !agree {
            return mismatch(format!("takes shape {dims:?}"));
        }
    }
    Ok(())
}

fn same_names(what: &str, model: &[String], declared: &[TensorSpec]) -> Result<(), String> {
    let declared: Vec<&str> = declared.iter().map(|t| t.name.as_str()).collect();
    if model != declared.as_slice() {
        return Err(format!(
            "the model's {what}s are {model:?}, config.toml declares {declared:?} (same names, same order)"
        ));
    }
    Ok(())
}

/// Multiply-accumulates of one item: tract's cost model with the batch at 1.
fn macs(model: &TypedModel, batch: Option<&Symbol>) -> u64 {
    let mut values = SymbolValues::default();
    if let Some(b) = batch {
        values = values.with(b, 1);
    }
    let mut total = 0u64;
    for node in model.nodes() {
        let inputs: TVec<&TypedFact> = node
            .inputs
            .iter()
            .filter_map(|o| model.outlet_fact(*o).ok())
            .collect();
        for (cost, n) in node.op.cost(&inputs).unwrap_or_default() {
            if matches!(cost, tract_onnx::tract_core::ops::Cost::FMA(_)) {
                total = total.saturating_add(n.eval(&values).to_i64().unwrap_or(0).max(0) as u64);
            }
        }
    }
    total.max(1)
}

/// tract's element type for `t`; `None` for BF16, which tract 0.21 does not have.
fn datum(t: DataType) -> Option<DatumType> {
    Some(match t {
        DataType::Bool => DatumType::Bool,
        DataType::Uint8 => DatumType::U8,
        DataType::Uint16 => DatumType::U16,
        DataType::Uint32 => DatumType::U32,
        DataType::Uint64 => DatumType::U64,
        DataType::Int8 => DatumType::I8,
        DataType::Int16 => DatumType::I16,
        DataType::Int32 => DatumType::I32,
        DataType::Int64 => DatumType::I64,
        DataType::Fp16 => DatumType::F16,
        DataType::Fp32 => DatumType::F32,
        DataType::Fp64 => DatumType::F64,
        DataType::Bytes => DatumType::String,
        DataType::Bf16 => return None,
    })
}

/// tract's element type for a declared tensor, or the refusal naming it.
fn tract_datum(spec: &TensorSpec) -> Result<DatumType, String> {
    datum(spec.datatype).ok_or_else(|| {
        format!(
            "`{}`: the tract engine has no {} tensors (use backend = \"onnxruntime\" or another type)",
            spec.name,
            spec.datatype.config_name()
        )
    })
}

impl Accelerator for Model {
    fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    fn check(&self, _params: &ParamBlock, payload_len: Option<usize>) -> Result<(), CallError> {
        match payload_len {
            Some(len) => self.tensors.batch_of(len).map(|_| ()),
            None => Ok(()),
        }
    }

    fn work_estimate(&self, _params: &ParamBlock, payload_len: usize) -> u64 {
        let items = payload_len / self.tensors.input_item_bytes().max(1);
        self.macs_per_item.saturating_mul(items.max(1) as u64)
    }

    fn run(&self, _params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        match &self.engine {
            Engine::Tract(plans) => Session {
                tensors: self.tensors.clone(),
                run: Run::Tract(Arc::clone(plans)),
            }
            .run(input, out),
            Engine::OnnxRuntime { own, .. } => {
                let (tensors, input) = given(&self.tensors, input)?;
                let (batch, parts) = tensors.split_inputs(input)?;
                own.run(&tensors, batch, &parts, out)
            }
            Engine::Image(p) => p.run(&self.tensors, input, out),
        }
    }

    fn engine(&self) -> Option<&'static str> {
        Some(self.backend().name())
    }

    fn tensors(&self) -> Option<&Tensors> {
        Some(&self.tensors)
    }

    fn tensor_config(&self, name: &str) -> TensorConfig {
        self.tensor_configs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.clone())
            .unwrap_or_default()
    }

    fn labels(&self, output: &str) -> Option<Arc<[String]>> {
        self.labels
            .iter()
            .find(|(o, _)| o == output)
            .map(|(_, l)| Arc::clone(l))
    }

    fn batching(&self) -> Option<&accel::batch::Policy> {
        self.batching.as_ref()
    }

    fn sequence(&self) -> Option<&accel::sequence::Policy> {
        self.sequence.as_ref()
    }

    fn responses(&self) -> Option<usize> {
        self.responses
    }
}

/// A model as loaded into one slot.
pub struct Session {
    tensors: Tensors,
    run: Run,
}

enum Run {
    Tract(Arc<Plans>),
    OnnxRuntime(onnxruntime::Runner),
    Image(Arc<Preprocess>),
}

impl Session {
    /// Runs one call: `input` is the payload (inputs' elements, tensor after tensor),
    /// `out` receives the outputs the same way.
    pub fn run(&self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        out.clear();
        if let Run::Image(p) = &self.run {
            return p.run(&self.tensors, input, out);
        }
        let (tensors, input) = given(&self.tensors, input)?;
        let (batch, parts) = tensors.split_inputs(input)?;
        let plans = match &self.run {
            Run::Tract(plans) => plans,
            Run::OnnxRuntime(runner) => return runner.run(&tensors, batch, &parts, out),
            Run::Image(_) => unreachable!("run above"),
        };
        let mut values: TVec<TValue> = TVec::with_capacity(tensors.inputs.len());
        for (spec, bytes) in tensors.inputs.iter().zip(parts) {
            let shape: Vec<usize> = tensors
                .shape(spec, batch)
                .into_iter()
                .map(|d| d as usize)
                .collect();
            values.push(to_tensor(spec.datatype, &shape, bytes)?.into());
        }
        let plan = plans.for_batch(batch);
        let results = catch_unwind(AssertUnwindSafe(|| plan.run(values)))
            .map_err(|_| CallError::Internal("tract panicked running the model".into()))?
            .map_err(|e| CallError::Internal(format!("running the model: {e:#}")))?;
        let shapes = results
            .iter()
            .map(|v| v.shape().iter().map(|&d| d as u64).collect());
        push_output_dims(&tensors, batch, shapes, out)?;
        for (spec, value) in tensors.outputs.iter().zip(&results) {
            let want = spec.item_elements() * batch;
            if spec.given_dims() == 0 && value.len() != want {
                return Err(CallError::Internal(format!(
                    "output `{}` has {} elements, {want} expected",
                    spec.name,
                    value.len()
                )));
            }
            from_tensor(spec.datatype, value, out)?;
        }
        Ok(())
    }
}

/// `tensors` with the given dims of the call's `input` filled in, and the rest of the
/// input; as they are for a model without given dims (`accel::tensors`).
pub(crate) fn given<'t, 'p>(
    tensors: &'t Tensors,
    input: &'p [u8],
) -> Result<(Cow<'t, Tensors>, &'p [u8]), CallError> {
    if !tensors.gives_dims() {
        return Ok((Cow::Borrowed(tensors), input));
    }
    let (given, rest) = tensors.given_inputs(input)?;
    Ok((Cow::Owned(given), rest))
}

/// Writes the given dims of the outputs a run computed (`shapes`: each output's whole
/// shape, the batch axis first when the model has one) at the front of `out`, after
/// checking them against the declaration; nothing for a model without given output
/// dims.
pub(crate) fn push_output_dims(
    tensors: &Tensors,
    batch: usize,
    shapes: impl Iterator<Item = Vec<u64>>,
    out: &mut Vec<u8>,
) -> Result<(), CallError> {
    if tensors.outputs.iter().all(|s| s.given_dims() == 0) {
        return Ok(());
    }
    debug_assert!(out.is_empty(), "the given dims lead the output");
    let lead = usize::from(tensors.max_batch_size > 0);
    let mut items = Vec::with_capacity(tensors.outputs.len());
    for (spec, shape) in tensors.outputs.iter().zip(shapes) {
        if lead == 1 && shape.first() != Some(&(batch as u64)) {
            return Err(CallError::Internal(format!(
                "output `{}` has shape {shape:?}, not a batch of {batch}",
                spec.name
            )));
        }
        items.push(shape[lead.min(shape.len())..].to_vec());
    }
    push_given_dims(&tensors.outputs, items.iter().map(Vec::as_slice), out)
        .map_err(CallError::Internal)
}

/// A tract tensor of `shape` from an input's payload bytes.
fn to_tensor(t: DataType, shape: &[usize], bytes: &[u8]) -> Result<Tensor, CallError> {
    fn typed<T: Le + Datum>(shape: &[usize], bytes: &[u8]) -> TractResult<Tensor> {
        Tensor::from_shape(shape, &element::decode::<T>(bytes))
    }
    let internal = |e: TractError| CallError::Internal(format!("{e:#}"));
    match t {
        DataType::Bool => typed::<bool>(shape, bytes),
        DataType::Uint8 => Tensor::from_shape(shape, bytes),
        DataType::Uint16 => typed::<u16>(shape, bytes),
        DataType::Uint32 => typed::<u32>(shape, bytes),
        DataType::Uint64 => typed::<u64>(shape, bytes),
        DataType::Int8 => typed::<i8>(shape, bytes),
        DataType::Int16 => typed::<i16>(shape, bytes),
        DataType::Int32 => typed::<i32>(shape, bytes),
        DataType::Int64 => typed::<i64>(shape, bytes),
        DataType::Fp16 => {
            let bits = element::decode::<u16>(bytes);
            let v: Vec<f16> = bits.into_iter().map(f16::from_bits).collect();
            Tensor::from_shape(shape, &v)
        }
        DataType::Fp32 => typed::<f32>(shape, bytes),
        DataType::Fp64 => typed::<f64>(shape, bytes),
        DataType::Bytes => {
            let strings = element::strings(bytes).map_err(CallError::BadRequest)?;
            tract_ndarray::ArrayD::from_shape_vec(shape, strings)
                .map(IntoTensor::into_tensor)
                .map_err(TractError::from)
        }
        DataType::Bf16 => unreachable!("a model with BF16 tensors is refused at load"),
    }
    .map_err(internal)
}

/// Appends an output tensor's elements as payload bytes.
fn from_tensor(t: DataType, value: &Tensor, out: &mut Vec<u8>) -> Result<(), CallError> {
    fn typed<T: Le + Datum>(value: &Tensor, out: &mut Vec<u8>) -> TractResult<()> {
        element::encode(value.as_slice::<T>()?, out);
        Ok(())
    }
    let internal = |e: TractError| CallError::Internal(format!("{e:#}"));
    match t {
        DataType::Bool => typed::<bool>(value, out),
        DataType::Uint8 => typed::<u8>(value, out),
        DataType::Uint16 => typed::<u16>(value, out),
        DataType::Uint32 => typed::<u32>(value, out),
        DataType::Uint64 => typed::<u64>(value, out),
        DataType::Int8 => typed::<i8>(value, out),
        DataType::Int16 => typed::<i16>(value, out),
        DataType::Int32 => typed::<i32>(value, out),
        DataType::Int64 => typed::<i64>(value, out),
        DataType::Fp16 => value.as_slice::<f16>().map(|v| {
            let bits: Vec<u16> = v.iter().map(|x| x.to_bits()).collect();
            element::encode(&bits, out)
        }),
        DataType::Fp32 => typed::<f32>(value, out),
        DataType::Fp64 => typed::<f64>(value, out),
        DataType::Bytes => value.as_slice::<String>().map(|v| {
            v.iter()
                .for_each(|s| accel::tensors::push_bytes_element(s.as_bytes(), out))
        }),
        DataType::Bf16 => unreachable!("a model with BF16 tensors is refused at load"),
    }
    .map_err(internal)
}
