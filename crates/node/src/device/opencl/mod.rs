//! The OpenCL backend: slots whose calls run as OpenCL kernels on one device of an
//! OpenCL platform (PoCL on a CPU here; a GPU or an FPGA platform in production).
//!
//! # What a call costs
//!
//! A device has one context; each slot has its own command queue, kernel object and
//! payload and output buffers, made when the accelerator is loaded and reused by every
//! call: a call writes the payload, sets the arguments (params, lengths, the buffers),
//! runs the kernel and reads the output, and allocates nothing once the buffers have
//! grown to the largest call seen ([`image`]). Programs are built once per content
//! hash ([`programs`]): in memory for every slot of the device, and on disk as program
//! binaries, so a restart or a reconfiguration back to an accelerator loaded before
//! does not compile again.
//!
//! # One device, two users
//!
//! When the node also shares the device with remote OpenCL clients (`opencl = ADDR`,
//! in process), a slot's call is a job of the remote OpenCL service's queue of that
//! device ([`ocl_remote::service::DeviceLane`]): a slot call and a remote task never
//! interleave, and the device's time is shared fairly between its users — the node's
//! slots together are one, each tenant's remote sessions another — whatever their jobs
//! cost, so that neither a remote program nor slot callers starve the other (the
//! service's `turns` module says how). The device's busy seconds
//! (`netaccel_ocl_device_busy_seconds_total`) count both. Without the service, the
//! device's slots take turns on a lock of their own. A cheap call runs on the network
//! thread only when the device is free and it is the slots' turn at that moment
//! ([`Loaded::inline_ok`]), saving the two thread hand-offs that otherwise cost more
//! than a small kernel; a network thread thus does not queue behind another user's
//! work, except for what takes the device in the very instant between its look and
//! its call.
//!
//! # What it hosts
//!
//! The built-ins that have an OpenCL kernel ([`builtins`]: all seven) and every
//! manifest with an `[opencl]` section. A manifest's program is built at start on
//! every OpenCL device ([`Backend::prepare`]): one that does not build, or lacks its
//! kernel, is refused with the build log and the node starts without it.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use manifest::Manifest;
use ocl_remote::cl;
use ocl_remote::ffi::{info_bytes, Api, Handle};
use ocl_remote::service::{DeviceLane, ServiceHandle};

use super::{Backend, BackendKind, Hostable, Load, Loaded};
use crate::device::{DeviceConfig, DevicesSection, PlatformChoice};

pub mod builtins;
mod image;
mod programs;
mod runtime_cache;
mod section;

pub use section::OpenclSection;

/// Whether an OpenCL device can host `accel`: a built-in with a kernel, or a manifest
/// with an `[opencl]` section.
pub fn hosts(accel: Hostable<'_>) -> bool {
    match accel.manifest {
        Some(m) => m.opencl.is_some(),
        None => builtins::has(&accel.accel.descriptor().name),
    }
}

/// A handle of the OpenCL runtime that may cross threads: OpenCL objects other than
/// kernels are thread-safe, and kernels are only ever used under their slot's lock.
#[derive(Clone, Copy)]
pub(crate) struct Raw(pub Handle);

// SAFETY: see `Raw`.
unsafe impl Send for Raw {}
// SAFETY: see `Raw`.
unsafe impl Sync for Raw {}

/// Who takes turns on the device.
enum Lane {
    /// The remote OpenCL service's queue of the device, where the slots are one user.
    Shared(DeviceLane),
    /// The device's slots only; the flag says a call holds the lock.
    Own(Mutex<()>, AtomicBool),
}

impl Lane {
    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match self {
            Lane::Shared(lane) => lane.run(f),
            Lane::Own(lock, busy) => {
                let _turn = lock.lock().unwrap_or_else(|p| p.into_inner());
                busy.store(true, Ordering::Relaxed);
                let out = f();
                busy.store(false, Ordering::Relaxed);
                out
            }
        }
    }

    /// A call now would start at once: the device is free and, shared, it is the slots'
    /// turn (as far as can be seen now).
    fn is_idle(&self) -> bool {
        match self {
            Lane::Shared(lane) => lane.is_idle(),
            Lane::Own(_, busy) => !busy.load(Ordering::Relaxed),
        }
    }
}

/// The device: the loaded OpenCL library, the device and its context.
pub(crate) struct Cl {
    pub api: Api,
    pub device: Raw,
    pub context: Raw,
    lane: Lane,
    pub platform_name: String,
    pub vendor: String,
    pub device_name: String,
    /// Platform and driver versions: part of a program's cache key, so a binary built
    /// by another runtime is never loaded.
    pub versions: String,
    /// The runtime's own kernel cache, checked for room before loads and calls
    /// (PoCL aborts the process when it cannot write there).
    pub runtime_cache: Option<runtime_cache::RuntimeCache>,
}

