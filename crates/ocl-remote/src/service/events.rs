//! The events of one running task: which runtime events each client event id stands
//! for, so that a command's wait list (client ids) becomes the runtime's wait list, and
//! how the results of several runtime commands make one client event's result.
//!
//! Why the node needs this: the runtime reorders the commands of an out-of-order queue
//! and runs different queues side by side, so it must see every dependency the client
//! expressed. Ids of earlier tasks need nothing: a client's tasks run one after the
//! other, each to its end (`clFinish`), so their commands have completed. User events
//! are the client's (the ICD sends a task only once they are set); one set to an error
//! arrives as a `UserEvent` command and counts as a failed event of the task.

use std::collections::{HashMap, HashSet};

use crate::cl::{self, ClInt};
use crate::ffi::{Api, Handle};
use crate::proto::EventDone;

/// The runtime events the task's commands produced so far, by client event id.
#[derive(Default)]
pub(crate) struct TaskEvents {
    /// Several commands carry one client event when the client sent one operation as
    /// several commands (rows of a rectangle, pieces of a large write).
    produced: HashMap<u64, Vec<Handle>>,
    /// Client events whose command (or one of its pieces) the runtime refused.
    failed: HashSet<u64>,
    /// An event that has completed, per context (see [`TaskEvents::completed_event`]).
    completed: HashMap<Handle, Handle>,
}

