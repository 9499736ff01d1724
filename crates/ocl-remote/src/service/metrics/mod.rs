//! Prometheus metrics of the OpenCL service: where they are kept and how `/metrics`
//! shows them.
//!
//! The service's counters, gauges and the task latency histogram live in a *metrics
//! page* ([`page`]): fixed-layout atomics in a shared-memory file, whatever process
//! runs the sessions. The node renders them with a collector ([`export`]) that reads
//! the pages when `/metrics` is scraped, so the names and labels are the same with
//! every [`super::Isolation`]:
//!
//! - in process (`none`), the service's one page;
//! - with runtime processes (`session`, `shared`), the node creates each process's page
//!   and hands it over as a file descriptor; it sums the pages of the live processes
//!   (histograms bucket-wise) and adds what processes that have ended counted. When a
//!   process ends, its counters' last values are folded into that node-side total
//!   before its page is dropped, so counters never go down across a session's end; its
//!   gauges (queue depth, objects, bytes held) go with it. A task the process was
//!   running when it died (a crash, a kernel killed for running too long) counts as a
//!   failed task of its device, as no answer reached its client.
//!
//! Why a shared page rather than snapshots pushed over the control socket: the task
//! path pays what it paid with `prometheus-client` (a relaxed atomic add per value, no
//! message, no thread), the node reads exact values at scrape time instead of the last
//! push, and the last values of a process that crashed are still there for the node to
//! fold, where a push would lose everything since the previous one. What the page
//! cannot protect against: a client's kernel that writes into its own process's page
//! can falsify that process's figures (never make a counter shown go down: the node
//! keeps, per process, the highest value it has shown).

pub(crate) mod export;
pub(crate) mod page;

use std::ptr::NonNull;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

pub(crate) use export::Export;
pub(crate) use page::MetricsPage;
use page::{DeviceWords, BUCKETS, LATENCY_BOUNDS_NS};

/// A word of a metrics page, kept mapped by the page it points into.
struct Word<T> {
    ptr: NonNull<T>,
    _page: Arc<MetricsPage>,
}

impl<T> Word<T> {
    fn new(page: &Arc<MetricsPage>, word: &T) -> Word<T> {
        Word {
            ptr: NonNull::from(word),
            _page: Arc::clone(page),
        }
    }

