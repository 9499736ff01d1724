//! One test per step of the algorithm, plus its boundaries.

use super::*;

fn spec(node: &str, slot: SlotId, accelerator: &str) -> SlotSpec {
    SlotSpec {
        node: Arc::from(node),
        device: Arc::from("cpu0"),
        slot,
        backend: Arc::from("cpu"),
        vendor: Arc::from("netaccel"),
        catalog: None,
        accelerator: Arc::from(accelerator),
        hash: Arc::from(""),
    }
}

/// An inventory of `(node, slot, accelerator, utilisation, instances)`.
fn inventory(slots: &[(&str, SlotId, &str, f64, u32)]) -> Inventory {
    let mut inv = Inventory::new();
    for &(node, slot, accel, util, instances) in slots {
        let idx = inv.insert(spec(node, slot, accel));
        inv.set_utilization(idx, util);
        for _ in 0..instances {
            inv.bind(idx);
        }
    }
    inv.check_consistency();
    inv
}

fn at(inv: &Inventory, node: &str, slot: SlotId) -> SlotIdx {
    inv.find(node, slot).unwrap()
}

fn alloc(inv: &Inventory, accel: &str) -> Decision {
    inv.allocate(&Request::new(accel), &Policy::default())
}

#[test]
fn step4_binds_to_the_slot_holding_the_accelerator_even_when_busier() {
    let inv = inventory(&[("a", 0, "topk", 0.0, 0), ("b", 0, "sobel", 0.8, 3)]);
    assert_eq!(alloc(&inv, "sobel"), Decision::Bind(at(&inv, "b", 0)));
}

#[test]
fn step1_skips_slots_of_lost_nodes_and_slots_being_reconfigured() {
    let mut inv = inventory(&[("a", 0, "sobel", 0.0, 0), ("b", 0, "sobel", 0.5, 0)]);
    inv.set_ready(at(&inv, "a", 0), false);
    assert_eq!(alloc(&inv, "sobel"), Decision::Bind(at(&inv, "b", 0)));
    inv.set_reconfiguring(at(&inv, "b", 0), true);
    // Neither holder is usable and the only other slots are unusable too.
    assert_eq!(alloc(&inv, "sobel"), Decision::NoDevice);
}

#[test]
fn step1_filters_by_backend_vendor_node_and_catalog() {
    let mut inv = Inventory::new();
    let cpu = inv.insert(spec("a", 0, "sobel"));
    let mut gpu = spec("b", 0, "sobel");
    gpu.backend = Arc::from("opencl");
    gpu.vendor = Arc::from("pocl");
    let gpu = inv.insert(gpu);
    let policy = Policy::default();
    let mut req = Request::new("sobel");
    req.backend = Some("opencl");
    assert_eq!(inv.allocate(&req, &policy), Decision::Bind(gpu));
    req.backend = None;
    req.vendor = Some("netaccel");
    assert_eq!(inv.allocate(&req, &policy), Decision::Bind(cpu));
    req.vendor = None;
    req.node = Some("b");
    assert_eq!(inv.allocate(&req, &policy), Decision::Bind(gpu));
    req.node = Some("nowhere");
    assert_eq!(inv.allocate(&req, &policy), Decision::NoDevice);

    // A device whose catalog lacks the accelerator is never reconfigured to it.
    let mut inv = Inventory::new();
    let mut fixed = spec("a", 0, "sobel");
    fixed.catalog = Some(Arc::from(vec!["sobel".to_string()]));
    inv.insert(fixed);
    assert_eq!(alloc(&inv, "topk"), Decision::NoDevice);
    let mut open = spec("b", 0, "echo");
    open.catalog = Some(Arc::from(vec!["echo".to_string(), "topk".to_string()]));
    let open = inv.insert(open);
    assert_eq!(alloc(&inv, "topk"), Decision::Reconfigure(open));
}

