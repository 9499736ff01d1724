//! Load generation: closed loop, closed loop with calls in flight, and open loop.
//!
//! The model, before the code:
//!
//! * `threads` load-generator threads, each with its own tokio current-thread runtime
//!   (no work stealing, no cross-thread wake-ups); connection `i` belongs to thread
//!   `i % threads`, and the threads' histograms are merged at the end.
//! * Per connection, a writer and a reader share the connection's state. The writer
//!   sends a call when one of the connection's `inflight` permits is free (closed
//!   loop) or when the call's intended time has come (open loop); the reader matches
//!   answers to calls (by request id for RAC, in order otherwise) and records.
//! * Closed loop: latency runs from the moment the call is written to the moment its
//!   whole answer has been read.
//! * Open loop: every connection has a schedule of intended send times (constant
//!   spacing or Poisson arrivals, `rate / conns` per connection), fixed before the run.
//!   A call is still sent at most `inflight` at a time, but its latency runs from its
//!   *intended* time, so a server that stalls is charged for every call that should
//!   have been sent during the stall — wrk2's correction of coordinated omission.
//! * Only calls whose send (or intended) time falls in the measured window, after the
//!   warm-up, are recorded; calls in flight at the end are waited for up to `timeout`.
//! * A connection that fails (connect error, reset, timeout, a status that closes it)
//!   counts its calls in flight as errors and is opened again until the window ends.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, Semaphore};

use crate::hist::Latency;
use crate::target::Target;
use crate::wire::{self, Method, Reply, ReplyReader, Request};

/// Upper bound on calls in flight per connection (request ids per connection).
pub const INFLIGHT_MAX: usize = 4096;

/// Upper bound on connections per run.
pub const CONNS_MAX: usize = 10_000;

/// How calls are issued.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// Next call when an answer arrives.
    Closed,
    /// Calls at `rate` per second over all connections, latency from intended time.
    Open { rate: f64, arrivals: Arrivals },
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
pub enum Arrivals {
    Constant,
    Poisson,
}

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct Spec {
    pub target: Target,
    pub method: Method,
    pub size: usize,
    pub conns: usize,
    pub inflight: usize,
    pub threads: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub mode: Mode,
    /// HTTP only: a new connection per call, with connect / first byte / transfer split.
    pub new_conn: bool,
    /// Longest wait for an answer before the connection is given up.
    pub timeout: Duration,
    /// Seed of the Poisson schedules.
    pub seed: u64,
    /// Stop after this many calls sent in the measured window (over all connections);
    /// `duration` is then only an upper bound.
    pub calls: Option<u64>,
    /// RAC only: bind every connection to this tenant (`hello`) before calling.
    pub tenant: Option<Tenant>,
}

/// A RAC tenant configured at the node: name and token, sent in a `hello`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenant {
    pub name: String,
    pub token: String,
}

/// What a run (or one thread of it) recorded.
#[derive(Clone, Debug, Default)]
pub struct Recorded {
    pub total: Latency,
    /// Node-side queue time, execution time, and the rest (network + protocol).
    pub queue: Latency,
    pub exec: Latency,
    pub network: Latency,
    /// New connection per call: connect, request written → first byte, first → last byte.
    pub connect: Latency,
    pub first_byte: Latency,
    pub transfer: Latency,
    pub ok: u64,
    pub errors: BTreeMap<String, u64>,
    /// Calls sent in the measured window.
    pub sent: u64,
    pub request_payload_bytes: u64,
    pub response_body_bytes: u64,
    /// When the last measured answer arrived (runs with a call budget end when the
    /// budget is spent, not at the end of the window).
    pub last_answer: Option<Instant>,
    /// Length of the measured window, set by [`run`]: from the end of the warm-up to
    /// the end of the window, or to the last measured answer in runs with a call budget.
    pub measured: Duration,
}

