//! Where the registry's state lives: the [`Store`] trait and the in-memory store.
//!
//! The state is a set of JSON objects under keys (`nodes/NAME`, `functions/NAME`,
//! `instances/ID`, `meta`), and the store has one revision for all of them. The
//! registry keeps the whole state in memory as a cache of the store: it applies a
//! transaction to its cache, then commits the transaction's changes with
//! [`Store::commit`], which succeeds only if the store is still at the revision the
//! cache was built from (compare-and-set). A failed commit means another writer got
//! there first (in a replicated setup: this replica is no longer the leader); the
//! registry then reloads its cache from the store with [`Store::load`] and refuses the
//! request. That is all the etcd store ([`crate::etcd`]) provides — one transaction
//! comparing a revision key and putting/deleting the changed keys — so allocation and
//! the routes do not know which store they run on.
//!
//! Soft state (lease deadlines, busy ratios, reconfigurations in flight) is not
//! stored: nodes report it again within a third of a lease.

use std::collections::BTreeMap;
use std::sync::Mutex;

use futures_util::future::BoxFuture;

use crate::model::{FunctionRecord, InstanceRecord, Meta, NodeRecord};

/// Revision of the whole state; 0 for an empty store.
pub type Revision = u64;

/// One change of a transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    PutNode(NodeRecord),
    DeleteNode(String),
    PutFunction(FunctionRecord),
    DeleteFunction(String),
    PutInstance(InstanceRecord),
    DeleteInstance(String),
    PutMeta(Meta),
}

const NODES: &str = "nodes/";
const FUNCTIONS: &str = "functions/";
const INSTANCES: &str = "instances/";
const META: &str = "meta";

impl Change {
    /// The key this change writes, relative to the store's prefix.
    pub fn key(&self) -> String {
        match self {
            Change::PutNode(n) => format!("{NODES}{}", n.name),
            Change::DeleteNode(name) => format!("{NODES}{name}"),
            Change::PutFunction(f) => format!("{FUNCTIONS}{}", f.name),
            Change::DeleteFunction(name) => format!("{FUNCTIONS}{name}"),
            Change::PutInstance(i) => format!("{INSTANCES}{}", i.id),
            Change::DeleteInstance(id) => format!("{INSTANCES}{id}"),
            Change::PutMeta(_) => META.to_string(),
        }
    }

    /// The serialised value, or `None` for a deletion.
    pub fn value(&self) -> Option<Vec<u8>> {
        let json = match self {
            Change::PutNode(n) => serde_json::to_vec(n),
            Change::PutFunction(f) => serde_json::to_vec(f),
            Change::PutInstance(i) => serde_json::to_vec(i),
            Change::PutMeta(m) => serde_json::to_vec(m),
            Change::DeleteNode(_) | Change::DeleteFunction(_) | Change::DeleteInstance(_) => {
                return None
            }
        };
        Some(json.expect("records serialise"))
    }
}

/// Everything a store holds, decoded. Also what a follower without a shared store
/// copies from its leader (`GET /v1/snapshot`, see `follow`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    pub revision: Revision,
    pub nodes: Vec<NodeRecord>,
    pub functions: Vec<FunctionRecord>,
    pub instances: Vec<InstanceRecord>,
    pub meta: Meta,
}

impl Snapshot {
    /// Decodes `(key, value)` pairs as stores keep them. Every store uses this, so
    /// the key layout has one home.
    pub fn from_entries<'a>(
        revision: Revision,
        entries: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Result<Snapshot, StoreError> {
        fn decode<T: serde::de::DeserializeOwned>(key: &str, v: &[u8]) -> Result<T, StoreError> {
            serde_json::from_slice(v).map_err(|e| StoreError::Corrupt(format!("{key}: {e}")))
        }
        let mut snap = Snapshot {
            revision,
            ..Snapshot::default()
        };
        for (key, value) in entries {
            if key.starts_with(NODES) {
                snap.nodes.push(decode(key, value)?);
            } else if key.starts_with(FUNCTIONS) {
                snap.functions.push(decode(key, value)?);
            } else if key.starts_with(INSTANCES) {
                snap.instances.push(decode(key, value)?);
            } else if key == META {
                snap.meta = decode(key, value)?;
            } else {
                return Err(StoreError::Corrupt(format!("unexpected key {key}")));
            }
        }
        Ok(snap)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum StoreError {
    /// The store moved on since `expected`: someone else wrote.
    Conflict {
        expected: Revision,
        actual: Revision,
    },
    /// The store cannot be reached or refused the request.
    Unavailable(String),
    /// A stored object does not decode.
    Corrupt(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Conflict { expected, actual } => write!(
                f,
                "the store is at revision {actual}, not {expected}: another registry wrote"
            ),
            StoreError::Unavailable(why) => write!(f, "the store is unavailable: {why}"),
            StoreError::Corrupt(why) => write!(f, "the store holds a bad object: {why}"),
        }
    }
}

/// Persistent state with compare-and-set commits. See the module documentation.
pub trait Store: Send + Sync + 'static {
    /// Everything, with the revision it is at.
    fn load(&self) -> BoxFuture<'_, Result<Snapshot, StoreError>>;
    /// Applies `changes` atomically if the store is at `expected`; the new revision.
    fn commit<'a>(
        &'a self,
        expected: Revision,
        changes: &'a [Change],
    ) -> BoxFuture<'a, Result<Revision, StoreError>>;
    /// What it is, for logs (`memory`, `etcd://…`).
    fn describe(&self) -> String;
    /// Replaces everything with `snapshot`: a follower copying its leader's state
    /// into a store nobody else shares. A shared store refuses (its followers watch
    /// it instead).
    fn replace(&self, _snapshot: &Snapshot) -> Result<(), StoreError> {
        Err(StoreError::Unavailable(format!(
            "{} is shared: followers watch it",
            self.describe()
        )))
    }
}

