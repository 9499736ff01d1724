//! Unit tests of [`super`]: queueing, inline runs, hand-over, speed learning.

use super::*;
use crate::core::clock::SystemClock;
use accel::{Catalog, Descriptor};

/// Panics on a payload starting with `!`, echoes otherwise.
struct Fragile(Descriptor);

impl Accelerator for Fragile {
    fn descriptor(&self) -> &Descriptor {
        &self.0
    }
    fn check(&self, _: &ParamBlock, _: Option<usize>) -> Result<(), CallError> {
        Ok(())
    }
    fn work_estimate(&self, _: &ParamBlock, _: usize) -> u64 {
        0
    }
    fn run(&self, _: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        assert!(!input.starts_with(b"!"), "fragile kernel hit");
        out.clear();
        out.extend_from_slice(input);
        Ok(())
    }
}

fn slot(accel: Arc<dyn Accelerator>, inline_work_max: u64) -> Arc<Slot> {
    slot_with(accel, inline_work_max, Duration::ZERO)
}

fn slot_with(
    accel: Arc<dyn Accelerator>,
    inline_work_max: u64,
    simulated_exec: Duration,
) -> Arc<Slot> {
    slot_limited(
        accel,
        SlotLimits {
            inline_work_max,
            simulated_exec,
            ..limits()
        },
    )
}

/// The tests' bounds: a queue of 4, 2 per tenant, no wait bound.
fn limits() -> SlotLimits {
    SlotLimits {
        queue_depth_max: 4,
        tenant_share_max: 2,
        inline_work_max: 0,
        hand_over_wait: Duration::from_secs(10),
        reconfig_delay: Duration::ZERO,
        simulated_exec: Duration::ZERO,
        worker_nice: 0,
        worker_policy: WorkerPolicy::Normal,
        kernel_timeout: Duration::ZERO,
        queue_wait_factor: 0,
        queue_wait_floor: Duration::ZERO,
    }
}

fn slot_limited(accel: Arc<dyn Accelerator>, limits: SlotLimits) -> Arc<Slot> {
    let metrics = crate::telemetry::metrics::Metrics::new();
    let image = Arc::new(crate::device::cpu::CpuImage(Arc::clone(&accel)));
    let slot = Arc::new(Slot::new(
        0,
        "test",
        BackendKind::Cpu,
        accel,
        image,
        limits,
        metrics.slot(0),
        Arc::default(),
        Arc::new(SystemClock),
    ));
    let worker = Arc::clone(&slot);
    std::thread::spawn(move || worker.run_worker());
    slot
}

fn call(accel: &Arc<dyn Accelerator>, payload: &[u8], tenant: TenantId) -> Call {
    Call {
        accel: Arc::clone(accel),
        params: [0; accel::PARAMS_LEN],
        payload: payload.to_vec(),
        out: Vec::new(),
        received: Instant::now(),
        deadline: Deadline::NONE,
        tenant,
        permit: None,
    }
}

/// The receiver of a call that must have been queued.
fn queued(r: Result<Submitted, Refused>, why: &str) -> oneshot::Receiver<Answer> {
    match r.ok().expect("admitted") {
        Submitted::Queued(rx) => rx,
        Submitted::Done(_) => panic!("{why}"),
    }
}

/// The answer of a call that must have run on the submitting thread (`Done`;
/// `Queued` would leave it to the worker).
fn done(r: Result<Submitted, Refused>, why: &str) -> Answer {
    match r.ok().expect("admitted") {
        Submitted::Done(a) => a,
        Submitted::Queued(_) => panic!("{why}"),
    }
}

/// Marks the slot as running a call expected to take an hour.
fn busy_for_long(s: &Slot) {
    pretend_running(s, Duration::from_secs(3600));
}

/// Marks the slot as running a call (no call: the worker holds back) expected to end
/// `after` from now.
fn pretend_running(s: &Slot, after: Duration) {
    let now = Instant::now();
    s.state.lock().execution = Execution::Running(Running {
        since: now,
        ends: now + after,
        reply: None,
    });
}

/// Ends a call [`pretend_running`] made up, so that the worker may take the next.
fn pretend_idle(s: &Slot) {
    s.state.lock().execution = Execution::Idle;
}

fn wait(s: Submitted) -> Answer {
    match s {
        Submitted::Done(a) => a,
        Submitted::Queued(rx) => rx.blocking_recv().unwrap(),
    }
}

