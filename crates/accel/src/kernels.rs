//! The built-in CPU accelerators. Each validates exactly what `docs/accelerators.md`
//! says and writes its output into the caller's buffer.
//!
//! This file holds the [`Accelerator`] side (descriptors, parameter and payload
//! checks, cost estimates); the arithmetic lives in the submodules, as functions over
//! byte slices that the benchmarks and tests can drive directly.
//!
//! Speed comes from the compiler, not from hand-written assembly: inner loops are
//! written so that they vectorise, and [`multiversion!`] compiles each of them twice,
//! once for the AVX2 + FMA vector units of current x86-64 CPUs and once for the
//! baseline target, picking one at run time. The code stays in safe, portable Rust,
//! and a machine without AVX2 still gets correct (slower) results. The one exception
//! is matmul's micro-kernel, written with `std::arch` intrinsics because the
//! auto-vectoriser did not produce it reliably (see `matmul.rs`).

use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::{bad, param_f32, param_u32, Accelerator, CallError, Descriptor, ParamBlock};
use crate::{ParamSpec, ParamType, ParamValue};

/// Defines `fn $name(args) -> ret` that runs `$fast` compiled with AVX2 and FMA when
/// the CPU has both, and `$portable` (by default the same function) compiled for the
/// baseline target otherwise. The bodies must be `#[inline(always)]`, and so must
/// everything they call in their inner loops: being inlined into the wrapper is what
/// gets them compiled with the wider instructions.
macro_rules! multiversion {
    (
        $(#[$attr:meta])*
        $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? = $body:path;
    ) => {
        multiversion! {
            $(#[$attr])*
            $vis fn $name($($arg: $ty),*) $(-> $ret)? = $body, $body;
        }
    };
    (
        $(#[$attr:meta])*
        $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?
            = $fast:path, $portable:path;
    ) => {
        $(#[$attr])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2_fma($($arg: $ty),*) $(-> $ret)? {
                    $fast($($arg),*)
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
                {
                    // SAFETY: `avx2_fma` only differs from safe code in using AVX2 and
                    // FMA instructions, and the CPU was just found to have both.
                    return unsafe { avx2_fma($($arg),*) };
                }
            }
            $portable($($arg),*)
        }
    };
}

mod matmul;
mod sobel;
mod stream;
mod topk;

/// Every built-in accelerator, in id order.
pub fn builtins() -> Vec<Arc<dyn Accelerator>> {
    vec![
        Arc::new(Echo(descriptor(1, "echo", &[]))),
        Arc::new(ToUppercase(descriptor(2, "to_uppercase", &[]))),
        Arc::new(TopK(descriptor(3, "topk", &[u32_param("k", 0, None)]))),
        Arc::new(Logit(descriptor(
            4,
            "logit",
            &[f32_param("eps", 0, Some(0.0))],
        ))),
        Arc::new(MinMax(descriptor(5, "minmax", &[]))),
        Arc::new(Sobel(descriptor(
            6,
            "sobel",
            &[u32_param("width", 0, None), u32_param("height", 4, None)],
        ))),
        Arc::new(MatMul(descriptor(7, "matmul", &[u32_param("n", 0, None)]))),
    ]
}

/// The fault-injection accelerator `fault` (id [`FAULT_ID`]), for testing how a node
/// handles a failing kernel: the payload `panic` makes it panic, `error` makes it
/// report an internal error, `hang` makes it never return (a hung device), anything
/// else is echoed. Not a built-in: a node lists it
/// only when configured to (`fault_injection = true`).
pub fn fault_injection() -> Arc<dyn Accelerator> {
    Arc::new(Fault(Echo(descriptor(FAULT_ID, "fault", &[]))))
}

/// Accelerator id of [`fault_injection`], far from the built-ins' 1..=7.
pub const FAULT_ID: u16 = 0xfff0;

/// Echo (under the fault's own descriptor), except for the three payloads that fail on
/// purpose.
struct Fault(Echo);

impl Accelerator for Fault {
    fn descriptor(&self) -> &Descriptor {
        self.0.descriptor()
    }
    fn check(&self, params: &ParamBlock, payload_len: Option<usize>) -> Result<(), CallError> {
        self.0.check(params, payload_len)
    }
    /// Never cheap: a node runs cheap calls on its network threads, and a `hang` there
    /// would stall a network thread instead of a slot.
    fn work_estimate(&self, _: &ParamBlock, _: usize) -> u64 {
        u64::MAX
    }
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        match input {
            b"panic" => panic!("fault injection: the payload asked for a panic"),
            b"hang" => loop {
                std::thread::park();
            },
            b"error" => Err(CallError::Internal(
                "fault injection: the payload asked for an internal error".to_string(),
            )),
            _ => self.0.run(params, input, out),
        }
    }
}

/// Version of the CPU kernel images; part of every built-in's hash so that a changed
/// kernel gets a new identity.
const CPU_KERNELS_VERSION: &str = "netaccel-cpu-kernels/2";

fn descriptor(id: u16, name: &str, params: &[ParamSpec]) -> Descriptor {
    let digest = Sha256::digest(format!("{CPU_KERNELS_VERSION}/{name}"));
    let hash = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    Descriptor {
        id,
        name: name.to_string(),
        hash,
        params: params.to_vec(),
    }
}

fn u32_param(name: &'static str, offset: usize, default: Option<u32>) -> ParamSpec {
    ParamSpec::new(name, ParamType::U32, offset, default.map(ParamValue::U32))
}

fn f32_param(name: &'static str, offset: usize, default: Option<f32>) -> ParamSpec {
    ParamSpec::new(name, ParamType::F32, offset, default.map(ParamValue::F32))
}

fn check_multiple(payload_len: Option<usize>, of: usize, what: &str) -> Result<(), CallError> {
    match payload_len {
        Some(len) if len % of != 0 => bad(format!(
            "payload is {len} bytes, not a whole number of {of}-byte {what} values"
        )),
        _ => Ok(()),
    }
}

struct Echo(Descriptor);

impl Accelerator for Echo {
    fn descriptor(&self) -> &Descriptor {
        &self.0
    }
    fn check(&self, _: &ParamBlock, _: Option<usize>) -> Result<(), CallError> {
        Ok(())
    }
    fn work_estimate(&self, _: &ParamBlock, payload_len: usize) -> u64 {
        payload_len as u64 / 16
    }
    fn run(&self, _: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        out.clear();
        out.extend_from_slice(input);
        Ok(())
    }
}

struct ToUppercase(Descriptor);

impl Accelerator for ToUppercase {
    fn descriptor(&self) -> &Descriptor {
        &self.0
    }
    fn check(&self, _: &ParamBlock, _: Option<usize>) -> Result<(), CallError> {
        Ok(())
    }
    fn work_estimate(&self, _: &ParamBlock, payload_len: usize) -> u64 {
        // A compare and a select per byte.
        payload_len as u64 * 2
    }
    fn run(&self, _: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        out.clear();
        out.resize(input.len(), 0);
        stream::to_uppercase(input, out);
        Ok(())
    }
}

struct TopK(Descriptor);

impl Accelerator for TopK {
    fn descriptor(&self) -> &Descriptor {
        &self.0
    }
    fn check(&self, params: &ParamBlock, payload_len: Option<usize>) -> Result<(), CallError> {
        if param_u32(params, 0) == 0 {
            return bad("parameter `k` must be at least 1");
        }
        check_multiple(payload_len, 4, "i32")
    }
    fn work_estimate(&self, params: &ParamBlock, payload_len: usize) -> u64 {
        // A load and a compare per value, then sorting the min(k, n) that are kept.
        let n = payload_len as u64 / 4;
        let kept = u64::from(param_u32(params, 0)).min(n);
        2 * n + kept * u64::from(kept.max(1).ilog2() + 1)
    }
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        self.check(params, Some(input.len()))?;
        topk::topk(input, param_u32(params, 0) as usize, out);
        Ok(())
    }
}

