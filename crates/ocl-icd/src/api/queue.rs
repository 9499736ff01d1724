//! Command queues. A flush sends the connection's open task; a finish waits for it.

use std::ffi::c_void;
use std::ptr::{null, null_mut};
use std::sync::Arc;

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::Request;

use crate::object::*;

use super::PropertyList;
use super::{bytes_of, property_bytes, property_list, property_pairs, reply, ret_info, set_err};

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clCreateCommandQueue,
        clCreateCommandQueueWithProperties,
        clRetainCommandQueue,
        clReleaseCommandQueue,
        clGetCommandQueueInfo,
        clFlush,
        clFinish,
    ]
}

unsafe fn create_queue(
    context: Handle,
    device: Handle,
    properties: u64,
    property_list: PropertyList,
) -> Result<Handle, ClInt> {
    let c = get::<Context>(context)?;
    let d = get::<Device>(device)?;
    if !c.v.devices.contains(&(device as H)) {
        return Err(cl::CL_INVALID_DEVICE);
    }
    const HOST: u64 = cl::CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE | cl::CL_QUEUE_PROFILING_ENABLE;
    const ON_DEVICE: u64 = cl::CL_QUEUE_ON_DEVICE | cl::CL_QUEUE_ON_DEVICE_DEFAULT;
    if properties & !(HOST | ON_DEVICE) != 0 {
        return Err(cl::CL_INVALID_VALUE);
    }
    // Queues on the device need device-side enqueue, which no device presents.
    if properties & ON_DEVICE != 0 {
        return Err(cl::CL_INVALID_QUEUE_PROPERTIES);
    }
    let node = Arc::clone(&c.v.node);
    let id = node.next_id();
    reply(node.call(&Request::CreateQueue {
        id,
        context: c.v.id,
        device: d.v.remote,
        properties,
    }))?;
    retain::<Context>(context);
    node.add_queue(
        id,
        properties & cl::CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE != 0,
    );
    Ok(new_handle(Queue {
        node,
        id,
        context: context as H,
        device: device as H,
        properties,
        property_list,
    }))
}

pub unsafe extern "C" fn clCreateCommandQueue(
    context: Handle,
    device: Handle,
    properties: u64,
    errcode: *mut ClInt,
) -> Handle {
    let h = tryp!(
        create_queue(context, device, properties, Vec::new()),
        errcode
    );
    set_err(errcode, cl::CL_SUCCESS);
    h
}

/// OpenCL 2.0: `clCreateCommandQueue` with a property list; `CL_QUEUE_PROPERTIES` is
/// the only property of a host queue (`CL_QUEUE_SIZE` is a device queue's).
pub unsafe extern "C" fn clCreateCommandQueueWithProperties(
    context: Handle,
    device: Handle,
    properties: *const u64,
    errcode: *mut ClInt,
) -> Handle {
    let list = tryp!(property_list(properties), errcode);
    let mut bits = 0u64;
    for (name, value) in property_pairs(&list) {
        match u32::try_from(name) {
            Ok(cl::CL_QUEUE_PROPERTIES) => bits = value,
            Ok(cl::CL_QUEUE_SIZE) if bits & cl::CL_QUEUE_ON_DEVICE != 0 => {
                set_err(errcode, cl::CL_INVALID_QUEUE_PROPERTIES);
                return null_mut();
            }
            _ => {
                set_err(errcode, cl::CL_INVALID_VALUE);
                return null_mut();
            }
        }
    }
    let h = tryp!(create_queue(context, device, bits, list), errcode);
    set_err(errcode, cl::CL_SUCCESS);
    h
}

pub unsafe extern "C" fn clRetainCommandQueue(q: Handle) -> ClInt {
    retain::<Queue>(q)
}

pub unsafe extern "C" fn clReleaseCommandQueue(q: Handle) -> ClInt {
    // Releasing a queue implies a flush (OpenCL 1.2, 5.1).
    if let Ok(o) = get::<Queue>(q) {
        o.v.node.flush();
    }
    release::<Queue>(q)
}

pub unsafe extern "C" fn clGetCommandQueueInfo(
    queue: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let q = tryr!(get::<Queue>(queue));
    let bytes = match param {
        cl::CL_QUEUE_CONTEXT => bytes_of(q.v.context),
        cl::CL_QUEUE_DEVICE => bytes_of(q.v.device),
        cl::CL_QUEUE_REFERENCE_COUNT => bytes_of(ref_count(q)),
        cl::CL_QUEUE_PROPERTIES => bytes_of(q.v.properties),
        cl::CL_QUEUE_PROPERTIES_ARRAY => property_bytes(&q.v.property_list),
        // No queue is a device queue (OpenCL 3.0 without device-side enqueue).
        cl::CL_QUEUE_SIZE => return cl::CL_INVALID_COMMAND_QUEUE,
        cl::CL_QUEUE_DEVICE_DEFAULT => bytes_of(0usize),
        _ => return cl::CL_INVALID_VALUE,
    };
    ret_info(&bytes, size, value, size_ret)
}

pub unsafe extern "C" fn clFlush(queue: Handle) -> ClInt {
    let q = tryr!(get::<Queue>(queue));
    q.v.node.flush();
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clFinish(queue: Handle) -> ClInt {
    let q = tryr!(get::<Queue>(queue));
    if q.v.node.holds_queue(q.v.id) {
        // Commands of this queue wait for user events: a marker waits for all of them
        // (held with them) and the call for the marker; other queues' held commands are
        // not this call's to wait for.
        let mut internal: Handle = null_mut();
        let rc = super::marker::clEnqueueMarkerWithWaitList(queue, 0, null(), &mut internal);
        if rc != cl::CL_SUCCESS {
            return rc;
        }
        q.v.node.flush();
        q.v.node.wait_event(&EventRef::new(internal));
        release::<Event>(internal);
    }
    q.v.node.finish()
}
