//! Rectangular buffer transfers (`clEnqueue*BufferRect`).

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Arc;

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::Command;

use crate::node::{DirectRead, HostDst, WRITE_CHUNK_MAX};
use crate::object::*;

use super::enqueue::{event_slot, finish_blocking, host_reads, host_writes, prologue, same_node};

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clEnqueueReadBufferRect,
        clEnqueueWriteBufferRect,
        clEnqueueCopyBufferRect,
    ]
}

/// An origin or region argument: three `size_t`, not null.
pub(super) unsafe fn read3(p: *const usize) -> Result<[usize; 3], ClInt> {
    if p.is_null() {
        Err(cl::CL_INVALID_VALUE)
    } else {
        Ok(*(p as *const [usize; 3]))
    }
}

/// A rectangle as rows: the byte offset of each row on both sides, and the row length.
/// Rectangles travel as one command per row; only the last row carries the event,
/// which is enough because a task's commands run in order.
unsafe fn rect_rows(
    a_origin: *const usize,
    b_origin: *const usize,
    region: *const usize,
    a_pitches: (usize, usize),
    b_pitches: (usize, usize),
) -> Result<(Vec<(usize, usize)>, usize), ClInt> {
    let (ao, bo, r) = (read3(a_origin)?, read3(b_origin)?, read3(region)?);
    if r.contains(&0) {
        return Err(cl::CL_INVALID_VALUE);
    }
    let pitches = |(row, slice): (usize, usize)| {
        let row = if row == 0 { r[0] } else { row };
        let slice = if slice == 0 { r[1] * row } else { slice };
        if row < r[0] || slice < r[1] * row {
            Err(cl::CL_INVALID_VALUE)
        } else {
            Ok((row, slice))
        }
    };
    let (a_row, a_slice) = pitches(a_pitches)?;
    let (b_row, b_slice) = pitches(b_pitches)?;
    let mut rows = Vec::with_capacity(r[1] * r[2]);
    for z in 0..r[2] {
        for y in 0..r[1] {
            let a = (ao[2] + z) * a_slice + (ao[1] + y) * a_row + ao[0];
            let b = (bo[2] + z) * b_slice + (bo[1] + y) * b_row + bo[0];
            rows.push((a, b));
        }
    }
    Ok((rows, r[0]))
}

fn rows_in(
    rows: &[(usize, usize)],
    side: impl Fn(&(usize, usize)) -> usize,
    len: usize,
    size: usize,
) -> Result<(), ClInt> {
    match rows.iter().map(&side).max() {
        Some(last) if last + len <= size => Ok(()),
        _ => Err(cl::CL_INVALID_VALUE),
    }
}

pub unsafe extern "C" fn clEnqueueReadBufferRect(
    queue: Handle,
    mem: Handle,
    blocking: u32,
    buffer_origin: *const usize,
    host_origin: *const usize,
    region: *const usize,
    buffer_row_pitch: usize,
    buffer_slice_pitch: usize,
    host_row_pitch: usize,
    host_slice_pitch: usize,
    ptr: *mut c_void,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    let mut enq = tryr!(prologue(queue, num_wait, wait));
    let q = enq.q;
    let m = tryr!(get::<Mem>(mem));
    tryr!(same_node(&q.v.node, &m.v.node));
    let (rows, len) = tryr!(rect_rows(
        buffer_origin,
        host_origin,
        region,
        (buffer_row_pitch, buffer_slice_pitch),
        (host_row_pitch, host_slice_pitch)
    ));
    tryr!(rows_in(&rows, |r| r.0, len, m.v.size));
    tryr!(host_reads(m));
    if ptr.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    let mut internal: Handle = null_mut();
    let slot = event_slot(blocking != 0, event, &mut internal);
    let (ev, mut evref) = enq.event(cl::CL_COMMAND_READ_BUFFER_RECT, slot);
    let host = ptr as usize;
    // As for a plain read: from shared memory when the task is done, unless a user event
    // holds the read back.
    let direct = match &m.v.shm {
        Some(src) => {
            let reads = rows
                .iter()
                .map(|&(b, h)| DirectRead {
                    src: Arc::clone(src),
                    offset: m.v.shm_offset + b,
                    dst: HostDst::app(host + h, len),
                })
                .collect();
            let marker = Command::Marker {
                queue: q.v.id,
                event: ev,
            };
            match q
                .v
                .node
                .enqueue_direct_reads(&marker, &enq.waits, evref.take(), reads)
            {
                Ok(()) => true,
                Err(back) => {
                    evref = back;
                    false
                }
            }
        }
        None => false,
    };
    if !direct {
        for (i, &(b, h)) in rows.iter().enumerate() {
            let last = i + 1 == rows.len();
            let token = q.v.node.next_id();
            let cmd = Command::Read {
                queue: q.v.id,
                event: ev,
                buffer: m.v.id,
                offset: b as u64,
                size: len as u64,
                token,
            };
            let dst = HostDst::app(host + h, len);
            q.v.node.enqueue(
                &cmd,
                &enq.waits,
                if last { evref.take() } else { None },
                Some((token, dst)),
            );
        }
    }
    finish_blocking(&q.v.node, blocking != 0, slot, internal)
}

