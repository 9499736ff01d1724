//! A slot driven one step at a time, without its worker thread: how a discrete-event
//! simulator (`netaccel-sim`) runs the slot's own queue, admission and accounting
//! under a virtual clock. The simulator decides *when* a call ends (its device model);
//! the slot decides everything else, as [`Slot::run_worker`] does.
//!
//! [`Slot::take_next`] is one turn of the worker's loop up to the kernel: the next
//! call in the tenant-fair order, refused `Busy` if its turn came later than it was
//! admitted to wait for, otherwise begun. [`Slot::finish_taken`] is the rest of the
//! turn: the kernel runs (at the clock's time then, so the execution time measured is
//! the simulated one) and the call is answered through its channel.
//!
//! A load (reconfiguration) is stepped the same way: [`Slot::begin_load`] closes the
//! slot to new calls, the calls queued before it still run, and once
//! [`Slot::drained`] the driver lets the device's load time pass and calls
//! [`Slot::finish_load`], which swaps the accelerator in and reopens the slot.
//!
//! The pieces are the worker's own: a call is taken ([`Slot::take`]) and run
//! ([`Slot::run_taken`]) by the same code on both paths, and a load opens, swaps and
//! closes through the same steps as [`Slot::reconfigure`].
//!
//! The watchdog looks at a stepped slot through [`Slot::check_hung_stepped`], at the
//! times [`crate::core::watchdog::period`] gives, as its thread looks at a slot.
//!
//! Not for the node: a slot with a worker thread must not be stepped as well (the
//! worker would take the same calls).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::state::SlotState;
use super::{Job, Slot, Start};
use crate::core::slot::{Answer, Call};
use crate::device::Loaded;
use accel::{Accelerator, ParamBlock};
use rac_proto::Status;

/// A call a stepped slot has begun: it runs until [`Slot::finish_taken`].
pub struct Taken {
    call: Call,
    start: Start,
    image: Arc<dyn Loaded>,
    loaded_id: u16,
}

impl Taken {
    /// The call begun.
    pub fn call(&self) -> &Call {
        &self.call
    }
}

/// What one step of a slot found.
pub enum Step {
    /// Nothing to take: the slot is running a call, or its queue is empty.
    Idle,
    /// The next call's turn came after more calls than it was admitted to wait for:
    /// it was answered `Busy` through its channel (see `Slot::wait_admits`). Its
    /// parameters tell the driver which call it was.
    RefusedLate { params: ParamBlock },
    /// A call began now.
    Began(Taken),
}

impl Slot {
    /// Takes the next queued call, as the worker does, without blocking.
    pub fn take_next(&self) -> Step {
        let mut st = self.state.lock();
        if st.running() || st.handing_over > 0 {
            return Step::Idle;
        }
        let Some(job) = st.queue.pop() else {
            return Step::Idle;
        };
        self.debug_check(&st);
        self.metrics.queue_depth.set(st.queue.len as i64);
        if let Some(by) = job.start_by.filter(|&by| st.taken > by) {
            let late = st.taken - by;
            drop(st);
            let params = job.call.params;
            self.refuse_late(job, late);
            return Step::RefusedLate { params };
        }
        let taken = self.take(&mut st, job);
        debug_assert!(st.running(), "a call taken is running");
        Step::Began(taken)
    }

    /// Runs the kernel of a call begun by [`Slot::take_next`] and answers it through
    /// its channel, at the clock's time now.
    pub fn finish_taken(&self, taken: Taken) {
        let generation = taken.start.generation;
        debug_assert!(
            self.clock.now() >= taken.start.at,
            "a call ends after it begins"
        );
        let ended = self.end_job(generation, self.run_taken(taken));
        debug_assert!(ended, "a stepped slot has one generation per call");
        debug_assert!(
            self.generation.load(Ordering::Relaxed) == generation,
            "nothing gave up on a stepped call"
        );
    }

    /// The watchdog's look at a stepped slot ([`Slot::check_hung`] without the new
    /// worker thread, which a stepped slot has none of): when the call the driver
    /// runs has run past `kernel_timeout` on the clock, the slot is failed and that
    /// call and the queued ones are answered `UNAVAILABLE` through their channels.
    /// The driver then drops the call's [`Taken`]: nothing ends it any more.
    pub fn check_hung_stepped(&self) -> bool {
        self.fail_hung()
    }

    /// Begins `job`, just popped from the queue of the locked state `st`: the one way
    /// a call is taken, by the worker and by a stepped slot alike.
    pub(super) fn take(&self, st: &mut SlotState, job: Job) -> Taken {
        st.taken += 1;
        let Job {
            call, reply, work, ..
        } = job;
        let start = self.begin(st, work, Some(reply));
        self.debug_check(st);
        let (loaded_id, image) = (st.accel.descriptor().id, Arc::clone(&st.image));
        Taken {
            call,
            start,
            image,
            loaded_id,
        }
    }

    /// Runs the kernel of a taken call (outside the state's lock) and makes its
    /// answer.
    pub(super) fn run_taken(&self, taken: Taken) -> Answer {
        let Taken {
            call,
            start,
            image,
            loaded_id,
        } = taken;
        if loaded_id == call.accel.descriptor().id {
            self.execute(&image, call, start)
        } else {
            // Cannot happen while reconfiguration drains the queue first; answered
            // rather than asserted so a future change cannot run a call on the wrong
            // accelerator.
            Answer::refusal(Status::Unavailable, "slot was reconfigured", call)
        }
    }
}

/// A load begun by [`Slot::begin_load`], to be finished by [`Slot::finish_load`].
pub struct PendingLoad {
    accel: Arc<dyn Accelerator>,
    image: Arc<dyn Loaded>,
    began: Instant,
}

impl Slot {
    /// Begins loading `accel` (as its device loaded it, `image`) without waiting:
    /// the slot admits no call from now on; the calls queued run on the old
    /// accelerator. Refused as [`Slot::reconfigure`] refuses.
    pub fn begin_load(
        &self,
        accel: Arc<dyn Accelerator>,
        image: Arc<dyn Loaded>,
    ) -> Result<PendingLoad, String> {
        let mut st = self.state.lock();
        self.open_reconfig(&mut st, &accel)?;
        Ok(PendingLoad {
            accel,
            image,
            began: self.clock.now(),
        })
    }

    /// Whether no call runs or waits in the slot: a load may finish.
    pub fn drained(&self) -> bool {
        self.state.lock().drained()
    }

    /// Swaps the accelerator of `load` in and reopens the slot: the end of
    /// [`Slot::reconfigure`], on a drained slot. Returns the time since the load
    /// began.
    pub fn finish_load(&self, load: PendingLoad) -> Duration {
        let PendingLoad {
            accel,
            image,
            began,
        } = load;
        let name = accel.descriptor().name.clone();
        let mut st = self.state.lock();
        let previous = self.swap_in(&mut st, accel, image);
        self.close_reconfig(&mut st);
        drop(st);
        self.metrics
            .loaded(Some(&previous.descriptor().name), &name);
        self.metrics.reconfigurations.inc();
        self.clock.since(began)
    }
}
