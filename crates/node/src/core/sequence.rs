//! Sequences: the calls of a stateful model that carry one correlation id, from the
//! call flagged START to the call flagged END (Triton's sequence batcher, its
//! `direct` strategy).
//!
//! The table here holds each live sequence of each model and the slot its calls go
//! to: a START picks the slot hosting the model with the fewest live sequences of it
//! and the calls after it follow; END releases the sequence. Calls of one sequence
//! reach their slot in the order they are submitted, and a slot runs one tenant's
//! calls in arrival order, so a client that sends a sequence's calls in order (one
//! connection, or one gRPC stream) has them run in order. The model itself is a pure
//! function of its inputs and the control inputs (`accel::sequence`), so a sequence
//! whose slot is reconfigured or fails moves to another slot hosting the model: no
//! call of it is refused for that.
//!
//! Bounds: at most the model's `max_sequences` live at once; a START beyond it, once
//! the idle sequences are released, is refused `UNAVAILABLE` (retry). A sequence with
//! no call for `max_sequence_idle_microseconds` is released; its next call without
//! START is refused with Triton's sentence. Releasing is lazy (on the next call of
//! the sequence, or when a START finds the model's table full): nothing runs in the
//! background and the table never holds more than the bound.
//!
//! Not for: the front ends' parsing of the flags (`front::oip::sequence`), or the
//! control tensors' bytes (`accel::sequence`).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use accel::sequence::Policy;
use parking_lot::Mutex;
use rac_proto::Status;

use crate::core::dispatch::Dispatcher;
use crate::core::slot::{Answer, Call, Slot, Submitted};

/// Longest correlation id that is a string, in bytes.
pub const ID_TEXT_BYTES_MAX: usize = 256;

/// A sequence's correlation id: Triton's are a `uint64` or a string.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CorrelationId {
    Number(u64),
    Text(String),
}

impl fmt::Display for CorrelationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CorrelationId::Number(n) => write!(f, "{n}"),
            CorrelationId::Text(s) => f.write_str(s),
        }
    }
}

/// Where one call stands in its sequence, as its request said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sequenced {
    pub id: CorrelationId,
    pub start: bool,
    pub end: bool,
}

impl Sequenced {
    /// The control inputs' view of it (a string id's number is 0).
    pub fn flags(&self) -> accel::sequence::Flags {
        accel::sequence::Flags {
            start: self.start,
            end: self.end,
            corrid: match self.id {
                CorrelationId::Number(n) => n,
                CorrelationId::Text(_) => 0,
            },
        }
    }
}

/// One live sequence.
struct Live {
    slot: u16,
    /// When its last call came.
    last: Instant,
    /// Its implicit state (`accel::sequence::State`): what the model's state outputs
    /// gave on its last call, zeros after START; held by the call that runs, so the
    /// sequence's calls run one after another, in the order they came.
    state: StateCell,
}

/// Where a call of a sequence goes, and the state it reads and writes.
struct Routed {
    slot: Arc<Slot>,
    state: StateCell,
}

/// A sequence's state, behind the lock its calls take in turn (tokio's: fair, so in
/// the order they ask).
type StateCell = Arc<tokio::sync::Mutex<Vec<u8>>>;

/// Every model's live sequences, by accelerator id.
#[derive(Default)]
pub struct Sequences {
    models: Mutex<HashMap<u16, HashMap<CorrelationId, Live>>>,
}

