//! Black-box tests of the HTTP API: every route, every error status, the accelerators'
//! semantics through the network, and the shared RAC test vectors' outputs.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use accel::{Catalog, PARAMS_LEN};
use common::*;

const QUIET: Duration = Duration::from_millis(300);

fn post(
    node: &TestNode,
    path: &str,
    body: &[u8],
) -> Result<(u16, Vec<u8>), (u16, serde_json::Value)> {
    match ureq::post(&node.url(path)).send_bytes(body) {
        Ok(resp) => {
            let status = resp.status();
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut resp.into_reader(), &mut out).unwrap();
            Ok((status, out))
        }
        Err(ureq::Error::Status(code, resp)) => Err((code, resp.into_json().unwrap())),
        Err(e) => panic!("transport error: {e}"),
    }
}

fn call(node: &TestNode, path: &str, body: &[u8]) -> Vec<u8> {
    match post(node, path, body) {
        Ok((200, out)) => out,
        other => panic!("{path}: expected 200, got {:?}", other.err()),
    }
}

fn call_err(node: &TestNode, path: &str, body: &[u8]) -> (u16, String, String) {
    match post(node, path, body) {
        Err((code, json)) => (
            code,
            json["code"].as_str().unwrap().to_string(),
            json["error"].as_str().unwrap().to_string(),
        ),
        Ok((code, out)) => panic!("{path}: expected an error, got {code} {out:?}"),
    }
}

/// Polls `GET /v1/slots/{slot}` until `ready` holds for its document (at most 10 s).
fn wait_for_slot(node: &TestNode, slot: u16, ready: impl Fn(&serde_json::Value) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let doc = node.get_json(&format!("/v1/slots/{slot}"));
        if ready(&doc) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "slot {slot} never reached the awaited state: {doc}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn health_with_curl_and_head() {
    let node = TestNode::start("");
    let (status, body) = curl(&[&node.url("/health")]);
    assert_eq!(
        (status, body.as_slice()),
        (200, br#"{"status":"ok"}"#.as_slice())
    );
    let raw = node.raw(
        b"HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        QUIET,
    );
    let text = String::from_utf8(raw).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        text.contains("\r\nContent-Type: application/json\r\n"),
        "{text}"
    );
    assert!(text.contains("\r\nContent-Length: 15\r\n"), "{text}");
    assert!(
        text.ends_with("\r\n\r\n"),
        "HEAD must not carry a body: {text}"
    );
}

