//! The node-side OpenCL service: the device manager of remote OpenCL.
//!
//! [`spawn`] opens the configured OpenCL platforms (through [`crate::ffi::Api`]), listens
//! on a TCP address and serves remote OpenCL clients (the `libnetaccel_opencl.so` ICD).
//! Threads, all owned by the service:
//!
//! - one accept thread;
//! - one thread per client connection ([`session`]): it decodes frames, answers control
//!   calls (creates, builds, info queries) directly, owns the client's object table, and
//!   accumulates the client's enqueued commands into a task until a flush;
//! - one bounded queue of tasks and one worker thread per device ([`worker`]): tasks run
//!   one at a time, atomically, each user's in order, the users taking fair shares of
//!   the device's time ([`turns`]), and their results go to the task's client. A task
//!   flushed while its device is free and it is its user's turn runs at once on the
//!   client's connection thread, which saves two thread hand-offs on the latency path.
//!
//! Modules: [`session`] (a client's requests and objects), [`connection`] (the bytes on
//! its socket), [`task`] (what a flush hands from a session to a device), [`worker`] (the
//! device queues and the execution of tasks), [`turns`] (whose task a device runs next), [`events`] (a running task's wait lists and
//! event results), [`presented`] (the platforms and devices as clients see them: OpenCL
//! 3.0 without the features the remote path cannot carry, memory within their quota), [`reads`] (where a read's bytes wait until sent),
//! [`programs`] (the cache of built programs),
//! [`bodies`] (spare buffers for large frame bodies), [`metrics`] (kept in a shared
//! page, so that the node shows those of runtime processes too), [`log`] (its log
//! lines, `tracing` events), [`isolate`] (the
//! runtime in supervised child processes, the node's default) and [`busy`] (how the
//! node sees how long their tasks run), [`gate`] (who may open a session: the node's
//! identity model behind a trait) and [`account`] (a tenant's memory over all its
//! sessions).
//!
//! Everything above runs in one process: the service's own ([`Isolation::InProcess`]),
//! or a runtime process the node started ([`isolate`]), where the listeners stay in
//! the node and each connection is handed over.
//!
//! See `docs/opencl.md` for the protocol and the task model.

pub mod account;
mod bodies;
mod busy;
mod connection;
mod events;
pub mod gate;
pub mod isolate;
mod log;
mod mapped;
mod metrics;
mod presented;
mod programs;
mod reads;
mod session;
mod task;
mod turns;
mod worker;

use std::ffi::c_void;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};

use crate::stream::Stream;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;

use crate::cl::{self, ClInt};
use crate::ffi::{info_bytes, Api, Handle};
use metrics::Metrics;
pub use worker::DeviceLane;
use worker::DeviceQueue;

