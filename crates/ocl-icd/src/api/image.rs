//! Images and samplers.
//!
//! An image lives on the node like a buffer and is an ICD `Mem` object with
//! [`ImageMeta`]; its data always travels over the socket (never shared memory). Pixel
//! data on the wire is tightly packed (rows of `width` pixels, slices of `height` rows):
//! the ICD packs what the application gives with its own row and slice pitches, and
//! unpacks read results into them (a read whose host layout is not tight travels as one
//! command per row, as rectangular buffer reads do). Large writes are cut into commands
//! of whole rows of at most [`WRITE_CHUNK_MAX`] bytes. A mapped image is a tightly packed
//! copy of the region, written back at unmap when mapped for writing.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::{Arc, Mutex};

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::{Command, ImageCmd, ImageOp, Request};

use crate::node::{HostDst, Keep, WRITE_CHUNK_MAX};
use crate::object::*;

use super::buffer::{mem_flags, no_mem_properties, CreationData, CREATE_DATA_INLINE_MAX};
use super::enqueue::{
    check_range, event_slot, finish_blocking, host_maps, host_reads, host_writes, prologue,
    read_through_scratch, same_node, Enqueue,
};
use super::rect::read3;
use super::{bytes_of, reply, ret_info, set_err};

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clCreateImage,
        clCreateImageWithProperties,
        clCreateImage2D,
        clCreateImage3D,
        clGetImageInfo,
        clGetSupportedImageFormats,
        clCreateSampler,
        clCreateSamplerWithProperties,
        clRetainSampler,
        clReleaseSampler,
        clGetSamplerInfo,
        clEnqueueReadImage,
        clEnqueueWriteImage,
        clEnqueueCopyImage,
        clEnqueueCopyImageToBuffer,
        clEnqueueCopyBufferToImage,
        clEnqueueFillImage,
        clEnqueueMapImage,
    ]
}

/// `cl_image_desc` as the application passes it.
#[repr(C)]
pub struct ImageDesc {
    image_type: u32,
    width: usize,
    height: usize,
    depth: usize,
    array_size: usize,
    row_pitch: usize,
    slice_pitch: usize,
    num_mip_levels: u32,
    num_samples: u32,
    buffer: Handle,
}

/// The host layout of `region` (pixels) given the application's pitches (0 = tight):
/// bytes from one row to the next and from one slice to the next. For a 1D image array
/// the rows are the layers, so its row stride is the slice pitch.
fn host_strides(
    image_type: u32,
    elem: usize,
    region: [usize; 3],
    row_pitch: usize,
    slice_pitch: usize,
) -> Result<(usize, usize), ClInt> {
    let tight = region[0] * elem;
    let row = if row_pitch == 0 { tight } else { row_pitch };
    if row < tight {
        return Err(cl::CL_INVALID_VALUE);
    }
    if image_type == cl::CL_MEM_OBJECT_IMAGE1D_ARRAY {
        let layer = if slice_pitch == 0 { row } else { slice_pitch };
        if layer < tight {
            return Err(cl::CL_INVALID_VALUE);
        }
        return Ok((layer, layer * region[1]));
    }
    let slice = if slice_pitch == 0 {
        row * region[1]
    } else {
        slice_pitch
    };
    if slice < row * region[1] {
        return Err(cl::CL_INVALID_VALUE);
    }
    Ok((row, slice))
}

/// Copies `region` from host memory laid out with `strides` into a tight buffer.
unsafe fn pack(
    ptr: *const u8,
    elem: usize,
    region: [usize; 3],
    strides: (usize, usize),
) -> Vec<u8> {
    let row_len = region[0] * elem;
    let mut out = Vec::with_capacity(row_len * region[1] * region[2]);
    for z in 0..region[2] {
        for y in 0..region[1] {
            let src = ptr.add(z * strides.1 + y * strides.0);
            out.extend_from_slice(std::slice::from_raw_parts(src, row_len));
        }
    }
    out
}

fn wide(v: [usize; 3]) -> [u64; 3] {
    v.map(|x| x as u64)
}

