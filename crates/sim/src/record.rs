//! What happened to each call (a [`Record`]) and what a run adds up to (a
//! [`Summary`]): latency percentiles, queueing against service, utilisation,
//! refusals, and Little's law checked on the run's own time-integral.
//!
//! Not for: writing files (`report`).

use netaccel_node::core::slot::Answer;
use netaccel_node::core::tenant::TenantId;
use rac_proto::Status;
use serde::Serialize;

use crate::clients::Issue;
use crate::engine::Run;

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Not yet answered (never in a finished run).
    Pending,
    Ok,
    /// Refused BUSY by a slot's bounds.
    Busy,
    /// Refused BUSY by the reassembly pool.
    PoolFull,
    Unavailable,
    DeadlineExceeded,
    /// Its node was lost, or its slot hung and no watchdog failed it by the end of
    /// the run: the client never hears back.
    Lost,
    /// Any other status (none in the scenarios the simulator builds).
    Other,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Pending => "pending",
            Outcome::Ok => "ok",
            Outcome::Busy => "busy",
            Outcome::PoolFull => "pool_full",
            Outcome::Unavailable => "unavailable",
            Outcome::DeadlineExceeded => "deadline_exceeded",
            Outcome::Lost => "lost",
            Outcome::Other => "other",
        }
    }
}

/// One call, times in ns of simulated time since the run's start.
#[derive(Clone, Debug)]
pub struct Record {
    pub call: u32,
    pub client: u32,
    pub tenant: TenantId,
    /// `u32::MAX` when no node was up.
    pub node: u32,
    pub accel: u32,
    pub bytes: u32,
    pub fragments: u32,
    pub deadline_us: u32,
    pub issued_ns: u64,
    /// The last byte at the node.
    pub whole_ns: u64,
    /// Handed to the node's dispatcher.
    pub submit_ns: u64,
    /// Began on its slot (`end_ns` if it never ran).
    pub start_ns: u64,
    /// Answered at the node.
    pub end_ns: u64,
    /// The answer back at the client.
    pub reply_ns: u64,
    /// The slot that answered, if one did.
    pub slot: Option<u16>,
    pub outcome: Outcome,
    /// Handed to its node (the dispatcher or the reassembly pool): counted in the
    /// node's calls until answered or lost.
    pub entered: bool,
}

impl Record {
    pub fn issued(call: u32, client: u32, issue: &Issue, now: u64) -> Record {
        Record {
            call,
            client,
            tenant: issue.tenant,
            node: issue.node.unwrap_or(u32::MAX),
            accel: issue.accel,
            bytes: issue.bytes,
            fragments: issue.fragments,
            deadline_us: issue.deadline_us,
            issued_ns: now,
            whole_ns: now,
            submit_ns: now,
            start_ns: now,
            end_ns: now,
            reply_ns: now,
            slot: None,
            outcome: Outcome::Pending,
            entered: false,
        }
    }

    pub fn answered(&self) -> bool {
        self.outcome != Outcome::Pending
    }

    /// The node's answer, given at `now`.
    pub fn answer(&mut self, answer: &Answer, now: u64) {
        debug_assert!(!self.answered(), "one answer per call");
        self.outcome = match answer.status {
            Status::Ok => Outcome::Ok,
            Status::Busy => Outcome::Busy,
            Status::Unavailable => Outcome::Unavailable,
            Status::DeadlineExceeded => Outcome::DeadlineExceeded,
            _ => Outcome::Other,
        };
        self.slot = answer.slot;
        self.end_ns = now;
        // A call the watchdog gave up on is answered with its time on the device
        // and no queue time: it began that long ago.
        self.start_ns = match answer.slot {
            Some(_) if answer.exec_ns > 0 => now - answer.exec_ns,
            Some(_) => self.submit_ns + answer.queue_ns,
            None => now,
        };
        debug_assert!(self.start_ns <= self.end_ns, "a call begins before it ends");
        debug_assert!(
            answer.slot.is_none() || now - self.start_ns == answer.exec_ns || answer.exec_ns == 0,
            "the slot's execution time is the device's"
        );
    }

    /// Refused `status` at the node at `now` before reaching the dispatcher.
    pub fn answer_refused(&mut self, status: Status, now: u64, pool: bool) {
        debug_assert!(!self.answered());
        self.outcome = match (status, pool) {
            (Status::Busy, true) => Outcome::PoolFull,
            (Status::Busy, false) => Outcome::Busy,
            _ => Outcome::Other,
        };
        self.submit_ns = now;
        self.start_ns = now;
        self.end_ns = now;
    }

    pub fn answer_lost(&mut self, now: u64) {
        debug_assert!(!self.answered());
        self.outcome = Outcome::Lost;
        self.start_ns = self.start_ns.max(self.submit_ns).min(now);
        self.end_ns = now;
    }
}

/// Calls by outcome, counted in one pass.
#[derive(Default)]
struct Tally {
    busy: u64,
    pool_full: u64,
    unavailable: u64,
    deadline_exceeded: u64,
    lost: u64,
}

impl Tally {
    fn of<'a>(recs: impl Iterator<Item = &'a Record>) -> Tally {
        let mut t = Tally::default();
        for r in recs {
            match r.outcome {
                Outcome::Busy => t.busy += 1,
                Outcome::PoolFull => t.pool_full += 1,
                Outcome::Unavailable => t.unavailable += 1,
                Outcome::DeadlineExceeded => t.deadline_exceeded += 1,
                Outcome::Lost => t.lost += 1,
                Outcome::Pending | Outcome::Ok | Outcome::Other => {}
            }
        }
        t
    }
}

