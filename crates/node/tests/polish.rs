//! Black-box tests of what a new user tripped over (issue "product polish"): start-up
//! checks of the configuration, metrics that count every refusal, HTTP details (HEAD,
//! Host, Location, `Connection: close`, early end of input) and the node's logs.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use rac_proto::{params, CallHeader, Decoded, ResultHeader, Status, HEADER_LEN};

/// Polls `cond` until it holds; fails with `what` after 10 s.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads one RAC result (header and payload) from a blocking stream.
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

fn busy_metrics(node: &TestNode, accelerator: &str) -> (f64, f64, f64) {
    (
        node.metric("netaccel_busy_refusals_total{protocol=\"http\"}"),
        node.metric("netaccel_busy_refusals_total{protocol=\"rac\"}"),
        node.metric(&format!(
            "netaccel_accelerator_calls_total{{accelerator=\"{accelerator}\",status=\"BUSY\"}}"
        )),
    )
}

#[test]
fn an_empty_admin_token_or_slot_list_is_refused_at_start() {
    let (code, stderr) = start_refused("admin_token = \"\"\n", &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("admin_token is empty"), "{stderr}");

    let (code, stderr) = start_refused("slots = []\n", &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("slots = [] configures no slot"), "{stderr}");
}

/// Issue 29: `body_bytes_max = 0` was accepted and a slot naming an unknown
/// accelerator exited 1 while other configuration errors exited 2. Every configuration
/// error exits 2 naming what is wrong; 1 is left for what the configuration names but
/// cannot be had (here, an address another process holds).
#[test]
fn every_configuration_error_exits_2_and_a_taken_address_1() {
    for (config, said) in [
        ("body_bytes_max = 0\n", "body_bytes_max must be at least 1"),
        (
            "idle_timeout_ms = 0\n",
            "idle_timeout_ms must be at least 1",
        ),
        (
            "connections_max = 0\n",
            "connections_max must be at least 1",
        ),
        (
            "[[slots]]\naccelerator = \"nosuch\"\n",
            "slot accelerator `nosuch` is not in the catalog",
        ),
    ] {
        let (code, stderr) = start_refused(config, &[]);
        assert_eq!(code, Some(2), "{config}: {stderr}");
        assert!(stderr.contains(said), "{config}: {stderr}");
        assert!(
            stderr.contains("invalid configuration"),
            "{config}: {stderr}"
        );
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, stderr) = start_refused("", &["--http", &addr]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(&addr), "{stderr}");
}

/// Issue 29: `--help` was a flat list with `--config` buried under TLS, no gRPC
/// default, nothing on signals, and TLS listeners that did not say they need a
/// certificate and key.
#[test]
fn help_groups_the_options_and_says_the_defaults_signals_and_what_tls_needs() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_netaccel-node"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let at = |what: &str| {
        help.find(what)
            .unwrap_or_else(|| panic!("--help does not say {what:?}:\n{help}"))
    };
    // --config first, then the groups in this order.
    let mut last = at("--config");
    for heading in [
        "Listeners:",
        "TLS:",
        "Devices and models:",
        "Cluster:",
        "Limits:",
        "Logs:",
    ] {
        assert!(at(heading) > last, "{heading} out of order:\n{help}");
        last = at(heading);
    }
    assert!(at("--http") > at("Listeners:") && at("--http") < at("TLS:"));
    assert!(at("--rac-tls") > at("TLS:") && at("--rac-tls") < at("Devices and models:"));
    assert!(at("--registry") > at("Cluster:"));
    // The gRPC default, and what happens when it is taken.
    let grpc = &help[at("--grpc <ADDR|off>")..at("--opencl <ADDR>")];
    assert!(grpc.contains("127.0.0.1:8001"), "{grpc}");
    assert!(grpc.contains("taken") && grpc.contains("warns"), "{grpc}");
    for tls in ["--https <ADDR>", "--rac-tls <ADDR>", "--grpc-tls <ADDR>"] {
        let line = &help[at(tls)..];
        let line = &line[..line.find("\n\n").unwrap_or(line.len())];
        assert!(
            line.contains("needs --tls-cert and --tls-key"),
            "{tls}: {line}"
        );
    }
    assert!(
        help.contains("SIGTERM") && help.contains("drains"),
        "{help}"
    );
    assert!(help.contains("SIGHUP reloads the TLS"), "{help}");
    assert!(help.contains("2 for any configuration error"), "{help}");
}

