//! Slots: one loaded accelerator each, one call at a time, run to completion.
//!
//! A slot owns a bounded queue of *complete* calls and a worker thread that drains it.
//! When the slot is idle and a call is cheap (by the accelerator's work estimate), the
//! submitting network thread runs it directly: same one-at-a-time guarantee, without
//! two thread hand-offs (a futex wake each way costs more than a 64-byte kernel).
//!
//! The queue is fair between tenants: one FIFO per tenant, served round robin, and no
//! tenant may hold more than `tenant_share_max` of the queue, so a client flooding an
//! accelerator cannot push another client's calls out or behind its whole backlog.
//! A tenant with nothing queued goes ahead of the tenants with a backlog (the sparse
//! flows of fq_codel): its call runs right after the call in progress.
//!
//! Such a call, if cheap, is also not left waiting for the worker thread's turn on the
//! CPU: the submitting network thread runs it itself, at once if the worker has not
//! taken the next call yet, or after the call in progress if that is expected to end
//! within `hand_over_wait` (expected from the slot's measured time per unit of work
//! estimate); it waits for it, and no longer than that bound. On a core shared by the network thread and the
//! slot's worker, the worker — low priority by default — otherwise gets the CPU only
//! when the network thread has nothing left to read, which under a flood stretches a
//! few µs of the call in progress to tens of µs for everyone queued behind it; while
//! the network thread waits, the worker has the core. Tenants with a backlog do not
//! wait this way: their calls queue, and the network thread keeps reading.
//!
//! Reconfiguration stops admission to the slot, lets the calls already queued run on
//! the old accelerator, swaps, and reopens: no call is lost and none runs on the wrong
//! accelerator.
//!
//! A call that runs past `kernel_timeout_ms` fails the slot ([`Slot::check_hung`],
//! called by [`crate::core::watchdog`]): the slot answers that call and its queue
//! `UNAVAILABLE` and starts a new generation with a new worker thread; the thread in
//! the kernel, if it ever returns, finds its generation gone and leaves the slot
//! alone. Reconfiguration is how a failed slot comes back.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel::{Accelerator, CallError, ParamBlock};
use parking_lot::{Condvar, Mutex};
use rac_proto::Status;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::core::clock::Clock;
use crate::core::deadline::Deadline;
use crate::core::fair_queue::FairQueue;
use crate::core::memory::BodyMemory;
use crate::core::tenant::TenantId;
use crate::device::BackendKind;
use crate::device::Loaded;
use crate::telemetry::metrics::{AccelMetricsById, SlotMetrics};
use state::{Admission, Execution, Phase, Reconfig, Running, SlotState};

pub use state::BatchCount;

/// Linux scheduling class of slot worker threads. It matters when slots compute on the
/// CPU cores the network threads use (CPU kernels; a thread driving an FPGA or GPU
/// mostly sleeps).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WorkerPolicy {
    /// `SCHED_OTHER`: workers share cores with network threads by nice value.
    Normal,
    /// `SCHED_BATCH`: as `normal`, but the kernel treats workers as CPU-bound.
    Batch,
    /// `SCHED_IDLE` (the default): a thread of any other class that wakes on the core
    /// preempts the worker at once. A network thread never waits for a busy slot, so
    /// a flooded accelerator cannot delay other clients' calls; in exchange slots only
    /// get the CPU time that network threads and the host's other normal processes
    /// leave. With `normal` and `batch`, a busy worker, once picked, kept the core for
    /// milliseconds whatever the nice values (bench/isolation/run.sh, Linux 6.18: logit p99
    /// under a minmax flood 2.9–3.3 ms with either, 86–116 µs with `idle`, 86–107 µs
    /// unloaded).
    #[default]
    Idle,
    /// The node's own scheduling, unchanged: a node started under `chrt -f` keeps its
    /// workers real-time. For workers that mostly sleep (a simulated device time,
    /// `simulated_exec_us`), so that a host busy with other work cannot hold back the
    /// simulated device. CPU kernels under it take their core from every process that
    /// is not real-time: only on a core of the node's own, as bench/cnn does to compare
    /// a slot with an engine run in process at the same real-time priority.
    Inherit,
}

/// Flag in [`Slot::admits`]: the slot is open for calls.
const ADMITTING: u32 = 1 << 16;
// The flag sits above every accelerator id, which fills the word's low 16 bits.
const _: () = assert!(ADMITTING > u16::MAX as u32);
const _: () = assert!(ADMITTING & u16::MAX as u32 == 0);

/// One call on its way to a slot. It owns its payload (and the memory permit that
/// accounts for it) until the answer is produced.
pub struct Call {
    pub accel: Arc<dyn Accelerator>,
    pub params: ParamBlock,
    pub payload: Vec<u8>,
    /// Buffer lent by the caller for the output; returned in the [`Answer`].
    pub out: Vec<u8>,
    /// When the call was whole at the node: queue time and deadlines count from here.
    pub received: Instant,
    /// When the call must have started executing.
    pub deadline: Deadline,
    pub tenant: TenantId,
    pub permit: Option<BodyMemory>,
}

