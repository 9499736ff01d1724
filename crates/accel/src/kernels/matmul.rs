//! `matmul`: `C = A·B` for row-major `n × n` `f32` matrices, blocked for the caches.
//!
//! The loop nest is the one of BLIS and GotoBLAS. `B` is copied ("packed") a
//! `KC × NC` block at a time into panels `NR` columns wide, sized to stay in L2; `A` a
//! `MC × KC` block at a time into panels `MR` rows high; and a register-blocked
//! micro-kernel multiplies one `A` panel by one `B` panel into an `MR × NR` tile of
//! accumulators that never leaves the registers until it is added to `C`. With AVX2
//! that tile is 12 vector registers of the 16, and each step of the micro-kernel
//! loads two vectors of `B` and six broadcasts of `A` for 12 fused multiply-adds.
//! Packing is also where the little-endian bytes of the payload are decoded, so the
//! inputs are never copied into an `f32` vector of their own, and `C` is accumulated
//! in the output buffer.
//!
//! Accuracy: each tile starts from zero for every `KC` slice of the inner dimension and
//! is then added to `C`, so an element of `C` is a sum of `n / KC` partial sums of at
//! most `KC` products each. The rounding error is then at most about
//! `(KC + n / KC) · 2^-24 · Σₖ|aᵢₖ·bₖⱼ|`, under the spec's `1e-4 · Σₖ|aᵢₖ·bₖⱼ|` for any
//! `n` a payload can carry (up to about 300,000), where one running sum would pass it
//! from `n ≈ 1700` on.

/// Rows of `A` per micro-kernel tile.
const MR: usize = 6;
/// Columns of `B` per micro-kernel tile: two 256-bit vectors of `f32`.
const NR: usize = 16;

/// Cache block sizes. The production ones keep a `KC × NR` panel of `B` (16 KiB) in
/// L1, an `MC × KC` block of `A` (96 KiB) in L2 next to the `KC × NC` block of `B`
/// (1 MiB) that the micro-kernels stream through.
#[derive(Clone, Copy, Debug)]
struct Blocking {
    /// Rows of `A` per packed block; a multiple of `MR`.
    mc: usize,
    /// Depth (inner dimension) per packed block.
    kc: usize,
    /// Columns of `B` per packed block; a multiple of `NR`.
    nc: usize,
}

const BLOCKING: Blocking = Blocking {
    mc: 96,
    kc: 256,
    nc: 1024,
};

multiversion! {
    /// Multiplies the two `n × n` matrices of `input` (`A` then `B`, `8·n²` bytes) into
    /// `out` (`4·n²` bytes), all little-endian `f32`, row-major.
    pub(super) fn matmul(input: &[u8], n: usize, out: &mut [u8]) = matmul_fused, matmul_unfused;
}

/// With FMA: `f32::mul_add` is one instruction there, and a library call without it.
#[inline(always)]
fn matmul_fused(input: &[u8], n: usize, out: &mut [u8]) {
    blocked::<true>(input, n, out, BLOCKING);
}

#[inline(always)]
fn matmul_unfused(input: &[u8], n: usize, out: &mut [u8]) {
    blocked::<false>(input, n, out, BLOCKING);
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

#[inline(always)]
fn f32_le(bytes: &[u8]) -> f32 {
    f32::from_le_bytes(bytes.try_into().expect("4 bytes"))
}

#[inline(always)]
fn blocked<const FUSED: bool>(input: &[u8], n: usize, c: &mut [u8], blocking: Blocking) {
    let Blocking {
        mc: mc_max,
        kc: kc_max,
        nc: nc_max,
    } = blocking;
    assert!(mc_max % MR == 0 && nc_max % NR == 0 && kc_max >= 1);
    assert_eq!(input.len(), 8 * n * n);
    assert_eq!(c.len(), 4 * n * n);
    c.fill(0);
    let (a, b) = input.split_at(4 * n * n);
    let depth = kc_max.min(n);
    let mut a_pack = vec![0f32; round_up(mc_max.min(n), MR) * depth];
    let mut b_pack = vec![0f32; round_up(nc_max.min(n), NR) * depth];
    for jc in (0..n).step_by(nc_max) {
        let nc = nc_max.min(n - jc);
        for pc in (0..n).step_by(kc_max) {
            let kc = kc_max.min(n - pc);
            pack_b(b, n, (pc, kc), (jc, nc), &mut b_pack);
            for ic in (0..n).step_by(mc_max) {
                let mc = mc_max.min(n - ic);
                pack_a(a, n, (ic, mc), (pc, kc), &mut a_pack);
                for jr in (0..nc).step_by(NR) {
                    let b_panel = &b_pack[jr * kc..(jr + NR) * kc];
                    for ir in (0..mc).step_by(MR) {
                        let a_panel = &a_pack[ir * kc..(ir + MR) * kc];
                        let tile = micro_kernel::<FUSED>(a_panel, b_panel);
                        let size = (MR.min(mc - ir), NR.min(nc - jr));
                        add_tile(c, n, (ic + ir, jc + jr), size, &tile);
                    }
                }
            }
        }
    }
}

/// Packs rows `pc..pc + kc`, columns `jc..jc + nc` of `B` into panels of `NR` columns,
/// each stored `k`-major (`NR` values per `k`), zero-padded past column `n`.
#[inline(always)]
fn pack_b(
    b: &[u8],
    n: usize,
    (pc, kc): (usize, usize),
    (jc, nc): (usize, usize),
    pack: &mut [f32],
) {
    for jr in (0..nc).step_by(NR) {
        let cols = NR.min(nc - jr);
        let panel = &mut pack[jr * kc..(jr + NR) * kc];
        for (k, dst) in panel.chunks_exact_mut(NR).enumerate() {
            let start = ((pc + k) * n + jc + jr) * 4;
            let src = &b[start..start + cols * 4];
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32_le(s);
            }
            dst[cols..].fill(0.0);
        }
    }
}