impl TaskEvents {
    /// The runtime events a command waiting for the client events `wait` must wait
    /// for; [`CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST`](cl) if one of them failed.
    /// Empty when they all completed before the task (or name nothing).
    pub fn wait_list(&self, wait: &[u64]) -> Result<Vec<Handle>, ClInt> {
        if wait.iter().any(|id| self.failed.contains(id)) {
            return Err(cl::CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
        }
        let mut ids = wait.to_vec();
        ids.sort_unstable();
        ids.dedup();
        Ok(ids
            .iter()
            .filter_map(|id| self.produced.get(id))
            .flatten()
            .copied()
            .collect())
    }

    /// Records what the command with client event `id` gave: its runtime event, or the
    /// failure of its enqueue.
    pub fn record(&mut self, id: u64, event: Handle, rc: ClInt) {
        if id == 0 {
            return;
        }
        if rc != cl::CL_SUCCESS || event.is_null() {
            self.failed.insert(id);
        } else {
            self.produced.entry(id).or_default().push(event);
        }
    }

    /// An event of `context` that has completed: the wait list of a marker or barrier
    /// whose client wait list names only events that completed before the task. (An
    /// empty wait list would make it wait for every earlier command of its queue.)
    pub fn completed_event(&mut self, api: &Api, context: Handle) -> Result<Handle, ClInt> {
        if let Some(done) = self.completed.get(&context) {
            return Ok(*done);
        }
        let mut rc = cl::CL_SUCCESS;
        // SAFETY: `context` is a live context held by the task's queue.
        let done = unsafe { (api.clCreateUserEvent)(context, &mut rc) };
        if done.is_null() {
            return Err(if rc == cl::CL_SUCCESS {
                cl::CL_OUT_OF_RESOURCES
            } else {
                rc
            });
        }
        // SAFETY: `done` is the user event just created.
        let rc = unsafe { (api.clSetUserEventStatus)(done, cl::CL_COMPLETE) };
        self.completed.insert(context, done);
        if rc == cl::CL_SUCCESS {
            Ok(done)
        } else {
            Err(rc)
        }
    }

    /// Releases the events made here (the commands' own events are their owners').
    pub fn release(self, api: &Api) {
        for done in self.completed.into_values() {
            // SAFETY: created in `completed_event`; the runtime keeps its own
            // references for the commands still waiting for it.
            unsafe { (api.clReleaseEvent)(done) };
        }
    }
}

/// The execution status of event `ev`, `otherwise` if the runtime does not say.
///
/// # Safety
/// `ev` is a live event.
pub(crate) unsafe fn exec_status(api: &Api, ev: Handle, otherwise: ClInt) -> ClInt {
    let mut exec = otherwise;
    (api.clGetEventInfo)(
        ev,
        cl::CL_EVENT_COMMAND_EXECUTION_STATUS,
        4,
        (&mut exec as *mut ClInt).cast(),
        std::ptr::null_mut(),
    );
    exec
}

/// The result of the command with client event `event`, whose enqueue returned `rc`
/// and made the runtime event `ev` (null: none): its status and profiling times.
/// Releases `ev`.
///
/// # Safety
/// `ev` is null or a live event of the runtime, which is not used afterwards.
pub(crate) unsafe fn result(api: &Api, event: u64, ev: Handle, rc: ClInt) -> EventDone {
    let mut done = EventDone {
        event,
        status: rc,
        profile: [0; 4],
    };
    if ev.is_null() {
        return done;
    }
    done.status = exec_status(api, ev, cl::CL_COMPLETE).min(cl::CL_COMPLETE);
    let params = [
        cl::CL_PROFILING_COMMAND_QUEUED,
        cl::CL_PROFILING_COMMAND_SUBMIT,
        cl::CL_PROFILING_COMMAND_START,
        cl::CL_PROFILING_COMMAND_END,
    ];
    for (slot, param) in done.profile.iter_mut().zip(params) {
        let mut v = 0u64;
        let rc = (api.clGetEventProfilingInfo)(
            ev,
            param,
            8,
            (&mut v as *mut u64).cast(),
            std::ptr::null_mut(),
        );
        if rc == cl::CL_SUCCESS {
            *slot = v;
        }
    }
    (api.clReleaseEvent)(ev);
    done
}

/// One result per client event, in the order of their first command: the worst
/// status of its commands, the earliest queued, submit and start times and the latest
/// end time.
pub(crate) fn merge(done: Vec<EventDone>) -> Vec<EventDone> {
    let mut merged: Vec<EventDone> = Vec::with_capacity(done.len());
    let mut at: HashMap<u64, usize> = HashMap::new();
    for d in done {
        let Some(&i) = at.get(&d.event) else {
            at.insert(d.event, merged.len());
            merged.push(d);
            continue;
        };
        let e = &mut merged[i];
        e.status = e.status.min(d.status);
        for k in 0..3 {
            e.profile[k] = match (e.profile[k], d.profile[k]) {
                (0, t) | (t, 0) => t,
                (a, b) => a.min(b),
            };
        }
        e.profile[3] = e.profile[3].max(d.profile[3]);
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(event: u64, status: ClInt, profile: [u64; 4]) -> EventDone {
        EventDone {
            event,
            status,
            profile,
        }
    }

    #[test]
    fn pieces_of_one_operation_merge_into_one_result() {
        let merged = merge(vec![
            done(7, 0, [10, 11, 12, 20]),
            done(3, 0, [1, 2, 3, 4]),
            done(7, -5, [9, 12, 15, 30]),
            done(7, 0, [0, 0, 0, 25]),
        ]);
        assert_eq!(
            merged,
            [done(7, -5, [9, 11, 12, 30]), done(3, 0, [1, 2, 3, 4])]
        );
    }

    #[test]
    fn a_wait_list_names_the_pieces_and_failures_of_earlier_commands() {
        let mut events = TaskEvents::default();
        let (a, b, c) = (8usize as Handle, 16usize as Handle, 24usize as Handle);
        events.record(1, a, cl::CL_SUCCESS);
        events.record(1, b, cl::CL_SUCCESS);
        events.record(2, c, cl::CL_SUCCESS);
        events.record(3, std::ptr::null_mut(), cl::CL_INVALID_KERNEL);
        events.record(0, c, cl::CL_SUCCESS);
        assert_eq!(events.wait_list(&[1, 1, 9]), Ok(vec![a, b]));
        assert_eq!(events.wait_list(&[2, 1]), Ok(vec![a, b, c]));
        assert_eq!(events.wait_list(&[]), Ok(vec![]));
        assert_eq!(
            events.wait_list(&[2, 3]),
            Err(cl::CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        );
    }
}
