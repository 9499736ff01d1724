//! Accelerators: the kernels a netaccel slot runs, and how they are described.
//!
//! An *accelerator* turns `(params, payload bytes)` into output bytes, or refuses with
//! a reason. This crate owns three things:
//!
//! * the [`Accelerator`] trait every backend implements (CPU kernels here; OpenCL or an
//!   RTL simulator elsewhere), with a cheap up-front check ([`Accelerator::check`]) so a
//!   front end can refuse a bad call before it has read the payload;
//! * the *parameter block*: 44 little-endian bytes, the same layout RAC carries on the
//!   wire, and the way HTTP query strings are turned into it ([`params_from_pairs`]);
//! * the [`Catalog`] of built-in accelerators (`echo`, `to_uppercase`, `topk`, `logit`,
//!   `minmax`, `sobel`, `matmul`), whose exact semantics live in `docs/accelerators.md`.
//!
//! It knows nothing about sockets, slots or queues: the node wires those. Kernels never
//! allocate per element; they write into an output buffer the caller lends them.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

mod kernels;
pub mod reference;

pub use kernels::{builtins, fault_injection, FAULT_ID};

/// Size of the parameter block in bytes (the `params` field of a RAC call).
pub const PARAMS_LEN: usize = 44;

/// Accelerator parameters in their wire layout: little-endian, zero-padded.
pub type ParamBlock = [u8; PARAMS_LEN];

/// Type of one parameter inside a [`ParamBlock`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    U32,
    F32,
}

impl ParamType {
    pub fn as_str(self) -> &'static str {
        match self {
            ParamType::U32 => "u32",
            ParamType::F32 => "f32",
        }
    }
}

/// A parameter value, as given by a default or read from a block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ParamValue {
    U32(u32),
    F32(f32),
}

/// Where a parameter lives in the block and what it means.
#[derive(Clone, Copy, Debug)]
pub struct ParamSpec {
    /// Query-string name (`k`, `width`, …).
    pub name: &'static str,
    pub ty: ParamType,
    /// Byte offset inside the [`ParamBlock`].
    pub offset: usize,
    /// Value used when the caller gives none; `None` means the parameter is required.
    pub default: Option<ParamValue>,
}

/// What a catalog lists about an accelerator.
#[derive(Clone, Debug)]
pub struct Descriptor {
    /// Numeric id (RAC accelerator id). Built-ins use 1..=7.
    pub id: u16,
    pub name: String,
    /// Hex digest identifying the kernel image (same image, same hash).
    pub hash: String,
    pub params: Vec<ParamSpec>,
}

/// Why a call was refused or failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// Params or payload do not fit the accelerator (RAC `BAD_REQUEST`, HTTP 400).
    BadRequest(String),
    /// The accelerator itself failed (RAC `INTERNAL`, HTTP 500).
    Internal(String),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::BadRequest(m) | CallError::Internal(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for CallError {}

/// Shorthand for a `BadRequest` result.
pub fn bad<T>(msg: impl Into<String>) -> Result<T, CallError> {
    Err(CallError::BadRequest(msg.into()))
}

/// A kernel that runs one call to completion.
///
/// Implementations must be deterministic functions of `(params, input)` and must not
/// keep state between calls: a slot may hand consecutive calls from different tenants
/// to the same instance.
pub trait Accelerator: Send + Sync + 'static {
    fn descriptor(&self) -> &Descriptor;

    /// Checks params, and the payload length when known, without touching the payload.
    /// Front ends call this before reading a body (`Expect: 100-continue`) or before
    /// reserving reassembly memory. `run` repeats whatever checks need the payload.
    fn check(&self, params: &ParamBlock, payload_len: Option<usize>) -> Result<(), CallError>;

    /// Rough count of elementary operations the call costs. The node uses it to decide
    /// whether a call is cheap enough to run on the network thread when its slot is idle.
    fn work_estimate(&self, params: &ParamBlock, payload_len: usize) -> u64;

    /// Runs the call. `out` is cleared by the callee and receives the output.
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError>;
}

/// Reads a `u32` parameter at `offset`.
pub fn param_u32(params: &ParamBlock, offset: usize) -> u32 {
    u32::from_le_bytes(params[offset..offset + 4].try_into().expect("4 bytes"))
}

/// Reads an `f32` parameter at `offset`.
pub fn param_f32(params: &ParamBlock, offset: usize) -> f32 {
    f32::from_le_bytes(params[offset..offset + 4].try_into().expect("4 bytes"))
}

fn put_value(block: &mut ParamBlock, spec: &ParamSpec, value: ParamValue) {
    let bytes = match value {
        ParamValue::U32(v) => v.to_le_bytes(),
        ParamValue::F32(v) => v.to_le_bytes(),
    };
    block[spec.offset..spec.offset + 4].copy_from_slice(&bytes);
}

