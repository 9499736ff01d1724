//! One HTTP/1.1 connection: read, parse, route, answer, in order.
//!
//! Requests on a connection are answered strictly in order (pipelining included):
//! every complete request already buffered is answered before the output is flushed,
//! so a pipelined burst costs one write. Each wait on the socket has a deadline: the
//! head must arrive within `header_timeout_ms` of its first byte, each body read and
//! response write within `io_timeout_ms`, and an idle connection is closed after
//! `idle_timeout_ms`. The read buffer never holds more than one request head; bodies
//! are read straight into their own buffer, whose bytes are reserved from the node's
//! body-memory budget first.
//!
//! Reading bodies is in `body`; the routes that are not calls (control requests,
//! loading a slot, objects) in `routes`.

use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use accel::Accelerator;
use bytes::BufMut;
use rac_proto::Status;
use tokio::sync::watch;

mod body;
mod routes;

use super::access;
use super::parse::{header_slots, BodyFraming, HttpError, Limits};
use super::request::{Request, Route, Wire};
use super::response::{self, code_name, error_body, http_code, Head, HEAD_ROOM};
use super::scan::{self, HeadScan};
use crate::core::deadline::Deadline;
use crate::core::memory::BodyMemory;
use crate::core::quota::{Owner, Refused};
use crate::core::slot::{Answer, Call};
use crate::core::tenant::auth::{Base, Session};
use crate::core::tenant::TenantId;
use crate::front::oip::infer::{self as v2_infer, Reply};
use crate::front::oip::{shm, stats};
use crate::front::stop::{self, StopWait};
use crate::net::bufpool;
use crate::net::netio::{self, IoTimer, Transport, WRITE_BATCH_MAX};
use crate::node::Node;
use crate::telemetry::logging::Refusal;
use crate::telemetry::Protocol;

/// The most the first read of a request pulls in: 16 KiB, as the C responder reads, so
/// that a call of 4 KiB and its head come in one read (with 4 KiB, two, and often a
/// third that found nothing: issue 28).
const READ_CHUNK: usize = 16 * 1024;
/// The most a read pulls in, and the room a connection keeps, while part of a head is
/// buffered: a connection that sends its head slowly holds no more than this beyond
/// what it sent (issue 15, slowloris).
const PARTIAL_HEAD_CHUNK: usize = 4096;
/// Bytes read at a time when discarding a body.
const SKIP_CHUNK: usize = 8192;
/// Most body bytes one read takes; a longer body is read over several turns.
const BODY_CHUNK: usize = 64 * 1024;

/// Serves one connection over `stream`: a `TcpStream`, or a TLS stream (`crate::net::tls`).
pub async fn serve<S: Transport>(node: Arc<Node>, stream: S, peer: SocketAddr, base: Base) {
    let shutdown = node.shutdown_signal();
    let session = Session::new(base);
    let tenant = session.base_id();
    let mut conn = Conn {
        node,
        stream,
        peer,
        rbuf: Vec::new(),
        rpos: 0,
        wbuf: Vec::new(),
        body: Vec::new(),
        out: Vec::new(),
        tenant,
        session,
        shutdown,
        timer: IoTimer::default(),
        close_after: false,
        head_scan: HeadScan::default(),
        stop_registered: false,
    };
    if let Err(e) = conn.run().await {
        tracing::debug!(error = %e, "http connection ended with an error");
    }
}

struct Conn<S> {
    node: Arc<Node>,
    stream: S,
    /// The client's address, for the log.
    peer: SocketAddr,
    /// Unconsumed input is `rbuf[rpos..]`.
    rbuf: Vec<u8>,
    rpos: usize,
    wbuf: Vec<u8>,
    /// Reused body and output buffers.
    body: Vec<u8>,
    out: Vec<u8>,
    /// The tenant the request being answered is counted against.
    tenant: TenantId,
    /// Who the connection's caller is (see `access`).
    session: Session,
    shutdown: watch::Receiver<bool>,
    /// The connection's read deadline (idle, head or body timeout).
    timer: IoTimer,
    /// A response said `Connection: close`: the connection ends after it (see
    /// [`Conn::keep_alive`]).
    close_after: bool,
    /// How far the head at `rbuf[rpos..]` has been scanned.
    head_scan: HeadScan,
    /// The connection's wait for the shutdown has registered (see [`stop::poll`]).
    stop_registered: bool,
}

