//! The node's shared state: configuration, the dispatcher and its slots, the tenants,
//! the object store, the body-memory budget, metrics and the shutdown signal. Every front end
//! holds an `Arc<Node>`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;

use crate::config::Config;
use crate::core::clock::SystemClock;
use crate::core::dispatch::Dispatcher;
use crate::core::memory::{MemoryBudget, ReassemblyPool};
use crate::core::objects::ObjectStore;
use crate::core::quota::Quotas;
use crate::core::shm::Regions;
use crate::core::tenant::auth::{Action, Principal};
use crate::core::tenant::Tenants;
use crate::device::{self, Devices, StartError};
use crate::registry::Registry;
use crate::telemetry::logging::RefusalLog;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::model_stats::ModelStatsTable;
use crate::telemetry::Protocol;

pub struct Node {
    pub config: Config,
    pub dispatcher: Arc<Dispatcher>,
    /// The devices the slots belong to, and how each loads an accelerator.
    pub devices: Devices,
    pub objects: ObjectStore,
    pub metrics: Metrics,
    /// Per-model inference statistics (the Open Inference Protocol's extension).
    pub model_stats: Arc<ModelStatsTable>,
    /// System shared memory regions clients registered (the protocol's extension).
    pub shm: Regions,
    /// Live sequences of the stateful models (`[sequence_batching]`).
    pub sequences: crate::core::sequence::Sequences,
    pub body_budget: Arc<MemoryBudget>,
    pub pool: Arc<ReassemblyPool>,
    /// Refused requests, logged within a rate limit.
    pub refusals: RefusalLog,
    /// Authentication failures, authorization refusals, reconfigurations, reloads.
    pub audit: crate::telemetry::audit::AuditLog,
    /// Open connections, by [`Protocol::index`].
    connections: [Gauge; 3],
    /// Calls refused `BUSY`, by [`Protocol::index`] ([`Node::count_busy`]).
    busy: [Counter; 3],
    /// Connections refused at `connections_max`, by [`Protocol::index`].
    connections_refused: [Counter; 3],
    pub rac_in_flight: Gauge,
    rac_requests: Vec<Counter>,
    http_requests: Vec<OnceLock<Counter>>,
    /// Connections' tenant identities and the per-tenant bounds.
    pub tenants: Tenants,
    /// Every tenant's quotas and what it uses of them.
    pub quotas: Quotas,
    open_connections: AtomicUsize,
    /// The remote OpenCL service, when configured and an OpenCL runtime was found.
    opencl: parking_lot::Mutex<Option<ocl_remote::service::ServiceHandle>>,
    /// The registry the node reports to and asks before reconfiguring, if it has one.
    pub registry: Option<Arc<Registry>>,
    /// The TLS acceptor, when a certificate is configured (`[tls]`).
    pub tls: Option<crate::net::tls::TlsAcceptor>,
    shutdown: watch::Sender<bool>,
    /// The shutdown has begun: the signal's value, for the answers that read it per
    /// request (an HTTP response's `Connection` header). An atomic load where the
    /// `watch`'s value sits behind a read lock (~40 instructions per keep-alive
    /// request, issue 28). Set before the signal is sent.
    draining: AtomicBool,
}

/// Who may open remote OpenCL sessions: the front end's gate (`front::opencl`), given to
/// the node so that the OpenCL service it starts asks it — the node does not know its
/// front ends. The service starts before the node is whole: the gate learns its node
/// afterwards ([`OpenClAdmission::bind`]).
pub trait OpenClAdmission: ocl_remote::service::gate::Gate {
    /// Lets the gate ask `node`.
    fn bind(&self, node: &Arc<Node>);
    /// The gate as the service takes it.
    fn gate(self: Arc<Self>) -> Arc<dyn ocl_remote::service::gate::Gate>;
    /// The gate's own series in `/metrics`.
    fn collector(self: Arc<Self>) -> Box<dyn prometheus_client::collector::Collector>;
}