#[test]
fn shared_vectors_through_http() {
    let node = TestNode::start("");
    let catalog = Catalog::builtin();
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../spec/rac-v1-vectors.json"
    ))
    .unwrap();
    let vectors: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut checked = 0;
    for v in vectors.as_array().unwrap() {
        let Some(expect) = v["expect_output_hex"].as_str() else {
            continue;
        };
        let header = hex(v["header_hex"].as_str().unwrap());
        let accel_id = u16::from_le_bytes([header[6], header[7]]);
        let params: [u8; PARAMS_LEN] = header[20..64].try_into().unwrap();
        let accel = catalog.by_id(accel_id).unwrap().descriptor().clone();
        let query: Vec<String> = accel
            .params
            .iter()
            .map(|p| format!("{}={}", p.name, p.read(&params)))
            .collect();
        let path = format!("/v1/fn/{}?{}", accel.name, query.join("&"));
        let out = call(&node, &path, &hex(v["payload_hex"].as_str().unwrap()));
        assert_eq!(out, hex(expect), "vector {}", v["name"]);
        checked += 1;
    }
    assert!(checked >= 4, "only {checked} vectors had outputs");
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn accelerator_semantics_and_edge_cases() {
    let node = TestNode::start("");
    // echo and to_uppercase, empty payloads included.
    assert_eq!(call(&node, "/v1/fn/echo", b""), b"");
    assert_eq!(call(&node, "/v1/fn/echo", b"\x00\xffab"), b"\x00\xffab");
    assert_eq!(call(&node, "/v1/fn/to_uppercase", b""), b"");
    assert_eq!(
        call(&node, "/v1/fn/to_uppercase", b"az{`@AZ\xe9"),
        b"AZ{`@AZ\xe9"
    );
    // topk: k > n, duplicates, n = 0.
    assert_eq!(
        i32s(&call(&node, "/v1/fn/topk?k=10", &i32_bytes(&[3, -1, 3]))),
        vec![3, 3, -1]
    );
    assert_eq!(
        i32s(&call(
            &node,
            "/v1/fn/topk?k=1",
            &i32_bytes(&[i32::MIN, i32::MAX])
        )),
        vec![i32::MAX]
    );
    assert_eq!(call(&node, "/v1/fn/topk?k=5", b""), b"");
    // logit: default eps, clamp, NaN.
    let out = f32s(&call(
        &node,
        "/v1/fn/logit",
        &f32_bytes(&[0.5, 0.0, 1.0, f32::NAN]),
    ));
    assert_eq!(out[0], 0.0);
    assert!((out[1] as f64 - (1e-6f64 / (1.0 - 1e-6)).ln()).abs() < 1e-4);
    assert!(out[2] > 13.0);
    assert!(out[3].is_nan());
    let out = f32s(&call(&node, "/v1/fn/logit?eps=0.25", &f32_bytes(&[0.0])));
    assert!((out[0] as f64 - (0.25f64 / 0.75).ln()).abs() < 1e-5);
    // minmax: constant array, empty, negative range.
    assert_eq!(
        f32s(&call(&node, "/v1/fn/minmax", &f32_bytes(&[7.0; 5]))),
        vec![0.0; 5]
    );
    assert_eq!(call(&node, "/v1/fn/minmax", b""), b"");
    assert_eq!(
        f32s(&call(&node, "/v1/fn/minmax", &f32_bytes(&[-2.0, 0.0, 2.0]))),
        vec![0.0, 0.5, 1.0]
    );
    // sobel: 1x1, 1xN and 3x3 images.
    assert_eq!(
        call(&node, "/v1/fn/sobel?width=1&height=1", &[200]),
        vec![0]
    );
    assert_eq!(
        call(&node, "/v1/fn/sobel?width=4&height=1", &[1, 2, 3, 4]),
        vec![0; 4]
    );
    let img = [0, 0, 0, 0, 0, 100, 100, 100, 100];
    let out = call(&node, "/v1/fn/sobel?width=3&height=3", &img);
    assert_eq!(out, vec![0, 0, 0, 0, 255, 0, 0, 0, 0]);
    // matmul: n = 1 and n = 2.
    assert_eq!(
        f32s(&call(&node, "/v1/fn/matmul?n=1", &f32_bytes(&[3.0, -2.0]))),
        vec![-6.0]
    );
    let ab = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    assert_eq!(
        f32s(&call(&node, "/v1/fn/matmul?n=2", &ab)),
        vec![19.0, 22.0, 43.0, 50.0]
    );
}

#[test]
fn bad_calls_are_refused_with_reasons() {
    let node = TestNode::start("");
    let cases: &[(&str, &[u8], u16, &str, &str)] = &[
        (
            "/v1/fn/topk",
            b"",
            400,
            "BAD_REQUEST",
            "missing required parameter `k`",
        ),
        ("/v1/fn/topk?k=0", b"", 400, "BAD_REQUEST", "at least 1"),
        ("/v1/fn/topk?k=1", b"abc", 400, "BAD_REQUEST", "4-byte"),
        (
            "/v1/fn/topk?k=1&z=2",
            b"",
            400,
            "BAD_REQUEST",
            "unknown parameter `z`",
        ),
        ("/v1/fn/logit?eps=0.5", b"", 400, "BAD_REQUEST", "eps"),
        (
            "/v1/fn/minmax",
            &[0, 0, 0xc0, 0x7f],
            400,
            "BAD_REQUEST",
            "finite",
        ),
        (
            "/v1/fn/sobel?width=2&height=2",
            b"abc",
            400,
            "BAD_REQUEST",
            "2x2",
        ),
        (
            "/v1/fn/sobel?width=0&height=2",
            b"",
            400,
            "BAD_REQUEST",
            "at least 1",
        ),
        (
            "/v1/fn/matmul?n=2",
            b"short",
            400,
            "BAD_REQUEST",
            "payload is 5",
        ),
        ("/v1/fn/nope", b"", 404, "UNKNOWN_ACCELERATOR", "nope"),
    ];
    for (path, body, code, name, words) in cases {
        let (got_code, got_name, message) = call_err(&node, path, body);
        assert_eq!(
            (got_code, got_name.as_str()),
            (*code, *name),
            "{path}: {message}"
        );
        assert!(
            message.contains(words),
            "{path}: `{message}` should mention `{words}`"
        );
    }
}

