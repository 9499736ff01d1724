//! Who may do what at the registry: its principals (nodes, clients, readers, admins),
//! what each route needs, and the audit line of every refusal.
//!
//! Without a credentials file the registry behaves as it always did: reads and the
//! resolver are open, and writes need the admin token (`--token`) when one is set.
//! With `--credentials FILE` every caller is one of the file's principals, proved by
//! its bearer token (kept as an argon2 `token_hash` or a plain `token`, checked by the
//! `credential` crate, the node's own code), or anonymous:
//!
//! | role | may |
//! | --- | --- |
//! | `admin` | everything (`--token` is an admin too) |
//! | `reader` | every read: nodes, functions, instances, the page, metrics, the resolver |
//! | `node` | register, renew and deregister the nodes its `nodes` patterns name (default: its own name); ask for reconfigurations of their slots |
//! | `client` | read the functions its `functions` patterns name (default: all), create and delete their instances, use the resolver |
//!
//! `anonymous = "read"` (the default) leaves reads and the resolver open to callers
//! without a token; `"refuse"` answers them `401` on everything but `/health`. A wrong
//! token is refused (`401`) whatever the route; a principal without the right gets
//! `403` with what it lacks. SIGHUP reads the file again: a removed token is refused
//! at its next request.
//!
//! Not here: token storage and comparison (`credential`), the routes themselves
//! (`crate::http`), and what a reconfiguration may displace (`crate::ops`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use credential::{
    check_pattern, matches_any, secret_eq, CheckBudget, Secret, Verdict, VerdictCache,
};
use parking_lot::RwLock;
use serde::Deserialize;

use crate::error::ApiError;

/// What a principal is for (`role` in the credentials file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Reader,
    Node,
    Client,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Reader => "reader",
            Role::Node => "node",
            Role::Client => "client",
        }
    }
}

/// What a caller without a token may do (`anonymous` in the credentials file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Anonymous {
    /// Reads and the resolver (the default, as without a file).
    #[default]
    Read,
    /// Nothing but `/health`.
    Refuse,
}

/// One `[[principal]]` of the credentials file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalConfig {
    pub name: String,
    pub role: Role,
    #[serde(default)]
    pub token: String,
    pub token_hash: Option<String>,
    /// `node`: the node names it may register (names, or a prefix and a final `*`).
    pub nodes: Option<Vec<String>>,
    /// `client`: the functions it may read and bind (names, or a prefix and `*`).
    pub functions: Option<Vec<String>>,
}

/// The credentials file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialsFile {
    #[serde(default)]
    pub anonymous: Anonymous,
    #[serde(default)]
    pub principal: Vec<PrincipalConfig>,
    /// The nodes' tenants (`[nodes]`: `anonymous`, `[[nodes.tenants]]`,
    /// `[nodes.anonymous_quota]`, the node's own syntax), served at `GET /v1/tenants`
    /// to the nodes that take their tenants from the registry.
    pub nodes: Option<toml::Table>,
}

/// The keys `[nodes]` may have: the tenants part of a node's configuration.
const NODE_TENANT_KEYS: [&str; 3] = ["anonymous", "tenants", "anonymous_quota"];

/// The nodes' tenants as served: checked for their shape here (the node checks the
/// rest, and keeps its tenants when they do not pass), with their revision.
fn node_tenants(nodes: &toml::Table) -> Result<registry_api::NodeTenants, String> {
    for key in nodes.keys() {
        if !NODE_TENANT_KEYS.contains(&key.as_str()) {
            return Err(format!(
                "[nodes] has `{key}`: it holds only {}",
                NODE_TENANT_KEYS.join(", ")
            ));
        }
    }
    let tenants = nodes.get("tenants").map_or(Ok(&[][..]), |t| {
        t.as_array().map(Vec::as_slice).ok_or_else(|| {
            "[nodes] tenants must be an array of tables ([[nodes.tenants]])".to_string()
        })
    })?;
    for t in tenants {
        if !t.get("name").is_some_and(toml::Value::is_str) {
            return Err("every [[nodes.tenants]] has a name".to_string());
        }
    }
    let json = serde_json::to_value(nodes).map_err(|e| format!("[nodes]: {e}"))?;
    let text = json.to_string();
    // FNV-1a: the same revision on every replica and after every restart.
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    Ok(registry_api::NodeTenants {
        revision: format!("{hash:016x}"),
        tenants: json,
    })
}

