//! The device queue: the jobs waiting for one device and one worker thread per device.
//!
//! A task is everything one client enqueued between two flush points. The worker runs
//! one task at a time: it enqueues the commands in order on the client's real queues,
//! waits for them (`clFinish`), collects event status and profiling, and writes the
//! task's `ReadData` frames and its `TaskDone` to the client. Tasks of different clients
//! thus time-share the device and never interleave inside a task. A task for several
//! devices runs from the queue of the lowest and holds the others meanwhile
//! ([`DeviceQueue::hold`]).
//!
//! Whose job runs next is [`super::turns`]'s choice: each user of the device (the
//! node's slots, a tenant, a session without one) has its own FIFO and a fair share of
//! the device's time, whatever its jobs cost. The node's own OpenCL slots are one such
//! user ([`DeviceLane`]): a slot's call is a job of the device like a client's task, so
//! the two never interleave, and a fast remote client cannot crowd out slot calls (nor
//! slot calls a remote client). The device's busy seconds count both.

use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::connection::send_all;
use super::events::{self, TaskEvents};
use super::reads::{self, PendingRead, ReadResult};
use super::task::{Arg, Cmd, Op, Task};
use super::turns::{Flow, Next, Turns};
use super::{Real, Shared};
use crate::cl::{self, ClInt};
use crate::ffi::{Api, Handle};
use crate::proto::{self, EventDone, ImageOp, Response};
use crate::service::lock;

/// Read data is sent in frames of at most this many bytes.
const READ_CHUNK_MAX: usize = 16 << 20;

struct Outcome {
    status: ClInt,
    events: Vec<EventDone>,
    reads: Vec<ReadResult>,
}

/// The jobs waiting for one device, by flow ([`Turns`]), and the thread that runs them.
pub(crate) struct DeviceQueue {
    state: Mutex<Turns<Job>>,
    /// Signalled when a job is queued or the device becomes free.
    ready: Condvar,
    /// Signalled when a job leaves the queue (room for the flows waiting for some).
    room: Condvar,
    /// Signalled when the device stops running a job (see [`DeviceQueue::hold`]).
    idle: Condvar,
    depth_max: usize,
}

/// What a device queue holds: a remote client's task, or a job of the node itself.
pub(crate) enum Job {
    Task(Task),
    Local(Box<dyn FnOnce() + Send>),
}

impl Job {
    fn flow(&self) -> Flow {
        match self {
            Job::Task(task) => task.flow.clone(),
            Job::Local(_) => Flow::Node,
        }
    }
}

impl DeviceQueue {
    /// A device queue holding at most `depth_max` jobs (plus one per flow, see
    /// [`Turns::admits`]); the device waits up to `anticipation` for a flow expected
    /// back ([`Turns`]).
    pub fn new(depth_max: usize, anticipation: Duration) -> DeviceQueue {
        DeviceQueue {
            state: Mutex::new(Turns::new(anticipation)),
            ready: Condvar::new(),
            room: Condvar::new(),
            idle: Condvar::new(),
            depth_max: depth_max.max(1),
        }
    }

