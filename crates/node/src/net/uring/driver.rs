//! One network thread's ring: submissions, completions, the provided-buffer ring and
//! the state of each connection and listener the ring serves.

use std::alloc::Layout;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::task::{Context, Poll, Waker};

use bytes::BufMut;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use slab::Slab;

use crate::net::sys;

/// Submission queue entries. A turn that queues more submits early.
const SQ_ENTRIES: u32 = 1024;
/// Completion queue entries: multishot operations post many completions per
/// submission, so the completion queue is larger (the kernel keeps overflowing
/// completions aside rather than drop them, but that is slow).
const CQ_ENTRIES: u32 = 8192;
/// Provided receive buffers per network thread and their size: 2,048 x 8 KiB, 16 MiB
/// per network thread, allocated once (its pages mapped as the ring first uses them).
/// A buffer is taken by the kernel only when bytes arrive and given back as soon as
/// the connection has copied them out; what a stalled connection holds is bounded by
/// [`UNREAD_MAX`] and [`UNREAD_BUFS_BUSY`]. 8 KiB rather than 4 KiB: a 4 KiB call and
/// its header arrived in two buffers, two completions to reap and two copies out, and
/// the RAC 4 KiB echo took 0.54 µs longer than with one buffer (`netaccel-bench pair`
/// of the two builds, interleaved; 2.72 against 1.79 µs over the C TCP echo, issue 28).
const BUF_COUNT: u16 = 2048;
const BUF_SIZE: usize = 8 * 1024;
/// The buffer group of the ring's provided buffers.
const BUF_GROUP: u16 = 0;
/// Received bytes a connection may hold unread before its receive is stopped (it is
/// re-armed once the connection has read them): one connection that does not read
/// (a pipelining client whose calls wait for a slot) cannot take the whole buffer ring.
const UNREAD_MAX: usize = 64 * 1024;
/// Received buffers a connection that is not waiting for input (busy with a call, or
/// stuck writing to a client that does not read) may hold before its receive is
/// stopped: the kernel keeps the rest in the socket, as on epoll.
const UNREAD_BUFS_BUSY: usize = 2;
/// Accepted connections waiting for the accept loop, per listener; beyond, the
/// multishot accept is not re-armed until the loop catches up (the kernel's backlog
/// holds the rest).
const ACCEPTED_MAX: usize = 1024;

/// What a completion is for: the operation in the top byte of its user data, the
/// connection's or listener's key below.
const OP_ACCEPT: u64 = 1;
const OP_RECV: u64 = 2;
const OP_SEND: u64 = 3;
const OP_CANCEL: u64 = 4;
/// The poll of the loop's epoll descriptor (see [`sleep`]).
const OP_EPOLL: u64 = 5;

fn token(op: u64, key: usize) -> u64 {
    (op << 56) | key as u64
}

thread_local! {
    static DRIVER: RefCell<Option<Driver>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's driver. Panics when the thread has none: only the
/// network threads started with `network = "io_uring"` create [`crate::net::uring`] objects.
pub(super) fn with<R>(f: impl FnOnce(&mut Driver) -> R) -> R {
    DRIVER.with(|d| f(d.borrow_mut().as_mut().expect("io_uring driver installed")))
}

/// As [`with`], but does nothing once the driver is gone (thread exit).
pub(super) fn try_with(f: impl FnOnce(&mut Driver)) {
    let _ = DRIVER.try_with(|d| {
        if let Ok(mut d) = d.try_borrow_mut() {
            if let Some(d) = d.as_mut() {
                f(d)
            }
        }
    });
}

/// Checks that the kernel gives this process a ring with what the path needs
/// (multishot receive into a provided-buffer ring), so that a node configured for
/// io_uring can fall back at start, saying why, instead of failing per thread.
pub(crate) fn probe() -> io::Result<()> {
    Driver::new().map(drop)
}

/// Creates this thread's driver.
pub(crate) fn install() -> io::Result<()> {
    let driver = Driver::new()?;
    DRIVER.with(|d| *d.borrow_mut() = Some(driver));
    Ok(())
}

/// The network thread's loop sleeps here ([`crate::net::evloop::Sleeper`]): the
/// turn's answers go to the kernel ([`Driver::send_unsent`]), then one
/// `io_uring_enter` submits the queued operations and, when `block`, no task is woken
/// and no completion is waiting, waits for one. The loop's epoll
/// descriptor is polled on the ring, so that a wake-up from another thread (a slot's
/// answer, a timer) also ends the wait. Deferred completions run in that call; then
/// the completions are taken, waking the tasks they are for. Returns whether the epoll
/// descriptor is readable.
///
/// Before, the loop slept in `epoll_wait` on an eventfd the kernel signalled for
/// completions, and the ring was entered once more to take them: three system calls
/// per request at one request per wake-up, where this makes two (the wait, and the
/// answer's `send`), and the kernel's eventfd signal and epoll wake-up are gone
/// (issue 28).
pub(crate) fn sleep(epfd: RawFd, block: bool) -> bool {
    with(|d| d.sleep(epfd, block))
}

/// Whether the running kernel's release is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: uname fills the zeroed struct it is given.
    let release = unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return false;
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    };
    release_at_least(&release, major, minor)
}

