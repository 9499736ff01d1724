//! The netaccel RAC client for C programs: the Rust client (`netaccel-client`) behind
//! a C ABI, built as `libnetaccel.so` and `libnetaccel.a`, declared in
//! `include/netaccel.h` (the one header C code includes; its comments are the API
//! reference) and found by `pkg-config netaccel` once installed (`install.sh`).
//!
//! A connection ([`Connection`], `conn.rs`) is blocking and runs on the C caller's
//! thread alone — no runtime, no thread of its own: a call is one write and one read,
//! as a C program's own socket code would make it; pipelined calls are written at
//! `submit` and read at `poll`. The frames are `rac-proto`'s, the TLS configuration
//! and the registry's binding the Rust client's; this crate adds the C types, error
//! kinds and the bound on calls in flight.
//!
//! Not for: Rust programs (use `netaccel-client`), or sharing one handle between
//! threads at the same time (one thread at a time per handle, as with a `FILE *`).

#![allow(clippy::missing_safety_doc)] // each function's safety contract is in netaccel.h

mod conn;
pub mod ffi;

pub use conn::Connection;

use netaccel_client::rac::{ErrorKind, RacError};
use rac_proto::Status;

/// Error kinds, as `enum netaccel_kind` in netaccel.h declares them (a unit test checks
/// that both say the same).
pub mod kind {
    pub const OK: i32 = 0;
    pub const BAD_REQUEST: i32 = 1;
    pub const UNKNOWN_ACCELERATOR: i32 = 2;
    pub const BUSY: i32 = 3;
    pub const TOO_LARGE: i32 = 4;
    pub const DEADLINE: i32 = 5;
    pub const UNAVAILABLE: i32 = 6;
    pub const UNAUTHORIZED: i32 = 7;
    pub const INTERNAL: i32 = 8;
    pub const PROTOCOL: i32 = 9;
    pub const CLOSED: i32 = 10;
    pub const CONNECT: i32 = 11;
    pub const REGISTRY: i32 = 12;
    /// `netaccel_submit` with `in_flight_max` calls in flight: poll first.
    pub const FULL: i32 = 13;
    /// `netaccel_poll` found no result within its wait (or no call in flight).
    pub const NONE: i32 = 14;
    /// A NULL or non-UTF-8 argument, or a bad option.
    pub const INVALID: i32 = 15;

    /// The names `netaccel_kind_name` returns, by kind.
    pub const NAMES: [&str; 16] = [
        "ok",
        "bad_request",
        "unknown_accelerator",
        "busy",
        "too_large",
        "deadline",
        "unavailable",
        "unauthorized",
        "internal",
        "protocol",
        "closed",
        "connect",
        "registry",
        "full",
        "none",
        "invalid",
    ];
}

/// The retry hint of a BUSY or UNAVAILABLE refusal, the Rust client's
/// ([`netaccel_client::rac::RETRY_AFTER`]).
pub const RETRY_AFTER_MS: u32 = netaccel_client::rac::RETRY_AFTER.as_millis() as u32;

/// Calls in flight on one connection when the options say 0: the Rust client's
/// default ([`netaccel_client::rac::IN_FLIGHT_MAX_DEFAULT`], the node's own bound).
pub const IN_FLIGHT_MAX_DEFAULT: u32 = netaccel_client::rac::IN_FLIGHT_MAX_DEFAULT as u32;

/// An error as the C caller sees it (kind, the node's status, a retry hint, a sentence).
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub kind: i32,
    /// The node's RAC status code when it answered one, else `0xFFFF`.
    pub status: u16,
    pub retry_after_ms: u32,
    pub message: String,
}

impl Failure {
    pub fn new(kind: i32, message: impl Into<String>) -> Failure {
        debug_assert!(kind != kind::OK);
        Failure {
            kind,
            status: 0xFFFF,
            retry_after_ms: 0,
            message: message.into(),
        }
    }

    /// The failure of a node's answer with `status` (not OK).
    pub fn from_status(status: Status, message: &str) -> Failure {
        let kind = ErrorKind::of_status(status).expect("an OK answer is no failure");
        Failure {
            kind: kind_code(kind),
            status: status.code(),
            retry_after_ms: kind.retry_after().map_or(0, |d| d.as_millis() as u32),
            message: message.to_string(),
        }
    }

    /// The Rust client's error, by its variant: the node's answer (to the call or to
    /// the connection) keeps its status; the rest is the error's kind.
    pub fn from_rac(e: &RacError) -> Failure {
        match e {
            RacError::Status {
                status, message, ..
            }
            | RacError::Refused { status, message } => Failure::from_status(*status, message),
            _ => Failure::new(kind_code(e.kind()), e.to_string()),
        }
    }
}

/// The C kind (`enum netaccel_kind`) of the Rust client's [`ErrorKind`].
pub fn kind_code(k: ErrorKind) -> i32 {
    match k {
        ErrorKind::BadRequest => kind::BAD_REQUEST,
        ErrorKind::UnknownAccelerator => kind::UNKNOWN_ACCELERATOR,
        ErrorKind::Busy => kind::BUSY,
        ErrorKind::TooLarge => kind::TOO_LARGE,
        ErrorKind::Deadline => kind::DEADLINE,
        ErrorKind::Unavailable => kind::UNAVAILABLE,
        ErrorKind::Unauthorized => kind::UNAUTHORIZED,
        ErrorKind::Internal => kind::INTERNAL,
        ErrorKind::Protocol => kind::PROTOCOL,
        ErrorKind::Closed => kind::CLOSED,
        ErrorKind::Connect => kind::CONNECT,
    }
}

