//! The node's side of the registry (the cluster control plane, `spec/registry-api.md`).
//!
//! A node started with `registry = "http://HOST:PORT"` (`--registry URL`):
//! - registers its devices and slots with `PUT /v1/nodes/{name}` and keeps doing so,
//!   at least every third of the lease the registry grants, with each slot's busy
//!   ratio over the time since the previous report and its queue depth ([`Lease`]);
//! - asks the registry with `POST /v1/reconfigurations` before it loads another
//!   accelerator into a slot ([`Registry::validate`]; the decision is
//!   `admin::reconfigure`'s);
//! - deregisters with `DELETE /v1/nodes/{name}` when it drains on SIGTERM.
//!
//! The registry is never on the data path, so a node whose registry is unreachable
//! serves on: the lease thread retries with a pause that doubles up to
//! `registry_retry_max_ms`, and logs once when the registry stops answering and once
//! when it answers again. Reconfigurations, which the registry must see to keep its
//! bindings right, are refused meanwhile unless forced (see `admin`).
//!
//! Several registry replicas may be listed (`http://a:7400,http://b:7400`): a request
//! goes to the replica that answered last and moves on to the next one when a replica
//! cannot be reached or answers 503 (a follower saying `NOT_LEADER`, whose `Location`
//! names the leader, which is tried next).
//!
//! The bodies are the `registry-api` crate's types (the registry serialises with the
//! same ones), and so is the loop that goes round the replicas.
//!
//! HTTP goes through `ureq`, a blocking client: the lease has its own thread, and a
//! validation runs on the blocking pool of the network thread that asked, like the
//! reconfiguration itself.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use registry_api::{self as api, origin_of, Patience, Replicas, Try};
use serde_json::Value;

use crate::core::dispatch::Dispatcher;
use crate::core::slot::SlotInfo;

/// Registry replicas a node may list.
pub const REGISTRY_URLS_MAX: usize = 8;
/// The first pause after a failed registration; it doubles up to `registry_retry_max_ms`.
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The shortest pause between renewals, whatever lease the registry grants, so that a
/// registry answering `"lease_ms":0` cannot make the node spin.
const RENEWAL_MIN: Duration = Duration::from_millis(10);
/// The longest, so that the busy ratios the registry sees stay fresh under a long lease.
const RENEWAL_MAX: Duration = Duration::from_secs(60);
/// Largest `registry_timeout_ms` and `registry_retry_max_ms`: ten minutes.
pub(crate) const REGISTRY_MS_MAX: u64 = 600_000;

/// What the node's configuration says about the registry: the registry keys, and the
/// listeners the node advertises (`crate::config` composes it from node.toml).
#[derive(Clone, Debug)]
pub struct RegistrySection {
    /// `registry`: the replicas' URLs, comma-separated; `None` for a standalone node.
    pub registry: Option<String>,
    /// `name`: the node's name there (default: the host name).
    pub name: Option<String>,
    /// `advertise`: the address others reach the node's listeners at.
    pub advertise: Option<IpAddr>,
    pub registry_token: Option<String>,
    pub registry_timeout_ms: u64,
    pub registry_retry_max_ms: u64,
    /// The HTTP, RAC and remote OpenCL listen addresses.
    pub http: SocketAddr,
    pub rac: SocketAddr,
    pub opencl: Option<SocketAddr>,
}

/// Checks the registry keys of a configuration (`Config::validate` calls it): a
/// registry URL list that parses, a name the registry accepts, an address others can
/// reach the node at, and no registry key set without a registry.
pub fn check_config(config: &RegistrySection) -> Result<(), String> {
    let Some(urls) = &config.registry else {
        for (key, set) in [
            ("name", config.name.is_some()),
            ("advertise", config.advertise.is_some()),
            ("registry_token", config.registry_token.is_some()),
        ] {
            if set {
                return Err(format!(
                    "{key} is set but registry is not: {key} only serves a node that \
                     registers with a registry (set registry, or leave {key} out)"
                ));
            }
        }
        return Ok(());
    };
    let urls = parse_urls(urls)?;
    for (key, ms) in [
        ("registry_timeout_ms", config.registry_timeout_ms),
        ("registry_retry_max_ms", config.registry_retry_max_ms),
    ] {
        if ms > REGISTRY_MS_MAX {
            return Err(format!(
                "{key} must be at most {REGISTRY_MS_MAX} (ten minutes)"
            ));
        }
    }
    node_name(config)?;
    advertise_ip(config, &urls)?;
    if let Some(token) = &config.registry_token {
        if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(
                "registry_token must be non-empty, without spaces or control \
                 characters (it is sent as `Authorization: Bearer <token>`)"
                    .to_string(),
            );
        }
    }
    Ok(())
}

