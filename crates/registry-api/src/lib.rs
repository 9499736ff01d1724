//! The registry's HTTP API contract (`spec/registry-api.md`), declared once.
//!
//! Every JSON body the registry serves or accepts is a type here: a node's
//! registration and the lease it is granted ([`nodes`]), the node list clients read,
//! functions, instances and their bindings ([`functions`]), reconfiguration requests
//! and verdicts ([`reconfig`]) and the error body ([`error`]). The registry serialises
//! with these types, and the node agent, the Rust client and CLI and the OpenCL ICD
//! parse with them, so a field added here is seen by every Rust producer and consumer.
//! `spec/registry/` holds one golden JSON file per body; the tests of this crate and
//! of the Python client round-trip every one of them.
//!
//! Besides the bodies: the id widths ([`SlotId`], [`Generation`]), the rules for names
//! ([`check_name`]), a constant-time comparison of secrets ([`secret_eq`]) and the one
//! loop that follows the registry's leader across replicas ([`leader`]), which is
//! transport-agnostic: each caller brings its own blocking HTTP request.
//!
//! Not here: HTTP itself (no client, no server, no runtime), the registry's persisted
//! records and its snapshot (only registry replicas read them, see the registry's
//! `model`), and allocation.

pub mod error;
pub mod functions;
#[doc(hidden)]
pub mod fuzzing;
pub mod leader;
pub mod names;
pub mod nodes;
pub mod reconfig;

pub use error::{ErrorBody, Health};
pub use functions::{
    Binding, FunctionSpec, FunctionView, InstanceSpec, NodeTenants, Query, UnreachableReport,
};
pub use leader::{origin_of, Exhausted, Patience, Replicas, Try};
pub use names::{check_name, check_text, secret_eq, NAME_BYTES_MAX, TEXT_BYTES_MAX};
pub use nodes::{
    DeviceRegistration, DeviceView, LeaseGrant, NodeRegistration, NodeState, NodeView,
    SlotRegistration, SlotView, BACKENDS,
};
pub use reconfig::{ReconfigurationRequest, Verdict};

/// A slot's id, unique within its node. The node numbers its slots with a `u16` (the
/// width its dispatcher, metrics and admin routes use), so every body carries that
/// width: a registration or request with a larger id is refused when it is parsed.
pub type SlotId = u16;

/// An instance's generation: bumped on every change of its binding, so a client can
/// wait for the next one (`after=G` in the long poll).
pub type Generation = u64;
