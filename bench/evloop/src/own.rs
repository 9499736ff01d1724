//! A minimal single-threaded event loop: what a network thread would run instead of
//! tokio's runtime. One epoll instance (edge-triggered), a slab of tasks, a queue of
//! the tasks woken, wakers that carry a task's index and push it on that queue, and
//! coarse idle timeouts swept once a second from a clock read once per loop turn
//! (`CLOCK_MONOTONIC_COARSE`, no time-stamp counter). Single-threaded only: a waker
//! used from another thread is a bug here (the node would need an eventfd for those).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::io;
use std::os::fd::{IntoRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

use crate::BUF_CAP;

const READ: u32 = 1;
const WRITE: u32 = 2;
/// How often idle deadlines are looked at, in ms (their resolution).
const SWEEP_MS: u64 = 1000;
const MAX_EVENTS: usize = 256;

type Task = Pin<Box<dyn Future<Output = ()>>>;

/// A registered descriptor's readiness and the tasks waiting for it.
struct Reg {
    ready: u32,
    reader: Option<Waker>,
    writer: Option<Waker>,
    /// Idle deadline in coarse ms (0: none); `timed_out` once the sweep found it past.
    deadline_ms: u64,
    timed_out: bool,
}

struct Loop {
    epfd: RawFd,
    regs: RefCell<Vec<Option<Reg>>>,
    free_regs: RefCell<Vec<usize>>,
    tasks: RefCell<Vec<Option<Task>>>,
    free_tasks: RefCell<Vec<usize>>,
    woken: RefCell<VecDeque<usize>>,
    now_ms: Cell<u64>,
}

thread_local! {
    static LOOP: Loop = Loop::new();
}

impl Loop {
    fn new() -> Loop {
        // SAFETY: plain system call.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(epfd >= 0, "epoll_create1: {}", io::Error::last_os_error());
        Loop {
            epfd,
            regs: RefCell::new(Vec::new()),
            free_regs: RefCell::new(Vec::new()),
            tasks: RefCell::new(Vec::new()),
            free_tasks: RefCell::new(Vec::new()),
            woken: RefCell::new(VecDeque::new()),
            now_ms: Cell::new(coarse_ms()),
        }
    }

    fn register(&self, fd: RawFd) -> usize {
        let reg = Reg {
            ready: 0,
            reader: None,
            writer: None,
            deadline_ms: 0,
            timed_out: false,
        };
        let key = match self.free_regs.borrow_mut().pop() {
            Some(k) => {
                self.regs.borrow_mut()[k] = Some(reg);
                k
            }
            None => {
                let mut regs = self.regs.borrow_mut();
                regs.push(Some(reg));
                regs.len() - 1
            }
        };
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: key as u64,
        };
        // SAFETY: a descriptor the caller owns; `ev` lives across the call.
        let rc = unsafe { libc::epoll_ctl(self.epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        assert!(rc == 0, "epoll_ctl: {}", io::Error::last_os_error());
        key
    }

    fn deregister(&self, key: usize) {
        self.regs.borrow_mut()[key] = None;
        self.free_regs.borrow_mut().push(key);
    }

    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        let task: Task = Box::pin(task);
        let index = match self.free_tasks.borrow_mut().pop() {
            Some(i) => {
                self.tasks.borrow_mut()[i] = Some(task);
                i
            }
            None => {
                let mut tasks = self.tasks.borrow_mut();
                tasks.push(Some(task));
                tasks.len() - 1
            }
        };
        self.woken.borrow_mut().push_back(index);
    }

    /// Polls every woken task once (a task woken again meanwhile is polled again).
    fn run_woken(&self) {
        loop {
            let Some(index) = self.woken.borrow_mut().pop_front() else {
                return;
            };
            // Out of the slab while it runs: it may spawn or be woken.
            let Some(mut task) = self
                .tasks
                .borrow_mut()
                .get_mut(index)
                .and_then(Option::take)
            else {
                continue; // a stale wake-up of a task that ended
            };
            let waker = task_waker(index);
            let mut cx = Context::from_waker(&waker);
            if task.as_mut().poll(&mut cx).is_pending() {
                self.tasks.borrow_mut()[index] = Some(task);
            } else {
                self.free_tasks.borrow_mut().push(index);
            }
        }
    }

    /// One wait for events (up to the next sweep when any deadline is set), their
    /// wake-ups, and the sweep when it is due.
    fn turn(&self, events: &mut [libc::epoll_event], next_sweep: &mut u64) {
        // SAFETY: `events` is a valid buffer of its length.
        let n = unsafe {
            libc::epoll_wait(
                self.epfd,
                events.as_mut_ptr(),
                events.len() as i32,
                SWEEP_MS as i32,
            )
        };
        self.now_ms.set(coarse_ms());
        if n < 0 {
            let e = io::Error::last_os_error();
            assert!(e.kind() == io::ErrorKind::Interrupted, "epoll_wait: {e}");
            return;
        }
        let mut regs = self.regs.borrow_mut();
        for ev in &events[..n as usize] {
            let Some(reg) = regs.get_mut(ev.u64 as usize).and_then(Option::as_mut) else {
                continue;
            };
            let bits = ev.events;
            let hup = bits & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0;
            if hup || bits & (libc::EPOLLIN | libc::EPOLLRDHUP) as u32 != 0 {
                reg.ready |= READ;
                if let Some(w) = reg.reader.take() {
                    w.wake();
                }
            }
            if hup || bits & libc::EPOLLOUT as u32 != 0 {
                reg.ready |= WRITE;
                if let Some(w) = reg.writer.take() {
                    w.wake();
                }
            }
        }
        if self.now_ms.get() >= *next_sweep {
            *next_sweep = self.now_ms.get() + SWEEP_MS;
            let now = self.now_ms.get();
            for reg in regs.iter_mut().flatten() {
                if reg.deadline_ms != 0 && reg.deadline_ms <= now {
                    reg.timed_out = true;
                    if let Some(w) = reg.reader.take() {
                        w.wake();
                    }
                }
            }
        }
    }
}

/// The monotonic clock at the kernel's last tick, in ms.
fn coarse_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

static VTABLE: RawWakerVTable = RawWakerVTable::new(clone_raw, wake_raw, wake_raw, drop_raw);

fn task_waker(index: usize) -> Waker {
    // SAFETY: the vtable's functions treat the data pointer as the task's index only.
    unsafe { Waker::from_raw(RawWaker::new(index as *const (), &VTABLE)) }
}

fn clone_raw(data: *const ()) -> RawWaker {
    RawWaker::new(data, &VTABLE)
}

fn wake_raw(data: *const ()) {
    LOOP.with(|l| l.woken.borrow_mut().push_back(data as usize));
}

fn drop_raw(_: *const ()) {}

/// A connected socket on the loop.
struct Conn {
    fd: RawFd,
    key: usize,
}

impl Conn {
    fn new(fd: RawFd) -> Conn {
        Conn {
            fd,
            key: LOOP.with(|l| l.register(fd)),
        }
    }

    /// Input (or a close) is there to read; `false` when the idle deadline passed.
    async fn readable(&self) -> bool {
        poll_fn(|cx| {
            LOOP.with(|l| {
                let mut regs = l.regs.borrow_mut();
                let reg = regs[self.key].as_mut().expect("registered");
                if reg.timed_out {
                    return Poll::Ready(false);
                }
                if reg.ready & READ != 0 {
                    return Poll::Ready(true);
                }
                if !reg.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    reg.reader = Some(cx.waker().clone());
                }
                Poll::Pending
            })
        })
        .await
    }

    async fn writable(&self) {
        poll_fn(|cx| {
            LOOP.with(|l| {
                let mut regs = l.regs.borrow_mut();
                let reg = regs[self.key].as_mut().expect("registered");
                if reg.ready & WRITE != 0 {
                    return Poll::Ready(());
                }
                if !reg.writer.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    reg.writer = Some(cx.waker().clone());
                }
                Poll::Pending
            })
        })
        .await
    }

    /// Forgets the readiness `bit` after a call that found the socket not ready: the
    /// next edge sets it again.
    fn not_ready(&self, bit: u32) {
        LOOP.with(|l| {
            if let Some(reg) = l.regs.borrow_mut()[self.key].as_mut() {
                reg.ready &= !bit;
            }
        });
    }

    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::recv(self.fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            self.not_ready(READ);
        }
        Err(e)
    }

    async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            // SAFETY: `data` is valid for reads of its length.
            let n = unsafe {
                libc::send(
                    self.fd,
                    data.as_ptr().cast(),
                    data.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            if n >= 0 {
                data = &data[n as usize..];
                continue;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(e);
            }
            self.not_ready(WRITE);
            self.writable().await;
        }
        Ok(())
    }

    /// Moves the idle deadline to `idle_ms` from the loop's last clock read.
    fn touch(&self, idle_ms: u64) {
        LOOP.with(|l| {
            let deadline = l.now_ms.get() + idle_ms;
            if let Some(reg) = l.regs.borrow_mut()[self.key].as_mut() {
                reg.deadline_ms = deadline;
            }
        });
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        LOOP.with(|l| l.deregister(self.key));
        // SAFETY: the connection owns its descriptor; closing it also leaves the epoll set.
        unsafe { libc::close(self.fd) };
    }
}

