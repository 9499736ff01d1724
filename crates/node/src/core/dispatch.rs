//! The dispatcher: from a whole call to a slot that hosts its accelerator.
//!
//! Front ends (HTTP, RAC) hand every call here. The dispatcher picks among the slots
//! hosting the accelerator (round robin or join-shortest-queue), falls over to the next
//! slot when one is full or being reconfigured, and answers at once when none can take
//! the call: `UNKNOWN_ACCELERATOR` (nothing hosts it), `UNAVAILABLE` (its slots are
//! being reconfigured) or `BUSY` (all queues full). It never blocks.
//!
//! It counts its refusals in `netaccel_accelerator_calls_total`, except `BUSY`: front
//! ends refuse calls `BUSY` too (body memory, reassembly buffers), so the front end
//! that answers `BUSY` counts it, by protocol and accelerator at once
//! ([`crate::node::Node::count_busy`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use accel::{Accelerator, Catalog};
use arc_swap::{ArcSwap, Guard};
use rac_proto::Status;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::core::clock::Clock;
use crate::core::ensemble::{Ensemble, Ensembles, StepRunner};
use crate::core::slot::{Answer, Call, Refused, Slot, SlotLimits, Submitted};
use crate::core::tenant::TenantId;
use crate::device::SlotPlan;
use crate::telemetry::metrics::{AccelMetrics, AccelMetricsById, Metrics};
use crate::telemetry::model_stats::ModelStatsTable;

/// How the dispatcher picks among the slots that host the called accelerator.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BalancePolicy {
    /// Rotate over the slots; skip a slot whose queue is full.
    RoundRobin,
    /// Pick the slot with the fewest queued + running calls.
    #[default]
    JoinShortestQueue,
}

pub struct Dispatcher {
    /// Replaced whole when a model is rebuilt with another configuration (the model
    /// repository's load with an override): readers take the one current at the time.
    catalog: ArcSwap<Catalog>,
    slots: Vec<Arc<Slot>>,
    policy: BalancePolicy,
    next: AtomicUsize,
    accel_metrics: Arc<AccelMetricsById>,
    /// Tells the slot watchdog ([`crate::core::watchdog`]) to end.
    watchdog_stop: Arc<AtomicBool>,
    /// The catalog's ensembles, which no slot hosts: their calls run step by step
    /// ([`crate::core::ensemble`]). Set once, after the dispatcher starts.
    ensembles: OnceLock<Ensembles>,
    clock: Arc<dyn Clock>,
}

/// Why the dispatcher could not find a slot for an accelerator.
pub struct NoSlot {
    pub status: Status,
    pub message: String,
}

/// Why no slot admits an accelerator, from what its slots are doing. Ordered: when
/// slots differ, the later reason is the one given (a failed slot needs a reload,
/// which a caller should hear of before a reconfiguration that will end by itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Unserved {
    /// No slot hosts it.
    NotHosted,
    /// A slot is loading it or unloading it.
    Reconfiguring,
    /// A slot hosting it is failed (a kernel ran past `kernel_timeout_ms`).
    Failed,
}

impl Unserved {
    /// The refusal of a call to the accelerator called `name`.
    fn refusal(self, name: &str) -> NoSlot {
        match self {
            Unserved::Failed => NoSlot {
                status: Status::Unavailable,
                message: format!(
                    "the slots for {name} are failed (a kernel ran past kernel_timeout_ms) until reloaded; retry"
                ),
            },
            Unserved::Reconfiguring => NoSlot {
                status: Status::Unavailable,
                message: format!("the slots for {name} are being reconfigured; retry"),
            },
            Unserved::NotHosted => NoSlot {
                status: Status::UnknownAccelerator,
                message: format!("no slot on this node hosts accelerator {name}"),
            },
        }
    }
}