impl Drop for Cl {
    fn drop(&mut self) {
        // SAFETY: the context was created by `start` and is released once.
        unsafe { (self.api.clReleaseContext)(self.context.0) };
    }
}

/// Longest info string read from the runtime.
const INFO_BYTES_MAX: usize = 1 << 20;

fn info_string(query: &mut dyn FnMut(usize, *mut c_void, *mut usize) -> i32) -> String {
    let bytes = info_bytes(INFO_BYTES_MAX, query).unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .trim_end_matches('\0')
        .to_string()
}

/// An OpenCL error code with its name when it is one callers commonly meet.
pub(crate) fn cl_error(call: &str, rc: i32) -> String {
    let name = match rc {
        cl::CL_OUT_OF_RESOURCES => "CL_OUT_OF_RESOURCES",
        cl::CL_OUT_OF_HOST_MEMORY => "CL_OUT_OF_HOST_MEMORY",
        cl::CL_MEM_OBJECT_ALLOCATION_FAILURE => "CL_MEM_OBJECT_ALLOCATION_FAILURE",
        cl::CL_BUILD_PROGRAM_FAILURE => "CL_BUILD_PROGRAM_FAILURE",
        cl::CL_INVALID_BINARY => "CL_INVALID_BINARY",
        cl::CL_INVALID_KERNEL_NAME => "CL_INVALID_KERNEL_NAME",
        cl::CL_INVALID_ARG_SIZE => "CL_INVALID_ARG_SIZE",
        cl::CL_INVALID_KERNEL_ARGS => "CL_INVALID_KERNEL_ARGS",
        cl::CL_INVALID_WORK_GROUP_SIZE => "CL_INVALID_WORK_GROUP_SIZE",
        cl::CL_INVALID_WORK_ITEM_SIZE => "CL_INVALID_WORK_ITEM_SIZE",
        cl::CL_INVALID_GLOBAL_WORK_SIZE => "CL_INVALID_GLOBAL_WORK_SIZE",
        cl::CL_INVALID_BUFFER_SIZE => "CL_INVALID_BUFFER_SIZE",
        _ => "",
    };
    format!("{call} failed: {rc} {name}").trim_end().to_string()
}

pub struct OpenClBackend {
    cl: Arc<Cl>,
    programs: programs::Programs,
    /// The built-ins' manifests, parsed once.
    builtins: HashMap<String, Arc<Manifest>>,
}

