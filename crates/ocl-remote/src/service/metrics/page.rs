//! The metrics page: the service's counters, gauges and histograms as atomics in one
//! fixed-layout mapping of a `memfd`, and [`Snapshot`], a plain copy of its values.
//!
//! The layout is a `#[repr(C)]` struct of 64-bit atomics (zero is every metric's
//! start, so a fresh `ftruncate`d file is a valid page) opened by a magic word that
//! carries the layout's version. Node and runtime process are the same build, so the
//! version guards against a foreign or corrupted page rather than negotiating one: a
//! page whose magic is wrong reads as all zeros. Devices past [`DEVICES_MAX`] share a
//! last entry that is never read.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::service::mapped::SharedMap;

/// `NAOCLMET` with the layout version in its last byte.
const MAGIC: u64 = u64::from_be_bytes(*b"NAOCLME\x01");

/// Devices whose metrics a page holds (far more than a node has).
pub(crate) const DEVICES_MAX: usize = 64;

/// Upper bounds of the task latency histogram's buckets, in nanoseconds: 10 µs × 4ⁱ,
/// 10 µs … ~2.6 s, the last bucket (`+Inf`) not listed.
pub(crate) const LATENCY_BOUNDS_NS: [u64; 10] = {
    let mut b = [0u64; 10];
    let mut i = 0;
    let mut v = 10_000u64;
    while i < b.len() {
        b[i] = v;
        v *= 4;
        i += 1;
    }
    b
};
pub(crate) const BUCKETS: usize = LATENCY_BOUNDS_NS.len() + 1;

/// One device's words.
#[repr(C)]
pub(crate) struct DeviceWords {
    pub queue_depth: AtomicI64,
    pub tasks_failed: AtomicU64,
    pub busy_ns: AtomicU64,
    pub latency_sum_ns: AtomicU64,
    /// Not cumulative; the count is their sum, so count and buckets always agree.
    pub latency_buckets: [AtomicU64; BUCKETS],
}

/// The whole page.
#[repr(C)]
pub(crate) struct Layout {
    magic: AtomicU64,
    pub clients_connected: AtomicI64,
    pub client_buffer_bytes: AtomicI64,
    pub client_objects: AtomicI64,
    pub program_cache_hits: AtomicU64,
    pub program_cache_misses: AtomicU64,
    pub bytes_to_device: AtomicU64,
    pub bytes_from_device: AtomicU64,
    /// `DEVICES_MAX` devices, then the entry of devices past them.
    pub devices: [DeviceWords; DEVICES_MAX + 1],
}

const PAGE_BYTES: usize = std::mem::size_of::<Layout>();

/// A mapped metrics page.
pub(crate) struct MetricsPage {
    map: SharedMap,
}

impl std::fmt::Debug for MetricsPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MetricsPage(fd {})", self.map.fd().as_raw_fd())
    }
}

impl MetricsPage {
    /// A new page of zeros with its magic set. The fd is close-on-exec; the node hands
    /// it to a runtime process explicitly.
    pub fn create() -> io::Result<MetricsPage> {
        let map = SharedMap::create(c"netaccel-ocl-metrics", PAGE_BYTES)?;
        let page = MetricsPage { map };
        page.magic.store(MAGIC, Ordering::Relaxed);
        Ok(page)
    }

    /// Maps the page the node handed over as `fd` (the runtime process's side).
    pub fn from_fd(fd: OwnedFd) -> io::Result<MetricsPage> {
        SharedMap::from_fd(fd, PAGE_BYTES).map(|map| MetricsPage { map })
    }

    pub fn fd(&self) -> &OwnedFd {
        self.map.fd()
    }

    /// The entry of `device` (devices past [`DEVICES_MAX`] share one never read).
    pub fn device(&self, device: usize) -> &DeviceWords {
        &self.devices[device.min(DEVICES_MAX)]
    }
}

impl std::ops::Deref for MetricsPage {
    type Target = Layout;
    fn deref(&self) -> &Layout {
        // SAFETY: a live mapping of PAGE_BYTES (page-aligned), all of it atomics
        // (valid for any bits).
        unsafe { self.map.ptr().cast::<Layout>().as_ref() }
    }
}

/// One device's values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DeviceSnapshot {
    pub queue_depth: i64,
    pub tasks_failed: u64,
    pub busy_ns: u64,
    pub latency_sum_ns: u64,
    pub latency_buckets: [u64; BUCKETS],
}

/// The values of a page (or the sum of several), read one word at a time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub clients_connected: i64,
    pub client_buffer_bytes: i64,
    pub client_objects: i64,
    pub program_cache_hits: u64,
    pub program_cache_misses: u64,
    pub bytes_to_device: u64,
    pub bytes_from_device: u64,
    pub devices: Vec<DeviceSnapshot>,
}

impl Snapshot {
    /// Zeros for `devices` devices.
    pub fn zero(devices: usize) -> Snapshot {
        Snapshot {
            devices: vec![DeviceSnapshot::default(); devices.min(DEVICES_MAX)],
            ..Snapshot::default()
        }
    }