impl Dispatcher {
    /// Builds the slots, one per entry of `initial` (loaded by their devices, see
    /// [`crate::device::start`]), and starts their worker threads.
    pub fn start(
        catalog: Catalog,
        initial: Vec<SlotPlan>,
        limits: SlotLimits,
        policy: BalancePolicy,
        metrics: &Metrics,
        clock: Arc<dyn Clock>,
    ) -> Arc<Dispatcher> {
        let dispatcher = Dispatcher::unstarted(catalog, initial, limits, policy, metrics, clock);
        for slot in &dispatcher.slots {
            let slot = Arc::clone(slot);
            std::thread::Builder::new()
                .name(format!("slot-{}", slot.id))
                .spawn(move || slot.run_worker())
                .expect("spawning a slot worker thread");
        }
        crate::core::watchdog::spawn(
            dispatcher.slots.clone(),
            limits.kernel_timeout,
            Arc::clone(&dispatcher.watchdog_stop),
        );
        dispatcher
    }

    /// The dispatcher and its slots without worker threads or watchdog: for a driver
    /// that steps the slots itself ([`Slot::take_next`]), as the simulator does.
    pub fn unstarted(
        catalog: Catalog,
        initial: Vec<SlotPlan>,
        limits: SlotLimits,
        policy: BalancePolicy,
        metrics: &Metrics,
        clock: Arc<dyn Clock>,
    ) -> Arc<Dispatcher> {
        let accel_metrics: Arc<AccelMetricsById> = Arc::new(
            catalog
                .iter()
                .map(|a| (a.descriptor().id, metrics.accel(&a.descriptor().name)))
                .collect(),
        );
        let slots: Vec<Arc<Slot>> = initial
            .into_iter()
            .enumerate()
            .map(|(i, plan)| {
                let id = u16::try_from(i).expect("slot count validated by the config");
                Arc::new(Slot::new(
                    id,
                    &plan.device,
                    plan.backend,
                    plan.accel,
                    plan.image,
                    limits,
                    metrics.slot(id),
                    Arc::clone(&accel_metrics),
                    Arc::clone(&clock),
                ))
            })
            .collect();
        // The admin API and the routes find a slot by its id as an index.
        assert!(slots
            .iter()
            .enumerate()
            .all(|(i, s)| usize::from(s.id) == i));
        Arc::new(Dispatcher {
            catalog: ArcSwap::from_pointee(catalog),
            slots,
            policy,
            next: AtomicUsize::new(0),
            accel_metrics,
            watchdog_stop: Arc::new(AtomicBool::new(false)),
            ensembles: OnceLock::new(),
            clock,
        })
    }

    /// Serves the catalog's ensembles (`by_id`: each a catalog entry no slot hosts).
    /// Called once, after the dispatcher starts and before calls come.
    /// Each step a protocol's statistics count in `stats` (Triton's per-step figures).
    pub fn serve_ensembles(
        self: &Arc<Self>,
        by_id: HashMap<u16, Arc<Ensemble>>,
        stats: Arc<ModelStatsTable>,
    ) {
        debug_assert!(by_id.keys().all(|id| self.catalog().by_id(*id).is_some()));
        debug_assert!(by_id.keys().all(|id| self.slots_hosting(*id).is_empty()));
        let runner: Arc<dyn StepRunner> = Arc::clone(self) as Arc<dyn StepRunner>;
        let metrics = Arc::clone(&self.accel_metrics);
        if let Some(ensembles) = Ensembles::start(by_id, Arc::downgrade(&runner), stats, metrics) {
            assert!(
                self.ensembles.set(ensembles).is_ok(),
                "ensembles are served once"
            );
        }
    }

    /// Whether the node serves any ensemble.
    pub fn has_ensembles(&self) -> bool {
        self.ensembles.get().is_some()
    }

    /// The ensemble accelerator `id` is, if it is one.
    pub fn ensemble(&self, id: u16) -> Option<&Arc<Ensemble>> {
        self.ensembles.get()?.get(id)
    }

