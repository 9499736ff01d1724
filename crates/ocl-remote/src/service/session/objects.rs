//! A client's object table: its resource pool on the node, by the ids the client chose.
//!
//! Every object kind names the error for an id that is not an object of that kind
//! ([`Kind::INVALID`]), so a lookup is one call, `objects.get::<Context>(id)?`, whether
//! the id is unknown, released, another client's or of another kind.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::service::account::TenantMemory;
use crate::service::metrics::Gauge;

use crate::cl::{self, ClInt};
use crate::service::{programs, Real};

pub(crate) struct Context {
    pub real: Arc<Real>,
    pub devices: Vec<u32>,
}

pub(crate) struct Queue {
    pub real: Arc<Real>,
    pub device: u32,
    pub context: Arc<Real>,
}

pub(crate) struct Mem {
    pub real: Arc<Real>,
    pub size: u64,
    /// The storage's bytes counted against `buffer_bytes_max`; a sub-buffer shares its
    /// parent's charge, so the bytes stay counted while either is in the table.
    pub charge: Arc<Charge>,
    /// Its `CL_MEM_HOST_*` flag (a sub-buffer's includes its parent's): the node
    /// refuses host reads and writes it forbids, whether the runtime checks or not.
    pub host: u64,
}

pub(crate) struct Program {
    pub real: Arc<Real>,
    /// For source programs: what the program cache needs to find or rebuild it.
    pub source: Option<ProgramSource>,
}

pub(crate) struct Kernel {
    pub real: Arc<Real>,
    /// The name is within `kernel_name_bytes_max`, so the runtime may generate its
    /// code (see [`crate::service::ServiceConfig::kernel_name_bytes_max`]).
    pub launchable: bool,
}

pub(crate) struct Image {
    pub real: Arc<Real>,
    /// Bytes per pixel.
    pub elem: u64,
    /// Width, height (or array size of a 1D array), depth (or array size of a 2D
    /// array); 1 where the type has no such dimension.
    pub dims: [u64; 3],
    /// Its storage's bytes counted against `buffer_bytes_max`: its own, or for a 1D
    /// image on a buffer, the buffer's charge (shared, as a sub-buffer shares it).
    /// Only held: dropping it gives the bytes back.
    #[allow(dead_code)]
    pub charge: Arc<Charge>,
    /// As for [`Mem::host`].
    pub host: u64,
}

pub(crate) struct Sampler {
    pub real: Arc<Real>,
}

#[derive(Clone)]
pub(crate) struct ProgramSource {
    pub hash: programs::Key,
    pub context: Arc<Real>,
    pub devices: Vec<u32>,
    /// The runtime's program made from the client's source. After a program-cache hit
    /// the program's executable comes from cached binaries instead, and a binary program
    /// has no source: builds, compiles and headers keep working on this one.
    pub program: Arc<Real>,
}

/// The bytes of device memory a client holds, against its `buffer_bytes_max` and, for
/// a tenant with a memory quota, the tenant's bound over all its sessions
/// ([`TenantMemory`]).
///
/// Counted by storage, not by object: the runtime frees a buffer's memory only when
/// the last object on it (the buffer, its sub-buffers, 1D images on it) is released,
/// so releasing the buffer alone gives nothing back. Each storage has one [`Charge`],
/// shared by every object on it, that gives its bytes back when the last one goes.
pub(crate) struct Quota {
    used: AtomicU64,
    max: u64,
    /// The device's gauge of bytes held by all its clients.
    gauge: Gauge,
    /// The client's tenant's memory over all its sessions, when it has a bound.
    tenant: Option<Arc<TenantMemory>>,
}

/// Which bound refused an allocation (see [`Quota::refusal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OverQuota {
    /// The client's own (`buffer_bytes_max`).
    Client(u64),
    /// Its tenant's over all its sessions (`opencl_bytes_max`).
    Tenant(u64),
}

impl Quota {
    /// A client's quota that also counts into its tenant's `tenant`.
    pub fn with_tenant(max: u64, gauge: Gauge, tenant: Option<Arc<TenantMemory>>) -> Arc<Quota> {
        Arc::new(Quota {
            used: AtomicU64::new(0),
            max,
            gauge,
            tenant,
        })
    }

    /// Whether `bytes` more fit within the bounds.
    pub fn admits(&self, bytes: u64) -> bool {
        self.refusal(bytes).is_none()
    }

    /// The bound `bytes` more would pass, if any.
    pub fn refusal(&self, bytes: u64) -> Option<OverQuota> {
        if self.used.load(Ordering::Relaxed).saturating_add(bytes) > self.max {
            return Some(OverQuota::Client(self.max));
        }
        match &self.tenant {
            Some(t) if !t.admits(bytes) => Some(OverQuota::Tenant(t.max())),
            _ => None,
        }
    }