/// Builds a parameter block from `name=value` pairs (an HTTP query string, a CLI's
/// `-p k=10`). Unknown names, unparsable values, repeated names and missing required
/// parameters are `BadRequest` with a sentence saying which.
pub fn params_from_pairs<'a>(
    specs: &[ParamSpec],
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<ParamBlock, CallError> {
    let mut block = [0u8; PARAMS_LEN];
    let mut seen = 0u64;
    for (name, raw) in pairs {
        let Some(index) = specs.iter().position(|s| s.name == name) else {
            let known: Vec<&str> = specs.iter().map(|s| s.name).collect();
            return if known.is_empty() {
                bad(format!(
                    "unknown parameter `{name}`: this accelerator takes none"
                ))
            } else {
                bad(format!(
                    "unknown parameter `{name}`: this accelerator takes {}",
                    known.join(", ")
                ))
            };
        };
        if seen & (1 << index) != 0 {
            return bad(format!("parameter `{name}` given more than once"));
        }
        seen |= 1 << index;
        let spec = &specs[index];
        let value = match spec.ty {
            ParamType::U32 => raw.parse::<u32>().map(ParamValue::U32).map_err(|_| {
                CallError::BadRequest(format!(
                    "parameter `{name}` must be an unsigned 32-bit integer, got `{raw}`"
                ))
            })?,
            ParamType::F32 => raw.parse::<f32>().map(ParamValue::F32).map_err(|_| {
                CallError::BadRequest(format!("parameter `{name}` must be a number, got `{raw}`"))
            })?,
        };
        put_value(&mut block, spec, value);
    }
    for (index, spec) in specs.iter().enumerate() {
        if seen & (1 << index) == 0 {
            match spec.default {
                Some(value) => put_value(&mut block, spec, value),
                None => return bad(format!("missing required parameter `{}`", spec.name)),
            }
        }
    }
    Ok(block)
}

/// The accelerators a node can load, by id and by name.
#[derive(Clone)]
pub struct Catalog {
    entries: Vec<Arc<dyn Accelerator>>,
    by_name: HashMap<String, usize>,
    by_id: HashMap<u16, usize>,
}

impl Catalog {
    /// The seven built-in CPU accelerators.
    pub fn builtin() -> Catalog {
        Catalog::new(builtins())
    }

    /// A catalog of the given accelerators. Panics on a duplicate id or name: that is a
    /// programming error in whoever assembled the list.
    pub fn new(entries: Vec<Arc<dyn Accelerator>>) -> Catalog {
        let mut by_name = HashMap::new();
        let mut by_id = HashMap::new();
        for (i, a) in entries.iter().enumerate() {
            let d = a.descriptor();
            assert!(
                by_name.insert(d.name.clone(), i).is_none(),
                "duplicate name {}",
                d.name
            );
            assert!(by_id.insert(d.id, i).is_none(), "duplicate id {}", d.id);
        }
        Catalog {
            entries,
            by_name,
            by_id,
        }
    }

    pub fn by_name(&self, name: &str) -> Option<&Arc<dyn Accelerator>> {
        self.by_name.get(name).map(|&i| &self.entries[i])
    }

    pub fn by_id(&self, id: u16) -> Option<&Arc<dyn Accelerator>> {
        self.by_id.get(&id).map(|&i| &self.entries[i])
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Accelerator>> {
        self.entries.iter()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_ids_and_names_follow_the_spec() {
        let c = Catalog::builtin();
        let expect = [
            (1, "echo"),
            (2, "to_uppercase"),
            (3, "topk"),
            (4, "logit"),
            (5, "minmax"),
            (6, "sobel"),
            (7, "matmul"),
        ];
        assert_eq!(c.len(), expect.len());
        for (id, name) in expect {
            assert_eq!(c.by_id(id).unwrap().descriptor().name, name);
            assert_eq!(c.by_name(name).unwrap().descriptor().id, id);
        }
        assert!(c.by_id(0).is_none());
        assert!(c.by_name("nope").is_none());
    }

    #[test]
    fn params_from_pairs_places_values_at_their_offsets() {
        let c = Catalog::builtin();
        let sobel = c.by_name("sobel").unwrap();
        let block = params_from_pairs(
            &sobel.descriptor().params,
            [("height", "480"), ("width", "640")],
        )
        .unwrap();
        assert_eq!(param_u32(&block, 0), 640);
        assert_eq!(param_u32(&block, 4), 480);
        assert!(block[8..].iter().all(|&b| b == 0));
    }

    #[test]
    fn params_from_pairs_refuses_with_a_reason() {
        let c = Catalog::builtin();
        let topk = &c.by_name("topk").unwrap().descriptor().params;
        let err = |pairs: &[(&str, &str)]| match params_from_pairs(topk, pairs.iter().copied()) {
            Err(CallError::BadRequest(m)) => m,
            other => panic!("expected BadRequest, got {other:?}"),
        };
        assert!(err(&[]).contains("missing required parameter `k`"));
        assert!(err(&[("k", "x")]).contains("unsigned 32-bit"));
        assert!(err(&[("k", "-1")]).contains("unsigned 32-bit"));
        assert!(err(&[("j", "1")]).contains("unknown parameter `j`"));
        assert!(err(&[("k", "1"), ("k", "2")]).contains("more than once"));
        let echo = &c.by_name("echo").unwrap().descriptor().params;
        assert!(matches!(
            params_from_pairs(echo, [("k", "1")]),
            Err(CallError::BadRequest(m)) if m.contains("takes none")
        ));
    }

    #[test]
    fn defaults_fill_missing_optional_params() {
        let c = Catalog::builtin();
        let logit = &c.by_name("logit").unwrap().descriptor().params;
        let block = params_from_pairs(logit, []).unwrap();
        assert_eq!(param_f32(&block, 0), 0.0);
    }
}
