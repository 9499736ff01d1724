//! What the remote OpenCL service's metrics cost per task, before and after they moved
//! into a shared metrics page (docs/opencl.md, "Isolation"): the metric updates one task
//! makes in `service/worker.rs` (queue depth up and down, bytes both ways, failed-task
//! check, latency histogram, busy seconds), done
//!
//! - `prometheus`: with `prometheus-client` 0.22 handles, as the service did before;
//! - `page`: as relaxed atomic adds into a `MAP_SHARED` memfd page, as it does now
//!   (the page's handles are a pointer to the word and nothing more).
//!
//! The two alternate in ROUNDS rounds of TASKS tasks each, on one thread; the figure is
//! the median over rounds of nanoseconds per task.
//!
//!   metrics-path-bench [ROUNDS] [TASKS]

use std::hint::black_box;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

struct Prometheus {
    depth: Gauge,
    to_device: Counter,
    from_device: Counter,
    failed: Counter,
    latency: Histogram,
    busy: Counter<f64, AtomicU64>,
}

#[repr(C)]
struct Words {
    depth: AtomicI64,
    to_device: AtomicU64,
    from_device: AtomicU64,
    failed: AtomicU64,
    busy_ns: AtomicU64,
    latency_sum_ns: AtomicU64,
    buckets: [AtomicU64; 11],
}

const BOUNDS_NS: [u64; 10] = [
    10_000,
    40_000,
    160_000,
    640_000,
    2_560_000,
    10_240_000,
    40_960_000,
    163_840_000,
    655_360_000,
    2_621_440_000,
];

fn page() -> &'static Words {
    // SAFETY: a fresh memfd, truncated to the struct's size and mapped shared; the
    // mapping lives to the end of the program.
    unsafe {
        let fd = libc::memfd_create(c"bench".as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0);
        let len = std::mem::size_of::<Words>();
        assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        &*(p as *const Words)
    }
}

fn task_prometheus(m: &Prometheus, latency_s: f64, busy_s: f64, status: i32) {
    m.depth.inc();
    m.to_device.inc_by(64);
    m.from_device.inc_by(64);
    if status != 0 {
        m.failed.inc();
    }
    m.latency.observe(latency_s);
    m.depth.dec();
    m.busy.inc_by(busy_s);
}

fn task_page(w: &Words, latency_s: f64, busy_s: f64, status: i32) {
    let r = Ordering::Relaxed;
    w.depth.fetch_add(1, r);
    w.to_device.fetch_add(64, r);
    w.from_device.fetch_add(64, r);
    if status != 0 {
        w.failed.fetch_add(1, r);
    }
    let ns = (latency_s * 1e9) as u64;
    let bucket = BOUNDS_NS.iter().position(|&b| ns <= b).unwrap_or(10);
    w.latency_sum_ns.fetch_add(ns, r);
    w.buckets[bucket].fetch_add(1, r);
    w.depth.fetch_sub(1, r);
    w.busy_ns.fetch_add((busy_s * 1e9) as u64, r);
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let rounds = args.first().copied().unwrap_or(15);
    let tasks = args.get(1).copied().unwrap_or(1_000_000);
    let m = Prometheus {
        depth: Gauge::default(),
        to_device: Counter::default(),
        from_device: Counter::default(),
        failed: Counter::default(),
        latency: Histogram::new(exponential_buckets(1e-5, 4.0, 10)),
        busy: Counter::default(),
    };
    let w = page();
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        for i in 0..tasks {
            // Latencies of 40–80 µs, as a 64-byte round trip here.
            let l = 40e-6 + (i % 64) as f64 * 6.25e-7;
            task_prometheus(
                black_box(&m),
                black_box(l),
                black_box(l / 2.0),
                black_box(0),
            );
        }
        before.push(t.elapsed().as_nanos() as f64 / tasks as f64);
        let t = Instant::now();
        for i in 0..tasks {
            let l = 40e-6 + (i % 64) as f64 * 6.25e-7;
            task_page(black_box(w), black_box(l), black_box(l / 2.0), black_box(0));
        }
        after.push(t.elapsed().as_nanos() as f64 / tasks as f64);
    }
    let ratios: Vec<f64> = before.iter().zip(&after).map(|(b, a)| a / b).collect();
    println!(
        "ns per task, median of {rounds} rounds of {tasks}: prometheus-client {:.1}, \
         metrics page {:.1}; page/prometheus per round, median {:.2}",
        median(before),
        median(after),
        median(ratios)
    );
}
