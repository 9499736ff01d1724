//! The bytes of one call and of its answer, for each protocol the tool speaks.
//!
//! A request is built once per connection ([`Request`]) and sent again and again; only
//! the RAC request id changes between sends. Answers are read by a [`ReplyReader`]
//! with its own buffer: it parses an HTTP/1.1 response head with `httparse`, skips a
//! `Content-Length` or chunked body without copying it anywhere, reads a RAC result
//! header with `rac-proto` and skips its payload, or counts echoed bytes. Bodies are
//! counted, not kept: the tool measures, it does not check outputs (beyond statuses).

use std::io;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::target::Target;

/// Size of a reader's buffer; an HTTP response head must fit in it.
const READ_BUF_LEN: usize = 64 * 1024;

/// Headers parsed per HTTP response; a head with more is refused.
const HEADERS_MAX: usize = 48;

/// The payload every call carries: lower-case letters, so that `to_uppercase` has
/// work to do on every byte.
pub fn payload(size: usize) -> Vec<u8> {
    b"abcdefghijklmnopqrstuvwxyz"
        .iter()
        .copied()
        .cycle()
        .take(size)
        .collect()
}

/// HTTP request method.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
pub enum Method {
    Get,
    Post,
}

/// The wire bytes of one call, ready to send.
#[derive(Clone, Debug)]
pub struct Request {
    bytes: Vec<u8>,
    /// Where the RAC request id sits in `bytes`.
    rac_id_at: Option<usize>,
    /// Payload bytes in `bytes` (what "payload MB/s" counts).
    payload_len: usize,
}

impl Request {
    /// The request for `target`. `close` asks an HTTP server to close the connection
    /// after answering (one connection per call).
    pub fn new(target: &Target, method: Method, payload: &[u8], close: bool) -> Request {
        match target {
            Target::Http { host, path, .. } => {
                let mut head = match method {
                    Method::Get => format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n"),
                    Method::Post => format!(
                        "POST {path} HTTP/1.1\r\nHost: {host}\r\n\
                         Content-Type: application/octet-stream\r\nContent-Length: {}\r\n",
                        payload.len()
                    ),
                };
                if close {
                    head.push_str("Connection: close\r\n");
                }
                head.push_str("\r\n");
                let mut bytes = head.into_bytes();
                let payload_len = match method {
                    Method::Get => 0,
                    Method::Post => payload.len(),
                };
                bytes.extend_from_slice(&payload[..payload_len]);
                Request {
                    bytes,
                    rac_id_at: None,
                    payload_len,
                }
            }
            Target::Rac { accel_id, .. } => {
                let len = u32::try_from(payload.len())
                    .expect("payload sizes are bounded far below 4 GiB");
                let header =
                    rac_proto::CallHeader::call(*accel_id, 0, len, rac_proto::params::NONE);
                let mut bytes = header.encode().to_vec();
                bytes.extend_from_slice(payload);
                Request {
                    bytes,
                    rac_id_at: Some(12),
                    payload_len: payload.len(),
                }
            }
            Target::TcpEcho { .. } => Request {
                bytes: payload.to_vec(),
                rac_id_at: None,
                payload_len: payload.len(),
            },
            Target::InProcess { .. } => unreachable!("in-process calls have no wire bytes"),
        }
    }

    /// The bytes to send for the call with this request id.
    pub fn bytes_for(&mut self, request_id: u32) -> &[u8] {
        if let Some(at) = self.rac_id_at {
            self.bytes[at..at + 4].copy_from_slice(&request_id.to_le_bytes());
        }
        &self.bytes
    }

    pub fn payload_len(&self) -> usize {
        self.payload_len
    }
}

/// One answer, as far as the measurements need it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    /// The request id it answers (RAC); `None` means "the oldest call in flight".
    pub request_id: Option<u32>,
    /// `None` on success, else the error class counted in the report (`http 503`,
    /// `rac BUSY`).
    pub error: Option<String>,
    /// Node-side time from the call being whole to its execution starting.
    pub queue_ns: Option<u64>,
    /// Node-side execution time.
    pub exec_ns: Option<u64>,
    /// Body or payload bytes of the answer.
    pub body_len: u64,
    /// The server will close the connection after this answer.
    pub closes: bool,
    /// When the first byte of this answer was seen (only when asked for).
    pub first_byte: Option<Instant>,
}

