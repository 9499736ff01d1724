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
//! other protocols (crate `rac-proto`), cluster placement (the registry).

pub mod admin;
pub mod config;
pub mod deadline;
pub mod dispatch;
pub mod http;
pub mod logging;
pub mod memory;
pub mod metrics;
mod netio;
pub mod node;
pub mod objects;
pub mod rac;
pub mod server;
pub mod slot;
pub mod tenant;

pub use config::Config;
pub use server::{start, Running};
