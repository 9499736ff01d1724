//! Black-box tests of the gRPC front end (the Open Inference Protocol's
//! `GRPCInferenceService`): the real node, driven by a tonic client generated from the
//! same vendored .proto files. The unmodified `tritonclient[grpc]` drives it too, in
//! `docs/tests/test_inference_grpc.py`.

mod common;

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use common::{free_addr, TestNode};
use netaccel_node::front::grpc::pb;
use pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use pb::model_infer_request::InferInputTensor;
use tonic::transport::Channel;
use tonic::Code;

/// A node serving gRPC on a free port, and that port.
fn start(config: &str) -> (TestNode, SocketAddr) {
    TestNode::start_logging_with(
        || {
            let grpc = free_addr();
            (format!("grpc = \"{grpc}\"\n{config}"), grpc)
        },
        &[],
    )
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

fn raw_request(
    model: &str,
    inputs: &[(&str, &str, &[i64])],
    raw: Vec<Vec<u8>>,
) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: model.into(),
        inputs: inputs
            .iter()
            .map(|(name, dt, shape)| InferInputTensor {
                name: name.to_string(),
                datatype: dt.to_string(),
                shape: shape.to_vec(),
                parameters: HashMap::new(),
                contents: None,
            })
            .collect(),
        raw_input_contents: raw.into_iter().map(Into::into).collect(),
        ..Default::default()
    }
}

fn int_param(v: i64) -> pb::InferParameter {
    pb::InferParameter {
        parameter_choice: Some(pb::infer_parameter::ParameterChoice::Int64Param(v)),
    }
}

