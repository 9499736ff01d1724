//! Node configuration: every bound the node enforces, with a safe default, loadable
//! from TOML (`--config FILE`). Fields are named with their unit last
//! (`queue_depth_max`, `header_timeout_ms`) so a config file reads unambiguously.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use serde::{Deserialize, Serialize};

pub use crate::core::dispatch::BalancePolicy;
use crate::core::memory::PoolPolicy;
pub use crate::core::slot::WorkerPolicy;
use crate::core::tenant::auth::{Anonymous, AuthSection};
use crate::core::tenant::{self, TenantConfig};
pub use crate::device::opencl::OpenclSection;
pub use crate::device::{BackendKind, DeviceConfig, DevicesSection, PlatformChoice, SlotConfig};
use crate::registry;
pub use crate::telemetry::logging::LogFormat;

// Defaults that the validation relates to each other, named so that the compiler
// checks the relations (a default configuration must validate).
const QUEUE_DEPTH_MAX_DEFAULT: usize = 64;
/// A tenant's share of one slot's queue: most of it, so one tenant cannot fill it alone.
const TENANT_QUEUE_DEPTH_MAX_DEFAULT: usize = 48;
const URI_BYTES_MAX_DEFAULT: usize = 2048;
const HEAD_BYTES_MAX_DEFAULT: usize = 16 * 1024;
const BODY_BYTES_MAX_DEFAULT: usize = 64 * 1024 * 1024;
const BODY_MEMORY_BYTES_MAX_DEFAULT: usize = 512 * 1024 * 1024;
const REASSEMBLY_BUFFER_BYTES_DEFAULT: usize = 16 * 1024 * 1024;
const REGISTRY_TIMEOUT_MS_DEFAULT: u64 = 5_000;
const REGISTRY_RETRY_MAX_MS_DEFAULT: u64 = 2_000;
const _: () = assert!(TENANT_QUEUE_DEPTH_MAX_DEFAULT <= QUEUE_DEPTH_MAX_DEFAULT);
const _: () = assert!(URI_BYTES_MAX_DEFAULT < HEAD_BYTES_MAX_DEFAULT);
const _: () = assert!(BODY_BYTES_MAX_DEFAULT <= BODY_MEMORY_BYTES_MAX_DEFAULT);
const _: () = assert!(REASSEMBLY_BUFFER_BYTES_DEFAULT <= u32::MAX as usize);
const _: () = assert!(REGISTRY_TIMEOUT_MS_DEFAULT <= registry::REGISTRY_MS_MAX);
const _: () = assert!(REGISTRY_RETRY_MAX_MS_DEFAULT <= registry::REGISTRY_MS_MAX);

/// Largest simulated device time per call (`simulated_exec_us`): 10 s.
const SIMULATED_EXEC_US_MAX: u64 = 10_000_000;

/// Which event loop drives the plain HTTP and RAC connections (see `crate::net::uring`).
/// What the model repository's index lists (`repository_index`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RepositoryIndex {
    /// Every model and accelerator of the catalog.
    #[default]
    Catalog,
    /// The models of the model repository (`models_dir`) only.
    Models,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// Readiness (epoll) on the node's own event loop (`crate::net::evloop`): one
    /// receive and one send system call per request, and none of tokio's per-event
    /// machinery. TLS and gRPC listeners are served by a tokio runtime on a companion
    /// thread. The default.
    #[default]
    Epoll,
    /// Readiness (epoll) through tokio's current-thread runtime: the default before
    /// `crate::net::evloop`, kept to compare with and to fall back on.
    Tokio,
    /// Completions (io_uring): multishot accept, multishot receive into a ring of
    /// provided buffers, and every send of a loop turn submitted in one system call.
    /// TLS and gRPC listeners stay on epoll. Falls back to epoll, with an error in the
    /// log, when the kernel refuses io_uring.
    IoUring,
}

impl std::str::FromStr for Network {
    type Err = String;

    fn from_str(s: &str) -> Result<Network, String> {
        match s {
            "epoll" => Ok(Network::Epoll),
            "tokio" => Ok(Network::Tokio),
            "io_uring" => Ok(Network::IoUring),
            _ => Err(format!(
                "network `{s}` is not valid: use epoll, tokio or io_uring"
            )),
        }
    }
}

