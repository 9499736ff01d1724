//! Front ends: the protocols a call arrives by. Each parses and validates its wire
//! format, refuses what it can without touching a slot, and hands whole calls to the
//! core ([`crate::core::dispatch`]); none owns a queue, a slot or a device.
//!
//! | module | what |
//! | --- | --- |
//! | [`http`] | HTTP/1.1: `/v1` routes, objects, admin, and the Open Inference Protocol's HTTP binding (`http/v2.rs`) |
//! | [`rac`] | RAC v1: headers, reassembly, pipelined results, control messages |
//! | [`grpc`] | the Open Inference Protocol's `GRPCInferenceService` (tonic) |
//! | [`oip`] | the Open Inference Protocol's model, shared by HTTP and gRPC: accelerators as models, tensors to calls |
//! | `admission` | a connection's admission: the connection bound and the TLS handshake that fixes its tenant |
//! | [`admin`] | catalog and slot documents, the admin token check, reconfiguration |
//! | [`opencl`] | the remote OpenCL port's gate: who may open a session (its protocol is `ocl_remote`'s) |
//! | `stop` | a connection's wait for the node's shutdown, for the HTTP and RAC loops |
//!
//! A front end may use the core, the devices' catalog, the network layer and
//! telemetry; nothing below it uses a front end.

pub(crate) mod admin;
pub(crate) mod admission;
pub mod grpc;
pub mod http;
pub mod oip;
pub(crate) mod opencl;
pub(crate) mod rac;
pub(crate) mod stop;
