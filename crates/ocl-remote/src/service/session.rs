//! One client connection: its object table (the client's resource pool), its open task,
//! and the control calls it makes.
//!
//! Ids name objects only within the connection that created them: another client's id,
//! an unknown id or an id of the wrong type gives the `CL_INVALID_*` code of the expected
//! type. Dropping the session (the client disconnected) drops the table, which releases
//! every OpenCL object; tasks already queued hold their own references.
//!
//! Here: the connection's request loop and object creation. The info queries are in
//! `info`, the program calls in `program`, the enqueued commands and their flush into a
//! task in `enqueue`, which devices the session may name in `devices`; the bytes on
//! the socket are [`super::connection`]'s.

mod devices;
mod enqueue;
mod info;
mod objects;
mod program;

use std::ffi::{c_void, CString};
use std::io::{self, BufReader};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::bodies::Body;
use super::connection::{read_frame, send_reply, ClientWriter};
use super::gate::{Admission, Caller};
use super::task::{Cmd, Finished};
use super::{Real, Shared};
use crate::cl::{self, ClInt};
use crate::ffi::{info_bytes, Handle};
use crate::poll::AdaptiveSpin;
use crate::proto::{self, HelloInfo, Request};
use crate::service::lock;
use crate::stream::Stream;
use objects::{
    Context, Image, Kernel, Mem, Obj, Objects, OverQuota, Program, Queue, Quota, Sampler,
};

struct Session<'s> {
    shared: &'s Shared,
    writer: ClientWriter,
    objects: Objects,
    /// The client's device memory, counted by storage (see [`Quota`]).
    quota: Arc<Quota>,
    open: Vec<Cmd>,
    open_bytes: u64,
    /// Set when the open task went over `pending_bytes_max`; the task then fails whole.
    open_overflow: bool,
    /// Bytes of the entries kept for commands that failed past the bound.
    open_failed_bytes: u64,
    greeted: bool,
    /// Who the client is, once admitted (by the node before the hand-over, or by the
    /// service's gate at `Hello`; see [`super::gate`]); `None` without a gate.
    admission: Option<Admission>,
    /// Where the client comes from, for the gate.
    caller: Caller,
    /// Whether a refusal for the memory quota was logged (once per session).
    quota_logged: std::cell::Cell<bool>,
    /// The devices outside the admission that a request named, each logged and
    /// audited once per session (bit `i`: device `i`).
    devices_refused: std::cell::Cell<u64>,
    /// The client runs on this host (same host id): buffers may live in shared memory.
    same_host: bool,
    /// The device of the client's last task, and whether that task is over.
    last_task: Option<(Option<u32>, Finished)>,
    /// The session's number, its own share of a device when it has no tenant.
    number: u64,
}

/// Sessions ever started: the next session's number.
static SESSIONS: AtomicU64 = AtomicU64::new(0);

/// The status and payload of a `Reply` frame.
type Reply = (ClInt, Vec<u8>);
/// What most calls answer: a payload with `CL_SUCCESS`, or an error without one.
type Answer = Result<Vec<u8>, ClInt>;

/// The reply of an error without payload.
fn err(code: ClInt) -> Reply {
    (code, Vec::new())
}

/// The answer of a call that returned `rc`, with no payload.
fn status(rc: ClInt) -> Answer {
    if rc == cl::CL_SUCCESS {
        Ok(Vec::new())
    } else {
        Err(rc)
    }
}

fn reply(answer: Answer) -> Reply {
    match answer {
        Ok(payload) => (cl::CL_SUCCESS, payload),
        Err(code) => err(code),
    }
}

/// Serves one client until it disconnects or breaks the protocol; `refused`: the client
/// is over a bound counted elsewhere (by the node, for isolated runtime processes) and
/// gets `CL_OUT_OF_RESOURCES`, as one over `clients_max` here does.
pub(crate) fn serve(shared: Arc<Shared>, stream: Stream, refused: bool) {
    let caller = Caller::of(&stream);
    serve_greeted(shared, stream, refused, false, Entry::Ask(caller))
}

/// How a session's client is admitted (see [`super::gate`]).
pub(crate) enum Entry {
    /// The node admitted it before handing the connection over (`None`: the node has
    /// no gate).
    Admitted(Option<Admission>),
    /// The service's gate, if it has one, decides at `Hello` about this caller.
    Ask(Caller),
}

