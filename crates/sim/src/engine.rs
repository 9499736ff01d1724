//! The discrete-event engine: a heap of timed events, one virtual clock, and the
//! node's own dispatch core driven step by step.
//!
//! Each simulated node is the node's [`Dispatcher`] built without threads
//! ([`Dispatcher::unstarted`]) over slots holding stand-in accelerators, and its
//! [`ReassemblyPool`]s. A call whole at a node is handed to [`Dispatcher::submit`]: the
//! node picks the slot (round robin or join-shortest-queue), admits or refuses it
//! (queue depth, tenant share, wait bound) and queues it in the slot's tenant-fair
//! queue. When a slot is free the engine asks it for its next call
//! ([`Slot::take_next`]), draws the call's device time from the scenario, and at that
//! time lets the slot finish it ([`Slot::finish_taken`]): the answer, its queue and
//! execution times come back through the call's own channel, as they do in the node.
//!
//! Around the slots, two parts of the node are driven too. The watchdog: while a
//! slot runs a call, the engine looks at every slot at the watchdog's period
//! ([`netaccel_node::core::watchdog::period`]) with the node's own check
//! ([`Slot::check_hung_stepped`]), which fails a slot whose call ran past
//! `kernel_timeout_ms` and answers what it held. The network threads, when the
//! scenario gives them CPU per call or an `inline` accelerator: each is a queue of
//! calls read one at a time; the dispatcher may answer a call at once by running it
//! on that thread (the node's cheap-call path, its decision), and the thread then
//! spends the call's service time and reads nothing meanwhile.
//!
//! Events at the same time run in the order they were scheduled (a sequence number
//! breaks ties), and every random number comes from one seeded stream drawn in event
//! order: the same scenario and seed give the same run, call for call.
//!
//! Not for: deciding where a call goes, whether it is admitted, or in which order a
//! slot serves its queue — that is the node's code; this module only models clients,
//! links, device times and failures around it.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel::{Accelerator, Catalog};
use netaccel_node::core::clock::{Clock, VirtualClock};
use netaccel_node::core::deadline::Deadline;
use netaccel_node::core::dispatch::Dispatcher;
use netaccel_node::core::memory::{BodyMemory, ReassemblyPool};
use netaccel_node::core::slot::{
    Answer, Call, PendingLoad, SlotLimits, Step, Submitted, Taken, WorkerPolicy,
};
use netaccel_node::device::{BackendKind, SlotPlan};
use netaccel_node::telemetry::metrics::Metrics;
use prometheus_client::metrics::gauge::Gauge;
use rac_proto::Status;
use tokio::sync::oneshot;

use crate::clients::{Clients, Issue};
use crate::model::{service_ns, sim_params, Random, SimAccelerator, SimImage};
use crate::record::Record;
use crate::scenario::{Failure, Ingestion, PoolLayout, Scenario};

/// The most events pending at once: clients, fragments and slots each hold a few, so
/// a run past this has lost its bound somewhere.
const EVENTS_PENDING_MAX: usize = 64 << 20;

/// The most call records reserved before a run starts.
const RECORDS_RESERVED_MAX: u64 = 16 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// A client's next call leaves (or, closed loop, an answer came back).
    Issue {
        client: u32,
    },
    /// The first piece of a call in fragments reaches its node.
    FirstFragment {
        call: u32,
    },
    /// The last byte of a call reaches its node.
    Whole {
        call: u32,
    },
    /// The device of a slot ends the call it runs.
    Done {
        node: u32,
        slot: u32,
        call: u32,
    },
    Failure {
        index: u32,
    },
    /// A slot is told to load another accelerator.
    Reconfigure {
        index: u32,
    },
    /// A slot's device has loaded the accelerator.
    Loaded {
        node: u32,
        slot: u32,
    },
    /// A network thread has read the call at the head of its queue.
    Read {
        node: u32,
        thread: u32,
    },
    /// A call run on its network thread ends.
    InlineDone {
        call: u32,
    },
    /// The node's watchdog looks at every slot.
    Watchdog,
}