/// The image behind `mem`, with its metadata.
unsafe fn image<'a>(mem: Handle) -> Result<(&'a Obj<Mem>, ImageMeta), ClInt> {
    let m = get::<Mem>(mem)?;
    match m.v.image {
        Some(meta) => Ok((m, meta)),
        None => Err(cl::CL_INVALID_MEM_OBJECT),
    }
}

/// The tightly packed bytes of `region` at `origin`, which must lie in the image and not
/// be empty.
fn in_image(meta: &ImageMeta, origin: [usize; 3], region: [usize; 3]) -> Result<usize, ClInt> {
    cl::image_region_bytes(
        meta.elem as u64,
        wide(meta.dims),
        wide(origin),
        wide(region),
    )
    .map(|bytes| bytes as usize)
    .ok_or(cl::CL_INVALID_VALUE)
}

unsafe fn create_image(
    context: Handle,
    flags: u64,
    format: *const [u32; 2],
    desc: &ImageDesc,
    host_ptr: *mut c_void,
) -> Result<Handle, ClInt> {
    let c = get::<Context>(context)?;
    let flags = mem_flags(flags)?;
    if format.is_null() {
        return Err(cl::CL_INVALID_IMAGE_FORMAT_DESCRIPTOR);
    }
    let format = *format;
    let elem = cl::image_element_size(format[0], format[1])
        .ok_or(cl::CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)? as usize;
    let shape = [desc.width, desc.height, desc.depth, desc.array_size].map(|v| v as u64);
    let dims = cl::image_dims(desc.image_type, shape).ok_or(cl::CL_INVALID_IMAGE_DESCRIPTOR)?;
    let size = cl::image_region_bytes(elem as u64, dims, [0; 3], dims)
        .ok_or(cl::CL_INVALID_IMAGE_SIZE)? as usize;
    let dims = dims.map(|d| d as usize);
    let wants_ptr = flags & (cl::CL_MEM_USE_HOST_PTR | cl::CL_MEM_COPY_HOST_PTR) != 0;
    if wants_ptr == host_ptr.is_null() {
        return Err(cl::CL_INVALID_HOST_PTR);
    }
    let strides = if wants_ptr {
        host_strides(
            desc.image_type,
            elem,
            dims,
            desc.row_pitch,
            desc.slice_pitch,
        )
        .map_err(|_| cl::CL_INVALID_IMAGE_DESCRIPTOR)?
    } else {
        (0, 0)
    };
    // Large initial data follows the creation as write commands (see `super::buffer`).
    let inline = wants_ptr && size <= CREATE_DATA_INLINE_MAX;
    let data = if inline {
        pack(host_ptr.cast::<u8>(), elem, dims, strides)
    } else {
        Vec::new()
    };
    let meta = ImageMeta {
        image_type: desc.image_type,
        format,
        elem,
        dims,
    };
    let node = Arc::clone(&c.v.node);
    let id = node.next_id();
    reply(node.call(&Request::CreateImage {
        id,
        context: c.v.id,
        flags,
        format,
        desc: [
            u64::from(desc.image_type),
            desc.width as u64,
            desc.height as u64,
            desc.depth as u64,
            desc.array_size as u64,
        ],
        data: &data,
    }))?;
    if wants_ptr && !inline {
        let sent = CreationData::new(c).and_then(|mut creation| {
            let whole = ([0; 3], dims);
            write_pieces(
                &meta,
                whole,
                strides,
                host_ptr.cast(),
                |_, at, size, data| {
                    creation.send(|queue, event| {
                        Command::Image(ImageCmd {
                            dst: id,
                            dst_origin: wide(at),
                            region: wide(size),
                            data,
                            ..image_cmd(queue, event, ImageOp::Write)
                        })
                    });
                },
            );
            creation.finish()
        });
        if let Err(e) = sent {
            node.release(id);
            return Err(e);
        }
    }
    retain::<Context>(context);
    let keep_ptr = if flags & cl::CL_MEM_USE_HOST_PTR != 0 {
        host_ptr as usize
    } else {
        0
    };
    Ok(new_handle(Mem {
        node,
        id,
        context: context as H,
        flags,
        size,
        host_ptr: keep_ptr,
        maps: Mutex::new(Vec::new()),
        life: Arc::default(),
        shm: None,
        shm_offset: 0,
        parent: 0,
        origin: 0,
        image: Some(meta),
    }))
}

