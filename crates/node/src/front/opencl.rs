//! The remote OpenCL port's gate: who may open a session, decided by the node's one
//! identity model (`core::tenant::auth`), as on HTTP, gRPC and RAC.
//!
//! The OpenCL service (`ocl_remote::service`) knows no tenants; it asks this gate with
//! the tenant and token of each session's `Hello` (the ICD takes them from
//! `NETACCEL_TENANT` and `NETACCEL_TENANT_TOKEN`, the variables the CLI reads). The
//! answer is made of what every front end uses:
//!
//! - authentication: a token alone is a bearer token (HTTP's rule: the tenant whose
//!   token it is, or the admin); a tenant with its token is RAC `hello`'s rule (the
//!   token must be that tenant's); nothing at all is `anonymous`'s to decide. Tokens
//!   go through the node's cache of verified tokens, so a same-host client's two
//!   `Hello`s (TCP, then the Unix socket) cost one argon2 check;
//! - authorization: the policy key `opencl = true` (see [`Action::OpenCl`]), and
//!   `opencl_devices`, the devices a session sees and uses: the admission's device
//!   mask holds the shared devices the tenant's policy grants
//!   ([`Action::OpenClDevice`], `core::tenant::devices`); a tenant granted none of
//!   them is refused. The service and its runtime processes enforce the mask (see
//!   `ocl_remote::service::gate::DeviceMask`);
//! - limits: the tenant's `opencl_bytes_max` (`[tenants.quota]`, or
//!   `[anonymous_quota]` for all anonymous callers together) bounds the buffers of all
//!   its sessions together: the gate keeps one counter per tenant in shared memory
//!   (`ocl_remote::service::account`), which every session of the tenant counts into,
//!   in whichever runtime process it runs.
//!
//! Every refusal is an audit line (protocol `opencl`), a session's request for a
//! device it was not granted included (once per device and session, reported by the
//! service: [`Gate::refused_device`]). The check runs once per session: a reload
//! (SIGHUP) that removes a token, or a device from a tenant's `opencl_devices`,
//! refuses its next session (or that device in it), and leaves a session already open
//! to its end with what it was admitted to.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

use ocl_remote::service::account::TenantMemory;
use ocl_remote::service::gate::{Admission, Caller, DeviceMask, Gate};

use crate::core::quota::Owner;
use crate::core::tenant::auth::{Action, AuthError, Base, Principal};
use crate::node::Node;
use crate::telemetry::audit::{AuditEvent, AuditKind};

/// The gate the node gives its OpenCL service. The service starts before the node it
/// belongs to is whole, so the gate learns its node afterwards ([`OpenClGate::bind`]);
/// until then, and once the node is gone, it refuses.
#[derive(Debug, Default)]
pub struct OpenClGate {
    node: OnceLock<Weak<Node>>,
    /// The memory counter of each tenant (and of the anonymous callers together) with
    /// an `opencl_bytes_max`, made at its first session, and its label in `/metrics`:
    /// as many as accounts.
    memories: parking_lot::Mutex<HashMap<Owner, (String, Arc<TenantMemory>)>>,
}

impl crate::node::OpenClAdmission for OpenClGate {
    /// Lets the gate ask `node` (a weak reference: the node owns the service).
    fn bind(&self, node: &Arc<Node>) {
        let bound = self.node.set(Arc::downgrade(node));
        assert!(bound.is_ok(), "a gate belongs to one node");
    }

    fn gate(self: Arc<Self>) -> Arc<dyn Gate> {
        self
    }

    fn collector(self: Arc<Self>) -> Box<dyn prometheus_client::collector::Collector> {
        Box::new(MemoryMetrics(self))
    }
}

impl Gate for OpenClGate {
    fn admit(
        &self,
        caller: &Caller,
        tenant: &str,
        token: &str,
        devices: &[String],
    ) -> Result<Admission, String> {
        let Some(node) = self.node.get().and_then(Weak::upgrade) else {
            return Err("the node is starting or stopping".to_string());
        };
        let audit = |kind, who: &str, detail: &str| {
            node.audit.record(&AuditEvent {
                event: kind,
                protocol: "opencl",
                peer: caller.peer,
                tenant: who,
                action: "open an OpenCL session",
                detail,
            });
        };
        let principal = match identify(&node, caller, tenant, token) {
            Ok(p) => p,
            Err(e) => {
                let mut message = e.message();
                if e == AuthError::Missing {
                    // The sentence names the other ports' ways; say the ICD's.
                    message.push_str(" (remote OpenCL: NETACCEL_TENANT and NETACCEL_TENANT_TOKEN)");
                }
                audit(AuditKind::AuthenticationFailed, "anonymous", &message);
                return Err(message);
            }
        };
        if !principal.may(Action::OpenCl) {
            let message = principal.refusal(Action::OpenCl);
            audit(AuditKind::Forbidden, principal.label(), &message);
            return Err(message);
        }
        let granted = DeviceMask::from_fn(devices.len(), |index| {
            let name = &devices[index];
            principal.may(Action::OpenClDevice { index, name })
        });
        // (A node without devices admits as before: there is nothing to grant.)
        if granted.is_empty() && !devices.is_empty() {
            let message = format!(
                "tenant `{}` may use none of this node's OpenCL devices: its opencl_devices \
                 match none of them",
                principal.label()
            );
            audit(AuditKind::Forbidden, principal.label(), &message);
            return Err(message);
        }
        let memory = match node.quotas.account(principal.id).opencl_bytes_max {
            Some(max) => Some(self.memory(Owner::of(principal.id), principal.label(), max)?),
            None => None,
        };
        Ok(Admission {
            tenant: principal.label().to_string(),
            devices: granted,
            memory,
        })
    }