pub unsafe extern "C" fn clEnqueueWriteBufferRect(
    queue: Handle,
    mem: Handle,
    _blocking: u32,
    buffer_origin: *const usize,
    host_origin: *const usize,
    region: *const usize,
    buffer_row_pitch: usize,
    buffer_slice_pitch: usize,
    host_row_pitch: usize,
    host_slice_pitch: usize,
    ptr: *const c_void,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    let mut enq = tryr!(prologue(queue, num_wait, wait));
    let q = enq.q;
    let m = tryr!(get::<Mem>(mem));
    tryr!(same_node(&q.v.node, &m.v.node));
    let (rows, len) = tryr!(rect_rows(
        buffer_origin,
        host_origin,
        region,
        (buffer_row_pitch, buffer_slice_pitch),
        (host_row_pitch, host_slice_pitch)
    ));
    tryr!(rows_in(&rows, |r| r.0, len, m.v.size));
    tryr!(host_writes(m));
    if ptr.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    tryr!(enq.hold_room(rows.len() * len));
    let host = ptr as *const u8;
    let direct = m.v.shm.as_ref().filter(|_| !enq.waits_for_user_events());
    // Data is copied into the commands now, so the call returns at once (as a blocking
    // write may: the host memory is reusable).
    let (ev, mut evref) = enq.event(cl::CL_COMMAND_WRITE_BUFFER_RECT, event);
    if let Some(region) = direct {
        // As for a plain write: straight into the buffer when nothing is ahead.
        let base = region.ptr().add(m.v.shm_offset);
        let copy = || {
            for &(b, h) in &rows {
                std::ptr::copy_nonoverlapping(host.add(h), base.add(b), len);
            }
        };
        let marker = Command::Marker {
            queue: q.v.id,
            event: ev,
        };
        let marker = (ev != 0).then_some(&marker);
        if q.v.node.direct_write(copy, marker, &enq.waits, &mut evref) {
            return cl::CL_SUCCESS;
        }
    }
    for (i, &(b, h)) in rows.iter().enumerate() {
        let last = i + 1 == rows.len();
        let data = std::slice::from_raw_parts(host.add(h), len);
        let chunks = data.len().div_ceil(WRITE_CHUNK_MAX);
        for (j, chunk) in data.chunks(WRITE_CHUNK_MAX).enumerate() {
            let final_chunk = last && j + 1 == chunks;
            let cmd = Command::Write {
                queue: q.v.id,
                event: ev,
                buffer: m.v.id,
                offset: (b + j * WRITE_CHUNK_MAX) as u64,
                data: chunk,
            };
            q.v.node.enqueue(
                &cmd,
                &enq.waits,
                if final_chunk { evref.take() } else { None },
                None,
            );
        }
    }
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clEnqueueCopyBufferRect(
    queue: Handle,
    src: Handle,
    dst: Handle,
    src_origin: *const usize,
    dst_origin: *const usize,
    region: *const usize,
    src_row_pitch: usize,
    src_slice_pitch: usize,
    dst_row_pitch: usize,
    dst_slice_pitch: usize,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    let mut enq = tryr!(prologue(queue, num_wait, wait));
    let q = enq.q;
    let s = tryr!(get::<Mem>(src));
    let d = tryr!(get::<Mem>(dst));
    tryr!(same_node(&q.v.node, &s.v.node));
    tryr!(same_node(&q.v.node, &d.v.node));
    let (rows, len) = tryr!(rect_rows(
        src_origin,
        dst_origin,
        region,
        (src_row_pitch, src_slice_pitch),
        (dst_row_pitch, dst_slice_pitch)
    ));
    tryr!(rows_in(&rows, |r| r.0, len, s.v.size));
    tryr!(rows_in(&rows, |r| r.1, len, d.v.size));
    let (ev, evref) = enq.event(cl::CL_COMMAND_COPY_BUFFER_RECT, event);
    let mut evref = evref;
    for (i, &(a, b)) in rows.iter().enumerate() {
        let last = i + 1 == rows.len();
        let cmd = Command::Copy {
            queue: q.v.id,
            event: ev,
            src: s.v.id,
            dst: d.v.id,
            src_offset: a as u64,
            dst_offset: b as u64,
            size: len as u64,
        };
        q.v.node.enqueue(
            &cmd,
            &enq.waits,
            if last { evref.take() } else { None },
            None,
        );
    }
    cl::CL_SUCCESS
}