/// What the service shares and the bounds it enforces. Every bound has a safe default.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// The OpenCL library to load (the ICD loader).
    pub library: String,
    /// Share only platforms whose name contains one of these strings; empty = all
    /// platforms except netaccel's own remote platform (never re-exported).
    pub platforms: Vec<String>,
    /// Clients connected at once; more are refused with `CL_OUT_OF_RESOURCES`.
    pub clients_max: usize,
    /// Largest frame body a client may send, in bytes.
    pub frame_body_max: u32,
    /// Buffer bytes one client may hold on the node, and the memory its devices are
    /// presented with ([`presented::Memory::within_quota`]). [`ServiceConfig::NO_QUOTA`]
    /// (the default): the devices' own global memory and largest allocation, a client
    /// holding at most the largest device's memory.
    pub buffer_bytes_max: u64,
    /// Objects (contexts, queues, buffers, programs, kernels) one client may hold.
    pub objects_max: usize,
    /// Bytes of enqueued data (writes, fill patterns) one open task may hold.
    pub pending_bytes_max: u64,
    /// Tasks waiting for one device over all its users; a client flushing into a full
    /// queue waits, except that a user with nothing queued always gets one task in.
    pub device_queue_depth_max: usize,
    /// Back the buffers of same-host clients with shared memory when the device computes
    /// in host memory, so that buffer data moves without the socket.
    pub shared_memory: bool,
    /// Built programs kept by content hash, and their total binary bytes.
    pub program_cache_entries_max: usize,
    pub program_cache_bytes_max: usize,
    /// Offer same-host clients an abstract Unix socket instead of TCP.
    pub local_socket: bool,
    /// How long a client's thread polls its socket for the next request before it
    /// sleeps (see [`crate::poll`]); zero sleeps at once.
    pub poll_before_sleep: std::time::Duration,
    /// How long the node waits for a client to take data it sends (read results,
    /// replies) before it drops the connection. Results are written by the thread that
    /// ran the task, so a client that stops reading would otherwise hold the device from
    /// every other client. Zero: no bound.
    pub send_stall_max: std::time::Duration,
    /// Longest kernel name whose machine code the node lets the runtime generate (for
    /// a binary query, the program cache or a launch). Runtimes that name files after
    /// kernels abort the whole process on longer names: PoCL 3.1 does from 253 bytes.
    /// Longer names still build and create kernels (as natively); launching one fails
    /// with `CL_OUT_OF_RESOURCES`, its program's binaries are neither cached nor handed
    /// out, and the node and its other clients live on.
    pub kernel_name_bytes_max: usize,
    /// Capacity of the spare buffers for large frame bodies kept for reuse, node-wide
    /// (see `bodies`): memory the node holds while idle so that large writes over TCP
    /// do not page-fault fresh buffers in. Zero: none kept.
    pub body_spare_bytes_max: usize,
    /// Where the vendor runtime that serves clients runs (see [`isolate`]).
    pub isolation: Isolation,
    /// The program started for an isolated runtime process, with
    /// [`isolate::SUBCOMMAND`] as its first argument; `None`: this process's own
    /// executable (the node, or `netaccel-ocl-service`, both answer it).
    pub runtime_program: Option<std::path::PathBuf>,
    /// Runtime processes kept started and ready for the next client
    /// ([`Isolation::PerSession`]), so that a client does not wait for one to start.
    pub runtime_spares: usize,
    /// Runtime processes started per second at most, however many die or connect:
    /// a client that crashes its runtime in a loop cannot make the node fork in one.
    pub runtime_starts_per_second_max: u32,
    /// How long one task (a client's commands between two flushes, kernels included)
    /// may run before the isolated runtime process running it is killed and its client
    /// gets errors. Zero: no bound. In-process, tasks are not bounded.
    pub kernel_time_max: std::time::Duration,
    /// Who may open a session (see [`gate`]); `None`: every client.
    pub gate: Option<Arc<dyn gate::Gate>>,
}

/// Where the vendor runtime runs client code (see [`isolate`] for the trade-offs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// In the service's own process: one crash of the runtime ends the process.
    InProcess,
    /// One runtime process per client connection: a crash ends that client's session
    /// only, as it would natively.
    PerSession,
    /// One runtime process for all clients: a crash ends every session, the node
    /// lives on and starts a new one.
    Shared,
}

impl std::str::FromStr for Isolation {
    type Err = String;
    fn from_str(s: &str) -> Result<Isolation, String> {
        match s {
            "none" => Ok(Isolation::InProcess),
            "session" => Ok(Isolation::PerSession),
            "shared" => Ok(Isolation::Shared),
            _ => Err(format!(
                "unknown isolation {s:?} (expected \"session\", \"shared\" or \"none\")"
            )),
        }
    }
}

impl ServiceConfig {
    /// The smallest `frame_body_max` the ICD works with: it sends write data in pieces
    /// of 8 MiB, in `Enqueue` frames it seals past 4 MiB of commands.
    pub const FRAME_BODY_MIN: u32 = 16 << 20;

