//! The error body every failed request answers, and the health document.

use serde::{Deserialize, Serialize};

/// `{"error": "…", "code": "…"}`: a sentence a person can act on and a code a program
/// can match (`NOT_LEADER`, `NOT_FOUND`, `NO_DEVICE`, …). A follower's `NOT_LEADER`
/// also names the leader in the `Location` header, never in the body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    pub code: String,
}

/// `GET /health`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    pub status: String,
}
