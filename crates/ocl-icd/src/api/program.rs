//! Programs: from source or binaries, built, compiled and linked on the node.

use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;
use std::sync::Arc;

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::{Reader, Request};

use crate::object::*;

use super::{bytes_of, cstring_bytes, handles_bytes, reply, ret_info, set_err, slice};

type BuildNotify = Option<unsafe extern "C" fn(Handle, *mut c_void)>;

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

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
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
    ]
}

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

pub(super) unsafe fn remote_devices(list: &[Handle], allowed: &[H]) -> Result<Vec<u32>, ClInt> {
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
        // No device takes programs from IL, and OpenCL C has no program-scope
        // constructors or destructors.
        cl::CL_PROGRAM_IL => Vec::new(),
        cl::CL_PROGRAM_SCOPE_GLOBAL_CTORS_PRESENT | cl::CL_PROGRAM_SCOPE_GLOBAL_DTORS_PRESENT => {
            bytes_of(0u32)
        }
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
