//! Admin operations: what the node says about itself (its catalog, its slots), who may
//! change it (the admin token), and the change itself (loading an accelerator into a
//! slot: reconfiguration).
//!
//! Each operation is one function here, called by every front end that offers it:
//! the HTTP routes (`GET /v1/accelerators`, `GET /v1/slots`, `PUT /v1/slots/{id}`), the
//! RAC control messages (`catalog`, `slots`, `load`), and the registry when it places
//! accelerators on this node. A front end only translates: from its request to the
//! arguments, and from the result to its reply (an HTTP status and JSON error body, or
//! a RAC status and payload). The documents are JSON, the same bytes on every front
//! end.
//!
//! Reconfiguration itself — stop admitting, let the queued calls finish on the old
//! accelerator, swap, reopen — is the slot's ([`crate::core::slot::Slot::reconfigure`]);
//! this module finds the slot and the accelerator, asks the registry when the node has
//! one, runs the swap off the network thread, logs it and words the reply.
//!
//! # Reconfiguration and the registry
//!
//! The registry binds function instances to slots; a slot that loads another
//! accelerator behind its back breaks those bindings. So a node with a registry asks
//! it (`POST /v1/reconfigurations`) before loading a different accelerator into a slot,
//! whichever front end the request came through, and:
//! - goes ahead when the registry allows it (it migrates the instances displaced);
//! - refuses with the registry's reason when it does not (HTTP `409 CONFLICT`; RAC,
//!   which has no such status, `UNAUTHORIZED`);
//! - refuses `UNAVAILABLE` (HTTP 503) when the registry cannot be asked, since a
//!   reconfiguration it did not see would leave its bindings wrong until the next
//!   lease renewal.
//!
//! The requester's [`Origin`] changes that: the instance asking, which the registry
//! lets reconfigure its own slot; a *forced* reconfiguration, asked as the registry's
//! admin (so it is allowed and migrates whoever is displaced) and done even when the
//! registry cannot be asked; and the registry's own reconfigurations, which it has
//! validated already and which must not be asked back. Forcing and speaking for the
//! registry both need the node's admin token, so a node without one cannot tell the
//! registry from anyone else: it refuses to force and asks the registry about the
//! registry's own requests (which the registry allows, being the one loading them).

use std::sync::Arc;
use std::time::Duration;

use rac_proto::Status;
use serde_json::json;

use crate::config::Config;
use crate::core::slot::SlotInfo;
use crate::core::tenant::auth::{Action, Principal};
use crate::core::tenant::secret_eq;
use crate::node::Node;
use crate::registry::Verdict;
use crate::telemetry::audit::{AuditEvent, AuditKind};
use crate::telemetry::Protocol;

/// `GET /v1/accelerators`, RAC `catalog`: every accelerator the node can load, its
/// parameters, and the slots that host it now.
pub fn catalog_json(node: &Node) -> Vec<u8> {
    let list: Vec<_> = node
        .dispatcher
        .catalog()
        .iter()
        .map(|a| {
            let d = a.descriptor();
            let params: Vec<_> = d
                .params
                .iter()
                .map(|p| {
                    json!({
                        "name": p.name,
                        "type": p.ty.as_str(),
                        "offset": p.offset,
                        "default": value_json(p.default),
                        "min": value_json(p.min),
                        "max": value_json(p.max),
                    })
                })
                .collect();
            json!({
                "id": d.id,
                "name": d.name,
                "hash": d.hash,
                "params": params,
                "backends": node.dispatcher.catalog().backends(d.id),
                "slots": node.dispatcher.slots_hosting(d.id),
            })
        })
        .collect();
    serde_json::to_vec(&list).expect("JSON")
}

/// A parameter's default or bound as a JSON number (`null` when absent).
fn value_json(value: Option<accel::ParamValue>) -> serde_json::Value {
    match value {
        None => serde_json::Value::Null,
        Some(accel::ParamValue::F32(v)) => json!(v),
        Some(v) => match v.as_i128().map(i64::try_from) {
            Some(Ok(i)) => json!(i),
            _ => json!(v.as_i128().and_then(|i| u64::try_from(i).ok())),
        },
    }
}

