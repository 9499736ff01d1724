//! Tensor elements between a payload's little-endian bytes and an engine's typed
//! values: the one place both engines (tract, ONNX Runtime) read and write them.
//!
//! Not for BYTES (strings): each engine holds those its own way, see their modules.

/// An element type with a fixed little-endian size.
pub(crate) trait Le: Copy {
    const SIZE: usize;
    /// The value in `bytes` (exactly `SIZE` of them).
    fn from_le(bytes: &[u8]) -> Self;
    /// Appends the value's little-endian bytes.
    fn put_le(self, out: &mut Vec<u8>);
}

macro_rules! le_number {
    ($($t:ty),*) => {$(
        impl Le for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn from_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("a whole element"))
            }
            fn put_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

le_number!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

/// A BOOL element is one byte: 0 is false, anything else true (as Triton reads it).
impl Le for bool {
    const SIZE: usize = 1;
    fn from_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
    fn put_le(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
}

/// The elements of `bytes`, a whole number of `T`.
pub(crate) fn decode<T: Le>(bytes: &[u8]) -> Vec<T> {
    debug_assert_eq!(bytes.len() % T::SIZE, 0);
    bytes.chunks_exact(T::SIZE).map(T::from_le).collect()
}

/// Appends every element of `values`.
pub(crate) fn encode<T: Le>(values: &[T], out: &mut Vec<u8>) {
    out.reserve(values.len() * T::SIZE);
    values.iter().for_each(|v| v.put_le(out));
}

/// The strings of a BYTES tensor's bytes, each UTF-8 (what both engines' string
/// tensors hold), or which element is not.
pub(crate) fn strings(bytes: &[u8]) -> Result<Vec<String>, String> {
    accel::tensors::bytes_elements(bytes)
        .enumerate()
        .map(|(k, e)| {
            let e = e?;
            String::from_utf8(e.to_vec()).map_err(|_| {
                format!("BYTES element {k} is not UTF-8, which the engine's string tensors need")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_round_trip_little_endian() {
        let mut out = Vec::new();
        encode(&[-2i16, 300], &mut out);
        assert_eq!(out, [0xfe, 0xff, 0x2c, 0x01]);
        assert_eq!(decode::<i16>(&out), [-2, 300]);
        assert_eq!(decode::<bool>(&[0, 1, 7]), [false, true, true]);
        let mut b = Vec::new();
        encode(&[true, false], &mut b);
        assert_eq!(b, [1, 0]);
        let mut s = Vec::new();
        accel::tensors::push_bytes_element(b"hi", &mut s);
        accel::tensors::push_bytes_element(&[0xff], &mut s);
        assert!(strings(&s).unwrap_err().contains("element 1 is not UTF-8"));
        assert_eq!(strings(&s[..6]).unwrap(), ["hi"]);
    }
}