    /// `buffer_bytes_max` when the operator set no quota: clients see the devices as
    /// they are. A default quota smaller than the device made common programs refuse
    /// to run (hashcat: a 1 GiB quota presented a 2 GiB allocation as 296 MiB).
    pub const NO_QUOTA: u64 = u64::MAX;
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            library: "libOpenCL.so.1".to_string(),
            platforms: Vec::new(),
            clients_max: 64,
            frame_body_max: 64 << 20,
            buffer_bytes_max: ServiceConfig::NO_QUOTA,
            objects_max: 4096,
            pending_bytes_max: 512 << 20,
            device_queue_depth_max: 256,
            shared_memory: true,
            program_cache_entries_max: 64,
            program_cache_bytes_max: 256 << 20,
            local_socket: true,
            poll_before_sleep: crate::poll::SPIN_DEFAULT,
            send_stall_max: std::time::Duration::from_secs(10),
            kernel_name_bytes_max: 252,
            // A few of the 8 MiB write commands the ICD sends for large writes.
            body_spare_bytes_max: 32 << 20,
            isolation: Isolation::InProcess,
            runtime_program: None,
            runtime_spares: 2,
            runtime_starts_per_second_max: 50,
            kernel_time_max: std::time::Duration::from_secs(300),
            gate: None,
        }
    }
}

/// A handle of the real runtime that may cross threads: OpenCL objects are thread-safe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Raw(pub Handle);
// SAFETY: OpenCL 1.2 guarantees all API calls except clSetKernelArg are thread-safe;
// the service calls clSetKernelArg for a kernel only from the worker that runs its task.
unsafe impl Send for Raw {}
unsafe impl Sync for Raw {}

/// A reference-counted real OpenCL object that is released when the last user drops it.
pub(crate) struct Real {
    pub raw: Raw,
    release: unsafe extern "C" fn(Handle) -> ClInt,
    /// The shared memory a buffer lives in; unmapped only after the buffer is released
    /// (fields drop after `Drop::drop`).
    _memory: Option<crate::shm::Region>,
    /// A sub-buffer keeps its parent (and the parent's shared memory) alive, a 1D image
    /// on a buffer its buffer.
    _parent: Option<Arc<Real>>,
}

impl Real {
    pub fn new(raw: Handle, release: unsafe extern "C" fn(Handle) -> ClInt) -> Arc<Real> {
        Self::with_memory(raw, release, None)
    }
    pub fn with_memory(
        raw: Handle,
        release: unsafe extern "C" fn(Handle) -> ClInt,
        memory: Option<crate::shm::Region>,
    ) -> Arc<Real> {
        debug_assert!(!raw.is_null());
        Arc::new(Real {
            raw: Raw(raw),
            release,
            _memory: memory,
            _parent: None,
        })
    }
    /// An object whose storage is `parent`'s: a sub-buffer, a 1D image on a buffer.
    pub fn sub_buffer(
        raw: Handle,
        release: unsafe extern "C" fn(Handle) -> ClInt,
        parent: Arc<Real>,
    ) -> Arc<Real> {
        debug_assert!(!raw.is_null());
        Arc::new(Real {
            raw: Raw(raw),
            release,
            _memory: None,
            _parent: Some(parent),
        })
    }
    pub fn handle(&self) -> Handle {
        self.raw.0
    }
}

impl Drop for Real {
    fn drop(&mut self) {
        // SAFETY: we own one reference to the object, taken at creation.
        unsafe { (self.release)(self.raw.0) };
    }
}

pub(crate) struct PlatformEntry {
    pub raw: Raw,
    pub devices: Vec<u32>,
}

pub(crate) struct DeviceEntry {
    pub raw: Raw,
    pub platform: u32,
    pub name: String,
    /// A CPU device with host-unified memory: `CL_MEM_USE_HOST_PTR` buffers are used in
    /// place, so a client may move their data with `memcpy` (the shared-memory path).
    pub host_memory: bool,
    /// The memory sizes a client is told (see [`presented::Memory`]).
    pub memory: presented::Memory,
    /// The names of the runtime's `CL_DEVICE_OPENCL_C_FEATURES`: the `__opencl_c_*`
    /// macros kernels see (see [`presented::device_info`]).
    pub c_features: Vec<String>,
}

/// The loaded runtime and what it shares.
pub(crate) struct Runtime {
    pub api: Api,
    pub platforms: Vec<PlatformEntry>,
    pub devices: Vec<DeviceEntry>,
}

