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
//!
//! [`RacClient::submit`] is the pipelined path: it writes the call (one write) and
//! returns a [`Pending`] to await later. At most [`IN_FLIGHT_MAX_DEFAULT`] calls are in
//! flight ([`RacClient::with_in_flight_max`]); a call beyond the bound waits for room.
//! Failures are [`RacError`]s, typed by where they came from, with the
//! [`ErrorKind`] and retry hint every netaccel client uses.

mod error;

pub use error::{ErrorKind, RacError, RETRY_AFTER};

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use rac_proto::{
    CallHeader, ControlRequest, Decoded, ParamBlock, ResultHeader, Status, HEADER_LEN,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Mutex, OwnedSemaphorePermit, Semaphore};

#[cfg(test)]
mod tests;

/// Largest result payload the client accepts.
const RESULT_PAYLOAD_MAX: u32 = 1 << 30;

/// A result with status `OK` (a refusal is a [`RacError::Status`]).
#[derive(Debug, Clone)]
pub struct RacOutput {
    pub header: ResultHeader,
    pub payload: Vec<u8>,
}

/// Calls in flight on one connection unless [`RacClient::with_in_flight_max`] says
/// otherwise: the node's own default bound per connection (`rac_in_flight_max`), and
/// the Go, TypeScript, Java and C clients' default.
pub const IN_FLIGHT_MAX_DEFAULT: usize = 32;

/// A call's frame is copied into the connection's send buffer and written with one
/// write when its payload is at most this; a larger payload is written after its
/// header (the copy would cost more than the second write).
const COALESCE_MAX: usize = 64 * 1024;

/// What the reader asks the socket for at once: a read takes every pipelined result
/// that has arrived, not one header and one payload per result.
const READ_BUFFER: usize = 64 * 1024;

type Waiters = Arc<std::sync::Mutex<Waiting>>;

/// A call sent and not yet answered: where its result goes, and its place among the
/// calls in flight (freed when the result arrives or the connection ends, not when the
/// caller stops waiting: the node still holds the call until it answers).
struct Waiter {
    tx: oneshot::Sender<Result<RacOutput, RacError>>,
    _room: OwnedSemaphorePermit,
}

#[derive(Default)]
struct Waiting {
    calls: HashMap<u32, Waiter>,
    /// Set once the reader stops: new calls fail at once with this.
    closed: Option<RacError>,
}

/// The connection's sending half (plain TCP or TLS) and the buffer a frame is
/// gathered in, so that a call is one write.
struct Sender {
    io: Box<dyn AsyncWrite + Send + Unpin>,
    /// At most `HEADER_LEN + COALESCE_MAX` bytes, reused by every call.
    frame: Vec<u8>,
}

impl Sender {
    async fn write_frame(&mut self, head: &[u8; HEADER_LEN], payload: &[u8]) -> io::Result<()> {
        if payload.len() <= COALESCE_MAX {
            self.frame.clear();
            self.frame.extend_from_slice(head);
            self.frame.extend_from_slice(payload);
            self.io.write_all(&self.frame).await?;
        } else {
            self.io.write_all(head).await?;
            self.io.write_all(payload).await?;
        }
        debug_assert!(self.frame.capacity() <= HEADER_LEN + COALESCE_MAX);
        // A TLS stream holds what it encrypted until flushed.
        self.io.flush().await
    }
}

/// One connection to a node's RAC listener. Calls share it: each is written whole by
/// the caller's own future (no task per call), and one reader task per connection
/// hands each result to its call by request id. At most `in_flight_max` calls are in
/// flight ([`IN_FLIGHT_MAX_DEFAULT`]); a call beyond that waits for room.
pub struct RacClient {
    sender: Mutex<Sender>,
    waiters: Waiters,
    next_id: AtomicU32,
    room: Arc<Semaphore>,
    in_flight_max: usize,
    reader: tokio::task::JoinHandle<()>,
}

/// A call sent and not yet answered ([`RacClient::submit`]): await it for the result.
/// Dropping it does not take the call back: its place in flight is freed when the
/// node answers.
pub struct Pending {
    state: PendingState,
}

enum PendingState {
    Waiting(oneshot::Receiver<Result<RacOutput, RacError>>),
    /// The result came before `submit` returned (the node answered and closed).
    Done(Option<Result<RacOutput, RacError>>),
}

