//! What every enqueue call does: check the queue and the wait list, create the event the
//! application asked for, wait for it when the call blocks; and the plain buffer reads
//! and writes the other transfers are made of.

use std::sync::Arc;

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::{Command, Request};

use crate::node::{DirectRead, HostDst, Node, WRITE_CHUNK_MAX};
use crate::object::*;

use super::slice;

/// An enqueue call under way: its queue and wait list, checked, and the user events
/// (not yet set) its command waits for.
pub(super) struct Enqueue<'a> {
    pub q: &'a Obj<Queue>,
    queue: Handle,
    gates: Vec<EventRef>,
    /// The ids of the wait list's events, which travel with the command: the node makes
    /// the runtime wait for the commands of the same task that produce them.
    pub waits: Vec<u64>,
}

/// Checks the queue and the wait list: every entry a live event of the queue's context.
/// The ids travel with the command (see docs/opencl.md). Only user events that are not set yet
/// matter: the command is held back until they are ([`crate::held`]); they are handed to
/// the node once the command is accepted ([`Enqueue::event`]).
pub(super) unsafe fn prologue<'a>(
    queue: Handle,
    num_wait: u32,
    wait: *const Handle,
) -> Result<Enqueue<'a>, ClInt> {
    let q = get::<Queue>(queue)?;
    if (num_wait == 0) != wait.is_null() {
        return Err(cl::CL_INVALID_EVENT_WAIT_LIST);
    }
    let list = slice(wait, num_wait);
    let mut events = Vec::with_capacity(list.len());
    for &e in list {
        events.push(get::<Event>(e).map_err(|_| cl::CL_INVALID_EVENT_WAIT_LIST)?);
    }
    if events.iter().any(|ev| ev.v.context != q.v.context) {
        return Err(cl::CL_INVALID_CONTEXT);
    }
    if events.iter().any(|ev| ev.v.status() < cl::CL_COMPLETE) {
        return Err(cl::CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
    }
    let gates = list
        .iter()
        .zip(&events)
        .filter(|(_, ev)| ev.v.queue == 0 && ev.v.status() > cl::CL_COMPLETE)
        .map(|(&e, _)| EventRef::new(e))
        .collect();
    let waits = events.iter().map(|ev| ev.v.id).collect();
    Ok(Enqueue {
        q,
        queue,
        gates,
        waits,
    })
}

impl Enqueue<'_> {
    /// The command is accepted: it is held back while the user events of its wait list
    /// are not set. Creates the event the application asked for (if it did, `out` not
    /// null) and a reference for the task.
    pub unsafe fn event(&mut self, command_type: u32, out: *mut Handle) -> (u64, Option<EventRef>) {
        self.accept();
        new_event(self.q, self.queue, command_type, out)
    }

    /// The call is accepted: its command is held back while the user events of its wait
    /// list are not set.
    fn accept(&mut self) {
        for gate in self.gates.drain(..) {
            self.q.v.node.watch_user_event(gate);
        }
    }

    /// Refuses (`CL_OUT_OF_HOST_MEMORY`) a command carrying `data_len` bytes of data
    /// that user events would hold back past the ICD's bound ([`crate::held`]). Writes
    /// call it before [`Enqueue::event`].
    pub fn hold_room(&self, data_len: usize) -> Result<(), ClInt> {
        self.q
            .v
            .node
            .hold_room(self.q.v.id, &self.waits, !self.gates.is_empty(), data_len)
    }

    /// Whether the wait list holds user events that are not set.
    pub fn waits_for_user_events(&self) -> bool {
        !self.gates.is_empty()
    }
}

/// Creates the event the application asked for (if it did) and a reference for the task.
unsafe fn new_event(
    q: &Obj<Queue>,
    queue: Handle,
    command_type: u32,
    out: *mut Handle,
) -> (u64, Option<EventRef>) {
    if out.is_null() {
        return (0, None);
    }
    retain::<Queue>(queue);
    let h = new_handle(Event::new(
        Arc::clone(&q.v.node),
        queue as H,
        q.v.context,
        command_type,
    ));
    *out = h;
    let r = EventRef::new(h);
    (r.id(), Some(r))
}

