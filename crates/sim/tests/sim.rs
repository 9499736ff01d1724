//! The simulator against queueing theory, itself and the node's decisions:
//! determinism (same seed, same bytes), M/D/1 and M/M/1 mean waits over 10⁶ calls,
//! Little's law on every summary, and a golden trace of the dispatch core's
//! decisions (`golden/decisions.csv`; regenerate it with NETACCEL_SIM_BLESS=1 when a
//! change of the core's decisions is intended, and say so in the commit).

use std::path::{Path, PathBuf};

use netaccel_sim::record::Summary;
use netaccel_sim::scenario::Scenario;

mod common;
use common::files;

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn scenario(path: &Path) -> Scenario {
    let mut sc = Scenario::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    sc.name = path.file_stem().unwrap().to_str().unwrap().to_string();
    sc
}

/// L, the time-average of calls in the node, against λW: the same up to rounding
/// when every call that entered left within the run.
fn assert_little(s: &Summary) {
    let l = &s.little;
    let gap = (l.mean_calls_in_node - l.lambda_w).abs();
    assert!(
        gap <= 1e-9 * l.mean_calls_in_node.max(1.0),
        "{}: Little's law: L = {} but λW = {}",
        s.name,
        l.mean_calls_in_node,
        l.lambda_w
    );
}

fn queue_scenario(service: &str, rho: f64, calls: u64) -> Scenario {
    let service_us = 5.0;
    Scenario::parse(&format!(
        r#"
        name = "queue"
        calls = {calls}
        seed = 7
        [node]
        queue_depth_max = 1000000
        tenant_share_max = 1000000
        queue_wait_factor = 0
        slots = [{{ accelerator = "a" }}]
        [[accelerators]]
        name = "a"
        service = {service}
        [[clients]]
        kind = "poisson"
        rate_per_s = {rate}
        mix = [{{ accelerator = "a" }}]
        "#,
        rate = rho / service_us * 1e6
    ))
    .unwrap()
}

fn mean_wait_us(sc: &Scenario) -> f64 {
    let (_, s) = netaccel_sim::simulate(sc, Path::new(".")).unwrap();
    assert_little(&s);
    assert_eq!(s.ok, s.calls, "nothing refused in an unbounded queue");
    s.queue_us.mean
}

