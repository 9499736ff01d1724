//! The service's own log lines: `tracing` events, so that a node writes them as it
//! writes its other lines (text, or JSON with `log_format = "json"`, filtered by its
//! `log_level`), in every isolation mode.
//!
//! A program that installed no `tracing` subscriber gets them as plain lines on its
//! standard error instead (`ocl-remote: …`): `netaccel-ocl-service`, this crate's
//! tests, and a runtime process, whose standard error the node reads and logs as its
//! own events (see `isolate::log`). So a session's line reaches the node's log as an
//! event whether the session runs in the node's process (`opencl_isolation = "none"`)
//! or in a runtime process of its own.

use std::fmt;

use tracing::Level;

/// Who speaks: each source is one `tracing` target.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Source {
    /// Sessions and listeners: target `ocl_remote::service`.
    Service,
    /// The supervisor of runtime processes: target `ocl_remote::service::isolate`.
    Supervisor,
}

/// Logs `message` from `source` at `level` (`ERROR`, `WARN`; anything else as `INFO`),
/// with the runtime process `pid` it is about, if any.
pub(crate) fn emit(source: Source, level: Level, pid: Option<u32>, message: fmt::Arguments) {
    if !tracing::dispatcher::has_been_set() {
        eprintln!("ocl-remote: {message}");
        return;
    }
    // A target is part of an event's static metadata: one call site per target.
    match (source, level) {
        (Source::Service, Level::ERROR) => {
            tracing::error!(target: "ocl_remote::service", pid, "{message}")
        }
        (Source::Service, Level::WARN) => {
            tracing::warn!(target: "ocl_remote::service", pid, "{message}")
        }
        (Source::Service, _) => tracing::info!(target: "ocl_remote::service", pid, "{message}"),
        (Source::Supervisor, Level::ERROR) => {
            tracing::error!(target: "ocl_remote::service::isolate", pid, "{message}")
        }
        (Source::Supervisor, Level::WARN) => {
            tracing::warn!(target: "ocl_remote::service::isolate", pid, "{message}")
        }
        (Source::Supervisor, _) => {
            tracing::info!(target: "ocl_remote::service::isolate", pid, "{message}")
        }
    }
}

/// `log!(LEVEL, "format", args…)`: a line of the service (see [`emit`]).
macro_rules! log {
    ($level:ident, $($arg:tt)+) => {
        $crate::service::log::emit(
            $crate::service::log::Source::Service,
            ::tracing::Level::$level,
            None,
            format_args!($($arg)+),
        )
    };
}
pub(crate) use log;