#[test]
fn excluded_slots_are_not_taken() {
    let inv = inventory(&[("a", 0, "sobel", 0.0, 0), ("b", 0, "sobel", 0.5, 0)]);
    let exclude = [at(&inv, "a", 0)];
    let req = Request {
        exclude: &exclude,
        ..Request::new("sobel")
    };
    assert_eq!(
        inv.allocate(&req, &Policy::default()),
        Decision::Bind(at(&inv, "b", 0))
    );
}

#[test]
fn step2_ceiling_is_inclusive_and_drops_busier_slots() {
    let inv = inventory(&[("a", 0, "sobel", 0.9, 0), ("b", 0, "sobel", 0.95, 0)]);
    // 0.9 is at the ceiling, not above it.
    assert_eq!(alloc(&inv, "sobel"), Decision::Bind(at(&inv, "a", 0)));
    let inv = inventory(&[("a", 0, "sobel", 0.91, 0), ("b", 0, "topk", 0.0, 0)]);
    // The holder is above the ceiling: the idle slot is reconfigured instead.
    assert_eq!(
        alloc(&inv, "sobel"),
        Decision::Reconfigure(at(&inv, "b", 0))
    );
    let policy = Policy {
        ceiling: 1.0,
        ..Policy::default()
    };
    assert_eq!(
        inv.allocate(&Request::new("sobel"), &policy),
        Decision::Bind(at(&inv, "a", 0))
    );
}

#[test]
fn step3_orders_by_utilisation_then_occupation_or_the_reverse() {
    let inv = inventory(&[
        ("a", 0, "sobel", 0.25, 0),
        ("b", 0, "sobel", 0.5, 0),
        ("c", 0, "sobel", 0.25, 2),
        ("d", 0, "sobel", 0.75, 1),
    ]);
    assert_eq!(alloc(&inv, "sobel"), Decision::Bind(at(&inv, "a", 0)));
    let inv = inventory(&[
        ("a", 0, "sobel", 0.5, 1),
        ("b", 0, "sobel", 0.25, 3),
        ("c", 0, "sobel", 0.75, 1),
    ]);
    assert_eq!(alloc(&inv, "sobel"), Decision::Bind(at(&inv, "b", 0)));
    let occupation = Policy {
        order: Order::Occupation,
        ..Policy::default()
    };
    // Fewest instances first (a and c have one), then utilisation (a).
    assert_eq!(
        inv.allocate(&Request::new("sobel"), &occupation),
        Decision::Bind(at(&inv, "a", 0))
    );
}

#[test]
fn ties_go_to_the_smallest_node_device_and_slot() {
    let inv = inventory(&[
        ("b", 0, "sobel", 0.5, 1),
        ("a", 7, "sobel", 0.5, 1),
        ("a", 3, "sobel", 0.5, 1),
        ("c", 0, "sobel", 0.5, 1),
    ]);
    assert_eq!(alloc(&inv, "sobel"), Decision::Bind(at(&inv, "a", 3)));
    // The same for reconfiguration candidates.
    let inv = inventory(&[("b", 1, "echo", 0.0, 0), ("b", 0, "topk", 0.0, 0)]);
    assert_eq!(
        alloc(&inv, "sobel"),
        Decision::Reconfigure(at(&inv, "b", 0))
    );
}

#[test]
fn step3_a_required_hash_counts_as_part_of_what_is_held() {
    let mut inv = Inventory::new();
    let old = inv.insert(SlotSpec {
        hash: Arc::from("h1"),
        ..spec("a", 0, "sobel")
    });
    let new = inv.insert(SlotSpec {
        hash: Arc::from("h2"),
        ..spec("b", 0, "sobel")
    });
    inv.set_utilization(new, 0.5);
    let policy = Policy::default();
    let req = Request {
        hash: Some("h2"),
        ..Request::new("sobel")
    };
    assert_eq!(inv.allocate(&req, &policy), Decision::Bind(new));
    let req = Request {
        hash: Some("h3"),
        ..Request::new("sobel")
    };
    // Nobody holds h3: the idle slot holding another build is reconfigured.
    assert_eq!(inv.allocate(&req, &policy), Decision::Reconfigure(old));
}

