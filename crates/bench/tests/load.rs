//! The load generator against small in-process servers: HTTP (keep-alive, a stall,
//! error statuses, one connection per call), a RAC node stand-in that answers out of
//! order, and a TCP echo server.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use netaccel_bench::load::{self, Arrivals, Mode, Recorded, Spec};
use netaccel_bench::target::Target;
use netaccel_bench::wire::Method;

const MS: u64 = 1_000_000;

fn spec(url: &str, mode: Mode, duration_ms: u64) -> Spec {
    Spec {
        target: Target::parse(url).unwrap(),
        method: Method::Get,
        size: 64,
        conns: 1,
        inflight: 1,
        threads: 1,
        duration: Duration::from_millis(duration_ms),
        warmup: Duration::from_millis(100),
        mode,
        new_conn: false,
        timeout: Duration::from_secs(2),
        seed: 7,
        calls: None,
        tenant: None,
    }
}

/// Equal at the histogram's precision (3 significant digits).
fn about(got: u64, want: u64) -> bool {
    got.abs_diff(want) <= want / 1000 + 1
}

fn run(spec: &Spec) -> Recorded {
    load::run(spec, Arc::new(AtomicU64::new(0))).unwrap()
}

/// What the HTTP test server does with request number `n` (from 0, over all
/// connections): a status and a pause before answering.
type Plan = Arc<dyn Fn(u64) -> (u16, Duration) + Send + Sync>;

/// A blocking HTTP/1.1 server, one thread per connection; requests are GETs or
/// bodies with Content-Length; `Connection: close` is honoured.
fn http_server(plan: Plan) -> u16 {
    http_server_counting_connections(plan).0
}

/// [`http_server`], and the number of connections it accepted so far.
fn http_server_counting_connections(plan: Plan) -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicU64::new(0));
    let accepted = Arc::new(AtomicU64::new(0));
    let accepted_seen = accepted.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            accepted.fetch_add(1, Ordering::SeqCst);
            let (plan, count) = (plan.clone(), count.clone());
            std::thread::spawn(move || serve_http(conn, &*plan, &count));
        }
    });
    (port, accepted_seen)
}

fn serve_http(
    mut conn: TcpStream,
    plan: &(dyn Fn(u64) -> (u16, Duration) + Send + Sync),
    count: &AtomicU64,
) {
    conn.set_nodelay(true).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let body_len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        if buf.len() < head_end + 4 + body_len {
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        }
        let body: Vec<u8> = buf[head_end + 4..head_end + 4 + body_len].to_ascii_uppercase();
        buf.drain(..head_end + 4 + body_len);
        let (status, pause) = plan(count.fetch_add(1, Ordering::SeqCst));
        std::thread::sleep(pause);
        let close = head.contains("connection: close");
        let answer = format!(
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nX-Netaccel-Queue-Ns: 1000\r\nX-Netaccel-Exec-Ns: 2000\r\n{}\r\n",
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        let mut out = answer.into_bytes();
        out.extend_from_slice(&body);
        if conn.write_all(&out).is_err() || close {
            return;
        }
    }
}

