//! What node.toml says about devices: `[[devices]]` entries, the `[[slots]]` of the
//! default CPU device, and the section of the configuration the devices are started
//! from ([`DevicesSection`]). The devices own these types; the configuration file's
//! loader (`crate::config`) composes them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One slot and what it holds at start-up.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SlotConfig {
    /// Name of the accelerator loaded at start-up.
    pub accelerator: String,
}

/// The kind of device a `[[devices]]` entry is: what runs its slots' calls.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// netaccel's own kernels on the host's cores.
    Cpu,
    /// OpenCL kernels on a device of an OpenCL platform (PoCL, a GPU, an FPGA).
    Opencl,
    /// RTL accelerators under cycle-accurate simulation.
    Rtl,
}

impl BackendKind {
    /// The name in node.toml, `/v1/slots`, `/v1/accelerators` and the registry.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Opencl => "opencl",
            BackendKind::Rtl => "rtl",
        }
    }
}

/// An OpenCL platform, by a substring of its name or by its index.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum PlatformChoice {
    Index(usize),
    Name(String),
}

/// One `[[devices]]` entry (`spec/accelerator-manifest.md`, "Devices in node.toml").
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// Unique among the node's devices; the registry's device id.
    pub name: String,
    pub backend: BackendKind,
    /// `opencl` only: the platform (default: the first).
    pub platform: Option<PlatformChoice>,
    /// `opencl` only: the device's index within the platform (default 0).
    pub device: Option<usize>,
    /// `rtl` only: the accelerator clock, for modelled times (default 250).
    pub clock_mhz: Option<f64>,
    /// `rtl` only: configuration port bandwidth, for modelled reconfiguration times
    /// (default 400000000).
    pub icap_bytes_per_s: Option<u64>,
    /// `rtl` only: probability of a pause in each cycle on both of a design's streams
    /// (default 0: no back-pressure), to test designs through the node.
    pub backpressure: Option<f64>,
    /// `rtl` only: seed of the back-pressure pattern (default 0).
    pub backpressure_seed: Option<u64>,
    /// What each of the device's slots loads at start, by accelerator name.
    pub slots: Vec<String>,
}

/// Default accelerator clock of an RTL device.
pub const RTL_CLOCK_MHZ_DEFAULT: f64 = 250.0;
/// Default ICAP bandwidth of an RTL device (32 bits at 100 MHz).
pub const RTL_ICAP_BYTES_PER_S_DEFAULT: u64 = 400_000_000;

impl DeviceConfig {
    /// The device's fields that belong to its backend, checked.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let name = &self.name;
        let name_ok = !name.is_empty()
            && name.len() <= 32
            && name
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-');
        if !name_ok {
            return Err(format!(
                "device name {name:?} must be 1 to 32 characters of a-z, 0-9, _ and -"
            ));
        }
        let misplaced = |key: &str, wanted: BackendKind| {
            Err(format!(
                "device {name}: `{key}` is for {} devices, and this one is {}",
                wanted.as_str(),
                self.backend.as_str()
            ))
        };
        if self.backend != BackendKind::Opencl {
            if self.platform.is_some() {
                return misplaced("platform", BackendKind::Opencl);
            }
            if self.device.is_some() {
                return misplaced("device", BackendKind::Opencl);
            }
        }
        if self.backend != BackendKind::Rtl {
            if self.clock_mhz.is_some() {
                return misplaced("clock_mhz", BackendKind::Rtl);
            }
            if self.icap_bytes_per_s.is_some() {
                return misplaced("icap_bytes_per_s", BackendKind::Rtl);
            }
            if self.backpressure.is_some() {
                return misplaced("backpressure", BackendKind::Rtl);
            }
            if self.backpressure_seed.is_some() {
                return misplaced("backpressure_seed", BackendKind::Rtl);
            }
        }
        if let Some(p) = self.backpressure {
            // 1 would pause forever: every call would run into its cycle bound.
            if !(0.0..1.0).contains(&p) {
                return Err(format!(
                    "device {name}: backpressure must be within [0, 1), got {p}"
                ));
            }
        }
        if let Some(mhz) = self.clock_mhz {
            if !(mhz.is_finite() && mhz > 0.0 && mhz <= 100_000.0) {
                return Err(format!(
                    "device {name}: clock_mhz must be within (0, 100000]"
                ));
            }
        }
        if self.icap_bytes_per_s == Some(0) {
            return Err(format!(
                "device {name}: icap_bytes_per_s must be at least 1"
            ));
        }
        if let Some(PlatformChoice::Name(p)) = &self.platform {
            if p.is_empty() {
                return Err(format!(
                    "device {name}: platform = \"\" matches every platform; give a name \
                     substring or an index"
                ));
            }
        }
        if self.slots.is_empty() {
            return Err(format!(
                "device {name}: slots = [] configures no slot; list what each slot loads"
            ));
        }
        Ok(())
    }

    /// `clock_mhz`, or its default.
    pub fn clock_mhz(&self) -> f64 {
        self.clock_mhz.unwrap_or(RTL_CLOCK_MHZ_DEFAULT)
    }

    /// `icap_bytes_per_s`, or its default.
    pub fn icap_bytes_per_s(&self) -> u64 {
        self.icap_bytes_per_s
            .unwrap_or(RTL_ICAP_BYTES_PER_S_DEFAULT)
    }
}

/// What the devices are started from: the configuration's section of theirs.
#[derive(Clone, Debug)]
pub struct DevicesSection {
    /// The devices to start, in order (`[[devices]]`, or the default CPU device).
    pub devices: Vec<DeviceConfig>,
    /// `accelerators_dir`: user accelerators' manifests.
    pub accelerators_dir: Option<PathBuf>,
    /// `models_dir`: the model repository.
    pub models_dir: Option<PathBuf>,
    /// `onnxruntime_library`: the ONNX Runtime library models may run on.
    pub onnxruntime_library: Option<PathBuf>,
    /// `opencl_program_dir`: where OpenCL slots' compiled programs are cached.
    pub opencl_program_dir: Option<PathBuf>,
    /// `opencl_library`: the OpenCL library OpenCL devices are opened through.
    pub opencl_library: String,
    /// `opencl_program_cache_entries_max`.
    pub opencl_program_cache_entries_max: usize,
    /// `fault_injection`: the test-only accelerators that misbehave on purpose.
    pub fault_injection: bool,
}
