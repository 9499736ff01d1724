//! The node's log: its format, which filters it accepts, refused requests logged
//! without letting a flood fill the disk, and panics as log lines.
//!
//! Logs are `tracing` events on stderr, as text or as one JSON object per line
//! (`log_format`). The level comes from `log_level` (config) or `--log-level`: a level
//! name, or a tracing filter of `TARGET=LEVEL` directives. A typo there must not pass
//! silently: to `tracing` a bare word such as `verbose` is a valid filter (every level,
//! but only for a target named `verbose`), so a node started with it logged nothing at
//! all. [`check_filter`] accepts only directives that name a level.
//!
//! Refused requests ([`RefusalLog`]) are logged under the target
//! `netaccel_node::refused`, at `debug` except failed token checks (`warn`), each with
//! the client's address. A client can send refusable requests as fast as the network
//! carries them, so each kind of refusal gets at most `log_refusals_per_second_max`
//! lines a second; the rest are counted, and the count is logged when the second is
//! over.
//!
//! A kernel that panics fails its call and the slot carries on (see `slot`); the
//! standard panic hook would still print the panic and a backtrace on stderr, outside
//! the log's format. [`install_panic_hook`] makes every panic one `error` event.
//!
//! What the libraries in the process write on stderr themselves — the OpenCL runtime
//! and its compiler ("1 error generated."), a build tool the node runs — would bypass
//! the format too: [`init`] points the process's stderr at a pipe that one thread reads
//! ([`StrayStderr`]), each line logged as a `warn` event of target
//! [`STRAY_TARGET`], bounded and rate-limited like a runtime process's lines
//! ([`ocl_remote::lines`]); the log itself is written to the original stderr.

use std::fmt::Display;
use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tracing::Level;
use tracing_subscriber::filter::LevelFilter;

use crate::telemetry::Protocol;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// One human-readable line per event (colored when stderr is a terminal).
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!("log format `{s}` is not valid: use text or json")),
        }
    }
}

/// The target of the lines other code in the process writes on stderr.
pub const STRAY_TARGET: &str = "netaccel_node::stderr";

/// Where log lines go: the process's stderr as it was before [`init`] took it over.
static LOG_OUT: OnceLock<File> = OnceLock::new();

/// Installs the global subscriber: events that pass `filter` (already checked with
/// [`check_filter`]) go to stderr in `format`. Then makes panics log lines, and what
/// other code writes on stderr too (see the module docs). Keep the returned
/// [`StrayStderr`] for as long as the node runs: dropping it gives stderr back.
pub fn init(filter: &str, format: LogFormat) -> Result<StrayStderr, String> {
    let filter = tracing_subscriber::EnvFilter::builder()
        .parse(filter)
        .map_err(|e| e.to_string())?;
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // SAFETY: dup of the process's stderr; the new descriptor is owned by the File.
    let out = match unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) } {
        -1 => {
            return Err(format!(
                "cannot duplicate stderr: {}",
                std::io::Error::last_os_error()
            ))
        }
        fd => unsafe { File::from_raw_fd(fd) },
    };
    let out: &'static File = LOG_OUT.get_or_init(|| out);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(move || out);
    match format {
        LogFormat::Text => builder.with_ansi(ansi).try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
    .map_err(|e| e.to_string())?;
    install_panic_hook();
    StrayStderr::take(out)
}

/// The process's stderr taken over: a pipe whose lines one thread logs. Dropping it
/// gives stderr back and waits (briefly) until the lines written so far are logged, so
/// that a last message printed before the process exits is not lost.
pub struct StrayStderr {
    log_out: &'static File,
    ended: mpsc::Receiver<()>,
}

/// How long giving stderr back waits for the lines still in the pipe.
const STRAY_DRAIN_WAIT: Duration = Duration::from_secs(1);

impl StrayStderr {
    fn take(log_out: &'static File) -> Result<StrayStderr, String> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two new descriptors, owned below.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(format!(
                "cannot make a pipe for stderr: {}",
                std::io::Error::last_os_error()
            ));
        }
        let (read, write) = unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fd 2 becomes a copy of the pipe's write end (without close-on-exec:
        // children that inherit stderr write into the pipe too); `write` is closed when
        // dropped, leaving fd 2 the only write end of this process.
        if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&write), 2) } == -1 {
            return Err(format!(
                "cannot redirect stderr: {}",
                std::io::Error::last_os_error()
            ));
        }
        drop(write);
        let (done, ended) = mpsc::channel();
        std::thread::Builder::new()
            .name("stderr".to_string())
            .spawn(move || {
                block_all_signals();
                ocl_remote::lines::forward_lines(read, &mut stray_line);
                let _ = done.send(());
            })
            .map_err(|e| format!("cannot start the stderr thread: {e}"))?;
        Ok(StrayStderr { log_out, ended })
    }
}

