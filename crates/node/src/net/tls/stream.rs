//! A served TLS connection: rustls's connection state over the node's own socket calls.
//!
//! The handshake runs through tokio-rustls ([`super::TlsAcceptor::accept`]); the
//! connection is then taken apart ([`TlsStream::from`]) and served by this type, which
//! drives rustls directly the way [`crate::net::netio`] drives a plain socket:
//!
//! - a read tries the socket first and waits (arming the connection's lazy timer) only
//!   when nothing is there; plaintext rustls already decrypted is handed out without a
//!   system call;
//! - a write hands the bytes to rustls, which encrypts them into records, and sends
//!   them at once; a timer is armed only when the socket's send buffer is full. One
//!   record per response is the common case, and it goes out with `send(2)`, not
//!   `writev(2)` — the plain path's call.
//!
//! Why not tokio-rustls's stream, which the node used before (and still uses for the
//! handshake, and for gRPC under tonic): each write went through `write_all` + `flush`
//! under a `timeout_at` (a timer inserted and removed per response), and rustls's one
//! record went out with `writev`. Measured side by side on a quiet host (`NODE_BIN=…
//! NODE_CPU_QUOTA=30 bench/tls/run.sh`, 64 B calls at 16 connections, the node held to
//! 30 % of a core, four runs of each build alternating): HTTPS calls/s +2.9 %
//! (medians 38,440 against 37,350), node CPU per TLS call 7.80 against 8.00 µs; the
//! TLS/plain ratio 79–85 % against 78–79 %. Figures in docs/benchmarks.md ("TLS").

use std::io::{self, BufRead, Read, Write};
use std::time::{Duration, Instant};

use bytes::BufMut;
use rustls::ServerConnection;
use tokio::net::TcpStream;

use crate::net::netio::{IoTimer, Transport, LINGER};

/// A TLS connection after its handshake: the socket and rustls's state.
pub struct TlsStream {
    tcp: TcpStream,
    conn: ServerConnection,
}

impl From<tokio_rustls::server::TlsStream<TcpStream>> for TlsStream {
    fn from(stream: tokio_rustls::server::TlsStream<TcpStream>) -> Self {
        // Everything tokio-rustls had buffered (decrypted input, records not yet sent:
        // the session tickets of TLS 1.3) is held by the connection it gives back.
        let (tcp, conn) = stream.into_inner();
        TlsStream { tcp, conn }
    }
}

/// The socket as rustls's `Read` and `Write`: non-blocking calls that say
/// `WouldBlock` (and clear tokio's readiness) when the socket has nothing or no room.
struct Socket<'a>(&'a TcpStream);

impl Read for Socket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // As a plain read: a short read clears the readiness, so the next wait does
        // not first pay for a read that fails with EAGAIN (tokio-rustls's stream got
        // this from tokio's `poll_read`; without it, 35 % of calls made one more
        // `recvfrom`).
        let n = self.0.try_read(buf)?;
        crate::net::netio::drained(self.0, n, buf.len());
        Ok(n)
    }
}

