//! The parts of a node the simulator models beside its dispatch core: the watchdog
//! (the node's own check of a slot, at its own period), the network threads' CPU per
//! call, and the cheap calls the node runs on the network thread that read them; and
//! the jitter a link adds to each answer.

use std::path::Path;

use netaccel_sim::record::{Outcome, Record, Summary};
use netaccel_sim::scenario::Scenario;

fn run(toml: &str) -> (Vec<Record>, Summary) {
    let sc = Scenario::parse(toml).unwrap();
    let (run, s) = netaccel_sim::simulate(&sc, Path::new(".")).unwrap();
    // Little's law, exactly (up to rounding): every call that entered left.
    let l = &s.little;
    let gap = (l.mean_calls_in_node - l.lambda_w).abs();
    assert!(gap <= 1e-9 * l.mean_calls_in_node.max(1.0), "{l:?}");
    (run.records, s)
}

/// A slot whose device stops is failed by the watchdog after `kernel_timeout_ms` (at
/// the watchdog's next look, a quarter of the bound later at most): the call it ran
/// and its queue are answered UNAVAILABLE then, nothing is lost, and the calls after
/// go to the other slot.
#[test]
fn a_hung_slot_is_failed_after_the_kernel_timeout_and_its_calls_are_answered() {
    let (records, s) = run(r#"
        duration_s = 0.06
        [node]
        policy = "round_robin"
        kernel_timeout_ms = 10
        slots = [{ accelerator = "a", count = 2 }]
        [[accelerators]]
        name = "a"
        service = { kind = "constant", us = 100.0 }
        [[clients]]
        kind = "poisson"
        rate_per_s = 4000.0
        mix = [{ accelerator = "a" }]
        [[failures]]
        kind = "slot_hang"
        node = 0
        slot = 1
        at_s = 0.005
    "#);
    assert_eq!(
        s.lost, 0,
        "the watchdog answered every call of the hung slot"
    );
    let failed: Vec<&Record> = records
        .iter()
        .filter(|r| r.outcome == Outcome::Unavailable)
        .collect();
    assert!(failed.len() >= 2, "the hung call and its queue: {s:?}");
    // All answered at one look of the watchdog, on its period (10 ms / 4).
    let at = failed[0].end_ns;
    assert!(failed.iter().all(|r| r.end_ns == at));
    assert_eq!(at % 2_500_000, 0, "the watchdog looks every 2.5 ms");
    // The hung call (the one the slot answers itself) is failed 10 to 12.5 ms after
    // it began.
    let hung = failed
        .iter()
        .find(|r| r.slot == Some(1))
        .expect("the hung call");
    let ran = at - hung.start_ns;
    assert!(
        (10_000_000..12_500_000).contains(&ran),
        "failed after {ran} ns"
    );
    // After it, every call runs on slot 0.
    let after: Vec<&Record> = records.iter().filter(|r| r.submit_ns > at).collect();
    assert!(!after.is_empty());
    assert!(after
        .iter()
        .all(|r| r.outcome == Outcome::Ok && r.slot == Some(0)));
}

/// Without a hang, the watchdog changes nothing and does not lengthen the run.
#[test]
fn the_watchdog_leaves_a_healthy_run_alone() {
    let text = |timeout: u64| {
        format!(
            r#"
            calls = 2000
            [node]
            kernel_timeout_ms = {timeout}
            slots = [{{ accelerator = "a" }}]
            [[accelerators]]
            name = "a"
            service = {{ kind = "exponential", mean_us = 50.0 }}
            [[clients]]
            kind = "poisson"
            rate_per_s = 10000.0
            mix = [{{ accelerator = "a" }}]
            "#
        )
    };
    let (_, with) = run(&text(1));
    let (_, without) = run(&text(0));
    assert_eq!(with.unavailable, 0);
    assert_eq!(with, without);
}

/// A cheap call of an `inline` accelerator runs on the network thread that read it
/// when its slot is idle: it never waits in a queue, and a device busy with a
/// backlog on another slot does not hold it up. The thread reads nothing meanwhile.
#[test]
fn cheap_calls_run_inline_and_do_not_queue_behind_a_busy_slot() {
    let (records, s) = run(r#"
        duration_s = 0.2
        [node]
        net_cpu_us = 1.0
        slots = [{ accelerator = "cheap" }, { accelerator = "device" }]
        [[accelerators]]
        name = "cheap"
        inline = true
        service = { kind = "constant", us = 2.0 }
        [[accelerators]]
        name = "device"
        service = { kind = "constant", us = 1000.0 }
        [[clients]]
        kind = "closed"
        outstanding = 8
        mix = [{ accelerator = "device", bytes = 4096 }]
        [[clients]]
        kind = "poisson"
        rate_per_s = 20000.0
        mix = [{ accelerator = "cheap", bytes = 64 }]
    "#);
    let cheap: Vec<&Record> = records
        .iter()
        .filter(|r| r.accel == 0 && r.outcome == Outcome::Ok)
        .collect();
    let device: Vec<&Record> = records
        .iter()
        .filter(|r| r.accel == 1 && r.outcome == Outcome::Ok)
        .collect();
    assert!(cheap.len() > 3000 && device.len() > 150, "{s:?}");
    for r in &cheap {
        assert_eq!(r.start_ns, r.submit_ns, "a cheap call never queues: {r:?}");
        assert_eq!(r.end_ns - r.start_ns, 2000, "its time is its own: {r:?}");
    }
    // The device's calls do queue (8 outstanding on one slot).
    assert!(s.queue_us.max > 5000.0, "{s:?}");
    // A cheap call waits only for its network thread: a few µs, never a device call.
    let worst = cheap.iter().map(|r| r.end_ns - r.whole_ns).max().unwrap();
    assert!(worst < 100_000, "a cheap call took {worst} ns at the node");
    // The cheap slot's busy time counts its inline runs.
    let busy = s.utilisation[0];
    let want = cheap.len() as f64 * 2e-6 / s.simulated_s;
    assert!((busy - want).abs() < 1e-9, "{busy} against {want}");
}

/// A network thread is a single server: calls wait for it while it reads the calls
/// before them. Poisson arrivals and a constant CPU time per call make it an M/D/1
/// queue, whose mean wait is Pollaczek–Khinchine's ρ·D / (2(1 − ρ)).
#[test]
fn the_network_thread_is_a_queue_of_its_own() {
    let (records, s) = run(r#"
        calls = 200000
        [node]
        net_cpu_us = 5.0
        io_threads = 1
        slots = [{ accelerator = "a", count = 4 }]
        [[accelerators]]
        name = "a"
        service = { kind = "constant", us = 1.0 }
        [[clients]]
        kind = "poisson"
        rate_per_s = 100000.0
        mix = [{ accelerator = "a" }]
    "#);
    assert_eq!(s.ok, 200_000);
    // Read at submit_ns, after net_cpu_us of the thread's time.
    let waits: f64 = records
        .iter()
        .map(|r| (r.submit_ns - r.whole_ns) as f64 - 5000.0)
        .sum();
    let mean_wait_us = waits / records.len() as f64 / 1000.0;
    let (rho, d) = (0.5, 5.0);
    let want = rho * d / (2.0 * (1.0 - rho));
    assert!(
        (mean_wait_us - want).abs() <= 0.05 * want,
        "mean wait for the network thread {mean_wait_us} µs, M/D/1 says {want}"
    );
}

/// A link's jitter delays each answer on its way back, drawn per call, and nothing
/// else: the node sees the same calls at the same times.
#[test]
fn a_links_jitter_delays_only_the_answers() {
    let text = |jitter: &str| {
        format!(
            r#"
            calls = 5000
            [node]
            slots = [{{ accelerator = "a" }}]
            [network]
            latency_us = 10.0
            {jitter}
            [[accelerators]]
            name = "a"
            service = {{ kind = "constant", us = 20.0 }}
            [[clients]]
            kind = "poisson"
            rate_per_s = 20000.0
            mix = [{{ accelerator = "a" }}]
            "#
        )
    };
    let (plain, _) = run(&text(""));
    let (constant, _) = run(&text(r#"jitter = { kind = "constant", us = 7.0 }"#));
    for (p, c) in plain.iter().zip(&constant) {
        assert_eq!((p.submit_ns, p.end_ns), (c.submit_ns, c.end_ns));
        assert_eq!(c.reply_ns - c.end_ns, 17_000, "latency 10 µs + jitter 7 µs");
    }
    let (spread, s) = run(&text(
        r#"jitter = { kind = "lognormal", median_us = 50.0, sigma = 1.0 }"#,
    ));
    let mut back: Vec<u64> = spread.iter().map(|r| r.reply_ns - r.end_ns).collect();
    back.sort_unstable();
    let median = back[back.len() / 2] as f64 / 1000.0 - 10.0;
    assert!((median - 50.0).abs() < 5.0, "median jitter {median} µs");
    assert_eq!(s.ok, 5000);
}
