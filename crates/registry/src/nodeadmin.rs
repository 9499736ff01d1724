//! How the registry reconfigures a slot: the node's admin API, `PUT /v1/slots/{id}`
//! with `{"accelerator":"NAME"}` (docs/http-api.md), answered `200` once the slot has
//! drained its queued calls and loaded the new accelerator. With the node's admin token
//! it sends `X-Netaccel-Reconfiguration: validated` (docs/registry-node.md), so a node
//! started with `--registry` does not ask the registry about the registry's own change.
//!
//! Behind a trait so allocation and migration can be tested with a node that always
//! (or never) agrees, without sockets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

/// Reconfigures slots of nodes.
pub trait NodeAdmin: Send + Sync + 'static {
    /// Loads `accelerator` into slot `slot` of the node whose HTTP front end is at
    /// `node`; an error is a sentence saying why not.
    fn reconfigure(
        &self,
        node: SocketAddr,
        slot: crate::model::SlotId,
        accelerator: &str,
    ) -> BoxFuture<'static, Result<(), String>>;
}

/// The real thing, over HTTP/1.1.
pub struct HttpNodeAdmin {
    agent: ureq::Agent,
    token: Option<Arc<str>>,
}

impl HttpNodeAdmin {
    /// `token` is sent as `Authorization: Bearer` (nodes started with an admin token
    /// require it); `timeout` bounds the whole exchange, reconfiguration included.
    pub fn new(token: Option<String>, timeout: Duration) -> HttpNodeAdmin {
        HttpNodeAdmin {
            agent: ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_secs(2).min(timeout))
                .timeout(timeout)
                .build(),
            token: token.map(Arc::from),
        }
    }
}

impl NodeAdmin for HttpNodeAdmin {
    fn reconfigure(
        &self,
        node: SocketAddr,
        slot: crate::model::SlotId,
        accelerator: &str,
    ) -> BoxFuture<'static, Result<(), String>> {
        let agent = self.agent.clone();
        let token = self.token.clone();
        let accelerator = accelerator.to_string();
        Box::pin(async move {
            // ureq blocks; reconfigurations are rare and bounded in time, so a thread
            // of tokio's blocking pool each is the simple choice.
            let call = tokio::task::spawn_blocking(move || {
                let mut request = agent.put(&format!("http://{node}/v1/slots/{slot}"));
                if let Some(t) = &token {
                    // The registry validated this reconfiguration itself: a node that
                    // asks the registry first (`--registry`) need not ask back.
                    request = request
                        .set("Authorization", &format!("Bearer {t}"))
                        .set("X-Netaccel-Reconfiguration", "validated");
                }
                match request.send_json(serde_json::json!({ "accelerator": accelerator })) {
                    Ok(_) => Ok(()),
                    Err(ureq::Error::Status(code, response)) => {
                        let body: serde_json::Value = response.into_json().unwrap_or_default();
                        let why = body["error"].as_str().unwrap_or("no reason given");
                        Err(format!("node {node} answered {code} to loading {accelerator} into slot {slot}: {why}"))
                    }
                    Err(e) => Err(format!("node {node} unreachable: {e}")),
                }
            });
            call.await
                .unwrap_or_else(|e| Err(format!("reconfiguration task failed: {e}")))
        })
    }
}
