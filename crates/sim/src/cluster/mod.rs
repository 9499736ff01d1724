//! Cluster scale: the registry's own allocator placing function instances on the
//! slots of many simulated nodes, under the virtual clock.
//!
//! Two kinds of run, each a TOML file with its own section:
//!
//! - `[cluster]` ([`ClusterSpec`], run by [`engine`]): N nodes × S slots, F functions
//!   over a set of accelerators, a diurnal load curve with hot functions, an
//!   autoscaler that asks for instances, lease reports that carry each slot's
//!   utilisation, node failures, times without a registry leader. Every placement,
//!   reconfiguration and migration decision is `netaccel_registry::alloc`'s
//!   (`Inventory::allocate`, its power-of-two variant, `Request::displaced` /
//!   `Request::followup`); this module only keeps the bindings and models what is
//!   not code (calls, devices, time).
//!   Slots are queues with service times, not the node's dispatcher: at 1,000 nodes
//!   and hundreds of millions of calls a day the per-call cost of the node's full
//!   dispatch core (reassembly, tenant queues) is what would cost the most, and a
//!   cluster run asks about placement, not about one node's dispatch (which the
//!   single-node engine answers).
//! - `[sharing]` ([`blast::SharingSpec`]): BlastFunction's sharing experiment — the
//!   registry's allocator places five functions on three devices, and the node's real
//!   dispatch core (the single-node [`crate::engine`]) serves their calls.
//!
//! Not for: one node's behaviour (the single-node engine), or deciding anything the
//! registry decides.

pub mod blast;
pub mod engine;
pub mod report;

use serde::{Deserialize, Serialize};

use crate::scenario::Service;

/// Bounds that keep a typo from asking for a billion of anything.
pub const NODES_MAX: usize = 100_000;
pub const SLOTS_PER_NODE_MAX: usize = 64;
pub const FUNCTIONS_MAX: usize = 1_000_000;
pub const ACCELERATORS_MAX: usize = 100_000;

/// A cluster run, as read from TOML.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterScenario {
    #[serde(default)]
    pub name: String,
    #[serde(default = "one")]
    pub seed: u64,
    /// Simulated time of the run (seconds).
    pub duration_s: f64,
    /// Stops arrivals after this many calls (quick runs).
    #[serde(default)]
    pub calls: Option<u64>,
    pub cluster: ClusterSpec,
}

/// The cluster, its functions, their load and the registry's knobs.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    pub nodes: usize,
    pub slots_per_node: usize,
    pub functions: usize,
    /// Distinct accelerators the functions use; function `f` uses one drawn by a
    /// Zipf law of exponent `accelerator_zipf` (0: uniform).
    pub accelerators: usize,
    #[serde(default = "one_f64")]
    pub accelerator_zipf: f64,
    /// A device's time for one call (any accelerator).
    pub service: Service,
    /// Mean offered load over the day, as a share of the cluster's capacity.
    pub load: f64,
    /// Amplitude of the daily curve: load × (1 − diurnal × cos(2π t / day_s)),
    /// lowest at t = 0 (midnight), highest at noon.
    #[serde(default)]
    pub diurnal: f64,
    #[serde(default = "day")]
    pub day_s: f64,
    /// The first `hot_functions` share of the functions gets `hot_share` of the calls.
    #[serde(default)]
    pub hot_functions: f64,
    #[serde(default)]
    pub hot_share: f64,
    /// The autoscaler's target: one instance per this much of a slot's capacity.
    #[serde(default = "half")]
    pub instance_load: f64,
    #[serde(default = "instances_max")]
    pub instances_max: usize,
    /// A slot's queue bound (calls waiting or running); beyond it, BUSY.
    #[serde(default = "queue_depth_max")]
    pub queue_depth_max: usize,
    /// Lease renewals: each slot's utilisation over the last interval reaches the
    /// registry this often.
    #[serde(default = "ten")]
    pub report_interval_s: f64,
    /// The autoscaler looks at each function's calls this often.
    #[serde(default = "sixty")]
    pub scale_interval_s: f64,
    /// The registry's rebalancer: its period, the instances it moves or retries per
    /// period, and how long it leaves a slot alone after moving an instance off it
    /// (the registry's defaults).
    #[serde(default = "two")]
    pub rebalance_interval_s: f64,
    #[serde(default = "sixteen")]
    pub rebalance_moves_max: usize,
    #[serde(default = "thirty")]
    pub rebalance_cooldown_s: f64,
    /// A device's time to load an accelerator, once its queue is drained.
    #[serde(default = "two")]
    pub reconfig_s: f64,
    /// The registry's utilisation ceiling (`Policy::ceiling`).
    #[serde(default = "ceiling")]
    pub ceiling: f64,
    /// The placement policies compared, one run each.
    #[serde(default = "policies")]
    pub policies: Vec<PolicyName>,
    #[serde(default)]
    pub failures: Vec<NodeFailure>,
    /// The registry's node lease: a node that stops renewing is declared lost this
    /// long after its last renewal, and a new leader gives every node this much
    /// grace when it takes over (0: a lost node is noticed at once).
    #[serde(default)]
    pub lease_s: f64,
    /// Times without a registry leader (the election's gap).
    #[serde(default)]
    pub leader_losses: Vec<LeaderLoss>,
}