/// [`serve`] a client whose same-host `Hello` the node answered already (`greeted`;
/// see `isolate::greet`): its session starts greeted, on the node's host. `admission`:
/// the node admitted the client before it handed the connection over.
pub(crate) fn serve_greeted(
    shared: Arc<Shared>,
    stream: Stream,
    refused: bool,
    greeted: bool,
    entry: Entry,
) {
    let (admission, caller) = match entry {
        Entry::Admitted(admission) => (admission, Caller::default()),
        Entry::Ask(caller) => (None, caller),
    };
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
    let over_limit =
        shared.clients.fetch_add(1, Ordering::SeqCst) >= shared.config.clients_max || refused;
    shared.metrics.clients_connected.inc();
    let mut reader = BufReader::with_capacity(256 << 10, stream);
    if over_limit {
        refuse(&shared, &mut reader, &writer);
    } else {
        let mut session = Session {
            shared: &shared,
            writer: Arc::clone(&writer),
            objects: Objects::default(),
            quota: Quota::with_tenant(
                shared.client_quota(),
                shared.metrics.client_buffer_bytes.clone(),
                admission.as_ref().and_then(|a| a.memory.clone()),
            ),
            open: Vec::new(),
            open_bytes: 0,
            open_overflow: false,
            open_failed_bytes: 0,
            greeted,
            admission,
            caller,
            quota_logged: std::cell::Cell::new(false),
            devices_refused: std::cell::Cell::new(0),
            same_host: greeted && shared.config.shared_memory,
            last_task: None,
            number: SESSIONS.fetch_add(1, Ordering::Relaxed),
        };
        if let Err(e) = session.run(&mut reader) {
            if e.kind() != io::ErrorKind::UnexpectedEof {
                super::log::log!(WARN, "client connection closed: {e}");
            }
        }
    }
    if let Some(id) = connection {
        lock(&shared.connections).remove(&id);
    }
    let last = shared.clients.fetch_sub(1, Ordering::SeqCst) == 1;
    shared.metrics.clients_connected.dec();
    if last {
        shared.release_idle_memory();
    }
}