/// Starts the remote OpenCL service when `[opencl] listen` is set, its sessions
/// admitted by `gate` (see [`OpenClAdmission`]). A host without an OpenCL runtime
/// serves the rest (warned); an address the operator configured that cannot be
/// listened on is an error, as for every listener.
fn start_opencl(
    config: &Config,
    metrics: &mut Metrics,
    gate: &Arc<dyn OpenClAdmission>,
) -> Result<Option<ocl_remote::service::ServiceHandle>, StartError> {
    let Some(addr) = config.opencl.listen else {
        return Ok(None);
    };
    let service = ocl_remote::service::ServiceConfig {
        gate: Some(Arc::clone(gate).gate()),
        ..config.opencl.service()
    };
    metrics
        .registry_mut()
        .register_collector(Arc::clone(gate).collector());
    match ocl_remote::service::spawn(addr, service, metrics.registry_mut()) {
        Ok(handle) => {
            tracing::info!(opencl = %handle.local_addr(), devices = ?handle.device_names(), "sharing OpenCL devices");
            Ok(Some(handle))
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::AddrInUse
                    | std::io::ErrorKind::AddrNotAvailable
                    | std::io::ErrorKind::PermissionDenied
            ) =>
        {
            Err(StartError::Failed(format!(
                "cannot listen for remote OpenCL on {addr}: {e}"
            )))
        }
        Err(e) => {
            tracing::warn!(error = %e, "remote OpenCL not available; serving without it");
            Ok(None)
        }
    }
}

impl Node {
    /// Why `who` may not do `action`: its policy's refusal, or, for a call to an
    /// ensemble, the refusal of the first of its steps `who` may not call (a policy
    /// that lets a tenant call an ensemble does not let it reach a model it may not
    /// call); `None`: allowed. Every front end asks here.
    pub fn refusal(&self, who: &Principal, action: Action<'_>) -> Option<String> {
        if !who.may(action) {
            return Some(who.refusal(action));
        }
        let Action::Call(name) = action else {
            return None;
        };
        // Without ensembles (most nodes), no catalog lookup on the call's path.
        if !self.dispatcher.has_ensembles() {
            return None;
        }
        let id = self.dispatcher.catalog().by_name(name)?.descriptor().id;
        self.dispatcher.ensemble(id)?.refusal(who)
    }

    /// Builds the node from a validated configuration and starts its slot workers;
    /// remote OpenCL sessions are admitted by `opencl_gate`.
    pub fn new(
        config: Config,
        opencl_gate: Arc<dyn OpenClAdmission>,
    ) -> Result<Arc<Node>, StartError> {
        config.validate().map_err(StartError::Config)?;
        let registry = Registry::new(&config.registry_section()).map_err(StartError::Config)?;
        let mut metrics = Metrics::new();
        let opencl = start_opencl(&config, &mut metrics, &opencl_gate)?;
        let tenants = config.tenants_section();
        let quotas = Quotas::new(
            &config.quotas_section(),
            &config.anonymous_quota,
            |name| tenants.named(name),
            Arc::new(SystemClock),
            metrics.registry_mut(),
        );
        let tls = if config.tls.enabled() {
            Some(crate::net::tls::TlsAcceptor::new(
                &config.tls,
                metrics.registry_mut(),
            )?)
        } else {
            None
        };
        let limits = config.slot_limits(tenants.queue_share_max);
        let started = device::start(&config.devices_section(), &mut metrics, opencl.as_ref())?;
        let (catalog, ensembles) =
            crate::core::ensemble::attach(started.catalog, started.ensembles);
        let dispatcher = Dispatcher::start(
            catalog,
            started.slots,
            limits,
            config.balance,
            &metrics,
            Arc::new(SystemClock),
        );

        let model_stats = Arc::new(ModelStatsTable::new(&dispatcher.catalog()));
        dispatcher.serve_ensembles(ensembles, Arc::clone(&model_stats));
        let shm = Regions::new(
            config.shared_memory_regions_max,
            config.shared_memory_regions_per_tenant_max,
        );
        let body_budget = MemoryBudget::new(
            config.body_memory_bytes_max,
            metrics.body_memory_bytes.clone(),
        );
        let objects = ObjectStore::new(
            config.object_store_bytes_max,
            config.objects_max,
            config.object_key_bytes_max,
        );
        let pool = ReassemblyPool::new(
            config.reassembly_buffers,
            config.reassembly_buffer_bytes,
            config.reassembly_policy,
            metrics.reassembly_buffers_in_use.clone(),
        );
        let (shutdown, _) = watch::channel(false);
        let node = Arc::new(Node {
            connections: Protocol::ALL.map(|p| metrics.connections(p.name())),
            busy: Protocol::ALL.map(|p| metrics.busy_refusals(p.name())),
            connections_refused: Protocol::ALL.map(|p| metrics.connections_refused(p.name())),
            http_requests: (0..600).map(|_| OnceLock::new()).collect(),
            rac_in_flight: metrics.rac_in_flight.clone(),
            rac_requests: rac_proto::Status::ALL
                .iter()
                .map(|s| metrics.requests("rac", s.name()))
                .collect(),
            pool,
            refusals: RefusalLog::new(config.log_refusals_per_second_max),
            audit: crate::telemetry::audit::AuditLog::new(config.log_refusals_per_second_max),
            config,
            dispatcher,
            devices: started.devices,
            objects,
            metrics,
            model_stats,
            shm,
            sequences: Default::default(),
            body_budget,
            tenants,
            quotas,
            open_connections: AtomicUsize::new(0),
            opencl: parking_lot::Mutex::new(opencl),
            registry,
            tls,
            shutdown,
            draining: AtomicBool::new(false),
        });
        opencl_gate.bind(&node);
        Ok(node)
    }