/// What follows a request's answer.
enum Step {
    Next,
    Close,
}

/// What the buffered input holds next.
enum Next {
    /// Not a whole request head (yet).
    NeedMore,
    Request(Request),
    /// A refused head: the answer is in the output buffer, and the connection closes.
    Refused,
}

enum Wait {
    Data,
    Eof,
    Timeout,
    Shutdown,
}

/// What a read that did not wait means for the wait: `None` when it found nothing
/// (the socket's readiness was stale, or there was none).
#[inline]
fn read_now(read: io::Result<usize>) -> Option<io::Result<Wait>> {
    match read {
        Ok(0) => Some(Ok(Wait::Eof)),
        Ok(_) => Some(Ok(Wait::Data)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        Err(e) => Some(Err(e)),
    }
}

/// What a read with a deadline means for the wait: `None` is the deadline.
fn read_waited(read: Option<usize>) -> Wait {
    match read {
        Some(0) => Wait::Eof,
        Some(_) => Wait::Data,
        None => Wait::Timeout,
    }
}

/// Why a body was not taken.
enum BodyRefusal {
    /// Answer this and keep going once the body is skipped (or close, if the client is
    /// waiting for `100 Continue`).
    Refuse {
        code: u16,
        code_name: &'static str,
        message: String,
    },
    /// The tenant is over its quota: 429 with `Retry-After`.
    Quota(Refused),
}

impl<S: Transport> Conn<S> {
    fn limits(&self) -> Limits {
        let c = &self.node.config;
        Limits {
            uri_bytes_max: c.uri_bytes_max,
            head_bytes_max: c.head_bytes_max,
        }
    }

    fn buffered(&self) -> &[u8] {
        &self.rbuf[self.rpos..]
    }

    async fn run(&mut self) -> io::Result<()> {
        // When the head being received began to arrive (read when a read leaves part
        // of one; most heads come whole in one read and need no clock).
        let mut head_started: Option<Instant> = None;
        // One wait for the shutdown for the connection's life (see `front::stop`).
        let stop = stop::wait(&self.shutdown);
        tokio::pin!(stop);
        loop {
            loop {
                let request = match self.next_head() {
                    Next::NeedMore => break,
                    Next::Request(request) => request,
                    Next::Refused => return self.close().await,
                };
                // A health check without a body is answered at once: nothing to
                // wait for, so no boxed handling (below) to allocate, move and free
                // (issue 28: ~550 of the node's instructions per `/health`).
                let step = match self.answer_at_once(&request) {
                    Some(step) => step,
                    // Boxed: a request's handling (routing, the body, a call's wait)
                    // is most of this future's size, and an idle connection's task
                    // would carry that room for nothing (issue 15: 4.2 KiB per idle
                    // connection unboxed). One allocation per request, none per read
                    // of an incomplete head.
                    None => Box::pin(self.handle(request)).await?,
                };
                match step {
                    Step::Next => head_started = None,
                    Step::Close => return self.close().await,
                }
            }
            if !self.wbuf.is_empty() {
                self.flush().await?;
            }
            let partial = !self.buffered().is_empty();
            if partial {
                self.keep_head_room_small();
            }
            if partial && head_started.is_none() {
                head_started = Some(Instant::now());
            }
            let config = &self.node.config;
            let deadline = match head_started {
                Some(t) => t + Duration::from_millis(config.header_timeout_ms),
                None => Instant::now() + Duration::from_millis(config.idle_timeout_ms),
            };
            let waited = if partial {
                self.wait_read(deadline).await?
            } else {
                self.wait_idle(deadline, stop.as_mut()).await?
            };
            match waited {
                Wait::Data => {}
                Wait::Eof | Wait::Shutdown => return Ok(()),
                Wait::Timeout if partial => {
                    let message = "request head not received in time";
                    self.log_refusal(408, "REQUEST_TIMEOUT", &message);
                    self.error(408, "REQUEST_TIMEOUT", message, 1);
                    return self.close().await;
                }
                Wait::Timeout => return Ok(()),
            }
        }
    }

    /// Sends what is buffered, then closes the connection.
    async fn close(&mut self) -> io::Result<()> {
        self.flush().await?;
        self.stream.linger().await;
        Ok(())
    }

    /// The next buffered request, routed, once its head is whole. While the head is
    /// incomplete a call looks only at the bytes that arrived since the last one
    /// ([`HeadScan`]) and allocates nothing: a head sent a byte at a time costs
    /// O(1) per byte, not a parse of the whole head so far (issue 15, slowloris).
    // Inlined into the connection loop: when the compiler chose otherwise (after an
    // unrelated change elsewhere), `/health` took 6 % more instructions (2,911 against
    // 2,737; bench/http/instructions.sh, issue 28).
    #[inline]
    fn next_head(&mut self) -> Next {
        if self.buffered().is_empty() {
            self.rbuf.clear();
            self.rpos = 0;
            return Next::NeedMore;
        }
        let limits = self.limits();
        let head = &self.rbuf[self.rpos..];
        let mut headers = header_slots();
        let parsed = match self.head_scan.at_once(head, &limits, &mut headers) {
            Some((whole, head_len)) => Ok((whole, head_len)),
            None => match self.head_scan.scan(head, &limits) {
                Ok(None) => return Next::NeedMore,
                Ok(Some(head_len)) => scan::parse_whole(&head[..head_len], &limits, &mut headers)
                    .map(|whole| (whole, head_len)),
                Err(e) => Err(e),
            },
        };
        let parsed = parsed.map(|(whole, head_len)| {
            let (request, tenant) = access::admit(&self.node, self.peer, &mut self.session, &whole);
            self.tenant = tenant;
            (request, head_len)
        });
        match parsed {
            Ok((request, head_len)) => {
                self.rpos += head_len;
                Next::Request(request)
            }
            Err(HttpError { status, message }) => {
                self.log_refusal(status, code_name(status), &message);
                self.error(status, code_name(status), &message, 1);
                Next::Refused
            }
        }
    }

    /// Answers a request that needs no wait (a health check without a body) without
    /// going through [`Conn::handle`]; `None` for every other request.
    #[inline] // as `next_head`
    fn answer_at_once(&mut self, req: &Request) -> Option<Step> {
        match req.route {
            Route::Health { head_only } if req.framing == BodyFraming::None => {
                self.health(req, head_only);
                Some(self.after())
            }
            _ => None,
        }
    }

    fn health(&mut self, req: &Request, head_only: bool) {
        let keep_alive = self.keep_alive(req);
        response::health(&mut self.wbuf, head_only, keep_alive, req.minor);
        self.count(200);
    }

    async fn handle(&mut self, mut req: Request) -> io::Result<Step> {
        let route = std::mem::replace(&mut req.route, Route::Health { head_only: true });
        match route {
            Route::Health { head_only } => {
                self.skip_body_or_close(&mut req).await?;
                self.health(&req, head_only);
            }
            Route::Metrics { head_only } => {
                self.skip_body_or_close(&mut req).await?;
                let text = self.node.metrics.encode();
                let ct = b"application/openmetrics-text; version=1.0.0; charset=utf-8";
                self.respond(&req, 200, ct, text.as_bytes(), head_only, &[]);
            }
            Route::Json {
                code,
                body,
                head_only,
            } => {
                self.skip_body_or_close(&mut req).await?;
                self.respond(&req, code, b"application/json", &body, head_only, &[]);
            }
            Route::Refuse {
                code,
                code_name,
                message,
                allow,
            } => {
                self.log_refusal(code, code_name, &message);
                self.skip_body_or_close(&mut req).await?;
                let body = error_body(&message, code_name);
                let extra: &[(&str, &[u8])] = match allow {
                    Some(allow) => &[("Allow", allow.as_bytes())],
                    None if code == 401 => &[("WWW-Authenticate", b"Bearer")],
                    None => &[],
                };
                self.respond(&req, code, b"application/json", &body, false, extra);
            }
            Route::Call {
                accel,
                wire,
                deadline_us,
            } => {
                return self.call(req, accel, wire, deadline_us).await;
            }
            Route::LoadSlot { slot, origin } => return self.load_slot(req, slot, origin).await,
            Route::Control { op } => return self.control(req, op).await,
            Route::ObjectGet {
                key,
                head_only,
                if_none_match,
            } => {
                self.skip_body_or_close(&mut req).await?;
                self.object_get(&req, &key, head_only, if_none_match.as_deref());
            }
            Route::ObjectPut { key } => return self.object_put(req, key).await,
            Route::ObjectDelete { key } => {
                self.skip_body_or_close(&mut req).await?;
                if self.node.objects.delete(Owner::of(self.tenant), &key) {
                    let keep_alive = self.keep_alive(&req);
                    Head::start(&mut self.wbuf, 204).finish(keep_alive, req.minor);
                    self.count(204);
                } else {
                    let body = error_body(&format!("no object named {key}"), "NOT_FOUND");
                    self.respond(&req, 404, b"application/json", &body, false, &[]);
                }
            }
        }
        Ok(self.after())
    }

    /// Whether the response being written keeps the connection open, for its
    /// `Connection` header: the request allows it and the node is not draining. The
    /// answer is remembered, so the connection closes after a response exactly when
    /// that response said `Connection: close` (a drain that began while a call ran
    /// closes the connection after the call's response, which says so).
    fn keep_alive(&mut self, req: &Request) -> bool {
        let keep_alive = req.keep_alive && !self.node.is_shutting_down();
        self.close_after |= !keep_alive;
        keep_alive
    }

    /// What follows a request's response: the next request, or the end of the
    /// connection if the response said so.
    fn after(&self) -> Step {
        if self.close_after {
            Step::Close
        } else {
            Step::Next
        }
    }

    /// Logs a refused request (see `logging`): failed token checks, unknown
    /// accelerators, and every other request the client got wrong (4xx, 501, 505).
    /// Refusals for the node's own state (503, 507, 500, 504) are not the client's
    /// doing and have their metrics.
    fn log_refusal(&self, code: u16, code_name: &str, reason: &dyn std::fmt::Display) {
        let kind = match code_name {
            "UNAUTHORIZED" => Refusal::Token,
            "UNKNOWN_ACCELERATOR" => Refusal::UnknownAccelerator,
            _ if (400..500).contains(&code) || code == 501 || code == 505 => Refusal::Protocol,
            _ => return,
        };
        self.node
            .refusals
            .log(kind, Protocol::Http, self.peer, &code, reason);
    }

    fn count(&self, code: u16) {
        self.node.http_requests(code).inc();
    }

    /// Writes a complete response with a body into the output buffer.
    fn respond(
        &mut self,
        req: &Request,
        code: u16,
        content_type: &[u8],
        body: &[u8],
        head_only: bool,
        extra: &[(&str, &[u8])],
    ) {
        let keep_alive = self.keep_alive(req);
        let mut head = Head::start(&mut self.wbuf, code)
            .header("Content-Type", content_type)
            .num("Content-Length", body.len() as u64);
        for (name, value) in extra {
            head = head.header(name, value);
        }
        if code == 503 {
            head = head.header("Retry-After", b"1");
        }
        head.finish(keep_alive, req.minor);
        if !head_only {
            self.wbuf.extend_from_slice(body);
        }
        self.count(code);
    }

    /// A JSON error response after which the connection closes.
    fn error(&mut self, code: u16, name: &str, message: &str, minor: u8) {
        self.close_after = true;
        let body = error_body(message, name);
        let mut head = Head::start(&mut self.wbuf, code)
            .header("Content-Type", b"application/json")
            .num("Content-Length", body.len() as u64);
        if code == 503 {
            head = head.header("Retry-After", b"1");
        }
        head.finish(false, minor);
        self.wbuf.extend_from_slice(&body);
        self.count(code);
    }

    async fn call(
        &mut self,
        mut req: Request,
        accel: Arc<dyn Accelerator>,
        wire: Wire,
        deadline_us: u32,
    ) -> io::Result<Step> {
        let accel_id = accel.descriptor().id;
        let declared = match req.framing {
            BodyFraming::Length(n) => usize::try_from(n).unwrap_or(usize::MAX),
            BodyFraming::None | BodyFraming::Chunked => 0,
        };
        let quota = match self.node.quotas.admit(self.tenant, declared) {
            Ok(hold) => hold,
            Err(refused) => {
                return self
                    .refuse_before_body(&mut req, BodyRefusal::Quota(refused))
                    .await
            }
        };
        let node = Arc::clone(&self.node);
        let tenant = self.tenant;
        let expect = req.expect_continue;
        let check = |len: Option<usize>| -> Result<(), BodyRefusal> {
            // A v2 request's params are in its body: they are checked once it is read.
            if let Wire::Raw { params } = &wire {
                accel.check(params, len).map_err(|e| BodyRefusal::Refuse {
                    code: 400,
                    code_name: "BAD_REQUEST",
                    message: e.to_string(),
                })?;
            }
            if expect {
                node.dispatcher
                    .admission(accel_id, tenant)
                    .map_err(|no| BodyRefusal::Refuse {
                        code: http_code(no.status),
                        code_name: no.status.name(),
                        message: no.message,
                    })?;
            }
            Ok(())
        };
        let permit = match self.take_body(&mut req, check).await? {
            Ok(permit) => permit,
            Err(step) => return Ok(step),
        };
        if req.framing == BodyFraming::Chunked {
            // Admitted at 0 bytes before its length was known: taken now.
            self.node.quotas.debit_bytes(self.tenant, self.body.len());
        }
        let received = Instant::now();
        let mut targets = Vec::new();
        let (params, payload, reply) = match wire {
            Wire::Raw { params } => (params, std::mem::take(&mut self.body), None),
            Wire::V2 { json_len } => {
                match v2_decode(&self.node, self.tenant, &*accel, &self.body, json_len) {
                    Ok((c, shm_outputs)) => {
                        targets = shm_outputs;
                        (c.params, c.payload, Some(c.reply))
                    }
                    Err(message) => {
                        stats::record_refused(&self.node, accel_id, received);
                        self.log_refusal(400, "BAD_REQUEST", &message);
                        let body = error_body(&message, "BAD_REQUEST");
                        self.respond(&req, 400, b"application/json", &body, false, &[]);
                        return Ok(self.after());
                    }
                }
            }
        };
        let input_ns = stats::since_ns(received);
        if let Err(e) = accel.check(&params, Some(payload.len())) {
            match reply {
                None => self.body = payload,
                Some(_) => stats::record_refused(&self.node, accel_id, received),
            }
            self.log_refusal(400, "BAD_REQUEST", &e);
            let body = error_body(&e.to_string(), "BAD_REQUEST");
            self.respond(&req, 400, b"application/json", &body, false, &[]);
            return Ok(self.after());
        }
        let model = reply.as_ref().map(|_| Arc::clone(&accel));
        let batch = stats::batch(&*accel, payload.len());
        let out = self.output_buffer(payload.len());
        let call = Call {
            accel,
            params,
            payload,
            out,
            received,
            deadline: Deadline::after(received, deadline_us),
            tenant: self.tenant,
            permit: Some(BodyMemory::Budget(permit)),
        };
        // A call of a stateful model goes to its sequence's slot (`core::sequence`).
        let seq = reply.as_ref().and_then(|r| r.sequence());
        let answer = match seq {
            Some(_) => Some(
                self.node
                    .sequences
                    .run(&self.node.dispatcher, call, seq)
                    .await,
            ),
            // A client that hangs up while its call waits for a slot is not served:
            // the call leaves the queue (`core::slot::cancel`), and so does the
            // connection, with nothing to answer.
            None => {
                let dispatcher = &self.node.dispatcher;
                dispatcher.run_unless(call, self.stream.hung_up()).await
            }
        };
        drop(quota);
        let Some(answer) = answer else {
            return Ok(Step::Close);
        };
        let (queue_ns, infer_ns) = (answer.queue_ns, answer.exec_ns);
        let v2 = model.as_deref().zip(reply.as_ref());
        let (ok, output_ns) = self
            .write_answer(&req, answer, v2.map(|(m, r)| (m, r, &targets[..])))
            .await?;
        if model.is_some() {
            let measured = stats::Measured {
                received,
                ok,
                batch,
                input_ns,
                queue_ns,
                infer_ns,
                output_ns,
            };
            stats::record(&self.node, accel_id, measured);
        }
        Ok(self.after())
    }

    /// Writes a call's answer: the raw output (`/v1/fn`), or for a v2 call (`v2` holds
    /// the model, what its request asked for and the outputs it wants in shared memory)
    /// the protocol's response document. Returns whether the answer was the output,
    /// and how long encoding the document took (ns; 0 for other answers).
    async fn write_answer(
        &mut self,
        req: &Request,
        answer: Answer,
        v2: Option<(&dyn Accelerator, &Reply, &[shm::OutputTarget])>,
    ) -> io::Result<(bool, u64)> {
        let Answer {
            mut status,
            output,
            mut message,
            slot,
            queue_ns,
            exec_ns,
            payload,
        } = answer;
        if v2.is_none() {
            self.body = payload;
        }
        if status == Status::Busy {
            self.node.count_busy(Protocol::Http, req.accel_id);
        }
        let mut encode_ns = 0;
        let mut encoded = None;
        if let (Status::Ok, Some((accel, reply, targets))) = (status, v2) {
            let encoding = Instant::now();
            let mut doc = Vec::with_capacity(output.len() + 192);
            let json_len = v2_infer::encode(&accel.descriptor().name, reply, &output, &mut doc);
            match shm::place_outputs(targets, &mut doc, json_len) {
                Ok(json_len) => encoded = Some((doc, json_len)),
                Err(why) => (status, message) = (Status::BadRequest, why),
            }
            encode_ns = stats::since_ns(encoding);
        }
        let code = http_code(status);
        if status != Status::Ok {
            self.log_refusal(code, status.name(), &message);
        }
        let keep_alive = self.keep_alive(req);
        if self.wbuf.capacity() == 0 {
            // Given back while the connection was idle: a pooled one with room for the
            // head and the output, not a new one grown five times (issue 28).
            self.wbuf = bufpool::take(HEAD_ROOM + output.len().min(WRITE_BATCH_MAX));
        }
        let head = Head::start(&mut self.wbuf, code)
            .num("X-Netaccel-Queue-Ns", queue_ns)
            .num("X-Netaccel-Exec-Ns", exec_ns);
        let mut head = match slot {
            Some(slot) => head.num("X-Netaccel-Slot", u64::from(slot)),
            None => head.header("X-Netaccel-Slot", b"none"),
        };
        let error;
        let body: &[u8] = if let (Status::Ok, Some((doc, json_len))) = (status, &encoded) {
            match json_len {
                Some(json_len) => {
                    head = head
                        .header("Content-Type", b"application/octet-stream")
                        .num("Inference-Header-Content-Length", *json_len as u64);
                }
                None => head = head.header("Content-Type", b"application/json"),
            }
            doc
        } else if status == Status::Ok {
            head = head.header("Content-Type", b"application/octet-stream");
            &output
        } else {
            if code == 503 {
                head = head.header("Retry-After", b"1");
            }
            head = head.header("Content-Type", b"application/json");
            error = error_body(&message, status.name());
            &error
        };
        head.num("Content-Length", body.len() as u64)
            .finish(keep_alive, req.minor);
        self.count(code);
        if body.len() > WRITE_BATCH_MAX {
            self.flush().await?;
            let timeout = Duration::from_millis(self.node.config.io_timeout_ms);
            self.stream.write_within(body, timeout).await?;
        } else {
            self.wbuf.extend_from_slice(body);
        }
        self.out = output;
        self.out.clear();
        if self.wbuf.len() > WRITE_BATCH_MAX {
            self.flush().await?;
        }
        Ok((status == Status::Ok, encode_ns))
    }

    /// The buffer a call's output is written into: the connection's own, or a pooled
    /// one with room for `len` bytes when the connection gave its own back while idle
    /// (an accelerator then writes without allocating, issue 28).
    fn output_buffer(&mut self, len: usize) -> Vec<u8> {
        let out = std::mem::take(&mut self.out);
        debug_assert!(
            out.is_empty(),
            "the output buffer is cleared after each answer"
        );
        if out.capacity() == 0 {
            return bufpool::take(len.min(BODY_CHUNK));
        }
        out
    }

    async fn flush(&mut self) -> io::Result<()> {
        let timeout = Duration::from_millis(self.node.config.io_timeout_ms);
        netio::flush(&mut self.stream, &mut self.wbuf, timeout).await
    }

    /// Waits, idle between requests, for the next request's first bytes and appends
    /// them to the read buffer; a shutdown ends the wait. The connection loop is its
    /// only caller, which lets the compiler inline it there: when it stayed out of
    /// line (one function with the body's wait, below), `/health` took 6 % more
    /// instructions (2,911 against 2,737; bench/http/instructions.sh, issue 28).
    async fn wait_idle(
        &mut self,
        deadline: Instant,
        mut stop: Pin<&mut StopWait>,
    ) -> io::Result<Wait> {
        // Nothing pending: an idle connection holds no buffer while it waits
        // (issue 15: tens of thousands of idle connections in bounded memory).
        self.release_buffers();
        let readable = {
            let (shutdown, registered) = (&self.shutdown, &mut self.stop_registered);
            let mut readable = std::pin::pin!(self.stream.wait_readable(deadline, &mut self.timer));
            // The shutdown first, then input; a poll of its own rather than a `select!`
            // (issue 28).
            poll_fn(|cx| {
                if stop::poll(stop.as_mut(), cx, shutdown, registered).is_ready() {
                    return Poll::Ready(None);
                }
                readable.as_mut().poll(cx).map(Some)
            })
            .await
        };
        let Some(readable) = readable else {
            return Ok(Wait::Shutdown);
        };
        if !readable? {
            return Ok(Wait::Timeout);
        }
        let chunk = self.make_read_room();
        let mut buf = (&mut self.rbuf).limit(chunk);
        // Woken by input, the read mostly finds it: no future, no `select!`.
        if let Some(waited) = read_now(self.stream.try_read_now(&mut buf)) {
            return waited;
        }
        // Readiness can be stale (an edge-triggered event for bytes an earlier read
        // already took), so this read may find nothing and wait: an idle connection
        // still closes at a shutdown meanwhile. Before, it waited out its idle timeout
        // and held the drain that long (seen: 30 s).
        let reading = self
            .stream
            .read_with_deadline(&mut buf, deadline, &mut self.timer);
        tokio::select! {
            biased;
            read = reading => Ok(read_waited(read?)),
            _ = poll_fn(|cx| stop::poll(stop.as_mut(), cx, &self.shutdown, &mut self.stop_registered)) => {
                Ok(Wait::Shutdown)
            }
        }
    }

    /// Waits for more of a head or body and appends it to the read buffer. Not idle:
    /// a shutdown does not end this wait ([`Conn::wait_idle`] is the idle one).
    async fn wait_read(&mut self, deadline: Instant) -> io::Result<Wait> {
        let chunk = self.make_read_room();
        let mut buf = (&mut self.rbuf).limit(chunk);
        if let Some(waited) = read_now(self.stream.try_read_now(&mut buf)) {
            return waited;
        }
        let read = self
            .stream
            .read_with_deadline(&mut buf, deadline, &mut self.timer)
            .await?;
        Ok(read_waited(read))
    }

    /// Makes room in the read buffer for the next read: drops what was consumed (all
    /// of it, or the front half once that is most of the buffer) and reserves a
    /// chunk, whose size it returns: [`READ_CHUNK`] for a new request,
    /// [`PARTIAL_HEAD_CHUNK`] while part of one is buffered.
    #[inline]
    fn make_read_room(&mut self) -> usize {
        if self.rpos > 0 && self.rpos == self.rbuf.len() {
            self.rbuf.clear();
            self.rpos = 0;
        } else if self.rpos > self.rbuf.len() / 2 {
            self.rbuf.drain(..self.rpos);
            self.rpos = 0;
        }
        let chunk = if self.buffered().is_empty() {
            READ_CHUNK
        } else {
            PARTIAL_HEAD_CHUNK
        };
        if self.rbuf.capacity() == 0 {
            self.rbuf = bufpool::take(chunk);
        }
        self.rbuf.reserve(chunk);
        chunk
    }

    /// While part of a head is buffered, the read buffer keeps at most
    /// [`PARTIAL_HEAD_CHUNK`] of room beyond it: the first read of a request may have
    /// taken a [`READ_CHUNK`] buffer for a byte.
    fn keep_head_room_small(&mut self) {
        debug_assert!(!self.buffered().is_empty(), "a partial head is buffered");
        let keep = self.rbuf.len() + PARTIAL_HEAD_CHUNK;
        if self.rbuf.capacity() > keep {
            self.rbuf.shrink_to(keep);
        }
    }

    /// Gives the connection's buffers back to the pool; called only when nothing is
    /// buffered in either direction.
    fn release_buffers(&mut self) {
        debug_assert!(self.buffered().is_empty() && self.wbuf.is_empty());
        self.rpos = 0;
        bufpool::give_all([
            &mut self.rbuf,
            &mut self.wbuf,
            &mut self.body,
            &mut self.out,
        ]);
    }
}

/// Decodes a v2 inference request, its shared memory inputs read in band first
/// (`oip::shm`); with the outputs it wants written to shared memory.
fn v2_decode(
    node: &Node,
    tenant: TenantId,
    accel: &dyn Accelerator,
    body: &[u8],
    json_len: Option<usize>,
) -> Result<(v2_infer::InferCall, Vec<shm::OutputTarget>), String> {
    match shm::rewrite_request(&node.shm, tenant, body, json_len)? {
        None => Ok((v2_infer::decode(accel, body, json_len)?, Vec::new())),
        Some(r) => Ok((
            v2_infer::decode(accel, &r.body, Some(r.json_len))?,
            r.outputs,
        )),
    }
}
