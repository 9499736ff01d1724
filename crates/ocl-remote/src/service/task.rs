//! A task: everything one client enqueued between two flush points, its ids resolved
//! to the client's real objects, on its way from the client's session (which builds it)
//! to the device worker that runs it and answers the client.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::bodies::Body;
use super::connection::ClientWriter;
use super::turns::Flow;
use super::Real;
use crate::cl::ClInt;
use crate::proto::ImageOp;
use crate::service::lock;

/// A kernel argument with its buffer resolved.
pub(crate) enum Arg {
    Unset,
    Mem(Arc<Real>),
    NullMem,
    Local(usize),
    Bytes(Vec<u8>),
    Sampler(Arc<Real>),
}

/// Bytes inside a received frame, which the command keeps alive instead of copying.
pub(crate) struct FrameBytes {
    pub frame: Arc<Body>,
    pub start: usize,
    pub len: usize,
}

impl FrameBytes {
    /// `data`, a slice of `frame` (the decoder borrows from it), kept without a copy.
    pub fn new(frame: &Arc<Body>, data: &[u8]) -> FrameBytes {
        let start = data.as_ptr() as usize - frame.as_ptr() as usize;
        debug_assert!(start + data.len() <= frame.len());
        FrameBytes {
            frame: Arc::clone(frame),
            start,
            len: data.len(),
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.frame[self.start..self.start + self.len]
    }
}

/// A command with its ids resolved to real objects (each held by reference).
pub(crate) enum Op {
    Write {
        mem: Arc<Real>,
        offset: usize,
        data: FrameBytes,
    },
    Read {
        mem: Arc<Real>,
        offset: usize,
        size: usize,
        token: u64,
    },
    Copy {
        src: Arc<Real>,
        dst: Arc<Real>,
        src_offset: usize,
        dst_offset: usize,
        size: usize,
    },
    Fill {
        mem: Arc<Real>,
        pattern: Vec<u8>,
        offset: usize,
        size: usize,
    },
    NdRange {
        kernel: Arc<Real>,
        work_dim: u32,
        offset: [usize; 3],
        global: [usize; 3],
        local: Option<[usize; 3]>,
        args: Vec<Arg>,
    },
    Image(Box<ImageWork>),
    Marker,
    Barrier,
    /// The command could not be resolved; this is its status.
    Failed(ClInt),
    /// Not a command: the client's user event (the command's event id) was set to this
    /// error status; what waits for it fails unrun ([`crate::proto::Command::UserEvent`]).
    UserEvent(ClInt),
}

/// An image command with its objects resolved (see [`crate::proto::ImageCmd`]).
pub(crate) struct ImageWork {
    pub op: ImageOp,
    pub src: Option<Arc<Real>>,
    pub dst: Option<Arc<Real>>,
    pub src_origin: [usize; 3],
    pub dst_origin: [usize; 3],
    pub region: [usize; 3],
    /// The buffer offset of a copy between an image and a buffer.
    pub offset: usize,
    /// A read's token and size (bytes, tightly packed).
    pub token: u64,
    pub size: usize,
    /// A write's pixels (tightly packed) or a fill's colour.
    pub data: Option<FrameBytes>,
}

/// The client's real queue a command runs on.
pub(crate) struct TaskQueue {
    pub real: Arc<Real>,
    pub device: u32,
    /// The queue's context, for the events the node makes itself.
    pub context: Arc<Real>,
}

pub(crate) struct Cmd {
    /// The client's real queue, `None` if the queue id was invalid.
    pub queue: Option<TaskQueue>,
    /// The client's event id for the command, 0 for none. The commands a client
    /// operation was split into (rows of a rectangle, pieces of a large write) all carry
    /// its event, which completes when all of them have.
    pub event: u64,
    /// The client events the command waits for (see [`crate::proto::Queued`]).
    pub wait: Vec<u64>,
    pub op: Op,
}

pub(crate) struct Task {
    /// The id of the `Flush` that closed the task; `TaskDone` carries it.
    pub id: u64,
    pub cmds: Vec<Cmd>,
    pub writer: ClientWriter,
    pub flushed_at: Instant,
    /// Set when the task is dropped: answered, failed or discarded.
    pub _finished: SetOnDrop,
    /// Devices other than the one whose FIFO runs the task (always the lowest of its
    /// devices), ascending: held for the task while it runs, so that it does not
    /// interleave with other clients' tasks there either.
    pub other_devices: Vec<u32>,
    /// Whose share of the device the task takes ([`super::turns`]).
    pub flow: Flow,
}

/// Whether a task is over; the client's next task waits for it when it goes to another
/// device (a device's own FIFO keeps the order of the tasks on it).
#[derive(Clone, Default)]
pub(crate) struct Finished(Arc<(Mutex<bool>, Condvar)>);

impl Finished {
    /// Returns once the task is over.
    pub fn wait(&self) {
        let (over, changed) = &*self.0;
        let mut over = lock(over);
        while !*over {
            over = changed.wait(over).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn set(&self) {
        let (over, changed) = &*self.0;
        *lock(over) = true;
        changed.notify_all();
    }
}

/// Sets its [`Finished`] when dropped, whichever way the task ends.
pub(crate) struct SetOnDrop(pub Finished);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.set();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn finished_sets_when_the_task_is_dropped() {
        let finished = Finished::default();
        let guard = SetOnDrop(finished.clone());
        let waiter = {
            let finished = finished.clone();
            std::thread::spawn(move || finished.wait())
        };
        std::thread::sleep(Duration::from_millis(30));
        assert!(!waiter.is_finished());
        drop(guard);
        waiter.join().unwrap();
        finished.wait(); // stays set
    }
}