/// The one answer every call gets.
pub struct Answer {
    pub status: Status,
    /// The output on `Ok`, otherwise empty.
    pub output: Vec<u8>,
    /// Human sentence for a non-`Ok` status.
    pub message: String,
    pub slot: Option<u16>,
    pub queue_ns: u64,
    pub exec_ns: u64,
    /// The call's payload buffer, handed back for reuse.
    pub payload: Vec<u8>,
}

impl Answer {
    /// The answer to a queued call whose reply was dropped unsent. Slots answer every
    /// call (a panicking kernel included), so this happens only if a slot thread died.
    pub fn lost() -> Answer {
        Answer {
            status: Status::Internal,
            output: Vec::new(),
            message: "the slot failed while running the call".to_string(),
            slot: None,
            queue_ns: 0,
            exec_ns: 0,
            payload: Vec::new(),
        }
    }

    /// An answer given without running the call.
    pub fn refusal(status: Status, message: impl Into<String>, call: Call) -> Answer {
        let Call {
            mut payload, out, ..
        } = call;
        payload.clear();
        Answer {
            status,
            output: out,
            message: message.into(),
            slot: None,
            queue_ns: 0,
            exec_ns: 0,
            payload,
        }
    }
}

/// What became of a submitted call.
pub enum Submitted {
    /// Answered already (ran inline, or refused without running).
    Done(Answer),
    /// Queued; the answer arrives on the receiver.
    Queued(oneshot::Receiver<Answer>),
}

/// A slot refused a call; the dispatcher may try another slot with it.
pub struct Refused {
    pub status: Status,
    /// Refused for the wait bound (`queue_wait_factor`, see [`Slot::wait_admits`]),
    /// not for the queue's room or the accelerator hosted.
    pub waited_too_long: bool,
    pub call: Call,
}

struct Job {
    call: Call,
    reply: oneshot::Sender<Answer>,
    /// The call's work estimate.
    work: u64,
    /// The most calls the worker may take from the queue before this one (in
    /// [`SlotState::taken`] terms) — the wait it was admitted to, counted in calls: past it, the worker
    /// refuses it `Busy` rather than run it (see [`Slot::wait_admits`]).
    start_by: Option<u64>,
}

/// When a call began executing, its work estimate, and the slot's generation then.
#[derive(Clone, Copy)]
struct Start {
    at: Instant,
    work: u64,
    generation: u64,
}

/// What a slot hosts, as the dispatcher sees it.
pub struct Hosting {
    pub accel_id: u16,
    /// Admitting calls (not reconfiguring, not stopping, not failed).
    pub open: bool,
    /// Failed: a kernel ran past `kernel_timeout_ms` (see [`Slot::check_hung`]).
    pub failed: bool,
    /// During a reconfiguration: the accelerator leaving and the one arriving.
    pub swapping: Option<(u16, u16)>,
}

/// Bounds and behaviour shared by all slots.
#[derive(Clone, Copy, Debug)]
pub struct SlotLimits {
    pub queue_depth_max: usize,
    pub tenant_share_max: usize,
    pub inline_work_max: u64,
    /// How long a network thread waits for the call in progress to end before it
    /// leaves a cheap call from a tenant without a backlog to the worker (see the
    /// module documentation); it waits only when that call is expected to end within
    /// this bound, and never when it is zero. The bound caps the stall of the network
    /// thread's other connections.
    pub hand_over_wait: Duration,
    pub reconfig_delay: Duration,
    /// Simulated device time: a call holds the slot this long (see
    /// `Config::simulated_exec_us`). Such calls never run on a network thread, which
    /// would sleep with every connection it serves.
    pub simulated_exec: Duration,
    /// Nice value of the worker thread relative to the node's (see
    /// `Config::slot_worker_nice`).
    pub worker_nice: i32,
    /// A call executing longer than this marks its slot failed (see
    /// [`Slot::check_hung`]); zero: no bound.
    pub kernel_timeout: Duration,
    /// Scheduling class of the worker thread (see `Config::slot_worker_policy`).
    pub worker_policy: WorkerPolicy,
    /// A call is refused `Busy` when the other tenants' calls served before it are
    /// expected to take longer than this many times its own expected execution time
    /// per call of its own tenant ahead (and `queue_wait_floor`); zero: only the
    /// queue's depth bounds the wait. See [`Slot::wait_admits`].
    pub queue_wait_factor: u32,
    /// The wait every call may be given, however short its own execution.
    pub queue_wait_floor: Duration,
}

