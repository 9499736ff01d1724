//! The registry's client side: [`RegistryClient`] for its routes (nodes, functions,
//! instances and the long poll), and [`Bound`], a caller that follows its binding.
//!
//! Calls never pass through the registry. A [`Bound`] asks it once for an instance of a
//! function (`POST …/instances`), then calls the node that instance is bound to,
//! directly, over HTTP or RAC. A background thread holds a long poll
//! (`GET …/instances/{id}?after=G&wait_ms=T`) open so that a migration is seen as soon
//! as the registry makes it, not when a call first fails. When a call does fail in a way
//! that says "this binding is stale" — the node cannot be reached, or it answers
//! `UNKNOWN_ACCELERATOR` or `UNAVAILABLE` — the caller waits (bounded) for the registry
//! to give the instance a new binding and retries once on it. Anything else, and a
//! second failure, is returned as it is: a call either returns what the function's
//! accelerator computed or fails, never something else.
//!
//! A call in flight does not wait for a node the registry has given up on: a host that
//! lost power or its network answers nothing, neither result nor reset, and the call
//! would wait for the transport's timeouts (minutes). While a call waits, it checks
//! every [`MOVED_CHECK`] whether the watcher has seen its instance moved to another
//! node; if so it is abandoned and retried there, like a call whose node refused it.
//! That needs the call to run where it can be abandoned: RAC calls are futures, and
//! HTTP calls (blocking `ureq`) run on a helper thread of the [`Bound`], replaced when
//! a call is abandoned (the old one ends with its call's transport timeout).
//!
//! ```no_run
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use netaccel_client::registry::{Bound, BoundOptions, RegistryClient, Via};
//! let registry = RegistryClient::new("http://127.0.0.1:7400", None);
//! let options = BoundOptions { via: Via::Rac, ..BoundOptions::default() };
//! let mut shout = Bound::bind(registry, "shout", options)?;
//! assert_eq!(shout.call(&[], b"hello", None)?.output, b"HELLO");
//! shout.release()?;
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use registry_api::{origin_of, FunctionView, InstanceSpec, NodeView, Patience, Replicas, Try};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::rac::{RacClient, RacError};
use crate::{CallOutput, ClientError, NodeClient};

/// Longest `wait_ms` the watcher asks for: short enough that a dropped [`Bound`]'s
/// thread ends soon after, long enough that an idle caller costs the registry little.
const WATCH_WAIT_MS: u64 = 5_000;
/// Longest wait of one long poll while rebinding: the registry's default bound
/// (`--long-poll-wait-ms-max`), which refuses longer ones; a longer `rebind_wait` polls
/// again.
const REBIND_POLL_WAIT_MAX: Duration = Duration::from_secs(60);
/// Pause after a failed poll (registry restarting, a follower), so the watcher never spins.
const WATCH_RETRY_PAUSE: Duration = Duration::from_millis(500);
/// How often a call in flight looks whether its instance was moved to another node:
/// short beside a lease (when the registry moves instances off a lost node), long
/// beside the cost of a look (a lock and a comparison).
pub const MOVED_CHECK: Duration = Duration::from_millis(20);

/// A registry error: it could not be reached, or it answered with an error status and
/// its JSON `{"error","code"}`.
#[derive(Debug)]
pub enum RegistryError {
    Transport(String),
    Answer {
        http_status: u16,
        code: String,
        message: String,
    },
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistryError::Transport(m) => write!(f, "cannot talk to the registry: {m}"),
            RegistryError::Answer {
                http_status,
                code,
                message,
            } => write!(f, "registry answered {http_status} {code}: {message}"),
        }
    }
}

impl std::error::Error for RegistryError {}

impl From<ClientError> for RegistryError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Transport(m) => RegistryError::Transport(m),
            ClientError::Node {
                http_status,
                code,
                message,
            } => RegistryError::Answer {
                http_status,
                code,
                message,
            },
        }
    }
}

/// Where an instance is bound (the registry's binding document, as the contract
/// declares it).
pub use registry_api::Binding;

/// Registry replicas a client may list.
pub const REGISTRY_REPLICAS_MAX: usize = registry_api::leader::REPLICAS_MAX;

