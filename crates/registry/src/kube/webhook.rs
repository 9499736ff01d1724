//! The mutating admission webhook: `POST /v1/admission/pods` over HTTPS (rustls) on
//! its own port, and the `MutatingWebhookConfiguration` that sends the API server's
//! Pod creations to it.
//!
//! For a Pod that asks for an accelerator, the webhook registers the Pod's function
//! if it is new (the same record `PUT /v1/functions/{name}` makes), binds one instance
//! with the registry's allocation — reconfiguring a slot when that is what allocation
//! decides — and answers with the patch of `admission` (annotation, environment, node
//! selector). A Pod nothing can host is denied with allocation's reason, so
//! `kubectl` and the ReplicaSet's events say why. A Pod without the annotations that
//! uses a netaccel claim allocated already gets the environment of the claim's
//! instance (no node selector: the claim's own places the Pod). The decision is the
//! registry's own code path (`Registry::create_instance`), so the webhook and
//! `POST …/instances` cannot disagree.
//!
//! TLS. The API server only calls webhooks over HTTPS and checks the certificate
//! against the configuration's `caBundle`. Either the operator gives a certificate
//! (`--webhook-cert`/`--webhook-key`, e.g. from cert-manager) or the registry makes a
//! self-signed one at start for `--webhook-host` names, and — with
//! `--webhook-configuration` — writes it as the `caBundle` itself whenever it becomes
//! the leader (server-side apply, so a new leader or a restart with a new certificate
//! simply takes over the field). Only the leader can bind, so the configuration always
//! names the leader's certificate (and, with `--webhook-url`, its address).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ::kube::api::{Api, Patch as KubePatch, PatchParams};
use ::kube::core::admission::{AdmissionRequest, AdmissionResponse};
use ::kube::Client;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::ByteString;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};

use ::kube::runtime::reflector::{ObjectRef, Store};
use k8s_openapi::api::resource::v1::ResourceClaim;

use super::admission::{self, Ask, Binding, Verdict};
use super::claims::ClaimView;
use super::{Settings, WebhookClient, FIELD_MANAGER};
use crate::error::ApiError;
use crate::model::{FunctionRecord, InstanceSpec, Query};
use crate::ops::Created;
use crate::registry::Registry;

/// The route the API server posts reviews to.
pub const PATH: &str = "/v1/admission/pods";
/// Largest review accepted: a Pod may be up to etcd's 1.5 MiB, and a review of an
/// update carries two.
pub const BODY_BYTES_MAX: usize = 4 << 20;
/// Connections served at once (the API server keeps a few alive per replica).
pub const CONNECTIONS_MAX: usize = 256;
/// A client has this long to finish the TLS handshake and send a request head.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Name of the one webhook in the configuration.
pub const WEBHOOK_NAME: &str = "pods.netaccel.io";

#[derive(Clone)]
struct Hook {
    registry: Arc<Registry>,
    registry_url: Arc<str>,
    /// The ResourceClaims, as the claim loop watches them.
    claims: Store<ResourceClaim>,
}

/// The webhook's routes.
pub fn router(registry: Arc<Registry>, registry_url: &str, claims: Store<ResourceClaim>) -> Router {
    Router::new()
        .route(PATH, post(review))
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .fallback(|| async { ApiError::not_found("no such route") })
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .with_state(Hook {
            registry,
            registry_url: registry_url.into(),
            claims,
        })
}

async fn review(State(hook): State<Hook>, body: Bytes) -> Response {
    let request = match admission::parse_review(&body) {
        Ok(r) => r,
        Err(admission::Malformed(why)) => {
            return ApiError::bad_request(why).into_response();
        }
    };
    // Bound in its own task: the API server giving up on the call must not cancel a
    // binding between the registry's allocation and its commit.
    let task = tokio::spawn(async move { decide(&hook, &request).await });
    match task.await {
        Ok(response) => (StatusCode::OK, Json(response.into_review())).into_response(),
        Err(e) => ApiError::internal(format!("the admission task failed: {e}")).into_response(),
    }
}

async fn decide(hook: &Hook, request: &AdmissionRequest<Pod>) -> AdmissionResponse {
    let allowed = AdmissionResponse::from(request);
    let ask = match admission::ask(request) {
        Verdict::Ignore => return claim_environment(hook, request, allowed).await,
        Verdict::Deny(reason) => return deny(allowed, reason),
        Verdict::Bind(ask) => ask,
    };
    if request.dry_run {
        // No side effect on a dry run: nothing is bound, the Pod is let through.
        let mut r = allowed;
        r.warnings = Some(vec![
            "netaccel: dry run, no accelerator instance bound".to_string()
        ]);
        return r;
    }
    let pod = request.object.as_ref().expect("ask() saw the object");
    match bind(&hook.registry, &ask, &request.uid).await {
        Ok(binding) => {
            info!(instance = %binding.id, function = %ask.function, node = %binding.node,
                namespace = ?request.namespace, "admission: Pod bound to a slot");
            let patch = admission::patch(
                pod,
                &binding,
                &hook.registry_url,
                ask.colocate,
                ask.tenant.as_ref(),
            );
            match allowed.clone().with_patch(patch) {
                Ok(r) => r,
                Err(e) => deny(allowed, format!("netaccel: cannot write the patch: {e}")),
            }
        }
        Err(reason) => {
            info!(function = %ask.function, accelerator = %ask.accelerator, %reason,
                "admission: Pod refused");
            deny(allowed, reason)
        }
    }
}

