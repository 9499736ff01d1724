//! High availability with etcd: several registry replicas on one [`EtcdStore`], one of
//! them leading.
//!
//! Election. Each replica holds an etcd lease of `election_ttl`, renewed every fifth
//! of it, and campaigns in the election under the store's prefix with its advertised
//! URL as value. etcd's election makes the oldest live campaigner the leader; when its
//! process dies its lease runs out within one TTL, its key is deleted, and the next
//! campaigner's campaign returns. The new leader reloads the state from etcd (every
//! ready node gets a fresh lease, so none is declared lost for the election's delay),
//! then writes, allocates and runs the reconcile loops. A leader whose lease cannot be
//! renewed steps down at once; its commits are fenced by its election key anyway (see
//! [`crate::etcd`]).
//!
//! Followers. A follower answers reads from its cache, which a watch on the records'
//! prefix refreshes (plus a periodic reload, in case a watch event was missed while
//! the watch was being re-established), and answers writes `503 NOT_LEADER` with the
//! leader's URL, read from the election every 200 ms, as long as that leader is alive
//! (its lease renewed, its port open): a dead leader is not named while its lease runs
//! out, and clients try the other replicas meanwhile.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, WatchOptions};
use tracing::{info, warn};

use crate::etcd::{EtcdStore, ELECTION};
use crate::registry::Registry;

/// How often a replica reads who leads (for `Location`).
const LEADER_POLL: Duration = Duration::from_millis(200);
/// Longest wait for the leader to accept a connection when checking it is alive.
const LEADER_PROBE: Duration = Duration::from_millis(100);
/// A follower reloads this often even without watch events.
const FOLLOWER_RELOAD: Duration = Duration::from_secs(2);
/// Pause before retrying after etcd failed.
const RETRY: Duration = Duration::from_millis(500);

/// Starts the election, the leader poll and the follower refresh.
pub fn spawn(registry: Arc<Registry>, store: Arc<EtcdStore>, advertise: String, ttl: Duration) {
    tokio::spawn(campaign_forever(
        registry.clone(),
        store.clone(),
        advertise,
        ttl,
    ));
    tokio::spawn(poll_leader(registry.clone(), store.clone()));
    tokio::spawn(follow(registry, store));
}