#[derive(Clone, Copy, Debug)]
enum Expect {
    Http,
    Rac,
    Echo { len: usize },
}

/// Reads answers from one connection.
pub struct ReplyReader {
    expect: Expect,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    track_first_byte: bool,
}

impl ReplyReader {
    pub fn new(target: &Target, payload_len: usize, track_first_byte: bool) -> ReplyReader {
        let expect = match target {
            Target::Http { .. } => Expect::Http,
            Target::Rac { .. } => Expect::Rac,
            Target::TcpEcho { .. } => Expect::Echo { len: payload_len },
            Target::InProcess { .. } => unreachable!("in-process calls have no wire bytes"),
        };
        ReplyReader {
            expect,
            buf: vec![0; READ_BUF_LEN].into_boxed_slice(),
            start: 0,
            end: 0,
            track_first_byte,
        }
    }

    /// Reads the next whole answer.
    pub async fn next<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> io::Result<Reply> {
        let mut first_byte = None;
        if self.track_first_byte {
            if self.start == self.end {
                self.fill(r).await?;
            }
            first_byte = Some(Instant::now());
        }
        let mut reply = match self.expect {
            Expect::Http => self.http(r).await?,
            Expect::Rac => self.rac(r).await?,
            Expect::Echo { len } => {
                self.skip(r, len as u64).await?;
                Reply {
                    body_len: len as u64,
                    ..Reply::default()
                }
            }
        };
        reply.first_byte = first_byte;
        Ok(reply)
    }