/// A server that stalls 100 ms once, 300 ms into the run: closed loop hides the
/// stall in the throughput (the one call that waited is one of thousands); open loop
/// charges every call that was due during the stall, so it reaches the p99.
#[test]
fn a_100ms_stall_shows_in_the_open_loop_p99_not_only_in_throughput() {
    let started: Arc<Mutex<Option<Instant>>> = Arc::default();
    let stalled = Arc::new(AtomicU64::new(0));
    let plan: Plan = {
        let (started, stalled) = (started.clone(), stalled.clone());
        Arc::new(move |_| {
            let t0 = *started.lock().unwrap().get_or_insert_with(Instant::now);
            if t0.elapsed() > Duration::from_millis(400) && stalled.swap(1, Ordering::SeqCst) == 0 {
                return (200, Duration::from_millis(100));
            }
            (200, Duration::ZERO)
        })
    };
    let port = http_server(plan);
    let url = format!("http://127.0.0.1:{port}/health");

    let open = run(&spec(
        &url,
        Mode::Open {
            rate: 2000.0,
            arrivals: Arrivals::Constant,
        },
        1000,
    ));
    assert_eq!(stalled.load(Ordering::SeqCst), 1, "the server stalled once");
    let s = open.total.summary();
    assert!(open.errors.is_empty(), "{:?}", open.errors);
    assert!(open.ok >= 1900, "open loop sent its schedule: {}", open.ok);
    assert!(
        s.p99_ns >= 50 * MS,
        "open-loop p99 {} µs should carry the stall",
        s.p99_ns / 1000
    );
    assert!(s.max_ns >= 95 * MS, "{s:?}");

    // The same server, closed loop: the stall is one slow call among thousands.
    *started.lock().unwrap() = None;
    stalled.store(0, Ordering::SeqCst);
    let closed = run(&spec(&url, Mode::Closed, 1000));
    assert_eq!(stalled.load(Ordering::SeqCst), 1);
    let s = closed.total.summary();
    assert!(closed.ok > 1000, "{}", closed.ok);
    assert!(s.max_ns >= 95 * MS, "{s:?}");
    assert!(s.p99_ns < 50 * MS, "closed-loop p99 {} µs", s.p99_ns / 1000);
}

#[test]
fn pipelined_http_posts_record_the_server_split_and_count_error_statuses() {
    let port = http_server(Arc::new(|n| {
        (if n % 10 == 9 { 503 } else { 200 }, Duration::ZERO)
    }));
    let mut s = spec(
        &format!("http://127.0.0.1:{port}/v1/fn/to_uppercase"),
        Mode::Closed,
        400,
    );
    s.method = Method::Post;
    s.size = 4096;
    s.conns = 2;
    s.inflight = 4;
    let r = run(&s);
    assert!(r.ok > 50, "{}", r.ok);
    let errors = r.errors.get("http 503").copied().unwrap_or(0);
    assert!(
        errors * 12 > r.ok && errors * 8 < r.ok,
        "one in ten is 503: {errors} of {}",
        r.ok + errors
    );
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert!(about(r.exec.summary().p50_ns, 2000));
    assert!(about(r.queue.summary().p50_ns, 1000));
    assert_eq!(r.network.count(), r.ok);
    assert_eq!(r.response_body_bytes, r.ok * 4096);
}

#[test]
fn new_connection_per_call_splits_connect_first_byte_and_transfer() {
    let port = http_server(Arc::new(|_| (200, Duration::ZERO)));
    let mut s = spec(
        &format!("http://127.0.0.1:{port}/health"),
        Mode::Closed,
        300,
    );
    s.new_conn = true;
    let r = run(&s);
    assert!(r.ok > 20, "{}", r.ok);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(
        (r.connect.count(), r.first_byte.count(), r.transfer.count()),
        (r.ok, r.ok, r.ok)
    );
    let mean = |h: &netaccel_bench::hist::Latency| h.summary().mean_ns;
    assert!(mean(&r.connect) + mean(&r.first_byte) + mean(&r.transfer) <= mean(&r.total) * 1.01);
}