/// Whether a kernel release string (`6.18.44-…`) is at least `major.minor`.
fn release_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (a, b) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// The provided buffers and the ring through which they are handed to the kernel.
struct BufRing {
    /// `BUF_COUNT` entries, page aligned, shared with the kernel.
    entries: *mut types::BufRingEntry,
    entries_layout: Layout,
    /// The buffers themselves, `BUF_SIZE` each.
    memory: Box<[u8]>,
    tail: u16,
    /// Buffers held by connections (received, not yet read).
    taken: usize,
}

impl BufRing {
    fn new(ring: &IoUring) -> io::Result<BufRing> {
        let entries_layout = Layout::from_size_align(
            BUF_COUNT as usize * std::mem::size_of::<types::BufRingEntry>(),
            4096,
        )
        .expect("buffer ring layout");
        // SAFETY: a non-zero size; zeroed so that the tail field starts at 0.
        let entries: *mut types::BufRingEntry =
            unsafe { std::alloc::alloc_zeroed(entries_layout) }.cast();
        if entries.is_null() {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        let mut bufs = BufRing {
            entries,
            entries_layout,
            memory: vec![0u8; BUF_COUNT as usize * BUF_SIZE].into_boxed_slice(),
            tail: 0,
            taken: BUF_COUNT as usize,
        };
        // SAFETY: the entries stay allocated (and the buffers with them) until after
        // the ring is dropped: `Driver` declares `ring` before `bufs`.
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                entries as u64,
                BUF_COUNT,
                BUF_GROUP,
                0,
            )?;
        }
        for bid in 0..BUF_COUNT {
            bufs.give(bid);
        }
        Ok(bufs)
    }

    /// Hands buffer `bid` back to the kernel.
    fn give(&mut self, bid: u16) {
        let at = (self.tail & (BUF_COUNT - 1)) as usize;
        // SAFETY: `at` < BUF_COUNT; the kernel reads an entry only below the tail,
        // which is published after the entry is written.
        unsafe {
            let entry = &mut *self.entries.add(at);
            entry.set_addr(self.memory.as_ptr().add(bid as usize * BUF_SIZE) as u64);
            entry.set_len(BUF_SIZE as u32);
            entry.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
        self.taken -= 1;
        // SAFETY: the tail field of the first entry, shared with the kernel.
        unsafe {
            let tail = types::BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    fn bytes(&self, bid: u16, from: usize, to: usize) -> &[u8] {
        &self.memory[bid as usize * BUF_SIZE..][from..to]
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.entries.cast(), self.entries_layout) };
    }
}

/// One connection's state on the ring.
#[derive(Default)]
pub(super) struct Conn {
    fd: RawFd,
    /// Received buffers not yet read: buffer id and length; the first is read from
    /// `first_read` on.
    unread: VecDeque<(u16, usize)>,
    first_read: usize,
    unread_bytes: usize,
    eof: bool,
    error: Option<i32>,
    recv_armed: bool,
    recv_cancelling: bool,
    /// Waiting for a provided buffer (the ring ran dry); re-armed when one comes back.
    starved: bool,
    reader: Option<Waker>,
    /// The reader was woken and has not read since: it is about to.
    reader_woken: bool,
    /// The send in progress: its bytes stay here until the kernel is done with them.
    send: Vec<u8>,
    sent: usize,
    sending: bool,
    send_error: Option<i32>,
    writer: Option<Waker>,
    /// The stream was dropped: the entry goes once no operation refers to it.
    closed: bool,
    /// Tells this connection from a later one under the same key.
    generation: u64,
}

