//! The Open Inference Protocol's extensions over HTTP, black box (issue 30): statistics
//! counted on the call path (each call adds exactly one inference, failures apart), and
//! the model repository (index, unload draining the calls in flight, load back, a
//! configuration override — the instance count, and a batch size the model is rebuilt
//! with while calls come, an impossible one refused naming the field — built-ins
//! kept, the admin token). The same extensions
//! through `tritonclient` over HTTP and gRPC: `crates/node/tests/triton_examples/`.

mod common;

use std::path::Path;

use common::{curl, TestNode};
use serde_json::{json, Value};

fn models() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../models")
        .canonicalize()
        .unwrap()
        .display()
        .to_string()
}

fn post(node: &TestNode, path: &str, body: &str, extra: &[&str]) -> (u16, Value) {
    let url = node.url(path);
    let mut args = vec!["-X", "POST", "--data-binary", body, url.as_str()];
    args.extend_from_slice(extra);
    let (status, out) = curl(&args);
    let doc = serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("{path}: {e}: {}", String::from_utf8_lossy(&out)));
    (status, doc)
}

fn infer_topk(node: &TestNode) -> u16 {
    let body = json!({
        "inputs": [{"name": "INPUT0", "shape": [4], "datatype": "INT32", "data": [3, 1, 4, 1]}],
        "parameters": {"k": 2},
    });
    post(node, "/v2/models/topk/infer", &body.to_string(), &[]).0
}

fn stats_of(node: &TestNode, path: &str) -> Value {
    let doc = node.get_json(path);
    let list = doc["model_stats"].as_array().expect("model_stats");
    assert_eq!(list.len(), 1, "{doc}");
    list[0].clone()
}

fn count(stats: &Value, what: &str) -> u64 {
    stats["inference_stats"][what]["count"].as_u64().unwrap()
}

#[test]
fn statistics_count_each_call_and_each_phase() {
    let node = TestNode::start("");
    let before = stats_of(&node, "/v2/models/topk/stats");
    assert_eq!(before["name"], "topk");
    assert_eq!(before["version"], "1");
    for _ in 0..5 {
        assert_eq!(infer_topk(&node), 200);
    }
    // A request the model refuses (no such input) counts as a failure only.
    let bad = json!({"inputs": [{"name": "NOPE", "shape": [1], "datatype": "INT32", "data": [1]}]});
    let (status, _) = post(&node, "/v2/models/topk/infer", &bad.to_string(), &[]);
    assert_eq!(status, 400);
    let after = stats_of(&node, "/v2/models/topk/versions/1/stats");
    let delta = |f: &dyn Fn(&Value) -> u64| f(&after) - f(&before);
    assert_eq!(delta(&|s| s["inference_count"].as_u64().unwrap()), 5);
    assert_eq!(delta(&|s| s["execution_count"].as_u64().unwrap()), 5);
    for phase in [
        "success",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
    ] {
        assert_eq!(delta(&|s| count(s, phase)), 5, "{phase}: {after}");
        let ns = after["inference_stats"][phase]["ns"].as_u64().unwrap();
        assert!(ns > 0, "{phase} took no time: {after}");
    }
    assert_eq!(delta(&|s| count(s, "fail")), 1);
    // The whole request takes longer than its kernel.
    let ns = |s: &Value, p: &str| s["inference_stats"][p]["ns"].as_u64().unwrap();
    assert!(
        ns(&after, "success") >= ns(&after, "compute_infer"),
        "{after}"
    );
    assert_eq!(after["batch_stats"][0]["batch_size"], 1);
    assert_eq!(after["batch_stats"][0]["compute_infer"]["count"], 5);
    assert!(after["last_inference"].as_u64().unwrap() > 1_600_000_000_000);
    // /v1/fn calls are not inferences of the protocol.
    let url = node.url("/v1/fn/echo");
    assert_eq!(curl(&["--data-binary", "hi", &url]).0, 200);
    let all = node.get_json("/v2/models/stats");
    let echo = all["model_stats"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "echo")
        .expect("every model is listed")
        .clone();
    assert_eq!(echo["inference_count"], 0);
    // Unknown models and versions are refused; the server lists the extension.
    assert_eq!(curl(&[&node.url("/v2/models/nope/stats")]).0, 404);
    assert_eq!(
        curl(&[&node.url("/v2/models/topk/versions/2/stats")]).0,
        404
    );
    let (status, _) = post(&node, "/v2/models/stats", "", &[]);
    assert_eq!(status, 405);
    let meta = node.get_json("/v2");
    let extensions = meta["extensions"].as_array().unwrap();
    assert!(extensions.contains(&json!("statistics")), "{meta}");
    assert!(extensions.contains(&json!("model_repository")), "{meta}");
}

