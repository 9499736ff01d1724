//! A scenario: what the simulator runs, as read from a TOML file.
//!
//! Only what is not code is described here — clients, the network, the devices'
//! service times, failures — and the bounds the node's own configuration would give
//! its dispatch core (`[node]`, with the node's defaults). Unknown keys are refused, as
//! the node refuses them in node.toml. `docs/simulation.md` shows every key.
//!
//! Not for: running anything (`engine`), or deciding anything a node decides.

use serde::{Deserialize, Serialize};

use netaccel_node::core::dispatch::BalancePolicy;
use netaccel_node::core::memory::PoolPolicy;

/// The most accelerators, slots per node, nodes and clients a scenario may name: the
/// engine's tables are indexed by small integers and a bound keeps a typo from asking
/// for a billion of them.
pub const ACCELERATORS_MAX: usize = 256;
pub const SLOTS_PER_NODE_MAX: usize = 1024;
pub const NODES_MAX: usize = 4096;
pub const CLIENTS_MAX: usize = 1_000_000;
/// The most network threads a node may have (the node's own bound is the host's).
pub const IO_THREADS_MAX: usize = 1024;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// A name for the outputs; defaults to the file's stem.
    #[serde(default)]
    pub name: String,
    /// The generator's seed: the same seed gives byte-identical outputs.
    #[serde(default = "one")]
    pub seed: u64,
    /// Clients stop issuing calls at this simulated time (seconds)...
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// ...or once this many calls were issued, whichever comes first.
    #[serde(default)]
    pub calls: Option<u64>,
    #[serde(default)]
    pub node: NodeSpec,
    #[serde(default)]
    pub network: Network,
    pub accelerators: Vec<AcceleratorSpec>,
    pub clients: Vec<ClientSpec>,
    #[serde(default)]
    pub failures: Vec<Failure>,
    #[serde(default)]
    pub reconfigurations: Vec<Reconfiguration>,
}

/// A slot told to load another accelerator (as the admin API or the registry would).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Reconfiguration {
    pub at_s: f64,
    /// The node; every node when absent.
    #[serde(default)]
    pub node: Option<usize>,
    pub slot: usize,
    pub accelerator: String,
}

/// The nodes (all alike) and the bounds of their dispatch core.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSpec {
    pub count: usize,
    pub policy: BalancePolicy,
    pub queue_depth_max: usize,
    pub tenant_share_max: usize,
    pub queue_wait_factor: u32,
    pub queue_wait_floor_us: u64,
    pub reassembly_buffers: usize,
    pub reassembly_buffer_bytes: usize,
    pub reassembly_policy: PoolPolicy,
    /// One pool shared by every accelerator (the node's), or one per accelerator
    /// holding `reassembly_buffers / accelerators` buffers each (OffRAC's §3.3).
    pub reassembly_layout: PoolLayout,
    /// A call in fragments is whole before it is dispatched (the node), or each is
    /// dispatched at its first fragment and holds its slot until its last
    /// (OffRAC's "immediate" ingestion, §3.2; the node has no such mode).
    pub ingestion: Ingestion,
    /// The slots of each node, in order.
    pub slots: Vec<SlotSpec>,
    /// A device's time to load an accelerator into a slot, once the slot is drained.
    pub reconfig_time_us: f64,
    /// The node's `kernel_timeout_ms`: a call running longer on its slot fails the
    /// slot, as the node's watchdog finds it (0: no watchdog).
    pub kernel_timeout_ms: u64,
    /// The node's network threads (`io_threads`); client i's calls are read by
    /// thread i mod `io_threads`. They matter when `net_cpu_us` is not zero or an
    /// accelerator is `inline`.
    pub io_threads: usize,
    /// A network thread's CPU time per call it reads (parse, submit, answer): a call
    /// waits for its thread while the thread reads the calls before it or runs one
    /// inline. 0 (and no `inline` accelerator): network threads are not modelled.
    pub net_cpu_us: f64,
    /// The node's `inline_work_max`: a call of an `inline` accelerator with at most
    /// this many bytes runs on its network thread when its slot is idle.
    pub inline_work_max: u64,
}