impl Future for Pending {
    type Output = Result<RacOutput, RacError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().state {
            PendingState::Waiting(rx) => Pin::new(rx).poll(cx).map(|r| {
                r.unwrap_or_else(|_| Err(RacError::Closed("closed before the result".into())))
            }),
            PendingState::Done(result) => {
                Poll::Ready(result.take().expect("a Pending polled after its result"))
            }
        }
    }
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

    fn start<R: AsyncRead + Send + Unpin + 'static>(
        read: R,
        io: Box<dyn AsyncWrite + Send + Unpin>,
    ) -> RacClient {
        let waiters: Waiters = Arc::default();
        let read = BufReader::with_capacity(READ_BUFFER, read);
        let reader = tokio::spawn(read_results(read, Arc::clone(&waiters)));
        RacClient {
            sender: Mutex::new(Sender {
                io,
                frame: Vec::with_capacity(HEADER_LEN + 4096),
            }),
            waiters,
            next_id: AtomicU32::new(1),
            room: Arc::new(Semaphore::new(IN_FLIGHT_MAX_DEFAULT)),
            in_flight_max: IN_FLIGHT_MAX_DEFAULT,
            reader,
        }
    }

    /// The same client with at most `n` calls in flight (default
    /// [`IN_FLIGHT_MAX_DEFAULT`]); set it before the first call.
    ///
    /// # Panics
    /// When `n` is 0 or over `tokio::sync::Semaphore::MAX_PERMITS`.
    pub fn with_in_flight_max(mut self, n: usize) -> RacClient {
        assert!(
            (1..=Semaphore::MAX_PERMITS).contains(&n),
            "in_flight_max {n}"
        );
        assert_eq!(self.in_flight(), 0, "set the bound before the first call");
        self.room = Arc::new(Semaphore::new(n));
        self.in_flight_max = n;
        self
    }

    /// Calls sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        let free = self.room.available_permits();
        debug_assert!(free <= self.in_flight_max);
        self.in_flight_max - free
    }

    /// Sends a call and waits for its result. Many may be awaited at once.
    pub async fn call(
        &self,
        accel_id: u16,
        params: ParamBlock,
        payload: Vec<u8>,
        deadline_us: u32,
    ) -> Result<RacOutput, RacError> {
        self.submit(accel_id, params, &payload, deadline_us)
            .await?
            .await
    }

    /// Sends a call (waiting for room when `in_flight_max` calls are in flight) and
    /// returns as soon as it is written: the pipelined path. Await the [`Pending`] for
    /// its result; results come in whatever order the node completes them.
    pub async fn submit(
        &self,
        accel_id: u16,
        params: ParamBlock,
        payload: &[u8],
        deadline_us: u32,
    ) -> Result<Pending, RacError> {
        let room = self.wait_for_room().await;
        let mut header = CallHeader::call(accel_id, self.fresh_id(), payload.len() as u32, params);
        header.deadline_us = deadline_us;
        self.send(header, payload, room).await
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
        let payload = request.to_payload();
        let room = self.wait_for_room().await;
        let header = CallHeader::control(self.fresh_id(), payload.len() as u32);
        let out = self.send(header, &payload, room).await?.await?;
        serde_json::from_slice(&out.payload)
            .map_err(|e| RacError::Protocol(format!("invalid control JSON: {e}")))
    }

    /// Binds the connection to `tenant` (`{"op":"hello"}`, docs/security.md): its
    /// later calls are that tenant's. A wrong token is refused `UNAUTHORIZED`
    /// ([`RacError::Status`]).
    pub async fn hello(&self, tenant: &str, token: Option<&str>) -> Result<(), RacError> {
        let hello = ControlRequest::Hello {
            tenant: tenant.to_string(),
            token: token.map(str::to_string),
        };
        self.control(&hello).await.map(drop)
    }

    /// Sends raw bytes as they are (for tests of the node's framing checks).
    pub async fn send_raw(&self, bytes: &[u8]) -> Result<(), RacError> {
        let mut sender = self.sender.lock().await;
        let sent = match sender.io.write_all(bytes).await {
            Ok(()) => sender.io.flush().await,
            Err(e) => Err(e),
        };
        sent.map_err(|e| RacError::Closed(e.to_string()))
    }

    async fn wait_for_room(&self) -> OwnedSemaphorePermit {
        Arc::clone(&self.room)
            .acquire_owned()
            .await
            .expect("the in-flight semaphore is never closed")
    }

    /// A request id no call in flight has: 0 is the node's id for an answer to the
    /// whole connection, and ids wrap after 2^32 calls.
    fn fresh_id(&self) -> u32 {
        loop {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            if id != 0 {
                return id;
            }
        }
    }

    async fn send(
        &self,
        header: CallHeader,
        payload: &[u8],
        room: OwnedSemaphorePermit,
    ) -> Result<Pending, RacError> {
        let id = header.request_id;
        let (tx, rx) = oneshot::channel();
        {
            let mut waiting = self.waiters.lock().expect("waiters lock");
            if let Some(why) = &waiting.closed {
                return Err(why.clone());
            }
            let before = waiting.calls.insert(id, Waiter { tx, _room: room });
            assert!(before.is_none(), "request id {id} is in flight twice");
            assert!(waiting.calls.len() <= self.in_flight_max);
        }
        let sent = self
            .sender
            .lock()
            .await
            .write_frame(&header.encode(), payload)
            .await;
        let Err(e) = sent else {
            return Ok(Pending {
                state: PendingState::Waiting(rx),
            });
        };
        // The node may have answered and closed (TOO_LARGE); prefer its answer.
        if let Ok(Ok(result)) = tokio::time::timeout(std::time::Duration::from_secs(1), rx).await {
            return Ok(Pending {
                state: PendingState::Done(Some(result)),
            });
        }
        self.waiters.lock().expect("waiters lock").calls.remove(&id);
        Err(RacError::Closed(e.to_string()))
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
            Some(w) if header.status == Status::Ok => {
                let _ = w.tx.send(Ok(RacOutput { header, payload }));
            }
            Some(w) => {
                let _ = w.tx.send(Err(RacError::Status {
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
    for (_, w) in waiting.calls.drain() {
        let _ = w.tx.send(Err(why.clone()));
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
    // Built once: a catalog is a few dozen allocations, too many for every call (the
    // C client calls by name on each submit).
    static BUILTINS: std::sync::OnceLock<accel::Catalog> = std::sync::OnceLock::new();
    let catalog = BUILTINS.get_or_init(accel::Catalog::builtin);
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