/// The default store: one registry, state lost on restart and rebuilt from the nodes'
/// leases. Objects are kept serialised, as an external store keeps them, so what
/// works here round-trips through any store.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<(Revision, BTreeMap<String, Vec<u8>>)>,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }
}

impl Store for MemoryStore {
    fn load(&self) -> BoxFuture<'_, Result<Snapshot, StoreError>> {
        let inner = self.inner.lock().expect("store lock");
        let result = Snapshot::from_entries(
            inner.0,
            inner.1.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
        );
        Box::pin(std::future::ready(result))
    }

    fn commit<'a>(
        &'a self,
        expected: Revision,
        changes: &'a [Change],
    ) -> BoxFuture<'a, Result<Revision, StoreError>> {
        let mut inner = self.inner.lock().expect("store lock");
        let result = if inner.0 != expected {
            Err(StoreError::Conflict {
                expected,
                actual: inner.0,
            })
        } else {
            for change in changes {
                match change.value() {
                    Some(v) => inner.1.insert(change.key(), v),
                    None => inner.1.remove(&change.key()),
                };
            }
            inner.0 += 1;
            Ok(inner.0)
        };
        Box::pin(std::future::ready(result))
    }

    fn describe(&self) -> String {
        "memory".to_string()
    }

    fn replace(&self, snapshot: &Snapshot) -> Result<(), StoreError> {
        let changes = snapshot
            .nodes
            .iter()
            .cloned()
            .map(Change::PutNode)
            .chain(snapshot.functions.iter().cloned().map(Change::PutFunction))
            .chain(snapshot.instances.iter().cloned().map(Change::PutInstance))
            .chain([Change::PutMeta(snapshot.meta.clone())]);
        let entries: BTreeMap<String, Vec<u8>> = changes
            .map(|c| (c.key(), c.value().expect("puts have values")))
            .collect();
        *self.inner.lock().expect("store lock") = (snapshot.revision, entries);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NodeState, Query, SlotRef};

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn memory_store_round_trips_and_refuses_stale_writers() {
        let store = MemoryStore::new();
        let node = NodeRecord {
            name: "n1".into(),
            http: "127.0.0.1:1".parse().unwrap(),
            rac: "127.0.0.1:2".parse().unwrap(),
            opencl: None,
            extra: Default::default(),
            state: NodeState::Ready,
            devices: vec![],
        };
        let function = FunctionRecord {
            name: "f".into(),
            accelerator: "sobel".into(),
            hash: None,
            query: Query::default(),
        };
        let instance = InstanceRecord {
            id: "f-1".into(),
            function: "f".into(),
            binding: Some(SlotRef {
                node: "n1".into(),
                device: "cpu0".into(),
                slot: 3,
            }),
            generation: 2,
            pinned: false,
        };
        let changes = vec![
            Change::PutNode(node.clone()),
            Change::PutFunction(function.clone()),
            Change::PutInstance(instance.clone()),
            Change::PutMeta(Meta { next_instance: 2 }),
        ];
        assert_eq!(block_on(store.commit(0, &changes)), Ok(1));
        let snap = block_on(store.load()).unwrap();
        assert_eq!(snap.revision, 1);
        assert_eq!(snap.nodes, vec![node]);
        assert_eq!(snap.functions, vec![function]);
        assert_eq!(snap.instances, vec![instance]);
        assert_eq!(snap.meta.next_instance, 2);
        // A writer still at revision 0 is refused and changes nothing.
        let stale = [Change::DeleteNode("n1".into())];
        assert_eq!(
            block_on(store.commit(0, &stale)),
            Err(StoreError::Conflict {
                expected: 0,
                actual: 1
            })
        );
        assert_eq!(block_on(store.load()).unwrap().nodes.len(), 1);
        assert_eq!(block_on(store.commit(1, &stale)), Ok(2));
        assert!(block_on(store.load()).unwrap().nodes.is_empty());
        // A follower's copy: the snapshot as JSON (GET /v1/snapshot) replaces it all,
        // revision included, and commits go on from there.
        let json = serde_json::to_string(&snap).unwrap();
        let copy = MemoryStore::new();
        copy.replace(&serde_json::from_str(&json).unwrap()).unwrap();
        assert_eq!(block_on(copy.load()).unwrap(), snap);
        assert_eq!(block_on(copy.commit(1, &stale)), Ok(2));
    }
}
