//! ICD objects: what an OpenCL handle in the application points to.
//!
//! Every handle is a pointer to an [`Obj`] whose first field is the `cl_khr_icd`
//! dispatch table, as the ICD loader requires. A process-wide registry of live handles
//! lets every entry point validate a handle (and its type) before touching it, so a
//! stale, foreign or mistyped handle gives the proper `CL_INVALID_*` code instead of a
//! crash. Reference counts follow OpenCL: a child (queue, buffer, program, kernel, event)
//! holds a reference to its parent until it is freed.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::api::PropertyList;

use ocl_remote::cl::{self, ClInt};

use crate::node::Node;

/// A handle as the application sees it.
pub type Handle = *mut c_void;
/// A handle stored inside another object (kept as an integer so objects are `Send`).
pub type H = usize;

#[repr(C)]
pub struct Obj<T> {
    dispatch: *const c_void,
    refs: AtomicU32,
    pub v: T,
}

/// The object types, with the error code for an invalid handle of each.
pub trait Kind: Sized + 'static {
    const TAG: u8;
    const INVALID: ClInt;
}

macro_rules! kinds {
    ($($t:ident = $tag:expr, $invalid:expr;)*) => {
        $(impl Kind for $t { const TAG: u8 = $tag; const INVALID: ClInt = $invalid; })*
    };
}

kinds! {
    Platform = 1, cl::CL_INVALID_PLATFORM;
    Device = 2, cl::CL_INVALID_DEVICE;
    Context = 3, cl::CL_INVALID_CONTEXT;
    Queue = 4, cl::CL_INVALID_COMMAND_QUEUE;
    Mem = 5, cl::CL_INVALID_MEM_OBJECT;
    Program = 6, cl::CL_INVALID_PROGRAM;
    Kernel = 7, cl::CL_INVALID_KERNEL;
    Event = 8, cl::CL_INVALID_EVENT;
    Sampler = 9, cl::CL_INVALID_SAMPLER;
}

fn registry() -> &'static Mutex<HashMap<usize, u8>> {
    static HANDLES: OnceLock<Mutex<HashMap<usize, u8>>> = OnceLock::new();
    HANDLES.get_or_init(|| Mutex::new(HashMap::new()))
}

fn registered(h: usize, tag: u8) -> bool {
    registry().lock().unwrap_or_else(|p| p.into_inner()).get(&h) == Some(&tag)
}

/// Creates an object with one reference and returns its handle.
pub fn new_handle<T: Kind>(v: T) -> Handle {
    let obj = Box::new(Obj {
        dispatch: crate::dispatch_table(),
        refs: AtomicU32::new(1),
        v,
    });
    let h = Box::into_raw(obj) as usize;
    registry()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(h, T::TAG);
    h as Handle
}

/// The object behind `h` if `h` is a live handle of type `T`.
pub fn get<'a, T: Kind>(h: Handle) -> Result<&'a Obj<T>, ClInt> {
    if h.is_null() || !registered(h as usize, T::TAG) {
        return Err(T::INVALID);
    }
    // SAFETY: the registry holds exactly the live objects of type T created by new_handle.
    Ok(unsafe { &*(h as *const Obj<T>) })
}

pub fn retain<T: Kind>(h: Handle) -> ClInt {
    match get::<T>(h) {
        Ok(o) => {
            o.refs.fetch_add(1, Ordering::AcqRel);
            cl::CL_SUCCESS
        }
        Err(e) => e,
    }
}

pub fn release<T: Kind>(h: Handle) -> ClInt {
    let o = match get::<T>(h) {
        Ok(o) => o,
        Err(e) => return e,
    };
    if o.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
        registry()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(h as usize));
        // SAFETY: the last reference is gone and the handle is out of the registry, so
        // no other caller can reach the object any more.
        drop(unsafe { Box::from_raw(h as *mut Obj<T>) });
    }
    cl::CL_SUCCESS
}

pub fn ref_count<T: Kind>(o: &Obj<T>) -> u32 {
    o.refs.load(Ordering::Acquire)
}

pub struct Platform {
    pub node: Arc<Node>,
    pub remote: u32,
    pub devices: Vec<H>,
}

pub struct Device {
    pub node: Arc<Node>,
    pub remote: u32,
    pub platform: H,
    pub info_cache: Mutex<HashMap<u32, Result<Vec<u8>, ClInt>>>,
}

