//! The object store: named byte objects kept in device memory and served by the front
//! end without touching a slot (Strega's static objects). Bounded in total bytes, in
//! object count and in key length; every object carries a strong ETag.
//!
//! Every object belongs to an [`Owner`]: a configured tenant, or all anonymous callers
//! together. A key names an object in its owner's namespace only, so one tenant can
//! neither see, read, overwrite nor delete another's objects: to it they do not exist
//! (the front end answers 404, never 403). Each owner's bytes are counted, and held to
//! the owner's quota (`object_bytes_max`) when it has one.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

pub use crate::core::quota::Owner;

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
    /// The owner's own bytes would pass its quota (HTTP 507).
    OverQuota {
        needed: usize,
        free: usize,
    },
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
            StoreError::OverQuota { needed, free } => write!(
                f,
                "the tenant's object quota is spent: object needs {needed} bytes, {free} free"
            ),
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
    objects: HashMap<(Owner, String), Object>,
    bytes: usize,
    /// Bytes each owner holds; an owner with none has no entry.
    owner_bytes: HashMap<Owner, usize>,
}

impl Inner {
    /// Whether `len` bytes fit under `key` of `owner` now, whose own bytes may be at
    /// most `quota`: the store's bounds, then the owner's.
    fn room(
        &self,
        limits: (usize, usize),
        owner: Owner,
        key: &str,
        len: usize,
        quota: Option<usize>,
    ) -> Result<(), StoreError> {
        let (bytes_max, objects_max) = limits;
        let name = (owner, key.to_string());
        let replaced = self.objects.get(&name).map(|o| o.data.len());
        let free = bytes_max - self.bytes + replaced.unwrap_or(0);
        if len > free {
            return Err(StoreError::Full { needed: len, free });
        }
        if replaced.is_none() && self.objects.len() >= objects_max {
            return Err(StoreError::TooManyObjects { max: objects_max });
        }
        if let Some(quota) = quota {
            let held = self.owner_bytes.get(&owner).copied().unwrap_or(0);
            let free = quota.saturating_sub(held - replaced.unwrap_or(0));
            if len > free {
                return Err(StoreError::OverQuota { needed: len, free });
            }
        }
        Ok(())
    }

    /// In debug builds: the totals are the sums of what the objects hold.
    fn check(&self) {
        if cfg!(debug_assertions) {
            let total: usize = self.objects.values().map(|o| o.data.len()).sum();
            assert_eq!(total, self.bytes, "store bytes are the objects' bytes");
            let owners: usize = self.owner_bytes.values().sum();
            assert_eq!(owners, self.bytes, "owners' bytes add up to the store's");
            assert!(
                self.owner_bytes.values().all(|&b| b > 0),
                "no empty owner entry"
            );
        }
    }

    /// Adds `added` bytes to `owner` and takes `removed` away.
    fn account(&mut self, owner: Owner, added: usize, removed: usize) {
        self.bytes = self.bytes + added - removed;
        let held = self.owner_bytes.entry(owner).or_insert(0);
        *held = *held + added - removed;
        if *held == 0 {
            self.owner_bytes.remove(&owner);
        }
    }
}