impl Default for NodeSpec {
    /// The node's own defaults (node.toml), one node, no slots.
    fn default() -> NodeSpec {
        NodeSpec {
            count: 1,
            policy: BalancePolicy::default(),
            queue_depth_max: 64,
            tenant_share_max: 48,
            queue_wait_factor: 8,
            queue_wait_floor_us: 250,
            reassembly_buffers: 16,
            reassembly_buffer_bytes: 1 << 20,
            reassembly_policy: PoolPolicy::default(),
            reassembly_layout: PoolLayout::Shared,
            ingestion: Ingestion::Reassembled,
            slots: Vec::new(),
            reconfig_time_us: 0.0,
            kernel_timeout_ms: 60_000,
            io_threads: 1,
            net_cpu_us: 0.0,
            inline_work_max: 64 * 1024,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PoolLayout {
    #[default]
    Shared,
    PerAccelerator,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Ingestion {
    #[default]
    Reassembled,
    Immediate,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SlotSpec {
    pub accelerator: String,
    #[serde(default = "one_usize")]
    pub count: usize,
}

/// Every link alike: one-way latency, and the time a byte takes at this bandwidth.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Network {
    pub latency_us: f64,
    /// Gbit/s; 0: infinite.
    pub bandwidth_gbps: f64,
    /// A delay each answer takes on its way back beyond `latency_us`, drawn per call:
    /// the hosts' scheduling and network stacks, whose spread a measurement shows
    /// (`bench/sim/validate.sh` fits it to a real node's). None: every call alike.
    pub jitter: Option<Service>,
}

impl Default for Network {
    fn default() -> Network {
        Network {
            latency_us: 0.0,
            bandwidth_gbps: 0.0,
            jitter: None,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AcceleratorSpec {
    pub name: String,
    pub service: Service,
    /// A CPU kernel the node may run on the network thread that read the call (the
    /// node's cheap calls): its service time is then that thread's.
    #[serde(default)]
    pub inline: bool,
}

/// A device's time for one call of `bytes`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Service {
    Constant {
        us: f64,
    },
    Exponential {
        mean_us: f64,
    },
    /// exp(N(ln median, sigma²)).
    Lognormal {
        median_us: f64,
        sigma: f64,
    },
    /// base + bytes × per_byte.
    Linear {
        base_us: f64,
        ns_per_byte: f64,
    },
}

// Not `deny_unknown_fields`: serde cannot combine it with the flattened kind, so
// `check_client_keys` refuses unknown keys instead.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ClientSpec {
    #[serde(flatten)]
    pub kind: ClientKind,
    /// Identical clients of this description.
    #[serde(default = "one_usize")]
    pub count: usize,
    /// The tenant the clients' calls belong to; each client its own if absent.
    #[serde(default)]
    pub tenant: Option<String>,
    /// What they call, drawn per call by weight (a trace names its own).
    #[serde(default)]
    pub mix: Vec<MixEntry>,
    /// The deadline each call carries, µs from being whole at the node; 0: none.
    #[serde(default)]
    pub deadline_us: u32,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ClientKind {
    /// Poisson arrivals at this rate (calls per simulated second, per client).
    Poisson { rate_per_s: f64 },
    /// Arrivals `k` exponential phases apart (Erlang-k gaps, mean 1/rate): smoother
    /// than Poisson, c² = 1/k.
    Erlang { rate_per_s: f64, k: u32 },
    /// `outstanding` calls at a time; the next one leaves `think_us` after an answer.
    Closed {
        #[serde(default = "one_usize")]
        outstanding: usize,
        #[serde(default)]
        think_us: f64,
    },
    /// A CSV file of `time_us,accelerator,bytes` lines (relative to the scenario's
    /// file), replayed once.
    Trace { file: String },
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MixEntry {
    pub accelerator: String,
    #[serde(default = "one_f64")]
    pub weight: f64,
    #[serde(default)]
    pub bytes: u32,
    /// How many pieces the payload arrives in; more than one uses the reassembly pool.
    #[serde(default = "one_u32")]
    pub fragments: u32,
    /// Time between the arrivals of two pieces at the node, beyond the bytes' time.
    #[serde(default)]
    pub fragment_gap_us: f64,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Failure {
    /// The node stops answering at `at_s`: what it holds is lost, and clients send
    /// to the other nodes from then on.
    NodeLoss { node: usize, at_s: f64 },
    /// The slot's device stops finishing calls at `at_s`.
    SlotHang { node: usize, slot: usize, at_s: f64 },
}

/// The keys every `[[clients]]` table may have, whatever its kind.
const CLIENT_KEYS: [&str; 5] = ["kind", "count", "tenant", "mix", "deadline_us"];

/// The keys of each client kind (`ClientKind`'s fields), beside [`CLIENT_KEYS`].
fn client_kind_keys(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "poisson" => &["rate_per_s"],
        "erlang" => &["rate_per_s", "k"],
        "closed" => &["outstanding", "think_us"],
        "trace" => &["file"],
        _ => return None,
    })
}

/// Refuses a key no `[[clients]]` table of its kind takes (a misspelt `rate_per_sec`
/// would otherwise be dropped without a word), naming the client and what it takes.
fn check_client_keys(scenario: &toml::Value) -> Result<(), String> {
    let Some(clients) = scenario.get("clients").and_then(toml::Value::as_array) else {
        return Ok(()); // serde says what is wrong with a missing or odd `clients`
    };
    for (i, client) in clients.iter().enumerate() {
        let Some(table) = client.as_table() else {
            continue;
        };
        let kind = table.get("kind").and_then(toml::Value::as_str);
        let Some(own) = kind.and_then(client_kind_keys) else {
            continue; // serde names a missing or unknown kind
        };
        if let Some(key) = table
            .keys()
            .find(|k| !CLIENT_KEYS.contains(&k.as_str()) && !own.contains(&k.as_str()))
        {
            return Err(format!(
                "[[clients]] {}: unknown key `{key}` (a {} client takes {} and {})",
                i + 1,
                kind.unwrap_or_default(),
                own.join(", "),
                CLIENT_KEYS[1..].join(", ")
            ));
        }
    }
    Ok(())
}

fn n_count(sc: &Scenario) -> usize {
    sc.node.count
}

fn one() -> u64 {
    1
}
fn one_usize() -> usize {
    1
}
fn one_u32() -> u32 {
    1
}
fn one_f64() -> f64 {
    1.0
}

impl Scenario {
    /// Reads a scenario from TOML text.
    pub fn parse(text: &str) -> Result<Scenario, String> {
        let value: toml::Value = toml::from_str(text).map_err(|e| e.to_string())?;
        Scenario::from_value(value)
    }

    /// Reads a scenario from a TOML value (a sweep's edited copy).
    pub fn from_value(value: toml::Value) -> Result<Scenario, String> {
        check_client_keys(&value)?;
        let scenario: Scenario = value
            .try_into()
            .map_err(|e: toml::de::Error| e.to_string())?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// The checks serde cannot make: bounds, names that exist, a way to stop.
    pub fn validate(&self) -> Result<(), String> {
        let n = &self.node;
        if self.duration_s.is_none() && self.calls.is_none() {
            return Err("give duration_s or calls: when clients stop".into());
        }
        if self.accelerators.is_empty() || self.accelerators.len() > ACCELERATORS_MAX {
            return Err(format!("1 to {ACCELERATORS_MAX} [[accelerators]]"));
        }
        let slots: usize = n.slots.iter().map(|s| s.count).sum();
        if slots == 0 || slots > SLOTS_PER_NODE_MAX {
            return Err(format!("1 to {SLOTS_PER_NODE_MAX} slots per node"));
        }
        if n.count == 0 || n.count > NODES_MAX {
            return Err(format!("node.count: 1 to {NODES_MAX}"));
        }
        let clients: usize = self.clients.iter().map(|c| c.count).sum();
        if clients == 0 || clients > CLIENTS_MAX {
            return Err(format!("1 to {CLIENTS_MAX} clients"));
        }
        if n.queue_depth_max == 0 || n.tenant_share_max == 0 {
            return Err("queue_depth_max and tenant_share_max are at least 1".into());
        }
        if n.reassembly_buffers == 0 || n.reassembly_buffer_bytes == 0 {
            return Err("the reassembly pool has at least one buffer of one byte".into());
        }
        if n.reassembly_layout == PoolLayout::PerAccelerator
            && n.reassembly_buffers < self.accelerators.len()
        {
            return Err("per_accelerator pools need a buffer per accelerator at least".into());
        }
        let known = |name: &str| self.accelerators.iter().any(|a| a.name == name);
        for s in &n.slots {
            if !known(&s.accelerator) {
                return Err(format!(
                    "slot accelerator `{}` is not in [[accelerators]]",
                    s.accelerator
                ));
            }
        }
        self.validate_clients()?;
        let times = self
            .accelerators
            .iter()
            .map(|a| (a.name.as_str(), &a.service));
        for (name, service) in times.chain(self.network.jitter.iter().map(|j| ("jitter", j))) {
            let ok = match *service {
                Service::Constant { us } => us >= 0.0,
                Service::Exponential { mean_us } => mean_us > 0.0,
                Service::Lognormal { median_us, sigma } => median_us > 0.0 && sigma >= 0.0,
                Service::Linear {
                    base_us,
                    ns_per_byte,
                } => base_us >= 0.0 && ns_per_byte >= 0.0,
            };
            if !ok {
                return Err(format!("`{name}`: times are not negative"));
            }
        }
        for r in &self.reconfigurations {
            if !known(&r.accelerator)
                || r.slot >= slots
                || r.node.is_some_and(|n| n >= n_count(self))
            {
                return Err(format!(
                    "reconfiguration: no slot {} or accelerator `{}`",
                    r.slot, r.accelerator
                ));
            }
        }
        if n.reconfig_time_us.is_nan() || n.reconfig_time_us < 0.0 {
            return Err("reconfig_time_us is not negative".into());
        }
        if n.io_threads == 0 || n.io_threads > IO_THREADS_MAX {
            return Err(format!("io_threads: 1 to {IO_THREADS_MAX}"));
        }
        if !(n.net_cpu_us >= 0.0 && n.net_cpu_us.is_finite()) {
            return Err("net_cpu_us is a time, not negative".into());
        }
        for f in &self.failures {
            match *f {
                Failure::NodeLoss { node, .. } if node >= n.count => {
                    return Err(format!("node_loss: no node {node}"))
                }
                Failure::SlotHang { node, slot, .. } if node >= n.count || slot >= slots => {
                    return Err(format!("slot_hang: no slot {slot} on node {node}"))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Each client has something to call, at a rate that can be drawn.
    fn validate_clients(&self) -> Result<(), String> {
        let known = |name: &str| self.accelerators.iter().any(|a| a.name == name);
        for c in &self.clients {
            if !matches!(c.kind, ClientKind::Trace { .. }) && c.mix.is_empty() {
                return Err("a client needs a mix (what it calls)".into());
            }
            for m in &c.mix {
                if !known(&m.accelerator) {
                    return Err(format!(
                        "mix accelerator `{}` is not in [[accelerators]]",
                        m.accelerator
                    ));
                }
                if m.fragments == 0 || m.weight <= 0.0 {
                    return Err(
                        "a mix entry has at least one fragment and a positive weight".into(),
                    );
                }
            }
            match c.kind {
                ClientKind::Poisson { rate_per_s } | ClientKind::Erlang { rate_per_s, .. }
                    if rate_per_s <= 0.0 =>
                {
                    return Err("an open-loop client's rate is positive".into())
                }
                ClientKind::Erlang { k: 0, .. } => return Err("an Erlang client has k ≥ 1".into()),
                ClientKind::Closed { outstanding: 0, .. } => {
                    return Err("a closed-loop client keeps at least one call out".into())
                }
                _ => {}
            }
        }
        Ok(())
    }
}
