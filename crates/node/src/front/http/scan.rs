//! Incremental request-head scanning: what a connection runs on each read while a
//! request head is incomplete.
//!
//! [`parse_head`] parses a head in one pass over the whole buffer, so calling it on
//! every read of a head that arrives a byte at a time (slowloris) re-parses the whole
//! partial head per byte: O(head) per byte, O(head²) per head (issue 15: a 16 KiB head
//! sent a byte at a time cost ~134 M bytes of parsing). A [`HeadScan`] remembers how
//! far it has looked, so each byte is looked at a bounded number of times:
//!
//! * new bytes are searched for line ends (and, in the request line, for the spaces
//!   around the target, for the URI limit);
//! * each line is checked by httparse once, when it is whole: the request line alone
//!   (and its first [`EARLY_CHECK_BYTES`] once, so that a client speaking another
//!   protocol is refused without waiting for a line end), each header line alone;
//! * the whole head is parsed once, by [`parse_head`], when its blank line arrives.
//!
//! The result is a function of the bytes alone, not of how they were split into reads:
//! the checks fire at fixed byte positions, in position order (a line's check at its
//! end, the URI limit at the target's `uri_bytes_max + 1`th byte, the head limit at
//! byte `head_bytes_max + 1`). A complete head gives exactly what [`parse_head`] gives;
//! a refusal may come at a later byte than [`parse_head`] on that prefix would give one
//! (a malformed line is found when it ends), never for a head [`parse_head`] accepts.
//! Tested below at every split point, and against [`parse_head`] in the `http_head`
//! fuzz target.

use rac_proto::Decoded;

use super::parse::{
    head_too_large, memchr_newline, parse_head, refusal, too_many_headers, uri_too_long,
    HeaderSlots, HttpError, Limits, RequestHead, HEADERS_MAX,
};

/// The first bytes of a request line are checked as soon as they are in (a line end
/// may never come from a client speaking another protocol): enough for a method and
/// the start of a target.
pub const EARLY_CHECK_BYTES: usize = 16;

/// How far the scan of one request head got. Offsets count from the head's first
/// byte, the start of the slice given to [`HeadScan::parse`]; the caller gives the
/// same head (grown by what arrived since) on every call, and a fresh scan for the
/// next head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeadScan {
    /// Bytes looked at so far.
    scanned: usize,
    /// Where the line being received starts.
    line_start: usize,
    /// The request line (the first non-empty line) is whole and was accepted.
    request_line: bool,
    /// The request line's first [`EARLY_CHECK_BYTES`] were accepted.
    early_checked: bool,
    /// Header lines whole and accepted so far.
    header_lines: usize,
    /// In the request line: where the target starts (after the first space)...
    target_start: Option<usize>,
    /// ... and where it ends (the second space).
    target_end: Option<usize>,
}

impl HeadScan {
    /// Parses the head at the start of `buf` as far as it has come: [`HeadScan::scan`],
    /// then [`parse_whole`] once the head is whole.
    pub fn parse<'b, 'h>(
        &mut self,
        buf: &'b [u8],
        limits: &Limits,
        headers: &'h mut HeaderSlots<'b>,
    ) -> Result<Decoded<RequestHead<'h>>, HttpError>
    where
        'b: 'h,
    {
        match self.scan(buf, limits)? {
            None => Ok(Decoded::Partial),
            Some(n) => Ok(Decoded::Complete(
                parse_whole(&buf[..n], limits, headers)?,
                n,
            )),
        }
    }

