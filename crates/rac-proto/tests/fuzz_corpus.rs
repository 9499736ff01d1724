//! Replays the checked-in fuzz corpora (`fuzz/corpus/<target>/`) through the fuzz
//! targets' bodies, so that every test run, on stable Rust, exercises the inputs the
//! fuzzers found interesting.

fn replay(target: &str, body: fn(&[u8])) {
    testkit::fuzz_corpus::replay(env!("CARGO_MANIFEST_DIR"), target, body);
}

#[test]
fn call_header_corpus() {
    replay("call_header", rac_proto::fuzzing::call_header);
}

#[test]
fn result_header_corpus() {
    replay("result_header", rac_proto::fuzzing::result_header);
}

#[test]
fn control_json_corpus() {
    replay("control_json", rac_proto::fuzzing::control_json);
}
