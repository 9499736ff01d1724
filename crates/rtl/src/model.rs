//! A compiled design opened at run time, and the models made from it.
//!
//! The shared object exports four C functions (`shim/shim.cpp`): the ABI version,
//! create, step and destroy. [`Design`] owns the library; each [`Model`] is one
//! independent instance of the design (its own Verilator context), keeps the library
//! alive through an `Arc`, and is driven by one thread at a time (`&mut self`).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use libloading::Library;

/// The ABI version this harness speaks (`NETACCEL_RTL_ABI` in the shim).
const ABI: u32 = 1;

/// Inputs of one cycle, laid out as `struct netaccel_rtl_in`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Inputs {
    pub s_tdata: [u8; 64],
    pub s_tkeep: u64,
    pub s_tlast: u8,
    pub s_tvalid: u8,
    pub m_tready: u8,
    pub rst_n: u8,
}

/// Outputs sampled before a rising edge, laid out as `struct netaccel_rtl_out`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Outputs {
    pub m_tdata: [u8; 64],
    pub m_tkeep: u64,
    pub m_tlast: u8,
    pub m_tvalid: u8,
    pub s_tready: u8,
    pub pad: u8,
    pub m_tuser: u16,
}

impl Default for Inputs {
    fn default() -> Inputs {
        Inputs {
            s_tdata: [0; 64],
            s_tkeep: 0,
            s_tlast: 0,
            s_tvalid: 0,
            m_tready: 0,
            rst_n: 0,
        }
    }
}

impl Default for Outputs {
    fn default() -> Outputs {
        Outputs {
            m_tdata: [0; 64],
            m_tkeep: 0,
            m_tlast: 0,
            m_tvalid: 0,
            s_tready: 0,
            pad: 0,
            m_tuser: 0,
        }
    }
}

type AbiFn = unsafe extern "C" fn() -> u32;
type CreateFn = unsafe extern "C" fn() -> *mut std::ffi::c_void;
type DestroyFn = unsafe extern "C" fn(*mut std::ffi::c_void);
type StepFn = unsafe extern "C" fn(*mut std::ffi::c_void, *const Inputs, *mut Outputs, u64);

/// Why a shared object could not be used as a design.
#[derive(Debug)]
pub struct LoadError(pub String);

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoadError {}

/// A design's shared object, opened.
pub struct Design {
    create: CreateFn,
    destroy: DestroyFn,
    step: StepFn,
    // Last: the function pointers above point into it.
    _library: Library,
}

impl Design {
    /// Opens a shared object made by [`crate::compile`].
    pub fn load(path: &Path) -> Result<Arc<Design>, LoadError> {
        // SAFETY: the library is one `compile` produced: its initialisers are the
        // Verilator runtime's and the model's, which have no side effects beyond their
        // own statics (the shim's symbols are the only ones exported).
        let library = unsafe { Library::new(path) }
            .map_err(|e| LoadError(format!("cannot open {}: {e}", path.display())))?;
        let missing = |e: libloading::Error| {
            LoadError(format!(
                "{} is not a netaccel RTL design: {e}",
                path.display()
            ))
        };
        // SAFETY: the symbols have the signatures of the shim's declarations, whose ABI
        // version is checked right after.
        unsafe {
            let abi: AbiFn = *library
                .get::<AbiFn>(b"netaccel_rtl_abi\0")
                .map_err(missing)?;
            let version = abi();
            if version != ABI {
                return Err(LoadError(format!(
                    "{} speaks RTL shim ABI {version}, this node {ABI}: rebuild it",
                    path.display()
                )));
            }
            let create = *library
                .get::<CreateFn>(b"netaccel_rtl_create\0")
                .map_err(missing)?;
            let destroy = *library
                .get::<DestroyFn>(b"netaccel_rtl_destroy\0")
                .map_err(missing)?;
            let step = *library
                .get::<StepFn>(b"netaccel_rtl_step\0")
                .map_err(missing)?;
            Ok(Arc::new(Design {
                create,
                destroy,
                step,
                _library: library,
            }))
        }
    }

    /// A new, independent model of the design, with reset asserted.
    pub fn instantiate(self: &Arc<Design>) -> Model {
        // SAFETY: `create` allocates a model and never fails other than by aborting.
        let handle = unsafe { (self.create)() };
        assert!(!handle.is_null(), "netaccel_rtl_create returned null");
        Model {
            design: Arc::clone(self),
            handle,
        }
    }
}

/// One instance of a design.
pub struct Model {
    design: Arc<Design>,
    handle: *mut std::ffi::c_void,
}

// SAFETY: a model is only used through `&mut self`, by one thread at a time; a
// single-threaded Verilator model has no affinity to the thread that created it.
unsafe impl Send for Model {}

impl Model {
    /// Holds `inputs` for `cycles` cycles (at least 1) and returns the outputs sampled
    /// before the last rising edge.
    pub(crate) fn step(&mut self, inputs: &Inputs, cycles: u64) -> Outputs {
        let mut outputs = Outputs::default();
        // SAFETY: `handle` is a live model of this design; both structs have the
        // shim's layout.
        unsafe {
            (self.design.step)(self.handle, inputs, &mut outputs, cycles.max(1));
        }
        outputs
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: `handle` came from this design's `create` and is dropped once.
        unsafe { (self.design.destroy)(self.handle) }
    }
}
