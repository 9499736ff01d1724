//! An accelerator loaded into one OpenCL slot: its command queue, kernel object and
//! payload and output buffers, made at load and reused by every call.
//!
//! A call, in the device's turn: write the payload (non-blocking), set the arguments,
//! run the kernel over the manifest's global (and local) size, read the output
//! (blocking, which on the in-order queue also waits for the rest). The buffers grow
//! to the largest call seen, by powers of two, and are never shrunk or reallocated
//! otherwise; the sizes are evaluated into arrays on the stack; the output goes into
//! the caller's buffer. Nothing is allocated per call once the slot has warmed up.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use accel::{CallError, ParamBlock};
use manifest::{Arg, Manifest, ManifestAccelerator};
use ocl_remote::cl;

use super::programs::Program;
use super::{builtins, cl_error, Cl, Raw};
use crate::device::{Loaded, Ran};

/// Smallest buffer made (OpenCL refuses empty ones).
const BUFFER_BYTES_MIN: usize = 4096;
/// Largest output a call may ask for (its device buffer is made to match).
const OUTPUT_BYTES_MAX: usize = 256 << 20;

/// A device buffer and its size.
struct Buffer {
    raw: Raw,
    bytes: usize,
}

/// The slot's OpenCL objects, used by one call at a time.
struct SlotObjects {
    queue: Raw,
    kernel: Raw,
    input: Option<Buffer>,
    output: Option<Buffer>,
}

pub struct OpenClImage {
    cl: Arc<Cl>,
    /// Kept alive while the kernel of it is.
    _program: Arc<Program>,
    manifest: Arc<Manifest>,
    /// The manifest's size rules, evaluated per call.
    sizes: ManifestAccelerator,
    /// A built-in (whose output [`builtins::post_check`] checks).
    builtin: bool,
    objects: Mutex<SlotObjects>,
}

impl OpenClImage {
    pub fn new(
        cl: Arc<Cl>,
        program: Arc<Program>,
        manifest: Arc<Manifest>,
        id: u16,
        builtin: bool,
    ) -> Result<OpenClImage, String> {
        let kernel = program.kernel(&manifest)?;
        let mut rc = 0;
        // SAFETY: the device's context and device; no properties (in order).
        let queue = unsafe { (cl.api.clCreateCommandQueue)(cl.context.0, cl.device.0, 0, &mut rc) };
        if queue.is_null() || rc != cl::CL_SUCCESS {
            // SAFETY: the kernel was just created.
            unsafe { (cl.api.clReleaseKernel)(kernel.0) };
            return Err(cl_error("clCreateCommandQueue", rc));
        }
        Ok(OpenClImage {
            sizes: ManifestAccelerator::new(Arc::clone(&manifest), id),
            cl,
            _program: program,
            manifest,
            builtin,
            objects: Mutex::new(SlotObjects {
                queue: Raw(queue),
                kernel,
                input: None,
                output: None,
            }),
        })
    }

    /// `buffer`, grown to hold `bytes`.
    fn ensure(
        &self,
        buffer: &mut Option<Buffer>,
        bytes: usize,
        flags: u64,
    ) -> Result<Raw, CallError> {
        if let Some(b) = buffer {
            if b.bytes >= bytes {
                return Ok(b.raw);
            }
        }
        let size = bytes.max(BUFFER_BYTES_MIN).next_power_of_two();
        if let Some(old) = buffer.take() {
            // SAFETY: the buffer is the slot's and no command uses it (the last call
            // ended with a blocking read or a finish).
            unsafe { (self.cl.api.clReleaseMemObject)(old.raw.0) };
        }
        let mut rc = 0;
        // SAFETY: the device's context; no host pointer.
        let raw = unsafe {
            (self.cl.api.clCreateBuffer)(
                self.cl.context.0,
                flags,
                size,
                std::ptr::null_mut(),
                &mut rc,
            )
        };
        if raw.is_null() || rc != cl::CL_SUCCESS {
            return Err(internal(cl_error("clCreateBuffer", rc)));
        }
        *buffer = Some(Buffer {
            raw: Raw(raw),
            bytes: size,
        });
        Ok(Raw(raw))
    }

