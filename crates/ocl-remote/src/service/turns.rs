//! Whose job a device runs next: fair shares of device time between the device's
//! users, for the device queue ([`super::worker`]) to follow.
//!
//! A *flow* is one user of a device ([`Flow`]): the node's own OpenCL slots, a tenant's
//! remote sessions, or one session of a client without a tenant. Each flow has its own
//! FIFO of jobs, so a flow's jobs start in the order they came (an OpenCL in-order
//! queue's order, and a client's flush order, are kept). Between flows the device goes
//! to the waiting flow that has used the least device time (start-time fair queuing over
//! the time each job took, all flows weighted alike): a flow whose jobs are long gets
//! fewer of them, not more of the device. A per-call FIFO gave a remote client whose
//! tasks cost four times a slot call four fifths of the device.
//!
//! Most users wait for each job before sending the next (a slot's HTTP caller, an OpenCL
//! program that reads its results), so right after its job a flow has nothing queued,
//! and a device that went to whoever waits would serve the flows in alternation — by
//! jobs again. So when a flow that is behind every other flow the device knows ends a
//! job with nothing queued, the device waits for that flow's next job (the anticipatory
//! scheduling of disk schedulers), up to [`Turns::new`]'s bound, if the flow's mean
//! *think time* (how long it took to come back before) is within that bound. The wait
//! is charged to the flow as device time: a flow cannot hold the device idle at the
//! others' expense, and each flow gets its share of the device's time, waits for it
//! included. A flow that comes back sooner ends the wait sooner, and is charged less.
//!
//! Think time is learnt only from returns during which no other flow's job ran: on a
//! CPU device (PoCL) another flow's kernel takes the very cores a slot call's HTTP work
//! needs, and the call came back only after that kernel — which says nothing about how
//! soon it comes back while the device waits for it. A wait in vain counts as a return
//! after twice the bound; a flow not waited for forgets a quarter of its think time at
//! each job, so that it is waited for again after a few.
//!
//! A flow back from idle, or new, starts at most [`CREDIT_MAX_NS`] behind the device's
//! virtual clock: an idle flow does not bank device time to take it all at once later,
//! but a closed-loop user that other flows' kernels held back for a while gets that
//! time back.
//!
//! Not for: threads, waiting or running jobs (the device queue does those under its
//! lock and gives this module the time, so it is tested with a clock of its own).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How far behind the device's virtual clock a flow back from idle may start (ns): ten
/// of the remote tasks of the tests' worth, so that a closed-loop user that other flows'
/// jobs held back keeps its place, but a flow idle for minutes does not own the device
/// for minutes (at most this long, once, while others wait).
pub(crate) const CREDIT_MAX_NS: u64 = 50_000_000;

/// How long a device waits for a flow expected back at most ([`Turns::new`]); a flow
/// whose mean think time is longer is not waited for. A closed-loop user's think time is
/// its round trip between two jobs (an HTTP call's answer and the next request; an
/// OpenCL program's `TaskDone` and its next flush): tens of microseconds to a few
/// milliseconds on a loaded host. The wait ends when the flow's job comes; a flow that
/// has stopped costs the device one wait, charged to it.
pub(crate) const ANTICIPATION_MAX: Duration = Duration::from_millis(10);

/// Flows kept while idle (with their device time and think time) at most; past it,
/// idle flows are forgotten: back, they start at the floor, and are waited for until
/// their think time is known again.
const IDLE_FLOWS_MAX: usize = 256;

/// Who a job belongs to, for the device's fair shares.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Flow {
    /// The node's own OpenCL slots on the device ([`super::DeviceLane`]), all of them
    /// and all their callers together (the slots share their time between tenants).
    Node,
    /// Every session of one tenant (the service's gate named it).
    Tenant(Arc<str>),
    /// One session of a client without a tenant (no gate), by session number.
    Session(u64),
}

/// What the device should do now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Start the next job of this flow ([`Turns::take`]).
    Run(Flow),
    /// Keep the device for a flow expected back; ask again at this instant at the latest.
    Wait(Instant),
    /// A job runs or the device is held; ask again when it ends.
    Busy,
    /// No job waits.
    Idle,
}

