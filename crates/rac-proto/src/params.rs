//! Parameter blocks for the built-in accelerators.
//!
//! A call carries 44 bytes of accelerator-specific parameters: little-endian values at
//! fixed offsets, the rest zero (`docs/accelerators.md`). These helpers build the
//! blocks of the built-ins so that clients need not know the offsets; they do not
//! check ranges (`k ≥ 1`, `eps` in (0, 0.5), …): the node does, and answers
//! `BAD_REQUEST` with a reason.

use crate::PARAMS_LEN;

/// Accelerator parameters in their wire layout: little-endian, zero-padded.
pub type ParamBlock = [u8; PARAMS_LEN];

/// The all-zero block, for accelerators without parameters (`echo`, `to_uppercase`,
/// `minmax`) and for control messages.
pub const NONE: ParamBlock = [0; PARAMS_LEN];

/// Writes `value` at `offset`. Panics if `offset + 4 > 44`: offsets are constants of an
/// accelerator's layout, so a bad one is a programming error.
pub fn put_u32(block: &mut ParamBlock, offset: usize, value: u32) {
    block[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

/// Writes `value` at `offset`. Panics if `offset + 4 > 44`.
pub fn put_f32(block: &mut ParamBlock, offset: usize, value: f32) {
    block[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

/// Reads the `u32` at `offset`. Panics if `offset + 4 > 44`.
pub fn get_u32(block: &ParamBlock, offset: usize) -> u32 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&block[offset..offset + 4]);
    u32::from_le_bytes(bytes)
}

/// Reads the `f32` at `offset`. Panics if `offset + 4 > 44`.
pub fn get_f32(block: &ParamBlock, offset: usize) -> f32 {
    f32::from_bits(get_u32(block, offset))
}

/// `topk`: keep the `k` largest values (`k`: u32 at 0, k ≥ 1).
pub fn topk(k: u32) -> ParamBlock {
    let mut block = NONE;
    put_u32(&mut block, 0, k);
    block
}

/// `logit`: clamp epsilon (`eps`: f32 at 0; 0 means 1e-6, otherwise in (0, 0.5)).
pub fn logit(eps: f32) -> ParamBlock {
    let mut block = NONE;
    put_f32(&mut block, 0, eps);
    block
}

/// `sobel`: image size in pixels (`width`: u32 at 0, `height`: u32 at 4, both ≥ 1).
pub fn sobel(width: u32, height: u32) -> ParamBlock {
    let mut block = NONE;
    put_u32(&mut block, 0, width);
    put_u32(&mut block, 4, height);
    block
}

/// `matmul`: matrix order (`n`: u32 at 0, n ≥ 1; the payload is two n × n f32 matrices).
pub fn matmul(n: u32) -> ParamBlock {
    let mut block = NONE;
    put_u32(&mut block, 0, n);
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_put_values_at_their_documented_offsets() {
        let mut expect = [0u8; PARAMS_LEN];
        expect[0] = 3;
        assert_eq!(topk(3), expect);
        assert_eq!(matmul(3), expect);

        let s = sobel(640, 480);
        assert_eq!(&s[0..8], &[0x80, 0x02, 0, 0, 0xe0, 0x01, 0, 0]);
        assert!(s[8..].iter().all(|&b| b == 0));
        assert_eq!((get_u32(&s, 0), get_u32(&s, 4)), (640, 480));

        let l = logit(0.25);
        assert_eq!(&l[0..4], &0.25f32.to_le_bytes());
        assert_eq!(get_f32(&l, 0), 0.25);
        assert!(l[4..].iter().all(|&b| b == 0));
    }

    #[test]
    fn last_slot_is_writable_and_beyond_panics() {
        let mut block = NONE;
        put_u32(&mut block, PARAMS_LEN - 4, u32::MAX);
        assert_eq!(get_u32(&block, PARAMS_LEN - 4), u32::MAX);
        let result = std::panic::catch_unwind(|| {
            let mut block = NONE;
            put_u32(&mut block, PARAMS_LEN - 3, 1);
        });
        assert!(result.is_err());
    }
}
