//! `/metrics` from metrics pages: a `prometheus-client` collector that, at each scrape,
//! sums the pages of the processes that run sessions and what ended ones counted (see
//! the module docs of [`super`]). It renders the same families, names and labels in
//! every isolation mode.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::page::{MetricsPage, Snapshot, DEVICES_MAX, LATENCY_BOUNDS_NS};
use crate::service::lock;

/// The pages a node renders; cheap to clone (one shared table).
#[derive(Clone, Debug)]
pub(crate) struct Export(Arc<Mutex<Sources>>);

#[derive(Debug, Default)]
struct Sources {
    /// The devices' names, in index order (labels `device` and `name`).
    names: Vec<String>,
    /// Pages of live processes (the service's own in process), by pid.
    live: HashMap<u32, Live>,
    /// What ended processes counted: counters only.
    ended: Snapshot,
    /// Where `ocl_clients_connected` comes from when not from the pages (one runtime
    /// process per session: the node counts a client before handing it over).
    clients: Option<Gauge>,
}

#[derive(Debug)]
struct Live {
    page: Arc<MetricsPage>,
    /// The values last shown, below which no counter of this page goes.
    shown: Snapshot,
}

impl Sources {
    /// The current values; raises each page's floor to what it returns.
    fn total(&mut self) -> Snapshot {
        let n = self.names.len().min(DEVICES_MAX);
        let mut total = Snapshot::zero(n);
        total.add(&self.ended);
        for live in self.live.values_mut() {
            let mut now = Snapshot::read(&live.page, n);
            now.counters_at_least(&live.shown);
            total.add(&now);
            live.shown = now;
        }
        if let Some(g) = &self.clients {
            total.clients_connected = g.get();
        }
        total
    }
}

impl Export {
    /// Registers a collector of the pages to come in `registry`; `clients`: the gauge
    /// `ocl_clients_connected` shows instead of the pages' count.
    pub fn register(registry: &mut Registry, clients: Option<Gauge>) -> Export {
        let export = Export(Arc::new(Mutex::new(Sources {
            clients,
            ..Sources::default()
        })));
        registry.register_collector(Box::new(export.clone()));
        export
    }

    /// Sets the devices' names (the first time only: every process opens the same).
    pub fn set_device_names(&self, names: &[String]) {
        let mut s = lock(&self.0);
        if s.names.is_empty() {
            s.names = names.to_vec();
            s.ended = Snapshot::zero(names.len());
        }
    }

    /// Shows `page`, the page of process `pid`, from now on.
    pub fn add(&self, pid: u32, page: Arc<MetricsPage>) {
        let shown = Snapshot::default();
        lock(&self.0).live.insert(pid, Live { page, shown });
    }

    /// Process `pid` has ended: its counters' last values are kept, its gauges go;
    /// `cut_short` are the devices on which it was running a task (failed tasks).
    pub fn end(&self, pid: u32, cut_short: &[usize]) {
        let mut s = lock(&self.0);
        let Some(mut live) = s.live.remove(&pid) else {
            return;
        };
        let n = s.names.len().min(DEVICES_MAX);
        let mut last = Snapshot::read(&live.page, n);
        last.counters_at_least(&live.shown);
        for &d in cut_short {
            if let Some(d) = last.devices.get_mut(d) {
                d.tasks_failed += 1;
            }
        }
        live.shown = last.counters();
        s.ended.add(&live.shown);
    }

    /// The values `/metrics` would show now.
    pub fn total(&self) -> Snapshot {
        lock(&self.0).total()
    }
}

impl Collector for Export {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let (s, names) = {
            let mut sources = lock(&self.0);
            (sources.total(), sources.names.clone())
        };
        counter(
            &mut e,
            "ocl_program_cache_hits",
            "Program builds served from the node's content-hash program cache",
            s.program_cache_hits,
        )?;
        counter(
            &mut e,
            "ocl_program_cache_misses",
            "Program builds compiled from source and added to the program cache",
            s.program_cache_misses,
        )?;
        gauge(
            &mut e,
            "ocl_client_buffer_bytes",
            "Bytes of device buffers held by connected remote OpenCL clients",
            s.client_buffer_bytes,
        )?;
        gauge(
            &mut e,
            "ocl_client_objects",
            "OpenCL objects held by connected remote OpenCL clients",
            s.client_objects,
        )?;
        per_device(&mut e, &s, &names)?;
        gauge(
            &mut e,
            "ocl_clients_connected",
            "Remote OpenCL clients currently connected",
            s.clients_connected,
        )?;
        let mut m = e.encode_descriptor(
            "ocl_bytes",
            "Buffer bytes moved by remote OpenCL clients, by direction.",
            None,
            MetricType::Counter,
        )?;
        for (direction, v) in [
            ("to_device", s.bytes_to_device),
            ("from_device", s.bytes_from_device),
        ] {
            m.encode_family(&[("direction", direction)])?
                .encode_counter::<(), _, u64>(&v, None)?;
        }
        Ok(())
    }
}