#[test]
fn an_inherited_worker_policy_leaves_the_thread_as_it_was() {
    let seen = std::thread::spawn(|| {
        // SAFETY: plain system calls on this thread's own id.
        unsafe {
            let tid = libc::gettid();
            let param = libc::sched_param { sched_priority: 0 };
            assert_eq!(libc::sched_setscheduler(tid, libc::SCHED_BATCH, &param), 0);
            set_worker_scheduling(WorkerPolicy::Inherit, 5);
            let inherited = libc::sched_getscheduler(tid);
            set_worker_scheduling(WorkerPolicy::Normal, 0);
            (inherited, libc::sched_getscheduler(tid))
        }
    })
    .join()
    .unwrap();
    assert_eq!(seen, (libc::SCHED_BATCH, libc::SCHED_OTHER));
}

#[test]
fn a_simulated_device_time_holds_the_slot_and_never_runs_inline() {
    let d = Descriptor {
        id: 900,
        name: "fragile".into(),
        hash: String::new(),
        params: vec![],
    };
    let accel: Arc<dyn Accelerator> = Arc::new(Fragile(d));
    let floor = Duration::from_millis(30);
    // Cheap enough to run inline, were it not for the simulated time.
    let s = slot_with(Arc::clone(&accel), u64::MAX, floor);
    let t0 = Instant::now();
    let first = queued(s.submit(call(&accel, b"one", 1)), "sleeps: not inline");
    let second = queued(s.submit(call(&accel, b"two", 2)), "slot busy: queued");
    let a = first.blocking_recv().unwrap();
    let b = second.blocking_recv().unwrap();
    assert_eq!((a.status, b.status), (Status::Ok, Status::Ok));
    assert_eq!(b.output, b"two");
    // The device's time, exactly: the kernel is far shorter, and a late wake-up
    // of the worker is not the device's.
    assert_eq!((a.exec_ns, b.exec_ns), (nanos(floor), nanos(floor)));
    // One call at a time: the second waited for the first's whole device time.
    assert!(t0.elapsed() >= 2 * floor, "both done in {:?}", t0.elapsed());
    assert!(b.queue_ns >= nanos(floor) / 2, "queued {} ns", b.queue_ns);
    assert!(s.info().busy_ns >= 2 * nanos(floor));
}

#[test]
fn a_panicking_kernel_fails_its_call_not_the_slot() {
    let d = Descriptor {
        id: 900,
        name: "fragile".into(),
        hash: String::new(),
        params: vec![],
    };
    let accel: Arc<dyn Accelerator> = Arc::new(Fragile(d));
    for inline in [u64::MAX, 0] {
        let s = slot(Arc::clone(&accel), inline);
        let a = wait(s.submit(call(&accel, b"!boom", 1)).ok().unwrap());
        assert_eq!(a.status, Status::Internal);
        assert!(a.message.contains("fragile kernel hit"), "{}", a.message);
        let a = wait(s.submit(call(&accel, b"fine", 1)).ok().unwrap());
        assert_eq!(
            (a.status, a.output.as_slice()),
            (Status::Ok, b"fine".as_slice())
        );
        s.stop();
    }
}

#[test]
fn tenants_share_the_queue_round_robin_and_within_their_share() {
    let catalog = Catalog::builtin();
    let echo = Arc::clone(catalog.by_name("echo").unwrap());
    let s = slot(Arc::clone(&echo), 0);
    // Mark the slot busy, for long, so every call queues.
    busy_for_long(&s);
    let mut rx = Vec::new();
    for (tenant, payload) in [(1, b"a1"), (1, b"a2"), (2, b"b1")] {
        rx.push(queued(
            s.submit(call(&echo, payload, tenant)),
            "slot is busy: must queue",
        ));
    }
    // Tenant 1 is at its share (2): refused BUSY though the queue has room.
    let refused = s.submit(call(&echo, b"a3", 1)).err().unwrap();
    assert_eq!(refused.status, Status::Busy);
    assert!(s.submit(call(&echo, b"b2", 2)).is_ok());
    pretend_idle(&s);
    s.changed.notify_all();
    for r in rx {
        assert_eq!(r.blocking_recv().unwrap().status, Status::Ok);
    }
    s.stop();
}

