//! Black-box tests of TLS and mTLS on the node's front ends: HTTPS with curl and with
//! a rustls client, RAC over TLS, client certificates mapped to tenants (seen in
//! /metrics), wrong and missing client certificates refused, SIGHUP reload (an open
//! connection keeps its session, a new one gets the new certificate, a bad file keeps
//! the old one), session resumption, and handshake garbage that must not hurt others.
//!
//! Every certificate and key is made here at test time (rcgen) under the test's own
//! temporary folder; none is committed.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rac_proto::{ControlRequest, Decoded, ResultHeader, Status, HEADER_LEN};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

type Tls = StreamOwned<ClientConnection, TcpStream>;

/// A test CA and the certificates it issues, written as PEM into `dir`.
struct Pki {
    dir: PathBuf,
    ca: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
}

/// The test's keys go with it.
impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A certificate and its key, as the client side needs them.
struct Issued {
    der: CertificateDer<'static>,
    cert_pem: String,
    key_pem: String,
}

impl Pki {
    fn new(dir: &Path, name: &str) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("netaccel test CA {name}"),
        );
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = params.self_signed(&ca_key).unwrap();
        let pki = Pki {
            dir: dir.to_path_buf(),
            ca,
            ca_key,
        };
        std::fs::write(pki.ca_path(), pki.ca.pem()).unwrap();
        pki
    }

    fn ca_path(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    fn issue(&self, cn: &str, sans: &[&str], serial: u64, client: bool) -> Issued {
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.serial_number = Some(rcgen::SerialNumber::from(serial));
        params.extended_key_usages = vec![if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        }];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        Issued {
            der: cert.der().clone(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Issues a server certificate for localhost and 127.0.0.1 and writes it where the
    /// node reads it (`server.pem`, `server.key`).
    fn server(&self, serial: u64) -> Issued {
        let issued = self.issue("localhost", &["localhost", "127.0.0.1"], serial, false);
        std::fs::write(self.dir.join("server.pem"), &issued.cert_pem).unwrap();
        std::fs::write(self.dir.join("server.key"), &issued.key_pem).unwrap();
        issued
    }

    /// A fresh client configuration (no shared session store, so each handshake is
    /// full) trusting this CA, with a client certificate when given one.
    fn client(&self, cert: Option<&Issued>) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        Arc::new(match cert {
            Some(c) => {
                let key = PrivatePkcs8KeyDer::from_pem_slice(c.key_pem.as_bytes()).unwrap();
                builder
                    .with_client_auth_cert(vec![c.der.clone()], key.into())
                    .unwrap()
            }
            None => builder.with_no_client_auth(),
        })
    }
}

use testkit::free_addr;

/// Connects and completes the handshake (so errors show here, not at first use).
fn connect(addr: SocketAddr, config: &Arc<ClientConfig>) -> std::io::Result<Tls> {
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    let name = ServerName::try_from("localhost").unwrap();
    let conn = ClientConnection::new(Arc::clone(config), name).unwrap();
    let mut tls = StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}

/// One keep-alive HTTP/1.1 request; the response's status and body.
fn http(tls: &mut Tls, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).unwrap();
    tls.write_all(body).unwrap();
    tls.flush().unwrap();
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        tls.read_exact(&mut byte).unwrap();
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let status = head[9..12].parse().unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap();
    let mut body = vec![0; len];
    tls.read_exact(&mut body).unwrap();
    (status, body)
}

fn served_cert(tls: &Tls) -> CertificateDer<'static> {
    tls.conn.peer_certificates().unwrap()[0].clone()
}

