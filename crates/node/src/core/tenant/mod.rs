//! Tenants: who a call is counted against, and the per-tenant bounds at run time.
//!
//! Every connection starts as its own anonymous tenant (a fresh [`TenantId`]), so two
//! clients never share a fair share by accident. A caller that proves a configured
//! tenant (`[[tenants]]`: a bearer token on HTTP or gRPC, RAC `hello`, a client
//! certificate; see [`auth`]) shares that tenant's identity, and so its share, with
//! every other caller of the same tenant. The rest of the node knows a caller by its
//! [`TenantId`] and, for a configured tenant, its name ([`auth::Principal`]).
//!
//! Two bounds apply per tenant, both from the configuration:
//! - in every slot's queue, at most [`Tenants::queue_share_max`] queued calls
//!   (`tenant_queue_depth_max`, never more than the queue itself): the slot enforces
//!   it, and serves tenants round robin (`slot::FairQueue`);
//! - over RAC, at most `tenant_in_flight_max` calls queued at slots across all the
//!   tenant's connections ([`TenantGate`]): past it the node stops reading that
//!   tenant's connections, so TCP pushes back on a flooding tenant instead of the node
//!   spending a network thread on calls it could only refuse `BUSY`.
//!
//! Tokens (tenant tokens here, the admin token in `admin`) are compared with
//! [`secret_eq`], in time that does not depend on where they differ.
//!
//! Who a caller is and what it may do — tokens, certificates, `anonymous`, policies —
//! is [`auth`]'s: the one identity model every front end asks.

pub mod auth;
pub mod devices;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// Identity used for fairness and quotas: a configured tenant, or a connection that
/// named none.
pub type TenantId = u64;

/// A configured tenant (`[[tenants]]`): its credential, and its policy when it has
/// one (see [`auth`]). Callers that prove it share its fair share of every slot.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    pub name: String,
    /// The token in plain text (kept for compatibility; empty: none). `token_hash` is
    /// the production way.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    /// The tenant's quotas (`[tenants.quota]`, see `core::quota`); unset: no limits.
    #[serde(default)]
    pub quota: crate::core::quota::limits::QuotaConfig,
    /// The token's argon2 PHC string (`netaccel-node hash-token` prints one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_hash: Option<String>,
    /// `admin`, `operator`, `caller`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<auth::Role>>,
    /// Accelerators and models it may call: names, or prefixes with a final `*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<Vec<String>>,
    /// What an operator may load (all when left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<Vec<String>>,
    /// Whether it may read `/metrics` and the statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<bool>,
    /// Whether it may read the catalog (accelerators, slots, models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog: Option<bool>,
    /// The shared memory objects (keys, `/NAME`) it may register as system shared
    /// memory regions: names, or prefixes with a final `*`; none when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_memory: Option<Vec<String>>,
    /// Whether it may open remote OpenCL sessions (`--opencl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opencl: Option<bool>,
    /// The remote OpenCL devices its sessions see and use: indices (digits) or name
    /// patterns (see [`devices`]); every shared device when left out, none when
    /// empty. Needs `opencl = true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opencl_devices: Option<Vec<String>>,
}

impl TenantConfig {
    /// Whether this tenant has a policy: then every caller without one is denied.
    pub fn has_policy(&self) -> bool {
        self.roles.is_some()
            || self.call.is_some()
            || self.load.is_some()
            || self.metrics.is_some()
            || self.catalog.is_some()
            || self.shared_memory.is_some()
            || self.opencl.is_some()
            || self.opencl_devices.is_some()
    }
}

/// Checks the tenants section of a configuration: each name at most once, one
/// credential each, valid hashes and patterns, an `anonymous` tenant that exists.
pub fn check_config(section: &auth::AuthSection) -> Result<(), String> {
    auth::Auth::new(section).map(drop)
}

/// Compares a secret (token) with what a client sent without stopping at the first
/// differing byte, so response timing does not reveal how much of it was right: the
/// same comparison the registry makes of its tokens, from the contract crate.
pub use registry_api::secret_eq;

