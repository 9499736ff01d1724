//! Replays the checked-in fuzz corpora (`fuzz/corpus/<target>/`) through the fuzz
//! targets' bodies, so that every test run, on stable Rust, exercises them.

use std::fs;
use std::path::Path;

use manifest::fuzzing;

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
fn expr_corpus() {
    replay("expr", fuzzing::expr);
}

#[test]
fn manifest_corpus() {
    replay("manifest", fuzzing::manifest);
}
