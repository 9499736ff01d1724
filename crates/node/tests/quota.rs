//! Black-box tests of per-tenant quotas and object namespaces: the real node binary
//! over loopback, real clients (curl with client certificates for HTTPS tenants, the
//! Rust RAC client with `hello` for RAC tenants, plain HTTP for anonymous callers).
//!
//! - Tenant B cannot list, read, overwrite or delete tenant A's objects: to B they are
//!   absent (404, not 403), and B's write of the same key is B's own object.
//! - A tenant over its calls/s quota is refused (HTTP 429 with `Retry-After`, RAC
//!   `BUSY`, gRPC `RESOURCE_EXHAUSTED` with `retry-after`) while another tenant is
//!   served, and the refusals are counted by tenant.
//!
//! Certificates are made here at test time (rcgen) under the test's own temporary
//! folder; none is committed.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use netaccel_client::rac::{RacClient, RacError};
use rac_proto::{params, ControlRequest, Status};

/// A test CA, a server certificate for 127.0.0.1 and client certificates, as PEM files.
struct Pki {
    dir: PathBuf,
    ca: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "netaccel quota test CA");
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = params.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        let pki = Pki {
            dir: dir.to_path_buf(),
            ca,
            ca_key,
        };
        pki.issue("server", &["127.0.0.1"], false);
        pki
    }

    /// Writes `NAME.pem` and `NAME.key`, a certificate with common name `name`.
    fn issue(&self, name: &str, sans: &[&str], client: bool) {
        let sans = sans.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut params = rcgen::CertificateParams::new(sans).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        }];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        std::fs::write(self.path(name, "pem"), cert.pem()).unwrap();
        std::fs::write(self.path(name, "key"), key.serialize_pem()).unwrap();
    }

    fn path(&self, name: &str, ext: &str) -> String {
        self.dir.join(format!("{name}.{ext}")).display().to_string()
    }
}

/// Whether curl is on PATH; missing, a skip outside CI and a failure in it.
fn have_curl() -> bool {
    let found = Command::new("curl").arg("--version").output().is_ok();
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "curl is not installed; CI needs it"
        );
        eprintln!("SKIP: curl is not installed");
    }
    found
}

/// One HTTPS request as the holder of `who`'s client certificate: status, headers
/// (lower-case names) and body.
fn as_tenant(
    pki: &Pki,
    who: &str,
    method: &str,
    url: &str,
    body: Option<&str>,
) -> (u16, String, Vec<u8>) {
    let (cert, key, ca) = (
        pki.path(who, "pem"),
        pki.path(who, "key"),
        pki.path("ca", "pem"),
    );
    // (A HEAD response announces a body curl must not wait for: `-I` says so.)
    let method_args = if method == "HEAD" {
        vec!["-I"]
    } else {
        vec!["-X", method]
    };
    let mut args = method_args;
    args.extend(["--cacert", &ca, "--cert", &cert, "--key", &key, "-D", "-"]);
    if let Some(body) = body {
        args.extend(["--data-binary", body]);
    }
    args.push(url);
    let (status, out) = curl(&args);
    let text = String::from_utf8(out).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    (status, head.to_ascii_lowercase(), body.as_bytes().to_vec())
}

/// A node with HTTPS for client-certificate tenants `team-a` (CN alice) and `team-b`
/// (CN bob), `config` before its `[tls]` table. Returns the HTTPS base URL.
fn start(pki: &Pki, config: &str) -> (TestNode, String) {
    TestNode::start_with(|| {
        let https = free_addr();
        let text = format!(
            "{config}\n[tls]\nhttps = \"{https}\"\ncert = \"{}\"\nkey = \"{}\"\nclient_ca = \"{}\"\n\
             [tls.subjects]\nalice = \"team-a\"\nbob = \"team-b\"\n",
            pki.path("server", "pem"),
            pki.path("server", "key"),
            pki.path("ca", "pem"),
        );
        (text, format!("https://{https}"))
    })
}

fn test_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("netaccel-quota-{}-{name}", std::process::id()))
}

