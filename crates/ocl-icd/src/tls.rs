//! TLS to a node: `tls://HOST:PORT` in `NETACCEL_OPENCL_NODES` (the node's `[tls]
//! opencl` listener).
//!
//! The ICD verifies the node's certificate against the CA certificates in the file
//! `NETACCEL_CACERT` names (the variable the `netaccel` CLI reads for HTTPS), for the
//! name HOST; with `NETACCEL_CERT` and `NETACCEL_KEY` it presents a client certificate
//! (mutual TLS: the node maps it to a tenant).
//!
//! The rest of the ICD speaks to a socket descriptor (vectored sends, polling the read
//! half, see [`crate::node`]), so TLS is kept out of its way: [`connect`] handshakes,
//! then returns one end of a Unix socket pair and relays between the other end and
//! the TLS connection on two threads of its own, one per direction, so that neither
//! direction waits for the other (the node may be sending results while the program
//! sends a large write). What it costs is in `docs/opencl.md`.
//!
//! Not here: the protocol (unchanged inside TLS), the same-host path (a client on the
//! node's host moves to the node's Unix socket after `Hello`, as without TLS: its
//! bytes never leave the host).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ocl_remote::stream::Stream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

/// The address prefix that asks for TLS.
pub const SCHEME: &str = "tls://";
/// The CA certificates (PEM) the node's certificate must chain to.
pub const CACERT_ENV: &str = "NETACCEL_CACERT";
/// A client certificate chain (PEM) for mutual TLS, with [`KEY_ENV`].
pub const CERT_ENV: &str = "NETACCEL_CERT";
/// The client certificate's private key (PEM).
pub const KEY_ENV: &str = "NETACCEL_KEY";

