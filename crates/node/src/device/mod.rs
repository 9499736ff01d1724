//! Devices: what runs a slot's calls.
//!
//! A node has one or more *devices* (`[[devices]]` in node.toml; without them one CPU
//! device, `cpu0`, with the `[[slots]]` of old). Each device has a *backend* — the CPU
//! ([`cpu`]), an OpenCL device ([`opencl`]), or an RTL simulator — and a number of
//! slots. Everything else in the node (front ends, dispatch, tenant-fair slot queues,
//! reconfiguration, the registry) is the same whatever the backend: a slot only sees
//! the [`Loaded`] image its device produced for the accelerator it holds.
//!
//! The rules of hosting live here once:
//! - which backend kinds *can* host an accelerator ([`kind_hosts`]): the catalog lists
//!   them for each accelerator (`/v1/accelerators`);
//! - whether a given device can ([`Backend::hosts`]): a slot loads only what its
//!   device can host, at start and on reconfiguration, with an error that says why;
//! - loading ([`Backend::load`]): the device builds (or finds in its cache) the
//!   accelerator's image for one slot, before the slot drains, so the slot keeps
//!   serving the old accelerator while the new one is prepared.
//!
//! The catalog itself (built-ins, the fault injector, manifests from
//! `accelerators_dir`, with ids assigned and each manifest prepared on the devices that
//! can host it) is assembled by [`start`], in [`library`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use accel::{Accelerator, CallError, Catalog, ParamBlock};
use arc_swap::ArcSwap;
use manifest::Manifest;
use netaccel_onnx::Model;
use ocl_remote::service::ServiceHandle;

use crate::telemetry::metrics::Metrics;

pub use library::model_id_from_name;
pub use section::{BackendKind, DeviceConfig, DevicesSection, PlatformChoice, SlotConfig};

pub mod cpu;
mod library;
pub mod opencl;
pub mod rtl;
mod section;

/// An accelerator as loaded into one slot of a device: what the slot runs.
///
/// A slot runs one call at a time, so an image may keep per-slot state (device
/// buffers, a command queue) behind a lock that is never contended.
pub trait Loaded: Send + Sync + 'static {
    /// Runs one call; the contract of [`Accelerator::run`] (`out` cleared by the
    /// callee; deterministic). The front end has run the catalog entry's `check`.
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<Ran, CallError>;

    /// Whether a cheap call may run on the submitting network thread (see the `slot`
    /// module). A backend that waits on a device shared with others says no: a network
    /// thread must not wait behind another user's work.
    fn inline_ok(&self) -> bool {
        true
    }
}

/// What a backend reports about one call it ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ran {
    /// The execution time the device reports or models (an RTL simulation's cycles
    /// at the device clock); `None`: the slot measures wall time.
    pub exec_ns: Option<u64>,
}

/// A loaded image and what loading it took.
pub struct Load {
    pub image: Arc<dyn Loaded>,
    /// Preparing the image (building an OpenCL program, …), before the slot drains.
    pub took: Duration,
    /// The image was built before (by content hash): this load reused it.
    pub cached: bool,
    /// A modelled time the load stands for on real hardware (partial bitstream over
    /// ICAP), reported beside the measured one.
    pub modelled: Option<Duration>,
}

/// A catalog entry together with the manifest it came from, if any, or the ONNX
/// model it is: what a backend needs to decide whether and how it can host it.
#[derive(Clone, Copy)]
pub struct Hostable<'a> {
    pub accel: &'a Arc<dyn Accelerator>,
    pub manifest: Option<&'a Arc<Manifest>>,
    pub model: Option<&'a Arc<Model>>,
}

/// One device's backend.
pub trait Backend: Send + Sync + 'static {
    fn kind(&self) -> BackendKind;

    /// Who makes the device, and which platform it is on: the registry's `vendor` and
    /// `platform` attributes.
    fn vendor(&self) -> String;
    fn platform(&self) -> String;

    /// Whether this device can host `accel`; `Err` says why not.
    fn hosts(&self, accel: Hostable<'_>) -> Result<(), String> {
        if kind_hosts(self.kind(), accel) {
            Ok(())
        } else {
            Err(cannot_host(self.kind(), accel))
        }
    }

    /// Checked once at start for each manifest the device can host: a manifest that
    /// fails here (an OpenCL program that does not build) is refused, and the node
    /// starts without it. Backends that cache their images may keep what they built.
    fn prepare(&self, _accel: Hostable<'_>) -> Result<(), String> {
        Ok(())
    }

    /// Loads `accel` (which [`Backend::hosts`] accepted) for slot `slot`.
    fn load(&self, slot: u16, accel: Hostable<'_>) -> Result<Load, String>;
}

