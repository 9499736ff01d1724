//! `netaccel-sim`: the node's own dispatch core, driven by a deterministic
//! discrete-event engine under a virtual clock.
//!
//! A scenario ([`scenario::Scenario`], a TOML file) describes what is not code: the
//! clients (open-loop Poisson, closed loop, a trace), what they call and how big, the
//! network's latency and bandwidth, each accelerator's device time, failures. The
//! engine ([`engine`]) builds each node from the node crate's
//! [`netaccel_node::core::dispatch::Dispatcher`] (without worker threads), its slots
//! with their tenant-fair queues, admission bounds and deadlines, and its
//! [`netaccel_node::core::memory::ReassemblyPool`], and steps them on a
//! [`netaccel_node::core::clock::VirtualClock`]: every decision a node makes in a run
//! is the node's code making it. A run gives one record per call, a summary
//! (percentiles, queueing against service, utilisation, refusals, Little's law), and
//! a chart ([`report`]); an experiment ([`experiment`]) sweeps a parameter over runs.
//!
//! The same scenario and seed give byte-identical files.
//!
//! At cluster scale ([`cluster`]) the registry's own allocator places function
//! instances on many simulated nodes' slots, and BlastFunction's sharing experiment
//! runs the allocator's placement on the node's dispatcher.
//!
//! What it is not: a model of the node's dispatcher (there is none here to drift
//! from the real one), nor a network simulator (a link is a latency, a bandwidth and
//! a jitter).
//!
//! ```
//! let scenario = netaccel_sim::scenario::Scenario::parse(r#"
//!     calls = 1000
//!     [node]
//!     slots = [{ accelerator = "topk" }]
//!     [[accelerators]]
//!     name = "topk"
//!     service = { kind = "constant", us = 5.0 }
//!     [[clients]]
//!     kind = "poisson"
//!     rate_per_s = 100000.0
//!     mix = [{ accelerator = "topk" }]
//! "#).unwrap();
//! let (_, summary) = netaccel_sim::simulate(&scenario, std::path::Path::new(".")).unwrap();
//! assert_eq!(summary.calls, 1000);
//! assert!(summary.utilisation_mean > 0.4 && summary.utilisation_mean < 0.6);
//! ```

pub mod clients;
pub mod cluster;
pub mod engine;
pub mod experiment;
pub mod model;
pub mod record;
pub mod report;
pub mod scenario;
pub mod svg;

use std::path::Path;

/// Runs `scenario` (traces read relative to `base`) and sums it up.
pub fn simulate(
    scenario: &scenario::Scenario,
    base: &Path,
) -> Result<(engine::Run, record::Summary), String> {
    let run = engine::Engine::new(scenario, base)?.run();
    let summary = record::Summary::of(&scenario.name, scenario.seed, &run);
    Ok((run, summary))
}
