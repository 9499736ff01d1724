//! Ensembles, black box: a node started with a model repository holding the digits
//! CNN and ensembles over it serves the pipeline `minmax` (a built-in) → `digits` (an
//! ONNX model) in one call over OIP HTTP, gRPC, RAC and `/v1/fn`, with the bytes the
//! two steps give when run one after the other in process; a failing step is the
//! ensemble call's one answer, naming the step (over `/v1/fn` and RAC); a tenant whose
//! policy lets it call the ensemble but not one of its steps is refused (HTTP, gRPC);
//! an ensemble naming a step the node does not have is refused at load, and the node
//! serves the rest; steps hosted on two devices each run there.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use accel::Accelerator;
use common::{curl, f32_bytes, free_addr, TestNode};
use netaccel_client::rac::{RacClient, RacError};
use netaccel_node::front::grpc::pb;
use pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use pb::model_infer_request::InferInputTensor;
use rac_proto::Status;

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

const PIPELINE: &str = r#"
platform = "ensemble"
max_batch_size = 0
[[input]]
name = "IMAGE"
data_type = "TYPE_FP32"
dims = [1, 8, 8]
[[output]]
name = "SCORES"
data_type = "TYPE_FP32"
dims = [10]
label_filename = "labels.txt"
# Written consumer first: the node runs minmax first all the same.
[[ensemble_scheduling.step]]
model_name = "digits"
input_map = { image = "NORMED" }
output_map = { logits = "SCORES" }
[[ensemble_scheduling.step]]
model_name = "minmax"
input_map = { INPUT0 = "IMAGE" }
output_map = { OUTPUT0 = "NORMED" }
"#;

const FAULTY: &str = r#"
platform = "ensemble"
max_batch_size = 0
[[input]]
name = "IN"
data_type = "TYPE_UINT8"
dims = [5]
[[output]]
name = "OUT"
data_type = "TYPE_UINT8"
dims = [5]
[[ensemble_scheduling.step]]
model_name = "fault"
input_map = { INPUT0 = "IN" }
output_map = { OUTPUT0 = "OUT" }
"#;

/// The labels of the pipeline's output, class k on line k.
const LABELS: [&str; 10] = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
];

/// A repository with the digits CNN, the pipeline, the faulty ensemble and one
/// naming a step the node does not have.
fn repository(dir: &Path) {
    std::fs::create_dir_all(dir.join("digits/1")).unwrap();
    for f in ["config.toml", "1/model.onnx"] {
        std::fs::copy(models().join("digits").join(f), dir.join("digits").join(f)).unwrap();
    }
    let missing = PIPELINE.replace("\"minmax\"", "\"nosuch\"");
    for (name, text) in [
        ("pipeline", PIPELINE),
        ("faulty", FAULTY),
        ("missing", missing.as_str()),
    ] {
        std::fs::create_dir_all(dir.join(name).join("1")).unwrap();
        std::fs::write(dir.join(name).join("config.toml"), text).unwrap();
        std::fs::write(dir.join(name).join("labels.txt"), LABELS.join("\n")).unwrap();
    }
}

/// An image of the digits data set's range, deterministic.
fn image() -> Vec<f32> {
    (0..64).map(|i| ((i * 5 + i / 7) % 17) as f32).collect()
}

/// minmax then digits, in process: the bytes the ensemble must give.
fn in_process(image: &[u8]) -> Vec<u8> {
    let minmax = accel::Catalog::builtin();
    let minmax = minmax.by_name("minmax").unwrap();
    let mut normed = Vec::new();
    minmax.run(&[0; 44], image, &mut normed).unwrap();
    let digits = netaccel_onnx::scan(&models())
        .unwrap()
        .found
        .into_iter()
        .find(|f| f.name == "digits")
        .unwrap()
        .into_model(256, &netaccel_onnx::Engines::default())
        .unwrap();
    let mut out = Vec::new();
    digits.run(&[0; 44], &normed, &mut out).unwrap();
    out
}

/// A gRPC inference of the pipeline on `image`, raw contents.
fn infer_request(image: &[u8]) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: "pipeline".into(),
        inputs: vec![InferInputTensor {
            name: "IMAGE".into(),
            datatype: "FP32".into(),
            shape: vec![1, 8, 8],
            parameters: HashMap::new(),
            contents: None,
        }],
        raw_input_contents: vec![image.to_vec().into()],
        ..Default::default()
    }
}

const FULL_TOKEN: &str = "full-token";
const PARTIAL_TOKEN: &str = "partial-token";

