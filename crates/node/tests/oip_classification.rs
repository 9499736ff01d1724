//! The classification extension, black box: the digits CNN of `models/` served with a
//! label file (`label_filename` in its config.toml) answers an output asked for with
//! `classification` as its top classes, `"<value>:<index>:<label>"`, per image, the
//! first being the class of the largest logit; an output that cannot be classified
//! (a built-in's) is refused with 400 rather than answered unclassified. The model's
//! `/config` shows the label file and the input's `format`, as image clients read them.

mod common;

use std::path::{Path, PathBuf};

use common::{curl, TestNode};
use serde_json::{json, Value};

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../models")
        .canonicalize()
        .unwrap()
}

/// A folder removed on drop, pass or fail.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const LABELS: [&str; 10] = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
];

#[test]
fn class_count_answers_the_top_classes_with_their_labels() {
    let dir =
        TempDir(std::env::temp_dir().join(format!("netaccel-oip-cls-{}", std::process::id())));
    let repo = &dir.0;
    let _ = std::fs::remove_dir_all(repo);
    std::fs::create_dir_all(repo.join("digits/1")).unwrap();
    std::fs::copy(
        models().join("digits/1/model.onnx"),
        repo.join("digits/1/model.onnx"),
    )
    .unwrap();
    let config = std::fs::read_to_string(models().join("digits/config.toml")).unwrap();
    let config = config.replacen(
        "dims = [10]",
        "dims = [10]\nlabel_filename = \"labels.txt\"",
        1,
    );
    let config = config.replacen(
        "dims = [1, 8, 8]",
        "dims = [1, 8, 8]\nformat = \"FORMAT_NCHW\"",
        1,
    );
    assert!(
        config.contains("label_filename") && config.contains("format"),
        "{config}"
    );
    std::fs::write(repo.join("digits/config.toml"), config).unwrap();
    std::fs::write(repo.join("digits/labels.txt"), LABELS.join("\n") + "\n").unwrap();
    let node = TestNode::start_logging(
        &format!("models_dir = {:?}\n", repo.display().to_string()),
        &["--log-level", "info"],
    );
    // The configuration clients read: the input's format, the output's label file.
    let served = node.get_json("/v2/models/digits/config");
    assert_eq!(served["input"][0]["format"], "FORMAT_NCHW", "{served}");
    assert_eq!(
        served["output"][0]["label_filename"], "labels.txt",
        "{served}"
    );
    assert_eq!(served["max_batch_size"], 64);
    assert_eq!(served["input"][0]["dims"], json!([1, 8, 8]));
    // The engine that runs it (config.toml's default), as Triton names a backend.
    assert_eq!(served["backend"], "tract", "{served}");

    let images: Vec<f32> = (0..2 * 64).map(|i| ((i * 7 + i / 5) % 17) as f32).collect();
    let request = |outputs: Value| {
        json!({"inputs": [{"name": "image", "shape": [2, 1, 8, 8], "datatype": "FP32", "data": images}],
               "outputs": outputs})
        .to_string()
    };
    let url = node.url("/v2/models/digits/infer");
    let (status, out) = curl(&["-d", &request(json!([{"name": "logits"}])), &url]);
    assert_eq!(
        status,
        200,
        "{}\n{}",
        String::from_utf8_lossy(&out),
        node.log()
    );
    let logits: Vec<f64> = serde_json::from_value(
        serde_json::from_slice::<Value>(&out).unwrap()["outputs"][0]["data"].clone(),
    )
    .unwrap();

    let asked = request(json!([{"name": "logits", "parameters": {"classification": 3}}]));
    let (status, out) = curl(&["-d", &asked, &url]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
    let answer: Value = serde_json::from_slice(&out).unwrap();
    let tensor = &answer["outputs"][0];
    assert_eq!(tensor["datatype"], "BYTES");
    assert_eq!(tensor["shape"], json!([2, 3]));
    let classes: Vec<String> = serde_json::from_value(tensor["data"].clone()).unwrap();
    for (item, top) in classes.chunks(3).enumerate() {
        let row = &logits[item * 10..item * 10 + 10];
        let mut order: Vec<usize> = (0..10).collect();
        order.sort_by(|&a, &b| row[b].partial_cmp(&row[a]).unwrap());
        for (text, &index) in top.iter().zip(&order) {
            let want = format!("{:.6}:{index}:{}", row[index], LABELS[index]);
            assert_eq!(text, &want, "image {item}: {classes:?}");
        }
    }

    // A built-in's output cannot be classified: 400, never an unclassified answer.
    let topk = json!({"parameters": {"k": 1},
        "inputs": [{"name": "INPUT0", "shape": [2], "datatype": "INT32", "data": [1, 2]}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 1}}]})
    .to_string();
    let (status, out) = curl(&["-d", &topk, &node.url("/v2/models/topk/infer")]);
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&out));
    assert!(String::from_utf8_lossy(&out).contains("cannot be classified"));
    let zero = request(json!([{"name": "logits", "parameters": {"classification": 0}}]));
    let (status, _) = curl(&["-d", &zero, &url]);
    assert_eq!(status, 400);
}
