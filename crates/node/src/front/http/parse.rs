//! HTTP/1.1 request-head and chunked-body parsing: pure functions over byte slices.
//!
//! Tokenising is done by `tokens` for the common form of a head and by `httparse`
//! (zero-copy, fuzzed upstream) for every other; this module adds what a server needs
//! on top of it and nothing about sockets: the limits (URI length, head
//! size, header count), the framing decision (`Content-Length` vs `chunked`, with the
//! request-smuggling cases refused), connection persistence, `Expect: 100-continue` and
//! the `Host` rule of HTTP/1.1.
//! Every function returns, like the RAC and remote-OpenCL decoders, a
//! `Result<`[`Decoded`]`<T>, _>`: `Ok(Decoded::Partial)` when more bytes are needed,
//! `Ok(Decoded::Complete(value, used))` with the bytes the value took, or an
//! [`HttpError`] that already knows its status code.

use std::fmt;

use rac_proto::Decoded;

use super::tokens::{self, valid_host, Line};
pub use super::tokens::{header_slots, HeaderSlots, HEADERS_MAX};

/// Upper bounds the parser enforces. All of them come from the node's configuration.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest request target (path + query) in bytes (414 beyond).
    pub uri_bytes_max: usize,
    /// Longest request head (request line + headers + blank line) in bytes (431 beyond).
    pub head_bytes_max: usize,
}

/// A protocol error, with the status the server answers it with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpError {
    pub status: u16,
    pub message: String,
}

impl HttpError {
    pub fn new(status: u16, message: impl Into<String>) -> HttpError {
        HttpError {
            status,
            message: message.into(),
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.message)
    }
}

/// How the request body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body (no `Content-Length`, no `Transfer-Encoding`).
    None,
    Length(u64),
    Chunked,
}

/// A parsed request head borrowing from the input buffer.
#[derive(Debug)]
pub struct RequestHead<'a> {
    pub method: &'a str,
    /// Request target as sent (`/v1/fn/topk?k=3`).
    pub target: &'a str,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    pub headers: &'a [httparse::Header<'a>],
    pub framing: BodyFraming,
    /// Whether the connection stays open after this exchange.
    pub keep_alive: bool,
    /// `Expect: 100-continue` was sent on an HTTP/1.1 request.
    pub expect_continue: bool,
}

impl<'a> RequestHead<'a> {
    /// Value of the first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    /// Path without the query string.
    pub fn path(&self) -> &'a str {
        self.target.split_once('?').map_or(self.target, |(p, _)| p)
    }

    /// Query string without the `?`, if any.
    pub fn query(&self) -> Option<&'a str> {
        self.target.split_once('?').map(|(_, q)| q)
    }
}

/// Parses one request head at the start of `buf`; complete, it used the bytes of the
/// head up to and including the blank line.
///
/// `headers` is scratch space for the header slice the result borrows.
pub fn parse_head<'b, 'h>(
    buf: &'b [u8],
    limits: &Limits,
    headers: &'h mut HeaderSlots<'b>,
) -> Result<Decoded<RequestHead<'h>>, HttpError>
where
    'b: 'h,
{
    let Some((line, headers, head_len)) =
        tokens::head(buf, headers).map_err(|e| refusal(e, buf))?
    else {
        check_partial(buf, limits)?;
        return Ok(Decoded::Partial);
    };
    let Line {
        method,
        target,
        minor_version,
    } = line;
    if head_len > limits.head_bytes_max {
        return Err(head_too_large(limits));
    }
    if target.len() > limits.uri_bytes_max {
        return Err(uri_too_long(limits));
    }
    if !target.starts_with('/') {
        return Err(HttpError::new(
            400,
            "request target must be an absolute path",
        ));
    }
    let meta = interpret_headers(headers, minor_version)?;
    let head = RequestHead {
        method,
        target,
        minor_version,
        headers,
        framing: meta.framing,
        keep_alive: meta.keep_alive,
        expect_continue: meta.expect_continue,
    };
    Ok(Decoded::Complete(head, head_len))
}

