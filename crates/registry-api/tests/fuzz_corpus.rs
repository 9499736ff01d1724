//! Replays the checked-in fuzz corpus (`fuzz/corpus/bodies/`) through the fuzz
//! target's body, so `cargo test` exercises it on stable Rust.

#[test]
fn bodies_corpus() {
    testkit::fuzz_corpus::replay(
        env!("CARGO_MANIFEST_DIR"),
        "bodies",
        registry_api::fuzzing::bodies,
    );
}
