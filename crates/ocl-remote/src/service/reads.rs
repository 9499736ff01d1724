//! The reads of a running task: where their bytes wait between the runtime and the
//! client's socket.
//!
//! A read is sent once its whole task has run (its `ReadData` frames precede the task's
//! `TaskDone`). Its bytes wait either in a buffer of the node, filled by the runtime
//! (`clEnqueueReadBuffer`), or in the runtime's own memory, mapped for reading
//! (`clEnqueueMapBuffer`) and unmapped once sent. The mapping saves a copy of the whole
//! read and, above all, the page faults of a fresh buffer for it: over TCP a 256 MiB
//! map of a buffer took 170 ms in the node before the first byte left, 25 ms of it the
//! copy (PoCL maps a CPU device's buffers in place). A read is only mapped when no
//! later command of its task can write memory, since the client must get the bytes as
//! they were when the read ran.

use std::ffi::c_void;

use super::events::exec_status;
use crate::cl::{self, ClInt};
use crate::ffi::{Api, Handle};

/// Where a pending read's bytes are.
enum Dest {
    /// A buffer of the node: the runtime fills its spare capacity, and its length is set
    /// only once the read's event says it completed (otherwise the bytes are zeroed),
    /// so that no uninitialised memory — possibly another client's freed data — is
    /// ever sent.
    Copied(Vec<u8>),
    /// The runtime's memory, mapped on `queue` from `mem` at `ptr` (null if the map
    /// failed).
    Mapped {
        ptr: *mut c_void,
        queue: Handle,
        mem: Handle,
    },
}

/// A read enqueued in the runtime.
pub(crate) struct PendingRead {
    token: u64,
    dest: Dest,
    size: usize,
    /// The read's event; null if the enqueue failed.
    event: Handle,
    /// Whether `event` was created here (no client event asked for) and is released
    /// here.
    own_event: bool,
}

/// A read's bytes once its task has run.
pub(crate) struct ReadResult {
    pub token: u64,
    data: ResultData,
}

enum ResultData {
    Owned(Vec<u8>),
    /// Mapped memory of the runtime, valid until [`unmap`].
    Mapped {
        ptr: *mut c_void,
        len: usize,
        queue: Handle,
        mem: Handle,
    },
}

impl ReadResult {
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            ResultData::Owned(v) => v,
            // SAFETY: the mapping holds `len` readable bytes until `unmap`, which takes
            // the results by value.
            ResultData::Mapped { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(ptr.cast::<u8>(), *len)
            },
        }
    }
}

/// The event slot a read enqueue writes to: the client's (`evp`), or `own` when the
/// client asked for none (the node needs one to check the read completed).
fn event_slot(evp: *mut Handle, own: &mut Handle) -> *mut Handle {
    if evp.is_null() {
        own
    } else {
        evp
    }
}

/// Starts a read of `size` bytes into a fresh buffer with `call(destination, event
/// slot)` and records it in `reads`.
///
/// # Safety
/// `evp` is null or points to a handle slot; `call` enqueues a read of at most `size`
/// bytes into its destination.
pub(crate) unsafe fn start_copy(
    reads: &mut Vec<PendingRead>,
    token: u64,
    size: usize,
    evp: *mut Handle,
    call: impl FnOnce(*mut c_void, *mut Handle) -> ClInt,
) -> ClInt {
    // Not zero-filled first (a memset of the whole read, 10 % of the service's CPU time
    // in a 1 MiB write + kernel + read loop over TCP): see `Dest::Copied`.
    let mut data: Vec<u8> = Vec::with_capacity(size);
    let ptr = data.as_mut_ptr();
    let mut own: Handle = std::ptr::null_mut();
    let slot = event_slot(evp, &mut own);
    let rc = call(ptr.cast(), slot);
    // The Vec's heap buffer does not move when `reads` grows.
    reads.push(PendingRead {
        token,
        dest: Dest::Copied(data),
        size,
        event: if rc == cl::CL_SUCCESS {
            *slot
        } else {
            std::ptr::null_mut()
        },
        own_event: evp.is_null(),
    });
    rc
}

