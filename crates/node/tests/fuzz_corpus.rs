//! Replays the checked-in fuzz corpora (`fuzz/corpus/<target>/`) through the fuzz
//! targets' bodies, so that every test run, on stable Rust, exercises the inputs the
//! fuzzers found interesting.

use std::fs;
use std::path::Path;

use netaccel_node::front::http::parse::fuzzing;

fn replay(target: &str, body: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut count = 0;
    for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| body(&data));
        assert!(outcome.is_ok(), "{target}: {} fails", path.display());
        count += 1;
    }
    assert!(count >= 3, "{target}: only {count} corpus files");
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