/// One registry replica, as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `scheme://authority[/prefix]`, without a trailing `/`; paths are appended.
    pub base: String,
    /// Whether its host is this machine's loopback (`localhost`, `127.0.0.0/8`, `::1`).
    pub loopback: bool,
}

/// Parses `registry`: one or more `http://` or `https://` URLs, comma-separated.
pub fn parse_urls(text: &str) -> Result<Vec<Endpoint>, String> {
    let urls: Vec<&str> = text.split(',').map(str::trim).collect();
    if urls.len() > REGISTRY_URLS_MAX {
        return Err(format!(
            "registry lists {} URLs; at most {REGISTRY_URLS_MAX} replicas may be listed",
            urls.len()
        ));
    }
    urls.into_iter().map(parse_url).collect()
}

fn parse_url(url: &str) -> Result<Endpoint, String> {
    let bad = |why: &str| Err(format!("registry URL {url:?} {why}"));
    let Some((_, rest)) = url
        .split_once("://")
        .filter(|(scheme, _)| matches!(*scheme, "http" | "https"))
    else {
        return bad("must start with http:// or https:// (like http://10.0.0.1:7400)");
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) || url.contains(['?', '#']) {
        return bad("must not contain spaces, a query or a fragment");
    }
    let authority = rest.split('/').next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    if host.is_empty() {
        return bad("has no host");
    }
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    Ok(Endpoint {
        base: url.trim_end_matches('/').to_string(),
        loopback,
    })
}

/// Checks a name the registry will see (node name, instance id): the registry's own
/// rule, from the contract crate.
pub use registry_api::check_name;

/// The node's name at the registry: `name`, or the host name.
pub fn node_name(config: &RegistrySection) -> Result<String, String> {
    let name = match &config.name {
        Some(name) => name.clone(),
        None => hostname().ok_or("cannot read the host name: set name (--name NAME)")?,
    };
    check_name("the node name", &name).map_err(|e| match config.name {
        Some(_) => e,
        None => format!("{e} (it is the host name; set name, --name NAME, to another)"),
    })?;
    Ok(name)
}

fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: a valid buffer and its length; gethostname NUL-terminates within it
    // (the last byte stays 0 when the name is truncated).
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) } != 0 {
        return None;
    }
    let len = buf.iter().position(|&b| b == 0)?;
    String::from_utf8(buf[..len].to_vec()).ok()
}

/// The IP the node tells the registry its listeners are at.
///
/// `advertise` when set. Otherwise the IP the HTTP front end listens on, when it is one
/// address that the other front ends share (or they listen on every address), and
/// when it is a loopback address only if the registry is on this machine too: a node
/// listening on 127.0.0.1 is right for a trial on one host and unreachable for any
/// other. A node listening on every address (`0.0.0.0`, `::`) cannot tell which of its
/// addresses others reach it at (a host has several, and NAT may put another in
/// front), so it needs `advertise`.
pub fn advertise_ip(config: &RegistrySection, registry: &[Endpoint]) -> Result<IpAddr, String> {
    if let Some(ip) = config.advertise {
        if ip.is_unspecified() {
            return Err(format!(
                "advertise {ip} is not an address other hosts can reach the node at"
            ));
        }
        return Ok(ip);
    }
    let ip = config.http.ip();
    if ip.is_unspecified() {
        return Err(format!(
            "the node listens on every address (http = {}), so it cannot tell the registry \
             which one other hosts reach it at: set advertise (--advertise IP)",
            config.http
        ));
    }
    let others = std::iter::once(config.rac).chain(config.opencl);
    if let Some(other) = others
        .map(|a| a.ip())
        .find(|o| !o.is_unspecified() && *o != ip)
    {
        return Err(format!(
            "the front ends listen on different IPs ({ip} and {other}): set advertise \
             (--advertise IP) to the one other hosts reach the node at"
        ));
    }
    if ip.is_loopback() {
        if let Some(remote) = registry.iter().find(|e| !e.loopback) {
            return Err(format!(
                "the node listens on {ip}, a loopback address, but the registry {} is \
                 not on this host, and nothing there could reach {ip}: listen on an \
                 address other hosts reach (and set advertise if it is 0.0.0.0)",
                remote.base
            ));
        }
    }
    Ok(ip)
}

