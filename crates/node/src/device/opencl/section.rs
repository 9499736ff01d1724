//! `[opencl]` in node.toml: sharing the host's OpenCL devices with remote clients
//! (the service of crate `ocl-remote`, started by the node when `listen` is set) and
//! what OpenCL slots are built with (the library, the program cache). The section's
//! keys are the service's [`ServiceConfig`] fields of the same names, units last.
//!
//! Earlier releases spelled these as flat keys (`opencl = ADDR`, `opencl_clients_max`,
//! …); the configuration loader still reads those, with a warning (`crate::config`).

use std::net::SocketAddr;

use ocl_remote::service::ServiceConfig;
use serde::{Deserialize, Serialize};

/// The `[opencl]` section.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpenclSection {
    /// Remote OpenCL listen address; unset = the node does not share OpenCL devices.
    pub listen: Option<SocketAddr>,
    /// Share only OpenCL platforms whose name contains one of these; empty = all.
    pub platforms: Vec<String>,
    // The remote OpenCL service's settings: the fields of [`ServiceConfig`] of the
    // same names, units last; their defaults are the service's.
    /// The OpenCL library the service loads (the ICD loader).
    pub library: String,
    /// Clients connected at once; more are refused.
    pub clients_max: usize,
    /// Largest frame a client may send; beyond it the connection is closed.
    pub frame_body_bytes_max: u32,
    /// Buffer and image bytes one client may hold; also what the devices advertise as
    /// their global memory (and their largest allocation in proportion). Unset (the
    /// default): no quota, clients see each device's own global memory and largest
    /// allocation and may hold up to the largest device's memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buffer_bytes_max: Option<u64>,
    /// OpenCL objects one client may hold.
    pub objects_max: usize,
    /// Bytes of enqueued data one open task may hold.
    pub pending_bytes_max: u64,
    /// Tasks waiting for one device over all its users; a client flushing into a full
    /// queue waits, except that a user with nothing queued always gets one task in.
    pub device_queue_depth_max: usize,
    /// How long a client may take none of the data sent to it before it is dropped
    /// (0: no bound).
    pub send_stall_timeout_ms: u64,
    /// Built programs kept by content hash (0: no cache), and their total bytes.
    pub program_cache_entries_max: usize,
    pub program_cache_bytes_max: usize,
    /// Longest kernel name the runtime may generate code for (see
    /// [`ServiceConfig::kernel_name_bytes_max`]).
    pub kernel_name_bytes_max: usize,
    /// Buffers of clients on this host in shared memory when the device computes in
    /// host memory.
    pub shared_memory: bool,
    /// Offer clients on this host an abstract Unix socket instead of TCP.
    pub local_socket: bool,
    /// How long a client's thread polls for its next request before it sleeps (µs).
    pub poll_us: u64,
    /// Spare buffers for large frames kept for reuse, all clients together.
    pub body_spare_bytes_max: usize,
    /// Where the OpenCL runtime runs remote clients' kernels: `session` (a process of
    /// its own per client connection, the default), `shared` (one process for all) or
    /// `none` (in the node's process). See [`ocl_remote::service::isolate`].
    pub isolation: String,
    /// Runtime processes kept started and ready for the next client (`session`).
    pub runtime_spares: usize,
    /// Runtime processes started per second at most.
    pub runtime_starts_per_second_max: u32,
    /// How long one task of a remote client may run before its runtime process is
    /// killed (isolated modes); 0: no bound.
    pub kernel_time_ms: u64,
    /// Where OpenCL slots keep built program binaries across restarts (by content
    /// hash); unset: `$XDG_CACHE_HOME/netaccel/opencl-programs`, else
    /// `$HOME/.cache/netaccel/opencl-programs` (none without either variable).
    pub program_dir: Option<std::path::PathBuf>,
}

