//! Tensors in system shared memory, over HTTP: an inference request whose inputs name
//! a region (`parameters.shared_memory_region`, `shared_memory_byte_size`,
//! `shared_memory_offset`) is rewritten, before it is decoded, into the same request
//! with those bytes as binary tensors; outputs it asks to be written to a region are
//! asked as binary tensors, and once the response is encoded their bytes are written
//! to the regions and left out of the response, whose outputs then name their region.
//! So the decoder and encoder (`infer`) know nothing of shared memory, and a request
//! without it pays one substring search of its JSON head.
//!
//! The regions, their owners and every bounds check are `core::shm`'s.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::core::shm::{Region, Regions};
use crate::core::tenant::TenantId;

/// The protocol's answer to a CUDA shared memory registration, on every front end.
pub const CUDA_NOT_SUPPORTED: &str =
    "CUDA shared memory is not supported: this node has no CUDA device; use system shared memory";

const REGION: &str = "shared_memory_region";
const SIZE: &str = "shared_memory_byte_size";
const OFFSET: &str = "shared_memory_offset";

/// An output to be written to a region.
pub struct OutputTarget {
    name: String,
    region: Arc<Region>,
    offset: u64,
    byte_size: u64,
}

/// A request rewritten with its shared memory inputs in band.
pub struct Rewritten {
    pub body: Vec<u8>,
    /// `Inference-Header-Content-Length` of `body`.
    pub json_len: usize,
    pub outputs: Vec<OutputTarget>,
}

