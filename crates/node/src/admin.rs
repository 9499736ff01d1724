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
//! accelerator, swap, reopen — is the slot's ([`crate::slot::Slot::reconfigure`]);
//! this module finds the slot and the accelerator, runs the swap off the network
//! thread, logs it and words the reply.

use std::sync::Arc;
use std::time::Duration;

use rac_proto::Status;
use serde_json::json;

use crate::config::Config;
use crate::node::Node;
use crate::tenant::secret_eq;

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
                    let default = match p.default {
                        None => serde_json::Value::Null,
                        Some(accel::ParamValue::U32(v)) => json!(v),
                        Some(accel::ParamValue::F32(v)) => json!(v),
                    };
                    json!({ "name": p.name, "type": p.ty.as_str(), "default": default })
                })
                .collect();
            json!({
                "id": d.id,
                "name": d.name,
                "hash": d.hash,
                "params": params,
                "slots": node.dispatcher.slots_hosting(d.id),
            })
        })
        .collect();
    serde_json::to_vec(&list).expect("JSON")
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
                (None, true) => "busy",
                (None, false) => "idle",
            };
            json!({
                "id": info.id,
                "device": info.device,
                "accelerator": info.accelerator,
                "state": state,
                "loading": info.reconfiguring_to,
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
/// none) may reconfigure the node. Anyone may when the node has no admin token.
pub fn authorized(config: &Config, token: Option<&str>) -> bool {
    match &config.admin_token {
        None => true,
        Some(admin) => token.is_some_and(|given| secret_eq(given, admin)),
    }
}

/// A reconfiguration that was done.
#[derive(Clone, Debug, PartialEq)]
pub struct Reconfigured {
    pub slot: u16,
    pub accelerator: String,
    /// From the request to the reopened slot: the drain of the calls queued before it
    /// and the load itself.
    pub took: Duration,
}

impl Reconfigured {
    /// The reply document: `{"slot", "accelerator", "reconfig_ms"}`.
    pub fn json(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "slot": self.slot,
            "accelerator": self.accelerator,
            "reconfig_ms": self.took.as_secs_f64() * 1e3,
        }))
        .expect("JSON")
    }
}

/// Why an admin operation was refused or failed, with the status to answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminError {
    pub status: Status,
    pub message: String,
}

impl AdminError {
    fn new(status: Status, message: String) -> AdminError {
        AdminError { status, message }
    }
}

/// Loads accelerator `accelerator` (by catalog name) into slot `slot`, and returns
/// once the slot admits calls for it again. Calls queued at the slot before run on the
/// old accelerator first; calls arriving meanwhile are refused `UNAVAILABLE`.
///
/// The caller must have checked [`authorized`]. Refused: `BAD_REQUEST` (no such slot),
/// `UNKNOWN_ACCELERATOR` (not in the catalog), `UNAVAILABLE` (the slot is already
/// reconfiguring, or shutting down); `INTERNAL` if the reconfiguration itself failed.
/// The wait runs on a blocking thread, never on the caller's network thread.
pub async fn reconfigure(
    node: Arc<Node>,
    slot: u16,
    accelerator: String,
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
    let took = tokio::task::spawn_blocking(move || target.reconfigure(accel))
        .await
        .map_err(|e| AdminError::new(Status::Internal, format!("reconfiguration failed: {e}")))?
        .map_err(|message| AdminError::new(Status::Unavailable, message))?;
    let done = Reconfigured {
        slot,
        accelerator,
        took,
    };
    tracing::info!(slot, accelerator = %done.accelerator, reconfig_ms = took.as_secs_f64() * 1e3, "slot reconfigured");
    Ok(done)
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
    fn reconfiguration_reports_what_it_did_and_refuses_what_it_cannot() {
        let config = Config::from_toml("[[slots]]\naccelerator = \"echo\"").unwrap();
        let node = Node::new(config).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let done = rt
            .block_on(reconfigure(Arc::clone(&node), 0, "topk".to_string()))
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
            rt.block_on(reconfigure(Arc::clone(&node), slot, name.to_string()))
                .unwrap_err()
                .status
        };
        assert_eq!(refused(1, "echo"), Status::BadRequest);
        assert_eq!(refused(0, "nope"), Status::UnknownAccelerator);
        node.dispatcher.stop();
        assert_eq!(refused(0, "echo"), Status::Unavailable);
    }
}
