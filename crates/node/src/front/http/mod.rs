//! The HTTP/1.1 front end (after Strega): the node's own server, straight from the
//! socket to a slot and back. [`parse`] holds the pure request parsers; `scan` runs the
//! head parser incrementally as a head's bytes arrive; `route` (the `/v1` routes) and
//! `v2` (the Open Inference Protocol's) decide what a request means before its body is
//! read, in the vocabulary of `request`, once `access` has said who asks; `conn`
//! drives one connection.

mod access;
mod conn;
pub mod parse;
mod request;
mod response;
mod route;
mod scan;
mod tokens;
pub mod v2;

pub use conn::serve;