    /// Runs the kernel on the device (called in the device's turn).
    fn enqueue(
        &self,
        params: &ParamBlock,
        input: &[u8],
        out: &mut Vec<u8>,
        out_len: usize,
        sizes: &Sizes,
    ) -> Result<(), CallError> {
        let api = &self.cl.api;
        let mut o = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        let in_buf = self.ensure(&mut o.input, input.len(), cl::CL_MEM_READ_ONLY)?;
        let out_buf = self.ensure(&mut o.output, out_len, cl::CL_MEM_WRITE_ONLY)?;
        let (queue, kernel) = (o.queue.0, o.kernel.0);
        if !input.is_empty() {
            // SAFETY: the slot's queue and buffer, large enough; `input` outlives the
            // write, which the blocking read or the finish below waits for.
            let rc = unsafe {
                (api.clEnqueueWriteBuffer)(
                    queue,
                    in_buf.0,
                    0,
                    0,
                    input.len(),
                    input.as_ptr().cast(),
                    0,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                )
            };
            check(rc, "clEnqueueWriteBuffer")?;
        }
        let opencl = self.manifest.opencl.as_ref().expect("an OpenCL manifest");
        for (index, arg) in opencl.args.iter().enumerate() {
            let index = index as u32;
            let handle = |b: &Raw| {
                (
                    std::mem::size_of::<*mut c_void>(),
                    (&b.0 as *const *mut c_void).cast::<c_void>(),
                )
            };
            let payload_len = input.len() as u32;
            let output_len = out_len as u32;
            let (size, value): (usize, *const c_void) = match arg {
                Arg::Payload => handle(&in_buf),
                Arg::Output => handle(&out_buf),
                Arg::PayloadLen => (4, (&payload_len as *const u32).cast()),
                Arg::OutputLen => (4, (&output_len as *const u32).cast()),
                Arg::Param(i) => {
                    let spec = &self.manifest.params[*i];
                    (spec.ty.size(), params[spec.range()].as_ptr().cast())
                }
                Arg::Local(_) => (sizes.locals[index as usize].max(1), std::ptr::null()),
            };
            // SAFETY: the slot's kernel; `value` points at `size` bytes that live
            // until the call returns (OpenCL copies them), or is null for local memory.
            let rc = unsafe { (api.clSetKernelArg)(kernel, index, size, value) };
            check(rc, "clSetKernelArg")?;
        }
        let dims = sizes.dims;
        if sizes.global[..dims].iter().all(|&g| g > 0) {
            let local = if sizes.has_local {
                sizes.local.as_ptr()
            } else {
                std::ptr::null()
            };
            // SAFETY: the slot's queue and kernel, `dims` sizes in each array.
            let rc = unsafe {
                (api.clEnqueueNDRangeKernel)(
                    queue,
                    kernel,
                    dims as u32,
                    std::ptr::null(),
                    sizes.global.as_ptr(),
                    local,
                    0,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                )
            };
            check(rc, "clEnqueueNDRangeKernel")?;
        }
        out.clear();
        if out_len == 0 {
            // SAFETY: the slot's queue.
            return check(unsafe { (api.clFinish)(queue) }, "clFinish");
        }
        out.reserve(out_len);
        // SAFETY: blocking read of `out_len` bytes into the spare capacity just
        // reserved; the length is set only once the runtime wrote them all.
        let rc = unsafe {
            (api.clEnqueueReadBuffer)(
                queue,
                out_buf.0,
                1,
                0,
                out_len,
                out.as_mut_ptr().cast(),
                0,
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        check(rc, "clEnqueueReadBuffer")?;
        // SAFETY: the blocking read filled the first `out_len` bytes.
        unsafe { out.set_len(out_len) };
        Ok(())
    }
}

/// The work sizes and local-memory argument sizes of one call.
struct Sizes {
    dims: usize,
    global: [usize; 3],
    local: [usize; 3],
    has_local: bool,
    /// By argument index; only `Arg::Local` entries are used.
    locals: [usize; manifest::ARGS_MAX],
}

fn internal(message: String) -> CallError {
    CallError::Internal(message)
}

fn check(rc: i32, call: &str) -> Result<(), CallError> {
    if rc == cl::CL_SUCCESS {
        Ok(())
    } else {
        Err(internal(cl_error(call, rc)))
    }
}

impl Loaded for OpenClImage {
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<Ran, CallError> {
        let len = input.len();
        let out_len = self.sizes.output_len(params, len)?;
        if out_len > OUTPUT_BYTES_MAX {
            return Err(CallError::BadRequest(format!(
                "the output would be {out_len} bytes; an OpenCL slot returns at most {OUTPUT_BYTES_MAX}"
            )));
        }
        let opencl = self.manifest.opencl.as_ref().expect("an OpenCL manifest");
        let mut sizes = Sizes {
            dims: opencl.global_size.len(),
            global: [1; 3],
            local: [1; 3],
            has_local: !opencl.local_size.is_empty(),
            locals: [0; manifest::ARGS_MAX],
        };
        for (i, e) in opencl.global_size.iter().enumerate() {
            sizes.global[i] = self.sizes.size("global_size", e, params, len, None)?;
        }
        for (i, e) in opencl.local_size.iter().enumerate() {
            sizes.local[i] = self.sizes.size("local_size", e, params, len, None)?;
        }
        for (i, arg) in opencl.args.iter().enumerate() {
            if let Arg::Local(e) = arg {
                sizes.locals[i] =
                    self.sizes
                        .size("a local argument", e, params, len, Some(out_len))?;
            }
        }
        if let Some(cache) = &self.cl.runtime_cache {
            cache.check().map_err(internal)?;
        }
        self.cl
            .lane
            .run(|| self.enqueue(params, input, out, out_len, &sizes))?;
        if self.builtin {
            builtins::post_check(&self.manifest.name, input, out)?;
        }
        Ok(Ran::default())
    }

    fn inline_ok(&self) -> bool {
        self.cl.lane.is_idle()
    }
}

impl Drop for OpenClImage {
    fn drop(&mut self) {
        let o = self.objects.get_mut().unwrap_or_else(|p| p.into_inner());
        let api = &self.cl.api;
        // SAFETY: the slot's objects, released once; no call is running (the image is
        // dropped after the slot swapped it out and its last call ended).
        unsafe {
            (api.clFinish)(o.queue.0);
            for b in [o.input.take(), o.output.take()].into_iter().flatten() {
                (api.clReleaseMemObject)(b.raw.0);
            }
            (api.clReleaseKernel)(o.kernel.0);
            (api.clReleaseCommandQueue)(o.queue.0);
        }
    }
}