    /// An audit line (`forbidden`) for a request of `tenant`'s session naming a
    /// device it was not granted (see [`Gate::refused_device`]).
    fn refused_device(&self, caller: &Caller, tenant: &str, device: u32) {
        let Some(node) = self.node.get().and_then(Weak::upgrade) else {
            return;
        };
        let action = format!("use OpenCL device {device}");
        node.audit.record(&AuditEvent {
            event: AuditKind::Forbidden,
            protocol: "opencl",
            peer: caller.peer,
            tenant,
            action: &action,
            detail: "not among the devices its opencl_devices grant: refused with \
                     CL_INVALID_DEVICE",
        });
    }
}

impl OpenClGate {
    /// The memory counter of `owner` (`label` in `/metrics`), bounded by `max` (made
    /// at its first session).
    fn memory(&self, owner: Owner, label: &str, max: u64) -> Result<Arc<TenantMemory>, String> {
        let mut memories = self.memories.lock();
        if let Some((_, m)) = memories.get(&owner) {
            debug_assert_eq!(m.max(), max, "quotas are fixed at start");
            return Ok(Arc::clone(m));
        }
        let made = TenantMemory::create(max)
            .map_err(|e| format!("the node cannot count the tenant's OpenCL memory: {e}"))?;
        let label = match owner {
            Owner::Anonymous => crate::core::quota::ANONYMOUS_LABEL.to_string(),
            Owner::Tenant(_) => label.to_string(),
        };
        memories.insert(owner, (label, Arc::clone(&made)));
        Ok(made)
    }
}

/// The tenants' OpenCL memory in `/metrics`, read from their counters at each scrape:
/// `netaccel_ocl_tenant_memory_bytes{tenant}` and
/// `netaccel_ocl_tenant_memory_refusals_total{tenant}`, one series per tenant with an
/// `opencl_bytes_max` that has opened a session (`anonymous` for all anonymous
/// callers), so no more series than configured tenants.
#[derive(Debug)]
pub(crate) struct MemoryMetrics(pub Arc<OpenClGate>);

impl prometheus_client::collector::Collector for MemoryMetrics {
    fn encode(&self, mut e: prometheus_client::encoding::DescriptorEncoder) -> std::fmt::Result {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::MetricType;
        let rows: Vec<(String, u64, u64)> = self
            .0
            .memories
            .lock()
            .values()
            .map(|(label, m)| (label.clone(), m.used(), m.refusals()))
            .collect();
        if rows.is_empty() {
            // No family without series: nothing to show before the first session of
            // a tenant with a bound.
            return Ok(());
        }
        let mut f = e.encode_descriptor(
            "ocl_tenant_memory_bytes",
            "Bytes of OpenCL buffers and images each tenant's remote OpenCL sessions hold \
             together (tenants with opencl_bytes_max).",
            None,
            MetricType::Gauge,
        )?;
        for (tenant, used, _) in &rows {
            let held = prometheus_client::metrics::gauge::ConstGauge::new(
                i64::try_from(*used).unwrap_or(i64::MAX),
            );
            held.encode(f.encode_family(&[("tenant", tenant.as_str())])?)?;
        }
        let mut f = e.encode_descriptor(
            "ocl_tenant_memory_refusals",
            "Allocations of remote OpenCL sessions refused for their tenant's \
             opencl_bytes_max.",
            None,
            MetricType::Counter,
        )?;
        for (tenant, _, refusals) in &rows {
            let refused = prometheus_client::metrics::counter::ConstCounter::new(*refusals);
            refused.encode(f.encode_family(&[("tenant", tenant.as_str())])?)?;
        }
        Ok(())
    }
}