    async fn http<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> io::Result<Reply> {
        let mut reply = Reply::default();
        let (head_len, status, body) = loop {
            let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
            let mut response = httparse::Response::new(&mut headers);
            match response.parse(&self.buf[self.start..self.end]) {
                Ok(httparse::Status::Complete(head_len)) => {
                    let status = response.code.unwrap_or(0);
                    let mut body = Body::UntilClose;
                    if status / 100 == 1 || status == 204 || status == 304 {
                        body = Body::Length(0);
                    }
                    for h in response.headers.iter() {
                        let name = h.name;
                        if name.eq_ignore_ascii_case("content-length") {
                            body = Body::Length(
                                parse_u64(h.value).ok_or_else(|| bad("Content-Length"))?,
                            );
                        } else if name.eq_ignore_ascii_case("transfer-encoding") {
                            if h.value.eq_ignore_ascii_case(b"chunked") {
                                body = Body::Chunked;
                            }
                        } else if name.eq_ignore_ascii_case("x-netaccel-queue-ns") {
                            reply.queue_ns = parse_u64(h.value);
                        } else if name.eq_ignore_ascii_case("x-netaccel-exec-ns") {
                            reply.exec_ns = parse_u64(h.value);
                        } else if name.eq_ignore_ascii_case("connection") {
                            reply.closes = h.value.eq_ignore_ascii_case(b"close");
                        }
                    }
                    break (head_len, status, body);
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => return Err(bad(&format!("response head: {e}"))),
            }
            self.fill(r).await?;
        };
        self.start += head_len;
        reply.body_len = match body {
            Body::Length(n) => {
                self.skip(r, n).await?;
                n
            }
            Body::Chunked => self.skip_chunked(r).await?,
            Body::UntilClose => {
                reply.closes = true;
                self.skip_to_eof(r).await?
            }
        };
        if !(200..300).contains(&status) {
            reply.error = Some(format!("http {status}"));
        }
        Ok(reply)
    }

    async fn rac<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> io::Result<Reply> {
        while self.end - self.start < rac_proto::HEADER_LEN {
            self.fill(r).await?;
        }
        let (header, used) =
            match rac_proto::ResultHeader::decode(&self.buf[self.start..self.end], u32::MAX) {
                Ok(rac_proto::Decoded::Complete(h, used)) => (h, used),
                Ok(rac_proto::Decoded::Partial) => unreachable!("a whole header is buffered"),
                Err(e) => return Err(bad(&format!("RAC result header: {e}"))),
            };
        self.start += used;
        self.skip(r, u64::from(header.payload_len)).await?;
        let ok = header.status.is_ok();
        Ok(Reply {
            request_id: Some(header.request_id),
            error: (!ok).then(|| format!("rac {}", header.status.name())),
            queue_ns: ok.then_some(header.queue_ns),
            exec_ns: ok.then_some(header.exec_ns),
            body_len: u64::from(header.payload_len),
            closes: header.status.closes_connection(),
            first_byte: None,
        })
    }

    /// Reads more bytes into the buffer; end of stream is an error (an answer is due).
    async fn fill<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> io::Result<()> {
        if self.end == self.buf.len() {
            if self.start == 0 {
                return Err(bad("response head larger than the read buffer"));
            }
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        } else if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let n = r.read(&mut self.buf[self.end..]).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed by the server",
            ));
        }
        self.end += n;
        Ok(())
    }

    async fn skip<R: AsyncRead + Unpin>(&mut self, r: &mut R, mut n: u64) -> io::Result<()> {
        loop {
            let buffered = (self.end - self.start) as u64;
            if buffered >= n {
                self.start += n as usize;
                return Ok(());
            }
            n -= buffered;
            self.start = self.end;
            self.fill(r).await?;
        }
    }

    async fn skip_to_eof<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> io::Result<u64> {
        let mut total = (self.end - self.start) as u64;
        self.start = 0;
        self.end = 0;
        loop {
            let n = r.read(&mut self.buf).await?;
            if n == 0 {
                return Ok(total);
            }
            total += n as u64;
        }
    }

    async fn line<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> io::Result<(usize, usize)> {
        loop {
            let window = &self.buf[self.start..self.end];
            if let Some(i) = window.windows(2).position(|w| w == b"\r\n") {
                let line = (self.start, self.start + i);
                self.start += i + 2;
                return Ok(line);
            }
            self.fill(r).await?;
        }
    }

    async fn skip_chunked<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> io::Result<u64> {
        let mut total = 0u64;
        loop {
            let (a, b) = self.line(r).await?;
            let size_text = self.buf[a..b]
                .split(|&c| c == b';')
                .next()
                .unwrap_or_default();
            let size = std::str::from_utf8(size_text)
                .ok()
                .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
                .ok_or_else(|| bad("chunk size"))?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    let (a, b) = self.line(r).await?;
                    if a == b {
                        return Ok(total);
                    }
                }
            }
            self.skip(r, size).await?;
            let (a, b) = self.line(r).await?;
            if a != b {
                return Err(bad("chunk not followed by CRLF"));
            }
            total += size;
        }
    }
}

enum Body {
    Length(u64),
    Chunked,
    UntilClose,
}