/// Where other hosts reach the node's front ends: the advertised IP with each
/// listener's own port. The same type holds where they listen (before
/// [`Advertised::at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Advertised {
    pub http: SocketAddr,
    pub rac: SocketAddr,
    pub opencl: Option<SocketAddr>,
    pub https: Option<SocketAddr>,
    pub rac_tls: Option<SocketAddr>,
    pub grpc: Option<SocketAddr>,
    pub grpc_tls: Option<SocketAddr>,
}

impl Advertised {
    /// Front ends listening at `http` and `rac` (and nothing else yet).
    pub fn listening(http: SocketAddr, rac: SocketAddr) -> Advertised {
        Advertised {
            http,
            rac,
            opencl: None,
            https: None,
            rac_tls: None,
            grpc: None,
            grpc_tls: None,
        }
    }

    /// The same listeners as reached at `ip`. HTTP, RAC and remote OpenCL are
    /// advertised as they always were (`advertise_ip` checked that they can be). The
    /// gRPC and TLS listeners are checked here instead, so that no setup that starts
    /// today stops starting: one that listens on a loopback address while the node is
    /// advertised at another (gRPC's default 127.0.0.1:8001 beside `--http
    /// 10.0.0.5:8080`) is not reachable there, so it is left out rather than
    /// advertised at an address nothing answers.
    pub fn at(self, ip: IpAddr) -> Advertised {
        let at = |a: SocketAddr| SocketAddr::new(ip, a.port());
        let reachable = |a: Option<SocketAddr>| {
            a.filter(|a| ip.is_loopback() || !a.ip().is_loopback())
                .map(at)
        };
        Advertised {
            http: at(self.http),
            rac: at(self.rac),
            opencl: self.opencl.map(at),
            https: reachable(self.https),
            rac_tls: reachable(self.rac_tls),
            grpc: reachable(self.grpc),
            grpc_tls: reachable(self.grpc_tls),
        }
    }
}

/// What the lease reports of the node: its slots (the dispatcher's) and what each of
/// its devices is.
pub struct Reported {
    pub dispatcher: Arc<Dispatcher>,
    pub devices: Vec<DeviceKind>,
    /// With `tenants_from_registry`: applies the registry's tenants (the JSON of
    /// `GET /v1/tenants`' `tenants`), or says why not (the node's stay as they are).
    pub tenants: Option<TenantsSink>,
}

/// What applies the registry's tenants on the node (`front::admin::reload_tenants`).
pub type TenantsSink = Box<dyn Fn(Value) -> Result<(), String> + Send + Sync>;

/// What a device is, for the registry's queries, as its backend says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceKind {
    pub name: String,
    pub backend: &'static str,
    pub vendor: String,
    pub platform: String,
    /// The names of the catalog's accelerators its backend can host: the registry
    /// places no other accelerator on it, and clients can tell what the cluster offers.
    pub accelerators: Vec<String>,
}

impl Reported {
    /// What device `device` is (a device the node does not list: the host's CPU, with
    /// no catalog, which the registry takes as "any").
    fn device_kind(&self, device: &str) -> api::DeviceRegistration {
        let (backend, vendor, platform, accelerators) =
            match self.devices.iter().find(|d| d.name == device) {
                Some(d) => (
                    d.backend,
                    d.vendor.clone(),
                    d.platform.clone(),
                    registered_catalog(&d.accelerators),
                ),
                None => ("cpu", "netaccel".to_string(), "host".to_string(), None),
            };
        api::DeviceRegistration {
            id: device.to_string(),
            backend: backend.to_string(),
            vendor,
            platform,
            accelerators,
            slots: Vec::new(),
        }
    }
}