    /// Counter of HTTP responses with status `code`.
    pub fn http_requests(&self, code: u16) -> &Counter {
        self.http_requests[usize::from(code).min(599)]
            .get_or_init(|| self.metrics.requests("http", &code.to_string()))
    }

    /// Counts one call refused `BUSY` (no queue room at any slot, no body memory, no
    /// reassembly buffer), by protocol and, when the request named one, by accelerator.
    /// Front ends call this wherever they answer `BUSY`, whoever refused; it is the only
    /// place either counter moves, so each refusal is counted exactly once in both
    /// (`netaccel_busy_refusals_total`, `netaccel_accelerator_calls_total{status="BUSY"}`).
    pub fn count_busy(&self, protocol: Protocol, accel_id: Option<u16>) {
        self.busy[protocol.index()].inc();
        if let Some(m) = accel_id.and_then(|id| self.dispatcher.accel_metrics(id)) {
            m.answered(rac_proto::Status::Busy, 0);
        }
    }

    /// Counter of RAC results with `status`.
    pub fn rac_requests(&self, status: rac_proto::Status) -> &Counter {
        &self.rac_requests[status as usize]
    }

    /// Counts a new connection if the node has room for it (fewer than
    /// `connections_max` open). Otherwise counts the refusal: this is the only place
    /// `netaccel_connections_refused_total` moves, so each refused connection is
    /// counted once whatever the front end answers it with.
    pub fn try_open_connection(&self, protocol: Protocol) -> bool {
        let max = self.config.connections_max;
        let opened = self
            .open_connections
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        if !opened {
            self.connections_refused[protocol.index()].inc();
        }
        opened
    }

    /// The gauge of `protocol`'s open connections.
    pub fn connections(&self, protocol: Protocol) -> &Gauge {
        &self.connections[protocol.index()]
    }

    pub fn close_connection(&self) {
        self.open_connections.fetch_sub(1, Ordering::AcqRel);
    }

    pub fn open_connections(&self) -> usize {
        self.open_connections.load(Ordering::Acquire)
    }

    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    pub fn is_shutting_down(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Stops accepting; idle connections close, busy ones after their current request.
    /// Hands back the remote OpenCL service, if the node shares OpenCL devices, for the
    /// caller to drain (see [`ocl_remote::service::ServiceHandle::shutdown`]).
    pub fn begin_shutdown(&self) -> Option<ocl_remote::service::ServiceHandle> {
        self.draining.store(true, Ordering::Release);
        self.shutdown.send_replace(true);
        self.opencl.lock().take()
    }

    /// Serves a remote OpenCL connection accepted elsewhere (OpenCL over TLS, see
    /// [`crate::front::opencl::start_tls`]); `false` when the node shares no OpenCL
    /// device or drains.
    pub fn serve_opencl(
        &self,
        stream: ocl_remote::stream::Stream,
        caller: ocl_remote::service::gate::Caller,
    ) -> bool {
        match self.opencl.lock().as_ref() {
            Some(handle) => {
                handle.serve_connection(stream, caller);
                true
            }
            None => false,
        }
    }

    /// Where remote OpenCL clients connect, if the node shares OpenCL devices.
    pub fn opencl_addr(&self) -> Option<std::net::SocketAddr> {
        self.opencl.lock().as_ref().map(|h| h.local_addr())
    }
}