impl Default for OpenclSection {
    fn default() -> OpenclSection {
        let ocl = ServiceConfig::default();
        OpenclSection {
            listen: None,
            platforms: Vec::new(),
            library: ocl.library,
            clients_max: ocl.clients_max,
            frame_body_bytes_max: ocl.frame_body_max,
            buffer_bytes_max: None,
            objects_max: ocl.objects_max,
            pending_bytes_max: ocl.pending_bytes_max,
            device_queue_depth_max: ocl.device_queue_depth_max,
            send_stall_timeout_ms: ocl.send_stall_max.as_millis() as u64,
            program_cache_entries_max: ocl.program_cache_entries_max,
            program_cache_bytes_max: ocl.program_cache_bytes_max,
            kernel_name_bytes_max: ocl.kernel_name_bytes_max,
            shared_memory: ocl.shared_memory,
            local_socket: ocl.local_socket,
            poll_us: ocl.poll_before_sleep.as_micros() as u64,
            body_spare_bytes_max: ocl.body_spare_bytes_max,
            // The node runs remote clients' code out of its own process by default: a
            // hostile kernel must not end a node every tenant shares.
            isolation: "session".to_string(),
            runtime_spares: ocl.runtime_spares,
            runtime_starts_per_second_max: ocl.runtime_starts_per_second_max,
            kernel_time_ms: ocl.kernel_time_max.as_millis() as u64,
            program_dir: None,
        }
    }
}

impl OpenclSection {
    /// The remote OpenCL bounds that depend on each other or on the ICD.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let positive = [
            ("clients_max", self.clients_max),
            ("objects_max", self.objects_max),
            ("device_queue_depth_max", self.device_queue_depth_max),
            ("kernel_name_bytes_max", self.kernel_name_bytes_max),
            // The service reads 0 as 1; the documented minimum is 1.
            ("runtime_spares", self.runtime_spares),
            (
                "buffer_bytes_max",
                self.buffer_bytes_max
                    .map_or(1, |b| b.min(usize::MAX as u64) as usize),
            ),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(format!("[opencl] {name} must be at least 1"));
            }
        }
        if self.frame_body_bytes_max < ServiceConfig::FRAME_BODY_MIN {
            return Err(format!(
                "[opencl] frame_body_bytes_max must be at least {} (the ICD sends frames of \
                 up to 12 MiB)",
                ServiceConfig::FRAME_BODY_MIN
            ));
        }
        if self.pending_bytes_max < u64::from(self.frame_body_bytes_max) {
            return Err(format!(
                "[opencl] pending_bytes_max ({}) must be at least frame_body_bytes_max \
                 ({}): a frame holding a write counts whole against it",
                self.pending_bytes_max, self.frame_body_bytes_max
            ));
        }
        if self.poll_us > ocl_remote::poll::SPIN_MAX.as_micros() as u64 {
            return Err(format!(
                "[opencl] poll_us must be at most {}",
                ocl_remote::poll::SPIN_MAX.as_micros()
            ));
        }
        if self.library.is_empty() {
            return Err("[opencl] library must name a library".to_string());
        }
        self.isolation
            .parse::<ocl_remote::service::Isolation>()
            .map_err(|e| format!("[opencl] isolation: {e}"))?;
        if self.runtime_starts_per_second_max == 0 {
            return Err("[opencl] runtime_starts_per_second_max must be at least 1".to_string());
        }
        Ok(())
    }

    /// The remote OpenCL service's configuration.
    pub fn service(&self) -> ServiceConfig {
        ServiceConfig {
            library: self.library.clone(),
            platforms: self.platforms.clone(),
            clients_max: self.clients_max,
            frame_body_max: self.frame_body_bytes_max,
            buffer_bytes_max: self.buffer_bytes_max.unwrap_or(ServiceConfig::NO_QUOTA),
            objects_max: self.objects_max,
            pending_bytes_max: self.pending_bytes_max,
            device_queue_depth_max: self.device_queue_depth_max,
            shared_memory: self.shared_memory,
            program_cache_entries_max: self.program_cache_entries_max,
            program_cache_bytes_max: self.program_cache_bytes_max,
            local_socket: self.local_socket,
            poll_before_sleep: std::time::Duration::from_micros(self.poll_us),
            send_stall_max: std::time::Duration::from_millis(self.send_stall_timeout_ms),
            kernel_name_bytes_max: self.kernel_name_bytes_max,
            body_spare_bytes_max: self.body_spare_bytes_max,
            // Checked by `validate`.
            isolation: self
                .isolation
                .parse()
                .unwrap_or(ocl_remote::service::Isolation::PerSession),
            // The node's own executable, started with the runtime subcommand.
            runtime_program: None,
            runtime_spares: self.runtime_spares,
            runtime_starts_per_second_max: self.runtime_starts_per_second_max,
            kernel_time_max: std::time::Duration::from_millis(self.kernel_time_ms),
            // The node's tenants decide; the node sets it (`front::opencl`).
            gate: None,
        }
    }
}