/// One listener's state on the ring.
pub(super) struct ListenerState {
    /// Kept open while the accept may still complete.
    listener: std::net::TcpListener,
    accepted: VecDeque<RawFd>,
    error: Option<i32>,
    armed: bool,
    waker: Option<Waker>,
    closed: bool,
}

/// A network thread's ring and what it serves.
pub(super) struct Driver {
    /// Declared before `bufs`: dropped (and the buffers unregistered) first.
    ring: IoUring,
    bufs: BufRing,
    conns: Slab<Conn>,
    listeners: Slab<ListenerState>,
    /// Connections whose receive ended for want of a buffer.
    starved: Vec<usize>,
    /// Reused between turns.
    completions: Vec<cqueue::Entry>,
    /// Connections opened so far (generations).
    opened: u64,
    /// Connections whose send was started and not yet given to the kernel: at the
    /// next sleep, one alone is sent at once, more go to the ring together.
    unsent: Vec<usize>,
    /// A poll of the loop's epoll descriptor is on the ring (see [`sleep`]).
    epoll_armed: bool,
    /// That poll completed since the last sleep: the descriptor is readable.
    epoll_ready: bool,
}

impl Driver {
    fn new() -> io::Result<Driver> {
        // Completions run as deferred task work, in batches, when this thread enters
        // the ring (DEFER_TASKRUN), instead of interrupting whatever the thread runs
        // at each completion; TASKRUN_FLAG says in the ring when some are pending, so
        // a sleep enters only then or with submissions. The thread sleeps in the ring
        // ([`sleep`]), where deferred work runs as it is queued (tested here on 6.18:
        // `tests/uring.rs` and the benchmarks). DEFER_TASKRUN came in
        // 6.1, and its first releases had fixes around it, so kernels before 6.2 get
        // the ring without it (and without the flag), as do kernels that refuse it.
        let build = |deferred: bool| {
            let mut builder = IoUring::builder();
            builder.setup_cqsize(CQ_ENTRIES).setup_single_issuer();
            if deferred {
                builder.setup_defer_taskrun().setup_taskrun_flag();
            }
            builder.build(SQ_ENTRIES)
        };
        let ring = if kernel_at_least(6, 2) {
            build(true).or_else(|_| build(false))?
        } else {
            build(false)?
        };
        let bufs = BufRing::new(&ring)?;
        Ok(Driver {
            ring,
            bufs,
            conns: Slab::new(),
            listeners: Slab::new(),
            starved: Vec::new(),
            completions: Vec::new(),
            opened: 0,
            unsent: Vec::new(),
            epoll_armed: false,
            epoll_ready: false,
        })
    }