/// A placement policy of the registry's `alloc` module.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PolicyName {
    /// The registry's default: the least utilised holder (`Order::Utilization`).
    Utilization,
    /// Fewest instances bound first (`Order::Occupation`).
    Occupation,
    /// Two holders drawn at random, the less utilised bound
    /// (`Inventory::allocate_two_choices`).
    TwoChoices,
}

impl PolicyName {
    pub fn name(self) -> &'static str {
        match self {
            PolicyName::Utilization => "utilization",
            PolicyName::Occupation => "occupation",
            PolicyName::TwoChoices => "two_choices",
        }
    }
}

/// `count` consecutive nodes from `first` (a rack) stop at `at_s` and come back
/// `for_s` later (0: never).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFailure {
    pub at_s: f64,
    pub first: usize,
    #[serde(default = "one_usize")]
    pub count: usize,
    #[serde(default)]
    pub for_s: f64,
}

/// The registry's leader dies at `at_s`; a follower leads `for_s` later (the dead
/// leader's election lease running out, then the election). Meanwhile calls flow to
/// the slots they are bound to, and everything that writes waits: lease reports,
/// lost-node expiry, autoscaling, rebalancing, placement, a reconfiguration's
/// completion. The new leader gives every node a fresh lease (`lease_s`), as
/// `Registry::become_leader` does, then the deferred work runs.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LeaderLoss {
    pub at_s: f64,
    pub for_s: f64,
}

fn one() -> u64 {
    1
}
fn one_usize() -> usize {
    1
}
fn one_f64() -> f64 {
    1.0
}
fn half() -> f64 {
    0.5
}
fn day() -> f64 {
    86_400.0
}
fn instances_max() -> usize {
    64
}
fn queue_depth_max() -> usize {
    64
}
fn ten() -> f64 {
    10.0
}
fn sixteen() -> usize {
    16
}
fn thirty() -> f64 {
    30.0
}
fn sixty() -> f64 {
    60.0
}
fn two() -> f64 {
    2.0
}
fn ceiling() -> f64 {
    0.9
}
fn policies() -> Vec<PolicyName> {
    vec![PolicyName::Utilization]
}

/// Whether a TOML text is a cluster run (`[cluster]`) or a sharing experiment
/// (`[sharing]`) rather than a single-node scenario.
pub fn kind_of(text: &str) -> Option<&'static str> {
    let value: toml::Value = toml::from_str(text).ok()?;
    if value.get("cluster").is_some() {
        Some("cluster")
    } else if value.get("sharing").is_some() {
        Some("sharing")
    } else {
        None
    }
}

impl ClusterScenario {
    pub fn parse(text: &str) -> Result<ClusterScenario, String> {
        let sc: ClusterScenario = toml::from_str(text).map_err(|e| e.to_string())?;
        sc.validate()?;
        Ok(sc)
    }