    fn get(&self) -> &T {
        // SAFETY: the word lies in the page, which `_page` keeps mapped.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> Clone for Word<T> {
    fn clone(&self) -> Self {
        Word {
            ptr: self.ptr,
            _page: Arc::clone(&self._page),
        }
    }
}

// SAFETY: the words are atomics in a mapping that lives as long as the handle.
unsafe impl<T: Sync> Send for Word<T> {}
unsafe impl<T: Sync> Sync for Word<T> {}

/// A monotonic count.
#[derive(Clone)]
pub(crate) struct Counter(Word<AtomicU64>);

impl Counter {
    pub fn inc(&self) {
        self.inc_by(1);
    }
    pub fn inc_by(&self, v: u64) {
        self.0.get().fetch_add(v, Ordering::Relaxed);
    }
}

/// A value that goes up and down.
#[derive(Clone)]
pub(crate) struct Gauge(Word<AtomicI64>);

impl Gauge {
    pub fn inc(&self) {
        self.inc_by(1);
    }
    pub fn dec(&self) {
        self.dec_by(1);
    }
    pub fn inc_by(&self, v: i64) {
        self.0.get().fetch_add(v, Ordering::Relaxed);
    }
    pub fn dec_by(&self, v: i64) {
        self.0.get().fetch_sub(v, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.0.get().load(Ordering::Relaxed)
    }
}

/// Seconds, counted in nanoseconds (an integer add, no compare-and-swap loop).
#[derive(Clone)]
pub(crate) struct Seconds(Word<AtomicU64>);

impl Seconds {
    pub fn inc_by(&self, seconds: f64) {
        self.0.get().fetch_add(nanos(seconds), Ordering::Relaxed);
    }
    pub fn get(&self) -> f64 {
        self.0.get().load(Ordering::Relaxed) as f64 * 1e-9
    }
}

/// The task latency histogram of one device (bounds: [`LATENCY_BOUNDS_NS`]).
#[derive(Clone)]
pub(crate) struct Histogram(Word<DeviceWords>);

impl Histogram {
    pub fn observe(&self, seconds: f64) {
        let ns = nanos(seconds);
        let bucket = LATENCY_BOUNDS_NS
            .iter()
            .position(|&bound| ns <= bound)
            .unwrap_or(BUCKETS - 1);
        let words = self.0.get();
        words.latency_sum_ns.fetch_add(ns, Ordering::Relaxed);
        words.latency_buckets[bucket].fetch_add(1, Ordering::Relaxed);
    }
}

fn nanos(seconds: f64) -> u64 {
    // `as` saturates: negative and NaN give 0.
    (seconds * 1e9) as u64
}

/// Metric handles of one device.
#[derive(Clone)]
pub(crate) struct DeviceMetrics {
    /// Seconds from a task's flush to its completion (queueing + running).
    pub task_latency: Histogram,
    /// Tasks waiting in or taken from the device FIFO and not yet finished.
    pub queue_depth: Gauge,
    pub tasks_failed: Counter,
    /// Seconds the device spent running remote tasks and the node's own jobs (its
    /// OpenCL slots' calls).
    pub busy_seconds: Seconds,
}

/// The service's metric handles, all in one page.
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

impl Metrics {
    /// Handles into `page` for `devices` devices.
    pub fn new(page: &Arc<MetricsPage>, devices: usize) -> Metrics {
        let counter = |w: &AtomicU64| Counter(Word::new(page, w));
        let gauge = |w: &AtomicI64| Gauge(Word::new(page, w));
        Metrics {
            clients_connected: gauge(&page.clients_connected),
            client_buffer_bytes: gauge(&page.client_buffer_bytes),
            client_objects: gauge(&page.client_objects),
            program_cache_hits: counter(&page.program_cache_hits),
            program_cache_misses: counter(&page.program_cache_misses),
            bytes_to_device: counter(&page.bytes_to_device),
            bytes_from_device: counter(&page.bytes_from_device),
            devices: (0..devices)
                .map(|d| {
                    let w = page.device(d);
                    DeviceMetrics {
                        task_latency: Histogram(Word::new(page, w)),
                        queue_depth: gauge(&w.queue_depth),
                        tasks_failed: counter(&w.tasks_failed),
                        busy_seconds: Seconds(Word::new(page, &w.busy_ns)),
                    }
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::page::Snapshot;
    use super::*;

    #[test]
    fn handles_write_the_page_that_a_snapshot_reads() {
        let page = Arc::new(MetricsPage::create().unwrap());
        let m = Metrics::new(&page, 2);
        m.client_objects.inc_by(3);
        m.client_objects.dec();
        m.devices[1].task_latency.observe(5e-6); // first bucket
        m.devices[1].task_latency.observe(1e-3); // ≤ 2.56 ms
        m.devices[1].task_latency.observe(10.0); // +Inf
        m.devices[1].busy_seconds.inc_by(0.25);
        let s = Snapshot::read(&page, 2);
        assert_eq!(s.client_objects, 2);
        let d = &s.devices[1];
        assert_eq!(d.latency_buckets[0], 1);
        assert_eq!(d.latency_buckets[4], 1);
        assert_eq!(d.latency_buckets[BUCKETS - 1], 1);
        assert_eq!(d.latency_sum_ns, 10_001_005_000);
        assert_eq!(d.busy_ns, 250_000_000);
        assert!((m.devices[1].busy_seconds.get() - 0.25).abs() < 1e-12);
    }
}