/// A device's catalog as the registry takes it: the names it accepts (a name it would
/// refuse cannot name a function either), and none at all (`null`: "any") past its
/// bound, so that a large catalog never costs the node its registration.
fn registered_catalog(names: &[String]) -> Option<Vec<String>> {
    let names: Vec<String> = names
        .iter()
        .filter(|n| api::check_name("accelerator", n).is_ok())
        .cloned()
        .collect();
    (names.len() <= api::nodes::CATALOG_MAX).then_some(names)
}

/// The body of `PUT /v1/nodes/{name}` (`spec/registry-api.md`, "Nodes"): the node's
/// addresses, and its devices with their slots, each with what it holds, its busy
/// ratio (`busy_ratio[i]` for `slots[i]`) and its queue depth.
pub fn registration(
    node: &Reported,
    at: &Advertised,
    slots: &[SlotInfo],
    busy_ratio: &[f64],
) -> api::NodeRegistration {
    let mut devices: Vec<api::DeviceRegistration> = Vec::new();
    for (info, ratio) in slots.iter().zip(busy_ratio) {
        let hash = node
            .dispatcher
            .catalog()
            .by_id(info.accel_id)
            .map(|a| a.descriptor().hash.clone())
            .unwrap_or_default();
        let slot = api::SlotRegistration {
            id: info.id,
            accelerator: info.accelerator.clone(),
            hash,
            busy_ratio: *ratio,
            queue_depth: u32::try_from(info.queue_depth).unwrap_or(u32::MAX),
        };
        match devices.iter_mut().find(|d| d.id == info.device) {
            Some(device) => device.slots.push(slot),
            None => {
                let mut device = node.device_kind(&info.device);
                device.slots.push(slot);
                devices.push(device);
            }
        }
    }
    api::NodeRegistration {
        http: at.http,
        rac: at.rac,
        opencl: at.opencl,
        https: at.https,
        rac_tls: at.rac_tls,
        grpc: at.grpc,
        grpc_tls: at.grpc_tls,
        devices,
    }
}

/// Each slot's share of time spent executing since the last report the registry
/// took, from the slots' busy-time counters.
struct BusySampler {
    /// Busy nanoseconds of each slot and when they were read, at the last report
    /// taken; empty before the first.
    last: Vec<u64>,
    at: Option<Instant>,
}

impl BusySampler {
    fn new() -> BusySampler {
        BusySampler {
            last: Vec::new(),
            at: None,
        }
    }

    /// Busy ratios of `slots`, read at `now`, over the time since the last report
    /// (since the node started, before the first). A call's time counts when it ends,
    /// so a call longer than the interval shows in one report, capped at 1.
    fn ratios(&self, slots: &[SlotInfo], now: Instant) -> Vec<f64> {
        let Some(at) = self.at else {
            return slots.iter().map(|s| s.busy_ratio.clamp(0.0, 1.0)).collect();
        };
        let elapsed = now.saturating_duration_since(at).as_nanos().max(1) as f64;
        slots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let before = self.last.get(i).copied().unwrap_or(0);
                (s.busy_ns.saturating_sub(before) as f64 / elapsed).clamp(0.0, 1.0)
            })
            .collect()
    }

    /// The report made of `slots` at `now` was taken: the next interval starts here.
    fn taken(&mut self, slots: &[SlotInfo], now: Instant) {
        self.last = slots.iter().map(|s| s.busy_ns).collect();
        self.at = Some(now);
    }
}

/// The registry's answer to a reconfiguration request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// `200`: go ahead; the registry moved these instances off the slot.
    Allowed { migrated: Vec<String> },
    /// `409`: not allowed, and why.
    Refused(String),
    /// `400`: the request was malformed (an instance id the registry does not take).
    Invalid(String),
    /// No verdict: no replica answered, or one answered something other than a
    /// verdict (an unknown node, a wrong token). Why, in a sentence.
    Unvalidated(String),
}

