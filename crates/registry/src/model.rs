//! The registry's objects: what is persisted in the store (records), what clients send
//! (request bodies) and how both are validated.
//!
//! Records hold only what cannot be observed again: which nodes exist and what their
//! slots hold, which functions exist and where each instance is bound. How busy a slot
//! is and when a lease ends are soft state, rebuilt from the nodes' next lease renewal
//! (within a third of a lease), so a renewal that only reports new busy ratios writes
//! nothing to the store.
//!
//! Every body is parsed with unknown fields refused and then checked by `validate`,
//! whose errors are sentences a user can act on.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// Longest name of a node, device, function, instance or accelerator.
pub const NAME_BYTES_MAX: usize = 128;
/// Longest free-text field (vendor, platform, hash).
pub const TEXT_BYTES_MAX: usize = 256;
/// Devices one node may register.
pub const DEVICES_PER_NODE_MAX: usize = 64;
/// Slots one node may register, over all its devices.
pub const SLOTS_PER_NODE_MAX: usize = 1024;
/// Accelerators one device may list as loadable.
pub const CATALOG_MAX: usize = 1024;
/// The backends a device can have.
pub const BACKENDS: [&str; 3] = ["cpu", "opencl", "rtl"];

/// Checks a name: 1..=128 bytes of ASCII letters, digits, `.`, `_` and `-`, so it is
/// safe in a URL path, a metric label and a store key without escaping.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(format!(
            "{what} must be 1 to {NAME_BYTES_MAX} bytes long, got {}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "{what} {name:?} has {c:?}: only letters, digits, '.', '_' and '-' are allowed"
        ));
    }
    Ok(())
}

fn check_text(what: &str, text: &str) -> Result<(), String> {
    if text.len() > TEXT_BYTES_MAX {
        return Err(format!("{what} is longer than {TEXT_BYTES_MAX} bytes"));
    }
    if text.chars().any(char::is_control) {
        return Err(format!("{what} contains a control character"));
    }
    Ok(())
}

fn check_addr(what: &str, addr: &SocketAddr) -> Result<(), String> {
    if addr.ip().is_unspecified() || addr.port() == 0 {
        return Err(format!(
            "{what} {addr} is not an address other hosts can reach (advertise the node's own IP and port)"
        ));
    }
    Ok(())
}

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

    fn validate(&self) -> Result<(), String> {
        for (name, addr) in self.fields() {
            if let Some(a) = &addr {
                check_addr(name, a)?;
            }
        }
        Ok(())
    }

    /// Adds the fields to a JSON document (`null` for a front end the node lacks), as
    /// node and binding documents give them.
    pub fn write_json(this: Option<&Extra>, doc: &mut serde_json::Map<String, serde_json::Value>) {
        for (name, addr) in this.copied().unwrap_or_default().fields() {
            doc.insert(name.into(), serde_json::json!(addr.map(|a| a.to_string())));
        }
    }
}

/// Whether a node holds a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    Ready,
    Lost,
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
    pub id: u32,
    pub accelerator: String,
    pub hash: String,
}

/// Constraints a function puts on the slots its instances may use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Query {
    pub backend: Option<String>,
    pub vendor: Option<String>,
    pub node: Option<String>,
}

