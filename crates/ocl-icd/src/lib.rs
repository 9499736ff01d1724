//! `libnetaccel_opencl.so`: an OpenCL ICD (`cl_khr_icd`) that runs OpenCL programs on
//! devices owned by netaccel nodes.
//!
//! The standard ICD loader (`libOpenCL.so.1`, ocl-icd) finds this library through
//! `/etc/OpenCL/vendors/netaccel.icd` (or `OCL_ICD_VENDORS`), asks it for its platforms
//! with `clIcdGetPlatformIDsKHR`, and from then on calls it through the dispatch table
//! at the start of every object. The nodes come from the `NETACCEL_OPENCL_NODES`
//! environment variable (`host:port[,host:port...]`, `tls://host:port` for TLS, with
//! the tenant and token of `NETACCEL_TENANT` and `NETACCEL_TENANT_TOKEN` in each
//! session's `Hello`); each node contributes its
//! platforms, named `netaccel: <name on the node>`, with their devices. A node that
//! cannot be reached contributes nothing (and a warning on stderr). Without
//! `NETACCEL_OPENCL_NODES`, `NETACCEL_REGISTRY` and `NETACCEL_FUNCTION` name a registry
//! and a function: the node is the one the registry binds an instance of the function
//! to ([`registry`]).
//!
//! Modules: [`object`] (handles and reference counts), [`node`] (one connection per node:
//! control calls, command batching, completions), [`held`] (commands held back by user
//! events not set), [`api`] (the OpenCL entry points),
//! [`copy`] (large shared-memory copies on two threads), [`send`] (socket writes that
//! never raise `SIGPIPE`), [`registry`] (the node found through the registry), [`tls`]
//! (TLS to a node, relayed to a socket pair).
//! The protocol is `ocl_remote::proto`; the design is in `docs/opencl.md`.

mod api;
mod copy;
mod dispatch_names;
mod held;
mod node;
mod object;
mod registry;
mod send;
mod tls;

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

/// Default for unimplemented entry points that return a pointer without an error code
/// (`clSVMAlloc`): NULL means failure.
unsafe extern "C" fn unsupported_ptr() -> *mut c_void {
    std::ptr::null_mut()
}

/// Stubs for unimplemented calls that return an object: NULL, and `$code` in their
/// `errcode_ret`, which comes after the arguments listed, so that a program that checks
/// the error code learns that the call failed (NULL with an untouched error code let
/// programs carry on with garbage).
///
/// Every argument before `errcode_ret` in these calls is an integer or a pointer, and
/// the C calling conventions of the platforms we build for (x86-64 System V, AArch64)
/// pass each such argument in one register or one 8-byte stack slot, whatever its
/// width: a stub that declares them all as `usize` finds `errcode_ret` where the caller
/// put it.
macro_rules! errcode_stubs {
    ($($name:ident($($arg:ident),*) -> $code:expr;)*) => {
        $(
            unsafe extern "C" fn $name($($arg: usize,)* errcode: *mut ClInt) -> *mut c_void {
                $(let _ = $arg;)*
                if !errcode.is_null() {
                    *errcode = $code;
                }
                std::ptr::null_mut()
            }
        )*
    };
}

errcode_stubs! {
    no_interop_2(a, b) -> cl::CL_INVALID_CONTEXT;
    no_interop_3(a, b, c) -> cl::CL_INVALID_CONTEXT;
    no_interop_4(a, b, c, d) -> cl::CL_INVALID_CONTEXT;
    no_interop_5(a, b, c, d, e) -> cl::CL_INVALID_CONTEXT;
    no_built_in_kernels(a, b, c, d) -> cl::CL_INVALID_VALUE;
}

/// The stub of an unimplemented call that returns an object, by name. Every such call
/// of the dispatch table is listed (the test below checks that none is left out).
fn object_stub(name: &str) -> Option<*const c_void> {
    let stub = match name {
        // No built-in kernels are offered (the names given cannot be among them).
        "clCreateProgramWithBuiltInKernels" => no_built_in_kernels as *const c_void,
        // Interoperability: no context of ours was made from a GL, D3D, DX9 or EGL one.
        "clCreateEventFromGLsyncKHR" => no_interop_2 as *const c_void,
        "clCreateFromGLBuffer"
        | "clCreateFromGLRenderbuffer"
        | "clCreateFromD3D10BufferKHR"
        | "clCreateFromD3D11BufferKHR"
        | "clCreateEventFromEGLSyncKHR" => no_interop_3 as *const c_void,
        "clCreateFromD3D10Texture2DKHR"
        | "clCreateFromD3D10Texture3DKHR"
        | "clCreateFromD3D11Texture2DKHR"
        | "clCreateFromD3D11Texture3DKHR" => no_interop_4 as *const c_void,
        "clCreateFromGLTexture2D"
        | "clCreateFromGLTexture3D"
        | "clCreateFromGLTexture"
        | "clCreateFromDX9MediaSurfaceKHR"
        | "clCreateFromEGLImageKHR" => no_interop_5 as *const c_void,
        "clSVMAlloc" => unsupported_ptr as *const c_void,
        _ => return None,
    };
    Some(stub)
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
                if let Some(stub) = object_stub(name) {
                    *slot = stub;
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
        let list = match (
            std::env::var(ocl_remote::NODES_ENV),
            registry::Lookup::from_env(),
        ) {
            (Ok(list), _) => list,
            (Err(_), None) => return Vec::new(),
            (Err(_), Some(lookup)) => match lookup.and_then(|l| registry::bind(&l)) {
                Ok(node) => node,
                Err(e) => {
                    eprintln!("netaccel OpenCL: no device from the registry: {e}");
                    return Vec::new();
                }
            },
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
                // A platform none of whose devices the tenant may use (the node lists
                // it empty, at its index): not offered.
                if devices.is_empty() {
                    continue;
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The entries of the dispatch table that return an object (names as in
    /// `CL/cl_icd.h`: creators, maps, SVM allocation, extension lookups).
    fn returns_object(name: &str) -> bool {
        let creates = name.starts_with("clCreate")
            && !matches!(
                name,
                "clCreateSubDevices" | "clCreateSubDevicesEXT" | "clCreateKernelsInProgram"
            );
        creates
            || name.starts_with("clEnqueueMap")
            || name.starts_with("clGetExtensionFunctionAddress")
            || matches!(name, "clSVMAlloc" | "clCloneKernel")
    }

    #[test]
    fn every_call_returning_an_object_is_implemented_or_sets_its_error_code() {
        let implemented: Vec<&str> = api::entries().iter().map(|(n, _)| *n).collect();
        for name in NAMES.iter().filter(|n| returns_object(n)) {
            assert!(
                implemented.contains(name) || object_stub(name).is_some(),
                "{name} returns an object but has neither an implementation nor a stub \
                 that sets errcode_ret"
            );
        }
    }

    #[test]
    fn a_stub_sets_the_error_code_after_its_arguments() {
        let mut code = 0;
        // SAFETY: the stub only writes the error code.
        let ptr = unsafe { no_interop_5(1, 2, 3, 4, 5, &mut code) };
        assert!(ptr.is_null());
        assert_eq!(code, cl::CL_INVALID_CONTEXT);
        // SAFETY: as above; a null error code is allowed.
        assert!(unsafe { no_interop_3(0, 0, 0, std::ptr::null_mut()) }.is_null());
    }
}