impl Sequences {
    /// Runs `call`, a call of its sequence `seq` (`None`: a call that stands alone,
    /// run as the dispatcher runs any), and gives its one answer.
    pub async fn run(
        &self,
        dispatcher: &Dispatcher,
        call: Call,
        seq: Option<&Sequenced>,
    ) -> Answer {
        let Some(seq) = seq else {
            return dispatcher.run(call).await;
        };
        // The model, held apart from the call so that its policy outlives the call's
        // moves.
        let model = Arc::clone(&call.accel);
        let Some(policy) = model.sequence() else {
            return dispatcher.run(call).await;
        };
        let accel_id = model.descriptor().id;
        let mut call = call;
        // The state this call reads and writes, locked until its answer.
        let mut held: Option<tokio::sync::OwnedMutexGuard<Vec<u8>>> = None;
        // A slot that stops admitting the model (reconfigured, failed) between the
        // routing and the offer sends the sequence to another: at most once a slot.
        for _ in 0..=dispatcher.slots().len() {
            let slot = match self.route(dispatcher, &call, policy, seq) {
                Ok(Some(Routed { slot, state })) => {
                    if held.is_none() && !policy.states.is_empty() {
                        let state = state.lock_owned().await;
                        // The decoder left the state's room at the payload's end.
                        let at = call.payload.len() - state.len();
                        call.payload[at..].copy_from_slice(&state);
                        held = Some(state);
                    }
                    slot
                }
                // No slot hosts the model now: the dispatcher gives the refusal.
                Ok(None) => return dispatcher.run(call).await,
                Err((status, message)) => return Answer::refusal(status, message, call),
            };
            let submitted = match slot.submit(call) {
                Ok(submitted) => submitted,
                Err(refused) if refused.status == Status::Unavailable => {
                    call = refused.call;
                    continue;
                }
                Err(refused) => {
                    // A refused call did not happen: a refused START opened nothing.
                    if seq.start {
                        self.close(accel_id, &seq.id);
                    }
                    let message = format!(
                        "the slot of sequence {} of model '{}' is full; retry",
                        seq.id,
                        refused.call.accel.descriptor().name
                    );
                    return Answer::refusal(refused.status, message, refused.call);
                }
            };
            if seq.end {
                self.close(accel_id, &seq.id);
            }
            let answer = match submitted {
                Submitted::Done(answer) => answer,
                Submitted::Queued(rx) => dispatcher.wait(rx).await,
            };
            if let (Some(state), Status::Ok) = (held.as_deref_mut(), answer.status) {
                keep_state(&*model, policy, &answer.output, state);
            }
            return answer;
        }
        dispatcher.run(call).await
    }

    /// Releases sequence `id` of model `accel_id`.
    fn close(&self, accel_id: u16, id: &CorrelationId) {
        if let Some(live) = self.models.lock().get_mut(&accel_id) {
            live.remove(id);
        }
    }

    /// The slot the call goes to (`None`: no slot admits the model), after the
    /// sequence table has taken the call in: a START opens (or restarts) the
    /// sequence (an END closes it once its call is accepted: [`Sequences::run`]).
    /// The error is the refusal.
    fn route(
        &self,
        dispatcher: &Dispatcher,
        call: &Call,
        policy: &Policy,
        seq: &Sequenced,
    ) -> Result<Option<Routed>, (Status, String)> {
        let accel = call.accel.descriptor();
        let now = call.received;
        let mut models = self.models.lock();
        let live = models.entry(accel.id).or_default();
        let idle = |l: &Live| now.saturating_duration_since(l.last) > policy.max_idle;
        if live.get(&seq.id).is_some_and(idle) {
            live.remove(&seq.id);
        }
        if !seq.start && !live.contains_key(&seq.id) {
            return Err((
                Status::BadRequest,
                format!(
                    "inference request for sequence {} to model '{}' must specify the START \
                     flag on the first request of the sequence",
                    seq.id, accel.name
                ),
            ));
        }
        if seq.start && !live.contains_key(&seq.id) && live.len() >= policy.sequences_max {
            live.retain(|_, l| !idle(&*l));
            if live.len() >= policy.sequences_max {
                return Err((
                    Status::Unavailable,
                    format!(
                        "inference request for sequence {} to model '{}' cannot start: the \
                         model has {} live sequences, its max_sequences; retry",
                        seq.id,
                        accel.name,
                        live.len()
                    ),
                ));
            }
        }
        let slots = dispatcher.slots();
        let kept = live
            .get(&seq.id)
            .map(|l| &slots[usize::from(l.slot)])
            .filter(|s| s.admits(accel.id));
        let slot = match kept {
            Some(slot) => Arc::clone(slot),
            None => match least_sequences(slots, live, accel.id) {
                Some(slot) => slot,
                None => {
                    live.remove(&seq.id);
                    return Ok(None);
                }
            },
        };
        // A START begins from zeros; a later call keeps the state its sequence has.
        let state = match live.get(&seq.id) {
            Some(l) if !seq.start => Arc::clone(&l.state),
            _ => Arc::new(tokio::sync::Mutex::new(vec![0; policy.state_bytes()])),
        };
        let entry = Live {
            slot: slot.id,
            last: now,
            state: Arc::clone(&state),
        };
        live.insert(seq.id.clone(), entry);
        debug_assert!(live.len() <= policy.sequences_max);
        Ok(Some(Routed { slot, state }))
    }

