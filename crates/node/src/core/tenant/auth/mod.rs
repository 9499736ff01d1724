//! Who a caller is and what it may do: the one identity model of every front end.
//!
//! A caller proves a configured tenant with a bearer token (HTTP `Authorization:
//! Bearer`, gRPC metadata `authorization: Bearer …`, RAC `hello`) or with a client
//! certificate on a TLS listener (`crate::net::tls` maps it to a name). What a caller
//! that proves nothing is comes from `anonymous` ([`Anonymous`]): its own tenant per
//! connection (the default, as before tenants had credentials), a named tenant, or
//! refused. The answer is a [`Principal`]: the tenant's [`TenantId`] (fairness, and
//! H2's quotas by name), its name, and what it may do ([`Action`]).
//!
//! Tokens are kept as a tenant's `token_hash` (an argon2 PHC string, the production
//! way) or, for compatibility, a plain `token`. An argon2 verification costs tens of
//! milliseconds by design, so it is never paid per call: a connection remembers the
//! principal its credential gave ([`Session`]: RAC `hello` once, HTTP keep-alive per
//! connection), and a bounded cache keyed by a keyed hash of the token (`VerdictCache`)
//! answers requests that carry the token every time (gRPC, new HTTP connections). A
//! reload ([`Auth::reload`], SIGHUP) bumps a generation: every remembered principal
//! of an older generation is checked again on its connection's next call, so a
//! removed token stops working there.
//!
//! Authorization is deny by default once any tenant has a policy (`roles`, `call`,
//! `load`, `metrics`, `catalog`): then a caller without one may do nothing but the
//! health check. With no policy anywhere, every caller may call, read metrics and the
//! catalog, and reconfiguration follows `admin_token` as it always did.
//!
//! Not here: the tokens' wire formats (the front ends), the admin token's own check
//! (`crate::front::admin`), the audit log (`crate::telemetry::audit`). Tokens never
//! leave this module in an error message.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use credential::{check_pattern, matches_any, CheckBudget, Secret, Verdict, VerdictCache};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use super::{configured_id, secret_eq, TenantConfig, TenantId};

/// What a caller that presents no credential is (`anonymous` in the configuration).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub enum Anonymous {
    /// Each connection its own tenant (`"connection"`, the default).
    #[default]
    Connection,
    /// Refused: HTTP 401, gRPC UNAUTHENTICATED, RAC UNAUTHORIZED (`"refuse"`).
    Refuse,
    /// The configured tenant of that name, its policy included (`"tenant NAME"`).
    Tenant(String),
}

impl TryFrom<String> for Anonymous {
    type Error = String;

    fn try_from(s: String) -> Result<Anonymous, String> {
        match s.as_str() {
            "connection" => Ok(Anonymous::Connection),
            "refuse" => Ok(Anonymous::Refuse),
            _ => match s.strip_prefix("tenant ") {
                Some(name) if !name.trim().is_empty() => {
                    Ok(Anonymous::Tenant(name.trim().to_string()))
                }
                _ => Err(format!(
                    "anonymous = `{s}` is not valid: use \"connection\", \"refuse\" or \"tenant NAME\""
                )),
            },
        }
    }
}

impl From<Anonymous> for String {
    fn from(a: Anonymous) -> String {
        match a {
            Anonymous::Connection => "connection".to_string(),
            Anonymous::Refuse => "refuse".to_string(),
            Anonymous::Tenant(name) => format!("tenant {name}"),
        }
    }
}

/// A tenant's role: `admin` may do everything (forced reconfiguration, reloads);
/// `operator` may load what its `load` patterns allow (all when it has none) and read
/// metrics and the catalog; `caller` may call what its `call` patterns allow.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Admin,
    Operator,
    Caller,
}

