//! The registry service: the state behind one lock, transactions committed to the
//! store, allocation with the node I/O it needs, migration, and the watchers of the
//! long poll.
//!
//! Concurrency. One `tokio::sync::Mutex` guards the [`State`]; a transaction is a
//! sequence of `State` calls under it, ended by [`Registry::commit`], which writes
//! the transaction to the store before anyone else can read the state. The lock is
//! never held across a node's reconfiguration: allocation marks the slot as being
//! reconfigured (so no one else takes it), lets go, asks the node, then takes the lock
//! again and checks that the slot is still the one it marked before it records the
//! result. A node that calls back into the registry while it reconfigures (as a node
//! started with `--registry` asks before it loads) therefore cannot deadlock it.
//!
//! Operations that change state run in their own task (see `http`), so a client that
//! hangs up cannot cancel one between its cache update and its commit.
//!
//! Migration. When a slot is reconfigured, lost or removed, the instances bound to it
//! are first re-placed without I/O where a slot already holds their accelerator (in
//! the same transaction, so a client sees one new binding, not a gap); the rest are
//! unbound and then allocated with the full algorithm, each reconfiguration adding
//! its slot to the chain of slots the next ones may not take. Past
//! [`MIGRATION_DEPTH_MAX`] slots in a chain, only empty slots may be reconfigured, so
//! a chain of displacements always ends.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::{watch, Mutex, MutexGuard, Semaphore};
use tracing::{info, warn};

use crate::alloc::{Decision, Reconfigure, SlotIdx};
use crate::config::Config;
use crate::error::ApiError;
use crate::metrics::{AllocResult, Metrics};
use crate::model::NodeState;
use crate::nodeadmin::NodeAdmin;
use crate::state::State;
use crate::store::{Store, StoreError};

pub use crate::alloc::MIGRATION_DEPTH_MAX;
/// The cache's revision when it may differ from the store: no store reaches it, so a
/// commit from such a cache is refused as a conflict.
const REVISION_NONE: crate::store::Revision = crate::store::Revision::MAX;
/// Reads of the store after a failed commit before the cache is given up as unknown
/// (see `Registry::reload_after_failed_commit`), and the pause between two.
const RELOAD_TRIES: usize = 8;
const RELOAD_PAUSE: Duration = Duration::from_millis(25);
/// Failed reconfigurations one allocation tries past before it gives up.
pub const RECONFIGURE_ATTEMPTS_MAX: usize = 3;

/// How one allocation may go.
#[derive(Clone, Debug)]
pub struct Alloc {
    /// Slots it must not take.
    pub exclude: Vec<SlotIdx>,
    /// Slots reconfigured earlier in this migration chain (also excluded).
    pub chain: Vec<SlotIdx>,
    pub reconfigure: Reconfigure,
    /// Try this node first.
    pub preferred: Option<String>,
    /// On `NO_DEVICE`, unbind the instance (it is bound somewhere it cannot stay) or
    /// leave it where it is (the rebalancer trying to move it).
    pub unbind_on_failure: bool,
}

impl Default for Alloc {
    fn default() -> Alloc {
        Alloc {
            exclude: Vec::new(),
            chain: Vec::new(),
            reconfigure: Reconfigure::Any,
            preferred: None,
            unbind_on_failure: true,
        }
    }
}

impl Alloc {
    fn followup(chain: &[SlotIdx]) -> Alloc {
        Alloc {
            exclude: chain.to_vec(),
            chain: chain.to_vec(),
            reconfigure: crate::alloc::followup_reconfigure(chain),
            ..Alloc::default()
        }
    }
}

/// A long poll's watch on one instance. Dropping it (the poll ended, or its client
/// went away and the poll's future was dropped) forgets the instance's channel once
/// nobody else waits on it, so the map of channels never outgrows the polls waiting.
struct Subscription<'a> {
    registry: &'a Registry,
    id: String,
    rx: Option<watch::Receiver<u64>>,
}

