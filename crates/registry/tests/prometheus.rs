//! Utilisation from a real Prometheus (Debian's `prometheus`) scraping a real
//! `netaccel-node`: the registry takes a slot's utilisation from PromQL over the
//! node's own lease report, and keeps the lease report for a slot the query does not
//! name.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for_port(addr: SocketAddr, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while TcpStream::connect(addr).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{what} exited during start-up: {status}");
        }
        assert!(Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child process and a directory, both gone on drop.
struct Process {
    child: Child,
    dir: PathBuf,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn temp_dir(what: &str, port: u16) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "netaccel-registry-{what}-{}-{port}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `netaccel-node` with a `to_uppercase` slot (0) and an `echo` slot (1).
fn start_node() -> (Process, SocketAddr, SocketAddr) {
    let bin =
        PathBuf::from(env!("CARGO_BIN_EXE_netaccel-registry")).with_file_name("netaccel-node");
    assert!(
        bin.exists(),
        "{} missing: run `cargo build -p netaccel-node` (or test the whole workspace) first",
        bin.display()
    );
    let (http_port, rac_port) = (free_port(), free_port());
    let dir = temp_dir("node", http_port);
    let path = dir.join("node.toml");
    std::fs::write(
        &path,
        format!(
            "http = \"127.0.0.1:{http_port}\"\nrac = \"127.0.0.1:{rac_port}\"\nlog_level = \"warn\"\n\
             [[slots]]\naccelerator = \"to_uppercase\"\n[[slots]]\naccelerator = \"echo\"\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(bin)
        .arg("--config")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting netaccel-node");
    let http: SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
    let rac: SocketAddr = format!("127.0.0.1:{rac_port}").parse().unwrap();
    wait_for_port(http, &mut child, "netaccel-node");
    (Process { child, dir }, http, rac)
}

/// Prometheus scraping `target` every second; its base URL.
fn start_prometheus(target: SocketAddr) -> (Process, String) {
    let binary = "/usr/bin/prometheus";
    assert!(
        std::path::Path::new(binary).exists(),
        "{binary} is missing: install Debian's prometheus (test.sh does)"
    );
    let port = free_port();
    let dir = temp_dir("prometheus", port);
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: netaccel\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(binary)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={listen}"))
        .arg("--log.level=error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting prometheus");
    wait_for_port(listen.parse().unwrap(), &mut child, "prometheus");
    (Process { child, dir }, format!("http://{listen}"))
}

fn slot_utilizations(registry: &str) -> Vec<f64> {
    let nodes: Value = ureq::get(&format!("{registry}/v1/nodes"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    nodes[0]["devices"][0]["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["busy_ratio"].as_f64().unwrap())
        .collect()
}

#[test]
fn utilisation_comes_from_prometheus_and_falls_back_to_leases() {
    let (_node, http, rac) = start_node();
    let (_prometheus, prometheus) = start_prometheus(http);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_netaccel-registry"))
        .args([
            "--listen",
            &listen,
            "--log-level",
            "warn",
            "--lease-ms",
            "600000",
        ])
        .args([
            "--prometheus",
            &prometheus,
            "--prometheus-interval-ms",
            "300",
        ])
        // Only slot 0: slot 1 is one Prometheus does not know.
        .args([
            "--utilization-query",
            "rate(netaccel_slot_busy_seconds_total{slot=\"0\"}[10s])",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting netaccel-registry");
    wait_for_port(listen.parse().unwrap(), &mut child, "netaccel-registry");
    let registry = Process {
        child,
        dir: temp_dir("registry", port),
    };
    let base = format!("http://{listen}");
    // The node's lease claims both slots are busy; nobody calls them, so Prometheus
    // says slot 0 is idle.
    let slot = |id: u32, accelerator: &str| json!({"id": id, "accelerator": accelerator, "hash": "", "busy_ratio": 0.8, "queue_depth": 0});
    let registration = json!({
        "http": http.to_string(), "rac": rac.to_string(),
        "devices": [{"id": "cpu0", "backend": "cpu", "vendor": "netaccel", "platform": "host",
                     "slots": [slot(0, "to_uppercase"), slot(1, "echo")]}],
    });
    let renew = || {
        ureq::put(&format!("{base}/v1/nodes/n1"))
            .send_json(registration.clone())
            .unwrap();
    };
    renew();
    assert_eq!(slot_utilizations(&base), vec![0.8, 0.8]);
    let started = Instant::now();
    loop {
        // Renewals keep reporting 0.8: they must not overwrite Prometheus's figure.
        renew();
        let u = slot_utilizations(&base);
        if u[0] < 0.5 {
            assert_eq!(u[1], 0.8, "slot 1 keeps its lease report: {u:?}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(25),
            "Prometheus's figure never arrived: {u:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "utilisation from Prometheus {:?} after the registry started",
        started.elapsed()
    );
    drop(registry);
}