/// A Pod that asks for no accelerator by annotation but uses a netaccel claim already
/// allocated (a standalone claim shared by several Pods) gets the environment of the
/// claim's instance, so its clients work as a webhook-bound Pod's do. A claim made from
/// a template is not allocated yet when its Pod is admitted: nothing to add then.
async fn claim_environment(
    hook: &Hook,
    request: &AdmissionRequest<Pod>,
    allowed: AdmissionResponse,
) -> AdmissionResponse {
    let Some(pod) = request.object.as_ref() else {
        return allowed;
    };
    let namespace = request.namespace.clone().unwrap_or_default();
    let named = pod
        .spec
        .iter()
        .flat_map(|s| s.resource_claims.iter().flatten())
        .filter_map(|c| c.resource_claim_name.clone());
    for name in named {
        let key = ObjectRef::new(&name).within(&namespace);
        let Some(claim) = hook.claims.get(&key).and_then(|c| ClaimView::of(&c)) else {
            continue;
        };
        let value = {
            let st = hook.registry.lock().await;
            let id = claim.instance_id(0);
            st.instance(&id).map(|_| st.binding_json(&id))
        };
        let Some(binding) = value.as_ref().and_then(Binding::from_json) else {
            continue;
        };
        let tenant = match admission::tenant_of(pod) {
            Ok(tenant) => tenant,
            Err(reason) => return deny(allowed, reason),
        };
        let patch = admission::patch(pod, &binding, &hook.registry_url, false, tenant.as_ref());
        return match allowed.clone().with_patch(patch) {
            Ok(r) => r,
            Err(_) => allowed,
        };
    }
    allowed
}

fn deny(response: AdmissionResponse, reason: String) -> AdmissionResponse {
    let mut r = response.deny(reason);
    r.result.code = 403;
    r.result.reason = "Forbidden".to_string();
    r
}

/// The function record a Pod's ask stands for.
pub fn function_record(ask: &Ask) -> FunctionRecord {
    FunctionRecord {
        name: ask.function.clone(),
        accelerator: ask.accelerator.clone(),
        hash: ask.hash.clone(),
        query: Query {
            backend: ask.backend.clone(),
            vendor: ask.vendor.clone(),
            node: None,
        },
    }
}

/// Registers `record` unless a function of that name exists: with the same needs it
/// is used as it is, with other needs the Pod is refused (moving the instances of
/// running Pods to another accelerator would break them).
pub async fn ensure_function(registry: &Registry, record: FunctionRecord) -> Result<(), String> {
    let mut st = registry.lock().await;
    match st.function(&record.name) {
        Some(f) if f.record == record => return Ok(()),
        Some(f) => {
            return Err(format!(
                "netaccel: function {} needs accelerator {} (hash {:?}, query {:?}) but the Pod asks for {} (hash {:?}, query {:?}); name another function with the annotation {}",
                record.name, f.record.accelerator, f.record.hash, f.record.query,
                record.accelerator, record.hash, record.query, admission::FUNCTION
            ))
        }
        None => {}
    }
    if st.function_count() >= registry.config.functions_max {
        return Err(format!(
            "netaccel: the registry holds its maximum of {} functions (--functions-max)",
            registry.config.functions_max
        ));
    }
    info!(function = %record.name, accelerator = %record.accelerator, "function registered from Kubernetes");
    st.put_function(record);
    registry
        .commit(&mut st)
        .await
        .map_err(|e| format!("netaccel: {}", e.message))
}

/// Binds the instance for admission request `uid`: the function is registered when
/// new, then one instance is allocated (the Pod's pinned node tried first).
pub async fn bind(registry: &Arc<Registry>, ask: &Ask, uid: &str) -> Result<Binding, String> {
    ensure_function(registry, function_record(ask)).await?;
    let id = admission::instance_id(uid).map_err(|e| format!("netaccel: {e}"))?;
    let spec = InstanceSpec {
        id: Some(id.clone()),
        node: ask.pinned.clone(),
    };
    let value = match registry.create_instance(&ask.function, &spec).await {
        Ok(Created::New(v) | Created::Existing(v)) => v,
        Err(e) => return Err(format!("netaccel: {}", e.message)),
    };
    Binding::from_json(&value)
        .ok_or_else(|| format!("netaccel: instance {id} of {} found no slot", ask.function))
}

// ---- TLS ----

