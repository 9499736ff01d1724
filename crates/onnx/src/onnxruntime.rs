//! ONNX Runtime as a second engine (`backend = "onnxruntime"`), through the `ort`
//! crate with the library loaded at run time.
//!
//! Why a second engine: on small convolutional models tract 0.21 runs at a fraction
//! of ONNX Runtime's speed on the same core (bench/cnn), and a slot is worth what its
//! engine computes. Why loaded at run time: the node must build and run with nothing
//! installed (tract stays the default), and ONNX Runtime is a large C++ library that
//! users already have — the `onnxruntime` Python wheel carries `libonnxruntime.so`.
//! The node is told where it is (`onnxruntime_library` in node.toml, else the
//! `ORT_DYLIB_PATH` variable `ort` itself reads); one library per process, loaded
//! the first time a model asks for it.
//!
//! A slot is one core, so every session runs with one intra-op and one inter-op
//! thread, sequentially, without spinning: ONNX Runtime's default thread pools would
//! take cores that belong to other slots.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use accel::tensors::{DataType, TensorSpec, Tensors};
use accel::CallError;
use ort::environment::Environment;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use ort::value::{PrimitiveTensorElementType, Tensor, TensorElementType, TensorRef, ValueType};

use crate::config::Provider;
use crate::element::{self, Le};

/// The variable `ort` reads when no path is configured.
pub const LIBRARY_VARIABLE: &str = "ORT_DYLIB_PATH";

/// The process's ONNX Runtime: loaded once, the outcome kept for every later model.
static RUNTIME: OnceLock<Result<Environment, String>> = OnceLock::new();

/// Loads the library (configured path, else `ORT_DYLIB_PATH`) unless loaded already.
fn runtime(library: Option<&Path>) -> Result<&'static Environment, String> {
    let loaded = RUNTIME.get_or_init(|| {
        let path = match library {
            Some(p) => p.to_path_buf(),
            None => match std::env::var_os(LIBRARY_VARIABLE) {
                Some(p) if !p.is_empty() => PathBuf::from(p),
                _ => {
                    return Err(format!(
                        "backend onnxruntime: no ONNX Runtime library configured: set \
                         `onnxruntime_library` in node.toml (or {LIBRARY_VARIABLE}) to the path \
                         of libonnxruntime.so, e.g. the one in the onnxruntime Python wheel's \
                         capi folder"
                    ))
                }
            },
        };
        let builder = ort::init_from(&path).map_err(|e| {
            format!(
                "backend onnxruntime: onnxruntime_library: cannot load {}: {e}",
                path.display()
            )
        })?;
        builder
            .with_name("netaccel")
            .build()
            .map_err(|e| format!("backend onnxruntime: {}: {e}", path.display()))
    });
    loaded.as_ref().map_err(Clone::clone)
}

/// A model planned by ONNX Runtime: the session, behind a lock a slot never contends
/// (a slot runs one call at a time; ONNX Runtime's `run` takes the session mutably).
pub struct Runner {
    session: Mutex<Scratch>,
}

struct Scratch {
    session: Session,
    /// One buffer per FP32/INT32 input: the payload's bytes are not aligned for `f32`/
    /// `i32`, so each call copies them here (16 KiB for 64 digits), reused call after
    /// call. Inputs of the other types are copied into a value of their own per call.
    words: Vec<Vec<u32>>,
}

impl Runner {
    /// Builds the session from the ONNX bytes and checks that the model's inputs and
    /// outputs are the config's (names, order, element types, ranks and fixed dims).
    pub fn new(
        onnx: &[u8],
        tensors: &Tensors,
        library: Option<&Path>,
        provider: Provider,
    ) -> Result<Runner, String> {
        let environment = runtime(library)?;
        let option = |e: ort::Error<_>| format!("backend onnxruntime: {e}");
        let builder =
            Session::builder(environment).map_err(|e| format!("backend onnxruntime: {e}"))?;
        let session = with_provider(builder, provider)?
            .with_intra_threads(1)
            .map_err(option)?
            .with_inter_threads(1)
            .map_err(option)?
            .with_parallel_execution(false)
            .map_err(option)?
            .with_intra_op_spinning(false)
            .map_err(option)?
            .with_optimization_level(GraphOptimizationLevel::All)
            .map_err(option)?
            .commit_from_memory(onnx)
            .map_err(|e| format!("ONNX Runtime cannot load this model: {e}"))?;
        let batched = tensors.max_batch_size > 0;
        for (what, outlets, specs) in [
            ("input", session.inputs(), &tensors.inputs),
            ("output", session.outputs(), &tensors.outputs),
        ] {
            let names: Vec<&str> = outlets.iter().map(|o| o.name()).collect();
            let declared: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            if names != declared {
                return Err(format!(
                    "the model's {what}s are {names:?}, config.toml declares {declared:?} (same names, same order)"
                ));
            }
            for (outlet, spec) in outlets.iter().zip(specs) {
                fits(what, spec, outlet.dtype(), batched)?;
            }
        }
        let words = vec![Vec::new(); tensors.inputs.len()];
        Ok(Runner {
            session: Mutex::new(Scratch { session, words }),
        })
    }

