//! Kubernetes (`netaccel-registry --kubernetes`): Pods get accelerators the way
//! BlastFunction gave them, through a mutating admission webhook, and the
//! kube-scheduler sees netaccel slots through Dynamic Resource Allocation.
//!
//! - [`admission`]: what a Pod's annotations ask for and the patch recording its
//!   binding — pure functions over the review's bytes;
//! - [`webhook`]: the HTTPS server the API server calls, which binds an instance with
//!   the registry's own allocation, and the `MutatingWebhookConfiguration` pointing at
//!   it (with its CA bundle);
//! - [`pods`]: the Pod watcher — instances of Pods that are gone are released, Pods
//!   whose instance a reconfiguration or a lost node moved are evicted (rate-limited)
//!   and bound anew; Deployments register their function;
//! - [`lease`]: with the memory store, replicas elect a leader through a Lease, and a
//!   new leader rebuilds the instances from the Pods;
//! - [`dra`]: the DeviceClass `netaccel.io` and one ResourceSlice per netaccel node,
//!   kept equal to the registry's slots;
//! - [`claims`]: the devices the scheduler allocated to ResourceClaims are pinned
//!   instances of the registry; claims whose device goes have their Pods evicted.
//!
//! Names. A netaccel node's `--name` is the name of the Kubernetes node it runs on
//! (the DaemonSet of the Helm chart passes `spec.nodeName`), so "the node holding the
//! slot" is the node selector `kubernetes.io/hostname: <name>`.
//!
//! Why a module and not its own crate: `--kubernetes` is a flag of the one registry
//! binary (the specification's command line), and the webhook calls the registry's
//! transactions directly; a separate crate would need a second binary or a cycle.

pub mod admission;
pub mod claims;
pub mod dra;
pub mod lease;
pub mod pods;
pub mod webhook;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::{Client, Config as KubeConfig};
use tracing::info;

use crate::registry::Registry;

/// The field manager of everything the registry writes to the API server.
pub const FIELD_MANAGER: &str = "netaccel-registry";

/// Where the API server reaches the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WebhookClient {
    /// `https://…/v1/admission/pods` (the registry outside the cluster, or tests).
    Url(String),
    /// A Service in front of the registry's Pods.
    Service {
        namespace: String,
        name: String,
        port: i32,
    },
}

/// `--kubernetes` and its options, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// None: in-cluster configuration, else `$KUBECONFIG` / `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    pub webhook: SocketAddr,
    /// Certificate and key files (PEM); None: self-signed for `webhook_hosts`.
    pub webhook_tls: Option<(PathBuf, PathBuf)>,
    pub webhook_hosts: Vec<String>,
    /// Name of the `MutatingWebhookConfiguration` the registry writes; None: it is
    /// managed elsewhere (cert-manager, the chart).
    pub webhook_configuration: Option<String>,
    pub webhook_client: Option<WebhookClient>,
    /// The registry's URL as Pods reach it (`NETACCEL_REGISTRY`).
    pub registry_url: String,
    pub eviction: pods::Eviction,
    /// The Lease election (None: the store elects, as etcd does).
    pub election: Option<lease::Election>,
}

/// Reads `--webhook-service NAMESPACE/NAME[:PORT]`.
pub fn parse_service(s: &str) -> Result<WebhookClient, String> {
    let bad = || format!("--webhook-service {s}: expected NAMESPACE/NAME[:PORT]");
    let (namespace, rest) = s.split_once('/').ok_or_else(bad)?;
    let (name, port) = match rest.split_once(':') {
        Some((n, p)) => (n, p.parse::<i32>().map_err(|_| bad())?),
        None => (rest, 443),
    };
    if namespace.is_empty() || name.is_empty() || !(1..=65535).contains(&port) {
        return Err(bad());
    }
    Ok(WebhookClient::Service {
        namespace: namespace.to_string(),
        name: name.to_string(),
        port,
    })
}

/// A client for the API server: from `kubeconfig` when given, else inferred
/// (in-cluster service account, `$KUBECONFIG`, `~/.kube/config`).
pub async fn client(kubeconfig: Option<&PathBuf>) -> Result<Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| format!("--kubeconfig {}: {e}", path.display()))?;
            KubeConfig::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("--kubeconfig {}: {e}", path.display()))?
        }
        None => KubeConfig::infer().await.map_err(|e| {
            format!("no Kubernetes configuration found (in-cluster or kubeconfig): {e}")
        })?,
    };
    Client::try_from(config).map_err(|e| format!("Kubernetes client: {e}"))
}

/// Starts what `--kubernetes` adds: the webhook (TLS, and its configuration in the
/// API server while this replica leads), the Lease election, the Pod watcher and the
/// publication of slots for DRA. Fails when the Kubernetes configuration cannot be
/// read or the webhook's port is taken.
pub async fn start(registry: Arc<Registry>, settings: Settings) -> Result<(), String> {
    let client = client(settings.kubeconfig.as_ref()).await?;
    let certificate = match &settings.webhook_tls {
        Some((cert, key)) => webhook::Certificate {
            cert_pem: std::fs::read_to_string(cert)
                .map_err(|e| format!("--webhook-cert {}: {e}", cert.display()))?,
            key_pem: std::fs::read_to_string(key)
                .map_err(|e| format!("--webhook-key {}: {e}", key.display()))?,
        },
        None => webhook::self_signed(&settings.webhook_hosts)?,
    };
    let tls = webhook::server_config(&certificate)?;
    let listener = webhook::bind_listener(settings.webhook).await?;
    info!(webhook = %listener.local_addr().map_err(|e| e.to_string())?, "admission webhook serving (HTTPS)");
    let claims = claims::watch(&client);
    let app = webhook::router(registry.clone(), &settings.registry_url, claims.clone());
    tokio::spawn(webhook::serve_tls(listener, tls, app));
    webhook::spawn_configuration(
        registry.clone(),
        client.clone(),
        settings.clone(),
        certificate.cert_pem.clone(),
    );
    if let Some(election) = settings.election.clone() {
        crate::follow::spawn(registry.clone(), election.identity.clone());
        lease::spawn(registry.clone(), client.clone(), election);
    }
    let bucket = Arc::new(std::sync::Mutex::new(pods::Bucket::new(
        settings.eviction.rate,
        std::time::Instant::now(),
    )));
    pods::spawn(
        registry.clone(),
        client.clone(),
        settings.eviction.clone(),
        bucket.clone(),
    );
    claims::spawn(
        registry.clone(),
        client.clone(),
        claims,
        settings.eviction.clone(),
        bucket,
    );
    dra::spawn(registry, client);
    Ok(())
}
