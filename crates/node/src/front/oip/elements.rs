//! Tensor elements in the protocol's encodings, and back: the one decoder per
//! encoding that every front end uses, each feeding the one representation a call
//! carries (`accel::tensors`: little-endian elements, BYTES each its 4-byte length
//! then its bytes).
//!
//! - the binary form (HTTP binary tensor data, gRPC `raw_input_contents` /
//!   `raw_output_contents`) *is* that representation: [`check_binary`] only checks it;
//! - JSON `data` arrays (HTTP): [`push_json`] and [`to_json`];
//! - gRPC typed `contents` are read by `front::grpc::tensor` through [`typed_field`]
//!   and [`push_element`], so the range checks are these.
//!
//! Not here: which tensors a model has, shapes and batches (`declared`, `infer`).

use accel::tensors::{self, DataType};
use serde_json::Value;

/// The protocol's error for an input sent with another datatype than the model's,
/// in Triton's words (its clients match on them), with netaccel's own sentence after
/// (which netaccel's clients and tests match on).
pub(crate) fn wrong_datatype(model: &str, input: &str, given: &str, want: DataType) -> String {
    let want = want.name();
    format!(
        "inference input '{input}' data-type is '{given}', but model '{model}' expects '{want}' \
         (input {input} of model {model} has datatype {given}, expected {want})"
    )
}

/// Checks that `bytes` are `count` elements of `dt` in the binary form: `count`
/// times the element size, or for BYTES `count` whole length-prefixed elements and
/// nothing more. The error says what was found.
pub(crate) fn check_binary(dt: DataType, count: usize, bytes: &[u8]) -> Result<(), String> {
    match dt.fixed_size() {
        Some(size) if bytes.len() == count * size => Ok(()),
        Some(size) => Err(format!(
            "{} bytes, {count} elements of {} take {}",
            bytes.len(),
            dt.name(),
            count * size
        )),
        None => {
            let span = tensors::bytes_span(bytes, count)?;
            if span == bytes.len() {
                Ok(())
            } else {
                Err(format!(
                    "{} bytes after its {count} BYTES elements",
                    bytes.len() - span
                ))
            }
        }
    }
}

/// One element given as a number, a bool or a string (JSON, or a gRPC typed field
/// read into one of these).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scalar<'a> {
    Bool(bool),
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    Bytes(&'a [u8]),
}

/// Appends `value` as one element of `dt`; `None` when it is not a value of `dt`
/// (out of range, or of another kind).
pub(crate) fn push_element(dt: DataType, value: Scalar<'_>, out: &mut Vec<u8>) -> Option<()> {
    use DataType as D;
    let int = |v: Scalar<'_>| -> Option<i128> {
        match v {
            Scalar::Unsigned(u) => Some(i128::from(u)),
            Scalar::Signed(s) => Some(i128::from(s)),
            _ => None,
        }
    };
    let float = |v: Scalar<'_>| -> Option<f64> {
        match v {
            Scalar::Float(f) => Some(f),
            Scalar::Unsigned(u) => Some(u as f64),
            Scalar::Signed(s) => Some(s as f64),
            _ => None,
        }
    };
    macro_rules! int_as {
        ($t:ty) => {
            out.extend_from_slice(&<$t>::try_from(int(value)?).ok()?.to_le_bytes())
        };
    }
    match dt {
        D::Bool => match value {
            Scalar::Bool(b) => out.push(u8::from(b)),
            _ => return None,
        },
        D::Uint8 => int_as!(u8),
        D::Uint16 => int_as!(u16),
        D::Uint32 => int_as!(u32),
        D::Uint64 => int_as!(u64),
        D::Int8 => int_as!(i8),
        D::Int16 => int_as!(i16),
        D::Int32 => int_as!(i32),
        D::Int64 => int_as!(i64),
        D::Fp16 => out.extend_from_slice(&half::f16::from_f64(float(value)?).to_le_bytes()),
        D::Bf16 => out.extend_from_slice(&half::bf16::from_f64(float(value)?).to_le_bytes()),
        D::Fp32 => out.extend_from_slice(&(float(value)? as f32).to_le_bytes()),
        D::Fp64 => out.extend_from_slice(&float(value)?.to_le_bytes()),
        D::Bytes => match value {
            Scalar::Bytes(b) => tensors::push_bytes_element(b, out),
            _ => return None,
        },
    }
    Some(())
}

/// Appends the elements of JSON `data` (flat or nested row-major arrays; BYTES as
/// strings, FP16/BF16 as numbers) as elements of `dt`, at most `count` of them: more
/// is an error naming `input`. Returns how many there were.
pub(crate) fn push_json(
    data: &Value,
    dt: DataType,
    count: usize,
    input: &str,
    out: &mut Vec<u8>,
) -> Result<usize, String> {
    let mut pushed = 0;
    push_json_into(data, dt, count, input, out, &mut pushed)?;
    debug_assert!(pushed <= count);
    Ok(pushed)
}

fn push_json_into(
    data: &Value,
    dt: DataType,
    count: usize,
    input: &str,
    out: &mut Vec<u8>,
    pushed: &mut usize,
) -> Result<(), String> {
    if let Value::Array(items) = data {
        for item in items {
            push_json_into(item, dt, count, input, out, pushed)?;
        }
        return Ok(());
    }
    if *pushed == count {
        return Err(format!(
            "input {input} has more data elements than its shape"
        ));
    }
    let scalar = match data {
        Value::Bool(b) => Some(Scalar::Bool(*b)),
        Value::Number(n) => n
            .as_u64()
            .map(Scalar::Unsigned)
            .or_else(|| n.as_i64().map(Scalar::Signed))
            .or_else(|| n.as_f64().map(Scalar::Float)),
        Value::String(s) => Some(Scalar::Bytes(s.as_bytes())),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    };
    scalar
        .and_then(|s| push_element(dt, s, out))
        .ok_or_else(|| format!("input {input}: {data} is not a {} value", dt.name()))?;
    *pushed += 1;
    Ok(())
}