/// What `netaccel_connect` takes, in Rust terms.
#[derive(Debug, Default, Clone)]
pub struct Options {
    pub tls_ca: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
    pub tenant: Option<String>,
    pub token: Option<String>,
    pub in_flight_max: u32,
}

/// One call: the accelerator's id and parameter block, the payload, the deadline.
#[derive(Debug)]
pub struct Call {
    pub accel_id: u16,
    pub params: rac_proto::ParamBlock,
    pub payload: Vec<u8>,
    pub deadline_us: u32,
}

/// `name=value,name=value` (the C API's way of giving parameters by name) as pairs.
pub fn parse_params(text: &str) -> Result<Vec<(String, String)>, Failure> {
    text.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                Ok((k.trim().to_string(), v.trim().to_string()))
            }
            _ => Err(Failure::new(
                kind::BAD_REQUEST,
                format!("`{pair}` is not name=value"),
            )),
        })
        .collect()
}

/// A call of a built-in accelerator by name, parameters by name checked against the
/// catalog's specs and the payload (so a bad call is refused before it is sent).
pub fn call_by_name(
    name: &str,
    params: &str,
    payload: Vec<u8>,
    deadline_us: u32,
) -> Result<Call, Failure> {
    if rac_proto::builtin::id(name).is_none() {
        let m = format!("{name} is not a built-in accelerator: call it by id (netaccel_call_id)");
        return Err(Failure::new(kind::UNKNOWN_ACCELERATOR, m));
    }
    let pairs = parse_params(params)?;
    let (accel_id, params) = netaccel_client::rac::builtin_call(name, &pairs, payload.len())
        .map_err(|m| Failure::new(kind::BAD_REQUEST, m))?;
    Ok(Call {
        accel_id,
        params,
        payload,
        deadline_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_declares_the_kinds_this_crate_returns() {
        let header = include_str!("../include/netaccel.h");
        for (value, name) in kind::NAMES.iter().enumerate() {
            let line = format!("NETACCEL_{} = {value},", name.to_uppercase());
            assert!(header.contains(&line), "netaccel.h lacks `{line}`");
        }
        assert!(header.contains(&format!("NETACCEL_RETRY_AFTER_MS {RETRY_AFTER_MS}")));
    }

    #[test]
    fn the_rust_clients_kinds_have_the_same_names_here() {
        let all = [
            ErrorKind::BadRequest,
            ErrorKind::UnknownAccelerator,
            ErrorKind::Busy,
            ErrorKind::TooLarge,
            ErrorKind::Deadline,
            ErrorKind::Unavailable,
            ErrorKind::Unauthorized,
            ErrorKind::Internal,
            ErrorKind::Protocol,
            ErrorKind::Closed,
            ErrorKind::Connect,
        ];
        for k in all {
            assert_eq!(kind::NAMES[kind_code(k) as usize], k.name());
        }
        let refused = RacError::Refused {
            status: Status::Busy,
            message: "bound".into(),
        };
        let f = Failure::from_rac(&refused);
        assert_eq!((f.kind, f.status, f.retry_after_ms), (kind::BUSY, 3, 1000));
        let broken = Failure::from_rac(&RacError::Protocol("bad magic".into()));
        assert_eq!((broken.kind, broken.status), (kind::PROTOCOL, 0xFFFF));
        assert_eq!(
            Failure::from_rac(&RacError::Closed(String::new())).kind,
            kind::CLOSED
        );
    }

    #[test]
    fn params_by_name_are_checked_against_the_catalog() {
        let call = call_by_name("topk", "k=3", vec![0; 8], 0).unwrap();
        assert_eq!(call.accel_id, 3);
        assert_eq!(&call.params[..4], &3u32.to_le_bytes());
        assert_eq!(
            call_by_name("topk", "k=0", vec![0; 8], 0).unwrap_err().kind,
            kind::BAD_REQUEST
        );
        assert_eq!(
            call_by_name("topk", "kk=1", vec![0; 8], 0)
                .unwrap_err()
                .kind,
            kind::BAD_REQUEST
        );
        assert_eq!(
            call_by_name("nope", "", vec![], 0).unwrap_err().kind,
            kind::UNKNOWN_ACCELERATOR
        );
        assert_eq!(parse_params(" width=4, height = 2 ,").unwrap().len(), 2);
        assert!(parse_params("width").is_err());
    }

    #[test]
    fn statuses_map_to_kinds_with_a_retry_hint_where_retrying_helps() {
        let busy = Failure::from_status(Status::Busy, "full");
        assert_eq!(
            (busy.kind, busy.status, busy.retry_after_ms),
            (kind::BUSY, 3, RETRY_AFTER_MS)
        );
        let late = Failure::from_status(Status::DeadlineExceeded, "late");
        assert_eq!((late.kind, late.retry_after_ms), (kind::DEADLINE, 0));
        for status in Status::ALL.into_iter().filter(|s| *s != Status::Ok) {
            let f = Failure::from_status(status, "");
            assert!(
                (kind::BAD_REQUEST..=kind::PROTOCOL).contains(&f.kind),
                "{status}"
            );
            assert_eq!(f.status, status.code());
        }
    }
}