/// Applies the slot worker's scheduling to the calling thread: class `policy` and, for
/// the classes that have one, a nice value `nice` levels above that of the thread that
/// created it. What the kernel refuses (a negative nice without the privilege) is left
/// at the default.
fn set_worker_scheduling(policy: WorkerPolicy, nice: i32) {
    let policy = match policy {
        WorkerPolicy::Inherit => return,
        WorkerPolicy::Normal => libc::SCHED_OTHER,
        WorkerPolicy::Batch => libc::SCHED_BATCH,
        WorkerPolicy::Idle => libc::SCHED_IDLE,
    };
    // SAFETY: plain system calls on this thread's own id with valid arguments.
    unsafe {
        let tid = libc::gettid();
        *libc::__errno_location() = 0;
        let inherited = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        let inherited = if *libc::__errno_location() == 0 {
            inherited
        } else {
            0
        };
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(tid, policy, &param);
        let target = (inherited + nice).clamp(-20, 19);
        if target != inherited {
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, target);
        }
    }
}

pub struct Slot {
    pub id: u16,
    /// Where the slot reads the time and a simulated device sleeps.
    clock: Arc<dyn Clock>,
    pub device: String,
    pub backend: BackendKind,
    state: Mutex<SlotState>,
    changed: Condvar,
    /// Queued + running calls, readable without the lock (join-shortest-queue).
    depth: AtomicUsize,
    /// The loaded accelerator's id, plus [`ADMITTING`] while the slot takes calls: the
    /// dispatcher's lock-free view of [`SlotState`]; written under the state lock.
    admits: AtomicU32,
    busy_ns: AtomicU64,
    /// [`SlotState::generation`], readable without the lock: a call of an older
    /// generation was answered when the slot gave up on it, and is not counted again
    /// when its kernel returns.
    generation: AtomicU64,
    /// Moving average of execution time per unit of work estimate, in ns/1024: how
    /// long the call in progress is expected to take.
    ns_per_work_1024: AtomicU64,
    /// Moving average of execution time per call, in ns (weight 1/8): how long the
    /// calls queued are expected to take ([`Slot::wait_admits`]). Starts at the
    /// simulated device time, if any (else 0: unknown).
    ns_per_call: AtomicU64,
    /// With a simulated device time: when the simulated device ends its latest call.
    /// The device starts the next call then (or when that call arrives, if later), not
    /// when the worker thread wakes from its sleep: a late wake-up on a busy host
    /// delays one answer, not every call queued behind it.
    device_free_at: Mutex<Instant>,
    started: Instant,
    limits: SlotLimits,
    metrics: SlotMetrics,
    accel_metrics: Arc<AccelMetricsById>,
}

/// A snapshot for `GET /v1/slots`.
pub struct SlotInfo {
    pub id: u16,
    pub device: String,
    pub backend: BackendKind,
    pub accelerator: String,
    pub accel_id: u16,
    pub reconfiguring_to: Option<String>,
    /// Why the slot is failed, if it is (a kernel ran past `kernel_timeout_ms`).
    pub failed: Option<String>,
    pub running: bool,
    pub queue_depth: usize,
    /// Share of the time since start-up spent executing.
    pub busy_ratio: f64,
    /// Time spent executing since start-up, in ns (the `busy seconds` counter).
    pub busy_ns: u64,
}

