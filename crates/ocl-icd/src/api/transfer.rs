//! Buffer reads, writes, copies and fills; mapping and unmapping; migration.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Arc;

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::Command;

use crate::node::{HostDst, Keep};
use crate::object::*;

use super::enqueue::{
    check_range, enqueue_read, enqueue_write, event_slot, finish_blocking, host_maps, host_reads,
    host_writes, prologue, read_through_scratch, same_node,
};
use super::image_enqueue;
use super::set_err;

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clEnqueueReadBuffer,
        clEnqueueWriteBuffer,
        clEnqueueCopyBuffer,
        clEnqueueFillBuffer,
        clEnqueueMapBuffer,
        clEnqueueUnmapMemObject,
        clEnqueueMigrateMemObjects,
    ]
}

pub unsafe extern "C" fn clEnqueueReadBuffer(
    queue: Handle,
    mem: Handle,
    blocking: u32,
    offset: usize,
    size: usize,
    ptr: *mut c_void,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    let mut enq = tryr!(prologue(queue, num_wait, wait));
    let q = enq.q;
    let m = tryr!(get::<Mem>(mem));
    tryr!(same_node(&q.v.node, &m.v.node));
    tryr!(check_range(offset, size, m.v.size));
    tryr!(host_reads(m));
    if ptr.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    let mut internal: Handle = null_mut();
    let slot = event_slot(blocking != 0, event, &mut internal);
    let dst = HostDst::app(ptr as usize, size);
    enqueue_read(&mut enq, m, offset, dst, cl::CL_COMMAND_READ_BUFFER, slot);
    finish_blocking(&q.v.node, blocking != 0, slot, internal)
}