/// An echo slot (everything cheap) running a call expected to take long, with
/// tenant 1's call `a1` queued behind it.
fn echo_slot_with_backlog() -> (Arc<dyn Accelerator>, Arc<Slot>, oneshot::Receiver<Answer>) {
    let catalog = Catalog::builtin();
    let echo = Arc::clone(catalog.by_name("echo").unwrap());
    let s = slot(Arc::clone(&echo), u64::MAX);
    busy_for_long(&s);
    let backlog = queued(
        s.submit(call(&echo, b"a1", 1)),
        "tenant 1 queues behind the call in progress",
    );
    (echo, s, backlog)
}

#[test]
fn a_cheap_call_without_backlog_runs_on_the_submitting_thread_after_the_current_one() {
    let (echo, s, backlog) = echo_slot_with_backlog();
    // The call in progress is now a cheap one.
    pretend_running(&s, Duration::ZERO);
    // The call in progress ends once tenant 2's call waits for it.
    let ender = {
        let s = Arc::clone(&s);
        std::thread::spawn(move || loop {
            let mut st = s.state.lock();
            if st.queue.tenant_len(2) == 1 {
                st.execution = Execution::Idle;
                drop(st);
                s.changed.notify_all();
                return;
            }
            drop(st);
            std::thread::yield_now();
        })
    };
    let answer = done(
        s.submit(call(&echo, b"b1", 2)),
        "tenant 2's call must run on this thread",
    );
    ender.join().unwrap();
    assert_eq!(
        (answer.status, answer.output.as_slice()),
        (Status::Ok, b"b1".as_slice())
    );
    // The backlog is left to the worker and still answered.
    assert_eq!(backlog.blocking_recv().unwrap().output, b"a1");
    s.stop();
}

#[test]
fn a_cheap_call_without_backlog_goes_before_a_backlog_the_worker_has_not_taken() {
    let (echo, s, backlog) = echo_slot_with_backlog();
    // Then the worker has not taken tenant 1's call yet (held back here by a
    // hand-over in progress, as a starved worker would be).
    let mut st = s.state.lock();
    st.execution = Execution::Idle;
    st.handing_over = 1;
    drop(st);
    let a = done(
        s.submit(call(&echo, b"b1", 2)),
        "tenant 2's call must run on this thread",
    );
    assert_eq!(a.output, b"b1");
    s.state.lock().handing_over = 0;
    s.changed.notify_all();
    assert_eq!(backlog.blocking_recv().unwrap().output, b"a1");
    s.stop();
}

#[test]
fn expected_call_time_follows_measured_speed() {
    let catalog = Catalog::builtin();
    let echo = Arc::clone(catalog.by_name("echo").unwrap());
    let s = slot(Arc::clone(&echo), u64::MAX);
    let work = echo.work_estimate(&[0; accel::PARAMS_LEN], 1600);
    assert_eq!(work, 100, "echo: work = len / 16");
    assert_eq!(s.expected_time(work), Duration::ZERO, "unknown speed");
    s.learn_speed(100, 1_000_000); // 10 µs per unit
    assert_eq!(s.expected_time(work), Duration::from_millis(1));
    for _ in 0..64 {
        s.learn_speed(100, 10_000); // now 100 ns per unit
    }
    let d = s.expected_time(work);
    assert!(d < Duration::from_micros(20), "{d:?}");
    let per_call = s.ns_per_call.load(Ordering::Relaxed);
    s.learn_speed(0, 5_000_000); // no work estimate: no sample of speed
    let d = s.expected_time(work);
    assert!(d < Duration::from_micros(20), "{d:?}");
    // but a sample of the time per call
    let after = s.ns_per_call.load(Ordering::Relaxed);
    assert_eq!(after, per_call - per_call / 8 + 5_000_000 / 8);
    s.stop();
}

#[test]
fn no_hand_over_behind_a_long_call_or_with_a_backlog() {
    let catalog = Catalog::builtin();
    let echo = Arc::clone(catalog.by_name("echo").unwrap());
    let s = slot(Arc::clone(&echo), u64::MAX);
    busy_for_long(&s);
    // Behind a call expected to take long: queued at once (the wait bound is 10 s here).
    let start = Instant::now();
    let rx = queued(s.submit(call(&echo, b"x", 1)), "must queue");
    // A tenant with a backlog queues too, also behind a call about to end.
    pretend_running(&s, Duration::ZERO);
    let rx2 = queued(s.submit(call(&echo, b"y", 1)), "must queue");
    assert!(start.elapsed() < Duration::from_secs(5), "did not wait");
    pretend_idle(&s);
    s.changed.notify_all();
    assert_eq!(rx.blocking_recv().unwrap().output, b"x");
    assert_eq!(rx2.blocking_recv().unwrap().output, b"y");
    s.stop();
}

