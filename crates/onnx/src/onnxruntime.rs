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
use ort::value::{TensorElementType, TensorRef, ValueType};

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
    /// One buffer per 32-bit input: the payload's bytes are not aligned for `f32`/
    /// `i32`, so each call copies them here (16 KiB for 64 digits), reused call after
    /// call.
    words: Vec<Vec<u32>>,
}

impl Runner {
    /// Builds the session from the ONNX bytes and checks that the model's inputs and
    /// outputs are the config's (names, order, element types, ranks and fixed dims).
    pub fn new(onnx: &[u8], tensors: &Tensors, library: Option<&Path>) -> Result<Runner, String> {
        let environment = runtime(library)?;
        let option = |e: ort::Error<_>| format!("backend onnxruntime: {e}");
        let session = Session::builder(environment)
            .map_err(|e| format!("backend onnxruntime: {e}"))?
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

    /// Runs one call of `batch` items: `input` holds the inputs' elements tensor after
    /// tensor; `out` receives the outputs' the same way.
    pub fn run(
        &self,
        tensors: &Tensors,
        batch: usize,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), CallError> {
        let internal = |e: ort::Error| CallError::Internal(format!("ONNX Runtime: {e}"));
        let mut guard = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let Scratch { session, words } = &mut *guard;
        let mut rest = input;
        for (spec, buffer) in tensors.inputs.iter().zip(words.iter_mut()) {
            let (bytes, tail) = rest.split_at(spec.item_bytes() * batch);
            rest = tail;
            if spec.datatype != DataType::Uint8 {
                buffer.clear();
                buffer.extend(
                    bytes
                        .chunks_exact(4)
                        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
            }
        }
        let mut values = Vec::with_capacity(tensors.inputs.len());
        let mut rest = input;
        for (spec, buffer) in tensors.inputs.iter().zip(words.iter()) {
            let (bytes, tail) = rest.split_at(spec.item_bytes() * batch);
            rest = tail;
            let shape: Vec<i64> = tensors
                .shape(spec, batch)
                .into_iter()
                .map(|d| d as i64)
                .collect();
            let value = match spec.datatype {
                DataType::Uint8 => TensorRef::from_array_view((shape, bytes))
                    .map_err(internal)?
                    .into_dyn(),
                DataType::Fp32 => TensorRef::from_array_view((shape, as_f32(buffer)))
                    .map_err(internal)?
                    .into_dyn(),
                DataType::Int32 => TensorRef::from_array_view((shape, as_i32(buffer)))
                    .map_err(internal)?
                    .into_dyn(),
            };
            values.push(ort::session::SessionInputValue::from(value));
        }
        let results = session.run(values.as_slice()).map_err(internal)?;
        out.clear();
        for (ix, spec) in tensors.outputs.iter().enumerate() {
            let value = &results[ix];
            let want = spec.item_elements() * batch;
            let wrong = |len: usize| {
                CallError::Internal(format!(
                    "output `{}` has {len} elements, {want} expected",
                    spec.name
                ))
            };
            match spec.datatype {
                DataType::Uint8 => {
                    let (_, v) = value.try_extract_tensor::<u8>().map_err(internal)?;
                    if v.len() != want {
                        return Err(wrong(v.len()));
                    }
                    out.extend_from_slice(v);
                }
                DataType::Int32 => {
                    let (_, v) = value.try_extract_tensor::<i32>().map_err(internal)?;
                    if v.len() != want {
                        return Err(wrong(v.len()));
                    }
                    v.iter()
                        .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
                }
                DataType::Fp32 => {
                    let (_, v) = value.try_extract_tensor::<f32>().map_err(internal)?;
                    if v.len() != want {
                        return Err(wrong(v.len()));
                    }
                    v.iter()
                        .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
                }
            }
        }
        Ok(())
    }
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
    let element = match spec.datatype {
        DataType::Uint8 => TensorElementType::Uint8,
        DataType::Int32 => TensorElementType::Int32,
        DataType::Fp32 => TensorElementType::Float32,
    };
    if *ty != element {
        return mismatch(format!("has {ty:?}"));
    }
    let mut want: Vec<i64> = spec.dims.iter().map(|&d| d as i64).collect();
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
