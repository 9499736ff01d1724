//! A served TLS connection: rustls driven directly over the tokio socket.
//!
//! tokio-rustls does the handshake ([`super::TlsAcceptor::accept`]); once it is done the
//! connection is taken apart into its socket and its rustls state, and this drives them
//! the way `netio` drives a plain socket: try the system call first, wait only when the
//! socket is not ready, and clear the socket's readiness after a read that drained it,
//! so that the next wait does not begin with a read that can only fail with `EAGAIN`.
//! Over tokio-rustls each request cost that extra failed read, and one armed timer per
//! read (bench/tls.sh, 16 connections: 73 % of plain calls/s through tokio-rustls).

use std::io::{self, BufRead, Read, Write};
use std::time::Instant;

use bytes::BufMut;
use rustls::ServerConnection;
use tokio::net::TcpStream;

use crate::netio::{self, IoTimer, Transport};

/// A TLS connection after its handshake.
pub struct TlsConn {
    tcp: TcpStream,
    tls: ServerConnection,
}

/// The socket as rustls's `Read`/`Write`: non-blocking calls, noting whether a read
/// drained the socket (returned less than the room it had).
struct TryIo<'a> {
    tcp: &'a TcpStream,
    drained: bool,
}

impl Read for TryIo<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.tcp.try_read(buf)?;
        self.drained |= n < buf.len();
        Ok(n)
    }
}

impl Write for TryIo<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tcp.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.tcp.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What one step of reading found.
enum Step {
    /// Plaintext copied into the caller's buffer.
    Plaintext(usize),
    /// The peer closed (cleanly, or with a bare TCP close).
    End,
    /// Nothing more without waiting for the socket.
    Wait,
}

impl TlsConn {
    pub fn new(tcp: TcpStream, tls: ServerConnection) -> TlsConn {
        TlsConn { tcp, tls }
    }

    /// Copies buffered plaintext into `buf`, else reads and decrypts what the socket
    /// has, without waiting.
    fn step<B: BufMut>(&mut self, buf: &mut B) -> io::Result<Step> {
        loop {
            match self.tls.reader().fill_buf() {
                Ok([]) => return Ok(Step::End),
                Ok(chunk) => {
                    let n = chunk.len().min(buf.remaining_mut());
                    buf.put_slice(&chunk[..n]);
                    self.tls.reader().consume(n);
                    return Ok(Step::Plaintext(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // A TCP close without close_notify: the end of this connection too.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(Step::End),
                Err(e) => return Err(e),
            }
            let mut io = TryIo {
                tcp: &self.tcp,
                drained: false,
            };
            match self.tls.read_tls(&mut io) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Wait),
                Err(e) => return Err(e),
            }
            if io.drained {
                // As netio's plain reads do: the next wait goes straight to the event
                // loop; data arriving meanwhile raises a fresh edge.
                let _ = self.tcp.try_io(tokio::io::Interest::READABLE, || {
                    Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock))
                });
            }
            if let Err(e) = self.tls.process_new_packets() {
                // Send the alert rustls queued, if the socket takes it.
                let _ = self.send_pending();
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
    }

    /// Writes encrypted records rustls holds until it holds none (`Ok(true)`) or the
    /// socket is full (`Ok(false)`).
    fn send_pending(&mut self) -> io::Result<bool> {
        while self.tls.wants_write() {
            let mut io = TryIo {
                tcp: &self.tcp,
                drained: false,
            };
            match self.tls.write_tls(&mut io) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Sends everything rustls holds, waiting for room by `deadline`.
    async fn flush_by(&mut self, deadline: Instant) -> io::Result<()> {
        while !self.send_pending()? {
            tokio::time::timeout_at(deadline.into(), self.tcp.writable())
                .await
                .map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        "client did not read the response in time",
                    )
                })??;
        }
        Ok(())
    }
}

impl Transport for TlsConn {
    async fn read_with_deadline<B: BufMut + Send>(
        &mut self,
        buf: &mut B,
        deadline: Instant,
        timer: &mut IoTimer,
    ) -> io::Result<Option<usize>> {
        loop {
            match self.step(buf)? {
                Step::Plaintext(n) => return Ok(Some(n)),
                Step::End => return Ok(Some(0)),
                Step::Wait => {}
            }
            tokio::select! {
                r = self.tcp.readable() => r?,
                _ = timer.until(deadline) => return Ok(None),
            }
        }
    }

    async fn wait_readable(&mut self, deadline: Instant, timer: &mut IoTimer) -> io::Result<bool> {
        // Plaintext rustls already holds is ready now (every read decrypts what it
        // took from the socket, so none waits undecrypted).
        if !matches!(
            self.tls.reader().fill_buf(),
            Err(ref e) if e.kind() == io::ErrorKind::WouldBlock
        ) {
            return Ok(true);
        }
        tokio::select! {
            r = self.tcp.readable() => r.map(|()| true),
            _ = timer.until(deadline) => Ok(false),
        }
    }

    async fn write_with_deadline(&mut self, data: &[u8], deadline: Instant) -> io::Result<()> {
        let mut rest = data;
        loop {
            if !rest.is_empty() {
                let n = self.tls.writer().write(rest)?;
                rest = &rest[n..];
            }
            self.flush_by(deadline).await?;
            if rest.is_empty() {
                return Ok(());
            }
        }
    }

    fn try_write_vectored(&mut self, _bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        // Everything goes through the connection's output buffer and one flush.
        Ok(0)
    }

    async fn linger(&mut self) {
        // close_notify, then the plain close: half-close and drain briefly.
        self.tls.send_close_notify();
        let deadline = Instant::now() + netio::LINGER;
        if self.flush_by(deadline).await.is_ok() {
            netio::linger(&mut self.tcp).await;
        }
    }
}
