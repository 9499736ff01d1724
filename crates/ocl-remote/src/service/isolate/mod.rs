//! The vendor runtime out of the node's process: supervised runtime processes.
//!
//! On a CPU device (PoCL) a client's kernel is machine code run in the process that
//! loaded the runtime. A kernel that writes out of bounds, stores through a null
//! pointer, traps or loops forever would corrupt or end that process; if it were the
//! node, every tenant of every device and front end (HTTP, RAC) would lose it.
//! Natively such a kernel ends only its own program. So the node keeps the runtime that
//! serves remote clients out of its own process:
//!
//! - The node listens (TCP, and the local Unix socket) as before; it hands each
//!   accepted connection, as a file descriptor over a Unix socket (`SCM_RIGHTS`), to a
//!   *runtime process*: the same executable started again with [`SUBCOMMAND`]
//!   ([`child`]), which runs the unchanged session code. The node keeps no copy of the
//!   connection, so the bytes go straight between client and runtime process (no
//!   relay, no added copy or hop on the round trip), and when the process dies the
//!   client's connection ends with it and the ICD turns that into CL errors.
//! - A same-host client's first connection (TCP, for its `Hello` only: it moves to the
//!   Unix socket at once) does not take a process: the node answers that `Hello`
//!   itself ([`greet`]).
//! - Shared memory keeps working: the runtime process creates the regions (named after
//!   its own pid) and the client maps them by name, as before. The node unlinks
//!   whatever a dead process left behind.
//! - Granularity ([`Isolation`]): one process per client connection (`PerSession`, the
//!   node's default) gives the native property: a hostile kernel ends its own session
//!   only. Its cost, a process start and a runtime initialisation, is paid ahead of
//!   time: the node keeps [`ServiceConfig::runtime_spares`] processes started and
//!   ready, so a client connecting does not wait for one (docs/benchmarks.md has the
//!   figures). `Shared` runs one process for all clients: cheaper in memory, and the
//!   device FIFO is shared between clients as in-process, but a crash ends every
//!   session (those clients get CL errors; the node starts a new process).
//! - Supervision: one thread per process waits for it (`waitpid`), so a death is seen
//!   at once; it is logged with its signal, counted in `/metrics`
//!   (`ocl_runtime_crashes_total{signal}`), and replaced at a bounded rate
//!   ([`ServiceConfig::runtime_starts_per_second_max`]). A watchdog reads each
//!   process's busy page ([`super::busy`]) and kills a process whose task has run
//!   longer than [`ServiceConfig::kernel_time_max`] (`ocl_runtime_kernel_timeouts_total`).
//!   Processes die with the node (`PR_SET_PDEATHSIG`) and drain with it: closing their
//!   control socket makes them finish their tasks and end their sessions.
//! - The node's own OpenCL slots do not share a device FIFO with isolated clients: on
//!   a CPU device there is no device state to protect between processes (kernels are
//!   threads the OS schedules), so each process runs its tasks in its own order.
//!   Device-wide fairness between remote clients and slots is the OS scheduler's.
//! - Metrics: each process keeps the service's metrics (task latency, queue depth,
//!   busy seconds, bytes, program cache, failed tasks) in a page the node created and
//!   handed over; `/metrics` sums the live pages and what ended processes counted
//!   (see [`super::metrics`]), under the same names as in process, beside the
//!   supervisor's own (`ocl_runtime_*`).

pub(crate) mod child;
mod greet;
pub(crate) mod log;
mod wire;

use std::collections::HashMap;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::account::TenantMemory;
use super::busy::BusyPage;
use super::metrics::{Export, MetricsPage};
use super::{gate, lock, Isolation, ServiceConfig};
use crate::stream::Stream;
use log::log;

pub use child::main as runtime_main;

/// The first argument that makes the node's executable (or `netaccel-ocl-service`) a
/// runtime process; both binaries check for it before parsing their command line.
pub const SUBCOMMAND: &str = "__netaccel-ocl-runtime";

/// How long a runtime process may take to open OpenCL and say ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an accepted client waits for a ready runtime process before it is closed.
const HAND_OVER_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest pause between two starts after processes failed to start in a row.
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// The supervisor's metrics, in the node's registry.
struct Metrics {
    processes: Gauge,
    starts: Counter,
    crashes: Family<Vec<(String, String)>, Counter>,
    kernel_timeouts: Counter,
    clients: Gauge,
    tasks_running: Gauge,
}

