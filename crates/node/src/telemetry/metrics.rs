//! The node's Prometheus metrics, built on `prometheus-client`.
//!
//! Hot-path code never looks a metric up by label: slots and accelerators get their
//! handles once ([`SlotMetrics`], [`AccelMetrics`]) and bump atomics afterwards.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use rac_proto::Status;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SlotLabel {
    pub slot: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SlotAccelLabel {
    pub slot: String,
    pub accelerator: String,
}

/// A slot, and where a cancelled call was when its caller left: `queued` (removed,
/// never ran) or `running` (ran to its end; its answer was dropped).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SlotStageLabel {
    pub slot: String,
    pub stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AccelLabel {
    pub accelerator: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AccelStatusLabel {
    pub accelerator: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProtocolLabel {
    pub protocol: String,
}

/// A network thread, by its index (`net-0` is thread `0`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ThreadLabel {
    pub thread: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProtocolCodeLabel {
    pub protocol: String,
    pub code: String,
}

fn seconds_histogram() -> Histogram {
    // 1 µs … ~67 s in powers of two: covers a 64-byte call and a 4k matmul alike.
    Histogram::new(exponential_buckets(1e-6, 2.0, 27))
}

/// All metric families, registered once.
pub struct Metrics {
    registry: Registry,
    slot_busy_seconds: Family<SlotLabel, Counter<f64, AtomicU64>>,
    slot_calls: Family<SlotLabel, Counter>,
    slot_exec_seconds: Family<SlotLabel, Histogram, fn() -> Histogram>,
    slot_queue_depth: Family<SlotLabel, Gauge>,
    slot_reconfigurations: Family<SlotLabel, Counter>,
    slot_loaded: Family<SlotAccelLabel, Gauge>,
    slot_failed: Family<SlotLabel, Gauge>,
    slot_hung_kernels: Family<SlotLabel, Counter>,
    slot_threads_abandoned: Family<SlotLabel, Gauge>,
    slot_wait_refusals: Family<SlotLabel, Counter>,
    slot_cancelled_calls: Family<SlotStageLabel, Counter>,
    accel_calls: Family<AccelStatusLabel, Counter>,
    accel_latency_seconds: Family<AccelLabel, Histogram, fn() -> Histogram>,
    connections_open: Family<ProtocolLabel, Gauge>,
    connections_refused: Family<ProtocolLabel, Counter>,
    connections_accepted: Family<ThreadLabel, Counter>,
    requests: Family<ProtocolCodeLabel, Counter>,
    busy_refusals: Family<ProtocolLabel, Counter>,
    /// Bytes of request bodies held by the node right now.
    pub body_memory_bytes: Gauge,
    /// RAC calls queued or running at slots.
    pub rac_in_flight: Gauge,
    /// Reassembly buffers holding at least one call.
    pub reassembly_buffers_in_use: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("netaccel");
        let m = Metrics {
            registry: Registry::default(),
            slot_busy_seconds: Family::default(),
            slot_calls: Family::default(),
            slot_exec_seconds: Family::new_with_constructor(seconds_histogram),
            slot_queue_depth: Family::default(),
            slot_reconfigurations: Family::default(),
            slot_loaded: Family::default(),
            slot_failed: Family::default(),
            slot_hung_kernels: Family::default(),
            slot_threads_abandoned: Family::default(),
            slot_wait_refusals: Family::default(),
            slot_cancelled_calls: Family::default(),
            accel_calls: Family::default(),
            accel_latency_seconds: Family::new_with_constructor(seconds_histogram),
            connections_open: Family::default(),
            connections_refused: Family::default(),
            connections_accepted: Family::default(),
            requests: Family::default(),
            busy_refusals: Family::default(),
            body_memory_bytes: Gauge::default(),
            rac_in_flight: Gauge::default(),
            reassembly_buffers_in_use: Gauge::default(),
        };
        let r = &mut registry;
        r.register(
            "slot_busy_seconds",
            "Seconds the slot spent executing calls (rate = utilisation)",
            m.slot_busy_seconds.clone(),
        );
        r.register(
            "slot_calls",
            "Calls executed by the slot",
            m.slot_calls.clone(),
        );
        r.register(
            "slot_exec_seconds",
            "Execution time of calls in the slot",
            m.slot_exec_seconds.clone(),
        );
        r.register(
            "slot_queue_depth",
            "Complete calls waiting in the slot's queue",
            m.slot_queue_depth.clone(),
        );
        r.register(
            "slot_reconfigurations",
            "Times an accelerator was loaded into the slot at runtime",
            m.slot_reconfigurations.clone(),
        );
        r.register(
            "slot_accelerator_loaded",
            "1 for the accelerator currently loaded in the slot",
            m.slot_loaded.clone(),
        );
        r.register(
            "slot_failed",
            "1 while the slot is failed (a kernel ran past kernel_timeout_ms) until it is reloaded",
            m.slot_failed.clone(),
        );
        r.register(
            "slot_hung_kernels",
            "Calls whose kernel ran past kernel_timeout_ms, each failing its slot",
            m.slot_hung_kernels.clone(),
        );
        r.register(
            "slot_threads_abandoned",
            "Slot threads given up on while in a kernel that have not returned yet",
            m.slot_threads_abandoned.clone(),
        );
        r.register(
            "slot_wait_refusals",
            "Calls the slot refused (BUSY) because other tenants' calls ahead of them were expected to take (or, counted in calls at their turn, took) longer than queue_wait_factor times their own execution time per call of their own ahead (and queue_wait_floor_us)",
            m.slot_wait_refusals.clone(),
        );
        r.register(
            "slot_cancelled_calls",
            "Calls whose caller left (a cancelled gRPC call, a closed connection): stage queued, taken out of the queue without running; stage running, run to the end and the answer dropped",
            m.slot_cancelled_calls.clone(),
        );
        r.register(
            "accelerator_calls",
            "Calls answered, by accelerator and status",
            m.accel_calls.clone(),
        );
        r.register(
            "accelerator_latency_seconds",
            "End-to-end latency of successful calls at the node, whole request to result",
            m.accel_latency_seconds.clone(),
        );
        r.register(
            "connections_open",
            "Open client connections",
            m.connections_open.clone(),
        );
        r.register(
            "connections_refused",
            "Connections refused at accept because the node held connections_max already",
            m.connections_refused.clone(),
        );
        r.register(
            "connections_accepted",
            "HTTP and RAC connections (plain and TLS) accepted, by the network thread whose SO_REUSEPORT listener the kernel gave them to",
            m.connections_accepted.clone(),
        );
        r.register(
            "requests",
            "Requests answered, by protocol and status",
            m.requests.clone(),
        );
        r.register(
            "busy_refusals",
            "Calls refused for lack of queue space or body memory",
            m.busy_refusals.clone(),
        );
        r.register(
            "body_memory_bytes",
            "Bytes of request bodies being received or waiting for a slot",
            m.body_memory_bytes.clone(),
        );
        r.register(
            "rac_in_flight_calls",
            "RAC calls queued or running at slots",
            m.rac_in_flight.clone(),
        );
        r.register(
            "reassembly_buffers_in_use",
            "RAC reassembly buffers holding at least one call",
            m.reassembly_buffers_in_use.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The registry, for components that register their own families (remote OpenCL).
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The text exposition format (OpenMetrics text, which Prometheus scrapes).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    pub fn slot(&self, slot: u16) -> SlotMetrics {
        let label = SlotLabel {
            slot: slot.to_string(),
        };
        SlotMetrics {
            slot,
            busy_seconds: self.slot_busy_seconds.get_or_create(&label).clone(),
            calls: self.slot_calls.get_or_create(&label).clone(),
            exec_seconds: self.slot_exec_seconds.get_or_create(&label).clone(),
            queue_depth: self.slot_queue_depth.get_or_create(&label).clone(),
            reconfigurations: self.slot_reconfigurations.get_or_create(&label).clone(),
            loaded: self.slot_loaded.clone(),
            failed: self.slot_failed.get_or_create(&label).clone(),
            hung_kernels: self.slot_hung_kernels.get_or_create(&label).clone(),
            threads_abandoned: self.slot_threads_abandoned.get_or_create(&label).clone(),
            wait_refusals: self.slot_wait_refusals.get_or_create(&label).clone(),
            cancelled_queued: self.cancelled(slot, "queued"),
            cancelled_running: self.cancelled(slot, "running"),
        }
    }

    fn cancelled(&self, slot: u16, stage: &str) -> Counter {
        let label = SlotStageLabel {
            slot: slot.to_string(),
            stage: stage.to_string(),
        };
        self.slot_cancelled_calls.get_or_create(&label).clone()
    }

    pub fn accel(&self, name: &str) -> AccelMetrics {
        let calls = Status::ALL.map(|s| {
            let label = AccelStatusLabel {
                accelerator: name.to_string(),
                status: s.name().to_string(),
            };
            self.accel_calls.get_or_create(&label).clone()
        });
        let label = AccelLabel {
            accelerator: name.to_string(),
        };
        AccelMetrics {
            calls,
            latency_seconds: self.accel_latency_seconds.get_or_create(&label).clone(),
        }
    }

    pub fn connections(&self, protocol: &str) -> Gauge {
        self.connections_open
            .get_or_create(&ProtocolLabel {
                protocol: protocol.to_string(),
            })
            .clone()
    }

    pub fn connections_refused(&self, protocol: &str) -> Counter {
        self.connections_refused
            .get_or_create(&ProtocolLabel {
                protocol: protocol.to_string(),
            })
            .clone()
    }

    /// Connections network thread `thread` accepted (its share of the kernel's
    /// SO_REUSEPORT spread).
    pub fn connections_accepted(&self, thread: usize) -> Counter {
        self.connections_accepted
            .get_or_create(&ThreadLabel {
                thread: thread.to_string(),
            })
            .clone()
    }

    pub fn busy_refusals(&self, protocol: &str) -> Counter {
        self.busy_refusals
            .get_or_create(&ProtocolLabel {
                protocol: protocol.to_string(),
            })
            .clone()
    }

    /// Counter of requests answered with `code` over `protocol`.
    pub fn requests(&self, protocol: &str, code: &str) -> Counter {
        let label = ProtocolCodeLabel {
            protocol: protocol.to_string(),
            code: code.to_string(),
        };
        self.requests.get_or_create(&label).clone()
    }
}

/// Handles for one slot.
#[derive(Clone)]
pub struct SlotMetrics {
    slot: u16,
    pub busy_seconds: Counter<f64, AtomicU64>,
    pub calls: Counter,
    pub exec_seconds: Histogram,
    pub queue_depth: Gauge,
    pub reconfigurations: Counter,
    loaded: Family<SlotAccelLabel, Gauge>,
    /// 1 while the slot is failed.
    pub failed: Gauge,
    pub hung_kernels: Counter,
    /// Threads of the slot stuck in a kernel the slot gave up on.
    pub threads_abandoned: Gauge,
    /// Calls refused because of the wait expected ahead of them.
    pub wait_refusals: Counter,
    /// Calls taken out of the queue because their caller left.
    pub cancelled_queued: Counter,
    /// Calls that ran while their caller left: answers dropped.
    pub cancelled_running: Counter,
}

impl SlotMetrics {
    pub fn executed(&self, exec_ns: u64) {
        let seconds = exec_ns as f64 * 1e-9;
        self.busy_seconds.inc_by(seconds);
        self.calls.inc();
        self.exec_seconds.observe(seconds);
    }

    /// Records that `name` is now loaded (and `previous`, if any, is not).
    pub fn loaded(&self, previous: Option<&str>, name: &str) {
        let label = |a: &str| SlotAccelLabel {
            slot: self.slot.to_string(),
            accelerator: a.to_string(),
        };
        if let Some(previous) = previous {
            self.loaded.remove(&label(previous));
        }
        self.loaded.get_or_create(&label(name)).set(1);
    }
}

/// Each accelerator's metrics by its id, looked up on every call. Hashed with foldhash
/// rather than SipHash (~120 instructions a look-up, issue 28): the ids are the
/// catalog's, not a client's.
pub type AccelMetricsById =
    std::collections::HashMap<u16, AccelMetrics, foldhash::fast::FixedState>;

/// Handles for one accelerator.
#[derive(Clone)]
pub struct AccelMetrics {
    calls: [Counter; Status::ALL.len()],
    latency_seconds: Histogram,
}

impl AccelMetrics {
    pub fn answered(&self, status: Status, latency_ns: u64) {
        self.calls[status as usize].inc();
        if status == Status::Ok {
            self.latency_seconds.observe(latency_ns as f64 * 1e-9);
        }
    }
}
