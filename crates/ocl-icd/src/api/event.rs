//! Events: waiting, status, profiling, callbacks and user events.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use ocl_remote::cl::{self, ClInt};

use crate::object::*;

use super::{bytes_of, ret_info, set_err, slice};

type EventNotify = Option<unsafe extern "C" fn(Handle, ClInt, *mut c_void)>;

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clWaitForEvents,
        clGetEventInfo,
        clGetEventProfilingInfo,
        clSetEventCallback,
        clRetainEvent,
        clReleaseEvent,
        clCreateUserEvent,
        clSetUserEventStatus,
        clGetExtensionFunctionAddressForPlatform,
    ]
}

pub unsafe extern "C" fn clWaitForEvents(num: u32, list: *const Handle) -> ClInt {
    if num == 0 || list.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    let mut events = Vec::with_capacity(num as usize);
    for &e in slice(list, num) {
        events.push(tryr!(get::<Event>(e)));
    }
    if events.iter().any(|ev| ev.v.context != events[0].v.context) {
        return cl::CL_INVALID_CONTEXT;
    }
    let refs: Vec<_> = slice(list, num)
        .iter()
        .zip(&events)
        .map(|(&e, ev)| (Arc::clone(&ev.v.node), EventRef::new(e)))
        .collect();
    // Waiting on an event implies flushing its queue.
    for (node, r) in &refs {
        if r.status() == cl::CL_QUEUED {
            node.flush();
        }
    }
    let mut rc = cl::CL_SUCCESS;
    for (node, r) in &refs {
        node.wait_event(r);
        if r.status() < cl::CL_COMPLETE {
            rc = cl::CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
        }
    }
    rc
}

pub unsafe extern "C" fn clGetEventInfo(
    event: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let e = tryr!(get::<Event>(event));
    let bytes = match param {
        cl::CL_EVENT_COMMAND_QUEUE => bytes_of(e.v.queue),
        cl::CL_EVENT_CONTEXT => bytes_of(e.v.context),
        cl::CL_EVENT_COMMAND_TYPE => bytes_of(e.v.command_type),
        cl::CL_EVENT_REFERENCE_COUNT => bytes_of(ref_count(e)),
        cl::CL_EVENT_COMMAND_EXECUTION_STATUS => {
            // A program polling the status expects progress: send the pending task.
            if e.v.status() == cl::CL_QUEUED {
                e.v.node.flush();
            }
            bytes_of(e.v.status())
        }
        _ => return cl::CL_INVALID_VALUE,
    };
    ret_info(&bytes, size, value, size_ret)
}

pub unsafe extern "C" fn clGetEventProfilingInfo(
    event: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let e = tryr!(get::<Event>(event));
    let profiling = get::<Queue>(e.v.queue as Handle)
        .is_ok_and(|q| q.v.properties & cl::CL_QUEUE_PROFILING_ENABLE != 0);
    if !profiling || e.v.status() != cl::CL_COMPLETE {
        return cl::CL_PROFILING_INFO_NOT_AVAILABLE;
    }
    let p = e.v.profile();
    let v = match param {
        cl::CL_PROFILING_COMMAND_QUEUED => p[0],
        cl::CL_PROFILING_COMMAND_SUBMIT => p[1],
        cl::CL_PROFILING_COMMAND_START => p[2],
        cl::CL_PROFILING_COMMAND_END | cl::CL_PROFILING_COMMAND_COMPLETE => p[3],
        _ => return cl::CL_INVALID_VALUE,
    };
    ret_info(&bytes_of(v), size, value, size_ret)
}

pub unsafe extern "C" fn clSetEventCallback(
    event: Handle,
    kind: ClInt,
    notify: EventNotify,
    user_data: *mut c_void,
) -> ClInt {
    let Some(cb) = notify else {
        return cl::CL_INVALID_VALUE;
    };
    if !(cl::CL_COMPLETE..=cl::CL_SUBMITTED).contains(&kind) {
        return cl::CL_INVALID_VALUE;
    }
    add_callback(event, kind, cb, user_data as usize)
}

pub unsafe extern "C" fn clRetainEvent(e: Handle) -> ClInt {
    retain::<Event>(e)
}
pub unsafe extern "C" fn clReleaseEvent(e: Handle) -> ClInt {
    release::<Event>(e)
}

pub unsafe extern "C" fn clCreateUserEvent(context: Handle, errcode: *mut ClInt) -> Handle {
    let c = tryp!(get::<Context>(context), errcode);
    retain::<Context>(context);
    set_err(errcode, cl::CL_SUCCESS);
    new_handle(Event::new(
        Arc::clone(&c.v.node),
        0,
        context as H,
        cl::CL_COMMAND_USER,
    ))
}

pub unsafe extern "C" fn clSetUserEventStatus(event: Handle, status: ClInt) -> ClInt {
    let e = tryr!(get::<Event>(event));
    if e.v.queue != 0 {
        return cl::CL_INVALID_EVENT;
    }
    if status > cl::CL_COMPLETE {
        return cl::CL_INVALID_VALUE;
    }
    let user = EventRef::new(event);
    if user.status() <= cl::CL_COMPLETE {
        return cl::CL_INVALID_OPERATION;
    }
    if !user.set_user_status(status) {
        return cl::CL_INVALID_OPERATION;
    }
    e.v.node.user_event_done();
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clGetExtensionFunctionAddressForPlatform(
    _platform: Handle,
    name: *const c_char,
) -> *mut c_void {
    crate::clGetExtensionFunctionAddress(name)
}
