//! Dynamic Resource Allocation (`resource.k8s.io/v1`): netaccel slots as devices the
//! kube-scheduler allocates itself.
//!
//! The registry publishes a DeviceClass `netaccel.io` and, for every ready netaccel
//! node, one ResourceSlice (driver `netaccel.io`, pool = the node's name, `nodeName` =
//! the Kubernetes node of the same name) with one device per slot, whose attributes
//! are `accelerator`, `hash`, `backend`, `vendor` and `node`. A claim selecting
//! `device.attributes["netaccel.io"].accelerator == "sobel"` is then allocated a slot
//! holding sobel, and its Pod scheduled onto that slot's node, by Kubernetes alone.
//!
//! Reconcile. [`desired`] is a pure function of the registry's node listing. Every
//! [`TICK`] the leader compares it with what it last wrote and, when they differ (a
//! reconfiguration, a node lost or back), lists the slices it owns and converges:
//! changed pools are written with their generation bumped, pools of nodes that are
//! lost or gone are deleted (the scheduler would otherwise keep allocating devices of
//! a dead node). Every [`RESYNC`] it converges even without a change, which repairs
//! slices someone else edited or deleted and rebuilds everything after a failover. A
//! new leader first waits one node lease, so that the nodes have renewed with it and
//! the slices of the nodes it does not know yet are not deleted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use ::kube::Client;
use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, Device, DeviceAttribute, DeviceClass, DeviceClassSpec, DeviceSelector,
    ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;
use tracing::{info, warn};

use super::FIELD_MANAGER;
use crate::registry::Registry;

/// The driver name and the DeviceClass selecting its devices.
pub const DRIVER: &str = "netaccel.io";
pub const DEVICE_CLASS: &str = "netaccel.io";
/// Label on every slice the registry owns (it deletes only those).
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// How often the leader compares the published slices with the registry's state.
pub const TICK: Duration = Duration::from_millis(250);
/// How often it converges even when nothing seems to have changed.
pub const RESYNC: Duration = Duration::from_secs(30);

/// The DeviceClass every netaccel claim names.
pub fn device_class() -> DeviceClass {
    DeviceClass {
        metadata: ObjectMeta {
            name: Some(DEVICE_CLASS.to_string()),
            labels: Some([(MANAGED_BY.to_string(), FIELD_MANAGER.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: DeviceClassSpec {
            selectors: Some(vec![DeviceSelector {
                cel: Some(CELDeviceSelector {
                    expression: format!("device.driver == {DRIVER:?}"),
                }),
            }]),
            ..DeviceClassSpec::default()
        },
    }
}

/// `s` as a DNS label: lower case, letters, digits and `-`, at most `max` bytes.
fn dns_label(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .collect();
    out.truncate(max);
    out.trim_matches('-').to_string()
}

/// The slice of netaccel node `node`.
pub fn slice_name(node: &str) -> String {
    format!("netaccel-{}", dns_label(node, 200))
}

/// The device standing for slot `slot` of netaccel device `device` in its node's pool.
pub fn device_name(device: &str, slot: u64) -> String {
    dns_label(&format!("{device}-slot-{slot}"), 63)
}

/// One pool: the Kubernetes node and its devices.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    pub node: String,
    pub devices: Vec<Device>,
}

/// The slices that should exist, by name, from `GET /v1/nodes`'s document: one per
/// ready node, one device per slot.
pub fn desired(nodes: &Value) -> BTreeMap<String, Pool> {
    let mut out = BTreeMap::new();
    for node in nodes.as_array().into_iter().flatten() {
        let (Some(name), Some("ready")) = (node["name"].as_str(), node["state"].as_str()) else {
            continue;
        };
        let mut devices = Vec::new();
        for device in node["devices"].as_array().into_iter().flatten() {
            let id = device["id"].as_str().unwrap_or_default();
            for slot in device["slots"].as_array().into_iter().flatten() {
                if !slot["reconfiguring"].is_null() {
                    // The registry is loading another accelerator into it: offered
                    // again once the node holds it, under its new attributes.
                    continue;
                }
                let attr = |v: &str| DeviceAttribute {
                    string: Some(v.to_string()),
                    ..DeviceAttribute::default()
                };
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                let attributes: BTreeMap<String, DeviceAttribute> = [
                    ("accelerator", text(&slot["accelerator"])),
                    ("hash", text(&slot["hash"])),
                    ("backend", text(&device["backend"])),
                    ("vendor", text(&device["vendor"])),
                    ("node", name.to_string()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), attr(&v)))
                .collect();
                devices.push(Device {
                    name: device_name(id, slot["id"].as_u64().unwrap_or_default()),
                    attributes: Some(attributes),
                    ..Device::default()
                });
            }
        }
        out.insert(
            slice_name(name),
            Pool {
                node: name.to_string(),
                devices,
            },
        );
    }
    out
}

/// The slice object for `pool` at `generation`.
pub fn slice(name: &str, pool: &Pool, generation: i64) -> ResourceSlice {
    ResourceSlice {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some([(MANAGED_BY.to_string(), FIELD_MANAGER.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: ResourceSliceSpec {
            driver: DRIVER.to_string(),
            node_name: Some(pool.node.clone()),
            pool: ResourcePool {
                name: pool.node.clone(),
                generation,
                resource_slice_count: 1,
            },
            devices: Some(pool.devices.clone()),
            ..ResourceSliceSpec::default()
        },
    }
}

/// Converges the API server's slices on `want`.
pub async fn converge(client: &Client, want: &BTreeMap<String, Pool>) -> Result<(), String> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let selector = format!("{MANAGED_BY}={FIELD_MANAGER}");
    let existing = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| format!("listing ResourceSlices: {e}"))?;
    let mut have: BTreeMap<String, ResourceSlice> = BTreeMap::new();
    for s in existing.items {
        if let Some(name) = s.metadata.name.clone() {
            have.insert(name, s);
        }
    }
    for (name, s) in &have {
        if !want.contains_key(name) {
            info!(slice = %name, pool = %s.spec.pool.name, "DRA: deleting the slice of a node lost or gone");
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) | Err(::kube::Error::Api(::kube::core::ErrorResponse { code: 404, .. })) => {}
                Err(e) => return Err(format!("deleting ResourceSlice {name}: {e}")),
            }
        }
    }
    for (name, pool) in want {
        let current = have.get(name);
        let same = current.is_some_and(|s| {
            s.spec.node_name.as_deref() == Some(pool.node.as_str())
                && s.spec.devices.as_deref().unwrap_or_default() == pool.devices.as_slice()
        });
        if same {
            continue;
        }
        let generation = current.map_or(1, |s| s.spec.pool.generation + 1);
        info!(slice = %name, generation, devices = pool.devices.len(), "DRA: publishing the node's slots");
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&slice(name, pool, generation)),
        )
        .await
        .map_err(|e| format!("writing ResourceSlice {name}: {e}"))?;
    }
    Ok(())
}