/// An echo slot whose calls wait at most `factor` times their own execution time (at
/// least `floor`), that takes 10 µs per unit of work (a 1,600-byte call: 1 ms; the
/// mean call so far), with
/// room for 64 calls of any tenant, running a call that ends now; its worker takes
/// nothing until the test lets it.
fn wait_bounded_slot(factor: u32, floor: Duration) -> (Arc<dyn Accelerator>, Arc<Slot>) {
    let catalog = Catalog::builtin();
    let echo = Arc::clone(catalog.by_name("echo").unwrap());
    let s = slot_limited(
        Arc::clone(&echo),
        SlotLimits {
            queue_depth_max: 64,
            tenant_share_max: 64,
            queue_wait_factor: factor,
            queue_wait_floor: floor,
            ..limits()
        },
    );
    s.learn_speed(100, 1_000_000);
    pretend_running(&s, Duration::ZERO);
    (echo, s)
}

/// Submits one call of `payload` for each of tenants 0, 1, … up to `n`, until one is
/// not queued; the receivers of those queued.
fn queue_one_per_tenant(
    s: &Slot,
    echo: &Arc<dyn Accelerator>,
    payload: &[u8],
    n: u64,
) -> Vec<oneshot::Receiver<Answer>> {
    (0..n)
        .map_while(|tenant| match s.submit(call(echo, payload, tenant)) {
            Ok(Submitted::Queued(rx)) => Some(rx),
            _ => None,
        })
        .collect()
}

/// Lets the worker go, and checks every call admitted is answered.
fn release(s: &Slot, admitted: Vec<oneshot::Receiver<Answer>>) {
    pretend_idle(s);
    s.changed.notify_all();
    for rx in admitted {
        assert_eq!(rx.blocking_recv().unwrap().status, Status::Ok);
    }
    s.stop();
}

#[test]
fn a_call_is_refused_when_other_tenants_calls_ahead_would_take_longer_than_its_bound() {
    let (echo, s) = wait_bounded_slot(8, Duration::ZERO);
    let big = vec![b'x'; 1600]; // 1 ms each
    let mut admitted = Vec::new();
    // Tenant 1 pipelines 20 calls: its own backlog is its own to wait for.
    for _ in 0..20 {
        admitted.push(queued(s.submit(call(&echo, &big, 1)), "must queue"));
    }
    // Tenants 2..=9 with a call each: tenant k waits for one call of each tenant
    // that came before it (8 ms = 8 x 1 ms for tenant 9): admitted.
    for tenant in 2..=9 {
        admitted.push(queued(s.submit(call(&echo, &big, tenant)), "must queue"));
    }
    // Tenant 10 would wait for 9 others' calls.
    let refused = s.submit(call(&echo, &big, 10)).err().expect("refused");
    assert_eq!(refused.status, Status::Busy);
    assert_eq!(s.metrics.wait_refusals.get(), 1);
    assert!(!s.has_room(10), "100-continue agrees");
    // Tenant 1's next call waits for 8 others' calls, per 21 of its own: admitted.
    assert!(s.has_room(1));
    // A call of a tenth the work is given the slot's mean call's allowance (8 ms), not
    // its own (0.8 ms): refused as tenant 10's was, for waiting 9 ms.
    let small = vec![b'x'; 160];
    let refused = s.submit(call(&echo, &small, 10)).err().expect("refused");
    assert_eq!(refused.status, Status::Busy);
    assert_eq!(s.metrics.wait_refusals.get(), 2);
    // The queue's depth bound is far: 28 of 64.
    assert_eq!(s.state.lock().queue.len, 28);
    release(&s, admitted);
}

