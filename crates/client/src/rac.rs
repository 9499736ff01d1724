//! An asynchronous, pipelined RAC v1 client: many calls in flight on one connection,
//! a future per call, results matched by request id in whatever order they come.
//!
//! ```no_run
//! # async fn demo() -> Result<(), netaccel_client::rac::RacError> {
//! use netaccel_client::rac::RacClient;
//! let client = RacClient::connect("127.0.0.1:9400").await?;
//! let out = client.call_by_name("to_uppercase", [0; 44], b"hello".to_vec(), 0).await?;
//! assert_eq!(out.payload, b"HELLO");
//! # Ok(()) }
//! ```
//!
//! [`RacClient::connect_tls`] does the same over TLS (a node's `--rac-tls` listener),
//! with a rustls configuration from [`tls_config`].

mod error;

pub use error::{ErrorKind, RacError, RETRY_AFTER};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rac_proto::{
    CallHeader, ControlRequest, Decoded, ParamBlock, ResultHeader, Status, HEADER_LEN,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Mutex};

/// Largest result payload the client accepts.
const RESULT_PAYLOAD_MAX: u32 = 1 << 30;

/// A result with status `OK` (a refusal is a [`RacError::Status`]).
#[derive(Debug, Clone)]
pub struct RacOutput {
    pub header: ResultHeader,
    pub payload: Vec<u8>,
}

type Waiters = Arc<std::sync::Mutex<Waiting>>;

#[derive(Default)]
struct Waiting {
    calls: HashMap<u32, oneshot::Sender<Result<RacOutput, RacError>>>,
    /// Set once the reader stops: new calls fail at once with this.
    closed: Option<RacError>,
}

/// The connection's sending half: plain TCP or TLS.
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

pub struct RacClient {
    writer: Mutex<Writer>,
    waiters: Waiters,
    next_id: AtomicU32,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for RacClient {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl RacClient {
    pub async fn connect(addr: &str) -> Result<RacClient, RacError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| RacError::Connect {
                addr: addr.to_string(),
                reason: e.to_string(),
            })?;
        stream.set_nodelay(true).ok();
        let (read, write) = stream.into_split();
        Ok(RacClient::start(read, Box::new(write)))
    }

    /// Connects to a node's RAC-over-TLS listener at `addr`, checking that its
    /// certificate is valid for `server_name` (a DNS name or an IP address) under
    /// `config` ([`tls_config`]).
    pub async fn connect_tls(
        addr: &str,
        server_name: &str,
        config: Arc<rustls::ClientConfig>,
    ) -> Result<RacClient, RacError> {
        let failed = |reason: String| RacError::Connect {
            addr: addr.to_string(),
            reason,
        };
        let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
            .map_err(|e| failed(format!("bad server name {server_name}: {e}")))?;
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| failed(e.to_string()))?;
        stream.set_nodelay(true).ok();
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(name, stream)
            .await
            .map_err(|e| failed(format!("TLS handshake: {e}")))?;
        let (read, write) = tokio::io::split(stream);
        Ok(RacClient::start(read, Box::new(write)))
    }

    fn start<R: AsyncRead + Send + Unpin + 'static>(read: R, writer: Writer) -> RacClient {
        let waiters: Waiters = Arc::default();
        let reader = tokio::spawn(read_results(read, Arc::clone(&waiters)));
        RacClient {
            writer: Mutex::new(writer),
            waiters,
            next_id: AtomicU32::new(1),
            reader,
        }
    }

    /// Sends a call and waits for its result. Many may be awaited at once.
    pub async fn call(
        &self,
        accel_id: u16,
        params: ParamBlock,
        payload: Vec<u8>,
        deadline_us: u32,
    ) -> Result<RacOutput, RacError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut header = CallHeader::call(accel_id, id, payload.len() as u32, params);
        header.deadline_us = deadline_us;
        self.exchange(header, &payload).await
    }

    /// Calls a built-in accelerator by name.
    pub async fn call_by_name(
        &self,
        name: &str,
        params: ParamBlock,
        payload: Vec<u8>,
        deadline_us: u32,
    ) -> Result<RacOutput, RacError> {
        let id =
            rac_proto::builtin::id(name).ok_or_else(|| RacError::NotBuiltin(name.to_string()))?;
        self.call(id, params, payload, deadline_us).await
    }

    /// Sends a control request; the result payload is the node's JSON answer.
    pub async fn control(&self, request: &ControlRequest) -> Result<serde_json::Value, RacError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let payload = request.to_payload();
        let out = self
            .exchange(CallHeader::control(id, payload.len() as u32), &payload)
            .await?;
        serde_json::from_slice(&out.payload)
            .map_err(|e| RacError::Protocol(format!("invalid control JSON: {e}")))
    }

    /// Sends raw bytes as they are (for tests of the node's framing checks).
    pub async fn send_raw(&self, bytes: &[u8]) -> Result<(), RacError> {
        let mut w = self.writer.lock().await;
        let sent = match w.write_all(bytes).await {
            Ok(()) => w.flush().await,
            Err(e) => Err(e),
        };
        sent.map_err(|e| RacError::Closed(e.to_string()))
    }

    async fn exchange(&self, header: CallHeader, payload: &[u8]) -> Result<RacOutput, RacError> {
        let (tx, rx) = oneshot::channel();
        {
            let mut waiting = self.waiters.lock().expect("waiters lock");
            if let Some(why) = &waiting.closed {
                return Err(why.clone());
            }
            waiting.calls.insert(header.request_id, tx);
        }
        let sent = {
            let mut w = self.writer.lock().await;
            match w.write_all(&header.encode()).await {
                Ok(()) => match w.write_all(payload).await {
                    // A TLS stream holds what it encrypted until flushed.
                    Ok(()) => w.flush().await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            }
        };
        if let Err(e) = sent {
            // The node may have answered and closed (TOO_LARGE); prefer its answer.
            if let Ok(Ok(result)) =
                tokio::time::timeout(std::time::Duration::from_secs(1), rx).await
            {
                return result;
            }
            self.waiters
                .lock()
                .expect("waiters lock")
                .calls
                .remove(&header.request_id);
            return Err(RacError::Closed(e.to_string()));
        }
        rx.await
            .unwrap_or_else(|_| Err(RacError::Closed("closed before the result".into())))
    }
}

