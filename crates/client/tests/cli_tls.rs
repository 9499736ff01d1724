//! Black-box tests of the `netaccel` CLI over TLS against a real node with HTTPS and
//! RAC-over-TLS listeners that require client certificates (mutual TLS): `--node
//! https://…` and `--rac rac+tls://…` with `--cacert`, `--cert` and `--key`, and
//! `call --function F --tls`, which takes the TLS address the node registered with a
//! real registry. Every certificate is made here at test time (rcgen).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{free_port, sibling_bin, wait_for_port, Process};

/// A CA, a server certificate for localhost and 127.0.0.1, and a client certificate,
/// written as PEM files into `dir`.
fn make_pki(dir: &Path) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "netaccel CLI test CA");
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = params.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    let leaves: [(&str, &[&str], rcgen::ExtendedKeyUsagePurpose); 2] = [
        (
            "server",
            &["localhost", "127.0.0.1"],
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        ),
        ("client", &[], rcgen::ExtendedKeyUsagePurpose::ClientAuth),
    ];
    for (name, sans, usage) in leaves {
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![usage];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
}

/// `netaccel ARGS` with `stdin`; the TLS files of `dir` are named by the caller.
fn netaccel(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_netaccel"))
        .args(args)
        .env_remove("NETACCEL_NODE")
        .env_remove("NETACCEL_REGISTRY")
        .env_remove("NETACCEL_CACERT")
        .env_remove("NETACCEL_CERT")
        .env_remove("NETACCEL_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command that does not read its input (or exits first) closes the pipe.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("netaccel did not finish within 60 s")
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_cli_calls_a_tls_node_directly_and_through_the_registry() {
    let dir = std::env::temp_dir().join(format!("netaccel-cli-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    make_pki(&dir);
    let file = |name: &str| dir.join(name).display().to_string();

    // A registry, then a node that registers with it.
    let registry_port = free_port();
    let mut child = Command::new(sibling_bin("netaccel-registry"))
        .args(["--listen", &format!("127.0.0.1:{registry_port}")])
        .args(["--log-level", "warn", "--lease-ms", "3000"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_port(registry_port, &mut child, "netaccel-registry");
    let _registry = Process { child, dir: None };
    let registry = format!("http://127.0.0.1:{registry_port}");

    let (http, rac, https, rac_tls) = (free_port(), free_port(), free_port(), free_port());
    let config = dir.join("node.toml");
    std::fs::write(
        &config,
        format!(
            "http = \"127.0.0.1:{http}\"\nrac = \"127.0.0.1:{rac}\"\ngrpc = \"off\"\n\
             log_level = \"warn\"\nregistry = \"{registry}\"\nname = \"tls-node\"\n\
             [[slots]]\naccelerator = \"to_uppercase\"\n\
             [tls]\nhttps = \"127.0.0.1:{https}\"\nrac = \"127.0.0.1:{rac_tls}\"\n\
             cert = {:?}\nkey = {:?}\nclient_ca = {:?}\n",
            file("server.pem"),
            file("server.key"),
            file("ca.pem"),
        ),
    )
    .unwrap();
    let mut child = Command::new(sibling_bin("netaccel-node"))
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    for port in [http, rac, https, rac_tls] {
        wait_for_port(port, &mut child, "netaccel-node");
    }
    let _node = Process {
        child,
        dir: Some(dir.clone()),
    };
    let (ca, cert, key) = (file("ca.pem"), file("client.pem"), file("client.key"));
    let tls_args = ["--cacert", &ca, "--cert", &cert, "--key", &key];

    // HTTPS, named as the certificate names it, with a client certificate.
    let node = format!("https://localhost:{https}");
    let mut args = vec!["--node", &node];
    args.extend(tls_args);
    args.extend(["call", "to_uppercase"]);
    let out = netaccel(&args, b"over https");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, b"OVER HTTPS");
    // Without the client certificate the node refuses the handshake: unreachable (3),
    // and the message says to present one.
    let out = netaccel(
        &["--node", &node, "--cacert", &ca, "call", "to_uppercase"],
        b"x",
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--cert FILE and --key FILE"),
        "{}",
        stderr(&out)
    );
    // Without --cacert the node's certificate is not trusted: the message says to pass
    // --cacert, not to look for a node elsewhere.
    let out = netaccel(&["--node", &node, "call", "to_uppercase"], b"x");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("pass --cacert"), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("is a node listening"),
        "{}",
        stderr(&out)
    );
    // The same over RAC over TLS, with a CA that did not sign the node's certificate.
    let rac_untrusted = format!("rac+tls://127.0.0.1:{rac_tls}");
    let other_ca = file("client.pem");
    let out = netaccel(
        &[
            "--cacert",
            &other_ca,
            "call",
            "to_uppercase",
            "--rac",
            &rac_untrusted,
        ],
        b"x",
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("pass --cacert"), "{}", stderr(&out));

    // RAC over TLS.
    let rac_addr = format!("rac+tls://127.0.0.1:{rac_tls}");
    let mut args = tls_args.to_vec();
    args.extend(["call", "to_uppercase", "--rac", &rac_addr]);
    let out = netaccel(&args, b"over rac tls");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, b"OVER RAC TLS");
    // rac+tls without --cacert: a usage error that says what is missing.
    let out = netaccel(&["call", "to_uppercase", "--rac", &rac_addr], b"x");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--cacert"), "{}", stderr(&out));
    // The plain RAC listener is still plain.
    let plain = format!("rac://127.0.0.1:{rac}");
    let out = netaccel(&["call", "to_uppercase", "--rac", &plain], b"plain");
    assert_eq!(out.stdout, b"PLAIN", "{}", stderr(&out));

    // Through the registry: the node registered its TLS addresses; --tls picks them.
    let out = netaccel(
        &[
            "--registry",
            &registry,
            "functions",
            "create",
            "up",
            "--accelerator",
            "to_uppercase",
        ],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let deadline = Instant::now() + Duration::from_secs(20);
    for via in ["http", "rac"] {
        let mut args = vec!["--registry", &registry];
        args.extend(tls_args);
        args.extend(["call", "--function", "up", "--via", via, "--tls"]);
        // The node registers once its listeners are bound: retry until it has.
        let out = loop {
            let out = netaccel(&args, b"through the registry");
            if out.status.success() || Instant::now() > deadline {
                break out;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(out.status.success(), "--via {via}: {}", stderr(&out));
        assert_eq!(out.stdout, b"THROUGH THE REGISTRY", "--via {via}");
    }
    // --tls without the client certificate: the TLS address is the one called (the
    // node asks for a certificate), not the plain one (which would have answered).
    let out = netaccel(
        &[
            "--registry",
            &registry,
            "--cacert",
            &ca,
            "call",
            "--function",
            "up",
            "--via",
            "rac",
            "--tls",
            "--rebind-wait-ms",
            "100",
        ],
        b"x",
    );
    assert!(!out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).to_lowercase().contains("certificate"),
        "{}",
        stderr(&out)
    );
}
