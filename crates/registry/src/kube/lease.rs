//! Leader election among registry replicas through a `coordination.k8s.io/v1` Lease,
//! for `--kubernetes` with the in-memory store (with etcd, etcd's election decides;
//! see `ha`).
//!
//! The protocol is client-go's: the Lease names its holder; the holder renews it every
//! fifth of the TTL; another replica takes it over when it has seen the same
//! `resourceVersion` for a whole TTL (time measured on its own clock, so clocks need
//! not agree). Every write is a compare-and-swap on `resourceVersion`, so two
//! replicas cannot both take it. A holder that cannot renew within the TTL steps down
//! before anyone may take over.
//!
//! The holder's identity is its advertised URL, which followers put in the
//! `Location` of their `NOT_LEADER` answers. With `--pod-name`, each replica also
//! labels its own Pod `netaccel.io/role: leader|follower`, so Services can send the
//! webhook's calls and the nodes' writes to the leader only.
//!
//! State. While it follows, a replica copies the leader's state (`follow`), so it
//! answers reads and, should it lead next, starts from that copy. A replica with no
//! copy (it started after the leader died) starts empty. Either way it rebuilds: nodes
//! register again with their next lease renewal, and after one node lease the
//! instances of the Pods the webhook bound are recreated from the Pods themselves
//! (their annotations name the instance, the function and the node), each bound again
//! on its own node where a slot there still holds its accelerator. A Pod that cannot be is displaced
//! and evicted as after a reconfiguration. The instances of DRA claims need no step
//! here: the claim loop (`claims`) is level-triggered and records them again, each
//! on the slot the claim names, as soon as that slot's node has registered.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ::kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use ::kube::Client;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::chrono::Utc;
use serde_json::json;
use tracing::{info, warn};

use super::admission::{self, Verdict, INSTANCE};
use super::pods::PodView;
use super::webhook;
use crate::model::InstanceSpec;
use crate::registry::Registry;

/// Where the Lease lives and who this replica is.
#[derive(Clone, Debug, PartialEq)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    /// This replica's advertised URL.
    pub identity: String,
    pub ttl: Duration,
    /// This replica's own Pod (labelled with its role), when it runs in one.
    pub pod: Option<String>,
}

/// What a replica saw of the Lease last time.
struct Seen {
    version: Option<String>,
    since: Instant,
    /// Who held it.
    holder: Option<String>,
}

/// Runs the election forever.
pub fn spawn(registry: Arc<Registry>, client: Client, election: Election) {
    tokio::spawn(async move {
        let api: Api<Lease> = Api::namespaced(client.clone(), &election.namespace);
        let mut seen = Seen {
            version: None,
            since: Instant::now(),
            holder: None,
        };
        let mut renewed = Instant::now();
        let mut role_written: Option<bool> = None;
        let period = election.ttl / 5;
        loop {
            let leading = registry.is_leader();
            match step(&api, &election, &mut seen).await {
                Ok(true) => {
                    renewed = Instant::now();
                    if !leading {
                        info!(lease = %election.name, "Lease acquired: leading");
                        registry.set_leader_url(Some(election.identity.clone()));
                        if let Err(e) = registry.become_leader().await {
                            warn!(error = %e, "cannot lead: the store refused");
                        } else {
                            tokio::spawn(rebuild(registry.clone(), client.clone()));
                        }
                    }
                }
                Ok(false) => {
                    // A holder renews every period; one whose Lease has not changed for
                    // two is lapsing (dead or cut off) and is not named to writers.
                    let lapsing = seen.since.elapsed() > period * 2;
                    let holder = seen.holder.clone().filter(|h| !h.is_empty() && !lapsing);
                    registry.set_leader_url(holder);
                    if leading {
                        warn!(lease = %election.name, "Lease held by another replica: following");
                        registry.step_down();
                    }
                }
                Err(e) => {
                    warn!(error = %e, "Lease: cannot read or renew");
                    if leading && renewed.elapsed() >= election.ttl * 4 / 5 {
                        warn!("Lease not renewed in time: stepping down");
                        registry.step_down();
                    }
                }
            }
            let is_leader = registry.is_leader();
            if let Some(pod) = &election.pod {
                if role_written != Some(is_leader)
                    && label_role(&client, &election.namespace, pod, is_leader).await
                {
                    role_written = Some(is_leader);
                }
            }
            tokio::time::sleep(period).await;
        }
    });
}