/// The tenants part of a node's configuration (`anonymous`, `[[tenants]]`,
/// `[anonymous_quota]`), in the node's own syntax: what a registry serves to the
/// nodes started with `tenants_from_registry` (its `[nodes]`), checked here.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantsPart {
    #[serde(default)]
    pub anonymous: Anonymous,
    #[serde(default)]
    pub tenants: Vec<TenantConfig>,
    #[serde(default)]
    pub anonymous_quota: crate::core::quota::QuotaConfig,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// HTTP listen address.
    pub http: SocketAddr,
    /// RAC v1 listen address.
    pub rac: SocketAddr,
    /// gRPC listen address (the Open Inference Protocol's `GRPCInferenceService`);
    /// `"off"` in TOML (`None`) serves no gRPC. See [`GRPC_DEFAULT`] for what happens
    /// when the default address is taken.
    #[serde(with = "grpc_listen")]
    pub grpc: Option<SocketAddr>,
    /// `[opencl]`: remote OpenCL sharing and OpenCL devices (the flat `opencl = ADDR`
    /// and `opencl_*` keys of earlier releases are still read, with a warning: see
    /// [`Config::from_toml`]).
    pub opencl: OpenclSection,
    /// Settings written in an earlier release's form, read as their new form: a
    /// sentence each, which the node logs as a warning when it starts.
    #[serde(skip)]
    pub deprecated: Vec<String>,
    /// Adds the `fault` accelerator to the catalog (id 0xfff0): payload `panic` makes
    /// it panic, `error` makes it fail, anything else is echoed. For testing clients'
    /// and operators' handling of a failing kernel; off in production.
    pub fault_injection: bool,
    /// Network threads, each with its own listener (SO_REUSEPORT). 0 = one per core.
    pub io_threads: usize,
    /// The network path of the plain HTTP and RAC listeners: `epoll` (the default: the
    /// node's own event loop), `tokio` (epoll through tokio's runtime) or `io_uring`.
    pub network: Network,
    /// `off`, `error`, `warn`, `info`, `debug` or `trace`, or a tracing filter of
    /// `TARGET=LEVEL` directives; anything else is refused (see `logging::check_filter`).
    pub log_level: String,
    /// `text` (the default) or `json`: one JSON object per line.
    pub log_format: LogFormat,
    /// Log lines per second for each kind of refused request (malformed, unknown
    /// accelerator, failed token); beyond it they are counted and the count logged.
    pub log_refusals_per_second_max: u32,
    /// Milliseconds a second the node may spend checking tokens it has not seen
    /// before (argon2 for `token_hash`); beyond, such a caller is answered busy.
    pub token_check_ms_per_second_max: u32,
    /// When set, reconfiguration requires `Authorization: Bearer <token>`.
    pub admin_token: Option<String>,
    pub balance: BalancePolicy,
    /// Slots of the CPU device. Empty = one slot per built-in accelerator (by leaving
    /// the key out: an explicit `slots = []` is refused).
    #[serde(deserialize_with = "non_empty_slots")]
    pub slots: Vec<SlotConfig>,
    /// The node's devices and what each of their slots loads at start. Empty: one CPU
    /// device, `cpu0`, with the slots of `slots`.
    pub devices: Vec<DeviceConfig>,
    /// A directory of user accelerators, one folder with an `accelerator.toml` each
    /// (`--accelerators DIR`); refused manifests are logged and left out.
    pub accelerators_dir: Option<std::path::PathBuf>,
    /// A model repository (`--models DIR`): `NAME/config.toml` and `NAME/VERSION/
    /// model.onnx` per model, each an accelerator the CPU device runs with tract;
    /// refused models are logged and left out.
    pub models_dir: Option<std::path::PathBuf>,
    /// What the model repository extension's index lists (`POST /v2/repository/index`,
    /// gRPC `RepositoryIndex`): every model and accelerator of the catalog (`catalog`,
    /// the default), or the models of `models_dir` only (`models`: ONNX and image
    /// models, ensembles), as Triton's lists the models of its repository. Either way
    /// every accelerator is served and answers its model routes.
    pub repository_index: RepositoryIndex,
    /// The ONNX Runtime library (`libonnxruntime.so`) for models whose config says
    /// `backend = "onnxruntime"`; unset: the `ORT_DYLIB_PATH` variable, else such
    /// models are refused (logged and left out) naming this key.
    pub onnxruntime_library: Option<std::path::PathBuf>,
    /// Complete calls waiting per slot (503 BUSY beyond).
    pub queue_depth_max: usize,
    /// Queued calls one tenant (a RAC tenant, or one connection) may hold in a slot's
    /// queue, so one client cannot fill a queue that others share.
    pub tenant_queue_depth_max: usize,
    /// A call is refused BUSY when the other tenants' calls served before it in its
    /// slot are expected (from the slot's measured speed) to take longer than this
    /// many times its own execution or the slot's mean call, whichever is longer,
    /// per call of its own tenant that runs before it and itself (and at least
    /// `queue_wait_floor_us`); 0: only `queue_depth_max` bounds the wait. Bounds the
    /// latency under overload of a client with one call at a time to about this
    /// factor plus one times its latency unloaded.
    pub queue_wait_factor: u32,
    /// The wait in a slot's queue every call may be given, however short its own
    /// execution (µs): calls of µs kernels are not refused for waits the network
    /// round trip dwarfs.
    pub queue_wait_floor_us: u64,
    /// Calls whose work estimate is at most this run on the network thread when their
    /// slot is idle, saving two thread hand-offs; larger calls go to the slot's thread.
    pub inline_work_max: u64,
    /// How long a network thread may wait for a slot's cheap call in progress to end so
    /// that it can run a cheap call of a tenant without a backlog itself (µs; 0: never
    /// wait, queue it for the worker). See the `slot` module.
    pub hand_over_wait_us: u64,
    /// Scheduling class of slot worker threads (`idle`, `normal`, `batch`); see
    /// [`WorkerPolicy`]. Slots of OpenCL devices always run `normal`: their threads
    /// wait on the device, and the runtime's threads inherit their class.
    pub slot_worker_policy: WorkerPolicy,
    /// Nice value of slot worker threads relative to the node's, for the `normal` and
    /// `batch` classes (`idle` has none). Positive (the default, 10) gives network
    /// threads sharing a core with a busy slot the larger share of it; 0 treats them
    /// alike.
    pub slot_worker_nice: i32,
    /// Simulated reconfiguration time of a slot (an FPGA partial bitstream load takes
    /// milliseconds); 0 for CPU kernels.
    pub reconfig_delay_ms: u64,
    /// Simulated device time of a call: the CPU kernel computes the answer, and the
    /// call holds its slot this long on the device's own clock, the slot's worker
    /// sleeping (not computing) meanwhile, as a kernel on an FPGA takes its time on
    /// the device and not on the host's CPU. For experiments about sharing devices
    /// (bench/cluster/run.sh) on a host whose few cores cannot stand in for several
    /// devices; 0 (the default) runs and times CPU kernels as they are.
    pub simulated_exec_us: u64,
    /// Open HTTP connections; further connections get 503 and are closed.
    pub connections_max: usize,
    pub uri_bytes_max: usize,
    pub head_bytes_max: usize,
    /// Largest request body (413 beyond).
    pub body_bytes_max: usize,
    /// Memory for request bodies of all connections together (503 BUSY beyond).
    pub body_memory_bytes_max: usize,
    /// Time allowed from the first byte of a request head to its end (408 beyond).
    pub header_timeout_ms: u64,
    /// Longest wait for each read of a body, or for a response write to progress.
    pub io_timeout_ms: u64,
    /// Idle keep-alive connections are closed after this long.
    pub idle_timeout_ms: u64,
    /// On SIGTERM/SIGINT, how long in-flight work may take; calls still queued or
    /// running then are answered `UNAVAILABLE` (HTTP 503) and the node exits.
    pub drain_timeout_ms: u64,
    /// A call whose kernel runs longer than this marks its slot failed: the call and
    /// the slot's queue are answered `UNAVAILABLE` until the slot is reloaded through
    /// the admin API (see the `watchdog` module). 0: no bound.
    pub kernel_timeout_ms: u64,
    /// RAC calls in flight per connection; past it the node stops reading that
    /// connection (TCP back-pressure) until results go out.
    pub rac_in_flight_max: usize,
    /// RAC calls one tenant may have queued at slots across all its connections; past
    /// it the node stops reading that tenant's connections until calls complete.
    pub tenant_in_flight_max: usize,
    /// Reassembly buffers shared by all RAC connections.
    pub reassembly_buffers: usize,
    /// Size of each reassembly buffer; also the largest RAC payload (TOO_LARGE beyond).
    pub reassembly_buffer_bytes: usize,
    pub reassembly_policy: PoolPolicy,
    /// Configured tenants: their tokens (or certificates) and policies (see the
    /// `tenant::auth` module).
    pub tenants: Vec<TenantConfig>,
    /// The quotas every caller that named no tenant shares (`core::quota`); unset: none.
    pub anonymous_quota: crate::core::quota::QuotaConfig,
    /// What a caller that presents no credential is: `"connection"` (its own tenant,
    /// the default), `"refuse"`, or `"tenant NAME"`.
    pub anonymous: Anonymous,
    /// TLS listeners, certificates and client-certificate tenants (the `tls` module).
    pub tls: crate::net::tls::TlsConfig,
    /// Object store capacity ("device memory"), in bytes (507 beyond).
    pub object_store_bytes_max: usize,
    /// Objects in the store.
    pub objects_max: usize,
    pub object_key_bytes_max: usize,
    /// System shared memory regions registered at once (the Open Inference Protocol's
    /// extension, `front::oip::shm`).
    pub shared_memory_regions_max: usize,
    /// Of those, what one tenant (or all anonymous connections together) may hold.
    pub shared_memory_regions_per_tenant_max: usize,
    /// The registry this node registers with (`http://HOST:PORT`; several replicas
    /// comma-separated); unset = a standalone node. See the `registry` module.
    pub registry: Option<String>,
    /// This node's name at the registry; unset = the host name.
    pub name: Option<String>,
    /// The IP other hosts reach this node's listeners at; unset = the IP the HTTP
    /// front end listens on, when that is one address (see `registry::advertise_ip`).
    pub advertise: Option<IpAddr>,
    /// Sent as `Authorization: Bearer` with the node's registration, renewals and
    /// deregistration, and with forced reconfigurations (the registry's `--token`).
    pub registry_token: Option<String>,
    /// Take the tenants (`anonymous`, `[[tenants]]`, `[anonymous_quota]`) from the
    /// registry's `[nodes]` (`GET /v1/tenants`, asked at every renewal) instead of
    /// this file; until the first answer, every caller without a certificate is
    /// refused.
    pub tenants_from_registry: bool,
    /// Longest wait for one answer from the registry.
    pub registry_timeout_ms: u64,
    /// Longest pause between two attempts to reach a registry that does not answer
    /// (the pause doubles from 100 ms up to this).
    pub registry_retry_max_ms: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            http: "127.0.0.1:8080".parse().expect("valid address"),
            rac: "127.0.0.1:9400".parse().expect("valid address"),
            grpc: Some(GRPC_DEFAULT),
            opencl: OpenclSection::default(),
            deprecated: Vec::new(),
            fault_injection: false,
            io_threads: 0,
            network: Network::Epoll,
            log_level: "info".to_string(),
            log_format: LogFormat::default(),
            log_refusals_per_second_max: 10,
            token_check_ms_per_second_max: 250,
            admin_token: None,
            balance: BalancePolicy::default(),
            slots: Vec::new(),
            queue_depth_max: QUEUE_DEPTH_MAX_DEFAULT,
            tenant_queue_depth_max: TENANT_QUEUE_DEPTH_MAX_DEFAULT,
            queue_wait_factor: 8,
            queue_wait_floor_us: 250,
            inline_work_max: 64 * 1024,
            hand_over_wait_us: 200,
            reconfig_delay_ms: 0,
            devices: Vec::new(),
            accelerators_dir: None,
            models_dir: None,
            repository_index: RepositoryIndex::default(),
            onnxruntime_library: None,
            simulated_exec_us: 0,
            slot_worker_nice: 10,
            slot_worker_policy: WorkerPolicy::default(),
            connections_max: 10_000,
            uri_bytes_max: URI_BYTES_MAX_DEFAULT,
            head_bytes_max: HEAD_BYTES_MAX_DEFAULT,
            body_bytes_max: BODY_BYTES_MAX_DEFAULT,
            body_memory_bytes_max: BODY_MEMORY_BYTES_MAX_DEFAULT,
            header_timeout_ms: 10_000,
            io_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            drain_timeout_ms: 30_000,
            kernel_timeout_ms: 60_000,
            rac_in_flight_max: 32,
            tenant_in_flight_max: 32,
            reassembly_buffers: 16,
            reassembly_buffer_bytes: REASSEMBLY_BUFFER_BYTES_DEFAULT,
            reassembly_policy: PoolPolicy::default(),
            tenants: Vec::new(),
            anonymous_quota: crate::core::quota::QuotaConfig::default(),
            anonymous: Anonymous::default(),
            tls: crate::net::tls::TlsConfig::default(),
            object_store_bytes_max: 256 * 1024 * 1024,
            objects_max: 4096,
            object_key_bytes_max: 256,
            shared_memory_regions_max: 64,
            shared_memory_regions_per_tenant_max: 16,
            registry: None,
            name: None,
            advertise: None,
            registry_token: None,
            tenants_from_registry: false,
            registry_timeout_ms: REGISTRY_TIMEOUT_MS_DEFAULT,
            registry_retry_max_ms: REGISTRY_RETRY_MAX_MS_DEFAULT,
        }
    }
}