impl Drop for StrayStderr {
    fn drop(&mut self) {
        // fd 2 back to the original stderr: the pipe's last write end in this process
        // closes, and the reader ends once it has logged what the pipe held (children
        // still holding it may keep it open: the wait is bounded).
        let fd = std::os::fd::AsRawFd::as_raw_fd(self.log_out);
        // SAFETY: both descriptors are open; dup2 replaces fd 2 atomically.
        unsafe { libc::dup2(fd, 2) };
        let _ = self.ended.recv_timeout(STRAY_DRAIN_WAIT);
    }
}

/// The node takes SIGTERM, SIGINT and SIGHUP with `sigwait` in threads of its own,
/// blocked everywhere else; this thread starts before the node blocks them, so it
/// blocks every signal itself (one delivered here would take the default action: a
/// second SIGTERM during the drain would kill the node).
fn block_all_signals() {
    // SAFETY: an initialised set, applied to the calling thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

fn stray_line(line: ocl_remote::lines::Line) {
    match line {
        ocl_remote::lines::Line::Text(text) => tracing::warn!(target: STRAY_TARGET, "{text}"),
        ocl_remote::lines::Line::Suppressed(suppressed) => tracing::warn!(
            target: STRAY_TARGET,
            suppressed,
            "stderr lines not logged (at most {} a second)",
            ocl_remote::lines::LINES_PER_SECOND_MAX
        ),
    }
}

/// Replaces the standard panic hook (a raw message and backtrace on stderr) with one
/// structured `error` event: the thread, where it panicked and the panic's message.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(a panic without a message)".to_string());
        let location = info.location().map_or_else(
            || "unknown".to_string(),
            |l| format!("{}:{}:{}", l.file(), l.line(), l.column()),
        );
        let thread = std::thread::current();
        tracing::error!(
            thread = thread.name().unwrap_or("unnamed"),
            location = %location,
            panic = %message,
            "a thread panicked"
        );
    }));
}

/// Level names `log_level` accepts on its own, in the order of the message that lists
/// them.
const LEVELS: &str = "off, error, warn, info, debug, trace";

/// Checks a `log_level` value: a level name, or comma-separated directives that each
/// end in `=LEVEL` (`info,netaccel_node=debug`) and that `tracing` can parse.
pub fn check_filter(filter: &str) -> Result<(), String> {
    let refuse = |why: &str| {
        format!(
            "log level `{filter}` is not valid ({why}): use one of {LEVELS}, or a tracing \
             filter of TARGET=LEVEL directives such as `info,netaccel_node=debug`"
        )
    };
    let directives: Vec<&str> = filter
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    if directives.is_empty() {
        return Err(refuse("it is empty"));
    }
    for directive in directives {
        let level = match directive.rsplit_once('=') {
            Some((target, _)) if target.trim().is_empty() => {
                return Err(refuse(&format!("`{directive}` names no target")))
            }
            Some((_, level)) => level.trim(),
            None => directive,
        };
        // `LevelFilter` also reads "" as `error`; an empty level is a mistake here.
        if level.is_empty() || level.parse::<LevelFilter>().is_err() {
            return Err(refuse(&format!("`{directive}` names no level")));
        }
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(filter)
        .map(drop)
        .map_err(|e| refuse(&e.to_string()))
}

/// Target of refused-request events, so a filter can select them alone
/// (`warn,netaccel_node::refused=debug`).
const REFUSED: &str = "netaccel_node::refused";

/// Why a request was refused, for the log. Each kind has its own rate limit, so a
/// flood of one does not hide the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Malformed HTTP or a broken RAC frame, bad parameters, an unknown route or
    /// method: a client that does not speak the protocol right (`debug`).
    Protocol,
    /// A call for an accelerator the node does not have or no slot hosts (`debug`).
    UnknownAccelerator,
    /// A failed admin-token check (reconfiguration) or tenant-token check (RAC
    /// `hello`): someone may be guessing (`warn`).
    Token,
    /// A call or object write over its tenant's quota (`core::quota`): a tenant
    /// sending more than it was granted (`info`).
    Quota,
}

