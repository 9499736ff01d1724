//! The RAC v1 front end (after OffRAC): compact binary calls over TCP, pipelined, with
//! results returned in completion order.
//!
//! One task drives each connection. It decodes 64-byte headers (crate `rac-proto`),
//! and for each call either answers at once (unknown accelerator, bad params, duplicate
//! request id, no reassembly room) or gathers the payload and hands the whole call to
//! the dispatcher, once its tenant's quota admits it (`core::quota`; over it, `BUSY`
//! saying which limit). A payload already complete in the read buffer takes the
//! single-fragment path; one that is still arriving first reserves room in the shared
//! reassembly pool ([`crate::core::memory::ReassemblyPool`]) — none eligible means `BUSY`,
//! with the payload read and discarded and the connection kept.
//!
//! Calls queued at slots are awaited together; each result is written as soon as its
//! slot finishes. At most `rac_in_flight_max` calls are in flight per connection:
//! beyond that the task stops reading, so TCP pushes back on the client instead of the
//! node refusing. A framing error (`PROTOCOL_ERROR`, `TOO_LARGE`) stops reading; the
//! calls already in flight are answered, then the error result, then the connection
//! closes.

use std::collections::HashSet;
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel::Accelerator;
use bytes::BufMut;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use rac_proto::{
    CallHeader, CallKind, ControlRequest, Decoded, ResultHeader, ResultKind, Status, NO_SLOT,
};

use crate::core::deadline::Deadline;
use crate::core::memory::{BodyMemory, PoolLease};
use crate::core::slot::{Answer, Call, Submitted};
use crate::core::tenant::auth::{Action, AuthError, Base, Session};
use crate::core::tenant::{TenantGate, TenantId};
use crate::front::{admin, stop};
use crate::net::bufpool;
use crate::net::netio::{self, IoTimer, Transport};
use crate::node::Node;
use crate::telemetry::audit::{AuditEvent, AuditKind};
use crate::telemetry::logging::Refusal;
use crate::telemetry::Protocol;

/// Bytes pulled in by one read.
const READ_CHUNK: usize = 64 * 1024;
/// Payload and output buffers a connection keeps for reuse, and the largest kept:
/// at most 64 KiB per connection, like its read buffer.
const SPARE_BUFFERS_MAX: usize = 4;
const SPARE_BUFFER_BYTES_MAX: usize = 16 * 1024;
/// Results with at least this many body bytes are written straight from the output
/// buffer when nothing else waits to be sent and no other call of the connection is in
/// flight or buffered, instead of being copied into the connection's output buffer
/// first; smaller ones, and those of pipelining clients, are batched into one write.
/// (16 KiB echo calls, one at a time: node CPU per call 16.5–17.2 µs against
/// 17.6–18.6 µs with the copy, `perf stat` over 60 000 calls.)
const DIRECT_WRITE_MIN: usize = 1024;
/// Most body room an output buffer is taken from the pool with; a longer result grows
/// it (the pool keeps buffers up to 64 KiB).
const WRITE_ROOM_MAX: usize = 16 * 1024;

type Pending = Pin<Box<dyn Future<Output = (CallHeader, Answer)> + Send>>;

/// Serves one connection over `stream`: a `TcpStream`, or a TLS stream (`crate::net::tls`).
/// When `base` is a client certificate's tenant, `hello` cannot change it.
pub async fn serve<S: Transport>(node: Arc<Node>, stream: S, peer: SocketAddr, base: Base) {
    let tenant_fixed = matches!(base, Base::Certificate(_));
    let session = Session::new(base);
    let tenant = session.base_id();
    let gate = node.tenants.gate(tenant);
    let mut conn = RacConn {
        node,
        stream,
        peer,
        rbuf: Vec::new(),
        rpos: 0,
        wbuf: Vec::new(),
        gate,
        tenant,
        session,
        in_flight: HashSet::default(),
        pending: FuturesUnordered::new(),
        receiving: None,
        spare: Vec::new(),
        timer: IoTimer::default(),
        closing: None,
        tenant_fixed,
        now: None,
    };
    if let Err(e) = conn.run().await {
        tracing::debug!(error = %e, "rac connection ended with an error");
    }
    conn.node.rac_in_flight.dec_by(conn.pending.len() as i64);
}

