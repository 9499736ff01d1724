//! Cluster runs: the registry's allocator under the virtual clock (docs/simulation.md,
//! "Cluster scale").

use std::path::{Path, PathBuf};

use netaccel_sim::cluster::blast::{self, SharingScenario};
use netaccel_sim::cluster::engine::Engine;
use netaccel_sim::cluster::{self, ClusterScenario, LeaderLoss, PolicyName};

mod common;
use common::files;

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}

/// A small cluster: 6 nodes × 2 slots, 12 functions, constant load, and node 1
/// lost at 300 s for good (with `failure`).
fn small(failure: bool) -> ClusterScenario {
    let mut text = String::from(
        r#"
        name = "small"
        duration_s = 600
        [cluster]
        nodes = 6
        slots_per_node = 2
        functions = 12
        accelerators = 4
        service = { kind = "exponential", mean_us = 20000.0 }
        load = 0.4
        hot_functions = 0.1
        hot_share = 0.3
        policies = ["utilization", "occupation", "two_choices"]
        "#,
    );
    if failure {
        text.push_str("[[cluster.failures]]\nat_s = 300\nfirst = 1\n");
    }
    ClusterScenario::parse(&text).unwrap()
}

fn run_into(sc: &ClusterScenario, dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    let text = toml::to_string(sc).unwrap();
    cluster::run_file(&text, "small", dir, None, None).unwrap();
}

#[test]
fn a_cluster_run_of_one_seed_gives_byte_identical_files_and_another_seed_does_not() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cluster-determinism");
    let mut sc = small(true);
    run_into(&sc, &out.join("a"));
    run_into(&sc, &out.join("b"));
    let (a, b) = (files(&out.join("a")), files(&out.join("b")));
    assert_eq!(a.len(), 4, "json, csv and two charts");
    assert!(a == b, "two runs of one seed differ");
    sc.seed += 1;
    run_into(&sc, &out.join("c"));
    assert!(files(&out.join("c")) != a, "another seed gives another run");
}

#[test]
fn a_lost_node_s_instances_migrate_through_the_registry_s_allocator() {
    for policy in [
        PolicyName::Utilization,
        PolicyName::Occupation,
        PolicyName::TwoChoices,
    ] {
        let (steady, lost) = (small(false), small(true));
        let without = Engine::new(&steady, policy).run();
        let with = Engine::new(&lost, policy).run();
        // The same calls in both runs (the arrival stream has its own generator).
        assert_eq!(without.calls, with.calls, "{policy:?}");
        assert_eq!(with.node_failures, 1);
        assert!(
            with.failure_migrations > 0,
            "{policy:?}: the lost node's instances moved"
        );
        assert_eq!(without.failure_migrations, 0);
        assert!(with.migrations >= with.failure_migrations);
        assert!(with.lost > 0, "{policy:?}: calls at the lost node are lost");
        assert_eq!(without.lost, 0);
        // The engine asserts after each failure that no instance stays on a lost
        // slot; the functions keep being served after it, on a sixth less capacity
        // for the second half.
        assert!(
            with.ok as f64 > 0.9 * without.ok as f64,
            "{policy:?}: {} against {} without the failure",
            with.ok,
            without.ok
        );
        assert_eq!(with.unplaced_at_end, 0, "{policy:?}");
    }
}

