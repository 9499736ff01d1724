//! Remote OpenCL: run unmodified OpenCL programs on a device owned by a netaccel node.
//!
//! This crate holds the two halves that do not touch the client process:
//!
//! - [`proto`]: the wire format between the ICD (`libnetaccel_opencl.so`, crate
//!   `ocl-icd`) and the node. Pure encode/decode over byte slices, no I/O.
//! - [`service`]: the node side, the *device manager* of BlastFunction. It loads the real
//!   OpenCL runtime at run time ([`ffi`]), keeps a resource pool per client, and runs each
//!   client's commands as atomic tasks from one queue per device, which shares the
//!   device's time fairly between its users (tenants, sessions, the node's own slots).
//!
//! - [`shm`]: shared memory regions for the same-host buffer path.
//! - [`poll`]: the bounded polling both ends do before they sleep on their socket.
//! - [`stream`]: the connection, over TCP or, on the node's host, a Unix socket.
//! - [`fuzzing`]: the bodies of the fuzz targets and the corpus replay test.
//! - [`lines`]: raw output of the runtime (a process's or the node's stderr) cut into
//!   bounded, rate-limited lines for the log.
//!
//! [`cl`] has the OpenCL constants both sides interpret. It is not an OpenCL binding for
//! applications: programs use the standard OpenCL API through the ICD loader. The design
//! (architecture, protocol, handle namespaces, task model) is in `docs/opencl.md`.

pub mod cl;
pub mod ffi;
pub mod fuzzing;
pub mod lines;
pub mod poll;
pub mod proto;
pub mod service;
pub mod shm;
pub mod stream;

/// `CL_PLATFORM_ICD_SUFFIX_KHR` of the remote platform; the service never re-exports a
/// platform with this suffix, so a node cannot serve itself in a loop.
pub const ICD_SUFFIX: &str = "netaccel";
/// Remote platforms are named `"netaccel: <name on the node>"`.
pub const PLATFORM_NAME_PREFIX: &str = "netaccel: ";
/// Environment variable listing the nodes the ICD connects to (`host:port,host:port`).
pub const NODES_ENV: &str = "NETACCEL_OPENCL_NODES";
/// The tenant the ICD names in `Hello` (the variable the `netaccel` CLI reads too).
pub const TENANT_ENV: &str = "NETACCEL_TENANT";
/// The tenant's token the ICD sends in `Hello` (the CLI's variable too).
pub const TENANT_TOKEN_ENV: &str = "NETACCEL_TENANT_TOKEN";
