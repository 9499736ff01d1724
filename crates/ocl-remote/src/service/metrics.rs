//! Prometheus metrics of the OpenCL service, registered in the node's registry.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Metric handles of one device (cheap clones of the registered families' members).
#[derive(Clone)]
pub(crate) struct DeviceMetrics {
    /// Seconds from a task's flush to its completion (queueing + running).
    pub task_latency: Histogram,
    /// Tasks waiting in or taken from the device FIFO and not yet finished.
    pub queue_depth: Gauge,
    pub tasks_failed: Counter,
    /// Seconds the device spent running remote tasks and the node's own jobs (its
    /// OpenCL slots' calls).
    pub busy_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
}

pub(crate) struct Metrics {
    pub clients_connected: Gauge,
    /// Bytes of buffers held by connected clients on the device.
    pub client_buffer_bytes: Gauge,
    /// OpenCL objects held by connected clients.
    pub client_objects: Gauge,
    /// Builds served from the program cache, and builds that filled it.
    pub program_cache_hits: Counter,
    pub program_cache_misses: Counter,
    pub bytes_to_device: Counter,
    pub bytes_from_device: Counter,
    pub devices: Vec<DeviceMetrics>,
}

fn latency_histogram() -> Histogram {
    // 10 µs .. ~2.6 s
    Histogram::new(exponential_buckets(1e-5, 4.0, 10))
}

impl Metrics {
    pub fn register(registry: &mut Registry, device_names: &[String]) -> Metrics {
        let latency =
            Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let depth = Family::<Labels, Gauge>::default();
        let failed = Family::<Labels, Counter>::default();
        let busy = Family::<Labels, Counter<f64, std::sync::atomic::AtomicU64>>::default();
        let bytes = Family::<Labels, Counter>::default();
        let clients_connected = Gauge::default();
        let client_buffer_bytes = Gauge::default();
        let client_objects = Gauge::default();
        let program_cache_hits = Counter::default();
        let program_cache_misses = Counter::default();
        registry.register(
            "ocl_program_cache_hits",
            "Program builds served from the node's content-hash program cache",
            program_cache_hits.clone(),
        );
        registry.register(
            "ocl_program_cache_misses",
            "Program builds compiled from source and added to the program cache",
            program_cache_misses.clone(),
        );
        registry.register(
            "ocl_client_buffer_bytes",
            "Bytes of device buffers held by connected remote OpenCL clients",
            client_buffer_bytes.clone(),
        );
        registry.register(
            "ocl_client_objects",
            "OpenCL objects held by connected remote OpenCL clients",
            client_objects.clone(),
        );
        registry.register(
            "ocl_task_latency_seconds",
            "Remote OpenCL task latency from flush to completion, per device",
            latency.clone(),
        );
        registry.register(
            "ocl_queue_depth",
            "Remote OpenCL tasks queued or running, per device",
            depth.clone(),
        );
        registry.register(
            "ocl_tasks_failed",
            "Remote OpenCL tasks with at least one failed command, per device",
            failed.clone(),
        );
        registry.register(
            "ocl_device_busy_seconds",
            "Seconds each device spent running remote OpenCL tasks and the node's OpenCL slot calls",
            busy.clone(),
        );
        registry.register(
            "ocl_clients_connected",
            "Remote OpenCL clients currently connected",
            clients_connected.clone(),
        );
        registry.register(
            "ocl_bytes",
            "Buffer bytes moved by remote OpenCL clients, by direction",
            bytes.clone(),
        );
        let devices = device_names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let labels = vec![
                    ("device".to_string(), i.to_string()),
                    ("name".to_string(), name.clone()),
                ];
                DeviceMetrics {
                    task_latency: latency.get_or_create(&labels).clone(),
                    queue_depth: depth.get_or_create(&labels).clone(),
                    tasks_failed: failed.get_or_create(&labels).clone(),
                    busy_seconds: busy.get_or_create(&labels).clone(),
                }
            })
            .collect();
        let dir = |d: &str| vec![("direction".to_string(), d.to_string())];
        let bytes_to_device = bytes.get_or_create(&dir("to_device")).clone();
        let bytes_from_device = bytes.get_or_create(&dir("from_device")).clone();
        Metrics {
            clients_connected,
            client_buffer_bytes,
            client_objects,
            program_cache_hits,
            program_cache_misses,
            bytes_to_device,
            bytes_from_device,
            devices,
        }
    }
}
