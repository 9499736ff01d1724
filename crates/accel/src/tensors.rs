//! Tensors a model declares: what an accelerator that is a *model* (an ONNX file from
//! the model repository) takes and gives, beyond bytes.
//!
//! The built-in kernels need none of this (their payloads are documented byte layouts
//! and the v2 protocol maps them with a fixed table). A model's payload is its inputs'
//! elements, little-endian, tensor after tensor in declared order, each tensor whole
//! (`[batch, dims…]` row-major); its output is its outputs the same way. With a
//! batch axis (`max_batch_size > 0`) the batch size is not sent: it is the payload's
//! length over the bytes one item takes, so `/v1/fn`, RAC and v2 carry the same bytes.
//!
//! A dim may also be *given* by each call (`-1` in a model configuration, beyond the
//! batch axis; [`ANY_DIM`]): then the payload starts with the values of its inputs'
//! given dims, and the output with those of its outputs', each a u32 little-endian, in
//! declared order ([`Tensors::given_inputs`], [`Tensors::given_outputs`],
//! [`push_given_dims`]). Every other dimension but the batch is fixed, so a payload's
//! size is known before it is read and a call cannot ask a model for more than
//! `max_batch_size` items. BYTES tensors are the exception: their elements are strings, each its 4-byte
//! little-endian length then its bytes (Triton's serialisation, and the protocol's
//! binary form), so a payload with BYTES inputs is walked to find its batch
//! ([`Tensors::split_inputs`]). This module is the one home of that layout; the
//! protocols' encodings (JSON, typed gRPC contents) live with the front ends.

use crate::{bad, CallError};

/// A tensor element type, by the names of the Open Inference Protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataType {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Bf16,
    Fp32,
    Fp64,
    /// Byte strings of any length: each element is its length (4 bytes, little-endian)
    /// then its bytes, as Triton serialises them ([`bytes_elements`]).
    Bytes,
}

/// Bytes of the length before each element of a BYTES tensor.
pub const BYTES_LENGTH_PREFIX: usize = 4;

/// A dim each call gives (`-1` in a model configuration, beyond the batch axis),
/// stored as 0, which no fixed dim is.
pub const ANY_DIM: u64 = 0;
/// Bytes of each given dim's value at the front of a payload or an output (u32,
/// little-endian).
pub const GIVEN_DIM_BYTES: usize = 4;
/// The largest value a call may give a dim: a bound, before the payload's own size
/// bounds the elements.
pub const GIVEN_DIM_MAX: u64 = 1 << 26;

impl DataType {
    /// Every type, in the order error messages list them.
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Bf16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bytes,
    ];

    /// The protocol's name (`datatype` field).
    pub fn name(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Bf16 => "BF16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bytes => "BYTES",
        }
    }

    /// The model configuration's name (`data_type` field, Triton's extension): the
    /// protocol's name after `TYPE_`, but `TYPE_STRING` for BYTES.
    pub fn config_name(self) -> &'static str {
        match self {
            DataType::Bool => "TYPE_BOOL",
            DataType::Uint8 => "TYPE_UINT8",
            DataType::Uint16 => "TYPE_UINT16",
            DataType::Uint32 => "TYPE_UINT32",
            DataType::Uint64 => "TYPE_UINT64",
            DataType::Int8 => "TYPE_INT8",
            DataType::Int16 => "TYPE_INT16",
            DataType::Int32 => "TYPE_INT32",
            DataType::Int64 => "TYPE_INT64",
            DataType::Fp16 => "TYPE_FP16",
            DataType::Bf16 => "TYPE_BF16",
            DataType::Fp32 => "TYPE_FP32",
            DataType::Fp64 => "TYPE_FP64",
            DataType::Bytes => "TYPE_STRING",
        }
    }

    /// The type a model configuration names (`TYPE_FP32`, or the protocol's `FP32`).
    pub fn from_config_name(name: &str) -> Option<DataType> {
        DataType::ALL
            .into_iter()
            .find(|t| t.config_name() == name || t.name() == name)
    }

    /// The type of the protocol's name (`FP32`, `BYTES`).
    pub fn from_name(name: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Bytes per element; `None` for BYTES, whose elements differ in length.
    pub fn fixed_size(self) -> Option<usize> {
        match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => Some(1),
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => Some(2),
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => Some(4),
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => Some(8),
            DataType::Bytes => None,
        }
    }

    /// The least bytes one element takes: its size, or for BYTES its length prefix
    /// (an empty string).
    pub fn size(self) -> usize {
        self.fixed_size().unwrap_or(BYTES_LENGTH_PREFIX)
    }
}