/// A message whose payload is still arriving.
enum Receiving {
    /// A call or control message being gathered.
    Payload {
        header: CallHeader,
        target: Target,
        payload: Vec<u8>,
        lease: Option<PoolLease>,
    },
    /// A refused call's payload, read and thrown away.
    Discard { remaining: usize },
}

enum Target {
    Call(Arc<dyn Accelerator>),
    Control,
}

struct RacConn<S> {
    node: Arc<Node>,
    stream: S,
    /// The client's address, for the log.
    peer: SocketAddr,
    /// Unconsumed input is `rbuf[rpos..]`.
    rbuf: Vec<u8>,
    rpos: usize,
    wbuf: Vec<u8>,
    tenant: TenantId,
    /// Who the caller is: its `hello`, its certificate, or `anonymous`.
    session: Session,
    /// Calls of this connection's tenant queued at slots, across its connections.
    gate: Arc<TenantGate>,
    /// Request ids of calls queued at slots (for duplicate detection). Hashed with
    /// foldhash rather than SipHash: three hashes a call, ~240 instructions with
    /// SipHash (issue 28); the set holds at most `rac_in_flight_max` ids, so a client
    /// that picks colliding ids slows only its own connection, and by that bound.
    in_flight: HashSet<u32, foldhash::fast::RandomState>,
    pending: FuturesUnordered<Pending>,
    receiving: Option<Receiving>,
    /// The connection's read deadline (idle or payload timeout).
    timer: IoTimer,
    /// Buffers of answered calls, reused for the next payloads and outputs.
    spare: Vec<Vec<u8>>,
    /// A framing error was read: its result, sent once in-flight calls are answered.
    closing: Option<(ResultHeader, String)>,
    /// The tenant came from the client's certificate (TLS): `hello` cannot change it.
    tenant_fixed: bool,
    /// The time as read once in this turn of the connection's loop ([`RacConn::now`]).
    now: Option<Instant>,
}

enum Event {
    Done((CallHeader, Answer)),
    Input(Input),
}

enum Input {
    /// Bytes arrived; `more` when the read used its whole budget, so more are likely
    /// waiting.
    Data {
        more: bool,
    },
    Eof,
    Timeout,
    Shutdown,
}

impl<S: Transport> RacConn<S> {
    async fn run(&mut self) -> io::Result<()> {
        // One wait for the shutdown for the connection's life (see `front::stop`),
        // polled only while reading, which it ends.
        let signal = self.node.shutdown_signal();
        let stop = stop::wait(&signal);
        tokio::pin!(stop);
        let mut stop_registered = false;
        let mut reading = true;
        loop {
            if reading {
                self.process_buffered();
            }
            if self.closing.is_some() {
                reading = false;
            }
            if !reading && self.pending.is_empty() {
                return self.finish().await;
            }
            // Everything buffered has been handled: send what is ready before waiting.
            // A flush that had to wait for the client leaves the turn's time stale
            // for the next wait's deadline, which is then read anew.
            let waited = {
                let flush = self.flush();
                tokio::pin!(flush);
                match flush.as_mut().now_or_never() {
                    Some(flushed) => flushed.map(|()| false),
                    None => flush.await.map(|()| true),
                }
            }?;
            if waited {
                self.now = None;
            }
            // When the tenant is at its bound, wait for one of its calls to finish:
            // register for the "freed" signal, then look again, so a release between
            // the first look and the wait is not missed. (Registering costs a lock, so
            // it is done only when needed.)
            let gate = Arc::clone(&self.gate);
            let freed = gate.freed.notified();
            tokio::pin!(freed);
            let tenant_full = gate.is_full() && {
                freed.as_mut().enable();
                gate.is_full()
            };
            let may_read =
                reading && !tenant_full && self.pending.len() < self.node.config.rac_in_flight_max;
            let partial = self.receiving.is_some() || self.rpos < self.rbuf.len();
            if !partial && self.pending.is_empty() {
                // Nothing pending either way: an idle connection holds no buffer
                // while it waits (issue 15); `read_input` takes one once bytes come.
                self.release_buffers();
            }
            let config = &self.node.config;
            let wait = if !self.pending.is_empty() {
                // Results are on their way; a quiet client is not idle.
                Duration::from_secs(3600)
            } else if partial {
                Duration::from_millis(config.io_timeout_ms)
            } else {
                Duration::from_millis(config.idle_timeout_ms)
            };
            let deadline = self.now() + wait;
            self.now = None;
            // Biased: no random number per turn (issue 28); the shutdown first, so that
            // a client that keeps the input coming still sees it.
            let event = tokio::select! {
                biased;
                _ = poll_fn(|cx| stop::poll(stop.as_mut(), cx, &signal, &mut stop_registered)), if reading => {
                    Event::Input(Input::Shutdown)
                }
                Some(done) = self.pending.next(), if !self.pending.is_empty() => Event::Done(done),
                input = read_input(&mut self.stream, &mut self.rbuf, &mut self.rpos, &mut self.receiving, deadline, &mut self.timer), if may_read => {
                    Event::Input(input?)
                }
                _ = &mut freed, if reading && tenant_full => continue,
            };
            let input = match event {
                Event::Done((header, answer)) => {
                    self.answered(&header, answer);
                    // Answer every result that is ready before touching the socket again.
                    while let Some(Some((header, answer))) = self.pending.next().now_or_never() {
                        self.answered(&header, answer);
                    }
                    continue;
                }
                Event::Input(input) => input,
            };
            match input {
                // Fairness between connections on this network thread: after a full
                // chunk, let the others (and the event loop) have a turn before
                // reading more from this one. A flooding client then costs the others
                // at most one chunk per turn, not a burst of reads.
                Input::Data { more: true } => tokio::task::yield_now().await,
                Input::Data { more: false } => {}
                Input::Eof | Input::Timeout | Input::Shutdown => reading = false,
            }
        }
    }