/// The elements of `bytes` (binary form, whole elements of `dt`) as a flat JSON
/// array: numbers (a NaN or infinity has no JSON number: null), bools, and for
/// BYTES strings (bytes that are not UTF-8 are replaced, as JSON holds text only).
pub(crate) fn to_json(dt: DataType, bytes: &[u8]) -> Value {
    use DataType as D;
    macro_rules! each {
        ($n:literal, $f:expr) => {
            Value::Array(
                bytes
                    .chunks_exact($n)
                    .map(|c| Value::from($f(c.try_into().expect("a whole element"))))
                    .collect(),
            )
        };
    }
    match dt {
        D::Bool => Value::Array(bytes.iter().map(|&b| Value::Bool(b != 0)).collect()),
        D::Uint8 => Value::from(bytes.to_vec()),
        D::Uint16 => each!(2, u16::from_le_bytes),
        D::Uint32 => each!(4, u32::from_le_bytes),
        D::Uint64 => each!(8, u64::from_le_bytes),
        D::Int8 => Value::Array(bytes.iter().map(|&b| Value::from(b as i8)).collect()),
        D::Int16 => each!(2, i16::from_le_bytes),
        D::Int32 => each!(4, i32::from_le_bytes),
        D::Int64 => each!(8, i64::from_le_bytes),
        D::Fp16 => each!(2, |c| half::f16::from_le_bytes(c).to_f32()),
        D::Bf16 => each!(2, |c| half::bf16::from_le_bytes(c).to_f32()),
        D::Fp32 => each!(4, f32::from_le_bytes),
        D::Fp64 => each!(8, f64::from_le_bytes),
        D::Bytes => Value::Array(
            tensors::bytes_elements(bytes)
                .map_while(Result::ok)
                .map(|e| Value::from(String::from_utf8_lossy(e).into_owned()))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn json_bytes(dt: DataType, data: Value, count: usize) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        let n = push_json(&data, dt, count, "X", &mut out)?;
        assert_eq!(n, count);
        Ok(out)
    }

    #[test]
    fn every_datatype_round_trips_through_json() {
        let cases = [
            (DataType::Bool, json!([true, false])),
            (DataType::Uint8, json!([0, 255])),
            (DataType::Uint16, json!([1, 65535])),
            (DataType::Uint32, json!([2, 4294967295u64])),
            (DataType::Uint64, json!([3, u64::MAX])),
            (DataType::Int8, json!([-128, 127])),
            (DataType::Int16, json!([-32768, 5])),
            (DataType::Int32, json!([-7, i32::MAX])),
            (DataType::Int64, json!([i64::MIN, 9])),
            (DataType::Fp16, json!([1.5, -2.0])),
            (DataType::Bf16, json!([0.5, 256.0])),
            (DataType::Fp32, json!([0.25, -1.0e10])),
            (DataType::Fp64, json!([1.0e-300, 3.5])),
            (DataType::Bytes, json!(["", "héllo"])),
        ];
        for (dt, data) in cases {
            let bytes = json_bytes(dt, data.clone(), 2).unwrap();
            check_binary(dt, 2, &bytes).unwrap();
            assert_eq!(to_json(dt, &bytes), data, "{dt:?}");
        }
        assert_eq!(
            json_bytes(DataType::Fp16, json!([1.0]), 1).unwrap(),
            [0x00, 0x3c]
        );
        assert_eq!(
            json_bytes(DataType::Bf16, json!([1.0]), 1).unwrap(),
            [0x80, 0x3f]
        );
        assert_eq!(
            json_bytes(DataType::Bytes, json!([["ab"]]), 1).unwrap(),
            [2, 0, 0, 0, b'a', b'b']
        );
    }

    #[test]
    fn values_out_of_range_or_of_another_kind_are_refused() {
        for (dt, v) in [
            (DataType::Int8, json!(128)),
            (DataType::Uint16, json!(-1)),
            (DataType::Uint64, json!(1.5)),
            (DataType::Bool, json!(1)),
            (DataType::Bytes, json!(7)),
            (DataType::Fp32, json!("1")),
            (DataType::Fp64, json!(null)),
        ] {
            let e = json_bytes(dt, json!([v]), 1).unwrap_err();
            assert!(e.contains(&format!("is not a {} value", dt.name())), "{e}");
        }
        let e = json_bytes(DataType::Int16, json!([1, 2]), 1).unwrap_err();
        assert!(e.contains("more data elements"), "{e}");
    }

    #[test]
    fn binary_tensors_are_checked_element_by_element() {
        assert!(check_binary(DataType::Int64, 2, &[0; 16]).is_ok());
        let e = check_binary(DataType::Int64, 2, &[0; 12]).unwrap_err();
        assert!(e.contains("12 bytes, 2 elements of INT64 take 16"), "{e}");
        let mut s = Vec::new();
        tensors::push_bytes_element(b"ab", &mut s);
        assert!(check_binary(DataType::Bytes, 1, &s).is_ok());
        assert!(check_binary(DataType::Bytes, 2, &s).is_err());
        s.push(0);
        assert!(check_binary(DataType::Bytes, 1, &s)
            .unwrap_err()
            .contains("1 bytes after"));
        assert!(wrong_datatype("m", "x", "FP32", DataType::Int8)
            .starts_with("inference input 'x' data-type is 'FP32', but model 'm' expects 'INT8'"));
    }
}
