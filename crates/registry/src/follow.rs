//! Followers that answer reads: a replica that does not lead, and whose store nobody
//! shares (the in-memory store with the Kubernetes Lease election), copies the
//! leader's state and serves the `GET` routes from it. Writes still go to the leader
//! (`503 NOT_LEADER` with its `Location`).
//!
//! How fresh. Every [`PERIOD`] the follower asks the leader for `GET /v1/snapshot?
//! after=R` (R: the revision it holds), which answers `304` when nothing was stored
//! since, else every record. A follower's answer is therefore at most one period plus
//! one round trip behind what the leader has stored, while the leader answers; when
//! it does not, the follower keeps answering from the last copy (and the election
//! soon names another leader). What is never stored is not copied: slots' busy ratios
//! and queue depths read 0 on a follower, and its long polls wake when a copy changes
//! an instance.
//!
//! With etcd, followers watch etcd itself (`ha`); this module is not used.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info};

use crate::registry::Registry;
use crate::store::Snapshot;

/// How often a follower asks its leader for changes.
pub const PERIOD: Duration = Duration::from_millis(500);
/// A snapshot larger than this is refused (the bounds on nodes, functions and
/// instances keep a real one well below).
pub const SNAPSHOT_BYTES_MAX: u64 = 256 << 20;
/// How long one request to the leader may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Copies the leader's state while this replica follows; `identity` is this
/// replica's own URL (it never asks itself).
pub fn spawn(registry: Arc<Registry>, identity: String) {
    tokio::spawn(async move {
        let agent = ureq::AgentBuilder::new().timeout(TIMEOUT).build();
        let mut failing = false;
        loop {
            // A read about to answer 404 asks for a round now (crate::freshness).
            tokio::select! {
                _ = tokio::time::sleep(PERIOD) => {}
                _ = registry.refresh.wanted() => {}
            }
            registry
                .refresh
                .round(copy_once(&registry, &identity, &agent, &mut failing))
                .await;
        }
    });
}

/// One round: copies the leader's state if it changed (nothing while this replica
/// leads or knows no other leader).
async fn copy_once(registry: &Registry, identity: &str, agent: &ureq::Agent, failing: &mut bool) {
    if registry.is_leader() {
        return;
    }
    let Some(leader) = registry.leader_url().filter(|l| *l != identity) else {
        return;
    };
    let revision = registry.lock().await.revision;
    let url = format!(
        "{}/v1/snapshot?after={revision}",
        leader.trim_end_matches('/')
    );
    let agent = agent.clone();
    let fetched = tokio::task::spawn_blocking(move || fetch(&agent, &url))
        .await
        .unwrap_or_else(|e| Err(format!("the fetch failed: {e}")));
    match fetched {
        Ok(None) => {}
        Ok(Some(snapshot)) => {
            if let Err(e) = registry.follow(&snapshot).await {
                debug!(error = %e, "cannot take the leader's state");
            }
        }
        Err(e) => {
            if !*failing {
                info!(%leader, error = %e, "cannot copy the leader's state; reads answer the last copy");
            }
            *failing = true;
            return;
        }
    }
    if *failing {
        info!(%leader, "copying the leader's state again");
    }
    *failing = false;
}

/// `Ok(None)`: nothing changed since the revision asked about.
fn fetch(agent: &ureq::Agent, url: &str) -> Result<Option<Snapshot>, String> {
    let response = agent.get(url).call().map_err(|e| e.to_string())?;
    if response.status() == 304 {
        return Ok(None);
    }
    let reader = response.into_reader().take(SNAPSHOT_BYTES_MAX);
    serde_json::from_reader(reader)
        .map(Some)
        .map_err(|e| format!("the leader's snapshot does not decode: {e}"))
}
