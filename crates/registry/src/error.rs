//! The one error type of the registry's API: a status, a code a program can match and
//! a sentence a person can act on, sent as `{"error":"…","code":"…"}`.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    /// For `NOT_LEADER`: the leader's URL, sent as `Location`.
    pub location: Option<String>,
}

impl ApiError {
    fn new(status: u16, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            location: None,
        }
    }

    /// 503 from a follower asked to write: `leader` (its advertised URL, when known)
    /// takes writes, and goes into `Location` with the request's path.
    pub fn not_leader(leader: Option<String>) -> ApiError {
        let message = match &leader {
            Some(url) => format!("this registry replica does not lead; write to {url}"),
            None => "this registry replica does not lead and no leader is elected yet".into(),
        };
        ApiError {
            location: leader,
            ..ApiError::new(503, "NOT_LEADER", message)
        }
    }

    /// 400: the request is malformed or names something invalid.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BAD_REQUEST", message)
    }

    /// 401 with the reason (no token where one is needed, an unknown token).
    pub fn unauthenticated(message: impl Into<String>) -> ApiError {
        ApiError::new(401, "UNAUTHORIZED", message)
    }

    /// 403: the caller proved who it is, and that one may not do this.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(403, "FORBIDDEN", message)
    }

    /// 409: the request conflicts with how the thing is held (a pinned instance).
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(409, "CONFLICT", message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(404, "NOT_FOUND", message)
    }

    /// 405, for a known path.
    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            405,
            "METHOD_NOT_ALLOWED",
            "this path does not take that method",
        )
    }

    /// 409: no slot is compatible and none can be reconfigured.
    pub fn no_device(message: impl Into<String>) -> ApiError {
        ApiError::new(409, "NO_DEVICE", message)
    }

    /// 503 from the resolver: no ready node hosts the accelerator (a state that
    /// passes, hence 503 and not 404, with the code that says why).
    pub fn not_hosted(accelerator: &str) -> ApiError {
        ApiError::new(
            503,
            "NO_DEVICE",
            format!("no ready node hosts accelerator {accelerator}"),
        )
    }

    /// 413: a body over the configured bound.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            413,
            "TOO_LARGE",
            format!("the request body is larger than {limit} bytes"),
        )
    }

    /// 503: the store refused a write, or nothing can serve the request now.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(503, "UNAVAILABLE", message)
    }

    /// 507: a configured bound on nodes, functions or instances is reached.
    pub fn full(message: impl Into<String>) -> ApiError {
        ApiError::new(507, "INSUFFICIENT_STORAGE", message)
    }

    /// 500: a bug (an operation panicked); the message says so.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "INTERNAL", message)
    }

    /// The body sent with it.
    pub fn body(&self) -> registry_api::ErrorBody {
        registry_api::ErrorBody {
            error: self.message.clone(),
            code: self.code.to_string(),
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}
