//! Deterministic regression tests for what bench/jepsen found (docs/jepsen.md,
//! "Anomalies found"): each fault is injected at the exact moment it matters, through
//! a seam — a store whose next commits or loads fail in a chosen way, or futures polled
//! one step at a time so that the registry's lock is taken in a chosen order — instead
//! of a cluster, a nemesis and luck. The registry runs in-process on the memory store.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures_util::future::BoxFuture;
use netaccel_registry::model::{FunctionSpec, InstanceSpec, NodeRegistration};
use netaccel_registry::nodeadmin::NodeAdmin;
use netaccel_registry::ops::Created;
use netaccel_registry::store::{Change, MemoryStore, Revision, Snapshot, Store, StoreError};
use netaccel_registry::{Config, Registry};
use serde_json::json;

/// What one commit does, as the test scripted it.
#[derive(Clone, Copy, Debug)]
enum CommitFault {
    /// Stored as asked.
    Pass,
    /// Not stored, and the store says so as etcd does when it cannot be reached.
    Refused,
    /// Stored, but the answer is lost on its way back (a member killed after the
    /// transaction was applied): the registry hears a failure.
    AnswerLost,
}

/// The seam: a memory store that plays the faults queued for its next commits and
/// loads, one per call, in order; with nothing queued it is the memory store.
#[derive(Default)]
struct SeamStore {
    inner: MemoryStore,
    commits: Mutex<VecDeque<CommitFault>>,
    /// `true`: that load fails.
    loads: Mutex<VecDeque<bool>>,
}

impl SeamStore {
    fn next_commits(&self, faults: &[CommitFault]) {
        self.commits.lock().unwrap().extend(faults);
    }

    fn next_loads_fail(&self, fails: &[bool]) {
        self.loads.lock().unwrap().extend(fails);
    }

    /// Whether every scripted fault was played.
    fn played(&self) -> bool {
        self.commits.lock().unwrap().is_empty() && self.loads.lock().unwrap().is_empty()
    }
}

fn unavailable() -> StoreError {
    StoreError::Unavailable("etcd: transport error (injected)".into())
}

impl Store for SeamStore {
    fn load(&self) -> BoxFuture<'_, Result<Snapshot, StoreError>> {
        if self.loads.lock().unwrap().pop_front() == Some(true) {
            return Box::pin(std::future::ready(Err(unavailable())));
        }
        self.inner.load()
    }

    fn commit<'a>(
        &'a self,
        expected: Revision,
        changes: &'a [Change],
    ) -> BoxFuture<'a, Result<Revision, StoreError>> {
        let fault = self
            .commits
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(CommitFault::Pass);
        Box::pin(async move {
            match fault {
                CommitFault::Pass => self.inner.commit(expected, changes).await,
                CommitFault::Refused => Err(unavailable()),
                CommitFault::AnswerLost => {
                    self.inner.commit(expected, changes).await?;
                    Err(unavailable())
                }
            }
        })
    }

    fn describe(&self) -> String {
        "seam".into()
    }
}

/// Nodes that take every reconfiguration at once (none happens here: every slot
/// already holds what the functions need).
struct Agree;

impl NodeAdmin for Agree {
    fn reconfigure(
        &self,
        _: SocketAddr,
        _: u16,
        _: &str,
    ) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Nodes whose reconfigurations wait for the test: each answers (yes) once the test
/// adds a permit; `asked` is rung when one is asked for.
struct Held {
    permits: Arc<tokio::sync::Semaphore>,
    asked: Arc<tokio::sync::Notify>,
}

impl Default for Held {
    fn default() -> Held {
        Held {
            permits: Arc::new(tokio::sync::Semaphore::new(0)),
            asked: Arc::default(),
        }
    }
}

impl NodeAdmin for Held {
    fn reconfigure(
        &self,
        _: SocketAddr,
        _: u16,
        _: &str,
    ) -> BoxFuture<'static, Result<(), String>> {
        let (permits, asked) = (self.permits.clone(), self.asked.clone());
        Box::pin(async move {
            asked.notify_one();
            permits.acquire().await.unwrap().forget();
            Ok(())
        })
    }
}

/// A leader on `store` with node `n1` (two `sobel` slots) and function `f` (`sobel`,
/// no instances yet).
async fn leader_on(store: Arc<SeamStore>) -> Arc<Registry> {
    leader_with(store, Arc::new(Agree)).await
}