/// An answer from a registry replica: its status and body (`Null` when it sent none
/// or no JSON).
struct Reply {
    status: u16,
    body: Value,
}

impl Reply {
    /// The error sentence of an error body, or the status.
    fn error(&self) -> String {
        match serde_json::from_value::<api::ErrorBody>(self.body.clone()) {
            Ok(e) => format!("{} {}", self.status, e.error),
            Err(_) => match serde_json::from_value::<api::Verdict>(self.body.clone()) {
                Ok(api::Verdict {
                    reason: Some(reason),
                    ..
                }) => format!("{} {reason}", self.status),
                _ => format!("status {}", self.status),
            },
        }
    }

    /// The body as `T`, or why it is not one.
    fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_value(self.body.clone()).map_err(|e| {
            format!(
                "the registry's answer ({}) is not what registry-api.md says: {e}",
                self.status
            )
        })
    }
}

/// What the lease thread is asked to do, besides renewing on time.
#[derive(Default)]
struct Wake {
    /// Report now (a slot was reconfigured).
    renew: bool,
    /// Deregister and stop, finishing by this instant.
    stop: Option<Instant>,
    /// The lease thread has ended.
    ended: bool,
}

/// A connection to the registry: the node's name, the replicas, the HTTP agent, and
/// the lease thread's wake-up.
pub struct Registry {
    pub name: String,
    /// The replicas, and which answered last (where the next request goes first).
    replicas: Replicas,
    token: Option<String>,
    agent: ureq::Agent,
    timeout: Duration,
    retry_max: Duration,
    advertise: IpAddr,
    wake: Mutex<Wake>,
    woken: Condvar,
}

impl Registry {
    /// The registry of a validated configuration, `None` for a standalone node.
    pub fn new(config: &RegistrySection) -> Result<Option<Arc<Registry>>, String> {
        let Some(urls) = &config.registry else {
            return Ok(None);
        };
        let endpoints = parse_urls(urls)?;
        let timeout = Duration::from_millis(config.registry_timeout_ms);
        Ok(Some(Arc::new(Registry {
            name: node_name(config)?,
            advertise: advertise_ip(config, &endpoints)?,
            replicas: Replicas::new(endpoints.into_iter().map(|e| e.base).collect()),
            token: config.registry_token.clone(),
            agent: ureq::AgentBuilder::new()
                .timeout_connect(timeout.min(Duration::from_secs(2)))
                .timeout(timeout)
                .redirects(0)
                .user_agent(concat!("netaccel-node/", env!("CARGO_PKG_VERSION")))
                .build(),
            timeout,
            retry_max: Duration::from_millis(config.registry_retry_max_ms),
            wake: Mutex::new(Wake::default()),
            woken: Condvar::new(),
        })))
    }

    /// Where the node's front ends are reached, given where they listen.
    pub fn advertised(&self, listening: Advertised) -> Advertised {
        listening.at(self.advertise)
    }

    /// Sends one request through the one leader-following loop of the contract
    /// (`registry_api::leader`): to the replica that answered last, then to each other
    /// replica in turn while they cannot be reached or answer 503 (a follower's
    /// `NOT_LEADER`, whose `Location` is tried next, or an overloaded registry), one
    /// round. `Err` says why no replica gave another answer. Each try waits at most
    /// `registry_timeout_ms`, and none starts or lasts past `deadline`. One round is
    /// enough here: the lease thread tries again on its own schedule.
    fn send<B: serde::Serialize>(
        &self,
        method: &str,
        path: &str,
        body: Option<&B>,
        admin: bool,
        deadline: Instant,
    ) -> Result<Reply, String> {
        self.send_with(method, path, body, admin, deadline, None)
    }

    /// [`Registry::send`] with `If-None-Match: etag` when one is given.
    fn send_with<B: serde::Serialize>(
        &self,
        method: &str,
        path: &str,
        body: Option<&B>,
        admin: bool,
        deadline: Instant,
        etag: Option<&str>,
    ) -> Result<Reply, String> {
        let patience = Patience {
            deadline: Some(deadline),
            ..Patience::ONCE
        };
        let answer = self.replicas.follow(patience, |base| {
            self.try_once(base, (method, path), body, admin, deadline, etag)
        });
        answer.map_err(|failed| {
            let mut failures = failed.unreachable;
            failures.extend(failed.refusal);
            failures.dedup();
            format!("no registry replica answered: {}", failures.join("; "))
        })
    }

