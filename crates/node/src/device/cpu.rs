//! The CPU backend: netaccel's own kernels (crate `accel`) on the host's cores. A
//! slot's image is the catalog entry itself; loading is free.

use std::sync::Arc;
use std::time::Duration;

use accel::{Accelerator, CallError, ParamBlock};

use super::{Backend, BackendKind, Hostable, Load, Loaded, Ran};

/// Whether the CPU can host `accel`: everything with a CPU kernel, which is every
/// catalog entry that does not come from a manifest.
pub fn hosts(accel: Hostable<'_>) -> bool {
    accel.manifest.is_none()
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
