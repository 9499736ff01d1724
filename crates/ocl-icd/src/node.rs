//! One connection to one node: synchronous control calls, the pending command batch,
//! in-flight tasks, and the reading of the node's frames that completes them.
//!
//! Everything the application sends to a node goes through one ordered output buffer
//! (`Out`), so a `Release` can never overtake a command that still uses the object.
//! Enqueued commands are encoded straight into an open `Enqueue` frame in that buffer
//! and sent only at a flush point, as `Enqueue` + `Flush` in one write. Frames from the
//! node are read by whichever thread holds the read half: an application thread waiting
//! for an answer reads them itself (no thread hand-off on the latency path); when nobody
//! waits, a background thread does. Reading routes `Reply` frames to the waiting caller
//! by request id, copies `ReadData` into the host pointers recorded at enqueue time, and
//! on `TaskDone` makes the task's events final; their callbacks run once the thread has
//! released the read half, so that they may make blocking calls.
//!
//! Every event completes exactly once ([`EventRef::settle`]). When the connection is
//! lost, every event it carried (held back, not yet flushed, in flight) is made final
//! in the step that marks it lost ([`Node::fail_all`]), so a thread that sees the loss
//! never finds one of them pending.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_void, CString};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::{self, Command, Decoded, HelloInfo, Request, Response};

use ocl_remote::shm::Region;
use ocl_remote::stream::Stream;

use crate::held::{HeldCommand, Holding, Shape};
use crate::object::EventRef;

/// Set to `0` to keep buffer data on the network path even on the node's host.
pub const SHM_ENV: &str = "NETACCEL_OPENCL_SHM";
/// How long, in microseconds, a thread waiting for the node polls the socket before it
/// sleeps (default 50, see `ocl_remote::poll`; `0` sleeps at once).
pub const SPIN_ENV: &str = "NETACCEL_OPENCL_SPIN_US";

/// Encoded commands are sealed into an `Enqueue` frame past this size, and the output
/// buffer is written out past `OUT_BYTES_MAX`, so a long batch costs bounded memory.
const CMDS_BYTES_MAX: usize = 4 << 20;
const OUT_BYTES_MAX: usize = 16 << 20;
/// Largest frame the node may send us (read chunks are 16 MiB).
const FRAME_BODY_MAX: u32 = 64 << 20;
/// How long connecting to a node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the node's answer to `Hello` may take once connected. Longer than the
/// connect: a node that isolates its clients answers from a runtime process, and when
/// its ready ones are taken, starting one (loading the OpenCL runtime) took more than
/// 3 s on a loaded 2-core machine, and programs found no platform (14 CTS subtests
/// over TCP, each passing when run again).
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);
/// Writes larger than this are split into several commands.
pub const WRITE_CHUNK_MAX: usize = 8 << 20;
/// A task is sent as soon as its commands carry this much write data (held commands
/// too, when they are released), so that no task comes near the node's
/// `pending_bytes_max` (512 MiB by default): a 1 GiB write, or the data of a 1 GiB
/// buffer created with `CL_MEM_COPY_HOST_PTR`, travels as several tasks, which run in
/// order.
const OPEN_DATA_MAX: usize = 64 << 20;
/// Write data from this size on goes to the socket from the application's memory at
/// once, not copied into the output buffer first (see [`Node::enqueue`]); below it a
/// copy is cheaper than a system call of its own.
const SPLICE_MIN: usize = 64 << 10;

/// Something an in-flight read needs alive until its data has arrived: the ICD's own
/// memory it writes into (a mapping's copy), say. The task holds it, so releasing the
/// object the memory belongs to cannot free it under the read.
pub type Keep = Arc<dyn Send + Sync>;

/// A host memory range a `Read` command fills when its data arrives.
#[derive(Clone)]
pub struct HostDst {
    pub ptr: usize,
    pub len: usize,
    /// Set when the memory is the ICD's (the application's own memory is its to keep).
    pub _keep: Option<Keep>,
}

impl HostDst {
    /// The application's memory at `ptr`.
    pub fn app(ptr: usize, len: usize) -> HostDst {
        HostDst {
            ptr,
            len,
            _keep: None,
        }
    }
}

/// What the reader thread must do when a task completes.
#[derive(Default)]
struct InFlight {
    events: Vec<EventRef>,
    reads: HashMap<u64, HostDst>,
    /// Reads of shared-memory buffers, done with `memcpy` when the task has run.
    direct_reads: Vec<DirectRead>,
    /// Has direct reads: no later task may be sent until this one is removed.
    exclusive: bool,
}

