//! The connection between the ICD and the node: TCP, or a Unix domain socket when both
//! run on the same host.
//!
//! A Unix socket skips the TCP/IP stack: on the 2-core machine of `docs/benchmarks.md`
//! a 64-byte ping-pong took 5 µs at the median against 10 µs over loopback TCP (both
//! ends polling), and 13–15 µs against 16–24 µs (both sleeping). The node listens on an
//! abstract-namespace socket (nothing in the file system to clean up) and names it in
//! its `Hello` reply to clients whose host id matches its own.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// A connected stream of either kind.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    /// `TCP_NODELAY` on TCP; nothing to do on a Unix socket.
    pub fn set_nodelay(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nodelay(true),
            Stream::Unix(_) => Ok(()),
        }
    }

    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(timeout),
            Stream::Unix(s) => s.set_read_timeout(timeout),
        }
    }

    /// Bounds how long a write may wait for the peer to take data (`SO_SNDTIMEO`; it
    /// holds for every handle of the socket).
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(timeout),
            Stream::Unix(s) => s.set_write_timeout(timeout),
        }
    }

    /// Shuts both directions down: a thread reading the socket sees its end.
    pub fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }

    /// Shuts the reading direction down: a thread reading the socket sees its end, while
    /// replies still go out on the writing direction.
    pub fn shutdown_read(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Read),
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Read),
        };
    }

    /// Connects to the abstract-namespace Unix socket `name` (the bytes after the
    /// leading NUL).
    pub fn connect_local(name: &[u8]) -> io::Result<Stream> {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        Ok(Stream::Unix(UnixStream::connect_addr(&addr)?))
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (&*self).write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

// Reading and writing need no exclusive access (as for `&TcpStream`), so a reader and
// a writer can share one connection.
impl Read for &Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).read(buf),
            Stream::Unix(s) => (&*s).read(buf),
        }
    }
}

impl Write for &Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write(buf),
            Stream::Unix(s) => (&*s).write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write_vectored(bufs),
            Stream::Unix(s) => (&*s).write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes all of `parts`, in order, in as few system calls as the socket allows
/// (`writev`).
pub fn write_all_vectored(mut w: impl Write, parts: &[&[u8]]) -> io::Result<()> {
    // The first part not yet wholly written, and how much of it was.
    let (mut first, mut done) = (0, 0);
    loop {
        while first < parts.len() && done == parts[first].len() {
            first += 1;
            done = 0;
        }
        if first == parts.len() {
            return Ok(());
        }
        let slices: Vec<IoSlice<'_>> = std::iter::once(&parts[first][done..])
            .chain(parts[first + 1..].iter().copied())
            .map(IoSlice::new)
            .collect();
        match w.write_vectored(&slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(mut n) => {
                while n > 0 {
                    let left = parts[first].len() - done;
                    if n < left {
                        done += n;
                        break;
                    }
                    n -= left;
                    first += 1;
                    done = 0;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::linux::net::SocketAddrExt;

    #[test]
    fn an_abstract_socket_carries_bytes_both_ways() {
        let name = format!("netaccel-stream-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
        let mut client = Stream::connect_local(name.as_bytes()).unwrap();
        client.set_nodelay().unwrap();
        let (server, _) = listener.accept().unwrap();
        let mut server = Stream::Unix(server);
        client.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        server.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        (&server).write_all(b"pong").unwrap();
        (&client).read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"pong");
    }

    #[test]
    fn vectored_writes_arrive_whole_and_in_order() {
        let (a, b) = UnixStream::pair().unwrap();
        let (a, mut b) = (Stream::Unix(a), Stream::Unix(b));
        let big = vec![7u8; 3 << 20]; // more than the socket buffer: several writes
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            b.read_to_end(&mut got).unwrap();
            got
        });
        write_all_vectored(&a, &[b"", b"head", &big, b"", b"tail"]).unwrap();
        drop(a);
        let got = reader.join().unwrap();
        assert_eq!(got.len(), 4 + big.len() + 4);
        assert_eq!(&got[..4], b"head");
        assert!(got[4..4 + big.len()].iter().all(|&x| x == 7));
        assert_eq!(&got[4 + big.len()..], b"tail");
    }
}
