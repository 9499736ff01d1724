//! The client against a fake node on loopback that answers when the test says: the
//! bound on calls in flight, and the typed errors of a connection refused or broken.

use std::time::Duration;

use rac_proto::{CallHeader, Decoded, ResultHeader, Status, HEADER_LEN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::{ErrorKind, RacClient, RacError, IN_FLIGHT_MAX_DEFAULT};

/// A fake node: every call header it reads goes to `seen`; every 64-byte block sent
/// to `reply` is written back as it is.
struct FakeNode {
    addr: String,
    seen: mpsc::UnboundedReceiver<CallHeader>,
    reply: mpsc::UnboundedSender<[u8; HEADER_LEN]>,
}

async fn fake_node() -> FakeNode {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (seen_tx, seen) = mpsc::unbounded_channel();
    let (reply, mut reply_rx) = mpsc::unbounded_channel::<[u8; HEADER_LEN]>();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("accept");
        let (mut read, mut write) = stream.into_split();
        tokio::spawn(async move {
            while let Some(block) = reply_rx.recv().await {
                if write.write_all(&block).await.is_err() {
                    break;
                }
            }
        });
        let mut head = [0u8; HEADER_LEN];
        while read.read_exact(&mut head).await.is_ok() {
            let Ok(Decoded::Complete(h, _)) = CallHeader::decode(&head, 1 << 20) else {
                panic!("the client sent a bad header");
            };
            let mut payload = vec![0; h.payload_len as usize];
            read.read_exact(&mut payload).await.expect("payload");
            if seen_tx.send(h).is_err() {
                break;
            }
        }
    });
    FakeNode { addr, seen, reply }
}

impl FakeNode {
    async fn next_call(&mut self) -> CallHeader {
        tokio::time::timeout(Duration::from_secs(5), self.seen.recv())
            .await
            .expect("a call within 5 s")
            .expect("the fake is running")
    }

    /// No call arrives within 200 ms.
    async fn no_call(&mut self) {
        let more = tokio::time::timeout(Duration::from_millis(200), self.seen.recv()).await;
        assert!(more.is_err(), "a call past the bound: {more:?}");
    }

    fn answer(&self, call: &CallHeader, status: Status) {
        let header = ResultHeader::answer(call, status, 0);
        self.reply.send(header.encode()).expect("fake writer");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn callers_wait_for_room_when_the_bound_is_reached() {
    let mut node = fake_node().await;
    let client = RacClient::connect(&node.addr).await.expect("connect");
    assert_eq!(client.in_flight_max, IN_FLIGHT_MAX_DEFAULT);
    let client = std::sync::Arc::new(client.with_in_flight_max(4));
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let client = std::sync::Arc::clone(&client);
            tokio::spawn(async move { client.call(0, [0; 44], vec![7; 16], 0).await })
        })
        .collect();
    let mut open = Vec::new();
    for _ in 0..4 {
        open.push(node.next_call().await);
    }
    node.no_call().await;
    assert_eq!(client.in_flight(), 4);
    // Two answers make room for exactly two more.
    for call in open.drain(..2) {
        node.answer(&call, Status::Ok);
    }
    for _ in 0..2 {
        open.push(node.next_call().await);
    }
    node.no_call().await;
    assert_eq!(client.in_flight(), 4);
    let mut answered = 2;
    while let Some(call) = open.pop() {
        node.answer(&call, Status::Ok);
        answered += 1;
        if answered <= 6 {
            open.push(node.next_call().await);
        }
    }
    assert_eq!(answered, 10);
    for call in calls {
        call.await.expect("task").expect("OK");
    }
    assert_eq!(client.in_flight(), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn pipelined_calls_are_sent_before_any_result_and_matched_by_id() {
    let mut node = fake_node().await;
    let client = RacClient::connect(&node.addr).await.expect("connect");
    let first = client.submit(0, [0; 44], b"a", 0).await.expect("sent");
    let second = client.submit(0, [0; 44], b"b", 0).await.expect("sent");
    let (a, b) = (node.next_call().await, node.next_call().await);
    assert_ne!(a.request_id, b.request_id);
    // Out of order: the second's answer first.
    node.answer(&b, Status::Busy);
    node.answer(&a, Status::Ok);
    let busy = second.await.expect_err("BUSY");
    assert!(matches!(
        busy,
        RacError::Status {
            status: Status::Busy,
            ..
        }
    ));
    assert_eq!(busy.retry_after(), Some(super::RETRY_AFTER));
    assert_eq!(first.await.expect("OK").header.request_id, a.request_id);
}

#[tokio::test(flavor = "current_thread")]
async fn an_answer_to_the_connection_fails_every_call_with_its_status() {
    let mut node = fake_node().await;
    let client = RacClient::connect(&node.addr).await.expect("connect");
    let pending = client.submit(0, [0; 44], b"a", 0).await.expect("sent");
    let call = node.next_call().await;
    let mut refusal = ResultHeader::answer(&call, Status::Busy, 0);
    refusal.request_id = 0;
    node.reply.send(refusal.encode()).expect("fake writer");
    drop(node);
    for e in [
        pending.await.expect_err("refused"),
        client
            .call(0, [0; 44], vec![], 0)
            .await
            .expect_err("refused"),
    ] {
        assert!(
            matches!(
                e,
                RacError::Refused {
                    status: Status::Busy,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.kind(), ErrorKind::Busy);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_reply_the_client_refuses_and_a_close_are_told_apart() {
    let mut node = fake_node().await;
    let client = RacClient::connect(&node.addr).await.expect("connect");
    let pending = client.submit(0, [0; 44], b"a", 0).await.expect("sent");
    node.next_call().await;
    node.reply.send([0xEE; HEADER_LEN]).expect("fake writer");
    let e = pending.await.expect_err("bad magic");
    assert!(matches!(e, RacError::Protocol(_)), "{e:?}");

    let mut node = fake_node().await;
    let client = RacClient::connect(&node.addr).await.expect("connect");
    let pending = client.submit(0, [0; 44], b"a", 0).await.expect("sent");
    node.next_call().await;
    drop(node);
    let e = pending.await.expect_err("closed");
    assert!(matches!(e, RacError::Closed(_)), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Closed);
}
