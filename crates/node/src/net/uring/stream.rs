//! A connection and a listener served by this thread's ring.

use std::future::poll_fn;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::{Duration, Instant};

use bytes::BufMut;
use futures_util::FutureExt;

use super::driver::{try_with, with};
use crate::net::netio::{IoTimer, Transport, LINGER};

/// A connection whose bytes come and go through the ring: what the front ends see
/// instead of a tokio `TcpStream`. Only ever used on the thread that accepted it.
pub(crate) struct UringStream {
    key: usize,
    /// How long the last answer may take to leave after the stream is dropped.
    io_timeout: Duration,
    /// Owns the descriptor (closed on drop, after the ring has let go of it); used
    /// directly only for what is not on the hot path (half-close).
    socket: TcpStream,
}

impl UringStream {
    /// Serves `socket` through this thread's ring.
    pub(crate) fn new(socket: TcpStream, io_timeout: Duration) -> UringStream {
        let key = with(|d| d.open(socket.as_raw_fd()));
        UringStream {
            key,
            io_timeout,
            socket,
        }
    }

    /// Waits until the previous send is done, by the deadline `deadline` gives. The
    /// previous send is nearly always done by the next answer: that costs no timer
    /// (issue 28's per-call budget) and no clock read; only a send still in the ring
    /// asks for the deadline and arms a timer.
    async fn sent(&mut self, deadline: impl FnOnce() -> Instant) -> io::Result<()> {
        let key = self.key;
        let mut sent = poll_fn(|cx| with(|d| d.poll_sent(key, cx)));
        if let Some(done) = (&mut sent).now_or_never() {
            return done;
        }
        crate::net::netio::arming();
        match tokio::time::timeout_at(deadline().into(), sent).await {
            Ok(r) => r,
            Err(_) => Err(crate::net::netio::too_slow()),
        }
    }
}

impl Drop for UringStream {
    fn drop(&mut self) {
        let key = self.key;
        let mut sending = None;
        try_with(|d| sending = d.close(key));
        // The last answer is still leaving: it gets the connection's io timeout,
        // as a write on epoll would, then is cancelled.
        if let Some(generation) = sending {
            let timeout = self.io_timeout;
            // On the ring's own thread: the driver is that thread's (the loop's timer
            // sleeps on the companion runtime, and wakes the task back here).
            if crate::net::evloop::on_loop() {
                crate::net::evloop::spawn(async move {
                    tokio::time::sleep(timeout).await;
                    try_with(|d| d.cancel_send(key, generation));
                });
            } else {
                try_with(|d| d.cancel_send(key, generation));
            }
        }
        // `socket` closes the descriptor after this; the kernel keeps the socket
        // until the send is done.
    }
}

impl Transport for UringStream {
    fn quick_ack(&self) {
        crate::net::netio::quick_ack(&self.socket)
    }

    async fn read_with_deadline<B: BufMut + Send>(
        &mut self,
        buf: &mut B,
        deadline: Instant,
        timer: &mut IoTimer,
    ) -> io::Result<Option<usize>> {
        let key = self.key;
        let read = poll_fn(|cx| with(|d| d.poll_read(key, buf, cx)));
        tokio::select! {
            biased;
            r = read => r.map(Some),
            _ = timer.until(deadline) => Ok(None),
        }
    }

    /// What the ring has received and the connection not yet read, without waiting:
    /// polled with a waker that does nothing, since a caller told "would block" goes
    /// on to [`Transport::read_with_deadline`], whose poll leaves its own.
    fn try_read_now<B: BufMut>(&mut self, buf: &mut B) -> io::Result<usize> {
        let key = self.key;
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match with(|d| d.poll_read(key, buf, &mut cx)) {
            std::task::Poll::Ready(r) => r,
            std::task::Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    async fn wait_readable(&mut self, deadline: Instant, timer: &mut IoTimer) -> io::Result<bool> {
        let key = self.key;
        // Input first, then the timer: one poll, no `select!` (as on epoll).
        poll_fn(|cx| timer.poll_input_until(with(|d| d.poll_input(key, cx)), deadline, cx)).await
    }

    /// Queues `data` behind the previous send (waiting for that one, by `deadline`)
    /// and returns without waiting for the kernel: the connection reads its next
    /// request meanwhile, and the send leaves with the turn's other submissions. A
    /// connection thus holds at most one answer in the ring beside its own buffers.
    async fn write_within(&mut self, data: &[u8], timeout: Duration) -> io::Result<()> {
        self.sent(|| Instant::now() + timeout).await?;
        let key = self.key;
        with(|d| d.start_send(key, data))
    }

    /// [`UringStream::write_within`] of a whole buffer, which the ring takes instead
    /// of a copy of it.
    async fn write_all_of(&mut self, buf: &mut Vec<u8>, timeout: Duration) -> io::Result<()> {
        let waited = self.sent(|| Instant::now() + timeout).await;
        let key = self.key;
        let result = waited.and_then(|()| with(|d| d.start_send_of(key, buf)));
        buf.clear();
        result
    }

    /// Input, a close or an error on the ring's receive; only the last two end it.
    async fn hung_up(&mut self) {
        let key = self.key;
        if poll_fn(|cx| with(|d| d.poll_input(key, cx))).await.is_ok() && !with(|d| d.at_eof(key)) {
            std::future::pending::<()>().await;
        }
    }

    /// Nothing is written without the ring: the caller buffers the bytes and flushes
    /// them (one submission per turn) instead.
    fn try_write_vectored(&mut self, _bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        Ok(0)
    }

    /// As [`crate::net::netio::linger`]: half-close, then drain input briefly, so that
    /// closing with unread bytes does not reset the last response away.
    async fn linger(&mut self) {
        // The half-close must follow the last answer, not overtake it.
        let io_timeout = self.io_timeout;
        if self.sent(|| Instant::now() + io_timeout).await.is_err() {
            return;
        }
        let _ = self.socket.shutdown(Shutdown::Write);
        crate::net::netio::drain(self, Instant::now() + LINGER).await;
    }
}

/// A listening socket whose connections arrive by one multishot accept.
pub(crate) struct Listener {
    key: usize,
}

impl Listener {
    pub(crate) fn new(listener: std::net::TcpListener) -> Listener {
        Listener {
            key: with(|d| d.listen(listener)),
        }
    }

    /// The next connection and its peer's address.
    pub(crate) async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let key = self.key;
        loop {
            let fd = poll_fn(|cx| with(|d| d.poll_accept(key, cx))).await?;
            // SAFETY: a connected socket the kernel just gave us, owned from here on.
            let socket = unsafe { TcpStream::from_raw_fd(fd) };
            // The multishot accept does not report the peer: one getpeername (only
            // for the log lines that name the client). A connection already reset
            // has none, and is dropped.
            if let Ok(peer) = socket.peer_addr() {
                return Ok((socket, peer));
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let key = self.key;
        try_with(|d| d.unlisten(key));
    }
}
