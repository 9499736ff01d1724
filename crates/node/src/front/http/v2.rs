//! The `/v2/...` routes: which document or call a request head asks for, and the
//! extensions' requests that carry a body ([`Control`], answered by [`control`] once
//! the body is in). Model routes take an optional `/versions/1` (the only version) as
//! clients send it.

use std::sync::Arc;

use rac_proto::Status;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::parse::RequestHead;
use super::request::{deadline_us, not_allowed, refuse, Route, Wire};
use super::response::{error_body, http_code};
use super::route::bearer_token;
use crate::core::tenant::TenantId;
use crate::front::admin::{self, AdminError};
use crate::front::oip::{
    flag, model_config, model_metadata, node_ready, repository, server_metadata, stats, VERSION,
};
use crate::node::Node;

/// An extension's request whose body is read before it is answered.
#[derive(Debug, PartialEq, Eq)]
pub enum Control {
    /// `POST /v2/repository/index`, body `{"ready": bool}` (optional).
    Index,
    /// `POST /v2/repository/models/{m}/load`, body `{"parameters": {"config": "…"}}`
    /// (optional).
    Load { model: String },
    /// `POST /v2/repository/models/{m}/unload`.
    Unload { model: String },
}

/// The body of the repository's requests: every field optional, as Triton takes them.
#[derive(Default, Deserialize)]
struct RepositoryBody {
    #[serde(default)]
    ready: bool,
    #[serde(default)]
    parameters: Map<String, Value>,
}

/// Answers a [`Control`] request whose body is `body`: the HTTP status and the JSON
/// document.
pub async fn control(
    node: Arc<Node>,
    _tenant: TenantId,
    op: Control,
    body: &[u8],
) -> (u16, Vec<u8>) {
    let parsed: Result<RepositoryBody, _> = if body.iter().all(u8::is_ascii_whitespace) {
        Ok(RepositoryBody::default())
    } else {
        serde_json::from_slice(body)
    };
    let body = match parsed {
        Ok(b) => b,
        Err(e) => {
            let message = format!("the request body is not the protocol's JSON object: {e}");
            return (400, error_body(&message, "BAD_REQUEST"));
        }
    };
    let done = match op {
        Control::Index => {
            let index = repository::index(&node, body.ready);
            return (
                200,
                serde_json::to_vec(&index).expect("serialising JSON cannot fail"),
            );
        }
        Control::Load { model } => {
            let config = match body.parameters.get("config") {
                None => None,
                Some(Value::String(text)) => Some(text.as_str()),
                Some(_) => {
                    let message =
                        "parameters.config must be a string: the model configuration as JSON";
                    return (400, error_body(message, "BAD_REQUEST"));
                }
            };
            repository::load(Arc::clone(&node), &model, config).await
        }
        Control::Unload { model } => repository::unload(Arc::clone(&node), &model).await,
    };
    match done {
        Ok(_) => (200, b"{}".to_vec()),
        Err(e) => admin_error(e),
    }
}

fn admin_error(e: AdminError) -> (u16, Vec<u8>) {
    let (code, name) = if e.conflict {
        (409, "CONFLICT")
    } else {
        (http_code(e.status), e.status.name())
    };
    debug_assert!(e.status != Status::Ok, "an error is not OK");
    (code, error_body(&e.message, name))
}

/// The route of `/v2/repository/{rest}`.
fn repository_route(head: &RequestHead<'_>, node: &Node, rest: &str) -> Route {
    let op = match rest
        .strip_prefix("models/")
        .and_then(|m| m.rsplit_once('/'))
    {
        _ if rest == "index" => Control::Index,
        Some((model, "load")) => Control::Load {
            model: model.to_string(),
        },
        Some((model, "unload")) => Control::Unload {
            model: model.to_string(),
        },
        _ => return refuse(404, "NOT_FOUND", format!("no route for {}", head.path())),
    };
    if head.method != "POST" {
        return not_allowed(head.method, head.path(), "POST");
    }
    if op != Control::Index {
        // Loading and unloading reconfigure slots: the admin token's, as PUT /v1/slots.
        let token = bearer_token(head.header("authorization"));
        if let Err(refused) = admin::check_token(&node.config, token) {
            let needs = "loading and unloading models needs `Authorization: Bearer <admin token>`";
            return refuse(
                401,
                "UNAUTHORIZED",
                refused.message(needs, "model load/unload"),
            );
        }
    }
    Route::Control { op }
}

