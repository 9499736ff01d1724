//! One client connection: its object table (the client's resource pool), its open task,
//! and the control calls it makes.
//!
//! Ids name objects only within the connection that created them: another client's id,
//! an unknown id or an id of the wrong type gives the `CL_INVALID_*` code of the expected
//! type. Dropping the session (the client disconnected) drops the table, which releases
//! every OpenCL object; tasks already queued hold their own references.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CString};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::bodies::Body;
use super::programs;
use super::worker::{Arg, Cmd, Finished, FrameBytes, ImageWork, Op, SetOnDrop, Task};
use super::{Real, Shared, INFO_BYTES_MAX};
use crate::cl::{self, ClInt};
use crate::ffi::{info_bytes, Handle};
use crate::poll::AdaptiveSpin;
use crate::proto::{self, Command, Decoded, HelloInfo, ImageCmd, KernelArg, Request, Response};
use crate::stream::Stream;

/// The write half of a client connection, shared by its session and the device workers.
pub(crate) type ClientWriter = Arc<Mutex<Stream>>;

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

/// Reads one frame; the body comes back in a fresh buffer (not zero-filled first), so
/// that commands can keep slices of it instead of copying their data.
fn read_frame(
    shared: &Shared,
    reader: &mut BufReader<Stream>,
    spin: &AdaptiveSpin,
) -> io::Result<(proto::Header, Vec<u8>)> {
    if reader.buffer().is_empty() {
        spin.wait(reader.get_ref().as_raw_fd());
    }
    let mut head = [0u8; proto::HEADER_LEN];
    reader.read_exact(&mut head)?;
    let header = match proto::decode_header(&head, shared.config.frame_body_max) {
        Ok(Decoded::Complete(h, _)) => h,
        Ok(Decoded::Partial) => unreachable!("a whole header was read"),
        Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
    };
    let len = header.body_len as usize;
    if len - reader.buffer().len().min(len) < LARGE_BODY {
        let mut body = Vec::with_capacity(len);
        reader.by_ref().take(len as u64).read_to_end(&mut body)?;
        if body.len() != len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok((header, body))
    } else {
        let mut body = shared.bodies.take(len);
        read_large_body(reader, &mut body, len)?;
        Ok((header, body))
    }
}

/// Bodies with at least this much still to read go straight from the socket into
/// their buffer ([`read_large_body`]).
pub(crate) const LARGE_BODY: usize = 64 << 10;

