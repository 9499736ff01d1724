//! Buffers and sub-buffers. A buffer of a same-host client may live in shared memory the
//! node maps too (its data then moves with `memcpy`, see [`crate::copy`]). Large
//! initial data follows the create request ([`super::creation`]).

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::{Arc, Mutex, OnceLock};

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::Request;

use crate::node::WRITE_CHUNK_MAX;
use crate::object::*;

use super::creation::{CreationData, CREATE_DATA_INLINE_MAX};
use super::enqueue::check_range;
use super::{bytes_of, property_bytes, property_list, reply, ret_info, set_err, PropertyList};

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clCreateBuffer,
        clCreateBufferWithProperties,
        clCreateSubBuffer,
        clRetainMemObject,
        clReleaseMemObject,
        clSetMemObjectDestructorCallback,
        clGetMemObjectInfo,
    ]
}

/// The flags of a new buffer or image, checked: one device access flag
/// (`CL_MEM_READ_WRITE` if none), at most one host access flag, and host pointer flags
/// that go together.
pub(super) fn mem_flags(flags: u64) -> Result<u64, ClInt> {
    const ACCESS: u64 = cl::CL_MEM_READ_WRITE | cl::CL_MEM_WRITE_ONLY | cl::CL_MEM_READ_ONLY;
    let flags = if flags & ACCESS == 0 {
        flags | cl::CL_MEM_READ_WRITE
    } else {
        flags
    };
    let use_ptr = flags & cl::CL_MEM_USE_HOST_PTR != 0;
    let other_ptr = flags & (cl::CL_MEM_ALLOC_HOST_PTR | cl::CL_MEM_COPY_HOST_PTR) != 0;
    if (flags & ACCESS).count_ones() != 1
        || (flags & cl::CL_MEM_HOST_ACCESS).count_ones() > 1
        || (use_ptr && other_ptr)
    {
        return Err(cl::CL_INVALID_VALUE);
    }
    Ok(flags)
}

/// Host pointer flags: a sub-buffer has its parent's (`HOST_PTR_FLAGS`), never its own.
const HOST_PTR_FLAGS: u64 =
    cl::CL_MEM_USE_HOST_PTR | cl::CL_MEM_ALLOC_HOST_PTR | cl::CL_MEM_COPY_HOST_PTR;

/// The flags of a sub-buffer of a buffer with `parent` flags, host pointer flags left
/// out: device and host access left out are the parent's, and given ones may not allow
/// more than the parent's (OpenCL 1.2, `clCreateSubBuffer`).
fn sub_buffer_flags(flags: u64, parent: u64) -> Result<u64, ClInt> {
    const ACCESS: u64 = cl::CL_MEM_READ_WRITE | cl::CL_MEM_WRITE_ONLY | cl::CL_MEM_READ_ONLY;
    let access = flags & ACCESS;
    let host = flags & cl::CL_MEM_HOST_ACCESS;
    let device_conflict = match parent & ACCESS {
        cl::CL_MEM_WRITE_ONLY => access & (cl::CL_MEM_READ_WRITE | cl::CL_MEM_READ_ONLY) != 0,
        cl::CL_MEM_READ_ONLY => access & (cl::CL_MEM_READ_WRITE | cl::CL_MEM_WRITE_ONLY) != 0,
        _ => false,
    };
    let host_conflict = match parent & cl::CL_MEM_HOST_ACCESS {
        cl::CL_MEM_HOST_WRITE_ONLY => host & cl::CL_MEM_HOST_READ_ONLY != 0,
        cl::CL_MEM_HOST_READ_ONLY => host & cl::CL_MEM_HOST_WRITE_ONLY != 0,
        cl::CL_MEM_HOST_NO_ACCESS => host & !cl::CL_MEM_HOST_NO_ACCESS != 0,
        _ => false,
    };
    if flags & HOST_PTR_FLAGS != 0
        || access.count_ones() > 1
        || host.count_ones() > 1
        || device_conflict
        || host_conflict
    {
        return Err(cl::CL_INVALID_VALUE);
    }
    let access = if access == 0 { parent & ACCESS } else { access };
    let host = if host == 0 {
        parent & cl::CL_MEM_HOST_ACCESS
    } else {
        host
    };
    Ok(flags & !(ACCESS | cl::CL_MEM_HOST_ACCESS) | access | host)
}