#[test]
fn an_invalid_log_level_is_refused_at_start_with_the_valid_ones_listed() {
    let (code, stderr) = start_refused("log_level = \"verbose\"\n", &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("log level `verbose` is not valid"),
        "{stderr}"
    );
    assert!(
        stderr.contains("off, error, warn, info, debug, trace"),
        "{stderr}"
    );

    let (code, stderr) = start_refused("", &["--log-level", "loud"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("log level `loud` is not valid"), "{stderr}");

    // A tracing filter is still a valid level.
    let node = TestNode::start_logging("", &["--log-level", "warn,netaccel_node=debug"]);
    assert_eq!(node.get_json("/health")["status"], "ok");
    // `info` lines of the node pass the filter although the default level is `warn`.
    assert!(
        node.log().contains("netaccel node listening"),
        "{}",
        node.log()
    );
}

#[test]
fn every_busy_refusal_is_counted_once_by_protocol_and_by_accelerator() {
    // Body memory for one 1000-byte body, one reassembly buffer.
    let node = TestNode::start(
        "body_bytes_max = 1000\nbody_memory_bytes_max = 1000\n\
         reassembly_buffers = 1\nreassembly_buffer_bytes = 1048576\n",
    );
    assert_eq!(busy_metrics(&node, "echo"), (0.0, 0.0, 0.0));

    // HTTP: a half-sent body holds all the body memory; the next call is refused.
    let mut holder = TcpStream::connect(node.addr).unwrap();
    holder
        .write_all(b"POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nab")
        .unwrap();
    wait_until("the body memory is taken", || {
        node.metric("netaccel_body_memory_bytes") == 1000.0
    });
    match ureq::post(&node.url("/v1/fn/echo")).send_bytes(b"0123456789") {
        Err(ureq::Error::Status(503, r)) => {
            let v: serde_json::Value = r.into_json().unwrap();
            assert_eq!(v["code"], "BUSY");
        }
        other => panic!("expected 503 BUSY, got {other:?}"),
    }
    assert_eq!(busy_metrics(&node, "echo"), (1.0, 0.0, 1.0));

    // RAC: a half-sent payload holds the only reassembly buffer; the next is refused.
    let mut rac_holder = TcpStream::connect(node.rac_addr).unwrap();
    rac_holder
        .write_all(&CallHeader::call(1, 1, 1_000_000, params::NONE).encode())
        .unwrap();
    rac_holder.write_all(&[0; 1000]).unwrap();
    wait_until("the reassembly buffer is taken", || {
        node.metric("netaccel_reassembly_buffers_in_use") == 1.0
    });
    let mut s = TcpStream::connect(node.rac_addr).unwrap();
    s.write_all(&CallHeader::call(1, 2, 100_000, params::NONE).encode())
        .unwrap();
    s.write_all(&[0; 100]).unwrap();
    let (result, _) = read_result(&mut s);
    assert_eq!(result.status, Status::Busy);
    assert_eq!(busy_metrics(&node, "echo"), (1.0, 1.0, 2.0));
    drop((holder, rac_holder));
}

#[test]
fn http_calls_refused_by_full_slots_are_counted() {
    // One matmul slot that queues everything, with room for one queued call: of
    // concurrent long calls, those that find it full are refused BUSY by the
    // dispatcher (and, with `Expect: 100-continue`, before their body is read).
    let node = TestNode::start(
        "inline_work_max = 0\nqueue_depth_max = 1\ntenant_queue_depth_max = 1\n\
         [[slots]]\naccelerator = \"matmul\"\n",
    );
    let n = 300;
    let payload = f32_bytes(&vec![1.0; 2 * n * n]);
    let file = std::env::temp_dir().join(format!("netaccel-busy-{}.bin", std::process::id()));
    std::fs::write(&file, &payload).unwrap();
    let data = format!("@{}", file.display());
    let url = node.url(&format!("/v1/fn/matmul?n={n}"));
    let mut busy = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while busy == 0 {
        assert!(Instant::now() < deadline, "no call was ever refused BUSY");
        let answers: Vec<(u16, Vec<u8>)> = std::thread::scope(|s| {
            let calls: Vec<_> = (0..6)
                .map(|i| {
                    let (url, payload, data) = (&url, &payload, &data);
                    s.spawn(move || {
                        if i % 2 == 1 {
                            // curl waits for `100 Continue` as a client should.
                            let expect = ["-H", "Expect: 100-continue", "--data-binary"];
                            return curl(&[&expect[..], &[data.as_str(), url.as_str()]].concat());
                        }
                        match ureq::post(url).send_bytes(payload) {
                            Ok(r) => (r.status(), Vec::new()),
                            Err(ureq::Error::Status(code, r)) => {
                                let mut body = Vec::new();
                                r.into_reader().read_to_end(&mut body).unwrap();
                                (code, body)
                            }
                            Err(e) => panic!("{e}"),
                        }
                    })
                })
                .collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        for (code, body) in &answers {
            if *code != 200 {
                let v: serde_json::Value = serde_json::from_slice(body).unwrap();
                assert_eq!((*code, v["code"].as_str()), (503, Some("BUSY")));
                busy += 1;
            }
        }
    }
    let _ = std::fs::remove_file(&file);
    let busy = busy as f64;
    assert_eq!(busy_metrics(&node, "matmul"), (busy, 0.0, busy));
}

#[test]
fn the_location_of_a_new_object_finds_it_whatever_its_key() {
    let node = TestNode::start("");
    for (i, key) in ["a b?c#d", "ünïcödé/1", "100%?", "plain"]
        .iter()
        .enumerate()
    {
        // The client encodes the key as a path; the node decodes it.
        let encoded: String = key
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'0'..=b'9' | b'/' => char::from(b).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let body = format!("object {i}");
        let put = ureq::put(&node.url(&format!("/v1/objects/{encoded}")))
            .send_bytes(body.as_bytes())
            .unwrap();
        assert_eq!(put.status(), 201, "{key}");
        let location = put.header("location").unwrap().to_string();
        let got = ureq::get(&node.url(&location))
            .call()
            .unwrap_or_else(|e| panic!("GET {location} for key {key:?}: {e}"));
        assert_eq!(got.into_string().unwrap(), body, "{key}");
    }
}

#[test]
fn head_is_answered_on_every_get_route_with_headers_only() {
    let node = TestNode::start("");
    for path in [
        "/v1/accelerators",
        "/v1/slots",
        "/v1/slots/0",
        "/health",
        "/metrics",
    ] {
        let get = ureq::get(&node.url(path)).call().unwrap();
        let get_type = get.header("content-type").unwrap().to_string();
        let get_len = get.into_string().unwrap().len();
        // HEAD, then a pipelined GET /health: the second response must start right
        // after the first head, with no body between them.
        let raw = node.raw(
            format!(
                "HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n\
                 GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
            Duration::from_secs(3),
        );
        let text = String::from_utf8(raw).unwrap();
        let heads: Vec<&str> = text.split_inclusive("\r\n\r\n").collect();
        assert!(heads.len() >= 2, "{path}: {text}");
        let head = heads[0];
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{path}: {text}");
        assert!(
            head.contains(&format!("\r\nContent-Type: {get_type}\r\n")),
            "{path}: {head}"
        );
        if path != "/metrics" {
            // (The metrics text changes between the two requests.)
            assert!(
                head.contains(&format!("\r\nContent-Length: {get_len}\r\n")),
                "{path}: {head} (GET body {get_len} bytes)"
            );
        }
        assert!(
            heads[1].starts_with("HTTP/1.1 200 OK\r\n"),
            "{path}: HEAD carried a body: {text}"
        );
    }
    // Allow lists HEAD.
    let resp = parse_responses(&node.raw(
        b"DELETE /v1/slots HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        Duration::from_secs(3),
    ));
    assert_eq!(resp[0].status, 405);
    assert_eq!(resp[0].header("allow"), Some("GET, HEAD"));
}

#[test]
fn http_1_1_without_exactly_one_host_is_a_bad_request() {
    let node = TestNode::start("");
    for request in [
        &b"GET /health HTTP/1.1\r\n\r\n"[..],
        b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: a b\r\n\r\n",
    ] {
        let resp = parse_responses(&node.raw(request, Duration::from_secs(3)));
        let shown = String::from_utf8_lossy(request);
        assert_eq!(resp.len(), 1, "{shown}");
        assert_eq!(resp[0].status, 400, "{shown}");
        assert_eq!(resp[0].json()["code"], "BAD_REQUEST");
        assert_eq!(resp[0].header("connection"), Some("close"), "{shown}");
    }
    // HTTP/1.0 clients may leave Host out.
    let resp = parse_responses(&node.raw(b"GET /health HTTP/1.0\r\n\r\n", Duration::from_secs(3)));
    assert_eq!(resp[0].status, 200);
}

#[test]
fn a_body_cut_short_by_a_half_close_is_a_bad_request_not_a_timeout() {
    let node = TestNode::start("io_timeout_ms = 30000\n");
    for request in [
        &b"POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabcd"[..],
        b"POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nab",
        b"POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n",
        b"PUT /v1/objects/k HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabcd",
    ] {
        let shown = String::from_utf8_lossy(request);
        let mut s = TcpStream::connect(node.addr).unwrap();
        s.write_all(request).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let start = Instant::now();
        let resp = parse_responses(&read_until_quiet(&mut s, Duration::from_secs(10)));
        assert_eq!(resp.len(), 1, "{shown}");
        assert_eq!(resp[0].status, 400, "{shown}");
        let body = resp[0].json();
        assert_eq!(body["code"], "BAD_REQUEST", "{shown}");
        assert!(
            body["error"].as_str().unwrap().contains("ended early"),
            "{shown}: {body}"
        );
        assert_eq!(resp[0].header("connection"), Some("close"), "{shown}");
        assert!(start.elapsed() < Duration::from_secs(5), "{shown}");
    }
}

#[test]
fn a_response_written_while_draining_says_connection_close() {
    let mut node = TestNode::start("");
    // A keep-alive request whose body is half sent when the drain begins.
    let mut s = TcpStream::connect(node.addr).unwrap();
    s.write_all(b"POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabcd")
        .unwrap();
    wait_until("the node reads the body", || {
        node.metric("netaccel_body_memory_bytes") == 10.0
    });
    unsafe { libc::kill(node.pid(), libc::SIGTERM) };
    // The listeners close once the node is draining.
    wait_until("the node stops accepting", || {
        TcpStream::connect(node.addr).is_err()
    });
    s.write_all(b"efghij").unwrap();
    let data = read_until_quiet(&mut s, Duration::from_secs(10));
    let resp = parse_responses(&data);
    assert_eq!(resp.len(), 1, "{}", String::from_utf8_lossy(&data));
    assert_eq!(
        (resp[0].status, resp[0].body.as_slice()),
        (200, &b"abcdefghij"[..])
    );
    assert_eq!(resp[0].header("connection"), Some("close"));
    // And the node did close it.
    let mut rest = [0u8; 1];
    assert_eq!(s.read(&mut rest).unwrap(), 0);
    assert!(node.terminate().success());
}

/// The node's log as JSON objects, one a line; fails on any line that is not one.
fn json_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn refused_requests_are_logged_at_debug_within_a_rate_limit() {
    let node = TestNode::start_logging(
        "log_refusals_per_second_max = 5\n",
        &[
            "--log-level",
            "warn,netaccel_node::refused=debug",
            "--log-format",
            "json",
        ],
    );
    const FLOOD: usize = 40;
    for _ in 0..FLOOD {
        let resp = parse_responses(&node.raw(b"GARBAGE\r\n\r\n", Duration::from_secs(3)));
        assert_eq!(resp[0].status, 400);
    }
    let unknown = ureq::post(&node.url("/v1/fn/nope")).send_bytes(b"x");
    assert!(matches!(unknown, Err(ureq::Error::Status(404, _))));

    // Every refusal is either logged or counted in a later "not logged" line.
    let (mut logged, mut suppressed) = (0, 0);
    wait_until("every refusal is accounted for in the log", || {
        let lines = json_lines(&node.log());
        let protocol: Vec<_> = lines
            .iter()
            .filter(|l| l["fields"]["kind"] == "protocol")
            .collect();
        logged = protocol
            .iter()
            .filter(|l| l["fields"]["message"] == "request refused")
            .count();
        suppressed = protocol
            .iter()
            .filter_map(|l| l["fields"]["suppressed"].as_u64())
            .sum::<u64>() as usize;
        logged + suppressed == FLOOD
    });
    assert!(
        logged >= 5 && suppressed > 0,
        "{logged} logged, {suppressed} suppressed"
    );
    let lines = json_lines(&node.log());
    let refused = lines
        .iter()
        .find(|l| l["fields"]["kind"] == "protocol" && l["fields"]["message"] == "request refused")
        .unwrap();
    assert_eq!(refused["level"], "DEBUG");
    assert_eq!(refused["target"], "netaccel_node::refused");
    assert_eq!(refused["fields"]["status"], "400");
    assert!(
        refused["fields"]["peer"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:"),
        "{refused}"
    );
    let unknown = lines
        .iter()
        .find(|l| l["fields"]["kind"] == "unknown_accelerator")
        .unwrap_or_else(|| panic!("no unknown-accelerator line in {lines:?}"));
    assert!(unknown["fields"]["reason"]
        .as_str()
        .unwrap()
        .contains("nope"));
}

#[test]
fn a_failed_token_check_is_a_warning_with_the_peer_address() {
    let node = TestNode::start_logging(
        "admin_token = \"s3cret\"\n[[tenants]]\nname = \"team-a\"\ntoken = \"a-token\"\n",
        &[],
    );
    // HTTP reconfiguration with a wrong admin token.
    let mut s = TcpStream::connect(node.addr).unwrap();
    let body = br#"{"accelerator":"echo"}"#;
    let head = format!(
        "PUT /v1/slots/0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer guess\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let resp = parse_responses(&read_until_quiet(&mut s, Duration::from_secs(3)));
    assert_eq!(resp[0].status, 401);
    let http_peer = format!("peer={}", s.local_addr().unwrap());
    // RAC `hello` with a wrong tenant token.
    let mut r = TcpStream::connect(node.rac_addr).unwrap();
    let hello = br#"{"op":"hello","tenant":"team-a","token":"guess"}"#;
    r.write_all(&CallHeader::control(7, hello.len() as u32).encode())
        .unwrap();
    r.write_all(hello).unwrap();
    let (result, _) = read_result(&mut r);
    assert_eq!(result.status, Status::Unauthorized);
    let rac_peer = format!("peer={}", r.local_addr().unwrap());

    let mut log = String::new();
    wait_until("both failed token checks are logged", || {
        log = node.log();
        log.contains(&http_peer) && log.contains(&rac_peer)
    });
    for peer in [&http_peer, &rac_peer] {
        let line = log.lines().find(|l| l.contains(peer.as_str())).unwrap();
        assert!(line.contains("WARN"), "{line}");
        assert!(line.contains("request refused"), "{line}");
        assert!(line.contains("token"), "{line}");
    }
}

#[test]
fn a_panicking_kernel_is_one_structured_error_line() {
    let node = TestNode::start_logging("fault_injection = true\n", &["--log-format", "json"]);
    let panicked = ureq::post(&node.url("/v1/fn/fault")).send_bytes(b"panic");
    assert!(matches!(panicked, Err(ureq::Error::Status(500, _))));
    let message = "fault injection: the payload asked for a panic";
    wait_until("the panic is logged", || node.log().contains(message));
    let log = node.log();
    assert!(!log.contains("panicked at"), "{log}");
    assert!(!log.contains("stack backtrace"), "{log}");
    let lines = json_lines(&log);
    let panics: Vec<_> = lines
        .iter()
        .filter(|l| l.to_string().contains(message))
        .collect();
    assert_eq!(panics.len(), 1, "{log}");
    assert_eq!(panics[0]["level"], "ERROR");
    assert_eq!(panics[0]["fields"]["panic"], message);
    assert!(
        panics[0]["fields"]["location"]
            .as_str()
            .unwrap()
            .contains(".rs:"),
        "{log}"
    );
    // The slot keeps serving.
    let echoed = ureq::post(&node.url("/v1/fn/fault"))
        .send_bytes(b"still here")
        .unwrap();
    assert_eq!(echoed.into_string().unwrap(), "still here");
}

#[test]
fn the_log_format_comes_from_the_config_or_the_command_line() {
    let node = TestNode::start_logging("log_format = \"json\"\n", &["--log-level", "info"]);
    wait_until("the node logs that it listens", || {
        node.log().contains("netaccel node listening")
    });
    let lines = json_lines(&node.log());
    assert!(lines
        .iter()
        .any(|l| l["fields"]["message"] == "netaccel node listening" && l["level"] == "INFO"));

    let (code, stderr) = start_refused("", &["--log-format", "xml"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("text or json"), "{stderr}");
    let (code, stderr) = start_refused("log_format = \"xml\"\n", &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("log_format"), "{stderr}");
}