async fn leader_with(store: Arc<SeamStore>, admin: Arc<dyn NodeAdmin>) -> Arc<Registry> {
    let config = Config {
        lease: std::time::Duration::from_secs(60),
        ..Config::default()
    };
    let reg = Registry::new(config, store, admin).await.unwrap();
    let node: NodeRegistration = serde_json::from_value(json!({
        "http": "127.0.0.1:10001",
        "rac": "127.0.0.1:20001",
        "devices": [{"id": "dev0", "backend": "cpu", "vendor": "v", "platform": "p", "slots": [
            {"id": 0, "accelerator": "sobel", "hash": "", "busy_ratio": 0.0, "queue_depth": 0},
            {"id": 1, "accelerator": "sobel", "hash": "", "busy_ratio": 0.0, "queue_depth": 0}]}],
    }))
    .unwrap();
    reg.register_node("n1", &node).await.unwrap();
    let spec: FunctionSpec =
        serde_json::from_value(json!({"accelerator": "sobel", "instances": 0})).unwrap();
    reg.put_function("f", &spec).await.unwrap();
    while reg.background_tasks() > 0 {
        tokio::task::yield_now().await;
    }
    reg
}

fn instance(id: &str) -> InstanceSpec {
    serde_json::from_value(json!({ "id": id })).unwrap()
}

/// The functions and instances as the cache holds them, and as the store does.
async fn cache_and_store(reg: &Registry, store: &SeamStore) -> (Snapshot, Snapshot) {
    let cache = reg.snapshot(None).await.expect("a snapshot");
    let stored = store.inner.load().await.unwrap();
    (cache, stored)
}

/// Anomaly 7: a POST whose instance was created (stored, and readable by anyone)
/// and whose placement's commit then failed deleted the instance as cleanup — with
/// etcd an answer lost in transit says nothing about whether the transaction was
/// applied, and in any case others may have read the instance already. The history
/// then showed the instance, then no instance, with no DELETE. Whatever the
/// placement's fate, the creation stands, and the answer says it may.
#[test]
fn a_post_whose_placement_commit_failed_keeps_the_instance_it_created() {
    use CommitFault::{AnswerLost, Pass, Refused};
    for placement in [AnswerLost, Refused] {
        rt().block_on(async {
            let store = Arc::new(SeamStore::default());
            let reg = leader_on(store.clone()).await;
            // The POST's two commits: the creation, then the placement.
            store.next_commits(&[Pass, placement]);
            let err = match reg.create_instance("f", &instance("x")).await {
                Err(e) => e,
                Ok(_) => panic!("{placement:?}: the POST succeeded"),
            };
            assert!(
                store.played(),
                "{placement:?}: the faults were not all played"
            );
            let (cache, stored) = cache_and_store(&reg, &store).await;
            let placed = stored.instances.iter().find(|i| i.id == "x");
            let placed = placed.unwrap_or_else(|| {
                panic!("{placement:?}: the created instance was deleted: {stored:?}")
            });
            // Stored with its binding when the answer was lost, unbound when refused.
            assert_eq!(
                placed.binding.is_some(),
                matches!(placement, AnswerLost),
                "{placement:?}: {placed:?}"
            );
            assert_eq!(cache, stored, "{placement:?}: the cache is not the store");
            assert_eq!(
                (err.status, err.code),
                (503, "UNAVAILABLE"),
                "{placement:?}"
            );
            assert!(
                err.message.contains("instance x was created"),
                "{placement:?}: the answer does not say the creation stands: {}",
                err.message
            );
            // A retry of the POST finds it.
            assert!(matches!(
                reg.create_instance("f", &instance("x")).await,
                Ok(Created::Existing(_))
            ));
        });
    }
}

/// Anomaly 7's companion: a commit that failed, followed by a reload that failed too,
/// left the refused transaction's changes in the cache at the old revision; the next
/// transaction then committed on top of it, and the cache held a function the store
/// never did (a write answered `503` that the replica went on reading back, until
/// another replica led and it was gone). Such a cache answers nothing until reloaded,
/// and nothing is committed from it.
#[test]
fn a_failed_commit_whose_reload_failed_leaves_nothing_in_the_cache() {
    rt().block_on(async {
        let store = Arc::new(SeamStore::default());
        let reg = leader_on(store.clone()).await;
        let spec: FunctionSpec =
            serde_json::from_value(json!({"accelerator": "sobel", "instances": 0})).unwrap();
        // Refused, and the store cannot be read for longer than the registry retries
        // (it reads again under the lock a few times, then gives the cache up).
        store.next_commits(&[CommitFault::Refused]);
        store.next_loads_fail(&[true; 20]);
        let err = reg.put_function("g", &spec).await.unwrap_err();
        assert_eq!((err.status, err.code), (503, "UNAVAILABLE"));
        // The next write, straight to the service (no HTTP guard in between).
        let h = reg.put_function("h", &spec).await;
        let (cache, stored) = cache_and_store(&reg, &store).await;
        assert!(
            !stored.functions.iter().any(|f| f.name == "g"),
            "the refused write was stored"
        );
        assert_eq!(
            cache, stored,
            "after a write answered {h:?} the cache is not the store"
        );
        // The store works again: writes go through, and the cache follows.
        reg.put_function("h", &spec).await.unwrap();
        let (cache, stored) = cache_and_store(&reg, &store).await;
        assert_eq!(cache, stored);
        assert!(stored.functions.iter().any(|f| f.name == "h"));
        assert!(reg.function_json("g").await.is_err());
        assert!(
            store.played(),
            "the store was read fewer times than it failed"
        );
    });
}

