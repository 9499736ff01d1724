//! SIGTERM under twice an accelerator's capacity (issue 15): the node stops accepting
//! connections, answers every call it accepted — those that finish within
//! `drain_timeout_ms` with their result, the others `UNAVAILABLE` (HTTP 503 with
//! `Retry-After`) — and exits 0 within `drain_timeout_ms` plus the one-second answer
//! grace.

mod common;
mod overload_clients;

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel::FAULT_ID;
use common::*;
use overload_clients::*;
use rac_proto::Status;

const DRAIN_MS: u64 = 1500;

#[test]
fn sigterm_under_twice_the_capacity_answers_every_accepted_call_and_exits_zero() {
    // Echo holds its slot 5 ms a call: 200 calls/s. 24 clients each offering one call
    // per 60 ms is 400/s. The fault slot gets two calls that never finish.
    let mut node = TestNode::start(&format!(
        "fault_injection = true\nkernel_timeout_ms = 0\ndrain_timeout_ms = {DRAIN_MS}\n\
         simulated_exec_us = 5000\nqueue_depth_max = 16\ntenant_queue_depth_max = 16\n\
         [[slots]]\naccelerator = \"echo\"\n[[slots]]\naccelerator = \"fault\"\n"
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let interval = Duration::from_millis(60);
    let mut clients = Vec::new();
    let mut tallies = Vec::new();
    for (front, addr) in [
        (Front::Http, node.addr),
        (Front::V2, node.addr),
        (Front::Rac, node.rac_addr),
    ] {
        let (handles, tally) = drive(front, addr, 8, interval, Arc::clone(&stop));
        clients.extend(handles);
        tallies.push(tally);
    }
    wait_until(
        "every front end has calls answered and refused BUSY",
        || tallies.iter().all(|t| t.reached(20, 5)),
    );

    // Two calls that cannot finish: one runs forever, one waits behind it.
    let addr = node.addr;
    let hung_http = std::thread::spawn(move || {
        let mut c = Http::connect(addr).unwrap();
        c.call("/v1/fn/fault", b"hang")
    });
    let mut hung_rac = Rac::connect(node.rac_addr).unwrap();
    wait_until("the hung call runs", || {
        node.get_json("/v1/slots/1")["state"] == "busy"
    });
    hung_rac.send(FAULT_ID, 42, b"behind").unwrap();
    wait_until("a call waits behind it", || {
        node.get_json("/v1/slots/1")["queue_depth"] == 1
    });

    let term = Instant::now();
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(node.pid(), libc::SIGTERM) };
    // New connections are refused while the node still drains (the hung calls keep
    // it until the drain deadline).
    wait_until("new connections are refused", || {
        TcpStream::connect(node.addr).is_err() && TcpStream::connect(node.rac_addr).is_err()
    });
    assert!(
        node.child.try_wait().unwrap().is_none(),
        "the node exited before its drain deadline"
    );
    let status = loop {
        if let Some(status) = node.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            term.elapsed() < Duration::from_secs(30),
            "the node did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let exited = term.elapsed();
    assert!(status.success(), "exit status {status}");
    eprintln!("exited {exited:?} after SIGTERM (drain_timeout_ms = {DRAIN_MS})");
    assert!(
        exited >= Duration::from_millis(DRAIN_MS),
        "exited after {exited:?}, before the drain deadline, with calls in flight"
    );
    assert!(
        exited < Duration::from_millis(DRAIN_MS) + Duration::from_secs(6),
        "exited after {exited:?}"
    );

    // The calls that could not finish were answered UNAVAILABLE, not dropped.
    let r = hung_http
        .join()
        .unwrap()
        .expect("the hung HTTP call is answered");
    assert_eq!(
        (r.status, r.json()["code"].as_str()),
        (503, Some("UNAVAILABLE"))
    );
    assert_eq!(r.header("retry-after"), Some("1"));
    let (h, _) = hung_rac.recv().expect("the queued RAC call is answered");
    assert_eq!((h.request_id, h.status), (42, Status::Unavailable));

    stop.store(true, Ordering::Relaxed);
    let outcomes: Vec<Outcome> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    // Every call sent well before the signal (so the node had surely read it) was
    // answered, once and rightly; calls sent around and after it may find the
    // connection closed. The margin is far above the time to read a call.
    let margin = Duration::from_millis(300);
    for front in [Front::Http, Front::V2, Front::Rac] {
        let mine: Vec<_> = outcomes.iter().filter(|o| o.front == front).collect();
        let count = |f: &Fate| mine.iter().filter(|o| &o.fate == f).count();
        let wrong: Vec<_> = mine
            .iter()
            .filter(|o| matches!(o.fate, Fate::Wrong(_)))
            .collect();
        assert!(wrong.is_empty(), "{front:?}: {wrong:?}");
        let lost_early: Vec<_> = mine
            .iter()
            .filter(|o| o.fate == Fate::Lost && o.sent + margin < term)
            .collect();
        assert!(
            lost_early.is_empty(),
            "{front:?}: unanswered {lost_early:?}"
        );
        let (ok, busy) = (count(&Fate::Ok), count(&Fate::Busy));
        eprintln!(
            "{front:?}: {} calls, {ok} OK, {busy} BUSY, {} UNAVAILABLE, {} lost (sent after SIGTERM - {margin:?})",
            mine.len(),
            count(&Fate::Unavailable),
            count(&Fate::Lost)
        );
        assert!(ok > 0 && busy > 0, "{front:?}: {ok} OK, {busy} BUSY");
    }
}

/// Idle keep-alive connections close at once on SIGTERM, also those whose last request
/// came in two segments (head, then body): the node may read both at once and later
/// see the second segment's edge-triggered readiness event, find nothing to read and
/// wait for input — and that wait, too, must end at the shutdown. Before, such a
/// connection held the drain for its whole idle timeout (a registry test's node took
/// 30 s to exit, 1 run in ~20).
#[test]
fn idle_connections_whose_last_request_came_in_two_segments_do_not_hold_the_drain() {
    use std::io::{Read, Write};
    let mut node = TestNode::start("drain_timeout_ms = 20000\nidle_timeout_ms = 60000\n");
    let mut idle = Vec::new();
    for i in 0..300 {
        let mut c = TcpStream::connect(node.addr).unwrap();
        c.set_nodelay(true).unwrap();
        let body = format!("call {i:04}");
        let head = format!(
            "POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        c.write_all(head.as_bytes()).unwrap();
        if i % 2 == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
        c.write_all(body.as_bytes()).unwrap();
        // Read the whole answer; the connection then stays open, idle.
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        let mut chunk = [0u8; 512];
        while !got.ends_with(body.as_bytes()) {
            let n = c.read(&mut chunk).unwrap();
            assert!(
                n > 0,
                "closed before answering: {}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&chunk[..n]);
        }
        idle.push(c);
    }
    let started = Instant::now();
    let status = node.terminate();
    let took = started.elapsed();
    assert!(status.success(), "{status:?}");
    // Far below the drain timeout (20 s): nothing was running.
    assert!(took < Duration::from_secs(5), "the drain took {took:?}");
}
