//! Control messages: the JSON payload of a kind-3 message.
//!
//! The node parses requests with [`ControlRequest::parse`]; clients build payloads with
//! [`ControlRequest::to_payload`]. The JSON the node answers with (kind 4) is the
//! node's business and is not modelled here.
//!
//! Unlike header decoding, parsing allocates (names and tokens become `String`s); the
//! control plane is rare and its payloads are bounded by [`CONTROL_PAYLOAD_LEN_MAX`].

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::status::Status;
use crate::{CONTROL_PAYLOAD_LEN_MAX, NO_SLOT};

/// A control request, as sent in the payload of a control message.
///
/// Every op may carry a `token`; the node decides which ops need one (`load` when an
/// admin token is configured, `hello` when the tenant has one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum ControlRequest {
    /// `{"op":"catalog"}`: the accelerators the node can load.
    Catalog {
        #[serde(skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// `{"op":"slots"}`: what each slot hosts.
    Slots {
        #[serde(skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// `{"op":"load","slot":N,"accelerator":"NAME"}`: reconfigure one slot.
    Load {
        slot: u16,
        accelerator: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// `{"op":"hello","tenant":"NAME","token":"…"}`: bind the connection to a tenant.
    Hello {
        tenant: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
}

/// Why a control payload was refused. The node answers all of them `BAD_REQUEST`
/// ([`ControlError::status`]) and keeps the connection open: the framing was fine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlError {
    /// The payload is longer than [`CONTROL_PAYLOAD_LEN_MAX`].
    TooLarge { len: usize },
    /// Not a JSON object of the expected shape: invalid UTF-8 or JSON, a field of the
    /// wrong type or out of range, an unknown or duplicated field. The message is
    /// serde_json's, with line and column.
    Json(String),
    /// The object has no `op`.
    MissingOp,
    /// `op` names no known operation.
    UnknownOp(String),
    /// The op requires a field the object lacks.
    MissingField {
        op: &'static str,
        field: &'static str,
    },
    /// The object has a field the op does not take.
    UnexpectedField {
        op: &'static str,
        field: &'static str,
    },
    /// `load` names slot 65535, which results use to mean "no slot".
    ReservedSlot,
}

impl ControlError {
    /// The status a node answers with.
    pub const fn status(&self) -> Status {
        Status::BadRequest
    }
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlError::TooLarge { len } => write!(
                f,
                "control payload of {len} bytes is above the limit of {CONTROL_PAYLOAD_LEN_MAX} bytes"
            ),
            ControlError::Json(message) => write!(f, "invalid control message: {message}"),
            ControlError::MissingOp => f.write_str(
                "control message has no \"op\"; expected one of catalog, slots, load, hello",
            ),
            ControlError::UnknownOp(op) => write!(
                f,
                "unknown control op {op:?}; expected one of catalog, slots, load, hello"
            ),
            ControlError::MissingField { op, field } => {
                write!(f, "control op {op:?} requires field {field:?}")
            }
            ControlError::UnexpectedField { op, field } => {
                write!(f, "control op {op:?} does not take field {field:?}")
            }
            ControlError::ReservedSlot => {
                write!(f, "slot {NO_SLOT} is reserved (it means \"no slot\" in results)")
            }
        }
    }
}

impl std::error::Error for ControlError {}

/// Every field any op takes. Parsed first, then checked against the op, so that each
/// mistake gets its own error instead of serde's generic one for tagged enums.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    op: Option<String>,
    token: Option<String>,
    slot: Option<u16>,
    accelerator: Option<String>,
    tenant: Option<String>,
}

