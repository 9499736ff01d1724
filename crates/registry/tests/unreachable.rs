//! A node its client cannot reach while the registry still counts it ready: the
//! client's report moves the instance. Two real nodes register with a real registry
//! under a long lease; the node of a bound instance is stopped (SIGSTOP: it answers
//! nothing, and within the lease the registry does not notice); a `Bound` with
//! `unreachable_after` gives up on the silent call, reports the node, and its retry
//! succeeds on the other node. The report's other answers are checked over HTTP.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use netaccel_client::registry::{Bound, BoundOptions, RegistryClient, RegistryError, Via};
use serde_json::json;

mod common;
use common::{free_port, registered_node, wait_for_port, Killed};

fn start_node(dir: &Path, registry: &str, name: &str) -> Killed {
    registered_node(dir, registry, name, "").0
}

fn post(base: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let reply = ureq::post(&format!("{base}{path}"))
        .set("Content-Type", "application/json")
        .send_string(body);
    let response = match reply {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{path}: {e}"),
    };
    (response.status(), response.into_json().unwrap_or_default())
}

/// A registry (lease 60 s) and two registered nodes `a` and `b`, and the function `up`
/// (to_uppercase): the registry's base URL, its process, the nodes' and the scratch
/// directory.
struct Cluster {
    base: String,
    registry: RegistryClient,
    nodes: [Killed; 2],
    _process: Killed,
    dir: std::path::PathBuf,
}

impl Cluster {
    fn start(name: &str) -> Cluster {
        let dir =
            std::env::temp_dir().join(format!("netaccel-registry-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        let listen: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_netaccel-registry"))
            .args([
                "--listen",
                &listen.to_string(),
                "--lease-ms",
                "60000",
                "--log-level",
                "warn",
            ])
            .spawn()
            .unwrap();
        wait_for_port(listen, &mut child, "netaccel-registry");
        let process = Killed(child);
        let base = format!("http://{listen}");
        let nodes = [start_node(&dir, &base, "a"), start_node(&dir, &base, "b")];
        let registry = RegistryClient::new(&base, None);
        let deadline = Instant::now() + Duration::from_secs(20);
        while registry.nodes().map(|n| n.len()).unwrap_or(0) < 2 {
            assert!(Instant::now() < deadline, "the nodes never registered");
            std::thread::sleep(Duration::from_millis(100));
        }
        registry
            .put_function("up", &json!({"accelerator": "to_uppercase"}))
            .unwrap();
        Cluster {
            base,
            registry,
            nodes,
            _process: process,
            dir,
        }
    }

