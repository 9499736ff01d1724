//! The object store: named byte objects kept in device memory and served by the front
//! end without touching a slot (Strega's static objects). Bounded in total bytes, in
//! object count and in key length; every object carries a strong ETag.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

#[derive(Clone)]
pub struct Object {
    pub data: Arc<Vec<u8>>,
    /// Quoted strong entity tag, ready for the `ETag` header.
    pub etag: String,
}

#[derive(Debug, PartialEq, Eq)]
pub enum StoreError {
    /// Not enough capacity left (HTTP 507).
    Full {
        needed: usize,
        free: usize,
    },
    TooManyObjects {
        max: usize,
    },
    BadKey(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Full { needed, free } => {
                write!(
                    f,
                    "object store full: object needs {needed} bytes, {free} free"
                )
            }
            StoreError::TooManyObjects { max } => {
                write!(f, "object store holds its maximum of {max} objects")
            }
            StoreError::BadKey(why) => f.write_str(why),
        }
    }
}

pub struct ObjectStore {
    inner: Mutex<Inner>,
    bytes_max: usize,
    objects_max: usize,
    key_bytes_max: usize,
}

struct Inner {
    objects: HashMap<String, Object>,
    bytes: usize,
}

impl ObjectStore {
    pub fn new(bytes_max: usize, objects_max: usize, key_bytes_max: usize) -> ObjectStore {
        ObjectStore {
            inner: Mutex::new(Inner {
                objects: HashMap::new(),
                bytes: 0,
            }),
            bytes_max,
            objects_max,
            key_bytes_max,
        }
    }

    /// Checks a key before its body is read.
    pub fn check_key(&self, key: &str) -> Result<(), StoreError> {
        if key.is_empty() {
            return Err(StoreError::BadKey("object key is empty".to_string()));
        }
        if key.len() > self.key_bytes_max {
            return Err(StoreError::BadKey(format!(
                "object key longer than {} bytes",
                self.key_bytes_max
            )));
        }
        if key.bytes().any(|b| b.is_ascii_control()) {
            return Err(StoreError::BadKey(
                "object key contains control characters".to_string(),
            ));
        }
        Ok(())
    }

    /// Whether an object of `len` bytes could be stored under `key` now.
    pub fn check_room(&self, key: &str, len: usize) -> Result<(), StoreError> {
        let inner = self.inner.lock();
        let replaced = inner.objects.get(key).map_or(0, |o| o.data.len());
        let free = self.bytes_max - inner.bytes + replaced;
        if len > free {
            return Err(StoreError::Full { needed: len, free });
        }
        if replaced == 0
            && !inner.objects.contains_key(key)
            && inner.objects.len() >= self.objects_max
        {
            return Err(StoreError::TooManyObjects {
                max: self.objects_max,
            });
        }
        Ok(())
    }

    /// Stores `data` under `key`. Returns `true` when the key is new.
    pub fn put(&self, key: &str, data: Vec<u8>) -> Result<bool, StoreError> {
        self.check_key(key)?;
        let etag = etag_of(&data);
        let mut inner = self.inner.lock();
        let replaced = inner.objects.get(key).map_or(0, |o| o.data.len());
        let free = self.bytes_max - inner.bytes + replaced;
        if data.len() > free {
            return Err(StoreError::Full {
                needed: data.len(),
                free,
            });
        }
        let exists = inner.objects.contains_key(key);
        if !exists && inner.objects.len() >= self.objects_max {
            return Err(StoreError::TooManyObjects {
                max: self.objects_max,
            });
        }
        inner.bytes = inner.bytes - replaced + data.len();
        inner.objects.insert(
            key.to_string(),
            Object {
                data: Arc::new(data),
                etag,
            },
        );
        Ok(!exists)
    }

    pub fn get(&self, key: &str) -> Option<Object> {
        self.inner.lock().objects.get(key).cloned()
    }

    pub fn delete(&self, key: &str) -> bool {
        let mut inner = self.inner.lock();
        match inner.objects.remove(key) {
            Some(o) => {
                inner.bytes -= o.data.len();
                true
            }
            None => false,
        }
    }

    /// Bytes stored.
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}

fn etag_of(data: &[u8]) -> String {
    let digest = Sha256::digest(data);
    let mut tag = String::with_capacity(34);
    tag.push('"');
    for b in &digest[..16] {
        tag.push_str(&format!("{b:02x}"));
    }
    tag.push('"');
    tag
}

/// Whether an `If-None-Match` header value matches `etag` (weak comparison, `*`).
pub fn none_match(header: &[u8], etag: &str) -> bool {
    let header = String::from_utf8_lossy(header);
    header
        .split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.trim_start_matches("W/") == etag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_counts_overwrites_once() {
        let s = ObjectStore::new(10, 2, 8);
        assert_eq!(s.put("a", vec![1; 6]), Ok(true));
        assert_eq!(s.put("a", vec![2; 10]), Ok(false));
        assert_eq!(s.bytes(), 10);
        assert!(matches!(
            s.put("b", vec![3]),
            Err(StoreError::Full { needed: 1, free: 0 })
        ));
        assert!(s.delete("a"));
        assert!(!s.delete("a"));
        assert_eq!(s.bytes(), 0);
        s.put("b", vec![]).unwrap();
        s.put("c", vec![]).unwrap();
        assert_eq!(
            s.put("d", vec![]),
            Err(StoreError::TooManyObjects { max: 2 })
        );
        assert!(matches!(
            s.put("123456789", vec![]),
            Err(StoreError::BadKey(_))
        ));
    }

    #[test]
    fn etags_are_stable_and_match() {
        let s = ObjectStore::new(100, 10, 8);
        s.put("k", b"hello".to_vec()).unwrap();
        let tag = s.get("k").unwrap().etag;
        assert_eq!(tag.len(), 34);
        assert!(none_match(tag.as_bytes(), &tag));
        assert!(none_match(format!("\"x\", W/{tag}").as_bytes(), &tag));
        assert!(none_match(b"*", &tag));
        assert!(!none_match(b"\"other\"", &tag));
    }
}
