//! The cluster engine: calls to function instances on slots of many nodes, and the
//! registry's allocator deciding where instances go, under one virtual clock.
//!
//! What is modelled: calls (one Poisson stream, thinned to the daily curve, each
//! call drawn to a function by its weight, sent to the function's instances in
//! turn, as a client following its bindings does), slots (a FIFO queue bounded at
//! `queue_depth_max` calls, one call at a time for its service time; a reconfigured
//! slot drains its queue, then loads for `reconfig_s`), lease reports (each slot's
//! busy share over the last interval becomes its utilisation in the registry's
//! inventory), an autoscaler (instances per function from its calls over the last
//! interval), node failures (the node stops at once; the registry notices when its
//! lease runs out), and registry leader losses (everything that writes waits for the
//! next leader, which gives every node a fresh lease first, as
//! `Registry::become_leader` does). What is decided by the registry's code: where a new
//! instance goes, which slot is reconfigured, and where a displaced instance goes
//! (`netaccel_registry::alloc`). This module keeps the bindings (which instance is on
//! which slot) as the registry's state does, and nothing else.
//!
//! The arrival stream and the service times are drawn from a generator of their own,
//! so every policy of a run sees the same calls; power-of-two choices draws from a
//! second one.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use netaccel_registry::alloc::{
    Decision, Inventory, Order, Policy, Reconfigure, Request, SlotIdx, SlotSpec,
};

use super::report::{Bin, Histogram, PolicyResult};
use super::{service_mean_us, ClusterScenario, PolicyName};
use crate::model::{service_ns, Random};

/// Time bins of the per-bin series (a day: half-hours).
pub const BINS: usize = 48;
/// What an empty slot holds at the start: no function uses it.
const BLANK: &str = "blank";
const NS: f64 = 1e9;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrival,
    /// A slot finished its running call (slot, its epoch: a failure bumps it).
    Done(u32, u32),
    Report,
    Scale,
    Rebalance,
    /// A drained slot finished loading its new accelerator.
    Loaded(u32),
    Fail(u32),
    Repair(u32),
    /// A lost node's lease runs out (failure index).
    Expire(u32),
    /// The registry's leader dies, a new one takes over (leader loss index).
    LeaderLost(u32),
    LeaderBack(u32),
}

/// A call waiting or running at a slot.
#[derive(Clone, Copy)]
struct Call {
    arrival_ns: u64,
    service_ns: u64,
}

/// A reconfiguration under way: the instance that asked for it and the migration
/// chain it belongs to.
struct Loading {
    accel: u32,
    instance: u32,
    chain: Vec<SlotIdx>,
}

struct Slot {
    accel: u32,
    up: bool,
    epoch: u32,
    queue: VecDeque<Call>,
    busy_since: Option<u64>,
    busy_window_ns: u64,
    loading: Option<Loading>,
    bound: Vec<u32>,
    /// The rebalancer leaves the slot alone until then.
    cooldown_until: u64,
}

struct Instance {
    function: u32,
    slot: Option<u32>,
    alive: bool,
    /// A slot is being reconfigured for it.
    pending: bool,
}

struct Function {
    accel: u32,
    instances: Vec<u32>,
    next: u32,
    window_calls: u64,
}

/// One policy's run of a cluster scenario.
pub struct Engine<'a> {
    sc: &'a ClusterScenario,
    policy_name: PolicyName,
    policy: Policy,
    inv: Inventory,
    accel_names: Vec<Arc<str>>,
    slots: Vec<Slot>,
    functions: Vec<Function>,
    weights: Vec<f64>,
    instances: Vec<Instance>,
    free_instances: Vec<u32>,
    unplaced: Vec<u32>,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    now: u64,
    stop_ns: u64,
    arrivals_open: bool,
    calls_issued: u64,
    calls_max: u64,
    calls_rng: Random,
    choice_rng: Random,
    result: PolicyResult,
    bins: Vec<Bin>,
    hist: Histogram,
    /// Reconfigurations complete at once (the placement before the day starts).
    instant_loading: bool,
    leader: Leadership,
}

