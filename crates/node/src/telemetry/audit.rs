//! The audit log: one JSON line per security event — a failed authentication, an
//! authorization refusal, a reconfiguration, a reload of the tenants — under the
//! target [`AUDIT_TARGET`] at `warn` (refusals) or `info` (changes), so that an
//! operator can keep it apart from the rest of the log (`log_level =
//! "warn,netaccel_node::audit=info"`).
//!
//! A hostile client can fail authentication as fast as the network carries its
//! requests, so refusals are rate-limited as refused requests are (at most
//! `log_refusals_per_second_max` lines a second; the rest counted, and the count
//! logged as a line of its own). Changes are never dropped: only callers with the
//! right may make them.
//!
//! What a line holds is [`AuditEvent`]: never a token, only the tenant's name (or
//! `anonymous`), the client's address and what was refused or done.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use crate::telemetry::Protocol;

/// The `tracing` target of audit lines.
pub const AUDIT_TARGET: &str = "netaccel_node::audit";

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// No credential where one is needed, or one no tenant has.
    AuthenticationFailed,
    /// An authenticated caller asked for what its policy does not allow.
    Forbidden,
    /// A slot was reconfigured (or a model loaded or unloaded).
    Reconfiguration,
    /// The tenants were reloaded (or a reload failed).
    PolicyReload,
}

impl AuditKind {
    fn is_refusal(self) -> bool {
        matches!(self, AuditKind::AuthenticationFailed | AuditKind::Forbidden)
    }
}

/// One audit line: a JSON object, the same keys for every event.
#[derive(Clone, Debug, Serialize)]
pub struct AuditEvent<'a> {
    pub event: AuditKind,
    /// The front end (`http`, `rac`, `grpc`), or `signal` / `admin` for reloads.
    pub protocol: &'a str,
    /// The client's address, when there is a client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<SocketAddr>,
    /// The tenant's name, `admin`, or `anonymous`.
    pub tenant: &'a str,
    /// What was asked: `call sobel`, `load slot 0`, `metrics`, …
    pub action: &'a str,
    /// Why it was refused, or what was done.
    pub detail: &'a str,
}

impl<'a> AuditEvent<'a> {
    /// An event of a request over `protocol` from `peer`.
    pub fn request(
        event: AuditKind,
        protocol: Protocol,
        peer: SocketAddr,
        tenant: &'a str,
        action: &'a str,
        detail: &'a str,
    ) -> AuditEvent<'a> {
        AuditEvent {
            event,
            protocol: protocol.name(),
            peer: Some(peer),
            tenant,
            action,
            detail,
        }
    }
}

/// Writes audit lines, refusals at most `lines_max` a second.
pub struct AuditLog {
    lines_max: u32,
    window: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    start: Instant,
    logged: u32,
    suppressed: u64,
}

const WINDOW: Duration = Duration::from_secs(1);

impl AuditLog {
    pub fn new(lines_per_second_max: u32) -> AuditLog {
        AuditLog {
            lines_max: lines_per_second_max,
            window: Mutex::new(Window {
                start: Instant::now(),
                logged: 0,
                suppressed: 0,
            }),
        }
    }

    /// Writes `event` as one JSON line, unless it is a refusal past this second's
    /// lines (then it is counted, and the count written when the second is over).
    pub fn record(&self, event: &AuditEvent<'_>) {
        if !tracing::enabled!(target: AUDIT_TARGET, tracing::Level::WARN) {
            return;
        }
        if event.event.is_refusal() && !self.admit(Instant::now()) {
            return;
        }
        let line = serde_json::to_string(event).expect("an audit event is JSON");
        if event.event.is_refusal() {
            tracing::warn!(target: AUDIT_TARGET, "{line}");
        } else {
            tracing::info!(target: AUDIT_TARGET, "{line}");
        }
    }

    /// Whether one more refusal line fits this second; reports what the last window
    /// suppressed when a new one starts.
    fn admit(&self, now: Instant) -> bool {
        let mut w = self.window.lock();
        if now.saturating_duration_since(w.start) >= WINDOW {
            let suppressed = std::mem::take(&mut w.suppressed);
            w.start = now;
            w.logged = 0;
            if suppressed > 0 {
                let lines_max = self.lines_max;
                tracing::warn!(
                    target: AUDIT_TARGET,
                    "{{\"event\":\"suppressed\",\"count\":{suppressed},\"lines_per_second_max\":{lines_max}}}"
                );
            }
        }
        if w.logged < self.lines_max {
            w.logged += 1;
            true
        } else {
            w.suppressed += 1;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_bounded_per_second_and_counted() {
        let log = AuditLog::new(3);
        let t0 = Instant::now();
        let admitted = (0..10).filter(|_| log.admit(t0)).count();
        assert_eq!(admitted, 3);
        assert_eq!(log.window.lock().suppressed, 7);
        assert!(log.admit(t0 + WINDOW), "a new second starts over");
        assert_eq!(log.window.lock().suppressed, 0);
    }

    #[test]
    fn a_line_is_one_json_object_without_the_token() {
        let peer: SocketAddr = "127.0.0.1:5".parse().unwrap();
        let e = AuditEvent::request(
            AuditKind::AuthenticationFailed,
            Protocol::Http,
            peer,
            "anonymous",
            "call sobel",
            "unknown token",
        );
        let v: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(v["event"], "authentication_failed");
        assert_eq!(v["protocol"], "http");
        assert_eq!(v["peer"], "127.0.0.1:5");
        assert_eq!(v["action"], "call sobel");
    }
}