#[test]
fn a_tenant_cannot_touch_another_tenants_objects() {
    if !have_curl() {
        return;
    }
    let pki = Pki::new(&test_dir("objects"));
    pki.issue("alice", &[], true);
    pki.issue("bob", &[], true);
    let config = "[[tenants]]\nname = \"team-a\"\ntoken = \"ta\"\n\
                  quota = { object_bytes_max = 16 }\n";
    let (node, https) = start(&pki, config);
    let url = format!("{https}/v1/objects/plan.txt");

    let (code, ..) = as_tenant(&pki, "alice", "PUT", &url, Some("a's plan"));
    assert_eq!(code, 201);
    // B: read, head, delete are all "no such object", as for a key nobody used.
    for method in ["GET", "HEAD", "DELETE"] {
        let (code, ..) = as_tenant(&pki, "bob", method, &url, None);
        assert_eq!(code, 404, "bob {method}");
    }
    let (code, _, body) = as_tenant(&pki, "bob", "GET", &url, None);
    let nobody = as_tenant(
        &pki,
        "bob",
        "GET",
        &format!("{https}/v1/objects/none"),
        None,
    );
    assert_eq!(code, nobody.0);
    assert_eq!(
        String::from_utf8(body).unwrap().replace("plan.txt", "none"),
        String::from_utf8(nobody.2).unwrap(),
        "the refusal does not reveal that the object exists"
    );
    // Anonymous callers (plain HTTP) have a namespace of their own.
    let (code, _) = curl(&[&node.url("/v1/objects/plan.txt")]);
    assert_eq!(code, 404);
    // B's write of the same key is B's own object; A's is untouched.
    let (code, ..) = as_tenant(&pki, "bob", "PUT", &url, Some("b's plan"));
    assert_eq!(code, 201, "a new object, in B's namespace");
    let (code, _, body) = as_tenant(&pki, "alice", "GET", &url, None);
    assert_eq!((code, body.as_slice()), (200, &b"a's plan"[..]));
    let (code, ..) = as_tenant(&pki, "bob", "DELETE", &url, None);
    assert_eq!(code, 204);
    let (_, _, body) = as_tenant(&pki, "alice", "GET", &url, None);
    assert_eq!(body, b"a's plan");

    // A's object bytes are held to its quota of 16: 8 held, 9 more refused.
    let more = format!("{https}/v1/objects/more");
    let (code, _, body) = as_tenant(&pki, "alice", "PUT", &more, Some("123456789"));
    assert_eq!(code, 507, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("object quota"));
    assert_eq!(
        as_tenant(&pki, "alice", "PUT", &more, Some("12345678")).0,
        201
    );
    assert_eq!(
        as_tenant(&pki, "bob", "PUT", &more, Some("123456789")).0,
        201
    );
    let series = "netaccel_quota_refusals_total{tenant=\"team-a\",reason=\"object_bytes_max\"}";
    assert_eq!(node.metric(series), 1.0);
}

