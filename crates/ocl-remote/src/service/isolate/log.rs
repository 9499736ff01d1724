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
//!
//! One kind of line is more than a line: a session's refusal of a device its tenant
//! was not granted (`gate::device_refusal`). A runtime process has no gate to audit
//! it, so the node hands such a line to its gate ([`audit_refusal`]), for a tenant it
//! handed that process only ([`Admitted`]).

use std::process::ChildStderr;
use std::sync::Mutex;

use crate::lines::{forward_lines, Line, LINES_PER_SECOND_MAX};
use crate::service::gate::{self, Gate};
use crate::service::lock;

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

/// Tenants the node admitted to one runtime process: a refused device the process
/// reports in its log is audited only for one of them, so a process (whose code a
/// hostile kernel may run) cannot have another tenant's refusals audited.
#[derive(Default)]
pub(crate) struct Admitted(Mutex<Vec<String>>);

impl Admitted {
    /// Tenant names kept per process at most: a shared process serving more tenants
    /// has its further tenants' refusals logged, not audited.
    const TENANTS_MAX: usize = 64;

    pub(crate) fn add(&self, tenant: &str) {
        let mut names = lock(&self.0);
        if names.len() < Self::TENANTS_MAX && !names.iter().any(|n| n == tenant) {
            names.push(tenant.to_string());
        }
    }

    fn contains(&self, tenant: &str) -> bool {
        lock(&self.0).iter().any(|n| n == tenant)
    }
}

/// Hands the device refusal `line` of a runtime process reports (if it is one) to
/// `gate`, when its tenant is one of `admitted`.
pub(crate) fn audit_refusal(gate: Option<&dyn Gate>, admitted: &Admitted, line: &str) {
    let Some((gate, (tenant, device))) = gate.zip(gate::parse_device_refusal(line)) else {
        return;
    };
    if admitted.contains(tenant) {
        gate.refused_device(&gate::Caller::default(), tenant, device);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::gate::Admission;

    /// Remembers the refusals it is told of.
    #[derive(Debug, Default)]
    struct Told(Mutex<Vec<(String, u32)>>);

    impl Gate for Told {
        fn admit(
            &self,
            _: &gate::Caller,
            _: &str,
            _: &str,
            _: &[String],
        ) -> Result<Admission, String> {
            Err("no".to_string())
        }

        fn refused_device(&self, _: &gate::Caller, tenant: &str, device: u32) {
            lock(&self.0).push((tenant.to_string(), device));
        }
    }

    #[test]
    fn only_refusals_of_the_process_tenants_are_audited() {
        let told = Told::default();
        let admitted = Admitted::default();
        admitted.add("team-a");
        admitted.add("team-a");
        for (tenant, device) in [("team-a", 1), ("team-b", 2)] {
            let line = format!("ocl-remote: {}", gate::device_refusal(tenant, device));
            audit_refusal(Some(&told), &admitted, &line);
            audit_refusal(None, &admitted, &line);
        }
        audit_refusal(
            Some(&told),
            &admitted,
            "ocl-remote: client connection closed",
        );
        assert_eq!(*lock(&told.0), [("team-a".to_string(), 1)]);
        // A shared process keeps at most so many names; the rest are not audited.
        for i in 0..2 * Admitted::TENANTS_MAX {
            admitted.add(&format!("t{i}"));
        }
        assert_eq!(lock(&admitted.0).len(), Admitted::TENANTS_MAX);
        assert!(admitted.contains("team-a") && !admitted.contains("t100"));
    }
}
