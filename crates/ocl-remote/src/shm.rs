//! POSIX shared memory regions for the same-host buffer path.
//!
//! When a client runs on the node's host and the device computes in host memory (a CPU
//! device such as PoCL's), the node backs each of the client's buffers with a region
//! here (`CL_MEM_USE_HOST_PTR`) and tells the client its name; the client maps the same
//! pages and moves buffer data with a plain `memcpy` instead of through the socket.
//! Regions are created mode 0600, so only a client of the node's user can map them;
//! any other client keeps using the network path.
//!
//! A region is named after the process that created it (`netaccel-ocl-<pid>-…`), which
//! unlinks the name when it drops the region. A creator that is killed cannot: the
//! node removes the regions of a runtime process that died ([`remove_regions_of`]),
//! and at start those of every creator that no longer runs
//! ([`remove_orphaned_regions`]), which is what a node killed with SIGKILL (and its
//! runtime processes, which die with it) left. This assumes that every node sharing
//! this `/dev/shm` also shares its pid namespace (as on a host, or in one container or
//! pod): a creator in a pid namespace of its own would look dead to the node.

use std::ffi::{c_void, CString};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where POSIX shared memory names live on Linux.
const SHM_DIR: &str = "/dev/shm";
/// Every region's name begins with this, then its creator's pid and a `-`.
const PREFIX: &str = "netaccel-ocl-";

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
            "/{PREFIX}{}-{seq}-{:016x}",
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

/// The pid of the process that created the region named `name` (a file name in
/// `/dev/shm`), `None` for names not of a region.
fn creator(name: &str) -> Option<u32> {
    let (pid, rest) = name.strip_prefix(PREFIX)?.split_once('-')?;
    (!rest.is_empty()).then_some(())?;
    pid.parse().ok().filter(|&p| p > 0)
}

/// Unlinks the regions of the names in `/dev/shm` for which `remove` says yes (given
/// the creator's pid); returns how many it unlinked.
fn remove_regions(remove: impl Fn(u32) -> bool) -> usize {
    let Ok(dir) = std::fs::read_dir(SHM_DIR) else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| creator(&e.file_name().to_string_lossy()).is_some_and(&remove))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// Unlinks the regions process `pid` created (it has died); returns how many.
pub fn remove_regions_of(pid: u32) -> usize {
    remove_regions(|creator| creator == pid)
}

/// Unlinks the regions whose creator no longer runs (see the module docs); returns
/// how many.
pub fn remove_orphaned_regions() -> usize {
    remove_regions(|pid| !runs(pid))
}

/// Whether process `pid` runs (exists and is not a zombie: a killed runtime process
/// whose parent died may stay one under a init that does not reap).
fn runs(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(pid, 0) } == 0
        || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            // pid (comm) state …; comm may hold spaces and parentheses.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                == Some("Z")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regions_creator_is_read_from_its_name() {
        assert_eq!(creator("netaccel-ocl-1234-0-00ff00ff00ff00ff"), Some(1234));
        for other in [
            "netaccel-ocl-1234",
            "netaccel-ocl-1234-",
            "netaccel-ocl-x-0-0",
            "netaccel-ocl-0-0-0",
            "other-1234-0-0",
            "netaccel-ocl--0-0",
        ] {
            assert_eq!(creator(other), None, "{other}");
        }
        assert!(runs(std::process::id()));
        assert!(!runs(0x7fff_fff0), "no such pid");
    }

    #[test]
    fn only_regions_of_ended_creators_are_removed() {
        let mine = Region::create(4096).unwrap();
        // A region whose creator has ended: a child that has exited and been reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let orphan = format!("{SHM_DIR}/{PREFIX}{dead}-0-test");
        std::fs::write(&orphan, b"").unwrap();
        remove_orphaned_regions();
        assert!(!std::path::Path::new(&orphan).exists(), "{orphan} left");
        assert!(
            Region::open(mine.name(), 4096).is_ok(),
            "a live creator's region went"
        );
    }

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
