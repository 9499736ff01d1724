//! The Pod watcher: instances follow their Pods, and Pods follow their instances.
//!
//! - An instance the webhook bound (id `k8s-…`) whose Pod is gone, finished or being
//!   deleted is released, so its slot's count is right for the next Pod. A Pod that
//!   does not show up at all within [`ADMISSION_GRACE`] of its instance being seen —
//!   another admission plugin refused it after the webhook bound it — is released too.
//! - A Pod whose instance was moved to another node by a reconfiguration or a lost
//!   node (the registry's migration), or left without a slot, is *displaced*: its
//!   environment and node selector name the old node. It is evicted through the
//!   Eviction API, so PodDisruptionBudgets are respected, at most
//!   `--eviction-rate` per second; its controller makes a new Pod, which the webhook
//!   binds anew. An eviction a budget refuses is tried again later.
//! - Deployments whose Pod template asks for an accelerator register their function
//!   before their first Pod (BlastFunction's listing 5.3).
//!
//! [`plan`] decides, as a pure function of the Pods and the instances; the loop only
//! carries it out. Only the leader acts, and what it remembers (when an instance was
//! first seen without its Pod, what it evicted lately) is rebuilt by the next pass
//! after a failover.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::kube::api::{Api, DeleteParams, EvictParams};
use ::kube::runtime::reflector::{self, Store};
use ::kube::runtime::{watcher, WatchStreamExt};
use ::kube::Client;
use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use tracing::{debug, info, warn};

use super::admission::{self, Verdict, INSTANCE, INSTANCE_PREFIX, NODE};
use super::webhook;
use crate::registry::Registry;

/// Period of the watcher's pass.
pub const TICK: Duration = Duration::from_millis(200);
/// An instance whose Pod was never seen is released after this long.
pub const ADMISSION_GRACE: Duration = Duration::from_secs(15);
/// A Pod evicted is not evicted again for this long (its deletion takes a while).
pub const EVICTION_BACKOFF: Duration = Duration::from_secs(30);

/// What the watcher needs of a Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    pub instance: String,
    /// The node the webhook bound it on (`netaccel.io/node`).
    pub node: Option<String>,
    /// Finished (Succeeded or Failed) or being deleted.
    pub going: bool,
}

impl PodView {
    pub fn of(pod: &Pod) -> Option<PodView> {
        let annotations = pod.metadata.annotations.as_ref()?;
        let instance = annotations.get(INSTANCE)?.clone();
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        Some(PodView {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone()?,
            instance,
            node: annotations.get(NODE).cloned(),
            going: pod.metadata.deletion_timestamp.is_some()
                || matches!(phase, Some("Succeeded" | "Failed")),
        })
    }
}

/// What the watcher needs of an instance: its id and the node it is bound on now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceView {
    pub id: String,
    pub function: String,
    pub node: Option<String>,
}

/// One pass's actions.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// (function, instance) to release.
    pub release: Vec<(String, String)>,
    /// Displaced Pods to evict, with their instance.
    pub evict: Vec<PodView>,
}

/// What the watcher remembers between passes (rebuilt after a failover).
#[derive(Default)]
pub struct Memory {
    unseen_since: HashMap<String, Instant>,
    evicted_at: HashMap<String, Instant>,
}

/// Decides one pass (see the module documentation).
pub fn plan(
    pods: &[PodView],
    instances: &[InstanceView],
    memory: &mut Memory,
    now: Instant,
) -> Plan {
    let by_instance: HashMap<&str, &PodView> =
        pods.iter().map(|p| (p.instance.as_str(), p)).collect();
    let mut out = Plan::default();
    memory
        .unseen_since
        .retain(|id, _| instances.iter().any(|i| &i.id == id));
    memory
        .evicted_at
        .retain(|_, at| now.duration_since(*at) < EVICTION_BACKOFF);
    for instance in instances
        .iter()
        .filter(|i| i.id.starts_with(INSTANCE_PREFIX))
    {
        let release = (instance.function.clone(), instance.id.clone());
        match by_instance.get(instance.id.as_str()) {
            Some(pod) if pod.going => out.release.push(release),
            Some(pod) => {
                memory.unseen_since.remove(&instance.id);
                let displaced = instance.node.is_none() || instance.node != pod.node;
                if displaced && !memory.evicted_at.contains_key(&instance.id) {
                    out.evict.push((*pod).clone());
                }
            }
            None => {
                let since = *memory
                    .unseen_since
                    .entry(instance.id.clone())
                    .or_insert(now);
                if now.duration_since(since) >= ADMISSION_GRACE {
                    out.release.push(release);
                }
            }
        }
    }
    out
}

