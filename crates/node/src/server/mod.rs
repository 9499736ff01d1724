//! Listeners and network threads.
//!
//! Each network thread runs its own event loop (the node's own, `evloop`, on epoll by
//! default or with an io_uring ring; a single-threaded tokio runtime with
//! `network = "tokio"`) with its own listening socket bound with `SO_REUSEPORT`: the kernel
//! spreads connections over the threads, and a connection's whole life (parse, inline
//! execution, response) stays on one core with no lock on the hot path (after F4T's
//! per-core scaling).

mod evloop;

use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};
use tokio::net::{TcpListener, TcpStream};

use crate::config::Config;
use crate::core::tenant::auth::Base;
use crate::device::StartError;
use crate::front::admission::{handshake, ConnectionGuard};
use crate::node::Node;
use crate::registry::{DeviceKind, Lease, Reported};
use crate::telemetry::Protocol;

/// A started node.
pub struct Running {
    pub node: Arc<Node>,
    pub http_addr: SocketAddr,
    pub rac_addr: SocketAddr,
    /// The HTTPS and RAC-over-TLS listeners' addresses, when configured.
    pub https_addr: Option<SocketAddr>,
    pub rac_tls_addr: Option<SocketAddr>,
    /// Where gRPC is served, unless it is off (or its default address was taken).
    pub grpc_addr: Option<SocketAddr>,
    /// The gRPC-over-TLS listener's address, when configured.
    pub grpc_tls_addr: Option<SocketAddr>,
    threads: Vec<JoinHandle<()>>,
    /// Registration with the registry, when the node has one.
    lease: Option<Lease>,
}

