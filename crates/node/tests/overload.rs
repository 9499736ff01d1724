//! The overload contract (issue 15), the properties that do not depend on timing:
//! at twice an accelerator's capacity, on every front end (HTTP `/v1/fn`, RAC v1,
//! Open Inference Protocol v2), every call is answered exactly once — with its own
//! output, or refused `BUSY` (HTTP 503 with `Retry-After`) — as the clients see it and
//! as the node counts it; the node's memory stays bounded; clients that stop reading
//! their results hold no more than the stated per-connection bound and are dropped
//! after `io_timeout_ms`. Latency under overload is a figure, measured by
//! `bench/overload/run.sh`, not asserted here.

mod common;
mod overload_clients;

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use overload_clients::*;
use rac_proto::{CallHeader, PARAMS_LEN};

/// The tests each load both cores; one at a time keeps their memory figures apart.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Echo holds its slot 2 ms a call (the simulated device time is exact): the
/// accelerator's capacity is 500 calls/s.
const EXEC_US: u64 = 2000;

#[test]
fn twice_the_capacity_on_every_front_end_answers_every_call_exactly_once() {
    let _serial = serial();
    let node = TestNode::start(&format!(
        "simulated_exec_us = {EXEC_US}\nqueue_depth_max = 16\ntenant_queue_depth_max = 16\n\
         [[slots]]\naccelerator = \"echo\"\n"
    ));
    // Unloaded: one client, one call at a time.
    let mut unloaded = Vec::new();
    let mut c = Http::connect(node.addr).unwrap();
    for i in 0..30 {
        let body = format!("unloaded-{i}");
        let t = std::time::Instant::now();
        let r = c.call("/v1/fn/echo", body.as_bytes()).unwrap();
        assert_eq!((r.status, r.body), (200, body.into_bytes()));
        unloaded.push(t.elapsed());
    }
    let rss_before = node.rss_kib();

    // 2x: 24 clients (8 per front end), one call each per 24 ms: 1,000 calls/s.
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    let mut tallies = Vec::new();
    for (front, addr) in [
        (Front::Http, node.addr),
        (Front::V2, node.addr),
        (Front::Rac, node.rac_addr),
    ] {
        let (handles, tally) = drive(front, addr, 8, Duration::from_millis(24), Arc::clone(&stop));
        clients.extend(handles);
        tallies.push(tally);
    }
    let mut rss_max = rss_before;
    wait_until("every front end has had calls answered and refused", || {
        rss_max = rss_max.max(node.rss_kib());
        tallies.iter().all(|t| t.reached(200, 50))
    });
    stop.store(true, Ordering::Relaxed);
    let outcomes: Vec<Outcome> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    rss_max = rss_max.max(node.rss_kib());

    let mut ok_total = 30; // the unloaded calls
    let mut busy_total = 0;
    for front in [Front::Http, Front::V2, Front::Rac] {
        let mine: Vec<_> = outcomes.iter().filter(|o| o.front == front).collect();
        let bad: Vec<_> = mine
            .iter()
            .filter(|o| !matches!(o.fate, Fate::Ok | Fate::Busy))
            .collect();
        assert!(bad.is_empty(), "{front:?}: {bad:?}");
        let ok = mine.iter().filter(|o| o.fate == Fate::Ok).count();
        let busy = mine.len() - ok;
        let mut accepted: Vec<_> = mine
            .iter()
            .filter(|o| o.fate == Fate::Ok)
            .map(|o| o.took)
            .collect();
        eprintln!(
            "{front:?}: {} calls, {ok} OK, {busy} BUSY ({:.0} %), accepted p50 {:?} p99 {:?}",
            mine.len(),
            100.0 * busy as f64 / mine.len() as f64,
            quantile(&mut accepted, 0.5),
            quantile(&mut accepted, 0.99),
        );
        ok_total += ok;
        busy_total += busy;
    }
    eprintln!(
        "unloaded p50 {:?} p99 {:?}; RSS {rss_before} KiB before, at most {rss_max} KiB under load",
        quantile(&mut unloaded.clone(), 0.5),
        quantile(&mut unloaded, 0.99)
    );
    // The node counted each answer once, as the clients saw them.
    let counted = |status: &str| {
        node.metric(&format!(
            "netaccel_accelerator_calls_total{{accelerator=\"echo\",status=\"{status}\"}}"
        )) as usize
    };
    assert_eq!(counted("OK"), ok_total);
    assert_eq!(counted("BUSY"), busy_total);
    // Bounded memory: 24 connections and a 16-call queue hold little.
    assert!(
        rss_max < rss_before + 32 * 1024,
        "RSS grew from {rss_before} KiB to {rss_max} KiB"
    );
}