fn parse_u64(value: &[u8]) -> Option<u64> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("bad answer: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http_target() -> Target {
        Target::parse("http://127.0.0.1:1/v1/fn/to_uppercase").unwrap()
    }

    async fn read_all(target: &Target, payload_len: usize, input: &[u8]) -> Vec<io::Result<Reply>> {
        // Feed the input in 7-byte pieces so every parser state meets a partial read.
        let mut builder = tokio_test_reader(input);
        let mut reader = ReplyReader::new(target, payload_len, false);
        let mut out = Vec::new();
        loop {
            let reply = reader.next(&mut builder).await;
            let stop = reply.is_err();
            out.push(reply);
            if stop {
                return out;
            }
        }
    }

    fn tokio_test_reader(input: &[u8]) -> impl AsyncRead + Unpin {
        let chunks: Vec<Vec<u8>> = input.chunks(7).map(<[u8]>::to_vec).collect();
        Pieces { chunks, next: 0 }
    }

    struct Pieces {
        chunks: Vec<Vec<u8>>,
        next: usize,
    }

    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            if let Some(chunk) = self.chunks.get(self.next) {
                buf.put_slice(chunk);
                self.next += 1;
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn http_lengths_chunks_errors_and_server_split() {
        let input = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Netaccel-Queue-Ns: 120\r\nx-netaccel-exec-ns: 3400\r\n\r\nHELLO\
HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nABC\r\n10\r\n0123456789abcdef\r\n0\r\nX-Trailer: 1\r\n\r\n\
HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy";
        let replies = run(read_all(&http_target(), 0, input));
        assert_eq!(replies.len(), 4, "{replies:?}");
        let first = replies[0].as_ref().unwrap();
        assert_eq!(
            (first.queue_ns, first.exec_ns, first.body_len),
            (Some(120), Some(3400), 5)
        );
        assert_eq!(first.error, None);
        assert_eq!(replies[1].as_ref().unwrap().body_len, 19);
        let third = replies[2].as_ref().unwrap();
        assert_eq!(third.error.as_deref(), Some("http 503"));
        assert!(third.closes);
        assert_eq!(
            replies[3].as_ref().unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn http_garbage_is_an_error() {
        let replies = run(read_all(&http_target(), 0, b"SSH-2.0-OpenSSH\r\n\r\n"));
        assert_eq!(
            replies[0].as_ref().unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn rac_results_carry_ids_statuses_and_timings() {
        use rac_proto::{params, CallHeader, ResultHeader, Status};
        let target = Target::parse("rac://127.0.0.1:1/to_uppercase").unwrap();
        let mut input = Vec::new();
        let call = CallHeader::call(2, 7, 3, params::NONE);
        let mut ok = ResultHeader::answer(&call, Status::Ok, 3);
        ok.queue_ns = 11;
        ok.exec_ns = 22;
        ok.slot_id = 0;
        input.extend_from_slice(&ok.encode());
        input.extend_from_slice(b"ABC");
        let busy = ResultHeader::answer(&CallHeader::call(2, 9, 3, params::NONE), Status::Busy, 0);
        input.extend_from_slice(&busy.encode());
        let replies = run(read_all(&target, 3, &input));
        let a = replies[0].as_ref().unwrap();
        assert_eq!(
            (a.request_id, a.queue_ns, a.exec_ns, a.body_len),
            (Some(7), Some(11), Some(22), 3)
        );
        let b = replies[1].as_ref().unwrap();
        assert_eq!(
            (b.request_id, b.error.as_deref()),
            (Some(9), Some("rac BUSY"))
        );
        assert!(replies[2].is_err());
    }

    #[test]
    fn rac_request_ids_are_patched_in_place() {
        let target = Target::parse("rac://127.0.0.1:1/echo").unwrap();
        let mut request = Request::new(&target, Method::Post, &payload(10), false);
        let bytes = request.bytes_for(0xA1B2C3D4).to_vec();
        let Ok(rac_proto::Decoded::Complete(header, _)) =
            rac_proto::CallHeader::decode(&bytes, 1 << 20)
        else {
            panic!("not a whole call header")
        };
        assert_eq!(
            (header.request_id, header.accel_id, header.payload_len),
            (0xA1B2C3D4, 1, 10)
        );
        assert_eq!(&bytes[64..], b"abcdefghij");
    }

    #[test]
    fn http_requests_carry_length_and_close() {
        let mut post = Request::new(&http_target(), Method::Post, &payload(4), true);
        let text = String::from_utf8(post.bytes_for(1).to_vec()).unwrap();
        assert!(text.starts_with("POST /v1/fn/to_uppercase HTTP/1.1\r\nHost: 127.0.0.1:1\r\n"));
        assert!(text.contains("Content-Length: 4\r\n") && text.contains("Connection: close\r\n"));
        assert!(text.ends_with("\r\n\r\nabcd"));
        let mut get = Request::new(&http_target(), Method::Get, &payload(4), false);
        assert!(get.bytes_for(1).ends_with(b"Host: 127.0.0.1:1\r\n\r\n"));
        assert_eq!(get.payload_len(), 0);
    }
}