impl Subscription<'_> {
    async fn changed(&mut self) {
        let rx = self.rx.as_mut().expect("held until drop");
        // The sender lives while a receiver does (see Drop), so this cannot fail.
        let _ = rx.changed().await;
    }
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        drop(self.rx.take());
        let mut watchers = self.registry.watchers.lock().expect("watchers lock");
        if watchers
            .get(&self.id)
            .is_some_and(|tx| tx.receiver_count() == 0)
        {
            watchers.remove(&self.id);
        }
    }
}

/// Where an allocation goes next.
enum Step {
    Done(Result<SlotIdx, ApiError>, AllocResult),
    Reconfigure {
        idx: SlotIdx,
        node: SocketAddr,
        slot: crate::model::SlotId,
        accelerator: String,
        op: u64,
    },
}

pub struct Registry {
    pub config: Config,
    state: Mutex<State>,
    store: Arc<dyn Store>,
    admin: Arc<dyn NodeAdmin>,
    watchers: StdMutex<HashMap<String, watch::Sender<u64>>>,
    long_polls: Semaphore,
    next_op: AtomicU64,
    /// Instances with an allocation under way (counted: two may overlap), which the
    /// rebalancer leaves alone.
    allocating: StdMutex<HashMap<String, usize>>,
    /// Background migrations running (tests wait for none).
    background: Arc<AtomicUsize>,
    pub metrics: Metrics,
    /// Whether this replica writes: always with the memory store; with etcd, while it
    /// holds the election (see `ha`). Followers serve reads from their cache.
    leader: AtomicBool,
    /// The advertised URL of the leader, for followers' `Location` (None: unknown).
    leader_url: StdMutex<Option<String>>,
    /// With etcd: until when this replica's election lease is surely valid (`ha` sets
    /// it with each renewal). A leader past it may have been deposed meanwhile (a pause
    /// longer than the lease) and answers nothing from its cache: see
    /// [`Registry::cache_unconfirmed`].
    lease_valid_until: StdMutex<Option<Instant>>,
    /// Until its next fresh copy of the store, this replica's cache may differ from the
    /// store: it stopped leading (another may have led and written meanwhile), or a
    /// commit whose outcome is unknown could not be followed by a reload.
    behind: AtomicBool,
    /// The highest store revision this replica has loaded or committed. A load older
    /// than it comes from a store member that is behind and is refused.
    seen: AtomicU64,
    /// A follower's refresh rounds, which a read about to answer `404` waits on
    /// (read-your-writes, see [`crate::freshness`]).
    pub refresh: crate::freshness::Refresh,
}

impl Registry {
    /// Loads the state from `store` (repairing bindings to slots that no longer exist)
    /// and gives every ready node a fresh lease.
    pub async fn new(
        config: Config,
        store: Arc<dyn Store>,
        admin: Arc<dyn NodeAdmin>,
    ) -> Result<Arc<Registry>, StoreError> {
        let registry = Registry::new_follower(config, store, admin).await?;
        registry.become_leader().await?;
        Ok(registry)
    }

    /// Loads the state from `store` without writing to it: a replica that does not
    /// lead (yet). Its cache is refreshed with [`Registry::reload`].
    pub async fn new_follower(
        config: Config,
        store: Arc<dyn Store>,
        admin: Arc<dyn NodeAdmin>,
    ) -> Result<Arc<Registry>, StoreError> {
        let snapshot = store.load().await?;
        let revision = snapshot.revision;
        let now = Instant::now();
        let mut state = State::from_snapshot(snapshot, now, now + config.lease);
        // Repairs are the leader's to write.
        let _ = state.take_changes();
        let metrics = Metrics::new();
        metrics.set_leader(false);
        Ok(Arc::new(Registry {
            long_polls: Semaphore::new(config.long_polls_max),
            config,
            state: Mutex::new(state),
            store,
            admin,
            watchers: StdMutex::new(HashMap::new()),
            next_op: AtomicU64::new(1),
            allocating: StdMutex::new(HashMap::new()),
            background: Arc::new(AtomicUsize::new(0)),
            metrics,
            leader: AtomicBool::new(false),
            leader_url: StdMutex::new(None),
            lease_valid_until: StdMutex::new(None),
            behind: AtomicBool::new(false),
            seen: AtomicU64::new(revision),
            refresh: Default::default(),
        }))
    }

