//! Markers and barriers.

use std::ffi::c_void;
use std::ptr::null_mut;

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::Command;

use crate::object::*;

use super::enqueue::prologue;

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clEnqueueMarkerWithWaitList,
        clEnqueueBarrierWithWaitList,
        clEnqueueMarker,
        clEnqueueBarrier,
        clEnqueueWaitForEvents,
    ]
}

unsafe fn marker(
    queue: Handle,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
    barrier: bool,
) -> ClInt {
    let mut enq = tryr!(prologue(queue, num_wait, wait));
    let q = enq.q;
    let ty = if barrier {
        cl::CL_COMMAND_BARRIER
    } else {
        cl::CL_COMMAND_MARKER
    };
    let (ev, evref) = enq.event(ty, event);
    let cmd = if barrier {
        Command::Barrier {
            queue: q.v.id,
            event: ev,
        }
    } else {
        Command::Marker {
            queue: q.v.id,
            event: ev,
        }
    };
    q.v.node.enqueue(&cmd, &enq.waits, evref, None);
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clEnqueueMarkerWithWaitList(
    q: Handle,
    n: u32,
    w: *const Handle,
    e: *mut Handle,
) -> ClInt {
    marker(q, n, w, e, false)
}
pub unsafe extern "C" fn clEnqueueBarrierWithWaitList(
    q: Handle,
    n: u32,
    w: *const Handle,
    e: *mut Handle,
) -> ClInt {
    marker(q, n, w, e, true)
}
pub unsafe extern "C" fn clEnqueueMarker(q: Handle, e: *mut Handle) -> ClInt {
    if e.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    marker(q, 0, std::ptr::null(), e, false)
}
pub unsafe extern "C" fn clEnqueueBarrier(q: Handle) -> ClInt {
    marker(q, 0, std::ptr::null(), null_mut(), true)
}
/// OpenCL 1.1's form of a barrier with a wait list: later commands of the queue wait for
/// the events.
pub unsafe extern "C" fn clEnqueueWaitForEvents(q: Handle, n: u32, w: *const Handle) -> ClInt {
    if n == 0 || w.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    marker(q, n, w, null_mut(), true)
}