impl Config {
    /// Reads a TOML file; unknown keys are an error so typos do not pass silently.
    pub fn from_file(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
        Config::from_toml(&text).map_err(|e| format!("config {}: {e}", path.display()))
    }

    /// Parses and validates a configuration. Earlier releases' flat OpenCL keys
    /// (`opencl = ADDR`, `opencl_KEY = …`) are read as `[opencl]`'s `listen` and `KEY`,
    /// each noted in [`Config::deprecated`] for the node to warn about.
    pub fn from_toml(text: &str) -> Result<Config, String> {
        let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        let moved = fold_flat_opencl_keys(&mut table)?;
        // Without old keys, the text itself is parsed so errors keep their positions.
        let mut config: Config = if moved.is_empty() {
            toml::from_str(text).map_err(|e| e.to_string())?
        } else {
            table
                .try_into()
                .map_err(|e: toml::de::Error| e.to_string())?
        };
        // An error names a key as the file spells it.
        config.validate().map_err(|e| {
            moved.iter().fold(e, |e, (old, new)| {
                e.replace(&format!("[opencl] {new}"), old)
            })
        })?;
        config.deprecated = moved
            .iter()
            .map(|(old, new)| {
                format!(
                    "`{old}` is deprecated: write `{new} = …` under `[opencl]` (read as that now)"
                )
            })
            .collect();
        Ok(config)
    }

