//! The OpenCL entry points the service calls, loaded at run time with `dlopen`.
//!
//! Loading at run time (instead of linking `-lOpenCL`) keeps the node binary startable on
//! a machine without any OpenCL runtime: [`Api::load`] then fails with a clear error and
//! only the OpenCL service is unavailable. The table holds exactly the OpenCL 1.2 calls
//! the service makes; info queries go through [`info_bytes`] as raw bytes so that every
//! parameter, including ones this code has never heard of, can be forwarded.

use std::ffi::{c_char, c_void, CStr, CString};

use crate::cl::{ClInt, CL_SUCCESS};

/// An OpenCL object handle (`cl_platform_id`, `cl_mem`, …) of the real runtime.
pub type Handle = *mut c_void;
type InfoFn<'a> = dyn FnMut(usize, *mut c_void, *mut usize) -> ClInt + 'a;

macro_rules! api {
    ($( $name:ident : fn($($arg:ty),* $(,)?) -> $ret:ty; )*) => {
        /// Function pointers into the loaded OpenCL library (the ICD loader, usually).
        #[allow(non_snake_case)]
        pub struct Api {
            $( pub $name: unsafe extern "C" fn($($arg),*) -> $ret, )*
        }

        impl Api {
            #[allow(non_snake_case)]
            unsafe fn resolve(lib: *mut c_void) -> Result<Api, String> {
                $(
                    let $name = {
                        let sym = libc::dlsym(lib, concat!(stringify!($name), "\0").as_ptr().cast());
                        if sym.is_null() {
                            return Err(format!("OpenCL library lacks {}", stringify!($name)));
                        }
                        std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(sym)
                    };
                )*
                Ok(Api { $( $name, )* })
            }
        }
    };
}

api! {
    clGetPlatformIDs: fn(u32, *mut Handle, *mut u32) -> ClInt;
    clGetPlatformInfo: fn(Handle, u32, usize, *mut c_void, *mut usize) -> ClInt;
    clGetDeviceIDs: fn(Handle, u64, u32, *mut Handle, *mut u32) -> ClInt;
    clGetDeviceInfo: fn(Handle, u32, usize, *mut c_void, *mut usize) -> ClInt;
    clCreateContext: fn(*const isize, u32, *const Handle, *const c_void, *mut c_void, *mut ClInt) -> Handle;
    clReleaseContext: fn(Handle) -> ClInt;
    clCreateCommandQueue: fn(Handle, Handle, u64, *mut ClInt) -> Handle;
    clReleaseCommandQueue: fn(Handle) -> ClInt;
    clCreateBuffer: fn(Handle, u64, usize, *mut c_void, *mut ClInt) -> Handle;
    clReleaseMemObject: fn(Handle) -> ClInt;
    clCreateSubBuffer: fn(Handle, u64, u32, *const c_void, *mut ClInt) -> Handle;
    clCreateProgramWithSource: fn(Handle, u32, *const *const c_char, *const usize, *mut ClInt) -> Handle;
    clCreateProgramWithBinary: fn(Handle, u32, *const Handle, *const usize, *const *const u8, *mut ClInt, *mut ClInt) -> Handle;
    clBuildProgram: fn(Handle, u32, *const Handle, *const c_char, *const c_void, *mut c_void) -> ClInt;
    clCompileProgram: fn(Handle, u32, *const Handle, *const c_char, u32, *const Handle, *const *const c_char, *const c_void, *mut c_void) -> ClInt;
    clLinkProgram: fn(Handle, u32, *const Handle, *const c_char, u32, *const Handle, *const c_void, *mut c_void, *mut ClInt) -> Handle;
    clGetProgramInfo: fn(Handle, u32, usize, *mut c_void, *mut usize) -> ClInt;
    clGetProgramBuildInfo: fn(Handle, Handle, u32, usize, *mut c_void, *mut usize) -> ClInt;
    clReleaseProgram: fn(Handle) -> ClInt;
    clCreateKernel: fn(Handle, *const c_char, *mut ClInt) -> Handle;
    clGetKernelInfo: fn(Handle, u32, usize, *mut c_void, *mut usize) -> ClInt;
    clGetKernelWorkGroupInfo: fn(Handle, Handle, u32, usize, *mut c_void, *mut usize) -> ClInt;
    clGetKernelArgInfo: fn(Handle, u32, u32, usize, *mut c_void, *mut usize) -> ClInt;
    clReleaseKernel: fn(Handle) -> ClInt;
    clSetKernelArg: fn(Handle, u32, usize, *const c_void) -> ClInt;
    clEnqueueNDRangeKernel: fn(Handle, Handle, u32, *const usize, *const usize, *const usize, u32, *const Handle, *mut Handle) -> ClInt;
    clEnqueueReadBuffer: fn(Handle, Handle, u32, usize, usize, *mut c_void, u32, *const Handle, *mut Handle) -> ClInt;
    clEnqueueWriteBuffer: fn(Handle, Handle, u32, usize, usize, *const c_void, u32, *const Handle, *mut Handle) -> ClInt;
    clEnqueueCopyBuffer: fn(Handle, Handle, Handle, usize, usize, usize, u32, *const Handle, *mut Handle) -> ClInt;
    clEnqueueFillBuffer: fn(Handle, Handle, *const c_void, usize, usize, usize, u32, *const Handle, *mut Handle) -> ClInt;
    clEnqueueMapBuffer: fn(Handle, Handle, u32, u64, usize, usize, u32, *const Handle, *mut Handle, *mut ClInt) -> *mut c_void;
    clEnqueueUnmapMemObject: fn(Handle, Handle, *mut c_void, u32, *const Handle, *mut Handle) -> ClInt;
    clEnqueueMarkerWithWaitList: fn(Handle, u32, *const Handle, *mut Handle) -> ClInt;
    clEnqueueBarrierWithWaitList: fn(Handle, u32, *const Handle, *mut Handle) -> ClInt;
    clFinish: fn(Handle) -> ClInt;
    clGetEventInfo: fn(Handle, u32, usize, *mut c_void, *mut usize) -> ClInt;
    clGetEventProfilingInfo: fn(Handle, u32, usize, *mut c_void, *mut usize) -> ClInt;
    clReleaseEvent: fn(Handle) -> ClInt;
    clCreateUserEvent: fn(Handle, *mut ClInt) -> Handle;
    clSetUserEventStatus: fn(Handle, ClInt) -> ClInt;
    clCreateImage: fn(Handle, u64, *const [u32; 2], *const ImageDesc, *mut c_void, *mut ClInt) -> Handle;
    clGetImageInfo: fn(Handle, u32, usize, *mut c_void, *mut usize) -> ClInt;
    clGetSupportedImageFormats: fn(Handle, u64, u32, u32, *mut [u32; 2], *mut u32) -> ClInt;
    clCreateSampler: fn(Handle, u32, u32, u32, *mut ClInt) -> Handle;
    clReleaseSampler: fn(Handle) -> ClInt;
    clEnqueueReadImage: fn(Handle, Handle, u32, *const usize, *const usize, usize, usize, *mut c_void, u32, *const Handle, *mut Handle) -> ClInt;
    clEnqueueWriteImage: fn(Handle, Handle, u32, *const usize, *const usize, usize, usize, *const c_void, u32, *const Handle, *mut Handle) -> ClInt;
    clEnqueueCopyImage: fn(Handle, Handle, Handle, *const usize, *const usize, *const usize, u32, *const Handle, *mut Handle) -> ClInt;
    clEnqueueCopyImageToBuffer: fn(Handle, Handle, Handle, *const usize, *const usize, usize, u32, *const Handle, *mut Handle) -> ClInt;
    clEnqueueCopyBufferToImage: fn(Handle, Handle, Handle, usize, *const usize, *const usize, u32, *const Handle, *mut Handle) -> ClInt;
    clEnqueueFillImage: fn(Handle, Handle, *const c_void, *const usize, *const usize, u32, *const Handle, *mut Handle) -> ClInt;
}

