//! The HTTP/1.1 + JSON API (`spec/registry-api.md`), on axum.
//!
//! Handlers only translate: they check the path's names, parse and validate the body
//! (unknown fields refused, a sentence for every problem), call the registry and turn
//! its answer or [`ApiError`] into a response. Operations that write run in their own
//! task so that a client hanging up cannot cancel them half-way. Who may make which
//! request is `crate::auth`'s: the guard identifies the caller, checks the route's
//! need, writes the audit line of a refusal and leaves the caller in the request's
//! extensions for handlers that refine the decision (reconfigurations).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Extension, Path, RawQuery, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{any, get, post, put};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;

use crate::auth::{Access, Caller, Need};
use crate::error::ApiError;
use crate::freshness::CATCH_UP_MAX;
use crate::model::{
    check_name, FunctionSpec, InstanceSpec, NodeRegistration, ReconfigurationRequest,
};
use crate::ops::{Created, Verdict};
use crate::registry::Registry;

/// Shared by every handler.
#[derive(Clone)]
pub struct App {
    pub registry: Arc<Registry>,
    /// Requests in progress (long polls included); past it, 503 at once.
    pub in_flight: Arc<Semaphore>,
    /// Who may do what (`crate::auth`).
    pub access: Arc<Access>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(self.body())).into_response();
        let headers = response.headers_mut();
        if self.status == 401 {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if self.status == 503 {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if let Some(location) = self.location.and_then(|l| HeaderValue::from_str(&l).ok()) {
            headers.insert(header::LOCATION, location);
        }
        response
    }
}

type Answer = Result<Response, ApiError>;

/// The router for `app`.
pub fn router(app: App) -> Router {
    let body_bytes_max = app.registry.config.body_bytes_max;
    Router::new()
        .route("/", get(page))
        .route(
            "/health",
            get(|| async {
                Json(registry_api::Health {
                    status: "ok".into(),
                })
            }),
        )
        .route("/metrics", get(metrics))
        .route("/v1/snapshot", get(snapshot))
        .route("/v1/nodes", get(list_nodes))
        .route("/v1/nodes/{name}", put(put_node).delete(delete_node))
        .route("/v1/functions", get(list_functions))
        .route(
            "/v1/functions/{name}",
            put(put_function).get(get_function).delete(delete_function),
        )
        .route("/v1/functions/{name}/instances", post(post_instance))
        .route(
            "/v1/functions/{name}/instances/{id}",
            get(get_instance).delete(delete_instance),
        )
        .route(
            "/v1/functions/{name}/instances/{id}/unreachable",
            post(report_unreachable),
        )
        .route("/v1/fn/{accelerator}", any(resolve))
        .route("/v1/reconfigurations", post(reconfiguration))
        .route("/v1/tenants", get(node_tenants))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(DefaultBodyLimit::max(body_bytes_max))
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Bounds requests in progress and checks the admin token on writes.
async fn guard(State(app): State<App>, request: Request, next: Next) -> Response {
    let Ok(_permit) = app.in_flight.clone().try_acquire_owned() else {
        return ApiError::unavailable("the registry is answering as many requests as it may")
            .into_response();
    };
    let path = request.uri().path();
    let write = !matches!(*request.method(), Method::GET | Method::HEAD);
    // A replica that led on a lease that may have run out, or whose cache may differ
    // from the store, answers nothing from its cache until it has a fresh copy
    // (Registry::cache_unconfirmed); a leader reloads at once when it can.
    if path.starts_with("/v1/") && !app.registry.cache_usable().await {
        return ApiError::unavailable(
            "this replica led on an election lease that may have run out; it answers again once it has a fresh copy of the state",
        )
        .into_response();
    }
    let caller = match authorize(&app.access, &request) {
        Ok(caller) => caller,
        Err((caller, e)) => {
            app.access
                .audit_refusal(&caller, request.method().as_str(), path, &e);
            return e.into_response();
        }
    };
    let mut request = request;
    request.extensions_mut().insert(caller);
    let path = request.uri().path();
    // Writes go to the leader (the resolver writes nothing: any replica answers it).
    // The planted bug of bench/jepsen (a cargo feature, off by default) lets a
    // follower take writes itself: the history checker must catch it.
    if write
        && !path.starts_with("/v1/fn/")
        && !app.registry.is_leader()
        && !cfg!(feature = "jepsen-plant-follower-acks-writes")
    {
        let location = app.registry.leader_url().map(|url| {
            let target = request
                .uri()
                .path_and_query()
                .map_or(path, |pq| pq.as_str());
            format!("{}{target}", url.trim_end_matches('/'))
        });
        return ApiError::not_leader(location).into_response();
    }
    // A follower confirms an absence against a fresh copy before answering it: the
    // client may have just created the thing on the leader (crate::freshness).
    let confirm_absence =
        (!write && path.starts_with("/v1/") && !app.registry.is_leader()).then(|| {
            (
                request.method().clone(),
                request.uri().clone(),
                request.headers().clone(),
                // The route's match (path parameters) travels in the extensions.
                request.extensions().clone(),
            )
        });
    let response = next.clone().run(request).await;
    match confirm_absence {
        Some((method, uri, headers, extensions))
            if response.status() == StatusCode::NOT_FOUND
                && app.registry.refresh.catch_up(CATCH_UP_MAX).await =>
        {
            let mut again = Request::new(axum::body::Body::empty());
            *again.method_mut() = method;
            *again.uri_mut() = uri;
            *again.headers_mut() = headers;
            *again.extensions_mut() = extensions;
            next.run(again).await
        }
        _ => response,
    }
}

/// The caller of `request` and whether it may make it: on refusal, the caller's
/// label (for the audit line) and the answer.
fn authorize(access: &Access, request: &Request) -> Result<Caller, (String, ApiError)> {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    let caller = access
        .identify(authorization)
        .map_err(|e| ("an unknown token".to_string(), e))?;
    let need = Need::of(request.method().as_str(), request.uri().path());
    access
        .authorize(&caller, &need)
        .map_err(|e| (caller.label(), e))?;
    Ok(caller)
}

/// Runs a writing operation in its own task (see the module documentation).
async fn detached<T: Send + 'static>(
    op: impl Future<Output = Result<T, ApiError>> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::spawn(op)
        .await
        .unwrap_or_else(|e| Err(ApiError::internal(format!("the operation failed: {e}"))))
}