/// With the default bounds (a queue of 64 calls per slot, and a call admitted only
/// while the calls ahead of it are expected to take at most 8 times its own
/// execution), a 5 ms accelerator offered twice its capacity by 40 clients at once
/// queues an accepted call about 8 service times, not the 40 its clients could fill:
/// the node's own queue-time figures stay within the bound (with room for a loaded
/// machine's late wake-ups), and the refusals are counted as the wait bound's.
#[test]
fn with_the_default_bounds_an_accepted_call_waits_a_bounded_multiple_of_its_execution() {
    let _serial = serial();
    const SLOW_EXEC_US: u64 = 5000;
    let node = TestNode::start(&format!(
        "simulated_exec_us = {SLOW_EXEC_US}\n[[slots]]\naccelerator = \"echo\"\n"
    ));
    // 2x: 40 clients (20 RAC, 20 HTTP), one call each per 100 ms: 400 calls/s.
    let outcomes = drive_both(&node, 20, Duration::from_millis(100), (150, 50));
    let mut queued: Vec<Duration> = outcomes
        .iter()
        .filter(|o| o.fate == Fate::Ok)
        .map(|o| o.queued)
        .collect();
    let busy = outcomes.iter().filter(|o| o.fate == Fate::Busy).count();
    for front in [Front::Rac, Front::Http] {
        let mut mine: Vec<Duration> = outcomes
            .iter()
            .filter(|o| o.fate == Fate::Ok && o.front == front)
            .map(|o| o.queued)
            .collect();
        eprintln!(
            "{front:?}: {} accepted, queue time p50 {:?} p99 {:?}",
            mine.len(),
            quantile(&mut mine, 0.5),
            quantile(&mut mine, 0.99)
        );
    }
    let (p50, p99) = (quantile(&mut queued, 0.5), quantile(&mut queued, 0.99));
    eprintln!(
        "{} accepted, {busy} BUSY; queue time p50 {p50:?} p99 {p99:?}",
        queued.len()
    );
    let exec = Duration::from_micros(SLOW_EXEC_US);
    // The bound: 8 calls ahead plus the rest of the one in progress; with the queue
    // bounded in calls alone, 40 clients' calls would wait up to 40 x 5 ms. The p99
    // is a figure (bench/overload/run.sh measures it on a quiet machine); here it only
    // has to stay clear of what a queue bounded in calls alone gives (200 ms): on the
    // 2 shared cores with others building, late wake-ups took it to 80-111 ms.
    assert!(p50 <= 9 * exec, "queue time p50 {p50:?}");
    assert!(p99 <= 30 * exec, "queue time p99 {p99:?}");
    assert!(
        node.metric("netaccel_slot_wait_refusals_total{slot=\"0\"}") > 0.0,
        "the refusals are the wait bound's"
    );
    assert_eq!(
        node.metric("netaccel_accelerator_calls_total{accelerator=\"echo\",status=\"BUSY\"}")
            as usize,
        busy
    );
}

/// Issue 29: `netaccel_slot_wait_refusals_total` counted a call refused for the wait
/// bound once per slot it was offered to (the dispatcher's pick, then every candidate
/// again, the pick included): 64,797 counted against 34,766 calls answered BUSY. Two
/// slots of a 10 ms accelerator offered three times their capacity by clients with one
/// call each in flight (no queue fills: every refusal is the wait bound's): the slots'
/// counts add up to the calls the clients saw refused, and to the node's BUSY count.
#[test]
fn the_wait_refusals_count_each_call_answered_busy_once() {
    let _serial = serial();
    let node = TestNode::start(
        "simulated_exec_us = 10000\n[[slots]]\naccelerator = \"echo\"\n\
         [[slots]]\naccelerator = \"echo\"\n",
    );
    // 3x: 30 clients (15 RAC, 15 HTTP), one call each per 50 ms: 600 calls/s.
    let outcomes = drive_both(&node, 15, Duration::from_millis(50), (50, 100));
    let busy = outcomes.iter().filter(|o| o.fate == Fate::Busy).count();
    let refusals: f64 = (0..2)
        .map(|slot| {
            node.metric(&format!(
                "netaccel_slot_wait_refusals_total{{slot=\"{slot}\"}}"
            ))
        })
        .sum();
    let answered_busy =
        node.metric("netaccel_accelerator_calls_total{accelerator=\"echo\",status=\"BUSY\"}");
    eprintln!(
        "{} calls, {busy} BUSY seen by clients, {answered_busy} BUSY counted, {refusals} wait refusals",
        outcomes.len()
    );
    assert!(busy > 0, "the node was driven into refusals");
    assert_eq!(answered_busy as usize, busy);
    assert_eq!(refusals as usize, busy, "each refused call counted once");
}

/// Calls each slow client sends without reading a result, and their payload size.
const SLOW_CALLS: usize = 256;
const SLOW_PAYLOAD: usize = 48 * 1024;
const SLOW_CLIENTS: usize = 16;
const RAC_IN_FLIGHT_MAX: usize = 8;

