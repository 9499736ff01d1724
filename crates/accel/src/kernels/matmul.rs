//! `matmul`: `C = A·B` for row-major `n × n` `f32` matrices, blocked for the caches.
//!
//! The loop nest is the one of BLIS and GotoBLAS. `B` is copied ("packed") a
//! `KC × NC` block at a time into panels `NR` columns wide, sized to stay in L2; `A` a
//! `MC × KC` block at a time into panels `MR` rows high; and a register-blocked
//! micro-kernel multiplies one `A` panel by one `B` panel into an `MR × NR` tile of
//! accumulators that never leaves the registers until it is added to `C`. With AVX2
//! that tile is 12 vector registers of the 16, and each step of the micro-kernel
//! loads two vectors of `B` and six broadcasts of `A` for 12 fused multiply-adds.
//!
//! The micro-kernel is the one place written with `std::arch` intrinsics: left to the
//! auto-vectoriser, the same loop came out either as the 12-register kernel or as
//! scalar code with the tile in memory (ten times slower), depending on unrelated
//! inlining decisions. Everything around it is portable code, compiled for AVX2 in
//! the same function so the packing loops vectorise too. Machines without AVX2 and
//! FMA get a portable micro-kernel.
//! Packing is also where the little-endian bytes of the payload are decoded, so the
//! inputs are never copied into an `f32` vector of their own, and `C` is accumulated
//! in the output buffer.
//!
//! Accuracy: each tile starts from zero for every `KC` slice of the inner dimension and
//! is then added to `C`, so an element of `C` is a sum of `n / KC` partial sums of at
//! most `KC` products each. The rounding error is then at most about
//! `(KC + n / KC) · 2^-24 · Σₖ|aᵢₖ·bₖⱼ|`, under the spec's `1e-4 · Σₖ|aᵢₖ·bₖⱼ|` up to
//! `n ≈ 360,000` (a payload of about 1 TB), where the worst case of one running sum
//! would pass it from `n ≈ 1700` on.

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

/// Multiplies the two `n × n` matrices of `input` (`A` then `B`, `8·n²` bytes) into
/// `out` (`4·n²` bytes), all little-endian `f32`, row-major.
pub(super) fn matmul(input: &[u8], n: usize, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = Avx2Fma::detect() {
        // SAFETY: `blocked_avx2` only needs AVX2 and FMA, which `detect` just found.
        return unsafe { blocked_avx2(kernel, input, n, out) };
    }
    blocked(Portable, input, n, out, BLOCKING);
}

/// The whole loop nest compiled for AVX2, so that packing and tile updates vectorise
/// as well; the caller must have checked the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn blocked_avx2(kernel: Avx2Fma, input: &[u8], n: usize, out: &mut [u8]) {
    blocked(kernel, input, n, out, BLOCKING);
}

/// An `MR × NR` micro-kernel: the product of an `A` panel and a `B` panel of the same
/// depth.
trait MicroKernel: Copy {
    fn tile(self, a_panel: &[f32], b_panel: &[f32]) -> [[f32; NR]; MR];
}

/// Plain Rust, for CPUs without AVX2 and FMA.
#[derive(Clone, Copy)]
struct Portable;

impl MicroKernel for Portable {
    #[inline(always)]
    fn tile(self, a_panel: &[f32], b_panel: &[f32]) -> [[f32; NR]; MR] {
        let mut acc = [[0f32; NR]; MR];
        for (a, b) in a_panel.chunks_exact(MR).zip(b_panel.chunks_exact(NR)) {
            for (acc_row, &a_i) in acc.iter_mut().zip(a) {
                for (acc_ij, &b_j) in acc_row.iter_mut().zip(b) {
                    *acc_ij += a_i * b_j;
                }
            }
        }
        acc
    }
}

/// The AVX2 + FMA micro-kernel. A value of this type is proof that the CPU has both:
/// the only way to get one is [`Avx2Fma::detect`].
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx2Fma(());

#[cfg(target_arch = "x86_64")]
impl Avx2Fma {
    fn detect() -> Option<Avx2Fma> {
        let found = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
        found.then_some(Avx2Fma(()))
    }
}

#[cfg(target_arch = "x86_64")]
impl MicroKernel for Avx2Fma {
    #[inline(always)]
    fn tile(self, a_panel: &[f32], b_panel: &[f32]) -> [[f32; NR]; MR] {
        // SAFETY: `self` exists, so the CPU has AVX2 and FMA.
        unsafe { tile_avx2_fma(a_panel, b_panel) }
    }
}

/// Twelve accumulators of eight lanes; per step of depth, two loads of `B`, six
/// broadcasts of `A` and twelve fused multiply-adds. Needs AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile_avx2_fma(a_panel: &[f32], b_panel: &[f32]) -> [[f32; NR]; MR] {
    use std::arch::x86_64::{
        _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };
    const _: () = assert!(NR == 16, "two vectors of eight f32 per tile row");
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    for (a, b) in a_panel.chunks_exact(MR).zip(b_panel.chunks_exact(NR)) {
        // SAFETY (loads): `b` holds NR = 16 values, so both 8-value loads are in bounds.
        let b_low = _mm256_loadu_ps(b.as_ptr());
        let b_high = _mm256_loadu_ps(b[8..].as_ptr());
        for (acc_row, a_i) in acc.iter_mut().zip(a) {
            let a_i = _mm256_broadcast_ss(a_i);
            acc_row[0] = _mm256_fmadd_ps(a_i, b_low, acc_row[0]);
            acc_row[1] = _mm256_fmadd_ps(a_i, b_high, acc_row[1]);
        }
    }
    let mut tile = [[0f32; NR]; MR];
    for (row, acc_row) in tile.iter_mut().zip(&acc) {
        // SAFETY (stores): `row` holds NR = 16 values.
        _mm256_storeu_ps(row.as_mut_ptr(), acc_row[0]);
        _mm256_storeu_ps(row[8..].as_mut_ptr(), acc_row[1]);
    }
    tile
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

#[inline(always)]
fn f32_le(bytes: &[u8]) -> f32 {
    f32::from_le_bytes(bytes.try_into().expect("4 bytes"))
}

#[inline(always)]
fn blocked(kernel: impl MicroKernel, input: &[u8], n: usize, c: &mut [u8], blocking: Blocking) {
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
                        let tile = kernel.tile(a_panel, b_panel);
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
        blocked(Portable, &input, n, &mut outs[1], TINY);
        #[cfg(target_arch = "x86_64")]
        if let Some(kernel) = Avx2Fma::detect() {
            blocked(kernel, &input, n, &mut outs[2], TINY);
        } else {
            outs[2] = outs[1].clone();
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            outs[2] = outs[1].clone();
        }
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
