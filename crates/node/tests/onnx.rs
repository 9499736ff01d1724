//! ONNX models in slots, black box: a node started with a model repository serves the
//! digits CNN of `models/` over `/v1/fn`, RAC and v2 with the logits tract computes in
//! process, refuses a broken model at start and serves the rest, and answers a wrong
//! input size or shape with each protocol's error while it keeps serving.
//! (`docs/tests/test_onnx.py` checks the predictions against onnxruntime.)

mod common;

use std::path::{Path, PathBuf};

use accel::Accelerator;
use common::{curl, f32_bytes, start_refused, TestNode};
use netaccel_client::rac::{RacClient, RacError};
use rac_proto::Status;

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../models")
        .canonicalize()
        .unwrap()
}

/// Images of the digits data set's range (0..16), deterministic.
fn images(n: usize) -> Vec<u8> {
    let v: Vec<f32> = (0..n * 64).map(|i| ((i * 5 + i / 7) % 17) as f32).collect();
    f32_bytes(&v)
}

/// What tract computes in process for `payload`: the reference the node must give.
fn in_process(payload: &[u8]) -> Vec<u8> {
    let found = netaccel_onnx::scan(&models())
        .unwrap()
        .found
        .into_iter()
        .find(|f| f.name == "digits")
        .unwrap();
    let mut out = Vec::new();
    found
        .into_model(256, &netaccel_onnx::Engines::default())
        .unwrap()
        .run(&[0; 44], payload, &mut out)
        .unwrap();
    out
}

/// A folder removed on drop, pass or fail.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_digits_cnn_is_served_over_every_transport_and_broken_models_are_refused() {
    // A repository with the digits CNN and one model that is not an ONNX file.
    let dir =
        TempDir(std::env::temp_dir().join(format!("netaccel-onnx-node-{}", std::process::id())));
    let repo = &dir.0;
    let _ = std::fs::remove_dir_all(repo);
    std::fs::create_dir_all(repo.join("digits/1")).unwrap();
    std::fs::create_dir_all(repo.join("broken/1")).unwrap();
    for (from, to) in [
        ("digits/config.toml", "digits/config.toml"),
        ("digits/1/model.onnx", "digits/1/model.onnx"),
        ("digits/config.toml", "broken/config.toml"),
    ] {
        std::fs::copy(models().join(from), repo.join(to)).unwrap();
    }
    std::fs::write(repo.join("broken/1/model.onnx"), b"not onnx").unwrap();
    let node = TestNode::start_logging(
        &format!("models_dir = {:?}\n", repo.display().to_string()),
        &["--log-level", "info"],
    );
    let log = node.log();
    assert!(
        log.contains("ONNX model refused") && log.contains("broken"),
        "{log}"
    );
    let catalog = node.get_json("/v1/accelerators");
    let entry = |name: &str| {
        catalog
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .cloned()
    };
    assert!(entry("broken").is_none());
    let digits = entry("digits").expect("digits in the catalog");
    let id = digits["id"].as_u64().unwrap() as u16;
    // Issue 29: `broken`, refused and sorted before `digits`, made it 257 instead of
    // 256; the id is now the one derived from the name, whatever else is there.
    assert_eq!(id, netaccel_node::device::model_id_from_name("digits"));
    assert_eq!(digits["backends"], serde_json::json!(["cpu"]));

    // /v1/fn: a batch of 3 gives tract's logits.
    let batch = images(3);
    let body_file = node.dir.join("three.bin");
    std::fs::write(&body_file, &batch).unwrap();
    let url = node.url("/v1/fn/digits");
    let data = format!("@{}", body_file.display());
    let (status, out) = curl(&["--data-binary", &data, &url]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
    let want = in_process(&batch);
    assert_eq!(out.len(), 3 * 40);
    assert_eq!(out, want);
    // Not a whole number of images: 400, and the node goes on serving.
    let (status, out) = curl(&["--data-binary", "abc", &url]);
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&out).contains("items of 256 bytes"));

    // RAC: the same bytes, the same logits; a wrong size is BAD_REQUEST.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = RacClient::connect(&node.rac_addr.to_string())
            .await
            .unwrap();
        let r = c.call(id, [0; 44], batch.clone(), 0).await.unwrap();
        assert_eq!(r.payload, want);
        match c.call(id, [0; 44], vec![0; 100], 0).await {
            Err(RacError::Status { status, .. }) => assert_eq!(status, Status::BadRequest),
            other => panic!("expected BAD_REQUEST, got {other:?}"),
        }
        // One image runs on tract's plan for batch 1 (other kernels than a batch of 3:
        // the same logits but for the last bits), so it is compared with one image in
        // process.
        let one = c.call(id, [0; 44], batch[..256].to_vec(), 0).await.unwrap();
        assert_eq!(one.payload, in_process(&batch[..256]));
    });

    // v2: the model's names and a batch axis; a shape without it is refused.
    let v2 = node.url("/v2/models/digits/infer");
    let values: Vec<f32> = batch[..256]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let request = |shape: &str| {
        format!(
            r#"{{"inputs":[{{"name":"image","shape":{shape},"datatype":"FP32","data":{values:?}}}]}}"#
        )
    };
    let (status, out) = curl(&["-d", &request("[1, 8, 8]"), &v2]);
    assert_eq!(status, 400);
    let err: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert!(err["error"]
        .as_str()
        .unwrap()
        .contains("takes shape [-1, 1, 8, 8]"));
    let (status, out) = curl(&["-d", &request("[1, 1, 8, 8]"), &v2]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
    let answer: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(answer["outputs"][0]["name"], "logits");
    assert_eq!(answer["outputs"][0]["shape"], serde_json::json!([1, 10]));
    let logits: Vec<f32> = serde_json::from_value(answer["outputs"][0]["data"].clone()).unwrap();
    assert_eq!(f32_bytes(&logits), in_process(&batch[..256]));
}