/// Writes the DeviceClass, then keeps the slices converged while this replica leads.
pub fn spawn(registry: Arc<Registry>, client: Client) {
    tokio::spawn(async move {
        let classes: Api<DeviceClass> = Api::all(client.clone());
        let mut class_written = false;
        let mut published: Option<BTreeMap<String, Pool>> = None;
        let mut last_sync = Instant::now();
        let mut failing = false;
        let mut leading_since: Option<Instant> = None;
        let mut interval = tokio::time::interval(TICK);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            if !registry.is_leader() {
                // A new term starts from what the API server holds.
                published = None;
                leading_since = None;
                continue;
            }
            // A new leader's nodes renew their leases with it within one lease; until
            // then its listing may lack some (empty, for a replica that started after
            // the last leader died), and converging on it would delete their slices.
            let since = *leading_since.get_or_insert_with(Instant::now);
            if !class_written {
                match classes
                    .patch(
                        DEVICE_CLASS,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(&device_class()),
                    )
                    .await
                {
                    Ok(_) => class_written = true,
                    Err(e) => {
                        warn!(error = %e, "DRA: cannot write DeviceClass {DEVICE_CLASS}; retrying")
                    }
                }
            }
            if since.elapsed() < registry.config.lease {
                continue;
            }
            let want = desired(&registry.nodes_json().await);
            if published.as_ref() == Some(&want) && last_sync.elapsed() < RESYNC {
                continue;
            }
            match converge(&client, &want).await {
                Ok(()) => {
                    if failing {
                        info!("DRA: slices published again");
                    }
                    failing = false;
                    published = Some(want);
                    last_sync = Instant::now();
                }
                Err(e) => {
                    if !failing {
                        warn!(error = %e, "DRA: cannot publish the slices; retrying");
                    }
                    failing = true;
                    published = None;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn one_pool_per_ready_node_one_device_per_slot() {
        let nodes = json!([
            {"name": "node-a", "state": "ready", "devices": [{"id": "cpu0", "backend": "cpu", "vendor": "netaccel",
                "slots": [{"id": 0, "accelerator": "sobel", "hash": "h"}, {"id": 1, "accelerator": "echo", "hash": ""}]}]},
            {"name": "Node_B", "state": "lost", "devices": []},
            {"name": "Node_C", "state": "ready", "devices": [{"id": "FPGA_0", "backend": "opencl", "vendor": "x",
                "slots": [{"id": 3, "accelerator": "topk", "hash": ""}]}]}
        ]);
        let want = desired(&nodes);
        assert_eq!(
            want.keys().collect::<Vec<_>>(),
            ["netaccel-node-a", "netaccel-node-c"]
        );
        let a = &want["netaccel-node-a"];
        assert_eq!(a.node, "node-a");
        assert_eq!(a.devices.len(), 2);
        assert_eq!(a.devices[0].name, "cpu0-slot-0");
        let attrs = a.devices[0].attributes.as_ref().unwrap();
        for (k, v) in [
            ("accelerator", "sobel"),
            ("hash", "h"),
            ("backend", "cpu"),
            ("vendor", "netaccel"),
            ("node", "node-a"),
        ] {
            assert_eq!(attrs[k].string.as_deref(), Some(v), "{k}");
        }
        let c = &want["netaccel-node-c"];
        assert_eq!(c.node, "Node_C", "the pool keeps the node's own name");
        assert_eq!(c.devices[0].name, "fpga-0-slot-3");
        let s = slice("netaccel-node-c", c, 7);
        assert_eq!(s.spec.driver, DRIVER);
        assert_eq!(s.spec.pool.generation, 7);
        assert_eq!(s.spec.node_name.as_deref(), Some("Node_C"));
        assert!(desired(&json!("garbage")).is_empty());
    }

    #[test]
    fn the_class_selects_the_driver() {
        let class = device_class();
        let cel = &class.spec.selectors.unwrap()[0];
        assert_eq!(
            cel.cel.as_ref().unwrap().expression,
            "device.driver == \"netaccel.io\""
        );
    }
}