/// Bytes one relay read moves at most.
const RELAY_BYTES: usize = 64 << 10;

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// The client configuration from the environment (see the module docs).
fn config() -> io::Result<Arc<ClientConfig>> {
    let ca = std::env::var(CACERT_ENV).map_err(|_| {
        invalid(format!(
            "{SCHEME} needs {CACERT_ENV}: the CA certificates (PEM) of the node's certificate"
        ))
    })?;
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(&ca)
        .map_err(|e| invalid(format!("{CACERT_ENV}={ca}: {e}")))?;
    for cert in certs {
        let cert = cert.map_err(|e| invalid(format!("{CACERT_ENV}={ca}: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| invalid(format!("{CACERT_ENV}={ca}: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .with_root_certificates(roots);
    let config = match (std::env::var(CERT_ENV), std::env::var(KEY_ENV)) {
        (Ok(cert), Ok(key)) => {
            let chain = CertificateDer::pem_file_iter(&cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| invalid(format!("{CERT_ENV}={cert}: {e}")))?;
            let key = PrivateKeyDer::from_pem_file(&key)
                .map_err(|e| invalid(format!("{KEY_ENV}={key}: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| invalid(format!("{CERT_ENV}: {e}")))?
        }
        (Err(_), Err(_)) => builder.with_no_client_auth(),
        _ => return Err(invalid(format!("{CERT_ENV} and {KEY_ENV} go together"))),
    };
    Ok(Arc::new(config))
}

/// The host part of `HOST:PORT` (`[v6]:PORT` too), the name the certificate must have.
pub fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// The connection to a node's address: TCP within `connect_timeout`, and for
/// `tls://HOST:PORT` TLS over it, handshaken within `handshake_timeout`.
pub fn open(
    addr: &str,
    connect_timeout: Duration,
    handshake_timeout: Duration,
) -> io::Result<Stream> {
    let (tls, host_port) = match addr.strip_prefix(SCHEME) {
        Some(rest) => (true, rest),
        None => (false, addr),
    };
    let target = host_port
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "address resolves to nothing"))?;
    let tcp = TcpStream::connect_timeout(&target, connect_timeout)?;
    if !tls {
        return Ok(Stream::Tcp(tcp));
    }
    tcp.set_nodelay(true)?;
    let relay = connect(tcp, host_of(host_port), handshake_timeout)?;
    Ok(Stream::Unix(relay))
}

/// Handshakes TLS over `tcp` with the node named `host` within `timeout`, and returns
/// the plain end of the relay (see the module docs).
fn connect(tcp: TcpStream, host: &str, timeout: Duration) -> io::Result<UnixStream> {
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| invalid(format!("{host}: not a server name: {e}")))?;
    let mut conn = ClientConnection::new(config()?, name).map_err(io::Error::other)?;
    tcp.set_read_timeout(Some(timeout))?;
    tcp.set_write_timeout(Some(timeout))?;
    let mut io = &tcp;
    while conn.is_handshaking() {
        conn.complete_io(&mut io)?;
    }
    tcp.set_read_timeout(None)?;
    tcp.set_write_timeout(None)?;
    let (ours, theirs) = UnixStream::pair()?;
    let shared = Arc::new(Relay {
        conn: Mutex::new(conn),
        out: Mutex::new(tcp.try_clone()?),
    });
    let (up_app, down_app) = (theirs.try_clone()?, theirs);
    let up = Arc::clone(&shared);
    std::thread::Builder::new()
        .name("netaccel-ocl-tls-up".to_string())
        .spawn(move || {
            let _ = up.upstream(up_app);
            let _ = lock(&up.out).shutdown(Shutdown::Write);
        })?;
    let down = Arc::clone(&shared);
    std::thread::Builder::new()
        .name("netaccel-ocl-tls-down".to_string())
        .spawn(move || {
            let _ = down.downstream(&tcp, &down_app);
            let _ = down_app.shutdown(Shutdown::Write);
        })?;
    Ok(ours)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One TLS connection and the TCP socket's writing side. Records are made under
/// `conn` and sent under `out`, taken before `conn` is let go, so that they leave in
/// the order they were made while neither direction waits for the other's socket
/// with `conn` held.
struct Relay {
    conn: Mutex<ClientConnection>,
    out: Mutex<TcpStream>,
}

impl Relay {
    /// Sends the TLS records `conn` has ready.
    fn send(&self, mut conn: MutexGuard<'_, ClientConnection>) -> io::Result<()> {
        let mut records = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut records)?;
        }
        let mut out = lock(&self.out);
        drop(conn);
        out.write_all(&records)
    }

    /// The program's bytes to the node, until the program's end closes.
    fn upstream(&self, mut app: UnixStream) -> io::Result<()> {
        let mut buf = vec![0u8; RELAY_BYTES];
        loop {
            let n = app.read(&mut buf)?;
            if n == 0 {
                let mut conn = lock(&self.conn);
                conn.send_close_notify();
                return self.send(conn);
            }
            let mut rest = &buf[..n];
            while !rest.is_empty() {
                let mut conn = lock(&self.conn);
                let taken = conn.writer().write(rest)?;
                rest = &rest[taken..];
                self.send(conn)?;
            }
        }
    }

    /// The node's bytes to the program, until the node closes.
    fn downstream(&self, mut tcp: &TcpStream, mut app: &UnixStream) -> io::Result<()> {
        let mut buf = vec![0u8; RELAY_BYTES];
        let mut chunk = vec![0u8; RELAY_BYTES];
        let mut plain = Vec::with_capacity(RELAY_BYTES);
        loop {
            let n = tcp.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            let mut records = &buf[..n];
            let mut conn = lock(&self.conn);
            while !records.is_empty() {
                conn.read_tls(&mut records)?;
                conn.process_new_packets().map_err(io::Error::other)?;
                let mut reader = conn.reader();
                loop {
                    match reader.read(&mut chunk) {
                        Ok(0) => break, // close_notify: no more.
                        Ok(k) => plain.extend_from_slice(&chunk[..k]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
            }
            if conn.wants_write() {
                self.send(conn)?;
            } else {
                drop(conn);
            }
            app.write_all(&plain)?;
            plain.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_what_the_certificate_names() {
        assert_eq!(host_of("node1.example:9501"), "node1.example");
        assert_eq!(host_of("127.0.0.1:9501"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9501"), "::1");
    }
}
