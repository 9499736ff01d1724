//! A slot's changes of accelerator and its ends: reconfiguration (stop admission, let
//! the queue run on the old accelerator, swap, reopen), a hung kernel (answer the
//! call and the queue, start a new generation) and stopping. The rest of the slot is
//! in `mod.rs`.

use super::*;

impl Slot {
    /// Loads `accel`, as the device loaded it (`image`), into the slot. Calls queued
    /// before run on the old accelerator; calls arriving meanwhile are refused
    /// `Unavailable`. Returns the time it took.
    pub fn reconfigure(
        &self,
        accel: Arc<dyn Accelerator>,
        image: Arc<dyn Loaded>,
    ) -> Result<Duration, String> {
        let start = self.clock.now();
        let name = accel.descriptor().name.clone();
        let mut st = self.state.lock();
        self.open_reconfig(&mut st, &accel)?;
        // A batch being formed runs now rather than wait for more calls.
        self.changed.notify_all();
        while !st.drained() {
            self.changed.wait(&mut st);
        }
        let previous = self.swap_in(&mut st, accel, image);
        drop(st);
        if !self.limits.reconfig_delay.is_zero() {
            self.clock
                .sleep_until(self.clock.now() + self.limits.reconfig_delay);
        }
        let mut st = self.state.lock();
        self.close_reconfig(&mut st);
        drop(st);
        self.metrics
            .loaded(Some(&previous.descriptor().name), &name);
        self.metrics.reconfigurations.inc();
        Ok(self.clock.since(start))
    }

    /// The start of a reconfiguration to `accel`: refused while another one runs or
    /// the slot stops; otherwise the slot admits nothing from now on.
    pub(super) fn open_reconfig(
        &self,
        st: &mut SlotState,
        accel: &Arc<dyn Accelerator>,
    ) -> Result<(), String> {
        if let Some(other) = st.phase.reconfig() {
            return Err(format!(
                "slot {} is already loading {}",
                self.id, other.to_name
            ));
        }
        if st.phase.stopping() {
            return Err(format!("slot {} is shutting down", self.id));
        }
        let to = Reconfig {
            from: st.accel.descriptor().id,
            to: accel.descriptor().id,
            to_name: accel.descriptor().name.clone(),
        };
        st.phase.begin_reconfig(to);
        self.publish_admits(st);
        self.debug_check(st);
        debug_assert!(!st.phase.admits(), "a loading slot admits nothing");
        Ok(())
    }

    /// Puts `accel` (as its device loaded it, `image`) in the drained slot's place;
    /// returns the accelerator it replaces.
    pub(super) fn swap_in(
        &self,
        st: &mut SlotState,
        accel: Arc<dyn Accelerator>,
        image: Arc<dyn Loaded>,
    ) -> Arc<dyn Accelerator> {
        assert!(
            st.drained(),
            "an accelerator is swapped into a drained slot"
        );
        let previous = std::mem::replace(&mut st.accel, accel);
        st.image = image;
        st.batch_counts.clear();
        self.debug_check(st);
        // The new accelerator's speed is not the old one's.
        self.ns_per_work_1024.store(0, Ordering::Relaxed);
        self.ns_per_call
            .store(nanos(self.limits.simulated_exec), Ordering::Relaxed);
        previous
    }

    /// The end of a reconfiguration: the slot admits calls again (and is no longer
    /// failed, if it was).
    pub(super) fn close_reconfig(&self, st: &mut SlotState) {
        if st.phase.end_reconfig() {
            self.metrics.failed.set(0);
        }
        self.publish_admits(st);
        self.debug_check(st);
    }

    /// The watchdog's look at the slot ([`crate::core::watchdog`]). When the call in progress
    /// has run longer than `kernel_timeout`, the slot is marked failed (it refuses
    /// calls `UNAVAILABLE` until an accelerator is loaded into it again), that call and
    /// every queued one are answered `UNAVAILABLE`, and a new worker thread takes the
    /// slot's place. The stuck thread is left to its kernel — a thread cannot be
    /// stopped safely mid-kernel — and counted until it returns, if ever; then it
    /// exits. Returns whether the slot was failed now.
    pub fn check_hung(self: &Arc<Self>) -> bool {
        if !self.fail_hung() {
            return false;
        }
        let worker = Arc::clone(self);
        if let Err(e) = std::thread::Builder::new()
            .name(format!("slot-{}", self.id))
            .spawn(move || worker.run_worker())
        {
            tracing::error!(slot = self.id, error = %e, "cannot start a new slot worker thread");
        }
        true
    }