    /// Checks relations between fields that serde cannot. Every numeric key has a
    /// minimum: 1, unless 0 has a meaning of its own that its documentation gives
    /// (`io_threads`, `kernel_timeout_ms`, `queue_wait_factor`, …); the sections'
    /// keys are checked by their sections.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("queue_depth_max", self.queue_depth_max),
            ("tenant_queue_depth_max", self.tenant_queue_depth_max),
            ("connections_max", self.connections_max),
            ("body_bytes_max", self.body_bytes_max),
            ("object_store_bytes_max", self.object_store_bytes_max),
            ("header_timeout_ms", self.header_timeout_ms as usize),
            ("io_timeout_ms", self.io_timeout_ms as usize),
            ("idle_timeout_ms", self.idle_timeout_ms as usize),
            ("drain_timeout_ms", self.drain_timeout_ms as usize),
            ("uri_bytes_max", self.uri_bytes_max),
            ("head_bytes_max", self.head_bytes_max),
            ("objects_max", self.objects_max),
            ("rac_in_flight_max", self.rac_in_flight_max),
            ("tenant_in_flight_max", self.tenant_in_flight_max),
            ("reassembly_buffers", self.reassembly_buffers),
            ("reassembly_buffer_bytes", self.reassembly_buffer_bytes),
            ("object_key_bytes_max", self.object_key_bytes_max),
            ("shared_memory_regions_max", self.shared_memory_regions_max),
            (
                "shared_memory_regions_per_tenant_max",
                self.shared_memory_regions_per_tenant_max,
            ),
            ("registry_timeout_ms", self.registry_timeout_ms as usize),
            ("registry_retry_max_ms", self.registry_retry_max_ms as usize),
            (
                "log_refusals_per_second_max",
                self.log_refusals_per_second_max as usize,
            ),
            (
                "token_check_ms_per_second_max",
                self.token_check_ms_per_second_max as usize,
            ),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        if self.body_memory_bytes_max < self.body_bytes_max {
            return Err(format!(
                "body_memory_bytes_max ({}) must be at least body_bytes_max ({})",
                self.body_memory_bytes_max, self.body_bytes_max
            ));
        }
        if self.uri_bytes_max >= self.head_bytes_max {
            return Err("uri_bytes_max must be smaller than head_bytes_max".to_string());
        }
        if self.simulated_exec_us > SIMULATED_EXEC_US_MAX {
            return Err(format!(
                "simulated_exec_us must be at most {SIMULATED_EXEC_US_MAX} (10 s)"
            ));
        }
        if !(-20..=19).contains(&self.slot_worker_nice) {
            return Err("slot_worker_nice must be between -20 and 19".to_string());
        }
        if self.reassembly_buffer_bytes > u32::MAX as usize {
            return Err("reassembly_buffer_bytes must fit a RAC payload length (u32)".to_string());
        }
        tenant::check_config(&self.auth_section())?;
        self.validate_quotas()?;
        self.validate_tenants_from_registry()?;
        self.tls.validate()?;
        self.validate_devices()?;
        if let Some(token) = &self.admin_token {
            check_admin_token(token)?;
        }
        crate::telemetry::logging::check_filter(&self.log_level)?;
        registry::check_config(&self.registry_section())?;
        self.opencl.validate()
    }

    /// `[[devices]]`: unique names, each with its backend's fields only, and either
    /// devices or `[[slots]]`, not both.
    fn validate_devices(&self) -> Result<(), String> {
        if !self.devices.is_empty() && !self.slots.is_empty() {
            return Err(
                "give either [[devices]] (each with its slots) or [[slots]] (the \
                 slots of one CPU device), not both"
                    .to_string(),
            );
        }
        let mut slots = self.slots.len();
        for (i, d) in self.devices.iter().enumerate() {
            d.validate()?;
            if self.devices[..i].iter().any(|o| o.name == d.name) {
                return Err(format!("two devices are named {}", d.name));
            }
            slots += d.slots.len();
        }
        if slots > usize::from(u16::MAX - 1) {
            return Err("too many slots".to_string());
        }
        Ok(())
    }

    /// The devices to start: `[[devices]]`, or without them one CPU device `cpu0`
    /// whose slots are `[[slots]]` (empty: decided by the node, one per accelerator the
    /// CPU can host).
    pub fn device_list(&self) -> Vec<DeviceConfig> {
        if !self.devices.is_empty() {
            return self.devices.clone();
        }
        vec![DeviceConfig {
            name: "cpu0".to_string(),
            backend: BackendKind::Cpu,
            platform: None,
            device: None,
            clock_mhz: None,
            icap_bytes_per_s: None,
            backpressure: None,
            backpressure_seed: None,
            slots: self.slots.iter().map(|s| s.accelerator.clone()).collect(),
        }]
    }

    /// The registry's section: its keys, and the listeners the node advertises.
    pub fn registry_section(&self) -> registry::RegistrySection {
        registry::RegistrySection {
            registry: self.registry.clone(),
            name: self.name.clone(),
            advertise: self.advertise,
            registry_token: self.registry_token.clone(),
            registry_timeout_ms: self.registry_timeout_ms,
            registry_retry_max_ms: self.registry_retry_max_ms,
            http: self.http,
            rac: self.rac,
            opencl: self.opencl.listen,
        }
    }

    /// The slots' section: their bounds and behaviour, with a tenant's share of one
    /// queue (`tenant_share_max`, from the tenants' section).
    pub fn slot_limits(&self, tenant_share_max: usize) -> crate::core::slot::SlotLimits {
        use std::time::Duration;
        crate::core::slot::SlotLimits {
            queue_depth_max: self.queue_depth_max,
            tenant_share_max,
            inline_work_max: self.inline_work_max,
            hand_over_wait: Duration::from_micros(self.hand_over_wait_us),
            reconfig_delay: Duration::from_millis(self.reconfig_delay_ms),
            simulated_exec: Duration::from_micros(self.simulated_exec_us),
            worker_nice: self.slot_worker_nice,
            worker_policy: self.slot_worker_policy,
            kernel_timeout: Duration::from_millis(self.kernel_timeout_ms),
            queue_wait_factor: self.queue_wait_factor,
            queue_wait_floor: Duration::from_micros(self.queue_wait_floor_us),
        }
    }

    /// The tenants' credentials and policies, what `anonymous` callers are, and the
    /// admin token: what authentication reads, at start and at each reload. A node
    /// that takes its tenants from the registry refuses anonymous callers until it
    /// has them.
    pub fn auth_section(&self) -> AuthSection {
        AuthSection {
            tenants: self.tenants.clone(),
            anonymous: if self.tenants_from_registry {
                Anonymous::Refuse
            } else {
                self.anonymous.clone()
            },
            admin_token: self.admin_token.clone(),
            token_check_budget: std::time::Duration::from_millis(
                self.token_check_ms_per_second_max.into(),
            ),
        }
    }

    /// The tenants and their bounds: a tenant's share of one slot's queue is at most
    /// the queue.
    pub fn tenants_section(&self) -> crate::core::tenant::Tenants {
        crate::core::tenant::Tenants::new(
            &self.auth_section(),
            self.tenant_queue_depth_max.min(self.queue_depth_max),
            self.tenant_in_flight_max,
        )
    }

    /// Every tenant's quotas: tenants a client certificate names (`[tls]`) without a
    /// `[[tenants]]` entry of their own get the anonymous callers' limits, in an
    /// account of their own.
    pub fn quotas_section(&self) -> Vec<(String, crate::core::quota::QuotaConfig)> {
        let mut quotas: Vec<_> = self
            .tenants
            .iter()
            .map(|t| (t.name.clone(), t.quota))
            .collect();
        let tls_names = self.tls.subjects.values().chain(&self.tls.default_tenant);
        for name in tls_names {
            if !quotas.iter().any(|(n, _)| n == name) {
                quotas.push((name.clone(), self.anonymous_quota));
            }
        }
        quotas
    }

    /// With `tenants_from_registry`, the tenants are the registry's: a registry, and
    /// none of the file's own.
    fn validate_tenants_from_registry(&self) -> Result<(), String> {
        if !self.tenants_from_registry {
            return Ok(());
        }
        if self.registry.is_none() {
            return Err("tenants_from_registry needs registry (the registry serves them)".into());
        }
        let own = [
            ("[[tenants]]", !self.tenants.is_empty()),
            ("anonymous", self.anonymous != Anonymous::default()),
            (
                "[anonymous_quota]",
                self.anonymous_quota != crate::core::quota::QuotaConfig::default(),
            ),
        ];
        match own.iter().find(|(_, set)| *set) {
            Some((key, _)) => Err(format!(
                "{key} is set, but tenants_from_registry takes the tenants from the \
                 registry's [nodes]: set them there"
            )),
            None => Ok(()),
        }
    }

    /// This configuration with the tenants part `part` (the registry's) in place of
    /// its own, validated as a whole.
    pub fn with_tenants(&self, part: TenantsPart) -> Result<Config, String> {
        let mut config = self.clone();
        config.tenants = part.tenants;
        config.anonymous = part.anonymous;
        config.anonymous_quota = part.anonymous_quota;
        config.tenants_from_registry = false;
        config.validate()?;
        Ok(config)
    }

    fn validate_quotas(&self) -> Result<(), String> {
        self.anonymous_quota.validate("anonymous_quota")?;
        for t in &self.tenants {
            t.quota.validate(&format!("tenant `{}`", t.name))?;
        }
        Ok(())
    }

    /// The devices' section: what [`crate::device::start`] starts them from.
    pub fn devices_section(&self) -> DevicesSection {
        DevicesSection {
            devices: self.device_list(),
            accelerators_dir: self.accelerators_dir.clone(),
            models_dir: self.models_dir.clone(),
            onnxruntime_library: self.onnxruntime_library.clone(),
            opencl_program_dir: self.opencl.program_dir.clone(),
            opencl_library: self.opencl.library.clone(),
            opencl_program_cache_entries_max: self.opencl.program_cache_entries_max,
            fault_injection: self.fault_injection,
        }
    }

    /// Network threads to start.
    pub fn io_threads(&self) -> usize {
        if self.io_threads > 0 {
            self.io_threads
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }
}