/// The elements of a BYTES tensor's bytes (each a 4-byte little-endian length, then
/// that many bytes), front to back; an `Err` (and nothing after it) where an element
/// is cut short.
pub fn bytes_elements(data: &[u8]) -> impl Iterator<Item = Result<&[u8], String>> + '_ {
    let mut rest = Some(data);
    std::iter::from_fn(move || {
        let data = rest.take()?;
        if data.is_empty() {
            return None;
        }
        let Some((len, tail)) = data.split_first_chunk::<BYTES_LENGTH_PREFIX>() else {
            return Some(Err(format!(
                "a BYTES element's 4-byte length is cut short ({} bytes left)",
                data.len()
            )));
        };
        let len = u32::from_le_bytes(*len) as usize;
        if tail.len() < len {
            return Some(Err(format!(
                "a BYTES element says {len} bytes, {} are left",
                tail.len()
            )));
        }
        let (element, tail) = tail.split_at(len);
        rest = Some(tail);
        Some(Ok(element))
    })
}

/// Bytes the first `count` BYTES elements of `data` take, or why `data` has fewer.
pub fn bytes_span(data: &[u8], count: usize) -> Result<usize, String> {
    let mut taken = 0;
    let mut elements = bytes_elements(data);
    for k in 0..count {
        match elements.next() {
            Some(Ok(e)) => taken += BYTES_LENGTH_PREFIX + e.len(),
            Some(Err(e)) => return Err(e),
            None => return Err(format!("{count} BYTES elements expected, {k} found")),
        }
    }
    debug_assert!(taken <= data.len());
    Ok(taken)
}

/// Appends `element` as one BYTES element (its length, then its bytes).
pub fn push_bytes_element(element: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(element.len()).expect("a BYTES element is under 4 GiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(element);
}

/// The layouts an image input may declare (Triton's `format`), which image clients
/// read from the model configuration to lay out what they send.
pub const INPUT_FORMATS: [&str; 3] = ["FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW"];

/// What a model's configuration says of one tensor beyond its type and dims, for the
/// clients that read the configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TensorConfig {
    /// An input's layout: one of [`INPUT_FORMATS`].
    pub format: Option<String>,
    /// An output's label file (the classification extension's labels).
    pub label_filename: Option<String>,
}

/// One declared tensor: its name, element type, and the dims of one item (the batch
/// axis, when the model has one, is not among them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub datatype: DataType,
    pub dims: Vec<u64>,
}

impl TensorSpec {
    /// Elements in one item; with given dims ([`ANY_DIM`]), the least (each given 1).
    pub fn item_elements(&self) -> usize {
        self.dims.iter().map(|&d| d.max(1)).product::<u64>() as usize
    }

    /// How many of its dims each call gives.
    pub fn given_dims(&self) -> usize {
        self.dims.iter().filter(|&&d| d == ANY_DIM).count()
    }

    /// Bytes one item takes; for BYTES, the least it takes (every element empty).
    pub fn item_bytes(&self) -> usize {
        self.item_elements() * self.datatype.size()
    }

    /// Bytes this tensor takes at the front of `data` for `batch` items, or why `data`
    /// is too short.
    fn span(&self, batch: usize, data: &[u8]) -> Result<usize, String> {
        let count = self.item_elements() * batch;
        match self.datatype.fixed_size() {
            Some(size) if count * size <= data.len() => Ok(count * size),
            Some(size) => Err(format!(
                "tensor {} takes {} bytes, {} are left",
                self.name,
                count * size,
                data.len()
            )),
            None => bytes_span(data, count).map_err(|e| format!("tensor {}: {e}", self.name)),
        }
    }
}

/// The inputs and outputs of a model, in the order its payloads carry them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensors {
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// Items one call may carry; 0: no batch axis, every tensor is exactly its dims.
    pub max_batch_size: u32,
}

