//! The RTL backend: slots whose calls run under cycle-accurate simulation of a Verilog
//! design (Verilator), the module an FPGA shell would place in a partially
//! reconfigurable region (`spec/rtl-accelerators.md`, user guide `docs/rtl.md`).
//!
//! Everything about simulation lives in crate `netaccel-rtl`; this module wires it to
//! slots:
//! - what an RTL device hosts: a manifest with an `[rtl]` section, or a built-in whose
//!   RTL implementation ships with the node. The built-ins' manifests and Verilog
//!   (`rtl/accelerators/`) are compiled into the node binary and go through exactly
//!   the path a user's manifest takes, so bring-your-own RTL is not a second mechanism;
//! - loading = partial reconfiguration: the design is compiled (or found in the build
//!   cache by content hash), a fresh model is made and held in reset for 16 cycles, and
//!   the load reports the time that took and a modelled ICAP time (partial bitstream
//!   bytes ÷ the device's `icap_bytes_per_s`; the bitstream is modelled from the
//!   design's cached yosys estimate, or from a default region without one);
//! - one call: the manifest's checks, its `cycles_max` and output size evaluated for
//!   the call, then the call driven through the model; the status in `m_axis_tuser`
//!   becomes the answer, a broken design an `INTERNAL` naming the cause. The exec time
//!   reported is the cycles at the device clock, and the cycles go to `/metrics`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use accel::{Accelerator, CallError, ParamBlock};
use manifest::{Manifest, ManifestAccelerator};
use netaccel_rtl as sim;
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::{Backend, BackendKind, Hostable, Load, Loaded, Ran};
use super::{DeviceConfig, DevicesSection};
use crate::telemetry::metrics::{Metrics, SlotLabel};

/// Longest a design may take to compile before its load is refused.
const BUILD_TIME_MAX: Duration = Duration::from_secs(600);

/// The part family resource estimates are made for (`netaccel rtl synth`).
pub const SYNTH_FAMILY: &str = "xcup";

/// Partial bitstream of a design without a synthesis estimate: a region of 32,768
/// LUTs, the size its share of the reference device (see
/// [`sim::Resources::partial_bitstream_bytes`]) gives.
fn default_region_bytes() -> u64 {
    sim::Resources {
        lut: 32_768,
        ..sim::Resources::default()
    }
    .partial_bitstream_bytes()
}

macro_rules! builtin {
    ($name:literal, $file:literal) => {
        (
            $name,
            include_str!(concat!(
                "../../../../rtl/accelerators/",
                $name,
                "/accelerator.toml"
            )),
            $file,
            include_bytes!(concat!("../../../../rtl/accelerators/", $name, "/", $file)).as_slice(),
        )
    };
}

/// The built-ins' RTL implementations: manifest, and its one Verilog file.
const BUILTINS: [(&str, &str, &str, &[u8]); 4] = [
    builtin!("echo", "netaccel_echo.v"),
    builtin!("to_uppercase", "netaccel_to_uppercase.v"),
    builtin!("topk", "netaccel_topk.v"),
    builtin!("minmax", "netaccel_minmax.v"),
];

/// The built-ins' manifests, parsed once.
fn builtin_manifests() -> &'static HashMap<&'static str, Arc<Manifest>> {
    static PARSED: OnceLock<HashMap<&'static str, Arc<Manifest>>> = OnceLock::new();
    PARSED.get_or_init(|| {
        BUILTINS
            .iter()
            .map(|&(name, text, file, bytes)| {
                let path = PathBuf::from(format!("(built-in rtl)/{name}/accelerator.toml"));
                let read = |wanted: &str| -> Result<Vec<u8>, String> {
                    if wanted == file {
                        Ok(bytes.to_vec())
                    } else {
                        Err(format!("no built-in file {wanted}"))
                    }
                };
                let m = manifest::parse(&path, text, &read)
                    .unwrap_or_else(|e| panic!("the built-in RTL manifest is valid: {e}"));
                (name, Arc::new(m))
            })
            .collect()
    })
}

/// The RTL implementation of `accel`: its own manifest's `[rtl]`, or the shipped one
/// of a built-in.
fn rtl_manifest(accel: Hostable<'_>) -> Option<Arc<Manifest>> {
    match accel.manifest {
        Some(m) => m.rtl.is_some().then(|| Arc::clone(m)),
        None => builtin_manifests()
            .get(accel.accel.descriptor().name.as_str())
            .cloned(),
    }
}

/// Whether an RTL device can host `accel`.
pub fn hosts(accel: Hostable<'_>) -> bool {
    rtl_manifest(accel).is_some()
}

