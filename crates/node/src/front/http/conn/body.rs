//! Reading a request's body: whole (`Content-Length`) or chunked, into a buffer
//! whose bytes are reserved from the node's body-memory budget first; skipping one
//! that is refused; refusing before the body is read.
//!
//! Not here: what is done with the body (the connection's routes) and the head.

use std::io;
use std::time::{Duration, Instant};

use bytes::BufMut;
use rac_proto::{Decoded, Status};

use super::{BodyRefusal, Conn, Step, Wait, BODY_CHUNK, SKIP_CHUNK};
use crate::core::memory::MemoryPermit;
use crate::front::http::parse::{self, BodyFraming, HttpError};
use crate::front::http::request::Request;
use crate::front::http::response::{code_name, error_body};
use crate::net::bufpool;
use crate::net::netio::Transport;
use crate::telemetry::logging::Refusal;
use crate::telemetry::Protocol;

impl<S: Transport> Conn<S> {
    /// Answers a refusal decided before the body was read. A client waiting for
    /// `100 Continue` will not send the body, so the connection closes; otherwise the
    /// body is read and discarded so the connection can carry on.
    pub(super) async fn refuse_before_body(
        &mut self,
        req: &mut Request,
        refusal: BodyRefusal,
    ) -> io::Result<Step> {
        let (code, code_name, message, retry_after) = match refusal {
            BodyRefusal::Refuse {
                code,
                code_name,
                message,
            } => (code, code_name, message, None),
            BodyRefusal::Quota(refused) => {
                let code = 429;
                let name = code_name(code);
                self.node
                    .refusals
                    .log(Refusal::Quota, Protocol::Http, self.peer, &code, &refused);
                let seconds = refused.retry_after_s().to_string();
                (code, name, refused.to_string(), Some(seconds))
            }
        };
        if code_name == Status::Busy.name() {
            self.node.count_busy(Protocol::Http, req.accel_id);
        }
        if retry_after.is_none() {
            self.log_refusal(code, code_name, &message);
        }
        if req.expect_continue || code == 413 || !self.skip_body(req).await? {
            req.keep_alive = false;
        }
        let body = error_body(&message, code_name);
        let extra: &[(&str, &[u8])] = match &retry_after {
            Some(seconds) => &[("Retry-After", seconds.as_bytes())],
            None => &[],
        };
        self.respond(req, code, b"application/json", &body, false, extra);
        Ok(self.after())
    }

    /// Reads and discards the request body, if any. Returns `false` when the body could
    /// not be skipped (too large, malformed, timed out, or never coming because the
    /// client waits for a `100 Continue` it will not get): the connection must close.
    pub(super) async fn skip_body(&mut self, req: &Request) -> io::Result<bool> {
        match req.framing {
            BodyFraming::None => Ok(true),
            _ if req.expect_continue => Ok(false),
            BodyFraming::Length(n) if n > self.node.config.body_bytes_max as u64 => Ok(false),
            BodyFraming::Length(n) => Ok(self.read_exact_into(n as usize, None).await?.is_ok()),
            BodyFraming::Chunked => Ok(self.read_chunked(None, None).await?.is_ok()),
        }
    }

    /// Skips an unwanted body; when it cannot be skipped the response closes the
    /// connection.
    pub(super) async fn skip_body_or_close(&mut self, req: &mut Request) -> io::Result<()> {
        if !self.skip_body(req).await? {
            req.keep_alive = false;
        }
        Ok(())
    }

    /// Reserves memory for and reads the request body into `self.body`. `check` sees
    /// the declared length first (when there is one) and may refuse before any byte is
    /// read. Sends `100 Continue` when the client asked for it and the body is wanted.
    pub(super) async fn take_body(
        &mut self,
        req: &mut Request,
        check: impl FnOnce(Option<usize>) -> Result<(), BodyRefusal>,
    ) -> io::Result<Result<MemoryPermit, Step>> {
        let body_max = self.node.config.body_bytes_max;
        let declared = match req.framing {
            BodyFraming::None => {
                let message = "a body with Content-Length or chunked encoding is required";
                let refusal = BodyRefusal::Refuse {
                    code: 411,
                    code_name: "LENGTH_REQUIRED",
                    message: message.to_string(),
                };
                return Ok(Err(self.refuse_before_body(req, refusal).await?));
            }
            BodyFraming::Length(n) if n > body_max as u64 => {
                let message = format!("body of {n} bytes is larger than the limit of {body_max}");
                let refusal = BodyRefusal::Refuse {
                    code: 413,
                    code_name: "TOO_LARGE",
                    message,
                };
                return Ok(Err(self.refuse_before_body(req, refusal).await?));
            }
            BodyFraming::Length(n) => Some(n as usize),
            BodyFraming::Chunked => None,
        };
        if let Err(refusal) = check(declared) {
            return Ok(Err(self.refuse_before_body(req, refusal).await?));
        }
        let Some(mut permit) = self.node.body_budget.try_reserve(declared.unwrap_or(0)) else {
            let message = "the node has no memory free for request bodies; retry".to_string();
            let refusal = BodyRefusal::Refuse {
                code: 503,
                code_name: "BUSY",
                message,
            };
            return Ok(Err(self.refuse_before_body(req, refusal).await?));
        };
        if req.expect_continue {
            self.wbuf
                .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            self.flush().await?;
        }
        let mut body = std::mem::take(&mut self.body);
        body.clear();
        if body.capacity() == 0 {
            // Given back while the connection was idle: take a pooled one rather than
            // allocate one per request (issue 28).
            body = bufpool::take(declared.unwrap_or(0).min(BODY_CHUNK));
        }
        let outcome = match declared {
            Some(n) => {
                body.reserve(n);
                self.read_exact_into(n, Some(&mut body)).await?
            }
            None => {
                self.read_chunked(Some(&mut body), Some(&mut permit))
                    .await?
            }
        };
        self.body = body;
        match outcome {
            Ok(()) => Ok(Ok(permit)),
            Err(HttpError { status, message }) => {
                req.keep_alive = false;
                // The only 503 while reading a body: no memory for the next chunk.
                let name = if status == 503 {
                    self.node.count_busy(Protocol::Http, req.accel_id);
                    Status::Busy.name()
                } else {
                    code_name(status)
                };
                self.log_refusal(status, name, &message);
                self.error(status, name, &message, req.minor);
                Ok(Err(Step::Close))
            }
        }
    }

