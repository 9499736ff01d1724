//! A network thread on the node's own event loop (`network = "epoll"`, the default, and
//! `network = "io_uring"`, its ring beside the loop; see [`crate::net::evloop`] and
//! [`crate::net::uring`]).
//!
//! Network thread `net-{i}` runs the loop and serves the plain HTTP and RAC listeners.
//! Its companion `net-{i}-rt` runs a current-thread tokio runtime: it serves the TLS and
//! gRPC listeners and, through its handle, which `net-{i}` enters, whatever the loop's
//! tasks ask of tokio (their `IoTimer`s, `spawn`, `spawn_blocking`). The companion
//! outlives the loop: the loop's tasks may hold its timers until they are dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::{
    accept_failed, accept_optional, accept_tls, drain_wait, refuse_connection, roll_interval,
    serve_plain_on, spawn_grpc, Listeners, Spawner,
};
use crate::front::admission::ConnectionGuard;
use crate::net::evloop::{self, EvStream, Listener};
use crate::node::Node;
use crate::telemetry::Protocol;

/// [`Spawner`] onto this thread's own event loop.
struct OnLoop;

impl Spawner for OnLoop {
    fn spawn<F: std::future::Future<Output = ()> + Send + 'static>(task: F) {
        evloop::spawn(task);
    }
}

/// Network thread `index` on the node's own event loop.
pub(super) fn network_thread(node: Arc<Node>, listeners: Listeners, index: usize) {
    let Listeners {
        http,
        rac,
        https,
        rac_tls,
        grpc,
        grpc_tls,
    } = listeners;
    let (handle_tx, handle_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let companion_node = Arc::clone(&node);
    let companion = std::thread::Builder::new()
        .name(format!("net-{index}-rt"))
        .spawn(move || {
            let tls = TlsListeners {
                https,
                rac_tls,
                grpc,
                grpc_tls,
            };
            companion(companion_node, tls, index, handle_tx, done_rx)
        });
    let companion = match companion {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot start a network thread's runtime thread");
            return;
        }
    };
    let Ok(handle) = handle_rx.recv() else {
        tracing::error!("a network thread's runtime did not start");
        return;
    };
    // With `network = "io_uring"`, a ring beside the loop (see [`crate::net::uring`]).
    let mut ring = node.config.network == crate::config::Network::IoUring;
    if ring {
        if let Err(e) = crate::net::uring::install() {
            tracing::error!(error = %e, "cannot set up io_uring: this network thread serves on epoll");
            ring = false;
        }
    }
    {
        let _runtime = handle.enter();
        let served = evloop::run(serve(Arc::clone(&node), http, rac, index, ring));
        if let Err(e) = served {
            tracing::error!(error = %e, "the network thread's event loop failed: its plain listeners are not served");
        }
    }
    let _ = done_tx.send(());
    let _ = companion.join();
}

/// The companion's listeners.
struct TlsListeners {
    https: Option<std::net::TcpListener>,
    rac_tls: Option<std::net::TcpListener>,
    grpc: Option<std::net::TcpListener>,
    grpc_tls: Option<std::net::TcpListener>,
}

/// The companion thread: a current-thread runtime whose handle goes to the loop's
/// thread, serving the TLS and gRPC listeners until the shutdown, then running until the
/// loop is `done` and the connections are closed (or the drain's deadline passed).
fn companion(
    node: Arc<Node>,
    listeners: TlsListeners,
    index: usize,
    handle_tx: std::sync::mpsc::Sender<tokio::runtime::Handle>,
    done: oneshot::Receiver<()>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot build a network thread's runtime");
            return;
        }
    };
    if handle_tx.send(rt.handle().clone()).is_err() {
        return;
    }
    // One network thread (the first) also rolls the refusal log's windows.
    let roll_logs = index == 0;
    let accepted_here = node.metrics.connections_accepted(index);
    rt.block_on(async move {
        let register =
            |l: std::net::TcpListener| TcpListener::from_std(l).expect("registering a listener");
        let https = listeners.https.map(register);
        let rac_tls = listeners.rac_tls.map(register);
        spawn_grpc(&node, listeners.grpc, listeners.grpc_tls);
        let mut shutdown = node.shutdown_signal();
        let mut roll = roll_interval();
        loop {
            let (accepted, protocol) = tokio::select! {
                accepted = accept_optional(&https) => (accepted, Protocol::Http),
                accepted = accept_optional(&rac_tls) => (accepted, Protocol::Rac),
                _ = roll.tick(), if roll_logs => {
                    node.refusals.roll();
                    continue;
                }
                _ = shutdown.changed() => break,
            };
            if accepted.is_ok() {
                accepted_here.inc();
            }
            match accepted {
                Ok((stream, peer)) => accept_tls(&node, stream, peer, protocol),
                Err(e) => accept_failed(e).await,
            }
        }
        drop((https, rac_tls));
        let _ = done.await;
        drain_wait(&node).await;
    });
}