/// A blocking client of the registry's HTTP API.
///
/// It may be given several replicas of a registry that keeps its state in etcd (one
/// leads, the others answer reads and send writers to the leader): a request goes to
/// the replica that answered last, and on to the next one when a replica cannot be
/// reached or answers 503 — a follower's `NOT_LEADER` names the leader in `Location`,
/// which is asked next. So a client outlives the replica it first talked to.
#[derive(Clone)]
pub struct RegistryClient {
    /// The replicas and the one that answered last, shared by clones (a [`Bound`]'s
    /// watcher).
    replicas: Arc<Replicas>,
    /// How long a request keeps going round the replicas while none takes it.
    patience: Patience,
    token: Option<String>,
    agent: ureq::Agent,
}

impl RegistryClient {
    /// `base` is the registry's URL, e.g. `http://127.0.0.1:7400`, or several
    /// replicas' URLs comma-separated (at most [`REGISTRY_REPLICAS_MAX`]; more are
    /// ignored); `token` is its admin token, sent with writes when given.
    pub fn new(base: &str, token: Option<&str>) -> RegistryClient {
        // The read timeout must outlast the longest long poll we ask for.
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(5))
            .timeout_read(Duration::from_secs(90))
            .redirects(0)
            .build();
        let mut bases = Replicas::split(base);
        if bases.is_empty() {
            bases.push(base.trim().to_string());
        }
        RegistryClient {
            replicas: Arc::new(Replicas::new(bases)),
            patience: Patience::ELECTION,
            token: token.map(str::to_string),
            agent,
        }
    }

    /// The replica requests go to first: the one that answered last.
    pub fn base(&self) -> &str {
        self.replicas.base()
    }

    fn request(&self, base: &str, method: &str, path: &str) -> ureq::Request {
        let req = self.agent.request(method, &format!("{base}{path}"));
        match &self.token {
            Some(t) => req.set("Authorization", &format!("Bearer {t}")),
            None => req,
        }
    }

    /// One request, through the contract's leader-following loop
    /// (`registry_api::leader`): each listed replica and each leader a follower names
    /// is asked at most once a round. `None` for an answer without a body.
    fn send<B: Serialize + ?Sized>(
        &self,
        method: &str,
        path: &str,
        body: Option<&B>,
    ) -> Result<Option<Vec<u8>>, RegistryError> {
        let answer = self.replicas.follow(self.patience, |base| {
            self.try_once(base, method, path, body)
        });
        answer.map_err(|failed| {
            failed
                .refusal
                .unwrap_or_else(|| RegistryError::Transport(failed.unreachable.join("; ")))
        })?
    }

    /// One request to the replica at `base`.
    fn try_once<B: Serialize + ?Sized>(
        &self,
        base: &str,
        method: &str,
        path: &str,
        body: Option<&B>,
    ) -> Try<Result<Option<Vec<u8>>, RegistryError>, RegistryError> {
        let req = self.request(base, method, path);
        let result = match body {
            Some(b) => req.send_json(b),
            None => req.call(),
        };
        let leader = match &result {
            Err(ureq::Error::Status(503, resp)) => {
                Some(resp.header("location").and_then(origin_of))
            }
            _ => None,
        };
        let resp = match crate::check(result) {
            Ok(resp) => resp,
            Err(ClientError::Transport(m)) => return Try::Unreachable(m),
            Err(e) => {
                return match leader {
                    // 503: a follower (whose leader is asked next) or a busy replica.
                    Some(leader) => Try::Unavailable {
                        leader,
                        error: e.into(),
                    },
                    None => Try::Answer(Err(e.into())),
                };
            }
        };
        if resp.status() == 204 {
            return Try::Answer(Ok(None));
        }
        Try::Answer(
            crate::read_body(resp)
                .map(|body| (!body.is_empty()).then_some(body))
                .map_err(RegistryError::from),
        )
    }

    /// A request whose answer is a document of type `T`.
    fn doc<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: &str,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, RegistryError> {
        let body = self.send(method, path, body)?.unwrap_or_default();
        serde_json::from_slice(&body).map_err(|e| {
            RegistryError::Transport(format!(
                "registry sent a {method} {path} answer that is not what registry-api.md says: {e}"
            ))
        })
    }

    /// `GET /v1/nodes`: every node, its devices and slots.
    pub fn nodes(&self) -> Result<Vec<NodeView>, RegistryError> {
        self.doc::<_, ()>("GET", "/v1/nodes", None)
    }

    /// `PUT /v1/functions/{name}` with `spec` (a `registry_api::FunctionSpec`, or a document of
    /// its shape): creates or updates the function; answers it.
    pub fn put_function<S: Serialize + ?Sized>(
        &self,
        name: &str,
        spec: &S,
    ) -> Result<FunctionView, RegistryError> {
        self.doc("PUT", &format!("/v1/functions/{name}"), Some(spec))
    }

    pub fn function(&self, name: &str) -> Result<FunctionView, RegistryError> {
        self.doc::<_, ()>("GET", &format!("/v1/functions/{name}"), None)
    }

    pub fn delete_function(&self, name: &str) -> Result<(), RegistryError> {
        self.send::<()>("DELETE", &format!("/v1/functions/{name}"), None)
            .map(|_| ())
    }

    /// Sets a function's number of instances, keeping its accelerator, hash and query.
    pub fn scale_function(
        &self,
        name: &str,
        instances: u32,
    ) -> Result<FunctionView, RegistryError> {
        let f = self.function(name)?;
        self.put_function(name, &f.spec(instances))
    }

    /// `POST /v1/functions/{function}/instances`: one more instance (or, with an `id`
    /// that exists, that instance), allocated.
    pub fn create_instance(
        &self,
        function: &str,
        id: Option<&str>,
        node: Option<&str>,
    ) -> Result<Binding, RegistryError> {
        let spec = InstanceSpec {
            id: id.map(str::to_string),
            node: node.map(str::to_string),
        };
        self.doc(
            "POST",
            &format!("/v1/functions/{function}/instances"),
            Some(&spec),
        )
    }

    /// The instance's binding; with `after = Some((g, wait))`, waits up to `wait` for
    /// one whose generation is not `g` (the long poll) and answers the current one then.
    pub fn instance(
        &self,
        function: &str,
        id: &str,
        after: Option<(u64, Duration)>,
    ) -> Result<Binding, RegistryError> {
        let mut path = format!("/v1/functions/{function}/instances/{id}");
        if let Some((generation, wait)) = after {
            path.push_str(&format!("?after={generation}&wait_ms={}", wait.as_millis()));
        }
        self.doc::<_, ()>("GET", &path, None)
    }

    /// `POST …/instances/{id}/unreachable`: this client could not reach the node of
    /// the instance's binding `generation`; the registry moves the instance to another
    /// node if that binding is still current, and answers the binding then.
    pub fn report_unreachable(
        &self,
        function: &str,
        id: &str,
        generation: u64,
    ) -> Result<Binding, RegistryError> {
        self.doc(
            "POST",
            &format!("/v1/functions/{function}/instances/{id}/unreachable"),
            Some(&registry_api::UnreachableReport { generation }),
        )
    }

    pub fn delete_instance(&self, function: &str, id: &str) -> Result<(), RegistryError> {
        self.send::<()>(
            "DELETE",
            &format!("/v1/functions/{function}/instances/{id}"),
            None,
        )
        .map(|_| ())
    }
}

