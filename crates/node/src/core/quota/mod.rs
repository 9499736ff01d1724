//! Quotas per tenant: how many calls a second, how many request bytes a second, how
//! many calls at once, and how many bytes of objects each tenant may use.
//!
//! Every configured tenant (`[[tenants]]`, and each tenant a client certificate names
//! in `[tls]`) has its own [`Account`]; every anonymous caller shares one, under the
//! limits of `[anonymous_quota]`. Which account a connection's [`TenantId`] is kept
//! under is decided in one place, [`Owner::of`]: when connections gain authenticated
//! identities, this is the function that maps them.
//!
//! Rates are token buckets kept as a GCRA ("generic cell rate algorithm"): one atomic
//! "theoretical arrival time" per bucket, moved by compare-and-swap, so the check on
//! every call takes no lock and touches only the caller's tenant. A bucket holds
//! `burst` units and refills at `rate` units a second; a call of cost `n` passes when
//! `min(n, burst)` units are there and then takes `n` (a call larger than the burst
//! runs the bucket into debt rather than never passing). A refusal says how long until
//! the call would pass ([`Refused::retry_after`]).
//!
//! What this module is not: it does not identify callers (front ends and `tenant` do),
//! and it does not answer refusals on any protocol (front ends map [`Refused`] to HTTP
//! 429 with `Retry-After`, RAC `BUSY`, gRPC `RESOURCE_EXHAUSTED`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use arc_swap::ArcSwap;

use crate::core::clock::Clock;
use crate::core::tenant::{is_configured, TenantId};

pub mod limits;

pub use limits::QuotaConfig;

/// The label value every anonymous caller's refusals share.
pub const ANONYMOUS_LABEL: &str = "anonymous";

/// Whose account a caller is kept under: the one function to change when callers gain
/// authenticated identities.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Owner {
    /// A configured tenant (a RAC `hello` with its token, a client certificate).
    Tenant(TenantId),
    /// Every caller that named no tenant, together.
    Anonymous,
}

impl Owner {
    pub fn of(tenant: TenantId) -> Owner {
        if is_configured(tenant) {
            Owner::Tenant(tenant)
        } else {
            Owner::Anonymous
        }
    }
}

/// What ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exhausted {
    Calls,
    Bytes,
    Concurrent,
    ObjectBytes,
}

impl Exhausted {
    /// The metric's `reason` label value.
    pub fn name(self) -> &'static str {
        match self {
            Exhausted::Calls => "calls_per_s",
            Exhausted::Bytes => "bytes_per_s",
            Exhausted::Concurrent => "concurrent_calls_max",
            Exhausted::ObjectBytes => "object_bytes_max",
        }
    }
}

/// A refusal: which limit, and when the same call would pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub exhausted: Exhausted,
    /// For rates, when the call would pass; for counts, a second (there is no telling
    /// when another call ends).
    pub retry_after: Duration,
}

impl Refused {
    /// Whole seconds to wait, rounded up and at least 1: HTTP's `Retry-After`.
    pub fn retry_after_s(&self) -> u64 {
        let d = self.retry_after;
        (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the tenant is over its quota ({}); retry after {} ms",
            self.exhausted.name(),
            self.retry_after.as_millis().max(1)
        )
    }
}

/// A token bucket as a GCRA: `tat_ns` is when the bucket will be full again, in
/// nanoseconds since the owning [`Quotas`]' epoch.
struct Bucket {
    tat_ns: AtomicU64,
    /// Nanoseconds one unit takes to refill.
    unit_ns: f64,
    burst: u64,
}

impl Bucket {
    fn new(rate_per_s: u64, burst: Option<u64>) -> Bucket {
        assert!(rate_per_s > 0, "rates are validated to be at least 1");
        let burst = burst.unwrap_or(rate_per_s / 10).max(1);
        Bucket {
            tat_ns: AtomicU64::new(0),
            unit_ns: 1e9 / rate_per_s as f64,
            burst,
        }
    }

    /// Takes `cost` units at `now_ns`, or says how long until they would be there.
    fn take(&self, now_ns: u64, cost: u64) -> Result<(), Duration> {
        let tolerance_ns = (self.burst as f64 * self.unit_ns) as u64;
        let needed_ns = (cost.min(self.burst) as f64 * self.unit_ns) as u64;
        let cost_ns = (cost as f64 * self.unit_ns) as u64;
        let mut tat = self.tat_ns.load(Ordering::Acquire);
        loop {
            let from = tat.max(now_ns);
            // Units in the bucket now: (tolerance - (from - now)) / unit.
            let pass_at = (from + needed_ns).saturating_sub(tolerance_ns);
            if pass_at > now_ns {
                return Err(Duration::from_nanos(pass_at - now_ns));
            }
            match self.tat_ns.compare_exchange_weak(
                tat,
                from + cost_ns,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(seen) => tat = seen,
            }
        }
    }

