//! Allocation at cluster scale: 1,000 nodes × 8 slots, 10,000 instances.
//!
//! Three measurements, each printed with its rate and latency percentiles before
//! criterion's own figures:
//! - `pure`: [`Inventory::allocate`] then the bind, for 10,000 instances of ten
//!   functions (eight accelerators already loaded somewhere, two that need a slot
//!   reconfigured first) — the algorithm alone, as the registry runs it under its lock;
//! - `step5`: every request for an accelerator nobody holds, so every one scans all
//!   8,000 slots for a slot to reconfigure (the slow path's worst case);
//! - `registry`: `POST …/instances` minus HTTP — the registry's transaction, its store
//!   commit (records serialised to JSON) and its lock, for 10,000 instances.
//!
//! Goal (issue 12): ≥ 10,000 allocations/s with p99 ≤ 1 ms.
//! Run: `cargo bench -p netaccel-registry --bench allocate`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion};
use futures_util::future::BoxFuture;
use netaccel_registry::alloc::{Decision, Inventory, Policy, Request, SlotSpec};
use netaccel_registry::model::{FunctionSpec, InstanceSpec, NodeRegistration};
use netaccel_registry::nodeadmin::NodeAdmin;
use netaccel_registry::store::MemoryStore;
use netaccel_registry::{Config, Registry};
use serde_json::json;

const NODES: usize = 1000;
const SLOTS_PER_NODE: usize = 8;
const INSTANCES: usize = 10_000;
const LOADED: [&str; 8] = [
    "echo",
    "to_uppercase",
    "topk",
    "logit",
    "minmax",
    "sobel",
    "matmul",
    "crc",
];
const FUNCTIONS: [&str; 10] = [
    "echo",
    "to_uppercase",
    "topk",
    "logit",
    "minmax",
    "sobel",
    "matmul",
    "crc",
    "fft",
    "aes",
];

/// A deterministic spread of utilisations in [0, 0.8): every slot is below the ceiling.
fn utilization(node: usize, slot: usize) -> f64 {
    ((node * 31 + slot * 17) % 80) as f64 / 100.0
}

fn inventory() -> Inventory {
    let mut inv = Inventory::new();
    for n in 0..NODES {
        let node: Arc<str> = Arc::from(format!("node-{n:04}"));
        for s in 0..SLOTS_PER_NODE {
            let idx = inv.insert(SlotSpec {
                node: node.clone(),
                device: Arc::from("cpu0"),
                slot: s as u16,
                backend: Arc::from("cpu"),
                vendor: Arc::from("netaccel"),
                catalog: None,
                accelerator: Arc::from(LOADED[(n + s) % LOADED.len()]),
                hash: Arc::from(""),
            });
            inv.set_utilization(idx, utilization(n, s));
        }
    }
    inv
}

/// Allocates `INSTANCES` instances round-robin over the functions, applying each
/// decision the way the registry does (bind; a reconfiguration loads the slot first).
fn allocate_all(inv: &mut Inventory, policy: &Policy, latencies: Option<&mut Vec<Duration>>) {
    let mut latencies = latencies;
    for i in 0..INSTANCES {
        let accelerator = FUNCTIONS[i % FUNCTIONS.len()];
        let started = Instant::now();
        let decision = inv.allocate(&Request::new(accelerator), policy);
        match decision {
            Decision::Bind(idx) => inv.bind(idx),
            Decision::Reconfigure(idx) => {
                inv.set_accelerator(idx, accelerator, "");
                inv.bind(idx);
            }
            Decision::NoDevice => panic!("8,000 slots and no room"),
        }
        if let Some(l) = latencies.as_deref_mut() {
            l.push(started.elapsed());
        }
    }
}

fn report(name: &str, mut latencies: Vec<Duration>) {
    latencies.sort();
    let total: Duration = latencies.iter().sum();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "{name}: {} allocations, {:.0}/s; p50 {:?}, p99 {:?}, p99.9 {:?}, max {:?}",
        latencies.len(),
        latencies.len() as f64 / total.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        pct(0.999),
        latencies.last().unwrap()
    );
}

struct AgreeingNode;

impl NodeAdmin for AgreeingNode {
    fn reconfigure(
        &self,
        _: SocketAddr,
        _: u16,
        _: &str,
    ) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}

/// A registry with the cluster registered and the ten functions created empty.
async fn registry() -> Arc<Registry> {
    let config = Config {
        lease: Duration::from_secs(3600),
        nodes_max: NODES,
        instances_max: INSTANCES * 10,
        ..Config::default()
    };
    let reg = Registry::new(config, Arc::new(MemoryStore::new()), Arc::new(AgreeingNode))
        .await
        .unwrap();
    for n in 0..NODES {
        let slots: Vec<_> = (0..SLOTS_PER_NODE)
            .map(|s| {
                json!({"id": s, "accelerator": LOADED[(n + s) % LOADED.len()], "hash": "",
                            "busy_ratio": utilization(n, s), "queue_depth": 0})
            })
            .collect();
        let body: NodeRegistration = serde_json::from_value(json!({
            "http": format!("10.0.{}.{}:8080", n / 250, n % 250 + 1),
            "rac": format!("10.0.{}.{}:9400", n / 250, n % 250 + 1),
            "devices": [{"id": "cpu0", "backend": "cpu", "vendor": "netaccel", "platform": "host", "slots": slots}],
        }))
        .unwrap();
        reg.register_node(&format!("node-{n:04}"), &body)
            .await
            .unwrap();
    }
    for f in FUNCTIONS {
        let spec: FunctionSpec =
            serde_json::from_value(json!({"accelerator": f, "instances": 0})).unwrap();
        reg.put_function(f, &spec).await.unwrap();
    }
    reg
}

async fn create_all(reg: &Arc<Registry>, latencies: Option<&mut Vec<Duration>>) {
    let mut latencies = latencies;
    for i in 0..INSTANCES {
        let started = Instant::now();
        reg.create_instance(FUNCTIONS[i % FUNCTIONS.len()], &InstanceSpec::default())
            .await
            .unwrap();
        if let Some(l) = latencies.as_deref_mut() {
            l.push(started.elapsed());
        }
    }
}

fn main() {
    let policy = Policy::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let mut latencies = Vec::with_capacity(INSTANCES);
    allocate_all(&mut inventory(), &policy, Some(&mut latencies));
    report("pure", latencies);

    let inv = inventory();
    let mut latencies = Vec::with_capacity(INSTANCES);
    for i in 0..INSTANCES {
        let started = Instant::now();
        let d = inv.allocate(&Request::new(["fft", "aes"][i % 2]), &policy);
        latencies.push(started.elapsed());
        assert!(matches!(d, Decision::Reconfigure(_)));
    }
    report("step5", latencies);

    let mut latencies = Vec::with_capacity(INSTANCES);
    let reg = rt.block_on(registry());
    rt.block_on(create_all(&reg, Some(&mut latencies)));
    report("registry", latencies);
    drop(reg);

    let mut c = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let mut group = c.benchmark_group("allocate_10000_on_8000_slots");
    group.throughput(criterion::Throughput::Elements(INSTANCES as u64));
    group.bench_function("pure", |b| {
        b.iter_batched(
            inventory,
            |mut inv| allocate_all(&mut inv, &policy, None),
            BatchSize::LargeInput,
        )
    });
    group.bench_function("registry", |b| {
        b.iter_batched(
            || rt.block_on(registry()),
            |reg| rt.block_on(create_all(&reg, None)),
            BatchSize::PerIteration,
        )
    });
    group.finish();
    c.final_summary();
}
