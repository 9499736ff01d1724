//! The registry in-process, with nodes that exist only as registrations and an admin
//! API that answers at once (or refuses): allocation with reconfiguration, migration,
//! lease loss, the rebalancer, reconfiguration requests, bounds, store failures, and
//! random sequences of all of these against the invariants.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use netaccel_registry::model::{
    FunctionSpec, InstanceSpec, NodeRegistration, NodeState, ReconfigurationRequest,
};
use netaccel_registry::nodeadmin::NodeAdmin;
use netaccel_registry::ops::{Created, Verdict};
use netaccel_registry::store::{Change, MemoryStore, Revision, Snapshot, Store, StoreError};
use netaccel_registry::{Config, Registry};
use serde_json::{json, Value};

/// Agrees to every reconfiguration except of the slots in `refuse`.
#[derive(Default)]
struct FakeAdmin {
    refuse: Mutex<HashSet<(SocketAddr, u16)>>,
    refuse_all: Mutex<bool>,
    calls: Mutex<Vec<(SocketAddr, u16, String)>>,
    /// When set, each reconfiguration answers only once it takes a permit.
    hold: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
}

impl NodeAdmin for FakeAdmin {
    fn reconfigure(
        &self,
        node: SocketAddr,
        slot: u16,
        accelerator: &str,
    ) -> BoxFuture<'static, Result<(), String>> {
        self.calls
            .lock()
            .unwrap()
            .push((node, slot, accelerator.to_string()));
        let refused =
            *self.refuse_all.lock().unwrap() || self.refuse.lock().unwrap().contains(&(node, slot));
        let hold = self.hold.lock().unwrap().clone();
        Box::pin(async move {
            if let Some(gate) = hold {
                gate.acquire().await.unwrap().forget();
            }
            if refused {
                Err("refused by the test".to_string())
            } else {
                Ok(())
            }
        })
    }
}