/// One round: `Ok(true)` when this replica holds the Lease after it.
async fn step(api: &Api<Lease>, election: &Election, seen: &mut Seen) -> Result<bool, String> {
    let now = MicroTime(Utc::now());
    let ttl_s = election.ttl.as_secs().max(1) as i32;
    let Some(mut lease) = api
        .get_opt(&election.name)
        .await
        .map_err(|e| e.to_string())?
    else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(election.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(election.identity.clone()),
                lease_duration_seconds: Some(ttl_s),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(::kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e.to_string()),
        };
    };
    if seen.version != lease.metadata.resource_version {
        seen.version = lease.metadata.resource_version.clone();
        seen.since = Instant::now();
    }
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let holder = spec.holder_identity.clone().unwrap_or_default();
    seen.holder = Some(holder.clone());
    let mine = holder == election.identity;
    let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(ttl_s).max(1) as u64);
    let expired = holder.is_empty() || seen.since.elapsed() >= duration;
    if !mine && !expired {
        return Ok(false);
    }
    if !mine {
        info!(previous = %holder, "Lease expired: taking it over");
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        spec.acquire_time = Some(now.clone());
        spec.holder_identity = Some(election.identity.clone());
    }
    spec.lease_duration_seconds = Some(ttl_s);
    spec.renew_time = Some(now);
    // A replace carries the resourceVersion read: it fails if anyone wrote since.
    match api
        .replace(&election.name, &PostParams::default(), &lease)
        .await
    {
        Ok(written) => {
            seen.version = written.metadata.resource_version;
            seen.since = Instant::now();
            Ok(true)
        }
        Err(::kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

async fn label_role(client: &Client, namespace: &str, pod: &str, leader: bool) -> bool {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let role = if leader { "leader" } else { "follower" };
    let patch = json!({"metadata": {"labels": {"netaccel.io/role": role}}});
    match api
        .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => true,
        Err(e) => {
            warn!(pod, error = %e, "cannot label this replica's Pod with its role");
            false
        }
    }
}

/// A new leader's rebuild: after one node lease (the nodes have registered again),
/// the instances of the webhook's Pods are recreated from the Pods.
async fn rebuild(registry: Arc<Registry>, client: Client) {
    tokio::time::sleep(registry.config.lease).await;
    let api: Api<Pod> = Api::all(client);
    let pods = match api.list(&ListParams::default().labels(INSTANCE)).await {
        Ok(list) => list.items,
        Err(e) => return warn!(error = %e, "rebuild: cannot list Pods"),
    };
    let mut rebuilt = 0;
    for pod in &pods {
        let Some(view) = PodView::of(pod).filter(|v| !v.going) else {
            continue;
        };
        let Verdict::Bind(ask) = admission::ask_pod(pod) else {
            continue;
        };
        if !registry.is_leader() {
            return;
        }
        if webhook::ensure_function(&registry, webhook::function_record(&ask))
            .await
            .is_err()
        {
            continue;
        }
        let spec = InstanceSpec {
            id: Some(view.instance.clone()),
            node: view.node.clone(),
        };
        match registry.create_instance(&ask.function, &spec).await {
            Ok(_) => rebuilt += 1,
            Err(e) => {
                info!(pod = %view.name, error = %e, "rebuild: the Pod's instance cannot be bound again")
            }
        }
    }
    info!(
        pods = pods.len(),
        instances = rebuilt,
        "rebuilt the instances of Pods after taking the lead"
    );
}
