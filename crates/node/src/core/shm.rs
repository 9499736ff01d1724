//! Shared memory regions: what a client of the Open Inference Protocol's system shared
//! memory extension registers (`/v2/systemsharedmemory/region/{r}/register`, gRPC
//! `SystemSharedMemoryRegister`) — a POSIX shared memory object it created, by key,
//! and the part of it to use — and the reads of inputs from it and writes of outputs
//! into it. The protocol's requests and documents are the front end's
//! (`front::oip::shm`); this is the node's state, as the object store is.
//!
//! Safety: a client must never crash the node nor make it read or write outside what
//! it registered. The object is opened by key under `/dev/shm` (one name, no `/` in it
//! after the first, no symlink followed, a regular file), and read and written with
//! `pread`/`pwrite` on that file rather than through a mapping: a client that shrinks
//! the object after registering it gets a short read (an error answer), where a mapping
//! would take SIGBUS and end the node. Every access is checked against the registered
//! `offset + byte_size` before any byte moves. The copy this costs is the one a
//! mapping's reader makes anyway (tensors are copied into the call's payload).
//!
//! Isolation: regions are bound to the tenant that registered them. A configured
//! tenant's (one a client certificate maps to, `core::tenant`) are seen and used by
//! that tenant only; regions registered by anonymous connections — every HTTP and
//! gRPC connection without a tenant identity, which the protocol's clients open and
//! close freely — are shared by anonymous connections only. Names are per owner (two
//! tenants may both call a region `input0`), and a region of another tenant is answered
//! exactly as a region that does not exist. An object (key) registered by one owner
//! cannot be registered by another while it is, so a tenant cannot read through the
//! node what another has placed in its object; which keys a tenant may register at all
//! is its policy's (`shared_memory` patterns, checked by the front ends).
//!
//! Bounds: at most `regions_max` regions per node (`shared_memory_regions_max`) and
//! `per_owner_max` per owner (`shared_memory_regions_per_tenant_max`, so one tenant
//! cannot take them all), names and keys of at most [`NAME_BYTES_MAX`] bytes. Not for: CUDA shared memory
//! (answered "not supported"), or mapping regions into accelerators.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use super::tenant::{is_configured, TenantId};

/// The longest region name and key (a POSIX shared memory name is at most 255 bytes).
pub const NAME_BYTES_MAX: usize = 255;

/// Whose a region is: a configured tenant's, or every anonymous connection's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Owner {
    Tenant(TenantId),
    Anonymous,
}

impl Owner {
    fn of(tenant: TenantId) -> Owner {
        if is_configured(tenant) {
            Owner::Tenant(tenant)
        } else {
            Owner::Anonymous
        }
    }
}

/// One registered region.
pub struct Region {
    pub name: String,
    pub key: String,
    /// Where the region starts in the object, and its length.
    pub offset: u64,
    pub byte_size: u64,
    owner: Owner,
    file: File,
}

/// `{"name", "key", "offset", "byte_size"}`: one entry of the status document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RegionStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

impl Region {
    /// Copies `len` bytes at `offset` within the region to the end of `dst`.
    pub fn read(&self, offset: u64, len: u64, dst: &mut Vec<u8>) -> Result<(), String> {
        let at = self.bounds(offset, len)?;
        let start = dst.len();
        let len = usize::try_from(len).map_err(|_| "the size does not fit in memory")?;
        dst.resize(start + len, 0);
        self.file.read_exact_at(&mut dst[start..], at).map_err(|e| {
            dst.truncate(start);
            format!("shared memory region '{}' cannot be read: {e}", self.name)
        })
    }

    /// Writes `src` at `offset` within the region.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<(), String> {
        let at = self.bounds(offset, src.len() as u64)?;
        self.file.write_all_at(src, at).map_err(|e| {
            format!(
                "shared memory region '{}' cannot be written: {e}",
                self.name
            )
        })
    }

    /// The object offset of `len` bytes at `offset` in the region, if they are inside it.
    fn bounds(&self, offset: u64, len: u64) -> Result<u64, String> {
        match offset.checked_add(len) {
            Some(end) if end <= self.byte_size => {
                let at = self.offset + offset;
                debug_assert!(at + len <= self.offset + self.byte_size);
                Ok(at)
            }
            _ => Err(format!(
                "{len} bytes at offset {offset} are outside shared memory region '{}' ({} bytes)",
                self.name, self.byte_size
            )),
        }
    }

    fn status(&self) -> RegionStatus {
        RegionStatus {
            name: self.name.clone(),
            key: self.key.clone(),
            offset: self.offset,
            byte_size: self.byte_size,
        }
    }
}

/// The node's registered regions, by owner and name.
pub struct Regions {
    regions_max: usize,
    per_owner_max: usize,
    by_name: Mutex<BTreeMap<(Owner, String), Arc<Region>>>,
}