/// Principals a file may hold at most (each argon2 hash is checked in turn for an
/// unknown token, so the bound is also a bound on the work one request can cause).
pub const PRINCIPALS_MAX: usize = 256;

/// Tokens whose verdict is remembered at most.
const VERDICTS_MAX: usize = 4096;

/// Time a second spent checking tokens not seen before (argon2 for hashed ones,
/// against every principal for an unknown token); beyond it a new token is answered
/// `503` "try again", while tokens already checked are answered from the cache (and
/// stay there across a reload when their principal kept its secret). A quarter of a
/// core: the registry does little else, and nodes must re-register quickly after it
/// restarts.
pub const TOKEN_CHECK_BUDGET: std::time::Duration = std::time::Duration::from_millis(250);

/// Refusals written to the audit log per second at most; the rest are counted.
const AUDIT_PER_S: u64 = 50;

/// A principal as checked.
#[derive(Debug)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    secret: Secret,
    nodes: Vec<String>,
    functions: Vec<String>,
}

impl Principal {
    fn of(c: &PrincipalConfig) -> Result<Principal, String> {
        credential_name(&c.name)?;
        let who = format!("principal `{}`", c.name);
        let secret = Secret::from_config(
            &who,
            &c.token,
            c.token_hash.as_deref(),
            "netaccel-registry hash-token",
        )?;
        if matches!(secret, Secret::None) {
            return Err(format!("{who} has no token or token_hash"));
        }
        let patterns = |field: &str, list: &Option<Vec<String>>, role: Role| {
            if list.is_some() && c.role != role {
                return Err(format!(
                    "{who}: `{field}` applies to role {} only",
                    role.as_str()
                ));
            }
            for p in list.iter().flatten() {
                check_pattern(&who, p)?;
            }
            Ok(list.clone())
        };
        let nodes =
            patterns("nodes", &c.nodes, Role::Node)?.unwrap_or_else(|| vec![c.name.clone()]);
        let functions = patterns("functions", &c.functions, Role::Client)?
            .unwrap_or_else(|| vec!["*".to_string()]);
        Ok(Principal {
            name: c.name.clone(),
            role: c.role,
            secret,
            nodes,
            functions,
        })
    }

    /// Whether this principal may speak for node `name`.
    pub fn names_node(&self, name: &str) -> bool {
        self.role == Role::Admin || (self.role == Role::Node && matches_any(&self.nodes, name))
    }
}

fn credential_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 63
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        return Err(format!(
            "principal name `{name}` is not valid: 1 to 63 letters, digits, `-`, `_` or `.`"
        ));
    }
    Ok(())
}

/// Who made a request: what the route checks see, and what handlers that refine a
/// decision (reconfigurations) find in the request's extensions.
#[derive(Clone, Debug)]
pub enum Caller {
    /// No token (or no credentials configured and no admin token).
    Anonymous,
    /// The admin token (`--token`).
    AdminToken,
    /// A principal of the credentials file.
    Principal(Arc<Principal>),
}

impl Caller {
    /// The name the audit log gives the caller.
    pub fn label(&self) -> String {
        match self {
            Caller::Anonymous => "anonymous".to_string(),
            Caller::AdminToken => "the admin token".to_string(),
            Caller::Principal(p) => format!("{} ({})", p.name, p.role.as_str()),
        }
    }

    /// What a reconfiguration request of node `node` by this caller may do, once the
    /// body names the node (the route's check could not): `Ok(true)` when it may
    /// displace instances (the admin; a node principal for its own nodes), `Ok(false)`
    /// when the rules about instances decide, `Err` for a node principal naming a node
    /// it does not speak for.
    pub fn reconfiguration(&self, node: &str) -> Result<bool, ApiError> {
        if let Caller::Principal(p) = self {
            if p.role == Role::Node && !p.names_node(node) {
                return Err(ApiError::forbidden(format!(
                    "{} may not ask for reconfigurations of node {node}",
                    self.label()
                )));
            }
        }
        Ok(self.may_force_on(node))
    }