    /// Runs one call of `batch` items: `parts` holds each input's bytes (see
    /// `accel::tensors`); `out` receives the outputs' one after the other.
    pub fn run(
        &self,
        tensors: &Tensors,
        batch: usize,
        parts: &[&[u8]],
        out: &mut Vec<u8>,
    ) -> Result<(), CallError> {
        let internal = |e: ort::Error| CallError::Internal(format!("ONNX Runtime: {e}"));
        let mut guard = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let Scratch { session, words } = &mut *guard;
        for ((spec, bytes), buffer) in tensors.inputs.iter().zip(parts).zip(words.iter_mut()) {
            if matches!(spec.datatype, DataType::Fp32 | DataType::Int32) {
                buffer.clear();
                buffer.extend(
                    bytes
                        .chunks_exact(4)
                        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
            }
        }
        let mut values = Vec::with_capacity(tensors.inputs.len());
        for ((spec, bytes), buffer) in tensors.inputs.iter().zip(parts).zip(words.iter()) {
            let shape: Vec<i64> = tensors
                .shape(spec, batch)
                .into_iter()
                .map(|d| d as i64)
                .collect();
            let value = match spec.datatype {
                // The digits path: views, no allocation per call.
                DataType::Uint8 => TensorRef::from_array_view((shape, *bytes))
                    .map_err(internal)?
                    .into_dyn()
                    .into(),
                DataType::Fp32 => TensorRef::from_array_view((shape, as_f32(buffer)))
                    .map_err(internal)?
                    .into_dyn()
                    .into(),
                DataType::Int32 => TensorRef::from_array_view((shape, as_i32(buffer)))
                    .map_err(internal)?
                    .into_dyn()
                    .into(),
                other => owned_input(other, shape, bytes)?,
            };
            values.push(value);
        }
        let results = session.run(values.as_slice()).map_err(internal)?;
        out.clear();
        let shapes = (0..tensors.outputs.len()).map(|ix| match results[ix].dtype() {
            ValueType::Tensor { shape, .. } => shape.iter().map(|&d| d.max(0) as u64).collect(),
            _ => Vec::new(),
        });
        crate::model::push_output_dims(tensors, batch, shapes, out)?;
        for (ix, spec) in tensors.outputs.iter().enumerate() {
            let want = spec.item_elements() * batch;
            let got = push_output(spec.datatype, &results[ix], out).map_err(internal)?;
            if spec.given_dims() == 0 && got != want {
                return Err(CallError::Internal(format!(
                    "output `{}` has {got} elements, {want} expected",
                    spec.name
                )));
            }
        }
        Ok(())
    }
}

/// An input of the other types, as a value of its own (one copy per call).
/// The session builder with `provider` registered, failing (with what to do) when the
/// loaded library lacks it or it cannot start (no GPU, no CUDA libraries): a model
/// asked to run on a GPU never falls back to the CPU silently.
fn with_provider(
    builder: ort::session::builder::SessionBuilder,
    provider: Provider,
) -> Result<ort::session::builder::SessionBuilder, String> {
    use ort::ep::ExecutionProvider;
    let (available, dispatch) = match provider {
        Provider::Cpu => return Ok(builder),
        Provider::Cuda => (
            ort::ep::CUDA::is_available(),
            ort::ep::CUDA::default().build().error_on_failure(),
        ),
        Provider::TensorRt => (
            ort::ep::TensorRT::is_available(),
            ort::ep::TensorRT::default().build().error_on_failure(),
        ),
    };
    let name = provider.name();
    match available {
        Ok(true) => {}
        Ok(false) => {
            return Err(format!(
                "execution_provider = \"{name}\": this ONNX Runtime library was built without \
                 it; point onnxruntime_library at a GPU build (the onnxruntime-gpu wheel's \
                 libonnxruntime.so)"
            ))
        }
        Err(e) => return Err(format!("execution_provider = \"{name}\": {e}")),
    }
    builder
        .with_execution_providers([dispatch])
        .map_err(|e| format!("execution_provider = \"{name}\" cannot start: {e}"))
}

fn owned_input(
    t: DataType,
    shape: Vec<i64>,
    bytes: &[u8],
) -> Result<ort::session::SessionInputValue<'static>, CallError> {
    fn typed<T: Le + PrimitiveTensorElementType + std::fmt::Debug + 'static>(
        shape: Vec<i64>,
        bytes: &[u8],
    ) -> ort::Result<ort::value::DynValue> {
        Ok(Tensor::from_array((shape, element::decode::<T>(bytes)))?.into_dyn())
    }
    let value = match t {
        DataType::Bool => typed::<bool>(shape, bytes),
        DataType::Uint16 => typed::<u16>(shape, bytes),
        DataType::Uint32 => typed::<u32>(shape, bytes),
        DataType::Uint64 => typed::<u64>(shape, bytes),
        DataType::Int8 => typed::<i8>(shape, bytes),
        DataType::Int16 => typed::<i16>(shape, bytes),
        DataType::Int64 => typed::<i64>(shape, bytes),
        DataType::Fp64 => typed::<f64>(shape, bytes),
        DataType::Bytes => {
            let strings = element::strings(bytes).map_err(CallError::BadRequest)?;
            Tensor::from_string_array((shape, strings.as_slice())).map(|t| t.into_dyn())
        }
        DataType::Uint8 | DataType::Int32 | DataType::Fp32 => {
            unreachable!("viewed without a copy")
        }
        DataType::Fp16 | DataType::Bf16 => unreachable!("refused at load (see `element_type`)"),
    };
    value
        .map(Into::into)
        .map_err(|e| CallError::Internal(format!("ONNX Runtime: {e}")))
}