    /// Queues one operation; submits what is queued first when the queue is full.
    fn push(&mut self, entry: squeue::Entry) {
        loop {
            // SAFETY: every buffer an entry points to lives in the driver (a
            // connection's send buffer, the provided buffers) until its completion.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return;
            }
            if let Err(e) = self.ring.submit() {
                tracing::warn!(error = %e, "io_uring submit failed");
                // The completions must be taken before the kernel accepts more.
                self.reap();
            }
        }
    }

    /// See [`sleep`]. Submits and waits only when there is something to submit or
    /// wait for: deferred completions (the ring's flag) count, as they are run only by
    /// an enter that asks for completions. One pass: the woken tasks run before the
    /// next sleep, and more completions are taken then. (A turn that went on while
    /// completions kept arriving held back the tasks it had woken and entered the ring
    /// again and again: a third of the network thread's CPU at 64 busy connections,
    /// issue 28.)
    fn sleep(&mut self, epfd: RawFd, block: bool) -> bool {
        self.send_unsent();
        // A send done at once wakes the task waiting for it: that task runs first.
        let block = block && !crate::net::evloop::has_woken();
        if !self.epoll_armed {
            self.epoll_armed = true;
            self.push(
                opcode::PollAdd::new(types::Fd(epfd), libc::POLLIN as u32)
                    .build()
                    .user_data(token(OP_EPOLL, 0)),
            );
        }
        let want = usize::from(block && self.ring.completion().is_empty());
        if want > 0 || !self.ring.submission().is_empty() || self.ring.submission().taskrun() {
            if let Err(e) = self.ring.submit_and_wait(want) {
                if e.raw_os_error() != Some(libc::EBUSY) && e.raw_os_error() != Some(libc::EINTR) {
                    tracing::warn!(error = %e, "io_uring submit failed");
                }
            }
        }
        self.reap();
        std::mem::take(&mut self.epoll_ready)
    }

    /// Takes the completions there are; returns how many.
    fn reap(&mut self) -> usize {
        let mut completions = std::mem::take(&mut self.completions);
        completions.extend(self.ring.completion());
        let n = completions.len();
        for cqe in completions.drain(..) {
            let key = (cqe.user_data() & ((1 << 56) - 1)) as usize;
            match cqe.user_data() >> 56 {
                OP_ACCEPT => self.accepted(key, &cqe),
                OP_RECV => self.received(key, &cqe),
                OP_SEND => self.sent(key, cqe.result()),
                OP_EPOLL => {
                    // Readable, or the poll failed: either way the loop looks at its
                    // epoll descriptor without waiting, and the next sleep polls again.
                    self.epoll_armed = false;
                    self.epoll_ready = true;
                }
                _ => {}
            }
        }
        self.completions = completions;
        self.rearm_starved();
        n
    }

    fn accepted(&mut self, key: usize, cqe: &cqueue::Entry) {
        let Some(l) = self.listeners.get_mut(key) else {
            if cqe.result() >= 0 {
                // SAFETY: a descriptor the kernel just gave us and nobody else holds.
                unsafe { libc::close(cqe.result()) };
            }
            return;
        };
        if !cqueue::more(cqe.flags()) {
            l.armed = false;
        }
        match cqe.result() {
            fd if fd >= 0 && !l.closed => l.accepted.push_back(fd),
            fd if fd >= 0 => {
                // SAFETY: as above.
                unsafe { libc::close(fd) };
            }
            e if e == -libc::ECANCELED => {}
            e => l.error = Some(-e),
        }
        if l.armed && l.accepted.len() >= ACCEPTED_MAX {
            // The loop is behind: stop taking connections until it catches up.
            self.push(
                opcode::AsyncCancel::new(token(OP_ACCEPT, key))
                    .build()
                    .user_data(token(OP_CANCEL, key)),
            );
        }
        let l = &mut self.listeners[key];
        if l.closed && !l.armed {
            self.listeners.remove(key);
            return;
        }
        if let Some(w) = l.waker.take() {
            w.wake();
        }
    }

    fn received(&mut self, key: usize, cqe: &cqueue::Entry) {
        let conn = &mut self.conns[key];
        if !cqueue::more(cqe.flags()) {
            conn.recv_armed = false;
            conn.recv_cancelling = false;
        }
        if let Some(bid) = cqueue::buffer_select(cqe.flags()) {
            let n = cqe.result().max(0) as usize;
            self.bufs.taken += 1;
            if conn.closed || n == 0 {
                self.bufs.give(bid);
            } else {
                conn.unread.push_back((bid, n));
                conn.unread_bytes += n;
            }
        }
        let conn = &mut self.conns[key];
        match cqe.result() {
            0 => conn.eof = true,
            n if n > 0 => {}
            e if e == -libc::ENOBUFS => {
                if !conn.closed && !conn.starved {
                    conn.starved = true;
                    self.starved.push(key);
                }
            }
            e if e == -libc::ECANCELED => {}
            e => conn.error = Some(-e),
        }
        let conn = &mut self.conns[key];
        let held = conn.unread_bytes >= UNREAD_MAX
            || (conn.reader.is_none()
                && !conn.reader_woken
                && conn.unread.len() >= UNREAD_BUFS_BUSY);
        if conn.recv_armed && !conn.recv_cancelling && held {
            conn.recv_cancelling = true;
            self.push(
                opcode::AsyncCancel::new(token(OP_RECV, key))
                    .build()
                    .user_data(token(OP_CANCEL, key)),
            );
        }
        let conn = &mut self.conns[key];
        if let Some(w) = conn.reader.take() {
            conn.reader_woken = true;
            w.wake();
        }
        self.forget_if_done(key);
    }

    fn sent(&mut self, key: usize, result: i32) {
        let conn = &mut self.conns[key];
        if result < 0 {
            conn.send_error = Some(-result);
        } else {
            conn.sent += result as usize;
            if conn.sent < conn.send.len() {
                // A short send: the rest goes in the next submission (also when the
                // stream is gone: these are its last bytes).
                self.submit_send(key);
                return;
            }
        }
        self.send_done(key);
    }

    /// The sends started since the last sleep go to the kernel. One alone (a
    /// connection answering one request per wake-up) is sent at once with `send`,
    /// not through the ring: no completion to post and take for it, and the next
    /// `io_uring_enter` only waits (issue 28: 3,475 → 3,225 user-space instructions
    /// per `/health` at one request per wake-up, bench/http/instructions.sh). More
    /// than one (a busy turn) go to the ring together, one `io_uring_enter` for all.
    /// What a socket does not take at once goes to the ring.
    fn send_unsent(&mut self) {
        match self.unsent.len() {
            0 => {}
            1 => {
                let key = self.unsent.pop().expect("one unsent");
                self.send_now(key);
            }
            _ => {
                let mut unsent = std::mem::take(&mut self.unsent);
                for key in unsent.drain(..) {
                    self.submit_send(key);
                }
                self.unsent = unsent;
            }
        }
    }

    /// Sends what connection `key` has to send with one non-blocking `send`; the rest,
    /// if the socket takes less, through the ring.
    fn send_now(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        debug_assert!(conn.sending, "a send was started");
        let rest = &conn.send[conn.sent..];
        // The descriptor is open: its stream keeps it so while the driver knows it.
        match sys::send(conn.fd, rest, libc::MSG_DONTWAIT) {
            Ok(n) => {
                conn.sent += n;
                if conn.sent == conn.send.len() {
                    self.send_done(key);
                    return;
                }
            }
            Err(e) => {
                let e = e.raw_os_error().unwrap_or(libc::EIO);
                if e != libc::EAGAIN && e != libc::EINTR {
                    conn.send_error = Some(e);
                    self.send_done(key);
                    return;
                }
            }
        }
        self.submit_send(key);
    }

    /// Connection `key`'s send buffer is filled: it goes to the kernel at the next
    /// sleep ([`Driver::send_unsent`]).
    fn queue_send(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        conn.sent = 0;
        conn.sending = true;
        self.unsent.push(key);
    }

    /// Connection `key`'s send is over (all of it sent, or failed).
    fn send_done(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        conn.sending = false;
        // Not kept while the connection has nothing to send (see crate::net::bufpool).
        crate::net::bufpool::give(&mut conn.send);
        if let Some(w) = conn.writer.take() {
            w.wake();
        }
        self.forget_if_done(key);
    }

    /// Re-arms the receives that ran out of buffers once some are back.
    fn rearm_starved(&mut self) {
        if self.starved.is_empty() || self.bufs.taken > BUF_COUNT as usize * 3 / 4 {
            return;
        }
        for key in std::mem::take(&mut self.starved) {
            if let Some(conn) = self.conns.get_mut(key) {
                conn.starved = false;
                if !conn.closed {
                    self.arm_recv(key);
                }
            }
        }
    }

    fn arm_recv(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        if conn.recv_armed || conn.eof || conn.error.is_some() || conn.starved {
            return;
        }
        conn.recv_armed = true;
        let fd = conn.fd;
        self.push(
            opcode::RecvMulti::new(types::Fd(fd), BUF_GROUP)
                .build()
                .user_data(token(OP_RECV, key)),
        );
    }

    fn submit_send(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        conn.sending = true;
        let rest = &conn.send[conn.sent..];
        // MSG_WAITALL: the kernel sends all of it (waiting for room as it needs)
        // before completing, instead of completing short.
        let entry = opcode::Send::new(types::Fd(conn.fd), rest.as_ptr(), rest.len() as u32)
            .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
            .build()
            .user_data(token(OP_SEND, key));
        self.push(entry);
    }

    /// Drops a closed connection's entry once no operation can complete on it.
    fn forget_if_done(&mut self, key: usize) {
        let conn = &self.conns[key];
        if conn.closed && !conn.recv_armed && !conn.sending {
            let mut conn = self.conns.remove(key);
            crate::net::bufpool::give(&mut conn.send);
        }
    }

    // ---- connections ----

    /// Serves descriptor `fd` (owned by the caller's stream) on the ring.
    pub(super) fn open(&mut self, fd: RawFd) -> usize {
        self.opened += 1;
        let key = self.conns.insert(Conn {
            fd,
            generation: self.opened,
            ..Conn::default()
        });
        // Armed at once: the first request is usually already on its way.
        self.arm_recv(key);
        key
    }

    /// The stream was dropped: its descriptor is about to be closed. An armed receive
    /// is cancelled (it would hold the socket open); a send in progress is the
    /// connection's last answer and is left to finish (the caller bounds it with
    /// [`Driver::cancel_send`]). Returns whether a send is in progress, and the
    /// connection's generation to name it by.
    pub(super) fn close(&mut self, key: usize) -> Option<u64> {
        // Operations still queued name the descriptor by number, which the kernel
        // resolves when they are submitted: once it is closed, the number may already
        // be a new connection's. So they go to the kernel before it is closed.
        self.send_unsent();
        if !self.ring.submission().is_empty() {
            let _ = self.ring.submit();
        }
        let conn = &mut self.conns[key];
        conn.closed = true;
        conn.reader = None;
        conn.writer = None;
        let unread: Vec<(u16, usize)> = conn.unread.drain(..).collect();
        conn.unread_bytes = 0;
        let (recv, send) = (conn.recv_armed, conn.sending);
        for (bid, _) in unread {
            self.bufs.give(bid);
        }
        if recv {
            self.push(
                opcode::AsyncCancel::new(token(OP_RECV, key))
                    .build()
                    .user_data(token(OP_CANCEL, key)),
            );
        }
        let generation = self.conns[key].generation;
        self.forget_if_done(key);
        send.then_some(generation)
    }

    /// Cancels the send of closed connection `key` if it is still in progress and
    /// the key still names the same connection (`generation`).
    pub(super) fn cancel_send(&mut self, key: usize, generation: u64) {
        match self.conns.get(key) {
            Some(conn) if conn.generation == generation && conn.closed && conn.sending => {}
            _ => return,
        }
        self.push(
            opcode::AsyncCancel::new(token(OP_SEND, key))
                .build()
                .user_data(token(OP_CANCEL, key)),
        );
    }

    /// Copies received bytes into `buf` (as many as it takes); `Pending` when there
    /// are none yet, `Ok(0)` at the end of input.
    pub(super) fn poll_read(
        &mut self,
        key: usize,
        buf: &mut impl BufMut,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        let mut n = 0;
        let conn = &mut self.conns[key];
        conn.reader_woken = false;
        while buf.remaining_mut() > 0 {
            let Some(&(bid, len)) = conn.unread.front() else {
                break;
            };
            let take = buf.remaining_mut().min(len - conn.first_read);
            buf.put_slice(
                self.bufs
                    .bytes(bid, conn.first_read, conn.first_read + take),
            );
            conn.first_read += take;
            conn.unread_bytes -= take;
            n += take;
            if conn.first_read == len {
                conn.unread.pop_front();
                conn.first_read = 0;
                self.bufs.give(bid);
            }
        }
        if n > 0 {
            return Poll::Ready(Ok(n));
        }
        self.poll_input(key, cx).map_ok(|()| 0)
    }

    /// Ready when bytes, the end of input or an error are waiting.
    /// Whether connection `key`'s peer closed its side and nothing it sent is left
    /// unread ([`crate::net::netio::Transport::hung_up`]).
    pub(super) fn at_eof(&self, key: usize) -> bool {
        let conn = &self.conns[key];
        conn.eof && conn.unread.is_empty()
    }

    pub(super) fn poll_input(&mut self, key: usize, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let conn = &mut self.conns[key];
        if !conn.unread.is_empty() || conn.eof {
            return Poll::Ready(Ok(()));
        }
        if let Some(e) = conn.error {
            return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
        }
        conn.reader = Some(cx.waker().clone());
        self.arm_recv(key);
        Poll::Pending
    }

    /// Queues `data` to be sent (copied: the caller's buffer need not outlive the
    /// send) and returns at once; it goes to the kernel with the turn's other sends
    /// when the thread would sleep ([`Driver::send_unsent`]). One send at a time per
    /// connection: wait for [`Driver::poll_sent`]
    /// first.
    pub(super) fn start_send(&mut self, key: usize, data: &[u8]) -> io::Result<()> {
        let conn = &mut self.conns[key];
        may_send(conn)?;
        if conn.send.capacity() == 0 {
            conn.send = crate::net::bufpool::take(data.len());
        }
        conn.send.clear();
        conn.send.extend_from_slice(data);
        self.queue_send(key);
        Ok(())
    }

    /// [`Driver::start_send`] of all of `buf`, taken rather than copied: `buf` gets the
    /// connection's previous send buffer back, empty (without room: a finished send
    /// gives its buffer back to the pool).
    pub(super) fn start_send_of(&mut self, key: usize, buf: &mut Vec<u8>) -> io::Result<()> {
        let conn = &mut self.conns[key];
        may_send(conn)?;
        std::mem::swap(&mut conn.send, buf);
        buf.clear();
        self.queue_send(key);
        Ok(())
    }

    /// Ready when the queued send is done (all of it, or failed).
    pub(super) fn poll_sent(&mut self, key: usize, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let conn = &mut self.conns[key];
        if let Some(e) = conn.send_error {
            return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
        }
        if !conn.sending {
            return Poll::Ready(Ok(()));
        }
        conn.writer = Some(cx.waker().clone());
        Poll::Pending
    }

    // ---- listeners ----

    pub(super) fn listen(&mut self, listener: std::net::TcpListener) -> usize {
        self.listeners.insert(ListenerState {
            listener,
            accepted: VecDeque::new(),
            error: None,
            armed: false,
            waker: None,
            closed: false,
        })
    }

    /// The next accepted descriptor.
    pub(super) fn poll_accept(
        &mut self,
        key: usize,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<RawFd>> {
        let l = &mut self.listeners[key];
        if let Some(fd) = l.accepted.pop_front() {
            return Poll::Ready(Ok(fd));
        }
        if let Some(e) = l.error.take() {
            return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
        }
        l.waker = Some(cx.waker().clone());
        if !l.armed {
            l.armed = true;
            let fd = l.listener.as_raw_fd();
            self.push(
                opcode::AcceptMulti::new(types::Fd(fd))
                    .flags(libc::SOCK_CLOEXEC)
                    .build()
                    .user_data(token(OP_ACCEPT, key)),
            );
        }
        Poll::Pending
    }

    /// Stops accepting: the listening socket closes once the kernel has cancelled the
    /// accept (the operation holds it open), and connections accepted but not yet
    /// taken are closed.
    pub(super) fn unlisten(&mut self, key: usize) {
        let l = &mut self.listeners[key];
        l.closed = true;
        l.waker = None;
        for fd in l.accepted.drain(..) {
            // SAFETY: accepted descriptors nobody else holds.
            unsafe { libc::close(fd) };
        }
        if l.armed {
            self.push(
                opcode::AsyncCancel::new(token(OP_ACCEPT, key))
                    .build()
                    .user_data(token(OP_CANCEL, key)),
            );
            // Submitted now, not at the end of the turn: the socket must stop
            // taking connections as soon as the node stops accepting.
            let _ = self.ring.submit();
        } else {
            self.listeners.remove(key);
        }
    }
}

/// Whether `conn` may start a send: its last one failed (that error), or is still on
/// its way (one send at a time per connection).
fn may_send(conn: &Conn) -> io::Result<()> {
    if let Some(e) = conn.send_error {
        return Err(io::Error::from_raw_os_error(e));
    }
    if conn.sending {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the previous response is still being sent",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernel_releases_compare_by_major_then_minor() {
        use super::release_at_least as at_least;
        assert!(at_least("6.18.44-fc-v657", 6, 2));
        assert!(at_least("6.2.0", 6, 2));
        assert!(!at_least("6.1.94-generic", 6, 2));
        assert!(!at_least("5.19.0", 6, 2));
        assert!(at_least("7.0", 6, 2));
        assert!(!at_least("garbage", 6, 2));
    }
}
