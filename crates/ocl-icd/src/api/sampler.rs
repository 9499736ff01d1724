//! Samplers: created on the node, their settings kept in the ICD for info queries.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Arc;

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::Request;

use crate::object::*;

use super::{
    bytes_of, property_bytes, property_list, property_pairs, reply, ret_info, set_err, PropertyList,
};

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clCreateSampler,
        clCreateSamplerWithProperties,
        clRetainSampler,
        clReleaseSampler,
        clGetSamplerInfo,
    ]
}

unsafe fn create_sampler(
    context: Handle,
    [normalized, addressing, filter]: [u32; 3],
    property_list: PropertyList,
) -> Result<Handle, ClInt> {
    let c = get::<Context>(context)?;
    let node = Arc::clone(&c.v.node);
    let id = node.next_id();
    reply(node.call(&Request::CreateSampler {
        id,
        context: c.v.id,
        normalized,
        addressing,
        filter,
    }))?;
    retain::<Context>(context);
    Ok(new_handle(Sampler {
        node,
        id,
        context: context as H,
        normalized,
        addressing,
        filter,
        property_list,
    }))
}

pub unsafe extern "C" fn clCreateSampler(
    context: Handle,
    normalized: u32,
    addressing: u32,
    filter: u32,
    errcode: *mut ClInt,
) -> Handle {
    let settings = [normalized, addressing, filter];
    let h = tryp!(create_sampler(context, settings, Vec::new()), errcode);
    set_err(errcode, cl::CL_SUCCESS);
    h
}

/// OpenCL 2.0: `clCreateSampler` with its settings as a property list (the ones not
/// listed take their defaults: normalized coordinates, clamp, nearest).
pub unsafe extern "C" fn clCreateSamplerWithProperties(
    context: Handle,
    properties: *const u64,
    errcode: *mut ClInt,
) -> Handle {
    tryp!(get::<Context>(context), errcode);
    let list = tryp!(property_list(properties), errcode);
    let mut settings = [
        (cl::CL_SAMPLER_NORMALIZED_COORDS, 1u32, false),
        (cl::CL_SAMPLER_ADDRESSING_MODE, cl::CL_ADDRESS_CLAMP, false),
        (cl::CL_SAMPLER_FILTER_MODE, cl::CL_FILTER_NEAREST, false),
    ];
    // Each property may appear once.
    for (name, value) in property_pairs(&list) {
        let setting = settings.iter_mut().find(|s| u64::from(s.0) == name && !s.2);
        let Some(setting) = setting else {
            set_err(errcode, cl::CL_INVALID_VALUE);
            return null_mut();
        };
        setting.1 = value as u32;
        setting.2 = true;
    }
    let h = tryp!(
        create_sampler(context, settings.map(|s| s.1), list),
        errcode
    );
    set_err(errcode, cl::CL_SUCCESS);
    h
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
        cl::CL_SAMPLER_PROPERTIES => property_bytes(&s.v.property_list),
        _ => return cl::CL_INVALID_VALUE,
    };
    ret_info(&bytes, size, value, size_ret)
}