#[test]
fn clients_that_stop_reading_hold_bounded_memory_and_are_dropped() {
    let _serial = serial();
    let node = TestNode::start(&format!(
        "io_threads = 1\nio_timeout_ms = 2000\nidle_timeout_ms = 3000\nrac_in_flight_max = {RAC_IN_FLIGHT_MAX}\n\
         [[slots]]\naccelerator = \"echo\"\n"
    ));
    let rss_before = node.rss_kib();
    let payload = vec![b'x'; SLOW_PAYLOAD];
    // Each client writes everything it has (a writer thread per connection: the
    // writes block once the node stops reading) and never reads.
    let writers: Vec<_> = (0..2 * SLOW_CLIENTS)
        .map(|i| {
            let rac = i % 2 == 0;
            let addr = if rac { node.rac_addr } else { node.addr };
            let payload = payload.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
                for id in 0..SLOW_CALLS as u32 {
                    let mut msg = if rac {
                        CallHeader::call(1, id, payload.len() as u32, [0; PARAMS_LEN])
                            .encode()
                            .to_vec()
                    } else {
                        format!(
                            "POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
                            payload.len()
                        )
                        .into_bytes()
                    };
                    msg.extend_from_slice(&payload);
                    if s.write_all(&msg).is_err() {
                        break;
                    }
                }
                s
            })
        })
        .collect();
    let offered_kib = (2 * SLOW_CLIENTS * SLOW_CALLS * SLOW_PAYLOAD / 1024) as u64;
    let mut rss_max = rss_before;
    let mut streams = Vec::new();
    for w in writers {
        rss_max = rss_max.max(node.rss_kib());
        streams.push(w.join().unwrap());
    }
    // The stated bound (docs/operations.md): per slow RAC connection, its in-flight
    // calls' payloads and outputs plus its read and write buffers; per slow HTTP
    // connection, one body, one response and its buffers (64 KiB buffers each); and
    // once per network thread, the buffer pool those buffers come back to (256 of
    // 64 KiB).
    let rac_kib = (RAC_IN_FLIGHT_MAX * 2 * SLOW_PAYLOAD / 1024 + 2 * 64) as u64;
    let http_kib = (2 * SLOW_PAYLOAD / 1024 + 2 * 64) as u64;
    let pool_kib = 256 * 64;
    let bound_kib = SLOW_CLIENTS as u64 * (rac_kib + http_kib) + pool_kib;
    wait_until("the node drops the clients that do not read", || {
        rss_max = rss_max.max(node.rss_kib());
        node.metric("netaccel_connections_open{protocol=\"rac\"}") == 0.0
            // The request asking is one.
            && node.metric("netaccel_connections_open{protocol=\"http\"}") <= 1.0
    });
    let grew = rss_max.saturating_sub(rss_before);
    eprintln!(
        "{} slow clients offered {offered_kib} KiB; node RSS grew at most {grew} KiB (bound {bound_kib} KiB)",
        2 * SLOW_CLIENTS
    );
    // Head-room for the allocator's own slack; far below what was offered.
    assert!(
        grew < bound_kib + 8 * 1024,
        "RSS grew {grew} KiB, bound {bound_kib} KiB"
    );
    drop(streams);
    // The node still serves.
    let mut c = Http::connect(node.addr).unwrap();
    let r = c.call("/v1/fn/echo", b"after").unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, b"after".as_slice()));
}

#[test]
fn slowloris_connections_do_not_stop_other_clients() {
    let _serial = serial();
    // 1,000 connections sending a request head one byte at a time (10,000 in
    // bench/overload/run.sh, which also measures the other client's p99).
    let node = TestNode::start("[[slots]]\naccelerator = \"echo\"\n");
    let mut loris: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(node.addr).unwrap())
        .collect();
    let mut c = Http::connect(node.addr).unwrap();
    for round in 0..20 {
        for s in &mut loris {
            let _ = s.write_all(&b"POST /v1/fn/echo HTTP/1.1\r\n"[round..round + 1]);
        }
        let body = format!("call-{round}");
        let r = c.call("/v1/fn/echo", body.as_bytes()).unwrap();
        assert_eq!((r.status, r.body), (200, body.into_bytes()));
    }
}

/// Drives `node` from `per_front` RAC and as many HTTP clients, each with one call in
/// flight every `period`, until each front end has `answered_refused` calls answered
/// and refused BUSY (at least); then stops them and gives every call's outcome.
fn drive_both(
    node: &TestNode,
    per_front: usize,
    period: Duration,
    (answered, refused): (usize, usize),
) -> Vec<Outcome> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    let mut tallies = Vec::new();
    for (front, addr) in [(Front::Rac, node.rac_addr), (Front::Http, node.addr)] {
        let (handles, tally) = drive(front, addr, per_front, period, Arc::clone(&stop));
        clients.extend(handles);
        tallies.push(tally);
    }
    wait_until("calls answered and refused on both front ends", || {
        tallies.iter().all(|t| t.reached(answered, refused))
    });
    stop.store(true, Ordering::Relaxed);
    clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect()
}