pub unsafe extern "C" fn clCreateBuffer(
    context: Handle,
    flags: u64,
    size: usize,
    host_ptr: *mut c_void,
    errcode: *mut ClInt,
) -> Handle {
    let c = tryp!(get::<Context>(context), errcode);
    let flags = tryp!(mem_flags(flags), errcode);
    if size == 0 {
        set_err(errcode, cl::CL_INVALID_BUFFER_SIZE);
        return null_mut();
    }
    let wants_ptr = flags & (cl::CL_MEM_USE_HOST_PTR | cl::CL_MEM_COPY_HOST_PTR) != 0;
    if wants_ptr == host_ptr.is_null() {
        set_err(errcode, cl::CL_INVALID_HOST_PTR);
        return null_mut();
    }
    let data: &[u8] = if wants_ptr {
        std::slice::from_raw_parts(host_ptr.cast::<u8>(), size)
    } else {
        &[]
    };
    let inline = data.len() <= CREATE_DATA_INLINE_MAX;
    let node = Arc::clone(&c.v.node);
    let id = node.next_id();
    let request = Request::CreateBuffer {
        id,
        context: c.v.id,
        flags,
        size: size as u64,
        data: if inline { data } else { &[] },
    };
    let shm_name = tryp!(reply(node.call(&request)), errcode);
    // A region we cannot map (another user, say) just means the network path.
    let shm = if shm_name.is_empty() {
        None
    } else {
        ocl_remote::shm::Region::open(&shm_name, size)
            .ok()
            .map(Arc::new)
    };
    if !inline {
        match &shm {
            // Nobody else knows the buffer yet: its memory is ours to fill.
            Some(region) => crate::copy::copy(region.ptr(), data.as_ptr(), size),
            None => {
                let sent = CreationData::new(c, flags, size).and_then(|mut creation| {
                    for (i, chunk) in data.chunks(WRITE_CHUNK_MAX).enumerate() {
                        creation.write_buffer(id, i * WRITE_CHUNK_MAX, chunk);
                    }
                    creation.finish()
                });
                if let Err(e) = sent {
                    node.release(id);
                    set_err(errcode, e);
                    return null_mut();
                }
            }
        }
    }
    retain::<Context>(context);
    let keep_ptr = if flags & cl::CL_MEM_USE_HOST_PTR != 0 {
        host_ptr as usize
    } else {
        0
    };
    set_err(errcode, cl::CL_SUCCESS);
    new_handle(Mem {
        node,
        id,
        context: context as H,
        flags,
        size,
        host_ptr: keep_ptr,
        maps: Mutex::new(Vec::new()),
        life: Arc::default(),
        property_list: OnceLock::new(),
        shm,
        shm_offset: 0,
        parent: 0,
        origin: 0,
        image: None,
    })
}

/// The property list of a new buffer or image, which may name no property (OpenCL 3.0
/// defines none for buffers and images outside extensions): NULL or an empty list.
pub(super) unsafe fn mem_property_list(properties: *const u64) -> Result<PropertyList, ClInt> {
    let list = property_list(properties)?;
    if list.len() > 1 {
        return Err(cl::CL_INVALID_PROPERTY);
    }
    Ok(list)
}

/// Notes the property list a memory object was made with (`CL_MEM_PROPERTIES`).
pub(super) fn set_property_list(mem: Handle, list: PropertyList) {
    if let Ok(m) = get::<Mem>(mem) {
        let _ = m.v.property_list.set(list);
    }
}

/// OpenCL 3.0: `clCreateBuffer` with a property list.
pub unsafe extern "C" fn clCreateBufferWithProperties(
    context: Handle,
    properties: *const u64,
    flags: u64,
    size: usize,
    host_ptr: *mut c_void,
    errcode: *mut ClInt,
) -> Handle {
    tryp!(get::<Context>(context), errcode);
    let list = tryp!(mem_property_list(properties), errcode);
    let h = clCreateBuffer(context, flags, size, host_ptr, errcode);
    set_property_list(h, list);
    h
}