/// Who a session's `Hello` proves (see the module docs for the rules); a client
/// certificate wins over it, as on the other TLS listeners.
fn identify(
    node: &Node,
    caller: &Caller,
    tenant: &str,
    token: &str,
) -> Result<Principal, AuthError> {
    let auth = &node.tenants.auth;
    if let Some(name) = &caller.certificate {
        if !tenant.is_empty() && tenant != name {
            return Err(AuthError::Hello(tenant.to_string()));
        }
        return auth.identify(&Base::Certificate(name.clone()), None);
    }
    let base = Base::Connection(node.tenants.anonymous());
    match (tenant.is_empty(), token.is_empty()) {
        (true, true) => auth.identify(&base, None),
        (true, false) => auth.identify(&base, Some(token)),
        (false, true) => Err(AuthError::Hello(tenant.to_string())),
        (false, false) => match auth.identify(&base, Some(token)) {
            Ok(p) if p.name.as_deref() == Some(tenant) => Ok(p),
            _ => Err(AuthError::Hello(tenant.to_string())),
        },
    }
}

/// Starts remote OpenCL over TLS (`[tls] opencl`, `--opencl-tls`) when it is set and
/// the node shares OpenCL devices: a listener whose connections are handshaken with
/// the node's certificate (and client CA: a certificate's tenant wins, as on the
/// other TLS listeners), then relayed in plain text to the OpenCL service over one
/// end of a Unix socket pair ([`ocl_remote::service::ServiceHandle::serve_connection`]).
///
/// Why a relay: the service hands each connection's descriptor to a runtime process
/// of its own, and TLS state cannot follow a descriptor there; the relay costs a hop
/// on the TLS path only (the plain port is as before). Its thread runs one
/// single-threaded runtime for every TLS session of the port: the bulk rate of
/// OpenCL over TLS is one core's (see `docs/opencl.md`).
pub(crate) fn start_tls(node: &Arc<Node>) -> Result<(), crate::device::StartError> {
    use crate::device::StartError;
    let (Some(addr), Some(tls)) = (node.config.tls.opencl, node.tls.clone()) else {
        return Ok(());
    };
    if node.opencl_addr().is_none() {
        tracing::warn!(%addr, "remote OpenCL over TLS not served: the node shares no OpenCL device");
        return Ok(());
    }
    let failed = |e: std::io::Error| {
        StartError::Failed(format!(
            "cannot listen for remote OpenCL over TLS on {addr}: {e}"
        ))
    };
    let listener = std::net::TcpListener::bind(addr).map_err(failed)?;
    listener.set_nonblocking(true).map_err(failed)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(failed)?;
    let node = Arc::downgrade(node);
    std::thread::Builder::new()
        .name("ocl-tls".to_string())
        .spawn(move || runtime.block_on(accept_tls(node, listener, tls)))
        .map_err(failed)?;
    tracing::info!(opencl_tls = %addr, "remote OpenCL over TLS");
    Ok(())
}

/// Accepts TLS clients until the node is gone or drains.
async fn accept_tls(
    node: Weak<Node>,
    listener: std::net::TcpListener,
    tls: crate::net::tls::TlsAcceptor,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, say: wait rather than spin.
                tracing::warn!(error = %e, "remote OpenCL over TLS: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        if node.upgrade().is_none_or(|n| n.opencl_addr().is_none()) {
            return;
        }
        tokio::spawn(relay(node.clone(), tls.clone(), tcp, peer));
    }
}

/// Bytes one relay copy moves at most, each way.
const RELAY_BYTES: usize = 64 << 10;

/// Handshakes one client, hands the plain end of a socket pair to the OpenCL service
/// and copies between the two until either side ends.
async fn relay(
    node: Weak<Node>,
    tls: crate::net::tls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
) {
    use crate::net::tls::Identity;
    let _ = tcp.set_nodelay(true);
    let (mut secure, identity) = match tls.accept(tcp).await {
        Ok(accepted) => accepted,
        Err(e) => {
            tracing::debug!(%peer, error = ?e, "remote OpenCL over TLS: handshake failed");
            return;
        }
    };
    let certificate = match identity {
        Identity::Tenant(name) => Some(name),
        Identity::Anonymous => None,
    };
    let Ok((mut ours, theirs)) = tokio::net::UnixStream::pair() else {
        return;
    };
    let Ok(theirs) = theirs.into_std() else {
        return;
    };
    if theirs.set_nonblocking(false).is_err() {
        return;
    }
    let caller = Caller {
        peer: Some(peer),
        certificate,
    };
    let served = node
        .upgrade()
        .is_some_and(|n| n.serve_opencl(ocl_remote::stream::Stream::Unix(theirs), caller));
    if served {
        // 64 KiB a copy (tokio's default is 8): a TLS record holds 16 KiB, and a large
        // write or read result is then a few steps rather than hundreds.
        let _ = tokio::io::copy_bidirectional_with_sizes(
            &mut secure,
            &mut ours,
            RELAY_BYTES,
            RELAY_BYTES,
        )
        .await;
    }
}