/// `GET /v1/slots` and RAC `slots` (all slots, `only` = `None`), or
/// `GET /v1/slots/{id}` (one slot, `only` = its id).
pub fn slots_json(node: &Node, only: Option<u16>) -> Vec<u8> {
    let slots: Vec<_> = node
        .dispatcher
        .slots()
        .iter()
        .filter(|s| only.is_none_or(|id| id == s.id))
        .map(|s| {
            let info = s.info();
            let state = match (&info.reconfiguring_to, info.running || info.queue_depth > 0) {
                (Some(_), _) => "reconfiguring",
                _ if info.failed.is_some() => "failed",
                (None, true) => "busy",
                (None, false) => "idle",
            };
            json!({
                "id": info.id,
                "device": info.device,
                "backend": info.backend.as_str(),
                "accelerator": info.accelerator,
                "state": state,
                "loading": info.reconfiguring_to,
                "failed": info.failed,
                "queue_depth": info.queue_depth,
                "busy_ratio": info.busy_ratio,
            })
        })
        .collect();
    let doc = match only {
        Some(_) => slots.into_iter().next().unwrap_or(serde_json::Value::Null),
        None => serde_json::Value::Array(slots),
    };
    serde_json::to_vec(&doc).expect("JSON")
}

/// The admin token check: whether a client that presented `token` (none if it sent
/// none) may reconfigure the node. Anyone may when the node has no admin token. The
/// front ends use [`check_token`], which says why not; this is the tests' shorthand.
#[cfg(test)]
pub fn authorized(config: &Config, token: Option<&str>) -> bool {
    check_token(config, token).is_ok()
}

/// The admin token check, saying why it failed: a client that sent no token is told
/// what to send, one that sent another token that it is not the node's, so that a
/// typo is not taken for a missing header. Neither the token given nor the node's is
/// ever part of the answer.
pub fn check_token(config: &Config, token: Option<&str>) -> Result<(), TokenRefusal> {
    match (&config.admin_token, token) {
        (None, _) => Ok(()),
        (Some(_), None) => Err(TokenRefusal::Missing),
        (Some(admin), Some(given)) if secret_eq(given, admin) => Ok(()),
        (Some(_), Some(_)) => Err(TokenRefusal::Wrong),
    }
}

/// Why [`check_token`] refused. Both are `UNAUTHORIZED` (HTTP 401, as RFC 6750 answers
/// a missing and an invalid bearer token alike); the message tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenRefusal {
    /// No token was sent.
    Missing,
    /// A token was sent, and it is not the node's admin token.
    Wrong,
}

impl TokenRefusal {
    /// The refusal's message: for [`Missing`](TokenRefusal::Missing) `needs`, the
    /// front end's words for what to send; for [`Wrong`](TokenRefusal::Wrong), that
    /// the token given to `operation` is not the node's.
    pub fn message(self, needs: &str, operation: &str) -> String {
        match self {
            TokenRefusal::Missing => needs.to_string(),
            TokenRefusal::Wrong => format!(
                "{operation}: the token given is not this node's admin token (`admin_token` \
                 in its configuration)"
            ),
        }
    }
}

/// Whether `who` — a caller who also presented `token` (the bearer token, or RAC
/// `load`'s) — may reconfigure: load `what` (`None`: anything, the check made before
/// a request's body names it). Allowed when its policy (or, with no policy anywhere,
/// the absence of an admin token) allows it, or when `token` is the admin token;
/// refused by the policy (`Forbidden`: HTTP 403) when one decides for it, otherwise
/// for the admin token as [`check_token`] words it (HTTP 401).
pub fn authorize_load(
    config: &Config,
    who: &Principal,
    token: Option<&str>,
    what: Option<&str>,
) -> Result<(), LoadRefusal> {
    if who.may(Action::Load(what)) {
        return Ok(());
    }
    let token_check = check_token(config, token);
    if config.admin_token.is_some() && token_check.is_ok() {
        return Ok(());
    }
    if who.has_policy() {
        let what = what.map_or_else(|| "anything".to_string(), |w| format!("`{w}`"));
        return Err(LoadRefusal::Forbidden(format!(
            "tenant `{}` may not load {what}: its policy does not allow it",
            who.label()
        )));
    }
    Err(LoadRefusal::Token(
        token_check.err().unwrap_or(TokenRefusal::Missing),
    ))
}