struct Logit(Descriptor);

fn logit_eps(params: &ParamBlock) -> Result<f32, CallError> {
    let eps = param_f32(params, 0);
    if eps == 0.0 {
        return Ok(1e-6);
    }
    if eps > 0.0 && eps < 0.5 {
        Ok(eps)
    } else {
        bad(format!(
            "parameter `eps` must be in (0, 0.5) or 0 for the default, got {eps}"
        ))
    }
}

impl Accelerator for Logit {
    fn descriptor(&self) -> &Descriptor {
        &self.0
    }
    fn check(&self, params: &ParamBlock, payload_len: Option<usize>) -> Result<(), CallError> {
        logit_eps(params)?;
        check_multiple(payload_len, 4, "f32")
    }
    fn work_estimate(&self, _: &ParamBlock, payload_len: usize) -> u64 {
        // A division, a degree-8 polynomial and a few selects per value.
        payload_len as u64 / 4 * 30
    }
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        self.check(params, Some(input.len()))?;
        let clamp = stream::LogitClamp::new(logit_eps(params)?);
        out.clear();
        out.resize(input.len(), 0);
        stream::logit(input, out, clamp);
        Ok(())
    }
}

struct MinMax(Descriptor);

impl Accelerator for MinMax {
    fn descriptor(&self) -> &Descriptor {
        &self.0
    }
    fn check(&self, _: &ParamBlock, payload_len: Option<usize>) -> Result<(), CallError> {
        check_multiple(payload_len, 4, "f32")
    }
    fn work_estimate(&self, _: &ParamBlock, payload_len: usize) -> u64 {
        // Finite check, min and max in one pass; subtract and divide in another.
        payload_len as u64 / 4 * 6
    }
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        self.check(params, Some(input.len()))?;
        out.clear();
        if input.is_empty() {
            return Ok(());
        }
        let (min, max) = stream::min_max(input).or_else(|i| {
            let x = f32::from_le_bytes(input[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
            bad(format!("value {i} is {x}: minmax needs finite values"))
        })?;
        out.resize(input.len(), 0);
        if min < max {
            stream::normalise(input, out, min, max);
        }
        Ok(())
    }
}

struct Sobel(Descriptor);

fn sobel_dims(params: &ParamBlock) -> Result<(usize, usize), CallError> {
    let (w, h) = (param_u32(params, 0), param_u32(params, 4));
    if w == 0 || h == 0 {
        return bad(format!(
            "parameters `width` and `height` must be at least 1, got {w}x{h}"
        ));
    }
    Ok((w as usize, h as usize))
}

impl Accelerator for Sobel {
    fn descriptor(&self) -> &Descriptor {
        &self.0
    }
    fn check(&self, params: &ParamBlock, payload_len: Option<usize>) -> Result<(), CallError> {
        let (w, h) = sobel_dims(params)?;
        match (w.checked_mul(h), payload_len) {
            (None, _) => bad(format!("image {w}x{h} is too large")),
            (Some(want), Some(len)) if want != len => {
                bad(format!("a {w}x{h} image is {want} bytes, payload is {len}"))
            }
            _ => Ok(()),
        }
    }
    fn work_estimate(&self, _: &ParamBlock, payload_len: usize) -> u64 {
        // Eight neighbours weighed into two gradients, two absolutes, a sum, a clamp.
        payload_len as u64 * 16
    }
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        self.check(params, Some(input.len()))?;
        let (w, h) = sobel_dims(params)?;
        out.clear();
        out.resize(w * h, 0);
        sobel::sobel(input, out, w, h);
        Ok(())
    }
}