    /// Whether a call to accelerator `id` can be served now: some slot hosts it, or it
    /// is an ensemble and some slot hosts each of its steps.
    pub fn serves(&self, id: u16) -> bool {
        match self.ensemble(id) {
            Some(e) => e
                .step_ids()
                .all(|step| !self.slots_hosting(step).is_empty()),
            None => !self.slots_hosting(id).is_empty(),
        }
    }

    /// The time of the clock the dispatcher was given.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The metric handles of accelerator `id`, if it is in the catalog.
    pub fn accel_metrics(&self, id: u16) -> Option<&AccelMetrics> {
        self.accel_metrics.get(&id)
    }

    /// The catalog as it is now (a model's entry changes when a load overrides its
    /// configuration; its id and name never do).
    pub fn catalog(&self) -> Guard<Arc<Catalog>> {
        self.catalog.load()
    }

    /// Puts `accel` in the catalog in place of the entry with its id, which has its
    /// name: a model rebuilt with another configuration. Calls already decoded keep
    /// the entry they were decoded with.
    pub fn replace_entry(&self, accel: &Arc<dyn Accelerator>) {
        let d = accel.descriptor();
        self.catalog.rcu(|c| {
            let old = c.by_id(d.id).expect("a replaced entry is in the catalog");
            assert_eq!(old.descriptor().name, d.name, "an entry keeps its name");
            let entries = c
                .iter()
                .map(|a| match a.descriptor().id == d.id {
                    true => Arc::clone(accel),
                    false => Arc::clone(a),
                })
                .collect();
            let mut new = Catalog::new(entries);
            for a in c.iter() {
                let id = a.descriptor().id;
                new.set_backends(id, c.backends(id).to_vec());
            }
            new
        });
    }

    pub fn slots(&self) -> &[Arc<Slot>] {
        &self.slots
    }

    /// Slots currently hosting accelerator `id` (admitting or not).
    pub fn slots_hosting(&self, id: u16) -> Vec<u16> {
        self.slots
            .iter()
            .filter(|s| s.hosting().accel_id == id)
            .map(|s| s.id)
            .collect()
    }

    /// Candidate slots for `accel_id` in the order they should be tried, or why there
    /// are none.
    fn candidates(&self, accel_id: u16) -> Result<Vec<&Arc<Slot>>, NoSlot> {
        let mut admitting = Vec::with_capacity(self.slots.len());
        let mut unserved = Unserved::NotHosted;
        for slot in &self.slots {
            let hosting = slot.hosting();
            debug_assert!(
                !(hosting.open && hosting.failed),
                "an open slot is not failed"
            );
            if hosting.open && hosting.accel_id == accel_id {
                admitting.push(slot);
            } else if hosting.failed && hosting.accel_id == accel_id {
                unserved = Unserved::Failed;
            } else if hosting
                .swapping
                .is_some_and(|(from, to)| from == accel_id || to == accel_id)
            {
                unserved = unserved.max(Unserved::Reconfiguring);
            }
        }
        if admitting.is_empty() {
            let name = self
                .catalog()
                .by_id(accel_id)
                .map_or_else(|| format!("#{accel_id}"), |a| a.descriptor().name.clone());
            return Err(unserved.refusal(&name));
        }
        match self.policy {
            BalancePolicy::RoundRobin => {
                let start = self.next.fetch_add(1, Ordering::Relaxed) % admitting.len();
                admitting.rotate_left(start);
            }
            BalancePolicy::JoinShortestQueue => {
                // Ties go round robin, so equal slots share the load.
                let start = self.next.fetch_add(1, Ordering::Relaxed) % admitting.len();
                admitting.rotate_left(start);
                admitting.sort_by_key(|s| s.depth());
            }
        }
        Ok(admitting)
    }

    /// Whether a call from `tenant` to `accel_id` would find room now. Used to refuse
    /// before reading a body; the answer may be stale by the time the body is in.
    pub fn admission(&self, accel_id: u16, tenant: TenantId) -> Result<(), NoSlot> {
        if let Some(e) = self.ensemble(accel_id) {
            return e
                .step_ids()
                .try_for_each(|step| self.admission(step, tenant));
        }
        let candidates = self.candidates(accel_id)?;
        if candidates.iter().any(|s| s.has_room(tenant)) {
            Ok(())
        } else {
            Err(busy())
        }
    }

