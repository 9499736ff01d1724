//! Black-box tests of the node's side of the registry: the real `netaccel-node` with
//! `registry` pointing at a fake registry (a small HTTP server in this file) that
//! records every request and answers as each test tells it.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use netaccel_client::rac::{RacClient, RacError};
use rac_proto::{ControlRequest, Status};
use serde_json::{json, Value};

/// One request the fake registry received.
#[derive(Clone, Debug)]
struct Recorded {
    method: String,
    path: String,
    /// Header names in lower case.
    headers: Vec<(String, String)>,
    body: Value,
    at: Instant,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

struct FakeState {
    requests: Vec<Recorded>,
    /// Connections accepted and left without an answer while `down`.
    dropped: usize,
    /// Whether the registry is "unreachable": connections are closed unanswered.
    down: bool,
    /// Whether the registry hangs: connections are held open and never answered.
    hang: bool,
    /// A follower's leader: every request is answered `503 NOT_LEADER` with this
    /// `Location`.
    leader: Option<String>,
    lease_ms: u64,
    /// The answer to `POST /v1/reconfigurations`.
    verdict: (u16, Value),
}

/// A registry that records what nodes send it.
struct FakeRegistry {
    addr: SocketAddr,
    state: Arc<Mutex<FakeState>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeRegistry {
    fn start(lease_ms: u64) -> FakeRegistry {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(FakeState {
            requests: Vec::new(),
            dropped: 0,
            down: false,
            hang: false,
            leader: None,
            lease_ms,
            verdict: (200, json!({"allowed": true, "migrated": []})),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (Arc::clone(&state), Arc::clone(&stop));
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let state = Arc::clone(&state);
                    std::thread::spawn(move || serve(stream, &state));
                }
            })
        };
        FakeRegistry {
            addr,
            state,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    fn requests_to(&self, method: &str, path: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path == path)
            .collect()
    }

    fn set_down(&self, down: bool) {
        self.state.lock().unwrap().down = down;
    }

    fn follow(&self, leader: &FakeRegistry) {
        self.state.lock().unwrap().leader = Some(leader.url());
    }

    fn set_hanging(&self) {
        self.state.lock().unwrap().hang = true;
    }

    fn dropped(&self) -> usize {
        self.state.lock().unwrap().dropped
    }

    fn set_verdict(&self, status: u16, body: Value) {
        self.state.lock().unwrap().verdict = (status, body);
    }