    /// One request to the replica at `base`.
    fn try_once<B: serde::Serialize>(
        &self,
        base: &str,
        (method, path): (&str, &str),
        body: Option<&B>,
        admin: bool,
        deadline: Instant,
        etag: Option<&str>,
    ) -> Try<Reply, String> {
        let left = deadline.saturating_duration_since(Instant::now());
        let url = format!("{base}{path}");
        let mut request = self
            .agent
            .request(method, &url)
            .timeout(left.min(self.timeout))
            .set("Accept", "application/json");
        if let (true, Some(token)) = (admin, &self.token) {
            request = request.set("Authorization", &format!("Bearer {token}"));
        }
        if let Some(etag) = etag {
            request = request.set("If-None-Match", etag);
        }
        let answer = match body {
            Some(body) => request.send_json(body),
            None => request.call(),
        };
        let response = match answer {
            Ok(response) => response,
            Err(ureq::Error::Status(_, response)) => response,
            // ureq's sentence names the URL.
            Err(ureq::Error::Transport(e)) => return Try::Unreachable(e.to_string()),
        };
        let status = response.status();
        if status == 503 {
            let leader = response.header("Location").and_then(origin_of);
            let why = Reply {
                status,
                body: response.into_json().unwrap_or(Value::Null),
            };
            return Try::Unavailable {
                leader,
                error: format!("{url}: {}", why.error()),
            };
        }
        let body = response
            .into_string()
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or(Value::Null);
        Try::Answer(Reply { status, body })
    }

    /// Asks whether slot `slot` of device `device` may load `accelerator`
    /// (`POST /v1/reconfigurations`), for `instance` when one asks. As the
    /// registry's admin (with `registry_token`) when `admin`: the registry then allows
    /// it and migrates the instances it displaces. Blocks for at most the
    /// configured timeout per replica.
    pub fn validate(
        &self,
        device: &str,
        slot: u16,
        accelerator: &str,
        instance: Option<&str>,
        admin: bool,
    ) -> Verdict {
        let body = api::ReconfigurationRequest {
            node: self.name.clone(),
            device: device.to_string(),
            slot,
            accelerator: accelerator.to_string(),
            instance: instance.map(str::to_string),
        };
        let reply = match self.send(
            "POST",
            "/v1/reconfigurations",
            Some(&body),
            admin,
            self.deadline(),
        ) {
            Ok(reply) => reply,
            Err(why) => return Verdict::Unvalidated(why),
        };
        match (reply.status, reply.parse::<api::Verdict>()) {
            (
                200,
                Ok(api::Verdict {
                    allowed: true,
                    migrated,
                    ..
                }),
            ) => Verdict::Allowed {
                migrated: migrated.unwrap_or_default(),
            },
            (409, verdict) => Verdict::Refused(
                verdict
                    .ok()
                    .and_then(|v| v.reason)
                    .or_else(|| reply.parse::<api::ErrorBody>().ok().map(|e| e.error))
                    .unwrap_or_else(|| "no reason given".to_string()),
            ),
            (400, _) => Verdict::Invalid(reply.error()),
            _ => Verdict::Unvalidated(format!("the registry answered {}", reply.error())),
        }
    }

    /// Registers or renews: `Ok` with the lease granted, `Err` with why not. A renewal
    /// (`lease`: the one granted last) is given half the lease at most: an answer later
    /// than that comes after the lease ran out, while the registry counted the node
    /// lost, so it is given up and tried again at once — on a new connection, which a
    /// registry slow on one connection answers in time.
    fn register(
        &self,
        body: &api::NodeRegistration,
        lease: Option<Duration>,
    ) -> Result<Duration, String> {
        let path = format!("/v1/nodes/{}", self.name);
        let deadline = match lease {
            Some(lease) => self.deadline().min(Instant::now() + lease / 2),
            None => self.deadline(),
        };
        let reply = self.send("PUT", &path, Some(body), true, deadline)?;
        match reply.status {
            200 => Ok(Duration::from_millis(
                reply.parse::<api::LeaseGrant>()?.lease_ms,
            )),
            _ => Err(format!("the registry answered {}", reply.error())),
        }
    }

