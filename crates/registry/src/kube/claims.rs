//! DRA claims as registry instances: what the kube-scheduler allocated, the registry
//! counts, and what the registry can no longer honour, Kubernetes allocates again.
//!
//! For every netaccel device in a ResourceClaim's `status.allocation` (driver
//! `netaccel.io`), the leader records a *pinned* instance `dra-<claim uid>-<n>` of the
//! function `dra.<accelerator>`, bound to that slot. Slots are shared (allocation's
//! rule: many instances per slot under the utilisation ceiling), so a claim's slot
//! still takes webhook and API instances of the same accelerator, and every slot of a
//! ready node stays offered in the ResourceSlices (the scheduler, for its part, gives
//! one device to one claim at a time). What a claim changes is reconfiguration:
//!
//! - refused where the registry decides: allocation never picks a pinned slot to
//!   reconfigure (it picks another, or answers `NO_DEVICE`), and a node's or an
//!   instance's request to reconfigure one is refused — the scheduler promised the
//!   claim this accelerator, and only it can move the claim;
//! - where the registry cannot refuse (the admin reconfigures the slot, the node
//!   reports another accelerator, the node is lost or deregistered), the pinned
//!   instance is unbound, never moved, and this loop evicts the claim's Pods (the
//!   Eviction API, as for webhook Pods). The resourceclaim controller then does what
//!   it does for any claim whose last consumer went: it deallocates a standalone
//!   claim and deletes a claim generated from a template with its Pod; the Pod's
//!   replacement is allocated by the scheduler from the slices as they are now.
//!   (The scheduler reserves a claim for its Pod when it allocates it, so an
//!   allocated claim no Pod uses only exists between a Pod going and the controller
//!   deallocating: nothing to do here.) An evicted Pod is gone, and its claim
//!   released, once its kubelet confirms it stopped — on a dead machine, once the
//!   Node is tainted `node.kubernetes.io/out-of-service` and the Pod GC deletes it.
//!
//! When a claim is deallocated or deleted its instance is released. The loop is
//! level-triggered over the claims' watch: a new leader (whose state is empty with
//! the in-memory store) records the claims' instances again once their nodes have
//! registered; the accelerator each device held when it was first recorded is kept in
//! the claim's annotation `netaccel.io/accelerator`, so a slot reconfigured during a
//! failover is seen as such.
//!
//! A Pod joining a standalone claim that is allocated already gets the environment of
//! its instance from the webhook. Other Pods of claims do not: at admission their
//! claim is not allocated yet (the scheduler allocates it later). Passing the binding
//! to containers then is the job of a kubelet DRA plugin (CDI edits), see
//! docs/kubernetes.md.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use ::kube::api::{Api, Patch, PatchParams};
use ::kube::runtime::reflector::Store;
use ::kube::runtime::watcher;
use ::kube::Client;
use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::json;
use tracing::{debug, info, warn};

use super::dra::{device_name, DRIVER};
use super::pods::{evict_pod, reflect, Evicted, Eviction, SharedBucket, EVICTION_BACKOFF, TICK};
use crate::model::{FunctionRecord, NodeState, Query, SlotRef};
use crate::registry::Registry;

/// Ids of the instances standing for claims start with this.
pub const INSTANCE_PREFIX: &str = "dra-";
/// Functions of claims' instances: `dra.<accelerator>`.
pub const FUNCTION_PREFIX: &str = "dra.";
/// The claim's annotation: the accelerators its devices held when first recorded,
/// comma-separated in the order of its allocation results.
pub const ACCELERATORS: &str = "netaccel.io/accelerator";

/// What the loop needs of a claim allocated (in part) to netaccel devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// (pool, device) of each netaccel allocation result, in order.
    pub devices: Vec<(String, String)>,
    /// Names of the Pods it is reserved for.
    pub pods: Vec<String>,
    /// From the annotation (empty when not written yet).
    pub accelerators: Vec<String>,
}

