//! Ensembles: a model whose config wires other models and accelerators into a
//! pipeline (`platform = "ensemble"`, see `netaccel_onnx::ensemble`), run inside the
//! node so that its intermediate tensors never cross the network.
//!
//! An ensemble is a catalog entry like a model ([`Ensemble`] implements
//! [`Accelerator`], declaring its inputs and outputs), so every front end names it and
//! carries its tensors as it does a model's: OIP over HTTP and gRPC, RAC by id,
//! `/v1/fn` by name. No slot hosts it. The dispatcher, finding no slot for it, runs
//! the call here: in the caller's own task when the front end awaits the answer
//! (HTTP, gRPC: [`Ensembles::run_here`]), or as a task on the ensemble thread when it
//! submits and is answered later (RAC: [`Ensembles::submit`]). Either way each step,
//! in order, goes to the dispatcher as a call of its own (to that step's slots, on
//! whatever device they are, with their queues, tenant fairness and deadline: the
//! caller's tenant and deadline), and the ensemble call is answered once — with its
//! outputs, or with the first step's refusal or error, naming the step.
//!
//! The module is in the core because it is dispatch: calls in, calls to slots out, no
//! protocol. Resolving an ensemble against the catalog ([`Ensemble::resolve`]) checks
//! what the config alone could not: each step exists, is not itself an ensemble or a
//! stateful or decoupled model, and its tensors' types and dims are the ones mapped to
//! them. A built-in accelerator (no declared tensors) takes its inputs `INPUT0`,
//! `INPUT1`… as its payload, its parameters from the step, and its one output
//! `OUTPUT0` is the tensor it is mapped to, its size checked when it runs.
//!
//! Each step counts in its model's statistics of the protocol (as Triton counts an
//! ensemble's composing models) and in its Prometheus metrics, as any call.
//!
//! Not here: running independent steps at once (steps run one after another), nested
//! ensembles.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use accel::tensors::{TensorSpec, Tensors};
use accel::{params_from_pairs, Accelerator, CallError, Catalog, Descriptor, ParamBlock};
use netaccel_onnx::ensemble::Step as StepConfig;
use rac_proto::Status;
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

use crate::core::slot::{Answer, Call, Submitted};
use crate::core::tenant::auth::{Action, Principal};
use crate::telemetry::metrics::AccelMetricsById;
use crate::telemetry::model_stats::{ModelStats, ModelStatsTable, Timing};

/// Most ensemble calls in the node at once; past it an ensemble call is refused BUSY.
pub const ENSEMBLE_CALLS_MAX: usize = 4096;

/// What runs a step's call: the dispatcher (a trait so that this module, which the
/// dispatcher uses, does not use it back).
pub trait StepRunner: Send + Sync + 'static {
    /// Submits a whole call; never blocks, every call gets one answer.
    fn submit(&self, call: Call) -> Submitted;
    /// The time of the core's clock.
    fn now(&self) -> Instant;
}

/// An ensemble as the catalog lists it, resolved against the catalog's other entries.
pub struct Ensemble {
    descriptor: Descriptor,
    tensors: Tensors,
    steps: Vec<Step>,
    /// Every tensor of the pipeline, the ensemble's inputs first; steps index it.
    table: Vec<TensorSpec>,
    /// The index in `table` of each output of the ensemble, in its declared order.
    outputs: Vec<usize>,
    /// For each tensor of `table`, the last step that reads it, if that step may take
    /// it rather than copy it (no step after it reads it, and it is not an output).
    taken_by: Vec<Option<usize>>,
    /// The steps as the config wrote them, in run order: what `/config` lists.
    scheduling: Vec<StepConfig>,
    /// Labelled outputs (`label_filename`): the label file's name and its labels,
    /// for the classification extension.
    labels: Vec<(String, String, Arc<[String]>)>,
    /// Inputs with a `format` (an image's layout), as the config declares them.
    formats: Vec<(String, String)>,
}

/// The pipeline's tensors during a call, indexed as `Ensemble::table`: `None` until
/// written, and again once the last step that reads it has taken it.
type Values = Vec<Option<Vec<u8>>>;

/// One step, resolved.
struct Step {
    accel: Arc<dyn Accelerator>,
    params: ParamBlock,
    /// The tensor each of the step's inputs reads, in the step's payload order.
    reads: Vec<usize>,
    /// The tensor each of the step's outputs writes, in its output order (`None`: an
    /// output the ensemble does not use).
    writes: Vec<Option<usize>>,
}