/// Starts slots and network threads; returns once the listeners are bound.
///
/// Blocks SIGTERM and SIGINT in the calling thread first, so that every thread the node
/// starts (and every thread an OpenCL runtime starts inside it) inherits the mask and
/// the signals wait for [`Running::run_until_signal`]. Call it before starting any other
/// thread that should not see them.
pub fn start(mut config: Config) -> Result<Running, StartError> {
    block_termination_signals();
    let fd_limit = prepare(&mut config)?;
    let node = Node::new(
        config,
        Arc::new(crate::front::opencl::OpenClGate::default()),
    )?;
    crate::front::opencl::start_tls(&node)?;
    let threads_wanted = node.config.io_threads();
    let (http_addr, http) = bind_all(node.config.http, threads_wanted)?;
    let (rac_addr, rac) = bind_all(node.config.rac, threads_wanted)?;
    let (https_addr, mut https) = bind_optional(node.config.tls.https, threads_wanted)?;
    let (rac_tls_addr, mut rac_tls) = bind_optional(node.config.tls.rac, threads_wanted)?;
    let (grpc_addr, mut grpc) = bind_grpc(node.config.grpc, threads_wanted)?;
    let (grpc_tls_addr, mut grpc_tls) = bind_optional(node.config.tls.grpc, threads_wanted)?;
    let mut threads = http
        .into_iter()
        .zip(rac)
        .enumerate()
        .map(|(i, (http, rac))| {
            let node = Arc::clone(&node);
            let listeners = Listeners {
                http,
                rac,
                https: https.pop(),
                rac_tls: rac_tls.pop(),
                grpc: grpc.pop(),
                grpc_tls: grpc_tls.pop(),
            };
            std::thread::Builder::new()
                .name(format!("net-{i}"))
                .spawn(move || network_thread(node, listeners, i))
                .map_err(|e| format!("cannot start network thread: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let network_threads = threads.len();
    if let Some(tls) = &node.tls {
        let acceptor = tls.clone();
        let reload = move || {
            tracing::info!("SIGHUP: reloading the TLS certificate");
            let _ = acceptor.reload();
        };
        threads.push(on_sighup(
            "tls-reload",
            reload,
            Some(node.shutdown_signal()),
        )?);
    }
    let mut running = Running {
        node,
        http_addr,
        rac_addr,
        https_addr,
        rac_tls_addr,
        grpc_addr,
        grpc_tls_addr,
        threads,
        lease: None,
    };
    running.log_listening(network_threads, fd_limit);
    // Registered only once the listeners are bound: their ports are what it reports.
    running.lease = register(
        &running.node,
        crate::registry::Advertised {
            opencl: running.node.opencl_addr(),
            https: https_addr,
            rac_tls: rac_tls_addr,
            grpc: grpc_addr,
            grpc_tls: grpc_tls_addr,
            ..crate::registry::Advertised::listening(http_addr, rac_addr)
        },
    )?;
    Ok(running)
}

/// Readies a configuration to start with: validated, its deprecated settings warned
/// about, the open-file limit raised for its connections (the limit is returned), and
/// the io_uring network path swapped for epoll when the kernel refuses io_uring.
fn prepare(config: &mut Config) -> Result<u64, StartError> {
    config.validate().map_err(StartError::Config)?;
    for sentence in &config.deprecated {
        tracing::warn!("{sentence}");
    }
    let fd_limit = raise_fd_limit(config)?;
    if config.network == crate::config::Network::IoUring {
        if let Err(e) = crate::net::uring::probe() {
            tracing::error!(
                error = %e,
                "network = \"io_uring\" but the kernel refuses io_uring (disabled by kernel.io_uring_disabled, a seccomp profile or a kernel before 6.0): serving on epoll instead"
            );
            config.network = crate::config::Network::Epoll;
        }
    }
    Ok(fd_limit)
}

/// Starts the registry lease of a node that has a registry, advertising its front ends
/// `listening` at the address others reach it by.
fn register(
    node: &Arc<Node>,
    listening: crate::registry::Advertised,
) -> Result<Option<Lease>, StartError> {
    let Some(registry) = &node.registry else {
        return Ok(None);
    };
    let at = registry.advertised(listening);
    Ok(Some(Lease::start(
        Arc::clone(registry),
        reported(node),
        at,
    )?))
}

impl Running {
    /// The start-up line: where each front end listens and with what.
    fn log_listening(&self, network_threads: usize, fd_limit: u64) {
        let (node, or) = (&self.node, |a: Option<SocketAddr>, none: &str| {
            a.map_or_else(|| none.to_string(), |a| a.to_string())
        });
        tracing::info!(
            http = %self.http_addr,
            rac = %self.rac_addr,
            https = %or(self.https_addr, "none"),
            rac_tls = %or(self.rac_tls_addr, "none"),
            grpc = %or(self.grpc_addr, "off"),
            grpc_tls = %or(self.grpc_tls_addr, "none"),
            network_threads,
            network = ?node.config.network,
            slots = node.dispatcher.slots().len(),
            connections_max = node.config.connections_max,
            open_files_max = fd_limit,
            "netaccel node listening"
        );
    }

    /// What replaces the node's tenants with those of a configuration read again
    /// (SIGHUP): see `front::admin::reload_tenants`. `true` when it took.
    pub fn tenant_reloader(&self) -> impl Fn(Result<Config, String>) -> bool + Send + 'static {
        let node = Arc::clone(&self.node);
        move |config| {
            if node.config.tenants_from_registry {
                tracing::info!(
                    "SIGHUP: this node's tenants come from the registry; the file's are not read"
                );
                return true;
            }
            crate::front::admin::reload_tenants(&node, config, "signal").is_ok()
        }
    }

    /// Serves until SIGTERM or SIGINT, then drains and returns.
    pub fn run_until_signal(self) {
        let signal = wait_for_termination_signal();
        tracing::info!("{signal}: draining");
        self.shutdown();
    }

    /// Deregisters from the registry, stops accepting, lets connections finish their
    /// current request and remote OpenCL clients their queued tasks (all within one
    /// drain timeout), then stops the slots.
    ///
    /// Calls still queued or running at the drain deadline are answered `UNAVAILABLE`
    /// (HTTP 503) rather than dropped with their connections; the connections get
    /// [`DRAIN_ANSWER_GRACE`] more to write those answers. So the node is gone within
    /// `drain_timeout_ms` + [`DRAIN_ANSWER_GRACE`] (plus the registry's deregistration,
    /// bounded by the same deadline), whatever its slots are doing.
    pub fn shutdown(self) {
        let deadline = Instant::now() + Duration::from_millis(self.node.config.drain_timeout_ms);
        // First, so that the registry migrates this node's instances while it drains.
        if let Some(lease) = &self.lease {
            lease.deregister(deadline);
        }
        // The OpenCL service drains beside the network threads, by the same deadline.
        let opencl = self
            .node
            .begin_shutdown()
            .map(|service| std::thread::spawn(move || service.shutdown(deadline)));
        while self.node.open_connections() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if self.node.open_connections() > 0 {
            let answered = self.node.dispatcher.abandon_all(
                "the node is shutting down and the call could not finish within its drain_timeout_ms; retry",
            );
            tracing::warn!(
                calls = answered,
                open_connections = self.node.open_connections(),
                "drain deadline passed: calls still queued or running answered UNAVAILABLE"
            );
        }
        for t in self.threads {
            let _ = t.join();
        }
        if let Some(opencl) = opencl {
            if !opencl.join().unwrap_or(false) {
                tracing::warn!(
                    "remote OpenCL clients or tasks were still running at the drain deadline"
                );
            }
        }
        if let Some(lease) = self.lease {
            lease.join(deadline);
        }
        self.node.dispatcher.stop();
        tracing::info!(
            open_connections = self.node.open_connections(),
            "node stopped"
        );
    }
}

/// The signals that stop the node.
const TERMINATION_SIGNALS: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGINT];

fn termination_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set before sigaddset reads it.
    unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        for signal in TERMINATION_SIGNALS {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Blocks SIGTERM and SIGINT in the calling thread (and the threads it starts later).
///
/// They are taken synchronously by [`wait_for_termination_signal`] instead of by a
/// handler, because a handler is not ours to keep: OpenCL runtimes built on LLVM
/// (PoCL among them) install LLVM's handlers, which remove temporary files and then
/// re-raise the signal with its default action, killing the node with no drain.
/// A signal blocked in every thread is never handed to any handler.
fn block_termination_signals() {
    let set = termination_set();
    // SAFETY: a valid, initialised set; the old mask is not wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Waits for SIGTERM or SIGINT and names the one that came.
fn wait_for_termination_signal() -> &'static str {
    block_termination_signals();
    let set = termination_set();
    loop {
        let mut signal = 0;
        // SAFETY: a valid set of blocked signals and a place for the answer.
        if unsafe { libc::sigwait(&set, &mut signal) } == 0 {
            return if signal == libc::SIGTERM {
                "SIGTERM"
            } else {
                "SIGINT"
            };
        }
    }
}

/// One listener per network thread on the same address. With port 0 the first bind
/// picks the port and the others join it.
fn bind_all(addr: SocketAddr, count: usize) -> Result<(SocketAddr, Vec<StdListener>), String> {
    if addr.port() != 0 {
        probe_free(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    }
    let first = bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = first.local_addr().map_err(|e| e.to_string())?;
    let mut listeners = vec![first];
    for _ in 1..count {
        listeners.push(bind(bound).map_err(|e| format!("cannot listen on {bound}: {e}"))?);
    }
    Ok((bound, listeners))
}

/// SO_REUSEPORT would let a second node (same user) silently share the port with a
/// running one, the kernel splitting connections between them. A plain bind first
/// (address reuse only, so TIME_WAIT does not block) fails as it should when anything
/// already listens there.
fn probe_free(addr: SocketAddr) -> io::Result<()> {
    let probe = Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    probe.set_reuse_address(true)?;
    probe.bind(&addr.into())?;
    probe.listen(1)
}

/// [`bind_all`] for a listener that may be unconfigured.
fn bind_optional(
    addr: Option<SocketAddr>,
    count: usize,
) -> Result<(Option<SocketAddr>, Vec<StdListener>), String> {
    match addr {
        Some(addr) => bind_all(addr, count).map(|(bound, all)| (Some(bound), all)),
        None => Ok((None, Vec::new())),
    }
}

/// The gRPC listeners, one per network thread, or none when gRPC is off. When the
/// default address is taken the node serves without gRPC and says so (see
/// [`crate::config::GRPC_DEFAULT`]); any other address must be free.
fn bind_grpc(
    addr: Option<SocketAddr>,
    count: usize,
) -> Result<(Option<SocketAddr>, Vec<StdListener>), String> {
    let Some(addr) = addr else {
        return Ok((None, Vec::new()));
    };
    match bind_all(addr, count) {
        Ok((bound, listeners)) => Ok((Some(bound), listeners)),
        Err(e) if addr == crate::config::GRPC_DEFAULT => {
            tracing::warn!(
                error = %e,
                "the default gRPC address is taken: serving without gRPC (set grpc = \"ADDR\" or \"off\" to choose)"
            );
            Ok((None, Vec::new()))
        }
        Err(e) => Err(e),
    }
}

fn bind(addr: SocketAddr) -> io::Result<StdListener> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    Ok(socket.into())
}

/// One network thread's listening sockets (TLS ones when configured).
struct Listeners {
    http: StdListener,
    rac: StdListener,
    https: Option<StdListener>,
    rac_tls: Option<StdListener>,
    grpc: Option<StdListener>,
    grpc_tls: Option<StdListener>,
}

/// Accepts on `listener`, or never when there is none.
async fn accept_optional(listener: &Option<TcpListener>) -> io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// Network thread `index` (`net-{index}`): accepts on its own listeners and serves
/// the connections the kernel gave them, all on this thread: on the node's own event
/// loop ([`evloop`], `network = "epoll"` or `"io_uring"`), or on a tokio runtime
/// (`network = "tokio"`, below).
fn network_thread(node: Arc<Node>, listeners: Listeners, index: usize) {
    if node.config.network != crate::config::Network::Tokio {
        return evloop::network_thread(node, listeners, index);
    }
    // One network thread (the first) also rolls the refusal log's windows.
    let roll_logs = index == 0;
    let accepted_here = node.metrics.connections_accepted(index);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("network runtime");
    rt.block_on(async move {
        let register = |l: StdListener| TcpListener::from_std(l).expect("registering a listener");
        let http = register(listeners.http);
        let rac = register(listeners.rac);
        let https = listeners.https.map(register);
        let rac_tls = listeners.rac_tls.map(register);
        spawn_grpc(&node, listeners.grpc, listeners.grpc_tls);
        let mut shutdown = node.shutdown_signal();
        let mut roll = roll_interval();
        loop {
            let (accepted, protocol, tls) = tokio::select! {
                accepted = http.accept() => (accepted, Protocol::Http, false),
                accepted = rac.accept() => (accepted, Protocol::Rac, false),
                accepted = accept_optional(&https) => (accepted, Protocol::Http, true),
                accepted = accept_optional(&rac_tls) => (accepted, Protocol::Rac, true),
                _ = roll.tick(), if roll_logs => {
                    node.refusals.roll();
                    continue;
                }
                _ = shutdown.changed() => break,
            };
            if accepted.is_ok() {
                accepted_here.inc();
            }
            match accepted {
                Ok((stream, peer)) if tls => accept_tls(&node, stream, peer, protocol),
                Ok((stream, peer)) => accept(&node, stream, peer, protocol),
                Err(e) => accept_failed(e).await,
            }
        }
        drop((http, rac, https, rac_tls));
        drain_wait(&node).await;
    });
}

/// An accept failed, typically for want of descriptors (EMFILE): says so and backs
/// off briefly instead of spinning on a listener that stays ready. One home for every
/// accept loop (the tokio network thread's, the own loop's and its companion's).
async fn accept_failed(e: std::io::Error) {
    tracing::warn!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// Waits for the connections to close, or the drain's deadline. Past it,
/// [`Running::shutdown`] answers the calls still in slots; the grace lets the
/// connections write those answers.
async fn drain_wait(node: &Node) {
    let deadline =
        Instant::now() + Duration::from_millis(node.config.drain_timeout_ms) + DRAIN_ANSWER_GRACE;
    while node.open_connections() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Serves the gRPC listeners (plain, and TLS when configured) on this thread's tokio
/// runtime: tonic's server drives their connections beside the thread's accept loop,
/// and stops by itself at the shutdown signal.
fn spawn_grpc(node: &Arc<Node>, grpc: Option<StdListener>, grpc_tls: Option<StdListener>) {
    let register = |l: StdListener| TcpListener::from_std(l).expect("registering a listener");
    if let Some(grpc) = grpc {
        let incoming = crate::front::grpc::accepted(Arc::clone(node), register(grpc));
        tokio::spawn(crate::front::grpc::serve(Arc::clone(node), incoming));
    }
    if let (Some(grpc), Some(tls)) = (grpc_tls, node.tls.clone()) {
        let incoming = crate::front::grpc::accepted_tls(Arc::clone(node), register(grpc), tls);
        tokio::spawn(crate::front::grpc::serve(Arc::clone(node), incoming));
    }
}

/// The refusal log's one-second windows, rolled by one network thread (the first); a
/// tick missed under load is not made up for.
fn roll_interval() -> tokio::time::Interval {
    let mut roll = tokio::time::interval(Duration::from_secs(1));
    roll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    roll
}

/// After the drain deadline, how long connections have to write the `UNAVAILABLE`
/// answers of the calls the slots gave up on before the node exits.
pub const DRAIN_ANSWER_GRACE: Duration = Duration::from_secs(1);

/// Counts a new connection against `connections_max`; over it, answers the refusal
/// (in plain text, also on a TLS listener: the handshake is not worth its CPU then).
fn open(
    node: &Arc<Node>,
    stream: TcpStream,
    protocol: Protocol,
) -> Option<(TcpStream, ConnectionGuard)> {
    let _ = stream.set_nodelay(true);
    // An idle connection must wait for input without holding a read buffer.
    crate::net::netio::forget_assumed_readiness(&stream);
    let Some(guard) = ConnectionGuard::open(node, protocol) else {
        if protocol == Protocol::Http {
            node.http_requests(503).inc();
        }
        tokio::spawn(refuse_connection(stream, protocol));
        return None;
    };
    Some((stream, guard))
}

fn accept(node: &Arc<Node>, stream: TcpStream, peer: SocketAddr, protocol: Protocol) {
    let Some((stream, guard)) = open(node, stream, protocol) else {
        return;
    };
    serve_plain(node, stream, guard, peer, protocol);
}

/// Where a connection's task is spawned: this thread's tokio runtime, or the node's
/// own event loop ([`crate::net::evloop`]).
trait Spawner {
    fn spawn<F: std::future::Future<Output = ()> + Send + 'static>(task: F);
}

/// [`Spawner`] onto this thread's tokio runtime.
struct OnTokio;

impl Spawner for OnTokio {
    fn spawn<F: std::future::Future<Output = ()> + Send + 'static>(task: F) {
        tokio::spawn(task);
    }
}

/// Serves an accepted, counted plain connection on its own task, on this thread's
/// tokio runtime.
fn serve_plain<S: crate::net::netio::Transport>(
    node: &Arc<Node>,
    stream: S,
    guard: ConnectionGuard,
    peer: SocketAddr,
    protocol: Protocol,
) {
    serve_plain_on::<S, OnTokio>(node, stream, guard, peer, protocol);
}

/// Serves an accepted, counted plain connection on its own task, spawned by `Sp`.
fn serve_plain_on<S: crate::net::netio::Transport, Sp: Spawner>(
    node: &Arc<Node>,
    stream: S,
    guard: ConnectionGuard,
    peer: SocketAddr,
    protocol: Protocol,
) {
    let base = Base::Connection(node.tenants.anonymous());
    let node = Arc::clone(node);
    // One task type per front end: a single async block matching on the protocol
    // would be as large as the larger front end's future, and every idle HTTP
    // connection's task would carry RAC's room (issue 15).
    match protocol {
        Protocol::Http => Sp::spawn(async move {
            crate::front::http::serve(node, stream, peer, base).await;
            drop(guard);
        }),
        Protocol::Rac => Sp::spawn(async move {
            crate::front::rac::serve(node, stream, peer, base).await;
            drop(guard);
        }),
        Protocol::Grpc => unreachable!("gRPC connections are accepted by crate::front::grpc"),
    };
}

/// A connection on a TLS listener: its own task (so a plain connection's task does
/// not carry a TLS connection's room), the handshake on it, then the same front end
/// over the TLS stream, as the tenant the client certificate gave.
fn accept_tls(node: &Arc<Node>, stream: TcpStream, peer: SocketAddr, protocol: Protocol) {
    let Some(tls) = node.tls.clone() else {
        return;
    };
    let Some((stream, guard)) = open(node, stream, protocol) else {
        return;
    };
    let node = Arc::clone(node);
    tokio::spawn(async move {
        let Some((stream, base)) = handshake(&node, &tls, stream, protocol, peer).await else {
            return;
        };
        let stream = crate::net::tls::TlsStream::from(stream);
        match protocol {
            Protocol::Http => {
                crate::front::http::serve(Arc::clone(&node), stream, peer, base).await
            }
            Protocol::Rac => crate::front::rac::serve(Arc::clone(&node), stream, peer, base).await,
            Protocol::Grpc => unreachable!("gRPC connections are accepted by crate::front::grpc"),
        }
        drop(guard);
    });
}

/// What a connection refused at `connections_max` is told before it is closed.
const REFUSAL_MESSAGE: &str = "the node is at its connection limit; retry";

/// The refusal a connection over the bound gets: HTTP `503` with `Retry-After` and
/// `Connection: close`; RAC a `BUSY` result (request id 0: no call of the client's
/// has been read) whose payload says why. Then the connection closes.
pub fn refusal_bytes(protocol: Protocol) -> Vec<u8> {
    match protocol {
        Protocol::Http => {
            let body = format!(r#"{{"error":"{REFUSAL_MESSAGE}","code":"BUSY"}}"#);
            let mut out = format!(
                "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .into_bytes();
            out.extend_from_slice(body.as_bytes());
            out
        }
        Protocol::Rac => {
            let result = rac_proto::ResultHeader {
                kind: rac_proto::ResultKind::Result,
                status: rac_proto::Status::Busy,
                payload_len: REFUSAL_MESSAGE.len() as u32,
                request_id: 0,
                accel_id: 0,
                slot_id: rac_proto::NO_SLOT,
                queue_ns: 0,
                exec_ns: 0,
            };
            let mut out = result.encode().to_vec();
            out.extend_from_slice(REFUSAL_MESSAGE.as_bytes());
            out
        }
        // Closed before HTTP/2 starts: the client's call fails with a transport
        // error (see `crate::front::grpc::accepted`).
        Protocol::Grpc => Vec::new(),
    }
}

/// Answers a connection over the bound and closes it, within about a second (the
/// write, then a short linger so the answer is not lost to a reset when the client
/// had already sent a request).
async fn refuse_connection(mut stream: TcpStream, protocol: Protocol) {
    let bytes = refusal_bytes(protocol);
    let deadline = Instant::now() + Duration::from_millis(500);
    if crate::net::netio::write_with_deadline(&mut stream, &bytes, deadline)
        .await
        .is_ok()
    {
        crate::net::netio::linger(&mut stream).await;
    }
}

/// Descriptors the node needs besides its connections: listeners (two per network
/// thread), each runtime's epoll and wake-up descriptors, slots' threads, log files,
/// the registry's and remote OpenCL's sockets, and connections being refused.
pub const FD_MARGIN: u64 = 256;

/// Raises the soft open-file limit to what `connections_max` needs (the bound plus
/// [`FD_MARGIN`] and the listeners), up to the hard limit; refuses to start when
/// the hard limit is below that, naming both. Without this a node configured for
/// 20,000 connections would fail its accepts with `EMFILE` at the default soft limit
/// (often 1,024) and never reach its bound.
///
/// A `connections_max` left at its default is instead lowered to what the hard limit
/// allows, with a warning, so that the node starts with its defaults on any host (a
/// hard limit of 4,096 is common in containers); a bound set to anything else is the
/// operator's and is refused when it cannot be met.
fn raise_fd_limit(config: &mut Config) -> Result<u64, String> {
    let others = FD_MARGIN + 2 * config.io_threads() as u64;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(format!(
            "cannot read the open-file limit: {}",
            io::Error::last_os_error()
        ));
    }
    let fits = lim.rlim_max.saturating_sub(others);
    if config.connections_max == Config::default().connections_max
        && fits < config.connections_max as u64
        && fits > 0
    {
        tracing::warn!(
            hard_limit = lim.rlim_max,
            connections_max = fits,
            "the hard open-file limit is below what the default connections_max (10000) needs: serving at most {fits} connections (raise the hard limit, or set connections_max to silence this)"
        );
        config.connections_max = fits as usize;
    }
    let needed = config.connections_max as u64 + others;
    if lim.rlim_cur >= needed {
        return Ok(lim.rlim_cur);
    }
    if lim.rlim_max < needed {
        return Err(format!(
            "connections_max = {} needs {needed} open files (the bound + {others} for listeners and the node's own), but the hard open-file limit (RLIMIT_NOFILE) is {}: lower connections_max to at most {fits} or raise the hard limit (ulimit -Hn, LimitNOFILE= in a systemd unit)",
            config.connections_max, lim.rlim_max,
        ));
    }
    lim.rlim_cur = needed;
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(format!(
            "cannot raise the open-file limit to {needed} for connections_max = {}: {}",
            config.connections_max,
            io::Error::last_os_error()
        ));
    }
    Ok(needed)
}

/// What the registry lease reports of `node`: its dispatcher's slots and what each
/// device is.
fn reported(node: &Arc<Node>) -> Reported {
    let tenants = node.config.tenants_from_registry.then(|| {
        let node = Arc::clone(node);
        Box::new(move |doc: serde_json::Value| {
            let config = serde_json::from_value::<crate::config::TenantsPart>(doc)
                .map_err(|e| format!("[nodes]: {e}"))
                .and_then(|part| node.config.with_tenants(part));
            crate::front::admin::reload_tenants(&node, config, "registry")
        }) as crate::registry::TenantsSink
    });
    Reported {
        tenants,
        dispatcher: Arc::clone(&node.dispatcher),
        devices: node
            .devices
            .list
            .iter()
            .map(|d| DeviceKind {
                name: d.name.clone(),
                backend: d.backend.kind().as_str(),
                vendor: d.backend.vendor(),
                platform: d.backend.platform(),
                accelerators: node
                    .dispatcher
                    .catalog()
                    .iter()
                    .filter(|a| {
                        node.devices
                            .with_hostable(a, |h| d.backend.hosts(h))
                            .is_ok()
                    })
                    .map(|a| a.descriptor().name.clone())
                    .collect(),
            })
            .collect(),
    }
}

/// Runs `action` on every SIGHUP, on a thread named `name` with a runtime of its own,
/// until `shutdown` turns true (`None`: for the life of the process). Returns once the
/// signal is being listened for, so that a SIGHUP sent after the node started never
/// meets the default action (which ends the process). The one home of the node's
/// SIGHUP handling: the TLS certificate's reload and the tenants' both come through it.
pub fn on_sighup(
    name: &str,
    mut action: impl FnMut() + Send + 'static,
    shutdown: Option<tokio::sync::watch::Receiver<bool>>,
) -> Result<std::thread::JoinHandle<()>, String> {
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    let thread = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("SIGHUP runtime");
            rt.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let mut hup = match signal(SignalKind::hangup()) {
                    Ok(hup) => hup,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("cannot listen for SIGHUP: {e}")));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                let ended = async move {
                    match shutdown {
                        Some(mut s) => while s.changed().await.is_ok() && !*s.borrow() {},
                        None => std::future::pending().await,
                    }
                };
                tokio::pin!(ended);
                loop {
                    tokio::select! {
                        got = hup.recv() => match got {
                            Some(()) => action(),
                            None => return,
                        },
                        () = &mut ended => return,
                    }
                }
            });
        })
        .map_err(|e| format!("cannot start the {name} thread: {e}"))?;
    ready_rx
        .recv()
        .map_err(|_| format!("the {name} thread ended at start"))??;
    Ok(thread)
}