/// The one bucket of `--eviction-rate`, shared by the Pod watcher and the claim loop
/// (held only to take a token, never across an await).
pub type SharedBucket = Arc<std::sync::Mutex<Bucket>>;

/// A token bucket: `rate` evictions per second, bursts of up to `rate` (at least 1).
pub struct Bucket {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    pub fn new(rate: f64, now: Instant) -> Bucket {
        Bucket {
            rate,
            tokens: rate.max(1.0),
            at: now,
        }
    }

    pub fn take(&mut self, now: Instant) -> bool {
        let refill = now.duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.rate.max(1.0));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

pub(super) fn reflect<K>(api: Api<K>, config: watcher::Config) -> Store<K>
where
    K: ::kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync,
    K: serde::de::DeserializeOwned + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Err(e) = event {
                debug!(error = %e, "watch interrupted; resuming");
            }
        }
    });
    reader
}

/// How the watcher evicts.
#[derive(Clone, Debug, PartialEq)]
pub struct Eviction {
    /// Evictions per second.
    pub rate: f64,
    /// Grace period given to an evicted Pod (None: its own).
    pub grace_s: Option<u32>,
}

/// Starts the watches and the loop.
pub fn spawn(registry: Arc<Registry>, client: Client, eviction: Eviction, bucket: SharedBucket) {
    let pods = reflect(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().labels(INSTANCE),
    );
    let deployments = reflect(
        Api::<Deployment>::all(client.clone()),
        watcher::Config::default(),
    );
    tokio::spawn(async move {
        let _ = pods.wait_until_ready().await;
        let mut memory = Memory::default();
        let mut interval = tokio::time::interval(TICK);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            if !registry.is_leader() {
                memory = Memory::default();
                continue;
            }
            register_deployments(&registry, &deployments).await;
            let views: Vec<PodView> = pods.state().iter().filter_map(|p| PodView::of(p)).collect();
            let instances: Vec<InstanceView> = {
                let st = registry.lock().await;
                st.instances()
                    .map(|i| InstanceView {
                        id: i.id.clone(),
                        function: i.function.clone(),
                        node: i.binding.as_ref().map(|b| b.node.clone()),
                    })
                    .collect()
            };
            let now = Instant::now();
            let plan = plan(&views, &instances, &mut memory, now);
            for (function, id) in plan.release {
                match registry.delete_instance(&function, &id).await {
                    Ok(()) => {
                        info!(instance = %id, function = %function, "released: its Pod is gone")
                    }
                    Err(e) => debug!(instance = %id, error = %e, "release failed"),
                }
            }
            for pod in plan.evict {
                if !bucket.lock().expect("bucket lock").take(Instant::now()) {
                    break; // The rest waits for the next pass.
                }
                memory
                    .evicted_at
                    .insert(pod.instance.clone(), Instant::now());
                evict(&registry, &client, &pod, &eviction).await;
            }
        }
    });
}

async fn evict(registry: &Registry, client: &Client, pod: &PodView, eviction: &Eviction) {
    if evict_pod(client, &pod.namespace, &pod.name, eviction).await == Evicted::Done {
        info!(pod = %pod.name, namespace = %pod.namespace, instance = %pod.instance,
            "evicted: its instance was moved off the node it was bound on");
        // Its replacement is bound anew by the webhook; this instance is done.
        let function = {
            let st = registry.lock().await;
            st.instance(&pod.instance).map(|i| i.function.clone())
        };
        if let Some(function) = function {
            let _ = registry.delete_instance(&function, &pod.instance).await;
        }
    }
}

/// How an eviction went.
#[derive(Debug, PartialEq, Eq)]
pub enum Evicted {
    Done,
    /// A PodDisruptionBudget refused it (429): try again later.
    Budget,
    /// The Pod is gone already.
    Gone,
    Failed,
}

