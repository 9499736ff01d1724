//! A call's deadline: the instant by which the call must have started running.
//!
//! A client may give one with each call, as a number of microseconds (a `u32`, 0 for
//! none): the `X-Netaccel-Deadline-Us` header over HTTP ([`Deadline::parse_http`]),
//! the `deadline_us` field of the call header over RAC. Either way it counts from the
//! moment the call is whole at the node ([`Deadline::after`]): the time the client
//! takes to send its payload does not count, the time the call waits in a slot's queue
//! does. A slot that picks up a call after its deadline answers `DEADLINE_EXCEEDED`
//! without running it (`slot`); a call that has started runs to completion, as a slot
//! cannot stop one midway.
//!
//! Not to be confused with the timeouts of a connection's reads and writes
//! (`netio::IoTimer`).

use std::time::{Duration, Instant};

/// When a call must start running, if it must.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline(Option<Instant>);

impl Deadline {
    /// No deadline: the call waits in its queue as long as it takes.
    pub const NONE: Deadline = Deadline(None);

    /// The deadline of a call that was whole at `received` and asked to start within
    /// `us` microseconds; `us` = 0 asks for none.
    pub fn after(received: Instant, us: u32) -> Deadline {
        Deadline((us > 0).then(|| received + Duration::from_micros(u64::from(us))))
    }

    /// Whether a call starting at `start` has missed its deadline.
    pub fn passed(self, start: Instant) -> bool {
        self.0.is_some_and(|d| start > d)
    }

    /// The microseconds an `X-Netaccel-Deadline-Us` header value asks for, or why it
    /// cannot be one.
    pub fn parse_http(value: &[u8]) -> Result<u32, &'static str> {
        std::str::from_utf8(value)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .ok_or("X-Netaccel-Deadline-Us must be a whole number of microseconds (u32)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_counts_from_the_whole_call_and_zero_means_none() {
        let received = Instant::now();
        let d = Deadline::after(received, 100);
        assert!(!d.passed(received));
        assert!(!d.passed(received + Duration::from_micros(100)));
        assert!(d.passed(received + Duration::from_micros(101)));
        assert_eq!(Deadline::after(received, 0), Deadline::NONE);
        assert!(!Deadline::NONE.passed(received + Duration::from_secs(3600)));
    }

    #[test]
    fn the_http_header_is_a_u32_of_microseconds() {
        assert_eq!(Deadline::parse_http(b"250"), Ok(250));
        assert_eq!(Deadline::parse_http(b" 0 "), Ok(0));
        assert_eq!(Deadline::parse_http(b"4294967295"), Ok(u32::MAX));
        for bad in [&b"4294967296"[..], b"-1", b"1.5", b"", b"soon", b"\xff"] {
            assert!(Deadline::parse_http(bad).is_err(), "{bad:?}");
        }
    }
}