    /// The time, read at most once per turn of the connection's loop: the calls
    /// decoded in a turn were whole when its input was read, and the next wait's
    /// deadline (seconds away) is taken microseconds later; a clock read costs
    /// ~25 ns on this node's path of a few µs (issue 28).
    fn now(&mut self) -> Instant {
        *self.now.get_or_insert_with(Instant::now)
    }

    /// Whether this connection may start another call: below its own in-flight bound
    /// and its tenant's. Past either, the node stops reading (TCP back-pressure).
    fn may_take_more(&self) -> bool {
        self.pending.len() < self.node.config.rac_in_flight_max && !self.gate.is_full()
    }

    /// Gives the read, output and spare buffers back to the thread's pool.
    fn release_buffers(&mut self) {
        debug_assert!(self.wbuf.is_empty() && self.rpos == self.rbuf.len());
        self.rpos = 0;
        bufpool::give_all([&mut self.rbuf, &mut self.wbuf]);
        // The list itself keeps its room (SPARE_BUFFERS_MAX entries, 96 bytes): freed
        // here, it was allocated again by the next call's first spare (issue 28).
        for mut buf in self.spare.drain(..) {
            bufpool::give(&mut buf);
        }
    }

    /// A queued call's answer arrived.
    fn answered(&mut self, header: &CallHeader, answer: Answer) {
        self.node.rac_in_flight.dec();
        self.in_flight.remove(&header.request_id);
        self.write_answer(header, answer);
    }

    /// Decodes and starts every message the buffer holds, up to the in-flight bound.
    fn process_buffered(&mut self) {
        loop {
            if self.receiving.is_some() && !self.continue_receiving() {
                break;
            }
            if self.closing.is_some() || !self.may_take_more() {
                break;
            }
            let max = self.node.pool.buffer_bytes() as u32;
            match CallHeader::decode(&self.rbuf[self.rpos..], max) {
                Ok(Decoded::Partial) => break,
                Ok(Decoded::Complete(header, used)) => {
                    self.rpos += used;
                    self.start(header);
                }
                Err(e) => {
                    self.node.rac_requests(e.status()).inc();
                    self.log_refusal(e.status(), &e);
                    self.closing = Some((e.answer(0), e.to_string()));
                    break;
                }
            }
        }
        if self.rpos == self.rbuf.len() {
            self.rbuf.clear();
            self.rpos = 0;
        }
    }