/// Reads `len` bytes into `body`'s spare capacity: what the reader has buffered, then
/// straight from the socket. `read_to_end` zero-fills the spare capacity before every
/// read (our stream cannot say that its reads only write), which with 256 MiB writes
/// over TCP cost a memset and its page faults, a fifth of the service's time.
fn read_large_body(
    reader: &mut BufReader<Stream>,
    body: &mut Vec<u8>,
    len: usize,
) -> io::Result<()> {
    let buffered = reader.buffer();
    let take = buffered.len().min(len);
    body.extend_from_slice(&buffered[..take]);
    reader.consume(take);
    let fd = reader.get_ref().as_raw_fd();
    while body.len() < len {
        let want = len - body.len();
        let spare = &mut body.spare_capacity_mut()[..want];
        // SAFETY: reads at most `spare.len()` bytes into memory `body` owns.
        let n = unsafe { libc::read(fd, spare.as_mut_ptr().cast(), spare.len()) };
        match n {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n if n > 0 => {
                // SAFETY: the read initialised the next `n` bytes.
                unsafe { body.set_len(body.len() + n as usize) };
            }
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

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

/// The array's pointer, or null for an empty array (as OpenCL wants for "none").
fn nonempty_ptr<T>(v: &[T]) -> *const T {
    if v.is_empty() {
        std::ptr::null()
    } else {
        v.as_ptr()
    }
}

/// `data`, a slice of `frame` (the decoder borrows from it), kept without a copy.
fn frame_bytes(frame: &Arc<Body>, data: &[u8]) -> FrameBytes {
    let start = data.as_ptr() as usize - frame.as_ptr() as usize;
    debug_assert!(start + data.len() <= frame.len());
    FrameBytes {
        frame: Arc::clone(frame),
        start,
        len: data.len(),
    }
}

fn send_reply(writer: &ClientWriter, id: u64, (status, payload): Reply) {
    let mut out = Vec::with_capacity(proto::HEADER_LEN + 4 + payload.len());
    Response::Reply {
        status,
        payload: &payload,
    }
    .encode(id, &mut out);
    let _ = send_all(&mut writer.lock().unwrap_or_else(|p| p.into_inner()), &out);
}

/// Writes `bytes` to a client. If the client takes nothing for `send_stall_max` (the
/// socket's write timeout), or the write fails otherwise, the connection is shut down:
/// its session ends, and no frame follows the partial one.
pub(crate) fn send_all(w: &mut Stream, bytes: &[u8]) -> io::Result<()> {
    let result = w.write_all(bytes);
    if result.is_err() {
        w.shutdown();
    }
    result
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

    fn create_program_with_binary(
        &mut self,
        id: u64,
        context: u64,
        binaries: Vec<(u32, &[u8])>,
    ) -> Reply {
        let api = &self.shared.runtime.api;
        let Some(Obj::Context { real: ctx, devices }) = self.objects.get(&context) else {
            return err(cl::CL_INVALID_CONTEXT);
        };
        let ctx = Arc::clone(ctx);
        if binaries.is_empty() || binaries.iter().any(|(d, _)| !devices.contains(d)) {
            return err(cl::CL_INVALID_DEVICE);
        }
        let devs: Vec<u32> = binaries.iter().map(|(d, _)| *d).collect();
        let Some(handles) = self.device_handles(&devs) else {
            return err(cl::CL_INVALID_DEVICE);
        };
        let lens: Vec<usize> = binaries.iter().map(|(_, b)| b.len()).collect();
        let ptrs: Vec<*const u8> = binaries.iter().map(|(_, b)| b.as_ptr()).collect();
        let mut status = vec![cl::CL_SUCCESS; binaries.len()];
        let status_ptr = status.as_mut_ptr();
        let reply = self.create(
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
            |raw| Obj::Program {
                real: Real::new(raw, api.clReleaseProgram),
                source: None,
            },
        );
        let mut payload = Vec::new();
        for s in status {
            proto::put_i32(&mut payload, s);
        }
        (reply.0, payload)
    }

    /// `CL_PROGRAM_BINARIES` is an array of pointers, so it is answered as a list of
    /// byte strings (`u32` count, then `u32` length + bytes each).
    fn program_binaries(&self, program: Handle) -> Result<Vec<u8>, ClInt> {
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
    fn code_generation_safe(&self, program: Handle) -> bool {
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

    fn build_program(&mut self, program: u64, devices: Vec<u32>, options: &[u8]) -> Reply {
        let api = &self.shared.runtime.api;
        let Some(Obj::Program { real, source }) = self.objects.get(&program) else {
            return err(cl::CL_INVALID_PROGRAM);
        };
        let (real, source) = (Arc::clone(real), source.clone());
        let Some(devs) = self.device_handles(&devices) else {
            return err(cl::CL_INVALID_DEVICE);
        };
        let options: Vec<u8> = options.iter().copied().filter(|b| *b != 0).collect();
        // Only whole-context builds of source programs are cached: then the binaries
        // are exactly one per context device.
        let cache_key = source
            .as_ref()
            .filter(|s| devices.is_empty() || devices == s.devices)
            .map(|s| programs::key(&s.hash, &options, &s.devices));
        if let (Some(key), Some(src)) = (&cache_key, &source) {
            let cached = self
                .shared
                .programs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(key);
            if let Some(binaries) = cached {
                if let Some(built) = self.build_from_binaries(src, &binaries, &options) {
                    self.shared.metrics.program_cache_hits.inc();
                    self.objects.insert(
                        program,
                        Obj::Program {
                            real: built,
                            source,
                        },
                    );
                    return ok(Vec::new());
                }
            }
        }
        // Built from the client's source, not from binaries an earlier cache hit loaded.
        let real = source.as_ref().map_or(real, |s| Arc::clone(&s.program));
        self.objects.insert(
            program,
            Obj::Program {
                real: Arc::clone(&real),
                source: source.clone(),
            },
        );
        let options = CString::new(options).expect("NULs removed");
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
                options.as_ptr(),
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        if rc == cl::CL_SUCCESS {
            if let Some(key) = cache_key {
                self.shared.metrics.program_cache_misses.inc();
                let safe = self.code_generation_safe(real.handle());
                if let Some(Ok(bins)) = safe.then(|| self.raw_binaries(real.handle())) {
                    if bins.iter().all(|b| !b.is_empty()) {
                        self.shared
                            .programs
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(key, bins);
                    }
                }
            }
        }
        err(rc)
    }

    /// `clCompileProgram` on one of the client's programs, with other programs of the
    /// client as embedded headers. Compiled programs are not cached (the cache holds
    /// executables); the program keeps its source for `CL_PROGRAM_SOURCE`.
    fn compile_program(
        &mut self,
        program: u64,
        devices: Vec<u32>,
        options: &[u8],
        headers: Vec<(u64, &[u8])>,
    ) -> Reply {
        let api = &self.shared.runtime.api;
        let Some(Obj::Program { source, .. }) = self.objects.get(&program) else {
            return err(cl::CL_INVALID_PROGRAM);
        };
        // Only programs made from source compile (a binary has nothing to compile).
        let Some(source) = source.clone() else {
            return err(cl::CL_INVALID_OPERATION);
        };
        let real = Arc::clone(&source.program);
        let Some(devs) = self.device_handles(&devices) else {
            return err(cl::CL_INVALID_DEVICE);
        };
        let ids: Vec<u64> = headers.iter().map(|(id, _)| *id).collect();
        let header_handles = match self.header_handles(&ids) {
            Ok(handles) => handles,
            Err(code) => return err(code),
        };
        // The compiled program replaces an executable an earlier cache hit loaded.
        self.objects.insert(
            program,
            Obj::Program {
                real: Arc::clone(&real),
                source: Some(source),
            },
        );
        let Ok(header_names) = headers
            .into_iter()
            .map(|(_, name)| CString::new(name))
            .collect::<Result<Vec<_>, _>>()
        else {
            return err(cl::CL_INVALID_VALUE);
        };
        let name_ptrs: Vec<*const c_char> = header_names.iter().map(|n| n.as_ptr()).collect();
        let options = c_options(options);
        // SAFETY: valid program, device, header handles (held in the table for the
        // call) and C strings; no callback.
        let rc = unsafe {
            (api.clCompileProgram)(
                real.handle(),
                devs.len() as u32,
                nonempty_ptr(&devs),
                options.as_ptr(),
                header_handles.len() as u32,
                nonempty_ptr(&header_handles),
                nonempty_ptr(&name_ptrs),
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        err(rc)
    }

    /// The runtime's source programs of the client's programs `ids`, to be embedded as
    /// headers: `CL_INVALID_PROGRAM` if one is not a program of this client,
    /// `CL_INVALID_OPERATION` if one was not made from source (a runtime reads a
    /// header's source and may crash on a program that has none).
    fn header_handles(&self, ids: &[u64]) -> Result<Vec<Handle>, ClInt> {
        ids.iter()
            .map(|id| match self.objects.get(id) {
                Some(Obj::Program {
                    source: Some(s), ..
                }) => Ok(s.program.handle()),
                Some(Obj::Program { source: None, .. }) => Err(cl::CL_INVALID_OPERATION),
                _ => Err(cl::CL_INVALID_PROGRAM),
            })
            .collect()
    }

    /// The real handles of the client's programs `ids`; `None` if one is not a program
    /// of this client. The handles stay valid while the table holds them.
    fn program_handles(&self, ids: &[u64]) -> Option<Vec<Handle>> {
        ids.iter()
            .map(|id| match self.objects.get(id) {
                Some(Obj::Program { real, .. }) => Some(real.handle()),
                _ => None,
            })
            .collect()
    }

    /// `clLinkProgram`: a new program `id` from the client's compiled programs.
    fn link_program(
        &mut self,
        id: u64,
        context: u64,
        devices: Vec<u32>,
        options: &[u8],
        inputs: Vec<u64>,
    ) -> Reply {
        let api = &self.shared.runtime.api;
        let Some(Obj::Context { real: ctx, .. }) = self.objects.get(&context) else {
            return err(cl::CL_INVALID_CONTEXT);
        };
        let ctx = Arc::clone(ctx);
        let Some(devs) = self.device_handles(&devices) else {
            return err(cl::CL_INVALID_DEVICE);
        };
        let Some(input_handles) = self.program_handles(&inputs) else {
            return err(cl::CL_INVALID_PROGRAM);
        };
        if let Err(refused) = self.admit(id) {
            return refused;
        }
        let options = c_options(options);
        let mut rc = cl::CL_SUCCESS;
        // SAFETY: valid context, device and program handles and C string; no callback.
        let raw = unsafe {
            (api.clLinkProgram)(
                ctx.handle(),
                devs.len() as u32,
                nonempty_ptr(&devs),
                options.as_ptr(),
                input_handles.len() as u32,
                nonempty_ptr(&input_handles),
                std::ptr::null(),
                std::ptr::null_mut(),
                &mut rc,
            )
        };
        if raw.is_null() {
            return err(if rc == cl::CL_SUCCESS {
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
            Obj::Program {
                real: Real::new(raw, api.clReleaseProgram),
                source: None,
            },
        );
        self.shared.metrics.client_objects.inc();
        (rc, vec![1])
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
        let handles = self.device_handles(&src.devices)?;
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
                options.as_ptr(),
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        (rc == cl::CL_SUCCESS).then_some(real)
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

    fn mem(&self, id: u64) -> Result<(Arc<Real>, u64), ClInt> {
        match self.objects.get(&id) {
            Some(Obj::Mem { real, size, .. }) => Ok((Arc::clone(real), *size)),
            _ => Err(cl::CL_INVALID_MEM_OBJECT),
        }
    }

    /// A buffer or an image (kernel arguments take either).
    fn mem_object(&self, id: u64) -> Result<Arc<Real>, ClInt> {
        match self.objects.get(&id) {
            Some(Obj::Mem { real, .. } | Obj::Image { real, .. }) => Ok(Arc::clone(real)),
            _ => Err(cl::CL_INVALID_MEM_OBJECT),
        }
    }

    /// An image, and the bytes of the tightly packed `region` at `origin` in it (which
    /// must lie inside the image).
    fn image_region(
        &self,
        id: u64,
        origin: &[u64; 3],
        region: &[u64; 3],
    ) -> Result<(Arc<Real>, usize), ClInt> {
        let Some(Obj::Image {
            real, elem, dims, ..
        }) = self.objects.get(&id)
        else {
            return Err(cl::CL_INVALID_MEM_OBJECT);
        };
        let bytes =
            cl::image_region_bytes(*elem, *dims, *origin, *region).ok_or(cl::CL_INVALID_VALUE)?;
        Ok((Arc::clone(real), bytes as usize))
    }

    fn in_bounds(offset: u64, size: u64, mem_size: u64) -> Result<(), ClInt> {
        match offset.checked_add(size) {
            Some(end) if end <= mem_size => Ok(()),
            _ => Err(cl::CL_INVALID_VALUE),
        }
    }

    /// Resolves one command's ids against this client's table. Failures become the
    /// command's status instead of failing the connection.
    fn resolve(&self, command: &Command<'_>, frame: &Arc<Body>) -> Result<Op, ClInt> {
        Ok(match command {
            Command::Write {
                buffer,
                offset,
                data,
                ..
            } => {
                let (mem, size) = self.mem(*buffer)?;
                Self::in_bounds(*offset, data.len() as u64, size)?;
                Op::Write {
                    mem,
                    offset: *offset as usize,
                    data: frame_bytes(frame, data),
                }
            }
            Command::Read {
                buffer,
                offset,
                size,
                token,
                ..
            } => {
                let (mem, mem_size) = self.mem(*buffer)?;
                Self::in_bounds(*offset, *size, mem_size)?;
                Op::Read {
                    mem,
                    offset: *offset as usize,
                    size: *size as usize,
                    token: *token,
                }
            }
            Command::Copy {
                src,
                dst,
                src_offset,
                dst_offset,
                size,
                ..
            } => {
                let (src, src_size) = self.mem(*src)?;
                let (dst, dst_size) = self.mem(*dst)?;
                Self::in_bounds(*src_offset, *size, src_size)?;
                Self::in_bounds(*dst_offset, *size, dst_size)?;
                Op::Copy {
                    src,
                    dst,
                    src_offset: *src_offset as usize,
                    dst_offset: *dst_offset as usize,
                    size: *size as usize,
                }
            }
            Command::Fill {
                buffer,
                pattern,
                offset,
                size,
                ..
            } => {
                let (mem, mem_size) = self.mem(*buffer)?;
                Self::in_bounds(*offset, *size, mem_size)?;
                Op::Fill {
                    mem,
                    pattern: pattern.to_vec(),
                    offset: *offset as usize,
                    size: *size as usize,
                }
            }
            Command::NdRange(nd) => {
                let Some(Obj::Kernel { real, launchable }) = self.objects.get(&nd.kernel) else {
                    return Err(cl::CL_INVALID_KERNEL);
                };
                if !launchable {
                    return Err(cl::CL_OUT_OF_RESOURCES);
                }
                let mut args = Vec::with_capacity(nd.args.len());
                for a in &nd.args {
                    args.push(match a {
                        KernelArg::Unset => Arg::Unset,
                        KernelArg::Mem(id) => {
                            Arg::Mem(self.mem_object(*id).map_err(|_| cl::CL_INVALID_ARG_VALUE)?)
                        }
                        KernelArg::Sampler(id) => match self.objects.get(id) {
                            Some(Obj::Sampler { real }) => Arg::Sampler(Arc::clone(real)),
                            _ => return Err(cl::CL_INVALID_SAMPLER),
                        },
                        KernelArg::NullMem => Arg::NullMem,
                        KernelArg::Local(size) => Arg::Local(*size as usize),
                        KernelArg::Bytes(b) => Arg::Bytes(b.to_vec()),
                    });
                }
                let dims = |v: &[u64; 3]| v.map(|x| x as usize);
                Op::NdRange {
                    kernel: Arc::clone(real),
                    work_dim: u32::from(nd.work_dim),
                    offset: dims(&nd.offset),
                    global: dims(&nd.global),
                    local: nd.local.as_ref().map(dims),
                    args,
                }
            }
            Command::Image(c) => self.resolve_image(c, frame)?,
            Command::Marker { .. } => Op::Marker,
            Command::Barrier { .. } => Op::Barrier,
        })
    }

    fn resolve_image(&self, c: &ImageCmd<'_>, frame: &Arc<Body>) -> Result<Op, ClInt> {
        let dims = |v: &[u64; 3]| v.map(|x| x as usize);
        let mut op = ImageWork {
            op: c.op,
            src: None,
            dst: None,
            src_origin: dims(&c.src_origin),
            dst_origin: dims(&c.dst_origin),
            region: dims(&c.region),
            offset: c.offset as usize,
            token: c.token,
            size: 0,
            data: None,
        };
        match c.op {
            proto::ImageOp::Read => {
                let (image, size) = self.image_region(c.src, &c.src_origin, &c.region)?;
                op.src = Some(image);
                op.size = size;
            }
            proto::ImageOp::Write => {
                let (image, size) = self.image_region(c.dst, &c.dst_origin, &c.region)?;
                if c.data.len() != size {
                    return Err(cl::CL_INVALID_VALUE);
                }
                op.dst = Some(image);
                op.data = Some(frame_bytes(frame, c.data));
            }
            proto::ImageOp::Fill => {
                let (image, _) = self.image_region(c.dst, &c.dst_origin, &c.region)?;
                // A fill colour is a float4, int4 or uint4.
                if c.data.len() != 16 {
                    return Err(cl::CL_INVALID_VALUE);
                }
                op.dst = Some(image);
                op.data = Some(frame_bytes(frame, c.data));
            }
            // The runtime checks copies (no host memory is involved).
            proto::ImageOp::Copy => {
                op.src = Some(self.image_region(c.src, &c.src_origin, &c.region)?.0);
                op.dst = Some(self.image_region(c.dst, &c.dst_origin, &c.region)?.0);
            }
            proto::ImageOp::ToBuffer => {
                op.src = Some(self.image_region(c.src, &c.src_origin, &c.region)?.0);
                op.dst = Some(self.mem(c.dst)?.0);
            }
            proto::ImageOp::FromBuffer => {
                op.src = Some(self.mem(c.src)?.0);
                op.dst = Some(self.image_region(c.dst, &c.dst_origin, &c.region)?.0);
            }
        }
        Ok(Op::Image(Box::new(op)))
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

    fn enqueue(&mut self, commands: Vec<Command<'_>>, frame: &Arc<Body>) {
        // Writes keep the whole frame alive, so the whole frame counts against the bound.
        if commands.iter().any(|c| matches!(c, Command::Write { .. })) {
            self.open_bytes = self.open_bytes.saturating_add(frame.len() as u64);
        }
        for command in commands {
            if let Command::Fill { pattern, .. } = &command {
                self.open_bytes = self.open_bytes.saturating_add(pattern.len() as u64);
            }
            if self.open_bytes > self.shared.config.pending_bytes_max {
                self.open_overflow = true;
            }
            let queue = match self.objects.get(&command.queue()) {
                Some(Obj::Queue { real, device }) => Some((Arc::clone(real), *device)),
                _ => None,
            };
            let op = match (&queue, self.open_overflow) {
                (None, _) => Op::Failed(cl::CL_INVALID_COMMAND_QUEUE),
                (Some(_), true) => Op::Failed(cl::CL_OUT_OF_RESOURCES),
                (Some(_), false) => self.resolve(&command, frame).unwrap_or_else(Op::Failed),
            };
            self.open.push(Cmd {
                queue,
                event: command.event(),
                op,
            });
        }
    }

    fn flush(&mut self, id: u64) {
        let cmds = std::mem::take(&mut self.open);
        self.open_bytes = 0;
        self.open_overflow = false;
        // The lowest device's FIFO runs the task; it holds the others while it runs.
        let mut devices: Vec<u32> = cmds
            .iter()
            .filter_map(|c| c.queue.as_ref().map(|(_, d)| *d))
            .collect();
        devices.sort_unstable();
        devices.dedup();
        let device = devices.first().copied();
        // A client's tasks run in the order it flushed them (its later commands may use
        // what earlier ones computed, ordered by events that never reach the node). The
        // FIFO of a device keeps that order among the tasks on it; a task for another
        // device waits here until the previous task is over, holding this connection
        // back meanwhile, as a full FIFO does.
        if let Some((last_device, finished)) = &self.last_task {
            if *last_device != device || device.is_none() {
                finished.wait();
            }
        }
        let finished = Finished::default();
        self.last_task = Some((device, finished.clone()));
        let task = Task {
            id,
            cmds,
            writer: Arc::clone(&self.writer),
            flushed_at: Instant::now(),
            _finished: SetOnDrop(finished),
            other_devices: devices.get(1..).unwrap_or_default().to_vec(),
        };
        match device {
            // A full FIFO blocks this client's connection only: back-pressure.
            Some(d) => self.shared.devices[d as usize].submit(self.shared, d as usize, task),
            // Nothing runnable (empty, or every queue id invalid): answer at once.
            None => super::worker::fail_task(task, cl::CL_INVALID_COMMAND_QUEUE),
        }
    }
}