    /// The head at the start of `buf` and its length when a fresh scan finds it whole
    /// in one pass of [`parse_head`] (the common case: a request's head arrives in one
    /// read); `None` when the scan has begun, or the head is incomplete or refused, and
    /// [`HeadScan::scan`] is to look instead. A complete head gives exactly what the
    /// scan followed by [`parse_whole`] gives (see the module's doc), for one parse of
    /// the head instead of three (each line alone, the early check, the whole head:
    /// 1.6k of the node's 8.2k instructions per keep-alive `/health`, issue 28). Tried
    /// only on a fresh scan, so a head sent a byte at a time pays for it once, on its
    /// first read.
    pub fn at_once<'b, 'h>(
        &self,
        buf: &'b [u8],
        limits: &Limits,
        headers: &'h mut HeaderSlots<'b>,
    ) -> Option<(RequestHead<'h>, usize)>
    where
        'b: 'h,
    {
        if *self != HeadScan::default() {
            return None;
        }
        match parse_head(buf, limits, headers) {
            Ok(Decoded::Complete(head, n)) => Some((head, n)),
            Ok(Decoded::Partial) | Err(_) => None,
        }
    }

    /// Looks at the bytes of the head at the start of `buf` that arrived since the last
    /// call: the head's length once its blank line is in (every line accepted on the
    /// way), `None` while more is needed. After a result other than `None` the scan
    /// starts over, for the next head.
    pub fn scan(&mut self, buf: &[u8], limits: &Limits) -> Result<Option<usize>, HttpError> {
        let scanned = self.scan_lines(buf, limits);
        if !matches!(scanned, Ok(None)) {
            *self = HeadScan::default();
        }
        scanned
    }

    /// `Some(length)` once the head's blank line is in, `None` while more is needed.
    fn scan_lines(&mut self, buf: &[u8], limits: &Limits) -> Result<Option<usize>, HttpError> {
        assert!(
            self.scanned <= buf.len(),
            "the head shrank between two scans"
        );
        while let Some(nl) = memchr_newline(&buf[self.scanned..]) {
            let end = self.scanned + nl + 1;
            self.advance(buf, end);
            // The position checks that fall within this line come before its own.
            self.check_positions(buf, end, limits)?;
            let line_start = std::mem::replace(&mut self.line_start, end);
            let blank = matches!(&buf[line_start..end - 1], [] | [b'\r']);
            if !self.request_line {
                // Empty lines before the request line are skipped (RFC 9112 §2.2), as
                // httparse does.
                if !blank {
                    check_request_line(&buf[..end])?;
                    self.request_line = true;
                }
            } else if blank {
                return Ok(Some(end));
            } else {
                check_header_line(&buf[line_start..end])?;
                self.header_lines += 1;
                if self.header_lines > HEADERS_MAX {
                    return Err(too_many_headers());
                }
            }
        }
        self.advance(buf, buf.len());
        self.check_positions(buf, buf.len(), limits)?;
        Ok(None)
    }

    /// Marks `buf[..to]` looked at, noting the target's spaces while in the request
    /// line.
    fn advance(&mut self, buf: &[u8], to: usize) {
        if !self.request_line && self.target_end.is_none() {
            for (i, &b) in buf[self.scanned..to].iter().enumerate() {
                if b != b' ' {
                    continue;
                }
                let at = self.scanned + i;
                if self.target_start.is_none() {
                    self.target_start = Some(at + 1);
                } else {
                    self.target_end = Some(at);
                    break;
                }
            }
        }
        self.scanned = to;
    }

    /// The checks that fire at a fixed position, for the first `upto` bytes, in
    /// position order: the request line's first bytes, the URI limit (from the
    /// target's `uri_bytes_max + 1`th byte), the head limit (from byte
    /// `head_bytes_max + 1`).
    fn check_positions(
        &mut self,
        buf: &[u8],
        upto: usize,
        limits: &Limits,
    ) -> Result<(), HttpError> {
        let head_at = limits.head_bytes_max + 1;
        let uri_at = self.target_start.and_then(|start| {
            let too_long = self
                .target_end
                .is_none_or(|end| end - start > limits.uri_bytes_max);
            too_long.then_some(start + limits.uri_bytes_max + 1)
        });
        let (limit_at, limit): (usize, fn(&Limits) -> HttpError) = match uri_at {
            Some(at) if at <= head_at => (at, uri_too_long),
            _ => (head_at, head_too_large),
        };
        if !self.request_line && !self.early_checked {
            let early_at = self.line_start + EARLY_CHECK_BYTES;
            if early_at <= upto && early_at <= limit_at {
                // Not into the version, which is refused with its own status (505 or
                // 400) only when the line is whole.
                let until = self.target_end.map_or(early_at, |end| end.min(early_at));
                check_request_line(&buf[..until])?;
                self.early_checked = true;
            }
        }
        if limit_at <= upto {
            return Err(limit(limits));
        }
        Ok(())
    }
}

/// Parses a head [`HeadScan::scan`] found whole (`head` is exactly its bytes), in one
/// pass.
pub fn parse_whole<'b, 'h>(
    head: &'b [u8],
    limits: &Limits,
    headers: &'h mut HeaderSlots<'b>,
) -> Result<RequestHead<'h>, HttpError>
where
    'b: 'h,
{
    match parse_head(head, limits, headers)? {
        Decoded::Complete(parsed, n) if n == head.len() => Ok(parsed),
        // Every line was accepted alone and the blank line found, so the whole head
        // parses; anything else is a bug here, refused rather than waited on.
        other => {
            debug_assert!(
                false,
                "scanned a {}-byte head, parsed {other:?}",
                head.len()
            );
            Err(HttpError::new(400, "malformed request head"))
        }
    }
}

/// Checks a request line (whole, or its start), after any empty lines: httparse with
/// no room for headers, which stops at the line's end.
fn check_request_line(buf: &[u8]) -> Result<(), HttpError> {
    match httparse::Request::new(&mut []).parse(buf) {
        Ok(_) => Ok(()),
        Err(e) => Err(refusal(e, buf)),
    }
}

/// Checks one whole header line, as httparse would within the head.
fn check_header_line(line: &[u8]) -> Result<(), HttpError> {
    match httparse::parse_headers(line, &mut [httparse::EMPTY_HEADER; 1]) {
        Ok(_) => Ok(()),
        Err(e) => Err(refusal(e, line)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::http::parse::header_slots;

    const LIMITS: Limits = Limits {
        uri_bytes_max: 64,
        head_bytes_max: 8192,
    };

    /// Method, target, header count, head length.
    type Summary = (String, String, usize, usize);

    fn summary(r: Result<Decoded<RequestHead<'_>>, HttpError>) -> Result<Option<Summary>, u16> {
        match r {
            Ok(Decoded::Partial) => Ok(None),
            Ok(Decoded::Complete(h, n)) => Ok(Some((
                h.method.to_owned(),
                h.target.to_owned(),
                h.headers.len(),
                n,
            ))),
            Err(e) => Err(e.status),
        }
    }

    /// Feeds `data` to one scan as the prefixes ending at `cuts`, then whole, as a
    /// connection does read by read; the first result that is not `Partial`.
    fn scan_in_pieces(
        data: &[u8],
        cuts: impl IntoIterator<Item = usize>,
    ) -> Result<Option<Summary>, u16> {
        let mut scan = HeadScan::default();
        for end in cuts.into_iter().chain([data.len()]) {
            let mut headers = header_slots();
            let r = summary(scan.parse(&data[..end], &LIMITS, &mut headers));
            if r != Ok(None) {
                assert_eq!(scan, HeadScan::default(), "a finished scan starts over");
                return r;
            }
        }
        Ok(None)
    }

    fn inputs() -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = [
            &b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            b"\r\n\nPOST /v1/fn/topk?k=3 HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\nBODYBODY",
            b"GET / HTTP/1.0\nX: y\n\nGET /next",
            b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
            b"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1\r\n Folded: x\r\n\r\n",
            b"\x00\x01\x02 / HTTP/1.1\r\n\r\n",
            b"\rGET / HTTP/1.1\r\n\r\n",
            // A TLS ClientHello's start: no line end is coming.
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\x8a\x1e\x02\x33\x44\x55\x66\x77",
            b"GET",
        ]
        .iter()
        .map(|s| s.to_vec())
        .collect();
        let long_uri = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "u".repeat(100));
        let long_method = format!("{} / HTTP/1.1\r\n\r\n", "M".repeat(9000));
        let big = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX: {}\r\n\r\n",
            "v".repeat(9000)
        );
        let slowloris = format!(
            "POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\n{}Content-Length: 5\r\n\r\n",
            "X-Pad: 0123456789012345678901234567890123456789012345678901234567890123\r\n"
                .repeat(60)
        );
        let many = format!(
            "GET / HTTP/1.1\r\n{}\r\n",
            "A: b\r\n".repeat(HEADERS_MAX + 1)
        );
        let exactly = format!("GET / HTTP/1.0\r\n{}\r\n", "A: b\r\n".repeat(HEADERS_MAX));
        for s in [long_uri, long_method, big, slowloris, many, exactly] {
            v.push(s.into_bytes());
        }
        v
    }

