//! Who asks, before a request is routed: the connection's [`Session`] identifies the
//! caller from `Authorization: Bearer` (or its certificate, or `anonymous`), the route
//! checks what its policy allows, and every refusal of either kind is an audit line.
//! A keep-alive connection that sends the same token again is not checked again
//! (`Session`), so authentication costs a keyed hash of the token per request.
//!
//! Health checks (`/health`, `/v2/health/*`) need no credential: an orchestrator's
//! probe has none.

use std::net::SocketAddr;

use super::parse::RequestHead;
use super::request::{bearer_token, refuse, Request, Route};
use super::route::{request, route};
use crate::core::tenant::auth::{AuthError, Principal, Session};
use crate::core::tenant::TenantId;
use crate::node::Node;
use crate::telemetry::audit::{AuditEvent, AuditKind};
use crate::telemetry::Protocol;

/// The request of `head` from `peer`, routed for the caller its credential proves (or
/// refused `401` / `403`), and the tenant it is counted against.
pub fn admit(
    node: &Node,
    peer: SocketAddr,
    session: &mut Session,
    head: &RequestHead<'_>,
) -> (Request, TenantId) {
    let bearer = bearer_token(head.header("authorization"));
    let base_id = session.base_id();
    match session.identify(&node.tenants.auth, bearer) {
        Ok(who) => {
            let request = route(head, node, who);
            if let Route::Refuse { code, message, .. } = &request.route {
                // 401: a reconfiguration's admin token missing or wrong.
                let kind = match code {
                    401 => Some(AuditKind::AuthenticationFailed),
                    403 => Some(AuditKind::Forbidden),
                    _ => None,
                };
                if let Some(kind) = kind {
                    audit(node, peer, who.label(), head, kind, message);
                }
            }
            (request, who.id)
        }
        Err(_) if is_health(head.path()) => {
            (route(head, node, &Principal::nobody(base_id)), base_id)
        }
        Err(AuthError::Busy) => {
            let message = AuthError::Busy.message();
            (request(head, refuse(503, "BUSY", message)), base_id)
        }
        Err(e) => {
            let message = e.message();
            let kind = AuditKind::AuthenticationFailed;
            audit(node, peer, "anonymous", head, kind, &message);
            (request(head, refuse(401, "UNAUTHORIZED", message)), base_id)
        }
    }
}

fn is_health(path: &str) -> bool {
    path == "/health" || path.starts_with("/v2/health/")
}

fn audit(
    node: &Node,
    peer: SocketAddr,
    tenant: &str,
    head: &RequestHead<'_>,
    kind: AuditKind,
    detail: &str,
) {
    let action = format!("{} {}", head.method, head.path());
    node.audit.record(&AuditEvent::request(
        kind,
        Protocol::Http,
        peer,
        tenant,
        &action,
        detail,
    ));
}
