//! Kernels: argument values are kept in the ICD and sent with every launch
//! (`clEnqueueNDRangeKernel`), so setting an argument costs no round trip.

use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;
use std::sync::{Arc, Mutex};

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::{self, Command, KernelArg, NdRange, Request};

use crate::object::*;

use super::declared::{arg_decl, check_work_groups, ArgDecl};
use super::enqueue::{prologue, same_node};
use super::program::remote_devices;
use super::{bytes_of, cstring_bytes, reply, ret_info, set_err, trim_nul};

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clCreateKernel,
        clCreateKernelsInProgram,
        clCloneKernel,
        clRetainKernel,
        clReleaseKernel,
        clSetKernelArg,
        clGetKernelInfo,
        clGetKernelWorkGroupInfo,
        clGetKernelArgInfo,
        clEnqueueNDRangeKernel,
        clEnqueueTask,
    ]
}

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
        declared: Mutex::default(),
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
        param: cl::CL_PROGRAM_KERNEL_NAMES
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

/// OpenCL 2.1: a new kernel of the same program and function, with the argument values
/// set so far (they live in the ICD, see the module doc).
pub unsafe extern "C" fn clCloneKernel(source: Handle, errcode: *mut ClInt) -> Handle {
    let k = tryp!(get::<Kernel>(source), errcode);
    let h = tryp!(create_kernel(k.v.program as Handle, &k.v.name), errcode);
    let args = k.v.args.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if let Ok(clone) = get::<Kernel>(h) {
        *clone.v.args.lock().unwrap_or_else(|p| p.into_inner()) = args;
    }
    set_err(errcode, cl::CL_SUCCESS);
    h
}

pub unsafe extern "C" fn clRetainKernel(k: Handle) -> ClInt {
    retain::<Kernel>(k)
}
pub unsafe extern "C" fn clReleaseKernel(k: Handle) -> ClInt {
    release::<Kernel>(k)
}

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
    let arg = tryr!(match arg_decl(k, index) {
        ArgDecl::Unknown => undeclared_arg(k, index, size, value),
        decl => declared_arg(k, decl, size, value),
    });
    k.v.args.lock().unwrap_or_else(|p| p.into_inner())[index as usize] = arg;
    cl::CL_SUCCESS
}

const HANDLE_SIZE: usize = std::mem::size_of::<Handle>();

/// An argument value checked against the argument's declaration (OpenCL 1.2,
/// `clSetKernelArg`).
unsafe fn declared_arg(
    k: &Obj<Kernel>,
    decl: ArgDecl,
    size: usize,
    value: *const c_void,
) -> Result<ArgValue, ClInt> {
    let handle = || {
        if size != HANDLE_SIZE {
            return Err(cl::CL_INVALID_ARG_SIZE);
        }
        Ok((!value.is_null()).then(|| *(value as *const Handle)))
    };
    match decl {
        ArgDecl::Local => match (size, value.is_null()) {
            (_, false) => Err(cl::CL_INVALID_ARG_VALUE),
            (0, true) => Err(cl::CL_INVALID_ARG_SIZE),
            _ => Ok(ArgValue::Local(size as u64)),
        },
        ArgDecl::Buffer => match handle()? {
            None => Ok(ArgValue::NullMem),
            Some(h) if h.is_null() => Ok(ArgValue::NullMem),
            Some(h) => {
                let m = get::<Mem>(h)?;
                same_node(&k.v.node, &m.v.node)?;
                Ok(ArgValue::Mem(m.v.id))
            }
        },
        ArgDecl::Image => {
            let h = handle()?.ok_or(cl::CL_INVALID_ARG_VALUE)?;
            let m = get::<Mem>(h)?;
            if m.v.image.is_none() {
                return Err(cl::CL_INVALID_MEM_OBJECT);
            }
            same_node(&k.v.node, &m.v.node)?;
            Ok(ArgValue::Mem(m.v.id))
        }
        ArgDecl::Sampler => {
            let h = handle()?.ok_or(cl::CL_INVALID_ARG_VALUE)?;
            let sampler = get::<Sampler>(h)?;
            same_node(&k.v.node, &sampler.v.node)?;
            Ok(ArgValue::Sampler(sampler.v.id))
        }
        ArgDecl::Value(expected) => {
            if value.is_null() {
                return Err(cl::CL_INVALID_ARG_VALUE);
            }
            if size == 0 || expected.is_some_and(|n| n != size) {
                return Err(cl::CL_INVALID_ARG_SIZE);
            }
            Ok(ArgValue::Bytes(
                std::slice::from_raw_parts(value.cast::<u8>(), size).to_vec(),
            ))
        }
        ArgDecl::Unknown => unreachable!("handled by undeclared_arg"),
    }
}