    /// Takes `cost` units whether or not they are there (the bucket goes into debt).
    fn debit(&self, now_ns: u64, cost: u64) {
        let cost_ns = (cost as f64 * self.unit_ns) as u64;
        let _ = self
            .tat_ns
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.max(now_ns) + cost_ns)
            });
    }

    /// Gives back `cost` units taken by a call refused for another limit.
    fn give_back(&self, cost: u64) {
        let cost_ns = (cost as f64 * self.unit_ns) as u64;
        let _ = self
            .tat_ns
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_sub(cost_ns))
            });
    }
}

/// One tenant's limits and what it uses of them. Shared by all its connections.
pub struct Account {
    calls: Option<Bucket>,
    bytes: Option<Bucket>,
    concurrent: AtomicUsize,
    concurrent_max: Option<usize>,
    /// Bytes of objects the tenant may hold (the object store keeps the count).
    pub object_bytes_max: Option<usize>,
    /// Bytes of buffers the tenant's remote OpenCL sessions may hold together (they
    /// keep the count, `ocl_remote::service::account`).
    pub opencl_bytes_max: Option<u64>,
    /// Refusals by [`Exhausted`], in declaration order.
    refusals: [Counter; 4],
}

impl Account {
    fn new(config: &QuotaConfig, label: &str, family: &Family<RefusalLabel, Counter>) -> Account {
        let counter = |e: Exhausted| {
            family
                .get_or_create(&RefusalLabel {
                    tenant: label.to_string(),
                    reason: e.name().to_string(),
                })
                .clone()
        };
        Account {
            calls: config
                .calls_per_s
                .map(|r| Bucket::new(r, config.calls_burst)),
            bytes: config
                .bytes_per_s
                .map(|r| Bucket::new(r, config.bytes_burst)),
            concurrent: AtomicUsize::new(0),
            concurrent_max: config.concurrent_calls_max,
            object_bytes_max: config.object_bytes_max,
            opencl_bytes_max: config.opencl_bytes_max,
            refusals: [
                Exhausted::Calls,
                Exhausted::Bytes,
                Exhausted::Concurrent,
                Exhausted::ObjectBytes,
            ]
            .map(counter),
        }
    }

    fn unlimited_calls(&self) -> bool {
        self.calls.is_none() && self.bytes.is_none() && self.concurrent_max.is_none()
    }

    /// Counts a refusal for `exhausted` and returns it.
    pub fn refuse(&self, exhausted: Exhausted, retry_after: Duration) -> Refused {
        self.refusals[exhausted as usize].inc();
        Refused {
            exhausted,
            retry_after,
        }
    }

