//! A connection and a listener on this thread's loop.

use std::future::poll_fn;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::BufMut;

use super::{with, CLOSED, READ, WRITE};
use crate::net::netio::{arming, drain, too_slow, IoTimer, Transport, LINGER};
use crate::net::sys;

/// A connection served by this thread's loop: what the front ends see instead of a
/// tokio `TcpStream`. Only ever used on the thread that accepted it.
pub(crate) struct EvStream {
    socket: TcpStream,
    key: usize,
}

impl EvStream {
    /// Serves `socket` (non-blocking) on this thread's loop.
    pub(crate) fn new(socket: TcpStream) -> io::Result<EvStream> {
        let key = with(|l| l.register(socket.as_raw_fd()))?;
        Ok(EvStream { socket, key })
    }

    fn poll_ready(&self, bit: u8, cx: &mut Context<'_>) -> Poll<()> {
        with(|l| l.poll_ready(self.key, bit, cx))
    }

    fn clear(&self, bit: u8) {
        with(|l| l.clear(self.key, bit));
    }

    /// One `recv` into `buf`'s spare capacity (no zeroing). A read that returns less
    /// than the room it was given drained the socket: its readiness is forgotten at
    /// once, so the next wait goes to `epoll_wait` instead of first paying for a read
    /// that can only fail with `EAGAIN` (as on the tokio path).
    fn recv(&self, buf: &mut impl BufMut) -> io::Result<usize> {
        let chunk = buf.chunk_mut();
        let room = chunk.len();
        // SAFETY: `chunk` is valid for writes of `room` bytes; `recv` writes at most
        // that many and says how many it wrote, which are then initialised.
        let n = match unsafe { sys::recv(self.socket.as_raw_fd(), chunk.as_mut_ptr(), room) } {
            Ok(n) => n,
            Err(e) => {
                if e.kind() == io::ErrorKind::WouldBlock {
                    self.clear(READ);
                }
                return Err(e);
            }
        };
        // SAFETY: the kernel initialised `n` bytes of the spare capacity.
        unsafe { buf.advance_mut(n) };
        if n > 0 && n < room {
            self.clear(READ);
        }
        Ok(n)
    }

    /// One `send` of what the socket takes now (`WouldBlock` when it takes nothing).
    fn send(&self, data: &[u8]) -> io::Result<usize> {
        let sent = sys::send(self.socket.as_raw_fd(), data, 0);
        if matches!(&sent, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
            self.clear(WRITE);
        }
        sent
    }

    /// Input is there (or the end, or an error), or `deadline` passed (`false`).
    /// Input first: a deadline that passed while input waits does not end the wait.
    async fn wait_input(&self, deadline: Instant, timer: &mut IoTimer) -> io::Result<bool> {
        poll_fn(|cx| timer.poll_input_until(self.poll_ready(READ, cx).map(Ok), deadline, cx)).await
    }

    /// Writes all of `data` by the deadline `deadline` gives, asked only when the socket
    /// does not take everything at once (as on the tokio path: most answers cost one
    /// system call, no timer and no clock read).
    async fn write_by(&self, data: &[u8], deadline: impl FnOnce() -> Instant) -> io::Result<()> {
        let mut written = match self.send(data) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        if written == data.len() {
            return Ok(());
        }
        let deadline = deadline();
        let rest = async {
            while written < data.len() {
                poll_fn(|cx| self.poll_ready(WRITE, cx)).await;
                match self.send(&data[written..]) {
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::WriteZero,
                            "connection closed while writing",
                        ))
                    }
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        };
        arming();
        match tokio::time::timeout_at(deadline.into(), rest).await {
            Ok(r) => r,
            Err(_) => Err(too_slow()),
        }
    }
}

impl Drop for EvStream {
    fn drop(&mut self) {
        let key = self.key;
        // After the thread's loop ended there is nothing to deregister from.
        let _ = super::try_with(|l| l.deregister(key));
        // `socket` closes the descriptor after this, which leaves the epoll set.
    }
}

impl Transport for EvStream {
    async fn read_with_deadline<B: BufMut + Send>(
        &mut self,
        buf: &mut B,
        deadline: Instant,
        timer: &mut IoTimer,
    ) -> io::Result<Option<usize>> {
        loop {
            match self.recv(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => return done.map(Some),
            }
            if !self.wait_input(deadline, timer).await? {
                return Ok(None);
            }
        }
    }

    fn try_read_now<B: BufMut>(&mut self, buf: &mut B) -> io::Result<usize> {
        self.recv(buf)
    }

    async fn wait_readable(&mut self, deadline: Instant, timer: &mut IoTimer) -> io::Result<bool> {
        self.wait_input(deadline, timer).await
    }

    async fn write_within(&mut self, data: &[u8], timeout: Duration) -> io::Result<()> {
        self.write_by(data, || Instant::now() + timeout).await
    }

    fn try_write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let written = sys::writev(self.socket.as_raw_fd(), bufs);
        if matches!(&written, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
            self.clear(WRITE);
        }
        written
    }

    /// Half-closes, then drains input briefly, so that closing with unread bytes does
    /// not reset the last response away (as [`crate::net::netio::linger`]).
    async fn linger(&mut self) {
        let _ = self.socket.shutdown(Shutdown::Write);
        drain(self, Instant::now() + LINGER).await;
    }

    fn quick_ack(&self) {
        crate::net::netio::quick_ack(&self.socket)
    }

    /// The peer closed its end, or the socket failed; input alone does not end it.
    async fn hung_up(&mut self) {
        let key = self.key;
        poll_fn(|cx| with(|l| l.poll_closed(key, cx))).await;
        debug_assert!(with(|l| l.regs.borrow()[key].ready & CLOSED != 0));
    }
}

/// A listening socket on this thread's loop.
pub(crate) struct Listener {
    socket: TcpListener,
    key: usize,
}

impl Listener {
    /// Serves `socket` (made non-blocking here) on this thread's loop.
    pub(crate) fn new(socket: TcpListener) -> io::Result<Listener> {
        socket.set_nonblocking(true)?;
        let key = with(|l| l.register(socket.as_raw_fd()))?;
        Ok(Listener { socket, key })
    }

    /// The next connection (non-blocking, `TCP_NODELAY`) and its peer's address.
    pub(crate) async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        loop {
            match accept4(&self.socket) {
                Ok(accepted) => return Ok(accepted),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    with(|l| l.clear(self.key, READ));
                    poll_fn(|cx| with(|l| l.poll_ready(self.key, READ, cx))).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let key = self.key;
        let _ = super::try_with(|l| l.deregister(key));
    }
}

/// One `accept4` of a non-blocking, close-on-exec socket: no `fcntl` after it.
fn accept4(listener: &TcpListener) -> io::Result<(TcpStream, SocketAddr)> {
    // SAFETY: `accept4` fills at most the storage and length it is given; the
    // descriptor it returns is owned from here on.
    let (fd, addr) = unsafe {
        socket2::SockAddr::try_init(|storage, len| {
            let fd = libc::accept4(
                listener.as_raw_fd(),
                storage.cast(),
                len,
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            );
            if fd < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(fd)
            }
        })?
    };
    // SAFETY: a connected socket the kernel just gave us.
    let socket = unsafe { TcpStream::from_raw_fd(fd) };
    let _ = socket.set_nodelay(true);
    let peer = addr
        .as_socket()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "peer is not an IP address"))?;
    Ok((socket, peer))
}
