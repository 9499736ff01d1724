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
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::mapped::SharedMap;

/// Devices one page can time (`4096 / 8`); devices past it go untimed.
pub(crate) const DEVICES_MAX: usize = 512;
const PAGE_BYTES: usize = DEVICES_MAX * 8;

/// A mapped busy page (see the module docs).
pub(crate) struct BusyPage {
    map: SharedMap,
}

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
        SharedMap::create(c"netaccel-ocl-busy", PAGE_BYTES).map(|map| BusyPage { map })
    }

    /// Maps the page the node handed over as `fd` (the runtime process's side).
    pub fn from_fd(fd: OwnedFd) -> io::Result<BusyPage> {
        SharedMap::from_fd(fd, PAGE_BYTES).map(|map| BusyPage { map })
    }

    pub fn fd(&self) -> &OwnedFd {
        self.map.fd()
    }

    fn slot(&self, device: usize) -> Option<&AtomicU64> {
        // SAFETY: in bounds of the mapping (PAGE_BYTES of atomics), which lives as
        // long as `self`; every bit pattern is a valid AtomicU64.
        (device < DEVICES_MAX)
            .then(|| unsafe { &*self.map.ptr().as_ptr().cast::<AtomicU64>().add(device) })
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
