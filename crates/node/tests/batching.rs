//! Dynamic batching, black box: a node whose model declares `[dynamic_batching]`
//! serves many concurrent single-image gRPC calls (the Open Inference Protocol, the
//! tonic client of `grpc.rs`) in fewer device calls than calls, each call answered
//! with its own logits — the ones the same image gets alone — and a bad
//! `[dynamic_batching]` is refused at load naming its key; `[[instance_group]] count`
//! gives the model that many slots of the default CPU device.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use accel::Accelerator;
use common::{f32_bytes, free_addr, TestNode};
use netaccel_node::front::grpc::pb;
use pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use pb::model_infer_request::InferInputTensor;
use tonic::transport::Channel;

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

/// A repository in a new folder named after `tag` with the digits CNN as `name`,
/// its config followed by `extra`.
fn repository(tag: &str, name: &str, extra: &str) -> TempDir {
    let dir = TempDir(
        std::env::temp_dir().join(format!("netaccel-batching-{tag}-{}", std::process::id())),
    );
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(dir.0.join(name).join("1")).unwrap();
    std::fs::copy(
        models().join("digits/1/model.onnx"),
        dir.0.join(name).join("1/model.onnx"),
    )
    .unwrap();
    let config = std::fs::read_to_string(models().join("digits/config.toml")).unwrap();
    std::fs::write(
        dir.0.join(name).join("config.toml"),
        format!("{config}{extra}"),
    )
    .unwrap();
    dir
}

/// Image `i`: 64 pixels of the digits data set's range (0..16), deterministic.
fn image(i: usize) -> Vec<u8> {
    let v: Vec<f32> = (0..64)
        .map(|p| ((p * 5 + i * 11 + p / 7) % 17) as f32)
        .collect();
    f32_bytes(&v)
}

/// The digits CNN planned by tract in process: the reference.
fn in_process() -> netaccel_onnx::Model {
    let found = netaccel_onnx::scan(&models())
        .unwrap()
        .found
        .into_iter()
        .find(|f| f.name == "digits")
        .unwrap();
    found
        .into_model(256, &netaccel_onnx::Engines::default())
        .unwrap()
}

/// What `model` computes for `payload`, alone.
fn alone(model: &netaccel_onnx::Model, payload: &[u8]) -> Vec<f32> {
    let mut out = Vec::new();
    model.run(&[0; 44], payload, &mut out).unwrap();
    common::f32s(&out)
}

async fn client(addr: SocketAddr) -> GrpcInferenceServiceClient<Channel> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
        {
            Ok(channel) => return GrpcInferenceServiceClient::new(channel),
            Err(e) if Instant::now() > deadline => panic!("cannot connect to {addr}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

fn request(model: &str, payload: Vec<u8>) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: model.into(),
        inputs: vec![InferInputTensor {
            name: "image".into(),
            datatype: "FP32".into(),
            shape: vec![1, 1, 8, 8],
            parameters: HashMap::new(),
            contents: None,
        }],
        raw_input_contents: vec![payload.into()],
        ..Default::default()
    }
}

/// Calls in one burst, each a client of its own (its own HTTP/2 connection).
const CALLS: usize = 48;

#[test]
fn concurrent_calls_share_device_calls_and_each_gets_its_own_logits() {
    // A long delay, so that the burst batches even on a loaded machine.
    let dir = repository(
        "grpc",
        "digits_batched",
        "[dynamic_batching]\nmax_queue_delay_microseconds = 50000\n",
    );
    let (node, grpc) = TestNode::start_logging_with(
        || {
            let grpc = free_addr();
            let config = format!(
                "grpc = \"{grpc}\"\nmodels_dir = {:?}\n[[devices]]\nname = \"cpu0\"\nbackend = \"cpu\"\nslots = [\"digits_batched\"]\n",
                dir.0.display().to_string()
            );
            (config, grpc)
        },
        &[],
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let answers = rt.block_on(async {
        let mut clients = Vec::with_capacity(CALLS);
        for _ in 0..CALLS {
            clients.push(client(grpc).await);
        }
        let calls = clients.into_iter().enumerate().map(|(i, mut c)| {
            tokio::spawn(async move {
                let r = c.model_infer(request("digits_batched", image(i))).await;
                (i, r.map(|r| r.into_inner()))
            })
        });
        let mut answers = Vec::with_capacity(CALLS);
        for call in calls.collect::<Vec<_>>() {
            answers.push(call.await.unwrap());
        }
        answers
    });
    let reference = in_process();
    for (i, answer) in answers {
        let answer = answer.unwrap_or_else(|e| panic!("call {i}: {e}"));
        assert_eq!(answer.outputs[0].shape, [1, 10], "call {i}");
        let got = common::f32s(&answer.raw_output_contents[0]);
        let want = alone(&reference, &image(i));
        // The same logits as the image alone, but for the last bits: tract's plan for
        // a batch of one is not its plan for other sizes.
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                "call {i}, logit {k}: {g} batched, {w} alone"
            );
        }
    }
    let device_calls = node.metric("netaccel_slot_calls_total{slot=\"0\"}");
    assert!(
        device_calls >= 1.0 && device_calls <= (CALLS / 4) as f64,
        "{CALLS} calls took {device_calls} device calls"
    );
    // The statistics extension counts executions as Triton does: batches, not calls,
    // each under the size it ran at.
    let stats = rt.block_on(async {
        let request = pb::ModelStatisticsRequest {
            name: "digits_batched".into(),
            version: String::new(),
        };
        let mut c = client(grpc).await;
        c.model_statistics(request).await.unwrap().into_inner()
    });
    let m = &stats.model_stats[0];
    assert_eq!(m.inference_count, CALLS as u64);
    assert_eq!(m.execution_count as f64, device_calls, "{m:?}");
    let mut items = 0;
    for b in &m.batch_stats {
        let runs = b.compute_infer.as_ref().unwrap().count;
        assert!(runs >= 1 && b.batch_size >= 1, "{b:?}");
        assert_eq!(b.compute_input.as_ref().unwrap().count, runs, "{b:?}");
        items += b.batch_size * runs;
    }
    assert_eq!(items, CALLS as u64, "{:?}", m.batch_stats);
}

#[test]
fn a_bad_dynamic_batching_section_is_refused_naming_its_key() {
    let dir = repository(
        "refused",
        "digits_bad",
        "[dynamic_batching]\npreferred_batch_size = [65]\n",
    );
    let node = TestNode::start_logging(
        &format!("models_dir = {:?}\n", dir.0.display().to_string()),
        &["--log-level", "info"],
    );
    let log = node.log();
    assert!(
        log.contains("ONNX model refused")
            && log.contains("dynamic_batching.preferred_batch_size: 65"),
        "{log}"
    );
}

#[test]
fn an_instance_group_count_gives_the_model_that_many_slots() {
    let dir = repository(
        "instances",
        "digits_twice",
        "[[instance_group]]\ncount = 2\nkind = \"KIND_CPU\"\n",
    );
    let node = TestNode::start(&format!("models_dir = {:?}\n", dir.0.display().to_string()));
    let slots = node.get_json("/v1/slots");
    let hosting = slots
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["accelerator"] == "digits_twice")
        .count();
    assert_eq!(hosting, 2, "{slots}");
}
