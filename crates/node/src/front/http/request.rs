//! What a request means to its connection ([`Request`], [`Route`], [`Wire`]), and the
//! refusals every route gives: the vocabulary the `/v1` routes (`route.rs`) and the
//! Open Inference Protocol's `/v2` routes (`v2.rs`) answer in.

use std::sync::Arc;

use accel::{Accelerator, ParamBlock};

use super::parse::{BodyFraming, RequestHead};
use crate::core::deadline::Deadline;
use crate::front::admin;

/// A routed request.
pub struct Request {
    pub route: Route,
    pub minor: u8,
    pub keep_alive: bool,
    pub framing: BodyFraming,
    pub expect_continue: bool,
    /// The accelerator a call names (for counting refusals by accelerator).
    pub accel_id: Option<u16>,
}

pub enum Route {
    Health {
        head_only: bool,
    },
    Metrics {
        head_only: bool,
    },
    /// A JSON document computed at routing time (catalog, slots); for `HEAD`, its
    /// headers only.
    Json {
        code: u16,
        body: Vec<u8>,
        head_only: bool,
    },
    Call {
        accel: Arc<dyn Accelerator>,
        wire: Wire,
        /// `X-Netaccel-Deadline-Us` (0: none), for [`Deadline::after`].
        deadline_us: u32,
    },
    LoadSlot {
        slot: u16,
        /// The instance asking, and whether the registry is to be asked.
        origin: admin::Origin,
    },
    /// An Open Inference Protocol extension's request, answered once its body is in
    /// (`v2::control`).
    Control {
        op: Control,
    },
    ObjectGet {
        key: String,
        head_only: bool,
        if_none_match: Option<Vec<u8>>,
    },
    ObjectPut {
        key: String,
    },
    ObjectDelete {
        key: String,
    },
    /// An error answered without touching anything else.
    Refuse {
        code: u16,
        code_name: &'static str,
        message: String,
        allow: Option<&'static str>,
    },
}

/// How a call's params, payload and answer travel: the same call, two encodings.
pub enum Wire {
    /// `/v1/fn/{name}`: params in the query string, the body is the payload, the
    /// answer's body is the output.
    Raw { params: ParamBlock },
    /// `/v2/models/{m}/infer`: params and tensors in the body (see `v2::infer`);
    /// `json_len` is `Inference-Header-Content-Length` when binary data follows.
    V2 { json_len: Option<usize> },
}

pub fn refuse(code: u16, code_name: &'static str, message: impl Into<String>) -> Route {
    Route::Refuse {
        code,
        code_name,
        message: message.into(),
        allow: None,
    }
}

/// An authenticated caller's request its policy does not allow: `403 FORBIDDEN`.
pub fn forbidden(message: impl Into<String>) -> Route {
    refuse(403, "FORBIDDEN", message)
}

/// A refused reconfiguration: `401` for the admin token, `403` for a policy.
pub fn load_refused(refused: &admin::LoadRefusal, needs: &str, operation: &str) -> Route {
    let message = refused.message(needs, operation);
    if refused.is_forbidden() {
        forbidden(message)
    } else {
        refuse(401, "UNAUTHORIZED", message)
    }
}

pub fn not_allowed(method: &str, path: &str, allow: &'static str) -> Route {
    Route::Refuse {
        code: 405,
        code_name: "METHOD_NOT_ALLOWED",
        message: format!("{method} is not allowed on {path}; use {allow}"),
        allow: Some(allow),
    }
}

/// `X-Netaccel-Deadline-Us`, 0 when absent.
pub fn deadline_us(head: &RequestHead<'_>) -> Result<u32, String> {
    match head
        .header("x-netaccel-deadline-us")
        .map(Deadline::parse_http)
    {
        None => Ok(0),
        Some(result) => result.map_err(String::from),
    }
}

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
    /// `/v2/systemsharedmemory/...` (`cuda`: `/v2/cudasharedmemory/...`).
    Shm { cuda: bool, op: ShmOp },
}

/// A shared memory request: on every region of the tenant (`None`) or one.
#[derive(Debug, PartialEq, Eq)]
pub enum ShmOp {
    Status(Option<String>),
    /// Body `{"key", "offset", "byte_size"}`.
    Register(String),
    Unregister(Option<String>),
}

/// The token of an `Authorization: Bearer <token>` header, if that is what it holds.
pub fn bearer_token(header: Option<&[u8]>) -> Option<&str> {
    header
        .and_then(|h| h.strip_prefix(b"Bearer "))
        .and_then(|given| std::str::from_utf8(given).ok())
}