impl OpenClBackend {
    /// Opens the device `d` names: its platform (by name substring or index; the first
    /// without), its device index (0 without), a context. `service` is the remote
    /// OpenCL service, whose queue of the device the slots then share.
    pub fn start(
        d: &DeviceConfig,
        config: &DevicesSection,
        service: Option<&ServiceHandle>,
    ) -> Result<OpenClBackend, String> {
        let api = Api::load(&config.opencl_library)?;
        let (platform, platform_name) = pick_platform(&api, d.platform.as_ref())?;
        let index = d.device.unwrap_or(0);
        let mut n = 0u32;
        // SAFETY: valid out-pointers; `platform` is a platform of this runtime.
        let rc = unsafe {
            (api.clGetDeviceIDs)(
                platform,
                cl::CL_DEVICE_TYPE_ALL,
                0,
                std::ptr::null_mut(),
                &mut n,
            )
        };
        if rc != cl::CL_SUCCESS || index >= n as usize {
            return Err(format!(
                "platform {platform_name:?} has {n} devices; there is no device {index}"
            ));
        }
        let mut devices = vec![std::ptr::null_mut(); n as usize];
        // SAFETY: `devices` has room for `n` handles.
        unsafe {
            (api.clGetDeviceIDs)(
                platform,
                cl::CL_DEVICE_TYPE_ALL,
                n,
                devices.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        let device = devices[index];
        // SAFETY (the closures): `device` and `platform` are handles of this runtime.
        let device_name = info_string(&mut |s, p, r| unsafe {
            (api.clGetDeviceInfo)(device, cl::CL_DEVICE_NAME, s, p, r)
        });
        let vendor = info_string(&mut |s, p, r| unsafe {
            (api.clGetPlatformInfo)(platform, cl::CL_PLATFORM_VENDOR, s, p, r)
        });
        let versions = [cl::CL_PLATFORM_VERSION]
            .iter()
            .map(|&q| {
                info_string(&mut |s, p, r| unsafe { (api.clGetPlatformInfo)(platform, q, s, p, r) })
            })
            .chain([cl::CL_DEVICE_VERSION, CL_DRIVER_VERSION].iter().map(|&q| {
                info_string(&mut |s, p, r| unsafe { (api.clGetDeviceInfo)(device, q, s, p, r) })
            }))
            .collect::<Vec<_>>()
            .join("/");
        let mut rc = 0;
        // SAFETY: one valid device handle; no properties, no callback.
        let context = unsafe {
            (api.clCreateContext)(
                std::ptr::null(),
                1,
                &device,
                std::ptr::null(),
                std::ptr::null_mut(),
                &mut rc,
            )
        };
        if context.is_null() || rc != cl::CL_SUCCESS {
            return Err(cl_error("clCreateContext", rc));
        }
        let lane = match service.and_then(|s| s.lane(device)) {
            Some(lane) => Lane::Shared(lane),
            None => Lane::Own(Mutex::new(()), AtomicBool::new(false)),
        };
        let shared = matches!(lane, Lane::Shared(_));
        let cl = Arc::new(Cl {
            api,
            device: Raw(device),
            context: Raw(context),
            lane,
            runtime_cache: runtime_cache::RuntimeCache::of_platform(&platform_name),
            platform_name,
            vendor,
            device_name,
            versions,
        });
        tracing::info!(
            device = %d.name,
            platform = %cl.platform_name,
            opencl_device = %cl.device_name,
            shared_with_remote_clients = shared,
            "OpenCL device opened"
        );
        let builtins = accel::builtins()
            .iter()
            .filter_map(|a| {
                let name = &a.descriptor().name;
                builtins::manifest(name).map(|m| (name.clone(), Arc::new(m)))
            })
            .collect();
        Ok(OpenClBackend {
            programs: programs::Programs::new(Arc::clone(&cl), config),
            cl,
            builtins,
        })
    }

    /// The manifest that describes how this device runs `accel`.
    fn manifest_of(&self, accel: Hostable<'_>) -> Result<Arc<Manifest>, String> {
        match accel.manifest {
            Some(m) => Ok(Arc::clone(m)),
            None => self
                .builtins
                .get(&accel.accel.descriptor().name)
                .cloned()
                .ok_or_else(|| super::cannot_host(BackendKind::Opencl, accel)),
        }
    }
}

/// `CL_DRIVER_VERSION`.
const CL_DRIVER_VERSION: u32 = 0x102D;

/// The platform `choice` names, and its name.
fn pick_platform(api: &Api, choice: Option<&PlatformChoice>) -> Result<(Handle, String), String> {
    let mut n = 0u32;
    // SAFETY: valid out-pointers.
    let rc = unsafe { (api.clGetPlatformIDs)(0, std::ptr::null_mut(), &mut n) };
    let mut raws = vec![std::ptr::null_mut(); n as usize];
    if rc == cl::CL_SUCCESS && n > 0 {
        // SAFETY: `raws` has room for `n` handles.
        unsafe { (api.clGetPlatformIDs)(n, raws.as_mut_ptr(), std::ptr::null_mut()) };
    }
    let named: Vec<(Handle, String)> = raws
        .into_iter()
        .map(|raw| {
            // SAFETY: `raw` is a platform handle of this runtime.
            let name = info_string(&mut |s, p, r| unsafe {
                (api.clGetPlatformInfo)(raw, cl::CL_PLATFORM_NAME, s, p, r)
            });
            (raw, name)
        })
        .collect();
    let found = match choice {
        None => named.first(),
        Some(PlatformChoice::Index(i)) => named.get(*i),
        Some(PlatformChoice::Name(sub)) => {
            named.iter().find(|(_, name)| name.contains(sub.as_str()))
        }
    };
    found.cloned().ok_or_else(|| {
        let list: Vec<String> = named
            .iter()
            .enumerate()
            .map(|(i, (_, name))| format!("{i}: {name}"))
            .collect();
        format!(
            "no OpenCL platform matches {} (platforms: {})",
            match choice {
                None => "(the first)".to_string(),
                Some(PlatformChoice::Index(i)) => format!("index {i}"),
                Some(PlatformChoice::Name(s)) => format!("{s:?}"),
            },
            if list.is_empty() {
                "none".to_string()
            } else {
                list.join(", ")
            }
        )
    })
}

impl Backend for OpenClBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Opencl
    }

    fn vendor(&self) -> String {
        self.cl.vendor.clone()
    }

    fn platform(&self) -> String {
        self.cl.platform_name.clone()
    }

    fn prepare(&self, accel: Hostable<'_>) -> Result<(), String> {
        let m = self.manifest_of(accel)?;
        let built = self.programs.get_or_build(&m)?;
        built.program.check_kernel(&m)
    }

    fn load(&self, _slot: u16, accel: Hostable<'_>) -> Result<Load, String> {
        if let Some(cache) = &self.cl.runtime_cache {
            cache.check()?;
        }
        let m = self.manifest_of(accel)?;
        let id = accel.accel.descriptor().id;
        let built = self.programs.get_or_build(&m)?;
        let builtin = accel.manifest.is_none();
        let image = image::OpenClImage::new(Arc::clone(&self.cl), built.program, m, id, builtin)?;
        Ok(Load {
            image: Arc::new(image) as Arc<dyn Loaded>,
            took: built.took,
            cached: built.cached,
            modelled: None,
        })
    }
}
