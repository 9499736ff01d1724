//! Replays the checked-in fuzz corpora (`fuzz/corpus/<target>/`) through the fuzz
//! targets' bodies, so that every test run, on stable Rust, exercises the inputs the
//! fuzzers found interesting.

use netaccel_node::front::http::parse::fuzzing;

fn replay(target: &str, body: fn(&[u8])) {
    testkit::fuzz_corpus::replay(env!("CARGO_MANIFEST_DIR"), target, body);
}

#[test]
fn http_head_corpus() {
    replay("http_head", fuzzing::http_head);
}

#[test]
fn http_chunked_corpus() {
    replay("http_chunked", fuzzing::http_chunked);
}

#[test]
fn v2_infer_corpus() {
    replay(
        "v2_infer",
        netaccel_node::front::oip::infer::fuzzing::v2_infer,
    );
}

#[test]
fn grpc_infer_corpus() {
    replay(
        "grpc_infer",
        netaccel_node::front::grpc::tensor::fuzzing::grpc_infer,
    );
}
