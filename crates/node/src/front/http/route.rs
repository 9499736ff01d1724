//! Routing: from a parsed request head to what the connection must do, decided before
//! any body byte is read. Everything the handler needs is copied out of the head here,
//! so the read buffer is free again once routing is done.

use accel::params_from_pairs;

use super::parse::RequestHead;
use super::request::{
    bearer_token, deadline_us, forbidden, load_refused, not_allowed, refuse, Request, Route, Wire,
};
use crate::core::tenant::auth::{Action, Principal};
use crate::front::admin;
use crate::node::Node;

const KNOWN_METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT",
];

/// The request `head` of caller `who` (authenticated already) routed, or refused
/// if its policy does not allow it.
pub fn route(head: &RequestHead<'_>, node: &Node, who: &Principal) -> Request {
    // A health check first: it needs no policy (see `required`), and load balancers
    // send it all the time; routed through the general path it cost ~300
    // instructions, 8 % of a keep-alive `/health` (issue 28).
    if head.target == "/health" && matches!(head.method, "GET" | "HEAD") {
        let head_only = head.method == "HEAD";
        return request(head, Route::Health { head_only });
    }
    let refused = required(head.method, head.path()).and_then(|a| node.refusal(who, a));
    let route = match refused {
        Some(message) => forbidden(message),
        None => pick(head, node, who),
    };
    request(head, route)
}

/// A request whose route is decided.
pub fn request(head: &RequestHead<'_>, route: Route) -> Request {
    let accel_id = match &route {
        Route::Call { accel, .. } => Some(accel.descriptor().id),
        _ => None,
    };
    Request {
        route,
        accel_id,
        minor: head.minor_version,
        keep_alive: head.keep_alive,
        framing: head.framing,
        expect_continue: head.expect_continue,
    }
}

fn pick(head: &RequestHead<'_>, node: &Node, who: &Principal) -> Route {
    let method = head.method;
    let path = head.path();
    if !KNOWN_METHODS.contains(&method) {
        return refuse(
            501,
            "NOT_IMPLEMENTED",
            format!("method {method} is not implemented"),
        );
    }
    match path {
        "/health" => match method {
            "GET" | "HEAD" => Route::Health {
                head_only: method == "HEAD",
            },
            _ => not_allowed(method, path, "GET, HEAD"),
        },
        "/metrics" => match method {
            "GET" | "HEAD" => Route::Metrics {
                head_only: method == "HEAD",
            },
            _ => not_allowed(method, path, "GET, HEAD"),
        },
        "/v1/accelerators" => match method {
            "GET" | "HEAD" => Route::Json {
                code: 200,
                body: admin::catalog_json(node),
                head_only: method == "HEAD",
            },
            _ => not_allowed(method, path, "GET, HEAD"),
        },
        "/v1/slots" => match method {
            "GET" | "HEAD" => Route::Json {
                code: 200,
                body: admin::slots_json(node, None),
                head_only: method == "HEAD",
            },
            _ => not_allowed(method, path, "GET, HEAD"),
        },
        _ => {
            if let Some(rest) = path.strip_prefix("/v1/slots/") {
                slot_route(head, node, who, rest)
            } else if let Some(name) = path.strip_prefix("/v1/fn/") {
                call_route(head, node, name)
            } else if let Some(key) = path.strip_prefix("/v1/objects/") {
                object_route(head, key)
            } else if path == "/v2" || path.starts_with("/v2/") {
                super::v2::pick(head, node, who, path)
            } else {
                refuse(404, "NOT_FOUND", format!("no route for {path}"))
            }
        }
    }
}

/// What a policy must allow for a request, decided from its method and path alone
/// (`None`: nothing beyond authentication — health checks, objects and shared memory
/// (per tenant by their own modules), reconfiguration (checked with its token in
/// [`admin::authorize_load`]) and routes that do not exist).
fn required<'p>(method: &str, path: &'p str) -> Option<Action<'p>> {
    match path {
        "/metrics" | "/v2/models/stats" => return Some(Action::Metrics),
        "/v1/accelerators" | "/v1/slots" | "/v2/repository/index" => return Some(Action::Catalog),
        _ => {}
    }
    if let Some(name) = path.strip_prefix("/v1/fn/") {
        return Some(Action::Call(name));
    }
    if path.starts_with("/v1/slots/") {
        return (method != "PUT").then_some(Action::Catalog);
    }
    let rest = path.strip_prefix("/v2/models/")?;
    let (model, tail) = rest.split_once('/').unwrap_or((rest, ""));
    Some(if tail == "infer" || tail.ends_with("/infer") {
        Action::Call(model)
    } else if tail == "stats" || tail.ends_with("/stats") {
        Action::Metrics
    } else {
        Action::Catalog
    })
}