struct MatMul(Descriptor);

fn matmul_n(params: &ParamBlock, payload_len: Option<usize>) -> Result<usize, CallError> {
    let n = param_u32(params, 0) as usize;
    if n == 0 {
        return bad("parameter `n` must be at least 1");
    }
    let Some(want) = n.checked_mul(n).and_then(|nn| nn.checked_mul(8)) else {
        return bad(format!("matrices of size {n} are too large"));
    };
    match payload_len {
        Some(len) if len != want => bad(format!(
            "two {n}x{n} f32 matrices are {want} bytes, payload is {len}"
        )),
        _ => Ok(n),
    }
}

impl Accelerator for MatMul {
    fn descriptor(&self) -> &Descriptor {
        &self.0
    }
    fn check(&self, params: &ParamBlock, payload_len: Option<usize>) -> Result<(), CallError> {
        matmul_n(params, payload_len).map(|_| ())
    }
    fn work_estimate(&self, params: &ParamBlock, _: usize) -> u64 {
        // A multiply and an add per (i, j, k); saturating, as n is not checked here.
        let n = u64::from(param_u32(params, 0));
        n.saturating_mul(n).saturating_mul(n).saturating_mul(2)
    }
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        let n = matmul_n(params, Some(input.len()))?;
        out.clear();
        out.resize(4 * n * n, 0);
        matmul::matmul(input, n, out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{reference, Catalog, PARAMS_LEN};

    fn block(values: &[u32]) -> ParamBlock {
        let mut block = [0u8; PARAMS_LEN];
        for (i, v) in values.iter().enumerate() {
            block[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        block
    }

    fn call(name: &str, params: &ParamBlock, input: &[u8]) -> Result<Vec<u8>, CallError> {
        let catalog = Catalog::builtin();
        let accel = catalog.by_name(name).expect("built-in");
        // A dirty buffer: kernels must clear it.
        let mut out = vec![0xEE; 5];
        accel.run(params, input, &mut out).map(|()| out)
    }

    fn refused(name: &str, params: &ParamBlock, input: &[u8]) -> String {
        let catalog = Catalog::builtin();
        let accel = catalog.by_name(name).expect("built-in");
        let checked = accel.check(params, Some(input.len()));
        match call(name, params, input) {
            Err(CallError::BadRequest(m)) => {
                if let Err(CallError::BadRequest(early)) = checked {
                    assert_eq!(early, m, "check and run give the same reason");
                }
                m
            }
            other => panic!("{name}: expected BadRequest, got {other:?}"),
        }
    }

    fn f32s(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn as_f32s(bytes: &[u8]) -> Vec<f32> {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn empty_payloads() {
        let none = block(&[]);
        assert_eq!(call("echo", &none, &[]).unwrap(), b"");
        assert_eq!(call("to_uppercase", &none, &[]).unwrap(), b"");
        assert_eq!(call("topk", &block(&[3]), &[]).unwrap(), b"");
        assert_eq!(call("logit", &none, &[]).unwrap(), b"");
        assert_eq!(call("minmax", &none, &[]).unwrap(), b"");
        assert!(refused("sobel", &block(&[1, 1]), &[]).contains("payload is 0"));
        assert!(refused("matmul", &block(&[1]), &[]).contains("payload is 0"));
    }

    #[test]
    fn payload_lengths_that_do_not_fit() {
        let none = block(&[]);
        for len in [1, 2, 3, 5, 4099] {
            let payload = vec![0u8; len];
            let m = refused("topk", &block(&[1]), &payload);
            assert!(
                m.contains(&format!("payload is {len} bytes")) && m.contains("i32"),
                "{m}"
            );
            assert!(refused("logit", &none, &payload).contains("f32"));
            assert!(refused("minmax", &none, &payload).contains("f32"));
        }
        let m = refused("sobel", &block(&[3, 2]), &[0; 7]);
        assert_eq!(m, "a 3x2 image is 6 bytes, payload is 7");
        let m = refused("matmul", &block(&[2]), &[0; 31]);
        assert_eq!(m, "two 2x2 f32 matrices are 32 bytes, payload is 31");
    }

    #[test]
    fn params_out_of_range() {
        assert_eq!(
            refused("topk", &block(&[0]), &[0; 8]),
            "parameter `k` must be at least 1"
        );
        for eps in [-1e-6f32, 0.5, 0.75, f32::NAN, f32::INFINITY, -1.0] {
            let m = refused("logit", &block(&[eps.to_bits()]), &[0; 4]);
            assert!(m.starts_with("parameter `eps` must be in (0, 0.5)"), "{m}");
        }
        for (w, h) in [(0, 1), (1, 0), (0, 0)] {
            let m = refused("sobel", &block(&[w, h]), &[]);
            assert!(m.contains("must be at least 1"), "{m}");
        }
        let m = refused("sobel", &block(&[u32::MAX, u32::MAX]), &[]);
        assert!(
            m.contains("must be at least 1") || m.contains("payload is 0"),
            "{m}"
        );
        assert_eq!(
            refused("matmul", &block(&[0]), &[]),
            "parameter `n` must be at least 1"
        );
    }

    #[test]
    fn minmax_refuses_non_finite_values_with_their_index() {
        let none = block(&[]);
        let m = refused("minmax", &none, &f32s(&[1.0, 2.0, f32::NAN, f32::INFINITY]));
        assert_eq!(m, "value 2 is NaN: minmax needs finite values");
        let mut values = vec![0.5f32; 37];
        values[36] = f32::NEG_INFINITY;
        let m = refused("minmax", &none, &f32s(&values));
        assert_eq!(m, "value 36 is -inf: minmax needs finite values");
    }

    #[test]
    fn minmax_of_constant_and_single_values_is_zero() {
        for n in [1, 3, 16, 17, 100] {
            let out = call("minmax", &block(&[]), &f32s(&vec![-7.25; n])).unwrap();
            assert_eq!(out, vec![0u8; 4 * n]);
        }
        let out = call("minmax", &block(&[]), &f32s(&[2.0, 4.0, 3.0])).unwrap();
        assert_eq!(as_f32s(&out), [0.0, 1.0, 0.5]);
    }

    #[test]
    fn topk_k_against_n() {
        let values = [4i32, -1, 4, 9, 0];
        let payload: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        for k in [1u32, 2, 4, 5, 6, 1000, u32::MAX] {
            let out = call("topk", &block(&[k]), &payload).unwrap();
            let got: Vec<i32> = out
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(got, reference::topk(&values, k as usize), "k {k}");
        }
    }

    #[test]
    fn logit_default_eps_and_special_values() {
        let input = f32s(&[0.5, f32::NAN, 0.0, 1.0, f32::INFINITY, f32::NEG_INFINITY]);
        let out = as_f32s(&call("logit", &block(&[]), &input).unwrap());
        let edge = (1e-6f64.ln() - (-1e-6f64).ln_1p()) as f32;
        assert_eq!(out[0], 0.0);
        assert!(out[1].is_nan());
        assert_eq!([out[2], out[3], out[4], out[5]], [edge, -edge, -edge, edge]);
    }

    #[test]
    fn sobel_small_images() {
        for (w, h) in [(1u32, 1u32), (1, 5), (5, 1), (2, 2), (3, 3), (4, 3)] {
            let pixels: Vec<u8> = (0..w * h).map(|i| (i * 61 % 256) as u8).collect();
            let out = call("sobel", &block(&[w, h]), &pixels).unwrap();
            assert_eq!(
                out,
                reference::sobel(&pixels, w as usize, h as usize),
                "{w}x{h}"
            );
        }
        // The only interior pixel of a 3x3 image: gx = 4·255 → clamped.
        let mut pixels = [0u8; 9];
        pixels[2] = 255;
        pixels[5] = 255;
        pixels[8] = 255;
        assert_eq!(call("sobel", &block(&[3, 3]), &pixels).unwrap()[4], 255);
    }

    #[test]
    fn matmul_of_one_by_one_and_two_by_two() {
        let out = call("matmul", &block(&[1]), &f32s(&[-3.0, 0.5])).unwrap();
        assert_eq!(as_f32s(&out), [-1.5]);
        let out = call(
            "matmul",
            &block(&[2]),
            &f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
        );
        assert_eq!(as_f32s(&out.unwrap()), [19.0, 22.0, 43.0, 50.0]);
    }

    #[test]
    fn work_estimates_grow_with_the_work() {
        let catalog = Catalog::builtin();
        for a in catalog.iter() {
            let d = a.descriptor();
            let params = match d.name.as_str() {
                "topk" => block(&[10]),
                "sobel" => block(&[64, 64]),
                _ => block(&[]),
            };
            let small = a.work_estimate(&params, 4096);
            let large = a.work_estimate(&params, 1 << 20);
            if d.name == "matmul" {
                assert_eq!(a.work_estimate(&block(&[100]), 80_000), 2_000_000);
                assert_eq!(a.work_estimate(&block(&[u32::MAX]), 0), u64::MAX);
            } else {
                assert!(
                    small > 0 && large > small * 100,
                    "{}: {small} {large}",
                    d.name
                );
            }
        }
    }
}