    /// Queues `job`, waiting while its flow has no room, or runs it at once on the
    /// calling thread when the device is free and it is this job's turn (its flow's
    /// order is the same either way).
    pub fn submit(&self, shared: &Shared, device: usize, job: Job) {
        shared.metrics.devices[device].queue_depth.inc();
        let flow = job.flow();
        let mut st = lock(&self.state);
        while !st.admits(&flow, self.depth_max) {
            st = self.room.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.push(flow.clone(), job, Instant::now());
        if st.next(Instant::now()) == Next::Run(flow.clone()) {
            let job = st.take(&flow, Instant::now());
            drop(st);
            self.room.notify_all();
            run_job(shared, device, job);
            self.finished();
            return;
        }
        drop(st);
        self.ready.notify_one();
    }

    /// Whether a job of `flow` submitted now would run at once: the device is free, and
    /// neither waits for another flow nor has a job of another flow that goes first.
    pub fn free_for(&self, flow: &Flow) -> bool {
        let mut st = lock(&self.state);
        match st.next(Instant::now()) {
            Next::Idle => true,
            Next::Run(f) => f == *flow,
            Next::Wait(_) | Next::Busy => false,
        }
    }

    /// No job runs on the device and none waits.
    pub fn is_idle(&self) -> bool {
        let st = lock(&self.state);
        !st.is_running() && st.waiting() == 0
    }

    /// The running job, or the hold, is over: charges it and wakes the worker (the next
    /// job, or the end of a wait for a flow, is its to start).
    fn finished(&self) {
        lock(&self.state).finish(Instant::now());
        self.ready.notify_one();
        self.idle.notify_all();
    }

    /// Takes the device for a task queued on another (lower) device: waits until no
    /// job runs here, then counts as running one, so neither the worker nor an inline
    /// submit starts another until [`DeviceQueue::finished`]. Tasks hold devices in
    /// ascending order, so two tasks never wait for each other.
    fn hold(&self) {
        let mut st = lock(&self.state);
        while st.is_running() {
            st = self.idle.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.hold();
    }

    /// The device's worker thread: runs queued jobs in their turn, forever.
    pub fn work(&self, shared: &Shared, device: usize) {
        loop {
            let job = {
                let mut st = lock(&self.state);
                loop {
                    let now = Instant::now();
                    match st.next(now) {
                        Next::Run(flow) => break st.take(&flow, now),
                        Next::Wait(until) => {
                            let wait = until.saturating_duration_since(now);
                            st = self
                                .ready
                                .wait_timeout(st, wait)
                                .unwrap_or_else(|p| p.into_inner())
                                .0;
                        }
                        Next::Busy | Next::Idle => {
                            st = self.ready.wait(st).unwrap_or_else(|p| p.into_inner());
                        }
                    }
                }
            };
            self.room.notify_all();
            run_job(shared, device, job);
            self.finished();
        }
    }
}

/// Runs one job of the queue and counts the time the device spent on it.
fn run_job(shared: &Shared, device: usize, job: Job) {
    let started = std::time::Instant::now();
    // In an isolated runtime process the node bounds how long this may take.
    let _busy = shared.busy.as_ref().map(|b| b.begin(device));
    match job {
        Job::Task(task) => run_task(shared, device, task),
        Job::Local(f) => {
            f();
            shared.metrics.devices[device].queue_depth.dec();
        }
    }
    shared.metrics.devices[device]
        .busy_seconds
        .inc_by(started.elapsed().as_secs_f64());
}

/// A way for the node to run work on one device in turn with remote clients' tasks:
/// through the device's queue, where the node is one user ([`Flow::Node`]) with its
/// fair share of the device.
#[derive(Clone)]
pub struct DeviceLane {
    shared: Arc<Shared>,
    device: usize,
}

impl DeviceLane {
    pub(crate) fn new(shared: Arc<Shared>, device: usize) -> DeviceLane {
        DeviceLane { shared, device }
    }

    /// Runs `f` on the node's turn: at once on this thread when the device is free and
    /// it is the node's turn, else on the device's worker after the node's jobs queued
    /// before it (waiting while the node has no room). Returns `f`'s result; a panic in
    /// `f` is raised again here.
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        type Slot<R> = (Mutex<Option<std::thread::Result<R>>>, Condvar);
        let done: Slot<R> = (Mutex::new(None), Condvar::new());
        let job = || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            *lock(&done.0) = Some(result);
            done.1.notify_one();
        };
        let job: Box<dyn FnOnce() + Send + '_> = Box::new(job);
        // SAFETY: the job borrows `f`'s captures and `done` from this frame. This
        // function does not return before the job has run: it waits below until the
        // job stored its result, and the queue runs every job it accepted (its
        // worker never exits, and `submit` either runs the job or queues it).
        let job: Box<dyn FnOnce() + Send + 'static> = unsafe { std::mem::transmute(job) };
        self.shared.devices[self.device].submit(&self.shared, self.device, Job::Local(job));
        let mut result = lock(&done.0);
        loop {
            if let Some(r) = result.take() {
                return r.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            }
            result = done.1.wait(result).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Whether a job of the node run now would start at once on this thread: the
    /// device is free and it is the node's turn (a snapshot).
    pub fn is_idle(&self) -> bool {
        self.shared.devices[self.device].free_for(&Flow::Node)
    }

    /// Seconds the device spent on jobs and tasks so far.
    pub fn busy_seconds(&self) -> f64 {
        self.shared.metrics.devices[self.device].busy_seconds.get()
    }
}

/// Runs `task` and answers its client; once no client is left, gives what the task held
/// back to the system (it may be the last task of a client that has gone).
fn run_task(shared: &Shared, device: usize, task: Task) {
    answer_task(shared, device, task);
    if shared.clients.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        shared.release_idle_memory();
    }
}

fn answer_task(shared: &Shared, device: usize, task: Task) {
    let metrics = &shared.metrics.devices[device];
    for &d in &task.other_devices {
        shared.devices[d as usize].hold();
    }
    let outcome = execute(&shared.runtime.api, &task.cmds);
    for &d in &task.other_devices {
        shared.devices[d as usize].finished();
    }
    let read_bytes: usize = outcome.reads.iter().map(|r| r.bytes().len()).sum();
    let written: usize = task
        .cmds
        .iter()
        .map(|c| match &c.op {
            Op::Write { data, .. } => data.len,
            Op::Image(w) if w.op == ImageOp::Write => w.data.as_ref().map_or(0, |d| d.len),
            _ => 0,
        })
        .sum();
    shared.metrics.bytes_to_device.inc_by(written as u64);
    shared.metrics.bytes_from_device.inc_by(read_bytes as u64);
    if outcome.status != cl::CL_SUCCESS {
        metrics.tasks_failed.inc();
    }
    send_outcome(&task, &outcome);
    // SAFETY: the task still holds the objects read.
    unsafe { reads::unmap(&shared.runtime.api, outcome.reads) };
    metrics
        .task_latency
        .observe(task.flushed_at.elapsed().as_secs_f64());
    metrics.queue_depth.dec();
    // Dropping the task here releases its references to the client's objects.
}

/// Answers a task that cannot run: every event gets its own failure or `code`.
pub(crate) fn fail_task(task: Task, code: ClInt) {
    let events = events::merge(
        task.cmds
            .iter()
            .filter(|c| c.event != 0 && !matches!(c.op, Op::UserEvent(_)))
            .map(|c| EventDone {
                event: c.event,
                status: match c.op {
                    Op::Failed(e) => e,
                    _ => code,
                },
                profile: [0; 4],
            })
            .collect(),
    );
    let status = if task.cmds.is_empty() {
        cl::CL_SUCCESS
    } else {
        code
    };
    send_outcome(
        &task,
        &Outcome {
            status,
            events,
            reads: Vec::new(),
        },
    );
}

fn send_outcome(task: &Task, outcome: &Outcome) {
    let mut out = Vec::new();
    let mut w = lock(&task.writer);
    for read in &outcome.reads {
        let (token, data) = (&read.token, read.bytes());
        let mut offset = 0usize;
        // At least one frame, also for an empty read, so the client sees it done.
        loop {
            let end = (offset + READ_CHUNK_MAX).min(data.len());
            let chunk = &data[offset..end];
            proto::encode_read_data_header(&mut out, task.id, *token, offset as u64, chunk.len());
            if chunk.len() <= 64 << 10 {
                out.extend_from_slice(chunk);
            } else {
                // Large chunks go straight from the read buffer, without a copy.
                if send_all(&mut w, &out)
                    .and_then(|_| send_all(&mut w, chunk))
                    .is_err()
                {
                    return; // The client is gone; its results are discarded.
                }
                out.clear();
            }
            offset = end;
            if offset >= data.len() {
                break;
            }
        }
    }
    Response::TaskDone {
        status: outcome.status,
        events: outcome.events.clone(),
    }
    .encode(task.id, &mut out);
    let _ = send_all(&mut w, &out);
}

fn execute(api: &Api, cmds: &[Cmd]) -> Outcome {
    let mut status = cl::CL_SUCCESS;
    let mut events: Vec<(u64, Handle, ClInt)> = Vec::new();
    let mut reads: Vec<PendingRead> = Vec::new();
    let mut queues: Vec<Handle> = Vec::new();
    let mut task_events = TaskEvents::default();
    // Reads after the last command that may write memory can be sent from a mapping
    // (see `reads`).
    let last_write = cmds.iter().rposition(|c| may_write(&c.op));
    // User events set to an error fail what waits for them, although the client sends
    // them after those commands (it learns of the error last).
    for cmd in cmds {
        if let Op::UserEvent(status) = cmd.op {
            task_events.record(cmd.event, std::ptr::null_mut(), status);
        }
    }
    for (i, cmd) in cmds.iter().enumerate() {
        if matches!(cmd.op, Op::UserEvent(_)) {
            continue;
        }
        let may_map = last_write.is_none_or(|w| w < i);
        let (rc, ev) = enqueue_one(api, cmd, may_map, &mut queues, &mut task_events, &mut reads);
        if rc != cl::CL_SUCCESS && status == cl::CL_SUCCESS {
            status = rc;
        }
        task_events.record(cmd.event, ev, rc);
        if cmd.event != 0 {
            events.push((cmd.event, ev, rc));
        }
    }
    for q in &queues {
        // SAFETY: live queue handle.
        let rc = unsafe { (api.clFinish)(*q) };
        if rc != cl::CL_SUCCESS && status == cl::CL_SUCCESS {
            status = rc;
        }
    }
    task_events.release(api);
    // SAFETY: the reads' events are live: their own ones are released in `settle`,
    // the client's ones only below.
    let reads = reads
        .into_iter()
        .map(|r| unsafe { r.settle(api) })
        .collect();
    // SAFETY: each runtime event is live and released once, here.
    let events = events
        .into_iter()
        .map(|(event, ev, rc)| unsafe { events::result(api, event, ev, rc) })
        .collect();
    Outcome {
        status,
        events: events::merge(events),
        reads,
    }
}

/// Enqueues one command of a task on its queue, which joins `queues` (finished at the
/// end of the task); `may_map`: a read may be sent from a mapping. Returns its status
/// and, when the client asked for one, its runtime event.
fn enqueue_one(
    api: &Api,
    cmd: &Cmd,
    may_map: bool,
    queues: &mut Vec<Handle>,
    task_events: &mut TaskEvents,
    reads: &mut Vec<PendingRead>,
) -> (ClInt, Handle) {
    let mut ev: Handle = std::ptr::null_mut();
    let evp: *mut Handle = if cmd.event != 0 {
        &mut ev
    } else {
        std::ptr::null_mut()
    };
    let rc = match &cmd.queue {
        None => match cmd.op {
            Op::Failed(e) => e,
            _ => cl::CL_INVALID_COMMAND_QUEUE,
        },
        Some(queue) => {
            let q = queue.real.handle();
            if !queues.contains(&q) {
                queues.push(q);
            }
            match wait_list(api, task_events, cmd, queue.context.handle()) {
                // SAFETY: all handles are live (held by the task, the wait list's
                // events by `task_events` until the end of `execute`); data buffers
                // outlive the clFinish there.
                Ok(waits) => unsafe {
                    let op = Enqueued {
                        op: &cmd.op,
                        waits: &waits,
                        may_map,
                    };
                    enqueue(api, q, op, evp, reads)
                },
                Err(code) => code,
            }
        }
    };
    (rc, ev)
}

/// The runtime wait list of `cmd`, which runs in `context`: the events of the task's
/// commands it waits for. A marker or barrier whose events all completed before the
/// task gets an event that has completed: with an empty list it would wait for every
/// earlier command of its queue, which the client did not ask for.
fn wait_list(
    api: &Api,
    task_events: &mut TaskEvents,
    cmd: &Cmd,
    context: Handle,
) -> Result<Vec<Handle>, ClInt> {
    let waits = task_events.wait_list(&cmd.wait)?;
    let waits_for_all_when_empty = matches!(cmd.op, Op::Marker | Op::Barrier);
    if waits.is_empty() && !cmd.wait.is_empty() && waits_for_all_when_empty {
        return Ok(vec![task_events.completed_event(api, context)?]);
    }
    Ok(waits)
}

/// Whether a command may change memory a read of the same task reads.
fn may_write(op: &Op) -> bool {
    match op {
        Op::Read { .. } | Op::Marker | Op::Barrier | Op::Failed(_) | Op::UserEvent(_) => false,
        Op::Image(img) => img.op != ImageOp::Read,
        Op::Write { .. } | Op::Copy { .. } | Op::Fill { .. } | Op::NdRange { .. } => true,
    }
}

/// A command as the runtime gets it: behind the runtime events `waits`; a read may be
/// sent from a mapping if `may_map`.
struct Enqueued<'a> {
    op: &'a Op,
    waits: &'a [Handle],
    may_map: bool,
}