/// Evicts one Pod through the Eviction API (so disruption budgets hold).
pub async fn evict_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    eviction: &Eviction,
) -> Evicted {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            grace_period_seconds: eviction.grace_s,
            ..DeleteParams::default()
        }),
        ..EvictParams::default()
    };
    match api.evict(name, &params).await {
        Ok(_) => Evicted::Done,
        Err(::kube::Error::Api(e)) if e.code == 429 => {
            info!(pod = %name, "eviction refused by a disruption budget; trying again later");
            Evicted::Budget
        }
        Err(::kube::Error::Api(e)) if e.code == 404 => Evicted::Gone,
        Err(e) => {
            warn!(pod = %name, error = %e, "eviction failed");
            Evicted::Failed
        }
    }
}

/// Registers the function of every Deployment whose Pod template asks for one.
async fn register_deployments(registry: &Registry, deployments: &Store<Deployment>) {
    for d in deployments.state() {
        let Some(spec) = &d.spec else { continue };
        let mut pod = Pod {
            metadata: spec.template.metadata.clone().unwrap_or_default(),
            spec: spec.template.spec.clone(),
            status: None,
        };
        pod.metadata.name = d.metadata.name.clone();
        pod.metadata.owner_references = None;
        if let Verdict::Bind(ask) = admission::ask_pod(&pod) {
            if let Err(e) = webhook::ensure_function(registry, webhook::function_record(&ask)).await
            {
                debug!(deployment = ?d.metadata.name, error = %e, "Deployment's function not registered");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, instance: &str, node: &str, going: bool) -> PodView {
        PodView {
            namespace: "default".into(),
            name: name.into(),
            instance: instance.into(),
            node: Some(node.into()),
            going,
        }
    }

    fn instance(id: &str, node: Option<&str>) -> InstanceView {
        InstanceView {
            id: id.into(),
            function: "f".into(),
            node: node.map(String::from),
        }
    }

    #[test]
    fn displaced_pods_are_evicted_once_and_gone_pods_released() {
        let t0 = Instant::now();
        let mut memory = Memory::default();
        let pods = [
            pod("stays", "k8s-1", "a", false),
            pod("moved", "k8s-2", "a", false),
            pod("ending", "k8s-3", "a", true),
            pod("unbound", "k8s-5", "a", false),
        ];
        let instances = [
            instance("k8s-1", Some("a")),
            instance("k8s-2", Some("b")),
            instance("k8s-3", Some("a")),
            instance("k8s-4", Some("a")), // no Pod (yet)
            instance("k8s-5", None),
            instance("shout-1", Some("a")), // not the webhook's: left alone
        ];
        let p = plan(&pods, &instances, &mut memory, t0);
        assert_eq!(p.release, [("f".to_string(), "k8s-3".to_string())]);
        let evicted: Vec<&str> = p.evict.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(evicted, ["moved", "unbound"]);
        memory.evicted_at.insert("k8s-2".into(), t0);
        let p = plan(&pods, &instances, &mut memory, t0 + Duration::from_secs(1));
        assert_eq!(p.evict.len(), 1, "k8s-2 is not evicted twice: {p:?}");
        // The Pod never seen: released after the grace, not before.
        assert!(
            !plan(&pods, &instances, &mut memory, t0 + ADMISSION_GRACE / 2)
                .release
                .iter()
                .any(|(_, id)| id == "k8s-4")
        );
        let p = plan(&pods, &instances, &mut memory, t0 + ADMISSION_GRACE);
        assert!(p.release.iter().any(|(_, id)| id == "k8s-4"), "{p:?}");
        assert!(!p.release.iter().any(|(_, id)| id == "shout-1"));
    }

    #[test]
    fn the_bucket_bounds_evictions_per_second() {
        let t0 = Instant::now();
        let mut b = Bucket::new(2.0, t0);
        assert!(b.take(t0) && b.take(t0));
        assert!(!b.take(t0));
        assert!(b.take(t0 + Duration::from_millis(500)));
        assert!(!b.take(t0 + Duration::from_millis(500)));
        let mut slow = Bucket::new(0.5, t0);
        assert!(slow.take(t0));
        assert!(!slow.take(t0 + Duration::from_secs(1)));
        assert!(slow.take(t0 + Duration::from_secs(2)));
    }
}