/// How a [`Bound`] calls its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Http,
    Rac,
    /// HTTP over TLS, at the node's `https` address ([`BoundOptions::tls`] says whom
    /// to trust).
    Https,
    /// RAC over TLS, at the node's `rac_tls` address.
    RacTls,
}

impl Via {
    /// The address of `b`'s node this way of calling goes to.
    pub fn address(self, b: &Binding) -> Option<String> {
        let addr = match self {
            Via::Http => b.http,
            Via::Rac => b.rac,
            Via::Https => b.https,
            Via::RacTls => b.rac_tls,
        };
        addr.map(|a| a.to_string())
    }

    fn name(self) -> &'static str {
        match self {
            Via::Http => "HTTP",
            Via::Rac => "RAC",
            Via::Https => "HTTPS",
            Via::RacTls => "RAC-over-TLS",
        }
    }
}

/// Options of [`Bound::bind`].
#[derive(Debug, Clone)]
pub struct BoundOptions {
    pub via: Via,
    /// Use this instance (created if the registry does not know it) instead of a new one.
    pub instance: Option<String>,
    /// How long a failed call waits for the registry to rebind its instance before it
    /// gives up (a lost node is noticed within one lease, 3 s by default).
    pub rebind_wait: Duration,
    /// Follow migrations with a long poll on a background thread; without it the
    /// binding is only refreshed when a call fails.
    pub watch: bool,
    /// For [`Via::Https`] and [`Via::RacTls`]: the TLS client configuration (trusted
    /// CAs, a client certificate; [`crate::rac::tls_config`]). The node's certificate
    /// must be valid for the host of the address the registry gives.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Call as this tenant: over RAC a `hello` with it (and `token`) opens every
    /// connection to a bound node.
    pub tenant: Option<String>,
    /// The tenant's bearer token: sent with every HTTP call, and in the RAC `hello`.
    pub token: Option<String>,
    /// A call that has had no answer for this long is abandoned as if its node could
    /// not be reached: reported to the registry (which moves the instance to another
    /// node) and retried once on the new binding. For nodes cut off from their clients
    /// while the registry still reaches them: without it such a call waits for the
    /// transport's timeouts. Set it above the longest call the function makes (the
    /// call may run twice). `None` (the default): calls are not abandoned for time.
    pub unreachable_after: Option<Duration>,
}

