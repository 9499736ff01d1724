//! The connection's routes that are not calls: an extension's control request,
//! loading an accelerator into a slot, and the object store's GET and PUT.
//!
//! Not here: calls and their answers (the connection's own module), reading bodies.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use super::{BodyRefusal, Conn, Step};
use crate::core::objects::StoreError;
use crate::core::quota::{Exhausted, Owner};
use crate::core::tenant::auth::Action;
use crate::front::admin::{self, AdminError};
use crate::front::http::parse::BodyFraming;
use crate::front::http::request::{Control, Request};
use crate::front::http::response::{code_name, error_body, http_code, Head};
use crate::front::http::{route, v2};
use crate::net::netio::Transport;
use crate::telemetry::audit::{AuditEvent, AuditKind};
use crate::telemetry::Protocol;

impl<S: Transport> Conn<S> {
    /// An extension's request (`v2::Control`): its body read, then answered. Their
    /// bodies are optional: a request without one (no length) has an empty body.
    pub(super) async fn control(&mut self, mut req: Request, op: Control) -> io::Result<Step> {
        let node = Arc::clone(&self.node);
        let who = self.session.principal().cloned();
        let caller = (self.tenant, who.as_ref());
        let (code, doc) = if matches!(req.framing, BodyFraming::None) {
            v2::control(node, caller, op, &[]).await
        } else {
            let permit = match self.take_body(&mut req, |_| Ok(())).await? {
                Ok(permit) => permit,
                Err(step) => return Ok(step),
            };
            let body = std::mem::take(&mut self.body);
            let answer = v2::control(node, caller, op, &body).await;
            drop(permit);
            self.body = body;
            answer
        };
        if code >= 400 {
            self.log_refusal(code, code_name(code), &String::from_utf8_lossy(&doc));
        }
        if code == 403 {
            // A policy's refusal (a shared memory key the tenant may not register).
            let label = who.as_ref().map_or("anonymous", |w| w.label());
            let detail = serde_json::from_slice::<serde_json::Value>(&doc)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string))
                .unwrap_or_default();
            let event = AuditEvent::request(
                AuditKind::Forbidden,
                Protocol::Http,
                self.peer,
                label,
                "register a system shared memory region",
                &detail,
            );
            self.node.audit.record(&event);
        }
        self.respond(&req, code, b"application/json", &doc, false, &[]);
        Ok(self.after())
    }

    pub(super) async fn load_slot(
        &mut self,
        mut req: Request,
        slot: u16,
        origin: admin::Origin,
    ) -> io::Result<Step> {
        let permit = match self.take_body(&mut req, |_| Ok(())).await? {
            Ok(permit) => permit,
            Err(step) => return Ok(step),
        };
        let parsed: Result<LoadRequest, _> = serde_json::from_slice(&self.body);
        drop(permit);
        let name = match parsed {
            Ok(LoadRequest { accelerator }) => accelerator,
            Err(e) => {
                let message = format!("body must be {{\"accelerator\":\"NAME\"}}: {e}");
                self.log_refusal(400, "BAD_REQUEST", &message);
                let body = error_body(&message, "BAD_REQUEST");
                self.respond(&req, 400, b"application/json", &body, false, &[]);
                return Ok(self.after());
            }
        };
        if let Some(who) = self.session.principal() {
            // The route allowed loading; a policy may allow only some accelerators.
            if who.has_policy() && !who.may(Action::Load(Some(&name))) {
                let message = who.refusal(Action::Load(Some(&name)));
                let action = format!("load {name} into slot {slot}");
                let event = AuditEvent::request(
                    AuditKind::Forbidden,
                    Protocol::Http,
                    self.peer,
                    who.label(),
                    &action,
                    &message,
                );
                self.node.audit.record(&event);
                self.log_refusal(403, "FORBIDDEN", &message);
                let body = error_body(&message, "FORBIDDEN");
                self.respond(&req, 403, b"application/json", &body, false, &[]);
                return Ok(self.after());
            }
        }
        let result = admin::reconfigure(Arc::clone(&self.node), slot, name.clone(), origin).await;
        let who = self.session.principal().map_or("anonymous", |p| p.label());
        let asked = (Protocol::Http, self.peer);
        admin::audit_reconfiguration(&self.node, asked, who, (slot, &name), &result);
        match result {
            Ok(done) => self.respond(&req, 200, b"application/json", &done.json(), false, &[]),
            Err(AdminError {
                status,
                message,
                conflict,
            }) => {
                let (code, code_name) = if conflict {
                    (409, "CONFLICT")
                } else {
                    (http_code(status), status.name())
                };
                self.log_refusal(code, code_name, &message);
                let body = error_body(&message, code_name);
                self.respond(&req, code, b"application/json", &body, false, &[]);
            }
        }
        Ok(self.after())
    }

    pub(super) fn object_get(
        &mut self,
        req: &Request,
        key: &str,
        head_only: bool,
        if_none_match: Option<&[u8]>,
    ) {
        let Some(object) = self.node.objects.get(Owner::of(self.tenant), key) else {
            let body = error_body(&format!("no object named {key}"), "NOT_FOUND");
            self.respond(req, 404, b"application/json", &body, head_only, &[]);
            return;
        };
        if if_none_match.is_some_and(|h| crate::core::objects::none_match(h, &object.etag)) {
            let keep_alive = self.keep_alive(req);
            Head::start(&mut self.wbuf, 304)
                .header("ETag", object.etag.as_bytes())
                .finish(keep_alive, req.minor);
            self.count(304);
            return;
        }
        let etag = object.etag.as_bytes();
        self.respond(
            req,
            200,
            b"application/octet-stream",
            &object.data,
            head_only,
            &[("ETag", etag)],
        );
    }

    /// Stores an object in the namespace of the connection's tenant, its bytes held to
    /// the tenant's `object_bytes_max`.
    pub(super) async fn object_put(&mut self, mut req: Request, key: String) -> io::Result<Step> {
        let node = Arc::clone(&self.node);
        let owner = Owner::of(self.tenant);
        let account = node.quotas.account(self.tenant);
        let quota = account.object_bytes_max;
        let check = |len: Option<usize>| -> Result<(), BodyRefusal> {
            let refusal = |e: StoreError| match e {
                StoreError::BadKey(message) => BodyRefusal::Refuse {
                    code: 400,
                    code_name: "BAD_REQUEST",
                    message,
                },
                other => BodyRefusal::Refuse {
                    code: 507,
                    code_name: "INSUFFICIENT_STORAGE",
                    message: other.to_string(),
                },
            };
            node.objects.check_key(&key).map_err(refusal)?;
            let room = node
                .objects
                .check_room(owner, &key, len.unwrap_or(0), quota);
            if let Err(StoreError::OverQuota { .. }) = &room {
                account.refuse(Exhausted::ObjectBytes, Duration::ZERO);
            }
            room.map_err(refusal)
        };
        let permit = match self.take_body(&mut req, check).await? {
            Ok(permit) => permit,
            Err(step) => return Ok(step),
        };
        let data = std::mem::take(&mut self.body);
        let result = self.node.objects.put(owner, &key, data, quota);
        if let Err(StoreError::OverQuota { .. }) = &result {
            account.refuse(Exhausted::ObjectBytes, Duration::ZERO);
        }
        drop(permit);
        match result {
            Ok(created) => {
                let code = if created { 201 } else { 204 };
                let keep_alive = self.keep_alive(&req);
                let mut head = Head::start(&mut self.wbuf, code);
                if created {
                    let location = route::object_path(&key);
                    head = head
                        .header("Location", location.as_bytes())
                        .num("Content-Length", 0);
                }
                head.finish(keep_alive, req.minor);
                self.count(code);
            }
            Err(e) => {
                let (code, name) = match e {
                    StoreError::BadKey(_) => (400, "BAD_REQUEST"),
                    _ => (507, "INSUFFICIENT_STORAGE"),
                };
                self.log_refusal(code, name, &e);
                let body = error_body(&e.to_string(), name);
                self.respond(&req, code, b"application/json", &body, false, &[]);
            }
        }
        Ok(self.after())
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadRequest {
    accelerator: String,
}