/// Enqueues one resolved command on the real queue `q`.
///
/// # Safety
/// `q`, every handle in the command and every event in its wait list must be live;
/// `evp` is null or points to a handle slot.
unsafe fn enqueue(
    api: &Api,
    q: Handle,
    Enqueued { op, waits, may_map }: Enqueued<'_>,
    evp: *mut Handle,
    reads: &mut Vec<PendingRead>,
) -> ClInt {
    // OpenCL wants a null list with a count of 0.
    let (n, w) = if waits.is_empty() {
        (0, std::ptr::null())
    } else {
        (waits.len() as u32, waits.as_ptr())
    };
    match op {
        Op::Write { mem, offset, data } => (api.clEnqueueWriteBuffer)(
            q,
            mem.handle(),
            0,
            *offset,
            data.len,
            data.as_slice().as_ptr().cast(),
            n,
            w,
            evp,
        ),
        Op::Read {
            mem,
            offset,
            size,
            token,
        } if may_map && *size > 0 => {
            let region = (*offset, *size);
            reads::start_map(api, reads, q, mem.handle(), region, (n, w), evp, *token)
        }
        Op::Read {
            mem,
            offset,
            size,
            token,
        } => reads::start_copy(reads, *token, *size, evp, |ptr, evp| {
            (api.clEnqueueReadBuffer)(q, mem.handle(), 0, *offset, *size, ptr, n, w, evp)
        }),
        Op::Image(img) => {
            let handle =
                |m: &Option<Arc<Real>>| m.as_ref().map_or(std::ptr::null_mut(), |m| m.handle());
            let (src, dst) = (handle(&img.src), handle(&img.dst));
            let data = img
                .data
                .as_ref()
                .map_or(std::ptr::null(), |d| d.as_slice().as_ptr().cast::<c_void>());
            let (so, doo, r) = (
                img.src_origin.as_ptr(),
                img.dst_origin.as_ptr(),
                img.region.as_ptr(),
            );
            match img.op {
                ImageOp::Read => reads::start_copy(reads, img.token, img.size, evp, |ptr, evp| {
                    (api.clEnqueueReadImage)(q, src, 0, so, r, 0, 0, ptr, n, w, evp)
                }),
                ImageOp::Write => {
                    (api.clEnqueueWriteImage)(q, dst, 0, doo, r, 0, 0, data, n, w, evp)
                }
                ImageOp::Copy => (api.clEnqueueCopyImage)(q, src, dst, so, doo, r, n, w, evp),
                ImageOp::ToBuffer => {
                    (api.clEnqueueCopyImageToBuffer)(q, src, dst, so, r, img.offset, n, w, evp)
                }
                ImageOp::FromBuffer => {
                    (api.clEnqueueCopyBufferToImage)(q, src, dst, img.offset, doo, r, n, w, evp)
                }
                ImageOp::Fill => (api.clEnqueueFillImage)(q, dst, data, doo, r, n, w, evp),
            }
        }
        Op::Copy {
            src,
            dst,
            src_offset,
            dst_offset,
            size,
        } => (api.clEnqueueCopyBuffer)(
            q,
            src.handle(),
            dst.handle(),
            *src_offset,
            *dst_offset,
            *size,
            n,
            w,
            evp,
        ),
        Op::Fill {
            mem,
            pattern,
            offset,
            size,
        } => (api.clEnqueueFillBuffer)(
            q,
            mem.handle(),
            pattern.as_ptr().cast(),
            pattern.len(),
            *offset,
            *size,
            n,
            w,
            evp,
        ),
        Op::NdRange {
            kernel,
            work_dim,
            offset,
            global,
            local,
            args,
        } => {
            let k = kernel.handle();
            for (i, arg) in args.iter().enumerate() {
                let i = i as u32;
                let rc = match arg {
                    Arg::Unset => continue,
                    Arg::Mem(m) => {
                        let h = m.handle();
                        (api.clSetKernelArg)(
                            k,
                            i,
                            std::mem::size_of::<Handle>(),
                            (&h as *const Handle).cast(),
                        )
                    }
                    Arg::NullMem => {
                        let h: Handle = std::ptr::null_mut();
                        (api.clSetKernelArg)(
                            k,
                            i,
                            std::mem::size_of::<Handle>(),
                            (&h as *const Handle).cast(),
                        )
                    }
                    Arg::Local(size) => (api.clSetKernelArg)(k, i, *size, std::ptr::null()),
                    Arg::Sampler(sampler) => {
                        let h = sampler.handle();
                        (api.clSetKernelArg)(
                            k,
                            i,
                            std::mem::size_of::<Handle>(),
                            (&h as *const Handle).cast(),
                        )
                    }
                    Arg::Bytes(b) => {
                        (api.clSetKernelArg)(k, i, b.len(), b.as_ptr() as *const c_void)
                    }
                };
                if rc != cl::CL_SUCCESS {
                    return rc;
                }
            }
            let local_ptr = local.as_ref().map_or(std::ptr::null(), |l| l.as_ptr());
            (api.clEnqueueNDRangeKernel)(
                q,
                k,
                *work_dim,
                offset.as_ptr(),
                global.as_ptr(),
                local_ptr,
                n,
                w,
                evp,
            )
        }
        Op::Marker => (api.clEnqueueMarkerWithWaitList)(q, n, w, evp),
        Op::Barrier => (api.clEnqueueBarrierWithWaitList)(q, n, w, evp),
        Op::Failed(e) | Op::UserEvent(e) => *e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn holding_a_device_waits_for_its_task_and_keeps_others_out() {
        let q = Arc::new(DeviceQueue::new(4, Duration::ZERO));
        lock(&q.state).hold(); // a task runs
        let holder = {
            let q = Arc::clone(&q);
            std::thread::spawn(move || q.hold())
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!holder.is_finished(), "held while a task runs");
        q.finished();
        holder.join().unwrap();
        // Held: the worker and inline submits see a running device.
        assert!(lock(&q.state).is_running());
        // A second holder waits for the first to give the device back.
        let second = {
            let q = Arc::clone(&q);
            std::thread::spawn(move || q.hold())
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!second.is_finished());
        q.finished();
        second.join().unwrap();
        q.finished();
        assert!(!lock(&q.state).is_running());
    }
}
