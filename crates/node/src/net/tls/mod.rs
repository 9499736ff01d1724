//! TLS and mutual TLS on the node's front ends, with rustls (ring as its crypto, the
//! provider the workspace already builds without cmake or nasm).
//!
//! TLS listeners run beside the plain ones (`[tls] https`, `[tls] rac`), never instead:
//! a plain connection takes exactly the path it took before TLS existed. A TLS
//! connection is handshaken on its own task, then served by the same HTTP and RAC code,
//! compiled a second time over the TLS stream ([`crate::net::netio::Transport`]).
//!
//! What this module owns:
//! - the `[tls]` configuration and its checks ([`TlsConfig`]);
//! - [`TlsAcceptor`], a cloneable handle that always hands out the current server
//!   configuration: [`TlsAcceptor::reload`] (on SIGHUP, `server::on_sighup`) swaps in a new
//!   certificate, key and client CA for new handshakes, while connections already up
//!   keep their session. A file that does not load is logged and the old ones stay;
//! - session resumption, bounded: TLS 1.3 tickets (keys rotated by rustls's ticketer)
//!   and an in-memory session cache of `session_cache_max` entries for TLS 1.2, both
//!   shared across reloads so that clients resume after one;
//! - client certificates: with `client_ca` set they are required (or optional), and a
//!   certificate's names ([`subject`]) map to a tenant through `[tls.subjects]`; a
//!   certificate no entry names gets `default_tenant`, or its own anonymous identity,
//!   or is refused (`refuse_unknown_subjects`). The tenant a certificate gives wins
//!   over anything the client says later (RAC `hello`);
//! - the TLS metrics (`netaccel_tls_*`).
//!
//! Another front end (gRPC) takes TLS by running its accepted connections through
//! [`TlsAcceptor::accept`] (a clone from [`TlsAcceptor::for_alpn`] to offer `h2`).

pub mod stream;
pub mod subject;

pub use stream::TlsStream;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ProducesTickets, ServerSessionMemoryCache, StoresServerSessions};
use rustls::{HandshakeKind, RootCertStore, ServerConfig, ServerConnection};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite};

/// The `[tls]` table of node.toml (and `--https`, `--rac-tls`, `--tls-*`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// HTTPS listen address; unset = no HTTPS listener.
    pub https: Option<SocketAddr>,
    /// RAC-over-TLS listen address; unset = no such listener.
    pub rac: Option<SocketAddr>,
    /// gRPC-over-TLS listen address (HTTP/2 negotiated by ALPN `h2`); unset = no such
    /// listener.
    pub grpc: Option<SocketAddr>,
    /// Remote OpenCL over TLS listen address (the node shares OpenCL devices); unset =
    /// no such listener.
    pub opencl: Option<SocketAddr>,
    /// The server's certificate chain (PEM, leaf first).
    pub cert: Option<PathBuf>,
    /// The server's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
    /// CA certificates (PEM) that client certificates must chain to; set = mTLS.
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: `required` (the default) or `optional` client certificates.
    pub client_certs: ClientCerts,
    /// A certificate name (its subject's CN, or a DNS or URI alternative name) → the
    /// tenant its connections are counted against.
    pub subjects: BTreeMap<String, String>,
    /// The tenant of a client certificate no `subjects` entry names (and, with optional
    /// client certificates, of a connection without one); unset = such a connection is
    /// its own anonymous tenant, as a plain connection is.
    pub default_tenant: Option<String>,
    /// Refuse client certificates no `subjects` entry names instead.
    pub refuse_unknown_subjects: bool,
    /// TLS 1.2 sessions remembered for resumption; 0 turns resumption off (TLS 1.3
    /// tickets too).
    pub session_cache_max: usize,
    /// The handshake must end within this long of the connection's accept.
    pub handshake_timeout_ms: u64,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            https: None,
            rac: None,
            grpc: None,
            opencl: None,
            cert: None,
            key: None,
            client_ca: None,
            client_certs: ClientCerts::Required,
            subjects: BTreeMap::new(),
            default_tenant: None,
            refuse_unknown_subjects: false,
            session_cache_max: 4096,
            handshake_timeout_ms: 10_000,
        }
    }
}

