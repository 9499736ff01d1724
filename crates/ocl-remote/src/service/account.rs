//! A tenant's OpenCL memory over all its sessions: one counter in shared memory.
//!
//! Each session counts its own buffers and images ([`super::session`]'s quota, bounded
//! by `buffer_bytes_max`); a tenant with a memory quota (the node's
//! `opencl_bytes_max`) also has one [`TenantMemory`] that every session of the tenant
//! counts into, whichever process it runs in: the node creates it (a `memfd` page),
//! admits sessions with it ([`super::gate::Admission`]) and hands it to the runtime
//! processes with their connections, which map it. An allocation is checked against
//! both bounds before the runtime sees it.
//!
//! The counter is the processes' to keep right: a session adds what it allocates and
//! takes it off when the storage is released. A runtime process that dies cannot take
//! off what its sessions held, so the node does ([`super::isolate`]): a process with
//! one session gives back the bytes its metrics page says it held; a shared process
//! held every session of the tenants it served, whose counters start again from zero.
//! A process that writes garbage into the page can only refuse or admit its own
//! tenant's allocations wrongly.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::mapped::SharedMap;

/// One tenant's counter (see the module docs).
pub struct TenantMemory {
    map: SharedMap,
    max: u64,
}

/// The page holds two `u64`s: the bytes held, and the allocations refused for the
/// tenant's bound (for the node's `/metrics`).
const PAGE_BYTES: usize = 16;

impl TenantMemory {
    /// A new counter at zero with bound `max` (the node's side).
    pub fn create(max: u64) -> io::Result<Arc<TenantMemory>> {
        let map = SharedMap::create(c"netaccel-ocl-tenant", PAGE_BYTES)?;
        Ok(Arc::new(TenantMemory { map, max }))
    }

    /// Maps the counter the node handed over as `fd` (a runtime process's side).
    pub(crate) fn from_fd(fd: OwnedFd, max: u64) -> io::Result<TenantMemory> {
        let map = SharedMap::from_fd(fd, PAGE_BYTES)?;
        Ok(TenantMemory { map, max })
    }

    pub(crate) fn fd(&self) -> &OwnedFd {
        self.map.fd()
    }

    fn word(&self, index: usize) -> &AtomicU64 {
        assert!(index < PAGE_BYTES / 8);
        // SAFETY: in bounds of the mapping (PAGE_BYTES, page-aligned), which lives as
        // long as `self`; every bit pattern is a valid AtomicU64.
        unsafe { &*self.map.ptr().as_ptr().cast::<AtomicU64>().add(index) }
    }

    fn counter(&self) -> &AtomicU64 {
        self.word(0)
    }

    /// Allocations refused for the tenant's bound so far.
    pub fn refusals(&self) -> u64 {
        self.word(1).load(Ordering::Relaxed)
    }

    /// Counts one allocation refused for the tenant's bound.
    pub(crate) fn count_refusal(&self) {
        self.word(1).fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes the tenant's sessions hold now.
    pub fn used(&self) -> u64 {
        self.counter().load(Ordering::Relaxed)
    }

    /// The tenant's bound.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Whether `bytes` more fit. Allocations of several sessions at the same moment
    /// may pass together, by one allocation each (as within one session's threads).
    pub(crate) fn admits(&self, bytes: u64) -> bool {
        self.used().saturating_add(bytes) <= self.max
    }

    pub(crate) fn add(&self, bytes: u64) {
        self.counter().fetch_add(bytes, Ordering::Relaxed);
    }

    /// Takes `bytes` off (never below zero: a garbled page must not wrap).
    pub(crate) fn give_back(&self, bytes: u64) {
        let _ = self
            .counter()
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_sub(bytes))
            });
    }

    /// Starts from zero: every session that counted here has ended.
    pub(crate) fn reset(&self) {
        self.counter().store(0, Ordering::Relaxed);
    }

    /// The page's identity (device and inode), the same in every process that maps it.
    fn identity(&self) -> Option<(u64, u64)> {
        // SAFETY: a valid descriptor and out-pointer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::fstat(self.fd().as_raw_fd(), &mut st) };
        (rc == 0).then_some((st.st_dev, st.st_ino))
    }
}

impl std::fmt::Debug for TenantMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantMemory")
            .field("used", &self.used())
            .field("max", &self.max)
            .finish()
    }
}

/// The same counter: the same page (wherever it is mapped) and bound.
impl PartialEq for TenantMemory {
    fn eq(&self, other: &TenantMemory) -> bool {
        self.max == other.max && self.identity().is_some() && self.identity() == other.identity()
    }
}

impl Eq for TenantMemory {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_mappings_count_into_one_bound() {
        let node = TenantMemory::create(100).unwrap();
        let other = TenantMemory::from_fd(node.fd().try_clone().unwrap(), 100).unwrap();
        assert_eq!(*node, other);
        other.add(60);
        assert_eq!(node.used(), 60);
        assert!(node.admits(40) && !node.admits(41));
        node.give_back(100);
        assert_eq!(other.used(), 0, "never below zero");
        other.add(7);
        node.reset();
        assert_eq!(other.used(), 0);
        other.count_refusal();
        assert_eq!(node.refusals(), 1);
        assert_ne!(*node, *TenantMemory::create(100).unwrap());
    }
}