    /// Whether the caller may force a reconfiguration of node `node`'s slots (displace
    /// instances): the admin, and a node principal for its own nodes.
    pub fn may_force_on(&self, node: &str) -> bool {
        match self {
            Caller::AdminToken => true,
            Caller::Principal(p) => p.names_node(node),
            Caller::Anonymous => false,
        }
    }
}

/// What a route needs: the pure classification of a request by method and path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Need {
    /// `/health`: anyone.
    Nothing,
    /// A read of the whole cluster: nodes, the function list, the snapshot, the page,
    /// metrics (and unknown paths read with GET).
    ReadCluster,
    /// A read of one function or its instances.
    ReadFunction(String),
    /// The resolver (it writes nothing, whatever the method).
    Resolve,
    /// Register, renew or deregister a node.
    WriteNode(String),
    /// Create, change or delete a function (and unknown paths written).
    WriteFunction(Option<String>),
    /// Create or delete an instance of a function.
    WriteInstance(String),
    /// A reconfiguration request (the node it names is in the body: the handler
    /// checks it).
    Reconfigure,
    /// The nodes' tenants (their tokens' hashes and policies): nodes and admins only.
    ReadTenants,
}

impl Need {
    /// What `method path` needs.
    pub fn of(method: &str, path: &str) -> Need {
        let read = matches!(method, "GET" | "HEAD");
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match (read, parts.as_slice()) {
            (true, ["health"]) => Need::Nothing,
            (_, ["v1", "fn", ..]) => Need::Resolve,
            (false, ["v1", "reconfigurations"]) => Need::Reconfigure,
            (true, ["v1", "tenants"]) => Need::ReadTenants,
            (false, ["v1", "nodes", name]) => Need::WriteNode(name.to_string()),
            (false, ["v1", "functions", f, "instances", ..]) => Need::WriteInstance(f.to_string()),
            (false, ["v1", "functions", f]) => Need::WriteFunction(Some(f.to_string())),
            (false, _) => Need::WriteFunction(None),
            (true, ["v1", "functions", f, ..]) => Need::ReadFunction(f.to_string()),
            (true, _) => Need::ReadCluster,
        }
    }

    fn describe(&self) -> String {
        match self {
            Need::Nothing => "check health".to_string(),
            Need::ReadCluster => "read the cluster's state".to_string(),
            Need::ReadFunction(f) => format!("read function {f}"),
            Need::Resolve => "use the resolver".to_string(),
            Need::WriteNode(n) => format!("register or deregister node {n}"),
            Need::WriteFunction(Some(f)) => format!("change function {f}"),
            Need::WriteFunction(None) => "write here".to_string(),
            Need::WriteInstance(f) => format!("create or delete instances of function {f}"),
            Need::Reconfigure => "ask for reconfigurations".to_string(),
            Need::ReadTenants => "read the nodes' tenants".to_string(),
        }
    }
}

/// The credentials as of one reading of the file.
struct Directory {
    generation: u64,
    /// Whether a credentials file is configured (else the compatible rules).
    file: bool,
    anonymous: Anonymous,
    principals: Vec<Arc<Principal>>,
    admin_token: Option<String>,
    /// `[nodes]` of the file, as served.
    node_tenants: Option<Arc<registry_api::NodeTenants>>,
}

/// The registry's access control at run time.
pub struct Access {
    path: Option<PathBuf>,
    directory: RwLock<Arc<Directory>>,
    cache: VerdictCache<Verdict>,
    budget: CheckBudget,
    audit_second: AtomicU64,
    audit_written: AtomicU64,
    audit_suppressed: AtomicU64,
}

/// Reads and checks a credentials file.
pub fn read_file(path: &Path) -> Result<CredentialsFile, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read credentials {}: {e}", path.display()))?;
    let file: CredentialsFile =
        toml::from_str(&text).map_err(|e| format!("credentials {}: {e}", path.display()))?;
    Ok(file)
}