impl Default for BoundOptions {
    fn default() -> Self {
        BoundOptions {
            via: Via::Http,
            instance: None,
            rebind_wait: Duration::from_secs(10),
            watch: true,
            tls: None,
            tenant: None,
            token: None,
            unreachable_after: None,
        }
    }
}

/// Why a bound call failed.
#[derive(Debug)]
pub enum BoundError {
    /// The registry could not be asked, or refused.
    Registry(RegistryError),
    /// The registry had no usable binding for the instance within the wait.
    NoBinding { instance: String, why: String },
    /// The node failed the call (after the one retry, when the failure allowed one).
    Call {
        node: String,
        attempts: u32,
        error: ClientError,
    },
}

impl fmt::Display for BoundError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BoundError::Registry(e) => e.fmt(f),
            BoundError::NoBinding { instance, why } => {
                write!(f, "instance {instance} has no usable binding: {why}")
            }
            BoundError::Call {
                node,
                attempts,
                error,
            } => write!(
                f,
                "call to node {node} failed (attempt {attempts}): {error}"
            ),
        }
    }
}

impl std::error::Error for BoundError {}

impl From<RegistryError> for BoundError {
    fn from(e: RegistryError) -> Self {
        BoundError::Registry(e)
    }
}

/// A failure that says the binding is stale rather than the call wrong: the node is
/// gone, or it no longer serves the accelerator there (reconfigured, or reconfiguring).
pub fn is_stale_binding(e: &ClientError) -> bool {
    match e {
        ClientError::Transport(_) => true,
        ClientError::Node { code, .. } => code == "UNKNOWN_ACCELERATOR" || code == "UNAVAILABLE",
    }
}

/// The binding the caller and its watcher share.
struct Shared {
    binding: Mutex<Binding>,
    stop: AtomicBool,
}

/// An instance of a function, bound through the registry, that calls its node and
/// follows its binding. See the module documentation.
pub struct Bound {
    registry: RegistryClient,
    function: String,
    accelerator: String,
    options: BoundOptions,
    shared: Arc<Shared>,
    /// HTTP calls when the binding is watched, which can be abandoned ...
    http: Option<HttpWorker>,
    /// ... and when it is not.
    http_direct: Option<(String, NodeClient)>,
    rac: Option<(String, RacClient)>,
    runtime: Option<tokio::runtime::Runtime>,
}

/// One HTTP call for the helper thread.
struct HttpJob {
    accelerator: String,
    params: Vec<(String, String)>,
    payload: Vec<u8>,
    deadline_us: Option<u32>,
}

/// The helper thread that makes a [`Bound`]'s HTTP calls to one node, so that the
/// caller can stop waiting for one (see the module documentation). One call at a time:
/// both channels hold one message.
struct HttpWorker {
    addr: String,
    jobs: SyncSender<HttpJob>,
    results: Receiver<Result<CallOutput, ClientError>>,
}