/// Moves earlier releases' flat OpenCL keys into the `[opencl]` table: `opencl = ADDR`
/// becomes `listen`, `opencl_KEY` becomes `KEY`. Gives each key moved, old and new name;
/// a key given both ways is an error.
fn fold_flat_opencl_keys(table: &mut toml::Table) -> Result<Vec<(String, String)>, String> {
    let flat: Vec<String> = table
        .iter()
        .filter(|(k, v)| k.starts_with("opencl_") || (k.as_str() == "opencl" && !v.is_table()))
        .map(|(k, _)| k.clone())
        .collect();
    if flat.is_empty() {
        return Ok(Vec::new());
    }
    let mut section = match table.remove("opencl") {
        Some(toml::Value::Table(t)) => t,
        Some(address) => toml::Table::from_iter([("listen".to_string(), address)]),
        None => toml::Table::new(),
    };
    let mut moved = Vec::with_capacity(flat.len());
    for old in flat {
        let new = old.strip_prefix("opencl_").unwrap_or("listen").to_string();
        if old != "opencl" {
            if section.contains_key(&new) {
                return Err(format!(
                    "`{old}` and `[opencl] {new}` are the same setting: keep `[opencl] {new}`"
                ));
            }
            let value = table.remove(&old).expect("a key just listed");
            section.insert(new.clone(), value);
        }
        moved.push((old, new));
    }
    table.insert("opencl".to_string(), toml::Value::Table(section));
    Ok(moved)
}

