//! Black-box tests of the registry's clients: the real `netaccel-registry` and two real
//! `netaccel-node`s on free loopback ports, driven by the `netaccel` CLI and by the
//! library's [`Bound`] caller. The test registers the nodes and renews their leases as a
//! node's registry agent would (`PUT /v1/nodes/{name}`), so that a node's loss is the
//! registry's own lease expiry.

use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use netaccel_client::registry::{Bound, BoundOptions, RegistryClient, Via};
use serde_json::{json, Value};

mod common;
use common::{free_port, listening, sibling_bin, wait_for_port, Process};

struct Node {
    process: Process,
    http: String,
    rac: String,
}

impl Node {
    /// A node with slot 0 `to_uppercase` and slot 1 `echo`, started with `args`; on
    /// other ports when it could not bind its own (a port another test picked at the
    /// same moment: `testkit::free_port`).
    fn start(args: &[&str]) -> Node {
        for _ in 0..5 {
            if let Some(node) = Node::try_start(args) {
                return node;
            }
        }
        panic!("netaccel-node did not start on five pairs of free ports");
    }

    fn try_start(args: &[&str]) -> Option<Node> {
        let (http_port, rac_port) = (free_port(), free_port());
        let dir = std::env::temp_dir().join(format!(
            "netaccel-client-registry-{}-{http_port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("node.toml");
        std::fs::write(
            &config,
            format!(
                "http = \"127.0.0.1:{http_port}\"\nrac = \"127.0.0.1:{rac_port}\"\nlog_level = \"warn\"\n\
                 [[slots]]\naccelerator = \"to_uppercase\"\n[[slots]]\naccelerator = \"echo\"\n"
            ),
        )
        .unwrap();
        let child = Command::new(sibling_bin("netaccel-node"))
            .arg("--config")
            .arg(&config)
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut process = Process {
            child,
            dir: Some(dir),
        };
        for port in [http_port, rac_port] {
            if let Err(status) = listening(port, &mut process.child, "netaccel-node") {
                eprintln!("netaccel-node (ports {http_port}, {rac_port}) ended at start-up ({status}): trying other ports");
                return None;
            }
        }
        Some(Node {
            process,
            http: format!("127.0.0.1:{http_port}"),
            rac: format!("127.0.0.1:{rac_port}"),
        })
    }

    fn kill(&mut self) {
        // Child::kill is SIGKILL: the node gets no chance to drain or deregister.
        self.process.child.kill().unwrap();
        self.process.child.wait().unwrap();
    }
}

/// A registry, two nodes `a` and `b`, and a thread renewing the leases of the nodes in
/// `renewed` every sixth of a lease.
struct Cluster {
    _registry: Process,
    url: String,
    nodes: Vec<Node>,
    /// (name, HTTP address, RAC address) of the nodes whose leases are renewed.
    renewed: Arc<Mutex<Vec<(String, String, String)>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Who renews the nodes' leases.
#[derive(Clone, Copy, PartialEq)]
enum Renewal {
    /// The test, with `PUT /v1/nodes/{name}` (the node's agent, imitated).
    ByTest,
    /// The nodes themselves (`netaccel-node --registry URL --name NAME`).
    ByNode,
}

impl Cluster {
    fn start(lease_ms: u64) -> Cluster {
        Cluster::start_with(lease_ms, Renewal::ByTest)
    }

    fn start_with(lease_ms: u64, renewal: Renewal) -> Cluster {
        let port = free_port();
        let mut child = Command::new(sibling_bin("netaccel-registry"))
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--log-level",
                "warn",
            ])
            .args(["--lease-ms", &lease_ms.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_port(port, &mut child, "netaccel-registry");
        let url = format!("http://127.0.0.1:{port}");
        let nodes: Vec<Node> = ["a", "b"]
            .iter()
            .map(|name| match renewal {
                Renewal::ByTest => Node::start(&[]),
                Renewal::ByNode => Node::start(&["--registry", &url, "--name", name]),
            })
            .collect();
        let renewed: Vec<(String, String, String)> = match renewal {
            Renewal::ByTest => ["a", "b"]
                .iter()
                .zip(&nodes)
                .map(|(name, node)| (name.to_string(), node.http.clone(), node.rac.clone()))
                .collect(),
            Renewal::ByNode => Vec::new(),
        };
        for (name, http, rac) in &renewed {
            renew(&url, name, http, rac);
        }
        let renewed = Arc::new(Mutex::new(renewed));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (url, renewed, stop) = (url.clone(), Arc::clone(&renewed), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let nodes = renewed.lock().unwrap().clone();
                    for (name, http, rac) in &nodes {
                        renew(&url, name, http, rac);
                    }
                    std::thread::sleep(Duration::from_millis(lease_ms / 6));
                }
            });
        }
        let cluster = Cluster {
            _registry: Process { child, dir: None },
            url,
            nodes,
            renewed,
            stop,
        };
        // Both nodes ready before the test begins (at once when the test registers them).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let nodes = cluster.client().nodes().unwrap();
            let ready = nodes
                .iter()
                .filter(|n| n.state == registry_api::NodeState::Ready)
                .count();
            if ready == 2 {
                break cluster;
            }
            assert!(
                Instant::now() < deadline,
                "nodes never registered: {nodes:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn client(&self) -> RegistryClient {
        RegistryClient::new(&self.url, None)
    }

    fn stop_renewing(&self, name: &str) {
        self.renewed.lock().unwrap().retain(|(n, _, _)| n != name);
    }

    fn node_index(name: &str) -> usize {
        match name {
            "a" => 0,
            "b" => 1,
            other => panic!("unknown node {other}"),
        }
    }

    /// Runs `netaccel` against this registry with `stdin`.
    fn cli(&self, args: &[&str], stdin: &[u8]) -> Output {
        use std::io::Write;
        let mut child = Command::new(env!("CARGO_BIN_EXE_netaccel"))
            .args(args)
            .env("NETACCEL_REGISTRY", &self.url)
            .env_remove("NETACCEL_INSTANCE")
            .env_remove("NETACCEL_REGISTRY_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        child.wait_with_output().unwrap()
    }
}

/// What a node's registry agent would send: its slots as `GET /v1/slots` shows them
/// now (so a slot reconfigured behind the registry's back shows up); `None` when the
/// node does not answer.
fn registration(http: &str, rac: &str) -> Option<Value> {
    let slots: Value = ureq::get(&format!("http://{http}/v1/slots"))
        .call()
        .ok()?
        .into_json()
        .ok()?;
    let slots: Vec<Value> = slots
        .as_array()?
        .iter()
        .map(|s| {
            json!({"id": s["id"], "accelerator": s["accelerator"], "hash": "",
                   "busy_ratio": s["busy_ratio"], "queue_depth": s["queue_depth"]})
        })
        .collect();
    Some(json!({
        "http": http, "rac": rac, "opencl": null,
        "devices": [{"id": "cpu0", "backend": "cpu", "vendor": "netaccel",
                     "platform": "host", "slots": slots}],
    }))
}

fn renew(url: &str, name: &str, http: &str, rac: &str) {
    // A registry being stopped at the end of a test may refuse: not this test's concern.
    if let Some(body) = registration(http, rac) {
        let _ = ureq::put(&format!("{url}/v1/nodes/{name}")).send_json(body);
    }
}

fn ok_stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "netaccel failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn functions_are_managed_and_called_through_the_cli_and_the_library() {
    let cluster = Cluster::start(60_000);
    let out = cluster.cli(
        &[
            "functions",
            "create",
            "shout",
            "--accelerator",
            "to_uppercase",
            "--instances",
            "1",
        ],
        b"",
    );
    let text = ok_stdout(&out);
    assert!(
        text.starts_with("function shout needs to_uppercase (1 instances)\n"),
        "{text}"
    );
    let header = text.lines().nth(1).unwrap();
    assert!(header.starts_with("instance  node  device  slot"), "{text}");

    // Over HTTP and over RAC: the right output, and the bound instance released after.
    for via in ["http", "rac"] {
        let out = cluster.cli(&["call", "--function", "shout", "--via", via], b"hi there");
        assert_eq!(ok_stdout(&out), "HI THERE", "via {via}");
    }
    let f = cluster.client().function("shout").unwrap();
    assert_eq!(f.instances.len(), 1, "{f:?}");

    // Nodes: one row per slot, the instance on the slot holding to_uppercase.
    let text = ok_stdout(&cluster.cli(&["nodes"], b""));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(lines[0].starts_with("node  state  http"), "{text}");
    let shout_row = lines
        .iter()
        .find(|l| l.contains("shout-"))
        .expect("a row with the instance");
    assert!(shout_row.contains("to_uppercase"), "{text}");
    let util_col = lines[0].find("util").unwrap() + "util".len();
    for line in &lines[1..] {
        assert_eq!(&line[util_col - 1..util_col], "%", "right-aligned: {text}");
    }

    let text = ok_stdout(&cluster.cli(&["functions", "scale", "shout", "3"], b""));
    assert!(
        text.starts_with("function shout needs to_uppercase (3 instances)"),
        "{text}"
    );
    let doc: Value = serde_json::from_str(&ok_stdout(
        &cluster.cli(&["functions", "get", "shout", "--json"], b""),
    ))
    .unwrap();
    assert_eq!(doc["instances"].as_array().unwrap().len(), 3, "{doc}");

    // The library, both ways.
    for via in [Via::Http, Via::Rac] {
        let options = BoundOptions {
            via,
            ..BoundOptions::default()
        };
        let mut bound = Bound::bind(cluster.client(), "shout", options).unwrap();
        let out = bound.call(&[], b"library", None).unwrap();
        assert_eq!(out.output, b"LIBRARY", "{via:?}");
        let id = bound.binding().id;
        bound.release().unwrap();
        assert!(cluster.client().instance("shout", &id, None).is_err());
    }

    let out = cluster.cli(&["functions", "delete", "shout"], b"");
    assert_eq!(ok_stdout(&out), "function shout deleted\n");
    let out = cluster.cli(&["call", "--function", "shout"], b"x");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("404 NOT_FOUND"), "{err}");
}