/// Something a caller may or may not do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action<'a> {
    /// Call an accelerator or infer with a model of this name.
    Call(&'a str),
    /// Load this accelerator or model into a slot (`None`: load anything at all, the
    /// check made before a request's body names what).
    Load(Option<&'a str>),
    /// Read `/metrics` and the inference statistics.
    Metrics,
    /// Read the catalog: accelerators, slots, models.
    Catalog,
    /// What only an admin may: forced reconfiguration, reloading the tenants.
    Admin,
    /// Register this shared memory object (key) as a system shared memory region.
    SharedMemory(&'a str),
    /// Open a remote OpenCL session (a session runs the client's kernels on the
    /// node's host, as the node's user).
    OpenCl,
    /// See and use, in a remote OpenCL session, the shared device of node-wide index
    /// `index` named `name` (see [`super::devices`]).
    OpenClDevice { index: usize, name: &'a str },
}

impl std::fmt::Display for Action<'_> {
    /// What the action is, in the words of refusals and audit lines.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Call(name) => write!(f, "call `{name}`"),
            Action::Load(Some(name)) => write!(f, "load `{name}`"),
            Action::Load(None) => f.write_str("reconfigure slots"),
            Action::Metrics => f.write_str("read the metrics"),
            Action::Catalog => f.write_str("read the catalog"),
            Action::Admin => f.write_str("administer the node"),
            Action::SharedMemory(key) => write!(f, "register shared memory key `{key}`"),
            Action::OpenCl => f.write_str("use the remote OpenCL devices"),
            Action::OpenClDevice { index, name } => {
                write!(f, "use OpenCL device {index} (`{name}`)")
            }
        }
    }
}

/// Why a caller was not authenticated. The messages name no token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthError {
    /// No credential, and `anonymous = "refuse"`.
    Missing,
    /// A token no tenant (nor the admin) has.
    UnknownToken,
    /// RAC `hello` naming a tenant it does not prove.
    Hello(String),
    /// A token not seen before, while the node has spent its time for checking new
    /// tokens this second (`token_check_ms_per_second_max`): try again.
    Busy,
}

impl AuthError {
    /// The refusal's sentence, the same on every front end.
    pub fn message(&self) -> String {
        match self {
            AuthError::Missing => "this node refuses anonymous callers: present a tenant's \
                 token (Authorization: Bearer, gRPC metadata authorization, RAC hello) or \
                 client certificate"
                .to_string(),
            AuthError::UnknownToken => "the token given is not this node's admin token nor any \
                 tenant's token"
                .to_string(),
            AuthError::Hello(name) => {
                format!("tenant `{name}` is unknown or its token does not match")
            }
            AuthError::Busy => "this node is checking too many new tokens at the moment;                  try again in a second"
                .to_string(),
        }
    }
}

/// A tenant's policy, its patterns checked once at load.
#[derive(Debug, Default)]
struct Grants {
    admin: bool,
    operator: bool,
    call: Vec<String>,
    load: Option<Vec<String>>,
    metrics: bool,
    catalog: bool,
    shared_memory: Vec<String>,
    opencl: bool,
    /// `None`: every device (when `opencl`).
    opencl_devices: Option<Vec<String>>,
}

/// What a principal may do.
#[derive(Clone, Debug)]
enum Access {
    /// No policy configured anywhere: calls, metrics and the catalog; loading only
    /// when the node has no admin token (`admin_open`).
    Open { admin_open: bool },
    /// The node's admin token: everything.
    Admin,
    /// A tenant's policy.
    Granted(Arc<Grants>),
    /// Policies are configured and this caller has none: nothing.
    Nothing,
}

/// An authenticated caller: who it is and what it may do.
#[derive(Clone, Debug)]
pub struct Principal {
    /// Its fairness identity: a configured tenant's, or its connection's.
    pub id: TenantId,
    /// The configured tenant's name (`None`: an anonymous connection, or the admin
    /// token without a tenant).
    pub name: Option<Arc<str>>,
    access: Access,
}

impl Principal {
    /// Whether this caller may do `action`.
    pub fn may(&self, action: Action<'_>) -> bool {
        match &self.access {
            Access::Admin => true,
            Access::Nothing => false,
            Access::Open { admin_open } => match action {
                Action::Call(_)
                | Action::Metrics
                | Action::Catalog
                | Action::SharedMemory(_)
                | Action::OpenCl
                | Action::OpenClDevice { .. } => true,
                Action::Load(_) | Action::Admin => *admin_open,
            },
            Access::Granted(g) => g.may(action),
        }
    }

    /// A caller that may do nothing, counted as `id`: what answers the requests that
    /// need no authentication (health checks) of a caller that failed it.
    pub fn nobody(id: TenantId) -> Principal {
        Principal {
            id,
            name: None,
            access: Access::Nothing,
        }
    }

