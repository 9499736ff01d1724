//! Built OpenCL programs, by content hash: in memory for every slot of the device, and
//! on disk as program binaries so that a restart does not compile again.
//!
//! The key digests what decides the binary: the platform and driver versions, the
//! device, the build options, whether the manifest gives source or a binary, and its
//! bytes. A binary on disk that the runtime refuses is rebuilt from the manifest and
//! overwritten. The memory cache holds at most `opencl_program_cache_entries_max`
//! programs; past it, a program no slot uses any more is dropped.

use std::collections::HashMap;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use manifest::{Manifest, ProgramKind};
use ocl_remote::cl;
use ocl_remote::ffi::info_bytes;
use sha2::{Digest, Sha256};

use super::{cl_error, Cl, Raw};
use crate::device::DevicesSection;

/// `CL_PROGRAM_BUILD_LOG`.
const CL_PROGRAM_BUILD_LOG: u32 = 0x1183;
/// Bytes of a build log quoted in an error.
const BUILD_LOG_BYTES_MAX: usize = 4096;
/// Largest program binary read from disk or the runtime.
const BINARY_BYTES_MAX: usize = 256 << 20;

/// A built program of the device.
pub struct Program {
    cl: Arc<Cl>,
    pub raw: Raw,
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by `Programs::build` and is released once.
        unsafe { (self.cl.api.clReleaseProgram)(self.raw.0) };
    }
}

impl Program {
    /// Whether the manifest's kernel is in the program.
    pub fn check_kernel(&self, m: &Manifest) -> Result<(), String> {
        let kernel = self.kernel(m)?;
        // SAFETY: the kernel was just created.
        unsafe { (self.cl.api.clReleaseKernel)(kernel.0) };
        Ok(())
    }

    /// A new kernel object of the manifest's kernel.
    pub fn kernel(&self, m: &Manifest) -> Result<Raw, String> {
        let name = &m.opencl.as_ref().expect("an OpenCL manifest").kernel;
        let cname = CString::new(name.as_str()).map_err(|_| "kernel name has a NUL".to_string())?;
        let mut rc = 0;
        // SAFETY: a built program and a C string.
        let kernel = unsafe { (self.cl.api.clCreateKernel)(self.raw.0, cname.as_ptr(), &mut rc) };
        if kernel.is_null() || rc != cl::CL_SUCCESS {
            return Err(if rc == cl::CL_INVALID_KERNEL_NAME {
                format!("the program has no kernel named `{name}`")
            } else {
                cl_error("clCreateKernel", rc)
            });
        }
        Ok(Raw(kernel))
    }
}

/// A program found or built, and how.
pub struct Built {
    pub program: Arc<Program>,
    /// Found in memory or on disk rather than compiled from the manifest.
    pub cached: bool,
    pub took: Duration,
}

pub struct Programs {
    cl: Arc<Cl>,
    memory: Mutex<HashMap<String, Arc<Program>>>,
    entries_max: usize,
    dir: Option<PathBuf>,
}

