//! Black-box tests: the real `netaccel-registry` binary on a free loopback port, driven
//! over HTTP by ureq and curl, with real `netaccel-node` processes where a node has to
//! answer (the resolver's redirect, a reconfiguration by allocation).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;
use common::{free_port, wait_for_port};

/// Arguments for a registry whose fake nodes must not be lost while a test runs
/// (they never renew; on a loaded machine a test can outlast the default lease).
const STEADY: &[&str] = &["--lease-ms", "600000"];

struct RegistryProcess {
    child: Child,
    base: String,
}

impl RegistryProcess {
    fn start(args: &[&str]) -> RegistryProcess {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut child = Command::new(env!("CARGO_BIN_EXE_netaccel-registry"))
            .args(["--listen", &listen, "--log-level", "warn"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting netaccel-registry");
        wait_for_port(listen.parse().unwrap(), &mut child, "netaccel-registry");
        RegistryProcess {
            child,
            base: format!("http://{listen}"),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// `METHOD path` with an optional JSON body and bearer token: (status, JSON body
    /// or Null, response headers we look at).
    fn call(&self, method: &str, path: &str, body: Option<&str>, token: Option<&str>) -> Reply {
        let agent = ureq::AgentBuilder::new().redirects(0).build();
        let mut req = agent.request(method, &self.url(path));
        if let Some(t) = token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        let result = match body {
            Some(b) => req.set("Content-Type", "application/json").send_string(b),
            None => req.call(),
        };
        let response = match result {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{method} {path}: {e}"),
        };
        let status = response.status();
        let header = |n: &str| response.header(n).map(String::from);
        let (location, www_authenticate) = (header("location"), header("www-authenticate"));
        let text = response.into_string().unwrap();
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Reply {
            status,
            json,
            location,
            www_authenticate,
        }
    }

    fn get(&self, path: &str) -> Reply {
        self.call("GET", path, None, None)
    }

    fn put(&self, path: &str, body: &Value) -> Reply {
        self.call("PUT", path, Some(&body.to_string()), None)
    }
}

impl Drop for RegistryProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    json: Value,
    location: Option<String>,
    www_authenticate: Option<String>,
}

impl Reply {
    fn expect(self, status: u16) -> Value {
        assert_eq!(self.status, status, "{:?}", self.json);
        self.json
    }

    /// An error reply: its status and code, with a sentence.
    fn error(self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{:?}", self.json);
        assert_eq!(self.json["code"], code, "{:?}", self.json);
        assert!(
            self.json["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{:?}",
            self.json
        );
    }
}

/// A node registration with one CPU device of `slots` accelerators at a fake address.
fn fake_node(port: u16, slots: &[(&str, f64)]) -> Value {
    let slots: Vec<Value> = slots
        .iter()
        .enumerate()
        .map(|(i, (a, busy))| json!({"id": i, "accelerator": a, "hash": "h", "busy_ratio": busy, "queue_depth": 0}))
        .collect();
    json!({
        "http": format!("127.0.0.1:{port}"),
        "rac": format!("127.0.0.1:{}", port + 1),
        "opencl": null,
        "devices": [{"id": "cpu0", "backend": "cpu", "vendor": "netaccel", "platform": "host", "slots": slots}],
    })
}

// ---- a real node ----

struct NodeProcess {
    child: Child,
    http: SocketAddr,
    rac: SocketAddr,
    dir: PathBuf,
}

impl NodeProcess {
    /// Starts `netaccel-node` (built beside this crate's binary by `cargo test
    /// --workspace`) with `config` (TOML without the listen addresses).
    fn start(config: &str) -> NodeProcess {
        let bin =
            PathBuf::from(env!("CARGO_BIN_EXE_netaccel-registry")).with_file_name("netaccel-node");
        assert!(
            bin.exists(),
            "{} missing: run `cargo build -p netaccel-node` (or test the whole workspace) first",
            bin.display()
        );
        let (http_port, rac_port) = (free_port(), free_port());
        let dir = std::env::temp_dir().join(format!(
            "netaccel-registry-test-{}-{http_port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("node.toml");
        std::fs::write(
            &path,
            format!("http = \"127.0.0.1:{http_port}\"\nrac = \"127.0.0.1:{rac_port}\"\nlog_level = \"warn\"\n{config}"),
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
        wait_for_port(rac, &mut child, "netaccel-node");
        NodeProcess {
            child,
            http,
            rac,
            dir,
        }
    }

    fn slots(&self) -> Vec<Value> {
        let v: Value = ureq::get(&format!("http://{}/v1/slots", self.http))
            .call()
            .unwrap()
            .into_json()
            .unwrap();
        v.as_array().unwrap().clone()
    }

    /// The registration this node would send: its slots, as `GET /v1/slots` shows them.
    fn registration(&self) -> Value {
        let slots: Vec<Value> = self
            .slots()
            .iter()
            .map(|s| {
                json!({"id": s["id"], "accelerator": s["accelerator"], "hash": "",
                            "busy_ratio": s["busy_ratio"], "queue_depth": s["queue_depth"]})
            })
            .collect();
        json!({
            "http": self.http.to_string(),
            "rac": self.rac.to_string(),
            "devices": [{"id": "cpu0", "backend": "cpu", "vendor": "netaccel", "platform": "host", "slots": slots}],
        })
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs curl; returns (HTTP status, body).
fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-S",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "--max-time",
            "20",
        ])
        .args(args)
        .output()
        .expect("curl is installed");
    assert!(
        out.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), body.to_string())
}

// ---- tests ----

#[test]
fn serves_the_page_health_and_metrics() {
    let reg = RegistryProcess::start(STEADY);
    let page = reg.get("/").expect(200);
    let page = page.as_str().unwrap();
    assert!(page.contains("<html") && page.contains("/v1/nodes"));
    assert!(
        page.contains("const CEILING = 0.9;"),
        "the page marks slots above the ceiling"
    );
    assert_eq!(reg.get("/health").expect(200)["status"], "ok");
    reg.put("/v1/nodes/n1", &fake_node(9000, &[("echo", 0.0)]))
        .expect(200);
    reg.put(
        "/v1/functions/f",
        &json!({"accelerator": "echo", "instances": 2}),
    )
    .expect(200);
    let text = reg.get("/metrics").expect(200);
    let text = text.as_str().unwrap();
    for line in [
        "netaccel_registry_nodes{state=\"ready\"} 1",
        "netaccel_registry_nodes{state=\"lost\"} 0",
        "netaccel_registry_slots{accelerator=\"echo\"} 1",
        "netaccel_registry_instances{state=\"bound\"} 2",
        "netaccel_registry_allocations_total{result=\"bound\"} 2",
        "netaccel_registry_reconfigurations_total{result=\"ok\"} 0",
        "netaccel_registry_migrations_total 0",
        "netaccel_registry_allocation_seconds_count 2",
        "netaccel_registry_leader 1",
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
}

#[test]
fn nodes_register_and_are_lost_within_one_lease() {
    let reg = RegistryProcess::start(&["--lease-ms", "400"]);
    let lease = reg
        .put("/v1/nodes/n1", &fake_node(9000, &[("echo", 0.0)]))
        .expect(200);
    assert_eq!(lease, json!({"lease_ms": 400}));
    reg.put("/v1/nodes/n2", &fake_node(9100, &[("echo", 0.25)]))
        .expect(200);
    reg.put(
        "/v1/functions/f",
        &json!({"accelerator": "echo", "instances": 1}),
    )
    .expect(200);
    let f = reg.get("/v1/functions/f").expect(200);
    assert_eq!(f["instances"][0]["node"], "n1");
    // n2 renews every 100 ms; n1 stops. n1 must be lost within one lease of its last
    // renewal (plus the expiry tick, a tenth of a lease, and scheduling slack).
    let last_renewal = Instant::now();
    let mut lost_after = None;
    while Instant::now() < last_renewal + Duration::from_secs(5) {
        reg.put("/v1/nodes/n2", &fake_node(9100, &[("echo", 0.25)]))
            .expect(200);
        let nodes = reg.get("/v1/nodes").expect(200);
        if nodes[0]["state"] == "lost" {
            lost_after = Some(last_renewal.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let lost_after = lost_after.expect("n1 never became lost");
    assert!(
        lost_after >= Duration::from_millis(400)
            && lost_after < Duration::from_millis(400 + 40 + 150),
        "lost after {lost_after:?}"
    );
    let nodes = reg.get("/v1/nodes").expect(200);
    assert_eq!(nodes[1]["state"], "ready");
    // Its instance moved to n2.
    let f = reg.get("/v1/functions/f").expect(200);
    assert_eq!(f["instances"][0]["node"], "n2");
    assert_eq!(
        nodes[1]["devices"][0]["slots"][0]["instances"][0],
        f["instances"][0]["id"]
    );
    // Renewing brings it back; deleting removes it.
    reg.put("/v1/nodes/n1", &fake_node(9000, &[("echo", 0.0)]))
        .expect(200);
    assert_eq!(reg.get("/v1/nodes").expect(200)[0]["state"], "ready");
    assert_eq!(
        reg.call("DELETE", "/v1/nodes/n1", None, None).expect(204),
        Value::Null
    );
    reg.call("DELETE", "/v1/nodes/n1", None, None)
        .error(404, "NOT_FOUND");
    assert_eq!(
        reg.get("/v1/nodes").expect(200).as_array().unwrap().len(),
        1
    );
}

#[test]
fn functions_and_instances() {
    let reg = RegistryProcess::start(STEADY);
    reg.put(
        "/v1/nodes/n1",
        &fake_node(9000, &[("sobel", 0.25), ("echo", 0.5)]),
    )
    .expect(200);
    let f = reg
        .put(
            "/v1/functions/edges",
            &json!({"accelerator": "sobel", "hash": null,
                    "query": {"backend": "cpu", "vendor": null, "node": null}, "instances": 2}),
        )
        .expect(200);
    assert_eq!(f["name"], "edges");
    assert_eq!(f["query"]["backend"], "cpu");
    let instances = f["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 2);
    for i in instances {
        assert_eq!(i["node"], "n1");
        assert_eq!(i["device"], "cpu0");
        assert_eq!(i["slot"], 0);
        assert_eq!(i["http"], "127.0.0.1:9000");
        assert_eq!(i["rac"], "127.0.0.1:9001");
        assert_eq!(i["opencl"], Value::Null);
    }
    assert_eq!(reg.get("/v1/functions/edges").expect(200), f);
    // One more instance, with a chosen id; asking again is the same instance.
    let created = reg
        .call(
            "POST",
            "/v1/functions/edges/instances",
            Some(r#"{"id":"pod-a"}"#),
            None,
        )
        .expect(201);
    assert_eq!(created["id"], "pod-a");
    assert_eq!(created["slot"], 0);
    let generation = created["generation"].as_u64().unwrap();
    let again = reg
        .call(
            "POST",
            "/v1/functions/edges/instances",
            Some(r#"{"id":"pod-a"}"#),
            None,
        )
        .expect(200);
    assert_eq!(again, created);
    let generated = reg
        .call("POST", "/v1/functions/edges/instances", None, None)
        .expect(201);
    assert!(generated["id"].as_str().unwrap().starts_with("edges-"));
    let got = reg.get("/v1/functions/edges/instances/pod-a").expect(200);
    assert_eq!(got, created);
    // A long poll on an unchanged binding returns it when its time is up.
    let started = Instant::now();
    let polled = reg
        .get(&format!(
            "/v1/functions/edges/instances/pod-a?after={generation}&wait_ms=100"
        ))
        .expect(200);
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(polled["generation"].as_u64(), Some(generation));
    // Scale down to 1: four instances become one.
    let f = reg
        .put(
            "/v1/functions/edges",
            &json!({"accelerator": "sobel", "instances": 1}),
        )
        .expect(200);
    assert_eq!(f["instances"].as_array().unwrap().len(), 1);
    assert_eq!(
        reg.get("/v1/functions")
            .expect(200)
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // No room for a third accelerator (both slots carry load nobody can take over).
    reg.put(
        "/v1/functions/k",
        &json!({"accelerator": "topk", "instances": 0}),
    )
    .expect(200);
    reg.call("POST", "/v1/functions/k/instances", Some("{}"), None)
        .error(409, "NO_DEVICE");
    // Deletions.
    let id = f["instances"][0]["id"].as_str().unwrap().to_string();
    reg.call(
        "DELETE",
        &format!("/v1/functions/edges/instances/{id}"),
        None,
        None,
    )
    .expect(204);
    reg.get(&format!("/v1/functions/edges/instances/{id}"))
        .error(404, "NOT_FOUND");
    reg.call("DELETE", "/v1/functions/edges", None, None)
        .expect(204);
    reg.get("/v1/functions/edges").error(404, "NOT_FOUND");
    reg.call("POST", "/v1/functions/edges/instances", None, None)
        .error(404, "NOT_FOUND");
}

/// The value of an unlabelled metric.
fn metric(reg: &RegistryProcess, name: &str) -> f64 {
    let text = reg.get("/metrics").expect(200);
    text.as_str()
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no metric {name}"))
        .parse()
        .unwrap()
}

#[test]
fn long_poll_is_woken_within_100_ms_of_a_migration() {
    let reg = RegistryProcess::start(STEADY);
    let echo = |port| fake_node(port, &[("echo", 0.0)]);
    reg.put("/v1/nodes/n1", &echo(9000)).expect(200);
    reg.put("/v1/nodes/n2", &echo(9100)).expect(200);
    reg.put(
        "/v1/functions/e",
        &json!({"accelerator": "echo", "instances": 0}),
    )
    .expect(200);
    let created = reg
        .call("POST", "/v1/functions/e/instances", None, None)
        .expect(201);
    let id = created["id"].as_str().unwrap().to_string();
    let mut binding = created;
    // Five migrations back and forth: deleting the instance's node moves it to the
    // other. On this shared 2-core machine one sample can be delayed by scheduling, so
    // the median must be under 100 ms; a missed wake-up would take the whole wait
    // (10 s) every time and fail the bound on the slowest sample too.
    let mut delays = Vec::new();
    for _ in 0..5 {
        let (from, to, to_port) = match binding["node"].as_str().unwrap() {
            "n1" => ("n1", "n2", 9100),
            _ => ("n2", "n1", 9000),
        };
        reg.put(&format!("/v1/nodes/{to}"), &echo(to_port))
            .expect(200);
        let generation = binding["generation"].as_u64().unwrap();
        let url = reg.url(&format!(
            "/v1/functions/e/instances/{id}?after={generation}&wait_ms=10000"
        ));
        let poll = std::thread::spawn(move || {
            let doc: Value = ureq::get(&url).call().unwrap().into_json().unwrap();
            (doc, Instant::now())
        });
        // Migrate only once the poll is waiting.
        let deadline = Instant::now() + Duration::from_secs(5);
        while metric(&reg, "netaccel_registry_long_polls") < 1.0 {
            assert!(Instant::now() < deadline, "the poll never waited");
            std::thread::sleep(Duration::from_millis(2));
        }
        let migrated_at = Instant::now();
        reg.call("DELETE", &format!("/v1/nodes/{from}"), None, None)
            .expect(204);
        let (doc, woke_at) = poll.join().unwrap();
        assert_eq!(doc["node"], to, "{doc}");
        assert!(doc["generation"].as_u64().unwrap() > generation);
        delays.push(woke_at.duration_since(migrated_at));
        binding = doc;
    }
    delays.sort();
    eprintln!("long poll woken after the migration began: {delays:?}");
    assert!(delays[2] < Duration::from_millis(100), "{delays:?}");
    assert!(delays[4] < Duration::from_secs(2), "{delays:?}");
    assert_eq!(metric(&reg, "netaccel_registry_long_polls"), 0.0);
}

#[test]
fn resolver_redirects_curl_to_the_least_utilised_node() {
    let node = NodeProcess::start(
        "[[slots]]\naccelerator = \"to_uppercase\"\n[[slots]]\naccelerator = \"echo\"\n",
    );
    let reg = RegistryProcess::start(&["--lease-ms", "60000"]);
    // A busier node hosting it too, which must not be chosen.
    reg.put("/v1/nodes/busy", &fake_node(9, &[("to_uppercase", 0.75)]))
        .expect(200);
    reg.put("/v1/nodes/real", &node.registration()).expect(200);
    let reply = reg.call("POST", "/v1/fn/to_uppercase?a=1&b=x", Some("hello"), None);
    assert_eq!(reply.status, 307);
    assert_eq!(
        reply.location.as_deref(),
        Some(format!("http://{}/v1/fn/to_uppercase?a=1&b=x", node.http).as_str())
    );
    let url = reg.url("/v1/fn/to_uppercase");
    let (status, body) = curl(&["-L", "-X", "POST", "--data-binary", "hello registry", &url]);
    assert_eq!((status, body.as_str()), (200, "HELLO REGISTRY"));
    // Nobody hosts topk.
    let (status, body) = curl(&["-L", &reg.url("/v1/fn/topk")]);
    assert_eq!(status, 503);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["code"], "NO_DEVICE");
}

#[test]
fn allocation_reconfigures_a_real_node() {
    let node = NodeProcess::start(
        "admin_token = \"node-secret\"\n[[slots]]\naccelerator = \"echo\"\n[[slots]]\naccelerator = \"sobel\"\n",
    );
    let reg = RegistryProcess::start(&["--lease-ms", "60000", "--node-token", "node-secret"]);
    reg.put("/v1/nodes/n1", &node.registration()).expect(200);
    // Nothing holds to_uppercase: the idle slot that comes first (0, echo) is
    // reconfigured through the node's admin API.
    let f = reg
        .put(
            "/v1/functions/up",
            &json!({"accelerator": "to_uppercase", "instances": 1}),
        )
        .expect(200);
    let binding = &f["instances"][0];
    assert_eq!(binding["slot"], 0);
    let slots = node.slots();
    assert_eq!(slots[0]["accelerator"], "to_uppercase");
    assert_eq!(slots[1]["accelerator"], "sobel");
    // The instance calls its node directly, at the address its binding names.
    let url = format!(
        "http://{}/v1/fn/to_uppercase",
        binding["http"].as_str().unwrap()
    );
    let (status, body) = curl(&["-X", "POST", "--data-binary", "bound", &url]);
    assert_eq!((status, body.as_str()), (200, "BOUND"));
    let nodes = reg.get("/v1/nodes").expect(200);
    assert_eq!(
        nodes[0]["devices"][0]["slots"][0]["accelerator"],
        "to_uppercase"
    );
    let metrics = reg.get("/metrics").expect(200);
    assert!(metrics
        .as_str()
        .unwrap()
        .contains("netaccel_registry_reconfigurations_total{result=\"ok\"} 1"));
    // Without the node's token the node refuses, and the registry says why.
    let reg2 = RegistryProcess::start(&["--lease-ms", "60000"]);
    reg2.put("/v1/nodes/n1", &node.registration()).expect(200);
    let f = reg2
        .put(
            "/v1/functions/t",
            &json!({"accelerator": "topk", "instances": 1}),
        )
        .expect(200);
    assert_eq!(f["instances"][0]["slot"], Value::Null);
    reg2.call("POST", "/v1/functions/t/instances", None, None)
        .error(409, "NO_DEVICE");
    assert_eq!(node.slots()[1]["accelerator"], "sobel");
}

#[test]
fn reconfiguration_requests_are_validated() {
    let reg = RegistryProcess::start(&["--token", "adm", "--lease-ms", "600000"]);
    let auth = Some("adm");
    // The registry will try to reconfigure this node: nothing listens at its address.
    let nobody = free_port();
    reg.call(
        "PUT",
        "/v1/nodes/n1",
        Some(&fake_node(nobody, &[("echo", 0.0), ("sobel", 0.0)]).to_string()),
        auth,
    )
    .expect(200);
    let f = reg
        .call(
            "PUT",
            "/v1/functions/e",
            Some(r#"{"accelerator":"echo","instances":1}"#),
            auth,
        )
        .expect(200);
    let id = f["instances"][0]["id"].as_str().unwrap().to_string();
    let post = |body: &str, token: Option<&str>| {
        reg.call("POST", "/v1/reconfigurations", Some(body), token)
    };
    // Bodies.
    post("{", None).error(400, "BAD_REQUEST");
    post(r#"{"node":"n1","device":"cpu0","slot":0}"#, None).error(400, "BAD_REQUEST");
    post(
        r#"{"node":"n1","device":"cpu0","slot":0,"accelerator":"x","extra":1}"#,
        None,
    )
    .error(400, "BAD_REQUEST");
    post(
        r#"{"node":"n/1","device":"cpu0","slot":0,"accelerator":"x"}"#,
        None,
    )
    .error(400, "BAD_REQUEST");
    post(
        r#"{"node":"n1","device":"cpu0","slot":-1,"accelerator":"x"}"#,
        None,
    )
    .error(400, "BAD_REQUEST");
    // Unknown node or slot.
    post(
        r#"{"node":"n9","device":"cpu0","slot":0,"accelerator":"topk"}"#,
        None,
    )
    .error(404, "NOT_FOUND");
    post(
        r#"{"node":"n1","device":"cpu0","slot":7,"accelerator":"topk"}"#,
        None,
    )
    .error(404, "NOT_FOUND");
    // A slot with someone else's instance: refused, with the reason.
    let refused = post(
        r#"{"node":"n1","device":"cpu0","slot":0,"accelerator":"topk"}"#,
        None,
    )
    .expect(409);
    assert_eq!(refused["allowed"], false);
    assert!(refused["reason"].as_str().unwrap().contains(&id));
    // A wrong token is refused outright; the right one may.
    post(
        r#"{"node":"n1","device":"cpu0","slot":0,"accelerator":"topk"}"#,
        Some("nope"),
    )
    .error(401, "UNAUTHORIZED");
    let allowed = post(
        r#"{"node":"n1","device":"cpu0","slot":0,"accelerator":"topk"}"#,
        auth,
    )
    .expect(200);
    assert_eq!(allowed, json!({"allowed": true, "migrated": [id]}));
    // The migrated instance has no echo slot left but slot 1 (sobel, idle), which the
    // registry tries to reconfigure at this fake node's address, in vain: the instance
    // ends unbound, and its binding says so.
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(
        &reg,
        "netaccel_registry_reconfigurations_total{result=\"failed\"}",
    ) < 1.0
        || !reg.get("/v1/nodes").expect(200)[0]["devices"][0]["slots"][1]["reconfiguring"].is_null()
    {
        assert!(Instant::now() < deadline, "the registry did not try slot 1");
        std::thread::sleep(Duration::from_millis(10));
    }
    let i = reg
        .get(&format!("/v1/functions/e/instances/{id}"))
        .expect(200);
    assert!(i["slot"].is_null(), "{i}");
    // The empty slot 1: anyone may.
    let allowed = post(
        r#"{"node":"n1","device":"cpu0","slot":1,"accelerator":"minmax"}"#,
        None,
    )
    .expect(200);
    assert_eq!(allowed, json!({"allowed": true, "migrated": []}));
}

#[test]
fn writes_need_the_admin_token_when_one_is_set() {
    let reg = RegistryProcess::start(&["--token", "s3cret", "--lease-ms", "600000"]);
    let body = fake_node(9000, &[("echo", 0.0)]).to_string();
    let reply = reg.call("PUT", "/v1/nodes/n1", Some(&body), None);
    assert_eq!(reply.www_authenticate.as_deref(), Some("Bearer"));
    reply.error(401, "UNAUTHORIZED");
    reg.call("PUT", "/v1/nodes/n1", Some(&body), Some("wrong"))
        .error(401, "UNAUTHORIZED");
    reg.call("PUT", "/v1/nodes/n1", Some(&body), Some("s3cret"))
        .expect(200);
    reg.call(
        "PUT",
        "/v1/functions/f",
        Some(r#"{"accelerator":"echo"}"#),
        None,
    )
    .error(401, "UNAUTHORIZED");
    reg.call("DELETE", "/v1/nodes/n1", None, None)
        .error(401, "UNAUTHORIZED");
    // Reads and the resolver need nothing.
    assert_eq!(
        reg.get("/v1/nodes").expect(200).as_array().unwrap().len(),
        1
    );
    assert_eq!(reg.get("/v1/fn/echo").status, 307);
}

#[test]
fn bodies_are_bounded_and_validated() {
    let reg = RegistryProcess::start(&["--body-bytes-max", "2048"]);
    let big = fake_node(9000, &vec![("echo", 0.0); 64]).to_string();
    assert!(big.len() > 2048);
    reg.call("PUT", "/v1/nodes/n1", Some(&big), None)
        .error(413, "TOO_LARGE");
    for (path, body, want) in [
        ("/v1/nodes/n1", "not json", "invalid body"),
        ("/v1/nodes/n1", "", "empty"),
        (
            "/v1/nodes/n1",
            r#"{"http":"127.0.0.1:1","rac":"127.0.0.1:2","devices":[{"id":"d","backend":"fpga","slots":[]}]}"#,
            "backend",
        ),
        (
            "/v1/nodes/n1",
            r#"{"http":"0.0.0.0:1","rac":"127.0.0.1:2","devices":[]}"#,
            "reach",
        ),
        (
            "/v1/nodes/n%201",
            r#"{"http":"127.0.0.1:1","rac":"127.0.0.1:2","devices":[]}"#,
            "node name",
        ),
        (
            "/v1/functions/f",
            r#"{"accelerator":"echo","instances":-1}"#,
            "invalid body",
        ),
        (
            "/v1/functions/f",
            r#"{"accelerator":"echo","instances":1,"replicas":2}"#,
            "unknown field",
        ),
        ("/v1/functions/f", r#"{"instances":1}"#, "accelerator"),
    ] {
        let reply = reg.call("PUT", path, Some(body), None);
        assert!(
            reply.json["error"].as_str().unwrap().contains(want),
            "{path} {body}: {:?}",
            reply.json
        );
        reply.error(400, "BAD_REQUEST");
    }
    reg.get("/v1/functions/f/instances/x?after=1&wait_ms=999999")
        .error(400, "BAD_REQUEST");
    reg.call("POST", "/v1/functions/f", None, None)
        .error(405, "METHOD_NOT_ALLOWED");
    reg.get("/v2/anything").error(404, "NOT_FOUND");
}

#[test]
fn sigterm_ends_the_registry_even_with_a_long_poll_waiting() {
    // A long lease, so nothing wakes the poll before the signal.
    let mut reg = RegistryProcess::start(&["--lease-ms", "600000"]);
    reg.put("/v1/nodes/n1", &fake_node(9000, &[("echo", 0.0)]))
        .expect(200);
    let f = reg
        .put(
            "/v1/functions/e",
            &json!({"accelerator": "echo", "instances": 1}),
        )
        .expect(200);
    let (id, generation) = (
        f["instances"][0]["id"].as_str().unwrap().to_string(),
        f["instances"][0]["generation"].as_u64().unwrap(),
    );
    let url = reg.url(&format!(
        "/v1/functions/e/instances/{id}?after={generation}&wait_ms=60000"
    ));
    let poll = std::thread::spawn(move || ureq::get(&url).call().is_ok());
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(&reg, "netaccel_registry_long_polls") < 1.0 {
        assert!(Instant::now() < deadline, "the poll never waited");
        std::thread::sleep(Duration::from_millis(5));
    }
    let signalled = Instant::now();
    unsafe { libc::kill(reg.child.id() as i32, libc::SIGTERM) };
    let status = loop {
        if let Some(status) = reg.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    // The grace for requests in progress is 2 s; the poll asked for 60.
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "{:?}",
        signalled.elapsed()
    );
    let _ = poll.join();
}

/// The page as a browser renders it: headless Chromium runs its script against the
/// registry and the DOM must show every node, slot and bound instance. Skipped, with
/// a message, where Chromium is not installed (Debian: `apt-get install chromium`);
/// in CI (`CI=true`) a missing Chromium is a failure.
#[test]
fn the_page_shows_nodes_slots_and_instances_in_a_browser() {
    let Some(chromium) = ["chromium", "chromium-browser"].into_iter().find(|b| {
        Command::new(b)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no chromium installed; CI needs it (Debian: apt-get install chromium)"
        );
        eprintln!("SKIP: no chromium installed");
        return;
    };
    let reg = RegistryProcess::start(&["--lease-ms", "600000"]);
    reg.put(
        "/v1/nodes/node-a",
        &fake_node(9000, &[("echo", 0.125), ("sobel", 0.95)]),
    )
    .expect(200);
    reg.put("/v1/nodes/node-b", &fake_node(9100, &[("topk", 0.5)]))
        .expect(200);
    reg.put(
        "/v1/functions/e",
        &json!({"accelerator": "echo", "instances": 2}),
    )
    .expect(200);
    let profile = std::env::temp_dir().join(format!("netaccel-chromium-{}", std::process::id()));
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            // No network beyond the registry's page: a closed network refuses these.
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--dump-dom", &reg.url("/")])
        .stderr(Stdio::null())
        .output()
        .expect("running chromium");
    let _ = std::fs::remove_dir_all(&profile);
    let dom = String::from_utf8_lossy(&out.stdout);
    for (node, slot, accelerator) in [
        ("node-a", 0, "echo"),
        ("node-a", 1, "sobel"),
        ("node-b", 0, "topk"),
    ] {
        let row = format!("<tr data-node=\"{node}\" data-slot=\"{slot}\">");
        let start = dom
            .find(&row)
            .unwrap_or_else(|| panic!("no row {row} in\n{dom}"));
        let row = &dom[start..start + dom[start..].find("</tr>").unwrap()];
        assert!(row.contains(&format!("<td>{accelerator}</td>")), "{row}");
        assert!(row.contains(">ready<"), "{row}");
        if accelerator == "echo" {
            assert!(row.contains("e-1, e-2"), "{row}");
            assert!(row.contains("13 %"), "{row}");
        }
        if accelerator == "sobel" {
            assert!(row.contains("bar hot"), "above the ceiling: {row}");
        }
    }
    assert!(dom.contains("2 nodes, 3 slots, 1 functions"), "{dom}");
}

/// Two real nodes, the test renewing their leases as their agent would: one is killed
/// (SIGKILL); the instance bound to it learns of its new binding through its long poll
/// and calls the other node successfully within about one lease.
#[test]
fn killing_a_node_rebinds_its_instance_to_a_live_one() {
    let config = "[[slots]]\naccelerator = \"to_uppercase\"\n[[slots]]\naccelerator = \"echo\"\n";
    let mut a = NodeProcess::start(config);
    let b = NodeProcess::start(config);
    let lease_ms = 1500;
    let reg = RegistryProcess::start(&["--lease-ms", &lease_ms.to_string()]);
    let renew = |name: &str, node: &NodeProcess| {
        reg.put(&format!("/v1/nodes/{name}"), &node.registration())
            .expect(200)
    };
    renew("a", &a);
    renew("b", &b);
    // Two instances: the first goes to a (the tie goes to the smaller name), the second
    // to b (fewer instances).
    let f = reg
        .put(
            "/v1/functions/up",
            &json!({"accelerator": "to_uppercase", "instances": 2}),
        )
        .expect(200);
    let on_a = f["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["node"] == "a")
        .expect("an instance on a")
        .clone();
    let (id, generation) = (
        on_a["id"].as_str().unwrap().to_string(),
        on_a["generation"].as_u64().unwrap(),
    );
    let url = reg.url(&format!(
        "/v1/functions/up/instances/{id}?after={generation}&wait_ms=10000"
    ));
    let poll = std::thread::spawn(move || {
        let doc: Value = ureq::get(&url).call().unwrap().into_json().unwrap();
        doc
    });
    renew("a", &a);
    renew("b", &b);
    let killed = Instant::now();
    let _ = a.child.kill();
    let _ = a.child.wait();
    // b keeps renewing while the instance waits for its new binding.
    while !poll.is_finished() {
        assert!(killed.elapsed() < Duration::from_secs(10), "never rebound");
        renew("b", &b);
        std::thread::sleep(Duration::from_millis(50));
    }
    let binding = poll.join().unwrap();
    assert_eq!(binding["node"], "b", "{binding}");
    assert!(binding["generation"].as_u64().unwrap() > generation);
    let call = format!(
        "http://{}/v1/fn/to_uppercase",
        binding["http"].as_str().unwrap()
    );
    let (status, body) = curl(&["-X", "POST", "--data-binary", "moved", &call]);
    assert_eq!((status, body.as_str()), (200, "MOVED"));
    let recovered = killed.elapsed();
    eprintln!("from SIGKILL to a successful call on the new binding: {recovered:?}");
    // Lost one lease after its last renewal at most (plus a tenth for the expiry tick).
    assert!(
        recovered < Duration::from_millis(lease_ms + 60 + 500),
        "{recovered:?}"
    );
    assert_eq!(reg.get("/v1/nodes").expect(200)[0]["state"], "lost");
}