async fn read_results<R: AsyncRead + Unpin>(mut read: R, waiters: Waiters) {
    let why = loop {
        let mut head = [0u8; HEADER_LEN];
        if let Err(e) = read.read_exact(&mut head).await {
            break RacError::Closed(format!("closed before the result: {e}"));
        }
        let header = match ResultHeader::decode(&head, RESULT_PAYLOAD_MAX) {
            Ok(Decoded::Complete(h, _)) => h,
            Ok(Decoded::Partial) => unreachable!("a whole header was read"),
            Err(e) => break RacError::Protocol(format!("bad result header: {e}")),
        };
        let mut payload = vec![0u8; header.payload_len as usize];
        if let Err(e) = read.read_exact(&mut payload).await {
            break RacError::Closed(format!("closed in the middle of a result: {e}"));
        }
        let waiter = waiters
            .lock()
            .expect("waiters lock")
            .calls
            .remove(&header.request_id);
        let message = || String::from_utf8_lossy(&payload).into_owned();
        match waiter {
            Some(tx) if header.status == Status::Ok => {
                let _ = tx.send(Ok(RacOutput { header, payload }));
            }
            Some(tx) => {
                let _ = tx.send(Err(RacError::Status {
                    status: header.status,
                    message: message(),
                    header: Box::new(header),
                }));
            }
            None if header.request_id == 0 && header.status != Status::Ok => {
                // An answer to the connection (BUSY at the node's connection bound,
                // PROTOCOL_ERROR for an unreadable call); the node closes after it.
                break RacError::Refused {
                    status: header.status,
                    message: message(),
                };
            }
            // A call whose caller stopped waiting.
            None => {}
        }
    };
    let mut waiting = waiters.lock().expect("waiters lock");
    waiting.closed = Some(why.clone());
    for (_, tx) in waiting.calls.drain() {
        let _ = tx.send(Err(why.clone()));
    }
}

/// A rustls client configuration for [`RacClient::connect_tls`]: trusts the CA
/// certificates in the PEM file `ca`, and presents `client` (certificate chain and
/// key, PEM files) to a node that asks for client certificates (mutual TLS).
pub fn tls_config(
    ca: &std::path::Path,
    client: Option<(&std::path::Path, &std::path::Path)>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read_certs = |path: &std::path::Path| {
        CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("{}: {e}", path.display()))
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs(ca)? {
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => {
            let key =
                PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(read_certs(cert)?, key)
                .map_err(|e| format!("{}: {e}", cert.display()))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// A call of built-in accelerator `name` with parameters by name: its id and its
/// parameter block laid out by the catalog's specs, checked against the payload's
/// length so a bad call is refused here rather than by the node.
pub fn builtin_call(
    name: &str,
    params: &[(String, String)],
    payload_len: usize,
) -> Result<(u16, ParamBlock), String> {
    let catalog = accel::Catalog::builtin();
    let accel = catalog
        .by_name(name)
        .ok_or_else(|| format!("{name} is not a built-in accelerator; RAC calls need its id"))?;
    let d = accel.descriptor();
    let block = accel::params_from_pairs(
        &d.params,
        params.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    )
    .map_err(|e| e.to_string())?;
    accel
        .check(&block, Some(payload_len))
        .map_err(|e| e.to_string())?;
    Ok((d.id, block))
}