    /// Calls of this tenant running or queued now.
    pub fn concurrent(&self) -> usize {
        self.concurrent.load(Ordering::Acquire)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabel {
    pub tenant: String,
    pub reason: String,
}

/// A call admitted under its tenant's quota: counted as in flight until dropped.
#[must_use = "the call counts as in flight while its hold lives"]
pub struct QuotaHold(Option<Arc<Account>>);

impl Drop for QuotaHold {
    fn drop(&mut self) {
        if let Some(account) = self.0.take() {
            let before = account.concurrent.fetch_sub(1, Ordering::AcqRel);
            debug_assert!(before > 0, "a hold releases a call it counted");
        }
    }
}

/// Every tenant's account. Looking one up takes no lock (an atomically swapped
/// snapshot); a reload ([`Quotas::reload`]: SIGHUP, the registry's tenants) swaps in
/// a new snapshot that keeps the account, and so what it has used, of every tenant
/// whose limits did not change.
pub struct Quotas {
    accounts: ArcSwap<Accounts>,
    family: Family<RefusalLabel, Counter>,
    clock: Arc<dyn Clock>,
    epoch: Instant,
}

/// One snapshot of the accounts, with the limits each was made from.
struct Accounts {
    by_id: HashMap<TenantId, (QuotaConfig, Arc<Account>)>,
    anonymous: (QuotaConfig, Arc<Account>),
}

impl Accounts {
    /// The accounts of `tenants` and of the anonymous callers, reusing `old`'s where
    /// the limits are the same.
    fn build(
        tenants: &[(String, QuotaConfig)],
        anonymous: &QuotaConfig,
        id_of: impl Fn(&str) -> TenantId,
        family: &Family<RefusalLabel, Counter>,
        old: Option<&Accounts>,
    ) -> Accounts {
        let by_id = tenants
            .iter()
            .map(|(name, q)| {
                let id = id_of(name);
                assert!(is_configured(id), "a named tenant's identity is configured");
                let kept = old
                    .and_then(|o| o.by_id.get(&id))
                    .filter(|(was, _)| was == q)
                    .map(|(_, a)| Arc::clone(a));
                let account = kept.unwrap_or_else(|| Arc::new(Account::new(q, name, family)));
                (id, (*q, account))
            })
            .collect();
        let anonymous = match old.map(|o| &o.anonymous) {
            Some((was, a)) if was == anonymous => (*anonymous, Arc::clone(a)),
            _ => (
                *anonymous,
                Arc::new(Account::new(anonymous, ANONYMOUS_LABEL, family)),
            ),
        };
        Accounts { by_id, anonymous }
    }

    fn of(&self, tenant: TenantId) -> &Arc<Account> {
        match Owner::of(tenant) {
            Owner::Tenant(id) => self.by_id.get(&id).map_or(&self.anonymous.1, |(_, a)| a),
            Owner::Anonymous => &self.anonymous.1,
        }
    }
}

impl Quotas {
    /// The accounts of `tenants` (name and limits; a name's identity is `id_of(name)`)
    /// and of anonymous callers; their refusals are counted in `registry` as
    /// `netaccel_quota_refusals_total{tenant, reason}`.
    pub fn new(
        tenants: &[(String, QuotaConfig)],
        anonymous: &QuotaConfig,
        id_of: impl Fn(&str) -> TenantId,
        clock: Arc<dyn Clock>,
        registry: &mut Registry,
    ) -> Quotas {
        let family = Family::<RefusalLabel, Counter>::default();
        registry.register(
            "quota_refusals",
            "Calls and object writes refused for a tenant's quota, by tenant (configured names; `anonymous` for all others) and the limit reached",
            family.clone(),
        );
        let accounts = Accounts::build(tenants, anonymous, id_of, &family, None);
        let epoch = clock.now();
        Quotas {
            accounts: ArcSwap::from_pointee(accounts),
            family,
            clock,
            epoch,
        }
    }

    /// Replaces the limits with those of `tenants` and `anonymous` (the configuration
    /// read again, or the registry's tenants): a tenant whose limits did not change
    /// keeps its account, and what it has used; calls admitted before finish on the
    /// account they were admitted under.
    pub fn reload(
        &self,
        tenants: &[(String, QuotaConfig)],
        anonymous: &QuotaConfig,
        id_of: impl Fn(&str) -> TenantId,
    ) {
        let old = self.accounts.load();
        let next = Accounts::build(tenants, anonymous, id_of, &self.family, Some(&old));
        self.accounts.store(Arc::new(next));
    }

    /// The account `tenant` is kept under. A configured identity the configuration
    /// gives no limits for (a certificate's tenant not in `[[tenants]]`) is kept with
    /// the anonymous callers.
    pub fn account(&self, tenant: TenantId) -> Arc<Account> {
        Arc::clone(self.accounts.load().of(tenant))
    }

    /// Admits one call of `tenant` carrying `bytes` of payload, or refuses it (the
    /// refusal counted). The call counts as in flight until the hold drops.
    pub fn admit(&self, tenant: TenantId, bytes: usize) -> Result<QuotaHold, Refused> {
        let accounts = self.accounts.load();
        let account = accounts.of(tenant);
        if account.unlimited_calls() {
            return Ok(QuotaHold(None));
        }
        if let Some(max) = account.concurrent_max {
            let taken = account
                .concurrent
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max).then_some(n + 1)
                });
            if taken.is_err() {
                return Err(account.refuse(Exhausted::Concurrent, Duration::from_secs(1)));
            }
        } else {
            account.concurrent.fetch_add(1, Ordering::AcqRel);
        }
        let hold = QuotaHold(Some(Arc::clone(account)));
        let now_ns = self.now_ns();
        if let Some(calls) = &account.calls {
            calls
                .take(now_ns, 1)
                .map_err(|wait| account.refuse(Exhausted::Calls, wait))?;
        }
        if let Some(bytes_bucket) = &account.bytes {
            if let Err(wait) = bytes_bucket.take(now_ns, bytes as u64) {
                if let Some(calls) = &account.calls {
                    calls.give_back(1);
                }
                return Err(account.refuse(Exhausted::Bytes, wait));
            }
        }
        Ok(hold)
    }

    /// Takes `bytes` more from `tenant`'s bytes bucket without refusing: for a body
    /// whose length was not known when its call was admitted (HTTP chunked), so that
    /// the next calls wait for it.
    pub fn debit_bytes(&self, tenant: TenantId, bytes: usize) {
        if let Some(bucket) = &self.accounts.load().of(tenant).bytes {
            bucket.debit(self.now_ns(), bytes as u64);
        }
    }

    fn now_ns(&self) -> u64 {
        let since = self.clock.since(self.epoch);
        u64::try_from(since.as_nanos()).expect("a node up for under 584 years")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::clock::VirtualClock;

    const A: TenantId = (1 << 63) | 1;
    const B: TenantId = (1 << 63) | 2;

    fn quotas(a: QuotaConfig, anonymous: QuotaConfig) -> (Quotas, Arc<VirtualClock>, Registry) {
        let clock = Arc::new(VirtualClock::new());
        let mut registry = Registry::default();
        let q = Quotas::new(
            &[("a".into(), a), ("b".into(), QuotaConfig::default())],
            &anonymous,
            |name| if name == "a" { A } else { B },
            Arc::clone(&clock) as Arc<dyn Clock>,
            &mut registry,
        );
        (q, clock, registry)
    }

    fn calls(per_s: u64, burst: u64) -> QuotaConfig {
        QuotaConfig {
            calls_per_s: Some(per_s),
            calls_burst: Some(burst),
            ..QuotaConfig::default()
        }
    }

    #[test]
    fn a_reload_keeps_what_unchanged_tenants_used_and_applies_new_limits() {
        let (q, _clock, _) = quotas(calls(10, 2), QuotaConfig::default());
        let id_of = |name: &str| if name == "a" { A } else { B };
        assert!(q.admit(A, 0).is_ok() && q.admit(A, 0).is_ok());
        assert!(q.admit(A, 0).is_err(), "a's burst of 2 is spent");
        // a's limits unchanged: its bucket stays spent; b gets limits of its own.
        q.reload(
            &[("a".into(), calls(10, 2)), ("b".into(), calls(10, 1))],
            &QuotaConfig::default(),
            id_of,
        );
        assert!(q.admit(A, 0).is_err());
        assert!(q.admit(B, 0).is_ok() && q.admit(B, 0).is_err());
        // a's limits changed: a new account, a fresh burst.
        q.reload(
            &[("a".into(), calls(10, 3)), ("b".into(), calls(10, 1))],
            &QuotaConfig::default(),
            id_of,
        );
        assert!((0..3).all(|_| q.admit(A, 0).is_ok()));
        assert!(q.admit(A, 0).is_err());
        // A tenant removed is kept with the anonymous callers (unlimited here).
        q.reload(
            &[("b".into(), calls(10, 1))],
            &QuotaConfig::default(),
            id_of,
        );
        assert!((0..5).all(|_| q.admit(A, 0).is_ok()));
    }

    #[test]
    fn a_bucket_passes_its_burst_then_its_rate() {
        let (q, clock, _) = quotas(calls(100, 5), QuotaConfig::default());
        for _ in 0..5 {
            drop(q.admit(A, 0).expect("within the burst"));
        }
        let refused = q.admit(A, 0).err().expect("burst spent");
        assert_eq!(refused.exhausted, Exhausted::Calls);
        assert_eq!(refused.retry_after, Duration::from_millis(10));
        assert_eq!(refused.retry_after_s(), 1, "rounded up");
        // Over 10 s at 100/s, offered 1,000/s: 1,000 pass, plus the burst.
        let mut passed = 0;
        for _ in 0..10_000 {
            clock.advance(Duration::from_millis(1));
            passed += usize::from(q.admit(A, 0).is_ok());
        }
        assert_eq!(passed, 1000);
        // Other tenants and anonymous callers are not touched.
        assert!(q.admit(B, 0).is_ok());
        assert!(q.admit(7, 0).is_ok());
    }

    #[test]
    fn bytes_are_counted_and_a_call_above_the_burst_runs_into_debt() {
        let config = QuotaConfig {
            bytes_per_s: Some(1000),
            bytes_burst: Some(100),
            calls_per_s: Some(1000),
            calls_burst: Some(10),
            ..QuotaConfig::default()
        };
        let (q, clock, _) = quotas(config, QuotaConfig::default());
        assert!(q.admit(A, 60).is_ok());
        let refused = q.admit(A, 60).err().expect("20 of 60 bytes short");
        assert_eq!(refused.exhausted, Exhausted::Bytes);
        assert_eq!(refused.retry_after, Duration::from_millis(20));
        // The call's token was given back: ten calls of no bytes still pass.
        for _ in 0..9 {
            assert!(q.admit(A, 0).is_ok());
        }
        clock.advance(Duration::from_millis(200));
        // A full bucket passes a call of 1,000 bytes; then the debt is a second long.
        assert!(q.admit(A, 1000).is_ok());
        let refused = q.admit(A, 1).err().expect("in debt");
        assert_eq!(refused.retry_after, Duration::from_millis(901));
        // A body of unknown length is taken afterwards: the debt grows by it.
        q.debit_bytes(A, 500);
        let refused = q.admit(A, 1).err().expect("deeper in debt");
        assert_eq!(refused.retry_after, Duration::from_millis(1401));
    }

    #[test]
    fn concurrent_calls_are_held_until_their_hold_drops() {
        let config = QuotaConfig {
            concurrent_calls_max: Some(2),
            ..QuotaConfig::default()
        };
        let (q, _, _) = quotas(config, QuotaConfig::default());
        let first = q.admit(A, 0).unwrap();
        let second = q.admit(A, 0).unwrap();
        let refused = q.admit(A, 0).err().unwrap();
        assert_eq!(refused.exhausted, Exhausted::Concurrent);
        assert_eq!(q.account(A).concurrent(), 2);
        drop(first);
        let third = q.admit(A, 0).unwrap();
        drop((second, third));
        assert_eq!(q.account(A).concurrent(), 0);
    }

    #[test]
    fn anonymous_callers_share_one_account_and_one_label() {
        let (q, _, registry) = quotas(QuotaConfig::default(), calls(1, 2));
        assert!(q.admit(11, 0).is_ok());
        assert!(q.admit(12, 0).is_ok());
        assert!(q.admit(13, 0).is_err(), "three connections, one bucket");
        assert!(q.admit(A, 0).is_ok() && q.admit(B, 0).is_ok());
        assert_eq!(Owner::of(11), Owner::Anonymous);
        assert_eq!(Owner::of(A), Owner::Tenant(A));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"quota_refusals_total{tenant="anonymous",reason="calls_per_s"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"quota_refusals_total{tenant="a",reason="calls_per_s"} 0"#));
    }

    #[test]
    fn concurrent_admissions_never_pass_more_than_the_bucket() {
        let (q, _, _) = quotas(calls(1, 1000), QuotaConfig::default());
        let q = Arc::new(q);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let q = Arc::clone(&q);
                std::thread::spawn(move || (0..1000).filter(|_| q.admit(A, 0).is_ok()).count())
            })
            .collect();
        let passed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(passed, 1000, "a frozen clock passes the burst exactly");
    }

    #[test]
    fn quotas_come_from_the_tenants_and_the_anonymous_section() {
        let config = crate::Config::from_toml(
            "[anonymous_quota]\ncalls_per_s = 5\n\
             [[tenants]]\nname = \"a\"\ntoken = \"t\"\n\
             quota = { calls_per_s = 100, concurrent_calls_max = 4, object_bytes_max = 1024 }\n\
             [[tenants]]\nname = \"b\"\ntoken = \"u\"",
        )
        .unwrap();
        let section = config.quotas_section();
        assert_eq!(section[0].1.calls_per_s, Some(100));
        assert_eq!(section[0].1.object_bytes_max, Some(1024));
        assert_eq!(section[1].1, QuotaConfig::default(), "b: no limits");
        assert_eq!(config.anonymous_quota.calls_per_s, Some(5));
        let err = crate::Config::from_toml(
            "[[tenants]]\nname = \"a\"\ntoken = \"t\"\nquota = { calls_per_s = 0 }",
        )
        .unwrap_err();
        assert!(
            err.contains("tenant `a`: calls_per_s must be at least 1"),
            "{err}"
        );
        let err = crate::Config::from_toml("[anonymous_quota]\ncalls_per_second = 5").unwrap_err();
        assert!(err.contains("unknown field"), "{err}");
    }

    #[test]
    fn limits_are_validated() {
        let bad = QuotaConfig {
            calls_per_s: Some(0),
            ..QuotaConfig::default()
        };
        assert!(bad
            .validate("tenant `a`")
            .unwrap_err()
            .contains("calls_per_s"));
        let bad = QuotaConfig {
            concurrent_calls_max: Some(0),
            ..QuotaConfig::default()
        };
        assert!(bad.validate("x").is_err());
        assert!(QuotaConfig::default().validate("x").is_ok());
    }
}
