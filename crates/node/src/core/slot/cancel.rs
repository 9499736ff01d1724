//! Cancellation: a call whose caller left before its answer (a gRPC call cancelled by
//! its client, a closed HTTP connection) does not run if it has not started, and its
//! place in the queue goes to the calls behind it; a call already running finishes
//! and its answer is dropped. Each such call is counted once, by where it was
//! (`netaccel_slot_cancelled_calls_total{stage="queued"|"running"}`), and never
//! answered otherwise: every call ends in exactly one outcome.
//!
//! How a caller's leaving is seen costs nothing on the way of a call that is not
//! cancelled: the caller's end of the answer channel ([`Job::reply`]) is dropped when
//! the caller's future is (that is what cancelling a gRPC call or a task does), and
//! the channel's closed flag is one atomic load where the worker takes a call. The
//! eager part — the queue emptied at once rather than when the worker comes to each
//! call — runs only when a caller leaves: the dispatcher's `Waiting` guard, dropped
//! before its answer, calls [`Slot::withdraw_cancelled`].
//!
//! What it is not for: calls run on a network thread (cheap calls run inline are
//! answered before their caller could leave), and stopping a kernel mid-run (a slot
//! runs a call to completion, see the `slot` module).
//!
//! Part of the `slot` module, in a file of its own so that each stays within a size a
//! reader can hold.

use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use super::{Answer, Job, Slot};

impl Slot {
    /// Takes every queued call whose caller has left out of the queue, without
    /// running it, and counts it cancelled; returns how many. Calls in a batch being
    /// formed are left to the batcher, which drops them when it runs the batch
    /// ([`Slot::cancelled_at_turn`]).
    pub fn withdraw_cancelled(&self) -> usize {
        let mut gone = Vec::new();
        let mut st = self.state.lock();
        let queued = st.queue.len;
        let n = st
            .queue
            .remove_where(|job: &Job| job.reply.is_closed(), |job| gone.push(job));
        debug_assert_eq!(n, gone.len(), "each call removed is counted once");
        debug_assert_eq!(st.queue.len, queued - n, "removed calls leave the queue");
        if n == 0 {
            return 0;
        }
        self.metrics.queue_depth.set(st.queue.len as i64);
        self.debug_check(&st);
        // A load or a stop may be waiting for the queue to drain.
        let wake = st.phase.waited_on();
        drop(st);
        self.depth.fetch_sub(n, Ordering::Relaxed);
        self.metrics.cancelled_queued.inc_by(n as u64);
        if wake {
            self.changed.notify_all();
        }
        // The calls' payloads and memory permits are released outside the lock.
        drop(gone);
        n
    }

    /// Whether the caller of `job`, just taken from the queue (or from a batch being
    /// formed), has left. If so the call is counted cancelled and leaves the slot's
    /// depth: the caller of this drops it without running it.
    pub(super) fn cancelled_at_turn(&self, job: &Job) -> bool {
        if !job.reply.is_closed() {
            return false;
        }
        self.depth.fetch_sub(1, Ordering::Relaxed);
        self.metrics.cancelled_queued.inc();
        true
    }

    /// Sends a call's `answer` after it ran; a caller that left meanwhile makes it a
    /// call cancelled while running, counted as such.
    pub(super) fn send_ran(&self, reply: oneshot::Sender<Answer>, answer: Answer) {
        if reply.send(answer).is_err() {
            self.metrics.cancelled_running.inc();
        }
    }
}
