//! The system calls of a request's path, made directly: `recv`, `send`, `writev` and
//! `epoll_wait` on the own event loop, `send` on the io_uring path.
//!
//! glibc's `recv`, `send`, `writev` and `epoll_wait` are thread cancellation points:
//! each wraps the system call in `__pthread_enable_asynccancel` /
//! `__pthread_disable_asynccancel`, about 30 user-space instructions a call, 90 per
//! RAC call (counted with `bench/rac/instructions.sh`, issue 28). The node never
//! cancels a thread, so it makes the same system calls through `syscall(2)`, which
//! is not a cancellation point. Same arguments, same results, errors in `errno` as
//! the wrappers leave them.

use std::io;
use std::os::fd::RawFd;

/// The result of `syscall(2)`: the count, or the error it left in `errno`.
fn result(n: libc::c_long) -> io::Result<usize> {
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `recv(fd, buf, len, 0)`.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes.
pub(crate) unsafe fn recv(fd: RawFd, buf: *mut u8, len: usize) -> io::Result<usize> {
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: the caller's promise about `buf`; no address is asked for.
    result(unsafe { libc::syscall(libc::SYS_recvfrom, fd, buf, len, 0, null, null) })
}

/// `send(fd, data, MSG_NOSIGNAL | flags)`.
pub(crate) fn send(fd: RawFd, data: &[u8], flags: libc::c_int) -> io::Result<usize> {
    let null = std::ptr::null::<libc::c_void>();
    // SAFETY: `data` is valid for reads of its length; no address is given.
    result(unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd,
            data.as_ptr(),
            data.len(),
            libc::MSG_NOSIGNAL | flags,
            null,
            0,
        )
    })
}

/// `writev(fd, bufs)`.
pub(crate) fn writev(fd: RawFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    // At most IOV_MAX slices, as `Write::write_vectored` passes them.
    let n = bufs.len().min(1024);
    // SAFETY: `IoSlice` is ABI-compatible with `iovec`, and each is valid for reads.
    result(unsafe { libc::syscall(libc::SYS_writev, fd, bufs.as_ptr(), n) })
}

/// `epoll_wait(epfd, events, events.len(), timeout_ms)`, as `epoll_pwait` with no
/// signal mask (the system call every architecture has).
pub(crate) fn epoll_wait(
    epfd: RawFd,
    events: &mut [libc::epoll_event],
    timeout_ms: i32,
) -> io::Result<usize> {
    let max = events.len().min(i32::MAX as usize);
    let null = std::ptr::null::<libc::sigset_t>();
    // SAFETY: `events` is valid for writes of `max` entries; no signal mask.
    result(unsafe {
        libc::syscall(
            libc::SYS_epoll_pwait,
            epfd,
            events.as_mut_ptr(),
            max as libc::c_int,
            timeout_ms,
            null,
            8usize,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn the_direct_calls_move_bytes_and_report_errors_as_the_wrappers_do() {
        let (a, mut b) = UnixStream::pair().unwrap();
        assert_eq!(send(a.as_raw_fd(), b"hello", 0).unwrap(), 5);
        let bufs = [io::IoSlice::new(b", "), io::IoSlice::new(b"world")];
        assert_eq!(writev(a.as_raw_fd(), &bufs).unwrap(), 7);
        let mut got = [0u8; 12];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello, world");

        b.write_all(b"back").unwrap();
        let mut buf = [0u8; 16];
        // SAFETY: `buf` is valid for 16 bytes.
        let n = unsafe { recv(a.as_raw_fd(), buf.as_mut_ptr(), buf.len()) }.unwrap();
        assert_eq!(&buf[..n], b"back");

        a.set_nonblocking(true).unwrap();
        // SAFETY: as above.
        let e = unsafe { recv(a.as_raw_fd(), buf.as_mut_ptr(), buf.len()) }.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(
            send(-1, b"x", libc::MSG_DONTWAIT)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EBADF)
        );
    }

    #[test]
    fn epoll_wait_returns_what_is_ready() {
        // SAFETY: plain system calls on descriptors owned by this test.
        unsafe {
            let epfd = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            assert!(epfd >= 0);
            let (a, mut b) = UnixStream::pair().unwrap();
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: 7,
            };
            assert_eq!(
                libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, a.as_raw_fd(), &mut ev),
                0
            );
            let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
            assert_eq!(epoll_wait(epfd, &mut events, 0).unwrap(), 0);
            b.write_all(b"x").unwrap();
            assert_eq!(epoll_wait(epfd, &mut events, 1000).unwrap(), 1);
            let key = events[0].u64;
            assert_eq!(key, 7);
            libc::close(epfd);
        }
    }
}
