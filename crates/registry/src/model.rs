//! The registry's persisted objects (records), and how a request body becomes one.
//! The bodies themselves (what clients send and read, and their validation) are the
//! `registry-api` crate's, re-exported here.
//!
//! Records hold only what cannot be observed again: which nodes exist and what their
//! slots hold, which functions exist and where each instance is bound. How busy a slot
//! is and when a lease ends are soft state, rebuilt from the nodes' next lease renewal
//! (within a third of a lease), so a renewal that only reports new busy ratios writes
//! nothing to the store.
//!
//! Every body is parsed with unknown fields refused and then checked by its
//! `validate`, whose errors are sentences a user can act on.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

pub use registry_api::names::{check_name, NAME_BYTES_MAX, TEXT_BYTES_MAX};
pub use registry_api::nodes::{
    DeviceRegistration, NodeRegistration, NodeState, SlotRegistration, BACKENDS, CATALOG_MAX,
    DEVICES_PER_NODE_MAX, SLOTS_PER_NODE_MAX,
};
pub use registry_api::{FunctionSpec, InstanceSpec, Query, ReconfigurationRequest, SlotId};

/// A node's optional front ends beyond HTTP, RAC and remote OpenCL: gRPC, and the TLS
/// listeners (HTTPS, RAC over TLS, gRPC over TLS), each where other hosts reach it.
/// A node that has one sends it when it registers; a node that sends none (one older
/// than these fields) registers as before, and clients see `null`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Extra {
    pub https: Option<SocketAddr>,
    pub rac_tls: Option<SocketAddr>,
    pub grpc: Option<SocketAddr>,
    pub grpc_tls: Option<SocketAddr>,
}

impl Extra {
    /// The fields by their JSON names, in the order documents list them.
    pub fn fields(&self) -> [(&'static str, Option<SocketAddr>); 4] {
        [
            ("https", self.https),
            ("rac_tls", self.rac_tls),
            ("grpc", self.grpc),
            ("grpc_tls", self.grpc_tls),
        ]
    }

    pub fn is_empty(&self) -> bool {
        self.fields().iter().all(|(_, a)| a.is_none())
    }
}

/// A node as persisted: its addresses and, per device, what each slot holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub name: String,
    pub http: SocketAddr,
    pub rac: SocketAddr,
    pub opencl: Option<SocketAddr>,
    /// The front ends a node may have beyond these (absent from records written
    /// before they were registered, and from nodes that have none).
    #[serde(default, skip_serializing_if = "Extra::is_empty")]
    pub extra: Extra,
    pub state: NodeState,
    pub devices: Vec<DeviceRecord>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceRecord {
    pub id: String,
    pub backend: String,
    pub vendor: String,
    pub platform: String,
    /// Accelerators the device can load; `None`: any (the node decides).
    pub accelerators: Option<Vec<String>>,
    pub slots: Vec<SlotRecord>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlotRecord {
    pub id: SlotId,
    pub accelerator: String,
    pub hash: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionRecord {
    pub name: String,
    pub accelerator: String,
    pub hash: Option<String>,
    pub query: Query,
}

impl FunctionRecord {
    /// Whether `other` needs the instances moved (what they need changed).
    pub fn placement_differs(&self, other: &FunctionRecord) -> bool {
        self.accelerator != other.accelerator
            || self.hash != other.hash
            || self.query != other.query
    }
}

/// A slot, named the way clients and nodes name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SlotRef {
    pub node: String,
    pub device: String,
    pub slot: SlotId,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstanceRecord {
    pub id: String,
    pub function: String,
    /// `None`: allocation found no slot yet (the rebalancer retries).
    pub binding: Option<SlotRef>,
    /// Bumped on every change of binding, so a client can wait for the next one.
    pub generation: u64,
    /// Bound where someone else decided (the kube-scheduler, through a DRA claim):
    /// the registry never moves it. When its slot goes or changes accelerator it is
    /// unbound, and whoever pinned it acts (the claim's Pods are evicted); a slot
    /// holding one is not reconfigured by allocation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
}

/// Registry-wide counters that must survive a failover.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Sequence number of the next generated instance id.
    pub next_instance: u64,
}

// ---- records of request bodies ----

/// The extra front ends a registration names.
pub fn extra_of(reg: &NodeRegistration) -> Extra {
    Extra {
        https: reg.https,
        rac_tls: reg.rac_tls,
        grpc: reg.grpc,
        grpc_tls: reg.grpc_tls,
    }
}

/// The record a registration describes, for a node named `name`.
pub fn node_record(reg: &NodeRegistration, name: &str) -> NodeRecord {
    NodeRecord {
        name: name.to_string(),
        http: reg.http,
        rac: reg.rac,
        opencl: reg.opencl,
        extra: extra_of(reg),
        state: NodeState::Ready,
        devices: reg
            .devices
            .iter()
            .map(|d| DeviceRecord {
                id: d.id.clone(),
                backend: d.backend.clone(),
                vendor: d.vendor.clone(),
                platform: d.platform.clone(),
                accelerators: d.accelerators.clone(),
                slots: d
                    .slots
                    .iter()
                    .map(|s| SlotRecord {
                        id: s.id,
                        accelerator: s.accelerator.clone(),
                        hash: s.hash.clone(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The record of a function spec, for a function named `name`.
pub fn function_record(spec: &FunctionSpec, name: &str) -> FunctionRecord {
    FunctionRecord {
        name: name.to_string(),
        accelerator: spec.accelerator.clone(),
        hash: spec.hash.clone(),
        query: spec.query.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration(json: &str) -> NodeRegistration {
        let r: NodeRegistration = serde_json::from_str(json).unwrap();
        r.validate().unwrap();
        r
    }

    #[test]
    fn records_keep_the_extra_front_ends_only_when_there_are_some() {
        let ok = r#"{"http":"127.0.0.1:8080","rac":"127.0.0.1:9400","opencl":null,
            "devices":[{"id":"cpu0","backend":"cpu","vendor":"v","platform":"p",
            "slots":[{"id":0,"accelerator":"sobel","hash":"h","busy_ratio":0.5,"queue_depth":1}]}]}"#;
        let old = registration(ok);
        assert!(
            extra_of(&old).is_empty(),
            "a node that sends none registers without them"
        );
        let tls = ok.replace(
            r#""opencl":null,"#,
            r#""opencl":null,"https":"127.0.0.1:8443","rac_tls":"127.0.0.1:9443",
            "grpc":"127.0.0.1:8001","grpc_tls":null,"#,
        );
        let r = registration(&tls);
        assert_eq!(extra_of(&r).https, Some("127.0.0.1:8443".parse().unwrap()));
        assert_eq!(extra_of(&r).grpc_tls, None);
        // Persisted: an old record (no fields) reads as none; a record without them
        // writes none, so it reads the same to an older registry.
        let record = node_record(&r, "n");
        let text = serde_json::to_string(&record).unwrap();
        assert_eq!(serde_json::from_str::<NodeRecord>(&text).unwrap(), record);
        let plain = node_record(&old, "n");
        let text = serde_json::to_string(&plain).unwrap();
        assert!(!text.contains("extra"), "{text}");
        assert_eq!(serde_json::from_str::<NodeRecord>(&text).unwrap(), plain);
    }
}