#[test]
fn md1_mean_wait_is_pollaczek_khinchine_within_3_percent_over_a_million_calls() {
    let rho = 0.7;
    let sc = queue_scenario(r#"{ kind = "constant", us = 5.0 }"#, rho, 1_000_000);
    let measured = mean_wait_us(&sc);
    let theory = rho * 5.0 / (2.0 * (1.0 - rho));
    eprintln!("M/D/1 at ρ = {rho}: mean wait {measured:.4} µs, Pollaczek–Khinchine {theory:.4} µs");
    let err = (measured - theory).abs() / theory;
    assert!(
        err < 0.03,
        "M/D/1: {measured} µs against {theory} µs ({:.2} %)",
        err * 100.0
    );
}

#[test]
fn mm1_mean_wait_is_within_3_percent_over_a_million_calls() {
    let rho = 0.7;
    let sc = queue_scenario(r#"{ kind = "exponential", mean_us = 5.0 }"#, rho, 1_000_000);
    let measured = mean_wait_us(&sc);
    let theory = rho * 5.0 / (1.0 - rho);
    eprintln!("M/M/1 at ρ = {rho}: mean wait {measured:.4} µs, theory {theory:.4} µs");
    let err = (measured - theory).abs() / theory;
    assert!(
        err < 0.03,
        "M/M/1: {measured} µs against {theory} µs ({:.2} %)",
        err * 100.0
    );
}

fn run_into(sc: &Scenario, dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    let (run, s) = netaccel_sim::simulate(sc, &here()).unwrap();
    assert_little(&s);
    let names: Vec<String> = sc.accelerators.iter().map(|a| a.name.clone()).collect();
    netaccel_sim::report::write_run(dir, &s, &run, &names, true).unwrap();
}

#[test]
fn the_same_seed_gives_byte_identical_files_and_another_seed_does_not() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("determinism");
    let mut sc = scenario(&here().join("golden/decisions.toml"));
    run_into(&sc, &out.join("a"));
    run_into(&sc, &out.join("b"));
    let (a, b) = (files(&out.join("a")), files(&out.join("b")));
    assert_eq!(a.len(), 3, "calls, summary, chart");
    assert!(a == b, "two runs of one seed differ");
    sc.seed += 1;
    run_into(&sc, &out.join("c"));
    assert!(files(&out.join("c")) != a, "another seed gives another run");
}

/// The decisions of the node's dispatch core in a small scenario: which slot took
/// each call, when it began and ended, and how it was answered.
#[test]
fn the_dispatch_cores_decisions_match_the_golden_trace() {
    let sc = scenario(&here().join("golden/decisions.toml"));
    let (run, s) = netaccel_sim::simulate(&sc, &here()).unwrap();
    assert_little(&s);
    // The scenario exercises what it is for.
    assert!(s.ok > 0 && s.busy > 0 && s.deadline_exceeded > 0, "{s:?}");
    let mut trace = String::from("call,tenant,accelerator,slot,start_ns,end_ns,outcome\n");
    for r in &run.records {
        let slot = r.slot.map(|s| s.to_string()).unwrap_or_default();
        trace.push_str(&format!(
            "{},{},{},{},{},{},{}\n",
            r.call,
            r.tenant,
            r.accel,
            slot,
            r.start_ns - r.submit_ns,
            r.end_ns - r.submit_ns,
            r.outcome.name()
        ));
    }
    let golden = here().join("golden/decisions.csv");
    if std::env::var_os("NETACCEL_SIM_BLESS").is_some() {
        std::fs::write(&golden, &trace).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap();
    if want != trace {
        let first = want
            .lines()
            .zip(trace.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(trace.lines().count()));
        panic!(
            "the dispatch core decided differently from tests/golden/decisions.csv from line {}: \
             want {:?}, got {:?} (NETACCEL_SIM_BLESS=1 rewrites it when the change is intended)",
            first + 1,
            want.lines().nth(first),
            trace.lines().nth(first)
        );
    }
}

#[test]
fn failures_lose_calls_and_every_summary_keeps_littles_law() {
    let sc = Scenario::parse(
        r#"
        name = "failures"
        duration_s = 0.01
        [node]
        count = 2
        policy = "join_shortest_queue"
        slots = [{ accelerator = "a", count = 2 }]
        [[accelerators]]
        name = "a"
        service = { kind = "exponential", mean_us = 10.0 }
        [[clients]]
        kind = "poisson"
        rate_per_s = 200000.0
        count = 2
        mix = [{ accelerator = "a", bytes = 3000, fragments = 3, fragment_gap_us = 1.0 }]
        [[failures]]
        kind = "slot_hang"
        node = 0
        slot = 1
        at_s = 0.002
        [[failures]]
        kind = "node_loss"
        node = 1
        at_s = 0.005
        "#,
    )
    .unwrap();
    let (run, s) = netaccel_sim::simulate(&sc, Path::new(".")).unwrap();
    assert_little(&s);
    assert!(s.lost > 0, "{s:?}");
    assert!(s.ok > s.lost, "{s:?}");
    // After the node loss, every call goes to node 0.
    let late = run
        .records
        .iter()
        .filter(|r| r.issued_ns > 5_000_000)
        .all(|r| r.node == 0);
    assert!(late);
    // JSQ sends less and less to the hung slot: it holds at most its queue.
    let on_hung = run
        .records
        .iter()
        .filter(|r| r.node == 0 && r.issued_ns > 2_000_000 && r.slot == Some(1))
        .count();
    assert_eq!(on_hung, 0, "no call is answered by a hung slot");
}

#[test]
fn a_reconfiguration_drains_the_slot_refuses_meanwhile_and_serves_the_new_accelerator() {
    let sc = Scenario::parse(
        r#"
        name = "reconfigure"
        duration_s = 0.004
        [node]
        reconfig_time_us = 500.0
        slots = [{ accelerator = "a" }, { accelerator = "b" }]
        [[accelerators]]
        name = "a"
        service = { kind = "constant", us = 4.0 }
        [[accelerators]]
        name = "b"
        service = { kind = "constant", us = 4.0 }
        [[clients]]
        kind = "poisson"
        rate_per_s = 100000.0
        mix = [{ accelerator = "a" }, { accelerator = "b" }]
        [[reconfigurations]]
        at_s = 0.001
        slot = 1
        accelerator = "a"
        "#,
    )
    .unwrap();
    let (run, s) = netaccel_sim::simulate(&sc, Path::new(".")).unwrap();
    assert_little(&s);
    assert_eq!(s.reconfigurations, 1);
    assert!(s.unavailable > 0, "calls to the slot while it loads: {s:?}");
    let (load_ns, loaded_ns) = (1_000_000, 1_500_000);
    for r in &run.records {
        let ok = r.outcome == netaccel_sim::record::Outcome::Ok;
        if r.submit_ns > loaded_ns + 1_000 && r.accel == 1 {
            assert!(!ok, "nothing hosts b after the load: {r:?}");
        }
        if ok && r.slot == Some(1) && r.start_ns > load_ns {
            // Queued before the load: ran on b. Begun after the load's end: a.
            assert!(
                r.accel == 1 && r.submit_ns <= load_ns || r.accel == 0 && r.start_ns >= loaded_ns,
                "{r:?}"
            );
        }
    }
    assert!(run.records.iter().any(|r| r.accel == 0
        && r.slot == Some(1)
        && r.outcome == netaccel_sim::record::Outcome::Ok));
}

#[test]
fn a_trace_is_replayed_call_for_call() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/trace.toml");
    let sc = scenario(&path);
    let (run, s) = netaccel_sim::simulate(&sc, path.parent().unwrap()).unwrap();
    assert_little(&s);
    assert_eq!(s.calls, 8);
    assert_eq!(s.ok, 8);
    let issued: Vec<u64> = run.records.iter().map(|r| r.issued_ns).collect();
    assert_eq!(issued, [0, 500, 1000, 1500, 2000, 2500, 100_000, 250_000]);
    // The burst of topk calls queues on its one slot: 3 µs each, one after another.
    let topk: Vec<u64> = run
        .records
        .iter()
        .filter(|r| r.accel == 0 && r.issued_ns < 3000)
        .map(|r| r.end_ns - r.start_ns)
        .collect();
    assert_eq!(topk, [3000; 4]);
    assert!(run.records[3].start_ns >= run.records[1].end_ns);
}

/// A misspelt client key is refused with what the client takes, not dropped (the kind
/// is flattened into the client, which serde's own check cannot follow).
#[test]
fn an_unknown_client_key_is_refused() {
    let text = |key: &str| {
        format!(
            r#"
            calls = 10
            [node]
            slots = [{{ accelerator = "a" }}]
            [[accelerators]]
            name = "a"
            service = {{ kind = "constant", us = 5.0 }}
            [[clients]]
            kind = "poisson"
            {key} = 1000.0
            mix = [{{ accelerator = "a" }}]
            "#
        )
    };
    assert!(Scenario::parse(&text("rate_per_s")).is_ok());
    let e = Scenario::parse(&text("rate_per_sec")).unwrap_err();
    assert!(e.contains("unknown key `rate_per_sec`"), "{e}");
    assert!(e.contains("rate_per_s"), "{e}");
}
