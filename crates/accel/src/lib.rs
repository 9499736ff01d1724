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

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

pub mod batch;
mod kernels;
pub mod reference;
pub mod sequence;
pub mod tensors;

pub use kernels::{builtins, fault_injection, FAULT_ID};

/// Size of the parameter block in bytes (the `params` field of a RAC call).
pub const PARAMS_LEN: usize = 44;

/// Accelerator parameters in their wire layout: little-endian, zero-padded.
pub type ParamBlock = [u8; PARAMS_LEN];

/// Type of one parameter inside a [`ParamBlock`]: the six types of the accelerator
/// manifest format (`spec/accelerator-manifest.md`), little-endian at their offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    U8,
    U16,
    U32,
    I32,
    U64,
    F32,
}

impl ParamType {
    /// Every type, in the order the manifest format lists them.
    pub const ALL: [ParamType; 6] = [
        ParamType::U8,
        ParamType::U16,
        ParamType::U32,
        ParamType::I32,
        ParamType::U64,
        ParamType::F32,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ParamType::U8 => "u8",
            ParamType::U16 => "u16",
            ParamType::U32 => "u32",
            ParamType::I32 => "i32",
            ParamType::U64 => "u64",
            ParamType::F32 => "f32",
        }
    }

    /// The type named `name` (`u8`, …, `f32`).
    pub fn from_name(name: &str) -> Option<ParamType> {
        ParamType::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// Bytes the value takes in the block; its offset must be a multiple of this.
    pub fn size(self) -> usize {
        match self {
            ParamType::U8 => 1,
            ParamType::U16 => 2,
            ParamType::U32 | ParamType::I32 | ParamType::F32 => 4,
            ParamType::U64 => 8,
        }
    }

    /// Whether values of this type are integers (usable in size expressions).
    pub fn is_integer(self) -> bool {
        self != ParamType::F32
    }

    /// Parses a decimal text (a query-string value) as a value of this type.
    pub fn parse(self, raw: &str) -> Option<ParamValue> {
        Some(match self {
            ParamType::U8 => ParamValue::U8(raw.parse().ok()?),
            ParamType::U16 => ParamValue::U16(raw.parse().ok()?),
            ParamType::U32 => ParamValue::U32(raw.parse().ok()?),
            ParamType::I32 => ParamValue::I32(raw.parse().ok()?),
            ParamType::U64 => ParamValue::U64(raw.parse().ok()?),
            ParamType::F32 => ParamValue::F32(raw.parse().ok()?),
        })
    }

    /// The value of this type equal to the integer `v`, if it fits.
    pub fn from_i128(self, v: i128) -> Option<ParamValue> {
        Some(match self {
            ParamType::U8 => ParamValue::U8(v.try_into().ok()?),
            ParamType::U16 => ParamValue::U16(v.try_into().ok()?),
            ParamType::U32 => ParamValue::U32(v.try_into().ok()?),
            ParamType::I32 => ParamValue::I32(v.try_into().ok()?),
            ParamType::U64 => ParamValue::U64(v.try_into().ok()?),
            ParamType::F32 => ParamValue::F32(v as f32),
        })
    }

    /// What a value of this type must look like, for error messages.
    fn wording(self) -> &'static str {
        match self {
            ParamType::U8 => "an unsigned 8-bit integer",
            ParamType::U16 => "an unsigned 16-bit integer",
            ParamType::U32 => "an unsigned 32-bit integer",
            ParamType::I32 => "a signed 32-bit integer",
            ParamType::U64 => "an unsigned 64-bit integer",
            ParamType::F32 => "a number",
        }
    }
}

/// A parameter value, as given by a default or read from a block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ParamValue {
    U8(u8),
    U16(u16),
    U32(u32),
    I32(i32),
    U64(u64),
    F32(f32),
}

impl ParamValue {
    /// The value as an integer; `None` for `F32`.
    pub fn as_i128(self) -> Option<i128> {
        match self {
            ParamValue::U8(v) => Some(v.into()),
            ParamValue::U16(v) => Some(v.into()),
            ParamValue::U32(v) => Some(v.into()),
            ParamValue::I32(v) => Some(v.into()),
            ParamValue::U64(v) => Some(v.into()),
            ParamValue::F32(_) => None,
        }
    }