/// Parses a JSON body; an empty body is `T::default()` when `empty` gives one.
fn body<T: DeserializeOwned>(
    bytes: Result<Bytes, BytesRejection>,
    empty: Option<fn() -> T>,
    limit: usize,
) -> Result<T, ApiError> {
    let bytes = bytes.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large(limit),
        _ => ApiError::bad_request(format!("cannot read the body: {e}")),
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        if let Some(default) = empty {
            return Ok(default());
        }
        return Err(ApiError::bad_request(
            "the body is empty; a JSON object is required",
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))
}

fn name(what: &str, value: &str) -> Result<(), ApiError> {
    check_name(what, value).map_err(ApiError::bad_request)
}

fn status(code: StatusCode, value: serde_json::Value) -> Response {
    (code, Json(value)).into_response()
}

// ---- the page and metrics ----

async fn page(State(app): State<App>) -> Html<String> {
    let ceiling = app.registry.config.policy.ceiling.to_string();
    Html(include_str!("page.html").replace("__CEILING__", &ceiling))
}

async fn metrics(State(app): State<App>) -> Response {
    let text = {
        let st = app.registry.lock().await;
        app.registry
            .metrics
            .render(&st, app.registry.long_polls_waiting())
    };
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

// ---- the state as stored, for followers ----

/// `GET /v1/snapshot[?after=REVISION]`: every record as stored, with its revision;
/// `304` when the store is still at `after` (a follower polling, see `follow`).
async fn snapshot(State(app): State<App>, RawQuery(query): RawQuery) -> Answer {
    let mut after = None;
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match key.as_ref() {
            "after" => {
                after = Some(value.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("after={value} is not a non-negative integer"))
                })?)
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter {other:?} (expected after)"
                )))
            }
        }
    }
    match app.registry.snapshot(after).await {
        Some(snapshot) => Ok(Json(snapshot).into_response()),
        None => Ok(StatusCode::NOT_MODIFIED.into_response()),
    }
}