/// The answer to what httparse refused in `buf`.
pub(super) fn refusal(e: httparse::Error, buf: &[u8]) -> HttpError {
    match e {
        httparse::Error::TooManyHeaders => too_many_headers(),
        httparse::Error::Version => version_error(buf),
        e => HttpError::new(400, format!("malformed request head: {e}")),
    }
}

pub(super) fn too_many_headers() -> HttpError {
    HttpError::new(431, format!("more than {HEADERS_MAX} header fields"))
}

pub(super) fn head_too_large(limits: &Limits) -> HttpError {
    HttpError::new(
        431,
        format!("request head larger than {} bytes", limits.head_bytes_max),
    )
}

pub(super) fn uri_too_long(limits: &Limits) -> HttpError {
    HttpError::new(
        414,
        format!("request target longer than {} bytes", limits.uri_bytes_max),
    )
}

/// Refuses an incomplete head as soon as it can no longer become acceptable, so a
/// client cannot make the server buffer more than the limits allow.
fn check_partial(buf: &[u8], limits: &Limits) -> Result<(), HttpError> {
    let line = skip_empty_lines(buf);
    match memchr_newline(line) {
        // Still in the request line: the target so far is already too long. (Not a bound
        // on the whole line: a long method would make the answer depend on how the bytes
        // arrive; the head limit below bounds it.)
        None if target_len(line) > limits.uri_bytes_max => Err(uri_too_long(limits)),
        Some(line_end) if target_len(&line[..line_end]) > limits.uri_bytes_max => {
            Err(uri_too_long(limits))
        }
        _ if buf.len() > limits.head_bytes_max => Err(head_too_large(limits)),
        _ => Ok(()),
    }
}

/// `buf` after the empty lines a request may start with (RFC 9112 §2.2), which httparse
/// skips.
fn skip_empty_lines(mut buf: &[u8]) -> &[u8] {
    while let [b'\r', b'\n', rest @ ..] | [b'\n', rest @ ..] = buf {
        buf = rest;
    }
    buf
}

pub(super) fn memchr_newline(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}

fn target_len(line: &[u8]) -> usize {
    let mut parts = line.split(|&b| b == b' ');
    parts.next();
    parts.next().map_or(0, <[u8]>::len)
}

/// httparse reports any version other than 1.0/1.1 — and some garbage — as a version
/// error. A well-formed `HTTP/x.y` gets 505; anything else is a plain 400.
fn version_error(buf: &[u8]) -> HttpError {
    let line_end = memchr_newline(buf).unwrap_or(buf.len());
    let line = buf[..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&buf[..line_end]);
    let version = line.rsplit(|&b| b == b' ').next().unwrap_or(b"");
    let well_formed = version.len() >= 8
        && version.starts_with(b"HTTP/")
        && version[5..]
            .iter()
            .all(|&b| b.is_ascii_digit() || b == b'.');
    if well_formed {
        HttpError::new(505, "only HTTP/1.0 and HTTP/1.1 are supported")
    } else {
        HttpError::new(400, "malformed request line")
    }
}

struct HeadMeta {
    framing: BodyFraming,
    keep_alive: bool,
    expect_continue: bool,
}

