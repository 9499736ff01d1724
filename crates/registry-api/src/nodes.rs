//! Nodes: what a node registers (`PUT /v1/nodes/{name}`), the lease it is granted,
//! and how clients see nodes (`GET /v1/nodes`).

use std::collections::BTreeSet;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::names::{check_name, check_text};
use crate::SlotId;

/// Devices one node may register.
pub const DEVICES_PER_NODE_MAX: usize = 64;
/// Slots one node may register, over all its devices.
pub const SLOTS_PER_NODE_MAX: usize = 1024;
/// Accelerators one device may list as loadable.
pub const CATALOG_MAX: usize = 1024;
/// The backends a device can have.
pub const BACKENDS: [&str; 3] = ["cpu", "opencl", "rtl"];

/// `PUT /v1/nodes/{name}`: the node's addresses (where other hosts reach each of its
/// front ends; `null` for one it lacks) and its devices. Sent again to renew the lease.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceRegistration {
    pub id: String,
    pub backend: String,
    #[serde(default)]
    pub vendor: String,
    #[serde(default)]
    pub platform: String,
    /// The accelerators the device can load (absent or `null`: any; sent only when
    /// there is a list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerators: Option<Vec<String>>,
    pub slots: Vec<SlotRegistration>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotRegistration {
    pub id: SlotId,
    pub accelerator: String,
    #[serde(default)]
    pub hash: String,
    /// Share of the time since the previous report the slot spent executing, 0..=1.
    #[serde(default)]
    pub busy_ratio: f64,
    #[serde(default)]
    pub queue_depth: u32,
}

fn check_addr(what: &str, addr: &SocketAddr) -> Result<(), String> {
    if addr.ip().is_unspecified() || addr.port() == 0 {
        return Err(format!(
            "{what} {addr} is not an address other hosts can reach (advertise the node's own IP and port)"
        ));
    }
    Ok(())
}

impl NodeRegistration {
    /// The front ends beyond HTTP and RAC, by their JSON names.
    pub fn optional_addresses(&self) -> [(&'static str, Option<SocketAddr>); 5] {
        [
            ("opencl", self.opencl),
            ("https", self.https),
            ("rac_tls", self.rac_tls),
            ("grpc", self.grpc),
            ("grpc_tls", self.grpc_tls),
        ]
    }

    /// Checks what parsing cannot: reachable addresses, names, bounds, unique ids.
    pub fn validate(&self) -> Result<(), String> {
        check_addr("http", &self.http)?;
        check_addr("rac", &self.rac)?;
        for (name, addr) in self.optional_addresses() {
            if let Some(a) = &addr {
                check_addr(name, a)?;
            }
        }
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
            if !devices.insert(d.id.as_str()) {
                return Err(format!("device {} is listed twice", d.id));
            }
            d.validate(&mut slot_ids)?;
        }
        Ok(())
    }
}

impl DeviceRegistration {
    /// Checks the device; `slot_ids` collects the node's slot ids so far.
    fn validate(&self, slot_ids: &mut BTreeSet<SlotId>) -> Result<(), String> {
        check_name("device id", &self.id)?;
        if !BACKENDS.contains(&self.backend.as_str()) {
            return Err(format!(
                "device {}: backend {:?} is not one of {}",
                self.id,
                self.backend,
                BACKENDS.join(", ")
            ));
        }
        check_text("vendor", &self.vendor)?;
        check_text("platform", &self.platform)?;
        if let Some(catalog) = &self.accelerators {
            if catalog.len() > CATALOG_MAX {
                return Err(format!(
                    "device {}: more than {CATALOG_MAX} accelerators",
                    self.id
                ));
            }
            for a in catalog {
                check_name("accelerator", a)?;
            }
        }
        for s in &self.slots {
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
        Ok(())
    }
}

/// The answer to a registration: renew within a third of `lease_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrant {
    pub lease_ms: u64,
}

/// Whether a node holds a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    Ready,
    Lost,
}

/// One node of `GET /v1/nodes`: its state, its addresses (`null` for a front end it
/// lacks) and its devices.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    pub name: String,
    pub state: NodeState,
    pub http: SocketAddr,
    pub rac: SocketAddr,
    pub opencl: Option<SocketAddr>,
    pub https: Option<SocketAddr>,
    pub rac_tls: Option<SocketAddr>,
    pub grpc: Option<SocketAddr>,
    pub grpc_tls: Option<SocketAddr>,
    pub devices: Vec<DeviceView>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceView {
    pub id: String,
    pub backend: String,
    pub vendor: String,
    pub platform: String,
    /// `null`: the device can load any accelerator.
    pub accelerators: Option<Vec<String>>,
    pub slots: Vec<SlotView>,
}

/// A slot as the registry sees it: what it holds, how busy it is, who is bound.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlotView {
    pub id: SlotId,
    pub accelerator: String,
    pub hash: String,
    /// As the node last reported it.
    pub busy_ratio: f64,
    pub queue_depth: u32,
    /// As allocation counts it (0 for a released slot).
    pub utilization: f64,
    /// The accelerator the registry is loading into it, if any.
    pub reconfiguring: Option<String>,
    /// Unused long enough that allocation counts it as idle.
    pub released: bool,
    /// Ids of the instances bound to it.
    pub instances: Vec<String>,
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
    fn registrations_are_validated() {
        let ok = r#"{"http":"127.0.0.1:8080","rac":"127.0.0.1:9400","opencl":null,
            "https":"127.0.0.1:8443","rac_tls":"127.0.0.1:9443","grpc":"127.0.0.1:8001",
            "devices":[{"id":"cpu0","backend":"cpu","vendor":"v","platform":"p",
            "slots":[{"id":0,"accelerator":"sobel","hash":"h","busy_ratio":0.5,"queue_depth":1}]}]}"#;
        let r = registration(ok).unwrap();
        assert_eq!(r.grpc, Some("127.0.0.1:8001".parse().unwrap()));
        assert_eq!(r.grpc_tls, None);
        let cases = [
            (ok.replace("127.0.0.1:9443", "0.0.0.0:9443"), "rac_tls"),
            (ok.replace("127.0.0.1:8001", "127.0.0.1:0"), "grpc"),
            (ok.replace("127.0.0.1:8080", "0.0.0.0:8080"), "reach"),
            (ok.replace("\"cpu\"", "\"fpga\""), "backend"),
            (ok.replace("0.5", "1.5"), "busy_ratio"),
            (ok.replace("\"sobel\"", "\"so bel\""), "accelerator"),
            (ok.replace("\"queue_depth\"", "\"queue\""), "unknown field"),
            // The node's width: a slot id past u16 is refused where it is parsed.
            (ok.replace(r#""id":0"#, r#""id":65536"#), "invalid value"),
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
}