    /// The value as a float, for comparisons against bounds (exact for every integer
    /// type but the largest `u64`s, which compare as integers instead).
    fn as_f64(self) -> f64 {
        match self {
            ParamValue::F32(v) => v.into(),
            other => other.as_i128().expect("integer") as f64,
        }
    }

    /// `self < other`, as numbers (integers exactly).
    fn less_than(self, other: ParamValue) -> bool {
        match (self.as_i128(), other.as_i128()) {
            (Some(a), Some(b)) => a < b,
            _ => self.as_f64() < other.as_f64(),
        }
    }
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::F32(v) => write!(f, "{v}"),
            other => write!(f, "{}", other.as_i128().expect("integer")),
        }
    }
}

/// Where a parameter lives in the block and what it means.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    /// Query-string name (`k`, `width`, …).
    pub name: Cow<'static, str>,
    pub ty: ParamType,
    /// Byte offset inside the [`ParamBlock`]; a multiple of the type's size.
    pub offset: usize,
    /// Value used when the caller gives none; `None` means the parameter is required.
    pub default: Option<ParamValue>,
    /// Inclusive bounds, checked by [`params_from_pairs`] and [`ParamSpec::check`]
    /// (built-ins check their ranges in their own `check` and leave these `None`).
    pub min: Option<ParamValue>,
    pub max: Option<ParamValue>,
}

impl ParamSpec {
    /// A parameter without bounds.
    pub fn new(
        name: impl Into<Cow<'static, str>>,
        ty: ParamType,
        offset: usize,
        default: Option<ParamValue>,
    ) -> ParamSpec {
        ParamSpec {
            name: name.into(),
            ty,
            offset,
            default,
            min: None,
            max: None,
        }
    }

    /// The bytes of the block this parameter occupies.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.ty.size()
    }

    /// Reads this parameter from `block`.
    pub fn read(&self, block: &ParamBlock) -> ParamValue {
        let b = &block[self.range()];
        match self.ty {
            ParamType::U8 => ParamValue::U8(b[0]),
            ParamType::U16 => ParamValue::U16(u16::from_le_bytes([b[0], b[1]])),
            ParamType::U32 => ParamValue::U32(u32::from_le_bytes(b.try_into().expect("4"))),
            ParamType::I32 => ParamValue::I32(i32::from_le_bytes(b.try_into().expect("4"))),
            ParamType::U64 => ParamValue::U64(u64::from_le_bytes(b.try_into().expect("8"))),
            ParamType::F32 => ParamValue::F32(f32::from_le_bytes(b.try_into().expect("4"))),
        }
    }

    /// Writes `value` (of this parameter's type) into `block`.
    pub fn write(&self, block: &mut ParamBlock, value: ParamValue) {
        let range = self.range();
        match value {
            ParamValue::U8(v) => block[range].copy_from_slice(&v.to_le_bytes()),
            ParamValue::U16(v) => block[range].copy_from_slice(&v.to_le_bytes()),
            ParamValue::U32(v) => block[range].copy_from_slice(&v.to_le_bytes()),
            ParamValue::I32(v) => block[range].copy_from_slice(&v.to_le_bytes()),
            ParamValue::U64(v) => block[range].copy_from_slice(&v.to_le_bytes()),
            ParamValue::F32(v) => block[range].copy_from_slice(&v.to_le_bytes()),
        }
    }

    /// Whether `value` lies within the parameter's bounds (a NaN lies within none).
    pub fn in_range(&self, value: ParamValue) -> Result<(), CallError> {
        let nan = matches!(value, ParamValue::F32(v) if v.is_nan());
        let below = self.min.is_some_and(|min| nan || value.less_than(min));
        let above = self.max.is_some_and(|max| nan || max.less_than(value));
        if below || above {
            let bound = |b: Option<ParamValue>| b.map_or("…".to_string(), |v| v.to_string());
            return bad(format!(
                "parameter `{}` is {value}, outside {}..={}",
                self.name,
                bound(self.min),
                bound(self.max)
            ));
        }
        Ok(())
    }

    /// Checks the value `block` holds for this parameter against its bounds (a RAC
    /// call's block, which did not go through [`params_from_pairs`]).
    pub fn check(&self, block: &ParamBlock) -> Result<(), CallError> {
        self.in_range(self.read(block))
    }
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

    /// The tensors a model declares (an ONNX model of the model repository); `None`
    /// for a kernel whose payload is plain bytes with a documented layout.
    fn tensors(&self) -> Option<&tensors::Tensors> {
        None
    }

    /// The engine that runs a model, as Triton's model configuration names its
    /// `backend` (`"tract"`, `"onnxruntime"`, `"image"`); `None` for the node's own
    /// kernels.
    fn engine(&self) -> Option<&'static str> {
        None
    }

    /// The class labels of output `output` (a model's label file, one label a line,
    /// line k naming class k), for the classification extension; `None`: no labels.
    fn labels(&self, _output: &str) -> Option<std::sync::Arc<[String]>> {
        None
    }

    /// What the model's configuration says of tensor `name` beyond type and dims
    /// (an input's `format`, an output's `label_filename`).
    fn tensor_config(&self, _name: &str) -> tensors::TensorConfig {
        tensors::TensorConfig::default()
    }

    /// The dynamic batching a model declares: its calls queued at a slot join into
    /// one run (see [`batch`]); `None`: every call runs alone.
    fn batching(&self) -> Option<&batch::Policy> {
        None
    }

    /// The sequence batching a stateful model declares: its calls come in sequences,
    /// each routed to one slot with control inputs (see [`sequence`]); `None`: calls
    /// stand alone.
    fn sequence(&self) -> Option<&sequence::Policy> {
        None
    }

    /// A decoupled model (Triton's `model_transaction_policy { decoupled: true }`):
    /// how many responses one request gets, each output's first dim split one slice
    /// a response; `None`: one response a request.
    fn responses(&self) -> Option<usize> {
        None
    }
}