impl HttpWorker {
    fn start(addr: &str, client: NodeClient) -> Result<HttpWorker, ClientError> {
        let (jobs, job_rx) = mpsc::sync_channel::<HttpJob>(1);
        let (result_tx, results) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("netaccel-bound-http".into())
            .spawn(move || {
                // Ends when the Bound drops the worker (after the call under way).
                for job in job_rx {
                    let out =
                        client.call(&job.accelerator, &job.params, &job.payload, job.deadline_us);
                    if result_tx.send(out).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| ClientError::Transport(format!("cannot start an HTTP thread: {e}")))?;
        Ok(HttpWorker {
            addr: addr.to_string(),
            jobs,
            results,
        })
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        // The watcher ends after its current poll (at most WATCH_WAIT_MS).
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}

impl Bound {
    /// Binds an instance of `function` (the function must exist).
    pub fn bind(
        registry: RegistryClient,
        function: &str,
        options: BoundOptions,
    ) -> Result<Bound, BoundError> {
        let accelerator = registry.function(function)?.accelerator;
        let binding = registry.create_instance(function, options.instance.as_deref(), None)?;
        let shared = Arc::new(Shared {
            binding: Mutex::new(binding),
            stop: AtomicBool::new(false),
        });
        if options.watch {
            let (registry, function, shared) =
                (registry.clone(), function.to_string(), Arc::clone(&shared));
            std::thread::Builder::new()
                .name("netaccel-binding-watch".into())
                .spawn(move || watch(&registry, &function, &shared))
                .map_err(|e| RegistryError::Transport(format!("cannot start the watcher: {e}")))?;
        }
        Ok(Bound {
            registry,
            function: function.to_string(),
            accelerator,
            options,
            shared,
            http: None,
            http_direct: None,
            rac: None,
            runtime: None,
        })
    }

    /// The binding as last seen.
    pub fn binding(&self) -> Binding {
        self.shared.binding.lock().expect("binding lock").clone()
    }

    pub fn accelerator(&self) -> &str {
        &self.accelerator
    }

    /// Changes [`BoundOptions::unreachable_after`] for the calls from now on (for a
    /// client that binds first and learns its bound later, and for the C API).
    pub fn set_unreachable_after(&mut self, after: Option<Duration>) {
        self.options.unreachable_after = after;
    }

    /// Calls the function's accelerator on the bound node; on a stale binding, waits for
    /// the registry to rebind and retries once.
    pub fn call(
        &mut self,
        params: &[(String, String)],
        payload: &[u8],
        deadline_us: Option<u32>,
    ) -> Result<CallOutput, BoundError> {
        let mut binding = self.binding();
        if !binding.is_bound() {
            binding = self.rebind(&binding)?;
        }
        let first = match self.call_node(&binding, params, payload, deadline_us) {
            Ok(out) => return Ok(out),
            Err(e @ ClientError::Transport(_)) => {
                self.report_unreachable(&binding);
                e
            }
            Err(e) if is_stale_binding(&e) => e,
            Err(error) => {
                return Err(BoundError::Call {
                    node: describe(&binding),
                    attempts: 1,
                    error,
                })
            }
        };
        let fresh = self.rebind(&binding).map_err(|e| match e {
            BoundError::NoBinding { instance, why } => BoundError::NoBinding {
                instance,
                why: format!("{why}; the call failed with: {first}"),
            },
            e => e,
        })?;
        self.call_node(&fresh, params, payload, deadline_us)
            .map_err(|error| BoundError::Call {
                node: describe(&fresh),
                attempts: 2,
                error,
            })
    }

    /// Deletes the instance from the registry.
    pub fn release(self) -> Result<(), BoundError> {
        let id = self.binding().id;
        self.registry.delete_instance(&self.function, &id)?;
        Ok(())
    }

    /// Tells the registry this client cannot reach `binding`'s node (unless the
    /// instance has moved off it already) and keeps the binding it answers. A failed
    /// report changes nothing: the rebind waits as it would have.
    fn report_unreachable(&self, binding: &Binding) {
        if !binding.is_bound() || self.moved_off(binding).is_some() {
            return;
        }
        if let Ok(fresh) =
            self.registry
                .report_unreachable(&self.function, &binding.id, binding.generation)
        {
            let mut current = self.shared.binding.lock().expect("binding lock");
            if fresh.generation > current.generation {
                *current = fresh;
            }
        }
    }

    /// A binding other than `stale` that names a slot, from the watcher or the long
    /// poll, within `rebind_wait`. An instance the registry no longer knows is created
    /// again under its id.
    fn rebind(&mut self, stale: &Binding) -> Result<Binding, BoundError> {
        let deadline = Instant::now() + self.options.rebind_wait;
        let mut seen = stale.generation;
        loop {
            let current = self.binding();
            if current.generation != stale.generation && current.is_bound() {
                return Ok(current);
            }
            seen = seen.max(current.generation);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(BoundError::NoBinding {
                    instance: stale.id.clone(),
                    why: format!(
                        "the registry did not move it off {} within {:?}",
                        describe(stale),
                        self.options.rebind_wait
                    ),
                });
            }
            let polled = match self.registry.instance(
                &self.function,
                &stale.id,
                Some((seen, left.min(REBIND_POLL_WAIT_MAX))),
            ) {
                Err(RegistryError::Answer {
                    http_status: 404, ..
                }) => self
                    .registry
                    .create_instance(&self.function, Some(&stale.id), None)?,
                other => other?,
            };
            // The registry's answer is the truth, even when older than what the
            // watcher stored (an instance created again starts a new generation).
            *self.shared.binding.lock().expect("binding lock") = polled;
        }
    }

    /// One call to the node `binding` names, the way [`BoundOptions::via`] says.
    fn call_node(
        &mut self,
        binding: &Binding,
        params: &[(String, String)],
        payload: &[u8],
        deadline_us: Option<u32>,
    ) -> Result<CallOutput, ClientError> {
        let via = self.options.via;
        let tls = match (via, &self.options.tls) {
            (Via::Https | Via::RacTls, None) => {
                return Err(ClientError::Transport(format!(
                    "calling over {} needs a TLS configuration (BoundOptions::tls)",
                    via.name()
                )))
            }
            (_, tls) => tls.clone(),
        };
        let addr = via.address(binding).ok_or_else(|| {
            ClientError::Transport(format!(
                "{} has no {} listener the registry knows of",
                describe(binding),
                via.name()
            ))
        })?;
        match via {
            Via::Http | Via::Https => {
                let token = self.options.token.clone();
                let node_client = || {
                    let client = match (via, &tls) {
                        (Via::Https, Some(tls)) => {
                            NodeClient::with_tls(&format!("https://{addr}"), Arc::clone(tls))
                        }
                        _ => NodeClient::new(&format!("http://{addr}")),
                    };
                    match &token {
                        Some(token) => client.with_token(token.clone()),
                        None => client,
                    }
                };
                if !self.options.watch {
                    // Nothing can tell a call in flight that its instance moved: the
                    // call runs here, without the helper thread.
                    if self.http_direct.as_ref().is_none_or(|(a, _)| *a != addr) {
                        self.http_direct = Some((addr.clone(), node_client()));
                    }
                    let (_, client) = self.http_direct.as_ref().expect("just set");
                    return client.call(&self.accelerator, params, payload, deadline_us);
                }
                if self.http.as_ref().is_none_or(|w| w.addr != addr) {
                    self.http = Some(HttpWorker::start(&addr, node_client())?);
                }
                self.call_http_worker(binding, params, payload, deadline_us)
            }
            Via::Rac | Via::RacTls => {
                self.call_rac(binding, &addr, tls.as_ref(), params, payload, deadline_us)
            }
        }
    }

    /// An HTTP call on the helper thread, abandoned when the watcher sees the instance
    /// moved off `binding`'s node meanwhile.
    fn call_http_worker(
        &mut self,
        binding: &Binding,
        params: &[(String, String)],
        payload: &[u8],
        deadline_us: Option<u32>,
    ) -> Result<CallOutput, ClientError> {
        let worker = self.http.as_ref().expect("a worker for the binding's node");
        let addr = worker.addr.clone();
        let job = HttpJob {
            accelerator: self.accelerator.clone(),
            params: params.to_vec(),
            payload: payload.to_vec(),
            deadline_us,
        };
        let gone = || ClientError::Transport(format!("the HTTP thread for {addr} ended"));
        if worker.jobs.send(job).is_err() {
            self.http = None;
            return Err(gone());
        }
        let started = Instant::now();
        loop {
            let worker = self.http.as_ref().expect("a worker for the binding's node");
            match worker.results.recv_timeout(MOVED_CHECK) {
                Ok(result) => return result,
                Err(RecvTimeoutError::Disconnected) => {
                    self.http = None;
                    return Err(gone());
                }
                Err(RecvTimeoutError::Timeout) => {
                    let abandon = self
                        .moved_off(binding)
                        .or_else(|| no_answer(self.options.unreachable_after, started, binding));
                    if let Some(e) = abandon {
                        // The thread finishes (or times out) alone.
                        self.http = None;
                        return Err(e);
                    }
                }
            }
        }
    }

    /// A RAC call to `addr` (over TLS with `tls`) on the [`Bound`]'s runtime, over a
    /// connection kept for the next call; abandoned when the instance moves meanwhile.
    fn call_rac(
        &mut self,
        binding: &Binding,
        addr: &str,
        tls: Option<&Arc<rustls::ClientConfig>>,
        params: &[(String, String)],
        payload: &[u8],
        deadline_us: Option<u32>,
    ) -> Result<CallOutput, ClientError> {
        let (id, block) = crate::rac::builtin_call(&self.accelerator, params, payload.len())
            .map_err(|m| ClientError::Node {
                http_status: 0,
                code: "BAD_REQUEST".into(),
                message: m,
            })?;
        if self.runtime.is_none() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| ClientError::Transport(format!("no runtime: {e}")))?;
            self.runtime = Some(rt);
        }
        let rt = self.runtime.as_ref().expect("just set");
        let watch = Watch {
            shared: &self.shared,
            via: self.options.via,
            binding,
            give_up: self.options.unreachable_after,
        };
        if self.rac.as_ref().is_none_or(|(a, _)| a != addr) {
            self.rac = None;
            let (tenant, token) = (&self.options.tenant, self.options.token.as_deref());
            let connect = async {
                let client = match tls {
                    // The certificate must name the host the registry gives.
                    Some(tls) => {
                        let host = host_of(addr);
                        RacClient::connect_tls(addr, &host, Arc::clone(tls)).await
                    }
                    None => RacClient::connect(addr).await,
                }?;
                if let Some(tenant) = tenant {
                    client.hello(tenant, token).await?;
                }
                Ok(client)
            };
            let client = rt
                .block_on(unless_moved(connect, &watch))?
                .map_err(rac_to_client)?;
            self.rac = Some((addr.to_string(), client));
        }
        let (_, client) = self.rac.as_ref().expect("just set");
        let call = client.call(id, block, payload.to_vec(), deadline_us.unwrap_or(0));
        let result = match rt.block_on(unless_moved(call, &watch)) {
            Ok(result) => result,
            Err(moved) => {
                // Its answer, if any ever comes, is for nobody.
                self.rac = None;
                return Err(moved);
            }
        };
        match result {
            Ok(out) => Ok(CallOutput {
                output: out.payload,
                queue_ns: out.header.queue_ns,
                exec_ns: out.header.exec_ns,
                slot: out.header.slot(),
            }),
            Err(e) => {
                if e.is_connection_lost() {
                    // A broken connection is not reused: the next call reconnects.
                    self.rac = None;
                }
                Err(rac_to_client(e))
            }
        }
    }
}

