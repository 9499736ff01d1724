//! The streaming kernels: one pass (two for minmax) over a payload of bytes or
//! little-endian `f32`, writing straight into the output buffer.
//!
//! Each inner loop is written as plain element-wise code without branches that the
//! compiler turns into vector instructions: conditionals are selects, reductions keep
//! one accumulator per vector lane, and input is read with `from_le_bytes` (a plain
//! load on little-endian machines) instead of being copied into a `Vec<f32>` first.

use std::f32::consts::{FRAC_1_SQRT_2, LN_2};

/// Floats per step of the lane-parallel loops: two 256-bit vectors, so that two
/// independent chains keep the vector units busy.
const LANES: usize = 16;

/// Bytes per step of the lane-parallel loops.
const STEP: usize = LANES * 4;

fn f32_at(bytes: &[u8], index: usize) -> f32 {
    f32::from_le_bytes(bytes[index * 4..index * 4 + 4].try_into().expect("4 bytes"))
}

multiversion! {
    /// `a`–`z` minus 0x20, every other byte unchanged. `out` has the length of `input`.
    pub(super) fn to_uppercase(input: &[u8], out: &mut [u8]) = to_uppercase_body;
}

#[inline(always)]
fn to_uppercase_body(input: &[u8], out: &mut [u8]) {
    assert_eq!(input.len(), out.len());
    for (o, &b) in out.iter_mut().zip(input) {
        // Bit 5 is the case bit of ASCII letters; set the mask only for `a`–`z`.
        let lower = (b.wrapping_sub(b'a') < 26) as u8;
        *o = b ^ (lower << 5);
    }
}

/// What `logit` needs to know about its clamp, worked out once per call.
#[derive(Clone, Copy, Debug)]
pub(super) struct LogitClamp {
    /// Inputs `<= eps` are clamped to `eps`.
    eps: f32,
    /// The smallest `f32` that is `>= 1 - eps` in exact arithmetic: inputs `>= high`
    /// are clamped to `1 - eps`. (`1.0 - eps` in `f32` would round, and for the default
    /// `eps = 1e-6` that rounding alone moves the clamped output by about 0.013.)
    high: f32,
    /// Output for clamped-low inputs, `ln(eps / (1 - eps))`.
    low_out: f32,
    /// Output for clamped-high inputs, `ln((1 - eps) / eps)`.
    high_out: f32,
}

impl LogitClamp {
    /// `eps` must be in `(0, 0.5)`.
    pub(super) fn new(eps: f32) -> LogitClamp {
        assert!(eps > 0.0 && eps < 0.5, "eps {eps} out of (0, 0.5)");
        let eps64 = f64::from(eps);
        let one_minus_eps = 1.0 - eps64;
        let mut high = one_minus_eps as f32;
        if f64::from(high) < one_minus_eps {
            // Rounded down: the next f32 up is the first one at or above 1 - eps.
            high = f32::from_bits(high.to_bits() + 1);
        }
        // ln((1 - eps) / eps) with 1 - eps kept exact through ln_1p: for eps below
        // about 2^-29, 1 - eps is not exact even in f64.
        let high_out64 = (-eps64).ln_1p() - eps64.ln();
        LogitClamp {
            eps,
            high,
            low_out: -high_out64 as f32,
            high_out: high_out64 as f32,
        }
    }
}

multiversion! {
    /// `ln(c / (1 - c))` with `c = clamp(x, eps, 1 - eps)` for each little-endian `f32`
    /// of `input`, NaN in giving NaN out. `input.len()` is a multiple of 4 and equals
    /// `out.len()`.
    pub(super) fn logit(input: &[u8], out: &mut [u8], clamp: LogitClamp)
        = logit_fused, logit_unfused;
}

/// With FMA the polynomial takes one instruction per coefficient instead of two;
/// without it `f32::mul_add` would be a library call, so the portable build does not.
#[inline(always)]
fn logit_fused(input: &[u8], out: &mut [u8], clamp: LogitClamp) {
    logit_body::<true>(input, out, clamp);
}

#[inline(always)]
fn logit_unfused(input: &[u8], out: &mut [u8], clamp: LogitClamp) {
    logit_body::<false>(input, out, clamp);
}

#[inline(always)]
fn logit_body<const FUSED: bool>(input: &[u8], out: &mut [u8], clamp: LogitClamp) {
    assert_eq!(input.len(), out.len());
    assert_eq!(input.len() % 4, 0);
    for (o, i) in out.chunks_exact_mut(4).zip(input.chunks_exact(4)) {
        let x = f32::from_le_bytes(i.try_into().expect("4 bytes"));
        o.copy_from_slice(&logit_one::<FUSED>(x, clamp).to_le_bytes());
    }
}

