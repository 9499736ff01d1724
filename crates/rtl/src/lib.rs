//! RTL accelerators under cycle-accurate simulation: the harness between a Verilog
//! module with the stream ports of `spec/rtl-accelerators.md` and a netaccel slot.
//!
//! A slot never links a design at build time. Instead:
//!
//! 1. [`compile`] wraps the user's top module in a generated `netaccel_shell` with
//!    exactly the spec's ports (so a missing port or a wrong width fails here, with
//!    Verilator's message), has Verilator turn it into C++, and compiles that together
//!    with a small C ABI shim (`shim/shim.cpp`) into a shared object, cached on disk by
//!    a digest of the sources, the top module, the Verilator version and the shim;
//! 2. [`Design::load`] opens the shared object at run time (`libloading`) and checks
//!    its ABI version; [`Design::instantiate`] creates an independent model;
//! 3. [`Shell`] drives one call through a model exactly as the spec says: the 64-byte
//!    header beat, the payload beats, the output beats collected up to `tlast` with the
//!    status in `tuser`, optional random back-pressure on both streams, a bound on
//!    cycles and one on output bytes, and the count of cycles the call took. A design
//!    that breaks a rule or a bound is reported with the cause ([`Violation`]) and
//!    reset, never waited on forever;
//! 4. [`synth`] runs yosys `synth_xilinx` for an UltraScale+ part and reads back the
//!    LUT, flip-flop, block RAM and DSP counts.
//!
//! This crate knows nothing about manifests, slots or networks: the node evaluates the
//! manifest's `cycles_max` and output size and hands over the numbers. Verilator and
//! yosys are found on `PATH` (or `VERILATOR` / `YOSYS` in the environment).

mod compile;
mod model;
mod shell;
mod synth;

pub use compile::{
    compile, default_cache_dir, verilator_version, CompileError, CompiledDesign, DesignSource,
};
pub use model::{Design, LoadError, Model};
pub use shell::{Backpressure, CallLimits, CallOutcome, Shell, Violation, RESET_CYCLES};
pub use synth::{cached_resources, synth, synth_cached, Resources, SynthError};

/// Width of a stream beat in bytes (512 bits).
pub const BEAT_BYTES: usize = 64;

/// Length of the call header, the first input beat of every call.
pub const HEADER_BYTES: usize = 64;

/// Status values of `m_axis_tuser` on the last output beat (the RAC status codes).
pub mod status {
    pub const OK: u16 = 0;
    pub const BAD_REQUEST: u16 = 1;
    pub const INTERNAL: u16 = 8;
}