/// Each tensor's bytes in `data` for `batch` items, front to back; `Err` unless they
/// take `data` exactly.
fn split<'d>(
    specs: &[TensorSpec],
    batch: usize,
    mut data: &'d [u8],
) -> Result<Vec<&'d [u8]>, String> {
    let mut parts = Vec::with_capacity(specs.len());
    for spec in specs {
        let (part, rest) = data.split_at(spec.span(batch, data)?);
        parts.push(part);
        data = rest;
    }
    if !data.is_empty() {
        return Err(format!("{} bytes more than the tensors take", data.len()));
    }
    Ok(parts)
}

impl Tensors {
    /// Bytes one item's inputs take, all inputs together (the least, with BYTES).
    pub fn input_item_bytes(&self) -> usize {
        self.inputs.iter().map(TensorSpec::item_bytes).sum()
    }

    /// Bytes one item's outputs take, all outputs together (the least, with BYTES).
    pub fn output_item_bytes(&self) -> usize {
        self.outputs.iter().map(TensorSpec::item_bytes).sum()
    }

    /// Whether every input has fixed-size elements (no BYTES): then a payload's length
    /// alone gives its batch ([`Tensors::batch_of`]).
    pub fn inputs_fixed(&self) -> bool {
        self.inputs
            .iter()
            .all(|s| s.datatype.fixed_size().is_some())
    }

    /// How many items a payload of `len` bytes carries (1 without a batch axis), or why
    /// it cannot be this model's input. With BYTES inputs the length only bounds the
    /// batch: `len` must hold at least one item, and [`Tensors::split_inputs`] tells.
    ///
    /// A payload with given dims ([`ANY_DIM`]) carries its batch with them: here the
    /// length only bounds it (1 when it holds the given dims and one item of the least
    /// size); [`Tensors::given_inputs`] then [`Tensors::split_inputs`] tell.
    pub fn batch_of(&self, len: usize) -> Result<usize, CallError> {
        let item = self.input_item_bytes();
        let given: usize = self.inputs.iter().map(TensorSpec::given_dims).sum();
        if given > 0 {
            let least = given * GIVEN_DIM_BYTES + item;
            return if len >= least {
                Ok(1)
            } else {
                bad(format!(
                    "the model takes at least {least} bytes of input (its given dims, then one item), got {len}"
                ))
            };
        }
        if !self.inputs_fixed() {
            return if len >= item {
                Ok(1)
            } else {
                bad(format!(
                    "the model takes at least {item} bytes of input, got {len}"
                ))
            };
        }
        if self.max_batch_size == 0 {
            return if len == item {
                Ok(1)
            } else {
                bad(format!(
                    "the model takes {item} bytes of input (no batch axis), got {len}"
                ))
            };
        }
        let max = self.max_batch_size as usize;
        if item == 0 || len == 0 || len % item != 0 || len / item > max {
            return bad(format!(
                "the model takes 1 to {max} items of {item} bytes each, got {len} bytes"
            ));
        }
        Ok(len / item)
    }

