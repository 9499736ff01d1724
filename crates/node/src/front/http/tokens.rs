//! The common request head, tokenised in one pass without httparse: a pure function
//! over a byte slice that [`super::parse::parse_head`] tries first.
//!
//! httparse handles every form HTTP/1.1 allows (empty lines before the request line,
//! bare `LF` line ends, UTF-8 in the target, obs-text in values) and dispatches to SIMD
//! code at run time. For the heads clients actually send (`GET /health HTTP/1.1`, a
//! few header fields, `CRLF` line ends, ASCII) that generality cost ~700 of the node's
//! 2,762 user-space instructions per keep-alive `/health`, against 591 for the whole
//! of the C responder's answer; tokenised here, 323, and the whole answer 2,431
//! (bench/http/instructions.sh, issue 28).
//!
//! [`common`] accepts only that common form and gives up (`None`) on anything else —
//! an incomplete head included — so that httparse decides it. What it accepts is a
//! strict subset of what httparse accepts, tokenised to the same slices: the unit tests
//! below compare the two on vectors, and the `http_head` fuzz target on every input.

use std::mem::MaybeUninit;

/// Maximum number of header fields in one request (431 beyond). Fixed because the
/// parser works on a stack array of this many slots.
pub const HEADERS_MAX: usize = 64;

/// Room for a head's header fields, which [`head`] fills and the parsed head
/// borrows. Left uninitialised: the parser writes only the slots the head uses (an
/// array of empty headers was 2 KiB of stores per request, issue 28).
pub type HeaderSlots<'b> = [MaybeUninit<httparse::Header<'b>>; HEADERS_MAX];

/// Empty [`HeaderSlots`], for one parse.
pub fn header_slots<'b>() -> HeaderSlots<'b> {
    [MaybeUninit::uninit(); HEADERS_MAX]
}

/// A header-name or method byte: `tchar` (RFC 9110 §5.6.2), httparse's token set.
const TOKEN: u8 = 1;
/// A request-target byte: visible ASCII (httparse also takes UTF-8; this does not).
const TARGET: u8 = 2;
/// A header-value byte: `HTAB`, `SP` and visible ASCII (httparse also takes obs-text).
const VALUE: u8 = 4;

/// A `Host` value byte: the characters of a registered name, an IP literal and a port
/// (RFC 3986 §3.2.2).
const HOST: u8 = 8;

/// The classes of each byte value.
static CLASS: [u8; 256] = classes();

const fn classes() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let token = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        let target = b.is_ascii_graphic();
        let value = b == b'\t' || b == b' ' || b.is_ascii_graphic();
        let host = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'['
                    | b']'
                    | b'%'
            );
        table[i] = (token as u8 * TOKEN)
            | (target as u8 * TARGET)
            | (value as u8 * VALUE)
            | (host as u8 * HOST);
        i += 1;
    }
    table
}

/// Where the run of `class` bytes that starts at `from` ends (`buf.len()` when it
/// reaches the end), a byte at a time: for runs a few bytes long (a method, a header
/// name).
#[inline(always)]
fn run(buf: &[u8], from: usize, class: u8) -> usize {
    let mut at = from;
    while at < buf.len() && CLASS[usize::from(buf[at])] & class != 0 {
        at += 1;
    }
    at
}

/// Whether every byte of `bytes` is of `class`: eight table look-ups and one test at a
/// time (a test per byte cost ~8 instructions per byte).
#[inline(always)]
fn all_of(bytes: &[u8], class: u8) -> bool {
    let mut eights = bytes.chunks_exact(8);
    for eight in &mut eights {
        if eight
            .iter()
            .fold(class, |all, &b| all & CLASS[usize::from(b)])
            == 0
        {
            return false;
        }
    }
    run(eights.remainder(), 0, class) == eights.remainder().len()
}

const ONES: u64 = u64::from_le_bytes([1; 8]);
const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);

/// The high bits of the bytes of `word` below `low` (at most 0x80) or above `~`
/// (0x7e); exact for the lowest such byte, which is all the caller uses (a byte's
/// borrow or carry reaches only bytes above it, and only from a byte that is itself
/// flagged).
#[inline(always)]
fn outside(word: u64, low: u8) -> u64 {
    let below = word.wrapping_sub(ONES * u64::from(low)) & !word;
    let above = word.wrapping_add(ONES) | word;
    (below | above) & HIGHS
}

