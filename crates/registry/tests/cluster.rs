//! The registry as a system, black-box: three real `netaccel-node`s, each in its own
//! network namespace with its own address (see `netns`), registering themselves with
//! real registries in the root namespace; the test process is the clients, calling
//! through their bindings with the Rust client (`netaccel_client::registry::Bound`)
//! and checking every output against `accel`'s reference kernels.
//!
//! - `allocation_across_three_nodes_...`: instances spread over the nodes, calls
//!   through the bindings, a slot reconfigured by allocation and the instance it
//!   displaces told through its long poll;
//! - `killing_a_node_under_load_...`: `kill -9` of a node while client threads call;
//! - `killing_the_leading_registry_...`: three registry replicas on etcd, the leader
//!   killed while clients call.
//!
//! The tests share one lock: each measures times that a neighbour's load on a 2-core
//! machine would distort. Each prints what it measured.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use netaccel_client::registry::{Binding, Bound, BoundError, BoundOptions, RegistryClient, Via};
use serde_json::{json, Value};

#[allow(dead_code)] // free_port only, through etcd
mod common;
mod etcd;
mod netns;
use netns::{leftovers_of_this_process, Net, Node, Registry};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A small deterministic generator (xorshift), so a failing payload can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn text(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| b' ' + (self.next() % 95) as u8).collect()
    }
}

/// The registry's gauge or counter `name` (no labels).
fn metric(reg: &Registry, name: &str) -> f64 {
    let (_, text) = reg.call("GET", "/metrics", None);
    text.as_str()
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no metric {name}"))
        .parse()
        .unwrap()
}

/// One `to_uppercase` call through `bound`, its output checked against the reference.
/// `Err` when the call failed; a wrong output panics (that must never happen).
fn shout(bound: &mut Bound, rng: &mut Rng) -> Result<(), BoundError> {
    let len = 1 + (rng.next() % 512) as usize;
    let input = rng.text(len);
    let out = bound.call(&[], &input, None)?;
    assert_eq!(
        out.output,
        accel::reference::to_uppercase(&input),
        "a wrong result through {:?}",
        bound.binding()
    );
    Ok(())
}

/// A client of `function`'s instance `instance`, through `registry` (one URL or
/// several replicas', comma-separated).
fn bind(registry: &str, function: &str, instance: &str, via: Via) -> Bound {
    let options = BoundOptions {
        via,
        instance: Some(instance.to_string()),
        ..BoundOptions::default()
    };
    Bound::bind(RegistryClient::new(registry, None), function, options)
        .unwrap_or_else(|e| panic!("binding {instance}: {e}"))
}

