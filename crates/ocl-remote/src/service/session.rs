//! One client connection: its object table (the client's resource pool), its open task,
//! and the control calls it makes.
//!
//! Ids name objects only within the connection that created them: another client's id,
//! an unknown id or an id of the wrong type gives the `CL_INVALID_*` code of the expected
//! type. Dropping the session (the client disconnected) drops the table, which releases
//! every OpenCL object; tasks already queued hold their own references.
//!
//! Here: the connection's request loop, the info queries and object creation. The
//! program calls are in `program`, the enqueued commands and their flush into a task in
//! `enqueue`; the bytes on the socket are [`super::connection`]'s.

mod enqueue;
mod program;

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::io::{self, BufReader};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::bodies::Body;
use super::connection::{read_frame, send_reply, ClientWriter};
use super::programs;
use super::task::{Cmd, Finished};
use super::{Real, Shared, INFO_BYTES_MAX};
use crate::cl::{self, ClInt};
use crate::ffi::{info_bytes, Handle};
use crate::poll::AdaptiveSpin;
use crate::proto::{self, HelloInfo, Request};
use crate::stream::Stream;

enum Obj {
    Context {
        real: Arc<Real>,
        devices: Vec<u32>,
    },
    Queue {
        real: Arc<Real>,
        device: u32,
    },
    Mem {
        real: Arc<Real>,
        size: u64,
        /// Bytes counted against `buffer_bytes_max`: the size, 0 for a sub-buffer.
        held: u64,
    },
    Program {
        real: Arc<Real>,
        /// For source programs: what the program cache needs to find or rebuild it.
        source: Option<ProgramSource>,
    },
    Kernel {
        real: Arc<Real>,
        /// The name is within `kernel_name_bytes_max`, so the runtime may generate its
        /// code (see [`super::ServiceConfig::kernel_name_bytes_max`]).
        launchable: bool,
    },
    Image {
        real: Arc<Real>,
        /// Bytes per pixel.
        elem: u64,
        /// Width, height (or array size of a 1D array), depth (or array size of a 2D
        /// array); 1 where the type has no such dimension.
        dims: [u64; 3],
        /// Bytes counted against `buffer_bytes_max`.
        held: u64,
    },
    Sampler {
        real: Arc<Real>,
    },
}

#[derive(Clone)]
struct ProgramSource {
    hash: programs::Key,
    context: Arc<Real>,
    devices: Vec<u32>,
    /// The runtime's program made from the client's source. After a program-cache hit
    /// the program's executable comes from cached binaries instead, and a binary program
    /// has no source: builds, compiles and headers keep working on this one.
    program: Arc<Real>,
}

struct Session<'s> {
    shared: &'s Shared,
    writer: ClientWriter,
    objects: HashMap<u64, Obj>,
    buffer_bytes: u64,
    open: Vec<Cmd>,
    open_bytes: u64,
    /// Set when the open task went over `pending_bytes_max`; the task then fails whole.
    open_overflow: bool,
    greeted: bool,
    /// The client runs on this host (same host id): buffers may live in shared memory.
    same_host: bool,
    /// The device of the client's last task, and whether that task is over.
    last_task: Option<(Option<u32>, Finished)>,
}

type Reply = (ClInt, Vec<u8>);

const CL_BUFFER_CREATE_TYPE_REGION: u32 = 0x1220;

fn ok(payload: Vec<u8>) -> Reply {
    (cl::CL_SUCCESS, payload)
}
fn err(code: ClInt) -> Reply {
    (code, Vec::new())
}
fn from_info(r: Result<Vec<u8>, ClInt>) -> Reply {
    match r {
        Ok(b) => ok(b),
        Err(e) => err(e),
    }
}