    /// Submits a whole call. Never blocks; every call gets exactly one answer.
    pub fn submit(&self, call: Call) -> Submitted {
        // Fast path, no lock and no allocation: the policy's pick among the slots that
        // admit the accelerator right now.
        let accel_id = call.accel.descriptor().id;
        let n = self.slots.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut pick: Option<&Arc<Slot>> = None;
        for k in 0..n {
            let slot = &self.slots[(start + k) % n];
            if !slot.admits(accel_id) {
                continue;
            }
            match (self.policy, pick) {
                (BalancePolicy::RoundRobin, _) => {
                    pick = Some(slot);
                    break;
                }
                (BalancePolicy::JoinShortestQueue, Some(best)) if best.depth() <= slot.depth() => {}
                (BalancePolicy::JoinShortestQueue, _) => pick = Some(slot),
            }
        }
        let mut refusals = Refusals::default();
        match pick {
            Some(slot) => match slot.offer(call) {
                Ok(submitted) => submitted,
                Err(refused) => {
                    let call = refusals.note(slot, refused);
                    self.submit_slow(call, refusals)
                }
            },
            None => self.submit_slow(call, refusals),
        }
    }

    /// Submits a whole call and waits for its answer: how the front ends that answer
    /// each call on its own request (HTTP's `/v1/fn` and v2, gRPC) run one, so that
    /// admission, the tenant's share of a queue, the deadline and the accelerator's
    /// metrics are the same whichever protocol carried it.
    ///
    /// Dropped before its answer (a gRPC call its client cancelled), the future
    /// withdraws the call from its slot's queue ([`Dispatcher::wait`]).
    pub async fn run(&self, call: Call) -> Answer {
        if let Some(ensemble) = self.ensemble(call.accel.descriptor().id) {
            let ensembles = self.ensembles.get().expect("an ensemble is served");
            return ensembles.run_here(ensemble, self, call).await;
        }
        match self.submit(call) {
            Submitted::Done(answer) => answer,
            Submitted::Queued(rx) => self.wait(rx).await,
        }
    }

    /// [`Dispatcher::run`] for a caller that can tell when it has left: `None` when
    /// `left` ends while the call is still queued or running (an HTTP client closed
    /// its connection), the call then withdrawn as a dropped `run` withdraws it.
    /// `left` is polled only while the call waits for a slot: a call answered at once
    /// never looks at it.
    pub async fn run_unless(
        &self,
        call: Call,
        left: impl std::future::Future<Output = ()>,
    ) -> Option<Answer> {
        let rx = match self.submit(call) {
            Submitted::Done(answer) => return Some(answer),
            Submitted::Queued(rx) => rx,
        };
        let answer = self.wait(rx);
        tokio::select! {
            biased;
            answer = answer => Some(answer),
            () = left => None,
        }
    }

    /// Waits for the answer of a call queued at one of the dispatcher's slots. The
    /// future, dropped before the answer, withdraws the calls whose callers left from
    /// the slots' queues (`core::slot::cancel`): the call never runs, its place goes
    /// to others. No cost until then: the guard is a field on the future.
    pub async fn wait(&self, rx: oneshot::Receiver<Answer>) -> Answer {
        let mut waiting = Waiting {
            rx: Some(rx),
            dispatcher: self,
        };
        let answer = waiting
            .rx
            .as_mut()
            .expect("the receiver is there until answered")
            .await;
        waiting.rx = None;
        answer.unwrap_or_else(|_| Answer::lost())
    }

    /// Takes the calls whose callers left out of every slot's queue; returns how many.
    fn withdraw_cancelled(&self) -> usize {
        self.slots.iter().map(|s| s.withdraw_cancelled()).sum()
    }

