//! Black-box tests of the RAC v1 front end: the shared vectors byte for byte, every
//! status reached on purpose, pipelining, reassembly of slow payloads, pool
//! exhaustion, disconnects, control messages.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use accel::reference;
use common::*;
use netaccel_client::rac::{RacClient, RacError};
use rac_proto::{params, CallHeader, ControlRequest, Decoded, ResultHeader, Status, HEADER_LEN};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Reads one result (header and payload) from a blocking stream.
fn read_result(s: &mut TcpStream) -> (ResultHeader, Vec<u8>) {
    let mut head = [0u8; HEADER_LEN];
    s.read_exact(&mut head).unwrap();
    let Ok(Decoded::Complete(h, _)) = ResultHeader::decode(&head, 1 << 30) else {
        panic!("bad result header {head:?}")
    };
    let mut payload = vec![0; h.payload_len as usize];
    s.read_exact(&mut payload).unwrap();
    (h, payload)
}

fn status_of(r: Result<netaccel_client::rac::RacOutput, RacError>) -> Status {
    match r {
        Ok(_) => Status::Ok,
        Err(RacError::Status { status, .. }) => status,
        Err(e) => panic!("transport error: {e}"),
    }
}

#[test]
fn shared_vectors_byte_for_byte() {
    let node = TestNode::start("");
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../spec/rac-v1-vectors.json"
    ))
    .unwrap();
    let vectors: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut s = TcpStream::connect(node.rac_addr).unwrap();
    let mut checked = 0;
    for v in vectors.as_array().unwrap() {
        let Some(expect) = v["expect_output_hex"].as_str() else {
            continue;
        };
        let header = hex(v["header_hex"].as_str().unwrap());
        s.write_all(&header).unwrap();
        s.write_all(&hex(v["payload_hex"].as_str().unwrap()))
            .unwrap();
        let (result, payload) = read_result(&mut s);
        let Ok(Decoded::Complete(call, _)) = CallHeader::decode(&header, 1 << 20) else {
            panic!()
        };
        assert_eq!(result.status, Status::Ok, "{}", v["name"]);
        assert_eq!(result.request_id, call.request_id);
        assert_eq!(result.accel_id, call.accel_id);
        assert!(result.slot().is_some());
        assert_eq!(payload, hex(expect), "{}", v["name"]);
        checked += 1;
    }
    assert!(checked >= 4);
}

