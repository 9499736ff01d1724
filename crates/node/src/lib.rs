//! `netaccel-node`: a daemon that owns a device, loads accelerators into its slots and
//! serves them directly on the network.
//!
//! The data path of one call: a front end ([`http`], [`rac`]) parses and validates the request
//! and refuses what it can without touching a slot; the body is reserved against the
//! node's body-memory budget ([`memory`]) and read whole; the [`dispatch`]er picks a
//! slot hosting the accelerator (round robin or join-shortest-queue) and admits the
//! call to that slot's bounded, tenant-fair queue ([`slot`]); the slot runs calls one
//! at a time to completion; the answer goes back on the caller's connection.
//!
//! What the node does not do: accelerator arithmetic (crate `accel`), wire formats of
//! other protocols (crate `rac-proto`), cluster placement (the registry: the node only
//! reports to it and asks it before a reconfiguration, see [`registry`]).
//!
//! # Where each concept lives
//!
//! Each concept has one file; when another file needs it, it calls that file.
//!
//! | concept | file | what is there |
//! | --- | --- | --- |
//! | configuration | [`config`] | every bound with its default, TOML loading, validation |
//! | node state | [`node`] | [`node::Node`], what every connection shares; `BUSY` counting |
//! | listeners, network threads, drain | [`server`] | `SO_REUSEPORT` listeners, one runtime per thread, the connection limit, SIGTERM/SIGINT drain |
//! | HTTP/1.1 front end | [`http`] | `parse.rs` pure parsers, `route.rs` what a request means, `conn.rs` one connection, `response.rs` response heads |
//! | gRPC front end | [`grpc`] | the Open Inference Protocol's `GRPCInferenceService` (tonic): `tensor.rs` messages to calls, `service.rs` the RPCs, connections and bounds in `mod.rs` |
//! | RAC v1 front end | [`rac`] | one connection: headers, reassembly, pipelined results, control messages |
//! | socket I/O and its timeouts | `netio.rs` | reads and writes with a deadline, `IoTimer`, lingering close |
//! | TLS and mTLS | [`tls`] | `[tls]` configuration, the reloadable acceptor (SIGHUP), session resumption, client certificate → tenant, the TLS transport of the front ends |
//! | tenant | [`tenant`] | identities, the `hello` token check, per-tenant bounds and gates, constant-time token comparison |
//! | admin operations | [`admin`] | catalog and slot documents, the admin token check, reconfiguration |
//! | reconfiguration | [`admin`], [`slot`] | the operation ([`admin::reconfigure`]); the drain and swap in a slot ([`slot::Slot::reconfigure`]) |
//! | a call's deadline | [`deadline`] | from `X-Netaccel-Deadline-Us` / RAC `deadline_us` to the instant a call must start by |
//! | dispatch | [`dispatch`] | picking a slot (round robin, join-shortest-queue), admission, refusals |
//! | slots | [`slot`] | a slot's queue (tenant-fair, `fair_queue.rs`), inline runs, its worker thread, a call's execution |
//! | hung kernels | [`watchdog`] | the thread that looks for calls past `kernel_timeout_ms`; failing the slot is [`slot::Slot::check_hung`]'s |
//! | devices and backends | [`device`] | `[[devices]]` started, the catalog with user accelerators (`device/library.rs`), what each backend hosts and how it loads it (`cpu.rs`, `opencl/`) |
//! | request memory | [`memory`] | the HTTP body budget, the RAC reassembly pool |
//! | object store | [`objects`] | named objects served without a slot |
//! | metrics | [`metrics`] | the Prometheus registry and the handles the hot path bumps |
//! | logging | [`logging`] | log format and level, rate-limited refusal log, panics as log lines |
//! | the registry | [`registry`] | the node's name and advertised addresses, registration and lease renewal, deregistration on drain, asking before a reconfiguration ([`registry::Registry::validate`]; when to ask is [`admin::reconfigure`]'s) |
//! | remote OpenCL | crate `ocl-remote` | the service; the node starts it ([`node::Node::new`]) and drains it ([`server`]) |

pub mod config;
pub mod core;
pub mod device;
pub mod front;
pub mod net;
pub mod node;
pub mod registry;
pub mod server;
pub mod telemetry;

pub use config::Config;
pub use server::{start, Running};
