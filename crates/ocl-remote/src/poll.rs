//! Waiting for a socket without paying for a wake-up when the answer is quick.
//!
//! A thread that sleeps in `read` costs a wake-up when data arrives: about 10 µs on a
//! loaded virtual machine, which is a large share of a short task's round trip (a
//! loopback ping-pong measured 24 µs at the median sleeping and 10 µs polling on the
//! 2-core machine of `docs/benchmarks.md`). Both ends therefore poll their socket for a
//! short, bounded time before they sleep.
//!
//! The polling thread does not yield its core between polls. It used to, so that a
//! device thread sharing the core could run, but a yield may hand the core to any
//! runnable thread, also one of the lowest class (`SCHED_IDLE`, or a low `nice`), which
//! then keeps it until the next scheduler tick: with such threads on the machine, 1–3 %
//! of 64 B tasks took 2–3 ms (p99 2.0–2.9 ms against 40–140 µs without yielding; medians
//! alike, 5 rounds each). Without yielding, what a poller can take from a thread on its
//! core is bounded by the polling bound.
//!
//! Polling only pays when answers come within the bound; a peer that takes longer (a
//! 1 MiB copy, a long kernel) would only have its core taken. [`AdaptiveSpin`] therefore
//! polls only while the previous wait on the same socket was short, as adaptive mutexes
//! do.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The polling bound both ends use unless configured otherwise.
pub const SPIN_DEFAULT: Duration = Duration::from_micros(50);
/// The longest polling bound either end accepts: beyond it a poller would hold a core
/// the device's threads need for longer than a sleep and a wake-up cost.
pub const SPIN_MAX: Duration = Duration::from_micros(10_000);

/// True when `fd` has bytes (or an end of stream) waiting, after at most `timeout_ms`.
pub fn readable(fd: RawFd, timeout_ms: i32) -> bool {
    readable_either(fd, None, timeout_ms).0
}

/// Waits up to `timeout_ms` until `fd` or `other` (if any) is readable; says which are.
fn readable_either(fd: RawFd, other: Option<RawFd>, timeout_ms: i32) -> (bool, bool) {
    let entry = |fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let mut pfds = [entry(fd), entry(other.unwrap_or(-1))];
    let n = if other.is_some() { 2 } else { 1 };
    // SAFETY: `n` valid pollfds.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), n, timeout_ms) };
    if rc <= 0 {
        return (false, false);
    }
    (pfds[0].revents != 0, n == 2 && pfds[1].revents != 0)
}

/// Polls `fd` for up to `bound`, without yielding the core; returns whether it
/// became readable. The caller then reads (blocking) as usual either way.
pub fn spin_until_readable(fd: RawFd, bound: Duration) -> bool {
    if bound.is_zero() {
        return false;
    }
    let start = Instant::now();
    loop {
        if readable(fd, 0) {
            return true;
        }
        if start.elapsed() >= bound {
            return false;
        }
        std::hint::spin_loop();
    }
}

/// Waits until a socket is readable, polling first while recent waits were short.
pub struct AdaptiveSpin {
    bound: Duration,
    /// Whether the last wait ended within `bound`.
    short: AtomicBool,
}

impl AdaptiveSpin {
    pub fn new(bound: Duration) -> AdaptiveSpin {
        AdaptiveSpin {
            bound,
            short: AtomicBool::new(true),
        }
    }

    /// Returns once `fd` is readable (or at an end of stream or error, which the
    /// following read reports).
    pub fn wait(&self, fd: RawFd) {
        if self.bound.is_zero() {
            return;
        }
        let start = Instant::now();
        let ready = self.short.load(Ordering::Relaxed) && spin_until_readable(fd, self.bound);
        if !ready {
            readable(fd, -1);
        }
        self.short
            .store(start.elapsed() <= self.bound, Ordering::Relaxed);
    }

    /// [`AdaptiveSpin::wait`] that also returns when `wake` becomes readable: another
    /// thread has news for the waiter that will not come through `fd` (an eventfd, say).
    /// Returns whether `fd` is readable; the caller drains `wake`.
    pub fn wait_or_wake(&self, fd: RawFd, wake: RawFd) -> bool {
        let start = Instant::now();
        if self.short.load(Ordering::Relaxed) && spin_until_readable(fd, self.bound) {
            return true;
        }
        let (ready, _) = readable_either(fd, Some(wake), -1);
        self.short
            .store(start.elapsed() <= self.bound, Ordering::Relaxed);
        ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn spinning_sees_data_that_is_there_and_gives_up_when_none_comes() {
        let (mut a, b) = UnixStream::pair().unwrap();
        assert!(!spin_until_readable(
            b.as_raw_fd(),
            Duration::from_micros(200)
        ));
        assert!(!spin_until_readable(b.as_raw_fd(), Duration::ZERO));
        a.write_all(b"x").unwrap();
        assert!(spin_until_readable(
            b.as_raw_fd(),
            Duration::from_micros(200)
        ));
        assert!(readable(b.as_raw_fd(), 0));
    }

    #[test]
    fn a_wake_ends_the_wait_for_a_quiet_socket() {
        let (_a, b) = UnixStream::pair().unwrap();
        let (mut wake_tx, wake_rx) = UnixStream::pair().unwrap();
        let spin = AdaptiveSpin::new(Duration::from_micros(100));
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            wake_tx.write_all(b"w").unwrap();
            wake_tx
        });
        // Returns (the socket stays quiet) instead of waiting forever.
        assert!(!spin.wait_or_wake(b.as_raw_fd(), wake_rx.as_raw_fd()));
        let _tx = waker.join().unwrap();
    }

    #[test]
    fn adaptive_spinning_stops_after_a_long_wait_and_resumes_after_a_short_one() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let spin = AdaptiveSpin::new(Duration::from_micros(100));
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            a.write_all(b"x").unwrap();
            a
        });
        spin.wait(b.as_raw_fd());
        assert!(!spin.short.load(Ordering::Relaxed), "a 20 ms wait is long");
        let _a = writer.join().unwrap();
        spin.wait(b.as_raw_fd()); // the byte is still there: returns at once
        assert!(spin.short.load(Ordering::Relaxed));
    }
}