async fn campaign_forever(
    registry: Arc<Registry>,
    store: Arc<EtcdStore>,
    advertise: String,
    ttl: Duration,
) {
    let election = store.key(ELECTION);
    loop {
        match campaign_once(&registry, &store, &election, &advertise, ttl).await {
            Ok(()) => {}
            Err(e) => warn!(error = %e, "election: retrying"),
        }
        store.set_fence(None);
        if registry.is_leader() {
            warn!("no longer the leader: following");
            stop_leading(&registry, &store);
        }
        if registry.cache_unconfirmed() {
            // A fresh copy at once: until then it answers nothing from its cache.
            registry
                .refresh
                .catch_up(crate::freshness::CATCH_UP_MAX)
                .await;
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// One term: a lease, a campaign, leadership until the lease is lost.
async fn campaign_once(
    registry: &Arc<Registry>,
    store: &EtcdStore,
    election: &str,
    advertise: &str,
    ttl: Duration,
) -> Result<(), String> {
    let mut client = store.client();
    let ttl_s = ttl.as_secs().max(1) as i64;
    let asked = Instant::now();
    // Bounded as the store's requests are (crate::etcd::REQUEST_TIMEOUT): a grant
    // sent while etcd elects its own leader is otherwise answered seconds later.
    let grant = client.lease_grant(ttl_s, None);
    let lease = tokio::time::timeout(crate::etcd::REQUEST_TIMEOUT, grant)
        .await
        .map_err(|_| "lease: etcd did not answer in time".to_string())?
        .map_err(|e| format!("lease: {e}"))?
        .id();
    let keepalive = keep_alive(registry, client.clone(), lease, asked + ttl, ttl);
    tokio::pin!(keepalive);
    let leader_key = tokio::select! {
        lost = &mut keepalive => return Err(lost),
        won = client.campaign(election, advertise, lease) => won
            .map_err(|e| format!("campaign: {e}"))?
            .take_leader()
            .ok_or("campaign: no leader key in the answer")?,
    };
    store.set_fence(Some(leader_key.key().to_vec()));
    if let Err(e) = registry.become_leader().await {
        let _ = client.lease_revoke(lease).await;
        return Err(format!("taking over: {e}"));
    }
    info!(advertise, "elected: this replica leads");
    let lost = keepalive.await;
    // Stop leading before the lease goes: once it is revoked another replica may lead
    // and write at once, and this one's cache is then behind (bench/jepsen found reads
    // answered from it in that gap, after an etcd member was lost).
    warn!(error = %lost, "no longer the leader: following");
    stop_leading(registry, store);
    let _ = client.lease_revoke(lease).await;
    Err(lost)
}

/// Leaves the lead: no more commits (the fence), no more answers from the cache until
/// a fresh copy is loaded ([`Registry::cache_unconfirmed`]), then a follower.
fn stop_leading(registry: &Registry, store: &EtcdStore) {
    store.set_fence(None);
    registry.stop_leading();
}

/// Renews `lease` every fifth of `ttl` until it may have run out; returns why.
///
/// A slow answer is not a lost lease: etcd under load (an fsync stall, a starved
/// process) can take longer than a renewal period to answer, and giving up then made a
/// healthy leader resign. Nor is a broken keep-alive stream: when the etcd member it
/// ran to is killed, a new stream goes to another member (etcd's client spreads
/// requests over every endpoint), and the lease, which the cluster keeps, is renewed
/// there; giving up at once stopped writes for seconds while the replicas elected
/// again (docs/jepsen.md, anomaly 5). The lease is given up only when it may have run
/// out: each renewal that etcd grants runs from when it was sent (etcd counts from
/// later still, so this side's deadline is never past etcd's), and `valid_until` is
/// the end of the last one. The leader therefore never acts on a lease etcd may have
/// expired, and answers nothing from its cache past it
/// ([`Registry::cache_unconfirmed`]).
async fn keep_alive(
    registry: &Registry,
    mut client: Client,
    lease: i64,
    mut valid_until: Instant,
    ttl: Duration,
) -> String {
    registry.lease_valid_until(valid_until);
    let mut streams = None;
    let mut interval = tokio::time::interval(ttl / 5);
    let mut broken = String::new();
    loop {
        interval.tick().await;
        let left = valid_until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return format!("the election lease may have run out: {broken}");
        }
        let (keeper, stream) = match &mut streams {
            Some(pair) => pair,
            None => match tokio::time::timeout(left, client.lease_keep_alive(lease)).await {
                Ok(Ok(pair)) => streams.insert(pair),
                Ok(Err(e)) => {
                    broken = format!("lease keep-alive: {e}");
                    continue;
                }
                Err(_) => return "etcd did not renew the election lease before it ran out".into(),
            },
        };
        let sent = Instant::now();
        if let Err(e) = keeper.keep_alive().await {
            broken = format!("lease keep-alive: {e}");
            warn!(error = %broken, "election lease: a new keep-alive stream");
            streams = None;
            continue;
        }
        let left = valid_until.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.message()).await {
            Ok(Ok(Some(r))) if r.ttl() > 0 => {
                valid_until = sent + Duration::from_secs(r.ttl() as u64);
                registry.lease_valid_until(valid_until);
            }
            Ok(Ok(Some(_))) => return "the election lease expired".to_string(),
            Ok(Ok(None)) => {
                broken = "lease keep-alive stream closed".to_string();
                warn!(error = %broken, "election lease: a new keep-alive stream");
                streams = None;
            }
            Ok(Err(e)) => {
                broken = format!("lease keep-alive: {e}");
                warn!(error = %broken, "election lease: a new keep-alive stream");
                streams = None;
            }
            Err(_) => return "etcd did not renew the election lease before it ran out".to_string(),
        }
    }
}

/// Reads who leads every [`LEADER_POLL`], for the `Location` of `NOT_LEADER`. A
/// replica named by the election is passed on only while it is alive (see
/// [`alive`]): etcd keeps a dead leader's key until its lease runs out, up to a whole
/// TTL after a `kill -9`, and a follower that named it all that time sent every
/// writer to a replica that refuses connections.
async fn poll_leader(registry: Arc<Registry>, store: Arc<EtcdStore>) {
    let election = store.key(ELECTION);
    let mut client = store.client();
    loop {
        let named = match client.leader(election.as_str()).await {
            Ok(r) => r.kv().and_then(|kv| {
                let url = std::str::from_utf8(kv.value()).ok()?.to_string();
                Some((url, kv.lease()))
            }),
            Err(_) => None, // "no leader" is an error in etcd's election API.
        };
        let url = match named {
            // The leader itself: nothing to check (it knows its own lease).
            Some((url, _)) if registry.is_leader() => Some(url),
            Some((url, lease)) if alive(&mut client, &url, lease).await => Some(url),
            _ => None,
        };
        registry.set_leader_url(url);
        tokio::time::sleep(LEADER_POLL).await;
    }
}

/// Whether the replica at `url`, whose election key is held by `lease`, may still be
/// named as the leader: its lease is being renewed, and it accepts connections.
///
/// A leader renews every fifth of its lease, so while it lives the lease's remaining
/// TTL never falls below four fifths of the TTL granted (less one second: etcd
/// answers in whole seconds). Lower means renewals stopped: the process hangs or its
/// link to etcd is gone, and the lease is lapsing. A process killed outright is seen
/// sooner, within [`LEADER_PROBE`]: its port refuses connections.
async fn alive(client: &mut Client, url: &str, lease: i64) -> bool {
    let renewed = match client.lease_time_to_live(lease, None).await {
        Ok(l) => l.granted_ttl() > 0 && l.ttl() * 5 >= l.granted_ttl() * 4 - 5,
        // No answer about the lease: do not contradict the election over it.
        Err(_) => true,
    };
    if !renewed {
        return false;
    }
    let Some(authority) = url
        .split_once("://")
        .map(|(_, rest)| rest.split('/').next().unwrap_or(""))
    else {
        return true;
    };
    let connect = tokio::net::TcpStream::connect(authority);
    // A timeout is no proof of death (a loaded machine): only a refusal is.
    !matches!(
        tokio::time::timeout(LEADER_PROBE, connect).await,
        Ok(Err(_))
    )
}

/// Keeps a follower's cache fresh: reloads on every watch event and periodically.
async fn follow(registry: Arc<Registry>, store: Arc<EtcdStore>) {
    let mut client = store.client();
    let prefix = store.state_prefix();
    loop {
        let mut stream = match client
            .watch(prefix.as_str(), Some(WatchOptions::new().with_prefix()))
            .await
        {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "watch: retrying");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        // Whatever happened before the watch started is picked up by this reload.
        reload(&registry).await;
        loop {
            // A read about to answer 404 asks for a round now (crate::freshness).
            let event = tokio::select! {
                event = tokio::time::timeout(FOLLOWER_RELOAD, stream.message()) => event.ok(),
                _ = registry.refresh.wanted() => None,
            };
            match event {
                Some(Ok(Some(_))) | None => reload(&registry).await,
                Some(Ok(None)) => break,
                Some(Err(e)) => {
                    warn!(error = %e, "watch ended: restarting it");
                    break;
                }
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

async fn reload(registry: &Registry) {
    registry
        .refresh
        .round(async {
            if !registry.is_leader() {
                if let Err(e) = registry.reload().await {
                    warn!(error = %e, "follower: reloading the state failed");
                }
            }
        })
        .await;
}