fn metrics(node: &TestNode) -> String {
    ureq::get(&node.url("/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap()
}

/// The value of the series `series` (name and labels exactly), 0 when absent.
fn series(node: &TestNode, series: &str) -> f64 {
    metrics(node)
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .map_or(0.0, |v| v.parse().unwrap())
}

/// Polls `cond` until it holds or 10 s pass.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A node with HTTPS and RAC-over-TLS listeners and `extra` in its `[tls]` table.
fn start(pki: &Pki, before_tls: &str, extra: &str) -> (TestNode, SocketAddr, SocketAddr) {
    let (node, (https, rac)) = TestNode::start_with(|| {
        let (https, rac) = (free_addr(), free_addr());
        let config = format!(
            "{before_tls}\n[tls]\nhttps = \"{https}\"\nrac = \"{rac}\"\ncert = \"{}\"\nkey = \"{}\"\n{extra}",
            pki.dir.join("server.pem").display(),
            pki.dir.join("server.key").display(),
        );
        (config, (https, rac))
    });
    (node, https, rac)
}

fn test_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("netaccel-tls-{}-{name}", std::process::id()))
}

/// Whether a program is on PATH; missing, a skip outside CI and a failure in it.
fn have(program: &str) -> bool {
    let found = Command::new(program).arg("--version").output().is_ok();
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{program} is not installed; CI needs it"
        );
        eprintln!("SKIP: {program} is not installed");
    }
    found
}

#[test]
fn https_beside_plain_http_with_curl_and_rustls() {
    let pki = Pki::new(&test_dir("https"), "https");
    pki.server(1);
    let (node, https, _) = start(&pki, "", "");
    let mut tls = connect(https, &pki.client(None)).unwrap();
    for _ in 0..3 {
        let (status, body) = http(&mut tls, "POST", "/v1/fn/to_uppercase", b"hello tls");
        assert_eq!((status, body.as_slice()), (200, &b"HELLO TLS"[..]));
    }
    // Plain HTTP is still there, unchanged.
    let plain = ureq::post(&node.url("/v1/fn/to_uppercase"))
        .send_bytes(b"plain")
        .unwrap()
        .into_string()
        .unwrap();
    assert_eq!(plain, "PLAIN");
    // Plain HTTP on the TLS port is a failed handshake, not a served request.
    let mut raw = TcpStream::connect(https).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = raw.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    eventually("the failed handshake is counted", || {
        series(
            &node,
            "netaccel_tls_handshake_failures_total{reason=\"handshake\"}",
        ) >= 1.0
    });
    if have("curl") {
        let out = Command::new("curl")
            .args(["-sS", "--fail", "--cacert"])
            .arg(pki.ca_path())
            .args(["-X", "POST", "--data-binary", "with curl"])
            .arg(format!(
                "https://localhost:{}/v1/fn/to_uppercase",
                https.port()
            ))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, b"WITH CURL");
        // Without the CA, curl does not trust the node.
        let out = Command::new("curl")
            .args(["-sS", "--fail"])
            .arg(format!("https://localhost:{}/health", https.port()))
            .output()
            .unwrap();
        assert!(!out.status.success());
    }
}

/// Reads one RAC result from a TLS stream.
fn read_result(tls: &mut Tls) -> (ResultHeader, Vec<u8>) {
    let mut head = [0u8; HEADER_LEN];
    tls.read_exact(&mut head).unwrap();
    let Ok(Decoded::Complete(h, _)) = ResultHeader::decode(&head, 1 << 30) else {
        panic!("bad result header {head:?}")
    };
    let mut payload = vec![0; h.payload_len as usize];
    tls.read_exact(&mut payload).unwrap();
    (h, payload)
}

fn rac_call(tls: &mut Tls, request_id: u32, payload: &[u8]) -> (ResultHeader, Vec<u8>) {
    let (id, params) =
        netaccel_client::rac::builtin_call("to_uppercase", &[], payload.len()).unwrap();
    let header = rac_proto::CallHeader::call(id, request_id, payload.len() as u32, params);
    tls.write_all(&header.encode()).unwrap();
    tls.write_all(payload).unwrap();
    tls.flush().unwrap();
    read_result(tls)
}