fn design_source(m: &Manifest) -> sim::DesignSource {
    let rtl = m.rtl.as_ref().expect("an [rtl] section");
    sim::DesignSource {
        files: rtl.sources.clone(),
        top: rtl.top.clone(),
    }
}

pub struct RtlBackend {
    device: String,
    clock_mhz: f64,
    icap_bytes_per_s: u64,
    backpressure: sim::Backpressure,
    cache_dir: PathBuf,
    verilator: String,
    /// Opened shared objects by build digest: a design loaded into several slots (or
    /// again) is opened once. Bounded by the catalog: manifests are read at start, so
    /// at most one entry per RTL accelerator the node lists.
    designs: Mutex<HashMap<String, Arc<sim::Design>>>,
    cycles: Family<SlotLabel, Counter>,
}

impl RtlBackend {
    pub fn start(
        device: &DeviceConfig,
        _config: &DevicesSection,
        metrics: &mut Metrics,
    ) -> Result<RtlBackend, String> {
        let verilator = sim::verilator_version().map_err(|e| {
            format!("an rtl device needs Verilator (Debian package `verilator`): {e}")
        })?;
        let cycles = Family::<SlotLabel, Counter>::default();
        metrics.registry_mut().register(
            "rtl_simulated_cycles",
            "Clock cycles simulated in the RTL slot (calls and resets)",
            cycles.clone(),
        );
        Ok(RtlBackend {
            device: device.name.clone(),
            clock_mhz: device.clock_mhz(),
            icap_bytes_per_s: device.icap_bytes_per_s(),
            backpressure: sim::Backpressure::random(
                device.backpressure.unwrap_or(0.0),
                device.backpressure_seed.unwrap_or(0),
            ),
            cache_dir: sim::default_cache_dir(),
            verilator,
            designs: Mutex::new(HashMap::new()),
            cycles,
        })
    }

    /// The opened design of `m`, compiled first if the cache does not have it.
    fn design(&self, m: &Manifest) -> Result<(Arc<sim::Design>, sim::CompiledDesign), String> {
        let compiled = sim::compile(&design_source(m), &self.cache_dir, BUILD_TIME_MAX)
            .map_err(|e| e.to_string())?;
        let mut designs = self.designs.lock();
        if let Some(d) = designs.get(&compiled.digest) {
            return Ok((Arc::clone(d), compiled));
        }
        let design = sim::Design::load(&compiled.library).map_err(|e| e.to_string())?;
        designs.insert(compiled.digest.clone(), Arc::clone(&design));
        Ok((design, compiled))
    }
}

impl Backend for RtlBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Rtl
    }

    fn vendor(&self) -> String {
        "verilator".to_string()
    }

    fn platform(&self) -> String {
        self.verilator.clone()
    }

    fn hosts(&self, accel: Hostable<'_>) -> Result<(), String> {
        if hosts(accel) {
            Ok(())
        } else {
            Err(super::cannot_host(BackendKind::Rtl, accel))
        }
    }

    fn prepare(&self, accel: Hostable<'_>) -> Result<(), String> {
        let m = rtl_manifest(accel).ok_or("no [rtl] section")?;
        self.design(&m).map(|_| ())
    }

    fn load(&self, slot: u16, accel: Hostable<'_>) -> Result<Load, String> {
        let started = Instant::now();
        let m = rtl_manifest(accel).ok_or_else(|| super::cannot_host(BackendKind::Rtl, accel))?;
        let (design, compiled) = self.design(&m)?;
        // A fresh model, held in reset for 16 cycles: the region after reconfiguration.
        let shell = sim::Shell::new(design.instantiate(), self.backpressure);
        let estimate = sim::cached_resources(&design_source(&m), SYNTH_FAMILY, &self.cache_dir);
        let bitstream_bytes = estimate.as_ref().map_or_else(
            default_region_bytes,
            sim::Resources::partial_bitstream_bytes,
        );
        let modelled =
            Duration::from_secs_f64(bitstream_bytes as f64 / self.icap_bytes_per_s as f64);
        let name = accel.accel.descriptor().name.clone();
        tracing::info!(
            device = %self.device,
            slot,
            accelerator = %name,
            digest = %compiled.digest,
            cached = compiled.cached,
            bitstream_bytes,
            from_synthesis = estimate.is_some(),
            "rtl design loaded"
        );
        let cycles = self.cycles.get_or_create(&SlotLabel {
            slot: slot.to_string(),
        });
        let cycles_before = shell.cycles_total();
        cycles.inc_by(cycles_before);
        Ok(Load {
            image: Arc::new(RtlImage {
                name,
                checks: ManifestAccelerator::new(Arc::clone(&m), accel.accel.descriptor().id),
                manifest: m,
                clock_mhz: self.clock_mhz,
                cycles: cycles.clone(),
                shell: Mutex::new(shell),
            }),
            took: started.elapsed(),
            cached: compiled.cached,
            modelled: Some(modelled),
        })
    }
}

