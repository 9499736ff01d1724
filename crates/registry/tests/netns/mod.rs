//! A cluster on one machine: network namespaces joined by a bridge, one
//! `netaccel-node` in each, the registry (and etcd) in the root namespace.
//!
//! Why namespaces rather than loopback ports: each node then has its own address, its
//! own port space and its own network stack, as on separate hosts, so what the nodes
//! advertise (`--advertise`) is what clients really connect to, and killing a node
//! resets its connections the way a lost host's peer sees it. The root namespace
//! reaches the nodes over the bridge, so the test process itself is the clients.
//!
//! Everything is named after the test process's id and a per-process counter (tests
//! in one binary run in parallel threads), and is torn down on drop — also when the
//! test panics: processes killed, namespaces deleted (which deletes their veth ends
//! and so the peers), the bridge deleted. Leftovers of a test process that was killed
//! outright (no drop ran) are removed by the next run, which deletes every namespace
//! and link of ours whose process is gone.
//!
//! Needs root and iproute2. Without them [`Net::create`] says why, and the test is
//! skipped when `CI` is unset and fails when `CI=true` ([`Net::or_skip`]).

#![allow(dead_code)] // each test binary uses a part

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Prefix of every namespace and link name; names are `PREFIX{kind}{pid}x{n}…`, so a
/// leftover tells which process made it. Link names must fit in 15 bytes.
const PREFIX: &str = "na";
/// The namespaces' /24 networks are taken from 10.97.0.0/16.
const SECOND_OCTET: u8 = 97;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Runs `ip ARGS`; its error output when it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip_output(args: &[&str]) -> String {
    Command::new("ip")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The pid in one of our names (`na` + kind letter + pid + `x` + …), if it is ours.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let rest = rest.get(1..)?;
    rest.split('x').next()?.parse().ok()
}

/// Deletes namespaces and links left by test processes that are gone.
fn remove_leftovers() {
    let gone = |name: &str| {
        owner_pid(name).is_some_and(|pid| !PathBuf::from(format!("/proc/{pid}")).exists())
    };
    for line in ip_output(&["netns", "list"]).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if gone(name) {
            let _ = ip(&["netns", "del", name]);
        }
    }
    for line in ip_output(&["-o", "link", "show"]).lines() {
        // "7: nab123x0: <…>" or "8: nav123x0a@if9: <…>"
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or(name);
        if gone(name) {
            let _ = ip(&["link", "del", name]);
        }
    }
}

/// A /24 of 10.97.0.0/16 no interface of this host is in yet.
fn free_subnet(seed: u32) -> Option<u8> {
    let used = ip_output(&["-4", "-o", "addr", "show"]);
    (0..250u32)
        .map(|i| ((seed + i) % 250 + 1) as u8)
        .find(|third| !used.contains(&format!(" 10.{SECOND_OCTET}.{third}.")))
}

/// A bridge in the root namespace with an address, and `count` namespaces each joined
/// to it by a veth pair, with an address of the same /24.
pub struct Net {
    bridge: String,
    veths: Vec<String>,
    /// The veth end inside each namespace.
    inner: Vec<String>,
    pub namespaces: Vec<String>,
    third_octet: u8,
}