pub(super) fn same_node(a: &Arc<Node>, b: &Arc<Node>) -> Result<(), ClInt> {
    if Arc::ptr_eq(a, b) {
        Ok(())
    } else {
        Err(cl::CL_INVALID_CONTEXT)
    }
}

pub(super) fn check_range(offset: usize, size: usize, total: usize) -> Result<(), ClInt> {
    match offset.checked_add(size) {
        Some(end) if size > 0 && end <= total => Ok(()),
        _ => Err(cl::CL_INVALID_VALUE),
    }
}

/// Where a command's event goes: the application's slot, or for a blocking call without
/// one, `internal` (the call waits on that event and then releases it).
pub(super) fn event_slot(blocking: bool, event: *mut Handle, internal: &mut Handle) -> *mut Handle {
    if blocking && event.is_null() {
        internal
    } else {
        event
    }
}

/// For a blocking call: sends the open task and waits for the command's event `slot`
/// (whichever thread's flush sends it; a held command's when its user events are set),
/// returning the command's error if it failed.
/// Releases the internal event, if one was used.
pub(super) unsafe fn finish_blocking(
    node: &Node,
    blocking: bool,
    slot: *mut Handle,
    internal: Handle,
) -> ClInt {
    if !blocking {
        return cl::CL_SUCCESS;
    }
    node.flush();
    let event = EventRef::new(*slot);
    let status = node.wait_event(&event);
    drop(event);
    if !internal.is_null() {
        release::<Event>(internal);
    }
    if status < cl::CL_COMPLETE {
        status
    } else {
        cl::CL_SUCCESS
    }
}

/// Enqueues a read of `dst.len` bytes at `offset` of buffer `m` (checked) into `dst`;
/// `slot` receives the event (null: none).
pub(super) unsafe fn enqueue_read(
    enq: &mut Enqueue<'_>,
    m: &Obj<Mem>,
    offset: usize,
    dst: HostDst,
    command_type: u32,
    slot: *mut Handle,
) {
    let q = enq.q;
    let (ev, mut evref) = enq.event(command_type, slot);
    if let Some(src) = &m.v.shm {
        // Same host: the data is copied from shared memory when the task is done,
        // unless a user event holds the read back (then as over the network).
        let marker = Command::Marker {
            queue: q.v.id,
            event: ev,
        };
        let read = DirectRead {
            src: Arc::clone(src),
            offset: m.v.shm_offset + offset,
            dst: dst.clone(),
        };
        match q
            .v
            .node
            .enqueue_direct_reads(&marker, &enq.waits, evref.take(), vec![read])
        {
            Ok(()) => return,
            Err(back) => evref = back,
        }
    }
    let token = q.v.node.next_id();
    let cmd = Command::Read {
        queue: q.v.id,
        event: ev,
        buffer: m.v.id,
        offset: offset as u64,
        size: dst.len as u64,
        token,
    };
    q.v.node
        .enqueue(&cmd, &enq.waits, evref, Some((token, dst)));
}

/// Reads what `copy(queue, scratch, event)` copies into a scratch buffer of `size` bytes on
/// the node into host memory: `pieces` of (offset in the scratch buffer, destination).
/// For maps for writing of objects the host may not read
/// (`CL_MEM_HOST_WRITE_ONLY`): the mapping must show the current contents, but the
/// runtime (rightly) refuses to read such an object for the host, and the node too.
/// The scratch buffer is released behind the commands, which hold it until they ran.
pub(super) unsafe fn read_through_scratch<'c>(
    enq: &mut Enqueue<'_>,
    m: &Obj<Mem>,
    copy: impl FnOnce(u64, u64, u64) -> Command<'c>,
    (size, pieces): (usize, Vec<(usize, HostDst)>),
    command_type: u32,
    slot: *mut Handle,
) -> Result<(), ClInt> {
    let q = enq.q;
    let context = get::<Context>(m.v.context as Handle)?;
    let scratch = q.v.node.next_id();
    super::reply(q.v.node.call(&Request::CreateBuffer {
        id: scratch,
        context: context.v.id,
        flags: cl::CL_MEM_READ_WRITE,
        size: size as u64,
        data: &[],
    }))?;
    let (ev, mut evref) = enq.event(command_type, slot);
    // The copy waits for the wait list and the reads for the copy: on an out-of-order
    // queue nothing else orders them. Without an event of the application's the copy
    // gets an id of its own, which no event of the ICD's answers to.
    let copied = if ev != 0 { ev } else { q.v.node.next_id() };
    q.v.node
        .enqueue(&copy(q.v.id, scratch, copied), &enq.waits, None, None);
    let n = pieces.len();
    for (i, (offset, dst)) in pieces.into_iter().enumerate() {
        let last = i + 1 == n;
        let token = q.v.node.next_id();
        let read = Command::Read {
            queue: q.v.id,
            event: ev,
            buffer: scratch,
            offset: offset as u64,
            size: dst.len as u64,
            token,
        };
        let evref = if last { evref.take() } else { None };
        q.v.node
            .enqueue(&read, &[copied], evref, Some((token, dst)));
    }
    q.v.node.release(scratch);
    Ok(())
}