fn rac_hello(tls: &mut Tls, tenant: &str, token: Option<&str>) -> (ResultHeader, Vec<u8>) {
    let payload = ControlRequest::Hello {
        tenant: tenant.to_string(),
        token: token.map(str::to_string),
    }
    .to_payload();
    let header = rac_proto::CallHeader::control(99, payload.len() as u32);
    tls.write_all(&header.encode()).unwrap();
    tls.write_all(&payload).unwrap();
    tls.flush().unwrap();
    read_result(tls)
}

#[test]
fn rac_over_tls_pipelined_and_large_payloads() {
    let pki = Pki::new(&test_dir("rac"), "rac");
    pki.server(1);
    let (_node, _, rac) = start(&pki, "", "");
    let mut tls = connect(rac, &pki.client(None)).unwrap();
    let (r, out) = rac_call(&mut tls, 1, b"rac over tls");
    assert_eq!((r.request_id, r.status), (1, Status::Ok));
    assert_eq!(out, b"RAC OVER TLS");
    // A payload over many TLS records (and the node's 64 KiB read chunk).
    let big: Vec<u8> = (0..300_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let (r, out) = rac_call(&mut tls, 2, &big);
    assert_eq!((r.request_id, r.status), (2, Status::Ok));
    assert_eq!(out, big.to_ascii_uppercase());
    // Pipelined: ten calls written at once, ten results.
    let (id, params) = netaccel_client::rac::builtin_call("to_uppercase", &[], 2).unwrap();
    let mut burst = Vec::new();
    for i in 10..20u32 {
        burst.extend_from_slice(&rac_proto::CallHeader::call(id, i, 2, params).encode());
        burst.extend_from_slice(b"ok");
    }
    tls.write_all(&burst).unwrap();
    tls.flush().unwrap();
    let mut ids: Vec<u32> = (0..10)
        .map(|_| read_result(&mut tls).0.request_id)
        .collect();
    ids.sort();
    assert_eq!(ids, (10..20).collect::<Vec<_>>());
}

/// A TLS client that sends calls and stops reading their results holds the node's
/// write only until `io_timeout_ms`: the node then drops it, and other TLS clients are
/// served all along. A `Connection: close` response ends with the TLS session's clean
/// close (close_notify), not a bare TCP close.
#[test]
fn a_stalled_tls_reader_is_dropped_and_a_closing_response_ends_cleanly() {
    let pki = Pki::new(&test_dir("stall"), "stall");
    pki.server(1);
    let (_node, https, rac) = start(&pki, "io_timeout_ms = 500", "");
    let config = pki.client(None);
    let mut staller = connect(rac, &config).unwrap();
    // Not forever, if the node never gave up.
    staller
        .sock
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (id, params) = netaccel_client::rac::builtin_call("to_uppercase", &[], 1 << 20).unwrap();
    let payload = vec![b'x'; 1 << 20];
    // Results of 1 MiB it never reads: the node's send buffer fills with the first.
    let writer = std::thread::spawn(move || {
        for i in 1..=16u32 {
            let head = rac_proto::CallHeader::call(id, i, 1 << 20, params).encode();
            if staller.write_all(&head).is_err() || staller.write_all(&payload).is_err() {
                break;
            }
            let _ = staller.flush();
        }
        staller
    });
    std::thread::sleep(Duration::from_millis(200));
    let mut other = connect(https, &config).unwrap();
    let started = Instant::now();
    for i in 0..20 {
        let body = format!("call {i}");
        let (status, out) = http(&mut other, "POST", "/v1/fn/to_uppercase", body.as_bytes());
        assert_eq!((status, out), (200, body.to_ascii_uppercase().into_bytes()));
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    // The node gives up on the staller: its reads end (reset or end of stream) rather
    // than block for the 10 s the client allows.
    let mut staller = writer.join().unwrap();
    let mut sink = vec![0u8; 1 << 16];
    let cut = Instant::now();
    loop {
        match staller.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(_) => assert!(cut.elapsed() < Duration::from_secs(9), "never dropped"),
        }
    }

    // A closing response: the body, then the clean end of the TLS session.
    let mut closing = connect(https, &config).unwrap();
    closing
        .write_all(b"POST /v1/fn/to_uppercase HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye")
        .unwrap();
    closing.flush().unwrap();
    let mut all = Vec::new();
    closing
        .read_to_end(&mut all)
        .expect("the session ends with close_notify, not a truncation");
    assert!(
        all.ends_with(b"\r\n\r\nBYE"),
        "{}",
        String::from_utf8_lossy(&all)
    );
}

#[test]
fn client_certificates_map_to_tenants_and_bad_ones_are_refused() {
    let dir = test_dir("mtls");
    let pki = Pki::new(&dir, "mtls");
    pki.server(1);
    let alice = pki.issue("alice", &[], 10, true);
    let carol = pki.issue("carol-laptop", &["carol.clients.example"], 11, true);
    let stranger = pki.issue("stranger", &[], 12, true);
    let other_ca = Pki::new(&dir.join("other"), "other");
    let forged = other_ca.issue("alice", &[], 13, true);
    let extra = format!(
        "client_ca = \"{}\"\n[tls.subjects]\nalice = \"team-a\"\n\"carol.clients.example\" = \"team-c\"\n",
        pki.ca_path().display()
    );
    let (node, https, rac) = start(
        &pki,
        "[[tenants]]\nname = \"team-a\"\ntoken = \"secret-a\"\n",
        &extra,
    );

    // By CN and by DNS alternative name.
    let mut a = connect(https, &pki.client(Some(&alice))).unwrap();
    assert_eq!(http(&mut a, "POST", "/v1/fn/to_uppercase", b"a").1, b"A");
    let mut c = connect(https, &pki.client(Some(&carol))).unwrap();
    assert_eq!(http(&mut c, "POST", "/v1/fn/to_uppercase", b"c").1, b"C");
    // A valid certificate no entry names: its own anonymous tenant by default.
    let mut s = connect(https, &pki.client(Some(&stranger))).unwrap();
    assert_eq!(http(&mut s, "POST", "/v1/fn/to_uppercase", b"s").1, b"S");
    assert_eq!(
        series(&node, "netaccel_tls_connections_total{tenant=\"team-a\"}"),
        1.0
    );
    assert_eq!(
        series(&node, "netaccel_tls_connections_total{tenant=\"team-c\"}"),
        1.0
    );
    assert_eq!(
        series(
            &node,
            "netaccel_tls_connections_total{tenant=\"anonymous\"}"
        ),
        1.0
    );

    // Over RAC the certificate's tenant wins: hello cannot move the connection to
    // another tenant, even with that tenant's right token; naming its own is fine.
    let mut r = connect(rac, &pki.client(Some(&carol))).unwrap();
    let (h, msg) = rac_hello(&mut r, "team-a", Some("secret-a"));
    assert_eq!(
        h.status,
        Status::Unauthorized,
        "{}",
        String::from_utf8_lossy(&msg)
    );
    let (h, _) = rac_hello(&mut r, "team-c", None);
    assert_eq!(h.status, Status::Ok);
    assert_eq!(rac_call(&mut r, 1, b"rac").1, b"RAC");
    assert_eq!(
        series(&node, "netaccel_tls_connections_total{tenant=\"team-c\"}"),
        2.0
    );

    // No certificate, or one from another CA: the handshake fails (TLS 1.3 reports
    // it at the client's first read, after its side of the handshake).
    let failures_before = series(
        &node,
        "netaccel_tls_handshake_failures_total{reason=\"handshake\"}",
    );
    // (`forged` is issued by another CA, for the same name as alice's.)
    for config in [pki.client(None), pki.client(Some(&forged))] {
        let refused = connect(https, &config).and_then(|mut t| {
            t.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")?;
            let mut b = [0u8; 1];
            t.read_exact(&mut b)
        });
        assert!(
            refused.is_err(),
            "a connection without a valid client certificate was served"
        );
    }
    eventually("both refusals are counted", || {
        series(
            &node,
            "netaccel_tls_handshake_failures_total{reason=\"handshake\"}",
        ) >= failures_before + 2.0
    });
    // The ones already up are unaffected.
    assert_eq!(
        http(&mut a, "POST", "/v1/fn/to_uppercase", b"still").1,
        b"STILL"
    );
}

#[test]
fn unknown_subjects_refused_when_configured_and_optional_certificates() {
    let pki = Pki::new(&test_dir("refuse"), "refuse");
    pki.server(1);
    let alice = pki.issue("alice", &[], 10, true);
    let stranger = pki.issue("stranger", &[], 12, true);
    let extra = format!(
        "client_ca = \"{}\"\nclient_certs = \"optional\"\nrefuse_unknown_subjects = true\n[tls.subjects]\nalice = \"team-a\"\n",
        pki.ca_path().display()
    );
    let (node, https, _) = start(&pki, "", &extra);
    let mut a = connect(https, &pki.client(Some(&alice))).unwrap();
    assert_eq!(http(&mut a, "POST", "/v1/fn/to_uppercase", b"a").1, b"A");
    // Optional: no certificate is served, as anonymous.
    let mut none = connect(https, &pki.client(None)).unwrap();
    assert_eq!(http(&mut none, "GET", "/health", b"").0, 200);
    // A valid certificate that maps to no tenant is closed after the handshake.
    let mut s = connect(https, &pki.client(Some(&stranger))).unwrap();
    let _ = s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut b = [0u8; 1];
    assert!(
        s.read_exact(&mut b).is_err(),
        "an unknown subject was served"
    );
    eventually("the refusal is counted", || {
        series(
            &node,
            "netaccel_tls_handshake_failures_total{reason=\"unknown_subject\"}",
        ) == 1.0
    });
    assert_eq!(
        series(&node, "netaccel_tls_connections_total{tenant=\"team-a\"}"),
        1.0
    );
    assert_eq!(
        series(
            &node,
            "netaccel_tls_connections_total{tenant=\"anonymous\"}"
        ),
        1.0
    );
}

#[test]
fn sighup_reload_keeps_open_connections_and_new_ones_get_the_new_certificate() {
    let pki = Pki::new(&test_dir("reload"), "reload");
    let first = pki.server(1);
    let (node, https, _) = start(&pki, "", "");
    let mut open = connect(https, &pki.client(None)).unwrap();
    assert_eq!(served_cert(&open), first.der);
    assert_eq!(http(&mut open, "GET", "/health", b"").0, 200);

    let second = pki.server(2);
    assert_ne!(first.der, second.der);
    // SAFETY: kill(2) on the node's pid.
    unsafe { libc::kill(node.pid(), libc::SIGHUP) };
    eventually("a new connection sees the new certificate", || {
        served_cert(&connect(https, &pki.client(None)).unwrap()) == second.der
    });
    assert_eq!(
        series(&node, "netaccel_tls_reloads_total{result=\"ok\"}"),
        1.0
    );
    // The connection made before the reload keeps its session and is served.
    for _ in 0..3 {
        assert_eq!(
            http(&mut open, "POST", "/v1/fn/to_uppercase", b"kept").1,
            b"KEPT"
        );
    }

    // A bad file: logged, counted, the second certificate stays.
    std::fs::write(pki.dir.join("server.pem"), "not a certificate").unwrap();
    unsafe { libc::kill(node.pid(), libc::SIGHUP) };
    eventually("the failed reload is counted", || {
        series(&node, "netaccel_tls_reloads_total{result=\"error\"}") == 1.0
    });
    let mut after = connect(https, &pki.client(None)).unwrap();
    assert_eq!(served_cert(&after), second.der);
    assert_eq!(http(&mut after, "GET", "/health", b"").0, 200);
    assert_eq!(http(&mut open, "GET", "/health", b"").0, 200);
}

#[test]
fn sessions_resume_and_are_counted() {
    let pki = Pki::new(&test_dir("resume"), "resume");
    pki.server(1);
    let (node, https, _) = start(&pki, "", "");
    let config = pki.client(None);
    let mut full = connect(https, &config).unwrap();
    // TLS 1.3 tickets come after the handshake: one request makes sure they arrived.
    assert_eq!(http(&mut full, "GET", "/health", b"").0, 200);
    let mut resumed = connect(https, &config).unwrap();
    assert_eq!(
        resumed.conn.handshake_kind(),
        Some(rustls::HandshakeKind::Resumed)
    );
    assert_eq!(http(&mut resumed, "GET", "/health", b"").0, 200);
    assert_eq!(
        series(&node, "netaccel_tls_handshakes_total{kind=\"resumed\"}"),
        1.0
    );
    assert_eq!(
        series(&node, "netaccel_tls_handshakes_total{kind=\"full\"}"),
        1.0
    );
}

/// The first bytes a real client sends: a whole ClientHello.
fn client_hello(config: &Arc<ClientConfig>) -> Vec<u8> {
    let mut conn = ClientConnection::new(
        Arc::clone(config),
        ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    hello
}

#[test]
fn handshake_garbage_and_truncated_hellos_do_not_hurt_other_clients() {
    let pki = Pki::new(&test_dir("garbage"), "garbage");
    pki.server(1);
    let (node, https, rac) = start(&pki, "", "handshake_timeout_ms = 500\n");
    let config = pki.client(None);
    let hello = client_hello(&config);
    let mut bad = Vec::new();
    for addr in [https, rac] {
        // Garbage, a record header promising more than comes, a ClientHello cut in
        // half, one cut after its first byte, and a client that says nothing.
        for bytes in [
            &b"\x00\xff garbage garbage garbage"[..],
            &[0x16, 0x03, 0x01, 0xff, 0xff, 0x01],
            &hello[..hello.len() / 2],
            &hello[..1],
            &[],
        ] {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(bytes).unwrap();
            bad.push(s);
        }
    }
    // Meanwhile a good client is served at once on both listeners.
    let started = Instant::now();
    let mut good = connect(https, &config).unwrap();
    assert_eq!(
        http(&mut good, "POST", "/v1/fn/to_uppercase", b"fine").1,
        b"FINE"
    );
    let mut good_rac = connect(rac, &config).unwrap();
    assert_eq!(rac_call(&mut good_rac, 1, b"fine").1, b"FINE");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // Every bad connection is closed by the node, at the latest at the handshake timeout.
    for mut s in bad {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut sink = Vec::new();
        match s.read_to_end(&mut sink) {
            // An end of stream (after an alert, or none) or a reset: closed.
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("a bad connection was not closed: {e}"),
        }
    }
    eventually("all ten are counted", || {
        series(
            &node,
            "netaccel_tls_handshake_failures_total{reason=\"handshake\"}",
        ) + series(
            &node,
            "netaccel_tls_handshake_failures_total{reason=\"timeout\"}",
        ) >= 10.0
    });
    // At least the three silent ones per listener waited for the timeout.
    assert!(
        series(
            &node,
            "netaccel_tls_handshake_failures_total{reason=\"timeout\"}"
        ) >= 6.0
    );
    assert_eq!(http(&mut good, "GET", "/health", b"").0, 200);
}

/// Issue 29: plain HTTP sent to the HTTPS port got a raw header-parse error from the
/// client (the node's TLS alert read as HTTP); it now gets a plain `400` that says the
/// port speaks TLS, and the refusal is counted as a failed handshake.
#[test]
fn plain_http_to_a_tls_port_is_told_the_port_speaks_tls() {
    let pki = Pki::new(&test_dir("plain"), "plain");
    pki.server(1);
    let (node, https, rac) = start(&pki, "", "");
    let mut s = TcpStream::connect(https).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{answer}"
    );
    assert!(
        answer.contains("this port speaks TLS: use https://"),
        "{answer}"
    );
    // On the RAC-over-TLS port the connection is closed, without an HTTP answer.
    let mut s = TcpStream::connect(rac).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    match s.read_to_end(&mut answer) {
        Ok(_) => assert!(answer.is_empty(), "{answer:?}"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
    }
    eventually("both counted", || {
        series(
            &node,
            "netaccel_tls_handshake_failures_total{reason=\"handshake\"}",
        ) >= 2.0
    });
    // TLS clients are served as before.
    let mut good = connect(https, &pki.client(None)).unwrap();
    assert_eq!(http(&mut good, "GET", "/health", b"").0, 200);
}

#[test]
fn the_rust_rac_client_speaks_tls_with_a_client_certificate() {
    let pki = Pki::new(&test_dir("client"), "client");
    pki.server(1);
    let alice = pki.issue("alice", &[], 10, true);
    std::fs::write(pki.dir.join("alice.pem"), &alice.cert_pem).unwrap();
    std::fs::write(pki.dir.join("alice.key"), &alice.key_pem).unwrap();
    let extra = format!(
        "client_ca = \"{}\"\n[tls.subjects]\nalice = \"team-a\"\n",
        pki.ca_path().display()
    );
    let (node, _, rac) = start(&pki, "", &extra);
    let config = netaccel_client::rac::tls_config(
        &pki.ca_path(),
        Some((&pki.dir.join("alice.pem"), &pki.dir.join("alice.key"))),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = netaccel_client::rac::RacClient::connect_tls(
            &rac.to_string(),
            "localhost",
            Arc::clone(&config),
        )
        .await
        .unwrap();
        // Pipelined: all in flight at once on the one TLS connection.
        let calls = (0..20u8)
            .map(|i| client.call_by_name("to_uppercase", [0; 44], vec![b'a' + i; 1000], 0));
        let outs = futures_join(calls).await;
        for (i, out) in outs.into_iter().enumerate() {
            assert_eq!(out.unwrap().payload, vec![b'A' + i as u8; 1000]);
        }
        // A wrong server name is refused by the client.
        let err = netaccel_client::rac::RacClient::connect_tls(
            &rac.to_string(),
            "elsewhere.example",
            config,
        )
        .await
        .err()
        .unwrap();
        assert!(err.to_string().contains("TLS handshake"), "{err}");
    });
    assert_eq!(
        series(&node, "netaccel_tls_connections_total{tenant=\"team-a\"}"),
        1.0
    );
}

/// Awaits all of `futures` concurrently, results in order.
async fn futures_join<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futures.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in pinned.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(Option::unwrap).collect()
}

