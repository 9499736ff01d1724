//! The log of isolated runtime processes: what the supervisor says, and what the
//! processes write on their standard error, in the node's log format.
//!
//! The supervisor's messages are `tracing` events (target
//! `ocl_remote::service::isolate`, see [`crate::service::log`]), so they come out as the
//! node's other lines do: text or JSON, filtered by its `log_level`. A runtime process
//! writes plain lines on stderr: the session code's messages (it has no subscriber),
//! and whatever the vendor runtime prints there, which no option of ours can turn into
//! JSON. So its stderr is a pipe to the node, where one thread per process reads it
//! line by line ([`crate::lines`]: bounded lines, a bounded rate, the lines left out
//! counted) and logs each line as a `warn` event of target [`RUNTIME_TARGET`] with the
//! process's `pid` and its `isolation` mode (`session`: the pid identifies the
//! client's session). A client whose kernels make the runtime print in a loop cannot
//! fill the node's disk.
//!
//! A program that installed no `tracing` subscriber (`netaccel-ocl-service`, tests of
//! this crate) gets the lines on its stderr as before.

use std::process::ChildStderr;

use crate::lines::{forward_lines, Line, LINES_PER_SECOND_MAX};

/// The target of the lines runtime processes write.
pub(crate) const RUNTIME_TARGET: &str = "ocl_remote::runtime";

/// `log!(LEVEL, [pid = p,] "format", args…)`: a line of the supervisor, about runtime
/// process `p` if given (see [`crate::service::log::emit`]).
macro_rules! log {
    ($level:ident, pid = $pid:expr, $($arg:tt)+) => {
        $crate::service::log::emit(
            $crate::service::log::Source::Supervisor,
            ::tracing::Level::$level,
            Some($pid),
            format_args!($($arg)+),
        )
    };
    ($level:ident, $($arg:tt)+) => {
        $crate::service::log::emit(
            $crate::service::log::Source::Supervisor,
            ::tracing::Level::$level,
            None,
            format_args!($($arg)+),
        )
    };
}
pub(crate) use log;

/// Reads the stderr of runtime process `pid` until it closes, logging each line (see
/// the module docs); `audit` sees each line logged first (a session's refusal of a
/// device, see `crate::service::gate::parse_device_refusal`), so within the same
/// bounded rate.
pub(crate) fn forward(
    stderr: ChildStderr,
    pid: u32,
    isolation: &'static str,
    audit: &dyn Fn(&str),
) {
    forward_lines(stderr, &mut |line| {
        if let Line::Text(text) = &line {
            audit(text);
        }
        runtime_line(pid, isolation, line)
    });
}

fn runtime_line(pid: u32, isolation: &str, line: Line) {
    if !tracing::dispatcher::has_been_set() {
        match line {
            Line::Text(text) => eprintln!("{text}"),
            Line::Suppressed(n) => eprintln!("(runtime process {pid}: {n} lines not shown)"),
        }
        return;
    }
    match line {
        Line::Text(text) => tracing::warn!(target: RUNTIME_TARGET, pid, isolation, "{text}"),
        Line::Suppressed(suppressed) => tracing::warn!(
            target: RUNTIME_TARGET,
            pid,
            isolation,
            suppressed,
            "runtime process lines not logged (at most {LINES_PER_SECOND_MAX} a second)"
        ),
    }
}
