//! Network threads (issue 15, item 4): each network thread has its own SO_REUSEPORT
//! listener and serves the connections the kernel hands it, so a call that holds one
//! thread (a long call run inline on it) stalls only the connections of that thread.
//! The kernel spreads connections by a hash of their addresses, which a client cannot
//! aim; so the test opens fresh connections until one lands on the free thread, and
//! shows that one answered while the long call still runs, and the ones that landed
//! on the held thread answered once it ends. Each thread's accepts are counted in
//! `netaccel_connections_accepted_total{thread}`.

mod common;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

/// How long the held thread's call should last: long beside a probe (milliseconds),
/// short for the suite. Each probe that lands on the held thread costs PROBE_WAIT, and
/// the kernel's hash sends each to either thread: at 1.5 s a run of four or five such
/// probes (1 in 16–32) used up the hold and the test failed once under CI; at 4 s it
/// takes a run of about thirteen.
const HOLD_TARGET: Duration = Duration::from_millis(4000);
/// A probe not answered within this has landed on the held thread.
const PROBE_WAIT: Duration = Duration::from_millis(300);

fn request(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// Reads one Content-Length framed response; `Err` (timed out) when it does not come
/// within the stream's read timeout. Bytes already read are kept in `buf`.
fn response(s: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<Resp> {
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= end + 4 + len {
                let rest = buf.split_off(end + 4 + len);
                let whole = std::mem::replace(buf, rest);
                return Ok(parse_responses(&whole).remove(0));
            }
        }
        match s.read(&mut chunk)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn connect(addr: SocketAddr, wait: Duration) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    s
}

/// One matmul of size `n` (inputs of ones) on a new connection; its duration.
fn matmul(addr: SocketAddr, n: usize) -> (Resp, Duration) {
    let body = f32_bytes(&vec![1.0; 2 * n * n]);
    let mut s = connect(addr, Duration::from_secs(120));
    let sent = Instant::now();
    s.write_all(&request("POST", &format!("/v1/fn/matmul?n={n}"), &body))
        .unwrap();
    let r = response(&mut s, &mut Vec::new()).unwrap();
    (r, sent.elapsed())
}

#[test]
fn a_long_inline_call_holds_only_its_own_network_thread() {
    // Every call runs inline on its network thread (the slot idle), however large.
    let node = TestNode::start(
        "io_threads = 2\ninline_work_max = 9000000000000000000\n\
         [[slots]]\naccelerator = \"matmul\"\n[[slots]]\naccelerator = \"echo\"\n",
    );
    let addr = node.addr;

    // A matmul sized to last about HOLD_TARGET on this machine and build (its time
    // grows as n³).
    // The faster of two calibration calls: the first one also pays for warming up.
    let (r, first) = matmul(addr, 128);
    assert_eq!(r.status, 200);
    let (r, second) = matmul(addr, 128);
    assert_eq!(r.status, 200);
    let took = first.min(second);
    let scale = (HOLD_TARGET.as_secs_f64() / took.as_secs_f64().max(1e-4)).cbrt();
    let n = ((128.0 * scale) as usize).clamp(128, 2048) / 16 * 16;

    let done = Arc::new(AtomicBool::new(false));
    let holder = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let answer = matmul(addr, n);
            done.store(true, Ordering::SeqCst);
            answer
        })
    };

    // Fresh connections until one reports the matmul slot busy (so the long call is
    // running, inline on the other thread) and answers an echo while the long call
    // still runs. Connections that do not answer in time landed on the held thread.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut stalled = Vec::new();
    let mut served_meanwhile = None;
    while served_meanwhile.is_none() && !done.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "no probe answered within 60 s");
        let mut s = connect(addr, PROBE_WAIT);
        let mut buf = Vec::new();
        s.write_all(&request("GET", "/v1/slots/0", b"")).unwrap();
        let state = match response(&mut s, &mut buf) {
            Ok(r) => r.json()["state"].as_str().unwrap_or_default().to_string(),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                stalled.push((s, buf));
                continue;
            }
            Err(e) => panic!("probe failed: {e}"),
        };
        if state != "busy" {
            // The long call has not started yet.
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let asked = Instant::now();
        s.write_all(&request("POST", "/v1/fn/echo", b"meanwhile"))
            .unwrap();
        let r = response(&mut s, &mut buf).expect("the echo on the free thread is answered");
        let latency = asked.elapsed();
        if !done.load(Ordering::SeqCst) {
            assert_eq!(
                (r.status, r.body.as_slice()),
                (200, b"meanwhile".as_slice())
            );
            served_meanwhile = Some(latency);
        }
    }
    let latency = served_meanwhile.expect(
        "no connection was served while the long call ran: its thread held the others too (or the call was too short to catch; HOLD_TARGET)",
    );

    let (r, held) = holder.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(f32s(&r.body), vec![n as f32; n * n]);
    assert!(
        latency < held,
        "an echo beside the long call took {latency:?}, the long call {held:?}"
    );
    // The probes that landed on the held thread were delayed, not lost.
    for (s, buf) in &mut stalled {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let r = response(s, buf).expect("a stalled probe is answered after the long call");
        assert_eq!(r.status, 200);
    }
    eprintln!(
        "matmul n={n} held its thread {held:?}; an echo on the other thread took {latency:?}; {} probe(s) landed on the held thread",
        stalled.len()
    );

    // Both threads accepted connections, and the counts add up to what was opened
    // (the calibration, the long call, the probes, and this /metrics request).
    let text = ureq::get(&node.url("/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    let per_thread: Vec<f64> = (0..2)
        .map(|t| {
            let prefix = format!("netaccel_connections_accepted_total{{thread=\"{t}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .map_or(0.0, |v| v.parse().unwrap())
        })
        .collect();
    assert!(
        per_thread.iter().all(|&c| c >= 1.0),
        "connections per thread {per_thread:?}"
    );
    assert!(
        per_thread.iter().sum::<f64>() >= (3 + stalled.len()) as f64,
        "connections per thread {per_thread:?}"
    );
}