impl ControlRequest {
    /// Parses a control payload.
    pub fn parse(payload: &[u8]) -> Result<ControlRequest, ControlError> {
        if payload.len() > CONTROL_PAYLOAD_LEN_MAX as usize {
            return Err(ControlError::TooLarge { len: payload.len() });
        }
        let raw: RawRequest =
            serde_json::from_slice(payload).map_err(|e| ControlError::Json(e.to_string()))?;
        let RawRequest {
            op,
            token,
            slot,
            accelerator,
            tenant,
        } = raw;
        let op = op.ok_or(ControlError::MissingOp)?;
        let (op, takes_slot, takes_accelerator, takes_tenant) = match op.as_str() {
            "catalog" => ("catalog", false, false, false),
            "slots" => ("slots", false, false, false),
            "load" => ("load", true, true, false),
            "hello" => ("hello", false, false, true),
            _ => return Err(ControlError::UnknownOp(op)),
        };
        for (field, present, taken) in [
            ("slot", slot.is_some(), takes_slot),
            ("accelerator", accelerator.is_some(), takes_accelerator),
            ("tenant", tenant.is_some(), takes_tenant),
        ] {
            if present && !taken {
                return Err(ControlError::UnexpectedField { op, field });
            }
            if taken && !present {
                return Err(ControlError::MissingField { op, field });
            }
        }
        Ok(match op {
            "catalog" => ControlRequest::Catalog { token },
            "slots" => ControlRequest::Slots { token },
            "load" => {
                let slot = slot.expect("presence checked above");
                if slot == NO_SLOT {
                    return Err(ControlError::ReservedSlot);
                }
                let accelerator = accelerator.expect("presence checked above");
                ControlRequest::Load {
                    slot,
                    accelerator,
                    token,
                }
            }
            _ => ControlRequest::Hello {
                tenant: tenant.expect("presence checked above"),
                token,
            },
        })
    }

    /// The JSON payload, `op` first, without a `token` field when there is none.
    pub fn to_payload(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a ControlRequest always serialises")
    }

