//! POSIX shared memory regions for the same-host buffer path.
//!
//! When a client runs on the node's host and the device computes in host memory (a CPU
//! device such as PoCL's), the node backs each of the client's buffers with a region
//! here (`CL_MEM_USE_HOST_PTR`) and tells the client its name; the client maps the same
//! pages and moves buffer data with a plain `memcpy` instead of through the socket.
//! Regions are created mode 0600, so only a client of the node's user can map them;
//! any other client keeps using the network path.

use std::ffi::{c_void, CString};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// A mapped shared memory region. The creator unlinks the name when it drops the region.
pub struct Region {
    ptr: *mut u8,
    len: usize,
    name: CString,
    owner: bool,
}

// SAFETY: the region is plain memory; callers synchronise access to its contents.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    /// Creates and maps a new region of `len` bytes with a fresh, hard-to-guess name.
    pub fn create(len: usize) -> io::Result<Region> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let mut nonce = [0u8; 8];
        // SAFETY: getrandom writes at most 8 bytes into the buffer.
        unsafe { libc::getrandom(nonce.as_mut_ptr().cast(), nonce.len(), 0) };
        let name = format!(
            "/netaccel-ocl-{}-{seq}-{:016x}",
            std::process::id(),
            u64::from_ne_bytes(nonce)
        );
        let name = CString::new(name).expect("no NUL in name");
        // SAFETY: valid C string; the fd is closed below, the mapping keeps the pages.
        unsafe {
            let fd = libc::shm_open(
                name.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o600,
            );
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let unlink_name = name.clone();
            let region = Self::map(fd, len, name, true);
            if region.is_err() {
                libc::shm_unlink(unlink_name.as_ptr());
            }
            region
        }
    }

    /// Maps an existing region created by the peer.
    pub fn open(name: &[u8], len: usize) -> io::Result<Region> {
        let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: valid C string.
        unsafe {
            let fd = libc::shm_open(name.as_ptr(), libc::O_RDWR, 0);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            Self::map(fd, len, name, false)
        }
    }

    unsafe fn map(fd: i32, len: usize, name: CString, create: bool) -> io::Result<Region> {
        if create && libc::ftruncate(fd, len as libc::off_t) != 0 {
            let e = io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        let ptr = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        libc::close(fd);
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Region {
            ptr: ptr.cast(),
            len,
            name,
            owner: create,
        })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn name(&self) -> &[u8] {
        self.name.as_bytes()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: we own the mapping; the name is unlinked once, by its creator.
        unsafe {
            libc::munmap(self.ptr as *mut c_void, self.len);
            if self.owner {
                libc::shm_unlink(self.name.as_ptr());
            }
        }
    }
}

/// Identifies this machine and boot: equal ids mean client and node share memory.
pub fn host_id() -> Vec<u8> {
    let mut id = std::fs::read("/etc/machine-id").unwrap_or_default();
    id.extend(std::fs::read("/proc/sys/kernel/random/boot_id").unwrap_or_default());
    id.retain(|b| !b.is_ascii_whitespace());
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_is_shared_with_whoever_opens_its_name() {
        let a = Region::create(8192).unwrap();
        let b = Region::open(a.name(), 8192).unwrap();
        // SAFETY: both map 8192 bytes.
        unsafe {
            *a.ptr().add(100) = 42;
            assert_eq!(*b.ptr().add(100), 42);
        }
        let name = a.name().to_vec();
        drop(a);
        assert!(
            Region::open(&name, 8192).is_err(),
            "the creator unlinks the name"
        );
    }
}