impl OutputTarget {
    /// Output `name` to be written to `region` at `offset`, at most `byte_size` bytes.
    pub(crate) fn new(name: String, region: Arc<Region>, offset: u64, byte_size: u64) -> Self {
        OutputTarget {
            name,
            region,
            offset,
            byte_size,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Writes the output's `bytes` to its place, refused when they are more than the
    /// request's `shared_memory_byte_size`.
    pub(crate) fn write(&self, bytes: &[u8]) -> Result<(), String> {
        let n = bytes.len() as u64;
        if n > self.byte_size {
            return Err(format!(
                "output {} has {n} bytes; its shared_memory_byte_size is {}",
                self.name, self.byte_size
            ));
        }
        self.region.write(self.offset, bytes)
    }

    /// The parameters naming where the output went: region, byte size, offset (when
    /// not 0), as (key, value) pairs.
    pub(crate) fn placed(&self, n: u64) -> Vec<(&'static str, Value)> {
        let mut p = vec![
            (REGION, Value::from(self.region.name.clone())),
            (SIZE, Value::from(n)),
        ];
        if self.offset > 0 {
            p.push((OFFSET, Value::from(self.offset)));
        }
        p
    }
}

/// The parameter keys that place a tensor in shared memory.
pub(crate) const KEYS: [&str; 3] = [REGION, SIZE, OFFSET];

/// Where a tensor is in a region: `(region, offset, byte_size)` from its parameters.
pub(crate) fn place(
    regions: &Regions,
    tenant: TenantId,
    params: &Map<String, Value>,
) -> Result<Option<(Arc<Region>, u64, u64)>, String> {
    let Some(name) = params.get(REGION) else {
        return Ok(None);
    };
    let name = name
        .as_str()
        .ok_or("shared_memory_region must be a string")?;
    let size = params.get(SIZE).and_then(Value::as_u64).ok_or(
        "shared_memory_byte_size must be given, a whole number, with shared_memory_region",
    )?;
    let offset = match params.get(OFFSET) {
        None => 0,
        Some(v) => v
            .as_u64()
            .ok_or("shared_memory_offset must be a whole number")?,
    };
    let region = regions.get(tenant, name)?;
    if offset
        .checked_add(size)
        .is_none_or(|end| end > region.byte_size)
    {
        return Err(format!(
            "{size} bytes at offset {offset} are outside shared memory region '{name}' ({} bytes)",
            region.byte_size
        ));
    }
    Ok(Some((region, offset, size)))
}

fn params_of(tensor: &mut Value) -> Option<&mut Map<String, Value>> {
    tensor.get_mut("parameters").and_then(Value::as_object_mut)
}

/// The request `body` (`json_len`: its JSON head's length when binary tensors follow)
/// with its shared memory inputs read in band, or `None` when it names no region.
pub fn rewrite_request(
    regions: &Regions,
    tenant: TenantId,
    body: &[u8],
    json_len: Option<usize>,
) -> Result<Option<Rewritten>, String> {
    let head_len = json_len.unwrap_or(body.len()).min(body.len());
    let (head, tail) = body.split_at(head_len);
    if !head.windows(REGION.len()).any(|w| w == REGION.as_bytes()) {
        return Ok(None);
    }
    let mut doc: Value =
        serde_json::from_slice(head).map_err(|e| format!("the request is not JSON: {e}"))?;
    let mut in_band = Vec::with_capacity(tail.len());
    let mut cursor = 0usize;
    let inputs = doc.get_mut("inputs").and_then(Value::as_array_mut);
    for input in inputs.into_iter().flatten() {
        let Some(params) = params_of(input) else {
            continue;
        };
        if let Some((region, offset, size)) = place(regions, tenant, params)? {
            region.read(offset, size, &mut in_band)?;
            for key in [REGION, SIZE, OFFSET] {
                params.remove(key);
            }
            params.insert("binary_data_size".into(), size.into());
        } else if let Some(n) = params.get("binary_data_size").and_then(Value::as_u64) {
            let n = usize::try_from(n).map_err(|_| "binary_data_size is too large")?;
            let end = cursor
                .checked_add(n)
                .filter(|&end| end <= tail.len())
                .ok_or("the binary tensors are shorter than their binary_data_size")?;
            in_band.extend_from_slice(&tail[cursor..end]);
            cursor = end;
        }
    }
    let mut outputs = Vec::new();
    let requested = doc.get_mut("outputs").and_then(Value::as_array_mut);
    for output in requested.into_iter().flatten() {
        let name = output
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let Some(params) = params_of(output) else {
            continue;
        };
        if let Some((region, offset, byte_size)) = place(regions, tenant, params)? {
            params.clear();
            params.insert("binary_data".into(), true.into());
            outputs.push(OutputTarget {
                name,
                region,
                offset,
                byte_size,
            });
        }
    }
    let mut body = serde_json::to_vec(&doc).expect("serialising JSON cannot fail");
    let json_len = body.len();
    body.extend_from_slice(&in_band);
    Ok(Some(Rewritten {
        body,
        json_len,
        outputs,
    }))
}

/// Writes the outputs of `targets` from the encoded response `doc` (`json_len`: its
/// JSON head's length, `None` when it has no binary tensors) to their regions, and
/// leaves them out of it; returns the response's new `json_len`.
pub fn place_outputs(
    targets: &[OutputTarget],
    doc: &mut Vec<u8>,
    json_len: Option<usize>,
) -> Result<Option<usize>, String> {
    if targets.is_empty() {
        return Ok(json_len);
    }
    let head_len = json_len.ok_or("the response has no binary tensors to place")?;
    let mut head: Value = serde_json::from_slice(&doc[..head_len]).expect("the node's own JSON");
    let tail = &doc[head_len..];
    let mut kept = Vec::new();
    let mut cursor = 0usize;
    let outputs = head.get_mut("outputs").and_then(Value::as_array_mut);
    for output in outputs.into_iter().flatten() {
        let name = output
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let Some(params) = params_of(output) else {
            continue;
        };
        let Some(n) = params.get("binary_data_size").and_then(Value::as_u64) else {
            continue;
        };
        let end = cursor + n as usize;
        assert!(end <= tail.len(), "the encoder's sizes add up to its tail");
        let bytes = &tail[cursor..end];
        cursor = end;
        match targets.iter().find(|t| t.name == name) {
            None => kept.extend_from_slice(bytes),
            Some(t) => {
                t.write(bytes)?;
                params.clear();
                for (key, value) in t.placed(n) {
                    params.insert(key.into(), value);
                }
            }
        }
    }
    let mut placed = serde_json::to_vec(&head).expect("serialising JSON cannot fail");
    let new_len = placed.len();
    placed.extend_from_slice(&kept);
    *doc = placed;
    Ok((!kept.is_empty()).then_some(new_len))
}
