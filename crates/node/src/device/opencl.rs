//! The OpenCL backend: slots whose calls run as OpenCL kernels on one device of an
//! OpenCL platform.
//!
//! Not built yet: a device with `backend = "opencl"` is refused at start with that
//! reason. What it will host is decided here already, so the catalog lists it.

use super::{Backend, Hostable};
use crate::config::{Config, DeviceConfig};
use crate::metrics::Metrics;

/// Whether an OpenCL device can host `accel`: a manifest with an `[opencl]` section.
pub fn hosts(accel: Hostable<'_>) -> bool {
    accel.manifest.is_some_and(|m| m.opencl.is_some())
}

pub enum OpenClBackend {}

impl OpenClBackend {
    pub fn start(
        _device: &DeviceConfig,
        _config: &Config,
        _metrics: &mut Metrics,
    ) -> Result<OpenClBackend, String> {
        Err("the opencl slot backend is not built yet".to_string())
    }
}

impl Backend for OpenClBackend {
    fn kind(&self) -> super::BackendKind {
        match *self {}
    }
    fn vendor(&self) -> String {
        match *self {}
    }
    fn platform(&self) -> String {
        match *self {}
    }
    fn load(&self, _slot: u16, _accel: Hostable<'_>) -> Result<super::Load, String> {
        match *self {}
    }
}
