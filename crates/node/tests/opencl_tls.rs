//! Remote OpenCL over TLS (issue 31): the real node with `[tls] opencl` beside its
//! plain OpenCL port, a real OpenCL program through the ICD (`tls://` in
//! `NETACCEL_OPENCL_NODES`, the CA in `NETACCEL_CACERT`), certificates made here
//! (rcgen). A tenant's token works over TLS, on the network path and on the same-host
//! path (which moves to the node's Unix socket after `Hello`); a node whose
//! certificate the CA did not issue is refused by the ICD; a client certificate
//! proves its tenant without a token; a client that does not speak TLS gets nothing.

mod common;
#[path = "../../ocl-remote/tests/common/mod.rs"]
mod ocl;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{free_addr, TestNode};
use ocl_remote::cl;

const A_TOKEN: &str = "tls-a-Secret-61c2";

/// A CA and what it issued, as PEM files in `dir`.
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
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "netaccel OpenCL test CA");
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = params.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        Pki {
            dir: dir.to_path_buf(),
            ca,
            ca_key,
        }
    }

    /// Writes `NAME.pem` and `NAME.key`: a certificate for `cn` (and `sans`).
    fn issue(&self, name: &str, cn: &str, sans: &[&str], client: bool) {
        let sans = sans.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut params = rcgen::CertificateParams::new(sans).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        }];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        std::fs::write(self.dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(self.dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }
}

/// The OpenCL program (`hostile good 2`) built against the ICD in `dir`, or `None`
/// (a skip, a failure under CI) without gcc or the ICD.
fn build_program(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    match common::icd_program(dir, "hostile") {
        Ok(program) => Some((program.exe, program.vendors)),
        Err(why) => {
            ocl::missing_prerequisite(why);
            None
        }
    }
}

/// Runs the program against `node` with `env` (and nothing else of netaccel's):
/// whether it succeeded, and what it printed.
fn run(program: &(PathBuf, PathBuf), node: &str, env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(&program.0);
    cmd.args(["good", "2"])
        .env("OCL_ICD_VENDORS", &program.1)
        .env(ocl_remote::NODES_ENV, node);
    for key in [
        ocl_remote::TENANT_ENV,
        ocl_remote::TENANT_TOKEN_ENV,
        "NETACCEL_CACERT",
        "NETACCEL_CERT",
        "NETACCEL_KEY",
        "NETACCEL_OPENCL_SHM",
    ] {
        cmd.env_remove(key);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run the OpenCL program");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn opencl_over_tls_with_tokens_and_client_certificates() {
    if !common::opencl_runtime_present() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("netaccel-ocl-tls-{}", std::process::id()));
    let pki = Pki::new(&dir);
    pki.issue("server", "localhost", &["localhost", "127.0.0.1"], false);
    pki.issue("team-b", "team-b-client", &[], true);
    let stranger = Pki::new(&dir.join("stranger"));
    let Some(program) = build_program(&dir) else {
        return;
    };
    let (node, (plain, tls)) = TestNode::start_logging_with(
        || {
            let (plain, tls) = (free_addr(), free_addr());
            let config = format!(
                "anonymous = \"refuse\"\n\
                 [[tenants]]\nname = \"team-a\"\ntoken = \"{A_TOKEN}\"\nopencl = true\n\
                 [[tenants]]\nname = \"team-b\"\nopencl = true\n\
                 [opencl]\nlisten = \"{plain}\"\n\
                 [tls]\nopencl = \"{tls}\"\ncert = \"{}\"\nkey = \"{}\"\nclient_ca = \"{}\"\n\
                 client_certs = \"optional\"\n\
                 [tls.subjects]\n\"team-b-client\" = \"team-b\"\n",
                pki.path("server.pem"),
                pki.path("server.key"),
                pki.path("ca.pem"),
            );
            (config, (plain, tls))
        },
        &["--log-level", "warn,netaccel_node::audit=info"],
    );
    let over_tls = format!("tls://127.0.0.1:{}", tls.port());
    let ca = pki.path("ca.pem");
    let a = [
        (ocl_remote::TENANT_ENV, "team-a"),
        (ocl_remote::TENANT_TOKEN_ENV, A_TOKEN),
        ("NETACCEL_CACERT", ca.as_str()),
    ];

    // The network path over TLS, and the same-host path after a TLS Hello.
    let network = [&a[..], &[("NETACCEL_OPENCL_SHM", "0")]].concat();
    let (ok, out) = run(&program, &over_tls, &network);
    assert!(ok && out.starts_with("good: ok"), "{out}");
    let (ok, out) = run(&program, &over_tls, &a);
    assert!(ok && out.starts_with("good: ok"), "{out}");
    // The token is checked over TLS as on the plain port.
    let (ok, out) = run(&program, &over_tls, &[("NETACCEL_CACERT", ca.as_str())]);
    assert!(
        !ok && out.contains("refused: this node refuses anonymous callers"),
        "{out}"
    );

    // A CA that did not issue the node's certificate: the ICD refuses the node.
    let wrong_ca = stranger.path("ca.pem");
    let (ok, out) = run(
        &program,
        &over_tls,
        &[&a[..2], &[("NETACCEL_CACERT", wrong_ca.as_str())]].concat(),
    );
    assert!(!ok, "{out}");
    assert!(out.contains("invalid peer certificate"), "{out}");
    assert!(
        out.contains(&format!("-> {}", cl::CL_PLATFORM_NOT_FOUND_KHR)),
        "{out}"
    );
    // tls:// without a CA is a clear error.
    let (ok, out) = run(&program, &over_tls, &a[..2]);
    assert!(!ok && out.contains("tls:// needs NETACCEL_CACERT"), "{out}");

    // A client certificate proves team B without a token.
    let (cert, key) = (pki.path("team-b.pem"), pki.path("team-b.key"));
    let b = [
        ("NETACCEL_CACERT", ca.as_str()),
        ("NETACCEL_CERT", cert.as_str()),
        ("NETACCEL_KEY", key.as_str()),
        ("NETACCEL_OPENCL_SHM", "0"),
    ];
    let (ok, out) = run(&program, &over_tls, &b);
    assert!(ok && out.starts_with("good: ok"), "{out}");

    // The plain port still works with a token; the TLS port answers no plain Hello.
    let (ok, out) = run(&program, &plain.to_string(), &a[..2]);
    assert!(ok && out.starts_with("good: ok"), "{out}");
    assert!(ocl::Client::connect_as(plain, b"", "team-a", A_TOKEN).is_ok());
    let mut raw = TcpStream::connect(tls).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut hello = Vec::new();
    ocl_remote::proto::Request::Hello {
        version: ocl_remote::proto::PROTOCOL_VERSION,
        host_id: b"",
        tenant: b"team-a",
        token: A_TOKEN.as_bytes(),
    }
    .encode(1, &mut hello);
    raw.write_all(&hello).unwrap();
    let mut answer = Vec::new();
    let _ = raw.read_to_end(&mut answer);
    assert!(
        answer.is_empty() || answer[0] == 0x15,
        "a plain Hello on the TLS port got {answer:?}"
    );
    assert!(!node.log().contains(A_TOKEN));
}
