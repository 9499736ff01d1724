//! Result status codes (the `status` field of a result header).

use std::fmt;

/// The outcome of a call, as carried in bytes 6..8 of a result header.
///
/// The codes and names are fixed by the protocol; `name()` is the exact upper-case
/// spelling that also appears in HTTP error bodies and in logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u16)]
pub enum Status {
    /// The payload is the output.
    Ok = 0,
    /// Params or payload invalid for the accelerator, or a request id already in flight.
    BadRequest = 1,
    /// No slot on the node hosts that accelerator id.
    UnknownAccelerator = 2,
    /// No reassembly buffer or queue space; the payload was discarded. Retry later.
    Busy = 3,
    /// Payload length above the node's limit. The node closes the connection after it.
    TooLarge = 4,
    /// The deadline passed before execution could start.
    DeadlineExceeded = 5,
    /// The slots for this accelerator are being reconfigured. Retry.
    Unavailable = 6,
    /// Control message without a valid token.
    Unauthorized = 7,
    /// The accelerator failed.
    Internal = 8,
    /// Framing cannot be trusted. The node closes the connection after it.
    ProtocolError = 9,
}

impl Status {
    /// Every status, in code order.
    pub const ALL: [Status; 10] = [
        Status::Ok,
        Status::BadRequest,
        Status::UnknownAccelerator,
        Status::Busy,
        Status::TooLarge,
        Status::DeadlineExceeded,
        Status::Unavailable,
        Status::Unauthorized,
        Status::Internal,
        Status::ProtocolError,
    ];

    /// The wire code.
    pub const fn code(self) -> u16 {
        self as u16
    }

    /// The status for a wire code, `None` for codes v1 does not define.
    pub const fn from_u16(code: u16) -> Option<Status> {
        Some(match code {
            0 => Status::Ok,
            1 => Status::BadRequest,
            2 => Status::UnknownAccelerator,
            3 => Status::Busy,
            4 => Status::TooLarge,
            5 => Status::DeadlineExceeded,
            6 => Status::Unavailable,
            7 => Status::Unauthorized,
            8 => Status::Internal,
            9 => Status::ProtocolError,
            _ => return None,
        })
    }

    /// The protocol's upper-case name: `OK`, `BAD_REQUEST`, …, `PROTOCOL_ERROR`.
    pub const fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::BadRequest => "BAD_REQUEST",
            Status::UnknownAccelerator => "UNKNOWN_ACCELERATOR",
            Status::Busy => "BUSY",
            Status::TooLarge => "TOO_LARGE",
            Status::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Status::Unavailable => "UNAVAILABLE",
            Status::Unauthorized => "UNAUTHORIZED",
            Status::Internal => "INTERNAL",
            Status::ProtocolError => "PROTOCOL_ERROR",
        }
    }

    /// The status with that exact upper-case name.
    pub fn from_name(name: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.name() == name)
    }

    /// True when the node closes the connection right after sending this result:
    /// `TOO_LARGE` (the payload was not read, so the byte stream is out of step) and
    /// `PROTOCOL_ERROR` (the framing cannot be trusted).
    pub const fn closes_connection(self) -> bool {
        matches!(self, Status::TooLarge | Status::ProtocolError)
    }

    /// True for `Status::Ok`.
    pub const fn is_ok(self) -> bool {
        matches!(self, Status::Ok)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_follow_the_table() {
        let names = [
            "OK",
            "BAD_REQUEST",
            "UNKNOWN_ACCELERATOR",
            "BUSY",
            "TOO_LARGE",
            "DEADLINE_EXCEEDED",
            "UNAVAILABLE",
            "UNAUTHORIZED",
            "INTERNAL",
            "PROTOCOL_ERROR",
        ];
        for (code, name) in names.iter().enumerate() {
            let code = code as u16;
            let status = Status::from_u16(code).unwrap();
            assert_eq!(status.code(), code);
            assert_eq!(status.name(), *name);
            assert_eq!(status.to_string(), *name);
            assert_eq!(Status::from_name(name), Some(status));
            assert_eq!(Status::ALL[code as usize], status);
        }
        for code in 10..=u16::MAX {
            assert_eq!(Status::from_u16(code), None);
        }
        assert_eq!(Status::from_name("ok"), None);
    }

    #[test]
    fn only_too_large_and_protocol_error_close_the_connection() {
        let closing: Vec<Status> = Status::ALL
            .into_iter()
            .filter(|s| s.closes_connection())
            .collect();
        assert_eq!(closing, [Status::TooLarge, Status::ProtocolError]);
        assert!(Status::Ok.is_ok());
        assert!(!Status::Busy.is_ok());
    }
}