/// Whether a device of `kind` can host `accel` at all.
pub fn kind_hosts(kind: BackendKind, accel: Hostable<'_>) -> bool {
    match kind {
        BackendKind::Cpu => cpu::hosts(accel),
        BackendKind::Opencl => opencl::hosts(accel),
        BackendKind::Rtl => rtl::hosts(accel),
    }
}

/// Every backend kind, in the order the catalog lists them.
pub const KINDS: [BackendKind; 3] = [BackendKind::Cpu, BackendKind::Opencl, BackendKind::Rtl];

/// Why the node did not start; the two get different exit statuses (see
/// docs/configuration.md, "Errors").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartError {
    /// The configuration is wrong in itself, or names what this node does not have (a
    /// slot's accelerator that no catalog entry or no device of its kind offers).
    Config(String),
    /// What the configuration names could not be had: an address taken, a device, a
    /// library or a file that does not open.
    Failed(String),
}

impl StartError {
    /// The process exit status: 2 for every configuration error, 1 otherwise.
    pub fn exit_status(&self) -> u8 {
        match self {
            StartError::Config(_) => 2,
            StartError::Failed(_) => 1,
        }
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Config(e) => write!(f, "invalid configuration: {e}"),
            StartError::Failed(e) => f.write_str(e),
        }
    }
}

impl From<String> for StartError {
    fn from(e: String) -> StartError {
        StartError::Failed(e)
    }
}

/// The sentence for an accelerator a `kind` device cannot host.
pub fn cannot_host(kind: BackendKind, accel: Hostable<'_>) -> String {
    let name = &accel.accel.descriptor().name;
    let can: Vec<&str> = KINDS
        .into_iter()
        .filter(|k| kind_hosts(*k, accel))
        .map(BackendKind::as_str)
        .collect();
    let can = if can.is_empty() {
        "no backend".to_string()
    } else {
        can.join(", ")
    };
    format!(
        "a {} device cannot host {name} (it runs on: {can})",
        kind.as_str()
    )
}

/// One device of the node.
pub struct Device {
    pub name: String,
    pub backend: Arc<dyn Backend>,
    /// Its slots' ids.
    pub slots: Vec<u16>,
}

/// What a slot starts with.
pub struct SlotPlan {
    pub device: String,
    pub backend: BackendKind,
    pub accel: Arc<dyn Accelerator>,
    pub image: Arc<dyn Loaded>,
}

/// The node's devices, and the manifests and models behind its catalog's user
/// accelerators.
pub struct Devices {
    pub list: Vec<Device>,
    manifests: HashMap<u16, Arc<Manifest>>,
    /// Replaced whole when a model is rebuilt with another configuration.
    models: ArcSwap<HashMap<u16, Arc<Model>>>,
}

impl Devices {
    /// The device slot `slot` belongs to.
    pub fn of_slot(&self, slot: u16) -> Option<&Device> {
        self.list.iter().find(|d| d.slots.contains(&slot))
    }