    /// Every candidate in policy order not yet offered the call (`refusals`), and the
    /// reason when none takes it. A call refused `Busy` for a slot's wait bound is
    /// counted there once, however many slots refused it.
    fn submit_slow<'a>(&'a self, mut call: Call, mut refusals: Refusals<'a>) -> Submitted {
        let accel_id = call.accel.descriptor().id;
        if let Some(e) = self.ensemble(accel_id) {
            let ensembles = self.ensembles.get().expect("an ensemble is served");
            return ensembles.submit(e, call);
        }
        let candidates = match self.candidates(accel_id) {
            Ok(c) => c,
            Err(NoSlot { status, message }) => return self.refuse(status, message, call),
        };
        debug_assert!(!candidates.is_empty(), "no candidates is a refusal");
        for slot in candidates {
            if refusals.tried.is_some_and(|tried| Arc::ptr_eq(tried, slot)) {
                continue;
            }
            match slot.offer(call) {
                Ok(submitted) => return submitted,
                Err(refused) => call = refusals.note(slot, refused),
            }
        }
        if refusals.busy {
            if let Some(slot) = refusals.waited {
                slot.count_wait_refusal();
            }
            self.refuse(Status::Busy, busy().message, call)
        } else {
            let message = "the slots for this accelerator are being reconfigured or failed; retry";
            self.refuse(Status::Unavailable, message.to_string(), call)
        }
    }

    fn refuse(&self, status: Status, message: String, call: Call) -> Submitted {
        debug_assert!(status != Status::Ok, "a refusal is not a success");
        // BUSY is counted by the front end that answers it (see the module docs).
        if status != Status::Busy {
            if let Some(m) = self.accel_metrics(call.accel.descriptor().id) {
                m.answered(status, 0);
            }
        }
        Submitted::Done(Answer::refusal(status, message, call))
    }

    /// Stops every slot; workers exit when their queues are empty.
    pub fn stop(&self) {
        self.watchdog_stop.store(true, Ordering::Relaxed);
        for slot in &self.slots {
            slot.stop();
        }
    }

    /// Stops every slot and answers every call still queued or running `UNAVAILABLE`
    /// with `why` (the drain deadline passed). Returns how many calls it answered.
    pub fn abandon_all(&self, why: &str) -> usize {
        self.stop();
        self.slots.iter().map(|s| s.abandon_all(why)).sum()
    }
}

/// A caller's wait for a queued call's answer ([`Dispatcher::wait`]). Dropped with the
/// receiver still in it, the caller left before the answer: the receiver is dropped
/// first, which marks the call's channel closed, then the slots' queues are swept.
struct Waiting<'a> {
    rx: Option<oneshot::Receiver<Answer>>,
    dispatcher: &'a Dispatcher,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(rx) = self.rx.take() {
            drop(rx);
            self.dispatcher.withdraw_cancelled();
        }
    }
}

impl StepRunner for Dispatcher {
    fn submit(&self, call: Call) -> Submitted {
        Dispatcher::submit(self, call)
    }

    fn now(&self) -> Instant {
        self.clock.now()
    }
}

/// What the slots offered one call said so far.
#[derive(Default)]
struct Refusals<'a> {
    /// The slot the fast path offered it to: not offered again.
    tried: Option<&'a Arc<Slot>>,
    /// Busy wins over Unavailable: some slot does host it, it is just full.
    busy: bool,
    /// The last slot that refused it for its wait bound.
    waited: Option<&'a Arc<Slot>>,
}

impl<'a> Refusals<'a> {
    /// Notes `slot`'s refusal; gives the call back.
    fn note(&mut self, slot: &'a Arc<Slot>, refused: Refused) -> Call {
        if self.tried.is_none() {
            self.tried = Some(slot);
        }
        self.busy |= refused.status == Status::Busy;
        if refused.waited_too_long {
            self.waited = Some(slot);
        }
        refused.call
    }
}

fn busy() -> NoSlot {
    NoSlot {
        status: Status::Busy,
        message: "all slots for this accelerator are full; retry".to_string(),
    }
}