fn interpret_headers(
    headers: &[httparse::Header<'_>],
    minor_version: u8,
) -> Result<HeadMeta, HttpError> {
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut saw_transfer_encoding = false;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    let mut hosts = 0;
    for h in headers {
        let name = h.name;
        if name.eq_ignore_ascii_case("host") {
            hosts += 1;
            if !valid_host(h.value) {
                return Err(HttpError::new(400, "invalid Host header"));
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            let value = parse_content_length(h.value)?;
            if content_length.is_some_and(|v| v != value) {
                return Err(HttpError::new(400, "conflicting Content-Length headers"));
            }
            content_length = Some(value);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            saw_transfer_encoding = true;
            for coding in tokens(h.value) {
                if chunked {
                    return Err(HttpError::new(
                        400,
                        "chunked must be the last transfer coding",
                    ));
                }
                if coding.eq_ignore_ascii_case(b"chunked") {
                    chunked = true;
                } else {
                    return Err(HttpError::new(
                        501,
                        format!(
                            "transfer coding `{}` is not supported (only chunked)",
                            String::from_utf8_lossy(coding)
                        ),
                    ));
                }
            }
        } else if name.eq_ignore_ascii_case("connection") {
            for token in tokens(h.value) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("expect") {
            if h.value.eq_ignore_ascii_case(b"100-continue") {
                expect_continue = minor_version >= 1;
            } else {
                return Err(HttpError::new(
                    417,
                    "only `Expect: 100-continue` is supported",
                ));
            }
        }
    }
    if saw_transfer_encoding && !chunked {
        return Err(HttpError::new(400, "empty Transfer-Encoding"));
    }
    // RFC 9112 §3.2: an HTTP/1.1 request lacking Host, or with several, is a 400. (An
    // HTTP/1.0 client may leave it out.) Checked after the framing, so a request with
    // a broken body framing gets the more specific answer.
    if hosts > 1 {
        return Err(HttpError::new(400, "more than one Host header"));
    }
    if hosts == 0 && minor_version >= 1 {
        return Err(HttpError::new(
            400,
            "an HTTP/1.1 request needs a Host header",
        ));
    }
    let framing = match (content_length, chunked) {
        // RFC 9112 §6.3: a message with both is a smuggling attempt as far as we care.
        (Some(_), true) => {
            return Err(HttpError::new(
                400,
                "both Content-Length and Transfer-Encoding",
            ))
        }
        (_, true) if minor_version == 0 => {
            return Err(HttpError::new(
                400,
                "Transfer-Encoding is not allowed in HTTP/1.0",
            ))
        }
        (_, true) => BodyFraming::Chunked,
        (Some(n), false) => BodyFraming::Length(n),
        (None, false) => BodyFraming::None,
    };
    let keep_alive = if minor_version >= 1 {
        !close
    } else {
        keep_alive_token && !close
    };
    Ok(HeadMeta {
        framing,
        keep_alive,
        expect_continue,
    })
}

fn parse_content_length(value: &[u8]) -> Result<u64, HttpError> {
    let value = trim(value);
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return Err(HttpError::new(400, "invalid Content-Length"));
    }
    Ok(value
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')))
}

fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// Comma-separated tokens of a header value, trimmed, empty ones skipped.
fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim)
        .filter(|t| !t.is_empty())
}

/// Longest chunk-size line (size, extensions, CRLF) we buffer before refusing.
pub const CHUNK_LINE_MAX: usize = 1024;
/// Longest trailer section we accept (trailers are read and ignored).
pub const TRAILERS_MAX: usize = 8192;

/// Parses a chunk-size line `size[;ext]CRLF` at the start of `buf`: the chunk's data
/// size, having used the line. The data (then CRLF) follows the line; a size of 0 is
/// the last chunk, followed by trailers ([`parse_trailers`]).
pub fn parse_chunk_size(buf: &[u8]) -> Result<Decoded<u64>, HttpError> {
    let Some(nl) = memchr_newline(&buf[..buf.len().min(CHUNK_LINE_MAX)]) else {
        return if buf.len() >= CHUNK_LINE_MAX {
            Err(HttpError::new(400, "chunk size line too long"))
        } else {
            Ok(Decoded::Partial)
        };
    };
    if nl == 0 || buf[nl - 1] != b'\r' {
        return Err(HttpError::new(400, "chunk size line must end with CRLF"));
    }
    let line = &buf[..nl - 1];
    let digits = line.split(|&b| b == b';').next().map(trim).unwrap_or(b"");
    if digits.is_empty() || digits.len() > 15 {
        return Err(HttpError::new(400, "invalid chunk size"));
    }
    let mut size = 0u64;
    for &d in digits {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return Err(HttpError::new(400, "invalid chunk size")),
        };
        size = size * 16 + u64::from(v);
    }
    Ok(Decoded::Complete(size, nl + 1))
}