#[test]
fn command_line_flags_and_refused_configurations() {
    let pki = Pki::new(&test_dir("flags"), "flags");
    pki.server(1);
    let https = free_addr();
    let (cert, key) = (pki.dir.join("server.pem"), pki.dir.join("server.key"));
    let node = TestNode::start_logging(
        "",
        &[
            "--https",
            &https.to_string(),
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let mut tls = connect(https, &pki.client(None)).unwrap();
    assert_eq!(
        http(&mut tls, "POST", "/v1/fn/to_uppercase", b"flags").1,
        b"FLAGS"
    );
    drop(node);
    // A listener without a certificate, and a certificate that is not one, stop the
    // start with a message naming what is wrong.
    std::fs::write(pki.dir.join("bad.pem"), "not a certificate").unwrap();
    let bad = pki.dir.join("bad.pem");
    for (args, want) in [
        (
            vec!["--https", "127.0.0.1:0"],
            "needs a certificate and key",
        ),
        (
            vec![
                "--https",
                "127.0.0.1:0",
                "--tls-cert",
                bad.to_str().unwrap(),
                "--tls-key",
                key.to_str().unwrap(),
            ],
            "bad.pem",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_netaccel-node"))
            .args(["--http", "127.0.0.1:0", "--rac", "127.0.0.1:0"])
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} started");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}