impl Ensemble {
    /// The ensemble `name` (accelerator `id`) of `config`, its steps found in
    /// `catalog`; the error names the step and what is wrong.
    pub fn resolve(
        name: &str,
        id: u16,
        hash: String,
        config: &netaccel_onnx::ModelConfig,
        catalog: &[Arc<dyn Accelerator>],
    ) -> Result<Ensemble, String> {
        let steps_config = &config.ensemble.as_ref().ok_or("not an ensemble")?.steps;
        let tensors = config.tensors.clone();
        if given_dims(&tensors) {
            return Err(
                "an ensemble's dims are fixed: -1 beyond the batch axis is not supported yet"
                    .to_string(),
            );
        }
        let mut table = tensors.inputs.clone();
        let mut steps = Vec::with_capacity(steps_config.len());
        for (i, s) in steps_config.iter().enumerate() {
            let at = format!("step {i} ({})", s.model_name);
            let accel = catalog
                .iter()
                .find(|a| a.descriptor().name == s.model_name)
                .ok_or_else(|| {
                    format!("{at}: no model or accelerator of this node has that name")
                })?;
            let step = match accel.tensors() {
                Some(t) => model_step(accel, t, s, &tensors, &mut table),
                None => builtin_step(
                    accel,
                    s,
                    &tensors,
                    &mut table,
                    &steps_config[i + 1..],
                    catalog,
                ),
            };
            steps.push(step.map_err(|e| format!("{at}: {e}"))?);
        }
        let outputs: Vec<usize> = tensors
            .outputs
            .iter()
            .map(|o| {
                let at = table.iter().position(|t| t.name == o.name);
                at.expect("the config checked every output is written")
            })
            .collect();
        for (o, &at) in tensors.outputs.iter().zip(&outputs) {
            agree(&table[at], o)?;
        }
        // Every index a step holds is a tensor of the table, each written once.
        assert!(steps
            .iter()
            .all(|s: &Step| s.reads.iter().all(|&t| t < table.len())));
        assert!(steps
            .iter()
            .flat_map(|s| s.writes.iter().flatten())
            .all(|&t| t >= tensors.inputs.len() && t < table.len()));
        debug_assert_eq!(outputs.len(), tensors.outputs.len());
        let descriptor = Descriptor {
            id,
            name: name.to_string(),
            hash,
            params: Vec::new(),
        };
        let mut taken_by = vec![None; table.len()];
        for (i, step) in steps.iter().enumerate() {
            for &t in &step.reads {
                taken_by[t] = Some(i);
            }
        }
        for &t in &outputs {
            taken_by[t] = None;
        }
        Ok(Ensemble {
            descriptor,
            tensors,
            steps,
            table,
            outputs,
            taken_by,
            scheduling: steps_config.clone(),
            labels: Vec::new(),
            formats: config.formats.clone(),
        })
    }

    /// The names of its steps' models and accelerators, in run order.
    pub fn step_names(&self) -> impl Iterator<Item = &str> {
        self.steps
            .iter()
            .map(|s| s.accel.descriptor().name.as_str())
    }

    /// The ensemble with the labels of its labelled outputs (`(output, labels)`, as
    /// the repository read them from the files `config` names).
    pub fn with_labels(
        mut self,
        config: &netaccel_onnx::ModelConfig,
        labels: Vec<(String, Vec<String>)>,
    ) -> Ensemble {
        for (output, l) in labels {
            let file = config.label_files.iter().find(|(o, _)| *o == output);
            let file = file.map(|(_, f)| f.clone()).unwrap_or_default();
            self.labels.push((output, file, Arc::from(l)));
        }
        self
    }

    /// Its steps as its config declares them (model, input and output maps), in run
    /// order.
    pub fn scheduling(&self) -> &[StepConfig] {
        &self.scheduling
    }