impl Programs {
    pub fn new(cl: Arc<Cl>, config: &DevicesSection) -> Programs {
        let dir = config.opencl_program_dir.clone().or_else(default_dir);
        if let Some(dir) = &dir {
            if let Err(e) = std::fs::create_dir_all(dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "no OpenCL program cache on disk");
            }
        }
        Programs {
            cl,
            memory: Mutex::new(HashMap::new()),
            entries_max: config.opencl_program_cache_entries_max.max(1),
            dir,
        }
    }

    fn key(&self, m: &Manifest) -> String {
        let o = m.opencl.as_ref().expect("an OpenCL manifest");
        let mut h = Sha256::new();
        for part in [
            self.cl.platform_name.as_bytes(),
            self.cl.device_name.as_bytes(),
            self.cl.versions.as_bytes(),
            o.build_options.as_bytes(),
            match o.kind {
                ProgramKind::Source => b"source",
                ProgramKind::Binary => b"binary",
            },
            &o.program,
        ] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The program of manifest `m`, built if no cache has it.
    pub fn get_or_build(&self, m: &Manifest) -> Result<Built, String> {
        let started = Instant::now();
        let key = self.key(m);
        // Builds are rare (start, reconfiguration); holding the lock through one keeps
        // two slots loading the same accelerator from compiling it twice.
        let mut memory = self.memory.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = memory.get(&key) {
            return Ok(Built {
                program: Arc::clone(p),
                cached: true,
                took: started.elapsed(),
            });
        }
        let o = m.opencl.as_ref().expect("an OpenCL manifest");
        let path = self.dir.as_ref().map(|d| d.join(format!("{key}.bin")));
        let from_disk = path
            .as_ref()
            .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() <= BINARY_BYTES_MAX as u64))
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|binary| self.build(&binary, true, &o.build_options).ok());
        let cached = from_disk.is_some();
        let program = match from_disk {
            Some(p) => p,
            None => {
                let p = self.build(&o.program, o.kind == ProgramKind::Binary, &o.build_options)?;
                if let Some(path) = &path {
                    self.save(&p, path);
                }
                p
            }
        };
        let program = Arc::new(program);
        if memory.len() >= self.entries_max {
            memory.retain(|_, p| Arc::strong_count(p) > 1);
        }
        if memory.len() < self.entries_max {
            memory.insert(key, Arc::clone(&program));
        }
        Ok(Built {
            program,
            cached,
            took: started.elapsed(),
        })
    }

    /// Builds a program from OpenCL C source or from a binary.
    fn build(&self, bytes: &[u8], binary: bool, options: &str) -> Result<Program, String> {
        let api = &self.cl.api;
        let device = self.cl.device.0;
        let mut rc = 0;
        let raw = if binary {
            let (len, ptr) = (bytes.len(), bytes.as_ptr());
            let mut status = 0;
            // SAFETY: one device, one binary of `len` bytes that outlives the call.
            unsafe {
                (api.clCreateProgramWithBinary)(
                    self.cl.context.0,
                    1,
                    &device,
                    &len,
                    &ptr,
                    &mut status,
                    &mut rc,
                )
            }
        } else {
            let (len, ptr) = (bytes.len(), bytes.as_ptr().cast());
            // SAFETY: one source string of `len` bytes that outlives the call.
            unsafe { (api.clCreateProgramWithSource)(self.cl.context.0, 1, &ptr, &len, &mut rc) }
        };
        if raw.is_null() || rc != cl::CL_SUCCESS {
            return Err(if binary {
                format!(
                    "the runtime refuses the program binary ({})",
                    cl_error("clCreateProgramWithBinary", rc)
                )
            } else {
                cl_error("clCreateProgramWithSource", rc)
            });
        }
        let program = Program {
            cl: Arc::clone(&self.cl),
            raw: Raw(raw),
        };
        let options = CString::new(options).map_err(|_| "build_options has a NUL".to_string())?;
        // SAFETY: a program of this context, its one device, a C string, no callback.
        let rc = unsafe {
            (api.clBuildProgram)(
                raw,
                1,
                &device,
                options.as_ptr(),
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        if rc != cl::CL_SUCCESS {
            let log = info_bytes(BUILD_LOG_BYTES_MAX * 16, &mut |s, p, r| unsafe {
                // SAFETY: the program and device of this build.
                (api.clGetProgramBuildInfo)(raw, device, CL_PROGRAM_BUILD_LOG, s, p, r)
            })
            .unwrap_or_default();
            let log = String::from_utf8_lossy(&log);
            let log = log.trim_end_matches('\0').trim();
            let cut = log
                .char_indices()
                .nth(BUILD_LOG_BYTES_MAX)
                .map_or(log.len(), |(i, _)| i);
            return Err(format!(
                "the program does not build ({}): {}",
                cl_error("clBuildProgram", rc),
                &log[..cut]
            ));
        }
        Ok(program)
    }

    /// Writes `p`'s binary to `path` (through a temporary file, so a crash never
    /// leaves half a binary); a failure only costs a rebuild next time.
    fn save(&self, p: &Program, path: &std::path::Path) {
        let Some(binary) = self.binary(p) else {
            return;
        };
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let written = std::fs::write(&tmp, &binary).and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(path = %path.display(), error = %e, "cannot cache an OpenCL program binary");
        }
    }

    /// The device binary of a built program, if the runtime gives one.
    fn binary(&self, p: &Program) -> Option<Vec<u8>> {
        let api = &self.cl.api;
        let mut size = 0usize;
        // SAFETY: one device, so one size.
        let rc = unsafe {
            (api.clGetProgramInfo)(
                p.raw.0,
                cl::CL_PROGRAM_BINARY_SIZES,
                std::mem::size_of::<usize>(),
                (&mut size as *mut usize).cast(),
                std::ptr::null_mut(),
            )
        };
        if rc != cl::CL_SUCCESS || size == 0 || size > BINARY_BYTES_MAX {
            return None;
        }
        let mut binary = vec![0u8; size];
        let mut ptr = binary.as_mut_ptr();
        // SAFETY: one pointer to `size` bytes, as the runtime reported.
        let rc = unsafe {
            (api.clGetProgramInfo)(
                p.raw.0,
                cl::CL_PROGRAM_BINARIES,
                std::mem::size_of::<*mut u8>(),
                (&mut ptr as *mut *mut u8).cast(),
                std::ptr::null_mut(),
            )
        };
        (rc == cl::CL_SUCCESS).then_some(binary)
    }
}

/// `$XDG_CACHE_HOME/netaccel/opencl-programs`, or `$HOME/.cache/…`.
fn default_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("netaccel").join("opencl-programs"))
}