    /// Whether a policy decides for this caller (so a refusal is the policy's, 403,
    /// rather than a missing admin token's, 401).
    pub fn has_policy(&self) -> bool {
        matches!(self.access, Access::Granted(_) | Access::Nothing)
    }

    /// Why `action` is refused to this caller, the same words on every front end.
    pub fn refusal(&self, action: Action<'_>) -> String {
        format!(
            "tenant `{}` may not {action}: its policy does not allow it",
            self.label()
        )
    }

    /// The name for logs: the tenant's, or `anonymous`.
    pub fn label(&self) -> &str {
        match (&self.name, &self.access) {
            (Some(name), _) => name,
            (None, Access::Admin) => "admin",
            (None, _) => "anonymous",
        }
    }
}

impl Grants {
    fn may(&self, action: Action<'_>) -> bool {
        if self.admin {
            return true;
        }
        match action {
            Action::Call(name) => matches_any(&self.call, name),
            Action::Load(what) => {
                self.operator
                    && match (&self.load, what) {
                        (None, _) | (Some(_), None) => true,
                        (Some(patterns), Some(name)) => matches_any(patterns, name),
                    }
            }
            Action::Metrics => self.metrics || self.operator,
            Action::Catalog => self.catalog || self.operator,
            Action::Admin => false,
            Action::SharedMemory(key) => matches_any(&self.shared_memory, key),
            // Not implied by `operator`: a session runs its own kernels on the host.
            Action::OpenCl => self.opencl,
            Action::OpenClDevice { index, name } => {
                self.opencl
                    && self
                        .opencl_devices
                        .as_ref()
                        .is_none_or(|patterns| super::devices::matches(patterns, index, name))
            }
        }
    }
}

struct Entry {
    name: Arc<str>,
    secret: Secret,
    access: Access,
}

impl Entry {
    #[cfg(test)]
    fn secret_phc(&self) -> Option<String> {
        match &self.secret {
            Secret::Hashed(phc) => Some(phc.clone()),
            _ => None,
        }
    }

    fn principal(&self) -> Principal {
        Principal {
            id: configured_id(&self.name),
            name: Some(Arc::clone(&self.name)),
            access: self.access.clone(),
        }
    }
}

/// The tenants as of one configuration (or reload).
struct Directory {
    generation: u64,
    entries: Vec<Entry>,
    by_name: HashMap<Arc<str>, usize>,
    anonymous: Anonymous,
    /// Any tenant has a policy: deny by default.
    policy_mode: bool,
    admin_token: Option<String>,
}

/// The checked tenants section: what [`Auth::new`] and [`Auth::reload`] take.
pub struct AuthSection {
    pub tenants: Vec<TenantConfig>,
    pub anonymous: Anonymous,
    pub admin_token: Option<String>,
    /// Time a second for checking tokens not seen before (`token_check_ms_per_second_max`).
    pub token_check_budget: std::time::Duration,
}

impl Directory {
    fn build(section: &AuthSection, generation: u64) -> Result<Directory, String> {
        let policy_mode = section.tenants.iter().any(TenantConfig::has_policy);
        let mut entries = Vec::with_capacity(section.tenants.len());
        let mut by_name = HashMap::new();
        for t in &section.tenants {
            let entry = entry_of(t, policy_mode, section.admin_token.is_none())?;
            if by_name
                .insert(Arc::clone(&entry.name), entries.len())
                .is_some()
            {
                return Err(format!("tenant `{}` is configured twice", t.name));
            }
            entries.push(entry);
        }
        check_plain_tokens_distinct(&entries, section.admin_token.as_deref())?;
        if let Anonymous::Tenant(name) = &section.anonymous {
            if !by_name.contains_key(name.as_str()) {
                return Err(format!(
                    "anonymous = \"tenant {name}\" names no configured tenant"
                ));
            }
        }
        Ok(Directory {
            generation,
            entries,
            by_name,
            anonymous: section.anonymous.clone(),
            policy_mode,
            admin_token: section.admin_token.clone(),
        })
    }

    /// What a caller without a policy of its own gets.
    fn default_access(&self) -> Access {
        if self.policy_mode {
            Access::Nothing
        } else {
            Access::Open {
                admin_open: self.admin_token.is_none(),
            }
        }
    }