    /// The checks serde cannot make.
    pub fn validate(&self) -> Result<(), String> {
        let c = &self.cluster;
        let within = |v: usize, max: usize| v >= 1 && v <= max;
        if !within(c.nodes, NODES_MAX)
            || !within(c.slots_per_node, SLOTS_PER_NODE_MAX)
            || !within(c.functions, FUNCTIONS_MAX)
            || !within(c.accelerators, ACCELERATORS_MAX)
        {
            return Err(format!(
                "cluster: 1 to {NODES_MAX} nodes, {SLOTS_PER_NODE_MAX} slots per node, \
                 {FUNCTIONS_MAX} functions, {ACCELERATORS_MAX} accelerators"
            ));
        }
        let positive = [
            self.duration_s,
            c.day_s,
            c.instance_load,
            c.report_interval_s,
            c.scale_interval_s,
            c.rebalance_interval_s,
        ];
        if !positive.iter().all(|v| *v > 0.0) {
            return Err("duration_s, day_s, instance_load and the intervals are positive".into());
        }
        let share = |v: f64| (0.0..=1.0).contains(&v);
        let valid = c.load > 0.0
            && c.load <= 4.0
            && share(c.diurnal)
            && share(c.hot_functions)
            && share(c.hot_share)
            && share(c.ceiling)
            && c.reconfig_s >= 0.0
            && c.accelerator_zipf >= 0.0;
        if !valid {
            return Err(
                "load in (0, 4]; diurnal, hot_functions, hot_share, ceiling in [0, 1]; \
                 reconfig_s and accelerator_zipf not negative"
                    .into(),
            );
        }
        if c.instances_max == 0 || c.queue_depth_max == 0 || c.policies.is_empty() {
            return Err("instances_max, queue_depth_max and policies: at least one".into());
        }
        if !matches!(
            c.service,
            Service::Constant { .. } | Service::Exponential { .. }
        ) || service_mean_us(&c.service) <= 0.0
        {
            return Err("cluster service: constant or exponential, positive".into());
        }
        for f in &c.failures {
            if f.count == 0 || f.first + f.count > c.nodes || !(f.at_s >= 0.0 && f.for_s >= 0.0) {
                return Err(format!(
                    "failure at {} s: nodes {}..{} are not in the cluster",
                    f.at_s,
                    f.first,
                    f.first + f.count
                ));
            }
        }
        for l in &c.leader_losses {
            if !(l.at_s >= 0.0 && l.for_s > 0.0) {
                return Err(format!(
                    "leader loss at {} s: at_s not negative, for_s positive",
                    l.at_s
                ));
            }
        }
        if c.lease_s.is_nan() || c.lease_s < 0.0 {
            return Err("lease_s not negative".into());
        }
        Ok(())
    }
}

/// The mean of a cluster's service time (constant or exponential), µs.
pub fn service_mean_us(service: &Service) -> f64 {
    match *service {
        Service::Constant { us } => us,
        Service::Exponential { mean_us } => mean_us,
        Service::Lognormal { median_us, sigma } => median_us * (sigma * sigma / 2.0).exp(),
        Service::Linear { base_us, .. } => base_us,
    }
}

/// Runs a `[cluster]` file once per policy, each in a thread of its own (or a
/// `[sharing]` file), writes its
/// outputs in `out`, and prints a line per policy (wall time on stderr, so stdout
/// and the files stay a function of the seed).
pub fn run_file(
    text: &str,
    stem: &str,
    out: &std::path::Path,
    seed: Option<u64>,
    calls: Option<u64>,
) -> Result<Vec<std::path::PathBuf>, String> {
    let wall = std::time::Instant::now();
    if kind_of(text) == Some("sharing") {
        let mut sc = blast::SharingScenario::parse(text)?;
        if sc.name.is_empty() {
            sc.name = stem.to_string();
        }
        sc.seed = seed.unwrap_or(sc.seed);
        let (rows, written) = blast::run(&sc, out, calls)?;
        for r in rows {
            println!(
                "{} {}: sent {} processed {} dropped {:.2} % p50 {:.2} ms p99 {:.2} ms utilisation {:.2} ({})",
                r.level, r.deployment, r.sent, r.processed, r.dropped_pct, r.p50_ms, r.p99_ms, r.utilisation, r.devices.join(", ")
            );
        }
        eprintln!("wall {:.3} s", wall.elapsed().as_secs_f64());
        return Ok(written);
    }
    let mut sc = ClusterScenario::parse(text)?;
    if sc.name.is_empty() {
        sc.name = stem.to_string();
    }
    sc.seed = seed.unwrap_or(sc.seed);
    if calls.is_some() {
        sc.calls = calls;
    }
    // One thread per policy: the runs share nothing but the scenario, and each is
    // the same whatever runs beside it.
    let runs: Vec<(report::PolicyResult, f64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = sc
            .cluster
            .policies
            .iter()
            .map(|&policy| {
                let sc = &sc;
                scope.spawn(move || {
                    let started = std::time::Instant::now();
                    let r = engine::Engine::new(sc, policy).run();
                    (r, started.elapsed().as_secs_f64())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a policy's run"))
            .collect()
    });
    let mut results = Vec::new();
    for (r, wall_s) in runs {
        println!("{}", report::line(&r));
        eprintln!(
            "{}: wall {:.1} s, {:.0} simulated s per wall s, {:.0} calls per wall s",
            r.policy,
            wall_s,
            r.simulated_s / wall_s,
            r.calls as f64 / wall_s
        );
        results.push(r);
    }
    eprintln!("wall {:.1} s in all", wall.elapsed().as_secs_f64());
    report::write(out, &sc.name, sc.seed, &results)
}