#[test]
fn protocol_errors_get_their_status() {
    let node = TestNode::start("uri_bytes_max = 100\nhead_bytes_max = 1024\nbody_bytes_max = 1000\nbody_memory_bytes_max = 100000");
    let long_uri = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(200));
    let big_head = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "b".repeat(2000));
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"GARBAGE\r\n\r\n".to_vec(), 400, "BAD_REQUEST"),
        (
            b"GET /health HTTP/2.0\r\n\r\n".to_vec(),
            505,
            "HTTP_VERSION_NOT_SUPPORTED",
        ),
        (long_uri.into_bytes(), 414, "URI_TOO_LONG"),
        (big_head.into_bytes(), 431, "HEADERS_TOO_LARGE"),
        (
            b"POST /v1/fn/echo HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec(),
            501,
            "NOT_IMPLEMENTED",
        ),
        (
            b"POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n".to_vec(),
            413,
            "TOO_LARGE",
        ),
        (
            b"POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
            411,
            "LENGTH_REQUIRED",
        ),
        (
            b"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            501,
            "NOT_IMPLEMENTED",
        ),
        (
            b"GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
            404,
            "NOT_FOUND",
        ),
        (
            b"POST /v1/fn/echo HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n".to_vec(),
            400,
            "BAD_REQUEST",
        ),
    ];
    for (req, code, name) in cases {
        let resp = parse_responses(&node.raw(&req, QUIET));
        assert_eq!(resp.len(), 1, "{}", String::from_utf8_lossy(&req));
        assert_eq!(resp[0].status, code, "{}", String::from_utf8_lossy(&req));
        assert_eq!(resp[0].json()["code"], name);
        assert_eq!(resp[0].header("content-type"), Some("application/json"));
    }
    // 405 carries Allow.
    let resp = parse_responses(&node.raw(
        b"DELETE /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        QUIET,
    ));
    assert_eq!(resp[0].status, 405);
    assert_eq!(resp[0].header("allow"), Some("GET, HEAD"));
    // The node still serves after all that.
    assert_eq!(curl(&[&node.url("/health")]).0, 200);
}

