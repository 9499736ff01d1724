//! `netaccel-node`: a daemon that owns a device, loads accelerators into its slots and
//! serves them directly on the network.
//!
//! The data path of one call: a front end ([`front::http`], [`front::rac`],
//! [`front::grpc`]) parses and validates the request and refuses what it can without
//! touching a slot; the body is reserved against the node's body-memory budget
//! ([`core::memory`]) and read whole; the dispatcher ([`core::dispatch`]) picks a slot
//! hosting the accelerator (round robin or join-shortest-queue) and admits the call to
//! that slot's bounded, tenant-fair queue ([`core::slot`]); the slot runs calls one at a
//! time to completion on its device ([`device`]); the answer goes back on the caller's
//! connection.
//!
//! What the node does not do: accelerator arithmetic (crate `accel`), wire formats of
//! other protocols (crate `rac-proto`), cluster placement (the registry: the node only
//! reports to it and asks it before a reconfiguration, see [`registry`]).
//!
//! # Layers
//!
//! The folders are the layers, top to bottom; a module imports only its own layer and
//! those below it, never in a circle (`tests/layers.rs` fails otherwise):
//!
//! | layer | where | what is there |
//! | --- | --- | --- |
//! | wiring | [`server`] | `SO_REUSEPORT` listeners, one runtime per network thread, the connection limit, SIGTERM/SIGINT drain, the registry lease |
//! | front ends | [`front`] | HTTP/1.1 ([`front::http`]), RAC v1 ([`front::rac`]), gRPC ([`front::grpc`]), the Open Inference Protocol's model shared by HTTP and gRPC ([`front::oip`]), admin operations and reconfiguration ([`front::admin`]), a connection's admission (`front::admission`) |
//! | node state | [`node`] | [`node::Node`], what every connection shares: the dispatcher, devices, tenants, memory, objects, counters |
//! | configuration | [`config`] | node.toml: every bound with its default, loading, validation; each subsystem's section handed to it |
//! | cluster agent | [`registry`] | the node's name and advertised addresses, registration and lease renewal, asking before a reconfiguration |
//! | core | [`core`] | calls, deadlines, tenants, fair queues, slots, dispatch, the watchdog, request memory, objects, the clock: no sockets, no whole configuration |
//! | devices | [`device`] | `[[devices]]` started, the catalog with user accelerators, what each backend (cpu, opencl, rtl, onnx models) hosts and how it loads it; `[opencl]` |
//! | net | [`net`] | socket I/O with deadlines, pooled buffers, TLS, the node's own epoll loop, io_uring |
//! | telemetry | [`telemetry`] | the Prometheus registry, logging, the protocol label |
//!
//! Remote OpenCL is crate `ocl-remote`: the node starts its service ([`node::Node::new`])
//! and drains it ([`server`]).

pub mod config;
pub mod core;
pub mod device;
pub mod front;
pub mod net;
pub(crate) mod node;
pub(crate) mod registry;
pub mod server;
pub mod telemetry;

pub use config::Config;
pub use server::{start, Running};
