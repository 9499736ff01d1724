//! A slot's dynamic batching: for a model that declares `[dynamic_batching]`, the
//! worker forms a batch around the call it took — taking further queued calls in the
//! tenant-fair queue's order while the batcher ([`crate::core::batch`]) says so,
//! waiting for more up to the model's delay — and runs the batch as ONE call of the
//! device, the payloads joined along the batch axis and the output split back call
//! by call (`accel::batch`).
//!
//! Each call keeps its own life: a call whose deadline passed while it waited is
//! answered `DEADLINE_EXCEEDED` and not run, one past its queue timeout is answered
//! (`REJECT`) or run (`DELAY`), and every call taken gets exactly one answer — the
//! calls of the batch sit in [`SlotState::batch`] until answered, so that a hung
//! kernel or the drain deadline answers them as it answers the queue.
//!
//! Part of the `slot` module, in a file of its own so that each stays within a size
//! a reader can hold.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use accel::batch::{Policy, TimeoutAction};
use accel::tensors::Tensors;
use parking_lot::MutexGuard;
use rac_proto::Status;

use super::state::{BatchCount, SlotState};
use super::{nanos, Answer, Job, Slot};
use crate::core::batch::{decide, timed_out, Decision, Forming};

type Guard<'a> = MutexGuard<'a, SlotState>;

impl Slot {
    /// The batches the loaded model ran at this slot, by batch size (sizes never run
    /// are left out): Triton's `batch_stats`.
    pub fn batch_counts(&self) -> Vec<(usize, BatchCount)> {
        self.state.lock().batch_counts.by_size()
    }

    /// Runs `first`, just taken from the queue, and the calls that join it as one
    /// batch of the loaded model (which declares `policy` and `tensors`). `false`
    /// when the worker of `generation` is to exit (the slot gave up on it).
    pub(super) fn run_batch(&self, mut st: Guard<'_>, first: Job, generation: u64) -> bool {
        let accel = Arc::clone(&st.accel);
        let policy = accel
            .batching()
            .expect("only a model that batches forms batches");
        let tensors = accel
            .tensors()
            .expect("a model that batches declares tensors");
        debug_assert!(st.batch.is_empty() && !st.running());
        st.taken += 1;
        st.batch.push(first);
        let Some(mut st) = self.form_batch(st, policy, tensors, generation) else {
            return false;
        };
        self.answer_unrunnable(&mut st, policy);
        if st.batch.is_empty() {
            let wake = st.phase.waited_on();
            drop(st);
            if wake {
                self.changed.notify_all();
            }
            return true;
        }
        let payloads: Vec<&[u8]> = st.batch.iter().map(|j| &j.call.payload[..]).collect();
        let mut joined = Vec::new();
        let sizes = accel::batch::join(tensors, &payloads, &mut joined);
        let work = st.batch.iter().map(|j| j.work).sum();
        let params = st.batch[0].call.params;
        let oldest = oldest(&st.batch);
        let start = self.begin(&mut st, work, None);
        self.debug_check(&st);
        let image = Arc::clone(&st.image);
        let calls = st.batch.len() as u64;
        drop(st);
        let mut out = Vec::new();
        let (status, message, exec_ns) = match &sizes {
            Ok(_) => {
                let (status, message, exec_ns, _) =
                    self.run_kernel(&image, &params, &joined, &mut out, oldest, start, calls);
                (status, message, exec_ns)
            }
            Err(e) => (Status::Internal, format!("joining the batch: {e}"), 0),
        };
        let mut st = self.state.lock();
        if st.generation != generation {
            // Answered when the slot gave up on this thread.
            drop(st);
            self.metrics.threads_abandoned.dec();
            tracing::warn!(
                slot = self.id,
                "an abandoned slot thread's batch returned; the thread exits"
            );
            return false;
        }
        let run = st.end_running();
        debug_assert!(
            run.is_some_and(|r| r.reply.is_none()),
            "a batch's replies are its jobs'"
        );
        let jobs = std::mem::take(&mut st.batch);
        let items = sizes.as_ref().map_or(0, |s| s.iter().sum());
        if status == Status::Ok {
            st.batch_counts
                .record(items, policy.max_batch_size, exec_ns);
        }
        self.debug_check(&st);
        let wake = st.queue.len > 0 || st.phase.waited_on();
        drop(st);
        self.depth.fetch_sub(jobs.len(), Ordering::Relaxed);
        let sizes = sizes.unwrap_or_default();
        self.answer_batch(
            jobs,
            tensors,
            (status, message, exec_ns),
            &out,
            &sizes,
            start.at,
        );
        if wake {
            self.changed.notify_all();
        }
        true
    }

