//! The classification extension: an output asked for with a class count
//! (`parameters.classification` over HTTP, `parameters["classification"]` over gRPC)
//! is answered as its top classes instead of its scores — per item of the batch, the
//! `class_count` largest elements, largest first, each a BYTES string
//! `"<value>:<index>"`, or `"<value>:<index>:<label>"` when the model has a label
//! file for the output (line k labels class k). Values are written as Triton writes
//! them (C++ `std::to_string`: six decimals for floating types, integers as they are).
//!
//! Only numeric outputs of models that declare their tensors can be classified; any
//! other asked for is refused with 400 when the request is read, never ignored.

use std::borrow::Cow;

use accel::tensors::{push_bytes_element, DataType};
use accel::Accelerator;

use super::outputs::{OutTensor, Requested};

/// Checks every output the request asks to classify, and gives each its labels.
pub(crate) fn prepare(requested: &mut Requested, accel: &dyn Accelerator) -> Result<(), String> {
    let model = &accel.descriptor().name;
    requested.batched = accel.tensors().is_some_and(|t| t.max_batch_size > 0);
    for wanted in requested.list.iter_mut().flatten() {
        if wanted.class_count.is_none() {
            continue;
        }
        let Some(spec) = accel
            .tensors()
            .and_then(|t| t.outputs.iter().find(|s| s.name == wanted.name))
        else {
            return Err(format!(
                "output {} of model {model} cannot be classified: only the outputs of models that declare their tensors (a model repository's) can",
                wanted.name
            ));
        };
        if matches!(spec.datatype, DataType::Bytes | DataType::Bool) {
            return Err(format!(
                "output {} of model {model} cannot be classified: it is {}, classes are ranked by number",
                wanted.name,
                spec.datatype.name()
            ));
        }
        wanted.labels = accel.labels(&wanted.name);
    }
    Ok(())
}

/// The top classes of `t` (asked for with a class count): a BYTES tensor of shape
/// `[batch, k]` (`[k]` without a batch axis), `k` the class count or the item's
/// element count if smaller.
pub(crate) fn top<'o>(t: OutTensor<'o>, batched: bool) -> OutTensor<'o> {
    let count = t.wanted.class_count.expect("asked to classify") as usize;
    let items = if batched {
        t.shape.first().copied().unwrap_or(1) as usize
    } else {
        1
    };
    let values = scored(t.datatype, &t.bytes);
    let per_item = values.len() / items.max(1);
    let k = count.min(per_item);
    let mut bytes = Vec::new();
    for item in values.chunks(per_item.max(1)).take(items) {
        let mut order: Vec<usize> = (0..item.len()).collect();
        // Largest first; a stable sort keeps equal scores in index order, NaN last.
        order.sort_by(|&a, &b| {
            let (x, y) = (item[a].0, item[b].0);
            y.partial_cmp(&x)
                .unwrap_or_else(|| x.is_nan().cmp(&y.is_nan()))
        });
        for &index in order.iter().take(k) {
            let mut text = format!("{}:{index}", item[index].1);
            if let Some(label) = t.wanted.labels.as_ref().and_then(|l| l.get(index)) {
                text.push(':');
                text.push_str(label);
            }
            push_bytes_element(text.as_bytes(), &mut bytes);
        }
    }
    let shape = if batched {
        vec![items as u64, k as u64]
    } else {
        vec![k as u64]
    };
    OutTensor {
        wanted: t.wanted,
        datatype: DataType::Bytes,
        shape,
        bytes: Cow::Owned(bytes),
    }
}

/// Each element of a numeric tensor: its value (for ranking) and its text.
fn scored(dt: DataType, bytes: &[u8]) -> Vec<(f64, String)> {
    use DataType as D;
    let size = dt.size();
    bytes
        .chunks_exact(size)
        .map(|c| {
            let int = |v: i128| (v as f64, v.to_string());
            let float = |v: f64| (v, format!("{v:.6}"));
            match dt {
                D::Uint8 => int(c[0].into()),
                D::Int8 => int((c[0] as i8).into()),
                D::Uint16 => int(u16::from_le_bytes([c[0], c[1]]).into()),
                D::Int16 => int(i16::from_le_bytes([c[0], c[1]]).into()),
                D::Uint32 => int(u32::from_le_bytes(c.try_into().expect("4")).into()),
                D::Int32 => int(i32::from_le_bytes(c.try_into().expect("4")).into()),
                D::Uint64 => int(u64::from_le_bytes(c.try_into().expect("8")).into()),
                D::Int64 => int(i64::from_le_bytes(c.try_into().expect("8")).into()),
                D::Fp16 => float(half::f16::from_le_bytes([c[0], c[1]]).to_f64()),
                D::Bf16 => float(half::bf16::from_le_bytes([c[0], c[1]]).to_f64()),
                D::Fp32 => float(f32::from_le_bytes(c.try_into().expect("4")).into()),
                D::Fp64 => float(f64::from_le_bytes(c.try_into().expect("8"))),
                D::Bool | D::Bytes => unreachable!("refused by prepare"),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::oip::outputs::Wanted;
    use accel::tensors::bytes_elements;
    use std::sync::Arc;

    fn tensor(
        scores: &[f32],
        shape: Vec<u64>,
        k: u32,
        labels: Option<&[&str]>,
    ) -> OutTensor<'static> {
        OutTensor {
            wanted: Wanted {
                name: "logits".into(),
                binary: false,
                class_count: Some(k),
                labels: labels.map(|l| l.iter().map(|s| s.to_string()).collect::<Arc<[String]>>()),
            },
            datatype: DataType::Fp32,
            shape,
            bytes: Cow::Owned(scores.iter().flat_map(|v| v.to_le_bytes()).collect()),
        }
    }

    fn strings(t: &OutTensor<'_>) -> Vec<String> {
        bytes_elements(&t.bytes)
            .map(|e| String::from_utf8(e.unwrap().to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn the_top_classes_of_each_item_as_triton_writes_them() {
        let t = top(
            tensor(
                &[0.1, 0.7, 0.2, 3.0, 1.0, 2.0],
                vec![2, 3],
                2,
                Some(&["a", "b", "c"]),
            ),
            true,
        );
        assert_eq!(t.datatype, DataType::Bytes);
        assert_eq!(t.shape, [2, 2]);
        assert_eq!(
            strings(&t),
            [
                "0.700000:1:b",
                "0.200000:2:c",
                "3.000000:0:a",
                "2.000000:2:c"
            ]
        );
        // No labels, no batch axis, more classes asked than there are.
        let t = top(tensor(&[1.0, 5.0], vec![2], 10, None), false);
        assert_eq!(t.shape, [2]);
        assert_eq!(strings(&t), ["5.000000:1", "1.000000:0"]);
        // A label file shorter than the classes: the rest go without.
        let t = top(tensor(&[1.0, 5.0], vec![2], 1, Some(&["only"])), false);
        assert_eq!(strings(&t), ["5.000000:1"]);
        assert_eq!(scored(DataType::Int64, &(-3i64).to_le_bytes())[0].1, "-3");
    }
}