/// Whether clients must present a certificate (with `client_ca` set).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ClientCerts {
    #[default]
    Required,
    Optional,
}

impl TlsConfig {
    /// Whether the node serves TLS at all.
    pub fn enabled(&self) -> bool {
        self.cert.is_some()
    }

    /// Checks what can be checked without reading the files.
    pub fn validate(&self) -> Result<(), String> {
        if self.cert.is_some() != self.key.is_some() {
            return Err("tls: cert and key go together (set both or neither)".to_string());
        }
        let listener = [self.https, self.rac, self.grpc, self.opencl];
        if listener.iter().any(Option::is_some) && !self.enabled() {
            return Err(
                "tls: a TLS listener (https, rac, grpc, opencl) needs a certificate and key (tls.cert, tls.key or --tls-cert, --tls-key)"
                    .to_string(),
            );
        }
        let client_settings = !self.subjects.is_empty()
            || self.default_tenant.is_some()
            || self.refuse_unknown_subjects
            || self.client_certs == ClientCerts::Optional;
        if client_settings && self.client_ca.is_none() {
            return Err(
                "tls: subjects, default_tenant, refuse_unknown_subjects and client_certs need client_ca (client certificates)"
                    .to_string(),
            );
        }
        if self.client_ca.is_some() && !self.enabled() {
            return Err("tls: client_ca needs a server certificate and key".to_string());
        }
        if self.refuse_unknown_subjects && self.default_tenant.is_some() {
            return Err(
                "tls: refuse_unknown_subjects and default_tenant exclude each other".to_string(),
            );
        }
        if self.handshake_timeout_ms == 0 {
            return Err("tls: handshake_timeout_ms must be at least 1".to_string());
        }
        if let Some((name, _)) = self.subjects.iter().find(|(_, t)| t.is_empty()) {
            return Err(format!(
                "tls: subject `{name}` maps to an empty tenant name"
            ));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabel {
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

/// The TLS metric families. Their label values are bounded: configured tenant names
/// and `anonymous`; `full`/`resumed`; fixed reasons; `ok`/`error`.
#[derive(Clone, Default)]
struct TlsMetrics {
    connections: Family<TenantLabel, Counter>,
    handshakes: Family<KindLabel, Counter>,
    failures: Family<ReasonLabel, Counter>,
    reloads: Family<ResultLabel, Counter>,
}

impl TlsMetrics {
    fn register(registry: &mut prometheus_client::registry::Registry) -> TlsMetrics {
        let m = TlsMetrics::default();
        registry.register(
            "tls_connections",
            "TLS connections established, by the tenant their client certificate mapped to (anonymous: none)",
            m.connections.clone(),
        );
        registry.register(
            "tls_handshakes",
            "TLS handshakes completed, full or resumed",
            m.handshakes.clone(),
        );
        registry.register(
            "tls_handshake_failures",
            "TLS connections closed before serving: handshake error, timeout, or a client certificate refused",
            m.failures.clone(),
        );
        registry.register(
            "tls_reloads",
            "Certificate reloads (SIGHUP), by result; a failed one keeps the old certificate",
            m.reloads.clone(),
        );
        m
    }

    fn failed(&self, reason: &str) {
        self.failures
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }
}

/// A loaded certificate, key and client CA, as server configurations.
struct Loaded {
    /// No ALPN: HTTP/1.1 and RAC.
    plain: Arc<ServerConfig>,
    /// ALPN `h2` (gRPC).
    h2: Arc<ServerConfig>,
}

struct Shared {
    config: TlsConfig,
    provider: Arc<CryptoProvider>,
    /// Kept across reloads, so sessions made before one resume after it.
    sessions: Arc<dyn StoresServerSessions>,
    ticketer: Option<Arc<dyn ProducesTickets>>,
    current: RwLock<Loaded>,
    metrics: TlsMetrics,
}

/// Which ALPN protocols a [`TlsAcceptor`] offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alpn {
    /// None: HTTP/1.1 and RAC (clients offering `h2` fall back to HTTP/1.1).
    None,
    /// `h2`: gRPC.
    H2,
}

/// The node's TLS acceptor: a handle that always gives the current certificate.
/// Clones share it, so one [`TlsAcceptor::reload`] serves every front end.
#[derive(Clone)]
pub struct TlsAcceptor {
    shared: Arc<Shared>,
    alpn: Alpn,
}

/// A TLS connection's identity after its handshake.
#[derive(Debug, PartialEq, Eq)]
pub enum Identity {
    /// The tenant its client certificate (or `default_tenant`) names.
    Tenant(String),
    /// No tenant: the connection is its own, as a plain one is.
    Anonymous,
}

/// Whether a connection's first byte is plain text rather than the start of a TLS
/// record (content type 20..=24, 0x14..=0x18): an ASCII letter, as an HTTP request's
/// method (or HTTP/2's `PRI`) begins.
pub fn is_plain_text(first: u8) -> bool {
    first.is_ascii_alphabetic()
}

/// Why a TLS connection was closed before it was served.
#[derive(Debug)]
pub enum AcceptError {
    /// The handshake failed or timed out (a client that does not speak TLS right, or
    /// does not trust the server, or presented no valid certificate).
    Handshake(String),
    /// The client certificate is valid but its names map to no tenant and
    /// `refuse_unknown_subjects` is set.
    Refused(String),
}

impl TlsAcceptor {
    /// Loads the certificate, key and client CA of `config` (which must be enabled)
    /// and registers the TLS metrics.
    pub fn new(
        config: &TlsConfig,
        registry: &mut prometheus_client::registry::Registry,
    ) -> Result<TlsAcceptor, String> {
        config.validate()?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (sessions, ticketer): (Arc<dyn StoresServerSessions>, _) =
            if config.session_cache_max > 0 {
                let ticketer = rustls::crypto::ring::Ticketer::new()
                    .map_err(|e| format!("tls: cannot make a session ticketer: {e}"))?;
                (
                    ServerSessionMemoryCache::new(config.session_cache_max),
                    Some(ticketer),
                )
            } else {
                (Arc::new(rustls::server::NoServerSessionStorage {}), None)
            };
        let mut shared = Shared {
            config: config.clone(),
            provider,
            sessions,
            ticketer,
            current: RwLock::new(Loaded {
                plain: Arc::new(placeholder_config()),
                h2: Arc::new(placeholder_config()),
            }),
            metrics: TlsMetrics::default(),
        };
        let (loaded, fingerprint) = shared.load()?;
        shared.current = RwLock::new(loaded);
        shared.metrics = TlsMetrics::register(registry);
        tracing::info!(%fingerprint, "tls certificate loaded");
        Ok(TlsAcceptor {
            shared: Arc::new(shared),
            alpn: Alpn::None,
        })
    }

    /// The same acceptor offering `alpn` (gRPC wants [`Alpn::H2`]).
    pub fn for_alpn(&self, alpn: Alpn) -> TlsAcceptor {
        TlsAcceptor {
            shared: Arc::clone(&self.shared),
            alpn,
        }
    }

    /// The TLS configuration it was made from.
    pub fn config(&self) -> &TlsConfig {
        &self.shared.config
    }

    /// How long a handshake may take from the connection's accept.
    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_millis(self.shared.config.handshake_timeout_ms)
    }

    /// Counts a connection closed before its handshake by the caller of
    /// [`TlsAcceptor::accept`] (a client that began with plain text, see
    /// [`is_plain_text`]: `handshake`; one that sent nothing in time: `timeout`).
    pub fn count_failed(&self, reason: &'static str) {
        debug_assert!(matches!(reason, "handshake" | "timeout"), "{reason}");
        self.shared.metrics.failed(reason);
    }

    /// A tokio-rustls acceptor with the current certificate, for code that runs its
    /// own handshakes.
    pub fn current(&self) -> tokio_rustls::TlsAcceptor {
        let loaded = self.shared.current.read();
        let config = match self.alpn {
            Alpn::None => &loaded.plain,
            Alpn::H2 => &loaded.h2,
        };
        tokio_rustls::TlsAcceptor::from(Arc::clone(config))
    }

    /// Handshakes `stream` with the current certificate within the configured
    /// timeout, and says whose the connection is. `Err` (already counted in the
    /// metrics) means the connection is to be closed.
    pub async fn accept<IO>(
        &self,
        stream: IO,
    ) -> Result<(tokio_rustls::server::TlsStream<IO>, Identity), AcceptError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let metrics = &self.shared.metrics;
        let timeout = Duration::from_millis(self.shared.config.handshake_timeout_ms);
        let stream = match tokio::time::timeout(timeout, self.current().accept(stream)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                metrics.failed("handshake");
                return Err(AcceptError::Handshake(format!("tls handshake failed: {e}")));
            }
            Err(_) => {
                metrics.failed("timeout");
                return Err(AcceptError::Handshake(
                    "tls handshake not done in time".to_string(),
                ));
            }
        };
        let conn = stream.get_ref().1;
        let kind = match conn.handshake_kind() {
            Some(HandshakeKind::Resumed) => "resumed",
            _ => "full",
        };
        metrics
            .handshakes
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .inc();
        let identity = match self.identify(conn) {
            Ok(identity) => identity,
            Err(message) => {
                metrics.failed("unknown_subject");
                return Err(AcceptError::Refused(message));
            }
        };
        let tenant = match &identity {
            Identity::Tenant(name) => name.clone(),
            Identity::Anonymous => "anonymous".to_string(),
        };
        metrics
            .connections
            .get_or_create(&TenantLabel { tenant })
            .inc();
        Ok((stream, identity))
    }