impl Metrics {
    fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            processes: Gauge::default(),
            starts: Counter::default(),
            crashes: Family::default(),
            kernel_timeouts: Counter::default(),
            clients: Gauge::default(),
            tasks_running: Gauge::default(),
        };
        registry.register(
            "ocl_runtime_processes",
            "Isolated OpenCL runtime processes alive (serving or ready)",
            m.processes.clone(),
        );
        registry.register(
            "ocl_runtime_starts",
            "Isolated OpenCL runtime processes started",
            m.starts.clone(),
        );
        registry.register(
            "ocl_runtime_crashes",
            "Runtime processes ended by a signal the node did not send (a client's kernel \
             or the vendor runtime crashed), by signal",
            m.crashes.clone(),
        );
        registry.register(
            "ocl_runtime_kernel_timeouts",
            "Runtime processes killed because a task ran longer than kernel_time_max",
            m.kernel_timeouts.clone(),
        );
        registry.register(
            "ocl_runtime_tasks_running",
            "Runtime processes running a task, as the watchdog last saw them",
            m.tasks_running.clone(),
        );
        m
    }
}

/// One runtime process, as the node sees it.
struct Process {
    pid: u32,
    control: UnixStream,
    busy: BusyPage,
    /// Where the process keeps the service's metrics (see [`super::metrics`]).
    metrics: Arc<MetricsPage>,
    /// The watchdog killed it (its task ran too long).
    timed_out: AtomicBool,
    /// The node killed it (a failed hand-over, the end of a drain).
    killed: AtomicBool,
    /// Clients handed to it and served (refused ones not counted).
    clients: AtomicUsize,
    /// The tenant memories of the clients handed to it, each once (see
    /// [`Inner::settle_tenant_memory`]).
    tenants: Mutex<Vec<Arc<TenantMemory>>>,
    /// The tenants of the clients handed to it (see [`log::Admitted`]).
    admitted: Arc<log::Admitted>,
}

impl Process {
    /// Kills the process unless it has been reaped: `pool` is the locked table, and a
    /// process is reaped and leaves it under that lock, so its pid cannot have been
    /// reused by another process.
    fn kill(&self, pool: &Pool) {
        if pool.live.contains_key(&self.pid) {
            // SAFETY: a child of ours that has not been reaped (see above).
            unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        }
    }
}

#[derive(Default)]
struct Pool {
    /// Processes that said ready and take clients.
    ready: Vec<Arc<Process>>,
    /// Processes started and not yet ready (or failed).
    starting: usize,
    /// Every process not yet reaped, by pid.
    live: HashMap<u32, Arc<Process>>,
    /// Processes that died before they were ready, in a row.
    failures: u32,
    /// The device names the first ready process reported.
    device_names: Option<Vec<String>>,
    /// What the node answers a same-host client's `Hello` on TCP (see [`greet`]), made
    /// from the first ready process's report.
    hello: Option<Arc<greet::HelloAnswer>>,
}

struct Inner {
    config: ServiceConfig,
    program: PathBuf,
    per_session: bool,
    local_socket: Vec<u8>,
    pool: Mutex<Pool>,
    changed: Condvar,
    shutdown: AtomicBool,
    metrics: Metrics,
    /// The processes' metrics pages, as `/metrics` shows them.
    export: Export,
    /// Connections whose `Hello` the node is reading (bounded by `clients_max`).
    greeting: AtomicUsize,
}

/// The node's side: listeners, the spare processes, their waiters and the watchdog.
pub(crate) struct Supervisor {
    inner: Arc<Inner>,
    local_addr: std::net::SocketAddr,
    threads: Vec<JoinHandle<()>>,
    spawner: Option<JoinHandle<()>>,
}

