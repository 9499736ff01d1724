//! The admission webhook's decisions, without I/O: parse an `AdmissionReview`
//! (`admission.k8s.io/v1`) from bytes, read what a Pod's annotations ask for, and
//! build the JSONPatch that records a binding in the Pod.
//!
//! The webhook (see `webhook`) does the binding in between: it is the only part that
//! talks to the registry. Everything here is a function of its input, so it is tested
//! with hostile bodies (`tests` below feeds it mutated and truncated reviews) and can
//! never panic on what the API server — or anyone reaching the port — sends.

use std::collections::BTreeMap;

use ::kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, Pod, SecretKeySelector};
use serde_json::{json, Value};

use crate::model::{check_name, BACKENDS, TEXT_BYTES_MAX};

/// The accelerator the Pod needs (required: without it the webhook leaves the Pod alone).
pub const ACCELERATOR: &str = "netaccel.io/accelerator";
/// The accelerator's build (optional).
pub const HASH: &str = "netaccel.io/hash";
/// Backend (`cpu`, `opencl`, `rtl`) and vendor the slot must have (optional).
pub const BACKEND: &str = "netaccel.io/backend";
pub const VENDOR: &str = "netaccel.io/vendor";
/// `"false"`: the Pod may run on any Kubernetes node; default `"true"`: on the node
/// that holds its slot, so the shared-memory path works.
pub const COLOCATE: &str = "netaccel.io/colocate";
/// The function the Pod is an instance of (default: its controller's name).
pub const FUNCTION: &str = "netaccel.io/function";
/// Written by the webhook: the instance bound for the Pod.
pub const INSTANCE: &str = "netaccel.io/instance";
/// Written by the webhook: the netaccel node the instance was bound on.
pub const NODE: &str = "netaccel.io/node";
/// The tenant the Pod's containers call as (`NETACCEL_TENANT`; optional).
pub const TENANT: &str = "netaccel.io/tenant";
/// A Secret of the Pod's namespace whose key `token` is the tenant's token: the
/// containers get it as `NETACCEL_TENANT_TOKEN` through a `secretKeyRef`, resolved by
/// the kubelet (the webhook never reads it). Needs [`TENANT`].
pub const TENANT_TOKEN_SECRET: &str = "netaccel.io/tenant-token-secret";
/// The key of the tenant's Secret that holds the token (as the DRA plugin reads it).
pub const TENANT_TOKEN_KEY: &str = "token";
/// The node selector the webhook sets: a netaccel node's name is its Kubernetes
/// node's name (`kubernetes.io/hostname`).
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// Instance ids the webhook mints start with this, so the Pod watcher knows which
/// instances stand for Pods (and may release them when their Pod is gone).
pub const INSTANCE_PREFIX: &str = "k8s-";

/// Why a review cannot be read at all: the webhook answers `400` with this sentence.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub String);

/// Parses an AdmissionReview of a Pod. Anything but a v1 review with a request is
/// [`Malformed`].
pub fn parse_review(body: &[u8]) -> Result<AdmissionRequest<Pod>, Malformed> {
    let review: AdmissionReview<Pod> = serde_json::from_slice(body)
        .map_err(|e| Malformed(format!("not an AdmissionReview of a Pod: {e}")))?;
    if review.types.api_version != "admission.k8s.io/v1" || review.types.kind != "AdmissionReview" {
        return Err(Malformed(format!(
            "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got {:?} {:?}",
            review.types.api_version, review.types.kind
        )));
    }
    let request: AdmissionRequest<Pod> = review
        .try_into()
        .map_err(|_| Malformed("the AdmissionReview has no request".to_string()))?;
    if request.uid.is_empty() {
        return Err(Malformed(
            "the AdmissionReview's request has no uid".to_string(),
        ));
    }
    Ok(request)
}

/// What a Pod's annotations ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    pub function: String,
    pub accelerator: String,
    pub hash: Option<String>,
    pub backend: Option<String>,
    pub vendor: Option<String>,
    pub colocate: bool,
    /// The node the Pod is already pinned to (its `kubernetes.io/hostname` selector),
    /// tried first.
    pub pinned: Option<String>,
    /// Who its containers call as.
    pub tenant: Option<Tenant>,
}

/// A Pod's tenant, from its annotations: the name, and the Secret of its token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenant {
    pub name: String,
    pub token_secret: Option<String>,
}

/// The tenant `pod`'s annotations name ([`TENANT`], [`TENANT_TOKEN_SECRET`]), if any;
/// a reason when they cannot be honoured.
pub fn tenant_of(pod: &Pod) -> Result<Option<Tenant>, String> {
    let annotations = pod.metadata.annotations.as_ref();
    let get = |key: &str| annotations.and_then(|a| a.get(key));
    let secret = get(TENANT_TOKEN_SECRET);
    let Some(name) = get(TENANT) else {
        return match secret {
            Some(_) => Err(format!(
                "annotation {TENANT_TOKEN_SECRET} needs {TENANT}: the tenant the token is for"
            )),
            None => Ok(None),
        };
    };
    check_name(TENANT, name)?;
    if let Some(secret) = secret {
        check_name(TENANT_TOKEN_SECRET, secret)?;
    }
    Ok(Some(Tenant {
        name: name.clone(),
        token_secret: secret.cloned(),
    }))
}

