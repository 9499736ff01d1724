//! The CPU backend: netaccel's own kernels (crate `accel`) and the ONNX models of the
//! model repository (crate `netaccel-onnx`, run by tract) on the host's cores. A
//! kernel's image is the catalog entry itself and loading it is free; a model's image
//! is a tract session of its own (the model was planned once, when the node read it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use accel::{Accelerator, CallError, ParamBlock};
use netaccel_onnx::Session;

use super::{Backend, BackendKind, Hostable, Load, Loaded, Ran};

/// Whether the CPU can host `accel`: everything with a CPU kernel (every catalog entry
/// that does not come from a manifest), ONNX models included. An entry that declares
/// tensors but is no model (an ensemble, run step by step by the dispatcher) has none.
pub fn hosts(accel: Hostable<'_>) -> bool {
    accel.manifest.is_none() && (accel.model.is_some() || accel.accel.tensors().is_none())
}

pub struct Cpu;

impl Backend for Cpu {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }

    fn vendor(&self) -> String {
        "netaccel".to_string()
    }

    fn platform(&self) -> String {
        "host".to_string()
    }

    fn load(&self, _slot: u16, accel: Hostable<'_>) -> Result<Load, String> {
        if let Some(model) = accel.model {
            let started = Instant::now();
            let session = model.session()?;
            return Ok(Load {
                image: Arc::new(ModelImage(session)),
                took: started.elapsed(),
                cached: true,
                modelled: None,
            });
        }
        Ok(Load {
            image: Arc::new(CpuImage(Arc::clone(accel.accel))),
            took: Duration::ZERO,
            cached: true,
            modelled: None,
        })
    }
}

/// A built-in CPU kernel in a slot.
pub struct CpuImage(pub Arc<dyn Accelerator>);

impl Loaded for CpuImage {
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<Ran, CallError> {
        self.0.run(params, input, out).map(|()| Ran::default())
    }
}

/// An ONNX model in a slot: its own tract session.
pub struct ModelImage(Session);

impl Loaded for ModelImage {
    fn run(&self, _params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<Ran, CallError> {
        self.0.run(input, out).map(|()| Ran::default())
    }
}