    /// The accelerator ids of its steps, in run order.
    pub fn step_ids(&self) -> impl Iterator<Item = u16> + '_ {
        self.steps.iter().map(|s| s.accel.descriptor().id)
    }

    /// Why `who` may not call this ensemble: the first step its policy does not let it
    /// call, in the words of every other refusal; `None`: it may call every step.
    pub fn refusal(&self, who: &Principal) -> Option<String> {
        let step = self.step_names().find(|s| !who.may(Action::Call(s)))?;
        Some(format!(
            "{} (a step of ensemble {})",
            who.refusal(Action::Call(step)),
            self.descriptor.name
        ))
    }

    /// Runs `call` step by step through `runner`; one answer, whatever happens.
    /// Each step counts in its model's protocol statistics in `stats` (Triton counts
    /// the composing models of an ensemble; the ensemble itself is counted by the
    /// front end that answers it, as any model).
    async fn run(
        &self,
        runner: &dyn StepRunner,
        stats: Option<&ModelStatsTable>,
        mut call: Call,
    ) -> Answer {
        let (batch, mut values) = match self.inputs(&mut call) {
            Ok(split) => split,
            Err(e) => return Answer::refusal(Status::BadRequest, e.to_string(), call),
        };
        debug_assert!(batch >= 1 && values.len() == self.table.len());
        let (mut queue_ns, mut exec_ns, mut slot) = (0, 0, None);
        for (i, step) in self.steps.iter().enumerate() {
            let started = runner.now();
            let submitted = runner.submit(Call {
                accel: Arc::clone(&step.accel),
                params: step.params,
                payload: self.step_payload(i, &mut values),
                out: Vec::new(),
                received: runner.now(),
                deadline: call.deadline,
                tenant: call.tenant,
                permit: None,
            });
            let answer = match submitted {
                Submitted::Done(answer) => answer,
                Submitted::Queued(rx) => rx.await.unwrap_or_else(|_| Answer::lost()),
            };
            let took = runner.now().saturating_duration_since(started);
            if let Some(s) = stats.and_then(|t| t.of(step.accel.descriptor().id)) {
                count(s, batch, &answer, took.as_nanos() as u64);
            }
            let at = || {
                let step = step.accel.descriptor().name.as_str();
                format!("ensemble {}, step {i} ({step})", self.descriptor.name)
            };
            if answer.status != Status::Ok {
                let message = format!("{}: {}", at(), answer.message);
                return Answer::refusal(answer.status, message, call);
            }
            (queue_ns, exec_ns, slot) = (
                queue_ns + answer.queue_ns,
                exec_ns + answer.exec_ns,
                answer.slot,
            );
            if let Err(e) = self.keep(step, batch, answer.output, &mut values) {
                return Answer::refusal(Status::Internal, format!("{}: {e}", at()), call);
            }
        }
        debug_assert!(self.outputs.iter().all(|&t| values[t].is_some()));
        let mut output = call.out;
        output.clear();
        for &t in &self.outputs {
            output.extend_from_slice(values[t].as_deref().expect("every output is written"));
        }
        call.payload.clear();
        Answer {
            status: Status::Ok,
            output,
            message: String::new(),
            slot,
            queue_ns,
            exec_ns,
            payload: call.payload,
        }
    }

    /// The call's batch and the pipeline's tensors with its inputs in them; one input
    /// is the payload itself, taken rather than copied.
    fn inputs(&self, call: &mut Call) -> Result<(usize, Values), CallError> {
        let mut values: Values = vec![None; self.table.len()];
        let (batch, parts) = self.tensors.split_inputs(&call.payload)?;
        if self.tensors.inputs.len() == 1 {
            values[0] = Some(std::mem::take(&mut call.payload));
        } else {
            for (value, part) in values.iter_mut().zip(parts) {
                *value = Some(part.to_vec());
            }
        }
        Ok((batch, values))
    }

    /// Step `i`'s payload: the tensors it reads, one after the other; a lone tensor no
    /// later step needs is taken, not copied.
    fn step_payload(&self, i: usize, values: &mut [Option<Vec<u8>>]) -> Vec<u8> {
        let reads = &self.steps[i].reads;
        debug_assert!(!reads.is_empty(), "a step reads at least one tensor");
        if let [t] = reads[..] {
            if self.taken_by[t] == Some(i) {
                return values[t].take().expect("written before it is read");
            }
        }
        let mut payload = Vec::with_capacity(
            reads
                .iter()
                .map(|&t| values[t].as_ref().map_or(0, Vec::len))
                .sum(),
        );
        for &t in reads {
            payload.extend_from_slice(values[t].as_deref().expect("written before it is read"));
        }
        payload
    }

    /// Keeps the tensors a step wrote, each checked to be its declared size; a step's
    /// whole output that is one tensor is kept as it is.
    fn keep(
        &self,
        step: &Step,
        batch: usize,
        output: Vec<u8>,
        values: &mut [Option<Vec<u8>>],
    ) -> Result<(), String> {
        let whole = match step.accel.tensors() {
            // A step without a batch axis in an ensemble without one: one item.
            Some(t) => {
                let parts = t.split_outputs(batch, &output)?;
                if parts.len() > 1 {
                    for (write, part) in step.writes.iter().zip(parts) {
                        if let Some(t) = write {
                            debug_assert!(values[*t].is_none(), "each tensor is written once");
                            values[*t] = Some(part.to_vec());
                        }
                    }
                    return Ok(());
                }
                step.writes[0]
            }
            None => {
                let [Some(t)] = step.writes[..] else {
                    unreachable!("a built-in step writes its one output")
                };
                let want = self.table[t].item_bytes() * batch;
                if output.len() != want {
                    return Err(format!(
                        "its output is {} bytes, tensor {} takes {want}",
                        output.len(),
                        self.table[t].name
                    ));
                }
                Some(t)
            }
        };
        if let Some(t) = whole {
            debug_assert!(values[t].is_none(), "each tensor is written once");
            values[t] = Some(output);
        }
        Ok(())
    }
}

