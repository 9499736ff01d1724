//! A `memfd` mapped shared and writable: the pages that the node and a runtime
//! process both read and write without messages — the busy page ([`super::busy`]) and
//! the metrics page ([`super::metrics`]). The node creates the file (close-on-exec; it
//! hands the fd to its runtime process explicitly), the process maps the fd it was
//! given; each side unmaps on drop.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

/// A shared, writable mapping of a whole `memfd` of `len` bytes.
pub(crate) struct SharedMap {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is plain memory; what is stored in it (atomics only, by both
// users) decides how it may be shared, and each user states that for its own type.
unsafe impl Send for SharedMap {}
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// A new file of `len` zero bytes named `name` (the name only shows in
    /// `/proc/PID/fd`), mapped.
    pub fn create(name: &CStr, len: usize) -> io::Result<SharedMap> {
        // SAFETY: a valid C string; the fd is owned at once.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `fd` is a valid memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Self::map(fd, len)
    }

    /// Maps the first `len` bytes of the file another process handed over as `fd`;
    /// refused when the file is shorter (touching past its end would be SIGBUS).
    pub fn from_fd(fd: OwnedFd, len: usize) -> io::Result<SharedMap> {
        // SAFETY: all-zero bits are a valid `stat`; it is only an out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd and out-pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if (st.st_size as usize) < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("shared page of {} bytes, {len} expected", st.st_size),
            ));
        }
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<SharedMap> {
        // SAFETY: maps `len` bytes of a file at least that long; unmapped on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMap {
            ptr: NonNull::new(ptr.cast()).expect("mmap does not return null"),
            len,
            fd,
        })
    }

    /// The start of the mapping, valid for `len` bytes as long as `self` lives.
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `len` bytes.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_handed_over_sees_the_same_bytes_and_a_short_file_is_refused() {
        let a = SharedMap::create(c"test", 4096).unwrap();
        // SAFETY: within the 4096 bytes mapped.
        unsafe { a.ptr().as_ptr().add(100).write(7) };
        let b = SharedMap::from_fd(a.fd().try_clone().unwrap(), 4096).unwrap();
        // SAFETY: within the 4096 bytes mapped.
        assert_eq!(unsafe { b.ptr().as_ptr().add(100).read() }, 7);
        let err = SharedMap::from_fd(a.fd().try_clone().unwrap(), 8192)
            .err()
            .unwrap();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