/// `cl_image_desc` of OpenCL 1.2.
#[repr(C)]
pub struct ImageDesc {
    pub image_type: u32,
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub array_size: usize,
    pub row_pitch: usize,
    pub slice_pitch: usize,
    pub num_mip_levels: u32,
    pub num_samples: u32,
    pub buffer: Handle,
}

impl Api {
    /// Opens the OpenCL library `name` (for example `libOpenCL.so.1`) and resolves every
    /// entry point. The library stays loaded for the life of the process.
    pub fn load(name: &str) -> Result<Api, String> {
        let cname = CString::new(name).map_err(|_| format!("bad library name {name:?}"))?;
        // SAFETY: dlopen with a valid C string; the handle is never closed, so the
        // resolved function pointers stay valid for the life of the process.
        unsafe {
            let lib = libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if lib.is_null() {
                let err = libc::dlerror();
                let msg = if err.is_null() {
                    "unknown error".to_string()
                } else {
                    CStr::from_ptr(err).to_string_lossy().into_owned()
                };
                return Err(format!("cannot load OpenCL library {name}: {msg}"));
            }
            Api::resolve(lib)
        }
    }
}

/// Runs an OpenCL info query twice (size, then data) and returns the raw bytes, or the
/// OpenCL error. `size_max` bounds the allocation a runtime may ask for.
pub fn info_bytes(size_max: usize, query: &mut InfoFn<'_>) -> Result<Vec<u8>, ClInt> {
    let mut size = 0usize;
    let rc = query(0, std::ptr::null_mut(), &mut size);
    if rc != CL_SUCCESS {
        return Err(rc);
    }
    if size > size_max {
        return Err(crate::cl::CL_OUT_OF_RESOURCES);
    }
    let mut buf = vec![0u8; size];
    if size > 0 {
        let rc = query(size, buf.as_mut_ptr().cast(), std::ptr::null_mut());
        if rc != CL_SUCCESS {
            return Err(rc);
        }
    }
    Ok(buf)
}