/// A RAC node stand-in: answers every call that arrived in one read, in reverse order,
/// with fixed queue and exec times.
fn rac_server() -> u16 {
    use rac_proto::{CallHeader, Decoded, ResultHeader, Status, HEADER_LEN};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                conn.set_nodelay(true).unwrap();
                let mut buf = Vec::new();
                let mut chunk = [0u8; 65536];
                loop {
                    match conn.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    let mut answers = Vec::new();
                    while let Ok(Decoded::Complete(call, _)) = CallHeader::decode(&buf, 1 << 24) {
                        let end = HEADER_LEN + call.payload_len as usize;
                        if buf.len() < end {
                            break;
                        }
                        let out = buf[HEADER_LEN..end].to_ascii_uppercase();
                        buf.drain(..end);
                        let mut result = ResultHeader::answer(&call, Status::Ok, out.len() as u32);
                        (result.slot_id, result.queue_ns, result.exec_ns) = (0, 1500, 2500);
                        let mut bytes = result.encode().to_vec();
                        bytes.extend_from_slice(&out);
                        answers.push(bytes);
                    }
                    for a in answers.iter().rev() {
                        if conn.write_all(a).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    port
}

#[test]
fn rac_pipelined_calls_are_matched_by_request_id() {
    let port = rac_server();
    let mut s = spec(
        &format!("rac://127.0.0.1:{port}/to_uppercase"),
        Mode::Closed,
        400,
    );
    s.method = Method::Post;
    s.conns = 2;
    s.inflight = 8;
    s.threads = 2;
    let r = run(&s);
    assert!(r.ok > 100, "{}", r.ok);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(about(r.exec.summary().p50_ns, 2500));
    assert!(about(r.queue.summary().p50_ns, 1500));
    assert_eq!(r.response_body_bytes, r.request_payload_bytes);
}

#[test]
fn tcp_echo_and_in_process_targets() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut chunk = [0u8; 65536];
                while let Ok(n @ 1..) = conn.read(&mut chunk) {
                    if conn.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let mut s = spec(&format!("tcp-echo://127.0.0.1:{port}"), Mode::Closed, 300);
    s.size = 4096;
    let r = run(&s);
    assert!(r.ok > 20 && r.errors.is_empty(), "{} {:?}", r.ok, r.errors);
    assert_eq!(r.response_body_bytes, r.ok * 4096);

    let r = run(&spec("inproc://to_uppercase", Mode::Closed, 200));
    assert!(r.ok > 1000, "{}", r.ok);
    assert_eq!(r.response_body_bytes, r.ok * 64);
}

#[test]
fn a_dead_target_counts_connect_errors_and_ends_on_time() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t0 = Instant::now();
    let r = run(&spec(
        &format!("http://127.0.0.1:{port}/"),
        Mode::Closed,
        200,
    ));
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(r.ok, 0);
    assert!(
        r.errors.keys().all(|k| k.starts_with("connect")),
        "{:?}",
        r.errors
    );
}

#[test]
fn a_call_budget_sends_exactly_that_many_calls_and_counts_their_time() {
    let port = rac_server();
    let mut s = spec(
        &format!("rac://127.0.0.1:{port}/echo"),
        Mode::Closed,
        30_000,
    );
    s.method = Method::Post;
    s.conns = 2;
    s.inflight = 4;
    s.calls = Some(5_000);
    s.tenant = Some(load::Tenant {
        name: "heavy".into(),
        token: "t".into(),
    });
    let r = run(&s);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!((r.sent, r.ok), (5_000, 5_000));
    assert!(r.measured < Duration::from_secs(20), "{:?}", r.measured);
    assert!(!r.measured.is_zero());

    let mut s = spec("inproc://echo", Mode::Closed, 30_000);
    s.calls = Some(1_000);
    let r = run(&s);
    assert_eq!((r.sent, r.ok), (1_000, 1_000));
    assert!(r.measured < Duration::from_secs(5), "{:?}", r.measured);
}

/// Open loop at a rate so low that most connections have no call left before the
/// window ends: each opens once and waits. (A connection whose schedule was done used
/// to reconnect at once, again and again until the window ended: 64 connections at
/// 19 calls/s opened thousands of connections a second and left the server with tens
/// of thousands in TIME-WAIT.)
#[test]
fn an_open_loop_connection_with_no_call_left_opens_once_and_waits() {
    let (port, accepted) = http_server_counting_connections(Arc::new(|_| (200, Duration::ZERO)));
    let mut s = spec(
        &format!("http://127.0.0.1:{port}/health"),
        Mode::Open {
            rate: 4.0,
            arrivals: Arrivals::Poisson,
        },
        1000,
    );
    s.conns = 16;
    let r = run(&s);
    assert_eq!(r.ok, r.sent, "errors: {:?}", r.errors);
    let opened = accepted.load(Ordering::SeqCst);
    assert!(opened <= 16, "{opened} connections opened for 16");
}