impl Bound {
    /// `Some(error)` when the watcher has seen the instance moved off the node
    /// `binding` names (a call to it in flight is then abandoned).
    fn moved_off(&self, binding: &Binding) -> Option<ClientError> {
        moved_off(&self.shared, self.options.via, binding)
    }
}

/// See [`Bound::moved_off`].
fn moved_off(shared: &Shared, via: Via, binding: &Binding) -> Option<ClientError> {
    let current = shared.binding.lock().expect("binding lock");
    let addr = |b: &Binding| via.address(b);
    let moved = current.generation != binding.generation
        && current.is_bound()
        && addr(&current) != addr(binding);
    moved.then(|| {
        ClientError::Transport(format!(
            "the registry moved instance {} from {} to {} while a call was in flight",
            binding.id,
            describe(binding),
            describe(&current)
        ))
    })
}

/// What a call in flight watches for: its instance moved off `binding`'s node, or no
/// answer within `give_up` ([`BoundOptions::unreachable_after`]).
struct Watch<'a> {
    shared: &'a Shared,
    via: Via,
    binding: &'a Binding,
    give_up: Option<Duration>,
}

/// `work`, unless the instance is moved off the watched node first or the node does
/// not answer in time (checked every [`MOVED_CHECK`]).
async fn unless_moved<T>(
    work: impl std::future::Future<Output = T>,
    watch: &Watch<'_>,
) -> Result<T, ClientError> {
    let started = Instant::now();
    tokio::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => return Ok(out),
            _ = tokio::time::sleep(MOVED_CHECK) => {
                let abandon = moved_off(watch.shared, watch.via, watch.binding)
                    .or_else(|| no_answer(watch.give_up, started, watch.binding));
                if let Some(e) = abandon {
                    return Err(e);
                }
            }
        }
    }
}