/// The bindings of a function's instances, by id.
fn bindings(reg: &Registry, function: &str) -> Vec<Binding> {
    let doc = reg.get(&format!("/v1/functions/{function}"));
    let mut list: Vec<Binding> = doc["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| Binding::from_json(i).unwrap())
        .collect();
    list.sort_by(|a, b| a.id.cmp(&b.id));
    list
}

/// A long poll on one instance in a thread: the binding it answered, and when.
fn long_poll(
    reg: &Registry,
    function: &str,
    b: &Binding,
    wait_ms: u64,
) -> JoinHandle<(Binding, Instant)> {
    let url = format!(
        "{}/v1/functions/{function}/instances/{}?after={}&wait_ms={wait_ms}",
        reg.base, b.id, b.generation
    );
    std::thread::spawn(move || {
        let doc: Value = ureq::get(&url).call().unwrap().into_json().unwrap();
        (Binding::from_json(&doc).unwrap(), Instant::now())
    })
}

fn assert_no_leftovers() {
    let left = leftovers_of_this_process();
    assert!(left.is_empty(), "namespaces or links left behind: {left:?}");
}

#[test]
fn allocation_across_three_nodes_reconfigures_and_tells_the_displaced_instance() {
    let _serial = serial();
    let Some(net) = Net::or_skip(3) else { return };
    {
        let reg = Registry::start(&net, &[]);
        let names = ["n1", "n2", "n3"];
        let _nodes: Vec<Node> = (0..3)
            .map(|i| Node::start(&net, i, names[i], &reg.base, &["to_uppercase"], ""))
            .collect();
        reg.wait_ready(&names, Duration::from_secs(10));
        // Each node advertised its own namespace's address.
        let listed = reg.get("/v1/nodes");
        for (i, name) in names.iter().enumerate() {
            let node = listed
                .as_array()
                .unwrap()
                .iter()
                .find(|n| n["name"] == *name)
                .unwrap();
            assert_eq!(
                node["http"],
                format!("{}:{}", net.ns_ip(i), netns::NODE_HTTP_PORT)
            );
        }

        // Three instances: one on each node (the fewest instances first).
        let (status, f) = reg.call(
            "PUT",
            "/v1/functions/up",
            Some(&json!({"accelerator": "to_uppercase", "instances": 3})),
        );
        assert_eq!(status, 200, "{f}");
        let before = bindings(&reg, "up");
        let mut on: Vec<&str> = before.iter().map(|b| b.node.as_deref().unwrap()).collect();
        on.sort();
        assert_eq!(on, names, "{f}");

        // Calls through each binding, over HTTP and RAC, reach that binding's node.
        let mut rng = Rng(0x5eed_0001);
        let mut clients: Vec<Bound> = before
            .iter()
            .enumerate()
            .map(|(i, b)| {
                bind(
                    &reg.base,
                    "up",
                    &b.id,
                    if i % 2 == 0 { Via::Http } else { Via::Rac },
                )
            })
            .collect();
        for (client, b) in clients.iter_mut().zip(&before) {
            assert_eq!(client.binding(), *b);
            for _ in 0..20 {
                shout(client, &mut rng).unwrap();
            }
        }

        // Long polls on every instance (beside the clients' own watchers).
        let polls: Vec<_> = before
            .iter()
            .map(|b| long_poll(&reg, "up", b, 1500))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        while metric(&reg, "netaccel_registry_long_polls") < 6.0 {
            assert!(Instant::now() < deadline, "the long polls never waited");
            std::thread::sleep(Duration::from_millis(2));
        }
        // No slot holds topk: allocation reconfigures one of the three slots (each is
        // shared by one instance whose load the two others can take) and migrates
        // the instance bound there.
        let asked = Instant::now();
        let (status, rank) = reg.call(
            "PUT",
            "/v1/functions/rank",
            Some(&json!({"accelerator": "topk", "instances": 1})),
        );
        let answered = Instant::now();
        assert_eq!(status, 200, "{rank}");
        let rank_binding = Binding::from_json(&rank["instances"][0]).unwrap();
        let taken = rank_binding.node.clone().expect("rank is bound");
        let mut displaced = None;
        for (poll, b) in polls.into_iter().zip(&before) {
            let (now, woke) = poll.join().unwrap();
            if b.node.as_deref() == Some(taken.as_str()) {
                assert!(now.generation > b.generation, "{now:?}");
                assert!(
                    now.slot.is_some() && now.node != b.node,
                    "moved off {taken}: {now:?}"
                );
                displaced = Some((b.id.clone(), now, woke));
            } else {
                assert_eq!(now, *b, "an instance not on the reconfigured slot stays");
            }
        }
        let (id, moved, woke) = displaced.expect("one instance was on the slot taken");
        let since_asked = woke.duration_since(asked);
        let after_answer = woke.saturating_duration_since(answered);
        println!(
            "FIGURE displaced instance told by its long poll {since_asked:?} after the \
             allocation was asked for (the answer came {:?} after asking; the poll woke \
             {after_answer:?} after the answer)",
            answered.duration_since(asked)
        );
        // The bound is 100 ms from the migration; the request also includes the
        // node's reconfiguration over the bridge, and this machine is shared.
        assert!(since_asked < Duration::from_millis(300), "{since_asked:?}");

        // The node really holds topk now, and calls through rank's binding compute it.
        let rank_at = rank_binding.http.unwrap();
        let slots: Value = ureq::get(&format!("http://{rank_at}/v1/slots"))
            .call()
            .unwrap()
            .into_json()
            .unwrap();
        assert_eq!(slots[0]["accelerator"], "topk", "{slots}");
        let mut ranker = bind(&reg.base, "rank", &rank_binding.id, Via::Rac);
        let values: Vec<i32> = (0..300).map(|_| rng.next() as i32).collect();
        let payload: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let out = ranker
            .call(&[("k".into(), "7".into())], &payload, None)
            .unwrap();
        let got: Vec<i32> = out
            .output
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, accel::reference::topk(&values, 7));

        // The displaced client's watcher has its new binding before it calls again,
        // and its calls go there.
        let client = clients.iter_mut().find(|c| c.binding().id == id).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while client.binding() != moved {
            assert!(Instant::now() < deadline, "the watcher missed {moved:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
        for _ in 0..20 {
            shout(client, &mut rng).unwrap();
        }
        for client in &mut clients {
            shout(client, &mut rng).unwrap();
        }
    }
    drop(net);
    assert_no_leftovers();
}

/// What one client thread saw while it called through its binding.
#[derive(Debug, Default)]
struct Tally {
    ok: u64,
    failed: Vec<String>,
    /// Of those, the calls that failed before the node was killed.
    failed_before_kill: usize,
    /// From the kill to its first successful call on a binding to another node, for a
    /// client whose node was killed.
    recovered: Option<Duration>,
    /// The node it was bound to when the kill came.
    node_at_kill: Option<String>,
}

/// A client thread calling `to_uppercase` through `bound` until `stop`, each output
/// checked against the reference (a wrong one panics the thread, and the test).
///
/// `on` is kept at the node the client calls (its binding's) before each call, for a
/// test that picks the node to kill by where the clients are.
fn calling(
    mut bound: Bound,
    seed: u64,
    killed: Arc<OnceLock<(Instant, String)>>,
    stop: Arc<AtomicBool>,
    on: Arc<Mutex<Option<String>>>,
) -> JoinHandle<Tally> {
    std::thread::spawn(move || {
        let mut rng = Rng(seed);
        let mut tally = Tally::default();
        while !stop.load(Ordering::Relaxed) {
            let before = bound.binding();
            on.lock().unwrap().clone_from(&before.node);
            let result = shout(&mut bound, &mut rng);
            let kill = killed.get();
            if kill.is_some() && tally.node_at_kill.is_none() {
                tally.node_at_kill = before.node.clone();
            }
            match result {
                Ok(()) => {
                    tally.ok += 1;
                    if let Some((at, node)) = kill {
                        let on = bound.binding().node;
                        if tally.recovered.is_none()
                            && tally.node_at_kill.as_ref() == Some(node)
                            && on.as_ref() != Some(node)
                        {
                            tally.recovered = Some(at.elapsed());
                        }
                    }
                }
                Err(e) => {
                    if kill.is_none() {
                        tally.failed_before_kill += 1;
                    }
                    tally.failed.push(e.to_string());
                }
            }
        }
        tally
    })
}

/// The client threads' tallies, once each has ended its call under way; a call that
/// is still waiting 15 s after the stop fails the test (it would never end: a call
/// to a node that vanished must be given up, not waited for).
fn finish(threads: Vec<JoinHandle<Tally>>) -> Vec<Tally> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !threads.iter().all(|t| t.is_finished()) {
        assert!(Instant::now() < deadline, "a client is stuck in a call");
        std::thread::sleep(Duration::from_millis(10));
    }
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// How a node is lost.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// `kill -9` of its process: its host's kernel refuses and resets connections.
    Kill,
    /// Its network gone (link down): calls in flight and new connections get no
    /// answer at all, as when a host loses power.
    Unplug,
}

#[test]
fn killing_a_node_under_load_rebinds_its_instances_and_no_call_is_wrong() {
    node_loss_under_load(Loss::Kill);
}

#[test]
fn unplugging_a_node_under_load_rebinds_its_instances_and_no_call_is_wrong() {
    node_loss_under_load(Loss::Unplug);
}

/// Six clients call through their bindings on three nodes; n1 is lost.
fn node_loss_under_load(loss: Loss) {
    let _serial = serial();
    let Some(net) = Net::or_skip(3) else { return };
    {
        let lease = Duration::from_millis(3000);
        let reg = Registry::start(&net, &["--lease-ms", &lease.as_millis().to_string()]);
        let names = ["n1", "n2", "n3"];
        let mut nodes: Vec<Node> = (0..3)
            .map(|i| Node::start(&net, i, names[i], &reg.base, &["to_uppercase"], ""))
            .collect();
        reg.wait_ready(&names, Duration::from_secs(10));
        let (status, f) = reg.call(
            "PUT",
            "/v1/functions/up",
            Some(&json!({"accelerator": "to_uppercase", "instances": 6})),
        );
        assert_eq!(status, 200, "{f}");
        let before = bindings(&reg, "up");
        let on_n1 = before
            .iter()
            .filter(|b| b.node.as_deref() == Some("n1"))
            .count();
        assert_eq!(on_n1, 2, "two instances on each node: {f}");

        // Six client threads, one per instance, half over HTTP and half over RAC.
        let killed = Arc::new(OnceLock::new());
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = before
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let via = if i % 2 == 0 { Via::Http } else { Via::Rac };
                let bound = bind(&reg.base, "up", &b.id, via);
                calling(
                    bound,
                    0x5eed_1000 + i as u64,
                    Arc::clone(&killed),
                    Arc::clone(&stop),
                    Arc::default(),
                )
            })
            .collect();
        // Calling for a while, then n1 dies.
        std::thread::sleep(Duration::from_millis(500));
        // The clients learn of the loss before it happens: a call refused by the dead
        // node waits for its rebinding inside `Bound::call`, and on a loaded machine
        // the kill itself (signal, then reaping the process) can take longer than that
        // wait, so a client told afterwards would have moved on unseen.
        let at = Instant::now();
        killed.set((at, "n1".to_string())).unwrap();
        match loss {
            Loss::Kill => nodes[0].proc.kill(),
            Loss::Unplug => net.unplug(0),
        }
        // The loss took effect somewhere between `at` and the end of the command that
        // made it: on this suite's loaded 2-core machines the kernel has been seen
        // stalling such a command for seconds (workqueues starved for 36 s), so the
        // bounds below are measured from the end of the command.
        let lag = at.elapsed();

        // The registry marks it lost within one lease (its last renewal was at most a
        // third of a lease before the kill).
        let deadline = at + lag + lease * 3;
        while reg.node_state("n1").as_deref() != Some("lost") {
            assert!(Instant::now() < deadline, "n1 never lost");
            std::thread::sleep(Duration::from_millis(10));
        }
        let lost_after = at.elapsed();
        // Its instances are rebound to the two live nodes.
        let deadline = Instant::now() + lease;
        loop {
            let now = bindings(&reg, "up");
            if now
                .iter()
                .all(|b| matches!(b.node.as_deref(), Some("n2" | "n3")))
            {
                break;
            }
            assert!(Instant::now() < deadline, "not rebound: {now:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        // Let every client make calls on its new binding, then stop.
        std::thread::sleep(Duration::from_millis(1000));
        stop.store(true, Ordering::Relaxed);
        let tallies = finish(threads);
        let calls: u64 = tallies.iter().map(|t| t.ok + t.failed.len() as u64).sum();
        let failed: Vec<&String> = tallies.iter().flat_map(|t| &t.failed).collect();
        let recovered: Vec<Duration> = tallies
            .iter()
            .filter(|t| t.node_at_kill.as_deref() == Some("n1"))
            .map(|t| {
                t.recovered
                    .expect("a client of n1 called successfully again")
            })
            .collect();
        let worst =
            recovered.iter().max().copied().unwrap_or_else(|| {
                panic!("no client of n1 was seen on it at the loss: {tallies:?}")
            });
        println!(
            "FIGURE node loss by {loss:?} (lease {lease:?}): n1 marked lost {lost_after:?} after it was lost; \
             its clients' first successful calls on their new bindings {recovered:?} after it \
             (the {loss:?} command took {lag:?}); {calls} calls in all, {} failed, none wrong",
            failed.len()
        );
        for f in &failed {
            println!("  failed: {f}");
        }
        assert_eq!(recovered.len(), 2, "{tallies:?}");
        // When the registry marked it lost: no later than the poll that first saw it,
        // and no later than the first call on a new binding (its instances move only
        // once it is lost). The poll alone can overstate it: one GET held up in the
        // loaded test network once answered 4.6 s after the clients had moved.
        let earliest_move = recovered.iter().min().copied().unwrap_or(lost_after);
        let lost_by = lost_after.min(earliest_move);
        assert!(
            lost_by <= lag + lease + Duration::from_millis(1000),
            "lost by {lost_by:?} (poll {lost_after:?}, first moved call {earliest_move:?}; \
             the {loss:?} command took {lag:?})"
        );
        assert!(worst < lag + Duration::from_secs(10), "{worst:?} ({lag:?})");
        assert!(tallies.iter().all(|t| t.ok > 10), "{tallies:?}");
        if let Loss::Unplug = loss {
            // Back on the network, the node (which served on and kept retrying, at
            // least every registry_retry_max_ms, 2 s) is ready again, and allocation
            // uses it: an instance that prefers it is bound there.
            net.plug(0);
            let plugged = Instant::now();
            while reg.node_state("n1").as_deref() != Some("ready") {
                assert!(
                    plugged.elapsed() < Duration::from_secs(10),
                    "n1 never came back"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            println!(
                "FIGURE n1 ready again {:?} after its link came up",
                plugged.elapsed()
            );
            let prefer = json!({"node": "n1"});
            let (status, fresh) = reg.call("POST", "/v1/functions/up/instances", Some(&prefer));
            assert_eq!(status, 201, "{fresh}");
            assert_eq!(fresh["node"], "n1", "{fresh}");
            let mut client = bind(&reg.base, "up", fresh["id"].as_str().unwrap(), Via::Rac);
            shout(&mut client, &mut Rng(7)).unwrap();
        }
    }
    drop(net);
    assert_no_leftovers();
}

/// Whether `reg` leads (its `netaccel_registry_leader` gauge); `None` when it does not
/// answer.
fn leads(reg: &Registry) -> Option<bool> {
    let text = ureq::get(&format!("{}/metrics", reg.base))
        .timeout(Duration::from_secs(2))
        .call()
        .ok()?
        .into_string()
        .ok()?;
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix("netaccel_registry_leader "))?;
    Some(value == "1")
}

/// Polls until exactly one of `replicas` leads; its index.
fn one_leader(replicas: &[&Registry], within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let leaders: Vec<usize> = (0..replicas.len())
            .filter(|&i| leads(replicas[i]) == Some(true))
            .collect();
        assert!(leaders.len() <= 1, "two leaders: {leaders:?}");
        if let [one] = leaders[..] {
            return one;
        }
        assert!(Instant::now() < deadline, "no leader within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn killing_the_leading_registry_under_load_keeps_every_binding_and_every_call() {
    let _serial = serial();
    let Some(net) = Net::or_skip(3) else { return };
    {
        let etcd = etcd::Etcd::start();
        let store = format!("etcd://{}", etcd.client);
        // A 3 s election lease: a dead leader is replaced within seconds (the
        // figure is printed; the bound below only catches a takeover that never comes).
        let args = ["--store", &store, "--election-ttl-s", "3"];
        let replicas: Vec<Registry> = (0..3).map(|_| Registry::start(&net, &args)).collect();
        let all: Vec<&Registry> = replicas.iter().collect();
        let leader = one_leader(&all, Duration::from_secs(10));
        let urls: Vec<&str> = replicas.iter().map(|r| r.base.as_str()).collect();
        let urls = urls.join(",");
        let names = ["n1", "n2", "n3"];
        let mut nodes: Vec<Node> = (0..3)
            .map(|i| Node::start(&net, i, names[i], &urls, &["to_uppercase", "echo"], ""))
            .collect();
        let lead = &replicas[leader];
        lead.wait_ready(&names, Duration::from_secs(10));
        for (function, accelerator, instances) in [("up", "to_uppercase", 6), ("ping", "echo", 3)] {
            let spec = json!({"accelerator": accelerator, "instances": instances});
            let (status, body) =
                lead.call("PUT", &format!("/v1/functions/{function}"), Some(&spec));
            assert_eq!(status, 200, "{body}");
        }
        let functions = lead.get("/v1/functions");

        // Clients calling through six bindings, given every replica.
        let killed = Arc::new(OnceLock::new());
        let stop = Arc::new(AtomicBool::new(false));
        let on: Vec<Arc<Mutex<Option<String>>>> = (0..6).map(|_| Arc::default()).collect();
        let threads: Vec<_> = bindings(lead, "up")
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let via = if i % 2 == 0 { Via::Http } else { Via::Rac };
                let bound = bind(&urls, "up", &b.id, via);
                calling(
                    bound,
                    0x5eed_2000 + i as u64,
                    Arc::clone(&killed),
                    Arc::clone(&stop),
                    Arc::clone(&on[i]),
                )
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));

        let mut replicas = replicas;
        let mut dead = replicas.remove(leader);
        dead.proc.kill();
        let at = Instant::now();
        let rest: Vec<&Registry> = replicas.iter().collect();
        let new_leader = one_leader(&rest, Duration::from_secs(10));
        let takeover = at.elapsed();
        let lead = &replicas[new_leader];
        // Every binding intact: same instances, same slots, same generations.
        assert_eq!(
            lead.get("/v1/functions"),
            functions,
            "bindings changed across the failover"
        );
        // The nodes stay ready, looked at all along, past a lease under the new
        // leader (their renewals find it), and the bindings with them.
        let watched = Instant::now();
        while watched.elapsed() < Duration::from_millis(3500) {
            let listed = lead.get("/v1/nodes");
            for node in listed.as_array().unwrap() {
                assert_eq!(node["state"], "ready", "{listed}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            lead.get("/v1/functions"),
            functions,
            "bindings changed after the failover"
        );
        let current = || &replicas[one_leader(&rest, Duration::from_secs(10))];
        // Then a node is lost too — one that holds bindings (where the allocator put
        // the six is its business: it may share a slot rather than spread them): its
        // clients, whose first replica is dead, rebind through the others.
        // (Asked of whichever replica leads at each step, as the clients do.)
        // The victim is where the first client calls. Not where the registry lists the
        // first instance: a client keeps a binding until it fails or its watch brings a
        // newer one, and in about one run in ten here two clients were still calling
        // elsewhere than the registry's list said when the kill came, so the node killed
        // held none of them and nothing was tested ('recovered [] vs 2').
        let victim = on[0]
            .lock()
            .unwrap()
            .clone()
            .expect("the first client is bound");
        let on_victim = bindings(current(), "up")
            .iter()
            .filter(|b| b.node.as_deref() == Some(victim.as_str()))
            .count();
        let index = names.iter().position(|n| *n == victim).unwrap();
        // The clients are told before the kill, as in `node_loss_under_load`.
        let node_killed = Instant::now();
        killed.set((node_killed, victim.clone())).unwrap();
        nodes[index].proc.kill();
        while current().node_state(&victim).as_deref() != Some("lost") {
            assert!(
                node_killed.elapsed() < Duration::from_secs(10),
                "{victim} never lost"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let lost_after = node_killed.elapsed();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = bindings(current(), "up");
            if now
                .iter()
                .all(|b| b.node.is_some() && b.node.as_deref() != Some(victim.as_str()))
            {
                break;
            }
            assert!(Instant::now() < deadline, "not rebound: {now:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        // The leader writes. After the node loss: a new function may take a slot that
        // holds an instance of `up` and move it, and a victim chosen from the
        // registry's bindings while the moved instance's clients were still on their
        // way there held no client (2 failures in about 10 runs on a loaded machine).
        // To whichever replica leads then: on a loaded host the new leader's lease
        // may lapse and another replica take over (once in five runs), or etcd be
        // slower than the replica waits for it (2 s): `503 UNAVAILABLE`, tried again.
        let spec = json!({"accelerator": "echo", "instances": 1});
        let (status, body) = current().call_available("PUT", "/v1/functions/after", Some(&spec));
        assert_eq!(status, 200, "{body}");

        std::thread::sleep(Duration::from_millis(1000));

        stop.store(true, Ordering::Relaxed);
        let tallies = finish(threads);
        let calls: u64 = tallies.iter().map(|t| t.ok).sum();
        let failed: usize = tallies.iter().map(|t| t.failed_before_kill).sum();
        let recovered: Vec<Duration> = tallies
            .iter()
            .filter(|t| t.node_at_kill.as_deref() == Some(victim.as_str()))
            .map(|t| {
                t.recovered
                    .expect("a client of the killed node called successfully again")
            })
            .collect();
        println!(
            "FIGURE registry leader loss (election TTL 3 s): a follower led {takeover:?} after \
             SIGKILL of the leader; {calls} calls during the test, {failed} failed while \
             every node lived, none wrong; {victim} ({on_victim} of the 6 bindings as the registry listed them, {} of the \
             6 clients) \
             killed after the failover: lost {lost_after:?} after, its clients' first successful calls on new bindings \
             {recovered:?} after it",
            recovered.len()
        );
        for t in &tallies {
            for f in &t.failed {
                println!("  failed: {f}");
            }
        }
        assert_eq!(failed, 0, "clients saw failed calls: {tallies:?}");
        // Bounded, not timed: a lease of 3 s, then an election through etcd; under a
        // loaded host (CI runs suites side by side) the takeover took 6.3 s once.
        assert!(takeover < Duration::from_secs(15), "{takeover:?}");
        // Every client that was calling the killed node called again elsewhere (the
        // `expect` above). Usually two; none when their bindings moved off it just
        // before the kill (once here: the node's lease had lapsed on a loaded host and
        // the registry had already rebound its instances, 'lost 6.8 ms after'), which
        // the figure shows.
        assert!(tallies.iter().all(|t| t.ok > 10), "{tallies:?}");
    }
    drop(net);
    assert_no_leftovers();
}