    /// Begins a message whose header was just read.
    fn start(&mut self, header: CallHeader) {
        let len = header.payload_len as usize;
        if self.in_flight.contains(&header.request_id) {
            let message = format!(
                "request id {} is already in flight on this connection",
                header.request_id
            );
            return self.refuse(&header, Status::BadRequest, &message);
        }
        let target = match header.kind {
            CallKind::Control => Target::Control,
            CallKind::Call => {
                let Some(accel) = self
                    .node
                    .dispatcher
                    .catalog()
                    .by_id(header.accel_id)
                    .cloned()
                else {
                    let message =
                        format!("no accelerator with id {} on this node", header.accel_id);
                    return self.refuse(&header, Status::UnknownAccelerator, &message);
                };
                if let Err(e) = accel.check(&header.params, Some(len)) {
                    return self.refuse(&header, Status::BadRequest, &e.to_string());
                }
                if let Err(message) = self.authorize(Action::Call(&accel.descriptor().name)) {
                    return self.refuse(&header, Status::Unauthorized, &message);
                }
                Target::Call(accel)
            }
        };
        let buffered = self.rbuf.len() - self.rpos;
        if buffered >= len {
            // Single-fragment path: the payload came with its header.
            let mut payload = self.spare_buffer(len);
            payload.extend_from_slice(&self.rbuf[self.rpos..self.rpos + len]);
            self.rpos += len;
            return self.complete(header, target, payload, None);
        }
        let lease = match target {
            // Control payloads are at most 4 KiB (checked by the decoder).
            Target::Control => None,
            Target::Call(_) => match self.node.pool.reserve(len) {
                Some(lease) => Some(lease),
                None => {
                    return self.refuse(
                        &header,
                        Status::Busy,
                        "no reassembly buffer has room for this call; retry",
                    );
                }
            },
        };
        self.receiving = Some(Receiving::Payload {
            header,
            target,
            payload: self.spare_buffer(len),
            lease,
        });
        self.continue_receiving();
    }

    /// Answers a call without running it and skips its payload.
    fn refuse(&mut self, header: &CallHeader, status: Status, message: &str) {
        self.log_refusal(status, &message);
        self.write_result(
            &ResultHeader::answer(header, status, message.len() as u32),
            message.as_bytes(),
        );
        let len = header.payload_len as usize;
        let skip = len.min(self.rbuf.len() - self.rpos);
        self.rpos += skip;
        if skip < len {
            self.receiving = Some(Receiving::Discard {
                remaining: len - skip,
            });
        }
    }

    /// Moves buffered bytes into the message being received. Returns `true` when it is
    /// complete (and started), `false` when more input is needed.
    fn continue_receiving(&mut self) -> bool {
        let available = self.rbuf.len() - self.rpos;
        match self.receiving.as_mut().expect("receiving") {
            Receiving::Discard { remaining } => {
                let take = (*remaining).min(available);
                *remaining -= take;
                self.rpos += take;
                if *remaining > 0 {
                    return false;
                }
            }
            Receiving::Payload {
                header, payload, ..
            } => {
                let want = header.payload_len as usize - payload.len();
                let take = want.min(available);
                payload.extend_from_slice(&self.rbuf[self.rpos..self.rpos + take]);
                self.rpos += take;
                if take < want {
                    return false;
                }
            }
        }
        if let Some(Receiving::Payload {
            header,
            target,
            payload,
            lease,
        }) = self.receiving.take()
        {
            self.complete(header, target, payload, lease);
        }
        true
    }

    /// A whole message: run it (calls go to the dispatcher).
    fn complete(
        &mut self,
        header: CallHeader,
        target: Target,
        payload: Vec<u8>,
        lease: Option<PoolLease>,
    ) {
        let accel = match target {
            Target::Control => return self.control(header, &payload),
            Target::Call(accel) => accel,
        };
        let quota = match self.node.quotas.admit(self.tenant, payload.len()) {
            Ok(hold) => hold,
            Err(refused) => {
                self.log_quota(&refused);
                self.keep_buffer(payload);
                let message = refused.to_string();
                let result = ResultHeader::answer(&header, Status::Busy, message.len() as u32);
                return self.write_result(&result, message.as_bytes());
            }
        };
        let received = self.now();
        let call = Call {
            accel,
            params: header.params,
            payload,
            out: self.spare_buffer(0),
            received,
            deadline: Deadline::after(received, header.deadline_us),
            tenant: self.tenant,
            permit: lease.map(BodyMemory::Pool),
        };
        match self.node.dispatcher.submit(call) {
            Submitted::Done(answer) => self.write_answer(&header, answer),
            Submitted::Queued(rx) => {
                self.in_flight.insert(header.request_id);
                self.node.rac_in_flight.inc();
                let held = self.gate.hold();
                let node = Arc::clone(&self.node);
                self.pending.push(Box::pin(async move {
                    // Dropped with the connection before its answer, the wait takes
                    // the call out of its slot's queue (`core::slot::cancel`).
                    let answer = node.dispatcher.wait(rx).await;
                    drop((held, quota));
                    (header, answer)
                }));
            }
        }
    }

