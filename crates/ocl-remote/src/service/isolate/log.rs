//! The log of isolated runtime processes: what the supervisor says, and what the
//! processes write on their standard error, in the node's log format.
//!
//! The supervisor's messages are `tracing` events (target
//! `ocl_remote::service::isolate`, see [`crate::service::log`]), so they come out as the
//! node's other lines do: text or JSON, filtered by its `log_level`. A runtime process
//! writes plain lines on stderr: the session code's messages (it has no subscriber),
//! and whatever the vendor runtime prints there, which no option of ours can turn into
//! JSON. So its stderr is a pipe to the node, where one thread per process reads it
//! line by line and logs each line as a `warn` event of target [`RUNTIME_TARGET`] with
//! the process's `pid` and its `isolation` mode (`session`: the pid identifies the
//! client's session). A line is cut at [`LINE_BYTES_MAX`] (the rest follows as the next
//! line), and a process gets at most [`LINES_PER_SECOND_MAX`] lines a second: a client
//! whose kernels make the runtime print in a loop cannot fill the node's disk; the
//! lines left out are counted and the count is logged.
//!
//! A program that installed no `tracing` subscriber (`netaccel-ocl-service`, tests of
//! this crate) gets the lines on its stderr as before.

use std::io::{BufRead, BufReader, Read};
use std::process::ChildStderr;
use std::time::{Duration, Instant};

/// The target of the lines runtime processes write.
pub(crate) const RUNTIME_TARGET: &str = "ocl_remote::runtime";
/// Longest line logged as one event.
const LINE_BYTES_MAX: usize = 4096;
/// Lines of one process logged per second at most.
const LINES_PER_SECOND_MAX: u32 = 100;

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
/// the module docs).
pub(crate) fn forward(stderr: ChildStderr, pid: u32, isolation: &'static str) {
    forward_lines(stderr, &mut |line| runtime_line(pid, isolation, line));
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

/// What the reader hands on.
#[derive(Debug, PartialEq, Eq)]
enum Line<'a> {
    Text(&'a str),
    /// Lines left out in the windows that ended (reported before the next line shown,
    /// or at the end).
    Suppressed(u64),
}

/// Splits `input` into lines of at most [`LINE_BYTES_MAX`] bytes (without the line
/// feed, empty ones skipped), at most [`LINES_PER_SECOND_MAX`] a second.
fn forward_lines(input: impl Read, out: &mut dyn FnMut(Line)) {
    let mut reader = BufReader::with_capacity(LINE_BYTES_MAX, input);
    let mut line = Vec::with_capacity(256);
    let (mut window_start, mut shown, mut suppressed) = (Instant::now(), 0u32, 0u64);
    loop {
        line.clear();
        match (&mut reader)
            .take(LINE_BYTES_MAX as u64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        if text.is_empty() {
            continue;
        }
        let now = Instant::now();
        if now.duration_since(window_start) >= Duration::from_secs(1) {
            (window_start, shown) = (now, 0);
        }
        if shown >= LINES_PER_SECOND_MAX {
            suppressed += 1;
            continue;
        }
        if suppressed > 0 {
            out(Line::Suppressed(std::mem::take(&mut suppressed)));
        }
        shown += 1;
        out(Line::Text(text));
    }
    if suppressed > 0 {
        out(Line::Suppressed(suppressed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<String> {
        let mut got = Vec::new();
        forward_lines(input, &mut |l| {
            got.push(match l {
                Line::Text(t) => t.to_string(),
                Line::Suppressed(n) => format!("<{n}>"),
            })
        });
        got
    }

    #[test]
    fn lines_are_split_trimmed_and_bounded() {
        assert_eq!(lines(b"one\n\ntwo\r\nthree"), ["one", "two", "three"]);
        let long = vec![b'x'; LINE_BYTES_MAX + 10];
        let got = lines(&long);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].len(), LINE_BYTES_MAX);
        assert_eq!(got[1].len(), 10);
    }

    #[test]
    fn a_flood_is_cut_to_the_rate_and_counted() {
        let flood: Vec<u8> = (0..LINES_PER_SECOND_MAX + 50)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let got = lines(&flood);
        assert_eq!(got.len(), LINES_PER_SECOND_MAX as usize + 1);
        assert_eq!(got.last().unwrap(), "<50>");
    }
}