/// What the webhook does with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not a Pod creation asking for an accelerator: allowed unchanged.
    Ignore,
    /// Refused with this reason (annotations that cannot be honoured).
    Deny(String),
    /// Bind an instance for this.
    Bind(Ask),
}

/// Reads the request: which Pods the webhook acts on and what they ask for.
pub fn ask(request: &AdmissionRequest<Pod>) -> Verdict {
    if request.operation != Operation::Create {
        return Verdict::Ignore;
    }
    match &request.object {
        Some(pod) => ask_pod(pod),
        None => Verdict::Ignore,
    }
}

/// What `pod` asks for (also used for a Deployment's Pod template).
pub fn ask_pod(pod: &Pod) -> Verdict {
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let Some(accelerator) = annotations.get(ACCELERATOR) else {
        return Verdict::Ignore;
    };
    match read_ask(pod, &annotations, accelerator) {
        Ok(ask) => Verdict::Bind(ask),
        Err(reason) => Verdict::Deny(reason),
    }
}

fn read_ask(
    pod: &Pod,
    annotations: &BTreeMap<String, String>,
    accelerator: &str,
) -> Result<Ask, String> {
    check_name(ACCELERATOR, accelerator)?;
    let text = |key: &str| -> Result<Option<String>, String> {
        match annotations.get(key) {
            None => Ok(None),
            Some(v) if v.is_empty() || v.len() > TEXT_BYTES_MAX => Err(format!(
                "annotation {key} must be 1 to {TEXT_BYTES_MAX} bytes long"
            )),
            Some(v) if v.chars().any(char::is_control) => {
                Err(format!("annotation {key} contains a control character"))
            }
            Some(v) => Ok(Some(v.clone())),
        }
    };
    let backend = text(BACKEND)?;
    if let Some(b) = &backend {
        if !BACKENDS.contains(&b.as_str()) {
            return Err(format!(
                "annotation {BACKEND} {b:?} is not one of {}",
                BACKENDS.join(", ")
            ));
        }
    }
    let colocate = match annotations.get(COLOCATE).map(String::as_str) {
        None | Some("true") => true,
        Some("false") => false,
        Some(other) => {
            return Err(format!(
                "annotation {COLOCATE} is {other:?}: \"true\" or \"false\""
            ))
        }
    };
    let function = match annotations.get(FUNCTION) {
        Some(f) => f.clone(),
        None => function_of(pod).ok_or_else(|| {
            format!("the Pod has no name, generateName or controller to name its function; set {FUNCTION}")
        })?,
    };
    check_name("function", &function).map_err(|e| format!("{e} (set {FUNCTION})"))?;
    let pinned = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .and_then(|s| s.get(HOSTNAME_LABEL))
        .filter(|n| check_name("node", n).is_ok())
        .cloned();
    Ok(Ask {
        function,
        accelerator: accelerator.to_string(),
        hash: text(HASH)?,
        backend,
        vendor: text(VENDOR)?,
        colocate,
        pinned,
        tenant: tenant_of(pod)?,
    })
}

/// The function a Pod is an instance of: its controller's name — the Deployment's for
/// a ReplicaSet a Deployment made (the ReplicaSet's name less `-<pod-template-hash>`,
/// so a rollout stays the same function) — or else its own name.
pub fn function_of(pod: &Pod) -> Option<String> {
    let meta = &pod.metadata;
    if let Some(owner) = meta
        .owner_references
        .as_ref()
        .and_then(|o| o.iter().find(|o| o.controller == Some(true)))
    {
        let hash = meta
            .labels
            .as_ref()
            .and_then(|l| l.get("pod-template-hash"));
        if owner.kind == "ReplicaSet" {
            if let Some(deployment) =
                hash.and_then(|h| owner.name.strip_suffix(h.as_str())?.strip_suffix('-'))
            {
                return Some(deployment.to_string());
            }
        }
        return Some(owner.name.clone());
    }
    meta.name
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            meta.generate_name
                .as_ref()
                .map(|g| g.trim_end_matches('-').to_string())
        })
        .filter(|n| !n.is_empty())
}

/// The instance id for an admission request: its uid is unique per request, and a
/// retried request binds the same instance again (posting an existing id is harmless).
pub fn instance_id(request_uid: &str) -> Result<String, String> {
    let id = format!("{INSTANCE_PREFIX}{request_uid}");
    check_name("instance id", &id)?;
    Ok(id)
}

/// Where an instance is bound, as the registry's binding document says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub id: String,
    pub function: String,
    pub node: String,
    pub http: String,
    pub rac: String,
    pub opencl: Option<String>,
    /// The node's TLS and gRPC listeners, when it registered them.
    pub https: Option<String>,
    pub rac_tls: Option<String>,
    pub grpc: Option<String>,
    pub grpc_tls: Option<String>,
}