pub unsafe extern "C" fn clCreateImage(
    context: Handle,
    flags: u64,
    format: *const [u32; 2],
    desc: *const ImageDesc,
    host_ptr: *mut c_void,
    errcode: *mut ClInt,
) -> Handle {
    if desc.is_null() {
        set_err(errcode, cl::CL_INVALID_IMAGE_DESCRIPTOR);
        return null_mut();
    }
    let h = tryp!(
        create_image(context, flags, format, &*desc, host_ptr),
        errcode
    );
    set_err(errcode, cl::CL_SUCCESS);
    h
}

/// OpenCL 3.0: `clCreateImage` with a property list.
pub unsafe extern "C" fn clCreateImageWithProperties(
    context: Handle,
    properties: *const u64,
    flags: u64,
    format: *const [u32; 2],
    desc: *const ImageDesc,
    host_ptr: *mut c_void,
    errcode: *mut ClInt,
) -> Handle {
    tryp!(get::<Context>(context), errcode);
    tryp!(no_mem_properties(properties), errcode);
    clCreateImage(context, flags, format, desc, host_ptr, errcode)
}

fn desc(image_type: u32, dims: [usize; 3], row_pitch: usize, slice_pitch: usize) -> ImageDesc {
    ImageDesc {
        image_type,
        width: dims[0],
        height: dims[1],
        depth: dims[2],
        array_size: 0,
        row_pitch,
        slice_pitch,
        num_mip_levels: 0,
        num_samples: 0,
        buffer: null_mut(),
    }
}

pub unsafe extern "C" fn clCreateImage2D(
    context: Handle,
    flags: u64,
    format: *const [u32; 2],
    width: usize,
    height: usize,
    row_pitch: usize,
    host_ptr: *mut c_void,
    errcode: *mut ClInt,
) -> Handle {
    let d = desc(cl::CL_MEM_OBJECT_IMAGE2D, [width, height, 0], row_pitch, 0);
    let h = tryp!(create_image(context, flags, format, &d, host_ptr), errcode);
    set_err(errcode, cl::CL_SUCCESS);
    h
}

pub unsafe extern "C" fn clCreateImage3D(
    context: Handle,
    flags: u64,
    format: *const [u32; 2],
    width: usize,
    height: usize,
    depth: usize,
    row_pitch: usize,
    slice_pitch: usize,
    host_ptr: *mut c_void,
    errcode: *mut ClInt,
) -> Handle {
    let d = desc(
        cl::CL_MEM_OBJECT_IMAGE3D,
        [width, height, depth],
        row_pitch,
        slice_pitch,
    );
    let h = tryp!(create_image(context, flags, format, &d, host_ptr), errcode);
    set_err(errcode, cl::CL_SUCCESS);
    h
}

pub unsafe extern "C" fn clGetImageInfo(
    mem: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let (m, meta) = tryr!(image(mem));
    let bytes = match param {
        cl::CL_IMAGE_FORMAT => meta.format.iter().flat_map(|v| v.to_ne_bytes()).collect(),
        cl::CL_IMAGE_ELEMENT_SIZE => bytes_of(meta.elem),
        cl::CL_IMAGE_BUFFER => bytes_of(0usize),
        // Pitches, sizes and the rest as the node's runtime reports them.
        _ => tryr!(reply(m.v.node.call(&Request::GetImageInfo {
            image: m.v.id,
            param,
        }))),
    };
    ret_info(&bytes, size, value, size_ret)
}