/// An admin token a client can send back in `Authorization: Bearer <token>`. An empty
/// one (`admin_token = ""`) looked like "no token" but locked out every reconfiguration;
/// a header value loses its leading and trailing blanks on the way, and a control
/// character cannot be sent at all, so tokens with those could never match either.
fn check_admin_token(token: &str) -> Result<(), String> {
    if token.is_empty() {
        return Err(
            "admin_token is empty, so no client could ever present it: set a \
             non-empty token, or leave admin_token out to allow reconfiguration without one"
                .to_string(),
        );
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("admin_token must not contain spaces or control characters \
             (it is sent as `Authorization: Bearer <token>`)"
            .to_string());
    }
    Ok(())
}

/// `slots` as written in the file. Leaving the key out means one slot per built-in
/// accelerator; `slots = []` says "no slots", which the node cannot serve with, and
/// silently starting the default slots instead surprised users, so it is refused.
/// The gRPC address a node listens on unless told otherwise: Triton's gRPC port, so
/// clients' defaults reach it. When this address is taken (another node, or Triton, on
/// the same host) the node warns and serves without gRPC, so that the default never
/// stops a node from starting; any other address is refused when taken.
pub const GRPC_DEFAULT: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    8001,
));

/// `grpc = "ADDR"` or `grpc = "off"`.
mod grpc_listen {
    use std::net::SocketAddr;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(addr: &Option<SocketAddr>, s: S) -> Result<S::Ok, S::Error> {
        match addr {
            Some(addr) => s.collect_str(addr),
            None => s.serialize_str("off"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
        let text = String::deserialize(d)?;
        if text == "off" {
            return Ok(None);
        }
        text.parse().map(Some).map_err(|_| {
            serde::de::Error::custom(format!(
                "grpc = {text:?} is neither an address (\"127.0.0.1:8001\") nor \"off\""
            ))
        })
    }
}

fn non_empty_slots<'de, D>(deserializer: D) -> Result<Vec<SlotConfig>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let slots = Vec::<SlotConfig>::deserialize(deserializer)?;
    if slots.is_empty() {
        return Err(serde::de::Error::custom(
            "slots = [] configures no slot: list at least one [[slots]] entry, or leave \
             `slots` out for one slot per built-in accelerator",
        ));
    }
    Ok(slots)
}

// The tests live beside this file, so that it stays within a size a reader can hold.
#[cfg(test)]
mod tests;
