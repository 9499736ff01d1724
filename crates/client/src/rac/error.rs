//! The RAC client's errors, typed: one home for what a call can fail with and for the
//! kind words every netaccel client (Go, TypeScript, Java, Python, C) uses for them
//! (`clients/conformance/README.md`, "Error kinds").
//!
//! Callers match [`RacError`]'s variants to see *where* a failure came from (the node's
//! answer to this call, its answer to the whole connection, a reply this client refuses,
//! a connection that ended) and ask [`RacError::kind`] and [`RacError::retry_after`] for
//! *what to do*, without reading messages.

use std::fmt;
use std::time::Duration;

use rac_proto::{ResultHeader, Status};

/// The retry hint of a BUSY or UNAVAILABLE refusal: RAC v1 carries none, and the node's
/// HTTP front end answers the same refusals with `Retry-After: 1`.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What went wrong, in the words every netaccel client uses ([`ErrorKind::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// BAD_REQUEST, or the client refused the params or payload itself.
    BadRequest,
    /// UNKNOWN_ACCELERATOR, or no such name in the client's catalog.
    UnknownAccelerator,
    /// BUSY: retry after [`RETRY_AFTER`].
    Busy,
    /// TOO_LARGE (the node closes the connection).
    TooLarge,
    /// DEADLINE_EXCEEDED.
    Deadline,
    /// UNAVAILABLE: retry after [`RETRY_AFTER`].
    Unavailable,
    /// UNAUTHORIZED (a `hello` with a wrong token, a tenant without the right).
    Unauthorized,
    /// INTERNAL.
    Internal,
    /// PROTOCOL_ERROR from the node, or a reply this client refuses to decode.
    Protocol,
    /// The connection closed or failed before the result (whole or in part).
    Closed,
    /// No connection: refused, unreachable, bad name, TLS handshake failed.
    Connect,
}

impl ErrorKind {
    /// The kind of a node's answer with `status`; `None` for `OK`.
    pub fn of_status(status: Status) -> Option<ErrorKind> {
        Some(match status {
            Status::Ok => return None,
            Status::BadRequest => ErrorKind::BadRequest,
            Status::UnknownAccelerator => ErrorKind::UnknownAccelerator,
            Status::Busy => ErrorKind::Busy,
            Status::TooLarge => ErrorKind::TooLarge,
            Status::DeadlineExceeded => ErrorKind::Deadline,
            Status::Unavailable => ErrorKind::Unavailable,
            Status::Unauthorized => ErrorKind::Unauthorized,
            Status::Internal => ErrorKind::Internal,
            Status::ProtocolError => ErrorKind::Protocol,
        })
    }

