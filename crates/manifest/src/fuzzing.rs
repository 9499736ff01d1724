//! Bodies of the fuzz targets (`fuzz/fuzz_targets/`), shared with the stable replay
//! test (`tests/fuzz_corpus.rs`) so every `cargo test` runs the checked-in corpora.

use std::path::Path;

use crate::expr::{self, Env, Var};

/// `expr`: any text through the expression parser. Besides "no panic": the bounds
/// hold, and a parsed expression evaluates (to a value or an error) without panicking
/// for extreme variable values.
pub fn expr(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let resolve = |name: &str| match name {
        "payload_len" => Ok(Var::PayloadLen),
        "output_len" => Ok(Var::OutputLen),
        "a" => Ok(Var::Param(0)),
        "b" => Ok(Var::Param(1)),
        _ => Err(format!("unknown `{name}`")),
    };
    match expr::parse(text, &resolve) {
        Ok(e) => {
            assert!(text.len() <= expr::EXPR_BYTES_MAX);
            for v in [0, 1, -1, i64::MAX, i64::MIN] {
                let _ = e.eval(&Env {
                    payload_len: v,
                    output_len: Some(v),
                    params: &[Some(v), None],
                });
            }
        }
        Err(err) => assert!(err.at <= text.len().max(expr::EXPR_BYTES_MAX), "{err:?}"),
    }
}

/// `manifest`: any text as an `accelerator.toml` whose every implementation file is
/// 16 bytes of OpenCL-looking text. Besides "no panic": an accepted manifest keeps
/// the format's invariants (params inside the block, aligned, not overlapping; an
/// implementation present; a hash).
pub fn manifest(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let read = |_: &str| Ok(b"kernel void k(){}".to_vec());
    let m = match crate::parse(Path::new("fuzz/accelerator.toml"), text, &read) {
        Ok(m) => m,
        Err(e) => {
            assert!(!e.reason.trim().is_empty(), "{e:?}");
            return;
        }
    };
    let mut used = [false; accel::PARAMS_LEN];
    for p in &m.params {
        assert_eq!(p.offset % p.ty.size(), 0);
        for byte in p.range() {
            assert!(!used[byte], "overlap");
            used[byte] = true;
        }
    }
    assert!(m.opencl.is_some() || m.rtl.is_some());
    assert_eq!(m.hash.len(), 32);
}
