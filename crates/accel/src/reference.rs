//! Plain, obviously-correct implementations of the built-in kernels' arithmetic, used
//! as the oracle in tests and benchmarks. No input validation: callers pass inputs the
//! spec allows. Slow on purpose; never used on the serving path.

/// `a`–`z` minus 0x20, every other byte unchanged.
pub fn to_uppercase(input: &[u8]) -> Vec<u8> {
    input
        .iter()
        .map(|&b| if b.is_ascii_lowercase() { b - 0x20 } else { b })
        .collect()
}

/// The `min(k, n)` largest values, descending, duplicates kept.
pub fn topk(values: &[i32], k: usize) -> Vec<i32> {
    let mut v = values.to_vec();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v.truncate(k);
    v
}

/// `ln(c / (1 - c))` with `c = clamp(x, eps, 1 - eps)`, in f64.
///
/// Computed as `ln(c) - ln(1 - c)` with the smaller of `c` and `1 - c` kept exact:
/// `1 - x` is exact in f64 for every f32 `x >= 0.5`, but `1 - eps` is not for `eps`
/// below about 2^-29 (and is 1.0 below 2^-53), so clamping `x` to `1 - eps` directly
/// would make the oracle itself wrong, even infinite, for tiny `eps`.
pub fn logit(values: &[f32], eps: f32) -> Vec<f64> {
    let eps = eps as f64;
    values
        .iter()
        .map(|&x| {
            let x = x as f64;
            if x.is_nan() {
                f64::NAN
            } else if x < 0.5 {
                let c = x.max(eps);
                c.ln() - (-c).ln_1p()
            } else {
                let one_minus_c = (1.0 - x).max(eps);
                (-one_minus_c).ln_1p() - one_minus_c.ln()
            }
        })
        .collect()
}

/// `(x - min) / (max - min)`, all zero when `max == min`. Inputs are finite.
pub fn minmax(values: &[f32]) -> Vec<f64> {
    let min = values.iter().copied().fold(f32::INFINITY, f32::min) as f64;
    let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    values
        .iter()
        .map(|&x| {
            if max == min {
                0.0
            } else {
                (x as f64 - min) / (max - min)
            }
        })
        .collect()
}

/// 3×3 Sobel magnitude `min(255, |gx| + |gy|)`, border pixels 0.
pub fn sobel(pixels: &[u8], width: usize, height: usize) -> Vec<u8> {
    let mut out = vec![0u8; width * height];
    let p = |x: usize, y: usize| pixels[y * width + x] as i32;
    for y in 1..height.saturating_sub(1) {
        for x in 1..width.saturating_sub(1) {
            let gx = -p(x - 1, y - 1) + p(x + 1, y - 1) - 2 * p(x - 1, y) + 2 * p(x + 1, y)
                - p(x - 1, y + 1)
                + p(x + 1, y + 1);
            let gy = -p(x - 1, y - 1) - 2 * p(x, y - 1) - p(x + 1, y - 1)
                + p(x - 1, y + 1)
                + 2 * p(x, y + 1)
                + p(x + 1, y + 1);
            out[y * width + x] = (gx.abs() + gy.abs()).min(255) as u8;
        }
    }
    out
}

/// `C = A·B` for row-major `n × n` matrices, accumulated in f64, plus the per-element
/// error scale `Σₖ|aᵢₖ·bₖⱼ|` the spec's tolerance is defined by.
pub fn matmul(a: &[f32], b: &[f32], n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut c = vec![0.0f64; n * n];
    let mut scale = vec![0.0f64; n * n];
    for i in 0..n {
        for k in 0..n {
            let aik = a[i * n + k] as f64;
            for j in 0..n {
                let t = aik * b[k * n + j] as f64;
                c[i * n + j] += t;
                scale[i * n + j] += t.abs();
            }
        }
    }
    (c, scale)
}