    /// Whose a handshaken connection is: the tenant its certificate's first name with
    /// a `subjects` entry maps to; else `default_tenant`; else anonymous, or refused
    /// when `refuse_unknown_subjects` (and the client presented a certificate).
    pub fn identify(&self, conn: &ServerConnection) -> Result<Identity, String> {
        let config = &self.shared.config;
        let fallback = || match &config.default_tenant {
            Some(name) => Identity::Tenant(name.clone()),
            None => Identity::Anonymous,
        };
        let Some(leaf) = conn.peer_certificates().and_then(|chain| chain.first()) else {
            return Ok(fallback());
        };
        let names = subject::names(leaf)?;
        if let Some(tenant) = names.iter().find_map(|n| config.subjects.get(n)) {
            return Ok(Identity::Tenant(tenant.clone()));
        }
        if config.refuse_unknown_subjects {
            return Err(format!(
                "client certificate names {names:?}, none of them in [tls.subjects]"
            ));
        }
        Ok(fallback())
    }

    /// Loads the files again; new handshakes use them, connections already up keep
    /// their session. A file that does not load is logged and the old ones stay.
    pub fn reload(&self) -> Result<(), String> {
        let metrics = &self.shared.metrics;
        match self.shared.load() {
            Ok((loaded, fingerprint)) => {
                *self.shared.current.write() = loaded;
                metrics
                    .reloads
                    .get_or_create(&ResultLabel {
                        result: "ok".to_string(),
                    })
                    .inc();
                tracing::info!(%fingerprint, "tls certificate reloaded");
                Ok(())
            }
            Err(e) => {
                metrics
                    .reloads
                    .get_or_create(&ResultLabel {
                        result: "error".to_string(),
                    })
                    .inc();
                tracing::error!(error = %e, "tls reload failed: keeping the certificate already loaded");
                Err(e)
            }
        }
    }
}

