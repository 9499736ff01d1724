//! `netaccel-registry`: the cluster's control plane (BlastFunction's Accelerators
//! Registry).
//!
//! It knows every node, device and slot, what each slot holds and how busy it is. It
//! places function instances on slots so that devices are shared at high utilisation
//! without overload ([`alloc`], the allocation algorithm as a pure function), asks a
//! node to reconfigure a slot when no compatible one has room ([`nodeadmin`]), migrates
//! the instances a reconfiguration or a lost node displaces ([`registry`]), and keeps
//! doing so as nodes come and go ([`reconcile`]). It is never on the data path:
//! clients call nodes directly, at the addresses their binding names.
//!
//! Layers, from the bottom: [`model`] (records and request bodies, validated),
//! [`alloc`] (no I/O), [`state`] (records + indexes, changed by transactions),
//! [`store`] (where records live; compare-and-set commits), [`registry`] and [`ops`]
//! (transactions, allocation with its I/O, long polls), [`http`] (the routes).
//!
//! Where the state lives: in memory ([`store::MemoryStore`], one registry), or in etcd
//! ([`etcd::EtcdStore`]) shared by several replicas, one of which leads through an
//! etcd election ([`ha`]): the leader writes and runs the loops, followers serve reads
//! from a watched cache and send writers to the leader (`503 NOT_LEADER`). With
//! `--kubernetes` and the memory store, replicas elect through a Lease and followers
//! serve reads from a copy of the leader's state ([`follow`]). Slot
//! utilisation comes from the nodes' lease reports or, with `--prometheus`, from a
//! PromQL query ([`prometheus`]), the lease reports filling in what Prometheus does
//! not know.
//!
//! What it does not do: run accelerators (the node), speak RAC, or measure load
//! itself (busy ratios come from the nodes or from Prometheus scraping them).

pub mod alloc;
pub mod auth;
pub mod config;
pub mod error;
pub mod etcd;
pub mod follow;
pub mod freshness;
pub mod ha;
pub mod http;
pub mod kube;
pub mod metrics;
pub mod model;
pub mod nodeadmin;
pub mod ops;
pub mod prometheus;
pub mod reconcile;
pub mod registry;
pub mod state;
pub mod store;

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use config::{Args, Config};
pub use registry::Registry;

/// How long requests in progress may take to finish after a shutdown signal.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Requests in progress beyond the long polls (see [`http::App::in_flight`]).
const REQUESTS_BEYOND_LONG_POLLS: usize = 1024;

/// Builds the registry with its store (memory, or etcd with an election among the
/// replicas) and the HTTP node admin, starts its reconcile loops and serves the API on
/// `listener` until `shutdown` resolves.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let admin = Arc::new(nodeadmin::HttpNodeAdmin::new(
        config.node_token.clone(),
        config.reconfigure_timeout,
    ));
    let in_flight = Arc::new(Semaphore::new(
        config.long_polls_max + REQUESTS_BEYOND_LONG_POLLS,
    ));
    let registry = match config.store.clone() {
        // With --kubernetes, replicas elect a leader through a Lease (kube::lease).
        config::StoreConfig::Memory if config.kubernetes.is_some() => {
            Registry::new_follower(config, Arc::new(store::MemoryStore::new()), admin)
                .await
                .map_err(|e| e.to_string())?
        }
        config::StoreConfig::Memory => {
            Registry::new(config, Arc::new(store::MemoryStore::new()), admin)
                .await
                .map_err(|e| e.to_string())?
        }
        config::StoreConfig::Etcd {
            endpoints,
            prefix,
            election_ttl,
            advertise,
        } => {
            let advertise = match advertise {
                Some(url) => url,
                None => format!(
                    "http://{}",
                    listener.local_addr().map_err(|e| e.to_string())?
                ),
            };
            let store = Arc::new(etcd::EtcdStore::connect(endpoints, prefix).await?);
            let registry = Registry::new_follower(config, store.clone(), admin)
                .await
                .map_err(|e| e.to_string())?;
            ha::spawn(registry.clone(), store, advertise, election_ttl);
            registry
        }
    };
    registry.spawn_reconcilers();
    if let Some(prometheus) = registry.config.prometheus.clone() {
        prometheus::spawn(registry.clone(), prometheus);
    }
    if let Some(settings) = registry.config.kubernetes.clone() {
        kube::start(registry.clone(), settings).await?;
    }
    let access = Arc::new(auth::Access::new(
        registry.config.credentials.as_deref(),
        registry.config.token.as_deref(),
    )?);
    if registry.config.credentials.is_some() {
        spawn_reload_on_sighup(access.clone());
    }
    let app = http::router(http::App {
        registry,
        in_flight,
        access,
    });
    // On shutdown the server stops accepting and lets requests in progress finish,
    // but a long poll may wait a minute: past SHUTDOWN_GRACE the process ends anyway
    // (its clients simply poll again, elsewhere or later).
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        shutdown.await;
        let _ = stopping.send(());
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(signal);
    tokio::select! {
        result = server.into_future() => result.map_err(|e| format!("serving: {e}")),
        _ = async {
            match stopped.await {
                Ok(()) => tokio::time::sleep(SHUTDOWN_GRACE).await,
                Err(_) => std::future::pending().await,
            }
        } => Ok(()),
    }
}

/// Reads the credentials file again at every SIGHUP (a bad file changes nothing and
/// says why in the log; the reload is an audit event either way).
fn spawn_reload_on_sighup(access: Arc<auth::Access>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot watch SIGHUP: the credentials are read only at start");
        return;
    };
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            auth::audit_reload(&access.reload());
        }
    });
}

/// Binds `addr`, with a sentence naming it when that fails.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))
}