/// The loop's main task: accepts on the plain listeners until the shutdown, then waits
/// for the connections to close (or the drain's deadline).
async fn serve(
    node: Arc<Node>,
    http: std::net::TcpListener,
    rac: std::net::TcpListener,
    index: usize,
    ring: bool,
) {
    let accepted_here = node.metrics.connections_accepted(index);
    let (http, rac) = if ring {
        // The loop sleeps in the ring: the turn's sends go to the kernel in the
        // system call that waits for completions.
        evloop::set_sleeper(crate::net::uring::sleep);
        let on_ring = |l| PlainListener::Ring(crate::net::uring::Listener::new(l));
        (on_ring(http), on_ring(rac))
    } else {
        match (Listener::new(http), Listener::new(rac)) {
            (Ok(http), Ok(rac)) => (PlainListener::Socket(http), PlainListener::Socket(rac)),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(error = %e, "cannot serve the plain listeners on the event loop");
                return;
            }
        }
    };
    let mut shutdown = node.shutdown_signal();
    loop {
        // Unbiased: a flood of connections on one listener does not starve the other.
        let (accepted, protocol) = tokio::select! {
            _ = shutdown.changed() => break,
            accepted = http.accept() => (accepted, Protocol::Http),
            accepted = rac.accept() => (accepted, Protocol::Rac),
        };
        match accepted {
            Ok((stream, peer)) => {
                accepted_here.inc();
                accept(&node, stream, peer, protocol, ring);
            }
            Err(e) => accept_failed(e).await,
        }
    }
    drop((http, rac));
    drain_wait(&node).await;
}

/// A plain listener of the loop: its sockets' readiness, or the ring's multishot
/// accept (`network = "io_uring"`).
enum PlainListener {
    Socket(Listener),
    Ring(crate::net::uring::Listener),
}

impl PlainListener {
    async fn accept(&self) -> std::io::Result<(std::net::TcpStream, SocketAddr)> {
        match self {
            PlainListener::Socket(l) => l.accept().await,
            PlainListener::Ring(l) => l.accept().await,
        }
    }
}

/// Counts a connection against `connections_max` and serves it on the loop, through
/// its socket's readiness or through the `ring`; over the bound, the refusal goes
/// through the companion's runtime (rare, not worth a path of the loop's own).
fn accept(
    node: &Arc<Node>,
    stream: std::net::TcpStream,
    peer: SocketAddr,
    protocol: Protocol,
    ring: bool,
) {
    if ring {
        // The ring's multishot accept leaves it to us (`accept4` here sets it).
        let _ = stream.set_nodelay(true);
    }
    let Some(guard) = ConnectionGuard::open(node, protocol) else {
        if protocol == Protocol::Http {
            node.http_requests(503).inc();
        }
        if stream.set_nonblocking(true).is_ok() {
            if let Ok(stream) = tokio::net::TcpStream::from_std(stream) {
                tokio::spawn(refuse_connection(stream, protocol));
            }
        }
        return;
    };
    if ring {
        let io_timeout = Duration::from_millis(node.config.io_timeout_ms);
        let stream = crate::net::uring::UringStream::new(stream, io_timeout);
        return serve_plain_on::<_, OnLoop>(node, stream, guard, peer, protocol);
    }
    match EvStream::new(stream) {
        Ok(stream) => serve_plain_on::<_, OnLoop>(node, stream, guard, peer, protocol),
        Err(e) => tracing::warn!(error = %e, "cannot register a connection with the event loop"),
    }
}
