//! The body encoding: little-endian integers, byte strings and lists, each with a
//! `u32` length or count in front.

use super::ProtoError;

/// Little-endian reader over a body slice; every read checks the remaining length.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if self.buf.len() < n {
            return Err(ProtoError::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    pub fn i32(&mut self) -> Result<i32, ProtoError> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    pub fn u64(&mut self) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    /// A `u32` length followed by that many bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8], ProtoError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// A `u32` item count, checked against the bytes left given each item's minimum size,
    /// so that a hostile count cannot make the caller allocate.
    pub fn count(&mut self, item_len_min: usize) -> Result<usize, ProtoError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(item_len_min.max(1)) > self.buf.len() {
            return Err(ProtoError::Truncated);
        }
        Ok(n)
    }
    /// A counted list ([`Reader::count`] with each item's minimum size), each item read
    /// by `item`.
    pub fn list<T>(
        &mut self,
        item_len_min: usize,
        mut item: impl FnMut(&mut Self) -> Result<T, ProtoError>,
    ) -> Result<Vec<T>, ProtoError> {
        let n = self.count(item_len_min)?;
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(item(self)?);
        }
        Ok(items)
    }
    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<(), ProtoError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(ProtoError::TrailingBytes(self.buf.len()))
        }
    }
}

pub fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
pub fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_le_bytes());
}
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}
pub fn put_bytes(out: &mut Vec<u8>, v: &[u8]) {
    put_u32(out, u32::try_from(v.len()).expect("byte string fits u32"));
    out.extend_from_slice(v);
}

/// The item count of a list, written before its items.
pub(super) fn put_count(out: &mut Vec<u8>, n: usize) {
    put_u32(out, u32::try_from(n).expect("list fits u32"));
}

pub(super) fn put_u32_list(out: &mut Vec<u8>, v: &[u32]) {
    put_count(out, v.len());
    for x in v {
        put_u32(out, *x);
    }
}

pub(super) fn u32_list(r: &mut Reader<'_>) -> Result<Vec<u32>, ProtoError> {
    r.list(4, Reader::u32)
}
