//! Image commands: reads, writes, copies (also to and from buffers), fills and maps.
//!
//! Pixel data travels tightly packed (see [`super::image`]). A mapped image is a copy of
//! the region, read from the node and written back at unmap when mapped for writing:
//! in the application's memory for an image created with `CL_MEM_USE_HOST_PTR` (laid
//! out as there), otherwise in memory of the ICD, tightly packed.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Arc;

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::{Command, ImageCmd, ImageOp};

use crate::node::{HostDst, Keep};
use crate::object::*;

use super::enqueue::{
    check_range, event_slot, finish_blocking, host_maps, host_reads, host_writes, prologue,
    read_through_scratch, same_node, Enqueue,
};
use super::image::{host_strides, image, image_cmd, in_image, wide, write_pieces};
use super::rect::read3;
use super::set_err;

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clEnqueueReadImage,
        clEnqueueWriteImage,
        clEnqueueCopyImage,
        clEnqueueCopyImageToBuffer,
        clEnqueueCopyBufferToImage,
        clEnqueueFillImage,
        clEnqueueMapImage,
    ]
}

/// Enqueues a read of `region` at `origin` into host memory at `ptr` laid out with
/// `strides` (row, slice bytes), which `keep` (if any) keeps alive; `slot` receives the
/// event (null: none).
pub(super) unsafe fn enqueue_image_read(
    enq: &mut Enqueue<'_>,
    m: &Obj<Mem>,
    meta: &ImageMeta,
    (origin, region): ([usize; 3], [usize; 3]),
    strides: (usize, usize),
    (ptr, keep): (*mut u8, Option<Keep>),
    command_type: u32,
    slot: *mut Handle,
) {
    let q = enq.q;
    let (ev, mut evref) = enq.event(command_type, slot);
    // Every piece carries the event and the wait list (see `enqueue_image_write`).
    let row_len = region[0] * meta.elem;
    let tight = strides == (row_len, row_len * region[1]);
    // A tight host layout takes the whole region in one piece, else one row at a time.
    let pieces: Vec<([usize; 3], [usize; 3], usize)> = if tight {
        vec![(origin, region, 0)]
    } else {
        (0..region[2])
            .flat_map(|z| (0..region[1]).map(move |y| (y, z)))
            .map(|(y, z)| {
                (
                    [origin[0], origin[1] + y, origin[2] + z],
                    [region[0], 1, 1],
                    z * strides.1 + y * strides.0,
                )
            })
            .collect()
    };
    let n = pieces.len();
    for (i, (at, size, host_offset)) in pieces.into_iter().enumerate() {
        let last = i + 1 == n;
        let token = q.v.node.next_id();
        let cmd = Command::Image(ImageCmd {
            src: m.v.id,
            src_origin: wide(at),
            region: wide(size),
            token,
            ..image_cmd(q.v.id, ev, ImageOp::Read)
        });
        let dst = HostDst {
            ptr: ptr as usize + host_offset,
            len: size.iter().product::<usize>() * meta.elem,
            _keep: keep.clone(),
        };
        q.v.node.enqueue(
            &cmd,
            &enq.waits,
            if last { evref.take() } else { None },
            Some((token, dst)),
        );
    }
}

/// Enqueues a write of `region` at `origin` from host memory at `ptr` laid out with
/// `strides`; the data is copied now (in pieces of whole rows of one slice), so the
/// memory is reusable on return.
pub(super) unsafe fn enqueue_image_write(
    enq: &mut Enqueue<'_>,
    m: &Obj<Mem>,
    meta: &ImageMeta,
    (origin, region): ([usize; 3], [usize; 3]),
    strides: (usize, usize),
    ptr: *const u8,
    command_type: u32,
    event: *mut Handle,
) {
    let q = enq.q;
    let (ev, mut evref) = enq.event(command_type, event);
    // Every piece carries the event and the wait list: on an out-of-order queue the
    // pieces run in any order.
    let waits = &enq.waits;
    write_pieces(
        meta,
        (origin, region),
        strides,
        ptr,
        |last, at, size, data| {
            let cmd = Command::Image(ImageCmd {
                dst: m.v.id,
                dst_origin: wide(at),
                region: wide(size),
                data,
                ..image_cmd(q.v.id, ev, ImageOp::Write)
            });
            q.v.node
                .enqueue(&cmd, waits, if last { evref.take() } else { None }, None);
        },
    );
}