#[test]
fn step5_redistribution_inequality_at_its_boundary() {
    // D holds topk at 0.5; the other topk slot has exactly 0.5 spare: 0.5 >= 0.5.
    let inv = inventory(&[("d", 0, "topk", 0.5, 2), ("e", 0, "topk", 0.5, 2)]);
    assert_eq!(
        alloc(&inv, "sobel"),
        Decision::Reconfigure(at(&inv, "d", 0))
    );
    // 0.25 spare for 0.5 of load: neither topk slot qualifies.
    let inv = inventory(&[("d", 0, "topk", 0.5, 2), ("e", 0, "topk", 0.75, 2)]);
    assert_eq!(alloc(&inv, "sobel"), Decision::NoDevice);
    // Spare summed over several slots: 0.25 + 0.25 >= 0.5.
    let inv = inventory(&[
        ("d", 0, "topk", 0.5, 2),
        ("e", 0, "topk", 0.75, 2),
        ("f", 0, "topk", 0.75, 2),
    ]);
    assert_eq!(
        alloc(&inv, "sobel"),
        Decision::Reconfigure(at(&inv, "d", 0))
    );
    // Just below the boundary.
    let inv = inventory(&[("d", 0, "topk", 0.5, 2), ("e", 0, "topk", 0.5078125, 2)]);
    assert_eq!(alloc(&inv, "sobel"), Decision::NoDevice);
}

#[test]
fn step5_spare_of_lost_slots_does_not_count() {
    let mut inv = inventory(&[("d", 0, "topk", 0.5, 1), ("e", 0, "topk", 0.0, 0)]);
    inv.set_ready(at(&inv, "e", 0), false);
    assert_eq!(alloc(&inv, "sobel"), Decision::NoDevice);
    inv.set_ready(at(&inv, "e", 0), true);
    // Now e is usable and idle: it comes first in the order and is taken itself.
    assert_eq!(
        alloc(&inv, "sobel"),
        Decision::Reconfigure(at(&inv, "e", 0))
    );
}

#[test]
fn step5_idle_slot_always_qualifies_and_order_picks_the_first_that_does() {
    // The only holder of echo is idle: nobody takes over its load, but it has none.
    let inv = inventory(&[("a", 0, "echo", 0.0, 3)]);
    assert_eq!(
        alloc(&inv, "sobel"),
        Decision::Reconfigure(at(&inv, "a", 0))
    );
    // a/0 comes first in order (0.25, and a < c) but echo has no other slot to take
    // its load; c/0 (0.25) is next and the other topk slot has 0.5 spare.
    let inv = inventory(&[
        ("a", 0, "echo", 0.25, 1),
        ("b", 0, "topk", 0.5, 1),
        ("c", 0, "topk", 0.25, 1),
        ("c", 1, "sobel", 0.95, 1),
    ]);
    assert_eq!(
        alloc(&inv, "sobel"),
        Decision::Reconfigure(at(&inv, "c", 0))
    );
    // Excluding c/0, b/0 qualifies: c/0 still offers 0.75 of spare.
    let exclude = [at(&inv, "c", 0)];
    let req = Request {
        exclude: &exclude,
        ..Request::new("sobel")
    };
    assert_eq!(
        inv.allocate(&req, &Policy::default()),
        Decision::Reconfigure(at(&inv, "b", 0))
    );
}

#[test]
fn reconfigure_modes_limit_step5() {
    let inv = inventory(&[("a", 0, "echo", 0.0, 1), ("b", 0, "topk", 0.25, 0)]);
    let policy = Policy::default();
    assert_eq!(
        inv.allocate(&Request::new("sobel"), &policy),
        Decision::Reconfigure(at(&inv, "a", 0))
    );
    let empty_only = Request {
        reconfigure: Reconfigure::EmptyOnly,
        ..Request::new("sobel")
    };
    // b has no instance but 0.25 load and no other topk slot to take it.
    assert_eq!(inv.allocate(&empty_only, &policy), Decision::NoDevice);
    let inv = inventory(&[("a", 0, "echo", 0.0, 1), ("b", 0, "topk", 0.0, 0)]);
    assert_eq!(
        inv.allocate(&empty_only, &policy),
        Decision::Reconfigure(at(&inv, "b", 0))
    );
    let never = Request {
        reconfigure: Reconfigure::Never,
        ..Request::new("sobel")
    };
    assert_eq!(inv.allocate(&never, &policy), Decision::NoDevice);
}