    /// Waits (at most 10 s) until `check` holds for the recorded requests.
    fn wait_for(&self, what: &str, check: impl Fn(&[Recorded]) -> bool) -> Vec<Recorded> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let requests = self.requests();
            if check(&requests) {
                return requests;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; got {requests:#?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for FakeRegistry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one request from `stream`, records it and answers it (or, while the fake is
/// down, closes the connection without a word).
fn serve(stream: TcpStream, state: &Mutex<FakeState>) {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let (down, hang) = {
        let mut st = state.lock().unwrap();
        st.dropped += usize::from(st.down || st.hang);
        (st.down, st.hang)
    };
    if hang {
        // Longer than any test waits for it.
        std::thread::sleep(Duration::from_secs(20));
        return;
    }
    if down {
        return;
    }
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':').unwrap();
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let request = Recorded {
        method,
        path,
        headers,
        body,
        at: Instant::now(),
    };
    let mut stream = reader.into_inner();
    let (code, answer) = {
        let mut st = state.lock().unwrap();
        if let Some(leader) = &st.leader {
            let body = r#"{"error":"not the leader","code":"NOT_LEADER"}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 503 X\r\nLocation: {leader}{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                request.path,
                body.len()
            );
            st.requests.push(request);
            return;
        }
        let answer = match (request.method.as_str(), request.path.as_str()) {
            ("PUT", p) if p.starts_with("/v1/nodes/") => (200, json!({"lease_ms": st.lease_ms})),
            ("DELETE", p) if p.starts_with("/v1/nodes/") => (204, Value::Null),
            ("POST", "/v1/reconfigurations") => st.verdict.clone(),
            _ => (404, json!({"error": "no such route", "code": "NOT_FOUND"})),
        };
        st.requests.push(request);
        answer
    };
    let body = if code == 204 {
        String::new()
    } else {
        answer.to_string()
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    k.sort_unstable();
    k
}

fn node_with(registry: &FakeRegistry, config: &str, args: &[&str]) -> TestNode {
    TestNode::start_logging(
        &format!(
            "registry = \"{}\"\nname = \"node-a\"\nregistry_retry_max_ms = 100\n{config}",
            registry.url()
        ),
        args,
    )
}

/// `PUT /v1/slots/{slot}` with `headers`: status and JSON body.
fn load(node: &TestNode, slot: u16, accelerator: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut request = ureq::put(&node.url(&format!("/v1/slots/{slot}")));
    for (name, value) in headers {
        request = request.set(name, value);
    }
    let response = match request.send_json(json!({ "accelerator": accelerator })) {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{e}"),
    };
    (response.status(), response.into_json().unwrap())
}

fn slot_accelerator(node: &TestNode, slot: u16) -> String {
    node.get_json(&format!("/v1/slots/{slot}"))["accelerator"]
        .as_str()
        .unwrap()
        .to_string()
}

fn matmul_call(node: &TestNode) {
    let n = 96usize;
    let payload = f32_bytes(&vec![1.0; 2 * n * n]);
    let response = ureq::post(&node.url(&format!("/v1/fn/matmul?n={n}")))
        .send_bytes(&payload)
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[test]
fn registers_with_the_spec_body_and_renews_within_a_third_of_the_lease() {
    let registry = FakeRegistry::start(600);
    let node = node_with(
        &registry,
        "[[slots]]\naccelerator = \"matmul\"\n[[slots]]\naccelerator = \"echo\"",
        &[],
    );
    let path = "/v1/nodes/node-a";
    let puts = registry.wait_for("six registrations", |r| {
        r.iter().filter(|r| r.method == "PUT").count() >= 6
    });
    let puts: Vec<_> = puts.iter().filter(|r| r.method == "PUT").collect();
    assert!(puts.iter().all(|r| r.path == path), "{puts:#?}");
    for pair in puts.windows(2) {
        let gap = pair[1].at - pair[0].at;
        // lease_ms / 3 = 200 ms, and some room for a busy test machine.
        assert!(gap <= Duration::from_millis(300), "renewal after {gap:?}");
    }

    // The body, key by key, as spec/registry-api.md has it.
    let body = &puts[0].body;
    assert_eq!(
        keys(body),
        ["devices", "grpc", "grpc_tls", "http", "https", "opencl", "rac", "rac_tls"]
    );
    assert_eq!(body["http"], node.addr.to_string());
    assert_eq!(body["rac"], node.rac_addr.to_string());
    assert_eq!(body["opencl"], Value::Null);
    // gRPC listens on a loopback port the kernel chose (the harness's node.toml), as
    // HTTP does: advertised with its own port. No TLS listener: none.
    let grpc: std::net::SocketAddr = body["grpc"].as_str().unwrap().parse().unwrap();
    assert_eq!(grpc.ip(), node.addr.ip());
    assert_ne!(grpc.port(), 0);
    for k in ["https", "rac_tls", "grpc_tls"] {
        assert_eq!(body[k], Value::Null, "{k}");
    }
    let devices = body["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    let device = &devices[0];
    // `accelerators`: the device's catalog, what its backend can host (a deliberate
    // addition, issue 29 item 6: without it the registry and its clients cannot tell
    // which accelerators the cluster offers).
    assert_eq!(
        keys(device),
        [
            "accelerators",
            "backend",
            "id",
            "platform",
            "slots",
            "vendor"
        ]
    );
    assert_eq!(
        (&device["id"], &device["backend"]),
        (&json!("cpu0"), &json!("cpu"))
    );
    let catalog = node.get_json("/v1/accelerators");
    let offered: Vec<&str> = device["accelerators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let cpu_hosted: Vec<&str> = catalog
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| {
            a["backends"]
                .as_array()
                .is_none_or(|b| b.contains(&json!("cpu")))
        })
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        offered, cpu_hosted,
        "the CPU device's catalog is what it can host"
    );
    for name in ["matmul", "echo", "to_uppercase", "topk"] {
        assert!(offered.contains(&name), "{name} missing from {offered:?}");
    }
    let hash_of = |name: &str| {
        catalog
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap()["hash"]
            .clone()
    };
    let slots = device["slots"].as_array().unwrap();
    assert_eq!(slots.len(), 2);
    for (slot, (id, name)) in slots.iter().zip([(0, "matmul"), (1, "echo")]) {
        assert_eq!(
            keys(slot),
            ["accelerator", "busy_ratio", "hash", "id", "queue_depth"]
        );
        assert_eq!(
            (&slot["id"], &slot["accelerator"]),
            (&json!(id), &json!(name))
        );
        assert_eq!(slot["hash"], hash_of(name));
        assert_eq!(slot["queue_depth"], 0);
        let ratio = slot["busy_ratio"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&ratio), "{ratio}");
    }

    // Busy ratios cover the renewal interval: busy while calls run, 0 again once a
    // whole interval passed without any (a ratio since start-up would stay above 0).
    let ratio_of_slot_0 = |r: &Recorded| r.body["devices"][0]["slots"][0]["busy_ratio"].as_f64();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for _ in 0..5 {
            matmul_call(&node);
        }
        let busy = registry
            .requests_to("PUT", path)
            .iter()
            .filter_map(ratio_of_slot_0)
            .any(|r| r > 0.01);
        if busy {
            break;
        }
        assert!(Instant::now() < deadline, "no renewal showed slot 0 busy");
    }
    let idle_from = Instant::now() + Duration::from_millis(250);
    registry.wait_for("a renewal showing slot 0 idle", |r| {
        r.iter()
            .filter(|r| r.method == "PUT" && r.at > idle_from)
            .any(|r| ratio_of_slot_0(r) == Some(0.0))
    });
}

/// A folder removed on drop, pass or fail.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

use testkit::free_port;

#[test]
fn registers_its_tls_and_grpc_addresses_each_with_its_own_port() {
    // A certificate made now (rcgen), for the TLS listeners to start with.
    let dir =
        TempDir(std::env::temp_dir().join(format!("netaccel-registry-tls-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let issued = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.0.join("cert.pem"), dir.0.join("key.pem"));
    std::fs::write(&cert, issued.cert.pem()).unwrap();
    std::fs::write(&key, issued.key_pair.serialize_pem()).unwrap();
    let registry = FakeRegistry::start(600);
    let (node, (https, rac_tls, grpc_tls)) = TestNode::start_logging_with(
        || {
            let (https, rac_tls, grpc_tls) = (free_port(), free_port(), free_port());
            let config = format!(
                "registry = \"{}\"\nname = \"node-a\"\nregistry_retry_max_ms = 100\n\
                 [tls]\nhttps = \"127.0.0.1:{https}\"\nrac = \"127.0.0.1:{rac_tls}\"\n\
                 grpc = \"127.0.0.1:{grpc_tls}\"\ncert = {:?}\nkey = {:?}\n",
                registry.url(),
                cert.display().to_string(),
                key.display().to_string()
            );
            (config, (https, rac_tls, grpc_tls))
        },
        &[],
    );
    let puts = registry.wait_for("a registration", |r| r.iter().any(|r| r.method == "PUT"));
    let body = &puts.iter().find(|r| r.method == "PUT").unwrap().body;
    assert_eq!(body["http"], node.addr.to_string());
    assert_eq!(body["https"], format!("127.0.0.1:{https}"));
    assert_eq!(body["rac_tls"], format!("127.0.0.1:{rac_tls}"));
    assert_eq!(body["grpc_tls"], format!("127.0.0.1:{grpc_tls}"));
    assert!(body["grpc"].is_string(), "{body}");
}

#[test]
fn keeps_serving_while_the_registry_is_down_and_registers_again_when_it_is_back() {
    let registry = FakeRegistry::start(300);
    let node = node_with(&registry, "", &["--log-level", "info"]);
    registry.wait_for("a registration", |r| !r.is_empty());
    assert_eq!(
        node.log().matches("registered with the registry").count(),
        1
    );

    registry.set_down(true);
    let deadline = Instant::now() + Duration::from_secs(10);
    while registry.dropped() < 6 {
        // Calls do not need the registry.
        let out = ureq::post(&node.url("/v1/fn/to_uppercase"))
            .send_bytes(b"still here")
            .unwrap()
            .into_string()
            .unwrap();
        assert_eq!(out, "STILL HERE");
        assert!(Instant::now() < deadline, "the node stopped retrying");
        std::thread::sleep(Duration::from_millis(10));
    }
    let log = node.log();
    assert_eq!(
        log.matches("cannot register with the registry").count(),
        1,
        "one line when the registry stops answering, not one per retry:\n{log}"
    );

    let back = Instant::now();
    registry.set_down(false);
    registry.wait_for("a registration after the registry came back", |r| {
        r.iter().any(|r| r.method == "PUT" && r.at > back)
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while !node.log().contains("the registry answers again") {
        assert!(
            Instant::now() < deadline,
            "no line saying the registry is back"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let log = node.log();
    assert_eq!(
        log.matches("the registry answers again").count(),
        1,
        "{log}"
    );
    assert_eq!(
        log.matches("cannot register with the registry").count(),
        1,
        "{log}"
    );
}

#[test]
fn deregisters_when_draining_on_sigterm_and_sends_its_token() {
    // A long lease: only the first registration comes before the signal.
    let registry = FakeRegistry::start(60_000);
    let mut node = node_with(&registry, "registry_token = \"reg-secret\"", &[]);
    registry.wait_for("a registration", |r| !r.is_empty());
    assert!(node.terminate().success());
    let requests = registry.requests();
    let last = requests.last().unwrap();
    assert_eq!(
        (last.method.as_str(), last.path.as_str()),
        ("DELETE", "/v1/nodes/node-a")
    );
    assert_eq!(requests.len(), 2, "{requests:#?}");
    for r in &requests {
        assert_eq!(
            r.header("authorization"),
            Some("Bearer reg-secret"),
            "{r:?}"
        );
    }
}

#[test]
fn a_registry_that_does_not_answer_does_not_hold_up_the_drain() {
    // Renewals every 100 ms, so one is under way when the registry starts hanging;
    // the registry timeout is much longer than the drain.
    let registry = FakeRegistry::start(300);
    let drain = Duration::from_millis(1500);
    let mut node = node_with(
        &registry,
        "drain_timeout_ms = 1500\nregistry_timeout_ms = 8000",
        &[],
    );
    registry.wait_for("a registration", |r| !r.is_empty());
    registry.set_hanging();
    let deadline = Instant::now() + Duration::from_secs(10);
    while registry.dropped() == 0 {
        assert!(
            Instant::now() < deadline,
            "no renewal reached the hanging registry"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let start = Instant::now();
    assert!(node.terminate().success());
    let took = start.elapsed();
    // Room for a loaded machine, well short of the registry timeout.
    assert!(
        took < drain + Duration::from_millis(2500),
        "drain took {took:?}"
    );
}

#[test]
fn registers_with_the_replica_that_answers_and_follows_a_follower_to_its_leader() {
    let leader = FakeRegistry::start(60_000);
    let follower = FakeRegistry::start(60_000);
    follower.follow(&leader);
    // The first replica listed is gone; the second is a follower.
    let gone = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let _node = TestNode::start_logging(
        &format!(
            "registry = \"http://{gone}, {}\"\nname = \"node-a\"",
            follower.url()
        ),
        &[],
    );
    let puts = leader.wait_for("a registration at the leader", |r| !r.is_empty());
    assert_eq!(puts[0].path, "/v1/nodes/node-a");
    assert_eq!(follower.requests()[0].path, "/v1/nodes/node-a");
}

const TWO_SLOTS: &str = "registry_token = \"reg\"\n[[slots]]\naccelerator = \"echo\"\n[[slots]]\naccelerator = \"to_uppercase\"";

#[test]
fn reconfiguration_over_http_asks_the_registry_first() {
    let registry = FakeRegistry::start(60_000);
    let node = node_with(
        &registry,
        &format!("admin_token = \"adm\"\n{TWO_SLOTS}"),
        &[],
    );
    registry.wait_for("a registration", |r| !r.is_empty());
    let admin = ("Authorization", "Bearer adm");
    let asks = || registry.requests_to("POST", "/v1/reconfigurations");

    // Allowed: the slot changes, the registry saw who asked, and hears of the new
    // accelerator at once (the lease alone would renew in 20 s).
    let (code, doc) = load(&node, 0, "topk", &[admin, ("X-Netaccel-Instance", "pod-1")]);
    assert_eq!((code, &doc["accelerator"]), (200, &json!("topk")), "{doc}");
    assert_eq!(slot_accelerator(&node, 0), "topk");
    let asked = asks();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0].body,
        json!({"node":"node-a","device":"cpu0","slot":0,"accelerator":"topk","instance":"pod-1"})
    );
    assert_eq!(
        asked[0].header("authorization"),
        None,
        "only a forced request is the admin's"
    );
    registry.wait_for("a renewal showing topk in slot 0", |r| {
        r.iter()
            .any(|r| r.method == "PUT" && r.body["devices"][0]["slots"][0]["accelerator"] == "topk")
    });

    // Refused: 409 with the registry's reason; the slot keeps its accelerator.
    registry.set_verdict(
        409,
        json!({"allowed": false, "reason": "2 instance(s) are bound to the slot (a, b)"}),
    );
    let (code, doc) = load(&node, 1, "echo", &[admin]);
    assert_eq!((code, &doc["code"]), (409, &json!("CONFLICT")), "{doc}");
    let error = doc["error"].as_str().unwrap();
    assert!(
        error.contains("2 instance(s) are bound to the slot (a, b)"),
        "{error}"
    );
    assert_eq!(slot_accelerator(&node, 1), "to_uppercase");
    assert_eq!(asks().len(), 2);

    // Loading what the slot holds changes nothing for the registry: not asked.
    assert_eq!(load(&node, 1, "to_uppercase", &[admin]).0, 200);
    assert_eq!(asks().len(), 2);

    // The registry's own reconfiguration, with the admin token: not asked back.
    registry.set_verdict(
        409,
        json!({"allowed": false, "reason": "must not be asked"}),
    );
    let validated = ("X-Netaccel-Reconfiguration", "validated");
    assert_eq!(load(&node, 1, "echo", &[admin, validated]).0, 200);
    assert_eq!(asks().len(), 2);
    assert_eq!(slot_accelerator(&node, 1), "echo");

    // Forced: asked as the registry's admin.
    registry.set_verdict(200, json!({"allowed": true, "migrated": ["a", "b"]}));
    let force = ("X-Netaccel-Reconfiguration", "force");
    assert_eq!(load(&node, 1, "logit", &[admin, force]).0, 200);
    let forced = asks().pop().unwrap();
    assert_eq!(forced.header("authorization"), Some("Bearer reg"));
    assert_eq!(forced.body["accelerator"], "logit");

    // Unreachable: refused 503 with a way out; forced, done anyway.
    registry.set_down(true);
    let (code, doc) = load(&node, 1, "minmax", &[admin]);
    assert_eq!((code, &doc["code"]), (503, &json!("UNAVAILABLE")), "{doc}");
    assert!(
        doc["error"]
            .as_str()
            .unwrap()
            .contains("could not validate"),
        "{doc}"
    );
    assert_eq!(slot_accelerator(&node, 1), "logit");
    assert_eq!(load(&node, 1, "minmax", &[admin, force]).0, 200);
    assert_eq!(slot_accelerator(&node, 1), "minmax");

    // What the node cannot pass on is refused before anything happens.
    registry.set_down(false);
    let (code, doc) = load(
        &node,
        1,
        "echo",
        &[admin, ("X-Netaccel-Reconfiguration", "please")],
    );
    assert_eq!(code, 400, "{doc}");
    let (code, doc) = load(&node, 1, "echo", &[admin, ("X-Netaccel-Instance", "a/b")]);
    assert_eq!(code, 400, "{doc}");
    assert_eq!(slot_accelerator(&node, 1), "minmax");
}

#[test]
fn without_an_admin_token_nobody_speaks_for_the_registry_or_forces() {
    let registry = FakeRegistry::start(60_000);
    let node = node_with(&registry, TWO_SLOTS, &[]);
    registry.wait_for("a registration", |r| !r.is_empty());
    // Anyone could send the header: the registry is asked all the same.
    registry.set_verdict(409, json!({"allowed": false, "reason": "bound"}));
    let (code, _) = load(
        &node,
        0,
        "topk",
        &[("X-Netaccel-Reconfiguration", "validated")],
    );
    assert_eq!(code, 409);
    assert_eq!(
        registry.requests_to("POST", "/v1/reconfigurations").len(),
        1
    );
    let (code, doc) = load(&node, 0, "topk", &[("X-Netaccel-Reconfiguration", "force")]);
    assert_eq!(code, 400, "{doc}");
    assert!(
        doc["error"].as_str().unwrap().contains("admin token"),
        "{doc}"
    );
    assert_eq!(slot_accelerator(&node, 0), "echo");
}

#[test]
fn reconfiguration_over_rac_asks_the_registry_first() {
    let registry = FakeRegistry::start(60_000);
    let node = node_with(&registry, TWO_SLOTS, &[]);
    registry.wait_for("a registration", |r| !r.is_empty());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = RacClient::connect(&node.rac_addr.to_string())
            .await
            .unwrap();
        let load = |slot, accelerator: &str| ControlRequest::Load {
            slot,
            accelerator: accelerator.into(),
            token: None,
        };
        let status_of = |r: Result<Value, RacError>| match r {
            Ok(_) => (Status::Ok, String::new()),
            Err(RacError::Status {
                status, message, ..
            }) => (status, message),
            Err(e) => panic!("{e}"),
        };

        let done = client.control(&load(0, "topk")).await.unwrap();
        assert_eq!(done["accelerator"], "topk");
        let asked = registry.requests_to("POST", "/v1/reconfigurations");
        assert_eq!(
            asked[0].body,
            json!({"node":"node-a","device":"cpu0","slot":0,"accelerator":"topk"})
        );

        registry.set_verdict(409, json!({"allowed": false, "reason": "pod-9 is bound"}));
        let (status, message) = status_of(client.control(&load(1, "echo")).await);
        assert_eq!(status, Status::Unauthorized);
        assert!(message.contains("pod-9 is bound"), "{message}");

        registry.set_down(true);
        let (status, message) = status_of(client.control(&load(1, "echo")).await);
        assert_eq!(status, Status::Unavailable);
        assert!(message.contains("could not validate"), "{message}");
    });
    assert_eq!(slot_accelerator(&node, 0), "topk");
    assert_eq!(slot_accelerator(&node, 1), "to_uppercase");
}

#[test]
fn a_node_others_could_not_reach_refuses_to_start() {
    // The harness listens on 127.0.0.1: fine for a registry on this host only.
    let (code, err) = start_refused("", &["--registry", "http://10.255.0.1:7400"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("loopback"), "{err}");
    let (code, err) = start_refused("", &["--name", "node-a"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("name is set but registry is not"), "{err}");
    let (code, err) = start_refused("", &["--registry", "10.0.0.1:7400"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("must start with http://"), "{err}");
}