    /// `GET /v1/tenants`: the tenants the registry serves its nodes.
    /// `GET /v1/tenants`; `Ok(None)` when `known` (the revision this node has) is
    /// still the registry's (`304`: the document is not sent again at every renewal).
    fn tenants(&self, known: Option<&str>) -> Result<Option<api::NodeTenants>, String> {
        let etag = known.map(|revision| format!("\"{revision}\""));
        let reply = self.send_with::<()>(
            "GET",
            "/v1/tenants",
            None,
            true,
            self.deadline(),
            etag.as_deref(),
        )?;
        match reply.status {
            200 => reply.parse::<api::NodeTenants>().map(Some),
            304 => Ok(None),
            _ => Err(format!("the registry answered {}", reply.error())),
        }
    }

    /// `DELETE /v1/nodes/{name}`, finishing by `deadline`.
    fn deregister(&self, deadline: Instant) {
        let path = format!("/v1/nodes/{}", self.name);
        match self.send::<()>("DELETE", &path, None, true, deadline) {
            Ok(reply) if matches!(reply.status, 200 | 204) => {
                tracing::info!(node = %self.name, "deregistered from the registry");
            }
            Ok(reply) if reply.status == 404 => tracing::info!(
                node = %self.name,
                "the registry does not know this node ({}): nothing to deregister",
                reply.error()
            ),
            Ok(reply) => tracing::warn!(
                node = %self.name,
                "the registry refused the deregistration ({}); it will count the node lost when its lease expires",
                reply.error()
            ),
            Err(why) => tracing::warn!(
                node = %self.name,
                "could not deregister: {why}; the registry will count the node lost when its lease expires"
            ),
        }
    }

    /// When a request starting now must be answered by: one timeout per replica.
    fn deadline(&self) -> Instant {
        Instant::now() + self.timeout * self.replicas.bases().len() as u32
    }

    /// Asks the lease thread to report now (a slot now holds something else).
    pub fn renew_soon(&self) {
        self.wake.lock().renew = true;
        self.woken.notify_all();
    }

    /// Asks the lease thread to deregister, finishing by `deadline`, and stop.
    pub fn stop(&self, deadline: Instant) {
        self.wake.lock().stop = Some(deadline);
        self.woken.notify_all();
    }

    /// Waits until `until`, a renewal request or a stop; `Some(deadline)` to stop.
    fn wait(&self, until: Instant) -> Option<Instant> {
        let mut wake = self.wake.lock();
        loop {
            if let Some(deadline) = wake.stop {
                return Some(deadline);
            }
            if std::mem::take(&mut wake.renew) || Instant::now() >= until {
                return None;
            }
            self.woken.wait_until(&mut wake, until);
        }
    }
}

/// The lease: a thread that registers the node and renews its lease until the node
/// drains, then deregisters.
pub struct Lease {
    registry: Arc<Registry>,
    thread: JoinHandle<()>,
}

impl Lease {
    /// Starts the lease thread: registers with `registry` what `node` reports,
    /// advertising `at`.
    pub fn start(registry: Arc<Registry>, node: Reported, at: Advertised) -> Result<Lease, String> {
        let lease_registry = Arc::clone(&registry);
        let thread = std::thread::Builder::new()
            .name("registry".to_string())
            .spawn(move || {
                run_lease(&lease_registry, &node, at);
                lease_registry.wake.lock().ended = true;
                lease_registry.woken.notify_all();
            })
            .map_err(|e| format!("cannot start the registry thread: {e}"))?;
        Ok(Lease { registry, thread })
    }

    /// Has the thread deregister the node, finishing by `deadline`, and end; returns
    /// at once (see [`Lease::join`]).
    pub fn deregister(&self, deadline: Instant) {
        self.registry.stop(deadline);
    }

