//! The hostile-tenant suite (issue 31, part A): the real node binary under the
//! production profile (`anonymous = "refuse"`, a hashed token made by
//! `netaccel-node hash-token`), driven by real clients on every port — curl over HTTP,
//! the project's RAC client, the tonic gRPC client. Tenant B, holding only its own
//! token, tries tenant A's accelerators, reconfiguration, the metrics and the catalog,
//! and A's token replayed in garbled forms; callers without a token try every port.
//! Every attempt is refused with its protocol's status and leaves an audit line (no
//! token in the log), and A's calls go on working. Then A's token is rotated with
//! SIGHUP: the old one stops working, on a RAC connection already past `hello` too.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{curl, free_addr, TestNode};
use netaccel_client::rac::{RacClient, RacError};
use netaccel_node::front::grpc::pb;
use pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use rac_proto::{ControlRequest, Status};
use tonic::Code;

const A_TOKEN: &str = "a-Secret-7f3e9c";
const B_TOKEN: &str = "b-Secret-51d2aa";
const A_ROTATED: &str = "a-Rotated-0c44e1";

/// `netaccel-node hash-token`, as a user runs it: the token on stdin, the hash out.
fn hash_token(token: &str) -> String {
    testkit::hash_token(env!("CARGO_BIN_EXE_netaccel-node").as_ref(), token)
}

/// The tenants section: A may call `to_uppercase` and register its own shared memory
/// objects (`/team-a-*`), B only call `echo`; ops may reconfigure.
fn tenants(a_token_line: &str) -> String {
    format!(
        "anonymous = \"refuse\"\n\
         [[tenants]]\nname = \"team-a\"\n{a_token_line}\ncall = [\"to_uppercase\"]\n\
         shared_memory = [\"/team-a-*\"]\n\
         [[tenants]]\nname = \"team-b\"\ntoken = \"{B_TOKEN}\"\ncall = [\"echo*\"]\n\
         [[tenants]]\nname = \"ops\"\ntoken = \"ops-token\"\nroles = [\"operator\"]\n"
    )
}