/// A design in a slot.
struct RtlImage {
    name: String,
    manifest: Arc<Manifest>,
    /// The manifest's parameter and payload checks and size expressions (for a
    /// built-in, its RTL limits, such as topk's k <= 64).
    checks: ManifestAccelerator,
    clock_mhz: f64,
    cycles: Counter,
    /// One call at a time (the slot's guarantee): never contended.
    shell: Mutex<sim::Shell>,
}

impl RtlImage {
    fn limits(
        &self,
        params: &ParamBlock,
        payload_len: usize,
    ) -> Result<sim::CallLimits, CallError> {
        let rtl = self.manifest.rtl.as_ref().expect("an [rtl] section");
        let cycles_max =
            self.checks
                .size("cycles_max", &rtl.cycles_max, params, payload_len, None)?;
        let output_bytes_max = self.checks.size(
            "[output] bytes",
            &self.manifest.output_bytes,
            params,
            payload_len,
            None,
        )?;
        Ok(sim::CallLimits {
            cycles_max: cycles_max as u64,
            output_bytes_max,
        })
    }
}

impl Loaded for RtlImage {
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<Ran, CallError> {
        out.clear();
        self.checks.check(params, Some(input.len()))?;
        let limits = self.limits(params, input.len())?;
        let header = call_header(self.checks.descriptor().id, params, input.len());
        let mut shell = self.shell.lock();
        let before = shell.cycles_total();
        let result = shell.call(&header, input, limits);
        self.cycles.inc_by(shell.cycles_total() - before);
        drop(shell);
        let outcome =
            result.map_err(|v| CallError::Internal(format!("{} (rtl): {v}", self.name)))?;
        let exec_ns = (outcome.cycles as f64 * 1e3 / self.clock_mhz).round() as u64;
        match outcome.status {
            sim::status::OK => {
                *out = outcome.output;
                Ok(Ran {
                    exec_ns: Some(exec_ns),
                })
            }
            sim::status::BAD_REQUEST => Err(CallError::BadRequest(format!(
                "{} (rtl) refused the call: the design answered BAD_REQUEST",
                self.name
            ))),
            sim::status::INTERNAL => Err(CallError::Internal(format!(
                "{} (rtl) failed: the design answered INTERNAL",
                self.name
            ))),
            other => Err(CallError::Internal(format!(
                "{} (rtl) answered status {other} in m_axis_tuser, which is not 0, 1 or 8",
                self.name
            ))),
        }
    }

    fn inline_ok(&self) -> bool {
        // A simulated call takes far longer than the network thread may be held.
        false
    }
}

/// The 64-byte RAC call header the design receives first (`spec/rac-v1.md`): the
/// accelerator id, the payload length and the params; request id and deadline 0
/// (the design has no use for them, and a call's identity stays at the node).
fn call_header(id: u16, params: &ParamBlock, payload_len: usize) -> [u8; 64] {
    let mut h = [0u8; 64];
    h[..4].copy_from_slice(b"RAC1");
    h[4] = 1;
    h[6..8].copy_from_slice(&id.to_le_bytes());
    h[8..12].copy_from_slice(&(payload_len as u32).to_le_bytes());
    h[20..].copy_from_slice(params);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_rtl_manifests_parse_and_name_their_design() {
        let manifests = builtin_manifests();
        for name in ["echo", "to_uppercase", "topk", "minmax"] {
            let m = &manifests[name];
            let rtl = m.rtl.as_ref().unwrap();
            assert_eq!(rtl.top, format!("netaccel_{name}"));
            assert_eq!(rtl.sources.len(), 1);
        }
        assert!(default_region_bytes() > 1_000_000);
    }

    #[test]
    fn headers_carry_id_length_and_params() {
        let mut params = [0u8; accel::PARAMS_LEN];
        params[0] = 5;
        let h = call_header(3, &params, 0x01020304);
        assert_eq!(&h[..4], b"RAC1");
        assert_eq!((h[4], h[6], h[8], h[11], h[20]), (1, 3, 4, 1, 5));
    }
}