/// The registry's leadership, and the work that waits for a leader.
#[derive(Default)]
struct Leadership {
    /// Leader losses under way (0: a leader writes).
    lost: u32,
    lost_since: u64,
    /// When the last leader took over: leases renewed before then are fresh from it.
    took_over: u64,
    /// When each node failure happened (its nodes' last renewal).
    failed_at: Vec<u64>,
    repairs: Vec<usize>,
    loaded: Vec<SlotIdx>,
    expiries: Vec<usize>,
}

impl<'a> Engine<'a> {
    /// The cluster as the registry sees it before the first call: every slot blank,
    /// the functions drawn, nothing placed.
    pub fn new(sc: &'a ClusterScenario, policy_name: PolicyName) -> Engine<'a> {
        let c = &sc.cluster;
        let mut setup = Random::new(sc.seed ^ 0x5eed_c105);
        let accel_names: Vec<Arc<str>> = (0..c.accelerators)
            .map(|k| Arc::from(format!("a{k}").as_str()))
            .chain(std::iter::once(Arc::from(BLANK)))
            .collect();
        let zipf =
            cumulative((0..c.accelerators).map(|k| (k as f64 + 1.0).powf(-c.accelerator_zipf)));
        let functions: Vec<Function> = (0..c.functions)
            .map(|_| Function {
                accel: pick(&zipf, setup.unit()) as u32,
                instances: Vec::new(),
                next: 0,
                window_calls: 0,
            })
            .collect();
        let hot = (c.hot_functions * c.functions as f64).round() as usize;
        let weights = cumulative((0..c.functions).map(|f| match (hot, f < hot) {
            (0, _) => 1.0,
            (h, true) => c.hot_share / h as f64,
            (h, false) => (1.0 - c.hot_share) / (c.functions - h).max(1) as f64,
        }));
        let (inv, slots) = cluster_slots(sc);
        let order = match policy_name {
            PolicyName::Occupation => Order::Occupation,
            _ => Order::Utilization,
        };
        let calls_max = sc.calls.unwrap_or(u64::MAX);
        Engine {
            sc,
            policy_name,
            policy: Policy {
                ceiling: c.ceiling,
                order,
            },
            inv,
            accel_names,
            slots,
            functions,
            weights,
            instances: Vec::new(),
            free_instances: Vec::new(),
            unplaced: Vec::new(),
            events: BinaryHeap::new(),
            seq: 0,
            now: 0,
            stop_ns: (sc.duration_s * NS) as u64,
            arrivals_open: true,
            calls_issued: 0,
            calls_max,
            calls_rng: Random::new(sc.seed),
            choice_rng: Random::new(sc.seed ^ 0x2c40_1ce5),
            result: PolicyResult::new(policy_name.name()),
            bins: (0..BINS).map(|_| Bin::default()).collect(),
            hist: Histogram::default(),
            instant_loading: false,
            leader: Leadership {
                failed_at: vec![0; c.failures.len()],
                ..Leadership::default()
            },
        }
    }

    /// Runs to the end and sums up.
    pub fn run(mut self) -> PolicyResult {
        self.initial_placement();
        let c = &self.sc.cluster;
        self.arrival_after(0);
        self.at(secs(c.report_interval_s), Ev::Report);
        self.at(secs(c.scale_interval_s), Ev::Scale);
        self.at(secs(c.rebalance_interval_s), Ev::Rebalance);
        for (i, f) in c.failures.iter().enumerate() {
            self.at(secs(f.at_s), Ev::Fail(i as u32));
        }
        for (i, l) in c.leader_losses.iter().enumerate() {
            self.at(secs(l.at_s), Ev::LeaderLost(i as u32));
        }
        while let Some(Reverse((t, _, ev))) = self.events.pop() {
            let outage = matches!(
                ev,
                Ev::Fail(_) | Ev::Repair(_) | Ev::Expire(_) | Ev::LeaderLost(_) | Ev::LeaderBack(_)
            );
            if outage && !self.periodic() {
                continue; // the run is over: no call left to lose
            }
            debug_assert!(t >= self.now, "time runs forward");
            self.now = t;
            match ev {
                Ev::Arrival => self.arrival(),
                Ev::Done(slot, epoch) => self.done(slot, epoch),
                Ev::Report => self.report(),
                Ev::Scale => self.scale(),
                Ev::Rebalance => self.rebalance(),
                Ev::Loaded(slot) if self.leaderless() => self.leader.loaded.push(slot),
                Ev::Loaded(slot) => self.loaded(slot),
                Ev::Fail(i) => self.fail(i as usize),
                Ev::Repair(i) => self.repair(i as usize),
                Ev::Expire(i) => self.expire(i as usize),
                Ev::LeaderLost(i) => self.leader_lost(i as usize),
                Ev::LeaderBack(_) => self.leader_back(),
            }
        }
        self.finish()
    }

    fn at(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, ev)));
    }

    /// Periodic work goes on while calls may still come or are in the slots.
    fn periodic(&self) -> bool {
        self.now < self.stop_ns
            && (self.arrivals_open || self.slots.iter().any(|s| !s.queue.is_empty()))
    }

    fn bin(&self) -> usize {
        ((self.now as u128 * BINS as u128 / self.stop_ns.max(1) as u128) as usize).min(BINS - 1)
    }

    // ---- calls ----

    /// The next arrival of the thinned Poisson stream after `from`.
    fn arrival_after(&mut self, from: u64) {
        let c = &self.sc.cluster;
        let capacity_per_s =
            (c.nodes * c.slots_per_node) as f64 * 1e6 / service_mean_us(&c.service);
        let peak = c.load * capacity_per_s * (1.0 + c.diurnal);
        let mut t = from as f64 / NS;
        loop {
            t += self.calls_rng.exponential(1.0 / peak);
            let rate = c.load
                * capacity_per_s
                * (1.0 - c.diurnal * (std::f64::consts::TAU * t / c.day_s).cos());
            if t >= self.sc.duration_s || self.calls_rng.unit() * peak <= rate {
                break;
            }
        }
        if t >= self.sc.duration_s || self.calls_issued >= self.calls_max {
            self.arrivals_open = false;
            return;
        }
        self.at((t * NS) as u64, Ev::Arrival);
    }

    fn arrival(&mut self) {
        self.calls_issued += 1;
        let f = pick(&self.weights, self.calls_rng.unit());
        let service_ns = service_ns(&self.sc.cluster.service, 0, &mut self.calls_rng);
        self.arrival_after(self.now);
        let bin = self.bin();
        self.bins[bin].calls += 1;
        self.result.calls += 1;
        self.functions[f].window_calls += 1;
        let Some(slot) = self.route(f) else {
            self.result.no_instance += 1;
            self.bins[bin].dropped += 1;
            self.count_leaderless_drops(1);
            return;
        };
        let s = &mut self.slots[slot as usize];
        if s.queue.len() >= self.sc.cluster.queue_depth_max {
            self.result.busy += 1;
            self.bins[bin].dropped += 1;
            self.count_leaderless_drops(1);
            return;
        }
        s.queue.push_back(Call {
            arrival_ns: self.now,
            service_ns,
        });
        if s.queue.len() == 1 {
            s.busy_since = Some(self.now);
            let epoch = s.epoch;
            self.at(self.now + service_ns, Ev::Done(slot, epoch));
        }
    }

    /// The next of the function's instances, in turn, whose slot takes calls.
    fn route(&mut self, f: usize) -> Option<u32> {
        let func = &mut self.functions[f];
        let n = func.instances.len() as u32;
        for k in 0..n {
            let i = func.instances[((func.next + k) % n) as usize];
            if let Some(slot) = self.instances[i as usize].slot {
                let s = &self.slots[slot as usize];
                if s.up && s.loading.is_none() {
                    func.next = (func.next + k + 1) % n;
                    return Some(slot);
                }
            }
        }
        None
    }

    fn done(&mut self, slot: u32, epoch: u32) {
        let s = &mut self.slots[slot as usize];
        if s.epoch != epoch {
            return; // its node failed meanwhile
        }
        let call = s.queue.pop_front().expect("a running call");
        let latency = self.now - call.arrival_ns;
        let bin = self.bin();
        self.hist.add(latency);
        self.bins[bin].hist.add(latency);
        self.bins[bin].ok += 1;
        self.result.ok += 1;
        let s = &mut self.slots[slot as usize];
        if let Some(next) = s.queue.front() {
            let t = self.now + next.service_ns;
            self.at(t, Ev::Done(slot, epoch));
            return;
        }
        let since = s.busy_since.take().expect("busy while a call ran");
        s.busy_window_ns += self.now - since;
        self.result.busy_ns += u128::from(self.now - since);
        if s.loading.is_some() {
            let t = self.now + secs(self.sc.cluster.reconfig_s);
            self.at(t, Ev::Loaded(slot));
        }
    }

    // ---- lease reports and the autoscaler ----

    fn report(&mut self) {
        let interval = secs(self.sc.cluster.report_interval_s);
        let mut busy_sum = 0.0;
        for idx in 0..self.slots.len() {
            let s = &mut self.slots[idx];
            if let Some(since) = s.busy_since {
                s.busy_window_ns += self.now - since;
                self.result.busy_ns += u128::from(self.now - since);
                s.busy_since = Some(self.now);
            }
            let utilization = (s.busy_window_ns as f64 / interval as f64).min(1.0);
            s.busy_window_ns = 0;
            busy_sum += utilization;
            // Renewals carry the figure; without a leader nobody records it.
            if s.up && self.leader.lost == 0 {
                self.inv.set_utilization(idx as SlotIdx, utilization);
            }
        }
        let bin = self.bin();
        self.bins[bin].utilisation_sum += busy_sum / self.slots.len() as f64;
        self.bins[bin].reports += 1;
        if self.periodic() {
            self.at(self.now + interval, Ev::Report);
        }
    }

    fn scale(&mut self) {
        let c = &self.sc.cluster;
        let window_s = c.scale_interval_s;
        let per_instance = c.instance_load * 1e6 / service_mean_us(&c.service);
        for f in 0..self.functions.len() {
            let rate = self.functions[f].window_calls as f64 / window_s;
            self.functions[f].window_calls = 0;
            if self.leaderless() {
                continue; // it cannot write instances: the next pass after the election
            }
            let desired = ((rate / per_instance).ceil() as usize).clamp(1, c.instances_max);
            self.resize(f, desired);
        }
        let live = self.instances.len() - self.free_instances.len();
        self.result.instances_peak = self.result.instances_peak.max(live as u64);
        if self.periodic() {
            self.at(self.now + secs(window_s), Ev::Scale);
        }
    }

    /// One pass of the registry's rebalancer: unbound instances placed again
    /// (reconfiguring only empty slots), then one instance moved off each slot the
    /// registry's `relievable` names, within the registry's budget per pass.
    fn rebalance(&mut self) {
        if self.leaderless() {
            let t = self.now + secs(self.sc.cluster.rebalance_interval_s);
            self.at(t, Ev::Rebalance);
            return; // the reconcile loops run on the leader only
        }
        let c = &self.sc.cluster;
        let budget = c.rebalance_moves_max;
        let cooldown = secs(c.rebalance_cooldown_s);
        self.unplaced.retain(|&i| {
            self.instances[i as usize].alive && self.instances[i as usize].slot.is_none()
        });
        let take = budget.min(self.unplaced.len());
        let unbound: Vec<u32> = self.unplaced.drain(..take).collect();
        let mut hot = Vec::new();
        for (idx, slot) in self.inv.iter() {
            if hot.len() + unbound.len() >= budget {
                break;
            }
            let s = &self.slots[idx as usize];
            if slot.relievable(&self.policy) && self.now >= s.cooldown_until {
                if let Some(&i) = s.bound.last() {
                    hot.push((idx, i));
                }
            }
        }
        for i in unbound {
            if !self.instances[i as usize].pending {
                self.place_with(i, Reconfigure::EmptyOnly, &[]);
            }
        }
        for (idx, i) in hot {
            self.slots[idx as usize].cooldown_until = self.now + cooldown;
            self.unbind(i);
            if self.place_with(i, Reconfigure::Any, &[idx]) {
                self.result.migrations += 1;
                let bin = self.bin();
                self.bins[bin].migrations += 1;
            } else {
                // Nowhere better: it stays (the registry leaves it bound).
                self.unplaced.retain(|&u| u != i);
                self.bind(i, idx);
            }
        }
        if self.periodic() {
            let t = self.now + secs(self.sc.cluster.rebalance_interval_s);
            self.at(t, Ev::Rebalance);
        }
    }

    /// Allocates instance `i` with `reconfigure` outside `exclude`; whether it found
    /// a slot (bound, or one being loaded for it).
    fn place_with(&mut self, i: u32, reconfigure: Reconfigure, exclude: &[SlotIdx]) -> bool {
        let accel = self.functions[self.instances[i as usize].function as usize].accel;
        let name = self.accel_names[accel as usize].clone();
        let req = Request {
            exclude,
            reconfigure,
            ..Request::new(&name)
        };
        match self.decide(&req) {
            Decision::Bind(idx) => self.bind(i, idx),
            Decision::Reconfigure(idx) => self.start_loading(idx, accel, i, Vec::new()),
            Decision::NoDevice => {
                self.result.no_device += 1;
                self.unplaced.push(i);
                return false;
            }
        }
        true
    }

    /// Creates or deletes instances of `f` until it has `desired`.
    fn resize(&mut self, f: usize, desired: usize) {
        while self.functions[f].instances.len() < desired {
            let i = self.new_instance(f as u32);
            self.functions[f].instances.push(i);
            self.place(i, Vec::new(), false);
        }
        while self.functions[f].instances.len() > desired {
            let i = self.functions[f].instances.pop().expect("an instance");
            self.unbind(i);
            let inst = &mut self.instances[i as usize];
            inst.alive = false;
            if !inst.pending {
                self.free_instances.push(i);
            }
        }
        let func = &mut self.functions[f];
        func.next %= func.instances.len().max(1) as u32;
    }

    fn new_instance(&mut self, function: u32) -> u32 {
        let inst = Instance {
            function,
            slot: None,
            alive: true,
            pending: false,
        };
        match self.free_instances.pop() {
            Some(i) => {
                self.instances[i as usize] = inst;
                i
            }
            None => {
                self.instances.push(inst);
                (self.instances.len() - 1) as u32
            }
        }
    }

    // ---- the registry's decisions ----

    /// Asks the registry's allocator, under this run's policy.
    fn decide(&mut self, req: &Request<'_>) -> Decision {
        match self.policy_name {
            PolicyName::TwoChoices => {
                let choice = (self.choice_rng.unit() * (1u64 << 53) as f64) as u64;
                self.inv.allocate_two_choices(req, &self.policy, choice)
            }
            _ => self.inv.allocate(req, &self.policy),
        }
    }

    /// Places instance `i`: a fresh one (the full algorithm), or one displaced from
    /// a slot (`displaced`: first a holder outside the chain without I/O, then the
    /// follow-up), as the registry's migration does.
    fn place(&mut self, i: u32, chain: Vec<SlotIdx>, displaced: bool) {
        let accel = self.functions[self.instances[i as usize].function as usize].accel;
        let name = self.accel_names[accel as usize].clone();
        let mut decision = Decision::NoDevice;
        if displaced {
            decision = self.decide(&Request::displaced(&name, &chain));
        }
        if decision == Decision::NoDevice {
            decision = if displaced {
                self.decide(&Request::followup(&name, &chain))
            } else {
                self.decide(&Request::new(&name))
            };
        }
        match decision {
            Decision::Bind(idx) => self.bind(i, idx),
            Decision::Reconfigure(idx) => self.start_loading(idx, accel, i, chain),
            Decision::NoDevice => {
                self.result.no_device += 1;
                self.unplaced.push(i);
            }
        }
    }

    fn bind(&mut self, i: u32, idx: SlotIdx) {
        debug_assert!(self.instances[i as usize].slot.is_none());
        self.inv.bind(idx);
        self.slots[idx as usize].bound.push(i);
        self.instances[i as usize].slot = Some(idx);
    }

    fn unbind(&mut self, i: u32) {
        let Some(idx) = self.instances[i as usize].slot.take() else {
            return;
        };
        self.inv.unbind(idx);
        let bound = &mut self.slots[idx as usize].bound;
        let pos = bound.iter().position(|&b| b == i).expect("bound here");
        bound.swap_remove(pos);
    }

    /// The registry marks the slot and asks its node to load `accel`; the node
    /// drains the slot's queue first.
    fn start_loading(&mut self, idx: SlotIdx, accel: u32, instance: u32, chain: Vec<SlotIdx>) {
        self.inv.set_reconfiguring(idx, true);
        self.instances[instance as usize].pending = true;
        let s = &mut self.slots[idx as usize];
        debug_assert!(
            s.loading.is_none(),
            "one reconfiguration per slot at a time"
        );
        s.loading = Some(Loading {
            accel,
            instance,
            chain,
        });
        if self.instant_loading {
            self.loaded(idx);
        } else if s.queue.is_empty() {
            let t = self.now + secs(self.sc.cluster.reconfig_s);
            self.at(t, Ev::Loaded(idx));
        }
    }

    /// The node's answer: the slot holds the new accelerator; what it displaces
    /// migrates, and the instance that asked is bound.
    fn loaded(&mut self, idx: SlotIdx) {
        let loading = self.slots[idx as usize]
            .loading
            .take()
            .expect("a reconfiguration");
        self.inv.set_reconfiguring(idx, false);
        let i = loading.instance;
        self.instances[i as usize].pending = false;
        if !self.slots[idx as usize].up {
            // The node was lost meanwhile: the registry tries another slot.
            if self.instances[i as usize].alive {
                self.place(i, loading.chain, true);
            } else {
                self.free_instances.push(i);
            }
            return;
        }
        self.result.reconfigurations += 1;
        let bin = self.bin();
        self.bins[bin].reconfigurations += 1;
        let name = self.accel_names[loading.accel as usize].clone();
        self.inv.set_accelerator(idx, &name, "");
        self.slots[idx as usize].accel = loading.accel;
        let displaced: Vec<u32> = self.slots[idx as usize]
            .bound
            .iter()
            .copied()
            .filter(|&b| {
                self.functions[self.instances[b as usize].function as usize].accel != loading.accel
            })
            .collect();
        let mut chain = loading.chain;
        chain.push(idx);
        self.migrate(&displaced, &chain);
        if self.instances[i as usize].alive {
            self.bind(i, idx);
        } else {
            self.free_instances.push(i);
        }
    }

    fn migrate(&mut self, displaced: &[u32], chain: &[SlotIdx]) {
        let bin = self.bin();
        self.result.migrations += displaced.len() as u64;
        self.bins[bin].migrations += displaced.len() as u64;
        for &d in displaced {
            self.unbind(d);
        }
        for &d in displaced {
            self.place(d, chain.to_vec(), true);
        }
    }

    // ---- failures and leader losses ----

    /// The nodes stop: their calls are lost, their slots take no more. The registry
    /// notices when their lease runs out ([`Self::expire`]).
    fn fail(&mut self, i: usize) {
        let f = &self.sc.cluster.failures[i];
        let per = self.sc.cluster.slots_per_node;
        let mut lost = 0;
        for idx in f.first * per..(f.first + f.count) * per {
            let s = &mut self.slots[idx];
            if !s.up {
                continue;
            }
            s.up = false;
            s.epoch += 1;
            lost += s.queue.len() as u64;
            s.queue.clear();
            if let Some(since) = s.busy_since.take() {
                self.result.busy_ns += u128::from(self.now - since);
            }
            s.busy_window_ns = 0;
        }
        self.result.lost += lost;
        self.count_leaderless_drops(lost);
        self.result.node_failures += f.count as u64;
        self.leader.failed_at[i] = self.now;
        let back = (f.for_s > 0.0).then(|| self.now + secs(f.for_s));
        let lease = secs(self.sc.cluster.lease_s);
        if lease == 0 {
            self.expire(i);
        } else {
            self.at(self.now + lease, Ev::Expire(i as u32));
        }
        if let Some(t) = back {
            self.at(t, Ev::Repair(i as u32));
        }
    }

    /// The failed nodes' lease runs out: the leader declares them lost and their
    /// instances migrate. Without a leader it waits for the next one, which gives
    /// every node a fresh lease when it takes over (`Registry::become_leader`).
    fn expire(&mut self, i: usize) {
        if self.leaderless() {
            self.leader.expiries.push(i);
            return;
        }
        let lease = secs(self.sc.cluster.lease_s);
        let fresh_until = self.leader.took_over + lease;
        if self.leader.failed_at[i] < self.leader.took_over && self.now < fresh_until {
            self.at(fresh_until, Ev::Expire(i as u32));
            return;
        }
        let f = &self.sc.cluster.failures[i];
        let per = self.sc.cluster.slots_per_node;
        let slots = f.first * per..(f.first + f.count) * per;
        let mut displaced = Vec::new();
        for idx in slots.clone() {
            // A node back before its lease ran out renewed it: not lost.
            if !self.slots[idx].up {
                self.inv.set_ready(idx as SlotIdx, false);
                displaced.extend(self.slots[idx].bound.iter().copied());
            }
        }
        let late = self.now - (self.leader.failed_at[i] + lease);
        self.result.leader_unbound_s += displaced.len() as f64 * late as f64 / NS;
        self.result.failure_migrations += displaced.len() as u64;
        self.migrate(&displaced, &[]);
        assert!(
            slots
                .filter(|&idx| !self.slots[idx].up)
                .all(|idx| self.slots[idx].bound.is_empty()),
            "no instance stays bound to a lost node's slot"
        );
    }

    /// The node is back; the registry hears of it with its next renewal (to the
    /// next leader, if none leads now).
    fn repair(&mut self, i: usize) {
        let f = &self.sc.cluster.failures[i];
        let per = self.sc.cluster.slots_per_node;
        for idx in f.first * per..(f.first + f.count) * per {
            self.slots[idx].up = true;
        }
        if self.leaderless() {
            self.leader.repairs.push(i);
        } else {
            self.renewed(i);
        }
    }

    fn renewed(&mut self, i: usize) {
        let f = &self.sc.cluster.failures[i];
        let per = self.sc.cluster.slots_per_node;
        for idx in f.first * per..(f.first + f.count) * per {
            if self.slots[idx].up {
                self.inv.set_ready(idx as SlotIdx, true);
                self.inv.set_utilization(idx as SlotIdx, 0.0);
            }
        }
    }

    fn leaderless(&self) -> bool {
        self.leader.lost > 0
    }

    fn count_leaderless_drops(&mut self, calls: u64) {
        if self.leaderless() {
            self.result.leaderless_dropped += calls;
        }
    }

    fn leader_lost(&mut self, i: usize) {
        if self.leader.lost == 0 {
            self.leader.lost_since = self.now;
        }
        self.leader.lost += 1;
        self.result.leader_losses += 1;
        let back = self.now + secs(self.sc.cluster.leader_losses[i].for_s);
        self.at(back, Ev::LeaderBack(i as u32));
    }

    /// A new leader takes over (when no other loss overlaps): every node's lease is
    /// fresh from now, then the work that waited runs in the order it came: renewals
    /// of nodes that came back, reconfigurations the nodes finished, and the lost
    /// nodes' expiry (after the fresh lease).
    fn leader_back(&mut self) {
        assert!(
            self.leader.lost > 0,
            "a leader comes back after it was lost"
        );
        self.leader.lost -= 1;
        if self.leaderless() {
            return;
        }
        self.result.leaderless_s += (self.now - self.leader.lost_since) as f64 / NS;
        self.leader.took_over = self.now;
        for i in std::mem::take(&mut self.leader.repairs) {
            self.renewed(i);
        }
        for idx in std::mem::take(&mut self.leader.loaded) {
            self.loaded(idx);
        }
        let lease = secs(self.sc.cluster.lease_s);
        for i in std::mem::take(&mut self.leader.expiries) {
            if lease == 0 {
                self.expire(i);
            } else {
                self.at(self.now + lease, Ev::Expire(i as u32));
            }
        }
    }

    // ---- start and end ----

    /// The cluster as the registry leaves it after placing every function once at
    /// the start of the day (its reconfigurations done): runs start warm.
    fn initial_placement(&mut self) {
        let c = &self.sc.cluster;
        let per_instance = c.instance_load * 1e6 / service_mean_us(&c.service);
        let capacity_per_s =
            (c.nodes * c.slots_per_node) as f64 * 1e6 / service_mean_us(&c.service);
        let rate0 = c.load * capacity_per_s * (1.0 - c.diurnal);
        let total = *self.weights.last().expect("a function");
        self.instant_loading = true;
        for f in 0..self.functions.len() {
            let share = (self.weights[f] - if f == 0 { 0.0 } else { self.weights[f - 1] }) / total;
            let desired =
                ((rate0 * share / per_instance).ceil() as usize).clamp(1, c.instances_max);
            self.resize(f, desired);
        }
        self.instant_loading = false;
        self.result.initial_reconfigurations = self.result.reconfigurations;
        self.result.reconfigurations = 0;
        self.result.migrations = 0;
        for b in &mut self.bins {
            b.reconfigurations = 0;
            b.migrations = 0;
        }
    }

    fn finish(mut self) -> PolicyResult {
        if self.leaderless() {
            self.result.leaderless_s += (self.now - self.leader.lost_since) as f64 / NS;
        }
        let r = &mut self.result;
        r.simulated_s = self.now as f64 / NS;
        r.unplaced_at_end = self
            .instances
            .iter()
            .filter(|i| i.alive && i.slot.is_none())
            .count() as u64;
        let slot_s = self.slots.len() as f64 * self.now.max(1) as f64 / NS;
        r.utilisation_mean = (r.busy_ns as f64 / NS) / slot_s;
        r.latency_ms = self.hist.quantiles_ms();
        let hours = (self.now as f64 / NS / 3600.0).max(1e-9);
        r.reconfigurations_per_hour = r.reconfigurations as f64 / hours;
        r.bins = self.bins;
        r.check();
        self.result
    }
}