#[test]
fn keep_alive_pipelining_and_http_1_0() {
    let node = TestNode::start("");
    let pipelined = b"POST /v1/fn/to_uppercase HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc\
GET /health HTTP/1.1\r\nHost: x\r\n\r\n\
POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n1;ext\r\nz\r\n0\r\n\r\n\
POST /v1/fn/nope HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nzz\
POST /v1/fn/to_uppercase HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
    let resp = parse_responses(&node.raw(pipelined, Duration::from_secs(5)));
    let summary: Vec<(u16, Vec<u8>)> = resp.iter().map(|r| (r.status, r.body.clone())).collect();
    assert_eq!(summary.len(), 5, "{summary:?}");
    assert_eq!(summary[0], (200, b"ABC".to_vec()));
    assert_eq!(summary[1], (200, br#"{"status":"ok"}"#.to_vec()));
    assert_eq!(summary[2], (200, b"xyz".to_vec()));
    assert_eq!(summary[3].0, 404);
    assert_eq!(summary[4], (200, b"OK".to_vec()));
    assert_eq!(resp[4].header("connection"), Some("close"));

    // Requests split at every byte boundary still parse.
    let mut s = TcpStream::connect(node.addr).unwrap();
    for b in
        b"POST /v1/fn/to_uppercase HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\nwxyz"
    {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let resp = parse_responses(&read_until_quiet(&mut s, Duration::from_secs(3)));
    assert_eq!(resp[0].body, b"WXYZ");

    // A second head that arrives a byte at a time behind a whole first request, in the
    // same read buffer (the head scan counts from where each head starts).
    let mut s = TcpStream::connect(node.addr).unwrap();
    let first = b"POST /v1/fn/to_uppercase HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab";
    let second = b"POST /v1/fn/to_uppercase HTTP/1.1\r\nHost: x\r\nX-Pad: 0123456789\r\n\
Content-Length: 2\r\nConnection: close\r\n\r\ncd";
    s.write_all(&[&first[..], &second[..20]].concat()).unwrap();
    for b in &second[20..] {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let resp = parse_responses(&read_until_quiet(&mut s, Duration::from_secs(3)));
    let bodies: Vec<&[u8]> = resp.iter().map(|r| &r.body[..]).collect();
    assert_eq!(bodies, [&b"AB"[..], &b"CD"[..]]);

    // HTTP/1.0: closes by default, stays open with keep-alive.
    let resp = node.raw(
        b"GET /health HTTP/1.0\r\n\r\nGET /health HTTP/1.0\r\n\r\n",
        QUIET,
    );
    assert_eq!(parse_responses(&resp).len(), 1);
    let resp = parse_responses(&node.raw(
        b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /health HTTP/1.0\r\n\r\n",
        QUIET,
    ));
    assert_eq!(resp.len(), 2);
    assert_eq!(resp[0].header("connection"), Some("keep-alive"));
    assert_eq!(resp[1].header("connection"), Some("close"));
}

#[test]
fn chunked_and_expect_continue_with_curl() {
    let node = TestNode::start("");
    let (status, body) = curl(&[
        "-X",
        "POST",
        "-H",
        "Transfer-Encoding: chunked",
        "--data-binary",
        "chunky",
        &node.url("/v1/fn/to_uppercase"),
    ]);
    assert_eq!((status, body.as_slice()), (200, b"CHUNKY".as_slice()));
    // curl sends Expect: 100-continue for bodies over 1 MiB.
    let big = vec![b'q'; 2 << 20];
    let path = node.dir.join("big.bin");
    std::fs::write(&path, &big).unwrap();
    let file_arg = format!("@{}", path.display());
    let (status, body) = curl(&[
        "-X",
        "POST",
        "--data-binary",
        &file_arg,
        &node.url("/v1/fn/to_uppercase"),
    ]);
    assert_eq!(status, 200);
    assert!(body.len() == big.len() && body.iter().all(|&b| b == b'Q'));
}

#[test]
fn expect_continue_short_circuits_refusals() {
    let node = TestNode::start("body_bytes_max = 1000\nbody_memory_bytes_max = 100000");
    let refusals: &[(&str, u16)] = &[
        (
            "POST /v1/fn/nope HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n",
            404,
        ),
        (
            "POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n",
            413,
        ),
        (
            "POST /v1/fn/topk?k=0 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 8\r\n\r\n",
            400,
        ),
        (
            "POST /v1/fn/topk?k=1 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 7\r\n\r\n",
            400,
        ),
    ];
    for (head, code) in refusals {
        let resp = parse_responses(&node.raw(head.as_bytes(), QUIET));
        assert_eq!(resp.len(), 1, "{head}");
        assert_eq!(resp[0].status, *code, "{head}");
        assert_eq!(resp[0].header("connection"), Some("close"));
    }
    // Accepted: 100 Continue first, then the result once the body is sent.
    let mut s = TcpStream::connect(node.addr).unwrap();
    s.write_all(
        b"POST /v1/fn/to_uppercase HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
    )
    .unwrap();
    let interim = read_until_quiet(&mut s, QUIET);
    assert_eq!(interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"abc").unwrap();
    let resp = parse_responses(&read_until_quiet(&mut s, QUIET));
    assert_eq!(
        (resp[0].status, resp[0].body.as_slice()),
        (200, b"ABC".as_slice())
    );
}

#[test]
fn object_store_with_etags() {
    let node = TestNode::start("object_store_bytes_max = 100\nobjects_max = 3");
    let url = node.url("/v1/objects/greeting");
    let (status, _) = curl(&["-X", "PUT", "--data-binary", "hello", &url]);
    assert_eq!(status, 201);
    let (status, _) = curl(&["-X", "PUT", "--data-binary", "hello again", &url]);
    assert_eq!(status, 204);
    let resp = ureq::get(&url).call().unwrap();
    let etag = resp.header("etag").unwrap().to_string();
    assert_eq!(resp.into_string().unwrap(), "hello again");
    let (status, body) = curl(&["-H", &format!("If-None-Match: {etag}"), &url]);
    assert_eq!((status, body.len()), (304, 0));
    let (status, body) = curl(&["-H", "If-None-Match: \"other\"", &url]);
    assert_eq!((status, body.as_slice()), (200, b"hello again".as_slice()));
    let (status, body) = curl(&["-I", &url]);
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body)
        .to_ascii_lowercase()
        .contains("content-length: 11"));
    // Full: 507, and the old object is untouched.
    let (status, body) = curl(&[
        "-X",
        "PUT",
        "--data-binary",
        &"x".repeat(101),
        &node.url("/v1/objects/big"),
    ]);
    assert_eq!(status, 507, "{}", String::from_utf8_lossy(&body));
    let (status, _) = curl(&["-X", "DELETE", &url]);
    assert_eq!(status, 204);
    assert_eq!(curl(&["-X", "DELETE", &url]).0, 404);
    assert_eq!(curl(&[&url]).0, 404);
}

#[test]
fn catalog_and_slots_documents() {
    let node = TestNode::start("[[slots]]\naccelerator = \"topk\"\n[[slots]]\naccelerator = \"topk\"\n[[slots]]\naccelerator = \"sobel\"\n");
    let cat: serde_json::Value = node.get_json("/v1/accelerators");
    let topk = cat
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "topk")
        .unwrap();
    assert_eq!(topk["id"], 3);
    assert_eq!(topk["slots"], serde_json::json!([0, 1]));
    assert_eq!(topk["params"][0]["name"], "k");
    assert_eq!(topk["params"][0]["type"], "u32");
    assert_eq!(topk["hash"].as_str().unwrap().len(), 32);
    let echo = cat
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "echo")
        .unwrap();
    assert_eq!(echo["slots"], serde_json::json!([]));
    let slots: serde_json::Value = node.get_json("/v1/slots");
    assert_eq!(slots.as_array().unwrap().len(), 3);
    for key in [
        "id",
        "device",
        "accelerator",
        "state",
        "queue_depth",
        "busy_ratio",
    ] {
        assert!(slots[2].get(key).is_some(), "missing {key}");
    }
    assert_eq!(slots[2]["accelerator"], "sobel");
    // Not hosted: unknown accelerator even though the catalog has it.
    let (code, name, _) = call_err(&node, "/v1/fn/echo", b"x");
    assert_eq!((code, name.as_str()), (404, "UNKNOWN_ACCELERATOR"));
}

