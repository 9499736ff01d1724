//! netaccel-bench: latency and throughput characterisation of a netaccel node, and of
//! the baselines it is compared with (any HTTP/1.1 server, a TCP echo server, the
//! kernel called in-process).
//!
//! It measures the way Cooke & Fahmy, Strega and OffRAC do: closed-loop round trips
//! over one connection, closed loop with C connections × P calls in flight, open loop
//! at a fixed rate with latency taken from each call's intended send time (no
//! coordinated omission), and sweeps over payload size, concurrency or rate. Latencies
//! go into HDR histograms ([`hist`]); reports give p50/p90/p99/p99.9/max, calls/s,
//! payload MB/s, errors by status and, for netaccel targets, the node-side split of each
//! call into network + protocol, queue and execution ([`report`]); figures are SVG
//! ([`plot`]).
//!
//! The clients are lean on purpose, so that what the tool adds per call is small and
//! the same for every target: one buffer per connection, request bytes built once,
//! answers parsed in place and their bodies skipped ([`wire`]); load generation is in
//! [`load`]; two targets interleaved call by call, for the gap between a server and
//! its floor on a drifting machine, in [`pair`]. Not here: correctness checks of outputs (the node's tests do that),
//! TLS, HTTP/2.

pub mod hist;
pub mod load;
pub mod pair;
pub mod plot;
pub mod report;
pub mod target;
pub mod wire;
