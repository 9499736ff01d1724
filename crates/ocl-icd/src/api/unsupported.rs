//! The entry points of the optional features of OpenCL 3.0 that no device of the remote
//! path presents, answering what the specification requires of a device without them:
//! shared virtual memory (`CL_DEVICE_SVM_CAPABILITIES` 0), pipes
//! (`CL_DEVICE_PIPE_SUPPORT` false), queues on the device
//! (`CL_DEVICE_DEVICE_ENQUEUE_CAPABILITIES` 0), programs from IL (no
//! `CL_DEVICE_ILS_WITH_VERSION`), sub-groups (`CL_DEVICE_MAX_NUM_SUB_GROUPS` 0),
//! program-scope constructors and destructors, and the device and host timer
//! (`CL_PLATFORM_HOST_TIMER_RESOLUTION` 0).
//!
//! Each checks its handles first, so that an invalid one gets its own error code, as
//! natively; then the call fails with the code the specification names for the missing
//! feature (mostly `CL_INVALID_OPERATION`; the CTS's `test_api consistency_*` subtests
//! check them). `clSVMAlloc` (NULL) and `clSVMFree` (nothing to free) need nothing of
//! the sort: the dispatch table's defaults do it (see the crate root).
//!
//! Arguments after the handles are not read: they are declared as `usize`, which the C
//! calling conventions we build for pass like any integer or pointer argument (see
//! `errcode_stubs` in the crate root).

use std::ffi::c_void;
use std::ptr::null_mut;

use ocl_remote::cl::{self, ClInt};

use crate::object::*;

use super::set_err;

pub(super) fn entries() -> Vec<(&'static str, *const c_void)> {
    entry_points![
        clCreatePipe,
        clGetPipeInfo,
        clCreateProgramWithIL,
        clSetProgramSpecializationConstant,
        clSetProgramReleaseCallback,
        clGetKernelSubGroupInfo,
        clSetKernelArgSVMPointer,
        clSetKernelExecInfo,
        clSetDefaultDeviceCommandQueue,
        clGetDeviceAndHostTimer,
        clGetHostTimer,
        clEnqueueSVMFree,
        clEnqueueSVMMemcpy,
        clEnqueueSVMMemFill,
        clEnqueueSVMMap,
        clEnqueueSVMUnmap,
        clEnqueueSVMMigrateMem,
    ]
}

/// `Ok` if `h` is a live object of type `T`, else its invalid-handle error.
fn valid<T: Kind>(h: Handle) -> Result<(), ClInt> {
    get::<T>(h).map(|_| ())
}

/// `CL_INVALID_OPERATION` once `checked` passed.
fn unsupported(checked: Result<(), ClInt>) -> ClInt {
    checked.err().unwrap_or(cl::CL_INVALID_OPERATION)
}

/// An object-creating call: NULL, with the error code.
unsafe fn no_object(checked: Result<(), ClInt>, errcode: *mut ClInt) -> Handle {
    set_err(errcode, unsupported(checked));
    null_mut()
}

pub unsafe extern "C" fn clCreatePipe(
    context: Handle,
    _flags: usize,
    _packet_size: usize,
    _max_packets: usize,
    _properties: usize,
    errcode: *mut ClInt,
) -> Handle {
    no_object(valid::<Context>(context), errcode)
}

/// No memory object is a pipe.
pub unsafe extern "C" fn clGetPipeInfo(
    pipe: Handle,
    _param: usize,
    _size: usize,
    _value: usize,
    _size_ret: usize,
) -> ClInt {
    let _ = pipe;
    cl::CL_INVALID_MEM_OBJECT
}

pub unsafe extern "C" fn clCreateProgramWithIL(
    context: Handle,
    _il: usize,
    _length: usize,
    errcode: *mut ClInt,
) -> Handle {
    no_object(valid::<Context>(context), errcode)
}

pub unsafe extern "C" fn clSetProgramSpecializationConstant(
    program: Handle,
    _id: usize,
    _size: usize,
    _value: usize,
) -> ClInt {
    unsupported(valid::<Program>(program))
}

pub unsafe extern "C" fn clSetProgramReleaseCallback(
    program: Handle,
    notify: usize,
    _user_data: usize,
) -> ClInt {
    let notify_ok = if notify == 0 {
        Err(cl::CL_INVALID_VALUE)
    } else {
        Ok(())
    };
    unsupported(valid::<Program>(program).and(notify_ok))
}