    #[test]
    fn a_head_split_at_any_byte_scans_as_it_does_whole() {
        for data in inputs() {
            let whole = scan_in_pieces(&data, []);
            let name = String::from_utf8_lossy(&data[..data.len().min(40)]).into_owned();
            for cut in 0..=data.len() {
                assert_eq!(scan_in_pieces(&data, [cut]), whole, "{name:?} cut at {cut}");
            }
            assert_eq!(
                scan_in_pieces(&data, 1..data.len()),
                whole,
                "{name:?} byte by byte"
            );
            // A complete head parses as in one pass; a refused one is refused by it too.
            let mut headers = header_slots();
            let one_pass = summary(parse_head(&data, &LIMITS, &mut headers));
            match &whole {
                Ok(Some(_)) => assert_eq!(whole, one_pass, "{name:?}"),
                Err(_) => assert!(one_pass.is_err(), "{name:?}: {one_pass:?}"),
                Ok(None) => assert!(data.len() <= LIMITS.head_bytes_max, "{name:?}"),
            }
        }
    }

    #[test]
    fn a_head_found_whole_at_once_is_what_the_scan_finds() {
        for data in inputs() {
            let name = String::from_utf8_lossy(&data[..data.len().min(40)]).into_owned();
            for end in 0..=data.len() {
                let prefix = &data[..end];
                let mut headers = header_slots();
                let at_once = HeadScan::default()
                    .at_once(prefix, &LIMITS, &mut headers)
                    .map(|(h, n)| {
                        let (method, target) = (h.method.to_owned(), h.target.to_owned());
                        (method, target, h.headers.len(), n)
                    });
                let scanned = scan_in_pieces(prefix, []);
                match at_once {
                    Some(found) => assert_eq!(scanned, Ok(Some(found)), "{name:?} to {end}"),
                    None => assert!(!matches!(scanned, Ok(Some(_))), "{name:?} to {end}"),
                }
            }
        }
        // Once a scan has begun, it goes on looking: not a second parse from the start.
        let data = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        let mut scan = HeadScan::default();
        assert!(matches!(scan.scan(&data[..5], &LIMITS), Ok(None)));
        let mut headers = header_slots();
        assert!(scan.at_once(data, &LIMITS, &mut headers).is_none());
    }