// ---- nodes ----

async fn list_nodes(State(app): State<App>) -> Response {
    Json(app.registry.nodes_json().await).into_response()
}

async fn put_node(
    State(app): State<App>,
    Path(node): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> Answer {
    name("node name", &node)?;
    let reg: NodeRegistration = body(bytes, None, app.registry.config.body_bytes_max)?;
    reg.validate().map_err(ApiError::bad_request)?;
    let registry = app.registry.clone();
    let lease_ms = detached(async move { registry.register_node(&node, &reg).await }).await?;
    Ok(Json(registry_api::LeaseGrant { lease_ms }).into_response())
}

async fn delete_node(State(app): State<App>, Path(node): Path<String>) -> Answer {
    name("node name", &node)?;
    let registry = app.registry.clone();
    detached(async move { registry.deregister_node(&node).await }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ---- functions ----

async fn list_functions(State(app): State<App>) -> Response {
    Json(app.registry.functions_json().await).into_response()
}

async fn put_function(
    State(app): State<App>,
    Path(function): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> Answer {
    name("function name", &function)?;
    let spec: FunctionSpec = body(bytes, None, app.registry.config.body_bytes_max)?;
    spec.validate().map_err(ApiError::bad_request)?;
    let registry = app.registry.clone();
    let doc = detached(async move { registry.put_function(&function, &spec).await }).await?;
    Ok(Json(doc).into_response())
}

async fn get_function(State(app): State<App>, Path(function): Path<String>) -> Answer {
    name("function name", &function)?;
    Ok(Json(app.registry.function_json(&function).await?).into_response())
}

async fn delete_function(State(app): State<App>, Path(function): Path<String>) -> Answer {
    name("function name", &function)?;
    let registry = app.registry.clone();
    detached(async move { registry.delete_function(&function).await }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ---- instances ----

async fn post_instance(
    State(app): State<App>,
    Path(function): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> Answer {
    name("function name", &function)?;
    let spec: InstanceSpec = body(
        bytes,
        Some(InstanceSpec::default),
        app.registry.config.body_bytes_max,
    )?;
    spec.validate().map_err(ApiError::bad_request)?;
    let registry = app.registry.clone();
    match detached(async move { registry.create_instance(&function, &spec).await }).await? {
        Created::New(doc) => Ok(status(StatusCode::CREATED, doc)),
        Created::Existing(doc) => Ok(status(StatusCode::OK, doc)),
    }
}

/// `after` and `wait_ms` of a long poll.
fn poll_query(
    query: Option<&str>,
    wait_max: Duration,
) -> Result<(Option<u64>, Duration), ApiError> {
    let (mut after, mut wait_ms) = (None, None);
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let number = value.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("{key}={value} is not a non-negative integer"))
        });
        match key.as_ref() {
            "after" => after = Some(number?),
            "wait_ms" => wait_ms = Some(number?),
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter {other:?} (expected after and wait_ms)"
                )))
            }
        }
    }
    let wait = Duration::from_millis(wait_ms.unwrap_or(0));
    if wait_ms.is_some() && after.is_none() {
        return Err(ApiError::bad_request(
            "wait_ms needs after=GENERATION: the poll waits for a generation other than that one",
        ));
    }
    if wait > wait_max {
        return Err(ApiError::bad_request(format!(
            "wait_ms may be at most {}",
            wait_max.as_millis()
        )));
    }
    Ok((after, wait))
}

