//! Cancellation, black box (issue 30, item 6): a slot is held busy by one call, more
//! calls queue behind it, their clients leave — HTTP clients close their connections,
//! gRPC clients cancel their calls or their stream — and the queue empties at once,
//! without running them, while the call in progress finishes and other clients are
//! served. Every call is accounted for once: the slot's calls ran (`slot_calls`) plus
//! those cancelled while queued are all the calls sent.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{free_addr, TestNode};
use netaccel_node::front::grpc::pb;
use pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use pb::model_infer_request::InferInputTensor;
use tonic::transport::Channel;

/// How long the call that holds the slot runs: long enough for the rest of each test
/// to happen meanwhile on a loaded machine.
const HOLD_US: u64 = 2_000_000;
/// Calls queued behind it whose clients leave.
const LEAVING: usize = 6;

const QUEUED_CANCELLED: &str = "netaccel_slot_cancelled_calls_total{slot=\"0\",stage=\"queued\"}";
const RUNNING_CANCELLED: &str = "netaccel_slot_cancelled_calls_total{slot=\"0\",stage=\"running\"}";
const RAN: &str = "netaccel_slot_calls_total{slot=\"0\"}";

/// A node with one `echo` slot whose every call holds it [`HOLD_US`], serving gRPC on
/// a free port too.
fn start() -> (TestNode, SocketAddr) {
    TestNode::start_with(|| {
        let grpc = free_addr();
        let config = format!(
            "grpc = \"{grpc}\"\nsimulated_exec_us = {HOLD_US}\nqueue_depth_max = 16\n\
             tenant_queue_depth_max = 16\n[[slots]]\naccelerator = \"echo\"\n"
        );
        (config, grpc)
    })
}

/// Waits (at most 10 s) until `what` holds of slot 0's state.
fn wait_slot(node: &TestNode, what: &str, ok: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let slot = node.get_json("/v1/slots/0");
        if ok(&slot) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {slot}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn busy_with_queue(node: &TestNode, queued: usize) {
    wait_slot(node, &format!("busy with {queued} queued"), |s| {
        s["state"] == "busy" && s["queue_depth"] == queued
    });
}

/// Waits until the calls whose clients left are counted and the queue is empty, and
/// checks the call holding the slot is still running: they were withdrawn, not run.
fn withdrawn(node: &TestNode, leaving: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.metric(QUEUED_CANCELLED) < leaving as f64 {
        assert!(
            Instant::now() < deadline,
            "{} of {leaving} calls withdrawn",
            node.metric(QUEUED_CANCELLED)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(node.metric(QUEUED_CANCELLED), leaving as f64);
    let slot = node.get_json("/v1/slots/0");
    assert_eq!(slot["queue_depth"], 0, "{slot}");
    assert_eq!(
        slot["state"], "busy",
        "withdrawn before the slot was free: {slot}"
    );
}

fn post_echo(node: &TestNode, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    ureq::post(&node.url("/v1/fn/echo"))
        .send_bytes(body)
        .unwrap()
        .into_reader()
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[test]
fn http_calls_whose_connections_close_leave_the_queue_unrun() {
    let (node, _) = start();
    let held = std::thread::scope(|scope| {
        let holder = scope.spawn(|| post_echo(&node, b"held"));
        busy_with_queue(&node, 0);
        let mut leaving = Vec::new();
        for i in 0..LEAVING {
            let mut s = TcpStream::connect(node.addr).unwrap();
            let body = format!("gone{i}");
            let head = format!(
                "POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            s.write_all(head.as_bytes()).unwrap();
            s.write_all(body.as_bytes()).unwrap();
            leaving.push(s);
        }
        busy_with_queue(&node, LEAVING);
        drop(leaving);
        withdrawn(&node, LEAVING);
        // Another client is served, after the call in progress.
        assert_eq!(post_echo(&node, b"stayed"), b"stayed");
        holder.join().unwrap()
    });
    assert_eq!(
        held, b"held",
        "the call in progress finished and was answered"
    );
    assert_eq!(
        node.metric(RAN),
        2.0,
        "only the calls whose clients stayed ran"
    );
    assert_eq!(node.metric(RUNNING_CANCELLED), 0.0);
}

async fn grpc_client(addr: SocketAddr) -> GrpcInferenceServiceClient<Channel> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
        {
            Ok(channel) => return GrpcInferenceServiceClient::new(channel),
            Err(e) if Instant::now() > deadline => panic!("cannot connect to {addr}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

fn echo_request(byte: u8) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: "echo".into(),
        id: format!("call-{byte}"),
        inputs: vec![InferInputTensor {
            name: "INPUT0".into(),
            datatype: "UINT8".into(),
            shape: vec![1],
            ..Default::default()
        }],
        raw_input_contents: vec![vec![byte].into()],
        ..Default::default()
    }
}

/// [`busy_with_queue`] from async code: polled between turns of the runtime so that the
/// calls' requests go out meanwhile.
async fn busy_with_queue_async(node: &TestNode, queued: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let slot = node.get_json("/v1/slots/0");
        if slot["state"] == "busy" && slot["queue_depth"] == queued {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "busy with {queued} queued: {slot}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_cancelled_by_their_clients_leave_the_queue_unrun() {
    let (node, addr) = start();
    let c = grpc_client(addr).await;
    let mut holder_client = c.clone();
    let holder = tokio::spawn(async move { holder_client.model_infer(echo_request(0)).await });
    busy_with_queue_async(&node, 0).await;
    let leaving: Vec<_> = (1..=LEAVING as u8)
        .map(|b| {
            let mut c = c.clone();
            tokio::spawn(async move { c.model_infer(echo_request(b)).await })
        })
        .collect();
    busy_with_queue_async(&node, LEAVING).await;
    // Cancelling the task drops the call: tonic resets its HTTP/2 stream.
    for call in &leaving {
        call.abort();
    }
    tokio::task::block_in_place(|| withdrawn(&node, LEAVING));

    // A stream whose requests queue, then cancelled by its client.
    let (tx, rx) = tokio::sync::mpsc::channel(LEAVING);
    let mut stream_client = c.clone();
    let answers = stream_client
        .model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    for b in 0..LEAVING as u8 {
        tx.send(echo_request(100 + b)).await.unwrap();
    }
    busy_with_queue_async(&node, LEAVING).await;
    drop(answers);
    drop(tx);
    tokio::task::block_in_place(|| withdrawn(&node, 2 * LEAVING));

    // Another client is served after the call in progress, which is answered.
    let mut other = c.clone();
    let stayed = other
        .model_infer(echo_request(7))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stayed.raw_output_contents[0].as_ref(), [7]);
    let held = holder.await.unwrap().unwrap().into_inner();
    assert_eq!(held.raw_output_contents[0].as_ref(), [0]);
    assert_eq!(
        node.metric(RAN),
        2.0,
        "only the calls whose clients stayed ran"
    );
    assert_eq!(node.metric(RUNNING_CANCELLED), 0.0);
}

#[test]
fn a_call_running_when_its_client_leaves_finishes_and_is_counted() {
    let (node, _) = start();
    let mut s = TcpStream::connect(node.addr).unwrap();
    s.write_all(b"POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nbye")
        .unwrap();
    busy_with_queue(&node, 0);
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.metric(RUNNING_CANCELLED) < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the running call was not counted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(node.metric(RAN), 1.0, "it ran to its end");
    assert_eq!(node.metric(QUEUED_CANCELLED), 0.0);
    assert_eq!(
        post_echo(&node, b"next"),
        b"next",
        "the slot serves the next call"
    );
}