/// Packs rows `ic..ic + mc`, columns `pc..pc + kc` of `A` into panels of `MR` rows,
/// each stored `k`-major (`MR` values per `k`), zero-padded past row `n`.
#[inline(always)]
fn pack_a(
    a: &[u8],
    n: usize,
    (ic, mc): (usize, usize),
    (pc, kc): (usize, usize),
    pack: &mut [f32],
) {
    for ir in (0..mc).step_by(MR) {
        let rows = MR.min(mc - ir);
        let panel = &mut pack[ir * kc..(ir + MR) * kc];
        for i in 0..MR {
            if i < rows {
                let start = ((ic + ir + i) * n + pc) * 4;
                let src = &a[start..start + kc * 4];
                for (k, s) in src.chunks_exact(4).enumerate() {
                    panel[k * MR + i] = f32_le(s);
                }
            } else {
                for k in 0..kc {
                    panel[k * MR + i] = 0.0;
                }
            }
        }
    }
}

/// The `MR × NR` product of an `A` panel and a `B` panel of the same depth. Fixed
/// sizes and no memory traffic besides the two panels let the accumulators live in
/// registers for the whole loop.
#[inline(always)]
fn micro_kernel<const FUSED: bool>(a_panel: &[f32], b_panel: &[f32]) -> [[f32; NR]; MR] {
    let mut acc = [[0f32; NR]; MR];
    for (a, b) in a_panel.chunks_exact(MR).zip(b_panel.chunks_exact(NR)) {
        let a: &[f32; MR] = a.try_into().expect("MR values");
        let b: &[f32; NR] = b.try_into().expect("NR values");
        for (acc_row, &a_i) in acc.iter_mut().zip(a) {
            for (acc_ij, &b_j) in acc_row.iter_mut().zip(b) {
                *acc_ij = if FUSED {
                    a_i.mul_add(b_j, *acc_ij)
                } else {
                    *acc_ij + a_i * b_j
                };
            }
        }
    }
    acc
}

/// Adds the top-left `rows × cols` of `tile` to `C` at `(row, col)`.
#[inline(always)]
fn add_tile(
    c: &mut [u8],
    n: usize,
    (row, col): (usize, usize),
    (rows, cols): (usize, usize),
    tile: &[[f32; NR]; MR],
) {
    for (i, tile_row) in tile.iter().enumerate().take(rows) {
        let start = ((row + i) * n + col) * 4;
        let dst = &mut c[start..start + cols * 4];
        for (d, &v) in dst.chunks_exact_mut(4).zip(tile_row) {
            d.copy_from_slice(&(f32_le(d) + v).to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference;
    use proptest::prelude::*;

    /// Small blocks, so that small matrices cross every block and panel edge.
    const TINY: Blocking = Blocking {
        mc: 12,
        kc: 5,
        nc: 32,
    };

    fn check(a: &[f32], b: &[f32], n: usize) {
        let input: Vec<u8> = a.iter().chain(b).flat_map(|v| v.to_le_bytes()).collect();
        let (want, scale) = reference::matmul(a, b, n);
        let mut outs = [
            vec![0xAAu8; 4 * n * n],
            vec![0; 4 * n * n],
            vec![0; 4 * n * n],
        ];
        matmul(&input, n, &mut outs[0]);
        blocked::<false>(&input, n, &mut outs[1], TINY);
        blocked::<true>(&input, n, &mut outs[2], TINY);
        for out in &outs {
            for (i, ((w, s), g)) in want.iter().zip(&scale).zip(out.chunks_exact(4)).enumerate() {
                let g = f64::from(f32_le(g));
                assert!(
                    (g - w).abs() <= 1e-4 * s + 1e-6,
                    "n {n} C[{i}] = {g:e}, want {w:e}"
                );
            }
        }
    }

    fn pattern(n: usize, seed: usize) -> Vec<f32> {
        (0..n * n)
            .map(|i| ((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.0 - 1.0)
            .collect()
    }

    #[test]
    fn sizes_around_every_edge() {
        for n in [1, 2, 3, 5, 6, 7, 11, 12, 13, 15, 16, 17, 31, 33, 40] {
            check(&pattern(n, 1), &pattern(n, 2), n);
        }
    }

    #[test]
    fn identity_and_exact_small_products() {
        let n = 19;
        let identity: Vec<f32> = (0..n * n)
            .map(|i| if i % (n + 1) == 0 { 1.0 } else { 0.0 })
            .collect();
        let m = pattern(n, 3);
        let input: Vec<u8> = m
            .iter()
            .chain(&identity)
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut out = vec![0; 4 * n * n];
        matmul(&input, n, &mut out);
        let got: Vec<f32> = out.chunks_exact(4).map(f32_le).collect();
        assert_eq!(got, m);
        let two: Vec<u8> = [3.0f32, 5.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut one = vec![0; 4];
        matmul(&two, 1, &mut one);
        assert_eq!(f32_le(&one), 15.0);
    }

    #[test]
    fn production_blocks_past_the_depth_block() {
        // n > KC and > MC: two depth slices and several row blocks.
        let n = BLOCKING.kc + 7;
        check(&pattern(n, 4), &pattern(n, 5), n);
    }

    proptest! {
        #[test]
        fn matches_reference(
            (n, a, b) in (1usize..24).prop_flat_map(|n| {
                let m = prop::collection::vec(-1e3f32..1e3, n * n);
                (Just(n), m.clone(), m)
            })
        ) {
            check(&a, &b, n);
        }
    }
}