/// Starts a read of `size` bytes of buffer `mem` at `offset` by mapping it for reading
/// on queue `q` behind `waits`, and records it in `reads`.
///
/// # Safety
/// `q`, `mem` and the events in `waits` are live; `evp` is null or points to a handle
/// slot; `size` is not zero.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn start_map(
    api: &Api,
    reads: &mut Vec<PendingRead>,
    q: Handle,
    mem: Handle,
    (offset, size): (usize, usize),
    (n, w): (u32, *const Handle),
    evp: *mut Handle,
    token: u64,
) -> ClInt {
    debug_assert!(size > 0);
    let mut own: Handle = std::ptr::null_mut();
    let slot = event_slot(evp, &mut own);
    let mut rc = cl::CL_SUCCESS;
    let ptr = (api.clEnqueueMapBuffer)(
        q,
        mem,
        0,
        cl::CL_MAP_READ,
        offset,
        size,
        n,
        w,
        slot,
        &mut rc,
    );
    let mapped = rc == cl::CL_SUCCESS && !ptr.is_null();
    reads.push(PendingRead {
        token,
        dest: Dest::Mapped {
            ptr: if mapped { ptr } else { std::ptr::null_mut() },
            queue: q,
            mem,
        },
        size,
        event: if mapped { *slot } else { std::ptr::null_mut() },
        own_event: evp.is_null(),
    });
    if rc == cl::CL_SUCCESS && !mapped {
        cl::CL_OUT_OF_RESOURCES
    } else {
        rc
    }
}

impl PendingRead {
    /// The read's bytes once its task has run: zeroes unless its event says it completed.
    ///
    /// # Safety
    /// `event` is null or a live event of the read; the task's commands have finished.
    pub unsafe fn settle(self, api: &Api) -> ReadResult {
        let mut exec: ClInt = -1;
        if !self.event.is_null() {
            exec = exec_status(api, self.event, exec);
            if self.own_event {
                (api.clReleaseEvent)(self.event);
            }
        }
        let complete = exec == cl::CL_COMPLETE;
        let zeroes = || vec![0u8; self.size];
        let data = match self.dest {
            Dest::Copied(mut data) if complete => {
                // SAFETY: the runtime wrote all `size` bytes of the spare capacity.
                data.set_len(self.size);
                ResultData::Owned(data)
            }
            Dest::Copied(_) => ResultData::Owned(zeroes()),
            Dest::Mapped { ptr, .. } if ptr.is_null() => ResultData::Owned(zeroes()),
            Dest::Mapped { ptr, queue, mem } if complete => ResultData::Mapped {
                ptr,
                len: self.size,
                queue,
                mem,
            },
            Dest::Mapped { ptr, queue, mem } => {
                unmap_one(api, queue, mem, ptr);
                ResultData::Owned(zeroes())
            }
        };
        ReadResult {
            token: self.token,
            data,
        }
    }
}

/// Enqueues the unmapping of `ptr`.
///
/// # Safety
/// `ptr` is a live mapping of `mem` made on `queue`.
unsafe fn unmap_one(api: &Api, queue: Handle, mem: Handle, ptr: *mut c_void) {
    (api.clEnqueueUnmapMemObject)(queue, mem, ptr, 0, std::ptr::null(), std::ptr::null_mut());
}

/// Gives the mapped results back to the runtime once they have been sent, and waits
/// until it has them: the next task may write those buffers.
///
/// # Safety
/// The objects the results were read from are still live.
pub(crate) unsafe fn unmap(api: &Api, results: Vec<ReadResult>) {
    let mut queues: Vec<Handle> = Vec::new();
    for r in results {
        if let ResultData::Mapped {
            ptr, queue, mem, ..
        } = r.data
        {
            unmap_one(api, queue, mem, ptr);
            if !queues.contains(&queue) {
                queues.push(queue);
            }
        }
    }
    for q in queues {
        (api.clFinish)(q);
    }
}