/// One poll of `future`, as a runtime would make it, without budget (tokio's
/// cooperative budget could make a lock answer `Pending` for a reason of its own).
fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

/// Fix 3 (docs/jepsen.md, anomaly 3): two POSTs of one instance id and a DELETE must
/// never leave it missing. POST A creates `x`; a DELETE removes it before A places
/// it, so A's placement finds no instance; POST B creates `x` again before A's answer.
/// A used to delete, as cleanup, the instance under `x` — B's — and B's placement
/// then found nothing: both answered `404` and `x` was gone. The registry's lock
/// hands over in the order it was asked for (tokio's mutex is fair), so polling the
/// futures one step at a time sets that interleaving exactly.
#[test]
fn two_posts_of_one_id_and_a_delete_never_leave_it_missing() {
    rt().block_on(async {
        let store = Arc::new(SeamStore::default());
        let reg = leader_on(store.clone()).await;
        let spec = instance("x");
        let held = reg.lock().await;
        let mut a = pin!(tokio::task::coop::unconstrained(
            reg.create_instance("f", &spec)
        ));
        assert!(poll_once(a.as_mut()).is_pending(), "A waits for the lock");
        let mut delete = pin!(tokio::task::coop::unconstrained(reg.lock()));
        assert!(poll_once(delete.as_mut()).is_pending());
        drop(held);
        // A creates x, then waits for the lock to place it, behind the DELETE.
        assert!(poll_once(a.as_mut()).is_pending());
        let Poll::Ready(mut st) = poll_once(delete.as_mut()) else {
            panic!("the DELETE did not get the lock");
        };
        assert!(st.instance("x").is_some(), "A created x");
        st.delete_instance("x");
        reg.commit(&mut st).await.unwrap();
        // B asks for the lock while A's placement waits for it: A places first.
        let mut b = pin!(tokio::task::coop::unconstrained(
            reg.create_instance("f", &spec)
        ));
        assert!(poll_once(b.as_mut()).is_pending());
        drop(st);
        // A finds no instance to place (404); B then creates x, and places it. Each
        // is polled until it answers (a finished future is not polled again).
        let (mut a_answer, mut b_answer) = (None, None);
        for _ in 0..8 {
            if a_answer.is_none() {
                if let Poll::Ready(answer) = poll_once(a.as_mut()) {
                    a_answer = Some(answer);
                }
            }
            if b_answer.is_none() {
                if let Poll::Ready(answer) = poll_once(b.as_mut()) {
                    b_answer = Some(answer);
                }
            }
        }
        let a_answer = a_answer.expect("A answered");
        let b_answer = b_answer.expect("B answered");
        let a_err = a_answer
            .err()
            .expect("A's instance was deleted before it was placed");
        assert_eq!(a_err.status, 404, "{a_err:?}");
        match b_answer {
            Ok(Created::New(binding)) => assert!(binding["node"].is_string(), "{binding}"),
            Ok(Created::Existing(binding)) => panic!("B found an instance: {binding}"),
            Err(e) => panic!("B answered {e:?}: its instance was deleted by A's cleanup"),
        }
        let (cache, stored) = cache_and_store(&reg, &store).await;
        assert!(
            stored.instances.iter().any(|i| i.id == "x"),
            "x is missing after B created it: {stored:?}"
        );
        assert_eq!(cache, stored);
    });
}

/// Anomaly 4: a `PUT` of a function that took effect answered `404 there is no
/// function` when a `DELETE` came while it placed the function's instances (it
/// answered by reading the function again). Here the placement waits for a
/// reconfiguration the test holds, and the DELETE comes then: the PUT answers `200`
/// with the function as it stored it.
#[test]
fn a_put_deleted_while_it_placed_answers_what_it_stored() {
    rt().block_on(async {
        let store = Arc::new(SeamStore::default());
        let held = Arc::new(Held::default());
        let reg = leader_with(store, held.clone()).await;
        // No slot holds echo: placing the instance reconfigures one, and waits.
        let spec: FunctionSpec =
            serde_json::from_value(json!({"accelerator": "echo", "instances": 1})).unwrap();
        let put = tokio::spawn({
            let reg = reg.clone();
            async move { reg.put_function("r", &spec).await }
        });
        held.asked.notified().await;
        reg.delete_function("r").await.unwrap();
        held.permits.add_permits(1);
        let doc = put
            .await
            .unwrap()
            .expect("the PUT took effect: it must not answer an error");
        assert_eq!(doc["name"], "r", "{doc}");
        assert_eq!(doc["accelerator"], "echo", "{doc}");
        assert!(reg.function_json("r").await.is_err(), "the DELETE stands");
    });
}