pub unsafe extern "C" fn clEnqueueWriteBuffer(
    queue: Handle,
    mem: Handle,
    _blocking: u32,
    offset: usize,
    size: usize,
    ptr: *const c_void,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    let mut enq = tryr!(prologue(queue, num_wait, wait));
    let q = enq.q;
    let m = tryr!(get::<Mem>(mem));
    tryr!(same_node(&q.v.node, &m.v.node));
    tryr!(check_range(offset, size, m.v.size));
    tryr!(host_writes(m));
    if ptr.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    tryr!(enq.hold_room(size));
    // The data is copied now, so the host memory is reusable on return: a blocking
    // write needs no round trip.
    let data = std::slice::from_raw_parts(ptr.cast::<u8>(), size);
    enqueue_write(
        &mut enq,
        m,
        offset,
        data,
        cl::CL_COMMAND_WRITE_BUFFER,
        event,
    );
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clEnqueueCopyBuffer(
    queue: Handle,
    src: Handle,
    dst: Handle,
    src_offset: usize,
    dst_offset: usize,
    size: usize,
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
    tryr!(check_range(src_offset, size, s.v.size));
    tryr!(check_range(dst_offset, size, d.v.size));
    if s.v.id == d.v.id && src_offset < dst_offset + size && dst_offset < src_offset + size {
        return cl::CL_MEM_COPY_OVERLAP;
    }
    let (ev, evref) = enq.event(cl::CL_COMMAND_COPY_BUFFER, event);
    let cmd = Command::Copy {
        queue: q.v.id,
        event: ev,
        src: s.v.id,
        dst: d.v.id,
        src_offset: src_offset as u64,
        dst_offset: dst_offset as u64,
        size: size as u64,
    };
    q.v.node.enqueue(&cmd, &enq.waits, evref, None);
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clEnqueueFillBuffer(
    queue: Handle,
    mem: Handle,
    pattern: *const c_void,
    pattern_size: usize,
    offset: usize,
    size: usize,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    let mut enq = tryr!(prologue(queue, num_wait, wait));
    let q = enq.q;
    let m = tryr!(get::<Mem>(mem));
    tryr!(same_node(&q.v.node, &m.v.node));
    tryr!(check_range(offset, size, m.v.size));
    if pattern.is_null()
        || !pattern_size.is_power_of_two()
        || pattern_size > 128
        || offset % pattern_size != 0
        || size % pattern_size != 0
    {
        return cl::CL_INVALID_VALUE;
    }
    let (ev, evref) = enq.event(cl::CL_COMMAND_FILL_BUFFER, event);
    let cmd = Command::Fill {
        queue: q.v.id,
        event: ev,
        buffer: m.v.id,
        pattern: std::slice::from_raw_parts(pattern.cast::<u8>(), pattern_size),
        offset: offset as u64,
        size: size as u64,
    };
    q.v.node.enqueue(&cmd, &enq.waits, evref, None);
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clEnqueueMapBuffer(
    queue: Handle,
    mem: Handle,
    blocking: u32,
    map_flags: u64,
    offset: usize,
    size: usize,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
    errcode: *mut ClInt,
) -> *mut c_void {
    let mut enq = tryp!(prologue(queue, num_wait, wait), errcode);
    let q = enq.q;
    let m = tryp!(get::<Mem>(mem), errcode);
    tryp!(same_node(&q.v.node, &m.v.node), errcode);
    tryp!(check_range(offset, size, m.v.size), errcode);
    tryp!(host_maps(m, map_flags), errcode);
    let mut internal: Handle = null_mut();
    let slot = event_slot(blocking != 0, event, &mut internal);
    let shared = m.v.shm.as_ref().filter(|_| m.v.host_ptr == 0);
    let mut owned: Option<Arc<HostMem>> = None;
    let (ptr, flags) = if let Some(region) = shared {
        // Shared memory: the mapping is the buffer itself, ready once the commands
        // ahead of it are done; nothing to copy either way.
        (region.ptr().add(m.v.shm_offset + offset) as usize, 0)
    } else if m.v.host_ptr != 0 {
        (m.v.host_ptr + offset, map_flags)
    } else {
        let b = HostMem::zeroed(size);
        let p = b.ptr() as usize;
        owned = Some(b);
        (p, map_flags)
    };
    if shared.is_some() || map_flags & cl::CL_MAP_WRITE_INVALIDATE_REGION != 0 {
        // Nothing to fetch (the application overwrites the whole region, or the
        // mapping is the buffer itself): a marker orders the mapping.
        let (ev, evref) = enq.event(cl::CL_COMMAND_MAP_BUFFER, slot);
        q.v.node.enqueue(
            &Command::Marker {
                queue: q.v.id,
                event: ev,
            },
            &enq.waits,
            evref,
            None,
        );
    } else {
        // The read keeps the memory it fills, and the object's life, until its data is in.
        let keep = Arc::new((owned.clone(), Arc::clone(&m.v.life))) as Keep;
        let dst = HostDst {
            ptr,
            len: size,
            _keep: Some(keep),
        };
        if host_reads(m).is_ok() || m.v.shm.is_some() {
            enqueue_read(&mut enq, m, offset, dst, cl::CL_COMMAND_MAP_BUFFER, slot);
        } else {
            let copy = |queue, scratch, event| Command::Copy {
                queue,
                event,
                src: m.v.id,
                dst: scratch,
                src_offset: offset as u64,
                dst_offset: 0,
                size: size as u64,
            };
            let whole = (size, vec![(0, dst)]);
            tryp!(
                read_through_scratch(&mut enq, m, copy, whole, cl::CL_COMMAND_MAP_BUFFER, slot),
                errcode
            );
        }
    }
    let rc = finish_blocking(&q.v.node, blocking != 0, slot, internal);
    if rc != cl::CL_SUCCESS {
        set_err(errcode, rc);
        return null_mut();
    }
    m.v.maps
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Mapping {
            ptr,
            offset,
            size,
            flags,
            _backing: owned,
            image: None,
        });
    set_err(errcode, cl::CL_SUCCESS);
    ptr as *mut c_void
}

pub unsafe extern "C" fn clEnqueueUnmapMemObject(
    queue: Handle,
    mem: Handle,
    mapped: *mut c_void,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    let mut enq = tryr!(prologue(queue, num_wait, wait));
    let q = enq.q;
    let m = tryr!(get::<Mem>(mem));
    tryr!(same_node(&q.v.node, &m.v.node));
    let mapping = {
        let mut maps = m.v.maps.lock().unwrap_or_else(|p| p.into_inner());
        let Some(i) = maps.iter().position(|x| x.ptr == mapped as usize) else {
            return cl::CL_INVALID_VALUE;
        };
        maps.remove(i)
    };
    let write_back = mapping.flags & (cl::CL_MAP_WRITE | cl::CL_MAP_WRITE_INVALIDATE_REGION) != 0;
    if let (true, Some(at), Some(meta)) = (write_back, mapping.image, m.v.image) {
        image_enqueue::enqueue_image_write(
            &mut enq,
            m,
            &meta,
            (at.origin, at.region),
            at.strides,
            mapping.ptr as *const u8,
            cl::CL_COMMAND_UNMAP_MEM_OBJECT,
            event,
        );
    } else if write_back {
        let data = std::slice::from_raw_parts(mapping.ptr as *const u8, mapping.size);
        enqueue_write(
            &mut enq,
            m,
            mapping.offset,
            data,
            cl::CL_COMMAND_UNMAP_MEM_OBJECT,
            event,
        );
    } else {
        let (ev, evref) = enq.event(cl::CL_COMMAND_UNMAP_MEM_OBJECT, event);
        q.v.node.enqueue(
            &Command::Marker {
                queue: q.v.id,
                event: ev,
            },
            &enq.waits,
            evref,
            None,
        );
    }
    // The write above copied the data; the mapping's host memory can go.
    drop(mapping);
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clEnqueueMigrateMemObjects(
    queue: Handle,
    _num_mems: u32,
    _mems: *const Handle,
    _flags: u64,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    // Buffers live on the node's device already; migration is a no-op marker.
    let mut enq = tryr!(prologue(queue, num_wait, wait));
    let q = enq.q;
    let (ev, evref) = enq.event(cl::CL_COMMAND_MIGRATE_MEM_OBJECTS, event);
    q.v.node.enqueue(
        &Command::Marker {
            queue: q.v.id,
            event: ev,
        },
        &enq.waits,
        evref,
        None,
    );
    cl::CL_SUCCESS
}
