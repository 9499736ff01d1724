//! The program calls of a session: programs from source and from binaries, builds (through the node's
//! program cache, [`crate::service::programs`]), compiles, links, and the binaries a
//! client asks for.

use std::ffi::{c_char, CString};
use std::sync::Arc;

use super::objects::{Context, Program, ProgramSource};
use super::{status, Answer, Reply, Session};
use crate::cl::{self, ClInt};
use crate::ffi::{info_bytes, Handle};
use crate::proto;
use crate::service::lock;
use crate::service::{programs, Real, INFO_BYTES_MAX};

/// Build options as a C string (NUL bytes dropped).
fn c_options(options: &[u8]) -> CString {
    CString::new(
        options
            .iter()
            .copied()
            .filter(|b| *b != 0)
            .collect::<Vec<u8>>(),
    )
    .expect("NULs removed")
}

/// The options as the runtime gets them: NULL when there are none, as the application
/// passed them (PoCL keeps kernel argument information for a build without options,
/// not for one with an empty string).
fn options_ptr(options: &CString) -> *const c_char {
    if options.as_bytes().is_empty() {
        std::ptr::null()
    } else {
        options.as_ptr()
    }
}

/// `error` if the last word of `options` is `-D` or `-I`, an option without its
/// argument: PoCL 3.1 reads past the end of such options and crashes the process it
/// runs in (natively too; here the node's, or a shared runtime process with every
/// client's session), so the node refuses them as OpenCL does options it cannot take.
fn refuse_missing_argument(options: &[u8], error: ClInt) -> Result<(), ClInt> {
    let last = options
        .split(|b| b.is_ascii_whitespace() || *b == 0)
        .rfind(|word| !word.is_empty());
    match last {
        Some(b"-D" | b"-I") => Err(error),
        _ => Ok(()),
    }
}

/// The client's build or compile `options` as the runtime gets them: without NUL bytes.
fn runtime_options(options: &[u8]) -> Vec<u8> {
    options.iter().copied().filter(|b| *b != 0).collect()
}

/// The array's pointer, or null for an empty array (as OpenCL wants for "none").
fn nonempty_ptr<T>(v: &[T]) -> *const T {
    if v.is_empty() {
        std::ptr::null()
    } else {
        v.as_ptr()
    }
}