/// Checks the CRLF that ends a chunk's data, at the start of `buf`.
pub fn parse_chunk_end(buf: &[u8]) -> Result<Decoded<()>, HttpError> {
    match buf {
        [b'\r', b'\n', ..] => Ok(Decoded::Complete((), 2)),
        [] | [b'\r'] => Ok(Decoded::Partial),
        _ => Err(HttpError::new(400, "chunk data not followed by CRLF")),
    }
}

/// Trailer fields after the last chunk, up to and including the blank line: complete,
/// they used the bytes they occupy. Trailers are not interpreted.
pub fn parse_trailers(buf: &[u8]) -> Result<Decoded<()>, HttpError> {
    let mut pos = 0;
    loop {
        let Some(nl) = memchr_newline(&buf[pos..]) else {
            return if buf.len() > TRAILERS_MAX {
                Err(HttpError::new(431, "trailer section too large"))
            } else {
                Ok(Decoded::Partial)
            };
        };
        let line = &buf[pos..pos + nl];
        pos += nl + 1;
        if pos > TRAILERS_MAX {
            return Err(HttpError::new(431, "trailer section too large"));
        }
        if line == b"\r" {
            return Ok(Decoded::Complete((), pos));
        }
        if line.last() != Some(&b'\r') {
            return Err(HttpError::new(400, "trailer line must end with CRLF"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        uri_bytes_max: 64,
        head_bytes_max: 256,
    };

    /// Method, target, framing, keep-alive, expect-continue, head length.
    type Summary = (String, String, BodyFraming, bool, bool, usize);

    fn parse(buf: &[u8]) -> Result<Option<Summary>, u16> {
        let mut headers = header_slots();
        match parse_head(buf, &LIMITS, &mut headers) {
            Ok(Decoded::Partial) => Ok(None),
            Ok(Decoded::Complete(h, head_len)) => Ok(Some((
                h.method.to_string(),
                h.target.to_string(),
                h.framing,
                h.keep_alive,
                h.expect_continue,
                head_len,
            ))),
            Err(e) => Err(e.status),
        }
    }

    #[test]
    fn simple_get_is_complete_and_keeps_alive() {
        let req = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /next";
        let (m, t, f, ka, ec, len) = parse(req).unwrap().unwrap();
        assert_eq!(
            (m.as_str(), t.as_str(), f, ka, ec),
            ("GET", "/health", BodyFraming::None, true, false)
        );
        assert_eq!(len, req.len() - "GET /next".len());
    }

    #[test]
    fn every_prefix_of_a_valid_head_is_partial() {
        let req = b"POST /v1/fn/topk?k=3 HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\n";
        for end in 0..req.len() {
            assert_eq!(parse(&req[..end]), Ok(None), "prefix {end}");
        }
        assert!(parse(req).unwrap().is_some());
    }

    #[test]
    fn connection_persistence_follows_the_version() {
        let get = |v: &str, conn: &str| {
            let req = format!("GET / HTTP/1.{v}\r\nHost: x\r\n{conn}\r\n");
            parse(req.as_bytes()).unwrap().unwrap().3
        };
        assert!(get("1", ""));
        assert!(!get("1", "Connection: close\r\n"));
        assert!(!get("0", ""));
        assert!(get("0", "Connection: keep-alive\r\n"));
        assert!(!get("0", "Connection: keep-alive, close\r\n"));
    }

    #[test]
    fn framing_and_its_refusals() {
        let framing = |headers: &str| {
            let req = format!("POST /x HTTP/1.1\r\nHost: x\r\n{headers}\r\n");
            parse(req.as_bytes()).map(|r| r.unwrap().2)
        };
        assert_eq!(
            framing("Content-Length: 12\r\n"),
            Ok(BodyFraming::Length(12))
        );
        assert_eq!(
            framing("Content-Length: 12\r\nContent-Length: 12\r\n"),
            Ok(BodyFraming::Length(12))
        );
        assert_eq!(
            framing("Transfer-Encoding: chunked\r\n"),
            Ok(BodyFraming::Chunked)
        );
        assert_eq!(
            framing("Content-Length: 1\r\nContent-Length: 2\r\n"),
            Err(400)
        );
        assert_eq!(framing("Content-Length: -1\r\n"), Err(400));
        assert_eq!(
            framing("Content-Length: 99999999999999999999\r\n"),
            Err(400)
        );
        assert_eq!(
            framing("Content-Length: 1\r\nTransfer-Encoding: chunked\r\n"),
            Err(400)
        );
        assert_eq!(framing("Transfer-Encoding: gzip\r\n"), Err(501));
        assert_eq!(framing("Transfer-Encoding: chunked, gzip\r\n"), Err(400));
        assert_eq!(framing("Expect: something\r\n"), Err(417));
    }

    #[test]
    fn expect_continue_only_on_http_1_1() {
        let req =
            b"POST /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n";
        assert!(parse(req).unwrap().unwrap().4);
        let req = b"POST /x HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n";
        assert!(!parse(req).unwrap().unwrap().4);
    }

    #[test]
    fn limits_give_their_status_even_before_the_head_is_complete() {
        let long_uri = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(100));
        assert_eq!(parse(long_uri.as_bytes()), Err(414));
        assert_eq!(parse(&long_uri.as_bytes()[..110]), Err(414));
        let big_head = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "b".repeat(300));
        assert_eq!(parse(big_head.as_bytes()), Err(431));
        assert_eq!(parse(&big_head.as_bytes()[..280]), Err(431));
        let many = format!(
            "GET / HTTP/1.1\r\n{}\r\n",
            "A: b\r\n".repeat(HEADERS_MAX + 1)
        );
        let mut headers = header_slots();
        let roomy = Limits {
            uri_bytes_max: 64,
            head_bytes_max: 4096,
        };
        assert_eq!(
            parse_head(many.as_bytes(), &roomy, &mut headers)
                .unwrap_err()
                .status,
            431
        );
    }

    #[test]
    fn http_1_1_needs_exactly_one_valid_host() {
        let host = |headers: &str, v: u8| {
            let req = format!("GET / HTTP/1.{v}\r\n{headers}\r\n");
            parse(req.as_bytes()).map(|r| r.is_some())
        };
        assert_eq!(host("", 1), Err(400));
        assert_eq!(host("", 0), Ok(true));
        assert_eq!(host("Host: a\r\nHost: b\r\n", 1), Err(400));
        assert_eq!(host("Host: a\r\nHost: b\r\n", 0), Err(400));
        assert_eq!(host("Host: a b\r\n", 1), Err(400));
        assert_eq!(host("Host: x/y\r\n", 1), Err(400));
        for ok in [
            "",
            "example.com",
            "127.0.0.1:8080",
            "[::1]:80",
            "xn--bcher-kva.example",
        ] {
            assert_eq!(host(&format!("host: {ok}\r\n"), 1), Ok(true), "{ok}");
        }
        // The framing errors keep their own, more specific status.
        assert_eq!(
            parse(b"POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
            Err(501)
        );
    }

    #[test]
    fn versions_and_garbage() {
        assert_eq!(parse(b"GET / HTTP/2.0\r\n\r\n"), Err(505));
        assert_eq!(parse(b"GET / HTTP/1.2\r\n\r\n"), Err(505));
        assert_eq!(parse(b"GET / FOO/1.1\r\n\r\n"), Err(400));
        assert_eq!(parse(b"\x00\x01\x02 / HTTP/1.1\r\n\r\n"), Err(400));
        assert_eq!(parse(b"GET http://x/ HTTP/1.1\r\n\r\n"), Err(400));
        assert_eq!(parse(b"GET / HTTP/1.1\r\nBad Header\r\n\r\n"), Err(400));
    }

    /// Decodes a whole chunked body with the step functions, as the connection does.
    fn dechunk(mut buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, u16> {
        let total = buf.len();
        let mut data = Vec::new();
        loop {
            let (size, line) = match parse_chunk_size(buf).map_err(|e| e.status)? {
                Decoded::Partial => return Ok(None),
                Decoded::Complete(size, line) => (size, line),
            };
            buf = &buf[line..];
            if size == 0 {
                return match parse_trailers(buf).map_err(|e| e.status)? {
                    Decoded::Partial => Ok(None),
                    Decoded::Complete((), n) => Ok(Some((data, total - buf.len() + n))),
                };
            }
            let size = size as usize;
            if buf.len() < size {
                return Ok(None);
            }
            data.extend_from_slice(&buf[..size]);
            buf = &buf[size..];
            match parse_chunk_end(buf).map_err(|e| e.status)? {
                Decoded::Partial => return Ok(None),
                Decoded::Complete((), n) => buf = &buf[n..],
            }
        }
    }

    #[test]
    fn chunks_decode_with_extensions_and_trailers() {
        let body = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let (data, used) = dechunk(body).unwrap().unwrap();
        assert_eq!(data, b"Wikipedia");
        assert_eq!(used, body.len() - 4);
        for end in 0..used {
            assert_eq!(dechunk(&body[..end]), Ok(None), "prefix {end}");
        }
    }

    #[test]
    fn bad_chunks_are_refused() {
        assert_eq!(dechunk(b"zz\r\n"), Err(400));
        assert_eq!(dechunk(b"3\r\nabcX\r\n"), Err(400));
        assert_eq!(dechunk(b"3\nabc\r\n"), Err(400));
        assert_eq!(dechunk(&[b'1'; 2000]), Err(400));
        assert_eq!(dechunk(b"0\r\nbad trailer\n\r\n"), Err(400));
        assert!(matches!(
            parse_chunk_size(b"ffffffff\r\n"),
            Ok(Decoded::Complete(0xffff_ffff, 10))
        ));
    }
}

/// Bodies of the fuzz targets (`fuzz/fuzz_targets/`), shared with the test that replays
/// the checked-in corpus on stable Rust (`tests/fuzz_corpus.rs`).
///
/// Besides "no panic on any input", each body asserts what the connection relies on:
/// a complete head lies within the input and no shorter prefix of it is complete,
/// bytes after the head do not change it, an error on a prefix stays an error, and
/// every error carries a status the server can answer with.
#[doc(hidden)]
pub mod fuzzing {
    use super::{
        header_slots, parse_chunk_end, parse_chunk_size, parse_head, parse_trailers, BodyFraming,
        HttpError, Limits, CHUNK_LINE_MAX, HEADERS_MAX, TRAILERS_MAX,
    };
    use crate::front::http::scan::HeadScan;
    use rac_proto::Decoded;

    /// Small limits, so that the 414 and 431 paths are reached often.
    const LIMITS: Limits = Limits {
        uri_bytes_max: 256,
        head_bytes_max: 2048,
    };

    /// Every status the parsers may refuse a request with.
    const STATUSES: [u16; 9] = [400, 405, 411, 413, 414, 417, 431, 501, 505];

    fn check_error(e: &HttpError) {
        assert!(STATUSES.contains(&e.status), "unexpected status in {e:?}");
        assert!(!e.message.is_empty());
    }

    /// What a head parse comes to, owned, so that results of different buffers compare.
    #[derive(Debug, PartialEq, Eq)]
    enum Head {
        Partial,
        Complete {
            method: String,
            target: String,
            minor_version: u8,
            headers: usize,
            head_len: usize,
            framing: BodyFraming,
            keep_alive: bool,
            expect_continue: bool,
        },
        Error(u16),
    }

    fn head(buf: &[u8]) -> Head {
        let mut headers = header_slots();
        summarize(buf, parse_head(buf, &LIMITS, &mut headers))
    }

    /// The incremental scan of `buf` (what a connection runs per read), fed the
    /// prefixes ending at `cuts` and then all of it: its first result that is not
    /// `Partial`.
    fn scanned(buf: &[u8], cuts: impl IntoIterator<Item = usize>) -> Head {
        let mut scan = HeadScan::default();
        for end in cuts.into_iter().chain([buf.len()]) {
            let mut headers = header_slots();
            let r = summarize(&buf[..end], scan.parse(&buf[..end], &LIMITS, &mut headers));
            if r != Head::Partial {
                return r;
            }
        }
        Head::Partial
    }

    fn summarize(buf: &[u8], parsed: Result<Decoded<super::RequestHead<'_>>, HttpError>) -> Head {
        match parsed {
            Ok(Decoded::Partial) => Head::Partial,
            Ok(Decoded::Complete(h, head_len)) => {
                assert!(head_len <= buf.len());
                assert!(head_len <= LIMITS.head_bytes_max);
                assert!(h.target.len() <= LIMITS.uri_bytes_max);
                assert!(h.target.starts_with('/'));
                assert!(h.minor_version <= 1);
                assert!(h.headers.len() <= HEADERS_MAX);
                let within = |s: &str| {
                    let (p, n) = (s.as_ptr() as usize, buf.as_ptr() as usize);
                    p >= n && p + s.len() <= n + head_len
                };
                assert!(within(h.method) && within(h.target));
                assert!(!h.method.is_empty());
                assert_eq!(
                    h.path().len() + h.query().map_or(0, |q| q.len() + 1),
                    h.target.len()
                );
                if h.minor_version == 0 {
                    assert!(!h.expect_continue);
                    assert_ne!(h.framing, BodyFraming::Chunked);
                }
                Head::Complete {
                    method: h.method.to_owned(),
                    target: h.target.to_owned(),
                    minor_version: h.minor_version,
                    headers: h.headers.len(),
                    head_len,
                    framing: h.framing,
                    keep_alive: h.keep_alive,
                    expect_continue: h.expect_continue,
                }
            }
            Err(e) => {
                check_error(&e);
                Head::Error(e.status)
            }
        }
    }

    /// A few prefix lengths below `end`: the shortest, the longest and some between.
    fn prefixes(end: usize) -> impl Iterator<Item = usize> {
        let mut cuts: Vec<usize> = (0..end.min(4)).collect();
        cuts.extend((1..=4).filter_map(|k| end.checked_sub(k)));
        cuts.extend([end / 2, end / 3, 2 * end / 3]);
        cuts.sort_unstable();
        cuts.dedup();
        cuts.into_iter().filter(move |&n| n < end)
    }

    /// Target `http_head`: the request-head parser, and its incremental scan.
    pub fn http_head(data: &[u8]) {
        // The common-form tokeniser takes only what httparse takes, as httparse does.
        crate::front::http::tokens::fuzzing::agrees(data);
        let full = head(data);
        // The scan gives the same at every split (a few here, every one in its unit
        // tests), agrees with the one-pass parse on complete heads, and refuses only
        // what the one-pass parse refuses.
        let whole = scanned(data, []);
        assert_eq!(
            scanned(data, prefixes(data.len())),
            whole,
            "scanned in pieces"
        );
        match (&whole, &full) {
            (Head::Complete { .. }, _) | (_, Head::Complete { .. }) => {
                assert_eq!(whole, full, "scan and one-pass parse differ")
            }
            (Head::Error(_), other) => {
                assert!(matches!(other, Head::Error(_)), "scan refused {other:?}")
            }
            (Head::Partial, _) => assert!(data.len() <= LIMITS.head_bytes_max),
        }
        match &full {
            Head::Complete { head_len, .. } => {
                let head_len = *head_len;
                // Bytes after the head (a pipelined request, a body) change nothing.
                assert_eq!(
                    head(&data[..head_len]),
                    full,
                    "head alone parses differently"
                );
                for n in prefixes(head_len) {
                    match head(&data[..n]) {
                        Head::Partial => {}
                        // A prefix may already be refused only if the request is.
                        other => panic!("{n}-byte prefix of a complete head: {other:?}"),
                    }
                }
            }
            Head::Partial => {
                assert!(data.len() <= LIMITS.head_bytes_max);
                for n in prefixes(data.len()) {
                    assert_eq!(head(&data[..n]), Head::Partial, "{n}-byte prefix");
                }
            }
            Head::Error(_) => {}
        }
    }

    /// Decodes a whole chunked body with the step functions, as the connection does:
    /// `Ok(None)` when more bytes are needed, else the data length and bytes used.
    fn dechunk(mut buf: &[u8], mut data: impl FnMut(&[u8])) -> Result<Option<usize>, u16> {
        let total = buf.len();
        fn step<T>(r: Result<Decoded<T>, HttpError>) -> Result<Decoded<T>, u16> {
            r.map_err(|e| {
                check_error(&e);
                e.status
            })
        }
        loop {
            let (size, line) = match step(parse_chunk_size(buf))? {
                Decoded::Partial => {
                    assert!(buf.len() < CHUNK_LINE_MAX);
                    return Ok(None);
                }
                Decoded::Complete(size, line) => (size, line),
            };
            assert!(line <= buf.len() && line <= CHUNK_LINE_MAX);
            assert!(size < 1 << 60);
            buf = &buf[line..];
            if size == 0 {
                return match step(parse_trailers(buf))? {
                    Decoded::Partial => Ok(None),
                    Decoded::Complete((), n) => {
                        assert!(n <= buf.len() && n <= TRAILERS_MAX);
                        Ok(Some(total - buf.len() + n))
                    }
                };
            }
            let Some(chunk) = usize::try_from(size).ok().and_then(|s| buf.get(..s)) else {
                return Ok(None);
            };
            data(chunk);
            buf = &buf[chunk.len()..];
            match step(parse_chunk_end(buf))? {
                Decoded::Partial => return Ok(None),
                Decoded::Complete((), n) => {
                    assert_eq!(n, 2);
                    buf = &buf[n..];
                }
            }
        }
    }

    /// Target `http_chunked`: the chunked-body step parsers, over the input as a body
    /// and over the input's bytes re-encoded as chunks.
    pub fn http_chunked(data: &[u8]) {
        let mut decoded = 0usize;
        let full = dechunk(data, |c| decoded += c.len());
        match full {
            Ok(Some(used)) => {
                assert!(used <= data.len());
                assert!(decoded < used);
                for n in prefixes(used) {
                    assert_eq!(dechunk(&data[..n], |_| {}), Ok(None), "{n}-byte prefix");
                }
            }
            Ok(None) => {
                for n in prefixes(data.len()) {
                    assert_eq!(dechunk(&data[..n], |_| {}), Ok(None), "{n}-byte prefix");
                }
            }
            Err(status) => {
                // An error is final: no prefix may be refused differently.
                for n in prefixes(data.len()) {
                    match dechunk(&data[..n], |_| {}) {
                        Ok(None) => {}
                        Err(s) => assert_eq!(s, status, "{n}-byte prefix"),
                        Ok(Some(used)) => panic!("{n}-byte prefix complete ({used} bytes)"),
                    }
                }
            }
        }

        // Round trip: the input split into chunks whose sizes the input itself picks.
        let mut body = Vec::with_capacity(data.len() * 2 + 16);
        let mut rest = data;
        while let Some((&first, _)) = rest.split_first() {
            let size = (usize::from(first) % 64 + 1).min(rest.len());
            let ext = if first & 0x80 != 0 { ";x=y" } else { "" };
            body.extend_from_slice(format!("{size:X}{ext}\r\n").as_bytes());
            body.extend_from_slice(&rest[..size]);
            body.extend_from_slice(b"\r\n");
            rest = &rest[size..];
        }
        body.extend_from_slice(b"0\r\nTrailer: t\r\n\r\nNEXT");
        let mut decoded = Vec::with_capacity(data.len());
        let used = dechunk(&body, |c| decoded.extend_from_slice(c));
        assert_eq!(used, Ok(Some(body.len() - 4)));
        assert_eq!(decoded, data);
    }
}