#[test]
fn reconfiguration_needs_the_token_and_reports_its_time() {
    let node = TestNode::start("admin_token = \"s3cret\"\nreconfig_delay_ms = 5\n");
    let url = node.url("/v1/slots/0");
    let body = r#"{"accelerator":"to_uppercase"}"#;
    let (status, resp) = curl(&["-X", "PUT", "-d", body, &url]);
    assert_eq!(status, 401, "{}", String::from_utf8_lossy(&resp));
    let (status, _) = curl(&[
        "-X",
        "PUT",
        "-H",
        "Authorization: Bearer wrong",
        "-d",
        body,
        &url,
    ]);
    assert_eq!(status, 401);
    let (status, resp) = curl(&[
        "-X",
        "PUT",
        "-H",
        "Authorization: Bearer s3cret",
        "-d",
        body,
        &url,
    ]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&resp));
    let report: serde_json::Value = serde_json::from_slice(&resp).unwrap();
    assert_eq!(report["slot"], 0);
    assert_eq!(report["accelerator"], "to_uppercase");
    assert!(report["reconfig_ms"].as_f64().unwrap() >= 5.0);
    let auth = ["-H", "Authorization: Bearer s3cret"];
    assert_eq!(
        curl(&[
            auth[0],
            auth[1],
            "-X",
            "PUT",
            "-d",
            r#"{"accelerator":"nope"}"#,
            &url
        ])
        .0,
        404
    );
    assert_eq!(
        curl(&[auth[0], auth[1], "-X", "PUT", "-d", "not json", &url]).0,
        400
    );
    assert_eq!(
        curl(&[
            auth[0],
            auth[1],
            "-X",
            "PUT",
            "-d",
            body,
            &node.url("/v1/slots/99")
        ])
        .0,
        404
    );
    // Slot 0 held echo; now echo is hosted nowhere and to_uppercase in two slots.
    let (code, name, _) = call_err(&node, "/v1/fn/echo", b"x");
    assert_eq!((code, name.as_str()), (404, "UNKNOWN_ACCELERATOR"));
    let slots: serde_json::Value = node.get_json("/v1/slots/0");
    assert_eq!(slots["accelerator"], "to_uppercase");
}

