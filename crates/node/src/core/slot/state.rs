//! A slot's state as enums, each transition in one place: whether the slot admits
//! calls ([`Phase`]), whether it is executing one ([`Execution`]), and what a call
//! asking to queue is told ([`Admission`]); and the checker of the state's invariants
//! ([`Slot::check`]), which debug builds run under the lock after every change.
//!
//! Part of the `slot` module (see there for what a slot is for), in a file of its own
//! so that each stays within a size a reader can hold.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use accel::Accelerator;
use tokio::sync::oneshot;

use super::{Answer, Job, Slot, ADMITTING};
use crate::core::fair_queue::FairQueue;
use crate::device::Loaded;

/// Whether a call may wait for the calls served before it: the answer of
/// [`Slot::wait_admits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Admission {
    /// No bound on the wait applies (`queue_wait_factor` is zero, or the slot has not
    /// timed a call yet): the queue's depth alone bounds it.
    Unbounded,
    /// Admitted, to start before the worker has taken more than this many calls from
    /// the queue ([`SlotState::taken`]): its [`Job::start_by`].
    StartBy(u64),
    /// Refused: the other tenants' calls served before it would take longer than it
    /// may wait.
    WaitTooLong,
}

impl Admission {
    /// The bound a queued call carries ([`Job::start_by`]), if admitted.
    pub(super) fn start_by(self) -> Option<u64> {
        match self {
            Admission::Unbounded | Admission::WaitTooLong => None,
            Admission::StartBy(by) => Some(by),
        }
    }
}

/// A reconfiguration under way: calls for either accelerator are answered
/// `UNAVAILABLE` until it ends.
#[derive(Clone)]
pub(super) struct Reconfig {
    pub(super) from: u16,
    pub(super) to: u16,
    pub(super) to_name: String,
}

/// Whether a slot admits calls, and why not. Each transition is one method of
/// `Phase`, which asserts (in debug builds) the phases it may start from; the
/// lock-free view of it is [`Slot::admits`], written by [`Slot::publish_admits`].
pub(super) enum Phase {
    /// Admitting calls for the loaded accelerator.
    Open,
    /// Loading another accelerator: calls for either are refused `UNAVAILABLE`.
    /// `failed`: why the slot was failed before the load (or failed while the load
    /// waited for the call in progress); the load recovers it.
    Reconfiguring {
        to: Reconfig,
        failed: Option<String>,
    },
    /// A kernel ran past `kernel_timeout_ms`: calls are refused `UNAVAILABLE` until
    /// an accelerator is loaded into the slot again.
    Failed(String),
    /// Shutting down, for good: no admission, and the worker exits once the queue is
    /// empty. It keeps what the slot was doing when stopped: a load under way still
    /// finishes (and is reported), a failed slot still says why.
    Stopping {
        reconfig: Option<Reconfig>,
        failed: Option<String>,
    },
}

impl Phase {
    pub(super) fn admits(&self) -> bool {
        matches!(self, Phase::Open)
    }

    pub(super) fn stopping(&self) -> bool {
        matches!(self, Phase::Stopping { .. })
    }

    /// Whether something waits for the slot to go idle: a load (for the queue to
    /// drain) or a stop (the worker, to exit).
    pub(super) fn waited_on(&self) -> bool {
        matches!(self, Phase::Reconfiguring { .. } | Phase::Stopping { .. })
    }

    /// Why the slot is failed, if it is.
    pub(super) fn failed(&self) -> Option<&String> {
        match self {
            Phase::Open => None,
            Phase::Failed(why) => Some(why),
            Phase::Reconfiguring { failed, .. } | Phase::Stopping { failed, .. } => failed.as_ref(),
        }
    }

    /// The load under way, if any.
    pub(super) fn reconfig(&self) -> Option<&Reconfig> {
        match self {
            Phase::Open | Phase::Failed(_) => None,
            Phase::Reconfiguring { to, .. } => Some(to),
            Phase::Stopping { reconfig, .. } => reconfig.as_ref(),
        }
    }

    /// Open or failed → reconfiguring to `to`. The caller refuses the other phases.
    pub(super) fn begin_reconfig(&mut self, to: Reconfig) {
        debug_assert!(
            matches!(self, Phase::Open | Phase::Failed(_)),
            "a load begins only in an open or failed slot"
        );
        let failed = match std::mem::replace(self, Phase::Open) {
            Phase::Failed(why) => Some(why),
            _ => None,
        };
        *self = Phase::Reconfiguring { to, failed };
    }

