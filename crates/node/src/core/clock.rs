//! The core's clock: where a slot reads the time and waits for a simulated device.
//!
//! The node runs on [`SystemClock`], the host's monotonic clock. A simulator drives the
//! same slots, queues and dispatcher under a [`VirtualClock`] whose time moves only when
//! it is told to (or when a simulated device "sleeps" on it), so that a run at a scale
//! no machine reaches is deterministic and takes no wall time.
//!
//! What stays on the host's clock: the waits that coordinate threads (a network thread
//! waiting briefly for the call in progress to end, a reconfiguration waiting for its
//! slot to drain — condition variables with a host-time bound) and the watchdog's
//! period. They bound how long a thread blocks, not what a call is measured to take.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A source of time for the core.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The time now.
    fn now(&self) -> Instant;

    /// Returns when the clock reads `at` or later (a simulated device's busy time).
    fn sleep_until(&self, at: Instant);

    /// The time since `earlier`, zero if `earlier` is in the future.
    fn since(&self, earlier: Instant) -> Duration {
        self.now().saturating_duration_since(earlier)
    }
}

/// The host's monotonic clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, at: Instant) {
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
    }
}

/// A clock that moves only when told: it starts at the host's time of its creation
/// and reads that plus the nanoseconds it has been advanced by. A sleep advances it to
/// the wake-up time at once (a virtual device never waits), so time never goes back.
#[derive(Debug)]
pub struct VirtualClock {
    start: Instant,
    elapsed_ns: AtomicU64,
}

impl VirtualClock {
    pub fn new() -> VirtualClock {
        VirtualClock {
            start: Instant::now(),
            elapsed_ns: AtomicU64::new(0),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by_ns = u64::try_from(by.as_nanos()).expect("an advance of under 584 years");
        let before = self.elapsed_ns.fetch_add(by_ns, Ordering::AcqRel);
        assert!(
            before.checked_add(by_ns).is_some(),
            "the virtual clock ran past u64 nanoseconds"
        );
    }

    /// Moves the clock forward to `at`, if it reads earlier.
    pub fn advance_to(&self, at: Instant) {
        let target = u64::try_from(at.saturating_duration_since(self.start).as_nanos())
            .expect("a time within 584 years of the clock's start");
        self.elapsed_ns.fetch_max(target, Ordering::AcqRel);
    }
}

impl Default for VirtualClock {
    fn default() -> VirtualClock {
        VirtualClock::new()
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Instant {
        self.start + Duration::from_nanos(self.elapsed_ns.load(Ordering::Acquire))
    }

    fn sleep_until(&self, at: Instant) {
        self.advance_to(at);
        debug_assert!(
            self.now() >= at,
            "a sleep ends at or after its wake-up time"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_virtual_clock_moves_only_when_told_and_never_back() {
        let clock = VirtualClock::new();
        let t0 = clock.now();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(clock.now(), t0, "host time does not move it");
        clock.advance(Duration::from_micros(5));
        assert_eq!(clock.since(t0), Duration::from_micros(5));
        clock.sleep_until(t0 + Duration::from_secs(3600));
        assert_eq!(
            clock.since(t0),
            Duration::from_secs(3600),
            "an hour's sleep takes no time"
        );
        clock.advance_to(t0);
        assert_eq!(
            clock.since(t0),
            Duration::from_secs(3600),
            "advance_to never goes back"
        );
        assert_eq!(clock.since(t0 + Duration::from_secs(7200)), Duration::ZERO);
    }

    #[test]
    fn the_system_clock_sleeps_until_its_time() {
        let clock = SystemClock;
        let t0 = clock.now();
        clock.sleep_until(t0 + Duration::from_millis(2));
        assert!(clock.since(t0) >= Duration::from_millis(2));
        clock.sleep_until(t0);
    }
}