impl ClaimView {
    pub fn of(claim: &ResourceClaim) -> Option<ClaimView> {
        let status = claim.status.as_ref()?;
        let results = &status.allocation.as_ref()?.devices.as_ref()?.results;
        let devices: Vec<(String, String)> = results
            .iter()
            .flatten()
            .filter(|r| r.driver == DRIVER)
            .map(|r| (r.pool.clone(), r.device.clone()))
            .collect();
        if devices.is_empty() {
            return None;
        }
        let pods = status
            .reserved_for
            .iter()
            .flatten()
            .filter(|r| r.resource == "pods")
            .map(|r| r.name.clone())
            .collect();
        let accelerators = claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ACCELERATORS))
            .map(|v| v.split(',').map(String::from).collect())
            .unwrap_or_default();
        Some(ClaimView {
            namespace: claim.metadata.namespace.clone().unwrap_or_default(),
            name: claim.metadata.name.clone()?,
            uid: claim.metadata.uid.clone()?,
            devices,
            pods,
            accelerators,
        })
    }

    /// The instance standing for result `n`.
    pub fn instance_id(&self, n: usize) -> String {
        format!("{INSTANCE_PREFIX}{}-{n}", self.uid)
    }
}

/// Where a (pool, device) is in the registry's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// The node has not registered (yet, after a failover): nothing to decide.
    Unknown,
    /// The node is lost, or registered without this slot.
    Gone,
    Slot {
        slot: SlotRef,
        accelerator: String,
    },
}

/// A claim's pinned instance as the registry holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedView {
    pub id: String,
    pub function: String,
    pub binding: Option<SlotRef>,
}

/// One instance to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    /// Index of the claim in the pass's list.
    pub claim: usize,
    pub id: String,
    pub accelerator: String,
    pub slot: SlotRef,
}

/// One pass's actions.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub bind: Vec<Bind>,
    /// (function, instance) of claims deallocated or gone.
    pub release: Vec<(String, String)>,
    /// Claims whose device the registry cannot honour any more.
    pub displace: Vec<ClaimView>,
}

/// Decides one pass (see the module documentation). `evicted`: claims (by uid)
/// displaced lately, left alone for [`EVICTION_BACKOFF`].
pub fn plan(
    claims: &[ClaimView],
    pinned: &[PinnedView],
    place: impl Fn(&str, &str) -> Place,
    evicted: &mut HashMap<String, Instant>,
    now: Instant,
) -> Plan {
    evicted.retain(|_, at| now.duration_since(*at) < EVICTION_BACKOFF);
    let mut out = Plan::default();
    let mut wanted = BTreeSet::new();
    let by_id: HashMap<&str, &PinnedView> = pinned.iter().map(|p| (p.id.as_str(), p)).collect();
    for (c, claim) in claims.iter().enumerate() {
        let mut displaced = false;
        for (n, (pool, device)) in claim.devices.iter().enumerate() {
            let id = claim.instance_id(n);
            wanted.insert(id.clone());
            match (place(pool, device), by_id.get(id.as_str())) {
                (Place::Unknown, _) => {}
                (Place::Gone, _) => displaced = true,
                (Place::Slot { slot, .. }, Some(instance)) => {
                    displaced |= instance.binding.as_ref() != Some(&slot);
                }
                (Place::Slot { slot, accelerator }, None) => match claim.accelerators.get(n) {
                    Some(was) if *was != accelerator => displaced = true,
                    _ => out.bind.push(Bind {
                        claim: c,
                        id,
                        accelerator,
                        slot,
                    }),
                },
            }
        }
        if displaced && !evicted.contains_key(&claim.uid) {
            out.displace.push(claim.clone());
        }
    }
    for p in pinned {
        if p.id.starts_with(INSTANCE_PREFIX) && !wanted.contains(&p.id) {
            out.release.push((p.function.clone(), p.id.clone()));
        }
    }
    out
}

/// The function a claim's instance of `accelerator` belongs to.
pub fn function_record(accelerator: &str) -> FunctionRecord {
    FunctionRecord {
        name: format!("{FUNCTION_PREFIX}{accelerator}"),
        accelerator: accelerator.to_string(),
        hash: None,
        query: Query::default(),
    }
}

/// Every (pool, device) the registry knows, for [`plan`].
fn places(st: &crate::state::State) -> HashMap<String, Option<Slots>> {
    let mut out = HashMap::new();
    for node in st.nodes() {
        let r = &node.record;
        if r.state == NodeState::Lost {
            out.insert(r.name.clone(), None);
            continue;
        }
        let mut slots = HashMap::new();
        for d in &r.devices {
            for s in &d.slots {
                let slot = SlotRef {
                    node: r.name.clone(),
                    device: d.id.clone(),
                    slot: s.id,
                };
                slots.insert(
                    device_name(&d.id, s.id as u64),
                    (slot, s.accelerator.clone()),
                );
            }
        }
        out.insert(r.name.clone(), Some(slots));
    }
    out
}

