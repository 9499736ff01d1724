//! The etcd store: the registry's records in a real etcd, so several replicas share
//! one state and a replica that dies loses nothing.
//!
//! Layout under the prefix (default `netaccel-registry/`): `state/…` holds the
//! records with the key layout of [`crate::store`], `state-revision` is a key every
//! commit rewrites, and `election` is the election the replicas campaign in
//! ([`crate::ha`]). The store's [`Revision`] is the etcd mod revision of
//! `state-revision` (0 before the first commit): a commit is one etcd transaction
//! that compares it with the revision the cache was built from and, when equal, puts
//! and deletes the changed keys and rewrites `state-revision`, all at one new etcd
//! revision, which becomes the store's.
//!
//! Fencing: a replica that believes it leads but lost its lease (a long pause, a
//! partition) must not write over the new leader. Every commit therefore also
//! requires that this replica's election key still exists — it lives only as long as
//! the replica's lease — and a replica that holds no election key cannot commit.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};
use futures_util::future::BoxFuture;

use crate::store::{Change, Revision, Snapshot, Store, StoreError};

/// The records, under the prefix.
const STATE: &str = "state/";
/// Rewritten by every commit; its mod revision is the store's revision.
const STATE_REVISION: &str = "state-revision";
/// The election's name, under the prefix.
pub const ELECTION: &str = "election";

