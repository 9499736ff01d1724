//! The model repository against the committed digits CNN, and models that must be
//! refused at load with a reason.

use std::fs;
use std::path::{Path, PathBuf};

use accel::Accelerator;
use netaccel_onnx::{scan, Engines, Model};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models")
}

fn digits() -> Model {
    let s = scan(&repo()).unwrap();
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let found = s.found.into_iter().find(|f| f.name == "digits").unwrap();
    assert_eq!(found.version, 1);
    found.into_model(300, &Engines::default()).unwrap()
}

/// A deterministic image batch: pixel values 0..16 as the data set's.
fn images(n: usize) -> Vec<u8> {
    (0..n * 64)
        .flat_map(|i| (((i * 7 + i / 64) % 17) as f32).to_le_bytes())
        .collect()
}

fn logits(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn the_digits_cnn_runs_one_image_and_a_batch_alike() {
    let m = digits();
    let t = m.tensors().unwrap();
    assert_eq!((t.input_item_bytes(), t.output_item_bytes()), (256, 40));
    let session = m.session().unwrap();
    let batch = images(64);
    let mut out = Vec::new();
    session.run(&batch, &mut out).unwrap();
    assert_eq!(out.len(), 64 * 40);
    let all = logits(&out);
    assert!(all.iter().all(|v| v.is_finite()));
    // Each image alone gives its row of the batch (the same session, reused).
    for i in [0, 17, 63] {
        let mut one = Vec::new();
        session
            .run(&batch[i * 256..(i + 1) * 256], &mut one)
            .unwrap();
        let row = logits(&one);
        for (a, b) in row.iter().zip(&all[i * 10..(i + 1) * 10]) {
            assert!((a - b).abs() < 1e-4, "image {i}: {a} vs {b}");
        }
    }
    // The catalog entry's own run agrees with a slot's session.
    let mut again = Vec::new();
    m.run(&[0; 44], &batch, &mut again).unwrap();
    assert_eq!(again, out);
    // Sizes that are not a whole batch of 1..=64 images are refused before running.
    for len in [0, 255, 257, 65 * 256] {
        assert!(m.check(&[0; 44], Some(len)).is_err(), "{len}");
        assert!(session.run(&vec![0; len], &mut out).is_err(), "{len}");
    }
    assert_eq!(
        m.work_estimate(&[0; 44], 2 * 256),
        2 * m.work_estimate(&[0; 44], 256)
    );
    assert!(
        m.work_estimate(&[0; 44], 256) > 10_000,
        "a conv and two dense layers"
    );
}

/// A repository in a temporary folder, removed on drop.
struct TempRepo(PathBuf);

impl TempRepo {
    fn new(tag: &str) -> TempRepo {
        let dir = std::env::temp_dir().join(format!("netaccel-onnx-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempRepo(dir)
    }

    fn model(&self, name: &str, config: &str, onnx: Option<&[u8]>) {
        let d = self.0.join(name);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("config.toml"), config).unwrap();
        if let Some(bytes) = onnx {
            fs::create_dir_all(d.join("1")).unwrap();
            fs::write(d.join("1/model.onnx"), bytes).unwrap();
        }
    }
}

impl Drop for TempRepo {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn malformed_models_are_refused_with_their_folder_and_reason() {
    let good_config = fs::read_to_string(repo().join("digits/config.toml")).unwrap();
    let good_onnx = fs::read(repo().join("digits/1/model.onnx")).unwrap();
    let r = TempRepo::new("bad");
    r.model("digits", &good_config, Some(&good_onnx));
    r.model("garbage", &good_config, Some(b"not an onnx file at all"));
    r.model(
        "truncated",
        &good_config,
        Some(&good_onnx[..good_onnx.len() / 2]),
    );
    r.model("noversion", &good_config, None);
    r.model("badconfig", "max_batch_size = \"many\"", Some(&good_onnx));
    r.model(
        "renamed",
        &good_config.replace("\"image\"", "\"pixels\""),
        Some(&good_onnx),
    );
    r.model(
        "wrongdims",
        &good_config.replace("[10]", "[12]"),
        Some(&good_onnx),
    );
    r.model(
        "wrongtype",
        &good_config.replacen("TYPE_FP32", "TYPE_INT32", 1),
        Some(&good_onnx),
    );
    r.model(
        "wronginput",
        &good_config.replace("[1, 8, 8]", "[1, 9, 9]"),
        Some(&good_onnx),
    );
    r.model(".hidden", "not even toml", None);
    r.model("bad name!", &good_config, Some(&good_onnx));
    let s = scan(&r.0).unwrap();
    assert_eq!(s.errors.len(), 3, "{:?}", s.errors);
    assert!(s
        .errors
        .iter()
        .any(|e| e.contains("bad name!") && e.contains("folder name")));
    assert!(s
        .errors
        .iter()
        .any(|e| e.contains("badconfig") && e.contains("config.toml")));
    assert!(s
        .errors
        .iter()
        .any(|e| e.contains("noversion") && e.contains("no version")));
    let mut refused = Vec::new();
    for (i, f) in s.found.into_iter().enumerate() {
        let name = f.name.clone();
        match f.into_model(300 + i as u16, &Engines::default()) {
            Ok(_) => assert_eq!(name, "digits"),
            Err(e) => refused.push((name, e)),
        }
    }
    let reason = |n: &str| &refused.iter().find(|(m, _)| m == n).unwrap().1;
    assert_eq!(refused.len(), 6, "{refused:?}");
    assert!(
        reason("garbage").contains("not a model tract can read"),
        "{}",
        reason("garbage")
    );
    assert!(!reason("truncated").is_empty());
    assert!(
        reason("renamed").contains("\"pixels\""),
        "{}",
        reason("renamed")
    );
    assert!(
        reason("wrongdims").contains("[12]"),
        "{}",
        reason("wrongdims")
    );
    assert!(!reason("wrongtype").is_empty());
    assert!(!reason("wronginput").is_empty());
    assert!(scan(&r.0.join("absent")).is_err());
}