pub unsafe extern "C" fn clGetKernelSubGroupInfo(
    kernel: Handle,
    device: Handle,
    _param: usize,
    _input_size: usize,
    _input: usize,
    _size: usize,
    _value: usize,
    _size_ret: usize,
) -> ClInt {
    // A NULL device names the kernel's only device; another must be valid.
    let device_ok = if device.is_null() {
        Ok(())
    } else {
        valid::<Device>(device)
    };
    unsupported(valid::<Kernel>(kernel).and(device_ok))
}

pub unsafe extern "C" fn clSetKernelArgSVMPointer(
    kernel: Handle,
    _index: usize,
    _value: usize,
) -> ClInt {
    unsupported(valid::<Kernel>(kernel))
}

pub unsafe extern "C" fn clSetKernelExecInfo(
    kernel: Handle,
    _param: usize,
    _size: usize,
    _value: usize,
) -> ClInt {
    unsupported(valid::<Kernel>(kernel))
}

pub unsafe extern "C" fn clSetDefaultDeviceCommandQueue(
    context: Handle,
    device: Handle,
    _queue: usize,
) -> ClInt {
    unsupported(valid::<Context>(context).and(valid::<Device>(device)))
}

pub unsafe extern "C" fn clGetDeviceAndHostTimer(
    device: Handle,
    _device_timestamp: usize,
    _host_timestamp: usize,
) -> ClInt {
    unsupported(valid::<Device>(device))
}

pub unsafe extern "C" fn clGetHostTimer(device: Handle, _host_timestamp: usize) -> ClInt {
    unsupported(valid::<Device>(device))
}

pub unsafe extern "C" fn clEnqueueSVMFree(
    queue: Handle,
    _num_pointers: usize,
    _pointers: usize,
    _notify: usize,
    _user_data: usize,
    _num_wait: usize,
    _wait: usize,
    _event: usize,
) -> ClInt {
    unsupported(valid::<Queue>(queue))
}

pub unsafe extern "C" fn clEnqueueSVMMemcpy(
    queue: Handle,
    _blocking: usize,
    _dst: usize,
    _src: usize,
    _size: usize,
    _num_wait: usize,
    _wait: usize,
    _event: usize,
) -> ClInt {
    unsupported(valid::<Queue>(queue))
}

pub unsafe extern "C" fn clEnqueueSVMMemFill(
    queue: Handle,
    _ptr: usize,
    _pattern: usize,
    _pattern_size: usize,
    _size: usize,
    _num_wait: usize,
    _wait: usize,
    _event: usize,
) -> ClInt {
    unsupported(valid::<Queue>(queue))
}

pub unsafe extern "C" fn clEnqueueSVMMap(
    queue: Handle,
    _blocking: usize,
    _flags: usize,
    _ptr: usize,
    _size: usize,
    _num_wait: usize,
    _wait: usize,
    _event: usize,
) -> ClInt {
    unsupported(valid::<Queue>(queue))
}

pub unsafe extern "C" fn clEnqueueSVMUnmap(
    queue: Handle,
    _ptr: usize,
    _num_wait: usize,
    _wait: usize,
    _event: usize,
) -> ClInt {
    unsupported(valid::<Queue>(queue))
}

pub unsafe extern "C" fn clEnqueueSVMMigrateMem(
    queue: Handle,
    _num_pointers: usize,
    _pointers: usize,
    _sizes: usize,
    _flags: usize,
    _num_wait: usize,
    _wait: usize,
    _event: usize,
) -> ClInt {
    unsupported(valid::<Queue>(queue))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_handles_are_named_before_the_missing_feature() {
        let bogus = 0x10 as Handle;
        let mut code = 0;
        // SAFETY: the calls read no argument but the handles (checked) and errcode.
        unsafe {
            assert!(clCreatePipe(bogus, 0, 4, 4, 0, &mut code).is_null());
            assert_eq!(code, cl::CL_INVALID_CONTEXT);
            assert!(clCreateProgramWithIL(null_mut(), 0, 4, &mut code).is_null());
            assert_eq!(code, cl::CL_INVALID_CONTEXT);
            assert_eq!(
                clSetProgramReleaseCallback(bogus, 1, 0),
                cl::CL_INVALID_PROGRAM
            );
            assert_eq!(clGetHostTimer(bogus, 0), cl::CL_INVALID_DEVICE);
            assert_eq!(
                clEnqueueSVMMemcpy(bogus, 1, 0, 0, 4, 0, 0, 0),
                cl::CL_INVALID_COMMAND_QUEUE
            );
            assert_eq!(
                clGetKernelSubGroupInfo(bogus, null_mut(), 0, 0, 0, 0, 0, 0),
                cl::CL_INVALID_KERNEL
            );
            assert_eq!(clGetPipeInfo(bogus, 0, 0, 0, 0), cl::CL_INVALID_MEM_OBJECT);
        }
    }
}