/// Reads a `u32` parameter at `offset`.
pub fn param_u32(params: &ParamBlock, offset: usize) -> u32 {
    u32::from_le_bytes(params[offset..offset + 4].try_into().expect("4 bytes"))
}

/// Reads an `f32` parameter at `offset`.
pub fn param_f32(params: &ParamBlock, offset: usize) -> f32 {
    f32::from_le_bytes(params[offset..offset + 4].try_into().expect("4 bytes"))
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
            let known: Vec<&str> = specs.iter().map(|s| s.name.as_ref()).collect();
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
        let value = spec.ty.parse(raw).ok_or_else(|| {
            CallError::BadRequest(format!(
                "parameter `{name}` must be {}, got `{raw}`",
                spec.ty.wording()
            ))
        })?;
        spec.in_range(value)?;
        spec.write(&mut block, value);
    }
    for (index, spec) in specs.iter().enumerate() {
        if seen & (1 << index) == 0 {
            match spec.default {
                Some(value) => spec.write(&mut block, value),
                None => return bad(format!("missing required parameter `{}`", spec.name)),
            }
        }
    }
    Ok(block)
}

/// The accelerators a node can load, by id and by name, each listed once with the
/// device backends that can host it (`cpu`, `opencl`, `rtl`: which backend hosts what
/// is the node's knowledge, so the node fills that in with [`Catalog::set_backends`]).
#[derive(Clone)]
pub struct Catalog {
    entries: Vec<Arc<dyn Accelerator>>,
    backends: Vec<Vec<&'static str>>,
    by_name: HashMap<String, usize>,
    by_id: HashMap<u16, usize, foldhash::fast::FixedState>,
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
        let mut by_id = HashMap::default();
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
            backends: vec![Vec::new(); entries.len()],
            entries,
            by_name,
            by_id,
        }
    }

    /// Records which backends can host accelerator `id` (ignored for an id not in the
    /// catalog).
    pub fn set_backends(&mut self, id: u16, backends: Vec<&'static str>) {
        if let Some(&i) = self.by_id.get(&id) {
            self.backends[i] = backends;
        }
    }

    /// The backends that can host accelerator `id`, as set by [`Catalog::set_backends`].
    pub fn backends(&self, id: u16) -> &[&'static str] {
        self.by_id.get(&id).map_or(&[], |&i| &self.backends[i])
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
    fn every_param_type_round_trips_through_the_block_at_its_offset() {
        let cases = [
            (ParamType::U8, 3, "200", ParamValue::U8(200), vec![200u8]),
            (
                ParamType::U16,
                2,
                "65535",
                ParamValue::U16(65535),
                vec![255, 255],
            ),
            (ParamType::U32, 4, "7", ParamValue::U32(7), vec![7, 0, 0, 0]),
            (
                ParamType::I32,
                8,
                "-2",
                ParamValue::I32(-2),
                vec![254, 255, 255, 255],
            ),
            (
                ParamType::U64,
                16,
                "18446744073709551615",
                ParamValue::U64(u64::MAX),
                vec![255; 8],
            ),
            (
                ParamType::F32,
                24,
                "1.5",
                ParamValue::F32(1.5),
                1.5f32.to_le_bytes().to_vec(),
            ),
        ];
        for (ty, offset, raw, value, bytes) in cases {
            let spec = ParamSpec::new("x", ty, offset, None);
            let block = params_from_pairs(std::slice::from_ref(&spec), [("x", raw)]).unwrap();
            assert_eq!(
                &block[offset..offset + ty.size()],
                bytes.as_slice(),
                "{ty:?}"
            );
            assert_eq!(spec.read(&block), value);
            assert_eq!(ParamType::from_name(ty.as_str()), Some(ty));
            assert!(block
                .iter()
                .enumerate()
                .all(|(i, &b)| spec.range().contains(&i) || b == 0));
        }
        // Out of the type's range: refused, naming the type.
        for (ty, raw, wording) in [
            (ParamType::U8, "256", "unsigned 8-bit"),
            (ParamType::U16, "-1", "unsigned 16-bit"),
            (ParamType::I32, "2147483648", "signed 32-bit"),
            (ParamType::U64, "1.5", "unsigned 64-bit"),
        ] {
            let spec = ParamSpec::new("x", ty, 0, None);
            let err = params_from_pairs(&[spec], [("x", raw)]).unwrap_err();
            assert!(err.to_string().contains(wording), "{ty:?}: {err}");
        }
    }

    #[test]
    fn bounds_are_inclusive_and_checked_on_both_paths() {
        let spec = ParamSpec {
            min: Some(ParamValue::I32(-3)),
            max: Some(ParamValue::I32(10)),
            ..ParamSpec::new("v", ParamType::I32, 0, Some(ParamValue::I32(0)))
        };
        let specs = std::slice::from_ref(&spec);
        for ok in ["-3", "0", "10"] {
            let block = params_from_pairs(specs, [("v", ok)]).unwrap();
            spec.check(&block).unwrap();
        }
        for out in ["-4", "11"] {
            let err = params_from_pairs(specs, [("v", out)]).unwrap_err();
            assert!(err.to_string().contains("outside -3..=10"), "{err}");
        }
        // A RAC block carries raw bytes: the same bounds through `check`.
        let mut block = [0u8; PARAMS_LEN];
        spec.write(&mut block, ParamValue::I32(11));
        assert!(spec.check(&block).is_err());
        // NaN is within no bounds; a large u64 compares exactly.
        let f = ParamSpec {
            min: Some(ParamValue::F32(0.0)),
            ..ParamSpec::new("f", ParamType::F32, 0, None)
        };
        assert!(f.in_range(ParamValue::F32(f32::NAN)).is_err());
        assert!(f.in_range(ParamValue::F32(0.0)).is_ok());
        let big = ParamSpec {
            max: Some(ParamValue::U64(u64::MAX - 1)),
            ..ParamSpec::new("b", ParamType::U64, 0, None)
        };
        assert!(big.in_range(ParamValue::U64(u64::MAX)).is_err());
        assert!(big.in_range(ParamValue::U64(u64::MAX - 1)).is_ok());
    }

    #[test]
    fn the_catalog_lists_the_backends_set_for_each_accelerator() {
        let mut c = Catalog::builtin();
        assert!(c.backends(3).is_empty());
        c.set_backends(3, vec!["cpu", "opencl"]);
        c.set_backends(999, vec!["rtl"]);
        assert_eq!(c.backends(3), ["cpu", "opencl"]);
        assert!(c.backends(999).is_empty());
    }

    #[test]
    fn defaults_fill_missing_optional_params() {
        let c = Catalog::builtin();
        let logit = &c.by_name("logit").unwrap().descriptor().params;
        let block = params_from_pairs(logit, []).unwrap();
        assert_eq!(param_f32(&block, 0), 0.0);
    }
}