async fn echo(conn: Conn, idle_ms: u64) {
    if idle_ms > 0 {
        conn.touch(idle_ms);
    }
    let mut buf = vec![0u8; BUF_CAP];
    loop {
        if !conn.readable().await {
            return;
        }
        match conn.try_read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if idle_ms > 0 {
                    conn.touch(idle_ms);
                }
                if conn.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

async fn accept_loop(listener: Conn, idle_ms: u64) {
    loop {
        // SAFETY: accept4 on a listening socket; the peer address is not asked for.
        let fd = unsafe {
            libc::accept4(
                listener.fd,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if fd >= 0 {
            let one: libc::c_int = 1;
            // SAFETY: a valid option value of its size.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    (&one as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            LOOP.with(|l| l.spawn(echo(Conn::new(fd), idle_ms)));
            continue;
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            listener.not_ready(READ);
            listener.readable().await;
        }
        // Other errors (EMFILE, a connection reset before it was taken): try again.
    }
}

pub fn serve(listener: std::net::TcpListener, idle_ms: u64) {
    let listener = Conn::new(listener.into_raw_fd());
    LOOP.with(|l| l.spawn(accept_loop(listener, idle_ms)));
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS];
    let mut next_sweep = LOOP.with(|l| l.now_ms.get()) + SWEEP_MS;
    loop {
        LOOP.with(|l| {
            l.run_woken();
            l.turn(&mut events, &mut next_sweep);
        });
    }
}
