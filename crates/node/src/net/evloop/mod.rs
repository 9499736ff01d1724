//! The node's own event loop (`network = "epoll"`, the default; issue 28).
//!
//! A network thread that serves plain HTTP and RAC runs this loop instead of a tokio
//! runtime: one epoll instance (edge-triggered), a slab of tasks, a queue of the tasks
//! woken, and wakers that put a task's index on that queue. Per request that is an
//! `epoll_wait` turn, a look-up of the connection's readiness and a poll of its task:
//! about 100 user-space instructions where tokio's current-thread runtime spends
//! about 1,400 on the same echo (its timer wheel's turn and clock reads in every park,
//! the readiness bookkeeping under a lock, the task's state machine;
//! `bench/evloop/run.sh`, docs/benchmarks.md).
//!
//! What is not on the hot path stays tokio's. Each such thread has a companion
//! thread with a current-thread runtime (`crate::server`), whose handle the loop's
//! thread enters: `tokio::spawn`, `spawn_blocking` and tokio's timers work from the
//! loop's tasks as from any thread of the node (a connection's `IoTimer` sleeps there,
//! and its firing wakes the connection's task across threads). The companion also
//! serves the TLS and gRPC listeners.
//!
//! A waker called on the loop's own thread pushes the task's index on the local
//! queue; from another thread (a slot's worker answering a call, a timer) it pushes it
//! on the loop's remote queue and, if the loop is asleep in `epoll_wait`, writes the
//! loop's eventfd. Single-threaded otherwise: no lock on the hot path.

mod stream;

pub(crate) use stream::{EvStream, Listener};

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use parking_lot::Mutex;
use slab::Slab;

use crate::net::sys;

/// Readiness bits of a registered socket.
const READ: u8 = 1;
const WRITE: u8 = 2;
/// The peer closed its end, or the socket failed (`EPOLLRDHUP`, `EPOLLHUP`, `EPOLLERR`):
/// never forgotten.
const CLOSED: u8 = 4;
/// The epoll key of the loop's eventfd (sockets' keys are slab indices).
const WAKE_KEY: u64 = u64::MAX;
/// Events taken per `epoll_wait`.
const EVENTS_MAX: usize = 256;
/// Task polls per pass over the woken tasks before the loop looks at its sockets
/// again (without blocking while tasks are still woken): a task that keeps waking
/// itself (`yield_now` between batches of buffered input) cannot keep the others'
/// input waiting. tokio's current-thread runtime looks every 61.
const POLLS_PER_PASS: usize = 128;

type BoxedTask = Pin<Box<dyn Future<Output = ()>>>;

/// A task and the waker its polls are given.
struct TaskCell {
    future: BoxedTask,
    waker: Waker,
}

/// A registered socket's readiness and the tasks waiting for it: one reader, one
/// writer and one waiting for the close (`Transport::hung_up`), as a tokio socket has.
#[derive(Default)]
struct Reg {
    ready: u8,
    reader: Option<Waker>,
    writer: Option<Waker>,
    closer: Option<Waker>,
}

/// What other threads use to wake the loop's tasks.
struct Remote {
    woken: Mutex<Vec<usize>>,
    /// Set after a push on `woken`, taken by the loop.
    pending: AtomicBool,
    /// The loop is in (or about to enter) a blocking `epoll_wait`.
    sleeping: AtomicBool,
    eventfd: OwnedFd,
}

