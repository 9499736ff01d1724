//! A hung kernel (issue 15): the `fault` accelerator's `hang` payload never returns.
//! The slot watchdog must fail that slot within `kernel_timeout_ms` (plus its check
//! period), answer the hung call and the calls queued behind it `UNAVAILABLE` (HTTP
//! 503 with `Retry-After`, RAC status), show the failure in /metrics and the admin
//! API, keep the other slots serving, and let the slot come back through a reload.

mod common;
mod overload_clients;

use std::time::{Duration, Instant};

use accel::FAULT_ID;
use common::*;
use overload_clients::*;
use rac_proto::Status;

const KERNEL_TIMEOUT_MS: u64 = 400;

#[test]
fn a_hung_kernel_fails_its_slot_answers_its_calls_and_the_node_serves_on() {
    let node = TestNode::start(&format!(
        "fault_injection = true\nkernel_timeout_ms = {KERNEL_TIMEOUT_MS}\n\
         [[slots]]\naccelerator = \"fault\"\n[[slots]]\naccelerator = \"echo\"\n"
    ));
    // The hung call, over HTTP.
    let addr = node.addr;
    let hung = std::thread::spawn(move || {
        let mut c = Http::connect(addr).unwrap();
        let sent = Instant::now();
        let r = c.call("/v1/fn/fault", b"hang").unwrap();
        (r, sent.elapsed())
    });
    wait_until("the hung call runs in slot 0", || {
        node.get_json("/v1/slots/0")["state"] == "busy"
    });
    // Queued behind it: one HTTP call and one RAC call.
    let mut queued_http = Http::connect(node.addr).unwrap();
    queued_http.send("/v1/fn/fault", b"after", "").unwrap();
    let mut queued_rac = Rac::connect(node.rac_addr).unwrap();
    queued_rac.send(FAULT_ID, 7, b"after").unwrap();
    wait_until("both calls queue behind the hung one", || {
        node.get_json("/v1/slots/0")["queue_depth"] == 2
    });
    // The other slot serves meanwhile.
    let mut echo = Http::connect(node.addr).unwrap();
    let r = echo.call("/v1/fn/echo", b"still here").unwrap();
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"still here".as_slice())
    );

    let (r, took) = hung.join().unwrap();
    assert_eq!(r.status, 503, "{:?}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["code"], "UNAVAILABLE");
    assert_eq!(r.header("retry-after"), Some("1"));
    // Not before its bound; found within it plus the check period (a quarter of it),
    // with head-room for a loaded machine.
    assert!(
        took >= Duration::from_millis(KERNEL_TIMEOUT_MS),
        "answered after {took:?}"
    );
    assert!(took < Duration::from_secs(10), "answered after {took:?}");
    let r = queued_http.recv().unwrap();
    assert_eq!(
        (r.status, r.json()["code"].as_str()),
        (503, Some("UNAVAILABLE"))
    );
    let (h, _) = queued_rac.recv().unwrap();
    assert_eq!((h.request_id, h.status), (7, Status::Unavailable));

    // Visible where operators look.
    let slot = node.get_json("/v1/slots/0");
    assert_eq!(slot["state"], "failed", "{slot}");
    assert!(
        slot["failed"]
            .as_str()
            .unwrap()
            .contains("kernel_timeout_ms"),
        "{slot}"
    );
    assert_eq!(node.metric("netaccel_slot_failed{slot=\"0\"}"), 1.0);
    assert_eq!(node.metric("netaccel_slot_failed{slot=\"1\"}"), 0.0);
    assert_eq!(
        node.metric("netaccel_slot_hung_kernels_total{slot=\"0\"}"),
        1.0
    );
    assert_eq!(
        node.metric("netaccel_slot_threads_abandoned{slot=\"0\"}"),
        1.0
    );

    // A failed slot refuses at once, on both front ends; the others still serve.
    let r = echo.call("/v1/fn/fault", b"x").unwrap();
    assert_eq!(
        (r.status, r.json()["code"].as_str()),
        (503, Some("UNAVAILABLE"))
    );
    queued_rac.send(FAULT_ID, 8, b"x").unwrap();
    let (h, _) = queued_rac.recv().unwrap();
    assert_eq!((h.request_id, h.status), (8, Status::Unavailable));
    queued_rac.send(1, 9, b"echo").unwrap();
    let (h, payload) = queued_rac.recv().unwrap();
    assert_eq!(
        (h.status, payload.as_slice()),
        (Status::Ok, b"echo".as_slice())
    );

    // Reloading the slot through the admin API brings it back; the stuck thread stays
    // counted (its kernel never returns).
    let (code, body) = curl(&[
        "-X",
        "PUT",
        "-d",
        r#"{"accelerator":"fault"}"#,
        &node.url("/v1/slots/0"),
    ]);
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let r = echo.call("/v1/fn/fault", b"back").unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, b"back".as_slice()));
    assert_eq!(node.get_json("/v1/slots/0")["state"], "idle");
    assert_eq!(node.metric("netaccel_slot_failed{slot=\"0\"}"), 0.0);
    assert_eq!(
        node.metric("netaccel_slot_threads_abandoned{slot=\"0\"}"),
        1.0
    );
}

#[test]
fn a_kernel_that_returns_after_its_bound_is_answered_and_counted_once() {
    // Each call holds the slot 1.5 s, past a bound of 300 ms: the call is answered
    // UNAVAILABLE by the watchdog; when the kernel returns, its thread leaves.
    let node = TestNode::start(
        "kernel_timeout_ms = 300\nsimulated_exec_us = 1500000\n\
         [[slots]]\naccelerator = \"echo\"\n",
    );
    let mut c = Http::connect(node.addr).unwrap();
    let r = c.call("/v1/fn/echo", b"slow").unwrap();
    assert_eq!(
        (r.status, r.json()["code"].as_str()),
        (503, Some("UNAVAILABLE"))
    );
    assert_eq!(
        node.metric("netaccel_slot_threads_abandoned{slot=\"0\"}"),
        1.0
    );
    wait_until("the abandoned thread returns and leaves", || {
        node.metric("netaccel_slot_threads_abandoned{slot=\"0\"}") == 0.0
    });
    // One answer, counted once: not also OK when the kernel came back.
    let counted = |status: &str| {
        node.metric(&format!(
            "netaccel_accelerator_calls_total{{accelerator=\"echo\",status=\"{status}\"}}"
        ))
    };
    assert_eq!((counted("UNAVAILABLE"), counted("OK")), (1.0, 0.0));
    // The slot stays failed until it is reloaded.
    assert_eq!(node.get_json("/v1/slots/0")["state"], "failed");
    let (code, body) = curl(&[
        "-X",
        "PUT",
        "-d",
        r#"{"accelerator":"echo"}"#,
        &node.url("/v1/slots/0"),
    ]);
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(node.get_json("/v1/slots/0")["state"], "idle");
}

#[test]
fn without_a_bound_a_long_call_is_left_alone() {
    // kernel_timeout_ms = 0 switches the watchdog off: a call running for longer than
    // the bound above does not fail its slot.
    let node = TestNode::start(
        "fault_injection = true\nkernel_timeout_ms = 0\nsimulated_exec_us = 600000\n\
         [[slots]]\naccelerator = \"fault\"\n",
    );
    let mut c = Http::connect(node.addr).unwrap();
    let r = c.call("/v1/fn/fault", b"slow").unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, b"slow".as_slice()));
    assert_eq!(node.metric("netaccel_slot_failed{slot=\"0\"}"), 0.0);
}