/// kill -9 the node two instances are bound to: the next call of each — the library's
/// (HTTP and RAC) and the CLI's — fails on the dead node, waits for the registry to
/// rebind (one lease), retries once on the live node and returns the right output.
#[test]
fn a_call_after_its_node_is_killed_rebinds_and_succeeds() {
    let lease_ms = 1500;
    let mut cluster = Cluster::start(lease_ms);
    let reg = cluster.client();
    reg.put_function(
        "up",
        &json!({"accelerator": "to_uppercase", "instances": 0}),
    )
    .unwrap();
    for id in ["lib-http", "lib-rac", "cli-1"] {
        let b = reg.create_instance("up", Some(id), Some("a")).unwrap();
        assert_eq!(b.node.as_deref(), Some("a"), "{b:?}");
    }
    // No watcher: the failed call itself must find the new binding.
    let bind = |id: &str, via| {
        let options = BoundOptions {
            via,
            instance: Some(id.to_string()),
            watch: false,
            ..BoundOptions::default()
        };
        Bound::bind(cluster.client(), "up", options).unwrap()
    };
    let mut over_http = bind("lib-http", Via::Http);
    let mut over_rac = bind("lib-rac", Via::Rac);
    assert_eq!(
        over_http.call(&[], b"before", None).unwrap().output,
        b"BEFORE"
    );
    assert_eq!(
        over_rac.call(&[], b"before", None).unwrap().output,
        b"BEFORE"
    );

    cluster.stop_renewing("a");
    let killed = Instant::now();
    cluster.nodes[Cluster::node_index("a")].kill();
    // The CLI's call runs meanwhile, so it too starts while the registry still binds
    // its instance to the dead node.
    let cli = std::thread::scope(|scope| {
        let cli = scope
            .spawn(|| cluster.cli(&["call", "--function", "up", "--instance", "cli-1"], b"cli"));
        let out = over_http.call(&[], b"after the kill", None).unwrap();
        let recovered = killed.elapsed();
        assert_eq!(out.output, b"AFTER THE KILL");
        assert_eq!(over_http.binding().node.as_deref(), Some("b"));
        eprintln!("from SIGKILL to a successful call on the new binding: {recovered:?}");
        assert!(
            recovered < Duration::from_millis(lease_ms + 2_000),
            "{recovered:?}"
        );
        let out = over_rac.call(&[], b"over rac", None).unwrap();
        assert_eq!(out.output, b"OVER RAC");
        assert_eq!(over_rac.binding().node.as_deref(), Some("b"));
        cli.join().unwrap()
    });
    assert_eq!(ok_stdout(&cli), "CLI");
    let b = reg.instance("up", "cli-1", None).unwrap();
    assert_eq!(b.node.as_deref(), Some("b"), "{b:?}");

    // With b gone too there is nowhere to go: the call fails, and says why.
    cluster.stop_renewing("b");
    cluster.nodes[Cluster::node_index("b")].kill();
    let mut options = BoundOptions {
        via: Via::Http,
        instance: Some("lib-http".into()),
        watch: false,
        ..BoundOptions::default()
    };
    options.rebind_wait = Duration::from_millis(lease_ms * 3);
    let mut stranded = Bound::bind(cluster.client(), "up", options).unwrap();
    let err = stranded.call(&[], b"nowhere", None).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("no usable binding") || text.contains("attempt 2"),
        "{text}"
    );
}