    /// A payload's batch and each input's bytes in it. With BYTES inputs the batch is
    /// the smallest one whose tensors take the payload exactly: each candidate is one
    /// walk over the element lengths, and only candidates whose least size fits the
    /// payload are tried (at most `max_batch_size`).
    pub fn split_inputs<'p>(&self, payload: &'p [u8]) -> Result<(usize, Vec<&'p [u8]>), CallError> {
        if self.inputs.iter().any(|s| s.given_dims() > 0) {
            return bad("the inputs' given dims are to be read first (Tensors::given_inputs)");
        }
        if self.inputs_fixed() {
            let batch = self.batch_of(payload.len())?;
            let parts = split(&self.inputs, batch, payload).map_err(CallError::BadRequest)?;
            return Ok((batch, parts));
        }
        let max = self.max_batch_size.max(1) as usize;
        let item = self.input_item_bytes().max(1);
        let mut last = String::from("the payload is empty");
        for batch in (1..=max).take_while(|b| b * item <= payload.len()) {
            match split(&self.inputs, batch, payload) {
                Ok(parts) => return Ok((batch, parts)),
                Err(e) => last = e,
            }
        }
        bad(format!(
            "the payload is no batch of 1 to {max} items of the model's inputs ({last})"
        ))
    }

    /// Each output's bytes in a call's `output` for `batch` items, or why `output` is
    /// not that (an engine that computed something else).
    pub fn split_outputs<'o>(
        &self,
        batch: usize,
        output: &'o [u8],
    ) -> Result<Vec<&'o [u8]>, String> {
        if self.outputs.iter().any(|s| s.given_dims() > 0) {
            return Err(
                "the outputs' given dims are to be read first (Tensors::given_outputs)".into(),
            );
        }
        split(&self.outputs, batch, output)
    }

    /// The shape of `spec` (one of this model's tensors) for `batch` items: with the
    /// batch axis first when the model has one.
    pub fn shape(&self, spec: &TensorSpec, batch: usize) -> Vec<u64> {
        debug_assert_eq!(spec.given_dims(), 0, "a shape of given dims is the call's");
        let lead = (self.max_batch_size > 0).then_some(batch as u64);
        lead.into_iter().chain(spec.dims.iter().copied()).collect()
    }

    /// The declared shape of `spec`, `-1` standing for the batch axis and for the dims
    /// each call gives.
    pub fn declared_shape(&self, spec: &TensorSpec) -> Vec<i64> {
        let lead = (self.max_batch_size > 0).then_some(-1);
        lead.into_iter()
            .chain(spec.dims.iter().map(|&d| dim_i64(d)))
            .collect()
    }

    /// Whether any tensor has a dim each call gives: then a payload starts with its
    /// inputs' given dims, an output with its outputs' (see the module docs).
    pub fn gives_dims(&self) -> bool {
        self.inputs
            .iter()
            .chain(&self.outputs)
            .any(|s| s.given_dims() > 0)
    }

    /// The model's tensors with its inputs' given dims read from the front of a call's
    /// `payload`, and the rest of it (the inputs' elements). Outputs are left as
    /// declared.
    pub fn given_inputs<'p>(&self, payload: &'p [u8]) -> Result<(Tensors, &'p [u8]), CallError> {
        let mut given = self.clone();
        let rest = fill_given(&mut given.inputs, payload).map_err(CallError::BadRequest)?;
        Ok((given, rest))
    }

    /// The model's tensors with its outputs' given dims read from the front of a
    /// call's `output`, and the rest of it (the outputs' elements).
    pub fn given_outputs<'o>(&self, output: &'o [u8]) -> Result<(Tensors, &'o [u8]), CallError> {
        let mut given = self.clone();
        let rest = fill_given(&mut given.outputs, output).map_err(CallError::Internal)?;
        Ok((given, rest))
    }
}

/// A declared dim as the protocol writes it: `-1` for one each call gives.
pub fn dim_i64(d: u64) -> i64 {
    if d == ANY_DIM {
        -1
    } else {
        d as i64
    }
}

/// Fills the given dims of `specs` from the front of `data`; returns the rest.
fn fill_given<'d>(specs: &mut [TensorSpec], mut data: &'d [u8]) -> Result<&'d [u8], String> {
    for spec in specs {
        for d in spec.dims.iter_mut().filter(|d| **d == ANY_DIM) {
            let Some((value, rest)) = data.split_first_chunk::<GIVEN_DIM_BYTES>() else {
                return Err(format!(
                    "tensor {}: the given dims are cut short ({} bytes left)",
                    spec.name,
                    data.len()
                ));
            };
            let value = u64::from(u32::from_le_bytes(*value));
            if value == 0 || value > GIVEN_DIM_MAX {
                return Err(format!(
                    "tensor {}: a given dim of {value}, not 1 to {GIVEN_DIM_MAX}",
                    spec.name
                ));
            }
            *d = value;
            data = rest;
        }
        debug_assert_eq!(spec.given_dims(), 0, "every given dim is filled");
    }
    Ok(data)
}

