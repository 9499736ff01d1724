//! The node's program cache: built binaries by content hash.
//!
//! A key is the SHA-256 of the client's program source, the build options the runtime
//! gets (the client's, with what the node adds to compile for the version it presents:
//! `service::presented`) and the devices (which decide whether the node adds anything,
//! to the options and to the source). When a
//! client builds a source program whose key is cached, the service creates the program
//! from the cached binaries instead of compiling the source again (for an FPGA the
//! binary is the bitstream a device may already hold). Bounded in entries and bytes;
//! the oldest entries go first.

use std::collections::VecDeque;

use sha2::{Digest, Sha256};

pub(crate) type Key = [u8; 32];

/// Binaries of one build, one per device, in the build's device order.
pub(crate) type Binaries = Vec<Vec<u8>>;

pub(crate) struct ProgramCache {
    entries: VecDeque<(Key, Binaries)>,
    bytes: usize,
    entries_max: usize,
    bytes_max: usize,
}

pub(crate) fn source_hash(source: &[u8]) -> Key {
    Sha256::digest(source).into()
}

pub(crate) fn key(source_hash: &Key, options: &[u8], devices: &[u32]) -> Key {
    let mut h = Sha256::new();
    h.update(source_hash);
    h.update((options.len() as u64).to_le_bytes());
    h.update(options);
    for d in devices {
        h.update(d.to_le_bytes());
    }
    h.finalize().into()
}

impl ProgramCache {
    pub fn new(entries_max: usize, bytes_max: usize) -> ProgramCache {
        ProgramCache {
            entries: VecDeque::new(),
            bytes: 0,
            entries_max,
            bytes_max,
        }
    }

    pub fn get(&self, key: &Key) -> Option<Binaries> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, b)| b.clone())
    }

    pub fn insert(&mut self, key: Key, binaries: Binaries) {
        let size: usize = binaries.iter().map(Vec::len).sum();
        if size > self.bytes_max || self.entries_max == 0 || self.get(&key).is_some() {
            return;
        }
        while self.entries.len() >= self.entries_max || self.bytes + size > self.bytes_max {
            let Some((_, old)) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= old.iter().map(Vec::len).sum::<usize>();
        }
        self.bytes += size;
        self.entries.push_back((key, binaries));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_bounded_and_evicts_the_oldest() {
        let mut c = ProgramCache::new(2, 10);
        let k = |i: u8| key(&source_hash(&[i]), b"", &[0]);
        c.insert(k(1), vec![vec![0; 4]]);
        c.insert(k(2), vec![vec![0; 4]]);
        c.insert(k(3), vec![vec![0; 4]]);
        assert!(c.get(&k(1)).is_none());
        assert!(c.get(&k(2)).is_some() && c.get(&k(3)).is_some());
        c.insert(k(4), vec![vec![0; 8]]);
        assert!(c.get(&k(2)).is_none() && c.get(&k(3)).is_none());
        assert!(c.get(&k(4)).is_some());
        c.insert(k(5), vec![vec![0; 11]]);
        assert!(c.get(&k(5)).is_none(), "larger than the whole cache");
        assert_ne!(
            key(&source_hash(b"a"), b"-O1", &[0]),
            key(&source_hash(b"a"), b"-O2", &[0])
        );
    }
}