type Slots = HashMap<String, (SlotRef, String)>;

/// Starts the claims' watch and the loop.
/// Watches every ResourceClaim (the claim loop's and the webhook's view).
pub fn watch(client: &Client) -> Store<ResourceClaim> {
    reflect(
        Api::<ResourceClaim>::all(client.clone()),
        watcher::Config::default(),
    )
}

/// Starts the loop over `claims` (from [`watch`]).
pub fn spawn(
    registry: Arc<Registry>,
    client: Client,
    claims: Store<ResourceClaim>,
    eviction: Eviction,
    bucket: SharedBucket,
) {
    tokio::spawn(async move {
        let _ = claims.wait_until_ready().await;
        let mut evicted = HashMap::new();
        let mut refused = BTreeSet::new();
        let mut interval = tokio::time::interval(TICK);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            if !registry.is_leader() {
                evicted.clear();
                refused.clear();
                continue;
            }
            let memory = (&mut evicted, &mut refused);
            pass(&registry, &client, &claims, &eviction, memory, &bucket).await;
        }
    });
}

async fn pass(
    registry: &Arc<Registry>,
    client: &Client,
    claims: &Store<ResourceClaim>,
    eviction: &Eviction,
    (evicted, refused): (&mut HashMap<String, Instant>, &mut BTreeSet<String>),
    bucket: &SharedBucket,
) {
    // A claim being deleted keeps its device while it is allocated (until its last
    // Pod goes), so it is counted like any other.
    let views: Vec<ClaimView> = claims
        .state()
        .iter()
        .filter_map(|c| ClaimView::of(c))
        .collect();
    refused.retain(|id| {
        views
            .iter()
            .any(|c| (0..c.devices.len()).any(|n| c.instance_id(n) == *id))
    });
    let (pinned, places) = {
        let st = registry.lock().await;
        let pinned: Vec<PinnedView> = st
            .instances()
            .filter(|i| i.pinned)
            .map(|i| PinnedView {
                id: i.id.clone(),
                function: i.function.clone(),
                binding: i.binding.clone(),
            })
            .collect();
        (pinned, places(&st))
    };
    let place = |pool: &str, device: &str| match places.get(pool) {
        None => Place::Unknown,
        Some(None) => Place::Gone,
        Some(Some(slots)) => match slots.get(device) {
            Some((slot, accelerator)) => Place::Slot {
                slot: slot.clone(),
                accelerator: accelerator.clone(),
            },
            None => Place::Gone,
        },
    };
    let plan = plan(&views, &pinned, place, evicted, Instant::now());
    for (function, id) in plan.release {
        match registry.delete_instance(&function, &id).await {
            Ok(()) => info!(instance = %id, "released: its claim is deallocated or gone"),
            Err(e) => debug!(instance = %id, error = %e, "release failed"),
        }
    }
    for bind in plan.bind {
        let claim = &views[bind.claim];
        match registry
            .bind_pinned(function_record(&bind.accelerator), &bind.id, &bind.slot)
            .await
        {
            Ok(()) => {
                info!(instance = %bind.id, claim = %claim.name, namespace = %claim.namespace,
                    slot = ?bind.slot, "DRA: the claim's device recorded as an instance");
                if claim.accelerators.is_empty() {
                    annotate(client, claim, &places).await;
                }
            }
            // Said once per claim; it is tried again every pass.
            Err(e) if refused.insert(bind.id.clone()) => {
                warn!(instance = %bind.id, claim = %claim.name, error = %e,
                    "DRA: cannot record the claim's device; trying again")
            }
            Err(e) => debug!(instance = %bind.id, error = %e, "DRA: still cannot record"),
        }
    }
    for claim in plan.displace {
        if !displace(client, &claim, eviction, bucket).await {
            break; // Out of tokens: the rest waits for the next pass.
        }
        evicted.insert(claim.uid.clone(), Instant::now());
    }
}