#[test]
fn step6_no_device_when_nothing_is_compatible() {
    assert_eq!(alloc(&Inventory::new(), "sobel"), Decision::NoDevice);
    let inv = inventory(&[("a", 0, "echo", 0.95, 0), ("b", 0, "topk", 1.0, 0)]);
    assert_eq!(alloc(&inv, "sobel"), Decision::NoDevice);
}

#[test]
fn released_slots_count_as_idle() {
    let mut inv = inventory(&[("a", 0, "echo", 0.6, 0)]);
    assert_eq!(alloc(&inv, "sobel"), Decision::NoDevice);
    inv.set_released(at(&inv, "a", 0), true);
    assert_eq!(
        alloc(&inv, "sobel"),
        Decision::Reconfigure(at(&inv, "a", 0))
    );
    inv.bind(at(&inv, "a", 0));
    assert!(!inv.get(at(&inv, "a", 0)).unwrap().released);
}

#[test]
fn the_index_follows_reconfiguration_removal_and_reuse() {
    let mut inv = inventory(&[("a", 0, "echo", 0.0, 0), ("a", 1, "echo", 0.0, 0)]);
    let a0 = at(&inv, "a", 0);
    inv.set_accelerator(a0, "sobel", "h");
    inv.check_consistency();
    assert_eq!(inv.holders("sobel"), &[a0]);
    assert_eq!(inv.holders("echo").len(), 1);
    inv.remove(at(&inv, "a", 1));
    inv.check_consistency();
    assert!(inv.holders("echo").is_empty());
    let b0 = inv.insert(spec("b", 0, "topk"));
    inv.check_consistency();
    assert_eq!(inv.len(), 2);
    assert_eq!(alloc(&inv, "topk"), Decision::Bind(b0));
    inv.remove(a0);
    inv.remove(b0);
    assert!(inv.is_empty());
    inv.check_consistency();
}

mod oracle {
    //! The allocator against a plain reference: filter, sort, scan, for random
    //! inventories and requests. Utilisations are multiples of 1/8, so sums are exact
    //! and the two agree exactly, boundaries included.

    use super::*;
    use proptest::prelude::*;

    const ACCELS: [&str; 4] = ["a", "b", "c", "d"];

    fn reference(inv: &Inventory, req: &Request<'_>, policy: &Policy) -> Decision {
        let compatible = |i: SlotIdx, s: &SlotView| {
            s.ready
                && !s.reconfiguring
                && s.effective_utilization() <= policy.ceiling
                && req.backend.is_none_or(|b| *s.spec.backend == *b)
                && req.vendor.is_none_or(|v| *s.spec.vendor == *v)
                && req.node.is_none_or(|n| *s.spec.node == *n)
                && !req.exclude.contains(&i)
        };
        let holds = |s: &SlotView| {
            *s.spec.accelerator == *req.accelerator && req.hash.is_none_or(|h| *s.spec.hash == *h)
        };
        let mut order: Vec<(SlotIdx, &SlotView)> =
            inv.iter().filter(|(i, s)| compatible(*i, s)).collect();
        order.sort_by(|(_, a), (_, b)| {
            let util = a
                .effective_utilization()
                .total_cmp(&b.effective_utilization());
            let occ = a.instances.cmp(&b.instances);
            let crit = match policy.order {
                Order::Utilization => util.then(occ),
                Order::Occupation => occ.then(util),
            };
            (!holds(a)).cmp(&!holds(b)).then(crit).then_with(|| {
                (&a.spec.node, &a.spec.device, a.spec.slot).cmp(&(
                    &b.spec.node,
                    &b.spec.device,
                    b.spec.slot,
                ))
            })
        });
        match order.first() {
            None => return Decision::NoDevice,
            Some((i, s)) if holds(s) => return Decision::Bind(*i),
            Some(_) => {}
        }
        if req.reconfigure == Reconfigure::Never {
            return Decision::NoDevice;
        }
        for (i, d) in order {
            let catalog_ok = d
                .spec
                .catalog
                .as_ref()
                .is_none_or(|c| c.iter().any(|a| a == req.accelerator));
            if !catalog_ok || (req.reconfigure == Reconfigure::EmptyOnly && d.instances > 0) {
                continue;
            }
            let others: f64 = inv
                .iter()
                .filter(|(j, o)| {
                    *j != i
                        && o.spec.accelerator == d.spec.accelerator
                        && o.ready
                        && !o.reconfiguring
                })
                .map(|(_, o)| 1.0 - o.utilization)
                .sum();
            let load = d.effective_utilization();
            if load == 0.0 || others >= load {
                return Decision::Reconfigure(i);
            }
        }
        Decision::NoDevice
    }