    /// Reconfiguring → open (stopping stays stopping, without the load). Returns
    /// whether the load recovered a failed slot.
    pub(super) fn end_reconfig(&mut self) -> bool {
        debug_assert!(self.reconfig().is_some(), "a load ends only if one began");
        let recovered = self.failed().is_some();
        *self = match self {
            Phase::Stopping { .. } => Phase::Stopping {
                reconfig: None,
                failed: None,
            },
            _ => Phase::Open,
        };
        recovered
    }

    /// Marks the slot failed with `why` (a kernel hung), whatever else it is doing.
    pub(super) fn fail(&mut self, why: String) {
        debug_assert!(self.failed().is_none(), "a slot fails once per load");
        match self {
            Phase::Open | Phase::Failed(_) => *self = Phase::Failed(why),
            Phase::Reconfiguring { failed, .. } | Phase::Stopping { failed, .. } => {
                *failed = Some(why);
            }
        }
    }

    /// Any phase → stopping, keeping a load under way and why the slot failed.
    /// Stopping twice is stopping.
    pub(super) fn stop(&mut self) {
        *self = match std::mem::replace(self, Phase::Open) {
            Phase::Open => Phase::Stopping {
                reconfig: None,
                failed: None,
            },
            Phase::Failed(why) => Phase::Stopping {
                reconfig: None,
                failed: Some(why),
            },
            Phase::Reconfiguring { to, failed } => Phase::Stopping {
                reconfig: Some(to),
                failed,
            },
            stopping @ Phase::Stopping { .. } => stopping,
        };
    }
}

/// Whether the slot is executing a call (on the worker or inline on a network
/// thread). Changed by [`SlotState::start_running`] and [`SlotState::end_running`].
pub(super) enum Execution {
    Idle,
    Running(Running),
}

/// The call a slot is executing.
pub(super) struct Running {
    /// When it began (the watchdog's clock).
    pub(super) since: Instant,
    /// When it is expected to end (see [`Slot::expected_time`]).
    pub(super) ends: Instant,
    /// Where its answer goes when the worker executes it (`None`: a network thread
    /// does, and answers it itself). Kept here, not on the worker's stack, so that
    /// the call can still be answered when its kernel never returns
    /// ([`Slot::abandon_running`]).
    pub(super) reply: Option<oneshot::Sender<Answer>>,
}

/// A slot's state, behind its lock.
pub(super) struct SlotState {
    /// The catalog entry of the loaded accelerator (its id, name, work estimate).
    pub(super) accel: Arc<dyn Accelerator>,
    /// What runs the calls: the accelerator as the slot's device loaded it.
    pub(super) image: Arc<dyn Loaded>,
    /// Whether it admits calls, and why not.
    pub(super) phase: Phase,
    /// The call executing, if any.
    pub(super) execution: Execution,
    /// Bumped each time the slot gives up on the thread executing its call: a thread
    /// that comes back from a kernel under an older generation has been replaced, and
    /// leaves the slot's state alone.
    pub(super) generation: u64,
    /// Network threads waiting to run a call after the current one
    /// ([`Slot::run_after_current`]); the worker takes no call while there are any.
    pub(super) handing_over: usize,
    pub(super) queue: FairQueue<Job>,
    /// Calls the worker has taken from the queue to run: the clock of [`Job::start_by`].
    /// Cheap calls of tenants without a backlog that run on a network thread ahead of
    /// the queue (see the module documentation) do not count: they are the fairness
    /// the queue promises, and counting them refused queued calls of µs kernels at
    /// light load, behind hundreds of such calls, in the registry's failover test.
    pub(super) taken: u64,
    /// The calls of the batch the worker is forming or running (a model with dynamic
    /// batching, see `batching`), kept here until each is answered: a hung kernel or
    /// the drain deadline answers them as it answers the queue. At most
    /// `max_batch_size` calls; empty otherwise.
    pub(super) batch: Vec<Job>,
    /// The loaded model's batches by size (`Slot::batch_counts`).
    pub(super) batch_counts: BatchCounts,
}

impl SlotState {
    pub(super) fn running(&self) -> bool {
        matches!(self.execution, Execution::Running(_))
    }

    /// No call runs, waits in the queue or in a batch being formed: an accelerator
    /// may be swapped in.
    pub(super) fn drained(&self) -> bool {
        !self.running() && self.queue.len == 0 && self.batch.is_empty()
    }

    /// Idle → running a call begun `since`, expected to end at `ends`, answered
    /// through `reply` when the worker runs it.
    pub(super) fn start_running(
        &mut self,
        since: Instant,
        ends: Instant,
        reply: Option<oneshot::Sender<Answer>>,
    ) {
        debug_assert!(!self.running(), "a slot runs one call at a time");
        debug_assert!(ends >= since, "a call ends after it begins");
        self.execution = Execution::Running(Running { since, ends, reply });
    }

