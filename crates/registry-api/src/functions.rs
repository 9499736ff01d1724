//! Functions and their instances: what a client asks for (`PUT /v1/functions/{name}`,
//! `POST …/instances`) and what it reads back (a function with its instances, and an
//! instance's binding, which the long poll `GET …/instances/{id}?after=G` answers).

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::names::{check_name, check_text};
use crate::nodes::BACKENDS;
use crate::{Generation, SlotId};

/// Constraints a function puts on the slots its instances may use (`null`: any).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Query {
    pub backend: Option<String>,
    pub vendor: Option<String>,
    pub node: Option<String>,
}

impl Query {
    pub fn validate(&self) -> Result<(), String> {
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

fn default_instances() -> u32 {
    1
}

/// `PUT /v1/functions/{name}`: creates or updates a function and scales it to
/// `instances` (absent: 1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    pub accelerator: String,
    /// The build of the accelerator required (`null`: any).
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
}

/// A function as `GET /v1/functions[/{name}]` and `PUT` answer it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionView {
    pub name: String,
    pub accelerator: String,
    pub hash: Option<String>,
    pub query: Query,
    pub instances: Vec<Binding>,
}

impl FunctionView {
    /// The spec that keeps this function as it is, with `instances` instances.
    pub fn spec(&self, instances: u32) -> FunctionSpec {
        FunctionSpec {
            accelerator: self.accelerator.clone(),
            hash: self.hash.clone(),
            query: self.query.clone(),
            instances,
        }
    }
}

/// `POST /v1/functions/{name}/instances` (an empty body is the default: a new
/// instance, placed anywhere).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InstanceSpec {
    /// Use this id (answers the instance if it exists, creates it otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Preferred node: tried first, others when it has no room.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// `POST /v1/functions/{name}/instances/{id}/unreachable`: a client could not reach
/// the node of the instance's binding `generation` (no connection, or no answer within
/// its bound), though the registry may still reach it. The registry moves the instance
/// to a slot on another node if that binding is still current; the answer is the
/// instance's binding then.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnreachableReport {
    pub generation: u64,
}

/// `GET /v1/tenants`: the tenants every node started with `tenants_from_registry`
/// applies — `tenants` is the tenants part of a node's configuration as JSON
/// (`anonymous`, `tenants`, `anonymous_quota`, in the node's own syntax: the node is
/// where it is checked), `revision` changes whenever it does (also the `ETag`; a
/// request with `If-None-Match` and the same revision is answered `304`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeTenants {
    pub revision: String,
    pub tenants: serde_json::Value,
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

/// An instance and where it is bound: the node, device and slot, and every address of
/// that node a caller may use (`null` while unbound, and for a front end the node
/// lacks).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub id: String,
    pub function: String,
    pub node: Option<String>,
    pub device: Option<String>,
    pub slot: Option<SlotId>,
    pub http: Option<SocketAddr>,
    pub rac: Option<SocketAddr>,
    pub opencl: Option<SocketAddr>,
    pub https: Option<SocketAddr>,
    pub rac_tls: Option<SocketAddr>,
    pub grpc: Option<SocketAddr>,
    pub grpc_tls: Option<SocketAddr>,
    pub generation: Generation,
    /// Bound where someone else decided (a DRA claim): the registry never moves it.
    /// Sent only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
}

impl Binding {
    /// Reads a binding document (`POST …/instances`, `GET …/instances/{id}`).
    pub fn from_json(doc: &serde_json::Value) -> Result<Binding, serde_json::Error> {
        Binding::deserialize(doc)
    }

    /// Whether the instance is bound to a slot of a node.
    pub fn is_bound(&self) -> bool {
        self.node.is_some() && self.slot.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn instance_specs_send_only_what_is_asked() {
        assert_eq!(
            serde_json::to_string(&InstanceSpec::default()).unwrap(),
            "{}"
        );
        let spec = InstanceSpec {
            id: Some("a/b".into()),
            node: None,
        };
        assert!(spec.validate().is_err());
    }
}