/// `POST /v1/fn/{model}?query` with `payload`: the output to compare with.
fn v1(node: &TestNode, model: &str, query: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    use std::io::Read;
    ureq::post(&node.url(&format!("/v1/fn/{model}?{query}")))
        .send_bytes(payload)
        .unwrap()
        .into_reader()
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[tokio::test]
async fn infers_like_v1_fn_with_raw_and_typed_tensors() {
    let (node, addr) = start("");
    let mut c = client(addr).await;
    assert!(
        c.server_live(pb::ServerLiveRequest {})
            .await
            .unwrap()
            .into_inner()
            .live
    );
    assert!(
        c.server_ready(pb::ServerReadyRequest {})
            .await
            .unwrap()
            .into_inner()
            .ready
    );

    // Raw: topk with its parameter, sobel whose shape gives width and height, matmul's
    // two inputs.
    let values: Vec<i32> = vec![5, -3, 99, 12, 7, 41];
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut req = raw_request("topk", &[("INPUT0", "INT32", &[6])], vec![bytes.clone()]);
    req.parameters.insert("k".into(), int_param(3));
    req.id = "call-1".into();
    let resp = c.model_infer(req).await.unwrap();
    assert!(resp.metadata().get("x-netaccel-exec-ns").is_some());
    let resp = resp.into_inner();
    assert_eq!(resp.id, "call-1");
    assert_eq!(resp.outputs[0].shape, [3]);
    assert_eq!(
        &resp.raw_output_contents[0][..],
        &v1(&node, "topk", "k=3", &bytes)[..]
    );

    let image: Vec<u8> = (0..48u8).map(|i| i.wrapping_mul(37)).collect();
    let req = raw_request(
        "sobel",
        &[("INPUT0", "UINT8", &[6, 8])],
        vec![image.clone()],
    );
    let resp = c.model_infer(req).await.unwrap().into_inner();
    assert_eq!(resp.outputs[0].shape, [6, 8]);
    let want = v1(&node, "sobel", "width=8&height=6", &image);
    assert_eq!(&resp.raw_output_contents[0][..], &want[..]);

    let a: Vec<u8> = (0..9).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let b: Vec<u8> = (0..9)
        .flat_map(|i| (1.5 - i as f32).to_le_bytes())
        .collect();
    let req = raw_request(
        "matmul",
        &[("INPUT0", "FP32", &[3, 3]), ("INPUT1", "FP32", &[3, 3])],
        vec![a.clone(), b.clone()],
    );
    let resp = c.model_infer(req).await.unwrap().into_inner();
    let want = v1(&node, "matmul", "n=3", &[a, b].concat());
    assert_eq!(&resp.raw_output_contents[0][..], &want[..]);

    // Typed contents.
    let mut req = raw_request("to_uppercase", &[("INPUT0", "UINT8", &[5])], vec![]);
    req.inputs[0].contents = Some(pb::InferTensorContents {
        uint_contents: b"gRpc!".iter().map(|&b| u32::from(b)).collect(),
        ..Default::default()
    });
    let resp = c.model_infer(req).await.unwrap().into_inner();
    assert_eq!(&resp.raw_output_contents[0][..], b"GRPC!");
}

#[tokio::test]
async fn malformed_requests_get_the_protocols_errors_and_the_node_keeps_serving() {
    let (node, addr) = start("body_bytes_max = 65536");
    let mut c = client(addr).await;
    let good = || raw_request("echo", &[("INPUT0", "UINT8", &[3])], vec![b"abc".to_vec()]);
    let cases: Vec<(&str, pb::ModelInferRequest, Code, &str)> = vec![
        (
            "wrong datatype",
            raw_request("echo", &[("INPUT0", "FP32", &[1])], vec![vec![0; 4]]),
            Code::InvalidArgument,
            "datatype FP32",
        ),
        (
            "shape mismatch",
            raw_request("echo", &[("INPUT0", "UINT8", &[2, 2])], vec![vec![0; 4]]),
            Code::InvalidArgument,
            "shape",
        ),
        (
            "missing input",
            raw_request("matmul", &[("INPUT0", "FP32", &[1, 1])], vec![vec![0; 4]]),
            Code::InvalidArgument,
            "takes 2 input",
        ),
        (
            "raw content size mismatch",
            raw_request("echo", &[("INPUT0", "UINT8", &[2])], vec![vec![0; 3]]),
            Code::InvalidArgument,
            "raw_input_contents has 3",
        ),
        (
            "huge shape",
            raw_request(
                "echo",
                &[("INPUT0", "UINT8", &[i64::MAX, 2])],
                vec![vec![0; 4]],
            ),
            Code::InvalidArgument,
            "shape",
        ),
        (
            "huge element count",
            raw_request(
                "sobel",
                &[("INPUT0", "UINT8", &[1 << 40, 1 << 40])],
                vec![vec![0; 4]],
            ),
            Code::InvalidArgument,
            "too many elements",
        ),
        (
            "claims more than it carries",
            raw_request("echo", &[("INPUT0", "UINT8", &[1 << 30])], vec![vec![0; 4]]),
            Code::InvalidArgument,
            "more bytes than the request carries",
        ),
        (
            "missing parameter",
            raw_request("topk", &[("INPUT0", "INT32", &[1])], vec![vec![0; 4]]),
            Code::InvalidArgument,
            "missing required",
        ),
        (
            "unknown model",
            raw_request("nope", &[], vec![]),
            Code::NotFound,
            "Request for unknown model: 'nope' is not found",
        ),
        (
            "unknown version",
            pb::ModelInferRequest {
                model_version: "2".into(),
                ..good()
            },
            Code::NotFound,
            "only version is 1",
        ),
        (
            "larger than the message bound",
            raw_request(
                "echo",
                &[("INPUT0", "UINT8", &[200_000])],
                vec![vec![0; 200_000]],
            ),
            // gRPC's code for a per-call limit (tonic's own would be OUT_OF_RANGE);
            // refused before the message is decoded.
            Code::ResourceExhausted,
            "too large",
        ),
    ];
    for (what, req, code, text) in cases {
        let status = c.model_infer(req).await.expect_err(what);
        assert_eq!(status.code(), code, "{what}: {status:?}");
        assert!(status.message().contains(text), "{what}: {status:?}");
        // And the node (and this very connection) keeps serving.
        let ok = c.model_infer(good()).await.expect(what).into_inner();
        assert_eq!(&ok.raw_output_contents[0][..], b"abc", "{what}");
    }
    // RPCs the node does not serve.
    let status = c
        .trace_setting(pb::TraceSettingRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
    // Every answer is counted by protocol and gRPC code, and the connection is open.
    let count = |code: &str| {
        node.metric(&format!(
            "netaccel_requests_total{{protocol=\"grpc\",code=\"{code}\"}}"
        ))
    };
    assert!(count("InvalidArgument") >= 8.0);
    assert!(count("NotFound") >= 2.0);
    assert!(count("Ok") >= 11.0);
    assert_eq!(
        node.metric("netaccel_connections_open{protocol=\"grpc\"}"),
        1.0
    );
}

#[tokio::test]
async fn metadata_config_and_readiness_follow_the_catalog() {
    let (_node, addr) = start("[[slots]]\naccelerator = \"echo\"\n");
    let mut c = client(addr).await;
    let meta = c
        .model_metadata(pb::ModelMetadataRequest {
            name: "matmul".into(),
            version: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(meta.inputs.len(), 2);
    assert_eq!(meta.outputs[0].datatype, "FP32");
    let config = c
        .model_config(pb::ModelConfigRequest {
            name: "topk".into(),
            version: "1".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .config
        .unwrap();
    assert_eq!(config.input[0].data_type, pb::DataType::TypeInt32 as i32);
    assert_eq!(config.max_batch_size, 0);
    let ready = |name: &str| pb::ModelReadyRequest {
        name: name.into(),
        version: String::new(),
    };
    // Only echo has a slot: topk is a model of the catalog, but not ready.
    assert!(
        c.model_ready(ready("echo"))
            .await
            .unwrap()
            .into_inner()
            .ready
    );
    assert!(
        !c.model_ready(ready("topk"))
            .await
            .unwrap()
            .into_inner()
            .ready
    );
    assert!(
        !c.model_ready(ready("nope"))
            .await
            .unwrap()
            .into_inner()
            .ready
    );
    let status = c
        .model_infer(raw_request(
            "topk",
            &[("INPUT0", "INT32", &[1])],
            vec![vec![0; 4]],
        ))
        .await;
    let mut req = raw_request("topk", &[("INPUT0", "INT32", &[1])], vec![vec![0; 4]]);
    req.parameters.insert("k".into(), int_param(1));
    let status2 = c.model_infer(req).await.unwrap_err();
    assert_eq!(status.unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(status2.code(), Code::NotFound, "{status2:?}");
    assert_eq!(
        status2.metadata().get("netaccel-status").unwrap(),
        "UNKNOWN_ACCELERATOR"
    );
}

#[tokio::test]
async fn a_call_past_its_deadline_is_not_run() {
    // One slot taking 300 ms a call: a call queued behind the first with a 50 ms
    // deadline is answered DEADLINE_EXCEEDED when its turn comes, without running.
    let (node, addr) = start("simulated_exec_us = 300000\n[[slots]]\naccelerator = \"echo\"\n");
    let c = client(addr).await;
    let call = |deadline_us: Option<&'static str>| {
        let mut c = c.clone();
        async move {
            let mut req = tonic::Request::new(raw_request(
                "echo",
                &[("INPUT0", "UINT8", &[1])],
                vec![vec![1]],
            ));
            if let Some(us) = deadline_us {
                req.metadata_mut()
                    .insert("x-netaccel-deadline-us", us.parse().unwrap());
            }
            c.model_infer(req).await
        }
    };
    let first = tokio::spawn(call(None));
    // Until the first call runs (the slot is busy, its queue empty), polled between
    // turns of this runtime so that the first call's request goes out meanwhile.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let slot = node.get_json("/v1/slots/0");
        if slot["state"] == "busy" && slot["queue_depth"] == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the first call never ran: {slot}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = call(Some("50000")).await.unwrap_err();
    assert_eq!(second.code(), Code::DeadlineExceeded, "{second:?}");
    assert!(first.await.unwrap().is_ok());
}

#[test]
fn the_default_address_taken_is_a_warning_a_chosen_one_an_error() {
    // Whoever holds the default port (this test, or another program), the node must
    // start without gRPC and say so.
    let _held = TcpListener::bind(netaccel_node::config::GRPC_DEFAULT);
    let node = TestNode::start_logging("", &["--grpc", "127.0.0.1:8001"]);
    // (The harness's node.toml sets grpc = "127.0.0.1:0"; the flag overrides it.)
    let deadline = Instant::now() + Duration::from_secs(10);
    while !node.log().contains("default gRPC address is taken") {
        assert!(Instant::now() < deadline, "no warning in: {}", node.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(node);

    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_netaccel-node"))
        .args([
            "--http",
            "127.0.0.1:0",
            "--rac",
            "127.0.0.1:0",
            "--grpc",
            &addr,
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
}

#[tokio::test]
async fn grpc_connections_count_against_the_connection_bound() {
    let (node, addr) = start("connections_max = 3");
    // Open connections one by one (each answers a call before the next opens) until
    // the node closes one at once for being over the bound.
    let mut open = Vec::new();
    let refused = loop {
        assert!(
            open.len() <= 3,
            "more than connections_max connections served"
        );
        let mut c = client(addr).await;
        match c.server_live(pb::ServerLiveRequest {}).await {
            Ok(_) => open.push(c),
            Err(status) => break status,
        }
    };
    // Refused in HTTP/2 (a GOAWAY that accepted no stream, REFUSED_STREAM): the
    // client reports UNAVAILABLE, retry later.
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    // Closing them makes room again (the node notices the close on its own time).
    drop(open);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut c = loop {
        let mut c = client(addr).await;
        if c.server_live(pb::ServerLiveRequest {}).await.is_ok() {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "no room after closing the connections"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(c.server_live(pb::ServerLiveRequest {}).await.is_ok());
    assert!(node.metric("netaccel_connections_refused_total{protocol=\"grpc\"}") >= 1.0);
    assert_eq!(
        node.metric("netaccel_connections_open{protocol=\"grpc\"}"),
        1.0
    );
}

/// The model repository of the project (`models/`: the digits CNN).
fn models_dir() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../models")
        .canonicalize()
        .unwrap()
        .display()
        .to_string()
}

fn f32_le(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[tokio::test]
async fn repository_models_are_served_with_their_own_tensors() {
    let (node, addr) = start(&format!("models_dir = {:?}\n", models_dir()));
    let mut c = client(addr).await;

    // Metadata and configuration: the model's names, types, and its batch axis.
    let md = c
        .model_metadata(pb::ModelMetadataRequest {
            name: "digits".into(),
            version: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(md.platform, "onnx");
    assert_eq!(md.inputs[0].name, "image");
    assert_eq!(md.inputs[0].datatype, "FP32");
    assert_eq!(md.inputs[0].shape, [-1, 1, 8, 8]);
    assert_eq!(md.outputs[0].name, "logits");
    assert_eq!(md.outputs[0].shape, [-1, 10]);
    let cfg = c
        .model_config(pb::ModelConfigRequest {
            name: "digits".into(),
            version: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .config
        .unwrap();
    assert_eq!(cfg.max_batch_size, 64);
    assert_eq!(cfg.input[0].dims, [1, 8, 8]);
    assert_eq!(cfg.output[0].dims, [10]);

    // A batch of 3 over raw contents, and one image over typed contents: the logits
    // /v1/fn gives for the same bytes.
    let pixels: Vec<f32> = (0..3 * 64).map(|i| ((i * 5 + i / 7) % 17) as f32).collect();
    let batch = f32_le(&pixels);
    let want = v1(&node, "digits", "", &batch);
    assert_eq!(want.len(), 3 * 40);
    let mut req = raw_request(
        "digits",
        &[("image", "FP32", &[3, 1, 8, 8])],
        vec![batch.clone()],
    );
    req.id = "cnn".into();
    let resp = c.model_infer(req).await.unwrap().into_inner();
    assert_eq!(resp.id, "cnn");
    assert_eq!(resp.outputs.len(), 1);
    assert_eq!(resp.outputs[0].name, "logits");
    assert_eq!(resp.outputs[0].datatype, "FP32");
    assert_eq!(resp.outputs[0].shape, [3, 10]);
    assert_eq!(&resp.raw_output_contents[0][..], &want[..]);

    let mut typed = raw_request("digits", &[("image", "FP32", &[1, 1, 8, 8])], vec![]);
    typed.inputs[0].contents = Some(pb::InferTensorContents {
        fp32_contents: pixels[..64].to_vec(),
        ..Default::default()
    });
    let resp = c.model_infer(typed).await.unwrap().into_inner();
    assert_eq!(resp.outputs[0].shape, [1, 10]);
    // Compared with /v1/fn's answer for the same one image: the engine plans batch 1
    // apart from other batch sizes, so an image's logits in a batch of 3 may differ
    // from its logits alone in the last bits.
    let want_one = v1(&node, "digits", "", &batch[..256]);
    assert_eq!(&resp.raw_output_contents[0][..], &want_one[..]);

    // Each malformed call is INVALID_ARGUMENT naming the tensor, and the same
    // connection goes on serving.
    let one = || batch[..256].to_vec();
    let cases: Vec<(pb::ModelInferRequest, &str)> = vec![
        (
            raw_request("digits", &[("image", "FP32", &[1, 8, 8])], vec![one()]),
            "input image has shape [1, 8, 8]",
        ),
        (
            raw_request("digits", &[("image", "INT32", &[1, 1, 8, 8])], vec![one()]),
            "input image of model digits has datatype INT32",
        ),
        (
            raw_request("digits", &[("image", "FP32", &[2, 1, 8, 8])], vec![one()]),
            "input image",
        ),
        (
            raw_request("digits", &[("pixels", "FP32", &[1, 1, 8, 8])], vec![one()]),
            "input image of model digits is missing",
        ),
        (
            raw_request("digits", &[("image", "FP32", &[65, 1, 8, 8])], vec![one()]),
            "1 to 64",
        ),
    ];
    for (req, expected) in cases {
        let status = c.model_infer(req).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(expected), "{status:?}");
        let good = raw_request("digits", &[("image", "FP32", &[1, 1, 8, 8])], vec![one()]);
        let resp = c.model_infer(good).await.unwrap().into_inner();
        assert_eq!(&resp.raw_output_contents[0][..], &want_one[..]);
    }
    assert!(
        node.metric("netaccel_requests_total{protocol=\"grpc\",code=\"InvalidArgument\"}") >= 5.0
    );
}

/// `ModelStreamInfer`: every request sent on one stream is answered exactly once,
/// good ones with the inference and bad ones with `error_message` naming their `id`;
/// an error does not end the stream; closing the client's side ends it with OK once
/// everything is answered.
#[tokio::test]
async fn a_stream_answers_each_request_once_and_survives_bad_ones() {
    let (node, addr) = start("[[slots]]\naccelerator = \"to_uppercase\"\n[[slots]]\naccelerator = \"to_uppercase\"\n[[slots]]\naccelerator = \"topk\"");
    let mut c = client(addr).await;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let answers = tokio::spawn(async move {
        let mut answers = c
            .model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .expect("the stream opens")
            .into_inner();
        let mut got = Vec::new();
        while let Some(answer) = answers.message().await.expect("the stream ends with OK") {
            got.push(answer);
        }
        got
    });
    let mut want = HashMap::new();
    for i in 0..200u32 {
        let id = format!("r{i}");
        let req = match i % 10 {
            // A datatype topk does not take.
            3 => raw_request("topk", &[("INPUT0", "FP32", &[1])], vec![vec![0; 4]]),
            // No such model.
            7 => raw_request("nope", &[("INPUT0", "UINT8", &[1])], vec![vec![b'x']]),
            _ => {
                let text = format!("call number {i}").into_bytes();
                let shape = [text.len() as i64];
                want.insert(id.clone(), text.to_ascii_uppercase());
                raw_request("to_uppercase", &[("INPUT0", "UINT8", &shape)], vec![text])
            }
        };
        tx.send(pb::ModelInferRequest { id, ..req }).await.unwrap();
    }
    drop(tx);
    let got = tokio::time::timeout(Duration::from_secs(60), answers)
        .await
        .expect("every answer within 60 s")
        .unwrap();
    assert_eq!(got.len(), 200, "one answer per request");
    let mut seen = std::collections::HashSet::new();
    for answer in got {
        let response = answer
            .infer_response
            .expect("every answer names its request");
        assert!(
            seen.insert(response.id.clone()),
            "{} answered twice",
            response.id
        );
        match want.get(&response.id) {
            Some(text) => {
                assert_eq!(answer.error_message, "", "{}", response.id);
                assert_eq!(&response.raw_output_contents[0][..], &text[..]);
            }
            None if response.model_name == "nope" => {
                assert!(
                    answer
                        .error_message
                        .contains("Request for unknown model: 'nope' is not found"),
                    "{}",
                    answer.error_message
                );
            }
            None => assert!(
                answer.error_message.contains("FP32"),
                "{}: {}",
                response.id,
                answer.error_message
            ),
        }
    }
    // Each message is counted as a ModelInfer call would be, by its gRPC code.
    let count = |code: &str| {
        node.metric(&format!(
            "netaccel_requests_total{{protocol=\"grpc\",code=\"{code}\"}}"
        ))
    };
    assert_eq!(count("Ok"), 160.0);
    assert_eq!(count("InvalidArgument"), 20.0);
    assert_eq!(count("NotFound"), 20.0);
}
