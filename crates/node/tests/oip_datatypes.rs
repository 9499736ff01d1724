//! Every datatype of the Open Inference Protocol, black box: the real node serves a
//! model repository of Identity models, one per family of datatypes (written at test
//! time by `oip/make_models.py` with the `onnx` package), and the unmodified
//! `tritonclient` sends each datatype over HTTP (JSON and binary tensor data) and gRPC
//! (raw and typed contents) and must get it back (`oip/datatypes.py`). A model with a
//! type no engine takes (BF16) is refused at load, naming the type.
//!
//! Needs python3 with `onnx` and `tritonclient[http,grpc]` (test.sh installs them):
//! without them the test says so and passes, except under CI, where it fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{free_addr, TestNode};

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oip")
}

/// Whether python3 imports `modules`; outside CI a missing one skips the test.
fn python_has(modules: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "python3 cannot import {modules}; CI needs them (test.sh installs them)"
        );
        eprintln!(
            "skipped: python3 cannot import {modules} (pip install onnx tritonclient[http,grpc])"
        );
    }
    ok
}

/// The onnxruntime wheel's library, when it is installed (the ONNX Runtime models are
/// then served and driven too).
fn onnxruntime_library() -> Option<String> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import glob, os, onnxruntime; \
             print(sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), \
             'capi', 'libonnxruntime.so*')))[0])",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A folder removed on drop, pass or fail.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn every_datatype_round_trips_over_http_and_grpc_through_tritonclient() {
    if !python_has("onnx, numpy, tritonclient.http, tritonclient.grpc") {
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("netaccel-oip-dt-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let library = onnxruntime_library();
    let mut make = Command::new("python3");
    make.arg(here().join("make_models.py")).arg(&dir.0);
    if library.is_some() {
        make.arg("--onnxruntime");
    }
    let made = make.output().unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );

    let mut config = format!("models_dir = {:?}\n", dir.0.display().to_string());
    if let Some(lib) = &library {
        config.push_str(&format!("onnxruntime_library = {lib:?}\n"));
    }
    let (node, grpc) = TestNode::start_logging_with(
        || {
            let grpc = free_addr();
            (format!("grpc = \"{grpc}\"\n{config}"), grpc)
        },
        &["--log-level", "info"],
    );
    let log = node.log();
    // No engine takes BF16: refused at load, naming the type and the engine.
    assert!(
        log.contains("ONNX model refused") && log.contains("TYPE_BF16") && log.contains("tract"),
        "{log}"
    );
    let mut models = vec!["ints", "floats", "strings"];
    if library.is_some() {
        // ONNX Runtime: everything but FP16 and BF16, which it refuses naming them.
        assert!(
            log.contains("fp16_ort") && log.contains("TYPE_FP16"),
            "{log}"
        );
        models.extend(["ints_ort", "strings_ort"]);
    }
    let out = Command::new("python3")
        .arg(here().join("datatypes.py"))
        .arg(node.addr.to_string())
        .arg(grpc.to_string())
        .args(&models)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}\nnode log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        node.log()
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    for model in &models {
        assert!(printed.contains(&format!("http {model}: ok")), "{printed}");
        assert!(printed.contains(&format!("grpc {model}: ok")), "{printed}");
    }
}