impl Query {
    fn validate(&self) -> Result<(), String> {
        if let Some(b) = &self.backend {
            if !BACKENDS.contains(&b.as_str()) {
                return Err(format!(
                    "query.backend {b:?} is not one of {}",
                    BACKENDS.join(", ")
                ));
            }
        }
        if let Some(v) = &self.vendor {
            check_text("query.vendor", v)?;
        }
        if let Some(n) = &self.node {
            check_name("query.node", n)?;
        }
        Ok(())
    }
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
    pub slot: u32,
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

// ---- request bodies ----

/// `PUT /v1/nodes/{name}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeRegistration {
    pub http: SocketAddr,
    pub rac: SocketAddr,
    #[serde(default)]
    pub opencl: Option<SocketAddr>,
    #[serde(default)]
    pub https: Option<SocketAddr>,
    #[serde(default)]
    pub rac_tls: Option<SocketAddr>,
    #[serde(default)]
    pub grpc: Option<SocketAddr>,
    #[serde(default)]
    pub grpc_tls: Option<SocketAddr>,
    pub devices: Vec<DeviceRegistration>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceRegistration {
    pub id: String,
    pub backend: String,
    #[serde(default)]
    pub vendor: String,
    #[serde(default)]
    pub platform: String,
    /// Extension: the accelerators the device can load (absent: any).
    #[serde(default)]
    pub accelerators: Option<Vec<String>>,
    pub slots: Vec<SlotRegistration>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotRegistration {
    pub id: u32,
    pub accelerator: String,
    #[serde(default)]
    pub hash: String,
    #[serde(default)]
    pub busy_ratio: f64,
    #[serde(default)]
    pub queue_depth: u32,
}

impl NodeRegistration {
    pub fn validate(&self) -> Result<(), String> {
        check_addr("http", &self.http)?;
        check_addr("rac", &self.rac)?;
        if let Some(a) = &self.opencl {
            check_addr("opencl", a)?;
        }
        self.extra().validate()?;
        if self.devices.len() > DEVICES_PER_NODE_MAX {
            return Err(format!(
                "{} devices: a node may register at most {DEVICES_PER_NODE_MAX}",
                self.devices.len()
            ));
        }
        let slots: usize = self.devices.iter().map(|d| d.slots.len()).sum();
        if slots > SLOTS_PER_NODE_MAX {
            return Err(format!(
                "{slots} slots: a node may register at most {SLOTS_PER_NODE_MAX}"
            ));
        }
        let mut devices = BTreeSet::new();
        let mut slot_ids = BTreeSet::new();
        for d in &self.devices {
            check_name("device id", &d.id)?;
            if !devices.insert(d.id.as_str()) {
                return Err(format!("device {} is listed twice", d.id));
            }
            if !BACKENDS.contains(&d.backend.as_str()) {
                return Err(format!(
                    "device {}: backend {:?} is not one of {}",
                    d.id,
                    d.backend,
                    BACKENDS.join(", ")
                ));
            }
            check_text("vendor", &d.vendor)?;
            check_text("platform", &d.platform)?;
            if let Some(catalog) = &d.accelerators {
                if catalog.len() > CATALOG_MAX {
                    return Err(format!(
                        "device {}: more than {CATALOG_MAX} accelerators",
                        d.id
                    ));
                }
                for a in catalog {
                    check_name("accelerator", a)?;
                }
            }
            for s in &d.slots {
                if !slot_ids.insert(s.id) {
                    return Err(format!(
                        "slot {} is listed twice (slot ids are unique within a node)",
                        s.id
                    ));
                }
                check_name("accelerator", &s.accelerator)?;
                check_text("hash", &s.hash)?;
                if !(0.0..=1.0).contains(&s.busy_ratio) {
                    return Err(format!(
                        "slot {}: busy_ratio {} is not between 0 and 1",
                        s.id, s.busy_ratio
                    ));
                }
            }
        }
        Ok(())
    }

    /// The optional front ends it registers.
    pub fn extra(&self) -> Extra {
        Extra {
            https: self.https,
            rac_tls: self.rac_tls,
            grpc: self.grpc,
            grpc_tls: self.grpc_tls,
        }
    }

    /// The record this registration describes, for a node named `name`.
    pub fn record(&self, name: &str) -> NodeRecord {
        NodeRecord {
            name: name.to_string(),
            http: self.http,
            rac: self.rac,
            opencl: self.opencl,
            extra: self.extra(),
            state: NodeState::Ready,
            devices: self
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
}

fn default_instances() -> u32 {
    1
}

/// `PUT /v1/functions/{name}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    pub accelerator: String,
    #[serde(default)]
    pub hash: Option<String>,
    #[serde(default)]
    pub query: Query,
    #[serde(default = "default_instances")]
    pub instances: u32,
}

impl FunctionSpec {
    pub fn validate(&self) -> Result<(), String> {
        check_name("accelerator", &self.accelerator)?;
        if let Some(h) = &self.hash {
            if h.is_empty() {
                return Err("hash is empty: leave it null to accept any build".to_string());
            }
            check_text("hash", h)?;
        }
        self.query.validate()
    }

    pub fn record(&self, name: &str) -> FunctionRecord {
        FunctionRecord {
            name: name.to_string(),
            accelerator: self.accelerator.clone(),
            hash: self.hash.clone(),
            query: self.query.clone(),
        }
    }
}

/// `POST /v1/functions/{name}/instances`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InstanceSpec {
    pub id: Option<String>,
    /// Preferred node: tried first, others when it has no room.
    pub node: Option<String>,
}

impl InstanceSpec {
    pub fn validate(&self) -> Result<(), String> {
        if let Some(id) = &self.id {
            check_name("instance id", id)?;
        }
        if let Some(n) = &self.node {
            check_name("node", n)?;
        }
        Ok(())
    }
}

/// `POST /v1/reconfigurations`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconfigurationRequest {
    pub node: String,
    pub device: String,
    pub slot: u32,
    pub accelerator: String,
    #[serde(default)]
    pub instance: Option<String>,
}

impl ReconfigurationRequest {
    pub fn validate(&self) -> Result<(), String> {
        check_name("node", &self.node)?;
        check_name("device", &self.device)?;
        check_name("accelerator", &self.accelerator)?;
        if let Some(i) = &self.instance {
            check_name("instance", i)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration(json: &str) -> Result<NodeRegistration, String> {
        let r: NodeRegistration = serde_json::from_str(json).map_err(|e| e.to_string())?;
        r.validate()?;
        Ok(r)
    }

    #[test]
    fn names_are_url_and_label_safe() {
        assert!(check_name("node", "node-1.a_b").is_ok());
        assert!(check_name("node", "").is_err());
        assert!(check_name("node", &"x".repeat(NAME_BYTES_MAX + 1)).is_err());
        let err = check_name("node", "a/b").unwrap_err();
        assert!(err.contains("'/'"), "{err}");
        assert!(check_name("node", "a b").is_err());
        assert!(check_name("node", "é").is_err());
    }

    #[test]
    fn registrations_are_validated() {
        let ok = r#"{"http":"127.0.0.1:8080","rac":"127.0.0.1:9400","opencl":null,
            "devices":[{"id":"cpu0","backend":"cpu","vendor":"v","platform":"p",
            "slots":[{"id":0,"accelerator":"sobel","hash":"h","busy_ratio":0.5,"queue_depth":1}]}]}"#;
        let old = registration(ok).unwrap();
        assert!(
            old.extra().is_empty(),
            "a node that sends none registers without them"
        );
        let tls = ok.replace(
            r#""opencl":null,"#,
            r#""opencl":null,"https":"127.0.0.1:8443","rac_tls":"127.0.0.1:9443",
            "grpc":"127.0.0.1:8001","grpc_tls":null,"#,
        );
        let r = registration(&tls).unwrap();
        assert_eq!(r.extra().https, Some("127.0.0.1:8443".parse().unwrap()));
        assert_eq!(r.extra().rac_tls, Some("127.0.0.1:9443".parse().unwrap()));
        assert_eq!(r.extra().grpc, Some("127.0.0.1:8001".parse().unwrap()));
        assert_eq!(r.extra().grpc_tls, None);
        // Persisted: an old record (no fields) reads as none; a record without them
        // writes none, so it reads the same to an older registry.
        let record = r.record("n");
        let text = serde_json::to_string(&record).unwrap();
        assert_eq!(serde_json::from_str::<NodeRecord>(&text).unwrap(), record);
        let plain = old.record("n");
        let text = serde_json::to_string(&plain).unwrap();
        assert!(!text.contains("extra"), "{text}");
        assert_eq!(serde_json::from_str::<NodeRecord>(&text).unwrap(), plain);
        let cases = [
            (tls.replace("127.0.0.1:9443", "0.0.0.0:9443"), "rac_tls"),
            (tls.replace("127.0.0.1:8001", "127.0.0.1:0"), "grpc"),
            (ok.replace("127.0.0.1:8080", "0.0.0.0:8080"), "reach"),
            (ok.replace("\"cpu\"", "\"fpga\""), "backend"),
            (ok.replace("0.5", "1.5"), "busy_ratio"),
            (ok.replace("\"sobel\"", "\"so bel\""), "accelerator"),
            (ok.replace("\"queue_depth\"", "\"queue\""), "unknown field"),
            (
                ok.replace(
                    r#""slots":[{"id":0"#,
                    r#""slots":[{"id":0,"accelerator":"a"},{"id":0"#,
                ),
                "twice",
            ),
        ];
        for (body, want) in cases {
            let err = registration(&body).unwrap_err();
            assert!(err.contains(want), "{body}: {err}");
        }
    }

    #[test]
    fn functions_are_validated() {
        let spec: FunctionSpec = serde_json::from_str(r#"{"accelerator":"sobel"}"#).unwrap();
        assert_eq!(spec.instances, 1);
        assert_eq!(spec.query, Query::default());
        spec.validate().unwrap();
        let bad: FunctionSpec =
            serde_json::from_str(r#"{"accelerator":"sobel","query":{"backend":"gpu"}}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("query.backend"));
        let bad: FunctionSpec =
            serde_json::from_str(r#"{"accelerator":"sobel","hash":""}"#).unwrap();
        assert!(bad.validate().is_err());
        assert!(
            serde_json::from_str::<FunctionSpec>(r#"{"accelerator":"s","query":{"gpu":1}}"#)
                .is_err()
        );
    }
}