/// Writes the accelerators the claim's devices hold now into its annotation.
async fn annotate(client: &Client, claim: &ClaimView, places: &HashMap<String, Option<Slots>>) {
    let accelerators: Option<Vec<String>> = claim
        .devices
        .iter()
        .map(|(pool, device)| {
            places
                .get(pool)?
                .as_ref()?
                .get(device)
                .map(|(_, a)| a.clone())
        })
        .collect();
    let Some(accelerators) = accelerators else {
        return;
    };
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), &claim.namespace);
    let patch = json!({"metadata": {"annotations": {ACCELERATORS: accelerators.join(",")}}});
    if let Err(e) = api
        .patch(&claim.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        warn!(claim = %claim.name, error = %e, "DRA: cannot annotate the claim");
    }
}

/// Evicts the claim's Pods, one token of the eviction rate each; `false` when the
/// tokens ran out before the last.
async fn displace(
    client: &Client,
    claim: &ClaimView,
    eviction: &Eviction,
    bucket: &SharedBucket,
) -> bool {
    if claim.pods.is_empty() {
        info!(claim = %claim.name, namespace = %claim.namespace,
            "DRA: the claim's device is gone but no Pod uses it: left to the resourceclaim controller");
        return true;
    }
    for pod in &claim.pods {
        if !bucket.lock().expect("bucket lock").take(Instant::now()) {
            return false;
        }
        if evict_pod(client, &claim.namespace, pod, eviction).await == Evicted::Done {
            info!(pod = %pod, claim = %claim.name, namespace = %claim.namespace,
                "evicted: its claim's device is gone or holds another accelerator");
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(uid: &str, pool: &str, device: &str, accelerators: &[&str]) -> ClaimView {
        ClaimView {
            namespace: "default".into(),
            name: format!("c-{uid}"),
            uid: uid.into(),
            devices: vec![(pool.into(), device.into())],
            pods: vec![format!("p-{uid}")],
            accelerators: accelerators.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn slot(node: &str, n: u16) -> SlotRef {
        SlotRef {
            node: node.into(),
            device: "cpu0".into(),
            slot: n,
        }
    }

    fn place(pool: &str, device: &str) -> Place {
        match (pool, device) {
            ("a", "cpu0-slot-0") => Place::Slot {
                slot: slot("a", 0),
                accelerator: "sobel".into(),
            },
            ("a", _) | ("lost", _) => Place::Gone,
            _ => Place::Unknown,
        }
    }

    #[test]
    fn claims_are_bound_released_and_displaced() {
        let now = Instant::now();
        let mut evicted = HashMap::new();
        let claims = [
            claim("new", "a", "cpu0-slot-0", &[]),
            claim("kept", "a", "cpu0-slot-0", &["sobel"]),
            claim("changed", "a", "cpu0-slot-0", &["topk"]),
            claim("unbound", "a", "cpu0-slot-0", &["sobel"]),
            claim("on-lost", "lost", "cpu0-slot-0", &["sobel"]),
            claim("missing-slot", "a", "cpu0-slot-7", &["sobel"]),
            claim("not-yet", "b", "cpu0-slot-0", &["sobel"]),
        ];
        let pinned = [
            PinnedView {
                id: "dra-kept-0".into(),
                function: "dra.sobel".into(),
                binding: Some(slot("a", 0)),
            },
            PinnedView {
                id: "dra-unbound-0".into(),
                function: "dra.sobel".into(),
                binding: None,
            },
            PinnedView {
                id: "dra-deallocated-0".into(),
                function: "dra.sobel".into(),
                binding: Some(slot("a", 0)),
            },
        ];
        let p = plan(&claims, &pinned, place, &mut evicted, now);
        assert_eq!(
            p.bind,
            [Bind {
                claim: 0,
                id: "dra-new-0".into(),
                accelerator: "sobel".into(),
                slot: slot("a", 0)
            }]
        );
        assert_eq!(
            p.release,
            [("dra.sobel".to_string(), "dra-deallocated-0".to_string())]
        );
        let displaced: Vec<&str> = p.displace.iter().map(|c| c.uid.as_str()).collect();
        assert_eq!(displaced, ["changed", "unbound", "on-lost", "missing-slot"]);
        // Once acted on, a claim is left alone for the backoff.
        for c in &displaced {
            evicted.insert(c.to_string(), now);
        }
        let p = plan(&claims, &pinned, place, &mut evicted, now);
        assert!(p.displace.is_empty(), "{p:?}");
        let p = plan(
            &claims,
            &pinned,
            place,
            &mut evicted,
            now + EVICTION_BACKOFF,
        );
        assert_eq!(p.displace.len(), 4);
    }
}