impl Supervisor {
    /// Starts the first runtime process and waits until it is ready (so that a node
    /// without OpenCL learns it now, as in-process), then serves the listeners.
    pub fn start(
        config: ServiceConfig,
        listener: TcpListener,
        local_listener: Option<UnixListener>,
        local_socket: Vec<u8>,
        registry: &mut Registry,
    ) -> io::Result<Supervisor> {
        let program = match &config.runtime_program {
            Some(p) => p.clone(),
            None => std::env::current_exe()?,
        };
        let local_addr = listener.local_addr()?;
        let per_session = config.isolation == Isolation::PerSession;
        let metrics = Metrics::register(registry);
        // One process per session: the node counts a client before handing it over
        // (see `hand_over`); a shared process counts its clients in its page.
        let export = Export::register(registry, per_session.then(|| metrics.clients.clone()));
        let inner = Arc::new(Inner {
            per_session,
            config,
            program,
            local_socket,
            pool: Mutex::new(Pool::default()),
            changed: Condvar::new(),
            shutdown: AtomicBool::new(false),
            metrics,
            export,
            greeting: AtomicUsize::new(0),
        });
        // The spawner forks every process: PR_SET_PDEATHSIG fires when the thread that
        // forked ends, so it must live as long as its processes (see `spawner`).
        let spawner = {
            let inner = Arc::clone(&inner);
            thread::Builder::new()
                .name("ocl-spawner".to_string())
                .spawn(move || inner.spawner())?
        };
        let mut supervisor = Supervisor {
            inner: Arc::clone(&inner),
            local_addr,
            threads: Vec::new(),
            spawner: Some(spawner),
        };
        if !inner.first_ready() {
            supervisor.stop_now();
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the OpenCL runtime process did not start (see its message above)",
            ));
        }
        supervisor.start_threads(listener, local_listener)?;
        Ok(supervisor)
    }

    /// Starts the watchdog and the threads that accept clients on `listener` and
    /// `local_listener`.
    fn start_threads(
        &mut self,
        listener: TcpListener,
        local_listener: Option<UnixListener>,
    ) -> io::Result<()> {
        let inner = Arc::clone(&self.inner);
        self.threads.push(
            thread::Builder::new()
                .name("ocl-watchdog".to_string())
                .spawn(move || inner.watchdog())?,
        );
        let tcp = Arc::clone(&self.inner);
        self.threads.push(
            thread::Builder::new()
                .name("ocl-accept".to_string())
                .spawn(move || tcp.accept_tcp(listener))?,
        );
        if let Some(l) = local_listener {
            let local = Arc::clone(&self.inner);
            self.threads.push(
                thread::Builder::new()
                    .name("ocl-accept-local".to_string())
                    .spawn(move || local.accept(l.incoming().map(|s| s.map(Stream::Unix))))?,
            );
        }
        Ok(())
    }

    /// A connection accepted elsewhere (see
    /// [`super::ServiceHandle::serve_connection`]): checked and handed over as one
    /// from the local socket is.
    pub fn serve_connection(&self, stream: Stream, caller: gate::Caller) {
        if !self.inner.shutdown.load(Ordering::SeqCst) {
            self.inner.check(stream, false, caller);
        }
    }

    pub fn device_names(&self) -> Vec<String> {
        lock(&self.inner.pool)
            .device_names
            .clone()
            .unwrap_or_default()
    }

    /// Clients connected now.
    pub fn clients_connected(&self) -> usize {
        let clients = if self.inner.per_session {
            self.inner.metrics.clients.get()
        } else {
            self.metrics().clients_connected
        };
        clients.max(0) as usize
    }

    /// The service's metrics as `/metrics` shows them now.
    pub(crate) fn metrics(&self) -> super::metrics::page::Snapshot {
        self.inner.export.total()
    }

    /// Drains (see [`super::ServiceHandle::shutdown`]).
    pub fn shutdown(mut self, deadline: Instant) -> bool {
        self.inner.shutdown.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.local_addr);
        if !self.inner.local_socket.is_empty() {
            let _ = Stream::connect_local(&self.inner.local_socket);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.inner.changed.notify_all();
        for p in lock(&self.inner.pool).live.values() {
            let _ = p.control.shutdown(std::net::Shutdown::Write);
        }
        let drained = self.inner.wait_for_no_process(deadline);
        self.stop_now();
        drained
    }

    /// Kills what is left and waits for the spawner, which outlives its processes.
    fn stop_now(&mut self) {
        self.inner.shutdown.store(true, Ordering::SeqCst);
        let pool = lock(&self.inner.pool);
        for p in pool.live.values() {
            p.killed.store(true, Ordering::SeqCst);
            p.kill(&pool);
        }
        drop(pool);
        self.inner.changed.notify_all();
        if let Some(t) = self.spawner.take() {
            let _ = t.join();
        }
    }
}