#[test]
fn an_ensemble_runs_in_the_node_over_every_protocol() {
    let dir =
        TempDir(std::env::temp_dir().join(format!("netaccel-ensemble-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    repository(&dir.0);
    let config = format!(
        "models_dir = {:?}\nfault_injection = true\n\
         [[tenants]]\nname = \"full\"\ntoken = \"{FULL_TOKEN}\"\n\
         call = [\"pipeline\", \"minmax\", \"digits\", \"faulty\", \"fault\"]\ncatalog = true\nmetrics = true\n\
         [[tenants]]\nname = \"partial\"\ntoken = \"{PARTIAL_TOKEN}\"\n\
         call = [\"pipeline\", \"digits\"]\n",
        dir.0.display().to_string()
    );
    let (node, grpc) = TestNode::start_logging_with(
        || {
            let grpc = free_addr();
            (format!("grpc = \"{grpc}\"\n{config}"), grpc)
        },
        &["--log-level", "info"],
    );
    let log = node.log();
    assert!(
        log.contains("ensemble refused")
            && log.contains("(nosuch): no model or accelerator of this node has that name"),
        "{log}"
    );
    let full = format!("Authorization: Bearer {FULL_TOKEN}");
    let image = image();
    let bytes = f32_bytes(&image);
    let want = in_process(&bytes);
    assert_eq!(want.len(), 40);

    // OIP over HTTP: the ensemble's own tensors, its metadata and readiness.
    let (status, meta) = curl(&["-H", &full, &node.url("/v2/models/pipeline")]);
    assert_eq!(status, 200);
    let meta: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    assert_eq!(meta["inputs"][0]["name"], "IMAGE");
    assert_eq!(meta["outputs"][0]["shape"], serde_json::json!([10]));
    let (status, out) = curl(&["-H", &full, &node.url("/v2/models/pipeline/ready")]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
    let body = format!(
        r#"{{"inputs":[{{"name":"IMAGE","shape":[1,8,8],"datatype":"FP32","data":{image:?}}}]}}"#
    );
    let infer = node.url("/v2/models/pipeline/infer");
    let (status, out) = curl(&["-H", &full, "-d", &body, &infer]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
    let answer: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(answer["outputs"][0]["name"], "SCORES");
    let scores: Vec<f32> = serde_json::from_value(answer["outputs"][0]["data"].clone()).unwrap();
    assert_eq!(f32_bytes(&scores), want);

    // Classification of the ensemble's output, with its own label file.
    let classify = body.replacen(
        "]}]}",
        "]}],\"outputs\":[{\"name\":\"SCORES\",\"parameters\":{\"classification\":1}}]}",
        1,
    );
    let (status, out) = curl(&["-H", &full, "-d", &classify, &infer]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
    let answer: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let top = answer["outputs"][0]["data"][0]
        .as_str()
        .unwrap()
        .to_string();
    let best = (0..10)
        .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
        .unwrap();
    assert!(top.ends_with(&format!(":{best}:{}", LABELS[best])), "{top}");
    let (_, config) = curl(&["-H", &full, &node.url("/v2/models/pipeline/config")]);
    let config: serde_json::Value = serde_json::from_slice(&config).unwrap();
    assert_eq!(config["output"][0]["label_filename"], "labels.txt");

    // /v1/fn: the inputs' bytes in, the outputs' bytes out.
    let file = node.dir.join("image.bin");
    std::fs::write(&file, &bytes).unwrap();
    let data = format!("@{}", file.display());
    let (status, out) = curl(&[
        "-H",
        &full,
        "--data-binary",
        &data,
        &node.url("/v1/fn/pipeline"),
    ]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
    assert_eq!(out, want);

    // A tenant that may call the ensemble but not minmax, one of its steps.
    let partial = format!("Authorization: Bearer {PARTIAL_TOKEN}");
    let (status, out) = curl(&["-H", &partial, "-d", &body, &infer]);
    let text = String::from_utf8_lossy(&out);
    assert_eq!(status, 403, "{text}");
    assert!(
        text.contains("tenant `partial` may not call `minmax`")
            && text.contains("ensemble pipeline"),
        "{text}"
    );

    // A failing step: the ensemble's one answer names it; the node serves on.
    let faulty = node.url("/v1/fn/faulty");
    let (status, out) = curl(&["-H", &full, "--data-binary", "error", &faulty]);
    let text = String::from_utf8_lossy(&out);
    assert_eq!(status, 500, "{text}");
    assert!(text.contains("ensemble faulty, step 0 (fault)"), "{text}");
    let (status, out) = curl(&["-H", &full, "--data-binary", "hello", &faulty]);
    assert_eq!((status, out.as_slice()), (200, &b"hello"[..]));
    // The ensemble missing a step is not served.
    let (status, _) = curl(&["-H", &full, &node.url("/v2/models/missing")]);
    assert_eq!(status, 404);

    // The ensemble's calls count in its own metrics, its steps' in theirs.
    let (status, metrics) = curl(&["-H", &full, &node.url("/metrics")]);
    assert_eq!(status, 200);
    let metrics = String::from_utf8(metrics).unwrap();
    for line in [
        "netaccel_accelerator_calls_total{accelerator=\"pipeline\",status=\"OK\"} 3",
        "netaccel_accelerator_calls_total{accelerator=\"minmax\",status=\"OK\"} 3",
        "netaccel_accelerator_calls_total{accelerator=\"faulty\",status=\"INTERNAL\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }

    over_rac_and_grpc(&node, grpc, bytes, want);
}

/// The pipeline over RAC and gRPC, and the failing step and refused tenant there.
fn over_rac_and_grpc(node: &TestNode, grpc: std::net::SocketAddr, bytes: Vec<u8>, want: Vec<u8>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // RAC, by the ensemble's id.
        let id = netaccel_node::device::model_id_from_name("pipeline");
        let c = RacClient::connect(&node.rac_addr.to_string())
            .await
            .unwrap();
        c.hello("full", Some(FULL_TOKEN)).await.unwrap();
        let r = c.call(id, [0; 44], bytes.clone(), 0).await.unwrap();
        assert_eq!(r.payload, want);
        // A failing step over RAC (the ensemble thread's path): INTERNAL, naming it.
        let faulty = netaccel_node::device::model_id_from_name("faulty");
        match c.call(faulty, [0; 44], b"error".to_vec(), 0).await {
            Err(RacError::Status {
                status, message, ..
            }) => {
                assert_eq!(status, Status::Internal);
                assert!(
                    message.contains("ensemble faulty, step 0 (fault)"),
                    "{message}"
                );
            }
            other => panic!("expected INTERNAL, got {other:?}"),
        }
        let r = c.call(faulty, [0; 44], b"hello".to_vec(), 0).await.unwrap();
        assert_eq!(r.payload, b"hello");

        // gRPC, raw contents.
        let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut g = GrpcInferenceServiceClient::new(channel);
        let mut request = tonic::Request::new(infer_request(&bytes));
        let bearer = format!("Bearer {FULL_TOKEN}").parse().unwrap();
        request.metadata_mut().insert("authorization", bearer);
        let reply = g.model_infer(request).await.unwrap().into_inner();
        assert_eq!(reply.outputs[0].name, "SCORES");
        assert_eq!(reply.raw_output_contents[0].as_ref(), want.as_slice());
        // The tenant that may not call minmax, over gRPC.
        let mut request = tonic::Request::new(infer_request(&bytes));
        let bearer = format!("Bearer {PARTIAL_TOKEN}").parse().unwrap();
        request.metadata_mut().insert("authorization", bearer);
        let refused = g.model_infer(request).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert!(
            refused.message().contains("may not call `minmax`"),
            "{refused:?}"
        );
    });
}

/// Steps on two devices: minmax's slot on `cpu0`, digits' on `cpu1`; one ensemble call
/// runs one call on each, and the answer names the last step's slot.
#[test]
fn steps_run_on_the_devices_that_host_them() {
    let dir = TempDir(
        std::env::temp_dir().join(format!("netaccel-ensemble-devices-{}", std::process::id())),
    );
    let _ = std::fs::remove_dir_all(&dir.0);
    repository(&dir.0);
    let node = TestNode::start(&format!(
        "models_dir = {:?}\nfault_injection = true\n\
         [[devices]]\nname = \"cpu0\"\nbackend = \"cpu\"\nslots = [\"minmax\"]\n\
         [[devices]]\nname = \"cpu1\"\nbackend = \"cpu\"\nslots = [\"digits\"]\n",
        dir.0.display().to_string()
    ));
    let bytes = f32_bytes(&image());
    let file = node.dir.join("image.bin");
    std::fs::write(&file, &bytes).unwrap();
    let data = format!("@{}", file.display());
    let (status, out) = curl(&["-i", "--data-binary", &data, &node.url("/v1/fn/pipeline")]);
    let text = String::from_utf8_lossy(&out);
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("X-Netaccel-Slot: 1"), "{text}");
    assert!(out.ends_with(&in_process(&bytes)));
    for slot in ["0", "1"] {
        let calls = node.metric(&format!("netaccel_slot_calls_total{{slot=\"{slot}\"}}"));
        assert_eq!(calls, 1.0, "slot {slot}");
    }
    // Ready: each step has a slot. The faulty ensemble's step (fault) has none here.
    assert_eq!(node.get_json("/v2/models/pipeline/ready")["ready"], true);
    let (status, _) = curl(&[&node.url("/v2/models/faulty/ready")]);
    assert_eq!(status, 503);
}