/// A read served from a buffer's shared memory once its task is done. While such a task
/// is in flight no later task may start (see [`Node::flush`]), so nothing can change
/// the buffer between the task's end and the copy.
pub struct DirectRead {
    pub src: Arc<Region>,
    pub offset: usize,
    pub dst: HostDst,
}

struct Out {
    stream: Stream,
    buf: Vec<u8>,
    /// Where the open `Enqueue` frame starts in `buf` (its header is written at seal).
    frame_start: Option<usize>,
    cmd_count: u32,
    /// Commands since the last `Flush` (sealed or not).
    open_cmds: u32,
    /// Bytes of write data in those commands (see [`OPEN_DATA_MAX`]).
    open_data: usize,
    open: InFlight,
    /// Commands that wait for user events not set, and what waits for them.
    held: Holding,
}

#[derive(Default)]
struct State {
    replies: HashMap<u64, (ClInt, Vec<u8>)>,
    tasks: HashMap<u64, InFlight>,
    dead: bool,
    /// The end of the connection was noticed: a thread calls the contexts' error
    /// callbacks ([`Node::notify_loss`]), and has once `loss_notified`.
    loss_noticed: bool,
    loss_notified: bool,
    /// Application threads inside [`Node::wait_for`].
    waiters: usize,
}

pub struct Node {
    pub addr: String,
    next_id: AtomicU64,
    out: Mutex<Out>,
    state: Mutex<State>,
    cond: Condvar,
    /// Wakes the background reader: tasks in flight and nobody waiting for them.
    background: Condvar,
    pub platforms: Vec<Vec<u32>>,
    /// The read half: whoever holds it reads frames (a waiting application thread, which
    /// saves a thread hand-off, or the background reader).
    reader: Mutex<Stream>,
    reader_fd: RawFd,
    /// Wakes the thread that waits on the read half (see [`Node::wake_reader`]).
    wake: OwnedFd,
    /// See [`SPIN_ENV`].
    spin: ocl_remote::poll::AdaptiveSpin,
    /// The error callbacks of this node's live contexts (`pfn_notify` of
    /// `clCreateContext`), called once if the connection is lost.
    notifiers: Mutex<Vec<ContextNotifier>>,
}

/// A context's error callback (`pfn_notify` of `clCreateContext`).
pub type ContextCallback = unsafe extern "C" fn(*const c_char, *const c_void, usize, *mut c_void);