    fn by_name(&self, name: &str) -> Option<&Entry> {
        self.by_name.get(name).map(|&i| &self.entries[i])
    }

    /// Whether any credential is configured: without one, a bearer token cannot be
    /// wrong, and is ignored as it always was.
    fn has_credentials(&self) -> bool {
        self.admin_token.is_some()
            || self
                .entries
                .iter()
                .any(|e| !matches!(e.secret, Secret::None))
    }
}

fn entry_of(t: &TenantConfig, policy_mode: bool, admin_open: bool) -> Result<Entry, String> {
    let secret = Secret::from_config(
        &format!("tenant `{}`", t.name),
        &t.token,
        t.token_hash.as_deref(),
        "netaccel-node hash-token",
    )?;
    let patterns = t.call.iter().flatten().chain(t.load.iter().flatten());
    for p in patterns.chain(t.shared_memory.iter().flatten()) {
        check_pattern(&format!("tenant `{}`", t.name), p)?;
    }
    if let Some(devices) = &t.opencl_devices {
        super::devices::check(&format!("tenant `{}`", t.name), devices)?;
        if t.opencl != Some(true) {
            return Err(format!(
                "tenant `{}`: opencl_devices grants nothing without opencl = true",
                t.name
            ));
        }
    }
    let access = if policy_mode {
        let roles = t.roles.as_deref().unwrap_or(&[]);
        Access::Granted(Arc::new(Grants {
            admin: roles.contains(&Role::Admin),
            operator: roles.contains(&Role::Operator),
            call: t.call.clone().unwrap_or_default(),
            load: t.load.clone(),
            metrics: t.metrics.unwrap_or(false),
            catalog: t.catalog.unwrap_or(false),
            shared_memory: t.shared_memory.clone().unwrap_or_default(),
            opencl: t.opencl.unwrap_or(false),
            opencl_devices: t.opencl_devices.clone(),
        }))
    } else {
        Access::Open { admin_open }
    };
    Ok(Entry {
        name: Arc::from(t.name.as_str()),
        secret,
        access,
    })
}

/// Two tenants with one plain token (or one with the admin's) would be told apart
/// by the order of the file: refused. (Hashed tokens cannot be compared without the
/// tokens.)
fn check_plain_tokens_distinct(entries: &[Entry], admin: Option<&str>) -> Result<(), String> {
    let mut seen: HashMap<&str, &str> = HashMap::new();
    if let Some(admin) = admin {
        seen.insert(admin, "the admin token");
    }
    for e in entries {
        if let Some(token) = e.secret.plain() {
            if let Some(other) = seen.insert(token, &e.name) {
                return Err(format!(
                    "tenant `{}` has the same token as {}",
                    e.name,
                    if other == "the admin token" {
                        other.to_string()
                    } else {
                        format!("tenant `{other}`")
                    }
                ));
            }
        }
    }
    Ok(())
}

/// The argon2id PHC string of `token`: what `netaccel-node hash-token` prints for
/// `token_hash` (one home for both servers' tokens: the credential crate).
pub use credential::hash_token;

/// Tokens the cache holds at most.
const TOKEN_CACHE_MAX: usize = 4096;

/// Authentication at run time: the current directory and the token cache.
pub struct Auth {
    directory: RwLock<Arc<Directory>>,
    generation: AtomicU64,
    /// What tokens proved lately, by a keyed hash of the token: the tenant (an index
    /// into the directory of the cache's generation), the admin, or nothing.
    cache: VerdictCache<Verdict>,
    /// Bounds the time a second spent checking tokens not seen before (argon2 for
    /// hashed ones: milliseconds each, against every hashed tenant for an unknown
    /// token): a flood of made-up tokens costs at most that and is answered "busy"
    /// beyond it, while every token already checked is answered from the cache.
    budget: CheckBudget,
}

impl Auth {
    /// The authentication of a checked tenants section.
    pub fn new(section: &AuthSection) -> Result<Auth, String> {
        let directory = Directory::build(section, 1)?;
        Ok(Auth {
            directory: RwLock::new(Arc::new(directory)),
            generation: AtomicU64::new(1),
            cache: VerdictCache::new(TOKEN_CACHE_MAX),
            budget: CheckBudget::new(section.token_check_budget),
        })
    }