pub struct Context {
    pub node: Arc<Node>,
    pub id: u64,
    pub devices: Vec<H>,
    pub properties: Vec<isize>,
    /// A queue of the ICD's own on the node (on the context's first device), made when
    /// first needed, that carries the initial data of large buffers and images (see
    /// `api::buffer`); the application never sees it.
    pub creation_queue: Mutex<Option<u64>>,
    /// `clSetContextDestructorCallback`'s callbacks, run in reverse order of
    /// registration when the context is freed.
    pub destructors: Mutex<Vec<(ContextCallback, usize)>>,
}

type ContextCallback = unsafe extern "C" fn(Handle, *mut c_void);

impl Context {
    /// Registers `cb(context, user)` to run when the context is freed.
    pub fn add_destructor(&self, cb: ContextCallback, user: *mut c_void) {
        self.destructors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((cb, user as usize));
    }
}

pub struct Queue {
    pub node: Arc<Node>,
    pub id: u64,
    pub context: H,
    pub device: H,
    pub properties: u64,
    /// The property list it was created with (`CL_QUEUE_PROPERTIES_ARRAY`).
    pub property_list: PropertyList,
}

/// Host memory the ICD allocated, zero-filled (the memory of a mapping).
pub struct HostMem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain bytes; who writes them when is ordered by OpenCL (a mapping's memory is
// written by its read, then handed to the application).
unsafe impl Send for HostMem {}
unsafe impl Sync for HostMem {}

impl HostMem {
    pub fn zeroed(len: usize) -> Arc<HostMem> {
        let b = vec![0u8; len].into_boxed_slice();
        Arc::new(HostMem {
            ptr: Box::into_raw(b).cast::<u8>(),
            len,
        })
    }
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for HostMem {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` come from the boxed slice made in `zeroed`.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
    }
}

/// One mapping made by `clEnqueueMapBuffer`, alive until unmapped.
pub struct Mapping {
    pub ptr: usize,
    pub offset: usize,
    pub size: usize,
    /// The map flags that need a write-back at unmap (0 for shared-memory mappings,
    /// which are the buffer itself).
    pub flags: u64,
    /// The host memory we allocated for the mapping (none for `CL_MEM_USE_HOST_PTR`),
    /// shared with the read that fills it: freed when both are done.
    pub _backing: Option<Arc<HostMem>>,
    /// For an image: where the mapping lies in it.
    pub image: Option<ImageMapping>,
}

/// What an image's mapping covers: the origin and region mapped, and the row and slice
/// strides of the mapping's memory (tight, or those of the image's host memory).
#[derive(Clone, Copy)]
pub struct ImageMapping {
    pub origin: [usize; 3],
    pub region: [usize; 3],
    pub strides: (usize, usize),
}

pub struct Mem {
    pub node: Arc<Node>,
    pub id: u64,
    pub context: H,
    pub flags: u64,
    pub size: usize,
    pub host_ptr: usize,
    pub maps: Mutex<Vec<Mapping>>,
    /// The buffer's shared memory when the node offered it and we could map it (for a
    /// sub-buffer: its parent's, starting at `shm_offset`).
    pub shm: Option<Arc<ocl_remote::shm::Region>>,
    pub shm_offset: usize,
    /// For a sub-buffer: the parent buffer (referenced) and the origin in it.
    pub parent: H,
    pub origin: usize,
    /// For an image: its format and shape (`size` is then its tightly packed bytes).
    pub image: Option<ImageMeta>,
    /// Ends, with the destructor callbacks, once the object is released and no read in
    /// flight writes into memory of its own any more.
    pub life: Arc<MemLife>,
    /// The property list of `clCreateBufferWithProperties` or
    /// `clCreateImageWithProperties` (`CL_MEM_PROPERTIES`), set once it is made.
    pub property_list: OnceLock<PropertyList>,
}

type MemCallback = unsafe extern "C" fn(Handle, *mut c_void);

/// The end of a memory object's life as `clSetMemObjectDestructorCallback` sees it: when
/// the last reference to the object is gone and the reads in flight that write into its
/// host memory (a map of a `CL_MEM_USE_HOST_PTR` buffer writes into the application's
/// memory) have their data, so the callbacks may free that memory. The object holds
/// one `Arc`, every such read another ([`crate::node::Keep`]).
#[derive(Default)]
pub struct MemLife {
    callbacks: Mutex<Vec<(MemCallback, usize, usize)>>,
}

impl MemLife {
    /// Registers `cb(memobj, user)` to run at the end.
    pub fn add_callback(&self, memobj: Handle, cb: MemCallback, user: *mut c_void) {
        self.callbacks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((cb, memobj as usize, user as usize));
    }
}

impl Drop for MemLife {
    fn drop(&mut self) {
        let callbacks = std::mem::take(self.callbacks.get_mut().unwrap_or_else(|p| p.into_inner()));
        // OpenCL calls them in the reverse order of their registration.
        for (cb, memobj, user) in callbacks.into_iter().rev() {
            // SAFETY: the application registered `cb` with `user` for this object.
            unsafe { cb(memobj as Handle, user as *mut c_void) };
        }
    }
}

/// What the ICD knows of an image.
#[derive(Clone, Copy, Debug)]
pub struct ImageMeta {
    /// `cl_mem_object_type`.
    pub image_type: u32,
    /// Channel order and type.
    pub format: [u32; 2],
    /// Bytes per pixel.
    pub elem: usize,
    /// Width, rows (height, or layers of a 1D array), slices (depth, or layers of a 2D
    /// array); 1 where the type has no such dimension.
    pub dims: [usize; 3],
    /// For `CL_MEM_USE_HOST_PTR`: the row and slice strides of the application's memory
    /// (a 1D array's rows are its layers); maps return pointers into that memory.
    pub host_strides: (usize, usize),
}

pub struct Sampler {
    pub node: Arc<Node>,
    pub id: u64,
    pub context: H,
    pub normalized: u32,
    pub addressing: u32,
    pub filter: u32,
    /// The property list of `clCreateSamplerWithProperties` (`CL_SAMPLER_PROPERTIES`).
    pub property_list: PropertyList,
}

pub struct Program {
    pub node: Arc<Node>,
    pub id: u64,
    pub context: H,
    pub devices: Vec<H>,
    pub source: Vec<u8>,
}

/// A kernel argument value as the application set it.
#[derive(Clone)]
pub enum ArgValue {
    Unset,
    Mem(u64),
    NullMem,
    Local(u64),
    Bytes(Vec<u8>),
    Sampler(u64),
}

pub struct Kernel {
    pub node: Arc<Node>,
    pub id: u64,
    pub program: H,
    pub context: H,
    pub name: Vec<u8>,
    pub num_args: u32,
    pub args: Mutex<Vec<ArgValue>>,
    /// What the kernel declares, learned as needed (see `api::declared`).
    pub declared: Mutex<crate::api::Declared>,
}

type Callback = unsafe extern "C" fn(Handle, ClInt, *mut c_void);

pub struct Event {
    pub node: Arc<Node>,
    pub id: u64,
    pub queue: H,
    pub context: H,
    pub command_type: u32,
    status: AtomicI32,
    profile: Mutex<[u64; 4]>,
    callbacks: Mutex<Vec<(ClInt, Callback, usize)>>,
}

impl Event {
    pub fn new(node: Arc<Node>, queue: H, context: H, command_type: u32) -> Event {
        let id = node.next_id();
        // A user event (no queue) starts submitted, as OpenCL says.
        let status = if queue == 0 {
            cl::CL_SUBMITTED
        } else {
            cl::CL_QUEUED
        };
        Event {
            node,
            id,
            queue,
            context,
            command_type,
            status: AtomicI32::new(status),
            profile: Mutex::new([0; 4]),
            callbacks: Mutex::new(Vec::new()),
        }
    }
    pub fn status(&self) -> ClInt {
        self.status.load(Ordering::Acquire)
    }
    pub fn profile(&self) -> [u64; 4] {
        *self.profile.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A counted reference to an event, held by an in-flight task until it completes.
pub struct EventRef(usize);

// SAFETY: events are shared between the application threads and the reader thread; all
// their mutable state is atomic or behind a mutex.
unsafe impl Send for EventRef {}

impl EventRef {
    /// Takes a new reference to the live event `h`.
    pub fn new(h: Handle) -> EventRef {
        retain::<Event>(h);
        EventRef(h as usize)
    }
    fn ev(&self) -> &Obj<Event> {
        // SAFETY: we hold a reference, so the object is alive.
        unsafe { &*(self.0 as *const Obj<Event>) }
    }
    pub fn id(&self) -> u64 {
        self.ev().v.id
    }
    pub fn status(&self) -> ClInt {
        self.ev().v.status()
    }
    /// Completes a user event from `clSetUserEventStatus`; false if it was already set.
    pub fn set_user_status(&self, status: ClInt) -> bool {
        self.complete(status, [0; 4])
    }
    pub fn set_submitted(&self) {
        let _ = self.ev().v.status.compare_exchange(
            cl::CL_QUEUED,
            cl::CL_SUBMITTED,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
    /// [`EventRef::settle`], then, if that made the event final, its callbacks.
    pub fn complete(&self, status: ClInt, profile: [u64; 4]) -> bool {
        let settled = self.settle(status, profile);
        if settled {
            self.run_callbacks();
        }
        settled
    }
    /// Makes the event final with `status` (`CL_COMPLETE` or an error) and `profile`,
    /// unless it already is: an event completes exactly once, and only the call that
    /// completed it returns true and owes its callbacks ([`EventRef::run_callbacks`]).
    /// Cheap and without callbacks, so that the connection's bookkeeping can make a
    /// whole task's events final under its lock before anyone may see the task gone.
    pub fn settle(&self, status: ClInt, profile: [u64; 4]) -> bool {
        let e = &self.ev().v;
        // Held while the status changes: whoever sees it final and then reads the
        // profile reads this one.
        let mut p = e.profile.lock().unwrap_or_else(|p| p.into_inner());
        let mut now = e.status();
        loop {
            if now <= cl::CL_COMPLETE {
                return false;
            }
            match e.status.compare_exchange(
                now,
                status.min(cl::CL_COMPLETE),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(seen) => now = seen,
            }
        }
        *p = profile;
        true
    }
    /// Runs the callbacks registered so far with the event's final status (those
    /// registered later run at once, in [`add_callback`]).
    pub fn run_callbacks(&self) {
        let e = &self.ev().v;
        let status = e.status();
        debug_assert!(status <= cl::CL_COMPLETE, "callbacks of an event not final");
        let callbacks = std::mem::take(&mut *e.callbacks.lock().unwrap_or_else(|p| p.into_inner()));
        for (_, cb, user) in callbacks {
            // SAFETY: the application registered `cb` for this event with `user`.
            unsafe { cb(self.0 as Handle, status, user as *mut c_void) };
        }
    }
}

impl Drop for EventRef {
    fn drop(&mut self) {
        release::<Event>(self.0 as Handle);
    }
}

/// Registers `cb` to run when event `h` reaches `status`; runs it at once if it has.
pub fn add_callback(h: Handle, status: ClInt, cb: Callback, user: usize) -> ClInt {
    let o = match get::<Event>(h) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let mut cbs = o.v.callbacks.lock().unwrap_or_else(|p| p.into_inner());
    let now = o.v.status();
    if now > cl::CL_COMPLETE {
        cbs.push((status, cb, user));
        return cl::CL_SUCCESS;
    }
    drop(cbs);
    // SAFETY: as in `complete`.
    unsafe { cb(h, now, user as *mut c_void) };
    cl::CL_SUCCESS
}

fn release_parent<T: Kind>(h: H) {
    if h != 0 {
        release::<T>(h as Handle);
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        self.node.remove_notifier(self.id);
        if let Some(queue) = *self
            .creation_queue
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
        {
            self.node.release(queue);
        }
        self.node.release(self.id);
        let callbacks = std::mem::take(
            self.destructors
                .get_mut()
                .unwrap_or_else(|p| p.into_inner()),
        );
        // OpenCL 3.0 calls them in the reverse order of their registration, with the
        // context's handle (the `Obj` around this value), which only tells the callback
        // which context it was: it is no longer valid.
        let handle =
            (self as *mut Context as usize - std::mem::offset_of!(Obj<Context>, v)) as Handle;
        for (cb, user) in callbacks.into_iter().rev() {
            // SAFETY: the application registered `cb` with `user` for this context.
            unsafe { cb(handle, user as *mut c_void) };
        }
    }
}
impl Drop for Queue {
    fn drop(&mut self) {
        self.node.forget_queue(self.id);
        self.node.release(self.id);
        release_parent::<Context>(self.context);
    }
}
impl Drop for Mem {
    fn drop(&mut self) {
        self.node.release(self.id);
        release_parent::<Context>(self.context);
        release_parent::<Mem>(self.parent);
    }
}
impl Drop for Sampler {
    fn drop(&mut self) {
        self.node.release(self.id);
        release_parent::<Context>(self.context);
    }
}
impl Drop for Program {
    fn drop(&mut self) {
        self.node.release(self.id);
        release_parent::<Context>(self.context);
    }
}
impl Drop for Kernel {
    fn drop(&mut self) {
        self.node.release(self.id);
        release_parent::<Program>(self.program);
    }
}
impl Drop for Event {
    fn drop(&mut self) {
        release_parent::<Queue>(self.queue);
        if self.queue == 0 {
            // A user event holds its context directly.
            release_parent::<Context>(self.context);
        }
    }
}