impl Remote {
    fn wake(&self, index: usize) {
        self.woken.lock().push(index);
        self.pending.store(true, Ordering::SeqCst);
        // SeqCst on both sides: either the loop sees `pending` before it sleeps, or
        // this sees `sleeping` and the write ends the sleep.
        if self.sleeping.load(Ordering::SeqCst) {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a valid u64 to the loop's eventfd.
            unsafe { libc::write(self.eventfd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }
}

/// A task's waker: its index in the slab of the loop it belongs to.
struct TaskRef {
    index: usize,
    remote: Arc<Remote>,
}

impl Wake for TaskRef {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let here = try_with(|l| {
            let mine = Arc::ptr_eq(&l.remote, &self.remote);
            if mine {
                l.woken.borrow_mut().push_back(self.index);
            }
            mine
        });
        if here != Some(true) {
            self.remote.wake(self.index);
        }
    }
}

/// One thread's loop.
pub(crate) struct Loop {
    epfd: OwnedFd,
    regs: RefCell<Slab<Reg>>,
    tasks: RefCell<Slab<Option<Box<TaskCell>>>>,
    woken: RefCell<VecDeque<usize>>,
    remote: Arc<Remote>,
    /// Sleeps in place of `epoll_wait` when set ([`Sleeper`]).
    sleeper: Cell<Option<Sleeper>>,
}

thread_local! {
    /// The loop [`run`] is running on this thread (null outside it).
    static CURRENT: Cell<*const Loop> = const { Cell::new(std::ptr::null()) };
}

/// `f` on this thread's loop. Panics outside [`run`]: only the loop's own tasks create
/// its sockets.
fn with<R>(f: impl FnOnce(&Loop) -> R) -> R {
    try_with(f).expect("an evloop socket used outside its loop's thread")
}

/// `f` on this thread's loop, `None` outside [`run`].
fn try_with<R>(f: impl FnOnce(&Loop) -> R) -> Option<R> {
    let current = CURRENT.with(Cell::get);
    // SAFETY: set by `run` to a loop that outlives the setting, cleared before it ends.
    (!current.is_null()).then(|| f(unsafe { &*current }))
}

/// Spawns `task` on this thread's loop. Panics outside [`run`].
pub(crate) fn spawn(task: impl Future<Output = ()> + 'static) {
    with(|l| l.spawn(Box::pin(task)));
}

/// Whether this thread runs a loop (inside [`run`]).
pub(crate) fn on_loop() -> bool {
    try_with(|_| ()).is_some()
}

/// Whether a task of this thread's loop is woken (to run before the loop sleeps): a
/// [`Sleeper`] whose work before sleeping woke one must not block. `false` outside
/// [`run`].
pub(crate) fn has_woken() -> bool {
    try_with(|l| !l.woken.borrow().is_empty()).unwrap_or(false)
}

/// What a thread's loop calls instead of its `epoll_wait` whenever no task is woken:
/// `sleep(epfd, block)` sleeps, when `block` (nothing else is pending for the loop),
/// until there is work, the loop's epoll descriptor `epfd` among what it watches for
/// that; it returns whether `epfd` may have events (the loop then takes them without
/// waiting). What it does before sleeping may wake tasks (see [`has_woken`]): then it
/// does not block. The io_uring path sleeps in its ring (`crate::net::uring`): one system
/// call that submits the turn's sends and waits, where an `epoll_wait` on the ring's
/// eventfd took two more (issue 28).
pub(crate) type Sleeper = fn(epfd: RawFd, block: bool) -> bool;

/// Has this thread's loop sleep with `sleep` ([`Sleeper`]). Panics outside [`run`].
pub(crate) fn set_sleeper(sleep: Sleeper) {
    with(|l| l.sleeper.set(Some(sleep)));
}

/// Runs a loop on this thread until `main` completes; the tasks still running then
/// are dropped (their sockets closed) before it returns.
pub(crate) fn run(main: impl Future<Output = ()> + 'static) -> io::Result<()> {
    assert!(
        CURRENT.with(Cell::get).is_null(),
        "one event loop per thread"
    );
    let lp = Loop::new()?;
    CURRENT.with(|c| c.set(&lp));
    let done = Arc::new(AtomicBool::new(false));
    let finished = Arc::clone(&done);
    lp.spawn(Box::pin(async move {
        main.await;
        finished.store(true, Ordering::Relaxed);
    }));
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS_MAX];
    let result = loop {
        lp.run_woken();
        if done.load(Ordering::Relaxed) {
            break Ok(());
        }
        if let Err(e) = lp.turn(&mut events) {
            break Err(e);
        }
    };
    // Dropped while the loop is still this thread's: their sockets deregister.
    let tasks = std::mem::take(&mut *lp.tasks.borrow_mut());
    drop(tasks);
    CURRENT.with(|c| c.set(std::ptr::null()));
    result
}

impl Loop {
    fn new() -> io::Result<Loop> {
        // SAFETY: plain system calls; the descriptors are owned from here on.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epfd < 0 {
            return Err(io::Error::last_os_error());
        }
        let epfd = unsafe { OwnedFd::from_raw_fd(epfd) };
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        let eventfd = unsafe { OwnedFd::from_raw_fd(efd) };
        let lp = Loop {
            epfd,
            regs: RefCell::new(Slab::new()),
            tasks: RefCell::new(Slab::new()),
            woken: RefCell::new(VecDeque::new()),
            sleeper: Cell::new(None),
            remote: Arc::new(Remote {
                woken: Mutex::new(Vec::new()),
                pending: AtomicBool::new(false),
                sleeping: AtomicBool::new(false),
                eventfd,
            }),
        };
        lp.add(lp.remote.eventfd.as_raw_fd(), WAKE_KEY, libc::EPOLLIN)?;
        Ok(lp)
    }