async fn get_instance(
    State(app): State<App>,
    Path((function, id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Answer {
    name("function name", &function)?;
    name("instance id", &id)?;
    let (after, wait) = poll_query(query.as_deref(), app.registry.config.long_poll_wait_max)?;
    let doc = app
        .registry
        .get_instance(&function, &id, after, wait)
        .await?;
    Ok(Json(doc).into_response())
}

async fn delete_instance(
    State(app): State<App>,
    Path((function, id)): Path<(String, String)>,
) -> Answer {
    name("function name", &function)?;
    name("instance id", &id)?;
    let registry = app.registry.clone();
    detached(async move { registry.delete_instance(&function, &id).await }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn report_unreachable(
    State(app): State<App>,
    Path((function, id)): Path<(String, String)>,
    bytes: Result<Bytes, BytesRejection>,
) -> Answer {
    name("function name", &function)?;
    name("instance id", &id)?;
    let report: registry_api::UnreachableReport =
        body(bytes, None, app.registry.config.body_bytes_max)?;
    let registry = app.registry.clone();
    let doc = detached(async move {
        registry
            .report_unreachable(&function, &id, report.generation)
            .await
    })
    .await?;
    Ok(Json(doc).into_response())
}

/// `GET /v1/tenants`: `[nodes]` of the credentials file, for nodes started with
/// `tenants_from_registry` (`304` when `If-None-Match` names its revision).
async fn node_tenants(State(app): State<App>, headers: axum::http::HeaderMap) -> Answer {
    let Some(doc) = app.access.node_tenants() else {
        return Err(ApiError::not_found(
            "this registry serves no tenants: its --credentials file has no [nodes]",
        ));
    };
    let etag = format!("\"{}\"", doc.revision);
    let value = HeaderValue::from_str(&etag).expect("a hex revision is a header value");
    let unchanged = headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes());
    app.registry.metrics.tenants_read(unchanged);
    if unchanged {
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, value)]).into_response());
    }
    Ok(([(header::ETAG, value)], Json(&*doc)).into_response())
}

// ---- resolver and reconfigurations ----

async fn resolve(
    State(app): State<App>,
    Path(accelerator): Path<String>,
    RawQuery(query): RawQuery,
) -> Answer {
    name("accelerator", &accelerator)?;
    let Some(node) = app.registry.resolve(&accelerator).await else {
        return Err(ApiError::not_hosted(&accelerator));
    };
    let mut location = format!("http://{node}/v1/fn/{accelerator}");
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        location.push('?');
        location.push_str(&q);
    }
    let value = HeaderValue::from_str(&location)
        .map_err(|_| ApiError::bad_request("the query string cannot go into a Location header"))?;
    Ok((StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, value)]).into_response())
}

async fn reconfiguration(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    bytes: Result<Bytes, BytesRejection>,
) -> Answer {
    let req: ReconfigurationRequest = body(bytes, None, app.registry.config.body_bytes_max)?;
    req.validate().map_err(ApiError::bad_request)?;
    let admin = caller.reconfiguration(&req.node).inspect_err(|e| {
        app.access
            .audit_refusal(&caller.label(), "POST", "/v1/reconfigurations", e)
    })?;
    let registry = app.registry.clone();
    let verdict =
        detached(async move { registry.validate_reconfiguration(&req, admin).await }).await?;
    let code = match verdict {
        Verdict::Allowed { .. } => StatusCode::OK,
        Verdict::Refused { .. } => StatusCode::CONFLICT,
    };
    Ok((code, Json(verdict.body())).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_poll_queries_are_checked() {
        let max = Duration::from_secs(60);
        assert_eq!(poll_query(None, max), Ok((None, Duration::ZERO)));
        assert_eq!(
            poll_query(Some("after=3&wait_ms=500"), max),
            Ok((Some(3), Duration::from_millis(500)))
        );
        for (q, want) in [
            ("after=x", "after=x"),
            ("wait_ms=5", "needs after"),
            ("after=1&wait_ms=60001", "at most"),
            ("after=1&timeout=3", "unknown query parameter"),
            ("after=-1", "non-negative"),
        ] {
            let err = poll_query(Some(q), max).unwrap_err();
            assert_eq!(err.status, 400);
            assert!(err.message.contains(want), "{q}: {}", err.message);
        }
    }
}