#[test]
fn a_tenant_over_its_call_rate_is_refused_while_another_is_served() {
    if !have_curl() {
        return;
    }
    let pki = Pki::new(&test_dir("calls"));
    pki.issue("alice", &[], true);
    pki.issue("bob", &[], true);
    // team-a: 1 call a second, a burst of 2; anonymous callers: the same, shared.
    let config = "anonymous_quota = { calls_per_s = 1, calls_burst = 2 }\n\
                  [[slots]]\naccelerator = \"echo\"\n[[slots]]\naccelerator = \"to_uppercase\"\n\
                  [[tenants]]\nname = \"team-a\"\ntoken = \"ta\"\n\
                  quota = { calls_per_s = 1, calls_burst = 2 }\n\
                  [[tenants]]\nname = \"team-b\"\ntoken = \"tb\"\n";
    let (node, https) = start(&pki, config);
    let call = format!("{https}/v1/fn/to_uppercase");

    // HTTPS: A's calls past its burst are refused 429 with Retry-After (at 1 call a
    // second, a third call within the second; each try is a curl run, so a slow
    // machine may see one more pass), while B's are all served.
    let mut served = 0;
    let refused = (0..10).any(|_| {
        let (code, head, body) = as_tenant(&pki, "alice", "POST", &call, Some("a"));
        let (b_code, _, b_body) = as_tenant(&pki, "bob", "POST", &call, Some("b"));
        assert_eq!((b_code, b_body.as_slice()), (200, &b"B"[..]));
        if code == 429 {
            assert!(head.lines().any(|l| l.trim() == "retry-after: 1"), "{head}");
            assert!(String::from_utf8_lossy(&body).contains("TOO_MANY_REQUESTS"));
            return true;
        }
        assert_eq!((code, body.as_slice()), (200, &b"A"[..]));
        served += 1;
        false
    });
    assert!(refused && served >= 2, "{served} served before a refusal");

    // Plain HTTP: every anonymous caller shares one bucket (each curl run is a new
    // connection, so a new anonymous identity).
    let plain = node.url("/v1/fn/to_uppercase");
    let anonymous_served = (0..10)
        .map(|_| curl(&["--data-binary", "x", &plain]).0)
        .take_while(|&code| code == 200)
        .count();
    assert!((2..10).contains(&anonymous_served), "{anonymous_served}");

    // RAC: team-a after hello is in the same bucket as over HTTPS (spent): BUSY, with
    // the quota in the sentence; team-b on its own connection is served throughout.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let hello = |tenant: &str, token: &str| ControlRequest::Hello {
            tenant: tenant.into(),
            token: Some(token.into()),
        };
        let addr = node.rac_addr.to_string();
        let (a, b) = (
            RacClient::connect(&addr).await.unwrap(),
            RacClient::connect(&addr).await.unwrap(),
        );
        a.control(&hello("team-a", "ta")).await.unwrap();
        b.control(&hello("team-b", "tb")).await.unwrap();
        let mut busy = 0;
        for _ in 0..5 {
            match a.call_by_name("echo", params::NONE, b"x".to_vec(), 0).await {
                Err(RacError::Status {
                    status, message, ..
                }) => {
                    assert_eq!(status, Status::Busy);
                    assert!(
                        message.contains("over its quota (calls_per_s)"),
                        "{message}"
                    );
                    busy += 1;
                }
                other => assert!(other.is_ok(), "{:?}", other.err()),
            }
            let served = b.call_by_name("echo", params::NONE, b"y".to_vec(), 0);
            assert_eq!(served.await.unwrap().payload, b"y");
        }
        assert!(
            busy >= 4,
            "at most one call refills within the loop: {busy}"
        );
    });

    let count = |tenant: &str| {
        node.metric(&format!(
            "netaccel_quota_refusals_total{{tenant=\"{tenant}\",reason=\"calls_per_s\"}}"
        ))
    };
    assert!(count("team-a") >= 5.0);
    assert_eq!(count("anonymous"), 1.0);
    assert_eq!(count("team-b"), 0.0);
}

#[test]
fn a_grpc_call_over_quota_is_resource_exhausted_with_a_retry_hint() {
    use netaccel_node::front::grpc::pb;
    use pb::grpc_inference_service_client::GrpcInferenceServiceClient;

    let (node, grpc) = TestNode::start_with(|| {
        let grpc = free_addr();
        let config = format!(
            "grpc = \"{grpc}\"\nanonymous_quota = {{ calls_per_s = 1, calls_burst = 1 }}\n"
        );
        (config, grpc)
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut c = GrpcInferenceServiceClient::new(channel);
        let request = || pb::ModelInferRequest {
            model_name: "to_uppercase".into(),
            inputs: vec![pb::model_infer_request::InferInputTensor {
                name: "INPUT0".into(),
                datatype: "UINT8".into(),
                shape: vec![2],
                ..Default::default()
            }],
            raw_input_contents: vec![b"ok".to_vec().into()],
            ..Default::default()
        };
        assert!(c.model_infer(request()).await.is_ok());
        let refused = c.model_infer(request()).await.unwrap_err();
        assert_eq!(
            refused.code(),
            tonic::Code::ResourceExhausted,
            "{refused:?}"
        );
        assert!(refused.message().contains("over its quota (calls_per_s)"));
        let m = refused.metadata();
        assert_eq!(m.get("netaccel-status").unwrap(), "BUSY");
        assert_eq!(m.get("retry-after").unwrap(), "1");
    });
    let series = "netaccel_quota_refusals_total{tenant=\"anonymous\",reason=\"calls_per_s\"}";
    assert_eq!(node.metric(series), 1.0);
}