    /// [`Slot::check_hung`] but the new worker thread: fails the slot, and answers its
    /// running and queued calls, when the call in progress has run past
    /// `kernel_timeout`. Returns whether it did.
    pub(super) fn fail_hung(&self) -> bool {
        let bound = self.limits.kernel_timeout;
        if bound.is_zero() {
            return false;
        }
        let mut st = self.state.lock();
        let Execution::Running(run) = &st.execution else {
            return false;
        };
        if st.phase.failed().is_some() || self.clock.since(run.since) < bound {
            return false;
        }
        let name = st.accel.descriptor().name.clone();
        let why = format!(
            "a call of {name} in slot {} ran longer than kernel_timeout_ms ({} ms): the slot is failed until an accelerator is loaded into it again",
            self.id,
            bound.as_millis()
        );
        st.phase.fail(why.clone());
        self.publish_admits(&st);
        self.metrics.failed.set(1);
        self.metrics.hung_kernels.inc();
        let queued = st.queue.len;
        self.abandon_running(&mut st, &why);
        self.answer_queued(&mut st, &why);
        debug_assert!(!st.running(), "the hung call was answered and given up");
        self.debug_check(&st);
        drop(st);
        self.changed.notify_all();
        tracing::error!(
            slot = self.id,
            accelerator = %name,
            kernel_timeout_ms = bound.as_millis() as u64,
            queued_calls_answered = queued,
            "hung kernel: slot marked failed; reload it through the admin API"
        );
        true
    }

    /// At the drain deadline: answers every call still queued or running in the slot
    /// `UNAVAILABLE` with `why`, so that no accepted call goes unanswered when the node
    /// exits. Call it after [`Slot::stop`]. Returns how many calls it answered.
    pub fn abandon_all(&self, why: &str) -> usize {
        let mut st = self.state.lock();
        debug_assert!(st.phase.stopping(), "calls are abandoned only after a stop");
        let on_worker = matches!(
            &st.execution,
            Execution::Running(Running { reply: Some(_), .. })
        );
        let answered = st.queue.len + usize::from(on_worker) + st.batch.len();
        self.abandon_running(&mut st, why);
        self.answer_queued(&mut st, why);
        self.debug_check(&st);
        drop(st);
        self.changed.notify_all();
        answered
    }

    /// Gives up on the call in progress, if any: answers it `UNAVAILABLE` when the
    /// worker runs it (a call running on a network thread is answered by that thread
    /// when its kernel returns), and starts a new generation so that the thread
    /// running it, whenever it returns, leaves the slot alone. The worker thread of
    /// the old generation exits.
    fn abandon_running(&self, st: &mut SlotState, why: &str) {
        if !st.running() {
            return;
        }
        let Some(run) = st.end_running() else {
            return;
        };
        st.generation += 1;
        self.generation.store(st.generation, Ordering::Relaxed);
        if !st.batch.is_empty() {
            // The worker runs a batch: its calls are answered here, each once.
            debug_assert!(run.reply.is_none(), "a batch's replies are its calls'");
            self.metrics.threads_abandoned.inc();
            self.answer_batch_unavailable(st, why);
            return;
        }
        self.depth.fetch_sub(1, Ordering::Relaxed);
        if let Some(reply) = run.reply {
            self.metrics.threads_abandoned.inc();
            self.answered_unavailable(st.accel.descriptor().id);
            let _ = reply.send(Answer {
                status: Status::Unavailable,
                output: Vec::new(),
                message: why.to_string(),
                slot: Some(self.id),
                queue_ns: 0,
                exec_ns: nanos(self.clock.since(run.since)),
                payload: Vec::new(),
            });
        }
    }

    /// Answers every queued call `UNAVAILABLE` with `why`, a batch being formed
    /// included.
    fn answer_queued(&self, st: &mut SlotState, why: &str) {
        self.answer_batch_unavailable(st, why);
        while let Some(Job { call, reply, .. }) = st.queue.pop() {
            self.answered_unavailable(call.accel.descriptor().id);
            self.depth.fetch_sub(1, Ordering::Relaxed);
            let _ = reply.send(Answer::refusal(Status::Unavailable, why, call));
        }
        debug_assert_eq!(st.queue.len, 0, "every queued call was answered");
        self.metrics.queue_depth.set(0);
    }

    pub(super) fn answered_unavailable(&self, accel_id: u16) {
        if let Some(m) = self.accel_metrics.get(&accel_id) {
            m.answered(Status::Unavailable, 0);
        }
    }

    /// Stops admission; the worker exits once the queue is empty.
    pub fn stop(&self) {
        let mut st = self.state.lock();
        st.phase.stop();
        self.publish_admits(&st);
        self.debug_check(&st);
        drop(st);
        self.changed.notify_all();
    }
}
