//! The registry's principals end to end: the real registry with a credentials file
//! under `anonymous = "refuse"`, a real node registering and renewing with its node
//! token, clients binding and calling through the Rust client with theirs, every
//! refusal with its status and an audit line, and SIGHUP taking a token away.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netaccel_client::registry::{Bound, BoundOptions, RegistryClient, RegistryError};
use serde_json::json;

mod common;
use common::{free_port, registered_node, wait_for_port, Killed};

/// `netaccel-registry hash-token`, as a user runs it.
fn hash_token(token: &str) -> String {
    testkit::hash_token(env!("CARGO_BIN_EXE_netaccel-registry").as_ref(), token)
}

fn credentials(ops_hash: &str, with_team_a: bool) -> String {
    let mut text = format!(
        r#"anonymous = "refuse"
[[principal]]
name = "ops"
role = "admin"
token_hash = "{ops_hash}"
[[principal]]
name = "n1"
role = "node"
token = "node-5d2a"
[[principal]]
name = "team-b"
role = "client"
token = "b-48fd"
functions = ["team-b-*"]
"#
    );
    if with_team_a {
        text.push_str(
            "[[principal]]\nname = \"team-a\"\nrole = \"client\"\ntoken = \"a-93be\"\nfunctions = [\"team-a-*\"]\n",
        );
    }
    text
}

fn start_node(dir: &Path, registry: &str) -> Killed {
    start_node_with(dir, registry, "").0
}

/// Node n1, registering with its node token, with `extra` configuration.
fn start_node_with(dir: &Path, registry: &str, extra: &str) -> (Killed, SocketAddr) {
    registered_node(
        dir,
        registry,
        "n1",
        &format!("registry_token = \"node-5d2a\"\n{extra}"),
    )
}

fn status(base: &str, method: &str, path: &str, token: Option<&str>) -> u16 {
    let mut req = ureq::request(method, &format!("{base}{path}"));
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    let result = if method == "GET" {
        req.call()
    } else {
        req.set("Content-Type", "application/json")
            .send_string("{}")
    };
    match result {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(code, _)) => code,
        Err(e) => panic!("{method} {path}: {e}"),
    }
}

fn refused(result: Result<impl std::fmt::Debug, RegistryError>, want: u16) {
    match result {
        Err(RegistryError::Answer { http_status, .. }) if http_status == want => {}
        other => panic!("expected {want}, got {other:?}"),
    }
}

