//! `libnetaccel_opencl.so`: an OpenCL ICD (`cl_khr_icd`) that runs OpenCL programs on
//! devices owned by netaccel nodes.
//!
//! The standard ICD loader (`libOpenCL.so.1`, ocl-icd) finds this library through
//! `/etc/OpenCL/vendors/netaccel.icd` (or `OCL_ICD_VENDORS`), asks it for its platforms
//! with `clIcdGetPlatformIDsKHR`, and from then on calls it through the dispatch table
//! at the start of every object. The nodes come from the `NETACCEL_OPENCL_NODES`
//! environment variable (`host:port[,host:port...]`); each node contributes its
//! platforms, named `netaccel: <name on the node>`, with their devices. A node that
//! cannot be reached contributes nothing (and a warning on stderr).
//!
//! Modules: [`object`] (handles and reference counts), [`node`] (one connection per node:
//! control calls, command batching, completions), [`api`] (the OpenCL entry points),
//! [`copy`] (large shared-memory copies on two threads), [`send`] (socket writes that
//! never raise `SIGPIPE`).
//! The protocol is `ocl_remote::proto`; the design is in `docs/opencl.md`.

mod api;
mod copy;
mod dispatch_names;
mod node;
mod object;
mod send;

use std::ffi::{c_char, c_void, CStr};
use std::sync::{Arc, Mutex, OnceLock};

use ocl_remote::cl::{self, ClInt};

use dispatch_names::NAMES;
use object::{new_handle, Device, Obj, Platform, H};

struct Table([*const c_void; NAMES.len()]);
// SAFETY: the table is immutable after construction and holds only function pointers.
unsafe impl Sync for Table {}
unsafe impl Send for Table {}

/// Default for entry points this ICD does not implement (they return `cl_int`).
unsafe extern "C" fn unsupported() -> ClInt {
    cl::CL_INVALID_OPERATION
}

/// Default for unimplemented entry points that return a pointer: NULL means failure.
unsafe extern "C" fn unsupported_ptr() -> *mut c_void {
    std::ptr::null_mut()
}

fn returns_pointer(name: &str) -> bool {
    [
        "clCreate",
        "clEnqueueMap",
        "clSVMAlloc",
        "clGetExtensionFunctionAddress",
        "clGetGLContext",
    ]
    .iter()
    .any(|p| name.starts_with(p))
        && name != "clCreateSubDevices"
        && name != "clCreateSubDevicesEXT"
        && name != "clCreateKernelsInProgram"
}

/// Answers a list query the OpenCL way: up to `num_entries` items into `out` (if not
/// null), and the full count into `count` (if not null).
///
/// # Safety
/// `out` is null or has room for `num_entries` items; `count` is null or writable.
pub(crate) unsafe fn ret_list<T: Copy>(
    items: &[T],
    num_entries: u32,
    out: *mut T,
    count: *mut u32,
) {
    if !out.is_null() {
        for (i, item) in items.iter().take(num_entries as usize).enumerate() {
            *out.add(i) = *item;
        }
    }
    if !count.is_null() {
        *count = items.len() as u32;
    }
}

/// The dispatch table shared by all objects of this ICD.
pub(crate) fn dispatch_table() -> *const c_void {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let mut t = [unsupported as *const c_void; NAMES.len()];
            for (slot, name) in t.iter_mut().zip(NAMES.iter()) {
                if returns_pointer(name) {
                    *slot = unsupported_ptr as *const c_void;
                }
            }
            for (name, f) in api::entries() {
                let i = NAMES
                    .iter()
                    .position(|n| *n == name)
                    .expect("entry point is in the dispatch table");
                t[i] = f;
            }
            Table(t)
        })
        .0
        .as_ptr()
        .cast()
}

/// The platforms of every reachable node, connected on first use.
pub(crate) fn platforms() -> &'static [H] {
    static PLATFORMS: OnceLock<Vec<H>> = OnceLock::new();
    PLATFORMS.get_or_init(|| {
        let Ok(list) = std::env::var(ocl_remote::NODES_ENV) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for addr in list.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            let node = match node::Node::connect(addr) {
                Ok(n) => n,
                Err(e) => {
                    eprintln!("netaccel OpenCL: node {addr} unavailable: {e}");
                    continue;
                }
            };
            for (remote, devices) in node.platforms.iter().enumerate() {
                let p = new_handle(Platform {
                    node: Arc::clone(&node),
                    remote: remote as u32,
                    devices: Vec::new(),
                });
                let devs: Vec<H> = devices
                    .iter()
                    .map(|&d| {
                        new_handle(Device {
                            node: Arc::clone(&node),
                            remote: d,
                            platform: p as H,
                            info_cache: Mutex::new(Default::default()),
                        }) as H
                    })
                    .collect();
                // SAFETY: `p` was just created and is not yet visible to anyone else.
                unsafe { (*(p as *mut Obj<Platform>)).v.devices = devs };
                out.push(p as H);
            }
        }
        out
    })
}

pub(crate) unsafe fn get_platform_ids(
    num_entries: u32,
    platforms_out: *mut *mut c_void,
    num_platforms: *mut u32,
) -> ClInt {
    if (num_entries == 0 && !platforms_out.is_null())
        || (platforms_out.is_null() && num_platforms.is_null())
    {
        return cl::CL_INVALID_VALUE;
    }
    let all = platforms();
    let handles: Vec<*mut c_void> = all.iter().map(|p| *p as *mut c_void).collect();
    ret_list(&handles, num_entries, platforms_out, num_platforms);
    if all.is_empty() {
        cl::CL_PLATFORM_NOT_FOUND_KHR
    } else {
        cl::CL_SUCCESS
    }
}

/// `cl_khr_icd`: the loader's way to enumerate this ICD's platforms.
///
/// # Safety
/// Pointers as for `clGetPlatformIDs`.
#[no_mangle]
pub unsafe extern "C" fn clIcdGetPlatformIDsKHR(
    num_entries: u32,
    platforms: *mut *mut c_void,
    num_platforms: *mut u32,
) -> ClInt {
    get_platform_ids(num_entries, platforms, num_platforms)
}

/// The only OpenCL symbol the loader looks up by name in an ICD.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn clGetExtensionFunctionAddress(name: *const c_char) -> *mut c_void {
    if name.is_null() {
        return std::ptr::null_mut();
    }
    match CStr::from_ptr(name).to_bytes() {
        b"clIcdGetPlatformIDsKHR" => clIcdGetPlatformIDsKHR as *mut c_void,
        _ => std::ptr::null_mut(),
    }
}

/// The loader also looks this one up by name before it accepts an ICD.
///
/// # Safety
/// Pointers as for `clGetPlatformInfo`.
#[no_mangle]
pub unsafe extern "C" fn clGetPlatformInfo(
    platform: *mut c_void,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    api::clGetPlatformInfo(platform, param, size, value, size_ret)
}