impl Refusal {
    const ALL: [Refusal; 4] = [
        Refusal::Protocol,
        Refusal::UnknownAccelerator,
        Refusal::Token,
        Refusal::Quota,
    ];

    fn name(self) -> &'static str {
        match self {
            Refusal::Protocol => "protocol",
            Refusal::UnknownAccelerator => "unknown_accelerator",
            Refusal::Token => "token",
            Refusal::Quota => "quota",
        }
    }

    fn level(self) -> Level {
        match self {
            Refusal::Token => Level::WARN,
            Refusal::Quota => Level::INFO,
            Refusal::Protocol | Refusal::UnknownAccelerator => Level::DEBUG,
        }
    }

    /// The kind of refusal a RAC status answers, if it is one to log: `BUSY`,
    /// `UNAVAILABLE`, `DEADLINE_EXCEEDED` and `INTERNAL` are the node's state, not
    /// the request's fault, and have their metrics.
    pub fn of_status(status: rac_proto::Status) -> Option<Refusal> {
        use rac_proto::Status;
        match status {
            Status::BadRequest | Status::ProtocolError | Status::TooLarge => {
                Some(Refusal::Protocol)
            }
            Status::UnknownAccelerator => Some(Refusal::UnknownAccelerator),
            Status::Unauthorized => Some(Refusal::Token),
            Status::Ok
            | Status::Busy
            | Status::Unavailable
            | Status::DeadlineExceeded
            | Status::Internal => None,
        }
    }

    fn enabled(self) -> bool {
        match self.level() {
            Level::WARN => tracing::enabled!(target: REFUSED, Level::WARN),
            Level::INFO => tracing::enabled!(target: REFUSED, Level::INFO),
            _ => tracing::enabled!(target: REFUSED, Level::DEBUG),
        }
    }
}

/// Lines of one kind of refusal in the current one-second window.
#[derive(Debug)]
struct Window {
    start: Instant,
    logged: u32,
    suppressed: u64,
}

impl Window {
    const LENGTH: Duration = Duration::from_secs(1);

    fn new(now: Instant) -> Window {
        Window {
            start: now,
            logged: 0,
            suppressed: 0,
        }
    }

    /// Starts a new window if the current one is over; returns the number of lines
    /// the windows that ended suppressed (to be reported now).
    fn roll(&mut self, now: Instant) -> u64 {
        if now.saturating_duration_since(self.start) < Window::LENGTH {
            return 0;
        }
        let suppressed = self.suppressed;
        *self = Window::new(now);
        suppressed
    }

    /// Whether one more line may be written at `now` (at most `lines_max` a window),
    /// and the count of suppressed lines to report first.
    fn admit(&mut self, now: Instant, lines_max: u32) -> (bool, u64) {
        let report = self.roll(now);
        if self.logged < lines_max {
            self.logged += 1;
            (true, report)
        } else {
            self.suppressed += 1;
            (false, report)
        }
    }
}

/// Logs refused requests, at most `lines_max` lines per kind and second.
pub struct RefusalLog {
    lines_max: u32,
    windows: [Mutex<Window>; Refusal::ALL.len()],
}

impl RefusalLog {
    pub fn new(lines_per_second_max: u32) -> RefusalLog {
        let now = Instant::now();
        RefusalLog {
            lines_max: lines_per_second_max,
            windows: Refusal::ALL.map(|_| Mutex::new(Window::new(now))),
        }
    }