impl Recorded {
    fn error(&mut self, class: String, calls: u64) {
        if calls > 0 {
            *self.errors.entry(class).or_default() += calls;
        }
    }

    /// Records a measured call's answer, which arrived at `now` for a call sent (or
    /// intended) at `since`.
    fn answer(&mut self, reply: &Reply, since: Instant, now: Instant, payload_len: u64) {
        match &reply.error {
            None => {
                let total_ns = (now - since).as_nanos() as u64;
                self.ok += 1;
                self.last_answer = Some(now);
                self.total.record(total_ns);
                self.request_payload_bytes += payload_len;
                self.response_body_bytes += reply.body_len;
                if let (Some(q), Some(e)) = (reply.queue_ns, reply.exec_ns) {
                    self.queue.record(q);
                    self.exec.record(e);
                    self.network.record(total_ns.saturating_sub(q + e));
                }
            }
            Some(class) => self.error(class.clone(), 1),
        }
    }

    pub fn merge(&mut self, other: &Recorded) {
        for (mine, theirs) in [
            (&mut self.total, &other.total),
            (&mut self.queue, &other.queue),
            (&mut self.exec, &other.exec),
            (&mut self.network, &other.network),
            (&mut self.connect, &other.connect),
            (&mut self.first_byte, &other.first_byte),
            (&mut self.transfer, &other.transfer),
        ] {
            mine.add(theirs);
        }
        self.ok += other.ok;
        self.sent += other.sent;
        self.request_payload_bytes += other.request_payload_bytes;
        self.response_body_bytes += other.response_body_bytes;
        self.last_answer = self.last_answer.max(other.last_answer);
        for (class, n) in &other.errors {
            *self.errors.entry(class.clone()).or_default() += n;
        }
    }
}

/// Runs `spec`; `progress` counts completed calls (for a progress bar).
pub fn run(spec: &Spec, progress: Arc<AtomicU64>) -> anyhow::Result<Recorded> {
    anyhow::ensure!(
        (1..=CONNS_MAX).contains(&spec.conns),
        "conns must be 1..={CONNS_MAX}"
    );
    anyhow::ensure!(
        (1..=INFLIGHT_MAX).contains(&spec.inflight),
        "inflight must be 1..={INFLIGHT_MAX}"
    );
    anyhow::ensure!(spec.threads >= 1, "threads must be at least 1");
    if let Mode::Open { rate, .. } = spec.mode {
        anyhow::ensure!(rate > 0.0 && rate.is_finite(), "rate must be positive");
    }
    if spec.new_conn {
        anyhow::ensure!(
            matches!(spec.target, Target::Http { .. }),
            "--new-conn is for HTTP targets"
        );
    }
    if spec.tenant.is_some() {
        anyhow::ensure!(
            matches!(spec.target, Target::Rac { .. }),
            "a tenant is for RAC targets"
        );
    }
    if let Some(n) = spec.calls {
        anyhow::ensure!(n >= 1, "the number of calls must be at least 1");
        anyhow::ensure!(!spec.new_conn, "a call budget is not for --new-conn runs");
    }
    let budget = Arc::new(AtomicU64::new(spec.calls.unwrap_or(u64::MAX)));
    let start = Instant::now() + Duration::from_millis(20);
    let window = Window {
        start,
        measure_from: start + spec.warmup,
        end: start + spec.warmup + spec.duration,
    };
    let threads = spec.threads.min(spec.conns);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let spec = spec.clone();
            let progress = progress.clone();
            let budget = budget.clone();
            std::thread::Builder::new()
                .name(format!("load-{t}"))
                .spawn(move || run_thread(&spec, t, threads, window, &progress, &budget))
                .expect("spawning a load thread")
        })
        .collect();
    let mut all = Recorded::default();
    for h in handles {
        all.merge(
            &h.join()
                .map_err(|_| anyhow::anyhow!("a load thread panicked"))??,
        );
    }
    all.measured = match (spec.calls, all.last_answer) {
        (Some(_), Some(last)) => last.saturating_duration_since(window.measure_from),
        _ => spec.duration,
    };
    Ok(all)
}