/// Counts a step's `answer`, `total_ns` after it was submitted, in its statistics.
fn count(stats: &ModelStats, batch: usize, answer: &Answer, total_ns: u64) {
    if answer.status != Status::Ok {
        stats.failed(total_ns);
        return;
    }
    // The step's call was decoded and is encoded by no front end: no input or
    // output time of its own.
    stats.succeeded(&Timing {
        batch,
        input_ns: 0,
        queue_ns: answer.queue_ns,
        infer_ns: answer.exec_ns,
        output_ns: 0,
        total_ns,
    });
}

/// Whether tensor `have` (what a step reads or writes) is `want` in type and dims.
fn agree(have: &TensorSpec, want: &TensorSpec) -> Result<(), String> {
    if have.datatype == want.datatype && have.dims == want.dims {
        return Ok(());
    }
    Err(format!(
        "tensor {} is {} {:?} where {} is {} {:?}",
        have.name,
        have.datatype.name(),
        have.dims,
        want.name,
        want.datatype.name(),
        want.dims
    ))
}

/// The index of tensor `name` in `table`.
fn find(table: &[TensorSpec], name: &str) -> usize {
    let at = table.iter().position(|t| t.name == name);
    at.expect("the config checked every tensor read is written by an earlier step")
}

/// A step running a model that declares its tensors.
/// Whether any of `t`'s tensors has a dim each call gives (their payloads carry the
/// dims first; steps pass tensors of fixed layout).
fn given_dims(t: &Tensors) -> bool {
    t.inputs
        .iter()
        .chain(&t.outputs)
        .any(|s| s.given_dims() > 0)
}

fn model_step(
    accel: &Arc<dyn Accelerator>,
    t: &Tensors,
    s: &StepConfig,
    ensemble: &Tensors,
    table: &mut Vec<TensorSpec>,
) -> Result<Step, String> {
    if accel.sequence().is_some() || accel.responses().is_some() {
        return Err("a stateful or decoupled model cannot be a step".to_string());
    }
    if given_dims(t) {
        return Err(
            "a model whose dims each call gives (-1 beyond the batch axis) cannot be a step yet"
                .to_string(),
        );
    }
    if ensemble.max_batch_size > t.max_batch_size {
        return Err(format!(
            "its max_batch_size is {}, the ensemble's {}: every item of an ensemble call goes through each step",
            t.max_batch_size, ensemble.max_batch_size
        ));
    }
    if let Some((k, _)) = s
        .input_map
        .iter()
        .find(|(k, _)| !t.inputs.iter().any(|i| &i.name == k))
    {
        return Err(format!("input_map: the model has no input `{k}`"));
    }
    let mut reads = Vec::with_capacity(t.inputs.len());
    for input in &t.inputs {
        let (_, tensor) = s
            .input_map
            .iter()
            .find(|(k, _)| *k == input.name)
            .ok_or_else(|| {
                format!(
                    "input_map: the model's input `{}` is not mapped",
                    input.name
                )
            })?;
        let at = find(table, tensor);
        agree(&table[at], input)?;
        reads.push(at);
    }
    if let Some((k, _)) = s
        .output_map
        .iter()
        .find(|(k, _)| !t.outputs.iter().any(|o| &o.name == k))
    {
        return Err(format!("output_map: the model has no output `{k}`"));
    }
    let mut writes = Vec::with_capacity(t.outputs.len());
    for output in &t.outputs {
        let Some((_, tensor)) = s.output_map.iter().find(|(k, _)| *k == output.name) else {
            writes.push(None);
            continue;
        };
        writes.push(Some(table.len()));
        table.push(TensorSpec {
            name: tensor.clone(),
            ..output.clone()
        });
    }
    debug_assert_eq!(reads.len(), t.inputs.len(), "every input read");
    debug_assert_eq!(writes.len(), t.outputs.len(), "one entry per output");
    Ok(Step {
        accel: Arc::clone(accel),
        params: [0; accel::PARAMS_LEN],
        reads,
        writes,
    })
}

