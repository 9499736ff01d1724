//! The OpenCL 1.2 entry points of the ICD.
//!
//! Each function validates its handles against the object registry, answers what it can
//! from local state (object relations, reference counts, kernel argument values), and
//! otherwise talks to the object's node: control calls are synchronous round trips;
//! enqueues only add a command to the node's open task (see [`crate::node`]).
//! The functions are not exported by name: the ICD loader reaches them through the
//! dispatch table at the start of every object.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;
use std::sync::{Arc, Mutex};

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::{self, Command, KernelArg, NdRange, Reader, Request};

use crate::node::{DirectRead, HostDst, Node, WRITE_CHUNK_MAX};
use crate::object::*;

type Notify = Option<crate::node::ContextCallback>;
type BuildNotify = Option<unsafe extern "C" fn(Handle, *mut c_void)>;
type EventNotify = Option<unsafe extern "C" fn(Handle, ClInt, *mut c_void)>;

macro_rules! tryr {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return e,
        }
    };
}

macro_rules! tryp {
    ($e:expr, $errcode:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => {
                set_err($errcode, e);
                return null_mut();
            }
        }
    };
}

mod image;

unsafe fn set_err(errcode: *mut ClInt, e: ClInt) {
    if !errcode.is_null() {
        *errcode = e;
    }
}

/// Copies an info answer out following the OpenCL rules for `param_value_size`.
unsafe fn ret_info(bytes: &[u8], size: usize, value: *mut c_void, size_ret: *mut usize) -> ClInt {
    if !value.is_null() {
        if size < bytes.len() {
            return cl::CL_INVALID_VALUE;
        }
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), value.cast::<u8>(), bytes.len());
    }
    if !size_ret.is_null() {
        *size_ret = bytes.len();
    }
    cl::CL_SUCCESS
}

fn bytes_of<T: Copy>(v: T) -> Vec<u8> {
    // SAFETY: T is a plain-old-data OpenCL scalar or handle.
    unsafe {
        std::slice::from_raw_parts((&v as *const T).cast::<u8>(), std::mem::size_of::<T>()).to_vec()
    }
}

fn handles_bytes(hs: &[H]) -> Vec<u8> {
    hs.iter().flat_map(|h| h.to_ne_bytes()).collect()
}

/// Build options as given to `clBuildProgram` and friends: NULL means none.
///
/// # Safety
/// `options` is NULL or a NUL-terminated string that outlives the returned slice.
unsafe fn options_bytes<'a>(options: *const c_char) -> &'a [u8] {
    if options.is_null() {
        &[]
    } else {
        CStr::from_ptr(options).to_bytes()
    }
}

fn cstring_bytes(s: &[u8]) -> Vec<u8> {
    let mut v = s.to_vec();
    v.push(0);
    v
}

fn reply(r: (ClInt, Vec<u8>)) -> Result<Vec<u8>, ClInt> {
    if r.0 == cl::CL_SUCCESS {
        Ok(r.1)
    } else {
        Err(r.0)
    }
}

unsafe fn slice<'a, T>(ptr: *const T, n: u32) -> &'a [T] {
    if ptr.is_null() || n == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(ptr, n as usize)
    }
}

// ---------------------------------------------------------------- platforms, devices

pub unsafe extern "C" fn clGetPlatformIDs(
    num_entries: u32,
    platforms: *mut Handle,
    num_platforms: *mut u32,
) -> ClInt {
    crate::get_platform_ids(num_entries, platforms, num_platforms)
}

fn platform_remote_info(p: &Obj<Platform>, param: u32) -> Result<Vec<u8>, ClInt> {
    reply(p.v.node.call(&Request::GetPlatformInfo {
        platform: p.v.remote,
        param,
    }))
}

fn trim_nul(mut v: Vec<u8>) -> Vec<u8> {
    while v.last() == Some(&0) {
        v.pop();
    }
    v
}

pub unsafe extern "C" fn clGetPlatformInfo(
    platform: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let p = tryr!(get::<Platform>(platform));
    let bytes = match param {
        cl::CL_PLATFORM_NAME => {
            let remote = trim_nul(tryr!(platform_remote_info(p, param)));
            let mut name = ocl_remote::PLATFORM_NAME_PREFIX.as_bytes().to_vec();
            name.extend(remote);
            cstring_bytes(&name)
        }
        cl::CL_PLATFORM_VENDOR => cstring_bytes(b"netaccel"),
        cl::CL_PLATFORM_ICD_SUFFIX_KHR => cstring_bytes(ocl_remote::ICD_SUFFIX.as_bytes()),
        cl::CL_PLATFORM_VERSION => {
            let remote = String::from_utf8_lossy(&trim_nul(tryr!(platform_remote_info(p, param))))
                .into_owned();
            cstring_bytes(format!("OpenCL 1.2 netaccel (remote: {remote})").as_bytes())
        }
        cl::CL_PLATFORM_EXTENSIONS => {
            let remote = String::from_utf8_lossy(&trim_nul(tryr!(platform_remote_info(p, param))))
                .into_owned();
            let mut exts: Vec<&str> = remote.split_whitespace().collect();
            if !exts.contains(&"cl_khr_icd") {
                exts.push("cl_khr_icd");
            }
            cstring_bytes(exts.join(" ").as_bytes())
        }
        cl::CL_PLATFORM_PROFILE
        | cl::CL_PLATFORM_HOST_TIMER_RESOLUTION
        | cl::CL_PLATFORM_EXTENSIONS_WITH_VERSION => {
            tryr!(platform_remote_info(p, param))
        }
        _ => return cl::CL_INVALID_VALUE,
    };
    ret_info(&bytes, size, value, size_ret)
}

fn device_info(d: &Obj<Device>, param: u32) -> Result<Vec<u8>, ClInt> {
    let mut cache = d.v.info_cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(r) = cache.get(&param) {
        return r.clone();
    }
    let r = reply(d.v.node.call(&Request::GetDeviceInfo {
        device: d.v.remote,
        param,
    }));
    cache.insert(param, r.clone());
    r
}