/// The registry's inventory of every slot (blank, ready, idle) and the engine's own
/// record of each, index for index.
fn cluster_slots(sc: &ClusterScenario) -> (Inventory, Vec<Slot>) {
    let c = &sc.cluster;
    let mut inv = Inventory::new();
    let mut slots = Vec::with_capacity(c.nodes * c.slots_per_node);
    for n in 0..c.nodes {
        let node: Arc<str> = Arc::from(format!("node-{n}").as_str());
        for s in 0..c.slots_per_node {
            let idx = inv.insert(SlotSpec {
                node: node.clone(),
                device: Arc::from("fpga0"),
                slot: s as u16,
                backend: Arc::from("sim"),
                vendor: Arc::from("sim"),
                catalog: None,
                accelerator: Arc::from(BLANK),
                hash: Arc::from(""),
            });
            assert_eq!(idx as usize, slots.len(), "slots are inserted in order");
            slots.push(Slot {
                accel: c.accelerators as u32,
                up: true,
                epoch: 0,
                queue: VecDeque::with_capacity(c.queue_depth_max),
                busy_since: None,
                busy_window_ns: 0,
                loading: None,
                bound: Vec::new(),
                cooldown_until: 0,
            });
        }
    }
    (inv, slots)
}

fn secs(s: f64) -> u64 {
    (s * NS).round() as u64
}

/// Running sums of `weights`.
fn cumulative(weights: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut sum = 0.0;
    weights
        .map(|w| {
            sum += w;
            sum
        })
        .collect()
}

/// The index `unit` (in (0, 1]) falls on in running sums.
fn pick(cumulative: &[f64], unit: f64) -> usize {
    let x = unit * cumulative[cumulative.len() - 1];
    cumulative
        .partition_point(|&c| c < x)
        .min(cumulative.len() - 1)
}
