//! Contexts: a set of devices of one node.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::{Arc, Mutex};

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::Request;

use crate::object::*;

use super::platform::clGetDeviceIDs;
use super::{bytes_of, handles_bytes, reply, ret_info, set_err, slice};

type Notify = Option<crate::node::ContextCallback>;

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clCreateContext,
        clCreateContextFromType,
        clRetainContext,
        clReleaseContext,
        clGetContextInfo,
        clSetContextDestructorCallback,
    ]
}

unsafe fn context_properties(props: *const isize) -> Result<(Option<Handle>, Vec<isize>), ClInt> {
    let mut platform = None;
    let mut copy = Vec::new();
    if props.is_null() {
        return Ok((None, copy));
    }
    let mut i = 0;
    loop {
        let key = *props.add(i);
        copy.push(key);
        if key == 0 {
            break;
        }
        let val = *props.add(i + 1);
        copy.push(val);
        if key == cl::CL_CONTEXT_PLATFORM {
            get::<Platform>(val as Handle).map_err(|_| cl::CL_INVALID_PLATFORM)?;
            platform = Some(val as Handle);
        } else {
            return Err(cl::CL_INVALID_PROPERTY);
        }
        i += 2;
        if i > 64 {
            return Err(cl::CL_INVALID_PROPERTY);
        }
    }
    Ok((platform, copy))
}

unsafe fn create_context(
    props: Vec<isize>,
    devices: Vec<H>,
    notify: Notify,
    user_data: *mut c_void,
) -> Result<Handle, ClInt> {
    if notify.is_none() && !user_data.is_null() {
        return Err(cl::CL_INVALID_VALUE);
    }
    let first = get::<Device>(devices[0] as Handle)?;
    let node = Arc::clone(&first.v.node);
    let mut remote = Vec::new();
    for &d in &devices {
        let o = get::<Device>(d as Handle)?;
        if !Arc::ptr_eq(&o.v.node, &node) {
            return Err(cl::CL_INVALID_DEVICE);
        }
        remote.push(o.v.remote);
    }
    let id = node.next_id();
    reply(node.call(&Request::CreateContext {
        id,
        devices: remote,
    }))?;
    if let Some(notify) = notify {
        node.add_notifier(crate::node::ContextNotifier {
            context: id,
            notify,
            user_data: user_data as usize,
        });
    }
    Ok(new_handle(Context {
        node,
        id,
        devices,
        properties: props,
        creation_queue: Mutex::new(None),
        destructors: Mutex::new(Vec::new()),
    }))
}

pub unsafe extern "C" fn clCreateContext(
    properties: *const isize,
    num_devices: u32,
    devices: *const Handle,
    notify: Notify,
    user_data: *mut c_void,
    errcode: *mut ClInt,
) -> Handle {
    let (_, props) = tryp!(context_properties(properties), errcode);
    if num_devices == 0 || devices.is_null() {
        set_err(errcode, cl::CL_INVALID_VALUE);
        return null_mut();
    }
    let devs: Vec<H> = slice(devices, num_devices)
        .iter()
        .map(|d| *d as H)
        .collect();
    let h = tryp!(create_context(props, devs, notify, user_data), errcode);
    set_err(errcode, cl::CL_SUCCESS);
    h
}

pub unsafe extern "C" fn clCreateContextFromType(
    properties: *const isize,
    device_type: u64,
    notify: Notify,
    user_data: *mut c_void,
    errcode: *mut ClInt,
) -> Handle {
    let (platform, props) = tryp!(context_properties(properties), errcode);
    let platform = match platform {
        Some(p) => p,
        None => match crate::platforms().first() {
            Some(p) => *p as Handle,
            None => {
                set_err(errcode, cl::CL_INVALID_PLATFORM);
                return null_mut();
            }
        },
    };
    let mut n = 0u32;
    let rc = clGetDeviceIDs(platform, device_type, 0, null_mut(), &mut n);
    if rc != cl::CL_SUCCESS {
        set_err(errcode, rc);
        return null_mut();
    }
    let mut devs = vec![null_mut(); n as usize];
    clGetDeviceIDs(platform, device_type, n, devs.as_mut_ptr(), null_mut());
    let h = tryp!(
        create_context(
            props,
            devs.iter().map(|d| *d as H).collect(),
            notify,
            user_data
        ),
        errcode
    );
    set_err(errcode, cl::CL_SUCCESS);
    h
}

/// The node id of the context's creation queue (see [`Context::creation_queue`]), made
/// on first use.
pub(super) fn creation_queue(c: &Obj<Context>) -> Result<u64, ClInt> {
    let mut queue = c.v.creation_queue.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(id) = *queue {
        return Ok(id);
    }
    let device = get::<Device>(c.v.devices[0] as Handle)?;
    let id = c.v.node.next_id();
    reply(c.v.node.call(&Request::CreateQueue {
        id,
        context: c.v.id,
        device: device.v.remote,
        properties: 0,
    }))?;
    *queue = Some(id);
    Ok(id)
}

pub unsafe extern "C" fn clRetainContext(c: Handle) -> ClInt {
    retain::<Context>(c)
}
pub unsafe extern "C" fn clReleaseContext(c: Handle) -> ClInt {
    release::<Context>(c)
}

pub unsafe extern "C" fn clGetContextInfo(
    context: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let c = tryr!(get::<Context>(context));
    let bytes = match param {
        cl::CL_CONTEXT_REFERENCE_COUNT => bytes_of(ref_count(c)),
        cl::CL_CONTEXT_DEVICES => handles_bytes(&c.v.devices),
        cl::CL_CONTEXT_NUM_DEVICES => bytes_of(c.v.devices.len() as u32),
        cl::CL_CONTEXT_PROPERTIES => {
            c.v.properties
                .iter()
                .flat_map(|p| p.to_ne_bytes())
                .collect()
        }
        _ => return cl::CL_INVALID_VALUE,
    };
    ret_info(&bytes, size, value, size_ret)
}

/// OpenCL 3.0: `notify(context, user_data)` runs when the context is freed (after its
/// last release and that of every object holding it), callbacks in reverse order of
/// registration.
pub unsafe extern "C" fn clSetContextDestructorCallback(
    context: Handle,
    notify: Option<unsafe extern "C" fn(Handle, *mut c_void)>,
    user_data: *mut c_void,
) -> ClInt {
    let c = tryr!(get::<Context>(context));
    let Some(notify) = notify else {
        return cl::CL_INVALID_VALUE;
    };
    c.v.add_destructor(notify, user_data);
    cl::CL_SUCCESS
}