fn directory(
    file: Option<&CredentialsFile>,
    admin_token: Option<&str>,
    generation: u64,
) -> Result<Directory, String> {
    let mut principals: Vec<Arc<Principal>> = Vec::new();
    // Two holders of one plain token would be told apart by the file's order: refused.
    let mut plain: Vec<(String, String)> = admin_token
        .map(|t| ("the admin token".to_string(), t.to_string()))
        .into_iter()
        .collect();
    for c in file.map(|f| f.principal.as_slice()).unwrap_or_default() {
        if principals.len() == PRINCIPALS_MAX {
            return Err(format!("more than {PRINCIPALS_MAX} principals"));
        }
        if principals.iter().any(|p| p.name == c.name) {
            return Err(format!("principal `{}` is configured twice", c.name));
        }
        let p = Principal::of(c)?;
        if let Some(t) = p.secret.plain() {
            if let Some((other, _)) = plain.iter().find(|(_, o)| secret_eq(t, o)) {
                return Err(format!(
                    "principal `{}` has the same token as {other}",
                    c.name
                ));
            }
            plain.push((format!("principal `{}`", c.name), t.to_string()));
        }
        principals.push(Arc::new(p));
    }
    let node_tenants = match file.and_then(|f| f.nodes.as_ref()) {
        Some(nodes) => Some(Arc::new(node_tenants(nodes)?)),
        None => None,
    };
    Ok(Directory {
        node_tenants,
        generation,
        file: file.is_some(),
        anonymous: file.map(|f| f.anonymous).unwrap_or_default(),
        principals,
        admin_token: admin_token.map(str::to_string),
    })
}

impl Access {
    /// Access from the credentials file at `path` (none: the compatible rules) and the
    /// admin token.
    pub fn new(path: Option<&Path>, admin_token: Option<&str>) -> Result<Access, String> {
        let file = path.map(read_file).transpose()?;
        let dir = directory(file.as_ref(), admin_token, 1)?;
        Ok(Access {
            path: path.map(Path::to_path_buf),
            directory: RwLock::new(Arc::new(dir)),
            cache: VerdictCache::new(VERDICTS_MAX),
            budget: CheckBudget::new(TOKEN_CHECK_BUDGET),
            audit_second: AtomicU64::new(0),
            audit_written: AtomicU64::new(0),
            audit_suppressed: AtomicU64::new(0),
        })
    }

    /// Reads the credentials file again (SIGHUP); on error nothing changes. The
    /// answer is the number of principals now.
    pub fn reload(&self) -> Result<usize, String> {
        let Some(path) = &self.path else {
            return Err("no credentials file is configured".to_string());
        };
        let file = read_file(path)?;
        let mut current = self.directory.write();
        let generation = current.generation + 1;
        let next = directory(Some(&file), current.admin_token.as_deref(), generation)?;
        let count = next.principals.len();
        // Tokens proven before stay proven where the principal kept its secret (its
        // rights may have changed: they are read from the new directory).
        self.cache.carry_over(generation, |v| match v {
            Verdict::Holder(i) => {
                let old = &current.principals[i];
                let j = next.principals.iter().position(|p| p.name == old.name)?;
                (next.principals[j].secret == old.secret).then_some(Verdict::Holder(j))
            }
            Verdict::Admin => Some(Verdict::Admin),
            Verdict::Unknown => None,
        });
        *current = Arc::new(next);
        Ok(count)
    }