/// Why [`authorize_load`] refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadRefusal {
    /// The admin token was missing or wrong (HTTP 401).
    Token(TokenRefusal),
    /// The caller's policy does not allow it (HTTP 403); the sentence says so.
    Forbidden(String),
}

impl LoadRefusal {
    /// The refusal's message (see [`TokenRefusal::message`] for `needs` and
    /// `operation`).
    pub fn message(&self, needs: &str, operation: &str) -> String {
        match self {
            LoadRefusal::Token(t) => t.message(needs, operation),
            LoadRefusal::Forbidden(sentence) => sentence.clone(),
        }
    }

    /// Whether the caller was authenticated and refused by its policy.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, LoadRefusal::Forbidden(_))
    }
}

/// Writes the audit line of a reconfiguration asked by `who` over `protocol` from
/// `peer`: loading `accelerator` into `slot`, done or not.
pub fn audit_reconfiguration(
    node: &Node,
    (protocol, peer): (Protocol, std::net::SocketAddr),
    who: &str,
    (slot, accelerator): (u16, &str),
    result: &Result<Reconfigured, AdminError>,
) {
    let action = format!("load {accelerator} into slot {slot}");
    let detail = match result {
        Ok(_) => "done".to_string(),
        Err(e) => format!("not done: {}", e.message),
    };
    node.audit.record(&AuditEvent::request(
        AuditKind::Reconfiguration,
        protocol,
        peer,
        who,
        &action,
        &detail,
    ));
}

/// Replaces the node's tenants (tokens, policies, `anonymous`, quotas) with those of
/// `config`, the configuration file read again (SIGHUP) or the node's with the
/// registry's tenants: connections authenticated before are checked again on their
/// next call. A configuration that does not read or validate changes nothing (the
/// error is why). Either way one audit line says what happened, as `source` asked it.
pub fn reload_tenants(
    node: &Node,
    config: Result<Config, String>,
    source: &str,
) -> Result<(), String> {
    let result = config.and_then(|c| {
        node.tenants.auth.reload(&c.auth_section())?;
        node.quotas
            .reload(&c.quotas_section(), &c.anonymous_quota, |name| {
                node.tenants.named(name)
            });
        Ok(())
    });
    let detail = match &result {
        Ok(()) => format!(
            "tenants reloaded (generation {})",
            node.tenants.auth.generation()
        ),
        Err(e) => format!("reload failed, the tenants before it stay: {e}"),
    };
    node.audit.record(&AuditEvent {
        event: AuditKind::PolicyReload,
        protocol: source,
        peer: None,
        tenant: "admin",
        action: "reload tenants",
        detail: &detail,
    });
    result
}

/// A reconfiguration that was done.
#[derive(Clone, Debug, PartialEq)]
pub struct Reconfigured {
    pub slot: u16,
    pub accelerator: String,
    /// From the request to the reopened slot: the device's load, the drain of the
    /// calls queued before it and the swap.
    pub took: Duration,
    /// The device's part: preparing the image (an OpenCL build, …), while the slot
    /// still served the old accelerator.
    pub load: Duration,
    /// The device had built this image before and reused it.
    pub cached: bool,
    /// The time the load stands for on real hardware, when the device models one.
    pub modelled: Option<Duration>,
}

