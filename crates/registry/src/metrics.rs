//! The registry's Prometheus metrics (`GET /metrics`), built on `prometheus-client`.
//!
//! Counters and the latency histogram are bumped where things happen; the gauges
//! (nodes by state, slots by accelerator, instances) are computed from the state at
//! scrape time, so they can never drift from it.

use std::collections::BTreeMap;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::model::NodeState;
use crate::state::State;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AccelLabel {
    pub accelerator: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnswerLabel {
    pub answer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

/// Outcomes of an allocation, as labelled in `allocations_total`.
#[derive(Clone, Copy, Debug)]
pub enum AllocResult {
    Bound,
    Reconfigured,
    NoDevice,
}

pub struct Metrics {
    registry: Registry,
    nodes: Family<StateLabel, Gauge>,
    slots: Family<AccelLabel, Gauge>,
    instances: Family<StateLabel, Gauge>,
    allocations: Family<ResultLabel, Counter>,
    reconfigurations: Family<ResultLabel, Counter>,
    migrations: Counter,
    unreachable_reports: Counter,
    tenants_reads: Family<AnswerLabel, Counter>,
    allocation_seconds: Histogram,
    leader: Gauge,
    long_polls: Gauge,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("netaccel_registry");
        let mut m = Metrics {
            registry: Registry::default(),
            nodes: Family::default(),
            slots: Family::default(),
            instances: Family::default(),
            allocations: Family::default(),
            reconfigurations: Family::default(),
            migrations: Counter::default(),
            unreachable_reports: Counter::default(),
            tenants_reads: Family::default(),
            // 10 µs … ~40 s by fours: an allocation that binds takes microseconds, one
            // that reconfigures a slot takes the node's load time.
            allocation_seconds: Histogram::new(exponential_buckets(1e-5, 4.0, 12)),
            leader: Gauge::default(),
            long_polls: Gauge::default(),
        };
        registry.register("nodes", "Nodes by state", m.nodes.clone());
        registry.register(
            "slots",
            "Slots by the accelerator they hold",
            m.slots.clone(),
        );
        registry.register(
            "instances",
            "Function instances, bound to a slot or not",
            m.instances.clone(),
        );
        registry.register(
            "allocations",
            "Allocations by result (bound, reconfigured, no_device)",
            m.allocations.clone(),
        );
        registry.register(
            "reconfigurations",
            "Slot reconfigurations asked of nodes, by result (ok, failed)",
            m.reconfigurations.clone(),
        );
        registry.register(
            "migrations",
            "Instances moved off their slot (reconfiguration, node loss, rebalancing)",
            m.migrations.clone(),
        );
        registry.register(
            "unreachable_reports",
            "Clients' reports that they could not reach their instance's node, acted on (the instance moved to another node if one could take it)",
            m.unreachable_reports.clone(),
        );
        registry.register(
            "tenants_reads",
            "Nodes' reads of GET /v1/tenants, by answer: full (the document) or not_modified (304: the revision the node named is current)",
            m.tenants_reads.clone(),
        );
        registry.register(
            "allocation_seconds",
            "Time to allocate one instance, reconfiguration included",
            m.allocation_seconds.clone(),
        );
        registry.register(
            "leader",
            "1 when this registry is the one that writes",
            m.leader.clone(),
        );
        registry.register(
            "long_polls",
            "Long polls waiting for a binding to change",
            m.long_polls.clone(),
        );
        m.leader.set(1);
        // Every result shows from the start, at 0, so rates work from the first scrape.
        for result in ["bound", "reconfigured", "no_device"] {
            let _ = m.allocations.get_or_create(&ResultLabel {
                result: result.to_string(),
            });
        }
        for result in ["ok", "failed"] {
            let _ = m.reconfigurations.get_or_create(&ResultLabel {
                result: result.to_string(),
            });
        }
        for answer in ["full", "not_modified"] {
            let _ = m.tenants_reads.get_or_create(&AnswerLabel {
                answer: answer.to_string(),
            });
        }
        m.registry = registry;
        m
    }

    pub fn allocation(&self, result: AllocResult, seconds: f64) {
        let result = match result {
            AllocResult::Bound => "bound",
            AllocResult::Reconfigured => "reconfigured",
            AllocResult::NoDevice => "no_device",
        };
        self.allocations
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
        self.allocation_seconds.observe(seconds);
    }

    pub fn reconfiguration(&self, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.reconfigurations
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
    }

    pub fn migrations(&self, n: usize) {
        self.migrations.inc_by(n as u64);
    }

    /// A client's report that it cannot reach its instance's node, acted on.
    pub fn unreachable_report(&self) {
        self.unreachable_reports.inc();
    }

    /// A node's read of the tenants: the document, or `304` (`not_modified`).
    pub fn tenants_read(&self, not_modified: bool) {
        let answer = if not_modified { "not_modified" } else { "full" };
        self.tenants_reads
            .get_or_create(&AnswerLabel {
                answer: answer.to_string(),
            })
            .inc();
    }

    /// The leader gauge: 1 while this replica writes.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// The exposition text, with the gauges taken from `state`.
    pub fn render(&self, state: &State, long_polls_waiting: usize) -> String {
        self.long_polls.set(long_polls_waiting as i64);
        let mut nodes = [0i64; 2];
        for n in state.nodes() {
            nodes[(n.record.state == NodeState::Lost) as usize] += 1;
        }
        self.nodes.clear();
        for (label, count) in [("ready", nodes[0]), ("lost", nodes[1])] {
            self.nodes
                .get_or_create(&StateLabel {
                    state: label.to_string(),
                })
                .set(count);
        }
        let mut slots: BTreeMap<&str, i64> = BTreeMap::new();
        for (_, slot) in state.inventory.iter() {
            *slots.entry(&slot.spec.accelerator).or_default() += 1;
        }
        self.slots.clear();
        for (accelerator, count) in slots {
            self.slots
                .get_or_create(&AccelLabel {
                    accelerator: accelerator.to_string(),
                })
                .set(count);
        }
        let bound = state.instances().filter(|i| i.binding.is_some()).count() as i64;
        let unbound = state.instance_count() as i64 - bound;
        for (label, count) in [("bound", bound), ("unbound", unbound)] {
            self.instances
                .get_or_create(&StateLabel {
                    state: label.to_string(),
                })
                .set(count);
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}