/// Info strings are bounded so that a misbehaving runtime cannot make us allocate.
const INFO_BYTES_MAX: usize = 256 << 20;

fn info_string(query: &mut dyn FnMut(usize, *mut c_void, *mut usize) -> ClInt) -> String {
    let bytes = info_bytes(INFO_BYTES_MAX, query).unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .trim_end_matches('\0')
        .to_string()
}

impl Runtime {
    /// Device `index` (node-wide), `CL_INVALID_DEVICE` if there is none.
    pub fn device(&self, index: u32) -> Result<&DeviceEntry, ClInt> {
        self.devices
            .get(index as usize)
            .ok_or(cl::CL_INVALID_DEVICE)
    }

    /// Platform `index`, `CL_INVALID_PLATFORM` if there is none.
    pub fn platform(&self, index: u32) -> Result<&PlatformEntry, ClInt> {
        self.platforms
            .get(index as usize)
            .ok_or(cl::CL_INVALID_PLATFORM)
    }

    fn open(api: Api, config: &ServiceConfig) -> io::Result<Runtime> {
        let mut platforms = Vec::new();
        let mut devices = Vec::new();
        for raw in platform_ids(&api) {
            if !serves_platform(&api, raw, config) {
                continue;
            }
            let devs = device_ids(&api, raw);
            if devs.is_empty() {
                continue;
            }
            let platform = platforms.len() as u32;
            let mut indices = Vec::with_capacity(devs.len());
            for dev in devs {
                indices.push(devices.len() as u32);
                devices.push(device_entry(&api, dev, platform, config));
            }
            platforms.push(PlatformEntry {
                raw: Raw(raw),
                devices: indices,
            });
        }
        // A session's devices are a fixed-size mask (see `gate::DeviceMask`).
        if devices.len() > gate::DeviceMask::DEVICES_MAX {
            return Err(io::Error::other(format!(
                "the OpenCL platforms have {} devices: the service shares at most {} \
                 (name fewer platforms in [opencl] platforms)",
                devices.len(),
                gate::DeviceMask::DEVICES_MAX
            )));
        }
        Ok(Runtime {
            api,
            platforms,
            devices,
        })
    }
}

/// The runtime's platforms (none when it cannot list them).
fn platform_ids(api: &Api) -> Vec<Handle> {
    let mut n = 0u32;
    // SAFETY: valid out-pointers; the ICD loader answers with the platform count.
    let rc = unsafe { (api.clGetPlatformIDs)(0, std::ptr::null_mut(), &mut n) };
    let mut raws = vec![std::ptr::null_mut(); n as usize];
    if rc == cl::CL_SUCCESS && n > 0 {
        // SAFETY: `raws` has room for `n` handles.
        unsafe { (api.clGetPlatformIDs)(n, raws.as_mut_ptr(), std::ptr::null_mut()) };
    }
    raws
}

/// Whether the service offers platform `raw`: never this project's own remote
/// platform (a service would serve itself), and only one of `config.platforms` when
/// that names any.
fn serves_platform(api: &Api, raw: Handle, config: &ServiceConfig) -> bool {
    // SAFETY (both closures): `raw` is a platform handle of this runtime.
    let name = info_string(&mut |s, p, r| unsafe {
        (api.clGetPlatformInfo)(raw, cl::CL_PLATFORM_NAME, s, p, r)
    });
    let suffix = info_string(&mut |s, p, r| unsafe {
        (api.clGetPlatformInfo)(raw, cl::CL_PLATFORM_ICD_SUFFIX_KHR, s, p, r)
    });
    if suffix == crate::ICD_SUFFIX || name.starts_with(crate::PLATFORM_NAME_PREFIX) {
        return false;
    }
    config.platforms.is_empty()
        || config
            .platforms
            .iter()
            .any(|want| name.contains(want.as_str()))
}