    /// Takes over: reloads the state from the store (giving every ready node a fresh
    /// lease, so none is declared lost for the time the replicas took to elect),
    /// writes the repairs it finds, then writes and runs the loops from now on.
    pub async fn become_leader(&self) -> Result<(), StoreError> {
        let mut st = self.state.lock().await;
        let snapshot = self.load_checked().await?;
        let now = Instant::now();
        *st = State::from_snapshot(snapshot, now, now + self.config.lease);
        // Fresh from the store.
        self.behind.store(false, Ordering::SeqCst);
        self.leader.store(true, Ordering::SeqCst);
        if let Err(e) = self.commit(&mut st).await {
            self.leader.store(false, Ordering::SeqCst);
            return Err(StoreError::Unavailable(e.message));
        }
        self.metrics.set_leader(true);
        self.notify_all_watched(&st);
        Ok(())
    }

    /// Stops writing (the election was lost); the cache is refreshed by the watch.
    pub fn step_down(&self) {
        self.leader.store(false, Ordering::SeqCst);
        self.metrics.set_leader(false);
    }

    /// Whether this replica writes (see the `leader` field).
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::SeqCst)
    }

    /// The election lease was renewed: surely valid until `until`.
    pub fn lease_valid_until(&self, until: Instant) {
        *self.lease_valid_until.lock().expect("lease lock") = Some(until);
    }

    /// Stops leading (`ha`): no answer from the cache until a fresh copy is loaded.
    pub fn stop_leading(&self) {
        self.behind.store(true, Ordering::SeqCst);
        self.step_down();
    }

    /// Whether this replica's cache may miss what another leader wrote, so that it must
    /// not answer from it: it leads on an election lease that may have run out, it
    /// stopped leading and has not reloaded since, or a commit failed and the reload
    /// after it failed too. Found by bench/jepsen: a leader
    /// paused (SIGSTOP) past its lease answered reads from its old cache after it
    /// resumed, as if it still led, and a leader that gave up its lease (an etcd member
    /// lost) answered from its cache while the next one wrote.
    pub fn cache_unconfirmed(&self) -> bool {
        if self.behind.load(Ordering::SeqCst) {
            return true;
        }
        self.is_leader()
            && self
                .lease_valid_until
                .lock()
                .expect("lease lock")
                .is_some_and(|until| Instant::now() >= until)
    }

    /// The leader's advertised URL, as last seen in the election.
    pub fn leader_url(&self) -> Option<String> {
        self.leader_url.lock().expect("leader lock").clone()
    }

    pub fn set_leader_url(&self, url: Option<String>) {
        *self.leader_url.lock().expect("leader lock") = url;
    }

    /// A follower's refresh: replaces the cache with the store's state when the store
    /// moved on, and wakes the long polls, which answer if their instance changed.
    pub async fn reload(&self) -> Result<(), StoreError> {
        let snapshot = self.load_checked().await?;
        let mut st = self.state.lock().await;
        if self.is_leader() {
            return Ok(());
        }
        // A follower's copy is current again (to within one refresh from now on).
        self.behind.store(false, Ordering::SeqCst);
        if snapshot.revision == st.revision {
            return Ok(());
        }
        let now = Instant::now();
        *st = State::from_snapshot(snapshot, now, now + self.config.lease);
        let _ = st.take_changes();
        self.notify_all_watched(&st);
        Ok(())
    }

    /// A follower without a shared store: takes `snapshot`, its leader's state, as
    /// its own (cache and store), so it answers reads as the leader would and, should
    /// it lead next, starts from it. Ignored by the leader.
    pub async fn follow(&self, snapshot: &crate::store::Snapshot) -> Result<(), StoreError> {
        // Under the state lock, as `become_leader` is: a replica taking the lead
        // meanwhile cannot have its store overwritten after it loaded it.
        let mut st = self.state.lock().await;
        if self.is_leader() || snapshot.revision == st.revision {
            return Ok(());
        }
        self.store.replace(snapshot)?;
        // The leader's revisions are this store's from now on (a leader on a memory
        // store that restarted counts from 0 again).
        self.seen.store(snapshot.revision, Ordering::SeqCst);
        let now = Instant::now();
        *st = State::from_snapshot(snapshot.clone(), now, now + self.config.lease);
        let _ = st.take_changes();
        self.notify_all_watched(&st);
        Ok(())
    }

    /// The records as this replica holds them (`GET /v1/snapshot`), from its cache,
    /// so the route costs the store nothing; `None` while the cache is at `after`.
    pub async fn snapshot(&self, after: Option<u64>) -> Option<crate::store::Snapshot> {
        let st = self.lock().await;
        (after != Some(st.revision)).then(|| st.snapshot())
    }

    fn notify_all_watched(&self, st: &State) {
        let watchers = self.watchers.lock().expect("watchers lock");
        for (id, tx) in watchers.iter() {
            let generation = st.instance(id).map_or(u64::MAX, |i| i.generation);
            tx.send_replace(generation);
        }
    }

    /// The state, for reading (and for transactions within this crate).
    ///
    /// A leader whose cache may differ from the store (see
    /// [`Registry::reload_after_failed_commit`]) reloads it first: a request that
    /// passed the HTTP guard before the failed commit and waited for the lock since
    /// must not read what the store never took (found by bench/jepsen: a POST read an
    /// instance another POST's failed commit had left in the cache, which was then gone).
    pub async fn lock(&self) -> MutexGuard<'_, State> {
        let mut st = self.state.lock().await;
        if self.behind.load(Ordering::SeqCst) && self.is_leader() {
            self.reload_after_failed_commit(&mut st).await;
        }
        st
    }

    /// Commits the transaction recorded in `st` and wakes the watchers of the
    /// instances it touched. On a store failure the cache is reloaded from the store,
    /// so it never holds what the store refused.
    pub async fn commit(&self, st: &mut State) -> Result<(), ApiError> {
        let (changes, touched) = st.take_changes();
        if changes.is_empty() {
            return Ok(());
        }
        if !self.is_leader() && cfg!(feature = "jepsen-plant-follower-acks-writes") {
            // The planted bug (see http::guard): the follower's cache keeps the write,
            // which no store ever sees, and the client is told it was done.
            self.notify(st, &touched);
            return Ok(());
        }
        if !self.is_leader() {
            // A follower's cache may not change: reload it and refuse.
            self.reload_after_failed_commit(st).await;
            return Err(ApiError::not_leader(self.leader_url()));
        }
        match self.store.commit(st.revision, &changes).await {
            Ok(revision) => {
                assert!(revision > st.revision, "a commit moves the store on");
                st.revision = revision;
                self.seen.fetch_max(revision, Ordering::SeqCst);
                self.notify(st, &touched);
                Ok(())
            }
            Err(e) => {
                warn!(error = %e, "store refused a write; reloading the state from it");
                self.reload_after_failed_commit(st).await;
                Err(ApiError::unavailable(e.to_string()))
            }
        }
    }

    /// After a failed commit the cache holds changes the store may or may not have
    /// (etcd may have applied a transaction whose answer was lost): it is replaced
    /// with what the store holds. When even that read fails, nothing may come from the
    /// cache until a reload succeeds: it answers nothing ([`Registry::cache_unconfirmed`],
    /// until [`Registry::reload_if_behind`]), and its revision is one no store has, so
    /// that any commit from it is refused as a conflict (which reloads again) instead
    /// of storing the rest of a transaction the store never took.
    async fn reload_after_failed_commit(&self, st: &mut State) {
        // etcd's client spreads requests over its endpoints, one of which may be the
        // member that is gone: a few tries, under the lock, usually reach another.
        let mut loaded = self.load_checked().await;
        for _ in 1..RELOAD_TRIES {
            if loaded.is_ok() {
                break;
            }
            tokio::time::sleep(RELOAD_PAUSE).await;
            loaded = self.load_checked().await;
        }
        match loaded {
            Ok(snapshot) => {
                let now = Instant::now();
                *st = State::from_snapshot(snapshot, now, now + self.config.lease);
                let _ = st.take_changes();
                self.behind.store(false, Ordering::SeqCst);
                self.notify_all_watched(st);
            }
            Err(e) => {
                warn!(error = %e, "reloading the state failed: answering nothing from the cache until it is reloaded");
                self.behind.store(true, Ordering::SeqCst);
                st.revision = REVISION_NONE;
            }
        }
    }

    /// Whether this replica may answer from its cache now (the HTTP guard asks before
    /// every request): not while it is unconfirmed ([`Registry::cache_unconfirmed`]),
    /// except that a leader whose cache fell behind reloads it first.
    pub async fn cache_usable(&self) -> bool {
        if !self.cache_unconfirmed() {
            return true;
        }
        self.reload_if_behind().await && !self.cache_unconfirmed()
    }

    /// A leader whose cache may differ from the store (see
    /// [`Registry::reload_after_failed_commit`]) reloads it; whether its cache is now
    /// the store's. A follower's cache is reloaded by its refresh loop instead.
    pub async fn reload_if_behind(&self) -> bool {
        if !self.behind.load(Ordering::SeqCst) {
            return true;
        }
        if !self.is_leader() {
            return false;
        }
        let mut st = self.state.lock().await;
        if self.behind.load(Ordering::SeqCst) && self.is_leader() {
            self.reload_after_failed_commit(&mut st).await;
        }
        !self.behind.load(Ordering::SeqCst)
    }

    /// The store's state, refused when it is older than a revision this replica
    /// already saw: a store member that is behind (etcd's reads are linearizable, so
    /// this is a guard, not a path expected to run).
    async fn load_checked(&self) -> Result<crate::store::Snapshot, StoreError> {
        let snapshot = self.store.load().await?;
        let seen = self.seen.fetch_max(snapshot.revision, Ordering::SeqCst);
        if snapshot.revision < seen {
            return Err(StoreError::Unavailable(format!(
                "the store answered with revision {}, older than revision {seen} this replica already saw",
                snapshot.revision
            )));
        }
        Ok(snapshot)
    }

    // ---- long poll ----

    fn notify(&self, st: &State, touched: &BTreeSet<String>) {
        let watchers = self.watchers.lock().expect("watchers lock");
        for id in touched {
            if let Some(tx) = watchers.get(id) {
                let generation = st.instance(id).map_or(u64::MAX, |i| i.generation);
                tx.send_replace(generation);
            }
        }
    }

    fn subscribe(&self, id: &str) -> Subscription<'_> {
        let mut watchers = self.watchers.lock().expect("watchers lock");
        let rx = watchers
            .entry(id.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        Subscription {
            registry: self,
            id: id.to_string(),
            rx: Some(rx),
        }
    }

    /// Watch channels held for long polls (tests check none is left behind).
    pub fn watched_instances(&self) -> usize {
        self.watchers.lock().expect("watchers lock").len()
    }

    /// Long polls waiting now.
    pub fn long_polls_waiting(&self) -> usize {
        self.config.long_polls_max - self.long_polls.available_permits()
    }

    /// An instance's binding; with `after`, waits up to `wait` for a generation other
    /// than `after`. Past `long_polls_max` waiting polls, answers at once.
    pub async fn get_instance(
        &self,
        function: &str,
        id: &str,
        after: Option<u64>,
        wait: Duration,
    ) -> Result<serde_json::Value, ApiError> {
        let deadline = tokio::time::Instant::now() + wait;
        let permit = match after {
            Some(_) if !wait.is_zero() => self.long_polls.try_acquire().ok(),
            _ => None,
        };
        // Subscribed before the state is read, so a change in between still wakes us.
        let mut subscription = permit.as_ref().map(|_| self.subscribe(id));
        loop {
            {
                let st = self.lock().await;
                let Some(instance) = st.instance(id).filter(|i| i.function == function) else {
                    return Err(ApiError::not_found(format!(
                        "function {function} has no instance {id}"
                    )));
                };
                if subscription.is_none() || after != Some(instance.generation) {
                    return Ok(st.binding_json(id));
                }
            }
            let changed = subscription.as_mut().expect("subscribed").changed();
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                subscription = None; // Time is up: answer with the binding as it is.
            }
        }
    }

    // ---- allocation ----

    /// Places instance `id` (steps 1–6), reconfiguring a slot through its node when
    /// the algorithm says so and migrating what that displaces. Returns the slot.
    pub fn allocate<'a>(
        self: &'a Arc<Self>,
        id: &'a str,
        how: Alloc,
    ) -> BoxFuture<'a, Result<SlotIdx, ApiError>> {
        Box::pin(async move {
            *self
                .allocating
                .lock()
                .expect("allocating lock")
                .entry(id.to_string())
                .or_default() += 1;
            let result = self.allocate_once(id, how).await;
            let mut allocating = self.allocating.lock().expect("allocating lock");
            let count = allocating.get_mut(id).expect("counted above");
            *count -= 1;
            if *count == 0 {
                allocating.remove(id);
            }
            result
        })
    }

    /// Whether an allocation of `id` is under way.
    pub fn is_allocating(&self, id: &str) -> bool {
        self.allocating
            .lock()
            .expect("allocating lock")
            .contains_key(id)
    }

    async fn allocate_once(
        self: &Arc<Self>,
        id: &str,
        mut how: Alloc,
    ) -> Result<SlotIdx, ApiError> {
        let started = Instant::now();
        let mut failures = Vec::new();
        for _ in 0..=RECONFIGURE_ATTEMPTS_MAX {
            let step = {
                let mut st = self.lock().await;
                let step = self.decide(&mut st, id, &how);
                self.commit(&mut st).await?;
                step
            };
            let (idx, node, slot, accelerator, op) = match step {
                Step::Done(result, outcome) => {
                    self.metrics
                        .allocation(outcome, started.elapsed().as_secs_f64());
                    return result;
                }
                Step::Reconfigure {
                    idx,
                    node,
                    slot,
                    accelerator,
                    op,
                } => (idx, node, slot, accelerator, op),
            };
            let outcome = self.admin.reconfigure(node, slot, &accelerator).await;
            self.metrics.reconfiguration(outcome.is_ok());
            match self
                .finish_reconfiguration(id, &how, idx, op, &accelerator, outcome)
                .await
            {
                Ok(Some(idx)) => {
                    self.metrics
                        .allocation(AllocResult::Reconfigured, started.elapsed().as_secs_f64());
                    return Ok(idx);
                }
                // The slot left (its node re-registered without it, or the state was
                // reloaded): its index may name another slot now, so nothing is
                // excluded; the attempts stay bounded.
                Ok(None) => {}
                Err(why) => {
                    failures.push(why);
                    how.exclude.push(idx);
                }
            }
        }
        // Out of attempts: bind if a slot now holds the accelerator, else give up
        // (unbinding, when the instance cannot stay where it is).
        how.reconfigure = Reconfigure::Never;
        let step = {
            let mut st = self.lock().await;
            let step = self.decide(&mut st, id, &how);
            self.commit(&mut st).await?;
            step
        };
        let Step::Done(result, outcome) = step else {
            unreachable!("no reconfiguration without Reconfigure::Any or EmptyOnly");
        };
        self.metrics
            .allocation(outcome, started.elapsed().as_secs_f64());
        result.map_err(|e| match e.code {
            "NO_DEVICE" if !failures.is_empty() => ApiError::no_device(format!(
                "{}; the reconfigurations tried failed: {}",
                e.message,
                failures.join("; ")
            )),
            _ => e,
        })
    }

    /// One decision under the lock; marks the slot when it must be reconfigured.
    fn decide(&self, st: &mut State, id: &str, how: &Alloc) -> Step {
        let Some(instance) = st.instance(id) else {
            return Step::Done(
                Err(ApiError::not_found(format!("there is no instance {id}"))),
                AllocResult::NoDevice,
            );
        };
        let function = st
            .function(&instance.function)
            .expect("instance's function")
            .record
            .clone();
        let mut exclude = how.exclude.clone();
        exclude.extend_from_slice(&how.chain);
        let policy = self.config.policy;
        let place = |exclude: &[SlotIdx]| {
            let mut decision = Decision::NoDevice;
            if let Some(preferred) = &how.preferred {
                if function.query.node.as_ref().is_none_or(|n| n == preferred) {
                    let mut req = st.request(&function, exclude, how.reconfigure);
                    req.node = Some(preferred);
                    decision = st.inventory.allocate(&req, &policy);
                }
            }
            if decision == Decision::NoDevice {
                let req = st.request(&function, exclude, how.reconfigure);
                decision = st.inventory.allocate(&req, &policy);
            }
            decision
        };
        // Nodes a client reported unreachable lately only when nothing else can take it.
        let suspects = st.suspect_slots(Instant::now());
        let mut decision = Decision::NoDevice;
        if !suspects.is_empty() {
            let wider: Vec<SlotIdx> = exclude.iter().chain(&suspects).copied().collect();
            decision = place(&wider);
        }
        if decision == Decision::NoDevice {
            decision = place(&exclude);
        }
        match decision {
            Decision::Bind(idx) => {
                st.set_binding(id, Some(idx));
                Step::Done(Ok(idx), AllocResult::Bound)
            }
            Decision::NoDevice => {
                if how.unbind_on_failure {
                    st.set_binding(id, None);
                }
                Step::Done(
                    Err(ApiError::no_device(format!(
                        "no slot can take an instance of {} ({}): none compatible has room or can be reconfigured",
                        function.name, function.accelerator
                    ))),
                    AllocResult::NoDevice,
                )
            }
            Decision::Reconfigure(idx) => {
                let op = self.next_op.fetch_add(1, Ordering::Relaxed);
                st.inventory.set_reconfiguring(idx, true);
                st.soft_mut(idx).pending = Some((function.accelerator.clone(), op));
                let slot = st.slot_ref(idx);
                let node = st.node(&slot.node).expect("slot's node").record.http;
                info!(
                    instance = id,
                    node = %slot.node,
                    slot = slot.slot,
                    accelerator = %function.accelerator,
                    "reconfiguring a slot: no slot holding the accelerator has room, and this one's load can be redistributed"
                );
                Step::Reconfigure {
                    idx,
                    node,
                    slot: slot.slot,
                    accelerator: function.accelerator,
                    op,
                }
            }
        }
    }

    /// Records the node's answer to a reconfiguration: `Ok(Some(slot))` when the
    /// instance is bound to it, `Ok(None)` when the slot or the instance went away
    /// meanwhile, `Err` with the node's reason when it refused.
    async fn finish_reconfiguration(
        self: &Arc<Self>,
        id: &str,
        how: &Alloc,
        idx: SlotIdx,
        op: u64,
        accelerator: &str,
        outcome: Result<(), String>,
    ) -> Result<Option<SlotIdx>, String> {
        let mut st = self.lock().await;
        let ours = st.inventory.get(idx).is_some()
            && st.soft(idx).pending.as_ref().is_some_and(|p| p.1 == op);
        if !ours {
            return Ok(None);
        }
        st.soft_mut(idx).pending = None;
        st.inventory.set_reconfiguring(idx, false);
        if let Err(why) = outcome {
            warn!(instance = id, error = %why, "reconfiguration failed; trying another slot");
            return Err(why);
        }
        // The node's lease ran out while it reconfigured: binding to the slot now would
        // leave the instance on a lost node, which no later event would move. What the
        // slot holds is learnt again if the node comes back.
        if !st.inventory.get(idx).is_some_and(|slot| slot.ready) {
            let why = "the slot's node was lost during the reconfiguration".to_string();
            warn!(instance = id, "{why}; trying another slot");
            return Err(why);
        }
        let grace = Instant::now() + self.config.lease;
        let displaced = st.set_slot_accelerator(idx, accelerator, Some(id), grace);
        let bound = st.instance(id).is_some();
        if bound {
            st.set_binding(id, Some(idx));
        }
        let mut chain = how.chain.clone();
        chain.push(idx);
        let followups = self.plan_migration(&mut st, &displaced, &chain);
        if let Err(e) = self.commit(&mut st).await {
            return Err(e.message);
        }
        drop(st);
        self.run_followups(followups, chain).await;
        Ok(bound.then_some(idx))
    }

    /// Re-places displaced instances where a slot already holds their accelerator,
    /// without I/O; unbinds the others and returns them for [`Registry::run_followups`].
    /// Pinned instances are only unbound: whoever placed them moves them (for a DRA
    /// claim, the claim watcher evicts its Pods and the scheduler allocates anew).
    pub fn plan_migration(&self, st: &mut State, ids: &[String], chain: &[SlotIdx]) -> Vec<String> {
        let mut followups = Vec::new();
        for id in ids {
            let Some(instance) = st.instance(id) else {
                continue;
            };
            if instance.pinned {
                info!(instance = %id, "pinned instance displaced: unbound, not moved");
                st.set_binding(id, None);
                continue;
            }
            let function = st
                .function(&instance.function)
                .expect("function")
                .record
                .clone();
            let req = st.request(&function, chain, Reconfigure::Never);
            match st.inventory.allocate(&req, &self.config.policy) {
                Decision::Bind(idx) => {
                    info!(instance = %id, to = ?st.slot_ref(idx), "migrated");
                    st.set_binding(id, Some(idx));
                }
                _ => {
                    st.set_binding(id, None);
                    followups.push(id.clone());
                }
            }
        }
        self.metrics.migrations(ids.len());
        followups
    }

    /// Allocates displaced instances that need a reconfiguration, one after another.
    /// One that finds no slot stays unbound; the rebalancer retries it.
    pub async fn run_followups(self: &Arc<Self>, ids: Vec<String>, chain: Vec<SlotIdx>) {
        for id in ids {
            if let Err(e) = self.allocate(&id, Alloc::followup(&chain)).await {
                info!(instance = %id, error = %e, "displaced instance left unbound for now");
            }
        }
    }

    /// Runs [`Registry::run_followups`] in the background.
    pub fn spawn_followups(self: &Arc<Self>, ids: Vec<String>, chain: Vec<SlotIdx>) {
        if ids.is_empty() {
            return;
        }
        let registry = self.clone();
        self.spawn_background(async move { registry.run_followups(ids, chain).await });
    }

    /// Runs allocation work in the background, counted in
    /// [`Registry::background_tasks`] until it ends.
    pub fn spawn_background(&self, work: impl Future<Output = ()> + Send + 'static) {
        let background = self.background.clone();
        background.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            work.await;
            background.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// Migrations running in the background; 0 when the registry is settled.
    pub fn background_tasks(&self) -> usize {
        self.background.load(Ordering::SeqCst)
    }

    // ---- resolver ----

    /// The HTTP address of the least utilised ready node hosting `accelerator`
    /// (mean utilisation of its slots holding it; ties: fewer instances, then name).
    pub async fn resolve(&self, accelerator: &str) -> Option<SocketAddr> {
        let st = self.lock().await;
        let mut per_node: HashMap<&str, (f64, u32, u32)> = HashMap::new();
        for &idx in st.inventory.holders(accelerator) {
            let slot = st.inventory.get(idx).expect("holder");
            if !slot.ready || slot.reconfiguring {
                continue;
            }
            let e = per_node.entry(&slot.spec.node).or_default();
            e.0 += slot.utilization;
            e.1 += slot.instances;
            e.2 += 1;
        }
        per_node
            .into_iter()
            .map(|(node, (util, instances, slots))| (util / slots as f64, instances, node))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(b.2)))
            .and_then(|(_, _, node)| st.node(node))
            .filter(|n| n.record.state == NodeState::Ready)
            .map(|n| n.record.http)
    }
}