#[inline(always)]
fn logit_one<const FUSED: bool>(x: f32, clamp: LogitClamp) -> f32 {
    // For x in (eps, 1 - eps) the ratio is within 1.5 ulp: 1 - x is exact for x >= 0.5
    // and has a relative error of 2^-24 below, and the division rounds once. That
    // keeps ln(ratio) within about 2e-7 of the exact logit, so one logarithm of the
    // ratio is as good as ln(x) - ln(1 - x) and half the work. Lanes outside that
    // range compute garbage that the selects below throw away. `x * 0.0` is ±0, except
    // for NaN and ±inf where it is NaN: adding it turns NaN in into NaN out in two
    // instructions, and the clamps then replace the NaN of ±inf.
    let y = ln_positive::<FUSED>(x / (1.0 - x)) + x * 0.0;
    let y = if x <= clamp.eps { clamp.low_out } else { y };
    if x >= clamp.high {
        clamp.high_out
    } else {
        y
    }
}

/// Natural logarithm of a positive finite `r`, subnormals included, with an error
/// of a few ulp (Cephes' `logf`: a degree-8 polynomial on `[√½ - 1, √2 - 1]`).
/// Any other input gives an unspecified value, never a panic.
#[inline(always)]
fn ln_positive<const FUSED: bool>(r: f32) -> f32 {
    // Bring subnormals into the normal range so that the exponent bits are meaningful.
    let subnormal = r < f32::MIN_POSITIVE;
    let r = if subnormal { r * 16_777_216.0 } else { r };
    let bits = r.to_bits();
    // r = m · 2^e with m in [0.5, 1).
    let e = ((bits >> 23) & 0xff) as i32 - 126;
    let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    // Move m to [√½, √2) so the polynomial argument is small on both sides of 1.
    let below = m < FRAC_1_SQRT_2;
    let t = if below { m + m - 1.0 } else { m - 1.0 };
    let e = (e - below as i32) as f32 - if subnormal { 24.0 } else { 0.0 };
    let t2 = t * t;
    let horner = |p: f32, c: f32| if FUSED { p.mul_add(t, c) } else { p * t + c };
    let mut p = 7.037_683_6e-2;
    for c in [
        -1.151_461_1e-1,
        1.167_699_9e-1,
        -1.242_014_1e-1,
        1.424_932_3e-1,
        -1.666_805_8e-1,
        2.000_071_5e-1,
        -2.499_999_4e-1,
        3.333_333e-1,
    ] {
        p = horner(p, c);
    }
    // ln(1 + t) = t - t²/2 + t³·p(t); ln 2 is split in two so that e·ln 2 stays exact
    // in its high part.
    let y = t * t2 * p - 0.5 * t2;
    t + (y + e * (LN_2 - 0.693_359_4)) + e * 0.693_359_4
}

multiversion! {
    /// The smallest and largest of the little-endian `f32` in `input` (a multiple of 4
    /// bytes, at least one value), or the index of the first NaN or ±inf.
    pub(super) fn min_max(input: &[u8]) -> Result<(f32, f32), usize> = min_max_body;
}

#[inline(always)]
fn min_max_body(input: &[u8]) -> Result<(f32, f32), usize> {
    assert!(input.len() >= 4 && input.len() % 4 == 0);
    const EXPONENT: u32 = 0x7f80_0000;
    let mut mins = [f32::INFINITY; LANES];
    let mut maxs = [f32::NEG_INFINITY; LANES];
    // A lane is non-finite exactly when all its exponent bits are set.
    let mut non_finite = [0u32; LANES];
    let mut chunks = input.chunks_exact(STEP);
    for chunk in &mut chunks {
        for lane in 0..LANES {
            let bits = u32::from_le_bytes(chunk[lane * 4..lane * 4 + 4].try_into().expect("4"));
            let x = f32::from_bits(bits);
            non_finite[lane] |= ((bits & EXPONENT) == EXPONENT) as u32;
            // Compare-and-select rather than f32::min: with no NaN to care about it maps
            // to one vector min instruction.
            mins[lane] = if x < mins[lane] { x } else { mins[lane] };
            maxs[lane] = if x > maxs[lane] { x } else { maxs[lane] };
        }
    }
    let mut flagged = non_finite.iter().any(|&f| f != 0);
    let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
    for lane in 0..LANES {
        min = min.min(mins[lane]);
        max = max.max(maxs[lane]);
    }
    for tail in chunks.remainder().chunks_exact(4) {
        let x = f32::from_le_bytes(tail.try_into().expect("4 bytes"));
        flagged |= !x.is_finite();
        min = min.min(x);
        max = max.max(x);
    }
    if flagged {
        let n = input.len() / 4;
        let first = (0..n)
            .find(|&i| !f32_at(input, i).is_finite())
            .expect("flagged");
        return Err(first);
    }
    Ok((min, max))
}

