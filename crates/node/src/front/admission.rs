//! A connection's admission, the same for every front end: the node's connection
//! bound ([`ConnectionGuard`]: counted while the connection lives, refused past
//! `connections_max`) and, on a TLS listener, the handshake that fixes the tenant a
//! client certificate maps to ([`handshake`]). The listeners (`crate::server`) and the
//! gRPC front end, which accepts its own connections, call these.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;

use crate::core::tenant::auth::Base;
use crate::node::Node;
use crate::telemetry::logging::Refusal;
use crate::telemetry::Protocol;

/// Keeps the connection counters right however the connection task ends.
pub(crate) struct ConnectionGuard(Arc<Node>, Protocol);

impl ConnectionGuard {
    /// Counts a new connection over `protocol`, if the node has room for it (see
    /// [`Node::try_open_connection`]); the count ends when the guard drops.
    pub(crate) fn open(node: &Arc<Node>, protocol: Protocol) -> Option<ConnectionGuard> {
        if !node.try_open_connection(protocol) {
            return None;
        }
        let guard = ConnectionGuard(Arc::clone(node), protocol);
        guard.gauge().inc();
        Some(guard)
    }

    fn gauge(&self) -> &prometheus_client::metrics::gauge::Gauge {
        self.0.connections(self.1)
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.gauge().dec();
        self.0.close_connection();
    }
}

/// The TLS handshake of a connection on a TLS listener (any front end's), and the
/// connection's own identity: the tenant its client certificate maps to, or a fresh
/// anonymous one. A failed or refused handshake is
/// logged as a refusal and gives `None`.
pub(crate) async fn handshake(
    node: &Node,
    tls: &crate::net::tls::TlsAcceptor,
    stream: TcpStream,
    protocol: Protocol,
    peer: SocketAddr,
) -> Option<(tokio_rustls::server::TlsStream<TcpStream>, Base)> {
    let mut stream = stream;
    if refuse_plain_text(node, tls, &mut stream, protocol, peer).await {
        return None;
    }
    let (stream, identity) = match tls.accept(stream).await {
        Ok(accepted) => accepted,
        Err(crate::net::tls::AcceptError::Handshake(message)) => {
            node.refusals
                .log(Refusal::Protocol, protocol, peer, &"TLS", &message);
            return None;
        }
        Err(crate::net::tls::AcceptError::Refused(message)) => {
            node.refusals
                .log(Refusal::Token, protocol, peer, &"TLS", &message);
            return None;
        }
    };
    Some(match identity {
        crate::net::tls::Identity::Tenant(name) => (stream, Base::Certificate(name)),
        crate::net::tls::Identity::Anonymous => {
            (stream, Base::Connection(node.tenants.anonymous()))
        }
    })
}

/// What a client that sent plain text to a TLS listener is told (an HTTPS listener
/// answers it in plain HTTP), instead of a handshake error about a corrupt record.
const PLAIN_TEXT_ON_TLS: &str =
    "this port speaks TLS: use https:// (or the client's TLS option) to reach it";

/// Whether the client of a TLS listener began with plain text (an HTTP request: a
/// TLS record never starts with a letter, see [`crate::net::tls::is_plain_text`]). If
/// so the refusal is logged and counted as a failed handshake, and on an HTTPS
/// listener the client gets a `400` saying this port speaks TLS; `true` means the
/// connection is to be closed. Waits for the first byte at most the handshake timeout.
async fn refuse_plain_text(
    node: &Node,
    tls: &crate::net::tls::TlsAcceptor,
    stream: &mut TcpStream,
    protocol: Protocol,
    peer: SocketAddr,
) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let timeout = tls.handshake_timeout();
    let mut first = [0u8; 1];
    match tokio::time::timeout(timeout, stream.peek(&mut first)).await {
        Ok(Ok(1)) if crate::net::tls::is_plain_text(first[0]) => {}
        Ok(_) => return false,
        Err(_) => {
            // Silent for the whole handshake timeout: as a handshake not done in time.
            tls.count_failed("timeout");
            let message = "tls handshake not done in time";
            node.refusals
                .log(Refusal::Protocol, protocol, peer, &"TLS", &message);
            return true;
        }
    }
    tls.count_failed("handshake");
    node.refusals.log(
        Refusal::Protocol,
        protocol,
        peer,
        &"TLS",
        &PLAIN_TEXT_ON_TLS,
    );
    if protocol == Protocol::Http {
        // The request is read (what has arrived, bounded) before the answer, so that
        // closing does not reset the connection before the client reads it.
        let mut head = vec![0u8; 16 << 10];
        let _ = tokio::time::timeout(timeout, stream.read(&mut head)).await;
        let body = format!("{PLAIN_TEXT_ON_TLS}\n");
        let answer = format!(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = tokio::time::timeout(timeout, async {
            stream.write_all(answer.as_bytes()).await?;
            stream.shutdown().await
        })
        .await;
    }
    true
}