#[test]
fn the_wait_floor_admits_short_calls_and_a_zero_factor_only_the_depth() {
    // With a floor of 20 ms, 0.1 ms calls (the slot's mean) of 64 tenants queue
    // 6.3 ms deep, not 0.8 ms.
    let (echo, s) = wait_bounded_slot(8, Duration::from_millis(20));
    s.ns_per_call.store(100_000, Ordering::Relaxed);
    s.ns_per_work_1024.store(64_000, Ordering::Relaxed);
    let small = vec![b'x'; 160];
    let admitted = queue_one_per_tenant(&s, &echo, &small, 64);
    assert_eq!(admitted.len(), 64, "0.1 ms x 63 ahead is within the floor");
    release(&s, admitted);
    // Factor 0: no wait bound, only the depth (64 calls of 1 ms each).
    let (echo, s) = wait_bounded_slot(0, Duration::ZERO);
    let big = vec![b'x'; 1600];
    let admitted = queue_one_per_tenant(&s, &echo, &big, 65);
    assert_eq!(admitted.len(), 64);
    assert_eq!(s.metrics.wait_refusals.get(), 0);
    release(&s, admitted);
}

#[test]
fn before_the_slot_has_timed_a_call_only_the_depth_bounds_its_queue() {
    let (echo, s) = wait_bounded_slot(8, Duration::ZERO);
    s.ns_per_work_1024.store(0, Ordering::Relaxed);
    s.ns_per_call.store(0, Ordering::Relaxed);
    let big = vec![b'x'; 1600];
    let admitted = queue_one_per_tenant(&s, &echo, &big, 65);
    assert_eq!(admitted.len(), 64);
    release(&s, admitted);
}

#[test]
fn a_queued_call_is_refused_at_its_turn_only_after_more_calls_than_it_was_admitted_to_wait_for() {
    let (echo, s) = wait_bounded_slot(8, Duration::ZERO);
    // A call in progress expected to take an hour refuses nobody: every call on this
    // slot waits for it.
    pretend_running(&s, Duration::from_secs(3600));
    // 1 ms calls: each admitted to wait for 8 calls of others.
    let big = vec![b'x'; 1600];
    // Waiting in wall time alone (a host slow to wake the worker) refuses nothing.
    let slow = queued(s.submit(call(&echo, &big, 1)), "must queue");
    std::thread::sleep(Duration::from_millis(20));
    pretend_idle(&s);
    s.changed.notify_all();
    assert_eq!(slow.blocking_recv().unwrap().status, Status::Ok);
    // Twenty calls started before its turn (tenants that joined the round after it,
    // here made up) do.
    pretend_running(&s, Duration::ZERO);
    let late = queued(s.submit(call(&echo, &big, 1)), "must queue");
    s.state.lock().taken += 20;
    let on_time = queued(s.submit(call(&echo, &big, 2)), "must queue");
    pretend_idle(&s);
    s.changed.notify_all();
    let a = late.blocking_recv().unwrap();
    assert_eq!(a.status, Status::Busy, "{}", a.message);
    assert!(a.message.starts_with("12 more calls"), "{}", a.message);
    assert_eq!(on_time.blocking_recv().unwrap().status, Status::Ok);
    assert_eq!(s.metrics.wait_refusals.get(), 1);
    assert_eq!(s.depth(), 0);
    s.stop();
}

/// A slot of the tests' bounds (a queue of 4, 2 per tenant) hosting echo, without a
/// worker thread: its state changes only where a test changes it.
fn slot_without_worker() -> (Arc<dyn Accelerator>, Slot) {
    let catalog = Catalog::builtin();
    let echo = Arc::clone(catalog.by_name("echo").unwrap());
    let image = Arc::new(crate::device::cpu::CpuImage(Arc::clone(&echo)));
    let metrics = crate::telemetry::metrics::Metrics::new();
    let s = Slot::new(
        0,
        "test",
        BackendKind::Cpu,
        Arc::clone(&echo),
        image,
        limits(),
        metrics.slot(0),
        Arc::default(),
        Arc::new(SystemClock),
    );
    s.check(&s.state.lock());
    (echo, s)
}

/// Queues a call of `tenant` behind the slot's back (no bound applies).
fn push_job(s: &Slot, echo: &Arc<dyn Accelerator>, tenant: TenantId) {
    let job = Job {
        call: call(echo, b"x", tenant),
        reply: oneshot::channel().0,
        work: 0,
        start_by: None,
    };
    s.state.lock().queue.push(tenant, job);
}

#[test]
#[should_panic(expected = "slot 0: 5 calls queued, over queue_depth_max 4")]
fn check_finds_a_queue_over_its_depth() {
    let (echo, s) = slot_without_worker();
    for tenant in 0..5 {
        push_job(&s, &echo, tenant);
    }
    s.check(&s.state.lock());
}