impl Session<'_> {
    pub(super) fn create_program_with_source(
        &mut self,
        id: u64,
        context: u64,
        source: &[u8],
    ) -> Answer {
        let api = &self.shared.runtime.api;
        let ctx = self.objects.get::<Context>(context)?;
        // The runtime reads a source up to its first NUL (and a length of 0 as "up to
        // the first NUL", past the message). A source with nothing before its first NUL
        // aborted PoCL 3.1 once a build's options failed clang (`-cl-std=`:
        // `build_program_compute_hash` asserts `source_len > 0`), taking every
        // client's session with it (found by the `session` fuzz target). Refused, as
        // OpenCL refuses a program without source.
        if source.iter().position(|&b| b == 0).unwrap_or(source.len()) == 0 {
            return Err(cl::CL_INVALID_VALUE);
        }
        let hash = programs::source_hash(source);
        let devices = ctx.devices.clone();
        let ctx = Arc::clone(&ctx.real);
        let ptr = source.as_ptr().cast();
        let len = source.len();
        self.create(
            id,
            // SAFETY: valid context; one string of `len` bytes.
            |e| unsafe { (api.clCreateProgramWithSource)(ctx.handle(), 1, &ptr, &len, e) },
            |raw| {
                let real = Real::new(raw, api.clReleaseProgram);
                let source = ProgramSource {
                    hash,
                    context: Arc::clone(&ctx),
                    devices,
                    program: Arc::clone(&real),
                };
                Program {
                    real,
                    source: Some(source),
                }
            },
        )
    }

    pub(super) fn create_program_with_binary(
        &mut self,
        id: u64,
        context: u64,
        binaries: Vec<(u32, &[u8])>,
    ) -> Result<Reply, ClInt> {
        let api = &self.shared.runtime.api;
        let ctx = self.objects.get::<Context>(context)?;
        if binaries.is_empty() || binaries.iter().any(|(d, _)| !ctx.devices.contains(d)) {
            return Err(cl::CL_INVALID_DEVICE);
        }
        let ctx = Arc::clone(&ctx.real);
        let devs: Vec<u32> = binaries.iter().map(|(d, _)| *d).collect();
        let handles = self.device_handles(&devs)?;
        let lens: Vec<usize> = binaries.iter().map(|(_, b)| b.len()).collect();
        let ptrs: Vec<*const u8> = binaries.iter().map(|(_, b)| b.as_ptr()).collect();
        let mut status = vec![cl::CL_SUCCESS; binaries.len()];
        let status_ptr = status.as_mut_ptr();
        let created = self.create(
            id,
            // SAFETY: arrays of equal length `handles.len()`.
            |e| unsafe {
                (api.clCreateProgramWithBinary)(
                    ctx.handle(),
                    handles.len() as u32,
                    handles.as_ptr(),
                    lens.as_ptr(),
                    ptrs.as_ptr(),
                    status_ptr,
                    e,
                )
            },
            |raw| Program {
                real: Real::new(raw, api.clReleaseProgram),
                source: None,
            },
        );
        // The status of each binary goes back also when the program was not created.
        let mut payload = Vec::new();
        for s in status {
            proto::put_i32(&mut payload, s);
        }
        Ok((created.err().unwrap_or(cl::CL_SUCCESS), payload))
    }

    /// `CL_PROGRAM_BINARIES` is an array of pointers, so it is answered as a list of
    /// byte strings (`u32` count, then `u32` length + bytes each).
    pub(super) fn program_binaries(&self, program: Handle) -> Answer {
        let bins = self.raw_binaries(program)?;
        let mut out = Vec::new();
        proto::put_u32(&mut out, bins.len() as u32);
        for b in &bins {
            proto::put_bytes(&mut out, b);
        }
        Ok(out)
    }

    /// Whether the runtime may generate the code of every kernel of `program` without
    /// putting the node at risk: no kernel name is longer than `kernel_name_bytes_max`.
    /// A program whose kernel names cannot be read (not built) has no code to generate.
    pub(super) fn code_generation_safe(&self, program: Handle) -> bool {
        let api = &self.shared.runtime.api;
        // SAFETY: valid program handle and buffers.
        let names = info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
            (api.clGetProgramInfo)(program, cl::CL_PROGRAM_KERNEL_NAMES, s, b, r)
        });
        let longest = names.map_or(0, |names| {
            names
                .split(|b| *b == b';' || *b == 0)
                .map(<[u8]>::len)
                .max()
                .unwrap_or(0)
        });
        longest <= self.shared.config.kernel_name_bytes_max
    }

    /// The program's binaries, one per device of the program.
    fn raw_binaries(&self, program: Handle) -> Result<Vec<Vec<u8>>, ClInt> {
        let api = &self.shared.runtime.api;
        // SAFETY: valid program handle and buffers.
        let sizes = info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
            (api.clGetProgramInfo)(program, cl::CL_PROGRAM_BINARY_SIZES, s, b, r)
        })?;
        let sizes: Vec<usize> = sizes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")) as usize)
            .collect();
        if sizes.iter().sum::<usize>() > INFO_BYTES_MAX {
            return Err(cl::CL_OUT_OF_RESOURCES);
        }
        let mut bins: Vec<Vec<u8>> = sizes.iter().map(|n| vec![0u8; *n]).collect();
        let mut ptrs: Vec<*mut u8> = bins.iter_mut().map(|b| b.as_mut_ptr()).collect();
        // SAFETY: one pointer per device, each to a buffer of the size the runtime gave.
        let rc = unsafe {
            (api.clGetProgramInfo)(
                program,
                cl::CL_PROGRAM_BINARIES,
                ptrs.len() * std::mem::size_of::<*mut u8>(),
                ptrs.as_mut_ptr().cast(),
                std::ptr::null_mut(),
            )
        };
        if rc != cl::CL_SUCCESS {
            return Err(rc);
        }
        Ok(bins)
    }

    pub(super) fn build_program(
        &mut self,
        program: u64,
        devices: Vec<u32>,
        options: &[u8],
    ) -> Answer {
        let api = &self.shared.runtime.api;
        refuse_missing_argument(options, cl::CL_INVALID_BUILD_OPTIONS)?;
        let program_obj = self.objects.get::<Program>(program)?;
        let (real, source) = (Arc::clone(&program_obj.real), program_obj.source.clone());
        let devs = self.device_handles(&devices)?;
        let options = runtime_options(options);
        // Only whole-context builds of source programs are cached: then the binaries
        // are exactly one per context device.
        let cache_key = source
            .as_ref()
            .filter(|s| devices.is_empty() || devices == s.devices)
            .map(|s| programs::key(&s.hash, &options, &s.devices));
        if let (Some(key), Some(src)) = (&cache_key, &source) {
            if self.build_from_cache(program, key, src, &options) {
                return Ok(Vec::new());
            }
        }
        // Built from the client's source, not from binaries an earlier cache hit loaded.
        let real = source.as_ref().map_or(real, |s| Arc::clone(&s.program));
        self.objects.insert(
            program,
            Program {
                real: Arc::clone(&real),
                source: source.clone(),
            },
        );
        let options = c_options(&options);
        let dev_ptr = if devs.is_empty() {
            std::ptr::null()
        } else {
            devs.as_ptr()
        };
        // SAFETY: valid program, device list and C string; no callback.
        let rc = unsafe {
            (api.clBuildProgram)(
                real.handle(),
                devs.len() as u32,
                dev_ptr,
                options_ptr(&options),
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        if rc == cl::CL_SUCCESS {
            if let Some(key) = cache_key {
                self.shared.metrics.program_cache_misses.inc();
                self.cache_binaries(key, real.handle());
            }
        }
        status(rc)
    }

    /// Builds `program` (of source `src`) from the binaries the program cache holds
    /// under `key`, if any, and puts it in the table; whether it did.
    fn build_from_cache(
        &mut self,
        program: u64,
        key: &programs::Key,
        src: &ProgramSource,
        options: &[u8],
    ) -> bool {
        let cached = lock(&self.shared.programs).get(key);
        let Some(binaries) = cached else {
            return false;
        };
        let Some(built) = self.build_from_binaries(src, &binaries, options) else {
            return false;
        };
        self.shared.metrics.program_cache_hits.inc();
        self.objects.insert(
            program,
            Program {
                real: built,
                source: Some(src.clone()),
            },
        );
        true
    }

    /// Puts the binaries of the program just built (`program`) in the program cache
    /// under `key`, when they can be generated safely and none is empty.
    fn cache_binaries(&self, key: programs::Key, program: Handle) {
        let safe = self.code_generation_safe(program);
        if let Some(Ok(bins)) = safe.then(|| self.raw_binaries(program)) {
            if bins.iter().all(|b| !b.is_empty()) {
                lock(&self.shared.programs).insert(key, bins);
            }
        }
    }

    /// `clCompileProgram` on one of the client's programs, with other programs of the
    /// client as embedded headers. Compiled programs are not cached (the cache holds
    /// executables); the program keeps its source for `CL_PROGRAM_SOURCE`.
    pub(super) fn compile_program(
        &mut self,
        program: u64,
        devices: Vec<u32>,
        options: &[u8],
        headers: Vec<(u64, &[u8])>,
    ) -> Answer {
        let api = &self.shared.runtime.api;
        refuse_missing_argument(options, cl::CL_INVALID_COMPILER_OPTIONS)?;
        // Only programs made from source compile (a binary has nothing to compile).
        let Some(source) = self.objects.get::<Program>(program)?.source.clone() else {
            return Err(cl::CL_INVALID_OPERATION);
        };
        let options = runtime_options(options);
        let real = Arc::clone(&source.program);
        let devs = self.device_handles(&devices)?;
        let ids: Vec<u64> = headers.iter().map(|(id, _)| *id).collect();
        let header_handles = self.header_handles(&ids)?;
        // The compiled program replaces an executable an earlier cache hit loaded.
        self.objects.insert(
            program,
            Program {
                real: Arc::clone(&real),
                source: Some(source),
            },
        );
        let Ok(header_names) = headers
            .into_iter()
            .map(|(_, name)| CString::new(name))
            .collect::<Result<Vec<_>, _>>()
        else {
            return Err(cl::CL_INVALID_VALUE);
        };
        let name_ptrs: Vec<*const c_char> = header_names.iter().map(|n| n.as_ptr()).collect();
        let options = c_options(&options);
        // SAFETY: valid program, device, header handles (held in the table for the
        // call) and C strings; no callback.
        let rc = unsafe {
            (api.clCompileProgram)(
                real.handle(),
                devs.len() as u32,
                nonempty_ptr(&devs),
                options_ptr(&options),
                header_handles.len() as u32,
                nonempty_ptr(&header_handles),
                nonempty_ptr(&name_ptrs),
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        status(rc)
    }

    /// The runtime's source programs of the client's programs `ids`, to be embedded as
    /// headers: `CL_INVALID_PROGRAM` if one is not a program of this client,
    /// `CL_INVALID_OPERATION` if one was not made from source (a runtime reads a
    /// header's source and may crash on a program that has none).
    fn header_handles(&self, ids: &[u64]) -> Result<Vec<Handle>, ClInt> {
        ids.iter()
            .map(|id| match &self.objects.get::<Program>(*id)?.source {
                Some(s) => Ok(s.program.handle()),
                None => Err(cl::CL_INVALID_OPERATION),
            })
            .collect()
    }

    /// The real handles of the client's programs `ids`; `CL_INVALID_PROGRAM` if one is
    /// not a program of this client. The handles stay valid while the table holds them.
    fn program_handles(&self, ids: &[u64]) -> Result<Vec<Handle>, ClInt> {
        ids.iter()
            .map(|id| self.objects.get::<Program>(*id).map(|p| p.real.handle()))
            .collect()
    }

    /// `clLinkProgram`: a new program `id` from the client's compiled programs.
    pub(super) fn link_program(
        &mut self,
        id: u64,
        context: u64,
        devices: Vec<u32>,
        options: &[u8],
        inputs: Vec<u64>,
    ) -> Result<Reply, ClInt> {
        let api = &self.shared.runtime.api;
        refuse_missing_argument(options, cl::CL_INVALID_LINKER_OPTIONS)?;
        let context = self.objects.get::<Context>(context)?;
        let ctx = Arc::clone(&context.real);
        let link_devices = if devices.is_empty() {
            context.devices.clone()
        } else {
            devices.clone()
        };
        let devs = self.device_handles(&devices)?;
        let input_handles = self.program_handles(&inputs)?;
        self.linkable(&input_handles, &self.device_handles(&link_devices)?)?;
        self.admit(id)?;
        let options = c_options(options);
        let mut rc = cl::CL_SUCCESS;
        // SAFETY: valid context, device and program handles and C string; no callback.
        let raw = unsafe {
            (api.clLinkProgram)(
                ctx.handle(),
                devs.len() as u32,
                nonempty_ptr(&devs),
                options_ptr(&options),
                input_handles.len() as u32,
                nonempty_ptr(&input_handles),
                std::ptr::null(),
                std::ptr::null_mut(),
                &mut rc,
            )
        };
        if raw.is_null() {
            return Err(if rc == cl::CL_SUCCESS {
                cl::CL_OUT_OF_RESOURCES
            } else {
                rc
            });
        }
        // A failed link may still return a program, whose build log says why: it is
        // kept under `id`, and the reply carries the error with the payload [1] ("the
        // program exists"), so the ICD hands it to the application with that error, as
        // OpenCL specifies.
        self.objects.insert(
            id,
            Program {
                real: Real::new(raw, api.clReleaseProgram),
                source: None,
            },
        );
        self.shared.metrics.client_objects.inc();
        Ok((rc, vec![1]))
    }

    /// Checks that every input of a link holds a compiled object or a library for every
    /// device of the link (`CL_INVALID_OPERATION` otherwise, as OpenCL 1.2 says): PoCL
    /// asserts, taking the node down, when an input's compile failed. An input created
    /// from the binary of a compiled object or library was never compiled here: its
    /// build status is `CL_BUILD_NONE`, and it is as linkable as natively.
    fn linkable(&self, inputs: &[Handle], devices: &[Handle]) -> Result<(), ClInt> {
        let api = &self.shared.runtime.api;
        let query = |program: Handle, device: Handle, param: u32| -> Result<u32, ClInt> {
            // SAFETY: valid program and device handles and buffers.
            let value = info_bytes(4, &mut |s, b, r| unsafe {
                (api.clGetProgramBuildInfo)(program, device, param, s, b, r)
            })?;
            let value: [u8; 4] = value.try_into().map_err(|_| cl::CL_INVALID_OPERATION)?;
            Ok(u32::from_ne_bytes(value))
        };
        for &program in inputs {
            for &device in devices {
                // A failed compile still reports a compiled-object binary type.
                let status = query(program, device, cl::CL_PROGRAM_BUILD_STATUS)? as ClInt;
                let kind = query(program, device, cl::CL_PROGRAM_BINARY_TYPE)?;
                let compiled = kind == cl::CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT
                    || kind == cl::CL_PROGRAM_BINARY_TYPE_LIBRARY;
                let ok = status == cl::CL_BUILD_SUCCESS || status == cl::CL_BUILD_NONE;
                if !ok || !compiled {
                    return Err(cl::CL_INVALID_OPERATION);
                }
            }
        }
        Ok(())
    }

    /// Creates and builds a program from cached binaries; `None` if anything fails (the
    /// caller then compiles the source as usual).
    fn build_from_binaries(
        &self,
        src: &ProgramSource,
        binaries: &[Vec<u8>],
        options: &[u8],
    ) -> Option<Arc<Real>> {
        let api = &self.shared.runtime.api;
        let handles = self.device_handles(&src.devices).ok()?;
        if handles.len() != binaries.len() {
            return None;
        }
        let lens: Vec<usize> = binaries.iter().map(Vec::len).collect();
        let ptrs: Vec<*const u8> = binaries.iter().map(|b| b.as_ptr()).collect();
        let mut rc = cl::CL_SUCCESS;
        // SAFETY: arrays of equal length; status array not requested.
        let raw = unsafe {
            (api.clCreateProgramWithBinary)(
                src.context.handle(),
                handles.len() as u32,
                handles.as_ptr(),
                lens.as_ptr(),
                ptrs.as_ptr(),
                std::ptr::null_mut(),
                &mut rc,
            )
        };
        if raw.is_null() || rc != cl::CL_SUCCESS {
            return None;
        }
        let real = Real::new(raw, api.clReleaseProgram);
        let options = CString::new(options.to_vec()).ok()?;
        // SAFETY: valid program and C string; no callback.
        let rc = unsafe {
            (api.clBuildProgram)(
                real.handle(),
                0,
                std::ptr::null(),
                options_ptr(&options),
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        (rc == cl::CL_SUCCESS).then_some(real)
    }
}