    fn add(&self, fd: RawFd, key: u64, events: i32) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (events | libc::EPOLLET) as u32,
            u64: key,
        };
        // SAFETY: `ev` is valid for the call; `fd` is the caller's open descriptor.
        if unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Registers a socket for input, output and its close; returns its key. The
    /// kernel reports what is already waiting at the next turn.
    fn register(&self, fd: RawFd) -> io::Result<usize> {
        let key = self.regs.borrow_mut().insert(Reg::default());
        let events = libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP;
        if let Err(e) = self.add(fd, key as u64, events) {
            self.regs.borrow_mut().remove(key);
            return Err(e);
        }
        Ok(key)
    }

    /// Forgets a socket's registration (its descriptor is closed after: closing it
    /// leaves the epoll set).
    fn deregister(&self, key: usize) {
        let reg = self.regs.borrow_mut().try_remove(key);
        drop(reg);
    }

    fn spawn(&self, future: BoxedTask) {
        let mut tasks = self.tasks.borrow_mut();
        let entry = tasks.vacant_entry();
        let index = entry.key();
        let waker = Waker::from(Arc::new(TaskRef {
            index,
            remote: Arc::clone(&self.remote),
        }));
        entry.insert(Some(Box::new(TaskCell { future, waker })));
        drop(tasks);
        self.woken.borrow_mut().push_back(index);
    }

    /// Polls the woken tasks, and those they wake, until none is left or
    /// [`POLLS_PER_PASS`] polls were made. A stale index (a task that ended) is
    /// skipped; one woken twice is polled twice.
    fn run_woken(&self) {
        for _ in 0..POLLS_PER_PASS {
            let Some(index) = self.woken.borrow_mut().pop_front() else {
                return;
            };
            let taken = self
                .tasks
                .borrow_mut()
                .get_mut(index)
                .and_then(Option::take);
            let Some(mut cell) = taken else {
                continue;
            };
            let mut cx = Context::from_waker(&cell.waker);
            if cell.future.as_mut().poll(&mut cx).is_pending() {
                self.tasks.borrow_mut()[index] = Some(cell);
            } else {
                self.tasks.borrow_mut().remove(index);
                // Dropped with no borrow held: its sockets deregister.
                drop(cell);
            }
        }
    }

    /// One `epoll_wait` (without blocking while tasks are woken, here or by other
    /// threads) and the wake-ups of what it reports; or, with a [`Sleeper`] and no
    /// task woken, the sleeper's sleep and an `epoll_wait` only when it says so.
    fn turn(&self, events: &mut [libc::epoll_event]) -> io::Result<()> {
        let idle = self.woken.borrow().is_empty();
        let mut timeout = if idle {
            self.remote.sleeping.store(true, Ordering::SeqCst);
            if self.remote.pending.load(Ordering::SeqCst) {
                0
            } else {
                -1
            }
        } else {
            0
        };
        if let Some(sleep) = self.sleeper.get().filter(|_| idle) {
            let epoll_ready = sleep(self.epfd.as_raw_fd(), timeout < 0);
            if !epoll_ready {
                self.remote.sleeping.store(false, Ordering::Relaxed);
                self.take_remote();
                return Ok(());
            }
            timeout = 0;
        }
        let n = sys::epoll_wait(self.epfd.as_raw_fd(), events, timeout);
        self.remote.sleeping.store(false, Ordering::Relaxed);
        let n = match n {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut regs = self.regs.borrow_mut();
        for ev in &events[..n] {
            if ev.u64 == WAKE_KEY {
                let mut count = 0u64;
                // SAFETY: reads 8 bytes into a valid u64 (resets the counter).
                unsafe {
                    libc::read(
                        self.remote.eventfd.as_raw_fd(),
                        (&mut count as *mut u64).cast(),
                        8,
                    )
                };
                continue;
            }
            if let Some(reg) = regs.get_mut(ev.u64 as usize) {
                reg.ready_with(ev.events);
            }
        }
        drop(regs);
        self.take_remote();
        Ok(())
    }

    /// Moves the tasks other threads woke onto the local queue.
    fn take_remote(&self) {
        if self.remote.pending.swap(false, Ordering::Acquire) {
            let woken = std::mem::take(&mut *self.remote.woken.lock());
            self.woken.borrow_mut().extend(woken);
        }
    }

    /// Ready when `bit` is set on the socket `key`, else keeps the task's waker in the
    /// slot for that bit.
    fn poll_ready(&self, key: usize, bit: u8, cx: &mut Context<'_>) -> Poll<()> {
        let mut regs = self.regs.borrow_mut();
        let reg = &mut regs[key];
        if reg.ready & bit != 0 {
            return Poll::Ready(());
        }
        let slot = if bit == READ {
            &mut reg.reader
        } else {
            &mut reg.writer
        };
        keep(slot, cx);
        Poll::Pending
    }

    /// Ready once the socket `key` closed or failed.
    fn poll_closed(&self, key: usize, cx: &mut Context<'_>) -> Poll<()> {
        let mut regs = self.regs.borrow_mut();
        let reg = &mut regs[key];
        if reg.ready & CLOSED != 0 {
            return Poll::Ready(());
        }
        keep(&mut reg.closer, cx);
        Poll::Pending
    }

    /// Forgets `bit` after a call found the socket not ready: the next edge sets it.
    fn clear(&self, key: usize, bit: u8) {
        if let Some(reg) = self.regs.borrow_mut().get_mut(key) {
            reg.ready &= !bit;
        }
    }
}