    /// Replaces the tenants (SIGHUP, the admin route): callers authenticated before
    /// are checked again on their next call. The admin token is kept when `section`
    /// has none. On error nothing changes.
    pub fn reload(&self, section: &AuthSection) -> Result<(), String> {
        let mut current = self.directory.write();
        let generation = current.generation + 1;
        let mut next = Directory::build(section, generation)?;
        if next.admin_token.is_none() {
            next.admin_token = current.admin_token.clone();
        }
        // Tokens proven before stay proven where the tenant kept its secret.
        self.cache.carry_over(generation, |v| match v {
            Verdict::Holder(i) => {
                let old = &current.entries[i];
                let j = *next.by_name.get(&old.name)?;
                (next.entries[j].secret == old.secret).then_some(Verdict::Holder(j))
            }
            Verdict::Admin => (next.admin_token == current.admin_token).then_some(Verdict::Admin),
            Verdict::Unknown => None,
        });
        *current = Arc::new(next);
        self.budget.set(section.token_check_budget);
        self.generation.store(generation, Ordering::Release);
        Ok(())
    }

    /// The generation of the tenants now: it changes with every reload.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The keyed hash a token is cached and remembered under (never the token).
    fn key(&self, token: &str) -> u128 {
        self.cache.key(token)
    }

    fn current(&self) -> Arc<Directory> {
        Arc::clone(&self.directory.read())
    }

    /// Who a caller is that presented `bearer` (or nothing), on a connection whose
    /// own identity is `base`.
    pub fn identify(&self, base: &Base, bearer: Option<&str>) -> Result<Principal, AuthError> {
        let dir = self.current();
        if let Base::Certificate(name) = base {
            // The certificate proved the tenant; an admin token adds nothing a
            // reconfiguration check would not see itself.
            return Ok(certificate_principal(&dir, name));
        }
        match bearer {
            Some(token) if dir.has_credentials() => self.bearer(&dir, token),
            _ => anonymous_principal(&dir, base),
        }
    }

    /// What `token` proves under `dir`: remembered, or checked within the budget.
    fn verdict(&self, dir: &Directory, token: &str) -> Result<Verdict, AuthError> {
        let secrets = dir.entries.iter().map(|e| &e.secret);
        self.cache
            .get_or_check_within(dir.generation, token, &self.budget, || {
                credential::prove(token, dir.admin_token.as_deref(), secrets)
            })
            .ok_or(AuthError::Busy)
    }

    fn bearer(&self, dir: &Directory, token: &str) -> Result<Principal, AuthError> {
        match self.verdict(dir, token)? {
            Verdict::Holder(i) => Ok(dir.entries[i].principal()),
            Verdict::Admin => Ok(Principal {
                id: configured_id(""),
                name: None,
                access: Access::Admin,
            }),
            Verdict::Unknown => Err(AuthError::UnknownToken),
        }
    }

    /// RAC `hello`: the principal of tenant `name` if `token` proves it. The token's
    /// check is the cache's and the budget's, as a bearer token's: a connection that
    /// says `hello` with a known token costs no argon2 check.
    pub fn hello(&self, name: &str, token: Option<&str>) -> Result<Principal, AuthError> {
        let dir = self.current();
        let refused = || AuthError::Hello(name.to_string());
        let (Some(entry), Some(token)) = (dir.by_name(name), token) else {
            return Err(refused());
        };
        match self.verdict(&dir, token)? {
            Verdict::Holder(i) if Arc::ptr_eq(&dir.entries[i].name, &entry.name) => {
                Ok(entry.principal())
            }
            _ => Err(refused()),
        }
    }

    /// Whether the node's admin token is `token`.
    pub fn is_admin_token(&self, token: &str) -> bool {
        self.current()
            .admin_token
            .as_deref()
            .is_some_and(|admin| secret_eq(token, admin))
    }

    /// Whether any tenant has a policy (deny by default).
    pub fn policy_mode(&self) -> bool {
        self.current().policy_mode
    }
}

fn certificate_principal(dir: &Directory, name: &str) -> Principal {
    match dir.by_name(name) {
        Some(entry) => entry.principal(),
        None => Principal {
            id: configured_id(name),
            name: Some(Arc::from(name)),
            access: dir.default_access(),
        },
    }
}