    /// The kind's word, as the other clients and the conformance suite spell it.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::UnknownAccelerator => "unknown_accelerator",
            ErrorKind::Busy => "busy",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::Deadline => "deadline",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Internal => "internal",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Closed => "closed",
            ErrorKind::Connect => "connect",
        }
    }

    /// How long to wait before the same call may succeed: `Some` for BUSY and
    /// UNAVAILABLE only.
    pub fn retry_after(self) -> Option<Duration> {
        matches!(self, ErrorKind::Busy | ErrorKind::Unavailable).then_some(RETRY_AFTER)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Every failure of [`RacClient`](super::RacClient).
///
/// ```
/// use netaccel_client::rac::{ErrorKind, RacError};
/// use rac_proto::Status;
/// let e = RacError::Refused { status: Status::Busy, message: "connection bound".into() };
/// assert_eq!(e.kind(), ErrorKind::Busy);
/// assert_eq!(e.retry_after(), Some(std::time::Duration::from_secs(1)));
/// assert_eq!(RacError::Closed("reset".into()).retry_after(), None);
/// ```
#[derive(Debug, Clone)]
pub enum RacError {
    /// No connection could be made to `addr` (nothing listening, unreachable, bad
    /// name, TLS configuration or handshake failed).
    Connect { addr: String, reason: String },
    /// The node answered this call with a status other than `OK`.
    Status {
        status: Status,
        message: String,
        header: Box<ResultHeader>,
    },
    /// The node answered the whole connection (a result with request id 0: BUSY at
    /// its connection bound, PROTOCOL_ERROR for a frame it could not read) and
    /// closed it: every call in flight and every later call on it fails so.
    Refused { status: Status, message: String },
    /// The node sent a reply this client refuses to decode (bad magic, an undefined
    /// status, non-zero reserved bytes, a payload over the bound); the connection is
    /// dropped.
    Protocol(String),
    /// The connection closed or failed before the result arrived (whole or in part),
    /// or was already closed when the call was made.
    Closed(String),
    /// The client refused the call itself: `name` is no built-in accelerator.
    NotBuiltin(String),
}

impl RacError {
    /// What went wrong, in the words every netaccel client uses.
    pub fn kind(&self) -> ErrorKind {
        match self {
            RacError::Connect { .. } => ErrorKind::Connect,
            RacError::Status { status, .. } | RacError::Refused { status, .. } => {
                ErrorKind::of_status(*status).expect("an error never carries OK")
            }
            RacError::Protocol(_) => ErrorKind::Protocol,
            RacError::Closed(_) => ErrorKind::Closed,
            RacError::NotBuiltin(_) => ErrorKind::UnknownAccelerator,
        }
    }

    /// The node's status, when the node answered one (to this call or to the
    /// connection).
    pub fn status(&self) -> Option<Status> {
        match self {
            RacError::Status { status, .. } | RacError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// How long to wait before retrying: `Some` for BUSY and UNAVAILABLE only.
    pub fn retry_after(&self) -> Option<Duration> {
        self.kind().retry_after()
    }

    /// The connection this error came from cannot carry more calls (reconnect).
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            RacError::Connect { .. }
                | RacError::Refused { .. }
                | RacError::Protocol(_)
                | RacError::Closed(_)
        )
    }
}

impl fmt::Display for RacError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RacError::Connect { addr, reason } => {
                write!(f, "cannot connect to the RAC listener at {addr}: {reason}")
            }
            RacError::Status {
                status, message, ..
            } => write!(f, "{status}: {message}"),
            RacError::Refused { status, message } => {
                write!(f, "the node refused the connection: {status}: {message}")
            }
            RacError::Protocol(m) => write!(f, "RAC connection: bad reply: {m}"),
            RacError::Closed(m) => write!(f, "RAC connection: {m}"),
            RacError::NotBuiltin(name) => {
                write!(
                    f,
                    "{name} is not a built-in accelerator; RAC calls need its id"
                )
            }
        }
    }
}

impl std::error::Error for RacError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_but_ok_has_a_kind_and_only_busy_and_unavailable_a_retry_hint() {
        assert_eq!(ErrorKind::of_status(Status::Ok), None);
        for status in Status::ALL.into_iter().filter(|s| *s != Status::Ok) {
            let kind = ErrorKind::of_status(status).expect("a kind");
            let retryable = matches!(status, Status::Busy | Status::Unavailable);
            assert_eq!(kind.retry_after().is_some(), retryable, "{status}");
            assert_ne!(kind, ErrorKind::Closed);
            assert_ne!(kind, ErrorKind::Connect);
        }
    }

    #[test]
    fn errors_of_the_connection_say_so_and_answers_to_a_call_do_not() {
        let call = rac_proto::CallHeader::call(1, 7, 0, [0; 44]);
        let header = Box::new(ResultHeader::answer(&call, Status::Busy, 0));
        let answer = RacError::Status {
            status: Status::Busy,
            message: String::new(),
            header,
        };
        assert!(!answer.is_connection_lost());
        assert_eq!(answer.status(), Some(Status::Busy));
        let refused = RacError::Refused {
            status: Status::ProtocolError,
            message: String::new(),
        };
        assert!(refused.is_connection_lost());
        assert_eq!(refused.kind(), ErrorKind::Protocol);
        assert_eq!(RacError::Protocol(String::new()).status(), None);
        assert_eq!(
            RacError::NotBuiltin("x".into()).kind().name(),
            "unknown_accelerator"
        );
    }
}
