//! The reading side of a node connection: frames from the node read and acted on one
//! at a time ([`pump_one`]), by a waiting application thread or, when none waits, by
//! the connection's background reader ([`background_reader`]); a finished task's
//! callbacks run once the read half is released ([`Finished`]), and the thread-local
//! record of whose callbacks a thread is running (a callback may make blocking calls).

use super::*;

thread_local! {
    /// The tasks whose callbacks this thread is running, innermost last (a callback may
    /// make a blocking call, whose wait reads and completes further tasks).
    /// Each (the address of its connection's `Node`, the task's id).
    pub(super) static CALLBACKS_OF: RefCell<Vec<(usize, u64)>> = const { RefCell::new(Vec::new()) };
    /// The connections (addresses of their `Node`) whose error callbacks this thread
    /// is running (see [`Node::notify_loss`]).
    pub(super) static NOTIFYING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Whether this thread is running the callbacks of `task` of the connection `node`.
pub(super) fn callbacks_running_here(node: &Node, task: u64) -> bool {
    let key = (node as *const Node as usize, task);
    CALLBACKS_OF.with(|c| c.borrow().contains(&key))
}

/// A task the node reported done, its events final, its reads copied: what remains to
/// do once the read half is released, since the application's callbacks may make
/// blocking calls, whose waits read the connection themselves.
pub(super) struct Finished {
    task: u64,
    events: Vec<EventRef>,
    /// Whether this completion settled each event (and so owes its callbacks).
    settled: Vec<bool>,
    /// Dropped with the rest, the read half released: their destinations may be memory
    /// whose release runs the application's destructor callbacks.
    _direct_reads: Vec<DirectRead>,
}

impl Finished {
    /// Runs the events' callbacks, then removes the task: until then it counts as in
    /// flight, so that `finish` on another thread returns after the callbacks.
    pub(super) fn run(self, node: &Node) {
        let task = self.task;
        let key = (node as *const Node as usize, task);
        CALLBACKS_OF.with(|c| c.borrow_mut().push(key));
        for (e, settled) in self.events.iter().zip(&self.settled) {
            if *settled {
                e.run_callbacks();
            }
        }
        CALLBACKS_OF.with(|c| c.borrow_mut().pop());
        // What the task holds (memory its reads wrote into) goes before the task, and
        // with no lock held: its release may run the application's destructor
        // callbacks, which may call the ICD, and which a `clFinish` returning after the
        // task has seen run.
        let reads = lock(&node.state)
            .tasks
            .get_mut(&task)
            .map(|t| std::mem::take(&mut t.reads));
        drop((reads, self));
        let emptied = lock(&node.state).tasks.remove(&task);
        drop(emptied);
        node.cond.notify_all();
        node.wake_poller();
    }
}

/// Reads one frame from the node and acts on it: a reply is filed for its caller, read
/// data goes to the application's memory, a finished task makes its events final and
/// is returned for its callbacks to run once the read half is released.
pub(super) fn pump_one(node: &Node, reader: &mut Stream) -> io::Result<Option<Finished>> {
    {
        let header = read_header(reader)?;
        if header.kind == proto::kind::READ_DATA {
            // Read data goes straight into the application's memory.
            let mut fixed = [0u8; 20];
            reader.read_exact(&mut fixed)?;
            let token = u64::from_le_bytes(fixed[0..8].try_into().expect("8"));
            let offset = u64::from_le_bytes(fixed[8..16].try_into().expect("8")) as usize;
            let len = u32::from_le_bytes(fixed[16..20].try_into().expect("4")) as usize;
            if 20 + len != header.body_len as usize {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "bad ReadData length",
                ));
            }
            // A clone: its `keep` holds the memory while we write into it, also if the
            // task is failed (and dropped) meanwhile.
            let dst = lock(&node.state)
                .tasks
                .get(&header.id)
                .and_then(|t| t.reads.get(&token).cloned());
            match dst {
                Some(dst) if offset.checked_add(len).is_some_and(|end| end <= dst.len) => {
                    // SAFETY: the application gave us `dst.len` writable bytes at `dst.ptr`
                    // for this read and may not touch them until the read's event completes.
                    let slice = unsafe {
                        std::slice::from_raw_parts_mut((dst.ptr + offset) as *mut u8, len)
                    };
                    reader.read_exact(slice)?;
                }
                _ => {
                    io::copy(&mut Read::by_ref(reader).take(len as u64), &mut io::sink())?;
                }
            }
            return Ok(None);
        }
        let mut body = vec![0u8; header.body_len as usize];
        reader.read_exact(&mut body)?;
        let response = Response::decode(header.kind, &body)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        match response {
            Response::Reply { status, payload } => {
                lock(&node.state)
                    .replies
                    .insert(header.id, (status, payload.to_vec()));
                node.cond.notify_all();
            }
            Response::TaskDone { status, events } => {
                // Events complete and direct reads are copied while the task still counts
                // as in flight, so that `finish` cannot return before they are done.
                let taken = lock(&node.state).tasks.get_mut(&header.id).map(|t| {
                    (
                        std::mem::take(&mut t.events),
                        std::mem::take(&mut t.direct_reads),
                    )
                });
                let Some((task_events, direct_reads)) = taken else {
                    return Ok(None);
                };
                if status == cl::CL_SUCCESS {
                    for r in &direct_reads {
                        // SAFETY: the region holds the buffer (offset + len checked at
                        // enqueue); the destination was given for this read.
                        unsafe {
                            crate::copy::copy(
                                r.dst.ptr as *mut u8,
                                r.src.ptr().add(r.offset),
                                r.dst.len,
                            )
                        };
                    }
                }
                // Final before the task stops being exclusive, so that a thread woken
                // by that, or one that sees the connection lost meanwhile, finds them
                // final; their callbacks run after.
                let done: HashMap<u64, &proto::EventDone> =
                    events.iter().map(|e| (e.event, e)).collect();
                let settled: Vec<bool> = task_events
                    .iter()
                    .map(|e| match done.get(&e.id()) {
                        Some(d) => e.settle(d.status, d.profile),
                        None => e.settle(status.min(cl::CL_COMPLETE), [0; 4]),
                    })
                    .collect();
                // The copies are made: later tasks may go. Before the callbacks, since
                // they may flush (setting a user event releases held commands), and a
                // flush waits for exclusive tasks, which the task would otherwise be
                // until after the callbacks.
                if let Some(t) = lock(&node.state).tasks.get_mut(&header.id) {
                    t.exclusive = false;
                }
                node.cond.notify_all();
                return Ok(Some(Finished {
                    task: header.id,
                    events: task_events,
                    settled,
                    _direct_reads: direct_reads,
                }));
            }
            Response::ReadData { .. } => unreachable!("handled above"),
        }
    }
    Ok(None)
}