impl ObjectStore {
    pub fn new(bytes_max: usize, objects_max: usize, key_bytes_max: usize) -> ObjectStore {
        ObjectStore {
            inner: Mutex::new(Inner {
                objects: HashMap::new(),
                bytes: 0,
                owner_bytes: HashMap::new(),
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

    /// Whether an object of `len` bytes could be stored under `key` of `owner` now,
    /// the owner's bytes held to `quota`.
    pub fn check_room(
        &self,
        owner: Owner,
        key: &str,
        len: usize,
        quota: Option<usize>,
    ) -> Result<(), StoreError> {
        let limits = (self.bytes_max, self.objects_max);
        self.inner.lock().room(limits, owner, key, len, quota)
    }

    /// Stores `data` under `key` of `owner`, the owner's bytes held to `quota`.
    /// Returns `true` when the key is new to the owner.
    pub fn put(
        &self,
        owner: Owner,
        key: &str,
        data: Vec<u8>,
        quota: Option<usize>,
    ) -> Result<bool, StoreError> {
        self.check_key(key)?;
        let etag = etag_of(&data);
        let limits = (self.bytes_max, self.objects_max);
        let mut inner = self.inner.lock();
        inner.room(limits, owner, key, data.len(), quota)?;
        let added = data.len();
        let object = Object {
            data: Arc::new(data),
            etag,
        };
        let replaced = inner.objects.insert((owner, key.to_string()), object);
        let removed = replaced.as_ref().map_or(0, |o| o.data.len());
        inner.account(owner, added, removed);
        inner.check();
        Ok(replaced.is_none())
    }

    /// The object under `key` of `owner`; another owner's object of that key is not
    /// there.
    pub fn get(&self, owner: Owner, key: &str) -> Option<Object> {
        let name = (owner, key.to_string());
        self.inner.lock().objects.get(&name).cloned()
    }

    /// Deletes the object under `key` of `owner`; `false` when it has none.
    pub fn delete(&self, owner: Owner, key: &str) -> bool {
        let mut inner = self.inner.lock();
        let Some(o) = inner.objects.remove(&(owner, key.to_string())) else {
            return false;
        };
        inner.account(owner, 0, o.data.len());
        inner.check();
        true
    }

    /// Bytes stored, of every owner.
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }

    /// Bytes `owner` holds.
    pub fn bytes_of(&self, owner: Owner) -> usize {
        let inner = self.inner.lock();
        inner.owner_bytes.get(&owner).copied().unwrap_or(0)
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

    const ANON: Owner = Owner::Anonymous;

    #[test]
    fn capacity_counts_overwrites_once() {
        let s = ObjectStore::new(10, 2, 8);
        assert_eq!(s.put(ANON, "a", vec![1; 6], None), Ok(true));
        assert_eq!(s.put(ANON, "a", vec![2; 10], None), Ok(false));
        assert_eq!(s.bytes(), 10);
        assert!(matches!(
            s.put(ANON, "b", vec![3], None),
            Err(StoreError::Full { needed: 1, free: 0 })
        ));
        assert!(s.delete(ANON, "a"));
        assert!(!s.delete(ANON, "a"));
        assert_eq!(s.bytes(), 0);
        s.put(ANON, "b", vec![], None).unwrap();
        s.put(ANON, "c", vec![], None).unwrap();
        assert_eq!(
            s.put(ANON, "d", vec![], None),
            Err(StoreError::TooManyObjects { max: 2 })
        );
        assert!(matches!(
            s.put(ANON, "123456789", vec![], None),
            Err(StoreError::BadKey(_))
        ));
    }

    #[test]
    fn owners_see_only_their_own_objects() {
        let (a, b) = (Owner::Tenant(1 << 63 | 1), Owner::Tenant(1 << 63 | 2));
        let s = ObjectStore::new(100, 10, 8);
        assert_eq!(s.put(a, "k", b"from a".to_vec(), None), Ok(true));
        assert!(s.get(b, "k").is_none(), "b cannot read a's object");
        assert!(s.get(ANON, "k").is_none());
        assert!(!s.delete(b, "k"), "b cannot delete it");
        // b's write of the same key is b's own object: a's stays as it was.
        assert_eq!(s.put(b, "k", b"from b".to_vec(), None), Ok(true));
        assert_eq!(*s.get(a, "k").unwrap().data, b"from a".to_vec());
        assert_eq!(*s.get(b, "k").unwrap().data, b"from b".to_vec());
        assert_eq!((s.bytes_of(a), s.bytes_of(b), s.bytes()), (6, 6, 12));
        assert!(s.delete(b, "k"));
        assert_eq!(*s.get(a, "k").unwrap().data, b"from a".to_vec());
        assert_eq!((s.bytes_of(b), s.bytes()), (0, 6));
    }

    #[test]
    fn an_owner_is_held_to_its_quota_and_an_overwrite_counts_once() {
        let a = Owner::Tenant(1 << 63 | 1);
        let s = ObjectStore::new(100, 10, 8);
        s.put(a, "x", vec![0; 6], Some(10)).unwrap();
        assert_eq!(
            s.check_room(a, "y", 5, Some(10)),
            Err(StoreError::OverQuota { needed: 5, free: 4 })
        );
        assert_eq!(
            s.put(a, "y", vec![0; 5], Some(10)),
            Err(StoreError::OverQuota { needed: 5, free: 4 })
        );
        assert_eq!(
            s.put(a, "x", vec![0; 10], Some(10)),
            Ok(false),
            "replaces x"
        );
        // Other owners are not held to a's quota.
        assert_eq!(s.put(ANON, "y", vec![0; 50], Some(60)), Ok(true));
        assert_eq!((s.bytes_of(a), s.bytes_of(ANON)), (10, 50));
    }

    #[test]
    fn etags_are_stable_and_match() {
        let s = ObjectStore::new(100, 10, 8);
        s.put(ANON, "k", b"hello".to_vec(), None).unwrap();
        let tag = s.get(ANON, "k").unwrap().etag;
        assert_eq!(tag.len(), 34);
        assert!(none_match(tag.as_bytes(), &tag));
        assert!(none_match(format!("\"x\", W/{tag}").as_bytes(), &tag));
        assert!(none_match(b"*", &tag));
        assert!(!none_match(b"\"other\"", &tag));
    }
}