/// A step running a built-in accelerator: bytes in (`INPUT0`, `INPUT1`, …), bytes out
/// (`OUTPUT0`), parameters from the step. Its output takes the type and dims of the
/// ensemble output or the model input it is mapped to (`later`: the steps after it).
fn builtin_step(
    accel: &Arc<dyn Accelerator>,
    s: &StepConfig,
    ensemble: &Tensors,
    table: &mut Vec<TensorSpec>,
    later: &[StepConfig],
    catalog: &[Arc<dyn Accelerator>],
) -> Result<Step, String> {
    if ensemble.max_batch_size > 0 {
        return Err(
            "a built-in accelerator has no batch axis: an ensemble with one has max_batch_size = 0"
                .to_string(),
        );
    }
    let named = s
        .input_map
        .iter()
        .enumerate()
        .all(|(j, (k, _))| *k == format!("INPUT{j}"));
    if !named {
        return Err(
            "input_map: a built-in's inputs are INPUT0, INPUT1, …, its payload in that order"
                .to_string(),
        );
    }
    let [(output, tensor)] = &s.output_map[..] else {
        return Err("output_map: a built-in has one output, OUTPUT0".to_string());
    };
    if output != "OUTPUT0" {
        return Err("output_map: a built-in has one output, OUTPUT0".to_string());
    }
    let pairs = s.parameters.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let params = params_from_pairs(&accel.descriptor().params, pairs)
        .map_err(|e| format!("parameters: {e}"))?;
    let reads: Vec<usize> = s.input_map.iter().map(|(_, t)| find(table, t)).collect();
    let bytes: usize = reads.iter().map(|&t| table[t].item_bytes()).sum();
    accel
        .check(&params, Some(bytes))
        .map_err(|e| format!("it refuses its {bytes} bytes of input: {e}"))?;
    let spec = ensemble
        .outputs
        .iter()
        .find(|o| &o.name == tensor)
        .cloned()
        .or_else(|| consumer_spec(tensor, later, catalog))
        .ok_or_else(|| format!("output_map: `{tensor}` must be an output of the ensemble or an input of a model: a built-in's output declares no type"))?;
    debug_assert!(!reads.is_empty() && reads.len() == s.input_map.len());
    let writes = vec![Some(table.len())];
    table.push(TensorSpec {
        name: tensor.clone(),
        ..spec
    });
    Ok(Step {
        accel: Arc::clone(accel),
        params,
        reads,
        writes,
    })
}

/// The spec of the first model input that one of `later` steps maps `tensor` to.
fn consumer_spec(
    tensor: &str,
    later: &[StepConfig],
    catalog: &[Arc<dyn Accelerator>],
) -> Option<TensorSpec> {
    later.iter().find_map(|s| {
        let (input, _) = s.input_map.iter().find(|(_, t)| t == tensor)?;
        let a = catalog
            .iter()
            .find(|a| a.descriptor().name == s.model_name)?;
        a.tensors()?
            .inputs
            .iter()
            .find(|i| &i.name == input)
            .cloned()
    })
}

impl Accelerator for Ensemble {
    fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    fn check(&self, _params: &ParamBlock, payload_len: Option<usize>) -> Result<(), CallError> {
        match payload_len {
            Some(len) => self.tensors.batch_of(len).map(|_| ()),
            None => Ok(()),
        }
    }