#[test]
#[should_panic(expected = "slot 0: a tenant has Some(3) calls queued, over its share 2")]
fn check_finds_a_tenant_over_its_share() {
    let (echo, s) = slot_without_worker();
    for _ in 0..3 {
        push_job(&s, &echo, 1);
    }
    s.check(&s.state.lock());
}

#[test]
#[should_panic(expected = "slot 0: the lock-free admission flag disagrees with the phase")]
fn check_finds_an_admission_flag_that_disagrees_with_the_phase() {
    let (_, s) = slot_without_worker();
    s.state.lock().phase.stop();
    s.check(&s.state.lock());
}

#[test]
#[should_panic(expected = "slot 0: admits calls for an accelerator it does not host")]
fn check_finds_admission_for_another_accelerator() {
    let (echo, s) = slot_without_worker();
    let other = u32::from(echo.descriptor().id) ^ 1;
    s.admits.store(other | ADMITTING, Ordering::Relaxed);
    s.check(&s.state.lock());
}

#[test]
#[should_panic(expected = "slot 0: the lock-free generation disagrees with the state's")]
fn check_finds_a_generation_that_disagrees() {
    let (_, s) = slot_without_worker();
    s.state.lock().generation += 1;
    s.check(&s.state.lock());
}

#[test]
#[should_panic(expected = "slot 0: a failed slot holds a call")]
fn check_finds_a_call_in_a_failed_slot() {
    let (echo, s) = slot_without_worker();
    push_job(&s, &echo, 1);
    let mut st = s.state.lock();
    st.phase.fail("hung".to_string());
    s.publish_admits(&st);
    s.check(&st);
}

/// Every transition of the phase keeps the invariants with the admission flag it
/// publishes, and ends where the slot's documentation says.
#[test]
fn the_phase_moves_through_its_transitions() {
    let (echo, s) = slot_without_worker();
    let id = echo.descriptor().id;
    let to = || Reconfig {
        from: id,
        to: id,
        to_name: "echo".to_string(),
    };
    let mut st = s.state.lock();
    st.phase.fail("hung".to_string());
    s.publish_admits(&st);
    s.check(&st);
    assert!(!s.admits(id) && st.phase.failed().is_some());
    st.phase.begin_reconfig(to());
    assert!(st.phase.failed().is_some() && st.phase.reconfig().is_some());
    st.phase.stop();
    assert!(st.phase.stopping() && st.phase.reconfig().is_some());
    assert!(st.phase.end_reconfig(), "the load recovers the failed slot");
    assert!(st.phase.stopping() && st.phase.failed().is_none());
    s.publish_admits(&st);
    s.check(&st);
    assert!(!s.admits(id));
    st.phase = Phase::Open;
    st.phase.begin_reconfig(to());
    assert!(!st.phase.end_reconfig(), "nothing to recover");
    s.publish_admits(&st);
    s.check(&st);
    assert!(s.admits(id));
}

#[test]
fn a_slot_runs_under_a_virtual_clock_without_waiting_for_its_simulated_device() {
    use crate::core::clock::VirtualClock;
    let catalog = Catalog::builtin();
    let echo = Arc::clone(catalog.by_name("echo").unwrap());
    let clock = Arc::new(VirtualClock::new());
    let metrics = crate::telemetry::metrics::Metrics::new();
    let limits = SlotLimits {
        simulated_exec: Duration::from_secs(5),
        ..limits()
    };
    let s = Arc::new(Slot::new(
        0,
        "virtual",
        BackendKind::Cpu,
        Arc::clone(&echo),
        Arc::new(crate::device::cpu::CpuImage(Arc::clone(&echo))),
        limits,
        metrics.slot(0),
        Arc::default(),
        Arc::clone(&clock) as Arc<dyn Clock>,
    ));
    let worker = Arc::clone(&s);
    std::thread::spawn(move || worker.run_worker());
    let t0 = clock.now();
    let wall = Instant::now();
    let mut first = call(&echo, b"one", 1);
    first.received = t0;
    let mut second = call(&echo, b"two", 2);
    second.received = t0;
    let (a, b) = (
        s.submit(first).ok().expect("admitted"),
        s.submit(second).ok().expect("admitted"),
    );
    let (a, b) = (wait(a), wait(b));
    assert_eq!(
        (a.output.as_slice(), b.output.as_slice()),
        (&b"one"[..], &b"two"[..])
    );
    // Each call held the simulated device 5 s of the clock's time; the second waited
    // for the first, as calls on one device do.
    assert_eq!(a.exec_ns, 5_000_000_000);
    assert_eq!(b.exec_ns, 5_000_000_000);
    assert_eq!(clock.since(t0), Duration::from_secs(10));
    assert!(
        wall.elapsed() < Duration::from_secs(5),
        "no host time spent: {:?}",
        wall.elapsed()
    );
    s.stop();
}

