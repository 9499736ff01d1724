//! Platforms and devices: what the nodes offer. Names, vendor, version and extensions
//! are the ICD's own (prefixed or completed); everything else is asked of the node, and
//! device answers are cached (a device does not change while a node runs).

use std::ffi::c_void;

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::Request;

use crate::object::*;

use super::{bytes_of, cstring_bytes, reply, ret_info, trim_nul};

/// The OpenCL version of the platform: what the ICD implements (the node presents its
/// devices as OpenCL 3.0 devices too, with the optional features the remote path
/// cannot carry unsupported; see `api::unsupported`).
const VERSION: (u32, u32) = (3, 0);

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clGetPlatformIDs,
        clGetPlatformInfo,
        clGetDeviceIDs,
        clGetDeviceInfo,
        clRetainDevice,
        clReleaseDevice,
    ]
}

pub unsafe extern "C" fn clGetPlatformIDs(
    num_entries: u32,
    platforms: *mut Handle,
    num_platforms: *mut u32,
) -> ClInt {
    crate::get_platform_ids(num_entries, platforms, num_platforms)
}

fn platform_remote_info(p: &Obj<Platform>, param: u32) -> Result<Vec<u8>, ClInt> {
    reply(p.v.node.call(&Request::GetPlatformInfo {
        platform: p.v.remote,
        param,
    }))
}

pub unsafe extern "C" fn clGetPlatformInfo(
    platform: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let p = tryr!(get::<Platform>(platform));
    let bytes = match param {
        cl::CL_PLATFORM_NAME => {
            let remote = trim_nul(tryr!(platform_remote_info(p, param)));
            let mut name = ocl_remote::PLATFORM_NAME_PREFIX.as_bytes().to_vec();
            name.extend(remote);
            cstring_bytes(&name)
        }
        cl::CL_PLATFORM_VENDOR => cstring_bytes(b"netaccel"),
        cl::CL_PLATFORM_ICD_SUFFIX_KHR => cstring_bytes(ocl_remote::ICD_SUFFIX.as_bytes()),
        cl::CL_PLATFORM_VERSION => {
            let remote = String::from_utf8_lossy(&trim_nul(tryr!(platform_remote_info(p, param))))
                .into_owned();
            let (major, minor) = VERSION;
            cstring_bytes(format!("OpenCL {major}.{minor} netaccel (remote: {remote})").as_bytes())
        }
        cl::CL_PLATFORM_NUMERIC_VERSION => bytes_of(cl::make_version(VERSION.0, VERSION.1, 0)),
        cl::CL_PLATFORM_EXTENSIONS => {
            let remote = String::from_utf8_lossy(&trim_nul(tryr!(platform_remote_info(p, param))))
                .into_owned();
            let mut exts: Vec<&str> = remote.split_whitespace().collect();
            if !exts.contains(&"cl_khr_icd") {
                exts.push("cl_khr_icd");
            }
            cstring_bytes(exts.join(" ").as_bytes())
        }
        // The same list with versions (cl_name_version entries).
        cl::CL_PLATFORM_EXTENSIONS_WITH_VERSION => {
            let mut list = tryr!(platform_remote_info(p, param));
            const ICD: &[u8] = b"cl_khr_icd";
            if !name_versions_contain(&list, ICD) {
                list.extend_from_slice(&cl::make_version(1, 0, 0).to_ne_bytes());
                let mut name = [0u8; cl::CL_NAME_VERSION_MAX_NAME_SIZE];
                name[..ICD.len()].copy_from_slice(ICD);
                list.extend_from_slice(&name);
            }
            list
        }
        cl::CL_PLATFORM_PROFILE | cl::CL_PLATFORM_HOST_TIMER_RESOLUTION => {
            tryr!(platform_remote_info(p, param))
        }
        _ => return cl::CL_INVALID_VALUE,
    };
    ret_info(&bytes, size, value, size_ret)
}

/// Whether a `cl_name_version` array names `name`.
fn name_versions_contain(list: &[u8], name: &[u8]) -> bool {
    list.chunks_exact(4 + cl::CL_NAME_VERSION_MAX_NAME_SIZE)
        .any(|entry| trim_nul(entry[4..].to_vec()) == name)
}

pub(super) fn device_info(d: &Obj<Device>, param: u32) -> Result<Vec<u8>, ClInt> {
    let mut cache = d.v.info_cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(r) = cache.get(&param) {
        return r.clone();
    }
    let r = reply(d.v.node.call(&Request::GetDeviceInfo {
        device: d.v.remote,
        param,
    }));
    cache.insert(param, r.clone());
    r
}

pub unsafe extern "C" fn clGetDeviceIDs(
    platform: Handle,
    device_type: u64,
    num_entries: u32,
    devices: *mut Handle,
    num_devices: *mut u32,
) -> ClInt {
    let p = tryr!(get::<Platform>(platform));
    if (num_entries == 0 && !devices.is_null()) || (devices.is_null() && num_devices.is_null()) {
        return cl::CL_INVALID_VALUE;
    }
    let mut found = Vec::new();
    for (i, &d) in p.v.devices.iter().enumerate() {
        let keep = if device_type == cl::CL_DEVICE_TYPE_ALL {
            true
        } else if device_type == cl::CL_DEVICE_TYPE_DEFAULT {
            i == 0
        } else {
            let obj = tryr!(get::<Device>(d as Handle));
            let t = tryr!(device_info(obj, cl::CL_DEVICE_TYPE));
            t.len() == 8 && u64::from_ne_bytes(t[..8].try_into().expect("8")) & device_type != 0
        };
        if keep {
            found.push(d);
        }
    }
    if found.is_empty() {
        return cl::CL_DEVICE_NOT_FOUND;
    }
    let handles: Vec<Handle> = found.iter().map(|d| *d as Handle).collect();
    crate::ret_list(&handles, num_entries, devices, num_devices);
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clGetDeviceInfo(
    device: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let d = tryr!(get::<Device>(device));
    let bytes = match param {
        cl::CL_DEVICE_PLATFORM => bytes_of(d.v.platform),
        cl::CL_DEVICE_PARENT_DEVICE => bytes_of(0usize),
        cl::CL_DEVICE_REFERENCE_COUNT => bytes_of(1u32),
        _ => tryr!(device_info(d, param)),
    };
    ret_info(&bytes, size, value, size_ret)
}

pub unsafe extern "C" fn clRetainDevice(device: Handle) -> ClInt {
    tryr!(get::<Device>(device));
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clReleaseDevice(device: Handle) -> ClInt {
    tryr!(get::<Device>(device));
    cl::CL_SUCCESS
}
