//! Replays the checked-in fuzz corpora (`fuzz/corpus/model_config/`,
//! `fuzz/corpus/image_input/`) through the fuzz targets' bodies, so `cargo test`
//! exercises them on stable Rust.

#[test]
fn model_config_corpus() {
    testkit::fuzz_corpus::replay(
        env!("CARGO_MANIFEST_DIR"),
        "model_config",
        netaccel_onnx::config::fuzzing::model_config,
    );
}

#[test]
fn image_input_corpus() {
    testkit::fuzz_corpus::replay(
        env!("CARGO_MANIFEST_DIR"),
        "image_input",
        netaccel_onnx::image::fuzzing::image_input,
    );
}

/// The accepted seeds are accepted (so the fuzzer starts from configurations that reach
/// past the first refusal), and the refused one is refused.
#[test]
fn seeds_are_what_they_say() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/model_config/");
    for (seed, folder) in [
        ("seed-digits", "digits"),
        ("seed-batched", "m"),
        ("seed-bytes", "model"),
        ("seed-image", "model"),
    ] {
        let text = std::fs::read_to_string(format!("{dir}{seed}")).unwrap();
        netaccel_onnx::config::parse(folder, &text).unwrap_or_else(|e| panic!("{seed}: {e}"));
    }
    let text = std::fs::read_to_string(format!("{dir}seed-refused")).unwrap();
    assert!(netaccel_onnx::config::parse("m", &text).is_err());
}

/// Found by the fuzzer: a control character in a comment made the TOML parser's error
/// message empty, so the node would have refused the model with an empty reason.
#[test]
fn every_refusal_says_why() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/model_config/");
    let text = std::fs::read_to_string(format!("{dir}regression-empty-message")).unwrap();
    let e = netaccel_onnx::config::parse("digits", &text).unwrap_err();
    assert!(e.starts_with("TOML parse error at line 1, column"), "{e:?}");
    assert!(!e.contains(|c: char| c.is_control()), "{e:?}");
}