#[derive(PartialEq, Eq)]
struct Timed {
    at_ns: u64,
    seq: u64,
    event: Event,
}

impl Ord for Timed {
    /// Earliest first, then first scheduled: `BinaryHeap` is a max-heap.
    fn cmp(&self, other: &Timed) -> CmpOrdering {
        (other.at_ns, other.seq).cmp(&(self.at_ns, self.seq))
    }
}

impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Timed) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

/// One simulated node: the node's dispatcher and pools, and what its devices do.
struct SimNode {
    dispatcher: Arc<Dispatcher>,
    /// One pool, or one per accelerator (by accelerator index).
    pools: Vec<Arc<ReassemblyPool>>,
    /// The call each slot's device is running, as the slot handed it over.
    running: Vec<Option<Taken>>,
    hung: Vec<bool>,
    /// Slots by the accelerator index they host.
    slots_of: Vec<Vec<u32>>,
    /// Each slot's load under way: the node's pending load, its accelerator index,
    /// and whether its end is scheduled (the slot drained).
    loading: Vec<Option<(PendingLoad, u32, bool)>>,
    reconfigurations: u64,
    down: bool,
    /// The network threads (when modelled): the calls each has yet to read.
    net: Vec<NetThread>,
    /// Device time of the calls each slot ran on a network thread: the slot counts
    /// none of it (the virtual clock stands still while the node runs them).
    inline_busy_ns: Vec<u64>,
}

/// A network thread of a node: it reads calls one at a time, `net_cpu_us` each, and
/// runs the cheap ones the node gives it, during which it reads nothing.
#[derive(Default)]
struct NetThread {
    waiting: VecDeque<u32>,
    busy: bool,
}

/// A call the engine has not seen answered yet.
#[derive(Default)]
struct Pending {
    reply: Option<oneshot::Receiver<Answer>>,
    lease: Option<BodyMemory>,
    /// The answer of a call its network thread runs, given when its time is up.
    inline: Option<Answer>,
}

/// What a run produced: every call, and the run's time-integral of calls in the
/// nodes (Little's law's L, measured independently of the calls' own times).
pub struct Run {
    pub records: Vec<Record>,
    pub end_ns: u64,
    /// ∫ calls in the nodes dt, in call·ns.
    pub in_node_area: u128,
    pub slot_busy_ns: Vec<u64>,
    pub slots_per_node: usize,
    pub accelerators: usize,
    /// Loads that ended.
    pub reconfigurations: u64,
}

pub struct Engine<'a> {
    sc: &'a Scenario,
    rng: Random,
    clock: Arc<VirtualClock>,
    epoch: Instant,
    now: u64,
    seq: u64,
    heap: BinaryHeap<Timed>,
    accels: Vec<Arc<dyn Accelerator>>,
    nodes: Vec<SimNode>,
    clients: Clients,
    records: Vec<Record>,
    pending: Vec<Pending>,
    in_node: u64,
    in_node_area: u128,
    area_at: u64,
    /// Network threads are modelled (`net_cpu_us` or an `inline` accelerator).
    net_model: bool,
    /// The watchdog's period (0: none), and whether its next look is scheduled.
    watchdog_every_ns: u64,
    watchdog_pending: bool,
    /// The time of the last event that did something (a watchdog's idle look
    /// does not end a run later).
    end_ns: u64,
}