/// Appends an output's elements as payload bytes; how many there were.
fn push_output(t: DataType, value: &ort::value::DynValue, out: &mut Vec<u8>) -> ort::Result<usize> {
    fn typed<T: Le + PrimitiveTensorElementType + 'static>(
        value: &ort::value::DynValue,
        out: &mut Vec<u8>,
    ) -> ort::Result<usize> {
        let (_, v) = value.try_extract_tensor::<T>()?;
        element::encode(v, out);
        Ok(v.len())
    }
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
        DataType::Fp32 => typed::<f32>(value, out),
        DataType::Fp64 => typed::<f64>(value, out),
        DataType::Bytes => {
            let (_, strings) = value.try_extract_strings()?;
            strings
                .iter()
                .for_each(|s| accel::tensors::push_bytes_element(s.as_bytes(), out));
            Ok(strings.len())
        }
        DataType::Fp16 | DataType::Bf16 => unreachable!("refused at load (see `element_type`)"),
    }
}

/// ONNX Runtime's element type for `t`; `None` for FP16 and BF16, which this engine
/// does not take yet (the `ort` crate needs its `half` feature for them).
fn element_type(t: DataType) -> Option<TensorElementType> {
    Some(match t {
        DataType::Bool => TensorElementType::Bool,
        DataType::Uint8 => TensorElementType::Uint8,
        DataType::Uint16 => TensorElementType::Uint16,
        DataType::Uint32 => TensorElementType::Uint32,
        DataType::Uint64 => TensorElementType::Uint64,
        DataType::Int8 => TensorElementType::Int8,
        DataType::Int16 => TensorElementType::Int16,
        DataType::Int32 => TensorElementType::Int32,
        DataType::Int64 => TensorElementType::Int64,
        DataType::Fp32 => TensorElementType::Float32,
        DataType::Fp64 => TensorElementType::Float64,
        DataType::Bytes => TensorElementType::String,
        DataType::Fp16 | DataType::Bf16 => return None,
    })
}

/// The words of a 32-bit input, seen as what they are (same size and alignment).
fn as_f32(words: &[u32]) -> &[f32] {
    // SAFETY: u32 and f32 have the same size and alignment and every bit pattern is a
    // valid f32; the length is the same number of elements.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast(), words.len()) }
}

fn as_i32(words: &[u32]) -> &[i32] {
    // SAFETY: as for `as_f32`: same size, same alignment, every bit pattern valid.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast(), words.len()) }
}

/// Whether ONNX Runtime's view of a model tensor agrees with the config's `spec`.
fn fits(what: &str, spec: &TensorSpec, dtype: &ValueType, batched: bool) -> Result<(), String> {
    let mismatch = |found: String| {
        Err(format!(
            "{what} `{}`: config.toml declares {} {:?}{}, the model file {found}",
            spec.name,
            spec.datatype.config_name(),
            spec.dims,
            if batched { " after the batch axis" } else { "" }
        ))
    };
    let ValueType::Tensor { ty, shape, .. } = dtype else {
        return mismatch("has a value that is not a tensor".into());
    };
    let Some(element) = element_type(spec.datatype) else {
        return Err(format!(
            "{what} `{}`: the onnxruntime engine has no {} tensors in netaccel yet (use backend = \"tract\" for FP16)",
            spec.name,
            spec.datatype.config_name()
        ));
    };
    if *ty != element {
        return mismatch(format!("has {ty:?}"));
    }
    // A dim each call gives is -1 here, as the batch axis is.
    let mut want: Vec<i64> = spec
        .dims
        .iter()
        .map(|&d| accel::tensors::dim_i64(d))
        .collect();
    if batched {
        want.insert(0, -1);
    }
    // A dim the file leaves open (-1) takes any value; a batch axis the file fixes is
    // refused (calls of other sizes would fail).
    let agree =
        shape.len() == want.len() && shape.iter().zip(&want).all(|(&d, &w)| d == w || d < 0);
    if !agree {
        return mismatch(format!("has shape {:?}", &shape[..]));
    }
    Ok(())
}