/// The `libonnxruntime.so` of the onnxruntime Python wheel (test.sh installs it), or
/// `None` outside CI when it is not installed (in CI, a failure).
/// Two models with one id (here both fixed at 300) stop the node at start with a
/// configuration error naming both, rather than one of them being served depending on
/// folder order; a derived id is the same on every start.
#[test]
fn a_shared_model_id_is_refused_at_start_naming_both_models() {
    let dir =
        TempDir(std::env::temp_dir().join(format!("netaccel-onnx-ids-{}", std::process::id())));
    let repo = &dir.0;
    let _ = std::fs::remove_dir_all(repo);
    let config = std::fs::read_to_string(models().join("digits/config.toml")).unwrap();
    for name in ["digits", "digits_twin"] {
        std::fs::create_dir_all(repo.join(name).join("1")).unwrap();
        std::fs::copy(
            models().join("digits/1/model.onnx"),
            repo.join(name).join("1/model.onnx"),
        )
        .unwrap();
        std::fs::write(
            repo.join(name).join("config.toml"),
            format!("id = 300\n{config}"),
        )
        .unwrap();
    }
    let (code, stderr) = start_refused(
        &format!("models_dir = {:?}\n", repo.display().to_string()),
        &[],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("models digits and digits_twin both have accelerator id 300"),
        "{stderr}"
    );
    assert!(stderr.contains("id = N"), "{stderr}");
    // Derived ids: fixed values, within the user range.
    let derived = netaccel_node::device::model_id_from_name;
    assert_eq!(derived("digits"), derived("digits"));
    assert_ne!(derived("digits"), derived("digits_twin"));
    for name in ["digits", "a", "", "digits_ort", "x".repeat(200).as_str()] {
        assert!((256..=65534).contains(&derived(name)), "{name}");
    }
}

fn onnxruntime_library() -> Option<PathBuf> {
    let found = std::process::Command::new("python3")
        .args([
            "-c",
            "import glob, os, onnxruntime; \
             print(sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), \
             'capi', 'libonnxruntime.so*')))[0])",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "the onnxruntime Python wheel is not installed; CI needs it (test.sh installs it)"
        );
        eprintln!(
            "skipped: the onnxruntime Python wheel (pip install onnxruntime) is not installed"
        );
    }
    found
}

/// A repository in `dir` with the digits CNN under `name`, run by ONNX Runtime.
fn onnxruntime_repository(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir.join(name).join("1")).unwrap();
    std::fs::copy(
        models().join("digits/1/model.onnx"),
        dir.join(name).join("1/model.onnx"),
    )
    .unwrap();
    let config = std::fs::read_to_string(models().join("digits/config.toml")).unwrap();
    std::fs::write(
        dir.join(name).join("config.toml"),
        format!("backend = \"onnxruntime\"\n{config}"),
    )
    .unwrap();
}