impl Reconfigured {
    /// The reply document: `{"slot", "accelerator", "reconfig_ms", "load_ms",
    /// "cached", "modelled_ms"}`.
    pub fn json(&self) -> Vec<u8> {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        serde_json::to_vec(&json!({
            "slot": self.slot,
            "accelerator": self.accelerator,
            "reconfig_ms": ms(self.took),
            "load_ms": ms(self.load),
            "cached": self.cached,
            "modelled_ms": self.modelled.map(ms),
        }))
        .expect("JSON")
    }
}

/// Why an admin operation was refused or failed, with the status to answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminError {
    pub status: Status,
    pub message: String,
    /// The registry refused the reconfiguration: HTTP answers `409 CONFLICT`; RAC has
    /// no such status and answers `status` (`UNAUTHORIZED`).
    pub conflict: bool,
}

impl AdminError {
    fn new(status: Status, message: String) -> AdminError {
        AdminError {
            status,
            message,
            conflict: false,
        }
    }
}

/// Who asks for a reconfiguration, as far as the registry is concerned (see the
/// module docs). The default: nobody in particular, ask the registry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// The function instance asking (HTTP `X-Netaccel-Instance`); the registry lets
    /// an instance reconfigure the slot it is bound to.
    pub instance: Option<String>,
    pub validation: Validation,
}

/// Whether and how a reconfiguration is put to the registry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Validation {
    /// Ask; refuse what the registry refuses, and refuse when it cannot be asked.
    #[default]
    Ask,
    /// Ask as the registry's admin (`registry_token`), which makes the registry allow
    /// it and migrate the instances displaced; go ahead when it cannot be asked.
    Force,
    /// The registry itself is reconfiguring the slot: it has validated the change.
    Validated,
}

/// The value of the HTTP header `X-Netaccel-Reconfiguration` that forces a
/// reconfiguration.
pub const FORCE: &str = "force";
/// The value the registry sends with its own reconfigurations.
pub const VALIDATED: &str = "validated";

impl Origin {
    /// The origin of a reconfiguration request that passed the admin token check
    /// ([`authorized`]), from its `X-Netaccel-Reconfiguration` value and instance id.
    /// `force` and `validated` are trusted only from a holder of the node's admin
    /// token: without one configured, `force` is refused and `validated` is asked
    /// about like any request.
    pub fn new(
        config: &Config,
        reconfiguration: Option<&str>,
        instance: Option<&str>,
    ) -> Result<Origin, String> {
        let token = config.admin_token.is_some();
        let validation = match reconfiguration.map(str::trim) {
            None => Validation::Ask,
            Some(FORCE) if token => Validation::Force,
            Some(FORCE) => {
                return Err("a forced reconfiguration needs the node's admin token, and this                      node has none configured (admin_token)"
                    .to_string())
            }
            Some(VALIDATED) if token => Validation::Validated,
            Some(VALIDATED) => Validation::Ask,
            Some(other) => {
                return Err(format!(
                    "X-Netaccel-Reconfiguration must be `{FORCE}` or `{VALIDATED}`, not {other:?}"
                ))
            }
        };
        if let Some(id) = instance {
            crate::registry::check_name("the instance id", id)?;
        }
        Ok(Origin {
            instance: instance.map(String::from),
            validation,
        })
    }
}