/// A certificate and its key, PEM.
#[derive(Clone)]
pub struct Certificate {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A self-signed certificate for `hosts` (DNS names or IP addresses). It is its own
/// CA: the configuration's `caBundle` is the certificate itself.
pub fn self_signed(hosts: &[String]) -> Result<Certificate, String> {
    let rcgen::CertifiedKey { cert, key_pair } = rcgen::generate_simple_self_signed(hosts.to_vec())
        .map_err(|e| format!("cannot make the webhook's certificate: {e}"))?;
    Ok(Certificate {
        cert_pem: cert.pem(),
        key_pem: key_pair.serialize_pem(),
    })
}

/// The rustls configuration serving `cert`.
pub fn server_config(cert: &Certificate) -> Result<rustls::ServerConfig, String> {
    let certs = rustls_pemfile::certs(&mut cert.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("webhook certificate: {e}"))?;
    if certs.is_empty() {
        return Err("webhook certificate: no CERTIFICATE block in the PEM".to_string());
    }
    let key = rustls_pemfile::private_key(&mut cert.key_pem.as_bytes())
        .map_err(|e| format!("webhook key: {e}"))?
        .ok_or("webhook key: no private key in the PEM")?;
    rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("webhook TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("webhook TLS: {e}"))
}

/// Serves `app` over TLS on `listener` until the runtime stops: one task per
/// connection, at most [`CONNECTIONS_MAX`] (beyond, new connections are closed).
pub async fn serve_tls(listener: TcpListener, tls: rustls::ServerConfig, app: Router) {
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors, say: wait rather than spin.
                warn!(error = %e, "webhook: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            warn!(%peer, "webhook: {CONNECTIONS_MAX} connections open; closing a new one");
            continue;
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    return tracing::debug!(%peer, error = %e, "webhook: TLS handshake failed")
                }
                Err(_) => return tracing::debug!(%peer, "webhook: TLS handshake timed out"),
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT)
                .serve_connection(TokioIo::new(tls), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "webhook: connection ended with an error");
            }
        });
    }
}

/// Binds the webhook's port.
pub async fn bind_listener(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} (--webhook): {e}"))
}

// ---- the configuration in the API server ----

/// The `MutatingWebhookConfiguration` sending Pod creations to this webhook.
pub fn configuration(
    name: &str,
    client: &WebhookClient,
    ca_pem: &str,
) -> MutatingWebhookConfiguration {
    let client_config = match client {
        WebhookClient::Url(url) => WebhookClientConfig {
            url: Some(url.clone()),
            ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
            service: None,
        },
        WebhookClient::Service {
            namespace,
            name,
            port,
        } => WebhookClientConfig {
            url: None,
            ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(PATH.to_string()),
                port: Some(*port),
            }),
        },
    };
    MutatingWebhookConfiguration {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: WEBHOOK_NAME.to_string(),
            admission_review_versions: vec!["v1".to_string()],
            client_config,
            rules: Some(vec![RuleWithOperations {
                operations: Some(vec!["CREATE".to_string()]),
                api_groups: Some(vec![String::new()]),
                api_versions: Some(vec!["v1".to_string()]),
                resources: Some(vec!["pods".to_string()]),
                scope: Some("Namespaced".to_string()),
            }]),
            // A Pod asking for an accelerator must not start unbound; the registry's
            // own namespace and kube-system are left out so the registry can always
            // be started again.
            failure_policy: Some("Fail".to_string()),
            namespace_selector: Some(LabelSelector {
                match_expressions: Some(vec![
                    LabelSelectorRequirement {
                        key: "kubernetes.io/metadata.name".to_string(),
                        operator: "NotIn".to_string(),
                        values: Some(vec!["kube-system".to_string()]),
                    },
                    LabelSelectorRequirement {
                        key: "netaccel.io/webhook".to_string(),
                        operator: "NotIn".to_string(),
                        values: Some(vec!["disabled".to_string()]),
                    },
                ]),
                match_labels: None,
            }),
            side_effects: "NoneOnDryRun".to_string(),
            timeout_seconds: Some(10),
            reinvocation_policy: Some("Never".to_string()),
            match_policy: Some("Equivalent".to_string()),
            ..Default::default()
        }]),
    }
}

/// Writes the configuration whenever this replica becomes the leader, so that the
/// API server calls the replica that can bind, and trusts its certificate.
pub fn spawn_configuration(
    registry: Arc<Registry>,
    client: Client,
    settings: Settings,
    ca_pem: String,
) {
    if settings.webhook_configuration.is_none() {
        return;
    }
    tokio::spawn(async move {
        let mut written = false;
        loop {
            if !registry.is_leader() {
                written = false;
            } else if !written {
                match apply_configuration(client.clone(), &settings, &ca_pem).await {
                    Ok(()) => written = true,
                    Err(e) => warn!(error = %e, "retrying"),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// Writes the configuration (server-side apply: this registry owns its fields).
pub async fn apply_configuration(
    client: Client,
    settings: &Settings,
    ca_pem: &str,
) -> Result<(), String> {
    let (Some(name), Some(target)) = (&settings.webhook_configuration, &settings.webhook_client)
    else {
        return Ok(());
    };
    let api: Api<MutatingWebhookConfiguration> = Api::all(client);
    let object = configuration(name, target, ca_pem);
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &KubePatch::Apply(&object),
    )
    .await
    .map_err(|e| format!("cannot write MutatingWebhookConfiguration {name}: {e}"))?;
    info!(configuration = %name, "webhook configuration written with this registry's CA bundle");
    Ok(())
}