impl Shared {
    /// Reads the files and builds the server configurations; also returns the leaf
    /// certificate's SHA-256 fingerprint, for the log.
    fn load(&self) -> Result<(Loaded, String), String> {
        let c = &self.config;
        let (Some(cert_path), Some(key_path)) = (&c.cert, &c.key) else {
            return Err("tls: no certificate and key configured".to_string());
        };
        let chain = read_certs(cert_path)?;
        let key = PrivateKeyDer::from_pem_file(key_path)
            .map_err(|e| format!("tls key {}: {e}", key_path.display()))?;
        let fingerprint = hex(&Sha256::digest(chain[0].as_ref()));
        let builder = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("tls: {e}"))?;
        let builder = match &c.client_ca {
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for ca in read_certs(path)? {
                    roots
                        .add(ca)
                        .map_err(|e| format!("tls client_ca {}: {e}", path.display()))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::clone(&self.provider),
                );
                let verifier = match c.client_certs {
                    ClientCerts::Required => verifier,
                    ClientCerts::Optional => verifier.allow_unauthenticated(),
                };
                let verifier = verifier
                    .build()
                    .map_err(|e| format!("tls client_ca {}: {e}", path.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut plain = builder.with_single_cert(chain, key).map_err(|e| {
            format!(
                "tls cert {} / key {}: {e}",
                cert_path.display(),
                key_path.display()
            )
        })?;
        plain.session_storage = Arc::clone(&self.sessions);
        match &self.ticketer {
            Some(ticketer) => plain.ticketer = Arc::clone(ticketer),
            None => plain.send_tls13_tickets = 0,
        }
        let mut h2 = plain.clone();
        h2.alpn_protocols = vec![b"h2".to_vec()];
        Ok((
            Loaded {
                plain: Arc::new(plain),
                h2: Arc::new(h2),
            },
            fingerprint,
        ))
    }
}

/// A configuration that is replaced before anything uses it (so that `Shared` can be
/// built before its first load).
fn placeholder_config() -> ServerConfig {
    ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default versions")
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(rustls::server::ResolvesServerCertUsingSni::new()))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("tls certificates {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "tls certificates {}: no certificate in the file",
            path.display()
        ));
    }
    Ok(certs)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml_text: &str) -> Result<TlsConfig, String> {
        let c: TlsConfig = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        c.validate().map(|()| c)
    }

    #[test]
    fn listeners_and_client_settings_need_what_they_rely_on() {
        assert!(!config("").unwrap().enabled());
        let cases = [
            ("https = \"127.0.0.1:0\"", "needs a certificate and key"),
            ("cert = \"c.pem\"", "cert and key go together"),
            (
                "cert = \"c\"\nkey = \"k\"\n[subjects]\nalice = \"a\"",
                "need client_ca",
            ),
            ("cert = \"c\"\nkey = \"k\"\nclient_certs = \"optional\"", "need client_ca"),
            (
                "cert = \"c\"\nkey = \"k\"\nclient_ca = \"ca\"\nrefuse_unknown_subjects = true\ndefault_tenant = \"x\"",
                "exclude each other",
            ),
            ("cert = \"c\"\nkey = \"k\"\nhandshake_timeout_ms = 0", "at least 1"),
            ("client_ca = \"ca\"", "needs a server certificate"),
        ];
        for (text, want) in cases {
            let err = config(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
        let ok = config(
            "https = \"127.0.0.1:8443\"\ncert = \"c\"\nkey = \"k\"\nclient_ca = \"ca\"\nclient_certs = \"optional\"\n[subjects]\n\"alice.example\" = \"alice\"",
        )
        .unwrap();
        assert_eq!(ok.client_certs, ClientCerts::Optional);
        assert_eq!(ok.subjects["alice.example"], "alice");
        assert!(config("bogus = 1").unwrap_err().contains("unknown field"));
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let c = config("cert = \"/nonexistent/c.pem\"\nkey = \"/nonexistent/k.pem\"").unwrap();
        let mut registry = prometheus_client::registry::Registry::default();
        let err = TlsAcceptor::new(&c, &mut registry).err().unwrap();
        assert!(err.contains("/nonexistent/c.pem"), "{err}");
    }
}