/// What a read or write of an image checks: the queue and its wait list, the image on
/// the queue's node, the region inside the image, the host layout, the host pointer.
type Transfer<'a> = (
    Enqueue<'a>,
    &'a Obj<Mem>,
    ImageMeta,
    [usize; 3],
    [usize; 3],
    (usize, usize),
);

unsafe fn transfer<'a>(
    queue: Handle,
    mem: Handle,
    (origin, region): (*const usize, *const usize),
    (row_pitch, slice_pitch): (usize, usize),
    ptr: *const c_void,
    (num_wait, wait): (u32, *const Handle),
) -> Result<Transfer<'a>, ClInt> {
    let enq = prologue(queue, num_wait, wait)?;
    let (m, meta) = image(mem)?;
    same_node(&enq.q.v.node, &m.v.node)?;
    let (origin, region) = (read3(origin)?, read3(region)?);
    in_image(&meta, origin, region)?;
    let strides = host_strides(meta.image_type, meta.elem, region, row_pitch, slice_pitch)?;
    if ptr.is_null() {
        return Err(cl::CL_INVALID_VALUE);
    }
    Ok((enq, m, meta, origin, region, strides))
}

pub unsafe extern "C" fn clEnqueueReadImage(
    queue: Handle,
    mem: Handle,
    blocking: u32,
    origin: *const usize,
    region: *const usize,
    row_pitch: usize,
    slice_pitch: usize,
    ptr: *mut c_void,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    let t = tryr!(transfer(
        queue,
        mem,
        (origin, region),
        (row_pitch, slice_pitch),
        ptr.cast(),
        (num_wait, wait)
    ));
    let (mut enq, m, meta, origin, region, strides) = t;
    tryr!(host_reads(m));
    let q = enq.q;
    let mut internal: Handle = null_mut();
    let slot = event_slot(blocking != 0, event, &mut internal);
    enqueue_image_read(
        &mut enq,
        m,
        &meta,
        (origin, region),
        strides,
        (ptr.cast::<u8>(), None),
        cl::CL_COMMAND_READ_IMAGE,
        slot,
    );
    finish_blocking(&q.v.node, blocking != 0, slot, internal)
}