impl<'a> Engine<'a> {
    /// Builds the nodes and clients of `sc`; traces are read relative to `base`.
    pub fn new(sc: &'a Scenario, base: &Path) -> Result<Engine<'a>, String> {
        let accels: Vec<Arc<dyn Accelerator>> = sc
            .accelerators
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let id = u16::try_from(i + 1).expect("accelerators are bounded");
                Arc::new(SimAccelerator::new(id, &a.name, a.inline)) as Arc<dyn Accelerator>
            })
            .collect();
        let clock = Arc::new(VirtualClock::new());
        let epoch = clock.now();
        let metrics = Metrics::new();
        let nodes = (0..sc.node.count)
            .map(|_| build_node(sc, &accels, &clock, &metrics))
            .collect();
        let clients = Clients::new(sc, base)?;
        // Room for the calls a run is bounded to, up to a point: no copying as it grows.
        let expected = sc.calls.map_or(0, |c| c.min(RECORDS_RESERVED_MAX) as usize);
        let net_model = sc.node.net_cpu_us > 0.0 || sc.accelerators.iter().any(|a| a.inline);
        let watchdog_every_ns = match sc.node.kernel_timeout_ms {
            0 => 0,
            ms => {
                netaccel_node::core::watchdog::period(Duration::from_millis(ms)).as_nanos() as u64
            }
        };
        Ok(Engine {
            sc,
            rng: Random::new(sc.seed),
            clock,
            epoch,
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            accels,
            nodes,
            clients,
            records: Vec::with_capacity(expected),
            pending: Vec::with_capacity(expected),
            in_node: 0,
            in_node_area: 0,
            area_at: 0,
            net_model,
            watchdog_every_ns,
            watchdog_pending: false,
            end_ns: 0,
        })
    }

    fn schedule(&mut self, at_ns: u64, event: Event) {
        debug_assert!(at_ns >= self.now, "no event in the past");
        assert!(
            self.heap.len() < EVENTS_PENDING_MAX,
            "events pending past their bound"
        );
        self.seq += 1;
        self.heap.push(Timed {
            at_ns,
            seq: self.seq,
            event,
        });
    }

    /// Runs until no event is left: clients stopped and every call answered or lost.
    pub fn run(mut self) -> Run {
        for (i, at) in self.clients.first_issues(&mut self.rng) {
            self.schedule(at, Event::Issue { client: i });
        }
        for (i, f) in self.sc.failures.iter().enumerate() {
            let at_s = match *f {
                Failure::NodeLoss { at_s, .. } | Failure::SlotHang { at_s, .. } => at_s,
            };
            let index = u32::try_from(i).expect("failures are few");
            self.schedule(secs_ns(at_s), Event::Failure { index });
        }
        for (i, r) in self.sc.reconfigurations.iter().enumerate() {
            let index = u32::try_from(i).expect("reconfigurations are few");
            self.schedule(secs_ns(r.at_s), Event::Reconfigure { index });
        }
        while let Some(Timed { at_ns, event, .. }) = self.heap.pop() {
            debug_assert!(at_ns >= self.now, "time never goes back");
            self.advance(at_ns);
            if event != Event::Watchdog {
                self.end_ns = at_ns;
            }
            match event {
                Event::Issue { client } => self.issue(client),
                Event::FirstFragment { call } => self.first_fragment(call),
                Event::Whole { call } => self.whole(call),
                Event::Done { node, slot, call } => self.done(node, slot, call),
                Event::Failure { index } => self.failure(index as usize),
                Event::Reconfigure { index } => self.reconfigure(index as usize),
                Event::Loaded { node, slot } => self.loaded(node as usize, slot as usize),
                Event::Read { node, thread } => self.read(node as usize, thread as usize),
                Event::InlineDone { call } => self.inline_done(call),
                Event::Watchdog => self.watchdog(),
            }
        }
        self.finish()
    }

    fn advance(&mut self, at_ns: u64) {
        self.in_node_area += u128::from(self.in_node) * u128::from(at_ns - self.area_at);
        self.area_at = at_ns;
        self.now = at_ns;
        self.clock
            .advance_to(self.epoch + Duration::from_nanos(at_ns));
        debug_assert_eq!(self.clock.since(self.epoch), Duration::from_nanos(at_ns));
    }

    /// A client sends a call (if it still may), and schedules its next one.
    fn issue(&mut self, client: u32) {
        let Some(issue) = self.clients.issue(client, self.now, &mut self.rng) else {
            return;
        };
        if let Some(next) = issue.next_at {
            self.schedule(next, Event::Issue { client });
        }
        let call = u32::try_from(self.records.len()).expect("under 4 billion calls");
        self.records
            .push(Record::issued(call, client, &issue, self.now));
        self.pending.push(Pending::default());
        let Some(node) = issue.node else {
            // No node is up: the call is lost.
            self.records[call as usize].answer_lost(self.now);
            self.answered(call);
            return;
        };
        debug_assert!(!self.nodes[node as usize].down);
        let (first, whole) = self.arrivals(&issue);
        if issue.fragments > 1 {
            self.schedule(first, Event::FirstFragment { call });
        }
        let at_node = if issue.fragments > 1 && self.sc.node.ingestion == Ingestion::Immediate {
            first
        } else {
            whole
        };
        self.records[call as usize].whole_ns = whole;
        self.records[call as usize].submit_ns = at_node;
        if !(issue.fragments > 1 && self.sc.node.ingestion == Ingestion::Immediate) {
            self.schedule(whole, Event::Whole { call });
        }
    }

    /// When the first piece and the last byte of a call reach its node.
    fn arrivals(&self, issue: &Issue) -> (u64, u64) {
        let net = &self.sc.network;
        let byte_ns = |bytes: f64| {
            if net.bandwidth_gbps > 0.0 {
                bytes * 8.0 / net.bandwidth_gbps
            } else {
                0.0
            }
        };
        let f = f64::from(issue.fragments);
        let piece = byte_ns(f64::from(issue.bytes) / f);
        let latency = net.latency_us * 1000.0;
        let first = self.now + (latency + piece).round() as u64;
        let gaps = (f - 1.0) * (piece + issue.fragment_gap_us * 1000.0);
        (first, first + gaps.round() as u64)
    }

    /// The first piece of a call in fragments: room in a reassembly buffer (the
    /// node's pool decides), or, with immediate ingestion, dispatch now.
    fn first_fragment(&mut self, call: u32) {
        let r = &self.records[call as usize];
        let node = r.node as usize;
        if self.nodes[node].down {
            return self.lose(call);
        }
        if self.sc.node.ingestion == Ingestion::Immediate {
            return self.arrive(call);
        }
        let pool = match self.sc.node.reassembly_layout {
            PoolLayout::Shared => &self.nodes[node].pools[0],
            PoolLayout::PerAccelerator => &self.nodes[node].pools[r.accel as usize],
        };
        match pool.reserve(r.bytes as usize) {
            Some(lease) => self.pending[call as usize].lease = Some(BodyMemory::Pool(lease)),
            None => {
                // Refused BUSY at the node, as the RAC front end refuses it.
                self.enter_node(call);
                self.records[call as usize].answer_refused(Status::Busy, self.now, true);
                self.leave_node();
                self.answered(call);
            }
        }
    }

    fn whole(&mut self, call: u32) {
        if self.records[call as usize].answered() {
            return; // refused at its first fragment
        }
        if self.nodes[self.records[call as usize].node as usize].down {
            return self.lose(call);
        }
        self.arrive(call);
    }

    /// Hands a call to its node's dispatcher. Returns whether the node runs it on
    /// the network thread that handed it over (its end is then scheduled).
    fn submit(&mut self, call: u32) -> bool {
        let r = &self.records[call as usize];
        let (node, accel) = (r.node as usize, r.accel as usize);
        let received = self.clock.now();
        let c = Call {
            accel: Arc::clone(&self.accels[accel]),
            params: sim_params(call, r.bytes),
            payload: Vec::new(),
            out: Vec::new(),
            received,
            deadline: Deadline::after(received, r.deadline_us),
            tenant: r.tenant,
            permit: self.pending[call as usize].lease.take(),
        };
        self.enter_node(call);
        match self.nodes[node].dispatcher.submit(c) {
            Submitted::Done(answer) if answer.slot.is_some() && answer.status == Status::Ok => {
                // The node ran it on the network thread: the thread is the device.
                let r = &self.records[call as usize];
                let service = &self.sc.accelerators[r.accel as usize].service;
                let s = service_ns(service, r.bytes, &mut self.rng);
                self.pending[call as usize].inline = Some(answer);
                self.schedule(self.now + s, Event::InlineDone { call });
                return true;
            }
            Submitted::Done(answer) => {
                self.records[call as usize].answer(&answer, self.now);
                self.leave_node();
                self.answered(call);
            }
            Submitted::Queued(rx) => {
                self.pending[call as usize].reply = Some(rx);
                for k in 0..self.nodes[node].slots_of[accel].len() {
                    let slot = self.nodes[node].slots_of[accel][k];
                    self.step(node, slot as usize);
                }
            }
        }
        false
    }

    /// A call whole at its node: its network thread reads it (when network threads
    /// are modelled), or the node has it at once.
    fn arrive(&mut self, call: u32) {
        if !self.net_model {
            self.submit(call);
            return;
        }
        let r = &self.records[call as usize];
        let (node, thread) = (r.node as usize, r.client as usize % self.sc.node.io_threads);
        let t = &mut self.nodes[node].net[thread];
        t.waiting.push_back(call);
        debug_assert!(t.waiting.len() <= self.records.len(), "a call waits once");
        if !t.busy {
            t.busy = true;
            self.read_next(node, thread);
        }
    }

    /// A busy network thread goes on to the next call it has to read, if any.
    fn read_next(&mut self, node: usize, thread: usize) {
        let t = &mut self.nodes[node].net[thread];
        debug_assert!(t.busy, "only a busy thread reads");
        if t.waiting.is_empty() {
            t.busy = false;
            return;
        }
        let at = self.now + (self.sc.node.net_cpu_us * 1000.0).round() as u64;
        let (node, thread) = (node as u32, thread as u32);
        self.schedule(at, Event::Read { node, thread });
    }

    /// A network thread has read a call: it hands it to the dispatcher, and reads
    /// the next one unless the node gave the call back to it to run.
    fn read(&mut self, node: usize, thread: usize) {
        let call = self.nodes[node].net[thread]
            .waiting
            .pop_front()
            .expect("a thread reads a call it has");
        if self.nodes[node].down {
            self.lose(call);
        } else {
            self.records[call as usize].submit_ns = self.now;
            if self.submit(call) {
                return; // busy until the call ends (`inline_done`)
            }
        }
        self.read_next(node, thread);
    }

    /// A call run on its network thread ends: its answer leaves, the thread reads on.
    fn inline_done(&mut self, call: u32) {
        let answer = self.pending[call as usize]
            .inline
            .take()
            .expect("an inline call has its answer");
        let r = &self.records[call as usize];
        let (node, thread) = (r.node as usize, r.client as usize % self.sc.node.io_threads);
        if self.nodes[node].down {
            self.leave_node();
            self.lose(call);
            return self.read_next(node, thread);
        }
        let slot = answer.slot.expect("ran on a slot") as usize;
        self.records[call as usize].answer(&answer, self.now);
        let r = &self.records[call as usize];
        self.nodes[node].inline_busy_ns[slot] += r.end_ns - r.start_ns;
        self.leave_node();
        self.answered(call);
        self.read_next(node, thread);
    }

    /// Schedules the watchdog's next look (at its period, as the node's thread looks
    /// from its start) if there is a watchdog and no look is scheduled yet.
    fn watch(&mut self) {
        if self.watchdog_every_ns == 0 || self.watchdog_pending {
            return;
        }
        let every = self.watchdog_every_ns;
        self.watchdog_pending = true;
        self.schedule((self.now / every + 1) * every, Event::Watchdog);
    }

    /// The watchdog looks at every slot of every node up (the node's own check): a
    /// slot whose call ran past `kernel_timeout_ms` is failed, and that call and
    /// its queue are answered. It looks again while a slot runs a call.
    fn watchdog(&mut self) {
        self.watchdog_pending = false;
        for n in 0..self.nodes.len() {
            if self.nodes[n].down {
                continue;
            }
            for s in 0..self.nodes[n].running.len() {
                if self.nodes[n].dispatcher.slots()[s].check_hung_stepped() {
                    // The slot answered the call it ran: nothing ends it any more.
                    self.nodes[n].running[s] = None;
                    self.end_ns = self.now;
                    self.collect_answered(n);
                }
            }
        }
        if self
            .nodes
            .iter()
            .any(|n| !n.down && n.running.iter().any(Option::is_some))
        {
            self.watch();
        }
    }

    /// Reads every answer a node has sent its queued calls (a failed slot answers
    /// them all at once).
    fn collect_answered(&mut self, node: usize) {
        for call in 0..self.records.len() as u32 {
            let c = call as usize;
            if self.records[c].node != node as u32 || self.records[c].answered() {
                continue;
            }
            let Some(rx) = self.pending[c].reply.as_mut() else {
                continue;
            };
            if let Ok(answer) = rx.try_recv() {
                self.pending[c].reply = None;
                self.records[c].answer(&answer, self.now);
                self.leave_node();
                self.answered(call);
            }
        }
    }

    /// Lets an idle slot take its next call, and starts its device on it.
    fn step(&mut self, node: usize, slot: usize) {
        loop {
            let n = &self.nodes[node];
            if n.running[slot].is_some() {
                return;
            }
            match n.dispatcher.slots()[slot].take_next() {
                Step::Idle => return,
                Step::RefusedLate { params } => self.collect(call_of(&params)),
                Step::Began(taken) => {
                    let call = call_of(&taken.call().params);
                    if taken.call().deadline.passed(self.clock.now()) {
                        // The slot answers it without running it: no device time.
                        n.dispatcher.slots()[slot].finish_taken(taken);
                        self.collect(call);
                        continue;
                    }
                    if n.hung[slot] {
                        // Its device never ends it: the watchdog's to find.
                        self.nodes[node].running[slot] = Some(taken);
                        self.watch();
                        return;
                    }
                    let r = &self.records[call as usize];
                    let service = &self.sc.accelerators[r.accel as usize].service;
                    let s = service_ns(service, r.bytes, &mut self.rng);
                    let mut end = self.now + s;
                    if self.sc.node.ingestion == Ingestion::Immediate && r.fragments > 1 {
                        // The slot holds the call until its last piece is in.
                        end = end.max(r.whole_ns + s / u64::from(r.fragments));
                    }
                    self.nodes[node].running[slot] = Some(taken);
                    let (node, slot) = (node as u32, slot as u32);
                    self.schedule(end, Event::Done { node, slot, call });
                    self.watch();
                    return;
                }
            }
        }
    }

    fn done(&mut self, node: u32, slot: u32, call: u32) {
        let (n, s) = (node as usize, slot as usize);
        if self.nodes[n].down || self.nodes[n].hung[s] {
            return; // lost with its node, or never ends
        }
        let runs = self.nodes[n].running[s].as_ref();
        if runs.is_none_or(|t| call_of(&t.call().params) != call) {
            return; // the watchdog gave up on it: answered already
        }
        let taken = self.nodes[n].running[s]
            .take()
            .expect("a slot's device ends only the call it runs");
        let call = call_of(&taken.call().params);
        self.nodes[n].dispatcher.slots()[s].finish_taken(taken);
        self.collect(call);
        self.step(n, s);
        self.load_when_drained(n, s);
    }

    /// Tells the slots of a reconfiguration to load its accelerator: the node closes
    /// them, lets their queues drain, and the device takes `reconfig_time_us`.
    fn reconfigure(&mut self, index: usize) {
        let r = &self.sc.reconfigurations[index];
        let a = self
            .sc
            .accelerators
            .iter()
            .position(|x| x.name == r.accelerator)
            .expect("validated");
        let nodes: Vec<usize> = match r.node {
            Some(n) => vec![n],
            None => (0..self.nodes.len()).collect(),
        };
        let slot = r.slot;
        for n in nodes {
            let node = &mut self.nodes[n];
            if node.down || node.loading[slot].is_some() {
                continue;
            }
            let accel = Arc::clone(&self.accels[a]);
            let image = Arc::new(SimImage {
                accel: Arc::clone(&accel),
                inline: self.sc.accelerators[a].inline,
            });
            // Refused (already loading): the request is dropped, as the node answers it.
            let Ok(load) = node.dispatcher.slots()[slot].begin_load(accel, image) else {
                continue;
            };
            node.slots_of
                .iter_mut()
                .for_each(|v| v.retain(|&s| s as usize != slot));
            node.loading[slot] = Some((load, a as u32, false));
            self.load_when_drained(n, slot);
        }
    }

    /// Schedules the end of a slot's load once its calls have all ended.
    fn load_when_drained(&mut self, n: usize, s: usize) {
        let node = &mut self.nodes[n];
        let Some((_, _, scheduled)) = &mut node.loading[s] else {
            return;
        };
        if *scheduled || node.running[s].is_some() || !node.dispatcher.slots()[s].drained() {
            return;
        }
        *scheduled = true;
        let at = self.now + (self.sc.node.reconfig_time_us * 1000.0).round() as u64;
        let (node, slot) = (n as u32, s as u32);
        self.schedule(at, Event::Loaded { node, slot });
    }

    fn loaded(&mut self, n: usize, s: usize) {
        let node = &mut self.nodes[n];
        if node.down {
            return;
        }
        let (load, a, scheduled) = node.loading[s].take().expect("a load under way");
        debug_assert!(scheduled);
        node.dispatcher.slots()[s].finish_load(load);
        node.slots_of[a as usize].push(s as u32);
        node.reconfigurations += 1;
        self.step(n, s);
    }

    /// Reads the answer the node sent a queued call.
    fn collect(&mut self, call: u32) {
        let rx = self.pending[call as usize]
            .reply
            .as_mut()
            .expect("a queued call has its channel");
        let answer = rx.try_recv().expect("the slot answered the call");
        self.pending[call as usize].reply = None;
        self.records[call as usize].answer(&answer, self.now);
        self.leave_node();
        self.answered(call);
    }

    /// A call has its answer (or is lost): a closed-loop client sends its next one.
    fn answered(&mut self, call: u32) {
        let r = &self.records[call as usize];
        let mut back = r.end_ns + (self.sc.network.latency_us * 1000.0).round() as u64;
        if let Some(jitter) = &self.sc.network.jitter {
            back += service_ns(jitter, 0, &mut self.rng);
        }
        let r = &self.records[call as usize];
        let client = r.client;
        self.records[call as usize].reply_ns = back;
        if let Some(at) = self.clients.answered(client, back) {
            self.schedule(at.max(self.now), Event::Issue { client });
        }
    }

    fn lose(&mut self, call: u32) {
        self.records[call as usize].answer_lost(self.now);
        self.pending[call as usize] = Pending::default();
        self.answered(call);
    }

    fn failure(&mut self, index: usize) {
        match self.sc.failures[index] {
            Failure::SlotHang { node, slot, .. } => self.nodes[node].hung[slot] = true,
            Failure::NodeLoss { node, .. } => {
                self.nodes[node].down = true;
                self.clients.node_down(node);
                let n = &mut self.nodes[node];
                n.dispatcher.abandon_all("node lost");
                n.running.iter_mut().for_each(|r| *r = None);
                let lost: Vec<u32> = (0..self.records.len() as u32)
                    .filter(|&c| {
                        let r = &self.records[c as usize];
                        r.node == node as u32
                            && !r.answered()
                            && self.pending[c as usize].reply.is_some()
                    })
                    .collect();
                for call in lost {
                    self.leave_node();
                    self.lose(call);
                }
            }
        }
    }

    fn enter_node(&mut self, call: u32) {
        self.records[call as usize].entered = true;
        self.in_node += 1;
    }

    fn leave_node(&mut self) {
        debug_assert!(self.in_node > 0, "a call leaves a node it entered");
        self.in_node -= 1;
    }

    /// Calls still unanswered when nothing else can happen (a hung slot's) count as
    /// lost at the end of the run.
    fn finish(mut self) -> Run {
        let end = self.end_ns;
        for call in 0..self.records.len() as u32 {
            if !self.records[call as usize].answered() {
                if self.pending[call as usize].reply.is_some() {
                    self.leave_node();
                }
                self.records[call as usize].answer_lost(end);
            }
        }
        debug_assert_eq!(self.in_node, 0, "every call left its node");
        let reconfigurations = self.nodes.iter().map(|n| n.reconfigurations).sum();
        let slot_busy_ns = self
            .nodes
            .iter()
            .flat_map(|n| {
                let slots = n.dispatcher.slots().iter();
                slots
                    .zip(&n.inline_busy_ns)
                    .map(|(s, i)| s.info().busy_ns + i)
            })
            .collect();
        Run {
            records: self.records,
            end_ns: end,
            in_node_area: self.in_node_area,
            slot_busy_ns,
            slots_per_node: self.nodes[0].running.len(),
            accelerators: self.accels.len(),
            reconfigurations,
        }
    }
}