/// Lists the connection among those a shutdown ends; a connection that arrives after
/// the shutdown began is ended at once. `None` when the socket cannot be shared (the
/// session then ends only when its client leaves).
fn register(shared: &Shared, stream: &Stream) -> Option<u64> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let handle = stream.try_clone().ok()?;
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut connections = lock(&shared.connections);
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
    /// the OpenCL objects and gives their storage's bytes back to the gauge; queued tasks
    /// keep their own references until they finish).
    fn drop(&mut self) {
        let m = &self.shared.metrics;
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
            let reply = match request {
                // Releases and enqueues are not answered; a flush is, when its task is done.
                Request::Release { id } => {
                    self.release(id);
                    continue;
                }
                Request::Enqueue { commands } => {
                    self.enqueue(commands, &body);
                    continue;
                }
                Request::Flush => {
                    self.flush(header.id);
                    continue;
                }
                Request::Hello {
                    version,
                    host_id,
                    tenant,
                    token,
                } => match self.admit_client(tenant, token) {
                    Ok(()) => reply(self.hello(version, host_id)),
                    Err(reason) => {
                        // The gate's owner logged the refusal; the session just ends.
                        send_reply(
                            &self.writer,
                            header.id,
                            (super::gate::REFUSED, reason.into_bytes()),
                        );
                        return Ok(());
                    }
                },
                // The two calls that may fail with a payload.
                Request::CreateProgramWithBinary {
                    id,
                    context,
                    binaries,
                } => self
                    .create_program_with_binary(id, context, binaries)
                    .unwrap_or_else(err),
                Request::LinkProgram {
                    id,
                    context,
                    devices,
                    options,
                    inputs,
                } => self
                    .link_program(id, context, devices, options, inputs)
                    .unwrap_or_else(err),
                other => reply(self.control(other)),
            };
            send_reply(&self.writer, header.id, reply);
        }
    }

    /// Answers a call that is answered at once with a payload or an error: the info
    /// queries in `info`, object creation and builds here.
    fn control(&mut self, request: Request<'_>) -> Answer {
        match request {
            Request::Hello { .. } => unreachable!("answered in `run`"),
            Request::GetPlatformInfo { .. }
            | Request::GetDeviceInfo { .. }
            | Request::GetImageInfo { .. }
            | Request::GetProgramInfo { .. }
            | Request::GetProgramBuildInfo { .. }
            | Request::GetKernelInfo { .. }
            | Request::GetKernelWorkGroupInfo { .. }
            | Request::GetKernelArgInfo { .. } => self.info(request),
            Request::GetSupportedImageFormats {
                context,
                flags,
                image_type,
            } => self.supported_image_formats(context, flags, image_type),
            Request::CreateContext { .. }
            | Request::CreateQueue { .. }
            | Request::CreateBuffer { .. }
            | Request::CreateSubBuffer { .. }
            | Request::CreateImage { .. }
            | Request::CreateSampler { .. }
            | Request::CreateProgramWithSource { .. }
            | Request::CreateKernel { .. } => self.create_object(request),
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
            Request::Release { .. }
            | Request::Enqueue { .. }
            | Request::Flush
            | Request::CreateProgramWithBinary { .. }
            | Request::LinkProgram { .. } => {
                unreachable!("handled by run")
            }
        }
    }

    /// Creates the object a `Create*` request (routed here by [`Session::control`])
    /// asks for, under the client's id.
    fn create_object(&mut self, request: Request<'_>) -> Answer {
        match request {
            Request::CreateContext { id, devices } => self.create_context(id, devices),
            Request::CreateQueue {
                id,
                context,
                device,
                properties,
            } => self.create_queue(id, context, device, properties),
            Request::CreateBuffer {
                id,
                context,
                flags,
                size,
                data,
            } => self.create_buffer(id, context, flags, size, data),
            Request::CreateSubBuffer {
                id,
                parent,
                flags,
                offset,
                size,
            } => self.create_sub_buffer(id, parent, flags, offset, size),
            Request::CreateImage {
                id,
                context,
                flags,
                format,
                desc,
                data,
            } => self.create_image(id, context, flags, format, desc, data),
            Request::CreateSampler {
                id,
                context,
                normalized,
                addressing,
                filter,
            } => self.create_sampler(id, context, [normalized, addressing, filter]),
            Request::CreateProgramWithSource {
                id,
                context,
                source,
            } => self.create_program_with_source(id, context, source),
            Request::CreateKernel { id, program, name } => self.create_kernel(id, program, name),
            _ => unreachable!("control routes only object creation here"),
        }
    }

    fn create_queue(&mut self, id: u64, context: u64, device: u32, properties: u64) -> Answer {
        let api = &self.shared.runtime.api;
        let ctx = self.objects.get::<Context>(context)?;
        if !ctx.devices.contains(&device) {
            return Err(cl::CL_INVALID_DEVICE);
        }
        let ctx = Arc::clone(&ctx.real);
        let dev = self.device(device)?.raw.0;
        self.create(
            id,
            // SAFETY: valid context and device.
            |e| unsafe { (api.clCreateCommandQueue)(ctx.handle(), dev, properties, e) },
            |raw| Queue {
                real: Real::new(raw, api.clReleaseCommandQueue),
                device,
                context: Arc::clone(&ctx),
            },
        )
    }

    /// A sampler of `[normalized, addressing, filter]` in `context`.
    fn create_sampler(&mut self, id: u64, context: u64, how: [u32; 3]) -> Answer {
        let api = &self.shared.runtime.api;
        let [normalized, addressing, filter] = how;
        let ctx = Arc::clone(&self.objects.get::<Context>(context)?.real);
        self.create(
            id,
            // SAFETY: valid context.
            |e| unsafe { (api.clCreateSampler)(ctx.handle(), normalized, addressing, filter, e) },
            |raw| Sampler {
                real: Real::new(raw, api.clReleaseSampler),
            },
        )
    }

    /// Asks the service's gate, if it has one and the node did not admit the client
    /// already, whether this client may open a session; an admission's tenant memory
    /// joins the session's quota (no buffer exists before `Hello`).
    fn admit_client(&mut self, tenant: &[u8], token: &[u8]) -> Result<(), String> {
        let Some(gate) = self.shared.config.gate.as_ref() else {
            return Ok(());
        };
        if self.admission.is_some() {
            return Ok(());
        }
        debug_assert!(self.objects.len() == 0, "Hello comes first");
        let names: Vec<String> = self
            .shared
            .runtime
            .devices
            .iter()
            .map(|d| d.name.clone())
            .collect();
        let admission = gate.admit(
            &self.caller,
            &String::from_utf8_lossy(tenant),
            &String::from_utf8_lossy(token),
            &names,
        )?;
        if admission.memory.is_some() {
            self.quota = Quota::with_tenant(
                self.shared.client_quota(),
                self.shared.metrics.client_buffer_bytes.clone(),
                admission.memory.clone(),
            );
        }
        self.admission = Some(admission);
        Ok(())
    }

    /// Logs, once per session, which bound refused an allocation of `asked` bytes, and
    /// counts a refusal for the tenant's bound in the tenant's page.
    fn over_quota(&self, asked: u64) {
        let Some(over) = self.quota.refusal(asked) else {
            return;
        };
        if let (OverQuota::Tenant(_), Some(memory)) = (
            over,
            self.admission.as_ref().and_then(|a| a.memory.as_ref()),
        ) {
            memory.count_refusal();
        }
        if self.quota_logged.replace(true) {
            return;
        }
        let tenant = self.admission.as_ref().map_or("anonymous", |a| &a.tenant);
        let bound = match over {
            OverQuota::Client(max) => format!("its session's bound (buffer_bytes_max) of {max}"),
            OverQuota::Tenant(max) => {
                format!("the tenant's OpenCL memory quota (opencl_bytes_max) of {max}")
            }
        };
        super::log::log!(
            WARN,
            "tenant `{tenant}`: allocation of {asked} bytes refused (CL_OUT_OF_RESOURCES): \
             over {bound} bytes"
        );
    }

    fn hello(&mut self, version: u32, host_id: &[u8]) -> Answer {
        if version != proto::PROTOCOL_VERSION {
            return Err(cl::CL_INVALID_VALUE);
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
            platforms: self.devices().filter_platforms(
                &self
                    .shared
                    .runtime
                    .platforms
                    .iter()
                    .map(|p| p.devices.clone())
                    .collect::<Vec<_>>(),
            ),
        };
        let mut payload = Vec::new();
        info.encode(&mut payload);
        Ok(payload)
    }

    /// The formats as `cl_image_format` pairs of `u32`.
    fn supported_image_formats(&self, context: u64, flags: u64, image_type: u32) -> Answer {
        let api = &self.shared.runtime.api;
        let ctx = self.objects.get::<Context>(context)?.real.handle();
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
            return Err(rc);
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
            return Err(rc);
        }
        Ok(formats
            .iter()
            .flat_map(|f| f.iter().flat_map(|v| v.to_le_bytes()))
            .collect())
    }

    /// Creates the kernel and answers its argument count.
    fn create_kernel(&mut self, id: u64, program: u64, name: &[u8]) -> Answer {
        let api = &self.shared.runtime.api;
        let prog = Arc::clone(&self.objects.get::<Program>(program)?.real);
        let Ok(name) = CString::new(name) else {
            return Err(cl::CL_INVALID_KERNEL_NAME);
        };
        self.create(
            id,
            // SAFETY: valid program and C string.
            |e| unsafe { (api.clCreateKernel)(prog.handle(), name.as_ptr(), e) },
            |raw| Kernel {
                real: Real::new(raw, api.clReleaseKernel),
                launchable: name.as_bytes().len() <= self.shared.config.kernel_name_bytes_max,
            },
        )?;
        let raw = self
            .objects
            .get::<Kernel>(id)
            .expect("just created")
            .real
            .handle();
        // SAFETY: valid kernel handle and buffers.
        let num_args = info_bytes(8, &mut |s, b, r| unsafe {
            (api.clGetKernelInfo)(raw, cl::CL_KERNEL_NUM_ARGS, s, b, r)
        })?;
        if num_args.len() == 4 {
            Ok(num_args)
        } else {
            Err(cl::CL_INVALID_KERNEL)
        }
    }

    /// Whether a new object may take `id`: a fresh non-zero id, within the client's
    /// object limit.
    fn admit(&self, id: u64) -> Result<(), ClInt> {
        if id == 0 || self.objects.contains(id) {
            return Err(cl::CL_INVALID_VALUE);
        }
        if self.objects.len() >= self.shared.config.objects_max {
            return Err(cl::CL_OUT_OF_RESOURCES);
        }
        Ok(())
    }

    /// Common path of every create call: id and limit checks, the call, the table entry.
    fn create<T: Into<Obj>>(
        &mut self,
        id: u64,
        call: impl FnOnce(&mut ClInt) -> Handle,
        wrap: impl FnOnce(Handle) -> T,
    ) -> Answer {
        self.admit(id)?;
        let mut rc = cl::CL_SUCCESS;
        let raw = call(&mut rc);
        if raw.is_null() {
            return Err(if rc == cl::CL_SUCCESS {
                cl::CL_OUT_OF_RESOURCES
            } else {
                rc
            });
        }
        self.objects.insert(id, wrap(raw));
        self.shared.metrics.client_objects.inc();
        Ok(Vec::new())
    }

    fn create_context(&mut self, id: u64, devices: Vec<u32>) -> Answer {
        let api = &self.shared.runtime.api;
        let handles = self.device_handles(&devices)?;
        if handles.is_empty() {
            return Err(cl::CL_INVALID_VALUE);
        }
        let platform = self.shared.runtime.devices[devices[0] as usize].platform;
        if devices
            .iter()
            .any(|d| self.shared.runtime.devices[*d as usize].platform != platform)
        {
            return Err(cl::CL_INVALID_DEVICE);
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
            |raw| Context {
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
    ) -> Answer {
        let api = &self.shared.runtime.api;
        let ctx = self.objects.get::<Context>(context)?;
        let host_memory = ctx
            .devices
            .iter()
            .all(|d| self.shared.runtime.devices[*d as usize].host_memory);
        let max_alloc = self.max_alloc(&ctx.devices);
        let ctx = Arc::clone(&ctx.real);
        if size == 0 || size > max_alloc {
            return Err(cl::CL_INVALID_BUFFER_SIZE);
        }
        if !data.is_empty() && data.len() as u64 != size {
            return Err(cl::CL_INVALID_VALUE);
        }
        if !self.quota.admits(size) {
            self.over_quota(size);
            return Err(cl::CL_OUT_OF_RESOURCES);
        }
        // Host pointers live in the client process; the node sees only their contents.
        let flags = flags
            & !(cl::CL_MEM_USE_HOST_PTR | cl::CL_MEM_ALLOC_HOST_PTR | cl::CL_MEM_COPY_HOST_PTR);
        let (region, host_ptr, host_flag) = self.buffer_storage(size, data, host_memory);
        let flags = flags | host_flag;
        let name = region
            .as_ref()
            .map(|r| r.name().to_vec())
            .unwrap_or_default();
        let quota = Arc::clone(&self.quota);
        self.create(
            id,
            // SAFETY: valid context; with COPY_HOST_PTR the runtime copies `size` bytes,
            // with USE_HOST_PTR it uses the region, which lives as long as the buffer.
            |e| unsafe { (api.clCreateBuffer)(ctx.handle(), flags, size as usize, host_ptr, e) },
            |raw| Mem {
                real: Real::with_memory(raw, api.clReleaseMemObject, region),
                size,
                charge: quota.charge(size),
                host: flags & cl::CL_MEM_HOST_ACCESS,
            },
        )?;
        self.shared
            .metrics
            .bytes_to_device
            .inc_by(data.len() as u64);
        // The payload names the shared memory region, empty for a plain buffer.
        Ok(name)
    }

    /// Where a new buffer of `size` bytes, with initial contents `data` (empty: none),
    /// lives. Same host and devices computing in host memory: in shared memory the
    /// client maps too (any failure falls back to a plain buffer), which the returned
    /// region holds. Returns it, the host pointer clCreateBuffer gets, and the flag
    /// that says how the runtime uses that pointer (none without one).
    fn buffer_storage(
        &self,
        size: u64,
        data: &[u8],
        host_memory: bool,
    ) -> (Option<crate::shm::Region>, *mut c_void, u64) {
        let region = if self.same_host && host_memory {
            crate::shm::Region::create(size as usize).ok()
        } else {
            None
        };
        let (host_ptr, flag) = match &region {
            Some(r) => {
                // SAFETY: the region has `size` bytes; `data` is empty or `size` bytes.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), r.ptr(), data.len()) };
                (r.ptr() as *mut c_void, cl::CL_MEM_USE_HOST_PTR)
            }
            None if data.is_empty() => (std::ptr::null_mut(), 0),
            None => (data.as_ptr() as *mut c_void, cl::CL_MEM_COPY_HOST_PTR),
        };
        (region, host_ptr, flag)
    }

    /// The largest allocation the node presents for every device of a context (see
    /// [`crate::service::presented::Memory`]), and holds to: a larger buffer fails with
    /// `CL_INVALID_BUFFER_SIZE`, as OpenCL specifies, and a larger image with
    /// `CL_INVALID_IMAGE_SIZE`. The runtime's own bound is the device's, larger: left
    /// to it, such a buffer was accepted, and only the quota refused the next one.
    fn max_alloc(&self, devices: &[u32]) -> u64 {
        devices
            .iter()
            .map(|d| self.shared.runtime.devices[*d as usize].memory.max_alloc)
            .min()
            .unwrap_or(0)
    }

    fn release(&mut self, id: u64) {
        // A buffer's or image's charge goes with the last object on its storage.
        if self.objects.remove(id).is_some() {
            self.shared.metrics.client_objects.dec();
        }
    }

    fn create_sub_buffer(
        &mut self,
        id: u64,
        parent: u64,
        flags: u64,
        offset: u64,
        size: u64,
    ) -> Answer {
        let api = &self.shared.runtime.api;
        let parent = self.objects.get::<Mem>(parent)?;
        if size == 0 {
            return Err(cl::CL_INVALID_BUFFER_SIZE);
        }
        Self::in_bounds(offset, size, parent.size)?;
        let host = (flags | parent.host) & cl::CL_MEM_HOST_ACCESS;
        // The parent's storage stays allocated (and counted) while the sub-buffer lives.
        let charge = Arc::clone(&parent.charge);
        let parent = Arc::clone(&parent.real);
        let region = [offset as usize, size as usize];
        let parent_raw = parent.handle();
        self.create(
            id,
            // SAFETY: valid buffer; `region` is a cl_buffer_region (origin, size).
            |e| unsafe {
                (api.clCreateSubBuffer)(
                    parent_raw,
                    flags,
                    cl::CL_BUFFER_CREATE_TYPE_REGION,
                    region.as_ptr().cast(),
                    e,
                )
            },
            |raw| Mem {
                real: Real::sub_buffer(raw, api.clReleaseMemObject, parent),
                size,
                charge,
                host,
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
    ) -> Answer {
        let api = &self.shared.runtime.api;
        let ctx = self.objects.get::<Context>(context)?;
        let max_alloc = self.max_alloc(&ctx.devices);
        let ctx = Arc::clone(&ctx.real);
        let plan = self.plan_image(max_alloc, format, desc, data)?;
        let quota = Arc::clone(&self.quota);
        // Host pointers live in the client process; the node sees only their contents.
        let mut flags = flags
            & !(cl::CL_MEM_USE_HOST_PTR | cl::CL_MEM_ALLOC_HOST_PTR | cl::CL_MEM_COPY_HOST_PTR);
        let host_ptr = if data.is_empty() {
            std::ptr::null_mut()
        } else {
            flags |= cl::CL_MEM_COPY_HOST_PTR;
            data.as_ptr() as *mut c_void
        };
        let image_desc = plan.image_desc(desc);
        let host = plan.host_access(flags);
        let ImagePlan {
            elem,
            dims,
            size,
            storage,
            ..
        } = plan;
        self.create(
            id,
            // SAFETY: valid context (and buffer); with COPY_HOST_PTR the runtime copies
            // the tightly packed `size` bytes of `data`.
            |e| unsafe {
                (api.clCreateImage)(ctx.handle(), flags, &format, &image_desc, host_ptr, e)
            },
            |raw| {
                // A 1D image on a buffer holds the buffer, whose storage it is, as a
                // sub-buffer its parent (the client may release the buffer first).
                // The buffer's charge too: its bytes stay counted while the image lives.
                let (real, charge) = match storage {
                    Some((buffer, _, charge)) => (
                        Real::sub_buffer(raw, api.clReleaseMemObject, buffer),
                        charge,
                    ),
                    None => (Real::new(raw, api.clReleaseMemObject), quota.charge(size)),
                };
                Image {
                    real,
                    elem,
                    dims,
                    charge,
                    host,
                }
            },
        )?;
        self.shared
            .metrics
            .bytes_to_device
            .inc_by(data.len() as u64);
        Ok(Vec::new())
    }

    /// Checks an image of `format` and `desc` (with initial contents `data`, if any)
    /// against the format's pixel size, the largest allocation of its context's
    /// devices (`max_alloc`), its buffer's size and the client's quota, before the
    /// runtime sees it.
    fn plan_image(
        &self,
        max_alloc: u64,
        format: [u32; 2],
        desc: [u64; 5],
        data: &[u8],
    ) -> Result<ImagePlan, ClInt> {
        let Some(elem) = cl::image_element_size(format[0], format[1]) else {
            return Err(cl::CL_INVALID_IMAGE_FORMAT_DESCRIPTOR);
        };
        let [image_type, width, height, depth, last] = desc;
        // A 1D image on a buffer: the last entry names the buffer (see the request).
        let on_buffer = image_type as u32 == cl::CL_MEM_OBJECT_IMAGE1D_BUFFER;
        let (array_size, storage, storage_size) = if on_buffer {
            let buffer = self.objects.get::<Mem>(last)?;
            (
                0,
                Some((
                    Arc::clone(&buffer.real),
                    buffer.host,
                    Arc::clone(&buffer.charge),
                )),
                buffer.size,
            )
        } else {
            (last, None, u64::MAX)
        };
        let Some(dims) = cl::image_dims(image_type as u32, [width, height, depth, array_size])
        else {
            return Err(cl::CL_INVALID_IMAGE_DESCRIPTOR);
        };
        let Some(size) = cl::image_region_bytes(elem, dims, [0; 3], dims) else {
            return Err(cl::CL_INVALID_IMAGE_SIZE);
        };
        // An image on a buffer allocates nothing: its buffer was checked.
        if !on_buffer && size > max_alloc {
            return Err(cl::CL_INVALID_IMAGE_SIZE);
        }
        if !data.is_empty() && (data.len() as u64 != size || on_buffer) {
            return Err(cl::CL_INVALID_VALUE);
        }
        // Checked here, not left to the runtime: an image past its buffer's end would
        // let kernels reach memory that is not the client's.
        if size > storage_size {
            return Err(cl::CL_INVALID_MEM_OBJECT);
        }
        // An image on a buffer takes no memory of its own.
        if !on_buffer && !self.quota.admits(size) {
            self.over_quota(size);
            return Err(cl::CL_OUT_OF_RESOURCES);
        }
        Ok(ImagePlan {
            elem,
            dims,
            size,
            array_size,
            storage,
        })
    }
}

/// An image checked by [`Session::plan_image`]: bytes per pixel, dimensions, bytes,
/// array size, and for a 1D image on a buffer the buffer's storage, host access and
/// charge.
struct ImagePlan {
    elem: u64,
    dims: [u64; 3],
    size: u64,
    array_size: u64,
    storage: Option<(Arc<Real>, u64, Arc<objects::Charge>)>,
}

impl ImagePlan {
    /// The runtime's description of the image of `desc`.
    fn image_desc(&self, desc: [u64; 5]) -> crate::ffi::ImageDesc {
        let [image_type, width, height, depth, _] = desc;
        crate::ffi::ImageDesc {
            image_type: image_type as u32,
            width: width as usize,
            height: height as usize,
            depth: depth as usize,
            array_size: self.array_size as usize,
            row_pitch: 0,
            slice_pitch: 0,
            num_mip_levels: 0,
            num_samples: 0,
            buffer: self
                .storage
                .as_ref()
                .map_or(std::ptr::null_mut(), |(real, _, _)| real.handle()),
        }
    }

    /// The image's host access: its own in `flags`, or when not given the buffer's
    /// (as the ICD says the image's flags are); the node enforces it on the image too.
    fn host_access(&self, flags: u64) -> u64 {
        match (flags & cl::CL_MEM_HOST_ACCESS, &self.storage) {
            (0, Some((_, buffer_host, _))) => *buffer_host,
            (own, _) => own,
        }
    }
}