    fn work_estimate(&self, params: &ParamBlock, payload_len: usize) -> u64 {
        debug_assert!(!self.steps.is_empty());
        self.steps
            .iter()
            .map(|s| s.accel.work_estimate(params, payload_len))
            .fold(0, u64::saturating_add)
    }

    /// Never called: no slot hosts an ensemble, the dispatcher runs it
    /// ([`Ensembles::submit`]).
    fn run(
        &self,
        _params: &ParamBlock,
        _input: &[u8],
        _out: &mut Vec<u8>,
    ) -> Result<(), CallError> {
        Err(CallError::Internal(format!(
            "ensemble {} runs in the node, step by step, not in a slot",
            self.descriptor.name
        )))
    }

    fn tensors(&self) -> Option<&Tensors> {
        Some(&self.tensors)
    }

    fn labels(&self, output: &str) -> Option<Arc<[String]>> {
        let (_, _, labels) = self.labels.iter().find(|(o, _, _)| o == output)?;
        Some(Arc::clone(labels))
    }

    fn tensor_config(&self, name: &str) -> accel::tensors::TensorConfig {
        let file = self.labels.iter().find(|(o, _, _)| o == name);
        let format = self.formats.iter().find(|(i, _)| i == name);
        accel::tensors::TensorConfig {
            format: format.map(|(_, f)| f.clone()),
            label_filename: file.map(|(_, f, _)| f.clone()),
        }
    }
}