#[test]
fn nodes_clients_and_admins_each_prove_themselves_and_do_only_their_part() {
    let dir = std::env::temp_dir().join(format!(
        "netaccel-registry-credentials-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let ops_hash = hash_token("ops-7c1e");
    let file = dir.join("credentials.toml");
    std::fs::write(&file, credentials(&ops_hash, true)).unwrap();
    let log = dir.join("registry.log");
    let port = free_port();
    let listen: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_netaccel-registry"))
        .args([
            "--listen",
            &listen.to_string(),
            "--lease-ms",
            "3000",
            "--log-level",
            "info",
        ])
        .arg("--credentials")
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_for_port(listen, &mut child, "netaccel-registry");
    let registry = Killed(child);
    let base = format!("http://{listen}");
    let _node = start_node(&dir, &base);

    // The node registered with its own token.
    let admin = RegistryClient::new(&base, Some("ops-7c1e"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while admin.nodes().map(|n| n.len()).unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "the node never registered");
        std::thread::sleep(Duration::from_millis(100));
    }
    admin
        .put_function("team-a-up", &json!({"accelerator": "to_uppercase"}))
        .unwrap();

    // team-a binds and calls its function through the Rust client.
    let team_a = RegistryClient::new(&base, Some("a-93be"));
    let mut bound = Bound::bind(team_a.clone(), "team-a-up", BoundOptions::default()).unwrap();
    let out = bound.call(&[], b"mine", None).unwrap();
    assert_eq!(out.output, b"MINE");

    // team-b may not touch team-a's function; anonymous callers and unknown tokens
    // are refused; the node token speaks for its own node only.
    let team_b = RegistryClient::new(&base, Some("b-48fd"));
    refused(team_b.create_instance("team-a-up", None, None), 403);
    refused(team_b.function("team-a-up"), 403);
    refused(
        RegistryClient::new(&base, Some("guess-0a6c")).function("team-a-up"),
        401,
    );
    assert_eq!(status(&base, "GET", "/health", None), 200);
    assert_eq!(status(&base, "GET", "/v1/nodes", None), 401);
    assert_eq!(status(&base, "POST", "/v1/fn/to_uppercase", None), 401);
    assert_eq!(status(&base, "PUT", "/v1/functions/x", Some("a-93be")), 403);
    assert_eq!(status(&base, "PUT", "/v1/nodes/n2", Some("node-5d2a")), 403);
    assert_eq!(status(&base, "GET", "/metrics", Some("node-5d2a")), 403);

    // SIGHUP with team-a removed: its next request is refused, the node renews on.
    std::fs::write(&file, credentials(&ops_hash, false)).unwrap();
    let pid = registry.0.id() as i32;
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while team_a.function("team-a-up").is_ok() {
        assert!(
            Instant::now() < deadline,
            "team-a's token still works after SIGHUP"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    refused(team_a.function("team-a-up"), 401);
    std::thread::sleep(Duration::from_millis(1500));
    let nodes = admin.nodes().unwrap();
    assert_eq!(
        serde_json::to_value(nodes[0].state).unwrap(),
        "ready",
        "the node kept renewing"
    );

    // Every refusal has its audit line, and no token is in the log.
    let text = std::fs::read_to_string(&log).unwrap();
    let audit: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("netaccel_registry::audit"))
        .collect();
    for want in [
        "team-b (client)",
        "anonymous",
        "an unknown token",
        "n1 (node)",
        "credentials_reload",
    ] {
        assert!(
            audit.iter().any(|l| l.contains(want)),
            "no audit line with {want}:\n{text}"
        );
    }
    for secret in ["ops-7c1e", "a-93be", "b-48fd", "node-5d2a", "guess-0a6c"] {
        assert!(!text.contains(secret), "the log holds {secret}:\n{text}");
    }
    drop(registry);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[nodes]` for the test below: team-a (a quota of one call a second) or team-b, or a
/// tenant with a key the node does not know.
fn node_tenants(which: &str) -> String {
    match which {
        "a" => "[nodes]\nanonymous = \"refuse\"\n[[nodes.tenants]]\nname = \"team-a\"\ntoken = \"ta-61c0\"\n\
                call = [\"to_uppercase\"]\n[nodes.tenants.quota]\ncalls_per_s = 1\ncalls_burst = 1\n"
            .to_string(),
        "b" => "[nodes]\nanonymous = \"refuse\"\n[[nodes.tenants]]\nname = \"team-b\"\ntoken = \"tb-07d2\"\n"
            .to_string(),
        _ => "[nodes]\n[[nodes.tenants]]\nname = \"team-c\"\ntoken = \"tc-5e1a\"\ncolour = \"red\"\n"
            .to_string(),
    }
}

/// Nodes started with `tenants_from_registry` take their tenants, policies and quotas
/// from the registry's `[nodes]`, refuse anonymous callers until they have them, follow
/// a change at the next renewal, and keep what they have when the registry's do not
/// pass their checks.
#[test]
fn nodes_take_their_tenants_and_quotas_from_the_registry() {
    let dir = std::env::temp_dir().join(format!(
        "netaccel-registry-node-tenants-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("credentials.toml");
    let principals = "[[principal]]\nname = \"ops\"\nrole = \"admin\"\ntoken = \"ops-7c1e\"\n\
                      [[principal]]\nname = \"n1\"\nrole = \"node\"\ntoken = \"node-5d2a\"\n";
    std::fs::write(&file, format!("{principals}{}", node_tenants("a"))).unwrap();
    let port = free_port();
    let listen: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_netaccel-registry"))
        .args([
            "--listen",
            &listen.to_string(),
            "--lease-ms",
            "1500",
            "--log-level",
            "warn",
        ])
        .arg("--credentials")
        .arg(&file)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_port(listen, &mut child, "netaccel-registry");
    let registry = Killed(child);
    let base = format!("http://{listen}");
    let (node, http) = start_node_with(&dir, &base, "tenants_from_registry = true\n");
    let call = |token: Option<&str>| {
        let mut req = ureq::post(&format!("http://{http}/v1/fn/to_uppercase"));
        if let Some(t) = token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        match req.send_string("abc") {
            Ok(r) => r.status(),
            Err(ureq::Error::Status(code, _)) => code,
            Err(e) => panic!("{e}"),
        }
    };
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    until("team-a's token never worked", &|| {
        call(Some("ta-61c0")) == 200
    });
    // The registry's policy and quota: one call a second, nobody anonymous.
    assert_eq!(call(Some("ta-61c0")), 429);
    assert_eq!(call(None), 401);
    // The node read the document once, then names its revision at each renewal and
    // is answered 304.
    let reads = |answer: &str| -> u64 {
        let text = ureq::get(&format!("{base}/metrics"))
            .set("Authorization", "Bearer ops-7c1e")
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        let series = format!("netaccel_registry_tenants_reads_total{{answer=\"{answer}\"}} ");
        let line = text.lines().find(|l| l.starts_with(&series));
        line.unwrap_or_else(|| panic!("no {series} in\n{text}"))[series.len()..]
            .trim()
            .parse()
            .unwrap()
    };
    until("no renewal read the tenants with If-None-Match", &|| {
        reads("not_modified") >= 2
    });
    assert_eq!(reads("full"), 1, "the document sent again unchanged");
    // A change at the registry reaches the node at its next renewal.
    std::fs::write(&file, format!("{principals}{}", node_tenants("b"))).unwrap();
    // SAFETY: signalling our own child process.
    assert_eq!(
        unsafe { libc::kill(registry.0.id() as i32, libc::SIGHUP) },
        0
    );
    until("team-b's token never worked", &|| {
        call(Some("tb-07d2")) == 200
    });
    assert_eq!(call(Some("ta-61c0")), 401);
    // Tenants the node cannot take are refused by the node, which keeps team-b.
    std::fs::write(&file, format!("{principals}{}", node_tenants("c"))).unwrap();
    assert_eq!(
        unsafe { libc::kill(registry.0.id() as i32, libc::SIGHUP) },
        0
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(call(Some("tb-07d2")), 200);
    assert_eq!(call(Some("tc-5e1a")), 401);
    // One full read per revision (a, b, c): a refused one is not fetched again either.
    let not_modified = reads("not_modified");
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(reads("full"), 3);
    assert!(reads("not_modified") > not_modified);
    drop((node, registry));
    let _ = std::fs::remove_dir_all(&dir);
}