/// Parses `etcd://HOST:PORT[,HOST:PORT…]` into the endpoints the client dials.
pub fn parse_endpoints(url: &str) -> Result<Vec<String>, String> {
    let rest = url
        .strip_prefix("etcd://")
        .ok_or_else(|| format!("--store {url}: expected `memory` or etcd://HOST:PORT[,…]"))?;
    let endpoints: Vec<String> = rest
        .split(',')
        .map(|e| e.trim().trim_end_matches('/'))
        .map(|e| {
            let ok = e
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if ok {
                Ok(format!("http://{e}"))
            } else {
                Err(format!("--store {url}: `{e}` is not HOST:PORT"))
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(endpoints)
}

pub struct EtcdStore {
    client: Client,
    prefix: String,
    endpoints: Vec<String>,
    /// This replica's election key while it leads (see the module documentation).
    fence: Mutex<Option<Vec<u8>>>,
}

fn unavailable(e: etcd_client::Error) -> StoreError {
    StoreError::Unavailable(format!("etcd: {e}"))
}

/// Longest wait for etcd's answer to one read or transaction. A request that reached
/// etcd while its members were electing a new Raft leader (the old one killed) is
/// answered only at etcd's own request timeout, about 7 s later, although the new
/// leader is there within a second or two; giving up sooner lets the caller try again
/// (docs/jepsen.md, anomaly 5). A transaction given up on is of unknown outcome, as
/// any whose answer is lost.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// `request`, answered within [`REQUEST_TIMEOUT`].
async fn bounded<T>(
    request: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(answer) => answer.map_err(unavailable),
        Err(_) => Err(StoreError::Unavailable(format!(
            "etcd did not answer within {} s",
            REQUEST_TIMEOUT.as_secs()
        ))),
    }
}

impl EtcdStore {
    /// Connects to `endpoints` (`http://HOST:PORT`), keeping keys under `prefix`.
    pub async fn connect(endpoints: Vec<String>, prefix: String) -> Result<EtcdStore, String> {
        let client = Client::connect(&endpoints, None)
            .await
            .map_err(|e| format!("cannot connect to etcd at {}: {e}", endpoints.join(",")))?;
        Ok(EtcdStore {
            client,
            prefix,
            endpoints,
            fence: Mutex::new(None),
        })
    }

    /// A client on the same connection, for the election and the watch.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The full key of `name` under the prefix.
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The prefix of the records, which followers watch.
    pub fn state_prefix(&self) -> String {
        self.key(STATE)
    }

    /// Sets (or, with `None`, clears) the election key that commits require.
    pub fn set_fence(&self, key: Option<Vec<u8>>) {
        *self.fence.lock().expect("fence lock") = key;
    }
}

impl Store for EtcdStore {
    fn load(&self) -> BoxFuture<'_, Result<Snapshot, StoreError>> {
        Box::pin(async move {
            let mut client = self.client.clone();
            // One range read over the whole prefix: records and state-revision are
            // read at one etcd revision, so they agree.
            let response = bounded(client.get(
                self.prefix.as_bytes(),
                Some(GetOptions::new().with_prefix()),
            ))
            .await?;
            let state_prefix = self.state_prefix();
            let revision_key = self.key(STATE_REVISION);
            let mut revision: Revision = 0;
            let mut entries = Vec::new();
            for kv in response.kvs() {
                let key = std::str::from_utf8(kv.key())
                    .map_err(|_| StoreError::Corrupt("a key is not UTF-8".to_string()))?;
                if key == revision_key {
                    revision = kv.mod_revision() as Revision;
                } else if let Some(rest) = key.strip_prefix(&state_prefix) {
                    entries.push((rest, kv.value()));
                }
            }
            Snapshot::from_entries(revision, entries)
        })
    }

    fn commit<'a>(
        &'a self,
        expected: Revision,
        changes: &'a [Change],
    ) -> BoxFuture<'a, Result<Revision, StoreError>> {
        Box::pin(async move {
            let Some(fence) = self.fence.lock().expect("fence lock").clone() else {
                return Err(StoreError::Unavailable(
                    "this replica is not the leader".to_string(),
                ));
            };
            let revision_key = self.key(STATE_REVISION);
            // A transaction may change one key twice; etcd refuses that, and only the
            // last change counts anyway.
            let mut last: BTreeMap<String, &Change> = BTreeMap::new();
            for change in changes {
                last.insert(change.key(), change);
            }
            let mut ops: Vec<TxnOp> = last
                .into_iter()
                .map(|(key, change)| {
                    let key = format!("{}{key}", self.state_prefix());
                    match change.value() {
                        Some(value) => TxnOp::put(key, value, None),
                        None => TxnOp::delete(key, None),
                    }
                })
                .collect();
            ops.push(TxnOp::put(revision_key.clone(), Vec::new(), None));
            let txn = Txn::new()
                .when(vec![
                    Compare::mod_revision(revision_key.clone(), CompareOp::Equal, expected as i64),
                    Compare::version(fence, CompareOp::Greater, 0),
                ])
                .and_then(ops);
            let mut client = self.client.clone();
            let response = bounded(client.txn(txn)).await?;
            if response.succeeded() {
                let revision = response.header().map_or(0, |h| h.revision());
                return Ok(revision as Revision);
            }
            // Refused: either someone else wrote or this replica's lease is gone.
            let now = bounded(client.get(revision_key, None))
                .await?
                .kvs()
                .first()
                .map_or(0, |kv| kv.mod_revision() as Revision);
            if now != expected {
                Err(StoreError::Conflict {
                    expected,
                    actual: now,
                })
            } else {
                Err(StoreError::Unavailable(
                    "this replica's election lease ended: it is no longer the leader".to_string(),
                ))
            }
        })
    }

    fn describe(&self) -> String {
        format!(
            "etcd://{} (prefix {})",
            self.endpoints
                .iter()
                .map(|e| e.trim_start_matches("http://"))
                .collect::<Vec<_>>()
                .join(","),
            self.prefix
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        assert_eq!(
            parse_endpoints("etcd://127.0.0.1:2379,[::1]:2380").unwrap(),
            vec!["http://127.0.0.1:2379", "http://[::1]:2380"]
        );
        for bad in [
            "127.0.0.1:2379",
            "etcd://",
            "etcd://host",
            "etcd://:1",
            "etcd://h:x",
        ] {
            assert!(parse_endpoints(bad).is_err(), "{bad}");
        }
    }
}