fn http(node: &TestNode, method: &str, path: &str, auth: Option<&str>) -> (u16, String) {
    let url = node.url(path);
    let header = auth.map(|a| format!("Authorization: {a}"));
    let mut args = vec!["-X", method, "--data-binary", "hello"];
    if let Some(h) = &header {
        args.extend(["-H", h.as_str()]);
    }
    args.push(&url);
    let (status, body) = curl(&args);
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[test]
fn tenant_b_cannot_use_what_is_a_s_and_strangers_get_nothing() {
    let a_hash = hash_token(A_TOKEN);
    let (mut node, grpc) = TestNode::start_logging_with(
        || {
            let grpc = free_addr();
            let a_line = format!("token_hash = \"{a_hash}\"");
            // Every refusal's audit line, not the default's few a second.
            // The made-up tokens below are all checked (a flood is the next test's).
            let config = format!(
                "grpc = \"{grpc}\"\nlog_refusals_per_second_max = 1000\n\
                 token_check_ms_per_second_max = 60000\n{}",
                tenants(&a_line)
            );
            (config, grpc)
        },
        &["--log-level", "warn,netaccel_node::audit=info"],
    );
    let a = bearer(A_TOKEN);
    let b = bearer(B_TOKEN);
    let a_calls = |node: &TestNode| {
        let (status, body) = http(node, "POST", "/v1/fn/to_uppercase", Some(&a));
        assert_eq!((status, body.as_str()), (200, "HELLO"));
    };
    a_calls(&node);

    // HTTP: B against A's accelerator, reconfiguration, metrics, the catalog.
    for (method, path) in [
        ("POST", "/v1/fn/to_uppercase"),
        ("PUT", "/v1/slots/0"),
        ("GET", "/metrics"),
        ("GET", "/v1/accelerators"),
        ("GET", "/v1/slots"),
        ("GET", "/v2/models/stats"),
    ] {
        let (status, body) = http(&node, method, path, Some(&b));
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert!(body.contains("team-b"), "{body}");
    }
    assert_eq!(http(&node, "POST", "/v1/fn/echo", Some(&b)).0, 200);
    // A's token garbled, and no token at all: 401 with a bearer challenge.
    let garbled = [
        bearer(&A_TOKEN.to_uppercase()),
        bearer(&A_TOKEN[..A_TOKEN.len() - 1]),
        format!("{a}x"),
        format!("bearer {A_TOKEN}"),
        format!("Bearer  {A_TOKEN}"),
        format!("Basic {A_TOKEN}"),
        bearer(&a_hash),
    ];
    for auth in garbled.iter().map(|g| Some(g.as_str())).chain([None]) {
        let (status, body) = http(&node, "POST", "/v1/fn/to_uppercase", auth);
        assert_eq!(status, 401, "{auth:?}: {body}");
    }
    let (_, head) = curl(&["-i", &node.url("/metrics")]);
    let head = String::from_utf8_lossy(&head).to_lowercase();
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    assert_eq!(
        http(&node, "GET", "/health", None).0,
        200,
        "probes need no token"
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(rac_attempts(node.rac_addr));
    rt.block_on(grpc_attempts(grpc));
    a_calls(&node);

    // Every refusal is an audit line, on every port; no token is ever logged.
    let mut log = String::new();
    wait_until("the audit lines are written", || {
        log = node.log();
        ["http", "rac", "grpc"]
            .iter()
            .all(|p| audit_lines(&log).any(|l| l.contains(&format!("\"protocol\":\"{p}\""))))
    });
    for (event, protocol) in [
        ("authentication_failed", "http"),
        ("forbidden", "http"),
        ("authentication_failed", "rac"),
        ("forbidden", "rac"),
        ("authentication_failed", "grpc"),
        ("forbidden", "grpc"),
    ] {
        let wanted = [
            format!("\"event\":\"{event}\""),
            format!("\"protocol\":\"{protocol}\""),
        ];
        assert!(
            audit_lines(&log).any(|l| wanted.iter().all(|w| l.contains(w.as_str()))),
            "no {event} line for {protocol} in:\n{log}"
        );
    }
    for secret in [A_TOKEN, B_TOKEN, "ops-token"] {
        assert!(!log.contains(secret), "a token is in the log:\n{log}");
    }

    rotation(&mut node, &rt);
}

async fn rac_attempts(rac: SocketAddr) {
    let refused = |r: Result<_, RacError>| match r {
        Err(RacError::Status { status, .. }) => assert_eq!(status, Status::Unauthorized),
        other => panic!("expected UNAUTHORIZED, got {other:?}"),
    };
    // No hello under anonymous = "refuse": nothing.
    let stranger = RacClient::connect(&rac.to_string()).await.unwrap();
    refused(upper(&stranger).await.map(drop));
    refused(
        stranger
            .control(&ControlRequest::Catalog { token: None })
            .await
            .map(drop),
    );
    // B naming A, with its own token and with A's garbled.
    for token in [
        B_TOKEN.to_string(),
        A_TOKEN.to_uppercase(),
        format!(" {A_TOKEN}"),
    ] {
        let hello = ControlRequest::Hello {
            tenant: "team-a".into(),
            token: Some(token),
        };
        refused(stranger.control(&hello).await.map(drop));
    }
    // B as itself: its own accelerator only.
    let b = RacClient::connect(&rac.to_string()).await.unwrap();
    let hello = ControlRequest::Hello {
        tenant: "team-b".into(),
        token: Some(B_TOKEN.into()),
    };
    assert_eq!(b.control(&hello).await.unwrap()["tenant"], "team-b");
    refused(upper(&b).await.map(drop));
    refused(
        b.control(&ControlRequest::Catalog { token: None })
            .await
            .map(drop),
    );
    let load = ControlRequest::Load {
        slot: 0,
        accelerator: "echo".into(),
        token: Some(B_TOKEN.into()),
    };
    refused(b.control(&load).await.map(drop));
    let echo = b.call_by_name("echo", [0; 44], b"abc".to_vec(), 0).await;
    assert_eq!(echo.unwrap().payload, b"abc");
}

async fn upper(c: &RacClient) -> Result<(), RacError> {
    c.call_by_name("to_uppercase", [0; 44], b"abc".to_vec(), 0)
        .await
        .map(drop)
}

async fn grpc_client(addr: SocketAddr) -> GrpcInferenceServiceClient<tonic::transport::Channel> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match tonic::transport::Channel::from_shared(format!("http://{addr}"))
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

fn infer(model: &str, auth: Option<&str>) -> tonic::Request<pb::ModelInferRequest> {
    let input = pb::model_infer_request::InferInputTensor {
        name: "INPUT0".into(),
        datatype: "UINT8".into(),
        shape: vec![3],
        ..Default::default()
    };
    let mut req = tonic::Request::new(pb::ModelInferRequest {
        model_name: model.into(),
        inputs: vec![input],
        raw_input_contents: vec![b"abc".to_vec().into()],
        ..Default::default()
    });
    if let Some(auth) = auth {
        req.metadata_mut()
            .insert("authorization", auth.parse().unwrap());
    }
    req
}

/// The code of a refused gRPC call.
fn code<T: std::fmt::Debug>(r: Result<T, tonic::Status>) -> Code {
    r.unwrap_err().code()
}

async fn grpc_attempts(addr: SocketAddr) {
    let mut c = grpc_client(addr).await;
    let b = bearer(B_TOKEN);
    assert_eq!(
        code(c.model_infer(infer("to_uppercase", None)).await),
        Code::Unauthenticated
    );
    let garbled = bearer(&A_TOKEN.to_lowercase());
    let r = c.model_infer(infer("to_uppercase", Some(&garbled))).await;
    assert_eq!(code(r), Code::Unauthenticated);
    let r = c.model_infer(infer("to_uppercase", Some(&b))).await;
    assert_eq!(code(r), Code::PermissionDenied);
    let mut stats = tonic::Request::new(pb::ModelStatisticsRequest::default());
    stats
        .metadata_mut()
        .insert("authorization", b.parse().unwrap());
    assert_eq!(
        code(c.model_statistics(stats).await),
        Code::PermissionDenied
    );
    let mut load = tonic::Request::new(pb::RepositoryModelLoadRequest {
        model_name: "echo".into(),
        ..Default::default()
    });
    load.metadata_mut()
        .insert("authorization", b.parse().unwrap());
    assert_eq!(
        code(c.repository_model_load(load).await),
        Code::PermissionDenied
    );
    let a = bearer(A_TOKEN);
    let out = c
        .model_infer(infer("to_uppercase", Some(&a)))
        .await
        .unwrap();
    assert_eq!(&out.into_inner().raw_output_contents[0][..], b"ABC");
}

/// A's token rotated with SIGHUP: the old one is refused on new requests and on a RAC
/// connection that said `hello` with it before; the new one works.
fn rotation(node: &mut TestNode, rt: &tokio::runtime::Runtime) {
    let rac = node.rac_addr.to_string();
    let a_rac = rt.block_on(async {
        let c = RacClient::connect(&rac).await.unwrap();
        let hello = ControlRequest::Hello {
            tenant: "team-a".into(),
            token: Some(A_TOKEN.into()),
        };
        c.control(&hello).await.unwrap();
        c
    });
    let path = node.dir.join("node.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let at = text.find("anonymous = ").unwrap();
    let rotated = tenants(&format!("token_hash = \"{}\"", hash_token(A_ROTATED)));
    std::fs::write(&path, format!("{}{rotated}", &text[..at])).unwrap();
    unsafe { libc::kill(node.pid(), libc::SIGHUP) };
    wait_until("the reload is audited", || {
        node.log().contains("\"event\":\"policy_reload\"")
    });
    assert!(node.log().contains("tenants reloaded"), "{}", node.log());
    assert_eq!(
        http(node, "POST", "/v1/fn/to_uppercase", Some(&bearer(A_TOKEN))).0,
        401
    );
    let (status, body) = http(
        node,
        "POST",
        "/v1/fn/to_uppercase",
        Some(&bearer(A_ROTATED)),
    );
    assert_eq!((status, body.as_str()), (200, "HELLO"));
    let old = rt.block_on(a_rac.call_by_name("to_uppercase", [0; 44], b"x".to_vec(), 0));
    match old {
        Err(RacError::Status { status, .. }) => assert_eq!(status, Status::Unauthorized),
        other => panic!("the removed token still works over RAC: {other:?}"),
    }
    assert!(!node.log().contains(A_ROTATED));
}

/// A flood of made-up tokens costs the node at most its check budget a second: past
/// it they are answered `503 BUSY` without an argon2 check, while tenant A, whose
/// token the node has seen, is served throughout, on a new connection and over RAC
/// (its `hello` answered from the same cache).
#[test]
fn a_flood_of_made_up_tokens_is_answered_busy_while_known_tenants_are_served() {
    let a_hash = hash_token(A_TOKEN);
    let node = TestNode::start(&format!(
        "token_check_ms_per_second_max = 20\n{}",
        tenants(&format!("token_hash = \"{a_hash}\""))
    ));
    let a = bearer(A_TOKEN);
    let a_call = || http(&node, "POST", "/v1/fn/to_uppercase", Some(&a));
    assert_eq!(a_call(), (200, "HELLO".to_string()));
    let agent = ureq::AgentBuilder::new().build();
    let (mut busy, mut unknown) = (0, 0);
    let started = Instant::now();
    // Long enough to span fresh seconds of budget (A's first check spent this one's).
    let mut i = 0;
    while started.elapsed() < Duration::from_millis(2500) {
        i += 1;
        let reply = agent
            .post(&node.url("/v1/fn/to_uppercase"))
            .set("Authorization", &bearer(&format!("made-up-{i}")))
            .send_string("x");
        match reply {
            Err(ureq::Error::Status(503, r)) => {
                assert!(r.into_string().unwrap().contains("BUSY"));
                busy += 1;
            }
            Err(ureq::Error::Status(401, _)) => unknown += 1,
            other => panic!("made-up token {i}: {other:?}"),
        }
        if i % 20 == 0 {
            assert_eq!(a_call(), (200, "HELLO".to_string()), "A during the flood");
        }
    }
    let took = started.elapsed();
    eprintln!("{i} made-up tokens in {took:?}: {unknown} checked (401), {busy} busy (503)");
    assert!(busy > 0 && unknown > 0, "{unknown} checked, {busy} busy");
    // At most the budget's share of checks a second (each is at least one argon2
    // check, milliseconds; one may overrun the second it started in).
    let seconds = took.as_secs_f64().ceil() as usize;
    assert!(unknown <= 2 * seconds + 2, "{unknown} checks in {took:?}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = RacClient::connect(&node.rac_addr.to_string())
            .await
            .unwrap();
        c.hello("team-a", Some(A_TOKEN)).await.unwrap();
        upper(&c).await.unwrap();
    });
}

/// System shared memory under policies: a tenant registers only the objects its
/// `shared_memory` patterns name, never another tenant's object, and region names are
/// its own (B's `input0` is not A's).
#[test]
fn shared_memory_keys_follow_the_policy_and_names_are_per_tenant() {
    let node = TestNode::start(&tenants(&format!("token = \"{A_TOKEN}\"")));
    let pid = std::process::id();
    let key_a = format!("/team-a-hostile-{pid}");
    let path = format!("/dev/shm/{}", &key_a[1..]);
    std::fs::write(&path, b"team a's secret bytes").unwrap();
    let register = |token: &str, region: &str, key: &str| {
        let reply =
            ureq::post(&node.url(&format!("/v2/systemsharedmemory/region/{region}/register")))
                .set("Authorization", &bearer(token))
                .send_string(&format!(
                    "{{\"key\":\"{key}\",\"offset\":0,\"byte_size\":8}}"
                ));
        match reply {
            Ok(r) => (r.status(), r.into_string().unwrap()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
            Err(e) => panic!("{e}"),
        }
    };
    // B may register no object at all, A's least of all.
    let (status, body) = register(B_TOKEN, "input0", &key_a);
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("team-b") && body.contains("shared memory"),
        "{body}"
    );
    assert_eq!(register(A_TOKEN, "input0", &key_a).0, 200);
    // A may not register an object outside its prefix either.
    assert_eq!(register(A_TOKEN, "other", "/team-b-anything").0, 403);
    // A's region is invisible to B.
    let status_of = |token: &str| {
        ureq::get(&node.url("/v2/systemsharedmemory/status"))
            .set("Authorization", &bearer(token))
            .call()
            .expect("the status of one's own regions")
            .into_string()
            .unwrap()
    };
    assert!(status_of(A_TOKEN).contains("input0"));
    assert!(!status_of(B_TOKEN).contains("input0"));
    let _ = std::fs::remove_file(&path);
}

fn audit_lines(log: &str) -> impl Iterator<Item = &str> {
    log.lines().filter(|l| l.contains("netaccel_node::audit"))
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