impl Binding {
    /// Reads a binding document (`GET …/instances/{id}`); `None` when it is not bound.
    pub fn from_json(v: &Value) -> Option<Binding> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Some(Binding {
            id: s("id")?,
            function: s("function")?,
            node: s("node")?,
            http: s("http")?,
            rac: s("rac")?,
            opencl: s("opencl"),
            https: s("https"),
            rac_tls: s("rac_tls"),
            grpc: s("grpc"),
            grpc_tls: s("grpc_tls"),
        })
    }

    /// The environment every container gets.
    pub fn env(&self, registry_url: &str) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("NETACCEL_REGISTRY", registry_url.to_string()),
            ("NETACCEL_FUNCTION", self.function.clone()),
            ("NETACCEL_INSTANCE", self.id.clone()),
            ("NETACCEL_NODE_HTTP", self.http.clone()),
            ("NETACCEL_NODE_RAC", self.rac.clone()),
        ];
        let optional = [
            ("NETACCEL_OPENCL_NODES", &self.opencl),
            ("NETACCEL_NODE_HTTPS", &self.https),
            ("NETACCEL_NODE_RAC_TLS", &self.rac_tls),
            ("NETACCEL_NODE_GRPC", &self.grpc),
            ("NETACCEL_NODE_GRPC_TLS", &self.grpc_tls),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                env.push((name, value.clone()));
            }
        }
        env
    }
}

/// Every container's variables: the binding's, then the tenant's (its name, and its
/// token from its Secret through the kubelet).
fn environment(binding: &Binding, registry_url: &str, tenant: Option<&Tenant>) -> Vec<EnvVar> {
    let mut env: Vec<EnvVar> = binding
        .env(registry_url)
        .into_iter()
        .map(|(name, value)| EnvVar {
            name: name.to_string(),
            value: Some(value),
            value_from: None,
        })
        .collect();
    if let Some(tenant) = tenant {
        env.push(EnvVar {
            name: "NETACCEL_TENANT".to_string(),
            value: Some(tenant.name.clone()),
            value_from: None,
        });
        if let Some(secret) = &tenant.token_secret {
            env.push(EnvVar {
                name: "NETACCEL_TENANT_TOKEN".to_string(),
                value: None,
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: secret.clone(),
                        key: TENANT_TOKEN_KEY.to_string(),
                        optional: None,
                    }),
                    ..Default::default()
                }),
            });
        }
    }
    env
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// The patch recording `binding` in `pod`: the annotations `netaccel.io/instance` and
/// `netaccel.io/node`, the label `netaccel.io/instance` (which the Pod watcher selects
/// on), the environment in every container (and init container) — `tenant`'s name and
/// its token's `secretKeyRef` included — and, when colocated, the node selector of the
/// slot's node. Variables a container already sets are left as the Pod's author set
/// them.
pub fn patch(
    pod: &Pod,
    binding: &Binding,
    registry_url: &str,
    colocate: bool,
    tenant: Option<&Tenant>,
) -> Patch {
    let mut ops = Vec::new();
    let annotations = pod.metadata.annotations.as_ref();
    if annotations.is_none() {
        ops.push(add(
            PointerBuf::from_tokens(["metadata", "annotations"]),
            json!({}),
        ));
    }
    for (key, value) in [(INSTANCE, &binding.id), (NODE, &binding.node)] {
        ops.push(add(
            PointerBuf::from_tokens(["metadata", "annotations", key]),
            Value::String(value.clone()),
        ));
    }
    if pod.metadata.labels.is_none() {
        ops.push(add(
            PointerBuf::from_tokens(["metadata", "labels"]),
            json!({}),
        ));
    }
    ops.push(add(
        PointerBuf::from_tokens(["metadata", "labels", INSTANCE]),
        Value::String(binding.id.clone()),
    ));
    let env = environment(binding, registry_url, tenant);
    if let Some(spec) = &pod.spec {
        let lists = [
            ("containers", Some(&spec.containers)),
            ("initContainers", spec.init_containers.as_ref()),
        ];
        for (list, containers) in lists {
            for (i, container) in containers.into_iter().flatten().enumerate() {
                let index = i.to_string();
                let existing = container.env.as_deref().unwrap_or_default();
                let missing: Vec<Value> = env
                    .iter()
                    .filter(|var| !existing.iter().any(|e| e.name == var.name))
                    .map(|var| serde_json::to_value(var).expect("an EnvVar serialises"))
                    .collect();
                if container.env.is_none() {
                    ops.push(add(
                        PointerBuf::from_tokens(["spec", list, &index, "env"]),
                        Value::Array(missing),
                    ));
                } else {
                    for var in missing {
                        ops.push(add(
                            PointerBuf::from_tokens(["spec", list, &index, "env", "-"]),
                            var,
                        ));
                    }
                }
            }
        }
        if colocate {
            if spec.node_selector.is_none() {
                ops.push(add(
                    PointerBuf::from_tokens(["spec", "nodeSelector"]),
                    json!({}),
                ));
            }
            ops.push(add(
                PointerBuf::from_tokens(["spec", "nodeSelector", HOSTNAME_LABEL]),
                Value::String(binding.node.clone()),
            ));
        }
    }
    Patch(ops)
}

#[cfg(test)]
mod tests;