    /// Running → idle; the call that was running.
    pub(super) fn end_running(&mut self) -> Option<Running> {
        debug_assert!(self.running(), "only a running call ends");
        match std::mem::replace(&mut self.execution, Execution::Idle) {
            Execution::Running(run) => Some(run),
            Execution::Idle => None,
        }
    }
}

impl Slot {
    /// Publishes the phase to the dispatcher's lock-free view ([`Slot::admits`]): the
    /// loaded accelerator's id, with [`ADMITTING`] when the slot is open. Called
    /// under the state lock after every transition of the phase.
    pub(super) fn publish_admits(&self, st: &SlotState) {
        let flag = if st.phase.admits() { ADMITTING } else { 0 };
        self.admits.store(
            u32::from(st.accel.descriptor().id) | flag,
            Ordering::Release,
        );
    }

    /// [`Slot::check`], in debug builds only: called under the state lock after every
    /// change of the state. Release builds do not walk the queue.
    pub(super) fn debug_check(&self, st: &SlotState) {
        if cfg!(debug_assertions) {
            self.check(st);
        }
    }

    /// Asserts the slot's invariants over its state `st` (held locked): the queue's
    /// own ([`FairQueue::check`]) and its bounds, the lock-free views agree with the
    /// state, and a failed slot holds no call. Panics naming the one broken.
    pub(super) fn check(&self, st: &SlotState) {
        st.queue.check();
        assert!(
            st.queue.len <= self.limits.queue_depth_max,
            "slot {}: {} calls queued, over queue_depth_max {}",
            self.id,
            st.queue.len,
            self.limits.queue_depth_max
        );
        let longest = st.queue.queues.values().map(|q| q.len()).max();
        assert!(
            longest.unwrap_or(0) <= self.limits.tenant_share_max,
            "slot {}: a tenant has {longest:?} calls queued, over its share {}",
            self.id,
            self.limits.tenant_share_max
        );
        let admits = self.admits.load(Ordering::Relaxed);
        assert_eq!(
            admits & ADMITTING != 0,
            st.phase.admits(),
            "slot {}: the lock-free admission flag disagrees with the phase",
            self.id
        );
        if st.phase.admits() {
            assert_eq!(
                admits & !ADMITTING,
                u32::from(st.accel.descriptor().id),
                "slot {}: admits calls for an accelerator it does not host",
                self.id
            );
        }
        assert_eq!(
            self.generation.load(Ordering::Relaxed),
            st.generation,
            "slot {}: the lock-free generation disagrees with the state's",
            self.id
        );
        if let Some(policy) = st.accel.batching() {
            assert!(
                st.batch.len() <= policy.max_batch_size,
                "slot {}: a batch of {} calls, over max_batch_size {}",
                self.id,
                st.batch.len(),
                policy.max_batch_size
            );
        } else {
            assert!(
                st.batch.is_empty(),
                "slot {}: a batch of a model that does not batch",
                self.id
            );
        }
        if !st.batch.is_empty() {
            if let Execution::Running(run) = &st.execution {
                assert!(
                    run.reply.is_none(),
                    "slot {}: a running batch is answered through its calls",
                    self.id
                );
            }
        }
        if st.phase.failed().is_some() {
            assert!(
                !st.running() && st.queue.len == 0 && st.batch.is_empty(),
                "slot {}: a failed slot holds a call",
                self.id
            );
        }
    }
}

/// Executions of a model's batches at one slot by batch size, since the model was
/// loaded into it: what Triton's statistics extension reports per batch size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchCount {
    /// Batches of this size run.
    pub count: u64,
    /// Their execution time on the device, in ns, summed.
    pub compute_ns: u64,
}

/// [`BatchCount`]s indexed by batch size - 1; at most `max_batch_size` entries.
#[derive(Debug, Default)]
pub(super) struct BatchCounts(Vec<BatchCount>);

impl BatchCounts {
    pub(super) fn record(&mut self, size: usize, max: usize, compute_ns: u64) {
        assert!(
            size >= 1 && size <= max,
            "a batch holds 1 to max_batch_size items"
        );
        if self.0.len() < size {
            self.0.resize(size, BatchCount::default());
        }
        let c = &mut self.0[size - 1];
        c.count += 1;
        c.compute_ns = c.compute_ns.saturating_add(compute_ns);
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }

    /// The sizes run, with their counts (sizes never run left out).
    pub(super) fn by_size(&self) -> Vec<(usize, BatchCount)> {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, c)| c.count > 0)
            .map(|(i, c)| (i + 1, *c))
            .collect()
    }
}