/// Every device of platform `raw` (none when it cannot list them).
fn device_ids(api: &Api, raw: Handle) -> Vec<Handle> {
    let mut count = 0u32;
    // SAFETY: valid out-pointers.
    let rc = unsafe {
        (api.clGetDeviceIDs)(
            raw,
            cl::CL_DEVICE_TYPE_ALL,
            0,
            std::ptr::null_mut(),
            &mut count,
        )
    };
    if rc != cl::CL_SUCCESS || count == 0 {
        return Vec::new();
    }
    let mut devs = vec![std::ptr::null_mut(); count as usize];
    // SAFETY: `devs` has room for `count` handles.
    unsafe {
        (api.clGetDeviceIDs)(
            raw,
            cl::CL_DEVICE_TYPE_ALL,
            count,
            devs.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    devs
}

/// Device `dev` of platform number `platform` as the service presents it: its name,
/// whether its memory is the host's, its memory within the client quota, and its
/// OpenCL C features.
fn device_entry(api: &Api, dev: Handle, platform: u32, config: &ServiceConfig) -> DeviceEntry {
    // SAFETY: `dev` is a device handle of this runtime.
    let dname = info_string(&mut |s, p, r| unsafe {
        (api.clGetDeviceInfo)(dev, cl::CL_DEVICE_NAME, s, p, r)
    });
    let flag = |param: u32| {
        // SAFETY: as above.
        info_bytes(16, &mut |s, p, r| unsafe {
            (api.clGetDeviceInfo)(dev, param, s, p, r)
        })
        .ok()
        .and_then(|b| {
            b.get(..4)
                .map(|x| u32::from_ne_bytes(x.try_into().expect("4")))
        })
    };
    let cpu = flag(cl::CL_DEVICE_TYPE).is_some_and(|t| u64::from(t) & cl::CL_DEVICE_TYPE_CPU != 0);
    let unified = flag(cl::CL_DEVICE_HOST_UNIFIED_MEMORY) == Some(1);
    let size = |param: u32| {
        // SAFETY: as above.
        info_bytes(16, &mut |s, p, r| unsafe {
            (api.clGetDeviceInfo)(dev, param, s, p, r)
        })
        .ok()
        .and_then(|b| b.try_into().ok().map(u64::from_ne_bytes))
    };
    let memory = presented::Memory::within_quota(
        size(cl::CL_DEVICE_GLOBAL_MEM_SIZE),
        size(cl::CL_DEVICE_MAX_MEM_ALLOC_SIZE),
        config.buffer_bytes_max,
    );
    // SAFETY: as above.
    let features = info_bytes(INFO_BYTES_MAX, &mut |s, p, r| unsafe {
        (api.clGetDeviceInfo)(dev, cl::CL_DEVICE_OPENCL_C_FEATURES, s, p, r)
    })
    .unwrap_or_default();
    DeviceEntry {
        raw: Raw(dev),
        platform,
        name: dname,
        host_memory: cpu && unified,
        memory,
        c_features: presented::names(&features),
    }
}

/// State shared by all threads of one service.
pub(crate) struct Shared {
    pub runtime: Runtime,
    pub config: ServiceConfig,
    pub metrics: Metrics,
    /// The task queue of each device, in device index order.
    pub devices: Vec<DeviceQueue>,
    pub clients: AtomicUsize,
    /// A handle of each connected client's socket, by connection number, so that a
    /// shutdown can end every session (see [`ServiceHandle::shutdown`]).
    pub connections: Mutex<HashMap<u64, Stream>>,
    pub shutdown: AtomicBool,
    pub host_id: Vec<u8>,
    pub programs: Mutex<programs::ProgramCache>,
    /// Name of the abstract Unix socket same-host clients may use (empty: none).
    pub local_socket: Vec<u8>,
    /// Spare buffers for large frame bodies.
    pub bodies: Arc<bodies::BodyPool>,
    /// In an isolated runtime process: where the node sees how long tasks run.
    pub busy: Option<busy::BusyPage>,
}

impl Shared {
    /// Buffer bytes one client may hold: the quota set, or without one the largest
    /// memory among the devices shared (each device refuses what it does not have).
    pub fn client_quota(&self) -> u64 {
        if self.config.buffer_bytes_max != ServiceConfig::NO_QUOTA {
            return self.config.buffer_bytes_max;
        }
        let largest = self.runtime.devices.iter().map(|d| d.memory.global).max();
        largest.unwrap_or(0).max(1)
    }
}

impl Shared {
    /// Ends every session as if its client had left (the reading direction of each
    /// connection is shut; results still go out) and refuses new ones.
    pub fn end_sessions(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        for stream in lock(&self.connections).values() {
            stream.shutdown_read();
        }
    }

    /// No client is connected and no task is queued or running.
    pub fn drained(&self) -> bool {
        self.clients.load(Ordering::SeqCst) == 0 && self.devices.iter().all(DeviceQueue::is_idle)
    }

    /// No client is connected: gives the memory their sessions and tasks used back to
    /// the system, so that an idle node holds what it held before they came. The spare
    /// body buffers go, and the allocator returns its free memory (`malloc_trim`):
    /// glibc keeps what threads freed in their arenas, and with the large frame bodies
    /// of big writes over TCP that was hundreds of MiB per client thread (a node that
    /// had served a program writing and reading 1 GiB stayed 170 MiB above its idle
    /// figure; 1.4 GB after many programs).
    pub fn release_idle_memory(&self) {
        self.bodies.clear();
        #[cfg(target_env = "gnu")]
        // SAFETY: malloc_trim only returns free memory of the allocator to the system.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// A running service. Dropping it does not stop it; call [`ServiceHandle::shutdown`].
pub struct ServiceHandle {
    local_addr: SocketAddr,
    kind: Kind,
}

enum Kind {
    InProcess {
        shared: Arc<Shared>,
        accept: Option<JoinHandle<()>>,
        accept_local: Option<JoinHandle<()>>,
    },
    Isolated(isolate::Supervisor),
}

impl ServiceHandle {
    /// The address the service listens on (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Names of the shared devices, in the node-wide index order clients see.
    pub fn device_names(&self) -> Vec<String> {
        match &self.kind {
            Kind::InProcess { shared, .. } => shared
                .runtime
                .devices
                .iter()
                .map(|d| d.name.clone())
                .collect(),
            Kind::Isolated(s) => s.device_names(),
        }
    }

    /// The queue of the shared device whose OpenCL handle (`cl_device_id`, from the
    /// same OpenCL library) is `device`, for the node's own use of it; `None` when the
    /// service does not share that device, or runs clients in runtime processes of
    /// their own (each has its own queue there; see [`isolate`]).
    pub fn lane(&self, device: Handle) -> Option<DeviceLane> {
        let Kind::InProcess { shared, .. } = &self.kind else {
            return None;
        };
        let index = shared
            .runtime
            .devices
            .iter()
            .position(|d| d.raw.0 == device)?;
        Some(DeviceLane::new(Arc::clone(shared), index))
    }

    /// Serves a client connection accepted elsewhere, as if it had come to the
    /// service's own listener: a TLS connection the node accepted, handshook and
    /// relays in plain text over one end of a Unix socket pair. `caller` says where
    /// it comes from (the gate sees its address and certificate, not the relay's).
    pub fn serve_connection(&self, stream: Stream, caller: gate::Caller) {
        match &self.kind {
            Kind::InProcess { shared, .. } => {
                if shared.shutdown.load(Ordering::SeqCst) {
                    return;
                }
                let shared = Arc::clone(shared);
                let entry = session::Entry::Ask(caller);
                let spawned = thread::Builder::new()
                    .name("ocl-client".to_string())
                    .spawn(move || session::serve_greeted(shared, stream, false, false, entry));
                if let Err(e) = spawned {
                    log::log!(ERROR, "cannot start a client thread: {e}");
                }
            }
            Kind::Isolated(s) => s.serve_connection(stream, caller),
        }
    }

    /// Clients connected now.
    pub fn clients_connected(&self) -> usize {
        match &self.kind {
            Kind::InProcess { shared, .. } => shared.clients.load(Ordering::SeqCst),
            Kind::Isolated(s) => s.clients_connected(),
        }
    }

    /// Bytes of device buffers all connected clients hold.
    pub fn client_buffer_bytes(&self) -> i64 {
        match &self.kind {
            Kind::InProcess { shared, .. } => shared.metrics.client_buffer_bytes.get(),
            Kind::Isolated(s) => s.metrics().client_buffer_bytes,
        }
    }

    /// OpenCL objects all connected clients hold.
    pub fn client_objects(&self) -> i64 {
        match &self.kind {
            Kind::InProcess { shared, .. } => shared.metrics.client_objects.get(),
            Kind::Isolated(s) => s.metrics().client_objects,
        }
    }

    /// Drains the service: stops accepting clients, stops reading from connected ones
    /// (each session ends as if its client had left, so everything it held is
    /// released and its shared-memory regions are unlinked), lets the tasks already
    /// queued run and send their results, and returns once no client and no task is
    /// left, or at `deadline`. Returns whether the drain completed. Isolated runtime
    /// processes drain the same way; those still running at `deadline` are killed.
    pub fn shutdown(self, deadline: Instant) -> bool {
        let (shared, accept, accept_local) = match self.kind {
            Kind::InProcess {
                shared,
                accept,
                accept_local,
            } => (shared, accept, accept_local),
            Kind::Isolated(s) => return s.shutdown(deadline),
        };
        shared.shutdown.store(true, Ordering::SeqCst);
        // Wake the accept calls so that they see the flag.
        let _ = TcpStream::connect(self.local_addr);
        if !shared.local_socket.is_empty() {
            let _ = crate::stream::Stream::connect_local(&shared.local_socket);
        }
        for t in [accept, accept_local].into_iter().flatten() {
            let _ = t.join();
        }
        shared.end_sessions();
        loop {
            let drained = shared.drained();
            if drained || Instant::now() >= deadline {
                return drained;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Loads OpenCL, opens the configured platforms, registers metrics in `registry` and
/// serves remote OpenCL clients on `addr` from background threads; with
/// [`ServiceConfig::isolation`] other than in-process, the runtime runs in supervised
/// child processes instead (see [`isolate`]).
///
/// Fails with `NotFound` when no OpenCL library can be loaded, so that a node without
/// OpenCL can log it and run without the service.
pub fn spawn(
    addr: SocketAddr,
    config: ServiceConfig,
    registry: &mut Registry,
) -> io::Result<ServiceHandle> {
    let listener = TcpListener::bind(addr)?;
    let local_addr = listener.local_addr()?;
    // What a node killed without a chance to drain (SIGKILL) left in shared memory.
    let orphans = crate::shm::remove_orphaned_regions();
    if orphans > 0 {
        log::emit(
            log::Source::Supervisor,
            tracing::Level::INFO,
            None,
            format_args!("removed {orphans} shared-memory region(s) of processes that have ended"),
        );
    }
    let (local_listener, local_socket) = open_local_socket(&config, local_addr.port());
    let kind = if config.isolation != Isolation::InProcess {
        Kind::Isolated(isolate::Supervisor::start(
            config,
            listener,
            local_listener,
            local_socket,
            registry,
        )?)
    } else {
        serve_in_process(config, listener, local_listener, local_socket, registry)?
    };
    Ok(ServiceHandle { local_addr, kind })
}

/// The Unix socket same-host clients may switch to (see `crate::stream`), and its
/// name as the `Hello` answer gives it (empty without one): a node that cannot open
/// one serves them over TCP.
fn open_local_socket(
    config: &ServiceConfig,
    port: u16,
) -> (Option<std::os::unix::net::UnixListener>, Vec<u8>) {
    let local_name = format!("netaccel-ocl-{}-{port}", std::process::id());
    let local_listener = if config.local_socket {
        bind_local(local_name.as_bytes())
            .map_err(|e| log::log!(WARN, "no local socket ({e}); same-host clients use TCP"))
            .ok()
    } else {
        None
    };
    let local_socket = if local_listener.is_some() {
        local_name.into_bytes()
    } else {
        Vec::new()
    };
    (local_listener, local_socket)
}

/// Opens the runtime in this process and serves the clients of `listener` and
/// `local_listener`, each on an accept thread.
fn serve_in_process(
    config: ServiceConfig,
    listener: TcpListener,
    local_listener: Option<std::os::unix::net::UnixListener>,
    local_socket: Vec<u8>,
    registry: &mut Registry,
) -> io::Result<Kind> {
    let page = Arc::new(metrics::MetricsPage::create()?);
    let shared = start_shared(config, Arc::clone(&page), local_socket, None)?;
    let export = metrics::Export::register(registry, None);
    let names: Vec<String> = shared
        .runtime
        .devices
        .iter()
        .map(|d| d.name.clone())
        .collect();
    export.set_device_names(&names);
    export.add(std::process::id(), page);
    let accept_shared = Arc::clone(&shared);
    let accept = thread::Builder::new()
        .name("ocl-accept".to_string())
        .spawn(move || {
            accept_loop(
                accept_shared,
                listener.incoming().map(|s| s.map(Stream::Tcp)),
            )
        })?;
    let accept_local = match local_listener {
        Some(l) => {
            let shared = Arc::clone(&shared);
            Some(
                thread::Builder::new()
                    .name("ocl-accept-local".to_string())
                    .spawn(move || {
                        accept_loop(shared, l.incoming().map(|s| s.map(Stream::Unix)))
                    })?,
            )
        }
        None => None,
    };
    Ok(Kind::InProcess {
        shared,
        accept: Some(accept),
        accept_local,
    })
}

/// Opens the runtime and starts the device workers: everything that serves sessions
/// except their listeners (the service's own, or the node's in front of an isolated
/// runtime process). The service's metrics go to `metrics_page` (see [`metrics`]).
pub(crate) fn start_shared(
    config: ServiceConfig,
    metrics_page: Arc<metrics::MetricsPage>,
    local_socket: Vec<u8>,
    busy: Option<busy::BusyPage>,
) -> io::Result<Arc<Shared>> {
    let runtime = {
        // OpenCL runtimes (PoCL among them) do not survive being initialised from two
        // threads at once, e.g. by two services started in parallel tests.
        static INIT: Mutex<()> = Mutex::new(());
        let _init = INIT.lock().unwrap_or_else(|p| p.into_inner());
        let api =
            Api::load(&config.library).map_err(|e| io::Error::new(io::ErrorKind::NotFound, e))?;
        Runtime::open(api, &config)?
    };
    let metrics = Metrics::new(&metrics_page, runtime.devices.len());
    let devices = runtime
        .devices
        .iter()
        .map(|_| DeviceQueue::new(config.device_queue_depth_max, turns::ANTICIPATION_MAX))
        .collect();
    let program_cache = programs::ProgramCache::new(
        config.program_cache_entries_max,
        config.program_cache_bytes_max,
    );
    let bodies = bodies::BodyPool::new(config.body_spare_bytes_max, connection::LARGE_BODY);
    let shared = Arc::new(Shared {
        runtime,
        config,
        metrics,
        devices,
        clients: AtomicUsize::new(0),
        connections: Mutex::new(HashMap::new()),
        shutdown: AtomicBool::new(false),
        host_id: crate::shm::host_id(),
        programs: Mutex::new(program_cache),
        local_socket,
        bodies,
        busy,
    });
    for index in 0..shared.devices.len() {
        let shared = Arc::clone(&shared);
        thread::Builder::new()
            .name(format!("ocl-device-{index}"))
            .spawn(move || shared.devices[index].work(&shared, index))?;
    }
    Ok(shared)
}

/// Locks `m`. A thread that panicked while holding a lock has already failed its own
/// client; the state behind the lock stays usable for everyone else, so poisoning is
/// ignored everywhere in the service.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Binds the abstract-namespace Unix socket `name`.
fn bind_local(name: &[u8]) -> io::Result<std::os::unix::net::UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    std::os::unix::net::UnixListener::bind_addr(&addr)
}

fn accept_loop(shared: Arc<Shared>, incoming: impl Iterator<Item = io::Result<Stream>>) {
    for stream in incoming {
        if shared.shutdown.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name("ocl-client".to_string())
            .spawn(move || session::serve(shared, stream, false));
        if let Err(e) = spawned {
            log::log!(ERROR, "cannot start a client thread: {e}");
        }
    }
}