impl Inner {
    /// How many processes to keep started but not serving.
    fn spares(&self) -> usize {
        if self.per_session {
            self.config.runtime_spares.max(1)
        } else {
            1
        }
    }

    /// Keeps the pool filled, at most `runtime_starts_per_second_max` starts a second
    /// and with a growing pause after processes that failed to start; on shutdown,
    /// waits until every process is reaped (their death signal is tied to this thread).
    fn spawner(self: Arc<Self>) {
        let interval = Duration::from_secs(1) / self.config.runtime_starts_per_second_max.max(1);
        let mut next_start = Instant::now();
        loop {
            let failures = {
                let mut pool = lock(&self.pool);
                while !self.shutdown.load(Ordering::SeqCst)
                    && pool.ready.len() + pool.starting >= self.spares()
                {
                    pool = self.changed.wait(pool).unwrap_or_else(|p| p.into_inner());
                }
                if self.shutdown.load(Ordering::SeqCst) {
                    break;
                }
                pool.starting += 1;
                pool.failures
            };
            let backoff = if failures == 0 {
                Duration::ZERO
            } else {
                (Duration::from_millis(100) * 2u32.saturating_pow(failures - 1)).min(BACKOFF_MAX)
            };
            next_start = next_start.max(Instant::now()) + backoff;
            thread::sleep(next_start.saturating_duration_since(Instant::now()));
            next_start += interval;
            // Started and entered in the table under the lock, after a last look at
            // the flag: a drain that sets the flag and then closes the table's control
            // sockets sees every process there will be.
            let mut pool = lock(&self.pool);
            if self.shutdown.load(Ordering::SeqCst) {
                pool.starting -= 1;
                break;
            }
            let started = self.start_process(&mut pool);
            drop(pool);
            match started {
                Ok((process, child)) => self.watch(process, child),
                Err(e) => {
                    log!(ERROR, "cannot start an OpenCL runtime process: {e}");
                    let mut pool = lock(&self.pool);
                    pool.starting -= 1;
                    pool.failures += 1;
                    self.changed.notify_all();
                }
            }
        }
        self.wait_for_no_process(Instant::now() + Duration::from_secs(3600));
    }