#[test]
fn every_status_on_purpose() {
    let node = TestNode::start(
        "admin_token = \"adm\"\ninline_work_max = 0\nreconfig_delay_ms = 400\nreassembly_buffers = 1\nreassembly_buffer_bytes = 1048576\n\
         [[tenants]]\nname = \"team-a\"\ntoken = \"ta\"\n\
         [[slots]]\naccelerator = \"matmul\"\n[[slots]]\naccelerator = \"echo\"\n[[slots]]\naccelerator = \"topk\"\n",
    );
    let rt = runtime();
    rt.block_on(async {
        let c = RacClient::connect(&node.rac_addr.to_string())
            .await
            .unwrap();
        // OK, BAD_REQUEST (params, length), UNKNOWN_ACCELERATOR (no such id; not hosted).
        assert_eq!(
            status_of(c.call(1, params::NONE, b"x".to_vec(), 0).await),
            Status::Ok
        );
        assert_eq!(
            status_of(c.call(3, params::topk(0), vec![], 0).await),
            Status::BadRequest
        );
        assert_eq!(
            status_of(c.call(3, params::topk(1), vec![1, 2, 3], 0).await),
            Status::BadRequest
        );
        assert_eq!(
            status_of(c.call(99, params::NONE, vec![], 0).await),
            Status::UnknownAccelerator
        );
        assert_eq!(
            status_of(c.call(2, params::NONE, b"abc".to_vec(), 0).await),
            Status::UnknownAccelerator
        );

        // DEADLINE_EXCEEDED: queued behind a long matmul with a 1 ms deadline.
        let n = 300u32;
        let big = f32_bytes(&vec![1.0; 2 * (n * n) as usize]);
        let long = c.call(7, params::matmul(n), big.clone(), 0);
        let short = async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            c.call(7, params::matmul(1), f32_bytes(&[1.0, 1.0]), 1000)
                .await
        };
        let (long, short) = tokio::join!(long, short);
        assert_eq!(status_of(long), Status::Ok);
        match short {
            Err(RacError::Status {
                status: Status::DeadlineExceeded,
                header,
                ..
            }) => {
                assert_eq!(header.exec_ns, 0);
                assert_eq!(header.slot(), Some(0));
            }
            other => panic!("expected DEADLINE_EXCEEDED, got {other:?}"),
        }

        // UNAUTHORIZED: load without the admin token; hello with a wrong token.
        let load = ControlRequest::Load {
            slot: 1,
            accelerator: "to_uppercase".into(),
            token: None,
        };
        assert!(matches!(
            c.control(&load).await,
            Err(RacError::Status {
                status: Status::Unauthorized,
                ..
            })
        ));
        let hello = ControlRequest::Hello {
            tenant: "team-a".into(),
            token: Some("nope".into()),
        };
        assert!(matches!(
            c.control(&hello).await,
            Err(RacError::Status {
                status: Status::Unauthorized,
                ..
            })
        ));
        let hello = ControlRequest::Hello {
            tenant: "team-a".into(),
            token: Some("ta".into()),
        };
        assert_eq!(c.control(&hello).await.unwrap()["tenant"], "team-a");

        // UNAVAILABLE: echo's only slot is being reconfigured (400 ms).
        let load = ControlRequest::Load {
            slot: 1,
            accelerator: "to_uppercase".into(),
            token: Some("adm".into()),
        };
        let reconfig = c.control(&load);
        let during = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            (
                c.call(1, params::NONE, b"x".to_vec(), 0).await,
                c.call(2, params::NONE, b"x".to_vec(), 0).await,
            )
        };
        let (report, (echo, upper)) = tokio::join!(reconfig, during);
        assert!(
            matches!(
                echo,
                Err(RacError::Status {
                    status: Status::Unavailable,
                    ..
                })
            ),
            "{echo:?}"
        );
        assert!(
            matches!(
                upper,
                Err(RacError::Status {
                    status: Status::Unavailable,
                    ..
                })
            ),
            "{upper:?}"
        );
        let report = report.unwrap();
        assert_eq!(report["accelerator"], "to_uppercase");
        assert!(report["reconfig_ms"].as_f64().unwrap() >= 400.0);
        assert_eq!(
            status_of(c.call(2, params::NONE, b"x".to_vec(), 0).await),
            Status::Ok
        );

        // BAD_REQUEST for a request id already in flight.
        let first = CallHeader::call(7, 4242, big.len() as u32, params::matmul(n));
        let dup = CallHeader::call(1, 4242, 0, params::NONE);
        let mut raw = first.encode().to_vec();
        raw.extend_from_slice(&big);
        raw.extend_from_slice(&dup.encode());
        let mut s = TcpStream::connect(node.rac_addr).unwrap();
        s.write_all(&raw).unwrap();
        let (r1, msg) = read_result(&mut s);
        assert_eq!(
            (r1.request_id, r1.status),
            (4242, Status::BadRequest),
            "{}",
            String::from_utf8_lossy(&msg)
        );
        assert!(String::from_utf8_lossy(&msg).contains("already in flight"));
        let (r2, _) = read_result(&mut s);
        assert_eq!((r2.request_id, r2.status), (4242, Status::Ok));
    });

    // BUSY: the pool's single buffer is nearly filled by a slow payload elsewhere,
    // once the calls above have given it back.
    let buffers_in_use = |n: f64, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while node.metric("netaccel_reassembly_buffers_in_use") != n {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    buffers_in_use(0.0, "the calls above kept the reassembly buffer");
    let mut slow = TcpStream::connect(node.rac_addr).unwrap();
    let slow_len = 1_000_000;
    slow.write_all(&CallHeader::call(2, 1, slow_len, params::NONE).encode())
        .unwrap();
    slow.write_all(&[b'a'; 100]).unwrap();
    buffers_in_use(1.0, "the slow call never took the reassembly buffer");
    let mut s = TcpStream::connect(node.rac_addr).unwrap();
    s.write_all(&CallHeader::call(2, 7, 100_000, params::NONE).encode())
        .unwrap();
    s.write_all(&[b'b'; 10]).unwrap();
    let (r, _) = read_result(&mut s);
    assert_eq!((r.request_id, r.status, r.slot()), (7, Status::Busy, None));
    // The refused payload is read and discarded; the connection carries on.
    s.write_all(&[b'b'; 99_990]).unwrap();
    s.write_all(&CallHeader::call(2, 8, 2, params::NONE).encode())
        .unwrap();
    s.write_all(b"ok").unwrap();
    let (r, payload) = read_result(&mut s);
    assert_eq!(
        (r.request_id, r.status, payload.as_slice()),
        (8, Status::Ok, b"OK".as_slice())
    );
    assert!(node.metric("netaccel_busy_refusals_total{protocol=\"rac\"}") >= 1.0);
    slow.write_all(&vec![b'a'; slow_len as usize - 100])
        .unwrap();
    let (r, payload) = read_result(&mut slow);
    assert_eq!(r.status, Status::Ok);
    assert!(payload.len() == slow_len as usize && payload.iter().all(|&b| b == b'A'));

    // TOO_LARGE: answered, then the node closes.
    let mut s = TcpStream::connect(node.rac_addr).unwrap();
    s.write_all(&CallHeader::call(1, 9, 2 << 20, params::NONE).encode())
        .unwrap();
    let (r, _) = read_result(&mut s);
    assert_eq!((r.request_id, r.status), (9, Status::TooLarge));
    let mut rest = Vec::new();
    assert_eq!(
        s.read_to_end(&mut rest).unwrap_or(0),
        0,
        "connection closed after TOO_LARGE"
    );

    // PROTOCOL_ERROR: bad magic, request id 0, then close; non-zero flags keep the id.
    let mut s = TcpStream::connect(node.rac_addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let (r, _) = read_result(&mut s);
    assert_eq!((r.request_id, r.status), (0, Status::ProtocolError));
    let mut bad = CallHeader::call(1, 77, 0, params::NONE).encode();
    bad[5] = 1;
    let mut s = TcpStream::connect(node.rac_addr).unwrap();
    s.write_all(&bad).unwrap();
    let (r, _) = read_result(&mut s);
    assert_eq!((r.request_id, r.status), (77, Status::ProtocolError));

    // The node keeps serving others (echo's slot now holds to_uppercase).
    let mut s = TcpStream::connect(node.rac_addr).unwrap();
    s.write_all(&CallHeader::call(2, 1, 2, params::NONE).encode())
        .unwrap();
    s.write_all(b"hi").unwrap();
    assert_eq!(read_result(&mut s).0.status, Status::Ok);
}

#[test]
fn ten_thousand_pipelined_calls_on_one_connection() {
    let node = TestNode::start(
        "rac_in_flight_max = 256\nqueue_depth_max = 512\ntenant_queue_depth_max = 512\n",
    );
    let rt = runtime();
    rt.block_on(async {
        let c = RacClient::connect(&node.rac_addr.to_string())
            .await
            .unwrap();
        let mut rng = Rng(12345);
        let mut calls = Vec::new();
        for _ in 0..10_000 {
            let (id, params, payload, want): (u16, _, Vec<u8>, Vec<u8>) = match rng.below(4) {
                0 => {
                    let len = rng.below(2000) as usize;
                    let p = rng.bytes(len);
                    (1, params::NONE, p.clone(), p)
                }
                1 => {
                    let len = rng.below(2000) as usize;
                    let p = rng.bytes(len);
                    let w = reference::to_uppercase(&p);
                    (2, params::NONE, p, w)
                }
                2 => {
                    let v: Vec<i32> = (0..rng.below(300)).map(|_| rng.next() as i32).collect();
                    let k = 1 + rng.below(10) as u32;
                    let w = i32_bytes(&reference::topk(&v, k as usize));
                    (3, params::topk(k), i32_bytes(&v), w)
                }
                _ => {
                    let (w, h) = (1 + rng.below(30) as u32, 1 + rng.below(30) as u32);
                    let img = rng.bytes((w * h) as usize);
                    let out = reference::sobel(&img, w as usize, h as usize);
                    (6, params::sobel(w, h), img, out)
                }
            };
            calls.push((id, params, payload, want));
        }
        let futures = calls
            .iter()
            .map(|(id, p, payload, _)| c.call(*id, *p, payload.clone(), 0));
        let results = futures_join_all(futures).await;
        for (i, (r, (_, _, _, want))) in results.into_iter().zip(&calls).enumerate() {
            let out = r.unwrap_or_else(|e| panic!("call {i}: {e}"));
            assert_eq!(&out.payload, want, "call {i}");
        }
    });
    assert_eq!(node.metric("netaccel_rac_in_flight_calls"), 0.0);
}

/// Awaits many futures concurrently on the current task.
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let futures: Vec<_> = futures.map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = (0..futures.len()).map(|_| None).collect();
    let mut pending: Vec<(usize, std::pin::Pin<Box<F>>)> =
        futures.into_iter().enumerate().collect();
    std::future::poll_fn(|cx| {
        pending.retain_mut(|(i, f)| match f.as_mut().poll(cx) {
            std::task::Poll::Ready(out) => {
                results[*i] = Some(out);
                false
            }
            std::task::Poll::Pending => true,
        });
        if pending.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    results.into_iter().map(|r| r.unwrap()).collect()
}

#[test]
fn byte_by_byte_payloads_complete_while_others_are_served() {
    let node = TestNode::start("");
    let payload: Vec<u8> = (0..300).map(|i| b'a' + (i % 26) as u8).collect();
    let mut message = CallHeader::call(2, 5, payload.len() as u32, params::NONE)
        .encode()
        .to_vec();
    message.extend_from_slice(&payload);
    std::thread::scope(|s| {
        let dripper = s.spawn(|| {
            let mut c = TcpStream::connect(node.rac_addr).unwrap();
            c.set_nodelay(true).unwrap();
            for b in &message {
                c.write_all(&[*b]).unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
            read_result(&mut c)
        });
        // Meanwhile, small calls from another client keep completing.
        let mut c = TcpStream::connect(node.rac_addr).unwrap();
        c.set_nodelay(true).unwrap();
        let mut served = 0;
        let start = Instant::now();
        while !dripper.is_finished() {
            c.write_all(&CallHeader::call(1, served, 4, params::NONE).encode())
                .unwrap();
            c.write_all(b"ping").unwrap();
            let (r, out) = read_result(&mut c);
            assert_eq!((r.status, out.as_slice()), (Status::Ok, b"ping".as_slice()));
            served += 1;
        }
        let (r, out) = dripper.join().unwrap();
        assert_eq!((r.request_id, r.status), (5, Status::Ok));
        assert_eq!(out, reference::to_uppercase(&payload));
        eprintln!(
            "{served} small calls served during the {:?} drip",
            start.elapsed()
        );
        assert!(served > 50, "other clients starved: {served}");
    });
}

#[test]
fn pool_exhaustion_answers_busy_and_memory_stays_flat() {
    let node = TestNode::start("reassembly_buffers = 4\nreassembly_buffer_bytes = 1048576\n");
    let header = CallHeader::call(1, 1, 1_000_000, params::NONE).encode();
    let rss_start = node.rss_kib();
    let mut busy = 0;
    // Hold every buffer with partial payloads, then keep asking for more.
    let holders: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(node.rac_addr).unwrap();
            s.write_all(&header).unwrap();
            s.write_all(&[0; 1000]).unwrap();
            s
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.metric("netaccel_reassembly_buffers_in_use") != 4.0 {
        assert!(
            Instant::now() < deadline,
            "the holders did not take all 4 reassembly buffers: {} in use",
            node.metric("netaccel_reassembly_buffers_in_use")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for round in 0..200 {
        let mut s = TcpStream::connect(node.rac_addr).unwrap();
        s.write_all(&header).unwrap();
        s.write_all(&[0; 100]).unwrap();
        let (r, _) = read_result(&mut s);
        assert_eq!(r.status, Status::Busy, "round {round}");
        busy += 1;
    }
    let rss_end = node.rss_kib();
    eprintln!("{busy} BUSY refusals; node RSS {rss_start} KiB -> {rss_end} KiB");
    assert!(
        rss_end < rss_start + 16 * 1024,
        "memory grew from {rss_start} to {rss_end} KiB"
    );
    // Clients that disconnect mid-call give their buffers back.
    drop(holders);
    let deadline = Instant::now() + Duration::from_secs(5);
    while node.metric("netaccel_reassembly_buffers_in_use") != 0.0 {
        assert!(Instant::now() < deadline, "reassembly buffers leaked");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        node.metric("netaccel_connections_open{protocol=\"rac\"}"),
        0.0
    );
}

#[test]
fn disconnect_with_calls_queued_leaks_nothing() {
    let node = TestNode::start("inline_work_max = 0\n[[slots]]\naccelerator = \"matmul\"\n");
    let n = 200u32;
    let big = f32_bytes(&vec![1.0; 2 * (n * n) as usize]);
    {
        let mut s = TcpStream::connect(node.rac_addr).unwrap();
        for id in 0..8 {
            s.write_all(&CallHeader::call(7, id, big.len() as u32, params::matmul(n)).encode())
                .unwrap();
            s.write_all(&big).unwrap();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let idle = node.metric("netaccel_rac_in_flight_calls") == 0.0
            && node.metric("netaccel_reassembly_buffers_in_use") == 0.0
            && node.metric("netaccel_connections_open{protocol=\"rac\"}") == 0.0;
        if idle {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "in-flight calls or buffers leaked after disconnect"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The slot is still in service.
    let rt = runtime();
    rt.block_on(async {
        let c = RacClient::connect(&node.rac_addr.to_string())
            .await
            .unwrap();
        let out = c
            .call(7, params::matmul(1), f32_bytes(&[2.0, 3.0]), 0)
            .await
            .unwrap();
        assert_eq!(f32s(&out.payload), vec![6.0]);
    });
}

#[test]
fn control_catalog_and_slots_match_http() {
    let node = TestNode::start("");
    let rt = runtime();
    rt.block_on(async {
        let c = RacClient::connect(&node.rac_addr.to_string())
            .await
            .unwrap();
        let catalog = c
            .control(&ControlRequest::Catalog { token: None })
            .await
            .unwrap();
        let http: serde_json::Value = node.get_json("/v1/accelerators");
        assert_eq!(catalog, http);
        let slots = c
            .control(&ControlRequest::Slots { token: None })
            .await
            .unwrap();
        assert_eq!(slots.as_array().unwrap().len(), 7);
        // Without an admin token configured, load needs none.
        let load = ControlRequest::Load {
            slot: 0,
            accelerator: "sobel".into(),
            token: None,
        };
        assert_eq!(c.control(&load).await.unwrap()["slot"], 0);
        let hello = ControlRequest::Hello {
            tenant: "ghost".into(),
            token: None,
        };
        assert!(matches!(
            c.control(&hello).await,
            Err(RacError::Status {
                status: Status::Unauthorized,
                ..
            })
        ));
        // Malformed control JSON: BAD_REQUEST, connection kept.
        c.send_raw(&CallHeader::control(900, 5).encode())
            .await
            .unwrap();
        c.send_raw(b"{nope").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            status_of(c.call(3, params::topk(1), i32_bytes(&[4]), 0).await),
            Status::Ok
        );
    });
}

#[test]
fn a_tenant_at_its_in_flight_bound_is_paused_not_refused() {
    // Every call queues (no inline execution); a tenant may have 2 queued at a time.
    let node = TestNode::start(
        "inline_work_max = 0\ntenant_in_flight_max = 2\n[[tenants]]\nname = \"t\"\ntoken = \"k\"\n\
         [[slots]]\naccelerator = \"topk\"\n",
    );
    let rt = runtime();
    rt.block_on(async {
        let hello = ControlRequest::Hello {
            tenant: "t".into(),
            token: Some("k".into()),
        };
        let a = RacClient::connect(&node.rac_addr.to_string())
            .await
            .unwrap();
        let b = RacClient::connect(&node.rac_addr.to_string())
            .await
            .unwrap();
        a.control(&hello).await.unwrap();
        b.control(&hello).await.unwrap();
        let values: Vec<i32> = (0..20_000).collect();
        let payload = i32_bytes(&values);
        let calls = (0..20u32).map(|i| {
            let c = if i % 2 == 0 { &a } else { &b };
            c.call(3, params::topk(1 + i), payload.clone(), 0)
        });
        let results = futures_join_all(calls).await;
        for (i, r) in results.into_iter().enumerate() {
            let out = r.unwrap_or_else(|e| panic!("call {i}: {e}"));
            assert_eq!(i32s(&out.payload)[0], 19_999, "call {i}");
            assert_eq!(out.payload.len(), 4 * (1 + i));
        }
    });
    assert_eq!(
        node.metric("netaccel_busy_refusals_total{protocol=\"rac\"}"),
        0.0
    );
    assert_eq!(node.metric("netaccel_rac_in_flight_calls"), 0.0);
}

#[test]
fn a_failing_kernel_answers_internal_and_the_connection_carries_on() {
    let node = TestNode::start("fault_injection = true\n[[slots]]\naccelerator = \"fault\"\n");
    let rt = runtime();
    rt.block_on(async {
        let c = RacClient::connect(&node.rac_addr.to_string())
            .await
            .unwrap();
        for payload in [b"panic".as_slice(), b"error"] {
            assert_eq!(
                status_of(
                    c.call(accel::FAULT_ID, params::NONE, payload.to_vec(), 0)
                        .await
                ),
                Status::Internal
            );
        }
        let ok = c
            .call(accel::FAULT_ID, params::NONE, b"fine".to_vec(), 0)
            .await
            .unwrap();
        assert_eq!(ok.payload, b"fine");
    });
}

#[test]
fn a_large_result_to_a_slow_reader_arrives_whole() {
    // 8 MiB does not fit the socket's send buffer: the node writes part of the result
    // at once and the rest as the client reads.
    let node = TestNode::start("");
    let mut s = TcpStream::connect(node.rac_addr).unwrap();
    let mut rng = Rng(7);
    for id in 1..=2u32 {
        let payload = rng.bytes(8 << 20);
        s.write_all(&CallHeader::call(1, id, payload.len() as u32, params::NONE).encode())
            .unwrap();
        s.write_all(&payload).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let (r, out) = read_result(&mut s);
        assert_eq!((r.request_id, r.status), (id, Status::Ok));
        assert!(out == payload, "result {id} differs from its payload");
    }
}
