//! The `/v2/...` routes: which document or call a request head asks for. Model routes
//! take an optional `/versions/1` (the only version) as clients send it.

use std::sync::Arc;

use super::parse::RequestHead;
use super::request::{deadline_us, not_allowed, refuse, Route, Wire};
use crate::front::oip::{flag, model_config, model_metadata, node_ready, server_metadata, VERSION};
use crate::node::Node;

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
        "/v2" | "/v2/" | "/v2/health/live" | "/v2/health/ready" => {
            not_allowed(method, path, "GET, HEAD")
        }
        _ => match path.strip_prefix("/v2/models/") {
            Some(rest) => model_route(head, node, rest),
            None => refuse(404, "NOT_FOUND", format!("no route for {path}")),
        },
    }
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
        "" | "config" | "ready" => not_allowed(method, head.path(), "GET, HEAD"),
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