    #[test]
    fn refusals_carry_their_status() {
        let status = |data: &[u8]| scan_in_pieces(data, 1..data.len()).map(|s| s.is_some());
        let inputs = inputs();
        let expected: [Result<bool, u16>; 17] = [
            Ok(true),
            Ok(true),
            Ok(true),
            Err(400),
            Err(400),
            Err(505),
            Err(400),
            Err(400),
            Err(400),
            Err(400),
            Ok(false),
            Err(414),
            Err(431),
            Err(431),
            Ok(true),
            Err(431),
            Ok(true),
        ];
        for (data, want) in inputs.iter().zip(expected) {
            assert_eq!(
                status(data),
                want,
                "{:?}",
                String::from_utf8_lossy(&data[..data.len().min(40)])
            );
        }
    }

    #[test]
    fn each_call_looks_only_at_new_bytes() {
        // A 4 KiB head a byte at a time: the scan's position follows the input, so a
        // call looks at the new byte (and at a line, once, when it ends).
        let data = inputs().swap_remove(14);
        assert!(data.len() > 4096);
        let mut scan = HeadScan::default();
        for end in 1..data.len() {
            let mut headers = header_slots();
            let r = scan.parse(&data[..end], &LIMITS, &mut headers);
            assert!(matches!(r, Ok(Decoded::Partial)), "at {end}");
            assert_eq!(scan.scanned, end);
            assert!(scan.line_start <= end);
        }
    }
}
