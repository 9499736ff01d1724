//! Black-box tests of the io_uring network path (`network = "io_uring"`) beyond what
//! the front-end, overload and drain suites check when test.sh runs them again with
//! `NETACCEL_TEST_NETWORK=io_uring`: that the node is really on the ring (and not
//! silently on epoll), large and pipelined input through the provided buffers, clients
//! that stop reading and resume, and that a closed connection is closed (an armed
//! multishot receive holds its socket open).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

/// A node on io_uring, or `None` (a skip outside CI) when the kernel refuses it.
fn uring_node(config: &str) -> Option<TestNode> {
    let node = TestNode::start_logging(
        &format!("network = \"io_uring\"\n{config}"),
        &["--log-level", "info"],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = node.log();
        if log.contains("refuses io_uring") {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "the kernel refuses io_uring; CI needs it: {log}"
            );
            eprintln!("SKIP: the kernel refuses io_uring here");
            return None;
        }
        if log.contains("netaccel node listening") {
            assert!(log.contains("network=IoUring"), "not on io_uring: {log}");
            return Some(node);
        }
        assert!(Instant::now() < deadline, "no start-up line: {log}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn upper_request(body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST /v1/fn/to_uppercase HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// The whole responses at the start of `data` (status and body; Content-Length
/// framed), stopping at the first incomplete one.
fn whole_responses(mut data: &[u8]) -> Vec<(u16, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = std::str::from_utf8(&data[..end]).unwrap();
        let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
        let len: usize = head
            .split("\r\n")
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        if data.len() < end + 4 + len {
            break;
        }
        out.push((status, data[end + 4..end + 4 + len].to_vec()));
        data = &data[end + 4 + len..];
    }
    out
}

/// Reads `n` whole responses from `s` within `within`.
fn read_responses(s: &mut TcpStream, n: usize, within: Duration) -> Vec<(u16, Vec<u8>)> {
    let deadline = Instant::now() + within;
    let mut data = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let got = whole_responses(&data);
        if got.len() >= n {
            return got;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "{} of {n} responses in time", got.len());
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => panic!("connection closed after {} of {n} responses", got.len()),
            Ok(k) => data.extend_from_slice(&buf[..k]),
            Err(e) => panic!("after {} of {n} responses: {e}", got.len()),
        }
    }
}

#[test]
fn serves_large_and_pipelined_input_through_the_ring() {
    let Some(node) = uring_node("") else {
        return;
    };
    let mut rng = Rng(7);
    let mut s = TcpStream::connect(node.addr).unwrap();
    // Bodies that span many provided buffers (4 KiB each), one request split over
    // many writes, and requests pipelined in one write.
    for len in [1, 4095, 4096, 4097, 100_000, 1_000_000] {
        let body: Vec<u8> = rng.bytes(len).iter().map(|b| b'a' + b % 26).collect();
        let request = upper_request(&body);
        for part in request.chunks(70_001) {
            s.write_all(part).unwrap();
        }
        let r = read_responses(&mut s, 1, Duration::from_secs(20));
        assert_eq!(r[0].0, 200);
        assert_eq!(r[0].1, body.to_ascii_uppercase(), "body of {len} bytes");
    }
    let mut batch = Vec::new();
    for i in 0..50 {
        batch.extend_from_slice(&upper_request(format!("call {i}").as_bytes()));
    }
    s.write_all(&batch).unwrap();
    let r = read_responses(&mut s, 50, Duration::from_secs(20));
    for (i, r) in r.iter().enumerate() {
        assert_eq!(r.1, format!("CALL {i}").into_bytes());
    }
}

/// Makes the node's writes to `s` stall as soon as the client stops reading: a small
/// receive buffer (no autotuning, but above the loopback MSS so that the window
/// still opens) keeps the window small.
fn small_receive_buffer(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 128 * 1024;
    // SAFETY: a valid socket and a pointer to an int of the size given.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
}

