//! Why a failed HTTPS call failed, asked of the TLS handshake itself.
//!
//! The HTTP client reports the first I/O error it meets. When a handshake fails the
//! client also tries to send its alert, and if the node has already closed the
//! connection that write fails with "broken pipe", which then hides the real cause
//! (the node's certificate is not trusted, the node wants a client certificate). So
//! after an HTTPS failure that names no TLS cause, the client handshakes once more on
//! its own, with the same trust and identity, and reports what the TLS stack says.

use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the probe may take in all: it runs only after a call has already failed.
const PROBE_TIME: Duration = Duration::from_secs(5);

/// What an HTTP client that was given no `--cacert` trusts: the public web roots (as
/// the HTTP client's own default does).
pub fn default_config() -> Arc<rustls::ClientConfig> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    Arc::new(config)
}

/// The host and port of an `https://HOST[:PORT][/prefix]` URL (`[v6]:port` too).
pub fn authority(url: &str) -> Option<(String, u16)> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => 443,
    };
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// The TLS stack's own words for why a handshake with `url` fails under `config`,
/// or `None` when it succeeds (or the node cannot be reached at all: that failure is
/// the caller's to report). After the client's side of a TLS 1.3 handshake the node
/// may still refuse the client's certificate with an alert, so the probe reads for
/// that alert briefly too.
pub fn handshake_error(url: &str, config: Arc<rustls::ClientConfig>) -> Option<String> {
    let (host, port) = authority(url)?;
    let name = rustls::pki_types::ServerName::try_from(host.clone()).ok()?;
    let started = Instant::now();
    // Every address the name has, in order, as the HTTP client tries them.
    let mut sock = (host.as_str(), port)
        .to_socket_addrs()
        .ok()?
        .find_map(|addr| TcpStream::connect_timeout(&addr, PROBE_TIME).ok())?;
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    let mut conn = rustls::ClientConnection::new(config, name).ok()?;
    while conn.is_handshaking() && started.elapsed() < PROBE_TIME {
        if let Err(e) = conn.complete_io(&mut sock) {
            return tls_cause(e);
        }
    }
    // The node's verdict on our certificate, if it sends one.
    let mut byte = [0u8; 1];
    match rustls::Stream::new(&mut conn, &mut sock).read_exact(&mut byte) {
        Err(e) => tls_cause(e),
        Ok(_) => None,
    }
}

/// The rustls error inside `e`, if it is one (a timeout or a reset is not).
fn tls_cause(e: std::io::Error) -> Option<String> {
    let inner = e.get_ref()?;
    inner
        .downcast_ref::<rustls::Error>()
        .map(|tls| tls.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authority_reads_names_ports_and_v6() {
        let a = |u: &str| authority(u);
        assert_eq!(
            a("https://localhost:8443"),
            Some(("localhost".into(), 8443))
        );
        assert_eq!(a("https://node-3/prefix/x"), Some(("node-3".into(), 443)));
        assert_eq!(a("https://[::1]:9443/"), Some(("::1".into(), 9443)));
        assert_eq!(a("https://[::1]"), Some(("::1".into(), 443)));
        assert_eq!(a("https://:8443"), None);
        assert_eq!(a("https://h:notaport"), None);
        assert_eq!(a("localhost:8443"), None);
    }

    #[test]
    fn nothing_listening_is_no_tls_cause() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url = format!("https://127.0.0.1:{port}");
        assert_eq!(handshake_error(&url, default_config()), None);
    }

    /// A node that sends its handshake flight and closes at once (as one that has
    /// given up on the client does): the probe still reports the certificate the
    /// client does not trust, not the closed connection.
    #[test]
    fn an_untrusted_certificate_is_named_even_when_the_node_hangs_up() {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let node = std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let mut conn = rustls::ServerConnection::new(Arc::new(server)).unwrap();
            while conn.wants_read() && !conn.wants_write() {
                conn.read_tls(&mut sock).unwrap();
                conn.process_new_packets().unwrap();
            }
            while conn.wants_write() {
                conn.write_tls(&mut sock).unwrap();
            }
            // Dropped here: the connection closes before the client answers.
        });
        let cause = handshake_error(&format!("https://localhost:{port}"), default_config());
        node.join().unwrap();
        let cause = cause.expect("a TLS cause");
        assert!(cause.contains("invalid peer certificate"), "{cause}");
    }
}
