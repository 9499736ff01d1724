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
//! - authorization: the policy key `opencl = true` (see [`Action::OpenCl`]);
//! - limits: the tenant's `opencl_session_bytes_max` (`[tenants.quota]`, or
//!   `[anonymous_quota]`) bounds each of its sessions' buffers.
//!
//! Every refusal is an audit line (protocol `opencl`). The check runs once per
//! session: a reload (SIGHUP) that removes a token refuses its next session, and
//! leaves a session already open to its end.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock, Weak};

use ocl_remote::service::gate::{Admission, Gate};

use crate::core::tenant::auth::{Action, AuthError, Base, Principal};
use crate::node::Node;
use crate::telemetry::audit::{AuditEvent, AuditKind};

/// The gate the node gives its OpenCL service. The service starts before the node it
/// belongs to is whole, so the gate learns its node afterwards ([`OpenClGate::bind`]);
/// until then, and once the node is gone, it refuses.
#[derive(Debug, Default)]
pub struct OpenClGate {
    node: OnceLock<Weak<Node>>,
}

impl OpenClGate {
    /// Lets the gate ask `node` (a weak reference: the node owns the service).
    pub fn bind(&self, node: &Arc<Node>) {
        let bound = self.node.set(Arc::downgrade(node));
        assert!(bound.is_ok(), "a gate belongs to one node");
    }
}

impl Gate for OpenClGate {
    fn admit(
        &self,
        peer: Option<SocketAddr>,
        tenant: &str,
        token: &str,
    ) -> Result<Admission, String> {
        let Some(node) = self.node.get().and_then(Weak::upgrade) else {
            return Err("the node is starting or stopping".to_string());
        };
        let audit = |kind, who: &str, detail: &str| {
            node.audit.record(&AuditEvent {
                event: kind,
                protocol: "opencl",
                peer,
                tenant: who,
                action: "open an OpenCL session",
                detail,
            });
        };
        let principal = match identify(&node, tenant, token) {
            Ok(p) => p,
            Err(e) => {
                let message = e.message();
                audit(AuditKind::AuthenticationFailed, "anonymous", &message);
                return Err(message);
            }
        };
        if !principal.may(Action::OpenCl) {
            let message = principal.refusal(Action::OpenCl);
            audit(AuditKind::Forbidden, principal.label(), &message);
            return Err(message);
        }
        Ok(Admission {
            tenant: principal.label().to_string(),
            buffer_bytes_max: node.quotas.account(principal.id).opencl_session_bytes_max,
        })
    }
}

/// Who a session's `Hello` proves (see the module docs for the rules).
fn identify(node: &Node, tenant: &str, token: &str) -> Result<Principal, AuthError> {
    let auth = &node.tenants.auth;
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