#[derive(Clone, Copy, Debug)]
struct Window {
    start: Instant,
    measure_from: Instant,
    end: Instant,
}

fn run_thread(
    spec: &Spec,
    thread: usize,
    threads: usize,
    window: Window,
    progress: &Arc<AtomicU64>,
    budget: &Arc<AtomicU64>,
) -> anyhow::Result<Recorded> {
    if let Target::InProcess { name } = &spec.target {
        return Ok(run_in_process(spec, name, window, progress, budget));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let recorded = Rc::new(RefCell::new(Recorded::default()));
    let local = tokio::task::LocalSet::new();
    for conn in (thread..spec.conns).step_by(threads) {
        let ctx = Ctx {
            spec: spec.clone(),
            window,
            recorded: recorded.clone(),
            progress: progress.clone(),
            budget: budget.clone(),
            schedule: Schedule::new(spec.mode, conn, spec.conns, spec.seed, window.start),
        };
        local.spawn_local(connection(ctx));
    }
    rt.block_on(local);
    drop(rt);
    Ok(Rc::try_unwrap(recorded)
        .expect("all connection tasks ended")
        .into_inner())
}

/// The compute floor: the kernel called in a loop, no network, no copy of the input.
fn run_in_process(
    spec: &Spec,
    name: &str,
    window: Window,
    progress: &AtomicU64,
    budget: &AtomicU64,
) -> Recorded {
    let catalog = accel::Catalog::builtin();
    let kernel = catalog
        .by_name(name)
        .expect("checked when the target was parsed");
    let input = wire::payload(spec.size);
    let params = [0u8; accel::PARAMS_LEN];
    let mut out = Vec::with_capacity(spec.size);
    let mut rec = Recorded::default();
    std::thread::sleep(window.start.saturating_duration_since(Instant::now()));
    loop {
        let t0 = Instant::now();
        if t0 >= window.end {
            return rec;
        }
        let result = kernel.run(&params, &input, &mut out);
        let t1 = Instant::now();
        progress.fetch_add(1, Ordering::Relaxed);
        if t0 < window.measure_from {
            continue;
        }
        if !take(budget) {
            return rec;
        }
        rec.sent += 1;
        rec.last_answer = Some(t1);
        match result {
            Ok(()) => {
                rec.ok += 1;
                rec.total.record((t1 - t0).as_nanos() as u64);
                rec.request_payload_bytes += input.len() as u64;
                rec.response_body_bytes += out.len() as u64;
            }
            Err(e) => rec.error(format!("kernel: {e}"), 1),
        }
    }
}

/// Intended send times of one connection (open loop), fixed before the run.
#[derive(Clone, Debug)]
pub struct Schedule {
    next: Option<Instant>,
    interval_ns: f64,
    poisson: Option<SplitMix64>,
    /// Fractional nanoseconds carried between constant intervals.
    offset_ns: f64,
    origin: Instant,
}

impl Schedule {
    /// Connection `conn` of `conns` gets `rate / conns` calls per second; constant
    /// schedules are staggered so that the connections together send evenly.
    pub fn new(mode: Mode, conn: usize, conns: usize, seed: u64, origin: Instant) -> Schedule {
        let Mode::Open { rate, arrivals } = mode else {
            return Schedule {
                next: None,
                interval_ns: 0.0,
                poisson: None,
                offset_ns: 0.0,
                origin,
            };
        };
        let interval_ns = 1e9 * conns as f64 / rate;
        let mut s = Schedule {
            next: None,
            interval_ns,
            poisson: (arrivals == Arrivals::Poisson)
                .then(|| SplitMix64(seed ^ (conn as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))),
            offset_ns: match arrivals {
                Arrivals::Constant => interval_ns * conn as f64 / conns as f64,
                Arrivals::Poisson => 0.0,
            },
            origin,
        };
        s.advance();
        s
    }

    /// The intended time of the next call (`None` in closed loop).
    pub fn peek(&self) -> Option<Instant> {
        self.next
    }

    pub fn advance(&mut self) {
        match &mut self.poisson {
            Some(rng) => self.offset_ns += -(1.0 - rng.next_f64()).ln() * self.interval_ns,
            None if self.next.is_some() => self.offset_ns += self.interval_ns,
            None => {}
        }
        self.next = Some(self.origin + Duration::from_nanos(self.offset_ns as u64));
    }
}

/// A small, fast, seedable generator for arrival times (not for anything secret).
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Takes one call from a budget shared by all connections; false when it is spent.
fn take(budget: &AtomicU64) -> bool {
    budget
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

struct Ctx {
    spec: Spec,
    window: Window,
    recorded: Rc<RefCell<Recorded>>,
    progress: Arc<AtomicU64>,
    /// Calls left to send in the measured window (`u64::MAX`: no budget).
    budget: Arc<AtomicU64>,
    schedule: Schedule,
}

impl Ctx {
    /// Whether the run is over for this connection: window ended or budget spent.
    fn over(&self) -> bool {
        Instant::now() >= self.window.end || self.budget.load(Ordering::Relaxed) == 0
    }

    fn progress(&self) -> &AtomicU64 {
        &self.progress
    }

    /// The next time to send, or `None` when the window is over.
    fn next_send(&mut self) -> Option<Option<Instant>> {
        if self.budget.load(Ordering::Relaxed) == 0 {
            return None;
        }
        match self.schedule.peek() {
            Some(t) if t >= self.window.end => None,
            Some(t) => {
                self.schedule.advance();
                Some(Some(t))
            }
            None if Instant::now() >= self.window.end => None,
            None => Some(None),
        }
    }
}

async fn connection(mut ctx: Ctx) {
    let payload = wire::payload(ctx.spec.size);
    let mut request = Request::new(
        &ctx.spec.target,
        ctx.spec.method,
        &payload,
        ctx.spec.new_conn,
    );
    let addr = match &ctx.spec.target {
        Target::Http { addr, .. } | Target::Rac { addr, .. } | Target::TcpEcho { addr } => {
            addr.clone()
        }
        Target::InProcess { .. } => unreachable!("in-process runs have no connections"),
    };
    if ctx.spec.new_conn {
        return new_conn_per_call(&mut ctx, &addr, &mut request).await;
    }
    while !ctx.over() {
        let stream = match tokio::time::timeout(ctx.spec.timeout, TcpStream::connect(&addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                failed(&ctx, format!("connect: {}", e.kind()), 1).await;
                continue;
            }
            Err(_) => {
                failed(&ctx, "connect: timeout".into(), 1).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let mut stream = stream;
        if let Some(tenant) = &ctx.spec.tenant {
            if let Err(class) = hello(&mut stream, tenant, ctx.spec.timeout).await {
                failed(&ctx, class, 1).await;
                continue;
            }
        }
        match session(&mut ctx, stream, &mut request).await {
            // Every call of this connection was sent and answered: its part of the run
            // is done, even if the window is not (an open-loop schedule can end early).
            Ok(()) => return,
            Err((class, lost)) => failed(&ctx, class, lost).await,
        }
    }
}

/// Counts `calls` lost to a failure, and waits a little before the next attempt so a
/// dead server does not turn the load generator into a busy loop.
async fn failed(ctx: &Ctx, class: String, calls: u64) {
    ctx.recorded.borrow_mut().error(class, calls);
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// Calls in flight on one connection. Every request id is either free or in flight:
/// `free_ids` and `order` together hold each of `0..inflight` once.
struct InFlight {
    /// Send (closed loop) or intended (open loop) time, by request id.
    since: Vec<Option<Instant>>,
    free_ids: Vec<u32>,
    /// Request ids in send order, for protocols that answer in order.
    order: VecDeque<u32>,
    writer_done: bool,
}

impl InFlight {
    fn new(inflight: usize) -> InFlight {
        InFlight {
            since: vec![None; inflight],
            free_ids: (0..inflight as u32).rev().collect(),
            order: VecDeque::with_capacity(inflight),
            writer_done: false,
        }
    }

    /// Takes a free request id for a call sent (or intended) at `since`.
    fn sent(&mut self, since: Instant) -> u32 {
        let id = self.free_ids.pop().expect("a permit means a free id");
        self.since[id as usize] = Some(since);
        self.order.push_back(id);
        debug_assert_eq!(self.free_ids.len() + self.order.len(), self.since.len());
        id
    }

    /// The call an answer belongs to (by its request id, or the oldest for protocols
    /// that answer in order): frees its id and returns its send (or intended) time.
    fn answered(&mut self, request_id: Option<u32>) -> Result<Instant, String> {
        let id = match request_id {
            Some(id) => {
                let at = self
                    .order
                    .iter()
                    .position(|&i| i == id)
                    .ok_or_else(|| format!("answer to unknown request id {id}"))?;
                self.order.remove(at);
                id
            }
            None => self.order.pop_front().expect("a call is in flight"),
        };
        let since = self.since[id as usize].take().expect("in flight");
        self.free_ids.push(id);
        debug_assert_eq!(self.free_ids.len() + self.order.len(), self.since.len());
        Ok(since)
    }

    /// Calls in flight that were to be measured (sent in the measured window): those
    /// sent before it count as lost to a failure only if they were to be measured.
    fn lost(&self, measure_from: Instant) -> u64 {
        let measured = |id: &&u32| self.since[**id as usize].is_some_and(|t| t >= measure_from);
        self.order.iter().filter(measured).count() as u64
    }
}

/// What the writer and the reader of one connection's [`session`] share.
struct Shared {
    state: RefCell<InFlight>,
    /// One permit per call that may be in flight; the reader gives one back per answer.
    permits: Semaphore,
    /// Wakes the reader when a call was sent, or the writer is done.
    sent: Notify,
    window: Window,
    timeout: Duration,
    recorded: Rc<RefCell<Recorded>>,
    progress: Arc<AtomicU64>,
    payload_len: u64,
}

/// One connection's life: returns when the window is over and every call is answered,
/// or with the error class and the number of calls lost.
async fn session(
    ctx: &mut Ctx,
    stream: TcpStream,
    request: &mut Request,
) -> Result<(), (String, u64)> {
    let inflight = ctx.spec.inflight;
    let shared = Shared {
        state: RefCell::new(InFlight::new(inflight)),
        permits: Semaphore::new(inflight),
        sent: Notify::new(),
        window: ctx.window,
        timeout: ctx.spec.timeout,
        recorded: ctx.recorded.clone(),
        progress: ctx.progress.clone(),
        payload_len: request.payload_len() as u64,
    };
    let (mut rd, mut wr) = stream.into_split();
    let mut replies = ReplyReader::new(&ctx.spec.target, request.payload_len(), false);
    let mut timer = match ctx.spec.mode {
        Mode::Open { .. } => Some(Timer::new().map_err(|e| (format!("timer: {}", e.kind()), 0))?),
        Mode::Closed => None,
    };
    let writer = write_calls(ctx, &shared, &mut wr, request, timer.as_mut());
    let reader = read_replies(&shared, &mut rd, &mut replies);
    tokio::pin!(writer);
    tokio::pin!(reader);
    // The writer is polled first. A call whose answer the reader has just taken frees
    // a permit, which wakes this task again; its next call is then written when the
    // task runs next, after the other connections with answers ready on this thread
    // have read theirs: the answers of one wake-up are read, then the next calls
    // written, as wrk (and an epoll loop that writes on the next writable event)
    // does. Polled in random order (tokio's default), half of the connections wrote
    // in between the others' reads and the median latency at 16 connections was a
    // third above wrk's with the same mean (see docs/benchmarks.md).
    let result = tokio::select! {
        biased;
        w = &mut writer => match w {
            Ok(()) => reader.await,
            Err(e) => Err(e),
        },
        r = &mut reader => r,
    };
    result.map_err(|class| {
        (
            class,
            shared.state.borrow().lost(shared.window.measure_from),
        )
    })
}

/// The writing half of a [`session`]: sends each call once one of the connection's
/// permits is free and (open loop) its intended time has come, until the window is
/// over or the call budget spent.
async fn write_calls(
    ctx: &mut Ctx,
    shared: &Shared,
    wr: &mut OwnedWriteHalf,
    request: &mut Request,
    mut timer: Option<&mut Timer>,
) -> Result<(), String> {
    let window = shared.window;
    while let Some(intended) = ctx.next_send() {
        if let (Some(t), Some(timer)) = (intended, timer.as_mut()) {
            timer
                .sleep_until(t)
                .await
                .map_err(|e| format!("timer: {}", e.kind()))?;
        }
        shared
            .permits
            .acquire()
            .await
            .expect("never closed")
            .forget();
        let since = intended.unwrap_or_else(Instant::now);
        if intended.is_none() && since >= window.end {
            break;
        }
        if since >= window.measure_from {
            if !take(&ctx.budget) {
                shared.permits.add_permits(1);
                break;
            }
            shared.recorded.borrow_mut().sent += 1;
        }
        let id = shared.state.borrow_mut().sent(since);
        shared.sent.notify_one();
        if let Err(e) = wr.write_all(request.bytes_for(id)).await {
            return Err(format!("write: {}", e.kind()));
        }
    }
    shared.state.borrow_mut().writer_done = true;
    shared.sent.notify_one();
    Ok(())
}

/// The reading half of a [`session`]: matches each answer to its call and records
/// it, until the writer is done and every call is answered; fails when no answer
/// comes within the timeout of the last progress.
async fn read_replies(
    shared: &Shared,
    rd: &mut OwnedReadHalf,
    replies: &mut ReplyReader,
) -> Result<(), String> {
    // A reply must come within `timeout` of the last progress. One sleep serves the
    // whole session and is re-armed only when it fires early: arming a timer for
    // every reply cost the load generator enough CPU to show in its latencies at
    // 16 connections (its core is the bottleneck there, as wrk's is).
    let timeout = shared.timeout;
    let mut last_progress = Instant::now();
    let stall = tokio::time::sleep(timeout);
    tokio::pin!(stall);
    loop {
        let idle = {
            let s = shared.state.borrow();
            if s.order.is_empty() && s.writer_done {
                return Ok(());
            }
            s.order.is_empty()
        };
        if idle {
            shared.sent.notified().await;
            // Waiting for the next call to be sent is not a stalled server.
            last_progress = Instant::now();
            continue;
        }
        let next = replies.next(rd);
        tokio::pin!(next);
        let reply = loop {
            tokio::select! {
                biased;
                r = &mut next => break r,
                _ = &mut stall => {
                    let due = last_progress + timeout;
                    if Instant::now() >= due {
                        return Err("timeout".to_owned());
                    }
                    stall.as_mut().reset(due.into());
                }
            }
        };
        let reply = reply.map_err(|e| format!("read: {}", e.kind()))?;
        let now = Instant::now();
        last_progress = now;
        let since = shared.state.borrow_mut().answered(reply.request_id)?;
        shared.permits.add_permits(1);
        shared.progress.fetch_add(1, Ordering::Relaxed);
        if since >= shared.window.measure_from {
            let mut r = shared.recorded.borrow_mut();
            r.answer(&reply, since, now, shared.payload_len);
        }
        if reply.closes {
            return Err("closed by the server".to_owned());
        }
    }
}

/// Open loop: a wait until an intended send time, precise to a few microseconds.
///
/// Tokio's own timer has a resolution of one millisecond (a sleep ends on the next
/// millisecond tick), which in open loop would be charged to the server as up to a
/// millisecond of latency per call. On Linux this is a `timerfd` polled by the same
/// runtime: the kernel's high-resolution timer wakes the load thread at the intended
/// time, with no extra thread and no busy waiting.
struct Timer {
    #[cfg(target_os = "linux")]
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
}

impl Timer {
    #[cfg(target_os = "linux")]
    fn new() -> std::io::Result<Timer> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain system call; the descriptor is owned by the OwnedFd below.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: the OwnedFd is moved into the AsyncFd and stays open as long as it.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .map_err(std::io::Error::from)?;
        Ok(Timer { fd })
    }

    #[cfg(not(target_os = "linux"))]
    fn new() -> std::io::Result<Timer> {
        Ok(Timer {})
    }

    #[cfg(target_os = "linux")]
    async fn sleep_until(&mut self, t: Instant) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let Some(wait) = t
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        else {
            return Ok(());
        };
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let spec = libc::itimerspec {
            it_interval: zero,
            it_value: libc::timespec {
                tv_sec: wait.as_secs() as libc::time_t,
                tv_nsec: wait.subsec_nanos() as libc::c_long,
            },
        };
        let fd = self.fd.get_ref().as_raw_fd();
        // SAFETY: fd is a timerfd owned by self; spec outlives the call.
        if unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        loop {
            let mut guard = self.fd.readable().await?;
            let read = guard.try_io(|inner| {
                let mut expirations = [0u8; 8];
                // SAFETY: reads at most 8 bytes into a buffer of 8 bytes.
                let n = unsafe {
                    libc::read(
                        inner.get_ref().as_raw_fd(),
                        expirations.as_mut_ptr().cast(),
                        expirations.len(),
                    )
                };
                if n < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match read {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    async fn sleep_until(&mut self, t: Instant) -> std::io::Result<()> {
        tokio::time::sleep_until(t.into()).await;
        Ok(())
    }
}

/// Binds a fresh RAC connection to `tenant`: sends `hello` and waits for its result.
async fn hello(stream: &mut TcpStream, tenant: &Tenant, timeout: Duration) -> Result<(), String> {
    use tokio::io::AsyncReadExt;
    let payload = rac_proto::ControlRequest::Hello {
        tenant: tenant.name.clone(),
        token: Some(tenant.token.clone()),
    }
    .to_payload();
    let len = u32::try_from(payload.len()).map_err(|_| "hello: tenant name too long")?;
    let mut bytes = rac_proto::CallHeader::control(0, len).encode().to_vec();
    bytes.extend_from_slice(&payload);
    let exchange = async {
        stream.write_all(&bytes).await?;
        let mut head = [0u8; rac_proto::HEADER_LEN];
        stream.read_exact(&mut head).await?;
        let header =
            match rac_proto::ResultHeader::decode(&head, rac_proto::CONTROL_PAYLOAD_LEN_MAX) {
                Ok(rac_proto::Decoded::Complete(h, _)) => h,
                _ => return Err(std::io::Error::other("bad control result header")),
            };
        let mut body = vec![0; header.payload_len as usize];
        stream.read_exact(&mut body).await?;
        Ok((header, body))
    };
    let (header, body) = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| "hello: timeout".to_owned())?
        .map_err(|e| format!("hello: {}", e.kind()))?;
    if !header.status.is_ok() {
        return Err(format!(
            "hello: rac {} ({})",
            header.status.name(),
            String::from_utf8_lossy(&body)
        ));
    }
    Ok(())
}

/// HTTP with a new connection per call: connect, request, answer, close, one call at
/// a time per connection, with the client-side split recorded.
async fn new_conn_per_call(ctx: &mut Ctx, addr: &str, request: &mut Request) {
    let payload_len = request.payload_len() as u64;
    while let Some(intended) = ctx.next_send() {
        if let Some(t) = intended {
            tokio::time::sleep_until(t.into()).await;
        }
        let since = intended.unwrap_or_else(Instant::now);
        if intended.is_none() && since >= ctx.window.end {
            return;
        }
        let measured = since >= ctx.window.measure_from;
        let one = async {
            let stream = TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connect: {}", e.kind()))?;
            let connected = Instant::now();
            let _ = stream.set_nodelay(true);
            let (mut rd, mut wr) = stream.into_split();
            wr.write_all(request.bytes_for(0))
                .await
                .map_err(|e| format!("write: {}", e.kind()))?;
            let mut reader = ReplyReader::new(&ctx.spec.target, 0, true);
            let reply = reader
                .next(&mut rd)
                .await
                .map_err(|e| format!("read: {}", e.kind()))?;
            Ok::<_, String>((connected, reply, Instant::now()))
        };
        let outcome = tokio::time::timeout(ctx.spec.timeout, one)
            .await
            .unwrap_or_else(|_| Err("timeout".into()));
        ctx.progress().fetch_add(1, Ordering::Relaxed);
        if !measured {
            continue;
        }
        let mut r = ctx.recorded.borrow_mut();
        r.sent += 1;
        match outcome {
            Ok((connected, reply, done)) if reply.error.is_none() => {
                let first = reply.first_byte.expect("tracked");
                r.ok += 1;
                r.total.record((done - since).as_nanos() as u64);
                r.connect.record((connected - since).as_nanos() as u64);
                r.first_byte.record((first - connected).as_nanos() as u64);
                r.transfer.record((done - first).as_nanos() as u64);
                r.request_payload_bytes += payload_len;
                r.response_body_bytes += reply.body_len;
            }
            Ok((_, reply, _)) => r.error(reply.error.expect("an error"), 1),
            Err(class) => r.error(class, 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(rate: f64, arrivals: Arrivals) -> Mode {
        Mode::Open { rate, arrivals }
    }

    #[test]
    fn constant_schedules_interleave_connections_evenly() {
        let origin = Instant::now();
        let mut times: Vec<Duration> = Vec::new();
        for conn in 0..4 {
            let mut s = Schedule::new(open(1000.0, Arrivals::Constant), conn, 4, 1, origin);
            for _ in 0..5 {
                times.push(s.peek().unwrap() - origin);
                s.advance();
            }
        }
        times.sort();
        for (k, t) in times.iter().enumerate() {
            let want = Duration::from_millis(k as u64);
            assert!(
                t.abs_diff(want) < Duration::from_micros(1),
                "call {k} at {t:?}"
            );
        }
    }

    #[test]
    fn poisson_schedules_have_the_asked_rate_and_exponential_gaps() {
        let origin = Instant::now();
        let mut s = Schedule::new(open(10_000.0, Arrivals::Poisson), 3, 1, 42, origin);
        let n = 100_000;
        let mut gaps = Vec::with_capacity(n);
        let mut last = origin;
        for _ in 0..n {
            let t = s.peek().unwrap();
            gaps.push((t - last).as_nanos() as f64);
            last = t;
            s.advance();
        }
        let mean = gaps.iter().sum::<f64>() / n as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n as f64;
        assert!((mean - 100_000.0).abs() < 2_000.0, "mean gap {mean} ns");
        // An exponential distribution's standard deviation equals its mean.
        assert!(
            (var.sqrt() / mean - 1.0).abs() < 0.03,
            "cv {}",
            var.sqrt() / mean
        );
    }

    #[test]
    fn closed_loop_has_no_schedule() {
        let s = Schedule::new(Mode::Closed, 0, 1, 0, Instant::now());
        assert_eq!(s.peek(), None);
    }
}