    #[derive(Debug, Clone)]
    struct GenSlot {
        node: u8,
        accel: usize,
        hash: u8,
        backend: bool,
        vendor: bool,
        catalog: Option<Vec<usize>>,
        util_eighths: u8,
        instances: u8,
        ready: bool,
        reconfiguring: bool,
        released: bool,
    }

    fn gen_slot() -> impl Strategy<Value = GenSlot> {
        (
            (0u8..5, 0usize..4, 0u8..3, any::<bool>(), any::<bool>()),
            proptest::option::weighted(0.3, proptest::collection::vec(0usize..5, 0..4)),
            (0u8..=8, 0u8..4, proptest::bool::weighted(0.9)),
            (proptest::bool::weighted(0.1), proptest::bool::weighted(0.1)),
        )
            .prop_map(
                |(
                    (node, accel, hash, backend, vendor),
                    catalog,
                    (util_eighths, instances, ready),
                    (reconfiguring, released),
                )| GenSlot {
                    node,
                    accel,
                    hash,
                    backend,
                    vendor,
                    catalog,
                    util_eighths,
                    instances,
                    ready,
                    reconfiguring,
                    released,
                },
            )
    }

    fn build(slots: &[GenSlot]) -> Inventory {
        let mut inv = Inventory::new();
        for (n, g) in slots.iter().enumerate() {
            let idx = inv.insert(SlotSpec {
                node: Arc::from(format!("n{}", g.node)),
                device: Arc::from("dev"),
                slot: n as SlotId,
                backend: Arc::from(if g.backend { "cpu" } else { "opencl" }),
                vendor: Arc::from(if g.vendor { "v1" } else { "v2" }),
                catalog: g.catalog.as_ref().map(|c| {
                    Arc::from(
                        c.iter()
                            .map(|&a| ["a", "b", "c", "d", "e"][a].to_string())
                            .collect::<Vec<_>>(),
                    )
                }),
                accelerator: Arc::from(ACCELS[g.accel]),
                hash: Arc::from(["", "h1", "h2"][g.hash as usize]),
            });
            inv.set_utilization(idx, g.util_eighths as f64 / 8.0);
            for _ in 0..g.instances {
                inv.bind(idx);
            }
            inv.set_ready(idx, g.ready);
            inv.set_reconfiguring(idx, g.reconfiguring);
            inv.set_released(idx, g.released);
        }
        inv
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn allocator_agrees_with_the_reference(
            slots in proptest::collection::vec(gen_slot(), 0..24),
            accel in 0usize..5,
            hash in proptest::option::of(1u8..3),
            backend in proptest::option::of(any::<bool>()),
            vendor in proptest::option::of(any::<bool>()),
            node in proptest::option::weighted(0.2, 0u8..5),
            exclude in proptest::collection::vec(0u32..24, 0..3),
            mode in 0u8..3,
            ceiling in prop_oneof![Just(0.5), Just(0.875), Just(0.9), Just(1.0)],
            occupation_first in any::<bool>(),
        ) {
            let inv = build(&slots);
            inv.check_consistency();
            let node_name = node.map(|n| format!("n{n}"));
            let hash = hash.map(|h| ["", "h1", "h2"][h as usize]);
            let req = Request {
                accelerator: ["a", "b", "c", "d", "e"][accel],
                hash,
                backend: backend.map(|b| if b { "cpu" } else { "opencl" }),
                vendor: vendor.map(|v| if v { "v1" } else { "v2" }),
                node: node_name.as_deref(),
                exclude: &exclude,
                reconfigure: [Reconfigure::Any, Reconfigure::EmptyOnly, Reconfigure::Never][mode as usize],
            };
            let policy = Policy {
                ceiling,
                order: if occupation_first { Order::Occupation } else { Order::Utilization },
            };
            let got = inv.allocate(&req, &policy);
            prop_assert_eq!(got, reference(&inv, &req, &policy));
            // Whatever it picks is never a slot of a lost node, a slot being
            // reconfigured, or an incompatible slot.
            if let Decision::Bind(i) | Decision::Reconfigure(i) = got {
                let s = inv.get(i).unwrap();
                prop_assert!(s.ready && !s.reconfiguring);
                prop_assert!(req.backend.is_none_or(|b| *s.spec.backend == *b));
                prop_assert!(req.node.is_none_or(|n| *s.spec.node == *n));
            }
        }
    }
}