fn slot_route(head: &RequestHead<'_>, node: &Node, who: &Principal, rest: &str) -> Route {
    let slot = match rest.parse::<u16>() {
        Ok(id) if usize::from(id) < node.dispatcher.slots().len() => id,
        _ => return refuse(404, "NOT_FOUND", format!("no slot {rest} on this node")),
    };
    match head.method {
        "GET" | "HEAD" => Route::Json {
            code: 200,
            body: admin::slots_json(node, Some(slot)),
            head_only: head.method == "HEAD",
        },
        "PUT" => {
            let token = bearer_token(head.header("authorization"));
            if let Err(refused) = admin::authorize_load(&node.config, who, token, None) {
                let needs = "reconfiguration needs `Authorization: Bearer <admin token>`";
                return load_refused(&refused, needs, "reconfiguration");
            }
            let text = |name| {
                head.header(name)
                    .map(|v| std::str::from_utf8(v).map_err(|_| format!("{name} is not UTF-8")))
                    .transpose()
            };
            let origin = text("x-netaccel-reconfiguration").and_then(|how| {
                let instance = text("x-netaccel-instance")?;
                admin::Origin::new(&node.config, how, instance)
            });
            match origin {
                Ok(origin) => Route::LoadSlot { slot, origin },
                Err(message) => refuse(400, "BAD_REQUEST", message),
            }
        }
        _ => not_allowed(head.method, head.path(), "GET, HEAD, PUT"),
    }
}

fn call_route(head: &RequestHead<'_>, node: &Node, name: &str) -> Route {
    if head.method != "POST" {
        return not_allowed(head.method, head.path(), "POST");
    }
    let Some(accel) = node.dispatcher.catalog().by_name(name).cloned() else {
        return refuse(
            404,
            "UNKNOWN_ACCELERATOR",
            format!("no accelerator named {name} on this node"),
        );
    };
    let pairs: Vec<(String, String)> =
        form_urlencoded::parse(head.query().unwrap_or("").as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    let params = match params_from_pairs(
        &accel.descriptor().params,
        pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    ) {
        Ok(p) => p,
        Err(e) => return refuse(400, "BAD_REQUEST", e.to_string()),
    };
    if let Err(e) = accel.check(&params, None) {
        return refuse(400, "BAD_REQUEST", e.to_string());
    }
    let deadline_us = match deadline_us(head) {
        Ok(us) => us,
        Err(message) => return refuse(400, "BAD_REQUEST", message),
    };
    Route::Call {
        accel,
        wire: Wire::Raw { params },
        deadline_us,
    }
}

fn object_route(head: &RequestHead<'_>, raw_key: &str) -> Route {
    let key: String = match percent_decode(raw_key) {
        Some(k) => k,
        None => {
            return refuse(
                400,
                "BAD_REQUEST",
                "object key is not valid percent-encoded UTF-8",
            )
        }
    };
    match head.method {
        "GET" | "HEAD" => Route::ObjectGet {
            key,
            head_only: head.method == "HEAD",
            if_none_match: head.header("if-none-match").map(<[u8]>::to_vec),
        },
        "PUT" => Route::ObjectPut { key },
        "DELETE" => Route::ObjectDelete { key },
        _ => not_allowed(head.method, head.path(), "GET, HEAD, PUT, DELETE"),
    }
}

/// The path of object `key` (for `Location`), percent-encoded so that a client that
/// follows it asks for the same key: every byte but unreserved characters and `/` is
/// encoded, so `?`, `#`, `%`, spaces and UTF-8 come back as they were through
/// [`percent_decode`].
pub fn object_path(key: &str) -> String {
    const PREFIX: &str = "/v1/objects/";
    let mut path = String::with_capacity(PREFIX.len() + key.len() * 3);
    path.push_str(PREFIX);
    for &b in key.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            path.push(char::from(b));
        } else {
            path.push_str(&format!("%{b:02X}"));
        }
    }
    path
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_compare_exactly() {
        let config = crate::Config::from_toml("admin_token = \"abc\"").unwrap();
        let bearer_matches = |h: Option<&[u8]>| admin::authorized(&config, bearer_token(h));
        assert!(bearer_matches(Some(b"Bearer abc")));
        assert!(!bearer_matches(Some(b"Bearer abd")));
        assert!(!bearer_matches(Some(b"Bearer ab")));
        assert!(!bearer_matches(Some(b"abc")));
        assert!(!bearer_matches(None));
        assert_eq!(bearer_token(Some(b"Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(Some(b"Bearer \xff")), None);
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b").as_deref(), Some("a b"));
        assert_eq!(percent_decode("plain").as_deref(), Some("plain"));
        assert_eq!(percent_decode("bad%2"), None);
        assert_eq!(percent_decode("bad%zz"), None);
        assert_eq!(percent_decode("%ff"), None);
    }

    #[test]
    fn object_paths_are_encoded_so_that_they_decode_to_the_key() {
        assert_eq!(
            object_path("plain/key-1.bin"),
            "/v1/objects/plain/key-1.bin"
        );
        assert_eq!(object_path("a b?c#d%e"), "/v1/objects/a%20b%3Fc%23d%25e");
        assert_eq!(object_path("é"), "/v1/objects/%C3%A9");
        for key in [
            "a b?c#d%e",
            "ünï/cödé",
            "q?x=1&y=2",
            "100%",
            "+;,=@:!$'()*",
            "~_.-",
        ] {
            let path = object_path(key);
            assert!(path.bytes().all(|b| b.is_ascii_graphic()), "{path}");
            assert!(!path.contains(['?', '#', ' ']), "{path}");
            let encoded = path.strip_prefix("/v1/objects/").unwrap();
            assert_eq!(percent_decode(encoded).as_deref(), Some(key));
        }
    }
}
