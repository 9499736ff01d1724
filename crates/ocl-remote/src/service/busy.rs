//! When each device of an isolated runtime process began the task it is running: one
//! page of memory shared between the node and the process (a `memfd`), so that the
//! node can bound how long a kernel runs without any message on the task path.
//!
//! The runtime process writes the start time (`CLOCK_MONOTONIC`, which all processes
//! of the machine share) into its device's slot when a task starts and zero when it
//! ends: two relaxed stores per task, no system call. The node's watchdog reads the
//! slots; a process whose kernel is hostile (`while(1);`) cannot stop the node from
//! reading them or from killing it. A slot the process corrupts can at worst make the
//! node kill that process early or late, which only harms the process's own session.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Devices one page can time (`4096 / 8`); devices past it go untimed.
pub(crate) const DEVICES_MAX: usize = 512;
const PAGE_BYTES: usize = DEVICES_MAX * 8;

/// A mapped busy page (see the module docs).
pub(crate) struct BusyPage {
    slots: *const AtomicU64,
    fd: OwnedFd,
}

// SAFETY: the page is only accessed through atomics.
unsafe impl Send for BusyPage {}
unsafe impl Sync for BusyPage {}

/// Now on the machine-wide monotonic clock, in nanoseconds.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl BusyPage {
    /// A new zeroed page (the node's side). The fd is close-on-exec; the node hands it
    /// to the runtime process explicitly.
    pub fn create() -> io::Result<BusyPage> {
        // SAFETY: a valid C string; the fd is owned at once.
        let fd = unsafe { libc::memfd_create(c"netaccel-ocl-busy".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `fd` is a valid memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), PAGE_BYTES as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Self::map(fd)
    }

    /// Maps the page the node handed over as `fd` (the runtime process's side).
    pub fn from_fd(fd: OwnedFd) -> io::Result<BusyPage> {
        Self::map(fd)
    }

    fn map(fd: OwnedFd) -> io::Result<BusyPage> {
        // SAFETY: maps PAGE_BYTES of a file at least that long; unmapped on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(BusyPage {
            slots: ptr.cast(),
            fd,
        })
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    fn slot(&self, device: usize) -> Option<&AtomicU64> {
        // SAFETY: in bounds of the mapping, which lives as long as `self`.
        (device < DEVICES_MAX).then(|| unsafe { &*self.slots.add(device) })
    }

    /// Marks `device` busy until the guard drops.
    pub fn begin(&self, device: usize) -> BusyGuard<'_> {
        let slot = self.slot(device);
        if let Some(s) = slot {
            // Zero means idle, so a start at the clock's zero still reads as busy.
            s.store(monotonic_ns().max(1), Ordering::Relaxed);
        }
        BusyGuard { slot }
    }

    /// The devices marked busy now (of a process that has died: the devices whose
    /// task it never finished).
    pub fn running(&self) -> Vec<usize> {
        (0..DEVICES_MAX)
            .filter(|&d| self.slot(d).is_some_and(|s| s.load(Ordering::Relaxed) != 0))
            .collect()
    }

    /// How long the longest-running task of the process has run, `None` when idle.
    pub fn longest(&self) -> Option<Duration> {
        let now = monotonic_ns();
        (0..DEVICES_MAX)
            .filter_map(|d| self.slot(d))
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&start| start != 0)
            .map(|start| Duration::from_nanos(now.saturating_sub(start)))
            .max()
    }
}

impl Drop for BusyPage {
    fn drop(&mut self) {
        // SAFETY: our own mapping of PAGE_BYTES.
        unsafe { libc::munmap(self.slots as *mut libc::c_void, PAGE_BYTES) };
    }
}

/// Marks a device idle again when dropped.
pub(crate) struct BusyGuard<'a> {
    slot: Option<&'a AtomicU64>,
}

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.slot {
            s.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_seen_running_through_a_second_mapping_and_idle_after() {
        let node = BusyPage::create().unwrap();
        let runtime = BusyPage::from_fd(node.fd().try_clone().unwrap()).unwrap();
        assert_eq!(node.longest(), None);
        let guard = runtime.begin(3);
        assert_eq!(node.running(), vec![3]);
        std::thread::sleep(Duration::from_millis(20));
        let ran = node.longest().expect("busy");
        assert!(ran >= Duration::from_millis(20), "{ran:?}");
        drop(guard);
        assert_eq!(node.longest(), None);
        // A device past the page is not timed, and does not fault.
        drop(runtime.begin(DEVICES_MAX + 1));
    }
}
