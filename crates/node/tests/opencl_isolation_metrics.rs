//! The remote OpenCL service's metrics reach the node's /metrics from isolated runtime
//! processes, under the names and labels of `opencl_isolation = "none"`: several
//! sessions run tasks and end (in `session` mode each took a process that has exited
//! since), then a hostile kernel crashes its runtime process. Every task is counted
//! exactly once, the crashed task as failed, bytes and busy time add up, and no
//! counter shown ever goes down, whether scraped while processes run or after they
//! have gone.

mod common;
#[path = "../../ocl-remote/tests/common/mod.rs"]
mod ocl;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{free_addr, TestNode};
use ocl::{inc, read_cmd, Client};
use ocl_remote::cl;
use ocl_remote::proto::{Command, KernelArg, NdRange, Request};

const SESSIONS: usize = 3;
const TASKS_PER_SESSION: usize = 4;
/// The device's series in the families labelled by device.
const DEV: &str = "device=\"0\"";

/// Scrapes /metrics and checks that no counter series went down since `seen`, which it
/// updates. Returns the text.
struct Scraper<'a> {
    node: &'a TestNode,
    seen: BTreeMap<String, f64>,
    scrapes: usize,
}

impl Scraper<'_> {
    fn scrape(&mut self) -> String {
        let text = ureq::get(&self.node.url("/metrics"))
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        self.scrapes += 1;
        for line in text.lines().filter(|l| l.starts_with("netaccel_ocl_")) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let name = series.split('{').next().unwrap();
            let counter = ["_total", "_count", "_sum", "_bucket"]
                .iter()
                .any(|s| name.ends_with(s));
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            if counter {
                if let Some(&before) = self.seen.get(series) {
                    assert!(
                        value >= before,
                        "{series} went down: {before} -> {value} (scrape {})",
                        self.scrapes
                    );
                }
                self.seen.insert(series.to_string(), value);
            }
        }
        text
    }

    /// The sum of the series of `name` whose labels contain `labels`.
    fn value(&mut self, name: &str, labels: &str) -> f64 {
        sum(&self.scrape(), name, labels)
    }

    /// Scrapes until `f` holds of the text, at most `within`.
    fn until(&mut self, within: Duration, what: &str, f: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        loop {
            let text = self.scrape();
            if f(&text) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "{what} within {within:?}:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn sum(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            (n == name && rest.contains(labels)).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// Names and label sets of the service's series (not the supervisor's `ocl_runtime_*`).
fn series(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| l.starts_with("netaccel_ocl_") && !l.starts_with("netaccel_ocl_runtime_"))
        .filter_map(|l| Some(l.rsplit_once(' ')?.0.to_string()))
        .collect()
}

/// One session: `TASKS_PER_SESSION` tasks that increment and read back a 64-byte buffer.
fn session(addr: SocketAddr, scraper: &mut Scraper) {
    let mut c = Client::connect(addr).expect("the node shares its devices");
    c.setup(0);
    for round in 1..=TASKS_PER_SESSION {
        let (status, _, reads) = c.task(vec![inc(2, 5, 3, 0), read_cmd(2, 3, 0)]);
        assert_eq!(status, cl::CL_SUCCESS);
        assert_eq!(reads[0].1[..4], (round as i32).to_le_bytes());
        scraper.scrape();
    }
}

/// A client whose kernel stores through a null pointer: its runtime process dies of
/// SIGSEGV during the task.
fn hostile_session(addr: SocketAddr) {
    let mut c = Client::connect(addr).expect("connects");
    c.setup(0);
    let source: &[u8] = b"__kernel void k(__global int *v) { *(__global int *)(size_t)v[0] = 42; }";
    for request in [
        Request::CreateProgramWithSource {
            id: 14,
            context: 1,
            source,
        },
        Request::BuildProgram {
            program: 14,
            devices: vec![],
            options: b"",
        },
        Request::CreateKernel {
            id: 15,
            program: 14,
            name: b"k",
        },
    ] {
        assert_eq!(c.call(&request).0, 0, "{request:?}");
    }
    c.send(&Request::enqueue(vec![Command::NdRange(NdRange {
        queue: 2,
        event: 0,
        kernel: 15,
        work_dim: 1,
        offset: [0; 3],
        global: [1, 0, 0],
        local: None,
        args: vec![KernelArg::Mem(3)],
    })]));
    c.send(&Request::Flush);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut rest = Vec::new();
    // The connection ends without an answer (EOF or reset).
    let _ = c.stream.read_to_end(&mut rest);
}

/// Runs the sessions against a node in `mode` and checks the figures; returns the
/// series the node showed at the end.
fn sessions_are_counted(mode: &str) -> BTreeSet<String> {
    let (node, addr) = TestNode::start_logging_with(
        || {
            let addr = free_addr();
            (
                format!("opencl = \"{addr}\"\nopencl_isolation = \"{mode}\"\n"),
                addr,
            )
        },
        &[],
    );
    let mut scraper = Scraper {
        node: &node,
        seen: BTreeMap::new(),
        scrapes: 0,
    };
    let latency = "netaccel_ocl_task_latency_seconds_count";
    for s in 1..=SESSIONS {
        session(addr, &mut scraper);
        let tasks = (s * TASKS_PER_SESSION) as f64;
        // The session's client is gone; in `session` mode so is its process, and what
        // it counted is still shown.
        scraper.until(
            Duration::from_secs(20),
            &format!("{mode}: session {s} ended and {tasks} tasks counted"),
            |t| {
                sum(t, "netaccel_ocl_clients_connected", "") == 0.0
                    && sum(t, latency, DEV) == tasks
                    && (mode != "session" || sum(t, "netaccel_ocl_runtime_processes", "") <= 2.0)
            },
        );
    }
    let tasks = (SESSIONS * TASKS_PER_SESSION) as f64;
    assert_eq!(scraper.value("netaccel_ocl_tasks_failed_total", DEV), 0.0);
    if mode != "none" {
        hostile_session(addr);
        let text = scraper.until(
            Duration::from_secs(20),
            &format!("{mode}: the crashed task counted as failed"),
            |t| sum(t, "netaccel_ocl_runtime_crashes_total", "") == 1.0,
        );
        assert_eq!(sum(&text, "netaccel_ocl_tasks_failed_total", DEV), 1.0);
        assert_eq!(
            sum(&text, latency, DEV),
            tasks,
            "{mode}: tasks counted once"
        );
        // The hostile client was the only one (in `shared` mode the process counts).
        assert!(
            node.log().contains("its 1 client(s) lost their session"),
            "{mode}: {}",
            node.log()
        );
    }
    let text = scraper.scrape();
    assert_eq!(
        sum(
            &text,
            "netaccel_ocl_task_latency_seconds_bucket",
            "le=\"+Inf\""
        ),
        tasks,
        "{mode}: buckets summed"
    );
    assert!(sum(&text, "netaccel_ocl_task_latency_seconds_sum", DEV) > 0.0);
    assert!(
        sum(&text, "netaccel_ocl_device_busy_seconds_total", DEV) > 0.0,
        "{mode}: busy seconds"
    );
    assert_eq!(
        sum(
            &text,
            "netaccel_ocl_bytes_total",
            "direction=\"from_device\""
        ),
        64.0 * tasks,
        "{mode}: each task read 64 bytes"
    );
    assert!(
        sum(&text, "netaccel_ocl_bytes_total", "direction=\"to_device\"") >= 64.0 * SESSIONS as f64,
        "{mode}: each session wrote its buffer's 64 bytes"
    );
    assert!(
        sum(&text, "netaccel_ocl_program_cache_misses_total", "") >= 1.0,
        "{mode}: builds counted"
    );
    assert_eq!(sum(&text, "netaccel_ocl_queue_depth", DEV), 0.0);
    assert_eq!(sum(&text, "netaccel_ocl_client_objects", ""), 0.0);
    assert!(scraper.scrapes > SESSIONS * TASKS_PER_SESSION);
    series(&text)
}

#[test]
fn runtime_processes_metrics_add_up_in_the_nodes_metrics() {
    if !common::opencl_runtime_present() {
        return;
    }
    let in_process = sessions_are_counted("none");
    for mode in ["session", "shared"] {
        assert_eq!(
            sessions_are_counted(mode),
            in_process,
            "{mode}: the same series as in process"
        );
    }
}