    /// Logs that a request from `peer` was refused with `status` because of `reason`,
    /// unless the level of `kind` is off (then it costs nothing) or its lines for this
    /// second are spent (then it is counted).
    pub fn log(
        &self,
        kind: Refusal,
        protocol: Protocol,
        peer: SocketAddr,
        status: &dyn Display,
        reason: &dyn Display,
    ) {
        if !kind.enabled() {
            return;
        }
        let (log, suppressed) = self.windows[kind as usize]
            .lock()
            .admit(Instant::now(), self.lines_max);
        if suppressed > 0 {
            self.report(kind, suppressed);
        }
        if !log {
            return;
        }
        let (name, protocol) = (kind.name(), protocol.name());
        if kind.level() == Level::WARN {
            tracing::warn!(
                target: REFUSED,
                kind = name,
                protocol,
                %peer,
                %status,
                %reason,
                "request refused"
            );
        } else if kind.level() == Level::INFO {
            tracing::info!(
                target: REFUSED,
                kind = name,
                protocol,
                %peer,
                %status,
                %reason,
                "request refused"
            );
        } else {
            tracing::debug!(
                target: REFUSED,
                kind = name,
                protocol,
                %peer,
                %status,
                %reason,
                "request refused"
            );
        }
    }

    /// Reports the lines suppressed in windows that are over. Called about once a
    /// second, so a flood that stops is still accounted for.
    pub fn roll(&self) {
        let now = Instant::now();
        for kind in Refusal::ALL {
            if kind.enabled() {
                let suppressed = self.windows[kind as usize].lock().roll(now);
                if suppressed > 0 {
                    self.report(kind, suppressed);
                }
            }
        }
    }

    fn report(&self, kind: Refusal, suppressed: u64) {
        let (lines_max, name) = (self.lines_max, kind.name());
        if kind.level() == Level::WARN {
            tracing::warn!(
                target: REFUSED,
                kind = name,
                suppressed,
                "refused requests not logged (at most {lines_max} lines a second per kind)"
            );
        } else if kind.level() == Level::INFO {
            tracing::info!(
                target: REFUSED,
                kind = name,
                suppressed,
                "refused requests not logged (at most {lines_max} lines a second per kind)"
            );
        } else {
            tracing::debug!(
                target: REFUSED,
                kind = name,
                suppressed,
                "refused requests not logged (at most {lines_max} lines a second per kind)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_window_logs_its_lines_then_counts_the_rest() {
        let t0 = Instant::now();
        let mut w = Window::new(t0);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(w.admit(at(0), 2), (true, 0));
        assert_eq!(w.admit(at(10), 2), (true, 0));
        assert_eq!(w.admit(at(20), 2), (false, 0));
        assert_eq!(w.admit(at(999), 2), (false, 0));
        assert_eq!(w.roll(at(999)), 0, "the window is not over");
        // The next window reports the two suppressed lines, once.
        assert_eq!(w.admit(at(1000), 2), (true, 2));
        assert_eq!(w.admit(at(1001), 2), (true, 0));
        assert_eq!(w.admit(at(1002), 2), (false, 0));
        assert_eq!(w.roll(at(2500)), 1);
        assert_eq!(w.roll(at(2600)), 0);
        assert_eq!(w.admit(at(2700), 2), (true, 0));
    }

    #[test]
    fn statuses_map_to_the_kinds_worth_logging() {
        use rac_proto::Status;
        assert_eq!(
            Refusal::of_status(Status::ProtocolError),
            Some(Refusal::Protocol)
        );
        assert_eq!(
            Refusal::of_status(Status::UnknownAccelerator),
            Some(Refusal::UnknownAccelerator)
        );
        assert_eq!(
            Refusal::of_status(Status::Unauthorized),
            Some(Refusal::Token)
        );
        assert_eq!(Refusal::of_status(Status::Busy), None);
        assert_eq!(Refusal::of_status(Status::Ok), None);
    }

    #[test]
    fn log_formats_parse() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("text".parse::<LogFormat>(), Ok(LogFormat::Text));
        assert!("xml"
            .parse::<LogFormat>()
            .unwrap_err()
            .contains("text or json"));
    }

    #[test]
    fn levels_and_filters_pass() {
        for ok in [
            "info",
            "DEBUG",
            "off",
            "warn,netaccel_node=debug",
            "netaccel_node=trace",
            "netaccel_node::front::http=debug,ocl_remote=info",
            "netaccel_node[call{slot=1}]=debug",
        ] {
            check_filter(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn garbage_is_refused_with_the_valid_levels_listed() {
        for bad in [
            "verbose",
            "loud",
            "",
            " , ",
            "info,loud",
            "netaccel_node=",
            "netaccel_node=loud",
            "=debug",
        ] {
            let err = check_filter(bad).expect_err(bad);
            assert!(
                err.contains("off, error, warn, info, debug, trace"),
                "{bad}: {err}"
            );
        }
    }
}