/// `catalog` with each of the repository's ensembles (`found`, with their ids) that
/// resolves against it, and those ensembles by id. One that does not is logged, named
/// with its folder and why, and left out; the node serves the rest.
pub fn attach(
    catalog: Catalog,
    found: Vec<(netaccel_onnx::Found, u16)>,
) -> (Catalog, HashMap<u16, Arc<Ensemble>>) {
    if found.is_empty() {
        return (catalog, HashMap::new());
    }
    let mut entries: Vec<Arc<dyn Accelerator>> = catalog.iter().cloned().collect();
    let backends: Vec<(u16, Vec<&'static str>)> = entries
        .iter()
        .map(|a| {
            (
                a.descriptor().id,
                catalog.backends(a.descriptor().id).to_vec(),
            )
        })
        .collect();
    let mut by_id = HashMap::with_capacity(found.len());
    for (f, id) in &found {
        let nested = f
            .config
            .ensemble
            .iter()
            .flat_map(|e| &e.steps)
            .find(|s| found.iter().any(|(other, _)| other.name == s.model_name));
        let resolved = match nested {
            Some(s) => Err(format!(
                "step {}: is an ensemble: ensembles do not nest",
                s.model_name
            )),
            None => {
                let hash = Sha256::digest(&f.config_text)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                Ensemble::resolve(&f.name, *id, hash, &f.config, &entries[..backends.len()])
                    .map(|e| e.with_labels(&f.config, f.labels.clone()))
            }
        };
        match resolved {
            Ok(e) => {
                tracing::info!(model = %f.name, id, steps = e.steps.len(), "ensemble loaded");
                let e = Arc::new(e);
                entries.push(Arc::clone(&e) as Arc<dyn Accelerator>);
                by_id.insert(*id, e);
            }
            Err(e) => tracing::error!("ensemble refused: {}: {e}", f.folder.display()),
        }
    }
    let mut catalog = Catalog::new(entries);
    for (id, kinds) in backends {
        catalog.set_backends(id, kinds);
    }
    (catalog, by_id)
}

/// The node's ensembles and the thread that runs their calls.
pub struct Ensembles {
    by_id: HashMap<u16, Arc<Ensemble>>,
    /// The ensemble thread's runtime: one task per ensemble call, each waiting on its
    /// steps' answers (the slots do the work; this thread only moves tensors).
    runtime: tokio::runtime::Handle,
    in_flight: Arc<AtomicUsize>,
    runner: Weak<dyn StepRunner>,
    /// The protocol's statistics, where each step counts (see [`Ensemble::run`]).
    stats: Arc<ModelStatsTable>,
    /// `netaccel_accelerator_*` of every catalog entry: an ensemble's answers count
    /// in its own, as a slot counts a model's (BUSY excepted, counted by the front end
    /// that answers it).
    metrics: Arc<AccelMetricsById>,
}

impl Ensembles {
    /// Starts the ensemble thread for `by_id` (not when it is empty) calling steps
    /// through `runner` (the dispatcher).
    pub fn start(
        by_id: HashMap<u16, Arc<Ensemble>>,
        runner: Weak<dyn StepRunner>,
        stats: Arc<ModelStatsTable>,
        metrics: Arc<AccelMetricsById>,
    ) -> Option<Ensembles> {
        if by_id.is_empty() {
            return None;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("building the ensemble thread's runtime");
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("ensembles".to_string())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .expect("spawning the ensemble thread");
        Some(Ensembles {
            by_id,
            runtime: handle,
            in_flight: Arc::new(AtomicUsize::new(0)),
            runner,
            stats,
            metrics,
        })
    }

    /// The ensemble of accelerator id `id`, if it is one.
    pub fn get(&self, id: u16) -> Option<&Arc<Ensemble>> {
        self.by_id.get(&id)
    }

    /// Runs an ensemble call on the ensemble thread (for a front end that submits
    /// and is answered later, as RAC); refuses it BUSY when the node has
    /// [`ENSEMBLE_CALLS_MAX`] of them already (BUSY is counted by the front end that
    /// answers it, as the dispatcher's own).
    pub fn submit(&self, ensemble: &Arc<Ensemble>, call: Call) -> Submitted {
        debug_assert_eq!(call.accel.descriptor().id, ensemble.descriptor.id);
        let Some(permit) = self.permit() else {
            return Submitted::Done(busy(call));
        };
        let (reply, rx) = oneshot::channel();
        let (ensemble, runner) = (Arc::clone(ensemble), self.runner.clone());
        let (stats, metrics) = (Arc::clone(&self.stats), Arc::clone(&self.metrics));
        self.runtime.spawn(async move {
            let _permit = permit;
            let answer = match runner.upgrade() {
                Some(r) => {
                    let received = call.received;
                    let answer = ensemble.run(&*r, Some(&stats), call).await;
                    let took = r.now().saturating_duration_since(received);
                    counted(&metrics, &ensemble, &answer, took);
                    answer
                }
                None => Answer::refusal(Status::Unavailable, "the node is stopping", call),
            };
            // The caller may have gone; its answer goes nowhere then.
            let _ = reply.send(answer);
        });
        Submitted::Queued(rx)
    }

    /// Runs an ensemble call in the caller's own task (a front end that awaits each
    /// call's answer, as HTTP and gRPC): no hop to the ensemble thread and back.
    pub async fn run_here(
        &self,
        ensemble: &Ensemble,
        runner: &dyn StepRunner,
        call: Call,
    ) -> Answer {
        debug_assert_eq!(call.accel.descriptor().id, ensemble.descriptor.id);
        let Some(_permit) = self.permit() else {
            return busy(call);
        };
        let received = call.received;
        let answer = ensemble.run(runner, Some(&self.stats), call).await;
        let took = runner.now().saturating_duration_since(received);
        counted(&self.metrics, ensemble, &answer, took);
        answer
    }

    /// One of the [`ENSEMBLE_CALLS_MAX`] ensemble calls, if one is free.
    fn permit(&self) -> Option<Permit> {
        let taken = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if taken >= ENSEMBLE_CALLS_MAX {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Permit(Arc::clone(&self.in_flight)))
    }
}

/// An ensemble call counted in the node's; released on drop, however the call ends.
struct Permit(Arc<AtomicUsize>);

impl Drop for Permit {
    fn drop(&mut self) {
        let before = self.0.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "a permit was counted");
    }
}

/// Counts an ensemble call's `answer`, `took` after it was whole at the node, in the
/// ensemble's `netaccel_accelerator_*`; BUSY is the front end's to count.
fn counted(metrics: &AccelMetricsById, e: &Ensemble, answer: &Answer, took: Duration) {
    if answer.status == Status::Busy {
        return;
    }
    if let Some(m) = metrics.get(&e.descriptor.id) {
        m.answered(answer.status, took.as_nanos() as u64);
    }
}

fn busy(call: Call) -> Answer {
    let message = "the node runs as many ensemble calls as it may; retry";
    Answer::refusal(Status::Busy, message, call)
}

#[cfg(test)]
mod tests;