/// Waits (at most 10 s) until `s` has no call queued or running.
fn wait_idle(s: &Slot) {
    let until = Instant::now() + Duration::from_secs(10);
    while s.depth() > 0 {
        assert!(
            Instant::now() < until,
            "slot still holds {} calls",
            s.depth()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn queued_calls_whose_callers_left_are_withdrawn_without_running() {
    let (echo, s, backlog) = echo_slot_with_backlog();
    let kept = queued(
        s.submit(call(&echo, b"b1", 2)),
        "queued behind the busy slot",
    );
    let left = queued(
        s.submit(call(&echo, b"c1", 3)),
        "queued behind the busy slot",
    );
    assert_eq!(s.withdraw_cancelled(), 0, "no caller has left yet");
    drop(backlog);
    drop(left);
    assert_eq!(s.withdraw_cancelled(), 2, "both calls whose callers left");
    assert_eq!(s.withdraw_cancelled(), 0, "each is withdrawn once");
    assert_eq!(s.info().queue_depth, 1);
    assert_eq!(
        s.depth(),
        1,
        "the one left queued (the call in progress is made up)"
    );
    assert_eq!(s.metrics.cancelled_queued.get(), 2);
    release(&s, vec![kept]);
    // The answer comes before the worker counts the call.
    let until = Instant::now() + Duration::from_secs(10);
    while s.metrics.calls.get() == 0 {
        assert!(Instant::now() < until, "the kept call was never counted");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        s.metrics.calls.get(),
        1,
        "only the call whose caller stayed ran"
    );
    assert_eq!(s.metrics.cancelled_running.get(), 0);
}

#[test]
fn the_worker_drops_a_call_whose_caller_left_at_its_turn() {
    let d = Descriptor {
        id: 900,
        name: "fragile".into(),
        hash: String::new(),
        params: vec![],
    };
    let accel: Arc<dyn Accelerator> = Arc::new(Fragile(d));
    let s = slot(Arc::clone(&accel), 0);
    busy_for_long(&s);
    // Run, it would panic and be answered INTERNAL: it must not run at all.
    let left = queued(s.submit(call(&accel, b"!boom", 1)), "queued");
    let stays = queued(s.submit(call(&accel, b"fine", 2)), "queued");
    drop(left);
    release(&s, vec![stays]);
    wait_idle(&s);
    let until = Instant::now() + Duration::from_secs(10);
    while s.metrics.calls.get() == 0 {
        assert!(Instant::now() < until, "the remaining call never ran");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(s.metrics.cancelled_queued.get(), 1);
    assert_eq!(
        s.metrics.calls.get(),
        1,
        "the call whose caller left never ran"
    );
}

#[test]
fn a_call_running_when_its_caller_leaves_ends_and_its_answer_is_dropped() {
    let d = Descriptor {
        id: 900,
        name: "fragile".into(),
        hash: String::new(),
        params: vec![],
    };
    let accel: Arc<dyn Accelerator> = Arc::new(Fragile(d));
    let s = slot_with(Arc::clone(&accel), 0, Duration::from_millis(100));
    let running = queued(s.submit(call(&accel, b"one", 1)), "a simulated call queues");
    let until = Instant::now() + Duration::from_secs(10);
    while !s.info().running {
        assert!(Instant::now() < until, "the worker never took the call");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(running);
    assert_eq!(s.withdraw_cancelled(), 0, "a running call is not withdrawn");
    wait_idle(&s);
    // The slot's depth drops when the call ends, its counts a moment after (the worker
    // counts it once the call is done, and sends the answer nobody takes after that):
    // under load they can be read in between.
    let until = Instant::now() + Duration::from_secs(10);
    while s.metrics.calls.get() == 0 || s.metrics.cancelled_running.get() == 0 {
        assert!(Instant::now() < until, "the call never ran to its end");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(s.metrics.calls.get(), 1, "it ran to its end");
    assert_eq!(s.metrics.cancelled_running.get(), 1);
    assert_eq!(s.metrics.cancelled_queued.get(), 0);
}