/// Keeps `cx`'s waker in `slot` (not cloned again when it is the same task's).
fn keep(slot: &mut Option<Waker>, cx: &Context<'_>) {
    if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
        *slot = Some(cx.waker().clone());
    }
}

impl Reg {
    /// Takes in the events of one report and wakes who waits for them.
    fn ready_with(&mut self, events: u32) {
        let has = |bits: i32| events & bits as u32 != 0;
        if has(libc::EPOLLHUP | libc::EPOLLERR) {
            // Done both ways: every call on it returns at once (an error or the end).
            self.ready |= CLOSED | READ | WRITE;
            for w in [self.reader.take(), self.writer.take(), self.closer.take()]
                .into_iter()
                .flatten()
            {
                w.wake();
            }
            return;
        }
        if has(libc::EPOLLRDHUP) {
            // The peer sends no more: reads find the end; writing may still wait for
            // room (a client that shut down its side and does not read must not make
            // a writer spin).
            self.ready |= CLOSED | READ;
            for w in [self.reader.take(), self.closer.take()]
                .into_iter()
                .flatten()
            {
                w.wake();
            }
        }
        if has(libc::EPOLLIN) {
            self.ready |= READ;
            if let Some(w) = self.reader.take() {
                w.wake();
            }
        }
        if has(libc::EPOLLOUT) {
            self.ready |= WRITE;
            if let Some(w) = self.writer.take() {
                w.wake();
            }
        }
    }
}

#[cfg(test)]
mod tests;
