//! The node against the real registry (crate `netaccel-registry`, served in this test's
//! process on a free port): registration as the registry sees it, instances bound to
//! the node's slots, a reconfiguration refused and then allowed for a bound instance,
//! the registry reconfiguring a slot itself, and deregistration on SIGTERM.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use clap::Parser;
use common::*;
use serde_json::{json, Value};

/// A registry served on its own runtime until dropped.
struct Registry {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Registry {
    fn start(args: &[&str]) -> Registry {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let config = netaccel_registry::Args::parse_from(
            ["netaccel-registry", "--log-level", "warn"]
                .iter()
                .chain(args),
        )
        .into_config()
        .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let shutdown = async move {
                    let _ = stopped.await;
                };
                netaccel_registry::serve(config, listener, shutdown)
                    .await
                    .unwrap();
            });
        });
        Registry {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn get(&self, path: &str) -> Value {
        ureq::get(&self.url(path))
            .call()
            .unwrap()
            .into_json()
            .unwrap()
    }

    /// Waits (at most 10 s) until `check` holds for `GET path`.
    fn wait_for(&self, path: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let doc = self.get(path);
            if check(&doc) {
                return doc;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {doc}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn load(node: &TestNode, slot: u16, accelerator: &str, instance: Option<&str>) -> (u16, Value) {
    let mut request = ureq::put(&node.url(&format!("/v1/slots/{slot}")))
        .set("Authorization", "Bearer node-secret");
    if let Some(id) = instance {
        request = request.set("X-Netaccel-Instance", id);
    }
    match request.send_json(json!({ "accelerator": accelerator })) {
        Ok(r) => (r.status(), r.into_json().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap()),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_node_joins_the_real_registry_and_reconfigures_only_as_it_allows() {
    // A long lease: whatever the registry knows of the node comes from registration,
    // the renewal after a reconfiguration, and the deregistration.
    let registry = Registry::start(&["--lease-ms", "600000", "--node-token", "node-secret"]);
    let mut node = TestNode::start(&format!(
        "registry = \"http://{}\"\nname = \"node-a\"\nadmin_token = \"node-secret\"\n\
         [[slots]]\naccelerator = \"echo\"\n[[slots]]\naccelerator = \"to_uppercase\"\n\
         [[slots]]\naccelerator = \"sobel\"",
        registry.addr
    ));

    // Registered, with the node's own addresses and slots.
    let nodes = registry.wait_for("/v1/nodes", "node-a to register", |n| {
        n.as_array().is_some_and(|n| n.len() == 1)
    });
    let me = &nodes[0];
    assert_eq!(
        (&me["name"], &me["state"]),
        (&json!("node-a"), &json!("ready"))
    );
    assert_eq!(me["http"], node.addr.to_string());
    assert_eq!(me["rac"], node.rac_addr.to_string());
    let held: Vec<&str> = me["devices"][0]["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["accelerator"].as_str().unwrap())
        .collect();
    assert_eq!(held, ["echo", "to_uppercase", "sobel"]);

    // Two instances of a function bound to slot 1, and callable through the binding.
    let function: Value = ureq::put(&registry.url("/v1/functions/shout"))
        .send_json(json!({"accelerator": "to_uppercase", "instances": 2}))
        .unwrap()
        .into_json()
        .unwrap();
    let instances = function["instances"].as_array().unwrap();
    assert!(instances.iter().all(|i| i["slot"] == 1), "{function}");
    let out = ureq::post(&format!(
        "http://{}/v1/fn/to_uppercase",
        instances[0]["http"].as_str().unwrap()
    ))
    .send_bytes(b"bound")
    .unwrap()
    .into_string()
    .unwrap();
    assert_eq!(out, "BOUND");

    // Someone else may not take slot 1 from them...
    let (code, doc) = load(&node, 1, "logit", None);
    assert_eq!((code, &doc["code"]), (409, &json!("CONFLICT")), "{doc}");
    assert!(
        doc["error"].as_str().unwrap().contains("bound to the slot"),
        "{doc}"
    );
    assert_eq!(node.get_json("/v1/slots/1")["accelerator"], "to_uppercase");

    // ...one of them may, and the other is moved off it (the registry loads
    // to_uppercase into another slot for it, through this node's admin API).
    let first = instances[0]["id"].as_str().unwrap().to_string();
    let (code, doc) = load(&node, 1, "logit", Some(&first));
    assert_eq!(code, 200, "{doc}");
    assert_eq!(node.get_json("/v1/slots/1")["accelerator"], "logit");
    let function = registry.wait_for("/v1/functions/shout", "the other instance to move", |f| {
        f["instances"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["id"] != first.as_str() && !i["slot"].is_null() && i["slot"] != 1)
    });
    let moved = function["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] != first.as_str())
        .unwrap();
    let slot = moved["slot"].as_u64().unwrap();
    assert_eq!(
        node.get_json(&format!("/v1/slots/{slot}"))["accelerator"],
        "to_uppercase"
    );
    registry.wait_for("/v1/nodes", "the registry to see logit in slot 1", |n| {
        n[0]["devices"][0]["slots"][1]["accelerator"] == "logit"
    });

    // Draining, the node deregisters: the registry forgets it at once, long before
    // the lease would have expired.
    assert!(node.terminate().success());
    registry.wait_for("/v1/nodes", "node-a to deregister", |n| {
        n.as_array().is_some_and(|n| n.is_empty())
    });
}
