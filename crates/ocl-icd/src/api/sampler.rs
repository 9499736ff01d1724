//! Samplers: created on the node, their settings kept in the ICD for info queries.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Arc;

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::Request;

use crate::object::*;

use super::{bytes_of, reply, ret_info, set_err};

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clCreateSampler,
        clCreateSamplerWithProperties,
        clRetainSampler,
        clReleaseSampler,
        clGetSamplerInfo,
    ]
}

pub unsafe extern "C" fn clCreateSampler(
    context: Handle,
    normalized: u32,
    addressing: u32,
    filter: u32,
    errcode: *mut ClInt,
) -> Handle {
    let c = tryp!(get::<Context>(context), errcode);
    let node = Arc::clone(&c.v.node);
    let id = node.next_id();
    tryp!(
        reply(node.call(&Request::CreateSampler {
            id,
            context: c.v.id,
            normalized,
            addressing,
            filter,
        })),
        errcode
    );
    retain::<Context>(context);
    set_err(errcode, cl::CL_SUCCESS);
    new_handle(Sampler {
        node,
        id,
        context: context as H,
        normalized,
        addressing,
        filter,
    })
}

/// OpenCL 2.0: `clCreateSampler` with its settings as a property list (the ones not
/// listed take their defaults: normalized coordinates, clamp, nearest).
pub unsafe extern "C" fn clCreateSamplerWithProperties(
    context: Handle,
    properties: *const u64,
    errcode: *mut ClInt,
) -> Handle {
    tryp!(get::<Context>(context), errcode);
    let mut settings = [
        (cl::CL_SAMPLER_NORMALIZED_COORDS, 1u32, false),
        (cl::CL_SAMPLER_ADDRESSING_MODE, cl::CL_ADDRESS_CLAMP, false),
        (cl::CL_SAMPLER_FILTER_MODE, cl::CL_FILTER_NEAREST, false),
    ];
    if !properties.is_null() {
        // A property list ends at 0; each property may appear once.
        for i in (0..).step_by(2) {
            let name = *properties.add(i);
            if name == 0 {
                break;
            }
            let value = *properties.add(i + 1);
            let setting = settings.iter_mut().find(|s| u64::from(s.0) == name && !s.2);
            let Some(setting) = setting else {
                set_err(errcode, cl::CL_INVALID_VALUE);
                return null_mut();
            };
            setting.1 = value as u32;
            setting.2 = true;
        }
    }
    let [normalized, addressing, filter] = settings.map(|s| s.1);
    clCreateSampler(context, normalized, addressing, filter, errcode)
}

pub unsafe extern "C" fn clRetainSampler(s: Handle) -> ClInt {
    retain::<Sampler>(s)
}

pub unsafe extern "C" fn clReleaseSampler(s: Handle) -> ClInt {
    release::<Sampler>(s)
}

pub unsafe extern "C" fn clGetSamplerInfo(
    sampler: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let s = tryr!(get::<Sampler>(sampler));
    let bytes = match param {
        cl::CL_SAMPLER_REFERENCE_COUNT => bytes_of(ref_count(s)),
        cl::CL_SAMPLER_CONTEXT => bytes_of(s.v.context),
        cl::CL_SAMPLER_NORMALIZED_COORDS => bytes_of(s.v.normalized),
        cl::CL_SAMPLER_ADDRESSING_MODE => bytes_of(s.v.addressing),
        cl::CL_SAMPLER_FILTER_MODE => bytes_of(s.v.filter),
        _ => return cl::CL_INVALID_VALUE,
    };
    ret_info(&bytes, size, value, size_ret)
}