/// Serves one client until it disconnects or breaks the protocol.
pub(crate) fn serve(shared: Arc<Shared>, stream: Stream) {
    let _ = stream.set_nodelay();
    // Zero means no bound (the socket call takes no zero timeout).
    let stall = Some(shared.config.send_stall_max).filter(|d| !d.is_zero());
    if stream.set_write_timeout(stall).is_err() {
        return;
    }
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let writer: ClientWriter = Arc::new(Mutex::new(write_half));
    let connection = register(&shared, &stream);
    let over_limit = shared.clients.fetch_add(1, Ordering::SeqCst) >= shared.config.clients_max;
    shared.metrics.clients_connected.inc();
    let mut reader = BufReader::with_capacity(256 << 10, stream);
    if over_limit {
        refuse(&shared, &mut reader, &writer);
    } else {
        let mut session = Session {
            shared: &shared,
            writer: Arc::clone(&writer),
            objects: HashMap::new(),
            buffer_bytes: 0,
            open: Vec::new(),
            open_bytes: 0,
            open_overflow: false,
            greeted: false,
            same_host: false,
            last_task: None,
        };
        if let Err(e) = session.run(&mut reader) {
            if e.kind() != io::ErrorKind::UnexpectedEof {
                eprintln!("ocl-remote: client connection closed: {e}");
            }
        }
    }
    if let Some(id) = connection {
        shared
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }
    shared.clients.fetch_sub(1, Ordering::SeqCst);
    shared.metrics.clients_connected.dec();
}

/// Lists the connection among those a shutdown ends; a connection that arrives after
/// the shutdown began is ended at once. `None` when the socket cannot be shared (the
/// session then ends only when its client leaves).
fn register(shared: &Shared, stream: &Stream) -> Option<u64> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let handle = stream.try_clone().ok()?;
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut connections = shared.connections.lock().unwrap_or_else(|p| p.into_inner());
    if shared.shutdown.load(Ordering::SeqCst) {
        handle.shutdown_read();
    }
    connections.insert(id, handle);
    Some(id)
}

/// Answers the first request of a client over `clients_max` with `CL_OUT_OF_RESOURCES`.
fn refuse(shared: &Shared, reader: &mut BufReader<Stream>, writer: &ClientWriter) {
    let no_spin = AdaptiveSpin::new(std::time::Duration::ZERO);
    if let Ok((header, _)) = read_frame(shared, reader, &no_spin) {
        send_reply(writer, header.id, err(cl::CL_OUT_OF_RESOURCES));
    }
}

impl Drop for Session<'_> {
    /// The client is gone: everything it held is released (dropping the table releases
    /// the OpenCL objects; queued tasks keep their own references until they finish).
    fn drop(&mut self) {
        let m = &self.shared.metrics;
        m.client_buffer_bytes.dec_by(self.buffer_bytes as i64);
        m.client_objects.dec_by(self.objects.len() as i64);
    }
}