    /// Counts `bytes` of new storage until the returned charge's last holder drops it.
    pub fn charge(self: &Arc<Quota>, bytes: u64) -> Arc<Charge> {
        self.used.fetch_add(bytes, Ordering::Relaxed);
        if let Some(t) = &self.tenant {
            t.add(bytes);
        }
        self.gauge.inc_by(bytes as i64);
        Arc::new(Charge {
            bytes,
            quota: Arc::clone(self),
        })
    }
}

/// One storage's bytes on its client's [`Quota`]; given back on drop.
pub(crate) struct Charge {
    bytes: u64,
    quota: Arc<Quota>,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.quota.used.fetch_sub(self.bytes, Ordering::Relaxed);
        if let Some(t) = &self.quota.tenant {
            t.give_back(self.bytes);
        }
        self.quota.gauge.dec_by(self.bytes as i64);
    }
}

/// An object kind, with the error for an id that names no object of this kind.
pub(crate) trait Kind: Sized {
    const INVALID: ClInt;
    fn of(obj: &Obj) -> Option<&Self>;
}

macro_rules! kinds {
    ($($kind:ident => $invalid:ident,)*) => {
        /// One object of a client.
        pub(crate) enum Obj {
            $($kind($kind),)*
        }

        $(
            impl Kind for $kind {
                const INVALID: ClInt = cl::$invalid;
                fn of(obj: &Obj) -> Option<&Self> {
                    match obj {
                        Obj::$kind(o) => Some(o),
                        _ => None,
                    }
                }
            }

            impl From<$kind> for Obj {
                fn from(o: $kind) -> Obj {
                    Obj::$kind(o)
                }
            }
        )*
    };
}

kinds! {
    Context => CL_INVALID_CONTEXT,
    Queue => CL_INVALID_COMMAND_QUEUE,
    Mem => CL_INVALID_MEM_OBJECT,
    Program => CL_INVALID_PROGRAM,
    Kernel => CL_INVALID_KERNEL,
    Image => CL_INVALID_MEM_OBJECT,
    Sampler => CL_INVALID_SAMPLER,
}

/// The objects of one client by id.
#[derive(Default)]
pub(crate) struct Objects {
    by_id: HashMap<u64, Obj>,
}

impl Objects {
    /// The object `id` if it is a `T`, the kind's `CL_INVALID_*` error otherwise.
    pub fn get<T: Kind>(&self, id: u64) -> Result<&T, ClInt> {
        self.by_id.get(&id).and_then(T::of).ok_or(T::INVALID)
    }

    /// A buffer or an image (kernel arguments take either).
    pub fn mem_object(&self, id: u64) -> Result<&Arc<Real>, ClInt> {
        match self.by_id.get(&id) {
            Some(Obj::Mem(m)) => Ok(&m.real),
            Some(Obj::Image(i)) => Ok(&i.real),
            _ => Err(cl::CL_INVALID_MEM_OBJECT),
        }
    }

    pub fn contains(&self, id: u64) -> bool {
        self.by_id.contains_key(&id)
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn insert(&mut self, id: u64, obj: impl Into<Obj>) {
        self.by_id.insert(id, obj.into());
    }

    pub fn remove(&mut self, id: u64) -> Option<Obj> {
        self.by_id.remove(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::Handle;

    unsafe extern "C" fn no_release(_: Handle) -> ClInt {
        cl::CL_SUCCESS
    }

    #[test]
    fn a_lookup_fails_with_the_error_of_the_kind_asked_for() {
        let real = Real::new(std::ptr::NonNull::dangling().as_ptr(), no_release);
        let page = Arc::new(crate::service::metrics::MetricsPage::create().unwrap());
        let metrics = crate::service::metrics::Metrics::new(&page, 0);
        let quota = Quota::with_tenant(4, metrics.client_buffer_bytes.clone(), None);
        let mut objects = Objects::default();
        objects.insert(
            1,
            Kernel {
                real: Arc::clone(&real),
                launchable: true,
            },
        );
        objects.insert(
            2,
            Image {
                real,
                elem: 4,
                dims: [1; 3],
                charge: quota.charge(4),
                host: 0,
            },
        );
        assert!(objects.get::<Kernel>(1).is_ok());
        assert_eq!(
            objects.get::<Context>(1).err(),
            Some(cl::CL_INVALID_CONTEXT)
        );
        assert_eq!(
            objects.get::<Queue>(9).err(),
            Some(cl::CL_INVALID_COMMAND_QUEUE)
        );
        assert_eq!(objects.get::<Mem>(2).err(), Some(cl::CL_INVALID_MEM_OBJECT));
        assert_eq!(
            objects.get::<Sampler>(2).err(),
            Some(cl::CL_INVALID_SAMPLER)
        );
        assert!(objects.mem_object(2).is_ok());
        assert_eq!(objects.mem_object(1).err(), Some(cl::CL_INVALID_MEM_OBJECT));
    }
}
