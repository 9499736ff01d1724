//! Helpers the simulator's test files share.

use std::path::Path;

/// Every file of `dir` with its bytes, in name order: what two runs that must be
/// byte-identical are compared by.
pub fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}