/// An argument value when the node cannot say what the argument is: a pointer-sized
/// value naming a live buffer or sampler is one, NULL with the size of a pointer is a
/// NULL buffer, other NULLs are `__local` sizes.
unsafe fn undeclared_arg(
    k: &Obj<Kernel>,
    index: u32,
    size: usize,
    value: *const c_void,
) -> Result<ArgValue, ClInt> {
    if value.is_null() {
        // NULL is either a __local size or a NULL buffer; the argument's address space
        // tells which, if the node knows it.
        let q = k.v.node.call(&Request::GetKernelArgInfo {
            kernel: k.v.id,
            index,
            param: cl::CL_KERNEL_ARG_ADDRESS_QUALIFIER,
        });
        let local = match reply(q) {
            Ok(b) if b.len() == 4 => {
                u32::from_ne_bytes(b[..4].try_into().expect("4")) == cl::CL_KERNEL_ARG_ADDRESS_LOCAL
            }
            _ => size != HANDLE_SIZE,
        };
        return if local {
            if size == 0 {
                Err(cl::CL_INVALID_ARG_SIZE)
            } else {
                Ok(ArgValue::Local(size as u64))
            }
        } else if size == HANDLE_SIZE {
            Ok(ArgValue::NullMem)
        } else {
            Err(cl::CL_INVALID_ARG_SIZE)
        };
    }
    if size == 0 {
        return Err(cl::CL_INVALID_ARG_SIZE);
    }
    if size == HANDLE_SIZE {
        let h = *(value as *const Handle);
        if let Ok(m) = get::<Mem>(h) {
            same_node(&k.v.node, &m.v.node)?;
            return Ok(ArgValue::Mem(m.v.id));
        }
        if let Ok(sampler) = get::<Sampler>(h) {
            same_node(&k.v.node, &sampler.v.node)?;
            return Ok(ArgValue::Sampler(sampler.v.id));
        }
    }
    Ok(ArgValue::Bytes(
        std::slice::from_raw_parts(value.cast::<u8>(), size).to_vec(),
    ))
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
    let mut enq = tryr!(prologue(queue, num_wait, wait));
    let q = enq.q;
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
    let l = (!local.is_null()).then(|| read(local));
    let args = k.v.args.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if args.iter().any(|a| matches!(a, ArgValue::Unset)) {
        return cl::CL_INVALID_KERNEL_ARGS;
    }
    // OpenCL 2.1 and later: a launch of no work-item does nothing but order, as a marker
    // that waits for its wait list (and whose event is the kernel's).
    if g[..dims].contains(&0) {
        let (ev, evref) = enq.event(cl::CL_COMMAND_NDRANGE_KERNEL, event);
        let cmd = Command::Marker {
            queue: q.v.id,
            event: ev,
        };
        q.v.node.enqueue(&cmd, &enq.waits, evref, None);
        return cl::CL_SUCCESS;
    }
    tryr!(check_work_groups(k, q, dims, &g, l.as_ref()));
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
    let (ev, evref) = enq.event(cl::CL_COMMAND_NDRANGE_KERNEL, event);
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
        local: l,
        args: wire_args,
    });
    q.v.node.enqueue(&cmd, &enq.waits, evref, None);
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