/// Appends the given dims of `specs` as a payload or an output carries them, taken
/// from `shapes` (each tensor's dims of one item, in `specs` order), after checking
/// each shape against its declaration (rank, fixed dims, given dims within bounds).
pub fn push_given_dims<'s>(
    specs: &[TensorSpec],
    shapes: impl IntoIterator<Item = &'s [u64]>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let mut shapes = shapes.into_iter();
    for spec in specs {
        let shape = shapes
            .next()
            .ok_or_else(|| format!("tensor {} has no shape", spec.name))?;
        let fits = shape.len() == spec.dims.len()
            && shape.iter().zip(&spec.dims).all(|(&s, &d)| {
                if d == ANY_DIM {
                    (1..=GIVEN_DIM_MAX).contains(&s)
                } else {
                    s == d
                }
            });
        if !fits {
            let declared: Vec<i64> = spec.dims.iter().map(|&d| dim_i64(d)).collect();
            return Err(format!(
                "tensor {} has dims {shape:?}, declared {declared:?} (-1: 1 to {GIVEN_DIM_MAX})",
                spec.name
            ));
        }
        for (&s, _) in shape.iter().zip(&spec.dims).filter(|(_, &d)| d == ANY_DIM) {
            out.extend_from_slice(&(s as u32).to_le_bytes());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digits() -> Tensors {
        let t = |name: &str, dims: &[u64]| TensorSpec {
            name: name.into(),
            datatype: DataType::Fp32,
            dims: dims.to_vec(),
        };
        Tensors {
            inputs: vec![t("image", &[1, 8, 8])],
            outputs: vec![t("logits", &[10])],
            max_batch_size: 64,
        }
    }

    #[test]
    fn the_batch_is_the_payload_over_one_items_bytes() {
        let m = digits();
        assert_eq!(m.input_item_bytes(), 256);
        assert_eq!(m.output_item_bytes(), 40);
        assert_eq!(m.batch_of(256).unwrap(), 1);
        assert_eq!(m.batch_of(256 * 64).unwrap(), 64);
        for len in [0, 255, 257, 256 * 65] {
            assert!(m.batch_of(len).is_err(), "{len}");
        }
        assert_eq!(m.shape(&m.inputs[0], 3), [3, 1, 8, 8]);
        assert_eq!(m.declared_shape(&m.outputs[0]), [-1, 10]);
    }

    #[test]
    fn without_a_batch_axis_the_payload_is_exactly_one_item() {
        let m = Tensors {
            max_batch_size: 0,
            ..digits()
        };
        assert_eq!(m.batch_of(256).unwrap(), 1);
        assert!(m.batch_of(512).is_err());
        assert_eq!(m.shape(&m.inputs[0], 1), [1, 8, 8]);
        assert_eq!(m.declared_shape(&m.inputs[0]), [1, 8, 8]);
    }

    #[test]
    fn config_names_and_protocol_names_both_parse() {
        for t in DataType::ALL {
            assert_eq!(DataType::from_config_name(t.config_name()), Some(t));
            assert_eq!(DataType::from_config_name(t.name()), Some(t));
        }
        assert_eq!(
            DataType::from_config_name("TYPE_STRING"),
            Some(DataType::Bytes)
        );
        assert_eq!(DataType::from_config_name("BYTES"), Some(DataType::Bytes));
        assert_eq!(DataType::from_config_name("TYPE_COMPLEX64"), None);
        assert_eq!(DataType::from_name("TYPE_FP64"), None);
        let sizes: Vec<usize> = DataType::ALL.iter().map(|t| t.size()).collect();
        assert_eq!(sizes, [1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8, 4]);
        assert_eq!(DataType::Bytes.fixed_size(), None);
    }

    fn strings(v: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        v.iter().for_each(|e| push_bytes_element(e, &mut out));
        out
    }

    #[test]
    fn bytes_elements_are_length_prefixed_and_cut_ones_are_named() {
        let data = strings(&[b"ab", b"", b"xyz"]);
        assert_eq!(data.len(), 4 * 3 + 5);
        let got: Vec<&[u8]> = bytes_elements(&data).map(Result::unwrap).collect();
        assert_eq!(got, [&b"ab"[..], b"", b"xyz"]);
        assert_eq!(bytes_span(&data, 2).unwrap(), 4 + 2 + 4);
        assert!(bytes_span(&data, 4)
            .unwrap_err()
            .contains("4 BYTES elements expected, 3"));
        assert!(bytes_span(&data[..data.len() - 1], 3)
            .unwrap_err()
            .contains("says 3 bytes, 2"));
        assert!(bytes_span(&[1, 0], 1).unwrap_err().contains("cut short"));
        assert_eq!(bytes_elements(&[]).count(), 0);
    }

    #[test]
    fn given_dims_lead_the_payload_and_the_output() {
        let t = |name: &str, datatype, dims: &[u64]| TensorSpec {
            name: name.into(),
            datatype,
            dims: dims.to_vec(),
        };
        // Triton's simple_identity: BYTES [-1] with a batch axis.
        let m = Tensors {
            inputs: vec![t("INPUT0", DataType::Bytes, &[ANY_DIM])],
            outputs: vec![t("OUTPUT0", DataType::Bytes, &[ANY_DIM])],
            max_batch_size: 8,
        };
        assert!(m.gives_dims());
        assert_eq!(m.declared_shape(&m.inputs[0]), [-1, -1]);
        let mut payload = Vec::new();
        push_given_dims(&m.inputs, [&[3u64][..]], &mut payload).unwrap();
        assert_eq!(payload, 3u32.to_le_bytes());
        payload.extend_from_slice(&strings(&[b"a", b"b", b"c", b"d", b"e", b"f"]));
        assert!(
            m.split_inputs(&payload).is_err(),
            "the given dims come first"
        );
        let (given, rest) = m.given_inputs(&payload).unwrap();
        assert_eq!(given.inputs[0].dims, [3]);
        assert_eq!(given.outputs[0].dims, [ANY_DIM], "outputs are the run's");
        let (batch, parts) = given.split_inputs(rest).unwrap();
        assert_eq!((batch, parts[0]), (2, rest));
        assert_eq!(
            m.batch_of(payload.len()).unwrap(),
            1,
            "the length only bounds it"
        );
        assert!(m.batch_of(5).is_err());
        // An output gives its own.
        let mut out = Vec::new();
        push_given_dims(&m.outputs, [&[1u64][..]], &mut out).unwrap();
        out.extend_from_slice(&strings(&[b"x", b"y"]));
        let (given, rest) = m.given_outputs(&out).unwrap();
        assert_eq!(given.split_outputs(2, rest).unwrap(), [rest]);
        assert_eq!(given.shape(&given.outputs[0], 2), [2, 1]);
        // Fixed dims are checked, given ones bounded.
        let fixed = [t("x", DataType::Int32, &[ANY_DIM, 4])];
        let mut sink = Vec::new();
        assert!(push_given_dims(&fixed, [&[5u64, 4][..]], &mut sink).is_ok());
        assert_eq!(sink, 5u32.to_le_bytes());
        for bad in [&[5u64, 3][..], &[5], &[0, 4], &[GIVEN_DIM_MAX + 1, 4]] {
            assert!(
                push_given_dims(&fixed, [bad], &mut Vec::new()).is_err(),
                "{bad:?}"
            );
        }
        assert!(m.given_inputs(&[1, 0]).is_err(), "cut short");
        assert!(m.given_inputs(&0u32.to_le_bytes()).is_err(), "zero");
    }

    #[test]
    fn a_payload_with_strings_is_walked_to_find_its_batch() {
        let t = |name: &str, datatype, dims: &[u64]| TensorSpec {
            name: name.into(),
            datatype,
            dims: dims.to_vec(),
        };
        let m = Tensors {
            inputs: vec![
                t("text", DataType::Bytes, &[2]),
                t("n", DataType::Int64, &[1]),
            ],
            outputs: vec![t("out", DataType::Bytes, &[2])],
            max_batch_size: 8,
        };
        assert!(!m.inputs_fixed());
        assert_eq!(m.input_item_bytes(), 16);
        // Two items: four strings, then two INT64s.
        let mut payload = strings(&[b"a", b"bb", b"", b"cccc"]);
        payload.extend_from_slice(&[7u8; 16]);
        let (batch, parts) = m.split_inputs(&payload).unwrap();
        assert_eq!(batch, 2);
        assert_eq!(parts[0].len(), 16 + 7);
        assert_eq!(parts[1], &[7u8; 16][..]);
        assert!(m.split_inputs(&payload[..payload.len() - 1]).is_err());
        assert!(m.split_inputs(&[]).is_err());
        assert!(m.batch_of(15).is_err());
        let out = strings(&[b"x", b"y", b"z", b"w"]);
        assert_eq!(m.split_outputs(2, &out).unwrap(), [&out[..]]);
        assert!(m.split_outputs(3, &out).is_err());
        // Fixed tensors split by length, as before.
        let d = digits();
        let (batch, parts) = d.split_inputs(&[0; 512]).unwrap();
        assert_eq!((batch, parts.len(), parts[0].len()), (2, 1, 512));
        assert!(d.split_outputs(2, &[0; 81]).is_err());
    }
}
