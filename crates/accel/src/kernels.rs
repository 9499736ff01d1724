//! The built-in CPU accelerators. Each validates exactly what `docs/accelerators.md`
//! says and writes its output into the caller's buffer.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::{bad, param_f32, param_u32, Accelerator, CallError, Descriptor, ParamBlock};
use crate::{ParamSpec, ParamType, ParamValue};

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
        payload_len as u64 / 16
    }
    fn run(&self, _: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        out.clear();
        out.extend(input.iter().map(|&b| if b.wrapping_sub(b'a') < 26 { b - 0x20 } else { b }));
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
    fn work_estimate(&self, _: &ParamBlock, payload_len: usize) -> u64 {
        payload_len as u64
    }
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        self.check(params, Some(input.len()))?;
        let k = param_u32(params, 0) as usize;
        let mut values: Vec<i32> = input
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let k = k.min(values.len());
        if k < values.len() {
            values.select_nth_unstable_by(k, |a, b| b.cmp(a));
            values.truncate(k);
        }
        values.sort_unstable_by(|a, b| b.cmp(a));
        out.clear();
        out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
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
        payload_len as u64 * 4
    }
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        self.check(params, Some(input.len()))?;
        let eps = logit_eps(params)?;
        out.clear();
        out.extend(input.chunks_exact(4).flat_map(|c| {
            let x = f32::from_le_bytes(c.try_into().expect("4 bytes"));
            let c = x.clamp(eps, 1.0 - eps);
            let y = if x.is_nan() { f32::NAN } else { (c as f64 / (1.0 - c as f64)).ln() as f32 };
            y.to_le_bytes()
        }));
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
        payload_len as u64
    }
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        self.check(params, Some(input.len()))?;
        let values = || input.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4")));
        let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
        for (i, x) in values().enumerate() {
            if !x.is_finite() {
                return bad(format!("value {i} is {x}: minmax needs finite values"));
            }
            min = min.min(x);
            max = max.max(x);
        }
        let range = max as f64 - min as f64;
        out.clear();
        out.extend(values().flat_map(|x| {
            let y = if range == 0.0 { 0.0 } else { ((x as f64 - min as f64) / range) as f32 };
            y.to_le_bytes()
        }));
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
        payload_len as u64 * 12
    }
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        self.check(params, Some(input.len()))?;
        let (w, h) = sobel_dims(params)?;
        out.clear();
        out.resize(w * h, 0);
        let p = |x: usize, y: usize| input[y * w + x] as i32;
        for y in 1..h.saturating_sub(1) {
            for x in 1..w.saturating_sub(1) {
                let gx = p(x + 1, y - 1) - p(x - 1, y - 1) + 2 * (p(x + 1, y) - p(x - 1, y))
                    + p(x + 1, y + 1)
                    - p(x - 1, y + 1);
                let gy = p(x - 1, y + 1) + 2 * p(x, y + 1) + p(x + 1, y + 1)
                    - p(x - 1, y - 1)
                    - 2 * p(x, y - 1)
                    - p(x + 1, y - 1);
                out[y * w + x] = (gx.abs() + gy.abs()).min(255) as u8;
            }
        }
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
        let n = param_u32(params, 0) as u64;
        2 * n * n * n
    }
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        let n = matmul_n(params, Some(input.len()))?;
        let floats: Vec<f32> = input
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let (a, b) = floats.split_at(n * n);
        let mut c = vec![0f32; n * n];
        for i in 0..n {
            for k in 0..n {
                let aik = a[i * n + k];
                let row = &b[k * n..(k + 1) * n];
                for (cij, bkj) in c[i * n..(i + 1) * n].iter_mut().zip(row) {
                    *cij += aik * bkj;
                }
            }
        }
        out.clear();
        out.extend(c.iter().flat_map(|v| v.to_le_bytes()));
        Ok(())
    }
}