/// Clients that pipeline many calls and stop reading the answers, then read again:
/// every call is answered, in order, none lost, and another client is served
/// meanwhile. (Whether the node's writes stall, and so whether the receive buffers
/// are put to the test, depends on the kernel's socket buffers: this run does not
/// show that the per-connection bound on unread input is what keeps it passing.)
#[test]
fn clients_that_stop_reading_and_resume_get_every_answer() {
    let Some(node) = uring_node("io_threads = 1\n") else {
        return;
    };
    const CLIENTS: usize = 48;
    const CALLS: usize = 64;
    const BODY: usize = 16 * 1024;
    let mut stalled = Vec::new();
    for c in 0..CLIENTS {
        let s = TcpStream::connect(node.addr).unwrap();
        small_receive_buffer(&s);
        let mut batch = Vec::new();
        for i in 0..CALLS {
            let mut body = vec![b'a' + (c % 26) as u8; BODY];
            body[..8].copy_from_slice(format!("{i:08}").as_bytes());
            batch.extend_from_slice(&upper_request(&body));
        }
        // Written from a thread: the node stops reading once the answers fill the
        // client's receive buffer, and then this write blocks.
        let writer = s.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut writer = writer;
            let _ = writer.write_all(&batch);
        });
        stalled.push(s);
    }
    // 48 x 64 x 16 KiB = 48 MiB of calls against 8 MiB of receive buffers.
    let other = Instant::now();
    let mut s = TcpStream::connect(node.addr).unwrap();
    for i in 0..20 {
        s.write_all(&upper_request(format!("other {i}").as_bytes()))
            .unwrap();
        let r = read_responses(&mut s, 1, Duration::from_secs(5));
        assert_eq!(r[0].1, format!("OTHER {i}").into_bytes());
    }
    assert!(
        other.elapsed() < Duration::from_secs(5),
        "the other client waited {:?}",
        other.elapsed()
    );
    for (c, mut s) in stalled.into_iter().enumerate() {
        let r = read_responses(&mut s, CALLS, Duration::from_secs(30));
        for (i, r) in r.iter().enumerate() {
            assert_eq!(r.0, 200);
            assert_eq!(r.1.len(), BODY);
            assert_eq!(&r.1[..8], format!("{i:08}").as_bytes(), "client {c}");
        }
    }
}

/// The node's idle timeout ends a connection whose receive is armed: the client sees
/// the end of the stream (an armed receive left behind would keep the socket open).
#[test]
fn idle_connections_are_closed() {
    let Some(node) = uring_node("idle_timeout_ms = 300\n") else {
        return;
    };
    let mut clients: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(node.addr).unwrap())
        .collect();
    // One that made a call first, so that the connection has been through the ring.
    clients[0].write_all(&upper_request(b"x")).unwrap();
    read_responses(&mut clients[0], 1, Duration::from_secs(5));
    for mut c in clients {
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut rest = Vec::new();
        let started = Instant::now();
        c.read_to_end(&mut rest)
            .expect("the node closes the connection");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    // The query itself is one open HTTP connection.
    while node.metric("netaccel_connections_open{protocol=\"http\"}") > 1.0 {
        assert!(Instant::now() < deadline, "connections still counted");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A node configured for io_uring on a kernel that refuses it (here: a seccomp filter
/// that fails `io_uring_setup`, as container runtimes' default profiles do) says so in
/// an ERROR line, serves on epoll, and answers HTTP and RAC calls.
#[test]
fn a_node_the_kernel_refuses_io_uring_serves_on_epoll_and_says_why() {
    let node = TestNode::start_logging_without_io_uring(
        "network = \"io_uring\"\n",
        &["--log-level", "info"],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = node.log();
        if log.contains("netaccel node listening") {
            break log;
        }
        assert!(Instant::now() < deadline, "no start-up line: {log}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        log.contains("ERROR") && log.contains("the kernel refuses io_uring"),
        "{log}"
    );
    assert!(log.contains("network=Epoll"), "not on epoll: {log}");
    let mut c = TcpStream::connect(node.addr).unwrap();
    c.write_all(&upper_request(b"still served")).unwrap();
    let got = read_until_quiet(&mut c, Duration::from_millis(300));
    assert_eq!(whole_responses(&got), [(200, b"STILL SERVED".to_vec())]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let rac = netaccel_client::rac::RacClient::connect(&node.rac_addr.to_string())
            .await
            .unwrap();
        // to_uppercase's id in the spec's catalog.
        let id = 2;
        let answer = rac.call(id, [0; 44], b"rac too".to_vec(), 0).await.unwrap();
        assert_eq!(answer.payload, b"RAC TOO");
    });
}