#[test]
fn step5_never_reconfigures_a_pinned_slot_but_shares_it() {
    // Both idle; a's slot would be reconfigured first (smaller name), unless pinned.
    let mut inv = inventory(&[("a", 0, "echo", 0.0, 0), ("b", 0, "echo", 0.0, 0)]);
    assert_eq!(alloc(&inv, "topk"), Decision::Reconfigure(at(&inv, "a", 0)));
    inv.set_pinned(at(&inv, "a", 0), true);
    inv.check_consistency();
    assert_eq!(alloc(&inv, "topk"), Decision::Reconfigure(at(&inv, "b", 0)));
    // A pinned slot still takes more instances of what it holds (shared, first in
    // order here).
    assert_eq!(alloc(&inv, "echo"), Decision::Bind(at(&inv, "a", 0)));
    inv.set_pinned(at(&inv, "b", 0), true);
    assert_eq!(alloc(&inv, "topk"), Decision::NoDevice);
    assert!(matches!(alloc(&inv, "echo"), Decision::Bind(_)));
}

#[test]
#[should_panic(expected = "assertion")]
fn check_consistency_fires_on_a_spare_count_out_of_step() {
    let mut inv = inventory(&[("n1", 0, "sobel", 0.2, 0), ("n1", 1, "sobel", 0.4, 1)]);
    inv.check_consistency();
    // Broken on purpose: the hot record counts an instance the view does not.
    let idx = at(&inv, "n1", 0);
    inv.hot[idx as usize].instances += 1;
    inv.check_consistency();
}

#[test]
#[cfg_attr(not(debug_assertions), ignore = "the check runs in debug builds")]
#[should_panic(expected = "assertion")]
fn a_mutation_of_a_broken_inventory_panics_in_debug_builds() {
    let mut inv = inventory(&[("n1", 0, "sobel", 0.2, 0)]);
    let idx = at(&inv, "n1", 0);
    // Broken on purpose, then any mutation: the checker runs after it.
    inv.accels[inv.hot[idx as usize].accel as usize].spare += 1;
    inv.set_utilization(idx, 0.5);
}

