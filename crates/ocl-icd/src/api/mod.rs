//! The OpenCL entry points of the ICD (OpenCL 3.0, without the optional features the
//! remote path does not carry: see `unsupported`).
//!
//! Each function validates its handles against the object registry, answers what it can
//! from local state (object relations, reference counts, kernel argument values), and
//! otherwise talks to the object's node: control calls are synchronous round trips;
//! enqueues only add a command to the node's open task (see [`crate::node`]).
//! The functions are not exported by name: the ICD loader reaches them through the
//! dispatch table at the start of every object.
//!
//! One module per kind of object or call, each with the entry points it adds to the
//! dispatch table ([`entries`]): [`platform`] (platforms, devices), [`context`], [`queue`],
//! [`buffer`] ([`creation`]: large initial data), [`program`], [`kernel`], [`declared`] (what a kernel declares), [`event`],
//! [`image`], [`sampler`], and the enqueue calls: [`enqueue`] (what every enqueue does:
//! the queue and wait-list checks, events, blocking, host access, plain reads and
//! writes), [`transfer`] (reads, writes, copies, fills, maps), [`rect`] (rectangular
//! transfers), [`image_enqueue`] (image commands) and [`marker`] (markers, barriers).
//! What they all share (answering info queries, error codes of calls that return a
//! handle) is here.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use std::ffi::c_void;

use ocl_remote::cl::{self, ClInt};

use crate::object::H;

macro_rules! tryr {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return e,
        }
    };
}

macro_rules! tryp {
    ($e:expr, $errcode:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => {
                $crate::api::set_err($errcode, e);
                return std::ptr::null_mut();
            }
        }
    };
}

/// A list of entry points, by OpenCL name, for the dispatch table.
macro_rules! entry_points {
    ($($f:ident),* $(,)?) => { vec![$((stringify!($f), $f as *const c_void)),*] };
}

mod buffer;
mod context;
mod creation;
mod declared;
mod enqueue;
mod event;
mod image;
mod image_enqueue;
mod kernel;
mod marker;
mod platform;
mod program;
mod queue;
mod rect;
mod sampler;
mod transfer;

mod unsupported;

pub(crate) use declared::Declared;
pub(crate) use platform::clGetPlatformInfo;

/// A property list as the application gave it (`CL_QUEUE_PROPERTIES_ARRAY`,
/// `CL_MEM_PROPERTIES`, `CL_SAMPLER_PROPERTIES` answer it): name-value pairs and the
/// terminating 0; empty when the application passed NULL.
pub(crate) type PropertyList = Vec<u64>;

/// The most name-value pairs a property list may have: OpenCL defines fewer than ten
/// properties for any object.
const PROPERTY_PAIRS_MAX: usize = 32;

/// Copies the property list at `properties` (NULL: empty), up to its terminating 0.
/// A list longer than [`PROPERTY_PAIRS_MAX`] pairs is `CL_INVALID_PROPERTY`.
///
/// # Safety
/// `properties` is NULL or a 0-terminated list of name-value pairs.
unsafe fn property_list(properties: *const u64) -> Result<PropertyList, ClInt> {
    let mut list = Vec::new();
    if properties.is_null() {
        return Ok(list);
    }
    for i in 0..PROPERTY_PAIRS_MAX {
        let name = *properties.add(2 * i);
        list.push(name);
        if name == 0 {
            return Ok(list);
        }
        list.push(*properties.add(2 * i + 1));
    }
    Err(cl::CL_INVALID_PROPERTY)
}

/// The name-value pairs of a property list.
fn property_pairs(list: &[u64]) -> impl Iterator<Item = (u64, u64)> + '_ {
    list.chunks_exact(2).map(|pair| (pair[0], pair[1]))
}

fn property_bytes(list: &[u64]) -> Vec<u8> {
    list.iter().flat_map(|p| p.to_ne_bytes()).collect()
}

unsafe fn set_err(errcode: *mut ClInt, e: ClInt) {
    if !errcode.is_null() {
        *errcode = e;
    }
}

/// Copies an info answer out following the OpenCL rules for `param_value_size`.
unsafe fn ret_info(bytes: &[u8], size: usize, value: *mut c_void, size_ret: *mut usize) -> ClInt {
    if !value.is_null() {
        if size < bytes.len() {
            return cl::CL_INVALID_VALUE;
        }
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), value.cast::<u8>(), bytes.len());
    }
    if !size_ret.is_null() {
        *size_ret = bytes.len();
    }
    cl::CL_SUCCESS
}

fn bytes_of<T: Copy>(v: T) -> Vec<u8> {
    // SAFETY: T is a plain-old-data OpenCL scalar or handle.
    unsafe {
        std::slice::from_raw_parts((&v as *const T).cast::<u8>(), std::mem::size_of::<T>()).to_vec()
    }
}

fn handles_bytes(hs: &[H]) -> Vec<u8> {
    hs.iter().flat_map(|h| h.to_ne_bytes()).collect()
}

fn cstring_bytes(s: &[u8]) -> Vec<u8> {
    let mut v = s.to_vec();
    v.push(0);
    v
}

fn reply(r: (ClInt, Vec<u8>)) -> Result<Vec<u8>, ClInt> {
    if r.0 == cl::CL_SUCCESS {
        Ok(r.1)
    } else {
        Err(r.0)
    }
}

unsafe fn slice<'a, T>(ptr: *const T, n: u32) -> &'a [T] {
    if ptr.is_null() || n == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(ptr, n as usize)
    }
}

/// `v` without its trailing NUL bytes.
fn trim_nul(mut v: Vec<u8>) -> Vec<u8> {
    while v.last() == Some(&0) {
        v.pop();
    }
    v
}

/// The entry points this ICD implements, by OpenCL name, for the dispatch table.
pub fn entries() -> Vec<(&'static str, *const c_void)> {
    let mut v = [
        platform::entries(),
        context::entries(),
        queue::entries(),
        buffer::entries(),
        transfer::entries(),
        rect::entries(),
        marker::entries(),
        program::entries(),
        kernel::entries(),
        event::entries(),
        image::entries(),
        image_enqueue::entries(),
        sampler::entries(),
        unsupported::entries(),
    ]
    .concat();
    v.push((
        "clGetExtensionFunctionAddress",
        crate::clGetExtensionFunctionAddress as *const c_void,
    ));
    v
}