    fn control(&mut self, header: CallHeader, payload: &[u8]) {
        let request = match ControlRequest::parse(payload) {
            Ok(r) => r,
            Err(e) => return self.write_control(&header, e.status(), e.to_string().into_bytes()),
        };
        let node = Arc::clone(&self.node);
        match request {
            ControlRequest::Catalog { .. } | ControlRequest::Slots { .. } => {
                if let Err(message) = self.authorize(Action::Catalog) {
                    return self.write_control(&header, Status::Unauthorized, message.into_bytes());
                }
                let doc = match request {
                    ControlRequest::Catalog { .. } => admin::catalog_json(&node),
                    _ => admin::slots_json(&node, None),
                };
                self.write_control(&header, Status::Ok, doc)
            }
            ControlRequest::Hello { tenant, .. } if self.tenant_fixed => {
                // The certificate already proved the tenant: naming it again is fine,
                // naming another is not (the certificate wins over anything sent).
                if node.tenants.named(&tenant) == self.tenant {
                    let body =
                        serde_json::to_vec(&serde_json::json!({ "tenant": tenant })).expect("JSON");
                    self.write_control(&header, Status::Ok, body);
                } else {
                    let message = format!(
                        "this connection's tenant is set by its client certificate; hello cannot change it to `{tenant}`"
                    );
                    self.write_control(&header, Status::Unauthorized, message.into_bytes());
                }
            }
            ControlRequest::Hello { tenant, token } => {
                match self
                    .session
                    .hello(&node.tenants.auth, &tenant, token.as_deref())
                {
                    Ok(who) => {
                        let id = who.id;
                        self.tenant = id;
                        self.gate = node.tenants.gate(id);
                        let body = serde_json::to_vec(&serde_json::json!({ "tenant": tenant }))
                            .expect("JSON");
                        self.write_control(&header, Status::Ok, body);
                    }
                    Err(AuthError::Busy) => {
                        let message = AuthError::Busy.message();
                        self.write_control(&header, Status::Busy, message.into_bytes());
                    }
                    Err(e) => {
                        let message = e.message();
                        self.audit(
                            AuditKind::AuthenticationFailed,
                            "anonymous",
                            "hello",
                            &message,
                        );
                        self.write_control(&header, Status::Unauthorized, message.into_bytes());
                    }
                }
            }
            ControlRequest::Load {
                slot,
                accelerator,
                token,
            } => {
                if let Err(message) = self.authorize_load(token.as_deref(), &accelerator) {
                    return self.write_control(&header, Status::Unauthorized, message.into_bytes());
                }
                let (peer, who) = (self.peer, self.label());
                // Reconfiguration waits for the slot's queue to drain: it runs off the
                // network thread, and the answer goes out when it is done.
                self.in_flight.insert(header.request_id);
                self.node.rac_in_flight.inc();
                self.pending.push(Box::pin(async move {
                    let result = admin::reconfigure(
                        Arc::clone(&node),
                        slot,
                        accelerator.clone(),
                        admin::Origin::default(),
                    )
                    .await;
                    let asked = (Protocol::Rac, peer);
                    admin::audit_reconfiguration(&node, asked, &who, (slot, &accelerator), &result);
                    let answer = match result {
                        Ok(done) => control_answer(Status::Ok, done.json()),
                        Err(e) => control_answer(e.status, e.message.into_bytes()),
                    };
                    (header, answer)
                }));
            }
        }
    }

