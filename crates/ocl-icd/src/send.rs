//! Writing to the node's socket without ever raising `SIGPIPE` in the application.
//!
//! A write to a socket whose peer has gone raises `SIGPIPE`, and the default action of
//! that signal ends the process. Rust programs ignore it from the start, but this
//! library runs inside C programs that do not (a `clCreateBuffer` whose connection the
//! node had just closed killed its program with exit status 141). Ignoring the signal
//! process-wide from a library would change how the application's own pipes and sockets
//! behave, so every write of the ICD goes through `sendmsg` with `MSG_NOSIGNAL` instead:
//! the signal becomes an `EPIPE` error of that one call, the connection counts as lost
//! ([`crate::node`]) and the program's calls fail with OpenCL errors.

use std::io;
use std::os::fd::RawFd;

/// At most this many pieces go into one `sendmsg` (the kernel's `IOV_MAX` is 1024).
const PIECES_MAX: usize = 64;

/// Writes all of `parts`, in order, with as few system calls as the socket allows.
pub fn send_all(fd: RawFd, parts: &[&[u8]]) -> io::Result<()> {
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
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(PIECES_MAX);
        for (i, part) in parts[first..].iter().take(PIECES_MAX).enumerate() {
            let skip = if i == 0 { done } else { 0 };
            iov.push(libc::iovec {
                iov_base: part[skip..].as_ptr() as *mut libc::c_void,
                iov_len: part.len() - skip,
            });
        }
        // SAFETY: an all-zero msghdr is valid (no address, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len() as _;
        // SAFETY: `msg` points to `iov`, whose pieces borrow `parts` for this call.
        let rc = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if rc == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let mut n = rc as usize;
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn pieces_arrive_whole_and_in_order() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let big = vec![7u8; 3 << 20]; // more than the socket buffer: several calls
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            b.read_to_end(&mut got).unwrap();
            got
        });
        let many: Vec<&[u8]> = std::iter::repeat_n(b"ab".as_slice(), 100).collect();
        send_all(a.as_raw_fd(), &[b"", b"head", &big, b"", b"tail"]).unwrap();
        send_all(a.as_raw_fd(), &many).unwrap();
        drop(a);
        let got = reader.join().unwrap();
        assert_eq!(got.len(), 4 + big.len() + 4 + 200);
        assert_eq!(&got[..4], b"head");
        assert!(got[4..4 + big.len()].iter().all(|&x| x == 7));
        assert_eq!(&got[4 + big.len()..4 + big.len() + 4], b"tail");
        assert!(got[4 + big.len() + 4..].chunks(2).all(|c| c == b"ab"));
    }

    #[test]
    fn a_closed_peer_is_an_error_not_a_signal() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let e = send_all(a.as_raw_fd(), &[b"lost"]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }
}