/// `CL_INVALID_OPERATION` unless the host may read `m` (`CL_MEM_HOST_*` flags).
pub(super) fn host_reads(m: &Obj<Mem>) -> Result<(), ClInt> {
    if cl::host_may_read(m.v.flags) {
        Ok(())
    } else {
        Err(cl::CL_INVALID_OPERATION)
    }
}

/// `CL_INVALID_OPERATION` unless the host may write `m`.
pub(super) fn host_writes(m: &Obj<Mem>) -> Result<(), ClInt> {
    if cl::host_may_write(m.v.flags) {
        Ok(())
    } else {
        Err(cl::CL_INVALID_OPERATION)
    }
}

/// Checks map flags: `CL_MAP_WRITE_INVALIDATE_REGION` goes alone, and the host may do
/// what they say to `m`.
pub(super) fn host_maps(m: &Obj<Mem>, map_flags: u64) -> Result<(), ClInt> {
    let known = cl::CL_MAP_READ | cl::CL_MAP_WRITE | cl::CL_MAP_WRITE_INVALIDATE_REGION;
    if map_flags & !known != 0
        || (map_flags & cl::CL_MAP_WRITE_INVALIDATE_REGION != 0
            && map_flags & (cl::CL_MAP_READ | cl::CL_MAP_WRITE) != 0)
    {
        return Err(cl::CL_INVALID_VALUE);
    }
    if map_flags & cl::CL_MAP_READ != 0 {
        host_reads(m)?;
    }
    if map_flags & (cl::CL_MAP_WRITE | cl::CL_MAP_WRITE_INVALIDATE_REGION) != 0 {
        host_writes(m)?;
    }
    Ok(())
}

pub(super) unsafe fn enqueue_write(
    enq: &mut Enqueue<'_>,
    m: &Obj<Mem>,
    offset: usize,
    data: &[u8],
    command_type: u32,
    event: *mut Handle,
) {
    let q = enq.q;
    let direct = m.v.shm.as_ref().filter(|_| !enq.waits_for_user_events());
    let (ev, mut evref) = enq.event(command_type, event);
    if let Some(region) = direct {
        // Same host and nothing ahead of this write: copy straight into the buffer.
        // SAFETY: offset + len was checked against the buffer (= region) size.
        let dst = region.ptr().add(m.v.shm_offset + offset);
        let marker = Command::Marker {
            queue: q.v.id,
            event: ev,
        };
        let copy = || crate::copy::copy(dst, data.as_ptr(), data.len());
        let marker = (ev != 0).then_some(&marker);
        if q.v.node.direct_write(copy, marker, &enq.waits, &mut evref) {
            return;
        }
    }
    let chunks = data.len().div_ceil(WRITE_CHUNK_MAX).max(1);
    // Every piece carries the event (it completes with the last of them) and the wait
    // list: on an out-of-order queue the pieces run in any order.
    for (i, chunk) in data.chunks(WRITE_CHUNK_MAX).enumerate() {
        let last = i + 1 == chunks;
        let cmd = Command::Write {
            queue: q.v.id,
            event: ev,
            buffer: m.v.id,
            offset: (offset + i * WRITE_CHUNK_MAX) as u64,
            data: chunk,
        };
        q.v.node.enqueue(
            &cmd,
            &enq.waits,
            if last { evref.take() } else { None },
            None,
        );
    }
}