multiversion! {
    /// `(x - min) / (max - min)` for each little-endian `f32` of `input`, where `min`
    /// and `max` are finite and `min < max`. `out` has the length of `input`.
    pub(super) fn normalise(input: &[u8], out: &mut [u8], min: f32, max: f32) = normalise_body;
}

#[inline(always)]
fn normalise_body(input: &[u8], out: &mut [u8], min: f32, max: f32) {
    assert_eq!(input.len(), out.len());
    assert!(min < max);
    // max - min overflows f32 when the values span more than f32::MAX; halving every
    // term is exact (bar subnormals, which are then far below the result's precision)
    // and brings it back in range.
    let scale = if (max - min).is_finite() { 1.0 } else { 0.5 };
    let (low, range) = (min * scale, max * scale - min * scale);
    // Each of the subtraction, the range and the division rounds once, relative to a
    // result in [0, 1]: under 2e-7 in all, against the 1e-6 the spec allows. A division
    // rather than a multiplication by 1/range, which overflows for subnormal ranges.
    for (o, i) in out.chunks_exact_mut(4).zip(input.chunks_exact(4)) {
        let x = f32::from_le_bytes(i.try_into().expect("4 bytes"));
        o.copy_from_slice(&((x * scale - low) / range).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference;
    use proptest::prelude::*;

    fn to_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn from_bytes(bytes: &[u8]) -> Vec<f32> {
        (0..bytes.len() / 4).map(|i| f32_at(bytes, i)).collect()
    }

    /// Runs `logit` both through the dispatcher (vector build on this machine) and the
    /// portable build, checks both against the f64 reference and returns the first.
    fn check_logit(values: &[f32], eps: f32) -> Vec<f32> {
        let input = to_bytes(values);
        let clamp = LogitClamp::new(eps);
        let mut fast = vec![0u8; input.len()];
        let mut portable = vec![0u8; input.len()];
        logit(&input, &mut fast, clamp);
        logit_unfused(&input, &mut portable, clamp);
        let want = reference::logit(values, eps);
        for got in [from_bytes(&fast), from_bytes(&portable)] {
            for ((&x, &g), &w) in values.iter().zip(&got).zip(&want) {
                if w.is_nan() {
                    assert!(g.is_nan(), "logit({x:e}, eps {eps:e}) = {g:e}, want NaN");
                } else {
                    let err = (f64::from(g) - w).abs();
                    assert!(
                        err <= 1e-5 * w.abs().max(1.0),
                        "logit({x:e}, eps {eps:e}) = {g:e}, want {w:e}"
                    );
                }
            }
        }
        from_bytes(&fast)
    }

    fn next_up(x: f32) -> f32 {
        f32::from_bits(x.to_bits() + 1)
    }

    fn next_down(x: f32) -> f32 {
        f32::from_bits(x.to_bits() - 1)
    }

    #[test]
    fn to_uppercase_changes_only_ascii_lowercase() {
        let input: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let mut fast = vec![0; input.len()];
        let mut portable = vec![0; input.len()];
        to_uppercase(&input, &mut fast);
        to_uppercase_body(&input, &mut portable);
        assert_eq!(fast, reference::to_uppercase(&input));
        assert_eq!(portable, fast);
        to_uppercase(&[], &mut []);
    }

    #[test]
    fn ln_positive_is_accurate_over_the_whole_range() {
        let mut worst = 0.0f64;
        // Every 4099th bit pattern of the positive finite floats, subnormals included.
        for bits in (1..0x7f80_0000u32)
            .step_by(4099)
            .chain([1, 0x7f7f_ffff, 0x0080_0000])
        {
            let r = f32::from_bits(bits);
            let want = f64::from(r).ln();
            for got in [ln_positive::<true>(r), ln_positive::<false>(r)] {
                let err = (f64::from(got) - want).abs() / want.abs().max(1.0);
                worst = worst.max(err);
            }
        }
        assert!(worst < 3e-7, "worst relative error {worst:e}");
    }

    #[test]
    fn logit_handles_special_values() {
        let eps = 1e-6;
        let out = check_logit(
            &[
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                0.0,
                -0.0,
                1.0,
                0.5,
                -1.0,
                2.0,
            ],
            eps,
        );
        assert!(out[0].is_nan());
        let high = ((1.0 - 1e-6f64) / 1e-6).ln() as f32;
        assert_eq!(out[1], out[5]);
        assert_eq!(out[2], out[3]);
        assert_eq!(out[3], out[4]);
        assert!((out[1] - high).abs() < 1e-4 && (out[2] + high).abs() < 1e-4);
        assert!(out[6].abs() < 1e-6);
        assert_eq!(out[7], out[3]);
        assert_eq!(out[8], out[5]);
    }

    #[test]
    fn logit_is_exact_at_the_clamp_edges() {
        for eps in [
            1e-6,
            1e-3,
            0.1,
            0.25,
            0.49999997,
            1e-30,
            1e-40,
            f32::from_bits(1),
        ] {
            let high = LogitClamp::new(eps).high;
            let mut values = vec![eps, next_up(eps), next_down(eps), high, next_down(high)];
            values.extend([next_up(high), 1.0, next_down(1.0), 0.5, next_up(0.0)]);
            values.extend([f32::MIN_POSITIVE, next_down(f32::MIN_POSITIVE), 1e-20, 1e-3]);
            check_logit(&values, eps);
        }
    }

    #[test]
    fn logit_of_every_length_up_to_past_two_vectors() {
        for n in 0..40 {
            let values: Vec<f32> = (0..n).map(|i| i as f32 / 37.0).collect();
            assert_eq!(check_logit(&values, 1e-6).len(), n);
        }
    }

    #[test]
    fn min_max_finds_extremes_and_the_first_non_finite_value() {
        for n in 1..70 {
            let values: Vec<f32> = (0..n).map(|i| ((i * 7919) % 101) as f32 - 50.0).collect();
            let want = (
                values.iter().copied().fold(f32::INFINITY, f32::min),
                values.iter().copied().fold(f32::NEG_INFINITY, f32::max),
            );
            assert_eq!(min_max(&to_bytes(&values)), Ok(want));
            assert_eq!(min_max_body(&to_bytes(&values)), Ok(want));
            for (at, bad) in [
                (n / 2, f32::NAN),
                (n - 1, f32::INFINITY),
                (0, f32::NEG_INFINITY),
            ] {
                let mut with_bad = values.clone();
                with_bad[at] = bad;
                with_bad[n - 1 - (n - 1 - at) / 2] = bad;
                assert_eq!(min_max(&to_bytes(&with_bad)), Err(at));
                assert_eq!(min_max_body(&to_bytes(&with_bad)), Err(at));
            }
        }
    }

    fn check_normalise(values: &[f32]) {
        let input = to_bytes(values);
        let (min, max) = min_max(&input).expect("finite");
        let want = reference::minmax(values);
        let mut fast = vec![0u8; input.len()];
        let mut portable = vec![0u8; input.len()];
        if min < max {
            normalise(&input, &mut fast, min, max);
            normalise_body(&input, &mut portable, min, max);
        }
        for got in [from_bytes(&fast), from_bytes(&portable)] {
            for ((&x, &g), &w) in values.iter().zip(&got).zip(&want) {
                assert!(
                    (f64::from(g) - w).abs() <= 1e-6,
                    "minmax({x:e}) = {g:e}, want {w:e}"
                );
            }
        }
    }

    #[test]
    fn normalise_survives_extreme_ranges() {
        check_normalise(&[f32::MAX, -f32::MAX, 0.0, 1.0, f32::MAX / 3.0]);
        check_normalise(&[
            f32::from_bits(1),
            0.0,
            f32::from_bits(3),
            -f32::from_bits(2),
        ]);
        check_normalise(&[1.0, next_up(1.0), 1.0]);
        check_normalise(&[3.0; 33]);
        check_normalise(&[-0.0, 0.0]);
    }

    fn any_f32_bits() -> impl Strategy<Value = f32> {
        prop_oneof![
            any::<u32>().prop_map(f32::from_bits),
            (0.0f32..1.0),
            prop::sample::select(vec![0.0, 1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY]),
        ]
    }

    fn finite_f32() -> impl Strategy<Value = f32> {
        prop_oneof![any::<f32>(), -1e3f32..1e3]
    }

    proptest! {
        #[test]
        fn to_uppercase_matches_reference(input in prop::collection::vec(any::<u8>(), 0..300)) {
            let mut out = vec![0; input.len()];
            to_uppercase(&input, &mut out);
            prop_assert_eq!(out, reference::to_uppercase(&input));
        }

        #[test]
        fn logit_matches_reference(
            values in prop::collection::vec(any_f32_bits(), 0..100),
            eps in prop_oneof![
                Just(1e-6f32),
                (1u32..0x3eff_ffff).prop_map(f32::from_bits),
                1e-7f32..0.5,
            ],
        ) {
            check_logit(&values, eps);
        }

        #[test]
        fn minmax_matches_reference(values in prop::collection::vec(finite_f32(), 1..100)) {
            check_normalise(&values);
        }
    }
}