    /// Grows the batch in [`SlotState::batch`] as the batcher decides, waiting (the
    /// lock released) for more calls when it says so. Returns with the batch to run
    /// — empty when its calls were answered meanwhile (the drain deadline) — or
    /// `None` when the slot gave up on the worker of `generation`.
    fn form_batch<'a>(
        &'a self,
        mut st: Guard<'a>,
        policy: &Policy,
        tensors: &Tensors,
        generation: u64,
    ) -> Option<Guard<'a>> {
        loop {
            if st.generation != generation {
                return None;
            }
            if st.batch.is_empty() {
                return Some(st);
            }
            let forming = Forming {
                items: st.batch.iter().map(|j| items_of(tensors, policy, j)).sum(),
                oldest: oldest(&st.batch),
            };
            let first = &st.batch[0].call;
            let (params, id) = (first.params, first.accel.descriptor().id);
            // A call that cannot join (other parameters) counts as one that does not fit.
            let next = st.queue.peek().map(|j| {
                if j.call.params == params && j.call.accel.descriptor().id == id {
                    items_of(tensors, policy, j)
                } else {
                    policy.max_batch_size
                }
            });
            let now = self.clock.now();
            match decide(policy, forming, next, now, st.phase.waited_on()) {
                Decision::Take => {
                    let job = st.queue.pop().expect("the call peeked at is queued");
                    self.metrics.queue_depth.set(st.queue.len as i64);
                    st.taken += 1;
                    st.batch.push(job);
                    self.debug_check(&st);
                }
                Decision::Run => return Some(st),
                Decision::Wait(until) => {
                    // The decision is on the core's clock; the thread waits on the host's.
                    let host_until = Instant::now() + until.saturating_duration_since(now);
                    self.changed.wait_until(&mut st, host_until);
                }
            }
        }
    }

    /// Answers, and takes out of the batch, its calls that are not to run: those
    /// whose deadline passed and those past their queue timeout under `REJECT`; and
    /// drops those whose caller left (`cancel`).
    fn answer_unrunnable(&self, st: &mut SlotState, policy: &Policy) {
        let now = self.clock.now();
        let mut i = 0;
        while i < st.batch.len() {
            if self.cancelled_at_turn(&st.batch[i]) {
                // Its caller left while it waited: it runs for nobody.
                st.batch.remove(i);
                continue;
            }
            let call = &st.batch[i].call;
            let (status, message) = if call.deadline.passed(now) {
                let waited = now.saturating_duration_since(call.received).as_micros();
                (
                    Status::DeadlineExceeded,
                    format!("deadline passed after {waited} µs in the queue"),
                )
            } else if timed_out(policy, call.received, now) == Some(TimeoutAction::Reject) {
                // Triton's words for the same refusal.
                (Status::Unavailable, "Request timeout expired".to_string())
            } else {
                i += 1;
                continue;
            };
            // Removed in place: the rest run in the order the queue served them.
            let Job { call, reply, .. } = st.batch.remove(i);
            let queue_ns = nanos(now.saturating_duration_since(call.received));
            let id = call.accel.descriptor().id;
            if let Some(m) = self.accel_metrics.get(&id) {
                m.answered(status, queue_ns);
            }
            self.depth.fetch_sub(1, Ordering::Relaxed);
            let mut answer = Answer::refusal(status, message, call);
            answer.slot = Some(self.id);
            answer.queue_ns = queue_ns;
            let _ = reply.send(answer);
        }
    }

    /// Sends each call of a batch begun at `started` its answer: its own rows of the
    /// batch's `output` (`sizes`: each call's batch size) when the batch ran, else
    /// the batch's status and message.
    fn answer_batch(
        &self,
        jobs: Vec<Job>,
        tensors: &Tensors,
        (status, message, exec_ns): (Status, String, u64),
        output: &[u8],
        sizes: &[usize],
        started: Instant,
    ) {
        let mut outs: Vec<Vec<u8>> = Vec::with_capacity(jobs.len());
        let mut jobs = jobs;
        for job in &mut jobs {
            outs.push(std::mem::take(&mut job.call.out));
        }
        let (status, message) = match status {
            Status::Ok => match accel::batch::split(tensors, output, sizes, &mut outs) {
                Ok(()) => (Status::Ok, message),
                Err(e) => (Status::Internal, e.to_string()),
            },
            other => (other, message),
        };
        for (job, mut out) in jobs.into_iter().zip(outs) {
            let Job { call, reply, .. } = job;
            if status != Status::Ok {
                out.clear();
            }
            let mut payload = call.payload;
            payload.clear();
            drop(call.permit);
            let id = call.accel.descriptor().id;
            if let Some(m) = self.accel_metrics.get(&id) {
                m.answered(status, nanos(self.clock.since(call.received)));
            }
            let answer = Answer {
                status,
                output: out,
                message: message.clone(),
                slot: Some(self.id),
                queue_ns: nanos(started.saturating_duration_since(call.received)),
                exec_ns,
                payload,
            };
            self.send_ran(reply, answer);
        }
    }

    /// Answers `UNAVAILABLE` with `why` every call of the batch being formed or run
    /// (the slot gives up on it); returns how many.
    pub(super) fn answer_batch_unavailable(&self, st: &mut SlotState, why: &str) -> usize {
        let jobs = std::mem::take(&mut st.batch);
        let n = jobs.len();
        for Job { call, reply, .. } in jobs {
            self.answered_unavailable(call.accel.descriptor().id);
            self.depth.fetch_sub(1, Ordering::Relaxed);
            let mut answer = Answer::refusal(Status::Unavailable, why, call);
            answer.slot = Some(self.id);
            let _ = reply.send(answer);
        }
        n
    }
}

/// The batch size of a queued call of a model that batches. A payload was checked at
/// the front end; one that somehow is not whole items counts as a full batch, so
/// that it runs alone and its own run refuses it.
fn items_of(tensors: &Tensors, policy: &Policy, job: &Job) -> usize {
    tensors
        .batch_of(job.call.payload.len())
        .unwrap_or(policy.max_batch_size)
}

/// When the oldest call of a batch was received.
fn oldest(batch: &[Job]) -> Instant {
    batch
        .iter()
        .map(|j| j.call.received)
        .min()
        .expect("a batch has a call")
}

#[cfg(test)]
#[path = "batching_tests.rs"]
mod tests;