    /// Reads `n` body bytes, buffered ones first, into `dst` (or nowhere). The inner
    /// error is the answer when the body does not come whole: the end of the stream
    /// (400) or the timeout (408).
    pub(super) async fn read_exact_into(
        &mut self,
        n: usize,
        mut dst: Option<&mut Vec<u8>>,
    ) -> io::Result<Result<(), HttpError>> {
        let from_buffer = n.min(self.buffered().len());
        if let Some(dst) = dst.as_deref_mut() {
            dst.extend_from_slice(&self.rbuf[self.rpos..self.rpos + from_buffer]);
        }
        self.rpos += from_buffer;
        let mut remaining = n - from_buffer;
        let mut scratch = Vec::new();
        if dst.is_none() && remaining > 0 {
            scratch.reserve(SKIP_CHUNK);
        }
        while remaining > 0 {
            let deadline = Instant::now() + Duration::from_millis(self.node.config.io_timeout_ms);
            // The rest is on its way: acknowledge it as it comes, so a client holding
            // its last segment for an ACK (Nagle) is not stalled by a delayed one.
            self.stream.quick_ack();
            let read = match dst.as_deref_mut() {
                Some(dst) => {
                    dst.reserve(remaining);
                    let budget = remaining.min(BODY_CHUNK);
                    self.stream
                        .read_with_deadline(&mut dst.limit(budget), deadline, &mut self.timer)
                        .await?
                }
                None => {
                    scratch.clear();
                    let mut limited = (&mut scratch).limit(remaining.min(SKIP_CHUNK));
                    self.stream
                        .read_with_deadline(&mut limited, deadline, &mut self.timer)
                        .await?
                }
            };
            match read {
                Some(0) => return Ok(Err(body_ended_early())),
                None => return Ok(Err(body_timed_out())),
                Some(k) => {
                    remaining -= k;
                    // A large body is read one chunk per turn, so other connections on
                    // this network thread are not kept waiting behind it.
                    if remaining > 0 && k >= SKIP_CHUNK {
                        tokio::task::yield_now().await;
                    }
                }
            }
        }
        Ok(Ok(()))
    }

    /// Reads a chunked body into `dst` (or nowhere), growing `permit` as data arrives.
    /// The outer `Err` is an I/O error; the inner one a protocol error to answer.
    pub(super) async fn read_chunked(
        &mut self,
        mut dst: Option<&mut Vec<u8>>,
        mut permit: Option<&mut MemoryPermit>,
    ) -> io::Result<Result<(), HttpError>> {
        let body_max = self.node.config.body_bytes_max as u64;
        let mut total = 0u64;
        loop {
            let size = match self.parse_buffered(parse::parse_chunk_size).await? {
                Ok(size) => size,
                Err(e) => return Ok(Err(e)),
            };
            if size == 0 {
                return self.parse_buffered(parse::parse_trailers).await;
            }
            total += size;
            if total > body_max {
                return Ok(Err(HttpError::new(
                    413,
                    format!("chunked body larger than the limit of {body_max} bytes"),
                )));
            }
            if let Some(permit) = permit.as_deref_mut() {
                if !permit.try_grow(size as usize) {
                    return Ok(Err(HttpError::new(
                        503,
                        "the node has no memory free for request bodies; retry",
                    )));
                }
            }
            if let Err(e) = self
                .read_exact_into(size as usize, dst.as_deref_mut())
                .await?
            {
                return Ok(Err(e));
            }
            if let Err(e) = self.parse_buffered(parse::parse_chunk_end).await? {
                return Ok(Err(e));
            }
        }
    }

    /// Runs a step parser over the buffered input, reading more until it completes,
    /// and consumes the bytes the parsed value used.
    pub(super) async fn parse_buffered<T>(
        &mut self,
        parser: fn(&[u8]) -> Result<Decoded<T>, HttpError>,
    ) -> io::Result<Result<T, HttpError>> {
        loop {
            match parser(self.buffered()) {
                Ok(Decoded::Complete(v, used)) => {
                    self.rpos += used;
                    return Ok(Ok(v));
                }
                Ok(Decoded::Partial) => {}
                Err(e) => return Ok(Err(e)),
            }
            let deadline = Instant::now() + Duration::from_millis(self.node.config.io_timeout_ms);
            match self.wait_read(deadline).await? {
                Wait::Data => {}
                Wait::Eof => return Ok(Err(body_ended_early())),
                // (A wait that is not idle does not end for a shutdown.)
                Wait::Shutdown | Wait::Timeout => return Ok(Err(body_timed_out())),
            }
        }
    }
}

/// The client ended its side of the connection (a half-close, `shutdown(SHUT_WR)`)
/// before the body was whole: the request is incomplete, not late, so it is a 400.
/// The client may still read the answer.
pub(super) fn body_ended_early() -> HttpError {
    HttpError::new(
        400,
        "the request body ended early: the client closed its side before sending all of it",
    )
}

pub(super) fn body_timed_out() -> HttpError {
    HttpError::new(408, "request body not received in time")
}