    /// Waits for the thread to end (after [`Lease::deregister`]), but not past
    /// `deadline`: a registration that was under way when the drain began may hold
    /// the thread until the registry's timeout, and the drain must not wait for it.
    pub fn join(self, deadline: Instant) {
        let mut wake = self.registry.wake.lock();
        while !wake.ended {
            if self
                .registry
                .woken
                .wait_until(&mut wake, deadline)
                .timed_out()
            {
                tracing::warn!("the registry did not answer the deregistration within the drain");
                return;
            }
        }
        drop(wake);
        let _ = self.thread.join();
    }
}

/// Whether the last attempt to register succeeded, for logging changes only.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Link {
    Starting,
    Registered,
    Failing,
}

/// The revisions of the registry's tenants this node applied and last refused, and
/// the last it received (named in `If-None-Match`).
#[derive(Default)]
struct TenantsSeen {
    applied: Option<String>,
    refused: Option<String>,
    last: Option<String>,
}

/// Asks the registry for its tenants and applies them when their revision is new;
/// a failure is logged once per revision (or once per outage), and the node keeps
/// the tenants it has.
fn follow_tenants(registry: &Registry, sink: &TenantsSink, seen: &mut TenantsSeen) {
    let doc = match registry.tenants(seen.last.as_deref()) {
        Ok(Some(doc)) => doc,
        Ok(None) => return,
        Err(why) => {
            if seen.refused.as_deref() != Some("") {
                tracing::warn!(node = %registry.name, "cannot read the registry's tenants: {why}; keeping this node's");
                seen.refused = Some(String::new());
            }
            return;
        }
    };
    seen.last = Some(doc.revision.clone());
    if seen.applied.as_deref() == Some(&doc.revision)
        || seen.refused.as_deref() == Some(&doc.revision)
    {
        return;
    }
    match sink(doc.tenants) {
        Ok(()) => {
            tracing::info!(node = %registry.name, revision = %doc.revision, "applied the registry's tenants");
            seen.applied = Some(doc.revision);
            seen.refused = None;
        }
        Err(why) => {
            tracing::error!(node = %registry.name, revision = %doc.revision, "the registry's tenants do not pass this node's checks: {why}; keeping the tenants it has");
            seen.refused = Some(doc.revision);
        }
    }
}

fn run_lease(registry: &Registry, node: &Reported, at: Advertised) {
    let mut busy = BusySampler::new();
    let mut link = Link::Starting;
    let mut retry = RETRY_FIRST;
    let mut tenants = TenantsSeen::default();
    let mut granted: Option<Duration> = None;
    loop {
        let started = Instant::now();
        let slots: Vec<SlotInfo> = node.dispatcher.slots().iter().map(|s| s.info()).collect();
        let body = registration(node, &at, &slots, &busy.ratios(&slots, started));
        let pause = match registry.register(&body, granted) {
            Ok(lease) => {
                granted = Some(lease);
                busy.taken(&slots, started);
                retry = RETRY_FIRST;
                let renewal = (lease / 3).clamp(RENEWAL_MIN, RENEWAL_MAX);
                match link {
                    Link::Starting => tracing::info!(
                        node = %registry.name, http = %at.http, rac = %at.rac,
                        lease_ms = lease.as_millis() as u64,
                        "registered with the registry"
                    ),
                    Link::Failing => tracing::info!(
                        node = %registry.name,
                        "the registry answers again: registered"
                    ),
                    Link::Registered => {}
                }
                link = Link::Registered;
                if let Some(sink) = &node.tenants {
                    follow_tenants(registry, sink, &mut tenants);
                }
                renewal
            }
            Err(why) => {
                if link != Link::Failing {
                    tracing::warn!(
                        node = %registry.name,
                        "cannot register with the registry: {why}; serving on, and retrying \
                         (at least every {} ms) until it answers",
                        registry.retry_max.as_millis()
                    );
                } else {
                    tracing::debug!(node = %registry.name, "registry still unreachable: {why}");
                }
                link = Link::Failing;
                let pause = retry;
                retry = (retry * 2).min(registry.retry_max);
                pause.min(registry.retry_max)
            }
        };
        if let Some(deadline) = registry.wait(started + pause) {
            registry.deregister(deadline);
            return;
        }
    }
}

// The tests live beside this file, so that it stays within a size a reader can hold.
#[cfg(test)]
mod tests;