    /// `f` of `accel` with its manifest, if it came from one, or its model.
    pub fn with_hostable<R>(
        &self,
        accel: &Arc<dyn Accelerator>,
        f: impl FnOnce(Hostable<'_>) -> R,
    ) -> R {
        let id = accel.descriptor().id;
        let models = self.models.load();
        f(Hostable {
            accel,
            manifest: self.manifests.get(&id),
            model: models.get(&id),
        })
    }

    /// The ONNX model accelerator `id` is, if it is one.
    pub fn model(&self, id: u16) -> Option<Arc<Model>> {
        self.models.load().get(&id).cloned()
    }

    /// Puts `model` in place of the model with its id: the same model rebuilt with
    /// another configuration (the catalog's entry is replaced with it too).
    pub fn replace_model(&self, model: Arc<Model>) {
        let id = model.descriptor().id;
        self.models.rcu(|m| {
            assert!(m.contains_key(&id), "a replaced model is a model");
            let mut m = HashMap::clone(m);
            m.insert(id, Arc::clone(&model));
            m
        });
    }
}

/// What [`start`] assembled.
pub struct Started {
    pub catalog: Catalog,
    pub devices: Devices,
    /// One per slot, in slot id order.
    pub slots: Vec<SlotPlan>,
    /// The model repository's ensembles with their ids, not in the catalog yet.
    pub ensembles: Vec<(netaccel_onnx::Found, u16)>,
}

/// Builds the catalog and the devices of `config`, and loads every slot's initial
/// accelerator. Refused manifests are logged and left out; a device that cannot start
/// or a slot that names what its device cannot host is an error.
///
/// `opencl` is the remote OpenCL service when the node runs one: OpenCL devices it
/// shares take turns with its clients through its device queues (the slots of a device
/// are one user there, with a fair share of the device's time).
pub fn start(
    config: &DevicesSection,
    metrics: &mut Metrics,
    opencl: Option<&ServiceHandle>,
) -> Result<Started, StartError> {
    let device_configs = &config.devices;
    let mut backends = Vec::with_capacity(device_configs.len());
    for d in device_configs {
        backends.push(backend(d, config, metrics, opencl)?);
    }
    let library::Assembled {
        catalog,
        manifests,
        models,
        ensembles,
    } = library::assemble(config, device_configs, &backends)?;
    let devices = Devices {
        list: Vec::new(),
        manifests,
        models: ArcSwap::from_pointee(models),
    };
    let mut plans = Vec::new();
    let mut list = Vec::with_capacity(device_configs.len());
    for (d, backend) in device_configs.iter().zip(backends) {
        let names: Vec<String> = if d.slots.is_empty() {
            // The default CPU device: one slot per accelerator the CPU can host, and
            // per instance of a model (its `[[instance_group]] count`).
            catalog
                .iter()
                .filter(|a| devices.with_hostable(a, |h| kind_hosts(d.backend, h)))
                .flat_map(|a| {
                    let id = a.descriptor().id;
                    let count = devices.model(id).map_or(1, |m| m.instances());
                    std::iter::repeat_n(a.descriptor().name.clone(), count)
                })
                .collect()
        } else {
            d.slots.clone()
        };
        let mut ids = Vec::with_capacity(names.len());
        for name in &names {
            let id = u16::try_from(plans.len()).expect("slot count validated by the config");
            let accel = catalog.by_name(name).ok_or_else(|| {
                let known: Vec<_> = catalog
                    .iter()
                    .map(|a| a.descriptor().name.clone())
                    .collect();
                StartError::Config(format!(
                    "device {}: slot accelerator `{name}` is not in the catalog ({})",
                    d.name,
                    known.join(", ")
                ))
            })?;
            let load = devices.with_hostable(accel, |hostable| {
                backend.hosts(hostable).map_err(|e| {
                    StartError::Config(format!("device {}, slot {id}: {e}", d.name))
                })?;
                backend
                    .load(id, hostable)
                    .map_err(|e| format!("device {}, slot {id}: loading {name}: {e}", d.name))
                    .map_err(StartError::from)
            })?;
            plans.push(SlotPlan {
                device: d.name.clone(),
                backend: d.backend,
                accel: Arc::clone(accel),
                image: load.image,
            });
            ids.push(id);
        }
        list.push(Device {
            name: d.name.clone(),
            backend,
            slots: ids,
        });
    }
    Ok(Started {
        catalog,
        devices: Devices { list, ..devices },
        slots: plans,
        ensembles,
    })
}

/// The backend of device `d`.
fn backend(
    d: &DeviceConfig,
    config: &DevicesSection,
    metrics: &mut Metrics,
    service: Option<&ServiceHandle>,
) -> Result<Arc<dyn Backend>, String> {
    match d.backend {
        BackendKind::Cpu => Ok(Arc::new(cpu::Cpu)),
        BackendKind::Opencl => opencl::OpenClBackend::start(d, config, service)
            .map(|b| Arc::new(b) as Arc<dyn Backend>)
            .map_err(|e| format!("device {}: {e}", d.name)),
        BackendKind::Rtl => rtl::RtlBackend::start(d, config, metrics)
            .map(|b| Arc::new(b) as Arc<dyn Backend>)
            .map_err(|e| format!("device {}: {e}", d.name)),
    }
}