pub(super) fn spin_from_env() -> Duration {
    std::env::var(SPIN_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|us| Duration::from_micros(us.min(10_000)))
        .unwrap_or(ocl_remote::poll::SPIN_DEFAULT)
}

/// The background reader: whenever data arrives and no application thread is reading,
/// it reads and dispatches the frames (completions nobody waits for, callbacks).
pub(super) fn background_reader(node: &Weak<Node>, fd: RawFd) {
    loop {
        // Only tasks nobody waits for need this thread (completions, callbacks); a
        // waiting application thread reads for itself.
        {
            let Some(node) = node.upgrade() else { return };
            let mut st = lock(&node.state);
            while !st.dead && (st.waiters > 0 || st.tasks.is_empty()) {
                st = node.background.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.dead {
                return;
            }
        }
        // Bounded, so that a waiter that arrives meanwhile is noticed.
        if !ocl_remote::poll::readable(fd, 50) {
            continue;
        }
        let Some(node) = node.upgrade() else { return };
        if lock(&node.state).waiters > 0 {
            continue;
        }
        // One frame at a time, the read half released before a finished task's
        // callbacks run (see `Finished`).
        let mut result = Ok(());
        loop {
            let mut reader = lock(&node.reader);
            // Looked at with the read half held: a waiter may have read the frame.
            if !ocl_remote::poll::readable(fd, 0) {
                break;
            }
            let pumped = pump_one(&node, &mut reader);
            drop(reader);
            match pumped {
                Ok(finished) => finished.map_or((), |f| f.run(&node)),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if node.pumped(result) {
            return;
        }
    }
}