/// `execution_provider = "cuda"` (and `"tensorrt"`): with the CPU build of ONNX
/// Runtime (this machine's, the onnxruntime wheel's) the model is refused at load,
/// saying which library would serve it — never run on the CPU instead. Where the
/// library is a GPU build on a host with a GPU, the same test finds the models served
/// and checks their logits against tract's: the check that runs where a GPU exists.
#[test]
fn a_gpu_execution_provider_runs_on_the_gpu_or_is_refused_saying_why() {
    let Some(library) = onnxruntime_library() else {
        return;
    };
    let dir =
        TempDir(std::env::temp_dir().join(format!("netaccel-onnx-ep-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    for provider in ["cuda", "tensorrt"] {
        let name = format!("digits_{provider}");
        onnxruntime_repository(&dir.0, &name);
        let config = dir.0.join(&name).join("config.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(
            &config,
            format!("execution_provider = \"{provider}\"\n{text}"),
        )
        .unwrap();
    }
    let node = TestNode::start_logging(
        &format!(
            "models_dir = {:?}\nonnxruntime_library = {:?}\n",
            dir.0.display().to_string(),
            library.display().to_string()
        ),
        &["--log-level", "info"],
    );
    let log = node.log();
    let catalog = node.get_json("/v1/accelerators");
    for provider in ["cuda", "tensorrt"] {
        let name = format!("digits_{provider}");
        let served = catalog
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == name.as_str());
        if served {
            let batch = images(2);
            let body_file = node.dir.join(format!("{provider}.bin"));
            std::fs::write(&body_file, &batch).unwrap();
            let data = format!("@{}", body_file.display());
            let (status, out) =
                curl(&["--data-binary", &data, &node.url(&format!("/v1/fn/{name}"))]);
            assert_eq!(status, 200);
            assert_eq!(out.len(), in_process(&batch).len());
            eprintln!("{name}: served on the GPU by this ONNX Runtime");
        } else {
            let want = format!("execution_provider = \\\"{provider}\\\"");
            let plain = format!("execution_provider = \"{provider}\"");
            assert!(
                (log.contains(&want) || log.contains(&plain)) && log.contains("onnxruntime-gpu"),
                "{name} neither served nor refused with what to do:\n{log}"
            );
        }
    }
}

#[test]
fn the_onnxruntime_backend_gives_tracts_logits_and_a_missing_library_is_named() {
    let dir =
        TempDir(std::env::temp_dir().join(format!("netaccel-onnx-ort-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    onnxruntime_repository(&dir.0, "digits_ort");
    let models_dir = format!("models_dir = {:?}\n", dir.0.display().to_string());

    // A library that is not there: the model is refused naming the key, the node runs.
    let missing = dir.0.join("no-such-libonnxruntime.so");
    let node = TestNode::start_logging(
        &format!(
            "{models_dir}onnxruntime_library = {:?}\n",
            missing.display().to_string()
        ),
        &["--log-level", "info"],
    );
    let log = node.log();
    assert!(
        log.contains("ONNX model refused")
            && log.contains("onnxruntime_library")
            && log.contains("no-such-libonnxruntime.so"),
        "{log}"
    );
    let catalog = node.get_json("/v1/accelerators");
    assert!(!catalog
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["name"] == "digits_ort"));
    drop(node);

    let Some(library) = onnxruntime_library() else {
        return;
    };
    let node = TestNode::start_logging(
        &format!(
            "{models_dir}onnxruntime_library = {:?}\n",
            library.display().to_string()
        ),
        &["--log-level", "info"],
    );
    let log = node.log();
    assert!(
        log.contains("backend=\"onnxruntime\"") || log.contains("backend=onnxruntime"),
        "{log}"
    );
    let catalog = node.get_json("/v1/accelerators");
    let id = catalog
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "digits_ort")
        .unwrap_or_else(|| panic!("digits_ort not served: {log}"))["id"]
        .as_u64()
        .unwrap() as u16;
    let close = |got: &[u8], want: &[u8]| {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.chunks_exact(4).zip(want.chunks_exact(4)).enumerate() {
            let (g, w) = (
                f32::from_le_bytes(g.try_into().unwrap()),
                f32::from_le_bytes(w.try_into().unwrap()),
            );
            assert!(
                (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                "logit {i}: {g} vs tract's {w}"
            );
        }
    };
    // One image, a full batch and a size between (tract's symbolic plan) over RAC.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = RacClient::connect(&node.rac_addr.to_string())
            .await
            .unwrap();
        for n in [1, 5, 64] {
            let batch = images(n);
            let r = c.call(id, [0; 44], batch.clone(), 0).await.unwrap();
            close(&r.payload, &in_process(&batch));
        }
        match c.call(id, [0; 44], vec![0; 100], 0).await {
            Err(RacError::Status { status, .. }) => assert_eq!(status, Status::BadRequest),
            other => panic!("expected BAD_REQUEST, got {other:?}"),
        }
    });
    // /v1/fn too.
    let batch = images(3);
    let body_file = node.dir.join("three.bin");
    std::fs::write(&body_file, &batch).unwrap();
    let data = format!("@{}", body_file.display());
    let (status, out) = curl(&["--data-binary", &data, &node.url("/v1/fn/digits_ort")]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
    close(&out, &in_process(&batch));
}