impl Slot {
    /// A slot of `device` (of kind `backend`) holding `accel`, loaded as `image`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: u16,
        device: &str,
        backend: BackendKind,
        accel: Arc<dyn Accelerator>,
        image: Arc<dyn Loaded>,
        limits: SlotLimits,
        metrics: SlotMetrics,
        accel_metrics: Arc<AccelMetricsById>,
        clock: Arc<dyn Clock>,
    ) -> Slot {
        // The bounds the queue is checked against (`Slot::check`), as the config
        // validates them and the tenants' policy derives the share.
        assert!(
            limits.queue_depth_max > 0,
            "a slot queues at least one call"
        );
        assert!(
            limits.tenant_share_max > 0 && limits.tenant_share_max <= limits.queue_depth_max,
            "a tenant's share of a queue is part of it"
        );
        metrics.loaded(None, &accel.descriptor().name);
        let accel_id = accel.descriptor().id;
        Slot {
            id,
            device: device.to_string(),
            backend,
            state: Mutex::new(SlotState {
                accel,
                image,
                phase: Phase::Open,
                execution: Execution::Idle,
                generation: 0,
                handing_over: 0,
                queue: FairQueue::new(),
                taken: 0,
                batch: Vec::new(),
                batch_counts: Default::default(),
            }),
            changed: Condvar::new(),
            depth: AtomicUsize::new(0),
            admits: AtomicU32::new(u32::from(accel_id) | ADMITTING),
            busy_ns: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            ns_per_work_1024: AtomicU64::new(0),
            ns_per_call: AtomicU64::new(nanos(limits.simulated_exec)),
            device_free_at: Mutex::new(clock.now()),
            started: clock.now(),
            limits,
            metrics,
            accel_metrics,
            clock,
        }
    }

    /// Whether the slot hosts accelerator `id` and admits calls, without locking.
    /// A stale answer is harmless: [`Slot::submit`] checks again under the lock.
    pub fn admits(&self, id: u16) -> bool {
        self.admits.load(Ordering::Acquire) == u32::from(id) | ADMITTING
    }

    /// Queued plus running calls.
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// Id of the loaded accelerator and whether the slot is admitting calls for it.
    pub fn hosting(&self) -> Hosting {
        let st = self.state.lock();
        Hosting {
            accel_id: st.accel.descriptor().id,
            open: st.phase.admits(),
            failed: st.phase.failed().is_some(),
            swapping: st.phase.reconfig().map(|r| (r.from, r.to)),
        }
    }

    pub fn info(&self) -> SlotInfo {
        let st = self.state.lock();
        let elapsed = self.clock.since(self.started).as_nanos().max(1) as f64;
        let busy_ns = self.busy_ns.load(Ordering::Relaxed);
        SlotInfo {
            id: self.id,
            device: self.device.clone(),
            backend: self.backend,
            accelerator: st.accel.descriptor().name.clone(),
            accel_id: st.accel.descriptor().id,
            reconfiguring_to: st.phase.reconfig().map(|r| r.to_name.clone()),
            failed: st.phase.failed().cloned(),
            running: st.running(),
            queue_depth: st.queue.len,
            busy_ratio: busy_ns as f64 / elapsed,
            busy_ns,
        }
    }

    /// Whether a call from `tenant` would be admitted now (for `Expect: 100-continue`).
    /// The call's own work is not known yet: it counts as a call of mean time.
    pub fn has_room(&self, tenant: TenantId) -> bool {
        let st = self.state.lock();
        st.queue.len < self.limits.queue_depth_max
            && st.queue.tenant_len(tenant) < self.limits.tenant_share_max
            && self.wait_admits(&st, tenant, 0) != Admission::WaitTooLong
    }

    /// Whether a call of `tenant` with estimated `work` may wait for the calls that
    /// would be served before it.
    ///
    /// The bound is on the calls of *other* tenants, `queue_wait_factor` per call of
    /// its own that runs before it (its tenant's backlog, and itself), each taken at
    /// the call's expected execution time or the slot's mean call time, whichever is
    /// longer, and at least `queue_wait_floor`. So a client with one call at a time
    /// waits for at most about `queue_wait_factor` calls of others: under overload an
    /// accepted call's latency stays a bounded multiple of its latency unloaded,
    /// whatever the kernel's speed — a queue bounded in calls alone
    /// (`queue_depth_max`) lets a call of a 1 ms kernel wait 64 ms behind a full queue
    /// of other clients' calls (65x its unloaded latency), while calls of a µs kernel
    /// could queue far deeper without their wait mattering. A client that pipelines
    /// many calls waits for its own calls anyway; others' calls are bounded in
    /// proportion to them, so a pipelining client is not refused for a backlog it
    /// chose (refusing it only costs CPU on refusals it resends). A call much smaller
    /// than the slot's usual ones is given their allowance, not its own: a small matmul
    /// arriving while a large one runs queues behind it rather than being refused for
    /// a wait it cannot avoid on this slot.
    ///
    /// An admitted call carries the most calls the slot may start before this one
    /// ([`Admission::StartBy`], its [`Job::start_by`]): tenants that join the round after
    /// it go ahead of it in fair order (a tenant new to the round first), and a call
    /// whose turn comes after more calls than it was admitted to wait for is refused
    /// `Busy` at its turn rather than run (without that, one-call-at-a-time clients
    /// arriving anew kept jumping calls already queued: a queue-time p99 of 200–900 ms
    /// where the bound is 40 ms, in `overload.rs`). Counted in calls, not time: a
    /// first version measured the slot's busy time, which a loaded host's preemption
    /// stretches, and refused calls of µs kernels at light load (22 in a CI run of the
    /// registry's failover test).
    fn wait_admits(&self, st: &SlotState, tenant: TenantId, work: u64) -> Admission {
        let factor = self.limits.queue_wait_factor;
        let mean = self.ns_per_call.load(Ordering::Relaxed);
        // A model that batches waits by design, many calls to a run; its queue policy
        // (max_queue_size, the timeout) bounds the wait instead.
        if factor == 0 || mean == 0 || st.accel.batching().is_some() {
            return Admission::Unbounded;
        }
        let each = nanos(self.expected_time(work)).max(mean);
        let own = st.queue.tenant_len(tenant) as u64;
        let allowed = each
            .saturating_mul(u64::from(factor))
            .saturating_mul(own + 1)
            .max(nanos(self.limits.queue_wait_floor));
        // The other tenants' calls served before this one, each at the slot's mean
        // call time. (The work model says nothing of calls whose estimate is zero, and
        // a simulated or real device often costs the same per call whatever its size.)
        // The call in progress is not counted: every call waits for it on this slot,
        // and a long one would refuse every short call arriving meanwhile.
        let others = st.queue.others_ahead_of_next(tenant) as u64;
        debug_assert!(
            others <= st.queue.len as u64,
            "more calls ahead than queued"
        );
        if others.saturating_mul(mean) > allowed {
            return Admission::WaitTooLong;
        }
        // Its own calls ahead, and as many others' as the allowance holds: at least
        // the others it waits for, so a call admitted now is not refused at its turn
        // for the queue it was admitted behind.
        let start_by = st.taken + own + allowed / mean;
        debug_assert!(start_by >= st.taken + own + others);
        Admission::StartBy(start_by)
    }

    /// Submits a call. Refuses with `Unavailable` when the slot does not (or no longer)
    /// host the call's accelerator, and with `Busy` when the queue has no room.
    // The refused call travels back by value so the dispatcher can offer it to the next
    // slot; boxing it would allocate on every refusal.
    /// A call refused for the wait bound is counted in `wait_refusals`: this slot's
    /// answer is the call's. (The dispatcher offers a call to several slots instead,
    /// [`Slot::offer`], and counts it once when none takes it.)
    #[allow(clippy::result_large_err)]
    pub fn submit(&self, call: Call) -> Result<Submitted, Refused> {
        let submitted = self.offer(call);
        if let Err(refused) = &submitted {
            if refused.waited_too_long {
                self.count_wait_refusal();
            }
        }
        submitted
    }

    /// Counts a call answered `Busy` for the wait bound of this slot, once per call.
    pub fn count_wait_refusal(&self) {
        self.metrics.wait_refusals.inc();
    }

    /// [`Slot::submit`] without counting a refusal: the call may yet go to another
    /// slot.
    #[allow(clippy::result_large_err)]
    pub fn offer(&self, call: Call) -> Result<Submitted, Refused> {
        let mut st = self.state.lock();
        if !st.phase.admits() || st.accel.descriptor().id != call.accel.descriptor().id {
            return Err(Refused {
                status: Status::Unavailable,
                waited_too_long: false,
                call,
            });
        }
        let work = call.accel.work_estimate(&call.params, call.payload.len());
        // A model that batches runs its calls on the worker, which forms the batches.
        let cheap = work <= self.limits.inline_work_max
            && st.image.inline_ok()
            && self.limits.simulated_exec.is_zero()
            && st.accel.batching().is_none();
        if cheap && !st.running() && st.queue.len == 0 {
            let start = self.begin(&mut st, work, None);
            self.debug_check(&st);
            let image = Arc::clone(&st.image);
            drop(st);
            self.depth.fetch_add(1, Ordering::Relaxed);
            let answer = self.execute(&image, call, start);
            self.finish_one(start);
            return Ok(Submitted::Done(answer));
        }
        self.enqueue(st, call, work, cheap)
    }

    /// Queues a call of estimated `work` that does not run at once, or refuses it
    /// `Busy` when the queue, its tenant's share of the queue or the wait it would
    /// have ([`Slot::wait_admits`]) is over its bound. A `cheap` call of a tenant
    /// without a backlog may still run on this thread ([`Slot::run_after_current`]).
    #[allow(clippy::result_large_err)]
    fn enqueue(
        &self,
        mut st: parking_lot::MutexGuard<'_, SlotState>,
        call: Call,
        work: u64,
        cheap: bool,
    ) -> Result<Submitted, Refused> {
        debug_assert!(st.phase.admits(), "only an open slot queues calls");
        let tenant = call.tenant;
        // A model's own queue bound (its queue policy's max_queue_size), if any.
        let model_max = st
            .accel
            .batching()
            .map(|p| p.queue_policy.max_queue_size)
            .filter(|&n| n > 0);
        if st.queue.len >= self.limits.queue_depth_max
            || st.queue.tenant_len(tenant) >= self.limits.tenant_share_max
            || model_max.is_some_and(|n| st.queue.len >= n)
        {
            return Err(Refused {
                status: Status::Busy,
                waited_too_long: false,
                call,
            });
        }
        let admission = self.wait_admits(&st, tenant, work);
        if admission == Admission::WaitTooLong {
            return Err(Refused {
                status: Status::Busy,
                waited_too_long: true,
                call,
            });
        }
        // A cheap call of a tenant without a backlog runs on this thread next: at once
        // when the worker has not yet taken the next call (it may be starved of CPU),
        // or after the call in progress if that is expected to end soon enough.
        let wait = self.limits.hand_over_wait;
        let hand_over = cheap
            && st.queue.tenant_len(tenant) == 0
            && match &st.execution {
                Execution::Idle => true,
                Execution::Running(run) => !wait.is_zero() && run.ends <= self.clock.now() + wait,
            };
        let (reply, rx) = oneshot::channel();
        let start_by = admission.start_by();
        st.queue.push(
            tenant,
            Job {
                call,
                reply,
                work,
                start_by,
            },
        );
        self.debug_check(&st);
        self.metrics.queue_depth.set(st.queue.len as i64);
        let wake = !st.running();
        self.depth.fetch_add(1, Ordering::Relaxed);
        if hand_over {
            if let Some(answer) = self.run_after_current(st, tenant, work) {
                return Ok(Submitted::Done(answer));
            }
        } else {
            drop(st);
        }
        if wake {
            self.changed.notify_all();
        }
        Ok(Submitted::Queued(rx))
    }

    /// Waits (at most `hand_over_wait`) for the call in progress, if any, to end, then
    /// runs `tenant`'s sole queued call (of estimated `work`) on this thread. `None`
    /// when the wait timed out or the worker took the call first: it then stays with
    /// the worker.
    fn run_after_current(
        &self,
        mut st: parking_lot::MutexGuard<'_, SlotState>,
        tenant: TenantId,
        work: u64,
    ) -> Option<Answer> {
        let until = Instant::now() + self.limits.hand_over_wait;
        st.handing_over += 1;
        while st.running() {
            if self.changed.wait_until(&mut st, until).timed_out() {
                break;
            }
        }
        debug_assert!(st.handing_over > 0, "this thread's hand-over is counted");
        st.handing_over -= 1;
        let job = if st.running() {
            None
        } else {
            st.queue.take_sole(tenant)
        };
        let Some(Job { call, reply, .. }) = job else {
            // Timed out: the worker, which held back while this thread waited, may go.
            self.debug_check(&st);
            drop(st);
            self.changed.notify_all();
            return None;
        };
        drop(reply); // answered here, not through the channel
        self.metrics.queue_depth.set(st.queue.len as i64);
        let start = self.begin(&mut st, work, None);
        self.debug_check(&st);
        let image = Arc::clone(&st.image);
        drop(st);
        let answer = self.execute(&image, call, start);
        self.finish_one(start);
        Some(answer)
    }

    /// Ends the call begun at `start` on a network thread. A call the slot gave up on
    /// meanwhile ([`Slot::abandon_running`]) has been accounted for already.
    fn finish_one(&self, start: Start) {
        let mut st = self.state.lock();
        if st.generation != start.generation {
            return;
        }
        let run = st.end_running();
        debug_assert!(
            run.is_some_and(|run| run.reply.is_none()),
            "a call run on a network thread is answered by that thread"
        );
        self.debug_check(&st);
        let wake = st.queue.len > 0 || st.phase.waited_on();
        drop(st);
        self.depth.fetch_sub(1, Ordering::Relaxed);
        if wake {
            self.changed.notify_all();
        }
    }

    /// Marks the slot as running a call of estimated `work` from now on, expected to
    /// end after [`Slot::expected_time`], answered through `reply` when the worker
    /// runs it.
    fn begin(
        &self,
        st: &mut SlotState,
        work: u64,
        reply: Option<oneshot::Sender<Answer>>,
    ) -> Start {
        let at = self.clock.now();
        st.start_running(at, at + self.expected_time(work), reply);
        Start {
            at,
            work,
            generation: st.generation,
        }
    }

    /// How long a call of estimated `work` is expected to take, from the execution
    /// times of the slot's earlier calls per unit of work (zero before any call ran).
    fn expected_time(&self, work: u64) -> Duration {
        let per = self.ns_per_work_1024.load(Ordering::Relaxed);
        Duration::from_nanos(work.saturating_mul(per) >> 10)
    }

    /// Folds one call's execution time into [`Slot::ns_per_call`] and, when it had a
    /// work estimate, [`Slot::ns_per_work_1024`] (weight 1/8 each). The slot itself
    /// learns through [`Slot::learn_speed_of`], which also takes batches.
    #[cfg(test)]
    fn learn_speed(&self, work: u64, exec_ns: u64) {
        self.learn_speed_of(work, exec_ns, 1);
    }

    /// [`Slot::learn_speed`] of a run of `calls` calls (a batch): each counts as a
    /// call of its share of the time, so that the mean call time the wait bound
    /// reads is per call.
    fn learn_speed_of(&self, work: u64, exec_ns: u64, calls: u64) {
        // At least 1 ns: 0 means "not timed yet".
        fold_average(&self.ns_per_call, (exec_ns / calls.max(1)).max(1));
        if work == 0 {
            return;
        }
        let sample = (u128::from(exec_ns) << 10) / u128::from(work);
        fold_average(
            &self.ns_per_work_1024,
            u64::try_from(sample).unwrap_or(u64::MAX),
        );
    }

    /// Runs one call on `image`, begun at `start`, or answers it without running when
    /// its deadline passed.
    fn execute(&self, image: &Arc<dyn Loaded>, call: Call, start: Start) -> Answer {
        let started = start.at;
        let Call {
            accel,
            params,
            mut payload,
            mut out,
            received,
            deadline,
            permit,
            ..
        } = call;
        let queue_ns = nanos(started.saturating_duration_since(received));
        let id = accel.descriptor().id;
        let (status, message, exec_ns, ended) = if deadline.passed(started) {
            out.clear();
            let waited = queue_ns / 1000;
            (
                Status::DeadlineExceeded,
                format!("deadline passed after {waited} µs in the queue"),
                0,
                started,
            )
        } else {
            self.run_kernel(image, &params, &payload, &mut out, received, start, 1)
        };
        if status != Status::Ok {
            out.clear();
        }
        drop(permit);
        payload.clear();
        let abandoned = self.generation.load(Ordering::Relaxed) != start.generation;
        if let Some(m) = self.accel_metrics.get(&id).filter(|_| !abandoned) {
            // The kernel's end is the call's: one clock read for both (issue 28).
            m.answered(status, nanos(ended.saturating_duration_since(received)));
        }
        Answer {
            status,
            output: out,
            message,
            slot: Some(self.id),
            queue_ns,
            exec_ns,
            payload,
        }
    }

    /// Runs the kernel of a call (begun at `start`, received at `received`) on
    /// `image`, and learns the slot's speed from it; a batch of `calls` calls counts
    /// as that many calls of its time each. Returns the call's status, the message of
    /// a failure, its execution time in ns and when it ended (the clock read once).
    #[allow(clippy::too_many_arguments)]
    fn run_kernel(
        &self,
        image: &Arc<dyn Loaded>,
        params: &ParamBlock,
        payload: &[u8],
        out: &mut Vec<u8>,
        received: Instant,
        start: Start,
        calls: u64,
    ) -> (Status, String, u64, Instant) {
        // A kernel that panics fails its call, not the slot: the panic is caught,
        // the call answered INTERNAL, and the slot keeps serving.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            image.run(params, payload, out)
        }))
        .unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(CallError::Internal(format!(
                "the accelerator failed: {what}"
            )))
        });
        let (exec_ns, ended) = if self.limits.simulated_exec.is_zero() {
            let ended = self.clock.now();
            (nanos(ended.saturating_duration_since(start.at)), ended)
        } else {
            let exec_ns = self.simulated_device_time(received, start.at);
            (exec_ns, self.clock.now())
        };
        debug_assert!(calls >= 1, "a run is of one call or more");
        self.learn_speed_of(start.work, exec_ns, calls);
        self.metrics.executed(exec_ns);
        self.busy_ns.fetch_add(exec_ns, Ordering::Relaxed);
        match result {
            // A device that reports or models its execution time says how long
            // the call took on it; busy time and speed stay wall time.
            Ok(ran) => (
                Status::Ok,
                String::new(),
                ran.exec_ns.unwrap_or(exec_ns),
                ended,
            ),
            Err(CallError::BadRequest(m)) => (Status::BadRequest, m, exec_ns, ended),
            Err(CallError::Internal(m)) => (Status::Internal, m, exec_ns, ended),
        }
    }

    /// The simulated device's time of a call that arrived at `received` and was
    /// taken up by the worker at `started`: the device begins it when it ends its
    /// previous call (or at `received`, when idle by then) and holds it
    /// `simulated_exec`. The CPU kernel's own time is not the device's and does not
    /// count: a host too busy to run the worker at once delays answers, not the
    /// device. Sleeps (the CPU stays free) until the end, and returns the device's
    /// time in ns.
    fn simulated_device_time(&self, received: Instant, started: Instant) -> u64 {
        debug_assert!(!self.limits.simulated_exec.is_zero());
        let mut free_at = self.device_free_at.lock();
        let begin = (*free_at).max(received).min(started);
        let end = begin + self.limits.simulated_exec;
        debug_assert!(begin <= started, "the device begins a call by its take-up");
        *free_at = end;
        drop(free_at);
        self.clock.sleep_until(end);
        nanos(end - begin)
    }

    /// The worker thread's loop: runs queued calls until the slot is stopped and empty.
    pub fn run_worker(&self) {
        // The class protects network threads from CPU kernels. A thread that drives an
        // OpenCL device mostly waits for it, and the runtime's own threads (PoCL's
        // compute threads among them) may be created from it and inherit its class:
        // at SCHED_IDLE they lost the CPU to any busy process (a 256x256 sobel took
        // 400 ms instead of 0.2 ms beside a SCHED_IDLE busy loop).
        let policy = match self.backend {
            BackendKind::Opencl => WorkerPolicy::Normal,
            BackendKind::Cpu | BackendKind::Rtl => self.limits.worker_policy,
        };
        set_worker_scheduling(policy, self.limits.worker_nice);
        let generation = self.state.lock().generation;
        while let Some((mut st, job)) = self.next_job(generation) {
            self.metrics.queue_depth.set(st.queue.len as i64);
            if self.cancelled_at_turn(&job) {
                let wake = st.phase.waited_on();
                drop(st);
                drop(job);
                if wake {
                    self.changed.notify_all();
                }
                continue;
            }
            if let Some(by) = job.start_by.filter(|&by| st.taken > by) {
                let late = st.taken - by;
                drop(st);
                self.refuse_late(job, late);
                // A reconfiguration or stop may be waiting for the queue to empty.
                self.changed.notify_all();
                continue;
            }
            if st.accel.batching().is_some() && loaded_is(&st, &job) {
                if !self.run_batch(st, job, generation) {
                    return;
                }
                continue;
            }
            let taken = self.take(&mut st, job);
            drop(st);
            if !self.end_job(generation, self.run_taken(taken)) {
                return;
            }
        }
    }

    /// Waits for the next call the worker of `generation` may take: when none is
    /// running, no network thread waits to run one ([`Slot::run_after_current`]) and
    /// one is queued. `None` when the worker is to exit: the slot gave up on its
    /// generation, or is stopping with an empty queue.
    fn next_job(&self, generation: u64) -> Option<(parking_lot::MutexGuard<'_, SlotState>, Job)> {
        let mut st = self.state.lock();
        loop {
            if st.generation != generation {
                return None;
            }
            if !st.running() && st.handing_over == 0 {
                if let Some(job) = st.queue.pop() {
                    self.debug_check(&st);
                    return Some((st, job));
                }
                if st.phase.stopping() {
                    return None;
                }
            }
            self.changed.wait(&mut st);
        }
    }

    /// Ends the call the worker of `generation` ran and sends its `answer`. `false`
    /// when the slot gave up on this thread while its kernel ran: the call was
    /// answered then, another worker serves the slot now, and this one exits.
    fn end_job(&self, generation: u64, answer: Answer) -> bool {
        let mut st = self.state.lock();
        if st.generation != generation {
            drop(st);
            self.metrics.threads_abandoned.dec();
            tracing::warn!(
                slot = self.id,
                "an abandoned slot thread's kernel returned; the thread exits"
            );
            return false;
        }
        let reply = st.end_running().and_then(|run| run.reply);
        debug_assert!(reply.is_some(), "the worker answers the calls it runs");
        self.debug_check(&st);
        let wake = st.queue.len > 0 || st.phase.waited_on();
        drop(st);
        self.depth.fetch_sub(1, Ordering::Relaxed);
        // The caller may have gone (connection closed, call cancelled): its answer
        // has nowhere to go, and the call counts as cancelled while running.
        if let Some(reply) = reply {
            self.send_ran(reply, answer);
        }
        if wake {
            self.changed.notify_all();
        }
        true
    }

    /// Answers `Busy` a queued call whose turn came `late` calls after the most it
    /// was admitted to wait for (see [`Slot::wait_admits`]).
    fn refuse_late(&self, job: Job, late: u64) {
        debug_assert!(late > 0, "a call on time is not refused");
        let Job { call, reply, .. } = job;
        self.metrics.wait_refusals.inc();
        self.depth.fetch_sub(1, Ordering::Relaxed);
        let message = format!(
            "{late} more calls of other clients ran before this one's turn than it was admitted to wait for (queue_wait_factor); retry"
        );
        let _ = reply.send(Answer::refusal(Status::Busy, message, call));
    }
}

