//! Fault injection for the data-path fault runs (`tests/faults.rs`): nftables cuts in
//! a node's namespace, a node's state in the registry watched over time, a
//! Prometheus that can be killed and brought back, a small tmpfs that can be filled,
//! and the checks of what this machine can inject. Each undoes itself on drop.
//!
//! Not for: deciding what a fault should do (the scenarios do), or the load.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::netns::{self, Net, Proc};
use crate::NODES;

/// nftables rules in namespace `ns` (table `inet nafaults`), gone on drop.
pub struct Firewall<'a> {
    net: &'a Net,
    ns: usize,
}

impl<'a> Firewall<'a> {
    /// Drops packets from and to `peer` in namespace `ns`.
    pub fn cut(net: &'a Net, ns: usize, peer: std::net::Ipv4Addr) -> Firewall<'a> {
        let rules = format!(
            "table inet nafaults {{\n\
             chain in {{ type filter hook input priority 0; ip saddr {peer} drop; }}\n\
             chain out {{ type filter hook output priority 0; ip daddr {peer} drop; }}\n}}\n"
        );
        nft(net, ns, &["-f", "-"], Some(&rules)).unwrap();
        Firewall { net, ns }
    }
}

impl Drop for Firewall<'_> {
    fn drop(&mut self) {
        let lifted = nft(
            self.net,
            self.ns,
            &["delete", "table", "inet", "nafaults"],
            None,
        );
        // A second panic while unwinding would abort the run and leave the network.
        if !std::thread::panicking() {
            lifted.unwrap();
        }
    }
}

/// `nft ARGS` in namespace `ns`, `stdin` its input; its error output when it fails.
pub fn nft(net: &Net, ns: usize, args: &[&str], stdin: Option<&str>) -> Result<(), String> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = net
        .command_in(ns, "nft")
        .args(args)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running nft (Debian's nftables)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.unwrap_or("").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A thread that asks the registry for one node's state every 20 ms and keeps every
/// change with when it was seen.
pub struct StateWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(Instant, String)>>,
}

impl StateWatch {
    pub fn start(base: &str, name: &str) -> StateWatch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (url, name) = (format!("{base}/v1/nodes"), name.to_string());
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut seen: Vec<(Instant, String)> = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let nodes = ureq::get(&url)
                    .timeout(Duration::from_secs(2))
                    .call()
                    .ok()
                    .and_then(|r| r.into_json::<Value>().ok());
                let state = nodes.as_ref().and_then(|n| n.as_array()).and_then(|a| {
                    let node = a.iter().find(|n| n["name"] == name.as_str())?;
                    node["state"].as_str().map(String::from)
                });
                if let Some(state) = state {
                    if seen.last().is_none_or(|(_, last)| *last != state) {
                        seen.push((Instant::now(), state));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            seen
        });
        StateWatch { stop, thread }
    }

    pub fn stop(self) -> Vec<(Instant, String)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the state watch panicked")
    }

    /// When `state` was first seen at or after `after`.
    pub fn first(seen: &[(Instant, String)], state: &str, after: Instant) -> Option<Instant> {
        seen.iter()
            .find(|(t, s)| *t >= after && s == state)
            .map(|(t, _)| *t)
    }
}

/// Prometheus (Debian's) in the root namespace scraping the nodes every second;
/// killed on drop. `stop` and `start` take it down and bring it back on the same
/// port and data.
pub struct Prometheus {
    proc: Option<Proc>,
    argv: Vec<String>,
    listen: SocketAddr,
    dir: std::path::PathBuf,
}

impl Prometheus {
    pub fn new(net: &Net) -> Prometheus {
        let binary = "/usr/bin/prometheus";
        assert!(
            std::path::Path::new(binary).exists(),
            "{binary} is missing: install Debian's prometheus (test.sh does)"
        );
        let listen = SocketAddr::from((net.host_ip(), net.host_port()));
        let dir = std::env::temp_dir().join(format!(
            "netaccel-faults-prometheus-{}-{}",
            std::process::id(),
            listen.port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let targets: Vec<String> = (0..NODES)
            .map(|i| format!("'{}:{}'", net.ns_ip(i), netns::NODE_HTTP_PORT))
            .collect();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: netaccel\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            ),
        )
        .unwrap();
        let argv = vec![
            binary.to_string(),
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.join("data").display()),
            format!("--web.listen-address={listen}"),
            "--log.level=error".to_string(),
        ];
        let mut p = Prometheus {
            proc: None,
            argv,
            listen,
            dir,
        };
        p.start();
        p
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.listen)
    }

    pub fn start(&mut self) {
        assert!(self.proc.is_none(), "Prometheus runs already");
        let mut cmd = std::process::Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]);
        let mut proc = Proc::spawn(cmd, "prometheus");
        proc.wait_for(self.listen);
        self.proc = Some(proc);
    }

    /// `kill -9`: down, as a crashed Prometheus is.
    pub fn stop(&mut self) {
        self.proc.take().expect("Prometheus runs").kill();
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.proc.take();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether the kernel has `sch_netem` (a delay qdisc on a namespace's loopback).
pub fn netem_here(net: &Net) -> String {
    let out = net
        .command_in(0, "tc")
        .args([
            "qdisc", "add", "dev", "lo", "root", "netem", "delay", "10ms",
        ])
        .output()
        .expect("running tc (iproute2)");
    if out.status.success() {
        let _ = net
            .command_in(0, "tc")
            .args(["qdisc", "del", "dev", "lo", "root"])
            .output();
        "sch_netem available (not used)".into()
    } else {
        format!(
            "no sch_netem here (tc: {})",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    }
}

/// A small tmpfs mounted for one node's caches; unmounted on drop.
pub struct Tmpfs {
    pub dir: std::path::PathBuf,
}

impl Tmpfs {
    pub fn mount(bytes: u64) -> Tmpfs {
        let dir =
            std::env::temp_dir().join(format!("netaccel-faults-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("running mount");
        assert!(status.success(), "mount -t tmpfs: {status}");
        Tmpfs { dir }
    }

    /// Writes a file until the file system is full; the bytes written.
    pub fn fill(&self) -> u64 {
        use std::io::Write;
        let mut f = std::fs::File::create(self.dir.join("filler")).unwrap();
        let block = vec![0u8; 64 << 10];
        let mut written = 0;
        loop {
            match f.write(&block) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
        }
        let _ = f.sync_all();
        written
    }

    pub fn free(&self) {
        std::fs::remove_file(self.dir.join("filler")).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// `text` up to its `max`-th character, with an ellipsis when cut.
pub fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// Whether the OpenCL loader lists PoCL's platform (the `cache-disk-full` fault's
/// OpenCL device).
pub fn pocl_here() -> bool {
    std::process::Command::new("clinfo")
        .arg("-l")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("Portable Computing Language"))
}

pub fn node_json(url: &str) -> Value {
    ureq::get(&format!("http://{url}"))
        .timeout(Duration::from_secs(5))
        .call()
        .map(|r| r.into_json().unwrap_or(Value::Null))
        .unwrap_or(Value::Null)
}