impl Write for Socket<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        // rustls hands over every record it holds; one is the common case (a
        // response), and `send` costs less than `writev` for it.
        match bufs {
            [one] => self.0.try_write(one),
            _ => self.0.try_write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TlsStream {
    /// Moves plaintext rustls holds into `buf`: `Some(n)` (0 = the peer closed the TLS
    /// session cleanly), or `None` when it holds none yet.
    fn take_plaintext<B: BufMut>(&mut self, buf: &mut B) -> io::Result<Option<usize>> {
        // At most the buffer's spare room, as a plain read takes (a `Vec` with none
        // left is given a little by `chunk_mut`).
        let mut room = buf.chunk_mut().len();
        let mut moved = 0;
        loop {
            let mut reader = self.conn.reader();
            let data = match reader.fill_buf() {
                Ok(data) => data,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok((moved > 0).then_some(moved))
                }
                // An error (a TCP close without close_notify) after data is reported
                // by the next read.
                Err(_) if moved > 0 => return Ok(Some(moved)),
                Err(e) => return Err(e),
            };
            let n = data.len().min(room);
            if n == 0 {
                // The session's clean end, or no room left in `buf`.
                return Ok(Some(moved));
            }
            buf.put_slice(&data[..n]);
            reader.consume(n);
            moved += n;
            room -= n;
        }
    }

    /// Reads what the socket has into rustls and decrypts it: `Ok(false)` when the
    /// socket had nothing. A TLS error is answered with rustls's alert and returned.
    fn receive(&mut self) -> io::Result<bool> {
        match self.conn.read_tls(&mut Socket(&self.tcp)) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
        let processed = self.conn.process_new_packets();
        // An alert for an error, or rustls's own answer to what it read (a key
        // update): sent now, best effort, as tokio-rustls does.
        if self.conn.wants_write() {
            let _ = self.conn.write_tls(&mut Socket(&self.tcp));
        }
        processed.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok(true)
    }

    /// Sends every record rustls holds by `deadline`.
    async fn send_records(&mut self, deadline: Instant) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut Socket(&self.tcp)) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // The send buffer is full: the only case that arms a timer.
                    crate::net::netio::arming();
                    match tokio::time::timeout_at(deadline.into(), self.tcp.writable()).await {
                        Ok(r) => r?,
                        Err(_) => return Err(crate::net::netio::too_slow()),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Transport for TlsStream {
    fn quick_ack(&self) {
        crate::net::netio::quick_ack(&self.tcp)
    }

    async fn read_with_deadline<B: BufMut + Send>(
        &mut self,
        buf: &mut B,
        deadline: Instant,
        timer: &mut IoTimer,
    ) -> io::Result<Option<usize>> {
        loop {
            if let Some(n) = self.take_plaintext(buf)? {
                return Ok(Some(n));
            }
            if !self.receive()? {
                tokio::select! {
                    r = self.tcp.readable() => r?,
                    _ = timer.until(deadline) => return Ok(None),
                }
            }
        }
    }

    async fn wait_readable(&mut self, deadline: Instant, timer: &mut IoTimer) -> io::Result<bool> {
        // Plaintext rustls already holds (or a close, or an error for the next read to
        // report) is ready now; otherwise wait for the socket.
        match self.conn.process_new_packets() {
            Ok(state) if state.plaintext_bytes_to_read() == 0 && !state.peer_has_closed() => {}
            _ => return Ok(true),
        }
        tokio::select! {
            biased;
            r = self.tcp.readable() => r.map(|()| true),
            _ = timer.until(deadline) => Ok(false),
        }
    }

    async fn write_within(&mut self, data: &[u8], timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut rest = data;
        loop {
            // rustls takes what its send buffer's bound allows, encrypted into records.
            let taken = self.conn.writer().write(rest)?;
            rest = &rest[taken..];
            if taken == 0 && !self.conn.wants_write() && !rest.is_empty() {
                return Err(io::ErrorKind::WriteZero.into());
            }
            self.send_records(deadline).await?;
            if rest.is_empty() {
                return Ok(());
            }
        }
    }

    /// The TCP socket's close ([`crate::net::netio::hung_up`]); a TLS close_notify
    /// alone is input, read later.
    async fn hung_up(&mut self) {
        crate::net::netio::hung_up(&self.tcp).await
    }

    fn try_write_vectored(&mut self, _bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        // Bytes given to rustls are committed to the stream: everything goes through
        // the connection's output buffer and `write_within`.
        Ok(0)
    }

    async fn linger(&mut self) {
        // close_notify and a half-close, then drain briefly, as a plain close does.
        let deadline = Instant::now() + LINGER;
        self.conn.send_close_notify();
        if self.send_records(deadline).await.is_err() {
            return;
        }
        if tokio::io::AsyncWriteExt::shutdown(&mut self.tcp)
            .await
            .is_err()
        {
            return;
        }
        crate::net::netio::drain(self, deadline).await;
    }
}