impl Net {
    /// Creates the bridge and the namespaces; `Err` says why it could not (not root,
    /// no iproute2, no namespaces in this container), after undoing what was done.
    pub fn create(count: usize) -> Result<Net, String> {
        assert!((1..=9).contains(&count), "1 to 9 namespaces");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("network namespaces need root".into());
        }
        remove_leftovers();
        let (pid, n) = (std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let tag = format!("{pid}x{n}");
        let third = free_subnet(pid.wrapping_mul(7).wrapping_add(n))
            .ok_or("no free /24 in 10.97.0.0/16")?;
        let mut net = Net {
            bridge: format!("{PREFIX}b{tag}"),
            veths: Vec::new(),
            inner: Vec::new(),
            namespaces: Vec::new(),
            third_octet: third,
        };
        if net.bridge.len() > 15 {
            return Err(format!("link name {} is too long", net.bridge));
        }
        // On error `net` is dropped, which deletes what exists so far.
        let host = format!("{}/24", net.host_ip());
        ip(&["link", "add", &net.bridge, "type", "bridge"])?;
        // A bridge whose address was never set takes the lowest of its ports' MACs,
        // and changes it when a port with a lower one joins: the namespaces' ARP
        // entries for the host then name a MAC the bridge no longer answers to, and
        // their connections to it stall for seconds. A kubelet's CNI adds a port for
        // every Pod, so a netaccel node's renewals timed out when a Pod started on its
        // Kubernetes node (found by kubernetes_pods' node_move). Set, it stays.
        let mac = format!("02:00:0a:{SECOND_OCTET:02x}:{third:02x}:01");
        ip(&["link", "set", &net.bridge, "address", &mac])?;
        ip(&["addr", "add", &host, "dev", &net.bridge])?;
        ip(&["link", "set", &net.bridge, "up"])?;
        for i in 0..count {
            let ns = format!("{PREFIX}n{tag}{i}");
            ip(&["netns", "add", &ns])?;
            net.namespaces.push(ns.clone());
            let (outer, inner) = (format!("{PREFIX}v{tag}{i}"), format!("{PREFIX}i{tag}{i}"));
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ])?;
            net.veths.push(outer.clone());
            net.inner.push(inner.clone());
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["link", "set", &outer, "master", &net.bridge])?;
            ip(&["link", "set", &outer, "up"])?;
            let addr = format!("{}/24", net.ns_ip(i));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", &inner])?;
            ip(&["-n", &ns, "link", "set", &inner, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    /// [`Net::create`], or `None` with a line on the terminal when the test may be
    /// skipped (`CI` unset); with `CI` set a missing prerequisite fails the test.
    pub fn or_skip(count: usize) -> Option<Net> {
        match Net::create(count) {
            Ok(net) => Some(net),
            Err(why) if std::env::var_os("CI").is_none() => {
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIP: cannot build a network of namespaces ({why}); with CI set this is a failure"
                );
                None
            }
            Err(why) => panic!("CI is set and the network of namespaces failed: {why}"),
        }
    }

    /// The root namespace's address on the bridge.
    pub fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, SECOND_OCTET, self.third_octet, 1)
    }

    /// Namespace `i`'s address.
    pub fn ns_ip(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, SECOND_OCTET, self.third_octet, 11 + i as u8)
    }

    /// A port free on the bridge address (for a process in the root namespace).
    pub fn host_port(&self) -> u16 {
        TcpListener::bind((self.host_ip(), 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// Takes namespace `i` off the network (its link down), as a host that lost power
    /// or its network: packets to it go unanswered, nothing is reset.
    pub fn unplug(&self, i: usize) {
        ip(&[
            "-n",
            &self.namespaces[i],
            "link",
            "set",
            &self.inner[i],
            "down",
        ])
        .unwrap();
    }

    /// Puts namespace `i` back on the network.
    pub fn plug(&self, i: usize) {
        ip(&[
            "-n",
            &self.namespaces[i],
            "link",
            "set",
            &self.inner[i],
            "up",
        ])
        .unwrap();
    }

    /// `program` run inside namespace `i`.
    pub fn command_in(&self, i: usize, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.namespaces[i], program]);
        cmd
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        // Gone with their peers already, unless a namespace could not be deleted.
        for veth in &self.veths {
            let _ = ip(&["link", "del", veth]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

/// Whether any namespace or link of this test process is left (checked after a
/// harness is dropped).
pub fn leftovers_of_this_process() -> Vec<String> {
    let pid = std::process::id();
    let mut left: Vec<String> = ip_output(&["netns", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| owner_pid(n) == Some(pid))
        .map(String::from)
        .collect();
    left.extend(
        ip_output(&["-o", "link", "show"])
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap_or(n))
            .filter(|n| owner_pid(n) == Some(pid))
            .map(String::from),
    );
    left
}

/// A process killed (SIGKILL) and reaped on drop.
pub struct Proc {
    pub child: Child,
    pub what: String,
}

impl Proc {
    /// Starts `cmd`. The child is killed also when the test process dies without
    /// running its destructors (killed by a timeout, say): otherwise a node would live
    /// on in a namespace nobody can name any more.
    pub fn spawn(mut cmd: Command, what: &str) -> Proc {
        // SAFETY: prctl is async-signal-safe, and nothing else runs between fork and
        // exec. The signal comes when the thread that started the child ends: the
        // test's own thread, which outlives the child (the drop kills it first).
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        Proc {
            child,
            what: what.to_string(),
        }
    }

    /// Waits up to 15 s for `addr` to accept connections; fails at once if the
    /// process exits.
    pub fn wait_for(&mut self, addr: SocketAddr) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("{} exited during start-up: {status}", self.what);
            }
            assert!(
                Instant::now() < deadline,
                "{} did not listen on {addr}",
                self.what
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL, and reaped.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The binaries beside this crate's: `cargo test` builds the workspace's binaries into
/// the same directory (a test run of this crate alone needs `cargo build -p
/// netaccel-node` first).
pub fn binary(name: &str) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_netaccel-registry")).with_file_name(name);
    assert!(
        bin.exists(),
        "{} missing: run `cargo build -p netaccel-node` (or test the whole workspace) first",
        bin.display()
    );
    bin
}

/// A `netaccel-node` in namespace `index`, registered with `registry` (one URL or
/// several, comma-separated) as `name`, advertising its namespace's address.
pub struct Node {
    pub proc: Proc,
    pub name: String,
    pub http: SocketAddr,
    pub rac: SocketAddr,
    pub opencl: Option<SocketAddr>,
    dir: PathBuf,
}

/// Where a node in a namespace listens: each namespace has its own ports.
pub const NODE_HTTP_PORT: u16 = 8080;
pub const NODE_RAC_PORT: u16 = 9400;
/// The token the registry is given (`--node-token`) to reconfigure slots.
pub const NODE_TOKEN: &str = "node-secret";

impl Node {
    /// `slots`: the accelerators of its CPU slots. `extra`: more node.toml lines.
    pub fn start(
        net: &Net,
        index: usize,
        name: &str,
        registry: &str,
        slots: &[&str],
        extra: &str,
    ) -> Node {
        let ip = net.ns_ip(index);
        let http = SocketAddr::from((ip, NODE_HTTP_PORT));
        let rac = SocketAddr::from((ip, NODE_RAC_PORT));
        let dir = std::env::temp_dir().join(format!(
            "netaccel-cluster-{}-{}",
            std::process::id(),
            net.namespaces[index]
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut config = format!(
            "http = \"{http}\"\nrac = \"{rac}\"\nlog_level = \"warn\"\nadmin_token = \"{NODE_TOKEN}\"\n{extra}\n"
        );
        for accelerator in slots {
            config.push_str(&format!("[[slots]]\naccelerator = \"{accelerator}\"\n"));
        }
        let path = dir.join("node.toml");
        std::fs::write(&path, config).unwrap();
        let mut cmd = net.command_in(index, binary("netaccel-node").to_str().unwrap());
        cmd.arg("--config")
            .arg(&path)
            .args(["--registry", registry, "--name", name, "--advertise"])
            .arg(ip.to_string());
        let mut proc = Proc::spawn(cmd, &format!("netaccel-node {name}"));
        proc.wait_for(http);
        proc.wait_for(rac);
        Node {
            proc,
            name: name.to_string(),
            http,
            rac,
            opencl: None,
            dir,
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.proc.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `netaccel-registry` in the root namespace, listening on the bridge address.
pub struct Registry {
    pub proc: Proc,
    pub base: String,
}

impl Registry {
    pub fn start(net: &Net, args: &[&str]) -> Registry {
        let listen = SocketAddr::from((net.host_ip(), net.host_port()));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_netaccel-registry"));
        cmd.args(["--listen", &listen.to_string(), "--log-level", "warn"])
            .args(["--node-token", NODE_TOKEN])
            .args(args);
        let mut proc = Proc::spawn(cmd, "netaccel-registry");
        proc.wait_for(listen);
        Registry {
            proc,
            base: format!("http://{listen}"),
        }
    }

    /// `METHOD path` with an optional JSON body: (status, JSON or Null).
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let agent = ureq::AgentBuilder::new()
            .redirects(0)
            .timeout(Duration::from_secs(10))
            .build();
        let req = agent.request(method, &format!("{}{path}", self.base));
        let result = match body {
            Some(b) => req.send_json(b.clone()),
            None => req.call(),
        };
        let response = match result {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{method} {}{path}: {e}", self.base),
        };
        let status = response.status();
        let text = response.into_string().unwrap();
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, json)
    }

    /// [`Registry::call`], again while the replica answers `503 UNAVAILABLE` (its
    /// store slow to answer, or its election lease not yet renewed: the contract's
    /// "try again"), for at most 10 s — as a client does. Any other answer is final.
    pub fn call_available(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (status, answer) = self.call(method, path, body);
            if status != 503 || answer["code"] != "UNAVAILABLE" || Instant::now() >= deadline {
                return (status, answer);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `GET path`, which must answer `200` ([`Registry::call_available`]).
    pub fn get(&self, path: &str) -> Value {
        let (status, body) = self.call_available("GET", path, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    /// The state of node `name` in `GET /v1/nodes` (`None`: not registered).
    pub fn node_state(&self, name: &str) -> Option<String> {
        self.get("/v1/nodes")
            .as_array()?
            .iter()
            .find(|n| n["name"] == name)
            .and_then(|n| n["state"].as_str().map(String::from))
    }

    /// Polls until every one of `names` is registered and ready.
    pub fn wait_ready(&self, names: &[&str], within: Duration) {
        let deadline = Instant::now() + within;
        while !names
            .iter()
            .all(|n| self.node_state(n).as_deref() == Some("ready"))
        {
            assert!(
                Instant::now() < deadline,
                "nodes {names:?} not all ready: {}",
                self.get("/v1/nodes")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