fn config() -> Config {
    Config {
        lease: Duration::from_millis(1000),
        ..Config::default()
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn registry_with(config: Config, admin: Arc<FakeAdmin>) -> Arc<Registry> {
    Registry::new(config, Arc::new(MemoryStore::new()), admin)
        .await
        .unwrap()
}

fn addr(node: u8) -> SocketAddr {
    format!("127.0.0.1:{}", 10_000 + node as u16)
        .parse()
        .unwrap()
}

/// A registration: one device, slots `(accelerator, busy_ratio)`.
fn registration(node: u8, backend: &str, slots: &[(&str, f64)]) -> NodeRegistration {
    let slots: Vec<Value> = slots
        .iter()
        .enumerate()
        .map(|(i, (a, busy))| json!({"id": i, "accelerator": a, "hash": "", "busy_ratio": busy, "queue_depth": 0}))
        .collect();
    let body = json!({
        "http": addr(node).to_string(),
        "rac": format!("127.0.0.1:{}", 20_000 + node as u16),
        "devices": [{"id": "dev0", "backend": backend, "vendor": "v", "platform": "p", "slots": slots}],
    });
    let reg: NodeRegistration = serde_json::from_value(body).unwrap();
    reg.validate().unwrap();
    reg
}

fn function(accelerator: &str, instances: u32) -> FunctionSpec {
    serde_json::from_value(json!({"accelerator": accelerator, "instances": instances})).unwrap()
}

/// Waits until background migrations are done.
async fn settle(reg: &Registry) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while reg.background_tasks() > 0 {
        assert!(Instant::now() < deadline, "background work did not finish");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// `(node, slot)` of each instance of `function`, `None` when unbound.
async fn bindings(reg: &Registry, function: &str) -> Vec<Option<(String, u64)>> {
    let doc = reg.function_json(function).await.unwrap();
    doc["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            i["node"]
                .as_str()
                .map(|n| (n.to_string(), i["slot"].as_u64().unwrap()))
        })
        .collect()
}

/// Invariants that hold whenever nobody holds the lock: the structural ones, and every
/// bound instance is on a ready node's slot compatible with its function's query.
async fn check(reg: &Registry) {
    let st = reg.lock().await;
    st.check_invariants();
    for instance in st.instances() {
        let Some(idx) = st.bound_slot(&instance.id) else {
            continue;
        };
        let slot = st.inventory.get(idx).unwrap();
        let f = &st.function(&instance.function).unwrap().record;
        assert!(slot.ready, "{} bound to a lost slot", instance.id);
        assert!(
            f.query
                .backend
                .as_ref()
                .is_none_or(|b| **b == *slot.spec.backend),
            "{} bound to an incompatible slot",
            instance.id
        );
        assert!(f.query.node.as_ref().is_none_or(|n| **n == *slot.spec.node));
    }
}

/// At rest (nothing in flight), every bound instance's slot holds its accelerator.
async fn check_settled(reg: &Registry) {
    check(reg).await;
    let st = reg.lock().await;
    for instance in st.instances() {
        if let Some(idx) = st.bound_slot(&instance.id) {
            let f = &st.function(&instance.function).unwrap().record;
            assert_eq!(
                *st.inventory.get(idx).unwrap().spec.accelerator,
                *f.accelerator,
                "{} bound to a slot holding another accelerator",
                instance.id
            );
        }
    }
}

#[test]
fn binds_to_holders_then_reconfigures_an_idle_slot() {
    rt().block_on(async {
        let admin = Arc::new(FakeAdmin::default());
        let reg = registry_with(config(), admin.clone()).await;
        reg.register_node(
            "n1",
            &registration(1, "cpu", &[("sobel", 0.25), ("echo", 0.0)]),
        )
        .await
        .unwrap();
        reg.put_function("f", &function("sobel", 2)).await.unwrap();
        assert_eq!(
            bindings(&reg, "f").await,
            vec![Some(("n1".into(), 0)), Some(("n1".into(), 0))]
        );
        assert!(admin.calls.lock().unwrap().is_empty());
        reg.put_function("g", &function("topk", 1)).await.unwrap();
        assert_eq!(bindings(&reg, "g").await, vec![Some(("n1".into(), 1))]);
        assert_eq!(
            *admin.calls.lock().unwrap(),
            vec![(addr(1), 1, "topk".to_string())]
        );
        // Both slots now carry load that no other slot could take over: nothing can be
        // reconfigured for a third accelerator.
        reg.register_node(
            "n1",
            &registration(1, "cpu", &[("sobel", 0.25), ("topk", 0.5)]),
        )
        .await
        .unwrap();
        let err = reg
            .create_instance("h", &InstanceSpec::default())
            .await
            .err();
        assert!(err.is_some_and(|e| e.code == "NOT_FOUND"));
        reg.put_function("h", &function("minmax", 0)).await.unwrap();
        let err = reg
            .create_instance("h", &InstanceSpec::default())
            .await
            .err()
            .unwrap();
        assert_eq!((err.status, err.code), (409, "NO_DEVICE"));
        assert!(reg.function_json("h").await.unwrap()["instances"]
            .as_array()
            .unwrap()
            .is_empty());
        check_settled(&reg).await;
    });
}

/// A node whose lease runs out while it reconfigures a slot for an instance: the
/// instance is not bound to the lost slot when the node's answer arrives.
#[test]
fn a_node_lost_during_a_reconfiguration_gets_no_instance() {
    rt().block_on(async {
        let admin = Arc::new(FakeAdmin::default());
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        *admin.hold.lock().unwrap() = Some(gate.clone());
        let reg = registry_with(config(), admin.clone()).await;
        let lease = registration(1, "cpu", &[("sobel", 0.0)]);
        reg.register_node("n1", &lease).await.unwrap();
        let put = tokio::spawn({
            let reg = reg.clone();
            async move { reg.put_function("f", &function("echo", 1)).await }
        });
        while admin.calls.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        reg.expire_leases(Instant::now() + Duration::from_secs(3600))
            .await;
        gate.add_permits(1);
        put.await.unwrap().unwrap();
        settle(&reg).await;
        check(&reg).await;
        assert_eq!(bindings(&reg, "f").await, vec![None]);
    });
}

#[test]
fn a_refused_reconfiguration_tries_the_next_slot() {
    rt().block_on(async {
        let admin = Arc::new(FakeAdmin::default());
        admin.refuse.lock().unwrap().insert((addr(1), 0));
        let reg = registry_with(config(), admin.clone()).await;
        reg.register_node(
            "n1",
            &registration(1, "cpu", &[("echo", 0.0), ("echo", 0.0)]),
        )
        .await
        .unwrap();
        let doc = reg.put_function("f", &function("topk", 1)).await.unwrap();
        assert_eq!(doc["instances"][0]["slot"], 1);
        assert_eq!(admin.calls.lock().unwrap().len(), 2);
        // Every slot refuses: the instance is left unbound, and says so.
        *admin.refuse_all.lock().unwrap() = true;
        let doc = reg.put_function("g", &function("sobel", 1)).await.unwrap();
        assert_eq!(doc["instances"][0]["slot"], Value::Null);
        check_settled(&reg).await;
    });
}

#[test]
fn reconfiguring_a_shared_slot_migrates_its_instances_and_bumps_generations() {
    rt().block_on(async {
        let admin = Arc::new(FakeAdmin::default());
        let reg = registry_with(config(), admin.clone()).await;
        // Two echo slots; one carries the load, the other has spare capacity.
        reg.register_node(
            "n1",
            &registration(1, "cpu", &[("echo", 0.5), ("echo", 0.25), ("sobel", 0.95)]),
        )
        .await
        .unwrap();
        reg.put_function("e", &function("echo", 2)).await.unwrap();
        let before = reg.function_json("e").await.unwrap();
        // Both on slot 1 (0.25 < 0.5).
        assert_eq!(
            bindings(&reg, "e").await,
            vec![Some(("n1".into(), 1)), Some(("n1".into(), 1))]
        );
        // topk: sobel is above the ceiling; slot 1 (0.25) comes first and slot 0 can
        // take its load (0.5 spare >= 0.25): slot 1 is reconfigured, e's instances
        // move to slot 0.
        reg.put_function("t", &function("topk", 1)).await.unwrap();
        assert_eq!(bindings(&reg, "t").await, vec![Some(("n1".into(), 1))]);
        assert_eq!(
            bindings(&reg, "e").await,
            vec![Some(("n1".into(), 0)), Some(("n1".into(), 0))]
        );
        let after = reg.function_json("e").await.unwrap();
        for i in 0..2 {
            assert!(
                after["instances"][i]["generation"].as_u64()
                    > before["instances"][i]["generation"].as_u64()
            );
        }
        check_settled(&reg).await;
    });
}

#[test]
fn long_poll_wakes_on_migration() {
    rt().block_on(async {
        let admin = Arc::new(FakeAdmin::default());
        let reg = registry_with(config(), admin).await;
        reg.register_node("n1", &registration(1, "cpu", &[("echo", 0.0)]))
            .await
            .unwrap();
        reg.register_node("n2", &registration(2, "cpu", &[("echo", 0.5)]))
            .await
            .unwrap();
        reg.put_function("e", &function("echo", 1)).await.unwrap();
        let doc = reg.function_json("e").await.unwrap();
        let id = doc["instances"][0]["id"].as_str().unwrap().to_string();
        let generation = doc["instances"][0]["generation"].as_u64().unwrap();
        assert_eq!(doc["instances"][0]["node"], "n1");
        // Nothing changes: the poll times out with the same binding.
        let started = Instant::now();
        let same = reg
            .get_instance("e", &id, Some(generation), Duration::from_millis(50))
            .await
            .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(same["generation"].as_u64(), Some(generation));
        let poll = {
            let reg = reg.clone();
            let id = id.clone();
            tokio::spawn(async move {
                let doc = reg
                    .get_instance("e", &id, Some(generation), Duration::from_secs(10))
                    .await
                    .unwrap();
                (doc, Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let moved_at = Instant::now();
        reg.deregister_node("n1").await.unwrap();
        let (doc, woke_at) = poll.await.unwrap();
        assert_eq!(doc["node"], "n2");
        assert!(doc["generation"].as_u64().unwrap() > generation);
        assert!(woke_at.duration_since(moved_at) < Duration::from_millis(100));
    });
}

#[test]
fn a_long_poll_whose_client_left_holds_nothing() {
    rt().block_on(async {
        let reg = registry_with(config(), Arc::new(FakeAdmin::default())).await;
        reg.register_node("n1", &registration(1, "cpu", &[("echo", 0.0)]))
            .await
            .unwrap();
        reg.put_function("e", &function("echo", 1)).await.unwrap();
        let doc = reg.function_json("e").await.unwrap();
        let id = doc["instances"][0]["id"].as_str().unwrap().to_string();
        let generation = doc["instances"][0]["generation"].as_u64().unwrap();
        let poll = {
            let reg = reg.clone();
            tokio::spawn(async move {
                reg.get_instance("e", &id, Some(generation), Duration::from_secs(30))
                    .await
            })
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while reg.long_polls_waiting() == 0 {
            assert!(Instant::now() < deadline, "the poll never waited");
            tokio::task::yield_now().await;
        }
        assert_eq!(reg.watched_instances(), 1);
        // The HTTP server drops a request's future when its client hangs up.
        poll.abort();
        let _ = poll.await;
        assert_eq!(reg.long_polls_waiting(), 0);
        assert_eq!(reg.watched_instances(), 0);
    });
}

#[test]
fn lost_nodes_leave_allocation_and_their_instances_move() {
    rt().block_on(async {
        let admin = Arc::new(FakeAdmin::default());
        let reg = registry_with(config(), admin).await;
        reg.register_node("n1", &registration(1, "cpu", &[("echo", 0.0)]))
            .await
            .unwrap();
        reg.register_node("n2", &registration(2, "cpu", &[("echo", 0.5)]))
            .await
            .unwrap();
        reg.put_function("e", &function("echo", 2)).await.unwrap();
        assert_eq!(
            bindings(&reg, "e").await,
            vec![Some(("n1".into(), 0)), Some(("n1".into(), 0))]
        );
        // n2 renews, n1 does not: just past n1's deadline (n2's is later), n1 is lost.
        tokio::time::sleep(Duration::from_millis(5)).await;
        reg.register_node("n2", &registration(2, "cpu", &[("echo", 0.5)]))
            .await
            .unwrap();
        let n1_deadline = reg.lock().await.node("n1").unwrap().lease_deadline;
        reg.expire_leases(n1_deadline - Duration::from_millis(1))
            .await;
        assert_eq!(reg.nodes_json().await[0]["state"], "ready");
        reg.expire_leases(n1_deadline + Duration::from_millis(1))
            .await;
        let nodes = reg.nodes_json().await;
        assert_eq!(nodes[0]["state"], "lost");
        assert_eq!(nodes[1]["state"], "ready");
        assert_eq!(
            bindings(&reg, "e").await,
            vec![Some(("n2".into(), 0)), Some(("n2".into(), 0))]
        );
        check_settled(&reg).await;
        // It comes back: ready again, and allocation uses it.
        reg.register_node("n1", &registration(1, "cpu", &[("echo", 0.0)]))
            .await
            .unwrap();
        settle(&reg).await;
        assert_eq!(reg.nodes_json().await[0]["state"], "ready");
        let st = reg.lock().await;
        assert_eq!(st.node("n1").unwrap().record.state, NodeState::Ready);
    });
}

#[test]
fn reconfiguration_requests_are_validated() {
    rt().block_on(async {
        let admin = Arc::new(FakeAdmin::default());
        let reg = registry_with(config(), admin.clone()).await;
        reg.register_node(
            "n1",
            &registration(1, "cpu", &[("echo", 0.0), ("echo", 0.0), ("sobel", 0.0)]),
        )
        .await
        .unwrap();
        reg.put_function("e", &function("echo", 1)).await.unwrap();
        let doc = reg.function_json("e").await.unwrap();
        let bound_slot = doc["instances"][0]["slot"].as_u64().unwrap() as u16;
        let id = doc["instances"][0]["id"].as_str().unwrap().to_string();
        let request =
            |slot: u16, accelerator: &str, instance: Option<&str>| ReconfigurationRequest {
                node: "n1".into(),
                device: "dev0".into(),
                slot,
                accelerator: accelerator.into(),
                instance: instance.map(String::from),
            };
        // Someone else's slot: refused.
        let v = reg
            .validate_reconfiguration(&request(bound_slot, "topk", None), false)
            .await
            .unwrap();
        assert!(
            matches!(v, Verdict::Refused { ref reason } if reason.contains(&id)),
            "{v:?}"
        );
        // An empty slot: allowed, nothing migrated; the registry now counts it as topk.
        let v = reg
            .validate_reconfiguration(&request(2, "topk", None), false)
            .await
            .unwrap();
        assert_eq!(v, Verdict::Allowed { migrated: vec![] });
        // The admin may take a shared slot: its instance migrates to the other echo slot.
        let v = reg
            .validate_reconfiguration(&request(bound_slot, "minmax", None), true)
            .await
            .unwrap();
        assert_eq!(
            v,
            Verdict::Allowed {
                migrated: vec![id.clone()]
            }
        );
        settle(&reg).await;
        let other = 1 - bound_slot as u64;
        assert_eq!(bindings(&reg, "e").await, vec![Some(("n1".into(), other))]);
        // The instance itself may reconfigure its slot, and stays bound to it.
        let v = reg
            .validate_reconfiguration(&request(other as u16, "logit", Some(&id)), false)
            .await
            .unwrap();
        assert_eq!(v, Verdict::Allowed { migrated: vec![] });
        assert_eq!(bindings(&reg, "e").await, vec![Some(("n1".into(), other))]);
        // Unknown slot or node: 404.
        let err = reg
            .validate_reconfiguration(&request(9, "topk", None), true)
            .await
            .unwrap_err();
        assert_eq!(err.status, 404);
        // A device that lists what it can load refuses anything else.
        let mut reg2: NodeRegistration = registration(3, "opencl", &[("sobel", 0.0)]);
        reg2.devices[0].accelerators = Some(vec!["sobel".into()]);
        reg.register_node("n3", &reg2).await.unwrap();
        let v = reg
            .validate_reconfiguration(
                &ReconfigurationRequest {
                    node: "n3".into(),
                    ..request(0, "topk", None)
                },
                true,
            )
            .await
            .unwrap();
        assert!(matches!(v, Verdict::Refused { ref reason } if reason.contains("cannot load")));
        assert!(
            admin.calls.lock().unwrap().is_empty(),
            "validation asks no node"
        );
        check(&reg).await;
    });
}

#[test]
fn pinned_instances_are_never_moved_and_block_reconfiguration() {
    rt().block_on(async {
        let admin = Arc::new(FakeAdmin::default());
        let reg = registry_with(config(), admin.clone()).await;
        reg.register_node(
            "n1",
            &registration(1, "cpu", &[("echo", 0.0), ("echo", 0.0)]),
        )
        .await
        .unwrap();
        let record = netaccel_registry::model::FunctionRecord {
            name: "dra.echo".into(),
            accelerator: "echo".into(),
            hash: None,
            query: Default::default(),
        };
        let slot0 = netaccel_registry::model::SlotRef {
            node: "n1".into(),
            device: "dev0".into(),
            slot: 0,
        };
        reg.bind_pinned(record.clone(), "dra-claim", &slot0)
            .await
            .unwrap();
        // Recording it again changes nothing.
        reg.bind_pinned(record, "dra-claim", &slot0).await.unwrap();
        assert_eq!(
            bindings(&reg, "dra.echo").await,
            vec![Some(("n1".into(), 0))]
        );
        assert_eq!(
            reg.function_json("dra.echo").await.unwrap()["instances"][0]["pinned"],
            true
        );
        check(&reg).await;
        // Allocation reconfigures the other idle slot, never the pinned one (slot 0
        // would come first: same load, smaller id).
        reg.put_function("t", &function("topk", 1)).await.unwrap();
        assert_eq!(bindings(&reg, "t").await, vec![Some(("n1".into(), 1))]);
        // A node's request to reconfigure the pinned slot is refused; the admin's is
        // allowed and unbinds the pinned instance without moving it.
        let request = ReconfigurationRequest {
            node: "n1".into(),
            device: "dev0".into(),
            slot: 0,
            accelerator: "sobel".into(),
            instance: None,
        };
        let v = reg.validate_reconfiguration(&request, false).await.unwrap();
        assert!(
            matches!(v, Verdict::Refused { ref reason } if reason.contains("ResourceClaim")),
            "{v:?}"
        );
        reg.register_node("n2", &registration(2, "cpu", &[("echo", 0.0)]))
            .await
            .unwrap();
        let v = reg.validate_reconfiguration(&request, true).await.unwrap();
        assert_eq!(
            v,
            Verdict::Allowed {
                migrated: vec!["dra-claim".into()]
            }
        );
        settle(&reg).await;
        // Unbound, though node n2 holds echo: the rebalancer leaves it alone too.
        reg.rebalance(Instant::now()).await;
        assert_eq!(bindings(&reg, "dra.echo").await, vec![None]);
        check(&reg).await;

        // A follower copying this state (GET /v1/snapshot, as JSON) reads the same.
        let snap = reg.snapshot(None).await.unwrap();
        assert!(reg.snapshot(Some(snap.revision)).await.is_none(), "304");
        let copied = serde_json::from_str(&serde_json::to_string(&snap).unwrap()).unwrap();
        let follower = Registry::new_follower(config(), Arc::new(MemoryStore::new()), admin)
            .await
            .unwrap();
        follower.follow(&copied).await.unwrap();
        for name in ["dra.echo", "t"] {
            assert_eq!(
                follower.function_json(name).await.unwrap(),
                reg.function_json(name).await.unwrap()
            );
        }
        assert_eq!(follower.nodes_json().await.as_array().unwrap().len(), 2);
        check(&follower).await;
        // Its writes are still refused.
        let err = follower
            .put_function("u", &function("echo", 0))
            .await
            .unwrap_err();
        assert_eq!(err.code, "NOT_LEADER");
    });
}

#[test]
fn renewals_report_changes_and_reports_older_than_a_change_are_ignored() {
    rt().block_on(async {
        let admin = Arc::new(FakeAdmin::default());
        let reg = registry_with(config(), admin).await;
        let two = [("echo", 0.0), ("echo", 0.5)];
        reg.register_node("n1", &registration(1, "cpu", &two))
            .await
            .unwrap();
        reg.put_function("e", &function("echo", 1)).await.unwrap();
        reg.put_function("t", &function("topk", 1)).await.unwrap();
        // topk took slot 0 (idle); e's instance moved to slot 1.
        assert_eq!(bindings(&reg, "t").await, vec![Some(("n1".into(), 0))]);
        assert_eq!(bindings(&reg, "e").await, vec![Some(("n1".into(), 1))]);
        // A renewal sent before the reconfiguration still shows echo in slot 0: ignored.
        reg.register_node("n1", &registration(1, "cpu", &two))
            .await
            .unwrap();
        settle(&reg).await;
        assert_eq!(bindings(&reg, "t").await, vec![Some(("n1".into(), 0))]);
        // Someone reconfigures slot 1 behind the registry's back: e's instance must
        // leave it. No slot holds echo; slot 0 is idle, so allocation reconfigures it
        // (spec step 5), which displaces t, and nothing is left for t.
        reg.register_node(
            "n1",
            &registration(1, "cpu", &[("topk", 0.0), ("sobel", 0.5)]),
        )
        .await
        .unwrap();
        settle(&reg).await;
        check_settled(&reg).await;
        assert_eq!(bindings(&reg, "e").await, vec![Some(("n1".into(), 0))]);
        assert_eq!(bindings(&reg, "t").await, vec![None]);
    });
}

#[test]
fn a_node_that_moves_to_another_address_wakes_its_instances() {
    rt().block_on(async {
        let reg = registry_with(config(), Arc::new(FakeAdmin::default())).await;
        reg.register_node("n1", &registration(1, "cpu", &[("echo", 0.0)]))
            .await
            .unwrap();
        reg.put_function("e", &function("echo", 1)).await.unwrap();
        let doc = reg.function_json("e").await.unwrap();
        let id = doc["instances"][0]["id"].as_str().unwrap().to_string();
        let generation = doc["instances"][0]["generation"].as_u64().unwrap();
        // Same name, same slots, new address (a restarted node, a new pod IP): the
        // binding's addresses changed, so its generation must change too, or a client
        // waiting on it would keep calling the old address.
        let mut moved = registration(1, "cpu", &[("echo", 0.0)]);
        moved.http = "127.0.0.1:30001".parse().unwrap();
        let poll = {
            let reg = reg.clone();
            let id = id.clone();
            tokio::spawn(async move {
                reg.get_instance("e", &id, Some(generation), Duration::from_secs(5))
                    .await
                    .unwrap()
            })
        };
        tokio::task::yield_now().await;
        reg.register_node("n1", &moved).await.unwrap();
        let doc = poll.await.unwrap();
        assert_eq!(doc["http"], "127.0.0.1:30001");
        assert!(doc["generation"].as_u64().unwrap() > generation);
        // A renewal that changes nothing wakes nobody.
        let generation = doc["generation"].as_u64().unwrap();
        reg.register_node("n1", &moved).await.unwrap();
        let doc = reg
            .get_instance("e", &id, Some(generation), Duration::from_millis(20))
            .await
            .unwrap();
        assert_eq!(doc["generation"].as_u64(), Some(generation));
    });
}

#[test]
fn tls_and_grpc_addresses_are_stored_and_handed_out_and_old_nodes_send_none() {
    rt().block_on(async {
        let reg = registry_with(config(), Arc::new(FakeAdmin::default())).await;
        // An old node: no gRPC or TLS fields. It registers, and clients read null.
        reg.register_node("old", &registration(1, "cpu", &[("echo", 0.0)]))
            .await
            .unwrap();
        let mut tls = registration(2, "cpu", &[("sobel", 0.0)]);
        tls.https = Some("127.0.0.1:30443".parse().unwrap());
        tls.rac_tls = Some("127.0.0.1:30444".parse().unwrap());
        tls.grpc = Some("127.0.0.1:30001".parse().unwrap());
        tls.grpc_tls = Some("127.0.0.1:30002".parse().unwrap());
        reg.register_node("tls", &tls).await.unwrap();
        reg.put_function("e", &function("echo", 1)).await.unwrap();
        reg.put_function("s", &function("sobel", 1)).await.unwrap();
        settle(&reg).await;

        let keys = ["https", "rac_tls", "grpc", "grpc_tls"];
        let old = reg.function_json("e").await.unwrap()["instances"][0].clone();
        assert_eq!(old["node"], "old");
        for k in keys {
            assert!(old[k].is_null(), "{k}: {old}");
        }
        let doc = reg.function_json("s").await.unwrap();
        let binding = &doc["instances"][0];
        assert_eq!(binding["node"], "tls");
        assert_eq!(binding["https"], "127.0.0.1:30443");
        assert_eq!(binding["rac_tls"], "127.0.0.1:30444");
        assert_eq!(binding["grpc"], "127.0.0.1:30001");
        assert_eq!(binding["grpc_tls"], "127.0.0.1:30002");
        // The instance document (what a client's lookup and long poll read) too.
        let id = binding["id"].as_str().unwrap().to_string();
        let generation = binding["generation"].as_u64().unwrap();
        let inst = reg
            .get_instance("s", &id, None, Duration::from_millis(1))
            .await
            .unwrap();
        assert_eq!(inst["rac_tls"], "127.0.0.1:30444");
        // The node document.
        let nodes = reg.nodes_json().await;
        let node = nodes
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == "tls")
            .unwrap()
            .clone();
        assert_eq!(node["https"], "127.0.0.1:30443");
        assert_eq!(node["grpc_tls"], "127.0.0.1:30002");

        // A TLS address that changes is a move: the binding's generation changes, so a
        // client waiting on it learns the new address.
        tls.rac_tls = Some("127.0.0.1:30445".parse().unwrap());
        reg.register_node("tls", &tls).await.unwrap();
        let inst = reg
            .get_instance("s", &id, Some(generation), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(inst["rac_tls"], "127.0.0.1:30445");
        assert!(inst["generation"].as_u64().unwrap() > generation);
    });
}

#[test]
fn rebalancer_moves_instances_off_hot_slots_and_scales_out() {
    rt().block_on(async {
        let admin = Arc::new(FakeAdmin::default());
        let reg = registry_with(config(), admin.clone()).await;
        reg.register_node(
            "n1",
            &registration(1, "cpu", &[("echo", 0.0), ("sobel", 0.0)]),
        )
        .await
        .unwrap();
        reg.put_function("e", &function("echo", 3)).await.unwrap();
        assert!(bindings(&reg, "e")
            .await
            .iter()
            .all(|b| b == &Some(("n1".into(), 0))));
        // echo's slot is now hot; sobel's is idle and nobody uses it: scale out.
        reg.register_node(
            "n1",
            &registration(1, "cpu", &[("echo", 0.95), ("sobel", 0.0)]),
        )
        .await
        .unwrap();
        reg.rebalance(Instant::now()).await;
        let e = bindings(&reg, "e").await;
        assert_eq!(
            e.iter().filter(|b| **b == Some(("n1".into(), 1))).count(),
            1,
            "{e:?}"
        );
        assert_eq!(
            *admin.calls.lock().unwrap(),
            vec![(addr(1), 1, "echo".to_string())]
        );
        // The slot it left cools down: the next pass leaves it alone.
        reg.rebalance(Instant::now()).await;
        let e2 = bindings(&reg, "e").await;
        assert_eq!(e, e2);
        check_settled(&reg).await;
    });
}

#[test]
fn unused_slots_are_released_only_when_configured() {
    rt().block_on(async {
        for release in [None, Some(Duration::from_millis(1))] {
            let admin = Arc::new(FakeAdmin::default());
            let cfg = Config {
                release_unused: release,
                ..config()
            };
            let reg = registry_with(cfg, admin.clone()).await;
            // Slot 0 is busy with resolver traffic but no instance is bound.
            reg.register_node("n1", &registration(1, "cpu", &[("echo", 0.6)]))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            reg.rebalance(Instant::now()).await;
            reg.put_function("t", &function("topk", 1)).await.unwrap();
            let slot = reg.function_json("t").await.unwrap()["instances"][0]["slot"].clone();
            match release {
                None => assert_eq!(slot, Value::Null),
                Some(_) => assert_eq!(slot, 0),
            }
        }
    });
}

#[test]
fn bounds_are_enforced_with_clear_errors() {
    rt().block_on(async {
        let cfg = Config {
            nodes_max: 1,
            functions_max: 1,
            instances_max: 2,
            ..config()
        };
        let reg = registry_with(cfg, Arc::new(FakeAdmin::default())).await;
        reg.register_node("n1", &registration(1, "cpu", &[("echo", 0.0)]))
            .await
            .unwrap();
        let err = reg
            .register_node("n2", &registration(2, "cpu", &[("echo", 0.0)]))
            .await
            .unwrap_err();
        assert_eq!((err.status, err.code), (507, "INSUFFICIENT_STORAGE"));
        assert!(err.message.contains("--nodes-max"));
        reg.put_function("f", &function("echo", 2)).await.unwrap();
        let err = reg
            .put_function("g", &function("echo", 1))
            .await
            .unwrap_err();
        assert!(err.message.contains("--functions-max"));
        let err = reg
            .put_function("f", &function("echo", 3))
            .await
            .unwrap_err();
        assert!(err.message.contains("--instances-max"));
        let err = reg
            .create_instance("f", &InstanceSpec::default())
            .await
            .err()
            .unwrap();
        assert!(err.message.contains("--instances-max"));
        // Scaling down frees room.
        reg.put_function("f", &function("echo", 1)).await.unwrap();
        let spec = InstanceSpec {
            id: Some("mine".into()),
            node: None,
        };
        assert!(matches!(
            reg.create_instance("f", &spec).await,
            Ok(Created::New(_))
        ));
        // The same id again is the same instance (a retried request).
        assert!(matches!(
            reg.create_instance("f", &spec).await,
            Ok(Created::Existing(_))
        ));
    });
}

/// A store whose commits fail on demand, as a store does when another registry
/// wrote first.
struct FlakyStore {
    inner: MemoryStore,
    fail: Mutex<bool>,
}

impl Store for FlakyStore {
    fn load(&self) -> BoxFuture<'_, Result<Snapshot, StoreError>> {
        self.inner.load()
    }

    fn commit<'a>(
        &'a self,
        expected: Revision,
        changes: &'a [Change],
    ) -> BoxFuture<'a, Result<Revision, StoreError>> {
        if *self.fail.lock().unwrap() {
            return Box::pin(async move {
                Err(StoreError::Conflict {
                    expected,
                    actual: expected + 1,
                })
            });
        }
        self.inner.commit(expected, changes)
    }

    fn describe(&self) -> String {
        "flaky".into()
    }
}

#[test]
fn a_refused_commit_reloads_the_state_from_the_store() {
    rt().block_on(async {
        let store = Arc::new(FlakyStore {
            inner: MemoryStore::new(),
            fail: Mutex::new(false),
        });
        let reg = Registry::new(config(), store.clone(), Arc::new(FakeAdmin::default()))
            .await
            .unwrap();
        reg.register_node("n1", &registration(1, "cpu", &[("echo", 0.0)]))
            .await
            .unwrap();
        reg.put_function("f", &function("echo", 1)).await.unwrap();
        *store.fail.lock().unwrap() = true;
        let err = reg
            .put_function("g", &function("echo", 1))
            .await
            .unwrap_err();
        assert_eq!((err.status, err.code), (503, "UNAVAILABLE"));
        // The cache holds what the store holds: f, not g.
        assert!(reg.function_json("g").await.is_err());
        assert_eq!(bindings(&reg, "f").await, vec![Some(("n1".into(), 0))]);
        check(&reg).await;
        *store.fail.lock().unwrap() = false;
        reg.put_function("g", &function("echo", 1)).await.unwrap();
        // A second registry built from the same store sees the same state.
        let again = Registry::new(config(), store.clone(), Arc::new(FakeAdmin::default()))
            .await
            .unwrap();
        assert_eq!(bindings(&again, "f").await, bindings(&reg, "f").await);
        assert_eq!(bindings(&again, "g").await, bindings(&reg, "g").await);
        check(&again).await;
    });
}

mod random_sequences {
    use super::*;
    use proptest::prelude::*;

    const ACCELS: [&str; 4] = ["echo", "sobel", "topk", "minmax"];

    #[derive(Debug, Clone)]
    enum Op {
        Register {
            node: u8,
            opencl: bool,
            slots: Vec<(usize, u8)>,
        },
        Deregister(u8),
        ExpireAll,
        PutFunction {
            f: u8,
            accel: usize,
            opencl: Option<bool>,
            node: Option<u8>,
            n: u8,
        },
        DeleteFunction(u8),
        PostInstance {
            f: u8,
            preferred: Option<u8>,
        },
        DeleteInstance(u8),
        Reconfigure {
            node: u8,
            slot: u8,
            accel: usize,
            admin: bool,
        },
        Rebalance,
        AdminRefuses(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..4, any::<bool>(), proptest::collection::vec((0usize..4, 0u8..=8), 1..4))
                .prop_map(|(node, opencl, slots)| Op::Register { node, opencl, slots }),
            1 => (0u8..4).prop_map(Op::Deregister),
            1 => Just(Op::ExpireAll),
            3 => (0u8..3, 0usize..4, proptest::option::weighted(0.3, any::<bool>()),
                  proptest::option::weighted(0.2, 0u8..4), 0u8..4)
                .prop_map(|(f, accel, opencl, node, n)| Op::PutFunction { f, accel, opencl, node, n }),
            1 => (0u8..3).prop_map(Op::DeleteFunction),
            2 => (0u8..3, proptest::option::weighted(0.3, 0u8..4))
                .prop_map(|(f, preferred)| Op::PostInstance { f, preferred }),
            1 => any::<u8>().prop_map(Op::DeleteInstance),
            2 => (0u8..4, 0u8..4, 0usize..4, any::<bool>())
                .prop_map(|(node, slot, accel, admin)| Op::Reconfigure { node, slot, accel, admin }),
            1 => Just(Op::Rebalance),
            1 => any::<bool>().prop_map(Op::AdminRefuses),
        ]
    }

    async fn apply(reg: &Arc<Registry>, admin: &FakeAdmin, op: &Op) {
        match op {
            Op::Register {
                node,
                opencl,
                slots,
            } => {
                let slots: Vec<(&str, f64)> = slots
                    .iter()
                    .map(|&(a, b)| (ACCELS[a], b as f64 / 8.0))
                    .collect();
                let backend = if *opencl { "opencl" } else { "cpu" };
                reg.register_node(&format!("n{node}"), &registration(*node, backend, &slots))
                    .await
                    .unwrap();
            }
            Op::Deregister(node) => {
                let _ = reg.deregister_node(&format!("n{node}")).await;
            }
            Op::ExpireAll => {
                reg.expire_leases(Instant::now() + Duration::from_secs(3600))
                    .await
            }
            Op::PutFunction {
                f,
                accel,
                opencl,
                node,
                n,
            } => {
                let spec: FunctionSpec = serde_json::from_value(json!({
                    "accelerator": ACCELS[*accel],
                    "query": {
                        "backend": opencl.map(|o| if o { "opencl" } else { "cpu" }),
                        "node": node.map(|n| format!("n{n}")),
                    },
                    "instances": n,
                }))
                .unwrap();
                reg.put_function(&format!("f{f}"), &spec).await.unwrap();
            }
            Op::DeleteFunction(f) => {
                let _ = reg.delete_function(&format!("f{f}")).await;
            }
            Op::PostInstance { f, preferred } => {
                let spec = InstanceSpec {
                    id: None,
                    node: preferred.map(|n| format!("n{n}")),
                };
                let _ = reg.create_instance(&format!("f{f}"), &spec).await;
            }
            Op::DeleteInstance(k) => {
                let target = {
                    let st = reg.lock().await;
                    let all: Vec<_> = st
                        .instances()
                        .map(|i| (i.function.clone(), i.id.clone()))
                        .collect();
                    (!all.is_empty()).then(|| all[*k as usize % all.len()].clone())
                };
                if let Some((f, id)) = target {
                    reg.delete_instance(&f, &id).await.unwrap();
                }
            }
            Op::Reconfigure {
                node,
                slot,
                accel,
                admin,
            } => {
                let req = ReconfigurationRequest {
                    node: format!("n{node}"),
                    device: "dev0".into(),
                    slot: *slot as u16,
                    accelerator: ACCELS[*accel].into(),
                    instance: None,
                };
                let _ = reg.validate_reconfiguration(&req, *admin).await;
            }
            Op::Rebalance => reg.rebalance(Instant::now()).await,
            Op::AdminRefuses(refuse) => *admin.refuse_all.lock().unwrap() = *refuse,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// For any sequence: no instance is ever bound to a lost or incompatible slot,
        /// each has at most one binding, the indexes agree with the records, and once
        /// settled every binding is to a slot holding the function's accelerator.
        #[test]
        fn invariants_hold_for_any_sequence(ops in proptest::collection::vec(op(), 1..40)) {
            rt().block_on(async {
                let admin = Arc::new(FakeAdmin::default());
                let reg = registry_with(config(), admin.clone()).await;
                for op in &ops {
                    apply(&reg, &admin, op).await;
                    check(&reg).await;
                    settle(&reg).await;
                    check_settled(&reg).await;
                }
            });
        }
    }
}

/// Prometheus's figure for a slot holds over the node's lease reports until it is
/// stale; slots it does not name keep the lease reports.
#[test]
fn prometheus_utilisation_holds_over_lease_reports_until_stale() {
    rt().block_on(async {
        let reg = registry_with(config(), Arc::new(FakeAdmin::default())).await;
        let lease = registration(1, "cpu", &[("sobel", 0.8), ("echo", 0.8)]);
        reg.register_node("n1", &lease).await.unwrap();
        let utilization = |st: &netaccel_registry::state::State| -> Vec<f64> {
            let mut u: Vec<(u16, f64)> = st
                .inventory
                .iter()
                .map(|(_, v)| (v.spec.slot, v.utilization))
                .collect();
            u.sort_by_key(|(slot, _)| *slot);
            u.into_iter().map(|(_, u)| u).collect()
        };
        let holds = Duration::from_secs(60);
        {
            let mut st = reg.lock().await;
            let from_prometheus = [("n1".to_string(), 0, 0.1), ("nobody".to_string(), 0, 0.5)];
            let applied = st.set_prometheus_utilization(&from_prometheus, Instant::now() + holds);
            assert_eq!(applied, 1);
            assert_eq!(utilization(&st), vec![0.1, 0.8]);
        }
        // A renewal reporting 0.8 does not overwrite slot 0 while the figure holds.
        reg.register_node("n1", &lease).await.unwrap();
        assert_eq!(utilization(&*reg.lock().await), vec![0.1, 0.8]);
        // Once it is stale, the lease report counts again.
        let stale = [("n1".to_string(), 0, 0.1)];
        reg.lock()
            .await
            .set_prometheus_utilization(&stale, Instant::now());
        reg.register_node("n1", &lease).await.unwrap();
        assert_eq!(utilization(&*reg.lock().await), vec![0.8, 0.8]);
    });
}