pub unsafe extern "C" fn clGetSupportedImageFormats(
    context: Handle,
    flags: u64,
    image_type: u32,
    num_entries: u32,
    formats: *mut [u32; 2],
    num_formats: *mut u32,
) -> ClInt {
    let c = tryr!(get::<Context>(context));
    if num_entries == 0 && !formats.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    let payload = tryr!(reply(c.v.node.call(&Request::GetSupportedImageFormats {
        context: c.v.id,
        flags,
        image_type,
    })));
    let all: Vec<[u32; 2]> = payload
        .chunks_exact(8)
        .map(|p| {
            [
                u32::from_le_bytes(p[..4].try_into().expect("4")),
                u32::from_le_bytes(p[4..].try_into().expect("4")),
            ]
        })
        .collect();
    crate::ret_list(&all, num_entries, formats, num_formats);
    cl::CL_SUCCESS
}

// ---------------------------------------------------------------- samplers

pub unsafe extern "C" fn clCreateSampler(
    context: Handle,
    normalized: u32,
    addressing: u32,
    filter: u32,
    errcode: *mut ClInt,
) -> Handle {
    let c = tryp!(get::<Context>(context), errcode);
    let node = Arc::clone(&c.v.node);
    let id = node.next_id();
    tryp!(
        reply(node.call(&Request::CreateSampler {
            id,
            context: c.v.id,
            normalized,
            addressing,
            filter,
        })),
        errcode
    );
    retain::<Context>(context);
    set_err(errcode, cl::CL_SUCCESS);
    new_handle(Sampler {
        node,
        id,
        context: context as H,
        normalized,
        addressing,
        filter,
    })
}

/// OpenCL 2.0: `clCreateSampler` with its settings as a property list (the ones not
/// listed take their defaults: normalized coordinates, clamp, nearest).
pub unsafe extern "C" fn clCreateSamplerWithProperties(
    context: Handle,
    properties: *const u64,
    errcode: *mut ClInt,
) -> Handle {
    tryp!(get::<Context>(context), errcode);
    let mut settings = [
        (cl::CL_SAMPLER_NORMALIZED_COORDS, 1u32, false),
        (cl::CL_SAMPLER_ADDRESSING_MODE, cl::CL_ADDRESS_CLAMP, false),
        (cl::CL_SAMPLER_FILTER_MODE, cl::CL_FILTER_NEAREST, false),
    ];
    if !properties.is_null() {
        // A property list ends at 0; each property may appear once.
        for i in (0..).step_by(2) {
            let name = *properties.add(i);
            if name == 0 {
                break;
            }
            let value = *properties.add(i + 1);
            let setting = settings.iter_mut().find(|s| u64::from(s.0) == name && !s.2);
            let Some(setting) = setting else {
                set_err(errcode, cl::CL_INVALID_VALUE);
                return null_mut();
            };
            setting.1 = value as u32;
            setting.2 = true;
        }
    }
    let [normalized, addressing, filter] = settings.map(|s| s.1);
    clCreateSampler(context, normalized, addressing, filter, errcode)
}

pub unsafe extern "C" fn clRetainSampler(s: Handle) -> ClInt {
    retain::<Sampler>(s)
}

pub unsafe extern "C" fn clReleaseSampler(s: Handle) -> ClInt {
    release::<Sampler>(s)
}

pub unsafe extern "C" fn clGetSamplerInfo(
    sampler: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let s = tryr!(get::<Sampler>(sampler));
    let bytes = match param {
        cl::CL_SAMPLER_REFERENCE_COUNT => bytes_of(ref_count(s)),
        cl::CL_SAMPLER_CONTEXT => bytes_of(s.v.context),
        cl::CL_SAMPLER_NORMALIZED_COORDS => bytes_of(s.v.normalized),
        cl::CL_SAMPLER_ADDRESSING_MODE => bytes_of(s.v.addressing),
        cl::CL_SAMPLER_FILTER_MODE => bytes_of(s.v.filter),
        _ => return cl::CL_INVALID_VALUE,
    };
    ret_info(&bytes, size, value, size_ret)
}

// ---------------------------------------------------------------- image commands