/// Folds `sample` into the moving average in `cell` (weight 1/8; the first sample,
/// while the cell is 0, sets it). Racing updates (inline calls on several threads) may
/// lose a sample: harmless.
fn fold_average(cell: &AtomicU64, sample: u64) {
    let old = cell.load(Ordering::Relaxed);
    let new = if old == 0 {
        sample
    } else {
        old - old / 8 + sample / 8
    };
    cell.store(new, Ordering::Relaxed);
}

/// Whether `job` is for the accelerator loaded in the slot (always, while
/// reconfiguration drains the queue before it swaps).
fn loaded_is(st: &SlotState, job: &Job) -> bool {
    st.accel.descriptor().id == job.call.accel.descriptor().id
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

// Dynamic batching lives beside this file, as do the state's enums and checker and
// the tests, so that it stays within a size a reader can hold.
mod batching;
mod cancel;

// Reconfiguration, a hung kernel and stopping live beside this file, so that it stays
// within a size a reader can hold.
mod reconfig;

// The state's enums and checker live beside this file, as do the tests, so that it
// stays within a size a reader can hold.
mod state;

// Stepping a slot without its worker thread (the simulator's seam) lives beside it.
mod step;
pub use step::{PendingLoad, Step, Taken};

// The tests live beside this file, so that it stays within a size a reader can hold.
#[cfg(test)]
mod tests;