impl Regions {
    pub fn new(regions_max: usize, per_owner_max: usize) -> Regions {
        assert!(per_owner_max >= 1 && regions_max >= 1);
        Regions {
            regions_max,
            per_owner_max,
            by_name: Mutex::new(BTreeMap::new()),
        }
    }

    /// Registers region `name`: `byte_size` bytes at `offset` of the object `key`.
    pub fn register(
        &self,
        tenant: TenantId,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<(), String> {
        if name.is_empty() || name.len() > NAME_BYTES_MAX {
            return Err(format!("a region name has 1 to {NAME_BYTES_MAX} bytes"));
        }
        let file = open(key)?;
        let len = file
            .metadata()
            .map_err(|e| format!("shared memory key '{key}': {e}"))?
            .len();
        match offset.checked_add(byte_size) {
            Some(end) if byte_size > 0 && end <= len => {}
            _ => {
                return Err(format!(
                    "unable to register shared memory region '{name}': {byte_size} bytes at \
                     offset {offset} are not inside shared memory key '{key}' ({len} bytes)"
                ))
            }
        }
        let owner = Owner::of(tenant);
        let region = Region {
            name: name.to_string(),
            key: key.to_string(),
            offset,
            byte_size,
            owner,
            file,
        };
        let mut map = self.by_name.lock();
        let entry = (owner, name.to_string());
        if map.contains_key(&entry) {
            // Triton's words: a name is registered once (per owner, here).
            return Err(format!("shared memory region '{name}' already in manager"));
        }
        if map.values().any(|r| r.key == key && r.owner != owner) {
            return Err(format!(
                "unable to register shared memory region '{name}': shared memory key \
                 '{key}' is registered by another client"
            ));
        }
        if map.len() >= self.regions_max {
            return Err(format!(
                "the node holds {} shared memory regions, its bound \
                 (shared_memory_regions_max); unregister one first",
                self.regions_max
            ));
        }
        if map.keys().filter(|(o, _)| *o == owner).count() >= self.per_owner_max {
            return Err(format!(
                "this client holds {} shared memory regions, its bound \
                 (shared_memory_regions_per_tenant_max); unregister one first",
                self.per_owner_max
            ));
        }
        map.insert(entry, Arc::new(region));
        Ok(())
    }

    /// The region `name`, if `tenant` may use it.
    pub fn get(&self, tenant: TenantId, name: &str) -> Result<Arc<Region>, String> {
        self.by_name
            .lock()
            .get(&(Owner::of(tenant), name.to_string()))
            .cloned()
            .ok_or_else(|| unknown(name))
    }

    /// Unregisters region `name` (`None`: every region `tenant` may use). A call that
    /// holds a region finishes with it.
    pub fn unregister(&self, tenant: TenantId, name: Option<&str>) -> Result<(), String> {
        let owner = Owner::of(tenant);
        let mut map = self.by_name.lock();
        match name {
            None => {
                map.retain(|_, r| r.owner != owner);
                Ok(())
            }
            Some(name) => match map.remove(&(owner, name.to_string())) {
                Some(_) => Ok(()),
                None => Err(unknown(name)),
            },
        }
    }

    /// The regions `tenant` may use (`name`: that one only).
    pub fn status(
        &self,
        tenant: TenantId,
        name: Option<&str>,
    ) -> Result<Vec<RegionStatus>, String> {
        let owner = Owner::of(tenant);
        let map = self.by_name.lock();
        let list: Vec<RegionStatus> = map
            .values()
            .filter(|r| r.owner == owner && name.is_none_or(|n| n == r.name))
            .map(|r| r.status())
            .collect();
        match name {
            Some(n) if list.is_empty() => Err(unknown(n)),
            _ => Ok(list),
        }
    }
}

fn unknown(name: &str) -> String {
    format!("Unable to find system shared memory region: '{name}'")
}

/// Opens the POSIX shared memory object `key` (`/NAME`) read and write: the file
/// `/dev/shm/NAME`, without following a symlink, and only a regular file.
fn open(key: &str) -> Result<File, String> {
    let name = key
        .strip_prefix('/')
        .filter(|n| {
            !n.is_empty() && n.len() < NAME_BYTES_MAX && !n.contains('/') && *n != "." && *n != ".."
        })
        .ok_or_else(|| {
            format!("shared memory key '{key}' is not a POSIX shared memory name (/NAME)")
        })?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(std::path::Path::new("/dev/shm").join(name))
        .map_err(|e| format!("unable to open shared memory key '{key}': {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("shared memory key '{key}': {e}"))?;
    if !meta.is_file() {
        return Err(format!(
            "shared memory key '{key}' is not a shared memory object"
        ));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared memory object of `len` bytes, removed on drop.
    struct Object(String);

    impl Object {
        fn new(tag: &str, len: usize) -> Object {
            let key = format!("/netaccel-test-{tag}-{}", std::process::id());
            let path = std::path::Path::new("/dev/shm").join(&key[1..]);
            std::fs::write(&path, vec![7u8; len]).unwrap();
            Object(key)
        }
    }

    impl Drop for Object {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(std::path::Path::new("/dev/shm").join(&self.0[1..]));
        }
    }

    const ANON: TenantId = 5;

    #[test]
    fn reads_and_writes_stay_inside_the_registered_part() {
        let o = Object::new("rw", 64);
        let regions = Regions::new(4, 4);
        regions.register(ANON, "r", &o.0, 16, 32).unwrap();
        let r = regions.get(ANON + 1, "r").unwrap();
        r.write(0, &[1, 2, 3]).unwrap();
        let mut got = vec![9];
        r.read(0, 4, &mut got).unwrap();
        assert_eq!(got, [9, 1, 2, 3, 7]);
        assert!(r.read(30, 3, &mut got).is_err());
        assert!(r.read(u64::MAX, 2, &mut got).is_err());
        assert!(r.write(32, &[1]).is_err());
        assert_eq!(got.len(), 5, "a refused read adds nothing");
        // The bytes before the region are untouched.
        let all = std::fs::read(std::path::Path::new("/dev/shm").join(&o.0[1..])).unwrap();
        assert_eq!(&all[14..20], &[7, 7, 1, 2, 3, 7]);
        // A region outside the object, a bad key, a second registration are refused.
        assert!(regions.register(ANON, "s", &o.0, 60, 8).is_err());
        assert!(regions.register(ANON, "s", "/../etc/passwd", 0, 1).is_err());
        assert!(regions.register(ANON, "s", "/nope-netaccel", 0, 1).is_err());
        let e = regions.register(ANON, "r", &o.0, 0, 8).unwrap_err();
        assert!(e.contains("already in manager"), "{e}");
    }

    #[test]
    fn a_shrunk_object_is_an_error_not_a_crash() {
        let o = Object::new("shrink", 64);
        let regions = Regions::new(4, 4);
        regions.register(ANON, "r", &o.0, 0, 64).unwrap();
        let path = std::path::Path::new("/dev/shm").join(&o.0[1..]);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(8)
            .unwrap();
        let mut got = Vec::new();
        assert!(regions
            .get(ANON, "r")
            .unwrap()
            .read(0, 64, &mut got)
            .is_err());
    }

    #[test]
    fn regions_are_bounded_and_bound_to_their_tenant() {
        let o = Object::new("tenants", 16);
        let o2 = Object::new("tenants-2", 16);
        let regions = Regions::new(2, 2);
        let alice = 1 << 63 | 11;
        regions.register(alice, "a", &o.0, 0, 16).unwrap();
        // Alice's object is hers while she holds it.
        let e = regions.register(ANON, "b", &o.0, 0, 16).unwrap_err();
        assert!(e.contains("registered by another client"), "{e}");
        regions.register(ANON, "b", &o2.0, 0, 16).unwrap();
        let e = regions.register(ANON, "c", &o2.0, 0, 16).unwrap_err();
        assert!(e.contains("shared_memory_regions_max"), "{e}");
        // Another tenant, or an anonymous connection, cannot see or use alice's.
        assert!(regions.get(ANON, "a").is_err());
        assert!(regions.get(1 << 63 | 12, "a").is_err());
        assert!(regions.status(ANON, Some("a")).is_err());
        assert!(regions.unregister(ANON, Some("a")).is_err());
        assert_eq!(regions.status(ANON, None).unwrap().len(), 1);
        regions.unregister(ANON, None).unwrap();
        assert_eq!(regions.status(alice, None).unwrap()[0].name, "a");
        assert!(regions.get(alice, "a").is_ok());
    }

    #[test]
    fn names_are_per_owner_and_one_owner_cannot_take_every_region() {
        let o = Object::new("per-owner", 16);
        let o2 = Object::new("per-owner-2", 16);
        let regions = Regions::new(8, 2);
        let (alice, bob) = (1 << 63 | 11, 1 << 63 | 12);
        regions.register(alice, "input0", &o.0, 0, 8).unwrap();
        regions.register(bob, "input0", &o2.0, 0, 8).unwrap();
        assert_eq!(regions.get(alice, "input0").unwrap().key, o.0);
        assert_eq!(regions.get(bob, "input0").unwrap().key, o2.0);
        // One owner may register its own object twice (two parts of it).
        regions.register(alice, "output0", &o.0, 8, 8).unwrap();
        let e = regions.register(alice, "more", &o.0, 0, 8).unwrap_err();
        assert!(e.contains("shared_memory_regions_per_tenant_max"), "{e}");
        regions.unregister(bob, Some("input0")).unwrap();
        assert!(regions.get(alice, "input0").is_ok());
    }
}