    /// Whether the connection's caller may do `action`; if not, the refusal's
    /// sentence (`UNAUTHORIZED` on the wire: RAC has one status for both), audited.
    fn authorize(&mut self, action: Action<'_>) -> Result<(), String> {
        let (kind, who, message) = match self.session.current(&self.node.tenants.auth) {
            Ok(who) => match self.node.refusal(who, action) {
                None => return Ok(()),
                Some(message) => (AuditKind::Forbidden, who.label().to_string(), message),
            },
            Err(e) => (
                AuditKind::AuthenticationFailed,
                "anonymous".to_string(),
                e.message(),
            ),
        };
        self.audit(kind, &who, &action.to_string(), &message);
        Err(message)
    }

    /// RAC `load`: allowed by the caller's policy or the admin token in the message.
    fn authorize_load(&mut self, token: Option<&str>, accelerator: &str) -> Result<(), String> {
        let config = &self.node.config;
        let (kind, refused) = match self.session.current(&self.node.tenants.auth) {
            Ok(who) => match admin::authorize_load(config, who, token, Some(accelerator)) {
                Ok(()) => return Ok(()),
                Err(refused) if refused.is_forbidden() => (
                    AuditKind::Forbidden,
                    refused.message("load needs the node's admin token", "load"),
                ),
                Err(refused) => (
                    AuditKind::AuthenticationFailed,
                    refused.message("load needs the node's admin token", "load"),
                ),
            },
            Err(e) => (AuditKind::AuthenticationFailed, e.message()),
        };
        let who = self.label();
        self.audit(kind, &who, &format!("load {accelerator}"), &refused);
        Err(refused)
    }

    /// The caller's name for the audit log.
    fn label(&mut self) -> String {
        match self.session.current(&self.node.tenants.auth) {
            Ok(who) => who.label().to_string(),
            Err(_) => "anonymous".to_string(),
        }
    }

    fn audit(&self, kind: AuditKind, who: &str, action: &str, detail: &str) {
        let event = AuditEvent::request(kind, Protocol::Rac, self.peer, who, action, detail);
        self.node.audit.record(&event);
    }

    fn write_control(&mut self, header: &CallHeader, status: Status, body: Vec<u8>) {
        self.write_answer(header, control_answer(status, body));
    }

    fn write_answer(&mut self, header: &CallHeader, answer: Answer) {
        let Answer {
            status,
            output,
            message,
            slot,
            queue_ns,
            exec_ns,
            payload,
        } = answer;
        let body: &[u8] = if status == Status::Ok {
            &output
        } else {
            self.log_refusal(status, &message);
            message.as_bytes()
        };
        let mut result = ResultHeader::answer(header, status, body.len() as u32);
        result.slot_id = slot.unwrap_or(NO_SLOT);
        result.queue_ns = queue_ns;
        result.exec_ns = exec_ns;
        self.write_result(&result, body);
        self.keep_buffer(output);
        self.keep_buffer(payload);
    }

    /// Logs a refused call or control message, if `status` is a refusal worth logging
    /// (see [`Refusal::of_status`]).
    fn log_refusal(&self, status: Status, reason: &dyn std::fmt::Display) {
        if let Some(kind) = Refusal::of_status(status) {
            self.node
                .refusals
                .log(kind, Protocol::Rac, self.peer, &status.name(), reason);
        }
    }

    /// Logs a call refused for its tenant's quota (answered `BUSY`), rate-limited.
    fn log_quota(&self, refused: &crate::core::quota::Refused) {
        let status = Status::Busy.name();
        self.node
            .refusals
            .log(Refusal::Quota, Protocol::Rac, self.peer, &status, refused);
    }

    /// An empty buffer with room for `len` bytes, reused from earlier calls when one
    /// is at hand (saves an allocation and a free per call and buffer).
    fn spare_buffer(&mut self, len: usize) -> Vec<u8> {
        let mut buf = self.spare.pop().unwrap_or_else(|| bufpool::take(len));
        buf.clear();
        buf.reserve(len);
        buf
    }

    /// Keeps a finished call's buffer for reuse: a few small ones, so an idle
    /// connection holds little memory.
    fn keep_buffer(&mut self, buf: Vec<u8>) {
        let size = buf.capacity();
        if self.spare.len() < SPARE_BUFFERS_MAX && size > 0 && size <= SPARE_BUFFER_BYTES_MAX {
            self.spare.push(buf);
        }
    }

