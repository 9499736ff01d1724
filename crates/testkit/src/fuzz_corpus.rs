//! Replaying a crate's checked-in fuzz corpus on stable Rust.
//!
//! A crate with fuzz targets keeps the inputs its fuzzers found interesting in
//! `fuzz/corpus/<target>/` and a `tests/fuzz_corpus.rs` that runs each of them
//! through the target's body (a function of the crate's `fuzzing` module), so that
//! every `cargo test` exercises them without nightly or cargo-fuzz. This module is
//! that replay loop, once: [`replay`] for a target whose body needs nothing else, and
//! [`corpus`] for a test that drives the inputs itself (through a live service, with
//! checks between inputs).
//!
//! Not for: running the fuzzers, or generating corpora (each crate's `fuzz/` does).

use std::fs;
use std::path::{Path, PathBuf};

/// The fewest files a corpus may hold: fewer means a corpus went missing or was
/// emptied by mistake, and the replay would pass without testing anything.
pub const FILES_MIN: usize = 3;

/// The files of `<manifest_dir>/fuzz/corpus/<target>/`, in name order, each with its
/// contents. Pass `env!("CARGO_MANIFEST_DIR")` as `manifest_dir`. Panics when the
/// directory or a file cannot be read, or when it holds fewer than [`FILES_MIN`] files.
pub fn corpus(manifest_dir: &str, target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(manifest_dir).join("fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            entry
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .path()
        })
        .collect();
    files.sort();
    assert!(
        files.len() >= FILES_MIN,
        "{target}: only {} corpus files",
        files.len()
    );
    files
        .into_iter()
        .map(|path| {
            let data = fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path, data)
        })
        .collect()
}

/// Runs every file of `target`'s corpus (see [`corpus`]) through `body`, the fuzz
/// target's body; a panic in it fails the test, naming the file.
pub fn replay(manifest_dir: &str, target: &str, body: fn(&[u8])) {
    for (path, data) in corpus(manifest_dir, target) {
        let outcome = std::panic::catch_unwind(|| body(&data));
        assert!(outcome.is_ok(), "{target}: {} fails", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch crate directory with a corpus of `files` files for target `t`.
    fn scratch(name: &str, files: usize) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("testkit-corpus-{name}-{}", std::process::id()));
        let corpus = dir.join("fuzz/corpus/t");
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&corpus).unwrap();
        for i in 0..files {
            fs::write(corpus.join(format!("{i:02}")), [i as u8]).unwrap();
        }
        dir
    }

    #[test]
    fn corpus_reads_every_file_in_name_order() {
        let dir = scratch("order", 4);
        let files = corpus(dir.to_str().unwrap(), "t");
        let bytes: Vec<u8> = files.iter().map(|(_, data)| data[0]).collect();
        assert_eq!(bytes, [0, 1, 2, 3]);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_corpus_of_too_few_files_fails() {
        let dir = scratch("few", FILES_MIN - 1);
        let outcome = std::panic::catch_unwind(|| corpus(dir.to_str().unwrap(), "t"));
        fs::remove_dir_all(dir).unwrap();
        assert!(outcome.is_err());
    }

    #[test]
    fn a_missing_corpus_fails() {
        let outcome = std::panic::catch_unwind(|| corpus("/nonexistent-crate-dir", "t"));
        assert!(outcome.is_err());
    }

    #[test]
    fn replay_fails_on_an_input_that_panics_the_body() {
        fn below_two(data: &[u8]) {
            assert!(data[0] < 2, "the planted bad input");
        }
        let bad = scratch("bad", 3);
        let root = bad.to_str().unwrap().to_owned();
        let outcome = std::panic::catch_unwind(|| replay(&root, "t", below_two));
        fs::remove_dir_all(bad).unwrap();
        assert!(outcome.is_err());
        // The same body passes a corpus without the bad input (bytes 0 and 1 only).
        let good = scratch("good", 2);
        fs::write(good.join("fuzz/corpus/t/02"), [1]).unwrap();
        replay(good.to_str().unwrap(), "t", below_two);
        fs::remove_dir_all(good).unwrap();
    }
}