/// An image command on queue `queue` (node id) with the fields its operation does not
/// use left empty.
fn image_cmd<'a>(queue: u64, event: u64, op: ImageOp) -> ImageCmd<'a> {
    ImageCmd {
        queue,
        event,
        op,
        src: 0,
        dst: 0,
        src_origin: [0; 3],
        dst_origin: [0; 3],
        region: [0; 3],
        offset: 0,
        token: 0,
        data: &[],
    }
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
            ..image_cmd(q.v.id, if last { ev } else { 0 }, ImageOp::Read)
        });
        let dst = HostDst {
            ptr: ptr as usize + host_offset,
            len: size.iter().product::<usize>() * meta.elem,
            _keep: keep.clone(),
        };
        q.v.node.enqueue(
            &cmd,
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
                ..image_cmd(q.v.id, if last { ev } else { 0 }, ImageOp::Write)
            });
            q.v.node
                .enqueue(&cmd, if last { evref.take() } else { None }, None);
        },
    );
}

/// Cuts a write of `region` at `origin` from host memory at `ptr` laid out with
/// `strides` into pieces of whole rows of one slice, of at most [`WRITE_CHUNK_MAX`]
/// bytes (or one row), and hands each, packed tight, to `each(last, origin, region,
/// bytes)`.
unsafe fn write_pieces(
    meta: &ImageMeta,
    (origin, region): ([usize; 3], [usize; 3]),
    strides: (usize, usize),
    ptr: *const u8,
    mut each: impl FnMut(bool, [usize; 3], [usize; 3], &[u8]),
) {
    let row_len = region[0] * meta.elem;
    let rows_per_piece = (WRITE_CHUNK_MAX / row_len.max(1)).clamp(1, region[1]);
    let mut pieces = Vec::new();
    for z in 0..region[2] {
        let mut y = 0;
        while y < region[1] {
            let rows = rows_per_piece.min(region[1] - y);
            pieces.push((y, z, rows));
            y += rows;
        }
    }
    let n = pieces.len();
    for (i, (y, z, rows)) in pieces.into_iter().enumerate() {
        let size = [region[0], rows, 1];
        let src = ptr.add(z * strides.1 + y * strides.0);
        let data = pack(src, meta.elem, size, strides);
        each(
            i + 1 == n,
            [origin[0], origin[1] + y, origin[2] + z],
            size,
            &data,
        );
    }
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
    q.v.node.enqueue(&cmd, evref, None);
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
    q.v.node.enqueue(&cmd, evref, None);
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
    q.v.node.enqueue(&cmd, evref, None);
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
    let row = region[0] * meta.elem;
    let slice = row * region[1];
    *row_pitch = row;
    if !slice_pitch.is_null() {
        *slice_pitch = match meta.image_type {
            cl::CL_MEM_OBJECT_IMAGE3D | cl::CL_MEM_OBJECT_IMAGE2D_ARRAY => slice,
            cl::CL_MEM_OBJECT_IMAGE1D_ARRAY => row,
            _ => 0,
        };
    }
    let backing = HostMem::zeroed(slice * region[2]);
    let ptr = backing.ptr();
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
            evref,
            None,
        );
    } else {
        let keep = Some(Arc::new((Arc::clone(&backing), Arc::clone(&m.v.life))) as Keep);
        if host_reads(m).is_ok() {
            enqueue_image_read(
                &mut enq,
                m,
                &meta,
                (origin, region),
                (row, slice),
                (ptr, keep),
                cl::CL_COMMAND_MAP_IMAGE,
                slot,
            );
        } else {
            // Mapped for writing, the host may not read it: through a scratch buffer.
            let copy = |queue, scratch| {
                Command::Image(ImageCmd {
                    src: m.v.id,
                    dst: scratch,
                    src_origin: wide(origin),
                    region: wide(region),
                    ..image_cmd(queue, 0, ImageOp::ToBuffer)
                })
            };
            let dst = HostDst {
                ptr: ptr as usize,
                len: bytes,
                _keep: keep,
            };
            tryp!(
                read_through_scratch(&mut enq, m, copy, dst, cl::CL_COMMAND_MAP_IMAGE, slot),
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
            size: backing.len(),
            flags: map_flags,
            _backing: Some(backing),
            image: Some((origin, region)),
        });
    set_err(errcode, cl::CL_SUCCESS);
    ptr.cast::<c_void>()
}