/// A context's error callback and its user data.
pub struct ContextNotifier {
    pub context: u64,
    pub notify: ContextCallback,
    pub user_data: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a wait does once the connection is lost (see [`Node::wait_for`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnLoss {
    /// It ends: what it waits for would have come from the node.
    Return,
    /// It goes on: what it waits for is completed by another thread, the loss included.
    Wait,
}

/// Events of commands that cannot run any more, made final with `CL_OUT_OF_RESOURCES`
/// under a lock of the connection; their callbacks run, and the references go, once no
/// lock is held ([`Failed::finish`]): both may enter the application, which may call
/// the ICD again.
struct Failed {
    events: Vec<EventRef>,
    /// Whether this settled each event (and so owes its callbacks).
    settled: Vec<bool>,
}

impl Failed {
    fn settle(events: Vec<EventRef>) -> Failed {
        let settled = events
            .iter()
            .map(|e| e.settle(cl::CL_OUT_OF_RESOURCES, [0; 4]))
            .collect();
        Failed { events, settled }
    }

    fn finish(self) {
        for (e, settled) in self.events.iter().zip(self.settled) {
            if settled {
                e.run_callbacks();
            }
        }
    }
}

impl Node {
    /// Connects (`tls://HOST:PORT` over TLS, see [`crate::tls`]), says `Hello` and
    /// starts the reader thread.
    pub fn connect(addr: &str) -> io::Result<Arc<Node>> {
        // Bounded, so that an unreachable node delays the program's start by seconds,
        // not by the system's SYN timeout.
        let stream = crate::tls::open(addr, CONNECT_TIMEOUT, HELLO_TIMEOUT)?;
        // An empty host id tells the node not to offer shared memory (nor its local
        // socket).
        let shm_off = std::env::var(SHM_ENV).is_ok_and(|v| v == "0");
        let host_id = if shm_off {
            Vec::new()
        } else {
            ocl_remote::shm::host_id()
        };
        let (mut stream, mut reader, payload) = greet(stream, &host_id)?;
        let invalid = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
        let info = HelloInfo::decode(&payload).map_err(|e| invalid(&e.to_string()))?;
        let mut platforms = info.platforms;
        // On the node's host: continue over its Unix socket (see `ocl_remote::stream`);
        // if that fails, the TCP connection serves.
        let local = info.local_socket;
        if !local.is_empty() {
            if let Ok((s, r, p)) = Stream::connect_local(local).and_then(|s| greet(s, &host_id)) {
                if let Ok(info) = HelloInfo::decode(&p) {
                    platforms = info.platforms;
                    (stream, reader) = (s, r);
                }
            }
        }
        reader.set_read_timeout(None)?;
        Node::start(addr, stream, reader, platforms)
    }

    /// The connection over `stream` (writing) and `reader` (reading the same socket),
    /// greeted already: starts the reader thread.
    fn start(
        addr: &str,
        stream: Stream,
        reader: Stream,
        platforms: Vec<Vec<u32>>,
    ) -> io::Result<Arc<Node>> {
        let node = Arc::new(Node {
            addr: addr.to_string(),
            next_id: AtomicU64::new(2),
            out: Mutex::new(Out {
                stream,
                buf: Vec::new(),
                frame_start: None,
                cmd_count: 0,
                open_cmds: 0,
                open_data: 0,
                open: InFlight::default(),
                held: Holding::new(crate::held::held_bytes_max_from_env()),
            }),
            state: Mutex::new(State::default()),
            cond: Condvar::new(),
            background: Condvar::new(),
            platforms,
            reader_fd: reader.as_raw_fd(),
            wake: eventfd()?,
            spin: ocl_remote::poll::AdaptiveSpin::new(spin_from_env()),
            notifiers: Mutex::new(Vec::new()),
            reader: Mutex::new(reader),
        });
        let weak = Arc::downgrade(&node);
        let fd = node.reader_fd;
        std::thread::Builder::new()
            .name("netaccel-ocl-reader".to_string())
            .spawn(move || background_reader(&weak, fd))?;
        Ok(node)
    }

    /// A fresh id for an object, request, event or read token (one counter per node).
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a control request and waits for its reply.
    pub fn call(&self, request: &Request<'_>) -> (ClInt, Vec<u8>) {
        let id = self.next_id();
        {
            let mut out = lock(&self.out);
            out.seal();
            request.encode(id, &mut out.buf);
            if out.write_buf().is_err() {
                drop(out);
                self.fail_all();
            }
        }
        self.wait_for(OnLoss::Return, |st| st.replies.remove(&id))
            .unwrap_or((cl::CL_OUT_OF_RESOURCES, Vec::new()))
    }

    /// Waits until `take` finds what the caller waits for; once the connection is lost,
    /// `None` at once or, with [`OnLoss::Wait`], whenever `take` finds it (what it looks
    /// for no longer depends on the node). While it waits, the calling thread reads
    /// frames itself if no other thread is reading, so its own answer needs no hand-off
    /// from another thread.
    fn wait_for<T>(
        &self,
        on_loss: OnLoss,
        mut take: impl FnMut(&mut State) -> Option<T>,
    ) -> Option<T> {
        lock(&self.state).waiters += 1;
        let result = self.wait_for_inner(on_loss, &mut take);
        let mut st = lock(&self.state);
        st.waiters -= 1;
        // The background reader sleeps while anyone waits; it may have to read now.
        if st.waiters == 0 && !st.tasks.is_empty() {
            self.background.notify_one();
        }
        result
    }

    fn wait_for_inner<T>(
        &self,
        on_loss: OnLoss,
        take: &mut impl FnMut(&mut State) -> Option<T>,
    ) -> Option<T> {
        loop {
            let mut st = lock(&self.state);
            if let Some(v) = take(&mut st) {
                return Some(v);
            }
            if st.dead {
                if on_loss == OnLoss::Return {
                    return None;
                }
                // Nothing comes from the node any more: another thread completes what
                // this one waits for (and notifies after it did, see `wake_waiters`).
                drop(self.cond.wait(st).unwrap_or_else(|p| p.into_inner()));
                continue;
            }
            // Trying the reader while holding the state lock: whoever holds the reader
            // takes the state lock to notify after releasing it, so a failed try is
            // always followed by a wake-up.
            let Ok(mut reader) = self.reader.try_lock() else {
                drop(self.cond.wait(st).unwrap_or_else(|p| p.into_inner()));
                continue;
            };
            drop(st);
            if !self
                .spin
                .wait_or_wake(self.reader_fd, self.wake.as_raw_fd())
            {
                // Woken by another thread, not by the node: look again.
                drain(&self.wake);
                drop(reader);
                continue;
            }
            let result = pump_one(self, &mut reader);
            drop(reader);
            self.pumped(result.map(|finished| finished.map_or((), |f| f.run(self))));
        }
    }

    /// Wakes the thread (if any) that waits on the read half for news that will not
    /// come from the node: a user event set by another application thread. Without
    /// this, a thread in `clWaitForEvents` on a user event slept until some unrelated
    /// frame arrived. The waiters on the condition variable are woken as well.
    fn wake_reader(&self) {
        self.wake_waiters();
        let one = 1u64.to_ne_bytes();
        // SAFETY: an 8-byte write to our eventfd; a full counter only means it is set.
        unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Wakes the thread, if any, that waits on the read half, after a change made by a
    /// thread that does not hold it (the end of a task whose callbacks ran after the
    /// read half was released): such a waiter looked at the state before it took the
    /// read half, and sleeps until the node sends something. Nobody holds the read half
    /// when it can be taken here: a waiter that takes it later looks at the state first.
    fn wake_poller(&self) {
        if self.reader.try_lock().is_err() {
            let one = 1u64.to_ne_bytes();
            // SAFETY: an 8-byte write to our eventfd; a full counter only means it is set.
            unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
    }

    /// Wakes the threads waiting on the condition variable. The state lock is taken
    /// first: a waiter checks what it waits for under that lock and sleeps in the same
    /// hold, so a change made before this call cannot fall between the two.
    fn wake_waiters(&self) {
        drop(lock(&self.state));
        self.cond.notify_all();
    }

    /// After reading frames (the read half released): wakes the waiting threads and, if
    /// reading failed, fails everything in flight. Returns whether the connection is
    /// lost.
    fn pumped(&self, result: io::Result<()>) -> bool {
        self.wake_waiters();
        let Err(e) = result else { return false };
        if e.kind() != io::ErrorKind::UnexpectedEof {
            eprintln!("netaccel OpenCL: connection to {} lost: {e}", self.addr);
        }
        self.fail_all();
        true
    }

    /// Queues a `Release` behind every command already enqueued (behind held commands
    /// too: it waits until nothing is held, see [`crate::held`]).
    pub fn release(&self, id: u64) {
        let mut out = lock(&self.out);
        if out.held.defer_release(id) {
            return;
        }
        out.seal();
        Request::Release { id }.encode(0, &mut out.buf);
        if out.buf.len() > OUT_BYTES_MAX {
            let _ = out.write_buf();
        }
    }

    /// A new queue of the application (its order decides what its held commands hold).
    pub fn add_queue(&self, queue: u64, out_of_order: bool) {
        lock(&self.out).held.add_queue(queue, out_of_order);
    }

    /// The queue `queue` is released.
    pub fn forget_queue(&self, queue: u64) {
        lock(&self.out).held.forget_queue(queue);
    }

    /// Refuses, with `CL_OUT_OF_HOST_MEMORY`, a command of `queue` waiting for `waits`
    /// and carrying `data_len` bytes of data that would be held back past the bound of
    /// held bytes ([`crate::held`]); `gated`: its wait list names user events not set.
    /// Checked before the call accepts its command: threads enqueueing at the same time
    /// may pass it together, by a command each.
    pub fn hold_room(
        &self,
        queue: u64,
        waits: &[u64],
        gated: bool,
        data_len: usize,
    ) -> Result<(), ClInt> {
        let out = lock(&self.out);
        let held = gated || out.held.must_hold(&Shape::plain(queue, waits));
        if held && !out.held.room_for(data_len) {
            return Err(cl::CL_OUT_OF_HOST_MEMORY);
        }
        Ok(())
    }

    /// Whether commands of `queue` are held back by user events that are not set.
    pub fn holds_queue(&self, queue: u64) -> bool {
        lock(&self.out).held.holds_queue(queue)
    }

    /// Adds a command that waits for the events `wait` (ids) to the open task. `event`
    /// is completed when the task is done; `read` is where a read command's data goes.
    ///
    /// A write's data of [`SPLICE_MIN`] bytes or more is not copied: the frame so far is
    /// sealed and written out with the data at once (`writev`), so the caller's memory
    /// is free again on return, as with a copy. The node keeps the commands of a task
    /// until its `Flush`, so sending them early changes nothing else. (A 1 MiB
    /// write + kernel + read loop over TCP spent a third of the ICD's CPU time in that
    /// copy.)
    pub fn enqueue(
        &self,
        command: &Command<'_>,
        wait: &[u64],
        event: Option<EventRef>,
        read: Option<(u64, HostDst)>,
    ) {
        let mut out = lock(&self.out);
        let (failed, full) = self.push(&mut out, command, wait, event, read);
        drop(out);
        if failed {
            self.fail_all();
        }
        if full {
            self.flush();
        }
    }

    /// Adds a command to the open task (see [`Node::enqueue`]), or holds it back if it
    /// depends on a user event that is not set ([`crate::held`]). Returns whether writing
    /// to the node failed and whether the open task carries enough data to be sent.
    fn push(
        &self,
        out: &mut Out,
        command: &Command<'_>,
        wait: &[u64],
        event: Option<EventRef>,
        read: Option<(u64, HostDst)>,
    ) -> (bool, bool) {
        let data_len = match command {
            Command::Write { data, .. } => data.len(),
            Command::Image(c) => c.data.len(),
            _ => 0,
        };
        let shape = Shape::of(command, wait);
        if out.held.must_hold(&shape) {
            let mut encoded = Vec::new();
            let data = command.encode_split(wait, &mut encoded);
            encoded.extend_from_slice(data);
            out.held.hold(&shape, encoded, data_len, event, read);
            return (false, false);
        }
        out.start_frame();
        let data = command.encode_split(wait, &mut out.buf);
        let spliced = if data.len() >= SPLICE_MIN {
            data
        } else {
            out.buf.extend_from_slice(data);
            &[]
        };
        self.pushed(out, spliced, data_len, event, read)
    }

    /// Adds a command held back until now to the open task.
    fn push_released(&self, out: &mut Out, c: HeldCommand) -> (bool, bool) {
        out.start_frame();
        out.buf.extend_from_slice(&c.encoded);
        self.pushed(out, &[], c.data_len, c.event_ref, c.read)
    }

    /// The bookkeeping of a command just encoded into the open frame, `spliced` its
    /// data still to be written after it.
    fn pushed(
        &self,
        out: &mut Out,
        spliced: &[u8],
        data_len: usize,
        event: Option<EventRef>,
        read: Option<(u64, HostDst)>,
    ) -> (bool, bool) {
        out.open_data += data_len;
        out.cmd_count += 1;
        out.open_cmds += 1;
        if let Some(e) = event {
            out.open.events.push(e);
        }
        if let Some((token, dst)) = read {
            out.open.reads.insert(token, dst);
        }
        let mut failed = false;
        if !spliced.is_empty() {
            out.seal_with(spliced.len());
            failed = out.write_buf_and(spliced).is_err();
        } else {
            if out
                .frame_start
                .is_some_and(|start| out.buf.len() - start > CMDS_BYTES_MAX)
            {
                out.seal();
            }
            if out.buf.len() > OUT_BYTES_MAX {
                out.seal();
                failed = out.write_buf().is_err();
            }
        }
        (failed, out.open_data >= OPEN_DATA_MAX)
    }

    /// Runs `copy` at once, in place of a write command, if that is the same as running it
    /// in order: nothing enqueued yet, nothing held back by user events and no task in
    /// flight. Returns whether it ran.
    ///
    /// `marker` (waiting for `wait`) carries the write's event, if the application asked
    /// for one; it is enqueued in the same hold of the output lock as the copy, so that
    /// no command of another thread (a read seeing the data) comes between the two.
    pub fn direct_write(
        &self,
        copy: impl FnOnce(),
        marker: Option<&Command<'_>>,
        wait: &[u64],
        event: &mut Option<EventRef>,
    ) -> bool {
        let mut out = lock(&self.out);
        if out.open_cmds != 0 || !out.held.is_empty() || !lock(&self.state).tasks.is_empty() {
            return false;
        }
        copy();
        let Some(marker) = marker else { return true };
        let (failed, _) = self.push(&mut out, marker, wait, event.take(), None);
        drop(out);
        if failed {
            self.fail_all();
        }
        true
    }

    /// Adds `marker` (a command carrying the reads' event) and reads served from shared
    /// memory when the task is done, and sends the task: the copies are made once the
    /// whole task has run, so a later command in it (a write to the buffer read) would
    /// change what the read returns. Later tasks wait for the copies (`exclusive`).
    ///
    /// All of it under one hold of the output lock, so that no other thread's command
    /// lands between the marker and the flush. A read that a user event not set holds
    /// back ([`crate::held`]) cannot be sent now: then nothing is enqueued and `event`
    /// is handed back, for the caller to read over the connection instead (the node
    /// copies such a read at its place in the task).
    pub fn enqueue_direct_reads(
        &self,
        marker: &Command<'_>,
        wait: &[u64],
        event: Option<EventRef>,
        reads: Vec<DirectRead>,
    ) -> Result<(), Option<EventRef>> {
        let mut out = lock(&self.out);
        if out.held.must_hold(&Shape::of(marker, wait)) {
            return Err(event);
        }
        out.open.direct_reads.extend(reads);
        out.open.exclusive = true;
        let (failed, _) = self.push(&mut out, marker, wait, event, None);
        if failed {
            drop(out);
            self.fail_all();
        } else {
            self.flush_locked(out);
        }
        Ok(())
    }

    /// Closes the open task and sends it (`clFlush`, and before a blocking call waits).
    /// Commands held back by user events are not in it: they are sent when the events
    /// are set ([`Node::user_event_done`]).
    pub fn flush(&self) {
        self.flush_locked(lock(&self.out));
    }

    /// [`Node::flush`] with the output lock already held.
    fn flush_locked(&self, mut out: MutexGuard<'_, Out>) -> Option<u64> {
        if out.open_cmds == 0 {
            return None;
        }
        // A task with direct reads must finish (and its reads be copied) before any
        // later task may change the buffers it reads.
        {
            let mut state = lock(&self.state);
            while state.tasks.values().any(|t| t.exclusive) && !state.dead {
                state = self.cond.wait(state).unwrap_or_else(|p| p.into_inner());
            }
        }
        out.seal();
        let id = self.next_id();
        Request::Flush.encode(id, &mut out.buf);
        out.open_cmds = 0;
        out.open_data = 0;
        let mut task = std::mem::take(&mut out.open);
        for e in &task.events {
            e.set_submitted();
        }
        // Registered before the bytes leave, so the reader always finds it.
        {
            let mut st = lock(&self.state);
            if st.dead {
                // Nothing can run any more: the task fails at once (its events too).
                let failed = Failed::settle(std::mem::take(&mut task.events));
                drop(st);
                out.buf.clear();
                drop(out);
                self.wake_reader();
                failed.finish();
                drop(task);
                return None;
            }
            st.tasks.insert(id, task);
            if st.waiters == 0 {
                // Nobody will wait for this task: the background reader completes it.
                self.background.notify_one();
            }
        }
        if out.write_buf().is_err() {
            drop(out);
            self.fail_all();
        }
        Some(id)
    }

    /// A command about to be enqueued waits for the user event `event`, not set: it
    /// and what depends on it are held back until the event is set.
    pub fn watch_user_event(&self, event: EventRef) {
        lock(&self.out).held.watch_user_event(event);
    }

    /// A user event of this node was set: wakes its waiters, and sends the held commands
    /// that nothing holds back any more, in the open task, flushed at once (with the
    /// `UserEvent`s that fail those waiting for an event set to an error), and the
    /// releases that waited for them.
    pub fn user_event_done(&self) {
        self.wake_reader();
        let mut out = lock(&self.out);
        let (released, releases) = out.held.release();
        if released.is_empty() && releases.is_empty() {
            return;
        }
        // The failed events each task names (a task may end midway, at OPEN_DATA_MAX).
        let mut named: HashSet<u64> = HashSet::new();
        for (c, failures) in released {
            let queue = c.queue();
            for (event, status) in failures {
                if named.insert(event) {
                    let cmd = Command::UserEvent {
                        queue,
                        event,
                        status,
                    };
                    out.start_frame();
                    cmd.encode_split(&[], &mut out.buf);
                    let (failed, _) = self.pushed(&mut out, &[], 0, None, None);
                    if failed {
                        drop(out);
                        return self.fail_all();
                    }
                }
            }
            let (failed, full) = self.push_released(&mut out, c);
            if failed {
                drop(out);
                return self.fail_all();
            }
            if full {
                self.flush_locked(out);
                named.clear();
                out = lock(&self.out);
            }
        }
        if !releases.is_empty() {
            out.seal();
            for id in releases {
                Request::Release { id }.encode(0, &mut out.buf);
            }
        }
        self.flush_locked(out);
    }

    /// Flushes and waits until no task of this connection is in flight. Fails once the
    /// connection is lost: nothing enqueued since can have run.
    pub fn finish(&self) -> ClInt {
        self.flush();
        // A callback that calls `clFinish` runs while its task still counts as in flight
        // (see `Finished::run`): that task is done, and not waited for.
        match self.wait_for(OnLoss::Return, |st| {
            (!st.dead && st.tasks.keys().all(|&id| callbacks_running_here(self, id))).then_some(())
        }) {
            Some(()) => cl::CL_SUCCESS,
            None => cl::CL_OUT_OF_RESOURCES,
        }
    }

    /// Waits until `event` has completed or failed, and returns its final status
    /// (`CL_COMPLETE` or an error). A lost connection does not end the wait by itself:
    /// it fails every event it carried before anyone can see it lost ([`Node::fail_all`]),
    /// and a user event, or a command held back by one, stays pending until the
    /// application sets it, as natively.
    pub fn wait_event(&self, event: &EventRef) -> ClInt {
        self.wait_for(OnLoss::Wait, |_| {
            let status = event.status();
            (status <= cl::CL_COMPLETE).then_some(status)
        })
        .expect("a wait that goes on after the loss ends only with its event")
    }

    /// Registers a context's error callback, called if the connection is lost.
    pub fn add_notifier(&self, notifier: ContextNotifier) {
        lock(&self.notifiers).push(notifier);
    }

    /// The context is gone: its callback is never called.
    pub fn remove_notifier(&self, context: u64) {
        lock(&self.notifiers).retain(|n| n.context != context);
    }

    /// The connection is gone: the contexts' error callbacks are called (once), every
    /// pending event fails, exactly once, and every waiter wakes up.
    ///
    /// The error callbacks run first, before anything of the loss can be seen: a call
    /// that fails for the loss returns after them. The events of everything the
    /// connection carried (commands held back, the open task, the tasks in flight) are
    /// then made final in the same hold of the locks that marks the connection lost,
    /// before their callbacks run: a thread that sees the connection lost (`finish`
    /// fails then) sees them failed, and a callback that waits for another of them does
    /// not wait for this thread.
    fn fail_all(&self) {
        self.notify_loss();
        let (failed, carried) = {
            let mut out = lock(&self.out);
            let mut held = out.held.drop_all();
            let mut open = out.abandon_open();
            let mut st = lock(&self.state);
            st.dead = true;
            let mut tasks: Vec<InFlight> = st.tasks.drain().map(|(_, t)| t).collect();
            let mut events: Vec<EventRef> =
                held.iter_mut().filter_map(|c| c.event_ref.take()).collect();
            events.append(&mut open.events);
            for t in &mut tasks {
                events.append(&mut t.events);
            }
            // What the commands hold besides (memory to read into, whose release may
            // run the application's destructor callbacks) goes after the locks too.
            (Failed::settle(events), (held, open, tasks))
        };
        self.wake_reader();
        failed.finish();
        drop(carried);
        self.background.notify_one();
    }

    /// Calls the contexts' error callbacks (OpenCL reports errors that occur at run time
    /// in a context to its callback) on the first thread that notices the loss; any
    /// other thread that does waits until they have returned, unless it runs in one of
    /// them (a call it makes may notice the loss as well).
    fn notify_loss(&self) {
        let me = self as *const Node as usize;
        let first = {
            let mut st = lock(&self.state);
            if st.loss_noticed {
                if !NOTIFYING.with(|n| n.borrow().contains(&me)) {
                    while !st.loss_notified {
                        st = self.cond.wait(st).unwrap_or_else(|p| p.into_inner());
                    }
                }
                false
            } else {
                st.loss_noticed = true;
                true
            }
        };
        if !first {
            return;
        }
        let notifiers = std::mem::take(&mut *lock(&self.notifiers));
        let message = CString::new(format!(
            "netaccel: the connection to node {} was lost; every command of this \
             context fails from now on",
            self.addr
        ))
        .unwrap_or_default();
        NOTIFYING.with(|n| n.borrow_mut().push(me));
        for n in notifiers {
            // SAFETY: the application gave this callback and user data for the
            // context, which is still alive (its release removes the entry).
            unsafe {
                (n.notify)(
                    message.as_ptr(),
                    std::ptr::null(),
                    0,
                    n.user_data as *mut c_void,
                )
            };
        }
        NOTIFYING.with(|n| n.borrow_mut().pop());
        lock(&self.state).loss_notified = true;
        self.cond.notify_all();
    }
}

/// A non-blocking eventfd: a counter other threads set to wake a poller.
fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; on success we own the new descriptor.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Resets an eventfd set by [`Node::wake_reader`].
fn drain(wake: &OwnedFd) {
    let mut buf = [0u8; 8];
    // SAFETY: an 8-byte read into `buf`; non-blocking, so an unset counter returns EAGAIN.
    unsafe { libc::read(wake.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
}

impl Out {
    /// The connection is lost: the open task is never sent. Returns it, for its events
    /// to be failed.
    fn abandon_open(&mut self) -> InFlight {
        self.buf.clear();
        self.frame_start = None;
        self.cmd_count = 0;
        self.open_cmds = 0;
        self.open_data = 0;
        std::mem::take(&mut self.open)
    }

    /// Opens an `Enqueue` frame for the next command if none is open.
    fn start_frame(&mut self) {
        if self.frame_start.is_none() {
            // Header and count are filled in by `seal`; commands go straight after them.
            let start = self.buf.len();
            self.buf.resize(start + proto::HEADER_LEN + 4, 0);
            self.frame_start = Some(start);
        }
    }

    /// Turns the encoded commands into one `Enqueue` frame in the output buffer.
    fn seal(&mut self) {
        self.seal_with(0);
    }

    /// [`Out::seal`] for a frame whose last `extra` bytes are not in the buffer but
    /// written right after it ([`Out::write_buf_and`]).
    fn seal_with(&mut self, extra: usize) {
        let Some(start) = self.frame_start.take() else {
            return;
        };
        let body_len = self.buf.len() - start - proto::HEADER_LEN + extra;
        let mut head = Vec::with_capacity(proto::HEADER_LEN);
        proto::encode_header(&mut head, proto::kind::ENQUEUE, 0, body_len);
        self.buf[start..start + proto::HEADER_LEN].copy_from_slice(&head);
        self.buf[start + proto::HEADER_LEN..start + proto::HEADER_LEN + 4]
            .copy_from_slice(&self.cmd_count.to_le_bytes());
        self.cmd_count = 0;
    }

    fn write_buf(&mut self) -> io::Result<()> {
        self.write_buf_and(&[])
    }

    /// Writes the output buffer followed by `tail`.
    fn write_buf_and(&mut self, tail: &[u8]) -> io::Result<()> {
        let result = crate::send::send_all(self.stream.as_raw_fd(), &[&self.buf, tail]);
        self.buf.clear();
        if self.buf.capacity() > OUT_BYTES_MAX * 2 {
            self.buf.shrink_to(OUT_BYTES_MAX);
        }
        result
    }
}

/// Says `Hello` on a new connection and returns it (a writing and a reading handle) with
/// the reply's payload.
/// The tenant and token it carries come from [`ocl_remote::TENANT_ENV`] and
/// [`ocl_remote::TENANT_TOKEN_ENV`] (empty when unset).
fn greet(stream: Stream, host_id: &[u8]) -> io::Result<(Stream, Stream, Vec<u8>)> {
    stream.set_nodelay()?;
    stream.set_read_timeout(Some(HELLO_TIMEOUT))?;
    let mut reader = stream.try_clone()?;
    let tenant = std::env::var(ocl_remote::TENANT_ENV).unwrap_or_default();
    let token = std::env::var(ocl_remote::TENANT_TOKEN_ENV).unwrap_or_default();
    let mut hello = Vec::new();
    Request::Hello {
        version: proto::PROTOCOL_VERSION,
        host_id,
        tenant: tenant.as_bytes(),
        token: token.as_bytes(),
    }
    .encode(1, &mut hello);
    crate::send::send_all(stream.as_raw_fd(), &[&hello])?;
    let (header, body) = read_frame(&mut reader)?;
    let invalid = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
    let Ok(Response::Reply { status, payload }) = Response::decode(header.kind, &body) else {
        return Err(invalid("bad Hello reply"));
    };
    if status == ocl_remote::service::gate::REFUSED && !payload.is_empty() {
        // The node's reason (its gate's sentence; never the token).
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refused: {}", String::from_utf8_lossy(payload)),
        ));
    }
    if status != cl::CL_SUCCESS {
        return Err(invalid(&format!(
            "node refused the connection (OpenCL error {status})"
        )));
    }
    Ok((stream, reader, payload.to_vec()))
}

/// Reads one frame's header (its body is the caller's to read).
fn read_header(reader: &mut Stream) -> io::Result<proto::Header> {
    let mut head = [0u8; proto::HEADER_LEN];
    reader.read_exact(&mut head)?;
    match proto::decode_header(&head, FRAME_BODY_MAX) {
        Ok(Decoded::Complete(h, _)) => Ok(h),
        Ok(Decoded::Partial) => unreachable!("a whole header was read"),
        Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
    }
}

fn read_frame(reader: &mut Stream) -> io::Result<(proto::Header, Vec<u8>)> {
    let header = read_header(reader)?;
    let mut body = vec![0u8; header.body_len as usize];
    reader.read_exact(&mut body)?;
    Ok((header, body))
}

mod completions;

use completions::{background_reader, callbacks_running_here, pump_one, spin_from_env, NOTIFYING};

#[cfg(test)]
mod tests;