#[test]
fn two_choices_binds_the_better_of_the_two_drawn_holders() {
    let inv = inventory(&[
        ("a", 0, "sobel", 0.1, 0),
        ("b", 0, "sobel", 0.5, 0),
        ("c", 0, "sobel", 0.3, 0),
        ("d", 0, "echo", 0.0, 0),
    ]);
    let policy = Policy::default();
    let req = Request::new("sobel");
    // Every draw compares two distinct holders: the least utilised one (a) wins
    // each draw it is in, and the busiest one (b) never wins.
    let mut won = HashMap::new();
    for choice in 0..60u64 {
        match inv.allocate_two_choices(&req, &policy, choice) {
            Decision::Bind(idx) => *won.entry(idx).or_insert(0) += 1,
            other => panic!("a holder has room: {other:?}"),
        }
    }
    assert_eq!(won.get(&at(&inv, "b", 0)), None);
    assert_eq!(won[&at(&inv, "a", 0)], 40, "a is drawn in 2 of 3 pairs");
    assert_eq!(won[&at(&inv, "c", 0)], 20);
    // One candidate: bound whatever the draw; none: steps 5-6 as in allocate.
    let one = Request {
        exclude: &[at(&inv, "a", 0), at(&inv, "b", 0)],
        ..Request::new("sobel")
    };
    assert_eq!(
        inv.allocate_two_choices(&one, &policy, 7),
        Decision::Bind(at(&inv, "c", 0))
    );
    assert_eq!(
        inv.allocate_two_choices(&Request::new("topk"), &policy, 7),
        inv.allocate(&Request::new("topk"), &policy)
    );
}

#[test]
fn two_choices_keeps_the_filters_of_steps_1_and_2() {
    let mut inv = inventory(&[
        ("a", 0, "sobel", 0.95, 0),
        ("b", 0, "sobel", 0.2, 0),
        ("c", 0, "sobel", 0.1, 0),
    ]);
    inv.set_ready(at(&inv, "c", 0), false);
    for choice in 0..10 {
        assert_eq!(
            inv.allocate_two_choices(&Request::new("sobel"), &Policy::default(), choice),
            Decision::Bind(at(&inv, "b", 0)),
            "above the ceiling (a) and lost (c) are never drawn"
        );
    }
}

#[test]
fn a_displaced_instance_binds_without_io_then_follows_up_by_chain_depth() {
    let inv = inventory(&[("a", 0, "sobel", 0.5, 1), ("b", 0, "echo", 0.0, 0)]);
    let policy = Policy::default();
    let chain = [at(&inv, "a", 0)];
    // The first try never reconfigures and avoids the chain.
    assert_eq!(
        inv.allocate(&Request::displaced("sobel", &chain), &policy),
        Decision::NoDevice
    );
    assert_eq!(
        inv.allocate(&Request::displaced("sobel", &[]), &policy),
        Decision::Bind(at(&inv, "a", 0))
    );
    // The follow-up may reconfigure; past MIGRATION_DEPTH_MAX only empty slots.
    assert_eq!(
        inv.allocate(&Request::followup("sobel", &chain), &policy),
        Decision::Reconfigure(at(&inv, "b", 0))
    );
    let long = [0; MIGRATION_DEPTH_MAX];
    assert_eq!(followup_reconfigure(&chain), Reconfigure::Any);
    assert_eq!(followup_reconfigure(&long), Reconfigure::EmptyOnly);
    assert_eq!(
        followup_reconfigure(&long[..MIGRATION_DEPTH_MAX - 1]),
        Reconfigure::Any
    );
}

#[test]
fn relievable_slots_are_ready_settled_above_the_ceiling_and_shared() {
    let mut inv = inventory(&[
        ("a", 0, "sobel", 0.95, 2),
        ("b", 0, "sobel", 0.95, 1),
        ("c", 0, "sobel", 0.9, 2),
        ("d", 0, "sobel", 0.95, 2),
        ("e", 0, "sobel", 0.95, 2),
    ]);
    inv.set_ready(at(&inv, "d", 0), false);
    inv.set_reconfiguring(at(&inv, "e", 0), true);
    let policy = Policy::default();
    let relievable: Vec<&str> = inv
        .iter()
        .filter(|(_, s)| s.relievable(&policy))
        .map(|(_, s)| &*s.spec.node)
        .collect();
    assert_eq!(
        relievable,
        ["a"],
        "one instance (b), at the ceiling (c), lost (d), reconfiguring (e)"
    );
}
