//! Images: creation, info and formats, and what their commands share
//! ([`super::image_enqueue`] has the commands).
//!
//! An image lives on the node like a buffer and is an ICD `Mem` object with
//! [`ImageMeta`]; its data always travels over the socket (never shared memory). Pixel
//! data on the wire is tightly packed (rows of `width` pixels, slices of `height` rows):
//! the ICD packs what the application gives with its own row and slice pitches, and
//! unpacks read results into them (a read whose host layout is not tight travels as one
//! command per row, as rectangular buffer reads do). Large writes are cut into commands
//! of whole rows of at most [`WRITE_CHUNK_MAX`] bytes.
//!
//! A 1D image on a buffer (`CL_MEM_OBJECT_IMAGE1D_BUFFER`) is made on the node from the
//! node's buffer, so both are one storage there, whichever path the buffer's own data
//! takes (shared memory or the socket): the order of the commands on the node is the
//! only order there is. The image holds its buffer as a sub-buffer holds its parent.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::{Arc, Mutex, OnceLock};

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::{ImageCmd, ImageOp, Request};

use crate::node::WRITE_CHUNK_MAX;
use crate::object::*;

use super::buffer::{mem_flags, mem_property_list, set_property_list};
use super::creation::{CreationData, CREATE_DATA_INLINE_MAX};
use super::{bytes_of, reply, ret_info, set_err};

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clCreateImage,
        clCreateImageWithProperties,
        clCreateImage2D,
        clCreateImage3D,
        clGetImageInfo,
        clGetSupportedImageFormats,
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
pub(super) fn host_strides(
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
pub(super) unsafe fn pack(
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

pub(super) fn wide(v: [usize; 3]) -> [u64; 3] {
    v.map(|x| x as u64)
}

/// The image behind `mem`, with its metadata.
pub(super) unsafe fn image<'a>(mem: Handle) -> Result<(&'a Obj<Mem>, ImageMeta), ClInt> {
    let m = get::<Mem>(mem)?;
    match m.v.image {
        Some(meta) => Ok((m, meta)),
        None => Err(cl::CL_INVALID_MEM_OBJECT),
    }
}

/// The tightly packed bytes of `region` at `origin`, which must lie in the image and not
/// be empty.
pub(super) fn in_image(
    meta: &ImageMeta,
    origin: [usize; 3],
    region: [usize; 3],
) -> Result<usize, ClInt> {
    cl::image_region_bytes(
        meta.elem as u64,
        wide(meta.dims),
        wide(origin),
        wide(region),
    )
    .map(|bytes| bytes as usize)
    .ok_or(cl::CL_INVALID_VALUE)
}

/// The buffer a 1D image on a buffer (`CL_MEM_OBJECT_IMAGE1D_BUFFER`) is made on: a
/// buffer of the same context, whose host access the image has unless `flags` give
/// their own. Host pointer flags are the buffer's business, not the image's. A missing
/// or unfit buffer is `CL_INVALID_MEM_OBJECT`, as PoCL answers (the specification
/// names no code for it).
unsafe fn image_storage<'a>(
    context: Handle,
    flags: &mut u64,
    desc: &ImageDesc,
) -> Result<&'a Obj<Mem>, ClInt> {
    let buffer = get::<Mem>(desc.buffer)?;
    if buffer.v.image.is_some() || buffer.v.context != context as H {
        return Err(cl::CL_INVALID_MEM_OBJECT);
    }
    if *flags & (cl::CL_MEM_USE_HOST_PTR | cl::CL_MEM_ALLOC_HOST_PTR | cl::CL_MEM_COPY_HOST_PTR)
        != 0
    {
        return Err(cl::CL_INVALID_VALUE);
    }
    if *flags & cl::CL_MEM_HOST_ACCESS == 0 {
        *flags |= buffer.v.flags & cl::CL_MEM_HOST_ACCESS;
    }
    Ok(buffer)
}

unsafe fn create_image(
    context: Handle,
    flags: u64,
    format: *const [u32; 2],
    desc: &ImageDesc,
    host_ptr: *mut c_void,
) -> Result<Handle, ClInt> {
    let c = get::<Context>(context)?;
    let mut flags = mem_flags(flags)?;
    let storage = match desc.image_type {
        cl::CL_MEM_OBJECT_IMAGE1D_BUFFER => Some(image_storage(context, &mut flags, desc)?),
        // 2D images from buffers (cl_khr_image2d_from_buffer) are an optional feature
        // of OpenCL 3.0 that no device presents (its pitch alignments are 0).
        cl::CL_MEM_OBJECT_IMAGE2D if !desc.buffer.is_null() => {
            return Err(cl::CL_INVALID_OPERATION)
        }
        _ if !desc.buffer.is_null() => return Err(cl::CL_INVALID_IMAGE_DESCRIPTOR),
        _ => None,
    };
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
    if storage.is_some_and(|b| size > b.v.size) {
        return Err(cl::CL_INVALID_MEM_OBJECT);
    }
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
        host_strides: if flags & cl::CL_MEM_USE_HOST_PTR != 0 {
            strides
        } else {
            (0, 0)
        },
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
            // A 1D image on a buffer names the buffer here (it has no array size).
            storage.map_or(desc.array_size as u64, |b| b.v.id),
        ],
        data: &data,
    }))?;
    if wants_ptr && !inline {
        let sent = CreationData::new(c, flags, size).and_then(|mut creation| {
            let whole = ([0; 3], dims);
            write_pieces(
                &meta,
                whole,
                strides,
                host_ptr.cast(),
                |_, at, region, data| {
                    creation.write_image(id, at, region, data);
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
    // The image holds its buffer, as a sub-buffer its parent (and names it as its
    // `CL_MEM_ASSOCIATED_MEMOBJECT` and `CL_IMAGE_BUFFER`).
    let parent = storage.map_or(0, |_| {
        retain::<Mem>(desc.buffer);
        desc.buffer as H
    });
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
        property_list: OnceLock::new(),
        shm: None,
        shm_offset: 0,
        parent,
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
    let list = tryp!(mem_property_list(properties), errcode);
    let h = clCreateImage(context, flags, format, desc, host_ptr, errcode);
    set_property_list(h, list);
    h
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
        // The buffer of a 1D image on a buffer, none for other images.
        cl::CL_IMAGE_BUFFER => bytes_of(m.v.parent),
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

/// An image command on queue `queue` (node id) with the fields its operation does not
/// use left empty.
pub(super) fn image_cmd<'a>(queue: u64, event: u64, op: ImageOp) -> ImageCmd<'a> {
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

/// Cuts a write of `region` at `origin` from host memory at `ptr` laid out with
/// `strides` into pieces of whole rows of one slice, of at most [`WRITE_CHUNK_MAX`]
/// bytes (or one row), and hands each, packed tight, to `each(last, origin, region,
/// bytes)`.
pub(super) unsafe fn write_pieces(
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