fn build_node(
    sc: &Scenario,
    accels: &[Arc<dyn Accelerator>],
    clock: &Arc<VirtualClock>,
    metrics: &Metrics,
) -> SimNode {
    let n = &sc.node;
    let index_of = |name: &str| {
        sc.accelerators
            .iter()
            .position(|a| a.name == name)
            .expect("validated")
    };
    let mut plans = Vec::new();
    let mut slots_of = vec![Vec::new(); accels.len()];
    for s in &n.slots {
        let a = index_of(&s.accelerator);
        for _ in 0..s.count {
            slots_of[a].push(plans.len() as u32);
            plans.push(SlotPlan {
                device: "sim".to_string(),
                backend: BackendKind::Cpu,
                accel: Arc::clone(&accels[a]),
                image: Arc::new(SimImage {
                    accel: Arc::clone(&accels[a]),
                    inline: sc.accelerators[a].inline,
                }),
            });
        }
    }
    let limits = SlotLimits {
        queue_depth_max: n.queue_depth_max,
        tenant_share_max: n.tenant_share_max.min(n.queue_depth_max),
        inline_work_max: n.inline_work_max,
        hand_over_wait: Duration::ZERO,
        reconfig_delay: Duration::ZERO,
        simulated_exec: Duration::ZERO,
        worker_nice: 0,
        worker_policy: WorkerPolicy::Inherit,
        kernel_timeout: Duration::from_millis(n.kernel_timeout_ms),
        queue_wait_factor: n.queue_wait_factor,
        queue_wait_floor: Duration::from_micros(n.queue_wait_floor_us),
    };
    let slots = plans.len();
    let catalog = Catalog::new(accels.to_vec());
    let clock: Arc<dyn Clock> = Arc::clone(clock) as Arc<dyn Clock>;
    let dispatcher = Dispatcher::unstarted(catalog, plans, limits, n.policy, metrics, clock);
    let pools = match n.reassembly_layout {
        PoolLayout::Shared => vec![pool(n.reassembly_buffers, sc)],
        PoolLayout::PerAccelerator => (0..accels.len())
            .map(|_| pool(n.reassembly_buffers / accels.len(), sc))
            .collect(),
    };
    SimNode {
        dispatcher,
        pools,
        running: (0..slots).map(|_| None).collect(),
        loading: (0..slots).map(|_| None).collect(),
        reconfigurations: 0,
        hung: vec![false; slots],
        slots_of,
        down: false,
        net: (0..n.io_threads).map(|_| NetThread::default()).collect(),
        inline_busy_ns: vec![0; slots],
    }
}

fn pool(buffers: usize, sc: &Scenario) -> Arc<ReassemblyPool> {
    ReassemblyPool::new(
        buffers,
        sc.node.reassembly_buffer_bytes,
        sc.node.reassembly_policy,
        Gauge::default(),
    )
}

/// The call a slot hands back, by the number the engine wrote in its parameters.
fn call_of(params: &accel::ParamBlock) -> u32 {
    u32::from_le_bytes(params[..4].try_into().expect("4 bytes"))
}

pub fn secs_ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}