    /// Live sequences of model `accel_id`.
    pub fn live(&self, accel_id: u16) -> usize {
        self.models.lock().get(&accel_id).map_or(0, HashMap::len)
    }
}

/// Keeps what the model's state outputs gave in `output` (one item: a stateful
/// model's calls carry one) as the sequence's `state`.
fn keep_state(model: &dyn accel::Accelerator, policy: &Policy, output: &[u8], state: &mut Vec<u8>) {
    let Some(t) = model.tensors() else {
        return;
    };
    let Ok(parts) = t.split_outputs(1, output) else {
        return;
    };
    state.clear();
    for part in &parts[policy.first_state_output(t)..] {
        state.extend_from_slice(part);
    }
    debug_assert_eq!(state.len(), policy.state_bytes());
}

/// The slot admitting model `accel_id` with the fewest of its `live` sequences: one
/// pass over them (at most `max_sequences`), then one over the slots.
fn least_sequences(
    slots: &[Arc<Slot>],
    live: &HashMap<CorrelationId, Live>,
    accel_id: u16,
) -> Option<Arc<Slot>> {
    let mut held = vec![0usize; slots.len()];
    for l in live.values() {
        held[usize::from(l.slot)] += 1;
    }
    debug_assert_eq!(held.iter().sum::<usize>(), live.len());
    slots
        .iter()
        .filter(|s| s.admits(accel_id))
        .min_by_key(|s| held[usize::from(s.id)])
        .cloned()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use accel::{Accelerator, CallError, Catalog, Descriptor, ParamBlock};

    use super::*;
    use crate::core::clock::SystemClock;
    use crate::core::deadline::Deadline;
    use crate::core::dispatch::BalancePolicy;
    use crate::core::slot::{SlotLimits, WorkerPolicy};
    use crate::core::tenant::TenantId;
    use crate::device::{BackendKind, SlotPlan};

    /// A model with sequences that echoes its payload.
    struct Stateful(Descriptor, Policy);

    impl Accelerator for Stateful {
        fn descriptor(&self) -> &Descriptor {
            &self.0
        }
        fn check(&self, _: &ParamBlock, _: Option<usize>) -> Result<(), CallError> {
            Ok(())
        }
        fn work_estimate(&self, _: &ParamBlock, _: usize) -> u64 {
            1
        }
        fn run(&self, _: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
            out.clear();
            out.extend_from_slice(input);
            Ok(())
        }
        fn sequence(&self) -> Option<&Policy> {
            Some(&self.1)
        }
    }

    const IDLE: Duration = Duration::from_millis(100);

    /// A dispatcher with two slots hosting a model of at most 2 live sequences.
    fn two_slots() -> (Arc<Dispatcher>, Arc<dyn Accelerator>) {
        let descriptor = Descriptor {
            id: 900,
            name: "stateful".into(),
            hash: String::new(),
            params: Vec::new(),
        };
        let policy = Policy {
            strategy: accel::sequence::Strategy::Direct,
            states: Vec::new(),
            max_idle: IDLE,
            sequences_max: 2,
            controls: Vec::new(),
        };
        let model: Arc<dyn Accelerator> = Arc::new(Stateful(descriptor, policy));
        let plan = || SlotPlan {
            device: "test".into(),
            backend: BackendKind::Cpu,
            accel: Arc::clone(&model),
            image: Arc::new(crate::device::cpu::CpuImage(Arc::clone(&model))),
        };
        let limits = SlotLimits {
            queue_depth_max: 4,
            tenant_share_max: 4,
            inline_work_max: 0,
            hand_over_wait: Duration::from_millis(10),
            reconfig_delay: Duration::ZERO,
            simulated_exec: Duration::ZERO,
            worker_nice: 0,
            worker_policy: WorkerPolicy::Normal,
            kernel_timeout: Duration::ZERO,
            queue_wait_factor: 0,
            queue_wait_floor: Duration::ZERO,
        };
        let dispatcher = Dispatcher::start(
            Catalog::new(vec![Arc::clone(&model)]),
            vec![plan(), plan()],
            limits,
            BalancePolicy::JoinShortestQueue,
            &crate::telemetry::metrics::Metrics::new(),
            Arc::new(SystemClock),
        );
        (dispatcher, model)
    }

    fn call(model: &Arc<dyn Accelerator>) -> Call {
        Call {
            accel: Arc::clone(model),
            params: [0; accel::PARAMS_LEN],
            payload: b"x".to_vec(),
            out: Vec::new(),
            received: Instant::now(),
            deadline: Deadline::after(Instant::now(), 0),
            tenant: TenantId::default(),
            permit: None,
        }
    }

    fn seq(id: u64, start: bool, end: bool) -> Sequenced {
        Sequenced {
            id: CorrelationId::Number(id),
            start,
            end,
        }
    }

    #[test]
    fn sequences_keep_their_slot_end_release_and_idle_ones_expire() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (dispatcher, model) = two_slots();
        let table = Sequences::default();
        let run = |s: Sequenced| rt.block_on(table.run(&dispatcher, call(&model), Some(&s)));
        let a = run(seq(1, true, false));
        let b = run(seq(2, true, false));
        assert_eq!((a.status, b.status), (Status::Ok, Status::Ok));
        assert_ne!(a.slot, b.slot, "two sequences on two slots");
        for _ in 0..3 {
            assert_eq!(run(seq(1, false, false)).slot, a.slot);
            assert_eq!(run(seq(2, false, false)).slot, b.slot);
        }
        assert_eq!(table.live(900), 2);
        // Full: a third START is refused and opens nothing.
        let third = run(seq(3, true, false));
        assert_eq!(third.status, Status::Unavailable, "{}", third.message);
        assert!(third.message.contains("max_sequences"), "{}", third.message);
        // END releases; the ended id must START again, in Triton's words.
        assert_eq!(run(seq(2, false, true)).status, Status::Ok);
        assert_eq!(table.live(900), 1);
        let late = run(seq(2, false, false));
        assert_eq!(late.status, Status::BadRequest);
        assert!(late
            .message
            .contains("must specify the START flag on the first request"));
        assert_eq!(run(seq(3, true, false)).status, Status::Ok);
        // Idle past max_idle: released, and its slot's room given to a new one.
        std::thread::sleep(IDLE + Duration::from_millis(20));
        assert_eq!(run(seq(1, false, false)).status, Status::BadRequest);
        assert_eq!(run(seq(4, true, false)).status, Status::Ok);
        assert_eq!(run(seq(5, true, false)).status, Status::Ok);
        assert_eq!(table.live(900), 2);
        // A call outside any sequence runs as any other.
        let alone = rt.block_on(table.run(&dispatcher, call(&model), None));
        assert_eq!(alone.status, Status::Ok);
        dispatcher.stop();
    }
}