/// [`run`] for a class of visible ASCII from `low` (a target's `!`, a value's space)
/// and perhaps a few other bytes (a value's `HTAB`): eight bytes at a time while all
/// eight are in `low..=~`, then a byte at a time from the first that is not.
#[inline(always)]
fn run_visible(buf: &[u8], from: usize, class: u8, low: u8) -> usize {
    let mut at = from;
    while let Some(eight) = buf.get(at..at + 8) {
        let word = u64::from_le_bytes(eight.try_into().expect("eight bytes"));
        let out = outside(word, low);
        if out != 0 {
            at += (out.trailing_zeros() / 8) as usize;
            break;
        }
        at += 8;
    }
    run(buf, at, class)
}

/// Whether a `Host` value can be `uri-host [":" port]` (RFC 3986 §3.2.2): only the
/// characters of a registered name, an IP literal and a port. Empty is allowed (a
/// target without authority).
pub fn valid_host(value: &[u8]) -> bool {
    all_of(value, HOST)
}

/// ASCII bytes as text.
#[inline(always)]
fn ascii(bytes: &[u8]) -> &str {
    debug_assert!(bytes.is_ascii());
    // SAFETY: every caller passes bytes of one of the classes above, all ASCII, and
    // ASCII is UTF-8.
    unsafe { std::str::from_utf8_unchecked(bytes) }
}

/// A request line as httparse gives it.
#[derive(Debug, PartialEq, Eq)]
pub struct Line<'b> {
    pub method: &'b str,
    pub target: &'b str,
    pub minor_version: u8,
}