/// Loads accelerator `accelerator` (by catalog name) into slot `slot`, and returns
/// once the slot admits calls for it again. Calls queued at the slot before run on the
/// old accelerator first; calls arriving meanwhile are refused `UNAVAILABLE`.
///
/// The caller must have checked [`authorized`]. Refused: `BAD_REQUEST` (no such slot),
/// `UNKNOWN_ACCELERATOR` (not in the catalog), `BAD_REQUEST` (the slot's device cannot
/// host it), `UNAVAILABLE` (the slot is already
/// reconfiguring, or shutting down); `INTERNAL` if the reconfiguration itself failed.
/// With a registry, also as the module docs say: refused when the registry refuses
/// ([`AdminError::conflict`]) or cannot be asked. The waits run on blocking threads,
/// never on the caller's network thread.
pub async fn reconfigure(
    node: Arc<Node>,
    slot: u16,
    accelerator: String,
    origin: Origin,
) -> Result<Reconfigured, AdminError> {
    let dispatcher = Arc::clone(&node.dispatcher);
    let target = dispatcher
        .slots()
        .get(usize::from(slot))
        .cloned()
        .ok_or_else(|| {
            AdminError::new(Status::BadRequest, format!("no slot {slot} on this node"))
        })?;
    let accel = dispatcher
        .catalog()
        .by_name(&accelerator)
        .cloned()
        .ok_or_else(|| {
            AdminError::new(
                Status::UnknownAccelerator,
                format!("no accelerator named {accelerator} in the catalog"),
            )
        })?;
    let device = node.devices.of_slot(slot).ok_or_else(|| {
        AdminError::new(
            Status::Internal,
            format!("slot {slot} belongs to no device"),
        )
    })?;
    node.devices
        .with_hostable(&accel, |h| device.backend.hosts(h))
        .map_err(|e| {
            AdminError::new(
                Status::BadRequest,
                format!("slot {slot} is on device {}: {e}", device.name),
            )
        })?;
    let backend = Arc::clone(&device.backend);
    ask_registry(&node, &target.info(), &accelerator, origin).await?;
    let started = std::time::Instant::now();
    let loader = Arc::clone(&node);
    let (load, drained) = tokio::task::spawn_blocking(move || {
        let load = loader
            .devices
            .with_hostable(&accel, |h| backend.load(slot, h))
            .map_err(|e| {
                AdminError::new(
                    Status::Internal,
                    format!(
                        "loading {} into slot {slot} failed: {e}",
                        accel.descriptor().name
                    ),
                )
            })?;
        let image = Arc::clone(&load.image);
        let drained = target
            .reconfigure(accel, image)
            .map_err(|message| AdminError::new(Status::Unavailable, message))?;
        Ok::<_, AdminError>((load, drained))
    })
    .await
    .map_err(|e| AdminError::new(Status::Internal, format!("reconfiguration failed: {e}")))??;
    let done = Reconfigured {
        slot,
        accelerator,
        took: started.elapsed().max(drained),
        load: load.took,
        cached: load.cached,
        modelled: load.modelled,
    };
    let took = done.took;
    tracing::info!(
        slot,
        accelerator = %done.accelerator,
        reconfig_ms = took.as_secs_f64() * 1e3,
        load_ms = done.load.as_secs_f64() * 1e3,
        cached = done.cached,
        "slot reconfigured"
    );
    if let Some(registry) = &node.registry {
        // The registry should see what the slot holds now, not at the next renewal.
        registry.renew_soon();
    }
    Ok(done)
}