fn anonymous_principal(dir: &Directory, base: &Base) -> Result<Principal, AuthError> {
    let Base::Connection(id) = base else {
        unreachable!("certificates are answered before");
    };
    match &dir.anonymous {
        Anonymous::Refuse => Err(AuthError::Missing),
        Anonymous::Tenant(name) => Ok(dir
            .by_name(name)
            .expect("anonymous tenant checked at load")
            .principal()),
        Anonymous::Connection => Ok(Principal {
            id: *id,
            name: None,
            access: dir.default_access(),
        }),
    }
}

/// A connection's own identity, before any credential: its anonymous tenant, or the
/// tenant its client certificate maps to.
#[derive(Clone, Debug)]
pub enum Base {
    Connection(TenantId),
    Certificate(String),
}

/// What a connection remembers of its caller: the principal its last credential gave,
/// under the token's keyed hash and the generation it was checked in, so that a
/// keep-alive connection that sends the same token again is not checked again.
pub struct Session {
    pub base: Base,
    memo: Option<(u128, u64, Principal)>,
    /// The tenant name and token a RAC `hello` proved, to check them again after a
    /// reload (the only copy of a token the node keeps past a request).
    hello: Option<Box<(String, String)>>,
}

/// The memo key of a request without a token (a keyed hash is never 0 in practice,
/// and a collision would only cost the check it saves).
const NO_TOKEN: u128 = 0;

impl Session {
    pub fn new(base: Base) -> Session {
        Session {
            base,
            memo: None,
            hello: None,
        }
    }

    /// RAC `hello`: binds the connection to tenant `name` if `token` proves it (a
    /// failed `hello` leaves the connection as it was).
    pub fn hello(
        &mut self,
        auth: &Auth,
        name: &str,
        token: Option<&str>,
    ) -> Result<&Principal, AuthError> {
        let generation = auth.generation();
        let principal = auth.hello(name, token)?;
        let token = token.expect("a proven hello has a token");
        self.hello = Some(Box::new((name.to_string(), token.to_string())));
        self.memo = Some((NO_TOKEN, generation, principal));
        Ok(&self.memo.as_ref().expect("just set").2)
    }

    /// The principal of a connection whose calls carry no token (RAC): what its
    /// `hello` proved, or its own identity, checked again after each reload.
    pub fn current(&mut self, auth: &Auth) -> Result<&Principal, AuthError> {
        let generation = auth.generation();
        if !matches!(&self.memo, Some((_, g, _)) if *g == generation) {
            let principal = match &self.hello {
                Some(h) => auth.hello(&h.0, Some(&h.1)),
                None => auth.identify(&self.base, None),
            };
            match principal {
                Ok(p) => self.memo = Some((NO_TOKEN, generation, p)),
                Err(e) => {
                    self.memo = None;
                    return Err(e);
                }
            }
        }
        Ok(&self.memo.as_ref().expect("just checked").2)
    }

    /// The principal the last request identified, if it was not refused.
    pub fn principal(&self) -> Option<&Principal> {
        self.memo.as_ref().map(|(_, _, p)| p)
    }

    /// The connection's own fairness identity (its anonymous tenant or its
    /// certificate's).
    pub fn base_id(&self) -> TenantId {
        match &self.base {
            Base::Connection(id) => *id,
            Base::Certificate(name) => configured_id(name),
        }
    }

    /// The principal of a request that presents `bearer`: remembered when the same
    /// token (or none) came before in this generation, else identified (and then
    /// remembered). Refusals are not remembered.
    pub fn identify(&mut self, auth: &Auth, bearer: Option<&str>) -> Result<&Principal, AuthError> {
        let generation = auth.generation();
        let key = bearer.map_or(NO_TOKEN, |t| auth.key(t));
        let fresh = matches!(&self.memo, Some((k, g, _)) if *k == key && *g == generation);
        if !fresh {
            match auth.identify(&self.base, bearer) {
                Ok(principal) => self.memo = Some((key, generation, principal)),
                Err(e) => {
                    self.memo = None;
                    return Err(e);
                }
            }
        }
        Ok(&self.memo.as_ref().expect("just set").2)
    }
}

// The tests live beside this file, so that it stays within a size a reader can hold.
#[cfg(test)]
mod tests;