pub unsafe extern "C" fn clGetDeviceIDs(
    platform: Handle,
    device_type: u64,
    num_entries: u32,
    devices: *mut Handle,
    num_devices: *mut u32,
) -> ClInt {
    let p = tryr!(get::<Platform>(platform));
    if (num_entries == 0 && !devices.is_null()) || (devices.is_null() && num_devices.is_null()) {
        return cl::CL_INVALID_VALUE;
    }
    let mut found = Vec::new();
    for (i, &d) in p.v.devices.iter().enumerate() {
        let keep = if device_type == cl::CL_DEVICE_TYPE_ALL {
            true
        } else if device_type == cl::CL_DEVICE_TYPE_DEFAULT {
            i == 0
        } else {
            let obj = tryr!(get::<Device>(d as Handle));
            let t = tryr!(device_info(obj, cl::CL_DEVICE_TYPE));
            t.len() == 8 && u64::from_ne_bytes(t[..8].try_into().expect("8")) & device_type != 0
        };
        if keep {
            found.push(d);
        }
    }
    if found.is_empty() {
        return cl::CL_DEVICE_NOT_FOUND;
    }
    let handles: Vec<Handle> = found.iter().map(|d| *d as Handle).collect();
    crate::ret_list(&handles, num_entries, devices, num_devices);
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clGetDeviceInfo(
    device: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let d = tryr!(get::<Device>(device));
    let bytes = match param {
        cl::CL_DEVICE_PLATFORM => bytes_of(d.v.platform),
        cl::CL_DEVICE_PARENT_DEVICE => bytes_of(0usize),
        cl::CL_DEVICE_REFERENCE_COUNT => bytes_of(1u32),
        _ => tryr!(device_info(d, param)),
    };
    ret_info(&bytes, size, value, size_ret)
}

pub unsafe extern "C" fn clRetainDevice(device: Handle) -> ClInt {
    tryr!(get::<Device>(device));
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clReleaseDevice(device: Handle) -> ClInt {
    tryr!(get::<Device>(device));
    cl::CL_SUCCESS
}

// ---------------------------------------------------------------- contexts

unsafe fn context_properties(props: *const isize) -> Result<(Option<Handle>, Vec<isize>), ClInt> {
    let mut platform = None;
    let mut copy = Vec::new();
    if props.is_null() {
        return Ok((None, copy));
    }
    let mut i = 0;
    loop {
        let key = *props.add(i);
        copy.push(key);
        if key == 0 {
            break;
        }
        let val = *props.add(i + 1);
        copy.push(val);
        if key == cl::CL_CONTEXT_PLATFORM {
            tryr_res(get::<Platform>(val as Handle).map_err(|_| cl::CL_INVALID_PLATFORM))?;
            platform = Some(val as Handle);
        } else {
            return Err(cl::CL_INVALID_PROPERTY);
        }
        i += 2;
        if i > 64 {
            return Err(cl::CL_INVALID_PROPERTY);
        }
    }
    Ok((platform, copy))
}

fn tryr_res<T>(r: Result<T, ClInt>) -> Result<T, ClInt> {
    r
}

unsafe fn create_context(
    props: Vec<isize>,
    devices: Vec<H>,
    notify: Notify,
    user_data: *mut c_void,
) -> Result<Handle, ClInt> {
    if notify.is_none() && !user_data.is_null() {
        return Err(cl::CL_INVALID_VALUE);
    }
    let first = get::<Device>(devices[0] as Handle)?;
    let node = Arc::clone(&first.v.node);
    let mut remote = Vec::new();
    for &d in &devices {
        let o = get::<Device>(d as Handle)?;
        if !Arc::ptr_eq(&o.v.node, &node) {
            return Err(cl::CL_INVALID_DEVICE);
        }
        remote.push(o.v.remote);
    }
    let id = node.next_id();
    reply(node.call(&Request::CreateContext {
        id,
        devices: remote,
    }))?;
    if let Some(notify) = notify {
        node.add_notifier(crate::node::ContextNotifier {
            context: id,
            notify,
            user_data: user_data as usize,
        });
    }
    Ok(new_handle(Context {
        node,
        id,
        devices,
        properties: props,
    }))
}

pub unsafe extern "C" fn clCreateContext(
    properties: *const isize,
    num_devices: u32,
    devices: *const Handle,
    notify: Notify,
    user_data: *mut c_void,
    errcode: *mut ClInt,
) -> Handle {
    let (_, props) = tryp!(context_properties(properties), errcode);
    if num_devices == 0 || devices.is_null() {
        set_err(errcode, cl::CL_INVALID_VALUE);
        return null_mut();
    }
    let devs: Vec<H> = slice(devices, num_devices)
        .iter()
        .map(|d| *d as H)
        .collect();
    let h = tryp!(create_context(props, devs, notify, user_data), errcode);
    set_err(errcode, cl::CL_SUCCESS);
    h
}

pub unsafe extern "C" fn clCreateContextFromType(
    properties: *const isize,
    device_type: u64,
    notify: Notify,
    user_data: *mut c_void,
    errcode: *mut ClInt,
) -> Handle {
    let (platform, props) = tryp!(context_properties(properties), errcode);
    let platform = match platform {
        Some(p) => p,
        None => match crate::platforms().first() {
            Some(p) => *p as Handle,
            None => {
                set_err(errcode, cl::CL_INVALID_PLATFORM);
                return null_mut();
            }
        },
    };
    let mut n = 0u32;
    let rc = clGetDeviceIDs(platform, device_type, 0, null_mut(), &mut n);
    if rc != cl::CL_SUCCESS {
        set_err(errcode, rc);
        return null_mut();
    }
    let mut devs = vec![null_mut(); n as usize];
    clGetDeviceIDs(platform, device_type, n, devs.as_mut_ptr(), null_mut());
    let h = tryp!(
        create_context(
            props,
            devs.iter().map(|d| *d as H).collect(),
            notify,
            user_data
        ),
        errcode
    );
    set_err(errcode, cl::CL_SUCCESS);
    h
}

pub unsafe extern "C" fn clRetainContext(c: Handle) -> ClInt {
    retain::<Context>(c)
}
pub unsafe extern "C" fn clReleaseContext(c: Handle) -> ClInt {
    release::<Context>(c)
}

pub unsafe extern "C" fn clGetContextInfo(
    context: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let c = tryr!(get::<Context>(context));
    let bytes = match param {
        cl::CL_CONTEXT_REFERENCE_COUNT => bytes_of(ref_count(c)),
        cl::CL_CONTEXT_DEVICES => handles_bytes(&c.v.devices),
        cl::CL_CONTEXT_NUM_DEVICES => bytes_of(c.v.devices.len() as u32),
        cl::CL_CONTEXT_PROPERTIES => {
            c.v.properties
                .iter()
                .flat_map(|p| p.to_ne_bytes())
                .collect()
        }
        _ => return cl::CL_INVALID_VALUE,
    };
    ret_info(&bytes, size, value, size_ret)
}

// ---------------------------------------------------------------- queues

unsafe fn create_queue(context: Handle, device: Handle, properties: u64) -> Result<Handle, ClInt> {
    let c = get::<Context>(context)?;
    let d = get::<Device>(device)?;
    if !c.v.devices.contains(&(device as H)) {
        return Err(cl::CL_INVALID_DEVICE);
    }
    if properties & !(cl::CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE | cl::CL_QUEUE_PROFILING_ENABLE)
        != 0
    {
        return Err(cl::CL_INVALID_VALUE);
    }
    let node = Arc::clone(&c.v.node);
    let id = node.next_id();
    reply(node.call(&Request::CreateQueue {
        id,
        context: c.v.id,
        device: d.v.remote,
        properties,
    }))?;
    retain::<Context>(context);
    Ok(new_handle(Queue {
        node,
        id,
        context: context as H,
        device: device as H,
        properties,
    }))
}

pub unsafe extern "C" fn clCreateCommandQueue(
    context: Handle,
    device: Handle,
    properties: u64,
    errcode: *mut ClInt,
) -> Handle {
    let h = tryp!(create_queue(context, device, properties), errcode);
    set_err(errcode, cl::CL_SUCCESS);
    h
}

pub unsafe extern "C" fn clCreateCommandQueueWithProperties(
    context: Handle,
    device: Handle,
    properties: *const u64,
    errcode: *mut ClInt,
) -> Handle {
    let mut props = 0u64;
    if !properties.is_null() {
        let mut i = 0;
        while *properties.add(i) != 0 && i < 64 {
            if *properties.add(i) == u64::from(cl::CL_QUEUE_PROPERTIES) {
                props = *properties.add(i + 1);
            } else {
                set_err(errcode, cl::CL_INVALID_VALUE);
                return null_mut();
            }
            i += 2;
        }
    }
    clCreateCommandQueue(context, device, props, errcode)
}

pub unsafe extern "C" fn clRetainCommandQueue(q: Handle) -> ClInt {
    retain::<Queue>(q)
}

pub unsafe extern "C" fn clReleaseCommandQueue(q: Handle) -> ClInt {
    // Releasing a queue implies a flush (OpenCL 1.2, 5.1).
    if let Ok(o) = get::<Queue>(q) {
        o.v.node.flush();
    }
    release::<Queue>(q)
}

pub unsafe extern "C" fn clGetCommandQueueInfo(
    queue: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let q = tryr!(get::<Queue>(queue));
    let bytes = match param {
        cl::CL_QUEUE_CONTEXT => bytes_of(q.v.context),
        cl::CL_QUEUE_DEVICE => bytes_of(q.v.device),
        cl::CL_QUEUE_REFERENCE_COUNT => bytes_of(ref_count(q)),
        cl::CL_QUEUE_PROPERTIES => bytes_of(q.v.properties),
        _ => return cl::CL_INVALID_VALUE,
    };
    ret_info(&bytes, size, value, size_ret)
}

pub unsafe extern "C" fn clFlush(queue: Handle) -> ClInt {
    let q = tryr!(get::<Queue>(queue));
    q.v.node.flush();
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clFinish(queue: Handle) -> ClInt {
    let q = tryr!(get::<Queue>(queue));
    q.v.node.finish()
}

// ---------------------------------------------------------------- buffers

pub unsafe extern "C" fn clCreateBuffer(
    context: Handle,
    flags: u64,
    size: usize,
    host_ptr: *mut c_void,
    errcode: *mut ClInt,
) -> Handle {
    let c = tryp!(get::<Context>(context), errcode);
    let flags = if flags & 7 == 0 {
        flags | cl::CL_MEM_READ_WRITE
    } else {
        flags
    };
    let access = flags & 7;
    if access.count_ones() != 1 {
        set_err(errcode, cl::CL_INVALID_VALUE);
        return null_mut();
    }
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
    let node = Arc::clone(&c.v.node);
    let id = node.next_id();
    let request = Request::CreateBuffer {
        id,
        context: c.v.id,
        flags,
        size: size as u64,
        data,
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
        shm,
        shm_offset: 0,
        parent: 0,
        origin: 0,
        image: None,
    })
}

pub unsafe extern "C" fn clCreateSubBuffer(
    buffer: Handle,
    flags: u64,
    create_type: u32,
    info: *const c_void,
    errcode: *mut ClInt,
) -> Handle {
    const CL_BUFFER_CREATE_TYPE_REGION: u32 = 0x1220;
    let m = tryp!(get::<Mem>(buffer), errcode);
    if m.v.image.is_some() {
        set_err(errcode, cl::CL_INVALID_MEM_OBJECT);
        return null_mut();
    }
    if m.v.parent != 0 || create_type != CL_BUFFER_CREATE_TYPE_REGION || info.is_null() {
        set_err(errcode, cl::CL_INVALID_VALUE);
        return null_mut();
    }
    let [origin, size] = *(info as *const [usize; 2]);
    tryp!(
        check_range(origin, size, m.v.size).map_err(|_| cl::CL_INVALID_VALUE),
        errcode
    );
    // Access flags left out are inherited from the parent; host-pointer flags are not allowed.
    if flags & (cl::CL_MEM_USE_HOST_PTR | cl::CL_MEM_ALLOC_HOST_PTR | cl::CL_MEM_COPY_HOST_PTR) != 0
    {
        set_err(errcode, cl::CL_INVALID_VALUE);
        return null_mut();
    }
    let flags = if flags & 7 == 0 {
        flags | (m.v.flags & 7)
    } else {
        flags
    };
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
        flags: flags | (m.v.flags & (cl::CL_MEM_USE_HOST_PTR | cl::CL_MEM_ALLOC_HOST_PTR)),
        size,
        host_ptr: if m.v.host_ptr != 0 {
            m.v.host_ptr + origin
        } else {
            0
        },
        maps: Mutex::new(Vec::new()),
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
        _ => return cl::CL_INVALID_VALUE,
    };
    ret_info(&bytes, size, value, size_ret)
}

// ---------------------------------------------------------------- enqueue helpers

/// Checks the queue and the wait list. Waiting needs no wire encoding: a flush sends all
/// of a connection's pending commands and tasks run in order (see docs/opencl.md).
unsafe fn prologue<'a>(
    queue: Handle,
    num_wait: u32,
    wait: *const Handle,
) -> Result<&'a Obj<Queue>, ClInt> {
    let q = get::<Queue>(queue)?;
    if (num_wait == 0) != wait.is_null() {
        return Err(cl::CL_INVALID_EVENT_WAIT_LIST);
    }
    for &e in slice(wait, num_wait) {
        let ev = get::<Event>(e).map_err(|_| cl::CL_INVALID_EVENT_WAIT_LIST)?;
        if !Arc::ptr_eq(&ev.v.node, &q.v.node) {
            return Err(cl::CL_INVALID_CONTEXT);
        }
        if ev.v.status() < cl::CL_COMPLETE {
            return Err(cl::CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
        }
        if ev.v.queue == 0 && ev.v.status() > cl::CL_COMPLETE {
            // Waiting for a user event: the open task stays here until it is set.
            q.v.node.gate(EventRef::new(e));
        }
    }
    Ok(q)
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

fn same_node(a: &Arc<Node>, b: &Arc<Node>) -> Result<(), ClInt> {
    if Arc::ptr_eq(a, b) {
        Ok(())
    } else {
        Err(cl::CL_INVALID_CONTEXT)
    }
}

fn check_range(offset: usize, size: usize, total: usize) -> Result<(), ClInt> {
    match offset.checked_add(size) {
        Some(end) if size > 0 && end <= total => Ok(()),
        _ => Err(cl::CL_INVALID_VALUE),
    }
}

/// Where a command's event goes: the application's slot, or for a blocking call without
/// one, `internal` (the call waits on that event and then releases it).
fn event_slot(blocking: bool, event: *mut Handle, internal: &mut Handle) -> *mut Handle {
    if blocking && event.is_null() {
        internal
    } else {
        event
    }
}

/// For a blocking call: sends the open task and waits for the command's event `slot`
/// (whichever thread's flush sends it), returning the command's error if it failed.
/// Releases the internal event, if one was used.
unsafe fn finish_blocking(
    node: &Node,
    blocking: bool,
    slot: *mut Handle,
    internal: Handle,
) -> ClInt {
    if !blocking {
        return cl::CL_SUCCESS;
    }
    node.flush_blocking();
    let event = EventRef::new(*slot);
    node.wait_event(&event);
    let status = event.status();
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

unsafe fn enqueue_read(
    queue: Handle,
    mem: Handle,
    offset: usize,
    size: usize,
    ptr: *mut c_void,
    command_type: u32,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> Result<Arc<Node>, ClInt> {
    let q = prologue(queue, num_wait, wait)?;
    let m = get::<Mem>(mem)?;
    same_node(&q.v.node, &m.v.node)?;
    check_range(offset, size, m.v.size)?;
    if ptr.is_null() {
        return Err(cl::CL_INVALID_VALUE);
    }
    let (ev, evref) = new_event(q, queue, command_type, event);
    if let Some(src) = &m.v.shm {
        // Same host: the data is copied from shared memory when the task is done.
        let marker = Command::Marker {
            queue: q.v.id,
            event: ev,
        };
        let dst = HostDst {
            ptr: ptr as usize,
            len: size,
        };
        let read = DirectRead {
            src: Arc::clone(src),
            offset: m.v.shm_offset + offset,
            dst,
        };
        q.v.node.enqueue_direct_reads(&marker, evref, vec![read]);
        return Ok(Arc::clone(&q.v.node));
    }
    let token = q.v.node.next_id();
    let cmd = Command::Read {
        queue: q.v.id,
        event: ev,
        buffer: m.v.id,
        offset: offset as u64,
        size: size as u64,
        token,
    };
    q.v.node.enqueue(
        &cmd,
        evref,
        Some((
            token,
            HostDst {
                ptr: ptr as usize,
                len: size,
            },
        )),
    );
    Ok(Arc::clone(&q.v.node))
}

unsafe fn enqueue_write(
    q: &Obj<Queue>,
    queue: Handle,
    m: &Obj<Mem>,
    offset: usize,
    data: &[u8],
    command_type: u32,
    event: *mut Handle,
) {
    if let Some(region) = &m.v.shm {
        // Same host and nothing ahead of this write: copy straight into the buffer.
        // SAFETY: offset + len was checked against the buffer (= region) size.
        let dst = region.ptr().add(m.v.shm_offset + offset);
        if q.v
            .node
            .direct_write(|| crate::copy::copy(dst, data.as_ptr(), data.len()))
        {
            if !event.is_null() {
                let (ev, evref) = new_event(q, queue, command_type, event);
                q.v.node.enqueue(
                    &Command::Marker {
                        queue: q.v.id,
                        event: ev,
                    },
                    evref,
                    None,
                );
            }
            return;
        }
    }
    let (ev, evref) = new_event(q, queue, command_type, event);
    let mut evref = evref;
    let chunks = data.len().div_ceil(WRITE_CHUNK_MAX).max(1);
    for (i, chunk) in data.chunks(WRITE_CHUNK_MAX).enumerate() {
        let last = i + 1 == chunks;
        let cmd = Command::Write {
            queue: q.v.id,
            event: if last { ev } else { 0 },
            buffer: m.v.id,
            offset: (offset + i * WRITE_CHUNK_MAX) as u64,
            data: chunk,
        };
        q.v.node
            .enqueue(&cmd, if last { evref.take() } else { None }, None);
    }
}

// ---------------------------------------------------------------- rectangles

/// An origin or region argument: three `size_t`, not null.
unsafe fn read3(p: *const usize) -> Result<[usize; 3], ClInt> {
    if p.is_null() {
        Err(cl::CL_INVALID_VALUE)
    } else {
        Ok(*(p as *const [usize; 3]))
    }
}

const CL_COMMAND_READ_BUFFER_RECT: u32 = 0x1201;
const CL_COMMAND_WRITE_BUFFER_RECT: u32 = 0x1202;
const CL_COMMAND_COPY_BUFFER_RECT: u32 = 0x1203;

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
    let q = tryr!(prologue(queue, num_wait, wait));
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
    if ptr.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    let mut internal: Handle = null_mut();
    let slot = event_slot(blocking != 0, event, &mut internal);
    let (ev, evref) = new_event(q, queue, CL_COMMAND_READ_BUFFER_RECT, slot);
    let host = ptr as usize;
    if let Some(src) = &m.v.shm {
        let reads = rows
            .iter()
            .map(|&(b, h)| DirectRead {
                src: Arc::clone(src),
                offset: m.v.shm_offset + b,
                dst: HostDst { ptr: host + h, len },
            })
            .collect();
        q.v.node.enqueue_direct_reads(
            &Command::Marker {
                queue: q.v.id,
                event: ev,
            },
            evref,
            reads,
        );
    } else {
        let mut evref = evref;
        for (i, &(b, h)) in rows.iter().enumerate() {
            let last = i + 1 == rows.len();
            let token = q.v.node.next_id();
            let cmd = Command::Read {
                queue: q.v.id,
                event: if last { ev } else { 0 },
                buffer: m.v.id,
                offset: b as u64,
                size: len as u64,
                token,
            };
            let dst = HostDst { ptr: host + h, len };
            q.v.node.enqueue(
                &cmd,
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
    let q = tryr!(prologue(queue, num_wait, wait));
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
    if ptr.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    let host = ptr as *const u8;
    if let Some(region) = &m.v.shm {
        // As for a plain write: straight into the buffer when nothing is ahead.
        let base = region.ptr().add(m.v.shm_offset);
        let copy = || {
            for &(b, h) in &rows {
                std::ptr::copy_nonoverlapping(host.add(h), base.add(b), len);
            }
        };
        if q.v.node.direct_write(copy) {
            if !event.is_null() {
                let (ev, evref) = new_event(q, queue, CL_COMMAND_WRITE_BUFFER_RECT, event);
                q.v.node.enqueue(
                    &Command::Marker {
                        queue: q.v.id,
                        event: ev,
                    },
                    evref,
                    None,
                );
            }
            return cl::CL_SUCCESS;
        }
    }
    // Data is copied into the commands now, so the call returns at once (as a blocking
    // write may: the host memory is reusable).
    let (ev, evref) = new_event(q, queue, CL_COMMAND_WRITE_BUFFER_RECT, event);
    let mut evref = evref;
    for (i, &(b, h)) in rows.iter().enumerate() {
        let last = i + 1 == rows.len();
        let data = std::slice::from_raw_parts(host.add(h), len);
        let chunks = data.len().div_ceil(WRITE_CHUNK_MAX);
        for (j, chunk) in data.chunks(WRITE_CHUNK_MAX).enumerate() {
            let final_chunk = last && j + 1 == chunks;
            let cmd = Command::Write {
                queue: q.v.id,
                event: if final_chunk { ev } else { 0 },
                buffer: m.v.id,
                offset: (b + j * WRITE_CHUNK_MAX) as u64,
                data: chunk,
            };
            q.v.node
                .enqueue(&cmd, if final_chunk { evref.take() } else { None }, None);
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
    let q = tryr!(prologue(queue, num_wait, wait));
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
    let (ev, evref) = new_event(q, queue, CL_COMMAND_COPY_BUFFER_RECT, event);
    let mut evref = evref;
    for (i, &(a, b)) in rows.iter().enumerate() {
        let last = i + 1 == rows.len();
        let cmd = Command::Copy {
            queue: q.v.id,
            event: if last { ev } else { 0 },
            src: s.v.id,
            dst: d.v.id,
            src_offset: a as u64,
            dst_offset: b as u64,
            size: len as u64,
        };
        q.v.node
            .enqueue(&cmd, if last { evref.take() } else { None }, None);
    }
    cl::CL_SUCCESS
}

// ---------------------------------------------------------------- reads, writes, copies

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
    let mut internal: Handle = null_mut();
    let slot = event_slot(blocking != 0, event, &mut internal);
    let node = tryr!(enqueue_read(
        queue,
        mem,
        offset,
        size,
        ptr,
        cl::CL_COMMAND_READ_BUFFER,
        num_wait,
        wait,
        slot
    ));
    finish_blocking(&node, blocking != 0, slot, internal)
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
    let q = tryr!(prologue(queue, num_wait, wait));
    let m = tryr!(get::<Mem>(mem));
    tryr!(same_node(&q.v.node, &m.v.node));
    tryr!(check_range(offset, size, m.v.size));
    if ptr.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    // The data is copied now, so the host memory is reusable on return: a blocking
    // write needs no round trip.
    let data = std::slice::from_raw_parts(ptr.cast::<u8>(), size);
    enqueue_write(
        q,
        queue,
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
    let q = tryr!(prologue(queue, num_wait, wait));
    let s = tryr!(get::<Mem>(src));
    let d = tryr!(get::<Mem>(dst));
    tryr!(same_node(&q.v.node, &s.v.node));
    tryr!(same_node(&q.v.node, &d.v.node));
    tryr!(check_range(src_offset, size, s.v.size));
    tryr!(check_range(dst_offset, size, d.v.size));
    if s.v.id == d.v.id && src_offset < dst_offset + size && dst_offset < src_offset + size {
        return -8; // CL_MEM_COPY_OVERLAP
    }
    let (ev, evref) = new_event(q, queue, cl::CL_COMMAND_COPY_BUFFER, event);
    let cmd = Command::Copy {
        queue: q.v.id,
        event: ev,
        src: s.v.id,
        dst: d.v.id,
        src_offset: src_offset as u64,
        dst_offset: dst_offset as u64,
        size: size as u64,
    };
    q.v.node.enqueue(&cmd, evref, None);
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
    let q = tryr!(prologue(queue, num_wait, wait));
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
    let (ev, evref) = new_event(q, queue, cl::CL_COMMAND_FILL_BUFFER, event);
    let cmd = Command::Fill {
        queue: q.v.id,
        event: ev,
        buffer: m.v.id,
        pattern: std::slice::from_raw_parts(pattern.cast::<u8>(), pattern_size),
        offset: offset as u64,
        size: size as u64,
    };
    q.v.node.enqueue(&cmd, evref, None);
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
    let m = tryp!(get::<Mem>(mem), errcode);
    tryp!(check_range(offset, size, m.v.size), errcode);
    let mut internal: Handle = null_mut();
    let slot = event_slot(blocking != 0, event, &mut internal);
    if let (Some(region), 0) = (&m.v.shm, m.v.host_ptr) {
        // Shared memory: the mapping is the buffer itself, ready once the commands
        // ahead of it are done; nothing to copy either way.
        let q = tryp!(prologue(queue, num_wait, wait), errcode);
        tryp!(same_node(&q.v.node, &m.v.node), errcode);
        let (ev, evref) = new_event(q, queue, cl::CL_COMMAND_MAP_BUFFER, slot);
        q.v.node.enqueue(
            &Command::Marker {
                queue: q.v.id,
                event: ev,
            },
            evref,
            None,
        );
        let rc = finish_blocking(&q.v.node, blocking != 0, slot, internal);
        if rc != cl::CL_SUCCESS {
            set_err(errcode, rc);
            return null_mut();
        }
        let ptr = region.ptr().add(m.v.shm_offset + offset) as usize;
        let mapping = Mapping {
            ptr,
            offset,
            size,
            flags: 0,
            _backing: None,
            image: None,
        };
        m.v.maps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(mapping);
        set_err(errcode, cl::CL_SUCCESS);
        return ptr as *mut c_void;
    }
    let mut owned: Option<Box<[u8]>> = None;
    let ptr = if m.v.host_ptr != 0 {
        m.v.host_ptr + offset
    } else {
        let mut b = vec![0u8; size].into_boxed_slice();
        let p = b.as_mut_ptr() as usize;
        owned = Some(b);
        p
    };
    if map_flags & cl::CL_MAP_WRITE_INVALIDATE_REGION != 0 {
        // Nothing to fetch: the application overwrites the whole region.
        let q = tryp!(prologue(queue, num_wait, wait), errcode);
        let (ev, evref) = new_event(q, queue, cl::CL_COMMAND_MAP_BUFFER, event);
        q.v.node.enqueue(
            &Command::Marker {
                queue: q.v.id,
                event: ev,
            },
            evref,
            None,
        );
    } else {
        let node = tryp!(
            enqueue_read(
                queue,
                mem,
                offset,
                size,
                ptr as *mut c_void,
                cl::CL_COMMAND_MAP_BUFFER,
                num_wait,
                wait,
                slot
            ),
            errcode
        );
        let rc = finish_blocking(&node, blocking != 0, slot, internal);
        if rc != cl::CL_SUCCESS {
            set_err(errcode, rc);
            return null_mut();
        }
    }
    m.v.maps
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Mapping {
            ptr,
            offset,
            size,
            flags: map_flags,
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
    let q = tryr!(prologue(queue, num_wait, wait));
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
    if let (true, Some((origin, region)), Some(meta)) = (write_back, mapping.image, m.v.image) {
        let tight = (region[0] * meta.elem, region[0] * meta.elem * region[1]);
        image::enqueue_image_write(
            q,
            queue,
            m,
            &meta,
            (origin, region),
            tight,
            mapping.ptr as *const u8,
            cl::CL_COMMAND_UNMAP_MEM_OBJECT,
            event,
        );
    } else if write_back {
        let data = std::slice::from_raw_parts(mapping.ptr as *const u8, mapping.size);
        enqueue_write(
            q,
            queue,
            m,
            mapping.offset,
            data,
            cl::CL_COMMAND_UNMAP_MEM_OBJECT,
            event,
        );
    } else {
        let (ev, evref) = new_event(q, queue, cl::CL_COMMAND_UNMAP_MEM_OBJECT, event);
        q.v.node.enqueue(
            &Command::Marker {
                queue: q.v.id,
                event: ev,
            },
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
    let q = tryr!(prologue(queue, num_wait, wait));
    let (ev, evref) = new_event(q, queue, 0x1206, event);
    q.v.node.enqueue(
        &Command::Marker {
            queue: q.v.id,
            event: ev,
        },
        evref,
        None,
    );
    cl::CL_SUCCESS
}

// ---------------------------------------------------------------- markers, barriers

unsafe fn marker(
    queue: Handle,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
    barrier: bool,
) -> ClInt {
    let q = tryr!(prologue(queue, num_wait, wait));
    let ty = if barrier {
        cl::CL_COMMAND_BARRIER
    } else {
        cl::CL_COMMAND_MARKER
    };
    let (ev, evref) = new_event(q, queue, ty, event);
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
    q.v.node.enqueue(&cmd, evref, None);
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
pub unsafe extern "C" fn clEnqueueWaitForEvents(q: Handle, n: u32, w: *const Handle) -> ClInt {
    if n == 0 || w.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    tryr!(prologue(q, n, w));
    cl::CL_SUCCESS
}

// ---------------------------------------------------------------- programs

pub unsafe extern "C" fn clCreateProgramWithSource(
    context: Handle,
    count: u32,
    strings: *const *const c_char,
    lengths: *const usize,
    errcode: *mut ClInt,
) -> Handle {
    let c = tryp!(get::<Context>(context), errcode);
    if count == 0 || strings.is_null() {
        set_err(errcode, cl::CL_INVALID_VALUE);
        return null_mut();
    }
    let mut source = Vec::new();
    for i in 0..count as usize {
        let s = *strings.add(i);
        if s.is_null() {
            set_err(errcode, cl::CL_INVALID_VALUE);
            return null_mut();
        }
        let len = if lengths.is_null() {
            0
        } else {
            *lengths.add(i)
        };
        if len == 0 {
            source.extend_from_slice(CStr::from_ptr(s).to_bytes());
        } else {
            source.extend_from_slice(std::slice::from_raw_parts(s.cast::<u8>(), len));
        }
    }
    let node = Arc::clone(&c.v.node);
    let id = node.next_id();
    tryp!(
        reply(node.call(&Request::CreateProgramWithSource {
            id,
            context: c.v.id,
            source: &source
        })),
        errcode
    );
    retain::<Context>(context);
    set_err(errcode, cl::CL_SUCCESS);
    new_handle(Program {
        node,
        id,
        context: context as H,
        devices: c.v.devices.clone(),
        source,
    })
}

pub unsafe extern "C" fn clCreateProgramWithBinary(
    context: Handle,
    num_devices: u32,
    devices: *const Handle,
    lengths: *const usize,
    binaries: *const *const u8,
    binary_status: *mut ClInt,
    errcode: *mut ClInt,
) -> Handle {
    let c = tryp!(get::<Context>(context), errcode);
    if num_devices == 0 || devices.is_null() || lengths.is_null() || binaries.is_null() {
        set_err(errcode, cl::CL_INVALID_VALUE);
        return null_mut();
    }
    let mut list = Vec::new();
    let mut local = Vec::new();
    for i in 0..num_devices as usize {
        let d = *devices.add(i);
        let dev = tryp!(get::<Device>(d), errcode);
        if !c.v.devices.contains(&(d as H)) {
            set_err(errcode, cl::CL_INVALID_DEVICE);
            return null_mut();
        }
        let (len, bin) = (*lengths.add(i), *binaries.add(i));
        if len == 0 || bin.is_null() {
            set_err(errcode, cl::CL_INVALID_VALUE);
            return null_mut();
        }
        list.push((dev.v.remote, std::slice::from_raw_parts(bin, len)));
        local.push(d as H);
    }
    let node = Arc::clone(&c.v.node);
    let id = node.next_id();
    let (rc, payload) = node.call(&Request::CreateProgramWithBinary {
        id,
        context: c.v.id,
        binaries: list,
    });
    if !binary_status.is_null() {
        for (i, s) in payload
            .chunks_exact(4)
            .take(num_devices as usize)
            .enumerate()
        {
            *binary_status.add(i) = i32::from_le_bytes(s.try_into().expect("4"));
        }
    }
    if rc != cl::CL_SUCCESS {
        set_err(errcode, rc);
        return null_mut();
    }
    retain::<Context>(context);
    set_err(errcode, cl::CL_SUCCESS);
    new_handle(Program {
        node,
        id,
        context: context as H,
        devices: local,
        source: Vec::new(),
    })
}

pub unsafe extern "C" fn clRetainProgram(p: Handle) -> ClInt {
    retain::<Program>(p)
}
pub unsafe extern "C" fn clReleaseProgram(p: Handle) -> ClInt {
    release::<Program>(p)
}

unsafe fn remote_devices(list: &[Handle], allowed: &[H]) -> Result<Vec<u32>, ClInt> {
    list.iter()
        .map(|&d| {
            let o = get::<Device>(d)?;
            if allowed.contains(&(d as H)) {
                Ok(o.v.remote)
            } else {
                Err(cl::CL_INVALID_DEVICE)
            }
        })
        .collect()
}

pub unsafe extern "C" fn clBuildProgram(
    program: Handle,
    num_devices: u32,
    devices: *const Handle,
    options: *const c_char,
    notify: BuildNotify,
    user_data: *mut c_void,
) -> ClInt {
    let p = tryr!(get::<Program>(program));
    if (num_devices == 0) != devices.is_null() || (notify.is_none() && !user_data.is_null()) {
        return cl::CL_INVALID_VALUE;
    }
    let devs = tryr!(remote_devices(slice(devices, num_devices), &p.v.devices));
    let options = options_bytes(options);
    let (rc, _) = p.v.node.call(&Request::BuildProgram {
        program: p.v.id,
        devices: devs,
        options,
    });
    if let Some(cb) = notify {
        cb(program, user_data);
    }
    rc
}

pub unsafe extern "C" fn clCompileProgram(
    program: Handle,
    num_devices: u32,
    devices: *const Handle,
    options: *const c_char,
    num_headers: u32,
    headers: *const Handle,
    header_names: *const *const c_char,
    notify: BuildNotify,
    user_data: *mut c_void,
) -> ClInt {
    let p = tryr!(get::<Program>(program));
    if (num_devices == 0) != devices.is_null()
        || (notify.is_none() && !user_data.is_null())
        || (num_headers == 0) != headers.is_null()
        || (num_headers == 0) != header_names.is_null()
    {
        return cl::CL_INVALID_VALUE;
    }
    let devs = tryr!(remote_devices(slice(devices, num_devices), &p.v.devices));
    let mut remote_headers = Vec::with_capacity(num_headers as usize);
    for (i, &h) in slice(headers, num_headers).iter().enumerate() {
        let header = tryr!(get::<Program>(h));
        if !Arc::ptr_eq(&header.v.node, &p.v.node) || header.v.context != p.v.context {
            return cl::CL_INVALID_PROGRAM;
        }
        let name = *header_names.add(i);
        if name.is_null() {
            return cl::CL_INVALID_VALUE;
        }
        remote_headers.push((header.v.id, CStr::from_ptr(name).to_bytes()));
    }
    let options = options_bytes(options);
    let (rc, _) = p.v.node.call(&Request::CompileProgram {
        program: p.v.id,
        devices: devs,
        options,
        headers: remote_headers,
    });
    if let Some(cb) = notify {
        cb(program, user_data);
    }
    rc
}

#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn clLinkProgram(
    context: Handle,
    num_devices: u32,
    devices: *const Handle,
    options: *const c_char,
    num_inputs: u32,
    inputs: *const Handle,
    notify: BuildNotify,
    user_data: *mut c_void,
    errcode: *mut ClInt,
) -> Handle {
    let c = tryp!(get::<Context>(context), errcode);
    if (num_devices == 0) != devices.is_null()
        || (notify.is_none() && !user_data.is_null())
        || num_inputs == 0
        || inputs.is_null()
    {
        set_err(errcode, cl::CL_INVALID_VALUE);
        return null_mut();
    }
    let devs = tryp!(
        remote_devices(slice(devices, num_devices), &c.v.devices),
        errcode
    );
    let mut remote_inputs = Vec::with_capacity(num_inputs as usize);
    for &i in slice(inputs, num_inputs) {
        let input = tryp!(get::<Program>(i), errcode);
        if !Arc::ptr_eq(&input.v.node, &c.v.node) || input.v.context != context as H {
            set_err(errcode, cl::CL_INVALID_PROGRAM);
            return null_mut();
        }
        remote_inputs.push(input.v.id);
    }
    let options = options_bytes(options);
    let node = Arc::clone(&c.v.node);
    let id = node.next_id();
    let (rc, created) = node.call(&Request::LinkProgram {
        id,
        context: c.v.id,
        devices: devs,
        options,
        inputs: remote_inputs,
    });
    set_err(errcode, rc);
    // The node says whether the program exists (a failed link may leave one with a log).
    if created != [1] {
        return null_mut();
    }
    retain::<Context>(context);
    let program = new_handle(Program {
        node,
        id,
        context: context as H,
        devices: c.v.devices.clone(),
        source: Vec::new(),
    });
    if let Some(cb) = notify {
        cb(program, user_data);
    }
    program
}

pub unsafe extern "C" fn clUnloadCompiler() -> ClInt {
    cl::CL_SUCCESS
}
pub unsafe extern "C" fn clUnloadPlatformCompiler(_platform: Handle) -> ClInt {
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clGetProgramInfo(
    program: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let p = tryr!(get::<Program>(program));
    let bytes = match param {
        cl::CL_PROGRAM_REFERENCE_COUNT => bytes_of(ref_count(p)),
        cl::CL_PROGRAM_CONTEXT => bytes_of(p.v.context),
        cl::CL_PROGRAM_NUM_DEVICES => bytes_of(p.v.devices.len() as u32),
        cl::CL_PROGRAM_DEVICES => handles_bytes(&p.v.devices),
        cl::CL_PROGRAM_SOURCE => cstring_bytes(&p.v.source),
        cl::CL_PROGRAM_BINARIES => {
            let n = p.v.devices.len();
            let need = n * std::mem::size_of::<*mut u8>();
            if !value.is_null() {
                if size < need {
                    return cl::CL_INVALID_VALUE;
                }
                let payload = tryr!(reply(p.v.node.call(&Request::GetProgramInfo {
                    program: p.v.id,
                    param
                })));
                let mut r = Reader::new(&payload);
                let count = tryr!(r.count(4).map_err(|_| cl::CL_OUT_OF_RESOURCES));
                let dsts = value.cast::<*mut u8>();
                for i in 0..count.min(n) {
                    let bin = tryr!(r.bytes().map_err(|_| cl::CL_OUT_OF_RESOURCES));
                    let dst = *dsts.add(i);
                    if !dst.is_null() {
                        std::ptr::copy_nonoverlapping(bin.as_ptr(), dst, bin.len());
                    }
                }
            }
            if !size_ret.is_null() {
                *size_ret = need;
            }
            return cl::CL_SUCCESS;
        }
        _ => tryr!(reply(p.v.node.call(&Request::GetProgramInfo {
            program: p.v.id,
            param
        }))),
    };
    ret_info(&bytes, size, value, size_ret)
}

pub unsafe extern "C" fn clGetProgramBuildInfo(
    program: Handle,
    device: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let p = tryr!(get::<Program>(program));
    let dev = tryr!(remote_devices(&[device], &p.v.devices))[0];
    let bytes = tryr!(reply(p.v.node.call(&Request::GetProgramBuildInfo {
        program: p.v.id,
        device: dev,
        param
    })));
    ret_info(&bytes, size, value, size_ret)
}

// ---------------------------------------------------------------- kernels

unsafe fn create_kernel(program: Handle, name: &[u8]) -> Result<Handle, ClInt> {
    let p = get::<Program>(program)?;
    let node = Arc::clone(&p.v.node);
    let id = node.next_id();
    let payload = reply(node.call(&Request::CreateKernel {
        id,
        program: p.v.id,
        name,
    }))?;
    let num_args = u32::from_le_bytes(
        payload
            .get(..4)
            .ok_or(cl::CL_OUT_OF_RESOURCES)?
            .try_into()
            .expect("4"),
    );
    retain::<Program>(program);
    Ok(new_handle(Kernel {
        node,
        id,
        program: program as H,
        context: p.v.context,
        name: name.to_vec(),
        num_args,
        args: Mutex::new(vec![ArgValue::Unset; num_args as usize]),
    }))
}

pub unsafe extern "C" fn clCreateKernel(
    program: Handle,
    name: *const c_char,
    errcode: *mut ClInt,
) -> Handle {
    if name.is_null() {
        set_err(errcode, cl::CL_INVALID_VALUE);
        return null_mut();
    }
    let h = tryp!(
        create_kernel(program, CStr::from_ptr(name).to_bytes()),
        errcode
    );
    set_err(errcode, cl::CL_SUCCESS);
    h
}

pub unsafe extern "C" fn clCreateKernelsInProgram(
    program: Handle,
    num_kernels: u32,
    kernels: *mut Handle,
    num_kernels_ret: *mut u32,
) -> ClInt {
    let p = tryr!(get::<Program>(program));
    let names = tryr!(reply(p.v.node.call(&Request::GetProgramInfo {
        program: p.v.id,
        param: 0x1168
    })));
    let names = String::from_utf8_lossy(&trim_nul(names)).into_owned();
    let names: Vec<&str> = names.split(';').filter(|n| !n.is_empty()).collect();
    if !kernels.is_null() {
        if (num_kernels as usize) < names.len() {
            return cl::CL_INVALID_VALUE;
        }
        for (i, n) in names.iter().enumerate() {
            *kernels.add(i) = tryr!(create_kernel(program, n.as_bytes()));
        }
    }
    if !num_kernels_ret.is_null() {
        *num_kernels_ret = names.len() as u32;
    }
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clRetainKernel(k: Handle) -> ClInt {
    retain::<Kernel>(k)
}
pub unsafe extern "C" fn clReleaseKernel(k: Handle) -> ClInt {
    release::<Kernel>(k)
}

const CL_KERNEL_ARG_ADDRESS_LOCAL: u32 = 0x119C;
const CL_COMMAND_USER: u32 = 0x1204;

pub unsafe extern "C" fn clSetKernelArg(
    kernel: Handle,
    index: u32,
    size: usize,
    value: *const c_void,
) -> ClInt {
    let k = tryr!(get::<Kernel>(kernel));
    if index >= k.v.num_args {
        return cl::CL_INVALID_ARG_INDEX;
    }
    let arg = if value.is_null() {
        // NULL is either a __local size or a NULL buffer; the argument's address space
        // tells which.
        let q = k.v.node.call(&Request::GetKernelArgInfo {
            kernel: k.v.id,
            index,
            param: 0x1196,
        });
        let local = match reply(q) {
            Ok(b) if b.len() == 4 => {
                u32::from_ne_bytes(b[..4].try_into().expect("4")) == CL_KERNEL_ARG_ADDRESS_LOCAL
            }
            _ => size != std::mem::size_of::<Handle>(),
        };
        if local {
            if size == 0 {
                return cl::CL_INVALID_ARG_SIZE;
            }
            ArgValue::Local(size as u64)
        } else if size == std::mem::size_of::<Handle>() {
            ArgValue::NullMem
        } else {
            return cl::CL_INVALID_ARG_SIZE;
        }
    } else if size == std::mem::size_of::<Handle>() {
        let h = *(value as *const Handle);
        match (get::<Mem>(h), get::<Sampler>(h)) {
            (Ok(m), _) => {
                tryr!(same_node(&k.v.node, &m.v.node));
                ArgValue::Mem(m.v.id)
            }
            (_, Ok(sampler)) => {
                tryr!(same_node(&k.v.node, &sampler.v.node));
                ArgValue::Sampler(sampler.v.id)
            }
            _ => ArgValue::Bytes(std::slice::from_raw_parts(value.cast::<u8>(), size).to_vec()),
        }
    } else {
        if size == 0 {
            return cl::CL_INVALID_ARG_SIZE;
        }
        ArgValue::Bytes(std::slice::from_raw_parts(value.cast::<u8>(), size).to_vec())
    };
    k.v.args.lock().unwrap_or_else(|p| p.into_inner())[index as usize] = arg;
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clGetKernelInfo(
    kernel: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let k = tryr!(get::<Kernel>(kernel));
    let bytes = match param {
        cl::CL_KERNEL_FUNCTION_NAME => cstring_bytes(&k.v.name),
        cl::CL_KERNEL_NUM_ARGS => bytes_of(k.v.num_args),
        cl::CL_KERNEL_REFERENCE_COUNT => bytes_of(ref_count(k)),
        cl::CL_KERNEL_CONTEXT => bytes_of(k.v.context),
        cl::CL_KERNEL_PROGRAM => bytes_of(k.v.program),
        _ => tryr!(reply(k.v.node.call(&Request::GetKernelInfo {
            kernel: k.v.id,
            param
        }))),
    };
    ret_info(&bytes, size, value, size_ret)
}

pub unsafe extern "C" fn clGetKernelWorkGroupInfo(
    kernel: Handle,
    device: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let k = tryr!(get::<Kernel>(kernel));
    let ctx = tryr!(get::<Context>(k.v.context as Handle));
    let device = if device.is_null() {
        if ctx.v.devices.len() != 1 {
            return cl::CL_INVALID_DEVICE;
        }
        ctx.v.devices[0] as Handle
    } else {
        device
    };
    let dev = tryr!(remote_devices(&[device], &ctx.v.devices))[0];
    let bytes = tryr!(reply(k.v.node.call(&Request::GetKernelWorkGroupInfo {
        kernel: k.v.id,
        device: dev,
        param
    })));
    ret_info(&bytes, size, value, size_ret)
}

pub unsafe extern "C" fn clGetKernelArgInfo(
    kernel: Handle,
    index: u32,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> ClInt {
    let k = tryr!(get::<Kernel>(kernel));
    if index >= k.v.num_args {
        return cl::CL_INVALID_ARG_INDEX;
    }
    let bytes = tryr!(reply(k.v.node.call(&Request::GetKernelArgInfo {
        kernel: k.v.id,
        index,
        param
    })));
    ret_info(&bytes, size, value, size_ret)
}

pub unsafe extern "C" fn clEnqueueNDRangeKernel(
    queue: Handle,
    kernel: Handle,
    work_dim: u32,
    offset: *const usize,
    global: *const usize,
    local: *const usize,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    let q = tryr!(prologue(queue, num_wait, wait));
    let k = tryr!(get::<Kernel>(kernel));
    tryr!(same_node(&q.v.node, &k.v.node));
    if !(1..=proto::WORK_DIM_MAX as u32).contains(&work_dim) {
        return cl::CL_INVALID_WORK_DIMENSION;
    }
    if global.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    let dims = work_dim as usize;
    let read = |p: *const usize| {
        let mut v = [0u64; proto::WORK_DIM_MAX];
        for (i, slot) in v.iter_mut().enumerate().take(dims) {
            *slot = *p.add(i) as u64;
        }
        v
    };
    let g = read(global);
    if g[..dims].contains(&0) {
        return cl::CL_INVALID_GLOBAL_WORK_SIZE;
    }
    let args = k.v.args.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if args.iter().any(|a| matches!(a, ArgValue::Unset)) {
        return cl::CL_INVALID_KERNEL_ARGS;
    }
    let wire_args: Vec<KernelArg<'_>> = args
        .iter()
        .map(|a| match a {
            ArgValue::Unset => KernelArg::Unset,
            ArgValue::Mem(id) => KernelArg::Mem(*id),
            ArgValue::NullMem => KernelArg::NullMem,
            ArgValue::Local(n) => KernelArg::Local(*n),
            ArgValue::Bytes(b) => KernelArg::Bytes(b),
            ArgValue::Sampler(id) => KernelArg::Sampler(*id),
        })
        .collect();
    let (ev, evref) = new_event(q, queue, cl::CL_COMMAND_NDRANGE_KERNEL, event);
    let cmd = Command::NdRange(NdRange {
        queue: q.v.id,
        event: ev,
        kernel: k.v.id,
        work_dim: work_dim as u8,
        offset: if offset.is_null() {
            [0; 3]
        } else {
            read(offset)
        },
        global: g,
        local: if local.is_null() {
            None
        } else {
            Some(read(local))
        },
        args: wire_args,
    });
    q.v.node.enqueue(&cmd, evref, None);
    cl::CL_SUCCESS
}

pub unsafe extern "C" fn clEnqueueTask(
    queue: Handle,
    kernel: Handle,
    num_wait: u32,
    wait: *const Handle,
    event: *mut Handle,
) -> ClInt {
    let one = [1usize];
    clEnqueueNDRangeKernel(
        queue,
        kernel,
        1,
        std::ptr::null(),
        one.as_ptr(),
        one.as_ptr(),
        num_wait,
        wait,
        event,
    )
}

// ---------------------------------------------------------------- events

pub unsafe extern "C" fn clWaitForEvents(num: u32, list: *const Handle) -> ClInt {
    if num == 0 || list.is_null() {
        return cl::CL_INVALID_VALUE;
    }
    let mut refs = Vec::new();
    for &e in slice(list, num) {
        let ev = tryr!(get::<Event>(e));
        refs.push((Arc::clone(&ev.v.node), EventRef::new(e)));
    }
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
        CL_COMMAND_USER,
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
    if !EventRef::new(event).set_user_status(status) {
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

/// The entry points this ICD implements, by OpenCL name, for the dispatch table.
pub fn entries() -> Vec<(&'static str, *const c_void)> {
    macro_rules! e {
        ($($f:ident),* $(,)?) => { vec![$((stringify!($f), $f as *const c_void)),*] };
    }
    let mut v = image::entries();
    v.extend(e![
        clGetPlatformIDs,
        clGetPlatformInfo,
        clGetDeviceIDs,
        clGetDeviceInfo,
        clRetainDevice,
        clReleaseDevice,
        clCreateContext,
        clCreateContextFromType,
        clRetainContext,
        clReleaseContext,
        clGetContextInfo,
        clCreateCommandQueue,
        clCreateCommandQueueWithProperties,
        clRetainCommandQueue,
        clReleaseCommandQueue,
        clGetCommandQueueInfo,
        clFlush,
        clFinish,
        clCreateBuffer,
        clCreateSubBuffer,
        clRetainMemObject,
        clReleaseMemObject,
        clGetMemObjectInfo,
        clEnqueueReadBuffer,
        clEnqueueWriteBuffer,
        clEnqueueCopyBuffer,
        clEnqueueReadBufferRect,
        clEnqueueWriteBufferRect,
        clEnqueueCopyBufferRect,
        clEnqueueFillBuffer,
        clEnqueueMapBuffer,
        clEnqueueUnmapMemObject,
        clEnqueueMigrateMemObjects,
        clEnqueueMarkerWithWaitList,
        clEnqueueBarrierWithWaitList,
        clEnqueueMarker,
        clEnqueueBarrier,
        clEnqueueWaitForEvents,
        clCreateProgramWithSource,
        clCreateProgramWithBinary,
        clRetainProgram,
        clReleaseProgram,
        clBuildProgram,
        clCompileProgram,
        clLinkProgram,
        clUnloadCompiler,
        clUnloadPlatformCompiler,
        clGetProgramInfo,
        clGetProgramBuildInfo,
        clCreateKernel,
        clCreateKernelsInProgram,
        clRetainKernel,
        clReleaseKernel,
        clSetKernelArg,
        clGetKernelInfo,
        clGetKernelWorkGroupInfo,
        clGetKernelArgInfo,
        clEnqueueNDRangeKernel,
        clEnqueueTask,
        clWaitForEvents,
        clGetEventInfo,
        clGetEventProfilingInfo,
        clSetEventCallback,
        clRetainEvent,
        clReleaseEvent,
        clCreateUserEvent,
        clSetUserEventStatus,
        clGetExtensionFunctionAddressForPlatform,
    ]);
    v.push((
        "clGetExtensionFunctionAddress",
        crate::clGetExtensionFunctionAddress as *const c_void,
    ));
    v
}
