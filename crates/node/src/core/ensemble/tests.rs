//! The ensemble's resolution against a catalog and its runs, under a StepRunner that
//! runs calls inline (no slots, no threads).

use super::*;
use crate::core::deadline::Deadline;
use accel::tensors::DataType;

/// A model of declared tensors: `scale` takes FP32 [4] `x`, gives `x * 2` as `y`.
struct Scale(Descriptor, Tensors);

fn scale(max_batch_size: u32) -> Arc<dyn Accelerator> {
    let spec = |name: &str| TensorSpec {
        name: name.into(),
        datatype: DataType::Fp32,
        dims: vec![4],
    };
    let d = Descriptor {
        id: 300,
        name: "scale".into(),
        hash: String::new(),
        params: Vec::new(),
    };
    Arc::new(Scale(
        d,
        Tensors {
            inputs: vec![spec("x")],
            outputs: vec![spec("y")],
            max_batch_size,
        },
    ))
}

impl Accelerator for Scale {
    fn descriptor(&self) -> &Descriptor {
        &self.0
    }
    fn check(&self, _: &ParamBlock, _: Option<usize>) -> Result<(), CallError> {
        Ok(())
    }
    fn work_estimate(&self, _: &ParamBlock, len: usize) -> u64 {
        len as u64
    }
    fn run(&self, _: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        out.clear();
        for c in input.chunks_exact(4) {
            let v = f32::from_le_bytes(c.try_into().unwrap()) * 2.0;
            out.extend_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }
    fn tensors(&self) -> Option<&Tensors> {
        Some(&self.1)
    }
}

/// Runs every call at once in the calling thread, as an idle slot inline would.
struct Inline;

impl StepRunner for Inline {
    fn submit(&self, call: Call) -> Submitted {
        let mut out = Vec::new();
        let answer = match call.accel.run(&call.params, &call.payload, &mut out) {
            Ok(()) => Answer {
                status: Status::Ok,
                output: out,
                message: String::new(),
                slot: Some(0),
                queue_ns: 1,
                exec_ns: 2,
                payload: Vec::new(),
            },
            Err(e) => Answer::refusal(Status::Internal, e.to_string(), call),
        };
        Submitted::Done(answer)
    }
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// minmax (a built-in) then scale, twice: `IN` → `N` → `M` → `OUT`.
const CONFIG: &str = r#"
platform = "ensemble"
max_batch_size = 0
[[input]]
name = "IN"
data_type = "TYPE_FP32"
dims = [4]
[[output]]
name = "OUT"
data_type = "TYPE_FP32"
dims = [4]
[[ensemble_scheduling.step]]
model_name = "minmax"
input_map = { INPUT0 = "IN" }
output_map = { OUTPUT0 = "N" }
[[ensemble_scheduling.step]]
model_name = "scale"
input_map = { x = "N" }
output_map = { y = "M" }
[[ensemble_scheduling.step]]
model_name = "scale"
input_map = { x = "M" }
output_map = { y = "OUT" }
"#;

fn resolve(text: &str, scale_batch: u32) -> Result<Ensemble, String> {
    let config = netaccel_onnx::config::parse("chain", text)?;
    let mut catalog = accel::builtins();
    catalog.push(scale(scale_batch));
    Ensemble::resolve("chain", 400, String::new(), &config, &catalog)
}

fn call(e: &Arc<Ensemble>, payload: Vec<u8>) -> Call {
    Call {
        accel: Arc::clone(e) as Arc<dyn Accelerator>,
        params: [0; accel::PARAMS_LEN],
        payload,
        out: Vec::new(),
        received: Instant::now(),
        deadline: Deadline::NONE,
        tenant: 1,
        permit: None,
    }
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(f)
}

#[test]
fn steps_run_in_order_and_the_outputs_are_the_last_steps() {
    let e = Arc::new(resolve(CONFIG, 0).unwrap());
    assert_eq!(
        e.step_names().collect::<Vec<_>>(),
        ["minmax", "scale", "scale"]
    );
    assert_eq!(e.tensors().unwrap().outputs[0].name, "OUT");
    // minmax: [0, 1/3, 2/3, 1]; twice doubled.
    let answer = block_on(e.run(&Inline, None, call(&e, f32s(&[2.0, 3.0, 4.0, 5.0]))));
    assert_eq!(answer.status, Status::Ok, "{}", answer.message);
    assert_eq!(answer.output, f32s(&[0.0, 4.0 / 3.0, 8.0 / 3.0, 4.0]));
    assert_eq!((answer.queue_ns, answer.exec_ns), (3, 6));
    // A payload not its inputs': one answer, BAD_REQUEST, no step run.
    let answer = block_on(e.run(&Inline, None, call(&e, vec![0; 3])));
    assert_eq!(answer.status, Status::BadRequest);
}

#[test]
fn each_step_counts_in_its_models_statistics() {
    let e = Arc::new(resolve(CONFIG, 0).unwrap());
    let mut entries = accel::builtins();
    entries.push(scale(0));
    let table = ModelStatsTable::new(&Catalog::new(entries));
    let input = f32s(&[2.0, 3.0, 4.0, 5.0]);
    let answer = block_on(e.run(&Inline, Some(&table), call(&e, input.clone())));
    assert_eq!(answer.status, Status::Ok);
    let scale = table.of(300).unwrap();
    assert_eq!((scale.inference_count(), scale.execution_count()), (2, 2));
    assert_eq!(scale.compute_infer.read(), (2, 4));
    assert_eq!(table.of(5).unwrap().inference_count(), 1, "minmax once");
    let answer = block_on(e.run(&FailingScale, Some(&table), call(&e, input)));
    assert_eq!(answer.status, Status::Internal);
    assert_eq!(scale.fail.read().0, 1, "the failing step counts a failure");
    assert_eq!(scale.inference_count(), 2);
}

/// Fails every call to `scale`, runs the rest inline.
struct FailingScale;

impl StepRunner for FailingScale {
    fn submit(&self, call: Call) -> Submitted {
        if call.accel.descriptor().name == "scale" {
            return Submitted::Done(Answer::refusal(Status::Internal, "boom", call));
        }
        Inline.submit(call)
    }
    fn now(&self) -> Instant {
        Instant::now()
    }
}

#[test]
fn a_failing_step_is_the_answer_naming_it() {
    let e = Arc::new(resolve(CONFIG, 0).unwrap());
    let answer = block_on(e.run(&FailingScale, None, call(&e, f32s(&[2.0, 3.0, 4.0, 5.0]))));
    assert_eq!(answer.status, Status::Internal);
    assert_eq!(answer.message, "ensemble chain, step 1 (scale): boom");
    assert!(answer.output.is_empty());
}

#[test]
fn a_builtin_refusing_its_input_is_refused_at_load() {
    // minmax takes whole FP32 elements: IN as UINT8 [6] gives it 6 bytes.
    let text = CONFIG
        .replacen("TYPE_FP32", "TYPE_UINT8", 1)
        .replacen("[4]", "[6]", 1);
    let err = resolve(&text, 0).err().unwrap();
    assert!(
        err.contains("step 0 (minmax): it refuses its 6 bytes of input"),
        "{err}"
    );
}

#[test]
fn what_does_not_fit_the_catalog_is_refused_naming_the_step() {
    let err = |text: &str, batch: u32| resolve(text, batch).err().unwrap();
    let e = err(&CONFIG.replace("{ x = \"M\" }", "{ z = \"M\" }"), 0);
    assert!(
        e.contains("step 2 (scale): input_map: the model has no input `z`"),
        "{e}"
    );
    let e = err(&CONFIG.replace("{ y = \"OUT\" }", "{ w = \"OUT\" }"), 0);
    assert!(e.contains("output_map: the model has no output `w`"), "{e}");
    let e = err(
        &CONFIG.replace(
            "name = \"OUT\"\ndata_type = \"TYPE_FP32\"\ndims = [4]",
            "name = \"OUT\"\ndata_type = \"TYPE_FP32\"\ndims = [2, 2]",
        ),
        0,
    );
    assert!(
        e.contains("tensor OUT is FP32 [4] where OUT is FP32 [2, 2]"),
        "{e}"
    );
    let e = err(&CONFIG.replace("\"minmax\"", "\"nosuch\""), 0);
    assert!(
        e.contains("step 0 (nosuch): no model or accelerator"),
        "{e}"
    );
    let batched = CONFIG.replace("max_batch_size = 0", "max_batch_size = 8");
    let e = err(&batched, 8);
    assert!(
        e.contains("step 0 (minmax): a built-in accelerator has no batch axis"),
        "{e}"
    );
    let e = err(
        &CONFIG.replace("{ INPUT0 = \"IN\" }", "{ IMAGE = \"IN\" }"),
        0,
    );
    assert!(e.contains("a built-in's inputs are INPUT0"), "{e}");
    let e = err(
        &CONFIG.replace(
            "{ INPUT0 = \"IN\" }",
            "{ INPUT0 = \"IN\" }\nparameters = { k = 3 }",
        ),
        0,
    );
    assert!(e.contains("parameters: unknown parameter `k`"), "{e}");
    // A step without a batch axis in an ensemble with one.
    let no_builtin = "platform = \"ensemble\"\nmax_batch_size = 8\n[[input]]\nname = \"IN\"\n\
        data_type = \"TYPE_FP32\"\ndims = [4]\n[[output]]\nname = \"OUT\"\ndata_type = \"TYPE_FP32\"\n\
        dims = [4]\n[[ensemble_scheduling.step]]\nmodel_name = \"scale\"\n\
        input_map = { x = \"IN\" }\noutput_map = { y = \"OUT\" }\n";
    let e = err(no_builtin, 0);
    assert!(
        e.contains("its max_batch_size is 0, the ensemble's 8"),
        "{e}"
    );
    assert!(resolve(no_builtin, 8).is_ok());
}

#[test]
fn a_batch_goes_through_every_step() {
    let text = "platform = \"ensemble\"\nmax_batch_size = 8\n[[input]]\nname = \"IN\"\n\
        data_type = \"TYPE_FP32\"\ndims = [4]\n[[output]]\nname = \"OUT\"\ndata_type = \"TYPE_FP32\"\n\
        dims = [4]\n[[ensemble_scheduling.step]]\nmodel_name = \"scale\"\n\
        input_map = { x = \"IN\" }\noutput_map = { y = \"OUT\" }\n";
    let e = Arc::new(resolve(text, 8).unwrap());
    let two = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let answer = block_on(e.run(&Inline, None, call(&e, two)));
    assert_eq!(answer.status, Status::Ok, "{}", answer.message);
    assert_eq!(
        answer.output,
        f32s(&[2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0])
    );
}

#[test]
fn ensemble_calls_are_bounded_and_answered_busy_past_the_bound() {
    let e = Arc::new(resolve(CONFIG, 0).unwrap());
    let mut entries = accel::builtins();
    entries.push(scale(0));
    let stats = Arc::new(ModelStatsTable::new(&Catalog::new(entries)));
    let runner: Weak<dyn StepRunner> = Weak::<Inline>::new();
    let by_id = HashMap::from([(400, Arc::clone(&e))]);
    let ensembles = Ensembles::start(by_id, runner, stats, Arc::default()).unwrap();
    assert!(Arc::ptr_eq(ensembles.get(400).unwrap(), &e));
    let held: Vec<Permit> = (0..ENSEMBLE_CALLS_MAX)
        .map(|_| ensembles.permit().expect("below the bound"))
        .collect();
    assert!(ensembles.permit().is_none());
    let input = f32s(&[2.0, 3.0, 4.0, 5.0]);
    let answer = block_on(ensembles.run_here(&e, &Inline, call(&e, input.clone())));
    assert_eq!(answer.status, Status::Busy);
    match ensembles.submit(&e, call(&e, input.clone())) {
        Submitted::Done(answer) => assert_eq!(answer.status, Status::Busy),
        Submitted::Queued(_) => panic!("past the bound, refused at once"),
    }
    drop(held);
    assert_eq!(ensembles.in_flight.load(Ordering::Relaxed), 0);
    let answer = block_on(ensembles.run_here(&e, &Inline, call(&e, input)));
    assert_eq!(answer.status, Status::Ok, "{}", answer.message);
    assert_eq!(ensembles.in_flight.load(Ordering::Relaxed), 0, "released");
}