/// The per-device families, labelled with each device's index and name: task
/// latency, queue depth, failed tasks and busy time.
fn per_device(e: &mut DescriptorEncoder, s: &Snapshot, names: &[String]) -> fmt::Result {
    let labels = |d: usize| [("device", d.to_string()), ("name", names[d].clone())];
    let bounds: Vec<f64> = LATENCY_BOUNDS_NS
        .iter()
        .map(|&ns| ns as f64 / 1e9)
        .chain(std::iter::once(f64::MAX))
        .collect();
    let mut m = e.encode_descriptor(
        "ocl_task_latency_seconds",
        "Remote OpenCL task latency from flush to completion, per device.",
        None,
        MetricType::Histogram,
    )?;
    for (i, d) in s.devices.iter().enumerate() {
        let buckets: Vec<(f64, u64)> = bounds
            .iter()
            .copied()
            .zip(d.latency_buckets.iter().copied())
            .collect();
        let count = d.latency_buckets.iter().sum();
        m.encode_family(&labels(i))?.encode_histogram::<()>(
            d.latency_sum_ns as f64 / 1e9,
            count,
            &buckets,
            None,
        )?;
    }
    let mut m = e.encode_descriptor(
        "ocl_queue_depth",
        "Remote OpenCL tasks queued or running, per device.",
        None,
        MetricType::Gauge,
    )?;
    for (i, d) in s.devices.iter().enumerate() {
        m.encode_family(&labels(i))?.encode_gauge(&d.queue_depth)?;
    }
    let mut m = e.encode_descriptor(
        "ocl_tasks_failed",
        "Remote OpenCL tasks with at least one failed command, per device.",
        None,
        MetricType::Counter,
    )?;
    for (i, d) in s.devices.iter().enumerate() {
        m.encode_family(&labels(i))?
            .encode_counter::<(), _, u64>(&d.tasks_failed, None)?;
    }
    let mut m = e.encode_descriptor(
        "ocl_device_busy_seconds",
        "Seconds each device spent running remote OpenCL tasks and the node's OpenCL \
         slot calls.",
        None,
        MetricType::Counter,
    )?;
    for (i, d) in s.devices.iter().enumerate() {
        m.encode_family(&labels(i))?
            .encode_counter::<(), _, f64>(&(d.busy_ns as f64 / 1e9), None)?;
    }
    Ok(())
}

/// A family of one counter without labels (help as `Registry::register` writes it).
fn counter(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: impl EncodeCounterValue,
) -> fmt::Result {
    e.encode_descriptor(name, &format!("{help}."), None, MetricType::Counter)?
        .encode_counter::<(), _, u64>(&v, None)
}

/// A family of one gauge without labels.
fn gauge(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: impl EncodeGaugeValue,
) -> fmt::Result {
    e.encode_descriptor(name, &format!("{help}."), None, MetricType::Gauge)?
        .encode_gauge(&v)
}

#[cfg(test)]
mod tests {
    use super::super::Metrics;
    use super::*;

    fn render(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    }

    #[test]
    fn pages_are_summed_and_an_ended_process_still_counts() {
        let mut registry = Registry::with_prefix("netaccel");
        let export = Export::register(&mut registry, None);
        export.set_device_names(&["cpu".to_string()]);
        let (a, b) = (
            Arc::new(MetricsPage::create().unwrap()),
            Arc::new(MetricsPage::create().unwrap()),
        );
        export.add(1, Arc::clone(&a));
        export.add(2, Arc::clone(&b));
        let (ma, mb) = (Metrics::new(&a, 1), Metrics::new(&b, 1));
        ma.devices[0].task_latency.observe(1e-3);
        mb.devices[0].task_latency.observe(1e-3);
        mb.devices[0].task_latency.observe(5.0);
        ma.bytes_from_device.inc_by(64);
        mb.devices[0].queue_depth.inc();
        ma.clients_connected.inc();
        let text = render(&registry);
        let dev = "{device=\"0\",name=\"cpu\"}";
        assert_eq!(
            value(
                &text,
                &format!("netaccel_ocl_task_latency_seconds_count{dev}")
            ),
            3.0
        );
        assert_eq!(
            value(
                &text,
                "netaccel_ocl_task_latency_seconds_bucket{le=\"0.00256\",device=\"0\",name=\"cpu\"}"
            ),
            2.0
        );
        assert_eq!(value(&text, &format!("netaccel_ocl_queue_depth{dev}")), 1.0);
        assert_eq!(value(&text, "netaccel_ocl_clients_connected"), 1.0);
        assert_eq!(
            value(&text, "netaccel_ocl_bytes_total{direction=\"from_device\"}"),
            64.0
        );

        // Process 2 dies in a task: its counts stay, its queue goes, the task failed.
        export.end(2, &[0]);
        drop((mb, b));
        let text = render(&registry);
        assert_eq!(
            value(
                &text,
                &format!("netaccel_ocl_task_latency_seconds_count{dev}")
            ),
            3.0
        );
        assert_eq!(value(&text, &format!("netaccel_ocl_queue_depth{dev}")), 0.0);
        assert_eq!(
            value(&text, &format!("netaccel_ocl_tasks_failed_total{dev}")),
            1.0
        );
        // A page that goes backwards does not take what was shown with it.
        ma.bytes_from_device
            .0
            .get()
            .store(0, std::sync::atomic::Ordering::Relaxed);
        let text = render(&registry);
        assert_eq!(
            value(&text, "netaccel_ocl_bytes_total{direction=\"from_device\"}"),
            64.0
        );
    }
}