pub unsafe extern "C" fn clEnqueueWriteImage(
    queue: Handle,
    mem: Handle,
    _blocking: u32,
    origin: *const usize,
    region: *const usize,
    row_pitch: usize,
    slice_pitch: usize,
    ptr: *const c_void,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    let t = tryr!(transfer(
        queue,
        mem,
        (origin, region),
        (row_pitch, slice_pitch),
        ptr.cast(),
        (num_wait, wait)
    ));
    let (mut enq, m, meta, origin, region, strides) = t;
    tryr!(host_writes(m));
    tryr!(enq.hold_room(region.iter().product::<usize>() * meta.elem));
    // The data is copied now, so the host memory is reusable on return.
    enqueue_image_write(
        &mut enq,
        m,
        &meta,
        (origin, region),
        strides,
        ptr.cast::<u8>(),
        cl::CL_COMMAND_WRITE_IMAGE,
        event,
    );
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clEnqueueCopyImage(
    queue: Handle,
    src: Handle,
    dst: Handle,
    src_origin: *const usize,
    dst_origin: *const usize,
    region: *const usize,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    let mut enq = tryr!(prologue(queue, num_wait, wait));
    let q = enq.q;
    let (s, s_meta) = tryr!(image(src));
    let (d, d_meta) = tryr!(image(dst));
    tryr!(same_node(&q.v.node, &s.v.node));
    tryr!(same_node(&q.v.node, &d.v.node));
    if s_meta.format != d_meta.format {
        return cl::CL_IMAGE_FORMAT_MISMATCH;
    }
    let (so, doo, r) = (
        tryr!(read3(src_origin)),
        tryr!(read3(dst_origin)),
        tryr!(read3(region)),
    );
    tryr!(in_image(&s_meta, so, r));
    tryr!(in_image(&d_meta, doo, r));
    let (ev, evref) = enq.event(cl::CL_COMMAND_COPY_IMAGE, event);
    let cmd = Command::Image(ImageCmd {
        src: s.v.id,
        dst: d.v.id,
        src_origin: wide(so),
        dst_origin: wide(doo),
        region: wide(r),
        ..image_cmd(q.v.id, ev, ImageOp::Copy)
    });
    q.v.node.enqueue(&cmd, &enq.waits, evref, None);
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clEnqueueCopyImageToBuffer(
    queue: Handle,
    src: Handle,
    dst: Handle,
    src_origin: *const usize,
    region: *const usize,
    dst_offset: usize,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    copy_with_buffer(
        queue,
        src,
        dst,
        src_origin,
        region,
        dst_offset,
        ImageOp::ToBuffer,
        Waits {
            num_wait,
            wait,
            event,
        },
    )
}

pub unsafe extern "C" fn clEnqueueCopyBufferToImage(
    queue: Handle,
    src: Handle,
    dst: Handle,
    src_offset: usize,
    dst_origin: *const usize,
    region: *const usize,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    copy_with_buffer(
        queue,
        dst,
        src,
        dst_origin,
        region,
        src_offset,
        ImageOp::FromBuffer,
        Waits {
            num_wait,
            wait,
            event,
        },
    )
}

/// A command's wait list and event slot.
struct Waits {
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
}

/// A copy between `image` (at `origin`) and `buffer` (at `offset`): `ToBuffer` or
/// `FromBuffer`.
unsafe fn copy_with_buffer(
    queue: Handle,
    image_h: Handle,
    buffer_h: Handle,
    origin: *const usize,
    region: *const usize,
    offset: usize,
    op: ImageOp,
    w: Waits,
) -> ClInt {
    let mut enq = tryr!(prologue(queue, w.num_wait, w.wait));
    let q = enq.q;
    let (image_m, meta) = tryr!(image(image_h));
    let buffer = tryr!(get::<Mem>(buffer_h));
    if buffer.v.image.is_some() {
        return cl::CL_INVALID_MEM_OBJECT;
    }
    tryr!(same_node(&q.v.node, &image_m.v.node));
    tryr!(same_node(&q.v.node, &buffer.v.node));
    let (o, r) = (tryr!(read3(origin)), tryr!(read3(region)));
    let bytes = tryr!(in_image(&meta, o, r));
    tryr!(check_range(offset, bytes, buffer.v.size));
    let to_buffer = op == ImageOp::ToBuffer;
    let command_type = if to_buffer {
        cl::CL_COMMAND_COPY_IMAGE_TO_BUFFER
    } else {
        cl::CL_COMMAND_COPY_BUFFER_TO_IMAGE
    };
    let (ev, evref) = enq.event(command_type, w.event);
    let base = image_cmd(q.v.id, ev, op);
    let cmd = Command::Image(if to_buffer {
        ImageCmd {
            src: image_m.v.id,
            dst: buffer.v.id,
            src_origin: wide(o),
            region: wide(r),
            offset: offset as u64,
            ..base
        }
    } else {
        ImageCmd {
            src: buffer.v.id,
            dst: image_m.v.id,
            dst_origin: wide(o),
            region: wide(r),
            offset: offset as u64,
            ..base
        }
    });
    q.v.node.enqueue(&cmd, &enq.waits, evref, None);
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clEnqueueFillImage(
    queue: Handle,
    mem: Handle,
    color: *const c_void,
    origin: *const usize,
    region: *const usize,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    let mut enq = tryr!(prologue(queue, num_wait, wait));
    let q = enq.q;
    let (m, meta) = tryr!(image(mem));
    tryr!(same_node(&q.v.node, &m.v.node));
    if color.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    let (o, r) = (tryr!(read3(origin)), tryr!(read3(region)));
    tryr!(in_image(&meta, o, r));
    // A fill colour is a float4, int4 or uint4.
    let colour = std::slice::from_raw_parts(color.cast::<u8>(), 16);
    let (ev, evref) = enq.event(cl::CL_COMMAND_FILL_IMAGE, event);
    let cmd = Command::Image(ImageCmd {
        dst: m.v.id,
        dst_origin: wide(o),
        region: wide(r),
        data: colour,
        ..image_cmd(q.v.id, ev, ImageOp::Fill)
    });
    q.v.node.enqueue(&cmd, &enq.waits, evref, None);
    cl::CL_SUCCESS
}

/// The mapping is a tightly packed copy of the region in memory of the ICD (read from the
/// node unless the whole region is to be overwritten), written back at unmap if mapped
/// for writing.
pub unsafe extern "C" fn clEnqueueMapImage(
    queue: Handle,
    mem: Handle,
    blocking: u32,
    map_flags: u64,
    origin: *const usize,
    region: *const usize,
    row_pitch: *mut usize,
    slice_pitch: *mut usize,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
    errcode: *mut ClInt,
) -> *mut c_void {
    let mut enq = tryp!(prologue(queue, num_wait, wait), errcode);
    let q = enq.q;
    let (m, meta) = tryp!(image(mem), errcode);
    tryp!(same_node(&q.v.node, &m.v.node), errcode);
    let (origin, region) = (tryp!(read3(origin), errcode), tryp!(read3(region), errcode));
    let bytes = tryp!(in_image(&meta, origin, region), errcode);
    tryp!(host_maps(m, map_flags), errcode);
    if row_pitch.is_null() {
        set_err(errcode, cl::CL_INVALID_VALUE);
        return null_mut();
    }
    // The mapping: for `CL_MEM_USE_HOST_PTR`, the application's memory, as native
    // runtimes do; otherwise memory of ours, tightly packed.
    let row_len = region[0] * meta.elem;
    let mut backing = None;
    let (ptr, strides) = if m.v.host_ptr != 0 {
        let s = meta.host_strides;
        let at = origin[0] * meta.elem + origin[1] * s.0 + origin[2] * s.1;
        ((m.v.host_ptr + at) as *mut u8, s)
    } else {
        let b = HostMem::zeroed(bytes);
        let ptr = b.ptr();
        backing = Some(b);
        (ptr, (row_len, row_len * region[1]))
    };
    *row_pitch = strides.0;
    if !slice_pitch.is_null() {
        *slice_pitch = match meta.image_type {
            cl::CL_MEM_OBJECT_IMAGE3D | cl::CL_MEM_OBJECT_IMAGE2D_ARRAY => strides.1,
            cl::CL_MEM_OBJECT_IMAGE1D_ARRAY => strides.0,
            _ => 0,
        };
    }
    let mut internal: Handle = null_mut();
    let slot = event_slot(blocking != 0, event, &mut internal);
    if map_flags & cl::CL_MAP_WRITE_INVALIDATE_REGION != 0 {
        // Nothing to fetch: the application overwrites the whole region.
        let (ev, evref) = enq.event(cl::CL_COMMAND_MAP_IMAGE, slot);
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
        let keep = Some(Arc::new((backing.clone(), Arc::clone(&m.v.life))) as Keep);
        if host_reads(m).is_ok() {
            enqueue_image_read(
                &mut enq,
                m,
                &meta,
                (origin, region),
                strides,
                (ptr, keep),
                cl::CL_COMMAND_MAP_IMAGE,
                slot,
            );
        } else {
            // Mapped for writing, the host may not read it: through a scratch buffer
            // (tightly packed), a row at a time into the mapping.
            let copy = |queue, scratch, event| {
                Command::Image(ImageCmd {
                    src: m.v.id,
                    dst: scratch,
                    src_origin: wide(origin),
                    region: wide(region),
                    ..image_cmd(queue, event, ImageOp::ToBuffer)
                })
            };
            let rows = (0..region[2]).flat_map(|z| (0..region[1]).map(move |y| (y, z)));
            let pieces = rows
                .map(|(y, z)| {
                    let dst = HostDst {
                        ptr: ptr as usize + z * strides.1 + y * strides.0,
                        len: row_len,
                        _keep: keep.clone(),
                    };
                    ((z * region[1] + y) * row_len, dst)
                })
                .collect();
            tryp!(
                read_through_scratch(
                    &mut enq,
                    m,
                    copy,
                    (bytes, pieces),
                    cl::CL_COMMAND_MAP_IMAGE,
                    slot
                ),
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
            ptr: ptr as usize,
            offset: 0,
            size: bytes,
            flags: map_flags,
            _backing: backing,
            image: Some(ImageMapping {
                origin,
                region,
                strides,
            }),
        });
    set_err(errcode, cl::CL_SUCCESS);
    ptr.cast::<c_void>()
}