    /// The first `devices` devices' values of `page`; zeros if its magic is wrong.
    pub fn read(page: &MetricsPage, devices: usize) -> Snapshot {
        let mut s = Snapshot::zero(devices);
        if page.magic.load(Ordering::Relaxed) != MAGIC {
            return s;
        }
        let r = Ordering::Relaxed;
        s.clients_connected = page.clients_connected.load(r);
        s.client_buffer_bytes = page.client_buffer_bytes.load(r);
        s.client_objects = page.client_objects.load(r);
        s.program_cache_hits = page.program_cache_hits.load(r);
        s.program_cache_misses = page.program_cache_misses.load(r);
        s.bytes_to_device = page.bytes_to_device.load(r);
        s.bytes_from_device = page.bytes_from_device.load(r);
        for (d, out) in s.devices.iter_mut().enumerate() {
            let w = page.device(d);
            out.queue_depth = w.queue_depth.load(r);
            out.tasks_failed = w.tasks_failed.load(r);
            out.busy_ns = w.busy_ns.load(r);
            out.latency_sum_ns = w.latency_sum_ns.load(r);
            for (b, v) in out.latency_buckets.iter_mut().zip(&w.latency_buckets) {
                *b = v.load(r);
            }
        }
        s
    }

    /// Raises every counter to at least its value in `earlier` (a previous reading of
    /// the same page): what a page says can only add to what was shown, whatever its
    /// process writes into it.
    pub fn counters_at_least(&mut self, earlier: &Snapshot) {
        self.for_each_counter(earlier, |now, then| *now = (*now).max(then));
    }

    /// Adds `other`'s values (counters and gauges) to these.
    pub fn add(&mut self, other: &Snapshot) {
        self.clients_connected += other.clients_connected;
        self.client_buffer_bytes += other.client_buffer_bytes;
        self.client_objects += other.client_objects;
        for (d, o) in self.devices.iter_mut().zip(&other.devices) {
            d.queue_depth += o.queue_depth;
        }
        self.for_each_counter(other, |a, b| *a = a.saturating_add(b));
    }

    /// These values without the gauges: what a process that has ended still counts.
    pub fn counters(&self) -> Snapshot {
        let mut s = self.clone();
        s.clients_connected = 0;
        s.client_buffer_bytes = 0;
        s.client_objects = 0;
        for d in &mut s.devices {
            d.queue_depth = 0;
        }
        s
    }

    /// Calls `f` with each counter of `self` and the same counter of `other`.
    fn for_each_counter(&mut self, other: &Snapshot, f: impl Fn(&mut u64, u64)) {
        f(&mut self.program_cache_hits, other.program_cache_hits);
        f(&mut self.program_cache_misses, other.program_cache_misses);
        f(&mut self.bytes_to_device, other.bytes_to_device);
        f(&mut self.bytes_from_device, other.bytes_from_device);
        for (d, o) in self.devices.iter_mut().zip(&other.devices) {
            f(&mut d.tasks_failed, o.tasks_failed);
            f(&mut d.busy_ns, o.busy_ns);
            f(&mut d.latency_sum_ns, o.latency_sum_ns);
            for (b, ob) in d.latency_buckets.iter_mut().zip(&o.latency_buckets) {
                f(b, *ob);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_mapping_sees_the_values_and_a_foreign_page_reads_as_zeros() {
        let node = MetricsPage::create().unwrap();
        let runtime = MetricsPage::from_fd(node.fd().try_clone().unwrap()).unwrap();
        runtime.bytes_to_device.fetch_add(64, Ordering::Relaxed);
        runtime
            .device(1)
            .tasks_failed
            .fetch_add(2, Ordering::Relaxed);
        runtime
            .device(1)
            .queue_depth
            .fetch_add(3, Ordering::Relaxed);
        // Past the bound: counted nowhere that is read, and no fault.
        runtime
            .device(DEVICES_MAX + 5)
            .busy_ns
            .fetch_add(1, Ordering::Relaxed);
        let s = Snapshot::read(&node, 2);
        assert_eq!(s.bytes_to_device, 64);
        assert_eq!(s.devices[1].tasks_failed, 2);
        assert_eq!(s.devices[1].queue_depth, 3);
        assert_eq!(s.devices[0], DeviceSnapshot::default());
        runtime.magic.store(0, Ordering::Relaxed);
        assert_eq!(Snapshot::read(&node, 2), Snapshot::zero(2));
    }

    #[test]
    fn counters_never_go_down_and_sums_add_bucket_wise() {
        let mut a = Snapshot::zero(1);
        a.bytes_from_device = 10;
        a.devices[0].latency_buckets[3] = 4;
        a.devices[0].queue_depth = 2;
        let mut later = Snapshot::zero(1);
        later.bytes_from_device = 7; // a page that went backwards
        later.devices[0].latency_buckets[3] = 5;
        later.counters_at_least(&a);
        assert_eq!(later.bytes_from_device, 10);
        assert_eq!(later.devices[0].latency_buckets[3], 5);
        assert_eq!(later.devices[0].queue_depth, 0, "gauges are not raised");
        let mut sum = a.counters();
        sum.add(&later);
        assert_eq!(sum.bytes_from_device, 20);
        assert_eq!(sum.devices[0].latency_buckets[3], 9);
        assert_eq!(sum.devices[0].queue_depth, 0);
    }

    #[test]
    fn latency_bounds_are_the_documented_ones() {
        assert_eq!(LATENCY_BOUNDS_NS[0], 10_000);
        assert_eq!(LATENCY_BOUNDS_NS[9], 2_621_440_000);
    }
}
