//! Lines another writer puts on a pipe, made safe to log: each cut at
//! [`LINE_BYTES_MAX`] bytes (the rest follows as the next line), empty ones skipped, and
//! at most [`LINES_PER_SECOND_MAX`] a second, the ones left out counted. One reader for
//! every raw stream a node turns into log lines: the standard error of isolated runtime
//! processes ([`crate::service`]) and whatever the OpenCL runtime and compiler print on
//! the node's own standard error (the node's logging). A writer that prints in a loop
//! cannot fill the node's disk through it.
//!
//! Not for: formatting or emitting the lines (the caller does, in its log format).

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

/// Longest line handed on as one.
pub const LINE_BYTES_MAX: usize = 4096;
/// Lines handed on per second at most.
pub const LINES_PER_SECOND_MAX: u32 = 100;

/// What the reader hands on.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    Text(&'a str),
    /// Lines left out in the windows that ended (reported before the next line shown,
    /// or at the end).
    Suppressed(u64),
}

/// Splits `input` into lines of at most [`LINE_BYTES_MAX`] bytes (without the line
/// feed, empty ones skipped), at most [`LINES_PER_SECOND_MAX`] a second.
pub fn forward_lines(input: impl Read, out: &mut dyn FnMut(Line)) {
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