/// Latency percentiles, in µs.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Percentiles {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Percentiles {
    /// Of `ns` (sorted here), nearest rank.
    pub fn of(ns: &mut [u64]) -> Percentiles {
        if ns.is_empty() {
            return Percentiles::default();
        }
        ns.sort_unstable();
        let at = |q: f64| {
            let rank = ((q * ns.len() as f64).ceil() as usize).clamp(1, ns.len());
            ns[rank - 1] as f64 / 1000.0
        };
        let sum: u128 = ns.iter().map(|&x| u128::from(x)).sum();
        Percentiles {
            mean: sum as f64 / ns.len() as f64 / 1000.0,
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            p999: at(0.999),
            max: ns[ns.len() - 1] as f64 / 1000.0,
        }
    }
}

/// Little's law on the nodes: L measured as the time-average of calls in the nodes,
/// against λ·W from the calls' own arrival rate and time in the node.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Little {
    pub arrival_rate_per_s: f64,
    pub mean_time_in_node_us: f64,
    pub mean_calls_in_node: f64,
    pub lambda_w: f64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    pub name: String,
    pub seed: u64,
    pub simulated_s: f64,
    pub calls: u64,
    pub ok: u64,
    pub busy: u64,
    pub pool_full: u64,
    pub unavailable: u64,
    pub deadline_exceeded: u64,
    pub lost: u64,
    pub throughput_per_s: f64,
    /// Issue to answer back at the client, calls answered OK.
    pub latency_us: Percentiles,
    /// Dispatched to answered at the node, calls answered OK.
    pub node_latency_us: Percentiles,
    /// Waiting in a slot's queue, calls answered OK.
    pub queue_us: Percentiles,
    /// On the device, calls answered OK.
    pub service_us: Percentiles,
    /// Busy share of each slot (the slots' own accounting), node after node.
    pub utilisation: Vec<f64>,
    pub utilisation_mean: f64,
    pub reconfigurations: u64,
    pub little: Little,
    /// The same counts and latencies for each accelerator, in scenario order.
    pub per_accelerator: Vec<AcceleratorSummary>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AcceleratorSummary {
    pub calls: u64,
    pub ok: u64,
    pub busy: u64,
    pub pool_full: u64,
    /// Share of its calls refused (busy, pool full, unavailable) or lost.
    pub refused_share: f64,
    pub latency_us: Percentiles,
}

impl AcceleratorSummary {
    fn of(recs: &[&Record]) -> AcceleratorSummary {
        let tally = Tally::of(recs.iter().copied());
        let mut ok: Vec<u64> = recs
            .iter()
            .filter(|r| r.outcome == Outcome::Ok)
            .map(|r| r.reply_ns - r.issued_ns)
            .collect();
        let refused = tally.busy + tally.pool_full + tally.unavailable + tally.lost;
        AcceleratorSummary {
            calls: recs.len() as u64,
            ok: ok.len() as u64,
            busy: tally.busy,
            pool_full: tally.pool_full,
            refused_share: refused as f64 / recs.len().max(1) as f64,
            latency_us: Percentiles::of(&mut ok),
        }
    }
}

impl Summary {
    pub fn of(name: &str, seed: u64, run: &Run) -> Summary {
        let recs = &run.records;
        let tally = Tally::of(recs.iter());
        let ok: Vec<&Record> = recs.iter().filter(|r| r.outcome == Outcome::Ok).collect();
        let pick = |f: &dyn Fn(&Record) -> u64| -> Percentiles {
            let mut v: Vec<u64> = ok.iter().map(|r| f(r)).collect();
            Percentiles::of(&mut v)
        };
        let t_ns = run.end_ns.max(1);
        let simulated_s = t_ns as f64 / 1e9;
        // Every call handed to a node, until answered or lost there.
        let (arrivals, time_in_node) = recs
            .iter()
            .filter(|r| r.entered)
            .fold((0u64, 0u128), |(n, t), r| {
                (n + 1, t + u128::from(r.end_ns - r.submit_ns))
            });
        let lambda = arrivals as f64 / simulated_s;
        let w_us = if arrivals == 0 {
            0.0
        } else {
            time_in_node as f64 / arrivals as f64 / 1000.0
        };
        let busy: Vec<f64> = run
            .slot_busy_ns
            .iter()
            .map(|&b| b as f64 / t_ns as f64)
            .collect();
        Summary {
            name: name.to_string(),
            seed,
            simulated_s,
            calls: recs.len() as u64,
            ok: ok.len() as u64,
            busy: tally.busy,
            pool_full: tally.pool_full,
            unavailable: tally.unavailable,
            deadline_exceeded: tally.deadline_exceeded,
            lost: tally.lost,
            throughput_per_s: ok.len() as f64 / simulated_s,
            latency_us: pick(&|r| r.reply_ns - r.issued_ns),
            node_latency_us: pick(&|r| r.end_ns - r.submit_ns),
            queue_us: pick(&|r| r.start_ns - r.submit_ns),
            service_us: pick(&|r| r.end_ns - r.start_ns),
            utilisation_mean: busy.iter().sum::<f64>() / busy.len().max(1) as f64,
            utilisation: busy,
            reconfigurations: run.reconfigurations,
            little: Little {
                arrival_rate_per_s: lambda,
                mean_time_in_node_us: w_us,
                mean_calls_in_node: run.in_node_area as f64 / t_ns as f64,
                lambda_w: lambda * w_us / 1e6,
            },
            per_accelerator: (0..run.accelerators)
                .map(|a| {
                    let of: Vec<&Record> = recs.iter().filter(|r| r.accel == a as u32).collect();
                    AcceleratorSummary::of(&of)
                })
                .collect(),
        }
    }
}