/// A node that drains (deregisters) has its instances migrated at once; a watching
/// [`Bound`] learns its new binding through the long poll before it makes any call.
#[test]
fn a_migration_is_seen_through_the_long_poll() {
    let mut cluster = Cluster::start(60_000);
    let reg = cluster.client();
    reg.put_function(
        "up",
        &json!({"accelerator": "to_uppercase", "instances": 0}),
    )
    .unwrap();
    reg.create_instance("up", Some("watched"), Some("a"))
        .unwrap();
    let options = BoundOptions {
        instance: Some("watched".into()),
        ..BoundOptions::default()
    };
    let mut bound = Bound::bind(cluster.client(), "up", options).unwrap();
    let before = bound.binding();
    assert_eq!(before.node.as_deref(), Some("a"));
    cluster.stop_renewing("a");
    let drained = Instant::now();
    let answer = ureq::delete(&format!("{}/v1/nodes/a", cluster.url))
        .call()
        .unwrap();
    assert_eq!(answer.status(), 204);
    while bound.binding().node.as_deref() != Some("b") {
        assert!(
            drained.elapsed() < Duration::from_secs(5),
            "the watcher never saw the migration: {:?}",
            bound.binding()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let seen = drained.elapsed();
    eprintln!("migration seen by the watcher {seen:?} after the node deregistered");
    assert!(bound.binding().generation > before.generation);
    // The old node is gone for good; the call goes straight to the new one.
    cluster.nodes[Cluster::node_index("a")].kill();
    assert_eq!(bound.call(&[], b"moved", None).unwrap().output, b"MOVED");
}

/// The bound node's slot is reconfigured behind the registry's back: the node answers
/// `UNKNOWN_ACCELERATOR`, the registry migrates the instance when the node's next lease
/// renewal shows the change, and the call, retried on the new binding, succeeds.
#[test]
fn a_node_that_answers_unknown_accelerator_is_left_for_the_new_binding() {
    let cluster = Cluster::start(1500);
    let reg = cluster.client();
    reg.put_function(
        "up",
        &json!({"accelerator": "to_uppercase", "instances": 0}),
    )
    .unwrap();
    reg.create_instance("up", Some("moved"), Some("a")).unwrap();
    let options = BoundOptions {
        instance: Some("moved".into()),
        watch: false,
        ..BoundOptions::default()
    };
    let mut bound = Bound::bind(cluster.client(), "up", options).unwrap();
    assert_eq!(bound.call(&[], b"before", None).unwrap().output, b"BEFORE");
    let a = &cluster.nodes[Cluster::node_index("a")];
    let answer = ureq::put(&format!("http://{}/v1/slots/0", a.http))
        .send_json(json!({"accelerator": "echo"}))
        .unwrap();
    assert_eq!(answer.status(), 200);
    // The node itself now refuses the accelerator.
    let refused = ureq::post(&format!("http://{}/v1/fn/to_uppercase", a.http)).send_bytes(b"x");
    assert!(
        matches!(refused, Err(ureq::Error::Status(404, _))),
        "{refused:?}"
    );

    let out = bound.call(&[], b"after", None).unwrap();
    assert_eq!(out.output, b"AFTER");
    assert_eq!(bound.binding().node.as_deref(), Some("b"));
}

/// The same loss with nodes that register and renew by themselves (`netaccel-node
/// --registry`): the bound node is killed with SIGKILL, its lease runs out, and the next
/// call is rebound to the other node and returns the right output.
#[test]
fn with_nodes_renewing_their_own_leases_a_killed_node_is_left_for_the_other() {
    let mut cluster = Cluster::start_with(1500, Renewal::ByNode);
    let reg = cluster.client();
    reg.put_function(
        "up",
        &json!({"accelerator": "to_uppercase", "instances": 0}),
    )
    .unwrap();
    reg.create_instance("up", Some("own-lease"), Some("a"))
        .unwrap();
    let options = BoundOptions {
        via: Via::Rac,
        instance: Some("own-lease".into()),
        watch: false,
        ..BoundOptions::default()
    };
    let mut bound = Bound::bind(cluster.client(), "up", options).unwrap();
    assert_eq!(bound.binding().node.as_deref(), Some("a"));
    assert_eq!(bound.call(&[], b"before", None).unwrap().output, b"BEFORE");
    let killed = Instant::now();
    cluster.nodes[Cluster::node_index("a")].kill();
    let out = bound.call(&[], b"after", None).unwrap();
    eprintln!(
        "nodes renewing their own leases: SIGKILL to a successful call {:?}",
        killed.elapsed()
    );
    assert_eq!(out.output, b"AFTER");
    assert_eq!(bound.binding().node.as_deref(), Some("b"));
}

/// Several replicas: one that cannot be reached is skipped, by the library and the CLI,
/// for reads and writes, and the one that answered is asked first from then on.
#[test]
fn a_replica_that_is_down_is_skipped_for_the_next() {
    let cluster = Cluster::start(60_000);
    let dead = format!("http://127.0.0.1:{}", free_port());
    let both = format!("{dead},{}", cluster.url);
    let client = RegistryClient::new(&both, None);
    assert_eq!(client.base(), dead);
    let nodes = client.nodes().unwrap();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    assert_eq!(
        client.base(),
        cluster.url,
        "the replica that answered goes first"
    );
    client
        .put_function("echoes", &json!({"accelerator": "echo", "instances": 1}))
        .unwrap();
    let mut bound = Bound::bind(
        RegistryClient::new(&both, None),
        "echoes",
        BoundOptions::default(),
    )
    .unwrap();
    assert_eq!(bound.call(&[], b"twice", None).unwrap().output, b"twice");
    let out = cluster.cli(&["--registry", &both, "functions", "get", "echoes"], b"");
    assert!(ok_stdout(&out).contains("echoes-"), "{out:?}");
    // None answers: the error names each.
    let other_dead = format!("http://127.0.0.1:{}", free_port());
    let none = RegistryClient::new(&format!("{dead},{other_dead}"), None);
    let e = none.nodes().unwrap_err().to_string();
    assert!(
        e.contains(&dead[7..]) && e.contains(&other_dead[7..]),
        "{e}"
    );
}

/// `functions create` checks `GET /v1/nodes` first: an accelerator no node offers (the
/// nodes register their devices' catalogs) is created with a warning, or refused with
/// `--strict`; one a node offers is created without a word.
#[test]
fn creating_a_function_no_node_offers_warns_and_strict_refuses_it() {
    let cluster = Cluster::start_with(60_000, Renewal::ByNode);
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
    let out = cluster.cli(
        &[
            "functions",
            "create",
            "up",
            "--accelerator",
            "matmul",
            "--strict",
        ],
        b"",
    );
    ok_stdout(&out);
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));

    let out = cluster.cli(
        &["functions", "create", "nope", "--accelerator", "nosuch"],
        b"",
    );
    ok_stdout(&out);
    let err = stderr(&out);
    assert!(
        err.contains("warning: no node offers accelerator `nosuch`"),
        "{err}"
    );
    assert!(err.contains("to_uppercase"), "names what is offered: {err}");
    assert!(cluster.client().function("nope").is_ok());

    let out = cluster.cli(
        &[
            "functions",
            "create",
            "strict",
            "--accelerator",
            "nosuch",
            "--strict",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no node offers accelerator `nosuch`"),
        "{}",
        stderr(&out)
    );
    assert!(cluster.client().function("strict").is_err(), "not created");
}