/// Puts the reconfiguration of `slot` to `accelerator` to the node's registry, if it
/// has one and the slot would hold something else, and decides from the answer (see
/// the module docs).
async fn ask_registry(
    node: &Node,
    slot: &SlotInfo,
    accelerator: &str,
    origin: Origin,
) -> Result<(), AdminError> {
    let Some(registry) = node.registry.clone() else {
        return Ok(());
    };
    if origin.validation == Validation::Validated {
        return Ok(());
    }
    if let Some(loading) = &slot.reconfiguring_to {
        // Asking now would have the registry migrate instances for a change that the
        // slot is about to refuse.
        return Err(AdminError::new(
            Status::Unavailable,
            format!("slot {} is already loading {loading}", slot.id),
        ));
    }
    if slot.accelerator == accelerator {
        // Nothing changes for the instances bound to the slot.
        return Ok(());
    }
    let force = origin.validation == Validation::Force;
    let (device, id, to) = (slot.device.clone(), slot.id, accelerator.to_string());
    let verdict = tokio::task::spawn_blocking(move || {
        registry.validate(&device, id, &to, origin.instance.as_deref(), force)
    })
    .await
    .map_err(|e| AdminError::new(Status::Internal, format!("asking the registry failed: {e}")))?;
    match verdict {
        Verdict::Allowed { migrated } => {
            tracing::info!(
                slot = id,
                accelerator,
                ?migrated,
                "the registry allowed the reconfiguration"
            );
            Ok(())
        }
        Verdict::Refused(reason) => Err(AdminError {
            status: Status::Unauthorized,
            message: format!("the registry refused to let slot {id} load {accelerator}: {reason}"),
            conflict: true,
        }),
        Verdict::Invalid(why) => Err(AdminError::new(
            Status::BadRequest,
            format!("the registry found the reconfiguration request invalid: {why}"),
        )),
        Verdict::Unvalidated(why) if force => {
            tracing::warn!(
                slot = id,
                accelerator,
                "forced reconfiguration without the registry's validation: {why}"
            );
            Ok(())
        }
        Verdict::Unvalidated(why) => Err(AdminError::new(
            Status::Unavailable,
            format!(
                "the registry could not validate loading {accelerator} into slot {id}: {why}. \
                 Retry later, or force it over HTTP with the admin token and \
                 `X-Netaccel-Reconfiguration: {FORCE}`"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_token_is_needed_only_when_configured() {
        let open = Config::default();
        assert!(authorized(&open, None));
        assert!(authorized(&open, Some("anything")));
        let locked = Config::from_toml("admin_token = \"abc\"").unwrap();
        assert!(authorized(&locked, Some("abc")));
        for wrong in [None, Some("abd"), Some("ab"), Some("abcd"), Some("")] {
            assert!(!authorized(&locked, wrong), "{wrong:?}");
        }
    }

    #[test]
    fn a_missing_and_a_wrong_admin_token_are_told_apart_without_the_token() {
        let locked = Config::from_toml("admin_token = \"s3cret\"").unwrap();
        assert_eq!(check_token(&locked, Some("s3cret")), Ok(()));
        assert_eq!(check_token(&locked, None), Err(TokenRefusal::Missing));
        assert_eq!(check_token(&locked, Some("")), Err(TokenRefusal::Wrong));
        assert_eq!(
            check_token(&locked, Some("guess")),
            Err(TokenRefusal::Wrong)
        );
        assert_eq!(check_token(&Config::default(), None), Ok(()));
        let needs = "load needs the node's admin token";
        assert_eq!(TokenRefusal::Missing.message(needs, "load"), needs);
        let wrong = TokenRefusal::Wrong.message(needs, "load");
        assert_ne!(wrong, needs);
        assert!(wrong.contains("not this node's admin token"), "{wrong}");
        assert!(
            !wrong.contains("s3cret") && !wrong.contains("guess"),
            "{wrong}"
        );
    }

    #[test]
    fn reconfiguration_reports_what_it_did_and_refuses_what_it_cannot() {
        let config = Config::from_toml("[[slots]]\naccelerator = \"echo\"").unwrap();
        let gate = Arc::new(crate::front::opencl::OpenClGate::default());
        let node = Node::new(config, gate).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let done = rt
            .block_on(reconfigure(
                Arc::clone(&node),
                0,
                "topk".to_string(),
                Origin::default(),
            ))
            .unwrap();
        assert_eq!((done.slot, done.accelerator.as_str()), (0, "topk"));
        let doc: serde_json::Value = serde_json::from_slice(&done.json()).unwrap();
        assert_eq!(
            (doc["slot"].as_u64(), doc["accelerator"].as_str()),
            (Some(0), Some("topk"))
        );
        assert!(doc["reconfig_ms"].as_f64().is_some());
        let slots: serde_json::Value = serde_json::from_slice(&slots_json(&node, Some(0))).unwrap();
        assert_eq!(slots["accelerator"], "topk");

        let refused = |slot, name: &str| {
            rt.block_on(reconfigure(
                Arc::clone(&node),
                slot,
                name.to_string(),
                Origin::default(),
            ))
            .unwrap_err()
            .status
        };
        assert_eq!(refused(1, "echo"), Status::BadRequest);
        assert_eq!(refused(0, "nope"), Status::UnknownAccelerator);
        node.dispatcher.stop();
        assert_eq!(refused(0, "echo"), Status::Unavailable);
    }
}