    /// Stops node `name` (SIGSTOP: it answers nothing; within the lease the registry
    /// still counts it ready).
    fn stop(&self, name: Option<&str>) {
        let node = if name == Some("a") {
            &self.nodes[0]
        } else {
            &self.nodes[1]
        };
        let pid = node.0.id();
        // SAFETY: signalling our own child process.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0);
        // kill returns before every thread has stopped: a call made at once could still
        // be answered by a thread running on the other CPU (it was, 1 run in 6 here).
        let deadline = Instant::now() + Duration::from_secs(5);
        while !all_threads_stopped(pid) {
            assert!(Instant::now() < deadline, "node {name:?} never stopped");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Whether every thread of process `pid` is stopped (state `T` in its `stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // The state follows the command's closing parenthesis.
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        })
    })
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_client_that_cannot_reach_its_node_has_its_instance_moved() {
    let cluster = Cluster::start("unreachable");
    let (base, registry) = (cluster.base.clone(), cluster.registry.clone());
    let options = BoundOptions {
        unreachable_after: Some(Duration::from_millis(500)),
        ..BoundOptions::default()
    };
    let mut bound = Bound::bind(registry.clone(), "up", options).unwrap();
    assert_eq!(bound.call(&[], b"one", None).unwrap().output, b"ONE");
    let first = bound.binding();

    // Its node stops answering; the registry, within its lease, still counts it ready.
    cluster.stop(first.node.as_deref());
    let started = Instant::now();
    assert_eq!(bound.call(&[], b"two", None).unwrap().output, b"TWO");
    let took = started.elapsed();
    let moved = bound.binding();
    eprintln!("call on a silent node answered by the other one after {took:?}");
    assert_ne!(moved.node, first.node, "{moved:?}");
    assert!(moved.generation > first.generation);
    assert!(took < Duration::from_secs(5), "{took:?}");
    // For a lease after the report, new placements avoid the reported node while
    // another can take them: a new instance goes to the busier node, not the stopped
    // one (which now holds nothing and would be the allocation's first choice).
    let fresh = registry.create_instance("up", None, None).unwrap();
    assert_eq!(fresh.node, moved.node, "{fresh:?}");
    registry.delete_instance("up", &fresh.id).unwrap();
    let states = registry.nodes().unwrap();
    assert!(
        states
            .iter()
            .all(|n| serde_json::to_value(n.state).unwrap() == "ready"),
        "the report moves the instance, it does not declare the node lost"
    );

    // The report's other answers: a stale generation gets the current binding (no
    // move), an unknown instance 404, a malformed body 400; a current one moves the
    // instance again (here back to the stopped node, which the registry still counts
    // ready: it knows only what its clients report).
    let path = format!("/v1/functions/up/instances/{}/unreachable", moved.id);
    let (status, doc) = post(
        &base,
        &path,
        &format!("{{\"generation\":{}}}", first.generation),
    );
    assert_eq!((status, doc["node"].as_str()), (200, moved.node.as_deref()));
    assert_eq!(doc["generation"], moved.generation);
    assert_eq!(
        post(
            &base,
            "/v1/functions/up/instances/nope/unreachable",
            "{\"generation\":1}"
        )
        .0,
        404
    );
    assert_eq!(post(&base, &path, "{\"gen\":1}").0, 400);
    let (status, doc) = post(
        &base,
        &path,
        &format!("{{\"generation\":{}}}", moved.generation),
    );
    assert_eq!(
        (status, doc["node"].as_str()),
        (200, first.node.as_deref()),
        "{doc}"
    );
    assert!(doc["generation"].as_u64().unwrap() > moved.generation);
    // Over RAC too: the same instance, now bound to the stopped node again.
    let rac = BoundOptions {
        via: Via::Rac,
        instance: Some(moved.id.clone()),
        unreachable_after: Some(Duration::from_millis(500)),
        ..BoundOptions::default()
    };
    let mut over_rac = Bound::bind(registry.clone(), "up", rac).unwrap();
    assert_eq!(over_rac.binding().node, first.node);
    let started = Instant::now();
    assert_eq!(over_rac.call(&[], b"three", None).unwrap().output, b"THREE");
    eprintln!(
        "over RAC: answered by the other node after {:?}",
        started.elapsed()
    );
    assert_eq!(over_rac.binding().node, moved.node);
    match registry.report_unreachable("up", "nope", 1) {
        Err(RegistryError::Answer {
            http_status: 404, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let metrics = ureq::get(&format!("{base}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(
        metrics.contains("netaccel_registry_unreachable_reports_total 3"),
        "{metrics}"
    );
    drop((bound, over_rac));
}

/// The C API's `netaccel_bound_set_unreachable_after`, through the C library's own
/// functions: a bound call to a stopped node is given up after 500 ms, reported, and
/// answered by the other node.
#[test]
fn the_c_client_gives_up_on_a_silent_node_after_its_bound() {
    use netaccel::ffi::{
        netaccel_bind, netaccel_bound_call, netaccel_bound_free,
        netaccel_bound_set_unreachable_after, netaccel_buffer_free, CBuffer, CError,
    };
    let cluster = Cluster::start("unreachable-c");
    // No instance but the one the C client binds.
    cluster
        .registry
        .put_function(
            "up",
            &json!({"accelerator": "to_uppercase", "instances": 0}),
        )
        .unwrap();
    let url = std::ffi::CString::new(cluster.base.clone()).unwrap();
    // SAFETY: valid C strings and out-parameters that live through each call; the
    // handle is freed once, at the end.
    unsafe {
        let mut err: CError = std::mem::zeroed();
        let bound = netaccel_bind(url.as_ptr(), c"up".as_ptr(), std::ptr::null(), 0, &mut err);
        assert!(!bound.is_null(), "bind: kind {}", err.kind);
        let call = |bound, payload: &[u8]| {
            let mut out = CBuffer {
                data: std::ptr::null_mut(),
                len: 0,
            };
            let mut err: CError = std::mem::zeroed();
            let kind = netaccel_bound_call(
                bound,
                std::ptr::null(),
                payload.as_ptr(),
                payload.len(),
                0,
                &mut out,
                &mut err,
            );
            assert_eq!(kind, 0, "kind {kind}, status {}", err.status);
            let got = std::slice::from_raw_parts(out.data, out.len).to_vec();
            netaccel_buffer_free(&mut out);
            got
        };
        assert_eq!(call(bound, b"one"), b"ONE");
        assert_eq!(
            netaccel_bound_set_unreachable_after(bound, 500, &mut err),
            0
        );
        assert_ne!(
            netaccel_bound_set_unreachable_after(std::ptr::null_mut(), 500, &mut err),
            0,
            "a NULL handle is refused"
        );
        let instances = cluster.registry.function("up").unwrap().instances;
        assert_eq!(instances.len(), 1, "{instances:?}");
        let first = instances[0].node.clone();
        cluster.stop(first.as_deref());
        let started = Instant::now();
        assert_eq!(call(bound, b"two"), b"TWO");
        let took = started.elapsed();
        eprintln!("C client: a call on a silent node answered by the other one after {took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        let moved = cluster.registry.function("up").unwrap().instances[0]
            .node
            .clone();
        assert_ne!(moved, first);
        netaccel_bound_free(bound);
    }
}