/// The node's tenants at run time.
pub struct Tenants {
    /// Who callers are and what they may do.
    pub auth: auth::Auth,
    /// Queued calls one tenant may hold in one slot's queue.
    pub queue_share_max: usize,
    /// RAC calls one tenant may have queued at slots, across its connections.
    in_flight_max: usize,
    next_anonymous: AtomicU64,
    /// Gates of tenants with live connections, and of some whose connections are all
    /// gone (swept from time to time, see [`Tenants::gate`]).
    gates: Mutex<Gates>,
}

/// The gates map and its size after the last sweep.
#[derive(Default)]
struct Gates {
    map: HashMap<TenantId, Weak<TenantGate>>,
    swept_len: usize,
}

/// The gates map is swept of dead entries when it reaches twice its size after the
/// last sweep, and not below this.
const GATES_SWEEP_MIN: usize = 64;

impl Tenants {
    /// The tenants and per-tenant bounds of a validated configuration: the
    /// configured tenants, the queued calls one tenant may hold in one slot's queue,
    /// and the RAC calls it may have queued across its connections.
    pub fn new(
        section: &auth::AuthSection,
        queue_share_max: usize,
        in_flight_max: usize,
    ) -> Tenants {
        assert!(
            queue_share_max > 0 && in_flight_max > 0,
            "per-tenant bounds are validated to be at least 1"
        );
        Tenants {
            auth: auth::Auth::new(section).expect("tenants validated with the configuration"),
            queue_share_max,
            in_flight_max,
            next_anonymous: AtomicU64::new(1),
            gates: Mutex::new(Gates::default()),
        }
    }

    /// A fresh tenant identity, for a connection that has not named a tenant.
    pub fn anonymous(&self) -> TenantId {
        self.next_anonymous.fetch_add(1, Ordering::Relaxed)
    }

    /// The identity of the tenant called `name`, whether or not it has a token: the
    /// one a client certificate mapped to `name` gets (`crate::net::tls`), the same a
    /// `hello` with its token gives.
    pub fn named(&self, name: &str) -> TenantId {
        configured_id(name)
    }

    /// The gate of `tenant`, shared by all its connections. Every RAC connection asks
    /// for one when it opens (a fresh anonymous tenant each), under one lock shared by
    /// all network threads, so this is O(1) amortised: tenants whose connections are
    /// all gone are forgotten in a sweep when the map has doubled since the last one
    /// (sweeping at every new tenant cost O(live connections) per accept: quadratic
    /// when thousands connect). The map holds at most about twice the live tenants.
    pub fn gate(&self, tenant: TenantId) -> Arc<TenantGate> {
        let mut gates = self.gates.lock();
        if let Some(gate) = gates.map.get(&tenant).and_then(Weak::upgrade) {
            return gate;
        }
        if gates.map.len() >= (2 * gates.swept_len).max(GATES_SWEEP_MIN) {
            gates.map.retain(|_, g| g.strong_count() > 0);
            gates.swept_len = gates.map.len();
        }
        let gate = Arc::new(TenantGate {
            in_flight: AtomicUsize::new(0),
            max: self.in_flight_max,
            freed: tokio::sync::Notify::new(),
        });
        gates.map.insert(tenant, Arc::downgrade(&gate));
        gate
    }
}

/// The identity of a configured tenant: the same for every connection that binds to
/// it, and never equal to an anonymous identity (those count up from 1).
/// Whether `id` is a configured tenant's identity (a `hello` with its token, a client
/// certificate mapped to it), not a connection's anonymous one.
pub fn is_configured(id: TenantId) -> bool {
    id & (1 << 63) != 0
}

pub(crate) fn configured_id(name: &str) -> TenantId {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    h.finish() | (1 << 63)
}

/// Calls one tenant has queued at slots over RAC, across all its connections: the
/// network-level bound that back-pressures a flooding tenant through TCP instead of
/// letting it spend the network thread on calls that can only be refused BUSY.
pub struct TenantGate {
    in_flight: AtomicUsize,
    max: usize,
    /// Signalled when a held call is released.
    pub freed: tokio::sync::Notify,
}

impl TenantGate {
    /// Whether the tenant is at its bound (`tenant_in_flight_max`).
    pub fn is_full(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) >= self.max
    }

    /// Counts one call until the returned guard drops.
    pub fn hold(self: &Arc<Self>) -> TenantHold {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        TenantHold(Arc::clone(self))
    }
}