    fn wait_for_no_process(&self, deadline: Instant) -> bool {
        let mut pool = lock(&self.pool);
        while !pool.live.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            pool = self
                .changed
                .wait_timeout(pool, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// Starts one runtime process and the thread that waits for it.
    fn start_process(&self, pool: &mut Pool) -> io::Result<(Arc<Process>, Child)> {
        let (control, theirs) = UnixStream::pair()?;
        let busy = BusyPage::create()?;
        let metrics = Arc::new(MetricsPage::create()?);
        let mode = if self.per_session {
            "session"
        } else {
            "shared"
        };
        let fds = [
            std::os::fd::AsRawFd::as_raw_fd(&theirs),
            std::os::fd::AsRawFd::as_raw_fd(busy.fd()),
            std::os::fd::AsRawFd::as_raw_fd(metrics.fd()),
        ];
        let mut command = runtime_command(&self.program, mode, fds);
        let mut child = command.spawn()?;
        drop(theirs);
        let admitted = Arc::new(log::Admitted::default());
        if let Some(stderr) = child.stderr.take() {
            let (pid, mode) = (child.id(), mode);
            let (gate, admitted) = (self.config.gate.clone(), Arc::clone(&admitted));
            let audit = move |line: &str| log::audit_refusal(gate.as_deref(), &admitted, line);
            let forwarding = thread::Builder::new()
                .name("ocl-runtime-log".to_string())
                .spawn(move || log::forward(stderr, pid, mode, &audit));
            if let Err(e) = forwarding {
                // Without a reader its stderr would fill and block it: not started.
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        }
        let process = Arc::new(Process {
            pid: child.id(),
            control,
            busy,
            metrics,
            timed_out: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            clients: AtomicUsize::new(0),
            tenants: Mutex::new(Vec::new()),
            admitted,
        });
        self.metrics.starts.inc();
        self.metrics.processes.inc();
        pool.live.insert(process.pid, Arc::clone(&process));
        self.export.add(process.pid, Arc::clone(&process.metrics));
        Ok((process, child))
    }

    /// Starts the thread that supervises a started process; without one, the process
    /// is killed and reaped here, as if it had failed to start.
    fn watch(self: &Arc<Self>, process: Arc<Process>, child: Child) {
        let inner = Arc::clone(self);
        let (process2, child) = (Arc::clone(&process), std::sync::Mutex::new(Some(child)));
        let child = Arc::new(child);
        let child2 = Arc::clone(&child);
        let spawned = thread::Builder::new()
            .name("ocl-runtime-wait".to_string())
            .spawn(move || {
                let child = lock(&child2).take().expect("taken once");
                inner.supervise(process2, child)
            });
        if let Err(e) = spawned {
            log!(
                ERROR,
                pid = process.pid,
                "cannot supervise a runtime process: {e}"
            );
            if let Some(mut child) = lock(&child).take() {
                let mut pool = lock(&self.pool);
                let _ = child.kill();
                let _ = child.wait();
                pool.live.remove(&process.pid);
                pool.starting -= 1;
                pool.failures += 1;
                self.metrics.processes.dec();
                self.changed.notify_all();
            }
        }
    }

    /// Waits, at most `READY_TIMEOUT`, for the first runtime process to get ready or
    /// to fail; whether one got ready (its device names are known).
    fn first_ready(&self) -> bool {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut pool = lock(&self.pool);
        while pool.device_names.is_none() && pool.failures == 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            pool = self
                .changed
                .wait_timeout(pool, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        pool.device_names.is_some()
    }

    /// Greets the process, adds it to the pool once ready, then waits for its end.
    fn supervise(self: Arc<Self>, process: Arc<Process>, mut child: Child) {
        let ready = self.handshake(&process);
        self.admit(&process, ready);
        wait_without_reaping(process.pid);
        // Counted and cleaned before the process leaves the table, so that a drain
        // that saw the table empty finds everything settled.
        let clients = self.count_out(&process);
        self.settle_tenant_memory(&process);
        let regions = crate::shm::remove_regions_of(process.pid);
        let status = {
            let mut pool = lock(&self.pool);
            // Reaped under the lock that every kill takes, and before the process
            // leaves the table that a drain waits on: a node that returns from its
            // drain leaves no zombie behind. It has exited, so this does not block.
            let status = child.wait();
            pool.ready.retain(|p| p.pid != process.pid);
            pool.live.remove(&process.pid);
            self.changed.notify_all();
            status
        };
        self.log_end(&process, status, clients, regions);
    }

    /// Takes off the tenant memories what the sessions of `process`, which has ended,
    /// still held (see [`crate::service::account`]): one session's bytes, as its
    /// metrics page says, for a process of one session; for a shared process, which
    /// held every session of the tenants it served, everything.
    fn settle_tenant_memory(&self, process: &Process) {
        let tenants = std::mem::take(&mut *lock(&process.tenants));
        if tenants.is_empty() {
            return;
        }
        if self.per_session {
            debug_assert!(tenants.len() == 1, "a process of one session, one tenant");
            let page = super::metrics::page::Snapshot::read(&process.metrics, 0);
            let held = u64::try_from(page.client_buffer_bytes).unwrap_or(0);
            tenants.iter().for_each(|t| t.give_back(held));
        } else {
            tenants.iter().for_each(|t| t.reset());
        }
    }

    /// Ends the start of `process`: into the pool when its handshake came back
    /// `ready` (with its platforms and device names), killed when it did not.
    fn admit(&self, process: &Arc<Process>, ready: io::Result<(Vec<Vec<u32>>, Vec<String>)>) {
        let mut pool = lock(&self.pool);
        pool.starting -= 1;
        match ready {
            Ok((platforms, names)) => {
                pool.failures = 0;
                self.export.set_device_names(&names);
                pool.device_names.get_or_insert(names);
                if pool.hello.is_none() && !self.local_socket.is_empty() {
                    pool.hello = Some(Arc::new(greet::HelloAnswer {
                        host_id: crate::shm::host_id(),
                        local_socket: self.local_socket.clone(),
                        platforms,
                    }));
                }
                if !self.shutdown.load(Ordering::SeqCst) {
                    pool.ready.push(Arc::clone(process));
                }
            }
            Err(ref e) => {
                pool.failures += 1;
                if !self.shutdown.load(Ordering::SeqCst) {
                    log!(
                        ERROR,
                        pid = process.pid,
                        "OpenCL runtime process {} did not get ready: {e}",
                        process.pid
                    );
                }
                process.kill(&pool);
            }
        }
        self.changed.notify_all();
    }

    /// Takes an ended process out of the metrics (its task still marked running
    /// counts as failed); returns how many clients it served.
    fn count_out(&self, process: &Process) -> usize {
        self.metrics.processes.dec();
        let mut clients = process.clients.load(Ordering::SeqCst);
        self.metrics.clients.dec_by(clients as i64);
        if !self.per_session {
            // A shared process counts its clients in its metrics page.
            let page = super::metrics::page::Snapshot::read(&process.metrics, 0);
            clients = page.clients_connected.max(0) as usize;
        }
        // A task still marked running never answered its client: a failed task.
        self.export.end(process.pid, &process.busy.running());
        clients
    }

    /// Says why an ended process ended (a task over `kernel_time_max`, a signal, an
    /// exit status) and what was cleaned after it; counts a crash by its signal.
    fn log_end(
        &self,
        process: &Process,
        status: io::Result<std::process::ExitStatus>,
        clients: usize,
        regions: usize,
    ) {
        let signal = status.as_ref().ok().and_then(|s| s.signal());
        let pid = process.pid;
        if process.timed_out.load(Ordering::SeqCst) {
            log!(
                WARN,
                pid = pid,
                "runtime process {pid} killed: a task ran longer than \
                 kernel_time_max ({:?}); its {clients} client(s) lost their session",
                self.config.kernel_time_max
            );
        } else if let (Some(sig), false) = (signal, process.killed.load(Ordering::SeqCst)) {
            let name = signal_name(sig);
            self.metrics
                .crashes
                .get_or_create(&vec![("signal".to_string(), name.clone())])
                .inc();
            log!(
                WARN,
                pid = pid,
                "runtime process {pid} died of {name}; its {clients} client(s) \
                 lost their session, the node and other clients are unaffected"
            );
        } else if let Some(s) = status.ok().filter(|s| !s.success() && s.code().is_some()) {
            log!(WARN, pid = pid, "runtime process {pid} exited with {s}");
        }
        if regions > 0 {
            log!(
                INFO,
                pid = pid,
                "removed {regions} shared-memory region(s) process {pid} left"
            );
        }
    }

    /// Sends the configuration and waits for the platforms and device names.
    fn handshake(&self, process: &Process) -> io::Result<(Vec<Vec<u32>>, Vec<String>)> {
        let config = wire::encode_config(&self.config, &self.local_socket);
        wire::write_frame(&process.control, &config)?;
        process.control.set_read_timeout(Some(READY_TIMEOUT))?;
        let ready = wire::read_frame(&process.control)?;
        let ready = String::from_utf8_lossy(&ready);
        let mut lines = ready.split('\n');
        let platforms = lines
            .next()
            .and_then(greet::decode_platforms)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad ready frame"))?;
        let names = lines
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect();
        Ok((platforms, names))
    }

    /// Local connections go to a runtime process at once, or through the node's gate
    /// first when it has one (see [`Inner::check`]).
    fn accept(self: &Arc<Self>, incoming: impl Iterator<Item = io::Result<Stream>>) {
        for stream in incoming {
            if self.shutdown.load(Ordering::SeqCst) {
                return;
            }
            let Ok(stream) = stream else { continue };
            if self.config.gate.is_none() {
                self.hand_over(stream, false, None, false);
            } else {
                let caller = gate::Caller::of(&stream);
                self.check(stream, false, caller);
            }
        }
    }

    /// TCP connections: when the node offers its Unix socket, the node reads their
    /// `Hello` first (see [`greet`]), and so it does when it has a gate
    /// ([`Inner::check`]); at most `clients_max` at once, beyond which they go to a
    /// runtime process at once (refused there when the node has a gate, as it could
    /// not check them).
    fn accept_tcp(self: &Arc<Self>, listener: TcpListener) {
        for stream in listener.incoming() {
            if self.shutdown.load(Ordering::SeqCst) {
                return;
            }
            let Ok(stream) = stream else { continue };
            if self.config.gate.is_none() && lock(&self.pool).hello.is_none() {
                self.hand_over(Stream::Tcp(stream), false, None, false);
            } else {
                let stream = Stream::Tcp(stream);
                let caller = gate::Caller::of(&stream);
                self.check(stream, true, caller);
            }
        }
    }

    /// On a thread of its own (so that a slow client delays no other), at most
    /// `clients_max` at once: asks the node's gate about the connection's `Hello`
    /// (see [`crate::service::gate`]), answers a same-host `Hello` on TCP (`greet`
    /// and the node offers its Unix socket; see [`greet`]), and hands the connection
    /// over with its admission.
    pub(crate) fn check(self: &Arc<Self>, stream: Stream, greet: bool, caller: gate::Caller) {
        if self.over_clients_max() || !self.greeter_slot() {
            // Refused there when it could not be checked here.
            let refuse = self.config.gate.is_some();
            self.hand_over(stream, false, None, refuse);
            return;
        }
        let inner = Arc::clone(self);
        let spawned = thread::Builder::new()
            .name("ocl-greet".to_string())
            .spawn(move || {
                let (greeting, admission) = inner.check_now(&stream, greet, &caller);
                inner.greeting.fetch_sub(1, Ordering::SeqCst);
                match greeting {
                    greet::Greeting::Gone => {}
                    greet::Greeting::Untouched => inner.hand_over(stream, false, admission, false),
                    greet::Greeting::Greeted => inner.hand_over(stream, true, admission, false),
                }
            });
        if let Err(e) = spawned {
            self.greeting.fetch_sub(1, Ordering::SeqCst);
            log!(ERROR, "cannot start a thread to greet a client: {e}");
        }
    }

    /// The gate's answer for `stream` (a refused client is told and gone), then the
    /// greeting of a same-host TCP client.
    fn check_now(
        &self,
        stream: &Stream,
        greet: bool,
        caller: &gate::Caller,
    ) -> (greet::Greeting, Option<gate::Admission>) {
        let admission = match &self.config.gate {
            Some(g) => {
                // Known since the first process was ready (before any client).
                let devices = lock(&self.pool).device_names.clone().unwrap_or_default();
                match gate::admit_first(stream, caller, g.as_ref(), &devices) {
                    gate::Checked::Admitted(a) => Some(a),
                    gate::Checked::Closed => return (greet::Greeting::Gone, None),
                }
            }
            None => None,
        };
        let hello = lock(&self.pool).hello.clone();
        let devices = admission
            .as_ref()
            .map_or(gate::DeviceMask::ALL, |a| a.devices);
        let greeting = match (stream, hello) {
            (Stream::Tcp(tcp), Some(hello)) if greet => greet::greet(tcp, &hello, devices),
            _ => greet::Greeting::Untouched,
        };
        (greeting, admission)
    }

    /// Takes one of the `clients_max` places for a connection being greeted.
    fn greeter_slot(&self) -> bool {
        if self.greeting.fetch_add(1, Ordering::SeqCst) < self.config.clients_max {
            return true;
        }
        self.greeting.fetch_sub(1, Ordering::SeqCst);
        false
    }

    /// One process per session counts its clients here; a shared process counts its own.
    fn over_clients_max(&self) -> bool {
        self.per_session && self.metrics.clients.get() >= self.config.clients_max as i64
    }

    /// Gives `stream` to a ready process, waiting for one up to [`HAND_OVER_TIMEOUT`];
    /// `greeted`: the node answered its `Hello` (see [`greet`]); `admission`: what the
    /// node's gate admitted it as; `refuse`: refused there whatever the count.
    fn hand_over(
        &self,
        stream: Stream,
        greeted: bool,
        admission: Option<gate::Admission>,
        refuse: bool,
    ) {
        debug_assert!(
            refuse || self.config.gate.is_none() || admission.is_some(),
            "with a gate, only an admitted client is served"
        );
        let deadline = Instant::now() + HAND_OVER_TIMEOUT;
        let process = {
            let mut pool = lock(&self.pool);
            loop {
                if self.shutdown.load(Ordering::SeqCst) {
                    return;
                }
                if !pool.ready.is_empty() {
                    break if self.per_session {
                        let p = pool.ready.remove(0);
                        self.changed.notify_all();
                        p
                    } else {
                        Arc::clone(&pool.ready[0])
                    };
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    log!(WARN, "no OpenCL runtime process ready; client closed");
                    return;
                }
                pool = self
                    .changed
                    .wait_timeout(pool, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        };
        let refuse = refuse || self.over_clients_max();
        // Counted before the hand-over: once the process has the connection it may
        // answer the client at once, and a client that was answered must find itself
        // counted. Should the hand-over fail, the process is killed, and reaping it
        // takes its clients off the count.
        if self.per_session && !refuse {
            process.clients.fetch_add(1, Ordering::SeqCst);
            self.metrics.clients.inc();
        }
        if let Some(a) = &admission {
            process.admitted.add(&a.tenant);
        }
        if let Some(memory) = admission.as_ref().and_then(|a| a.memory.as_ref()) {
            let mut tenants = lock(&process.tenants);
            if !tenants.iter().any(|t| Arc::ptr_eq(t, memory)) {
                tenants.push(Arc::clone(memory));
            }
        }
        let record = wire::ClientRecord {
            unix: matches!(stream, Stream::Unix(_)),
            refuse,
            greeted,
            admission,
        };
        if let Err(e) = wire::send_client(&process.control, &stream, &record) {
            log!(
                ERROR,
                pid = process.pid,
                "cannot hand a client to runtime process {}: {e}",
                process.pid
            );
            process.killed.store(true, Ordering::SeqCst);
            process.kill(&lock(&self.pool));
        }
        // `stream` drops here: the process holds the only copy of the connection.
    }

    /// Kills processes whose running task is older than `kernel_time_max` (zero: no
    /// bound) and counts the processes running a task.
    fn watchdog(&self) {
        let bound = Some(self.config.kernel_time_max).filter(|b| !b.is_zero());
        let tick = bound.map_or(Duration::from_millis(250), |b| {
            (b / 4).clamp(Duration::from_millis(10), Duration::from_millis(250))
        });
        while !self.shutdown.load(Ordering::SeqCst) {
            thread::sleep(tick);
            let mut running = 0;
            let pool = lock(&self.pool);
            for p in pool.live.values() {
                let Some(ran) = p.busy.longest() else {
                    continue;
                };
                running += 1;
                if bound.is_some_and(|b| ran > b) && !p.timed_out.swap(true, Ordering::SeqCst) {
                    self.metrics.kernel_timeouts.inc();
                    p.kill(&pool);
                }
            }
            drop(pool);
            self.metrics.tasks_running.set(running);
        }
    }
}

/// The command that starts a runtime process of `mode` from `program`, handing it
/// `[control, busy, metrics]` (fds of the node) as the fds it expects (see `child`).
fn runtime_command(program: &std::path::Path, mode: &str, fds: [i32; 3]) -> Command {
    let [their_fd, busy_fd, metrics_fd] = fds;
    let mut command = Command::new(program);
    command
        .args([SUBCOMMAND, mode])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // Its lines go to the node's log (see [`log`]).
        .stderr(Stdio::piped());
    let parent = std::process::id() as i32;
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(move || {
            // Die with the node, even if it is killed without a chance to drain.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::getppid() != parent
            {
                libc::_exit(1);
            }
            // Out of the node's process group: a terminal's Ctrl-C reaches the node,
            // which drains its runtime processes, and not them directly.
            libc::setpgid(0, 0);
            // The fds the runtime process expects (see `child`). All are first
            // moved above them, so that none lands on another's number; dup2
            // clears close-on-exec on the final copies.
            let control = libc::fcntl(their_fd, libc::F_DUPFD_CLOEXEC, 10);
            let busy = libc::fcntl(busy_fd, libc::F_DUPFD_CLOEXEC, 10);
            let metrics = libc::fcntl(metrics_fd, libc::F_DUPFD_CLOEXEC, 10);
            if control < 0
                || busy < 0
                || metrics < 0
                || libc::dup2(control, child::CONTROL_FD) < 0
                || libc::dup2(busy, child::BUSY_FD) < 0
                || libc::dup2(metrics, child::METRICS_FD) < 0
            {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    command
}

/// Waits for child `pid` to end without reaping it (`WNOWAIT`): until it is reaped,
/// under the pool's lock, its pid cannot be reused, so the watchdog's and the drain's
/// kill cannot reach another process.
fn wait_without_reaping(pid: u32) {
    // SAFETY: a zeroed siginfo_t is a valid out-parameter.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; `info` is a valid out-pointer.
    while unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) } != 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
}

fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}