    /// The op name: `catalog`, `slots`, `load` or `hello`.
    pub fn op(&self) -> &'static str {
        match self {
            ControlRequest::Catalog { .. } => "catalog",
            ControlRequest::Slots { .. } => "slots",
            ControlRequest::Load { .. } => "load",
            ControlRequest::Hello { .. } => "hello",
        }
    }

    /// The token, if one was given.
    pub fn token(&self) -> Option<&str> {
        match self {
            ControlRequest::Catalog { token }
            | ControlRequest::Slots { token }
            | ControlRequest::Load { token, .. }
            | ControlRequest::Hello { token, .. } => token.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(s: &str) -> Result<ControlRequest, ControlError> {
        ControlRequest::parse(s.as_bytes())
    }

    #[test]
    fn parses_every_op_of_the_protocol() {
        assert_eq!(
            parse(r#"{"op":"catalog"}"#),
            Ok(ControlRequest::Catalog { token: None })
        );
        assert_eq!(
            parse(r#"{"op":"slots","token":"t"}"#),
            Ok(ControlRequest::Slots {
                token: Some("t".into())
            })
        );
        assert_eq!(
            parse(r#" {"accelerator":"sobel","slot":2,"op":"load"} "#),
            Ok(ControlRequest::Load {
                slot: 2,
                accelerator: "sobel".into(),
                token: None
            })
        );
        assert_eq!(
            parse(r#"{"op":"hello","tenant":"a\u0062c","token":"s3cret"}"#),
            Ok(ControlRequest::Hello {
                tenant: "abc".into(),
                token: Some("s3cret".into())
            })
        );
    }

    #[test]
    fn payloads_round_trip_with_op_first_and_no_null_token() {
        let load = ControlRequest::Load {
            slot: 1,
            accelerator: "topk".into(),
            token: None,
        };
        assert_eq!(
            load.to_payload(),
            br#"{"op":"load","slot":1,"accelerator":"topk"}"#
        );
        let hello = ControlRequest::Hello {
            tenant: "t\"1".into(),
            token: Some("k".into()),
        };
        assert_eq!(
            hello.to_payload(),
            br#"{"op":"hello","tenant":"t\"1","token":"k"}"#
        );
        for request in [
            load,
            hello,
            ControlRequest::Catalog { token: None },
            ControlRequest::Slots {
                token: Some(String::new()),
            },
        ] {
            assert_eq!(
                ControlRequest::parse(&request.to_payload()),
                Ok(request.clone())
            );
            assert!(request.to_payload().len() <= CONTROL_PAYLOAD_LEN_MAX as usize);
        }
    }

    #[test]
    fn refuses_with_a_reason() {
        assert_eq!(
            parse(r#"{"op":"reboot"}"#),
            Err(ControlError::UnknownOp("reboot".into()))
        );
        assert_eq!(parse(r#"{"token":"x"}"#), Err(ControlError::MissingOp));
        assert_eq!(
            parse(r#"{"op":"load","accelerator":"echo"}"#),
            Err(ControlError::MissingField {
                op: "load",
                field: "slot"
            })
        );
        assert_eq!(
            parse(r#"{"op":"load","slot":0}"#),
            Err(ControlError::MissingField {
                op: "load",
                field: "accelerator"
            })
        );
        assert_eq!(
            parse(r#"{"op":"hello"}"#),
            Err(ControlError::MissingField {
                op: "hello",
                field: "tenant"
            })
        );
        assert_eq!(
            parse(r#"{"op":"catalog","slot":1}"#),
            Err(ControlError::UnexpectedField {
                op: "catalog",
                field: "slot"
            })
        );
        assert_eq!(
            parse(r#"{"op":"load","slot":65535,"accelerator":"echo"}"#),
            Err(ControlError::ReservedSlot)
        );
        for (input, fragment) in [
            ("", "EOF"),
            ("[]", "expected struct"),
            (r#"{"op":"catalog","tokn":"x"}"#, "unknown field `tokn`"),
            (r#"{"op":"catalog","op":"slots"}"#, "duplicate field `op`"),
            (r#"{"op":"load","slot":70000,"accelerator":"echo"}"#, "u16"),
            (r#"{"op":"load","slot":-1,"accelerator":"echo"}"#, "u16"),
            (r#"{"op":1}"#, "expected a string"),
            (r#"{"op":"catalog"} x"#, "trailing characters"),
        ] {
            match parse(input) {
                Err(ControlError::Json(m)) => assert!(m.contains(fragment), "{input}: {m}"),
                other => panic!("{input}: expected a JSON error, got {other:?}"),
            }
        }
        assert!(matches!(
            ControlRequest::parse(b"{\"op\":\"\xff\"}"),
            Err(ControlError::Json(_))
        ));
        let long = format!(r#"{{"op":"hello","tenant":"{}"}}"#, "x".repeat(5000));
        assert_eq!(
            parse(&long),
            Err(ControlError::TooLarge { len: long.len() })
        );
    }

    #[test]
    fn errors_are_bad_request_and_say_what_is_wrong() {
        let e = parse(r#"{"op":"reboot"}"#).unwrap_err();
        assert_eq!(e.status(), Status::BadRequest);
        assert!(e.to_string().contains("\"reboot\""));
        assert!(e.to_string().contains("catalog, slots, load, hello"));
        let e = parse(r#"{"op":"load","accelerator":"echo"}"#).unwrap_err();
        assert_eq!(e.to_string(), "control op \"load\" requires field \"slot\"");
    }

    #[test]
    fn op_and_token_accessors() {
        let r = ControlRequest::Load {
            slot: 0,
            accelerator: "echo".into(),
            token: Some("t".into()),
        };
        assert_eq!((r.op(), r.token()), ("load", Some("t")));
        assert_eq!(ControlRequest::Catalog { token: None }.token(), None);
    }

    fn request() -> impl Strategy<Value = ControlRequest> {
        let token = proptest::option::of(".{0,40}");
        prop_oneof![
            token
                .clone()
                .prop_map(|token| ControlRequest::Catalog { token }),
            token
                .clone()
                .prop_map(|token| ControlRequest::Slots { token }),
            (0..NO_SLOT, ".{0,40}", token.clone()).prop_map(|(slot, accelerator, token)| {
                ControlRequest::Load {
                    slot,
                    accelerator,
                    token,
                }
            }),
            (".{0,40}", token).prop_map(|(tenant, token)| ControlRequest::Hello { tenant, token }),
        ]
    }

    proptest! {
        #[test]
        fn requests_round_trip(r in request()) {
            prop_assert_eq!(ControlRequest::parse(&r.to_payload()), Ok(r));
        }

        #[test]
        fn arbitrary_bytes_are_parsed_or_refused(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            crate::fuzzing::control_json(&bytes);
        }

        #[test]
        fn arbitrary_objects_are_parsed_or_refused(
            fields in prop::collection::vec(
                (prop_oneof![Just("op"), Just("slot"), Just("token"), Just("tenant"), Just("accelerator"), Just("x")],
                 prop_oneof![Just("\"load\"".to_string()), Just("\"hello\"".to_string()), Just("1".to_string()),
                             Just("null".to_string()), "\"[a-z]{0,5}\"", Just("65535".to_string())]),
                0..5),
        ) {
            let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            crate::fuzzing::control_json(format!("{{{}}}", body.join(",")).as_bytes());
        }
    }
}