impl Session<'_> {
    fn run(&mut self, reader: &mut BufReader<Stream>) -> io::Result<()> {
        let spin = AdaptiveSpin::new(self.shared.config.poll_before_sleep);
        loop {
            let (header, body) = read_frame(self.shared, reader, &spin)?;
            let body = Arc::new(Body::new(body, &self.shared.bodies));
            let request = Request::decode(header.kind, &body)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if !self.greeted && !matches!(request, Request::Hello { .. }) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "first message must be Hello",
                ));
            }
            match request {
                Request::Release { id } => self.release(id),
                Request::CreateSubBuffer {
                    id,
                    parent,
                    flags,
                    offset,
                    size,
                } => {
                    let reply = self.create_sub_buffer(id, parent, flags, offset, size);
                    send_reply(&self.writer, header.id, reply);
                }
                Request::Enqueue { commands } => self.enqueue(commands, &body),
                Request::Flush => self.flush(header.id),
                other => {
                    let reply = self.control(other);
                    send_reply(&self.writer, header.id, reply);
                }
            }
        }
    }

    fn control(&mut self, request: Request<'_>) -> Reply {
        let api = &self.shared.runtime.api;
        match request {
            Request::Hello { version, host_id } => {
                if version != proto::PROTOCOL_VERSION {
                    return err(cl::CL_INVALID_VALUE);
                }
                self.greeted = true;
                self.same_host = self.shared.config.shared_memory
                    && !host_id.is_empty()
                    && host_id == self.shared.host_id.as_slice();
                let on_host = !host_id.is_empty() && host_id == self.shared.host_id.as_slice();
                let info = HelloInfo {
                    host_id: &self.shared.host_id,
                    local_socket: if on_host {
                        &self.shared.local_socket
                    } else {
                        &[]
                    },
                    platforms: self
                        .shared
                        .runtime
                        .platforms
                        .iter()
                        .map(|p| p.devices.clone())
                        .collect(),
                };
                let mut payload = Vec::new();
                info.encode(&mut payload);
                ok(payload)
            }
            Request::GetPlatformInfo { platform, param } => {
                let Some(p) = self.shared.runtime.platforms.get(platform as usize) else {
                    return err(cl::CL_INVALID_PLATFORM);
                };
                let raw = p.raw.0;
                // SAFETY: `raw` is a platform of the runtime; info_bytes passes valid buffers.
                from_info(info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
                    (api.clGetPlatformInfo)(raw, param, s, b, r)
                }))
            }
            Request::GetDeviceInfo { device, param } => {
                let Some(d) = self.shared.runtime.devices.get(device as usize) else {
                    return err(cl::CL_INVALID_DEVICE);
                };
                let raw = d.raw.0;
                // SAFETY: as above, for a device.
                from_info(info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
                    (api.clGetDeviceInfo)(raw, param, s, b, r)
                }))
            }
            Request::CreateContext { id, devices } => self.create_context(id, devices),
            Request::CreateQueue {
                id,
                context,
                device,
                properties,
            } => {
                let (ctx, ctx_devices) = match self.objects.get(&context) {
                    Some(Obj::Context { real, devices }) => (Arc::clone(real), devices.clone()),
                    _ => return err(cl::CL_INVALID_CONTEXT),
                };
                if !ctx_devices.contains(&device) {
                    return err(cl::CL_INVALID_DEVICE);
                }
                let dev = self.shared.runtime.devices[device as usize].raw.0;
                self.create(
                    id,
                    |e| unsafe { (api.clCreateCommandQueue)(ctx.handle(), dev, properties, e) },
                    |raw| Obj::Queue {
                        real: Real::new(raw, api.clReleaseCommandQueue),
                        device,
                    },
                )
            }
            Request::CreateBuffer {
                id,
                context,
                flags,
                size,
                data,
            } => self.create_buffer(id, context, flags, size, data),
            Request::CreateImage {
                id,
                context,
                flags,
                format,
                desc,
                data,
            } => self.create_image(id, context, flags, format, desc, data),
            Request::GetImageInfo { image, param } => {
                let Some(Obj::Image { real, .. }) = self.objects.get(&image) else {
                    return err(cl::CL_INVALID_MEM_OBJECT);
                };
                let raw = real.handle();
                // SAFETY: valid image handle.
                from_info(info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
                    (api.clGetImageInfo)(raw, param, s, b, r)
                }))
            }
            Request::GetSupportedImageFormats {
                context,
                flags,
                image_type,
            } => {
                let Some(Obj::Context { real, .. }) = self.objects.get(&context) else {
                    return err(cl::CL_INVALID_CONTEXT);
                };
                let ctx = real.handle();
                let mut n = 0u32;
                // SAFETY: valid context; the second call writes at most `n` formats.
                let rc = unsafe {
                    (api.clGetSupportedImageFormats)(
                        ctx,
                        flags,
                        image_type,
                        0,
                        std::ptr::null_mut(),
                        &mut n,
                    )
                };
                if rc != cl::CL_SUCCESS {
                    return err(rc);
                }
                let mut formats = vec![[0u32; 2]; (n as usize).min(4096)];
                let rc = unsafe {
                    (api.clGetSupportedImageFormats)(
                        ctx,
                        flags,
                        image_type,
                        formats.len() as u32,
                        formats.as_mut_ptr(),
                        std::ptr::null_mut(),
                    )
                };
                if rc != cl::CL_SUCCESS {
                    return err(rc);
                }
                ok(formats
                    .iter()
                    .flat_map(|f| f.iter().flat_map(|v| v.to_le_bytes()))
                    .collect())
            }
            Request::CreateSampler {
                id,
                context,
                normalized,
                addressing,
                filter,
            } => {
                let Some(Obj::Context { real, .. }) = self.objects.get(&context) else {
                    return err(cl::CL_INVALID_CONTEXT);
                };
                let ctx = Arc::clone(real);
                self.create(
                    id,
                    // SAFETY: valid context.
                    |e| unsafe {
                        (api.clCreateSampler)(ctx.handle(), normalized, addressing, filter, e)
                    },
                    |raw| Obj::Sampler {
                        real: Real::new(raw, api.clReleaseSampler),
                    },
                )
            }
            Request::CreateProgramWithSource {
                id,
                context,
                source,
            } => {
                let Some(Obj::Context { real: ctx, devices }) = self.objects.get(&context) else {
                    return err(cl::CL_INVALID_CONTEXT);
                };
                let ctx = Arc::clone(ctx);
                let hash = programs::source_hash(source);
                let devices = devices.clone();
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
                        Obj::Program {
                            real,
                            source: Some(source),
                        }
                    },
                )
            }
            Request::CreateProgramWithBinary {
                id,
                context,
                binaries,
            } => self.create_program_with_binary(id, context, binaries),
            Request::BuildProgram {
                program,
                devices,
                options,
            } => self.build_program(program, devices, options),
            Request::CompileProgram {
                program,
                devices,
                options,
                headers,
            } => self.compile_program(program, devices, options, headers),
            Request::LinkProgram {
                id,
                context,
                devices,
                options,
                inputs,
            } => self.link_program(id, context, devices, options, inputs),
            Request::GetProgramInfo { program, param } => {
                let Some(Obj::Program { real, .. }) = self.objects.get(&program) else {
                    return err(cl::CL_INVALID_PROGRAM);
                };
                let binaries = [cl::CL_PROGRAM_BINARIES, cl::CL_PROGRAM_BINARY_SIZES];
                if binaries.contains(&param) && !self.code_generation_safe(real.handle()) {
                    return err(cl::CL_OUT_OF_RESOURCES);
                }
                if param == cl::CL_PROGRAM_BINARIES {
                    return from_info(self.program_binaries(real.handle()));
                }
                let raw = real.handle();
                // SAFETY: valid program handle and buffers.
                from_info(info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
                    (api.clGetProgramInfo)(raw, param, s, b, r)
                }))
            }
            Request::GetProgramBuildInfo {
                program,
                device,
                param,
            } => {
                let Some(Obj::Program { real, .. }) = self.objects.get(&program) else {
                    return err(cl::CL_INVALID_PROGRAM);
                };
                let Some(dev) = self.shared.runtime.devices.get(device as usize) else {
                    return err(cl::CL_INVALID_DEVICE);
                };
                let (raw, dev) = (real.handle(), dev.raw.0);
                // SAFETY: valid handles and buffers.
                from_info(info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
                    (api.clGetProgramBuildInfo)(raw, dev, param, s, b, r)
                }))
            }
            Request::CreateKernel { id, program, name } => {
                let Some(Obj::Program { real: prog, .. }) = self.objects.get(&program) else {
                    return err(cl::CL_INVALID_PROGRAM);
                };
                let prog = Arc::clone(prog);
                let Ok(name) = CString::new(name) else {
                    return err(cl::CL_INVALID_KERNEL_NAME);
                };
                let reply = self.create(
                    id,
                    |e| unsafe { (api.clCreateKernel)(prog.handle(), name.as_ptr(), e) },
                    |raw| Obj::Kernel {
                        real: Real::new(raw, api.clReleaseKernel),
                        launchable: name.as_bytes().len()
                            <= self.shared.config.kernel_name_bytes_max,
                    },
                );
                if reply.0 != cl::CL_SUCCESS {
                    return reply;
                }
                let Some(Obj::Kernel { real, .. }) = self.objects.get(&id) else {
                    unreachable!("just created")
                };
                let raw = real.handle();
                // SAFETY: valid kernel handle and buffers.
                let num_args = info_bytes(8, &mut |s, b, r| unsafe {
                    (api.clGetKernelInfo)(raw, cl::CL_KERNEL_NUM_ARGS, s, b, r)
                });
                match num_args {
                    Ok(b) if b.len() == 4 => ok(b),
                    Ok(_) => err(cl::CL_INVALID_KERNEL),
                    Err(e) => err(e),
                }
            }
            Request::GetKernelInfo { kernel, param } => {
                let Some(Obj::Kernel { real, .. }) = self.objects.get(&kernel) else {
                    return err(cl::CL_INVALID_KERNEL);
                };
                let raw = real.handle();
                // SAFETY: valid kernel handle and buffers.
                from_info(info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
                    (api.clGetKernelInfo)(raw, param, s, b, r)
                }))
            }
            Request::GetKernelWorkGroupInfo {
                kernel,
                device,
                param,
            } => {
                let Some(Obj::Kernel { real, .. }) = self.objects.get(&kernel) else {
                    return err(cl::CL_INVALID_KERNEL);
                };
                let Some(dev) = self.shared.runtime.devices.get(device as usize) else {
                    return err(cl::CL_INVALID_DEVICE);
                };
                let (raw, dev) = (real.handle(), dev.raw.0);
                // SAFETY: valid handles and buffers.
                from_info(info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
                    (api.clGetKernelWorkGroupInfo)(raw, dev, param, s, b, r)
                }))
            }
            Request::GetKernelArgInfo {
                kernel,
                index,
                param,
            } => {
                let Some(Obj::Kernel { real, .. }) = self.objects.get(&kernel) else {
                    return err(cl::CL_INVALID_KERNEL);
                };
                let raw = real.handle();
                // SAFETY: valid kernel handle and buffers.
                from_info(info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
                    (api.clGetKernelArgInfo)(raw, index, param, s, b, r)
                }))
            }
            Request::Release { .. }
            | Request::Enqueue { .. }
            | Request::Flush
            | Request::CreateSubBuffer { .. } => {
                unreachable!("handled by run")
            }
        }
    }

    fn device_handles(&self, devices: &[u32]) -> Option<Vec<Handle>> {
        devices
            .iter()
            .map(|d| {
                self.shared
                    .runtime
                    .devices
                    .get(*d as usize)
                    .map(|e| e.raw.0)
            })
            .collect()
    }

    /// Whether a new object may take `id`: a fresh non-zero id, within the client's
    /// object limit.
    fn admit(&self, id: u64) -> Result<(), Reply> {
        if id == 0 || self.objects.contains_key(&id) {
            return Err(err(cl::CL_INVALID_VALUE));
        }
        if self.objects.len() >= self.shared.config.objects_max {
            return Err(err(cl::CL_OUT_OF_RESOURCES));
        }
        Ok(())
    }

    /// Common path of every create call: id and limit checks, the call, the table entry.
    fn create(
        &mut self,
        id: u64,
        call: impl FnOnce(&mut ClInt) -> Handle,
        wrap: impl FnOnce(Handle) -> Obj,
    ) -> Reply {
        if let Err(refused) = self.admit(id) {
            return refused;
        }
        let mut rc = cl::CL_SUCCESS;
        let raw = call(&mut rc);
        if raw.is_null() {
            return err(if rc == cl::CL_SUCCESS {
                cl::CL_OUT_OF_RESOURCES
            } else {
                rc
            });
        }
        self.objects.insert(id, wrap(raw));
        self.shared.metrics.client_objects.inc();
        ok(Vec::new())
    }

    fn create_context(&mut self, id: u64, devices: Vec<u32>) -> Reply {
        let api = &self.shared.runtime.api;
        let Some(handles) = self.device_handles(&devices) else {
            return err(cl::CL_INVALID_DEVICE);
        };
        if handles.is_empty() {
            return err(cl::CL_INVALID_VALUE);
        }
        let platform = self.shared.runtime.devices[devices[0] as usize].platform;
        if devices
            .iter()
            .any(|d| self.shared.runtime.devices[*d as usize].platform != platform)
        {
            return err(cl::CL_INVALID_DEVICE);
        }
        let props = [
            cl::CL_CONTEXT_PLATFORM,
            self.shared.runtime.platforms[platform as usize].raw.0 as isize,
            0,
        ];
        self.create(
            id,
            // SAFETY: valid property list and device handles; no callback.
            |e| unsafe {
                (api.clCreateContext)(
                    props.as_ptr(),
                    handles.len() as u32,
                    handles.as_ptr(),
                    std::ptr::null(),
                    std::ptr::null_mut(),
                    e,
                )
            },
            |raw| Obj::Context {
                real: Real::new(raw, api.clReleaseContext),
                devices,
            },
        )
    }

    fn create_buffer(
        &mut self,
        id: u64,
        context: u64,
        flags: u64,
        size: u64,
        data: &[u8],
    ) -> Reply {
        let api = &self.shared.runtime.api;
        let Some(Obj::Context { real: ctx, devices }) = self.objects.get(&context) else {
            return err(cl::CL_INVALID_CONTEXT);
        };
        let ctx = Arc::clone(ctx);
        let host_memory = devices
            .iter()
            .all(|d| self.shared.runtime.devices[*d as usize].host_memory);
        if size == 0 {
            return err(cl::CL_INVALID_BUFFER_SIZE);
        }
        if !data.is_empty() && data.len() as u64 != size {
            return err(cl::CL_INVALID_VALUE);
        }
        if self.buffer_bytes.saturating_add(size) > self.shared.config.buffer_bytes_max {
            return err(cl::CL_OUT_OF_RESOURCES);
        }
        // Host pointers live in the client process; the node sees only their contents.
        let mut flags = flags
            & !(cl::CL_MEM_USE_HOST_PTR | cl::CL_MEM_ALLOC_HOST_PTR | cl::CL_MEM_COPY_HOST_PTR);
        // Same host and a device computing in host memory: the buffer lives in shared
        // memory the client maps too. Any failure falls back to a plain buffer.
        let region = if self.same_host && host_memory {
            crate::shm::Region::create(size as usize).ok()
        } else {
            None
        };
        let host_ptr = match &region {
            Some(r) => {
                // SAFETY: the region has `size` bytes; `data` is empty or `size` bytes.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), r.ptr(), data.len()) };
                flags |= cl::CL_MEM_USE_HOST_PTR;
                r.ptr() as *mut c_void
            }
            None if data.is_empty() => std::ptr::null_mut(),
            None => {
                flags |= cl::CL_MEM_COPY_HOST_PTR;
                data.as_ptr() as *mut c_void
            }
        };
        let name = region
            .as_ref()
            .map(|r| r.name().to_vec())
            .unwrap_or_default();
        let reply = self.create(
            id,
            // SAFETY: valid context; with COPY_HOST_PTR the runtime copies `size` bytes,
            // with USE_HOST_PTR it uses the region, which lives as long as the buffer.
            |e| unsafe { (api.clCreateBuffer)(ctx.handle(), flags, size as usize, host_ptr, e) },
            |raw| Obj::Mem {
                real: Real::with_memory(raw, api.clReleaseMemObject, region),
                size,
                held: size,
            },
        );
        if reply.0 != cl::CL_SUCCESS {
            return reply;
        }
        self.buffer_bytes += size;
        self.shared.metrics.client_buffer_bytes.inc_by(size as i64);
        self.shared
            .metrics
            .bytes_to_device
            .inc_by(data.len() as u64);
        // The payload names the shared memory region, empty for a plain buffer.
        ok(name)
    }

    fn release(&mut self, id: u64) {
        match self.objects.remove(&id) {
            Some(Obj::Mem { held, .. } | Obj::Image { held, .. }) => {
                self.buffer_bytes -= held;
                self.shared.metrics.client_buffer_bytes.dec_by(held as i64);
                self.shared.metrics.client_objects.dec();
            }
            Some(_) => {
                self.shared.metrics.client_objects.dec();
            }
            None => {}
        }
    }

    fn create_sub_buffer(
        &mut self,
        id: u64,
        parent: u64,
        flags: u64,
        offset: u64,
        size: u64,
    ) -> Reply {
        let api = &self.shared.runtime.api;
        let (parent, parent_size) = match self.mem(parent) {
            Ok(p) => p,
            Err(e) => return err(e),
        };
        if size == 0 {
            return err(cl::CL_INVALID_BUFFER_SIZE);
        }
        if let Err(e) = Self::in_bounds(offset, size, parent_size) {
            return err(e);
        }
        let region = [offset as usize, size as usize];
        let parent_raw = parent.handle();
        self.create(
            id,
            // SAFETY: valid buffer; `region` is a cl_buffer_region (origin, size).
            |e| unsafe {
                (api.clCreateSubBuffer)(
                    parent_raw,
                    flags,
                    CL_BUFFER_CREATE_TYPE_REGION,
                    region.as_ptr().cast(),
                    e,
                )
            },
            |raw| Obj::Mem {
                real: Real::sub_buffer(raw, api.clReleaseMemObject, parent),
                size,
                held: 0,
            },
        )
    }

    fn create_image(
        &mut self,
        id: u64,
        context: u64,
        flags: u64,
        format: [u32; 2],
        desc: [u64; 5],
        data: &[u8],
    ) -> Reply {
        let api = &self.shared.runtime.api;
        let Some(Obj::Context { real: ctx, .. }) = self.objects.get(&context) else {
            return err(cl::CL_INVALID_CONTEXT);
        };
        let ctx = Arc::clone(ctx);
        let Some(elem) = cl::image_element_size(format[0], format[1]) else {
            return err(cl::CL_INVALID_IMAGE_FORMAT_DESCRIPTOR);
        };
        let [image_type, width, height, depth, array_size] = desc;
        let Some(dims) = cl::image_dims(image_type as u32, [width, height, depth, array_size])
        else {
            return err(cl::CL_INVALID_IMAGE_DESCRIPTOR);
        };
        let Some(size) = cl::image_region_bytes(elem, dims, [0; 3], dims) else {
            return err(cl::CL_INVALID_IMAGE_SIZE);
        };
        if !data.is_empty() && data.len() as u64 != size {
            return err(cl::CL_INVALID_VALUE);
        }
        if self.buffer_bytes.saturating_add(size) > self.shared.config.buffer_bytes_max {
            return err(cl::CL_OUT_OF_RESOURCES);
        }
        // Host pointers live in the client process; the node sees only their contents.
        let mut flags = flags
            & !(cl::CL_MEM_USE_HOST_PTR | cl::CL_MEM_ALLOC_HOST_PTR | cl::CL_MEM_COPY_HOST_PTR);
        let host_ptr = if data.is_empty() {
            std::ptr::null_mut()
        } else {
            flags |= cl::CL_MEM_COPY_HOST_PTR;
            data.as_ptr() as *mut c_void
        };
        let image_desc = crate::ffi::ImageDesc {
            image_type: image_type as u32,
            width: width as usize,
            height: height as usize,
            depth: depth as usize,
            array_size: array_size as usize,
            row_pitch: 0,
            slice_pitch: 0,
            num_mip_levels: 0,
            num_samples: 0,
            buffer: std::ptr::null_mut(),
        };
        let reply = self.create(
            id,
            // SAFETY: valid context; with COPY_HOST_PTR the runtime copies the tightly
            // packed `size` bytes of `data`.
            |e| unsafe {
                (api.clCreateImage)(ctx.handle(), flags, &format, &image_desc, host_ptr, e)
            },
            |raw| Obj::Image {
                real: Real::new(raw, api.clReleaseMemObject),
                elem,
                dims,
                held: size,
            },
        );
        if reply.0 == cl::CL_SUCCESS {
            self.buffer_bytes += size;
            self.shared.metrics.client_buffer_bytes.inc_by(size as i64);
            self.shared
                .metrics
                .bytes_to_device
                .inc_by(data.len() as u64);
        }
        reply
    }
}