    /// Queues one result for the client. Every result of the connection passes here,
    /// so this is where RAC results are counted.
    fn write_result(&mut self, result: &ResultHeader, body: &[u8]) {
        self.node.rac_requests(result.status).inc();
        if result.status == Status::Busy && result.kind == ResultKind::Result {
            self.node.count_busy(Protocol::Rac, Some(result.accel_id));
        }
        let header = result.encode();
        if self.wbuf.capacity() == 0 {
            // Given back while the connection was idle: a pooled one, not a new one
            // grown twice (issue 28).
            self.wbuf = bufpool::take(header.len() + body.len().min(WRITE_ROOM_MAX));
        }
        let alone = self.pending.is_empty() && self.rpos == self.rbuf.len();
        if alone && self.wbuf.is_empty() && body.len() >= DIRECT_WRITE_MIN {
            // Nothing queued ahead, no other call in flight or buffered (no batch to
            // build):
            // header and body go to the socket from where they are (one vectored
            // write), and only what the socket did not take is copied into the output
            // buffer.
            let slices = [io::IoSlice::new(&header), io::IoSlice::new(body)];
            let written = self.stream.try_write_vectored(&slices).unwrap_or(0);
            if written < header.len() {
                self.wbuf.extend_from_slice(&header[written..]);
                self.wbuf.extend_from_slice(body);
            } else {
                self.wbuf.extend_from_slice(&body[written - header.len()..]);
            }
            return;
        }
        self.wbuf.extend_from_slice(&header);
        self.wbuf.extend_from_slice(body);
    }

    async fn flush(&mut self) -> io::Result<()> {
        let timeout = Duration::from_millis(self.node.config.io_timeout_ms);
        netio::flush(&mut self.stream, &mut self.wbuf, timeout).await
    }

    /// Sends the closing error result, if any, and closes.
    async fn finish(&mut self) -> io::Result<()> {
        let Some((result, message)) = self.closing.take() else {
            self.flush().await?;
            return Ok(());
        };
        let mut result = result;
        result.payload_len = message.len() as u32;
        self.wbuf.extend_from_slice(&result.encode());
        self.wbuf.extend_from_slice(message.as_bytes());
        self.flush().await?;
        self.stream.linger().await;
        Ok(())
    }
}

/// Reads more input: straight into a payload being received when nothing else is
/// buffered (no copy), otherwise into the read buffer.
async fn read_input<S: Transport>(
    stream: &mut S,
    rbuf: &mut Vec<u8>,
    rpos: &mut usize,
    receiving: &mut Option<Receiving>,
    deadline: Instant,
    timer: &mut IoTimer,
) -> io::Result<Input> {
    // Each read is bounded by READ_CHUNK, payload reads included: a connection that
    // streams megabytes takes the network thread for one chunk per turn.
    let (n, budget) = match receiving.as_mut() {
        Some(Receiving::Payload {
            header, payload, ..
        }) if *rpos == rbuf.len() => {
            let want = (header.payload_len as usize - payload.len()).min(READ_CHUNK);
            let n = stream
                .read_with_deadline(&mut payload.limit(want), deadline, timer)
                .await?;
            (n, want)
        }
        _ => {
            if rbuf.capacity() == 0 {
                // An idle connection: wait for bytes before taking a buffer.
                if !stream.wait_readable(deadline, timer).await? {
                    return Ok(Input::Timeout);
                }
                *rbuf = bufpool::take(READ_CHUNK);
            }
            if *rpos > 0 {
                rbuf.drain(..*rpos);
                *rpos = 0;
            }
            rbuf.reserve(READ_CHUNK);
            let n = stream
                .read_with_deadline(&mut rbuf.limit(READ_CHUNK), deadline, timer)
                .await?;
            (n, READ_CHUNK)
        }
    };
    Ok(match n {
        None => Input::Timeout,
        Some(0) => Input::Eof,
        // Only a read cut short by the chunk bound suggests more is waiting; one that
        // ended a payload exactly did not.
        Some(n) => Input::Data {
            more: n == budget && budget == READ_CHUNK,
        },
    })
}

fn control_answer(status: Status, body: Vec<u8>) -> Answer {
    let ok = status == Status::Ok;
    Answer {
        status,
        message: if ok {
            String::new()
        } else {
            String::from_utf8_lossy(&body).into_owned()
        },
        output: if ok { body } else { Vec::new() },
        slot: None,
        queue_ns: 0,
        exec_ns: 0,
        payload: Vec::new(),
    }
}