/// One call counted against its tenant; released on drop.
pub struct TenantHold(Arc<TenantGate>);

impl Drop for TenantHold {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenants(toml: &str) -> Tenants {
        let config = crate::Config::from_toml(toml).unwrap();
        config.tenants_section()
    }

    #[test]
    fn secrets_compare_exactly() {
        assert!(secret_eq("abc", "abc"));
        assert!(!secret_eq("abd", "abc"));
        assert!(!secret_eq("ab", "abc"));
        assert!(!secret_eq("abcd", "abc"));
        assert!(secret_eq("", ""));
    }

    #[test]
    fn hello_binds_configured_tenants_with_their_token_only() {
        let t = tenants(
            "tenant_in_flight_max = 2\n[[tenants]]\nname = \"a\"\ntoken = \"ta\"\n\
             [[tenants]]\nname = \"b\"\ntoken = \"tb\"",
        );
        let a = t.auth.hello("a", Some("ta")).unwrap().id;
        assert_eq!(
            t.auth.hello("a", Some("ta")).unwrap().id,
            a,
            "stable identity"
        );
        let b = t.auth.hello("b", Some("tb")).unwrap().id;
        assert_ne!(a, b);
        assert_eq!(t.named("a"), a);
        for (name, token) in [("a", Some("tb")), ("a", None), ("c", Some("ta"))] {
            let err = t.auth.hello(name, token).unwrap_err().message();
            assert!(err.contains("unknown or its token does not match"), "{err}");
        }
        // Anonymous identities never collide with configured ones.
        let anon = [t.anonymous(), t.anonymous()];
        assert_ne!(anon[0], anon[1]);
        assert!(!anon.contains(&a) && !anon.contains(&b));
    }

    #[test]
    fn a_tenant_shares_one_gate_across_connections_up_to_its_bound() {
        let t = tenants("tenant_in_flight_max = 2");
        let id = t.anonymous();
        let (g1, g2) = (t.gate(id), t.gate(id));
        assert!(Arc::ptr_eq(&g1, &g2));
        let h1 = g1.hold();
        assert!(!g2.is_full());
        let h2 = g2.hold();
        assert!(g1.is_full());
        drop(h1);
        assert!(!g1.is_full());
        drop((h2, g1, g2));
        // The tenant's gate went with its last connection: a new one starts empty.
        let g = t.gate(id);
        assert!(!g.is_full());
    }

    #[test]
    fn gates_of_closed_connections_are_forgotten_in_amortised_sweeps() {
        let t = tenants("");
        let live: Vec<_> = (0..1000)
            .map(|_| {
                let id = t.anonymous();
                (id, t.gate(id))
            })
            .collect();
        let mut sweeps = 0;
        let mut last_len = t.gates.lock().map.len();
        // 100,000 connections that open and close beside 1,000 that stay.
        for _ in 0..100_000 {
            drop(t.gate(t.anonymous()));
            let len = t.gates.lock().map.len();
            if len < last_len {
                sweeps += 1;
            }
            last_len = len;
            // Never more than about twice the live gates (plus the one just made).
            assert!(
                len <= 2 * live.len() + 1,
                "{len} entries for {} live",
                live.len()
            );
        }
        // A sweep per ~1,000 new tenants, not one per tenant.
        assert!((90..=110).contains(&sweeps), "{sweeps} sweeps");
        // The live tenants keep their gates through the sweeps.
        for (id, g) in &live {
            assert!(Arc::ptr_eq(&t.gate(*id), g));
        }
    }

    #[test]
    fn the_queue_share_never_exceeds_the_queue() {
        assert_eq!(tenants("").queue_share_max, 48);
        let t = tenants("queue_depth_max = 8\ntenant_queue_depth_max = 20");
        assert_eq!(t.queue_share_max, 8);
    }

    #[test]
    fn a_tenant_configured_twice_is_refused() {
        let err = crate::Config::from_toml(
            "[[tenants]]\nname = \"a\"\ntoken = \"1\"\n[[tenants]]\nname = \"a\"\ntoken = \"2\"",
        )
        .unwrap_err();
        assert!(err.contains("tenant `a` is configured twice"), "{err}");
    }
}