pub unsafe extern "C" fn clCreateSubBuffer(
    buffer: Handle,
    flags: u64,
    create_type: u32,
    info: *const c_void,
    errcode: *mut ClInt,
) -> Handle {
    let m = tryp!(get::<Mem>(buffer), errcode);
    if m.v.image.is_some() {
        set_err(errcode, cl::CL_INVALID_MEM_OBJECT);
        return null_mut();
    }
    if m.v.parent != 0 || create_type != cl::CL_BUFFER_CREATE_TYPE_REGION || info.is_null() {
        set_err(errcode, cl::CL_INVALID_VALUE);
        return null_mut();
    }
    let [origin, size] = *(info as *const [usize; 2]);
    tryp!(
        check_range(origin, size, m.v.size).map_err(|_| cl::CL_INVALID_VALUE),
        errcode
    );
    let flags = tryp!(sub_buffer_flags(flags, m.v.flags), errcode);
    let node = Arc::clone(&m.v.node);
    let id = node.next_id();
    let request = Request::CreateSubBuffer {
        id,
        parent: m.v.id,
        flags,
        offset: origin as u64,
        size: size as u64,
    };
    tryp!(reply(node.call(&request)), errcode);
    retain::<Context>(m.v.context as Handle);
    retain::<Mem>(buffer);
    set_err(errcode, cl::CL_SUCCESS);
    new_handle(Mem {
        node,
        id,
        context: m.v.context,
        flags: flags | (m.v.flags & HOST_PTR_FLAGS),
        size,
        host_ptr: if m.v.host_ptr != 0 {
            m.v.host_ptr + origin
        } else {
            0
        },
        maps: Mutex::new(Vec::new()),
        life: Arc::default(),
        property_list: OnceLock::new(),
        shm: m.v.shm.clone(),
        shm_offset: m.v.shm_offset + origin,
        parent: buffer as H,
        origin,
        image: None,
    })
}

pub unsafe extern "C" fn clRetainMemObject(m: Handle) -> ClInt {
    retain::<Mem>(m)
}
pub unsafe extern "C" fn clReleaseMemObject(m: Handle) -> ClInt {
    release::<Mem>(m)
}

/// The callbacks run once the object is released and no read into its memory is in
/// flight (see [`MemLife`]), on the thread that ends it: the one releasing it, or the
/// ICD thread that completes that read.
pub unsafe extern "C" fn clSetMemObjectDestructorCallback(
    mem: Handle,
    notify: Option<unsafe extern "C" fn(Handle, *mut c_void)>,
    user_data: *mut c_void,
) -> ClInt {
    let m = tryr!(get::<Mem>(mem));
    let Some(notify) = notify else {
        return cl::CL_INVALID_VALUE;
    };
    m.v.life.add_callback(mem, notify, user_data);
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clGetMemObjectInfo(
    mem: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let m = tryr!(get::<Mem>(mem));
    let bytes = match param {
        cl::CL_MEM_TYPE => bytes_of(m.v.image.map_or(cl::CL_MEM_OBJECT_BUFFER, |i| i.image_type)),
        cl::CL_MEM_FLAGS => bytes_of(m.v.flags),
        cl::CL_MEM_SIZE => bytes_of(m.v.size),
        cl::CL_MEM_HOST_PTR => bytes_of(m.v.host_ptr),
        cl::CL_MEM_MAP_COUNT => {
            bytes_of(m.v.maps.lock().unwrap_or_else(|p| p.into_inner()).len() as u32)
        }
        cl::CL_MEM_REFERENCE_COUNT => bytes_of(ref_count(m)),
        cl::CL_MEM_CONTEXT => bytes_of(m.v.context),
        cl::CL_MEM_ASSOCIATED_MEMOBJECT => bytes_of(m.v.parent),
        cl::CL_MEM_OFFSET => bytes_of(m.v.origin),
        // No device presents shared virtual memory.
        cl::CL_MEM_USES_SVM_POINTER => bytes_of(0u32),
        cl::CL_MEM_PROPERTIES => property_bytes(m.v.property_list.get().map_or(&[], |l| l)),
        _ => return cl::CL_INVALID_VALUE,
    };
    ret_info(&bytes, size, value, size_ret)
}
