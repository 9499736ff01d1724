//! Throughput of the built-in CPU kernels, called the way a slot calls them: through
//! `Accelerator::run` with an output buffer that is reused between calls.
//!
//! Streaming kernels and topk report bytes of payload per second. matmul reports
//! `2·n³` "elements" per call, one per floating-point operation, so criterion's
//! elements per second are FLOP/s. A few `naive` entries run the straightforward
//! scalar code the kernels replaced, to show what the vectorising and blocking buy.
//!
//! `cargo bench -p accel --bench kernels -- --warm-up-time 1 --measurement-time 2`

use accel::{Accelerator, Catalog, ParamBlock, PARAMS_LEN};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const SIZES: [(&str, usize); 3] = [("4KiB", 4 << 10), ("64KiB", 64 << 10), ("1MiB", 1 << 20)];

/// Deterministic pseudo-random bytes (xorshift), so runs are comparable.
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.max(1);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// `len / 4` little-endian f32 spread over `[lo, hi)`.
fn floats(len: usize, lo: f32, hi: f32) -> Vec<u8> {
    bytes(len, 7)
        .chunks_exact(4)
        .flat_map(|c| {
            let unit = u32::from_le_bytes(c.try_into().unwrap()) as f32 / u32::MAX as f32;
            (lo + unit * (hi - lo)).to_le_bytes()
        })
        .collect()
}

fn params(values: &[u32]) -> ParamBlock {
    let mut block = [0u8; PARAMS_LEN];
    for (i, v) in values.iter().enumerate() {
        block[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
    }
    block
}

fn accel(name: &str) -> std::sync::Arc<dyn Accelerator> {
    Catalog::builtin().by_name(name).expect("built-in").clone()
}

fn run(a: &dyn Accelerator, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) {
    a.run(params, black_box(input), out).expect("valid call");
    black_box(&out);
}

/// Makes a payload of the given length in bytes.
type MakePayload = fn(usize) -> Vec<u8>;

fn streaming(c: &mut Criterion) {
    // All three take their default params (logit: eps = 1e-6).
    let block = params(&[]);
    let cases: [(&str, MakePayload); 3] = [
        ("to_uppercase", |len| bytes(len, 3)),
        ("logit", |len| floats(len, -0.1, 1.1)),
        ("minmax", |len| floats(len, -1e3, 1e3)),
    ];
    for (name, make) in cases {
        let a = accel(name);
        let mut group = c.benchmark_group(name);
        let mut out = Vec::new();
        for (label, len) in SIZES {
            let input = make(len);
            group.throughput(Throughput::Bytes(len as u64));
            group.bench_with_input(BenchmarkId::from_parameter(label), &input, |b, input| {
                b.iter(|| run(a.as_ref(), &block, input, &mut out))
            });
        }
        group.finish();
    }

    // The scalar, one-f64-logarithm-per-value code logit had before.
    let (label, len) = SIZES[2];
    let input = floats(len, -0.1, 1.1);
    let mut group = c.benchmark_group("logit");
    group.throughput(Throughput::Bytes(len as u64));
    group.bench_function(BenchmarkId::new("naive", label), |b| {
        let mut out = Vec::new();
        b.iter(|| {
            out.clear();
            out.extend(black_box(&input).chunks_exact(4).flat_map(|c| {
                let x = f32::from_le_bytes(c.try_into().unwrap());
                let c = f64::from(x.clamp(1e-6, 1.0 - 1e-6));
                let y = if x.is_nan() {
                    f32::NAN
                } else {
                    (c / (1.0 - c)).ln() as f32
                };
                y.to_le_bytes()
            }));
            black_box(&out);
        })
    });
    group.finish();
}

fn topk(c: &mut Criterion) {
    let a = accel("topk");
    let block = params(&[10]);
    let mut group = c.benchmark_group("topk_k10");
    let mut out = Vec::new();
    for (label, len) in SIZES {
        let input = bytes(len, 5);
        group.throughput(Throughput::Bytes(len as u64));
        group.bench_with_input(BenchmarkId::from_parameter(label), &input, |b, input| {
            b.iter(|| run(a.as_ref(), &block, input, &mut out))
        });
    }
    group.finish();
}

fn sobel(c: &mut Criterion) {
    let a = accel("sobel");
    let mut group = c.benchmark_group("sobel");
    let mut out = Vec::new();
    for (label, side) in [("64x64", 64u32), ("256x256", 256), ("1024x1024", 1024)] {
        let input = bytes((side * side) as usize, 11);
        let block = params(&[side, side]);
        group.throughput(Throughput::Bytes(input.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(label), &input, |b, input| {
            b.iter(|| run(a.as_ref(), &block, input, &mut out))
        });
    }
    group.finish();
}

/// The i-k-j triple loop matmul had before: decode both matrices, stream rows of B.
fn naive_matmul(input: &[u8], n: usize, out: &mut Vec<u8>) {
    let floats: Vec<f32> = input
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let (a, b) = floats.split_at(n * n);
    let mut c = vec![0f32; n * n];
    for i in 0..n {
        for k in 0..n {
            let aik = a[i * n + k];
            for (cij, bkj) in c[i * n..(i + 1) * n].iter_mut().zip(&b[k * n..(k + 1) * n]) {
                *cij += aik * bkj;
            }
        }
    }
    out.clear();
    out.extend(c.iter().flat_map(|v| v.to_le_bytes()));
}

fn matmul(c: &mut Criterion) {
    let a = accel("matmul");
    let mut group = c.benchmark_group("matmul");
    let mut out = Vec::new();
    for n in [64usize, 256, 512] {
        let input = floats(8 * n * n, -1.0, 1.0);
        let block = params(&[n as u32]);
        // Elements are floating-point operations: a multiply and an add per (i, j, k).
        group.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
        group.bench_with_input(BenchmarkId::new("blocked", n), &input, |b, input| {
            b.iter(|| run(a.as_ref(), &block, input, &mut out))
        });
        group.bench_with_input(BenchmarkId::new("naive", n), &input, |b, input| {
            b.iter(|| naive_matmul(black_box(input), n, &mut out))
        });
    }
    group.finish();
}

criterion_group!(benches, streaming, topk, sobel, matmul);
criterion_main!(benches);