/// The error of a call that has waited `give_up` since `started` for `binding`'s
/// node, once it has (a transport error: the node counts as unreachable).
fn no_answer(
    give_up: Option<Duration>,
    started: Instant,
    binding: &Binding,
) -> Option<ClientError> {
    let give_up = give_up?;
    (started.elapsed() >= give_up).then(|| {
        ClientError::Transport(format!(
            "no answer from {} within {give_up:?} (BoundOptions::unreachable_after)",
            describe(binding)
        ))
    })
}

/// RAC failures in the client's one error type: a status the node answered (to the
/// call or to the connection) is its answer (`http_status` 0); the rest is `Transport`.
pub fn rac_to_client(e: RacError) -> ClientError {
    match e {
        RacError::Status {
            status, message, ..
        }
        | RacError::Refused { status, message } => ClientError::Node {
            http_status: 0,
            code: status.name().to_string(),
            message,
        },
        e => ClientError::Transport(e.to_string()),
    }
}

/// The host of `HOST:PORT` (an IPv6 address without its brackets), the name a TLS
/// certificate must be valid for.
pub fn host_of(addr: &str) -> String {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}

fn describe(b: &Binding) -> String {
    match (&b.node, &b.http) {
        (Some(n), Some(h)) => format!("{n} ({h})"),
        (Some(n), None) => n.clone(),
        _ => "no node".to_string(),
    }
}

