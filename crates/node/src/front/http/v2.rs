//! The `/v2/...` routes: which document or call a request head asks for, and the
//! extensions' requests that carry a body ([`Control`], answered by [`control`] once
//! the body is in). Model routes take an optional `/versions/1` (the only version) as
//! clients send it.

use std::sync::Arc;

use rac_proto::Status;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::parse::RequestHead;
use super::request::{
    bearer_token, deadline_us, load_refused, not_allowed, refuse, Control, Route, ShmOp, Wire,
};
use super::response::{error_body, http_code};
use crate::core::tenant::auth::{Action, Principal};
use crate::core::tenant::TenantId;
use crate::front::admin::{self, AdminError};
use crate::front::oip::ensemble::described;
use crate::front::oip::{
    flag, model_config, model_metadata, node_ready, repository, server_metadata, shm, stats,
    VERSION,
};
use crate::node::Node;

/// The body of a system shared memory registration.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RegisterBody {
    key: String,
    #[serde(default)]
    offset: u64,
    byte_size: u64,
}

/// Answers a shared memory request of `tenant` (see `core::shm`). CUDA shared memory
/// is not served: registering is refused, and there is never a region to list or
/// unregister.
fn shm_control(
    node: &Node,
    (tenant, who): (TenantId, Option<&Principal>),
    cuda: bool,
    op: ShmOp,
    body: &[u8],
) -> (u16, Vec<u8>) {
    let bad = |message: String| (400, error_body(&message, "BAD_REQUEST"));
    match (cuda, op) {
        (true, ShmOp::Register(_)) => bad(shm::CUDA_NOT_SUPPORTED.to_string()),
        (true, ShmOp::Status(_)) => (200, b"[]".to_vec()),
        (true, ShmOp::Unregister(_)) => (200, b"{}".to_vec()),
        (false, ShmOp::Status(name)) => match node.shm.status(tenant, name.as_deref()) {
            Ok(list) => (
                200,
                serde_json::to_vec(&list).expect("serialising JSON cannot fail"),
            ),
            Err(message) => bad(message),
        },
        (false, ShmOp::Register(name)) => {
            let parsed: RegisterBody = match serde_json::from_slice(body) {
                Ok(b) => b,
                Err(e) => {
                    return bad(format!(
                        "a registration is {{\"key\": \"/NAME\", \"offset\": N, \"byte_size\": N}}: {e}"
                    ))
                }
            };
            let key = Action::SharedMemory(&parsed.key);
            if let Some(who) = who.filter(|w| !w.may(key)) {
                return (403, error_body(&who.refusal(key), "FORBIDDEN"));
            }
            match node
                .shm
                .register(tenant, &name, &parsed.key, parsed.offset, parsed.byte_size)
            {
                Ok(()) => (200, b"{}".to_vec()),
                Err(message) => bad(message),
            }
        }
        (false, ShmOp::Unregister(name)) => match node.shm.unregister(tenant, name.as_deref()) {
            Ok(()) => (200, b"{}".to_vec()),
            Err(message) => bad(message),
        },
    }
}

/// The route of `/v2/systemsharedmemory/{rest}` and `/v2/cudasharedmemory/{rest}`.
fn shm_route(head: &RequestHead<'_>, cuda: bool, rest: &str) -> Route {
    let region = |r: &str| r.to_string();
    let (op, method) = match rest
        .strip_prefix("region/")
        .and_then(|r| r.rsplit_once('/'))
    {
        _ if rest == "status" => (ShmOp::Status(None), "GET"),
        _ if rest == "unregister" => (ShmOp::Unregister(None), "POST"),
        Some((r, "status")) => (ShmOp::Status(Some(region(r))), "GET"),
        Some((r, "register")) => (ShmOp::Register(region(r)), "POST"),
        Some((r, "unregister")) => (ShmOp::Unregister(Some(region(r))), "POST"),
        _ => return refuse(404, "NOT_FOUND", format!("no route for {}", head.path())),
    };
    if head.method != method {
        let allow = if method == "GET" { "GET" } else { "POST" };
        return not_allowed(head.method, head.path(), allow);
    }
    Route::Control {
        op: Control::Shm { cuda, op },
    }
}

/// The body of the repository's requests: every field optional, as Triton takes them.
#[derive(Default, Deserialize)]
struct RepositoryBody {
    #[serde(default)]
    ready: bool,
    #[serde(default)]
    parameters: Map<String, Value>,
}

/// Answers a [`Control`] request of `tenant` (authenticated as `who`) whose body is
/// `body`: the HTTP status and the JSON document.
pub async fn control(
    node: Arc<Node>,
    (tenant, who): (TenantId, Option<&Principal>),
    op: Control,
    body: &[u8],
) -> (u16, Vec<u8>) {
    match op {
        Control::Shm { cuda, op } => shm_control(&node, (tenant, who), cuda, op, body),
        Control::Index => repository_control(node, None, body).await,
        Control::Load { model } => repository_control(node, Some((model, true)), body).await,
        Control::Unload { model } => repository_control(node, Some((model, false)), body).await,
    }
}

/// The repository's requests: the index (`None`), or a model's load (`true`) or
/// unload.
async fn repository_control(
    node: Arc<Node>,
    op: Option<(String, bool)>,
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
        None => {
            let index = repository::index(&node, body.ready);
            return (
                200,
                serde_json::to_vec(&index).expect("serialising JSON cannot fail"),
            );
        }
        Some((model, true)) => {
            if let Err(e) = repository::refuse_files(body.parameters.keys().map(String::as_str)) {
                return admin_error(e);
            }
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
        Some((model, false)) => repository::unload(Arc::clone(&node), &model).await,
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
fn repository_route(head: &RequestHead<'_>, node: &Node, who: &Principal, rest: &str) -> Route {
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
    if let Control::Load { model } | Control::Unload { model } = &op {
        // Loading and unloading reconfigure slots: the admin token's or a policy's, as
        // PUT /v1/slots.
        let token = bearer_token(head.header("authorization"));
        if let Err(refused) = admin::authorize_load(&node.config, who, token, Some(model)) {
            let needs = "loading and unloading models needs `Authorization: Bearer <admin token>`";
            return load_refused(&refused, needs, "model load/unload");
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

pub fn pick(head: &RequestHead<'_>, node: &Node, who: &Principal, path: &str) -> Route {
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
                repository_route(head, node, who, rest)
            } else if let Some(rest) = path.strip_prefix("/v2/systemsharedmemory/") {
                shm_route(head, false, rest)
            } else if let Some(rest) = path.strip_prefix("/v2/cudasharedmemory/") {
                shm_route(head, true, rest)
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
                    crate::front::oip::unknown_version(name, version),
                );
            }
            after
        }
        None => tail,
    };
    let catalog = node.dispatcher.catalog();
    let Some(accel) = catalog.by_name(name) else {
        return refuse(
            404,
            "UNKNOWN_ACCELERATOR",
            crate::front::oip::unknown_model(name),
        );
    };
    let get = matches!(method, "GET" | "HEAD");
    match tail {
        "" if get => json(
            method,
            described(node, &**accel, model_metadata(&**accel), false),
        ),
        "config" if get => json(
            method,
            described(node, &**accel, model_config(&**accel), true),
        ),
        "ready" if get => {
            let ready = node.dispatcher.serves(accel.descriptor().id);
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