/// A head's request line, its header fields and its length up to and including the
/// blank line.
pub type Tokens<'b, 'h> = (Line<'b>, &'h [httparse::Header<'b>], usize);

/// The request head at the start of `buf`, tokenised, its header fields in the first
/// of `slots`: by [`common`] when it is in the common form, else by httparse. `None`
/// while incomplete; an error is httparse's.
pub fn head<'b, 'h>(
    buf: &'b [u8],
    slots: &'h mut HeaderSlots<'b>,
) -> Result<Option<Tokens<'b, 'h>>, httparse::Error> {
    if let Some((line, count, len)) = common(buf, slots) {
        return Ok(Some((line, filled(slots, count), len)));
    }
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, slots)? {
        httparse::Status::Partial => return Ok(None),
        httparse::Status::Complete(n) => n,
    };
    let line = Line {
        method: req.method.expect("complete request has a method"),
        target: req.path.expect("complete request has a target"),
        minor_version: req.version.expect("complete request has a version"),
    };
    Ok(Some((line, req.headers, len)))
}

/// The first `count` of `slots`, which [`common`] filled.
fn filled<'b, 'h>(slots: &'h HeaderSlots<'b>, count: usize) -> &'h [httparse::Header<'b>] {
    let slots = &slots[..count];
    // SAFETY: only called with the count `common` returned, which wrote the first
    // `count` slots (each exactly once, in order); `MaybeUninit<T>` has the layout of
    // `T`.
    unsafe { std::slice::from_raw_parts(slots.as_ptr().cast::<httparse::Header<'b>>(), count) }
}

/// The request head at the start of `buf` when it is whole and in the common form:
/// its request line, the number of its header fields (written to the first slots of
/// `slots`) and its length up to and including the blank line. The form: a request
/// line `token SP /visible-ascii SP HTTP/1.0|1 CRLF` at the very start; at most
/// [`HEADERS_MAX`] lines `token ":" *(SP / HTAB) *(HTAB / SP / visible-ascii) CRLF`,
/// whose values lose their leading and trailing blanks; `CRLF`. `None` for anything
/// else, which httparse is to decide.
fn common<'b>(buf: &'b [u8], slots: &mut HeaderSlots<'b>) -> Option<(Line<'b>, usize, usize)> {
    let (line, mut at) = request_line(buf)?;
    let mut count = 0;
    loop {
        if buf.get(at..at + 2)? == b"\r\n" {
            return Some((line, count, at + 2));
        }
        let name_end = run(buf, at, TOKEN);
        if name_end == at || buf.get(name_end) != Some(&b':') {
            return None;
        }
        let mut start = name_end + 1;
        while matches!(buf.get(start), Some(b' ' | b'\t')) {
            start += 1;
        }
        let end = run_visible(buf, start, VALUE, b' ');
        if buf.get(end..end + 2)? != b"\r\n" || count == HEADERS_MAX {
            return None;
        }
        let mut value = &buf[start..end];
        while let [rest @ .., b' ' | b'\t'] = value {
            value = rest;
        }
        slots[count] = MaybeUninit::new(httparse::Header {
            name: ascii(&buf[at..name_end]),
            value,
        });
        count += 1;
        at = end + 2;
    }
}

/// `HTTP/1.1` and `HTTP/1.0` as little-endian words.
const HTTP_1_1: u64 = u64::from_le_bytes(*b"HTTP/1.1");
const HTTP_1_0: u64 = u64::from_le_bytes(*b"HTTP/1.0");

/// The request line at the start of `buf` and where the line after it starts.
#[inline(always)]
fn request_line(buf: &[u8]) -> Option<(Line<'_>, usize)> {
    let method_end = run(buf, 0, TOKEN);
    if method_end == 0 || buf.get(method_end) != Some(&b' ') {
        return None;
    }
    let target_start = method_end + 1;
    if buf.get(target_start) != Some(&b'/') {
        return None;
    }
    let target_end = run_visible(buf, target_start, TARGET, b'!');
    if buf.get(target_end) != Some(&b' ') {
        return None;
    }
    let version = buf.get(target_end + 1..target_end + 11)?;
    // Compared as one word and a pair (a match on the ten bytes took 23 instructions).
    let (word, end) = version.split_at(8);
    let minor_version = match u64::from_le_bytes(word.try_into().ok()?) {
        HTTP_1_1 => 1,
        HTTP_1_0 => 0,
        _ => return None,
    };
    if end != b"\r\n" {
        return None;
    }
    let line = Line {
        method: ascii(&buf[..method_end]),
        target: ascii(&buf[target_start..target_end]),
        minor_version,
    };
    Some((line, target_end + 11))
}

/// The comparison with httparse, for the tests and the `http_head` fuzz target.
pub mod fuzzing {
    use super::{common, filled, header_slots, Line, HEADERS_MAX};

    /// A request line, its header fields owned, and the head's length.
    type Owned<'b> = (Line<'b>, Vec<(String, Vec<u8>)>, usize);

    /// What httparse makes of `buf`, in the terms of [`common`]: `None` unless the
    /// head is complete.
    fn httparse_view(buf: &[u8]) -> Option<Owned<'_>> {
        let mut slots = [httparse::EMPTY_HEADER; HEADERS_MAX];
        let mut req = httparse::Request::new(&mut slots);
        match req.parse(buf) {
            Ok(httparse::Status::Complete(n)) => Some((
                Line {
                    method: req.method?,
                    target: req.path?,
                    minor_version: req.version?,
                },
                req.headers
                    .iter()
                    .map(|h| (h.name.to_owned(), h.value.to_vec()))
                    .collect(),
                n,
            )),
            _ => None,
        }
    }

    /// Checks that [`common`] either gives up on `buf` or agrees with httparse, and
    /// says whether it took it.
    pub fn agrees(buf: &[u8]) -> bool {
        let mut slots = header_slots();
        let Some((line, count, len)) = common(buf, &mut slots) else {
            return false;
        };
        let fields = filled(&slots, count);
        let fields: Vec<(String, Vec<u8>)> = fields
            .iter()
            .map(|h| (h.name.to_owned(), h.value.to_vec()))
            .collect();
        let Some(expected) = httparse_view(buf) else {
            panic!("tokenize took {buf:?}, which httparse does not");
        };
        assert_eq!((line, fields, len), expected, "on {buf:?}");
        true
    }
}

#[cfg(test)]
mod tests {
    use super::fuzzing::agrees;
    use super::*;

    #[test]
    fn common_heads_are_taken_as_httparse_takes_them() {
        let heads: &[&[u8]] = &[
            b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
            b"GET / HTTP/1.0\r\n\r\n",
            b"POST /v1/fn/to_uppercase?x=1&y=%20 HTTP/1.1\r\nHost: a\r\nContent-Length: 64\r\n\r\nbody",
            b"GET /x HTTP/1.1\r\nHost: a\r\nX-Empty:\r\nX-Blank:  \t \r\nX-Trim: \t a b \t\r\n\r\n",
            b"PUT /o HTTP/1.1\r\nhost:a\r\nAuthorization: Bearer abc.def\r\nUser-Agent: curl/8.0 (x; y)\r\n\r\n",
            b"M-1_.~ /a\"b<c>{|}\\^` HTTP/1.1\r\nA!#$%&'*+-.^_`|~9:v\r\n\r\n",
        ];
        for head in heads {
            assert!(
                agrees(head),
                "not taken: {:?}",
                String::from_utf8_lossy(head)
            );
        }
        let mut slots = header_slots();
        let (line, count, len) = common(heads[3], &mut slots).unwrap();
        let fields = filled(&slots, count);
        assert_eq!(line.target, "/x");
        let values: Vec<&[u8]> = fields.iter().map(|h| h.value).collect();
        assert_eq!(values, [&b"a"[..], b"", b"", b"a b"]);
        assert_eq!(len, heads[3].len());
    }

