//! The built-in accelerators on OpenCL: each described by an accelerator manifest
//! compiled into the node, in the same format as users' (`builtins.cl` holds the
//! kernels), so an OpenCL slot runs a built-in and a user accelerator the same way.
//!
//! Every manifest fixes its work-group size and rounds the global size up to a
//! multiple of it (the kernels skip the items past the end): PoCL compiles a kernel
//! once per work-group size, which takes about a second, so a size left to the
//! runtime made every new payload length a compilation.
//!
//! The catalog entries stay the built-ins' own (crate `accel`): their checks run on
//! every call whichever device hosts it. The one check that needs the payload, that
//! minmax's values are finite, is the kernel's: it marks a non-finite input with a
//! NaN in the first output value, and [`post_check`] words the refusal.

use std::path::Path;

use accel::{bad, CallError};
use manifest::Manifest;

/// The kernels of every built-in, one program.
pub const SOURCE: &str = include_str!("builtins.cl");

/// Name of the source file in the manifests below.
const FILE: &str = "builtins.cl";

/// `(name, manifest)` of each built-in that has an OpenCL kernel.
const MANIFESTS: [(&str, &str); 7] = [
    (
        "echo",
        r#"name = "echo"
[output]
bytes = "payload_len"
[opencl]
source = "builtins.cl"
kernel = "echo"
global_size = ["ceil_div(payload_len, 64) * 64"]
local_size = ["64"]
args = ["payload", "output", "payload_len"]
"#,
    ),
    (
        "to_uppercase",
        r#"name = "to_uppercase"
[output]
bytes = "payload_len"
[opencl]
source = "builtins.cl"
kernel = "to_uppercase"
global_size = ["ceil_div(payload_len, 64) * 64"]
local_size = ["64"]
args = ["payload", "output", "payload_len"]
"#,
    ),
    (
        "topk",
        r#"name = "topk"
[[params]]
name = "k"
type = "u32"
offset = 0
[output]
bytes = "min(k, payload_len / 4) * 4"
[opencl]
source = "builtins.cl"
kernel = "topk"
global_size = ["1"]
local_size = ["1"]
args = ["payload", "output", "k", "payload_len"]
"#,
    ),
    (
        "logit",
        r#"name = "logit"
[[params]]
name = "eps"
type = "f32"
offset = 0
[output]
bytes = "payload_len"
[opencl]
source = "builtins.cl"
kernel = "logit"
global_size = ["ceil_div(payload_len / 4, 64) * 64"]
local_size = ["64"]
args = ["payload", "output", "eps", "payload_len"]
"#,
    ),
    (
        "minmax",
        r#"name = "minmax"
[output]
bytes = "payload_len"
[opencl]
source = "builtins.cl"
kernel = "minmax"
global_size = ["64"]
local_size = ["64"]
args = ["payload", "output", "payload_len"]
"#,
    ),
    (
        "sobel",
        r#"name = "sobel"
[[params]]
name = "width"
type = "u32"
offset = 0
[[params]]
name = "height"
type = "u32"
offset = 4
[output]
bytes = "payload_len"
[opencl]
source = "builtins.cl"
kernel = "sobel"
global_size = ["ceil_div(width, 8) * 8", "ceil_div(height, 8) * 8"]
local_size = ["8", "8"]
args = ["payload", "output", "width", "height"]
"#,
    ),
    (
        "matmul",
        r#"name = "matmul"
[[params]]
name = "n"
type = "u32"
offset = 0
[output]
bytes = "payload_len / 2"
[opencl]
source = "builtins.cl"
kernel = "matmul"
global_size = ["ceil_div(n, 8) * 8", "ceil_div(n, 8) * 8"]
local_size = ["8", "8"]
args = ["payload", "output", "n"]
"#,
    ),
];

/// Whether built-in `name` has an OpenCL kernel.
pub fn has(name: &str) -> bool {
    MANIFESTS.iter().any(|(n, _)| *n == name)
}

/// The manifest of built-in `name`, if it has an OpenCL kernel.
pub fn manifest(name: &str) -> Option<Manifest> {
    let (_, text) = MANIFESTS.iter().find(|(n, _)| *n == name)?;
    let read = |file: &str| match file {
        FILE => Ok(SOURCE.as_bytes().to_vec()),
        other => Err(format!("no built-in file {other}")),
    };
    let m = manifest::parse(Path::new("builtin").join(name).as_path(), text, &read)
        .unwrap_or_else(|e| panic!("built-in manifest {name}: {e}"));
    Some(m)
}

/// The checks a built-in makes on its output: minmax's kernel marks a non-finite
/// input with a NaN first value.
pub fn post_check(name: &str, input: &[u8], out: &[u8]) -> Result<(), CallError> {
    if name != "minmax" || out.len() < 4 {
        return Ok(());
    }
    if !f32::from_le_bytes(out[..4].try_into().expect("4 bytes")).is_nan() {
        return Ok(());
    }
    let (i, x) = input
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .enumerate()
        .find(|(_, x)| !x.is_finite())
        .unwrap_or((0, f32::NAN));
    bad(format!("value {i} is {x}: minmax needs finite values"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_manifest_is_valid_and_matches_the_cpu_params() {
        for accel in accel::builtins() {
            let d = accel.descriptor();
            let m = manifest(&d.name).unwrap_or_else(|| panic!("{} has no kernel", d.name));
            assert_eq!(m.params.len(), d.params.len(), "{}", d.name);
            for (a, b) in m.params.iter().zip(&d.params) {
                assert_eq!((&a.name, a.ty, a.offset), (&b.name, b.ty, b.offset));
            }
            assert_eq!(m.opencl.unwrap().kernel, d.name);
        }
        assert!(!has("fault"));
    }

    #[test]
    fn minmax_refuses_a_marked_output_naming_the_value() {
        let nan = f32::NAN.to_le_bytes();
        let input: Vec<u8> = [1.0f32, f32::INFINITY]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let err = post_check("minmax", &input, &nan).unwrap_err();
        assert!(err.to_string().contains("value 1 is inf"), "{err}");
        assert!(post_check("minmax", &input, &1.0f32.to_le_bytes()).is_ok());
        assert!(post_check("logit", &input, &nan).is_ok());
    }
}