    /// Who presented `authorization` (the header's value, if any): a wrong or
    /// malformed token is an error, whatever the route.
    pub fn identify(&self, authorization: Option<&[u8]>) -> Result<Caller, ApiError> {
        let dir = Arc::clone(&self.directory.read());
        let Some(value) = authorization else {
            return Ok(Caller::Anonymous);
        };
        if !dir.file && dir.admin_token.is_none() {
            // Nothing to prove: a token is ignored, as it always was.
            return Ok(Caller::Anonymous);
        }
        let token = std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                ApiError::unauthenticated("the Authorization header is not `Bearer TOKEN`")
            })?;
        let secrets = dir.principals.iter().map(|p| &p.secret);
        let verdict = self
            .cache
            .get_or_check_within(dir.generation, token, &self.budget, || {
                credential::prove(token, dir.admin_token.as_deref(), secrets)
            });
        let Some(verdict) = verdict else {
            return Err(ApiError::unavailable(
                "the registry is checking too many new tokens at the moment; try again in a second",
            ));
        };
        match verdict {
            Verdict::Admin => Ok(Caller::AdminToken),
            Verdict::Holder(i) => Ok(Caller::Principal(Arc::clone(&dir.principals[i]))),
            Verdict::Unknown => Err(ApiError::unauthenticated("the token is not known here")),
        }
    }

    /// Whether `caller` may do what `need` says: `Err` is the answer to send (401 for
    /// a caller that should prove itself, 403 for one that may not).
    pub fn authorize(&self, caller: &Caller, need: &Need) -> Result<(), ApiError> {
        let dir = Arc::clone(&self.directory.read());
        let allowed = match caller {
            Caller::AdminToken => true,
            Caller::Anonymous => anonymous_may(&dir, need),
            Caller::Principal(p) => principal_may(p, need),
        };
        match (allowed, caller) {
            (true, _) => Ok(()),
            (false, Caller::Anonymous) => Err(ApiError::unauthenticated(format!(
                "a request to {} needs a token (Authorization: Bearer TOKEN)",
                need.describe()
            ))),
            (false, _) => Err(ApiError::forbidden(format!(
                "{} may not {}",
                caller.label(),
                need.describe()
            ))),
        }
    }

    /// The nodes' tenants, when the credentials file has them.
    pub fn node_tenants(&self) -> Option<Arc<registry_api::NodeTenants>> {
        self.directory.read().node_tenants.clone()
    }

    /// Writes the audit line of a refusal, one JSON object as the node's audit lines
    /// are (at most `AUDIT_PER_S` a second; the lines left out are counted in the next
    /// one written). Never a token: the caller is named by its principal.
    pub fn audit_refusal(&self, caller: &str, method: &str, path: &str, error: &ApiError) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if self.audit_second.swap(now, Ordering::Relaxed) != now {
            self.audit_written.store(0, Ordering::Relaxed);
        }
        if self.audit_written.fetch_add(1, Ordering::Relaxed) >= AUDIT_PER_S {
            self.audit_suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let suppressed = self.audit_suppressed.swap(0, Ordering::Relaxed);
        let mut line = serde_json::json!({
            "event": if error.status == 401 { "unauthenticated" } else { "forbidden" },
            "caller": caller,
            "action": format!("{method} {path}"),
            "status": error.status,
            "detail": error.message,
        });
        if suppressed > 0 {
            line["refusals_not_logged_before"] = suppressed.into();
        }
        tracing::warn!(target: "netaccel_registry::audit", "{line}");
    }
}

/// The compatible rules without a file: writes need the admin token when one is set
/// (all are open otherwise), except the resolver and reconfiguration requests.
fn anonymous_may(dir: &Directory, need: &Need) -> bool {
    let read = matches!(
        need,
        Need::Nothing | Need::ReadCluster | Need::ReadFunction(_) | Need::Resolve
    );
    if !dir.file {
        return dir.admin_token.is_none() || read || *need == Need::Reconfigure;
    }
    match dir.anonymous {
        Anonymous::Read => read,
        Anonymous::Refuse => *need == Need::Nothing,
    }
}

fn principal_may(p: &Principal, need: &Need) -> bool {
    match (p.role, need) {
        (Role::Admin, _) | (_, Need::Nothing) => true,
        (Role::Reader, Need::ReadCluster | Need::ReadFunction(_) | Need::Resolve) => true,
        (Role::Node, Need::WriteNode(n)) => matches_any(&p.nodes, n),
        (Role::Node, Need::Reconfigure | Need::ReadTenants) => true,
        (Role::Client, Need::Resolve) => true,
        (Role::Client, Need::ReadFunction(f) | Need::WriteInstance(f)) => {
            matches_any(&p.functions, f)
        }
        _ => false,
    }
}

/// The audit line of a reload of the credentials (SIGHUP): `principals` now, or why the
/// file was refused and the previous credentials kept.
pub fn audit_reload(result: &Result<usize, String>) {
    match result {
        Ok(principals) => tracing::info!(
            target: "netaccel_registry::audit",
            "{}",
            serde_json::json!({"event": "credentials_reload", "detail": format!("{principals} principals")})
        ),
        Err(e) => tracing::error!(
            target: "netaccel_registry::audit",
            "{}",
            serde_json::json!({"event": "credentials_reload_failed", "detail": format!("{e}; the previous credentials stay")})
        ),
    }
}

#[cfg(test)]
mod tests;
