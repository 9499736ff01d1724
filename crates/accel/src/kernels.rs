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
//! and a machine without AVX2 still gets correct (slower) results.

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
        Arc::new(Logit(descriptor(4, "logit", &[f32_param("eps", 0, Some(0.0))]))),
        Arc::new(MinMax(descriptor(5, "minmax", &[]))),
        Arc::new(Sobel(descriptor(
            6,
            "sobel",
            &[u32_param("width", 0, None), u32_param("height", 4, None)],
        ))),
        Arc::new(MatMul(descriptor(7, "matmul", &[u32_param("n", 0, None)]))),
    ]
}

/// Version of the CPU kernel images; part of every built-in's hash so that a changed
/// kernel gets a new identity.
const CPU_KERNELS_VERSION: &str = "netaccel-cpu-kernels/1";

fn descriptor(id: u16, name: &str, params: &[ParamSpec]) -> Descriptor {
    let digest = Sha256::digest(format!("{CPU_KERNELS_VERSION}/{name}"));
    let hash = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    Descriptor { id, name: name.to_string(), hash, params: params.to_vec() }
}

fn u32_param(name: &'static str, offset: usize, default: Option<u32>) -> ParamSpec {
    ParamSpec { name, ty: ParamType::U32, offset, default: default.map(ParamValue::U32) }
}

fn f32_param(name: &'static str, offset: usize, default: Option<f32>) -> ParamSpec {
    ParamSpec { name, ty: ParamType::F32, offset, default: default.map(ParamValue::F32) }
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
        bad(format!("parameter `eps` must be in (0, 0.5) or 0 for the default, got {eps}"))
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
        return bad(format!("parameters `width` and `height` must be at least 1, got {w}x{h}"));
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
        Some(len) if len != want => {
            bad(format!("two {n}x{n} f32 matrices are {want} bytes, payload is {len}"))
        }
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