    #[test]
    fn other_forms_are_left_to_httparse() {
        let heads: &[&[u8]] = &[
            b"",
            b"GET /health HTTP/1.1\r\nHost: a\r\n",
            b"GET /health HTTP/1.1\r\nHost: a\r\n\r",
            b"\r\nGET / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\n\n",
            b"GET / HTTP/1.1\r\nHost: a\n\r\n",
            b"GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: caf\xc3\xa9\r\n\r\n",
            b"GET * HTTP/1.1\r\n\r\n",
            b"GET http://a/ HTTP/1.1\r\n\r\n",
            b"GET  / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/2.0\r\n\r\n",
            b"GET / HTTP/1.1\r\nX : v\r\n\r\n",
            b"GET / HTTP/1.1\r\n X: v\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
            b" GET / HTTP/1.1\r\n\r\n",
        ];
        for head in heads {
            let mut slots = header_slots();
            assert!(
                common(head, &mut slots).is_none(),
                "taken: {:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    /// Byte strings of every length up to 40 with bytes drawn mostly from `pool`.
    fn samples(pool: &[u8]) -> Vec<Vec<u8>> {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        (0..4000)
            .map(|i| {
                (0..i % 41)
                    .map(|_| match next() % 16 {
                        0 => next() as u8,
                        _ => pool[next() as usize % pool.len()],
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn word_at_a_time_runs_end_where_byte_at_a_time_runs_end() {
        let pool: Vec<u8> = (b' '..=b'~').chain(*b"\t\r\n\x7f\x80\xff\x00").collect();
        for bytes in samples(&pool) {
            for from in 0..=bytes.len() {
                for (class, low) in [(TARGET, b'!'), (VALUE, b' ')] {
                    assert_eq!(
                        run_visible(&bytes, from, class, low),
                        run(&bytes, from, class),
                        "{bytes:?} from {from}"
                    );
                }
            }
            for class in [TOKEN, TARGET, VALUE, HOST] {
                assert_eq!(all_of(&bytes, class), run(&bytes, 0, class) == bytes.len());
            }
        }
    }

    #[test]
    fn host_values_take_the_uri_host_characters_only() {
        let allowed: Vec<u8> = (b'a'..=b'z')
            .chain(b'A'..=b'Z')
            .chain(b'0'..=b'9')
            .chain(*b"-._~!$&'()*+,;=:[]%")
            .collect();
        for b in 0..=255u8 {
            assert_eq!(
                valid_host(&[b'a', b]),
                allowed.contains(&b),
                "byte {b:#04x}"
            );
        }
        assert!(valid_host(b""));
        assert!(valid_host(b"[::1]:8080"));
        assert!(!valid_host(b"a b"));
    }

    #[test]
    fn more_header_fields_than_slots_are_left_to_httparse() {
        let mut head = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..HEADERS_MAX {
            head.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        let mut full = head.clone();
        full.extend_from_slice(b"\r\n");
        assert!(agrees(&full), "{HEADERS_MAX} fields fit");
        head.extend_from_slice(b"X-last: v\r\n\r\n");
        let mut slots = header_slots();
        assert!(common(&head, &mut slots).is_none());
    }

    #[test]
    fn every_prefix_and_every_byte_change_of_a_head_agrees_with_httparse() {
        let head = b"POST /v1/fn/x?k=3 HTTP/1.1\r\nHost: h:1\r\nContent-Length: 3\r\n\r\n";
        for n in 0..head.len() {
            assert!(!agrees(&head[..n]), "a {n}-byte prefix is incomplete");
        }
        let mut taken = 0;
        for at in 0..head.len() {
            for b in 0..=255u8 {
                let mut changed = head.to_vec();
                changed[at] = b;
                taken += usize::from(agrees(&changed));
            }
        }
        assert!(taken > head.len() * 40, "only {taken} variants taken");
    }
}
