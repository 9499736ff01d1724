//! Replays the checked-in fuzz corpora (`fuzz/corpus/<target>/`) through the fuzz
//! targets' bodies, so that every test run, on stable Rust, exercises them.

use manifest::fuzzing;

fn replay(target: &str, body: fn(&[u8])) {
    testkit::fuzz_corpus::replay(env!("CARGO_MANIFEST_DIR"), target, body);
}

#[test]
fn expr_corpus() {
    replay("expr", fuzzing::expr);
}

#[test]
fn manifest_corpus() {
    replay("manifest", fuzzing::manifest);
}