fn state(node: &TestNode, model: &str) -> String {
    let (status, index) = post(node, "/v2/repository/index", "{}", &[]);
    assert_eq!(status, 200);
    index
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == model)
        .map(|m| m["state"].as_str().unwrap().to_string())
        .unwrap_or_else(|| "ABSENT".into())
}

fn digits_infer(node: &TestNode) -> u16 {
    let body = json!({"inputs": [{"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32",
        "data": vec![1.0f32; 64]}]});
    post(node, "/v2/models/digits/infer", &body.to_string(), &[]).0
}

#[test]
fn the_repository_unloads_with_nothing_lost_and_loads_back() {
    let node = TestNode::start(&format!("models_dir = {:?}\n", models()));
    assert_eq!(state(&node, "digits"), "READY");
    assert_eq!(state(&node, "echo"), "READY");
    assert_eq!(digits_infer(&node), 200);

    // Calls in flight during the unload are all answered: run on the model (200) or
    // refused as the slot swaps (503 while reconfiguring, 404 once no slot hosts it).
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let url = node.url("/v2/models/digits/infer");
            std::thread::spawn(move || {
                let body = json!({"inputs": [{"name": "image", "shape": [1, 1, 8, 8],
                    "datatype": "FP32", "data": vec![2.0f32; 64]}]})
                .to_string();
                (0..10)
                    .map(|_| curl(&["-X", "POST", "--data-binary", &body, &url]).0)
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    let (status, doc) = post(&node, "/v2/repository/models/digits/unload", "", &[]);
    assert_eq!((status, doc), (200, json!({})));
    for caller in callers {
        for code in caller.join().unwrap() {
            assert!(matches!(code, 200 | 503 | 404), "{code}");
        }
    }
    assert_eq!(state(&node, "digits"), "UNAVAILABLE");
    let (status, ready) = post(&node, "/v2/repository/index", r#"{"ready": true}"#, &[]);
    assert_eq!(status, 200);
    assert!(ready
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["state"] == "READY"));
    assert!(!ready
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["name"] == "digits"));
    assert_eq!(digits_infer(&node), 404);
    assert_eq!(curl(&[&node.url("/v2/models/digits/ready")]).0, 503);

    // Load: back in a slot (a spare: the one unloading gave to echo).
    let (status, _) = post(&node, "/v2/repository/models/digits/load", "", &[]);
    assert_eq!(status, 200);
    assert_eq!(state(&node, "digits"), "READY");
    assert_eq!(digits_infer(&node), 200);
    // An override may set the instance count; two need a spare the node lacks.
    let two = json!({"parameters": {"config":
        json!({"instance_group": [{"kind": "KIND_CPU", "count": 2}]}).to_string()}});
    let (status, doc) = post(
        &node,
        "/v2/repository/models/digits/load",
        &two.to_string(),
        &[],
    );
    assert_eq!(status, 503, "{doc}");
    assert!(
        doc["error"].as_str().unwrap().contains("no spare slot"),
        "{doc}"
    );
    // It cannot change the model's tensors (its batch: see the next test).
    let other = json!({"parameters": {"config": r#"{"max_batch_size": 5000}"#}});
    let (status, doc) = post(
        &node,
        "/v2/repository/models/digits/load",
        &other.to_string(),
        &[],
    );
    assert_eq!(status, 400, "{doc}");
    assert!(
        doc["error"].as_str().unwrap().contains("max_batch_size"),
        "{doc}"
    );

    // Built-ins stay; unknown models are not found; only POST.
    let (status, doc) = post(&node, "/v2/repository/models/echo/unload", "", &[]);
    assert_eq!(status, 400, "{doc}");
    assert_eq!(state(&node, "echo"), "READY");
    let (status, _) = post(&node, "/v2/repository/models/nope/load", "", &[]);
    assert_eq!(status, 404);
    assert_eq!(curl(&[&node.url("/v2/repository/index")]).0, 405);
    let (status, _) = post(&node, "/v2/repository/index", "{not json", &[]);
    assert_eq!(status, 400);
}

/// A digits call of `batch` images: its status and, when 200, its logits' shape.
fn digits_batch(node: &TestNode, batch: usize) -> (u16, Value) {
    let body = json!({"inputs": [{"name": "image", "shape": [batch, 1, 8, 8],
        "datatype": "FP32", "data": vec![1.0f32; 64 * batch]}]});
    let (status, doc) = post(node, "/v2/models/digits/infer", &body.to_string(), &[]);
    (status, doc["outputs"][0]["shape"].clone())
}

fn load_with(node: &TestNode, config: &str) -> (u16, Value) {
    let body = json!({"parameters": {"config": config}}).to_string();
    post(node, "/v2/repository/models/digits/load", &body, &[])
}

#[test]
fn a_load_overriding_the_batch_rebuilds_the_model_with_every_call_answered_once() {
    let node = TestNode::start(&format!("models_dir = {:?}\n", models()));
    assert_eq!(
        node.get_json("/v2/models/digits/config")["max_batch_size"],
        64
    );
    assert_eq!(digits_batch(&node, 40).0, 200);

    // Calls during the reload: each answered once, by the old model or the new one
    // (200), or refused while the slot swaps (503); none lost, none wrong.
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let url = node.url("/v2/models/digits/infer");
            std::thread::spawn(move || {
                let body = json!({"inputs": [{"name": "image", "shape": [2, 1, 8, 8],
                    "datatype": "FP32", "data": vec![3.0f32; 128]}]})
                .to_string();
                (0..15)
                    .map(|_| curl(&["-X", "POST", "--data-binary", &body, &url]))
                    .collect::<Vec<(u16, Vec<u8>)>>()
            })
        })
        .collect();
    // As Triton's examples send it: the number as a string.
    let (status, doc) = load_with(&node, r#"{"max_batch_size":"16"}"#);
    assert_eq!((status, &doc), (200, &json!({})));
    for caller in callers {
        for (code, body) in caller.join().unwrap() {
            let doc: Value = serde_json::from_slice(&body).expect("one JSON answer");
            match code {
                200 => assert_eq!(doc["outputs"][0]["shape"], json!([2, 10]), "{doc}"),
                503 => assert!(doc["error"].is_string(), "{doc}"),
                _ => panic!("{code}: {doc}"),
            }
        }
    }
    // The model is the rebuilt one, everywhere.
    assert_eq!(
        node.get_json("/v2/models/digits/config")["max_batch_size"],
        16
    );
    assert_eq!(state(&node, "digits"), "READY");
    assert_eq!(digits_batch(&node, 16), (200, json!([16, 10])));
    assert_eq!(digits_batch(&node, 17).0, 400);

    // What the model cannot take is refused naming the field, and nothing changes.
    for (config, field) in [
        (
            r#"{"max_batch_size": 5000}"#,
            "max_batch_size: 5000 is more than 4096",
        ),
        (r#"{"max_batch_size": 0}"#, "parameters.config: "),
        (
            r#"{"max_batch_size": "many"}"#,
            "max_batch_size must be a whole number",
        ),
        (r#"{"backend": "pytorch"}"#, "cannot change backend"),
        (
            r#"{"max_batch_size": 8, "input": []}"#,
            "cannot change input",
        ),
    ] {
        let (status, doc) = load_with(&node, config);
        assert_eq!(status, 400, "{config}: {doc}");
        let message = doc["error"].as_str().unwrap();
        assert!(
            message.starts_with("failed to load 'digits': "),
            "{message}"
        );
        assert!(message.contains(field), "{config}: {message}");
        assert_eq!(
            node.get_json("/v2/models/digits/config")["max_batch_size"],
            16
        );
        assert_eq!(digits_batch(&node, 16).0, 200);
    }
    // A built-in's tensors are its own.
    let body = json!({"parameters": {"config": r#"{"max_batch_size": 4}"#}}).to_string();
    let (status, doc) = post(&node, "/v2/repository/models/echo/load", &body, &[]);
    assert_eq!(status, 400, "{doc}");
    assert!(doc["error"]
        .as_str()
        .unwrap()
        .contains("not a model of its repository"));
    // Model files sent with the load are not read: Triton's words, its status.
    let files = json!({"parameters": {"config": "{}", "file:1/model.onnx": "AAAA"}});
    let (status, doc) = post(
        &node,
        "/v2/repository/models/digits/load",
        &files.to_string(),
        &[],
    );
    assert_eq!(status, 500, "{doc}");
    let message = doc["error"].as_str().unwrap();
    assert!(
        message.starts_with("failed to poll from model repository"),
        "{message}"
    );
    // A load's configuration is the model's: without max_batch_size, the file's.
    assert_eq!(load_with(&node, r#"{"max_batch_size": 64}"#).0, 200);
    assert_eq!(
        node.get_json("/v2/models/digits/config")["max_batch_size"],
        64
    );
    assert_eq!(load_with(&node, r#"{"max_batch_size": 32}"#).0, 200);
    assert_eq!(digits_batch(&node, 40).0, 400);
    let (status, _) = post(&node, "/v2/repository/models/digits/load", "", &[]);
    assert_eq!(status, 200);
    assert_eq!(
        node.get_json("/v2/models/digits/config")["max_batch_size"],
        64
    );
    assert_eq!(digits_batch(&node, 40).0, 200);
}

#[test]
fn the_index_lists_the_repository_only_when_configured_so() {
    let node = TestNode::start(&format!(
        "models_dir = {:?}\nrepository_index = \"models\"\n",
        models()
    ));
    let (status, index) = post(&node, "/v2/repository/index", "", &[]);
    assert_eq!(status, 200);
    assert_eq!(
        index,
        json!([{"name": "digits", "version": "1", "state": "READY", "reason": ""}])
    );
    // The built-ins are served all the same.
    assert_eq!(infer_topk(&node), 200);
    assert_eq!(curl(&[&node.url("/v2/models/echo/ready")]).0, 200);
}

#[test]
fn loading_and_unloading_need_the_admin_token_when_the_node_has_one() {
    let node = TestNode::start(&format!(
        "models_dir = {:?}\nadmin_token = \"s3cret\"\n",
        models()
    ));
    let path = "/v2/repository/models/digits/unload";
    assert_eq!(post(&node, path, "", &[]).0, 401);
    let wrong = ["-H", "Authorization: Bearer guess"];
    assert_eq!(post(&node, path, "", &wrong).0, 401);
    assert_eq!(state(&node, "digits"), "READY");
    let right = ["-H", "Authorization: Bearer s3cret"];
    assert_eq!(post(&node, path, "", &right).0, 200);
    assert_eq!(state(&node, "digits"), "UNAVAILABLE");
    // The index is not an admin operation.
    assert_eq!(post(&node, "/v2/repository/index", "", &[]).0, 200);
}
