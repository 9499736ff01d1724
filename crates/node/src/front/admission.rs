//! A connection's admission, the same for every front end: the node's connection
//! bound ([`ConnectionGuard`]: counted while the connection lives, refused past
//! `connections_max`) and, on a TLS listener, the handshake that fixes the tenant a
//! client certificate maps to ([`handshake`]). The listeners (`crate::server`) and the
//! gRPC front end, which accepts its own connections, call these.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;

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
/// tenant it is counted against: the one its client certificate maps to (`true`: the
/// certificate fixes it), or a fresh anonymous one. A failed or refused handshake is
/// logged as a refusal and gives `None`.
pub(crate) async fn handshake(
    node: &Node,
    tls: &crate::net::tls::TlsAcceptor,
    stream: TcpStream,
    protocol: Protocol,
    peer: SocketAddr,
) -> Option<(
    tokio_rustls::server::TlsStream<TcpStream>,
    crate::core::tenant::TenantId,
    bool,
)> {
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
        crate::net::tls::Identity::Tenant(name) => (stream, node.tenants.named(&name), true),
        crate::net::tls::Identity::Anonymous => (stream, node.tenants.anonymous(), false),
    })
}