struct FlowState<J> {
    /// Queued jobs with their arrival number (ties go to the earlier arrival).
    jobs: VecDeque<(u64, J)>,
    /// Device time charged to the flow, on the device's virtual clock (ns).
    used_ns: u64,
    /// When the flow's last job ended.
    last_end: Option<Instant>,
    /// Mean time between the end of the flow's job and its next job (ns), when no
    /// other flow's job ran meanwhile (see `push`).
    think_ns: u64,
    /// The device's `starts` when the flow's last job ended.
    starts_at_end: u64,
}

enum Running {
    /// A job of this flow runs since then.
    Job(Flow, Instant),
    /// A task queued on another device holds this one (see `DeviceQueue::hold`).
    Held,
}

/// The device kept for a flow expected back.
struct Anticipation {
    flow: Flow,
    since: Instant,
    until: Instant,
}

/// The jobs waiting for one device, by flow, and whose turn it is.
pub(crate) struct Turns<J> {
    flows: HashMap<Flow, FlowState<J>>,
    /// Jobs queued over all flows.
    waiting: usize,
    /// Jobs ever queued: the next arrival number.
    arrivals: u64,
    /// The device's virtual clock: the largest `used_ns` a job started at.
    clock_ns: u64,
    /// Jobs ever started.
    starts: u64,
    running: Option<Running>,
    anticipating: Option<Anticipation>,
    anticipation: Duration,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<J> Turns<J> {
    /// `anticipation`: how long the device may wait for a flow expected back at most
    /// ([`ANTICIPATION_MAX`] in the service; zero: never, the device then goes to
    /// whoever waits, by least device time).
    pub fn new(anticipation: Duration) -> Turns<J> {
        Turns {
            flows: HashMap::new(),
            waiting: 0,
            arrivals: 0,
            clock_ns: 0,
            starts: 0,
            running: None,
            anticipating: None,
            anticipation,
        }
    }

    /// Jobs queued over all flows.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// A job runs or the device is held.
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Whether one more job of `flow` fits: a flow with nothing queued always gets one
    /// in, so that no flow waits for room behind another's backlog; otherwise the
    /// device's bound `depth_max` counts the jobs of all flows. At most `depth_max`
    /// plus one per flow thus wait.
    pub fn admits(&self, flow: &Flow, depth_max: usize) -> bool {
        let queued = self.flows.get(flow).map_or(0, |f| f.jobs.len());
        queued == 0 || self.waiting < depth_max
    }

    /// Queues `job` of `flow`, which arrives `now`.
    pub fn push(&mut self, flow: Flow, job: J, now: Instant) {
        let running_here = matches!(&self.running, Some(Running::Job(f, _)) if *f == flow);
        let floor = self.clock_ns.saturating_sub(CREDIT_MAX_NS);
        // A new flow, or one back from idle that was forgotten (see `forget_idle`).
        let f = self.flows.entry(flow).or_insert_with(|| FlowState {
            jobs: VecDeque::new(),
            used_ns: floor,
            last_end: None,
            think_ns: 0,
            starts_at_end: 0,
        });
        if f.jobs.is_empty() && !running_here {
            // The flow comes back from idle: learn how long it stayed away, if no other
            // flow's job ran meanwhile (on a CPU device such a job takes the cores the
            // flow's own host work needs, and says nothing about how soon it comes back
            // when waited for), and let it keep at most CREDIT_MAX_NS of the time it did
            // not use.
            if let Some(end) = f.last_end.filter(|_| f.starts_at_end == self.starts) {
                // A gap past twice the longest wait says only "does not come back in
                // time"; capped, a flow that starts a closed loop is waited for soon.
                let gap = ns(now.saturating_duration_since(end));
                let think = gap.min(2 * ns(self.anticipation));
                f.think_ns = (f.think_ns * 3 + think) / 4;
            }
            f.used_ns = f.used_ns.max(floor);
        }
        f.jobs.push_back((self.arrivals, job));
        self.arrivals += 1;
        self.waiting += 1;
        self.debug_check();
    }

    /// What the device should do at `now`. Ends an anticipation whose time is up, or
    /// whose flow is no longer behind every flow that waits (its wait is charged to it).
    pub fn next(&mut self, now: Instant) -> Next {
        if self.running.is_some() {
            return Next::Busy;
        }
        if let Some(a) = &self.anticipating {
            let f = &self.flows[&a.flow];
            if !f.jobs.is_empty() {
                return Next::Run(a.flow.clone());
            }
            if now < a.until && self.least_other_waiting(&a.flow) > f.used_ns {
                return Next::Wait(a.until);
            }
            let expired = now >= a.until;
            let flow = a.flow.clone();
            self.end_anticipation(now);
            if expired {
                // It did not come back within the longest wait.
                let twice = 2 * ns(self.anticipation);
                if let Some(f) = self.flows.get_mut(&flow) {
                    f.think_ns = f.think_ns.max(twice);
                }
            }
        }
        self.flows
            .iter()
            .filter_map(|(flow, f)| f.jobs.front().map(|(seq, _)| (f.used_ns, *seq, flow)))
            .min_by_key(|&(used, seq, _)| (used, seq))
            .map_or(Next::Idle, |(_, _, flow)| Next::Run(flow.clone()))
    }

    /// The least device time among the flows other than `flow` that have jobs queued
    /// (`u64::MAX`: none).
    fn least_other_waiting(&self, flow: &Flow) -> u64 {
        self.flows
            .iter()
            .filter(|(other, o)| *other != flow && !o.jobs.is_empty())
            .map(|(_, o)| o.used_ns)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Starts the next job of `flow` (which [`Turns::next`] named) at `now`.
    pub fn take(&mut self, flow: &Flow, now: Instant) -> J {
        assert!(self.running.is_none(), "one job at a time");
        if self.anticipating.as_ref().is_some_and(|a| a.flow == *flow) {
            self.end_anticipation(now);
        }
        debug_assert!(
            self.anticipating.is_none(),
            "the device waits for another flow"
        );
        let f = self.flows.get_mut(flow).expect("a flow with a job");
        let (_, job) = f.jobs.pop_front().expect("a flow with a job");
        self.clock_ns = self.clock_ns.max(f.used_ns);
        self.waiting -= 1;
        self.starts += 1;
        self.running = Some(Running::Job(flow.clone(), now));
        self.debug_check();
        job
    }

    /// Takes the device for a task of another device (waits for nothing: the caller
    /// checked that no job runs).
    pub fn hold(&mut self) {
        assert!(self.running.is_none(), "held while a job runs");
        self.running = Some(Running::Held);
    }

    /// The running job ended, or the hold was released, at `now`: the job's flow is
    /// charged its time, and the device waits for that flow if it is behind the flows
    /// that wait and usually comes back in time.
    pub fn finish(&mut self, now: Instant) {
        let Some(Running::Job(flow, started)) = self.running.take() else {
            return;
        };
        let f = self.flows.get_mut(&flow).expect("the running job's flow");
        f.used_ns = f
            .used_ns
            .saturating_add(ns(now.saturating_duration_since(started)));
        f.last_end = Some(now);
        f.starts_at_end = self.starts;
        let (used, think, queued) = (f.used_ns, f.think_ns, !f.jobs.is_empty());
        // Behind every other flow the device knows (those that wait, and those between
        // two jobs of their own, as this one is).
        let least_other = self
            .flows
            .iter()
            .filter(|(other, _)| **other != flow)
            .map(|(_, o)| o.used_ns)
            .min();
        let behind = least_other.is_some_and(|least| used < least);
        let max = ns(self.anticipation);
        if !queued && behind && think <= max {
            self.anticipating = Some(Anticipation {
                flow,
                since: now,
                until: now + self.anticipation,
            });
        } else if !queued && behind {
            // Not waited for as it came back late: forget that a little at each job,
            // so that it is waited for again after a few (a closed loop that other
            // flows' jobs slowed comes back soon once the device waits for it).
            let f = self.flows.get_mut(&flow).expect("the running job's flow");
            f.think_ns = f.think_ns / 4 * 3;
        }
        self.forget_idle();
        self.debug_check();
    }

    fn end_anticipation(&mut self, at: Instant) {
        let Some(a) = self.anticipating.take() else {
            return;
        };
        let at = at.min(a.until);
        if let Some(f) = self.flows.get_mut(&a.flow) {
            f.used_ns = f
                .used_ns
                .saturating_add(ns(at.saturating_duration_since(a.since)));
        }
    }

    /// Forgets the idle flows once there are more than [`IDLE_FLOWS_MAX`] of them (a
    /// flow keeps its think time while it is known; its device time is raised to the
    /// floor when it comes back anyway).
    fn forget_idle(&mut self) {
        if self.flows.len() <= IDLE_FLOWS_MAX + self.waiting {
            return;
        }
        let running = match &self.running {
            Some(Running::Job(f, _)) => Some(f.clone()),
            _ => None,
        };
        let anticipated = self.anticipating.as_ref().map(|a| a.flow.clone());
        self.flows.retain(|flow, f| {
            !f.jobs.is_empty()
                || running.as_ref() == Some(flow)
                || anticipated.as_ref() == Some(flow)
        });
    }

    /// The invariants, in debug builds: the count of waiting jobs; the device waits for
    /// a flow only while no job runs; the flows in use are known.
    fn debug_check(&self) {
        debug_assert_eq!(
            self.waiting,
            self.flows.values().map(|f| f.jobs.len()).sum::<usize>()
        );
        debug_assert!(
            self.anticipating.is_none() || !matches!(self.running, Some(Running::Job(..)))
        );
        if let Some(Running::Job(flow, _)) = &self.running {
            debug_assert!(self.flows.contains_key(flow));
        }
        if let Some(a) = &self.anticipating {
            debug_assert!(self.flows.contains_key(&a.flow) && a.since <= a.until);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A user of the simulated device: its jobs take `job_ns`; `think_ns: None` keeps
    /// jobs queued all the time (a pipelining client), `Some(t)` sends its next job `t`
    /// after the previous one ended (a closed loop).
    struct User {
        flow: Flow,
        job_ns: u64,
        think_ns: Option<u64>,
    }

    /// What each user got: device time charged, jobs run.
    #[derive(Debug, Default, Clone, Copy)]
    struct Got {
        busy_ns: u64,
        jobs: u64,
    }

    /// Runs `users` on one device for `span_ns` of simulated time; every job is a
    /// (user, sequence number) pair, checked to run once and in its user's order.
    fn simulate(users: &[User], anticipation: Duration, span_ns: u64) -> Vec<Got> {
        let t0 = Instant::now();
        let at = |ns: u64| t0 + Duration::from_nanos(ns);
        let mut turns: Turns<(usize, u64)> = Turns::new(anticipation);
        let mut sent = vec![0u64; users.len()];
        let mut ran = vec![0u64; users.len()];
        let mut got = vec![Got::default(); users.len()];
        // Closed-loop users' next arrival (ns).
        let mut arrives: Vec<Option<u64>> = vec![None; users.len()];
        let mut send = |turns: &mut Turns<_>, u: usize, now: u64| {
            turns.push(users[u].flow.clone(), (u, sent[u]), at(now));
            sent[u] += 1;
        };
        for (u, user) in users.iter().enumerate() {
            let n = if user.think_ns.is_none() { 2 } else { 1 };
            (0..n).for_each(|_| send(&mut turns, u, 0));
        }
        let mut now = 0u64;
        while now < span_ns {
            for (u, a) in arrives.iter_mut().enumerate() {
                if a.is_some_and(|t| t <= now) {
                    *a = None;
                    send(&mut turns, u, now);
                }
            }
            let next_arrival = arrives.iter().flatten().min().copied();
            match turns.next(at(now)) {
                Next::Run(flow) => {
                    let (u, seq) = turns.take(&flow, at(now));
                    assert_eq!(users[u].flow, flow, "a job runs in its own flow");
                    assert_eq!(seq, ran[u], "a user's jobs run once each, in order");
                    ran[u] += 1;
                    if users[u].think_ns.is_none() {
                        send(&mut turns, u, now);
                    }
                    now += users[u].job_ns;
                    turns.finish(at(now));
                    got[u].busy_ns += users[u].job_ns;
                    got[u].jobs += 1;
                    if let Some(think) = users[u].think_ns {
                        arrives[u] = Some(now + think);
                    }
                }
                Next::Wait(until) => {
                    let until = ns(until - t0);
                    assert!(until > now, "a wait ends in the future");
                    now = next_arrival.map_or(until, |a| a.min(until));
                }
                Next::Idle => now = next_arrival.expect("someone comes back"),
                Next::Busy => panic!("nothing runs between take and finish"),
            }
        }
        got
    }

    fn share(got: &[Got], u: usize) -> f64 {
        got[u].busy_ns as f64 / got.iter().map(|g| g.busy_ns).sum::<u64>() as f64
    }

    fn user(flow: Flow, job_ns: u64, think_ns: Option<u64>) -> User {
        User {
            flow,
            job_ns,
            think_ns,
        }
    }

    #[test]
    fn long_jobs_get_fewer_turns_not_more_of_the_device() {
        let users = [
            user(Flow::Session(1), 4 * MS, None),
            user(Flow::Node, MS / 2, None),
        ];
        let got = simulate(&users, ANTICIPATION_MAX, 2_000 * MS);
        assert!((share(&got, 0) - 0.5).abs() < 0.01, "{got:?}");
        assert!(got[1].jobs > 7 * got[0].jobs, "{got:?}");
    }

    #[test]
    fn a_closed_loop_user_keeps_its_share_against_a_pipelining_one() {
        // The slot calls of the sharing test: a short job, then a round trip away.
        let users = [
            user(Flow::Node, 300_000, Some(200_000)),
            user(Flow::Tenant("greedy".into()), 2 * MS, None),
        ];
        let got = simulate(&users, ANTICIPATION_MAX, 2_000 * MS);
        let node_time = got[0].jobs * 500_000;
        assert!(
            node_time as f64 / (2_000 * MS) as f64 > 0.45,
            "waiting for the closed loop gives it half the device: {got:?}"
        );
        // Without the wait the device alternates, by jobs: the closed loop gets a job per
        // greedy job, a sixth of the device's time.
        let alternating = simulate(&users, Duration::ZERO, 2_000 * MS);
        assert!(share(&alternating, 0) < 0.2, "{alternating:?}");
        assert!(alternating[0].jobs.abs_diff(alternating[1].jobs) <= 1);
    }

    #[test]
    fn a_pipelining_user_keeps_its_share_against_closed_loops() {
        // Slot calls from many connections at once against one remote program that
        // waits for each task: the program still gets its half.
        let users = [
            user(Flow::Node, 300_000, None),
            user(Flow::Session(7), 2 * MS, Some(100_000)),
        ];
        let got = simulate(&users, ANTICIPATION_MAX, 2_000 * MS);
        let remote_time = got[1].jobs * 2_100_000;
        assert!(remote_time as f64 / (2_000 * MS) as f64 > 0.45, "{got:?}");
    }

    #[test]
    fn a_user_that_comes_back_late_is_seldom_waited_for() {
        // One call every 50 ms next to a pipelining user: after a wait in vain, the
        // device waits for it again only every fourth call or so (10 ms of 200).
        let users = [
            user(Flow::Node, MS, Some(50 * MS)),
            user(Flow::Session(3), 2 * MS, None),
        ];
        let span = 2_000 * MS;
        let got = simulate(&users, ANTICIPATION_MAX, span);
        let busy: u64 = got.iter().map(|g| g.busy_ns).sum();
        assert!(busy as f64 > 0.93 * span as f64, "{got:?}");
        assert!(got[0].jobs >= 35, "its calls still run: {got:?}");
    }

    #[test]
    fn a_user_that_does_not_come_back_in_time_is_charged_the_wait() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut turns = Turns::new(Duration::from_millis(1));
        turns.push(Flow::Session(1), 'a', ms(0));
        turns.push(Flow::Node, 'b', ms(0));
        assert_eq!(
            turns.next(ms(0)),
            Next::Run(Flow::Session(1)),
            "the first to come"
        );
        assert_eq!(turns.take(&Flow::Session(1), ms(0)), 'a');
        turns.push(Flow::Session(1), 'c', ms(1));
        turns.finish(ms(4));
        assert_eq!(
            turns.next(ms(4)),
            Next::Run(Flow::Node),
            "0 ms used against 4"
        );
        assert_eq!(turns.take(&Flow::Node, ms(4)), 'b');
        turns.finish(ms(5));
        // The node used 1 ms, the session 4: the device keeps the node's turn.
        assert_eq!(turns.next(ms(5)), Next::Wait(ms(6)));
        assert_eq!(
            turns.next(ms(6)),
            Next::Run(Flow::Session(1)),
            "the wait is over"
        );
        assert_eq!(
            turns.flows[&Flow::Node].used_ns,
            2 * MS,
            "the job and the wait"
        );
        assert_eq!(turns.take(&Flow::Session(1), ms(6)), 'c');
        turns.finish(ms(7));
        // Back: the node's job goes before the session's, which came first.
        turns.push(Flow::Session(1), 'd', ms(7));
        turns.push(Flow::Node, 'e', ms(8));
        assert_eq!(turns.next(ms(8)), Next::Run(Flow::Node));
    }

    #[test]
    fn a_user_behind_no_longer_is_not_waited_for() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut turns = Turns::new(ANTICIPATION_MAX);
        turns.push(Flow::Session(1), 1, ms(0));
        assert_eq!(turns.take(&Flow::Session(1), ms(0)), 1);
        turns.push(Flow::Session(1), 2, ms(0));
        turns.push(Flow::Node, 3, ms(0));
        turns.finish(ms(3));
        assert_eq!(turns.next(ms(3)), Next::Run(Flow::Node));
        assert_eq!(turns.take(&Flow::Node, ms(3)), 3);
        turns.finish(ms(4));
        // The node (1 ms) waits behind the session (3 ms): kept for it.
        assert_eq!(turns.next(ms(4)), Next::Wait(ms(4) + ANTICIPATION_MAX));
        // A third user with nothing used comes: the node is no longer behind it all.
        turns.push(Flow::Session(2), 4, ms(4));
        assert_eq!(turns.next(ms(4)), Next::Run(Flow::Session(2)));
    }

    #[test]
    fn an_idle_user_comes_back_with_bounded_credit() {
        let t0 = Instant::now();
        let at = |ns: u64| t0 + Duration::from_nanos(ns);
        let mut turns = Turns::new(Duration::ZERO);
        let run = |turns: &mut Turns<u64>, flow: Flow, now: &mut u64| {
            turns.push(flow.clone(), 0, at(*now));
            let next = turns.next(at(*now));
            if next != Next::Run(flow.clone()) {
                return Some(next);
            }
            turns.take(&flow, at(*now));
            *now += MS;
            turns.finish(at(*now));
            None
        };
        let mut now = 0;
        assert_eq!(run(&mut turns, Flow::Node, &mut now), None);
        // The session alone for a second.
        for _ in 0..1000 {
            assert_eq!(run(&mut turns, Flow::Session(1), &mut now), None);
        }
        // Both have work: the node, back, goes first, until its credit is used up.
        turns.push(Flow::Session(1), 0, at(now));
        let mut node_ns = 0;
        while run(&mut turns, Flow::Node, &mut now).is_none() {
            node_ns += MS;
        }
        assert!(node_ns >= CREDIT_MAX_NS, "{node_ns}");
        assert!(node_ns <= CREDIT_MAX_NS + MS, "{node_ns}");
    }

    #[test]
    fn a_user_with_nothing_queued_always_gets_in() {
        let now = Instant::now();
        let mut turns = Turns::new(ANTICIPATION_MAX);
        for i in 0..4 {
            assert!(turns.admits(&Flow::Session(1), 4));
            turns.push(Flow::Session(1), i, now);
        }
        assert!(!turns.admits(&Flow::Session(1), 4), "the bound is reached");
        assert!(
            turns.admits(&Flow::Node, 4),
            "another user's first job fits"
        );
        turns.push(Flow::Node, 9, now);
        assert!(!turns.admits(&Flow::Node, 4), "its second does not");
        assert_eq!(turns.waiting(), 5);
    }

    #[test]
    fn idle_users_are_forgotten_past_the_bound() {
        let t0 = Instant::now();
        let mut turns = Turns::new(Duration::ZERO);
        for i in 0..(IDLE_FLOWS_MAX as u64 * 4) {
            // A session that comes, runs one job and goes, over and over.
            turns.push(Flow::Session(i), i, t0);
            assert_eq!(turns.next(t0), Next::Run(Flow::Session(i)));
            let _ = turns.take(&Flow::Session(i), t0);
            turns.finish(t0 + Duration::from_nanos(1));
            assert!(
                turns.flows.len() <= IDLE_FLOWS_MAX + 1,
                "{}",
                turns.flows.len()
            );
        }
    }
}