fn json(method: &str, body: Vec<u8>) -> Route {
    json_with(method, 200, body)
}

fn json_with(method: &str, code: u16, body: Vec<u8>) -> Route {
    Route::Json {
        code,
        body,
        head_only: method == "HEAD",
    }
}

pub fn pick(head: &RequestHead<'_>, node: &Node, path: &str) -> Route {
    let method = head.method;
    let get = matches!(method, "GET" | "HEAD");
    match path {
        "/v2" | "/v2/" if get => json(method, server_metadata()),
        "/v2/health/live" if get => json(method, flag("live", true)),
        "/v2/health/ready" if get => {
            let ready = node_ready(node);
            json_with(method, if ready { 200 } else { 503 }, flag("ready", ready))
        }
        "/v2/models/stats" if get => json(method, all_stats(node)),
        "/v2" | "/v2/" | "/v2/health/live" | "/v2/health/ready" | "/v2/models/stats" => {
            not_allowed(method, path, "GET, HEAD")
        }
        _ => {
            if let Some(rest) = path.strip_prefix("/v2/models/") {
                model_route(head, node, rest)
            } else if let Some(rest) = path.strip_prefix("/v2/repository/") {
                repository_route(head, node, rest)
            } else {
                refuse(404, "NOT_FOUND", format!("no route for {path}"))
            }
        }
    }
}

/// `GET /v2/models/stats`: every model's statistics.
fn all_stats(node: &Node) -> Vec<u8> {
    stats::select(node, "", "")
        .expect("every model of the catalog has statistics")
        .to_json()
}

fn model_route(head: &RequestHead<'_>, node: &Node, rest: &str) -> Route {
    let method = head.method;
    let (name, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let tail = match tail.strip_prefix("versions/") {
        Some(v) => {
            let (version, after) = v.split_once('/').unwrap_or((v, ""));
            if version != VERSION {
                return refuse(
                    404,
                    "NOT_FOUND",
                    format!("model {name} has no version {version}; its only version is {VERSION}"),
                );
            }
            after
        }
        None => tail,
    };
    let Some(accel) = node.dispatcher.catalog().by_name(name) else {
        return refuse(404, "UNKNOWN_ACCELERATOR", format!("unknown model {name}"));
    };
    let get = matches!(method, "GET" | "HEAD");
    match tail {
        "" if get => json(method, model_metadata(&**accel)),
        "config" if get => json(method, model_config(&**accel)),
        "ready" if get => {
            let ready = !node
                .dispatcher
                .slots_hosting(accel.descriptor().id)
                .is_empty();
            json_with(
                method,
                if ready { 200 } else { 503 },
                serde_json::to_vec(&serde_json::json!({ "name": name, "ready": ready }))
                    .expect("serialising JSON cannot fail"),
            )
        }
        "stats" if get => match stats::select(node, name, "") {
            Ok(doc) => json(method, doc.to_json()),
            Err(message) => refuse(404, "NOT_FOUND", message),
        },
        "" | "config" | "ready" | "stats" => not_allowed(method, head.path(), "GET, HEAD"),
        "infer" if method == "POST" => {
            let json_len = match head.header("inference-header-content-length") {
                None => None,
                Some(v) => match std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                {
                    Some(n) => Some(n),
                    None => {
                        return refuse(
                            400,
                            "BAD_REQUEST",
                            "Inference-Header-Content-Length is not a byte count",
                        )
                    }
                },
            };
            match deadline_us(head) {
                Ok(deadline_us) => Route::Call {
                    accel: Arc::clone(accel),
                    wire: Wire::V2 { json_len },
                    deadline_us,
                },
                Err(message) => refuse(400, "BAD_REQUEST", message),
            }
        }
        "infer" => not_allowed(method, head.path(), "POST"),
        _ => refuse(404, "NOT_FOUND", format!("no route for {}", head.path())),
    }
}
