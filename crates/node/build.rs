//! Generates the gRPC front end's messages and service trait from the vendored
//! Open Inference Protocol files (`proto/`, as Triton publishes them).
//!
//! The .proto files are compiled by protox, a protobuf compiler written in Rust, rather
//! than by `protoc`: building the node then needs nothing but cargo, on any machine.

fn main() -> std::io::Result<()> {
    let files = ["proto/grpc_service.proto", "proto/model_config.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"]).map_err(std::io::Error::other)?;
    // The files' comments are reStructuredText for Triton's docs, which rustdoc reads
    // as broken HTML: the messages are documented by the .proto files instead.
    let mut messages = prost_build::Config::new();
    messages.disable_comments(["."]);
    tonic_prost_build::configure()
        .disable_comments(["."])
        // Tensor bytes as `Bytes`: sliced out of the received frame, not copied.
        .bytes(".inference.ModelInferRequest.raw_input_contents")
        .bytes(".inference.ModelInferResponse.raw_output_contents")
        // Every RPC the node does not serve answers UNIMPLEMENTED by itself.
        .generate_default_stubs(true)
        .build_transport(false)
        .compile_fds_with_config(fds, messages)
}