#[test]
fn deadlines_and_busy_refusals() {
    // One matmul slot that queues everything (no inline execution), room for one call.
    let node = TestNode::start(
        "inline_work_max = 0\nqueue_depth_max = 1\ntenant_queue_depth_max = 1\n[[slots]]\naccelerator = \"matmul\"\n",
    );
    let n = 320;
    let payload = f32_bytes(&vec![1.0; 2 * n * n]);
    let url = node.url(&format!("/v1/fn/matmul?n={n}"));
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| {
                s.spawn(|| match ureq::post(&url).send_bytes(&payload) {
                    Ok(r) => (200, r.header("retry-after").map(str::to_string)),
                    Err(ureq::Error::Status(code, r)) => {
                        (code, r.header("retry-after").map(str::to_string))
                    }
                    Err(e) => panic!("{e}"),
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(results.iter().any(|r| r.0 == 200), "{results:?}");
    let busy: Vec<_> = results.iter().filter(|r| r.0 == 503).collect();
    assert!(!busy.is_empty(), "{results:?}");
    assert!(busy.iter().all(|r| r.1.as_deref() == Some("1")));
    assert!(results.iter().all(|r| r.0 == 200 || r.0 == 503));

    // A call queued behind a long one misses a 1 ms deadline: 504, not run. The slot
    // worker may still be finishing the calls above after their answers went out.
    wait_for_slot(&node, 0, |s| s["state"] == "idle");
    std::thread::scope(|s| {
        let long = s.spawn(|| {
            ureq::post(&url)
                .send_bytes(&payload)
                .map(|r| r.status())
                .map_err(|e| e.to_string())
        });
        // Wait until the long call runs (the slot is busy with an empty queue), so the
        // small one queues behind it rather than being refused for a full queue.
        wait_for_slot(&node, 0, |s| s["state"] == "busy" && s["queue_depth"] == 0);
        let small = f32_bytes(&[1.0, 2.0]);
        let r = ureq::post(&node.url("/v1/fn/matmul?n=1"))
            .set("X-Netaccel-Deadline-Us", "1000")
            .send_bytes(&small);
        match r {
            Err(ureq::Error::Status(504, resp)) => {
                assert_eq!(resp.header("x-netaccel-exec-ns"), Some("0"));
                let v: serde_json::Value = resp.into_json().unwrap();
                assert_eq!(v["code"], "DEADLINE_EXCEEDED");
            }
            Ok(r) => panic!("expected 504, got {}", r.status()),
            Err(e) => panic!("expected 504, got {e}"),
        }
        assert_eq!(long.join().unwrap().unwrap(), 200);
    });
    let bad = ureq::post(&node.url("/v1/fn/matmul?n=1"))
        .set("X-Netaccel-Deadline-Us", "soon")
        .send_bytes(&[0; 8]);
    assert!(matches!(bad, Err(ureq::Error::Status(400, _))));
}

#[test]
fn metrics_expose_slots_accelerators_and_connections() {
    let node = TestNode::start("");
    call(&node, "/v1/fn/to_uppercase", b"abc");
    call_err(&node, "/v1/fn/topk", b"");
    let (status, body) = curl(&[&node.url("/metrics")]);
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    for needle in [
        "netaccel_slot_busy_seconds_total{slot=\"1\"}",
        "netaccel_slot_calls_total{slot=\"1\"} 1",
        "netaccel_slot_exec_seconds_bucket",
        "netaccel_slot_queue_depth{slot=\"0\"} 0",
        "netaccel_slot_accelerator_loaded{slot=\"1\",accelerator=\"to_uppercase\"} 1",
        "netaccel_accelerator_calls_total{accelerator=\"to_uppercase\",status=\"OK\"} 1",
        "netaccel_accelerator_latency_seconds_count{accelerator=\"to_uppercase\"} 1",
        "netaccel_connections_open{protocol=\"http\"}",
        "netaccel_requests_total{protocol=\"http\",code=\"400\"} 1",
        "netaccel_body_memory_bytes 0",
    ] {
        assert!(text.contains(needle), "metrics lack `{needle}`:\n{text}");
    }
}

#[test]
fn sigterm_drains_in_flight_calls_and_exits_zero() {
    let mut node = TestNode::start("inline_work_max = 0\n[[slots]]\naccelerator = \"matmul\"\n");
    let n = 300;
    let payload = f32_bytes(&vec![0.5; 2 * n * n]);
    let url = node.url(&format!("/v1/fn/matmul?n={n}"));
    let call = std::thread::spawn(move || {
        ureq::post(&url)
            .send_bytes(&payload)
            .map(|r| r.status())
            .map_err(|e| e.to_string())
    });
    // The call is whole and at its slot (queued or running) before the signal.
    wait_for_slot(&node, 0, |s| s["state"] == "busy");
    let status = node.terminate();
    assert!(status.success(), "exit status {status}");
    assert_eq!(call.join().unwrap().unwrap(), 200);
}

#[test]
fn remote_opencl_service_runs_inside_the_node() {
    if !common::opencl_runtime_present() {
        return;
    }
    let (node, port) = TestNode::start_with(|| {
        let port = common::free_addr().port();
        (format!("opencl = \"127.0.0.1:{port}\"\n"), port)
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "remote OpenCL listener did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let metrics = ureq::get(&node.url("/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(
        metrics.contains("netaccel_ocl_clients_connected"),
        "OpenCL metrics missing from the node's /metrics"
    );
    assert!(metrics.contains("netaccel_slot_calls_total"));
}

#[test]
fn slow_heads_get_408_and_idle_connections_close() {
    let node = TestNode::start("header_timeout_ms = 300\nidle_timeout_ms = 600\n");
    // A keep-alive request first, so the connection's timer was armed for the idle
    // timeout before the slow head makes it due sooner.
    let mut s = TcpStream::connect(node.addr).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    s.write_all(b"GET /hea").unwrap();
    let start = std::time::Instant::now();
    let resp = parse_responses(&read_until_quiet(&mut s, Duration::from_secs(3)));
    assert_eq!(resp.len(), 2, "{resp:?}");
    assert_eq!((resp[0].status, resp[1].status), (200, 408));
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "408 came after {:?}",
        start.elapsed()
    );
    // An idle connection is closed after the idle timeout, also when each request
    // moved its deadline later.
    let mut s = TcpStream::connect(node.addr).unwrap();
    for _ in 0..3 {
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
    }
    let start = std::time::Instant::now();
    let resp = parse_responses(&read_until_quiet(&mut s, Duration::from_secs(3)));
    assert_eq!(resp.len(), 3);
    let closed_after = start.elapsed();
    assert!(
        closed_after < Duration::from_secs(2),
        "idle connection kept {closed_after:?}"
    );
}

#[test]
fn a_second_node_on_the_same_port_is_refused() {
    let node = TestNode::start("");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_netaccel-node"))
        .args(["--http", &node.addr.to_string(), "--rac", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot listen on") && stderr.contains("in use"),
        "{stderr}"
    );
    // The first node is unaffected.
    assert_eq!(curl(&[&node.url("/health")]).0, 200);
}

#[test]
fn a_failing_kernel_answers_500_and_its_slot_keeps_serving() {
    let node = TestNode::start(
        "fault_injection = true\n[[slots]]\naccelerator = \"fault\"\n[[slots]]\naccelerator = \"echo\"\n",
    );
    let (code, kind, message) = call_err(&node, "/v1/fn/fault", b"panic");
    assert_eq!((code, kind.as_str()), (500, "INTERNAL"), "{message}");
    let (code, kind, message) = call_err(&node, "/v1/fn/fault", b"error");
    assert_eq!((code, kind.as_str()), (500, "INTERNAL"));
    assert!(message.contains("internal error"), "{message}");
    // The same slot, and the node, carry on.
    assert_eq!(call(&node, "/v1/fn/fault", b"fine"), b"fine");
    assert_eq!(call(&node, "/v1/fn/echo", b"hi"), b"hi");
    assert_eq!(curl(&[&node.url("/health")]).0, 200);
    assert!(
        node.metric("netaccel_accelerator_calls_total{accelerator=\"fault\",status=\"INTERNAL\"}")
            >= 2.0
    );
}

#[test]
fn the_fault_accelerator_exists_only_when_configured() {
    let node = TestNode::start("");
    let (code, kind, _) = call_err(&node, "/v1/fn/fault", b"panic");
    assert_eq!((code, kind.as_str()), (404, "UNKNOWN_ACCELERATOR"));
}