#[test]
fn the_sharing_experiment_places_as_the_bench_does_and_shares_for_more_calls() {
    let text = std::fs::read_to_string(here().join("cluster-sharing.toml")).unwrap();
    let sc = SharingScenario::parse(&text).unwrap();
    // The registry's allocator: the sobel pair on one device, the matmul pair on
    // another, topk alone; dedicated: three functions a device each, two none.
    assert_eq!(
        blast::place(&sc.sharing, false).unwrap(),
        [Some(0), Some(0), Some(1), Some(1), Some(2)]
    );
    assert_eq!(
        blast::place(&sc.sharing, true).unwrap(),
        [Some(0), None, Some(1), None, Some(2)]
    );
    let medium = &sc.sharing.levels[1];
    let dedicated = blast::run_one(&sc, medium, true, None).unwrap();
    let shared = blast::run_one(&sc, medium, false, None).unwrap();
    let ratio = shared.processed as f64 / dedicated.processed as f64;
    // The bench's floor at medium load: ≥ 1.5 × processed, ≤ 1 % dropped.
    assert!(ratio >= 1.5, "shared ÷ dedicated {ratio:.2}");
    assert!(
        shared.dropped_pct <= 1.0,
        "dropped {} %",
        shared.dropped_pct
    );
}

/// `small(true)` with the registry's leader lost from 290 s to 330 s: the node
/// failure at 300 s falls in the gap.
fn leaderless(lease_s: f64) -> ClusterScenario {
    let mut sc = small(true);
    sc.cluster.lease_s = lease_s;
    sc.cluster.leader_losses = vec![LeaderLoss {
        at_s: 290.0,
        for_s: 40.0,
    }];
    sc
}

#[test]
fn a_node_lost_without_a_leader_migrates_only_after_the_new_leader_takes_over() {
    // 600 s in 48 bins of 12.5 s: the failure (300 s) is in bin 24, the takeover
    // (330 s) in bin 26, the fresh lease's end (330 + 5 s) in bin 26 too.
    for policy in [
        PolicyName::Utilization,
        PolicyName::Occupation,
        PolicyName::TwoChoices,
    ] {
        for lease_s in [0.0, 5.0] {
            let mut alone = small(true);
            alone.cluster.lease_s = lease_s;
            let without = Engine::new(&alone, policy).run();
            let with = Engine::new(&leaderless(lease_s), policy).run();
            assert_eq!(with.calls, without.calls, "{policy:?}: the same calls");
            assert_eq!((with.leader_losses, without.leader_losses), (1, 0));
            assert_eq!(with.leaderless_s, 40.0);
            assert_eq!(without.leaderless_s, 0.0);
            // The lost node's instances migrate 30 s late: at the takeover, plus
            // the fresh lease the new leader gives every node (not the lease that
            // ran out in the gap).
            assert!(with.failure_migrations > 0 && without.failure_migrations > 0);
            let expected = with.failure_migrations as f64 * 30.0;
            assert!(
                (with.leader_unbound_s - expected).abs() < 1e-6,
                "{policy:?} lease {lease_s}: {} instance-s, expected {expected}",
                with.leader_unbound_s
            );
            assert_eq!(without.leader_unbound_s, 0.0);
            // Without the loss they move in the failure's bin; with it, no
            // migration of any kind until the takeover's bin, then all of them.
            assert!(without.bins[24].migrations >= without.failure_migrations);
            assert_eq!(with.bins[24].migrations + with.bins[25].migrations, 0);
            assert!(with.bins[26].migrations >= with.failure_migrations);
            // Nothing lost otherwise: the calls at the node when it failed, and
            // calls of functions whose every instance was there (waiting for the
            // registry), all while there was no leader; every instance is placed
            // again by the end.
            assert!(with.lost > 0, "{policy:?}");
            assert!(with.leaderless_dropped >= with.lost);
            assert_eq!(with.unplaced_at_end, 0, "{policy:?}");
            assert!(
                with.ok as f64 > 0.9 * without.ok as f64,
                "{policy:?}: {} against {}",
                with.ok,
                without.ok
            );
        }
    }
}

#[test]
fn a_run_with_a_leader_loss_gives_byte_identical_files() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cluster-leader-determinism");
    let sc = leaderless(5.0);
    run_into(&sc, &out.join("a"));
    run_into(&sc, &out.join("b"));
    let a = files(&out.join("a"));
    assert_eq!(a.len(), 4);
    assert!(a == files(&out.join("b")), "two runs of one seed differ");
}