/// The watcher: a long poll at a time, each answer newer than the last stored.
fn watch(registry: &RegistryClient, function: &str, shared: &Shared) {
    while !shared.stop.load(Ordering::Relaxed) {
        let (id, generation) = {
            let b = shared.binding.lock().expect("binding lock");
            (b.id.clone(), b.generation)
        };
        match registry.instance(
            function,
            &id,
            Some((generation, Duration::from_millis(WATCH_WAIT_MS))),
        ) {
            Ok(fresh) => {
                let mut b = shared.binding.lock().expect("binding lock");
                if fresh.id == b.id && fresh.generation > b.generation {
                    *b = fresh;
                }
            }
            Err(_) => std::thread::sleep(WATCH_RETRY_PAUSE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lost_node_or_a_moved_accelerator_is_a_stale_binding() {
        let answer = |code: &str| ClientError::Node {
            http_status: 0,
            code: code.into(),
            message: String::new(),
        };
        assert!(is_stale_binding(&ClientError::Transport("refused".into())));
        assert!(is_stale_binding(&answer("UNKNOWN_ACCELERATOR")));
        assert!(is_stale_binding(&answer("UNAVAILABLE")));
        for code in [
            "BAD_REQUEST",
            "BUSY",
            "DEADLINE_EXCEEDED",
            "INTERNAL",
            "TOO_LARGE",
        ] {
            assert!(!is_stale_binding(&answer(code)), "{code}");
        }
    }

    #[test]
    fn replicas_are_listed_and_a_leader_is_read_from_location() {
        let c = RegistryClient::new("http://a:7400/, http://b:7400", None);
        assert_eq!(c.replicas.bases(), ["http://a:7400", "http://b:7400"]);
        assert_eq!(c.base(), "http://a:7400");
        assert_eq!(
            origin_of("http://10.0.0.1:7401/v1/functions/f").as_deref(),
            Some("http://10.0.0.1:7401")
        );
        assert_eq!(origin_of("/v1/functions/f"), None);
    }

    #[test]
    fn a_binding_to_nothing_is_read_but_not_bound() {
        let read = |doc: serde_json::Value| serde_json::from_value::<Binding>(doc);
        let doc = serde_json::json!({"id": "f-1", "function": "f", "generation": 4,
                         "node": null, "slot": null, "http": null, "rac": null, "device": null});
        let b = read(doc).unwrap();
        assert_eq!(
            (b.id.as_str(), b.generation, b.is_bound()),
            ("f-1", 4, false)
        );
        let doc = serde_json::json!({"id": "f-1", "function": "f", "generation": 5,
                         "node": "a", "slot": 0, "http": "127.0.0.1:1", "rac": "127.0.0.1:2"});
        assert!(read(doc).unwrap().is_bound());
        assert!(read(serde_json::json!({"id": "f-1"})).is_err());
    }
}
